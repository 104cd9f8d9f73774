/* SPDX-License-Identifier: MIT */
/* The argument validators every public entry point shares: views, q/k/v, outputs and their
 * aliasing, per-batch lengths, workspaces. */
#include <math.h>

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

attn_status attn__check_qkv(const attn_view *q, const attn_view *k, const attn_view *v,
                            attn__qkv *d) {
    const attn_view *x[3] = {q, k, v};
    for (int i = 0; i < 3; ++i)
        if (!x[i])
            return ATTN_EINVAL;
    for (int i = 0; i < 3; ++i)
        ATTN_TRY(attn_view_check(x[i]));
    for (int i = 0; i < 3; ++i)
        if (x[i]->dtype != ATTN_F32 && x[i]->dtype != ATTN_F64)
            return ATTN_EDTYPE;
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return ATTN_EDTYPE;
    for (int i = 0; i < 3; ++i)
        if (x[i]->ndim != 4)
            return ATTN_ESHAPE;
    attn__qkv t = {.dt = q->dtype,
                   .B = q->shape[0],
                   .H = q->shape[1],
                   .Tq = q->shape[2],
                   .D = q->shape[3],
                   .Hkv = k->shape[1],
                   .Tk = k->shape[2],
                   .Dv = v->shape[3]};
    if (k->shape[0] != t.B || v->shape[0] != t.B || v->shape[1] != t.Hkv ||
        k->shape[3] != t.D || v->shape[2] != t.Tk)
        return ATTN_ESHAPE;
    if (t.Hkv == 0 ? t.H != 0 : t.H % t.Hkv != 0)
        return ATTN_ESHAPE;
    *d = t;
    return ATTN_OK;
}

attn_status attn__check_views(attn_dtype dt, const attn__spec *s, int n) {
    for (int i = 0; i < n; ++i)
        if (!s[i].v && s[i].required)
            return ATTN_EINVAL;
    for (int i = 0; i < n; ++i)
        if (s[i].v)
            ATTN_TRY(attn_view_check(s[i].v));
    for (int i = 0; i < n; ++i)
        if (s[i].v && s[i].v->dtype != dt)
            return ATTN_EDTYPE;
    for (int i = 0; i < n; ++i) {
        if (!s[i].v)
            continue;
        if (s[i].v->ndim != s[i].ndim)
            return ATTN_ESHAPE;
        for (int k = 0; k < s[i].ndim; ++k)
            if (s[i].v->shape[k] != s[i].shape[k])
                return ATTN_ESHAPE;
    }
    return ATTN_OK;
}

attn_status attn__check_outputs(attn_dtype dt, const attn__spec *outs, int nout,
                                const attn_view *const *ins, int nin) {
    const attn_view *o[ATTN__MAX_ALIAS];
    ATTN_ASSERT(nout <= ATTN__MAX_ALIAS);
    if (nout > ATTN__MAX_ALIAS)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_views(dt, outs, nout));
    for (int i = 0; i < nout; ++i)
        o[i] = outs[i].v;
    return attn__check_aliasing(o, nout, ins, nin);
}

attn_status attn__check_lengths(const int64_t *len, int64_t n, int64_t hi) {
    for (int64_t b = 0; len && b < n; ++b)
        if (len[b] < 0 || len[b] > hi)
            return ATTN_ERANGE;
    return ATTN_OK;
}

attn_status attn__work_take(void **work, size_t *size, size_t need,
                            const attn_view *const *args, int n, void **owned) {
    ATTN_TRY(attn__work_acquire(work, size, need, owned));
    if (!*owned && attn__work_overlaps(*work, need, args, n))
        return ATTN_EALIAS;
    return ATTN_OK;
}

attn_status attn__check_mask(const attn_view *m, attn_dtype dt, int ndim, const int64_t *shape,
                             attn_view *out) {
    ATTN_TRY(attn_view_check(m));
    if (m->dtype != dt)
        return ATTN_EDTYPE;
    return attn_view_broadcast(m, ndim, shape, out);
}

attn_status attn__check_offsets(const int64_t *cu, int64_t n, int64_t total) {
    if (cu[0] != 0 || cu[n] != total)
        return ATTN_ERANGE;
    for (int64_t s = 0; s < n; ++s)
        if (cu[s + 1] < cu[s])
            return ATTN_ERANGE;
    return ATTN_OK;
}

attn_status attn__check_variants(attn_dtype dt, int64_t H, bool window, int64_t wl, int64_t wr,
                                 double softcap, const attn_view *alibi,
                                 const attn_view *sinks) {
    if (wl < 0 || wr < 0 || (!window && (wl || wr)) || !(softcap >= 0) || !isfinite(softcap))
        return ATTN_EINVAL;
    const attn__spec hv[2] = {{alibi, false, 1, {H}}, {sinks, false, 1, {H}}};
    return attn__check_views(dt, hv, 2);
}
