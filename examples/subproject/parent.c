/* SPDX-License-Identifier: MIT */
/* The parent program of examples/subproject: one causal attention call through attn. */
#include <math.h>
#include <stdio.h>

#include <attn/attn.h>

enum { T = 8, D = 4 };

int main(void) {
    static float q[T * D], k[T * D], v[T * D], o[T * D];
    for (int i = 0; i < T * D; ++i) {
        q[i] = sinf(0.3f * (float)i);
        k[i] = cosf(0.7f * (float)i);
        v[i] = (float)(i % D); /* every value row is (0, 1, 2, 3) */
    }
    attn_view Q, K, V, O;
    int64_t shape[4] = {1, 1, T, D};
    attn_view_init(&Q, ATTN_F32, q, 4, shape);
    attn_view_init(&K, ATTN_F32, k, 4, shape);
    attn_view_init(&V, ATTN_F32, v, 4, shape);
    attn_view_init(&O, ATTN_F32, o, 4, shape);
    attn_sdpa_opts opts = {0};
    opts.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_status s = attn_sdpa(&Q, &K, &V, &opts, &O, NULL, 0);
    if (s != ATTN_OK) {
        fprintf(stderr, "attn_sdpa: %s\n", attn_strerror(s));
        return 1;
    }
    /* weights sum to 1, so each output row is the value row (0, 1, 2, 3) */
    for (int i = 0; i < T * D; ++i)
        if (fabsf(o[i] - (float)(i % D)) > 1e-5f) {
            fprintf(stderr, "o[%d] = %g, want %d\n", i, (double)o[i], i % D);
            return 1;
        }
    printf("attn %s as a meson subproject: ok\n", attn_version_string());
    return 0;
}
