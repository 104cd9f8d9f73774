/* SPDX-License-Identifier: MIT */
/* attn_ring_sdpa: sequence-parallel ring attention over MPI (docs/distributed.md). */
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "attn/ring.h"
#include "ring/ring_internal.h"
#include "kernels/lse_merge.h"    /* the softmax merge, shared with split-KV decode */
#include "kernels/sdpa_internal.h" /* the sdpa plan and runs; ATTN__SDPA_LSE_EMPTY */

/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/ring.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/ring.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

/* Monotonic wall time in seconds (MPI_Wtime is not allowed before MPI_Init). */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Query rows per attn_sdpa call while a transfer is in flight (see attend_block). */
#define RING_SLICE_MIN 128 /* attn_sdpa's query tile: slices stay whole tiles */
#define RING_SLICES    8

/*
 * One attn_sdpa call of the ring on local query rows [r0, r0 + m) (qv) against keys
 * [k0, k0 + nk) of the block in hand (kv, vv): the lse sums, the forward piece merged
 * into the running result, or the backward into the block's gradients gkb, gvb.
 */
static attn_status attend_rows(const ring_ctx *c, char *w, const attn__sdpa_plan *pl,
                               const attn_view *qv, const attn_view *kv, const attn_view *vv,
                               const attn_view *gkb, const attn_view *gvb, int64_t k0,
                               int64_t nk, int64_t r0, int64_t m) {
    int64_t r1 = r0 + m, bht = c->B * c->H * c->T;
    double *run = (double *)(w + c->off[W_X2]), *kap = (double *)(w + c->off[W_KAP]);
    attn__rows_f64 rows_kap = {kap + r0, c->H * c->T, c->T};
    if (c->sums) { /* sum exp(s - lse) over this block's visible keys */
        attn_view fl;
        ATTN_TRY(attn_view_slice(c->io.flse, 2, r0, r1, 1, &fl));
        attn__sdpa_lse_sums(pl, qv, kv, vv, &fl, rows_kap, w + c->off[W_SDPA], c->sdpa_ws);
    } else if (!c->bwd) {
        attn_view ov;
        double *pm = (double *)(w + c->off[W_X1]), *pl_ = pm + bht;
        ATTN_TRY(
            attn_view_init(&ov, c->dt, w + c->off[W_X0], 4, (int64_t[]){c->B, c->H, m, c->Dv}));
        attn__sdpa_run_ml(pl, qv, kv, vv, &ov, (attn__rows_f64){pm, c->H * m, m},
                          (attn__rows_f64){pl_, c->H * m, m}, w + c->off[W_SDPA], c->sdpa_ws);
        if (c->dt == ATTN_F32)
            merge_f32(c->io.out, run, run + bht, ov.data, pm, pl_, r0, m);
        else
            merge_f64(c->io.out, run, run + bht, ov.data, pm, pl_, r0, m);
    } else {
        attn_view fo, fl, dov, dqv, gk, gv;
        ATTN_TRY(attn_view_slice(c->io.fout, 2, r0, r1, 1, &fo));
        ATTN_TRY(attn_view_slice(c->io.flse, 2, r0, r1, 1, &fl));
        ATTN_TRY(attn_view_slice(c->io.dout, 2, r0, r1, 1, &dov));
        if (c->io.dq)
            ATTN_TRY(attn_view_slice(c->io.dq, 2, r0, r1, 1, &dqv));
        ATTN_TRY(attn_view_slice(gkb, 2, k0, k0 + nk, 1, &gk));
        ATTN_TRY(attn_view_slice(gvb, 2, k0, k0 + nk, 1, &gv));
        /* the corrections of rows whose lse is inexact come from every rank's keys */
        attn__sdpa_backward_run_kappa(pl, qv, kv, vv, &fo, &fl, &dov, c->io.dq ? &dqv : NULL,
                                      &gk, &gv, rows_kap, w + c->off[W_SDPA], c->sdpa_ws);
    }
    return ATTN_OK;
}

/* The global position of the first token of chunk ch (segments' numbering). */
static int64_t chunk_start(const ring_ctx *c, const int64_t *gather, int64_t ch) {
    int64_t off = 0, P = c->P;
    for (int64_t x = 0; x < ch; ++x) {
        int64_t owner = c->layout == ATTN_RING_CONTIGUOUS ? x : x < P ? x : 2 * P - 1 - x;
        int64_t len = gather[(size_t)owner * (size_t)(c->B + 1)], a = (len + 1) / 2;
        off += c->layout == ATTN_RING_CONTIGUOUS ? len : x < P ? a : len - a;
    }
    return off;
}

/*
 * attend_block with a window, softcap or ALiBi: every (query chunk, key chunk)
 * pair on its own, at global positions: a query chunk starting at global qg
 * and a key chunk at kg make attn_sdpa's aligned position of local query x
 * qg - kg + x against local key y (its causal shift), so causal, window and
 * ALiBi see global positions. Key chunks wholly in the future of (causal) or
 * outside the windows of the chunk's queries are skipped.
 */
static attn_status attend_block_var(const ring_ctx *c, char *w, int src, void *buf, void *gbuf,
                                    MPI_Request *req, bool *computed) {
    const attn_ring_opts *o = c->o;
    const int64_t *gather = (const int64_t *)(w + c->off[W_GATHER]);
    const int64_t *g = gather + (size_t)src * (size_t)(c->B + 1);
    int64_t Tsrc = g[0], *klen = (int64_t *)(w + c->off[W_KLEN]);
    seg qs[2], ks[2];
    int nqs = segments(c, c->rank, c->T, qs), nks = segments(c, src, Tsrc, ks);
    attn_view kb, vb, gkb, gvb;
    block_views(c, buf, Tsrc, &kb, &vb);
    if (c->bwd)
        block_views(c, gbuf, Tsrc, &gkb, &gvb);
    *computed = false;
    for (int a = 0; a < nqs; ++a)
        for (int j = 0; j < nks; ++j) {
            int64_t q0 = qs[a].lo, nq = qs[a].n, k0 = ks[j].lo, nk = ks[j].n;
            if (nq == 0 || nk == 0)
                continue;
            int64_t qg = chunk_start(c, gather, qs[a].chunk);
            int64_t kg = chunk_start(c, gather, ks[j].chunk);
            if (c->causal && kg > qg + nq - 1)
                continue; /* the key chunk lies in these queries' future */
            if (o->window &&
                (qg - (kg + nk - 1) > o->window_left || kg - (qg + nq - 1) > o->window_right))
                continue; /* outside every query's window */
            int64_t rows = nq;
            if (req) { /* about RING_SLICES slices of whole query tiles */
                rows = (nq + RING_SLICES - 1) / RING_SLICES;
                rows = (rows + RING_SLICE_MIN - 1) / RING_SLICE_MIN * RING_SLICE_MIN;
            }
            for (int64_t i0 = 0; i0 < nq; i0 += rows) {
                int64_t m = nq - i0 < rows ? nq - i0 : rows, r0 = q0 + i0;
                attn_view qv, kv, vv;
                for (int64_t b = 0; b < c->B; ++b) { /* the block's valid keys in this chunk */
                    int64_t n = g[1 + b] - k0;
                    klen[b] = n < 0 ? 0 : n > nk ? nk : n;
                }
                ATTN_TRY(attn_view_slice(&c->q, 2, r0, r0 + m, 1, &qv));
                ATTN_TRY(attn_view_slice(&kb, 2, k0, k0 + nk, 1, &kv));
                ATTN_TRY(attn_view_slice(&vb, 2, k0, k0 + nk, 1, &vv));
                attn_sdpa_opts so = {
                    .scale = c->scale,
                    .kv_len = klen,
                    .causal = c->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
                    .threads = o->threads,
                    .window = o->window,
                    .window_left = o->window_left,
                    .window_right = o->window_right,
                    .softcap = o->softcap,
                    .alibi = o->alibi}; /* sinks: once, at the end of the forward */
                attn__sdpa_plan pl;
                ATTN_TRY(attn__sdpa_plan_init(&qv, &kv, &vv, &so, false, &pl));
                pl.causal_shift = qg + i0 - kg; /* global positions */
                ATTN_TRY(attend_rows(c, w, &pl, &qv, &kv, &vv, &gkb, &gvb, k0, nk, r0, m));
                *computed = true;
                int done;
                if (req && MPI_Testall(4, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
                    return ATTN_EMPI;
            }
        }
    return ATTN_OK;
}

/*
 * Attend the local queries to the K/V block in hand (packed at buf, from rank
 * src). Non-causal: all queries against all keys. Causal: per query chunk,
 * the visible keys are a prefix of the block (chunks are in global order):
 * earlier chunks fully, its own chunk with the diagonal, which is attn_sdpa's
 * BOTTOM_RIGHT rule on that prefix (key j visible iff j <= i + (nk - nq),
 * nk - nq the start of the diagonal chunk).
 * Forward: attn_sdpa with lse, merged into out. Backward: attn_sdpa_backward
 * with the forward's global out and lse, which makes each block's P the
 * global probabilities: dq accumulates in place, the block's dK/dV into the
 * packed gradient block gbuf.
 *
 * While a transfer is in flight (req != NULL) the queries go in about
 * RING_SLICES slices with MPI_Testall between them: without an asynchronous
 * progress thread an MPI moves a large (rendezvous) message only inside MPI
 * calls, so this is what lets the exchange proceed during the computation.
 * A diagonal slice of rows [a, a + m) of an nq-row chunk sees the prefix of
 * nk - (nq - a - m) keys, again BOTTOM_RIGHT.
 * Returns the first attn_sdpa failure, or ATTN_EMPI; *computed: any call ran.
 */
static attn_status attend_block(const ring_ctx *c, char *w, int src, void *buf, void *gbuf,
                                MPI_Request *req, bool *computed) {
    const int64_t *g =
        (const int64_t *)(w + c->off[W_GATHER]) + (size_t)src * (size_t)(c->B + 1);
    int64_t Tsrc = g[0], *klen = (int64_t *)(w + c->off[W_KLEN]);
    seg qs[2], ks[2];
    int nqs = c->causal ? segments(c, c->rank, c->T, qs) : 1;
    int nks = segments(c, src, Tsrc, ks);
    if (!c->causal)
        qs[0] = (seg){0, c->T, 0};
    attn_view kb, vb, gkb, gvb;
    block_views(c, buf, Tsrc, &kb, &vb);
    if (c->bwd)
        block_views(c, gbuf, Tsrc, &gkb, &gvb);
    *computed = false;
    for (int a = 0; a < nqs; ++a) {
        int64_t nk = c->causal ? 0 : Tsrc;
        bool diag = false;
        for (int j = 0; c->causal && j < nks && ks[j].chunk <= qs[a].chunk; ++j) {
            nk = ks[j].lo + ks[j].n;
            diag = ks[j].chunk == qs[a].chunk;
        }
        int64_t q0 = qs[a].lo, nq = qs[a].n;
        if (nq == 0 || nk == 0)
            continue; /* no query, or the whole block lies in these queries' future */
        int64_t rows = nq;
        if (req) { /* about RING_SLICES slices of whole query tiles */
            rows = (nq + RING_SLICES - 1) / RING_SLICES;
            rows = (rows + RING_SLICE_MIN - 1) / RING_SLICE_MIN * RING_SLICE_MIN;
        }
        for (int64_t i0 = 0; i0 < nq; i0 += rows) {
            int64_t m = nq - i0 < rows ? nq - i0 : rows, nkm = diag ? nk - (nq - i0 - m) : nk;
            int64_t r0 = q0 + i0, r1 = r0 + m;
            attn_view qv, kv, vv;
            for (int64_t b = 0; b < c->B; ++b)
                klen[b] = g[1 + b] < nkm ? g[1 + b] : nkm;
            ATTN_TRY(attn_view_slice(&c->q, 2, r0, r1, 1, &qv));
            ATTN_TRY(attn_view_slice(&kb, 2, 0, nkm, 1, &kv));
            ATTN_TRY(attn_view_slice(&vb, 2, 0, nkm, 1, &vv));
            attn_sdpa_opts so = {.scale = c->scale,
                                 .kv_len = klen,
                                 .causal = diag ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
                                 .threads = c->o->threads};
            /* the arguments were validated by attn__ring_setup(): one plan, then the trusted run */
            attn__sdpa_plan pl;
            ATTN_TRY(attn__sdpa_plan_init(&qv, &kv, &vv, &so, false, &pl));
            ATTN_TRY(attend_rows(c, w, &pl, &qv, &kv, &vv, &gkb, &gvb, 0, nkm, r0, m));
            *computed = true;
            int done;
            if (req && MPI_Testall(4, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
                return ATTN_EMPI;
        }
    }
    return ATTN_OK;
}

/* Give up on posted requests after a failure: cancel and complete them. */
static void drop_requests(MPI_Request *req, int n) {
    for (int i = 0; i < n; ++i)
        if (req[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&req[i]);
            MPI_Wait(&req[i], MPI_STATUS_IGNORE);
        }
}

enum { TAG_KV = 0, TAG_GRAD = 1 };

/*
 * The ring: at step s this rank holds the K/V block of rank src = (r - s) mod
 * P. It posts the receive of the next block from r - 1 and the send of the
 * one in hand to r + 1, attends to the block in hand meanwhile, then waits
 * (the wait is the communication computation did not hide).
 * Backward: each block's dK/dV accumulator travels one step behind its K/V.
 * At step s >= 1 the accumulator of block src arrives from r - 1 (into g[acc])
 * while this rank computes block src's gradients into scratch, then adds
 * them; the accumulator completed at step s - 1 leaves for r + 1. At step P
 * the last sends reach the owners (r + 1 owns the block r held at step P-1),
 * so each rank ends with the full gradients of its own block in g[acc].
 * A local compute failure keeps the blocks moving (the others wait for
 * them); an MPI failure stops. Returns the status and, for the backward, the
 * buffer index of this rank's own gradients.
 */
static attn_status ring_loop(const ring_ctx *c, char *w, attn_ring_stats *st, int *own) {
    int r = c->rank, P = c->P, prev = (r + P - 1) % P, next = (r + 1) % P, cur = 0, acc = 0;
    MPI_Datatype mdt = c->dt == ATTN_F32 ? MPI_FLOAT : MPI_DOUBLE;
    const int64_t *g = (const int64_t *)(w + c->off[W_GATHER]);
    char *kvb[2] = {w + c->off[W_KV0], w + c->off[W_KV1]};
    char *gb[2] = {w + c->off[W_X0], w + c->off[W_X1]}, *gloc = w + c->off[W_X2];
    attn_status s = ATTN_OK;
    int last = c->bwd && P > 1 ? P : P - 1;
    for (int step = 0; step <= last; ++step) {
        int src = (r - step + P) % P, from = (r - step - 1 + 2 * P) % P;
        int64_t n_src = 0, n_from = 0, n_done = 0; /* elements of blocks src, from, src + 1:
                                                       checked <= INT_MAX by layout_work */
        block_elems(c, g[(size_t)src * (size_t)(c->B + 1)], &n_src);
        block_elems(c, g[(size_t)from * (size_t)(c->B + 1)], &n_from);
        block_elems(c, g[(size_t)((src + 1) % P) * (size_t)(c->B + 1)], &n_done);
        MPI_Request req[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                              MPI_REQUEST_NULL};
        bool ok = true, xfer = false;
        if (step + 1 < P) {
            ok = MPI_Irecv(kvb[1 - cur], (int)n_from, mdt, prev, TAG_KV, c->comm, &req[0]) ==
                     MPI_SUCCESS &&
                 MPI_Isend(kvb[cur], (int)n_src, mdt, next, TAG_KV, c->comm, &req[1]) ==
                     MPI_SUCCESS;
            st->bytes_sent += n_src * (int64_t)c->es;
            xfer = true;
        }
        if (ok && c->bwd && step > 0) {
            ok = MPI_Irecv(gb[acc], (int)n_src, mdt, prev, TAG_GRAD, c->comm, &req[2]) ==
                     MPI_SUCCESS &&
                 MPI_Isend(gb[1 - acc], (int)n_done, mdt, next, TAG_GRAD, c->comm, &req[3]) ==
                     MPI_SUCCESS;
            st->bytes_sent += n_done * (int64_t)c->es;
            xfer = true;
        }
        if (!ok) {
            drop_requests(req, 4);
            return ATTN_EMPI;
        }
        bool computed = false;
        char *gdst = step == 0 ? gb[acc] : gloc; /* backward: block src's gradients */
        if (step < P) {
            if (c->bwd)
                memset(gdst, 0, (size_t)n_src * c->es);
            double tc = now();
            if (s == ATTN_OK)
                s = (c->variant ? attend_block_var : attend_block)(
                    c, w, src, kvb[cur], gdst, xfer ? req : NULL, &computed);
            st->compute_seconds += now() - tc;
            if (s == ATTN_EMPI) {
                drop_requests(req, 4);
                return s;
            }
            st->blocks_computed += computed;
            st->blocks_skipped += !computed;
        }
        double t0 = MPI_Wtime();
        int rc = MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
        st->wait_seconds += MPI_Wtime() - t0;
        if (rc != MPI_SUCCESS)
            return ATTN_EMPI;
        if (c->bwd && step > 0 && step < P && computed) { /* accumulator += this rank's part */
            attn_view ak, av, lk, lv;
            int64_t Tsrc = g[(size_t)src * (size_t)(c->B + 1)];
            block_views(c, gb[acc], Tsrc, &ak, &av);
            block_views(c, gloc, Tsrc, &lk, &lv);
            attn__add_run(&ak, &lk, &ak);
            attn__add_run(&av, &lv, &av);
        }
        if (c->bwd && step < P)
            acc = 1 - acc;
        cur = 1 - cur;
    }
    *own = P > 1 ? acc : 1 - acc;
    return s;
}

/* The forward and the backward: agree, exchange the block lengths, run the ring, finish. */
static attn_status ring_call(MPI_Comm comm, bool bwd, const attn_view *q, const attn_view *k,
                             const attn_view *v, const attn_ring_opts *opts, const ring_io *io,
                             void *work, size_t work_size) {
    double t_start = now();
    ring_ctx c;
    void *owned = NULL;
    ATTN_TRY(attn__ring_setup(comm, bwd, q, k, v, opts, io, &work, work_size, &owned, &c));
    char *w = work;
    /* every rank's block length and key lengths: [T_r, kv_len_r[0..B)] per rank */
    int64_t *mine = (int64_t *)(w + c.off[W_GATHER]) + (size_t)c.rank * (size_t)(c.B + 1);
    mine[0] = c.T;
    for (int64_t b = 0; b < c.B; ++b)
        mine[1 + b] = c.o->kv_len ? c.o->kv_len[b] : c.T;
    attn_status s = ATTN_OK;
    if (MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, w + c.off[W_GATHER], (int)(c.B + 1),
                      MPI_INT64_T, c.comm) != MPI_SUCCESS)
        s = ATTN_EMPI;
    s = agree(c.comm, s);
    attn_ring_stats st = {0};
    int own = 0;
    double *run = (double *)(w + c.off[W_X2]);
    if (s == ATTN_OK) {
        attn_view kb, vb;
        block_views(&c, w + c.off[W_KV0], c.T, &kb, &vb);
        attn__view_copy_run(k, &kb); /* shapes checked, the buffer is ours */
        attn__view_copy_run(v, &vb);
        int64_t bht = c.B * c.H * c.T;
        if (!bwd) { /* running result: out = 0, (m, l) = (-inf, 0) until a block contributes */
            for (int64_t i = 0; i < bht; ++i)
                run[i] = -INFINITY, run[bht + i] = 0;
            if (c.dt == ATTN_F32)
                zero_out_f32(io->out);
            else
                zero_out_f64(io->out);
        } else { /* kappa: 0 (no correction) unless a row's lse is inexact somewhere */
            double *kap = (double *)(w + c.off[W_KAP]);
            int any = 0, all = 0;
            for (int64_t i = 0; i < bht; ++i)
                kap[i] = 0;
            for (int64_t b = 0; b < c.B && !any; ++b)
                for (int64_t h = 0; h < c.H && !any; ++h)
                    for (int64_t i = 0; i < c.T && !any; ++i) {
                        const char *at = (const char *)io->flse->data +
                                         (b * io->flse->stride[0] + h * io->flse->stride[1] +
                                          i * io->flse->stride[2]) * (int64_t)c.es;
                        double L = c.dt == ATTN_F32 ? *(const float *)at : *(const double *)at;
                        any = attn__sdpa_lse_inexact(c.dt, L);
                    }
            if (MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, c.comm) != MPI_SUCCESS)
                s = ATTN_EMPI;
            if (s == ATTN_OK && all) { /* one more ring: the rows' sums over every block */
                c.sums = true, c.bwd = false;
                s = ring_loop(&c, w, &st, &own);
                c.sums = false, c.bwd = true;
                s = agree(c.comm, s);
                for (int64_t b = 0; c.o->sinks && b < c.B; ++b) /* the sink's share */
                    for (int64_t h = 0; h < c.H; ++h)
                        for (int64_t i = 0; i < c.T; ++i) {
                            double L = (double)(c.dt == ATTN_F32 ? *row_f32(io->flse, b, h, i)
                                                                 : *row_f64(io->flse, b, h, i));
                            if (attn__sdpa_lse_inexact(c.dt, L))
                                kap[(b * c.H + h) * c.T + i] +=
                                    c.dt == ATTN_F32
                                        ? sink_share_f32(c.o->sinks, io->flse, b, h, i)
                                        : sink_share_f64(c.o->sinks, io->flse, b, h, i);
                        }
                for (int64_t i = 0; i < bht; ++i)
                    kap[i] = kap[i] > 0 || kap[i] != kap[i] ? log(kap[i]) : 0;
                attn_view kb2, vb2; /* the ring left another rank's block in hand */
                block_views(&c, w + c.off[W_KV0], c.T, &kb2, &vb2);
                attn__view_copy_run(k, &kb2);
                attn__view_copy_run(v, &vb2);
            }
        }
        if (s == ATTN_OK)
            s = ring_loop(&c, w, &st, &own);
        s = agree(c.comm, s);
    }
    if (s == ATTN_OK && !bwd && c.o->sinks) { /* the sinks join each row's sum once */
        if (c.dt == ATTN_F32)
            sink_rows_f32(io->out, run, run + c.B * c.H * c.T, c.o->sinks);
        else
            sink_rows_f64(io->out, run, run + c.B * c.H * c.T, c.o->sinks);
    }
    if (s == ATTN_OK && bwd && c.o->dsinks) { /* every rank's rows: one sum */
        double *part = (double *)(w + c.off[W_KLEN]) + c.B;
        if (c.dt == ATTN_F32)
            dsinks_part_f32(c.o->sinks, io->flse, io->fout, io->dout, part);
        else
            dsinks_part_f64(c.o->sinks, io->flse, io->fout, io->dout, part);
        if (MPI_Allreduce(MPI_IN_PLACE, part, (int)c.H, MPI_DOUBLE, MPI_SUM, c.comm) !=
            MPI_SUCCESS)
            s = ATTN_EMPI;
        s = agree(c.comm, s);
        for (int64_t h = 0; s == ATTN_OK && h < c.H; ++h) {
            void *e = attn__elem(c.o->dsinks, &h);
            if (c.dt == ATTN_F32)
                *(float *)e = (float)((double)*(float *)e + part[h]);
            else
                *(double *)e += part[h];
        }
    }
    if (s == ATTN_OK && !bwd && io->lse) {
        if (c.dt == ATTN_F32)
            store_lse_f32(io->lse, run, run + c.B * c.H * c.T);
        else
            store_lse_f64(io->lse, run, run + c.B * c.H * c.T);
    }
    if (s == ATTN_OK && bwd) { /* dk += the gradients of this rank's block, dv too */
        attn_view gk, gv;
        block_views(&c, w + c.off[own ? W_X1 : W_X0], c.T, &gk, &gv);
        if (io->dk)
            attn__add_run(io->dk, &gk, io->dk);
        if (io->dv)
            attn__add_run(io->dv, &gv, io->dv);
    }
    MPI_Comm_free(&c.comm);
    free(owned);
    if (s == ATTN_OK && c.o->stats) {
        st.seconds = now() - t_start;
        *c.o->stats = st;
    }
    return s;
}

attn_status attn_ring_sdpa(MPI_Comm comm, const attn_view *q_local, const attn_view *k_local,
                           const attn_view *v_local, const attn_ring_opts *opts,
                           attn_view *out_local, void *work, size_t work_size) {
    ring_io io = {.out = out_local, .lse = opts ? opts->lse : NULL};
    return ring_call(comm, false, q_local, k_local, v_local, opts, &io, work, work_size);
}

attn_status attn_ring_sdpa_backward(MPI_Comm comm, const attn_view *q_local,
                                    const attn_view *k_local, const attn_view *v_local,
                                    const attn_ring_opts *opts, const attn_view *out_local,
                                    const attn_view *lse_local, const attn_view *dout_local,
                                    attn_view *dq_local, attn_view *dk_local,
                                    attn_view *dv_local, void *work, size_t work_size) {
    ring_io io = {.fout = out_local,
                  .flse = lse_local,
                  .dout = dout_local,
                  .dq = dq_local,
                  .dk = dk_local,
                  .dv = dv_local};
    return ring_call(comm, true, q_local, k_local, v_local, opts, &io, work, work_size);
}
