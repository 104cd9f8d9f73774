/* SPDX-License-Identifier: MIT */
/* The encoder block, pre-norm (x + MHA(LN(x)), then + FFN(LN(.))) and post-norm, and back. */
#include <math.h>
#include <string.h>

#include "layers/layers_internal.h"

static const attn_trace no_trace;
static const attn_sdpa_opts default_opts;

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

/* ---- parameters: ln1_g, ln1_b, the MHA's, ln2_g, ln2_b, the FFN's (slab order) ---- */

static size_t ln_bytes(const attn_encoder_config *c) {
    return c->ln_affine ? 2 * attn__tensor_bytes(c->mha.dtype, 1, (int64_t[]){c->mha.d_model})
                        : 0;
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
    size_t one = attn__tensor_bytes(c->mha.dtype, 1, (int64_t[]){c->mha.d_model});
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

/* The views of a parameter (or gradient) struct that cfg uses, appended to l[n..]. */
static int enc_views(const attn_encoder_config *c, const attn_encoder_params *p,
                     const attn_view **l, int n) {
    if (!p)
        return n;
    if (c->ln_affine) {
        l[n++] = &p->ln1_g, l[n++] = &p->ln1_b;
        l[n++] = &p->ln2_g, l[n++] = &p->ln2_b;
    }
    return attn__ffn_views(&c->ffn, &p->ffn, l, attn__mha_views(&c->mha, &p->mha, l, n));
}

static attn_status check_params(const attn_encoder_config *c, const attn_encoder_params *p) {
    if (!p)
        return ATTN_EINVAL;
    if (c->ln_affine) {
        const attn_view *v[4] = {&p->ln1_g, &p->ln1_b, &p->ln2_g, &p->ln2_b};
        for (int i = 0; i < 4; ++i)
            ATTN_TRY(attn__want(v[i], c->mha.dtype, 1, (int64_t[]){c->mha.d_model}));
    }
    ATTN_TRY(attn__mha_check_params(&c->mha, &p->mha));
    return attn__ffn_check_params(&c->ffn, &p->ffn);
}

static attn_status shape_params(const attn_encoder_config *c, attn_encoder_params *p) {
    memset(p, 0, sizeof *p);
    if (c->ln_affine) {
        attn_view *v[4] = {&p->ln1_g, &p->ln1_b, &p->ln2_g, &p->ln2_b};
        for (int i = 0; i < 4; ++i)
            ATTN_TRY(attn__shape_view(c->mha.dtype, 1, (int64_t[]){c->mha.d_model}, v[i]));
    }
    ATTN_TRY(attn__mha_shape_params(&c->mha, &p->mha));
    return attn__ffn_shape_params(&c->ffn, &p->ffn);
}

/* x (B, T, C), and every trace view the block, its MHA and its FFN fill. */
static attn_status check_call(const attn_encoder_config *c, const attn_view *x,
                              const attn_trace *tr) {
    attn_dtype dt = c->mha.dtype;
    if (!x)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x));
    if (x->dtype != dt)
        return ATTN_EDTYPE;
    if (x->ndim != 3 || x->shape[2] != c->mha.d_model)
        return ATTN_ESHAPE;
    attn__mha_dims d = attn__mha_dims_self(&c->mha, x);
    ATTN_TRY(attn__mha_check_trace(&c->mha, &d, tr));
    ATTN_TRY(attn__ffn_check_trace(&c->ffn, x, tr));
    const attn_view *btc[] = {tr->ln1, tr->projected_attention, tr->residual1,
                              tr->ln2, tr->output,              tr->residual2};
    for (size_t i = 0; i < sizeof btc / sizeof *btc; ++i)
        ATTN_TRY(attn__want_opt(btc[i], dt, 3, x->shape));
    const attn_view *bt[] = {tr->ln1_mean, tr->ln1_rstd, tr->ln2_mean, tr->ln2_rstd};
    for (int i = 0; i < 4; ++i)
        ATTN_TRY(attn__want_opt(bt[i], dt, 2, x->shape));
    return ATTN_OK;
}

/* The arguments of one public encoder call, for its body. */
typedef struct enc_call {
    const attn_encoder_config *c;
    const attn_encoder_params *p;
    const attn_view *x, *dout;
    const attn_sdpa_opts *opts;
    const attn_trace *tr; /* forward: the trace; backward: the cache */
    attn_view *out, *dx;
    attn_encoder_params *g;
} enc_call;

/* A (B, T, C) activation: the trace's view when given, scratch otherwise. */
static attn_view act_view(attn__plan *pl, const attn_view *traced, const attn_view *x) {
    return traced ? *traced : attn__plan_scratch(pl, x->dtype, 3, x->shape, false);
}

/* r = res + MHA(d's input): folded into the output projection unless the trace keeps MHA's
 * output. */
static attn_status mha_residual(const attn_encoder_config *c, const attn_encoder_params *p,
                                const attn__mha_dims *d, const attn_sdpa_opts *opts,
                                const attn_view *res, attn_view *r, const attn_trace *tr,
                                attn__plan *pl) {
    if (!tr->projected_attention)
        return attn__mha_forward_body_res(&c->mha, &p->mha, d, opts, res, r, tr, pl);
    attn_view pa = *tr->projected_attention;
    ATTN_TRY(attn__mha_forward_body(&c->mha, &p->mha, d, opts, &pa, tr, pl));
    if (attn__plan_running(pl))
        attn__add_run(res, &pa, r);
    return ATTN_OK;
}

static attn_status forward_body(const void *args, attn__plan *pl) {
    const enc_call *a = args;
    const attn_encoder_config *c = a->c;
    const attn_encoder_params *p = a->p;
    const attn_view *x = a->x;
    const attn_trace *tr = a->tr;
    attn_view *out = a->out;
    const attn_view *g1 = c->ln_affine ? &p->ln1_g : NULL, *b1 = c->ln_affine ? &p->ln1_b : NULL;
    const attn_view *g2 = c->ln_affine ? &p->ln2_g : NULL, *b2 = c->ln_affine ? &p->ln2_b : NULL;
    bool run = attn__plan_running(pl);
    /*
     * The residual adds are folded into the output projection and the FFN's
     * down projection (C := residual + bias, then the GEMM with beta = 1), unless
     * the trace asks for the sublayer's own output (projected_attention,
     * mlp_output: then it is written there and added after).
     */
    attn_view r1 = act_view(pl, tr->residual1, x);
    attn_view ln1 = act_view(pl, tr->ln1, x);
    attn__mha_dims d;
    if (c->norm == ATTN_PRE_NORM) {
        /* r1 = x + MHA(LN1(x));  out = r1 + FFN(LN2(r1)) */
        attn_view ln2 = act_view(pl, tr->ln2, x);
        if (run)
            attn__layernorm_run(c->eps, x, g1, b1, &ln1, tr->ln1_mean, tr->ln1_rstd);
        d = attn__mha_dims_self(&c->mha, &ln1);
        ATTN_TRY(mha_residual(c, p, &d, a->opts, x, &r1, tr, pl));
        if (run)
            attn__layernorm_run(c->eps, &r1, g2, b2, &ln2, tr->ln2_mean, tr->ln2_rstd);
        ATTN_TRY(attn__ffn_forward_body_res(&c->ffn, &p->ffn, &ln2, &r1, out, tr, pl));
    } else {
        /* r1 = x + MHA(x); ln1 = LN1(r1); r2 = ln1 + FFN(ln1); out = LN2(r2) */
        attn_view r2 = act_view(pl, tr->residual2, x);
        d = attn__mha_dims_self(&c->mha, x);
        ATTN_TRY(mha_residual(c, p, &d, a->opts, x, &r1, tr, pl));
        if (run)
            attn__layernorm_run(c->eps, &r1, g1, b1, &ln1, tr->ln1_mean, tr->ln1_rstd);
        ATTN_TRY(attn__ffn_forward_body_res(&c->ffn, &p->ffn, &ln1, &ln1, &r2, tr, pl));
        if (run) {
            attn__layernorm_run(c->eps, &r2, g2, b2, out, tr->ln2_mean, tr->ln2_rstd);
            if (tr->ln2)
                attn__copy_run(out, tr->ln2);
        }
    }
    if (run && tr->output)
        attn__copy_run(out, tr->output);
    return ATTN_OK;
}

static attn_status prepare(const attn_encoder_config *cfg, const attn_encoder_params *p,
                           const attn_view *x, const attn_sdpa_opts *opts,
                           const attn_trace *trace, attn_encoder_config *c, enc_call *a) {
    ATTN_TRY(attn_encoder_config_resolve(cfg, c));
    ATTN_TRY(check_params(c, p));
    memset(a, 0, sizeof *a);
    a->c = c;
    a->p = p;
    a->x = x;
    a->opts = opts ? opts : &default_opts;
    a->tr = trace ? trace : &no_trace;
    return check_call(c, x, a->tr);
}

size_t attn_encoder_workspace_size(const attn_encoder_config *cfg, const attn_view *x,
                                   const attn_sdpa_opts *opts, const attn_trace *trace) {
    attn_encoder_config c;
    attn_encoder_params p;
    enc_call a;
    attn_view out;
    size_t need;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK || shape_params(&c, &p) != ATTN_OK)
        return 0;
    if (prepare(cfg, &p, x, opts, trace, &c, &a) != ATTN_OK ||
        attn__shape_view(c.mha.dtype, 3, x->shape, &out) != ATTN_OK)
        return 0;
    a.out = &out;
    return attn__layer_need(forward_body, &a, &need) == ATTN_OK ? need : 0;
}

attn_status attn_encoder_forward(const attn_encoder_config *cfg, const attn_encoder_params *p,
                                 const attn_view *x, const attn_sdpa_opts *opts,
                                 attn_view *out, const attn_trace *trace, void *work,
                                 size_t work_size) {
    attn_encoder_config c;
    enc_call a;
    ATTN_TRY(prepare(cfg, p, x, opts, trace, &c, &a));
    ATTN_TRY(attn__want(out, c.mha.dtype, 3, x->shape));
    a.out = out;
    const attn_view *ins[ATTN__MAX_ALIAS] = {x, a.opts->keep, a.opts->bias};
    const attn_view *outs[ATTN__MAX_ALIAS] = {out};
    attn_view cat;
    int nout = attn__trace_out_views(trace, outs, 1, &cat), nin = enc_views(&c, p, ins, 3);
    return attn__layer_exec(forward_body, &a, a.opts->threads, outs, nout, ins, nin, work, work_size);
}

/* ---- backward ------------------------------------------------------------ */

static attn_status backward_body(const void *args, attn__plan *pl) {
    const enc_call *a = args;
    const attn_encoder_config *c = a->c;
    const attn_encoder_params *p = a->p;
    const attn_view *x = a->x, *dout = a->dout;
    const attn_trace *k = a->tr;
    attn_view *dx = a->dx;
    attn_encoder_params *g = a->g;
    bool run = attn__plan_running(pl);
    const attn_view *g1 = c->ln_affine ? &p->ln1_g : NULL;
    const attn_view *g2 = c->ln_affine ? &p->ln2_g : NULL;
    attn_view *dg1 = g && c->ln_affine ? &g->ln1_g : NULL;
    attn_view *db1 = g && c->ln_affine ? &g->ln1_b : NULL;
    attn_view *dg2 = g && c->ln_affine ? &g->ln2_g : NULL;
    attn_view *db2 = g && c->ln_affine ? &g->ln2_b : NULL;
    attn_mha_params *gm = g ? &g->mha : NULL;
    attn_ffn_params *gf = g ? &g->ffn : NULL;
    attn_view dr1 = attn__plan_scratch(pl, x->dtype, 3, x->shape, false);
    attn_view dln = attn__plan_scratch(pl, x->dtype, 3, x->shape, false); /* written first */
    attn__mha_dims d;
    if (c->norm == ATTN_PRE_NORM) {
        /* out = r1 + FFN(LN2(r1)): dr1 = dout + LN2'(FFN'(dout)); dr1 := dout, one pass */
        if (run)
            attn__copy_run(dout, &dr1);
        ATTN_TRY(
            attn__ffn_backward_body_dx(&c->ffn, &p->ffn, k->ln2, k, dout, &dln, true, gf, pl));
        if (run) {
            attn__layernorm_backward_run(k->residual1, g2, k->ln2_mean, k->ln2_rstd, &dln, &dr1,
                                         dg2, db2);
            /* r1 = x + MHA(LN1(x)) */
            if (dx)
                attn__add_backward_run(&dr1, dx, NULL);
        }
        attn_view dln1 = attn__plan_scratch(pl, x->dtype, 3, x->shape, false);
        d = attn__mha_dims_self(&c->mha, k->ln1);
        ATTN_TRY(attn__mha_backward_body_dx(&c->mha, &p->mha, &d, a->opts, k, &dr1, &dln1, NULL,
                                            true, gm, pl));
        if (run)
            attn__layernorm_backward_run(x, g1, k->ln1_mean, k->ln1_rstd, &dln1, dx, dg1, db1);
    } else {
        /* out = LN2(r2), r2 = ln1 + FFN(ln1), ln1 = LN1(r1), r1 = x + MHA(x) */
        if (run)
            memset(dr1.data, 0, (size_t)attn_view_numel(&dr1) * attn_dtype_size(x->dtype));
        attn_view dr2 = attn__plan_scratch(pl, x->dtype, 3, x->shape, true);
        if (run) {
            attn__layernorm_backward_run(k->residual2, g2, k->ln2_mean, k->ln2_rstd, dout, &dr2,
                                         dg2, db2);
            attn__copy_run(&dr2, &dln); /* dln := dr2, then the FFN's dx adds to it */
        }
        ATTN_TRY(attn__ffn_backward_body(&c->ffn, &p->ffn, k->ln1, k, &dr2, &dln, gf, pl));
        if (run) {
            attn__layernorm_backward_run(k->residual1, g1, k->ln1_mean, k->ln1_rstd, &dln, &dr1,
                                         dg1, db1);
            if (dx)
                attn__add_backward_run(&dr1, dx, NULL);
        }
        d = attn__mha_dims_self(&c->mha, x);
        ATTN_TRY(attn__mha_backward_body(&c->mha, &p->mha, &d, a->opts, k, &dr1, dx, NULL, gm,
                                         pl));
    }
    return ATTN_OK;
}

/* The cache a backward reads: ln1, q, k, v, concat, lse, residual1, ln2 (pre) or
   residual2 (post), mlp_hidden_pre, mlp_hidden, the LN statistics. q, k and v are
   the column blocks of one (B, T, HD + 2 KD) tensor, so the training forward
   projects them with one GEMM as inference does (the forward's aliasing check
   sees them as that one tensor: attn__trace_out_views). The slab holds 13
   tensors: views[1..3] are carved from its second. */
#define ENC_CACHE_T 13
static void cache_shapes(const attn_encoder_config *c, int64_t B, int64_t T,
                         int64_t shp[ENC_CACHE_T][3], int *nd) {
    int64_t C = c->mha.d_model, HD = c->mha.heads * c->mha.d_head;
    int64_t KD = c->mha.kv_heads * c->mha.d_head, F = c->ffn.d_ff;
    int64_t s[ENC_CACHE_T][3] = {{B, T, C}, {B, T, HD + 2 * KD}, {B, T, HD},
                                 {B, c->mha.heads, T},         {B, T, C},
                                 {B, T, C}, {B, T, F},          {B, T, F},
                                 {B, T},    {B, T},             {B, T},
                                 {B, T},    {B, T, C}};
    memcpy(shp, s, sizeof s);
    for (int i = 0; i < ENC_CACHE_T; ++i)
        nd[i] = (i >= 8 && i <= 11) ? 2 : 3;
}

/* The 13 slab tensors t[] as the 15 cache views v[], and the trace over them. */
static attn_trace cache_trace(const attn_encoder_config *c, const attn_view *t, attn_view *v) {
    int64_t HD = c->mha.heads * c->mha.d_head, KD = c->mha.kv_heads * c->mha.d_head;
    v[0] = t[0];
    v[1] = attn__cols(&t[1], 0, HD);
    v[2] = attn__cols(&t[1], HD, KD);
    v[3] = attn__cols(&t[1], HD + KD, KD);
    for (int i = 2; i < ENC_CACHE_T; ++i)
        v[i + 2] = t[i];
    attn_trace r = {.ln1 = &v[0], .q = &v[1], .k = &v[2], .v = &v[3], .concat = &v[4],
                    .lse = &v[5], .residual1 = &v[6], .ln2 = &v[7], .mlp_hidden_pre = &v[8],
                    .mlp_hidden = &v[9], .ln1_mean = &v[10], .ln1_rstd = &v[11],
                    .ln2_mean = &v[12], .ln2_rstd = &v[13], .residual2 = &v[14]};
    return r;
}

size_t attn_encoder_cache_size(const attn_encoder_config *cfg, int64_t B, int64_t T) {
    attn_encoder_config c;
    int64_t shp[ENC_CACHE_T][3];
    int nd[ENC_CACHE_T];
    size_t need;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK || B < 0 || T < 0)
        return 0;
    cache_shapes(&c, B, T, shp, nd);
    return attn__slab_need(c.mha.dtype, ENC_CACHE_T, shp, nd, &need) == ATTN_OK ? need : 0;
}

attn_status attn_encoder_cache_bind(const attn_encoder_config *cfg, int64_t B, int64_t T,
                                    void *slab, size_t slab_size, attn_view *v,
                                    attn_trace *tr) {
    attn_encoder_config c;
    ATTN_TRY(attn_encoder_config_resolve(cfg, &c));
    if (!v || !tr || B < 0 || T < 0)
        return ATTN_EINVAL;
    int64_t shp[ENC_CACHE_T][3];
    int nd[ENC_CACHE_T];
    attn_view t[ENC_CACHE_T];
    cache_shapes(&c, B, T, shp, nd);
    ATTN_TRY(attn__slab_bind(c.mha.dtype, ENC_CACHE_T, shp, nd, slab, slab_size, t));
    *tr = cache_trace(&c, t, v);
    return ATTN_OK;
}

static attn_status check_cache(const attn_encoder_config *c, const attn_trace *k) {
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
    enc_call a;
    size_t need;
    if (attn_encoder_config_resolve(cfg, &c) != ATTN_OK || shape_params(&c, &p) != ATTN_OK)
        return 0;
    if (prepare(cfg, &p, x, opts, NULL, &c, &a) != ATTN_OK)
        return 0;
    int64_t shp[ENC_CACHE_T][3];
    int nd[ENC_CACHE_T];
    cache_shapes(&c, x->shape[0], x->shape[1], shp, nd);
    attn_view t[ENC_CACHE_T], v[15], dout;
    if (attn__shape_views(c.mha.dtype, ENC_CACHE_T, shp, nd, t) != ATTN_OK ||
        attn__shape_view(c.mha.dtype, 3, x->shape, &dout) != ATTN_OK)
        return 0;
    attn_trace k = cache_trace(&c, t, v);
    a.tr = &k;
    a.dout = &dout;
    return attn__layer_need(backward_body, &a, &need) == ATTN_OK ? need : 0;
}

attn_status attn_encoder_backward(const attn_encoder_config *cfg, const attn_encoder_params *p,
                                  const attn_view *x, const attn_sdpa_opts *opts,
                                  const attn_trace *cache, const attn_view *dout,
                                  attn_view *dx, attn_encoder_params *grads, void *work,
                                  size_t work_size) {
    attn_encoder_config c;
    enc_call a;
    ATTN_TRY(prepare(cfg, p, x, opts, cache, &c, &a));
    ATTN_TRY(check_cache(&c, cache));
    ATTN_TRY(attn__want(dout, c.mha.dtype, 3, x->shape));
    ATTN_TRY(attn__want_like(dx, x));
    if (grads)
        ATTN_TRY(check_params(&c, grads));
    a.dout = dout;
    a.dx = dx;
    a.g = grads;
    const attn_view *ins[ATTN__MAX_ALIAS] = {x, dout, a.opts->keep, a.opts->bias};
    const attn_view *outs[ATTN__MAX_ALIAS] = {dx};
    int nout = enc_views(&c, grads, outs, 1);
    int nin = enc_views(&c, p, ins, attn__trace_views(cache, ins, 4));
    return attn__layer_exec(backward_body, &a, a.opts->threads, outs, nout, ins, nin, work, work_size);
}
