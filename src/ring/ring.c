/* SPDX-License-Identifier: MIT */
/* attn_ring_sdpa: sequence-parallel ring attention over MPI (docs/distributed.md). */
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "attn/ring.h"
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

/* Fields every rank must agree on (checked by one MPI_Allreduce). */
enum { F_DTYPE, F_B, F_H, F_HKV, F_D, F_DV, F_CAUSAL, F_LAYOUT, F_SCALE, NF };

/* The views of a call beyond q, k, v (NULL: absent). */
typedef struct ring_io {
    attn_view *out, *lse;                /* forward: outputs */
    const attn_view *fout, *flse, *dout; /* backward: the forward's out and lse, and dout */
    attn_view *dq, *dk, *dv;             /* backward: gradients, accumulated */
} ring_io;

/* Workspace blocks, in order. X0..X2 are the forward's piece out, piece lse and running
   lse (double), or the backward's two travelling gradient accumulators and this step's
   gradients (each one packed dK/dV block). */
enum { W_GATHER, W_KV0, W_KV1, W_X0, W_X1, W_X2, W_KLEN, W_KAP, W_SDPA, W_COUNT };

/* Validated arguments of one call and the carving of its workspace. */
typedef struct ring_ctx {
    MPI_Comm comm; /* our duplicate of the caller's communicator */
    int rank, P;
    bool bwd; /* attn_ring_sdpa_backward */
    attn_dtype dt;
    size_t es;
    int64_t B, H, Hkv, D, Dv, T, Tmax; /* T: this rank's block; Tmax: the longest */
    int64_t f[NF];
    double scale;
    bool causal;
    attn_ring_layout layout;
    const attn_ring_opts *o;
    attn_view q, k, v;
    ring_io io;
    size_t off[W_COUNT]; /* byte offsets into the workspace */
    bool sums;           /* backward's first ring: the lse corrections' row sums only */
    size_t sdpa_ws, total;
} ring_ctx;

/* A contiguous chunk of a rank's block: local rows [lo, lo + n), global chunk index. */
typedef struct seg {
    int64_t lo, n, chunk;
} seg;

/* The chunks of a block of T tokens held by rank r, in local order (global order too). */
static int segments(const ring_ctx *c, int r, int64_t T, seg s[2]) {
    if (c->layout == ATTN_RING_CONTIGUOUS) {
        s[0] = (seg){0, T, r};
        return 1;
    }
    int64_t a = (T + 1) / 2;
    s[0] = (seg){0, a, r};
    s[1] = (seg){a, T - a, 2 * (int64_t)c->P - 1 - r};
    return 2;
}

/* Elements of one travelling K/V block of T tokens: k (B, Hkv, T, D) then v (B, Hkv, T, Dv). */
static bool block_elems(const ring_ctx *c, int64_t T, int64_t *n) {
    int64_t bh, dd;
    return attn__mul_i64(c->B, c->Hkv, &bh) && attn__add_i64(c->D, c->Dv, &dd) &&
           attn__mul_i64(bh, T, n) && attn__mul_i64(*n, dd, n);
}

/* The k and v views of a packed block of T tokens at buf (B, Hkv, T, D | Dv). */
static void block_views(const ring_ctx *c, void *buf, int64_t T, attn_view *k, attn_view *v) {
    int64_t D = c->D, Dv = c->Dv;
    *k = (attn_view){.data = buf,
                     .dtype = c->dt,
                     .ndim = 4,
                     .shape = {c->B, c->Hkv, T, D},
                     .stride = {c->Hkv * T * D, T * D, D, 1}};
    *v = (attn_view){.data = (char *)buf + (size_t)(c->B * c->Hkv * T * D) * c->es,
                     .dtype = c->dt,
                     .ndim = 4,
                     .shape = {c->B, c->Hkv, T, Dv},
                     .stride = {c->Hkv * T * Dv, T * Dv, Dv, 1}};
}

/* Same sufficient test as the library's outputs use: sorted by |stride|, each axis steps
   past the span of the inner ones (src/core/view.c); attn_mpi sees only attn's public API. */
static bool self_overlaps(const attn_view *v) {
    if (attn_view_numel(v) <= 1)
        return false;
    int64_t ext[ATTN_MAX_DIMS], str[ATTN_MAX_DIMS], span = 0;
    int n = 0;
    for (int d = 0; d < v->ndim; ++d)
        if (v->shape[d] != 1) {
            ext[n] = v->shape[d];
            str[n++] = v->stride[d] < 0 ? -v->stride[d] : v->stride[d];
        }
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && str[j] < str[j - 1]; --j) {
            int64_t t = str[j];
            str[j] = str[j - 1];
            str[j - 1] = t;
            t = ext[j];
            ext[j] = ext[j - 1];
            ext[j - 1] = t;
        }
    for (int i = 0; i < n; ++i) {
        if (str[i] <= span)
            return true;
        span += str[i] * (ext[i] - 1);
    }
    return false;
}

static attn_status check_float(const attn_view *v, int ndim) {
    if (!v)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(v));
    if (v->ndim != ndim)
        return ATTN_ESHAPE;
    return v->dtype == ATTN_F32 || v->dtype == ATTN_F64 ? ATTN_OK : ATTN_EDTYPE;
}

/* An input view of the call: present, valid, c's dtype, the given shape. */
static attn_status check_input(const ring_ctx *c, const attn_view *v, int nd,
                               const int64_t *shape) {
    ATTN_TRY(check_float(v, nd));
    if (v->dtype != c->dt)
        return ATTN_EDTYPE;
    for (int d = 0; d < nd; ++d)
        if (v->shape[d] != shape[d])
            return ATTN_ESHAPE;
    return ATTN_OK;
}

/* Optional outputs (NULL entries skipped): as inputs, plus no self-overlap, no overlap with
   the inputs ins[] or with each other. */
static attn_status check_outputs(const ring_ctx *c, attn_view *const *outs, const int *nd,
                                 const int64_t (*shapes)[4], int nout,
                                 const attn_view *const *ins, int nin) {
    for (int o = 0; o < nout; ++o) {
        if (!outs[o])
            continue;
        ATTN_TRY(check_input(c, outs[o], nd[o], shapes[o]));
        if (self_overlaps(outs[o]))
            return ATTN_ESTRIDE;
        for (int i = 0; i < nin; ++i)
            if (ins[i] && attn_view_overlaps(outs[o], ins[i]))
                return ATTN_EALIAS;
        for (int o2 = 0; o2 < o; ++o2)
            if (outs[o2] && attn_view_overlaps(outs[o], outs[o2]))
                return ATTN_EALIAS;
    }
    return ATTN_OK;
}

/* Everything this rank can check without talking to the others; io NULL: a workspace query. */
static attn_status check_local(const attn_view *q, const attn_view *k, const attn_view *v,
                               const attn_ring_opts *o, const ring_io *io, ring_ctx *c) {
    ATTN_TRY(check_float(q, 4));
    ATTN_TRY(check_float(k, 4));
    ATTN_TRY(check_float(v, 4));
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return ATTN_EDTYPE;
    c->dt = q->dtype;
    c->es = attn_dtype_size(c->dt);
    c->B = q->shape[0];
    c->H = q->shape[1];
    c->T = q->shape[2];
    c->D = q->shape[3];
    c->Hkv = k->shape[1];
    c->Dv = v->shape[3];
    if (k->shape[0] != c->B || k->shape[2] != c->T || k->shape[3] != c->D ||
        v->shape[0] != c->B || v->shape[1] != c->Hkv || v->shape[2] != c->T)
        return ATTN_ESHAPE;
    if (c->Hkv == 0 ? c->H != 0 : c->H % c->Hkv != 0)
        return ATTN_ESHAPE;
    if ((unsigned)o->causal > ATTN_CAUSAL_BOTTOM_RIGHT ||
        (unsigned)o->layout > ATTN_RING_ZIGZAG || o->threads < 0 || !isfinite(o->scale))
        return ATTN_EINVAL;
    if (c->D > INT_MAX || c->Dv > INT_MAX)
        return ATTN_ERANGE;
    if (o->kv_len)
        for (int64_t b = 0; b < c->B; ++b)
            if (o->kv_len[b] < 0 || o->kv_len[b] > c->T)
                return ATTN_EINVAL;
    c->causal = o->causal != ATTN_CAUSAL_NONE;
    c->layout = o->layout;
    c->scale = o->scale != 0.0 ? o->scale : c->D > 0 ? 1.0 / sqrt((double)c->D) : 1.0;
    const int64_t os[4] = {c->B, c->H, c->T, c->Dv};
    if (io && !c->bwd) { /* forward: out (required) and lse */
        if (!io->out)
            return ATTN_EINVAL;
        attn_view *outs[2] = {io->out, io->lse};
        const attn_view *ins[3] = {q, k, v};
        ATTN_TRY(check_outputs(
            c, outs, (int[]){4, 3},
            (const int64_t[][4]){{os[0], os[1], os[2], os[3]}, {os[0], os[1], os[2], 0}}, 2,
            ins, 3));
    } else if (io) { /* backward: out, lse, dout (required), dq, dk, dv */
        if (!io->fout || !io->flse || !io->dout)
            return ATTN_EINVAL;
        ATTN_TRY(check_input(c, io->fout, 4, os));
        ATTN_TRY(check_input(c, io->flse, 3, os));
        ATTN_TRY(check_input(c, io->dout, 4, os));
        attn_view *outs[3] = {io->dq, io->dk, io->dv};
        const attn_view *ins[6] = {q, k, v, io->fout, io->flse, io->dout};
        ATTN_TRY(check_outputs(
            c, outs, (int[]){4, 4, 4},
            (const int64_t[][4]){{q->shape[0], q->shape[1], q->shape[2], q->shape[3]},
                                 {k->shape[0], k->shape[1], k->shape[2], k->shape[3]},
                                 {v->shape[0], v->shape[1], v->shape[2], v->shape[3]}},
            3, ins, 6));
    }
    int64_t f[NF] = {c->dt, c->B, c->H, c->Hkv, c->D, c->Dv, c->causal, c->layout, 0};
    memcpy(&f[F_SCALE], &c->scale, sizeof(double));
    memcpy(c->f, f, sizeof f);
    c->q = *q;
    c->k = *k;
    c->v = *v;
    if (io)
        c->io = *io;
    return ATTN_OK;
}

/* Carve the workspace for T_max (known on every rank after the agreement). */
static attn_status layout_work(ring_ctx *c) {
    int64_t kvn, bht, bhtd;
    if (!block_elems(c, c->Tmax, &kvn) || kvn > INT_MAX) /* one MPI message per step */
        return ATTN_ERANGE;
    if (!attn__mul_i64(c->B, c->H, &bht) || !attn__mul_i64(bht, c->T, &bht) ||
        !attn__mul_i64(bht, c->Dv, &bhtd))
        return ATTN_ERANGE;
    /* attn_sdpa's (or its backward's) workspace for the largest call: all local queries
       against T_max keys */
    attn_view kb, vb;
    block_views(c, (void *)(uintptr_t)64, c->Tmax, &kb, &vb); /* only strides matter */
    c->sdpa_ws = 0;
    for (int causal = 0; causal < 2; ++causal) {
        attn_sdpa_opts so = {.scale = c->scale,
                             .threads = c->o->threads,
                             .causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE};
        attn__sdpa_plan pl;
        size_t ws;
        ATTN_TRY(attn__sdpa_plan_init(&c->q, &kb, &vb, &so, false, &pl));
        ATTN_TRY(c->bwd ? attn__sdpa_backward_need(&pl, &c->q, &kb, &vb, &ws)
                        : attn__sdpa_need(&pl, &c->q, &kb, &vb, &ws));
        c->sdpa_ws = ws > c->sdpa_ws ? ws : c->sdpa_ws;
    }
    /* forward: piece out, piece (m, l) and running (m, l) in double, so that the merge
       is exact at any logit magnitude; backward: the lse corrections (kappa) per row */
    size_t n[W_COUNT] = {(size_t)c->P * (size_t)(c->B + 1),
                         (size_t)kvn,
                         (size_t)kvn,
                         c->bwd ? (size_t)kvn : (size_t)bhtd,
                         c->bwd ? (size_t)kvn : 2 * (size_t)bht,
                         c->bwd ? (size_t)kvn : 2 * (size_t)bht,
                         (size_t)c->B,
                         c->bwd ? (size_t)bht : 0,
                         c->sdpa_ws};
    size_t es[W_COUNT] = {8, c->es, c->es, c->es, c->bwd ? c->es : 8, c->bwd ? c->es : 8, 8, 8, 1};
    size_t at = 0, bytes;
    for (int i = 0; i < W_COUNT; ++i) {
        c->off[i] = at;
        if (!attn__mul_sz(n[i], es[i], &bytes) || bytes > SIZE_MAX / 2 ||
            !attn__add_sz(at, attn__align64(bytes), &at))
            return ATTN_ERANGE;
    }
    c->total = at;
    return ATTN_OK;
}

/* True when the caller's workspace [work, work + n) overlaps any argument of the call. */
static bool work_overlaps(const void *work, size_t n, const attn_view *q, const attn_view *k,
                          const attn_view *v, const ring_io *io) {
    const attn_view *all[12] = {q, k, v};
    int m = 3;
    if (io) {
        const attn_view *x[9] = {io->out, io->lse, io->fout, io->flse, io->dout,
                                 io->dq,  io->dk,  io->dv,   NULL};
        for (int i = 0; i < 8; ++i)
            all[m++] = x[i];
    }
    uintptr_t wl = (uintptr_t)work, wh = wl + n;
    for (int i = 0; i < m; ++i) {
        if (!all[i])
            continue;
        const void *lo, *hi;
        attn_view_span(all[i], &lo, &hi);
        if (lo != hi && n > 0 && (uintptr_t)lo < wh && wl < (uintptr_t)hi)
            return true;
    }
    return false;
}

/* Agree on one status: the largest code any rank reports. */
static attn_status agree(MPI_Comm comm, attn_status s) {
    int in = (int)s, out;
    if (MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return ATTN_EMPI;
    return (attn_status)out;
}

/*
 * Collective setup shared by the calls and the workspace queries: duplicate the
 * communicator, check locally, agree on the fields and T_max (one Allreduce),
 * lay out the workspace, check (or allocate, *owned) the caller's workspace,
 * agree on the status (a second Allreduce). On success c->comm is live.
 */
static attn_status setup(MPI_Comm comm, bool bwd, const attn_view *q, const attn_view *k,
                         const attn_view *v, const attn_ring_opts *opts, const ring_io *io,
                         void **work, size_t work_size, void **owned, ring_ctx *c) {
    static const attn_ring_opts defaults = {0};
    int flag = 0;
    memset(c, 0, sizeof *c);
    c->bwd = bwd;
    c->comm = MPI_COMM_NULL;
    c->o = opts ? opts : &defaults;
    if (comm == MPI_COMM_NULL || MPI_Initialized(&flag) != MPI_SUCCESS || !flag ||
        MPI_Finalized(&flag) != MPI_SUCCESS || flag)
        return ATTN_EMPI;
    if (MPI_Comm_test_inter(comm, &flag) != MPI_SUCCESS || flag)
        return ATTN_EMPI;
    if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS) {
        c->comm = MPI_COMM_NULL;
        return ATTN_EMPI;
    }
    attn_status s = ATTN_EMPI;
    if (MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Comm_rank(c->comm, &c->rank) != MPI_SUCCESS ||
        MPI_Comm_size(c->comm, &c->P) != MPI_SUCCESS || c->P < 1)
        goto fail; /* same outcome on every rank: the MPI is unusable here */
    /* x = [fields, -fields, status, T]: one MAX gives max, min, worst status, T_max */
    s = check_local(q, k, v, c->o, io, c);
    int64_t x[2 * NF + 2], y[2 * NF + 2];
    for (int i = 0; i < NF; ++i) {
        x[i] = s == ATTN_OK ? c->f[i] : 0;
        x[NF + i] = -x[i];
    }
    x[2 * NF] = s;
    x[2 * NF + 1] = s == ATTN_OK ? c->T : 0;
    if (MPI_Allreduce(x, y, 2 * NF + 2, MPI_INT64_T, MPI_MAX, c->comm) != MPI_SUCCESS) {
        s = ATTN_EMPI;
        goto fail;
    }
    s = (attn_status)y[2 * NF];
    for (int i = 0; s == ATTN_OK && i < NF; ++i)
        if (y[i] != -y[NF + i])
            s = i == F_DTYPE ? ATTN_EDTYPE : i <= F_DV ? ATTN_ESHAPE : ATTN_EINVAL;
    if (s != ATTN_OK)
        goto fail; /* every rank saw the same y */
    c->Tmax = y[2 * NF + 1];
    s = layout_work(c);
    if (s == ATTN_OK && work) {
        if (*work == NULL && work_size == 0) {
            *owned = aligned_alloc(64, c->total);
            s = *owned ? ATTN_OK : ATTN_ENOMEM;
            *work = *owned;
        } else if (work_size < c->total || *work == NULL) {
            s = ATTN_EWORKSPACE;
        } else if (c->total > 0 && (uintptr_t)*work % 8 != 0) {
            s = ATTN_EINVAL; /* the workspace alignment rule (docs/reliability.md) */
        } else if (work_overlaps(*work, c->total, q, k, v, io)) {
            s = ATTN_EALIAS;
        }
    }
    s = agree(c->comm, s);
    if (s == ATTN_OK)
        return ATTN_OK;
fail:
    MPI_Comm_free(&c->comm);
    if (owned) {
        free(*owned);
        *owned = NULL;
    }
    return s;
}

static size_t workspace_size(MPI_Comm comm, bool bwd, const attn_view *q, const attn_view *k,
                             const attn_view *v, const attn_ring_opts *opts) {
    ring_ctx c;
    if (setup(comm, bwd, q, k, v, opts, NULL, NULL, 0, NULL, &c) != ATTN_OK)
        return 0;
    MPI_Comm_free(&c.comm);
    return c.total;
}

size_t attn_ring_sdpa_workspace_size(MPI_Comm comm, const attn_view *q_local,
                                     const attn_view *k_local, const attn_view *v_local,
                                     const attn_ring_opts *opts) {
    return workspace_size(comm, false, q_local, k_local, v_local, opts);
}

size_t attn_ring_sdpa_backward_workspace_size(MPI_Comm comm, const attn_view *q_local,
                                              const attn_view *k_local,
                                              const attn_view *v_local,
                                              const attn_ring_opts *opts) {
    return workspace_size(comm, true, q_local, k_local, v_local, opts);
}

/* Query rows per attn_sdpa call while a transfer is in flight (see attend_block). */
#define RING_SLICE_MIN 128 /* attn_sdpa's query tile: slices stay whole tiles */
#define RING_SLICES    8

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
    double *run = (double *)(w + c->off[W_X2]), *kap = (double *)(w + c->off[W_KAP]);
    int64_t bht = c->B * c->H * c->T;
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
            /* the arguments were validated by setup(): one plan, then the trusted run */
            attn__sdpa_plan pl;
            ATTN_TRY(attn__sdpa_plan_init(&qv, &kv, &vv, &so, false, &pl));
            attn__rows_f64 rows_kap = {kap + r0, c->H * c->T, c->T};
            if (c->sums) { /* sum exp(s - lse) over this block's visible keys */
                attn_view fl;
                ATTN_TRY(attn_view_slice(c->io.flse, 2, r0, r1, 1, &fl));
                attn__sdpa_lse_sums(&pl, &qv, &kv, &vv, &fl, rows_kap, w + c->off[W_SDPA],
                                    c->sdpa_ws);
            } else if (!c->bwd) {
                attn_view ov;
                double *pm = (double *)(w + c->off[W_X1]), *pl_ = pm + bht;
                ATTN_TRY(attn_view_init(&ov, c->dt, w + c->off[W_X0], 4,
                                        (int64_t[]){c->B, c->H, m, c->Dv}));
                attn__sdpa_run_ml(&pl, &qv, &kv, &vv, &ov, (attn__rows_f64){pm, c->H * m, m},
                                  (attn__rows_f64){pl_, c->H * m, m}, w + c->off[W_SDPA],
                                  c->sdpa_ws);
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
                ATTN_TRY(attn_view_slice(&gkb, 2, 0, nkm, 1, &gk));
                ATTN_TRY(attn_view_slice(&gvb, 2, 0, nkm, 1, &gv));
                /* the corrections of rows whose lse is inexact come from every rank's keys */
                attn__sdpa_backward_run_kappa(&pl, &qv, &kv, &vv, &fo, &fl, &dov,
                                              c->io.dq ? &dqv : NULL, &gk, &gv, rows_kap,
                                              w + c->off[W_SDPA], c->sdpa_ws);
            }
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
                s = attend_block(c, w, src, kvb[cur], gdst, xfer ? req : NULL, &computed);
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
    ATTN_TRY(setup(comm, bwd, q, k, v, opts, io, &work, work_size, &owned, &c));
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
