/* SPDX-License-Identifier: MIT */
/* The guide's first program: one causal attn_sdpa call on views, with a workspace. */
#include <attn/attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    enum { B = 2, H = 4, T = 64, D = 32 };
    float *q = malloc(sizeof(float) * B * H * T * D), *k = malloc(sizeof(float) * B * H * T * D);
    float *v = malloc(sizeof(float) * B * H * T * D), *o = malloc(sizeof(float) * B * H * T * D);
    for (int i = 0; i < B * H * T * D; ++i) {
        q[i] = sinf(0.1f * (float)i);
        k[i] = cosf(0.07f * (float)i);
        v[i] = (float)(i % 7) - 3.0f;
    }
    /* guide: sdpa */
    attn_view Q, K, V, O;
    int64_t shape[4] = {B, H, T, D}; /* (B, H, T, D), row-major */
    attn_view_init(&Q, ATTN_F32, q, 4, shape);
    attn_view_init(&K, ATTN_F32, k, 4, shape);
    attn_view_init(&V, ATTN_F32, v, 4, shape);
    attn_view_init(&O, ATTN_F32, o, 4, shape);

    attn_sdpa_opts opts = {0};             /* all-zero: scale 1/sqrt(D), no mask */
    opts.causal = ATTN_CAUSAL_TOP_LEFT;    /* PyTorch's is_causal */

    size_t ws = attn_sdpa_workspace_size(&Q, &K, &V, &opts);
    void *work = malloc(ws ? ws : 1);
    attn_status s = attn_sdpa(&Q, &K, &V, &opts, &O, work, ws);
    if (s != ATTN_OK) {
        fprintf(stderr, "attn_sdpa: %s\n", attn_strerror(s));
        return 1;
    }
    /* guide: end */
    /* causal: the first query sees only the first key, so its output is v[0] */
    int ok = 1;
    for (int d = 0; d < D; ++d)
        ok &= fabsf(o[d] - v[d]) < 1e-6f;
    printf("attn_sdpa (B %d, H %d, T %d, D %d), workspace %zu bytes: first row %s v[0]\n", B,
           H, T, D, ws, ok ? "equals" : "DIFFERS FROM");
    free(q); free(k); free(v); free(o); free(work);
    return ok ? 0 : 1;
}
