/* SPDX-License-Identifier: MIT */
/* attn-bench's command line: --help, the options, and the thread environment they ask for. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/version.h"
#include "attn_bench.h"

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

static void usage(FILE *f) {
    fprintf(f, "usage: attn-bench [options]\n"
               "Sweeps the sequence length n and times, per n, the linear part (Q, K, V, O\n"
               "projections + FFN), the attention core (sdpa) and the whole encoder block,\n"
               "and reports where attention's O(n^2) time overtakes the linear part.\n\n"
               "  --d N            model width d (768)\n"
               "  --heads N        heads H, must divide d (d / 64: 12 for d 768)\n"
               "  --ff N           feed-forward width F (4d)\n"
               "  --batch N        batch B (1)\n"
               "  --dtype f32|f64  element type (f32)\n"
               "  --causal         causal mask (masked tiles skipped)\n"
               "  --window W       also time attention, MHA and block with a causal sliding\n"
               "                   window of W keys (W >= 1; implies --causal): both\n"
               "                   curves, both crossovers, beside the full causal ones\n"
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

static const char *const switches[] = {"--help",      "--causal",     "--quick", "--version",
                                       "--tuned-env", "--seed-table", NULL};
static const char *const valued[] = {"--d",      "--heads",   "--ff",   "--batch",  "--dtype",
                                     "--algo",   "--threads", "--reps", "--warmup", "--n",
                                     "--nmin",   "--nmax",    "--csv",  "--json",   "--plot",
                                     "--window", NULL};

static bool in_list(const char *s, const char *const *list) {
    for (; *list; ++list)
        if (!strcmp(s, *list))
            return true;
    return false;
}

void parse_args(int argc, char **argv, options *o) {
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
        } else if (!strcmp(flag, "--window")) {
            c.window = parse_int(flag, val, 1, big);
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
        die(EXIT_USAGE,
            "d = %lld is not a multiple of 64 (the default head width): "
            "set --heads to a divisor of d",
            (long long)c.d);
    if (!set_ff)
        c.ff = 4 * c.d;
    if (c.window) /* the window is compared with full causal attention */
        c.causal = true;
    if (o->quick) {
        if (set_d || set_heads || set_ff || set_causal || c.window)
            die(EXIT_USAGE, "--quick sweeps fixed shapes; it cannot be combined with "
                            "--d, --heads, --ff, --causal or --window");
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
 * what a user's program gets (docs/guide.md "Threads").
 *
 * --threads N: attn's loops use OpenMP's team size and the BLAS its own
 * thread count, both read from the environment when the libraries load, so
 * set OMP_NUM_THREADS and OPENBLAS_NUM_THREADS and re-execute once; the sdpa
 * options carry the same count.
 *
 * --tuned-env: also OPENBLAS_THREAD_TIMEOUT=4 and OMP_WAIT_POLICY=PASSIVE,
 * unless the user set them (idle BLAS and OpenMP workers sleep at once
 * instead of spinning), to compare against.
 */
#define NENV 4
static const char *const thread_env[NENV][2] = {{"OPENBLAS_NUM_THREADS", NULL},
                                                {"OMP_NUM_THREADS", NULL},
                                                {"OPENBLAS_THREAD_TIMEOUT", "4"},
                                                {"OMP_WAIT_POLICY", "PASSIVE"}};

void apply_threads(options *o, char **argv) {
    char want[16];
    snprintf(want, sizeof want, "%d", o->threads);
    bool same = true;
    for (int i = 0; i < NENV; ++i) {
        const char *have = getenv(thread_env[i][0]),
                   *w = thread_env[i][1] ? thread_env[i][1] : want;
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
