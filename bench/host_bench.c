/* SPDX-License-Identifier: MIT */
/*
 * attn-host-bench: attn inside a host program that makes its own BLAS calls.
 *
 * A numerical code that calls attn also calls cblas_sgemm itself, and starts
 * attn with whatever environment it has. This program reproduces that
 * pattern: the caller's own cblas_sgemm 1024^3 interleaved with attn_sdpa
 * (B 1, H 12, D 64) and attn_encoder_forward (d 768, 12 heads, F 3072,
 * pre-norm, GELU) at several T, and the same attn calls back to back;
 * medians of --reps calls (back to back: as many more as span 0.1 s). It
 * runs every measurement in a child process (itself, re-executed) once with
 * the environment it was given and once "tuned" (OMP_WAIT_POLICY=PASSIVE
 * OPENBLAS_THREAD_TIMEOUT=4, the best settings known before attn managed its
 * own threads), --runs times each, the two children of a run one after the
 * other, and prints the medians side by side with the ratio default / best:
 * the median of the runs' own ratios (a pair shares the machine's state of
 * the moment, which moves a process's times by up to 2x under load), with
 * its quartiles.
 *
 * It also measures "sdpa at T 256 in a fresh process right after a large
 * sgemm" against the T 1024 throughput of the same process (the BLAS's idle
 * workers are still awake then), each the work over the time of calls that
 * span 0.1 s (at least 5): the median of the processes' own shares, with
 * its quartiles.
 *
 *   attn-host-bench [--reps N] [--runs R] [--T 64,256,1024] [--spin K]
 *                   [--fresh-runs F] [--json FILE] [--quick]
 *   attn-host-bench --worker [--tuned-env]   one child's measurements, as lines
 *
 * --spin K starts K processes that spin on a core each for the whole run (the
 * "loaded" machine) and stops them at the end. The OpenBLAS variant is the one
 * the dynamic linker finds: LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp
 * selects Debian's OpenMP build (docs/benchmarks.md).
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attn/kernels.h"
#include "attn/layers.h"
#include "attn/version.h"
#include "bench_env.h"

#define MAX_T     8
#define MAX_RUNS  15
#define MAX_REPS  101
#define MAX_SAMPLES 2048 /* back-to-back calls of one cell */
#define MIN_SPAN_S  0.1  /* ... which span at least this long (25 ticks at 250 Hz) */
#define HOST_N    1024 /* the caller's own sgemm, HOST_N^3 */
#define FRESH_N   2048 /* the "large sgemm" before the fresh-process sdpa */
#define EXIT_USAGE 2

static const char *prog = "attn-host-bench";

/* Measurements: call x pattern per T, and the host's sgemm right after attn. */
enum { SDPA_B2B, SDPA_INT, ENC_B2B, ENC_INT, HOST_AFTER, NMEAS };
static const char *const meas_key[NMEAS] = {"sdpa_b2b", "sdpa_int", "enc_b2b", "enc_int",
                                            "host_after"};
static const char *const meas_name[NMEAS] = {
    "attn_sdpa, back to back", "attn_sdpa, between host sgemms",
    "attn_encoder_forward, back to back", "attn_encoder_forward, between host sgemms",
    "host sgemm 1024^3 right after attn"};
enum { ENV_DEFAULT, ENV_TUNED, NENV };
static const char *const env_name[NENV] = {"default", "tuned"};

typedef struct options {
    int     reps, runs, spin, fresh_runs, nt;
    int64_t T[MAX_T];
    bool    worker, tuned, fresh;
    const char *json;
} options;

static void die(int code, const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(code);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    if (n <= 0)
        return NAN;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double sum(const double *t, int n) {
    double s = 0;
    for (int i = 0; i < n; ++i)
        s += t[i];
    return s;
}

static float *falloc(size_t n, unsigned seed) {
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n ? n * sizeof *p : 64))
        die(1, "cannot allocate %s", "memory");
    for (size_t i = 0; i < n; ++i) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0) * 0.5f;
    }
    return p;
}

static void check(attn_status st, const char *what) {
    if (st != ATTN_OK) {
        fprintf(stderr, "%s: %s: %s\n", prog, what, attn_strerror(st));
        exit(1);
    }
}

/* ---- the host program's own BLAS call ------------------------------------- */

typedef struct host {
    int    n;
    float *a, *b, *c;
} host;

static void host_init(host *h, int n) {
    h->n = n;
    h->a = falloc((size_t)n * (size_t)n, 1);
    h->b = falloc((size_t)n * (size_t)n, 2);
    h->c = falloc((size_t)n * (size_t)n, 3);
}

static double host_call(host *h) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, h->n, h->n, h->n, 1.0f, h->a, h->n,
                h->b, h->n, 0.0f, h->c, h->n);
    return now() - t0;
}

static void host_free(host *h) { free(h->a), free(h->b), free(h->c); }

/* ---- attn's calls ----------------------------------------------------------- */

typedef struct calls {
    int64_t T;
    /* sdpa: (1, 12, T, 64) */
    float *q, *k, *v, *o;
    attn_view hq, hk, hv, ho;
    void  *sws;
    size_t swsz;
    /* encoder: (1, T, 768) */
    attn_encoder_config ecfg;
    attn_encoder_params p;
    float *slab, *x, *y;
    attn_view vx, vy;
    void  *ews;
    size_t ewsz;
    attn_sdpa_opts opts; /* all defaults: what a user who sets nothing gets */
} calls;

static void calls_init(calls *c, int64_t T, bool encoder) {
    memset(c, 0, sizeof *c);
    c->T = T;
    int64_t sh[4] = {1, 12, T, 64};
    size_t n = (size_t)(12 * T * 64);
    c->q = falloc(n, 4), c->k = falloc(n, 5), c->v = falloc(n, 6), c->o = falloc(n, 7);
    check(attn_view_init(&c->hq, ATTN_F32, c->q, 4, sh), "view");
    check(attn_view_init(&c->hk, ATTN_F32, c->k, 4, sh), "view");
    check(attn_view_init(&c->hv, ATTN_F32, c->v, 4, sh), "view");
    check(attn_view_init(&c->ho, ATTN_F32, c->o, 4, sh), "view");
    c->swsz = attn_sdpa_workspace_size(&c->hq, &c->hk, &c->hv, &c->opts);
    c->sws = falloc(c->swsz / 4 + 16, 8);
    if (!encoder)
        return;
    c->ecfg.mha = (attn_mha_config){.dtype = ATTN_F32, .d_model = 768, .heads = 12, .bias = true};
    c->ecfg.ffn = (attn_ffn_config){.dtype = ATTN_F32, .d_model = 768, .d_ff = 3072,
                                    .act = ATTN_ACT_GELU_ERF, .bias = true};
    c->ecfg.eps = 1e-5;
    c->ecfg.norm = ATTN_PRE_NORM;
    c->ecfg.ln_affine = true;
    check(attn_encoder_config_resolve(&c->ecfg, &c->ecfg), "attn_encoder_config_resolve");
    size_t bytes = attn_encoder_params_size(&c->ecfg);
    c->slab = falloc(bytes / 4 + 16, 9);
    for (size_t i = 0; i < bytes / 4; ++i)
        c->slab[i] *= 0.07f; /* about 1/sqrt(d) */
    check(attn_encoder_params_bind(&c->p, &c->ecfg, c->slab, bytes), "attn_encoder_params_bind");
    int64_t xs[3] = {1, T, 768};
    c->x = falloc((size_t)(T * 768), 10), c->y = falloc((size_t)(T * 768), 11);
    check(attn_view_init(&c->vx, ATTN_F32, c->x, 3, xs), "view");
    check(attn_view_init(&c->vy, ATTN_F32, c->y, 3, xs), "view");
    c->ewsz = attn_encoder_workspace_size(&c->ecfg, &c->vx, &c->opts, NULL);
    c->ews = falloc(c->ewsz / 4 + 16, 12);
}

static void calls_free(calls *c) {
    free(c->q), free(c->k), free(c->v), free(c->o), free(c->sws);
    free(c->slab), free(c->x), free(c->y), free(c->ews);
}

static double sdpa_call(calls *c) {
    double t0 = now();
    check(attn_sdpa(&c->hq, &c->hk, &c->hv, &c->opts, &c->ho, c->sws, c->swsz), "attn_sdpa");
    return now() - t0;
}

static double enc_call(calls *c) {
    double t0 = now();
    check(attn_encoder_forward(&c->ecfg, &c->p, &c->vx, &c->opts, &c->vy, NULL, c->ews, c->ewsz),
          "attn_encoder_forward");
    return now() - t0;
}

static double sdpa_gflop(int64_t T) { return 4.0 * 12.0 * (double)T * (double)T * 64.0 * 1e-9; }

/* ---- one child: the measurements, printed as "key T milliseconds" lines --- */

/* Back-to-back calls into t: at least reps, and on until they span
   MIN_SPAN_S (at most MAX_SAMPLES calls). Where another process shares the
   cores, the scheduler hands them out in ticks (4 ms at 250 Hz): 21 calls of
   0.2 ms fall inside one tick, and their median reports that tick's state,
   not the call's. Calls between host sgemms are 15 ms apart already. */
static int back_to_back(double *t, int reps, double (*call)(calls *), calls *c) {
    double t0 = now();
    int    n = 0;
    while (n < MAX_SAMPLES && (n < reps || now() - t0 < MIN_SPAN_S))
        t[n++] = call(c);
    return n;
}

static void worker(const options *o) {
    bench_env e;
    bench_env_collect(&e);
    bench_env_print(stdout, "# ", &e);
    host h;
    if (o->fresh) {
        /* the first thing this process does: a large threaded sgemm, then sdpa T 256 */
        calls c256, c1024;
        calls_init(&c256, 256, false);
        calls_init(&c1024, 1024, false);
        host_init(&h, FRESH_N);
        host_call(&h);
        /* throughput: the work of all the calls over their time (under load
           they alternate between ~2 and ~6 ms, and a median picks one) */
        static double t[MAX_SAMPLES];
        int    n = back_to_back(t, 5, sdpa_call, &c256);
        double gf256 = n * sdpa_gflop(256) / sum(t, n);
        n = back_to_back(t, 5, sdpa_call, &c1024);
        double gf1024 = n * sdpa_gflop(1024) / sum(t, n);
        printf("fresh 256 %.3f\nfresh 1024 %.3f\n", gf256, gf1024);
        host_free(&h);
        calls_free(&c256);
        calls_free(&c1024);
        return;
    }
    host_init(&h, HOST_N);
    host_call(&h); /* the BLAS's threads exist from here on, as in any host program */
    static double t[NMEAS][MAX_SAMPLES];
    for (int i = 0; i < o->nt; ++i) {
        calls c;
        calls_init(&c, o->T[i], true);
        int r = o->reps, n[NMEAS] = {r, r, r, r, r};
        sdpa_call(&c); /* first touch of the outputs */
        enc_call(&c);
        n[SDPA_B2B] = back_to_back(t[SDPA_B2B], r, sdpa_call, &c);
        for (int j = 0; j < r; ++j) {
            host_call(&h);
            t[SDPA_INT][j] = sdpa_call(&c);
        }
        n[ENC_B2B] = back_to_back(t[ENC_B2B], r, enc_call, &c);
        for (int j = 0; j < r; ++j) {
            host_call(&h);
            t[ENC_INT][j] = enc_call(&c);
            t[HOST_AFTER][j] = host_call(&h);
        }
        for (int m = 0; m < NMEAS; ++m)
            printf("%s %lld %.4f\n", meas_key[m], (long long)o->T[i], 1e3 * median(t[m], n[m]));
        fflush(stdout);
        calls_free(&c);
    }
    host_free(&h);
}

/* ---- the parent: children in both environments, spinners, the table ------- */

/* A JSON number, or null for what was not measured (NaN). */
static void json_num(FILE *f, double v, int prec) {
    if (isfinite(v))
        fprintf(f, "%.*f", prec, v);
    else
        fprintf(f, "null");
}

static pid_t spinners[16];

static void start_spinners(int k) {
    for (int i = 0; i < k; ++i) {
        pid_t p = fork();
        if (p == 0) {
            volatile unsigned long x = 0;
            for (;;)
                x++;
        }
        spinners[i] = p;
    }
}

static void stop_spinners(int k) {
    for (int i = 0; i < k; ++i)
        if (spinners[i] > 0) {
            kill(spinners[i], SIGKILL);
            waitpid(spinners[i], NULL, 0);
        }
}

/* Run one child; parse its lines into val[m][T index] (NAN when missing). */
static bool run_child(const options *o, int env, bool fresh, double val[NMEAS][MAX_T],
                      double fr[2], char *header, size_t hsz) {
    char reps[16], tl[128] = "";
    snprintf(reps, sizeof reps, "%d", o->reps);
    for (int i = 0; i < o->nt; ++i)
        snprintf(tl + strlen(tl), sizeof tl - strlen(tl), "%s%lld", i ? "," : "",
                 (long long)o->T[i]);
    int fd[2];
    if (pipe(fd))
        return false;
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        close(fd[0]);
        dup2(fd[1], STDOUT_FILENO);
        if (env == ENV_TUNED) {
            setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
            setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
        }
        char *argv[] = {(char *)prog, "--worker", "--reps", reps, "--T", tl,
                        fresh ? "--fresh" : NULL, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char line[512];
    size_t used = strlen(header);
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            if (used + strlen(line) + 8 < hsz && !strstr(header, line))
                used += (size_t)snprintf(header + used, hsz - used, "%s", line);
            continue;
        }
        char key[32];
        long long T;
        double v;
        if (sscanf(line, "%31s %lld %lf", key, &T, &v) != 3)
            continue;
        if (!strcmp(key, "fresh")) {
            fr[T == 256 ? 0 : 1] = v;
            continue;
        }
        for (int m = 0; m < NMEAS; ++m)
            for (int i = 0; i < o->nt; ++i)
                if (!strcmp(key, meas_key[m]) && o->T[i] == T)
                    val[m][i] = v;
    }
    if (f)
        fclose(f);
    int status;
    waitpid(p, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void parse_t(options *o, const char *s) {
    o->nt = 0;
    while (*s && o->nt < MAX_T) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 1 || v > 16384)
            die(EXIT_USAGE, "bad --T list: %s", s);
        o->T[o->nt++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            die(EXIT_USAGE, "bad --T list: %s", end);
    }
}

static int parse_int(const char *s, int lo, int hi, const char *what) {
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || *end || v < lo || v > hi)
        die(EXIT_USAGE, "bad %s", what);
    return (int)v;
}

static void usage(void) {
    printf("usage: %s [--reps N] [--runs R] [--T 64,256,1024] [--spin K] [--fresh-runs F]\n"
           "       [--json FILE] [--quick] [--version]\n"
           "Times attn_sdpa and attn_encoder_forward between the caller's own cblas_sgemm\n"
           "calls and back to back, in the given environment and in a tuned one\n"
           "(OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4); --spin K keeps K other\n"
           "processes spinning meanwhile. docs/benchmarks.md explains the output.\n",
           prog);
}

int main(int argc, char **argv) {
    options o = {.reps = 21, .runs = 3, .fresh_runs = 5};
    parse_t(&o, "64,256,1024");
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--worker"))
            o.worker = true;
        else if (!strcmp(a, "--fresh"))
            o.fresh = true;
        else if (!strcmp(a, "--reps"))
            o.reps = parse_int(v, 1, MAX_REPS, "--reps (1 to 101)"), ++i;
        else if (!strcmp(a, "--runs"))
            o.runs = parse_int(v, 1, MAX_RUNS, "--runs (1 to 15)"), ++i;
        else if (!strcmp(a, "--spin"))
            o.spin = parse_int(v, 0, 16, "--spin (0 to 16)"), ++i;
        else if (!strcmp(a, "--fresh-runs"))
            o.fresh_runs = parse_int(v, 0, MAX_RUNS, "--fresh-runs (0 to 15)"), ++i;
        else if (!strcmp(a, "--T") && v)
            parse_t(&o, v), ++i;
        else if (!strcmp(a, "--json") && v)
            o.json = v, ++i;
        else if (!strcmp(a, "--quick"))
            o.reps = 7, o.runs = 1, o.fresh_runs = 1;
        else if (!strcmp(a, "--version")) {
            printf("%s (attn %s)\n", prog, ATTN_VERSION_STRING);
            return 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else
            die(EXIT_USAGE, "unknown or incomplete option %s (try --help)", a);
    }
    if (o.worker) {
        worker(&o);
        return 0;
    }
    static double val[NENV][MAX_RUNS][NMEAS][MAX_T], fr[NENV][MAX_RUNS][2];
    static char header[4096];
    for (int e = 0; e < NENV; ++e)
        for (int r = 0; r < MAX_RUNS; ++r) {
            fr[e][r][0] = fr[e][r][1] = NAN;
            for (int m = 0; m < NMEAS; ++m)
                for (int i = 0; i < MAX_T; ++i)
                    val[e][r][m][i] = NAN;
        }
    double load0[3] = {0, 0, 0};
    if (getloadavg(load0, 3) < 0)
        load0[0] = NAN;
    start_spinners(o.spin);
    bool ok = true;
    /* environments alternate run by run, so a change in the machine's load hits both */
    for (int r = 0; r < o.runs && ok; ++r)
        for (int e = 0; e < NENV && ok; ++e) {
            char scratch[1024] = "";
            bool first = e == ENV_DEFAULT && r == 0; /* the header of the default child */
            ok = run_child(&o, e, false, val[e][r], fr[e][r], first ? header : scratch,
                           first ? sizeof header : sizeof scratch);
            fprintf(stderr, "%s: run %d/%d, %s environment done\n", prog, r + 1, o.runs,
                    env_name[e]);
        }
    for (int r = 0; r < o.fresh_runs && ok; ++r)
        for (int e = 0; e < NENV && ok; ++e) {
            double dummy[NMEAS][MAX_T];
            char h[512] = "";
            ok = run_child(&o, e, true, dummy, fr[e][r], h, sizeof h);
        }
    stop_spinners(o.spin);
    double load1[3] = {0, 0, 0};
    if (getloadavg(load1, 3) < 0)
        load1[0] = NAN;
    if (!ok)
        die(1, "a measurement child failed%s", "");

    printf("%s: the caller's cblas_sgemm %d^3 and attn's calls, medians of %d calls (back to "
           "back: spanning >= %.1f s), median of %d runs\n",
           prog, HOST_N, o.reps, MIN_SPAN_S, o.runs);
    fputs(header, stdout);
    printf("# tuned = OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4; %d spinning "
           "process(es); load average %.2f before, %.2f after\n",
           o.spin, load0[0], load1[0]);
    printf("%-44s %6s %11s %11s %7s %13s\n", "call", "T", "default ms", "tuned ms", "ratio",
           "pairs' q1-q3");
    double worst = 0;
    double med[NENV][NMEAS][MAX_T], ratio[NMEAS][MAX_T], q1[NMEAS][MAX_T], q3[NMEAS][MAX_T];
    for (int m = 0; m < NMEAS; ++m)
        for (int i = 0; i < o.nt; ++i) {
            for (int e = 0; e < NENV; ++e) {
                double x[MAX_RUNS];
                for (int r = 0; r < o.runs; ++r)
                    x[r] = val[e][r][m][i];
                med[e][m][i] = median(x, o.runs);
            }
            /* default / best, pair by pair: run r's two children ran one after the
               other, so a change in the machine's load moves both */
            double pr[MAX_RUNS];
            for (int r = 0; r < o.runs; ++r)
                pr[r] = val[ENV_DEFAULT][r][m][i] / val[ENV_TUNED][r][m][i];
            ratio[m][i] = fmax(1.0, median(pr, o.runs)); /* sorts pr */
            q1[m][i] = pr[(o.runs - 1) / 4];
            q3[m][i] = pr[o.runs - 1 - (o.runs - 1) / 4];
            if (m != HOST_AFTER && ratio[m][i] > worst)
                worst = ratio[m][i];
            printf("%-44s %6lld %11.3f %11.3f %6.2fx %6.2f-%.2f\n", meas_name[m],
                   (long long)o.T[i], med[0][m][i], med[1][m][i], ratio[m][i], q1[m][i],
                   q3[m][i]);
        }
    double f256[NENV], f1024[NENV], fshare[NENV], fq1[NENV], fq3[NENV];
    for (int e = 0; e < NENV; ++e) {
        double a[MAX_RUNS], b[MAX_RUNS], c[MAX_RUNS];
        for (int r = 0; r < o.fresh_runs; ++r)
            a[r] = fr[e][r][0], b[r] = fr[e][r][1], c[r] = a[r] / b[r];
        f256[e] = median(a, o.fresh_runs);
        f1024[e] = median(b, o.fresh_runs);
        fshare[e] = median(c, o.fresh_runs); /* each process's T 256 against its own T 1024 */
        fq1[e] = c[(o.fresh_runs - 1) / 4];  /* median() sorted c */
        fq3[e] = c[o.fresh_runs - 1 - (o.fresh_runs - 1) / 4];
    }
    if (o.fresh_runs) {
        printf("fresh process, sdpa T 256 right after sgemm %d^3 (work over time of calls "
               "spanning >= %.1f s; median of %d processes):\n",
               FRESH_N, MIN_SPAN_S, o.fresh_runs);
        for (int e = 0; e < NENV; ++e)
            printf("  %-8s T 256 %7.1f GFLOP/s, T 1024 %7.1f GFLOP/s; per process %5.1f%% "
                   "(q1-q3 %.1f-%.1f%%)\n",
                   env_name[e], f256[e], f1024[e], 100 * fshare[e], 100 * fq1[e], 100 * fq3[e]);
    }
    printf("worst attn call, default / best environment: %.2fx (target 1.10x); fresh T 256 / "
           "T 1024: %.0f%% (target 85%%)\n",
           worst, 100 * fshare[0]);
    if (o.json) {
        FILE *f = fopen(o.json, "w");
        if (!f)
            die(1, "cannot write %s", o.json);
        bench_env env;
        bench_env_collect(&env);
        fprintf(f, "{\"program\": \"%s\", \"environment\": {", prog);
        bench_env_json(f, &env);
        fprintf(f, "}, \"spin\": %d, \"reps\": %d, \"runs\": %d, \"load_before\": %.2f, "
                   "\"load_after\": %.2f, \"results\": [",
                o.spin, o.reps, o.runs, load0[0], load1[0]);
        int first = 1;
        for (int m = 0; m < NMEAS; ++m)
            for (int i = 0; i < o.nt; ++i) {
                fprintf(f, "%s\n  {\"call\": \"%s\", \"T\": %lld, \"default_ms\": ",
                        first ? "" : ",", meas_key[m], (long long)o.T[i]);
                json_num(f, med[0][m][i], 4);
                fprintf(f, ", \"tuned_ms\": ");
                json_num(f, med[1][m][i], 4);
                fprintf(f, ", \"ratio\": ");
                json_num(f, ratio[m][i], 4);
                fprintf(f, ", \"ratio_q1\": ");
                json_num(f, q1[m][i], 4);
                fprintf(f, ", \"ratio_q3\": ");
                json_num(f, q3[m][i], 4);
                fprintf(f, "}");
                first = 0;
            }
        static const char *const fresh_key[10] = {
            "default_t256_gflops", "default_t1024_gflops", "tuned_t256_gflops",
            "tuned_t1024_gflops",  "default_share",        "tuned_share",
            "default_share_q1",    "default_share_q3",     "tuned_share_q1",
            "tuned_share_q3"};
        double fresh_val[10] = {f256[0], f1024[0], f256[1], f1024[1], fshare[0],
                                fshare[1], fq1[0],   fq3[0],   fq1[1],   fq3[1]};
        fprintf(f, "],\n \"fresh\": {");
        for (int k = 0; k < 10; ++k) {
            fprintf(f, "%s\"%s\": ", k ? ", " : "", fresh_key[k]);
            json_num(f, fresh_val[k], k < 4 ? 2 : 4);
        }
        fprintf(f, "},\n \"worst_ratio\": ");
        json_num(f, worst, 4);
        fprintf(f, "}\n");
        if (fclose(f))
            die(1, "cannot write %s", o.json);
    }
    return 0;
}
