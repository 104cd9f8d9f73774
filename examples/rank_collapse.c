/* SPDX-License-Identifier: MIT */
/* Rank collapse: token-matrix effective rank, attention-only stacks vs encoder blocks. */
#include <attn/attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * Dong, Cordonnier & Loukas (ICML 2021): self-attention alone mixes tokens
 * into convex combinations of each other, so a stack of attention layers
 * without residual connections drives the token matrix X (T, C) towards
 * rank 1 (every token the same vector). Skip connections (and the MLP) stop
 * it. Both stacks below use the same attention weights at every depth (an
 * encoder's MHA initialized from seed s equals a standalone MHA from s).
 */
enum { T = 32, C = 64, H = 4, DEPTH = 8 };

#define CHECK(call)                                                                            \
    do {                                                                                       \
        attn_status st_ = (call);                                                              \
        if (st_ != ATTN_OK) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, attn_strerror(st_)); \
            exit(EXIT_FAILURE);                                                                \
        }                                                                                      \
    } while (0)

typedef struct measure {
    double erank;  /* exp(entropy of normalized singular values) */
    int64_t rank;  /* singular values above max(T, C) eps s_max */
    double spread; /* ||X - 1 mean(X)||_F / ||X||_F: 0 when all tokens are equal */
} measure;

/* Diagnostics of the (T, C) token matrix of x (1, T, C). */
static measure measure_tokens(const attn_view *x) {
    attn_view m;
    measure r;
    CHECK(attn_view_select(x, 0, 0, &m));
    CHECK(attn_diag_effective_rank(0, &m, &r.erank, &r.rank, NULL, 0, NULL));
    const double *d = m.data;
    double num = 0, den = 0;
    for (int j = 0; j < C; ++j) {
        double mean = 0;
        for (int i = 0; i < T; ++i)
            mean += d[i * C + j] / T;
        for (int i = 0; i < T; ++i) {
            num += (d[i * C + j] - mean) * (d[i * C + j] - mean);
            den += d[i * C + j] * d[i * C + j];
        }
    }
    r.spread = den > 0 ? sqrt(num / den) : 0;
    return r;
}

int main(void) {
    attn_encoder_config enc = {
        .mha = {.dtype = ATTN_F64, .d_model = C, .heads = H, .bias = true},
        .ffn = {.dtype = ATTN_F64, .d_model = C, .act = ATTN_ACT_GELU_TANH, .bias = true},
        .norm = ATTN_PRE_NORM,
        .ln_affine = true};
    size_t mbytes = attn_mha_params_size(&enc.mha), ebytes = attn_encoder_params_size(&enc);
    char *mslab = aligned_alloc(64, (mbytes + 63) / 64 * 64);
    char *eslab = aligned_alloc(64, (ebytes + 63) / 64 * 64);
    double *xa = malloc(sizeof(double) * T * C), *xb = malloc(sizeof(double) * T * C);
    double *ea = malloc(sizeof(double) * T * C), *eb = malloc(sizeof(double) * T * C);
    if (!mslab || !eslab || !xa || !xb || !ea || !eb)
        return EXIT_FAILURE;
    attn_view att[2], blk[2];
    const int64_t shape[3] = {1, T, C};
    CHECK(attn_view_init(&att[0], ATTN_F64, xa, 3, shape));
    CHECK(attn_view_init(&att[1], ATTN_F64, xb, 3, shape));
    CHECK(attn_view_init(&blk[0], ATTN_F64, ea, 3, shape));
    CHECK(attn_view_init(&blk[1], ATTN_F64, eb, 3, shape));

    /* random tokens, N(0, 1): full rank min(T, C) = 32 */
    CHECK(attn_init_normal(1, 100, 0, 0.0, 1.0, &att[0]));
    CHECK(attn_init_normal(1, 100, 0, 0.0, 1.0, &blk[0]));

    attn_mha_params mp;
    attn_encoder_params ep;
    CHECK(attn_mha_params_bind(&mp, &enc.mha, mslab, mbytes));
    CHECK(attn_encoder_params_bind(&ep, &enc, eslab, ebytes));

    measure m0 = measure_tokens(&att[0]), ma = m0, mb = m0;
    printf("token matrix (T %d, C %d), %d heads, f64; erank = exp(H(s / sum s)), "
           "rank = #(s > max(T, C) eps s_max),\nspread = ||X - mean token|| / ||X||\n\n",
           T, C, H);
    printf("%6s | %29s | %29s\n", "", "attention only (no residual)",
           "pre-norm encoder blocks");
    printf("%6s | %8s %6s %13s | %8s %6s %13s\n", "layers", "erank", "rank", "spread", "erank",
           "rank", "spread");
    printf("%6d | %8.3f %6lld %13.3e | %8.3f %6lld %13.3e\n", 0, m0.erank, (long long)m0.rank,
           m0.spread, m0.erank, (long long)m0.rank, m0.spread);
    int cur = 0;
    for (int l = 1; l <= DEPTH; ++l) {
        uint64_t seed = 1000 + (uint64_t)l; /* layer l's weights, the same in both stacks */
        CHECK(attn_mha_params_init(&enc.mha, &mp, seed));
        CHECK(attn_encoder_params_init(&enc, &ep, seed));
        CHECK(attn_mha_forward(&enc.mha, &mp, &att[cur], NULL, NULL, &att[1 - cur], NULL, NULL,
                               0));
        CHECK(attn_encoder_forward(&enc, &ep, &blk[cur], NULL, &blk[1 - cur], NULL, NULL, 0));
        cur = 1 - cur;
        ma = measure_tokens(&att[cur]);
        mb = measure_tokens(&blk[cur]);
        if ((l & (l - 1)) == 0) /* 1, 2, 4, 8 */
            printf("%6d | %8.3f %6lld %13.3e | %8.3f %6lld %13.3e\n", l, ma.erank,
                   (long long)ma.rank, ma.spread, mb.erank, (long long)mb.rank, mb.spread);
    }
    free(mslab);
    free(eslab);
    free(xa);
    free(xb);
    free(ea);
    free(eb);

    /* the claim this example demonstrates; a failure exit means it did not hold */
    int collapsed = ma.spread < 1e-3 * m0.spread && mb.erank > 0.5 * m0.erank;
    printf("\n%s\n", collapsed ? "attention alone collapsed towards one token; residual blocks "
                                 "kept the rank"
                               : "expected collapse NOT observed");
    return collapsed ? EXIT_SUCCESS : EXIT_FAILURE;
}
