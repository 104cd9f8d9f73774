/* SPDX-License-Identifier: MIT */
/* Train a 1-layer causal encoder to copy the token two places back, with Adam, on attn's public API. */
#include <attn/attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Task: tokens s_0 .. s_{T-1} drawn uniformly from V symbols; at position
 * t >= 2 the model must output s_{t-2}. A causal block can only solve it by
 * attending two positions back, which it must learn from the learned
 * position table. Chance level is ln V = 2.08 nats; the program exits 1
 * unless the mean loss of the last 20 steps is below `threshold`.
 *
 * Usage: train_copy [steps=400] [threshold=0.25]
 */
enum { V = 8, T = 10, B = 32, C = 32, H = 4, F = 64, DELAY = 2 };

#define CHECK(call)                                                                  \
    do {                                                                             \
        attn_status s_ = (call);                                                     \
        if (s_ != ATTN_OK) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
                    attn_strerror(s_));                                              \
            exit(2);                                                                 \
        }                                                                            \
    } while (0)

/* Adam (Kingma & Ba 2015) on one flat float array. */
typedef struct adam {
    float *m, *v;
    size_t n;
} adam;

static void adam_step(adam *a, float *p, const float *g, int t, float lr) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < a->n; ++i) {
        a->m[i] = b1 * a->m[i] + (1 - b1) * g[i];
        a->v[i] = b2 * a->v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr * (a->m[i] / c1) / (sqrtf(a->v[i] / c2) + eps);
    }
}

static adam adam_new(size_t n) {
    adam a = {calloc(n, sizeof(float)), calloc(n, sizeof(float)), n};
    return a;
}

static attn_view view(float *p, int ndim, const int64_t *shape) {
    attn_view v;
    CHECK(attn_view_init(&v, ATTN_F32, p, ndim, shape));
    return v;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 400;
    double threshold = argc > 2 ? atof(argv[2]) : 0.25;
    if (steps < 1 || !(threshold > 0)) {
        fprintf(stderr, "usage: train_copy [steps>0] [threshold>0]\n");
        return 2;
    }
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F32, .d_model = C, .heads = H, .bias = true},
        .ffn = {.dtype = ATTN_F32, .d_model = C, .d_ff = F, .act = ATTN_ACT_GELU_TANH,
                .bias = true},
        .norm = ATTN_PRE_NORM, .ln_affine = true};
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};

    /* every trainable tensor in one slab: encoder params, then E (V, C), P (T, C), Wout (C, V), bout (V) */
    size_t enc_bytes = attn_encoder_params_size(&cfg);
    size_t extra = (size_t)(V * C + T * C + C * V + V) * sizeof(float);
    size_t total = enc_bytes + extra;
    float *slab = aligned_alloc(64, (total + 63) & ~(size_t)63);
    float *gslab = aligned_alloc(64, (total + 63) & ~(size_t)63);
    memset(slab, 0, total);
    attn_encoder_params p, g;
    CHECK(attn_encoder_params_bind(&p, &cfg, slab, enc_bytes));
    CHECK(attn_encoder_params_bind(&g, &cfg, gslab, enc_bytes));
    float *E = slab + enc_bytes / sizeof(float), *P = E + V * C, *Wout = P + T * C, *bout = Wout + C * V;
    float *gE = gslab + enc_bytes / sizeof(float), *gP = gE + V * C, *gWout = gP + T * C, *gbout = gWout + C * V;

    /* initialization: Xavier for matrices, gamma 1, small normal embeddings */
    attn_view *mats[] = {&p.mha.wq, &p.mha.wk, &p.mha.wv, &p.mha.wo, &p.ffn.w1, &p.ffn.w2};
    for (int i = 0; i < 6; ++i)
        CHECK(attn_init_xavier(ATTN_INIT_UNIFORM, 1.0, 2026, (uint64_t)i, mats[i]));
    for (int i = 0; i < C; ++i)
        ((float *)p.ln1_g.data)[i] = ((float *)p.ln2_g.data)[i] = 1.0f;
    attn_view vE = view(E, 2, (int64_t[]){V, C}), vP = view(P, 2, (int64_t[]){T, C});
    attn_view vW = view(Wout, 2, (int64_t[]){C, V}), vb = view(bout, 1, (int64_t[]){V});
    CHECK(attn_init_normal(2026, 10, 0, 0.0, 1.0, &vE));
    CHECK(attn_init_normal(2026, 11, 0, 0.0, 1.0, &vP));
    CHECK(attn_init_xavier(ATTN_INIT_UNIFORM, 1.0, 2026, 12, &vW));
    attn_view gvE = view(gE, 2, (int64_t[]){V, C}), gvP = view(gP, 2, (int64_t[]){T, C});
    attn_view gvW = view(gWout, 2, (int64_t[]){C, V}), gvb = view(gbout, 1, (int64_t[]){V});
    (void)gvE; (void)gvP;

    /* activations, cache, workspaces: allocated once, reused every step */
    float *x = malloc(sizeof(float) * B * T * C), *h = malloc(sizeof(float) * B * T * C);
    float *dh = malloc(sizeof(float) * B * T * C), *dx = malloc(sizeof(float) * B * T * C);
    float *logits = malloc(sizeof(float) * B * T * V), *probs = malloc(sizeof(float) * B * T * V);
    int *tok = malloc(sizeof(int) * B * T);
    attn_view vx = view(x, 3, (int64_t[]){B, T, C}), vh = view(h, 3, (int64_t[]){B, T, C});
    attn_view vdh = view(dh, 3, (int64_t[]){B, T, C}), vdx = view(dx, 3, (int64_t[]){B, T, C});
    attn_view vl = view(logits, 3, (int64_t[]){B, T, V}), vp = view(probs, 3, (int64_t[]){B, T, V});
    size_t cache_bytes = attn_encoder_cache_size(&cfg, B, T);
    void *cache_slab = aligned_alloc(64, (cache_bytes + 63) & ~(size_t)63);
    attn_view cache_views[15];
    attn_trace cache;
    CHECK(attn_encoder_cache_bind(&cfg, B, T, cache_slab, cache_bytes, cache_views, &cache));
    size_t ws = attn_encoder_workspace_size(&cfg, &vx, &causal, &cache);
    size_t wsb = attn_encoder_backward_workspace_size(&cfg, &vx, &causal);
    if (wsb > ws) ws = wsb;
    void *work = aligned_alloc(64, (ws + 63) & ~(size_t)63);

    adam opt = adam_new(total / sizeof(float));
    uint64_t rng = 12345;
    double recent = 0;
    int nrecent = 0;
    for (int step = 1; step <= steps; ++step) {
        /* a fresh batch: x = E[tokens] + P */
        for (int i = 0; i < B * T; ++i) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tok[i] = (int)((rng >> 33) % V);
        }
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t)
                for (int c = 0; c < C; ++c)
                    x[(b * T + t) * C + c] = E[tok[b * T + t] * C + c] + P[t * C + c];
        CHECK(attn_encoder_forward(&cfg, &p, &vx, &causal, &vh, &cache, work, ws));
        CHECK(attn_linear(&vh, &vW, &vb, &vl, NULL, 0));
        CHECK(attn_softmax(&vl, &vp));
        /* cross-entropy over positions t >= DELAY; dlogits = (probs - onehot) / N */
        double loss = 0;
        int n = B * (T - DELAY);
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                float *pr = probs + (b * T + t) * V;
                if (t < DELAY) {
                    memset(pr, 0, sizeof(float) * V);
                    continue;
                }
                int y = tok[b * T + t - DELAY];
                loss -= log(fmax(pr[y], 1e-30));
                for (int k = 0; k < V; ++k)
                    pr[k] = (pr[k] - (k == y)) / (float)n;
            }
        loss /= n;
        memset(gslab, 0, total);
        memset(dh, 0, sizeof(float) * B * T * C);
        memset(dx, 0, sizeof(float) * B * T * C);
        CHECK(attn_linear_backward(&vh, &vW, &vp, &vdh, &gvW, &gvb, NULL, 0));
        CHECK(attn_encoder_backward(&cfg, &p, &vx, &causal, &cache, &vdh, &vdx, &g, work, ws));
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t)
                for (int c = 0; c < C; ++c) {
                    gE[tok[b * T + t] * C + c] += dx[(b * T + t) * C + c];
                    gP[t * C + c] += dx[(b * T + t) * C + c];
                }
        adam_step(&opt, slab, gslab, step, 3e-3f);
        if (step > steps - 20) {
            recent += loss;
            ++nrecent;
        }
        if (step == 1 || step % 50 == 0 || step == steps)
            printf("step %4d  loss %.4f\n", step, loss);
    }
    recent /= nrecent;
    printf("mean loss of the last %d steps: %.4f (chance: %.4f, threshold %.4f)\n", nrecent,
           recent, log((double)V), threshold);
    free(slab); free(gslab); free(x); free(h); free(dh); free(dx); free(logits); free(probs);
    free(tok); free(cache_slab); free(work); free(opt.m); free(opt.v);
    if (!(recent < threshold)) {
        printf("FAILED: the loss did not fall below the threshold\n");
        return 1;
    }
    printf("OK\n");
    return 0;
}
