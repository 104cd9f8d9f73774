/* SPDX-License-Identifier: MIT */
/* The lse merge of partial attention results: one routine for split-KV decode and ring attention. */
#ifndef ATTN_LSE_MERGE_H
#define ATTN_LSE_MERGE_H

#include <math.h>
#include <stdint.h>

#include "kernels/sdpa_internal.h" /* ATTN__SDPA_LSE_EMPTY */

/*
 * Fold one partial result into a running one, row by row. o (Dv, element
 * stride so) is the running output with running lse *run (double); p (Dv,
 * contiguous) is a piece computed over another set of keys with lse l:
 *   m = max(run, l), a = e^(run - m), c = e^(l - m),
 *   o := (a o + c p) / (a + c),  run := m + log(a + c)
 * (Milakov and Gimelshein's online softmax, block-wise; the same algebra as
 * FlashDecoding's split-KV reduction). A piece that saw no key
 * (l = ATTN__SDPA_LSE_EMPTY) is skipped; the first real piece of a row is
 * copied exactly. NaN in l fails both tests and propagates.
 * Header-only (static inline) so that attn_mpi, a separate library that
 * sees only attn's exported symbols, compiles the very same routine.
 */
#define T         float
#define SFX(name) name##_f32
#include "tmpl/lse_merge.h"
#undef T
#undef SFX
#define T         double
#define SFX(name) name##_f64
#include "tmpl/lse_merge.h"
#undef T
#undef SFX

#endif
