/* SPDX-License-Identifier: MIT */
/* The README's fifteen-line example, built and run by the test suite. */
#include <attn/attn.h>   /* cc prog.c $(pkg-config --cflags --libs attn) */
enum { B = 1, H = 8, T = 128, D = 64 };
static float q[B*H*T*D], k[B*H*T*D], v[B*H*T*D], out[B*H*T*D];

int main(void) {
    attn_view Q, K, V, O;
    int64_t shape[4] = {B, H, T, D};                /* (B, H, T, D) row-major */
    attn_view_init(&Q, ATTN_F32, q, 4, shape);
    attn_view_init(&K, ATTN_F32, k, 4, shape);
    attn_view_init(&V, ATTN_F32, v, 4, shape);
    attn_view_init(&O, ATTN_F32, out, 4, shape);
    attn_sdpa_opts opts = {.causal = ATTN_CAUSAL_TOP_LEFT};  /* zero = defaults */
    attn_status s = attn_sdpa(&Q, &K, &V, &opts, &O, NULL, 0); /* NULL: attn allocates */
    return s == ATTN_OK ? 0 : (int)s;
}
