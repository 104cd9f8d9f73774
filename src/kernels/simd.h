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

/*
 * exp(xc) * 2^bias by Cephes' expf scheme, for xc already clamped by the caller so that
 * n + 127 + bias is a normal exponent: n = round(xc log2 e) by the 1.5*2^23 shifter,
 * r = xc - n ln2 in two parts (ln2_hi has 9 bits, so n ln2_hi is exact), exp(r) by a
 * degree-7 polynomial on |r| <= ln2/2 (relative error about 1e-7), times 2^(n + bias)
 * built in the exponent bits. Inlined, so each caller's clones and fp-contract apply.
 */
static inline __attribute__((always_inline)) float attn__exp_core_f32(float xc, int bias) {
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
    int32_t bits = ((int32_t)n + 127 + bias) * (1 << 23);
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return y * two_n;
}

#endif
