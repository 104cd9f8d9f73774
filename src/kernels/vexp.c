/* SPDX-License-Identifier: MIT */
/* Vectorized exp-and-sum and row maximum for the softmax inside attention tiles. */

/*
 * No -ffast-math: -inf and NaN must behave. Only FP *exception flags* are
 * given up (-fno-trapping-math), which lets GCC if-convert the range
 * selects below and vectorize the loops at the baseline ISA; attn never
 * reads the flags. Multiply-adds are fused where the ISA has FMA
 * (fp-contract=fast: one rounding instead of two; the AVX2 and AVX-512
 * clones' polynomials take half the instructions).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"
#include "kernels/simd.h"

/*
 * exp(x) in float: attn__exp_core_f32 (kernels/simd.h, Cephes' expf scheme) on x
 * clamped to the normal range. Max relative error about 1e-7 on [-87.3, 88.7]. Below
 * the smallest normal result it returns exactly 0 (so exp(-inf) = 0), above
 * the largest +inf, and NaN stays NaN. Branch-free so loops vectorize.
 */
static inline __attribute__((always_inline)) float exp_f32(float x) {
    const float hi = 88.3762626647949f, lo = -87.3365447504f;
    float xc = x < hi ? x : hi; /* NaN -> hi: (int32_t)NaN below would be undefined */
    xc = xc > lo ? xc : lo;
    float y = attn__exp_core_f32(xc, 0);
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}

/* 16 independent partial sums / maxima: a fixed order the vectorizer can keep. */
#define LANES 16

ATTN_CLONES float attn__vexp_sum_f32(float *x, int64_t n, float m) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; ++k) {
            float y = exp_f32(x[i + k] - m);
            x[i + k] = y;
            acc[k] += y;
        }
    float s = 0.0f;
    for (; i < n; ++i) {
        float y = exp_f32(x[i] - m);
        x[i] = y;
        s += y;
    }
    for (int k = 0; k < LANES; ++k)
        s += acc[k];
    return s;
}

ATTN_CLONES float attn__vmax_f32(const float *x, int64_t n) {
    float acc[LANES];
    for (int k = 0; k < LANES; ++k)
        acc[k] = -INFINITY;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; ++k)
            acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    float mx = -INFINITY;
    for (; i < n; ++i)
        mx = x[i] > mx ? x[i] : mx;
    for (int k = 0; k < LANES; ++k)
        mx = acc[k] > mx ? acc[k] : mx;
    return mx;
}

/* f64: libm's exp (correctly rounded in practice), so results hold to 1e-12. */
double attn__vexp_sum_f64(double *x, int64_t n, double m) {
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; ++k) {
            double y = exp(x[i + k] - m);
            x[i + k] = y;
            acc[k] += y;
        }
    double s = 0.0;
    for (; i < n; ++i) {
        x[i] = exp(x[i] - m);
        s += x[i];
    }
    return s + ((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

ATTN_CLONES double attn__vmax_f64(const double *x, int64_t n) {
    double acc[LANES / 2];
    for (int k = 0; k < LANES / 2; ++k)
        acc[k] = -INFINITY;
    int64_t i = 0;
    for (; i + LANES / 2 <= n; i += LANES / 2)
        for (int k = 0; k < LANES / 2; ++k)
            acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    double mx = -INFINITY;
    for (; i < n; ++i)
        mx = x[i] > mx ? x[i] : mx;
    for (int k = 0; k < LANES / 2; ++k)
        mx = acc[k] > mx ? acc[k] : mx;
    return mx;
}

/* ---- the attention tiles' fused row passes (kernels/kernels_internal.h) ---------------- */

/*
 * exp(x) in double: the same scheme as exp_f32 with the fdlibm two-part ln2
 * (ln2_hi has 32 significant bits, so n ln2_hi is exact) and the Taylor
 * polynomial to degree 13 on |r| <= ln2/2 (truncation below 1e-17 relative);
 * a few ulp, inside the f64 tolerance of 1e-12 with room. 2^n is built from
 * the shifter's own bits (integer adds and shifts: no double-to-int64
 * conversion, which AVX-512F lacks). 0 below -708.39 (the smallest normal
 * result), +inf above 709, NaN stays NaN.
 */
static inline __attribute__((always_inline)) double exp_f64(double x) {
    const double hi = 709.0, lo = -708.39;
    double xc = x < hi ? x : hi;
    xc = xc > lo ? xc : lo;
    const double shifter = 6755399441055744.0; /* 1.5 * 2^52 */
    double t = xc * 1.4426950408889634074 + shifter, n = t - shifter;
    double r = xc - n * 6.93147180369123816490e-01;
    r = r - n * 1.90821492927058770002e-10;
    double p = 1.6059043836821614599e-10; /* 1/13! */
    p = p * r + 2.0876756987868098979e-09;
    p = p * r + 2.5052108385441718775e-08;
    p = p * r + 2.7557319223985890653e-07;
    p = p * r + 2.7557319223985890653e-06;
    p = p * r + 2.4801587301587301587e-05;
    p = p * r + 1.9841269841269841270e-04;
    p = p * r + 1.3888888888888888889e-03;
    p = p * r + 8.3333333333333333333e-03;
    p = p * r + 4.1666666666666666667e-02;
    p = p * r + 1.6666666666666666667e-01;
    p = p * r + 0.5;
    double y = p * (r * r) + r + 1.0;
    uint64_t tb;
    memcpy(&tb, &t, sizeof tb);
    tb = (tb + 1023u) << 52; /* the shifter's low bits hold n */
    double two_n;
    memcpy(&two_n, &tb, sizeof two_n);
    y = y * two_n;
    y = x < lo ? 0.0 : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}

ATTN_CLONES float attn__vexp_tail_f32(float *x, int64_t lim, int64_t n, float m) {
    float s = attn__vexp_sum_f32(x, lim, m);
    for (int64_t i = lim; i < n; ++i)
        x[i] = 0.0f;
    return s;
}

ATTN_CLONES double attn__vexp_tail_f64(double *x, int64_t lim, int64_t n, double m) {
    double acc[LANES / 2] = {0};
    int64_t i = 0;
    for (; i + LANES / 2 <= lim; i += LANES / 2)
        for (int k = 0; k < LANES / 2; ++k) {
            double y = exp_f64(x[i + k] - m);
            x[i + k] = y;
            acc[k] += y;
        }
    double s = 0.0;
    for (; i < lim; ++i) {
        x[i] = exp_f64(x[i] - m);
        s += x[i];
    }
    for (int k = 0; k < LANES / 2; ++k)
        s += acc[k];
    for (i = lim; i < n; ++i)
        x[i] = 0.0;
    return s;
}

/* GCC 12's -O2 cost model ("very cheap") does not vectorize a loop of unknown count */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
ATTN_CLONES void attn__sdpa_ds_f32(const float *restrict p, float *restrict d, int64_t n,
                                   float dl) {
    for (int64_t i = 0; i < n; ++i) {
        float pi = p[i], v = pi * (d[i] - dl);
        d[i] = pi == 0 ? 0.0f : v;
    }
}

ATTN_CLONES void attn__sdpa_ds_f64(const double *restrict p, double *restrict d, int64_t n,
                                   double dl) {
    for (int64_t i = 0; i < n; ++i) {
        double pi = p[i], v = pi * (d[i] - dl);
        d[i] = pi == 0 ? 0.0 : v;
    }
}

/* Bias and keep on a contiguous score row (sdpa's mask_row): a -inf bias masks even NaN. */
ATTN_CLONES void attn__sdpa_bias_row_f32(float *restrict s, const float *restrict b,
                                         int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        float bv = b[i], v = s[i] + bv;
        s[i] = bv == -INFINITY ? bv : v;
    }
}

ATTN_CLONES void attn__sdpa_bias_row_f64(double *restrict s, const double *restrict b,
                                         int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        double bv = b[i], v = s[i] + bv;
        s[i] = bv == -INFINITY ? bv : v;
    }
}

ATTN_CLONES void attn__sdpa_keep_row_f32(float *restrict s, const uint8_t *restrict k,
                                         int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        s[i] = k[i] ? s[i] : -INFINITY;
}

ATTN_CLONES void attn__sdpa_keep_row_f64(double *restrict s, const uint8_t *restrict k,
                                         int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        s[i] = k[i] ? s[i] : -INFINITY;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* Integer tests of the exponent field (all ones: inf or NaN): vectorizable at any ISA. */
ATTN_CLONES bool attn__finite_f32(const float *x, int64_t n) {
    uint32_t acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; ++k) {
            uint32_t u;
            memcpy(&u, x + i + k, sizeof u);
            u &= 0x7f800000u;
            acc[k] = u > acc[k] ? u : acc[k];
        }
    uint32_t mx = 0;
    for (; i < n; ++i) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        u &= 0x7f800000u;
        mx = u > mx ? u : mx;
    }
    for (int k = 0; k < LANES; ++k)
        mx = acc[k] > mx ? acc[k] : mx;
    return mx != 0x7f800000u;
}

ATTN_CLONES bool attn__finite_f64(const double *x, int64_t n) {
    const uint64_t e = 0x7ff0000000000000u;
    uint64_t acc[LANES / 2] = {0};
    int64_t i = 0;
    for (; i + LANES / 2 <= n; i += LANES / 2)
        for (int k = 0; k < LANES / 2; ++k) {
            uint64_t u;
            memcpy(&u, x + i + k, sizeof u);
            u &= e;
            acc[k] = u > acc[k] ? u : acc[k];
        }
    uint64_t mx = 0;
    for (; i < n; ++i) {
        uint64_t u;
        memcpy(&u, x + i, sizeof u);
        u &= e;
        mx = u > mx ? u : mx;
    }
    for (int k = 0; k < LANES / 2; ++k)
        mx = acc[k] > mx ? acc[k] : mx;
    return mx != e;
}
