/* SPDX-License-Identifier: MIT */
/* What attn_sdpa and attn_sdpa_backward share: the validated plan and the score tile. */
#ifndef ATTN_SDPA_INTERNAL_H
#define ATTN_SDPA_INTERNAL_H

#include <math.h>

#include "kernels/kernels_internal.h"

/*
 * The lse of a row with no key to attend to (docs/numerics.md): a finite
 * stand-in for log(0) = -inf, far below any real lse, so that merging
 * partial results through their lse (exp(lse_a - lse_max)) gives such a row
 * no weight, and small enough in magnitude that lse - x never overflows.
 */
#define ATTN__SDPA_LSE_EMPTY (-1e30)

/*
 * Default tiles of the TILED algorithm from the per-core L2 size l2 (bytes), the
 * element size and the head widths (docs/design.md "sdpa tiling"); the materialized
 * algorithm takes ATTN__SDPA_BQ_MAT query rows of whole score rows.
 */
ATTN_HIDDEN void attn__sdpa_tiles(size_t l2, size_t es, int64_t D, int64_t Dv, int64_t *bq,
                                  int64_t *bk);
#define ATTN__SDPA_BQ_MAT 64 /* query rows per task (materialized: bq x Tk scores) */
#define ATTN__SDPA_DIAG_ROWS 64 /* rows per slice of a tile the causal diagonal cuts */

/*
 * Element (i0, i1, i2, i3) of a 4-D view, and (i0, i1, i2) of a 3-D one. Integer
 * arithmetic: an empty view may have NULL data, and NULL + 0 is undefined (fuzz_sdpa).
 */
static inline void *attn__at4(const attn_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t off = i0 * v->stride[0] + i1 * v->stride[1] + i2 * v->stride[2] + i3 * v->stride[3];
    return (void *)((uintptr_t)v->data + (uintptr_t)(off * (int64_t)attn_dtype_size(v->dtype)));
}
static inline void *attn__at3(const attn_view *v, int64_t i0, int64_t i1, int64_t i2) {
    int64_t off = i0 * v->stride[0] + i1 * v->stride[1] + i2 * v->stride[2];
    return (void *)((uintptr_t)v->data + (uintptr_t)(off * (int64_t)attn_dtype_size(v->dtype)));
}

/*
 * The transforms of one query row's scores before its masks (tmpl/mask.h):
 * softcap (> 0: s := softcap tanh(s / softcap)), then the ALiBi term
 * -slope |dist0 - c| for the row's c-th score (slope 0: none; dist0 = the
 * query's aligned position minus the first score's key position).
 */
typedef struct attn__score_xf {
    double softcap, slope;
    int64_t dist0;
} attn__score_xf;

/* Validated arguments of one attention call, shared by forward and backward. */
typedef struct attn__sdpa_plan {
    attn_dtype dt;
    int64_t    B, H, Hkv, Tq, Tk, D, Dv;
    int64_t    group;        /* H / Hkv: query heads per key/value head */
    double     scale;
    attn_causal causal;
    int64_t    causal_shift; /* causal: key j visible to query i iff j <= i + shift */
    bool       has_keep, has_bias;
    attn_view  keep, bias;   /* broadcast to (B, H, Tq, Tk) */
    const int64_t *kv_len;
    bool       window;       /* sliding window: p - wl <= j <= p + wr */
    int64_t    wl, wr;
    double     softcap;      /* > 0: s := softcap tanh(s / softcap) */
    bool       has_alibi, has_sinks;
    attn_view  alibi, sinks; /* (H) each */
    int64_t    n_seqs;       /* > 0: packed sequences at offsets cu_q, cu_k */
    const int64_t *cu_q, *cu_k;
    bool       variant;      /* any of window, softcap, alibi, sinks, n_seqs */
    bool       tiled;        /* the algorithm actually run */
    int64_t    bq, bk;       /* query rows per task, keys per tile */
    int        threads;      /* opts->threads as requested */
} attn__sdpa_plan;

/*
 * Check q, k, v and the options (everything but the output views): dtypes,
 * shapes (H % Hkv), mask dtypes and broadcasting, kv_len in [0, Tk], enums,
 * sizes for the BLAS. want_weights: the caller asks for opts->weights (the
 * forward), which selects MATERIALIZED under AUTO and is EUNSUPPORTED with
 * TILED.
 */
ATTN_FOR_MPI attn_status attn__sdpa_plan_init(const attn_view *q, const attn_view *k,
                                             const attn_view *v, const attn_sdpa_opts *opts,
                                             bool want_weights, attn__sdpa_plan *p);

/*
 * What query row i of batch b may see before keep and bias: keys [lo, hi)
 * (causal, window, kv_len, its packed sequence; lo == hi when none), its
 * aligned position pos, the index key0 of its sequence's first key (0 when
 * not packed: ALiBi's distance to key j is |pos - (j - key0)|), and qend, one
 * past its sequence's last query row (Tq when not packed). lo and hi never
 * decrease as i grows.
 */
typedef struct attn__sdpa_row {
    int64_t lo, hi, pos, key0, qend;
} attn__sdpa_row;

/* The packed sequence of query row i: the last n with cu_q[n] <= i. */
static inline int64_t attn__sdpa_seq_of(const attn__sdpa_plan *p, int64_t i) {
    int64_t lo = 0, hi = p->n_seqs;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (p->cu_q[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static inline attn__sdpa_row attn__sdpa_row_var(const attn__sdpa_plan *p, int64_t b,
                                                int64_t i) {
    attn__sdpa_row r = {.key0 = 0, .qend = p->Tq};
    int64_t Tkn = p->Tk, il = i, shift = p->causal_shift;
    if (p->n_seqs > 0) {
        int64_t n = attn__sdpa_seq_of(p, i);
        r.key0 = p->cu_k[n];
        r.qend = p->cu_q[n + 1];
        Tkn = p->cu_k[n + 1] - r.key0;
        il = i - p->cu_q[n];
        shift = p->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? Tkn - (r.qend - p->cu_q[n]) : 0;
    }
    int64_t pos = il + shift, lo = 0, hi = Tkn; /* local key indices */
    if (p->causal != ATTN_CAUSAL_NONE && pos + 1 < hi)
        hi = pos + 1;
    if (p->window) {
        if (pos > p->wl)
            lo = pos - p->wl;
        if (p->wr < hi - pos - 1)
            hi = pos + p->wr + 1;
    }
    r.pos = pos;
    r.lo = r.key0 + lo;
    r.hi = r.key0 + hi;
    if (p->kv_len && r.hi > p->kv_len[b])
        r.hi = p->kv_len[b];
    if (r.hi < r.lo)
        r.hi = r.lo;
    return r;
}

static inline __attribute__((always_inline)) attn__sdpa_row
attn__sdpa_row_of(const attn__sdpa_plan *p, int64_t b, int64_t i) {
    if (p->variant)
        return attn__sdpa_row_var(p, b, i);
    /* causal and kv_len only: keys [0, hi) */
    int64_t hi = p->kv_len ? p->kv_len[b] : p->Tk;
    if (p->causal != ATTN_CAUSAL_NONE && i + p->causal_shift + 1 < hi)
        hi = i + p->causal_shift + 1;
    attn__sdpa_row r = {
        .lo = 0, .hi = hi < 0 ? 0 : hi, .pos = i + p->causal_shift, .key0 = 0, .qend = p->Tq};
    return r;
}

/* Keys below this limit may be visible to query row i of batch b (attn__sdpa_row_of's hi). */
static inline int64_t attn__sdpa_key_limit(const attn__sdpa_plan *p, int64_t b, int64_t i) {
    return attn__sdpa_row_of(p, b, i).hi;
}

/* The sink logit of head h (-inf: none). */
static inline double attn__sdpa_sink(const attn__sdpa_plan *p, int64_t h) {
    if (!p->has_sinks)
        return -INFINITY;
    const char *at =
        (const char *)p->sinks.data + h * p->sinks.stride[0] * (int64_t)attn_dtype_size(p->dt);
    return p->dt == ATTN_F32 ? (double)*(const float *)at : *(const double *)at;
}

/* The ALiBi slope of head h (0: none). */
static inline double attn__sdpa_slope(const attn__sdpa_plan *p, int64_t h) {
    if (!p->has_alibi)
        return 0.0;
    const char *at =
        (const char *)p->alibi.data + h * p->alibi.stride[0] * (int64_t)attn_dtype_size(p->dt);
    return p->dt == ATTN_F32 ? (double)*(const float *)at : *(const double *)at;
}

/*
 * The end of a softmax row with sink logit sink (-inf: none) from its running
 * max m (finite) and sum l of e^{s - m}: out = acc * *inv (acc = sum e^{s - m} v),
 * lse. With M = max(m, sink): a = l e^{m - M}, c = e^{sink - M},
 * inv = e^{m - M} / (a + c), lse = M + log(a + c); no sink: 1 / l and m + log l.
 */
static inline void attn__sdpa_finish(double m, double l, double sink, double *inv,
                                     double *lse) {
    if (sink == -INFINITY) {
        *inv = 1.0 / l;
        *lse = m + log(l);
        return;
    }
    double M = m > sink ? m : sink, e = exp(m - M), a = l * e + exp(sink - M);
    *inv = e / a;
    *lse = M + log(a);
}

/* Multiply-adds x 2 of the two products of the forward (the thread-count heuristic). */
static inline double attn__sdpa_flops(const attn__sdpa_plan *p) {
    return 2.0 * (double)p->B * (double)p->H * (double)p->Tq * (double)p->Tk *
           (double)(p->D + p->Dv);
}

/* True when keep allows at least one (i, j) of the tile rows x cols at (b, h, i0, j0). */
ATTN_HIDDEN bool attn__sdpa_keep_any(const attn__sdpa_plan *p, int64_t b, int64_t h,
                                     int64_t i0, int64_t rows, int64_t j0, int64_t cols);

/*
 * The score tile S (rows, cols), row stride lds, for batch b, query head h,
 * queries i0.., keys j0..: S = scale q k^T + bias through attn__gemm_run, with
 * -inf where a key is masked (keep == 0, or j >= key_limit(i)): the one
 * masking rule of the forward, the backward and the layers' trace. gw/gws:
 * this thread's attn_gemm workspace.
 */
ATTN_HIDDEN void attn__sdpa_scores(const attn__sdpa_plan *p, const attn_view *q,
                                   const attn_view *k, int64_t b, int64_t h, int64_t i0,
                                   int64_t rows, int64_t j0, int64_t cols, void *s, int64_t lds,
                                   void *gw, size_t gws);

/*
 * The two halves of attn__sdpa_scores, for the fused row passes: the product
 * S = scale q k^T alone, and bias and keep on the visible part of one score row i
 * (keys j0 .. j0 + lim, lim the row's visible count in the tile; the tail past lim
 * is not written).
 */
ATTN_HIDDEN void attn__sdpa_scores_gemm(const attn__sdpa_plan *p, const attn_view *q,
                                        const attn_view *k, int64_t b, int64_t h, int64_t i0,
                                        int64_t rows, int64_t j0, int64_t cols, void *s,
                                        int64_t lds, void *gw, size_t gws);
ATTN_HIDDEN void attn__sdpa_mask_row(const attn__sdpa_plan *p, int64_t b, int64_t h, int64_t i,
                                     int64_t j0, int64_t lim, void *row);

/*
 * The specs of a forward's outputs against the plan (attn__check_outputs):
 * out (B, H, Tq, Dv) required, weights (B, H, Tq, Tk) and lse (B, H, Tq) optional.
 */
ATTN_HIDDEN void attn__sdpa_out_specs(const attn__sdpa_plan *p, const attn_view *out,
                                      const attn_view *weights, const attn_view *lse,
                                      attn__spec s[3]);

/*
 * The forward on a plan and views it validated: attn__sdpa_need gives the
 * workspace (ERANGE when it does not fit a size_t), attn__sdpa_run computes
 * out (and weights, lse when not NULL; weights only with a materialized plan).
 */
ATTN_FOR_MPI attn_status attn__sdpa_need(const attn__sdpa_plan *p, const attn_view *q,
                                        const attn_view *k, const attn_view *v, size_t *bytes);
ATTN_HIDDEN void attn__sdpa_run(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                                const attn_view *v, attn_view *out, attn_view *weights,
                                attn_view *lse, void *work, size_t work_size);

/* The scaled, masked scores S (B, H, Tq, Tk) alone (the layers' trace), by attn__sdpa_scores. */
ATTN_HIDDEN attn_status attn__sdpa_scores_need(const attn__sdpa_plan *p, const attn_view *q,
                                               const attn_view *k, size_t *bytes);
ATTN_HIDDEN void attn__sdpa_scores_run(const attn__sdpa_plan *p, const attn_view *q,
                                       const attn_view *k, attn_view *scores, void *work,
                                       size_t work_size);

/*
 * The backward on a validated plan: out, lse, dout (B, H, Tq, Dv|-) as the
 * forward gave them, gradients dq, dk, dv (NULL: not wanted) accumulated.
 * attn__sdpa_backward_check: dtypes, shapes and aliasing of those views.
 */
ATTN_HIDDEN attn_status attn__sdpa_backward_check(const attn__sdpa_plan *p, const attn_view *q,
                                                  const attn_view *k, const attn_view *v,
                                                  const attn_sdpa_opts *opts,
                                                  const attn_view *out, const attn_view *lse,
                                                  const attn_view *dout, const attn_view *dq,
                                                  const attn_view *dk, const attn_view *dv);
ATTN_FOR_MPI attn_status attn__sdpa_backward_need(const attn__sdpa_plan *p, const attn_view *q,
                                                 const attn_view *k, const attn_view *v,
                                                 size_t *bytes);
ATTN_HIDDEN void attn__sdpa_backward_run(const attn__sdpa_plan *p, const attn_view *q,
                                         const attn_view *k, const attn_view *v,
                                         const attn_view *out, const attn_view *lse,
                                         const attn_view *dout, attn_view *dq, attn_view *dk,
                                         attn_view *dv, void *work, size_t work_size);

/*
 * Rows whose saved lse has lost the precision the backward's recomputed P needs
 * (docs/numerics.md "Backward at large logits"): |lse| >= 2^6 in f32, 2^10 in f64,
 * where one rounding of the lse moves every P of the row by more than ~2e-6 (f32) /
 * 1e-13 (f64) relative. The backward corrects them by kappa = log sum_j exp(s_j - lse)
 * over the row's visible keys: P = exp(s - lse - kappa), in double.
 */
static inline bool attn__sdpa_lse_inexact(attn_dtype dt, double lse) {
    return isfinite(lse) && fabs(lse) >= (dt == ATTN_F32 ? 64.0 : 1024.0);
}

/*
 * Row-major (B, H, Tq) doubles addressed as base[b * s0 + h * s1 + i] (the ring's
 * slices of its per-row arrays).
 */
typedef struct attn__rows_f64 {
    double *base;
    int64_t s0, s1;
} attn__rows_f64;

/*
 * The forward with the row statistics in double instead of a dtype lse: m (the row
 * max, -inf for a row with no key) and l (sum exp(s - m)), so that partial results
 * merge exactly at any logit magnitude (ring attention). out as attn__sdpa_run.
 */
ATTN_FOR_MPI void attn__sdpa_run_ml(const attn__sdpa_plan *p, const attn_view *q,
                                   const attn_view *k, const attn_view *v, attn_view *out,
                                   attn__rows_f64 m, attn__rows_f64 l, void *work,
                                   size_t work_size);

/*
 * sums[b, h, i] += sum over the visible keys of exp(s_ij - lse_i), for the rows whose
 * lse is inexact (attn__sdpa_lse_inexact); the others are left alone. The workspace
 * of attn__sdpa_backward_need suffices. Ring attention adds the blocks' sums, then
 * passes kappa = log(sum) to attn__sdpa_backward_run_kappa.
 */
ATTN_FOR_MPI void attn__sdpa_lse_sums(const attn__sdpa_plan *p, const attn_view *q,
                                     const attn_view *k, const attn_view *v, const attn_view *lse,
                                     attn__rows_f64 sums, void *work, size_t work_size);

/*
 * attn__sdpa_backward_run with the lse corrections given (kappa[b, h, i], 0 = none)
 * instead of computed from this call's keys alone (ring attention: a row's keys lie
 * on every rank).
 */
ATTN_FOR_MPI void attn__sdpa_backward_run_kappa(const attn__sdpa_plan *p, const attn_view *q,
                                               const attn_view *k, const attn_view *v,
                                               const attn_view *out, const attn_view *lse,
                                               const attn_view *dout, attn_view *dq,
                                               attn_view *dk, attn_view *dv,
                                               attn__rows_f64 kappa, void *work,
                                               size_t work_size);

/* A 2-D (rows, cols) view of v[b, h, r0:r0+rows, :] (a 4-D view). */
ATTN_HIDDEN attn_view attn__sdpa_rows(const attn_view *v, int64_t b, int64_t h, int64_t r0,
                                      int64_t rows);

/* A contiguous (rows, cols) view with row stride ld over workspace memory. */
ATTN_HIDDEN attn_view attn__sdpa_buf(attn_dtype dt, void *data, int64_t rows, int64_t cols,
                                     int64_t ld);

#endif
