/* SPDX-License-Identifier: MIT */
/* The softmax merge of partial attention results: one routine for split-KV decode and
 * ring attention. */
#ifndef ATTN_LSE_MERGE_H
#define ATTN_LSE_MERGE_H

#include "kernels/sdpa_internal.h" /* ATTN__SDPA_LSE_EMPTY */

/*
 * Fold one partial result into a running one, one row, by row max and sum
 * (never an lse, which loses log l at |logits| ~ 1e17 even in double:
 * docs/numerics.md "Backward at large logits"). o (Dv, element stride so) is
 * the running output with running max *rm and sum *rl (double, *rl = 0: no
 * key yet); p (Dv, contiguous) is a piece computed over another set of keys,
 * normalized, with its max m and sum l of e^(s - m):
 *   M = max(rm, m), a = rl e^(rm - M), c = l e^(m - M),
 *   o := (a o + c p) / (a + c),  (rm, rl) := (M, a + c)
 * (Milakov and Gimelshein's online softmax, block-wise; FlashDecoding's
 * split-KV reduction is the same algebra). A piece with l = 0 is skipped; the
 * first real piece of a row is copied exactly; NaN propagates. The one merge
 * of split-KV decode (src/tmpl/sdpa_decode.h) and ring attention
 * (src/tmpl/ring.h); the row's lse at the end is rm + log(rl).
 */
ATTN_FOR_MPI void attn__softmax_merge_row_f32(float *o, int64_t so, double *rm, double *rl,
                                             const float *p, double m, double l, int64_t Dv);
ATTN_FOR_MPI void attn__softmax_merge_row_f64(double *o, int64_t so, double *rm, double *rl,
                                             const double *p, double m, double l, int64_t Dv);

#endif
