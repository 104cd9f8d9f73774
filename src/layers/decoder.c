/* SPDX-License-Identifier: MIT */
/* The decoder block (nn.TransformerDecoderLayer): whole-sequence forward and backward, cached
 * steps. */
#include <math.h>
#include <string.h>

#include "layers/decode_internal.h"

/* A trusted run inside a body: only in the running pass. */
#define RUN(call)                                                                              \
    do {                                                                                       \
        if (attn__plan_running(pl))                                                            \
            call;                                                                              \
    } while (0)

static const attn_sdpa_opts no_sdpa_opts;
static const attn_step_opts no_step_opts;

/* ---- the sub-blocks ------------------------------------------------------------ */

/*
 * The attention sub-blocks run on the MHA body: the self-attention with the
 * config's RoPE (on q and k at positions 0..), the cross-attention over the
 * memory without it. Attention blk (0 self, 1 cross)'s saved q, k, v, concat
 * and lse are the body's trace (empty when not saving): the forward fills them,
 * the backward reads them.
 */
static attn_trace att_saved(const attn_decoder_saved *sv, int blk) {
    attn_trace t = {0};
    if (!sv)
        return t;
    attn_decoder_saved *s = (attn_decoder_saved *)sv; /* the trace's views are not const */
    if (blk == 0) {
        t.q = &s->sq, t.k = &s->sk, t.v = &s->sv, t.concat = &s->sconcat, t.lse = &s->slse;
    } else {
        t.q = &s->cq, t.k = &s->ck, t.v = &s->cv, t.concat = &s->cconcat, t.lse = &s->clse;
    }
    return t;
}

/* The MHA call of attention blk on input a. */
static attn__mha_dims att_dims(const attn_decoder_config *c, int blk, const attn_view *a,
                               const attn_view *m) {
    if (blk == 1)
        return attn__mha_dims_cross(&c->cross, a, m);
    attn__mha_dims d = attn__mha_dims_self(&c->self_attn, a);
    d.rope = &c->rope;
    return d;
}

/* out = act(a W1 + b1) W2 + b2 (the FFN layer's body), saving the hidden layer when asked. */
static attn_status ffn_fwd(const attn_ffn_config *c, const attn_ffn_params *p,
                           const attn_view *a, attn_view *out, const attn_view *spre,
                           const attn_view *shid, attn__plan *pl) {
    attn_trace tr = {.mlp_hidden_pre = (attn_view *)spre, .mlp_hidden = (attn_view *)shid};
    return attn__ffn_forward_body(c, p, a, out, &tr, pl);
}

static attn_status ffn_bwd(const attn_ffn_config *c, const attn_ffn_params *p,
                           const attn_view *a, const attn_view *pre, const attn_view *hid,
                           const attn_view *dout, attn_view *da, attn_ffn_params *g,
                           attn__plan *pl) {
    attn_trace cache = {.mlp_hidden_pre = (attn_view *)pre, .mlp_hidden = (attn_view *)hid};
    return attn__ffn_backward_body(c, p, a, &cache, dout, da, g, pl);
}

/* LayerNorm i's gamma and beta (NULL without ln_affine or without the struct). */
static const attn_view *ln_g(const attn_decoder_config *c, const attn_decoder_params *p,
                             int i) {
    const attn_view *v[3] = {&p->ln1_g, &p->ln2_g, &p->ln3_g};
    return p && c->ln_affine ? v[i] : NULL;
}
static const attn_view *ln_b(const attn_decoder_config *c, const attn_decoder_params *p,
                             int i) {
    const attn_view *v[3] = {&p->ln1_b, &p->ln2_b, &p->ln3_b};
    return p && c->ln_affine ? v[i] : NULL;
}

/* A call's config, resolved, and its parameters checked against it. */
static attn_status call_config(const attn_decoder_config *cfg, const attn_decoder_params *p,
                               attn_decoder_config *c) {
    ATTN_TRY(attn_decoder_config_resolve(cfg, c));
    return attn__dec_check_params(c, p);
}

/* What a size query runs on: the resolved config and parameters of its shapes alone. */
typedef struct dec_query {
    attn_decoder_config c;
    attn_decoder_params p;
} dec_query;

/* false: cfg is invalid (the query answers 0). */
static bool query_init(const attn_decoder_config *cfg, dec_query *q) {
    return attn_decoder_config_resolve(cfg, &q->c) == ATTN_OK &&
           attn__dec_shape_params(&q->c, &q->p) == ATTN_OK;
}

/* The counting pass of body over args: the workspace, or 0 when it refuses them. */
static size_t query_need(attn__layer_body body, const void *args) {
    size_t need;
    return attn__layer_need(body, args, &need) == ATTN_OK ? need : 0;
}

/* ---- the whole-sequence forward ----------------------------------------------- */

typedef struct dec_args {
    const attn_decoder_config *c;
    const attn_decoder_params *p;
    const attn_view *x, *m;
    const attn_sdpa_opts *so, *co;
    attn_view *out;               /* forward */
    const attn_decoder_saved *sv; /* forward (may be NULL), backward */
    const attn_view *dout;        /* backward */
    attn_view *dx, *dm;
    attn_decoder_params *g;
} dec_args;

/* Sub-block blk (0 self-attention, 1 cross-attention, 2 FFN) of input a into h. */
static attn_status sub_fwd(const dec_args *d, int blk, const attn_view *a, attn_view *h,
                           const attn_decoder_saved *sv, attn__plan *pl) {
    const attn_decoder_config *c = d->c;
    if (blk < 2) {
        attn__mha_dims dm = att_dims(c, blk, a, d->m);
        attn_trace tr = att_saved(sv, blk);
        return attn__mha_forward_body(blk ? &c->cross : &c->self_attn,
                                      blk ? &d->p->cross : &d->p->self_attn, &dm,
                                      blk ? d->co : d->so, h, &tr, pl);
    }
    return ffn_fwd(&c->ffn, &d->p->ffn, a, h, sv ? &sv->hid_pre : NULL, sv ? &sv->hid : NULL,
                   pl);
}

static attn_status fwd_body(const dec_args *d, attn_view *out, const attn_decoder_saved *sv,
                            attn__plan *pl) {
    const attn_decoder_config *c = d->c;
    attn_dtype dt = c->self_attn.dtype;
    const attn_view *x = d->x;
    attn_view cur = *x;
    int last = 2;
    for (int blk = 0; blk < 3; ++blk) {
        if (blk == 1 && !attn__dec_has_cross(c))
            continue;
        attn_view h = attn__plan_scratch(pl, dt, 3, x->shape, false);
        attn_view *mean = sv ? (attn_view *)&sv->mean[blk] : NULL;
        attn_view *rstd = sv ? (attn_view *)&sv->rstd[blk] : NULL;
        if (c->norm == ATTN_PRE_NORM) {
            /* cur := cur + sub(LN(cur)) */
            attn_view lin = cur;
            if (sv) {
                lin = sv->ln_in[blk];
                RUN(attn__view_copy_run(&cur, &lin));
            }
            attn_view a = sv ? sv->ln_out[blk] : attn__plan_scratch(pl, dt, 3, x->shape, false);
            RUN(attn__layernorm_run(c->eps, &lin, ln_g(c, d->p, blk), ln_b(c, d->p, blk), &a,
                                    mean, rstd));
            ATTN_TRY(sub_fwd(d, blk, &a, &h, sv, pl));
            attn_view nxt = blk == last ? *out : attn__plan_scratch(pl, dt, 3, x->shape, false);
            RUN(attn__add_run(&lin, &h, &nxt));
            cur = nxt;
        } else {
            /* cur := LN(cur + sub(cur)) */
            ATTN_TRY(sub_fwd(d, blk, &cur, &h, sv, pl));
            attn_view sum =
                sv ? sv->ln_in[blk] : attn__plan_scratch(pl, dt, 3, x->shape, false);
            RUN(attn__add_run(&cur, &h, &sum));
            attn_view lout = blk == last ? *out
                             : sv        ? sv->ln_out[blk]
                                         : attn__plan_scratch(pl, dt, 3, x->shape, false);
            RUN(attn__layernorm_run(c->eps, &sum, ln_g(c, d->p, blk), ln_b(c, d->p, blk), &lout,
                                    mean, rstd));
            if (blk == last && sv)
                RUN(attn__view_copy_run(out, (attn_view *)&sv->ln_out[blk]));
            cur = lout;
        }
    }
    return ATTN_OK;
}

/* The checks of forward, backward and the queries: everything but outputs and aliasing. */
static attn_status dec_prepare(const attn_decoder_config *cfg, const attn_decoder_params *p,
                               const attn_view *x, const attn_view *m,
                               const attn_sdpa_opts **so, const attn_sdpa_opts **co,
                               attn_decoder_config *c) {
    ATTN_TRY(call_config(cfg, p, c));
    if (!x)
        return ATTN_EINVAL;
    if (attn__dec_has_cross(c) != (m != NULL))
        return ATTN_EINVAL;
    attn_dtype dt = c->self_attn.dtype;
    ATTN_TRY(attn_view_check(x));
    if (x->dtype != dt)
        return ATTN_EDTYPE;
    if (x->ndim != 3 || x->shape[2] != c->self_attn.d_model || x->shape[0] < 1 ||
        x->shape[1] < 1)
        return ATTN_ESHAPE;
    if (m) {
        ATTN_TRY(attn_view_check(m));
        if (m->dtype != dt)
            return ATTN_EDTYPE;
        if (m->ndim != 3 || m->shape[0] != x->shape[0] || m->shape[2] != c->cross.d_kv ||
            m->shape[1] < 1)
            return ATTN_ESHAPE;
    }
    *so = *so ? *so : &no_sdpa_opts;
    *co = *co ? *co : &no_sdpa_opts;
    if ((*so)->weights || (*so)->lse || (*co)->weights || (*co)->lse)
        return ATTN_EINVAL;
    /* the attention options, against the shapes of the queries and keys they will see */
    int64_t B = x->shape[0], T = x->shape[1];
    attn_view q, k;
    ATTN_TRY(attn__shape_view(dt, 4, (int64_t[]){B, c->self_attn.heads, T, c->self_attn.d_head},
                              &q));
    ATTN_TRY(attn__shape_view(
        dt, 4, (int64_t[]){B, c->self_attn.kv_heads, T, c->self_attn.d_head}, &k));
    attn__sdpa_plan sp;
    ATTN_TRY(attn__sdpa_plan_init(&q, &k, &k, *so, false, &sp));
    if (m) {
        ATTN_TRY(
            attn__shape_view(dt, 4, (int64_t[]){B, c->cross.heads, T, c->cross.d_head}, &q));
        ATTN_TRY(attn__shape_view(
            dt, 4, (int64_t[]){B, c->cross.kv_heads, m->shape[1], c->cross.d_head}, &k));
        ATTN_TRY(attn__sdpa_plan_init(&q, &k, &k, *co, false, &sp));
    }
    return ATTN_OK;
}

static attn_status fwd_cb(const void *args, attn__plan *pl) {
    const dec_args *d = args;
    return fwd_body(d, d->out, d->sv, pl);
}

size_t attn_decoder_workspace_size(const attn_decoder_config *cfg, const attn_view *x,
                                   const attn_view *memory, const attn_sdpa_opts *self_opts,
                                   const attn_sdpa_opts *cross_opts) {
    dec_query q;
    attn_view out;
    if (!query_init(cfg, &q) ||
        dec_prepare(cfg, &q.p, x, memory, &self_opts, &cross_opts, &q.c) != ATTN_OK ||
        attn__shape_view(q.c.self_attn.dtype, 3, x->shape, &out) != ATTN_OK)
        return 0;
    dec_args d = {&q.c, &q.p, x, memory, self_opts, cross_opts, .out = &out};
    return query_need(fwd_cb, &d);
}

attn_status attn_decoder_forward(const attn_decoder_config *cfg, const attn_decoder_params *p,
                                 const attn_view *x, const attn_view *memory,
                                 const attn_sdpa_opts *self_opts,
                                 const attn_sdpa_opts *cross_opts, attn_view *out,
                                 const attn_decoder_saved *saved, void *work,
                                 size_t work_size) {
    attn_decoder_config c;
    ATTN_TRY(dec_prepare(cfg, p, x, memory, &self_opts, &cross_opts, &c));
    ATTN_TRY(attn__want(out, c.self_attn.dtype, 3, x->shape));
    int64_t S = memory ? memory->shape[1] : 1;
    if (saved)
        ATTN_TRY(attn__dec_check_saved(&c, saved, x->shape[0], x->shape[1], S));
    const attn_view *outs[ATTN__MAX_ALIAS] = {out};
    const attn_view *ins[ATTN__MAX_ALIAS] = {
        x, memory, self_opts->keep, self_opts->bias, cross_opts->keep, cross_opts->bias};
    int nout = attn__dec_saved_views(&c, saved, outs, 1),
        nin = attn__dec_param_views(&c, p, ins, 6);
    dec_args d = {&c, p, x, memory, self_opts, cross_opts, .out = out, .sv = saved};
    return attn__layer_exec(fwd_cb, &d, self_opts->threads, outs, nout, ins, nin, work, work_size);
}

/* ---- the backward ---------------------------------------------------------------- */

static attn_status sub_bwd(const dec_args *d, int blk, const attn_view *a,
                           const attn_decoder_saved *sv, const attn_view *dh, attn_view *da,
                           attn_view *dm, attn_decoder_params *g, attn__plan *pl) {
    const attn_decoder_config *c = d->c;
    if (blk < 2) {
        attn__mha_dims dd = att_dims(c, blk, a, d->m);
        attn_trace cache = att_saved(sv, blk);
        attn_mha_params *gm = g ? (blk ? &g->cross : &g->self_attn) : NULL;
        return attn__mha_backward_body(
            blk ? &c->cross : &c->self_attn, blk ? &d->p->cross : &d->p->self_attn, &dd,
            blk ? d->co : d->so, &cache, dh, da, blk ? dm : NULL, gm, pl);
    }
    return ffn_bwd(&c->ffn, &d->p->ffn, a, &sv->hid_pre, &sv->hid, dh, da, g ? &g->ffn : NULL,
                   pl);
}

static attn_status bwd_body(const dec_args *d, const attn_decoder_saved *sv,
                            const attn_view *dout, attn_view *dx, attn_view *dm,
                            attn_decoder_params *g, attn__plan *pl) {
    const attn_decoder_config *c = d->c;
    attn_dtype dt = c->self_attn.dtype;
    const int64_t *shp = d->x->shape;
    attn_view dnext = *dout;
    int first = 0;
    attn_view *dg[3] = {g && c->ln_affine ? &g->ln1_g : NULL,
                        g && c->ln_affine ? &g->ln2_g : NULL,
                        g && c->ln_affine ? &g->ln3_g : NULL};
    attn_view *db[3] = {g && c->ln_affine ? &g->ln1_b : NULL,
                        g && c->ln_affine ? &g->ln2_b : NULL,
                        g && c->ln_affine ? &g->ln3_b : NULL};
    for (int blk = 2; blk >= 0; --blk) {
        if (blk == 1 && !attn__dec_has_cross(c))
            continue;
        /* the gradient of this block's input: dx for the first block, when given */
        attn_view dprev = blk == first && dx ? *dx : attn__plan_scratch(pl, dt, 3, shp, true);
        if (c->norm == ATTN_PRE_NORM) {
            /* next = in + sub(LN(in)) */
            attn_view da = attn__plan_scratch(pl, dt, 3, shp, true);
            RUN(attn__add_backward_run(&dnext, &dprev, NULL));
            ATTN_TRY(sub_bwd(d, blk, &sv->ln_out[blk], sv, &dnext, &da, dm, g, pl));
            RUN(attn__layernorm_backward_run(&sv->ln_in[blk], ln_g(c, d->p, blk),
                                             &sv->mean[blk], &sv->rstd[blk], &da, &dprev,
                                             dg[blk], db[blk]));
        } else {
            /* next = LN(in + sub(in)); in = x, ln_out[0], ln_out[1 or 0] */
            attn_view dsum = attn__plan_scratch(pl, dt, 3, shp, true);
            RUN(attn__layernorm_backward_run(&sv->ln_in[blk], ln_g(c, d->p, blk),
                                             &sv->mean[blk], &sv->rstd[blk], &dnext, &dsum,
                                             dg[blk], db[blk]));
            RUN(attn__add_backward_run(&dsum, &dprev, NULL));
            const attn_view *in = blk == 0                              ? d->x
                                  : blk == 1 || !attn__dec_has_cross(c) ? &sv->ln_out[0]
                                                                        : &sv->ln_out[1];
            ATTN_TRY(sub_bwd(d, blk, in, sv, &dsum, &dprev, dm, g, pl));
        }
        dnext = dprev;
    }
    return ATTN_OK;
}

static attn_status bwd_cb(const void *args, attn__plan *pl) {
    const dec_args *d = args;
    return bwd_body(d, d->sv, d->dout, d->dx, d->dm, d->g, pl);
}

size_t attn_decoder_backward_workspace_size(const attn_decoder_config *cfg, const attn_view *x,
                                            const attn_view *memory,
                                            const attn_sdpa_opts *self_opts,
                                            const attn_sdpa_opts *cross_opts) {
    dec_query q;
    if (!query_init(cfg, &q) ||
        dec_prepare(cfg, &q.p, x, memory, &self_opts, &cross_opts, &q.c) != ATTN_OK)
        return 0;
    const attn_decoder_config *c = &q.c;
    int64_t sh[ATTN__DEC_NSAVED][3];
    int nd[ATTN__DEC_NSAVED];
    attn__dec_saved_shapes(c, x->shape[0], x->shape[1], memory ? memory->shape[1] : 1, sh, nd);
    attn_decoder_saved sv;
    memset(&sv, 0, sizeof sv);
    for (int i = 0; i < ATTN__DEC_NSAVED; ++i)
        if (nd[i])
            if (attn__shape_view(c->self_attn.dtype, nd[i], sh[i],
                                 attn__dec_saved_slot(&sv, i)) != ATTN_OK)
                return 0;
    /* every gradient wanted (dx, dmemory, all parameters), as the doc says */
    attn_view dout, dx, dm;
    attn_decoder_params g = q.p;
    if (attn__shape_view(c->self_attn.dtype, 3, x->shape, &dout) != ATTN_OK ||
        attn__shape_view(c->self_attn.dtype, 3, x->shape, &dx) != ATTN_OK ||
        (memory && attn__shape_view(c->self_attn.dtype, 3, memory->shape, &dm) != ATTN_OK))
        return 0;
    dec_args d = {c,         &q.p,
                  x,         memory,
                  self_opts, cross_opts,
                  .sv = &sv, .dout = &dout,
                  .dx = &dx, .dm = memory ? &dm : NULL,
                  .g = &g};
    return query_need(bwd_cb, &d);
}

static attn_status check_grad(const attn_view *g, const attn_view *like) {
    if (!g)
        return ATTN_OK;
    return attn__want(g, like->dtype, like->ndim, like->shape);
}

attn_status attn_decoder_backward(const attn_decoder_config *cfg, const attn_decoder_params *p,
                                  const attn_view *x, const attn_view *memory,
                                  const attn_sdpa_opts *self_opts,
                                  const attn_sdpa_opts *cross_opts,
                                  const attn_decoder_saved *saved, const attn_view *dout,
                                  attn_view *dx, attn_view *dmemory, attn_decoder_params *grads,
                                  void *work, size_t work_size) {
    attn_decoder_config c;
    ATTN_TRY(dec_prepare(cfg, p, x, memory, &self_opts, &cross_opts, &c));
    if (!saved)
        return ATTN_EINVAL;
    ATTN_TRY(attn__dec_check_saved(&c, saved, x->shape[0], x->shape[1],
                                   memory ? memory->shape[1] : 1));
    ATTN_TRY(attn__want(dout, c.self_attn.dtype, 3, x->shape));
    ATTN_TRY(check_grad(dx, x));
    if (memory)
        ATTN_TRY(check_grad(dmemory, memory));
    else if (dmemory)
        return ATTN_EINVAL;
    if (grads)
        ATTN_TRY(attn__dec_check_params(&c, grads));
    const attn_view *outs[ATTN__MAX_ALIAS] = {dx, dmemory};
    const attn_view *ins[ATTN__MAX_ALIAS] = {
        x, memory, dout, self_opts->keep, self_opts->bias, cross_opts->keep, cross_opts->bias};
    int no = attn__dec_param_views(&c, grads, outs, 2);
    int ni = attn__dec_saved_views(&c, saved, ins, attn__dec_param_views(&c, p, ins, 7));
    dec_args d = {&c,          p,
                  x,           memory,
                  self_opts,   cross_opts,
                  .sv = saved, .dout = dout,
                  .dx = dx,    .dm = dmemory,
                  .g = grads};
    return attn__layer_exec(bwd_cb, &d, self_opts->threads, outs, no, ins, ni, work, work_size);
}

/* ---- the memory, projected once --------------------------------------------------- */

static attn_status mem_prepare(const attn_decoder_config *cfg, const attn_decoder_params *p,
                               const attn_view *m, const int64_t *mem_len,
                               const attn_kv_cache *mc, attn_decoder_config *c) {
    ATTN_TRY(attn_decoder_config_resolve(cfg, c));
    if (!attn__dec_has_cross(c) || !m || !mc || !p)
        return ATTN_EINVAL;
    ATTN_TRY(attn__mha_check_params(&c->cross, &p->cross));
    ATTN_TRY(attn__kv_cache_check(mc, &c->cross));
    ATTN_TRY(attn_view_check(m));
    if (m->dtype != c->cross.dtype)
        return ATTN_EDTYPE;
    if (m->ndim != 3 || m->shape[0] != mc->k.shape[0] || m->shape[2] != c->cross.d_kv)
        return ATTN_ESHAPE;
    int64_t S = m->shape[1];
    if (S > mc->k.shape[2])
        return ATTN_ERANGE;
    return attn__check_lengths(mem_len, m->shape[0], S);
}

static attn_status mem_body(const attn_decoder_config *c, const attn_decoder_params *p,
                            const attn_view *m, const int64_t *mem_len, const attn_kv_cache *mc,
                            attn__plan *pl) {
    const attn_mha_config *x = &c->cross;
    int64_t B = m->shape[0], S = m->shape[1], KD = x->kv_heads * x->d_head;
    attn_view K = attn__plan_scratch(pl, x->dtype, 3, (int64_t[]){B, S, KD}, false);
    attn_view V = attn__plan_scratch(pl, x->dtype, 3, (int64_t[]){B, S, KD}, false);
    ATTN_TRY(attn__plan_linear(pl, m, &p->cross.wk, x->bias ? &p->cross.bk : NULL, &K));
    ATTN_TRY(attn__plan_linear(pl, m, &p->cross.wv, x->bias ? &p->cross.bv : NULL, &V));
    if (!attn__plan_running(pl))
        return ATTN_OK;
    attn_view Kh = attn__heads(&K, x->d_head), Vh = attn__heads(&V, x->d_head), dk, dv;
    ATTN_TRY(attn_view_slice(&mc->k, 2, 0, S, 1, &dk));
    ATTN_TRY(attn_view_slice(&mc->v, 2, 0, S, 1, &dv));
    attn__view_copy_run(&Kh, &dk);
    attn__view_copy_run(&Vh, &dv);
    for (int64_t b = 0; b < B; ++b)
        mc->len[b] = mem_len ? mem_len[b] : S;
    return ATTN_OK;
}

typedef struct mem_args {
    const attn_decoder_config *c;
    const attn_decoder_params *p;
    const attn_view *m;
    const int64_t *mem_len;
    const attn_kv_cache *mc;
} mem_args;

static attn_status mem_cb(const void *args, attn__plan *pl) {
    const mem_args *a = args;
    return mem_body(a->c, a->p, a->m, a->mem_len, a->mc, pl);
}

size_t attn_decoder_memory_workspace_size(const attn_decoder_config *cfg,
                                          const attn_view *memory, const attn_kv_cache *mem) {
    dec_query q;
    if (!query_init(cfg, &q) || mem_prepare(cfg, &q.p, memory, NULL, mem, &q.c) != ATTN_OK)
        return 0;
    mem_args a = {&q.c, &q.p, memory, NULL, mem};
    return query_need(mem_cb, &a);
}

attn_status attn_decoder_memory(const attn_decoder_config *cfg, const attn_decoder_params *p,
                                const attn_view *memory, const int64_t *mem_len,
                                attn_kv_cache *mem, void *work, size_t work_size) {
    attn_decoder_config c;
    ATTN_TRY(mem_prepare(cfg, p, memory, mem_len, mem, &c));
    attn_view lv = attn__kv_len_view(mem);
    const attn_view *outs[ATTN__MAX_ALIAS] = {&mem->k, &mem->v, &lv};
    const attn_view *ins[ATTN__MAX_ALIAS] = {memory};
    mem_args a = {&c, p, memory, mem_len, mem};
    return attn__layer_exec(mem_cb, &a, 0, outs, 3, ins,
                            attn__mha_views(&c.cross, &p->cross, ins, 1), work, work_size);
}

/* ---- the cached step ---------------------------------------------------------------- */

typedef struct step_args {
    const attn_decoder_config *c;
    const attn_decoder_params *p;
    const attn_step_opts *o, *oc; /* the self-attention's options, the cross-attention's */
    const attn_view *x;
    const attn_kv_cache *kc, *mc;
    attn_view *out;
} step_args;

static attn_status sub_step(const step_args *s, int blk, const attn_view *a, attn_view *h,
                            attn__plan *pl) {
    const attn_decoder_config *c = s->c;
    if (blk == 0)
        return attn__mha_step_body(&c->self_attn, &s->p->self_attn, s->o, &c->rope, true, a,
                                   s->kc, h, pl);
    if (blk == 1)
        return attn__mha_step_body(&c->cross, &s->p->cross, s->oc, &c->rope, false, a, s->mc, h,
                                   pl);
    return ffn_fwd(&c->ffn, &s->p->ffn, a, h, NULL, NULL, pl);
}

static attn_status step_body(const step_args *s, attn_view *out, attn__plan *pl) {
    const attn_decoder_config *c = s->c;
    attn_dtype dt = c->self_attn.dtype;
    const int64_t *shp = s->x->shape;
    attn_view cur = *s->x;
    for (int blk = 0; blk < 3; ++blk) {
        if (blk == 1 && !attn__dec_has_cross(c))
            continue;
        attn_view h = attn__plan_scratch(pl, dt, 3, shp, false);
        attn_view nxt = blk == 2 ? *out : attn__plan_scratch(pl, dt, 3, shp, false);
        if (c->norm == ATTN_PRE_NORM) {
            attn_view a = attn__plan_scratch(pl, dt, 3, shp, false);
            RUN(attn__layernorm_run(c->eps, &cur, ln_g(c, s->p, blk), ln_b(c, s->p, blk), &a,
                                    NULL, NULL));
            ATTN_TRY(sub_step(s, blk, &a, &h, pl));
            RUN(attn__add_run(&cur, &h, &nxt));
        } else {
            attn_view sum = attn__plan_scratch(pl, dt, 3, shp, false);
            ATTN_TRY(sub_step(s, blk, &cur, &h, pl));
            RUN(attn__add_run(&cur, &h, &sum));
            RUN(attn__layernorm_run(c->eps, &sum, ln_g(c, s->p, blk), ln_b(c, s->p, blk), &nxt,
                                    NULL, NULL));
        }
        cur = nxt;
    }
    if (attn__plan_running(pl)) /* the rows of padding tokens are 0 */
        for (int64_t b = 0; b < shp[0]; ++b) {
            int64_t n = attn__step_n(s->o, b, shp[1]);
            if (n == shp[1])
                continue;
            attn_view t, r;
            ATTN_TRY(attn_view_select(out, 0, b, &t));
            ATTN_TRY(attn_view_slice(&t, 0, n, shp[1], 1, &r));
            attn__dec_zero(&r);
        }
    return ATTN_OK;
}

static attn_status step_prepare(const attn_decoder_config *cfg, const attn_decoder_params *p,
                                const attn_step_opts *o, const attn_view *x,
                                const attn_kv_cache *kc, const attn_kv_cache *mc,
                                attn_step_opts *oc, attn_decoder_config *c) {
    ATTN_TRY(call_config(cfg, p, c));
    if (o->rope.on)
        return ATTN_EINVAL; /* a decoder's RoPE is in its config */
    if (attn__dec_has_cross(c) != (mc != NULL))
        return ATTN_EINVAL;
    attn_step_opts os = *o;
    os.rope = c->rope;
    attn_mha_config r;
    ATTN_TRY(attn__mha_step_check(&c->self_attn, &p->self_attn, &os, true, x, kc, &r));
    *oc = (attn_step_opts){
        .scale = o->scale, .n_new = o->n_new, .threads = o->threads, .split = o->split};
    if (mc)
        ATTN_TRY(attn__mha_step_check(&c->cross, &p->cross, oc, false, x, mc, &r));
    return ATTN_OK;
}

static attn_status step_cb(const void *args, attn__plan *pl) {
    const step_args *a = args;
    return step_body(a, a->out, pl);
}

size_t attn_decoder_step_workspace_size(const attn_decoder_config *cfg, const attn_view *x,
                                        const attn_kv_cache *self_cache,
                                        const attn_kv_cache *mem, const attn_step_opts *opts) {
    dec_query q;
    attn_step_opts oc;
    attn_view out;
    if (!opts)
        opts = &no_step_opts;
    if (!query_init(cfg, &q) ||
        step_prepare(cfg, &q.p, opts, x, self_cache, mem, &oc, &q.c) != ATTN_OK ||
        attn__shape_view(q.c.self_attn.dtype, 3, x->shape, &out) != ATTN_OK)
        return 0;
    step_args s = {&q.c, &q.p, opts, &oc, x, self_cache, mem, &out};
    return query_need(step_cb, &s);
}

attn_status attn_decoder_step(const attn_decoder_config *cfg, const attn_decoder_params *p,
                              const attn_step_opts *opts, const attn_view *x,
                              attn_kv_cache *self_cache, const attn_kv_cache *mem,
                              attn_view *out, void *work, size_t work_size) {
    attn_decoder_config c;
    attn_step_opts oc;
    if (!opts)
        opts = &no_step_opts;
    ATTN_TRY(step_prepare(cfg, p, opts, x, self_cache, mem, &oc, &c));
    ATTN_TRY(attn__want(out, c.self_attn.dtype, 3, x->shape));
    attn_view lv = attn__kv_len_view(self_cache), mlv;
    if (mem)
        mlv = attn__kv_len_view(mem);
    const attn_view *outs[ATTN__MAX_ALIAS] = {out, &self_cache->k, &self_cache->v, &lv};
    const attn_view *ins[ATTN__MAX_ALIAS] = {x,
                                             opts->keep,
                                             opts->bias,
                                             mem ? &mem->k : NULL,
                                             mem ? &mem->v : NULL,
                                             mem ? &mlv : NULL,
                                             opts->alibi,
                                             opts->sinks};
    step_args s = {&c, p, opts, &oc, x, self_cache, mem, out};
    ATTN_TRY(attn__layer_exec(step_cb, &s, opts->threads, outs, 4, ins,
                              attn__dec_param_views(&c, p, ins, 8),
                              work, work_size));
    attn__mha_step_commit(opts, x, self_cache);
    return ATTN_OK;
}
