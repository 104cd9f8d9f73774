/* SPDX-License-Identifier: MIT */
/* Helpers shared by the layer suites: owned tensors, random params, fixture views. */
#ifndef ATTN_LAYER_UTIL_H
#define ATTN_LAYER_UTIL_H

#include "fixture.h"
#include "testutil.h"

/* An owned contiguous tensor. */
typedef struct lt {
    attn_view v;
    void *mem;
} lt;

static inline lt lt_new(attn_dtype dt, int ndim, const int64_t *shape) {
    lt t;
    int64_t n = 1;
    for (int k = 0; k < ndim; ++k) n *= shape[k];
    t.mem = calloc((size_t)(n ? n : 1), attn_dtype_size(dt));
    ck_assert_int_eq(attn_view_init(&t.v, dt, t.mem, ndim, shape), ATTN_OK);
    return t;
}
static inline lt lt_rand(attn_dtype dt, int ndim, const int64_t *shape, uint64_t *seed,
                         double scale) {
    lt t = lt_new(dt, ndim, shape);
    tu_fill(&t.v, seed, scale);
    return t;
}
static inline void lt_free(lt *t) { free(t->mem); t->mem = NULL; }

/* A contiguous double copy of any view (row-major logical order). */
static inline double *lt_doubles(const attn_view *v) {
    int64_t n = tu_numel(v), idx[ATTN_MAX_DIMS] = {0}, i = 0;
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (n) do d[i++] = tu_get(v, idx); while (tu_inc(idx, v->shape, v->ndim));
    return d;
}
/* A view (any dtype) of a fixture tensor, converted to dt; mem must be freed. */
static inline lt lt_from_fx(fx_tensor *t, attn_dtype dt) {
    ck_assert_ptr_nonnull(t);
    lt r = lt_new(dt, t->ndim ? t->ndim : 1, t->ndim ? t->shape : (int64_t[]){1});
    int64_t idx[ATTN_MAX_DIMS] = {0}, i = 0;
    do tu_set(&r.v, idx, t->data[i++]); while (tu_inc(idx, r.v.shape, r.v.ndim));
    return r;
}
/* A double view over contiguous data with shape. */
static inline attn_view lt_wrap(double *d, int ndim, const int64_t *shape) {
    attn_view v;
    ck_assert_int_eq(attn_view_init(&v, ATTN_F64, d, ndim, shape), ATTN_OK);
    return v;
}

/* Fill every view of a params struct (given as an array of views) with U(-s, s). */
static inline void fill_views(attn_view *v, int n, uint64_t *seed, double s) {
    for (int i = 0; i < n; ++i)
        if (v[i].data) tu_fill(&v[i], seed, s);
}

static inline void *slab_new(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    memset(p, 0, (bytes + 63) & ~(size_t)63);
    return p;
}

#endif
