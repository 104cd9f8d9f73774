/* SPDX-License-Identifier: MIT */
/* Attention kernels: softmax, layernorm, activations, adds, linear maps, sdpa (+ backward). */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/export.h"
#include "attn/gemm.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: B batch, T sequence (Tq queries, Tk keys), C model width,
 * H heads, Hkv key/value heads, D head width (Dv value head width), F
 * feed-forward width.
 *
 * Conventions for every kernel here:
 * - x, y views have 1..4 dims and the same dtype (F32 or F64; else
 *   ATTN_EDTYPE); any strides; row operations act on the last dim.
 * - "In-place allowed" means y may be exactly the same view as x (same data,
 *   shape, strides); any other overlap of an output with an input is
 *   ATTN_EALIAS. Outputs must not broadcast (ATTN_ESTRIDE).
 * - Backward functions ACCUMULATE into gradient outputs (dx += ...), as in
 *   llm.c: residual branches and shared weights add up without temporaries.
 *   Zero the gradients before the first backward call of a step.
 * - On any non-OK status no output element has been written. Checks run in one
 *   order (docs/reliability.md): NULL and malformed views, dtypes, shapes and
 *   ranges (options included), aliasing, then the workspace.
 * - Workspaces: a caller workspace the call uses must be 8-byte aligned (malloc's
 *   is; else ATTN_EINVAL) and must not overlap any argument (ATTN_EALIAS).
 */

/* ---- softmax ---------------------------------------------------------- */

/**
 * y = softmax(x) over the last dim: y_i = exp(x_i - m) / sum_j exp(x_j - m),
 * m = max_j x_j (so any finite logits, 1e30 included, cannot overflow; the
 * sum is accumulated in double for both dtypes).
 * Special rows: -inf entries get weight 0; a row of only -inf gives zeros
 * (not NaN); a NaN anywhere in a row makes the whole row NaN; +inf entries
 * share the row's weight equally (the limit), all others get 0.
 * Shapes: x, y (..., n), equal. In-place allowed (y the same view as x).
 * Returns ATTN_OK, ATTN_EINVAL (NULL or malformed view), ATTN_EDTYPE (not
 * F32/F64, or mixed), ATTN_ESHAPE (shapes differ), ATTN_ESTRIDE (y
 * broadcasts or overlaps itself), ATTN_EALIAS (y overlaps x otherwise than
 * being the same view). Since 0.1.
 */
ATTN_API attn_status attn_softmax(const attn_view *x, attn_view *y);

/**
 * dx += y * (dy - sum(dy * y)) over the last dim, with y = softmax(x) the
 * forward's output (the row dot product in double). y, dy, dx: same shape;
 * dx must not overlap y or dy. NaN in y or dy propagates to its row.
 * Returns ATTN_OK, ATTN_EINVAL, ATTN_EDTYPE, ATTN_ESHAPE, ATTN_ESTRIDE,
 * ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_softmax_backward(const attn_view *y, const attn_view *dy,
                                           attn_view *dx);

/* ---- layernorm -------------------------------------------------------- */

/**
 * y = (x - mean) * rstd * gamma + beta over the last dim C, with
 * rstd = 1 / sqrt(var + eps), var the biased (1/C) variance (PyTorch's and
 * the ViT seed's convention; the seed uses eps = 1e-5, PyTorch's default).
 * Mean and variance are computed by two passes in double for both dtypes.
 * gamma, beta: (C) or NULL (no scale / no shift). mean, rstd: optional
 * outputs (NULL to skip) with x's shape minus the last dim (a 1-D x gives
 * 1-element views (1)), saved for the backward. eps must be >= 0 and finite;
 * eps = 0 with a constant row gives NaN (0 / 0), as in PyTorch.
 * In-place allowed (y the same view as x); mean and rstd must not overlap
 * any other argument.
 * Returns ATTN_OK, ATTN_EINVAL (NULL x/y, malformed view, eps negative,
 * NaN or infinite), ATTN_EDTYPE, ATTN_ESHAPE (y differs from x, C == 0,
 * gamma/beta not (C), mean/rstd not x's leading shape), ATTN_ESTRIDE (an
 * output broadcasts), ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_layernorm(double eps, const attn_view *x, const attn_view *gamma,
                                    const attn_view *beta, attn_view *y, attn_view *mean,
                                    attn_view *rstd);

/**
 * Backward of attn_layernorm, accumulating (each gradient may be NULL):
 *   xh = (x - mean) rstd, g = dy * gamma (g = dy when gamma is NULL),
 *   dx += rstd (g - mean_C(g) - xh mean_C(g xh)),
 *   dgamma += sum over rows of dy xh, dbeta += sum over rows of dy.
 * mean and rstd (required) are the forward's outputs; gamma is the
 * forward's (NULL: no scale). dgamma is computed whenever given (with gamma
 * NULL it is the gradient at gamma = 1). Row sums run in double.
 * Outputs must not overlap inputs or each other.
 * Returns ATTN_OK, ATTN_EINVAL (NULL x, mean, rstd or dy), ATTN_EDTYPE,
 * ATTN_ESHAPE, ATTN_ESTRIDE, ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_layernorm_backward(const attn_view *x, const attn_view *gamma,
                                             const attn_view *mean, const attn_view *rstd,
                                             const attn_view *dy, attn_view *dx,
                                             attn_view *dgamma, attn_view *dbeta);

/* ---- activations, adds ------------------------------------------------ */

typedef enum attn_act {
    ATTN_ACT_GELU_TANH = 0, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (seeds) */
    ATTN_ACT_GELU_ERF = 1,  /* 0.5 x (1 + erf(x / sqrt(2))) (PyTorch's default) */
    ATTN_ACT_RELU = 2       /* max(x, 0) */
} attn_act;

/**
 * y = act(x), elementwise, in the dtype's own precision. GELU tanh is the
 * seeds' function computed as x sigma(2u), u = sqrt(2/pi) (x + 0.044715 x^3),
 * which does not cancel for negative x; GELU erf is 0.5 x erfc(-x / sqrt 2).
 * f64: vectorized through glibc's libmvec, within 8 epsilons of the same
 * formulas with libm's scalar calls (0.1.0 took 0.5 x (1 + tanh u)
 * verbatim, which gives 0 below x = -7.2). f32: vectorized, within 4 ulp
 * (tanh) and 7 ulp (erf) of the formula evaluated in double, over every
 * float. ReLU keeps NaN (NaN < 0 is
 * false) and -0.0. x, y: same shape, any strides. In-place allowed.
 * Returns ATTN_OK, ATTN_EINVAL (bad act, NULL or malformed view),
 * ATTN_EDTYPE, ATTN_ESHAPE, ATTN_ESTRIDE (y broadcasts), ATTN_EALIAS.
 * Since 0.1.
 */
ATTN_API attn_status attn_activation(attn_act act, const attn_view *x, attn_view *y);

/**
 * dx += act'(x) * dy, elementwise, act' evaluated in double (f32 GELU: in
 * float, vectorized, to a few float epsilons). ReLU'(0) = 0
 * (PyTorch's choice); NaN in x propagates. x, dy, dx: same shape; dx must
 * not overlap x or dy. Statuses as attn_activation. Since 0.1.
 */
ATTN_API attn_status attn_activation_backward(attn_act act, const attn_view *x,
                                              const attn_view *dy, attn_view *dx);

/**
 * GELU: attn_activation with act = ATTN_ACT_GELU_TANH or ATTN_ACT_GELU_ERF
 * (any other act: ATTN_EINVAL). In-place allowed. Since 0.1.
 */
ATTN_API attn_status attn_gelu(attn_act act, const attn_view *x, attn_view *y);

/** y = max(x, 0): attn_activation with ATTN_ACT_RELU. In-place allowed. Since 0.1. */
ATTN_API attn_status attn_relu(const attn_view *x, attn_view *y);

/**
 * y = x + b, b broadcasting to x's shape with NumPy's rules (a bias (C)
 * against (B, T, C), a (B, 1, C) per-batch shift, or a residual of x's own
 * shape). y has x's shape. y may be the same view as x, or as b (when b has
 * x's shape); any other overlap of y with x or b is ATTN_EALIAS.
 * Returns ATTN_OK, ATTN_EINVAL, ATTN_EDTYPE, ATTN_ESHAPE (y differs from x,
 * b does not broadcast), ATTN_ESTRIDE (y broadcasts), ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_add(const attn_view *x, const attn_view *b, attn_view *y);

/**
 * Backward of y = x + b: dx += dy (dx NULL to skip; dy's shape), db += dy
 * summed over the dims b was broadcast along (db NULL to skip; db's shape
 * must broadcast to dy's, e.g. (C) for a bias). The sums run in double.
 * dx and db must not overlap dy or each other.
 * Returns ATTN_OK, ATTN_EINVAL, ATTN_EDTYPE, ATTN_ESHAPE, ATTN_ESTRIDE,
 * ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_add_backward(const attn_view *dy, attn_view *dx, attn_view *db);

/* ---- linear maps ------------------------------------------------------- */

/**
 * y = x W + b over the last dim: x (..., In) with up to 3 leading dims
 * (a 1-D x is one row), W (In, Out) (PyTorch's (Out, In) weight is the same
 * matrix viewed with swapped strides), b (Out) or NULL, y (..., Out) with
 * x's leading dims. One attn_gemm (batch dims fold into rows when the
 * layouts allow), then the bias add. y must not overlap x, W or b.
 * Workspace: attn_linear_workspace_size(x, w, y) bytes (0 unless an operand
 * must be packed); work == NULL && work_size == 0 allocates for this call.
 * Returns ATTN_OK, ATTN_EINVAL, ATTN_EDTYPE, ATTN_ESHAPE, ATTN_ESTRIDE,
 * ATTN_EALIAS, ATTN_ERANGE (a dim beyond INT_MAX), ATTN_EWORKSPACE,
 * ATTN_ENOMEM. Since 0.1.
 */
ATTN_API attn_status attn_linear(const attn_view *x, const attn_view *w, const attn_view *b,
                                 attn_view *y, void *work, size_t work_size);
/** Bytes of workspace attn_linear needs; 0 when none (or the arguments are invalid). */
ATTN_API size_t attn_linear_workspace_size(const attn_view *x, const attn_view *w,
                                           const attn_view *y);

/**
 * Backward of y = x W + b, accumulating (each gradient may be NULL):
 *   dx += dy W^T   (x's shape),
 *   dW += x^T dy   summed over all leading dims (one GEMM over the merged
 *                  rows when both layouts allow it, else one per matrix),
 *   db += sum of dy over all leading dims (in double).
 * Outputs must not overlap the inputs or each other.
 * Workspace: attn_linear_backward_workspace_size(x, w, dy, dx, dw) bytes,
 * which depends on the layouts of the gradients too (0 for row- or
 * column-major ones); work == NULL && work_size == 0 allocates.
 * Returns ATTN_OK, ATTN_EINVAL, ATTN_EDTYPE, ATTN_ESHAPE, ATTN_ESTRIDE,
 * ATTN_EALIAS, ATTN_ERANGE, ATTN_EWORKSPACE, ATTN_ENOMEM. Since 0.1.
 */
ATTN_API attn_status attn_linear_backward(const attn_view *x, const attn_view *w,
                                          const attn_view *dy, attn_view *dx, attn_view *dw,
                                          attn_view *db, void *work, size_t work_size);
/**
 * Bytes of workspace attn_linear_backward needs for these operands (dx, dw
 * may be NULL, as in the call); 0 when none or when the arguments are
 * invalid. Since 0.1.
 */
ATTN_API size_t attn_linear_backward_workspace_size(const attn_view *x, const attn_view *w,
                                                    const attn_view *dy, const attn_view *dx,
                                                    const attn_view *dw);

/* ---- scaled dot-product attention -------------------------------------- */

typedef enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_TOP_LEFT,     /* query i sees keys j <= i (PyTorch is_causal) */
    ATTN_CAUSAL_BOTTOM_RIGHT  /* query i sees keys j <= i + Tk - Tq (KV cache) */
} attn_causal;

typedef enum attn_algo {
    ATTN_ALGO_AUTO = 0,
    ATTN_ALGO_MATERIALIZED, /* whole score rows; needed for opts.weights */
    ATTN_ALGO_TILED         /* online softmax over key blocks; workspace independent of Tk */
} attn_algo;

/** Options for attn_sdpa; all-zero means the defaults. New fields only at the end. */
typedef struct attn_sdpa_opts {
    double           scale;    /* 0 -> 1/sqrt(D) */
    attn_causal      causal;
    const attn_view *keep;     /* U8 (B|1, H|1, Tq, Tk), 1 = may attend (PyTorch True) */
    const attn_view *bias;     /* additive, q's dtype, same broadcasting as keep */
    const int64_t   *kv_len;   /* (B) valid keys per batch, or NULL */
    attn_view       *weights;  /* out, (B, H, Tq, Tk), or NULL */
    attn_view       *lse;      /* out, (B, H, Tq), natural-log sum-exp of the scaled,
                                  masked scores; or NULL */
    attn_algo        algo;
    int64_t          block_q, block_k; /* 0 -> tuned defaults */
    int              threads;  /* 0 -> the BLAS's count; 1 -> the calling thread */
    /* attention variants (docs/numerics.md "Attention variants"); all-zero = off */
    bool             window;   /* sliding window on */
    int64_t          window_left, window_right; /* >= 0: key j visible iff
                                  p - left <= j <= p + right */
    double           softcap;  /* > 0: s := softcap * tanh(s / softcap) */
    const attn_view *alibi;    /* (H) slopes m_h, q's dtype: s += -m_h * |p - j| */
    const attn_view *sinks;    /* (H) sink logits, q's dtype */
    attn_view       *dsinks;   /* backward only: (H), accumulates dL/dsink */
    int64_t          n_seqs;   /* > 0: packed variable-length sequences (B == 1) */
    const int64_t   *cu_seqlens_q, *cu_seqlens_k; /* (n_seqs + 1) offsets, 0 .. Tq and
                                  0 .. Tk */
} attn_sdpa_opts;

/**
 * out = softmax(scale * q k^T + bias + mask) v, per batch and head.
 * q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv), out (B, H, Tq, Dv),
 * all of q's dtype (F32 or F64), any strides (head-split views, transposes,
 * negative strides); H % Hkv == 0, query head h reads key/value head
 * h / (H / Hkv) (grouped-query / multi-query attention).
 * Options (NULL = all defaults): scale (finite; 0 -> 1/sqrt(D)); causal;
 * keep (U8, 1 = may attend = PyTorch's True) and bias (q's dtype), each
 * broadcasting to (B, H, Tq, Tk) with NumPy's rules (extent 1 or stride 0);
 * kv_len (B) with 0 <= kv_len[b] <= Tk; outputs weights (B, H, Tq, Tk) and
 * lse (B, H, Tq); algo; block_q, block_k (>= 0; 0 -> defaults; block_k
 * applies to TILED); threads (>= 0; 0 -> the BLAS's own thread count,
 * serial for small calls; 1 -> the calling thread alone, its BLAS calls
 * included; docs/guide.md "Threads" gives the whole rule).
 * A key is masked out when the causal rule, keep == 0, a -inf bias, or
 * j >= kv_len[b] says so.
 * Variants, for query row i and key j of one (batch, head), with p the
 * query's aligned position (i + Tk - Tq under ATTN_CAUSAL_BOTTOM_RIGHT, else
 * i): s = scale q.k, then softcap (s := softcap tanh(s / softcap)), then the
 * ALiBi term -alibi[h] |p - j|, then bias; a sliding window hides keys
 * outside p - window_left .. p + window_right (with causal, a key must pass
 * both); sinks add e^{sinks[h]} to each row's softmax denominator (no
 * output column; lse includes it; a row with no visible key gives out 0 and
 * lse = sinks[h]). Packed sequences (n_seqs > 0, B == 1): query rows
 * cu_seqlens_q[n] .. cu_seqlens_q[n+1] - 1 see only keys cu_seqlens_k[n] ..
 * cu_seqlens_k[n+1] - 1, with i, j and p counted from their sequence's
 * start (empty sequences allowed). A window costs O(Tq W) work: tiles
 * outside the band, and between packed sequences, are skipped.
 * A row with no key left gives out = 0, weights 0 and lse = -1e30 (or the
 * sink; docs/numerics.md); never NaN from masking alone: a pair with weight
 * 0 contributes nothing, whatever its q, k, v or bias hold (NaN included),
 * in both algorithms and every block size.
 * Algorithms: MATERIALIZED computes whole score rows (block_q x Tk per
 * thread in the workspace) and is required for weights; TILED runs an
 * online softmax over block_k-wide key tiles (workspace independent of Tk;
 * tiles past the causal / kv_len limit or fully masked by keep are skipped);
 * AUTO is MATERIALIZED when weights are requested, else TILED. Both run
 * (batch, head, query block) tasks on the threads docs/guide.md "Threads"
 * describes (the calling thread takes tasks too), each tile product a
 * single-threaded attn_gemm.
 * Aliasing: out, weights, lse must not overlap any input or each other.
 * Workspace: attn_sdpa_workspace_size(q, k, v, opts) bytes (it depends on
 * the thread count: query and call with the same opts and OMP_NUM_THREADS);
 * work == NULL && work_size == 0 allocates for this call.
 * Returns ATTN_OK, ATTN_EINVAL (NULL q/k/v/out, bad enum, scale not finite,
 * negative block or threads, negative window sizes or sizes without window,
 * softcap negative or not finite, n_seqs < 0, cu_seqlens missing or given
 * without n_seqs, dsinks given to the forward), ATTN_EDTYPE (mixed dtypes,
 * keep not U8, bias/weights/lse/alibi/sinks not q's dtype), ATTN_ESHAPE (4-D
 * shapes that disagree, H % Hkv != 0, masks that do not broadcast, weights
 * or lse of the wrong shape, alibi or sinks not (H), n_seqs with B != 1),
 * ATTN_ESTRIDE (an output overlaps itself), ATTN_EALIAS, ATTN_ERANGE
 * (kv_len[b] outside [0, Tk], as every per-batch length; cu_seqlens not
 * starting at 0, decreasing, or not ending at Tq / Tk; D, Dv or a
 * materialized row beyond INT_MAX),
 * ATTN_EUNSUPPORTED (weights with ATTN_ALGO_TILED), ATTN_EWORKSPACE,
 * ATTN_ENOMEM. On error nothing is written. Since 0.1.
 */
ATTN_API attn_status attn_sdpa(const attn_view *q, const attn_view *k, const attn_view *v,
                               const attn_sdpa_opts *opts, attn_view *out, void *work,
                               size_t work_size);

/** Bytes of workspace attn_sdpa needs; 0 for invalid q, k, v or opts. Since 0.1. */
ATTN_API size_t attn_sdpa_workspace_size(const attn_view *q, const attn_view *k,
                                         const attn_view *v, const attn_sdpa_opts *opts);

/**
 * Backward of attn_sdpa, ACCUMULATING (dq, dk, dv each may be NULL; zero
 * them before the first backward of a step):
 *   P = exp(scale q k^T + bias - lse) on the visible keys, 0 elsewhere,
 *   dv += P^T dout,  dS = P * (dout v^T - rowsum(dout * out)),
 *   dq += scale dS k,  dk += scale dS^T q  (GQA: dk, dv sum their query heads).
 * out (B, H, Tq, Dv) and lse (B, H, Tq) are the forward's outputs (lse is
 * required: run the forward with opts.lse set), dout has out's shape; dq, dk,
 * dv have q's, k's, v's shapes, any strides. opts must be the forward's
 * (masks, causal, kv_len, scale, the variants); its weights and lse fields
 * are ignored and algo/block sizes may differ. With sinks, dsinks (H) (or
 * NULL) accumulates dL/dsinks[h] = -sum_{b,i} e^{sinks[h] - lse_bhi}
 * (dout_bhi . out_bhi); dsinks without sinks is ATTN_EINVAL. Softcap's
 * derivative 1 - tanh^2 is applied to dS; windows and packed sequences skip
 * the tiles outside them as in the forward. The TILED path recomputes P tile by tile and
 * never stores a Tq x Tk matrix; rows with no visible key contribute exactly
 * zero, as do pairs of weight 0 (NaN in their q, k, v, dout included). Exact
 * at any finite logit magnitude: a row whose saved lse is too large to
 * recompute P from (|lse| >= 64 f32, 1024 f64) gets one more pass of its
 * scores (docs/numerics.md "Backward at large logits").
 * Gradients (dsinks included) must not overlap any input or each other.
 * Workspace: attn_sdpa_backward_workspace_size(q, k, v, opts) bytes (sized
 * for strided gradient views; independent of Tk for TILED); NULL/0
 * allocates. Returns ATTN_OK, ATTN_EINVAL (NULL q/k/v/out/lse/dout, bad
 * options), ATTN_EDTYPE, ATTN_ESHAPE, ATTN_ESTRIDE, ATTN_EALIAS, ATTN_ERANGE,
 * ATTN_EWORKSPACE, ATTN_ENOMEM; on error nothing is written. Since 0.1.
 */
ATTN_API attn_status attn_sdpa_backward(const attn_view *q, const attn_view *k,
                                        const attn_view *v, const attn_sdpa_opts *opts,
                                        const attn_view *out, const attn_view *lse,
                                        const attn_view *dout, attn_view *dq, attn_view *dk,
                                        attn_view *dv, void *work, size_t work_size);

/** Bytes of workspace attn_sdpa_backward needs; 0 for invalid arguments. Since 0.1. */
ATTN_API size_t attn_sdpa_backward_workspace_size(const attn_view *q, const attn_view *k,
                                                  const attn_view *v,
                                                  const attn_sdpa_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_KERNELS_H */
