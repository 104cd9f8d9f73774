/* SPDX-License-Identifier: MIT */
/* Softmax over rows, forward and backward, for one dtype T (see tmpl/dtype_on.h). */

/*
 * y = exp(x - m) / sum exp(x - m), m = max x. The sum accumulates in double,
 * so f32 rows of any length stay within a few ulp. Special rows: a NaN makes
 * the whole row NaN; only -inf (m = -inf) gives zeros; m = +inf gives the
 * limit, the +inf entries sharing weight 1 equally. A contiguous y row takes
 * the vectorized exp of src/kernels/vexp.c (f32: relative error about 1e-7).
 */
static inline __attribute__((always_inline)) void SFX(softmax_row)(const T *x, int64_t sx, T *y,
                                                                   int64_t sy, int64_t n) {
    T m = -INFINITY;
    bool nan = false;
    if (sx == 1) { /* the vectorized max (NaN skipped), then a vectorized NaN test */
        m = T_VMAX(x, n);
        int any = 0;
        for (int64_t i = 0; i < n; ++i)
            any |= x[i] != x[i];
        nan = any != 0;
    } else {
        for (int64_t i = 0; i < n; ++i) {
            T v = x[i * sx];
            m = v > m ? v : m;
            nan |= v != v;
        }
    }
    if (nan || m == -INFINITY || m == INFINITY) {
        int64_t ninf = 0;
        for (int64_t i = 0; i < n; ++i)
            ninf += x[i * sx] == INFINITY;
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = nan ? (T)NAN : x[i * sx] == INFINITY ? (T)(1.0 / (double)ninf) : (T)0;
        return;
    }
    double s = 0;
    if (sy == 1) {
        if (y != x)
            for (int64_t i = 0; i < n; ++i)
                y[i] = x[i * sx];
        s = T_VEXP_SUM(y, n, m);
        if (T_IS_F32) { /* the f32 lanes' sum is redone in double */
            s = 0;
            for (int64_t i = 0; i < n; ++i)
                s += y[i];
        }
    } else {
        for (int64_t i = 0; i < n; ++i) {
            T e = T_EXP(x[i * sx] - m);
            y[i * sy] = e;
            s += e;
        }
    }
    T inv = (T)(1.0 / s); /* s >= 1: the max contributes exp(0) */
    for (int64_t i = 0; i < n; ++i)
        y[i * sy] *= inv;
}

/* Rows are tasks, threaded (attn__k_parallel); y, dy, dx are the operands of it. */
typedef struct SFX(sm_ctx) {
    const k_iter *it;
    const T *y, *dy;
    T *out;
} SFX(sm_ctx);

static ATTN_CLONES void SFX(softmax_tasks)(void *ctx, int64_t r0, int64_t r1) {
    const SFX(sm_ctx) *c = ctx;
    const k_iter *it = c->it;
    int64_t sx = it->rstride[0], sy = it->rstride[1], off[2];
    for (int64_t r = r0; r < r1; ++r) {
        k_iter_row(it, r, off);
        if (sx == 1 && sy == 1)
            SFX(softmax_row)(c->y + off[0], 1, c->out + off[1], 1, it->n);
        else
            SFX(softmax_row)(c->y + off[0], sx, c->out + off[1], sy, it->n);
    }
}

static void SFX(softmax)(const k_iter *it, const attn_view *x, attn_view *y) {
    SFX(sm_ctx) c = {it, x->data, NULL, y->data};
    attn__k_parallel(it->nrows, (double)it->nrows * (double)it->n * 4 * K_MEM_FLOPS,
                     SFX(softmax_tasks), &c);
}

/* dx += y * (dy - <dy, y>) per row; the dot product in double. */
static inline __attribute__((always_inline)) void SFX(softmax_bwd_row)(const T *y, int64_t sy,
                                                                       const T *dy, int64_t sdy,
                                                                       T *dx, int64_t sdx,
                                                                       int64_t n) {
    enum { L = K_LANES }; /* the dot in lanes (k_lanes_sum, rows.h) */
    int64_t nl = n / L * L, i;
    double a[L] = {0}, dot = 0;
    for (i = 0; i < nl; i += L)
        for (int j = 0; j < L; ++j)
            a[j] += (double)y[(i + j) * sy] * dy[(i + j) * sdy];
    for (; i < n; ++i)
        dot += (double)y[i * sy] * dy[i * sdy];
    dot = k_lanes_sum(a, dot);
    for (i = 0; i < n; ++i)
        dx[i * sdx] += (T)(y[i * sy] * (dy[i * sdy] - dot));
}

static ATTN_CLONES void SFX(softmax_bwd_tasks)(void *ctx, int64_t r0, int64_t r1) {
    const SFX(sm_ctx) *c = ctx;
    const k_iter *it = c->it;
    int64_t s0 = it->rstride[0], s1 = it->rstride[1], s2 = it->rstride[2], off[3];
    for (int64_t r = r0; r < r1; ++r) {
        k_iter_row(it, r, off);
        if (s0 == 1 && s1 == 1 && s2 == 1)
            SFX(softmax_bwd_row)(c->y + off[0], 1, c->dy + off[1], 1, c->out + off[2], 1,
                                 it->n);
        else
            SFX(softmax_bwd_row)(c->y + off[0], s0, c->dy + off[1], s1, c->out + off[2], s2,
                                 it->n);
    }
}

static void SFX(softmax_bwd)(const k_iter *it, const attn_view *y, const attn_view *dy,
                             attn_view *dx) {
    SFX(sm_ctx) c = {it, y->data, dy->data, dx->data};
    attn__k_parallel(it->nrows, (double)it->nrows * (double)it->n * 2 * K_MEM_FLOPS,
                     SFX(softmax_bwd_tasks), &c);
}
