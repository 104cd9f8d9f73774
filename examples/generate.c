/* SPDX-License-Identifier: MIT */
/* Greedy generation with a KV cache, checked at every step against a full recompute of the
 * prefix. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <time.h>

#include "../bench/read_bandwidth.h"
#include "walkthrough.h"

/*
 * The step after seed 004 (lesson 11, the tiny causal multi-head attention):
 * generate with it. Two models, both greedy (the next token is the argmax of
 * the logits), both in float64, and at every step the logits from the cache
 * equal those of a full recompute over the prefix:
 *
 *   tiny (the suite runs it): the lesson's own 2-head attention (d_model 4,
 *     no bias, its PyTorch weights from tests/data/lesson11.txt) on token
 *     embeddings plus the lesson's sinusoidal positions, a residual, and tied
 *     output logits h E^T over an 8-word vocabulary that starts with the
 *     lesson's three tokens. Cache: attn_mha_step (prefill of the prompt in
 *     one call, then one token per call). Recompute: attn_mha_forward over the
 *     whole prefix with the causal mask (attn_sdpa's tiles, another path).
 *
 *   --big: d_model 768, 12 heads, F 3072, pre-norm decoder-only blocks
 *     (attn_decoder_step, RoPE), a final LayerNorm, tied logits over 512
 *     tokens, seeded weights. Checks the same equality for a short run, then
 *     times, in float32, a generation step against recomputing the prefix at
 *     prefix lengths up to --prefix-max, prints tokens per second against the
 *     prefix length, writes --csv and, through gnuplot, --plot. The blocks'
 *     part of a step is also set against its memory floor: every weight and
 *     the K/V cache read once, at the read bandwidth (bench/read_bandwidth.h)
 *     measured right after each prefix's timed steps. At prefix P the prompt
 *     is prefilled, --reps steps run untimed, and the next --reps are timed:
 *     the first steps after a pause (the prefill, the bandwidth passes) run
 *     up to twice as slow on a virtual machine for a few tens of
 *     milliseconds, which is the machine's and not the steady generation's.
 *
 * Usage: generate [lesson11.txt=tests/data/lesson11.txt]
 *        generate --big [--layers N=4] [--prefix-max N=2048] [--reps N=5]
 *                 [--csv FILE] [--plot FILE.png|.svg]
 * Exit status 0 when every check passes, 1 when one fails, 2 on bad input.
 */

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
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "generate: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    memset(p, 0, (n + 63) / 64 * 64);
    return p;
}

/* Element i of a contiguous F32/F64 buffer. */
static double get(attn_dtype dt, const void *p, int64_t i) {
    return dt == ATTN_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}
static void set(attn_dtype dt, void *p, int64_t i, double x) {
    if (dt == ATTN_F64)
        ((double *)p)[i] = x;
    else
        ((float *)p)[i] = (float)x;
}

/* logits (V) = h (C) E^T, E (V, C) row-major. */
static void tied_logits(attn_dtype dt, const void *h, const void *emb, int64_t V, int64_t C,
                        double *logits) {
    for (int64_t t = 0; t < V; ++t) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c)
            s += get(dt, h, c) * get(dt, emb, t * C + c);
        logits[t] = s;
    }
}

static int64_t argmax(const double *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* max |a - b| / max(1, |b|) over n entries. */
static double rel_diff(const double *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i)
        m = fmax(m, fabs(a[i] - b[i]) / fmax(1.0, fabs(b[i])));
    return m;
}

/* ======================================================================== */
/* The tiny model: lesson 11's attention                                    */
/* ======================================================================== */

enum { TC = 4, TH = 2, TV = 8, TPROMPT = 2, TMAX = 10, EMB_SEED = 10 };
static const char *tiny_words[TV] = {"小猫", "喜欢", "小鱼", "大狗", "吃", "看", "水", "。"};

typedef struct tiny_model {
    attn_mha_config cfg;
    attn_mha_params p;
    double w[4][TC * TC]; /* torch (out, in) weights, used transposed */
    double emb[TV * TC], pe[TMAX * TC];
} tiny_model;

/* x[t] = E[tok[t]] + PE[pos0 + t] for n tokens, x (n, C). */
static void tiny_embed(const tiny_model *m, const int64_t *tok, int64_t pos0, int64_t n,
                       double *x) {
    for (int64_t t = 0; t < n; ++t)
        for (int c = 0; c < TC; ++c)
            x[t * TC + c] = m->emb[tok[t] * TC + c] + m->pe[(pos0 + t) * TC + c];
}

/* Recompute: logits of the last token of tok[0..T), by attn_mha_forward over all T. */
static void tiny_recompute(const tiny_model *m, const int64_t *tok, int64_t T, double *logits) {
    double x[TMAX * TC], y[TMAX * TC], h[TC];
    tiny_embed(m, tok, 0, T, x);
    attn_view xv = WK_VIEW(ATTN_F64, x, 1, T, TC), yv = WK_VIEW(ATTN_F64, y, 1, T, TC);
    attn_sdpa_opts o = {.causal = ATTN_CAUSAL_TOP_LEFT};
    CHECK(attn_mha_forward(&m->cfg, &m->p, &xv, NULL, &o, &yv, NULL, NULL, 0));
    for (int c = 0; c < TC; ++c)
        h[c] = x[(T - 1) * TC + c] + y[(T - 1) * TC + c];
    tied_logits(ATTN_F64, h, m->emb, TV, TC, logits);
}

static void run_tiny(const char *path) {
    wk_fixture *fx = wk_load(path);
    if (!fx)
        exit(2);
    static tiny_model m;
    m.cfg = (attn_mha_config){.dtype = ATTN_F64, .d_model = TC, .heads = TH};
    static const char *wn[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    attn_view *pw[4] = {&m.p.wq, &m.p.wk, &m.p.wv, &m.p.wo};
    for (int i = 0; i < 4; ++i) {
        memcpy(m.w[i], wk_get(fx, wn[i], TC * TC), sizeof m.w[i]);
        attn_view torch_w = WK_VIEW(ATTN_F64, m.w[i], TC, TC); /* (out, in) */
        CHECK(attn_view_transpose(&torch_w, 0, 1, pw[i]));
    }
    wk_free(fx);
    attn_view ev = WK_VIEW(ATTN_F64, m.emb, TV, TC), pev = WK_VIEW(ATTN_F64, m.pe, TMAX, TC);
    CHECK(attn_init_normal(EMB_SEED, 1, 0, 0.0, 1.0, &ev));
    CHECK(attn_posenc_sinusoidal(0, &pev)); /* the lesson's sinusoidal_positions */

    printf("1. The lesson's causal attention as a tiny language model (d_model %d, %d heads,\n"
           "   %d words, float64): greedy generation with a KV cache\n\n",
           TC, TH, TV);
    /* the cache: (1, Hkv, Tmax, D) K and V and the length, one slab */
    size_t cs = attn_kv_cache_size(&m.cfg, 1, TMAX);
    void *cslab = xalloc(cs);
    attn_kv_cache kc;
    CHECK(attn_kv_cache_bind(&kc, &m.cfg, 1, TMAX, cslab, cs));
    int64_t tok[TMAX + 1] = {0, 1}; /* 小猫 喜欢 */
    int64_t T = TPROMPT;
    double worst = 0, x[TMAX * TC], y[TMAX * TC];
    bool same_tokens = true;
    printf("  prompt: %s %s\n", tiny_words[tok[0]], tiny_words[tok[1]]);
    /* one workspace for every step: sized for the largest call (the prefill) */
    attn_view xq = WK_VIEW(ATTN_F64, x, 1, TPROMPT, TC);
    size_t ws = attn_mha_step_workspace_size(&m.cfg, &xq, &kc, NULL);
    void *work = xalloc(ws);
    for (int64_t step = 0; kc.len[0] < TMAX; ++step) {
        /* prefill the prompt in one call, then one token per call */
        int64_t n = step == 0 ? TPROMPT : 1, pos0 = T - n;
        tiny_embed(&m, tok + pos0, pos0, n, x);
        attn_view xv = WK_VIEW(ATTN_F64, x, 1, n, TC), yv = WK_VIEW(ATTN_F64, y, 1, n, TC);
        CHECK(attn_mha_step(&m.cfg, &m.p, NULL, &xv, &kc, &yv, work, ws));
        double h[TC], logits[TV], want[TV];
        for (int c = 0; c < TC; ++c)
            h[c] = x[(n - 1) * TC + c] + y[(n - 1) * TC + c];
        tied_logits(ATTN_F64, h, m.emb, TV, TC, logits);
        tiny_recompute(&m, tok, T, want);
        double d = rel_diff(logits, want, TV);
        worst = fmax(worst, d);
        int64_t next = argmax(logits, TV);
        same_tokens = same_tokens && next == argmax(want, TV);
        printf(
            "  step %lld: cache length %lld, next %s (logit %.4f), |cache - recompute| %.1e\n",
            (long long)step, (long long)kc.len[0], tiny_words[next], logits[next], d);
        tok[T++] = next;
    }
    printf("  generated:");
    for (int64_t t = 0; t < T; ++t)
        printf(" %s", tiny_words[tok[t]]);
    printf("\n\n");
    wk_check(worst <= 1e-12,
             "at every step the cached logits equal the recompute over the prefix (max rel "
             "diff %.1e <= 1e-12)",
             worst);
    wk_check(same_tokens, "the greedy tokens agree");
    wk_check(kc.len[0] == TMAX, "the cache holds all %d tokens", TMAX);
    /* one more token does not fit: a status, and nothing written */
    double before[TC];
    memcpy(before, y, sizeof before);
    attn_view x1 = WK_VIEW(ATTN_F64, x, 1, 1, TC), y1 = WK_VIEW(ATTN_F64, y, 1, 1, TC);
    attn_status st = attn_mha_step(&m.cfg, &m.p, NULL, &x1, &kc, &y1, work, ws);
    wk_check(st == ATTN_ERANGE && memcmp(before, y, sizeof before) == 0 && kc.len[0] == TMAX,
             "a full cache refuses the next token: %s, output and length untouched",
             attn_status_name(st));
    free(work);
    free(cslab);
}

/* ======================================================================== */
/* The d 768 model: decoder-only blocks with RoPE                            */
/* ======================================================================== */

typedef struct big_model {
    attn_dtype dt;
    int64_t V, C, L, Tmax;
    attn_decoder_config cfg;
    attn_decoder_params *layer;
    void **slab;
    void *emb, *lnf_g, *lnf_b; /* (V, C), (C), (C) */
    attn_kv_cache *cache;
    void **cslab;
    void *work; /* one workspace for the steps */
    size_t ws;
} big_model;

static void big_init(big_model *m, attn_dtype dt, int64_t L, int64_t Tmax, int64_t max_tq) {
    m->dt = dt;
    m->V = 512;
    m->C = 768;
    m->L = L;
    m->Tmax = Tmax;
    m->cfg = (attn_decoder_config){
        .self_attn = {.dtype = dt, .d_model = 768, .heads = 12, .bias = true},
        .ffn = {.dtype = dt,
                .d_model = 768,
                .d_ff = 3072,
                .act = ATTN_ACT_GELU_TANH,
                .bias = true},
        .norm = ATTN_PRE_NORM,
        .ln_affine = true,
        .rope = {.on = true}};
    size_t es = attn_dtype_size(dt), ps = attn_decoder_params_size(&m->cfg);
    m->layer = calloc((size_t)L, sizeof *m->layer);
    m->slab = calloc((size_t)L, sizeof *m->slab);
    m->cache = calloc((size_t)L, sizeof *m->cache);
    m->cslab = calloc((size_t)L, sizeof *m->cslab);
    size_t cs = attn_kv_cache_size(&m->cfg.self_attn, 1, Tmax);
    for (int64_t l = 0; l < L; ++l) {
        m->slab[l] = xalloc(ps);
        attn_decoder_params *p = &m->layer[l];
        CHECK(attn_decoder_params_bind(p, &m->cfg, m->slab[l], ps));
        CHECK(attn_mha_params_init(&m->cfg.self_attn, &p->self_attn, 100 + (uint64_t)l));
        CHECK(attn_ffn_params_init(&m->cfg.ffn, &p->ffn, 200 + (uint64_t)l));
        /* non-trivial LayerNorms and biases, so that every parameter matters */
        attn_view *v[] = {
            &p->ln1_g,        &p->ln1_b,        &p->ln3_g,        &p->ln3_b,  &p->self_attn.bq,
            &p->self_attn.bk, &p->self_attn.bv, &p->self_attn.bo, &p->ffn.b1, &p->ffn.b2};
        for (size_t i = 0; i < sizeof v / sizeof *v; ++i)
            CHECK(attn_init_normal(300 + (uint64_t)l, i, 0, i == 0 || i == 2 ? 1.0 : 0.0, 0.1,
                                   v[i]));
        m->cslab[l] = xalloc(cs);
        CHECK(attn_kv_cache_bind(&m->cache[l], &m->cfg.self_attn, 1, Tmax, m->cslab[l], cs));
    }
    m->emb = xalloc((size_t)(m->V * m->C) * es);
    m->lnf_g = xalloc((size_t)m->C * es);
    m->lnf_b = xalloc((size_t)m->C * es);
    attn_view ev = WK_VIEW(dt, m->emb, m->V, m->C), g = WK_VIEW(dt, m->lnf_g, m->C),
              b = WK_VIEW(dt, m->lnf_b, m->C);
    CHECK(attn_init_normal(7, 1, 0, 0.0, 1.0, &ev));
    CHECK(attn_init_normal(7, 2, 0, 1.0, 0.1, &g));
    CHECK(attn_init_normal(7, 3, 0, 0.0, 0.1, &b));
    /* the step workspace, for the largest step (the prefill) */
    attn_view xq;
    CHECK(attn_view_init(&xq, dt, m->emb, 3, (int64_t[]){1, max_tq, m->C}));
    m->ws = attn_decoder_step_workspace_size(&m->cfg, &xq, &m->cache[0], NULL, NULL);
    m->work = xalloc(m->ws);
}

static void big_free(big_model *m) {
    for (int64_t l = 0; l < m->L; ++l) {
        free(m->slab[l]);
        free(m->cslab[l]);
    }
    free(m->slab);
    free(m->cslab);
    free(m->layer);
    free(m->cache);
    free(m->emb);
    free(m->lnf_g);
    free(m->lnf_b);
    free(m->work);
}

static void big_reset(big_model *m) {
    for (int64_t l = 0; l < m->L; ++l)
        m->cache[l].len[0] = 0;
}

/* x (1, n, C) = E[tok] (positions come from RoPE inside the blocks). */
static void big_embed(const big_model *m, const int64_t *tok, int64_t n, void *x) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < m->C; ++c)
            set(m->dt, x, t * m->C + c, get(m->dt, m->emb, tok[t] * m->C + c));
}

/* The final LayerNorm of the last row of h (1, n, C) and the tied logits. */
static void big_head(const big_model *m, void *h, int64_t n, void *tmp, double *logits) {
    attn_view hr =
        WK_VIEW(m->dt, (char *)h + (size_t)((n - 1) * m->C) * attn_dtype_size(m->dt), 1, m->C);
    attn_view tv = WK_VIEW(m->dt, tmp, 1, m->C), g = WK_VIEW(m->dt, m->lnf_g, m->C),
              b = WK_VIEW(m->dt, m->lnf_b, m->C);
    CHECK(attn_layernorm(1e-5, &hr, &g, &b, &tv, NULL, NULL));
    tied_logits(m->dt, tmp, m->emb, m->V, m->C, logits);
}

/*
 * Feed n tokens through the cached steps; logits of the last. bufs: 2 x (Tq, C) + (C).
 * *blocks (may be NULL): the seconds of the L attn_decoder_step calls alone.
 */
static void big_step(big_model *m, const int64_t *tok, int64_t n, void **buf, double *logits,
                     double *blocks) {
    big_embed(m, tok, n, buf[0]);
    double t0 = now();
    for (int64_t l = 0; l < m->L; ++l) {
        attn_view x = WK_VIEW(m->dt, buf[l % 2], 1, n, m->C);
        attn_view y = WK_VIEW(m->dt, buf[1 - l % 2], 1, n, m->C);
        CHECK(attn_decoder_step(&m->cfg, &m->layer[l], NULL, &x, &m->cache[l], NULL, &y,
                                m->work, m->ws));
    }
    if (blocks)
        *blocks = now() - t0;
    big_head(m, buf[m->L % 2], n, buf[2], logits);
}

/* Recompute: every layer's whole-sequence forward over tok[0..T). */
static void big_recompute(const big_model *m, const int64_t *tok, int64_t T, void **buf,
                          void *work, size_t ws, double *logits) {
    big_embed(m, tok, T, buf[0]);
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};
    for (int64_t l = 0; l < m->L; ++l) {
        attn_view x = WK_VIEW(m->dt, buf[l % 2], 1, T, m->C);
        attn_view y = WK_VIEW(m->dt, buf[1 - l % 2], 1, T, m->C);
        CHECK(attn_decoder_forward(&m->cfg, &m->layer[l], &x, NULL, &causal, NULL, &y, NULL,
                                   work, ws));
    }
    big_head(m, buf[m->L % 2], T, buf[2], logits);
}

static void **bufs(attn_dtype dt, int64_t T, int64_t C) {
    void **b = calloc(3, sizeof *b);
    for (int i = 0; i < 3; ++i)
        b[i] = xalloc((size_t)(T * C) * attn_dtype_size(dt));
    return b;
}
static void bufs_free(void **b) {
    for (int i = 0; i < 3; ++i)
        free(b[i]);
    free(b);
}

/* The recompute's workspace for T tokens. */
static size_t recompute_ws(const big_model *m, int64_t T) {
    attn_view x;
    CHECK(attn_view_init(&x, m->dt, m->emb, 3, (int64_t[]){1, T, m->C}));
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};
    return attn_decoder_workspace_size(&m->cfg, &x, NULL, &causal, NULL);
}

/* The prompt: seeded pseudo-random tokens. */
static void prompt(int64_t *tok, int64_t n, int64_t V) {
    for (int64_t t = 0; t < n; ++t)
        tok[t] = (int64_t)(attn_rng_bits(5, 0, (uint64_t)t) % (uint64_t)V);
}

static void big_check(int64_t L) {
    enum { P = 12, STEPS = 6 };
    printf("2. d_model 768, 12 heads, %lld pre-norm blocks with RoPE, float64: cache against "
           "recompute\n\n",
           (long long)L);
    big_model m;
    big_init(&m, ATTN_F64, L, P + STEPS, P);
    int64_t tok[P + STEPS];
    prompt(tok, P, m.V);
    void **b = bufs(ATTN_F64, P + STEPS, m.C);
    size_t ws = recompute_ws(&m, P + STEPS);
    void *work = xalloc(ws);
    double *lg = malloc(sizeof(double) * (size_t)m.V),
           *want = malloc(sizeof(double) * (size_t)m.V);
    double worst = 0;
    bool same = true;
    int64_t T = P;
    for (int step = 0; step <= STEPS && T <= P + STEPS; ++step) {
        int64_t n = step == 0 ? P : 1;
        big_step(&m, tok + T - n, n, b, lg, NULL);
        big_recompute(&m, tok, T, b, work, ws, want);
        double d = rel_diff(lg, want, m.V);
        worst = fmax(worst, d);
        int64_t next = argmax(lg, m.V);
        same = same && next == argmax(want, m.V);
        printf("  prefix %2lld: next token %3lld, |cache - recompute| %.1e\n", (long long)T,
               (long long)next, d);
        if (T == P + STEPS)
            break;
        tok[T++] = next;
    }
    printf("\n");
    wk_check(worst <= 1e-12,
             "d 768: the cached logits equal the recompute at every step (%.1e)", worst);
    wk_check(same, "d 768: the greedy tokens agree");
    free(lg);
    free(want);
    free(work);
    bufs_free(b);
    big_free(&m);
}

/* openblas_get_corename, when the BLAS is OpenBLAS (looked up, not linked). */
static const char *blas_core(void) {
    char *(*f)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    return f ? f() : "unknown";
}

/* Bytes of the blocks' parameters, which every step reads once. */
static double weight_bytes(const big_model *m) {
    return (double)m->L * (double)attn_dtype_size(m->dt) *
           (double)attn_decoder_param_count(&m->cfg);
}

/* Bytes one token's step must read in the blocks at prefix P: the parameters, and the P + 1
 * cached keys and values of each block (its own included). */
static double floor_bytes(const big_model *m, int64_t P) {
    attn_decoder_config c; /* kv_heads and d_head filled in */
    CHECK(attn_decoder_config_resolve(&m->cfg, &c));
    double kv = 2.0 * (double)(P + 1) * (double)(c.self_attn.kv_heads * c.self_attn.d_head);
    return weight_bytes(m) + (double)m->L * (double)attn_dtype_size(m->dt) * kv;
}

static void big_time(int64_t L, int64_t pmax, int reps, const char *csv, const char *plot) {
    printf("3. Time per generated token, float32 (d 768, 12 heads, %lld blocks): cache vs "
           "recompute\n",
           (long long)L);
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la) {
        if (fgets(load, sizeof load, la))
            load[strcspn(load, "\n")] = '\0';
        fclose(la);
    }
    printf("   OpenBLAS core %s, load average %s; medians of %d steps / recomputes\n",
           blas_core(), load, reps);
    char *rbuf = rbw_buffer();
    if (!rbuf) {
        fprintf(stderr, "generate: cannot measure the read bandwidth\n");
        exit(2);
    }
    big_model m;
    big_init(&m, ATTN_F32, L, pmax + 2 * reps + 1, pmax);
    printf(
        "   blocks: the %lld attn_decoder_step calls of a step; floor: the bytes they must\n"
        "   read (%.1f MB of weights and the K/V cache) over the read bandwidth: %d threads,\n"
        "   one load per %d-byte line over 512 MiB, a pass per timed step right after them\n\n",
        (long long)L, weight_bytes(&m) / 1e6, RBW_THREADS, RBW_LINE);
    int64_t *tok = calloc((size_t)(pmax + 2 * reps + 1), sizeof *tok);
    prompt(tok, pmax + 2 * reps + 1, m.V);
    void **b = bufs(ATTN_F32, pmax + 2 * reps + 1, m.C);
    size_t ws = recompute_ws(&m, pmax + 1);
    void *work = xalloc(ws);
    double *lg = malloc(sizeof(double) * (size_t)m.V);
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out) {
        fprintf(stderr, "generate: cannot write %s\n", csv);
        exit(2);
    }
    if (out)
        fprintf(out,
                "prefix,cache_ms,recompute_ms,cache_tok_s,recompute_tok_s,speedup,blocks_ms,"
                "floor_ms,floor_share,read_GBs\n");
    printf("   %7s %12s %14s %12s %14s %8s %10s %9s %9s %9s\n", "prefix", "cache ms/tok",
           "recompute ms", "cache tok/s", "recompute tok/s", "speedup", "blocks ms",
           "read GB/s", "floor ms", "of floor");
    double t[64], tb[64], rb[64];
    for (int64_t P = 64; P <= pmax; P *= 2) {
        big_reset(&m);
        big_step(&m, tok, P, b, lg, NULL); /* prefill P tokens */
        for (int r = 0; r < reps; ++r)     /* untimed: the machine's warm-up after a pause */
            big_step(&m, tok + P + r, 1, b, lg, NULL);
        for (int r = 0; r < reps; ++r) { /* one token each at prefix P + reps + r */
            double t0 = now();
            big_step(&m, tok + P + reps + r, 1, b, lg, &tb[r]);
            t[r] = now() - t0;
        }
        for (int r = 0; r < reps; ++r)
            rb[r] = rbw_pass(rbuf);
        double tc = median(t, reps), tbl = median(tb, reps), bw = median(rb, reps);
        double fl = floor_bytes(&m, P + reps) / bw / 1e9;
        int rr = P >= 1024 ? 3 : reps;
        for (int r = 0; r < rr; ++r) {
            double t0 = now();
            big_recompute(&m, tok, P + 1, b, work, ws, lg);
            t[r] = now() - t0;
        }
        double tr = median(t, rr);
        printf("   %7lld %12.2f %14.2f %12.1f %14.2f %7.1fx %10.2f %9.2f %9.2f %8.0f%%\n",
               (long long)P, 1e3 * tc, 1e3 * tr, 1 / tc, 1 / tr, tr / tc, 1e3 * tbl, bw,
               1e3 * fl, 100 * fl / tbl);
        if (out)
            fprintf(out, "%lld,%.4f,%.4f,%.2f,%.3f,%.2f,%.4f,%.4f,%.3f,%.3f\n", (long long)P,
                    1e3 * tc, 1e3 * tr, 1 / tc, 1 / tr, tr / tc, 1e3 * tbl, 1e3 * fl, fl / tbl,
                    bw);
        fflush(stdout);
    }
    if (out)
        fclose(out);
    if (plot && csv) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "gnuplot -e \"set terminal %s size 800,500; set output '%s'; set datafile "
                 "separator ','; set key top left; set grid; set xlabel 'prefix length "
                 "(tokens)'; set ylabel 'ms per generated token'; set title 'd 768, 12 heads, "
                 "%lld blocks, float32: time per generated token'; plot '%s' using 1:2 skip 1 "
                 "with linespoints title 'KV cache (attn\\_decoder\\_step)', '' using 1:3 "
                 "skip 1 with linespoints title 'recompute the prefix "
                 "(attn\\_decoder\\_forward)'\"",
                 strstr(plot, ".svg") ? "svg" : "pngcairo", plot, (long long)L, csv);
        printf("\n   plot: %s\n", system(cmd) == 0 ? plot : "(gnuplot failed)");
    }
    free(rbuf);
    free(tok);
    free(lg);
    free(work);
    bufs_free(b);
    big_free(&m);
}

int main(int argc, char **argv) {
    const char *path = "tests/data/lesson11.txt", *csv = NULL, *plot = NULL;
    bool big = false;
    int64_t layers = 4, pmax = 2048;
    int reps = 5;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--big"))
            big = true;
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            layers = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--prefix-max") && i + 1 < argc)
            pmax = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[++i];
        else if (!strcmp(argv[i], "--plot") && i + 1 < argc)
            plot = argv[++i];
        else if (argv[i][0] != '-')
            path = argv[i];
        else {
            fprintf(stderr, "usage: generate [lesson11.txt] | generate --big [--layers N] "
                            "[--prefix-max N] [--reps N] [--csv FILE] [--plot FILE]\n");
            return 2;
        }
    }
    if (layers < 1 || pmax < 64 || reps < 1 || reps > 64) {
        fprintf(stderr, "generate: --layers >= 1, --prefix-max >= 64, 1 <= --reps <= 64\n");
        return 2;
    }
    printf("Greedy generation with attn %s's KV cache\n\n", attn_version_string());
    if (!big) {
        run_tiny(path);
    } else {
        big_check(layers);
        big_time(layers, pmax, reps, csv, plot);
    }
    return wk_result();
}
