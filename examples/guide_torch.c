/* SPDX-License-Identifier: MIT */
/*
 * The guide's "From PyTorch" program: a saved nn.TransformerEncoder (N layers and a
 * final LayerNorm) run in C from its safetensors file.
 *
 *   guide_torch model.safetensors io.safetensors
 *
 * model: save_file(model.state_dict(), path) of
 * nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.0, "relu",
 * batch_first=True), 3, norm=nn.LayerNorm(8)) in float64; io: its x and out
 * (scripts/gen_safetensors_fixtures.py, case enc_post_relu_f64). Exit status 0
 * when the output matches PyTorch's to 1e-12.
 */
#include <attn/attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static attn_status encode(const char *path, const attn_view *x, attn_view *y, attn_view *tmp) {
    /* guide: from pytorch */
    attn_safetensors *f;
    attn_status s = attn_safetensors_open(path, &f); /* maps the file, checks the header */
    if (s != ATTN_OK)
        return s;
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F64, .d_model = 8, .heads = 2, .bias = true},
        .ffn =
            {.dtype = ATTN_F64, .d_model = 8, .d_ff = 16, .act = ATTN_ACT_RELU, .bias = true},
        .eps = 1e-5,
        .norm = ATTN_POST_NORM,
        .ln_affine = true}; /* PyTorch's defaults */
    size_t ws = attn_encoder_workspace_size(&cfg, x, NULL, NULL);
    void *work = malloc(ws); /* one workspace for every layer */
    const attn_view *in = x;
    attn_view *bufs[2] = {tmp, y};
    for (int l = 0; l < 3 && s == ATTN_OK; ++l) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        attn_encoder_params p; /* views into the mapped file: no copy */
        s = attn_encoder_params_from_torch(&cfg, f, prefix, &p);
        if (s == ATTN_OK)
            s = attn_encoder_forward(&cfg, &p, in, NULL, bufs[l % 2], NULL, work, ws);
        in = bufs[l % 2];
    }
    attn_view g, b; /* the final nn.LayerNorm: norm.weight, norm.bias */
    if (s == ATTN_OK && (s = attn_safetensors_view(f, "norm.weight", &g)) == ATTN_OK &&
        (s = attn_safetensors_view(f, "norm.bias", &b)) == ATTN_OK)
        s = attn_layernorm(cfg.eps, in, &g, &b, in == y ? tmp : y, NULL, NULL);
    free(work);
    attn_safetensors_close(f); /* the parameter views die with the mapping */
    /* guide: end */
    return s;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s model.safetensors io.safetensors\n", argv[0]);
        return 2;
    }
    attn_safetensors *io;
    attn_view x, want;
    if (attn_safetensors_open(argv[2], &io) != ATTN_OK ||
        attn_safetensors_view(io, "x", &x) != ATTN_OK ||
        attn_safetensors_view(io, "out", &want) != ATTN_OK) {
        fprintf(stderr, "%s: cannot read x and out\n", argv[2]);
        return 1;
    }
    int64_t n = x.shape[0] * x.shape[1] * x.shape[2];
    double *y = calloc((size_t)n, sizeof *y), *t = calloc((size_t)n, sizeof *t);
    attn_view Y, Tmp;
    attn_view_init(&Y, ATTN_F64, y, 3, x.shape);
    attn_view_init(&Tmp, ATTN_F64, t, 3, x.shape);
    attn_status s = encode(argv[1], &x, &Y, &Tmp);
    if (s != ATTN_OK) {
        fprintf(stderr, "guide_torch: %s\n", attn_strerror(s));
        return 1;
    }
    /* the layers wrote Tmp, Y, Tmp; the final norm wrote Y */
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        double w = ((const double *)want.data)[i], e = fabs(y[i] - w) / (1 + fabs(w));
        worst = e > worst || isnan(e) ? e : worst;
    }
    printf("guide_torch: 3 layers + norm, max rel. error vs PyTorch %.2e\n", worst);
    free(y);
    free(t);
    attn_safetensors_close(io);
    return worst <= 1e-12 ? 0 : 1;
}
