/* SPDX-License-Identifier: MIT */
/* Vectorized exp-and-sum and row maximum for the softmax inside attention tiles. */

/*
 * No -ffast-math: -inf and NaN must behave. Only FP *exception flags* are
 * given up (-fno-trapping-math), which lets GCC if-convert the range
 * selects below and vectorize the loops at the baseline ISA; attn never
 * reads the flags.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <string.h>

#include "core/internal.h"

/* One build for every x86-64 CPU: SSE2 baseline, AVX2 and AVX-512 clones picked at load time. */
/* (not with clang < 15: it names the ifunc "f.ifunc", so other files' calls do not link) */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    (!defined(__clang__) || __clang_major__ >= 15)
#define VEXP_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define VEXP_CLONES
#endif

/*
 * exp(x) in float, Cephes' expf scheme: n = round(x log2 e) by the 1.5*2^23
 * shifter, r = x - n ln2 in two parts (ln2_hi has 9 bits, so n ln2_hi is
 * exact), exp(r) by a degree-7 polynomial on |r| <= ln2/2, times 2^n built in
 * the exponent bits. Max relative error about 1e-7 on [-87.3, 88.7]. Below
 * the smallest normal result it returns exactly 0 (so exp(-inf) = 0), above
 * the largest +inf, and NaN stays NaN. Branch-free so loops vectorize.
 */
static inline __attribute__((always_inline)) float exp_f32(float x) {
    const float hi = 88.3762626647949f, lo = -87.3365447504f;
    float xc = x < hi ? x : hi; /* NaN -> hi: (int32_t)NaN below would be undefined */
    xc = xc > lo ? xc : lo;
    const float shifter = 12582912.0f;
    float n = (xc * 1.44269504088896341f + shifter) - shifter;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    y = y * two_n;
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}

/* 16 independent partial sums / maxima: a fixed order the vectorizer can keep. */
#define LANES 16

VEXP_CLONES float attn__vexp_sum_f32(float *x, int64_t n, float m) {
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

VEXP_CLONES float attn__vmax_f32(const float *x, int64_t n) {
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

VEXP_CLONES double attn__vmax_f64(const double *x, int64_t n) {
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
