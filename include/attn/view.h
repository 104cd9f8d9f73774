/* SPDX-License-Identifier: MIT */
/* attn_view: a strided, non-owning view of a tensor, and its copy-free algebra. */
#ifndef ATTN_VIEW_H
#define ATTN_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/export.h"
#include "attn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend used in every attn header:
 *   B batch, T sequence (Tq queries, Tk keys), C model width, H heads,
 *   Hkv key/value heads, D head width (Dv value head width), F feed-forward width.
 */

/** Element type of a view. U8 is only used for boolean keep-masks. */
typedef enum attn_dtype { ATTN_F32 = 1, ATTN_F64 = 2, ATTN_U8 = 3 } attn_dtype;

#define ATTN_MAX_DIMS 4

/**
 * A strided view of caller-owned memory. Element (i0, .., i{n-1}) lives at
 * (T *)data + sum_k i_k * stride[k]. Strides are in elements, signed; a
 * stride of 0 broadcasts along that axis. Shapes are outermost first, e.g.
 * (B, H, T, D). Entries at index >= ndim are ignored.
 *
 * Column-major (Fortran) arrays are ordinary views: a Fortran A(m, n) with
 * leading dimension lda is shape (m, n), stride (1, lda).
 */
typedef struct attn_view {
    void      *data;                  /* element [0,..,0]; caller-owned */
    attn_dtype dtype;
    int        ndim;                  /* 1..ATTN_MAX_DIMS */
    int64_t    shape[ATTN_MAX_DIMS];  /* extents, each >= 0 */
    int64_t    stride[ATTN_MAX_DIMS]; /* element strides, signed; 0 = broadcast */
} attn_view;

/** Bytes per element of dtype, or 0 for an unknown dtype. Since 0.1. */
ATTN_API size_t attn_dtype_size(attn_dtype dtype);

/**
 * Initialize *v as a contiguous row-major view of `data`.
 * Returns ATTN_EINVAL (v NULL, shape NULL, ndim outside 1..4, data NULL with
 * a non-empty shape), ATTN_EDTYPE (unknown dtype), ATTN_ESHAPE (a negative
 * extent), ATTN_ERANGE (element count or byte size overflows int64/size_t).
 * On error *v is untouched. Since 0.1.
 */
ATTN_API attn_status attn_view_init(attn_view *v, attn_dtype dtype, void *data,
                                    int ndim, const int64_t *shape);

/**
 * Initialize *v with explicit element strides (negative and 0 allowed).
 * Same statuses as attn_view_init, and ATTN_ERANGE when the span
 * sum |stride_k| * (shape_k - 1) overflows. Since 0.1.
 */
ATTN_API attn_status attn_view_init_strided(attn_view *v, attn_dtype dtype, void *data,
                                            int ndim, const int64_t *shape,
                                            const int64_t *stride);

/**
 * Check that a hand-built view is well formed (the same rules as the
 * constructors). Every attn function runs this on its arguments. Since 0.1.
 */
ATTN_API attn_status attn_view_check(const attn_view *v);

/** Number of elements (product of extents); 0 for an invalid view. Since 0.1. */
ATTN_API int64_t attn_view_numel(const attn_view *v);

/** True when v is row-major contiguous (extent-1 axes ignored). Since 0.1. */
ATTN_API bool attn_view_is_contiguous(const attn_view *v);

/**
 * out := v[..., start:stop:step, ...] along `axis` (step >= 1; Python's
 * half-open range, no negative indices). Returns ATTN_EINVAL (bad axis,
 * step < 1), ATTN_ERANGE (start/stop outside 0..shape, start > stop).
 * out may be v. Since 0.1.
 */
ATTN_API attn_status attn_view_slice(const attn_view *v, int axis, int64_t start,
                                     int64_t stop, int64_t step, attn_view *out);

/**
 * out := v with `axis` fixed at `index` (ndim drops by one; a 1-D view
 * cannot be selected: ATTN_EINVAL). ATTN_ERANGE for an index outside
 * 0..shape-1. out may be v. Since 0.1.
 */
ATTN_API attn_status attn_view_select(const attn_view *v, int axis, int64_t index,
                                      attn_view *out);

/**
 * out axis k := v axis perm[k]; perm must be a permutation of 0..ndim-1
 * (ATTN_EINVAL otherwise). out may be v. Since 0.1.
 */
ATTN_API attn_status attn_view_permute(const attn_view *v, const int *perm,
                                       attn_view *out);

/** Swap axes a0 and a1 (ATTN_EINVAL for a bad axis). out may be v. Since 0.1. */
ATTN_API attn_status attn_view_transpose(const attn_view *v, int a0, int a1,
                                         attn_view *out);

/**
 * Split `axis` of extent n into two axes (n / inner, inner), e.g.
 * (B, T, H*D) -> (B, T, H, D) with inner = D. ATTN_EINVAL for a bad axis,
 * inner < 1 or ndim already ATTN_MAX_DIMS; ATTN_ESHAPE when inner does not
 * divide the extent. out may be v. Since 0.1.
 */
ATTN_API attn_status attn_view_split(const attn_view *v, int axis, int64_t inner,
                                     attn_view *out);

/**
 * Merge axes `axis` and `axis + 1` into one (the inverse of split). Only
 * possible when stride[axis] == shape[axis+1] * stride[axis+1] (else
 * ATTN_ESTRIDE: merging would need a copy). out may be v. Since 0.1.
 */
ATTN_API attn_status attn_view_merge(const attn_view *v, int axis, attn_view *out);

/**
 * Broadcast v to `shape` (ndim dims) with NumPy's rules: dims align from
 * the right, missing leading dims and extent-1 dims get stride 0.
 * ATTN_ESHAPE when an extent is neither equal nor 1. out may be v. Since 0.1.
 */
ATTN_API attn_status attn_view_broadcast(const attn_view *v, int ndim,
                                         const int64_t *shape, attn_view *out);

/**
 * Reverse `axis`: data moves to the last element, the stride is negated.
 * out may be v. Since 0.1.
 */
ATTN_API attn_status attn_view_flip(const attn_view *v, int axis, attn_view *out);

/**
 * Copy src into dst element by element (same shape, same dtype; dst must
 * not overlap src: ATTN_EALIAS; dst must not broadcast or overlap itself:
 * ATTN_ESTRIDE, by the conservative test every output gets).
 * The only view function that touches data. Since 0.1.
 */
ATTN_API attn_status attn_view_copy(const attn_view *src, attn_view *dst);

/**
 * Address range [lo, hi) in bytes that v can touch; lo == hi for an empty
 * view. Used for aliasing checks. Since 0.1.
 */
ATTN_API void attn_view_span(const attn_view *v, const void **lo, const void **hi);

/** True when the byte ranges of a and b intersect (conservative). Since 0.1. */
ATTN_API bool attn_view_overlaps(const attn_view *a, const attn_view *b);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_VIEW_H */
