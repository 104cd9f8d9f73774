/* SPDX-License-Identifier: MIT */
/* The layers' scratch planner (count, validate, then run) and their slab binding. */
#include <string.h>

#include "layers/layers_internal.h"

static char plan_dummy[64] __attribute__((aligned(64)));

static void *plan_take(attn__plan *pl, size_t bytes) {
    size_t off = attn__align64(pl->used);
    if (bytes > SIZE_MAX / 2 || off > SIZE_MAX / 2) { /* the counting pass reports it */
        if (pl->err == ATTN_OK)
            pl->err = ATTN_ERANGE;
        bytes = 0;
    }
    pl->used = off + attn__align64(bytes ? bytes : 1);
    /*
     * Counting: each scratch view gets its own never-dereferenced address above
     * user space. With one shared dummy, two scratch operands of a nested
     * product looked like one memory (fuzz_layers: encoder, w1 without a unit
     * stride).
     */
    if (pl->counting)
        return (void *)(((uintptr_t)1 << 62) + off);
    return pl->base + off;
}

attn_view attn__plan_scratch(attn__plan *pl, attn_dtype dt, int ndim, const int64_t *shape,
                             bool zero) {
    size_t n = attn_dtype_size(dt);
    for (int k = 0; k < ndim; ++k)
        n *= (size_t)shape[k];
    void *p = plan_take(pl, n);
    attn_view v;
    if (!pl->counting) { /* the counting pass checked this very shape: no second check */
        if (zero)
            memset(p, 0, n);
        attn_view r = {.data = p, .dtype = dt, .ndim = ndim};
        v = r;
        int64_t s = 1;
        for (int k = ndim - 1; k >= 0; --k) {
            v.shape[k] = shape[k];
            v.stride[k] = s;
            s *= shape[k] > 0 ? shape[k] : 1;
        }
        return v;
    }
    attn_status st = attn_view_init(&v, dt, p, ndim, shape);
    if (st != ATTN_OK) { /* too large for a view: the counting pass reports it */
        ATTN_ASSERT(pl->counting);
        if (pl->err == ATTN_OK)
            pl->err = st;
        memset(&v, 0, sizeof v);
        v.dtype = dt;
        v.ndim = ndim;
    }
    return v;
}

void attn__plan_inner(attn__plan *pl, size_t need) {
    if (need > pl->inner)
        pl->inner = need;
}
void *attn__plan_inner_base(const attn__plan *pl) {
    /* integer arithmetic: base is NULL when the call needs no workspace (NULL + 0 is UB) */
    return pl->counting ? NULL
                        : (void *)((uintptr_t)pl->base + attn__align64(pl->used));
}
size_t attn__plan_inner_size(const attn__plan *pl) {
    return pl->counting ? 0 : pl->size - attn__align64(pl->used);
}
static attn_status plan_total(const attn__plan *pl, size_t *bytes) {
    if (pl->err != ATTN_OK)
        return pl->err;
    return attn__add_sz(attn__align64(pl->used), pl->inner, bytes) ? ATTN_OK : ATTN_ERANGE;
}

attn_status attn__plan_sdpa(attn__plan *pl, const attn_view *q, const attn_view *k,
                            const attn_view *v, const attn_sdpa_opts *opts, bool want_weights,
                            const attn__sdpa_plan **out) {
    if (pl->counting) {
        ATTN_ASSERT(pl->nsdpa < ATTN__PLAN_SDPA);
        attn__sdpa_plan *p = &pl->sdpa[pl->nsdpa];
        ATTN_TRY(attn__sdpa_plan_init(q, k, v, opts, want_weights, p));
        pl->nsdpa++;
        *out = p;
        return ATTN_OK;
    }
    ATTN_ASSERT(pl->next_sdpa < pl->nsdpa);
    *out = &pl->sdpa[pl->next_sdpa++];
    return ATTN_OK;
}

attn_status attn__plan_linear(attn__plan *pl, const attn_view *x, const attn_view *w,
                              const attn_view *b, attn_view *y) {
    if (pl->counting) {
        size_t need;
        ATTN_TRY(attn__linear_need(x, w, y, &need));
        attn__plan_inner(pl, need);
        return ATTN_OK;
    }
    attn__plan_gemm_bias(pl, x, w, b, y);
    return ATTN_OK;
}

void attn__plan_gemm_bias(attn__plan *pl, const attn_view *x, const attn_view *w,
                          const attn_view *b, attn_view *y) {
    /*
     * y := b, then y += x W with beta = 1. With beta = 0 OpenBLAS first zeroes C in a
     * pass of its own and the bias was a second pass after; this is one write pass.
     */
    if (b)
        attn__fill_bias_run(b, y);
    attn__gemm_run(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, x, w, b ? 1.0 : 0.0, y,
                   attn__plan_inner_base(pl), attn__plan_inner_size(pl));
}

attn_status attn__plan_linear_act(attn__plan *pl, const attn_view *x, const attn_view *w,
                                  const attn_view *b, attn_act act, attn_view *g,
                                  bool keep_pre, attn_view *y) {
    if (pl->counting) {
        size_t need;
        ATTN_TRY(attn__linear_need(x, w, g, &need));
        attn__plan_inner(pl, need);
        return ATTN_OK;
    }
    /* g := b, g += x W (beta = 1), then in one pass over it: g kept, y = act(g) */
    attn__plan_gemm_bias(pl, x, w, b, g);
    attn__bias_act_run(act, g, NULL, keep_pre ? g : NULL, y);
    return ATTN_OK;
}

attn_status attn__plan_linear_res(attn__plan *pl, const attn_view *x, const attn_view *w,
                                  const attn_view *b, const attn_view *r, attn_view *y) {
    if (pl->counting) {
        size_t need;
        ATTN_TRY(attn__linear_need(x, w, y, &need));
        attn__plan_inner(pl, need);
        return ATTN_OK;
    }
    /* y := r + b, then y += x W (the GEMM with beta = 1) */
    if (b)
        attn__add_run(r, b, y);
    else if (r->data != y->data)
        attn__copy_run(r, y);
    attn__gemm_run(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, x, w, 1.0, y, attn__plan_inner_base(pl),
                   attn__plan_inner_size(pl)); /* x, y are (..., n) with n >= 2 dims here */
    return ATTN_OK;
}

attn_status attn__plan_linear_backward(attn__plan *pl, const attn_view *x, const attn_view *w,
                                       const attn_view *dy, attn_view *dx, attn_view *dw,
                                       attn_view *db) {
    if (pl->counting) {
        size_t need;
        ATTN_TRY(attn__linear_backward_need(x, w, dy, dx, dw, &need));
        attn__plan_inner(pl, need);
        return ATTN_OK;
    }
    attn__linear_backward_run(x, w, dy, dx, dw, db, attn__plan_inner_base(pl),
                              attn__plan_inner_size(pl));
    return ATTN_OK;
}

attn_status attn__plan_linear_backward_set(attn__plan *pl, const attn_view *x,
                                           const attn_view *w, const attn_view *dy,
                                           attn_view *dx, attn_view *dw, attn_view *db) {
    if (pl->counting) {
        size_t need;
        ATTN_TRY(attn__linear_backward_need(x, w, dy, dx, dw, &need));
        attn__plan_inner(pl, need);
        return ATTN_OK;
    }
    void *work = attn__plan_inner_base(pl);
    size_t ws = attn__plan_inner_size(pl);
    /* dx := dy W^T (beta 0: dx needs no zeroing), then dW, db accumulated as ever */
    attn__gemm_run(ATTN_NO_TRANS, ATTN_TRANS, 1.0, dy, w, 0.0, dx, work, ws);
    if (dw || db)
        attn__linear_backward_run(x, w, dy, NULL, dw, db, work, ws);
    return ATTN_OK;
}

attn_status attn__layer_need(attn__layer_body body, const void *args, size_t *bytes) {
    attn__plan cnt = {.counting = true};
    ATTN_TRY(body(args, &cnt));
    return plan_total(&cnt, bytes);
}

attn_status attn__layer_exec(attn__layer_body body, const void *args, int threads,
                             const attn_view *const *outs, int nout,
                             const attn_view *const *ins, int nin, void *work,
                             size_t work_size) {
    attn__plan pl = {.counting = true};
    size_t need;
    ATTN_TRY(body(args, &pl));
    ATTN_TRY(plan_total(&pl, &need));
    ATTN_TRY(attn__check_aliasing(outs, nout, ins, nin));
    void *owned = NULL;
    ATTN_TRY(attn__work_acquire(&work, &work_size, need, &owned));
    if (!owned && (attn__work_overlaps(work, need, outs, nout) ||
                   attn__work_overlaps(work, need, ins, nin)))
        return ATTN_EALIAS;
    pl.counting = false;
    pl.base = work;
    pl.size = work_size;
    pl.used = 0;
    pl.next_sdpa = 0;
    int tok = attn__one_thread_begin(threads);
    attn_status st = body(args, &pl);
    attn__one_thread_end(tok);
    ATTN_ASSERT(st == ATTN_OK); /* the counting pass validated every step */
    free(owned);
    return st;
}

attn_view attn__heads(const attn_view *x, int64_t D) {
    /* (B, T, H*D) -> (B, T, H, D) -> (B, H, T, D) */
    attn_view h = {.data = x->data, .dtype = x->dtype, .ndim = 4,
                   .shape = {x->shape[0], D > 0 ? x->shape[2] / D : 0, x->shape[1], D},
                   .stride = {x->stride[0], D * x->stride[2], x->stride[1], x->stride[2]}};
    return h;
}

size_t attn__tensor_bytes(attn_dtype dt, int nd, const int64_t *shape) {
    size_t n = attn_dtype_size(dt);
    for (int k = 0; k < nd; ++k)
        n *= (size_t)shape[k];
    return attn__align64(n);
}

attn_status attn__slab_need(attn_dtype dt, int n, int64_t shp[][3], const int *nd,
                            size_t *bytes) {
    size_t need = 0;
    for (int i = 0; i < n; ++i) {
        size_t b = attn_dtype_size(dt);
        for (int k = 0; k < nd[i]; ++k)
            if (shp[i][k] < 0 || !attn__mul_sz(b, (size_t)shp[i][k], &b))
                return ATTN_ERANGE;
        if (b > SIZE_MAX - 64 || !attn__add_sz(need, attn__align64(b), &need))
            return ATTN_ERANGE;
    }
    *bytes = need;
    return ATTN_OK;
}

attn_status attn__slab_bind(attn_dtype dt, int n, int64_t shp[][3], const int *nd, void *slab,
                            size_t slab_size, attn_view *out) {
    size_t need;
    ATTN_TRY(attn__slab_need(dt, n, shp, nd, &need));
    if (!slab || ((uintptr_t)slab & 63u))
        return ATTN_EINVAL;
    if (slab_size < need)
        return ATTN_EWORKSPACE;
    char *p = slab;
    for (int i = 0; i < n; ++i) {
        ATTN_TRY(attn_view_init(&out[i], dt, p, nd[i], shp[i]));
        p += attn__tensor_bytes(dt, nd[i], shp[i]);
    }
    return ATTN_OK;
}

attn_status attn__shape_views(attn_dtype dt, int n, int64_t shp[][3], const int *nd,
                              attn_view *out) {
    for (int i = 0; i < n; ++i)
        ATTN_TRY(attn_view_init(&out[i], dt, plan_dummy, nd[i], shp[i]));
    return ATTN_OK;
}

attn_status attn__shape_view(attn_dtype dt, int ndim, const int64_t *shape, attn_view *out) {
    return attn_view_init(out, dt, plan_dummy, ndim, shape);
}

attn_status attn__want_like(const attn_view *g, const attn_view *like) {
    return g ? attn__want(g, like->dtype, like->ndim, like->shape) : ATTN_OK;
}

int attn__trace_views(const attn_trace *t, const attn_view **l, int n) {
    if (!t)
        return n;
    const attn_view *v[] = {t->ln1,         t->q,         t->k,
                            t->v,           t->scores,    t->attention,
                            t->read_values, t->concat,    t->projected_attention,
                            t->residual1,   t->ln2,       t->mlp_hidden_pre,
                            t->mlp_hidden,  t->mlp_output, t->output,
                            t->lse,         t->ln1_mean,  t->ln1_rstd,
                            t->ln2_mean,    t->ln2_rstd,  t->residual2};
    for (size_t i = 0; i < sizeof v / sizeof *v; ++i)
        l[n++] = v[i];
    return n;
}

/*
 * n views (2 or 3) as one, concatenated along the last axis, when they are its
 * adjacent blocks: the same ndim, shape but for the last axis, and strides,
 * each starting where the previous one's last-axis extent ends. That is
 * PyTorch's in_proj_weight (3C, C) seen transposed as wq, wk, wv (C, C) with
 * strides (1, C), or the column slices of one (B, T, 3C) activation.
 */
bool attn__cat_views(int n, const attn_view *const *v, attn_view *cat) {
    const attn_view *a = v[0];
    int nd = a->ndim, last = nd - 1;
    int64_t ext = a->shape[last];
    size_t es = attn_dtype_size(a->dtype);
    for (int i = 1; i < n; ++i) {
        const attn_view *b = v[i];
        if (b->ndim != nd || b->dtype != a->dtype)
            return false;
        for (int k = 0; k < nd; ++k)
            if (b->stride[k] != a->stride[k] || (k != last && b->shape[k] != a->shape[k]))
                return false;
        const char *want = (const char *)a->data + ext * a->stride[last] * (int64_t)es;
        if ((const char *)b->data != want || a->stride[last] == 0)
            return false;
        ext += b->shape[last];
    }
    *cat = *a;
    cat->shape[last] = ext;
    return true;
}

/* Columns [c0, c0 + n) of a (B, T, W) view. */
attn_view attn__cols(const attn_view *x, int64_t c0, int64_t n) {
    attn_view v = *x;
    v.data = (char *)x->data + c0 * x->stride[2] * (int64_t)attn_dtype_size(x->dtype);
    v.shape[2] = n;
    return v;
}

int attn__trace_out_views(const attn_trace *t, const attn_view **l, int n, attn_view *cat) {
    int m = attn__trace_views(t, l, n);
    if (t && t->q && t->k && t->v &&
        attn__cat_views(3, (const attn_view *[]){t->q, t->k, t->v}, cat)) {
        l[n + 1] = cat; /* the slots of q, k, v (attn__trace_views' order) */
        l[n + 2] = l[n + 3] = NULL;
    } else if (t && t->k && t->v &&
               attn__cat_views(2, (const attn_view *[]){t->k, t->v}, cat)) {
        l[n + 2] = cat;
        l[n + 3] = NULL;
    }
    return m;
}
