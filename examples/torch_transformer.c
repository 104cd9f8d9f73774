/* SPDX-License-Identifier: MIT */
/*
 * A whole PyTorch nn.Transformer run in C from one safetensors file: the encoder
 * stack (N layers + final LayerNorm) makes the memory, the decoder stack (M layers
 * with cross-attention over it + final LayerNorm) the output, every layer bound by
 * name with no copy and all of them sharing one workspace (docs/guide.md "From
 * PyTorch").
 *
 *   torch_transformer model.safetensors io.safetensors heads gelu|relu post|pre
 *
 * model.safetensors: safetensors.torch.save_file(model.state_dict(), path) of an
 * nn.Transformer(batch_first=True); io.safetensors: src (B, S, C), tgt (B, T, C) and
 * PyTorch's out = model(src, tgt, tgt_mask=causal) (scripts/gen_safetensors_fixtures.py).
 * Exit status 0 when out matches PyTorch (1e-12 in f64, 1e-5 in f32).
 */
#include <attn/attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                              \
    do {                                                                                       \
        attn_status s_ = (call);                                                               \
        if (s_ != ATTN_OK) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, attn_strerror(s_));  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* An owned (B, T, C) tensor of dtype dt. */
static attn_view tensor(attn_dtype dt, int64_t B, int64_t T, int64_t C) {
    attn_view v;
    void *p = calloc((size_t)(B * T * C), attn_dtype_size(dt));
    if (!p)
        exit(1);
    TRY(attn_view_init(&v, dt, p, 3, (int64_t[]){B, T, C}));
    return v;
}

/* How many layers "<stack>.layers.<i>." holds: the first i without a linear1.weight. */
static int count_layers(const attn_safetensors *f, const char *stack) {
    char name[96];
    attn_view v;
    int n = 0;
    for (;; ++n) {
        snprintf(name, sizeof name, "%s.layers.%d.linear1.weight", stack, n);
        if (attn_safetensors_view(f, name, &v) != ATTN_OK)
            return n;
    }
}

/* out = LayerNorm(x) with "<stack>.norm.weight" and ".bias". */
static void final_norm(const attn_safetensors *f, const char *stack, double eps,
                       const attn_view *x, attn_view *out) {
    char gn[64], bn[64];
    attn_view g, b;
    snprintf(gn, sizeof gn, "%s.norm.weight", stack);
    snprintf(bn, sizeof bn, "%s.norm.bias", stack);
    TRY(attn_safetensors_view(f, gn, &g));
    TRY(attn_safetensors_view(f, bn, &b));
    TRY(attn_layernorm(eps, x, &g, &b, out, NULL, NULL));
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s model.safetensors io.safetensors heads gelu|relu post|pre\n",
                argv[0]);
        return 2;
    }
    attn_safetensors *f, *io;
    TRY(attn_safetensors_open(argv[1], &f));
    TRY(attn_safetensors_open(argv[2], &io));
    attn_view src, tgt, want, w1;
    TRY(attn_safetensors_view(io, "src", &src));
    TRY(attn_safetensors_view(io, "tgt", &tgt));
    TRY(attn_safetensors_view(io, "out", &want));
    TRY(attn_safetensors_view(f, "encoder.layers.0.linear1.weight", &w1)); /* (F, C) */
    attn_dtype dt = src.dtype;
    int64_t B = src.shape[0], S = src.shape[1], T = tgt.shape[1], C = src.shape[2];

    /* the configs: PyTorch's nn.Transformer arguments */
    attn_mha_config mha = {.dtype = dt, .d_model = C, .heads = atoi(argv[3]), .bias = true};
    attn_ffn_config ffn = {.dtype = dt,
                           .d_model = C,
                           .d_ff = w1.shape[0],
                           .act = strcmp(argv[4], "relu") ? ATTN_ACT_GELU_ERF : ATTN_ACT_RELU,
                           .bias = true};
    attn_norm_order norm = strcmp(argv[5], "pre") ? ATTN_POST_NORM : ATTN_PRE_NORM;
    attn_encoder_config ec = {
        .mha = mha, .ffn = ffn, .eps = 1e-5, .norm = norm, .ln_affine = true};
    attn_decoder_config dc = {.self_attn = mha,
                              .cross = mha,
                              .ffn = ffn,
                              .eps = 1e-5,
                              .norm = norm,
                              .ln_affine = true};
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT}; /* tgt_mask */

    /* one workspace for every layer of both stacks, sized once */
    attn_view e1 = tensor(dt, B, S, C), e2 = tensor(dt, B, S, C), mem = tensor(dt, B, S, C);
    attn_view d1 = tensor(dt, B, T, C), d2 = tensor(dt, B, T, C);
    size_t ew = attn_encoder_workspace_size(&ec, &src, NULL, NULL);
    size_t dw = attn_decoder_workspace_size(&dc, &tgt, &mem, &causal, NULL);
    size_t ws = ew > dw ? ew : dw;
    void *work = aligned_alloc(64, (ws + 63) / 64 * 64);
    if (!work)
        return 1;

    /* encoder: the layers alternate between two buffers; memory = the final norm's output */
    int ne = count_layers(f, "encoder"), nd = count_layers(f, "decoder");
    const attn_view *x = &src;
    attn_view *ebufs[2] = {&e1, &e2};
    for (int l = 0; l < ne; ++l) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "encoder.layers.%d.", l);
        attn_encoder_params p; /* views into the mapped file */
        TRY(attn_encoder_params_from_torch(&ec, f, prefix, &p));
        attn_view *y = ebufs[l % 2];
        TRY(attn_encoder_forward(&ec, &p, x, NULL, y, NULL, work, ws));
        x = y;
    }
    final_norm(f, "encoder", 1e-5, x, &mem);

    /* decoder: causal self-attention, cross-attention over mem, then the final norm */
    x = &tgt;
    attn_view *dbufs[2] = {&d1, &d2};
    for (int l = 0; l < nd; ++l) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "decoder.layers.%d.", l);
        attn_decoder_params p;
        TRY(attn_decoder_params_from_torch(&dc, f, prefix, &p));
        attn_view *y = dbufs[l % 2];
        TRY(attn_decoder_forward(&dc, &p, x, &mem, &causal, NULL, y, NULL, work, ws));
        x = y;
    }
    attn_view *out = x == &d1 ? &d2 : &d1; /* the buffer the last layer did not write */
    final_norm(f, "decoder", 1e-5, x, out);

    /* compare with PyTorch */
    double worst = 0, tol = dt == ATTN_F64 ? 1e-12 : 1e-5;
    for (int64_t i = 0; i < B * T * C; ++i) {
        double g = dt == ATTN_F64 ? ((double *)out->data)[i] : ((float *)out->data)[i];
        double w = dt == ATTN_F64 ? ((double *)want.data)[i] : ((float *)want.data)[i];
        double e = fabs(g - w) / (1 + fabs(w));
        worst = e > worst || isnan(e) ? e : worst;
    }
    printf("nn.Transformer: %d encoder + %d decoder layers, one %zu-byte workspace; "
           "max rel. error vs PyTorch %.2e\n",
           ne, nd, ws, worst);
    int ok = ne > 0 && nd > 0 && worst <= tol;
    free(work);
    free(e1.data);
    free(e2.data);
    free(mem.data);
    free(d1.data);
    free(d2.data);
    attn_safetensors_close(io);
    attn_safetensors_close(f);
    return ok ? 0 : 1;
}
