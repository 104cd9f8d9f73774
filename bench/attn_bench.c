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
 * With --window W the attention core, MHA and block run again with a causal
 * window of W keys, whose attention work is B d (2 n W - W^2): linear in n past
 * n = W, so its crossover moves out or disappears (attn_bench.h).
 * The command line is in bench_args.c, the tables and files in bench_out.c.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/gemm.h"
#include "attn/kernels.h"
#include "attn/layers.h"
#include "attn/version.h"
#include "attn_bench.h"
#include "bench_env.h"
#include "bench_util.h"

#define NBUF 9 /* activations: x, q, k, v, att, o, y, mha, out */

const char *const part_key[NPARTS] = {"lin", "attn", "mha", "block"};
const char *const win_key[NPARTS] = {"win_lin", "win_attn", "win_mha", "win_block"};
static const char *const part_call[NPARTS] = {"attn_linear/attn_ffn_forward", "attn_sdpa",
                                              "attn_mha_forward", "attn_encoder_forward"};

/* ---- small utilities ---------------------------------------------------- */

const char *const prog = "attn-bench";
static bench_env env; /* attn, BLAS, CPU, variables, date: in the header, CSV and JSON */

void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
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

static stats summarize(double *t, int n) {
    double med = bench_median(t, n); /* sorts t */
    stats s = {med, t[0], t[n - 1]};
    return s;
}

/* ---- one configuration's buffers and the timed parts ----------------------- */

typedef struct bench {
    const config       *cfg;
    attn_encoder_config ecfg;
    attn_encoder_params p;
    void               *slab;
    attn_sdpa_opts      opts;
    attn_sdpa_opts      wopts; /* opts with the causal window (cfg->window > 0) */
    /* per n: (B, n, C) activations and their (B, H, n, D) head views */
    void     *mem[NBUF];
    attn_view x, q, k, v, att, o, y, mha, out;
    attn_view hq, hk, hv, hatt;
    void     *ws[NPARTS];
    size_t    wsz[NPARTS], wszw[NPARTS]; /* the workspace queries, without and with the window */
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
    if (!bytes || !(b->slab = bench_alloc64(bytes)))
        die(EXIT_USAGE, "cannot allocate %zu bytes of parameters", bytes);
    bench_fill(b->slab, bytes / attn_dtype_size(c->dt), c->dt, 1.0 / sqrt((double)c->d), 1);
    st = attn_encoder_params_bind(&b->p, &b->ecfg, b->slab, bytes);
    if (st != ATTN_OK)
        die(EXIT_USAGE, "attn_encoder_params_bind: %s", attn_strerror(st));
    b->opts.causal = c->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    b->opts.algo = o->algo;
    b->opts.threads = o->threads_set ? o->threads : 0; /* 0: attn's own choice, as users get */
    b->wopts = b->opts;
    if (c->window > 0) { /* key j visible iff i - (W - 1) <= j <= i: W keys, causal */
        b->wopts.window = true;
        b->wopts.window_left = c->window - 1;
        b->wopts.window_right = 0;
    }
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
        if (!(b->mem[i] = bench_alloc64(count * es)) ||
            (st = attn_view_init(views[i], c->dt, b->mem[i], 3, shape)) != ATTN_OK) {
            snprintf(b->why, sizeof b->why, "activations: %s", attn_strerror(st));
            return false;
        }
        if (touch)
            bench_fill(b->mem[i], count, c->dt, 1.0, (uint64_t)i + 2);
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
    b->wszw[LIN] = b->wsz[LIN];
    b->wszw[ATT] = attn_sdpa_workspace_size(&b->hq, &b->hk, &b->hv, &b->wopts);
    b->wszw[MHA] = attn_mha_workspace_size(&b->ecfg.mha, &b->x, NULL, &b->wopts, NULL);
    b->wszw[BLK] = attn_encoder_workspace_size(&b->ecfg, &b->x, &b->wopts, NULL);
    size_t alloc[NPARTS]; /* one buffer per part serves both */
    for (int i = 0; i < NPARTS; ++i) {
        alloc[i] = b->cfg->window > 0 ? max_size(b->wsz[i], b->wszw[i]) : b->wsz[i];
        total += (double)alloc[i];
    }
    if (over_budget(b, total, "activations and workspace"))
        return false;
    for (int i = 0; i < NPARTS; ++i) {
        if (!(b->ws[i] = bench_alloc64(alloc[i]))) {
            snprintf(b->why, sizeof b->why, "cannot allocate %.2f GiB of %s workspace",
                     alloc[i] / 1073741824.0, part_call[i]);
            return false;
        }
        if (touch)
            memset(b->ws[i], 0, alloc[i]);
    }
    return true;
}

/* win: with the causal window (wopts) instead of opts. */
static attn_status run_part(bench *b, int part, bool win) {
    const attn_mha_params *m = &b->p.mha;
    const attn_sdpa_opts *so = win ? &b->wopts : &b->opts;
    void *w = b->ws[part];
    size_t ws = win ? b->wszw[part] : b->wsz[part];
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
        return attn_sdpa(&b->hq, &b->hk, &b->hv, so, &b->hatt, w, ws);
    case MHA: /* self-attention layer: projections, sdpa, output projection */
        return attn_mha_forward(&b->ecfg.mha, m, &b->x, NULL, so, &b->mha, NULL, w, ws);
    default:
        return attn_encoder_forward(&b->ecfg, &b->p, &b->x, so, &b->out, NULL, w, ws);
    }
}

static stats time_part(bench *b, int part, bool win, const options *o, const char *label) {
    double t[MAX_REPS];
    const char *key = win ? win_key[part] : part_key[part];
    for (int i = 0; i < o->warmup + o->reps; ++i) {
        progress("%s %s %s %d/%d", label, key, i < o->warmup ? "warm-up" : "rep",
                 i < o->warmup ? i + 1 : i - o->warmup + 1,
                 i < o->warmup ? o->warmup : o->reps);
        double t0 = bench_now();
        attn_status st = run_part(b, part, win);
        double t1 = bench_now();
        if (st != ATTN_OK)
            die(1, "%s: %s%s: %s", label, part_call[part], win ? " with the window" : "",
                attn_strerror(st));
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
        if (!(m[i] = bench_alloc64(count * es)))
            die(EXIT_USAGE, "cannot allocate the %d^3 reference GEMM", GEMM_REF);
        bench_fill(m[i], count, dt, 1.0, (uint64_t)i + 100);
        attn_view_init(&v[i], dt, m[i], 2, shape);
    }
    int reps = o->reps < 3 ? 3 : o->reps > 5 ? 5 : o->reps;
    double t[MAX_REPS];
    for (int i = 0; i < 1 + reps; ++i) {
        progress("reference %s GEMM %d^3 %d/%d", dt == ATTN_F32 ? "sgemm" : "dgemm", GEMM_REF,
                 i + 1, 1 + reps);
        double t0 = bench_now();
        attn_status st = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &v[0], &v[1], 0.0, &v[2],
                                   NULL, 0);
        double t1 = bench_now();
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

/*
 * Where the attention core's median time first exceeds the linear part's:
 * log-log interpolation of r(n) = log(t_att / t_lin) between the bracketing
 * points. If it never does, extrapolate from the last two points (when r
 * grows); if it already does at the first n, there is no bracket.
 * win: the attention core with the window (its MACs for the rate), never
 * extrapolated: past n = W its time ratio levels off instead of growing.
 */
static crossover find_crossover(const result *r, bool win) {
    crossover x = {NAN, "none", NAN, NAN};
    double lr[MAX_N];
    for (int i = 0; i < r->np; ++i)
        lr[i] = log((win ? r->pt[i].tw : r->pt[i].t)[ATT].med / r->pt[i].t[LIN].med);
    int i1 = -1;
    if (r->np > 0 && lr[0] > 0) {
        x.kind = "below-range";
        x.n = (double)r->pt[0].n;
        i1 = 0;
    } else {
        for (int i = 1; i < r->np && i1 < 0; ++i)
            if (lr[i] > 0)
                i1 = i;
        if (i1 < 0 && !win && r->np >= 2 && lr[r->np - 1] > lr[r->np - 2])
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
    int64_t (*macs)(const config *, int64_t) = win ? win_att_macs : att_macs;
    ra = gflops(macs(&r->cfg, a->n), (win ? a->tw : a->t)[ATT].med);
    rb = gflops(macs(&r->cfg, b->n), (win ? b->tw : b->t)[ATT].med);
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

/*
 * The same for the window. Its work is no longer n / n_theory times the linear
 * part's (it grows as n W past n = W), so the line gives the rates near the
 * crossover and, when there is none, the bound on the work.
 */
static void explain_window(result *r, double peak) {
    const crossover *x = &r->xw;
    const config *c = &r->cfg;
    double bound = (double)c->window / (double)(2 * c->d + c->ff);
    if (isnan(x->n) && bound <= 1) {
        snprintf(r->why_w, sizeof r->why_w,
                 "with a window of %lld keys attention's work never overtakes the linear "
                 "part's: past n = W it grows as 2 n W d, at most W / (2d + F) = %.2f of it",
                 (long long)c->window, bound);
    } else if (isnan(x->n)) {
        snprintf(r->why_w, sizeof r->why_w,
                 "the windowed attention core stayed faster than the linear part at every n "
                 "measured (sweep further: --nmax; its work overtakes at n = %.0f)",
                 r->theory_w);
    } else if (!strcmp(x->kind, "below-range")) {
        snprintf(r->why_w, sizeof r->why_w,
                 "the windowed attention core is already the slower part at the smallest n "
                 "(sweep lower: --nmin)");
    } else {
        snprintf(r->why_w, sizeof r->why_w,
                 "near the crossover the windowed attention core runs at %.0f GFLOP/s (%.0f%% "
                 "of gemm) and the linear part at %.0f GFLOP/s (%.0f%%)%s",
                 x->rate_att, 100.0 * x->rate_att / peak, x->rate_lin,
                 100.0 * x->rate_lin / peak,
                 bound <= 1 ? "; its work never overtakes (W <= 2d + F): the time does because "
                              "each of its multiply-adds is slower"
                            : "");
    }
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
        write_csv_header(csv, o.cfg[0].window > 0);

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
        r->theory_w = c->window > 0 ? theory_crossover_window(c) : NAN;
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
                p->t[part] = time_part(&b, part, false, &o, label);
                p->ws[part] = b.wsz[part];
            }
            for (int part = ATT; part < NPARTS && c->window > 0; ++part) {
                p->tw[part] = time_part(&b, part, true, &o, label);
                p->wsw[part] = b.wszw[part];
            }
            bench_free_point(&b);
            if (!progress_on) { /* a log, a pipe, CI: one line per finished n */
                fprintf(stderr,
                        "%s: d %lld%s n %lld done: linear %.2f ms, attention %.2f ms, "
                        "block %.2f ms",
                        prog, (long long)c->d, c->causal ? " causal" : "", (long long)o.n[i],
                        1e3 * p->t[LIN].med, 1e3 * p->t[ATT].med, 1e3 * p->t[BLK].med);
                if (c->window > 0)
                    fprintf(stderr, "; window %lld: attention %.2f ms, block %.2f ms",
                            (long long)c->window, 1e3 * p->tw[ATT].med, 1e3 * p->tw[BLK].med);
                fputc('\n', stderr);
            }
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
        r->x = find_crossover(r, false);
        explain(r, ref_of[k]->best);
        print_measured(r, &o, ref_of[k]->best);
        print_crossover(r);
        if (r->cfg.window > 0) {
            r->xw = find_crossover(r, true);
            explain_window(r, ref_of[k]->best);
            print_measured_window(r, ref_of[k]->best);
            print_crossover_window(r);
        }
        fflush(stdout);
        if (csv)
            write_csv_rows(csv, r, &o, ref_of[k], &env);
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
        write_json(o.json, res, o.ncfg, &o, ref_of, &env);
    if (plot) {
        write_plot(o.plot, res, o.ncfg, o.threads);
        printf("Plot: %s\n", o.plot);
    }
    return 0;
}
