/* SPDX-License-Identifier: MIT */
/* attn_sdpa: scaled dot-product attention, materialized or tiled (online softmax), threaded. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attn_config.h"
#include "kernels/sdpa_internal.h"

#if ATTN_HAVE_OPENMP
#include <omp.h>
#endif

/* ---- the plan shared with the backward ---------------------------------- */

static attn_status plan_mask(const attn_view *m, attn_dtype want, const int64_t *shape,
                             attn_view *out) {
    ATTN_TRY(attn_view_check(m));
    if (m->dtype != want)
        return ATTN_EDTYPE;
    return attn_view_broadcast(m, 4, shape, out);
}

attn_status attn__sdpa_plan_init(const attn_view *q, const attn_view *k, const attn_view *v,
                                 const attn_sdpa_opts *opts, bool want_weights,
                                 attn__sdpa_plan *p) {
    static const attn_sdpa_opts defaults = {0};
    if (!q || !k || !v)
        return ATTN_EINVAL;
    if (!opts)
        opts = &defaults;
    ATTN_TRY(attn__check_float(q, 4));
    ATTN_TRY(attn__check_float(k, 4));
    ATTN_TRY(attn__check_float(v, 4));
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return ATTN_EDTYPE;
    if ((unsigned)opts->causal > ATTN_CAUSAL_BOTTOM_RIGHT ||
        (unsigned)opts->algo > ATTN_ALGO_TILED || opts->block_q < 0 || opts->block_k < 0 ||
        opts->threads < 0 || !isfinite(opts->scale))
        return ATTN_EINVAL;
    attn__sdpa_plan t = {.dt = q->dtype};
    t.B = q->shape[0];
    t.H = q->shape[1];
    t.Tq = q->shape[2];
    t.D = q->shape[3];
    t.Hkv = k->shape[1];
    t.Tk = k->shape[2];
    t.Dv = v->shape[3];
    if (k->shape[0] != t.B || v->shape[0] != t.B || v->shape[1] != t.Hkv ||
        k->shape[3] != t.D || v->shape[2] != t.Tk)
        return ATTN_ESHAPE;
    if (t.Hkv == 0 ? t.H != 0 : t.H % t.Hkv != 0)
        return ATTN_ESHAPE;
    t.group = t.Hkv > 0 ? t.H / t.Hkv : 1;
    int64_t mshape[4] = {t.B, t.H, t.Tq, t.Tk};
    if (opts->keep) {
        ATTN_TRY(plan_mask(opts->keep, ATTN_U8, mshape, &t.keep));
        t.has_keep = true;
    }
    if (opts->bias) {
        ATTN_TRY(plan_mask(opts->bias, q->dtype, mshape, &t.bias));
        t.has_bias = true;
    }
    if (opts->kv_len)
        for (int64_t b = 0; b < t.B; ++b)
            if (opts->kv_len[b] < 0 || opts->kv_len[b] > t.Tk)
                return ATTN_EINVAL;
    t.kv_len = opts->kv_len;
    if (t.D > INT_MAX || t.Dv > INT_MAX)
        return ATTN_ERANGE;
    if (want_weights && opts->algo == ATTN_ALGO_TILED)
        return ATTN_EUNSUPPORTED;
    /* AUTO: whole rows when the weights are wanted, else tiles (identical for Tk <= bk) */
    t.tiled = opts->algo == ATTN_ALGO_TILED || (opts->algo == ATTN_ALGO_AUTO && !want_weights);
    t.bq = opts->block_q ? opts->block_q : t.tiled ? ATTN__SDPA_BQ : ATTN__SDPA_BQ_MAT;
    t.bk = t.tiled ? (opts->block_k ? opts->block_k : ATTN__SDPA_BK) : t.Tk;
    if (t.bq > t.Tq)
        t.bq = t.Tq;
    if (t.bk > t.Tk)
        t.bk = t.Tk;
    if (t.bq < 1)
        t.bq = 1;
    if (t.bk < 1)
        t.bk = 1;
    if (t.bq > INT_MAX || t.bk > INT_MAX)
        return ATTN_ERANGE;
    t.scale = opts->scale != 0.0 ? opts->scale : t.D > 0 ? 1.0 / sqrt((double)t.D) : 1.0;
    t.causal = opts->causal;
    t.causal_shift = opts->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? t.Tk - t.Tq : 0;
    t.threads = opts->threads;
    *p = t;
    return ATTN_OK;
}

bool attn__sdpa_keep_any(const attn__sdpa_plan *p, int64_t b, int64_t h, int64_t i0,
                         int64_t rows, int64_t j0, int64_t cols) {
    int64_t sj = p->keep.stride[3];
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t *kr = (const uint8_t *)attn__at4(&p->keep, b, h, i0 + r, j0);
        for (int64_t c = 0; c < cols; ++c)
            if (kr[c * sj])
                return true;
    }
    return false;
}

attn_view attn__sdpa_rows(const attn_view *v, int64_t b, int64_t h, int64_t r0, int64_t rows) {
    attn_view t = {.data = attn__at4(v, b, h, r0, 0), .dtype = v->dtype, .ndim = 2,
                   .shape = {rows, v->shape[3]}, .stride = {v->stride[2], v->stride[3]}};
    return t;
}

attn_view attn__sdpa_buf(attn_dtype dt, void *data, int64_t rows, int64_t cols, int64_t ld) {
    attn_view t = {.data = data, .dtype = dt, .ndim = 2, .shape = {rows, cols},
                   .stride = {ld, 1}};
    return t;
}

/* ---- per-dtype kernels --------------------------------------------------- */

/* Everything a forward task reads; per-thread scratch is carved at these offsets. */
typedef struct fwd_ctx {
    attn__sdpa_plan  p;
    attn_view        q, k, v, out;
    const attn_view *weights, *lse;
    size_t           off_s, off_acc, off_m, off_l, off_gw, gws, per_thread;
} fwd_ctx;

#define T float
#define SFX(name) name##_f32
#define EXP expf
#define VMAX attn__vmax_f32
#define VEXP_SUM attn__vexp_sum_f32
#include "tmpl/sdpa.h"
#undef T
#undef SFX
#undef EXP
#undef VMAX
#undef VEXP_SUM

#define T double
#define SFX(name) name##_f64
#define EXP exp
#define VMAX attn__vmax_f64
#define VEXP_SUM attn__vexp_sum_f64
#include "tmpl/sdpa.h"
#undef T
#undef SFX
#undef EXP
#undef VMAX
#undef VEXP_SUM

attn_status attn__sdpa_scores(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                              int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0,
                              int64_t cols, void *s, int64_t lds, void *gw, size_t gws) {
    /* S (rows, cols) = scale q[b, h, i0:] k[b, h / group, j0:]^T */
    attn_view qt = attn__sdpa_rows(q, b, h, i0, rows);
    attn_view kt = attn__sdpa_rows(k, b, h / p->group, j0, cols);
    attn_view st = attn__sdpa_buf(p->dt, s, rows, cols, lds);
    ATTN_TRY(attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, p->scale, &qt, &kt, 0.0, &st, gw, gws));
    if (p->dt == ATTN_F32)
        mask_tile_f32(p, b, h, i0, rows, j0, cols, s, lds);
    else
        mask_tile_f64(p, b, h, i0, rows, j0, cols, s, lds);
    return ATTN_OK;
}

/* ---- the forward --------------------------------------------------------- */

/* Validate the outputs against the plan (before anything is written). */
static attn_status check_outputs(const attn__sdpa_plan *p, const attn_view *q,
                                 const attn_view *k, const attn_view *v,
                                 const attn_sdpa_opts *opts, const attn_view *out) {
    if (!out)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(out, 4));
    const attn_view *w = opts ? opts->weights : NULL, *lse = opts ? opts->lse : NULL;
    if (w)
        ATTN_TRY(attn__check_float(w, 4));
    if (lse)
        ATTN_TRY(attn__check_float(lse, 3));
    if (out->dtype != p->dt || (w && w->dtype != p->dt) || (lse && lse->dtype != p->dt))
        return ATTN_EDTYPE;
    int64_t os[4] = {p->B, p->H, p->Tq, p->Dv}, ws[4] = {p->B, p->H, p->Tq, p->Tk};
    for (int d = 0; d < 4; ++d)
        if (out->shape[d] != os[d] || (w && w->shape[d] != ws[d]) ||
            (lse && d < 3 && lse->shape[d] != ws[d]))
            return ATTN_ESHAPE;
    const attn_view *outs[3] = {out, w, lse};
    const attn_view *ins[5] = {q, k, v, opts ? opts->keep : NULL, opts ? opts->bias : NULL};
    return attn__sdpa_check_aliasing(outs, 3, ins, 5);
}

attn_status attn__sdpa_check_aliasing(const attn_view *const *outs, int nout,
                                      const attn_view *const *ins, int nin) {
    for (int o = 0; o < nout; ++o) {
        if (!outs[o])
            continue;
        if (attn__self_overlaps(outs[o]))
            return ATTN_ESTRIDE;
        for (int i = 0; i < nin; ++i)
            if (ins[i] && attn_view_overlaps(outs[o], ins[i]))
                return ATTN_EALIAS;
        for (int o2 = 0; o2 < o; ++o2)
            if (outs[o2] && attn_view_overlaps(outs[o], outs[o2]))
                return ATTN_EALIAS;
    }
    return ATTN_OK;
}

/* Scratch per thread: score tile, accumulator, row max and sum, attn_gemm packing. */
static attn_status fwd_layout(fwd_ctx *c, int64_t *ntasks, int *nthreads, size_t *total) {
    const attn__sdpa_plan *p = &c->p;
    size_t es = attn_dtype_size(p->dt), s, acc, ml;
    if (!attn__mul_sz((size_t)p->bq, (size_t)p->bk, &s) || !attn__mul_sz(s, es, &s) ||
        !attn__mul_sz((size_t)p->bq, (size_t)p->Dv, &acc) || !attn__mul_sz(acc, es, &acc) ||
        s > SIZE_MAX / 4 || acc > SIZE_MAX / 4)
        return ATTN_ERANGE;
    ml = (size_t)p->bq * es;
    /* attn_gemm packs operands without a unit stride: size it on a full tile */
    c->gws = 0;
    if (p->B > 0 && p->H > 0 && p->Tq > 0 && p->Tk > 0) {
        attn_view qt = attn__sdpa_rows(&c->q, 0, 0, 0, p->bq);
        attn_view kt = attn__sdpa_rows(&c->k, 0, 0, 0, p->bk);
        attn_view vt = attn__sdpa_rows(&c->v, 0, 0, 0, p->bk);
        size_t g1 = attn__gemm_pack_size(&qt, ATTN_NO_TRANS) +
                    attn__gemm_pack_size(&kt, ATTN_TRANS);    /* S = q k^T */
        size_t g2 = attn__gemm_pack_size(&vt, ATTN_NO_TRANS); /* acc += P v */
        c->gws = g1 > g2 ? g1 : g2;
    }
    c->off_s = 0;
    c->off_acc = attn__align64(s);
    c->off_m = c->off_acc + attn__align64(acc);
    c->off_l = c->off_m + attn__align64(ml);
    c->off_gw = c->off_l + attn__align64(ml);
    if (!attn__add_sz(c->off_gw, attn__align64(c->gws), &c->per_thread))
        return ATTN_ERANGE;
    int64_t nqb = p->Tq > 0 ? (p->Tq + p->bq - 1) / p->bq : 0, n;
    if (!attn__mul_i64(p->B, p->H, &n) || !attn__mul_i64(n, nqb, &n))
        return ATTN_ERANGE;
    *ntasks = n;
    *nthreads = attn__threads(p->threads, n, attn__sdpa_flops(p));
    if (n == 0) {
        *total = 0;
        return ATTN_OK;
    }
    if (!attn__mul_sz(c->per_thread, (size_t)*nthreads, total))
        return ATTN_ERANGE;
    return ATTN_OK;
}

static attn_status fwd_prepare(const attn_view *q, const attn_view *k, const attn_view *v,
                               const attn_sdpa_opts *opts, fwd_ctx *c, int64_t *ntasks,
                               int *nthreads, size_t *total) {
    memset(c, 0, sizeof *c);
    bool want_w = opts && opts->weights;
    ATTN_TRY(attn__sdpa_plan_init(q, k, v, opts, want_w, &c->p));
    c->q = *q;
    c->k = *k;
    c->v = *v;
    return fwd_layout(c, ntasks, nthreads, total);
}

size_t attn_sdpa_workspace_size(const attn_view *q, const attn_view *k, const attn_view *v,
                                const attn_sdpa_opts *opts) {
    fwd_ctx c;
    int64_t ntasks;
    int nt;
    size_t total;
    if (fwd_prepare(q, k, v, opts, &c, &ntasks, &nt, &total) != ATTN_OK)
        return 0;
    return total;
}

/* One task of attn_sdpa's loop (attn__parallel_for): task t is (b, h, query block). */
typedef struct fwd_loop {
    fwd_ctx    *c;
    int64_t     nqb;
    void       *work;
    attn_status st;
} fwd_loop;

static void fwd_one(void *arg, int64_t t, int tid) {
    fwd_loop *l = arg;
    const attn__sdpa_plan *p = &l->c->p;
    int64_t qb = l->nqb - 1 - t % l->nqb, bh = t / l->nqb;
    char *wsp = (char *)l->work + (size_t)tid * l->c->per_thread;
    attn_status s = p->dt == ATTN_F32 ? fwd_task_f32(l->c, bh / p->H, bh % p->H, qb * p->bq, wsp)
                                      : fwd_task_f64(l->c, bh / p->H, bh % p->H, qb * p->bq, wsp);
    if (s != ATTN_OK)
        __atomic_store_n(&l->st, s, __ATOMIC_RELAXED);
}

attn_status attn_sdpa(const attn_view *q, const attn_view *k, const attn_view *v,
                      const attn_sdpa_opts *opts, attn_view *out, void *work,
                      size_t work_size) {
    fwd_ctx c;
    int64_t ntasks;
    int nt;
    size_t total;
    ATTN_TRY(fwd_prepare(q, k, v, opts, &c, &ntasks, &nt, &total));
    ATTN_TRY(check_outputs(&c.p, q, k, v, opts, out));
    c.out = *out;
    c.weights = opts ? opts->weights : NULL;
    c.lse = opts ? opts->lse : NULL;
    void *owned = NULL;
    ATTN_TRY(attn__work_acquire(&work, &work_size, total, &owned));
    /* nothing to write (Dv == 0, no lse, no weights): no loop over B*H*Tq rows (fuzz_sdpa) */
    bool idle = c.p.Dv == 0 && !c.lse && (!c.weights || c.p.Tk == 0);
    if (ntasks == 0 || idle) {
        free(owned);
        return ATTN_OK;
    }
    /* tasks (b, h, query block), the costliest (last, under causal) first */
    fwd_loop loop = {&c, (c.p.Tq + c.p.bq - 1) / c.p.bq, work, ATTN_OK};
    attn__parallel_for(nt, ntasks, fwd_one, &loop);
    attn_status st = loop.st;
    free(owned);
    ATTN_ASSERT(st == ATTN_OK); /* every tile product was validated by the plan */
    return st;
}
