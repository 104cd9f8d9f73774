/* SPDX-License-Identifier: MIT */
/* attn_linear: y = x W + b over the last dim, and its backward, all through attn_gemm. */
#include <limits.h>

#include "kernels/kernels_internal.h"
#include "kernels/rows.h"

/* A 1-D view (n) as the one-row matrix (1, n); higher ranks are returned unchanged. */
static attn_view as_matrix(const attn_view *v) {
    attn_view m = *v;
    if (v->ndim == 1) {
        m.ndim = 2;
        m.shape[0] = 1;
        m.shape[1] = v->shape[0];
        m.stride[0] = 0;
        m.stride[1] = v->stride[0];
    }
    return m;
}

/*
 * The operand checks attn_gemm would make, done up front so that no later
 * product can fail after an earlier one wrote: x (..., In), w (In, Out), an
 * activation-shaped partner `o` (..., Out) with x's leading dims.
 */
static attn_status check_linear(const attn_view *x, const attn_view *w, const attn_view *o) {
    ATTN_TRY(k_check_float(x, 0));
    ATTN_TRY(k_check_float(w, x->dtype));
    ATTN_TRY(k_check_float(o, x->dtype));
    if (w->ndim != 2 || o->ndim != x->ndim)
        return ATTN_ESHAPE;
    int nd = x->ndim;
    if (x->shape[nd - 1] != w->shape[0] || o->shape[nd - 1] != w->shape[1])
        return ATTN_ESHAPE;
    for (int k = 0; k < nd - 1; ++k)
        if (x->shape[k] != o->shape[k])
            return ATTN_ESHAPE;
    if (w->shape[0] > INT_MAX || w->shape[1] > INT_MAX ||
        (nd > 1 && x->shape[nd - 2] > INT_MAX))
        return ATTN_ERANGE;
    return ATTN_OK;
}

static attn_status check_bias(const attn_view *b, const attn_view *w) {
    ATTN_TRY(k_check_float(b, w->dtype));
    return b->ndim == 1 && b->shape[0] == w->shape[1] ? ATTN_OK : ATTN_ESHAPE;
}

attn_status attn__linear_need(const attn_view *x, const attn_view *w, const attn_view *y,
                              size_t *bytes) {
    attn_view xm = as_matrix(x), ym = as_matrix(y);
    return attn__gemm_need(ATTN_NO_TRANS, ATTN_NO_TRANS, &xm, w, &ym, bytes);
}

static attn_status check_forward(const attn_view *x, const attn_view *w, const attn_view *b,
                                 const attn_view *y);
static attn_status check_backward(const attn_view *x, const attn_view *w, const attn_view *dy,
                                  const attn_view *dx, const attn_view *dw,
                                  const attn_view *db);

void attn__linear_run(const attn_view *x, const attn_view *w, const attn_view *b, attn_view *y,
                      void *work, size_t work_size) {
    ATTN_ASSERT(check_forward(x, w, b, y) == ATTN_OK);
    /* y = x W, then y += b */
    attn_view xm = as_matrix(x), ym = as_matrix(y);
    attn__gemm_run(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &xm, w, 0.0, &ym, work, work_size);
    if (b)
        attn__add_run(y, b, y);
}

/* Every check of attn_linear: operands, bias, then the output's aliasing. */
static attn_status check_forward(const attn_view *x, const attn_view *w, const attn_view *b,
                                 const attn_view *y) {
    ATTN_TRY(check_linear(x, w, y));
    if (b)
        ATTN_TRY(check_bias(b, w));
    return k_check_out(y, 3, (const attn_view *[]){x, w, b}, 0);
}

size_t attn_linear_workspace_size(const attn_view *x, const attn_view *w, const attn_view *y) {
    size_t need;
    if (check_forward(x, w, NULL, y) != ATTN_OK || attn__linear_need(x, w, y, &need) != ATTN_OK)
        return 0;
    return need;
}

attn_status attn_linear(const attn_view *x, const attn_view *w, const attn_view *b,
                        attn_view *y, void *work, size_t work_size) {
    size_t need;
    ATTN_TRY(check_forward(x, w, b, y));
    ATTN_TRY(attn__linear_need(x, w, y, &need));
    void *owned = NULL;
    ATTN_TRY(attn__work_acquire(&work, &work_size, need, &owned));
    if (!owned && need > 0 && attn__work_overlaps(work, need, (const attn_view *[]){x, w, b, y}, 4))
        return ATTN_EALIAS;
    attn__linear_run(x, w, b, y, work, work_size);
    free(owned);
    return ATTN_OK;
}

/*
 * dW += x^T dy summed over the leading dims: one GEMM with every leading dim merged
 * into rows when both layouts allow it, else one accumulating GEMM per (T, In) slice.
 */
typedef struct dw_plan {
    bool merged;
    attn_view x, dy; /* merged (N, In), (N, Out); or the matrices as given */
    int64_t nslices; /* product of the dims before the last two (loop case) */
} dw_plan;

static dw_plan plan_dw(const attn_view *x, const attn_view *dy) {
    dw_plan p = {true, as_matrix(x), as_matrix(dy), 1};
    while (p.merged && p.x.ndim > 2)
        p.merged = attn_view_merge(&p.x, 0, &p.x) == ATTN_OK &&
                   attn_view_merge(&p.dy, 0, &p.dy) == ATTN_OK;
    if (p.merged && p.x.shape[0] <= INT_MAX)
        return p;
    p.merged = false;
    p.x = as_matrix(x);
    p.dy = as_matrix(dy);
    for (int k = 0; k + 2 < p.x.ndim; ++k)
        p.nslices *= p.x.shape[k];
    /* slices without a row add nothing to dW: none at all, not 2^40 empty products */
    if (p.x.shape[p.x.ndim - 2] == 0)
        p.nslices = 0;
    return p;
}

/* Slice s of a (..., r, c) view: the (r, c) matrix at leading multi-index s. */
static attn_view slice_of(const attn_view *v, int64_t s) {
    attn_view m = *v;
    int64_t off = 0;
    for (int k = v->ndim - 3; k >= 0; --k) {
        if (v->shape[k] == 0) { /* no slice at all: only the (r, c) shape matters */
            off = 0;
            break;
        }
        off += (s % v->shape[k]) * v->stride[k];
        s /= v->shape[k];
    }
    m.data = (void *)((uintptr_t)v->data + (uintptr_t)(off * (int64_t)attn_dtype_size(v->dtype)));
    m.ndim = 2;
    m.shape[0] = v->shape[v->ndim - 2];
    m.shape[1] = v->shape[v->ndim - 1];
    m.stride[0] = v->stride[v->ndim - 2];
    m.stride[1] = v->stride[v->ndim - 1];
    return m;
}

/* Workspace for both products: they run one after the other, so the larger of the two. */
attn_status attn__linear_backward_need(const attn_view *x, const attn_view *w,
                                       const attn_view *dy, const attn_view *dx,
                                       const attn_view *dw, size_t *bytes) {
    size_t need = 0, n = 0;
    if (dx) {
        attn_view dym = as_matrix(dy), dxm = as_matrix(dx);
        ATTN_TRY(attn__gemm_need(ATTN_NO_TRANS, ATTN_TRANS, &dym, w, &dxm, &need));
    }
    if (dw) {
        dw_plan p = plan_dw(x, dy);
        attn_view xs = p.merged ? p.x : slice_of(&p.x, 0);
        attn_view ds = p.merged ? p.dy : slice_of(&p.dy, 0);
        if (p.merged || p.nslices > 0) /* no slice: no product (an empty x may have no data) */
            ATTN_TRY(attn__gemm_need(ATTN_TRANS, ATTN_NO_TRANS, &xs, &ds, dw, &n));
    }
    *bytes = n > need ? n : need;
    return ATTN_OK;
}

void attn__linear_backward_run(const attn_view *x, const attn_view *w, const attn_view *dy,
                               attn_view *dx, attn_view *dw, attn_view *db, void *work,
                               size_t work_size) {
    ATTN_ASSERT(check_backward(x, w, dy, dx, dw, db) == ATTN_OK);
    if (dx) { /* dx += dy W^T */
        attn_view dym = as_matrix(dy), dxm = as_matrix(dx);
        attn__gemm_run(ATTN_NO_TRANS, ATTN_TRANS, 1.0, &dym, w, 1.0, &dxm, work, work_size);
    }
    if (dw) { /* dW += x^T dy over every leading index */
        dw_plan p = plan_dw(x, dy);
        if (p.merged)
            attn__gemm_run(ATTN_TRANS, ATTN_NO_TRANS, 1.0, &p.x, &p.dy, 1.0, dw, work,
                           work_size);
        for (int64_t s = 0; !p.merged && s < p.nslices; ++s) {
            attn_view xs = slice_of(&p.x, s), ds = slice_of(&p.dy, s);
            attn__gemm_run(ATTN_TRANS, ATTN_NO_TRANS, 1.0, &xs, &ds, 1.0, dw, work, work_size);
        }
    }
    if (db) /* db += dy summed over every leading dim */
        attn__add_backward_run(dy, NULL, db);
}

/* Every check of attn_linear_backward, so that nothing fails after a first write. */
static attn_status check_backward(const attn_view *x, const attn_view *w, const attn_view *dy,
                                  const attn_view *dx, const attn_view *dw,
                                  const attn_view *db) {
    ATTN_TRY(check_linear(x, w, dy));
    if (dx) {
        ATTN_TRY(k_check_float(dx, x->dtype));
        if (!k_same_shape(dx, x))
            return ATTN_ESHAPE;
    }
    if (dw) {
        ATTN_TRY(k_check_float(dw, x->dtype));
        if (!k_same_shape(dw, w))
            return ATTN_ESHAPE;
    }
    if (db)
        ATTN_TRY(check_bias(db, w));
    const attn_view *in[] = {x, w, dy};
    const attn_view *out[] = {dx, dw, db};
    for (int i = 0; i < 3; ++i) {
        if (!out[i])
            continue;
        ATTN_TRY(k_check_out(out[i], 3, in, 0));
        for (int j = 0; j < i; ++j)
            if (out[j] && attn_view_overlaps(out[i], out[j]))
                return ATTN_EALIAS;
    }
    return ATTN_OK;
}

size_t attn_linear_backward_workspace_size(const attn_view *x, const attn_view *w,
                                           const attn_view *dy, const attn_view *dx,
                                           const attn_view *dw) {
    size_t need;
    if (check_backward(x, w, dy, dx, dw, NULL) != ATTN_OK ||
        attn__linear_backward_need(x, w, dy, dx, dw, &need) != ATTN_OK)
        return 0;
    return need;
}

attn_status attn_linear_backward(const attn_view *x, const attn_view *w, const attn_view *dy,
                                 attn_view *dx, attn_view *dw, attn_view *db, void *work,
                                 size_t work_size) {
    size_t need;
    ATTN_TRY(check_backward(x, w, dy, dx, dw, db));
    ATTN_TRY(attn__linear_backward_need(x, w, dy, dx, dw, &need));
    void *owned = NULL;
    ATTN_TRY(attn__work_acquire(&work, &work_size, need, &owned));
    if (!owned && need > 0 &&
        attn__work_overlaps(work, need, (const attn_view *[]){x, w, dy, dx, dw, db}, 6))
        return ATTN_EALIAS;
    attn__linear_backward_run(x, w, dy, dx, dw, db, work, work_size);
    free(owned);
    return ATTN_OK;
}
