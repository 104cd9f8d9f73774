/* SPDX-License-Identifier: MIT */
/* attn-bench's shared pieces: the sweep's options and results, the analytic model,
   and the entry points of its command line (bench_args.c) and writers (bench_out.c). */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn/kernels.h"
#include "bench_env.h"

#define MAX_N       64 /* sequence lengths per sweep */
#define MAX_CONFIGS 4  /* --quick sweeps four configurations */
#define MAX_REPS    1000
#define GEMM_REF    2048 /* the reference square GEMM: GEMM_REF^3 */
#define EXIT_USAGE  2

/* The timed parts: linear (QKVO projections + FFN), attention core (sdpa),
   multi-head attention layer (projections + sdpa), whole encoder block. */
enum { LIN, ATT, MHA, BLK, NPARTS };
extern const char *const part_key[NPARTS]; /* "lin", "attn", "mha", "block" */
/* The parts timed again with --window (ATT, MHA, BLK): "win_attn", "win_mha", "win_block"
   (LIN, unchanged by the window, is not timed again). */
extern const char *const win_key[NPARTS];

typedef struct config {
    int64_t d, heads, ff, batch;
    attn_dtype dt;
    bool causal;
    int64_t window; /* > 0: the attention parts also timed with a causal window of this
                       many keys (each query sees itself and the window - 1 before it) */
} config;

typedef struct options {
    config cfg[MAX_CONFIGS];
    int ncfg;
    attn_algo algo;
    int threads, reps, warmup;
    int64_t n[MAX_N];
    int nn;
    bool quick, seed_table;
    bool threads_set, tuned_env; /* --threads given; --tuned-env */
    const char *csv, *json, *plot;
} options;

typedef struct stats {
    double med, min, max; /* seconds */
} stats;

typedef struct point {
    int64_t n;
    stats t[NPARTS];
    size_t ws[NPARTS]; /* workspace bytes each part asked for */
    stats tw[NPARTS];  /* with the window: ATT, MHA, BLK (config.window > 0) */
    size_t wsw[NPARTS];
} point;

typedef struct crossover {
    double n;                  /* NAN when there is none */
    const char *kind;          /* interpolated, extrapolated, below-range, none */
    double rate_lin, rate_att; /* GFLOP/s of each part near the crossover */
} crossover;

typedef struct result {
    config cfg;
    point pt[MAX_N];
    int np;
    double theory;
    crossover x;
    char why[512];
    double theory_w; /* with the window; NAN when its work never overtakes */
    crossover xw;
    char why_w[512];
} result;

/* The GEMM reference of one dtype, measured before the first and after the last sweep. */
typedef struct reference {
    double start, end, best, spread; /* GFLOP/s; spread = |start - end| / best */
} reference;

/* ---- the analytic model (the seed's table) ------------------------------ */

/* Multiply-adds of the linear part: B (4 n d^2 + 2 n d F). */
static inline int64_t lin_macs(const config *c, int64_t n) {
    return c->batch * (4 * n * c->d * c->d + 2 * n * c->d * c->ff);
}
/* Multiply-adds of the attention core: B 2 n^2 d, halved with a causal mask. */
static inline int64_t att_macs(const config *c, int64_t n) {
    int64_t m = c->batch * 2 * n * n * c->d;
    return c->causal ? m / 2 : m;
}
/* n where the two are equal: 2d + F, doubled when causal. */
static inline double theory_crossover(const config *c) {
    return (double)((2 * c->d + c->ff) * (c->causal ? 2 : 1));
}
static inline const char *theory_name(const config *c) {
    if (c->ff == 4 * c->d)
        return c->causal ? "12d" : "6d";
    return c->causal ? "2(2d+F)" : "2d+F";
}

/*
 * Multiply-adds of the attention core with a causal window of W keys: query i sees
 * min(i + 1, W) keys, counted as the band's area n W - W^2 / 2 (the causal count's
 * n^2 / 2 once W >= n), 2 d multiply-adds per query-key pair over all heads:
 * B d (2 n W - W^2), W capped at n. About 2 B n W d, linear in n, for n >> W.
 */
static inline int64_t win_att_macs(const config *c, int64_t n) {
    int64_t w = c->window < n ? c->window : n;
    return c->batch * c->d * (2 * n * w - w * w);
}
/*
 * n where the windowed attention's work equals the linear part's. While n <= W the
 * window hides nothing, so for W >= 2 (2d + F) it is the causal crossover; past W the
 * ratio is (2W - W^2 / n) / (2 (2d + F)), which reaches 1 at n = W^2 / (2 (W - 2d - F))
 * when W > 2d + F, and never when W <= 2d + F (it stays below W / (2d + F)): NAN.
 */
static inline double theory_crossover_window(const config *c) {
    double w = (double)c->window, l = (double)(2 * c->d + c->ff);
    if (w >= 2 * l)
        return 2 * l;
    return w > l ? w * w / (2 * (w - l)) : NAN;
}
static inline const char *theory_name_window(const config *c) {
    double w = (double)c->window, l = (double)(2 * c->d + c->ff);
    if (w >= 2 * l)
        return theory_name(c);
    return w > l ? "W^2/2(W-2d-F)" : "none";
}

/* Multiply-adds of a timed part (MHA: the 4 projections and attention). */
static inline int64_t part_macs(const config *c, int64_t n, int part) {
    switch (part) {
    case LIN:
        return lin_macs(c, n);
    case ATT:
        return att_macs(c, n);
    case MHA:
        return c->batch * 4 * n * c->d * c->d + att_macs(c, n);
    default:
        return lin_macs(c, n) + att_macs(c, n);
    }
}

/* The same with the window's attention core (config.window > 0). */
static inline int64_t win_part_macs(const config *c, int64_t n, int part) {
    switch (part) {
    case LIN:
        return lin_macs(c, n);
    case ATT:
        return win_att_macs(c, n);
    case MHA:
        return c->batch * 4 * n * c->d * c->d + win_att_macs(c, n);
    default:
        return lin_macs(c, n) + win_att_macs(c, n);
    }
}

static inline double gflops(int64_t macs, double seconds) {
    return 2.0 * (double)macs / seconds / 1e9;
}

static inline const char *dtype_name(attn_dtype dt) { return dt == ATTN_F32 ? "f32" : "f64"; }
static inline const char *algo_name(attn_algo a) {
    return a == ATTN_ALGO_TILED          ? "tiled"
           : a == ATTN_ALGO_MATERIALIZED ? "materialized"
                                         : "auto";
}

static inline bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* attn_bench.c */
extern const char *const prog;
_Noreturn void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* bench_args.c: the options from the command line (exits with status 2 on a bad one). */
void parse_args(int argc, char **argv, options *o);
/* Sets the thread environment --threads and --tuned-env ask for, re-executing once. */
void apply_threads(options *o, char **argv);

/* bench_out.c: the tables on stdout, the CSV, JSON and plot files. */
void print_analytic(FILE *f, const config *c, const int64_t *ns, int nn);
void print_config_header(const config *c, const options *o);
void print_measured(const result *r, const options *o, double peak);
void print_crossover(const result *r);
void print_measured_window(const result *r, double peak);
void print_crossover_window(const result *r);
void write_csv_header(FILE *f, bool window);
void write_csv_rows(FILE *f, const result *r, const options *o, const reference *ref,
                    const bench_env *env);
void write_json(const char *path, const result *res, int nres, const options *o,
                const reference *const *refs, const bench_env *env);
bool have_gnuplot(void);
void write_plot(const char *path, const result *res, int nres, int threads);

#endif
