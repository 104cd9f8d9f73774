/* SPDX-License-Identifier: MIT */
/* Reproducible initialization: a counter-based RNG (Philox4x32-10) and weight initializers. */
#ifndef ATTN_INIT_H
#define ATTN_INIT_H

#include <stddef.h>
#include <stdint.h>

#include "attn/export.h"
#include "attn/layers.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: B batch, T sequence, C model width, H heads, Hkv
 * key/value heads, D head width, F feed-forward width.
 *
 * The generator. Random value i of the stream (seed, stream) is a pure
 * function of (seed, stream, i): no state, no dependence on thread count,
 * call order or machine. It is Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11), used as
 *
 *   key = (seed mod 2^32, seed >> 32)
 *   ctr = (j mod 2^32, j >> 32, stream mod 2^32, stream >> 32),  j = i >> 1
 *   (x0, x1, x2, x3) = philox4x32_10(ctr, key)
 *   bits(i) = i even ? x0 | x1 << 32 : x2 | x3 << 32        (64-bit words)
 *
 * Distributions, exactly (so other languages can reproduce them):
 *   uniform(i) = (bits(i) >> 11) * 2^-53                      in [0, 1)
 *   normal(i)  = Box-Muller on the block j = i >> 1:
 *       u1 = ((bits(2j) >> 11) + 1) * 2^-53 in (0, 1],  u2 = (bits(2j+1) >> 11) * 2^-53,
 *       r = sqrt(-2 log u1),  normal(2j) = r cos(2 pi u2),  normal(2j+1) = r sin(2 pi u2)
 * A fill writes value offset + k to the element whose row-major logical
 * index is k, whatever the strides: a transposed view receives the
 * transposed matrix of the same values, and two halves of a view filled
 * separately (the second with offset = numel of the first) equal one fill.
 * Values are computed in double; an F32 view receives them rounded to
 * float. Uniform bits are identical everywhere; normals go through libm's
 * log, sin and cos, so they are bit-identical for one libm (glibc) and
 * agree to an ulp or two across libms.
 *
 * Use different stream ids for different tensors (a uniform and a normal
 * fill of the same stream share their bits).
 */

/**
 * The Philox4x32-10 block function: out = philox(ctr, key), ten rounds
 * with the published multipliers 0xD2511F53, 0xCD9E8D57 and Weyl constants
 * 0x9E3779B9, 0xBB67AE85. Matches Random123's known-answer vectors. out may
 * alias ctr. Since 0.1.
 */
ATTN_API void attn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/** bits(i) of stream (seed, stream), as defined above. Since 0.1. */
ATTN_API uint64_t attn_rng_bits(uint64_t seed, uint64_t stream, uint64_t i);

/**
 * x[k] = lo + (hi - lo) * uniform(offset + k), k the row-major logical
 * index of the element, so every value is in [lo, hi) (a value that would
 * round to hi is replaced by the largest value of the dtype below hi; for
 * F32, by the nearest float inside [lo, hi)).
 * x: any shape, any strides (negative included), F32 or F64.
 * Returns ATTN_EINVAL (x NULL; lo or hi not finite; lo >= hi, or no float
 * in [lo, hi) for F32), ATTN_EDTYPE (U8), ATTN_ESTRIDE (x broadcasts or
 * overlaps itself), ATTN_ERANGE (the indices offset .. offset + numel - 1
 * wrap around 2^64; hi - lo overflows; for F32, lo or hi beyond FLT_MAX).
 * Nothing is written on error.
 * Since 0.1.
 */
ATTN_API attn_status attn_init_uniform(uint64_t seed, uint64_t stream, uint64_t offset,
                                       double lo, double hi, attn_view *x);

/**
 * x[k] = mean + std * normal(offset + k), k the row-major logical index.
 * Same views and statuses as attn_init_uniform; ATTN_EINVAL for mean or
 * std not finite or std < 0; ATTN_ERANGE when |mean| + 9 std (normal()
 * never exceeds 8.6 in magnitude) is beyond the dtype's range. Since 0.1.
 */
ATTN_API attn_status attn_init_normal(uint64_t seed, uint64_t stream, uint64_t offset,
                                      double mean, double std, attn_view *x);

/** Distribution of a scaled initializer. */
typedef enum attn_init_dist { ATTN_INIT_UNIFORM = 0, ATTN_INIT_NORMAL = 1 } attn_init_dist;

/**
 * Xavier/Glorot initialization (Glorot & Bengio 2010) of a weight w of
 * shape (in, out), the layers' y = x W convention: fan_in = in,
 * fan_out = out (a PyTorch (out, in) weight viewed transposed has the same
 * fans). gain 0 means 1.
 *   ATTN_INIT_UNIFORM: U(-a, a),      a = gain sqrt(6 / (fan_in + fan_out))
 *   ATTN_INIT_NORMAL:  N(0, s^2),     s = gain sqrt(2 / (fan_in + fan_out))
 * Values are drawn as by attn_init_uniform / attn_init_normal with offset 0.
 * Returns the statuses of those, and ATTN_EINVAL (bad dist, gain < 0 or
 * not finite), ATTN_ESHAPE (w not 2-D). Since 0.1.
 */
ATTN_API attn_status attn_init_xavier(attn_init_dist dist, double gain, uint64_t seed,
                                      uint64_t stream, attn_view *w);

/**
 * Kaiming/He initialization (He et al. 2015), fan_in mode, of a weight w
 * (in, out): fan_in = in. gain 0 means sqrt(2), the ReLU gain.
 *   ATTN_INIT_UNIFORM: U(-a, a),      a = gain sqrt(3 / fan_in)
 *   ATTN_INIT_NORMAL:  N(0, s^2),     s = gain / sqrt(fan_in)
 * Statuses as attn_init_xavier. Since 0.1.
 */
ATTN_API attn_status attn_init_kaiming(attn_init_dist dist, double gain, uint64_t seed,
                                       uint64_t stream, attn_view *w);

/**
 * Orthogonal initialization (Saxe et al. 2014), Haar-distributed. For w of
 * shape (m, n): G = the (m, n) standard normal matrix, G[i][j] =
 * normal(i n + j) of (seed, stream). With p = max(m, n), q = min(m, n):
 * A = G (m >= n) or G^T (m < n), a (p, q) matrix; LAPACKE dgeqrf + dorgqr
 * give A = Q R with Q (p, q), orthonormal columns; the columns are
 * multiplied by sign(R_jj) (sign(0) = +1) so that R has a positive
 * diagonal, which makes the factorization unique and Q Haar-uniform
 * (Mezzadri 2007). Then w = gain Q (m >= n: w^T w = gain^2 I) or
 * w = gain Q^T (m < n: w w^T = gain^2 I). gain 0 means 1. Computed in
 * double for both dtypes; an F32 w receives the rounded result.
 * w: 2-D, any strides. Workspace: attn_init_orthogonal_workspace_size(w)
 * bytes; work == NULL && work_size == 0 allocates. info (may be NULL) is
 * always written: LAPACK's info of the failing routine on ATTN_ELAPACK,
 * else 0.
 * Returns ATTN_EINVAL (w NULL, gain < 0 or not finite), ATTN_EDTYPE,
 * ATTN_ESHAPE (not 2-D), ATTN_ESTRIDE (w broadcasts or overlaps itself),
 * ATTN_ERANGE (a dim or LAPACK's workspace beyond INT_MAX), ATTN_EWORKSPACE,
 * ATTN_ENOMEM, ATTN_ELAPACK. Nothing is written to w on error. Since 0.1.
 */
ATTN_API attn_status attn_init_orthogonal(double gain, uint64_t seed, uint64_t stream,
                                          attn_view *w, void *work, size_t work_size,
                                          int *info);

/** Bytes of workspace attn_init_orthogonal needs for w; 0 if w is invalid. Since 0.1. */
ATTN_API size_t attn_init_orthogonal_workspace_size(const attn_view *w);

/**
 * Stream ids of the layer helpers below: each tensor has its own fixed id,
 * so adding a tensor never changes the values of the others, and an
 * encoder's MHA and FFN weights equal those of a standalone MHA / FFN
 * initialized with the same seed.
 */
typedef enum attn_param_stream {
    ATTN_STREAM_WQ = 1,
    ATTN_STREAM_WK = 2,
    ATTN_STREAM_WV = 3,
    ATTN_STREAM_WO = 4,
    ATTN_STREAM_W1 = 5,
    ATTN_STREAM_W2 = 6
} attn_param_stream;

/**
 * Initialize a bound MHA parameter struct from one seed: every weight
 * Xavier-uniform (gain 1) from its own stream (ATTN_STREAM_WQ..WO), biases
 * (when cfg->bias) zero. p must be bound for cfg (attn_mha_params_bind, or
 * views of the same shapes and dtype). Returns the statuses of
 * attn_mha_config_resolve, ATTN_EINVAL (p NULL), ATTN_EDTYPE, ATTN_ESHAPE
 * (a view that does not match cfg), ATTN_ESTRIDE (a view broadcasts or
 * overlaps itself). Nothing is written on error.
 * The fans are those of each (in, out) weight: Wq (C, H*D) has fan_in C,
 * fan_out H*D (PyTorch instead scales its fused (3C, C) in_proj as one
 * matrix). For a stack of layers give each layer its own seed. Since 0.1.
 */
ATTN_API attn_status attn_mha_params_init(const attn_mha_config *cfg, attn_mha_params *p,
                                          uint64_t seed);

/** The same for an FFN: w1, w2 Xavier-uniform (ATTN_STREAM_W1, W2), biases zero. Since 0.1. */
ATTN_API attn_status attn_ffn_params_init(const attn_ffn_config *cfg, attn_ffn_params *p,
                                          uint64_t seed);

/**
 * The same for an encoder block: its MHA and FFN as above (same streams),
 * LayerNorm gamma 1 and beta 0 when cfg->ln_affine. Since 0.1.
 */
ATTN_API attn_status attn_encoder_params_init(const attn_encoder_config *cfg,
                                              attn_encoder_params *p, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_INIT_H */
