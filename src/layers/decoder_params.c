/* SPDX-License-Identifier: MIT */
/* The decoder block's config, parameter slab and saved activations (what its backward reads).
 */
#include <math.h>
#include <string.h>

#include "layers/decode_internal.h"

/* ---- config, parameters ------------------------------------------------------- */

attn_status attn_decoder_config_resolve(const attn_decoder_config *cfg,
                                        attn_decoder_config *out) {
    if (!cfg || !out)
        return ATTN_EINVAL;
    attn_decoder_config c = *cfg;
    ATTN_TRY(attn_mha_config_resolve(&cfg->self_attn, &c.self_attn));
    if (c.self_attn.d_kv != c.self_attn.d_model)
        return ATTN_EINVAL;
    if (attn__dec_has_cross(cfg)) {
        if (cfg->cross.d_kv == 0 && cfg->cross.d_model == c.self_attn.d_model)
            c.cross.d_kv = c.self_attn.d_model;
        ATTN_TRY(attn_mha_config_resolve(&c.cross, &c.cross));
        if (c.cross.dtype != c.self_attn.dtype || c.cross.d_model != c.self_attn.d_model)
            return ATTN_EINVAL;
    } else {
        memset(&c.cross, 0, sizeof c.cross);
    }
    ATTN_TRY(attn_ffn_config_resolve(&cfg->ffn, &c.ffn));
    if (c.ffn.dtype != c.self_attn.dtype || c.ffn.d_model != c.self_attn.d_model)
        return ATTN_EINVAL;
    if (!(c.eps >= 0.0) || !isfinite(c.eps) || (unsigned)c.norm > ATTN_POST_NORM)
        return ATTN_EINVAL;
    if (c.eps == 0.0)
        c.eps = 1e-5;
    ATTN_TRY(attn__rope_check(&c.rope, c.self_attn.d_head));
    *out = c;
    return ATTN_OK;
}

static size_t ln_bytes(const attn_decoder_config *c) {
    size_t one =
        attn__align64(attn_dtype_size(c->self_attn.dtype) * (size_t)c->self_attn.d_model);
    return c->ln_affine ? 2 * one : 0;
}

size_t attn_decoder_params_size(const attn_decoder_config *cfg) {
    attn_decoder_config c;
    if (attn_decoder_config_resolve(cfg, &c) != ATTN_OK)
        return 0;
    size_t n = ln_bytes(&c) * (attn__dec_has_cross(&c) ? 3 : 2) +
               attn_mha_params_size(&c.self_attn) + attn_ffn_params_size(&c.ffn);
    return attn__dec_has_cross(&c) ? n + attn_mha_params_size(&c.cross) : n;
}

int64_t attn_decoder_param_count(const attn_decoder_config *cfg) {
    attn_decoder_config c;
    if (attn_decoder_config_resolve(cfg, &c) != ATTN_OK)
        return -1;
    int64_t n =
        (c.ln_affine ? 2 * c.self_attn.d_model * (attn__dec_has_cross(&c) ? 3 : 2) : 0) +
        attn_mha_param_count(&c.self_attn) + attn_ffn_param_count(&c.ffn);
    return attn__dec_has_cross(&c) ? n + attn_mha_param_count(&c.cross) : n;
}

/* LayerNorm gamma and beta (C) at *p, advancing it (nothing without ln_affine). */
static void bind_ln(const attn_decoder_config *c, char **p, attn_view *g, attn_view *b) {
    memset(g, 0, sizeof *g);
    memset(b, 0, sizeof *b);
    if (!c->ln_affine)
        return;
    int64_t C = c->self_attn.d_model;
    size_t one = attn__align64(attn_dtype_size(c->self_attn.dtype) * (size_t)C);
    attn_view_init(g, c->self_attn.dtype, *p, 1, &C);
    attn_view_init(b, c->self_attn.dtype, *p + one, 1, &C);
    *p += 2 * one;
}

attn_status attn_decoder_params_bind(attn_decoder_params *p, const attn_decoder_config *cfg,
                                     void *slab, size_t slab_size) {
    attn_decoder_config c;
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_decoder_config_resolve(cfg, &c));
    if (!slab || ((uintptr_t)slab & 63u))
        return ATTN_EINVAL;
    if (slab_size < attn_decoder_params_size(&c))
        return ATTN_EWORKSPACE;
    attn_decoder_params r;
    memset(&r, 0, sizeof r);
    char *q = slab;
    bind_ln(&c, &q, &r.ln1_g, &r.ln1_b);
    size_t n = attn_mha_params_size(&c.self_attn);
    ATTN_TRY(attn_mha_params_bind(&r.self_attn, &c.self_attn, q, n));
    q += n;
    if (attn__dec_has_cross(&c)) {
        bind_ln(&c, &q, &r.ln2_g, &r.ln2_b);
        n = attn_mha_params_size(&c.cross);
        ATTN_TRY(attn_mha_params_bind(&r.cross, &c.cross, q, n));
        q += n;
    }
    bind_ln(&c, &q, &r.ln3_g, &r.ln3_b);
    ATTN_TRY(attn_ffn_params_bind(&r.ffn, &c.ffn, q, attn_ffn_params_size(&c.ffn)));
    *p = r;
    return ATTN_OK;
}

/* Every parameter view cfg uses: present, right dtype and shape. */
attn_status attn__dec_check_params(const attn_decoder_config *c, const attn_decoder_params *p) {
    if (!p)
        return ATTN_EINVAL;
    attn_dtype dt = c->self_attn.dtype;
    int64_t C = c->self_attn.d_model;
    if (c->ln_affine) {
        const attn_view *v[6] = {&p->ln1_g, &p->ln1_b, &p->ln2_g,
                                 &p->ln2_b, &p->ln3_g, &p->ln3_b};
        for (int i = 0; i < 6; ++i)
            if (i / 2 != 1 || attn__dec_has_cross(c))
                ATTN_TRY(attn__want(v[i], dt, 1, &C));
    }
    ATTN_TRY(attn__mha_check_params(&c->self_attn, &p->self_attn));
    if (attn__dec_has_cross(c))
        ATTN_TRY(attn__mha_check_params(&c->cross, &p->cross));
    return attn__ffn_check_params(&c->ffn, &p->ffn);
}

/* The parameter (or gradient) views cfg uses, appended to l[n..]. */
int attn__dec_param_views(const attn_decoder_config *c, const attn_decoder_params *p,
                          const attn_view **l, int n) {
    if (!p)
        return n;
    if (c->ln_affine) {
        l[n++] = &p->ln1_g, l[n++] = &p->ln1_b, l[n++] = &p->ln3_g, l[n++] = &p->ln3_b;
        if (attn__dec_has_cross(c))
            l[n++] = &p->ln2_g, l[n++] = &p->ln2_b;
    }
    n = attn__mha_views(&c->self_attn, &p->self_attn, l, n);
    if (attn__dec_has_cross(c))
        n = attn__mha_views(&c->cross, &p->cross, l, n);
    return attn__ffn_views(&c->ffn, &p->ffn, l, n);
}

/* Shape-only parameters over a dummy pointer, for the workspace queries. */
attn_status attn__dec_shape_params(const attn_decoder_config *c, attn_decoder_params *p) {
    memset(p, 0, sizeof *p);
    int64_t C = c->self_attn.d_model;
    attn_view *ln[6] = {&p->ln1_g, &p->ln1_b, &p->ln2_g, &p->ln2_b, &p->ln3_g, &p->ln3_b};
    for (int i = 0; i < 6; ++i)
        ATTN_TRY(attn__shape_view(c->self_attn.dtype, 1, &C, ln[i]));
    ATTN_TRY(attn__mha_shape_params(&c->self_attn, &p->self_attn));
    if (attn__dec_has_cross(c))
        ATTN_TRY(attn__mha_shape_params(&c->cross, &p->cross));
    return attn__ffn_shape_params(&c->ffn, &p->ffn);
}

/* ---- what the forward saves --------------------------------------------------- */

/* Shapes of the saved views, in struct order; absent ones (no cross) have ndim 0. */
void attn__dec_saved_shapes(const attn_decoder_config *c, int64_t B, int64_t T, int64_t S,
                            int64_t sh[ATTN__DEC_NSAVED][3], int nd[ATTN__DEC_NSAVED]) {
    int64_t C = c->self_attn.d_model, HD = c->self_attn.heads * c->self_attn.d_head;
    int64_t KD = c->self_attn.kv_heads * c->self_attn.d_head;
    int64_t HC = c->cross.heads * c->cross.d_head, KC = c->cross.kv_heads * c->cross.d_head;
    bool x = attn__dec_has_cross(c);
    int64_t s[ATTN__DEC_NSAVED][3] = {{B, T, C},
                                      {B, T, C},
                                      {B, T, C},
                                      {B, T, C},
                                      {B, T, C},
                                      {B, T, C},
                                      {B, T, 0},
                                      {B, T, 0},
                                      {B, T, 0},
                                      {B, T, 0},
                                      {B, T, 0},
                                      {B, T, 0},
                                      {B, T, HD},
                                      {B, T, KD},
                                      {B, T, KD},
                                      {B, T, HD},
                                      {B, c->self_attn.heads, T},
                                      {B, T, HC},
                                      {B, S, KC},
                                      {B, S, KC},
                                      {B, T, HC},
                                      {B, c->cross.heads, T},
                                      {B, T, c->ffn.d_ff},
                                      {B, T, c->ffn.d_ff}};
    memcpy(sh, s, sizeof s);
    for (int i = 0; i < ATTN__DEC_NSAVED; ++i)
        nd[i] = (i >= 6 && i < 12) ? 2 : 3;
    if (!x) { /* block 1's LayerNorm and the cross-attention views */
        int skip[] = {1, 4, 7, 10, 17, 18, 19, 20, 21};
        for (size_t i = 0; i < sizeof skip / sizeof *skip; ++i)
            nd[skip[i]] = 0;
    }
}

attn_view *attn__dec_saved_slot(attn_decoder_saved *s, int i) {
    attn_view *v[ATTN__DEC_NSAVED] = {
        &s->ln_in[0], &s->ln_in[1], &s->ln_in[2], &s->ln_out[0], &s->ln_out[1], &s->ln_out[2],
        &s->mean[0],  &s->mean[1],  &s->mean[2],  &s->rstd[0],   &s->rstd[1],   &s->rstd[2],
        &s->sq,       &s->sk,       &s->sv,       &s->sconcat,   &s->slse,      &s->cq,
        &s->ck,       &s->cv,       &s->cconcat,  &s->clse,      &s->hid_pre,   &s->hid};
    return v[i];
}

static bool saved_bytes(const attn_decoder_config *c, int64_t sh[ATTN__DEC_NSAVED][3],
                        int nd[ATTN__DEC_NSAVED], size_t *total) {
    size_t t = 0;
    for (int i = 0; i < ATTN__DEC_NSAVED; ++i) {
        if (!nd[i])
            continue;
        size_t b = attn_dtype_size(c->self_attn.dtype);
        for (int k = 0; k < nd[i]; ++k)
            if (!attn__mul_sz(b, (size_t)sh[i][k], &b))
                return false;
        if (b > SIZE_MAX / 4 || !attn__add_sz(t, attn__align64(b), &t))
            return false;
    }
    *total = t;
    return true;
}

size_t attn_decoder_saved_size(const attn_decoder_config *cfg, int64_t B, int64_t T,
                               int64_t S) {
    attn_decoder_config c;
    if (attn_decoder_config_resolve(cfg, &c) != ATTN_OK || B < 1 || T < 1 ||
        (attn__dec_has_cross(&c) && S < 1))
        return 0;
    int64_t sh[ATTN__DEC_NSAVED][3];
    int nd[ATTN__DEC_NSAVED];
    size_t n;
    attn__dec_saved_shapes(&c, B, T, attn__dec_has_cross(&c) ? S : 1, sh, nd);
    return saved_bytes(&c, sh, nd, &n) ? n : 0;
}

attn_status attn_decoder_saved_bind(attn_decoder_saved *saved, const attn_decoder_config *cfg,
                                    int64_t B, int64_t T, int64_t S, void *slab,
                                    size_t slab_size) {
    attn_decoder_config c;
    if (!saved)
        return ATTN_EINVAL;
    ATTN_TRY(attn_decoder_config_resolve(cfg, &c));
    if (B < 1 || T < 1 || (attn__dec_has_cross(&c) && S < 1) || !slab ||
        ((uintptr_t)slab & 63u))
        return ATTN_EINVAL;
    int64_t sh[ATTN__DEC_NSAVED][3];
    int nd[ATTN__DEC_NSAVED];
    size_t need;
    attn__dec_saved_shapes(&c, B, T, attn__dec_has_cross(&c) ? S : 1, sh, nd);
    if (!saved_bytes(&c, sh, nd, &need))
        return ATTN_ERANGE;
    if (slab_size < need)
        return ATTN_EWORKSPACE;
    attn_decoder_saved r;
    memset(&r, 0, sizeof r);
    char *p = slab;
    for (int i = 0; i < ATTN__DEC_NSAVED; ++i) {
        if (!nd[i])
            continue;
        attn_view *v = attn__dec_saved_slot(&r, i);
        ATTN_TRY(attn_view_init(v, c.self_attn.dtype, p, nd[i], sh[i]));
        p += attn__align64((size_t)attn_view_numel(v) * attn_dtype_size(c.self_attn.dtype));
    }
    *saved = r;
    return ATTN_OK;
}

/* The saved views are those bind makes for (B, T, S). */
attn_status attn__dec_check_saved(const attn_decoder_config *c, const attn_decoder_saved *s,
                                  int64_t B, int64_t T, int64_t S) {
    int64_t sh[ATTN__DEC_NSAVED][3];
    int nd[ATTN__DEC_NSAVED];
    attn__dec_saved_shapes(c, B, T, S, sh, nd);
    for (int i = 0; i < ATTN__DEC_NSAVED; ++i)
        if (nd[i])
            ATTN_TRY(attn__want(attn__dec_saved_slot((attn_decoder_saved *)s, i),
                                c->self_attn.dtype, nd[i], sh[i]));
    return ATTN_OK;
}

int attn__dec_saved_views(const attn_decoder_config *c, const attn_decoder_saved *s,
                          const attn_view **l, int n) {
    if (!s)
        return n;
    int64_t sh[ATTN__DEC_NSAVED][3];
    int nd[ATTN__DEC_NSAVED];
    attn__dec_saved_shapes(c, 1, 1, 1, sh, nd);
    for (int i = 0; i < ATTN__DEC_NSAVED; ++i)
        if (nd[i])
            l[n++] = attn__dec_saved_slot((attn_decoder_saved *)s, i);
    return n;
}
