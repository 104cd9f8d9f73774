/* SPDX-License-Identifier: MIT */
/* Test helpers shared by the kernel and posenc suites: strided test views in every layout,
 * error-path snapshots, central finite differences, fixture views. */
#ifndef ATTN_KERNEL_UTIL_H
#define ATTN_KERNEL_UTIL_H

#include "fixture.h"
#include "testutil.h"

/* ---- test views ---------------------------------------------------------------------- */

typedef enum lay { L_CONTIG, L_TRANS, L_STRIDED, L_NEG, L_BCAST, L_COUNT } lay;
__attribute__((unused)) static const char *lay_name[L_COUNT] = {"contig", "trans", "strided",
                                                                "neg", "bcast"};
/* layouts an output may have (no broadcast) */
__attribute__((unused)) static const lay out_lays[] = {L_CONTIG, L_TRANS, L_STRIDED, L_NEG};
#define NOUT_LAYS 4

typedef struct tbuf {
    attn_view v;
    void *mem;
} tbuf;

/*
 * A view of `shape` with layout l over fresh memory: L_TRANS stores the last two axes
 * swapped (column-major rows), L_STRIDED pads every axis and uses stride 2 inside,
 * L_NEG reverses every axis, L_BCAST repeats axis 0 through stride 0. The whole buffer
 * is filled with junk first, then the view's elements with uniform values in
 * [-scale, scale).
 */
static inline tbuf mk(attn_dtype dt, int nd, const int64_t *shape, lay l, uint64_t *seed,
                      double scale) {
    int order[ATTN_MAX_DIMS];
    for (int k = 0; k < nd; ++k)
        order[k] = k;
    if (l == L_TRANS && nd >= 2) {
        order[nd - 2] = nd - 1;
        order[nd - 1] = nd - 2;
    }
    int64_t stride[ATTN_MAX_DIMS], s = l == L_STRIDED || (l == L_TRANS && nd == 1) ? 2 : 1;
    for (int j = nd - 1; j >= 0; --j) {
        int a = order[j];
        stride[a] = s;
        s *= (shape[a] > 0 ? shape[a] : 1) + (l == L_STRIDED);
    }
    size_t es = attn_dtype_size(dt);
    tbuf b;
    b.mem = calloc((size_t)s + 1, es);
    attn_view all;
    ck_assert_int_eq(attn_view_init(&all, dt, b.mem, 1, (int64_t[]){s}), ATTN_OK);
    tu_fill(&all, seed, 1e3); /* junk between the elements */
    int64_t off = 0;
    if (l == L_NEG)
        for (int k = 0; k < nd; ++k)
            if (shape[k] > 1) {
                off += (shape[k] - 1) * stride[k];
                stride[k] = -stride[k];
            }
    if (l == L_BCAST)
        stride[0] = 0;
    ck_assert_int_eq(
        attn_view_init_strided(&b.v, dt, (char *)b.mem + off * (int64_t)es, nd, shape, stride),
        ATTN_OK);
    tu_fill(&b.v, seed, scale);
    return b;
}

/* A contiguous F64 view of `shape`, zeroed. */
static inline tbuf mkwant(int nd, const int64_t *shape) {
    tbuf b;
    int64_t n = 1;
    for (int k = 0; k < nd; ++k)
        n *= shape[k];
    b.mem = calloc((size_t)n + 1, 8);
    ck_assert_int_eq(attn_view_init(&b.v, ATTN_F64, b.mem, nd, shape), ATTN_OK);
    return b;
}

/* dst := src elementwise (any dtypes, same shape). */
static inline void vcopy(const attn_view *src, const attn_view *dst) {
    if (tu_numel(src) == 0)
        return;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do
        tu_set(dst, idx, tu_get(src, idx));
    while (tu_inc(idx, src->shape, src->ndim));
}

/* A contiguous F64 copy of v. */
static inline tbuf dup64(const attn_view *v) {
    tbuf b = mkwant(v->ndim, v->shape);
    vcopy(v, &b.v);
    return b;
}

static inline void vscale(const attn_view *v, double a) {
    if (tu_numel(v) == 0)
        return;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do
        tu_set(v, idx, a * tu_get(v, idx));
    while (tu_inc(idx, v->shape, v->ndim));
}

/* A shape: ndim and extents. */
typedef struct shp {
    int nd;
    int64_t s[ATTN_MAX_DIMS];
} shp;

static inline void tfree(tbuf *b) {
    free(b->mem);
    b->mem = NULL;
}

static inline const char *dtn(attn_dtype dt) { return dt == ATTN_F64 ? "f64" : "f32"; }
#define RT(dt) TU_RTOL(dt)
#define AT(dt) TU_ATOL(dt)

/* Snapshot-and-compare of output buffers for error paths: nothing may be written. */
typedef struct snap {
    const attn_view *v;
    void *copy;
    size_t bytes;
    const void *lo;
} snap;
static inline snap take(const attn_view *v) {
    snap s = {v, NULL, 0, NULL};
    const void *lo, *hi;
    attn_view_span(v, &lo, &hi);
    s.lo = lo;
    s.bytes = (size_t)((const char *)hi - (const char *)lo);
    s.copy = malloc(s.bytes + 1);
    memcpy(s.copy, lo, s.bytes);
    return s;
}
static inline void untouched(snap *s, const char *what) {
    ck_assert_msg(memcmp(s->copy, s->lo, s->bytes) == 0, "%s: output written on error", what);
    free(s->copy);
}
/* Expect status st from call, with the outputs o1, o2, o3 (NULL = none) untouched. */
#define EXPECT3(st, call, o1, o2, o3)                                                          \
    do {                                                                                       \
        const attn_view *os_[3] = {(o1), (o2), (o3)};                                          \
        snap sn_[3];                                                                           \
        for (int i_ = 0; i_ < 3; ++i_)                                                         \
            if (os_[i_])                                                                       \
                sn_[i_] = take(os_[i_]);                                                       \
        attn_status got_ = (call);                                                             \
        ck_assert_msg(got_ == (st), "line %d: %s: got %s, want %s", __LINE__, #call,           \
                      attn_status_name(got_), attn_status_name(st));                           \
        for (int i_ = 0; i_ < 3; ++i_)                                                         \
            if (os_[i_])                                                                       \
                untouched(&sn_[i_], #call);                                                    \
    } while (0)
#define EXPECT(st, call, o) EXPECT3(st, call, o, NULL, NULL)

/*
 * Central finite differences in f64: the loss L = sum(w * out) after run(arg) recomputes
 * `out`; returns max |fd - analytic| / max |fd| over the elements of `param`.
 */
typedef struct fdctx {
    attn_status (*run)(void *arg);
    void *arg;
    const attn_view *out, *w;
} fdctx;

static inline double fd_loss(const fdctx *c) {
    ck_assert_int_eq(c->run(c->arg), ATTN_OK);
    double s = 0;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    if (tu_numel(c->out) == 0)
        return 0;
    do
        s += tu_get(c->w, idx) * tu_get(c->out, idx);
    while (tu_inc(idx, c->out->shape, c->out->ndim));
    return s;
}

static inline double fd_check(const fdctx *c, const attn_view *param,
                              const attn_view *analytic) {
    const double h = 1e-6;
    double maxerr = 0, maxfd = 0;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    if (tu_numel(param) == 0)
        return 0;
    do {
        double v0 = tu_get(param, idx);
        tu_set(param, idx, v0 + h);
        double lp = fd_loss(c);
        tu_set(param, idx, v0 - h);
        double lm = fd_loss(c);
        tu_set(param, idx, v0);
        double fd = (lp - lm) / (2 * h);
        maxerr = fmax(maxerr, fabs(fd - tu_get(analytic, idx)));
        maxfd = fmax(maxfd, fabs(fd));
    } while (tu_inc(idx, param->shape, param->ndim));
    return maxfd > 0 ? maxerr / maxfd : maxerr;
}
#define FD_OK(c, p, g, what)                                                                   \
    do {                                                                                       \
        double e_ = fd_check(c, p, g);                                                         \
        ck_assert_msg(e_ < 1e-6, "%s: finite-difference rel err %.3g", what, e_);              \
    } while (0)

/* Load a fixture tensor as a contiguous F64 view (kept alive by the fx_file). */
static inline attn_view fxv(fx_file *fx, const char *name) {
    fx_tensor *t = fx_get(fx, name);
    ck_assert_ptr_nonnull(t);
    attn_view v;
    ck_assert_int_eq(attn_view_init(&v, ATTN_F64, t->data, t->ndim, t->shape), ATTN_OK);
    return v;
}

#endif
