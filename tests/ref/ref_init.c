/* SPDX-License-Identifier: MIT */
/* Reference generator (Philox4x32-10 from the paper) and orthogonal init by Gram-Schmidt. */
#include <math.h>
#include <stdlib.h>

#include "ref.h"

void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    /* round keys k_r = key + r * (golden ratio, sqrt(3) - 1) words, mod 2^32 */
    uint32_t rk[10][2];
    for (uint32_t r = 0; r < 10; ++r) {
        rk[r][0] = key[0] + r * UINT32_C(0x9E3779B9);
        rk[r][1] = key[1] + r * UINT32_C(0xBB67AE85);
    }
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    for (int r = 0; r < 10; ++r) {
        uint64_t a = (uint64_t)UINT32_C(0xD2511F53) * c[0];
        uint64_t b = (uint64_t)UINT32_C(0xCD9E8D57) * c[2];
        uint32_t n[4] = {(uint32_t)(b >> 32) ^ c[1] ^ rk[r][0], (uint32_t)(b & 0xFFFFFFFFu),
                         (uint32_t)(a >> 32) ^ c[3] ^ rk[r][1], (uint32_t)(a & 0xFFFFFFFFu)};
        for (int k = 0; k < 4; ++k)
            c[k] = n[k];
    }
    for (int k = 0; k < 4; ++k)
        out[k] = c[k];
}

uint64_t ref_rng_bits(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t j = i / 2;
    uint32_t ctr[4] = {(uint32_t)(j & 0xFFFFFFFFu), (uint32_t)(j >> 32),
                       (uint32_t)(stream & 0xFFFFFFFFu), (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)(seed & 0xFFFFFFFFu), (uint32_t)(seed >> 32)};
    uint32_t x[4];
    ref_philox(ctr, key, x);
    int h = (int)(i % 2) * 2;
    return ((uint64_t)x[h + 1] << 32) + x[h];
}

double ref_uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
    return ldexp((double)(ref_rng_bits(seed, stream, i) >> 11), -53);
}

double ref_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t e = i - i % 2;
    double u1 = ldexp((double)((ref_rng_bits(seed, stream, e) >> 11) + 1), -53);
    double u2 = ldexp((double)(ref_rng_bits(seed, stream, e + 1) >> 11), -53);
    double r = sqrt(-2.0 * log(u1));
    return i % 2 ? r * sin(2.0 * 3.141592653589793 * u2)
                 : r * cos(2.0 * 3.141592653589793 * u2);
}

void ref_orthogonal(double gain, uint64_t seed, uint64_t stream, int64_t m, int64_t n,
                    double *w) {
    int tall = m >= n;
    int64_t p = tall ? m : n, q = tall ? n : m;
    /* columns of A: a[c][r], A = G or G^T, G[i][j] = normal(i n + j) */
    double *a = malloc(sizeof(double) * (size_t)(p * q + 1));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double g = ref_normal(seed, stream, (uint64_t)(i * n + j));
            if (tall)
                a[j * p + i] = g;
            else
                a[i * p + j] = g;
        }
    for (int64_t c = 0; c < q; ++c) {
        double *v = a + c * p;
        for (int pass = 0; pass < 2; ++pass) /* CGS2: project out earlier columns twice */
            for (int64_t k = 0; k < c; ++k) {
                const double *u = a + k * p;
                double d = 0;
                for (int64_t r = 0; r < p; ++r)
                    d += u[r] * v[r];
                for (int64_t r = 0; r < p; ++r)
                    v[r] -= d * u[r];
            }
        double nrm = 0;
        for (int64_t r = 0; r < p; ++r)
            nrm += v[r] * v[r];
        nrm = sqrt(nrm);
        for (int64_t r = 0; r < p; ++r)
            v[r] /= nrm;
    }
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            w[i * n + j] = gain * (tall ? a[j * p + i] : a[i * p + j]);
    free(a);
}
