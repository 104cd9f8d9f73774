/* SPDX-License-Identifier: MIT */
/* PyTorch's parameter names bound to attn's params structs: (out, in) -> (in, out) views. */
#include <string.h>

#include "io/io_internal.h"

/* Where a binder reads: the file and the name prefix (the caller's, then the module's). */
typedef struct src {
    const attn_safetensors *f;
    const char *prefix, *mid;
} src;

/* Tensor prefix mid name, of dtype dt and exactly the given shape. */
static attn_status get(const src *s, const char *name, attn_dtype dt, int ndim,
                       const int64_t *shape, attn_view *out) {
    const attn__st_entry *e = attn__st_find(s->f, s->prefix, s->mid, name);
    if (!e)
        return ATTN_ENOTFOUND;
    attn_view v;
    ATTN_TRY(attn__st_entry_view(s->f, e, &v));
    if (v.dtype != dt)
        return ATTN_EDTYPE;
    if (e->ndim != ndim)
        return ATTN_ESHAPE;
    for (int k = 0; k < ndim; ++k)
        if (v.shape[k] != shape[k])
            return ATTN_ESHAPE;
    *out = v;
    return ATTN_OK;
}

/* A vector (n). */
static attn_status get1(const src *s, const char *name, attn_dtype dt, int64_t n,
                        attn_view *out) {
    return get(s, name, dt, 1, &n, out);
}

/* A PyTorch (out, in) weight as attn's (in, out) view: strides (1, in). */
static attn_status get_t(const src *s, const char *name, attn_dtype dt, int64_t rows,
                         int64_t cols, attn_view *out) {
    attn_view v;
    ATTN_TRY(get(s, name, dt, 2, (int64_t[]){rows, cols}, &v));
    return attn_view_transpose(&v, 0, 1, out);
}

/* Rows [r0, r0 + n) of a row-major (R, in) weight, as the (in, n) view. */
static attn_status rows_t(const attn_view *w, int64_t r0, int64_t n, attn_view *out) {
    attn_view b;
    ATTN_TRY(attn_view_slice(w, 0, r0, r0 + n, 1, &b));
    return attn_view_transpose(&b, 0, 1, out);
}

/* nn.MultiheadAttention under s, for the resolved config c. */
static attn_status mha_bind(const attn_mha_config *c, const src *s, attn_mha_params *p) {
    attn_dtype dt = c->dtype;
    int64_t C = c->d_model, HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head, R;
    if (!attn__add_i64(HD, KD, &R) || !attn__add_i64(R, KD, &R))
        return ATTN_EINVAL;
    attn_mha_params r;
    memset(&r, 0, sizeof r);
    if (c->d_kv == C) { /* one (H*D + 2 Hkv*D, C) in_proj_weight: Q, K, V adjacent */
        attn_view w;
        ATTN_TRY(get(s, "in_proj_weight", dt, 2, (int64_t[]){R, C}, &w));
        ATTN_TRY(rows_t(&w, 0, HD, &r.wq));
        ATTN_TRY(rows_t(&w, HD, KD, &r.wk));
        ATTN_TRY(rows_t(&w, HD + KD, KD, &r.wv));
    } else { /* kdim/vdim != embed_dim: PyTorch keeps three weights */
        ATTN_TRY(get_t(s, "q_proj_weight", dt, HD, C, &r.wq));
        ATTN_TRY(get_t(s, "k_proj_weight", dt, KD, c->d_kv, &r.wk));
        ATTN_TRY(get_t(s, "v_proj_weight", dt, KD, c->d_kv, &r.wv));
    }
    ATTN_TRY(get_t(s, "out_proj.weight", dt, C, HD, &r.wo));
    if (c->bias) {
        attn_view b;
        ATTN_TRY(get1(s, "in_proj_bias", dt, R, &b));
        ATTN_TRY(attn_view_slice(&b, 0, 0, HD, 1, &r.bq));
        ATTN_TRY(attn_view_slice(&b, 0, HD, HD + KD, 1, &r.bk));
        ATTN_TRY(attn_view_slice(&b, 0, HD + KD, R, 1, &r.bv));
        ATTN_TRY(get1(s, "out_proj.bias", dt, C, &r.bo));
    }
    *p = r;
    return ATTN_OK;
}

/* linear1 (F, C) and linear2 (C, F) under s, for the resolved FFN config c. */
static attn_status ffn_bind(const attn_ffn_config *c, const src *s, attn_ffn_params *p) {
    attn_ffn_params r;
    memset(&r, 0, sizeof r);
    int64_t C = c->d_model, F = c->d_ff;
    ATTN_TRY(get_t(s, "linear1.weight", c->dtype, F, C, &r.w1));
    if (c->bias)
        ATTN_TRY(get1(s, "linear1.bias", c->dtype, F, &r.b1));
    ATTN_TRY(get_t(s, "linear2.weight", c->dtype, C, F, &r.w2));
    if (c->bias)
        ATTN_TRY(get1(s, "linear2.bias", c->dtype, C, &r.b2));
    *p = r;
    return ATTN_OK;
}

/* LayerNorm `name` ("norm1.", ...): weight into g, bias into b, both (C). */
static attn_status ln_bind(const src *s, const char *name, attn_dtype dt, int64_t C,
                           attn_view *g, attn_view *b) {
    src n = {s->f, s->prefix, name};
    ATTN_TRY(get1(&n, "weight", dt, C, g));
    return get1(&n, "bias", dt, C, b);
}

attn_status attn_mha_params_from_torch(const attn_mha_config *cfg, const attn_safetensors *f,
                                       const char *prefix, attn_mha_params *p) {
    attn_mha_config c;
    if (!f || !p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    src s = {f, prefix, NULL};
    return mha_bind(&c, &s, p);
}

attn_status attn_encoder_params_from_torch(const attn_encoder_config *cfg,
                                           const attn_safetensors *f, const char *prefix,
                                           attn_encoder_params *p) {
    attn_encoder_config c;
    if (!f || !p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_encoder_config_resolve(cfg, &c));
    attn_encoder_params r;
    memset(&r, 0, sizeof r);
    src sa = {f, prefix, "self_attn."}, s = {f, prefix, NULL};
    ATTN_TRY(mha_bind(&c.mha, &sa, &r.mha));
    ATTN_TRY(ffn_bind(&c.ffn, &s, &r.ffn));
    if (c.ln_affine) {
        int64_t C = c.mha.d_model;
        ATTN_TRY(ln_bind(&s, "norm1.", c.mha.dtype, C, &r.ln1_g, &r.ln1_b));
        ATTN_TRY(ln_bind(&s, "norm2.", c.mha.dtype, C, &r.ln2_g, &r.ln2_b));
    }
    *p = r;
    return ATTN_OK;
}

attn_status attn_decoder_params_from_torch(const attn_decoder_config *cfg,
                                           const attn_safetensors *f, const char *prefix,
                                           attn_decoder_params *p) {
    attn_decoder_config c;
    if (!f || !p)
        return ATTN_EINVAL;
    ATTN_TRY(attn_decoder_config_resolve(cfg, &c));
    bool cross = c.cross.heads > 0; /* resolve zeroes an absent cross config */
    attn_decoder_params r;
    memset(&r, 0, sizeof r);
    src sa = {f, prefix, "self_attn."}, ca = {f, prefix, "multihead_attn."},
        s = {f, prefix, NULL};
    ATTN_TRY(mha_bind(&c.self_attn, &sa, &r.self_attn));
    if (cross)
        ATTN_TRY(mha_bind(&c.cross, &ca, &r.cross));
    ATTN_TRY(ffn_bind(&c.ffn, &s, &r.ffn));
    if (c.ln_affine) {
        attn_dtype dt = c.self_attn.dtype;
        int64_t C = c.self_attn.d_model;
        ATTN_TRY(ln_bind(&s, "norm1.", dt, C, &r.ln1_g, &r.ln1_b));
        if (cross) {
            ATTN_TRY(ln_bind(&s, "norm2.", dt, C, &r.ln2_g, &r.ln2_b));
            ATTN_TRY(ln_bind(&s, "norm3.", dt, C, &r.ln3_g, &r.ln3_b));
        } else { /* a causal nn.TransformerEncoderLayer: norm2 is the FFN's */
            ATTN_TRY(ln_bind(&s, "norm2.", dt, C, &r.ln3_g, &r.ln3_b));
        }
    }
    *p = r;
    return ATTN_OK;
}
