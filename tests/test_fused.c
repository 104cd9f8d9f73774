/* SPDX-License-Identifier: MIT */
/* Check suite for the layers' fused paths: weights laid out as PyTorch keeps them (one
 * in_proj_weight, so Q, K and V are one GEMM; (out, in) matrices seen through strides)
 * against the same numbers in attn's own slab, forward, trace and backward. */
#include "testutil.h"

#include <attn/layers.h>

enum { C = 16, H = 2, F = 24, B = 2, T = 7 };

static void *zalloc(size_t n) {
    void *p = NULL;
    ck_assert_int_eq(posix_memalign(&p, 64, n ? n : 64), 0);
    memset(p, 0, n ? n : 64);
    return p;
}

/* dst := src element by element (any layouts, same shape). */
static void copy_into(const attn_view *src, const attn_view *dst) {
    if (tu_numel(src) == 0)
        return;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do
        tu_set(dst, idx, tu_get(src, idx));
    while (tu_inc(idx, src->shape, src->ndim));
}

/* An (out, in) row-major matrix at p seen as the (in, out) weight attn multiplies by. */
static attn_view wt(attn_dtype dt, void *p, int64_t in, int64_t out) {
    attn_view v;
    ck_assert_int_eq(attn_view_init_strided(&v, dt, p, 2, (int64_t[]){in, out},
                                            (int64_t[]){1, in}),
                     ATTN_OK);
    return v;
}
static attn_view vec(attn_dtype dt, void *p, int64_t n) {
    attn_view v;
    ck_assert_int_eq(attn_view_init(&v, dt, p, 1, (int64_t[]){n}), ATTN_OK);
    return v;
}

/* PyTorch's layout: in_proj (3C, C) + bias (3C), out_proj (C, C), linear1 (F, C), linear2 (C, F). */
typedef struct torch_layout {
    void *mem;
    attn_encoder_params p;
} torch_layout;

static torch_layout torch_params(attn_dtype dt) {
    size_t es = attn_dtype_size(dt);
    size_t n = 3 * C * C + 3 * C + C * C + C + F * C + F + C * F + C + 4 * C;
    torch_layout t;
    memset(&t, 0, sizeof t);
    t.mem = zalloc(n * es);
    char *q = t.mem;
#define TAKE(cnt) (q += (cnt) * es, q - (cnt) * es)
    char *in_w = TAKE(3 * C * C), *in_b = TAKE(3 * C);
    t.p.mha.wq = wt(dt, in_w, C, C);
    t.p.mha.wk = wt(dt, in_w + C * C * es, C, C);
    t.p.mha.wv = wt(dt, in_w + 2 * C * C * es, C, C);
    t.p.mha.bq = vec(dt, in_b, C);
    t.p.mha.bk = vec(dt, in_b + C * es, C);
    t.p.mha.bv = vec(dt, in_b + 2 * C * es, C);
    t.p.mha.wo = wt(dt, TAKE(C * C), C, C);
    t.p.mha.bo = vec(dt, TAKE(C), C);
    t.p.ffn.w1 = wt(dt, TAKE(F * C), C, F);
    t.p.ffn.b1 = vec(dt, TAKE(F), F);
    t.p.ffn.w2 = wt(dt, TAKE(C * F), F, C);
    t.p.ffn.b2 = vec(dt, TAKE(C), C);
    t.p.ln1_g = vec(dt, TAKE(C), C);
    t.p.ln1_b = vec(dt, TAKE(C), C);
    t.p.ln2_g = vec(dt, TAKE(C), C);
    t.p.ln2_b = vec(dt, TAKE(C), C);
#undef TAKE
    return t;
}

static void params_each(attn_encoder_params *p, attn_view **v) {
    attn_view *l[16] = {&p->mha.wq, &p->mha.wk, &p->mha.wv, &p->mha.wo, &p->mha.bq,
                        &p->mha.bk, &p->mha.bv, &p->mha.bo, &p->ffn.w1, &p->ffn.b1,
                        &p->ffn.w2, &p->ffn.b2, &p->ln1_g,  &p->ln1_b,  &p->ln2_g,
                        &p->ln2_b};
    memcpy(v, l, sizeof l);
}

static void check_params_close(attn_encoder_params *got, attn_encoder_params *want,
                               double rtol, double atol, const char *what) {
    attn_view *g[16], *w[16];
    params_each(got, g);
    params_each(want, w);
    for (int i = 0; i < 16; ++i) {
        char m[96];
        snprintf(m, sizeof m, "%s param %d", what, i);
        tu_check_close(g[i], w[i], rtol, atol, m);
    }
}

static void run_case(attn_dtype dt, attn_norm_order norm, attn_act act, bool causal) {
    attn_encoder_config cfg = {
        .mha = {.dtype = dt, .d_model = C, .heads = H, .bias = true},
        .ffn = {.dtype = dt, .d_model = C, .d_ff = F, .act = act, .bias = true},
        .norm = norm, .ln_affine = true};
    ck_assert_int_eq(attn_encoder_config_resolve(&cfg, &cfg), ATTN_OK);
    size_t es = attn_dtype_size(dt), ps = attn_encoder_params_size(&cfg);
    void *slab = zalloc(ps), *gslab = zalloc(ps);
    attn_encoder_params ps_, gs;
    ck_assert_int_eq(attn_encoder_params_bind(&ps_, &cfg, slab, ps), ATTN_OK);
    ck_assert_int_eq(attn_encoder_params_bind(&gs, &cfg, gslab, ps), ATTN_OK);
    torch_layout tp = torch_params(dt), tg = torch_params(dt);
    attn_view *sv[16], *tv[16];
    params_each(&ps_, sv);
    params_each(&tp.p, tv);
    uint64_t seed = 7 + (uint64_t)norm * 3 + (uint64_t)act * 5 + causal;
    for (int i = 0; i < 16; ++i) {
        tu_fill(sv[i], &seed, 0.5);
        copy_into(sv[i], tv[i]);
    }
    /* x strided: every other row of a (B, 2T, C) buffer */
    void *xm = zalloc((size_t)(B * 2 * T * C) * es);
    attn_view x;
    ck_assert_int_eq(attn_view_init_strided(&x, dt, xm, 3, (int64_t[]){B, T, C},
                                            (int64_t[]){2 * T * C, 2 * C, 1}),
                     ATTN_OK);
    tu_fill(&x, &seed, 1.0);
    int64_t sh[3] = {B, T, C};
    void *o1m = zalloc((size_t)(B * T * C) * es), *o2m = zalloc((size_t)(B * T * C) * es);
    attn_view o1, o2;
    attn_view_init(&o1, dt, o1m, 3, sh);
    attn_view_init(&o2, dt, o2m, 3, sh);
    attn_sdpa_opts opts = {.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE};
    double rt = TU_RTOL(dt), at = TU_ATOL(dt);

    /* inference */
    ck_assert_int_eq(attn_encoder_forward(&cfg, &ps_, &x, &opts, &o1, NULL, NULL, 0), ATTN_OK);
    ck_assert_int_eq(attn_encoder_forward(&cfg, &tp.p, &x, &opts, &o2, NULL, NULL, 0), ATTN_OK);
    tu_check_close(&o2, &o1, rt, at, "forward");

    /* training: the cache, then every gradient */
    size_t cs = attn_encoder_cache_size(&cfg, B, T);
    void *c1 = zalloc(cs), *c2 = zalloc(cs);
    attn_view cv1[15], cv2[15];
    attn_trace k1, k2;
    ck_assert_int_eq(attn_encoder_cache_bind(&cfg, B, T, c1, cs, cv1, &k1), ATTN_OK);
    ck_assert_int_eq(attn_encoder_cache_bind(&cfg, B, T, c2, cs, cv2, &k2), ATTN_OK);
    ck_assert_int_eq(attn_encoder_forward(&cfg, &ps_, &x, &opts, &o1, &k1, NULL, 0), ATTN_OK);
    ck_assert_int_eq(attn_encoder_forward(&cfg, &tp.p, &x, &opts, &o2, &k2, NULL, 0), ATTN_OK);
    tu_check_close(&o2, &o1, rt, at, "forward with cache");
    for (int i = 0; i < 15; ++i)
        tu_check_close(&cv2[i], &cv1[i], rt, at, "cache");
    void *dm = zalloc((size_t)(B * T * C) * es), *d1m = zalloc((size_t)(B * T * C) * es);
    void *d2m = zalloc((size_t)(B * T * C) * es);
    attn_view dout, dx1, dx2;
    attn_view_init(&dout, dt, dm, 3, sh);
    attn_view_init(&dx1, dt, d1m, 3, sh);
    attn_view_init(&dx2, dt, d2m, 3, sh);
    tu_fill(&dout, &seed, 1.0);
    ck_assert_int_eq(attn_encoder_backward(&cfg, &ps_, &x, &opts, &k1, &dout, &dx1, &gs, NULL, 0),
                     ATTN_OK);
    ck_assert_int_eq(
        attn_encoder_backward(&cfg, &tp.p, &x, &opts, &k2, &dout, &dx2, &tg.p, NULL, 0), ATTN_OK);
    tu_check_close(&dx2, &dx1, rt, at, "dx");
    check_params_close(&tg.p, &gs, rt, at, "grad");

    free(slab), free(gslab), free(tp.mem), free(tg.mem), free(xm), free(o1m), free(o2m);
    free(c1), free(c2), free(dm), free(d1m), free(d2m);
}

START_TEST(encoder_torch_layout) {
    for (int d = 0; d < 2; ++d)
        for (int n = 0; n < 2; ++n)
            for (int c = 0; c < 2; ++c)
                run_case(d ? ATTN_F64 : ATTN_F32, n ? ATTN_POST_NORM : ATTN_PRE_NORM,
                         n ? ATTN_ACT_GELU_TANH : ATTN_ACT_GELU_ERF, c);
}
END_TEST

/* Cross-attention with K and V adjacent (one GEMM) against separate weights. */
START_TEST(mha_cross_kv_adjacent) {
    enum { CK = 12, TK = 5 };
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        size_t es = attn_dtype_size(dt);
        attn_mha_config cfg = {.dtype = dt, .d_model = C, .heads = H, .d_kv = CK, .bias = true};
        ck_assert_int_eq(attn_mha_config_resolve(&cfg, &cfg), ATTN_OK);
        size_t ps = attn_mha_params_size(&cfg);
        void *slab = zalloc(ps);
        attn_mha_params a, t;
        ck_assert_int_eq(attn_mha_params_bind(&a, &cfg, slab, ps), ATTN_OK);
        uint64_t seed = 99;
        attn_view *av[8] = {&a.wq, &a.wk, &a.wv, &a.wo, &a.bq, &a.bk, &a.bv, &a.bo};
        for (int i = 0; i < 8; ++i)
            tu_fill(av[i], &seed, 0.5);
        /* kv_proj (2C, CK) as PyTorch's cross-attention keeps it, q and o apart */
        char *kv = zalloc((size_t)(2 * C * CK) * es);
        t = a;
        t.wk = wt(dt, kv, CK, C);
        t.wv = wt(dt, kv + (size_t)(C * CK) * es, CK, C);
        copy_into(&a.wk, &t.wk);
        copy_into(&a.wv, &t.wv);
        void *xq = zalloc((size_t)(B * T * C) * es), *xk = zalloc((size_t)(B * TK * CK) * es);
        void *o1m = zalloc((size_t)(B * T * C) * es), *o2m = zalloc((size_t)(B * T * C) * es);
        attn_view Xq, Xk, o1, o2;
        attn_view_init(&Xq, dt, xq, 3, (int64_t[]){B, T, C});
        attn_view_init(&Xk, dt, xk, 3, (int64_t[]){B, TK, CK});
        attn_view_init(&o1, dt, o1m, 3, (int64_t[]){B, T, C});
        attn_view_init(&o2, dt, o2m, 3, (int64_t[]){B, T, C});
        tu_fill(&Xq, &seed, 1.0);
        tu_fill(&Xk, &seed, 1.0);
        ck_assert_int_eq(attn_mha_forward(&cfg, &a, &Xq, &Xk, NULL, &o1, NULL, NULL, 0), ATTN_OK);
        ck_assert_int_eq(attn_mha_forward(&cfg, &t, &Xq, &Xk, NULL, &o2, NULL, NULL, 0), ATTN_OK);
        tu_check_close(&o2, &o1, TU_RTOL(dt), TU_ATOL(dt), "cross-attention");
        free(slab), free(kv), free(xq), free(xk), free(o1m), free(o2m);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("fused");
    TCase *tc = tcase_create("torch_layout");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, encoder_torch_layout);
    tcase_add_test(tc, mha_cross_kv_adjacent);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
