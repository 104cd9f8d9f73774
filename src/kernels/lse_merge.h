/* SPDX-License-Identifier: MIT */
/* The lse merge of partial attention results: one routine for split-KV decode and ring
 * attention. */
#ifndef ATTN_LSE_MERGE_H
#define ATTN_LSE_MERGE_H

#include "kernels/sdpa_internal.h" /* ATTN__SDPA_LSE_EMPTY */

/*
 * Fold one partial result into a running one, one row. o (Dv, element
 * stride so) is the running output with running lse *run (double); p (Dv,
 * contiguous) is a piece computed over another set of keys, with lse l:
 *   m = max(run, l), a = e^(run - m), c = e^(l - m),
 *   o := (a o + c p) / (a + c),  run := m + log(a + c)
 * (Milakov and Gimelshein's online softmax, block-wise; FlashDecoding's
 * split-KV reduction is the same algebra). A piece that saw no key
 * (l = ATTN__SDPA_LSE_EMPTY) is skipped; the first real piece of a row is
 * copied exactly. NaN in l fails both tests and propagates.
 * Used by the decode kernel (src/kernels/sdpa_decode.c) across the splits of
 * a row's keys, and by ring attention (src/ring) across the ranks' blocks.
 */
ATTN_HIDDEN void attn__lse_merge_row_f32(float *o, int64_t so, double *run, const float *p,
                                         double l, int64_t Dv);
ATTN_HIDDEN void attn__lse_merge_row_f64(double *o, int64_t so, double *run, const double *p,
                                         double l, int64_t Dv);

#endif
