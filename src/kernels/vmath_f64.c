/* SPDX-License-Identifier: MIT */
/* The f64 GELUs and their derivatives, vectorized through glibc's libmvec. */

/*
 * GELU erf is 0.5 x erfc(-x / sqrt 2) and its derivative Phi(x) + x phi(x), GELU tanh
 * x sigma(2u) (below); each libm call (erfc, exp) is a call of libmvec's vector
 * variant (glibc 2.35 and later: _ZGV?N?v_erfc and _ZGV?N?v_exp, 2, 4 or 8 lanes in
 * the SSE2, AVX2 and AVX-512 clones), whose error is a few ulp of the call's value;
 * tests/test_vmath.c bounds the results against the same formulas with libm's
 * scalar calls. src/meson.build builds this file alone with -fno-math-errno (a
 * vector call sets no errno; attn never reads it), -fno-trapping-math (both sides of
 * a select are computed), -fopenmp-simd (the declarations below) and the dynamic
 * vectorizer cost model (-O2 would not vectorize a loop of calls). Where those are
 * missing the loops call libm, one element at a time.
 */
#include <math.h>

#include "kernels/rows.h"
#include "kernels/simd.h"

#define K_SQRT_2_PI    0.79788456080286535588 /* sqrt(2/pi) */
#define K_SQRT1_2      0.70710678118654752440 /* 1/sqrt(2) */
#define K_INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */

#if defined(__GLIBC__) && defined(__x86_64__) && defined(ATTN_VMATH_F64_SIMD)
#if __GLIBC_PREREQ(2, 35)
#pragma omp declare simd notinbranch
extern double erfc(double);
#pragma omp declare simd notinbranch
extern double exp(double);
#endif
#endif

#define INLINE static inline __attribute__((always_inline))

/*
 * GELU tanh as x sigma(2u) = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), with
 * s = exp(-2|u|): x / (1 + s) for u >= 0, x s / (1 + s) below, as the f32 kernel does.
 * 1 + tanh u as written cancels for negative x (at x = -5.2, tanh u = -1 + 1.2e-7, so
 * one ulp of tanh is 2e-9 of the result); this form has no cancellation.
 */
INLINE double gelu_tanh1(double x) {
    double u = K_SQRT_2_PI * (x + 0.044715 * x * x * x), s = exp(-2 * fabs(u));
    double y = u >= 0 ? x / (1 + s) : x * s / (1 + s);
    return x != x ? x : y;
}

INLINE double gelu_erf1(double x) { return 0.5 * x * erfc(-x * K_SQRT1_2); }

/* sigma(2u) + 2 x u' sigma(2u) (1 - sigma(2u)), with sigma (1 - sigma) = s / (1 + s)^2. */
INLINE double gelu_tanh_grad1(double x) {
    double u = K_SQRT_2_PI * (x + 0.044715 * x * x * x), s = exp(-2 * fabs(u));
    double d = 1 / (1 + s), sig = u >= 0 ? d : s * d;
    double g = sig + 2 * x * K_SQRT_2_PI * (1 + 3 * 0.044715 * x * x) * (s * d * d);
    g = fabs(x) > 1e100 ? (x > 0 ? 1.0 : 0.0) : g; /* x^3 overflows: the limits */
    return x != x ? x : g;
}

INLINE double gelu_erf_grad1(double x) { /* Phi(x) + x phi(x) */
    return 0.5 * erfc(-x * K_SQRT1_2) + x * exp(-0.5 * x * x) * K_INV_SQRT_2PI;
}

ATTN_CLONES void attn__vgelu_f64(attn_act act, const double *x, double *y, int64_t n) {
    if (act == ATTN_ACT_GELU_ERF)
        for (int64_t i = 0; i < n; ++i)
            y[i] = gelu_erf1(x[i]);
    else
        for (int64_t i = 0; i < n; ++i)
            y[i] = gelu_tanh1(x[i]);
}

ATTN_CLONES void attn__vgelu_grad_f64(attn_act act, const double *x, const double *dy,
                                      double *dx, int64_t n, bool accumulate) {
    bool erf = act == ATTN_ACT_GELU_ERF;
    if (accumulate && erf)
        for (int64_t i = 0; i < n; ++i)
            dx[i] += gelu_erf_grad1(x[i]) * dy[i];
    else if (accumulate)
        for (int64_t i = 0; i < n; ++i)
            dx[i] += gelu_tanh_grad1(x[i]) * dy[i];
    else if (erf)
        for (int64_t i = 0; i < n; ++i)
            dx[i] = gelu_erf_grad1(x[i]) * dy[i];
    else
        for (int64_t i = 0; i < n; ++i)
            dx[i] = gelu_tanh_grad1(x[i]) * dy[i];
}
