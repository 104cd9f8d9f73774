/* SPDX-License-Identifier: MIT */
/* Check suite for the layer backwards: finite differences, PyTorch autograd, isolation. */
#include "layer_util.h"

/*
 * One layer under test: forward(ctx) fills ctx->out from the current values
 * of x and the parameter slab; the loss is L = sum(out * R).
 */
typedef struct lctx {
    int kind; /* 0 mha self, 1 mha cross, 2 ffn, 3 encoder */
    attn_mha_config mc;
    attn_ffn_config fc;
    attn_encoder_config ec;
    attn_mha_params mp, mg;
    attn_ffn_params fp, fg;
    attn_encoder_params ep, eg;
    void *slab, *gslab;
    size_t ps;
    lt x, xkv, out, R, dx, dxkv;
    attn_sdpa_opts opts;
    /* cache */
    void *cslab;
    attn_view cviews[16];
    attn_trace cache;
} lctx;

static double loss(lctx *c) {
    attn_status st;
    if (c->kind <= 1)
        st = attn_mha_forward(&c->mc, &c->mp, &c->x.v, c->kind ? &c->xkv.v : NULL, &c->opts,
                              &c->out.v, &c->cache, NULL, 0);
    else if (c->kind == 2)
        st = attn_ffn_forward(&c->fc, &c->fp, &c->x.v, &c->out.v, &c->cache, NULL, 0);
    else
        st = attn_encoder_forward(&c->ec, &c->ep, &c->x.v, &c->opts, &c->out.v, &c->cache,
                                  NULL, 0);
    ck_assert_msg(st == ATTN_OK, "forward: %s", attn_strerror(st));
    double s = 0;
    int64_t idx[4] = {0};
    do s += tu_get(&c->out.v, idx) * tu_get(&c->R.v, idx);
    while (tu_inc(idx, c->out.v.shape, c->out.v.ndim));
    return s;
}

static void backward(lctx *c) {
    loss(c); /* refresh the cache */
    attn_status st;
    if (c->kind <= 1)
        st = attn_mha_backward(&c->mc, &c->mp, &c->x.v, c->kind ? &c->xkv.v : NULL, &c->opts,
                               &c->cache, &c->R.v, &c->dx.v, c->kind ? &c->dxkv.v : NULL, &c->mg,
                               NULL, 0);
    else if (c->kind == 2)
        st = attn_ffn_backward(&c->fc, &c->fp, &c->x.v, &c->cache, &c->R.v, &c->dx.v, &c->fg,
                               NULL, 0);
    else
        st = attn_encoder_backward(&c->ec, &c->ep, &c->x.v, &c->opts, &c->cache, &c->R.v,
                                   &c->dx.v, &c->eg, NULL, 0);
    ck_assert_msg(st == ATTN_OK, "backward: %s", attn_strerror(st));
}

/* Build a context with random params; dt and shapes fixed small. */
static void setup(lctx *c, int kind, attn_dtype dt, int variant, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    int64_t B = 2, T = 4, Tk = kind == 1 ? 5 : 4, C = 4;
    c->mc = (attn_mha_config){.dtype = dt, .d_model = C, .heads = 2, .bias = true,
                              .kv_heads = variant == 1 ? 1 : 0, .d_kv = kind == 1 ? 3 : 0};
    c->fc = (attn_ffn_config){.dtype = dt, .d_model = C, .d_ff = 6,
                              .act = (attn_act)(variant % 3), .bias = true};
    c->ec = (attn_encoder_config){.mha = c->mc, .ffn = c->fc, .eps = 1e-5,
                                  .norm = variant % 2 ? ATTN_POST_NORM : ATTN_PRE_NORM,
                                  .ln_affine = true};
    c->ec.mha.d_kv = 0;
    if (kind <= 1) {
        c->ps = attn_mha_params_size(&c->mc);
        c->slab = slab_new(c->ps);
        c->gslab = slab_new(c->ps);
        ck_assert_int_eq(attn_mha_params_bind(&c->mp, &c->mc, c->slab, c->ps), ATTN_OK);
        ck_assert_int_eq(attn_mha_params_bind(&c->mg, &c->mc, c->gslab, c->ps), ATTN_OK);
        size_t cs = attn_mha_cache_size(&c->mc, B, T, Tk);
        c->cslab = slab_new(cs);
        ck_assert_int_eq(attn_mha_cache_bind(&c->mc, B, T, Tk, c->cslab, cs, c->cviews,
                                             &c->cache), ATTN_OK);
    } else if (kind == 2) {
        c->ps = attn_ffn_params_size(&c->fc);
        c->slab = slab_new(c->ps);
        c->gslab = slab_new(c->ps);
        ck_assert_int_eq(attn_ffn_params_bind(&c->fp, &c->fc, c->slab, c->ps), ATTN_OK);
        ck_assert_int_eq(attn_ffn_params_bind(&c->fg, &c->fc, c->gslab, c->ps), ATTN_OK);
        size_t cs = 2 * (size_t)(B * T * 6) * attn_dtype_size(dt) + 128;
        c->cslab = slab_new(cs);
        attn_view_init(&c->cviews[0], dt, c->cslab, 3, (int64_t[]){B, T, 6});
        attn_view_init(&c->cviews[1], dt, (char *)c->cslab + cs / 2, 3, (int64_t[]){B, T, 6});
        c->cache.mlp_hidden_pre = &c->cviews[0];
        c->cache.mlp_hidden = &c->cviews[1];
    } else {
        c->ps = attn_encoder_params_size(&c->ec);
        c->slab = slab_new(c->ps);
        c->gslab = slab_new(c->ps);
        ck_assert_int_eq(attn_encoder_params_bind(&c->ep, &c->ec, c->slab, c->ps), ATTN_OK);
        ck_assert_int_eq(attn_encoder_params_bind(&c->eg, &c->ec, c->gslab, c->ps), ATTN_OK);
        size_t cs = attn_encoder_cache_size(&c->ec, B, T);
        c->cslab = slab_new(cs);
        ck_assert_int_eq(attn_encoder_cache_bind(&c->ec, B, T, c->cslab, cs, c->cviews,
                                                 &c->cache), ATTN_OK);
    }
    attn_view all;
    attn_view_init(&all, dt, c->slab, 1, (int64_t[]){(int64_t)(c->ps / attn_dtype_size(dt))});
    tu_fill(&all, &seed, 0.6);
    if (kind == 3) { /* LayerNorm gammas near 1 */
        double *g1 = c->ep.ln1_g.data, *g2 = c->ep.ln2_g.data;
        for (int i = 0; i < C && dt == ATTN_F64; ++i) g1[i] += 1.0, g2[i] += 1.0;
    }
    c->x = lt_rand(dt, 3, (int64_t[]){B, T, C}, &seed, 1.0);
    c->dx = lt_new(dt, 3, (int64_t[]){B, T, C});
    if (kind == 1) {
        c->xkv = lt_rand(dt, 3, (int64_t[]){B, Tk, 3}, &seed, 1.0);
        c->dxkv = lt_new(dt, 3, (int64_t[]){B, Tk, 3});
    }
    c->out = lt_new(dt, 3, (int64_t[]){B, T, C});
    c->R = lt_rand(dt, 3, (int64_t[]){B, T, C}, &seed, 1.0);
    if (variant == 2)
        c->opts.causal = ATTN_CAUSAL_TOP_LEFT;
}

static void teardown(lctx *c) {
    free(c->slab); free(c->gslab); free(c->cslab);
    lt_free(&c->x); lt_free(&c->xkv); lt_free(&c->out); lt_free(&c->R); lt_free(&c->dx);
    lt_free(&c->dxkv);
}

/* Central differences over every element of a contiguous f64 buffer vs analytic. */
static void fd_compare(lctx *c, double *vals, const double *grad, int64_t n, const char *what) {
    double h = 1e-6, num2 = 0, den2 = 0;
    for (int64_t i = 0; i < n; ++i) {
        double v = vals[i];
        vals[i] = v + h;
        double lp = loss(c);
        vals[i] = v - h;
        double lm = loss(c);
        vals[i] = v;
        double fd = (lp - lm) / (2 * h);
        num2 += (fd - grad[i]) * (fd - grad[i]);
        den2 += grad[i] * grad[i];
    }
    double rel = sqrt(num2) / fmax(sqrt(den2), 1e-300);
    ck_assert_msg(rel < 1e-6, "%s: finite-difference relative error %.3g", what, rel);
}

START_TEST(bw_finite_differences) {
    /* every layer kind x variants (GQA, activation, causal, norm order) in f64 */
    for (int kind = 0; kind < 4; ++kind)
        for (int variant = 0; variant < 3; ++variant) {
            lctx c;
            setup(&c, kind, ATTN_F64, variant, 100 + (uint64_t)(kind * 7 + variant));
            backward(&c);
            char what[64];
            snprintf(what, sizeof what, "kind %d variant %d dx", kind, variant);
            fd_compare(&c, c.x.mem, c.dx.mem, tu_numel(&c.x.v), what);
            if (kind == 1) {
                snprintf(what, sizeof what, "cross variant %d dx_kv", variant);
                fd_compare(&c, c.xkv.mem, c.dxkv.mem, tu_numel(&c.xkv.v), what);
            }
            snprintf(what, sizeof what, "kind %d variant %d params", kind, variant);
            fd_compare(&c, c.slab, c.gslab, (int64_t)(c.ps / 8), what);
            teardown(&c);
        }
}
END_TEST

START_TEST(bw_accumulates) {
    /* gradients accumulate: two backward calls give twice one */
    lctx c;
    setup(&c, 3, ATTN_F64, 0, 7);
    backward(&c);
    int64_t n = tu_numel(&c.x.v), np = (int64_t)(c.ps / 8);
    double *dx1 = malloc(sizeof(double) * n), *g1 = malloc(c.ps);
    memcpy(dx1, c.dx.mem, sizeof(double) * n);
    memcpy(g1, c.gslab, c.ps);
    backward(&c);
    const double *dx2 = c.dx.mem, *g2 = c.gslab;
    for (int64_t i = 0; i < n; ++i) ck_assert(fabs(dx2[i] - 2 * dx1[i]) <= 1e-14 * fabs(dx1[i]) + 1e-300);
    for (int64_t i = 0; i < np; ++i) ck_assert(fabs(g2[i] - 2 * g1[i]) <= 1e-14 * fabs(g1[i]) + 1e-300);
    free(dx1); free(g1);
    teardown(&c);
}
END_TEST

/* The parameter views of a context, in a fixed order. */
static int pviews(lctx *c, attn_view **v) {
    int n = 0;
    attn_mha_params *m = c->kind == 3 ? &c->ep.mha : &c->mp;
    attn_ffn_params *f = c->kind == 3 ? &c->ep.ffn : &c->fp;
    if (c->kind != 2) {
        attn_view *mv[8] = {&m->wq, &m->wk, &m->wv, &m->wo, &m->bq, &m->bk, &m->bv, &m->bo};
        for (int i = 0; i < 8; ++i) v[n++] = mv[i];
    }
    if (c->kind >= 2) {
        attn_view *fv[4] = {&f->w1, &f->b1, &f->w2, &f->b2};
        for (int i = 0; i < 4; ++i) v[n++] = fv[i];
    }
    if (c->kind == 3) {
        attn_view *lv[4] = {&c->ep.ln1_g, &c->ep.ln1_b, &c->ep.ln2_g, &c->ep.ln2_b};
        for (int i = 0; i < 4; ++i) v[n++] = lv[i];
    }
    return n;
}

static void copy_values(const attn_view *from, attn_view *to) {
    int64_t idx[4] = {0};
    if (tu_numel(from) == 0) return;
    do tu_set(to, idx, tu_get(from, idx)); while (tu_inc(idx, from->shape, from->ndim));
}

START_TEST(bw_f32_matches_f64) {
    for (int kind = 0; kind < 4; ++kind) {
        lctx a, b;
        setup(&a, kind, ATTN_F64, 1, 55);
        setup(&b, kind, ATTN_F32, 1, 56);
        attn_view *va[16], *vb[16];
        int n = pviews(&a, va);
        pviews(&b, vb);
        for (int i = 0; i < n; ++i) copy_values(va[i], vb[i]);
        copy_values(&a.x.v, &b.x.v);
        copy_values(&a.R.v, &b.R.v);
        if (kind == 1) copy_values(&a.xkv.v, &b.xkv.v);
        backward(&a);
        backward(&b);
        tu_check_close(&b.dx.v, &a.dx.v, 1e-3, 1e-4, "f32 vs f64 dx");
        teardown(&a);
        teardown(&b);
    }
}
END_TEST

/* lesson 11: d out[0, 1] / d x is exactly zero at future positions, non-zero at past ones */
START_TEST(bw_gradient_isolation) {
    for (int d = 0; d < 2; ++d) {
        lctx c;
        setup(&c, 0, d ? ATTN_F64 : ATTN_F32, 2, 31);
        /* R selects output row 1 of batch 0 only */
        memset(c.R.mem, 0, (size_t)tu_numel(&c.R.v) * attn_dtype_size(c.R.v.dtype));
        for (int k = 0; k < 4; ++k) tu_set(&c.R.v, (int64_t[]){0, 1, k, 0}, 1.0);
        backward(&c);
        for (int t = 0; t < 4; ++t) {
            double norm = 0;
            for (int k = 0; k < 4; ++k) norm += fabs(tu_get(&c.dx.v, (int64_t[]){0, t, k, 0}));
            if (t <= 1)
                ck_assert_msg(norm > 0, "past position %d has zero gradient", t);
            else
                ck_assert_msg(norm == 0.0, "future position %d has gradient %g", t, norm);
        }
        teardown(&c);
    }
}
END_TEST

/* ---- PyTorch autograd parity -------------------------------------------- */

/* Compare a gradient view (attn layout) with a torch-layout fixture tensor. */
static void cmp_grad(const attn_view *g, fx_tensor *t, bool transposed, const char *what) {
    attn_view w = lt_wrap(t->data, t->ndim, t->shape), wt;
    if (transposed) attn_view_transpose(&w, 0, 1, &wt);
    tu_check_close(g, transposed ? &wt : &w, 1e-10, 1e-12, what);
}

START_TEST(bw_torch_mha) {
    static const char *cases[] = {"layers_mha_self.txt", "layers_mha_causal_pad.txt",
                                  "layers_mha_cross.txt"};
    for (int ci = 0; ci < 3; ++ci) {
        fx_file *fx = fx_load(cases[ci]);
        ck_assert_ptr_nonnull(fx);
        bool bias = fx_meta(fx, "bias", 0), cross = fx_find(fx, "x_kv") != NULL;
        int64_t B = fx_meta(fx, "B", 0), Tq = fx_meta(fx, "Tq", 0), Tk = fx_meta(fx, "Tk", 0);
        attn_mha_config c = {.dtype = ATTN_F64, .d_model = fx_meta(fx, "C", 0),
                             .heads = fx_meta(fx, "H", 0), .d_kv = fx_meta(fx, "Ckv", 0),
                             .bias = bias};
        lt s[8];
        attn_mha_params p, g;
        torch_mha(fx, bias, &p, s);
        size_t ps = attn_mha_params_size(&c);
        void *gslab = slab_new(ps);
        ck_assert_int_eq(attn_mha_params_bind(&g, &c, gslab, ps), ATTN_OK);
        lt xq = lt_from_fx(fx_get(fx, "x_q"), ATTN_F64);
        lt xkv = cross ? lt_from_fx(fx_get(fx, "x_kv"), ATTN_F64) : (lt){0};
        lt dout = lt_from_fx(fx_get(fx, "dout"), ATTN_F64);
        lt out = lt_new(ATTN_F64, 3, dout.v.shape);
        lt dxq = lt_new(ATTN_F64, 3, xq.v.shape);
        lt dxkv = cross ? lt_new(ATTN_F64, 3, xkv.v.shape) : (lt){0};
        int64_t kv_len[8];
        attn_sdpa_opts o = torch_opts(fx, kv_len);
        size_t cs = attn_mha_cache_size(&c, B, Tq, Tk);
        void *cslab = slab_new(cs);
        attn_view cv[5];
        attn_trace cache;
        ck_assert_int_eq(attn_mha_cache_bind(&c, B, Tq, Tk, cslab, cs, cv, &cache), ATTN_OK);
        ck_assert_int_eq(attn_mha_forward(&c, &p, &xq.v, cross ? &xkv.v : NULL, &o, &out.v,
                                          &cache, NULL, 0), ATTN_OK);
        attn_status st = attn_mha_backward(&c, &p, &xq.v, cross ? &xkv.v : NULL, &o, &cache,
                                           &dout.v, &dxq.v, cross ? &dxkv.v : NULL, &g, NULL, 0);
        ck_assert_msg(st == ATTN_OK, "%s: %s", cases[ci], attn_strerror(st));
        cmp_grad(&dxq.v, fx_get(fx, "dx_q"), false, "dx_q");
        if (cross) cmp_grad(&dxkv.v, fx_get(fx, "dx_kv"), false, "dx_kv");
        cmp_grad(&g.wq, fx_get(fx, "dwq"), true, "dwq");
        cmp_grad(&g.wk, fx_get(fx, "dwk"), true, "dwk");
        cmp_grad(&g.wv, fx_get(fx, "dwv"), true, "dwv");
        cmp_grad(&g.wo, fx_get(fx, "dwo"), true, "dwo");
        if (bias) {
            cmp_grad(&g.bq, fx_get(fx, "dbq"), false, "dbq");
            cmp_grad(&g.bk, fx_get(fx, "dbk"), false, "dbk");
            cmp_grad(&g.bv, fx_get(fx, "dbv"), false, "dbv");
            cmp_grad(&g.bo, fx_get(fx, "dbo"), false, "dbo");
        }
        for (int i = 0; i < 8; ++i) lt_free(&s[i]);
        lt_free(&xq); lt_free(&xkv); lt_free(&dout); lt_free(&out); lt_free(&dxq); lt_free(&dxkv);
        free(gslab); free(cslab);
        fx_free(fx);
    }
}
END_TEST

START_TEST(bw_torch_encoder) {
    static const char *cases[] = {"layers_enc_post_relu_pad.txt", "layers_enc_post_gelu_causal.txt",
                                  "layers_enc_pre_gelu_pad.txt", "layers_enc_pre_relu_causal.txt"};
    for (int ci = 0; ci < 4; ++ci) {
        fx_file *fx = fx_load(cases[ci]);
        ck_assert_ptr_nonnull(fx);
        int64_t B = fx_meta(fx, "B", 0), T = fx_meta(fx, "T", 0);
        attn_encoder_config c;
        attn_encoder_params p, g;
        lt s[16];
        torch_encoder(fx, &c, &p, s);
        size_t ps = attn_encoder_params_size(&c);
        void *gslab = slab_new(ps);
        ck_assert_int_eq(attn_encoder_params_bind(&g, &c, gslab, ps), ATTN_OK);
        lt x = lt_from_fx(fx_get(fx, "x"), ATTN_F64), dout = lt_from_fx(fx_get(fx, "dout"), ATTN_F64);
        lt out = lt_new(ATTN_F64, 3, x.v.shape), dx = lt_new(ATTN_F64, 3, x.v.shape);
        int64_t kv_len[8];
        attn_sdpa_opts o = torch_opts(fx, kv_len);
        size_t cs = attn_encoder_cache_size(&c, B, T);
        void *cslab = slab_new(cs);
        attn_view cv[16];
        attn_trace cache;
        ck_assert_int_eq(attn_encoder_cache_bind(&c, B, T, cslab, cs, cv, &cache), ATTN_OK);
        ck_assert_int_eq(attn_encoder_forward(&c, &p, &x.v, &o, &out.v, &cache, NULL, 0), ATTN_OK);
        attn_status st = attn_encoder_backward(&c, &p, &x.v, &o, &cache, &dout.v, &dx.v, &g, NULL, 0);
        ck_assert_msg(st == ATTN_OK, "%s: %s", cases[ci], attn_strerror(st));
        cmp_grad(&dx.v, fx_get(fx, "dx"), false, "dx");
        static const char *gw[] = {"dwq", "dwk", "dwv", "dwo", "dw1", "dw2"};
        attn_view *gd[] = {&g.mha.wq, &g.mha.wk, &g.mha.wv, &g.mha.wo, &g.ffn.w1, &g.ffn.w2};
        for (int i = 0; i < 6; ++i) cmp_grad(gd[i], fx_get(fx, gw[i]), true, gw[i]);
        static const char *gb[] = {"dbq", "dbk", "dbv", "dbo", "db1", "db2", "dln1_g", "dln1_b", "dln2_g", "dln2_b"};
        attn_view *gbd[] = {&g.mha.bq, &g.mha.bk, &g.mha.bv, &g.mha.bo, &g.ffn.b1, &g.ffn.b2,
                            &g.ln1_g, &g.ln1_b, &g.ln2_g, &g.ln2_b};
        for (int i = 0; i < 10; ++i) cmp_grad(gbd[i], fx_get(fx, gb[i]), false, gb[i]);
        for (int i = 0; i < 16; ++i) lt_free(&s[i]);
        lt_free(&x); lt_free(&dout); lt_free(&out); lt_free(&dx);
        free(gslab); free(cslab);
        fx_free(fx);
    }
}
END_TEST

START_TEST(bw_errors) {
    lctx c;
    setup(&c, 3, ATTN_F64, 0, 3);
    loss(&c);
    attn_trace partial = c.cache;
    partial.lse = NULL;
    ck_assert_int_eq(attn_encoder_backward(&c.ec, &c.ep, &c.x.v, NULL, &partial, &c.R.v, &c.dx.v,
                                           NULL, NULL, 0), ATTN_EINVAL);
    lt bad = lt_new(ATTN_F64, 3, (int64_t[]){2, 4, 5});
    ck_assert_int_eq(attn_encoder_backward(&c.ec, &c.ep, &c.x.v, NULL, &c.cache, &bad.v, &c.dx.v,
                                           NULL, NULL, 0), ATTN_ESHAPE);
    size_t ws = attn_encoder_backward_workspace_size(&c.ec, &c.x.v, NULL);
    ck_assert_uint_gt(ws, 0);
    void *w = malloc(ws);
    ck_assert_int_eq(attn_encoder_backward(&c.ec, &c.ep, &c.x.v, NULL, &c.cache, &c.R.v, &c.dx.v,
                                           &c.eg, w, ws - 1), ATTN_EWORKSPACE);
    for (int64_t i = 0; i < tu_numel(&c.dx.v); ++i) ck_assert(((double *)c.dx.mem)[i] == 0.0);
    ck_assert_int_eq(attn_encoder_backward(&c.ec, &c.ep, &c.x.v, NULL, &c.cache, &c.R.v, &c.dx.v,
                                           &c.eg, w, ws), ATTN_OK);
    free(w);
    lt_free(&bad);
    teardown(&c);
}
END_TEST

int main(void) {
    Suite *s = suite_create("backward");
    TCase *t1 = tcase_create("attn_encoder_backward");
    tcase_set_timeout(t1, 300);
    tcase_add_test(t1, bw_finite_differences);
    tcase_add_test(t1, bw_accumulates);
    tcase_add_test(t1, bw_f32_matches_f64);
    tcase_add_test(t1, bw_torch_encoder);
    tcase_add_test(t1, bw_errors);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("attn_mha_backward");
    tcase_set_timeout(t2, 300);
    tcase_add_test(t2, bw_gradient_isolation);
    tcase_add_test(t2, bw_torch_mha);
    suite_add_tcase(s, t2);
    return tu_run(s);
}
