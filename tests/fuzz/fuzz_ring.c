/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: attn_ring_sdpa on 2 (or more) MPI ranks, run as
 *   mpirun -np 2 fuzz_ring [libFuzzer flags] corpus
 * Rank 0 runs libFuzzer; for every input it broadcasts the bytes, and every
 * other rank, which never leaves LLVMFuzzerInitialize, runs the same input.
 * Every rank decodes the views of EVERY rank from the bytes into its own arena,
 * filled identically, so each rank can build the whole sequence for the naive
 * reference (ref_sdpa over the n = T_0 + T_1 global tokens, kv_len as a keep
 * mask, the causal rule over global positions) before the call, and passes
 * only its own views to the call. The contract is fuzz_common.h's on every
 * rank (refused: nothing written; accepted: only the outputs, matching the
 * reference) plus ring.h's: every rank returns the same status.
 */
#include <attn/ring.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include "../ref/ref.h"
#include "fuzz_common.h"

#define NR 2 /* ranks the inputs describe: run it with mpirun -np 2 */

static int rank, nranks;
static long n_checked, n_refused; /* rank 0's tally, printed at exit (a vacuous run shows) */

/* ---- rank != 0: crash reports keep the input ------------------------------- */

/* The input being run, and where a crash on a worker rank saves it (libFuzzer on
   rank 0 only saves its own crashes; a worker's abort just ends the job). */
static uint8_t *cur;
static size_t cur_n;
static char crash_path[4096];

static void save_input(void) {
    int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, cur, cur_n);
    (void)w;
    close(fd);
}
static void on_signal(int sig) {
    save_input();
    signal(sig, SIG_DFL);
    raise(sig);
}
static void on_death(void) { save_input(); }

static int run_one(const uint8_t *data, size_t size);

/* Rank 0's exit (libFuzzer's exit after -runs / -max_total_time): tell the workers to stop. */
static void stop_workers(void) {
    uint64_t n = UINT64_MAX;
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin)
        return;
    fprintf(stderr,
            "fuzz_ring: %ld calls accepted and checked against the reference, %ld refused\n",
            n_checked, n_refused);
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    MPI_Finalize();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != NR) {
        fprintf(stderr, "fuzz_ring: run me with mpirun -np %d\n", NR);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Open MPI's signal handlers replace libFuzzer's (which would save rank 0's input):
       every rank saves the input it was running itself, then dies as it would have */
    const char *prefix = "./";
    for (int i = 1; i < *argc; ++i)
        if (strncmp((*argv)[i], "-artifact_prefix=", 17) == 0)
            prefix = (*argv)[i] + 17;
    snprintf(crash_path, sizeof crash_path, "%scrash-on-rank%d", prefix, rank);
    signal(SIGABRT, on_signal);
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
#ifdef FZ_ASAN
    __sanitizer_set_death_callback(on_death); /* ASan and UBSan reports */
#endif
    if (rank == 0) {
        atexit(stop_workers);
        return 0;
    }
    for (;;) {
        uint64_t n;
        MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        if (n == UINT64_MAX)
            break;
        uint8_t *buf = malloc(n ? n : 1);
        MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
        cur = buf;
        cur_n = n;
        run_one(buf, n);
        cur = NULL;
        free(buf);
    }
    MPI_Finalize();
    exit(0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t n = size;
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast((void *)data, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
    cur = (uint8_t *)data;
    cur_n = size;
    return run_one(data, size);
}

/* ---- decoding one call ------------------------------------------------------ */

/* Powers of two keep every score exact in both dtypes (the arena holds multiples of 1/8):
   2^30 ~ 1e9 (the padding-bias idiom), 2^66 ~ 7e19, 2^100 ~ 1e30 are extreme logits. */
static const double scales[] = {0.0,     0.5,    1.0,      -1.0, 0.125,    3.0,       0x1p30,
                                -0x1p30, 0x1p66, -0x1p100, NAN,  INFINITY, -INFINITY, 0x1p100};

/* The scale a call uses: 0 means 1/sqrt(D) (1 for D = 0, as attn_sdpa resolves it). */
static double res_scale(double s, int64_t D) {
    return s != 0 ? s : D > 0 ? 1 / sqrt((double)D) : 1.0;
}

/* One rank's side of the call. */
typedef struct side {
    int64_t T, kvl[8];
    bool has_kvl, has_lse, bad; /* bad: a shape, dtype or option this rank alone breaks */
    attn_view q, k, v, out, lse;
    attn_ring_opts o;
} side;

/* Global position of local row t of rank r (ring.h's layouts, derived independently). */
static int64_t global_pos(const side *s, attn_ring_layout lay, int r, int64_t t) {
    if (lay != ATTN_RING_ZIGZAG) {
        int64_t off = 0;
        for (int j = 0; j < r; ++j)
            off += s[j].T;
        return off + t;
    }
    int64_t first = (s[r].T + 1) / 2, chunk = t < first ? r : 2 * NR - 1 - r, off = 0;
    for (int64_t ch = 0; ch < chunk; ++ch) {
        int owner = ch < NR ? (int)ch : (int)(2 * NR - 1 - ch);
        int64_t len = s[owner].T, a = (len + 1) / 2;
        off += ch < NR ? a : len - a;
    }
    return off + (t < first ? t : t - first);
}

/* Reads element idx of v from the arena as double (the reference's inputs). */
static double at(const attn_view *v, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t idx[4] = {a, b, c, d};
    return fz_get(v, idx);
}

/* Puts x at element (b, 0, t, 0) of v unless that byte lies in another argument or is
   also another element of v (a broadcast or overlapping view). */
static void poison_at(const side *s, attn_view *v, int64_t b, int64_t t, double x) {
    memset(fz_A.wmask, 0, fz_bytes());
    if (!fz_mark(v))
        return;
    unsigned char *p =
        (unsigned char *)v->data + (b * v->stride[0] + t * v->stride[2]) * fz_es(v->dtype);
    for (int r = 0; r < NR; ++r) {
        const attn_view *all[5] = {&s[r].q, &s[r].k, &s[r].v, &s[r].out, &s[r].lse};
        for (int i = 0; i < 5; ++i) {
            __int128 lo, hi;
            if (all[i] == v || (i == 4 && !s[r].has_lse) || !fz_span(all[i], &lo, &hi))
                continue;
            __int128 at_ = (__int128)(p - fz_mem());
            if (at_ + fz_es(v->dtype) > lo && at_ < hi)
                return;
        }
    }
    if (v->dtype == ATTN_F64)
        memcpy(p, &x, 8);
    else {
        float y = (float)x;
        memcpy(p, &y, 4);
    }
}

static int run_one(const uint8_t *data, size_t size) {
    fz f = {data, size};
    attn_dtype dt = fz_bool(&f) ? ATTN_F64 : ATTN_F32;
    int64_t B = fz_extent(&f), Hkv = fz_extent(&f) % 4, group = 1 + fz_below(&f, 3);
    int64_t D = fz_extent(&f), Dv = fz_extent(&f);
    int64_t H = Hkv * group + (fz_u8(&f) >= 250); /* sometimes H % Hkv != 0 */
    attn_ring_opts o0 = {.scale = scales[fz_below(&f, 14)],
                         .causal = (attn_causal)fz_below(&f, 4),
                         .layout = (attn_ring_layout)fz_below(&f, 3),
                         .threads = (int)fz_below(&f, 3) - (fz_u8(&f) == 2)};
    uint8_t opt = fz_u8(&f);
    side s[NR];
    memset(s, 0, sizeof s);
    for (int r = 0; r < NR; ++r)
        s[r].T = fz_extent(&f);
    for (int r = 0; r < NR; ++r) {
        side *x = &s[r];
        int64_t b = B, h = H, hk = Hkv, d = D, dv = Dv, dvo = Dv;
        uint8_t c = fz_u8(&f); /* this rank alone gets a different extent */
        if (c >= 248) {
            int64_t *e[] = {&b, &h, &hk, &d, &dv, &dvo, &x->T, &x->T};
            *e[c - 248] = (int64_t)((uint64_t)*e[c - 248] + 1);
            x->bad = c < 254; /* another T is just another valid block length */
        }
        int64_t sq[4] = {b, h, x->T, d}, sk[4] = {b, hk, x->T, d}, sv[4] = {b, hk, x->T, dv};
        int64_t so[4] = {b, h, x->T, dvo};
        if (!fz_view(&f, fz_dtype(&f, dt), 4, sq, &x->q) ||
            !fz_view(&f, fz_dtype(&f, dt), 4, sk, &x->k) ||
            !fz_view(&f, fz_dtype(&f, dt), 4, sv, &x->v) ||
            !fz_view(&f, fz_dtype(&f, dt), 4 - (fz_u8(&f) == 255), so, &x->out))
            return 0;
        x->bad = x->bad || x->q.dtype != dt || x->k.dtype != dt || x->v.dtype != dt ||
                 x->out.dtype != dt || x->out.ndim != 4;
        if (opt & 1) {
            x->has_lse = true;
            int nd = 3 + (fz_u8(&f) == 255);
            attn_dtype ld = fz_dtype(&f, dt);
            if (!fz_view(&f, ld, nd, sq, &x->lse))
                return 0;
            x->bad = x->bad || ld != dt || nd != 3;
        }
        x->o = o0;
        x->o.lse = x->has_lse ? &x->lse : NULL;
        c = fz_u8(&f); /* this rank alone gets a different option */
        if (c >= 250) {
            if (c == 250)
                x->o.scale = x->o.scale == 1.0 ? 0.5 : 1.0;
            else if (c == 251)
                x->o.causal = x->o.causal ? ATTN_CAUSAL_NONE : ATTN_CAUSAL_TOP_LEFT;
            else if (c == 252)
                x->o.layout = x->o.layout ? ATTN_RING_CONTIGUOUS : ATTN_RING_ZIGZAG;
            else
                x->o.threads = (int)c - 253; /* 0..2: another thread count is fine */
            /* a scale is the same when it resolves to the same value (0 -> 1/sqrt(D)) */
            x->bad = x->bad ||
                     (c == 250 ? res_scale(x->o.scale, D) != res_scale(o0.scale, D) : c < 253);
        }
        if ((opt & 2) && B > 0 && B <= 8) {
            x->has_kvl = true;
            for (int64_t i = 0; i < B; ++i) {
                int64_t t = x->T;
                x->kvl[i] = (int64_t)fz_below(&f, (uint32_t)(t >= 0 && t < 250 ? t + 2 : 3)) -
                            (fz_u8(&f) == 3);
                x->bad = x->bad || x->kvl[i] < 0 || x->kvl[i] > t;
            }
            x->o.kv_len = x->kvl;
        }
    }
    MPI_Comm comm = fz_u8(&f) == 255 ? MPI_COMM_NULL : MPI_COMM_WORLD; /* on every rank */

    /* our reading of ring.h's contract, over all ranks */
    bool ok = true, alias = false, big = false;
    for (int r = 0; r < NR; ++r) {
        side *x = &s[r];
        attn_view *vs[5] = {&x->q, &x->k, &x->v, &x->out, x->has_lse ? &x->lse : NULL};
        for (int i = 0; i < 5; ++i)
            ok = ok && (!vs[i] || attn_view_check(vs[i]) == ATTN_OK);
        ok = ok && !x->bad;
        ok = ok && (Hkv > 0 ? H % Hkv == 0 : H == 0);
        ok = ok && (unsigned)x->o.causal <= ATTN_CAUSAL_BOTTOM_RIGHT &&
             (unsigned)x->o.layout <= ATTN_RING_ZIGZAG && x->o.threads >= 0 &&
             isfinite(x->o.scale);
        for (int i = 3; i < 5; ++i)
            for (int j = 0; vs[i] && j < 5; ++j)
                alias = alias || (j != i && vs[j] && fz_overlap(vs[i], vs[j]));
        /* the packed K/V block is one MPI message; D and Dv reach attn_sdpa */
        double blk = (double)(B > 0 ? B : 0) * (double)(Hkv > 0 ? Hkv : 0) *
                     (double)(x->T > 0 ? x->T : 0) *
                     ((double)(D > 0 ? D : 0) + (double)(Dv > 0 ? Dv : 0));
        big = big || blk > INT_MAX || D > INT_MAX || Dv > INT_MAX || x->T > INT_MAX ||
              B > INT_MAX || H > INT_MAX;
    }
    ok = ok && comm != MPI_COMM_NULL;
    int64_t n = (int64_t)((uint64_t)s[0].T + (uint64_t)s[1].T); /* used only when valid */
    double nd = (double)(s[0].T > 0 ? s[0].T : 0) + (double)(s[1].T > 0 ? s[1].T : 0);
    double cost = (double)(B > 0 ? B : 0) * (double)(H > 0 ? H : 0) * nd * nd *
                  ((double)(D > 0 ? D : 0) + (double)(Dv > 0 ? Dv : 0) + 1.0);
    if (ok && !big && cost > 65536)
        return 0; /* valid but too slow for the reference */
    if (ok && !alias && big)
        return 0; /* a valid call on extents past INT_MAX: ERANGE or a huge computation */
    side *me = &s[rank];
    me->o.lse = me->has_lse ? &me->lse : NULL;
    me->o.kv_len = me->has_kvl ? me->kvl : NULL;

    size_t need = attn_ring_sdpa_workspace_size(comm, &me->q, &me->k, &me->v, &me->o);
    fz_work w;
    bool got = fz_work_get(&f, need, &w);
    bool misaligned = got && need > 0 && !w.short_by_one && fz_u8(&f) == 17;
    void *wp = misaligned ? (char *)w.ptr + 4 : w.ptr;
    size_t wsize = misaligned ? w.size - 4 : w.size;
    int flags[2] = {!got, w.short_by_one || misaligned}, any[2];
    MPI_Allreduce(flags, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any[0]) { /* some rank could not get its workspace: every rank skips */
        fz_work_free(&w);
        return 0;
    }
    fz_fill(&f, dt); /* the same bytes on every rank */
    bool expect_ok = ok && !alias;
    bool nan_masked = expect_ok && (opt & 4);
    attn_causal causal =
        me->o.causal == ATTN_CAUSAL_NONE ? ATTN_CAUSAL_NONE : ATTN_CAUSAL_TOP_LEFT;
    attn_ring_layout lay = me->o.layout;
    if (nan_masked) /* NaN and inf at keys kv_len masks: they must never show */
        for (int r = 0; r < NR; ++r)
            for (int64_t b = 0; s[r].has_kvl && b < B && Hkv > 0; ++b)
                if (s[r].kvl[b] < s[r].T) {
                    if (D > 0)
                        poison_at(s, &s[r].k, b, s[r].T - 1, NAN);
                    if (Dv > 0)
                        poison_at(s, &s[r].v, b, s[r].T - 1, fz_bool(&f) ? NAN : INFINITY);
                }

    /* the reference on the whole sequence, read from every rank's views in our arena */
    double *want = NULL, *want_l = NULL, *qg = NULL, *kg = NULL, *vg = NULL;
    unsigned char *keep = NULL;
    bool nothing = ok && fz_numel(&me->out) == 0 && (!me->has_lse || fz_numel(&me->lse) == 0);
    if (expect_ok && n > 0 && B > 0 && H > 0) {
        size_t nq = (size_t)(B * H * n), nk = (size_t)(B * Hkv * n);
        qg = malloc(sizeof(double) * (nq * (size_t)D + 1));
        kg = malloc(sizeof(double) * (nk * (size_t)D + 1));
        vg = malloc(sizeof(double) * (nk * (size_t)Dv + 1));
        want = malloc(sizeof(double) * (nq * (size_t)Dv + 1));
        want_l = malloc(sizeof(double) * (nq + 1));
        keep = malloc((size_t)(B * n * n) + 1);
        for (int r = 0; r < NR; ++r)
            for (int64_t b = 0; b < B; ++b)
                for (int64_t t = 0; t < s[r].T; ++t) {
                    int64_t g = global_pos(s, lay, r, t);
                    for (int64_t h = 0; h < H; ++h)
                        for (int64_t d = 0; d < D; ++d)
                            qg[((b * H + h) * n + g) * D + d] = at(&s[r].q, b, h, t, d);
                    for (int64_t h = 0; h < Hkv; ++h) {
                        for (int64_t d = 0; d < D; ++d)
                            kg[((b * Hkv + h) * n + g) * D + d] = at(&s[r].k, b, h, t, d);
                        for (int64_t d = 0; d < Dv; ++d)
                            vg[((b * Hkv + h) * n + g) * Dv + d] = at(&s[r].v, b, h, t, d);
                    }
                    bool vis = !s[r].has_kvl || t < s[r].kvl[b];
                    for (int64_t i = 0; i < n; ++i)
                        keep[(b * n + i) * n + g] = vis;
                }
        attn_view Q, K, V, M, W, L;
        attn_view_init(&Q, ATTN_F64, qg, 4, (int64_t[]){B, H, n, D});
        attn_view_init(&K, ATTN_F64, kg, 4, (int64_t[]){B, Hkv, n, D});
        attn_view_init(&V, ATTN_F64, vg, 4, (int64_t[]){B, Hkv, n, Dv});
        attn_view_init(&M, ATTN_U8, keep, 4, (int64_t[]){B, 1, n, n});
        attn_view_init(&W, ATTN_F64, want, 4, (int64_t[]){B, H, n, Dv});
        attn_view_init(&L, ATTN_F64, want_l, 3, (int64_t[]){B, H, n});
        attn_sdpa_opts so = {.scale = me->o.scale, .causal = causal, .keep = &M};
        ref_sdpa(&Q, &K, &V, &so, &W, NULL, &L);
    }

    const attn_view *args[5] = {&me->q, &me->k, &me->v, &me->out, me->o.lse};
    const attn_view *outs[2] = {&me->out, me->o.lse};
    fz_arm(args, 5);
    attn_status st = attn_ring_sdpa(comm, &me->q, &me->k, &me->v, &me->o, &me->out, wp, wsize);
    fz_disarm();
    int sts[2] = {(int)st, -(int)st}, range[2];
    MPI_Allreduce(sts, range, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    FZ_REQUIRE(range[0] == -range[1], "ranks disagree: statuses from %s to %s (rank %d: %s)",
               attn_status_name((attn_status)-range[1]),
               attn_status_name((attn_status)range[0]), rank, attn_status_name(st));
    fz_check_untouched(st, outs, 2, "attn_ring_sdpa");
    if (st == ATTN_OK) {
        if (!ok && getenv("FZ_RING_DEBUG"))
            for (int r = 0; r < NR; ++r) {
                fprintf(
                    stderr,
                    "rank %d side %d bad %d T %lld kvl %d scale %g causal %d lay %d thr %d\n",
                    rank, r, s[r].bad, (long long)s[r].T, s[r].has_kvl, s[r].o.scale,
                    s[r].o.causal, s[r].o.layout, s[r].o.threads);
                fz_print("q", &s[r].q), fz_print("k", &s[r].k), fz_print("v", &s[r].v),
                    fz_print("out", &s[r].out);
                if (s[r].has_lse)
                    fz_print("lse", &s[r].lse);
                fprintf(stderr, "checks q %d k %d v %d out %d lse %d H %lld Hkv %lld\n",
                        attn_view_check(&s[r].q), attn_view_check(&s[r].k),
                        attn_view_check(&s[r].v), attn_view_check(&s[r].out),
                        s[r].has_lse ? attn_view_check(&s[r].lse) : -1, (long long)H,
                        (long long)Hkv);
            }
        FZ_REQUIRE(ok, "attn_ring_sdpa accepted an invalid call");
        FZ_REQUIRE(!alias, "attn_ring_sdpa accepted outputs that alias an argument");
        FZ_REQUIRE(!any[1], "attn_ring_sdpa accepted a workspace short or misaligned");
        double rtol = dt == ATTN_F64 ? 1e-10 : 2e-4, atol = dt == ATTN_F64 ? 1e-12 : 1e-5;
        n_checked += !nothing && want;
        if (!nothing && want) {
            int64_t idx[4];
            for (idx[0] = 0; idx[0] < B; ++idx[0])
                for (idx[1] = 0; idx[1] < H; ++idx[1])
                    for (idx[2] = 0; idx[2] < me->T; ++idx[2]) {
                        int64_t g = global_pos(s, lay, rank, idx[2]);
                        int64_t row = (idx[0] * H + idx[1]) * n + g;
                        for (idx[3] = 0; idx[3] < Dv; ++idx[3]) {
                            double gv = fz_get(&me->out, idx), wv = want[row * Dv + idx[3]];
                            FZ_REQUIRE(!isnan(gv) && fabs(gv - wv) <= atol + rtol * fabs(wv),
                                       "rank %d out[%lld,%lld,%lld,%lld] (global row %lld) "
                                       "got %.17g want %.17g",
                                       rank, (long long)idx[0], (long long)idx[1],
                                       (long long)idx[2], (long long)idx[3], (long long)g, gv,
                                       wv);
                        }
                        if (me->has_lse) {
                            double gl = fz_get(&me->lse, idx), wl = want_l[row];
                            FZ_REQUIRE(!isnan(gl) && fabs(gl - wl) <= atol + rtol * fabs(wl),
                                       "rank %d lse[%lld,%lld,%lld] got %.17g want %.17g", rank,
                                       (long long)idx[0], (long long)idx[1], (long long)idx[2],
                                       gl, wl);
                        }
                    }
        }
    } else if (expect_ok) {
        ++n_refused;
        FZ_REQUIRE(st == ATTN_ESTRIDE || (st == ATTN_EWORKSPACE && any[1]) ||
                       (st == ATTN_EINVAL && any[1]),
                   "attn_ring_sdpa refused a valid call: %s", attn_status_name(st));
    }
    n_refused += st != ATTN_OK && !expect_ok;
    free(want);
    free(want_l);
    free(qg);
    free(kg);
    free(vg);
    free(keep);
    fz_work_free(&w);
    return 0;
}
