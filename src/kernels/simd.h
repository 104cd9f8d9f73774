/* SPDX-License-Identifier: MIT */
/* What the vectorized kernels (vexp.c, vmath.c, sdpa_decode.c) share: the function
 * clones and the core of the float exp. */
#ifndef ATTN_KERNELS_SIMD_H
#define ATTN_KERNELS_SIMD_H

#include <stdint.h>
#include <string.h>

/* One build for every x86-64 CPU: SSE2 baseline, AVX2 and AVX-512 clones picked at load time.
 * (not with clang < 15: it names the ifunc "f.ifunc", so other files' calls do not link) */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) &&                          \
    (!defined(__clang__) || __clang_major__ >= 15)
#define ATTN_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define ATTN_CLONES
#endif

/* Where the clones are built, a few hot loops also have AVX-512 bodies written with
 * intrinsics (target attribute, chosen per call by __builtin_cpu_supports). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) &&                          \
    (!defined(__clang__) || __clang_major__ >= 15)
#define ATTN_AVX512_KERNELS 1
#include <immintrin.h>
#else
#define ATTN_AVX512_KERNELS 0
#endif

/*
 * exp(xc) * 2^bias by Cephes' expf scheme, for xc already clamped by the caller so that
 * n + 127 + bias is in [0, 255]: n = round(xc log2 e) by the 1.5*2^23 shifter,
 * r = xc - n ln2 in two parts (ln2_hi has 9 bits, so n ln2_hi is exact), exp(r) by a
 * degree-7 polynomial on |r| <= ln2/2 (relative error about 1e-7), times 2^(n + bias)
 * put in the exponent bits straight from the shifter's low bits (no float-to-int
 * conversion, so a NaN xc is no undefined behaviour: it gives NaN). An exponent field
 * of 0 makes the factor +0 and one of 255 makes it +inf, so n + 127 + bias = 0 or 255
 * gives exactly 0 or +inf. Inlined, so each caller's clones and fp-contract apply.
 */
static inline __attribute__((always_inline)) float attn__exp_core_f32(float xc, int bias) {
    const float shifter = 12582912.0f; /* 1.5 * 2^23: its bits are 0x4b400000 + n */
    float t = xc * 1.44269504088896341f + shifter, n = t - shifter;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4b400000u + 127u + (uint32_t)bias) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return y * two_n;
}

#endif
