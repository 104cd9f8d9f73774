/* SPDX-License-Identifier: MIT */
/* Vectorized f32 GELU (erf and tanh forms) and their derivatives, for the FFN's hot loops. */

/*
 * As in vexp.c: no -ffast-math (NaN and the infinities must behave), only the
 * FP exception flags are given up so that GCC if-converts the range selects
 * and vectorizes the loops; attn never reads the flags.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <string.h>

#include "kernels/rows.h"
#include "kernels/simd.h"

#define INLINE static inline __attribute__((always_inline))

/*
 * exp(x) * 2^64 for x in [-120, 0] (clamped there; below, the callers' results
 * are 0 after the 2^-64 they apply last): vexp.c's exp core (kernels/simd.h)
 * with 2^(n+64) in the exponent bits. The 2^64 keeps every intermediate normal, so that a
 * result in the subnormal range is rounded once, by the caller's last product.
 */
INLINE float exp_s64(float x) {
    float xc = x > -120.0f ? x : -120.0f; /* NaN -> -120; callers pass NaN through */
    xc = xc < 0.0f ? xc : 0.0f;
    return attn__exp_core_f32(xc, 64);
}

#define TWO_M64 5.42101086242752217e-20f /* 2^-64 */
#define TWO_64  1.8446744073709551616e19f

/*
 * Phi(x) = 0.5 erfc(-x / sqrt 2), the normal CDF, in two pieces:
 *  - x in (-0.7, 2): 0.5 (1 + x Q(x^2)), Q a degree-7 fit of erf(x/sqrt 2)/x
 *    (relative error 7e-9 in double); 1 + erf is at least 0.48 there, so the
 *    cancellation costs at most a factor 2;
 *  - elsewhere, with a = |x| / sqrt 2: 0.5 erfc(a) = 0.5 exp(-a^2) R(t),
 *    t = 1 / (1 + a/2), R a degree-9 fit of erfcx(a) = exp(a^2) erfc(a) on
 *    a in [0.45, 10.2] (relative error 1.6e-9 in double). exp(-a^2) =
 *    exp(-x^2/2) is taken from the exact split x^2 = h + l (h = x*x rounded,
 *    l = fma(x, x, -h)): exp(-h/2) (1 - l/2), so the argument carries no
 *    rounding; for x >= 2, Phi = 1 - 0.5 erfc(a).
 * Returned: lo (the tail 0.5 erfc(a), times 2^64, before the sign choice),
 * whether the polynomial piece applies, and its value.
 * The coefficients were fitted by weighted least squares on Chebyshev nodes
 * against Python's math.erf/math.erfc (see tests/test_vmath.c for the
 * measured error over all floats).
 */
typedef struct phi_parts {
    float mid;     /* Phi(x) when in_mid */
    float tail64;  /* 0.5 erfc(|x|/sqrt 2) * 2^64 */
    float gauss64; /* exp(-x^2/2) * 2^64 */
    int in_mid;
} phi_parts;

INLINE phi_parts phi_eval(float x) {
    phi_parts o;
    float s = x * x;
    float q = -3.506350957e-08f;
    q = q * s + 1.070140320e-06f;
    q = q * s + -1.807398874e-05f;
    q = q * s + 2.294185000e-04f;
    q = q * s + -2.373239570e-03f;
    q = q * s + 1.994643916e-02f;
    q = q * s + -1.329806434e-01f;
    q = q * s + 7.978845587e-01f;
    o.mid = 0.5f + 0.5f * (x * q);
    o.in_mid = x > -0.7f && x < 2.0f;
    float a = fabsf(x) * 0.70710678118654752f;
    a = a < 10.2f ? a : 10.2f;
    float t = 1.0f / (1.0f + 0.5f * a);
    float r = -7.440860245e-02f;
    r = r * t + 3.511348880e-01f;
    r = r * t + -6.106287690e-01f;
    r = r * t + 4.059199142e-01f;
    r = r * t + -1.077914827e-01f;
    r = r * t + 2.352892508e-01f;
    r = r * t + 2.348536736e-01f;
    r = r * t + 2.836386768e-01f;
    r = r * t + 2.819805151e-01f;
    r = r * t + 3.693661445e-06f;
    float l = fmaf(x, x, -s); /* x^2 = s + l exactly */
    float g = exp_s64(-0.5f * s) * (1.0f - 0.5f * l);
    g = s < 225.0f ? g : 0.0f; /* |x| >= 15: every tail result is 0 (NaN: 0, passed on below) */
    o.gauss64 = g;
    o.tail64 = 0.5f * g * r;
    return o;
}

/* GELU erf: x Phi(x). */
INLINE float gelu_erf1(float x) {
    phi_parts p = phi_eval(x);
    float neg = (x * p.tail64) * TWO_M64;        /* x < 0: x * 0.5 erfc(a), rounded once */
    float pos = x * (1.0f - p.tail64 * TWO_M64); /* x >= 2 */
    float y = p.in_mid ? x * p.mid : x < 0.0f ? neg : pos;
    return x != x ? x : y;
}

/* d/dx GELU erf = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi). */
INLINE float gelu_erf_grad1(float x) {
    phi_parts p = phi_eval(x);
    float tail = p.tail64 * TWO_M64;
    float Phi = p.in_mid ? p.mid : x < 0.0f ? tail : 1.0f - tail;
    float dens = (x * p.gauss64) * (0.39894228040143267794f * TWO_M64);
    return Phi + dens;
}

/*
 * GELU tanh: 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), written
 * as x sigma(2u) with s = exp(-2|u|): x / (1 + s) for u >= 0 and x s / (1 + s)
 * for u < 0 (no cancellation, no overflow; s kept times 2^64 so that tiny
 * results round once).
 */
/*
 * exp(-2|u|) * 2^64 and u's sign. u is formed in double and split into a float
 * head and tail, exp(h + l) = exp(h) (1 + l): rounding u to float would cost
 * 2|u| ulp(u) of relative error in the tail (60 ulp at x = -9.7).
 */
INLINE float tanh_s64(float x, float *u_out) {
    double xd = x;
    double w = -2.0 * fabs(0.79788456080286535588 * (xd + 0.044715 * xd * xd * xd));
    float h = (float)(w > -130.0 ? w : -130.0); /* NaN -> -130 */
    float l = (float)(w - (double)h);
    float s64 = exp_s64(h) * (1.0f + l);
    *u_out = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    return w > -120.0 ? s64 : 0.0f; /* below exp_s64's range: exactly 0 */
}

INLINE float gelu_tanh1(float x) {
    float u;
    float s64 = tanh_s64(x, &u);
    float pos = x / (1.0f + s64 * TWO_M64);
    float neg = (x * s64) / (TWO_64 + s64);
    float y = u >= 0.0f ? pos : neg;
    return x != x ? x : y;
}

/*
 * sigma(2u) + 2 x u' sigma(2u) (1 - sigma(2u)), and sigma (1 - sigma) = s / (1 + s)^2;
 * the terms in s are kept times 2^64 until their last product (subnormal results).
 */
INLINE float gelu_tanh_grad1(float x) {
    float u;
    float s64 = tanh_s64(x, &u);
    float d = 1.0f / (1.0f + s64 * TWO_M64);
    float sig = u >= 0.0f ? d : (s64 * d) * TWO_M64;
    float du = 0.79788456080286535588f * (1.0f + 3.0f * 0.044715f * x * x);
    float g = sig + (2.0f * x * du * (s64 * d * d)) * TWO_M64;
    /* |x| huge: x * x * x overflows, u = +-inf, s = 0: the limits 1 and 0 */
    g = fabsf(x) > 1e12f ? (x > 0.0f ? 1.0f : 0.0f) : g;
    return x != x ? x : g;
}

ATTN_CLONES void attn__vgelu_f32(attn_act act, const float *x, float *y, int64_t n) {
    if (act == ATTN_ACT_GELU_ERF)
        for (int64_t i = 0; i < n; ++i)
            y[i] = gelu_erf1(x[i]);
    else
        for (int64_t i = 0; i < n; ++i)
            y[i] = gelu_tanh1(x[i]);
}

ATTN_CLONES void attn__vgelu_grad_f32(attn_act act, const float *x, const float *dy, float *dx,
                                      int64_t n, bool accumulate) {
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
