/* SPDX-License-Identifier: MIT */
/* attn-bench: the sequence-length sweep that finds where attention's n^2 overtakes. */
/*
 * Per transformer layer (d = C model width, F feed-forward width, B batch),
 * in multiply-adds (1 MAC = 2 FLOPs), as derived in the lecture-7 seed:
 *   linear part   B (4 n d^2 + 2 n d F)   Q, K, V, O projections and the FFN
 *                 (= 12 n d^2 for F = 4d)
 *   attention     B 2 n^2 d               Q K^T and A V over all heads
 *                 (halved, B n^2 d, with a causal mask whose masked tiles are skipped)
 * so attention's work overtakes at n = 2d + F (6d), or 2 (2d + F) (12d) causal.
 * attn-bench times each part through attn's own calls (attn_linear and
 * attn_ffn_forward; attn_sdpa on (B, H, n, D) head views), plus the layers
 * users call (attn_mha_forward, attn_encoder_forward), and reports where the
 * *times* cross, and why that differs from where the multiply-adds cross.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn/gemm.h"
#include "attn/kernels.h"
#include "attn/layers.h"
#include "attn/version.h"
#include "bench_env.h"

#define MAX_N       64   /* sequence lengths per sweep */
#define MAX_CONFIGS 4    /* --quick sweeps four configurations */
#define MAX_REPS    1000
#define GEMM_REF    2048 /* the reference square GEMM: GEMM_REF^3 */
#define EXIT_USAGE  2
#define NBUF        9 /* activations: x, q, k, v, att, o, y, mha, out */

/* The timed parts: linear (QKVO projections + FFN), attention core (sdpa),
   multi-head attention layer (projections + sdpa), whole encoder block. */
enum { LIN, ATT, MHA, BLK, NPARTS };
static const char *const part_key[NPARTS] = {"lin", "attn", "mha", "block"};
static const char *const part_call[NPARTS] = {"attn_linear/attn_ffn_forward", "attn_sdpa",
                                              "attn_mha_forward", "attn_encoder_forward"};

typedef struct config {
    int64_t    d, heads, ff, batch;
    attn_dtype dt;
    bool       causal;
} config;

typedef struct options {
    config    cfg[MAX_CONFIGS];
    int       ncfg;
    attn_algo algo;
    int       threads, reps, warmup;
    int64_t   n[MAX_N];
    int       nn;
    bool      quick, seed_table;
    bool      threads_set, tuned_env; /* --threads given; --tuned-env */
    const char *csv, *json, *plot;
} options;

typedef struct stats {
    double med, min, max; /* seconds */
} stats;

typedef struct point {
    int64_t n;
    stats   t[NPARTS];
    size_t  ws[NPARTS]; /* workspace bytes each part asked for */
} point;

typedef struct crossover {
    double      n;    /* NAN when there is none */
    const char *kind; /* interpolated, extrapolated, below-range, none */
    double      rate_lin, rate_att; /* GFLOP/s of each part near the crossover */
} crossover;

typedef struct result {
    config    cfg;
    point     pt[MAX_N];
    int       np;
    double    theory;
    crossover x;
    char      why[512];
} result;

/* ---- small utilities ---------------------------------------------------- */

static const char *prog = "attn-bench";
static bench_env env; /* attn, BLAS, CPU, variables, date: in the header, CSV and JSON */

/* The GEMM reference of one dtype, measured before the first and after the last sweep. */
typedef struct reference {
    double start, end, best, spread; /* GFLOP/s; spread = |start - end| / best */
} reference;

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Progress on stderr when it is a terminal (\r rewrites the line); otherwise
   main prints one line per finished n instead. */
static bool progress_on;
static void progress(const char *fmt, ...) {
    if (!progress_on)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    fflush(stderr);
    va_end(ap);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static stats summarize(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    stats s = {n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t[0], t[n - 1]};
    return s;
}

/* 64-byte aligned, never NULL for size 0; NULL when the allocation fails. */
static void *alloc64(size_t bytes) {
    size_t r = (bytes + 63) / 64 * 64;
    if (r < bytes)
        return NULL;
    return aligned_alloc(64, r ? r : 64);
}

/* Uniform values in [-a, a] from a fixed 64-bit LCG (deterministic inputs). */
static void fill_uniform(void *p, size_t count, attn_dtype dt, double a, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (size_t i = 0; i < count; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = a * (2.0 * (double)(s >> 11) * 0x1.0p-53 - 1.0);
        if (dt == ATTN_F32)
            ((float *)p)[i] = (float)u;
        else
            ((double *)p)[i] = u;
    }
}

/* ---- the analytic model (the seed's table) ------------------------------ */

/* Multiply-adds of the linear part: B (4 n d^2 + 2 n d F). */
static int64_t lin_macs(const config *c, int64_t n) {
    return c->batch * (4 * n * c->d * c->d + 2 * n * c->d * c->ff);
}
/* Multiply-adds of the attention core: B 2 n^2 d, halved with a causal mask. */
static int64_t att_macs(const config *c, int64_t n) {
    int64_t m = c->batch * 2 * n * n * c->d;
    return c->causal ? m / 2 : m;
}
/* n where the two are equal: 2d + F, doubled when causal. */
static double theory_crossover(const config *c) {
    return (double)((2 * c->d + c->ff) * (c->causal ? 2 : 1));
}
static const char *theory_name(const config *c) {
    if (c->ff == 4 * c->d)
        return c->causal ? "12d" : "6d";
    return c->causal ? "2(2d+F)" : "2d+F";
}

/* Multiply-adds of a timed part (MHA: the 4 projections and attention). */
static int64_t part_macs(const config *c, int64_t n, int part) {
    switch (part) {
    case LIN: return lin_macs(c, n);
    case ATT: return att_macs(c, n);
    case MHA: return c->batch * 4 * n * c->d * c->d + att_macs(c, n);
    default: return lin_macs(c, n) + att_macs(c, n);
    }
}

/* True when the MAC counts for n fit comfortably in int64 (and in a double's 53 bits). */
static bool macs_fit(const config *c, int64_t n) {
    int64_t t, lim = INT64_C(1) << 61;
    if (__builtin_mul_overflow(n, c->d, &t) || __builtin_mul_overflow(t, c->batch, &t))
        return false;
    int64_t w = 4 * c->d + 2 * c->ff, s;
    if (__builtin_mul_overflow(t, w, &s) || s > lim)
        return false;
    if (__builtin_mul_overflow(t, 2 * n, &s) || s > lim)
        return false;
    return true;
}

/*
 * The seed's table, row for row: the seed prints
 *   f"    {n:>7d} {lin:>18.2f} {att:>14.2f} {att / (lin + att):>14.1%}"
 * with lin, att = 12 n d^2 / 1e9, 2 n^2 d / 1e9 (GMAC) and Python's % format
 * (the share times 100 in double, then fixed with one decimal). The seed's
 * header is Chinese; this one says the same in English, in the same columns.
 */
static void print_analytic(FILE *f, const config *c, const int64_t *ns, int nn) {
    fprintf(f, "    %7s %18s %14s %14s\n", "n", "linear (GMAC)", "attention", "attn share");
    for (int i = 0; i < nn; ++i) {
        double lin = (double)lin_macs(c, ns[i]) / 1e9, att = (double)att_macs(c, ns[i]) / 1e9;
        double pct = att / (lin + att) * 100.0;
        fprintf(f, "    %7lld %18.2f %14.2f %13.1f%%\n", (long long)ns[i], lin, att, pct);
    }
}

/* ---- one configuration's buffers and the timed parts ----------------------- */

typedef struct bench {
    const config       *cfg;
    attn_encoder_config ecfg;
    attn_encoder_params p;
    void               *slab;
    attn_sdpa_opts      opts;
    /* per n: (B, n, C) activations and their (B, H, n, D) head views */
    void     *mem[NBUF];
    attn_view x, q, k, v, att, o, y, mha, out;
    attn_view hq, hk, hv, hatt;
    void     *ws[NPARTS];
    size_t    wsz[NPARTS];
    char      why[160]; /* why bench_setup_point failed */
} bench;

static void bench_init(bench *b, const config *c, const options *o) {
    memset(b, 0, sizeof *b);
    b->cfg = c;
    /* pre-norm block with biases, affine LayerNorms and erf GELU: PyTorch's
       TransformerEncoderLayer(norm_first=True, activation="gelu") */
    b->ecfg.mha = (attn_mha_config){.dtype = c->dt, .d_model = c->d, .heads = c->heads,
                                    .bias = true};
    b->ecfg.ffn = (attn_ffn_config){.dtype = c->dt, .d_model = c->d, .d_ff = c->ff,
                                    .act = ATTN_ACT_GELU_ERF, .bias = true};
    b->ecfg.eps = 1e-5;
    b->ecfg.norm = ATTN_PRE_NORM;
    b->ecfg.ln_affine = true;
    attn_status st = attn_encoder_config_resolve(&b->ecfg, &b->ecfg);
    if (st != ATTN_OK)
        die(EXIT_USAGE, "d %lld, %lld heads, F %lld: %s", (long long)c->d,
            (long long)c->heads, (long long)c->ff, attn_strerror(st));
    size_t bytes = attn_encoder_params_size(&b->ecfg);
    if (!bytes || !(b->slab = alloc64(bytes)))
        die(EXIT_USAGE, "cannot allocate %zu bytes of parameters", bytes);
    fill_uniform(b->slab, bytes / attn_dtype_size(c->dt), c->dt, 1.0 / sqrt((double)c->d), 1);
    st = attn_encoder_params_bind(&b->p, &b->ecfg, b->slab, bytes);
    if (st != ATTN_OK)
        die(EXIT_USAGE, "attn_encoder_params_bind: %s", attn_strerror(st));
    b->opts.causal = c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    b->opts.algo = o->algo;
    b->opts.threads = o->threads_set ? o->threads : 0; /* 0: attn's own choice, as users get */
}

static void bench_free_point(bench *b) {
    for (int i = 0; i < NBUF; ++i)
        free(b->mem[i]), b->mem[i] = NULL;
    for (int i = 0; i < NPARTS; ++i)
        free(b->ws[i]), b->ws[i] = NULL;
}

static void bench_free(bench *b) {
    bench_free_point(b);
    free(b->slab);
}

/* (B, n, C) -> (B, n, H, D) -> (B, H, n, D): the heads as views, no copies. */
static attn_status heads_view(const attn_view *v, int64_t d_head, attn_view *out) {
    static const int perm[4] = {0, 2, 1, 3};
    attn_status st = attn_view_split(v, 2, d_head, out);
    return st != ATTN_OK ? st : attn_view_permute(out, perm, out);
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* 3/4 of the physical memory: more than that is "cannot be allocated" here. */
static double memory_budget(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? 0.75 * (double)pages * (double)page : INFINITY;
}

static bool over_budget(bench *b, double bytes, const char *what) {
    double budget = memory_budget();
    if (bytes <= budget)
        return false;
    snprintf(b->why, sizeof b->why,
             "needs %.1f GiB of %s, more than 3/4 of this machine's %.1f GiB", bytes / 1073741824.0,
             what, budget / 0.75 / 1073741824.0);
    return true;
}

/*
 * Allocate the activations for sequence length n, query the workspaces and
 * allocate them. Nothing is allocated past the memory budget (memory is
 * never touched on spec: under meson, MALLOC_PERTURB_ writes every block).
 * touch: fill the buffers (the timed run; first-touch page faults then
 * belong to no repetition); the dry run only checks that every n fits.
 * Returns false with b->why set when something cannot be had.
 */
static bool bench_setup_point(bench *b, int64_t n, bool touch) {
    const config *c = b->cfg;
    int64_t shape[3] = {c->batch, n, c->d};
    size_t es = attn_dtype_size(c->dt), count = (size_t)(c->batch * n * c->d);
    double total = (double)NBUF * (double)count * (double)es;
    if (over_budget(b, total, "activations"))
        return false;
    attn_view *views[NBUF] = {&b->x,   &b->q, &b->k,   &b->v,  &b->att,
                              &b->o,   &b->y, &b->mha, &b->out};
    for (int i = 0; i < NBUF; ++i) {
        attn_status st = ATTN_ENOMEM;
        if (!(b->mem[i] = alloc64(count * es)) ||
            (st = attn_view_init(views[i], c->dt, b->mem[i], 3, shape)) != ATTN_OK) {
            snprintf(b->why, sizeof b->why, "activations: %s", attn_strerror(st));
            return false;
        }
        if (touch)
            fill_uniform(b->mem[i], count, c->dt, 1.0, (uint64_t)i + 2);
    }
    int64_t D = b->ecfg.mha.d_head;
    if (heads_view(&b->q, D, &b->hq) != ATTN_OK || heads_view(&b->k, D, &b->hk) != ATTN_OK ||
        heads_view(&b->v, D, &b->hv) != ATTN_OK || heads_view(&b->att, D, &b->hatt) != ATTN_OK) {
        snprintf(b->why, sizeof b->why, "cannot split the heads");
        return false;
    }
    const attn_mha_params *m = &b->p.mha;
    size_t lin = attn_linear_workspace_size(&b->x, &m->wq, &b->q);
    lin = max_size(lin, attn_linear_workspace_size(&b->att, &m->wo, &b->o));
    b->wsz[LIN] = max_size(lin, attn_ffn_workspace_size(&b->ecfg.ffn, &b->x, NULL));
    b->wsz[ATT] = attn_sdpa_workspace_size(&b->hq, &b->hk, &b->hv, &b->opts);
    b->wsz[MHA] = attn_mha_workspace_size(&b->ecfg.mha, &b->x, NULL, &b->opts, NULL);
    b->wsz[BLK] = attn_encoder_workspace_size(&b->ecfg, &b->x, &b->opts, NULL);
    for (int i = 0; i < NPARTS; ++i)
        total += (double)b->wsz[i];
    if (over_budget(b, total, "activations and workspace"))
        return false;
    for (int i = 0; i < NPARTS; ++i) {
        if (!(b->ws[i] = alloc64(b->wsz[i]))) {
            snprintf(b->why, sizeof b->why, "cannot allocate %.2f GiB of %s workspace",
                     b->wsz[i] / 1073741824.0, part_call[i]);
            return false;
        }
        if (touch)
            memset(b->ws[i], 0, b->wsz[i]);
    }
    return true;
}

static attn_status run_part(bench *b, int part) {
    const attn_mha_params *m = &b->p.mha;
    void *w = b->ws[part];
    size_t ws = b->wsz[part];
    attn_status st = ATTN_OK;
    switch (part) {
    case LIN: /* Q, K, V, O projections and the FFN */
        if ((st = attn_linear(&b->x, &m->wq, &m->bq, &b->q, w, ws)) != ATTN_OK ||
            (st = attn_linear(&b->x, &m->wk, &m->bk, &b->k, w, ws)) != ATTN_OK ||
            (st = attn_linear(&b->x, &m->wv, &m->bv, &b->v, w, ws)) != ATTN_OK ||
            (st = attn_linear(&b->att, &m->wo, &m->bo, &b->o, w, ws)) != ATTN_OK)
            return st;
        return attn_ffn_forward(&b->ecfg.ffn, &b->p.ffn, &b->x, &b->y, NULL, w, ws);
    case ATT: /* softmax(Q K^T / sqrt(D)) V over (B, H, n, D) */
        return attn_sdpa(&b->hq, &b->hk, &b->hv, &b->opts, &b->hatt, w, ws);
    case MHA: /* self-attention layer: projections, sdpa, output projection */
        return attn_mha_forward(&b->ecfg.mha, m, &b->x, NULL, &b->opts, &b->mha, NULL, w, ws);
    default:
        return attn_encoder_forward(&b->ecfg, &b->p, &b->x, &b->opts, &b->out, NULL, w, ws);
    }
}

static stats time_part(bench *b, int part, const options *o, const char *label) {
    double t[MAX_REPS];
    for (int i = 0; i < o->warmup + o->reps; ++i) {
        progress("%s %s %s %d/%d", label, part_key[part], i < o->warmup ? "warm-up" : "rep",
                 i < o->warmup ? i + 1 : i - o->warmup + 1, i < o->warmup ? o->warmup : o->reps);
        double t0 = now();
        attn_status st = run_part(b, part);
        double t1 = now();
        if (st != ATTN_OK)
            die(1, "%s: %s: %s", label, part_call[part], attn_strerror(st));
        if (i >= o->warmup)
            t[i - o->warmup] = t1 - t0;
    }
    return summarize(t, o->reps);
}

/* GFLOP/s of one GEMM_REF^3 attn_gemm, the throughput every part is compared with. */
static double gemm_reference(attn_dtype dt, const options *o) {
    int64_t shape[2] = {GEMM_REF, GEMM_REF};
    size_t count = (size_t)GEMM_REF * GEMM_REF, es = attn_dtype_size(dt);
    void *m[3];
    attn_view v[3];
    for (int i = 0; i < 3; ++i) {
        if (!(m[i] = alloc64(count * es)))
            die(EXIT_USAGE, "cannot allocate the %d^3 reference GEMM", GEMM_REF);
        fill_uniform(m[i], count, dt, 1.0, (uint64_t)i + 100);
        attn_view_init(&v[i], dt, m[i], 2, shape);
    }
    int reps = o->reps < 3 ? 3 : o->reps > 5 ? 5 : o->reps;
    double t[MAX_REPS];
    for (int i = 0; i < 1 + reps; ++i) {
        progress("reference %s GEMM %d^3 %d/%d", dt == ATTN_F32 ? "sgemm" : "dgemm", GEMM_REF,
                 i + 1, 1 + reps);
        double t0 = now();
        attn_status st = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &v[0], &v[1], 0.0, &v[2],
                                   NULL, 0);
        double t1 = now();
        if (st != ATTN_OK)
            die(1, "reference attn_gemm: %s", attn_strerror(st));
        if (i >= 1)
            t[i - 1] = t1 - t0;
    }
    for (int i = 0; i < 3; ++i)
        free(m[i]);
    return 2.0 * GEMM_REF * GEMM_REF * (double)GEMM_REF / summarize(t, reps).med / 1e9;
}

/* ---- crossover ------------------------------------------------------------ */

static double gflops(int64_t macs, double seconds) { return 2.0 * (double)macs / seconds / 1e9; }

/*
 * Where the attention core's median time first exceeds the linear part's:
 * log-log interpolation of r(n) = log(t_att / t_lin) between the bracketing
 * points. If it never does, extrapolate from the last two points (when r
 * grows); if it already does at the first n, there is no bracket.
 */
static crossover find_crossover(const result *r) {
    crossover x = {NAN, "none", NAN, NAN};
    double lr[MAX_N];
    for (int i = 0; i < r->np; ++i)
        lr[i] = log(r->pt[i].t[ATT].med / r->pt[i].t[LIN].med);
    int i1 = -1;
    if (r->np > 0 && lr[0] > 0) {
        x.kind = "below-range";
        x.n = (double)r->pt[0].n;
        i1 = 0;
    } else {
        for (int i = 1; i < r->np && i1 < 0; ++i)
            if (lr[i] > 0)
                i1 = i;
        if (i1 < 0 && r->np >= 2 && lr[r->np - 1] > lr[r->np - 2])
            i1 = r->np - 1, x.kind = "extrapolated";
        else if (i1 > 0)
            x.kind = "interpolated";
    }
    if (i1 < 0)
        return x;
    int i0 = i1 > 0 ? i1 - 1 : 0;
    const point *a = &r->pt[i0], *b = &r->pt[i1];
    double s = i1 > i0 ? -lr[i0] / (lr[i1] - lr[i0]) : 0.0; /* 0 at a, 1 at b */
    double la = log((double)a->n), lb = log((double)b->n);
    if (i1 > i0)
        x.n = exp(la + s * (lb - la));
    /* the rates at the crossover, interpolated the same way in log space */
    double ra = gflops(lin_macs(&r->cfg, a->n), a->t[LIN].med),
           rb = gflops(lin_macs(&r->cfg, b->n), b->t[LIN].med);
    x.rate_lin = exp(log(ra) + s * (log(rb) - log(ra)));
    ra = gflops(att_macs(&r->cfg, a->n), a->t[ATT].med);
    rb = gflops(att_macs(&r->cfg, b->n), b->t[ATT].med);
    x.rate_att = exp(log(ra) + s * (log(rb) - log(ra)));
    return x;
}

/*
 * One line on why measured and theory differ. The times cross where
 * MAC_att / rate_att = MAC_lin / rate_lin, and MAC_att / MAC_lin = n / n_theory,
 * so n_measured / n_theory = rate_att / rate_lin at the crossover.
 */
static void explain(result *r, double peak) {
    const crossover *x = &r->x;
    const config *c = &r->cfg;
    if (isnan(x->n)) {
        snprintf(r->why, sizeof r->why,
                 "the attention core stayed faster than the linear part at every n measured "
                 "(sweep further: --nmax)");
        return;
    }
    if (!strcmp(x->kind, "below-range")) {
        snprintf(r->why, sizeof r->why,
                 "the attention core is already the slower part at the smallest n "
                 "(sweep lower: --nmin)");
        return;
    }
    double q = x->n / r->theory;
    int len = snprintf(r->why, sizeof r->why,
                       "measured/theory = %.2f = attention's %.0f GFLOP/s (%.0f%% of gemm) / "
                       "linear's %.0f GFLOP/s (%.0f%%) near the crossover: ",
                       q, x->rate_att, 100.0 * x->rate_att / peak, x->rate_lin,
                       100.0 * x->rate_lin / peak);
    if (len < 0 || (size_t)len >= sizeof r->why)
        return;
    if (q < 1)
        snprintf(r->why + len, sizeof r->why - (size_t)len,
                 "attention's GEMMs have k = D = %lld (not d = %lld) and it also pays n^2 H "
                 "exponentials%s, so each of its multiply-adds takes longer and its time "
                 "overtakes earlier than its work does",
                 (long long)(c->d / c->heads), (long long)c->d,
                 c->causal ? " and full diagonal tiles" : "");
    else
        snprintf(r->why + len, sizeof r->why - (size_t)len,
                 "attention's multiply-adds run faster than the projections' and the FFN's "
                 "(which also pay bias, GELU and memory traffic over n F), so its time "
                 "overtakes later than its work does");
}

/* ---- output: table, CSV, JSON, plot ------------------------------------- */

static const char *dtype_name(attn_dtype dt) { return dt == ATTN_F32 ? "f32" : "f64"; }
static const char *algo_name(attn_algo a) {
    return a == ATTN_ALGO_TILED ? "tiled" : a == ATTN_ALGO_MATERIALIZED ? "materialized" : "auto";
}

static void print_config_header(const config *c, const options *o) {
    printf("\n== d %lld, %lld heads (D %lld), F %lld, batch %lld, %s, %s, algo %s, "
           "%d threads ==\n",
           (long long)c->d, (long long)c->heads, (long long)(c->d / c->heads),
           (long long)c->ff, (long long)c->batch, dtype_name(c->dt),
           c->causal ? "causal" : "non-causal", algo_name(o->algo), o->threads);
}

static void print_measured(const result *r, const options *o, double peak) {
    printf("Measured: median of %d after %d warm-up; spread = (max - min) / median; "
           "GF/s = 2 MAC / median; %%gemm = GF/s / %.1f (the %s %d^3)\n",
           o->reps, o->warmup, peak, r->cfg.dt == ATTN_F32 ? "sgemm" : "dgemm", GEMM_REF);
    static const char *title[NPARTS] = {"linear ms", "attention ms", "mha ms", "block ms"};
    printf("%7s |", "n");
    for (int k = 0; k < NPARTS; ++k)
        printf("%13s %6s %6s %5s |", title[k], "spread", "GF/s", "%gemm");
    printf(" workspace MiB lin/attn/mha/block\n");
    for (int i = 0; i < r->np; ++i) {
        const point *p = &r->pt[i];
        printf("%7lld |", (long long)p->n);
        for (int k = 0; k < NPARTS; ++k) {
            double g = gflops(part_macs(&r->cfg, p->n, k), p->t[k].med);
            printf("%13.2f %5.1f%% %6.1f %4.0f%% |", 1e3 * p->t[k].med,
                   100.0 * (p->t[k].max - p->t[k].min) / p->t[k].med, g, 100.0 * g / peak);
        }
        for (int k = 0; k < NPARTS; ++k)
            printf("%s%.1f", k ? " / " : " ", p->ws[k] / 1048576.0);
        printf("\n");
    }
}

static void print_crossover(const result *r) {
    printf("Crossover: theory %s = %.0f; measured ", theory_name(&r->cfg), r->theory);
    if (isnan(r->x.n))
        printf("none in the range swept\n");
    else if (!strcmp(r->x.kind, "below-range"))
        printf("below the first n (attention already slower at n = %.0f)\n", r->x.n);
    else
        printf("%.0f (%s)\n", r->x.n, r->x.kind);
    printf("  %s.\n", r->why);
}

/* One CSV row per (configuration, n); the columns are documented in docs/benchmarks.md. */
static void write_csv_header(FILE *f) {
    fprintf(f, "d,heads,d_head,ff,batch,dtype,causal,algo,threads,n,reps,warmup");
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_macs", part_key[k]);
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_flops", part_key[k]);
    fprintf(f, ",attn_share");
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_ms_median,%s_ms_min,%s_ms_max", part_key[k], part_key[k], part_key[k]);
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_gflops", part_key[k]);
    fprintf(f, ",gemm_gflops");
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_frac_gemm", part_key[k]);
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_ws_bytes", part_key[k]);
    fprintf(f, ",theory_crossover,measured_crossover,crossover_kind");
    fprintf(f, ",gemm_gflops_start,gemm_gflops_end,gemm_spread,tuned_env,attn_version,blas_config,"
               "blas_corename,blas_threading,blas_threads,omp_threads,cpu,env,date\n");
}

static void write_csv_rows(FILE *f, const result *r, const options *o, const reference *ref) {
    double peak = ref->best;
    const config *c = &r->cfg;
    for (int i = 0; i < r->np; ++i) {
        const point *p = &r->pt[i];
        int64_t macs[NPARTS];
        for (int k = 0; k < NPARTS; ++k)
            macs[k] = part_macs(c, p->n, k);
        fprintf(f, "%lld,%lld,%lld,%lld,%lld,%s,%d,%s,%d,%lld,%d,%d", (long long)c->d,
                (long long)c->heads, (long long)(c->d / c->heads), (long long)c->ff,
                (long long)c->batch, dtype_name(c->dt), c->causal, algo_name(o->algo),
                o->threads, (long long)p->n, o->reps, o->warmup);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%lld", (long long)macs[k]);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%lld", (long long)(2 * macs[k]));
        fprintf(f, ",%.6f", (double)macs[ATT] / (double)macs[BLK]);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%.4f,%.4f,%.4f", 1e3 * p->t[k].med, 1e3 * p->t[k].min,
                    1e3 * p->t[k].max);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%.3f", gflops(macs[k], p->t[k].med));
        fprintf(f, ",%.3f", peak);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%.4f", gflops(macs[k], p->t[k].med) / peak);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%zu", p->ws[k]);
        fprintf(f, ",%.0f,", r->theory);
        if (!isnan(r->x.n))
            fprintf(f, "%.1f", r->x.n);
        fprintf(f, ",%s", r->x.kind);
        fprintf(f, ",%.3f,%.3f,%.4f,%d,%s,%s,%s,%s,%d,%d,%s,%s,%s\n", ref->start, ref->end,
                ref->spread, o->tuned_env, env.attn, env.blas_config, env.blas_core,
                env.blas_threading, env.blas_threads, env.omp_threads, env.cpu, env.vars,
                env.date);
    }
    fflush(f);
}

/* JSON strings here are our own ASCII text: only quotes and backslashes to escape. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void write_json(const char *path, const result *res, int nres, const options *o,
                       const reference *const *refs) {
    FILE *f = fopen(path, "w");
    if (!f)
        die(1, "cannot write %s: %s", path, strerror(errno));
    fprintf(f, "{\n  \"program\": \"attn-bench\",\n  \"attn_version\": \"%s\",\n",
            ATTN_VERSION_STRING);
    fprintf(f, "  \"environment\": {");
    bench_env_json(f, &env);
    fprintf(f, ", \"tuned_env\": %s},\n", o->tuned_env ? "true" : "false");
    fprintf(f, "  \"threads\": %d,\n  \"algo\": \"%s\",\n  \"reps\": %d,\n  \"warmup\": %d,\n",
            o->threads, algo_name(o->algo), o->reps, o->warmup);
    fprintf(f, "  \"gemm_reference\": \"%d^3\",\n  \"runs\": [\n", GEMM_REF);
    for (int r = 0; r < nres; ++r) {
        const result *R = &res[r];
        const config *c = &R->cfg;
        fprintf(f, "    {\"d\": %lld, \"heads\": %lld, \"d_head\": %lld, \"ff\": %lld, "
                   "\"batch\": %lld, \"dtype\": \"%s\", \"causal\": %s,\n",
                (long long)c->d, (long long)c->heads, (long long)(c->d / c->heads),
                (long long)c->ff, (long long)c->batch, dtype_name(c->dt),
                c->causal ? "true" : "false");
        fprintf(f, "     \"gemm_gflops\": %.3f, \"gemm_gflops_start\": %.3f, "
                   "\"gemm_gflops_end\": %.3f, \"gemm_spread\": %.4f,\n"
                   "     \"theory_crossover\": %.0f, \"theory_name\": \"%s\", ",
                refs[r]->best, refs[r]->start, refs[r]->end, refs[r]->spread, R->theory,
                theory_name(c));
        if (isnan(R->x.n))
            fprintf(f, "\"measured_crossover\": null, ");
        else
            fprintf(f, "\"measured_crossover\": %.1f, ", R->x.n);
        fprintf(f, "\"crossover_kind\": \"%s\",\n     \"explanation\": ", R->x.kind);
        json_string(f, R->why);
        fprintf(f, ",\n     \"points\": [\n");
        for (int i = 0; i < R->np; ++i) {
            const point *p = &R->pt[i];
            fprintf(f, "       {\"n\": %lld", (long long)p->n);
            for (int k = 0; k < NPARTS; ++k)
                fprintf(f, ", \"%s\": {\"macs\": %lld, \"ms_median\": %.4f, \"ms_min\": %.4f, "
                           "\"ms_max\": %.4f, \"gflops\": %.3f, \"workspace_bytes\": %zu}",
                        part_key[k], (long long)part_macs(c, p->n, k), 1e3 * p->t[k].med,
                        1e3 * p->t[k].min, 1e3 * p->t[k].max,
                        gflops(part_macs(c, p->n, k), p->t[k].med), p->ws[k]);
            fprintf(f, "}%s\n", i + 1 < R->np ? "," : "");
        }
        fprintf(f, "     ]}%s\n", r + 1 < nres ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0)
        die(1, "cannot write %s", path);
}

static bool have_gnuplot(void) {
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Time against n, log-log, one panel per configuration, through gnuplot. */
static void write_plot(const char *path, const result *res, int nres, int threads) {
    char data[] = "/tmp/attn-bench-XXXXXX";
    int fd = mkstemp(data);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f)
        die(1, "cannot create a temporary file for the plot data");
    for (int r = 0; r < nres; ++r) {
        for (int i = 0; i < res[r].np; ++i)
            fprintf(f, "%lld %.6g %.6g %.6g\n", (long long)res[r].pt[i].n,
                    1e3 * res[r].pt[i].t[LIN].med, 1e3 * res[r].pt[i].t[ATT].med,
                    1e3 * res[r].pt[i].t[BLK].med);
        fprintf(f, "\n\n");
    }
    fclose(f);
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        remove(data);
        die(1, "cannot run gnuplot");
    }
    int cols = nres > 1 ? 2 : 1, rows = (nres + cols - 1) / cols;
    if (ends_with(path, ".svg"))
        fprintf(g, "set terminal svg size %d,%d dynamic font 'sans,11'\n", 640 * cols,
                460 * rows);
    else
        fprintf(g, "set terminal pngcairo size %d,%d font 'sans,10'\n", 640 * cols, 460 * rows);
    fprintf(g, "set output '%s'\n", path);
    fprintf(g, "set multiplot layout %d,%d title 'attn-bench: one encoder layer, time per "
               "forward pass against sequence length n (%d threads)'\n",
            rows, cols, threads);
    fprintf(g, "set logscale x 2\nset logscale y 10\nset format y '%%g'\n"
               "set grid xtics ytics\nset key top left opaque box\nset xlabel 'sequence length n'\n"
               "set ylabel 'time per forward pass (ms)'\n"
               "set style line 1 lc rgb '#1f77b4' lw 2 pt 7\n"
               "set style line 2 lc rgb '#d62728' lw 2 pt 5\n"
               "set style line 3 lc rgb '#555555' lw 1.5 pt 9 dt 3\n");
    for (int r = 0; r < nres; ++r) {
        const result *R = &res[r];
        const config *c = &R->cfg;
        bool have_x = !isnan(R->x.n);
        double lo = fmin((double)R->pt[0].n, R->theory), hi = fmax((double)R->pt[R->np - 1].n, R->theory);
        if (have_x)
            lo = fmin(lo, R->x.n), hi = fmax(hi, R->x.n);
        fprintf(g, "unset arrow\nunset label\nset xrange [%g:%g]\n", lo / 1.4, hi * 1.4);
        fprintf(g, "set title 'd %lld, %lld heads, F %lld, batch %lld, %s, %s'\n",
                (long long)c->d, (long long)c->heads, (long long)c->ff, (long long)c->batch,
                dtype_name(c->dt), c->causal ? "causal" : "non-causal");
        /* vertical lines, their labels written along them on opposite sides */
        bool x_left = have_x && R->x.n <= R->theory;
        fprintf(g, "set arrow from %g, graph 0 to %g, graph 1 nohead dt 2 lw 1.5 lc rgb "
                   "'#2ca02c'\n",
                R->theory, R->theory);
        fprintf(g, "set label 'theory %s = %.0f' at %g, graph 0.03 rotate by 90 left "
                   "offset %s tc rgb '#2ca02c'\n",
                theory_name(c), R->theory, R->theory, x_left ? "1.2,0" : "-1.9,0");
        if (have_x) {
            char what[64];
            if (!strcmp(R->x.kind, "below-range"))
                snprintf(what, sizeof what, "attention slower from n = %.0f", R->x.n);
            else
                snprintf(what, sizeof what, "measured %.0f%s", R->x.n,
                         strcmp(R->x.kind, "interpolated") ? " (extrapolated)" : "");
            fprintf(g, "set arrow from %g, graph 0 to %g, graph 1 nohead lw 1.5 lc rgb "
                       "'#9467bd'\n",
                    R->x.n, R->x.n);
            fprintf(g, "set label '%s' at %g, graph 0.03 rotate by 90 left offset %s "
                       "tc rgb '#9467bd'\n",
                    what, R->x.n, x_left ? "-1.9,0" : "1.2,0");
        }
        fprintf(g, "plot '%s' index %d using 1:2 with linespoints ls 1 title 'linear part "
                   "(QKVO + FFN)', '' index %d using 1:3 with linespoints ls 2 title "
                   "'attention core (sdpa)', '' index %d using 1:4 with linespoints ls 3 "
                   "title 'encoder block'\n",
                data, r, r, r);
    }
    fprintf(g, "unset multiplot\n");
    int rc = pclose(g);
    remove(data);
    if (rc != 0)
        die(1, "gnuplot failed to draw %s", path);
}

/* ---- command line --------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
        "usage: attn-bench [options]\n"
        "Sweeps the sequence length n and times, per n, the linear part (Q, K, V, O\n"
        "projections + FFN), the attention core (sdpa) and the whole encoder block,\n"
        "and reports where attention's O(n^2) time overtakes the linear part.\n\n"
        "  --d N            model width d (768)\n"
        "  --heads N        heads H, must divide d (d / 64: 12 for d 768)\n"
        "  --ff N           feed-forward width F (4d)\n"
        "  --batch N        batch B (1)\n"
        "  --dtype f32|f64  element type (f32)\n"
        "  --causal         causal mask (masked tiles skipped)\n"
        "  --algo auto|tiled|materialized   sdpa algorithm (auto)\n"
        "  --threads N      attn's and the BLAS's threads (default: what the\n"
        "                   environment gives, as in a user's program)\n"
        "  --tuned-env      also set OMP_WAIT_POLICY=PASSIVE and\n"
        "                   OPENBLAS_THREAD_TIMEOUT=4 (unless already set)\n"
        "  --reps N         timed repetitions per part and n (5)\n"
        "  --warmup N       untimed repetitions before them (1)\n"
        "  --n LIST         sequence lengths, comma separated\n"
        "  --nmin N, --nmax N   geometric range, factor 2 (128..16384)\n"
        "  --csv FILE       one row per (configuration, n)\n"
        "  --json FILE      the same, with the crossovers, as JSON\n"
        "  --plot FILE      .png or .svg: time against n, log-log (needs gnuplot)\n"
        "  --quick          the README's main job, under two minutes on 2 cores:\n"
        "                   d 256 and 768 (D 64, F 4d), non-causal and causal,\n"
        "                   n = 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288,\n"
        "                   16384, each stopping at the first n (after the first)\n"
        "                   where attention is the slower part,\n"
        "                   3 reps after 1 warm-up\n"
        "  --seed-table     print only the analytic table of the lecture-7 seed\n"
        "                   (n 128..65536; d 768 unless --d) and exit\n"
        "  --version        attn-bench's and attn's version\n"
        "  --help           this text\n"
        "Exit status: 0 done, 1 a library call failed, 2 bad arguments or a size\n"
        "that cannot be allocated.\n");
}

static int64_t parse_int(const char *flag, const char *s, int64_t lo, int64_t hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || errno || *end || v < lo || v > hi)
        die(EXIT_USAGE, "%s wants an integer in %lld..%lld, got '%s'", flag, (long long)lo,
            (long long)hi, s);
    return v;
}

static int parse_list(const char *s, int64_t *out) {
    int n = 0;
    char buf[1024];
    if (strlen(s) >= sizeof buf)
        die(EXIT_USAGE, "--n wants a comma-separated list of sequence lengths");
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_N)
            die(EXIT_USAGE, "--n: at most %d sequence lengths", MAX_N);
        out[n++] = parse_int("--n", tok, 1, INT64_C(1) << 40);
    }
    if (n == 0)
        die(EXIT_USAGE, "--n wants a comma-separated list of sequence lengths");
    return n;
}

static const int64_t seed_ns[] = {128, 512, 1024, 4096, 16384, 65536};

static const char *const switches[] = {"--help",      "--causal",    "--quick", "--version",
                                       "--tuned-env", "--seed-table", NULL};
static const char *const valued[] = {"--d",     "--heads", "--ff",   "--batch", "--dtype",
                                     "--algo",  "--threads", "--reps", "--warmup", "--n",
                                     "--nmin",  "--nmax",  "--csv",  "--json",  "--plot", NULL};

static bool in_list(const char *s, const char *const *list) {
    for (; *list; ++list)
        if (!strcmp(s, *list))
            return true;
    return false;
}

static void parse_args(int argc, char **argv, options *o) {
    config c = {.d = 768, .heads = 12, .ff = 0, .batch = 1, .dt = ATTN_F32};
    int64_t nmin = 128, nmax = 16384;
    bool set_d = false, set_heads = false, set_ff = false, set_causal = false;
    bool set_n = false, set_range = false, set_reps = false, set_warmup = false;
    memset(o, 0, sizeof *o);
    o->reps = 5;
    o->warmup = 1;
    for (int i = 1; i < argc; ++i) {
        char flag[64];
        const char *a = argv[i], *val = NULL, *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) || strlen(a) >= sizeof flag)
            die(EXIT_USAGE, "unexpected argument '%s' (see --help)", a);
        snprintf(flag, sizeof flag, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        bool is_switch = in_list(flag, switches);
        if (!is_switch && !in_list(flag, valued))
            die(EXIT_USAGE, "unknown option '%s' (see --help)", flag);
        if (is_switch) {
            if (eq)
                die(EXIT_USAGE, "%s takes no value", flag);
        } else if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        }
        if (!is_switch && (!val || !*val))
            die(EXIT_USAGE, "%s needs a value", flag);
        const int64_t big = INT64_C(1) << 40;
        if (!strcmp(flag, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(flag, "--d")) {
            c.d = parse_int(flag, val, 1, 1 << 20), set_d = true;
        } else if (!strcmp(flag, "--heads")) {
            c.heads = parse_int(flag, val, 1, 1 << 20), set_heads = true;
        } else if (!strcmp(flag, "--ff")) {
            c.ff = parse_int(flag, val, 1, 1 << 24), set_ff = true;
        } else if (!strcmp(flag, "--batch")) {
            c.batch = parse_int(flag, val, 1, 1 << 20);
        } else if (!strcmp(flag, "--dtype")) {
            if (!strcmp(val, "f32"))
                c.dt = ATTN_F32;
            else if (!strcmp(val, "f64"))
                c.dt = ATTN_F64;
            else
                die(EXIT_USAGE, "--dtype wants f32 or f64, got '%s'", val);
        } else if (!strcmp(flag, "--causal")) {
            c.causal = set_causal = true;
        } else if (!strcmp(flag, "--algo")) {
            if (!strcmp(val, "auto"))
                o->algo = ATTN_ALGO_AUTO;
            else if (!strcmp(val, "tiled"))
                o->algo = ATTN_ALGO_TILED;
            else if (!strcmp(val, "materialized"))
                o->algo = ATTN_ALGO_MATERIALIZED;
            else
                die(EXIT_USAGE, "--algo wants auto, tiled or materialized, got '%s'", val);
        } else if (!strcmp(flag, "--threads")) {
            o->threads = (int)parse_int(flag, val, 1, 1024), o->threads_set = true;
        } else if (!strcmp(flag, "--reps")) {
            o->reps = (int)parse_int(flag, val, 1, MAX_REPS), set_reps = true;
        } else if (!strcmp(flag, "--warmup")) {
            o->warmup = (int)parse_int(flag, val, 0, MAX_REPS), set_warmup = true;
        } else if (!strcmp(flag, "--n")) {
            o->nn = parse_list(val, o->n), set_n = true;
        } else if (!strcmp(flag, "--nmin")) {
            nmin = parse_int(flag, val, 1, big), set_range = true;
        } else if (!strcmp(flag, "--nmax")) {
            nmax = parse_int(flag, val, 1, big), set_range = true;
        } else if (!strcmp(flag, "--csv")) {
            o->csv = val;
        } else if (!strcmp(flag, "--json")) {
            o->json = val;
        } else if (!strcmp(flag, "--plot")) {
            o->plot = val;
        } else if (!strcmp(flag, "--quick")) {
            o->quick = true;
        } else if (!strcmp(flag, "--version")) {
            printf("attn-bench (attn %s)\n", ATTN_VERSION_STRING);
            exit(0);
        } else if (!strcmp(flag, "--tuned-env")) {
            o->tuned_env = true;
        } else { /* --seed-table, the last one in_list knows */
            o->seed_table = true;
        }
    }
    if (set_n && set_range)
        die(EXIT_USAGE, "give either --n or --nmin/--nmax, not both");
    if (nmin > nmax)
        die(EXIT_USAGE, "--nmin %lld is larger than --nmax %lld", (long long)nmin,
            (long long)nmax);
    if (o->plot && !ends_with(o->plot, ".png") && !ends_with(o->plot, ".svg"))
        die(EXIT_USAGE, "--plot wants a file name ending in .png or .svg");
    if (o->plot && strchr(o->plot, '\''))
        die(EXIT_USAGE, "--plot: the file name must not contain a quote");
    if (!set_heads) /* D = 64, as GPT-2 and BERT: 12 heads for d = 768 */
        c.heads = c.d % 64 == 0 ? c.d / 64 : 0;
    if (!o->quick && set_heads && c.d % c.heads)
        die(EXIT_USAGE, "--heads %lld does not divide d = %lld", (long long)c.heads,
            (long long)c.d);
    if (!o->quick && !c.heads)
        die(EXIT_USAGE, "d = %lld is not a multiple of 64 (the default head width): "
            "set --heads to a divisor of d", (long long)c.d);
    if (!set_ff)
        c.ff = 4 * c.d;
    if (o->quick) {
        if (set_d || set_heads || set_ff || set_causal)
            die(EXIT_USAGE, "--quick sweeps fixed shapes; it cannot be combined with "
                            "--d, --heads, --ff or --causal");
        static const int64_t quick_d[2] = {256, 768};
        for (int k = 0; k < 4; ++k) {
            o->cfg[k] = c;
            o->cfg[k].d = quick_d[k / 2];
            o->cfg[k].heads = quick_d[k / 2] / 64;
            o->cfg[k].ff = 4 * quick_d[k / 2];
            o->cfg[k].causal = k % 2;
        }
        o->ncfg = 4;
        if (!set_n && !set_range) { /* finer past 2048: a closer bracket, less overshoot */
            static const int64_t quick_ns[] = {256,  512,  1024, 2048,  3072,
                                               4096, 6144, 8192, 12288, 16384};
            memcpy(o->n, quick_ns, sizeof quick_ns);
            o->nn = (int)(sizeof quick_ns / sizeof quick_ns[0]);
            set_n = true;
        }
        if (!set_reps)
            o->reps = 3;
        if (!set_warmup)
            o->warmup = 1;
    } else {
        o->cfg[0] = c;
        o->ncfg = 1;
    }
    if (o->seed_table) {
        memcpy(o->n, seed_ns, sizeof seed_ns);
        o->nn = (int)(sizeof seed_ns / sizeof seed_ns[0]);
    } else if (!set_n) {
        o->nn = 0;
        for (int64_t n = nmin; n <= nmax && o->nn < MAX_N; n *= 2)
            o->n[o->nn++] = n;
    }
    for (int k = 0; k < o->ncfg; ++k)
        for (int i = 0; i < o->nn; ++i)
            if (!macs_fit(&o->cfg[k], o->n[i]))
                die(EXIT_USAGE, "n = %lld with d = %lld is too large to count",
                    (long long)o->n[i], (long long)o->cfg[k].d);
}

/*
 * By default attn-bench changes nothing in the environment: its figures are
 * what a user's program gets (attn manages its own threads and the BLAS's,
 * docs/design.md "Threads and the BLAS").
 *
 * --threads N: attn's loops use OpenMP's team size and the BLAS its own
 * thread count, both read from the environment when the libraries load, so
 * set OMP_NUM_THREADS and OPENBLAS_NUM_THREADS and re-execute once; the sdpa
 * options carry the same count.
 *
 * --tuned-env: also OPENBLAS_THREAD_TIMEOUT=4 and OMP_WAIT_POLICY=PASSIVE,
 * unless the user set them (idle BLAS and OpenMP workers sleep at once
 * instead of spinning; the settings attn-bench used before attn managed its
 * threads itself, kept to compare against).
 */
#define NENV 4
static const char *const thread_env[NENV][2] = {{"OPENBLAS_NUM_THREADS", NULL},
                                                 {"OMP_NUM_THREADS", NULL},
                                                 {"OPENBLAS_THREAD_TIMEOUT", "4"},
                                                 {"OMP_WAIT_POLICY", "PASSIVE"}};

static void apply_threads(options *o, char **argv) {
    char want[16];
    snprintf(want, sizeof want, "%d", o->threads);
    bool same = true;
    for (int i = 0; i < NENV; ++i) {
        const char *have = getenv(thread_env[i][0]), *w = thread_env[i][1] ? thread_env[i][1] : want;
        if (thread_env[i][1] ? !o->tuned_env || have : !o->threads_set)
            continue; /* not asked for, or the user's own wait setting */
        if (!have || strcmp(have, w)) {
            same = false;
            setenv(thread_env[i][0], w, 1);
        }
    }
    if (!o->threads_set) /* what attn's loops will run: OpenMP's team */
        o->threads = omp_get_max_threads ? omp_get_max_threads() : 1;
    if (same)
        return;
    if (getenv("ATTN_BENCH_REEXEC")) {
        fprintf(stderr, "%s: warning: could not set the thread environment (%s threads)\n",
                prog, want);
        return;
    }
    setenv("ATTN_BENCH_REEXEC", "1", 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "%s: warning: cannot re-execute to set %s threads (%s)\n", prog, want,
            strerror(errno));
}

/* ---- main -------------------------------------------------------------------- */

/* Check every (configuration, n) can be allocated before spending time on any. */
static void dry_run(const options *o) {
    for (int k = 0; k < o->ncfg; ++k) {
        bench b;
        bench_init(&b, &o->cfg[k], o);
        for (int i = 0; i < o->nn; ++i) {
            bool ok = bench_setup_point(&b, o->n[i], false);
            bench_free_point(&b);
            if (!ok)
                die(EXIT_USAGE, "n = %lld, d = %lld: %s", (long long)o->n[i],
                    (long long)o->cfg[k].d, b.why);
        }
        bench_free(&b);
    }
}

int main(int argc, char **argv) {
    static options o;
    parse_args(argc, argv, &o);
    if (o.seed_table) {
        printf("Multiply-adds per layer, d = %lld, F = %lld, batch %lld%s (the lecture-7 "
               "seed's table):\n",
               (long long)o.cfg[0].d, (long long)o.cfg[0].ff, (long long)o.cfg[0].batch,
               o.cfg[0].causal ? ", causal" : "");
        print_analytic(stdout, &o.cfg[0], o.n, o.nn);
        return 0;
    }
    apply_threads(&o, argv);
    progress_on = isatty(STDERR_FILENO);
    FILE *csv = NULL;
    if (o.csv && !(csv = fopen(o.csv, "w")))
        die(EXIT_USAGE, "cannot write %s: %s", o.csv, strerror(errno));
    bool plot = o.plot != NULL;
    if (plot && !have_gnuplot()) {
        fprintf(stderr, "%s: --plot needs gnuplot, which is not installed (apt-get install "
                        "gnuplot-nox); no plot will be drawn\n", prog);
        plot = false;
    }
    dry_run(&o);
    if (csv)
        write_csv_header(csv);

    static result res[MAX_CONFIGS];
    static reference refs[3];              /* per dtype */
    const reference *ref_of[MAX_CONFIGS];  /* per configuration */
    bench_env_collect(&env);
    printf("attn-bench (attn %s): %d threads%s\n", ATTN_VERSION_STRING, o.threads,
           o.tuned_env ? "; --tuned-env: OMP_WAIT_POLICY and OPENBLAS_THREAD_TIMEOUT as below"
                       : "; the environment as given (nothing set by attn-bench)");
    bench_env_print(stdout, "  ", &env);
    bench_env_kernel_note(stdout, "  ", &env);
    for (int k = 0; k < o.ncfg; ++k) {
        const config *c = &o.cfg[k];
        reference *ref = &refs[c->dt];
        if (!ref->start) {
            ref->start = gemm_reference(c->dt, &o);
            progress("");
            printf("Reference at the start: attn_gemm %d^3 %s: %.1f GFLOP/s\n", GEMM_REF,
                   dtype_name(c->dt), ref->start);
        }
        ref_of[k] = ref;
        result *r = &res[k];
        r->cfg = *c;
        r->theory = theory_crossover(c);
        print_config_header(c, &o);
        printf("Analytic multiply-adds per layer (the lecture-7 seed's table; FLOPs = 2 MAC):\n");
        print_analytic(stdout, c, o.n, o.nn);
        fflush(stdout);
        bench b;
        bench_init(&b, c, &o);
        for (int i = 0; i < o.nn; ++i) {
            char label[96];
            snprintf(label, sizeof label, "d %lld%s n %lld:", (long long)c->d,
                     c->causal ? " causal" : "", (long long)o.n[i]);
            if (!bench_setup_point(&b, o.n[i], true))
                die(EXIT_USAGE, "n = %lld: %s", (long long)o.n[i], b.why);
            point *p = &r->pt[r->np++];
            p->n = o.n[i];
            for (int part = 0; part < NPARTS; ++part) {
                p->t[part] = time_part(&b, part, &o, label);
                p->ws[part] = b.wsz[part];
            }
            bench_free_point(&b);
            if (!progress_on) /* a log, a pipe, CI: one line per finished n */
                fprintf(stderr, "%s: d %lld%s n %lld done: linear %.2f ms, attention %.2f ms, "
                        "block %.2f ms\n", prog, (long long)c->d, c->causal ? " causal" : "",
                        (long long)o.n[i], 1e3 * p->t[LIN].med, 1e3 * p->t[ATT].med,
                        1e3 * p->t[BLK].med);
            /* --quick stops a sweep once the attention core is the slower part */
            if (o.quick && p->t[ATT].med > p->t[LIN].med && r->np >= 2)
                break;
        }
        bench_free(&b);
        progress("");
    }
    /* the reference again at the end: the better of the two counts, a large spread is flagged */
    for (int dt = 0; dt < 3; ++dt) {
        reference *ref = &refs[dt];
        if (!ref->start)
            continue;
        ref->end = gemm_reference((attn_dtype)dt, &o);
        progress("");
        ref->best = ref->start > ref->end ? ref->start : ref->end;
        ref->spread = fabs(ref->start - ref->end) / ref->best;
        printf("\nReference attn_gemm %d^3 %s: %.1f GFLOP/s at the start, %.1f at the end; "
               "%%gemm uses %.1f\n",
               GEMM_REF, dtype_name((attn_dtype)dt), ref->start, ref->end, ref->best);
        if (ref->spread > 0.10)
            printf("WARNING: the reference moved by %.0f%% during the run (a busy machine?): "
                   "the %%gemm columns are uncertain; check the load and run again\n",
                   100 * ref->spread);
    }
    for (int k = 0; k < o.ncfg; ++k) {
        result *r = &res[k];
        print_config_header(&r->cfg, &o);
        r->x = find_crossover(r);
        explain(r, ref_of[k]->best);
        print_measured(r, &o, ref_of[k]->best);
        print_crossover(r);
        fflush(stdout);
        if (csv)
            write_csv_rows(csv, r, &o, ref_of[k]);
    }
    if (o.ncfg > 1) {
        printf("\nSummary (measured crossover n vs theory):\n");
        for (int k = 0; k < o.ncfg; ++k) {
            const result *r = &res[k];
            printf("  d %4lld %-10s theory %-3s = %5.0f   measured %6.0f  (%s, ratio %.2f)\n",
                   (long long)r->cfg.d, r->cfg.causal ? "causal" : "non-causal",
                   theory_name(&r->cfg), r->theory, r->x.n, r->x.kind, r->x.n / r->theory);
        }
    }
    if (csv && fclose(csv) != 0)
        die(1, "cannot write %s", o.csv);
    if (o.json)
        write_json(o.json, res, o.ncfg, &o, ref_of);
    if (plot) {
        write_plot(o.plot, res, o.ncfg, o.threads);
        printf("Plot: %s\n", o.plot);
    }
    return 0;
}
