/* SPDX-License-Identifier: MIT */
/* The strided view: validation and copy-free algebra (slice, permute, split, ...). */
#include <string.h>

#include "core/internal.h"

size_t attn_dtype_size(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_F32: return 4;
    case ATTN_F64: return 8;
    case ATTN_U8: return 1;
    }
    return 0;
}

/*
 * data + off elements, in integer arithmetic: a valid view may describe
 * addresses beyond the address space (a petabyte view of a tiny buffer,
 * never touched), where pointer arithmetic would be undefined.
 */
static void *offset(const void *data, int64_t off, attn_dtype dtype) {
    return (void *)((uintptr_t)data + (uintptr_t)off * attn_dtype_size(dtype));
}

/*
 * The rules every view obeys: ndim in 1..4, known dtype, extents >= 0,
 * numel and the byte span fit int64 / size_t, data non-NULL unless empty.
 */
static attn_status check_parts(attn_dtype dtype, const void *data, int ndim,
                               const int64_t *shape, const int64_t *stride) {
    if (ndim < 1 || ndim > ATTN_MAX_DIMS)
        return ATTN_EINVAL;
    size_t es = attn_dtype_size(dtype);
    if (es == 0)
        return ATTN_EDTYPE;
    int64_t numel = 1, span = 0;
    bool empty = false;
    for (int k = 0; k < ndim; ++k) {
        if (shape[k] < 0)
            return ATTN_ESHAPE;
        if (shape[k] == 0)
            empty = true;
    }
    /*
     * An empty view obeys the same rules (its numel: the product of the
     * non-zero extents), so that no view algebra on it can overflow.
     */
    for (int k = 0; k < ndim; ++k) {
        if (shape[k] > 0 && !attn__mul_i64(numel, shape[k], &numel))
            return ATTN_ERANGE;
        if (shape[k] <= 1)
            continue;
        int64_t s = stride[k], term;
        if (s == INT64_MIN)
            return ATTN_ERANGE;
        if (s < 0)
            s = -s;
        if (!attn__mul_i64(s, shape[k] - 1, &term) || !attn__add_i64(span, term, &span))
            return ATTN_ERANGE;
    }
    int64_t bytes;
    if (!attn__mul_i64(numel, (int64_t)es, &bytes) || !attn__add_i64(span, 1, &span) ||
        !attn__mul_i64(span, (int64_t)es, &bytes) || (uint64_t)bytes > (uint64_t)SIZE_MAX)
        return ATTN_ERANGE;
    if (data == NULL && !empty)
        return ATTN_EINVAL;
    return ATTN_OK;
}

attn_status attn_view_check(const attn_view *v) {
    if (!v)
        return ATTN_EINVAL;
    return check_parts(v->dtype, v->data, v->ndim, v->shape, v->stride);
}

attn_status attn_view_init_strided(attn_view *v, attn_dtype dtype, void *data, int ndim,
                                   const int64_t *shape, const int64_t *stride) {
    if (!v || !shape || !stride)
        return ATTN_EINVAL;
    ATTN_TRY(check_parts(dtype, data, ndim, shape, stride));
    attn_view t = {.data = data, .dtype = dtype, .ndim = ndim};
    for (int k = 0; k < ndim; ++k) {
        t.shape[k] = shape[k];
        t.stride[k] = stride[k];
    }
    *v = t;
    return ATTN_OK;
}

attn_status attn_view_init(attn_view *v, attn_dtype dtype, void *data, int ndim,
                           const int64_t *shape) {
    if (!v || !shape || ndim < 1 || ndim > ATTN_MAX_DIMS)
        return ATTN_EINVAL;
    int64_t stride[ATTN_MAX_DIMS], s = 1;
    for (int k = ndim - 1; k >= 0; --k) {
        stride[k] = s;
        if (shape[k] < 0)
            return ATTN_ESHAPE;
        if (!attn__mul_i64(s, shape[k] > 0 ? shape[k] : 1, &s))
            return ATTN_ERANGE;
    }
    return attn_view_init_strided(v, dtype, data, ndim, shape, stride);
}

int64_t attn_view_numel(const attn_view *v) {
    return attn_view_check(v) == ATTN_OK ? attn__numel(v) : 0;
}

bool attn_view_is_contiguous(const attn_view *v) {
    if (attn_view_check(v) != ATTN_OK)
        return false;
    int64_t s = 1;
    for (int k = v->ndim - 1; k >= 0; --k) {
        if (v->shape[k] == 0)
            return true;
        if (v->shape[k] != 1 && v->stride[k] != s)
            return false;
        s *= v->shape[k];
    }
    return true;
}

/* Common prologue: the input is valid and the axis is in range. */
static attn_status check_axis(const attn_view *v, int axis, const attn_view *out) {
    if (!out)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(v));
    if (axis < 0 || axis >= v->ndim)
        return ATTN_EINVAL;
    return ATTN_OK;
}

attn_status attn_view_slice(const attn_view *v, int axis, int64_t start, int64_t stop,
                            int64_t step, attn_view *out) {
    ATTN_TRY(check_axis(v, axis, out));
    if (step < 1)
        return ATTN_EINVAL;
    if (start < 0 || stop < start || stop > v->shape[axis])
        return ATTN_ERANGE;
    attn_view t = *v;
    /* ceil((stop - start) / step) without forming stop - start + step - 1,
       which overflows for a huge step */
    int64_t n = stop == start ? 0 : 1 + (stop - start - 1) / step;
    if (n > 0)
        t.data = offset(v->data, start * v->stride[axis], v->dtype);
    t.shape[axis] = n;
    /* with n >= 2, step <= extent - 1, so |stride| * step stays within the
       validated span; with n <= 1 the stride is never used: keep it */
    t.stride[axis] = n > 1 ? v->stride[axis] * step : v->stride[axis];
    *out = t;
    return ATTN_OK;
}

attn_status attn_view_select(const attn_view *v, int axis, int64_t index, attn_view *out) {
    ATTN_TRY(check_axis(v, axis, out));
    if (v->ndim == 1)
        return ATTN_EINVAL;
    if (index < 0 || index >= v->shape[axis])
        return ATTN_ERANGE;
    attn_view t = *v;
    t.data = offset(v->data, index * v->stride[axis], v->dtype);
    for (int k = axis; k + 1 < v->ndim; ++k) {
        t.shape[k] = v->shape[k + 1];
        t.stride[k] = v->stride[k + 1];
    }
    t.ndim = v->ndim - 1;
    t.shape[t.ndim] = 0;
    t.stride[t.ndim] = 0;
    *out = t;
    return ATTN_OK;
}

attn_status attn_view_permute(const attn_view *v, const int *perm, attn_view *out) {
    if (!out || !perm)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(v));
    bool seen[ATTN_MAX_DIMS] = {false};
    attn_view t = *v;
    for (int k = 0; k < v->ndim; ++k) {
        int p = perm[k];
        if (p < 0 || p >= v->ndim || seen[p])
            return ATTN_EINVAL;
        seen[p] = true;
        t.shape[k] = v->shape[p];
        t.stride[k] = v->stride[p];
    }
    *out = t;
    return ATTN_OK;
}

attn_status attn_view_transpose(const attn_view *v, int a0, int a1, attn_view *out) {
    ATTN_TRY(check_axis(v, a0, out));
    if (a1 < 0 || a1 >= v->ndim)
        return ATTN_EINVAL;
    attn_view t = *v;
    t.shape[a0] = v->shape[a1];
    t.stride[a0] = v->stride[a1];
    t.shape[a1] = v->shape[a0];
    t.stride[a1] = v->stride[a0];
    *out = t;
    return ATTN_OK;
}

attn_status attn_view_split(const attn_view *v, int axis, int64_t inner, attn_view *out) {
    ATTN_TRY(check_axis(v, axis, out));
    if (inner < 1 || v->ndim >= ATTN_MAX_DIMS)
        return ATTN_EINVAL;
    if (v->shape[axis] % inner != 0)
        return ATTN_ESHAPE;
    attn_view t = *v;
    for (int k = v->ndim; k > axis + 1; --k) {
        t.shape[k] = v->shape[k - 1];
        t.stride[k] = v->stride[k - 1];
    }
    t.shape[axis] = v->shape[axis] / inner;
    if (!attn__mul_i64(v->stride[axis], inner, &t.stride[axis]))
        t.stride[axis] = 0; /* overflows only when the outer extent is <= 1: never used */
    t.shape[axis + 1] = inner;
    t.stride[axis + 1] = v->stride[axis];
    t.ndim = v->ndim + 1;
    /* only a split of an empty axis can break the rules (a huge inner extent) */
    ATTN_TRY(check_parts(t.dtype, t.data, t.ndim, t.shape, t.stride));
    *out = t;
    return ATTN_OK;
}

attn_status attn_view_merge(const attn_view *v, int axis, attn_view *out) {
    ATTN_TRY(check_axis(v, axis, out));
    if (axis + 1 >= v->ndim)
        return ATTN_EINVAL;
    int64_t n0 = v->shape[axis], n1 = v->shape[axis + 1];
    int64_t s0 = v->stride[axis], s1 = v->stride[axis + 1];
    int64_t stride;
    if (n1 == 1)
        stride = s0;
    else if (n0 == 1 || (attn__mul_i64(n1, s1, &stride) && s0 == stride))
        stride = s1;
    else
        return ATTN_ESTRIDE;
    attn_view t = *v;
    t.shape[axis] = n0 * n1;
    t.stride[axis] = stride;
    for (int k = axis + 1; k + 1 < v->ndim; ++k) {
        t.shape[k] = v->shape[k + 1];
        t.stride[k] = v->stride[k + 1];
    }
    t.ndim = v->ndim - 1;
    t.shape[t.ndim] = 0;
    t.stride[t.ndim] = 0;
    *out = t;
    return ATTN_OK;
}

attn_status attn_view_broadcast(const attn_view *v, int ndim, const int64_t *shape,
                                attn_view *out) {
    if (!out || !shape)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(v));
    if (ndim < v->ndim || ndim > ATTN_MAX_DIMS)
        return ATTN_EINVAL;
    attn_view t = *v;
    int lead = ndim - v->ndim;
    for (int k = 0; k < ndim; ++k) {
        if (shape[k] < 0)
            return ATTN_ESHAPE;
        if (k < lead) {
            t.shape[k] = shape[k];
            t.stride[k] = 0;
            continue;
        }
        int64_t n = v->shape[k - lead];
        if (n == shape[k]) {
            t.shape[k] = n;
            t.stride[k] = v->stride[k - lead];
        } else if (n == 1) {
            t.shape[k] = shape[k];
            t.stride[k] = 0;
        } else {
            return ATTN_ESHAPE;
        }
    }
    t.ndim = ndim;
    /* a broadcast of an empty view to a non-empty shape is impossible (n == 0 != shape) */
    ATTN_TRY(check_parts(t.dtype, t.data, t.ndim, t.shape, t.stride));
    *out = t;
    return ATTN_OK;
}

attn_status attn_view_flip(const attn_view *v, int axis, attn_view *out) {
    ATTN_TRY(check_axis(v, axis, out));
    attn_view t = *v;
    if (v->shape[axis] > 1) {
        t.data = offset(v->data, (v->shape[axis] - 1) * v->stride[axis], v->dtype);
        t.stride[axis] = -v->stride[axis];
    }
    *out = t;
    return ATTN_OK;
}

void attn_view_span(const attn_view *v, const void **lo, const void **hi) {
    *lo = *hi = v ? v->data : NULL;
    if (attn_view_check(v) != ATTN_OK)
        return;
    uintptr_t l, h;
    attn__span_raw(v, &l, &h);
    *lo = (const void *)l;
    *hi = (const void *)h;
}

bool attn_view_overlaps(const attn_view *a, const attn_view *b) {
    if (attn_view_check(a) != ATTN_OK || attn_view_check(b) != ATTN_OK)
        return false;
    return attn__overlaps_raw(a, b);
}

attn_status attn__check_float(const attn_view *v, int ndim) {
    ATTN_TRY(attn_view_check(v));
    if (v->dtype != ATTN_F32 && v->dtype != ATTN_F64)
        return ATTN_EDTYPE;
    if (ndim > 0 && v->ndim != ndim)
        return ATTN_ESHAPE;
    return ATTN_OK;
}

attn_status attn_view_copy(const attn_view *src, attn_view *dst) {
    ATTN_TRY(attn_view_check(src));
    ATTN_TRY(attn_view_check(dst));
    if (src->dtype != dst->dtype)
        return ATTN_EDTYPE;
    if (src->ndim != dst->ndim)
        return ATTN_ESHAPE;
    for (int k = 0; k < src->ndim; ++k)
        if (src->shape[k] != dst->shape[k])
            return ATTN_ESHAPE;
    if (attn__self_overlaps(dst)) /* broadcast, or strides that revisit an element */
        return ATTN_ESTRIDE;
    if (attn_view_overlaps(src, dst))
        return ATTN_EALIAS;
    attn__view_copy_run(src, dst);
    return ATTN_OK;
}

void attn__view_copy_run(const attn_view *src, attn_view *dst) {
    int64_t n = attn_view_numel(src);
    size_t es = attn_dtype_size(src->dtype);
    int64_t idx[ATTN_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; ++i) {
        memcpy(attn__elem(dst, idx), attn__elem(src, idx), es);
        for (int k = src->ndim - 1; k >= 0; --k) {
            if (++idx[k] < src->shape[k])
                break;
            idx[k] = 0;
        }
    }
}

bool attn__self_overlaps(const attn_view *v) {
    if (attn_view_numel(v) <= 1)
        return false;
    int64_t ext[ATTN_MAX_DIMS], str[ATTN_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < v->ndim; ++k) {
        if (v->shape[k] == 1)
            continue;
        ext[n] = v->shape[k];
        str[n] = v->stride[k] < 0 ? -v->stride[k] : v->stride[k];
        ++n;
    }
    /* insertion sort by |stride| ascending */
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && str[j] < str[j - 1]; --j) {
            int64_t t = str[j]; str[j] = str[j - 1]; str[j - 1] = t;
            t = ext[j]; ext[j] = ext[j - 1]; ext[j - 1] = t;
        }
    int64_t span = 0; /* largest offset reachable by the inner axes */
    for (int i = 0; i < n; ++i) {
        if (str[i] <= span)
            return true;
        span += str[i] * (ext[i] - 1);
    }
    return false;
}
