/* SPDX-License-Identifier: MIT */
/* What the layers share: the scratch planner, slab binding, and each layer's trusted body. */
#ifndef ATTN_LAYERS_INTERNAL_H
#define ATTN_LAYERS_INTERNAL_H

#include "kernels/sdpa_internal.h"

/*
 * ---- The planner (src/layers/plan.c) --------------------------------------
 * A layer call is a body run twice over one attn__plan: first counting (no
 * data touched: scratch sizes summed, every nested workspace need taken, the
 * sdpa plans made, which validates the options, masks and kv_len), then, once
 * the whole call has been validated and the workspace acquired, running (the
 * same body, now calling the trusted run functions, which cannot fail). The
 * size query and the carving therefore never disagree, and a call that is
 * refused has written nothing.
 */
#define ATTN__PLAN_SDPA 4 /* sdpa plans one body may make (decoder: self + cross) */

typedef struct attn__plan {
    bool   counting;
    char  *base;
    size_t size, used;
    size_t inner; /* largest workspace a nested run needs */
    attn__sdpa_plan sdpa[ATTN__PLAN_SDPA];
    int    nsdpa, next_sdpa; /* made while counting; handed out in order while running */
    attn_status err;         /* a scratch view too large to describe (counting) */
} attn__plan;

/* A layer body over its own argument struct. */
typedef attn_status (*attn__layer_body)(const void *args, attn__plan *pl);

/* The counting pass alone: the call's workspace in *bytes (a status, never "0 = invalid"). */
ATTN_HIDDEN attn_status attn__layer_need(attn__layer_body body, const void *args,
                                         size_t *bytes);
/*
 * A whole layer call after its views were checked: count (the remaining
 * validation), the aliasing of every output against every input and every
 * other output, the workspace (acquired or checked, and not overlapping any
 * view), then run, as one attn call with the given thread option (threads = 1:
 * every product on the calling thread; src/core/threads.c).
 */
ATTN_HIDDEN attn_status attn__layer_exec(attn__layer_body body, const void *args, int threads,
                                         const attn_view *const *outs, int nout,
                                         const attn_view *const *ins, int nin, void *work,
                                         size_t work_size);

static inline bool attn__plan_running(const attn__plan *pl) { return !pl->counting; }

/*
 * A fresh row-major scratch view (zeroed when asked, while running). While
 * counting, each gets its own never-dereferenced address above user space, so
 * that no two scratch operands look like the same memory.
 */
ATTN_HIDDEN attn_view attn__plan_scratch(attn__plan *pl, attn_dtype dt, int ndim,
                                         const int64_t *shape, bool zero);

/* A nested run's workspace: its need while counting, the region after the scratch while
 * running. */
ATTN_HIDDEN void attn__plan_inner(attn__plan *pl, size_t need);
ATTN_HIDDEN void *attn__plan_inner_base(const attn__plan *pl);
ATTN_HIDDEN size_t attn__plan_inner_size(const attn__plan *pl);

/* The sdpa plan of one attention in the body: made (validated) while counting, replayed while
 * running. */
ATTN_HIDDEN attn_status attn__plan_sdpa(attn__plan *pl, const attn_view *q, const attn_view *k,
                                        const attn_view *v, const attn_sdpa_opts *opts,
                                        bool want_weights, const attn__sdpa_plan **out);

/* Running pass only: y := b (if any), then y += x W with beta = 1 (else beta = 0). */
ATTN_HIDDEN void attn__plan_gemm_bias(attn__plan *pl, const attn_view *x, const attn_view *w,
                                      const attn_view *b, attn_view *y);
/* y = x W (+ b) and its backward inside a body (need while counting, run while running). */
ATTN_HIDDEN attn_status attn__plan_linear(attn__plan *pl, const attn_view *x,
                                          const attn_view *w, const attn_view *b, attn_view *y);
/*
 * Fused forms (the GEMM's epilogue in one pass over its output):
 * linear_act: g = x W, then v = g + b, g = v when keep_pre, y = act(v) (y may
 * be exactly g); linear_res: y = r + b + x W as y := r + b, then the GEMM with
 * beta = 1 (r may be exactly y; y must not overlap x or W).
 */
ATTN_HIDDEN attn_status attn__plan_linear_act(attn__plan *pl, const attn_view *x,
                                              const attn_view *w, const attn_view *b,
                                              attn_act act, attn_view *g, bool keep_pre,
                                              attn_view *y);
ATTN_HIDDEN attn_status attn__plan_linear_res(attn__plan *pl, const attn_view *x,
                                              const attn_view *w, const attn_view *b,
                                              const attn_view *r, attn_view *y);
ATTN_HIDDEN attn_status attn__plan_linear_backward(attn__plan *pl, const attn_view *x,
                                                   const attn_view *w, const attn_view *dy,
                                                   attn_view *dx, attn_view *dw, attn_view *db);

/* The same, but dx := dy W^T is written, not accumulated (a scratch dx needs no zeroing). */
ATTN_HIDDEN attn_status attn__plan_linear_backward_set(attn__plan *pl, const attn_view *x,
                                                       const attn_view *w, const attn_view *dy,
                                                       attn_view *dx, attn_view *dw,
                                                       attn_view *db);

/* (B, T, H*D) as heads (B, H, T, D), a view. */
ATTN_HIDDEN attn_view attn__heads(const attn_view *x, int64_t D);

/* ---- Slabs: parameters and caches carved from one caller buffer ---------- */

/* A tensor's bytes in a slab (64-byte aligned); ERANGE-free for resolved configs. */
ATTN_HIDDEN size_t attn__tensor_bytes(attn_dtype dt, int nd, const int64_t *shape);
/* Bytes of n tensors of up to 3 dims (ATTN_ERANGE on overflow). */
ATTN_HIDDEN attn_status attn__slab_need(attn_dtype dt, int n, int64_t shp[][3], const int *nd,
                                        size_t *bytes);
/*
 * Bind n tensors in order from a slab. The slab rule is one for parameters and
 * caches: NULL or not 64-byte aligned is ATTN_EINVAL, too small ATTN_EWORKSPACE.
 */
ATTN_HIDDEN attn_status attn__slab_bind(attn_dtype dt, int n, int64_t shp[][3], const int *nd,
                                        void *slab, size_t slab_size, attn_view *out);
/*
 * Views of the given shapes over a dummy address, for the public size queries
 * (a status: a resolved config can still describe tensors too large for a view).
 */
ATTN_HIDDEN attn_status attn__shape_views(attn_dtype dt, int n, int64_t shp[][3],
                                          const int *nd, attn_view *out);

/* One such view of any rank. */
ATTN_HIDDEN attn_status attn__shape_view(attn_dtype dt, int ndim, const int64_t *shape,
                                         attn_view *out);

/* x's shape with the last dim replaced by n. */
static inline void attn__with_last(const attn_view *x, int64_t n, int64_t *shape) {
    for (int k = 0; k < x->ndim; ++k)
        shape[k] = x->shape[k];
    shape[x->ndim - 1] = n;
}

/* An output-gradient view: optional; if present like's shape and dtype. */
ATTN_HIDDEN attn_status attn__want_like(const attn_view *g, const attn_view *like);

/* Append the trace's views (all 21 slots, NULL included) to l[n..]; return the new count. */
ATTN_HIDDEN int attn__trace_views(const attn_trace *t, const attn_view **l, int n);

/* ---- MHA (src/layers/mha.c) ------------------------------------------------ */

/*
 * n views (2 or 3) as one *cat concatenated along the last axis, when they are
 * its adjacent blocks (same ndim, strides and shape but for the last axis).
 */
ATTN_HIDDEN bool attn__cat_views(int n, const attn_view *const *v, attn_view *cat);
/* Columns [c0, c0 + n) of a (B, T, W) view. */
ATTN_HIDDEN attn_view attn__cols(const attn_view *x, int64_t c0, int64_t n);
/*
 * attn__trace_views for an aliasing check of the trace's OUTPUTS: q, k, v that
 * are adjacent column blocks of one tensor (as the cache binders carve them)
 * enter as that one tensor, whose span is exact, instead of three views whose
 * spans overlap though their elements do not. *cat holds the merged view.
 */
ATTN_HIDDEN int attn__trace_out_views(const attn_trace *t, const attn_view **l, int n,
                                      attn_view *cat);

/*
 * One MHA call after validation: the activations' shapes, its inputs, and the
 * rotation of its queries and keys (the decoder's RoPE at positions 0..; NULL or
 * off: none). The forward rotates the projected q and k in place (a trace's q
 * and k keep them rotated, as the backward reads them); the backward rotates
 * dq and dk back before the projections' backward.
 */
typedef struct attn__mha_dims {
    int64_t B, Tq, Tk, HD, KD;
    const attn_view *xq, *xkv;
    const attn_rope_config *rope;
} attn__mha_dims;

/* The views of a parameter (or gradient) struct that cfg uses, appended to l[n..]. */
ATTN_HIDDEN int attn__mha_views(const attn_mha_config *c, const attn_mha_params *p,
                                const attn_view **l, int n);
ATTN_HIDDEN attn_status attn__mha_check_params(const attn_mha_config *c,
                                               const attn_mha_params *p);
ATTN_HIDDEN attn_status attn__mha_shape_params(const attn_mha_config *c,
                                               attn_mha_params *p);
/* Self-attention dims of x (B, T, C); cross-attention dims of x_q (B, Tq, C) and x_kv (B, Tk,
 * Ckv). No RoPE. */
ATTN_HIDDEN attn__mha_dims attn__mha_dims_self(const attn_mha_config *c, const attn_view *x);
ATTN_HIDDEN attn__mha_dims attn__mha_dims_cross(const attn_mha_config *c, const attn_view *x_q,
                                                const attn_view *x_kv);
/* The trace views MHA fills (q, k, v, concat, scores, attention, read_values, lse). */
ATTN_HIDDEN attn_status attn__mha_check_trace(const attn_mha_config *c,
                                              const attn__mha_dims *d, const attn_trace *tr);
/* The bodies: forward into out (B, Tq, C); backward accumulating dx_q, dx_kv, g. */
ATTN_HIDDEN attn_status attn__mha_forward_body(const attn_mha_config *c,
                                               const attn_mha_params *p,
                                               const attn__mha_dims *d,
                                               const attn_sdpa_opts *opts, attn_view *out,
                                               const attn_trace *tr, attn__plan *pl);
/*
 * The same with a residual folded into the output projection: out = residual +
 * MHA (residual NULL: attn__mha_forward_body); out may be exactly residual and
 * must not overlap anything else the body reads.
 */
ATTN_HIDDEN attn_status attn__mha_forward_body_res(const attn_mha_config *c,
                                                   const attn_mha_params *p,
                                                   const attn__mha_dims *d,
                                                   const attn_sdpa_opts *opts,
                                                   const attn_view *residual, attn_view *out,
                                                   const attn_trace *tr, attn__plan *pl);
ATTN_HIDDEN attn_status attn__mha_backward_body(
    const attn_mha_config *c, const attn_mha_params *p, const attn__mha_dims *d,
    const attn_sdpa_opts *opts, const attn_trace *cache, const attn_view *dout, attn_view *dx_q,
    attn_view *dx_kv, attn_mha_params *g, attn__plan *pl);

/* The same with set_dx: dx_q (not NULL, not dx_kv) is written, not accumulated. */
ATTN_HIDDEN attn_status attn__mha_backward_body_dx(
    const attn_mha_config *c, const attn_mha_params *p, const attn__mha_dims *d,
    const attn_sdpa_opts *opts, const attn_trace *cache, const attn_view *dout, attn_view *dx_q,
    attn_view *dx_kv, bool set_dx, attn_mha_params *g, attn__plan *pl);

/* ---- FFN (src/layers/ffn.c) ------------------------------------------------ */

ATTN_HIDDEN int attn__ffn_views(const attn_ffn_config *c, const attn_ffn_params *p,
                                const attn_view **l, int n);
ATTN_HIDDEN attn_status attn__ffn_check_params(const attn_ffn_config *c,
                                               const attn_ffn_params *p);
ATTN_HIDDEN attn_status attn__ffn_shape_params(const attn_ffn_config *c,
                                               attn_ffn_params *p);
/* The trace views the FFN fills (mlp_hidden_pre, mlp_hidden, mlp_output) for input x. */
ATTN_HIDDEN attn_status attn__ffn_check_trace(const attn_ffn_config *c, const attn_view *x,
                                              const attn_trace *tr);
ATTN_HIDDEN attn_status attn__ffn_forward_body(const attn_ffn_config *c,
                                               const attn_ffn_params *p, const attn_view *x,
                                               attn_view *out, const attn_trace *tr,
                                               attn__plan *pl);
/*
 * The same with a residual folded into the down projection: out = residual +
 * FFN(x) (residual NULL: attn__ffn_forward_body). out may be exactly residual;
 * with a trace's mlp_output, that gets FFN(x) and out the sum.
 */
ATTN_HIDDEN attn_status attn__ffn_forward_body_res(const attn_ffn_config *c,
                                                   const attn_ffn_params *p,
                                                   const attn_view *x,
                                                   const attn_view *residual, attn_view *out,
                                                   const attn_trace *tr, attn__plan *pl);
ATTN_HIDDEN attn_status attn__ffn_backward_body(const attn_ffn_config *c,
                                                const attn_ffn_params *p, const attn_view *x,
                                                const attn_trace *cache, const attn_view *dout,
                                                attn_view *dx, attn_ffn_params *g,
                                                attn__plan *pl);
/* The same with set_dx: dx is written (dx := dpre W1^T), not accumulated. */
ATTN_HIDDEN attn_status attn__ffn_backward_body_dx(const attn_ffn_config *c,
                                                   const attn_ffn_params *p, const attn_view *x,
                                                   const attn_trace *cache,
                                                   const attn_view *dout, attn_view *dx,
                                                   bool set_dx, attn_ffn_params *g,
                                                   attn__plan *pl);

#endif
