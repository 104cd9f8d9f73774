/* SPDX-License-Identifier: MIT */
/* Iteration over rows of same-shaped strided views, and the argument checks the row and
 * elementwise kernels (softmax, layernorm, activations, adds) share. Private. */
#ifndef ATTN_TMPL_ROWS_H
#define ATTN_TMPL_ROWS_H

#include "core/internal.h"

#define K_MAXOP 4

/*
 * nop views of one shape, seen as nrows rows of n elements. Extent-1 axes are
 * dropped and neighbouring axes merged wherever every view allows it, so the
 * common contiguous case is one long row (elementwise) or one (rows, n) block
 * (row kernels, whose last axis never merges: it is the row the math acts on).
 */
typedef struct k_iter {
    int nop, nlead;                         /* operands; leading axes kept */
    int64_t shape[ATTN_MAX_DIMS];           /* leading extents */
    int64_t stride[K_MAXOP][ATTN_MAX_DIMS]; /* leading strides per operand */
    int64_t rstride[K_MAXOP];               /* stride along the row */
    int64_t nrows, n;
} k_iter;

static inline void k_iter_init(k_iter *it, int nop, const attn_view *const *v,
                               bool merge_last) {
    int nd = v[0]->ndim;
    int64_t shape[ATTN_MAX_DIMS], str[K_MAXOP][ATTN_MAX_DIMS];
    int m = 0;
    for (int k = 0; k < nd; ++k) {
        bool last = k == nd - 1;
        if (v[0]->shape[k] == 1 && (merge_last || !last))
            continue;
        shape[m] = v[0]->shape[k];
        for (int o = 0; o < nop; ++o)
            str[o][m] = v[o]->stride[k];
        ++m;
    }
    if (m == 0) { /* every extent was 1: one element */
        shape[0] = 1;
        for (int o = 0; o < nop; ++o)
            str[o][0] = 1;
        m = 1;
    }
    int limit = merge_last ? m : m - 1; /* axes [0, limit) may merge with each other */
    /* merge axis k into k+1 when, for every operand, stride[k] == shape[k+1]*stride[k+1] */
    int w = 0;
    for (int k = 0; k < m; ++k) {
        if (w > 0 && k < limit) {
            bool ok = true;
            for (int o = 0; o < nop; ++o)
                ok = ok && str[o][w - 1] == shape[k] * str[o][k];
            if (ok) {
                shape[w - 1] *= shape[k];
                for (int o = 0; o < nop; ++o)
                    str[o][w - 1] = str[o][k];
                continue;
            }
        }
        shape[w] = shape[k];
        for (int o = 0; o < nop; ++o)
            str[o][w] = str[o][k];
        ++w;
    }
    it->nop = nop;
    it->nlead = w - 1;
    it->n = shape[w - 1];
    it->nrows = 1;
    for (int k = 0; k < w - 1; ++k) {
        it->shape[k] = shape[k];
        it->nrows *= shape[k];
    }
    for (int o = 0; o < nop; ++o) {
        it->rstride[o] = str[o][w - 1];
        for (int k = 0; k < w - 1; ++k)
            it->stride[o][k] = str[o][k];
    }
}

/* Element offsets of row r's first element in every operand. */
static inline void k_iter_row(const k_iter *it, int64_t r, int64_t *off) {
    for (int o = 0; o < it->nop; ++o)
        off[o] = 0;
    for (int k = it->nlead - 1; k >= 0; --k) {
        int64_t i = r % it->shape[k];
        r /= it->shape[k];
        for (int o = 0; o < it->nop; ++o)
            off[o] += i * it->stride[o][k];
    }
}

/* A non-NULL, well-formed F32/F64 view; of dtype dt unless dt is 0. */
static inline attn_status k_check_float(const attn_view *v, attn_dtype dt) {
    if (!v)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(v, 0));
    return dt && v->dtype != dt ? ATTN_EDTYPE : ATTN_OK;
}

static inline bool k_same_shape(const attn_view *a, const attn_view *b) {
    if (a->ndim != b->ndim)
        return false;
    for (int k = 0; k < a->ndim; ++k)
        if (a->shape[k] != b->shape[k])
            return false;
    return true;
}

/* The same elements in the same order: what "in-place allowed" accepts. */
static inline bool k_same_view(const attn_view *a, const attn_view *b) {
    if (a->data != b->data || a->dtype != b->dtype || !k_same_shape(a, b))
        return false;
    for (int k = 0; k < a->ndim; ++k)
        if (a->shape[k] > 1 && a->stride[k] != b->stride[k])
            return false;
    return true;
}

/*
 * An output must not overlap itself (a broadcast: ATTN_ESTRIDE) nor any of the
 * nin inputs (ATTN_EALIAS), except that it may be exactly the same view as an
 * input whose bit is set in `inplace` (bit i: in[i]). NULL inputs are skipped.
 */
static inline attn_status k_check_out(const attn_view *out, int nin, const attn_view *const *in,
                                      unsigned inplace) {
    if (attn__self_overlaps(out))
        return ATTN_ESTRIDE;
    for (int i = 0; i < nin; ++i) {
        if (!in[i] || !attn_view_overlaps(out, in[i]))
            continue;
        if ((inplace >> i & 1u) && k_same_view(out, in[i]))
            continue;
        return ATTN_EALIAS;
    }
    return ATTN_OK;
}

/*
 * The prologue of a same-shape map out = f(a) (unary) or out = f(a, b): a an
 * F32/F64 view, b (required unless unary) of a's dtype and shape, out of a's
 * dtype and shape, overlapping neither input unless in_place and out is
 * exactly the view a.
 */
static inline attn_status k_check_map(const attn_view *a, bool unary, const attn_view *b,
                                      const attn_view *out, bool in_place) {
    ATTN_TRY(k_check_float(a, 0));
    if (!unary)
        ATTN_TRY(k_check_float(b, a->dtype));
    ATTN_TRY(k_check_float(out, a->dtype));
    if ((!unary && !k_same_shape(a, b)) || !k_same_shape(a, out))
        return ATTN_ESHAPE;
    return k_check_out(out, 2, (const attn_view *[]){a, b}, in_place ? 1u : 0u);
}

/* Elements per task of the elementwise maps (a stack buffer of this many T). */
/*
 * Row sums in double in K_LANES interleaved partial sums (s[j] takes elements
 * i + j, i a multiple of K_LANES; the rest goes to tail), added in this fixed tree:
 * one order for every stride and every clone, and vector registers for unit strides.
 */
enum { K_LANES = 8 };
static inline __attribute__((always_inline)) double k_lanes_sum(const double *s,
                                                                double tail) {
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

#define K_CHUNK     1024
#define K_ACT_FLOPS 40.0 /* a GELU element, in flop-equivalents for attn__threads */
#define K_MEM_FLOPS 4.0  /* an element of a memory-bound pass (add, sum, copy) */

/* fn(ctx, lo, hi) over [0, ntasks), threaded by attn__threads (src/kernels/elementwise.c). */
ATTN_HIDDEN void attn__k_parallel(int64_t ntasks, double flops,
                                  void (*fn)(void *, int64_t, int64_t), void *ctx);

/*
 * Vectorized f32 activations (src/kernels/vmath.c; AVX2/AVX-512 clones picked
 * at load time), contiguous arrays of n: y = GELU(x) for act GELU_ERF or
 * GELU_TANH (y may be x), and dx += GELU'(x) dy (dx = GELU'(x) dy when not accumulate). Accuracy over all floats,
 * against the formula evaluated in double with libm and rounded, is measured
 * by tests/test_vmath.c and stated in docs/design.md.
 */
ATTN_HIDDEN void attn__vgelu_f32(attn_act act, const float *x, float *y, int64_t n);
ATTN_HIDDEN void attn__vgelu_grad_f32(attn_act act, const float *x, const float *dy, float *dx,
                                      int64_t n, bool accumulate);
/* The same for f64 (src/kernels/vmath_f64.c): the formulas through libmvec's vector
 * erfc and exp where glibc has them, libm's scalar calls elsewhere. */
ATTN_HIDDEN void attn__vgelu_f64(attn_act act, const double *x, double *y, int64_t n);
ATTN_HIDDEN void attn__vgelu_grad_f64(attn_act act, const double *x, const double *dy,
                                      double *dx, int64_t n, bool accumulate);

#endif /* ATTN_TMPL_ROWS_H */
