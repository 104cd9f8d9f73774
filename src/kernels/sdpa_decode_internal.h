/* SPDX-License-Identifier: MIT */
/* The split-KV decode kernel's validated plan and run function (used by the cached steps). */
#ifndef ATTN_SDPA_DECODE_INTERNAL_H
#define ATTN_SDPA_DECODE_INTERNAL_H

#include "kernels/sdpa_internal.h"

/*
 * A few query rows of batch b against the keys 0..klen[b]-1 of a cache
 * k, v (B, Hkv, Tmax, D). Query row i sits at absolute position
 * qpos0[b] + i; causal: key j visible iff j <= qpos0[b] + i. Rows
 * i >= nrows[b] are skipped (out 0, lse empty). keep and bias (when set) are
 * broadcast to (B, H, Tq, Tmax) and indexed by absolute key position.
 */
typedef struct attn__decode_plan {
    attn_dtype dt;
    int64_t B, H, Hkv, G, Tq, D, Tmax;
    double scale;
    bool causal;
    const int64_t *klen, *qpos0, *nrows; /* (B) each; nrows NULL = Tq */
    bool has_keep, has_bias;
    attn_view keep, bias;
    /* the attention variants (docs/numerics.md), positions absolute: query row i of
       batch b at qpos0[b] + i, key j at j */
    bool window;
    int64_t wl, wr;
    double softcap;
    bool has_alibi, has_sinks;
    attn_view alibi, sinks; /* (H) */
    int threads;    /* attn's threads for this call (resolved, >= 1) */
    int64_t split;  /* keys per split requested (0 = automatic) */
    int64_t nsplit; /* splits per (b, kv head), the most any call of this plan uses */
    size_t per_thread, off_part, off_lse, off_pos,
        total; /* off_lse: max, sum per split row; off_pos: (B) int64 */
} attn__decode_plan;

/* Rows of queries (G heads x Tq) one task handles together: above this, use attn_sdpa. */
#define ATTN__DECODE_MAX_ROWS 64

/* The variants of a decode call, validated (attn__check_variants). */
typedef struct attn__decode_variants {
    bool window;
    int64_t wl, wr;
    double softcap;
    const attn_view *alibi, *sinks;
} attn__decode_variants;

/*
 * A plan for queries of the shapes d (d.Tk is the cache's Tmax; k and v share
 * one shape, d.Dv == d.D, d.Hkv >= 1) from validated arguments: scale (0 ->
 * 1/sqrt(D)), causal, keep and bias already broadcast to (B, H, Tq, Tmax) or
 * NULL, the variants (NULL: none), split and threads (>= 0). Fills the
 * derived fields (threads, nsplit,
 * workspace layout; ATTN_ERANGE when a size overflows). The layout depends
 * only on the shapes and options, never on the lengths, so one workspace
 * serves every step of a decoding loop; the caller sets klen, qpos0 and nrows
 * before each run.
 */
ATTN_HIDDEN attn_status attn__decode_plan_init(attn__decode_plan *p, const attn__qkv *d,
                                               double scale, bool causal, const attn_view *keep,
                                               const attn_view *bias,
                                               const attn__decode_variants *var, int64_t split,
                                               int threads);

/* Run a laid-out plan: q (B, H, Tq, D), out (B, H, Tq, D), lse (B, H, Tq) or NULL. */
ATTN_HIDDEN attn_status attn__decode_run(const attn__decode_plan *p, const attn_view *q,
                                         const attn_view *k, const attn_view *v,
                                         const attn_view *out, const attn_view *lse,
                                         void *work);

#endif
