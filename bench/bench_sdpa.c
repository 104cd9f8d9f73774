/* SPDX-License-Identifier: MIT */
/* attn-bench-sdpa: attn_sdpa throughput (GFLOP/s) beside a large sgemm measured in the same run. */
#define _POSIX_C_SOURCE 200809L
#include <attn/attn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_env.h"

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU seconds of the whole process: robust to other processes on a shared machine */
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void fill(float *x, size_t n, unsigned *s) {
    for (size_t i = 0; i < n; ++i) {
        *s = *s * 1664525u + 1013904223u;
        x[i] = (float)((*s >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

static void die(const char *what, attn_status st) {
    fprintf(stderr, "attn-bench-sdpa: %s: %s\n", what, attn_strerror(st));
    exit(1);
}

/* Median seconds of `reps` attn_gemm calls on an n^3 f32 product (the BLAS's own threads). */
static double sgemm_gflops(int64_t n, int reps, double *cpu_gf) {
    size_t nn = (size_t)(n * n);
    float *a = malloc(nn * 4), *b = malloc(nn * 4), *c = malloc(nn * 4);
    unsigned s = 7;
    fill(a, nn, &s);
    fill(b, nn, &s);
    attn_view A, B, C;
    int64_t sh[2] = {n, n};
    attn_view_init(&A, ATTN_F32, a, 2, sh);
    attn_view_init(&B, ATTN_F32, b, 2, sh);
    attn_view_init(&C, ATTN_F32, c, 2, sh);
    double t[16], tc[16];
    attn_status st = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1, &A, &B, 0, &C, NULL, 0);
    if (st) die("attn_gemm", st);
    for (int r = 0; r < reps; ++r) {
        double t0 = now(), c0 = cpu();
        attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1, &A, &B, 0, &C, NULL, 0);
        t[r] = now() - t0;
        tc[r] = cpu() - c0;
    }
    free(a); free(b); free(c);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    *cpu_gf = flop / median(tc, reps) * 1e-9;
    return flop / median(t, reps) * 1e-9;
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
static void time_call(call *c, int reps, double *wall, double *cpus) {
    attn_status st = run(c);
    if (st) die(c->bwd ? "attn_sdpa_backward" : "attn_sdpa", st);
    double t[16], tc[16];
    for (int r = 0; r < reps; ++r) {
        double t0 = now(), c0 = cpu();
        run(c);
        t[r] = now() - t0;
        tc[r] = cpu() - c0;
    }
    *wall = median(t, reps);
    *cpus = median(tc, reps);
}

static void usage(void) {
    fprintf(stderr,
            "usage: attn-bench-sdpa [-t T]... [-a tiled|mat|both] [-c 0|1|both] [-r reps]\n"
            "                       [-j threads] [-q block_q] [-k block_k] [-H heads] [-n] [-b]\n"
            "  B=1, H=12, D=64, f32; default T = 256 512 ... 8192. -n: skip the sgemm.\n"
            "  GFLOP/s counts 4*B*H*Tq*Tk*D per call (half for causal); time = median of reps.\n"
            "  cpu ms: process CPU time per call; GF/cpu-s: GFLOP per CPU second (all threads).\n"
            "  -b: also time attn_sdpa_backward (dq, dk, dv; counted as 2.5x the forward).\n");
    exit(2);
}

int main(int argc, char **argv) {
    int64_t Ts[16], nT = 0, H = 12, D = 64, bq = 0, bk = 0;
    int algos = 3, causals = 3, reps = 5, threads = 0, do_gemm = 1, do_bwd = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-n")) { do_gemm = 0; continue; }
        if (!strcmp(a, "-b")) { do_bwd = 1; continue; }
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
        else usage();
    }
    if (reps < 1 || reps > 16) usage();
    if (nT == 0)
        for (int64_t T = 256; T <= 8192; T *= 2) Ts[nT++] = T;
    bench_env env;
    bench_env_collect(&env);
    bench_env_print(stdout, "", &env);
    bench_env_kernel_note(stdout, "", &env);
    double peak_cpu = 0, peak = do_gemm ? sgemm_gflops(2048, reps, &peak_cpu) : 0;
    if (do_gemm)
        printf("sgemm 2048^3 (attn_gemm, BLAS threads): %.1f GFLOP/s wall, %.1f per CPU "
               "second (medians of %d)\n", peak, peak_cpu, reps);
    {
        float dummy = 0;
        attn_view q;
        int64_t sh[4] = {1, H, 65536, D}, st[4] = {0, 0, 0, 0};
        attn_view_init_strided(&q, ATTN_F32, &dummy, 4, sh, st);
        attn_sdpa_opts o = {.algo = ATTN_ALGO_TILED, .threads = threads, .block_q = bq,
                            .block_k = bk};
        printf("tiled workspace at T=65536: %.2f MiB\n",
               (double)attn_sdpa_workspace_size(&q, &q, &q, &o) / (1 << 20));
    }
    printf("%6s %6s %6s %10s %9s %7s %10s %9s\n", "T", "algo", "causal", "ms", "GFLOP/s",
           "%sgemm", "cpu ms", "GF/cpu-s");
    for (int64_t ti = 0; ti < nT; ++ti) {
        int64_t T = Ts[ti], sh[4] = {1, H, T, D};
        size_t n = (size_t)(H * T * D);
        float *buf[8];
        call c = {0};
        attn_view *views[8] = {&c.q, &c.k, &c.v, &c.o, &c.dout, &c.dq, &c.dk, &c.dv};
        unsigned s = 1;
        for (int i = 0; i < 8; ++i) {
            buf[i] = malloc(n * 4);
            fill(buf[i], n, &s);
            attn_view_init(views[i], ATTN_F32, buf[i], 4, sh);
        }
        float *lse = malloc((size_t)(H * T) * 4);
        attn_view_init(&c.lse, ATTN_F32, lse, 3, sh);
        for (int alg = 1; alg <= 2; ++alg) {
            if (!(algos & alg)) continue;
            for (int cz = 0; cz < 2; ++cz) {
                if (!(causals & (1 << cz))) continue;
                attn_sdpa_opts op = {.algo = alg == 1 ? ATTN_ALGO_MATERIALIZED : ATTN_ALGO_TILED,
                                     .causal = cz ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE,
                                     .threads = threads, .block_q = bq, .block_k = bk,
                                     .lse = &c.lse};
                c.op = op;
                for (c.bwd = 0; c.bwd <= do_bwd; ++c.bwd) {
                    c.ws = c.bwd ? attn_sdpa_backward_workspace_size(&c.q, &c.k, &c.v, &op)
                                 : attn_sdpa_workspace_size(&c.q, &c.k, &c.v, &op);
                    c.work = aligned_alloc(64, (c.ws + 63) / 64 * 64 + 64);
                    double sec, csec;
                    time_call(&c, reps, &sec, &csec);
                    double flop = 4.0 * (double)H * (double)T * (double)T * (double)D *
                                  (cz ? 0.5 : 1) * (c.bwd ? 2.5 : 1);
                    double gf = flop / sec * 1e-9;
                    printf("%6lld %6s %6s %10.3f %9.1f %7.1f %10.3f %9.1f\n", (long long)T,
                           alg == 1 ? (c.bwd ? "mat-bw" : "mat") : (c.bwd ? "til-bw" : "tiled"),
                           cz ? "yes" : "no", sec * 1e3, gf, peak > 0 ? 100 * gf / peak : 0.0,
                           csec * 1e3, flop / csec * 1e-9);
                    fflush(stdout);
                    free(c.work);
                }
            }
        }
        for (int i = 0; i < 8; ++i) free(buf[i]);
        free(lse);
    }
    return 0;
}
