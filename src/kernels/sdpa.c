/* SPDX-License-Identifier: MIT */
/* attn_sdpa: scaled dot-product attention, materialized or tiled (online softmax), threaded. */
/* no FP exception flags (attn never reads them): lets GCC if-convert the mask loops */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "vect-cost-model=dynamic")
#endif

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "attn_config.h"
#include "kernels/lse_merge.h"
#include "kernels/sdpa_internal.h"

#if ATTN_HAVE_OPENMP
#include <omp.h>
#endif

/* ---- the plan shared with the backward ---------------------------------- */

/*
 * The per-core L2 size in bytes, read once (sysconf; 1 MiB when the system does not
 * say or says something implausible). A relaxed atomic: every thread that reads it
 * first computes the same value, so the race is benign and TSan-clean.
 */
static size_t sdpa_l2_bytes(void) {
    static atomic_size_t cached;
    size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v)
        return v;
    long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    v = l2 >= (64L << 10) && l2 <= (1L << 30) ? (size_t)l2 : (size_t)1 << 20;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}

static int64_t pow2_floor(int64_t x) {
    int64_t p = 1;
    while (p <= x / 2)
        p *= 2;
    return p;
}

/*
 * Default tiles (docs/design.md "sdpa tiling"): a quarter of L2 for the score tile and
 * as much for one K and one V tile, so that S (or P, dP) and the K/V tile the BLAS packs
 * stay in L2 between the two products. bk = keys whose K and V rows fit the budget,
 * bq = rows of bk scores that fit it; powers of two, bk in [64, 512], bq in [16, 512].
 */
void attn__sdpa_tiles(size_t l2, size_t es, int64_t D, int64_t Dv, int64_t *bq, int64_t *bk) {
    int64_t budget = (int64_t)(l2 / 4), per_key = (D + Dv) * (int64_t)es;
    if (per_key < (int64_t)es)
        per_key = (int64_t)es;
    int64_t k = pow2_floor(budget / per_key > 0 ? budget / per_key : 1);
    k = k < 64 ? 64 : k > 512 ? 512 : k;
    int64_t q = pow2_floor(budget / (k * (int64_t)es) > 0 ? budget / (k * (int64_t)es) : 1);
    *bq = q < 16 ? 16 : q > 512 ? 512 : q;
    *bk = k;
}

/*
 * The variant options against the plan's shapes (docs/numerics.md "Attention
 * variants"): window sizes, softcap, alibi and sinks (H), packed sequences.
 */
static attn_status plan_variants(const attn_sdpa_opts *o, attn__sdpa_plan *t) {
    if (!o->window && !o->window_left && !o->window_right && o->softcap == 0 && !o->alibi &&
        !o->sinks && !o->dsinks && !o->n_seqs && !o->cu_seqlens_q && !o->cu_seqlens_k)
        return ATTN_OK; /* none (the plan's fields are zero) */
    bool packed = o->n_seqs > 0;
    if (o->n_seqs < 0 || o->dsinks ||
        (packed ? !o->cu_seqlens_q || !o->cu_seqlens_k : o->cu_seqlens_q || o->cu_seqlens_k))
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_variants(t->dt, t->H, o->window, o->window_left, o->window_right,
                                  o->softcap, o->alibi, o->sinks));
    if (packed && t->B != 1)
        return ATTN_ESHAPE;
    if (packed) {
        ATTN_TRY(attn__check_offsets(o->cu_seqlens_q, o->n_seqs, t->Tq));
        ATTN_TRY(attn__check_offsets(o->cu_seqlens_k, o->n_seqs, t->Tk));
    }
    t->window = o->window;
    t->wl = o->window_left;
    t->wr = o->window_right;
    t->softcap = o->softcap;
    t->has_alibi = o->alibi != NULL;
    t->has_sinks = o->sinks != NULL;
    if (o->alibi)
        t->alibi = *o->alibi;
    if (o->sinks)
        t->sinks = *o->sinks;
    t->n_seqs = o->n_seqs;
    t->cu_q = o->cu_seqlens_q;
    t->cu_k = o->cu_seqlens_k;
    t->variant = t->window || t->softcap > 0 || t->has_alibi || t->has_sinks || packed;
    return ATTN_OK;
}

attn_status attn__sdpa_plan_init(const attn_view *q, const attn_view *k, const attn_view *v,
                                 const attn_sdpa_opts *opts, bool want_weights,
                                 attn__sdpa_plan *p) {
    static const attn_sdpa_opts defaults = {0};
    if (!opts)
        opts = &defaults;
    attn__qkv d;
    ATTN_TRY(attn__check_qkv(q, k, v, &d));
    if ((unsigned)opts->causal > ATTN_CAUSAL_BOTTOM_RIGHT ||
        (unsigned)opts->algo > ATTN_ALGO_TILED || opts->block_q < 0 || opts->block_k < 0 ||
        opts->threads < 0 || !isfinite(opts->scale))
        return ATTN_EINVAL;
    attn__sdpa_plan t = {.dt = d.dt,
                         .B = d.B,
                         .H = d.H,
                         .Hkv = d.Hkv,
                         .Tq = d.Tq,
                         .Tk = d.Tk,
                         .D = d.D,
                         .Dv = d.Dv};
    t.group = t.Hkv > 0 ? t.H / t.Hkv : 1;
    int64_t mshape[4] = {t.B, t.H, t.Tq, t.Tk};
    if (opts->keep) {
        ATTN_TRY(attn__check_mask(opts->keep, ATTN_U8, 4, mshape, &t.keep));
        t.has_keep = true;
    }
    if (opts->bias) {
        ATTN_TRY(attn__check_mask(opts->bias, t.dt, 4, mshape, &t.bias));
        t.has_bias = true;
    }
    ATTN_TRY(attn__check_lengths(opts->kv_len, t.B, t.Tk));
    t.kv_len = opts->kv_len;
    ATTN_TRY(plan_variants(opts, &t));
    if (t.D > INT_MAX || t.Dv > INT_MAX)
        return ATTN_ERANGE;
    if (want_weights && opts->algo == ATTN_ALGO_TILED)
        return ATTN_EUNSUPPORTED;
    /* AUTO: whole rows when the weights are wanted, else tiles (identical for Tk <= bk) */
    t.tiled = opts->algo == ATTN_ALGO_TILED || (opts->algo == ATTN_ALGO_AUTO && !want_weights);
    int64_t dbq, dbk;
    attn__sdpa_tiles(sdpa_l2_bytes(), attn_dtype_size(t.dt), t.D, t.Dv, &dbq, &dbk);
    t.bq = opts->block_q ? opts->block_q : t.tiled ? dbq : ATTN__SDPA_BQ_MAT;
    t.bk = t.tiled ? (opts->block_k ? opts->block_k : dbk) : t.Tk;
    if (t.bq > t.Tq)
        t.bq = t.Tq;
    if (t.bk > t.Tk)
        t.bk = t.Tk;
    if (t.bq < 1)
        t.bq = 1;
    if (t.bk < 1)
        t.bk = 1;
    if (t.bq > INT_MAX || t.bk > INT_MAX)
        return ATTN_ERANGE;
    t.scale = opts->scale != 0.0 ? opts->scale : t.D > 0 ? 1.0 / sqrt((double)t.D) : 1.0;
    t.causal = opts->causal;
    t.causal_shift = opts->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? t.Tk - t.Tq : 0;
    t.threads = opts->threads;
    *p = t;
    return ATTN_OK;
}

bool attn__sdpa_keep_any(const attn__sdpa_plan *p, int64_t b, int64_t h, int64_t i0,
                         int64_t rows, int64_t j0, int64_t cols) {
    int64_t sj = p->keep.stride[3];
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t *kr = (const uint8_t *)attn__at4(&p->keep, b, h, i0 + r, j0);
        for (int64_t c = 0; c < cols; ++c)
            if (kr[c * sj])
                return true;
    }
    return false;
}

attn_view attn__sdpa_rows(const attn_view *v, int64_t b, int64_t h, int64_t r0, int64_t rows) {
    attn_view t = {.data = attn__at4(v, b, h, r0, 0),
                   .dtype = v->dtype,
                   .ndim = 2,
                   .shape = {rows, v->shape[3]},
                   .stride = {v->stride[2], v->stride[3]}};
    return t;
}

attn_view attn__sdpa_buf(attn_dtype dt, void *data, int64_t rows, int64_t cols, int64_t ld) {
    attn_view t = {
        .data = data, .dtype = dt, .ndim = 2, .shape = {rows, cols}, .stride = {ld, 1}};
    return t;
}

/* ---- per-dtype kernels --------------------------------------------------- */

/*
 * Everything a forward task reads; per-thread scratch is carved at these offsets.
 * Key split (small B*H): nsplit > 1 pieces per (b, h, query block), each over a
 * chunk of `chunk` keys, its normalized partial out and row statistics stored at
 * off_pieces + piece * piece_size (o, then m and l in double), merged afterwards.
 */
typedef struct fwd_ctx {
    const attn__sdpa_plan *p;
    const attn_view *q, *k, *v, *out, *weights, *lse;
    size_t off_s, off_acc, off_m, off_l, off_gw, gws, per_thread;
    attn__rows_f64 mo, lo; /* attn__sdpa_run_ml: row max and sum (base NULL: none) */
    int64_t nsplit, chunk;
    size_t off_pieces, piece_size, piece_ml;
} fwd_ctx;

/* Where a key-split task writes: its normalized partial out (rows, Dv) and m, l per row. */
typedef struct fwd_piece {
    void *o;
    double *m, *l;
} fwd_piece;

/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/sdpa.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/sdpa.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

void attn__sdpa_scores_gemm(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                            int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0,
                            int64_t cols, void *s, int64_t lds, void *gw, size_t gws) {
    /* S (rows, cols) = scale q[b, h, i0:] k[b, h / group, j0:]^T */
    attn_view qt = attn__sdpa_rows(q, b, h, i0, rows);
    attn_view kt = attn__sdpa_rows(k, b, h / p->group, j0, cols);
    attn_view st = attn__sdpa_buf(p->dt, s, rows, cols, lds);
    attn__gemm_run(ATTN_NO_TRANS, ATTN_TRANS, p->scale, &qt, &kt, 0.0, &st, gw, gws);
}

void attn__sdpa_mask_row(const attn__sdpa_plan *p, int64_t b, int64_t h, int64_t i, int64_t j0,
                         int64_t lim, void *row) {
    if (!p->has_bias && !p->has_keep && !p->variant)
        return;
    if (p->dt == ATTN_F32)
        mask_row_f32(p, b, h, i, j0, lim, row);
    else
        mask_row_f64(p, b, h, i, j0, lim, row);
}

void attn__sdpa_scores(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                       int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                       void *s, int64_t lds, void *gw, size_t gws) {
    attn__sdpa_scores_gemm(p, q, k, b, h, i0, rows, j0, cols, s, lds, gw, gws);
    if (p->dt == ATTN_F32)
        mask_tile_f32(p, b, h, i0, rows, j0, cols, s, lds);
    else
        mask_tile_f64(p, b, h, i0, rows, j0, cols, s, lds);
}

/* ---- the forward --------------------------------------------------------- */

void attn__sdpa_out_specs(const attn__sdpa_plan *p, const attn_view *out, const attn_view *w,
                          const attn_view *lse, attn__spec s[3]) {
    s[0] = (attn__spec){out, true, 4, {p->B, p->H, p->Tq, p->Dv}};
    s[1] = (attn__spec){w, false, 4, {p->B, p->H, p->Tq, p->Tk}};
    s[2] = (attn__spec){lse, false, 3, {p->B, p->H, p->Tq}};
}

/*
 * Key split (small B*H, docs/design.md "sdpa tiling"): with fewer than
 * ATTN__SPLIT_TASKS tasks, each (b, h, query block) is cut into nsplit key chunks (at
 * least 64 keys each, a multiple of 16) merged through their lse, so that every
 * thread works. By shape alone: the bits do not depend on the thread count.
 */
static void fwd_split(fwd_ctx *c, int64_t n) {
    const attn__sdpa_plan *p = c->p;
    c->nsplit = 1;
    c->chunk = p->Tk;
    if (!p->tiled || n == 0 || p->Tk < 128 || p->Dv == 0 || n >= ATTN__SPLIT_TASKS)
        return;
    int64_t want = (ATTN__SPLIT_TASKS + n - 1) / n, most = p->Tk / 64;
    int64_t ns = want < most ? want : most;
    if (ns < 2)
        return;
    int64_t chunk = (p->Tk + ns - 1) / ns;
    chunk = (chunk + 15) / 16 * 16;
    c->chunk = chunk;
    c->nsplit = (p->Tk + chunk - 1) / chunk;
}

/* Scratch per thread: score tile, accumulator, row max and sum, attn_gemm packing. */
static attn_status fwd_layout(fwd_ctx *c, int64_t *ntasks, int *nthreads, size_t *total) {
    const attn__sdpa_plan *p = c->p;
    size_t es = attn_dtype_size(p->dt), s, acc, ml;
    if (!attn__mul_sz((size_t)p->bq, (size_t)p->bk, &s) || !attn__mul_sz(s, es, &s) ||
        !attn__mul_sz((size_t)p->bq, (size_t)p->Dv, &acc) || !attn__mul_sz(acc, es, &acc) ||
        s > SIZE_MAX / 4 || acc > SIZE_MAX / 4)
        return ATTN_ERANGE;
    ml = (size_t)p->bq * es;
    /* attn_gemm packs operands without a unit stride: size it on a full tile */
    c->gws = 0;
    if (p->B > 0 && p->H > 0 && p->Tq > 0 && p->Tk > 0) {
        attn_view qt = attn__sdpa_rows(c->q, 0, 0, 0, p->bq);
        attn_view kt = attn__sdpa_rows(c->k, 0, 0, 0, p->bk);
        attn_view vt = attn__sdpa_rows(c->v, 0, 0, 0, p->bk);
        size_t g1 = attn__gemm_pack_size(&qt, ATTN_NO_TRANS) +
                    attn__gemm_pack_size(&kt, ATTN_TRANS);    /* S = q k^T */
        size_t g2 = attn__gemm_pack_size(&vt, ATTN_NO_TRANS); /* acc += P v */
        c->gws = g1 > g2 ? g1 : g2;
    }
    c->off_s = 0;
    c->off_acc = attn__align64(s);
    c->off_m = c->off_acc + attn__align64(acc);
    c->off_l = c->off_m + attn__align64(ml);
    c->off_gw = c->off_l + attn__align64(ml);
    if (!attn__add_sz(c->off_gw, attn__align64(c->gws), &c->per_thread))
        return ATTN_ERANGE;
    int64_t nqb = p->Tq > 0 ? (p->Tq + p->bq - 1) / p->bq : 0, n;
    if (!attn__mul_i64(p->B, p->H, &n) || !attn__mul_i64(n, nqb, &n))
        return ATTN_ERANGE;
    fwd_split(c, n);
    int64_t nall = n * c->nsplit; /* n < ATTN__SPLIT_TASKS when split: no overflow */
    *ntasks = nall;
    *nthreads = attn__threads(p->threads, nall, attn__sdpa_flops(p));
    if (n == 0) {
        *total = 0;
        return ATTN_OK;
    }
    size_t threads_sz;
    if (!attn__mul_sz(c->per_thread, (size_t)*nthreads, &threads_sz))
        return ATTN_ERANGE;
    c->off_pieces = attn__align64(threads_sz);
    c->piece_ml = attn__align64((size_t)p->bq * sizeof(double));
    c->piece_size = c->nsplit > 1 ? attn__align64(acc) + 2 * c->piece_ml : 0;
    size_t pieces = c->piece_size * (size_t)nall; /* small: only when split */
    if (!attn__add_sz(c->off_pieces, pieces, total))
        return ATTN_ERANGE;
    return ATTN_OK;
}

attn_status attn__sdpa_need(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                            const attn_view *v, size_t *bytes) {
    fwd_ctx c = {.p = p, .q = q, .k = k, .v = v};
    int64_t ntasks;
    int nt;
    return fwd_layout(&c, &ntasks, &nt, bytes);
}

/* One task of attn__sdpa_run's loop (attn__parallel_for): task t is (b, h, query block). */
typedef struct fwd_loop {
    const fwd_ctx *c;
    int64_t nqb;
    void *work;
} fwd_loop;

static void fwd_one(void *arg, int64_t t, int tid) {
    const fwd_loop *l = arg;
    const fwd_ctx *c = l->c;
    const attn__sdpa_plan *p = c->p;
    int64_t sp = t % c->nsplit, tb = t / c->nsplit;
    int64_t qb = l->nqb - 1 - tb % l->nqb, bh = tb / l->nqb;
    char *wsp = (char *)l->work + (size_t)tid * c->per_thread;
    int64_t jlo = sp * c->chunk, jhi = jlo + c->chunk;
    fwd_piece piece = {0}, *pc = NULL;
    if (c->nsplit > 1) {
        char *at = (char *)l->work + c->off_pieces + (size_t)t * c->piece_size;
        size_t osz = c->piece_size - 2 * c->piece_ml;
        piece.o = at;
        piece.m = (double *)(at + osz);
        piece.l = (double *)(at + osz + c->piece_ml);
        pc = &piece;
    }
    if (p->dt == ATTN_F32)
        fwd_task_f32(c, bh / p->H, bh % p->H, qb * p->bq, jlo, jhi, pc, wsp);
    else
        fwd_task_f64(c, bh / p->H, bh % p->H, qb * p->bq, jlo, jhi, pc, wsp);
}

/* The merge of a key-split (b, h, query block) (attn__parallel_for over B * H * nqb). */
static void fwd_merge_one(void *arg, int64_t t, int tid) {
    const fwd_loop *l = arg;
    (void)tid;
    if (l->c->p->dt == ATTN_F32)
        fwd_merge_f32(l->c, l->nqb, t, l->work);
    else
        fwd_merge_f64(l->c, l->nqb, t, l->work);
}

static void sdpa_run(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                     const attn_view *v, attn_view *out, attn_view *weights, attn_view *lse,
                     attn__rows_f64 mo, attn__rows_f64 lo, void *work, size_t work_size) {
    fwd_ctx c = {.p = p, .q = q, .k = k, .v = v, .out = out, .weights = weights, .lse = lse,
                 .mo = mo, .lo = lo};
    int64_t ntasks;
    int nt;
    size_t total;
    attn_status st = fwd_layout(&c, &ntasks, &nt, &total);
    ATTN_ASSERT(st == ATTN_OK && total <= work_size && (!weights || !p->tiled));
#ifndef NDEBUG
    attn__spec os[3];
    attn__sdpa_out_specs(p, out, weights, lse, os);
    ATTN_ASSERT(attn__check_views(p->dt, os, 3) == ATTN_OK);
#endif
    (void)st;
    (void)work_size;
    /* nothing to write (Dv == 0, no lse, no weights): no loop over B*H*Tq rows (fuzz_sdpa) */
    bool idle = p->Dv == 0 && !lse && !mo.base && (!weights || p->Tk == 0);
    if (ntasks == 0 || idle)
        return;
    /* tasks (b, h, query block[, key chunk]), the costliest (last, under causal) first */
    fwd_loop loop = {&c, (p->Tq + p->bq - 1) / p->bq, work};
    int one = attn__one_thread_begin(p->threads);
    attn__parallel_for(nt, ntasks, fwd_one, &loop);
    if (c.nsplit > 1) {
        int64_t nb = ntasks / c.nsplit;
        attn__parallel_for(nt < nb ? nt : (int)nb, nb, fwd_merge_one, &loop);
    }
    attn__one_thread_end(one);
}

void attn__sdpa_run(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                    const attn_view *v, attn_view *out, attn_view *weights, attn_view *lse,
                    void *work, size_t work_size) {
    sdpa_run(p, q, k, v, out, weights, lse, (attn__rows_f64){0}, (attn__rows_f64){0}, work,
             work_size);
}

void attn__sdpa_run_ml(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                       const attn_view *v, attn_view *out, attn__rows_f64 m, attn__rows_f64 l,
                       void *work, size_t work_size) {
    sdpa_run(p, q, k, v, out, NULL, NULL, m, l, work, work_size);
}

/* The public door: check -> size -> acquire workspace -> run. */
static attn_status sdpa_check(const attn_view *q, const attn_view *k, const attn_view *v,
                              const attn_sdpa_opts *opts, const attn_view *out,
                              attn__sdpa_plan *p) {
    attn_view *w = opts ? opts->weights : NULL, *lse = opts ? opts->lse : NULL;
    ATTN_TRY(attn__sdpa_plan_init(q, k, v, opts, w != NULL, p));
    attn__spec os[3];
    attn__sdpa_out_specs(p, out, w, lse, os);
    const attn_view *ins[5] = {q, k, v, opts ? opts->keep : NULL, opts ? opts->bias : NULL};
    return attn__check_outputs(p->dt, os, 3, ins, 5);
}

size_t attn_sdpa_workspace_size(const attn_view *q, const attn_view *k, const attn_view *v,
                                const attn_sdpa_opts *opts) {
    attn__sdpa_plan p;
    size_t need;
    if (attn__sdpa_plan_init(q, k, v, opts, opts && opts->weights, &p) != ATTN_OK ||
        attn__sdpa_need(&p, q, k, v, &need) != ATTN_OK)
        return 0;
    return need;
}

attn_status attn_sdpa(const attn_view *q, const attn_view *k, const attn_view *v,
                      const attn_sdpa_opts *opts, attn_view *out, void *work,
                      size_t work_size) {
    attn__sdpa_plan p;
    size_t need;
    ATTN_TRY(sdpa_check(q, k, v, opts, out, &p));
    ATTN_TRY(attn__sdpa_need(&p, q, k, v, &need));
    void *owned = NULL;
    attn_view *w = opts ? opts->weights : NULL, *lse = opts ? opts->lse : NULL;
    const attn_view *all[8] = {
        q, k, v, out, w, lse, opts ? opts->keep : NULL, opts ? opts->bias : NULL};
    ATTN_TRY(attn__work_take(&work, &work_size, need, all, 8, &owned));
    attn__sdpa_run(&p, q, k, v, out, w, lse, work, work_size);
    free(owned);
    return ATTN_OK;
}

/* ---- the trace's scores -------------------------------------------------- */

/* Query rows per chunk of the trace's scores, and the chunk's buffer (rows, Tk). */
static attn_status scores_layout(const attn__sdpa_plan *p, const attn_view *q,
                                 const attn_view *k, int64_t *rows, size_t *buf, size_t *gws) {
    size_t es = attn_dtype_size(p->dt);
    *rows = p->bq < p->Tq ? p->bq : p->Tq;
    *buf = 0;
    *gws = 0;
    if (p->B == 0 || p->H == 0 || p->Tq == 0 || p->Tk == 0)
        return ATTN_OK;
    if (!attn__mul_sz((size_t)*rows, (size_t)p->Tk, buf) || !attn__mul_sz(*buf, es, buf) ||
        *buf > SIZE_MAX / 4)
        return ATTN_ERANGE;
    *buf = attn__align64(*buf);
    attn_view qt = attn__sdpa_rows(q, 0, 0, 0, *rows), kt = attn__sdpa_rows(k, 0, 0, 0, p->Tk);
    *gws = attn__gemm_pack_size(&qt, ATTN_NO_TRANS) + attn__gemm_pack_size(&kt, ATTN_TRANS);
    return ATTN_OK;
}

attn_status attn__sdpa_scores_need(const attn__sdpa_plan *p, const attn_view *q,
                                   const attn_view *k, size_t *bytes) {
    int64_t rows;
    size_t buf, gws;
    ATTN_TRY(scores_layout(p, q, k, &rows, &buf, &gws));
    return attn__add_sz(buf, gws, bytes) ? ATTN_OK : ATTN_ERANGE;
}

void attn__sdpa_scores_run(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                           attn_view *scores, void *work, size_t work_size) {
    int64_t rows;
    size_t buf, gws;
    attn_status st = scores_layout(p, q, k, &rows, &buf, &gws);
    ATTN_ASSERT(st == ATTN_OK && buf + gws <= work_size);
    (void)st;
    (void)work_size;
    if (buf == 0)
        return;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->H; ++h)
            for (int64_t i0 = 0; i0 < p->Tq; i0 += rows) {
                int64_t n = p->Tq - i0 < rows ? p->Tq - i0 : rows;
                attn__sdpa_scores(p, q, k, b, h, i0, n, 0, p->Tk, work, p->Tk,
                                  gws ? (char *)work + buf : NULL, gws);
                attn_view src = attn__sdpa_buf(p->dt, work, n, p->Tk, p->Tk);
                attn_view dst = attn__sdpa_rows(scores, b, h, i0, n);
                attn__view_copy_run(&src, &dst);
            }
}
