/* SPDX-License-Identifier: MIT */
/* Positional encodings (sinusoidal, learned tables, RoPE) and image patchify. */
#ifndef ATTN_POSENC_H
#define ATTN_POSENC_H

#include <stdint.h>

#include "attn/export.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: B batch, T sequence, C model width, H heads, D head
 * width. Views are F32 or F64 (ATTN_EDTYPE otherwise or when mixed), any
 * strides. On any non-OK status no output element has been written.
 * Outputs must not broadcast or overlap themselves (ATTN_ESTRIDE) nor overlap
 * an input (ATTN_EALIAS).
 */

/**
 * Sinusoidal position table (Vaswani et al. 2017; the lesson-11 seed's
 * sinusoidal_positions): out (T, C) with, for t < T and i < C/2,
 *   out[t, 2i]     = sin(t * f_i),
 *   out[t, 2i + 1] = cos(t * f_i),   f_i = exp(-ln(base) * 2i / C).
 * base 0 means 10000. Computed in double and rounded once to out's dtype
 * (the seed computes in float32; the two agree to a few float ulps).
 * Returns ATTN_OK, ATTN_EINVAL (out NULL or malformed, C odd, base negative,
 * NaN or infinite), ATTN_EDTYPE, ATTN_ESHAPE (out not 2-D), ATTN_ESTRIDE.
 * Since 0.1.
 */
ATTN_API attn_status attn_posenc_sinusoidal(double base, attn_view *out);

/**
 * Learned (or any precomputed) additive positions: x (B, T, C) or (T, C)
 * gets x[..., t, :] += table[offset + t, :] for t < T, table (Tmax, C).
 * offset >= 0 lets a decoder add positions offset.. to a chunk of new
 * tokens. x is updated in place and must not overlap the table.
 * Returns ATTN_OK, ATTN_EINVAL (NULL or malformed view, offset < 0),
 * ATTN_EDTYPE, ATTN_ESHAPE (x not 2-D/3-D, table not 2-D, widths differ),
 * ATTN_ERANGE (offset + T > Tmax), ATTN_ESTRIDE, ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_posenc_add(int64_t offset, const attn_view *table, attn_view *x);

/**
 * Backward of attn_posenc_add: dtable[offset + t, :] += sum over the batch
 * of dx[..., t, :] (accumulating; the sum in double); rows of dtable outside
 * offset..offset+T-1 are untouched. dx (B, T, C) or (T, C), dtable (Tmax, C);
 * the gradient wrt x is dx itself. Statuses as attn_posenc_add. Since 0.1.
 */
ATTN_API attn_status attn_posenc_add_backward(int64_t offset, const attn_view *dx,
                                              attn_view *dtable);

/** Which feature pairs RoPE rotates together. */
typedef enum attn_rope_style {
    ATTN_ROPE_INTERLEAVED = 0, /* pairs (2i, 2i+1): RoFormer paper, GPT-J, Meta's LLaMA code */
    ATTN_ROPE_HALF = 1         /* pairs (i, i + D/2): GPT-NeoX, Hugging Face LLaMA */
} attn_rope_style;

/**
 * Rotary position embedding (Su et al., RoFormer, 2021), in place on
 * x (..., T, D), e.g. (B, H, T, D) queries or keys: position p = offset + t,
 * for each pair (a, b) = pair i of the style, i < D/2,
 *   theta = p * base^(-2i / D),
 *   (a, b) := (a cos(theta) - b sin(theta), a sin(theta) + b cos(theta)).
 * base 0 means 10000. Angles, sines and cosines in double; each row keeps
 * its norm, and q . k after RoPE depends only on the difference of their
 * positions. x has 2 to 4 dims.
 * Returns ATTN_OK, ATTN_EINVAL (x NULL or malformed, bad style, D odd,
 * offset < 0, base negative or not finite), ATTN_EDTYPE, ATTN_ESHAPE
 * (x 1-D), ATTN_ERANGE (offset + T overflows), ATTN_ESTRIDE (x overlaps
 * itself). Since 0.1.
 */
ATTN_API attn_status attn_rope(attn_rope_style style, double base, int64_t offset,
                               attn_view *x);

/**
 * Backward of attn_rope, in place like the forward: on entry dx holds the
 * gradient with respect to RoPE's output, on return the gradient with
 * respect to its input, i.e. every pair rotated by -theta (the transpose of
 * the forward rotation). Because the forward overwrites its input, this is
 * the one backward in attn that transforms instead of accumulating.
 * Same arguments and statuses as attn_rope. Since 0.1.
 */
ATTN_API attn_status attn_rope_backward(attn_rope_style style, double base, int64_t offset,
                                        attn_view *dx);

/**
 * ALiBi's standard slopes (Press et al., "Train Short, Test Long", 2022;
 * BLOOM's and ggml's formula) for H heads, into slopes (H), F32 or F64:
 * with n = 2^floor(log2 H), m0 = 2^(-max_bias / n), m1 = 2^(-max_bias / 2n),
 *   slopes[h] = m0^(h + 1)              for h < n,
 *   slopes[h] = m1^(2 (h - n) + 1)      for h >= n (H not a power of two).
 * max_bias 0 means 8 (BLOOM, MPT; ggml's max_bias). H = 8 gives 1/2, 1/4, ...
 * 1/256. Pass the view as attn_sdpa_opts.alibi. Computed in double.
 * Returns ATTN_OK, ATTN_EINVAL (slopes NULL or malformed, max_bias negative or
 * not finite), ATTN_EDTYPE, ATTN_ESHAPE (slopes not 1-D or empty),
 * ATTN_ESTRIDE (slopes overlaps itself). Since 0.2.
 */
ATTN_API attn_status attn_alibi_slopes(attn_view *slopes, double max_bias);

/**
 * Cut an image into P x P patch tokens (the ViT seed's patchify):
 *   image (H, W)             -> out (N, P*P),
 *   image (Ch, H, W)         -> out (N, Ch*P*P),
 *   image (B, Ch, H, W)      -> out (B, N, Ch*P*P),
 * N = (H/P) (W/P). Patches go in row-major order (patch n covers rows
 * (n / (W/P)) P.. and columns (n % (W/P)) P..); each token is its patch
 * flattened channel-major, then row-major:
 *   out[n, c P^2 + i P + j] = image[c, (n / (W/P)) P + i, (n % (W/P)) P + j],
 * the order of PyTorch's unfold and of a ViT's P-stride convolution weights
 * (Ch, P, P) flattened. A pure copy: the result is exact in either dtype.
 * Returns ATTN_OK, ATTN_EINVAL (NULL or malformed view, P < 1),
 * ATTN_EDTYPE, ATTN_ESHAPE (image not 2-4-D, H or W not divisible by P, out
 * of the wrong shape), ATTN_ESTRIDE, ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_patchify(int64_t p, const attn_view *image, attn_view *out);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_POSENC_H */
