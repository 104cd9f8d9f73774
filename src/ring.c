/* SPDX-License-Identifier: MIT */
/* attn_ring_sdpa: sequence-parallel ring attention over MPI (docs/distributed.md). */
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "attn/ring.h"
#include "sdpa_internal.h" /* ATTN__SDPA_LSE_EMPTY: the lse of a row that sees no key */

#define T float
#define SFX(name) name##_f32
#include "tmpl/ring.h"
#undef T
#undef SFX
#define T double
#define SFX(name) name##_f64
#include "tmpl/ring.h"
#undef T
#undef SFX

/* Monotonic wall time in seconds (MPI_Wtime is not allowed before MPI_Init). */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Fields every rank must agree on (checked by one MPI_Allreduce). */
enum { F_DTYPE, F_B, F_H, F_HKV, F_D, F_DV, F_CAUSAL, F_LAYOUT, F_SCALE, NF };

/* Validated arguments of one call and the carving of its workspace. */
typedef struct ring_ctx {
    MPI_Comm         comm; /* our duplicate of the caller's communicator */
    int              rank, P;
    attn_dtype       dt;
    size_t           es;
    int64_t          B, H, Hkv, D, Dv, T, Tmax; /* T: this rank's block; Tmax: the longest */
    int64_t          f[NF];
    double           scale;
    bool             causal;
    attn_ring_layout layout;
    const attn_ring_opts *o;
    attn_view        q, k, v;
    /* byte offsets into the workspace */
    size_t           off_gather, off_kv[2], off_op, off_lp, off_run, off_klen, off_sdpa;
    size_t           sdpa_ws, total;
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
    *k = (attn_view){.data = buf, .dtype = c->dt, .ndim = 4,
                     .shape = {c->B, c->Hkv, T, D},
                     .stride = {c->Hkv * T * D, T * D, D, 1}};
    *v = (attn_view){.data = (char *)buf + (size_t)(c->B * c->Hkv * T * D) * c->es,
                     .dtype = c->dt, .ndim = 4, .shape = {c->B, c->Hkv, T, Dv},
                     .stride = {c->Hkv * T * Dv, T * Dv, Dv, 1}};
}

/* Same sufficient test as the library's outputs use: sorted by |stride|, each axis steps
   past the span of the inner ones (src/view.c); attn_mpi sees only attn's public API. */
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
            int64_t t = str[j]; str[j] = str[j - 1]; str[j - 1] = t;
            t = ext[j]; ext[j] = ext[j - 1]; ext[j - 1] = t;
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

/* Everything this rank can check without talking to the others. */
static attn_status check_local(const attn_view *q, const attn_view *k, const attn_view *v,
                               const attn_ring_opts *o, bool call, const attn_view *out,
                               ring_ctx *c) {
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
    if (call) { /* the call, not the workspace query: check the outputs too */
        ATTN_TRY(check_float(out, 4));
        if (o->lse)
            ATTN_TRY(check_float(o->lse, 3));
        if (out->dtype != c->dt || (o->lse && o->lse->dtype != c->dt))
            return ATTN_EDTYPE;
        int64_t os[4] = {c->B, c->H, c->T, c->Dv};
        for (int d = 0; d < 4; ++d)
            if (out->shape[d] != os[d] || (o->lse && d < 3 && o->lse->shape[d] != os[d]))
                return ATTN_ESHAPE;
        if (self_overlaps(out) || (o->lse && self_overlaps(o->lse)))
            return ATTN_ESTRIDE;
        const attn_view *ins[3] = {q, k, v};
        for (int i = 0; i < 3; ++i)
            if (attn_view_overlaps(out, ins[i]) || (o->lse && attn_view_overlaps(o->lse, ins[i])))
                return ATTN_EALIAS;
        if (o->lse && attn_view_overlaps(out, o->lse))
            return ATTN_EALIAS;
    }
    int64_t f[NF] = {c->dt, c->B, c->H, c->Hkv, c->D, c->Dv, c->causal, c->layout, 0};
    memcpy(&f[F_SCALE], &c->scale, sizeof(double));
    memcpy(c->f, f, sizeof f);
    c->q = *q;
    c->k = *k;
    c->v = *v;
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
    /* attn_sdpa's workspace for the largest call: all local queries against T_max keys */
    attn_view kb, vb;
    block_views(c, (void *)(uintptr_t)64, c->Tmax, &kb, &vb); /* only strides matter */
    attn_sdpa_opts so = {.scale = c->scale, .threads = c->o->threads};
    size_t w0 = attn_sdpa_workspace_size(&c->q, &kb, &vb, &so);
    so.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    size_t w1 = attn_sdpa_workspace_size(&c->q, &kb, &vb, &so);
    c->sdpa_ws = w0 > w1 ? w0 : w1;
    /* gather, two K/V buffers, piece out and lse, running lse (double), kv_len, attn_sdpa */
    size_t n[8] = {(size_t)c->P * (size_t)(c->B + 1), (size_t)kvn, (size_t)kvn, (size_t)bhtd,
                   (size_t)bht, (size_t)bht, (size_t)c->B, c->sdpa_ws};
    size_t es[8] = {8, c->es, c->es, c->es, c->es, 8, 8, 1};
    size_t *offs[8] = {&c->off_gather, &c->off_kv[0], &c->off_kv[1], &c->off_op,
                       &c->off_lp, &c->off_run, &c->off_klen, &c->off_sdpa};
    size_t at = 0, bytes;
    for (int i = 0; i < 8; ++i) {
        *offs[i] = at;
        if (!attn__mul_sz(n[i], es[i], &bytes) || bytes > SIZE_MAX / 2 ||
            !attn__add_sz(at, attn__align64(bytes), &at))
            return ATTN_ERANGE;
    }
    c->total = at;
    return ATTN_OK;
}

/* Agree on one status: the largest code any rank reports. */
static attn_status agree(MPI_Comm comm, attn_status s) {
    int in = (int)s, out;
    if (MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return ATTN_EMPI;
    return (attn_status)out;
}

/*
 * Collective setup shared by the call and the workspace query: duplicate the
 * communicator, check locally, agree on the fields and T_max (one Allreduce),
 * lay out the workspace, check (or allocate, *owned) the caller's workspace,
 * agree on the status (a second Allreduce). On success c->comm is live.
 */
static attn_status setup(MPI_Comm comm, const attn_view *q, const attn_view *k,
                         const attn_view *v, const attn_ring_opts *opts, bool call,
                         const attn_view *out, void **work, size_t work_size, void **owned,
                         ring_ctx *c) {
    static const attn_ring_opts defaults = {0};
    int flag = 0;
    memset(c, 0, sizeof *c);
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
    /* x = [fields, -fields, status, T]: one MAX reduction gives max, min, worst status, T_max */
    s = check_local(q, k, v, c->o, call, out, c);
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

size_t attn_ring_sdpa_workspace_size(MPI_Comm comm, const attn_view *q_local,
                                     const attn_view *k_local, const attn_view *v_local,
                                     const attn_ring_opts *opts) {
    ring_ctx c;
    if (setup(comm, q_local, k_local, v_local, opts, false, NULL, NULL, 0, NULL, &c) != ATTN_OK)
        return 0;
    MPI_Comm_free(&c.comm);
    return c.total;
}

/* Query rows per attn_sdpa call while a transfer is in flight (see attend_block). */
#define RING_SLICE_MIN 128 /* attn_sdpa's query tile: slices stay whole tiles */
#define RING_SLICES 8

/*
 * Attend the local queries to the K/V block in hand (packed at buf, from rank
 * src) and merge into out. Non-causal: all queries against all keys. Causal:
 * per query chunk, the visible keys are a prefix of the block (chunks are in
 * global order): earlier chunks fully, its own chunk with the diagonal, which
 * is attn_sdpa's BOTTOM_RIGHT rule on that prefix (key j visible iff
 * j <= i + (nk - nq), nk - nq the start of the diagonal chunk).
 *
 * While a transfer is in flight (req != NULL) the queries go in about
 * RING_SLICES slices with MPI_Testall between them: without an asynchronous
 * progress thread an MPI moves a large (rendezvous) message only inside MPI
 * calls, so this is what lets the exchange proceed during the computation.
 * A diagonal slice of rows [a, a + m) of an nq-row chunk sees the prefix of
 * nk - (nq - a - m) keys, again BOTTOM_RIGHT.
 * Returns the first attn_sdpa failure, or ATTN_EMPI; *computed: any call ran.
 */
static attn_status attend_block(const ring_ctx *c, char *w, int src, const void *buf,
                                const attn_view *out, MPI_Request *req, bool *computed) {
    const int64_t *g = (const int64_t *)(w + c->off_gather) + (size_t)src * (size_t)(c->B + 1);
    int64_t Tsrc = g[0], *klen = (int64_t *)(w + c->off_klen);
    seg qs[2], ks[2];
    int nqs = c->causal ? segments(c, c->rank, c->T, qs) : 1;
    int nks = segments(c, src, Tsrc, ks);
    if (!c->causal)
        qs[0] = (seg){0, c->T, 0};
    attn_view kb, vb;
    block_views(c, (void *)buf, Tsrc, &kb, &vb);
    double *run = (double *)(w + c->off_run);
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
            attn_view qv, kv, vv, ov, lv;
            for (int64_t b = 0; b < c->B; ++b)
                klen[b] = g[1 + b] < nkm ? g[1 + b] : nkm;
            ATTN_TRY(attn_view_slice(&c->q, 2, q0 + i0, q0 + i0 + m, 1, &qv));
            ATTN_TRY(attn_view_slice(&kb, 2, 0, nkm, 1, &kv));
            ATTN_TRY(attn_view_slice(&vb, 2, 0, nkm, 1, &vv));
            ATTN_TRY(attn_view_init(&ov, c->dt, w + c->off_op, 4,
                                    (int64_t[]){c->B, c->H, m, c->Dv}));
            ATTN_TRY(attn_view_init(&lv, c->dt, w + c->off_lp, 3, (int64_t[]){c->B, c->H, m}));
            attn_sdpa_opts so = {.scale = c->scale, .kv_len = klen, .lse = &lv,
                                 .causal = diag ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
                                 .threads = c->o->threads};
            ATTN_TRY(attn_sdpa(&qv, &kv, &vv, &so, &ov, w + c->off_sdpa, c->sdpa_ws));
            if (c->dt == ATTN_F32)
                merge_f32(out, run, ov.data, lv.data, q0 + i0, m);
            else
                merge_f64(out, run, ov.data, lv.data, q0 + i0, m);
            *computed = true;
            int done;
            if (req && MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
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

/*
 * The ring: at step s this rank holds the block of rank (r - s) mod P. It posts
 * the receive of the next block from r - 1 and the send of the one in hand to
 * r + 1, attends to the block in hand meanwhile, then waits (the wait is the
 * communication computation did not hide). A local compute failure keeps the
 * blocks moving (the other ranks wait for them); an MPI failure stops.
 */
static attn_status ring_loop(const ring_ctx *c, char *w, const attn_view *out,
                             attn_ring_stats *st) {
    int r = c->rank, P = c->P, cur = 0;
    MPI_Datatype mdt = c->dt == ATTN_F32 ? MPI_FLOAT : MPI_DOUBLE;
    const int64_t *g = (const int64_t *)(w + c->off_gather);
    attn_status s = ATTN_OK;
    for (int step = 0; step < P; ++step) {
        int src = (r - step + P) % P, from = (r - step - 1 + 2 * P) % P;
        MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        int64_t nsend = 0, nrecv = 0;
        if (step + 1 < P) {
            block_elems(c, g[(size_t)src * (size_t)(c->B + 1)], &nsend);
            block_elems(c, g[(size_t)from * (size_t)(c->B + 1)], &nrecv);
            if (MPI_Irecv(w + c->off_kv[1 - cur], (int)nrecv, mdt, (r + P - 1) % P, 0, c->comm,
                          &req[0]) != MPI_SUCCESS ||
                MPI_Isend(w + c->off_kv[cur], (int)nsend, mdt, (r + 1) % P, 0, c->comm,
                          &req[1]) != MPI_SUCCESS) {
                drop_requests(req, 2);
                return ATTN_EMPI;
            }
            st->bytes_sent += nsend * (int64_t)c->es;
        }
        bool computed = false;
        double tc = now();
        if (s == ATTN_OK)
            s = attend_block(c, w, src, w + c->off_kv[cur], out, step + 1 < P ? req : NULL,
                             &computed);
        st->compute_seconds += now() - tc;
        if (s == ATTN_EMPI) {
            drop_requests(req, 2);
            return s;
        }
        st->blocks_computed += computed;
        st->blocks_skipped += !computed;
        double t0 = MPI_Wtime();
        int rc = MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        st->wait_seconds += MPI_Wtime() - t0;
        if (rc != MPI_SUCCESS)
            return ATTN_EMPI;
        cur = 1 - cur;
    }
    return s;
}

attn_status attn_ring_sdpa(MPI_Comm comm, const attn_view *q_local, const attn_view *k_local,
                           const attn_view *v_local, const attn_ring_opts *opts,
                           attn_view *out_local, void *work, size_t work_size) {
    double t_start = now();
    ring_ctx c;
    void *owned = NULL;
    ATTN_TRY(setup(comm, q_local, k_local, v_local, opts, true, out_local, &work, work_size,
                   &owned, &c));
    char *w = work;
    /* every rank's block length and key lengths: [T_r, kv_len_r[0..B)] per rank */
    int64_t *mine = (int64_t *)(w + c.off_gather) + (size_t)c.rank * (size_t)(c.B + 1);
    mine[0] = c.T;
    for (int64_t b = 0; b < c.B; ++b)
        mine[1 + b] = c.o->kv_len ? c.o->kv_len[b] : c.T;
    attn_status s = ATTN_OK;
    if (MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, w + c.off_gather, (int)(c.B + 1),
                      MPI_INT64_T, c.comm) != MPI_SUCCESS)
        s = ATTN_EMPI;
    s = agree(c.comm, s);
    attn_ring_stats st = {0};
    if (s == ATTN_OK) {
        /* running result: out = 0 and lse = "no key yet" until a block contributes */
        double *run = (double *)(w + c.off_run);
        for (int64_t i = 0, n = c.B * c.H * c.T; i < n; ++i)
            run[i] = ATTN__SDPA_LSE_EMPTY;
        attn_view kb, vb;
        block_views(&c, w + c.off_kv[0], c.T, &kb, &vb);
        s = attn_view_copy(k_local, &kb);
        if (s == ATTN_OK)
            s = attn_view_copy(v_local, &vb);
        ATTN_ASSERT(s == ATTN_OK); /* shapes checked, the buffer is ours */
        if (c.dt == ATTN_F32)
            zero_out_f32(out_local);
        else
            zero_out_f64(out_local);
        s = ring_loop(&c, w, out_local, &st);
        s = agree(c.comm, s);
    }
    if (s == ATTN_OK && c.o->lse) {
        if (c.dt == ATTN_F32)
            store_lse_f32(c.o->lse, (const double *)(w + c.off_run));
        else
            store_lse_f64(c.o->lse, (const double *)(w + c.off_run));
    }
    MPI_Comm_free(&c.comm);
    free(owned);
    if (s == ATTN_OK && c.o->stats) {
        st.seconds = now() - t_start;
        *c.o->stats = st;
    }
    return s;
}
