/* SPDX-License-Identifier: MIT */
/* attn_sdpa_backward: gradients of attention, probabilities recomputed from the saved lse. */
#include <math.h>
#include <string.h>

#include "attn_config.h"
#include "kernels/sdpa_internal.h"

#if ATTN_HAVE_OPENMP
#include <omp.h>
#endif

enum { WANT_DQ = 1u, WANT_DK = 2u, WANT_DV = 4u };

/* Everything a backward tile reads; per-thread scratch is carved at these offsets. */
typedef struct bwd_ctx {
    const attn__sdpa_plan *p;
    const attn_view       *q, *k, *v, *out, *lse, *dout;
    attn_view             *dq, *dk, *dv;
    unsigned               want; /* which gradients were given */
    size_t off_p, off_ds, off_g, off_gw, off_kap, gws, per_thread;
    attn__rows_f64         kappa; /* given corrections (base NULL: computed per block) */
    attn__rows_f64         sums;  /* attn__sdpa_lse_sums: where the row sums go */
} bwd_ctx;

/* Per-thread cache of the corrections of the last query block seen. */
typedef struct bwd_kap {
    int64_t b, h, i0, valid;
} bwd_kap;

/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/sdpa_backward.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/sdpa_backward.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

static void tile(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t j0, unsigned want,
                 char *wsp) {
    if (c->p->dt == ATTN_F32)
        bwd_tile_f32(c, b, h, i0, j0, want, wsp);
    else
        bwd_tile_f64(c, b, h, i0, j0, want, wsp);
}

/* An optional gradient view: same dtype and shape as its input. */
/* The per-thread scratch, from the plan and q, k, v alone (the query knows no more). */
static attn_status layout(bwd_ctx *c) {
    const attn__sdpa_plan *p = c->p;
    /* P and dP/dS tiles */
    size_t es = attn_dtype_size(p->dt), tilesz;
    if (!attn__mul_sz((size_t)p->bq, (size_t)p->bk, &tilesz) ||
        !attn__mul_sz(tilesz, es, &tilesz) || tilesz > SIZE_MAX / 4)
        return ATTN_ERANGE;
    /*
     * attn_gemm packing for the five products: q, k, v tiles as they are; the
     * layouts of dout, dq, dk, dv are not known to the query, so each is
     * counted as packed (a tile: bounded by bq or bk rows, never by Tk).
     */
    c->gws = 0;
    if (p->B > 0 && p->H > 0 && p->Tq > 0 && p->Tk > 0) {
        attn_view qt = attn__sdpa_rows(c->q, 0, 0, 0, p->bq);
        attn_view kt = attn__sdpa_rows(c->k, 0, 0, 0, p->bk);
        attn_view vt = attn__sdpa_rows(c->v, 0, 0, 0, p->bk);
        size_t qn = attn__gemm_pack_size(&qt, ATTN_NO_TRANS);
        size_t kn = attn__gemm_pack_size(&kt, ATTN_NO_TRANS);
        size_t vn = attn__gemm_pack_size(&vt, ATTN_NO_TRANS);
        size_t bqd = attn__align64((size_t)p->bq * (size_t)p->D * es);
        size_t bkd = attn__align64((size_t)p->bk * (size_t)p->D * es);
        size_t bqv = attn__align64((size_t)p->bq * (size_t)p->Dv * es);
        size_t bkv = attn__align64((size_t)p->bk * (size_t)p->Dv * es);
        size_t g[5] = {qn + kn,    /* S   = q k^T    */
                       bqv + bkv,  /* dV += P^T dO   */
                       bqv + vn,   /* dP  = dO v^T   */
                       qn + bkd,   /* dK += dS^T q   */
                       kn + bqd};  /* dQ += dS k     */
        for (int i = 0; i < 5; ++i)
            c->gws = g[i] > c->gws ? g[i] : c->gws;
    }
    c->off_p = 0;
    c->off_ds = attn__align64(tilesz);
    c->off_g = c->off_ds + attn__align64(tilesz); /* softcap: its derivative per score */
    c->off_gw = c->off_g + (p->softcap > 0 ? attn__align64(tilesz) : 0);
    /* the lse corrections of one query block: a tag, bq doubles, bq flags */
    size_t kap = sizeof(bwd_kap) + (size_t)p->bq * (sizeof(double) + 1);
    if (!attn__add_sz(c->off_gw, attn__align64(c->gws), &c->off_kap) ||
        !attn__add_sz(c->off_kap, attn__align64(kap), &c->per_thread))
        return ATTN_ERANGE;
    return ATTN_OK;
}

attn_status attn__sdpa_backward_check(const attn__sdpa_plan *p, const attn_view *q,
                                      const attn_view *k, const attn_view *v,
                                      const attn_sdpa_opts *opts, const attn_view *out,
                                      const attn_view *lse, const attn_view *dout,
                                      const attn_view *dq, const attn_view *dk,
                                      const attn_view *dv) {
    int64_t os[4] = {p->B, p->H, p->Tq, p->Dv};
    const attn__spec saved[3] = {
        {out, true, 4, {os[0], os[1], os[2], os[3]}},
        {lse, true, 3, {os[0], os[1], os[2]}},
        {dout, true, 4, {os[0], os[1], os[2], os[3]}},
    };
    ATTN_TRY(attn__check_views(p->dt, saved, 3));
    /* the gradients: optional, shaped as q, k, v, and dsinks (H) with sinks */
    const attn_view *dsinks = opts ? opts->dsinks : NULL;
    if (dsinks && !p->has_sinks)
        return ATTN_EINVAL;
    attn__spec grads[4] = {{dq, false, 4, {0}},
                           {dk, false, 4, {0}},
                           {dv, false, 4, {0}},
                           {dsinks, false, 1, {p->H}}};
    const attn_view *like[3] = {q, k, v};
    for (int i = 0; i < 3; ++i)
        for (int d = 0; d < 4; ++d)
            grads[i].shape[d] = like[i]->shape[d];
    const attn_view *ins[10] = {q,
                                k,
                                v,
                                out,
                                lse,
                                dout,
                                opts ? opts->keep : NULL,
                                opts ? opts->bias : NULL,
                                opts ? opts->alibi : NULL,
                                opts ? opts->sinks : NULL};
    return attn__check_outputs(p->dt, grads, 4, ins, 10);
}
/*
 * Who writes what (docs/design.md "sdpa"): dK/dV of a key/value head gather
 * contributions from every query row of its query heads, dQ from every key.
 * - per_head: one task per (b, key/value head) runs all its query heads, query
 *   blocks and key tiles in one pass; it owns its dK/dV and its heads' dQ.
 * - split: pass 1, one task per (b, key/value head, key tile) owning those dK/dV
 *   rows; pass 2, one task per (b, query head, query block) owning its dQ rows.
 *   Two more products per tile pair (S and dP are recomputed), but parallel
 *   when B * Hkv is too small to keep the threads busy.
 * Each gradient element sums its terms in the same order in both plans.
 */
typedef struct bwd_sched {
    bool split;
    int64_t nqb, nkb, ntasks[2];
    int nthreads;
} bwd_sched;

static bwd_sched schedule(const bwd_ctx *c) {
    const attn__sdpa_plan *p = c->p;
    bwd_sched s = {0};
    s.nqb = p->Tq > 0 ? (p->Tq + p->bq - 1) / p->bq : 0;
    s.nkb = p->Tk > 0 ? (p->Tk + p->bk - 1) / p->bk : 0;
    int64_t heads = p->B * p->Hkv, most = p->B * p->H * s.nqb;
    if (heads * s.nkb > most)
        most = heads * s.nkb;
    double flops = 2.5 * attn__sdpa_flops(p);
    int nt = attn__threads(p->threads, most, flops);
    s.split = nt > 1 && !(heads >= nt && (heads % nt == 0 || heads >= 4 * nt));
    if (s.split) {
        s.ntasks[0] = (c->want & (WANT_DK | WANT_DV)) ? heads * s.nkb : 0;
        s.ntasks[1] = (c->want & WANT_DQ) ? p->B * p->H * s.nqb : 0;
    } else {
        s.ntasks[0] = c->want ? heads : 0;
        nt = attn__threads(p->threads, heads, flops);
    }
    s.nthreads = nt;
    return s;
}

static void run_task(const bwd_ctx *c, const bwd_sched *s, int pass, int64_t t, char *wsp) {
    const attn__sdpa_plan *p = c->p;
    if (!s->split) { /* (b, hk): its query heads, query blocks, key tiles */
        int64_t b = t / p->Hkv, hk = t % p->Hkv;
        for (int64_t h = hk * p->group; h < (hk + 1) * p->group; ++h)
            for (int64_t qb = 0; qb < s->nqb; ++qb)
                for (int64_t kb = 0; kb < s->nkb; ++kb)
                    tile(c, b, h, qb * p->bq, kb * p->bk, c->want, wsp);
        return;
    }
    if (pass == 0) { /* (b, hk, key tile): dK, dV */
        int64_t kb = t % s->nkb, bh = t / s->nkb, b = bh / p->Hkv, hk = bh % p->Hkv;
        for (int64_t h = hk * p->group; h < (hk + 1) * p->group; ++h)
            for (int64_t qb = 0; qb < s->nqb; ++qb)
                tile(c, b, h, qb * p->bq, kb * p->bk, c->want & ~WANT_DQ, wsp);
        return;
    }
    int64_t qb = s->nqb - 1 - t % s->nqb, bh = t / s->nqb; /* (b, h, query block): dQ */
    for (int64_t kb = 0; kb < s->nkb; ++kb)
        tile(c, bh / p->H, bh % p->H, qb * p->bq, kb * p->bk, WANT_DQ, wsp);
}

/* Bytes for a schedule with every gradient wanted (what the query reports). */
static attn_status workspace(const bwd_ctx *c, const bwd_sched *s, size_t *total) {
    *total = 0;
    if (s->ntasks[0] + s->ntasks[1] == 0)
        return ATTN_OK;
    return attn__mul_sz(c->per_thread, (size_t)s->nthreads, total) ? ATTN_OK : ATTN_ERANGE;
}

/* The workspace is sized for every gradient, as the public query says. */
attn_status attn__sdpa_backward_need(const attn__sdpa_plan *p, const attn_view *q,
                                     const attn_view *k, const attn_view *v, size_t *bytes) {
    bwd_ctx c = {.p = p, .q = q, .k = k, .v = v, .want = WANT_DQ | WANT_DK | WANT_DV};
    ATTN_TRY(layout(&c));
    bwd_sched s = schedule(&c);
    return workspace(&c, &s, bytes);
}

/* One task of a pass (attn__parallel_for), in the thread's own scratch. */
typedef struct bwd_loop {
    const bwd_ctx   *c;
    const bwd_sched *s;
    int              pass;
    void            *work;
} bwd_loop;

static void bwd_one(void *arg, int64_t t, int tid) {
    const bwd_loop *l = arg;
    char *wsp = (char *)l->work + (size_t)tid * l->c->per_thread;
    ((bwd_kap *)(wsp + l->c->off_kap))->valid = 0; /* the workspace is the caller's */
    run_task(l->c, l->s, l->pass, t, wsp);
}

static void backward_run(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                         const attn_view *v, const attn_view *out, const attn_view *lse,
                         const attn_view *dout, attn_view *dq, attn_view *dk, attn_view *dv,
                         attn__rows_f64 kappa, void *work, size_t work_size) {
    bwd_ctx c = {.p = p, .q = q, .k = k, .v = v, .out = out, .lse = lse, .dout = dout,
                 .dq = dq, .dk = dk, .dv = dv, .kappa = kappa,
                 .want = (dq ? WANT_DQ : 0) | (dk ? WANT_DK : 0) | (dv ? WANT_DV : 0)};
    attn_status st = layout(&c);
    ATTN_ASSERT(st == ATTN_OK &&
                attn__sdpa_backward_check(p, q, k, v, NULL, out, lse, dout, dq, dk, dv) == ATTN_OK);
    (void)st;
    (void)work_size;
    /* no (query, key) pair, or every wanted gradient empty: nothing to add (and no
       loop over up to 2^31 empty (b, head) tasks: fuzz_sdpa_backward's timeout) */
    bool none = p->Tq == 0 || p->Tk == 0 || p->B == 0 || p->H == 0;
    bool dq_empty = !dq || p->D == 0, dk_empty = !dk || p->D == 0, dv_empty = !dv || p->Dv == 0;
    if (none || (dq_empty && dk_empty && dv_empty))
        return;
    bwd_sched s = schedule(&c);
    int one = attn__one_thread_begin(p->threads);
    for (int pass = 0; pass < 2; ++pass) {
        int64_t n = s.ntasks[pass];
        if (n == 0)
            continue;
        int nt = s.nthreads < n ? s.nthreads : (int)n;
        ATTN_ASSERT((size_t)nt * c.per_thread <= work_size);
        bwd_loop loop = {&c, &s, pass, work};
        attn__parallel_for(nt, n, bwd_one, &loop);
    }
    attn__one_thread_end(one);
}

void attn__sdpa_backward_run(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                             const attn_view *v, const attn_view *out, const attn_view *lse,
                             const attn_view *dout, attn_view *dq, attn_view *dk, attn_view *dv,
                             void *work, size_t work_size) {
    backward_run(p, q, k, v, out, lse, dout, dq, dk, dv, (attn__rows_f64){0}, work, work_size);
}

void attn__sdpa_backward_run_kappa(const attn__sdpa_plan *p, const attn_view *q,
                                   const attn_view *k, const attn_view *v, const attn_view *out,
                                   const attn_view *lse, const attn_view *dout, attn_view *dq,
                                   attn_view *dk, attn_view *dv, attn__rows_f64 kappa,
                                   void *work, size_t work_size) {
    backward_run(p, q, k, v, out, lse, dout, dq, dk, dv, kappa, work, work_size);
}

void attn__sdpa_lse_sums(const attn__sdpa_plan *p, const attn_view *q, const attn_view *k,
                         const attn_view *v, const attn_view *lse, attn__rows_f64 sums, void *work,
                         size_t work_size) {
    bwd_ctx c = {.p = p, .q = q, .k = k, .v = v, .lse = lse, .sums = sums};
    attn_status st = layout(&c);
    ATTN_ASSERT(st == ATTN_OK && c.per_thread <= work_size);
    (void)st;
    (void)work_size;
    int64_t nqb = p->Tq > 0 ? (p->Tq + p->bq - 1) / p->bq : 0;
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->H; ++h)
            for (int64_t qb = 0; qb < nqb; ++qb) {
                if (p->dt == ATTN_F32)
                    bwd_sums_task_f32(&c, b, h, qb * p->bq, work);
                else
                    bwd_sums_task_f64(&c, b, h, qb * p->bq, work);
            }
}

/*
 * dsinks[h] += -sum_{b, i} e^{sink_h - lse_bhi} (dout_bhi . out_bhi): the sink takes
 * weight e^{sink - lse} from every row, and d lse / d sink is that weight, so
 * dL/dsink = sum_i sum_j dP_ij dP_ij/dsink = -sum_i P_sink,i delta_i (in double).
 */
static void dsinks_run(const attn__sdpa_plan *p, const attn_view *out, const attn_view *lse,
                       const attn_view *dout, attn_view *dsinks) {
    size_t es = attn_dtype_size(p->dt);
    for (int64_t h = 0; h < p->H; ++h) {
        double sink = attn__sdpa_sink(p, h), acc = 0;
        for (int64_t b = 0; b < p->B; ++b)
            for (int64_t i = 0; i < p->Tq; ++i) {
                double delta = 0, L;
                for (int64_t d = 0; d < p->Dv; ++d) {
                    const void *o = attn__at4(out, b, h, i, d),
                               *g = attn__at4(dout, b, h, i, d);
                    delta += p->dt == ATTN_F32
                                 ? (double)*(const float *)o * (double)*(const float *)g
                                 : *(const double *)o * *(const double *)g;
                }
                const void *l = attn__at3(lse, b, h, i);
                L = p->dt == ATTN_F32 ? (double)*(const float *)l : *(const double *)l;
                acc -= exp(sink - L) * delta;
            }
        char *at = (char *)dsinks->data + h * dsinks->stride[0] * (int64_t)es;
        if (p->dt == ATTN_F32)
            *(float *)at = (float)((double)*(float *)at + acc);
        else
            *(double *)at += acc;
    }
}

size_t attn_sdpa_backward_workspace_size(const attn_view *q, const attn_view *k,
                                         const attn_view *v, const attn_sdpa_opts *opts) {
    attn__sdpa_plan p;
    size_t need;
    attn_sdpa_opts o = opts ? *opts : (attn_sdpa_opts){0};
    o.dsinks = NULL; /* the forward's options refuse dsinks */
    if (attn__sdpa_plan_init(q, k, v, &o, false, &p) != ATTN_OK ||
        attn__sdpa_backward_need(&p, q, k, v, &need) != ATTN_OK)
        return 0;
    return need;
}

attn_status attn_sdpa_backward(const attn_view *q, const attn_view *k, const attn_view *v,
                               const attn_sdpa_opts *opts, const attn_view *out,
                               const attn_view *lse, const attn_view *dout, attn_view *dq,
                               attn_view *dk, attn_view *dv, void *work, size_t work_size) {
    attn__sdpa_plan p;
    size_t need;
    attn_sdpa_opts o = opts ? *opts : (attn_sdpa_opts){0};
    o.dsinks = NULL; /* the forward's options refuse dsinks */
    ATTN_TRY(attn__sdpa_plan_init(q, k, v, &o, false, &p));
    ATTN_TRY(attn__sdpa_backward_check(&p, q, k, v, opts, out, lse, dout, dq, dk, dv));
    ATTN_TRY(attn__sdpa_backward_need(&p, q, k, v, &need));
    void *owned = NULL;
    attn_view *dsinks = opts ? opts->dsinks : NULL;
    const attn_view *all[14] = {q,
                                k,
                                v,
                                out,
                                lse,
                                dout,
                                dq,
                                dk,
                                dv,
                                dsinks,
                                opts ? opts->keep : NULL,
                                opts ? opts->bias : NULL,
                                opts ? opts->alibi : NULL,
                                opts ? opts->sinks : NULL};
    ATTN_TRY(attn__work_take(&work, &work_size, need, all, 14, &owned));
    attn__sdpa_backward_run(&p, q, k, v, out, lse, dout, dq, dk, dv, work, work_size);
    if (dsinks)
        dsinks_run(&p, out, lse, dout, dsinks);
    free(owned);
    return ATTN_OK;
}
