/* SPDX-License-Identifier: MIT */
/* Check suite for the row and elementwise kernels: softmax, layernorm, activations, adds,
 * linear maps, forward and backward, against naive references, finite differences, the
 * ViT seed's own numbers and PyTorch parity fixtures. */
#include <float.h>

#include "kernel_util.h"
#include "ref/ref.h"

/* Shapes for row kernels (last dim = the row). */
static const shp row_shapes[] = {
    {1, {5}},    {2, {3, 7}},  {2, {4, 1}}, {3, {2, 3, 4}}, {4, {2, 2, 3, 5}},
    {2, {1, 6}}, {2, {2, 33}}, {2, {0, 4}}, {3, {2, 0, 3}}, {2, {3, 77}},
};
#define NROW_SHAPES (sizeof row_shapes / sizeof *row_shapes)

/* ======================================================================================
 * attn_softmax
 * ====================================================================================== */

static void sm_case(attn_dtype dt, const shp *s, lay lx, lay ly, bool inplace) {
    uint64_t seed = 11 + lx * 7 + ly * 131 + (uint64_t)s->nd * 1009;
    tbuf x = mk(dt, s->nd, s->s, lx, &seed, 4.0), y = mk(dt, s->nd, s->s, ly, &seed, 1.0);
    tbuf want = mkwant(s->nd, s->s);
    ref_softmax(&x.v, &want.v);
    attn_view *out = inplace ? &x.v : &y.v;
    char what[128];
    snprintf(what, sizeof what, "softmax %s nd=%d x=%s y=%s%s", dtn(dt), s->nd, lay_name[lx],
             lay_name[ly], inplace ? " in-place" : "");
    ck_assert_msg(attn_softmax(&x.v, out) == ATTN_OK, "%s", what);
    tu_check_close(out, &want.v, RT(dt), AT(dt), what);
    tfree(&x);
    tfree(&y);
    tfree(&want);
}

START_TEST(sm_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t si = 0; si < NROW_SHAPES; ++si)
            for (int lx = 0; lx < L_COUNT; ++lx) {
                for (int ly = 0; ly < NOUT_LAYS; ++ly)
                    sm_case(d ? ATTN_F64 : ATTN_F32, &row_shapes[si], lx, out_lays[ly], false);
                if (lx != L_BCAST)
                    sm_case(d ? ATTN_F64 : ATTN_F32, &row_shapes[si], lx, lx, true);
            }
}
END_TEST

/* -inf, all -inf, NaN, +inf, +-1e30 and denormal rows, both dtypes. */
START_TEST(sm_special_rows) {
    const double I = INFINITY, dmin = 4.9406564584124654e-324, fmin = 1.4e-45;
    enum { N = 4, R = 8 };
    double x[R][N] = {
        {1, -I, 2, -I},         /* -inf gets weight 0 */
        {-I, -I, -I, -I},       /* only -inf: zeros */
        {1, NAN, 2, 3},         /* NaN: the row is NaN */
        {I, 0, I, -I},          /* +inf entries share the weight */
        {1e30, -1e30, 0, 1e30}, /* huge finite logits */
        {-1e30, -1e30, -1e30, -1e30},
        {dmin, 0, -dmin, 2 * dmin}, /* denormals: uniform */
        {fmin, 0, -fmin, 2 * fmin},
    };
    double want[R][N] = {
        {1 / (1 + exp(1.0)), 0, exp(1.0) / (1 + exp(1.0)), 0},
        {0, 0, 0, 0},
        {NAN, NAN, NAN, NAN},
        {.5, 0, .5, 0},
        {.5, 0, 0, .5},
        {.25, .25, .25, .25},
        {.25, .25, .25, .25},
        {.25, .25, .25, .25},
    };
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        tbuf xv = mk(dt, 2, (int64_t[]){R, N}, L_CONTIG, &(uint64_t){1}, 1);
        attn_view wv;
        attn_view_init(&wv, ATTN_F64, want, 2, (int64_t[]){R, N});
        for (int r = 0; r < R; ++r)
            for (int i = 0; i < N; ++i)
                tu_set(&xv.v, (int64_t[]){r, i}, x[r][i]);
        ck_assert_int_eq(attn_softmax(&xv.v, &xv.v), ATTN_OK);
        tu_check_close(&xv.v, &wv, RT(dt), 0, dtn(dt));
        tfree(&xv);
    }
}
END_TEST

/* A long f32 row stays within 1e-5 of the double reference (sums run in double). */
START_TEST(sm_f32_long_row) {
    int64_t shape[2] = {2, 100000};
    uint64_t seed = 5;
    tbuf x = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 8.0), want = mkwant(2, shape);
    ref_softmax(&x.v, &want.v);
    ck_assert_int_eq(attn_softmax(&x.v, &x.v), ATTN_OK);
    tu_check_close(&x.v, &want.v, 1e-5, 1e-9, "f32 long row");
    tfree(&x);
    tfree(&want);
}
END_TEST

/* The ViT seed's attention = softmax(scores), its own numbers, and PyTorch's softmax. */
START_TEST(sm_fixtures) {
    fx_file *fx = fx_load("vit_seed.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view s = fxv(fx, "scores"), a = fxv(fx, "attention");
    tbuf y = mkwant(3, s.shape);
    ck_assert_int_eq(attn_softmax(&s, &y.v), ATTN_OK);
    tu_check_close(&y.v, &a, 1e-12, 1e-14, "seed attention");
    tfree(&y);
    fx_free(fx);
    fx = fx_load("kernels_torch.txt");
    ck_assert_ptr_nonnull(fx);
    const char *in[2] = {"x", "masked"}, *out[2] = {"softmax", "softmax_masked"};
    for (int i = 0; i < 2; ++i) {
        attn_view x = fxv(fx, in[i]), want = fxv(fx, out[i]);
        tbuf yy = mkwant(2, x.shape);
        ck_assert_int_eq(attn_softmax(&x, &yy.v), ATTN_OK);
        tu_check_close(&yy.v, &want, 1e-12, 1e-14, out[i]);
        tfree(&yy);
    }
    fx_free(fx);
}
END_TEST

START_TEST(sm_errors) {
    float xf[24], yf[24];
    double yd[24];
    for (int i = 0; i < 24; ++i)
        xf[i] = (float)i, yf[i] = -1;
    attn_view x, y, yd64, y35, yb, ya, u8, bad;
    attn_view_init(&x, ATTN_F32, xf, 2, (int64_t[]){4, 6});
    attn_view_init(&y, ATTN_F32, yf, 2, (int64_t[]){4, 6});
    attn_view_init(&yd64, ATTN_F64, yd, 2, (int64_t[]){4, 6});
    attn_view_init(&y35, ATTN_F32, yf, 2, (int64_t[]){6, 4});
    attn_view_init_strided(&yb, ATTN_F32, yf, 2, (int64_t[]){4, 6}, (int64_t[]){0, 1});
    attn_view_init(&ya, ATTN_F32, xf + 1, 2, (int64_t[]){4, 5}); /* overlaps x, not x */
    attn_view_init(&u8, ATTN_U8, yf, 2, (int64_t[]){4, 6});
    bad = y;
    bad.ndim = 5;
    EXPECT(ATTN_EINVAL, attn_softmax(NULL, &y), &y);
    EXPECT(ATTN_EINVAL, attn_softmax(&x, NULL), &y);
    EXPECT(ATTN_EINVAL, attn_softmax(&x, &bad), &y);
    EXPECT(ATTN_EDTYPE, attn_softmax(&x, &yd64), &yd64);
    EXPECT(ATTN_EDTYPE, attn_softmax(&u8, &u8), &u8);
    EXPECT(ATTN_ESHAPE, attn_softmax(&x, &y35), &y35);
    EXPECT(ATTN_ESTRIDE, attn_softmax(&x, &yb), &yb);
    attn_view xa;
    attn_view_init(&xa, ATTN_F32, xf, 2, (int64_t[]){4, 5});
    EXPECT(ATTN_EALIAS, attn_softmax(&xa, &ya), &ya);
    attn_view xt; /* same memory as x, transposed: not the same view */
    attn_view_transpose(&x, 0, 1, &xt);
    attn_view_init(&ya, ATTN_F32, xf, 2, (int64_t[]){6, 4});
    EXPECT(ATTN_EALIAS, attn_softmax(&xt, &ya), &ya);
}
END_TEST

/* ======================================================================================
 * attn_softmax_backward
 * ====================================================================================== */

typedef struct sm_args {
    attn_view *x, *y;
} sm_args;
static attn_status sm_run(void *a) {
    sm_args *s = a;
    return attn_softmax(s->x, s->y);
}

START_TEST(smb_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t si = 0; si < NROW_SHAPES; ++si)
            for (int l = 0; l < NOUT_LAYS; ++l) {
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                const shp *s = &row_shapes[si];
                uint64_t seed = 77 + si * 3 + (uint64_t)l;
                lay ly = out_lays[l], ldy = out_lays[(l + 1) % NOUT_LAYS];
                tbuf y = mk(dt, s->nd, s->s, ly, &seed, 3.0);
                ck_assert_int_eq(attn_softmax(&y.v, &y.v), ATTN_OK);
                tbuf dy = mk(dt, s->nd, s->s, l == 1 ? L_BCAST : ldy, &seed, 1.0);
                tbuf dx = mk(dt, s->nd, s->s, out_lays[(l + 2) % NOUT_LAYS], &seed, 1.0);
                tbuf want = dup64(&dx.v);
                ref_softmax_backward(&y.v, &dy.v, &want.v);
                char what[96];
                snprintf(what, sizeof what, "softmax_backward %s nd=%d y=%s", dtn(dt), s->nd,
                         lay_name[ly]);
                ck_assert_int_eq(attn_softmax_backward(&y.v, &dy.v, &dx.v), ATTN_OK);
                tu_check_close(&dx.v, &want.v, RT(dt), AT(dt), what);
                tfree(&y);
                tfree(&dy);
                tfree(&dx);
                tfree(&want);
            }
}
END_TEST

START_TEST(smb_finite_diff) {
    for (size_t si = 0; si < 5; ++si) {
        const shp *s = &row_shapes[si];
        uint64_t seed = 300 + si;
        tbuf x = mk(ATTN_F64, s->nd, s->s, out_lays[si % NOUT_LAYS], &seed, 2.0);
        tbuf y = mkwant(s->nd, s->s), w = mk(ATTN_F64, s->nd, s->s, L_CONTIG, &seed, 1.0);
        tbuf g = mkwant(s->nd, s->s);
        sm_args a = {&x.v, &y.v};
        fdctx c = {sm_run, &a, &y.v, &w.v};
        ck_assert_int_eq(sm_run(&a), ATTN_OK);
        ck_assert_int_eq(attn_softmax_backward(&y.v, &w.v, &g.v), ATTN_OK);
        FD_OK(&c, &x.v, &g.v, "softmax dx");
        tfree(&x);
        tfree(&y);
        tfree(&w);
        tfree(&g);
    }
}
END_TEST

/* Two calls accumulate 2x; f32 agrees with f64 on the same (rounded) inputs. */
START_TEST(smb_accumulate_f32) {
    int64_t shape[3] = {2, 3, 9};
    uint64_t seed = 9;
    tbuf x = mk(ATTN_F32, 3, shape, L_CONTIG, &seed, 3),
         dy = mk(ATTN_F32, 3, shape, L_NEG, &seed, 1);
    tbuf dx = mkwant(3, shape), dx32 = mk(ATTN_F32, 3, shape, L_CONTIG, &seed, 0);
    ck_assert_int_eq(attn_softmax(&x.v, &x.v), ATTN_OK);
    tbuf y64 = dup64(&x.v), dy64 = dup64(&dy.v);
    ck_assert_int_eq(attn_softmax_backward(&y64.v, &dy64.v, &dx.v), ATTN_OK);
    tbuf once = dup64(&dx.v);
    ck_assert_int_eq(attn_softmax_backward(&y64.v, &dy64.v, &dx.v), ATTN_OK);
    vscale(&once.v, 2);
    tu_check_close(&dx.v, &once.v, 1e-15, 0, "accumulates");
    ck_assert_int_eq(attn_softmax_backward(&x.v, &dy.v, &dx32.v), ATTN_OK);
    vscale(&once.v, 0.5);
    tu_check_close(&dx32.v, &once.v, 1e-5, 1e-6, "f32 vs f64");
    tfree(&x);
    tfree(&dy);
    tfree(&dx);
    tfree(&dx32);
    tfree(&y64);
    tfree(&dy64);
    tfree(&once);
}
END_TEST

START_TEST(smb_fixture) {
    fx_file *fx = fx_load("kernels_torch.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view y = fxv(fx, "softmax"), w = fxv(fx, "w"), want = fxv(fx, "softmax_dx");
    tbuf dx = mkwant(2, y.shape);
    ck_assert_int_eq(attn_softmax_backward(&y, &w, &dx.v), ATTN_OK);
    tu_check_close(&dx.v, &want, 1e-12, 1e-14, "torch softmax grad");
    tfree(&dx);
    fx_free(fx);
}
END_TEST

START_TEST(smb_errors) {
    double yv[12], dyv[12], dxv[12];
    float dxf[12];
    for (int i = 0; i < 12; ++i)
        yv[i] = dyv[i] = 1, dxv[i] = 0;
    attn_view y, dy, dx, dx32, dx43, dxb, dxa;
    attn_view_init(&y, ATTN_F64, yv, 2, (int64_t[]){3, 4});
    attn_view_init(&dy, ATTN_F64, dyv, 2, (int64_t[]){3, 4});
    attn_view_init(&dx, ATTN_F64, dxv, 2, (int64_t[]){3, 4});
    attn_view_init(&dx32, ATTN_F32, dxf, 2, (int64_t[]){3, 4});
    attn_view_init(&dx43, ATTN_F64, dxv, 2, (int64_t[]){4, 3});
    attn_view_init_strided(&dxb, ATTN_F64, dxv, 2, (int64_t[]){3, 4}, (int64_t[]){0, 1});
    attn_view_init(&dxa, ATTN_F64, dyv, 2, (int64_t[]){3, 4});
    EXPECT(ATTN_EINVAL, attn_softmax_backward(NULL, &dy, &dx), &dx);
    EXPECT(ATTN_EINVAL, attn_softmax_backward(&y, NULL, &dx), &dx);
    EXPECT(ATTN_EINVAL, attn_softmax_backward(&y, &dy, NULL), &dx);
    EXPECT(ATTN_EDTYPE, attn_softmax_backward(&y, &dy, &dx32), &dx32);
    EXPECT(ATTN_ESHAPE, attn_softmax_backward(&y, &dy, &dx43), &dx43);
    EXPECT(ATTN_ESTRIDE, attn_softmax_backward(&y, &dy, &dxb), &dxb);
    EXPECT(ATTN_EALIAS, attn_softmax_backward(&y, &dy, &dxa), &dxa); /* dx == dy */
}
END_TEST

/* ======================================================================================
 * attn_layernorm
 * ====================================================================================== */

/* Leading shape of a row-kernel input (the mean/rstd shape); (1) for 1-D. */
static int stat_shape(const shp *s, int64_t *out) {
    if (s->nd == 1) {
        out[0] = 1;
        return 1;
    }
    for (int k = 0; k < s->nd - 1; ++k)
        out[k] = s->s[k];
    return s->nd - 1;
}

/* affine: bit 0 gamma, bit 1 beta. */
static void ln_case(attn_dtype dt, const shp *s, lay lx, lay ly, int affine, bool stats,
                    bool inplace) {
    uint64_t seed = 21 + lx * 7 + ly * 131 + (uint64_t)affine * 1009 + (uint64_t)s->nd;
    int64_t C = s->s[s->nd - 1], ss[ATTN_MAX_DIMS];
    int snd = stat_shape(s, ss);
    tbuf x = mk(dt, s->nd, s->s, lx, &seed, 3.0), y = mk(dt, s->nd, s->s, ly, &seed, 1.0);
    /* gamma contiguous with both affine parameters: the unit-stride row code */
    tbuf g = mk(dt, 1, &C, lx == L_NEG ? L_NEG : affine == 3 ? L_CONTIG : L_STRIDED, &seed, 1.5);
    tbuf b = mk(dt, 1, &C, L_CONTIG, &seed, 1.0);
    tbuf mean = mk(dt, snd, ss, ly == L_NEG ? L_NEG : L_STRIDED, &seed, 1.0);
    tbuf rstd = mk(dt, snd, ss, L_CONTIG, &seed, 1.0);
    tbuf want = mkwant(s->nd, s->s), wm = mkwant(snd, ss), wr = mkwant(snd, ss);
    const attn_view *gp = affine & 1 ? &g.v : NULL, *bp = affine & 2 ? &b.v : NULL;
    double eps = 1e-5;
    ref_layernorm(eps, &x.v, gp, bp, &want.v, &wm.v, &wr.v);
    attn_view *out = inplace ? &x.v : &y.v;
    char what[128];
    snprintf(what, sizeof what, "layernorm %s nd=%d x=%s y=%s affine=%d%s", dtn(dt), s->nd,
             lay_name[lx], lay_name[ly], affine, inplace ? " in-place" : "");
    attn_status st =
        attn_layernorm(eps, &x.v, gp, bp, out, stats ? &mean.v : NULL, stats ? &rstd.v : NULL);
    ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
    tu_check_close(out, &want.v, RT(dt), AT(dt), what);
    if (stats && tu_numel(&x.v) > 0) {
        tu_check_close(&mean.v, &wm.v, RT(dt), AT(dt), what);
        tu_check_close(&rstd.v, &wr.v, RT(dt), AT(dt), what);
    }
    tfree(&x);
    tfree(&y);
    tfree(&g);
    tfree(&b);
    tfree(&mean);
    tfree(&rstd);
    tfree(&want);
    tfree(&wm);
    tfree(&wr);
}

START_TEST(ln_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t si = 0; si < NROW_SHAPES; ++si)
            for (int lx = 0; lx < L_COUNT; ++lx)
                for (int affine = 0; affine < 4; ++affine) {
                    attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                    ln_case(dt, &row_shapes[si], lx, out_lays[(lx + affine) % NOUT_LAYS],
                            affine, affine != 1, false);
                    if (lx != L_BCAST)
                        ln_case(dt, &row_shapes[si], lx, lx, affine, affine == 3, true);
                }
}
END_TEST

/* The ViT seed's ln() (eps 1e-5, no affine): ln1 = ln(input), ln2 = ln(residual1), to
 * 1e-12 against the seed's own numbers; PyTorch's layer_norm with affine. */
START_TEST(ln_fixtures) {
    fx_file *fx = fx_load("vit_seed.txt");
    ck_assert_ptr_nonnull(fx);
    const char *in[2] = {"input", "residual1"}, *out[2] = {"ln1", "ln2"};
    for (int i = 0; i < 2; ++i) {
        attn_view x = fxv(fx, in[i]), want = fxv(fx, out[i]);
        tbuf y = mkwant(2, x.shape);
        ck_assert_int_eq(attn_layernorm(1e-5, &x, NULL, NULL, &y.v, NULL, NULL), ATTN_OK);
        tu_check_close(&y.v, &want, 1e-12, 1e-14, out[i]);
        tfree(&y);
    }
    fx_free(fx);
    fx = fx_load("kernels_torch.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view x = fxv(fx, "x"), g = fxv(fx, "gamma"), b = fxv(fx, "beta");
    attn_view want = fxv(fx, "layernorm");
    tbuf y = mkwant(2, x.shape);
    ck_assert_int_eq(attn_layernorm(1e-5, &x, &g, &b, &y.v, NULL, NULL), ATTN_OK);
    tu_check_close(&y.v, &want, 1e-12, 1e-14, "torch layer_norm");
    tfree(&y);
    fx_free(fx);
}
END_TEST

/* A constant row: y = beta, rstd = 1/sqrt(eps); with eps = 0, NaN (0/0) as in PyTorch. */
START_TEST(ln_constant_row) {
    double x[4] = {3, 3, 3, 3}, y[4], m[1], r[1], beta[4] = {1, 2, 3, 4};
    attn_view X, Y, M, R, B;
    attn_view_init(&X, ATTN_F64, x, 1, (int64_t[]){4});
    attn_view_init(&Y, ATTN_F64, y, 1, (int64_t[]){4});
    attn_view_init(&M, ATTN_F64, m, 1, (int64_t[]){1});
    attn_view_init(&R, ATTN_F64, r, 1, (int64_t[]){1});
    attn_view_init(&B, ATTN_F64, beta, 1, (int64_t[]){4});
    ck_assert_int_eq(attn_layernorm(1e-4, &X, NULL, &B, &Y, &M, &R), ATTN_OK);
    for (int i = 0; i < 4; ++i)
        ck_assert(y[i] == beta[i]);
    ck_assert(m[0] == 3 && fabs(r[0] - 100) < 1e-12);
    ck_assert_int_eq(attn_layernorm(0, &X, NULL, NULL, &Y, NULL, NULL), ATTN_OK);
    ck_assert(isnan(y[0]));
}
END_TEST

START_TEST(ln_errors) {
    double x[12], y[12], g[4], b[4], m[3], r[3], g5[5];
    float yf[12];
    for (int i = 0; i < 12; ++i)
        x[i] = i, y[i] = -1, yf[i] = -1;
    for (int i = 0; i < 4; ++i)
        g[i] = b[i] = 1;
    attn_view X, Y, G, Bv, M, R, Yf, G5, M4, Mb, Ya, Ma, X0, Y0, G2;
    attn_view_init(&X, ATTN_F64, x, 2, (int64_t[]){3, 4});
    attn_view_init(&Y, ATTN_F64, y, 2, (int64_t[]){3, 4});
    attn_view_init(&G, ATTN_F64, g, 1, (int64_t[]){4});
    attn_view_init(&Bv, ATTN_F64, b, 1, (int64_t[]){4});
    attn_view_init(&M, ATTN_F64, m, 1, (int64_t[]){3});
    attn_view_init(&R, ATTN_F64, r, 1, (int64_t[]){3});
    attn_view_init(&Yf, ATTN_F32, yf, 2, (int64_t[]){3, 4});
    attn_view_init(&G5, ATTN_F64, g5, 1, (int64_t[]){5});
    attn_view_init(&G2, ATTN_F64, g, 2, (int64_t[]){1, 4});
    attn_view_init(&M4, ATTN_F64, y, 1, (int64_t[]){4});
    attn_view_init_strided(&Mb, ATTN_F64, m, 1, (int64_t[]){3}, (int64_t[]){0});
    attn_view_init(&Ya, ATTN_F64, x + 2, 2, (int64_t[]){2, 4});
    attn_view_init(&Ma, ATTN_F64, y + 1, 1, (int64_t[]){3}); /* inside y */
    attn_view_init(&X0, ATTN_F64, x, 2, (int64_t[]){3, 0});
    attn_view_init(&Y0, ATTN_F64, y, 2, (int64_t[]){3, 0});
    attn_view Xs; /* x rows 0..1 only: Ya overlaps it without being the same view */
    attn_view_slice(&X, 0, 0, 2, 1, &Xs);
    EXPECT3(ATTN_EINVAL, attn_layernorm(1e-5, NULL, NULL, NULL, &Y, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_EINVAL, attn_layernorm(1e-5, &X, NULL, NULL, NULL, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_EINVAL, attn_layernorm(-1e-5, &X, NULL, NULL, &Y, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_EINVAL, attn_layernorm(NAN, &X, NULL, NULL, &Y, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_EINVAL, attn_layernorm(INFINITY, &X, NULL, NULL, &Y, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_EDTYPE, attn_layernorm(1e-5, &X, NULL, NULL, &Yf, &M, &R), &Yf, &M, &R);
    EXPECT3(ATTN_ESHAPE, attn_layernorm(1e-5, &X, &G5, NULL, &Y, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_ESHAPE, attn_layernorm(1e-5, &X, &G2, NULL, &Y, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_ESHAPE, attn_layernorm(1e-5, &X, NULL, &G5, &Y, &M, &R), &Y, &M, &R);
    EXPECT3(ATTN_ESHAPE, attn_layernorm(1e-5, &X, NULL, NULL, &Y, &M4, &R), &Y, &M4, &R);
    EXPECT3(ATTN_ESHAPE, attn_layernorm(1e-5, &X, NULL, NULL, &Y, &M, &M4), &Y, &M, &M4);
    EXPECT(ATTN_ESHAPE, attn_layernorm(1e-5, &X0, NULL, NULL, &Y0, NULL, NULL), &Y);
    EXPECT3(ATTN_ESTRIDE, attn_layernorm(1e-5, &X, NULL, NULL, &Y, &Mb, &R), &Y, &Mb, &R);
    EXPECT(ATTN_EALIAS, attn_layernorm(1e-5, &Xs, NULL, NULL, &Ya, NULL, NULL), &Ya);
    EXPECT3(ATTN_EALIAS, attn_layernorm(1e-5, &X, NULL, NULL, &Y, &Ma, &R), &Y, &Ma, &R);
    EXPECT3(ATTN_EALIAS, attn_layernorm(1e-5, &X, NULL, NULL, &Y, &M, &M), &Y, &M, NULL);
    EXPECT3(ATTN_EALIAS, attn_layernorm(1e-5, &X, &M4, NULL, &Y, &M, &R), &Y, &M,
            &R);  /* gamma in y */
    attn_view Rx; /* rstd inside x */
    attn_view_init(&Rx, ATTN_F64, x + 5, 1, (int64_t[]){3});
    EXPECT3(ATTN_EALIAS, attn_layernorm(1e-5, &X, NULL, NULL, &Y, &M, &Rx), &Y, &M, &Rx);
}
END_TEST

/* ======================================================================================
 * attn_layernorm_backward
 * ====================================================================================== */

typedef struct ln_args {
    double eps;
    attn_view *x, *g, *b, *y;
} ln_args;
static attn_status ln_run(void *a) {
    ln_args *s = a;
    return attn_layernorm(s->eps, s->x, s->g, s->b, s->y, NULL, NULL);
}

static void lnb_case(attn_dtype dt, const shp *s, lay lx, int affine, int grads) {
    uint64_t seed = 41 + lx * 7 + (uint64_t)affine * 131 + (uint64_t)s->nd * 17;
    int64_t C = s->s[s->nd - 1], ss[ATTN_MAX_DIMS];
    int snd = stat_shape(s, ss);
    double eps = 1e-3;
    /* x, dy, dx (and gamma) contiguous once per shape: the unit-stride row code */
    bool unit = lx == L_CONTIG && grads == 7;
    tbuf x = mk(dt, s->nd, s->s, lx, &seed, 2.0);
    tbuf dy = mk(dt, s->nd, s->s, unit ? L_CONTIG : L_NEG, &seed, 1.0);
    tbuf g = mk(dt, 1, &C, grads == 7 ? L_CONTIG : L_STRIDED, &seed, 1.5);
    tbuf dx = mk(dt, s->nd, s->s, unit ? L_CONTIG : out_lays[(lx + 1) % NOUT_LAYS], &seed, 1.0);
    tbuf dg = mk(dt, 1, &C, L_NEG, &seed, 1.0), db = mk(dt, 1, &C, L_CONTIG, &seed, 1.0);
    tbuf wdx = dup64(&dx.v), wdg = dup64(&dg.v), wdb = dup64(&db.v);
    /* the forward's statistics, in x's dtype */
    tbuf mean_t = mk(dt, snd, ss, L_CONTIG, &seed, 0),
         rstd_t = mk(dt, snd, ss, L_STRIDED, &seed, 0);
    const attn_view *gp = affine ? &g.v : NULL;
    tbuf yt = mk(dt, s->nd, s->s, L_CONTIG, &seed, 0);
    ck_assert_int_eq(attn_layernorm(eps, &x.v, gp, NULL, &yt.v, &mean_t.v, &rstd_t.v), ATTN_OK);
    ref_layernorm_backward(eps, &x.v, gp, &dy.v, grads & 1 ? &wdx.v : NULL,
                           grads & 2 ? &wdg.v : NULL, grads & 4 ? &wdb.v : NULL);
    char what[128];
    snprintf(what, sizeof what, "layernorm_backward %s nd=%d x=%s affine=%d grads=%d", dtn(dt),
             s->nd, lay_name[lx], affine, grads);
    attn_status st =
        attn_layernorm_backward(&x.v, gp, &mean_t.v, &rstd_t.v, &dy.v, grads & 1 ? &dx.v : NULL,
                                grads & 2 ? &dg.v : NULL, grads & 4 ? &db.v : NULL);
    ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
    tu_check_close(&dx.v, &wdx.v, RT(dt), AT(dt), what);
    tu_check_close(&dg.v, &wdg.v, RT(dt), AT(dt), what);
    tu_check_close(&db.v, &wdb.v, RT(dt), AT(dt), what);
    tbuf *all[] = {&x, &dy, &g, &dx, &dg, &db, &wdx, &wdg, &wdb, &mean_t, &rstd_t, &yt};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        tfree(all[i]);
}

START_TEST(lnb_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t si = 0; si < NROW_SHAPES; ++si)
            for (int lx = 0; lx < L_COUNT; ++lx)
                for (int affine = 0; affine < 2; ++affine) {
                    attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                    lnb_case(dt, &row_shapes[si], lx, affine, 7);
                    lnb_case(dt, &row_shapes[si], lx, affine, 1 + 2 * lx % 7);
                }
}
END_TEST

START_TEST(lnb_finite_diff) {
    for (size_t si = 0; si < 5; ++si)
        for (int affine = 0; affine < 2; ++affine) {
            const shp *s = &row_shapes[si];
            int64_t C = s->s[s->nd - 1], ss[ATTN_MAX_DIMS];
            int snd = stat_shape(s, ss);
            uint64_t seed = 500 + si;
            tbuf x = mk(ATTN_F64, s->nd, s->s, out_lays[si % NOUT_LAYS], &seed, 2.0);
            tbuf g = mk(ATTN_F64, 1, &C, L_STRIDED, &seed, 1.5),
                 b = mk(ATTN_F64, 1, &C, L_NEG, &seed, 1);
            tbuf y = mkwant(s->nd, s->s), w = mk(ATTN_F64, s->nd, s->s, L_CONTIG, &seed, 1.0);
            tbuf m = mkwant(snd, ss), r = mkwant(snd, ss);
            tbuf dx = mkwant(s->nd, s->s), dg = mkwant(1, &C), db = mkwant(1, &C);
            ln_args a = {1e-5, &x.v, affine ? &g.v : NULL, affine ? &b.v : NULL, &y.v};
            fdctx c = {ln_run, &a, &y.v, &w.v};
            ck_assert_int_eq(attn_layernorm(a.eps, a.x, a.g, a.b, a.y, &m.v, &r.v), ATTN_OK);
            ck_assert_int_eq(
                attn_layernorm_backward(&x.v, a.g, &m.v, &r.v, &w.v, &dx.v, &dg.v, &db.v),
                ATTN_OK);
            FD_OK(&c, &x.v, &dx.v, "layernorm dx");
            if (affine) {
                FD_OK(&c, &g.v, &dg.v, "layernorm dgamma");
                FD_OK(&c, &b.v, &db.v, "layernorm dbeta");
            }
            tbuf *all[] = {&x, &g, &b, &y, &w, &m, &r, &dx, &dg, &db};
            for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
                tfree(all[i]);
        }
}
END_TEST

/* Two calls accumulate 2x; f32 agrees with f64 on the same inputs; long f32 columns. */
START_TEST(lnb_accumulate_f32) {
    int64_t shape[2] = {4000, 6}, C = 6, ns = 4000;
    uint64_t seed = 7;
    tbuf x = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 2),
         dy = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 1);
    tbuf g = mk(ATTN_F32, 1, &C, L_CONTIG, &seed, 1);
    tbuf m = mk(ATTN_F32, 1, &ns, L_CONTIG, &seed, 0),
         r = mk(ATTN_F32, 1, &ns, L_CONTIG, &seed, 0);
    tbuf y = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 0);
    tbuf dx = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 0),
         dg = mk(ATTN_F32, 1, &C, L_CONTIG, &seed, 0);
    tbuf db = mk(ATTN_F32, 1, &C, L_CONTIG, &seed, 0);
    ck_assert_int_eq(attn_layernorm(1e-5, &x.v, &g.v, NULL, &y.v, &m.v, &r.v), ATTN_OK);
    /* f64 on the same values */
    tbuf x6 = dup64(&x.v), dy6 = dup64(&dy.v), g6 = dup64(&g.v), m6 = mkwant(1, &ns),
         r6 = mkwant(1, &ns);
    tbuf y6 = mkwant(2, shape), dx6 = mkwant(2, shape), dg6 = mkwant(1, &C),
         db6 = mkwant(1, &C);
    ck_assert_int_eq(attn_layernorm(1e-5, &x6.v, &g6.v, NULL, &y6.v, &m6.v, &r6.v), ATTN_OK);
    ck_assert_int_eq(
        attn_layernorm_backward(&x6.v, &g6.v, &m6.v, &r6.v, &dy6.v, &dx6.v, &dg6.v, &db6.v),
        ATTN_OK);
    ck_assert_int_eq(
        attn_layernorm_backward(&x.v, &g.v, &m.v, &r.v, &dy.v, &dx.v, &dg.v, &db.v), ATTN_OK);
    tu_check_close(&dx.v, &dx6.v, 1e-5, 1e-5, "f32 dx vs f64");
    tu_check_close(&dg.v, &dg6.v, 1e-5, 1e-4, "f32 dgamma vs f64 (4000 rows)");
    tu_check_close(&db.v, &db6.v, 1e-5, 1e-4, "f32 dbeta vs f64 (4000 rows)");
    tbuf o1 = dup64(&dx6.v), o2 = dup64(&dg6.v), o3 = dup64(&db6.v);
    ck_assert_int_eq(
        attn_layernorm_backward(&x6.v, &g6.v, &m6.v, &r6.v, &dy6.v, &dx6.v, &dg6.v, &db6.v),
        ATTN_OK);
    vscale(&o1.v, 2);
    vscale(&o2.v, 2);
    vscale(&o3.v, 2);
    tu_check_close(&dx6.v, &o1.v, 1e-15, 0, "dx accumulates");
    tu_check_close(&dg6.v, &o2.v, 1e-15, 0, "dgamma accumulates");
    tu_check_close(&db6.v, &o3.v, 1e-15, 0, "dbeta accumulates");
    tbuf *all[] = {&x,  &dy, &g,  &m,  &r,   &y,   &dx,  &dg, &db, &x6, &dy6,
                   &g6, &m6, &r6, &y6, &dx6, &dg6, &db6, &o1, &o2, &o3};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        tfree(all[i]);
}
END_TEST

START_TEST(lnb_fixture) {
    fx_file *fx = fx_load("kernels_torch.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view x = fxv(fx, "x"), g = fxv(fx, "gamma"), b = fxv(fx, "beta"), w = fxv(fx, "w");
    int64_t C = 7, R = 3;
    tbuf y = mkwant(2, x.shape), m = mkwant(1, &R), r = mkwant(1, &R);
    tbuf dx = mkwant(2, x.shape), dg = mkwant(1, &C), db = mkwant(1, &C);
    ck_assert_int_eq(attn_layernorm(1e-5, &x, &g, &b, &y.v, &m.v, &r.v), ATTN_OK);
    ck_assert_int_eq(attn_layernorm_backward(&x, &g, &m.v, &r.v, &w, &dx.v, &dg.v, &db.v),
                     ATTN_OK);
    attn_view wdx = fxv(fx, "layernorm_dx"), wdg = fxv(fx, "layernorm_dgamma"),
              wdb = fxv(fx, "layernorm_dbeta");
    tu_check_close(&dx.v, &wdx, 1e-11, 1e-13, "torch layer_norm dx");
    tu_check_close(&dg.v, &wdg, 1e-12, 1e-14, "torch layer_norm dgamma");
    tu_check_close(&db.v, &wdb, 1e-12, 1e-14, "torch layer_norm dbeta");
    tbuf *all[] = {&y, &m, &r, &dx, &dg, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        tfree(all[i]);
    fx_free(fx);
}
END_TEST

START_TEST(lnb_errors) {
    double x[12], dy[12], dx[12], g[4], dg[4], db[4], m[3], r[3];
    float dxf[12];
    for (int i = 0; i < 12; ++i)
        x[i] = i, dy[i] = 1, dx[i] = 0;
    for (int i = 0; i < 4; ++i)
        g[i] = 1, dg[i] = db[i] = 0;
    for (int i = 0; i < 3; ++i)
        m[i] = 0, r[i] = 1;
    attn_view X, DY, DX, G, DG, DB, M, R, DXf, M2, G3, DXb, DGa, DXa;
    attn_view_init(&X, ATTN_F64, x, 2, (int64_t[]){3, 4});
    attn_view_init(&DY, ATTN_F64, dy, 2, (int64_t[]){3, 4});
    attn_view_init(&DX, ATTN_F64, dx, 2, (int64_t[]){3, 4});
    attn_view_init(&G, ATTN_F64, g, 1, (int64_t[]){4});
    attn_view_init(&DG, ATTN_F64, dg, 1, (int64_t[]){4});
    attn_view_init(&DB, ATTN_F64, db, 1, (int64_t[]){4});
    attn_view_init(&M, ATTN_F64, m, 1, (int64_t[]){3});
    attn_view_init(&R, ATTN_F64, r, 1, (int64_t[]){3});
    attn_view_init(&DXf, ATTN_F32, dxf, 2, (int64_t[]){3, 4});
    attn_view_init(&M2, ATTN_F64, m, 1, (int64_t[]){2});
    attn_view_init(&G3, ATTN_F64, g, 1, (int64_t[]){3});
    attn_view_init_strided(&DXb, ATTN_F64, dx, 2, (int64_t[]){3, 4}, (int64_t[]){4, 0});
    attn_view_init(&DGa, ATTN_F64, dx + 2, 1, (int64_t[]){4}); /* inside dx */
    attn_view_init(&DXa, ATTN_F64, dy, 2, (int64_t[]){3, 4});
    EXPECT3(ATTN_EINVAL, attn_layernorm_backward(NULL, &G, &M, &R, &DY, &DX, &DG, &DB), &DX,
            &DG, &DB);
    EXPECT3(ATTN_EINVAL, attn_layernorm_backward(&X, &G, NULL, &R, &DY, &DX, &DG, &DB), &DX,
            &DG, &DB);
    EXPECT3(ATTN_EINVAL, attn_layernorm_backward(&X, &G, &M, NULL, &DY, &DX, &DG, &DB), &DX,
            &DG, &DB);
    EXPECT3(ATTN_EINVAL, attn_layernorm_backward(&X, &G, &M, &R, NULL, &DX, &DG, &DB), &DX, &DG,
            &DB);
    EXPECT3(ATTN_EDTYPE, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DXf, &DG, &DB), &DXf,
            &DG, &DB);
    EXPECT3(ATTN_ESHAPE, attn_layernorm_backward(&X, &G, &M2, &R, &DY, &DX, &DG, &DB), &DX, &DG,
            &DB);
    EXPECT3(ATTN_ESHAPE, attn_layernorm_backward(&X, &G3, &M, &R, &DY, &DX, &DG, &DB), &DX, &DG,
            &DB);
    EXPECT3(ATTN_ESHAPE, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DX, &G3, &DB), &DX, &G3,
            &DB);
    EXPECT3(ATTN_ESHAPE, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DX, &DG, &G3), &DX, &DG,
            &G3);
    EXPECT3(ATTN_ESTRIDE, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DXb, &DG, &DB), &DXb,
            &DG, &DB);
    EXPECT3(ATTN_EALIAS, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DXa, &DG, &DB), &DXa,
            &DG, &DB);
    EXPECT3(ATTN_EALIAS, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DX, &DGa, &DB), &DX,
            &DGa, &DB);
    EXPECT3(ATTN_EALIAS, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DX, &G, &DB), &DX, &G,
            &DB);
    EXPECT3(ATTN_EALIAS, attn_layernorm_backward(&X, &G, &M, &R, &DY, &DX, &DG, &DG), &DX, &DG,
            NULL);
}
END_TEST

/* ======================================================================================
 * attn_activation, attn_activation_backward, attn_gelu, attn_relu
 * ====================================================================================== */

static const attn_act acts[3] = {ATTN_ACT_GELU_TANH, ATTN_ACT_GELU_ERF, ATTN_ACT_RELU};
static const char *act_name[3] = {"gelu_tanh", "gelu_erf", "relu"};

/* y = f(x) through attn_activation, or through attn_gelu / attn_relu (via = 1). */
static attn_status act_call(attn_act act, int via, const attn_view *x, attn_view *y) {
    if (!via)
        return attn_activation(act, x, y);
    return act == ATTN_ACT_RELU ? attn_relu(x, y) : attn_gelu(act, x, y);
}

static void act_sweep(int via) {
    for (int d = 0; d < 2; ++d)
        for (int a = 0; a < 3; ++a)
            for (size_t si = 0; si < NROW_SHAPES; ++si)
                for (int lx = 0; lx < L_COUNT; ++lx)
                    for (int inplace = 0; inplace < 2 - (lx == L_BCAST); ++inplace) {
                        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                        const shp *s = &row_shapes[si];
                        uint64_t seed = 61 + (uint64_t)lx * 7 + si * 131 + (uint64_t)a;
                        tbuf x = mk(dt, s->nd, s->s, lx, &seed, 5.0);
                        tbuf y = mk(dt, s->nd, s->s, out_lays[(lx + a) % NOUT_LAYS], &seed, 1);
                        tbuf want = mkwant(s->nd, s->s);
                        ref_activation(acts[a], &x.v, &want.v);
                        attn_view *out = inplace ? &x.v : &y.v;
                        char what[96];
                        snprintf(what, sizeof what, "%s %s nd=%d x=%s%s", act_name[a], dtn(dt),
                                 s->nd, lay_name[lx], inplace ? " in-place" : "");
                        ck_assert_msg(act_call(acts[a], via, &x.v, out) == ATTN_OK, "%s", what);
                        tu_check_close(out, &want.v, RT(dt), AT(dt), what);
                        tfree(&x);
                        tfree(&y);
                        tfree(&want);
                    }
}

START_TEST(act_layouts) { act_sweep(0); }
END_TEST

/* Extreme arguments: large |x|, NaN, -0.0, denormals; and the dtype's own precision. */
START_TEST(act_special_values) {
    const double xs[] = {-30, -8, -5.5, -3,   -1e-3, -4.9406564584124654e-324, 0, 1e-300, 0.5,
                         3,   8,  30,   1e10, -1e10};
    enum { N = sizeof xs / sizeof *xs };
    for (int d = 0; d < 2; ++d)
        for (int a = 0; a < 3; ++a) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            tbuf x = mk(dt, 1, (int64_t[]){N}, L_CONTIG, &(uint64_t){1}, 0);
            tbuf want = mkwant(1, (int64_t[]){N});
            for (int i = 0; i < N; ++i)
                tu_set(&x.v, (int64_t[]){i}, xs[i]);
            ref_activation(acts[a], &x.v, &want.v);
            ck_assert_int_eq(attn_activation(acts[a], &x.v, &x.v), ATTN_OK);
            tu_check_close(&x.v, &want.v, RT(dt), AT(dt), act_name[a]);
            tfree(&x);
            tfree(&want);
        }
    double v[3] = {NAN, -0.0, -1};
    attn_view V;
    attn_view_init(&V, ATTN_F64, v, 1, (int64_t[]){3});
    ck_assert_int_eq(attn_relu(&V, &V), ATTN_OK);
    ck_assert(isnan(v[0]) && v[1] == 0 && signbit(v[1]) && v[2] == 0 && !signbit(v[2]));
    double u[2] = {NAN, NAN};
    attn_view U;
    attn_view_init(&U, ATTN_F64, u, 1, (int64_t[]){2});
    ck_assert_int_eq(attn_gelu(ATTN_ACT_GELU_TANH, &U, &U), ATTN_OK);
    ck_assert(isnan(u[0]) && isnan(u[1]));
}
END_TEST

/* The ViT seed's mlp_hidden = gelu_tanh(mlp_hidden_pre); PyTorch's gelu both ways. */
START_TEST(act_fixtures) {
    fx_file *fx = fx_load("vit_seed.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view pre = fxv(fx, "mlp_hidden_pre"), want = fxv(fx, "mlp_hidden");
    tbuf y = mkwant(2, pre.shape);
    ck_assert_int_eq(attn_gelu(ATTN_ACT_GELU_TANH, &pre, &y.v), ATTN_OK);
    tu_check_close(&y.v, &want, 1e-12, 1e-14, "seed gelu");
    tfree(&y);
    fx_free(fx);
    fx = fx_load("kernels_torch.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view x = fxv(fx, "x"), w = fxv(fx, "w");
    const char *nm[2] = {"gelu_tanh", "gelu_erf"}, *nd[2] = {"gelu_tanh_dx", "gelu_erf_dx"};
    for (int a = 0; a < 2; ++a) {
        attn_view wy = fxv(fx, nm[a]), wdx = fxv(fx, nd[a]);
        tbuf yy = mkwant(2, x.shape), dx = mkwant(2, x.shape);
        ck_assert_int_eq(attn_gelu(acts[a], &x, &yy.v), ATTN_OK);
        ck_assert_int_eq(attn_activation_backward(acts[a], &x, &w, &dx.v), ATTN_OK);
        tu_check_close(&yy.v, &wy, 1e-12, 1e-14, nm[a]);
        tu_check_close(&dx.v, &wdx, 1e-12, 1e-14, nd[a]);
        tfree(&yy);
        tfree(&dx);
    }
    fx_free(fx);
}
END_TEST

/* Statuses shared by attn_activation, attn_gelu and attn_relu (via 0, 1). */
static void act_errors_via(int via) {
    float x[8], y[8];
    double yd[8];
    for (int i = 0; i < 8; ++i)
        x[i] = (float)i - 4, y[i] = 9;
    attn_view X, Y, Yd, Y3, Yb, Ya, Xs;
    attn_view_init(&X, ATTN_F32, x, 1, (int64_t[]){8});
    attn_view_init(&Y, ATTN_F32, y, 1, (int64_t[]){8});
    attn_view_init(&Yd, ATTN_F64, yd, 1, (int64_t[]){8});
    attn_view_init(&Y3, ATTN_F32, y, 1, (int64_t[]){3});
    attn_view_init_strided(&Yb, ATTN_F32, y, 1, (int64_t[]){8}, (int64_t[]){0});
    attn_view_init(&Ya, ATTN_F32, x + 1, 1, (int64_t[]){7});
    attn_view_init(&Xs, ATTN_F32, x, 1, (int64_t[]){7});
    for (int a = 0; a < 3; ++a) {
        if (via && a == 2) {
            EXPECT(ATTN_EINVAL, attn_gelu(ATTN_ACT_RELU, &X, &Y), &Y);
            continue;
        }
        EXPECT(ATTN_EINVAL, act_call(acts[a], via, NULL, &Y), &Y);
        EXPECT(ATTN_EINVAL, act_call(acts[a], via, &X, NULL), &Y);
        EXPECT(ATTN_EDTYPE, act_call(acts[a], via, &X, &Yd), &Yd);
        EXPECT(ATTN_ESHAPE, act_call(acts[a], via, &X, &Y3), &Y);
        EXPECT(ATTN_ESTRIDE, act_call(acts[a], via, &X, &Yb), &Y);
        EXPECT(ATTN_EALIAS, act_call(acts[a], via, &Xs, &Ya), &Ya);
    }
    EXPECT(ATTN_EINVAL,
           via ? attn_gelu((attn_act)7, &X, &Y) : attn_activation((attn_act)7, &X, &Y), &Y);
    EXPECT(ATTN_EINVAL,
           via ? attn_gelu((attn_act)-1, &X, &Y) : attn_activation((attn_act)-1, &X, &Y), &Y);
}

START_TEST(act_errors) { act_errors_via(0); }
END_TEST

typedef struct act_args {
    attn_act act;
    attn_view *x, *y;
} act_args;
static attn_status act_run(void *a) {
    act_args *s = a;
    return attn_activation(s->act, s->x, s->y);
}

START_TEST(actb_layouts) {
    for (int d = 0; d < 2; ++d)
        for (int a = 0; a < 3; ++a)
            for (size_t si = 0; si < NROW_SHAPES; ++si)
                for (int lx = 0; lx < L_COUNT; ++lx) {
                    attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                    const shp *s = &row_shapes[si];
                    uint64_t seed = 71 + (uint64_t)lx * 7 + si * 131 + (uint64_t)a;
                    tbuf x = mk(dt, s->nd, s->s, lx, &seed, 5.0);
                    tbuf dy = mk(dt, s->nd, s->s, (lay)((lx + 1) % L_COUNT), &seed, 1);
                    tbuf dx = mk(dt, s->nd, s->s, out_lays[(lx + a) % NOUT_LAYS], &seed, 1);
                    tbuf want = dup64(&dx.v);
                    ref_activation_backward(acts[a], &x.v, &dy.v, &want.v);
                    char what[96];
                    snprintf(what, sizeof what, "%s backward %s nd=%d x=%s", act_name[a],
                             dtn(dt), s->nd, lay_name[lx]);
                    ck_assert_msg(attn_activation_backward(acts[a], &x.v, &dy.v, &dx.v) ==
                                      ATTN_OK,
                                  "%s", what);
                    tu_check_close(&dx.v, &want.v, RT(dt), AT(dt), what);
                    tfree(&x);
                    tfree(&dy);
                    tfree(&dx);
                    tfree(&want);
                }
}
END_TEST

START_TEST(actb_finite_diff) {
    for (int a = 0; a < 3; ++a)
        for (size_t si = 0; si < 5; ++si) {
            const shp *s = &row_shapes[si];
            uint64_t seed = 700 + si;
            tbuf x = mk(ATTN_F64, s->nd, s->s, out_lays[si % NOUT_LAYS], &seed, 4.0);
            tbuf y = mkwant(s->nd, s->s), w = mk(ATTN_F64, s->nd, s->s, L_CONTIG, &seed, 1.0);
            tbuf g = mkwant(s->nd, s->s);
            act_args args = {acts[a], &x.v, &y.v};
            fdctx c = {act_run, &args, &y.v, &w.v};
            ck_assert_int_eq(attn_activation_backward(acts[a], &x.v, &w.v, &g.v), ATTN_OK);
            FD_OK(&c, &x.v, &g.v, act_name[a]);
            tfree(&x);
            tfree(&y);
            tfree(&w);
            tfree(&g);
        }
}
END_TEST

START_TEST(actb_accumulate_f32) {
    int64_t shape[2] = {5, 40};
    for (int a = 0; a < 3; ++a) {
        uint64_t seed = 3 + (uint64_t)a;
        tbuf x = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 6),
             dy = mk(ATTN_F32, 2, shape, L_TRANS, &seed, 1);
        tbuf dx = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 0);
        tbuf x6 = dup64(&x.v), dy6 = dup64(&dy.v), dx6 = mkwant(2, shape);
        ck_assert_int_eq(attn_activation_backward(acts[a], &x6.v, &dy6.v, &dx6.v), ATTN_OK);
        ck_assert_int_eq(attn_activation_backward(acts[a], &x.v, &dy.v, &dx.v), ATTN_OK);
        tu_check_close(&dx.v, &dx6.v, 1e-5, 1e-6, "f32 vs f64");
        tbuf once = dup64(&dx6.v);
        vscale(&once.v, 2);
        ck_assert_int_eq(attn_activation_backward(acts[a], &x6.v, &dy6.v, &dx6.v), ATTN_OK);
        tu_check_close(&dx6.v, &once.v, 1e-15, 0, "accumulates");
        tfree(&x);
        tfree(&dy);
        tfree(&dx);
        tfree(&x6);
        tfree(&dy6);
        tfree(&dx6);
        tfree(&once);
    }
}
END_TEST

START_TEST(actb_errors) {
    double x[6] = {1, 2, 3, 4, 5, 6}, dy[6] = {1, 1, 1, 1, 1, 1}, dx[6] = {0};
    float dxf[6];
    attn_view X, DY, DX, DXf, DX5, DXb, DXa;
    attn_view_init(&X, ATTN_F64, x, 1, (int64_t[]){6});
    attn_view_init(&DY, ATTN_F64, dy, 1, (int64_t[]){6});
    attn_view_init(&DX, ATTN_F64, dx, 1, (int64_t[]){6});
    attn_view_init(&DXf, ATTN_F32, dxf, 1, (int64_t[]){6});
    attn_view_init(&DX5, ATTN_F64, dx, 1, (int64_t[]){5});
    attn_view_init_strided(&DXb, ATTN_F64, dx, 1, (int64_t[]){6}, (int64_t[]){0});
    attn_view_init(&DXa, ATTN_F64, x, 1, (int64_t[]){6});
    EXPECT(ATTN_EINVAL, attn_activation_backward((attn_act)3, &X, &DY, &DX), &DX);
    EXPECT(ATTN_EINVAL, attn_activation_backward(ATTN_ACT_RELU, NULL, &DY, &DX), &DX);
    EXPECT(ATTN_EINVAL, attn_activation_backward(ATTN_ACT_RELU, &X, NULL, &DX), &DX);
    EXPECT(ATTN_EINVAL, attn_activation_backward(ATTN_ACT_RELU, &X, &DY, NULL), &DX);
    EXPECT(ATTN_EDTYPE, attn_activation_backward(ATTN_ACT_RELU, &X, &DY, &DXf), &DXf);
    EXPECT(ATTN_ESHAPE, attn_activation_backward(ATTN_ACT_RELU, &X, &DY, &DX5), &DX);
    EXPECT(ATTN_ESTRIDE, attn_activation_backward(ATTN_ACT_RELU, &X, &DY, &DXb), &DX);
    EXPECT(ATTN_EALIAS, attn_activation_backward(ATTN_ACT_RELU, &X, &DY, &DXa), &DXa);
    attn_view DYa = DY; /* in-place backward (dx == dy) is not allowed */
    EXPECT(ATTN_EALIAS, attn_activation_backward(ATTN_ACT_GELU_ERF, &X, &DY, &DYa), &DY);
}
END_TEST

START_TEST(gelu_variants) {
    act_errors_via(1);
    /* attn_gelu is attn_activation restricted to the two GELUs: same bits */
    uint64_t seed = 99;
    tbuf x = mk(ATTN_F64, 2, (int64_t[]){3, 17}, L_STRIDED, &seed, 4);
    tbuf y1 = mkwant(2, x.v.shape), y2 = mkwant(2, x.v.shape);
    for (int a = 0; a < 2; ++a) {
        ck_assert_int_eq(attn_gelu(acts[a], &x.v, &y1.v), ATTN_OK);
        ck_assert_int_eq(attn_activation(acts[a], &x.v, &y2.v), ATTN_OK);
        ck_assert(memcmp(y1.mem, y2.mem, 51 * 8) == 0);
    }
    act_sweep(1);
    tfree(&x);
    tfree(&y1);
    tfree(&y2);
}
END_TEST

START_TEST(relu_basic) {
    double x[5] = {-2, -0.5, 0, 0.5, 2}, y[5];
    attn_view X, Y;
    attn_view_init(&X, ATTN_F64, x, 1, (int64_t[]){5});
    attn_view_init(&Y, ATTN_F64, y, 1, (int64_t[]){5});
    ck_assert_int_eq(attn_relu(&X, &Y), ATTN_OK);
    const double want[5] = {0, 0, 0, 0.5, 2};
    for (int i = 0; i < 5; ++i)
        ck_assert(y[i] == want[i]);
    /* derivative: 0 at x <= 0 (PyTorch's choice at 0), 1 above */
    double dy[5] = {1, 1, 1, 1, 1}, dx[5] = {0};
    attn_view DY, DX;
    attn_view_init(&DY, ATTN_F64, dy, 1, (int64_t[]){5});
    attn_view_init(&DX, ATTN_F64, dx, 1, (int64_t[]){5});
    ck_assert_int_eq(attn_activation_backward(ATTN_ACT_RELU, &X, &DY, &DX), ATTN_OK);
    const double wd[5] = {0, 0, 0, 1, 1};
    for (int i = 0; i < 5; ++i)
        ck_assert(dx[i] == wd[i]);
}
END_TEST

/* ======================================================================================
 * attn_add, attn_add_backward
 * ====================================================================================== */

/* x shapes with b shapes that broadcast to them (NumPy's rules). */
typedef struct addcase {
    shp x, b;
} addcase;
static const addcase add_cases[] = {
    {{3, {2, 3, 4}}, {3, {2, 3, 4}}}, /* residual */
    {{3, {2, 3, 4}}, {1, {4}}},       /* bias */
    {{3, {2, 3, 4}}, {3, {2, 1, 4}}}, /* per-batch shift */
    {{3, {2, 3, 4}}, {2, {3, 1}}},    /* per-position, broadcast along the row */
    {{2, {5, 6}}, {1, {1}}},          /* scalar */
    {{4, {2, 2, 3, 5}}, {3, {2, 1, 5}}},
    {{1, {7}}, {1, {7}}},
    {{2, {0, 3}}, {1, {3}}},
    {{2, {300, 260}}, {1, {260}}}, /* > one column chunk */
};
#define NADD (sizeof add_cases / sizeof *add_cases)

START_TEST(add_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t ci = 0; ci < NADD; ++ci)
            for (int lx = 0; lx < L_COUNT; ++lx)
                for (int mode = 0; mode < 3; ++mode) { /* y separate, y = x, y = b */
                    attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                    const addcase *c = &add_cases[ci];
                    bool same = c->b.nd == c->x.nd && !memcmp(c->b.s, c->x.s, sizeof c->x.s);
                    if ((mode == 1 && lx == L_BCAST) || (mode == 2 && !same))
                        continue;
                    uint64_t seed = 81 + (uint64_t)lx * 7 + ci * 131 + (uint64_t)mode;
                    lay lb =
                        mode == 2 ? out_lays[(lx + 1) % NOUT_LAYS] : (lay)((lx + 2) % L_COUNT);
                    tbuf x = mk(dt, c->x.nd, c->x.s, lx, &seed, 2);
                    tbuf b = mk(dt, c->b.nd, c->b.s, lb, &seed, 2);
                    tbuf y = mk(dt, c->x.nd, c->x.s, out_lays[(lx + 3) % NOUT_LAYS], &seed, 1);
                    tbuf want = mkwant(c->x.nd, c->x.s);
                    ref_add(&x.v, &b.v, &want.v);
                    attn_view *out = mode == 0 ? &y.v : mode == 1 ? &x.v : &b.v;
                    char what[96];
                    snprintf(what, sizeof what, "add %s case %zu x=%s b=%s mode %d", dtn(dt),
                             ci, lay_name[lx], lay_name[lb], mode);
                    attn_status st = attn_add(&x.v, &b.v, out);
                    ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
                    tu_check_close(out, &want.v, RT(dt), AT(dt), what);
                    tfree(&x);
                    tfree(&b);
                    tfree(&y);
                    tfree(&want);
                }
}
END_TEST

START_TEST(add_errors) {
    float x[12], b[12], y[12];
    double yd[12];
    for (int i = 0; i < 12; ++i)
        x[i] = b[i] = 1, y[i] = 5;
    attn_view X, B, Y, Yd, B5, Y43, Yb, Ya, Xs, Bbig;
    attn_view_init(&X, ATTN_F32, x, 2, (int64_t[]){3, 4});
    attn_view_init(&B, ATTN_F32, b, 1, (int64_t[]){4});
    attn_view_init(&Y, ATTN_F32, y, 2, (int64_t[]){3, 4});
    attn_view_init(&Yd, ATTN_F64, yd, 2, (int64_t[]){3, 4});
    attn_view_init(&B5, ATTN_F32, b, 1, (int64_t[]){5});
    attn_view_init(&Y43, ATTN_F32, y, 2, (int64_t[]){4, 3});
    attn_view_init_strided(&Yb, ATTN_F32, y, 2, (int64_t[]){3, 4}, (int64_t[]){0, 1});
    attn_view_init(&Ya, ATTN_F32, x + 4, 2, (int64_t[]){2, 4});
    attn_view_init(&Xs, ATTN_F32, x, 2, (int64_t[]){2, 4});
    attn_view_init(&Bbig, ATTN_F32, b, 3, (int64_t[]){1, 3, 4});
    EXPECT(ATTN_EINVAL, attn_add(NULL, &B, &Y), &Y);
    EXPECT(ATTN_EINVAL, attn_add(&X, NULL, &Y), &Y);
    EXPECT(ATTN_EINVAL, attn_add(&X, &B, NULL), &Y);
    EXPECT(ATTN_EDTYPE, attn_add(&X, &B, &Yd), &Yd);
    EXPECT(ATTN_ESHAPE, attn_add(&X, &B5, &Y), &Y);
    EXPECT(ATTN_ESHAPE, attn_add(&X, &B, &Y43), &Y);
    EXPECT(ATTN_ESHAPE, attn_add(&X, &Bbig, &Y), &Y); /* b has more dims than x */
    EXPECT(ATTN_ESTRIDE, attn_add(&X, &B, &Yb), &Y);
    EXPECT(ATTN_EALIAS, attn_add(&Xs, &B, &Ya), &Ya); /* overlaps x, not x itself */
    attn_view Bv; /* y overlapping a broadcast b is not "y = b" */
    attn_view_init(&Bv, ATTN_F32, y, 1, (int64_t[]){4});
    EXPECT(ATTN_EALIAS, attn_add(&X, &Bv, &Y), &Y);
    attn_view Bt; /* b of x's shape but other strides: y = b's memory, not b's view */
    attn_view_init_strided(&Bt, ATTN_F32, b, 2, (int64_t[]){3, 4}, (int64_t[]){1, 3});
    attn_view Yt;
    attn_view_init(&Yt, ATTN_F32, b, 2, (int64_t[]){3, 4});
    EXPECT(ATTN_EALIAS, attn_add(&X, &Bt, &Yt), &Yt);
}
END_TEST

typedef struct add_args {
    attn_view *x, *b, *y;
} add_args;
static attn_status add_run(void *a) {
    add_args *s = a;
    return attn_add(s->x, s->b, s->y);
}

START_TEST(addb_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t ci = 0; ci < NADD; ++ci)
            for (int l = 0; l < NOUT_LAYS; ++l)
                for (int which = 1; which < 4; ++which) { /* bit 0 dx, bit 1 db */
                    attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                    const addcase *c = &add_cases[ci];
                    uint64_t seed = 91 + (uint64_t)l * 7 + ci * 131 + (uint64_t)which;
                    tbuf dy = mk(dt, c->x.nd, c->x.s, (lay)((l + 1) % L_COUNT), &seed, 1);
                    tbuf dx = mk(dt, c->x.nd, c->x.s, out_lays[l], &seed, 1);
                    tbuf db = mk(dt, c->b.nd, c->b.s, out_lays[(l + 2) % NOUT_LAYS], &seed, 1);
                    tbuf wdx = dup64(&dx.v), wdb = dup64(&db.v);
                    ref_add_backward(&dy.v, which & 1 ? &wdx.v : NULL,
                                     which & 2 ? &wdb.v : NULL);
                    char what[96];
                    snprintf(what, sizeof what, "add_backward %s case %zu lay %d which %d",
                             dtn(dt), ci, l, which);
                    ck_assert_int_eq(attn_add_backward(&dy.v, which & 1 ? &dx.v : NULL,
                                                       which & 2 ? &db.v : NULL),
                                     ATTN_OK);
                    tu_check_close(&dx.v, &wdx.v, RT(dt), AT(dt), what);
                    tu_check_close(&db.v, &wdb.v, RT(dt), dt == ATTN_F64 ? 1e-12 : 1e-5, what);
                    tfree(&dy);
                    tfree(&dx);
                    tfree(&db);
                    tfree(&wdx);
                    tfree(&wdb);
                }
}
END_TEST

START_TEST(addb_finite_diff) {
    for (size_t ci = 0; ci < 7; ++ci) {
        const addcase *c = &add_cases[ci];
        uint64_t seed = 900 + ci;
        tbuf x = mk(ATTN_F64, c->x.nd, c->x.s, L_TRANS, &seed, 1);
        tbuf b = mk(ATTN_F64, c->b.nd, c->b.s, L_NEG, &seed, 1);
        tbuf y = mkwant(c->x.nd, c->x.s), w = mk(ATTN_F64, c->x.nd, c->x.s, L_CONTIG, &seed, 1);
        tbuf dx = mkwant(c->x.nd, c->x.s), db = mkwant(c->b.nd, c->b.s);
        add_args a = {&x.v, &b.v, &y.v};
        fdctx fc = {add_run, &a, &y.v, &w.v};
        ck_assert_int_eq(attn_add_backward(&w.v, &dx.v, &db.v), ATTN_OK);
        FD_OK(&fc, &x.v, &dx.v, "add dx");
        FD_OK(&fc, &b.v, &db.v, "add db");
        tfree(&x);
        tfree(&b);
        tfree(&y);
        tfree(&w);
        tfree(&dx);
        tfree(&db);
    }
}
END_TEST

/* Accumulation, and an f32 bias gradient over 100000 rows kept at double accuracy. */
START_TEST(addb_accumulate_f32) {
    int64_t shape[2] = {100000, 3}, C = 3;
    uint64_t seed = 4;
    tbuf dy = mk(ATTN_F32, 2, shape, L_CONTIG, &seed, 1),
         db = mk(ATTN_F32, 1, &C, L_CONTIG, &seed, 0);
    tbuf wdb = mkwant(1, &C);
    ref_add_backward(&dy.v, NULL, &wdb.v);
    ck_assert_int_eq(attn_add_backward(&dy.v, NULL, &db.v), ATTN_OK);
    tu_check_close(&db.v, &wdb.v, 1e-6, 1e-6, "f32 sum of 100000 rows");
    ck_assert_int_eq(attn_add_backward(&dy.v, NULL, &db.v), ATTN_OK);
    vscale(&wdb.v, 2);
    tu_check_close(&db.v, &wdb.v, 1e-6, 1e-6, "accumulates");
    tbuf dx = mkwant(2, shape), dy6 = dup64(&dy.v);
    ck_assert_int_eq(attn_add_backward(&dy6.v, &dx.v, NULL), ATTN_OK);
    ck_assert_int_eq(attn_add_backward(&dy6.v, &dx.v, NULL), ATTN_OK);
    vscale(&dy6.v, 2);
    tu_check_close(&dx.v, &dy6.v, 0, 0, "dx accumulates");
    tfree(&dy);
    tfree(&db);
    tfree(&wdb);
    tfree(&dx);
    tfree(&dy6);
}
END_TEST

START_TEST(addb_errors) {
    double dy[12], dx[12], db[5] = {0};
    float dbf[4] = {0};
    for (int i = 0; i < 12; ++i)
        dy[i] = 1, dx[i] = 0;
    attn_view DY, DX, DB, DBf, DB5, DX43, DXb, DBb, DBa, DXa;
    attn_view_init(&DY, ATTN_F64, dy, 2, (int64_t[]){3, 4});
    attn_view_init(&DX, ATTN_F64, dx, 2, (int64_t[]){3, 4});
    attn_view_init(&DB, ATTN_F64, db, 1, (int64_t[]){4});
    attn_view_init(&DBf, ATTN_F32, dbf, 1, (int64_t[]){4});
    attn_view_init(&DB5, ATTN_F64, db, 1, (int64_t[]){5});
    attn_view_init(&DX43, ATTN_F64, dx, 2, (int64_t[]){4, 3});
    attn_view_init_strided(&DXb, ATTN_F64, dx, 2, (int64_t[]){3, 4}, (int64_t[]){0, 1});
    attn_view_init_strided(&DBb, ATTN_F64, db, 2, (int64_t[]){3, 4}, (int64_t[]){0, 1});
    attn_view_init(&DBa, ATTN_F64, dx + 1, 1, (int64_t[]){4}); /* inside dx */
    attn_view_init(&DXa, ATTN_F64, dy, 2, (int64_t[]){3, 4});
    EXPECT3(ATTN_EINVAL, attn_add_backward(NULL, &DX, &DB), &DX, &DB, NULL);
    EXPECT3(ATTN_EDTYPE, attn_add_backward(&DY, &DX, &DBf), &DX, &DBf, NULL);
    EXPECT3(ATTN_ESHAPE, attn_add_backward(&DY, &DX, &DB5), &DX, &DB5, NULL);
    EXPECT3(ATTN_ESHAPE, attn_add_backward(&DY, &DX43, &DB), &DX, &DB, NULL);
    EXPECT3(ATTN_ESTRIDE, attn_add_backward(&DY, &DXb, &DB), &DX, &DB, NULL);
    EXPECT3(ATTN_ESTRIDE, attn_add_backward(&DY, &DX, &DBb), &DX, &DB, NULL);
    EXPECT3(ATTN_EALIAS, attn_add_backward(&DY, &DXa, &DB), &DY, &DB, NULL);
    EXPECT3(ATTN_EALIAS, attn_add_backward(&DY, &DX, &DBa), &DX, &DB, NULL);
    ck_assert_int_eq(attn_add_backward(&DY, NULL, NULL), ATTN_OK);
}
END_TEST

/* ======================================================================================
 * attn_linear, attn_linear_backward
 * ====================================================================================== */

enum { IN = 5, OUT = 3 };
/* x shapes (last dim In); the leading dims are y's too */
static const shp lin_shapes[] = {
    {1, {IN}}, {2, {4, IN}}, {3, {2, 3, IN}}, {4, {2, 2, 3, IN}}, {2, {0, IN}}, {3, {2, 1, IN}},
};
#define NLIN (sizeof lin_shapes / sizeof *lin_shapes)
static const lay w_lays[] = {L_CONTIG, L_TRANS, L_STRIDED, L_NEG};

static shp with_last(const shp *s, int64_t n) {
    shp o = *s;
    o.s[o.nd - 1] = n;
    return o;
}

START_TEST(lin_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t si = 0; si < NLIN; ++si)
            for (int lx = 0; lx < L_COUNT; ++lx)
                for (int lw = 0; lw < 4; ++lw)
                    for (int bias = 0; bias < 2; ++bias) {
                        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                        shp xs = lin_shapes[si], ys = with_last(&xs, OUT);
                        uint64_t seed = 101 + (uint64_t)lx * 7 + si * 131 + (uint64_t)lw * 3 +
                                        (uint64_t)bias;
                        tbuf x = mk(dt, xs.nd, xs.s, lx, &seed, 1);
                        tbuf w = mk(dt, 2, (int64_t[]){IN, OUT}, w_lays[lw], &seed, 1);
                        tbuf b = mk(dt, 1, (int64_t[]){OUT}, (lay)(lw % 2 ? L_NEG : L_CONTIG),
                                    &seed, 1);
                        tbuf y = mk(dt, ys.nd, ys.s, out_lays[(lx + lw) % NOUT_LAYS], &seed, 1);
                        tbuf want = mkwant(ys.nd, ys.s);
                        const attn_view *bp = bias ? &b.v : NULL;
                        ref_linear(&x.v, &w.v, bp, &want.v);
                        char what[128];
                        snprintf(what, sizeof what, "linear %s nd=%d x=%s w=%s bias=%d",
                                 dtn(dt), xs.nd, lay_name[lx], lay_name[w_lays[lw]], bias);
                        size_t ws = attn_linear_workspace_size(&x.v, &w.v, &y.v);
                        void *work = ws ? malloc(ws) : NULL;
                        attn_status st = attn_linear(&x.v, &w.v, bp, &y.v, work, ws);
                        ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
                        tu_check_close(&y.v, &want.v, RT(dt), AT(dt), what);
                        free(work);
                        tfree(&x);
                        tfree(&w);
                        tfree(&b);
                        tfree(&y);
                        tfree(&want);
                    }
}
END_TEST

/* PyTorch's F.linear with its (out, in) weight, used through a transposed view. */
START_TEST(lin_fixture) {
    fx_file *fx = fx_load("kernels_torch.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view x = fxv(fx, "x"), wt = fxv(fx, "lin_w_out_in"), b = fxv(fx, "lin_b");
    attn_view up = fxv(fx, "lin_upstream"), want = fxv(fx, "linear");
    attn_view w, dwt_want = fxv(fx, "linear_dw_out_in");
    attn_view_transpose(&wt, 0, 1, &w); /* (7, 5) */
    tbuf y = mkwant(2, want.shape), dx = mkwant(2, x.shape), dwt = mkwant(2, wt.shape);
    tbuf db = mkwant(1, b.shape);
    attn_view dw;
    attn_view_transpose(&dwt.v, 0, 1, &dw);
    ck_assert_int_eq(attn_linear(&x, &w, &b, &y.v, NULL, 0), ATTN_OK);
    tu_check_close(&y.v, &want, 1e-12, 1e-14, "torch linear");
    ck_assert_int_eq(attn_linear_backward(&x, &w, &up, &dx.v, &dw, &db.v, NULL, 0), ATTN_OK);
    attn_view wdx = fxv(fx, "linear_dx"), wdb = fxv(fx, "linear_db");
    tu_check_close(&dx.v, &wdx, 1e-12, 1e-14, "torch linear dx");
    tu_check_close(&dwt.v, &dwt_want, 1e-12, 1e-14, "torch linear dW");
    tu_check_close(&db.v, &wdb, 1e-12, 1e-14, "torch linear db");
    tfree(&y);
    tfree(&dx);
    tfree(&dwt);
    tfree(&db);
    fx_free(fx);
}
END_TEST

START_TEST(lin_errors) {
    float x[40], w[40], b[12], y[40]; /* b holds Yw (4, 3) below */
    double yd[40];
    for (int i = 0; i < 40; ++i)
        x[i] = w[i] = 1, y[i] = 3;
    for (int i = 0; i < 12; ++i)
        b[i] = 1;
    attn_view X, W, B, Y, Yd, W3, Y4, B4, B2, Yb, Ya, Yw, X3, Ws;
    attn_view_init(&X, ATTN_F32, x, 2, (int64_t[]){4, 5});
    attn_view_init(&W, ATTN_F32, w, 2, (int64_t[]){5, 3});
    attn_view_init(&B, ATTN_F32, b, 1, (int64_t[]){3});
    attn_view_init(&Y, ATTN_F32, y, 2, (int64_t[]){4, 3});
    attn_view_init(&Yd, ATTN_F64, yd, 2, (int64_t[]){4, 3});
    attn_view_init(&W3, ATTN_F32, w, 3, (int64_t[]){1, 5, 3});
    attn_view_init(&Y4, ATTN_F32, y, 2, (int64_t[]){4, 4});
    attn_view_init(&B4, ATTN_F32, b, 1, (int64_t[]){4});
    attn_view_init(&B2, ATTN_F32, b, 2, (int64_t[]){1, 3});
    attn_view_init_strided(&Yb, ATTN_F32, y, 2, (int64_t[]){4, 3}, (int64_t[]){0, 1});
    attn_view_init(&Ya, ATTN_F32, x + 8, 2, (int64_t[]){4, 3});
    attn_view_init(&Yw, ATTN_F32, b, 2, (int64_t[]){4, 3}); /* overlaps b */
    attn_view_init(&X3, ATTN_F32, x, 3, (int64_t[]){2, 2, 5});
    EXPECT(ATTN_EINVAL, attn_linear(NULL, &W, &B, &Y, NULL, 0), &Y);
    EXPECT(ATTN_EINVAL, attn_linear(&X, NULL, &B, &Y, NULL, 0), &Y);
    EXPECT(ATTN_EINVAL, attn_linear(&X, &W, &B, NULL, NULL, 0), &Y);
    EXPECT(ATTN_EDTYPE, attn_linear(&X, &W, &B, &Yd, NULL, 0), &Yd);
    EXPECT(ATTN_ESHAPE, attn_linear(&X, &W3, &B, &Y, NULL, 0), &Y);
    EXPECT(ATTN_ESHAPE, attn_linear(&X, &W, &B, &Y4, NULL, 0), &Y);
    EXPECT(ATTN_ESHAPE, attn_linear(&X, &W, &B4, &Y, NULL, 0), &Y);
    EXPECT(ATTN_ESHAPE, attn_linear(&X, &W, &B2, &Y, NULL, 0), &Y);
    EXPECT(ATTN_ESHAPE, attn_linear(&X3, &W, &B, &Y, NULL, 0), &Y); /* leading dims differ */
    EXPECT(ATTN_ESTRIDE, attn_linear(&X, &W, &B, &Yb, NULL, 0), &Y);
    EXPECT(ATTN_EALIAS, attn_linear(&X, &W, &B, &Ya, NULL, 0), &Ya);
    EXPECT(ATTN_EALIAS, attn_linear(&X, &W, &B, &Yw, NULL, 0), &Yw);
    /* In beyond INT_MAX (a broadcast x and w describe it without memory) */
    attn_view Xh, Wh;
    int64_t big = INT64_C(1) << 31;
    attn_view_init_strided(&Xh, ATTN_F32, x, 2, (int64_t[]){4, big}, (int64_t[]){0, 0});
    attn_view_init_strided(&Wh, ATTN_F32, w, 2, (int64_t[]){big, 3}, (int64_t[]){0, 1});
    EXPECT(ATTN_ERANGE, attn_linear(&Xh, &Wh, &B, &Y, NULL, 0), &Y);
    /* a packed (non-unit-stride) weight: one byte short of the workspace */
    attn_view_init_strided(&Ws, ATTN_F32, w, 2, (int64_t[]){5, 3}, (int64_t[]){6, 2});
    size_t ws = attn_linear_workspace_size(&X, &Ws, &Y);
    ck_assert_uint_gt(ws, 0);
    char *work = malloc(ws);
    EXPECT(ATTN_EWORKSPACE, attn_linear(&X, &Ws, &B, &Y, work, ws - 1), &Y);
    EXPECT(ATTN_EWORKSPACE, attn_linear(&X, &Ws, &B, &Y, NULL, ws), &Y);
    ck_assert_int_eq(attn_linear(&X, &Ws, &B, &Y, work, ws), ATTN_OK);
    for (int i = 0; i < 12; ++i)
        ck_assert(y[i] == 6); /* 5 ones + bias 1 */
    free(work);
    ck_assert_uint_eq(attn_linear_workspace_size(&X, &W, &Y), 0);
    ck_assert_uint_eq(attn_linear_workspace_size(&X, &W, &Y4), 0); /* invalid -> 0 */
}
END_TEST

typedef struct lin_args {
    attn_view *x, *w, *b, *y;
} lin_args;
static attn_status lin_run(void *a) {
    lin_args *s = a;
    return attn_linear(s->x, s->w, s->b, s->y, NULL, 0);
}

START_TEST(linb_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t si = 0; si < NLIN; ++si)
            for (int lx = 0; lx < L_COUNT; ++lx)
                for (int lw = 0; lw < 4; ++lw)
                    for (int which = 1; which < 8; which += 3) { /* 1, 4, 7: dx, db, all */
                        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                        shp xs = lin_shapes[si], ys = with_last(&xs, OUT);
                        uint64_t seed = 111 + (uint64_t)lx * 7 + si * 131 + (uint64_t)lw * 3;
                        int wh = which == 4 ? 6 : which; /* 6: dW and db */
                        tbuf x = mk(dt, xs.nd, xs.s, lx, &seed, 1);
                        tbuf w = mk(dt, 2, (int64_t[]){IN, OUT}, w_lays[lw], &seed, 1);
                        tbuf dy = mk(dt, ys.nd, ys.s, (lay)((lx + lw + 1) % L_COUNT), &seed, 1);
                        tbuf dx = mk(dt, xs.nd, xs.s, out_lays[(lx + 1) % NOUT_LAYS], &seed, 1);
                        tbuf dw = mk(dt, 2, (int64_t[]){IN, OUT},
                                     out_lays[(lw + 1) % NOUT_LAYS], &seed, 1);
                        tbuf db = mk(dt, 1, (int64_t[]){OUT}, L_STRIDED, &seed, 1);
                        tbuf wdx = dup64(&dx.v), wdw = dup64(&dw.v), wdb = dup64(&db.v);
                        attn_view *pdx = wh & 1 ? &dx.v : NULL, *pdw = wh & 2 ? &dw.v : NULL,
                                  *pdb = wh & 4 ? &db.v : NULL;
                        ref_linear_backward(&x.v, &w.v, &dy.v, pdx ? &wdx.v : NULL,
                                            pdw ? &wdw.v : NULL, pdb ? &wdb.v : NULL);
                        char what[128];
                        snprintf(what, sizeof what,
                                 "linear_backward %s nd=%d x=%s w=%s grads=%d", dtn(dt), xs.nd,
                                 lay_name[lx], lay_name[w_lays[lw]], wh);
                        size_t ws =
                            attn_linear_backward_workspace_size(&x.v, &w.v, &dy.v, pdx, pdw);
                        void *work = ws ? malloc(ws) : NULL;
                        attn_status st =
                            attn_linear_backward(&x.v, &w.v, &dy.v, pdx, pdw, pdb, work, ws);
                        ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
                        tu_check_close(&dx.v, &wdx.v, RT(dt), AT(dt), what);
                        tu_check_close(&dw.v, &wdw.v, RT(dt), AT(dt), what);
                        tu_check_close(&db.v, &wdb.v, RT(dt), AT(dt), what);
                        free(work);
                        tbuf *all[] = {&x, &w, &dy, &dx, &dw, &db, &wdx, &wdw, &wdb};
                        for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
                            tfree(all[i]);
                    }
}
END_TEST

START_TEST(linb_finite_diff) {
    for (size_t si = 0; si < 4; ++si) {
        shp xs = lin_shapes[si], ys = with_last(&xs, OUT);
        uint64_t seed = 1100 + si;
        lay lx = si == 2 ? L_TRANS : L_CONTIG; /* TRANS: dW by one GEMM per matrix */
        tbuf x = mk(ATTN_F64, xs.nd, xs.s, lx, &seed, 1);
        tbuf w = mk(ATTN_F64, 2, (int64_t[]){IN, OUT}, L_TRANS, &seed, 1);
        tbuf b = mk(ATTN_F64, 1, (int64_t[]){OUT}, L_CONTIG, &seed, 1);
        tbuf y = mkwant(ys.nd, ys.s), wt = mk(ATTN_F64, ys.nd, ys.s, L_CONTIG, &seed, 1);
        tbuf dx = mkwant(xs.nd, xs.s), dw = mkwant(2, (int64_t[]){IN, OUT});
        tbuf db = mkwant(1, (int64_t[]){OUT});
        lin_args a = {&x.v, &w.v, &b.v, &y.v};
        fdctx c = {lin_run, &a, &y.v, &wt.v};
        ck_assert_int_eq(attn_linear_backward(&x.v, &w.v, &wt.v, &dx.v, &dw.v, &db.v, NULL, 0),
                         ATTN_OK);
        FD_OK(&c, &x.v, &dx.v, "linear dx");
        FD_OK(&c, &w.v, &dw.v, "linear dW");
        FD_OK(&c, &b.v, &db.v, "linear db");
        tbuf *all[] = {&x, &w, &b, &y, &wt, &dx, &dw, &db};
        for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
            tfree(all[i]);
    }
}
END_TEST

START_TEST(linb_accumulate_f32) {
    int64_t xs[3] = {3, 50, IN}, ys[3] = {3, 50, OUT}, ws[2] = {IN, OUT}, bs[1] = {OUT};
    uint64_t seed = 8;
    tbuf x = mk(ATTN_F32, 3, xs, L_CONTIG, &seed, 1),
         w = mk(ATTN_F32, 2, ws, L_CONTIG, &seed, 1);
    tbuf dy = mk(ATTN_F32, 3, ys, L_CONTIG, &seed, 1);
    tbuf dx = mk(ATTN_F32, 3, xs, L_CONTIG, &seed, 0),
         dw = mk(ATTN_F32, 2, ws, L_CONTIG, &seed, 0);
    tbuf db = mk(ATTN_F32, 1, bs, L_CONTIG, &seed, 0);
    tbuf x6 = dup64(&x.v), w6 = dup64(&w.v), dy6 = dup64(&dy.v);
    tbuf dx6 = mkwant(3, xs), dw6 = mkwant(2, ws), db6 = mkwant(1, bs);
    ck_assert_int_eq(attn_linear_backward(&x.v, &w.v, &dy.v, &dx.v, &dw.v, &db.v, NULL, 0),
                     ATTN_OK);
    ck_assert_int_eq(
        attn_linear_backward(&x6.v, &w6.v, &dy6.v, &dx6.v, &dw6.v, &db6.v, NULL, 0), ATTN_OK);
    tu_check_close(&dx.v, &dx6.v, 1e-5, 1e-6, "f32 dx vs f64");
    tu_check_close(&dw.v, &dw6.v, 1e-5, 1e-5, "f32 dW vs f64");
    tu_check_close(&db.v, &db6.v, 1e-5, 1e-5, "f32 db vs f64");
    tbuf o1 = dup64(&dx6.v), o2 = dup64(&dw6.v), o3 = dup64(&db6.v);
    ck_assert_int_eq(
        attn_linear_backward(&x6.v, &w6.v, &dy6.v, &dx6.v, &dw6.v, &db6.v, NULL, 0), ATTN_OK);
    vscale(&o1.v, 2);
    vscale(&o2.v, 2);
    vscale(&o3.v, 2);
    tu_check_close(&dx6.v, &o1.v, 1e-15, 0, "dx accumulates");
    tu_check_close(&dw6.v, &o2.v, 1e-15, 0, "dW accumulates");
    tu_check_close(&db6.v, &o3.v, 1e-15, 0, "db accumulates");
    tbuf *all[] = {&x, &w, &dy, &dx, &dw, &db, &x6, &w6, &dy6, &dx6, &dw6, &db6, &o1, &o2, &o3};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        tfree(all[i]);
}
END_TEST

START_TEST(linb_errors) {
    double x[20], w[15], dy[12], dx[20], dw[15], db[3];
    float dwf[15];
    for (int i = 0; i < 20; ++i)
        x[i] = 1, dx[i] = 0;
    for (int i = 0; i < 15; ++i)
        w[i] = 1, dw[i] = 0;
    for (int i = 0; i < 12; ++i)
        dy[i] = 1;
    for (int i = 0; i < 3; ++i)
        db[i] = 0;
    attn_view X, W, DY, DX, DW, DB, DWf, DX45, DW53b, DB4, DXa, DWa, DBa, DY5;
    attn_view_init(&X, ATTN_F64, x, 2, (int64_t[]){4, 5});
    attn_view_init(&W, ATTN_F64, w, 2, (int64_t[]){5, 3});
    attn_view_init(&DY, ATTN_F64, dy, 2, (int64_t[]){4, 3});
    attn_view_init(&DX, ATTN_F64, dx, 2, (int64_t[]){4, 5});
    attn_view_init(&DW, ATTN_F64, dw, 2, (int64_t[]){5, 3});
    attn_view_init(&DB, ATTN_F64, db, 1, (int64_t[]){3});
    attn_view_init(&DWf, ATTN_F32, dwf, 2, (int64_t[]){5, 3});
    attn_view_init(&DX45, ATTN_F64, dx, 2, (int64_t[]){5, 4});
    attn_view_init_strided(&DW53b, ATTN_F64, dw, 2, (int64_t[]){5, 3}, (int64_t[]){0, 1});
    attn_view_init(&DB4, ATTN_F64, db, 1, (int64_t[]){4});
    attn_view_init(&DXa, ATTN_F64, w, 2, (int64_t[]){4, 5});      /* overlaps w */
    attn_view_init(&DWa, ATTN_F64, dx + 2, 2, (int64_t[]){5, 3}); /* overlaps dx */
    attn_view_init(&DBa, ATTN_F64, dy + 1, 1, (int64_t[]){3});
    attn_view_init(&DY5, ATTN_F64, dy, 2, (int64_t[]){3, 3});
#define LB(st, ...) EXPECT3(st, attn_linear_backward(__VA_ARGS__, NULL, 0), &DX, &DW, &DB)
    LB(ATTN_EINVAL, NULL, &W, &DY, &DX, &DW, &DB);
    LB(ATTN_EINVAL, &X, NULL, &DY, &DX, &DW, &DB);
    LB(ATTN_EINVAL, &X, &W, NULL, &DX, &DW, &DB);
    LB(ATTN_EDTYPE, &X, &W, &DY, &DX, &DWf, &DB);
    LB(ATTN_ESHAPE, &X, &W, &DY5, &DX, &DW, &DB);
    LB(ATTN_ESHAPE, &X, &W, &DY, &DX45, &DW, &DB);
    LB(ATTN_ESHAPE, &X, &W, &DY, &DX, &DW, &DB4);
    LB(ATTN_ESTRIDE, &X, &W, &DY, &DX, &DW53b, &DB);
    LB(ATTN_EALIAS, &X, &W, &DY, &DXa, &DW, &DB);
    LB(ATTN_EALIAS, &X, &W, &DY, &DX, &DWa, &DB);
    LB(ATTN_EALIAS, &X, &W, &DY, &DX, &DW, &DBa);
#undef LB
    /* packing x (no unit stride): the workspace, one byte short, then exact */
    attn_view Xs;
    attn_view_init_strided(&Xs, ATTN_F64, x, 2, (int64_t[]){4, 5}, (int64_t[]){0, 0});
    attn_view_init_strided(&Xs, ATTN_F64, x, 2, (int64_t[]){2, 5}, (int64_t[]){10, 2});
    attn_view DY2, DX2;
    attn_view_init(&DY2, ATTN_F64, dy, 2, (int64_t[]){2, 3});
    attn_view_init(&DX2, ATTN_F64, dx, 2, (int64_t[]){2, 5});
    size_t ws = attn_linear_backward_workspace_size(&Xs, &W, &DY2, &DX2, &DW);
    ck_assert_uint_gt(ws, 0);
    char *work = malloc(ws);
    EXPECT3(ATTN_EWORKSPACE, attn_linear_backward(&Xs, &W, &DY2, &DX2, &DW, &DB, work, ws - 1),
            &DX2, &DW, &DB);
    EXPECT3(ATTN_EWORKSPACE, attn_linear_backward(&Xs, &W, &DY2, &DX2, &DW, &DB, NULL, ws),
            &DX2, &DW, &DB);
    ck_assert_int_eq(attn_linear_backward(&Xs, &W, &DY2, &DX2, &DW, &DB, work, ws), ATTN_OK);
    for (int i = 0; i < 15; ++i)
        ck_assert(dw[i] == 2); /* sum over 2 rows of 1 * 1 */
    for (int i = 0; i < 3; ++i)
        ck_assert(db[i] == 2);
    free(work);
    ck_assert_uint_eq(attn_linear_backward_workspace_size(&X, &W, &DY, &DX, &DW), 0);
    ck_assert_uint_eq(attn_linear_backward_workspace_size(&X, &W, &DY5, &DX, &DW), 0);
}
END_TEST

/* ======================================================================================
 * main: one TCase per public function
 * ====================================================================================== */

int main(void) {
    Suite *s = suite_create("kernels");
    struct {
        const char *name;
        const TTest *tests[8];
    } cases[] = {
        {"attn_softmax",
         {sm_layouts, sm_special_rows, sm_f32_long_row, sm_fixtures, sm_errors}},
        {"attn_softmax_backward",
         {smb_layouts, smb_finite_diff, smb_accumulate_f32, smb_fixture, smb_errors}},
        {"attn_layernorm", {ln_layouts, ln_fixtures, ln_constant_row, ln_errors}},
        {"attn_layernorm_backward",
         {lnb_layouts, lnb_finite_diff, lnb_accumulate_f32, lnb_fixture, lnb_errors}},
        {"attn_activation", {act_layouts, act_special_values, act_fixtures, act_errors}},
        {"attn_activation_backward",
         {actb_layouts, actb_finite_diff, actb_accumulate_f32, actb_errors}},
        {"attn_gelu", {gelu_variants}},
        {"attn_relu", {relu_basic}},
        {"attn_add", {add_layouts, add_errors}},
        {"attn_add_backward",
         {addb_layouts, addb_finite_diff, addb_accumulate_f32, addb_errors}},
        {"attn_linear", {lin_layouts, lin_fixture, lin_errors}},
        {"attn_linear_backward",
         {linb_layouts, linb_finite_diff, linb_accumulate_f32, linb_errors}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 120);
        for (int j = 0; j < 8 && cases[i].tests[j]; ++j)
            tcase_add_test(tc, cases[i].tests[j]);
        suite_add_tcase(s, tc);
    }
    return tu_run(s);
}
