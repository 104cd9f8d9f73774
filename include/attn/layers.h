/* SPDX-License-Identifier: MIT */
/* Layers: multi-head attention, feed-forward, encoder block, forward and backward. */
#ifndef ATTN_LAYERS_H
#define ATTN_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/export.h"
#include "attn/kernels.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: B batch, T sequence (Tq queries, Tk keys), C model width
 * (d_model), Ckv width of the key/value input, H heads, Hkv key/value heads,
 * D head width, F feed-forward width.
 *
 * Weights multiply from the right, y = x W + b, W of shape (in, out), as in
 * the seeds. PyTorch's (out, in) weights are the same matrices viewed with
 * swapped strides (attn_view_transpose): no copies.
 *
 * Parameters are structs of views carved from one caller slab by
 * *_params_bind (bytes from *_params_size); every tensor starts on a 64-byte
 * boundary. The same functions bind a gradient struct of the same shape.
 * MHA's wq, wk, wv are stored as PyTorch stores in_proj_weight: each (out,
 * in) row-major, so the (in, out) view has strides (1, in); the other
 * matrices are (in, out) row-major. Read and write them through the views
 * (attn_view_copy, attn_init_*), not as flat arrays. When each of wq, wk, wv
 * is a multiple of 64 bytes they are adjacent and Q, K, V take one GEMM.
 *
 * Backward functions ACCUMULATE into every gradient they are given (dx,
 * parameter gradients): zero them before a step. What the backward needs
 * from the forward is an attn_trace the forward filled (see *_cache_bind):
 * the caller owns that memory.
 */

/* ---- the trace / cache --------------------------------------------------- */

/**
 * Named intermediates of a forward pass, as the ViT seed prints them. Each
 * pointer is NULL (not wanted) or a caller view the forward fills. Requesting
 * `scores` or `attention` makes the attention run the materialized
 * algorithm; without them the fastest path runs. Shapes:
 *   ln1, residual1, ln2, projected_attention, mlp_output, output: (B, T, C)
 *   q (B, Tq, H*D); k, v (B, Tk, Hkv*D); concat (B, Tq, H*D)
 *   scores, attention (B, H, Tq, Tk): scaled, masked scores and softmax
 *   read_values (B, H, Tq, D); lse (B, H, Tq)
 *   mlp_hidden_pre, mlp_hidden (B, T, F)
 *   ln1_mean, ln1_rstd, ln2_mean, ln2_rstd (B, T); residual2 (B, T, C)
 * Post-norm blocks: residual1 = x + attn, ln1 = LN(residual1),
 * residual2 = ln1 + mlp_output, ln2 = output = LN(residual2).
 */
typedef struct attn_trace {
    attn_view *ln1, *q, *k, *v, *scores, *attention, *read_values, *concat,
        *projected_attention, *residual1, *ln2, *mlp_hidden_pre, *mlp_hidden, *mlp_output,
        *output;
    /* saved for the backward */
    attn_view *lse, *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *residual2;
} attn_trace;

/* ---- multi-head attention --------------------------------------------- */

typedef struct attn_mha_config { /* all-zero fields = defaults */
    attn_dtype dtype;            /* ATTN_F32 or ATTN_F64 (0 -> F32) */
    int64_t    d_model;          /* C: width of x_q and of the output */
    int64_t    heads;            /* H */
    int64_t    kv_heads;         /* Hkv; 0 -> H */
    int64_t    d_head;           /* D; 0 -> C / H (then C % H must be 0) */
    int64_t    d_kv;             /* Ckv: width of x_kv; 0 -> C */
    bool       bias;
} attn_mha_config;

typedef struct attn_mha_params {
    attn_view wq, wk, wv, wo; /* (C, H*D), (Ckv, Hkv*D), (Ckv, Hkv*D), (H*D, C) */
    attn_view bq, bk, bv, bo; /* (H*D), (Hkv*D), (Hkv*D), (C); unused without bias */
} attn_mha_params;

/**
 * Check a config and fill in its defaults into *out (out may be cfg).
 * ATTN_EINVAL for: NULL, dtype not F32/F64, d_model/heads < 1, kv_heads < 0
 * or not dividing heads, d_head 0 with d_model % heads != 0, negative
 * d_head/d_kv. Since 0.1.
 */
ATTN_API attn_status attn_mha_config_resolve(const attn_mha_config *cfg,
                                             attn_mha_config *out);
/** Bytes of one parameter slab for cfg (0 for an invalid config). Since 0.1. */
ATTN_API size_t attn_mha_params_size(const attn_mha_config *cfg);
/**
 * Carve the parameter views from slab (64-byte aligned, at least
 * attn_mha_params_size bytes: else ATTN_EWORKSPACE). Since 0.1.
 */
ATTN_API attn_status attn_mha_params_bind(attn_mha_params *p, const attn_mha_config *cfg,
                                          void *slab, size_t slab_size);
/** Number of scalars (the seed's d_model 4, 2 heads, no bias: 64); -1 if invalid. */
ATTN_API int64_t attn_mha_param_count(const attn_mha_config *cfg);

/**
 * out = concat_h(sdpa(x_q Wq_h + bq_h, x_kv Wk_h + bk_h, x_kv Wv_h + bv_h)) Wo + bo.
 * x_q (B, Tq, C), x_kv (B, Tk, Ckv) or NULL for self-attention, out
 * (B, Tq, C). opts: every attn_sdpa option (causal, keep, bias, kv_len,
 * scale, algo, threads) applies per head; its weights/lse outputs are
 * ignored here (use the trace). trace: optional (q, k, v, scores,
 * attention, read_values, concat, lse are the ones MHA fills). out must not
 * overlap x_q/x_kv (ATTN_EALIAS). Workspace: attn_mha_workspace_size;
 * NULL/0 allocates. Statuses: those of attn_mha_config_resolve, ATTN_EDTYPE,
 * ATTN_ESHAPE, ATTN_EALIAS, ATTN_EWORKSPACE, ATTN_ENOMEM and those of
 * attn_sdpa. Since 0.1.
 */
ATTN_API attn_status attn_mha_forward(const attn_mha_config *cfg, const attn_mha_params *p,
                                      const attn_view *x_q, const attn_view *x_kv,
                                      const attn_sdpa_opts *opts, attn_view *out,
                                      const attn_trace *trace, void *work, size_t work_size);
/**
 * Bytes of workspace attn_mha_forward needs for these arguments (0 when
 * they are invalid: the call then reports why). Assumes weights with a unit
 * stride in one dim. Since 0.1.
 */
ATTN_API size_t attn_mha_workspace_size(const attn_mha_config *cfg, const attn_view *x_q,
                                        const attn_view *x_kv, const attn_sdpa_opts *opts,
                                        const attn_trace *trace);

/**
 * Backward of attn_mha_forward. cache: the trace the forward filled, with
 * q, k, v, concat and lse present (bind one with attn_mha_cache_bind).
 * Accumulates dx_q, dx_kv (NULL for self-attention: its gradient then
 * lands in dx_q; any may be NULL to skip) and every view of *grads (a
 * params struct of the same config, or NULL). Since 0.1.
 */
ATTN_API attn_status attn_mha_backward(const attn_mha_config *cfg, const attn_mha_params *p,
                                       const attn_view *x_q, const attn_view *x_kv,
                                       const attn_sdpa_opts *opts, const attn_trace *cache,
                                       const attn_view *dout, attn_view *dx_q,
                                       attn_view *dx_kv, attn_mha_params *grads, void *work,
                                       size_t work_size);
/** Bytes of workspace attn_mha_backward needs (0 when invalid). Since 0.1. */
ATTN_API size_t attn_mha_backward_workspace_size(const attn_mha_config *cfg,
                                                 const attn_view *x_q, const attn_view *x_kv,
                                                 const attn_sdpa_opts *opts);

/** Bytes for the cache of one MHA forward at (B, Tq, Tk); 0 if invalid. Since 0.1. */
ATTN_API size_t attn_mha_cache_size(const attn_mha_config *cfg, int64_t B, int64_t Tq,
                                    int64_t Tk);
/**
 * Bind q, k, v, concat, lse views (stored in *views, at least 5 entries) and
 * point trace's fields at them, from one slab. With Tq == Tk, q, k and v are
 * the column blocks of one (B, Tq, H*D + 2 Hkv*D) tensor (else k and v of one
 * (B, Tk, 2 Hkv*D)), so the traced forward projects them in one GEMM. Since 0.1.
 */
ATTN_API attn_status attn_mha_cache_bind(const attn_mha_config *cfg, int64_t B, int64_t Tq,
                                         int64_t Tk, void *slab, size_t slab_size,
                                         attn_view *views, attn_trace *trace);

/* ---- feed-forward ------------------------------------------------------ */

typedef struct attn_ffn_config {
    attn_dtype dtype;   /* 0 -> F32 */
    int64_t    d_model; /* C */
    int64_t    d_ff;    /* F; 0 -> 4 C */
    attn_act   act;
    bool       bias;
} attn_ffn_config;

typedef struct attn_ffn_params {
    attn_view w1, b1, w2, b2; /* (C, F) (F) (F, C) (C) */
} attn_ffn_params;

/**
 * Check an FFN config and fill in its defaults (dtype 0 -> F32, d_ff 0 ->
 * 4 C) into *out (out may be cfg). ATTN_EINVAL for NULL, a dtype other than
 * F32/F64, d_model < 1, d_ff < 0, an unknown activation, or a size that
 * overflows. Since 0.1.
 */
ATTN_API attn_status attn_ffn_config_resolve(const attn_ffn_config *cfg,
                                             attn_ffn_config *out);
/** Bytes of one FFN parameter slab (0 for an invalid config). Since 0.1. */
ATTN_API size_t attn_ffn_params_size(const attn_ffn_config *cfg);
/**
 * Carve w1 (C, F), w2 (F, C) and, with bias, b1 (F), b2 (C) from slab
 * (64-byte aligned: else ATTN_EINVAL; at least attn_ffn_params_size bytes:
 * else ATTN_EWORKSPACE). Since 0.1.
 */
ATTN_API attn_status attn_ffn_params_bind(attn_ffn_params *p, const attn_ffn_config *cfg,
                                          void *slab, size_t slab_size);
/** Number of scalars, 2 C F (+ F + C with bias); -1 if invalid. Since 0.1. */
ATTN_API int64_t attn_ffn_param_count(const attn_ffn_config *cfg);

/**
 * out = act(x W1 + b1) W2 + b2; x, out (B, T, C) (or any leading dims).
 * trace: mlp_hidden_pre, mlp_hidden (B, T, F), mlp_output. Since 0.1.
 */
ATTN_API attn_status attn_ffn_forward(const attn_ffn_config *cfg, const attn_ffn_params *p,
                                      const attn_view *x, attn_view *out,
                                      const attn_trace *trace, void *work, size_t work_size);
/**
 * Bytes of workspace attn_ffn_forward needs (0 when invalid). Like every layer
 * query it assumes weights and outputs with a unit stride in one dim; others
 * need packing room it does not count (pass NULL, 0 then). Since 0.1.
 */
ATTN_API size_t attn_ffn_workspace_size(const attn_ffn_config *cfg, const attn_view *x,
                                        const attn_trace *trace);
/**
 * Backward of attn_ffn_forward; cache holds mlp_hidden_pre and mlp_hidden.
 * Accumulates dx and grads (either may be NULL). Since 0.1.
 */
ATTN_API attn_status attn_ffn_backward(const attn_ffn_config *cfg, const attn_ffn_params *p,
                                       const attn_view *x, const attn_trace *cache,
                                       const attn_view *dout, attn_view *dx,
                                       attn_ffn_params *grads, void *work, size_t work_size);
/** Bytes of workspace attn_ffn_backward needs (0 when invalid). Since 0.1. */
ATTN_API size_t attn_ffn_backward_workspace_size(const attn_ffn_config *cfg,
                                                 const attn_view *x);

/* ---- encoder block ----------------------------------------------------- */

typedef enum attn_norm_order { ATTN_PRE_NORM = 0, ATTN_POST_NORM } attn_norm_order;

typedef struct attn_encoder_config {
    attn_mha_config mha;
    attn_ffn_config ffn;
    double          eps;       /* LayerNorm eps; 0 -> 1e-5 */
    attn_norm_order norm;
    bool            ln_affine; /* LayerNorm gamma/beta present */
} attn_encoder_config;

typedef struct attn_encoder_params {
    attn_view       ln1_g, ln1_b; /* (C) (C); unused without ln_affine */
    attn_mha_params mha;
    attn_view       ln2_g, ln2_b;
    attn_ffn_params ffn;
} attn_encoder_params;

/**
 * Resolve defaults; ATTN_EINVAL also when mha and ffn disagree on dtype or
 * d_model, or eps is negative or not finite. Since 0.1.
 */
ATTN_API attn_status attn_encoder_config_resolve(const attn_encoder_config *cfg,
                                                 attn_encoder_config *out);
/** Bytes of one encoder parameter slab (0 for an invalid config). Since 0.1. */
ATTN_API size_t attn_encoder_params_size(const attn_encoder_config *cfg);
/**
 * Carve ln1 gamma/beta (with ln_affine), the MHA parameters, ln2
 * gamma/beta, then the FFN parameters from one slab, each tensor 64-byte
 * aligned (slab misaligned: ATTN_EINVAL; too small: ATTN_EWORKSPACE).
 * Since 0.1.
 */
ATTN_API attn_status attn_encoder_params_bind(attn_encoder_params *p,
                                              const attn_encoder_config *cfg, void *slab,
                                              size_t slab_size);
/** Number of scalars (MHA + FFN + 4 C with ln_affine); -1 if invalid. Since 0.1. */
ATTN_API int64_t attn_encoder_param_count(const attn_encoder_config *cfg);

/**
 * Pre-norm:  r1 = x + MHA(LN1(x));  out = r1 + FFN(LN2(r1))   (the ViT seed)
 * Post-norm: r1 = LN1(x + MHA(x));  out = LN2(r1 + FFN(r1))   (PyTorch default)
 * x, out (B, T, C); out must not overlap x. opts as for attn_mha_forward.
 * trace: any subset of the attn_trace fields. Since 0.1.
 */
ATTN_API attn_status attn_encoder_forward(const attn_encoder_config *cfg,
                                          const attn_encoder_params *p, const attn_view *x,
                                          const attn_sdpa_opts *opts, attn_view *out,
                                          const attn_trace *trace, void *work,
                                          size_t work_size);
/**
 * Bytes of workspace attn_encoder_forward needs (0 when invalid). Assumes
 * weights and outputs with a unit stride in one dim, as the MHA and FFN
 * queries do. Since 0.1.
 */
ATTN_API size_t attn_encoder_workspace_size(const attn_encoder_config *cfg,
                                            const attn_view *x, const attn_sdpa_opts *opts,
                                            const attn_trace *trace);

/** Bytes for the backward cache of one encoder forward at (B, T). Since 0.1. */
ATTN_API size_t attn_encoder_cache_size(const attn_encoder_config *cfg, int64_t B,
                                        int64_t T);
/**
 * Bind every view the encoder backward needs (ln1, q, k, v, concat, lse,
 * residual1, ln2, mlp_hidden_pre, mlp_hidden, ln1/ln2 mean and rstd,
 * residual2) from one slab into views (at least 15 entries) and point
 * trace at them; q, k, v are the column blocks of one (B, T, H*D + 2 Hkv*D)
 * tensor, so the training forward projects them in one GEMM. Since 0.1.
 */
ATTN_API attn_status attn_encoder_cache_bind(const attn_encoder_config *cfg, int64_t B,
                                             int64_t T, void *slab, size_t slab_size,
                                             attn_view *views, attn_trace *trace);

/**
 * Backward of attn_encoder_forward; cache is a trace bound by
 * attn_encoder_cache_bind and filled by the forward. Accumulates dx and
 * grads (either may be NULL). Since 0.1.
 */
ATTN_API attn_status attn_encoder_backward(const attn_encoder_config *cfg,
                                           const attn_encoder_params *p, const attn_view *x,
                                           const attn_sdpa_opts *opts,
                                           const attn_trace *cache, const attn_view *dout,
                                           attn_view *dx, attn_encoder_params *grads,
                                           void *work, size_t work_size);
/** Bytes of workspace attn_encoder_backward needs (0 when invalid). Since 0.1. */
ATTN_API size_t attn_encoder_backward_workspace_size(const attn_encoder_config *cfg,
                                                     const attn_view *x,
                                                     const attn_sdpa_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_LAYERS_H */
