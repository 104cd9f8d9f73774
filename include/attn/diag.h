/* SPDX-License-Identifier: MIT */
/* Numerical diagnostics: attention entropy, softmax-Jacobian norms, SVD, effective rank. */
#ifndef ATTN_DIAG_H
#define ATTN_DIAG_H

#include <stddef.h>
#include <stdint.h>

#include "attn/export.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: B batch, T sequence (Tq queries, Tk keys), C model width,
 * H heads, Hkv key/value heads, D head width, F feed-forward width.
 * docs/diagnostics.md explains each quantity with its formula.
 *
 * Probability rows. Functions marked "probability rows" read p (..., Tk),
 * F32 or F64, any strides, ndim 1..4, one distribution per row of the last
 * dim, and refuse (ATTN_EINVAL) any row with a negative or NaN entry or
 * whose sum is off by more than
 *     F64: 1e-12 Tk        F32: 1e-6 + Tk 2^-24
 * (Tk 2^-24 is the worst-case rounding of a float softmax with a running
 * sum; Tk = 0 rows never sum to 1). Per-row outputs have p's shape without
 * the last dim (a 1-D p gives a 1-element output), p's dtype, must not
 * overlap p (ATTN_EALIAS) or themselves (ATTN_ESTRIDE). Everything is
 * computed in double. On any error no output has been written.
 *
 * LAPACK. Functions that call LAPACKE compute in double for both dtypes and
 * take an `int *info` (may be NULL) that is always written: LAPACK's info of
 * the failing routine with ATTN_ELAPACK, else 0. Their workspace comes from
 * the matching *_workspace_size query; work == NULL && work_size == 0
 * allocates for the call.
 */

/**
 * Attention entropy per row, in nats: h[r] = -sum_j p[r, j] log p[r, j],
 * with 0 log 0 = 0. 0 for a one-hot row, log Tk for a uniform one.
 * p (..., Tk) probability rows; h (...). Returns ATTN_OK, ATTN_EINVAL (NULL,
 * a bad row), ATTN_EDTYPE (not F32/F64, or h's dtype differs), ATTN_ESHAPE
 * (h's shape), ATTN_ESTRIDE, ATTN_EALIAS. Since 0.1.
 */
ATTN_API attn_status attn_diag_entropy(const attn_view *p, attn_view *h);

/**
 * *mean = the entropy (nats) averaged over every row of p, typically the
 * attention weights (B, H, Tq, Tk) of attn_sdpa (any ndim 1..4 works).
 * Returns ATTN_OK, ATTN_EINVAL (NULL, a bad row), ATTN_EDTYPE,
 * ATTN_ESHAPE (p has no rows). Since 0.1.
 */
ATTN_API attn_status attn_diag_entropy_mean(const attn_view *p, double *mean);

/**
 * Frobenius norm of the softmax Jacobian J = diag(p) - p p^T of each row,
 * in closed form (no Tk x Tk matrix):
 *     ||J||_F^2 = sum_i p_i^2 (1 - p_i)^2 + 2 sum_{i<j} p_i^2 p_j^2,
 * summed with no cancellation, so near-one-hot rows keep full relative
 * accuracy. Uniform p over Tk: sqrt(Tk - 1) / Tk; one-hot: 0.
 * p (..., Tk) probability rows, out (...). Statuses as attn_diag_entropy.
 * Since 0.1.
 */
ATTN_API attn_status attn_diag_softmax_jacobian_fro(const attn_view *p, attn_view *out);

/**
 * Spectral norm (largest eigenvalue; J is positive semidefinite) of
 * J = diag(p) - p p^T per row, through LAPACKE dsyevd (eigenvalues only)
 * on the dense Tk x Tk matrix: O(Tk^3) per row. Uniform p: 1 / Tk;
 * one-hot: 0. p (..., Tk) probability rows, out (...).
 * Workspace: attn_diag_softmax_jacobian_spectral_workspace_size(p).
 * Returns the statuses of attn_diag_entropy and ATTN_ERANGE (Tk or a
 * LAPACK size beyond INT_MAX), ATTN_EWORKSPACE, ATTN_ENOMEM, ATTN_ELAPACK.
 * Since 0.1.
 */
ATTN_API attn_status attn_diag_softmax_jacobian_spectral(const attn_view *p, attn_view *out,
                                                         void *work, size_t work_size,
                                                         int *info);

/** Bytes of workspace for attn_diag_softmax_jacobian_spectral; 0 if p is invalid. Since 0.1. */
ATTN_API size_t attn_diag_softmax_jacobian_spectral_workspace_size(const attn_view *p);

/**
 * Singular values of a 2-D view a (m, n), any strides, F32 or F64, in
 * descending order into s (min(m, n)), same dtype. a is copied (column-major,
 * double) into the workspace and factored by LAPACKE dgesdd with jobz 'N'
 * (values only). a must be finite. s must not overlap a.
 * Workspace: attn_diag_singular_values_workspace_size(a).
 * Returns ATTN_OK, ATTN_EINVAL (NULL, a non-finite entry), ATTN_EDTYPE,
 * ATTN_ESHAPE (a not 2-D, s not (min(m, n))), ATTN_ESTRIDE, ATTN_EALIAS,
 * ATTN_ERANGE (m, n or a LAPACK size beyond INT_MAX), ATTN_EWORKSPACE,
 * ATTN_ENOMEM, ATTN_ELAPACK. Since 0.1.
 */
ATTN_API attn_status attn_diag_singular_values(const attn_view *a, attn_view *s, void *work,
                                               size_t work_size, int *info);

/** Bytes of workspace for attn_diag_singular_values; 0 if a is invalid. Since 0.1. */
ATTN_API size_t attn_diag_singular_values_workspace_size(const attn_view *a);

/**
 * Effective rank of a 2-D view a (m, n), from its singular values s_i
 * (computed as by attn_diag_singular_values):
 *   *erank = exp(-sum_i q_i log q_i),  q_i = s_i / sum_j s_j
 *            (Roy & Vetterli, EUSIPCO 2007; between 1 and min(m, n), 0 for a
 *            zero or empty matrix);
 *   *rank  = #{ i : s_i > tol s_max }, tol <= 0 meaning max(m, n) eps with
 *            eps the dtype's machine epsilon (2^-52 or 2^-23), NumPy's
 *            matrix_rank default.
 * erank and rank may each be NULL. Workspace:
 * attn_diag_effective_rank_workspace_size(a). Statuses as
 * attn_diag_singular_values, and ATTN_EINVAL for a NaN or infinite tol.
 * Since 0.1.
 */
ATTN_API attn_status attn_diag_effective_rank(double tol, const attn_view *a, double *erank,
                                              int64_t *rank, void *work, size_t work_size,
                                              int *info);

/** Bytes of workspace for attn_diag_effective_rank; 0 if a is invalid. Since 0.1. */
ATTN_API size_t attn_diag_effective_rank_workspace_size(const attn_view *a);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_DIAG_H */
