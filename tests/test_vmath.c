/* SPDX-License-Identifier: MIT */
/* Check suite for the vectorized activations (src/kernels/vmath.c) through attn_gelu and
 * attn_activation_backward, and the softmax's exp (src/kernels/vexp.c) through attn_softmax:
 * every 257th float against the formula in double with libm. */
#include <float.h>
#include <stdint.h>

#include "testutil.h"

/*
 * The stated accuracy (docs/design.md "Row and elementwise kernels"): f32 GELU
 * erf within 7 ulp and GELU tanh within 4 ulp of the formula evaluated in double
 * with libm and rounded to float, over every finite float (subnormal results
 * included). Those maxima come from one exhaustive sweep of all 2^32 bit
 * patterns (7 ulp at x = -1.3099, 4 at -1.3090); this suite samples every 257th
 * pattern to stay within seconds. f64: see F64_EPS_BOUND below.
 */
#define ERF_ULP  7
#define TANH_ULP 4

static double ref_gelu(attn_act act, double x) {
    if (act == ATTN_ACT_GELU_ERF)
        return 0.5 * x * erfc(-x * 0.70710678118654752440);
    /* x sigma(2u) in the form that neither cancels nor overflows */
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    double e = exp(-2 * fabs(u));
    return u >= 0 ? x / (1 + e) : x * e / (1 + e);
}

/*
 * f64 (src/kernels/vmath_f64.c, libmvec's vector erfc and exp) against the same
 * formulas with libm's scalar calls, ref_gelu and ref_grad in double: within
 * F64_EPS_BOUND machine epsilons of the value (the derivative: of its two terms'
 * magnitudes), plus 4 |x| subnormal steps where the result is subnormal (there
 * x s / (1 + s) is formed from a subnormal s). Measured over [-40, 40] in steps of
 * 5e-5: 3.5 (erf) and 2.7 (tanh) for the values, 2.9 and 2.6 for the derivatives.
 */
#define F64_EPS_BOUND 8
#define F64_TINY(x)   (4 * fabs(x) * DBL_TRUE_MIN)

/* GELU' as its two terms, whose magnitudes bound the rounding of their sum. */
static void ref_grad(attn_act act, double x, double *g, double *scale) {
    if (act == ATTN_ACT_GELU_ERF) {
        double a = 0.5 * erfc(-x * 0.70710678118654752440);
        double b = x * exp(-0.5 * x * x) * 0.39894228040143267794;
        *g = a + b, *scale = fabs(a) + fabs(b);
        return;
    }
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x), e = exp(-2 * fabs(u));
    double sig = u >= 0 ? 1 / (1 + e) : e / (1 + e), ss = e / ((1 + e) * (1 + e));
    double b = 2 * x * 0.79788456080286535588 * (1 + 3 * 0.044715 * x * x) * ss;
    if (!isfinite(b))
        b = 0; /* |x| huge: the limit */
    *g = sig + b, *scale = fabs(sig) + fabs(b);
}

/* Floats in the order of their values: the distance between two is their ulp count. */
static int64_t ordered(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}
static int64_t ulp_diff(float a, float b) {
    if (a != a || b != b)
        return a != a && b != b ? 0 : INT64_MAX;
    if (a == b) /* +0 == -0 */
        return 0;
    int64_t d = ordered(a) - ordered(b);
    return d < 0 ? -d : d;
}

enum { CHUNK = 1 << 18 };

/*
 * Every STEP-th float (257: 16.7 million points). ATTN_VMATH_STEP overrides it:
 * CI's valgrind step, which checks memory, not ulps, samples 100x more sparsely.
 */
static uint64_t step(void) {
    const char *e = getenv("ATTN_VMATH_STEP");
    long v = e ? atol(e) : 0;
    return v > 0 ? (uint64_t)v : 257;
}
#define STEP step()

static void sweep(attn_act act, int64_t bound) {
    float *x = malloc(CHUNK * sizeof *x), *y = malloc(CHUNK * sizeof *y);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    int64_t worst = 0, count = 0;
    float wx = 0;
    for (uint64_t b = 0; b < (UINT64_C(1) << 32);) {
        int64_t n = 0;
        for (; n < CHUNK && b < (UINT64_C(1) << 32); b += STEP) {
            uint32_t u = (uint32_t)b;
            float f;
            memcpy(&f, &u, sizeof f);
            if (isfinite(f))
                x[n++] = f;
        }
        attn_view X, Y;
        ck_assert_int_eq(attn_view_init(&X, ATTN_F32, x, 1, (int64_t[]){n}), ATTN_OK);
        ck_assert_int_eq(attn_view_init(&Y, ATTN_F32, y, 1, (int64_t[]){n}), ATTN_OK);
        ck_assert_int_eq(attn_gelu(act, &X, &Y), ATTN_OK);
        for (int64_t i = 0; i < n; ++i) {
            int64_t e = ulp_diff(y[i], (float)ref_gelu(act, x[i]));
            if (e > worst)
                worst = e, wx = x[i];
        }
        count += n;
    }
    ck_assert_msg(worst <= bound, "%s: %lld ulp at x = %.9g (bound %lld, %lld floats)",
                  act == ATTN_ACT_GELU_ERF ? "gelu_erf" : "gelu_tanh", (long long)worst, wx,
                  (long long)bound, (long long)count);
    free(x);
    free(y);
}

START_TEST(gelu_erf_all_floats) { sweep(ATTN_ACT_GELU_ERF, ERF_ULP); }
END_TEST

START_TEST(gelu_tanh_all_floats) { sweep(ATTN_ACT_GELU_TANH, TANH_ULP); }
END_TEST

/* The derivative: within 8 float epsilons of the sum of its terms' magnitudes. */
static void grad_sweep(attn_act act) {
    float *x = malloc(CHUNK * sizeof *x), *dy = malloc(CHUNK * sizeof *dy);
    float *dx = malloc(CHUNK * sizeof *dx);
    ck_assert(x && dy && dx);
    double worst = 0;
    float wx = 0;
    tu_first_fail ff = {0};
    for (uint64_t b = 0; b < (UINT64_C(1) << 32);) {
        int64_t n = 0;
        for (; n < CHUNK && b < (UINT64_C(1) << 32); b += 4 * STEP + 2) {
            uint32_t u = (uint32_t)b;
            float f;
            memcpy(&f, &u, sizeof f);
            if (isfinite(f))
                x[n] = f, dy[n] = 1.0f, dx[n] = 0.0f, ++n;
        }
        attn_view X, DY, DX;
        attn_view_init(&X, ATTN_F32, x, 1, (int64_t[]){n});
        attn_view_init(&DY, ATTN_F32, dy, 1, (int64_t[]){n});
        attn_view_init(&DX, ATTN_F32, dx, 1, (int64_t[]){n});
        ck_assert_int_eq(attn_activation_backward(act, &X, &DY, &DX), ATTN_OK);
        for (int64_t i = 0; i < n; ++i) {
            double g, sc;
            ref_grad(act, x[i], &g, &sc);
            double e = fabs(dx[i] - g) / (sc > FLT_MIN ? sc : FLT_MIN);
            TU_NOTE_FAIL(&ff, e == e, "grad %d: NaN at x = %.9g", (int)act, x[i]);
            if (e > worst)
                worst = e, wx = x[i];
        }
    }
    TU_ASSERT_NO_FAIL(&ff);
    ck_assert_msg(worst <= 8 * FLT_EPSILON, "grad %d: %.3g eps at x = %.9g", (int)act,
                  worst / FLT_EPSILON, wx);
    free(x);
    free(dy);
    free(dx);
}

START_TEST(gelu_grads) {
    grad_sweep(ATTN_ACT_GELU_ERF);
    grad_sweep(ATTN_ACT_GELU_TANH);
}
END_TEST

/* NaN stays NaN; +inf and -inf as libm's formula gives them; signed zeros. */
START_TEST(gelu_specials) {
    float x[6] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -1e30f}, y[6];
    attn_act acts[2] = {ATTN_ACT_GELU_ERF, ATTN_ACT_GELU_TANH};
    for (int a = 0; a < 2; ++a) {
        attn_view X, Y;
        attn_view_init(&X, ATTN_F32, x, 1, (int64_t[]){6});
        attn_view_init(&Y, ATTN_F32, y, 1, (int64_t[]){6});
        ck_assert_int_eq(attn_gelu(acts[a], &X, &Y), ATTN_OK);
        ck_assert(isnan(y[0]));
        ck_assert(y[1] == INFINITY);
        ck_assert(isnan(y[2])); /* -inf * 0, as 0.5 x erfc(-x / sqrt 2) in libm */
        ck_assert(y[3] == 0.0f && y[4] == 0.0f && y[5] == 0.0f);
    }
}
END_TEST

/*
 * The f64 GELUs and derivatives over [-40, 40] in steps of 5e-5 (1.6 million points,
 * every lane position and the threaded chunks; fewer under ATTN_VMATH_STEP) and the specials,
 * against the formulas with libm's scalar calls. The tanh form is x sigma(2u), which does not
 * cancel: the seed's 0.5 x (1 + tanh u) loses every digit below x = -7.2 (it gives 0 there).
 */
START_TEST(gelu_f64_sweep) {
    /* ATTN_VMATH_STEP thins this sweep as it does the float one (valgrind: 16,001 points) */
    const int64_t N = 1600000 / (int64_t)(STEP / 257 ? STEP / 257 : 1) + 1;
    double *x = malloc((size_t)N * sizeof *x), *y = malloc((size_t)N * sizeof *y);
    double *dy = malloc((size_t)N * sizeof *dy), *dx = malloc((size_t)N * sizeof *dx);
    ck_assert(x && y && dy && dx);
    for (int64_t i = 0; i < N; ++i) {
        x[i] = -40 + 80.0 * (double)i / (N - 1);
        dy[i] = 1;
    }
    attn_view X, Y, DY, DX;
    attn_view_init(&X, ATTN_F64, x, 1, (int64_t[]){N});
    attn_view_init(&Y, ATTN_F64, y, 1, (int64_t[]){N});
    attn_view_init(&DY, ATTN_F64, dy, 1, (int64_t[]){N});
    attn_view_init(&DX, ATTN_F64, dx, 1, (int64_t[]){N});
    tu_first_fail ff = {0};
    for (int a = 0; a < 2; ++a) {
        attn_act act = a ? ATTN_ACT_GELU_TANH : ATTN_ACT_GELU_ERF;
        memset(dx, 0, (size_t)N * sizeof *dx);
        ck_assert_int_eq(attn_gelu(act, &X, &Y), ATTN_OK);
        ck_assert_int_eq(attn_activation_backward(act, &X, &DY, &DX), ATTN_OK);
        for (int64_t i = 0; i < N; ++i) {
            double want = ref_gelu(act, x[i]), g, scale;
            ref_grad(act, x[i], &g, &scale);
            TU_NOTE_FAIL(&ff,
                         fabs(y[i] - want) <=
                             F64_EPS_BOUND * DBL_EPSILON * fabs(want) + F64_TINY(x[i]),
                         "f64 act %d at %.17g: %.17g vs %.17g", (int)act, x[i], y[i], want);
            TU_NOTE_FAIL(
                &ff, fabs(dx[i] - g) <= F64_EPS_BOUND * DBL_EPSILON * scale + F64_TINY(x[i]),
                "f64 grad %d at %.17g: %.17g vs %.17g", (int)act, x[i], dx[i], g);
        }
        TU_ASSERT_NO_FAIL(&ff);
        double sx[6] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, -1e300}, sy[6];
        attn_view SX, SY;
        attn_view_init(&SX, ATTN_F64, sx, 1, (int64_t[]){6});
        attn_view_init(&SY, ATTN_F64, sy, 1, (int64_t[]){6});
        ck_assert_int_eq(attn_gelu(act, &SX, &SY), ATTN_OK);
        ck_assert(isnan(sy[0]) && sy[1] == INFINITY && isnan(sy[2]));
        ck_assert(sy[3] == 0.0 && sy[4] == 0.0 && sy[5] == 0.0);
    }
    free(x);
    free(y);
    free(dy);
    free(dx);
}
END_TEST

/*
 * The threaded, strided and bias-fused paths run the same vector code: a large
 * strided view (over the threading threshold), in place and out of place,
 * against the reference to the stated bound (f64: F64_EPS_BOUND).
 */
START_TEST(gelu_strided_threaded) {
    enum { R = 300, N = 1031 }; /* rows of N, a stride of 2 and a padded row */
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        size_t es = d ? 8 : 4;
        char *xm = malloc((size_t)R * (2 * N + 3) * es), *ym = malloc((size_t)R * N * es);
        ck_assert(xm && ym);
        attn_view X, Y;
        ck_assert_int_eq(
            attn_view_init_strided(&X, dt, xm, 2, (int64_t[]){R, N}, (int64_t[]){2 * N + 3, 2}),
            ATTN_OK);
        ck_assert_int_eq(attn_view_init(&Y, dt, ym, 2, (int64_t[]){R, N}), ATTN_OK);
        uint64_t seed = 5;
        for (int64_t r = 0; r < R; ++r)
            for (int64_t i = 0; i < N; ++i)
                tu_set(&X, (int64_t[]){r, i}, 12.0 * tu_uniform(&seed));
        tu_first_fail ff = {0};
        for (int a = 0; a < 2; ++a) {
            attn_act act = a ? ATTN_ACT_GELU_TANH : ATTN_ACT_GELU_ERF;
            ck_assert_int_eq(attn_gelu(act, &X, &Y), ATTN_OK);
            for (int64_t r = 0; r < R; ++r)
                for (int64_t i = 0; i < N; ++i) {
                    int64_t ix[2] = {r, i};
                    double xv = tu_get(&X, ix), got = tu_get(&Y, ix);
                    double want = ref_gelu(act, xv);
                    if (d)
                        TU_NOTE_FAIL(&ff,
                                     fabs(got - want) <=
                                         F64_EPS_BOUND * DBL_EPSILON * fabs(want) +
                                             F64_TINY(xv),
                                     "f64 %g: %.17g vs %.17g", xv, got, want);
                    else
                        TU_NOTE_FAIL(
                            &ff, ulp_diff((float)got, (float)want) <= (a ? TANH_ULP : ERF_ULP),
                            "f32 %g: %.9g vs %.9g", xv, got, want);
                }
            TU_ASSERT_NO_FAIL(&ff);
        }
        free(xm);
        free(ym);
    }
}
END_TEST

/*
 * The f32 exp of the softmax and the sdpa tiles (src/kernels/vexp.c) through attn_softmax:
 * rows of 64 whose maximum 0 sits at a varying lane, the other 63 entries every STEP-th
 * float in [-108, 0) and the specials. out[j] / out[max] is exp(x[j]) up to two roundings
 * of the shared 1/sum, so against libm's exp in double: within 4e-7 relative down to
 * -80 (where out stays normal), exactly 0 below -105 (exp(x) < 2^-151) and for -inf, and
 * never above exp(x) out[max] by more than its rounding in between (a result below
 * FLT_MIN may be flushed to 0, as every path does: a subnormal result costs a microcode
 * assist).
 */
START_TEST(softmax_exp_all_floats) {
    enum { N = 64 };
    float x[N], y[N];
    attn_view X, Y;
    ck_assert_int_eq(attn_view_init(&X, ATTN_F32, x, 1, (int64_t[]){N}), ATTN_OK);
    ck_assert_int_eq(attn_view_init(&Y, ATTN_F32, y, 1, (int64_t[]){N}), ATTN_OK);
    const uint32_t lo = 0x80000001u, hi = 0xc2d80000u; /* -min subnormal .. -108 */
    double worst = 0;
    float wx = 0;
    int64_t count = 0;
    tu_first_fail ff = {0};
    uint64_t b = lo;
    for (int row = 0; b <= hi; ++row) {
        int at = row % N; /* the maximum's lane */
        for (int j = 0; j < N; ++j) {
            if (j == at) {
                x[j] = 0.0f;
                continue;
            }
            if (b > hi) {
                x[j] = row & 1 ? -INFINITY : -0.0f;
                continue;
            }
            uint32_t u = (uint32_t)b;
            memcpy(&x[j], &u, sizeof x[j]);
            b += STEP;
        }
        if (row % 97 == 0) /* the specials, now and then */
            x[(at + 1) % N] = -INFINITY;
        attn_status st = attn_softmax(&X, &Y);
        TU_NOTE_FAIL(&ff, st == ATTN_OK, "row %d: attn_softmax returned %d", row, (int)st);
        TU_NOTE_FAIL(&ff, y[at] > 0 && y[at] <= 1, "row %d: max weight %g", row, y[at]);
        for (int j = 0; j < N; ++j) {
            if (j == at)
                continue;
            double e = exp((double)x[j]), got = (double)y[j] / (double)y[at];
            if (x[j] < -105.0f)
                TU_NOTE_FAIL(&ff, y[j] == 0.0f, "exp(%.9g) gave %g, not 0", x[j], got);
            else if (x[j] >= -80.0f) {
                double rel = fabs(got - e) / e;
                if (rel > worst)
                    worst = rel, wx = x[j];
            } else
                TU_NOTE_FAIL(&ff, y[j] <= e * y[at] * (1 + 4e-7) + FLT_TRUE_MIN,
                             "exp(%.9g): %g > %g", x[j], got, e);
            ++count;
        }
    }
    TU_ASSERT_NO_FAIL(&ff);
    ck_assert_msg(worst <= 4e-7, "exp: relative error %.3g at x = %.9g (%lld floats)", worst,
                  wx, (long long)count);
}
END_TEST

int main(void) {
    Suite *s = suite_create("vmath");
    TCase *tc = tcase_create("gelu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, gelu_erf_all_floats);
    tcase_add_test(tc, gelu_tanh_all_floats);
    tcase_add_test(tc, gelu_grads);
    tcase_add_test(tc, gelu_specials);
    tcase_add_test(tc, gelu_f64_sweep);
    tcase_add_test(tc, gelu_strided_threaded);
    tcase_add_test(tc, softmax_exp_all_floats);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
