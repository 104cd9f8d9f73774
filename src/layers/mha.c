/* SPDX-License-Identifier: MIT */
/* Multi-head attention: Q/K/V projections, heads as views, sdpa, output projection; and back.
 */
#include <string.h>

#include "layers/layers_internal.h"

static const attn_trace no_trace;
static const attn_sdpa_opts default_opts;

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

/* The eight parameter tensors of an MHA config, in slab order; returns how many it uses. */
static int mha_shapes(const attn_mha_config *c, int64_t shp[8][3], int *nd) {
    int64_t hd = c->heads * c->d_head, kd = c->kv_heads * c->d_head;
    int64_t s[8][3] = {{c->d_model, hd}, {c->d_kv, kd}, {c->d_kv, kd}, {hd, c->d_model},
                       {hd},             {kd},          {kd},          {c->d_model}};
    memcpy(shp, s, sizeof s);
    for (int i = 0; i < 8; ++i)
        nd[i] = i < 4 ? 2 : 1;
    return c->bias ? 8 : 4;
}

static int64_t scalar_count(int n, int64_t shp[][3], const int *nd) {
    int64_t total = 0;
    for (int i = 0; i < n; ++i)
        total += shp[i][0] * (nd[i] == 2 ? shp[i][1] : 1);
    return total;
}

size_t attn_mha_params_size(const attn_mha_config *cfg) {
    attn_mha_config c;
    int64_t shp[8][3];
    int nd[8];
    size_t need;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK ||
        attn__slab_need(c.dtype, mha_shapes(&c, shp, nd), shp, nd, &need) != ATTN_OK)
        return 0;
    return need;
}

int64_t attn_mha_param_count(const attn_mha_config *cfg) {
    attn_mha_config c;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK)
        return -1;
    int64_t shp[8][3];
    int nd[8], n = mha_shapes(&c, shp, nd);
    return scalar_count(n, shp, nd);
}

/*
 * wq, wk, wv are kept as PyTorch keeps in_proj_weight: each (out, in) row-major,
 * seen as the (in, out) matrix through swapped strides. Each starts on its own
 * 64-byte boundary as every slab tensor does, so when its bytes are a multiple
 * of 64 (C H D a multiple of 16 in f32, of 8 in f64) the three are adjacent
 * column blocks of one (C, HD + 2 KD) matrix and Q, K, V are one GEMM (K and V
 * for cross-attention); else they are three (the same numbers either way).
 */
static void in_proj_order(attn_view *w) {
    attn_view t;
    int64_t shape[2] = {w->shape[1], w->shape[0]};
    attn_status st = attn_view_init(&t, w->dtype, w->data, 2, shape);
    st = st == ATTN_OK ? attn_view_transpose(&t, 0, 1, w) : st;
    ATTN_ASSERT(st == ATTN_OK);
    (void)st;
}

attn_status attn_mha_params_bind(attn_mha_params *p, const attn_mha_config *cfg, void *slab,
                                 size_t slab_size) {
    attn_mha_config c;
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    int64_t shp[8][3];
    int nd[8], n = mha_shapes(&c, shp, nd);
    attn_view v[8];
    memset(v, 0, sizeof v);
    ATTN_TRY(attn__slab_bind(c.dtype, n, shp, nd, slab, slab_size, v));
    for (int i = 0; i < 3; ++i)
        in_proj_order(&v[i]);
    attn_mha_params r = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    *p = r;
    return ATTN_OK;
}

int attn__mha_views(const attn_mha_config *c, const attn_mha_params *p, const attn_view **l,
                    int n) {
    if (!p)
        return n;
    const attn_view *v[] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < (c->bias ? 8 : 4); ++i)
        l[n++] = v[i];
    return n;
}

attn_status attn__mha_check_params(const attn_mha_config *c, const attn_mha_params *p) {
    if (!p)
        return ATTN_EINVAL;
    int64_t shp[8][3];
    int nd[8], n = mha_shapes(c, shp, nd);
    const attn_view *v[8] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < n; ++i)
        ATTN_TRY(attn__want(v[i], c->dtype, nd[i], shp[i]));
    return ATTN_OK;
}

attn_status attn__mha_shape_params(const attn_mha_config *c, attn_mha_params *p) {
    int64_t shp[8][3];
    int nd[8];
    mha_shapes(c, shp, nd);
    attn_view v[8];
    ATTN_TRY(attn__shape_views(c->dtype, 8, shp, nd, v));
    for (int i = 0; i < 3; ++i) /* the strides attn_mha_params_bind gives */
        in_proj_order(&v[i]);
    attn_mha_params r = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    *p = r;
    return ATTN_OK;
}

attn__mha_dims attn__mha_dims_self(const attn_mha_config *c, const attn_view *x) {
    attn__mha_dims d = {.B = x->shape[0], .Tq = x->shape[1], .Tk = x->shape[1],
                        .HD = c->heads * c->d_head, .KD = c->kv_heads * c->d_head,
                        .xq = x, .xkv = x};
    return d;
}

attn__mha_dims attn__mha_dims_cross(const attn_mha_config *c, const attn_view *x_q,
                                    const attn_view *x_kv) {
    attn__mha_dims d = attn__mha_dims_self(c, x_q);
    d.xkv = x_kv;
    d.Tk = x_kv->shape[1];
    return d;
}

/* x_q (B, Tq, C) and x_kv (B, Tk, Ckv; NULL = x_q) against the config. */
static attn_status mha_inputs(const attn_mha_config *c, const attn_view *x_q,
                              const attn_view *x_kv, attn__mha_dims *d) {
    if (!x_q)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x_q));
    if (x_q->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (x_q->ndim != 3 || x_q->shape[2] != c->d_model)
        return ATTN_ESHAPE;
    *d = attn__mha_dims_self(c, x_q);
    if (x_kv) {
        ATTN_TRY(attn_view_check(x_kv));
        if (x_kv->dtype != c->dtype)
            return ATTN_EDTYPE;
        if (x_kv->ndim != 3 || x_kv->shape[0] != d->B || x_kv->shape[2] != c->d_kv)
            return ATTN_ESHAPE;
        *d = attn__mha_dims_cross(c, x_q, x_kv);
    } else if (c->d_kv != c->d_model) {
        return ATTN_ESHAPE;
    }
    return ATTN_OK;
}

attn_status attn__mha_check_trace(const attn_mha_config *c, const attn__mha_dims *d,
                                  const attn_trace *tr) {
    attn_dtype dt = c->dtype;
    int64_t sq[3] = {d->B, d->Tq, d->HD}, sk[3] = {d->B, d->Tk, d->KD};
    int64_t ss[4] = {d->B, c->heads, d->Tq, d->Tk}, so[4] = {d->B, c->heads, d->Tq, c->d_head};
    int64_t sl[3] = {d->B, c->heads, d->Tq};
    ATTN_TRY(attn__want_opt(tr->q, dt, 3, sq));
    ATTN_TRY(attn__want_opt(tr->k, dt, 3, sk));
    ATTN_TRY(attn__want_opt(tr->v, dt, 3, sk));
    ATTN_TRY(attn__want_opt(tr->concat, dt, 3, sq));
    ATTN_TRY(attn__want_opt(tr->scores, dt, 4, ss));
    ATTN_TRY(attn__want_opt(tr->attention, dt, 4, ss));
    ATTN_TRY(attn__want_opt(tr->read_values, dt, 4, so));
    return attn__want_opt(tr->lse, dt, 3, sl);
}

/* How the Q, K, V projections run: one GEMM for all three, one for K and V, or three. */
typedef enum { QKV_SEPARATE, QKV_ONE, KV_ONE } qkv_mode;

static qkv_mode qkv_plan(const attn_mha_params *p, const attn__mha_dims *d, attn_view *wcat) {
    if (d->xkv == d->xq &&
        attn__cat_views(3, (const attn_view *[]){&p->wq, &p->wk, &p->wv}, wcat))
        return QKV_ONE;
    if (attn__cat_views(2, (const attn_view *[]){&p->wk, &p->wv}, wcat))
        return KV_ONE;
    return QKV_SEPARATE;
}

/*
 * Q, K, V (B, T, heads*D) in one scratch (B, T, HD + 2 KD) whose column blocks
 * they are (self-attention; cross-attention: K and V in one (B, Tk, 2 KD)), so
 * that adjacent weights project them in one GEMM; a trace's q, k, v are used
 * instead when given (one GEMM when they too are adjacent blocks).
 */
static void qkv_buffers(const attn_mha_config *c, const attn__mha_dims *d, const attn_trace *tr,
                        attn__plan *pl, attn_view *Q, attn_view *K, attn_view *V) {
    attn_dtype dt = c->dtype;
    int64_t sq[3] = {d->B, d->Tq, d->HD}, sk[3] = {d->B, d->Tk, d->KD};
    if (tr->q || tr->k || tr->v) {
        *Q = tr->q ? *tr->q : attn__plan_scratch(pl, dt, 3, sq, false);
        *K = tr->k ? *tr->k : attn__plan_scratch(pl, dt, 3, sk, false);
        *V = tr->v ? *tr->v : attn__plan_scratch(pl, dt, 3, sk, false);
        return;
    }
    if (d->xkv == d->xq) {
        attn_view all =
            attn__plan_scratch(pl, dt, 3, (int64_t[]){d->B, d->Tq, d->HD + 2 * d->KD}, false);
        *Q = attn__cols(&all, 0, d->HD);
        *K = attn__cols(&all, d->HD, d->KD);
        *V = attn__cols(&all, d->HD + d->KD, d->KD);
        return;
    }
    *Q = attn__plan_scratch(pl, dt, 3, sq, false);
    attn_view kv = attn__plan_scratch(pl, dt, 3, (int64_t[]){d->B, d->Tk, 2 * d->KD}, false);
    *K = attn__cols(&kv, 0, d->KD);
    *V = attn__cols(&kv, d->KD, d->KD);
}

/*
 * One projection GEMM for n column blocks: each block first set to its bias (the
 * biases need not be adjacent), then the GEMM with beta = 1 (no bias: beta = 0).
 */
static attn_status proj_cat(attn__plan *pl, const attn_view *x, const attn_view *wcat,
                            attn_view *ycat, int n, const attn_view *const *b,
                            attn_view *const *y) {
    if (!attn__plan_running(pl))
        return attn__plan_linear(pl, x, wcat, NULL, ycat);
    for (int i = 0; i < n; ++i)
        if (b[i])
            attn__fill_bias_run(b[i], y[i]);
    attn__gemm_run(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, x, wcat, b[0] ? 1.0 : 0.0, ycat,
                   attn__plan_inner_base(pl), attn__plan_inner_size(pl));
    return ATTN_OK;
}

static attn_status qkv_project(const attn_mha_config *c, const attn_mha_params *p,
                               const attn__mha_dims *d, attn__plan *pl, attn_view *Q,
                               attn_view *K, attn_view *V) {
    attn_view wcat, ycat;
    qkv_mode m = qkv_plan(p, d, &wcat);
    const attn_view *bq = c->bias ? &p->bq : NULL, *bk = c->bias ? &p->bk : NULL;
    const attn_view *bv = c->bias ? &p->bv : NULL;
    if (m == QKV_ONE && attn__cat_views(3, (const attn_view *[]){Q, K, V}, &ycat))
        return proj_cat(pl, d->xq, &wcat, &ycat, 3, (const attn_view *[]){bq, bk, bv},
                        (attn_view *[]){Q, K, V});
    if (m == QKV_ONE) /* the weights are adjacent, the outputs not: K and V still are? */
        m = attn__cat_views(2, (const attn_view *[]){&p->wk, &p->wv}, &wcat) ? KV_ONE
                                                                        : QKV_SEPARATE;
    ATTN_TRY(attn__plan_linear(pl, d->xq, &p->wq, bq, Q));
    if (m == KV_ONE && attn__cat_views(2, (const attn_view *[]){K, V}, &ycat))
        return proj_cat(pl, d->xkv, &wcat, &ycat, 2, (const attn_view *[]){bk, bv},
                        (attn_view *[]){K, V});
    ATTN_TRY(attn__plan_linear(pl, d->xkv, &p->wk, bk, K));
    return attn__plan_linear(pl, d->xkv, &p->wv, bv, V);
}

/* The call's RoPE on the heads of q and k (backward: rotated back), while running. */
static void rope_qk(const attn__mha_dims *d, const attn__plan *pl, attn_view *qh, attn_view *kh,
                    bool backward) {
    if (!d->rope || !d->rope->on || !attn__plan_running(pl))
        return;
    attn__rope_run(d->rope->style, d->rope->base, 0, qh, backward);
    attn__rope_run(d->rope->style, d->rope->base, 0, kh, backward);
}

attn_status attn__mha_forward_body(const attn_mha_config *c, const attn_mha_params *p,
                                   const attn__mha_dims *d, const attn_sdpa_opts *opts,
                                   attn_view *out, const attn_trace *tr, attn__plan *pl) {
    return attn__mha_forward_body_res(c, p, d, opts, NULL, out, tr, pl);
}

attn_status attn__mha_forward_body_res(const attn_mha_config *c, const attn_mha_params *p,
                                       const attn__mha_dims *d, const attn_sdpa_opts *opts,
                                       const attn_view *residual, attn_view *out,
                                       const attn_trace *tr, attn__plan *pl) {
    attn_dtype dt = c->dtype;
    int64_t sq[3] = {d->B, d->Tq, d->HD};
    /* Q, K, V (B, T, heads*D) and the merged-heads output O (B, Tq, H*D) */
    attn_view Q, K, V;
    qkv_buffers(c, d, tr, pl, &Q, &K, &V);
    attn_view O = tr->concat ? *tr->concat : attn__plan_scratch(pl, dt, 3, sq, false);
    ATTN_TRY(qkv_project(c, p, d, pl, &Q, &K, &V));
    /* heads are views: (B, T, H*D) -> (B, H, T, D); sdpa writes O merged in place */
    attn_view Qh = attn__heads(&Q, c->d_head), Kh = attn__heads(&K, c->d_head);
    attn_view Vh = attn__heads(&V, c->d_head), Oh = attn__heads(&O, c->d_head);
    rope_qk(d, pl, &Qh, &Kh, false);
    attn_sdpa_opts o = *opts;
    o.weights = tr->attention;
    o.lse = tr->lse;
    if (tr->attention && (unsigned)o.algo <= ATTN_ALGO_TILED) /* an invalid algo stays invalid */
        o.algo = ATTN_ALGO_MATERIALIZED; /* the weights need whole rows */
    const attn__sdpa_plan *sp;
    ATTN_TRY(attn__plan_sdpa(pl, &Qh, &Kh, &Vh, &o, tr->attention != NULL, &sp));
    size_t need;
    if (tr->scores) { /* the scaled, masked scores, by the tiles' own masking code */
        if (attn__plan_running(pl))
            attn__sdpa_scores_run(sp, &Qh, &Kh, tr->scores, attn__plan_inner_base(pl),
                                  attn__plan_inner_size(pl));
        else if (attn__sdpa_scores_need(sp, &Qh, &Kh, &need) == ATTN_OK)
            attn__plan_inner(pl, need);
        else
            return ATTN_ERANGE;
    }
    if (attn__plan_running(pl)) {
        attn__sdpa_run(sp, &Qh, &Kh, &Vh, &Oh, tr->attention, tr->lse,
                       attn__plan_inner_base(pl), attn__plan_inner_size(pl));
        if (tr->read_values)
            attn__copy_run(&Oh, tr->read_values);
    } else {
        ATTN_TRY(attn__sdpa_need(sp, &Qh, &Kh, &Vh, &need));
        attn__plan_inner(pl, need);
    }
    /* out = O Wo + bo, or with the residual folded in: out := residual + bo, out += O Wo */
    const attn_view *bo = c->bias ? &p->bo : NULL;
    if (residual)
        return attn__plan_linear_res(pl, &O, &p->wo, bo, residual, out);
    return attn__plan_linear(pl, &O, &p->wo, bo, out);
}

/* The arguments of one public MHA call, for its body. */
typedef struct mha_call {
    const attn_mha_config *c;
    const attn_mha_params *p;
    attn__mha_dims d;
    const attn_sdpa_opts *opts;
    const attn_trace *tr; /* forward: the trace; backward: the cache */
    const attn_view *dout;
    attn_view *out, *dx_q, *dx_kv;
    attn_mha_params *g;
} mha_call;

static attn_status forward_body(const void *args, attn__plan *pl) {
    const mha_call *a = args;
    return attn__mha_forward_body(a->c, a->p, &a->d, a->opts, a->out, a->tr, pl);
}

/* Everything a forward call or its size query checks before counting. */
static attn_status forward_check(const attn_mha_config *cfg, const attn_mha_params *p,
                                 const attn_view *x_q, const attn_view *x_kv,
                                 const attn_sdpa_opts *opts, const attn_trace *trace,
                                 attn_mha_config *c, mha_call *a) {
    ATTN_TRY(attn_mha_config_resolve(cfg, c));
    ATTN_TRY(attn__mha_check_params(c, p));
    memset(a, 0, sizeof *a);
    a->c = c;
    a->p = p;
    a->opts = opts ? opts : &default_opts;
    a->tr = trace ? trace : &no_trace;
    ATTN_TRY(mha_inputs(c, x_q, x_kv, &a->d));
    return attn__mha_check_trace(c, &a->d, a->tr);
}

size_t attn_mha_workspace_size(const attn_mha_config *cfg, const attn_view *x_q,
                               const attn_view *x_kv, const attn_sdpa_opts *opts,
                               const attn_trace *trace) {
    attn_mha_config c;
    attn_mha_params p;
    mha_call a;
    size_t need;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK || attn__mha_shape_params(&c, &p) != ATTN_OK)
        return 0;
    if (forward_check(cfg, &p, x_q, x_kv, opts, trace, &c, &a) != ATTN_OK)
        return 0;
    attn_view out;
    if (attn__shape_view(c.dtype, 3, (int64_t[]){a.d.B, a.d.Tq, c.d_model}, &out) != ATTN_OK)
        return 0;
    a.out = &out;
    return attn__layer_need(forward_body, &a, &need) == ATTN_OK ? need : 0;
}

attn_status attn_mha_forward(const attn_mha_config *cfg, const attn_mha_params *p,
                             const attn_view *x_q, const attn_view *x_kv,
                             const attn_sdpa_opts *opts, attn_view *out,
                             const attn_trace *trace, void *work, size_t work_size) {
    attn_mha_config c;
    mha_call a;
    ATTN_TRY(forward_check(cfg, p, x_q, x_kv, opts, trace, &c, &a));
    ATTN_TRY(attn__want(out, c.dtype, 3, (int64_t[]){a.d.B, a.d.Tq, c.d_model}));
    a.out = out;
    const attn_view *ins[ATTN__MAX_ALIAS] = {x_q, x_kv, a.opts->keep, a.opts->bias};
    const attn_view *outs[ATTN__MAX_ALIAS] = {out};
    attn_view cat;
    int nout = attn__trace_out_views(trace, outs, 1, &cat);
    int nin = attn__mha_views(&c, p, ins, 4);
    return attn__layer_exec(forward_body, &a, a.opts->threads, outs, nout, ins, nin, work, work_size);
}

/* ---- backward ------------------------------------------------------------ */

/*
 * A zeroed (B, T, W) scratch stored column-major, (W, B T) row-major: strides (T, 1,
 * B T). Its column blocks (dQ, dK, dV) have disjoint spans, so the sdpa backward
 * takes them as three gradients (it writes them through attn_gemm, which takes a
 * column-major C as it is), and the projections' backward reads them as one
 * (B T, W) matrix: one GEMM for dx, one for dW.
 */
static attn_view colmajor(attn__plan *pl, attn_dtype dt, int64_t B, int64_t T, int64_t W) {
    attn_view m = attn__plan_scratch(pl, dt, 2, (int64_t[]){W, B * T}, true);
    attn_view v = {.data = m.data, .dtype = dt, .ndim = 3, .shape = {B, T, W},
                   .stride = {T, 1, B * T}};
    return v;
}

/*
 * The projections' backward: dx += dY W^T, dW += x^T dY, db += sum dY. With the
 * weights adjacent (as for Q, K, V in the forward), dx takes one GEMM over the
 * fused (B T, HD + 2 KD) gradient (cross-attention: K and V), and with the
 * gradient slab adjacent too, dW one. set_dx: dx_q is written (beta 0), not
 * accumulated.
 */
static attn_status qkv_backward(const attn_mha_config *c, const attn_mha_params *p,
                                const attn__mha_dims *d, attn_view *dQ, attn_view *dK,
                                attn_view *dV, attn_view *dx_q, attn_view *dx_kv, bool set_dx,
                                attn_mha_params *g, attn__plan *pl) {
    bool self = d->xkv == d->xq, run = attn__plan_running(pl);
    int n = self ? 3 : 2; /* the blocks one GEMM may take: Q, K, V or K, V */
    const attn_view *w3[3] = {&p->wq, &p->wk, &p->wv}, *d3[3] = {dQ, dK, dV};
    const attn_view *g3[3] = {g ? &g->wq : NULL, g ? &g->wk : NULL, g ? &g->wv : NULL};
    const attn_view *const *ws = w3 + 3 - n, *const *ds = d3 + 3 - n, *const *gs = g3 + 3 - n;
    attn_view *dx = self ? dx_q : dx_kv; /* self-attention: x_kv's gradient lands in dx_q */
    const attn_view *x = d->xkv;
    attn_view wcat, dcat, gcat;
    bool fused = attn__cat_views(n, ds, &dcat) && attn__cat_views(n, ws, &wcat);
    bool gfused = fused && g && attn__cat_views(n, gs, &gcat);
    if (!self) /* cross-attention: Q's projection on its own */
        ATTN_TRY(set_dx && dx_q ? attn__plan_linear_backward_set(pl, d->xq, &p->wq, dQ, dx_q,
                                                                 g ? &g->wq : NULL, NULL)
                                : attn__plan_linear_backward(pl, d->xq, &p->wq, dQ, dx_q,
                                                             g ? &g->wq : NULL, NULL));
    bool set = self && set_dx;
    if (dx && fused)
        ATTN_TRY(set ? attn__plan_linear_backward_set(pl, x, &wcat, &dcat, dx, NULL, NULL)
                     : attn__plan_linear_backward(pl, x, &wcat, &dcat, dx, NULL, NULL));
    for (int i = 0; dx && !fused && i < n; ++i)
        ATTN_TRY(set && i == 0
                     ? attn__plan_linear_backward_set(pl, x, ws[i], ds[i], dx, NULL, NULL)
                     : attn__plan_linear_backward(pl, x, ws[i], ds[i], dx, NULL, NULL));
    if (gfused)
        ATTN_TRY(attn__plan_linear_backward(pl, x, &wcat, &dcat, NULL, &gcat, NULL));
    for (int i = 0; g && !gfused && i < n; ++i)
        ATTN_TRY(attn__plan_linear_backward(pl, x, ws[i], ds[i], NULL, (attn_view *)gs[i], NULL));
    if (run && g && c->bias) {
        attn_view *b3[3] = {&g->bq, &g->bk, &g->bv};
        for (int i = 0; i < 3; ++i)
            attn__add_backward_run(d3[i], NULL, b3[i]);
    }
    return ATTN_OK;
}

attn_status attn__mha_backward_body(const attn_mha_config *c, const attn_mha_params *p,
                                    const attn__mha_dims *d, const attn_sdpa_opts *opts,
                                    const attn_trace *cache, const attn_view *dout,
                                    attn_view *dx_q, attn_view *dx_kv, attn_mha_params *g,
                                    attn__plan *pl) {
    return attn__mha_backward_body_dx(c, p, d, opts, cache, dout, dx_q, dx_kv, false, g, pl);
}

attn_status attn__mha_backward_body_dx(const attn_mha_config *c, const attn_mha_params *p,
                                       const attn__mha_dims *d, const attn_sdpa_opts *opts,
                                       const attn_trace *cache, const attn_view *dout,
                                       attn_view *dx_q, attn_view *dx_kv, bool set_dx,
                                       attn_mha_params *g, attn__plan *pl) {
    attn_dtype dt = c->dtype;
    int64_t sq[3] = {d->B, d->Tq, d->HD};
    /* dQ, dK, dV: column blocks of one column-major scratch (cross: dQ, and dK with dV) */
    attn_view dQ, dK, dV;
    if (d->xkv == d->xq && d->Tq == d->Tk) {
        attn_view all = colmajor(pl, dt, d->B, d->Tq, d->HD + 2 * d->KD);
        dQ = attn__cols(&all, 0, d->HD);
        dK = attn__cols(&all, d->HD, d->KD);
        dV = attn__cols(&all, d->HD + d->KD, d->KD);
    } else {
        dQ = colmajor(pl, dt, d->B, d->Tq, d->HD);
        attn_view kv = colmajor(pl, dt, d->B, d->Tk, 2 * d->KD);
        dK = attn__cols(&kv, 0, d->KD);
        dV = attn__cols(&kv, d->KD, d->KD);
    }
    attn_view dO = attn__plan_scratch(pl, dt, 3, sq, false);
    /* out = O Wo + bo: dO = dout Wo^T written, not accumulated (no zeroing pass) */
    ATTN_TRY(attn__plan_linear_backward_set(pl, cache->concat, &p->wo, dout, &dO,
                                            g ? &g->wo : NULL, g && c->bias ? &g->bo : NULL));
    attn_view Qh = attn__heads(cache->q, c->d_head), Kh = attn__heads(cache->k, c->d_head);
    attn_view Vh = attn__heads(cache->v, c->d_head), Oh = attn__heads(cache->concat, c->d_head);
    attn_view dQh = attn__heads(&dQ, c->d_head), dKh = attn__heads(&dK, c->d_head);
    attn_view dVh = attn__heads(&dV, c->d_head), dOh = attn__heads(&dO, c->d_head);
    attn_sdpa_opts o = *opts;
    o.weights = NULL;
    o.lse = NULL;
    const attn__sdpa_plan *sp;
    ATTN_TRY(attn__plan_sdpa(pl, &Qh, &Kh, &Vh, &o, false, &sp));
    if (attn__plan_running(pl)) {
        attn__sdpa_backward_run(sp, &Qh, &Kh, &Vh, &Oh, cache->lse, &dOh, &dQh, &dKh, &dVh,
                                attn__plan_inner_base(pl), attn__plan_inner_size(pl));
        rope_qk(d, pl, &dQh, &dKh, true); /* through the rotation */
    } else {
        size_t need;
        ATTN_TRY(attn__sdpa_backward_need(sp, &Qh, &Kh, &Vh, &need));
        attn__plan_inner(pl, need);
    }
    return qkv_backward(c, p, d, &dQ, &dK, &dV, dx_q, dx_kv, set_dx, g, pl);
}

static attn_status backward_body(const void *args, attn__plan *pl) {
    const mha_call *a = args;
    return attn__mha_backward_body(a->c, a->p, &a->d, a->opts, a->tr, a->dout, a->dx_q,
                                   a->dx_kv, a->g, pl);
}

/* The five cache views the backward reads, against the call's shapes. */
static attn_status check_cache(const attn_mha_config *c, const attn__mha_dims *d,
                               const attn_trace *cache) {
    if (!cache || !cache->q || !cache->k || !cache->v || !cache->concat || !cache->lse)
        return ATTN_EINVAL;
    return attn__mha_check_trace(c, d, cache);
}

/* A shape-only cache over the planner's dummy address, for the size query. */
typedef struct mha_shape_cache {
    attn_view v[6];
    attn_trace t;
} mha_shape_cache;

static attn_status shape_cache(const attn_mha_config *c, const attn__mha_dims *d,
                               mha_shape_cache *s) {
    int64_t shp[6][3] = {{d->B, d->Tq, d->HD}, {d->B, d->Tk, d->KD}, {d->B, d->Tk, d->KD},
                         {d->B, d->Tq, d->HD}, {d->B, c->heads, d->Tq},
                         {d->B, d->Tq, c->d_model}};
    attn_status st = attn__shape_views(c->dtype, 6, shp, (int[]){3, 3, 3, 3, 3, 3}, s->v);
    attn_trace t = {.q = &s->v[0], .k = &s->v[1], .v = &s->v[2], .concat = &s->v[3],
                    .lse = &s->v[4]};
    s->t = t;
    return st;
}

size_t attn_mha_backward_workspace_size(const attn_mha_config *cfg, const attn_view *x_q,
                                        const attn_view *x_kv, const attn_sdpa_opts *opts) {
    attn_mha_config c;
    attn_mha_params p;
    mha_call a;
    mha_shape_cache s;
    size_t need;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK || attn__mha_shape_params(&c, &p) != ATTN_OK)
        return 0;
    if (forward_check(cfg, &p, x_q, x_kv, opts, NULL, &c, &a) != ATTN_OK)
        return 0;
    if (shape_cache(&c, &a.d, &s) != ATTN_OK)
        return 0;
    a.tr = &s.t;
    a.dout = &s.v[5];
    return attn__layer_need(backward_body, &a, &need) == ATTN_OK ? need : 0;
}

attn_status attn_mha_backward(const attn_mha_config *cfg, const attn_mha_params *p,
                              const attn_view *x_q, const attn_view *x_kv,
                              const attn_sdpa_opts *opts, const attn_trace *cache,
                              const attn_view *dout, attn_view *dx_q, attn_view *dx_kv,
                              attn_mha_params *grads, void *work, size_t work_size) {
    attn_mha_config c;
    mha_call a;
    ATTN_TRY(forward_check(cfg, p, x_q, x_kv, opts, NULL, &c, &a));
    ATTN_TRY(check_cache(&c, &a.d, cache));
    ATTN_TRY(attn__want(dout, c.dtype, 3, (int64_t[]){a.d.B, a.d.Tq, c.d_model}));
    ATTN_TRY(attn__want_like(dx_q, x_q));
    if (x_kv)
        ATTN_TRY(attn__want_like(dx_kv, x_kv));
    if (grads)
        ATTN_TRY(attn__mha_check_params(&c, grads));
    a.tr = cache;
    a.dout = dout;
    a.dx_q = dx_q;
    a.dx_kv = x_kv ? dx_kv : NULL;
    a.g = grads;
    const attn_view *ins[ATTN__MAX_ALIAS] = {x_q, x_kv, dout, a.opts->keep, a.opts->bias};
    const attn_view *outs[ATTN__MAX_ALIAS] = {dx_q, a.dx_kv};
    int nout = attn__mha_views(&c, grads, outs, 2);
    int nin = attn__mha_views(&c, p, ins, attn__trace_views(cache, ins, 5));
    return attn__layer_exec(backward_body, &a, a.opts->threads, outs, nout, ins, nin, work, work_size);
}

/* ---- the cache a backward reads ------------------------------------------- */

/*
 * q, k, v are column blocks of one (B, T, HD + 2 KD) tensor when Tq == Tk (a
 * self-attention cache; else k, v of one (B, Tk, 2 KD)), so the traced forward
 * projects them with one GEMM, as the inference forward does; then concat, lse.
 * Slab tensors: (fused q k v | q, fused k v), concat, lse.
 */
static void cache_shapes(const attn_mha_config *c, int64_t B, int64_t Tq, int64_t Tk,
                         int64_t shp[4][3], int *nd, int *n) {
    int64_t HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head;
    int64_t one[4][3] = {{B, Tq, HD + 2 * KD}, {B, Tq, HD}, {B, c->heads, Tq}};
    int64_t two[4][3] = {{B, Tq, HD}, {B, Tk, 2 * KD}, {B, Tq, HD}, {B, c->heads, Tq}};
    *n = Tq == Tk ? 3 : 4;
    memcpy(shp, Tq == Tk ? one : two, sizeof one);
    for (int i = 0; i < 4; ++i)
        nd[i] = 3;
}

/* The slab tensors t[] of cache_shapes as q, k, v, concat, lse in views[0..4]. */
static void cache_views(const attn_mha_config *c, int n, const attn_view *t, attn_view *views) {
    int64_t HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head;
    if (n == 3) {
        views[0] = attn__cols(&t[0], 0, HD);
        views[1] = attn__cols(&t[0], HD, KD);
        views[2] = attn__cols(&t[0], HD + KD, KD);
    } else {
        views[0] = t[0];
        views[1] = attn__cols(&t[1], 0, KD);
        views[2] = attn__cols(&t[1], KD, KD);
    }
    views[3] = t[n - 2];
    views[4] = t[n - 1];
}

size_t attn_mha_cache_size(const attn_mha_config *cfg, int64_t B, int64_t Tq, int64_t Tk) {
    attn_mha_config c;
    int64_t shp[4][3];
    int nd[4], n;
    size_t need;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK || B < 0 || Tq < 0 || Tk < 0)
        return 0;
    cache_shapes(&c, B, Tq, Tk, shp, nd, &n);
    return attn__slab_need(c.dtype, n, shp, nd, &need) == ATTN_OK ? need : 0;
}

attn_status attn_mha_cache_bind(const attn_mha_config *cfg, int64_t B, int64_t Tq, int64_t Tk,
                                void *slab, size_t slab_size, attn_view *views,
                                attn_trace *trace) {
    attn_mha_config c;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    if (!views || !trace || B < 0 || Tq < 0 || Tk < 0)
        return ATTN_EINVAL;
    int64_t shp[4][3];
    int nd[4], n;
    attn_view t[4];
    cache_shapes(&c, B, Tq, Tk, shp, nd, &n);
    ATTN_TRY(attn__slab_bind(c.dtype, n, shp, nd, slab, slab_size, t));
    cache_views(&c, n, t, views);
    memset(trace, 0, sizeof *trace);
    trace->q = &views[0];
    trace->k = &views[1];
    trace->v = &views[2];
    trace->concat = &views[3];
    trace->lse = &views[4];
    return ATTN_OK;
}
