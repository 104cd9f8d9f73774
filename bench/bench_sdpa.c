/* SPDX-License-Identifier: MIT */
/* attn-bench-sdpa: attn_sdpa forward and backward GFLOP/s beside a large s/dgemm in the same run. */
#define _POSIX_C_SOURCE 200809L
#include <attn/attn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_env.h"
#include "bench_util.h"

/* n values in [-1, 1] of dtype dt at x; *s numbers the fills, so each gets its own values */
static void fill_dt(attn_dtype dt, void *x, size_t n, unsigned *s) {
    bench_fill(x, n, dt, 1.0, (*s)++);
}

static void die(const char *what, attn_status st) {
    fprintf(stderr, "attn-bench-sdpa: %s: %s\n", what, attn_strerror(st));
    exit(1);
}

/* The n^3 attn_gemm reference of dtype dt (the BLAS's threads), its operands made once. */
typedef struct gemm_ref {
    attn_view a, b, c;
    double flop;
} gemm_ref;

static void gemm_ref_init(gemm_ref *g, attn_dtype dt, int64_t n) {
    size_t nn = (size_t)(n * n), es = attn_dtype_size(dt);
    unsigned s = 7;
    int64_t sh[2] = {n, n};
    attn_view *v[3] = {&g->a, &g->b, &g->c};
    for (int i = 0; i < 3; ++i) {
        void *x = bench_alloc64(nn * es);
        fill_dt(dt, x, nn, &s);
        attn_view_init(v[i], dt, x, 2, sh);
    }
    g->flop = 2.0 * (double)n * (double)n * (double)n;
    attn_status st = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1, &g->a, &g->b, 0, &g->c, NULL, 0);
    if (st) die("attn_gemm", st);
}

static void gemm_ref_free(gemm_ref *g) {
    free(g->a.data); free(g->b.data); free(g->c.data);
}

/* One reference call: wall seconds, CPU seconds in *cpus. */
static double gemm_ref_time(gemm_ref *g, double *cpus) {
    double t0 = bench_now(), c0 = bench_cpu_now();
    attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1, &g->a, &g->b, 0, &g->c, NULL, 0);
    *cpus = bench_cpu_now() - c0;
    return bench_now() - t0;
}

/* Median GFLOP/s (wall; CPU-second rate in *cpu_gf) of `reps` reference calls. */
static double gemm_gflops(gemm_ref *g, int reps, double *cpu_gf) {
    double t[16], tc[16];
    for (int r = 0; r < reps; ++r)
        t[r] = gemm_ref_time(g, &tc[r]);
    *cpu_gf = g->flop / bench_median(tc, reps) * 1e-9;
    return g->flop / bench_median(t, reps) * 1e-9;
}

/* One timed call: the forward, or the backward from the forward's out and lse. */
typedef struct call {
    attn_view q, k, v, o, lse, dout, dq, dk, dv;
    attn_sdpa_opts op;
    void *work;
    size_t ws;
    int bwd;
} call;

static attn_status run(call *c) {
    if (!c->bwd)
        return attn_sdpa(&c->q, &c->k, &c->v, &c->op, &c->o, c->work, c->ws);
    return attn_sdpa_backward(&c->q, &c->k, &c->v, &c->op, &c->o, &c->lse, &c->dout, &c->dq,
                              &c->dk, &c->dv, c->work, c->ws);
}

/* Median wall and process-CPU seconds of `reps` calls after one warm-up. */
/*
 * Median wall and CPU seconds of `reps` calls. With a paired reference (-p), each call
 * follows one reference gemm, and *ratio is the median over the pairs of the call's
 * time per FLOP against its gemm's, so both sides of every ratio saw the same machine.
 */
static void time_call(call *c, int reps, double flop, gemm_ref *pair, double *wall,
                      double *cpus, double *ratio, double *pair_gf) {
    attn_status st = run(c);
    if (st) die(c->bwd ? "attn_sdpa_backward" : "attn_sdpa", st);
    double t[16], tc[16], rt[16], gt[16];
    for (int r = 0; r < reps; ++r) {
        double gc;
        gt[r] = pair ? gemm_ref_time(pair, &gc) : 0;
        double t0 = bench_now(), c0 = bench_cpu_now();
        run(c);
        t[r] = bench_now() - t0;
        tc[r] = bench_cpu_now() - c0;
        rt[r] = pair ? (flop / t[r]) / (pair->flop / gt[r]) : 0;
    }
    *wall = bench_median(t, reps);
    *cpus = bench_median(tc, reps);
    *ratio = bench_median(rt, reps);
    *pair_gf = pair ? pair->flop / bench_median(gt, reps) * 1e-9 : 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: attn-bench-sdpa [-t T]... [-a tiled|mat|both] [-c 0|1|both] [-r reps]\n"
            "                       [-j threads] [-q block_q] [-k block_k] [-H heads] [-B batch]\n"
            "                       [-d f32|f64] [-m none|keep|bias|kvlen|gqa|all] [-f text|csv|json]\n"
            "                       [-n] [-b] [-p]\n"
            "  B=1, H=12, D=64, f32; default T = 256 512 ... 8192. -n: skip the s/dgemm.\n"
            "  GFLOP/s counts 4*B*H*Tq*Tk*D per call (half for causal) for every mask mode\n"
            "  (the plain call's work: keep keeps 7 of 8 keys at random, bias is a full (T, T)\n"
            "  bias, kvlen passes kv_len = T, gqa shares each K/V head among 4 query heads).\n"
            "  %%gemm: against the in-run sgemm (f32) or dgemm (f64) 2048^3; time = median of reps.\n"
            "  -p: pair every timed call with one 2048^3 gemm just before it; %%gemm is then the\n"
            "      median over the pairs (for a machine whose speed drifts during the run).\n"
            "  cpu ms: process CPU time per call; GF/cpu-s: GFLOP per CPU second (all threads).\n"
            "  -b: also time attn_sdpa_backward (dq, dk, dv; counted as 2.5x the forward).\n");
    exit(2);
}

static const char *mask_names[] = {"none", "keep", "bias", "kvlen", "gqa"};
enum { M_NONE, M_KEEP, M_BIAS, M_KVLEN, M_GQA, M_COUNT };

int main(int argc, char **argv) {
    int64_t Ts[16], nT = 0, H = 12, B = 1, D = 64, bq = 0, bk = 0;
    int algos = 3, causals = 3, reps = 5, threads = 0, do_gemm = 1, do_bwd = 0, fmt = 0, paired = 0;
    unsigned masks = 1u << M_NONE;
    attn_dtype dt = ATTN_F32;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-n")) { do_gemm = 0; continue; }
        if (!strcmp(a, "-b")) { do_bwd = 1; continue; }
        if (!strcmp(a, "-p")) { paired = 1; continue; }
        if (!v) usage();
        ++i;
        if (!strcmp(a, "-t") && nT < 16) Ts[nT++] = atoll(v);
        else if (!strcmp(a, "-a")) algos = !strcmp(v, "tiled") ? 2 : !strcmp(v, "mat") ? 1 : 3;
        else if (!strcmp(a, "-c")) causals = !strcmp(v, "0") ? 1 : !strcmp(v, "1") ? 2 : 3;
        else if (!strcmp(a, "-r")) reps = atoi(v);
        else if (!strcmp(a, "-j")) threads = atoi(v);
        else if (!strcmp(a, "-q")) bq = atoll(v);
        else if (!strcmp(a, "-k")) bk = atoll(v);
        else if (!strcmp(a, "-H")) H = atoll(v);
        else if (!strcmp(a, "-B")) B = atoll(v);
        else if (!strcmp(a, "-d")) {
            if (strcmp(v, "f32") && strcmp(v, "f64")) usage();
            dt = !strcmp(v, "f64") ? ATTN_F64 : ATTN_F32;
        } else if (!strcmp(a, "-f")) {
            fmt = !strcmp(v, "text") ? 0 : !strcmp(v, "csv") ? 1 : !strcmp(v, "json") ? 2 : -1;
            if (fmt < 0) usage();
        } else if (!strcmp(a, "-m")) {
            unsigned m = !strcmp(v, "all") ? (1u << M_COUNT) - 1 : 0;
            for (int k = 0; k < M_COUNT; ++k)
                if (!strcmp(v, mask_names[k])) m = 1u << k;
            if (!m) usage();
            masks = m;
        } else usage();
    }
    if (reps < 1 || reps > 16 || H < 1 || B < 1 || ((masks >> M_GQA) & 1 && H % 4)) usage();
    if (nT == 0)
        for (int64_t T = 256; T <= 8192; T *= 2) Ts[nT++] = T;
    const char *dname = dt == ATTN_F64 ? "f64" : "f32", *gname = dt == ATTN_F64 ? "dgemm" : "sgemm";
    size_t es = attn_dtype_size(dt);
    bench_env env;
    bench_env_collect(&env);
    FILE *info = fmt ? stderr : stdout; /* CSV and JSON: the data alone on stdout */
    bench_env_print(info, "", &env);
    bench_env_kernel_note(info, "", &env);
    if (paired && !do_gemm) usage();
    gemm_ref ref;
    if (do_gemm) gemm_ref_init(&ref, dt, 2048);
    double peak_cpu = 0, peak = do_gemm ? gemm_gflops(&ref, reps, &peak_cpu) : 0;
    if (do_gemm)
        fprintf(info, "%s 2048^3 (attn_gemm, BLAS threads): %.1f GFLOP/s wall, %.1f per CPU "
                "second (medians of %d)%s\n", gname, peak, peak_cpu, reps,
                paired ? "; %gemm per row: paired with one gemm before each call (-p)" : "");
    if (fmt == 0)
        printf("%6s %6s %6s %5s %5s %10s %9s %7s %10s %9s\n", "T", "algo", "causal", "mask",
               "dtype", "ms", "GFLOP/s", "%gemm", "cpu ms", "GF/cpu-s");
    else if (fmt == 1)
        printf("T,algo,pass,causal,mask,dtype,ms,gflops,gemm_gflops,pct_gemm,cpu_ms,"
               "gflops_per_cpu_s,blas_core,blas_threading\n");
    else
        printf("{\"gemm\":\"%s\",\"gemm_gflops\":%.2f,\"blas_core\":\"%s\",\"blas_threading\":"
               "\"%s\",\"cpu\":\"%s\",\"rows\":[", gname, peak, env.blas_core,
               env.blas_threading, env.cpu);
    int nrow = 0;
    for (int64_t ti = 0; ti < nT; ++ti) {
        int64_t T = Ts[ti];
        for (int mk = 0; mk < M_COUNT; ++mk) {
            if (!((masks >> mk) & 1)) continue;
            int64_t Hkv = mk == M_GQA ? H / 4 : H;
            int64_t sh[4] = {B, H, T, D}, shk[4] = {B, Hkv, T, D};
            size_t n = (size_t)(B * H * T * D), nk = (size_t)(B * Hkv * T * D);
            void *buf[8];
            call c = {0};
            attn_view *views[8] = {&c.q, &c.k, &c.v, &c.o, &c.dout, &c.dq, &c.dk, &c.dv};
            int kv[8] = {0, 1, 1, 0, 0, 0, 1, 1};
            unsigned s = 1;
            for (int i = 0; i < 8; ++i) {
                buf[i] = bench_alloc64((kv[i] ? nk : n) * es);
                fill_dt(dt, buf[i], kv[i] ? nk : n, &s);
                attn_view_init(views[i], dt, buf[i], 4, kv[i] ? shk : sh);
            }
            void *lse = malloc((size_t)(B * H * T) * es), *mbuf = NULL;
            int64_t *kvl = NULL;
            attn_view_init(&c.lse, dt, lse, 3, sh);
            attn_view mview;
            int64_t msh[4] = {1, 1, T, T};
            if (mk == M_KEEP) {
                unsigned char *m = mbuf = malloc((size_t)(T * T));
                for (int64_t i = 0; i < T * T; ++i) {
                    s = s * 1664525u + 1013904223u;
                    m[i] = (s >> 24) % 8 != 0;
                }
                attn_view_init(&mview, ATTN_U8, m, 4, msh);
            } else if (mk == M_BIAS) {
                mbuf = malloc((size_t)(T * T) * es);
                fill_dt(dt, mbuf, (size_t)(T * T), &s);
                attn_view_init(&mview, dt, mbuf, 4, msh);
            } else if (mk == M_KVLEN) {
                kvl = malloc((size_t)B * sizeof *kvl);
                for (int64_t b = 0; b < B; ++b) kvl[b] = T;
            }
            for (int alg = 1; alg <= 2; ++alg) {
                if (!(algos & alg)) continue;
                for (int cz = 0; cz < 2; ++cz) {
                    if (!(causals & (1 << cz))) continue;
                    attn_sdpa_opts op = {.algo = alg == 1 ? ATTN_ALGO_MATERIALIZED : ATTN_ALGO_TILED,
                                         .causal = cz ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE,
                                         .threads = threads, .block_q = bq, .block_k = bk,
                                         .lse = &c.lse, .kv_len = kvl,
                                         .keep = mk == M_KEEP ? &mview : NULL,
                                         .bias = mk == M_BIAS ? &mview : NULL};
                    c.op = op;
                    for (c.bwd = 0; c.bwd <= do_bwd; ++c.bwd) {
                        c.ws = c.bwd ? attn_sdpa_backward_workspace_size(&c.q, &c.k, &c.v, &op)
                                     : attn_sdpa_workspace_size(&c.q, &c.k, &c.v, &op);
                        c.work = bench_alloc64(c.ws);
                        double sec, csec, ratio, pgf;
                        double flop = 4.0 * (double)B * (double)H * (double)T * (double)T *
                                      (double)D * (cz ? 0.5 : 1) * (c.bwd ? 2.5 : 1);
                        time_call(&c, reps, flop, paired ? &ref : NULL, &sec, &csec, &ratio,
                                  &pgf);
                        double gf = flop / sec * 1e-9, pct = peak > 0 ? 100 * gf / peak : 0.0;
                        double rgf = peak; /* the reference this row's % is against */
                        if (paired) pct = 100 * ratio, rgf = pgf;
                        const char *an = alg == 1 ? "mat" : "tiled", *pn = c.bwd ? "bwd" : "fwd";
                        if (fmt == 0)
                            printf("%6lld %6s %6s %5s %5s %10.3f %9.1f %7.1f %10.3f %9.1f\n",
                                   (long long)T,
                                   alg == 1 ? (c.bwd ? "mat-bw" : "mat")
                                            : (c.bwd ? "til-bw" : "tiled"),
                                   cz ? "yes" : "no", mask_names[mk], dname, sec * 1e3, gf, pct,
                                   csec * 1e3, flop / csec * 1e-9);
                        else if (fmt == 1)
                            printf("%lld,%s,%s,%d,%s,%s,%.4f,%.2f,%.2f,%.2f,%.4f,%.2f,%s,%s\n",
                                   (long long)T, an, pn, cz, mask_names[mk], dname, sec * 1e3,
                                   gf, rgf, pct, csec * 1e3, flop / csec * 1e-9, env.blas_core,
                                   env.blas_threading);
                        else
                            printf("%s{\"T\":%lld,\"algo\":\"%s\",\"pass\":\"%s\",\"causal\":%d,"
                                   "\"mask\":\"%s\",\"dtype\":\"%s\",\"ms\":%.4f,\"gflops\":%.2f,"
                                   "\"pct_gemm\":%.2f,\"cpu_ms\":%.4f}",
                                   nrow ? "," : "", (long long)T, an, pn, cz, mask_names[mk],
                                   dname, sec * 1e3, gf, pct, csec * 1e3);
                        ++nrow;
                        fflush(stdout);
                        free(c.work);
                    }
                }
            }
            for (int i = 0; i < 8; ++i) free(buf[i]);
            free(lse);
            free(mbuf);
            free(kvl);
        }
    }
    if (fmt == 2)
        printf("]}\n");
    if (do_gemm) gemm_ref_free(&ref);
    return 0;
}
