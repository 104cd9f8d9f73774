/* SPDX-License-Identifier: MIT */
/* Elementwise kernels: GELU (tanh, erf), ReLU, broadcast adds, and their backward. */
#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"
#include "kernels/rows.h"
#include "kernels/simd.h"


/*
 * The row and elementwise kernels' parallel loop: tasks [0, ntasks) split in
 * contiguous ranges run on attn__threads(0, ntasks, flops) threads of
 * attn__parallel_for (src/core/threads.c), so a small call never leaves its
 * thread (its cost is one call of fn). `flops` is the work in
 * flop-equivalents: K_ACT_FLOPS per GELU element, K_MEM_FLOPS per element of a
 * memory-bound pass (an add reads and writes about 12 bytes for one flop).
 */
typedef struct k_range {
    int64_t n, nblk;
    void (*fn)(void *, int64_t, int64_t);
    void *ctx;
} k_range;

static void k_range_task(void *c, int64_t t, int tid) {
    const k_range *r = c;
    (void)tid;
    r->fn(r->ctx, r->n * t / r->nblk, r->n * (t + 1) / r->nblk);
}

void attn__k_parallel(int64_t ntasks, double flops, void (*fn)(void *, int64_t, int64_t),
                      void *ctx) {
    int nt = attn__threads(0, ntasks, flops);
    if (nt <= 1) {
        fn(ctx, 0, ntasks);
        return;
    }
    /* four contiguous blocks per thread, claimed one at a time by the loop's threads */
    k_range r = {ntasks, ntasks < 4 * (int64_t)nt ? ntasks : 4 * (int64_t)nt, fn, ctx};
    attn__parallel_for(nt, r.nblk, k_range_task, &r);
}

/* Axes of a broadcast sum, with strides in the source (dy) and destination (db). */
typedef struct k_axes {
    int n;
    int64_t shape[ATTN_MAX_DIMS], ssrc[ATTN_MAX_DIMS], sdst[ATTN_MAX_DIMS];
} k_axes;

/* db += dy over broadcast axes: kept leading axes, summed leading axes, then the last. */
typedef struct k_sum {
    k_axes keep, red;
    int64_t nkeep, nred; /* products of their extents */
    int64_t n, sn, dn;   /* last axis: extent, dy stride, db stride */
    bool last_kept;
} k_sum;

static inline void k_sum_offset(const k_axes *a, int64_t lin, int64_t *os, int64_t *od) {
    *os = *od = 0;
    for (int k = a->n - 1; k >= 0; --k) {
        int64_t i = lin % a->shape[k];
        lin /= a->shape[k];
        *os += i * a->ssrc[k];
        *od += i * a->sdst[k];
    }
}

/* dbb: db broadcast to dy's shape (stride 0 where it was broadcast). */
static void k_sum_plan(k_sum *p, const attn_view *dy, const attn_view *dbb) {
    int nd = dy->ndim;
    p->keep.n = p->red.n = 0;
    p->nkeep = p->nred = 1;
    for (int k = 0; k < nd - 1; ++k) {
        if (dy->shape[k] == 1)
            continue;
        bool red = dbb->stride[k] == 0;
        k_axes *a = red ? &p->red : &p->keep;
        a->shape[a->n] = dy->shape[k];
        a->ssrc[a->n] = dy->stride[k];
        a->sdst[a->n] = dbb->stride[k];
        a->n++;
        *(red ? &p->nred : &p->nkeep) *= dy->shape[k];
    }
    p->n = dy->shape[nd - 1];
    p->sn = dy->stride[nd - 1];
    p->dn = dbb->stride[nd - 1];
    p->last_kept = p->dn != 0 || p->n <= 1;
}

/* Instantiate the template for float, then double (include order matters). */
/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/elementwise.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/elementwise.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

/* b viewed with x's shape by NumPy broadcasting (ATTN_ESHAPE when it does not). */
static attn_status broadcast_to(const attn_view *b, const attn_view *x, attn_view *out) {
    if (b->ndim > x->ndim)
        return ATTN_ESHAPE;
    return attn_view_broadcast(b, x->ndim, x->shape, out);
}

static bool act_ok(attn_act act) {
    return act == ATTN_ACT_GELU_TANH || act == ATTN_ACT_GELU_ERF || act == ATTN_ACT_RELU;
}

/* The checks and run behind attn_activation, attn_gelu and attn_relu. */
static attn_status activation(attn_act act, const attn_view *x, attn_view *y) {
    ATTN_TRY(k_check_map(x, true, NULL, y, true));
    attn__activation_run(act, x, y);
    return ATTN_OK;
}

attn_status attn_activation(attn_act act, const attn_view *x, attn_view *y) {
    return act_ok(act) ? activation(act, x, y) : ATTN_EINVAL;
}

void attn__activation_run(attn_act act, const attn_view *x, attn_view *y) {
    ATTN_ASSERT(act_ok(act) && k_check_map(x, true, NULL, y, true) == ATTN_OK);
    attn__bias_act_run(act, x, NULL, NULL, y);
}

void attn__bias_act_run(attn_act act, const attn_view *x, const attn_view *b, attn_view *pre,
                        attn_view *y) {
    ATTN_ASSERT(act_ok(act) && (!pre || k_same_view(pre, x) || !attn__overlaps_raw(pre, x)));
    if (attn__numel(x) == 0)
        return;
    attn_view bb = *x;
    if (b) {
        attn_status st = broadcast_to(b, x, &bb);
        ATTN_ASSERT(st == ATTN_OK);
        (void)st;
    }
    k_iter it; /* rows only when there is a bias: its index is the last axis */
    k_iter_init(&it, 4, (const attn_view *[]){x, &bb, pre ? pre : x, y}, b == NULL);
    if (x->dtype == ATTN_F32)
        act_f32(act, &it, x, b ? &bb : NULL, pre, y);
    else
        act_f64(act, &it, x, b ? &bb : NULL, pre, y);
}

attn_status attn_activation_backward(attn_act act, const attn_view *x, const attn_view *dy,
                                     attn_view *dx) {
    if (!act_ok(act))
        return ATTN_EINVAL;
    ATTN_TRY(k_check_map(x, false, dy, dx, false));
    attn__activation_backward_run(act, x, dy, dx);
    return ATTN_OK;
}

void attn__activation_backward_run(attn_act act, const attn_view *x, const attn_view *dy,
                                   attn_view *dx) {
    ATTN_ASSERT(act_ok(act) && k_check_map(x, false, dy, dx, false) == ATTN_OK);
    attn__activation_grad_run(act, x, dy, dx, true);
}

void attn__activation_grad_run(attn_act act, const attn_view *x, const attn_view *dy,
                               attn_view *dx, bool accumulate) {
    /* written, not accumulated, dx may be exactly dy (each element read before it is written) */
    ATTN_ASSERT(act_ok(act) &&
                (k_check_map(x, false, dy, dx, false) == ATTN_OK ||
                 (!accumulate && k_same_view(dx, dy) && !attn__overlaps_raw(dx, x))));
    if (attn__numel(x) == 0)
        return;
    k_iter it;
    k_iter_init(&it, 3, (const attn_view *[]){x, dy, dx}, true);
    if (x->dtype == ATTN_F32)
        act_bwd_f32(act, &it, x, dy, dx, accumulate);
    else
        act_bwd_f64(act, &it, x, dy, dx, accumulate);
}

attn_status attn_gelu(attn_act act, const attn_view *x, attn_view *y) {
    if (act != ATTN_ACT_GELU_TANH && act != ATTN_ACT_GELU_ERF)
        return ATTN_EINVAL;
    return activation(act, x, y);
}

attn_status attn_relu(const attn_view *x, attn_view *y) {
    return activation(ATTN_ACT_RELU, x, y);
}

static attn_status add_check(const attn_view *x, const attn_view *b, const attn_view *y) {
    ATTN_TRY(k_check_float(x, 0));
    ATTN_TRY(k_check_float(b, x->dtype));
    ATTN_TRY(k_check_float(y, x->dtype));
    if (!k_same_shape(x, y))
        return ATTN_ESHAPE;
    attn_view bb;
    ATTN_TRY(broadcast_to(b, x, &bb));
    (void)bb;
    return k_check_out(y, 2, (const attn_view *[]){x, b}, 3u);
}

attn_status attn_add(const attn_view *x, const attn_view *b, attn_view *y) {
    ATTN_TRY(add_check(x, b, y));
    attn__add_run(x, b, y);
    return ATTN_OK;
}

void attn__add_run(const attn_view *x, const attn_view *b, attn_view *y) {
    ATTN_ASSERT(add_check(x, b, y) == ATTN_OK);
    if (attn__numel(x) == 0)
        return;
    attn_view bb;
    attn_status st = broadcast_to(b, x, &bb);
    ATTN_ASSERT(st == ATTN_OK);
    (void)st;
    k_iter it;
    k_iter_init(&it, 3, (const attn_view *[]){x, &bb, y}, true);
    if (x->dtype == ATTN_F32)
        add_f32(&it, x, &bb, y);
    else
        add_f64(&it, x, &bb, y);
}

static attn_status add_backward_check(const attn_view *dy, const attn_view *dx,
                                      const attn_view *db) {
    ATTN_TRY(k_check_float(dy, 0));
    attn_view dbb;
    if (dx) {
        ATTN_TRY(k_check_float(dx, dy->dtype));
        if (!k_same_shape(dx, dy))
            return ATTN_ESHAPE;
    }
    if (db) {
        ATTN_TRY(k_check_float(db, dy->dtype));
        ATTN_TRY(broadcast_to(db, dy, &dbb));
    }
    if (dx)
        ATTN_TRY(k_check_out(dx, 1, (const attn_view *[]){dy}, 0));
    if (db)
        ATTN_TRY(k_check_out(db, 2, (const attn_view *[]){dy, dx}, 0));
    return ATTN_OK;
}

attn_status attn_add_backward(const attn_view *dy, attn_view *dx, attn_view *db) {
    ATTN_TRY(add_backward_check(dy, dx, db));
    attn__add_backward_run(dy, dx, db);
    return ATTN_OK;
}

void attn__add_backward_run(const attn_view *dy, attn_view *dx, attn_view *db) {
    ATTN_ASSERT(add_backward_check(dy, dx, db) == ATTN_OK);
    if (attn__numel(dy) == 0)
        return;
    if (dx) { /* dx := dx + dy */
        k_iter it;
        k_iter_init(&it, 3, (const attn_view *[]){dx, dy, dx}, true);
        if (dy->dtype == ATTN_F32)
            add_f32(&it, dx, dy, dx);
        else
            add_f64(&it, dx, dy, dx);
    }
    if (db) {
        attn_view dbb;
        attn_status st = broadcast_to(db, dy, &dbb);
        ATTN_ASSERT(st == ATTN_OK);
        (void)st;
        k_sum p;
        k_sum_plan(&p, dy, &dbb);
        if (dy->dtype == ATTN_F32)
            sum_into_f32(&p, dy, &dbb);
        else
            sum_into_f64(&p, dy, &dbb);
    }
}

/* y = src (src any view of y's shape, a stride-0 broadcast bias included): rows in parallel. */
typedef struct k_copy {
    const k_iter *it;
    const char *s;
    char *y;
    size_t es;
    int64_t nchunk;
} k_copy;

static void copy_tasks(void *ctx, int64_t t0, int64_t t1) {
    const k_copy *c = ctx;
    const k_iter *it = c->it;
    int64_t s0 = it->rstride[0], s1 = it->rstride[1], off[2];
    for (int64_t t = t0; t < t1; ++t) {
        int64_t r = t / c->nchunk, c0 = (t % c->nchunk) * K_CHUNK;
        int64_t len = it->n - c0 < K_CHUNK ? it->n - c0 : K_CHUNK;
        k_iter_row(it, r, off);
        const char *sr = c->s + (off[0] + c0 * s0) * (int64_t)c->es;
        char *yr = c->y + (off[1] + c0 * s1) * (int64_t)c->es;
        if (s0 == 1 && s1 == 1)
            memcpy(yr, sr, (size_t)len * c->es);
        else if (c->es == 4)
            for (int64_t i = 0; i < len; ++i)
                ((float *)yr)[i * s1] = ((const float *)sr)[i * s0];
        else
            for (int64_t i = 0; i < len; ++i)
                ((double *)yr)[i * s1] = ((const double *)sr)[i * s0];
    }
}

void attn__copy_run(const attn_view *src, attn_view *y) {
    ATTN_ASSERT(src->dtype == y->dtype && k_same_shape(src, y) &&
                (src->dtype == ATTN_F32 || src->dtype == ATTN_F64));
    if (attn__numel(y) == 0)
        return;
    k_iter it;
    k_iter_init(&it, 2, (const attn_view *[]){src, y}, true);
    k_copy c = {&it, src->data, y->data, attn_dtype_size(y->dtype),
                (it.n + K_CHUNK - 1) / K_CHUNK};
    attn__k_parallel(it.nrows * c.nchunk, (double)it.nrows * (double)it.n * K_MEM_FLOPS,
                     copy_tasks, &c);
}

void attn__fill_bias_run(const attn_view *b, attn_view *y) {
    int nd = y->ndim, last = nd - 1;
    int64_t rows = 1, n = y->shape[last];
    size_t es = attn_dtype_size(y->dtype);
    for (int k = 0; k < last; ++k)
        rows *= y->shape[k];
    /* small, unit-stride rows: one memcpy per row, no iterator, no parallel loop */
    if (b->stride[0] == 1 && y->stride[last] == 1 && rows * n <= 16384) {
        for (int64_t r = 0; r < rows; ++r) {
            int64_t off = 0, q = r;
            for (int k = last - 1; k >= 0; --k) {
                off += (q % y->shape[k]) * y->stride[k];
                q /= y->shape[k];
            }
            memcpy((char *)y->data + off * (int64_t)es, b->data, (size_t)n * es);
        }
        return;
    }
    attn_view bb;
    attn_status st = broadcast_to(b, y, &bb);
    ATTN_ASSERT(st == ATTN_OK);
    (void)st;
    attn__copy_run(&bb, y);
}
