/* SPDX-License-Identifier: MIT */
/* The guide's second program: an encoder block forward and backward with caller-owned memory. */
#include <attn/attn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *alloc64(size_t n) { return aligned_alloc(64, (n + 63) & ~(size_t)63); }

int main(void) {
    enum { B = 2, T = 16, C = 64 };
    /* guide: encoder config */
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F32, .d_model = C, .heads = 4, .bias = true},
        .ffn = {.dtype = ATTN_F32, .d_model = C, .d_ff = 4 * C,
                .act = ATTN_ACT_GELU_ERF, .bias = true},
        .eps = 1e-5, .norm = ATTN_PRE_NORM, .ln_affine = true};

    /* parameters and their gradients: one slab each, same layout */
    size_t pbytes = attn_encoder_params_size(&cfg);
    attn_encoder_params p, g;
    void *pslab = alloc64(pbytes), *gslab = alloc64(pbytes);
    memset(pslab, 0, pbytes); /* biases 0, LayerNorm beta 0 */
    memset(gslab, 0, pbytes);
    attn_encoder_params_bind(&p, &cfg, pslab, pbytes);
    attn_encoder_params_bind(&g, &cfg, gslab, pbytes);
    attn_view *w[] = {&p.mha.wq, &p.mha.wk, &p.mha.wv, &p.mha.wo, &p.ffn.w1, &p.ffn.w2};
    for (int i = 0; i < 6; ++i)
        attn_init_xavier(ATTN_INIT_UNIFORM, 1.0, 42, (uint64_t)i, w[i]);
    /* guide: end */
    for (int i = 0; i < C; ++i)
        ((float *)p.ln1_g.data)[i] = ((float *)p.ln2_g.data)[i] = 1.0f;

    float *x = alloc64(sizeof(float) * B * T * C), *y = alloc64(sizeof(float) * B * T * C);
    float *dy = alloc64(sizeof(float) * B * T * C), *dx = alloc64(sizeof(float) * B * T * C);
    attn_view X, Y, DY, DX;
    int64_t shape[3] = {B, T, C};
    attn_view_init(&X, ATTN_F32, x, 3, shape);
    attn_view_init(&Y, ATTN_F32, y, 3, shape);
    attn_view_init(&DY, ATTN_F32, dy, 3, shape);
    attn_view_init(&DX, ATTN_F32, dx, 3, shape);
    attn_init_normal(7, 0, 0, 0.0, 1.0, &X);
    attn_init_normal(7, 1, 0, 0.0, 1.0, &DY);
    memset(dx, 0, sizeof(float) * B * T * C);

    /* guide: encoder forward and backward */
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};

    /* what the backward needs from the forward: a cache the caller owns */
    size_t cbytes = attn_encoder_cache_size(&cfg, B, T);
    void *cslab = alloc64(cbytes);
    attn_view cache_views[15];
    attn_trace cache;
    attn_encoder_cache_bind(&cfg, B, T, cslab, cbytes, cache_views, &cache);

    /* one workspace, sized once, serves both passes: no malloc in the loop */
    size_t ws = attn_encoder_workspace_size(&cfg, &X, &causal, &cache);
    size_t wsb = attn_encoder_backward_workspace_size(&cfg, &X, &causal);
    if (wsb > ws)
        ws = wsb;
    void *work = alloc64(ws);

    attn_status s = attn_encoder_forward(&cfg, &p, &X, &causal, &Y, &cache, work, ws);
    if (s == ATTN_OK) /* gradients accumulate: dx and g were zeroed */
        s = attn_encoder_backward(&cfg, &p, &X, &causal, &cache, &DY, &DX, &g, work, ws);
    if (s != ATTN_OK) {
        fprintf(stderr, "encoder: %s\n", attn_strerror(s));
        return 1;
    }
    /* guide: end */
    double n = 0;
    for (int i = 0; i < B * T * C; ++i)
        n += (double)dx[i] * dx[i];
    printf("encoder block (B %d, T %d, C %d): %lld parameters, workspace %zu bytes, "
           "cache %zu bytes, |dx| = %.4f\n", B, T, C,
           (long long)attn_encoder_param_count(&cfg), ws, cbytes, n > 0 ? __builtin_sqrt(n) : 0);
    free(pslab); free(gslab); free(x); free(y); free(dy); free(dx); free(cslab); free(work);
    return n > 0 ? 0 : 1;
}
