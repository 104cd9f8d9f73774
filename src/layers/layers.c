/* SPDX-License-Identifier: MIT */
/* Layers: MHA, FFN and the encoder block, forward and backward, built only from attn kernels. */
#include <math.h>
#include <string.h>

#include "core/internal.h"

/*
 * Scratch planning. Every layer function runs its body twice: once in
 * counting mode (no data touched, only sizes summed: that is the
 * *_workspace_size query) and once for real, so the query and the carving
 * can never disagree.
 */
typedef struct plan {
    bool   counting;
    char  *base;
    size_t size, used;
    size_t inner; /* largest workspace a nested kernel call needs */
} plan;

static char plan_dummy[64] __attribute__((aligned(64)));

static void *plan_take(plan *pl, size_t bytes) {
    size_t off = attn__align64(pl->used);
    pl->used = off + attn__align64(bytes ? bytes : 1);
    /*
     * Counting: each scratch view gets its own never-dereferenced address above
     * user space. With one shared dummy, two scratch operands of a nested
     * query overlapped, the query said 0 (EALIAS) and the real pass ran out of
     * workspace when a weight had to be packed (fuzz_layers: encoder, w1
     * without a unit stride).
     */
    if (pl->counting)
        return (void *)(((uintptr_t)1 << 62) + off);
    return pl->base + off;
}

/* Remember a nested call's workspace need (counting) / hand it its region (real). */
static void plan_inner(plan *pl, size_t need) {
    if (need > pl->inner)
        pl->inner = need;
}
static void *inner_base(const plan *pl) {
    return pl->counting ? NULL : pl->base + attn__align64(pl->used);
}
static size_t inner_size(const plan *pl) {
    return pl->counting ? 0 : pl->size - attn__align64(pl->used);
}
static size_t plan_total(const plan *pl) { return attn__align64(pl->used) + pl->inner; }

/* A fresh (B, T, N) or (B, T) view in the scratch, zeroed when asked. */
static attn_view scratch(plan *pl, attn_dtype dt, int ndim, const int64_t *shape, bool zero) {
    size_t n = attn_dtype_size(dt);
    for (int k = 0; k < ndim; ++k)
        n *= (size_t)shape[k];
    void *p = plan_take(pl, n);
    if (zero && !pl->counting)
        memset(p, 0, n);
    attn_view v;
    attn_view_init(&v, dt, p, ndim, shape);
    return v;
}

/* Split (B, T, H*D) into heads (B, H, T, D) without copying. */
static attn_status heads_of(const attn_view *x, int64_t D, attn_view *out) {
    attn_view s;
    ATTN_TRY(attn_view_split(x, 2, D, &s));
    return attn_view_permute(&s, (const int[]){0, 2, 1, 3}, out);
}

/* Check that view v exists, has dtype dt and the given shape. */
static attn_status want_shape(const attn_view *v, attn_dtype dt, int ndim, const int64_t *shape) {
    if (!v)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(v));
    if (v->dtype != dt)
        return ATTN_EDTYPE;
    if (v->ndim != ndim)
        return ATTN_ESHAPE;
    for (int k = 0; k < ndim; ++k)
        if (v->shape[k] != shape[k])
            return ATTN_ESHAPE;
    return ATTN_OK;
}

/* An optional trace view: absent is fine, present must have the shape. */
static attn_status want_opt(const attn_view *v, attn_dtype dt, int ndim, const int64_t *shape) {
    return v ? want_shape(v, dt, ndim, shape) : ATTN_OK;
}

/* An output view: right shape, no broadcast / self-overlap, no overlap with inputs. */
static attn_status want_out(const attn_view *v, attn_dtype dt, int ndim, const int64_t *shape,
                            const attn_view *const *inputs, int ninputs) {
    ATTN_TRY(want_shape(v, dt, ndim, shape));
    if (attn__self_overlaps(v))
        return ATTN_ESTRIDE;
    for (int i = 0; i < ninputs; ++i)
        if (inputs[i] && attn_view_overlaps(v, inputs[i]))
            return ATTN_EALIAS;
    return ATTN_OK;
}

/*
 * Aliasing for whole layer calls: every output view against every input (the
 * opts masks included) and every other output (the same view object twice
 * among the outputs is one output, as a trace may name one view twice; NULL
 * and invalid views are skipped: the other checks report them). Spans are
 * taken once, so a call with a full trace costs a few hundred pointer compares.
 */
enum { MAX_ALIAS_VIEWS = 64 };
static attn_status no_alias(const attn_view *const *outs, int no, const attn_view *const *ins,
                            int ni) {
    const void *lo[MAX_ALIAS_VIEWS], *hi[MAX_ALIAS_VIEWS];
    const attn_view *all[MAX_ALIAS_VIEWS];
    int n = 0;
    for (int i = 0; i < no; ++i)
        all[n++] = outs[i];
    for (int i = 0; i < ni; ++i)
        all[n++] = ins[i];
    for (int i = 0; i < n; ++i) {
        lo[i] = hi[i] = NULL;
        if (all[i])
            attn_view_span(all[i], &lo[i], &hi[i]);
    }
    for (int i = 0; i < no; ++i)
        for (int j = i + 1; j < n; ++j)
            if (lo[i] != hi[i] && lo[j] != hi[j] && (j >= no || all[i] != all[j]) &&
                (const char *)lo[i] < (const char *)hi[j] &&
                (const char *)lo[j] < (const char *)hi[i])
                return ATTN_EALIAS;
    return ATTN_OK;
}

/* Append the views of a parameter (or gradient) struct that cfg uses; return the count. */
static int mha_views(const attn_mha_config *c, const attn_mha_params *p, const attn_view **l,
                     int n) {
    if (!p)
        return n;
    const attn_view *v[] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < (c->bias ? 8 : 4); ++i)
        l[n++] = v[i];
    return n;
}
static int ffn_views(const attn_ffn_config *c, const attn_ffn_params *p, const attn_view **l,
                     int n) {
    if (!p)
        return n;
    const attn_view *v[] = {&p->w1, &p->w2, &p->b1, &p->b2};
    for (int i = 0; i < (c->bias ? 4 : 2); ++i)
        l[n++] = v[i];
    return n;
}
static int enc_views(const attn_encoder_config *c, const attn_encoder_params *p,
                     const attn_view **l, int n) {
    if (!p)
        return n;
    if (c->ln_affine) {
        l[n++] = &p->ln1_g, l[n++] = &p->ln1_b;
        l[n++] = &p->ln2_g, l[n++] = &p->ln2_b;
    }
    return ffn_views(&c->ffn, &p->ffn, l, mha_views(&c->mha, &p->mha, l, n));
}
static int trace_views(const attn_trace *t, const attn_view **l, int n) {
    if (!t)
        return n;
    const attn_view *v[] = {t->ln1,        t->q,          t->k,
                            t->v,          t->scores,     t->attention,
                            t->read_values, t->concat,    t->projected_attention,
                            t->residual1,  t->ln2,        t->mlp_hidden_pre,
                            t->mlp_hidden, t->mlp_output, t->output,
                            t->lse,        t->ln1_mean,   t->ln1_rstd,
                            t->ln2_mean,   t->ln2_rstd,   t->residual2};
    for (size_t i = 0; i < sizeof v / sizeof *v; ++i)
        l[n++] = v[i];
    return n;
}

static const attn_trace no_trace;
static const attn_sdpa_opts default_opts;

/* Carve a convenience workspace for the real pass, or check the caller's. */
static attn_status run_acquire(size_t need, void **work, size_t *size, void **owned) {
    return attn__work_acquire(work, size, need, owned);
}

/* ======================================================================== */
/* MHA                                                                       */
/* ======================================================================== */

attn_status attn_mha_config_resolve(const attn_mha_config *cfg, attn_mha_config *out) {
    if (!cfg || !out)
        return ATTN_EINVAL;
    attn_mha_config c = *cfg;
    if (c.dtype == 0)
        c.dtype = ATTN_F32;
    if (c.dtype != ATTN_F32 && c.dtype != ATTN_F64)
        return ATTN_EINVAL;
    if (c.d_model < 1 || c.heads < 1 || c.kv_heads < 0 || c.d_head < 0 || c.d_kv < 0)
        return ATTN_EINVAL;
    if (c.kv_heads == 0)
        c.kv_heads = c.heads;
    if (c.heads % c.kv_heads != 0)
        return ATTN_EINVAL;
    if (c.d_head == 0) {
        if (c.d_model % c.heads != 0)
            return ATTN_EINVAL;
        c.d_head = c.d_model / c.heads;
    }
    if (c.d_kv == 0)
        c.d_kv = c.d_model;
    int64_t t;
    if (!attn__mul_i64(c.heads, c.d_head, &t) || !attn__mul_i64(t, c.d_model, &t) ||
        !attn__mul_i64(c.kv_heads, c.d_head, &t) || !attn__mul_i64(t, c.d_kv, &t))
        return ATTN_EINVAL;
    *out = c;
    return ATTN_OK;
}

/* The eight parameter tensors of an MHA config, in slab order. */
static int mha_shapes(const attn_mha_config *c, int64_t shp[8][2], int *nd) {
    int64_t hd = c->heads * c->d_head, kd = c->kv_heads * c->d_head;
    int64_t s[8][2] = {{c->d_model, hd}, {c->d_kv, kd}, {c->d_kv, kd}, {hd, c->d_model},
                       {hd, 0},          {kd, 0},       {kd, 0},       {c->d_model, 0}};
    memcpy(shp, s, sizeof s);
    for (int i = 0; i < 8; ++i)
        nd[i] = i < 4 ? 2 : 1;
    return c->bias ? 8 : 4;
}

static size_t tensor_bytes(attn_dtype dt, int nd, const int64_t *shape) {
    size_t n = attn_dtype_size(dt);
    for (int k = 0; k < nd; ++k)
        n *= (size_t)shape[k];
    return attn__align64(n);
}

/* Bytes of a slab holding n tensors (each 64-byte aligned), and their scalar count. */
static size_t slab_bytes(attn_dtype dt, int n, int64_t shp[][2], const int *nd) {
    size_t total = 0;
    for (int i = 0; i < n; ++i)
        total += tensor_bytes(dt, nd[i], shp[i]);
    return total;
}
static int64_t scalar_count(int n, int64_t shp[][2], const int *nd) {
    int64_t total = 0;
    for (int i = 0; i < n; ++i)
        total += shp[i][0] * (nd[i] == 2 ? shp[i][1] : 1);
    return total;
}

size_t attn_mha_params_size(const attn_mha_config *cfg) {
    attn_mha_config c;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    int64_t shp[8][2];
    int nd[8], n = mha_shapes(&c, shp, nd);
    return slab_bytes(c.dtype, n, shp, nd);
}

int64_t attn_mha_param_count(const attn_mha_config *cfg) {
    attn_mha_config c;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK)
        return -1;
    int64_t shp[8][2];
    int nd[8], n = mha_shapes(&c, shp, nd);
    return scalar_count(n, shp, nd);
}

/* Bind tensors of given shapes in order from a slab; views land in out[]. */
static attn_status bind_slab(attn_dtype dt, int n, int64_t shp[][2], const int *nd,
                             void *slab, size_t slab_size, attn_view *out) {
    size_t need = slab_bytes(dt, n, shp, nd);
    if (!slab || ((uintptr_t)slab & 63u))
        return ATTN_EINVAL;
    if (slab_size < need)
        return ATTN_EWORKSPACE;
    char *p = slab;
    for (int i = 0; i < n; ++i) {
        ATTN_TRY(attn_view_init(&out[i], dt, p, nd[i], shp[i]));
        p += tensor_bytes(dt, nd[i], shp[i]);
    }
    return ATTN_OK;
}

attn_status attn_mha_params_bind(attn_mha_params *p, const attn_mha_config *cfg, void *slab,
                                 size_t slab_size) {
    attn_mha_config c;
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    int64_t shp[8][2];
    int nd[8], n = mha_shapes(&c, shp, nd);
    attn_view v[8];
    memset(v, 0, sizeof v);
    ATTN_TRY(bind_slab(c.dtype, n, shp, nd, slab, slab_size, v));
    attn_mha_params r = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    *p = r;
    return ATTN_OK;
}

static attn_status check_mha_params(const attn_mha_config *c, const attn_mha_params *p) {
    if (!p)
        return ATTN_EINVAL;
    int64_t shp[8][2];
    int nd[8], n = mha_shapes(c, shp, nd);
    const attn_view *v[8] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < n; ++i)
        ATTN_TRY(want_shape(v[i], c->dtype, nd[i], shp[i]));
    return ATTN_OK;
}

/* Shapes of the activations of one MHA call, after validation. */
typedef struct mha_dims {
    int64_t B, Tq, Tk, HD, KD;
    const attn_view *xq, *xkv;
} mha_dims;

static attn_status mha_validate(const attn_mha_config *c, const attn_mha_params *p,
                                const attn_view *x_q, const attn_view *x_kv, mha_dims *d) {
    ATTN_TRY(check_mha_params(c, p));
    if (!x_q)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x_q));
    if (x_q->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (x_q->ndim != 3 || x_q->shape[2] != c->d_model)
        return ATTN_ESHAPE;
    d->B = x_q->shape[0];
    d->Tq = x_q->shape[1];
    d->xq = x_q;
    d->xkv = x_kv ? x_kv : x_q;
    ATTN_TRY(attn_view_check(d->xkv));
    if (d->xkv->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (d->xkv->ndim != 3 || d->xkv->shape[0] != d->B || d->xkv->shape[2] != c->d_kv)
        return ATTN_ESHAPE;
    d->Tk = d->xkv->shape[1];
    d->HD = c->heads * c->d_head;
    d->KD = c->kv_heads * c->d_head;
    return ATTN_OK;
}

/* Masks and options are checked before any output is written. */
static attn_status check_opts(const attn_sdpa_opts *o, attn_dtype dt, const mha_dims *d,
                              int64_t H) {
    if ((unsigned)o->causal > ATTN_CAUSAL_BOTTOM_RIGHT || (unsigned)o->algo > ATTN_ALGO_TILED)
        return ATTN_EINVAL;
    int64_t full[4] = {d->B, H, d->Tq, d->Tk};
    attn_view tmp;
    if (o->keep) {
        ATTN_TRY(attn_view_check(o->keep));
        if (o->keep->dtype != ATTN_U8)
            return ATTN_EDTYPE;
        ATTN_TRY(attn_view_broadcast(o->keep, 4, full, &tmp));
    }
    if (o->bias) {
        ATTN_TRY(attn_view_check(o->bias));
        if (o->bias->dtype != dt)
            return ATTN_EDTYPE;
        ATTN_TRY(attn_view_broadcast(o->bias, 4, full, &tmp));
    }
    if (o->kv_len)
        for (int64_t b = 0; b < d->B; ++b)
            if (o->kv_len[b] < 0 || o->kv_len[b] > d->Tk)
                return ATTN_ERANGE;
    return ATTN_OK;
}

/*
 * The scaled, masked scores for the trace: S = scale Q Kᵀ + bias, with
 * masked entries -inf, computed apart from attn_sdpa (which never stores
 * them) through attn_gemm one (batch, head) at a time.
 */
static attn_status trace_scores(const attn_mha_config *c, const mha_dims *d,
                                const attn_sdpa_opts *o, const attn_view *qh,
                                const attn_view *kh, attn_view *scores, plan *pl) {
    double scale = o->scale != 0 ? o->scale : 1.0 / sqrt((double)c->d_head);
    int64_t G = c->heads / c->kv_heads;
    int64_t full[4] = {d->B, c->heads, d->Tq, d->Tk};
    attn_view keep, bias;
    if (o->keep)
        ATTN_TRY(attn_view_broadcast(o->keep, 4, full, &keep));
    if (o->bias)
        ATTN_TRY(attn_view_broadcast(o->bias, 4, full, &bias));
    for (int64_t b = 0; b < d->B; ++b)
        for (int64_t h = 0; h < c->heads; ++h) {
            attn_view q2, k2, s2, t;
            ATTN_TRY(attn_view_select(qh, 0, b, &t));
            ATTN_TRY(attn_view_select(&t, 0, h, &q2));
            ATTN_TRY(attn_view_select(kh, 0, b, &t));
            ATTN_TRY(attn_view_select(&t, 0, h / G, &k2));
            ATTN_TRY(attn_view_select(scores, 0, b, &t));
            ATTN_TRY(attn_view_select(&t, 0, h, &s2));
            if (pl->counting) {
                plan_inner(pl, attn_gemm_workspace_size(ATTN_NO_TRANS, ATTN_TRANS, &q2, &k2,
                                                        &s2));
                continue;
            }
            ATTN_TRY(attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, scale, &q2, &k2, 0.0, &s2,
                               inner_base(pl), inner_size(pl)));
            int64_t lim = o->kv_len ? o->kv_len[b] : d->Tk;
            for (int64_t i = 0; i < d->Tq; ++i)
                for (int64_t j = 0; j < d->Tk; ++j) {
                    int64_t idx[4] = {b, h, i, j}, ij[2] = {i, j};
                    double *pd = attn__elem(&s2, ij);
                    float *pf = (float *)pd;
                    double x = c->dtype == ATTN_F64 ? *pd : *pf;
                    if (o->bias)
                        x += c->dtype == ATTN_F64 ? *(double *)attn__elem(&bias, idx)
                                                  : *(float *)attn__elem(&bias, idx);
                    bool masked = j >= lim;
                    if (o->keep && *(uint8_t *)attn__elem(&keep, idx) == 0)
                        masked = true;
                    if (o->causal == ATTN_CAUSAL_TOP_LEFT && j > i)
                        masked = true;
                    if (o->causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + d->Tk - d->Tq)
                        masked = true;
                    if (masked)
                        x = -INFINITY;
                    if (c->dtype == ATTN_F64)
                        *pd = x;
                    else
                        *pf = (float)x;
                }
        }
    return ATTN_OK;
}

/* One linear map inside a plan: size query when counting, the call otherwise. */
static attn_status lin(plan *pl, const attn_view *x, const attn_view *w, const attn_view *b,
                       attn_view *y) {
    if (pl->counting) {
        plan_inner(pl, attn_linear_workspace_size(x, w, y));
        return ATTN_OK;
    }
    return attn_linear(x, w, b, y, inner_base(pl), inner_size(pl));
}

static attn_status lin_back(plan *pl, const attn_view *x, const attn_view *w,
                            const attn_view *dy, attn_view *dx, attn_view *dw, attn_view *db) {
    if (pl->counting) {
        plan_inner(pl, attn_linear_backward_workspace_size(x, w, dy, dx, dw));
        return ATTN_OK;
    }
    return attn_linear_backward(x, w, dy, dx, dw, db, inner_base(pl), inner_size(pl));
}

/* Check the trace views MHA fills, against the call's shapes. */
static attn_status mha_check_trace(const attn_mha_config *c, const mha_dims *d,
                                   const attn_trace *tr) {
    attn_dtype dt = c->dtype;
    int64_t sq[3] = {d->B, d->Tq, d->HD}, sk[3] = {d->B, d->Tk, d->KD};
    int64_t ss[4] = {d->B, c->heads, d->Tq, d->Tk}, so[4] = {d->B, c->heads, d->Tq, c->d_head};
    int64_t sl[3] = {d->B, c->heads, d->Tq};
    ATTN_TRY(want_opt(tr->q, dt, 3, sq));
    ATTN_TRY(want_opt(tr->k, dt, 3, sk));
    ATTN_TRY(want_opt(tr->v, dt, 3, sk));
    ATTN_TRY(want_opt(tr->concat, dt, 3, sq));
    ATTN_TRY(want_opt(tr->scores, dt, 4, ss));
    ATTN_TRY(want_opt(tr->attention, dt, 4, ss));
    ATTN_TRY(want_opt(tr->read_values, dt, 4, so));
    ATTN_TRY(want_opt(tr->lse, dt, 3, sl));
    const attn_view *outs[] = {tr->q, tr->k, tr->v, tr->concat, tr->scores, tr->attention,
                               tr->read_values, tr->lse};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; ++i) {
        if (!outs[i])
            continue;
        if (attn__self_overlaps(outs[i]))
            return ATTN_ESTRIDE;
        if (attn_view_overlaps(outs[i], d->xq) || attn_view_overlaps(outs[i], d->xkv))
            return ATTN_EALIAS;
    }
    return ATTN_OK;
}

/* The MHA forward body: the query (counting) and the call share it. */
static attn_status mha_body(const attn_mha_config *c, const attn_mha_params *p,
                            const mha_dims *d, const attn_sdpa_opts *opts, attn_view *out,
                            const attn_trace *tr, plan *pl) {
    attn_dtype dt = c->dtype;
    int64_t sq[3] = {d->B, d->Tq, d->HD}, sk[3] = {d->B, d->Tk, d->KD};
    /* Q, K, V (B, T, heads*D) and the merged-heads output (B, Tq, H*D) */
    attn_view Q = tr->q ? *tr->q : scratch(pl, dt, 3, sq, false);
    attn_view K = tr->k ? *tr->k : scratch(pl, dt, 3, sk, false);
    attn_view V = tr->v ? *tr->v : scratch(pl, dt, 3, sk, false);
    attn_view O = tr->concat ? *tr->concat : scratch(pl, dt, 3, sq, false);
    ATTN_TRY(lin(pl, d->xq, &p->wq, c->bias ? &p->bq : NULL, &Q));
    ATTN_TRY(lin(pl, d->xkv, &p->wk, c->bias ? &p->bk : NULL, &K));
    ATTN_TRY(lin(pl, d->xkv, &p->wv, c->bias ? &p->bv : NULL, &V));
    /* heads are views: (B, T, H*D) -> (B, H, T, D); sdpa writes O merged in place */
    attn_view Qh, Kh, Vh, Oh;
    ATTN_TRY(heads_of(&Q, c->d_head, &Qh));
    ATTN_TRY(heads_of(&K, c->d_head, &Kh));
    ATTN_TRY(heads_of(&V, c->d_head, &Vh));
    ATTN_TRY(heads_of(&O, c->d_head, &Oh));
    attn_sdpa_opts o = *opts;
    o.weights = tr->attention;
    o.lse = tr->lse;
    if (tr->attention)
        o.algo = ATTN_ALGO_MATERIALIZED;
    if (tr->scores)
        ATTN_TRY(trace_scores(c, d, &o, &Qh, &Kh, tr->scores, pl));
    if (pl->counting)
        plan_inner(pl, attn_sdpa_workspace_size(&Qh, &Kh, &Vh, &o));
    else
        ATTN_TRY(attn_sdpa(&Qh, &Kh, &Vh, &o, &Oh, inner_base(pl), inner_size(pl)));
    if (tr->read_values && !pl->counting)
        ATTN_TRY(attn_view_copy(&Oh, tr->read_values));
    /* out = concat Wo + bo */
    return lin(pl, &O, &p->wo, c->bias ? &p->bo : NULL, out);
}

static attn_status mha_prepare(const attn_mha_config *cfg, const attn_mha_params *p,
                               const attn_view *x_q, const attn_view *x_kv,
                               const attn_sdpa_opts **opts, const attn_trace **trace,
                               attn_mha_config *c, mha_dims *d) {
    ATTN_TRY(attn_mha_config_resolve(cfg, c));
    ATTN_TRY(mha_validate(c, p, x_q, x_kv, d));
    if (!*opts)
        *opts = &default_opts;
    if (!*trace)
        *trace = &no_trace;
    ATTN_TRY(check_opts(*opts, c->dtype, d, c->heads));
    return mha_check_trace(c, d, *trace);
}

/*
 * Parameter views with the right shapes over a dummy pointer, for size
 * queries: they assume weights with a unit stride in one dim (slab-bound or
 * PyTorch-transposed). Weights with no unit stride need packing room the
 * query does not count (the call then reports ATTN_EWORKSPACE).
 */
static void shape_only(attn_dtype dt, int n, int64_t shp[][2], const int *nd, attn_view *v) {
    for (int i = 0; i < n; ++i)
        attn_view_init(&v[i], dt, plan_dummy, nd[i], shp[i]);
}

static void mha_shape_params(const attn_mha_config *c, attn_mha_params *p) {
    int64_t shp[8][2];
    int nd[8];
    mha_shapes(c, shp, nd);
    attn_view v[8];
    shape_only(c->dtype, 8, shp, nd, v);
    attn_mha_params r = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    *p = r;
}

size_t attn_mha_workspace_size(const attn_mha_config *cfg, const attn_view *x_q,
                               const attn_view *x_kv, const attn_sdpa_opts *opts,
                               const attn_trace *trace) {
    attn_mha_config c;
    mha_dims d;
    attn_mha_params p;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    mha_shape_params(&c, &p);
    if (mha_prepare(cfg, &p, x_q, x_kv, &opts, &trace, &c, &d) != ATTN_OK)
        return 0;
    plan pl = {.counting = true};
    attn_view out;
    attn_view_init(&out, c.dtype, plan_dummy, 3, (int64_t[]){d.B, d.Tq, c.d_model});
    if (mha_body(&c, &p, &d, opts, &out, trace, &pl) != ATTN_OK)
        return 0;
    return plan_total(&pl);
}

/* Run a layer body for real: count first, then carve the caller's workspace. */
#define RUN_BODY(body_call_counting, body_call_real)                          \
    do {                                                                      \
        plan cnt = {.counting = true};                                        \
        plan *pl = &cnt;                                                      \
        ATTN_TRY(body_call_counting);                                         \
        void *owned = NULL;                                                   \
        ATTN_TRY(run_acquire(plan_total(&cnt), &work, &work_size, &owned));   \
        plan real = {.base = work, .size = work_size};                        \
        pl = &real;                                                           \
        attn_status st_ = (body_call_real);                                   \
        free(owned);                                                          \
        return st_;                                                           \
    } while (0)

attn_status attn_mha_forward(const attn_mha_config *cfg, const attn_mha_params *p,
                             const attn_view *x_q, const attn_view *x_kv,
                             const attn_sdpa_opts *opts, attn_view *out,
                             const attn_trace *trace, void *work, size_t work_size) {
    attn_mha_config c;
    mha_dims d;
    ATTN_TRY(mha_prepare(cfg, p, x_q, x_kv, &opts, &trace, &c, &d));
    ATTN_TRY(want_out(out, c.dtype, 3, (int64_t[]){d.B, d.Tq, c.d_model}, NULL, 0));
    const attn_view *ins[MAX_ALIAS_VIEWS] = {x_q, x_kv, opts->keep, opts->bias};
    const attn_view *outs[MAX_ALIAS_VIEWS] = {out};
    ATTN_TRY(no_alias(outs, trace_views(trace, outs, 1), ins, mha_views(&c, p, ins, 4)));
    RUN_BODY(mha_body(&c, p, &d, opts, out, trace, pl),
             mha_body(&c, p, &d, opts, out, trace, pl));
}

/* ---- MHA backward ------------------------------------------------------ */

static attn_status mha_check_cache(const attn_mha_config *c, const mha_dims *d,
                                   const attn_trace *cache) {
    if (!cache || !cache->q || !cache->k || !cache->v || !cache->concat || !cache->lse)
        return ATTN_EINVAL;
    return mha_check_trace(c, d, cache);
}

static attn_status check_grads_mha(const attn_mha_config *c, const attn_mha_params *g) {
    return g ? check_mha_params(c, g) : ATTN_OK;
}

static attn_status mha_back_body(const attn_mha_config *c, const attn_mha_params *p,
                                 const mha_dims *d, const attn_sdpa_opts *opts,
                                 const attn_trace *cache, const attn_view *dout,
                                 attn_view *dx_q, attn_view *dx_kv, attn_mha_params *g,
                                 plan *pl) {
    attn_dtype dt = c->dtype;
    int64_t sq[3] = {d->B, d->Tq, d->HD}, sk[3] = {d->B, d->Tk, d->KD};
    attn_view dQ = scratch(pl, dt, 3, sq, true), dK = scratch(pl, dt, 3, sk, true);
    attn_view dV = scratch(pl, dt, 3, sk, true), dO = scratch(pl, dt, 3, sq, true);
    /* out = concat Wo + bo */
    ATTN_TRY(lin_back(pl, cache->concat, &p->wo, dout, &dO, g ? &g->wo : NULL,
                      g && c->bias ? &g->bo : NULL));
    attn_view Qh, Kh, Vh, Oh, dQh, dKh, dVh, dOh;
    ATTN_TRY(heads_of(cache->q, c->d_head, &Qh));
    ATTN_TRY(heads_of(cache->k, c->d_head, &Kh));
    ATTN_TRY(heads_of(cache->v, c->d_head, &Vh));
    ATTN_TRY(heads_of(cache->concat, c->d_head, &Oh));
    ATTN_TRY(heads_of(&dQ, c->d_head, &dQh));
    ATTN_TRY(heads_of(&dK, c->d_head, &dKh));
    ATTN_TRY(heads_of(&dV, c->d_head, &dVh));
    ATTN_TRY(heads_of(&dO, c->d_head, &dOh));
    attn_sdpa_opts o = *opts;
    o.weights = NULL;
    o.lse = NULL;
    if (pl->counting)
        plan_inner(pl, attn_sdpa_backward_workspace_size(&Qh, &Kh, &Vh, &o));
    else
        ATTN_TRY(attn_sdpa_backward(&Qh, &Kh, &Vh, &o, &Oh, cache->lse, &dOh, &dQh, &dKh, &dVh,
                                    inner_base(pl), inner_size(pl)));
    /* self-attention: x_kv is x_q, and so its gradient lands in dx_q */
    attn_view *dxkv = d->xkv == d->xq ? dx_q : dx_kv;
    ATTN_TRY(lin_back(pl, d->xq, &p->wq, &dQ, dx_q, g ? &g->wq : NULL,
                      g && c->bias ? &g->bq : NULL));
    ATTN_TRY(lin_back(pl, d->xkv, &p->wk, &dK, dxkv, g ? &g->wk : NULL,
                      g && c->bias ? &g->bk : NULL));
    return lin_back(pl, d->xkv, &p->wv, &dV, dxkv, g ? &g->wv : NULL,
                    g && c->bias ? &g->bv : NULL);
}

static attn_status check_grad_out(const attn_view *g, const attn_view *like) {
    if (!g)
        return ATTN_OK;
    ATTN_TRY(want_shape(g, like->dtype, like->ndim, like->shape));
    return attn__self_overlaps(g) ? ATTN_ESTRIDE : ATTN_OK;
}

static attn_status mha_back_prepare(const attn_mha_config *cfg, const attn_mha_params *p,
                                    const attn_view *x_q, const attn_view *x_kv,
                                    const attn_sdpa_opts **opts, const attn_trace *cache,
                                    const attn_view *dout, attn_view *dx_q, attn_view *dx_kv,
                                    const attn_mha_params *g, attn_mha_config *c,
                                    mha_dims *d) {
    const attn_trace *tr = cache;
    ATTN_TRY(mha_prepare(cfg, p, x_q, x_kv, opts, &tr, c, d));
    ATTN_TRY(mha_check_cache(c, d, cache));
    ATTN_TRY(want_shape(dout, c->dtype, 3, (int64_t[]){d->B, d->Tq, c->d_model}));
    ATTN_TRY(check_grad_out(dx_q, x_q));
    if (x_kv)
        ATTN_TRY(check_grad_out(dx_kv, x_kv));
    return check_grads_mha(c, g);
}

size_t attn_mha_backward_workspace_size(const attn_mha_config *cfg, const attn_view *x_q,
                                        const attn_view *x_kv, const attn_sdpa_opts *opts) {
    attn_mha_config c;
    mha_dims d;
    attn_mha_params p;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    mha_shape_params(&c, &p);
    const attn_trace *tr = NULL;
    if (mha_prepare(cfg, &p, x_q, x_kv, &opts, &tr, &c, &d) != ATTN_OK)
        return 0;
    /* a shape-only cache */
    attn_view q, k, v, o, l, dout;
    attn_view_init(&q, c.dtype, plan_dummy, 3, (int64_t[]){d.B, d.Tq, d.HD});
    attn_view_init(&k, c.dtype, plan_dummy, 3, (int64_t[]){d.B, d.Tk, d.KD});
    attn_view_init(&v, c.dtype, plan_dummy, 3, (int64_t[]){d.B, d.Tk, d.KD});
    attn_view_init(&o, c.dtype, plan_dummy, 3, (int64_t[]){d.B, d.Tq, d.HD});
    attn_view_init(&l, c.dtype, plan_dummy, 3, (int64_t[]){d.B, c.heads, d.Tq});
    attn_view_init(&dout, c.dtype, plan_dummy, 3, (int64_t[]){d.B, d.Tq, c.d_model});
    attn_trace cache = {.q = &q, .k = &k, .v = &v, .concat = &o, .lse = &l};
    plan pl = {.counting = true};
    if (mha_back_body(&c, &p, &d, opts, &cache, &dout, NULL, NULL, NULL, &pl) != ATTN_OK)
        return 0;
    return plan_total(&pl);
}

attn_status attn_mha_backward(const attn_mha_config *cfg, const attn_mha_params *p,
                              const attn_view *x_q, const attn_view *x_kv,
                              const attn_sdpa_opts *opts, const attn_trace *cache,
                              const attn_view *dout, attn_view *dx_q, attn_view *dx_kv,
                              attn_mha_params *grads, void *work, size_t work_size) {
    attn_mha_config c;
    mha_dims d;
    ATTN_TRY(mha_back_prepare(cfg, p, x_q, x_kv, &opts, cache, dout, dx_q, dx_kv, grads, &c,
                              &d));
    const attn_view *ins[MAX_ALIAS_VIEWS] = {x_q, x_kv, dout, opts->keep, opts->bias};
    const attn_view *outs[MAX_ALIAS_VIEWS] = {dx_q, dx_kv};
    ATTN_TRY(no_alias(outs, mha_views(&c, grads, outs, 2), ins,
                      mha_views(&c, p, ins, trace_views(cache, ins, 5))));
    RUN_BODY(mha_back_body(&c, p, &d, opts, cache, dout, dx_q, dx_kv, grads, pl),
             mha_back_body(&c, p, &d, opts, cache, dout, dx_q, dx_kv, grads, pl));
}

/* ---- MHA cache --------------------------------------------------------- */

static int mha_cache_shapes(const attn_mha_config *c, int64_t B, int64_t Tq, int64_t Tk,
                            int64_t shp[5][3], int *nd) {
    int64_t HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head;
    int64_t s[5][3] = {{B, Tq, HD}, {B, Tk, KD}, {B, Tk, KD}, {B, Tq, HD}, {B, c->heads, Tq}};
    memcpy(shp, s, sizeof s);
    for (int i = 0; i < 5; ++i)
        nd[i] = 3;
    return 5;
}

/* Bind n tensors of up to 3 dims from a slab (each 64-byte aligned). */
static attn_status bind3(attn_dtype dt, int n, int64_t shp[][3], const int *nd, void *slab,
                         size_t slab_size, attn_view *out, size_t *need_out) {
    size_t need = 0;
    for (int i = 0; i < n; ++i) {
        size_t b = attn_dtype_size(dt);
        for (int k = 0; k < nd[i]; ++k) {
            if (shp[i][k] < 0 || !attn__mul_sz(b, (size_t)shp[i][k], &b))
                return ATTN_ERANGE;
        }
        need += attn__align64(b);
    }
    if (need_out) {
        *need_out = need;
        return ATTN_OK;
    }
    if (!slab || !out)
        return ATTN_EINVAL;
    if (slab_size < need || ((uintptr_t)slab & 63u))
        return ATTN_EWORKSPACE;
    char *p = slab;
    for (int i = 0; i < n; ++i) {
        ATTN_TRY(attn_view_init(&out[i], dt, p, nd[i], shp[i]));
        p += tensor_bytes(dt, nd[i], shp[i]);
    }
    return ATTN_OK;
}

size_t attn_mha_cache_size(const attn_mha_config *cfg, int64_t B, int64_t Tq, int64_t Tk) {
    attn_mha_config c;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK || B < 0 || Tq < 0 || Tk < 0)
        return 0;
    int64_t shp[5][3];
    int nd[5], n = mha_cache_shapes(&c, B, Tq, Tk, shp, nd);
    size_t need = 0;
    return bind3(c.dtype, n, shp, nd, NULL, 0, NULL, &need) == ATTN_OK ? need : 0;
}

attn_status attn_mha_cache_bind(const attn_mha_config *cfg, int64_t B, int64_t Tq, int64_t Tk,
                                void *slab, size_t slab_size, attn_view *views,
                                attn_trace *trace) {
    attn_mha_config c;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    if (!views || !trace || B < 0 || Tq < 0 || Tk < 0)
        return ATTN_EINVAL;
    int64_t shp[5][3];
    int nd[5], n = mha_cache_shapes(&c, B, Tq, Tk, shp, nd);
    ATTN_TRY(bind3(c.dtype, n, shp, nd, slab, slab_size, views, NULL));
    memset(trace, 0, sizeof *trace);
    trace->q = &views[0];
    trace->k = &views[1];
    trace->v = &views[2];
    trace->concat = &views[3];
    trace->lse = &views[4];
    return ATTN_OK;
}

/* ======================================================================== */
/* FFN                                                                       */
/* ======================================================================== */

attn_status attn_ffn_config_resolve(const attn_ffn_config *cfg, attn_ffn_config *out) {
    if (!cfg || !out)
        return ATTN_EINVAL;
    attn_ffn_config c = *cfg;
    if (c.dtype == 0)
        c.dtype = ATTN_F32;
    if ((c.dtype != ATTN_F32 && c.dtype != ATTN_F64) || c.d_model < 1 || c.d_ff < 0 ||
        (unsigned)c.act > ATTN_ACT_RELU)
        return ATTN_EINVAL;
    if (c.d_ff == 0 && !attn__mul_i64(4, c.d_model, &c.d_ff))
        return ATTN_EINVAL;
    int64_t t;
    if (!attn__mul_i64(c.d_model, c.d_ff, &t))
        return ATTN_EINVAL;
    *out = c;
    return ATTN_OK;
}

static int ffn_shapes(const attn_ffn_config *c, int64_t shp[4][2], int *nd) {
    int64_t s[4][2] = {{c->d_model, c->d_ff}, {c->d_ff, c->d_model}, {c->d_ff, 0},
                       {c->d_model, 0}};
    memcpy(shp, s, sizeof s);
    nd[0] = nd[1] = 2;
    nd[2] = nd[3] = 1;
    return c->bias ? 4 : 2;
}

size_t attn_ffn_params_size(const attn_ffn_config *cfg) {
    attn_ffn_config c;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    int64_t shp[4][2];
    int nd[4], n = ffn_shapes(&c, shp, nd);
    return slab_bytes(c.dtype, n, shp, nd);
}

int64_t attn_ffn_param_count(const attn_ffn_config *cfg) {
    attn_ffn_config c;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK)
        return -1;
    int64_t shp[4][2];
    int nd[4], n = ffn_shapes(&c, shp, nd);
    return scalar_count(n, shp, nd);
}

attn_status attn_ffn_params_bind(attn_ffn_params *p, const attn_ffn_config *cfg, void *slab,
                                 size_t slab_size) {
    attn_ffn_config c;
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_ffn_config_resolve(cfg, &c));
    int64_t shp[4][2];
    int nd[4], n = ffn_shapes(&c, shp, nd);
    attn_view v[4];
    memset(v, 0, sizeof v);
    ATTN_TRY(bind_slab(c.dtype, n, shp, nd, slab, slab_size, v));
    /* slab order is w1, w2, b1, b2 */
    attn_ffn_params r = {v[0], v[2], v[1], v[3]};
    *p = r;
    return ATTN_OK;
}

static attn_status check_ffn_params(const attn_ffn_config *c, const attn_ffn_params *p) {
    if (!p)
        return ATTN_EINVAL;
    int64_t shp[4][2];
    int nd[4], n = ffn_shapes(c, shp, nd);
    const attn_view *v[4] = {&p->w1, &p->w2, &p->b1, &p->b2};
    for (int i = 0; i < n; ++i)
        ATTN_TRY(want_shape(v[i], c->dtype, nd[i], shp[i]));
    return ATTN_OK;
}

static void ffn_shape_params(const attn_ffn_config *c, attn_ffn_params *p) {
    int64_t shp[4][2];
    int nd[4];
    ffn_shapes(c, shp, nd);
    attn_view v[4];
    shape_only(c->dtype, 4, shp, nd, v);
    attn_ffn_params r = {v[0], v[2], v[1], v[3]};
    *p = r;
}

/* x's shape with the last dim replaced by n. */
static void with_last(const attn_view *x, int64_t n, int64_t *shape) {
    for (int k = 0; k < x->ndim; ++k)
        shape[k] = x->shape[k];
    shape[x->ndim - 1] = n;
}

static attn_status ffn_check_x(const attn_ffn_config *c, const attn_view *x) {
    if (!x)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x));
    if (x->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (x->ndim < 2 || x->shape[x->ndim - 1] != c->d_model)
        return ATTN_ESHAPE;
    return ATTN_OK;
}

static attn_status ffn_check_trace(const attn_ffn_config *c, const attn_view *x,
                                   const attn_trace *tr) {
    int64_t sh[ATTN_MAX_DIMS];
    with_last(x, c->d_ff, sh);
    ATTN_TRY(want_opt(tr->mlp_hidden_pre, c->dtype, x->ndim, sh));
    ATTN_TRY(want_opt(tr->mlp_hidden, c->dtype, x->ndim, sh));
    ATTN_TRY(want_opt(tr->mlp_output, c->dtype, x->ndim, x->shape));
    const attn_view *o[] = {tr->mlp_hidden_pre, tr->mlp_hidden, tr->mlp_output};
    for (int i = 0; i < 3; ++i)
        if (o[i] && (attn__self_overlaps(o[i]) || attn_view_overlaps(o[i], x)))
            return attn__self_overlaps(o[i]) ? ATTN_ESTRIDE : ATTN_EALIAS;
    return ATTN_OK;
}

static attn_status ffn_body(const attn_ffn_config *c, const attn_ffn_params *p,
                            const attn_view *x, attn_view *out, const attn_trace *tr,
                            plan *pl) {
    int64_t sh[ATTN_MAX_DIMS];
    with_last(x, c->d_ff, sh);
    attn_view pre = tr->mlp_hidden_pre ? *tr->mlp_hidden_pre
                                       : scratch(pl, c->dtype, x->ndim, sh, false);
    /* without a trace the activation runs in place */
    attn_view hid = tr->mlp_hidden ? *tr->mlp_hidden
                    : tr->mlp_hidden_pre ? scratch(pl, c->dtype, x->ndim, sh, false)
                                         : pre;
    ATTN_TRY(lin(pl, x, &p->w1, c->bias ? &p->b1 : NULL, &pre));
    if (!pl->counting)
        ATTN_TRY(attn_activation(c->act, &pre, &hid));
    ATTN_TRY(lin(pl, &hid, &p->w2, c->bias ? &p->b2 : NULL, out));
    if (tr->mlp_output && !pl->counting && tr->mlp_output->data != out->data)
        ATTN_TRY(attn_view_copy(out, tr->mlp_output));
    return ATTN_OK;
}

static attn_status ffn_prepare(const attn_ffn_config *cfg, const attn_ffn_params *p,
                               const attn_view *x, const attn_trace **tr, attn_ffn_config *c) {
    ATTN_TRY(attn_ffn_config_resolve(cfg, c));
    ATTN_TRY(check_ffn_params(c, p));
    ATTN_TRY(ffn_check_x(c, x));
    if (!*tr)
        *tr = &no_trace;
    return ffn_check_trace(c, x, *tr);
}

size_t attn_ffn_workspace_size(const attn_ffn_config *cfg, const attn_view *x,
                               const attn_trace *trace) {
    attn_ffn_config c;
    attn_ffn_params p;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    ffn_shape_params(&c, &p);
    if (ffn_prepare(cfg, &p, x, &trace, &c) != ATTN_OK)
        return 0;
    plan pl = {.counting = true};
    attn_view out;
    attn_view_init(&out, c.dtype, plan_dummy, x->ndim, x->shape);
    if (ffn_body(&c, &p, x, &out, trace, &pl) != ATTN_OK)
        return 0;
    return plan_total(&pl);
}

attn_status attn_ffn_forward(const attn_ffn_config *cfg, const attn_ffn_params *p,
                             const attn_view *x, attn_view *out, const attn_trace *trace,
                             void *work, size_t work_size) {
    attn_ffn_config c;
    ATTN_TRY(ffn_prepare(cfg, p, x, &trace, &c));
    ATTN_TRY(want_out(out, c.dtype, x->ndim, x->shape, NULL, 0));
    const attn_view *ins[MAX_ALIAS_VIEWS] = {x}, *outs[MAX_ALIAS_VIEWS] = {out};
    ATTN_TRY(no_alias(outs, trace_views(trace, outs, 1), ins, ffn_views(&c, p, ins, 1)));
    RUN_BODY(ffn_body(&c, p, x, out, trace, pl), ffn_body(&c, p, x, out, trace, pl));
}

static attn_status ffn_back_body(const attn_ffn_config *c, const attn_ffn_params *p,
                                 const attn_view *x, const attn_trace *cache,
                                 const attn_view *dout, attn_view *dx, attn_ffn_params *g,
                                 plan *pl) {
    int64_t sh[ATTN_MAX_DIMS];
    with_last(x, c->d_ff, sh);
    attn_view dh = scratch(pl, c->dtype, x->ndim, sh, true);
    attn_view dpre = scratch(pl, c->dtype, x->ndim, sh, true);
    ATTN_TRY(lin_back(pl, cache->mlp_hidden, &p->w2, dout, &dh, g ? &g->w2 : NULL,
                      g && c->bias ? &g->b2 : NULL));
    if (!pl->counting)
        ATTN_TRY(attn_activation_backward(c->act, cache->mlp_hidden_pre, &dh, &dpre));
    return lin_back(pl, x, &p->w1, &dpre, dx, g ? &g->w1 : NULL, g && c->bias ? &g->b1 : NULL);
}

size_t attn_ffn_backward_workspace_size(const attn_ffn_config *cfg, const attn_view *x) {
    attn_ffn_config c;
    attn_ffn_params p;
    const attn_trace *tr = NULL;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    ffn_shape_params(&c, &p);
    if (ffn_prepare(cfg, &p, x, &tr, &c) != ATTN_OK)
        return 0;
    int64_t sh[ATTN_MAX_DIMS];
    with_last(x, c.d_ff, sh);
    attn_view pre, hid, dout;
    attn_view_init(&pre, c.dtype, plan_dummy, x->ndim, sh);
    attn_view_init(&hid, c.dtype, plan_dummy, x->ndim, sh);
    attn_view_init(&dout, c.dtype, plan_dummy, x->ndim, x->shape);
    attn_trace cache = {.mlp_hidden_pre = &pre, .mlp_hidden = &hid};
    plan pl = {.counting = true};
    if (ffn_back_body(&c, &p, x, &cache, &dout, NULL, NULL, &pl) != ATTN_OK)
        return 0;
    return plan_total(&pl);
}

attn_status attn_ffn_backward(const attn_ffn_config *cfg, const attn_ffn_params *p,
                              const attn_view *x, const attn_trace *cache,
                              const attn_view *dout, attn_view *dx, attn_ffn_params *grads,
                              void *work, size_t work_size) {
    attn_ffn_config c;
    const attn_trace *tr = cache;
    ATTN_TRY(ffn_prepare(cfg, p, x, &tr, &c));
    if (!cache || !cache->mlp_hidden_pre || !cache->mlp_hidden)
        return ATTN_EINVAL;
    ATTN_TRY(want_shape(dout, c.dtype, x->ndim, x->shape));
    ATTN_TRY(check_grad_out(dx, x));
    if (grads)
        ATTN_TRY(check_ffn_params(&c, grads));
    const attn_view *ins[MAX_ALIAS_VIEWS] = {x, dout}, *outs[MAX_ALIAS_VIEWS] = {dx};
    ATTN_TRY(no_alias(outs, ffn_views(&c, grads, outs, 1), ins,
                      ffn_views(&c, p, ins, trace_views(cache, ins, 2))));
    RUN_BODY(ffn_back_body(&c, p, x, cache, dout, dx, grads, pl),
             ffn_back_body(&c, p, x, cache, dout, dx, grads, pl));
}

/* ======================================================================== */
/* Encoder block                                                             */
/* ======================================================================== */

attn_status attn_encoder_config_resolve(const attn_encoder_config *cfg,
                                        attn_encoder_config *out) {
    if (!cfg || !out)
        return ATTN_EINVAL;
    attn_encoder_config c = *cfg;
    ATTN_TRY(attn_mha_config_resolve(&cfg->mha, &c.mha));
    ATTN_TRY(attn_ffn_config_resolve(&cfg->ffn, &c.ffn));
    if (c.mha.dtype != c.ffn.dtype || c.mha.d_model != c.ffn.d_model ||
        c.mha.d_kv != c.mha.d_model)
        return ATTN_EINVAL;
    if (!(c.eps >= 0.0) || !isfinite(c.eps) || (unsigned)c.norm > ATTN_POST_NORM)
        return ATTN_EINVAL;
    if (c.eps == 0.0)
        c.eps = 1e-5;
    *out = c;
    return ATTN_OK;
}

static size_t ln_bytes(const attn_encoder_config *c) {
    return c->ln_affine ? 2 * tensor_bytes(c->mha.dtype, 1, (int64_t[]){c->mha.d_model}) : 0;
}

size_t attn_encoder_params_size(const attn_encoder_config *cfg) {
    attn_encoder_config c;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    return 2 * ln_bytes(&c) + attn_mha_params_size(&c.mha) + attn_ffn_params_size(&c.ffn);
}

int64_t attn_encoder_param_count(const attn_encoder_config *cfg) {
    attn_encoder_config c;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK)
        return -1;
    return (c.ln_affine ? 4 * c.mha.d_model : 0) + attn_mha_param_count(&c.mha) +
           attn_ffn_param_count(&c.ffn);
}

/* Bind LayerNorm gamma and beta (C) at *p, advancing it. */
static void bind_ln(const attn_encoder_config *c, char **p, attn_view *g, attn_view *b) {
    memset(g, 0, sizeof *g);
    memset(b, 0, sizeof *b);
    if (!c->ln_affine)
        return;
    size_t one = tensor_bytes(c->mha.dtype, 1, (int64_t[]){c->mha.d_model});
    attn_view_init(g, c->mha.dtype, *p, 1, (int64_t[]){c->mha.d_model});
    attn_view_init(b, c->mha.dtype, *p + one, 1, (int64_t[]){c->mha.d_model});
    *p += 2 * one;
}

attn_status attn_encoder_params_bind(attn_encoder_params *p, const attn_encoder_config *cfg,
                                     void *slab, size_t slab_size) {
    attn_encoder_config c;
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_encoder_config_resolve(cfg, &c));
    if (!slab || ((uintptr_t)slab & 63u))
        return ATTN_EINVAL;
    if (slab_size < attn_encoder_params_size(&c))
        return ATTN_EWORKSPACE;
    attn_encoder_params r;
    char *q = slab;
    bind_ln(&c, &q, &r.ln1_g, &r.ln1_b);
    size_t ms = attn_mha_params_size(&c.mha);
    ATTN_TRY(attn_mha_params_bind(&r.mha, &c.mha, q, ms));
    q += ms;
    bind_ln(&c, &q, &r.ln2_g, &r.ln2_b);
    ATTN_TRY(attn_ffn_params_bind(&r.ffn, &c.ffn, q, attn_ffn_params_size(&c.ffn)));
    *p = r;
    return ATTN_OK;
}

static attn_status check_encoder_params(const attn_encoder_config *c,
                                        const attn_encoder_params *p) {
    if (!p)
        return ATTN_EINVAL;
    if (c->ln_affine) {
        const attn_view *v[4] = {&p->ln1_g, &p->ln1_b, &p->ln2_g, &p->ln2_b};
        for (int i = 0; i < 4; ++i)
            ATTN_TRY(want_shape(v[i], c->mha.dtype, 1, (int64_t[]){c->mha.d_model}));
    }
    ATTN_TRY(check_mha_params(&c->mha, &p->mha));
    return check_ffn_params(&c->ffn, &p->ffn);
}

static void enc_shape_params(const attn_encoder_config *c, attn_encoder_params *p) {
    memset(p, 0, sizeof *p);
    if (c->ln_affine) {
        attn_view *v[4] = {&p->ln1_g, &p->ln1_b, &p->ln2_g, &p->ln2_b};
        for (int i = 0; i < 4; ++i)
            attn_view_init(v[i], c->mha.dtype, plan_dummy, 1, (int64_t[]){c->mha.d_model});
    }
    mha_shape_params(&c->mha, &p->mha);
    ffn_shape_params(&c->ffn, &p->ffn);
}

/* Trace views the encoder itself fills, checked against (B, T, C) / (B, T). */
static attn_status enc_check_trace(const attn_encoder_config *c, const attn_view *x,
                                   const attn_trace *tr) {
    attn_dtype dt = c->mha.dtype;
    int64_t B = x->shape[0], T = x->shape[1];
    const attn_view *btc[] = {tr->ln1,      tr->projected_attention, tr->residual1,
                              tr->ln2,      tr->output,              tr->residual2,
                              tr->mlp_output};
    for (size_t i = 0; i < sizeof btc / sizeof *btc; ++i)
        ATTN_TRY(want_opt(btc[i], dt, 3, x->shape));
    const attn_view *bt[] = {tr->ln1_mean, tr->ln1_rstd, tr->ln2_mean, tr->ln2_rstd};
    for (int i = 0; i < 4; ++i)
        ATTN_TRY(want_opt(bt[i], dt, 2, (int64_t[]){B, T}));
    const attn_view *all[] = {tr->ln1,      tr->projected_attention, tr->residual1, tr->ln2,
                              tr->output,   tr->residual2,           tr->mlp_output,
                              tr->ln1_mean, tr->ln1_rstd,            tr->ln2_mean,
                              tr->ln2_rstd};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        if (all[i] && (attn__self_overlaps(all[i]) || attn_view_overlaps(all[i], x)))
            return attn__self_overlaps(all[i]) ? ATTN_ESTRIDE : ATTN_EALIAS;
    return ATTN_OK;
}

#define RUN(call)                  \
    do {                           \
        if (!pl->counting)         \
            ATTN_TRY(call);        \
    } while (0)

/* A (B, T, C) activation: the trace's view when given, scratch otherwise. */
static attn_view act_view(plan *pl, const attn_view *traced, const attn_view *x) {
    return traced ? *traced : scratch(pl, x->dtype, 3, x->shape, false);
}

static attn_status mha_dims_self(const attn_mha_config *c, const attn_view *x, mha_dims *d) {
    d->B = x->shape[0];
    d->Tq = d->Tk = x->shape[1];
    d->HD = c->heads * c->d_head;
    d->KD = c->kv_heads * c->d_head;
    d->xq = d->xkv = x;
    return ATTN_OK;
}

static attn_status enc_body(const attn_encoder_config *c, const attn_encoder_params *p,
                            const attn_view *x, const attn_sdpa_opts *opts, attn_view *out,
                            const attn_trace *tr, plan *pl) {
    const attn_view *g1 = c->ln_affine ? &p->ln1_g : NULL, *b1 = c->ln_affine ? &p->ln1_b : NULL;
    const attn_view *g2 = c->ln_affine ? &p->ln2_g : NULL, *b2 = c->ln_affine ? &p->ln2_b : NULL;
    attn_trace inner = *tr; /* the FFN writes mlp_output itself below */
    inner.mlp_output = NULL;
    mha_dims d;
    attn_view a = act_view(pl, tr->projected_attention, x);
    attn_view r1 = act_view(pl, tr->residual1, x);
    attn_view ln1 = act_view(pl, tr->ln1, x);
    attn_view m = act_view(pl, tr->mlp_output, x);
    if (c->norm == ATTN_PRE_NORM) {
        /* r1 = x + MHA(LN1(x));  out = r1 + FFN(LN2(r1)) */
        attn_view ln2 = act_view(pl, tr->ln2, x);
        RUN(attn_layernorm(c->eps, x, g1, b1, &ln1, tr->ln1_mean, tr->ln1_rstd));
        mha_dims_self(&c->mha, &ln1, &d);
        ATTN_TRY(mha_body(&c->mha, &p->mha, &d, opts, &a, &inner, pl));
        RUN(attn_add(x, &a, &r1));
        RUN(attn_layernorm(c->eps, &r1, g2, b2, &ln2, tr->ln2_mean, tr->ln2_rstd));
        ATTN_TRY(ffn_body(&c->ffn, &p->ffn, &ln2, &m, &inner, pl));
        RUN(attn_add(&r1, &m, out));
    } else {
        /* r1 = LN1(x + MHA(x));  out = LN2(r1 + FFN(r1)); the trace's residual1
           is x + MHA(x) and its ln1 is r1 */
        attn_view r2 = act_view(pl, tr->residual2, x);
        mha_dims_self(&c->mha, x, &d);
        ATTN_TRY(mha_body(&c->mha, &p->mha, &d, opts, &a, &inner, pl));
        RUN(attn_add(x, &a, &r1));
        RUN(attn_layernorm(c->eps, &r1, g1, b1, &ln1, tr->ln1_mean, tr->ln1_rstd));
        ATTN_TRY(ffn_body(&c->ffn, &p->ffn, &ln1, &m, &inner, pl));
        RUN(attn_add(&ln1, &m, &r2));
        RUN(attn_layernorm(c->eps, &r2, g2, b2, out, tr->ln2_mean, tr->ln2_rstd));
        if (tr->ln2)
            RUN(attn_view_copy(out, tr->ln2));
    }
    if (tr->output)
        RUN(attn_view_copy(out, tr->output));
    return ATTN_OK;
}

static attn_status enc_prepare(const attn_encoder_config *cfg, const attn_encoder_params *p,
                               const attn_view *x, const attn_sdpa_opts **opts,
                               const attn_trace **tr, attn_encoder_config *c) {
    ATTN_TRY(attn_encoder_config_resolve(cfg, c));
    ATTN_TRY(check_encoder_params(c, p));
    if (!x)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x));
    if (x->dtype != c->mha.dtype)
        return ATTN_EDTYPE;
    if (x->ndim != 3 || x->shape[2] != c->mha.d_model)
        return ATTN_ESHAPE;
    if (!*opts)
        *opts = &default_opts;
    if (!*tr)
        *tr = &no_trace;
    mha_dims d;
    mha_dims_self(&c->mha, x, &d);
    ATTN_TRY(check_opts(*opts, c->mha.dtype, &d, c->mha.heads));
    ATTN_TRY(mha_check_trace(&c->mha, &d, *tr));
    int64_t sh[3] = {x->shape[0], x->shape[1], c->ffn.d_ff};
    ATTN_TRY(want_opt((*tr)->mlp_hidden_pre, c->mha.dtype, 3, sh));
    ATTN_TRY(want_opt((*tr)->mlp_hidden, c->mha.dtype, 3, sh));
    return enc_check_trace(c, x, *tr);
}

size_t attn_encoder_workspace_size(const attn_encoder_config *cfg, const attn_view *x,
                                   const attn_sdpa_opts *opts, const attn_trace *trace) {
    attn_encoder_config c;
    attn_encoder_params p;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    enc_shape_params(&c, &p);
    if (enc_prepare(cfg, &p, x, &opts, &trace, &c) != ATTN_OK)
        return 0;
    plan pl = {.counting = true};
    attn_view out;
    attn_view_init(&out, c.mha.dtype, plan_dummy, 3, x->shape);
    if (enc_body(&c, &p, x, opts, &out, trace, &pl) != ATTN_OK)
        return 0;
    return plan_total(&pl);
}

attn_status attn_encoder_forward(const attn_encoder_config *cfg, const attn_encoder_params *p,
                                 const attn_view *x, const attn_sdpa_opts *opts,
                                 attn_view *out, const attn_trace *trace, void *work,
                                 size_t work_size) {
    attn_encoder_config c;
    ATTN_TRY(enc_prepare(cfg, p, x, &opts, &trace, &c));
    ATTN_TRY(want_out(out, c.mha.dtype, 3, x->shape, NULL, 0));
    const attn_view *ins[MAX_ALIAS_VIEWS] = {x, opts->keep, opts->bias};
    const attn_view *outs[MAX_ALIAS_VIEWS] = {out};
    ATTN_TRY(no_alias(outs, trace_views(trace, outs, 1), ins, enc_views(&c, p, ins, 3)));
    RUN_BODY(enc_body(&c, p, x, opts, out, trace, pl), enc_body(&c, p, x, opts, out, trace, pl));
}

/* ---- encoder backward ---------------------------------------------------- */

static attn_status enc_back_body(const attn_encoder_config *c, const attn_encoder_params *p,
                                 const attn_view *x, const attn_sdpa_opts *opts,
                                 const attn_trace *k, const attn_view *dout, attn_view *dx,
                                 attn_encoder_params *g, plan *pl) {
    const attn_view *g1 = c->ln_affine ? &p->ln1_g : NULL;
    const attn_view *g2 = c->ln_affine ? &p->ln2_g : NULL;
    attn_view *dg1 = g && c->ln_affine ? &g->ln1_g : NULL, *db1 = g && c->ln_affine ? &g->ln1_b : NULL;
    attn_view *dg2 = g && c->ln_affine ? &g->ln2_g : NULL, *db2 = g && c->ln_affine ? &g->ln2_b : NULL;
    attn_mha_params *gm = g ? &g->mha : NULL;
    attn_ffn_params *gf = g ? &g->ffn : NULL;
    mha_dims d;
    attn_view dr1 = scratch(pl, x->dtype, 3, x->shape, true);
    attn_view dln = scratch(pl, x->dtype, 3, x->shape, true);
    if (c->norm == ATTN_PRE_NORM) {
        /* out = r1 + FFN(LN2(r1)): dr1 = dout + LN2'(FFN'(dout)) */
        RUN(attn_add_backward(dout, &dr1, NULL));
        if (pl->counting)
            plan_inner(pl, attn_ffn_backward_workspace_size(&c->ffn, k->ln2));
        else
            ATTN_TRY(attn_ffn_backward(&c->ffn, &p->ffn, k->ln2, k, dout, &dln, gf,
                                       inner_base(pl), inner_size(pl)));
        RUN(attn_layernorm_backward(k->residual1, g2, k->ln2_mean, k->ln2_rstd, &dln, &dr1,
                                    dg2, db2));
        /* r1 = x + MHA(LN1(x)) */
        RUN(attn_add_backward(&dr1, dx, NULL));
        attn_view dln1 = scratch(pl, x->dtype, 3, x->shape, true);
        mha_dims_self(&c->mha, k->ln1, &d);
        ATTN_TRY(mha_back_body(&c->mha, &p->mha, &d, opts, k, &dr1, &dln1, NULL, gm, pl));
        RUN(attn_layernorm_backward(x, g1, k->ln1_mean, k->ln1_rstd, &dln1, dx, dg1, db1));
    } else {
        /* out = LN2(r2), r2 = ln1 + FFN(ln1), ln1 = LN1(r1), r1 = x + MHA(x) */
        attn_view dr2 = scratch(pl, x->dtype, 3, x->shape, true);
        RUN(attn_layernorm_backward(k->residual2, g2, k->ln2_mean, k->ln2_rstd, dout, &dr2,
                                    dg2, db2));
        RUN(attn_add_backward(&dr2, &dln, NULL));
        if (pl->counting)
            plan_inner(pl, attn_ffn_backward_workspace_size(&c->ffn, k->ln1));
        else
            ATTN_TRY(attn_ffn_backward(&c->ffn, &p->ffn, k->ln1, k, &dr2, &dln, gf,
                                       inner_base(pl), inner_size(pl)));
        RUN(attn_layernorm_backward(k->residual1, g1, k->ln1_mean, k->ln1_rstd, &dln, &dr1,
                                    dg1, db1));
        RUN(attn_add_backward(&dr1, dx, NULL));
        mha_dims_self(&c->mha, x, &d);
        ATTN_TRY(mha_back_body(&c->mha, &p->mha, &d, opts, k, &dr1, dx, NULL, gm, pl));
    }
    return ATTN_OK;
}

static int enc_cache_shapes(const attn_encoder_config *c, int64_t B, int64_t T,
                            int64_t shp[15][3], int *nd) {
    int64_t C = c->mha.d_model, HD = c->mha.heads * c->mha.d_head;
    int64_t KD = c->mha.kv_heads * c->mha.d_head, F = c->ffn.d_ff;
    int64_t s[15][3] = {{B, T, C},  {B, T, HD}, {B, T, KD}, {B, T, KD},
                        {B, T, HD}, {B, c->mha.heads, T},   {B, T, C},
                        {B, T, C},  {B, T, F},  {B, T, F},  {B, T, 0},
                        {B, T, 0},  {B, T, 0},  {B, T, 0},  {B, T, C}};
    memcpy(shp, s, sizeof s);
    for (int i = 0; i < 15; ++i)
        nd[i] = (i >= 10 && i <= 13) ? 2 : 3;
    return 15;
}

size_t attn_encoder_cache_size(const attn_encoder_config *cfg, int64_t B, int64_t T) {
    attn_encoder_config c;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK || B < 0 || T < 0)
        return 0;
    int64_t shp[15][3];
    int nd[15], n = enc_cache_shapes(&c, B, T, shp, nd);
    size_t need = 0;
    return bind3(c.mha.dtype, n, shp, nd, NULL, 0, NULL, &need) == ATTN_OK ? need : 0;
}

attn_status attn_encoder_cache_bind(const attn_encoder_config *cfg, int64_t B, int64_t T,
                                    void *slab, size_t slab_size, attn_view *v,
                                    attn_trace *tr) {
    attn_encoder_config c;
    ATTN_TRY(attn_encoder_config_resolve(cfg, &c));
    if (!v || !tr || B < 0 || T < 0)
        return ATTN_EINVAL;
    int64_t shp[15][3];
    int nd[15], n = enc_cache_shapes(&c, B, T, shp, nd);
    ATTN_TRY(bind3(c.mha.dtype, n, shp, nd, slab, slab_size, v, NULL));
    attn_trace t = {.ln1 = &v[0], .q = &v[1], .k = &v[2], .v = &v[3], .concat = &v[4],
                    .lse = &v[5], .residual1 = &v[6], .ln2 = &v[7], .mlp_hidden_pre = &v[8],
                    .mlp_hidden = &v[9], .ln1_mean = &v[10], .ln1_rstd = &v[11],
                    .ln2_mean = &v[12], .ln2_rstd = &v[13], .residual2 = &v[14]};
    *tr = t;
    return ATTN_OK;
}

static attn_status enc_check_cache(const attn_encoder_config *c, const attn_trace *k) {
    if (!k || !k->q || !k->k || !k->v || !k->concat || !k->lse || !k->ln1 || !k->residual1 ||
        !k->mlp_hidden_pre || !k->mlp_hidden || !k->ln1_mean || !k->ln1_rstd ||
        !k->ln2_mean || !k->ln2_rstd)
        return ATTN_EINVAL;
    if (c->norm == ATTN_PRE_NORM ? !k->ln2 : !k->residual2)
        return ATTN_EINVAL;
    return ATTN_OK;
}

size_t attn_encoder_backward_workspace_size(const attn_encoder_config *cfg, const attn_view *x,
                                            const attn_sdpa_opts *opts) {
    attn_encoder_config c;
    attn_encoder_params p;
    const attn_trace *tr = NULL;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    enc_shape_params(&c, &p);
    if (enc_prepare(cfg, &p, x, &opts, &tr, &c) != ATTN_OK)
        return 0;
    int64_t shp[15][3];
    int nd[15];
    enc_cache_shapes(&c, x->shape[0], x->shape[1], shp, nd);
    attn_view v[15], dout;
    for (int i = 0; i < 15; ++i)
        attn_view_init(&v[i], c.mha.dtype, plan_dummy, nd[i], shp[i]);
    attn_view_init(&dout, c.mha.dtype, plan_dummy, 3, x->shape);
    attn_trace k = {.ln1 = &v[0], .q = &v[1], .k = &v[2], .v = &v[3], .concat = &v[4],
                    .lse = &v[5], .residual1 = &v[6], .ln2 = &v[7], .mlp_hidden_pre = &v[8],
                    .mlp_hidden = &v[9], .ln1_mean = &v[10], .ln1_rstd = &v[11],
                    .ln2_mean = &v[12], .ln2_rstd = &v[13], .residual2 = &v[14]};
    plan pl = {.counting = true};
    if (enc_back_body(&c, &p, x, opts, &k, &dout, NULL, NULL, &pl) != ATTN_OK)
        return 0;
    return plan_total(&pl);
}

attn_status attn_encoder_backward(const attn_encoder_config *cfg, const attn_encoder_params *p,
                                  const attn_view *x, const attn_sdpa_opts *opts,
                                  const attn_trace *cache, const attn_view *dout,
                                  attn_view *dx, attn_encoder_params *grads, void *work,
                                  size_t work_size) {
    attn_encoder_config c;
    const attn_trace *tr = cache;
    ATTN_TRY(enc_prepare(cfg, p, x, &opts, &tr, &c));
    ATTN_TRY(enc_check_cache(&c, cache));
    ATTN_TRY(want_shape(dout, c.mha.dtype, 3, x->shape));
    ATTN_TRY(check_grad_out(dx, x));
    if (grads)
        ATTN_TRY(check_encoder_params(&c, grads));
    const attn_view *ins[MAX_ALIAS_VIEWS] = {x, dout, opts->keep, opts->bias};
    const attn_view *outs[MAX_ALIAS_VIEWS] = {dx};
    ATTN_TRY(no_alias(outs, enc_views(&c, grads, outs, 1), ins,
                      enc_views(&c, p, ins, trace_views(cache, ins, 4))));
    RUN_BODY(enc_back_body(&c, p, x, opts, cache, dout, dx, grads, pl),
             enc_back_body(&c, p, x, opts, cache, dout, dx, grads, pl));
}
