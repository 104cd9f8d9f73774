/* SPDX-License-Identifier: MIT */
/* The trusted run functions under the public kernels, for the layers, posenc and ring. */
#ifndef ATTN_KERNELS_INTERNAL_H
#define ATTN_KERNELS_INTERNAL_H

#include "core/internal.h"

/*
 * Each public kernel is check -> size -> acquire workspace -> run. These are
 * the runs: their arguments are exactly those the public function accepts
 * after its checks (shapes, dtypes, aliasing, in-place rules as documented in
 * include/attn/kernels.h), and they cannot fail. Internal callers validate
 * once (a layer validates its whole call before its first write) and call
 * these; they never go through a public checked entry point.
 */

/* y = x + b (b broadcast to x; y may be exactly x or b). */
ATTN_FOR_MPI void attn__add_run(const attn_view *x, const attn_view *b, attn_view *y);
/* dx += dy (dx may be NULL); db += dy summed over its broadcast axes (NULL: skipped). */
ATTN_HIDDEN void attn__add_backward_run(const attn_view *dy, attn_view *dx, attn_view *db);
/*
 * y = src elementwise (same shape and dtype, F32/F64, any strides; src may be a
 * broadcast view, y must not overlap it): the layers' copies, threaded over rows.
 */
ATTN_HIDDEN void attn__copy_run(const attn_view *src, attn_view *y);
/* y = b broadcast over y's rows (b (n), y (..., n)): a GEMM's C before beta = 1. */
ATTN_HIDDEN void attn__fill_bias_run(const attn_view *b, attn_view *y);
/* y = act(x) elementwise (y may be exactly x). */
ATTN_HIDDEN void attn__activation_run(attn_act act, const attn_view *x, attn_view *y);
/*
 * The bias + activation epilogue of a GEMM, one pass: v = x + b (b (n) broadcast
 * over x's rows; NULL: v = x), pre = v when pre is not NULL, y = act(v). pre and
 * y may each be exactly x; otherwise no output overlaps an input or the other.
 */
ATTN_HIDDEN void attn__bias_act_run(attn_act act, const attn_view *x, const attn_view *b,
                                    attn_view *pre, attn_view *y);
/* dx += act'(x) dy. */
ATTN_HIDDEN void attn__activation_backward_run(attn_act act, const attn_view *x,
                                               const attn_view *dy, attn_view *dx);
/* The same, or dx = act'(x) dy when not accumulate (dx is then not read: no zeroing). */
ATTN_HIDDEN void attn__activation_grad_run(attn_act act, const attn_view *x,
                                           const attn_view *dy, attn_view *dx, bool accumulate);
/* attn_layernorm and its backward, arguments as validated by them. */
ATTN_HIDDEN void attn__layernorm_run(double eps, const attn_view *x, const attn_view *gamma,
                                     const attn_view *beta, attn_view *y, attn_view *mean,
                                     attn_view *rstd);
ATTN_HIDDEN void attn__layernorm_backward_run(const attn_view *x, const attn_view *gamma,
                                              const attn_view *mean, const attn_view *rstd,
                                              const attn_view *dy, attn_view *dx,
                                              attn_view *dgamma, attn_view *dbeta);

/*
 * y = x W (+ b) over the last dim, and its backward (dx += dy Wᵀ, dW += xᵀ dy,
 * db += sum dy). The _need functions give the attn_gemm packing workspace
 * (ERANGE when a product does not fit CBLAS); the runs take at least that.
 */
ATTN_HIDDEN attn_status attn__linear_need(const attn_view *x, const attn_view *w,
                                          const attn_view *y, size_t *bytes);
ATTN_HIDDEN void attn__linear_run(const attn_view *x, const attn_view *w, const attn_view *b,
                                  attn_view *y, void *work, size_t work_size);
ATTN_HIDDEN attn_status attn__linear_backward_need(const attn_view *x, const attn_view *w,
                                                   const attn_view *dy, const attn_view *dx,
                                                   const attn_view *dw, size_t *bytes);
ATTN_HIDDEN void attn__linear_backward_run(const attn_view *x, const attn_view *w,
                                           const attn_view *dy, attn_view *dx, attn_view *dw,
                                           attn_view *db, void *work, size_t work_size);

/*
 * RoPE in place on x (..., T, D) at positions offset.., as attn_rope (backward:
 * rotate by -theta, as attn_rope_backward) on arguments it accepts.
 */
ATTN_HIDDEN void attn__rope_run(attn_rope_style style, double base, int64_t offset,
                                attn_view *x, bool backward);

/*
 * The attention tiles' fused row passes (src/kernels/vexp.c; AVX2/AVX-512 clones):
 * attn__vexp_tail_*: x[i] := exp(x[i] - m) for i < lim and 0 for lim <= i < n (the
 * masked tail, no separate zeroing), returning the sum over i < lim; the f64 one is a
 * degree-13 polynomial (a few ulp). attn__sdpa_ds_*: d[i] := p[i] == 0 ? 0 :
 * p[i] (d[i] - dl) (dS from P and dP; p and d do not overlap). attn__finite_*: no
 * element of x[0..n) is inf or NaN.
 */
ATTN_HIDDEN float attn__vexp_tail_f32(float *x, int64_t lim, int64_t n, float m);
ATTN_HIDDEN double attn__vexp_tail_f64(double *x, int64_t lim, int64_t n, double m);
ATTN_HIDDEN void attn__sdpa_ds_f32(const float *restrict p, float *restrict d, int64_t n,
                                   float dl);
ATTN_HIDDEN void attn__sdpa_ds_f64(const double *restrict p, double *restrict d, int64_t n,
                                   double dl);
/* s[i] += b[i] (a -inf b[i] gives -inf, even for a NaN s[i]); s[i] = -inf where k[i] == 0. */
ATTN_HIDDEN void attn__sdpa_bias_row_f32(float *restrict s, const float *restrict b, int64_t n);
ATTN_HIDDEN void attn__sdpa_bias_row_f64(double *restrict s, const double *restrict b,
                                         int64_t n);
ATTN_HIDDEN void attn__sdpa_keep_row_f32(float *restrict s, const uint8_t *restrict k,
                                         int64_t n);
ATTN_HIDDEN void attn__sdpa_keep_row_f64(double *restrict s, const uint8_t *restrict k,
                                         int64_t n);
ATTN_HIDDEN bool attn__finite_f32(const float *x, int64_t n);
ATTN_HIDDEN bool attn__finite_f64(const double *x, int64_t n);

#endif
