/* SPDX-License-Identifier: MIT */
/* Check suite for attn_ring_sdpa, run under mpirun on 1, 2 and 4 ranks: every rank builds
 * the whole sequence from one seed, takes its block(s), and compares the ring's result with
 * attn_sdpa over the whole sequence and with the naive double reference. */
#include <attn/ring.h>

#include "sdpa_util.h"

/*
 * Every assertion here is made on values all ranks agree on (reduced over
 * MPI_COMM_WORLD first), so the ranks pass or fail each test together and
 * stay in step through the collectives of the next one (CK_FORK=no).
 */
static int rank, nranks;

/* ---- fault injection through the MPI profiling interface ---------------- */

/* attn_mpi's MPI_Isend and MPI_Comm_dup resolve to these; PMPI_* are the real ones. */
static int fail_isend, fail_dup;
int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
              MPI_Request *req) {
    if (fail_isend)
        return MPI_ERR_OTHER;
    return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *out) {
    if (fail_dup)
        return MPI_ERR_OTHER;
    return PMPI_Comm_dup(comm, out);
}

/* ---- agreement helpers --------------------------------------------------- */

/* Every rank returned want. */
static void assert_status_all(attn_status s, attn_status want, const char *what) {
    int in[2] = {(int)s, -(int)s}, out[2];
    MPI_Allreduce(in, out, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(out[0] == (int)want && -out[1] == (int)want,
                  "%s: statuses range over [%s, %s] across ranks, want %s everywhere", what,
                  attn_status_name((attn_status)-out[1]), attn_status_name((attn_status)out[0]),
                  attn_status_name(want));
}

/* ok on every rank. */
static void assert_all(int ok, const char *what) {
    int all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ck_assert_msg(all, "%s: fails on some rank", what);
}

/* The worst element of a comparison on this rank. */
typedef struct worst {
    double ex, got, want; /* excess over the tolerance (> 0: failure) */
    int64_t idx[4];
} worst;

/*
 * Compare got (B, H, T_r[, X]) with the rows map[0..T_r) of want (B, H, n[, X]):
 * |g - w| <= atol + rtol |w| everywhere (NaN only against NaN).
 */
static worst worst_rows(const attn_view *got, const attn_view *want, const int64_t *map,
                        double rtol, double atol) {
    worst w = {.ex = -1};
    if (tu_numel(got) == 0)
        return w;
    int64_t idx[4] = {0}, wi[4];
    do {
        memcpy(wi, idx, sizeof wi);
        wi[2] = map[idx[2]];
        double g = tu_get(got, idx), v = tu_get(want, wi), err = fabs(g - v);
        double ex = (isnan(g) && isnan(v)) ? -1
                    : isnan(err)           ? INFINITY
                                           : err - atol - rtol * fabs(v);
        if (ex > w.ex) {
            w = (worst){ex, g, v, {0}};
            memcpy(w.idx, idx, sizeof idx);
        }
    } while (tu_inc(idx, got->shape, got->ndim));
    return w;
}

/* The worst element over all ranks is within tolerance; the message names it. */
static void assert_close_all(worst w, const char *what, const char *cname, attn_dtype dt) {
    struct {
        double v;
        int r;
    } in = {w.ex, rank}, out;
    MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    double info[6] = {
        w.got, w.want, (double)w.idx[0], (double)w.idx[1], (double)w.idx[2], (double)w.idx[3]};
    MPI_Bcast(info, 6, MPI_DOUBLE, out.r, MPI_COMM_WORLD);
    ck_assert_msg(out.v <= 0,
                  "%s (%s, %s, %d ranks): worst on rank %d at [%g,%g,%g,%g]: "
                  "got %.17g want %.17g",
                  what, cname, dt == ATTN_F64 ? "f64" : "f32", nranks, out.r, info[2], info[3],
                  info[4], info[5], info[0], info[1]);
}

/* ---- the problems -------------------------------------------------------- */

typedef struct rcase {
    const char *name;
    int64_t B, H, Hkv, D, Dv, T; /* T: tokens per rank (before unevenness) */
    int uneven;                  /* 0 equal; 1 lengths T-1..T+2; 2 as 1 with rank 1 empty */
    attn_causal causal;
    attn_ring_layout layout;
    int ragged; /* 0 none; 1 the global tail block ragged; 2 masked keys on every rank
                   (rank 0 batch 0 none valid: fully masked causal rows) */
    double scale;
    sd_lay lay;  /* memory layout of the local q, k, v, out */
    int extreme; /* 1: every score exactly -1e9 (q = (-2^24, 0..), k_0 = 1e9 / 2^24);
                    2: exactly -1e20 (q_0 = -2^60): the lse loses log l in the dtype */
} rcase;

static int64_t block_len(const rcase *c, int r) {
    if (c->uneven == 0)
        return c->T;
    if (c->uneven == 2 && r == 1)
        return 0;
    return c->T + (r * 3 + 1) % 4 - 1;
}

/* Valid keys of rank r's block for batch b. */
static int64_t block_kvlen(const rcase *c, int r, int64_t b) {
    int64_t t = block_len(c, r), n = t;
    int tail = c->layout == ATTN_RING_ZIGZAG ? 0 : nranks - 1;
    if (c->ragged == 1 && r == tail)
        n = t - 1 - 2 * b;
    if (c->ragged == 2)
        n = (r == 0 && b == 0) ? 0 : t - (r + b) % 3;
    return n < 0 ? 0 : n;
}

/*
 * The global position of local row t of rank r, derived from the layouts'
 * definitions in ring.h: contiguous blocks in rank order; zigzag: 2P chunks,
 * rank r holding chunk r (its first ceil(T_r / 2) rows) and chunk 2P-1-r.
 */
static int64_t global_pos(const rcase *c, int r, int64_t t) {
    int P = nranks;
    if (c->layout == ATTN_RING_CONTIGUOUS) {
        int64_t off = 0;
        for (int j = 0; j < r; ++j)
            off += block_len(c, j);
        return off + t;
    }
    int64_t first = (block_len(c, r) + 1) / 2, chunk = t < first ? r : 2 * P - 1 - r, off = 0;
    for (int64_t ch = 0; ch < chunk; ++ch) {
        int owner = ch < P ? (int)ch : (int)(2 * P - 1 - ch);
        int64_t len = block_len(c, owner), a = (len + 1) / 2;
        off += ch < P ? a : len - a;
    }
    return off + (t < first ? t : t - first);
}

/* Everything one case needs on this rank: the whole sequence and this rank's block. */
typedef struct problem {
    int64_t n, Tr, *map, kvl[8];
    sd_t q, k, v;            /* whole sequence, contiguous */
    sd_t keep;               /* (B, 1, n, n) U8: the ragged keys as a global mask */
    sd_t ql, kl, vl, ol, ll; /* local blocks in the case's layout, out and lse */
} problem;

static void problem_make(const rcase *c, attn_dtype dt, problem *p) {
    memset(p, 0, sizeof *p);
    for (int r = 0; r < nranks; ++r)
        p->n += block_len(c, r);
    p->Tr = block_len(c, rank);
    int64_t n = p->n, Tr = p->Tr;
    uint64_t seed = 0x5eed0000u + (uint64_t)c->B * 131 + (uint64_t)n; /* same on every rank */
    p->q = sd_make(dt, (int64_t[]){c->B, c->H, n, c->D}, LY_CONTIG, &seed, 1.0);
    p->k = sd_make(dt, (int64_t[]){c->B, c->Hkv, n, c->D}, LY_CONTIG, &seed, 1.0);
    p->v = sd_make(dt, (int64_t[]){c->B, c->Hkv, n, c->Dv}, LY_CONTIG, &seed, 1.0);
    if (c->extreme) { /* q.k = a b exactly, for every query and key */
        /* k_0 small: dq = scale sum_j dS_j k_j sums to ~0, its rounding scales with k_0 */
        double a = c->extreme == 1 ? -16777216.0 : -1152921504606846976.0; /* 2^24, 2^60 */
        double bk = c->extreme == 1 ? 1e9 / 16777216.0 : 1e20 / 1152921504606846976.0;
        int64_t idx[4] = {0};
        do
            tu_set(&p->q.v, idx, idx[3] == 0 ? a : 0.0);
        while (tu_inc(idx, p->q.v.shape, 4));
        do
            if (idx[3] == 0)
                tu_set(&p->k.v, idx, bk);
        while (tu_inc(idx, p->k.v.shape, 4));
    }
    p->map = malloc(sizeof(int64_t) * (size_t)(Tr + 1));
    for (int64_t t = 0; t < Tr; ++t)
        p->map[t] = global_pos(c, rank, t);
    for (int64_t b = 0; b < c->B; ++b)
        p->kvl[b] = block_kvlen(c, rank, b);
    if (c->ragged) {
        p->keep = sd_zeros(ATTN_U8, 4, (int64_t[]){c->B, 1, n, n});
        uint8_t *k = p->keep.mem;
        for (int r = 0; r < nranks; ++r)
            for (int64_t t = 0; t < block_len(c, r); ++t)
                for (int64_t b = 0; b < c->B; ++b)
                    if (t < block_kvlen(c, r, b))
                        for (int64_t i = 0; i < n; ++i)
                            k[(b * n + i) * n + global_pos(c, r, t)] = 1;
    }
    /* local blocks: junk-filled buffers in the case's layout, then this rank's rows */
    uint64_t junk = 77 + (uint64_t)rank;
    const sd_t *full[3] = {&p->q, &p->k, &p->v};
    sd_t *loc[3] = {&p->ql, &p->kl, &p->vl};
    for (int a = 0; a < 3; ++a) {
        const attn_view *f = &full[a]->v;
        int64_t sh[4] = {f->shape[0], f->shape[1], Tr, f->shape[3]}, idx[4] = {0}, fi[4];
        *loc[a] = sd_make(dt, sh, c->lay, &junk, 9.0);
        if (Tr > 0 && tu_numel(&loc[a]->v) > 0)
            do {
                memcpy(fi, idx, sizeof fi);
                fi[2] = p->map[idx[2]];
                tu_set(&loc[a]->v, idx, tu_get(f, fi));
            } while (tu_inc(idx, sh, 4));
    }
    p->ol = sd_make(dt, (int64_t[]){c->B, c->H, Tr, c->Dv}, c->lay, &junk, 9.0);
    p->ll = sd_make(dt, (int64_t[]){c->B, c->H, Tr, 1}, LY_PADDED, &junk, 9.0);
    p->ll.v.ndim = 3; /* (B, H, Tr) with a row stride of 4: a strided lse */
}

static void problem_free(problem *p) {
    sd_t *all[9] = {&p->q, &p->k, &p->v, &p->keep, &p->ql, &p->kl, &p->vl, &p->ol, &p->ll};
    for (int i = 0; i < 9; ++i)
        sd_free(all[i]);
    free(p->map);
}

/* Run one case in one dtype: ring vs attn_sdpa (same dtype) and vs the naive reference. */
static void run_case(const rcase *c, attn_dtype dt) {
    problem p;
    problem_make(c, dt, &p);
    int64_t n = p.n;
    /* whole-sequence references */
    attn_sdpa_opts so = {.scale = c->scale,
                         .causal = c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE,
                         .keep = c->ragged ? &p.keep.v : NULL};
    sd_t out = sd_zeros(dt, 4, (int64_t[]){c->B, c->H, n, c->Dv});
    sd_t lse = sd_zeros(dt, 3, (int64_t[]){c->B, c->H, n});
    sd_t nout = sd_zeros(ATTN_F64, 4, (int64_t[]){c->B, c->H, n, c->Dv});
    sd_t nlse = sd_zeros(ATTN_F64, 3, (int64_t[]){c->B, c->H, n});
    so.lse = &lse.v;
    ck_assert_int_eq(attn_sdpa(&p.q.v, &p.k.v, &p.v.v, &so, &out.v, NULL, 0), ATTN_OK);
    so.lse = NULL;
    ref_sdpa(&p.q.v, &p.k.v, &p.v.v, &so, &nout.v, NULL, &nlse.v);
    /* the ring */
    attn_ring_stats st = {0};
    attn_ring_opts ro = {.scale = c->scale,
                         .causal = c->causal,
                         .layout = c->layout,
                         .kv_len = c->ragged ? p.kvl : NULL,
                         .lse = &p.ll.v,
                         .stats = &st};
    attn_status s =
        attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v, NULL, 0);
    assert_status_all(s, ATTN_OK, c->name);
    double rt = TU_RTOL(dt), at = TU_ATOL(dt);
    char nm[64];
    snprintf(nm, sizeof nm, "%s, %s", c->name, sd_lay_name[c->lay]);
    assert_close_all(worst_rows(&p.ol.v, &out.v, p.map, rt, at), "out vs attn_sdpa", nm, dt);
    assert_close_all(worst_rows(&p.ll.v, &lse.v, p.map, rt, at), "lse vs attn_sdpa", nm, dt);
    assert_close_all(worst_rows(&p.ol.v, &nout.v, p.map, rt, at), "out vs naive", nm, dt);
    assert_close_all(worst_rows(&p.ll.v, &nlse.v, p.map, rt, at), "lse vs naive", nm, dt);
    /* bookkeeping: P blocks seen, P - 1 sent (all but the next rank's own block) */
    int64_t sent = 0, per_tok = c->B * c->Hkv * (c->D + c->Dv) * (int64_t)attn_dtype_size(dt);
    if (nranks > 1)
        sent = (n - block_len(c, (rank + 1) % nranks)) * per_tok;
    assert_all(st.blocks_computed + st.blocks_skipped == nranks && st.bytes_sent == sent &&
                   st.seconds >= st.wait_seconds + st.compute_seconds && st.wait_seconds >= 0 &&
                   st.compute_seconds >= 0,
               "stats");
    sd_free(&out);
    sd_free(&lse);
    sd_free(&nout);
    sd_free(&nlse);
    problem_free(&p);
}

static void run_cases(const rcase *cs, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        run_case(&cs[i], ATTN_F64);
        run_case(&cs[i], ATTN_F32);
    }
}
#define RUN(cases) run_cases(cases, sizeof cases / sizeof cases[0])

static const attn_causal NC = ATTN_CAUSAL_NONE, CA = ATTN_CAUSAL_TOP_LEFT;
static const attn_ring_layout CO = ATTN_RING_CONTIGUOUS, ZZ = ATTN_RING_ZIGZAG;

START_TEST(ring_noncausal) {
    static const rcase cs[] = {
        {"mha", 2, 2, 2, 8, 8, 6, 0, NC, CO, 0, 0, LY_CONTIG, 0},
        {"scale_dv", 1, 3, 3, 5, 7, 5, 0, NC, CO, 0, 0.7, LY_CONTIG, 0},
        {"one_token", 2, 2, 2, 4, 4, 1, 0, NC, CO, 0, 0, LY_CONTIG, 0},
    };
    RUN(cs);
}
END_TEST

START_TEST(ring_causal) {
    static const rcase cs[] = {
        {"causal", 2, 2, 2, 8, 8, 6, 0, CA, CO, 0, 0, LY_CONTIG, 0},
        {"bottom_right_same", 1, 2, 2, 8, 4, 5, 0, ATTN_CAUSAL_BOTTOM_RIGHT, CO, 0, 0.5,
         LY_CONTIG, 0},
    };
    RUN(cs);
}
END_TEST

START_TEST(ring_gqa) {
    static const rcase cs[] = {
        {"gqa_causal", 2, 4, 2, 8, 8, 5, 0, CA, CO, 0, 0, LY_CONTIG, 0},
        {"mqa", 1, 4, 1, 6, 3, 5, 0, NC, CO, 0, 0, LY_CONTIG, 0},
        {"gqa_zigzag", 1, 6, 2, 4, 4, 6, 1, CA, ZZ, 0, 0, LY_CONTIG, 0},
    };
    RUN(cs);
}
END_TEST

START_TEST(ring_uneven) {
    static const rcase cs[] = {
        {"uneven", 2, 2, 2, 8, 8, 5, 1, NC, CO, 0, 0, LY_CONTIG, 0},
        {"uneven_causal", 2, 2, 1, 8, 8, 5, 1, CA, CO, 0, 0, LY_CONTIG, 0},
        {"empty_rank", 1, 2, 2, 8, 8, 4, 2, CA, CO, 0, 0, LY_CONTIG, 0},
        {"empty_rank_nc", 1, 2, 2, 8, 8, 4, 2, NC, CO, 0, 0, LY_CONTIG, 0},
    };
    RUN(cs);
}
END_TEST

START_TEST(ring_zigzag) {
    static const rcase cs[] = {
        {"zigzag", 2, 2, 2, 8, 8, 6, 0, CA, ZZ, 0, 0, LY_CONTIG, 0},
        {"zigzag_odd", 1, 2, 2, 8, 8, 5, 1, CA, ZZ, 0, 0, LY_CONTIG, 0},
        {"zigzag_empty", 1, 2, 2, 4, 4, 3, 2, CA, ZZ, 0, 0, LY_CONTIG, 0},
        {"zigzag_nc", 2, 2, 2, 8, 8, 5, 1, NC, ZZ, 0, 0, LY_CONTIG, 0},
    };
    RUN(cs);
}
END_TEST

START_TEST(ring_ragged) {
    static const rcase cs[] = {
        {"ragged_tail", 3, 2, 2, 8, 8, 6, 0, CA, CO, 1, 0, LY_CONTIG, 0},
        {"ragged_tail_nc", 3, 2, 2, 8, 8, 6, 1, NC, CO, 1, 0, LY_CONTIG, 0},
        {"ragged_zigzag", 3, 2, 2, 8, 8, 7, 1, CA, ZZ, 1, 0, LY_CONTIG, 0},
        {"ragged_all", 2, 2, 1, 8, 8, 5, 1, CA, CO, 2, 0, LY_CONTIG, 0},
        {"ragged_all_zz", 2, 2, 2, 8, 8, 5, 1, CA, ZZ, 2, 0, LY_CONTIG, 0},
    };
    RUN(cs);
}
END_TEST

START_TEST(ring_strided) {
    static const rcase cs[] = {
        {"bthd", 2, 2, 2, 8, 8, 5, 1, CA, CO, 0, 0, LY_BTHD, 0},
        {"padded", 1, 2, 1, 8, 8, 5, 0, NC, ZZ, 0, 0, LY_PADDED, 0},
        {"negative", 1, 2, 2, 8, 8, 5, 1, CA, ZZ, 1, 0, LY_NEG, 0},
        {"packed", 1, 2, 2, 4, 4, 4, 0, CA, CO, 0, 0, LY_PACKED, 0},
        {"colmajor", 1, 2, 2, 4, 6, 4, 1, NC, CO, 0, 0, LY_COLMAJOR, 0},
    };
    RUN(cs);
}
END_TEST

/* Blocks longer than attn_sdpa's query tile: while a transfer is in flight the ring splits
   the queries into slices (diagonal slices see shorter key prefixes). */
START_TEST(ring_long) {
    static const rcase cs[] = {
        {"long_causal", 1, 2, 1, 4, 4, 260, 1, CA, CO, 0, 0, LY_CONTIG, 0},
        {"long_zigzag", 1, 1, 1, 4, 4, 300, 1, CA, ZZ, 2, 0, LY_BTHD, 0},
        {"long_nc", 1, 1, 1, 4, 4, 260, 0, NC, CO, 1, 0, LY_CONTIG, 0},
    };
    RUN(cs);
}
END_TEST

/* Causal contiguous blocks: rank r computes blocks 0..r and skips the P - 1 - r in its
   future; zigzag: every block contributes to every rank (the load balance). */
START_TEST(ring_skip_future) {
    static const rcase co = {"skip", 1, 2, 2, 4, 4, 4, 0, CA, CO, 0, 0, LY_CONTIG, 0};
    static const rcase zz = {"skip_zz", 1, 2, 2, 4, 4, 4, 0, CA, ZZ, 0, 0, LY_CONTIG, 0};
    for (int z = 0; z < 2; ++z) {
        problem p;
        problem_make(z ? &zz : &co, ATTN_F64, &p);
        attn_ring_stats st;
        attn_ring_opts ro = {.causal = CA, .layout = z ? ZZ : CO, .stats = &st};
        attn_status s =
            attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v, NULL, 0);
        assert_status_all(s, ATTN_OK, "skip");
        int want = z ? nranks : rank + 1;
        assert_all(st.blocks_computed == want && st.blocks_skipped == nranks - want,
                   z ? "zigzag computes every block" : "contiguous skips the future");
        problem_free(&p);
    }
}
END_TEST

/* ---- error paths: the same status on every rank, outputs untouched ------- */

/* A copy of the bytes a view spans, to check an output was not written. */
typedef struct snap {
    const char *lo;
    size_t n;
    char *copy;
} snap;
static snap snap_take(const attn_view *v) {
    const void *lo, *hi;
    attn_view_span(v, &lo, &hi);
    snap s = {lo, (size_t)((const char *)hi - (const char *)lo), NULL}; /* [lo, hi) */
    s.copy = malloc(s.n + 1);
    memcpy(s.copy, s.lo, s.n);
    return s;
}
static int snap_same(snap *s) {
    int same = memcmp(s->copy, s->lo, s->n) == 0;
    free(s->copy);
    return same;
}

static const rcase err_case = {"err", 2, 4, 2, 8, 8, 4, 0, CA, CO, 0, 0, LY_CONTIG, 0};

/* One rank breaks something (via f); every rank must return want, outputs untouched. */
typedef void (*breaker)(problem *p, attn_ring_opts *o, MPI_Comm *comm, attn_view *q,
                        attn_view *out);
static void expect_error(breaker f, int who, attn_status want, const char *what) {
    problem p;
    problem_make(&err_case, ATTN_F64, &p);
    attn_ring_opts o = {.causal = CA, .lse = &p.ll.v};
    attn_view q = p.ql.v, out = p.ol.v;
    MPI_Comm comm = MPI_COMM_WORLD;
    if (who < 0 || rank == who)
        f(&p, &o, &comm, &q, &out);
    snap so = snap_take(&p.ol.v), sl = snap_take(&p.ll.v);
    attn_status s = attn_ring_sdpa(comm, &q, &p.kl.v, &p.vl.v, &o, &out, NULL, 0);
    assert_status_all(s, want, what);
    int same_o = snap_same(&so), same_l = snap_same(&sl);
    assert_all(same_o && same_l, "outputs untouched on error");
    problem_free(&p);
}

static void br_null_q(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q,
                      attn_view *out) {
    (void)p;
    (void)o;
    (void)c;
    (void)out;
    q->data = NULL;
    q->ndim = 0;
}
static void br_dtype(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q, attn_view *out) {
    /* every view relabelled f32 (same memory): locally consistent, globally not */
    (void)o;
    (void)c;
    q->dtype = out->dtype = p->kl.v.dtype = p->vl.v.dtype = p->ll.v.dtype = ATTN_F32;
}
static void br_heads(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q, attn_view *out) {
    /* H = 2 instead of 4 (still a multiple of Hkv = 2): consistent here, not across ranks */
    (void)c;
    q->shape[1] = 2;
    out->shape[1] = 2;
    p->ll.v.shape[1] = 2;
    o->lse = &p->ll.v;
}
static void br_causal(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q,
                      attn_view *out) {
    (void)p;
    (void)c;
    (void)q;
    (void)out;
    o->causal = ATTN_CAUSAL_NONE;
}
static void br_scale(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q, attn_view *out) {
    (void)p;
    (void)c;
    (void)q;
    (void)out;
    o->scale = 0.25;
}
static void br_layout(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q,
                      attn_view *out) {
    (void)p;
    (void)c;
    (void)q;
    (void)out;
    o->layout = ZZ;
}
static void br_kvlen(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q, attn_view *out) {
    (void)c;
    (void)q;
    (void)out;
    p->kvl[0] = p->Tr + 1;
    p->kvl[1] = 0;
    o->kv_len = p->kvl;
}
static void br_alias(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q, attn_view *out) {
    (void)p;
    (void)o;
    (void)c;
    *q = *out; /* out overlaps q (its D == Dv, same shape) */
}
static void br_lse_shape(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q,
                         attn_view *out) {
    (void)c;
    (void)q;
    (void)out;
    p->ll.v.shape[2] -= 1;
    o->lse = &p->ll.v;
}
static void br_out_bcast(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q,
                         attn_view *out) {
    (void)p;
    (void)o;
    (void)c;
    (void)q;
    out->stride[1] = 0; /* two heads written to one place */
}
static void br_comm_null(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q,
                         attn_view *out) {
    (void)p;
    (void)o;
    (void)q;
    (void)out;
    *c = MPI_COMM_NULL;
}
static void br_enum(problem *p, attn_ring_opts *o, MPI_Comm *c, attn_view *q, attn_view *out) {
    (void)p;
    (void)c;
    (void)q;
    (void)out;
    o->layout = (attn_ring_layout)7;
}

START_TEST(ring_err_local) {
    int last = nranks - 1;
    expect_error(br_null_q, last, ATTN_EINVAL, "NULL q on the last rank");
    expect_error(br_kvlen, 0, ATTN_ERANGE, "kv_len beyond the block on rank 0");
    expect_error(br_enum, last, ATTN_EINVAL, "bad layout enum on the last rank");
    expect_error(br_alias, 0, ATTN_EALIAS, "out aliases q on rank 0");
    expect_error(br_lse_shape, last, ATTN_ESHAPE, "lse shape on the last rank");
    expect_error(br_out_bcast, 0, ATTN_ESTRIDE, "broadcast out on rank 0");
}
END_TEST

START_TEST(ring_err_across) {
    /* with one rank these are ordinary (valid) calls: only test disagreement with peers */
    if (nranks < 2)
        return;
    int last = nranks - 1;
    expect_error(br_dtype, last, ATTN_EDTYPE, "dtype differs on the last rank");
    expect_error(br_heads, last, ATTN_ESHAPE, "head count differs on the last rank");
    expect_error(br_causal, 0, ATTN_EINVAL, "causal differs on rank 0");
    expect_error(br_scale, last, ATTN_EINVAL, "scale differs on the last rank");
    expect_error(br_layout, 0, ATTN_EINVAL, "layout differs on rank 0");
}
END_TEST

START_TEST(ring_err_mpi) {
    expect_error(br_comm_null, -1, ATTN_EMPI, "MPI_COMM_NULL everywhere");
    /* a failing MPI call, injected through the profiling interface on every rank */
    fail_dup = 1;
    problem p;
    problem_make(&err_case, ATTN_F64, &p);
    attn_ring_opts o = {.causal = CA};
    attn_status s =
        attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v, NULL, 0);
    fail_dup = 0;
    assert_status_all(s, ATTN_EMPI, "MPI_Comm_dup fails");
    /* the send of the ring's first step fails: the posted receive is cancelled, no hang */
    fail_isend = 1;
    s = attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v, NULL, 0);
    fail_isend = 0;
    assert_status_all(s, nranks > 1 ? ATTN_EMPI : ATTN_OK, "MPI_Isend fails");
    /* and the communicator still works afterwards */
    s = attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v, NULL, 0);
    assert_status_all(s, ATTN_OK, "after the failures");
    problem_free(&p);
}
END_TEST

/* The caller's workspace: exact size works; one byte short on one rank fails everywhere. */
START_TEST(ring_workspace) {
    for (int dti = 0; dti < 2; ++dti) {
        attn_dtype dt = dti ? ATTN_F32 : ATTN_F64;
        static const rcase c = {"ws", 2, 4, 2, 8, 8, 5, 1, CA, ZZ, 0, 0, LY_BTHD, 0};
        problem p;
        problem_make(&c, dt, &p);
        attn_ring_opts o = {.causal = CA, .layout = ZZ, .lse = &p.ll.v};
        size_t need =
            attn_ring_sdpa_workspace_size(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o);
        assert_all(need > 0, "workspace size > 0");
        char *w = malloc(need);
        /* the one-byte-short rank fails, and so does everyone, before writing anything */
        size_t give = rank == nranks - 1 ? need - 1 : need;
        snap so = snap_take(&p.ol.v);
        attn_status s =
            attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v, w, give);
        assert_status_all(s, ATTN_EWORKSPACE, "one byte short on the last rank");
        assert_all(snap_same(&so), "out untouched");
        /* misaligned on the last rank: ATTN_EINVAL everywhere, nothing written */
        char *wm = malloc(need + 8);
        so = snap_take(&p.ol.v);
        s = attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v,
                           rank == nranks - 1 ? wm + 4 : wm, need);
        assert_status_all(s, ATTN_EINVAL, "workspace misaligned on the last rank");
        assert_all(snap_same(&so), "out untouched (misaligned)");
        free(wm);
        /* the workspace over this rank's k on the last rank: ATTN_EALIAS, nothing written */
        size_t kb = (size_t)tu_numel(&p.kl.v) * attn_dtype_size(dt);
        so = snap_take(&p.ol.v);
        if (rank == nranks - 1 && kb > 0) {
            const void *lo, *hi;
            attn_view_span(&p.kl.v, &lo, &hi);
            s = attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v,
                               (void *)lo, need);
        } else {
            s = attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v, w, need);
        }
        assert_status_all(s, kb > 0 || rank != nranks - 1 ? ATTN_EALIAS : ATTN_OK,
                          "workspace over k on the last rank");
        assert_all(snap_same(&so), "out untouched (workspace over k)");
        s = attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &p.ol.v, w, need);
        assert_status_all(s, ATTN_OK, "exact workspace");
        /* the same result as with the convenience allocation */
        sd_t o2 = sd_zeros(dt, 4, p.ol.v.shape);
        s = attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o, &o2.v, NULL, 0);
        assert_status_all(s, ATTN_OK, "allocating");
        assert_close_all(worst_rows(&o2.v, &p.ol.v, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 0, 0),
                         "caller workspace vs allocated", c.name, dt);
        sd_free(&o2);
        free(w);
        problem_free(&p);
    }
}
END_TEST

START_TEST(ringws_invalid) {
    problem p;
    problem_make(&err_case, ATTN_F64, &p);
    attn_ring_opts o = {.causal = CA};
    attn_view q = p.ql.v;
    if (rank == nranks - 1)
        q.shape[3] = 3; /* D differs from k's */
    size_t need = attn_ring_sdpa_workspace_size(MPI_COMM_WORLD, &q, &p.kl.v, &p.vl.v, &o);
    assert_all(need == 0, "0 on every rank when one rank is invalid");
    need = attn_ring_sdpa_workspace_size(MPI_COMM_NULL, &p.ql.v, &p.kl.v, &p.vl.v, &o);
    assert_all(need == 0, "0 for MPI_COMM_NULL");
    /* valid: the size grows with the longest block anywhere (the receive buffers) */
    size_t base = attn_ring_sdpa_workspace_size(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &o);
    attn_view k2 = p.kl.v, v2 = p.vl.v, q2 = p.ql.v;
    if (rank == 0 && p.Tr > 1) { /* rank 0 shrinks its block: T_max unchanged when P > 1 */
        q2.shape[2] = k2.shape[2] = v2.shape[2] = p.Tr - 1;
    }
    size_t other = attn_ring_sdpa_workspace_size(MPI_COMM_WORLD, &q2, &k2, &v2, &o);
    assert_all(base > 0 && other > 0 && (rank == 0 || other == base), "sizes");
    problem_free(&p);
}
END_TEST

/*
 * fuzz_ring: every block empty (T_r = 0 on every rank) with an lse whose data is NULL
 * (an empty view may have no data): storing the lse computed NULL + 0 (UBSan, CI's
 * ASan step). The call is ATTN_OK everywhere and writes nothing.
 */
START_TEST(ring_empty_null_data) {
    static double buf[64];
    for (int dt = 0; dt < 2; ++dt) {
        attn_dtype t = dt ? ATTN_F64 : ATTN_F32;
        attn_view q, k, v, out, lse;
        ck_assert_int_eq(attn_view_init(&q, t, buf, 4, (int64_t[]){3, 4, 0, 4}), ATTN_OK);
        ck_assert_int_eq(attn_view_init(&k, t, buf, 4, (int64_t[]){3, 2, 0, 4}), ATTN_OK);
        ck_assert_int_eq(attn_view_init(&v, t, buf, 4, (int64_t[]){3, 2, 0, 4}), ATTN_OK);
        ck_assert_int_eq(attn_view_init(&out, t, NULL, 4, (int64_t[]){3, 4, 0, 4}), ATTN_OK);
        ck_assert_int_eq(attn_view_init(&lse, t, NULL, 3, (int64_t[]){3, 4, 0}), ATTN_OK);
        for (int lay = 0; lay < 2; ++lay) {
            attn_ring_opts o = {.causal = CA, .layout = (attn_ring_layout)lay, .lse = &lse};
            assert_status_all(attn_ring_sdpa(MPI_COMM_WORLD, &q, &k, &v, &o, &out, NULL, 0),
                              ATTN_OK, "empty blocks, out and lse without data");
        }
    }
}
END_TEST

/* ---- attn_ring_sdpa_backward --------------------------------------------- */

/* Gradient tolerances (as test_sdpa_backward: dS = P (dP - delta) cancels). */
#define GRTOL(dt) ((dt) == ATTN_F64 ? 1e-11 : 2e-4)
#define GATOL(dt) ((dt) == ATTN_F64 ? 1e-12 : 2e-5)

/* A local (B, X, T_r, Y) tensor in layout lay holding rows map[] of the whole tensor f. */
static sd_t local_rows(const attn_view *f, const int64_t *map, int64_t Tr, sd_lay lay,
                       uint64_t *junk) {
    int64_t sh[4] = {f->shape[0], f->shape[1], Tr, f->shape[3]}, idx[4] = {0}, fi[4];
    sd_t t = sd_make(f->dtype, sh, lay, junk, 9.0);
    if (tu_numel(&t.v) > 0)
        do {
            memcpy(fi, idx, sizeof fi);
            fi[2] = map[idx[2]];
            tu_set(&t.v, idx, tu_get(f, fi));
        } while (tu_inc(idx, sh, 4));
    return t;
}

/* got - before, elementwise, as a contiguous F64 tensor (what a call accumulated). */
static sd_t minus(const attn_view *got, const sd_t *before) {
    sd_t d = sd_zeros(ATTN_F64, 4, got->shape);
    int64_t idx[4] = {0};
    if (tu_numel(got) > 0)
        do
            tu_set(&d.v, idx, tu_get(got, idx) - tu_get(&before->v, idx));
        while (tu_inc(idx, got->shape, 4));
    return d;
}

/* Ring backward vs attn_sdpa_backward over the whole sequence and the naive reference. */
static void run_backward(const rcase *c, attn_dtype dt) {
    problem p;
    problem_make(c, dt, &p);
    int64_t n = p.n, Tr = p.Tr;
    uint64_t seed = 0xd0u + (uint64_t)n, junk = 99 + (uint64_t)rank;
    attn_sdpa_opts so = {.scale = c->scale,
                         .causal = c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE,
                         .keep = c->ragged ? &p.keep.v : NULL};
    sd_t dout = sd_make(dt, (int64_t[]){c->B, c->H, n, c->Dv}, LY_CONTIG, &seed, 1.0);
    sd_t out = sd_zeros(dt, 4, (int64_t[]){c->B, c->H, n, c->Dv});
    sd_t lse = sd_zeros(dt, 3, (int64_t[]){c->B, c->H, n});
    so.lse = &lse.v;
    ck_assert_int_eq(attn_sdpa(&p.q.v, &p.k.v, &p.v.v, &so, &out.v, NULL, 0), ATTN_OK);
    so.lse = NULL;
    sd_t g[3], ng[3];
    const sd_t *in[3] = {&p.q, &p.k, &p.v};
    for (int i = 0; i < 3; ++i) {
        g[i] = sd_zeros(dt, 4, in[i]->v.shape);
        ng[i] = sd_zeros(ATTN_F64, 4, in[i]->v.shape);
    }
    ck_assert_int_eq(attn_sdpa_backward(&p.q.v, &p.k.v, &p.v.v, &so, &out.v, &lse.v, &dout.v,
                                        &g[0].v, &g[1].v, &g[2].v, NULL, 0),
                     ATTN_OK);
    ref_sdpa_backward(&p.q.v, &p.k.v, &p.v.v, &so, &dout.v, &ng[0].v, &ng[1].v, &ng[2].v);
    /* the ring: forward for out and lse, then backward into junk-filled gradients */
    attn_ring_opts ro = {.scale = c->scale,
                         .causal = c->causal,
                         .layout = c->layout,
                         .kv_len = c->ragged ? p.kvl : NULL,
                         .lse = &p.ll.v};
    attn_status s =
        attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v, NULL, 0);
    assert_status_all(s, ATTN_OK, "forward");
    sd_t doutl = local_rows(&dout.v, p.map, Tr, c->lay, &junk);
    sd_t gl[3], before[3];
    const sd_t *loc[3] = {&p.ql, &p.kl, &p.vl};
    for (int i = 0; i < 3; ++i) {
        gl[i] = sd_make(dt, loc[i]->v.shape, c->lay, &junk, 1.0);
        before[i] = sd_zeros(ATTN_F64, 4, loc[i]->v.shape);
        int64_t idx[4] = {0};
        if (tu_numel(&gl[i].v) > 0)
            do
                tu_set(&before[i].v, idx, tu_get(&gl[i].v, idx));
            while (tu_inc(idx, gl[i].v.shape, 4));
    }
    attn_ring_stats st;
    ro.stats = &st;
    s = attn_ring_sdpa_backward(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v,
                                &p.ll.v, &doutl.v, &gl[0].v, &gl[1].v, &gl[2].v, NULL, 0);
    assert_status_all(s, ATTN_OK, c->name);
    static const char *names[3][2] = {{"dq vs attn_sdpa_backward", "dq vs naive"},
                                      {"dk vs attn_sdpa_backward", "dk vs naive"},
                                      {"dv vs attn_sdpa_backward", "dv vs naive"}};
    char nm[64];
    snprintf(nm, sizeof nm, "%s, %s", c->name, sd_lay_name[c->lay]);
    for (int i = 0; i < 3; ++i) {
        sd_t d = minus(&gl[i].v, &before[i]);
        assert_close_all(worst_rows(&d.v, &g[i].v, p.map, GRTOL(dt), GATOL(dt)), names[i][0],
                         nm, dt);
        assert_close_all(worst_rows(&d.v, &ng[i].v, p.map, GRTOL(dt), GATOL(dt)), names[i][1],
                         nm, dt);
        sd_free(&d);
    }
    /* K/V blocks: P - 1 sends; gradient accumulators: P sends (each block but the next
       rank's own, plus the own block of the next rank coming home) */
    int64_t per_tok = c->B * c->Hkv * (c->D + c->Dv) * (int64_t)attn_dtype_size(dt), sent = 0;
    /* a row whose lse is inexact (docs/numerics.md: |lse| >= 64 in f32, 1024 in f64; the
       empty rows' -1e30 included) on any rank: one more K/V ring for the row sums */
    int inexact = 0, any_inexact = 0;
    int64_t li[3] = {0};
    if (tu_numel(&p.ll.v) > 0)
        do
            inexact |= fabs(tu_get(&p.ll.v, li)) >= (dt == ATTN_F32 ? 64.0 : 1024.0);
        while (tu_inc(li, p.ll.v.shape, 3));
    MPI_Allreduce(&inexact, &any_inexact, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (nranks > 1)
        sent =
            (1 + any_inexact) * (n - block_len(c, (rank + 1) % nranks)) * per_tok + n * per_tok;
    assert_all(st.bytes_sent == sent &&
                   st.blocks_computed + st.blocks_skipped == (1 + any_inexact) * nranks,
               "backward stats");
    for (int i = 0; i < 3; ++i) {
        sd_free(&g[i]);
        sd_free(&ng[i]);
        sd_free(&gl[i]);
        sd_free(&before[i]);
    }
    sd_free(&dout);
    sd_free(&out);
    sd_free(&lse);
    sd_free(&doutl);
    problem_free(&p);
}

START_TEST(ringbw_cases) {
    static const rcase cs[] = {
        {"bw_nc", 2, 2, 2, 8, 8, 5, 0, NC, CO, 0, 0, LY_CONTIG, 0},
        {"bw_causal_gqa", 2, 4, 2, 8, 6, 5, 1, CA, CO, 0, 0.6, LY_CONTIG, 0},
        {"bw_zigzag", 1, 2, 1, 8, 8, 5, 1, CA, ZZ, 0, 0, LY_BTHD, 0},
        {"bw_empty_rank", 1, 2, 2, 4, 4, 4, 2, CA, CO, 0, 0, LY_NEG, 0},
        {"bw_ragged", 2, 2, 2, 8, 8, 5, 1, CA, ZZ, 2, 0, LY_PADDED, 0},
        {"bw_ragged_tail", 3, 2, 2, 4, 4, 5, 0, NC, CO, 1, 0, LY_COLMAJOR, 0},
        {"bw_long", 1, 1, 1, 4, 4, 260, 1, CA, CO, 0, 0, LY_CONTIG, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) {
        run_backward(&cs[i], ATTN_F64);
        run_backward(&cs[i], ATTN_F32);
    }
}
END_TEST

/*
 * Extreme logits: every score exactly -1e9 (f32, the padding idiom) or
 * -1e20 (f64), so that each row's lse in the dtype has lost log l. Uneven blocks make
 * the forward's merge weigh pieces of different sizes; the backward must still give the
 * uniform softmax's gradient (ref_sdpa_backward, double) on every rank.
 */
START_TEST(ring_extreme_logits) {
    static const rcase cs[] = {
        {"extreme_uneven", 1, 2, 2, 2, 3, 5, 1, NC, CO, 0, 1.0, LY_CONTIG, 1},
        {"extreme_causal", 1, 2, 1, 2, 3, 6, 1, CA, ZZ, 0, 1.0, LY_PADDED, 1},
        {"extreme_ragged", 2, 2, 2, 2, 2, 5, 0, NC, CO, 1, 1.0, LY_CONTIG, 1},
    };
    static const rcase cs64[] = {
        {"extreme64_uneven", 1, 2, 2, 2, 3, 5, 1, NC, CO, 0, 1.0, LY_CONTIG, 2},
        {"extreme64_causal", 1, 2, 1, 2, 3, 6, 1, CA, ZZ, 0, 1.0, LY_PADDED, 2},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) {
        run_case(&cs[i], ATTN_F32);
        run_backward(&cs[i], ATTN_F32);
        run_backward(&cs[i], ATTN_F64);
    }
    for (size_t i = 0; i < sizeof cs64 / sizeof cs64[0]; ++i) {
        run_case(&cs64[i], ATTN_F64);
        run_backward(&cs64[i], ATTN_F64);
    }
}
END_TEST

/* Only some gradients wanted (NULL ones are skipped); the workspace query and its size. */
START_TEST(ringbw_partial) {
    static const rcase c = {"bw_partial", 1, 2, 2, 4, 4, 4, 1, CA, ZZ, 0, 0, LY_CONTIG, 0};
    problem p;
    problem_make(&c, ATTN_F64, &p);
    attn_ring_opts ro = {.causal = CA, .layout = ZZ, .lse = &p.ll.v};
    assert_status_all(
        attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v, NULL, 0),
        ATTN_OK, "forward");
    uint64_t seed = 5;
    sd_t dout = sd_make(ATTN_F64, p.ol.v.shape, LY_CONTIG, &seed, 1.0);
    sd_t all[3], some[3];
    const sd_t *loc[3] = {&p.ql, &p.kl, &p.vl};
    for (int i = 0; i < 3; ++i) {
        all[i] = sd_zeros(ATTN_F64, 4, loc[i]->v.shape);
        some[i] = sd_zeros(ATTN_F64, 4, loc[i]->v.shape);
    }
    size_t need =
        attn_ring_sdpa_backward_workspace_size(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro);
    assert_all(need > 0, "backward workspace size");
    char *w = malloc(need);
    attn_status s =
        attn_ring_sdpa_backward(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v,
                                &p.ll.v, &dout.v, &all[0].v, &all[1].v, &all[2].v, w, need);
    assert_status_all(s, ATTN_OK, "all gradients, caller workspace");
    s = attn_ring_sdpa_backward(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v,
                                &p.ll.v, &dout.v, NULL, &some[1].v, NULL, w, need);
    assert_status_all(s, ATTN_OK, "dk only");
    snap s0 = snap_take(&some[0].v);
    s = attn_ring_sdpa_backward(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v,
                                &p.ll.v, &dout.v, &some[0].v, NULL, &some[2].v, w,
                                rank == 0 ? need - 1 : need);
    assert_status_all(s, ATTN_EWORKSPACE, "one byte short on rank 0");
    assert_all(snap_same(&s0), "dq untouched");
    s = attn_ring_sdpa_backward(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v,
                                &p.ll.v, &dout.v, &some[0].v, NULL, &some[2].v, w, need);
    assert_status_all(s, ATTN_OK, "dq and dv");
    int64_t id[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int i = 0; i < 3; ++i)
        assert_close_all(worst_rows(&some[i].v, &all[i].v, id, 0, 0), "partial = all", c.name,
                         ATTN_F64);
    free(w);
    for (int i = 0; i < 3; ++i) {
        sd_free(&all[i]);
        sd_free(&some[i]);
    }
    sd_free(&dout);
    problem_free(&p);
}
END_TEST

/* Backward errors: every rank gets the status; the gradients are untouched. */
START_TEST(ringbw_errors) {
    problem p;
    problem_make(&err_case, ATTN_F64, &p);
    attn_ring_opts ro = {.causal = CA};
    sd_t dq = sd_zeros(ATTN_F64, 4, p.ql.v.shape), dk = sd_zeros(ATTN_F64, 4, p.kl.v.shape);
    sd_t dv = sd_zeros(ATTN_F64, 4, p.vl.v.shape);
    int last = nranks - 1;
    for (int e = 0; e < 4; ++e) {
        const attn_view *lse = &p.ll.v, *dout = &p.ol.v; /* values do not matter here */
        attn_view *g[3] = {&dq.v, &dk.v, &dv.v};
        attn_view bad;
        attn_status want = ATTN_EINVAL;
        if (e == 0 && rank == last)
            lse = NULL; /* lse missing */
        if (e == 1) {
            want = ATTN_EALIAS;
            if (rank == 0)
                g[1] = &p.kl.v; /* dk is k itself */
        }
        if (e == 2) {
            want = ATTN_ESHAPE;
            if (rank == last) {
                bad = dv.v;
                bad.shape[3] -= 1;
                g[2] = &bad;
            }
        }
        if (e == 3) {
            want = ATTN_EALIAS;
            if (rank == 0)
                g[2] = &dk.v; /* dv is dk (same shapes here: D == Dv) */
        }
        snap sq = snap_take(&dq.v), sk = snap_take(&dk.v), sv = snap_take(&dv.v);
        attn_status s = attn_ring_sdpa_backward(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro,
                                                &p.ol.v, lse, dout, g[0], g[1], g[2], NULL, 0);
        assert_status_all(s, want, "backward error");
        int same = snap_same(&sq) & snap_same(&sk) & snap_same(&sv);
        assert_all(same, "gradients untouched");
    }
    sd_free(&dq);
    sd_free(&dk);
    sd_free(&dv);
    problem_free(&p);
}
END_TEST

/* ---- attention variants at global positions ---------------------------------------- */

/*
 * Window, softcap, ALiBi and sinks (each variant kind alone, and all at once), both
 * layouts, causal and not, uneven blocks: the ring's out, lse, and the backward's dq,
 * dk, dv and dsinks equal attn_sdpa and attn_sdpa_backward over the whole sequence
 * with the same options (whose variants are checked against the independent float64
 * fixtures in test_variants).
 */
static void run_variant(const rcase *c, int kind, attn_dtype dt) {
    problem p;
    problem_make(c, dt, &p);
    int64_t n = p.n, Tr = p.Tr, H = c->H;
    uint64_t seed = 0xabu + (uint64_t)n + (uint64_t)kind, junk = 5 + (uint64_t)rank;
    sd_t al = sd_zeros(dt, 1, (int64_t[]){H}), sk = sd_zeros(dt, 1, (int64_t[]){H});
    sd_t ds = sd_zeros(dt, 1, (int64_t[]){H}), dsr = sd_zeros(dt, 1, (int64_t[]){H});
    attn_alibi_slopes(&al.v, 0);
    tu_fill(&sk.v, &seed, 2.0); /* same on every rank: the seed is */
    attn_sdpa_opts so = {.scale = c->scale,
                         .causal = c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE};
    attn_ring_opts ro = {.scale = c->scale, .causal = c->causal, .layout = c->layout,
                         .lse = &p.ll.v};
    if (kind == 0 || kind == 4)
        so.window = ro.window = true, so.window_left = ro.window_left = 5,
        so.window_right = ro.window_right = c->causal ? 0 : 3;
    if (kind == 1 || kind == 4)
        so.softcap = ro.softcap = 1.5;
    if (kind == 2 || kind == 4)
        so.alibi = ro.alibi = &al.v;
    if (kind == 3 || kind == 4)
        so.sinks = ro.sinks = &sk.v;
    sd_t out = sd_zeros(dt, 4, (int64_t[]){c->B, H, n, c->Dv});
    sd_t lse = sd_zeros(dt, 3, (int64_t[]){c->B, H, n});
    sd_t dout = sd_make(dt, (int64_t[]){c->B, H, n, c->Dv}, LY_CONTIG, &seed, 1.0);
    so.lse = &lse.v;
    ck_assert_int_eq(attn_sdpa(&p.q.v, &p.k.v, &p.v.v, &so, &out.v, NULL, 0), ATTN_OK);
    so.lse = NULL;
    attn_status s =
        attn_ring_sdpa(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v, NULL, 0);
    char nm[96];
    snprintf(nm, sizeof nm, "%s, variant %d", c->name, kind);
    assert_status_all(s, ATTN_OK, nm);
    double rt = TU_RTOL(dt), at = TU_ATOL(dt);
    assert_close_all(worst_rows(&p.ol.v, &out.v, p.map, rt, at), "out vs attn_sdpa", nm, dt);
    assert_close_all(worst_rows(&p.ll.v, &lse.v, p.map, rt, at), "lse vs attn_sdpa", nm, dt);
    /* the backward, dsinks summed over every rank's rows */
    sd_t g[3], gl[3];
    const sd_t *in[3] = {&p.q, &p.k, &p.v}, *loc[3] = {&p.ql, &p.kl, &p.vl};
    for (int i = 0; i < 3; ++i) {
        g[i] = sd_zeros(dt, 4, in[i]->v.shape);
        gl[i] = sd_zeros(dt, 4, loc[i]->v.shape);
    }
    so.dsinks = so.sinks ? &ds.v : NULL;
    ck_assert_int_eq(attn_sdpa_backward(&p.q.v, &p.k.v, &p.v.v, &so, &out.v, &lse.v, &dout.v,
                                        &g[0].v, &g[1].v, &g[2].v, NULL, 0),
                     ATTN_OK);
    sd_t doutl = local_rows(&dout.v, p.map, Tr, LY_CONTIG, &junk);
    ro.dsinks = ro.sinks ? &dsr.v : NULL;
    s = attn_ring_sdpa_backward(MPI_COMM_WORLD, &p.ql.v, &p.kl.v, &p.vl.v, &ro, &p.ol.v,
                                &p.ll.v, &doutl.v, &gl[0].v, &gl[1].v, &gl[2].v, NULL, 0);
    assert_status_all(s, ATTN_OK, nm);
    static const char *names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i)
        assert_close_all(worst_rows(&gl[i].v, &g[i].v, p.map, GRTOL(dt), GATOL(dt)), names[i],
                         nm, dt);
    if (ro.sinks) {
        int ok = 1;
        for (int64_t h = 0; h < H; ++h) {
            double a = tu_get(&dsr.v, &h), b = tu_get(&ds.v, &h);
            ok &= fabs(a - b) <= GATOL(dt) + GRTOL(dt) * fabs(b);
        }
        assert_all(ok, "dsinks vs attn_sdpa_backward");
    }
    for (int i = 0; i < 3; ++i)
        sd_free(&g[i]), sd_free(&gl[i]);
    sd_t *all[] = {&al, &sk, &ds, &dsr, &out, &lse, &dout, &doutl};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        sd_free(all[i]);
    problem_free(&p);
}

START_TEST(ring_variants) {
    static const rcase cs[] = {
        {"variants causal zigzag", 2, 4, 2, 4, 3, 9, 1, CA, ZZ, 0, 0, LY_CONTIG, 0},
        {"variants causal contiguous", 1, 2, 1, 4, 4, 7, 0, CA, CO, 0, 0, LY_BTHD, 0},
        {"variants open", 1, 2, 2, 4, 4, 6, 2, NC, CO, 0, 0, LY_CONTIG, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; ++i)
        for (int kind = 0; kind < 5; ++kind) {
            run_variant(&cs[i], kind, ATTN_F64);
            run_variant(&cs[i], kind, ATTN_F32);
        }
}
END_TEST

static Suite *ring_suite(void) {
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("attn_ring_sdpa");
    tcase_add_test(tc, ring_noncausal);
    tcase_add_test(tc, ring_causal);
    tcase_add_test(tc, ring_gqa);
    tcase_add_test(tc, ring_uneven);
    tcase_add_test(tc, ring_zigzag);
    tcase_add_test(tc, ring_ragged);
    tcase_add_test(tc, ring_strided);
    tcase_add_test(tc, ring_long);
    tcase_add_test(tc, ring_skip_future);
    tcase_add_test(tc, ring_err_local);
    tcase_add_test(tc, ring_err_across);
    tcase_add_test(tc, ring_err_mpi);
    tcase_add_test(tc, ring_workspace);
    tcase_add_test(tc, ring_empty_null_data);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    TCase *tb = tcase_create("attn_ring_sdpa_backward");
    tcase_add_test(tb, ringbw_cases);
    tcase_add_test(tb, ring_extreme_logits);
    tcase_add_test(tb, ringbw_partial);
    tcase_add_test(tb, ringbw_errors);
    tcase_add_test(tb, ring_variants);
    tcase_set_timeout(tb, 300);
    suite_add_tcase(s, tb);
    TCase *tw = tcase_create("attn_ring_sdpa_workspace_size");
    tcase_add_test(tw, ringws_invalid);
    suite_add_tcase(s, tw);
    return s;
}

/*
 * tu_run with MPI around it: no fork (CK_FORK=no is also set by meson: a forked MPI
 * process cannot talk to its peers), TAP from rank 0 only (the other ranks assert the
 * same agreed values), and one exit status for all ranks.
 */
int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    SRunner *sr = srunner_create(ring_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    if (rank != 0)
        srunner_set_tap(sr, "/dev/null");
    srunner_run_all(sr, rank == 0 ? CK_ENV : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
