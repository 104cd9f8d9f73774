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
 * clamped to [-127 ln2, 128 ln2], where the core's power of two is exactly +0 at
 * the bottom (so exp(-inf) = 0) and +inf at the top. Max relative error about 1e-7
 * on [-87.3, 88.7]; results below 2^-126.5 may flush to 0. The clamps pass NaN
 * through (min and max with x as the operand a NaN selects), so NaN stays NaN with
 * no select of its own: two vector min/max and the core, branch-free.
 */
static inline __attribute__((always_inline)) float exp_f32(float x) {
    const float hi = 88.7228391116729996f, lo = -88.0296919311130543f; /* 128, -127 ln2 */
    float xc = hi < x ? hi : x; /* NaN: x */
    xc = lo > xc ? lo : xc;     /* NaN: xc */
    return attn__exp_core_f32(xc, 0);
}

/* 16 independent partial sums: a fixed order the vectorizer can keep. */
#define LANES 16

static ATTN_CLONES float vexp_sum_lanes(float *x, int64_t n, float m) {
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

/* vexp_sum_lanes with arguments below cut giving exactly 0 (NaN stays NaN). */
static ATTN_CLONES float vexp_sum_lanes_cut(float *x, int64_t n, float m, float cut) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; ++k) {
            float d = x[i + k] - m, y = exp_f32(d);
            y = d < cut ? 0.0f : y;
            x[i + k] = y;
            acc[k] += y;
        }
    float s = 0.0f;
    for (; i < n; ++i) {
        float d = x[i] - m, y = exp_f32(d);
        y = d < cut ? 0.0f : y;
        x[i] = y;
        s += y;
    }
    for (int k = 0; k < LANES; ++k)
        s += acc[k];
    return s;
}

#if ATTN_AVX512_KERNELS
/*
 * The AVX-512 exp: attn__exp_core_f32's n, r and polynomial step for step, so a result
 * is the same float as exp_f32's, with the power of two applied by vscalefps, which
 * gives +inf past the top on its own. Below -87.33 (a result under FLT_MIN, or -inf)
 * the lane is zeroed by the scalef's mask instead: a scalef that underflows takes a
 * microcode assist, and with a keep mask's -inf scores that made the call 1.6x slower.
 * The clamps keep the infinities from making n ln2 - x a NaN, and min/max return their
 * second operand for a NaN, so NaN stays NaN (the mask's compare is true for NaN).
 * Its loop is 25 instructions per 16 floats, against 31 for the AVX-512 clone of
 * exp_f32 (37 before that clone's clamps passed NaN through instead of selects).
 */
__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 d, float cut) {
    const __m512 lo = _mm512_set1_ps(cut);                   /* log(FLT_MIN) or above */
    __mmask16 live = _mm512_cmp_ps_mask(d, lo, _CMP_NLT_UQ); /* d >= lo or NaN */
    d = _mm512_min_ps(_mm512_set1_ps(128.0f), d);
    d = _mm512_max_ps(lo, d);
    const __m512 shifter = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(d, _mm512_set1_ps(1.44269504088896341f), shifter),
                             shifter);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), d);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, y, n);
}

__attribute__((target("avx512f"))) static float vexp_sum_avx512(float *x, int64_t n, float m,
                                                                float cut) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 y = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), cut);
        _mm512_storeu_ps(x + i, y);
        acc = _mm512_add_ps(acc, y);
    }
    if (i < n) { /* the last 1..15, masked: nothing read or written past n */
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 y = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), cut);
        _mm512_mask_storeu_ps(x + i, k, y);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, y));
    }
    return _mm512_reduce_add_ps(acc);
}
#endif

/* log(FLT_MIN): the AVX-512 exp's own zero below the normal range. */
#define VEXP_LOG_FLT_MIN (-87.3365447504f)

float attn__vexp_sum_f32(float *x, int64_t n, float m) {
#if ATTN_AVX512_KERNELS
    if (__builtin_cpu_supports("avx512f"))
        return vexp_sum_avx512(x, n, m, VEXP_LOG_FLT_MIN);
#endif
    return vexp_sum_lanes(x, n, m);
}

/*
 * The row maximum through the integers: a float's bits b map to the key
 * b ^ ((b >> 31) & 0x7fffffff), which orders as the floats do (-0 just below +0),
 * and a NaN maps to INT32_MIN, below every key, so NaN is skipped. An integer max
 * reduction is one the vectorizer takes (a float one it may not reorder), so the
 * AVX2 and AVX-512 clones run 8 or 16 lanes without branches; n == 0 or an all-NaN
 * row gives -inf.
 */
ATTN_CLONES float attn__vmax_f32(const float *x, int64_t n) {
    int32_t mx = INT32_MIN;
    for (int64_t i = 0; i < n; ++i) {
        int32_t b;
        memcpy(&b, x + i, sizeof b);
        int32_t nan = (0x7f800000 - (b & 0x7fffffff)) >> 31; /* all ones for NaN */
        int32_t k = (b ^ ((b >> 31) & 0x7fffffff)) | nan;
        k &= ~nan | INT32_MIN;
        mx = k > mx ? k : mx;
    }
    if (mx == INT32_MIN)
        return -INFINITY;
    int32_t b = mx ^ ((mx >> 31) & 0x7fffffff);
    float r;
    memcpy(&r, &b, sizeof r);
    return r;
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

/* The f64 maximum, by the same integer keys. */
ATTN_CLONES double attn__vmax_f64(const double *x, int64_t n) {
    const int64_t mag = INT64_MAX, inf = 0x7ff0000000000000LL;
    int64_t mx = INT64_MIN;
    for (int64_t i = 0; i < n; ++i) {
        int64_t b;
        memcpy(&b, x + i, sizeof b);
        int64_t nan = (inf - (b & mag)) >> 63;
        int64_t k = (b ^ ((b >> 63) & mag)) | nan;
        k &= ~nan | INT64_MIN;
        mx = k > mx ? k : mx;
    }
    if (mx == INT64_MIN)
        return -INFINITY;
    int64_t b = mx ^ ((mx >> 63) & mag);
    double r;
    memcpy(&r, &b, sizeof r);
    return r;
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

/*
 * The attention tiles' probabilities: exp(s - m) below 2^-64 is 0 (below -44.36).
 * A row's largest term is 1, so what is dropped is under 2^-64 relative per key,
 * far below float's 2^-24; what it avoids is P near FLT_MIN, whose products with v in
 * the tile GEMMs are subnormal and take a microcode assist each (an ALiBi slope of
 * 0.3 made a T 1024 call 2.8x slower).
 */
#define VEXP_ATTN_CUT (-44.3614195558365f) /* -64 ln 2 */

float attn__vexp_tail_f32(float *x, int64_t lim, int64_t n, float m) {
    float s;
#if ATTN_AVX512_KERNELS
    if (__builtin_cpu_supports("avx512f"))
        s = vexp_sum_avx512(x, lim, m, VEXP_ATTN_CUT);
    else
#endif
        s = vexp_sum_lanes_cut(x, lim, m, VEXP_ATTN_CUT);
    if (n > lim)
        memset(x + lim, 0, (size_t)(n - lim) * sizeof *x);
    return s;
}

static ATTN_CLONES double vexp_sum_lanes_f64(double *x, int64_t n, double m) {
    double acc[LANES / 2] = {0};
    int64_t i = 0;
    for (; i + LANES / 2 <= n; i += LANES / 2)
        for (int k = 0; k < LANES / 2; ++k) {
            double y = exp_f64(x[i + k] - m);
            x[i + k] = y;
            acc[k] += y;
        }
    double s = 0.0;
    for (; i < n; ++i) {
        x[i] = exp_f64(x[i] - m);
        s += x[i];
    }
    for (int k = 0; k < LANES / 2; ++k)
        s += acc[k];
    return s;
}

#if ATTN_AVX512_KERNELS
/*
 * The AVX-512 f64 exp: exp_f64's n, r and polynomial step for step, 2^n by vscalefpd,
 * lanes below -708.39 (results under DBL_MIN) zeroed by its mask, NaN passed through,
 * as in exp16.
 */
__attribute__((target("avx512f"))) static inline __m512d exp8(__m512d d) {
    static const double c[13] = {
        1.6059043836821614599e-10, 2.0876756987868098979e-09, 2.5052108385441718775e-08,
        2.7557319223985890653e-07, 2.7557319223985890653e-06, 2.4801587301587301587e-05,
        1.9841269841269841270e-04, 1.3888888888888888889e-03, 8.3333333333333333333e-03,
        4.1666666666666666667e-02, 1.6666666666666666667e-01, 0.5};
    const __m512d lo = _mm512_set1_pd(-708.39);
    __mmask8 live = _mm512_cmp_pd_mask(d, lo, _CMP_NLT_UQ);
    d = _mm512_min_pd(_mm512_set1_pd(710.0), d);
    d = _mm512_max_pd(lo, d);
    const __m512d shifter = _mm512_set1_pd(6755399441055744.0);
    __m512d n = _mm512_sub_pd(
        _mm512_fmadd_pd(d, _mm512_set1_pd(1.4426950408889634074), shifter), shifter);
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.93147180369123816490e-01), d);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.90821492927058770002e-10), r);
    __m512d p = _mm512_set1_pd(c[0]);
    for (int k = 1; k < 12; ++k)
        p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c[k]));
    __m512d y = _mm512_add_pd(_mm512_fmadd_pd(p, _mm512_mul_pd(r, r), r), _mm512_set1_pd(1.0));
    return _mm512_maskz_scalef_pd(live, y, n);
}

__attribute__((target("avx512f"))) static double vexp_sum_avx512_f64(double *x, int64_t n,
                                                                    double m) {
    const __m512d vm = _mm512_set1_pd(m);
    __m512d acc = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d y = exp8(_mm512_sub_pd(_mm512_loadu_pd(x + i), vm));
        _mm512_storeu_pd(x + i, y);
        acc = _mm512_add_pd(acc, y);
    }
    if (i < n) {
        __mmask8 k = (__mmask8)((1u << (n - i)) - 1);
        __m512d y = exp8(_mm512_sub_pd(_mm512_maskz_loadu_pd(k, x + i), vm));
        _mm512_mask_storeu_pd(x + i, k, y);
        acc = _mm512_add_pd(acc, _mm512_maskz_mov_pd(k, y));
    }
    return _mm512_reduce_add_pd(acc);
}
#endif

double attn__vexp_tail_f64(double *x, int64_t lim, int64_t n, double m) {
    double s;
#if ATTN_AVX512_KERNELS
    if (__builtin_cpu_supports("avx512f"))
        s = vexp_sum_avx512_f64(x, lim, m);
    else
#endif
        s = vexp_sum_lanes_f64(x, lim, m);
    if (n > lim)
        memset(x + lim, 0, (size_t)(n - lim) * sizeof *x);
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
