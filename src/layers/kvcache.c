/* SPDX-License-Identifier: MIT */
/* The caller-owned KV cache and the cached multi-head attention step (prefill and decode). */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "layers/decode_internal.h"

static const attn_step_opts default_step;

/* ---- shared validation -------------------------------------------------------- */

attn_status attn__rope_check(const attn_rope_config *r, int64_t D) {
    if (!r->on)
        return ATTN_OK;
    if ((unsigned)r->style > ATTN_ROPE_HALF || !(r->base >= 0) || !isfinite(r->base) || D % 2)
        return ATTN_EINVAL;
    return ATTN_OK;
}

static attn_status step_check_opts(const attn_step_opts *o, int64_t B, int64_t Tq) {
    if (!isfinite(o->scale) || o->threads < 0 || o->split < 0)
        return ATTN_EINVAL;
    return attn__check_lengths(o->n_new, B, Tq);
}

void attn__dec_zero(const attn_view *v) {
    int64_t sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0};
    int off = 4 - v->ndim;
    for (int k = 0; k < v->ndim; ++k) {
        sh[off + k] = v->shape[k];
        st[off + k] = v->stride[k];
    }
    for (int64_t a = 0; a < sh[0]; ++a)
        for (int64_t b = 0; b < sh[1]; ++b)
            for (int64_t c = 0; c < sh[2]; ++c)
                for (int64_t d = 0; d < sh[3]; ++d) {
                    int64_t e = a * st[0] + b * st[1] + c * st[2] + d * st[3];
                    if (v->dtype == ATTN_F32)
                        ((float *)v->data)[e] = 0;
                    else
                        ((double *)v->data)[e] = 0;
                }
}

/* ---- the cache ------------------------------------------------------------------ */

/* Bytes of one of k, v (B, Hkv, Tmax, D); false on overflow. */
static bool kv_bytes(const attn_mha_config *c, int64_t B, int64_t Tmax, size_t *n) {
    size_t b = attn_dtype_size(c->dtype);
    return attn__mul_sz(b, (size_t)B, &b) && attn__mul_sz(b, (size_t)c->kv_heads, &b) &&
           attn__mul_sz(b, (size_t)Tmax, &b) && attn__mul_sz(b, (size_t)c->d_head, &b) &&
           b <= SIZE_MAX / 4 && (*n = attn__align64(b), true);
}

size_t attn_kv_cache_size(const attn_mha_config *cfg, int64_t B, int64_t Tmax) {
    attn_mha_config c;
    size_t one;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK || B < 1 || Tmax < 1 ||
        !kv_bytes(&c, B, Tmax, &one) || (size_t)B > SIZE_MAX / 16)
        return 0;
    return 2 * one + attn__align64((size_t)B * sizeof(int64_t));
}

attn_status attn_kv_cache_bind(attn_kv_cache *cache, const attn_mha_config *cfg, int64_t B,
                               int64_t Tmax, void *slab, size_t slab_size) {
    attn_mha_config c;
    if (!cache || B < 1 || Tmax < 1)
        return ATTN_EINVAL;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    if (!slab || ((uintptr_t)slab & 63u))
        return ATTN_EINVAL;
    size_t one, need = attn_kv_cache_size(&c, B, Tmax);
    if (need == 0 || !kv_bytes(&c, B, Tmax, &one))
        return ATTN_ERANGE;
    if (slab_size < need)
        return ATTN_EWORKSPACE;
    int64_t shape[4] = {B, c.kv_heads, Tmax, c.d_head};
    attn_kv_cache r;
    char *p = slab;
    ATTN_TRY(attn_view_init(&r.k, c.dtype, p, 4, shape));
    ATTN_TRY(attn_view_init(&r.v, c.dtype, p + one, 4, shape));
    r.len = (int64_t *)(p + 2 * one);
    for (int64_t b = 0; b < B; ++b)
        r.len[b] = 0;
    *cache = r;
    return ATTN_OK;
}

attn_view attn__kv_len_view(const attn_kv_cache *c) {
    attn_view v = {
        .data = c->len, .dtype = ATTN_F64, .ndim = 1, .shape = {c->k.shape[0]}, .stride = {1}};
    return v;
}

attn_status attn__kv_cache_check(const attn_kv_cache *kc, const attn_mha_config *c) {
    if (!kc || !kc->len)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(&kc->k));
    ATTN_TRY(attn_view_check(&kc->v));
    if (kc->k.dtype != c->dtype || kc->v.dtype != c->dtype)
        return ATTN_EDTYPE;
    if (kc->k.ndim != 4 || kc->v.ndim != 4)
        return ATTN_ESHAPE;
    for (int d = 0; d < 4; ++d)
        if (kc->k.shape[d] != kc->v.shape[d])
            return ATTN_ESHAPE;
    if (kc->k.shape[0] < 1 || kc->k.shape[1] != c->kv_heads || kc->k.shape[2] < 1 ||
        kc->k.shape[3] != c->d_head)
        return ATTN_ESHAPE;
    if (attn__self_overlaps(&kc->k) || attn__self_overlaps(&kc->v))
        return ATTN_ESTRIDE;
    attn_view lv = attn__kv_len_view(kc);
    if (attn__overlaps_raw(&kc->k, &kc->v) || attn__overlaps_raw(&lv, &kc->k) ||
        attn__overlaps_raw(&lv, &kc->v))
        return ATTN_EALIAS;
    return attn__check_lengths(kc->len, kc->k.shape[0], kc->k.shape[2]);
}

attn_status attn_kv_cache_check(const attn_kv_cache *cache, const attn_mha_config *cfg) {
    attn_mha_config c;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    return attn__kv_cache_check(cache, &c);
}

/* ---- the step -------------------------------------------------------------------- */

attn_status attn__mha_step_check(const attn_mha_config *cfg, const attn_mha_params *p,
                                 const attn_step_opts *o, bool self, const attn_view *x,
                                 const attn_kv_cache *cache, attn_mha_config *c) {
    ATTN_TRY(attn_mha_config_resolve(cfg, c));
    if (self && c->d_kv != c->d_model)
        return ATTN_EINVAL;
    ATTN_TRY(attn__mha_check_params(c, p));
    if (!x || !cache)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x));
    if (x->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (x->ndim != 3 || x->shape[2] != c->d_model || x->shape[1] < 1)
        return ATTN_ESHAPE;
    ATTN_TRY(attn__kv_cache_check(cache, c));
    int64_t B = x->shape[0], Tq = x->shape[1], Tmax = cache->k.shape[2];
    if (cache->k.shape[0] != B)
        return ATTN_ESHAPE;
    ATTN_TRY(step_check_opts(o, B, Tq));
    ATTN_TRY(attn__check_variants(c->dtype, c->heads, o->window, o->window_left,
                                  o->window_right, o->softcap, o->alibi, o->sinks));
    if (self)
        ATTN_TRY(attn__rope_check(&o->rope, c->d_head));
    int64_t full[4] = {B, c->heads, Tq, Tmax};
    attn_view t;
    if (o->keep)
        ATTN_TRY(attn__check_mask(o->keep, ATTN_U8, 4, full, &t));
    if (o->bias)
        ATTN_TRY(attn__check_mask(o->bias, c->dtype, 4, full, &t));
    if (self)
        for (int64_t b = 0; b < B; ++b)
            if (attn__step_n(o, b, Tq) > Tmax - cache->len[b])
                return ATTN_ERANGE; /* the cache would overflow */
    if (c->d_head > INT_MAX)
        return ATTN_ERANGE;
    return ATTN_OK;
}

void attn__mha_step_commit(const attn_step_opts *o, const attn_view *x, attn_kv_cache *cache) {
    for (int64_t b = 0; b < x->shape[0]; ++b)
        cache->len[b] += attn__step_n(o, b, x->shape[1]);
}

/* Whole-row attention per batch (attn_sdpa's tiles) for chunks too long for the decode kernel.
 */
static attn_status attend_tiled(const attn_step_opts *o, bool self, const attn_view *Qh,
                                const attn_kv_cache *kc, const int64_t *klen,
                                const attn_view *keep, const attn_view *bias, attn_view *Oh,
                                attn__plan *pl) {
    int64_t B = Qh->shape[0], Tq = Qh->shape[2], Tmax = kc->k.shape[2];
    bool run = attn__plan_running(pl);
    for (int64_t b = 0; b < B; ++b) {
        /* counting: the largest call (all Tq rows, all Tmax keys) stands for every batch */
        int64_t n = run ? attn__step_n(o, b, Tq) : Tq, nk = run ? klen[b] : Tmax;
        if (n == 0)
            continue;
        attn_view q, k, v, out, t, km, bm;
        ATTN_TRY(attn_view_slice(Qh, 0, b, b + 1, 1, &t));
        ATTN_TRY(attn_view_slice(&t, 2, 0, n, 1, &q));
        ATTN_TRY(attn_view_slice(Oh, 0, b, b + 1, 1, &t));
        ATTN_TRY(attn_view_slice(&t, 2, 0, n, 1, &out));
        ATTN_TRY(attn_view_slice(&kc->k, 0, b, b + 1, 1, &t));
        ATTN_TRY(attn_view_slice(&t, 2, 0, nk, 1, &k));
        ATTN_TRY(attn_view_slice(&kc->v, 0, b, b + 1, 1, &t));
        ATTN_TRY(attn_view_slice(&t, 2, 0, nk, 1, &v));
        /* a self step's queries are the last n of its nk keys: bottom-right alignment */
        attn_sdpa_opts so = {.scale = o->scale,
                             .causal = self ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
                             .threads = o->threads,
                             .window = o->window,
                             .window_left = o->window_left,
                             .window_right = o->window_right,
                             .softcap = o->softcap,
                             .alibi = o->alibi,
                             .sinks = o->sinks};
        if (keep) {
            ATTN_TRY(attn_view_slice(keep, 0, b, b + 1, 1, &t));
            ATTN_TRY(attn_view_slice(&t, 2, 0, n, 1, &t));
            ATTN_TRY(attn_view_slice(&t, 3, 0, nk, 1, &km));
            so.keep = &km;
        }
        if (bias) {
            ATTN_TRY(attn_view_slice(bias, 0, b, b + 1, 1, &t));
            ATTN_TRY(attn_view_slice(&t, 2, 0, n, 1, &t));
            ATTN_TRY(attn_view_slice(&t, 3, 0, nk, 1, &bm));
            so.bias = &bm;
        }
        attn__sdpa_plan sp;
        ATTN_TRY(attn__sdpa_plan_init(&q, &k, &v, &so, false, &sp));
        if (!run) { /* tiled: the workspace does not depend on the key count */
            size_t need;
            ATTN_TRY(attn__sdpa_need(&sp, &q, &k, &v, &need));
            attn__plan_inner(pl, need);
            break;
        }
        attn__sdpa_run(&sp, &q, &k, &v, &out, NULL, NULL, attn__plan_inner_base(pl),
                       attn__plan_inner_size(pl));
    }
    return ATTN_OK;
}

attn_status attn__mha_step_body(const attn_mha_config *c, const attn_mha_params *p,
                                const attn_step_opts *o, const attn_rope_config *rope,
                                bool self, const attn_view *x, const attn_kv_cache *kc,
                                attn_view *out, attn__plan *pl) {
    attn_dtype dt = c->dtype;
    bool run = attn__plan_running(pl);
    int64_t B = x->shape[0], Tq = x->shape[1], Tmax = kc->k.shape[2];
    int64_t HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head, D = c->d_head;
    int64_t G = c->heads / c->kv_heads;
    bool tiled = G * Tq > ATTN__DECODE_MAX_ROWS;
    /* Q (B, Tq, H*D), merged heads O (B, Tq, H*D); per batch: keys, first position, rows */
    attn_view Q = attn__plan_scratch(pl, dt, 3, (int64_t[]){B, Tq, HD}, false);
    attn_view O = attn__plan_scratch(pl, dt, 3, (int64_t[]){B, Tq, HD}, tiled);
    attn_view L3 = attn__plan_scratch(pl, ATTN_F64, 1, (int64_t[]){3 * B}, false); /* int64s */
    int64_t *klen = L3.data, *qpos = klen + B, *nrows = klen + 2 * B;
    ATTN_TRY(attn__plan_linear(pl, x, &p->wq, c->bias ? &p->bq : NULL, &Q));
    attn_view Qh = attn__heads(&Q, D), Oh = attn__heads(&O, D);
    attn_view Kn, Vn, Knh, Vnh;
    if (self) { /* the new tokens' K, V (B, Tq, Hkv*D) */
        Kn = attn__plan_scratch(pl, dt, 3, (int64_t[]){B, Tq, KD}, false);
        Vn = attn__plan_scratch(pl, dt, 3, (int64_t[]){B, Tq, KD}, false);
        ATTN_TRY(attn__plan_linear(pl, x, &p->wk, c->bias ? &p->bk : NULL, &Kn));
        ATTN_TRY(attn__plan_linear(pl, x, &p->wv, c->bias ? &p->bv : NULL, &Vn));
        Knh = attn__heads(&Kn, D);
        Vnh = attn__heads(&Vn, D);
    }
    for (int64_t b = 0; run && b < B; ++b) {
        int64_t L = kc->len[b], n = attn__step_n(o, b, Tq);
        klen[b] = self ? L + n : L;
        qpos[b] = L;
        nrows[b] = n;
        if (!self || n == 0)
            continue;
        attn_view qb, kb, vb, t, dk, dv;
        ATTN_TRY(attn_view_select(&Qh, 0, b, &t));
        ATTN_TRY(attn_view_slice(&t, 1, 0, n, 1, &qb)); /* (H, n, D) */
        ATTN_TRY(attn_view_select(&Knh, 0, b, &t));
        ATTN_TRY(attn_view_slice(&t, 1, 0, n, 1, &kb)); /* (Hkv, n, D) */
        ATTN_TRY(attn_view_select(&Vnh, 0, b, &t));
        ATTN_TRY(attn_view_slice(&t, 1, 0, n, 1, &vb));
        if (rope->on) { /* at the absolute positions L..L+n-1 */
            attn__rope_run(rope->style, rope->base, L, &qb, false);
            attn__rope_run(rope->style, rope->base, L, &kb, false);
        }
        /* append at len[b] */
        ATTN_TRY(attn_view_select(&kc->k, 0, b, &t));
        ATTN_TRY(attn_view_slice(&t, 1, L, L + n, 1, &dk));
        ATTN_TRY(attn_view_select(&kc->v, 0, b, &t));
        ATTN_TRY(attn_view_slice(&t, 1, L, L + n, 1, &dv));
        attn__view_copy_run(&kb, &dk);
        attn__view_copy_run(&vb, &dv);
    }
    /* the masks, broadcast to (B, H, Tq, Tmax): absolute key positions */
    int64_t full[4] = {B, c->heads, Tq, Tmax};
    attn_view keep, bias;
    if (o->keep)
        ATTN_TRY(attn_view_broadcast(o->keep, 4, full, &keep));
    if (o->bias)
        ATTN_TRY(attn_view_broadcast(o->bias, 4, full, &bias));
    if (tiled) {
        ATTN_TRY(attend_tiled(o, self, &Qh, kc, klen, o->keep ? &keep : NULL,
                              o->bias ? &bias : NULL, &Oh, pl));
    } else {
        attn__qkv d = {.dt = dt,
                       .B = B,
                       .H = c->heads,
                       .Hkv = c->kv_heads,
                       .Tq = Tq,
                       .Tk = Tmax,
                       .D = D,
                       .Dv = D};
        attn__decode_plan dp;
        attn__decode_variants var = {o->window,  o->window_left, o->window_right,
                                     o->softcap, o->alibi,       o->sinks};
        ATTN_TRY(attn__decode_plan_init(&dp, &d, o->scale, self, o->keep ? &keep : NULL,
                                        o->bias ? &bias : NULL, &var, o->split, o->threads));
        dp.klen = klen;
        dp.qpos0 = qpos;
        dp.nrows = nrows;
        if (run)
            attn__decode_run(&dp, &Qh, &kc->k, &kc->v, &Oh, NULL, attn__plan_inner_base(pl));
        else
            attn__plan_inner(pl, dp.total);
    }
    /* out = O Wo + bo; the rows of padding tokens are 0 */
    ATTN_TRY(attn__plan_linear(pl, &O, &p->wo, c->bias ? &p->bo : NULL, out));
    for (int64_t b = 0; run && b < B; ++b) {
        int64_t n = attn__step_n(o, b, Tq);
        attn_view t, r;
        if (n == Tq)
            continue;
        ATTN_TRY(attn_view_select(out, 0, b, &t));
        ATTN_TRY(attn_view_slice(&t, 0, n, Tq, 1, &r));
        attn__dec_zero(&r);
    }
    return ATTN_OK;
}

/* The arguments of one attn_mha_step, for the planner. */
typedef struct step_call {
    const attn_mha_config *c;
    const attn_mha_params *p;
    const attn_step_opts *o;
    const attn_view *x;
    const attn_kv_cache *kc;
    attn_view *out;
} step_call;

static attn_status step_body(const void *args, attn__plan *pl) {
    const step_call *a = args;
    return attn__mha_step_body(a->c, a->p, a->o, &a->o->rope, true, a->x, a->kc, a->out, pl);
}

size_t attn_mha_step_workspace_size(const attn_mha_config *cfg, const attn_view *x,
                                    const attn_kv_cache *cache, const attn_step_opts *opts) {
    attn_mha_config c;
    attn_mha_params p;
    attn_view out;
    size_t need;
    if (attn_mha_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    if (attn__mha_shape_params(&c, &p) !=
        ATTN_OK) /* shapes only: the call checks the real ones */
        return 0;
    if (!opts)
        opts = &default_step;
    if (attn__mha_step_check(cfg, &p, opts, true, x, cache, &c) != ATTN_OK ||
        attn__shape_view(c.dtype, 3, (int64_t[]){x->shape[0], x->shape[1], c.d_model}, &out) !=
            ATTN_OK)
        return 0;
    step_call a = {&c, &p, opts, x, cache, &out};
    return attn__layer_need(step_body, &a, &need) == ATTN_OK ? need : 0;
}

attn_status attn_mha_step(const attn_mha_config *cfg, const attn_mha_params *p,
                          const attn_step_opts *opts, const attn_view *x, attn_kv_cache *cache,
                          attn_view *out, void *work, size_t work_size) {
    attn_mha_config c;
    if (!opts)
        opts = &default_step;
    ATTN_TRY(attn__mha_step_check(cfg, p, opts, true, x, cache, &c));
    ATTN_TRY(attn__want(out, c.dtype, 3, (int64_t[]){x->shape[0], x->shape[1], c.d_model}));
    attn_view lv = attn__kv_len_view(cache);
    const attn_view *outs[ATTN__MAX_ALIAS] = {out, &cache->k, &cache->v, &lv};
    const attn_view *ins[ATTN__MAX_ALIAS] = {x, opts->keep, opts->bias, opts->alibi,
                                             opts->sinks};
    step_call a = {&c, p, opts, x, cache, out};
    ATTN_TRY(attn__layer_exec(step_body, &a, opts->threads, outs, 4, ins,
                              attn__mha_views(&c, p, ins, 5), work,
                              work_size));
    attn__mha_step_commit(opts, x, cache);
    return ATTN_OK;
}
