/* SPDX-License-Identifier: MIT */
/*
 * attn-host-bench: attn inside a host program that is parallel itself and makes its
 * own BLAS calls (docs/benchmarks.md "Inside a host program").
 *
 * Part 1, the host's parallelism: 8 independent attn_sdpa problems (B 1, H 4, T 512,
 * D 64, f32) run four ways in one process:
 *   lone      one host thread, default options, right after the host's own OpenMP loop
 *   omp       inside the host's `#pragma omp parallel for`, default options
 *   omp-t1    the same with opts.threads = 1
 *   pthreads  two host pthreads, 4 problems each
 * Each round runs every way once; the figure is the median over --reps rounds, and the
 * ratio is against the best way of the same run.
 *
 * Part 2, between the host's own BLAS calls: attn_sdpa (B 1, H 12, D 64) at T 64, 256,
 * 1024 and attn_encoder_forward (d 768, 12 heads, F 3072, pre-norm, GELU) at T 64, 256,
 * each called right after the host's cblas_sgemm 1024^3, and back to back; medians.
 *
 *   attn-host-bench [--reps N] [--quick] [--json FILE]
 *
 * The OpenBLAS build is the one the dynamic linker finds (LD_LIBRARY_PATH=
 * /usr/lib/x86_64-linux-gnu/openblas-openmp selects Debian's OpenMP build);
 * scripts/host-matrix.sh runs both, and another libattn.so beside this one.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/kernels.h"
#include "attn/layers.h"
#include "bench_env.h"
#include "bench_util.h"

#define MAX_REPS 201
#define NPROB    8
#define HOST_N   1024

static double now(void) { return bench_now(); }

static float *falloc(size_t n, unsigned seed) {
    float *p = bench_alloc64(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "attn-host-bench: out of memory\n");
        exit(1);
    }
    bench_fill(p, n, ATTN_F32, 0.5, seed);
    return p;
}

static void check(attn_status st, const char *what) {
    if (st != ATTN_OK) {
        fprintf(stderr, "attn-host-bench: %s: %s\n", what, attn_status_name(st));
        exit(1);
    }
}

/* ---- part 1: 8 problems, four ways ------------------------------------------- */

enum { P_H = 4, P_T = 512, P_D = 64 };
enum { WAY_LONE, WAY_OMP, WAY_OMP1, WAY_PTHREADS, NWAY };
static const char *const way_key[NWAY] = {"lone", "omp", "omp_t1", "pthreads"};
static const char *const way_name[NWAY] = {
    "one host thread, after the host's OpenMP loop", "inside the host's omp parallel for",
    "the same, opts.threads = 1", "two host pthreads, 4 problems each"};

typedef struct problem {
    attn_view q, k, v, o;
    float    *buf;
} problem;

static problem prob[NPROB];
static float  *host_vec; /* the host's own OpenMP loop works on it */
enum { HOST_VEC = 1 << 22 };

static void problems_init(void) {
    int64_t sh[4] = {1, P_H, P_T, P_D};
    size_t n = (size_t)P_H * P_T * P_D;
    for (int i = 0; i < NPROB; ++i) {
        problem *p = &prob[i];
        p->buf = falloc(4 * n, 17u + (unsigned)i);
        attn_view_init(&p->q, ATTN_F32, p->buf, 4, sh);
        attn_view_init(&p->k, ATTN_F32, p->buf + n, 4, sh);
        attn_view_init(&p->v, ATTN_F32, p->buf + 2 * n, 4, sh);
        attn_view_init(&p->o, ATTN_F32, p->buf + 3 * n, 4, sh);
    }
    host_vec = falloc(HOST_VEC, 3);
}

/* Problem i with the given thread option; workspace allocated by attn (a host's habit). */
static void solve(int i, int threads) {
    problem *p = &prob[i];
    attn_sdpa_opts o = {.threads = threads};
    check(attn_sdpa(&p->q, &p->k, &p->v, &o, &p->o, NULL, 0), "attn_sdpa");
}

static void host_omp_loop(void) {
#pragma omp parallel for
    for (int i = 0; i < HOST_VEC; ++i)
        host_vec[i] = host_vec[i] * 0.999f + 0.001f;
}

static void *half(void *arg) {
    int first = *(int *)arg;
    for (int i = first; i < first + NPROB / 2; ++i)
        solve(i, 0);
    return NULL;
}

static double run_way(int way) {
    if (way == WAY_LONE)
        host_omp_loop();
    double t0 = now();
    switch (way) {
    case WAY_LONE:
        for (int i = 0; i < NPROB; ++i)
            solve(i, 0);
        break;
    case WAY_OMP:
    case WAY_OMP1: {
        int threads = way == WAY_OMP1 ? 1 : 0;
#pragma omp parallel for schedule(dynamic)
        for (int i = 0; i < NPROB; ++i)
            solve(i, threads);
        break;
    }
    default: {
        pthread_t t;
        int first[2] = {0, NPROB / 2};
        if (pthread_create(&t, NULL, half, &first[1]) != 0) {
            fprintf(stderr, "attn-host-bench: pthread_create failed\n");
            exit(1);
        }
        half(&first[0]);
        pthread_join(t, NULL);
    }
    }
    return 1e3 * (now() - t0);
}

/* ---- part 2: between the host's own sgemms -------------------------------------- */

enum { S_H = 12, S_D = 64, E_C = 768, E_F = 3072 };
static const int64_t calls_T[] = {64, 256, 1024};
enum { NT = 3, NENC_T = 2 };

typedef struct host {
    float *a, *b, *c;
} host;

static void host_sgemm(host *h) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, HOST_N, HOST_N, HOST_N, 1.0f, h->a,
                HOST_N, h->b, HOST_N, 0.0f, h->c, HOST_N);
}

typedef struct call {
    bool                encoder;
    attn_view           q, k, v, o, x, y;
    float              *buf;
    attn_encoder_config cfg;
    attn_encoder_params prm;
    void               *slab, *work;
    size_t              work_size;
} call;

static void call_init(call *c, int64_t T, bool encoder) {
    memset(c, 0, sizeof *c);
    c->encoder = encoder;
    if (!encoder) {
        int64_t sh[4] = {1, S_H, T, S_D};
        size_t n = (size_t)S_H * (size_t)T * S_D;
        c->buf = falloc(4 * n, 5u);
        attn_view_init(&c->q, ATTN_F32, c->buf, 4, sh);
        attn_view_init(&c->k, ATTN_F32, c->buf + n, 4, sh);
        attn_view_init(&c->v, ATTN_F32, c->buf + 2 * n, 4, sh);
        attn_view_init(&c->o, ATTN_F32, c->buf + 3 * n, 4, sh);
        attn_sdpa_opts o = {0};
        c->work_size = attn_sdpa_workspace_size(&c->q, &c->k, &c->v, &o);
    } else {
        c->cfg.mha = (attn_mha_config){.dtype = ATTN_F32, .d_model = E_C, .heads = S_H,
                                       .bias = true};
        c->cfg.ffn = (attn_ffn_config){.dtype = ATTN_F32, .d_model = E_C, .d_ff = E_F,
                                       .act = ATTN_ACT_GELU_ERF, .bias = true};
        c->cfg.eps = 1e-5;
        c->cfg.norm = ATTN_PRE_NORM;
        c->cfg.ln_affine = true;
        check(attn_encoder_config_resolve(&c->cfg, &c->cfg), "attn_encoder_config_resolve");
        size_t bytes = attn_encoder_params_size(&c->cfg);
        float *slab = falloc(bytes / sizeof(float) + 16, 9u);
        for (size_t i = 0; i < bytes / sizeof(float); ++i)
            slab[i] *= 0.07f; /* about 1/sqrt(d) */
        c->slab = slab;
        check(attn_encoder_params_bind(&c->prm, &c->cfg, slab, bytes), "params_bind");
        int64_t sh[3] = {1, T, E_C};
        size_t n = (size_t)T * E_C;
        c->buf = falloc(2 * n, 7u);
        attn_view_init(&c->x, ATTN_F32, c->buf, 3, sh);
        attn_view_init(&c->y, ATTN_F32, c->buf + n, 3, sh);
        c->work_size = attn_encoder_workspace_size(&c->cfg, &c->x, NULL, NULL);
    }
    c->work = falloc(c->work_size / sizeof(float) + 16, 1u);
}

static double call_run(call *c) {
    double t0 = now();
    if (c->encoder)
        check(attn_encoder_forward(&c->cfg, &c->prm, &c->x, NULL, &c->y, NULL, c->work,
                                   c->work_size),
              "attn_encoder_forward");
    else
        check(attn_sdpa(&c->q, &c->k, &c->v, NULL, &c->o, c->work, c->work_size), "attn_sdpa");
    return 1e3 * (now() - t0);
}

/* ---- main ---------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int reps = 21;
    const char *json = NULL;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            reps = 5;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            printf("usage: attn-host-bench [--reps N] [--quick] [--json FILE]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "attn-host-bench: --reps 1 to %d\n", MAX_REPS);
        return 2;
    }
    bench_env env;
    bench_env_collect(&env);
    bench_env_print(stdout, "", &env);

    /* part 1 */
    problems_init();
    static double t[NWAY][MAX_REPS];
    for (int w = 0; w < NWAY; ++w)
        run_way(w); /* warm-up: first-touch, the BLAS's and OpenMP's threads started */
    for (int r = 0; r < reps; ++r)
        for (int w = 0; w < NWAY; ++w)
            t[w][r] = run_way(w);
    double med[NWAY], best = INFINITY;
    for (int w = 0; w < NWAY; ++w) {
        med[w] = bench_median(t[w], reps);
        best = med[w] < best ? med[w] : best;
    }
    printf("\n8 sdpa problems (B 1, H 4, T 512, D 64, f32), median of %d rounds\n", reps);
    printf("%-48s %9s %7s\n", "how the host runs them", "ms", "/ best");
    for (int w = 0; w < NWAY; ++w)
        printf("%-48s %9.2f %7.2f\n", way_name[w], med[w], med[w] / best);

    /* part 2 */
    host h = {falloc((size_t)HOST_N * HOST_N, 1u), falloc((size_t)HOST_N * HOST_N, 2u),
              falloc((size_t)HOST_N * HOST_N, 3u)};
    printf("\nattn calls, median ms of %d: right after the host's sgemm %d^3 / back to back\n",
           reps, HOST_N);
    double res[NT + NENC_T][2];
    for (int e = 0; e < NT + NENC_T; ++e) {
        bool enc = e >= NT;
        int64_t T = calls_T[enc ? e - NT : e];
        call c;
        call_init(&c, T, enc);
        double after[MAX_REPS], b2b[MAX_REPS];
        call_run(&c);
        for (int r = 0; r < reps; ++r) {
            host_sgemm(&h);
            after[r] = call_run(&c);
        }
        for (int r = 0; r < reps; ++r)
            b2b[r] = call_run(&c);
        res[e][0] = bench_median(after, reps);
        res[e][1] = bench_median(b2b, reps);
        printf("%-22s T %5lld %9.3f %9.3f\n", enc ? "attn_encoder_forward" : "attn_sdpa",
               (long long)T, res[e][0], res[e][1]);
        free(c.buf), free(c.work), free(c.slab);
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "attn-host-bench: cannot write %s\n", json);
            return 1;
        }
        fprintf(f, "{\"blas_threading\": \"%s\", \"blas_core\": \"%s\", \"cpu\": \"%s\",\n",
                env.blas_threading, env.blas_core, env.cpu);
        fprintf(f, " \"ways_ms\": {");
        for (int w = 0; w < NWAY; ++w)
            fprintf(f, "%s\"%s\": %.3f", w ? ", " : "", way_key[w], med[w]);
        fprintf(f, "},\n \"calls_ms\": {");
        for (int e = 0; e < NT + NENC_T; ++e)
            fprintf(f, "%s\"%s_%lld\": [%.4f, %.4f]", e ? ", " : "", e >= NT ? "enc" : "sdpa",
                    (long long)calls_T[e >= NT ? e - NT : e], res[e][0], res[e][1]);
        fprintf(f, "}}\n");
        fclose(f);
    }
    for (int i = 0; i < NPROB; ++i)
        free(prob[i].buf);
    free(host_vec), free(h.a), free(h.b), free(h.c);
    return 0;
}
