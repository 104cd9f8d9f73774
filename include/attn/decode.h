/* SPDX-License-Identifier: MIT */
/* Incremental decoding: a caller-owned KV cache, the cached MHA step, the decoder block. */
#ifndef ATTN_DECODE_H
#define ATTN_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/export.h"
#include "attn/kernels.h"
#include "attn/layers.h"
#include "attn/posenc.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: B batch, T sequence, Tq new tokens of a step, Tmax the
 * cache's capacity in tokens, S memory (encoder output) length, C model
 * width, Cm memory width, H heads, Hkv key/value heads, D head width, F
 * feed-forward width. docs/decoding.md walks through prefill, decode and
 * batches of sequences of different lengths.
 *
 * A causal model generates one token at a time. Recomputing the prefix at
 * every step costs O(T^2) projections per token; a KV cache keeps every
 * past token's keys and values, so a step projects only its new tokens and
 * reads the cache once: O(Tq T) work, O(Tq) projections.
 *
 * Every function here validates all its arguments before its first write:
 * on any non-OK status no output, cache entry or cache length has changed.
 */

/* ---- the KV cache -------------------------------------------------------- */

/**
 * Keys and values of the tokens seen so far, memory owned by the caller:
 *   k, v: (B, Hkv, Tmax, D), F32 or F64, any strides (a slab bound by
 *         attn_kv_cache_bind, or the caller's own arrays, e.g. a Fortran
 *         (D, Tmax, Hkv, B) array viewed with no copy);
 *   len:  (B) tokens held per batch, 0 <= len[b] <= Tmax: positions
 *         0..len[b]-1 of batch b are valid, the rest is free.
 * Sequences of one batch may have different lengths; each step appends at
 * each batch's own len[b] and advances it. Resetting a sequence is
 * len[b] = 0 (the stale entries are never read). The same struct holds a
 * cross-attention memory's projected K/V (attn_decoder_memory), where
 * len[b] is the memory length of batch b.
 */
typedef struct attn_kv_cache {
    attn_view k, v; /* (B, Hkv, Tmax, D) */
    int64_t *len;   /* (B) */
} attn_kv_cache;

/**
 * Bytes of one slab holding a cache for cfg (its dtype, kv_heads, d_head)
 * of B sequences of up to Tmax tokens: k, v (B, Hkv, Tmax, D) contiguous
 * and len (B), each on a 64-byte boundary. 0 for an invalid config, B < 1,
 * Tmax < 1 or a size that overflows. Since 0.2.
 */
ATTN_API size_t attn_kv_cache_size(const attn_mha_config *cfg, int64_t B, int64_t Tmax);

/**
 * Carve k, v and len from slab (64-byte aligned, at least
 * attn_kv_cache_size bytes) and set every len[b] = 0. The entries of k and v
 * are left as they are (a step never reads past len). Returns ATTN_OK,
 * ATTN_EINVAL (cache NULL, invalid config, B < 1, Tmax < 1, slab NULL or
 * misaligned), ATTN_ERANGE (size overflows), ATTN_EWORKSPACE (slab_size too
 * small); on error *cache is untouched. Since 0.2.
 */
ATTN_API attn_status attn_kv_cache_bind(attn_kv_cache *cache, const attn_mha_config *cfg,
                                        int64_t B, int64_t Tmax, void *slab, size_t slab_size);

/**
 * Check a cache against cfg: k and v valid views of cfg's dtype (ATTN_EDTYPE)
 * and shape (B, Hkv, Tmax, D) for some B, Tmax >= 1 (ATTN_ESHAPE), len
 * non-NULL (ATTN_EINVAL) with 0 <= len[b] <= Tmax (ATTN_ERANGE), k and v not
 * overlapping themselves (ATTN_ESTRIDE), each other or len (ATTN_EALIAS).
 * Every step runs this. Since 0.2.
 */
ATTN_API attn_status attn_kv_cache_check(const attn_kv_cache *cache,
                                         const attn_mha_config *cfg);

/* ---- the cached multi-head attention step ---------------------------------- */

/** RoPE on the queries and keys of a self-attention (all-zero: no RoPE). */
typedef struct attn_rope_config {
    bool on;
    attn_rope_style style;
    double base; /* 0 -> 10000 */
} attn_rope_config;

/** Options of a cached step; all-zero means the defaults. New fields only at the end. */
typedef struct attn_step_opts {
    double scale;          /* 0 -> 1/sqrt(D); every attention of the call */
    const attn_view *keep; /* U8 (B|1, H|1, Tq, Tmax), 1 = may attend; key index is
                              the absolute position in the cache (self-attention only) */
    const attn_view *bias; /* additive, same broadcasting and indexing as keep */
    const int64_t *n_new;  /* (B) new tokens of batch b, 0 <= n_new[b] <= Tq: rows
                              n_new[b].. of x are padding; NULL = Tq for every batch */
    attn_rope_config rope; /* attn_mha_step only (a decoder takes it from its config) */
    int threads;           /* >= 0; 0 -> the BLAS's count; 1 -> BLAS too (guide "Threads") */
    int64_t split;         /* keys per split of the decode kernel; 0 -> automatic */
    /* attention variants as in attn_sdpa_opts (self-attention only), positions absolute:
       new token i of batch b at len[b] + i, key j at j */
    bool window;
    int64_t window_left, window_right;
    double softcap;
    const attn_view *alibi; /* (H) */
    const attn_view *sinks; /* (H) */
} attn_step_opts;

/**
 * One incremental step of causal multi-head self-attention with a cache.
 * For each batch b with L = cache->len[b] and n = n_new[b] new tokens
 * x[b, 0:n] (B, Tq, C), at absolute positions L..L+n-1:
 *   q = x Wq + bq, k = x Wk + bk, v = x Wv + bv        (heads as views)
 *   q, k := RoPE(q, k) at positions L + i             (opts.rope.on)
 *   cache.k[b, :, L:L+n] = k, cache.v[b, :, L:L+n] = v
 *   o_i = softmax(scale q_i K[b,:, 0:L+n]^T + bias + mask) V[b,:, 0:L+n]
 *   out[b, i] = concat_h(o_i) Wo + bo,   len[b] := L + n,
 * where query i sees keys j <= L + i (bottom-right causal alignment: the
 * same result as attn_mha_forward over the whole prefix with
 * ATTN_CAUSAL_TOP_LEFT, to rounding), masked further by keep and bias
 * (absolute key positions), and by the variants of opts (window, softcap,
 * ALiBi, sinks: docs/numerics.md, positions L + i and j). GQA: query head h
 * reads key/value head
 * h / (H / Hkv). Prefill (Tq = prompt length) and decode (Tq = 1) are the
 * same call. Rows i >= n_new[b] of out are 0 and append nothing.
 * The attention runs the split-KV decode kernel when Tq is small (each
 * (batch, kv head) row's keys split when B Hkv is below 8, by the shape
 * alone, partials merged through their lse) and attn_sdpa's tiles
 * otherwise. Cost: O(Tq C (H + Hkv) D) projections and O(Tq (L+Tq) H D)
 * attention: proportional to the new tokens times the prefix.
 * cfg: d_kv must equal d_model (self-attention). cache: for cfg
 * (attn_kv_cache_check), with the same B as x.
 * Aliasing: out must not overlap x, the parameters, the masks or the cache;
 * the cache must not overlap x, the parameters or the masks.
 * Workspace: attn_mha_step_workspace_size(cfg, x, cache, opts); NULL/0
 * allocates for the call (a serious decoding loop passes a workspace and
 * never allocates).
 * Returns ATTN_OK, ATTN_EINVAL (NULL argument, invalid config or d_kv !=
 * d_model, bad options: scale not finite, threads or split < 0, bad rope),
 * ATTN_EDTYPE, ATTN_ESHAPE (x not (B, Tq, C) with the cache's B, Tq < 1, a
 * parameter of the wrong shape, masks that do not broadcast), ATTN_ESTRIDE,
 * ATTN_EALIAS, ATTN_ERANGE (per-batch lengths: len[b] outside [0, Tmax],
 * n_new[b] outside [0, Tq], or len[b] + n_new[b] > Tmax: the cache would
 * overflow),
 * ATTN_EWORKSPACE, ATTN_ENOMEM. Since 0.2.
 */
ATTN_API attn_status attn_mha_step(const attn_mha_config *cfg, const attn_mha_params *p,
                                   const attn_step_opts *opts, const attn_view *x,
                                   attn_kv_cache *cache, attn_view *out, void *work,
                                   size_t work_size);

/** Bytes of workspace attn_mha_step needs (0 when the arguments are invalid). Since 0.2. */
ATTN_API size_t attn_mha_step_workspace_size(const attn_mha_config *cfg, const attn_view *x,
                                             const attn_kv_cache *cache,
                                             const attn_step_opts *opts);

/* ---- the split-KV decode kernel --------------------------------------------- */

/** Options of attn_sdpa_decode (all-zero: the defaults; new fields at the end). Since 0.2. */
typedef struct attn_decode_opts {
    double scale;          /* 0 -> 1/sqrt(D) */
    const attn_view *keep; /* U8 (B|1, H|1, Tq, Tmax), 1 = may attend; key index is the
                              absolute position in the cache */
    const attn_view *bias; /* additive, q's dtype, same broadcasting and indexing */
    int threads;           /* >= 0; 0 -> the BLAS's count; 1 -> BLAS too (guide "Threads") */
    int64_t split;         /* keys per split; 0 -> automatic */
    /* attention variants as in attn_sdpa_opts, query row i of batch b at absolute
       position p = len[b] - Tq + i, key j at j */
    bool window;
    int64_t window_left, window_right;
    double softcap;
    const attn_view *alibi; /* (H) */
    const attn_view *sinks; /* (H) */
} attn_decode_opts;

/**
 * Attention of a few queries against a cache: for batch b, query head h,
 * query row i (q (B, H, Tq, D)), keys 0..L-1 with L = len[b] (k, v
 * (B, Hkv, Tmax, D), Tmax >= L), and key j visible iff
 * j <= L - Tq + i (bottom-right causal; causal false: every j < L):
 *   out[b, h, i] = softmax_j(scale q_i . k_j + bias) v_j,   lse[b, h, i] = log sum exp,
 * with keep and bias (opts) masking as in attn_sdpa: keep = 0 or a -inf bias
 * hides key j, whatever its score (NaN included); and the variants of opts
 * (window, softcap, ALiBi, sinks; docs/numerics.md) with query row i at
 * position p = L - Tq + i and key j at j.
 * The keys of each (b, h) are cut into splits of opts->split keys (0 ->
 * about 8 (b, kv head, split) tasks when B Hkv is below 8, at least 256 keys
 * a split: by the shape alone, so the bits do not depend on the thread
 * count); each split's partial (out, lse) is merged through the lse, the
 * same merge as ring attention. One pass over K and V: memory bound.
 * Rows with no visible key give out 0, lse -1e30. lse may be NULL. out
 * (B, H, Tq, D) and lse must not overlap any input, the len array
 * included, and the masks (ATTN_EALIAS); k, v any strides. opts NULL: the
 * defaults.
 * Workspace: attn_sdpa_decode_workspace_size; NULL/0 allocates.
 * Returns ATTN_OK, ATTN_EINVAL (NULL q, k, v, len or out; scale not finite,
 * threads or split < 0), ATTN_EDTYPE (mixed dtypes, keep not U8, bias not
 * q's dtype), ATTN_ESHAPE (k and v of different shapes, Hkv < 1, H % Hkv,
 * Tq < 1, masks that do not broadcast), ATTN_ESTRIDE, ATTN_EALIAS, ATTN_ERANGE
 * (len[b] outside [0, Tmax], as every per-batch length), ATTN_EWORKSPACE,
 * ATTN_ENOMEM. Since 0.2.
 */
ATTN_API attn_status attn_sdpa_decode(const attn_view *q, const attn_view *k,
                                      const attn_view *v, const int64_t *len, bool causal,
                                      const attn_decode_opts *opts, attn_view *out,
                                      attn_view *lse, void *work, size_t work_size);

/** Bytes of workspace attn_sdpa_decode needs (0 when invalid). Since 0.2. */
ATTN_API size_t attn_sdpa_decode_workspace_size(const attn_view *q, const attn_view *k,
                                                const attn_view *v,
                                                const attn_decode_opts *opts);

/* ---- the decoder block ------------------------------------------------------ */

/**
 * nn.TransformerDecoderLayer: masked self-attention, cross-attention over an
 * encoder memory, feed-forward, each with a residual and a LayerNorm.
 * cross.heads == 0 (an all-zero cross config) means no cross-attention: a
 * decoder-only (GPT-style) block, whose ln2 is unused.
 */
typedef struct attn_decoder_config {
    attn_mha_config self_attn; /* d_kv must be d_model */
    attn_mha_config cross;     /* d_model must be self_attn's; d_kv = Cm (0 -> C) */
    attn_ffn_config ffn;       /* dtype and d_model must be self_attn's */
    double eps;                /* LayerNorm eps; 0 -> 1e-5 */
    attn_norm_order norm;      /* PRE: norm_first=True; POST: PyTorch's default */
    bool ln_affine;            /* LayerNorm gamma/beta present */
    attn_rope_config rope;     /* RoPE in the self-attention (not in PyTorch's layer) */
} attn_decoder_config;

typedef struct attn_decoder_params {
    attn_view ln1_g, ln1_b; /* (C) (C): PyTorch norm1; unused without ln_affine */
    attn_mha_params self_attn;
    attn_view ln2_g, ln2_b; /* norm2 */
    attn_mha_params cross;  /* PyTorch multihead_attn; unused without cross */
    attn_view ln3_g, ln3_b; /* norm3 */
    attn_ffn_params ffn;    /* linear1, linear2 */
} attn_decoder_params;

/**
 * Check a decoder config and fill in its defaults (out may be cfg).
 * ATTN_EINVAL for NULL, an invalid part, parts that disagree on dtype or
 * d_model, self_attn.d_kv != d_model, eps negative or not finite, a bad
 * norm order, bad rope (style, base, odd d_head). Since 0.2.
 */
ATTN_API attn_status attn_decoder_config_resolve(const attn_decoder_config *cfg,
                                                 attn_decoder_config *out);
/** Bytes of one decoder parameter slab (0 for an invalid config). Since 0.2. */
ATTN_API size_t attn_decoder_params_size(const attn_decoder_config *cfg);
/**
 * Carve, in order, ln1, the self-attention, ln2, the cross-attention, ln3,
 * the FFN from one slab, each tensor 64-byte aligned (absent parts take no
 * room; their views are zeroed). ATTN_EINVAL (NULL, invalid config, slab
 * misaligned), ATTN_EWORKSPACE (too small). The same call binds a gradient
 * struct. Since 0.2.
 */
ATTN_API attn_status attn_decoder_params_bind(attn_decoder_params *p,
                                              const attn_decoder_config *cfg, void *slab,
                                              size_t slab_size);
/** Number of scalars (-1 if invalid). Since 0.2. */
ATTN_API int64_t attn_decoder_param_count(const attn_decoder_config *cfg);

/**
 * What attn_decoder_backward needs from the forward, bound from one slab.
 * i = 0, 1, 2 are the three sub-blocks (self-attention, cross-attention,
 * FFN): ln_in[i] is LayerNorm i's input, ln_out[i] its output, mean/rstd its
 * statistics; q, k (after RoPE), v, concat and lse of each attention.
 * Pre-norm: ln_in = x, r1, r2; post-norm: ln_in = r1, r2, r3 (the residual
 * sums), and ln_out[2] is the output.
 */
typedef struct attn_decoder_saved {
    attn_view ln_in[3], ln_out[3]; /* (B, T, C) */
    attn_view mean[3], rstd[3];    /* (B, T) */
    attn_view sq, sk, sv, sconcat; /* (B, T, H*D), (B, T, Hkv*D) x2, (B, T, H*D) */
    attn_view slse;                /* (B, H, T) */
    attn_view cq, ck, cv, cconcat; /* (B, T, H'*D'), (B, S, Hkv'*D') x2, (B, T, H'*D') */
    attn_view clse;                /* (B, H', T) */
    attn_view hid_pre, hid;        /* (B, T, F) */
} attn_decoder_saved;

/** Bytes of a saved slab for (B, T, S) (S ignored without cross); 0 if invalid. Since 0.2. */
ATTN_API size_t attn_decoder_saved_size(const attn_decoder_config *cfg, int64_t B, int64_t T,
                                        int64_t S);
/**
 * Bind every view of *saved from one slab (64-byte aligned). Statuses as
 * attn_decoder_params_bind, and ATTN_EINVAL for B, T < 1 or S < 1 with
 * cross-attention. Since 0.2.
 */
ATTN_API attn_status attn_decoder_saved_bind(attn_decoder_saved *saved,
                                             const attn_decoder_config *cfg, int64_t B,
                                             int64_t T, int64_t S, void *slab,
                                             size_t slab_size);

/**
 * The whole-sequence (training) forward, PyTorch's
 * nn.TransformerDecoderLayer(batch_first=True) in train mode with dropout 0:
 * Pre-norm:  r1 = x + SA(LN1(x)); r2 = r1 + CA(LN2(r1), m); out = r2 + FFN(LN3(r2))
 * Post-norm: r1 = LN1(x + SA(x)); r2 = LN2(r1 + CA(r1, m)); out = LN3(r2 + FFN(r2))
 * SA = attn_mha_forward's self-attention with self_opts (tgt_mask: causal,
 * keep, bias; tgt_key_padding_mask: kv_len), with RoPE at positions 0..T-1
 * when cfg.rope.on; CA = cross-attention of the block's queries over the
 * memory m (B, S, Cm) with cross_opts (memory_mask, memory_key_padding_mask).
 * memory must be NULL without cross-attention. x, out (B, T, C); opts NULL =
 * defaults; their weights/lse outputs must be NULL (ATTN_EINVAL).
 * saved: NULL, or bound by attn_decoder_saved_bind for (B, T, S): filled for
 * the backward. out must not overlap x, memory, the parameters or saved.
 * Workspace: attn_decoder_workspace_size; NULL/0 allocates.
 * Returns ATTN_OK and the statuses of attn_decoder_config_resolve,
 * attn_mha_forward and attn_ffn_forward. Since 0.2.
 */
ATTN_API attn_status attn_decoder_forward(
    const attn_decoder_config *cfg, const attn_decoder_params *p, const attn_view *x,
    const attn_view *memory, const attn_sdpa_opts *self_opts, const attn_sdpa_opts *cross_opts,
    attn_view *out, const attn_decoder_saved *saved, void *work, size_t work_size);
/** Bytes of workspace attn_decoder_forward needs (0 when invalid). Since 0.2. */
ATTN_API size_t attn_decoder_workspace_size(const attn_decoder_config *cfg, const attn_view *x,
                                            const attn_view *memory,
                                            const attn_sdpa_opts *self_opts,
                                            const attn_sdpa_opts *cross_opts);

/**
 * Backward of attn_decoder_forward from what it saved, ACCUMULATING into dx
 * (B, T, C), dmemory (B, S, Cm) and every view of *grads (a params struct of
 * the same config); each may be NULL. Arguments (x, memory, opts) must be the
 * forward's. Gradients must not overlap any input or each other. Workspace:
 * attn_decoder_backward_workspace_size; NULL/0 allocates. Statuses as
 * attn_decoder_forward (ATTN_EINVAL for saved NULL). Since 0.2.
 */
ATTN_API attn_status attn_decoder_backward(
    const attn_decoder_config *cfg, const attn_decoder_params *p, const attn_view *x,
    const attn_view *memory, const attn_sdpa_opts *self_opts, const attn_sdpa_opts *cross_opts,
    const attn_decoder_saved *saved, const attn_view *dout, attn_view *dx, attn_view *dmemory,
    attn_decoder_params *grads, void *work, size_t work_size);
/** Bytes of workspace attn_decoder_backward needs (0 when invalid). Since 0.2. */
ATTN_API size_t attn_decoder_backward_workspace_size(const attn_decoder_config *cfg,
                                                     const attn_view *x,
                                                     const attn_view *memory,
                                                     const attn_sdpa_opts *self_opts,
                                                     const attn_sdpa_opts *cross_opts);

/**
 * Project an encoder memory m (B, S, Cm) once into the cross-attention's
 * K/V: mem->k[b, :, 0:S] = heads(m Wk' + bk'), mem->v likewise, and
 * mem->len[b] = mem_len ? mem_len[b] : S (PyTorch's memory_key_padding_mask
 * as lengths, 0 <= mem_len[b] <= S). mem is a cache for cfg.cross with
 * Tmax >= S (attn_kv_cache_bind). Every later attn_decoder_step reads it
 * and never writes it. Returns ATTN_OK, ATTN_EINVAL (no cross-attention,
 * NULL argument), ATTN_EDTYPE, ATTN_ESHAPE, ATTN_ESTRIDE, ATTN_EALIAS,
 * ATTN_ERANGE (S > Tmax, mem_len[b] outside [0, S]), ATTN_EWORKSPACE,
 * ATTN_ENOMEM. Workspace: attn_decoder_memory_workspace_size. Since 0.2.
 */
ATTN_API attn_status attn_decoder_memory(const attn_decoder_config *cfg,
                                         const attn_decoder_params *p, const attn_view *memory,
                                         const int64_t *mem_len, attn_kv_cache *mem, void *work,
                                         size_t work_size);
/** Bytes of workspace attn_decoder_memory needs (0 when invalid). Since 0.2. */
ATTN_API size_t attn_decoder_memory_workspace_size(const attn_decoder_config *cfg,
                                                   const attn_view *memory,
                                                   const attn_kv_cache *mem);

/**
 * One incremental step of the decoder block: the forward's formulas with
 * SA = attn_mha_step on self_cache (RoPE from cfg.rope; opts.rope must be
 * off) and CA over the projected memory mem (attn_decoder_memory; NULL
 * without cross-attention), keys 0..mem->len[b]-1, no causal mask.
 * x, out (B, Tq, C); opts as attn_mha_step (keep, bias and the variants apply
 * to the self-attention, n_new to both). Equal, at every step, to
 * attn_decoder_forward over the whole prefix with a causal self-attention
 * (the rows of the new tokens). Returns the statuses of attn_mha_step and
 * ATTN_EINVAL (mem given without cross-attention or missing with it, rope in
 * opts). On error neither the cache nor out changes. Workspace:
 * attn_decoder_step_workspace_size. Since 0.2.
 */
ATTN_API attn_status attn_decoder_step(const attn_decoder_config *cfg,
                                       const attn_decoder_params *p, const attn_step_opts *opts,
                                       const attn_view *x, attn_kv_cache *self_cache,
                                       const attn_kv_cache *mem, attn_view *out, void *work,
                                       size_t work_size);
/** Bytes of workspace attn_decoder_step needs (0 when invalid). Since 0.2. */
ATTN_API size_t attn_decoder_step_workspace_size(const attn_decoder_config *cfg,
                                                 const attn_view *x,
                                                 const attn_kv_cache *self_cache,
                                                 const attn_kv_cache *mem,
                                                 const attn_step_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_DECODE_H */
