/* SPDX-License-Identifier: MIT */
/* Per-call overhead of attn at T = 4, C = 4: attn_sdpa, attn_mha_forward and
 * attn_encoder_forward on tiny f32 problems, with a caller workspace, where the
 * call's fixed cost (validation, planning, dispatch) is everything. Prints the
 * median time per call in microseconds; under `valgrind --tool=callgrind` the
 * instruction counts are repeatable on a busy machine.
 *
 *   attn-bench-overhead [calls]        (default 20000) */
#include <attn/attn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { T = 4, C = 4, H = 2, F = 8 };

/* median over 9 rounds of the mean time of `calls` calls of fn */
static double per_call(attn_status (*fn)(void *), void *ctx, long calls) {
    double r[9];
    for (int k = 0; k < 9; ++k) {
        double t0 = bench_now();
        for (long i = 0; i < calls; ++i)
            if (fn(ctx) != ATTN_OK) {
                fprintf(stderr, "attn-bench-overhead: call failed\n");
                exit(1);
            }
        r[k] = 1e6 * (bench_now() - t0) / (double)calls;
    }
    return bench_median(r, 9);
}

typedef struct ctx {
    attn_view q, k, v, o, x, y;
    attn_mha_config mc;
    attn_mha_params mp;
    attn_encoder_config ec;
    attn_encoder_params ep;
    void *work;
    size_t ws_sdpa, ws_mha, ws_enc;
} ctx;

static attn_status run_sdpa(void *p) {
    ctx *c = p;
    return attn_sdpa(&c->q, &c->k, &c->v, NULL, &c->o, c->work, c->ws_sdpa);
}
static attn_status run_mha(void *p) {
    ctx *c = p;
    return attn_mha_forward(&c->mc, &c->mp, &c->x, NULL, NULL, &c->y, NULL, c->work, c->ws_mha);
}
static attn_status run_enc(void *p) {
    ctx *c = p;
    return attn_encoder_forward(&c->ec, &c->ep, &c->x, NULL, &c->y, NULL, c->work, c->ws_enc);
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 20000;
    if (calls < 1) {
        fprintf(stderr, "usage: attn-bench-overhead [calls]\n");
        return 2;
    }
    static float qd[H * T * (C / H)], kd[H * T * (C / H)], vd[H * T * (C / H)], od[H * T * (C / H)];
    static float xd[T * C], yd[T * C];
    ctx c;
    memset(&c, 0, sizeof c);
    int64_t s4[4] = {1, H, T, C / H}, s3[3] = {1, T, C};
    attn_view_init(&c.q, ATTN_F32, qd, 4, s4);
    attn_view_init(&c.k, ATTN_F32, kd, 4, s4);
    attn_view_init(&c.v, ATTN_F32, vd, 4, s4);
    attn_view_init(&c.o, ATTN_F32, od, 4, s4);
    attn_view_init(&c.x, ATTN_F32, xd, 3, s3);
    attn_view_init(&c.y, ATTN_F32, yd, 3, s3);
    for (int i = 0; i < H * T * (C / H); ++i)
        qd[i] = kd[i] = vd[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < T * C; ++i)
        xd[i] = 0.1f * (float)(i % 5);
    c.mc = (attn_mha_config){.dtype = ATTN_F32, .d_model = C, .heads = H, .bias = true};
    c.ec = (attn_encoder_config){.mha = c.mc,
                                 .ffn = {.dtype = ATTN_F32, .d_model = C, .d_ff = F, .bias = true},
                                 .ln_affine = true};
    void *mslab = bench_alloc64(attn_mha_params_size(&c.mc));
    void *eslab = bench_alloc64(attn_encoder_params_size(&c.ec));
    if (!mslab || !eslab ||
        attn_mha_params_bind(&c.mp, &c.mc, mslab, attn_mha_params_size(&c.mc)) != ATTN_OK ||
        attn_encoder_params_bind(&c.ep, &c.ec, eslab, attn_encoder_params_size(&c.ec)) != ATTN_OK)
        return 1;
    memset(mslab, 0, attn_mha_params_size(&c.mc));
    memset(eslab, 0, attn_encoder_params_size(&c.ec));
    c.ws_sdpa = attn_sdpa_workspace_size(&c.q, &c.k, &c.v, NULL);
    c.ws_mha = attn_mha_workspace_size(&c.mc, &c.x, NULL, NULL, NULL);
    c.ws_enc = attn_encoder_workspace_size(&c.ec, &c.x, NULL, NULL);
    size_t ws = c.ws_sdpa > c.ws_mha ? c.ws_sdpa : c.ws_mha;
    ws = ws > c.ws_enc ? ws : c.ws_enc;
    c.work = bench_alloc64(ws);
    if (!c.work)
        return 1;
    printf("attn %s, T %d, C %d, H %d, F %d, f32, caller workspace\n", attn_version_string(), T,
           C, H, F);
    printf("sdpa     %.3f us/call\n", per_call(run_sdpa, &c, calls));
    printf("mha      %.3f us/call\n", per_call(run_mha, &c, calls));
    printf("encoder  %.3f us/call\n", per_call(run_enc, &c, calls));
    free(c.work);
    free(mslab);
    free(eslab);
    return 0;
}
