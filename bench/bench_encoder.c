/* SPDX-License-Identifier: MIT */
/* attn-bench-encoder: one encoder block, forward and training step, on PyTorch-layout weights. */
/*
 * The block bench/compare_torch.py sets against torch.nn.TransformerEncoderLayer
 * (pre-norm, biases, affine LayerNorms, erf GELU, B 1 unless --batch): the
 * weights live where PyTorch keeps them (in_proj_weight (3C, C), out_proj
 * (C, C), linear1 (F, C), linear2 (C, F), row-major, (out, in)) and attn sees
 * them as (in, out) views through strides, so Q, K and V are one GEMM. Per n
 * it times, as medians:
 *   fwd    attn_encoder_forward, no trace (inference)
 *   train  attn_encoder_forward into the cache, then attn_encoder_backward with
 *          every parameter gradient (what one training step of the block costs;
 *          torch's autograd forward + backward)
 *   bwd    the backward alone
 *   mha    attn_mha_forward alone
 * and the in-run attn_gemm 2048^3 rate that the block's rate is compared with.
 * Output: one CSV row per n on stdout (or --csv FILE).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/gemm.h"
#include "attn/layers.h"
#include "bench_util.h"

#define MAX_N    32
#define MAX_REPS 200

static void die(const char *what, attn_status st) {
    fprintf(stderr, "attn-bench-encoder: %s: %s\n", what, attn_strerror(st));
    exit(1);
}

/* n floats uniform in [-scale, scale], 64-byte aligned; exits when memory runs out. */
static float *falloc(size_t n, unsigned seed, float scale) {
    float *p = bench_alloc64(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "attn-bench-encoder: out of memory\n");
        exit(1);
    }
    bench_fill(p, n, ATTN_F32, scale, seed);
    return p;
}

/* An (out, in) row-major weight at p seen as the (in, out) matrix attn multiplies by. */
static attn_view wview(float *p, int64_t out, int64_t in) {
    attn_view v;
    attn_status st = attn_view_init_strided(&v, ATTN_F32, p, 2, (int64_t[]){in, out},
                                            (int64_t[]){1, in});
    if (st != ATTN_OK)
        die("weight view", st);
    return v;
}
static attn_view vec(float *p, int64_t n) {
    attn_view v;
    attn_view_init(&v, ATTN_F32, p, 1, (int64_t[]){n});
    return v;
}

/* PyTorch's parameter tensors of one layer, and attn's views of them. */
typedef struct torch_params {
    float *in_w, *in_b, *out_w, *out_b, *l1_w, *l1_b, *l2_w, *l2_b, *n1w, *n1b, *n2w, *n2b;
} torch_params;

static attn_encoder_params bind(torch_params *t, int64_t C, int64_t F, unsigned seed,
                                bool zero) {
    float sc = zero ? 0.0f : 1.0f / sqrtf((float)C);
    t->in_w = falloc((size_t)(3 * C * C), seed + 1, sc);
    t->in_b = falloc((size_t)(3 * C), seed + 2, sc);
    t->out_w = falloc((size_t)(C * C), seed + 3, sc);
    t->out_b = falloc((size_t)C, seed + 4, sc);
    t->l1_w = falloc((size_t)(F * C), seed + 5, sc);
    t->l1_b = falloc((size_t)F, seed + 6, sc);
    t->l2_w = falloc((size_t)(C * F), seed + 7, zero ? 0.0f : 1.0f / sqrtf((float)F));
    t->l2_b = falloc((size_t)C, seed + 8, sc);
    t->n1w = falloc((size_t)C, seed + 9, 0.0f);
    t->n1b = falloc((size_t)C, seed + 10, 0.0f);
    t->n2w = falloc((size_t)C, seed + 11, 0.0f);
    t->n2b = falloc((size_t)C, seed + 12, 0.0f);
    for (int64_t i = 0; i < C && !zero; ++i)
        t->n1w[i] = t->n2w[i] = 1.0f;
    attn_encoder_params p;
    memset(&p, 0, sizeof p);
    p.ln1_g = vec(t->n1w, C);
    p.ln1_b = vec(t->n1b, C);
    p.ln2_g = vec(t->n2w, C);
    p.ln2_b = vec(t->n2b, C);
    p.mha.wq = wview(t->in_w, C, C);
    p.mha.wk = wview(t->in_w + C * C, C, C);
    p.mha.wv = wview(t->in_w + 2 * C * C, C, C);
    p.mha.wo = wview(t->out_w, C, C);
    p.mha.bq = vec(t->in_b, C);
    p.mha.bk = vec(t->in_b + C, C);
    p.mha.bv = vec(t->in_b + 2 * C, C);
    p.mha.bo = vec(t->out_b, C);
    p.ffn.w1 = wview(t->l1_w, F, C);
    p.ffn.b1 = vec(t->l1_b, F);
    p.ffn.w2 = wview(t->l2_w, C, F);
    p.ffn.b2 = vec(t->l2_b, C);
    return p;
}

static double gemm_rate(int reps) {
    int64_t n = 2048, sh[2] = {n, n};
    attn_view v[3];
    float *m[3];
    for (int i = 0; i < 3; ++i) {
        m[i] = falloc((size_t)(n * n), 100 + (unsigned)i, 1.0f);
        attn_view_init(&v[i], ATTN_F32, m[i], 2, sh);
    }
    double t[MAX_REPS];
    for (int i = 0; i <= reps; ++i) {
        double t0 = bench_now();
        attn_status st = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &v[0], &v[1], 0.0, &v[2],
                                   NULL, 0);
        if (st != ATTN_OK)
            die("attn_gemm", st);
        if (i > 0)
            t[i - 1] = bench_now() - t0;
    }
    for (int i = 0; i < 3; ++i)
        free(m[i]);
    return 2.0 * (double)n * (double)n * (double)n / bench_median(t, reps) / 1e9;
}

int main(int argc, char **argv) {
    int64_t C = 768, H = 12, F = 0, B = 1, ns[MAX_N] = {64, 128, 256, 512, 1024, 2048, 4096};
    int nn = 7, reps = 5, warmup = 1, threads = 0;
    bool causal = false, train = true;
    const char *csv = NULL;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--causal")) {
            causal = true;
            continue;
        }
        if (!strcmp(a, "--no-train")) {
            train = false;
            continue;
        }
        if (!strcmp(a, "--help") || i + 1 >= argc) {
            printf("usage: attn-bench-encoder [--d 768] [--heads 12] [--ff 4d] [--batch 1]\n"
                   "  [--n 64,128,...] [--causal] [--no-train] [--reps 5] [--warmup 1]\n"
                   "  [--threads 0 (OpenMP default)] [--csv FILE]\n");
            return strcmp(a, "--help") ? 2 : 0;
        }
        ++i;
        if (!strcmp(a, "--d"))
            C = atoll(v);
        else if (!strcmp(a, "--heads"))
            H = atoll(v);
        else if (!strcmp(a, "--ff"))
            F = atoll(v);
        else if (!strcmp(a, "--batch"))
            B = atoll(v);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--csv"))
            csv = v;
        else if (!strcmp(a, "--n")) {
            nn = 0;
            for (char *s = (char *)v; *s && nn < MAX_N;) {
                ns[nn++] = strtoll(s, &s, 10);
                if (*s == ',')
                    ++s;
            }
        } else {
            fprintf(stderr, "attn-bench-encoder: unknown option %s\n", a);
            return 2;
        }
    }
    if (F == 0)
        F = 4 * C;
    if (reps < 1 || reps > MAX_REPS || C < 1 || H < 1 || C % H || B < 1) {
        fprintf(stderr, "attn-bench-encoder: bad arguments\n");
        return 2;
    }
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F32, .d_model = C, .heads = H, .bias = true},
        .ffn = {.dtype = ATTN_F32, .d_model = C, .d_ff = F, .act = ATTN_ACT_GELU_ERF,
                .bias = true},
        .eps = 1e-5, .norm = ATTN_PRE_NORM, .ln_affine = true};
    attn_status st = attn_encoder_config_resolve(&cfg, &cfg);
    if (st != ATTN_OK)
        die("config", st);
    torch_params tp, tg;
    attn_encoder_params p = bind(&tp, C, F, 1, false), g = bind(&tg, C, F, 50, true);
    attn_sdpa_opts opts = {.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE,
                           .threads = threads};
    FILE *out = csv ? fopen(csv, "w") : stdout;
    if (!out) {
        perror(csv);
        return 1;
    }
    double gref = gemm_rate(reps < 3 ? 3 : reps);
    fprintf(out, "n,fwd_ms,train_ms,bwd_ms,mha_ms,fwd_gflops,mha_gflops,gemm_gflops\n");
    for (int k = 0; k < nn; ++k) {
        int64_t n = ns[k], sh[3] = {B, n, C};
        size_t cnt = (size_t)(B * n * C);
        float *xm = falloc(cnt, 7, 1.0f), *om = falloc(cnt, 8, 0.0f), *dm = falloc(cnt, 9, 1.0f);
        float *dxm = falloc(cnt, 10, 0.0f), *mm = falloc(cnt, 11, 0.0f);
        attn_view x, o, dout, dx, mo;
        attn_view_init(&x, ATTN_F32, xm, 3, sh);
        attn_view_init(&o, ATTN_F32, om, 3, sh);
        attn_view_init(&dout, ATTN_F32, dm, 3, sh);
        attn_view_init(&dx, ATTN_F32, dxm, 3, sh);
        attn_view_init(&mo, ATTN_F32, mm, 3, sh);
        size_t wf = attn_encoder_workspace_size(&cfg, &x, &opts, NULL);
        size_t wm = attn_mha_workspace_size(&cfg.mha, &x, NULL, &opts, NULL);
        size_t cs = attn_encoder_cache_size(&cfg, B, n);
        size_t wb = attn_encoder_backward_workspace_size(&cfg, &x, &opts);
        void *work = bench_alloc64(wf > wb ? (wf > wm ? wf : wm) : (wb > wm ? wb : wm));
        void *cache = bench_alloc64(cs);
        attn_view cv[15];
        attn_trace tr;
        if (!work || !cache)
            die("workspace", ATTN_ENOMEM);
        size_t wmax = wf > wb ? (wf > wm ? wf : wm) : (wb > wm ? wb : wm);
        memset(work, 0, wmax);
        memset(cache, 0, cs);
        if ((st = attn_encoder_cache_bind(&cfg, B, n, cache, cs, cv, &tr)) != ATTN_OK)
            die("cache_bind", st);
        double tf[MAX_REPS], tt[MAX_REPS], tb[MAX_REPS], tm[MAX_REPS];
        for (int i = 0; i < warmup + reps; ++i) {
            double t0 = bench_now();
            if ((st = attn_encoder_forward(&cfg, &p, &x, &opts, &o, NULL, work, wf)) != ATTN_OK)
                die("attn_encoder_forward", st);
            double t1 = bench_now();
            if ((st = attn_mha_forward(&cfg.mha, &p.mha, &x, NULL, &opts, &mo, NULL, work,
                                       wm)) != ATTN_OK)
                die("attn_mha_forward", st);
            double t2 = bench_now(), t3 = t2, t4 = t2;
            if (train) {
                if ((st = attn_encoder_forward(&cfg, &p, &x, &opts, &o, &tr, work, wf)) !=
                    ATTN_OK)
                    die("attn_encoder_forward (cache)", st);
                t3 = bench_now();
                if ((st = attn_encoder_backward(&cfg, &p, &x, &opts, &tr, &dout, &dx, &g, work,
                                                wb)) != ATTN_OK)
                    die("attn_encoder_backward", st);
                t4 = bench_now();
            }
            if (i >= warmup) {
                tf[i - warmup] = t1 - t0;
                tm[i - warmup] = t2 - t1;
                tt[i - warmup] = t4 - t2;
                tb[i - warmup] = t4 - t3;
            }
        }
        double lin = 2.0 * (double)B * (double)n * (4.0 * C * C + 2.0 * C * F);
        double att = 4.0 * (double)B * (double)n * (double)n * (double)C * (causal ? 0.5 : 1.0);
        double mf = 2.0 * (double)B * (double)n * 4.0 * C * C + att;
        double f = bench_median(tf, reps), m = bench_median(tm, reps);
        fprintf(out, "%lld,%.4f,%.4f,%.4f,%.4f,%.2f,%.2f,%.2f\n", (long long)n, 1e3 * f,
                1e3 * bench_median(tt, reps), 1e3 * bench_median(tb, reps), 1e3 * m, (lin + att) / f / 1e9,
                mf / m / 1e9, gref);
        fflush(out);
        free(xm), free(om), free(dm), free(dxm), free(mm), free(work), free(cache);
    }
    if (csv)
        fclose(out);
    return 0;
}
