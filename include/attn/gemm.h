/* SPDX-License-Identifier: MIT */
/* attn_gemm: batched, strided matrix products on views; the one door to CBLAS. */
#ifndef ATTN_GEMM_H
#define ATTN_GEMM_H

#include <stddef.h>

#include "attn/export.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_trans { ATTN_NO_TRANS = 0, ATTN_TRANS = 1 } attn_trans;

/**
 * C := alpha * op(A) * op(B) + beta * C over the last two dims.
 *
 * Shapes: op(A) (M, K), op(B) (K, N), C (M, N), each with up to two leading
 * batch dims. A and B broadcast to C's batch dims with NumPy's rules (missing
 * dims, extent 1 or stride 0): a weight shared across the batch is a 2-D view.
 * C must not broadcast (ATTN_ESTRIDE) and must not overlap A or B
 * (ATTN_EALIAS). With beta == 0, C is not read (NaN in C does not propagate).
 *
 * A matrix whose row or column stride is 1 (row-major or column-major, any
 * leading dimension) goes straight to cblas_?gemm (cblas_?gemv when C has
 * one row: it streams B once where GEMM packs it first); any other layout
 * (negative, zero or non-unit strides in both dims) is packed into `work`.
 * When B is shared across the batch and the batch dims of A and C fold into
 * rows, the whole batch becomes one large GEMM.
 *
 * Threads: one BLAS call per product (per batch entry when the batch does
 * not fold), threaded as the BLAS decides; single-threaded when called from
 * inside an active OpenMP parallel region (docs/guide.md "Threads").
 *
 * Workspace: attn_gemm_workspace_size() bytes (0 when nothing needs
 * packing); work == NULL && work_size == 0 allocates internally. A caller
 * workspace must be 8-byte aligned (else ATTN_EINVAL) and must not overlap
 * A, B or C (ATTN_EALIAS).
 *
 * Returns ATTN_OK, ATTN_EINVAL (NULL view, bad trans, ndim < 2),
 * ATTN_EDTYPE (dtypes differ, or not F32/F64), ATTN_ESHAPE (inner or outer
 * dims or batch dims mismatch), ATTN_ESTRIDE (C broadcasts), ATTN_EALIAS,
 * ATTN_ERANGE (a dim or leading dim exceeds INT_MAX), ATTN_EWORKSPACE,
 * ATTN_ENOMEM. Since 0.1.
 */
ATTN_API attn_status attn_gemm(attn_trans ta, attn_trans tb, double alpha,
                               const attn_view *a, const attn_view *b, double beta,
                               attn_view *c, void *work, size_t work_size);

/**
 * Bytes of workspace attn_gemm needs for these operands; 0 when the
 * operands are invalid (attn_gemm then reports why). Since 0.1.
 */
ATTN_API size_t attn_gemm_workspace_size(attn_trans ta, attn_trans tb,
                                         const attn_view *a, const attn_view *b,
                                         const attn_view *c);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_GEMM_H */
