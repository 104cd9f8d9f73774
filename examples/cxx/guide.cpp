// SPDX-License-Identifier: MIT
// The C++ section of docs/guide.md: attn from C++17 (tests/cxx_test.sh compiles it with
// -std=c++17 -Wall -Wextra -pedantic -Werror against an installed attn and runs it).
//   c++ -std=c++17 guide.cpp $(pkg-config --cflags --libs attn)
#include <attn/attn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

// attn's slabs want 64-byte alignment; std::aligned_alloc wants a multiple of it.
struct free_deleter {
    void operator()(void *p) const { std::free(p); }
};
static std::unique_ptr<void, free_deleter> alloc64(std::size_t bytes) {
    return std::unique_ptr<void, free_deleter>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
}

int main() {
    const int64_t B = 2, T = 16, C = 32, H = 4, D = C / H;

    // One attention call on std::vector storage: (B, H, T, D), row-major.
    std::vector<double> q(B * H * T * D), k(q.size()), v(q.size()), o(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) {
        q[i] = std::sin(0.1 * double(i));
        k[i] = std::cos(0.3 * double(i));
        v[i] = std::sin(0.7 * double(i) + 1.0);
    }
    attn_view Q, K, V, O;
    const int64_t shape[4] = {B, H, T, D};
    attn_view_init(&Q, ATTN_F64, q.data(), 4, shape);
    attn_view_init(&K, ATTN_F64, k.data(), 4, shape);
    attn_view_init(&V, ATTN_F64, v.data(), 4, shape);
    attn_view_init(&O, ATTN_F64, o.data(), 4, shape);

    attn_sdpa_opts opts{};                 // value-initialized: all zero, the defaults
    opts.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_status s = attn_sdpa(&Q, &K, &V, &opts, &O, nullptr, 0);
    if (s != ATTN_OK) {
        std::fprintf(stderr, "attn_sdpa: %s\n", attn_strerror(s));
        return 1;
    }

    // Heads from (B, T, H*D) without a copy: split, then permute (no compound literals).
    attn_view x, split, heads;
    const int64_t xshape[3] = {B, T, C};
    attn_view_init(&x, ATTN_F64, o.data(), 3, xshape);
    const int perm[4] = {0, 2, 1, 3};
    if (attn_view_split(&x, 2, D, &split) != ATTN_OK ||
        attn_view_permute(&split, perm, &heads) != ATTN_OK)
        return 1;

    // A layer config: set the fields by name (C++17 has no designated initializers).
    attn_encoder_config cfg{};
    cfg.mha.dtype = ATTN_F64;
    cfg.mha.d_model = C;
    cfg.mha.heads = H;
    cfg.mha.bias = true;
    cfg.ffn.dtype = ATTN_F64;
    cfg.ffn.d_model = C;
    cfg.ffn.d_ff = 4 * C;
    cfg.ffn.act = ATTN_ACT_GELU_ERF;
    cfg.ffn.bias = true;
    cfg.norm = ATTN_PRE_NORM;
    cfg.ln_affine = true;

    const std::size_t pbytes = attn_encoder_params_size(&cfg);
    auto slab = alloc64(pbytes);
    attn_encoder_params p;
    s = attn_encoder_params_bind(&p, &cfg, slab.get(), pbytes);
    if (s == ATTN_OK)
        s = attn_encoder_params_init(&cfg, &p, 42);

    std::vector<double> y(B * T * C);
    attn_view X, Y;
    attn_view_init(&Y, ATTN_F64, y.data(), 3, xshape);
    attn_view_init(&X, ATTN_F64, q.data(), 3, xshape); // any (B, T, C) input
    if (s == ATTN_OK)
        s = attn_encoder_forward(&cfg, &p, &X, &opts, &Y, nullptr, nullptr, 0);
    if (s != ATTN_OK) {
        std::fprintf(stderr, "encoder: %s\n", attn_strerror(s));
        return 1;
    }
    std::printf("attn %s from C++: sdpa and an encoder block ok, y[0] = %.6f\n",
                attn_version_string(), y[0]);
    return std::isfinite(y[0]) ? 0 : 1;
}
