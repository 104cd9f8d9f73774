/* SPDX-License-Identifier: MIT */
/* Naive double-precision reference implementations (tests only; llm.c's *_naive). */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include <attn/attn.h>
#include <stdint.h>

/*
 * want := alpha op(A) op(B) + beta * C0, computed with three plain loops in
 * double. C0 is read from c (its current contents), the result is written to
 * `want`, a row-major F64 view with c's shape. Batch dims broadcast NumPy-style.
 */
void ref_gemm(attn_trans ta, attn_trans tb, double alpha, const attn_view *a,
              const attn_view *b, double beta, const attn_view *c, const attn_view *want);

/* ---- init / diag references (ref_init.c, ref_diag.c) ---- */

/* Philox4x32-10, written from the paper's description (key schedule precomputed). */
void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The documented distributions of stream (seed, stream) at index i (see init.h). */
uint64_t ref_rng_bits(uint64_t seed, uint64_t stream, uint64_t i);
double ref_uniform01(uint64_t seed, uint64_t stream, uint64_t i);
double ref_normal(uint64_t seed, uint64_t stream, uint64_t i);
/*
 * Orthogonal init by classical Gram-Schmidt applied twice (R diagonal > 0, so
 * Q is the unique sign-corrected factor): w (m, n) row-major doubles.
 */
void ref_orthogonal(double gain, uint64_t seed, uint64_t stream, int64_t m, int64_t n,
                    double *w);

/* Eigenvalues (ascending) of the symmetric n x n row-major a (destroyed): cyclic Jacobi. */
void ref_sym_eigen(int64_t n, double *a, double *ev);
/* Singular values (descending, min(m, n)) of a 2-D view: sqrt of eig(A^T A) or eig(A A^T). */
void ref_singular_values(const attn_view *a, double *s);
/* J = diag(p) - p p^T, n x n row-major. */
void ref_softmax_jacobian(int64_t n, const double *p, double *j);

/* ---- sdpa references (ref_sdpa.c) ---- */

/*
 * Attention by plain loops in double (the lecture seed's "loop" version): for
 * every (b, h, i), s_j = scale q_i . k_j + bias_ij over the keys j the masks
 * leave (opts: causal, keep, bias, kv_len; masks broadcast NumPy-style),
 * p = exp(s - max) / sum, out_i = sum_j p_j v_j over the visible keys only
 * (docs/numerics.md's NaN rule: a value stored at a masked key never reaches
 * a row that cannot see it). A row with no key left: out = 0, weights 0,
 * lse = -1e30; a NaN score on a visible key makes its row NaN. out (B, H, Tq, Dv), weights (B, H, Tq, Tk),
 * lse (B, H, Tq): row-major F64 views, each may be NULL.
 */
void ref_sdpa(const attn_view *q, const attn_view *k, const attn_view *v,
              const attn_sdpa_opts *opts, const attn_view *out, const attn_view *weights,
              const attn_view *lse);

/*
 * Gradients of sum(dout * out) by the explicit formulas: P (Tq, Tk) per head,
 * dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = scale dS K,
 * dK = scale dS^T Q (GQA heads summed), summed over the visible (i, j) pairs
 * only: a masked pair, or a row with no key, never contributes (NaN in its q,
 * k, v or dout included). dq, dk, dv: row-major F64 views with q's, k's, v's
 * shapes, OVERWRITTEN (each may be NULL).
 */
void ref_sdpa_backward(const attn_view *q, const attn_view *k, const attn_view *v,
                       const attn_sdpa_opts *opts, const attn_view *dout, const attn_view *dq,
                       const attn_view *dk, const attn_view *dv);

/* ---- row and elementwise kernels (ref_kernels.c) ----
 * `want` views are F64 with the output's shape. Forward references overwrite
 * them; backward references ADD to them (the library's accumulate convention:
 * preload want with the initial gradient). want_mean / want_rstd: contiguous. */
void ref_softmax(const attn_view *x, const attn_view *want);
void ref_softmax_backward(const attn_view *y, const attn_view *dy, const attn_view *want);
void ref_layernorm(double eps, const attn_view *x, const attn_view *gamma,
                   const attn_view *beta, const attn_view *want, const attn_view *want_mean,
                   const attn_view *want_rstd);
void ref_layernorm_backward(double eps, const attn_view *x, const attn_view *gamma,
                            const attn_view *dy, const attn_view *want_dx,
                            const attn_view *want_dgamma, const attn_view *want_dbeta);
double ref_act(attn_act act, double x);
double ref_act_grad(attn_act act, double x);
void ref_activation(attn_act act, const attn_view *x, const attn_view *want);
void ref_activation_backward(attn_act act, const attn_view *x, const attn_view *dy,
                             const attn_view *want);
void ref_add(const attn_view *x, const attn_view *b, const attn_view *want);
void ref_add_backward(const attn_view *dy, const attn_view *want_dx, const attn_view *want_db);
void ref_linear(const attn_view *x, const attn_view *w, const attn_view *b,
                const attn_view *want);
void ref_linear_backward(const attn_view *x, const attn_view *w, const attn_view *dy,
                         const attn_view *want_dx, const attn_view *want_dw,
                         const attn_view *want_db);
/* Positional encodings and patchify (ref_kernels.c): want is F64 with the output's shape.
 * ref_sinusoidal: want (T, C); ref_rope: pairs rotated as complex numbers, x (..., T, D);
 * ref_patchify: image (H, W), (Ch, H, W) or (B, Ch, H, W). */
void ref_sinusoidal(double base, const attn_view *want);
void ref_rope(int half_style, double base, int64_t offset, const attn_view *x,
              const attn_view *want);
void ref_patchify(int64_t p, const attn_view *image, const attn_view *want);

/* ---- sdpa references (ref_sdpa.c) ---- */

/*
 * Attention by plain loops in double (the lecture seed's "loop" version): for
 * every (b, h, i), s_j = scale q_i . k_j + bias_ij over the keys j the masks
 * leave (opts: causal, keep, bias, kv_len; masks broadcast NumPy-style),
 * p = exp(s - max) / sum, out_i = sum_j p_j v_j over the visible keys only
 * (docs/numerics.md's NaN rule: a value stored at a masked key never reaches
 * a row that cannot see it). A row with no key left: out = 0, weights 0,
 * lse = -1e30; a NaN score on a visible key makes its row NaN. out (B, H, Tq, Dv), weights (B, H, Tq, Tk),
 * lse (B, H, Tq): row-major F64 views, each may be NULL.
 */
void ref_sdpa(const attn_view *q, const attn_view *k, const attn_view *v,
              const attn_sdpa_opts *opts, const attn_view *out, const attn_view *weights,
              const attn_view *lse);

/*
 * Gradients of sum(dout * out) by the explicit formulas: P (Tq, Tk) per head,
 * dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = scale dS K,
 * dK = scale dS^T Q (GQA heads summed), summed over the visible (i, j) pairs
 * only: a masked pair, or a row with no key, never contributes (NaN in its q,
 * k, v or dout included). dq, dk, dv: row-major F64 views with q's, k's, v's
 * shapes, OVERWRITTEN (each may be NULL).
 */
void ref_sdpa_backward(const attn_view *q, const attn_view *k, const attn_view *v,
                       const attn_sdpa_opts *opts, const attn_view *dout, const attn_view *dq,
                       const attn_view *dk, const attn_view *dv);

#endif
