/* SPDX-License-Identifier: MIT */
/* The caller-owned KV cache and the cached multi-head attention step (prefill and decode). */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "layers/decode_internal.h"

/* ---- shared validation -------------------------------------------------------- */

attn_status attn__dec_no_alias(const attn_view *const *outs, int no, const attn_view *const *ins,
                               int ni) {
    uintptr_t lo[DEC_MAX_VIEWS], hi[DEC_MAX_VIEWS];
    const attn_view *all[DEC_MAX_VIEWS];
    int n = 0;
    for (int i = 0; i < no && n < DEC_MAX_VIEWS; ++i)
        all[n++] = outs[i];
    for (int i = 0; i < ni && n < DEC_MAX_VIEWS; ++i)
        all[n++] = ins[i];
    for (int i = 0; i < n; ++i) {
        lo[i] = hi[i] = 0;
        if (all[i])
            attn__span_raw(all[i], &lo[i], &hi[i]);
    }
    for (int i = 0; i < no; ++i) {
        if (!all[i])
            continue;
        if (attn__self_overlaps(all[i]))
            return ATTN_ESTRIDE;
        for (int j = i + 1; j < n; ++j)
            if (all[j] && lo[i] != hi[i] && lo[j] != hi[j] && lo[i] < hi[j] && lo[j] < hi[i])
                return ATTN_EALIAS;
    }
    return ATTN_OK;
}

/* The eight MHA parameter shapes, in slab order (as the layers bind them). */
static int mha_shapes(const attn_mha_config *c, int64_t s[8][2], int nd[8]) {
    int64_t hd = c->heads * c->d_head, kd = c->kv_heads * c->d_head;
    int64_t t[8][2] = {{c->d_model, hd}, {c->d_kv, kd}, {c->d_kv, kd}, {hd, c->d_model},
                       {hd, 0},          {kd, 0},       {kd, 0},       {c->d_model, 0}};
    memcpy(s, t, sizeof t);
    for (int i = 0; i < 8; ++i)
        nd[i] = i < 4 ? 2 : 1;
    return c->bias ? 8 : 4;
}

int attn__dec_mha_views(const attn_mha_config *c, const attn_mha_params *p, const attn_view **l,
                        int n) {
    if (!p)
        return n;
    const attn_view *v[8] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < (c->bias ? 8 : 4); ++i)
        l[n++] = v[i];
    return n;
}

attn_status attn__dec_check_mha(const attn_mha_config *c, const attn_mha_params *p) {
    if (!p)
        return ATTN_EINVAL;
    int64_t s[8][2];
    int nd[8], n = mha_shapes(c, s, nd);
    const attn_view *v[8] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < n; ++i)
        ATTN_TRY(attn__want(v[i], c->dtype, nd[i], s[i]));
    return ATTN_OK;
}

attn_status attn__rope_check(const attn_rope_config *r, int64_t D) {
    if (!r->on)
        return ATTN_OK;
    if ((unsigned)r->style > ATTN_ROPE_HALF || !(r->base >= 0) || !isfinite(r->base) || D % 2)
        return ATTN_EINVAL;
    return ATTN_OK;
}

attn_status attn__step_check_opts(const attn_step_opts *o, int64_t B, int64_t Tq) {
    if (!isfinite(o->scale) || o->threads < 0 || o->split < 0)
        return ATTN_EINVAL;
    if (o->n_new)
        for (int64_t b = 0; b < B; ++b)
            if (o->n_new[b] < 0 || o->n_new[b] > Tq)
                return ATTN_EINVAL;
    return ATTN_OK;
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

/* A view spanning the bytes of len (B int64), for the aliasing checks. */
static attn_view len_view(const attn_kv_cache *c) {
    attn_view v = {.data = c->len, .dtype = ATTN_F64, .ndim = 1, .shape = {c->k.shape[0]},
                   .stride = {1}};
    return v;
}

/* attn_kv_cache_check on a resolved config. */
static attn_status cache_check(const attn_kv_cache *kc, const attn_mha_config *c) {
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
    attn_view lv = len_view(kc);
    if (attn__overlaps_raw(&kc->k, &kc->v) || attn__overlaps_raw(&lv, &kc->k) ||
        attn__overlaps_raw(&lv, &kc->v))
        return ATTN_EALIAS;
    for (int64_t b = 0; b < kc->k.shape[0]; ++b)
        if (kc->len[b] < 0 || kc->len[b] > kc->k.shape[2])
            return ATTN_ERANGE;
    return ATTN_OK;
}

attn_status attn_kv_cache_check(const attn_kv_cache *cache, const attn_mha_config *cfg) {
    attn_mha_config c;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    return cache_check(cache, &c);
}

/* ---- the step -------------------------------------------------------------------- */

static const attn_step_opts default_step;

attn_status attn__mha_step_check(const attn_mha_config *cfg, const attn_mha_params *p,
                                 const attn_step_opts *o, bool self, const attn_view *x,
                                 const attn_kv_cache *cache, attn_mha_config *c) {
    ATTN_TRY(attn_mha_config_resolve(cfg, c));
    if (self && c->d_kv != c->d_model)
        return ATTN_EINVAL;
    ATTN_TRY(attn__dec_check_mha(c, p));
    if (!x || !cache)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(x));
    if (x->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (x->ndim != 3 || x->shape[2] != c->d_model || x->shape[1] < 1)
        return ATTN_ESHAPE;
    ATTN_TRY(cache_check(cache, c));
    int64_t B = x->shape[0], Tq = x->shape[1], Tmax = cache->k.shape[2];
    if (cache->k.shape[0] != B)
        return ATTN_ESHAPE;
    ATTN_TRY(attn__step_check_opts(o, B, Tq));
    if (self)
        ATTN_TRY(attn__rope_check(&o->rope, c->d_head));
    int64_t full[4] = {B, c->heads, Tq, Tmax};
    attn_view t;
    if (o->keep) {
        ATTN_TRY(attn_view_check(o->keep));
        if (o->keep->dtype != ATTN_U8)
            return ATTN_EDTYPE;
        ATTN_TRY(attn_view_broadcast(o->keep, 4, full, &t));
    }
    if (o->bias) {
        ATTN_TRY(attn_view_check(o->bias));
        if (o->bias->dtype != c->dtype)
            return ATTN_EDTYPE;
        ATTN_TRY(attn_view_broadcast(o->bias, 4, full, &t));
    }
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

/* Whole-row attention per batch (attn_sdpa's tiles) for chunks too long for the decode kernel. */
static attn_status attend_tiled(const attn_step_opts *o, bool self,
                                const attn_view *Qh, const attn_kv_cache *kc, const int64_t *klen,
                                const attn_view *keep, const attn_view *bias, attn_view *Oh,
                                dplan *pl) {
    int64_t B = Qh->shape[0], Tq = Qh->shape[2], Tmax = kc->k.shape[2];
    for (int64_t b = 0; b < B; ++b) {
        int64_t n = pl->counting ? Tq : attn__step_n(o, b, Tq);
        int64_t nk = pl->counting ? Tmax : klen[b];
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
        attn_sdpa_opts so = {.scale = o->scale,
                             .causal = self ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
                             .threads = o->threads};
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
        if (pl->counting) {
            dplan_inner(pl, attn_sdpa_workspace_size(&q, &k, &v, &so));
            break; /* every batch needs at most this (independent of the key count) */
        }
        ATTN_TRY(attn_sdpa(&q, &k, &v, &so, &out, dplan_ibase(pl), dplan_isize(pl)));
    }
    return ATTN_OK;
}

attn_status attn__mha_step_body(const attn_mha_config *c, const attn_mha_params *p,
                                const attn_step_opts *o, const attn_rope_config *rope, bool self,
                                const attn_view *x, const attn_kv_cache *kc, attn_view *out,
                                dplan *pl) {
    attn_dtype dt = c->dtype;
    int64_t B = x->shape[0], Tq = x->shape[1], Tmax = kc->k.shape[2];
    int64_t HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head, D = c->d_head;
    int64_t G = c->heads / c->kv_heads;
    bool tiled = G * Tq > ATTN__DECODE_MAX_ROWS;
    /* Q (B, Tq, H*D), new K, V (B, Tq, Hkv*D), merged heads O (B, Tq, H*D) */
    attn_view Q = dplan_view(pl, dt, 3, (int64_t[]){B, Tq, HD}, false);
    attn_view O = dplan_view(pl, dt, 3, (int64_t[]){B, Tq, HD}, tiled);
    attn_view Kn, Vn, Qh, Oh, Knh, Vnh;
    int64_t *lens = dplan_take(pl, 3 * (size_t)B * sizeof(int64_t));
    int64_t *klen = lens, *qpos = lens + B, *nrows = lens + 2 * B;
    ATTN_TRY(dlin(pl, x, &p->wq, c->bias ? &p->bq : NULL, &Q));
    ATTN_TRY(attn__heads_of(&Q, D, &Qh));
    ATTN_TRY(attn__heads_of(&O, D, &Oh));
    if (self) {
        Kn = dplan_view(pl, dt, 3, (int64_t[]){B, Tq, KD}, false);
        Vn = dplan_view(pl, dt, 3, (int64_t[]){B, Tq, KD}, false);
        ATTN_TRY(dlin(pl, x, &p->wk, c->bias ? &p->bk : NULL, &Kn));
        ATTN_TRY(dlin(pl, x, &p->wv, c->bias ? &p->bv : NULL, &Vn));
        ATTN_TRY(attn__heads_of(&Kn, D, &Knh));
        ATTN_TRY(attn__heads_of(&Vn, D, &Vnh));
    }
    if (!pl->counting) {
        for (int64_t b = 0; b < B; ++b) {
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
                ATTN_TRY(attn_rope(rope->style, rope->base, L, &qb));
                ATTN_TRY(attn_rope(rope->style, rope->base, L, &kb));
            }
            /* append at len[b] */
            ATTN_TRY(attn_view_select(&kc->k, 0, b, &t));
            ATTN_TRY(attn_view_slice(&t, 1, L, L + n, 1, &dk));
            ATTN_TRY(attn_view_select(&kc->v, 0, b, &t));
            ATTN_TRY(attn_view_slice(&t, 1, L, L + n, 1, &dv));
            ATTN_TRY(attn_view_copy(&kb, &dk));
            ATTN_TRY(attn_view_copy(&vb, &dv));
        }
    }
    /* the masks, broadcast to (B, H, Tq, Tmax) */
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
        attn__decode_plan dp = {.dt = dt, .B = B, .H = c->heads, .Hkv = c->kv_heads, .G = G,
                                .Tq = Tq, .D = D, .Tmax = Tmax, .causal = self,
                                .klen = klen, .qpos0 = qpos, .nrows = nrows,
                                .has_keep = o->keep != NULL, .has_bias = o->bias != NULL,
                                .split = o->split};
        dp.scale = o->scale != 0 ? o->scale : 1.0 / sqrt((double)D);
        if (o->keep)
            dp.keep = keep;
        if (o->bias)
            dp.bias = bias;
        ATTN_TRY(attn__decode_layout(&dp, o->threads));
        if (pl->counting)
            dplan_inner(pl, dp.total);
        else
            ATTN_TRY(attn__decode_run(&dp, &Qh, &kc->k, &kc->v, &Oh, NULL, dplan_ibase(pl)));
    }
    /* out = O Wo + bo; the rows of padding tokens are 0 */
    ATTN_TRY(dlin(pl, &O, &p->wo, c->bias ? &p->bo : NULL, out));
    if (!pl->counting)
        for (int64_t b = 0; b < B; ++b) {
            int64_t n = attn__step_n(o, b, Tq);
            if (n == Tq)
                continue;
            attn_view t, r;
            ATTN_TRY(attn_view_select(out, 0, b, &t));
            ATTN_TRY(attn_view_slice(&t, 0, n, Tq, 1, &r));
            attn__dec_zero(&r);
        }
    return ATTN_OK;
}

/* A shape-only output for the counting pass. */
static char dummy_out[64] __attribute__((aligned(64)));

size_t attn_mha_step_workspace_size(const attn_mha_config *cfg, const attn_view *x,
                                    const attn_kv_cache *cache, const attn_step_opts *opts) {
    attn_mha_config c;
    /* the parameters only need shapes here: the check runs on the real ones in the call */
    attn_mha_config rc;
    if (attn_mha_config_resolve(cfg, &rc) != ATTN_OK)
        return 0;
    int64_t s[8][2];
    int nd[8];
    mha_shapes(&rc, s, nd);
    attn_view v[8];
    for (int i = 0; i < 8; ++i)
        attn_view_init(&v[i], rc.dtype, dummy_out, nd[i], s[i]);
    attn_mha_params p = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    if (!opts)
        opts = &default_step;
    if (attn__mha_step_check(cfg, &p, opts, true, x, cache, &c) != ATTN_OK)
        return 0;
    attn_view out;
    attn_view_init(&out, c.dtype, dummy_out, 3, (int64_t[]){x->shape[0], x->shape[1], c.d_model});
    dplan pl = {.counting = true};
    if (attn__mha_step_body(&c, &p, opts, &opts->rope, true, x, cache, &out, &pl) != ATTN_OK)
        return 0;
    return dplan_total(&pl);
}

static attn_status step_run(const attn_mha_config *c, const attn_mha_params *p,
                            const attn_step_opts *o, const attn_view *x, attn_kv_cache *kc,
                            attn_view *out, void *work, size_t work_size) {
    DPLAN_RUN(attn__mha_step_body(c, p, o, &o->rope, true, x, kc, out, pl));
}

attn_status attn_mha_step(const attn_mha_config *cfg, const attn_mha_params *p,
                          const attn_step_opts *opts, const attn_view *x, attn_kv_cache *cache,
                          attn_view *out, void *work, size_t work_size) {
    attn_mha_config c;
    if (!opts)
        opts = &default_step;
    ATTN_TRY(attn__mha_step_check(cfg, p, opts, true, x, cache, &c));
    ATTN_TRY(attn__want(out, c.dtype, 3, (int64_t[]){x->shape[0], x->shape[1], c.d_model}));
    attn_view lv = len_view(cache);
    const attn_view *outs[DEC_MAX_VIEWS] = {out, &cache->k, &cache->v, &lv};
    const attn_view *ins[DEC_MAX_VIEWS] = {x, opts->keep, opts->bias};
    ATTN_TRY(attn__dec_no_alias(outs, 4, ins, attn__dec_mha_views(&c, p, ins, 3)));
    ATTN_TRY(step_run(&c, p, opts, x, cache, out, work, work_size));
    attn__mha_step_commit(opts, x, cache);
    return ATTN_OK;
}
