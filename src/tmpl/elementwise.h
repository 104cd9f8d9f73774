/* SPDX-License-Identifier: MIT */
/* Activations (forward, backward), adds and the broadcast-sum of add's backward, for one
 * dtype T (see tmpl/dtype_on.h). */

/*
 * The GELUs (tanh and erf forms) and their derivatives are the vectorized kernels
 * T_VGELU and T_VGELU_GRAD (src/kernels/vmath.c for f32, vmath_f64.c for f64), which
 * state their formulas; ReLU is here: max(x, 0) with NaN kept, derivative 0 at x = 0
 * (PyTorch's choice) and NaN propagated.
 */
static inline T SFX(relu)(T x) { return x < 0 ? (T)0 : x; }

static inline T SFX(relu_grad)(T x) { return x > 0 ? (T)1 : x == x ? (T)0 : x; }

/*
 * The activation maps run over tasks (a task: one chunk of K_CHUNK elements of
 * one row), split among the threads attn__threads grants (src/kernels/
 * elementwise.c). GELU takes the vectorized kernels on contiguous chunks
 * (strided ones are gathered into a stack buffer), ReLU the loops above.
 *
 * The forward is also the bias + activation epilogue of a GEMM: y = act(x + b)
 * with b (n) broadcast over rows, the pre-activation x + b optionally stored in
 * pre (the FFN's trace), all in one pass over each chunk while it is in L1.
 */
typedef struct SFX(act_ctx) {
    attn_act act;
    const k_iter *it; /* operands: x, b (broadcast; x when absent), pre (x when absent), y */
    const T *x, *b;
    T *pre, *y;
    const T *dy; /* backward: operands x, dy, dx (dx in y) */
    int64_t nchunk;
    bool acc; /* backward: dx += (else dx =) */
} SFX(act_ctx);

static void SFX(act_map)(attn_act act, const T *v, T *y, int64_t n) {
    if (act != ATTN_ACT_RELU)
        T_VGELU(act, v, y, n);
    else
        for (int64_t i = 0; i < n; ++i)
            y[i] = SFX(relu)(v[i]);
}

static ATTN_CLONES void SFX(act_tasks)(void *ctx, int64_t t0, int64_t t1) {
    const SFX(act_ctx) *c = ctx;
    const k_iter *it = c->it;
    int64_t sx = it->rstride[0], sb = it->rstride[1], sp = it->rstride[2], sy = it->rstride[3];
    T buf[K_CHUNK];
    for (int64_t t = t0; t < t1; ++t) {
        int64_t r = t / c->nchunk, c0 = (t % c->nchunk) * K_CHUNK, off[4];
        int64_t len = it->n - c0 < K_CHUNK ? it->n - c0 : K_CHUNK;
        k_iter_row(it, r, off);
        const T *xr = c->x + off[0] + c0 * sx;
        T *yr = c->y + off[3] + c0 * sy;
        if (!c->b && !c->pre && sx == 1 && sy == 1) {
            SFX(act_map)(c->act, xr, yr, len);
            continue;
        }
        if (c->b) {
            const T *br = c->b + off[1] + c0 * sb;
            for (int64_t i = 0; i < len; ++i)
                buf[i] = xr[i * sx] + br[i * sb];
        } else {
            for (int64_t i = 0; i < len; ++i)
                buf[i] = xr[i * sx];
        }
        if (c->pre) {
            T *pr = c->pre + off[2] + c0 * sp;
            for (int64_t i = 0; i < len; ++i)
                pr[i * sp] = buf[i];
        }
        if (sy == 1) {
            SFX(act_map)(c->act, buf, yr, len);
        } else {
            SFX(act_map)(c->act, buf, buf, len);
            for (int64_t i = 0; i < len; ++i)
                yr[i * sy] = buf[i];
        }
    }
}

/* y = act(x (+ b)), pre = x + b when asked; it over (x, b or x, pre or x, y). */
static void SFX(act)(attn_act act, const k_iter *it, const attn_view *x, const attn_view *b,
                     attn_view *pre, attn_view *y) {
    SFX(act_ctx) c = {act, it, x->data, b ? b->data : NULL, pre ? pre->data : NULL, y->data,
                      NULL, (it->n + K_CHUNK - 1) / K_CHUNK, false};
    int64_t tasks = it->nrows * c.nchunk;
    attn__k_parallel(tasks, (double)it->nrows * (double)it->n * K_ACT_FLOPS,
                     SFX(act_tasks), &c);
}

static ATTN_CLONES void SFX(act_bwd_tasks)(void *ctx, int64_t t0, int64_t t1) {
    const SFX(act_ctx) *c = ctx;
    const k_iter *it = c->it;
    int64_t s0 = it->rstride[0], s1 = it->rstride[1], s2 = it->rstride[2];
    T bx[K_CHUNK], bd[K_CHUNK], bo[K_CHUNK];
    for (int64_t t = t0; t < t1; ++t) {
        int64_t r = t / c->nchunk, c0 = (t % c->nchunk) * K_CHUNK, off[3];
        int64_t len = it->n - c0 < K_CHUNK ? it->n - c0 : K_CHUNK;
        k_iter_row(it, r, off);
        const T *xr = c->x + off[0] + c0 * s0, *dyr = c->dy + off[1] + c0 * s1;
        T *dxr = c->y + off[2] + c0 * s2;
        if (c->act != ATTN_ACT_RELU) {
            if (s0 == 1 && s1 == 1 && s2 == 1) {
                T_VGELU_GRAD(c->act, xr, dyr, dxr, len, c->acc);
                continue;
            }
            for (int64_t i = 0; i < len; ++i) {
                bx[i] = xr[i * s0];
                bd[i] = dyr[i * s1];
                bo[i] = c->acc ? dxr[i * s2] : (T)0;
            }
            T_VGELU_GRAD(c->act, bx, bd, bo, len, true);
            for (int64_t i = 0; i < len; ++i)
                dxr[i * s2] = bo[i];
            continue;
        }
        if (c->acc)
            for (int64_t i = 0; i < len; ++i)
                dxr[i * s2] += SFX(relu_grad)(xr[i * s0]) * dyr[i * s1];
        else
            for (int64_t i = 0; i < len; ++i)
                dxr[i * s2] = SFX(relu_grad)(xr[i * s0]) * dyr[i * s1];
    }
}

static void SFX(act_bwd)(attn_act act, const k_iter *it, const attn_view *x,
                         const attn_view *dy, attn_view *dx, bool acc) {
    SFX(act_ctx) c = {act, it, x->data, NULL, NULL, dx->data, dy->data,
                      (it->n + K_CHUNK - 1) / K_CHUNK, acc};
    attn__k_parallel(it->nrows * c.nchunk, (double)it->nrows * (double)it->n * K_ACT_FLOPS,
                     SFX(act_bwd_tasks), &c);
}

/* y = x + b (b already broadcast to x's shape); dx += dy is the same loop with y = dx. */
typedef struct SFX(add_ctx) {
    const k_iter *it;
    const T *x, *b;
    T *y;
    int64_t nchunk;
} SFX(add_ctx);

static ATTN_CLONES void SFX(add_tasks)(void *ctx, int64_t t0, int64_t t1) {
    const SFX(add_ctx) *c = ctx;
    const k_iter *it = c->it;
    int64_t s0 = it->rstride[0], s1 = it->rstride[1], s2 = it->rstride[2], off[3];
    for (int64_t t = t0; t < t1; ++t) {
        int64_t r = t / c->nchunk, c0 = (t % c->nchunk) * K_CHUNK;
        int64_t len = it->n - c0 < K_CHUNK ? it->n - c0 : K_CHUNK;
        k_iter_row(it, r, off);
        const T *xr = c->x + off[0] + c0 * s0, *br = c->b + off[1] + c0 * s1;
        T *yr = c->y + off[2] + c0 * s2;
        if (s0 == 1 && s1 == 1 && s2 == 1)
            for (int64_t i = 0; i < len; ++i)
                yr[i] = xr[i] + br[i];
        else if (s0 == 1 && s1 == 0 && s2 == 1)
            for (int64_t i = 0; i < len; ++i)
                yr[i] = xr[i] + br[0];
        else
            for (int64_t i = 0; i < len; ++i)
                yr[i * s2] = xr[i * s0] + br[i * s1];
    }
}

static void SFX(add)(const k_iter *it, const attn_view *x, const attn_view *b, attn_view *y) {
    SFX(add_ctx) c = {it, x->data, b->data, y->data, (it->n + K_CHUNK - 1) / K_CHUNK};
    attn__k_parallel(it->nrows * c.nchunk, (double)it->nrows * (double)it->n * K_MEM_FLOPS,
                     SFX(add_tasks), &c);
}

/*
 * db += dy summed over the axes db broadcasts along (db seen broadcast to dy's shape,
 * stride 0 on those axes). The kept axes are walked outside; the summed ones inside,
 * with partial sums in double on the stack (columns in chunks when the last axis is
 * kept), so f32 sums over many rows keep double accuracy without a workspace.
 */
typedef struct SFX(sum_ctx) {
    const k_sum *p;
    const T *dy;
    T *db;
    int64_t nchunk;
} SFX(sum_ctx);

static ATTN_CLONES void SFX(sum_tasks)(void *ctx, int64_t t0, int64_t t1) {
    enum { CHUNK = 256 };
    const SFX(sum_ctx) *c = ctx;
    const k_sum *p = c->p;
    for (int64_t t = t0; t < t1; ++t) {
        int64_t kk = t / c->nchunk, c0 = (t % c->nchunk) * CHUNK;
        int64_t ok_src, ok_dst, or_src, or_dst;
        k_sum_offset(&p->keep, kk, &ok_src, &ok_dst);
        if (!p->last_kept) {
            double acc = 0;
            for (int64_t rr = 0; rr < p->nred; ++rr) {
                k_sum_offset(&p->red, rr, &or_src, &or_dst);
                const T *s = c->dy + ok_src + or_src;
                for (int64_t i = 0; i < p->n; ++i)
                    acc += s[i * p->sn];
            }
            c->db[ok_dst] += (T)acc;
            continue;
        }
        int64_t len = p->n - c0 < CHUNK ? p->n - c0 : CHUNK;
        double acc[CHUNK] = {0};
        for (int64_t rr = 0; rr < p->nred; ++rr) {
            k_sum_offset(&p->red, rr, &or_src, &or_dst);
            const T *s = c->dy + ok_src + or_src + c0 * p->sn;
            if (p->sn == 1)
                for (int64_t i = 0; i < len; ++i)
                    acc[i] += s[i];
            else
                for (int64_t i = 0; i < len; ++i)
                    acc[i] += s[i * p->sn];
        }
        T *d = c->db + ok_dst + c0 * p->dn;
        for (int64_t i = 0; i < len; ++i)
            d[i * p->dn] += (T)acc[i];
    }
}

/* Tasks: kept index x column chunk of 256; each owns its db elements, so they run in parallel. */
static void SFX(sum_into)(const k_sum *p, const attn_view *dy, attn_view *db) {
    SFX(sum_ctx) c = {p, dy->data, db->data, p->last_kept ? (p->n + 255) / 256 : 1};
    attn__k_parallel(p->nkeep * c.nchunk,
                     (double)p->nkeep * (double)p->nred * (double)p->n * K_MEM_FLOPS,
                     SFX(sum_tasks), &c);
}
