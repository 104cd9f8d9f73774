/* SPDX-License-Identifier: MIT */
/* The argument validators every public entry point shares (views, outputs, aliasing). */
#include "core/internal.h"

attn_status attn__want(const attn_view *v, attn_dtype dt, int ndim, const int64_t *shape) {
    if (!v)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(v));
    if (v->dtype != dt)
        return ATTN_EDTYPE;
    if (v->ndim != ndim)
        return ATTN_ESHAPE;
    for (int k = 0; k < ndim; ++k)
        if (v->shape[k] != shape[k])
            return ATTN_ESHAPE;
    return ATTN_OK;
}

attn_status attn__want_opt(const attn_view *v, attn_dtype dt, int ndim, const int64_t *shape) {
    return v ? attn__want(v, dt, ndim, shape) : ATTN_OK;
}

/*
 * Spans are taken once, so a layer call with a full trace and every gradient
 * costs a few thousand compares, not a few thousand span computations.
 */
attn_status attn__check_aliasing(const attn_view *const *outs, int nout,
                                 const attn_view *const *ins, int nin) {
    uintptr_t lo[ATTN__MAX_ALIAS], hi[ATTN__MAX_ALIAS];
    int n = nout + nin;
    ATTN_ASSERT(n <= ATTN__MAX_ALIAS);
    if (n > ATTN__MAX_ALIAS)
        return ATTN_EINVAL;
    for (int i = 0; i < n; ++i) {
        const attn_view *v = i < nout ? outs[i] : ins[i - nout];
        lo[i] = hi[i] = 0;
        if (v)
            attn__span_raw(v, &lo[i], &hi[i]);
    }
    for (int i = 0; i < nout; ++i)
        if (outs[i] && attn__self_overlaps(outs[i]))
            return ATTN_ESTRIDE;
    for (int i = 0; i < nout; ++i)
        for (int j = i + 1; j < n; ++j)
            if (lo[i] != hi[i] && lo[j] != hi[j] && lo[i] < hi[j] && lo[j] < hi[i])
                return ATTN_EALIAS;
    return ATTN_OK;
}

bool attn__work_overlaps(const void *work, size_t bytes, const attn_view *const *views, int n) {
    uintptr_t wlo = (uintptr_t)work, whi = wlo + bytes;
    for (int i = 0; i < n; ++i) {
        uintptr_t lo, hi;
        if (!views[i])
            continue;
        attn__span_raw(views[i], &lo, &hi);
        if (lo != hi && bytes > 0 && lo < whi && wlo < hi)
            return true;
    }
    return false;
}
