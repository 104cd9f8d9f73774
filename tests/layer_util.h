/* SPDX-License-Identifier: MIT */
/* Helpers shared by the layer suites: owned tensors, random params, fixture views. */
#ifndef ATTN_LAYER_UTIL_H
#define ATTN_LAYER_UTIL_H

#include "fixture.h"
#include "testutil.h"

/* An owned contiguous tensor. */
typedef struct lt {
    attn_view v;
    void *mem;
} lt;

static inline lt lt_new(attn_dtype dt, int ndim, const int64_t *shape) {
    lt t;
    int64_t n = 1;
    for (int k = 0; k < ndim; ++k) n *= shape[k];
    t.mem = calloc((size_t)(n ? n : 1), attn_dtype_size(dt));
    ck_assert_int_eq(attn_view_init(&t.v, dt, t.mem, ndim, shape), ATTN_OK);
    return t;
}
static inline lt lt_rand(attn_dtype dt, int ndim, const int64_t *shape, uint64_t *seed,
                         double scale) {
    lt t = lt_new(dt, ndim, shape);
    tu_fill(&t.v, seed, scale);
    return t;
}
static inline void lt_free(lt *t) { free(t->mem); t->mem = NULL; }

/* A contiguous double copy of any view (row-major logical order). */
static inline double *lt_doubles(const attn_view *v) {
    int64_t n = tu_numel(v), idx[ATTN_MAX_DIMS] = {0}, i = 0;
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (n) do d[i++] = tu_get(v, idx); while (tu_inc(idx, v->shape, v->ndim));
    return d;
}
/* A view (any dtype) of a fixture tensor, converted to dt; mem must be freed. */
static inline lt lt_from_fx(fx_tensor *t, attn_dtype dt) {
    ck_assert_ptr_nonnull(t);
    lt r = lt_new(dt, t->ndim ? t->ndim : 1, t->ndim ? t->shape : (int64_t[]){1});
    int64_t idx[ATTN_MAX_DIMS] = {0}, i = 0;
    do tu_set(&r.v, idx, t->data[i++]); while (tu_inc(idx, r.v.shape, r.v.ndim));
    return r;
}
/* A double view over contiguous data with shape. */
static inline attn_view lt_wrap(double *d, int ndim, const int64_t *shape) {
    attn_view v;
    ck_assert_int_eq(attn_view_init(&v, ATTN_F64, d, ndim, shape), ATTN_OK);
    return v;
}

/* Fill every view of a params struct (given as an array of views) with U(-s, s). */
static inline void fill_views(attn_view *v, int n, uint64_t *seed, double s) {
    for (int i = 0; i < n; ++i)
        if (v[i].data) tu_fill(&v[i], seed, s);
}

static inline void *slab_new(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    memset(p, 0, (bytes + 63) & ~(size_t)63);
    return p;
}

/* A torch (out, in) weight as attn's (in, out) view: a transpose, no copy. */
static inline attn_view torch_w(lt *store, fx_tensor *t) {
    *store = lt_from_fx(t, ATTN_F64);
    attn_view v;
    ck_assert_int_eq(attn_view_transpose(&store->v, 0, 1, &v), ATTN_OK);
    return v;
}

/* MHA params from a torch fixture (weights transposed views); s[8] holds the memory. */
static inline void torch_mha(fx_file *fx, bool bias, attn_mha_params *p, lt *s) {
    memset(s, 0, 8 * sizeof *s);
    memset(p, 0, sizeof *p);
    p->wq = torch_w(&s[0], fx_get(fx, "wq"));
    p->wk = torch_w(&s[1], fx_get(fx, "wk"));
    p->wv = torch_w(&s[2], fx_get(fx, "wv"));
    p->wo = torch_w(&s[3], fx_get(fx, "wo"));
    if (!bias) return;
    static const char *b[4] = {"bq", "bk", "bv", "bo"};
    attn_view *bd[4] = {&p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < 4; ++i) {
        s[4 + i] = lt_from_fx(fx_get(fx, b[i]), ATTN_F64);
        *bd[i] = s[4 + i].v;
    }
}

/* Encoder config and params from a torch fixture; s[16] holds the memory. */
static inline void torch_encoder(fx_file *fx, attn_encoder_config *c, attn_encoder_params *p,
                                 lt *s) {
    int64_t C = fx_meta(fx, "C", 0), F = fx_meta(fx, "F", 0);
    attn_encoder_config cc = {
        .mha = {.dtype = ATTN_F64, .d_model = C, .heads = fx_meta(fx, "H", 0), .bias = true},
        .ffn = {.dtype = ATTN_F64, .d_model = C, .d_ff = F,
                .act = fx_meta(fx, "relu", 0) ? ATTN_ACT_RELU : ATTN_ACT_GELU_ERF, .bias = true},
        .eps = 1e-5, .norm = fx_meta(fx, "norm_first", 0) ? ATTN_PRE_NORM : ATTN_POST_NORM,
        .ln_affine = true};
    *c = cc;
    memset(p, 0, sizeof *p);
    static const char *w[] = {"wq", "wk", "wv", "wo", "w1", "w2"};
    attn_view *wd[] = {&p->mha.wq, &p->mha.wk, &p->mha.wv, &p->mha.wo, &p->ffn.w1, &p->ffn.w2};
    for (int i = 0; i < 6; ++i) *wd[i] = torch_w(&s[i], fx_get(fx, w[i]));
    static const char *b[] = {"bq", "bk", "bv", "bo", "b1", "b2", "ln1_g", "ln1_b", "ln2_g", "ln2_b"};
    attn_view *bd[] = {&p->mha.bq, &p->mha.bk, &p->mha.bv, &p->mha.bo, &p->ffn.b1, &p->ffn.b2,
                       &p->ln1_g, &p->ln1_b, &p->ln2_g, &p->ln2_b};
    for (int i = 0; i < 10; ++i) {
        s[6 + i] = lt_from_fx(fx_get(fx, b[i]), ATTN_F64);
        *bd[i] = s[6 + i].v;
    }
}

/* The fixture's masks as sdpa options: causal top-left and per-batch kv_len. */
static inline attn_sdpa_opts torch_opts(fx_file *fx, int64_t *kv_len) {
    attn_sdpa_opts o = {.causal = fx_meta(fx, "causal", 0) ? ATTN_CAUSAL_TOP_LEFT : 0};
    if (fx_meta(fx, "pad", 0)) {
        fx_tensor *kl = fx_get(fx, "kv_len");
        for (int b = 0; b < kl->n; ++b) kv_len[b] = (int64_t)kl->data[b];
        o.kv_len = kv_len;
    }
    return o;
}

#endif
