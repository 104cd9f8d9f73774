/* SPDX-License-Identifier: MIT */
/* Lesson 11 (seed 004): from hand-checkable QKV to a tiny multi-head causal self-attention, in
 * float32. */
#include "walkthrough.h"

/*
 * The seed's steps on attn's public API, float32 as the seed:
 *   1 the hand-checkable case q = k = [[1,0],[0,1],[1,1]], v = [[1,0],[0,2],[3,3]]:
 *     raw, scaled, mask, masked, weights and output, step by step (attn_gemm,
 *     attn_softmax) and in one call (attn_sdpa with its weights output), with
 *     the causal rule (ATTN_CAUSAL_TOP_LEFT, PyTorch's is_causal) and with a
 *     boolean keep-mask (1 = may attend, PyTorch's attn_mask True) agreeing;
 *   2 the tiny 2-head MHA (d_model 4, no bias, 64 parameters) with the seed's
 *     own weights and input (torch.manual_seed(1111), kept in
 *     tests/data/lesson11.txt by scripts/gen_lesson11_fixture.py): its
 *     shapes, its output and weights equal PyTorch's to 1e-6, and the
 *     d_model 5 / 2 heads configuration refused;
 *   3 causal isolation: editing token 3 leaves earlier outputs bit-identical
 *     (and changes them without the mask);
 *   4 gradient isolation through attn_mha_backward: d out[0,1] / d x is zero
 *     at positions 2.. and non-zero at 0..1;
 *   5 permutation equivariance without positions, and the sinusoidal table
 *     (attn_posenc_sinusoidal) breaking it.
 * Writes results.json with the seed's keys into the output folder.
 *
 * Usage: causal_mha [lesson11.txt=tests/data/lesson11.txt] [out=attn-out/lesson11]
 * Exit status 0 when every check passes, 1 when one fails, 2 on bad input.
 */
enum { B = 2, T = 4, C = 4, H = 2, DH = 2 };
static const double SEED_TOL = 1e-6; /* agreement with PyTorch's float32 numbers */

/* torch.testing.assert_close's float32 rule: |a - b| <= 1e-5 + 1.3e-6 |b|. */
static bool close_f32(const float *a, const float *b, int n, double *worst) {
    bool ok = true;
    *worst = 0;
    for (int i = 0; i < n; ++i) {
        double d = fabs((double)a[i] - (double)b[i]);
        *worst = fmax(*worst, d);
        ok = ok && d <= 1e-5 + 1.3e-6 * fabs((double)b[i]);
    }
    return ok;
}

/* Largest |a - seed| over n floats against the fixture's doubles. */
static double vs_seed(const float *a, const double *seed, int n) {
    double m = 0;
    for (int i = 0; i < n; ++i)
        m = fmax(m, fabs((double)a[i] - seed[i]));
    return m;
}

static void to_f32(const double *src, float *dst, int n) {
    for (int i = 0; i < n; ++i)
        dst[i] = (float)src[i];
}

/* ---- 1: the hand-checkable case -------------------------------------------- */

typedef struct tiny {
    float raw[9], scaled[9], masked[9], weights[9], output[6];
    unsigned char block[9]; /* 1 = blocked (the seed's mask: True above the diagonal) */
} tiny;

/* The seed's attention(): every step exposed, through attn_gemm and attn_softmax. */
static void tiny_steps(const float *q, const float *k, const float *v, bool causal, tiny *r) {
    attn_view qv = WK_VIEW(ATTN_F32, (void *)q, 3, 2), kv = WK_VIEW(ATTN_F32, (void *)k, 3, 2);
    attn_view vv = WK_VIEW(ATTN_F32, (void *)v, 3, 2);
    attn_view raw = WK_VIEW(ATTN_F32, r->raw, 3, 3),
              scaled = WK_VIEW(ATTN_F32, r->scaled, 3, 3);
    attn_view masked = WK_VIEW(ATTN_F32, r->masked, 3, 3),
              w = WK_VIEW(ATTN_F32, r->weights, 3, 3);
    attn_view out = WK_VIEW(ATTN_F32, r->output, 3, 2);
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, 1.0, &qv, &kv, 0.0, &raw, NULL, 0)); /* q k^T */
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, 1 / sqrt(2.0), &qv, &kv, 0.0, &scaled, NULL, 0));
    for (int i = 0; i < 9; ++i) {
        r->block[i] = i % 3 > i / 3; /* triu(ones, diagonal=1) */
        r->masked[i] = causal && r->block[i] ? -INFINITY : r->scaled[i];
    }
    CHECK(attn_softmax(&masked, &w));
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &w, &vv, 0.0, &out, NULL, 0));
}

/* attn_sdpa on the same q, k, v as (1, 1, 3, 2): weights and output in one call. */
static void tiny_sdpa(const float *q, const float *k, const float *v, attn_causal causal,
                      const attn_view *keep, float *weights, float *out) {
    attn_view qv = WK_VIEW(ATTN_F32, (void *)q, 1, 1, 3, 2),
              kv = WK_VIEW(ATTN_F32, (void *)k, 1, 1, 3, 2);
    attn_view vv = WK_VIEW(ATTN_F32, (void *)v, 1, 1, 3, 2),
              ov = WK_VIEW(ATTN_F32, out, 1, 1, 3, 2);
    attn_view wv = WK_VIEW(ATTN_F32, weights, 1, 1, 3, 3);
    attn_sdpa_opts o = {.causal = causal, .keep = keep, .weights = &wv};
    CHECK(attn_sdpa(&qv, &kv, &vv, &o, &ov, NULL, 0));
}

static void print3(const char *name, const float *m, int cols) {
    attn_view v = WK_VIEW(ATTN_F32, (void *)m, 3, cols);
    printf("  %s\n", name);
    wk_print(NULL, &v, " %8.4f");
}

static void part_tiny(const wk_fixture *fx, tiny *full, tiny *causal) {
    printf("1. Hand-checkable QKV (tokens 小猫 喜欢 小鱼; d = 2)\n\n");
    static const float q[6] = {1, 0, 0, 1, 1, 1}, v[6] = {1, 0, 0, 2, 3, 3};
    const float *k = q; /* k = q.clone() */
    tiny_steps(q, k, v, false, full);
    tiny_steps(q, k, v, true, causal);
    print3("raw = q k^T", full->raw, 3);
    print3("scaled = raw / sqrt(2)", full->scaled, 3);
    printf("  mask (1 = blocked: a later key)\n");
    for (int i = 0; i < 3; ++i)
        printf("    %d %d %d\n", causal->block[3 * i], causal->block[3 * i + 1],
               causal->block[3 * i + 2]);
    print3("masked = scaled with blocked entries -inf", causal->masked, 3);
    print3("weights = softmax(masked) (causal)", causal->weights, 3);
    print3("output = weights v (causal)", causal->output, 2);
    print3("weights without the mask", full->weights, 3);
    print3("output without the mask", full->output, 2);
    printf("\n");

    static const float want_raw[9] = {1, 0, 1, 0, 1, 1, 1, 1, 2};
    wk_check(memcmp(full->raw, want_raw, sizeof want_raw) == 0,
             "raw scores are exactly [[1,0,1],[0,1,1],[1,1,2]]");
    wk_check(causal->weights[0] == 1 && causal->weights[1] == 0 && causal->weights[2] == 0,
             "the first causal row is exactly [1, 0, 0]");
    bool upper = true;
    double rowsum = 0;
    for (int i = 0; i < 3; ++i) {
        for (int j = i + 1; j < 3; ++j)
            upper = upper && causal->weights[3 * i + j] == 0;
        rowsum = fmax(rowsum, fabs((double)causal->weights[3 * i] + causal->weights[3 * i + 1] +
                                   causal->weights[3 * i + 2] - 1));
    }
    wk_check(upper, "causal weights above the diagonal are exactly 0");
    wk_check(rowsum <= 1e-6, "causal rows sum to 1 (max |sum - 1| %.1e)", rowsum);
    wk_check(memcmp(causal->output, v, 2 * sizeof(float)) == 0,
             "the first causal output is v[0]");

    /* one call: is_causal, and a boolean keep-mask (1 = may attend = NOT blocked) */
    float w_rule[9], o_rule[6], w_keep[9], o_keep[6], w_full[9], o_full[6];
    unsigned char keep[9];
    for (int i = 0; i < 9; ++i)
        keep[i] = !causal->block[i];
    attn_view keepv = WK_VIEW(ATTN_U8, keep, 1, 1, 3, 3);
    tiny_sdpa(q, k, v, ATTN_CAUSAL_TOP_LEFT, NULL, w_rule, o_rule);
    tiny_sdpa(q, k, v, ATTN_CAUSAL_NONE, &keepv, w_keep, o_keep);
    tiny_sdpa(q, k, v, ATTN_CAUSAL_NONE, NULL, w_full, o_full);
    double d1, d2, d3;
    bool ok1 =
        close_f32(o_rule, causal->output, 6, &d1) && close_f32(w_rule, causal->weights, 9, &d3);
    bool ok2 = close_f32(o_keep, o_rule, 6, &d2) && memcmp(w_keep, w_rule, sizeof w_rule) == 0;
    wk_check(ok1, "attn_sdpa(ATTN_CAUSAL_TOP_LEFT) == the steps (max diff %.1e, weights %.1e)",
             d1, d3);
    wk_check(ok2, "the keep-mask (1 = may attend) gives the same as the causal rule (%.1e)",
             d2);
    bool ok3 =
        close_f32(o_full, full->output, 6, &d1) && close_f32(w_full, full->weights, 9, &d2);
    wk_check(ok3, "attn_sdpa without a mask == the steps (max diff %.1e, %.1e)", d1, d2);
    double ds = fmax(vs_seed(full->raw, wk_get(fx, "tiny_full_raw", 9), 9),
                     vs_seed(full->scaled, wk_get(fx, "tiny_full_scaled", 9), 9));
    ds = fmax(ds, vs_seed(full->weights, wk_get(fx, "tiny_full_weights", 9), 9));
    ds = fmax(ds, vs_seed(full->output, wk_get(fx, "tiny_full_output", 6), 6));
    ds = fmax(ds, vs_seed(causal->weights, wk_get(fx, "tiny_causal_weights", 9), 9));
    ds = fmax(ds, vs_seed(causal->output, wk_get(fx, "tiny_causal_output", 6), 6));
    const double *seed_masked = wk_get(fx, "tiny_causal_masked", 9),
                 *seed_mask = wk_get(fx, "tiny_causal_mask", 9);
    bool mask_same = true;
    for (int i = 0; i < 9; ++i) {
        mask_same = mask_same && seed_mask[i] == causal->block[i];
        if (isinf(seed_masked[i]))
            mask_same = mask_same && isinf(causal->masked[i]) && causal->masked[i] < 0;
        else
            ds = fmax(ds, fabs(causal->masked[i] - seed_masked[i]));
    }
    wk_check(ds <= SEED_TOL && mask_same,
             "raw, scaled, mask, masked, weights, outputs equal PyTorch's (max diff %.1e)", ds);
    printf("\n");
}

/* ---- 2..5: the tiny multi-head attention ---------------------------------- */

typedef struct model {
    attn_mha_config cfg;
    attn_mha_params p;
    float w[4][C * C]; /* torch's (out, in) weights, viewed transposed */
} model;

/* y = MHA(x), x and y (B, T, C); tr may be NULL. */
static void mha(const model *m, const float *x, attn_causal causal, float *y,
                const attn_trace *tr) {
    attn_view xv = WK_VIEW(ATTN_F32, (void *)x, B, T, C), yv = WK_VIEW(ATTN_F32, y, B, T, C);
    attn_sdpa_opts o = {.causal = causal};
    CHECK(attn_mha_forward(&m->cfg, &m->p, &xv, NULL, &o, &yv, tr, NULL, 0));
}

/* x[:, perm] for x (B, T, C). */
static void permute_tokens(const float *x, const int *perm, float *out) {
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
            memcpy(out + (b * T + t) * C, x + (b * T + perm[t]) * C, C * sizeof(float));
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "tests/data/lesson11.txt";
    const char *dir = argc > 2 ? argv[2] : "attn-out/lesson11";
    if (argc > 3) {
        fprintf(stderr, "usage: causal_mha [lesson11.txt] [output folder]\n");
        return 2;
    }
    wk_fixture *fx = wk_load(path);
    if (!fx)
        return 2;
    printf("Lesson 11: causal multi-head self-attention in float32, with attn %s\n\n",
           attn_version_string());
    tiny full, causal;
    part_tiny(fx, &full, &causal);

    /* ---- the model: PyTorch's nn.Linear weights y = x W^T, used as views W^T (no copy) ----
     */
    printf("2. A tiny multi-head attention: d_model %d, %d heads, no bias\n\n", C, H);
    static model m;
    m.cfg = (attn_mha_config){.dtype = ATTN_F32, .d_model = C, .heads = H};
    static const char *wn[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    attn_view *pw[4] = {&m.p.wq, &m.p.wk, &m.p.wv, &m.p.wo};
    for (int i = 0; i < 4; ++i) {
        to_f32(wk_get(fx, wn[i], C * C), m.w[i], C * C);
        attn_view torch_w = WK_VIEW(ATTN_F32, m.w[i], C, C); /* (out, in) */
        CHECK(attn_view_transpose(&torch_w, 0, 1, pw[i]));   /* (in, out), strides (1, C) */
    }
    int64_t nparams = attn_mha_param_count(&m.cfg);
    float x[B * T * C], y[B * T * C];
    to_f32(wk_get(fx, "x", B * T * C), x, B * T * C);

    float q[B * T * C], k[B * T * C], v[B * T * C], sc[B * H * T * T], at[B * H * T * T];
    float rv[B * H * T * DH], cc[B * T * C];
    attn_view qv = WK_VIEW(ATTN_F32, q, B, T, C), kv = WK_VIEW(ATTN_F32, k, B, T, C);
    attn_view vv = WK_VIEW(ATTN_F32, v, B, T, C), scv = WK_VIEW(ATTN_F32, sc, B, H, T, T);
    attn_view atv = WK_VIEW(ATTN_F32, at, B, H, T, T), rvv = WK_VIEW(ATTN_F32, rv, B, H, T, DH);
    attn_view ccv = WK_VIEW(ATTN_F32, cc, B, T, C), xv = WK_VIEW(ATTN_F32, x, B, T, C);
    attn_view yv = WK_VIEW(ATTN_F32, y, B, T, C);
    attn_trace tr = {.q = &qv,
                     .k = &kv,
                     .v = &vv,
                     .scores = &scv,
                     .attention = &atv,
                     .read_values = &rvv,
                     .concat = &ccv};
    mha(&m, x, ATTN_CAUSAL_TOP_LEFT, y, &tr);

    /* the seed's shape dict: heads are views, (B, T, H*D) -> (B, T, H, D) -> (B, H, T, D) */
    attn_view split;
    CHECK(attn_view_split(&qv, 2, DH, &split));
    CHECK(attn_view_permute(&split, (const int[]){0, 2, 1, 3}, &split));
    static const char *sn[7] = {"input",           "qkv_after_split", "scores", "weights",
                                "per_head_output", "joined",          "final"};
    const attn_view *sv[7] = {&xv, &split, &scv, &atv, &rvv, &ccv, &yv};
    static const int64_t want_shape[7][4] = {{2, 4, 4},    {2, 2, 4, 2}, {2, 2, 4, 4},
                                             {2, 2, 4, 4}, {2, 2, 4, 2}, {2, 4, 4},
                                             {2, 4, 4}};
    bool shapes_ok = true;
    printf("  shapes:");
    for (int i = 0; i < 7; ++i) {
        printf(" %s [", sn[i]);
        for (int d = 0; d < sv[i]->ndim; ++d) {
            printf("%s%lld", d ? ", " : "", (long long)sv[i]->shape[d]);
            shapes_ok = shapes_ok && sv[i]->shape[d] == want_shape[i][d];
        }
        shapes_ok = shapes_ok && sv[i]->ndim == (want_shape[i][3] ? 4 : 3);
        printf("]%s", i < 6 ? "," : "\n");
    }
    attn_view w0;
    CHECK(attn_view_select(&atv, 0, 0, &w0));
    printf("  causal weights of batch 0, head 0 and head 1:\n");
    wk_print(NULL, &w0, " %8.4f");
    attn_view y0;
    CHECK(attn_view_select(&yv, 0, 0, &y0));
    wk_print("  output of batch 0:", &y0, " % .6f");
    printf("\n");
    wk_check(shapes_ok, "every shape is the seed's");
    wk_check(nparams == 64, "attn_mha_param_count = %lld (4 matrices of 4 x 4)",
             (long long)nparams);
    double dy = vs_seed(y, wk_get(fx, "y", B * T * C), B * T * C);
    double dw = vs_seed(at, wk_get(fx, "weights", B * H * T * T), B * H * T * T);
    wk_check(dy <= SEED_TOL && dw <= SEED_TOL,
             "output and weights equal PyTorch's from the same weights (max diff %.1e, %.1e)",
             dy, dw);
    bool upper = true;
    double rowsum = 0;
    for (int r = 0; r < B * H * T; ++r) {
        double s = 0;
        for (int j = 0; j < T; ++j) {
            s += at[r * T + j];
            if (j > r % T)
                upper = upper && at[r * T + j] == 0;
        }
        rowsum = fmax(rowsum, fabs(s - 1));
    }
    wk_check(upper && rowsum <= 1e-6, "weights: rows sum to 1 (%.1e), zero above the diagonal",
             rowsum);
    attn_mha_config bad = {.dtype = ATTN_F32, .d_model = 5, .heads = 2}, resolved;
    attn_status st = attn_mha_config_resolve(&bad, &resolved);
    wk_check(st == ATTN_EINVAL, "d_model 5 with 2 heads is refused: %s (%s)",
             attn_status_name(st), attn_strerror(st));

    /* ---- 3: causal isolation ---- */
    printf("\n3. Causal isolation: token 3 += [10, -7, 4, 6]\n\n");
    static const float edit[C] = {10, -7, 4, 6};
    float altered[B * T * C], y_alt[B * T * C], y_full[B * T * C], y_full_alt[B * T * C];
    memcpy(altered, x, sizeof x);
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < C; ++c)
            altered[(b * T + 3) * C + c] += edit[c];
    mha(&m, altered, ATTN_CAUSAL_TOP_LEFT, y_alt, NULL);
    mha(&m, x, ATTN_CAUSAL_NONE, y_full, NULL);
    mha(&m, altered, ATTN_CAUSAL_NONE, y_full_alt, NULL);
    bool earlier_same = true, last_changed = true;
    double causal_change = 0, unmasked_change = 0;
    for (int b = 0; b < B; ++b) {
        earlier_same = earlier_same &&
                       memcmp(y + b * T * C, y_alt + b * T * C, 3 * C * sizeof(float)) == 0;
        double d;
        close_f32(y + (b * T + 3) * C, y_alt + (b * T + 3) * C, C, &d);
        last_changed = last_changed && d > 1e-5;
        for (int i = 0; i < 3 * C; ++i) {
            causal_change = fmax(causal_change, fabs(y[b * T * C + i] - y_alt[b * T * C + i]));
            unmasked_change =
                fmax(unmasked_change, fabs(y_full[b * T * C + i] - y_full_alt[b * T * C + i]));
        }
    }
    printf("  largest change of an earlier output: causal %g, without the mask %g\n\n",
           causal_change, unmasked_change);
    wk_check(earlier_same, "with the causal mask, outputs 0..2 are bit-identical");
    wk_check(last_changed, "output 3 changes");
    wk_check(unmasked_change > 1e-5, "without the mask, earlier outputs change (by %.3g)",
             unmasked_change);
    double da =
        fmax(vs_seed(y_alt, wk_get(fx, "altered_causal", B * T * C), B * T * C),
             fmax(vs_seed(y_full, wk_get(fx, "full_y", B * T * C), B * T * C),
                  vs_seed(y_full_alt, wk_get(fx, "altered_full", B * T * C), B * T * C)));
    wk_check(da <= SEED_TOL, "the three outputs equal PyTorch's (max diff %.1e)", da);

    /* ---- 4: gradient isolation through the backward pass ---- */
    printf("\n4. Gradient isolation: d out[0, 1].sum() / d x, via attn_mha_backward\n\n");
    size_t cbytes = attn_mha_cache_size(&m.cfg, B, T, T);
    void *cslab = aligned_alloc(64, (cbytes + 63) / 64 * 64);
    attn_view cviews[5];
    attn_trace cache;
    CHECK(attn_mha_cache_bind(&m.cfg, B, T, T, cslab, cbytes, cviews, &cache));
    float ycache[B * T * C], dout[B * T * C] = {0}, dx[B * T * C] = {0};
    mha(&m, x, ATTN_CAUSAL_TOP_LEFT, ycache, &cache);
    for (int c = 0; c < C; ++c)
        dout[(0 * T + 1) * C + c] = 1; /* out[0, 1].sum() */
    attn_view doutv = WK_VIEW(ATTN_F32, dout, B, T, C), dxv = WK_VIEW(ATTN_F32, dx, B, T, C);
    attn_sdpa_opts co = {.causal = ATTN_CAUSAL_TOP_LEFT};
    CHECK(attn_mha_backward(&m.cfg, &m.p, &xv, NULL, &co, &cache, &doutv, &dxv, NULL, NULL,
                            NULL, 0));
    attn_view dx0;
    CHECK(attn_view_select(&dxv, 0, 0, &dx0));
    wk_print("  dx[0]:", &dx0, " % .6f");
    int future_nonzero = 0, past_nonzero = 0;
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) {
            if (dx[t * C + c] != 0)
                ++*(t >= 2 ? &future_nonzero : &past_nonzero);
        }
    printf("\n");
    wk_check(future_nonzero == 0, "zero gradient at positions 2, 3 (%d non-zero)",
             future_nonzero);
    wk_check(past_nonzero > 0, "non-zero gradient at positions 0, 1 (%d non-zero)",
             past_nonzero);
    double dg = vs_seed(dx, wk_get(fx, "grad_out01_wrt_x", B * T * C), B * T * C);
    wk_check(dg <= SEED_TOL, "the gradient equals PyTorch's autograd (max diff %.1e)", dg);
    free(cslab);

    /* ---- 5: permutation equivariance and sinusoidal positions ---- */
    printf("\n5. Permutation [2, 0, 3, 1] of the tokens, without the mask\n\n");
    static const int perm[T] = {2, 0, 3, 1};
    float xp[B * T * C], yp[B * T * C], want[B * T * C], pe[T * C];
    permute_tokens(x, perm, xp);
    mha(&m, xp, ATTN_CAUSAL_NONE, yp, NULL);
    permute_tokens(y_full, perm, want);
    double perm_diff;
    bool equiv = close_f32(yp, want, B * T * C, &perm_diff);
    attn_view pev = WK_VIEW(ATTN_F32, pe, T, C);
    CHECK(attn_posenc_sinusoidal(0, &pev));
    wk_print("  sinusoidal positions (4, 4): sin/cos(t 10000^(-2i/4))", &pev, " % .6f");
    float xpe[B * T * C], xppe[B * T * C], y_pos[B * T * C], y_pos_perm[B * T * C];
    memcpy(xpe, x, sizeof x);
    memcpy(xppe, xp, sizeof xp);
    attn_view xpev = WK_VIEW(ATTN_F32, xpe, B, T, C), xppev = WK_VIEW(ATTN_F32, xppe, B, T, C);
    CHECK(attn_posenc_add(0, &pev, &xpev));  /* x + pe */
    CHECK(attn_posenc_add(0, &pev, &xppev)); /* x[:, perm] + pe */
    mha(&m, xpe, ATTN_CAUSAL_NONE, y_pos, NULL);
    mha(&m, xppe, ATTN_CAUSAL_NONE, y_pos_perm, NULL);
    permute_tokens(y_pos, perm, want);
    double pos_diff = 0;
    for (int i = 0; i < B * T * C; ++i)
        pos_diff = fmax(pos_diff, fabs(y_pos_perm[i] - want[i]));
    printf("\n  max |MHA(x[:, perm]) - MHA(x)[:, perm]|: without positions %.3g, with "
           "positions %.3g\n\n",
           perm_diff, pos_diff);
    wk_check(equiv, "without positions the outputs are permuted with the tokens (%.1e)",
             perm_diff);
    wk_check(pos_diff > 1e-5, "with sinusoidal positions they are not (%.3g)", pos_diff);
    double dp = fmax(vs_seed(pe, wk_get(fx, "sinusoidal_4x4", T * C), T * C),
                     vs_seed(yp, wk_get(fx, "permuted", B * T * C), B * T * C));
    dp = fmax(dp, fmax(vs_seed(y_pos, wk_get(fx, "with_positions", B * T * C), B * T * C),
                       vs_seed(y_pos_perm, wk_get(fx, "changed_content_order", B * T * C),
                               B * T * C)));
    wk_check(dp <= SEED_TOL, "the table and the three outputs equal PyTorch's (max diff %.1e)",
             dp);

    /* ---- results.json, with the seed's keys ---- */
    wk_mkdirs(dir);
    wk_json j = {wk_open(dir, "results.json"), 0, true};
    wk_json_open(&j, NULL, '{');
    wk_json_str(&j, "attn_version", attn_version_string());
    wk_json_environment(&j);
    wk_json_str(&j, "device", "cpu");
    wk_json_open(&j, "tokens", '[');
    wk_json_str(&j, NULL, "小猫");
    wk_json_str(&j, NULL, "喜欢");
    wk_json_str(&j, NULL, "小鱼");
    wk_json_close(&j, ']');
    wk_json_open(&j, "tiny", '{');
    static const float tq[6] = {1, 0, 0, 1, 1, 1}, tv[6] = {1, 0, 0, 2, 3, 3};
    struct {
        const char *key;
        const float *d;
        int cols;
    } tj[] = {{"q", tq, 2},
              {"k", tq, 2},
              {"v", tv, 2},
              {"raw", full.raw, 3},
              {"scaled", full.scaled, 3},
              {"full_weights", full.weights, 3},
              {"full_output", full.output, 2}};
    for (size_t i = 0; i < sizeof tj / sizeof *tj; ++i) {
        attn_view tv3 = wk_view(ATTN_F32, (void *)tj[i].d, 2, (int64_t[]){3, tj[i].cols});
        wk_json_view(&j, tj[i].key, &tv3);
    }
    wk_json_sep(&j, "blocked_future");
    fputc('[', j.f);
    for (int i = 0; i < 3; ++i)
        fprintf(j.f, "%s[%s, %s, %s]", i ? ", " : "", causal.block[3 * i] ? "true" : "false",
                causal.block[3 * i + 1] ? "true" : "false",
                causal.block[3 * i + 2] ? "true" : "false");
    fputc(']', j.f);
    attn_view cw = WK_VIEW(ATTN_F32, causal.weights, 3, 3),
              co2 = WK_VIEW(ATTN_F32, causal.output, 3, 2);
    wk_json_view(&j, "causal_weights", &cw);
    wk_json_view(&j, "causal_output", &co2);
    wk_json_close(&j, '}');
    wk_json_open(&j, "multihead", '{');
    wk_json_open(&j, "shapes", '{');
    for (int i = 0; i < 7; ++i)
        wk_json_shape(&j, sn[i], sv[i]);
    wk_json_close(&j, '}');
    wk_json_int(&j, "parameters", nparams);
    wk_json_view(&j, "weights_first_batch", &w0);
    wk_json_view(&j, "first_output", &y0);
    wk_json_num(&j, "unmasked_earlier_change_after_future_edit", (float)unmasked_change);
    wk_json_num(&j, "causal_earlier_change_after_future_edit", (float)causal_change);
    wk_json_int(&j, "future_gradient_nonzero_count", future_nonzero);
    wk_json_int(&j, "past_gradient_nonzero_count", past_nonzero);
    wk_json_close(&j, '}');
    wk_json_open(&j, "positions", '{');
    wk_json_view(&j, "sinusoidal_4x4", &pev);
    wk_json_num(&j, "unmasked_no_position_permutation_max_diff", (float)perm_diff);
    wk_json_num(&j, "with_position_permutation_max_diff", (float)pos_diff);
    wk_json_close(&j, '}');
    wk_json_close(&j, '}');
    fclose(j.f);
    printf("\nWrote %s/results.json\n", dir);
    wk_free(fx);
    return wk_result();
}
