/* SPDX-License-Identifier: MIT */
/* The feed-forward layer: out = act(x W1 + b1) W2 + b2, and its backward. */
#include <string.h>

#include "layers/layers_internal.h"

static const attn_trace no_trace;

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

/* w1 (C, F), w2 (F, C), b1 (F), b2 (C) in slab order; returns how many the config uses. */
static int ffn_shapes(const attn_ffn_config *c, int64_t shp[4][3], int *nd) {
    int64_t s[4][3] = {{c->d_model, c->d_ff}, {c->d_ff, c->d_model}, {c->d_ff}, {c->d_model}};
    memcpy(shp, s, sizeof s);
    nd[0] = nd[1] = 2;
    nd[2] = nd[3] = 1;
    return c->bias ? 4 : 2;
}

size_t attn_ffn_params_size(const attn_ffn_config *cfg) {
    attn_ffn_config c;
    int64_t shp[4][3];
    int nd[4];
    size_t need;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK ||
        attn__slab_need(c.dtype, ffn_shapes(&c, shp, nd), shp, nd, &need) != ATTN_OK)
        return 0;
    return need;
}

int64_t attn_ffn_param_count(const attn_ffn_config *cfg) {
    attn_ffn_config c;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK)
        return -1;
    int64_t shp[4][3], total = 0;
    int nd[4], n = ffn_shapes(&c, shp, nd);
    for (int i = 0; i < n; ++i)
        total += shp[i][0] * (nd[i] == 2 ? shp[i][1] : 1);
    return total;
}

/* The slab order (w1, w2, b1, b2) as the struct's (w1, b1, w2, b2). */
static attn_ffn_params from_slab_order(const attn_view v[4]) {
    attn_ffn_params r = {v[0], v[2], v[1], v[3]};
    return r;
}

attn_status attn_ffn_params_bind(attn_ffn_params *p, const attn_ffn_config *cfg, void *slab,
                                 size_t slab_size) {
    attn_ffn_config c;
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_ffn_config_resolve(cfg, &c));
    int64_t shp[4][3];
    int nd[4], n = ffn_shapes(&c, shp, nd);
    attn_view v[4];
    memset(v, 0, sizeof v);
    ATTN_TRY(attn__slab_bind(c.dtype, n, shp, nd, slab, slab_size, v));
    *p = from_slab_order(v);
    return ATTN_OK;
}

int attn__ffn_views(const attn_ffn_config *c, const attn_ffn_params *p, const attn_view **l,
                    int n) {
    if (!p)
        return n;
    const attn_view *v[] = {&p->w1, &p->w2, &p->b1, &p->b2};
    for (int i = 0; i < (c->bias ? 4 : 2); ++i)
        l[n++] = v[i];
    return n;
}

attn_status attn__ffn_check_params(const attn_ffn_config *c, const attn_ffn_params *p) {
    if (!p)
        return ATTN_EINVAL;
    int64_t shp[4][3];
    int nd[4], n = ffn_shapes(c, shp, nd);
    const attn_view *v[4] = {&p->w1, &p->w2, &p->b1, &p->b2};
    for (int i = 0; i < n; ++i)
        ATTN_TRY(attn__want(v[i], c->dtype, nd[i], shp[i]));
    return ATTN_OK;
}

attn_status attn__ffn_shape_params(const attn_ffn_config *c, attn_ffn_params *p) {
    int64_t shp[4][3];
    int nd[4];
    ffn_shapes(c, shp, nd);
    attn_view v[4];
    ATTN_TRY(attn__shape_views(c->dtype, 4, shp, nd, v));
    *p = from_slab_order(v);
    return ATTN_OK;
}

static attn_status check_x(const attn_ffn_config *c, const attn_view *x) {
    if (!x)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x));
    if (x->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (x->ndim < 2 || x->shape[x->ndim - 1] != c->d_model)
        return ATTN_ESHAPE;
    return ATTN_OK;
}

attn_status attn__ffn_check_trace(const attn_ffn_config *c, const attn_view *x,
                                  const attn_trace *tr) {
    int64_t sh[ATTN_MAX_DIMS];
    attn__with_last(x, c->d_ff, sh);
    ATTN_TRY(attn__want_opt(tr->mlp_hidden_pre, c->dtype, x->ndim, sh));
    ATTN_TRY(attn__want_opt(tr->mlp_hidden, c->dtype, x->ndim, sh));
    return attn__want_opt(tr->mlp_output, c->dtype, x->ndim, x->shape);
}

attn_status attn__ffn_forward_body(const attn_ffn_config *c, const attn_ffn_params *p,
                                   const attn_view *x, attn_view *out, const attn_trace *tr,
                                   attn__plan *pl) {
    return attn__ffn_forward_body_res(c, p, x, NULL, out, tr, pl);
}

attn_status attn__ffn_forward_body_res(const attn_ffn_config *c, const attn_ffn_params *p,
                                       const attn_view *x, const attn_view *residual,
                                       attn_view *out, const attn_trace *tr, attn__plan *pl) {
    int64_t sh[ATTN_MAX_DIMS];
    attn__with_last(x, c->d_ff, sh);
    /*
     * pre = x W1 + b1; hid = act(pre): the GEMM writes the buffer the trace
     * keeps pre in (else hid's), and one pass over it adds b1, keeps pre and
     * writes hid (in place without a trace).
     */
    attn_view hid = tr->mlp_hidden ? *tr->mlp_hidden
                                   : attn__plan_scratch(pl, c->dtype, x->ndim, sh, false);
    attn_view g = tr->mlp_hidden_pre ? *tr->mlp_hidden_pre : hid;
    ATTN_TRY(attn__plan_linear_act(pl, x, &p->w1, c->bias ? &p->b1 : NULL, c->act, &g,
                                   tr->mlp_hidden_pre != NULL, &hid));
    const attn_view *b2 = c->bias ? &p->b2 : NULL;
    if (residual && !tr->mlp_output) /* out = residual + b2 + hid W2: C := r + b2, beta = 1 */
        return attn__plan_linear_res(pl, &hid, &p->w2, b2, residual, out);
    if (!residual) {
        ATTN_TRY(attn__plan_linear(pl, &hid, &p->w2, b2, out));
        if (tr->mlp_output && attn__plan_running(pl))
            attn__copy_run(out, tr->mlp_output);
        return ATTN_OK;
    }
    /* the trace keeps the FFN's own output: m there, then out = residual + m */
    ATTN_TRY(attn__plan_linear(pl, &hid, &p->w2, b2, tr->mlp_output));
    if (attn__plan_running(pl))
        attn__add_run(residual, tr->mlp_output, out);
    return ATTN_OK;
}

/* The arguments of one public FFN call, for its body. */
typedef struct ffn_call {
    const attn_ffn_config *c;
    const attn_ffn_params *p;
    const attn_view *x, *dout;
    const attn_trace *tr; /* forward: the trace; backward: the cache */
    attn_view *out, *dx;
    attn_ffn_params *g;
} ffn_call;

static attn_status forward_body(const void *args, attn__plan *pl) {
    const ffn_call *a = args;
    return attn__ffn_forward_body(a->c, a->p, a->x, a->out, a->tr, pl);
}

static attn_status call_check(const attn_ffn_config *cfg, const attn_ffn_params *p,
                              const attn_view *x, const attn_trace *trace, attn_ffn_config *c,
                              ffn_call *a) {
    ATTN_TRY(attn_ffn_config_resolve(cfg, c));
    ATTN_TRY(attn__ffn_check_params(c, p));
    ATTN_TRY(check_x(c, x));
    memset(a, 0, sizeof *a);
    a->c = c;
    a->p = p;
    a->x = x;
    a->tr = trace ? trace : &no_trace;
    return attn__ffn_check_trace(c, x, a->tr);
}

size_t attn_ffn_workspace_size(const attn_ffn_config *cfg, const attn_view *x,
                               const attn_trace *trace) {
    attn_ffn_config c;
    attn_ffn_params p;
    ffn_call a;
    size_t need;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK || attn__ffn_shape_params(&c, &p) != ATTN_OK)
        return 0;
    if (call_check(cfg, &p, x, trace, &c, &a) != ATTN_OK)
        return 0;
    attn_view out;
    if (attn__shape_view(c.dtype, x->ndim, x->shape, &out) != ATTN_OK)
        return 0;
    a.out = &out;
    return attn__layer_need(forward_body, &a, &need) == ATTN_OK ? need : 0;
}

attn_status attn_ffn_forward(const attn_ffn_config *cfg, const attn_ffn_params *p,
                             const attn_view *x, attn_view *out, const attn_trace *trace,
                             void *work, size_t work_size) {
    attn_ffn_config c;
    ffn_call a;
    ATTN_TRY(call_check(cfg, p, x, trace, &c, &a));
    ATTN_TRY(attn__want(out, c.dtype, x->ndim, x->shape));
    a.out = out;
    const attn_view *ins[ATTN__MAX_ALIAS] = {x}, *outs[ATTN__MAX_ALIAS] = {out};
    int nout = attn__trace_views(trace, outs, 1), nin = attn__ffn_views(&c, p, ins, 1);
    return attn__layer_exec(forward_body, &a, 0, outs, nout, ins, nin, work, work_size);
}

/* ---- backward ------------------------------------------------------------ */

attn_status attn__ffn_backward_body(const attn_ffn_config *c, const attn_ffn_params *p,
                                    const attn_view *x, const attn_trace *cache,
                                    const attn_view *dout, attn_view *dx, attn_ffn_params *g,
                                    attn__plan *pl) {
    return attn__ffn_backward_body_dx(c, p, x, cache, dout, dx, false, g, pl);
}

attn_status attn__ffn_backward_body_dx(const attn_ffn_config *c, const attn_ffn_params *p,
                                       const attn_view *x, const attn_trace *cache,
                                       const attn_view *dout, attn_view *dx, bool set_dx,
                                       attn_ffn_params *g, attn__plan *pl) {
    int64_t sh[ATTN_MAX_DIMS];
    attn__with_last(x, c->d_ff, sh);
    /* dh := dout W2^T, then dpre := act'(pre) dh in place: written, never zeroed */
    attn_view dh = attn__plan_scratch(pl, c->dtype, x->ndim, sh, false);
    attn_view dpre = dh;
    ATTN_TRY(attn__plan_linear_backward_set(pl, cache->mlp_hidden, &p->w2, dout, &dh,
                                            g ? &g->w2 : NULL, g && c->bias ? &g->b2 : NULL));
    if (attn__plan_running(pl))
        attn__activation_grad_run(c->act, cache->mlp_hidden_pre, &dh, &dpre, false);
    if (set_dx && dx) /* dx := dpre W1^T: the caller's dx needs no zeroing */
        return attn__plan_linear_backward_set(pl, x, &p->w1, &dpre, dx, g ? &g->w1 : NULL,
                                              g && c->bias ? &g->b1 : NULL);
    return attn__plan_linear_backward(pl, x, &p->w1, &dpre, dx, g ? &g->w1 : NULL,
                                      g && c->bias ? &g->b1 : NULL);
}

static attn_status backward_body(const void *args, attn__plan *pl) {
    const ffn_call *a = args;
    return attn__ffn_backward_body(a->c, a->p, a->x, a->tr, a->dout, a->dx, a->g, pl);
}

size_t attn_ffn_backward_workspace_size(const attn_ffn_config *cfg, const attn_view *x) {
    attn_ffn_config c;
    attn_ffn_params p;
    ffn_call a;
    size_t need;
    if (attn_ffn_config_resolve(cfg, &c) != ATTN_OK || attn__ffn_shape_params(&c, &p) != ATTN_OK)
        return 0;
    if (call_check(cfg, &p, x, NULL, &c, &a) != ATTN_OK)
        return 0;
    int64_t sh[ATTN_MAX_DIMS];
    attn__with_last(x, c.d_ff, sh);
    attn_view pre, hid, dout;
    if (attn__shape_view(c.dtype, x->ndim, sh, &pre) != ATTN_OK ||
        attn__shape_view(c.dtype, x->ndim, sh, &hid) != ATTN_OK ||
        attn__shape_view(c.dtype, x->ndim, x->shape, &dout) != ATTN_OK)
        return 0;
    attn_trace cache = {.mlp_hidden_pre = &pre, .mlp_hidden = &hid};
    a.tr = &cache;
    a.dout = &dout;
    return attn__layer_need(backward_body, &a, &need) == ATTN_OK ? need : 0;
}

attn_status attn_ffn_backward(const attn_ffn_config *cfg, const attn_ffn_params *p,
                              const attn_view *x, const attn_trace *cache,
                              const attn_view *dout, attn_view *dx, attn_ffn_params *grads,
                              void *work, size_t work_size) {
    attn_ffn_config c;
    ffn_call a;
    ATTN_TRY(call_check(cfg, p, x, cache, &c, &a));
    if (!cache || !cache->mlp_hidden_pre || !cache->mlp_hidden)
        return ATTN_EINVAL;
    ATTN_TRY(attn__want(dout, c.dtype, x->ndim, x->shape));
    ATTN_TRY(attn__want_like(dx, x));
    if (grads)
        ATTN_TRY(attn__ffn_check_params(&c, grads));
    a.dout = dout;
    a.dx = dx;
    a.g = grads;
    const attn_view *ins[ATTN__MAX_ALIAS] = {x, dout}, *outs[ATTN__MAX_ALIAS] = {dx};
    int nout = attn__ffn_views(&c, grads, outs, 1);
    int nin = attn__ffn_views(&c, p, ins, attn__trace_views(cache, ins, 2));
    return attn__layer_exec(backward_body, &a, 0, outs, nout, ins, nin, work, work_size);
}
