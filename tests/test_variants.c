/* SPDX-License-Identifier: MIT */
/* attn_sdpa's attention variants (window, softcap, ALiBi, sinks, packed sequences) against
 * scripts/gen_variant_fixtures.py, their validation, and the work a window skips. */
#include <dlfcn.h>

#include "variants_util.h"

static const char *va_files[] = {
    "variant_window_causal.txt", "variant_window_sym.txt", "variant_window_br.txt",
    "variant_softcap.txt",       "variant_alibi.txt",      "variant_sinks.txt",
    "variant_varlen.txt",        "variant_varlen_mix.txt", "variant_all.txt"};
#define VA_NFILES (sizeof va_files / sizeof *va_files)
/* ---- the products attn_sdpa runs: multiply-adds counted at the BLAS ------------------ */

static double va_macs; /* m n k summed over the products since the last reset */
static int va_count_on;

typedef void (*va_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                            const float *, int, float, float *, int);
typedef void (*va_dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                            const double *, int, double, double *, int);
/* CBLAS's enums are passed as int, which is their ABI. */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    static va_sgemm_fn next;
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "cblas_sgemm");
    if (va_count_on) /* threads 1 in the counted calls: no race */
        va_macs += (double)m * n * k;
    next(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc);
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc) {
    static va_dgemm_fn next;
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "cblas_dgemm");
    if (va_count_on)
        va_macs += (double)m * n * k;
    next(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/*
 * Each fixture through both algorithms (MATERIALIZED with the weights), block sizes
 * that cut the window, the diagonal and the packed sequences anywhere, 1 and 2
 * threads, contiguous and head-split (B, T, H, D) layouts, both dtypes: out, lse and
 * the weights agree with the generator's float64 reference.
 */
START_TEST(va_fixtures) {
    static const int64_t blocks[][2] = {{0, 0}, {1, 1}, {3, 2}, {4, 5}, {64, 3}};
    for (size_t fi = 0; fi < VA_NFILES; ++fi) {
        fx_file *fx = fx_load(va_files[fi]);
        ck_assert_msg(fx != NULL, "%s", va_files[fi]);
        for (int d = 0; d < 2; ++d)
            for (int lay = 0; lay < 2; ++lay) {
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                sd_lay l = lay ? LY_BTHD : LY_CONTIG;
                va_fx f;
                va_fx_opts(fx, dt, &f);
                sd_t q = va_tensor(fx, "q", dt, l), k = va_tensor(fx, "k", dt, l);
                sd_t v = va_tensor(fx, "v", dt, l), out = va_tensor(fx, "out", dt, l);
                sd_t want = sd_from_fx(fx_get(fx, "out"), ATTN_F64);
                sd_t wl = sd_from_fx(fx_get(fx, "lse"), ATTN_F64);
                sd_t ww = sd_from_fx(fx_get(fx, "weights"), ATTN_F64);
                sd_t lse = sd_zeros(dt, 3, wl.v.shape), w = sd_zeros(dt, 4, ww.v.shape);
                char what[160];
                for (int a = 1; a <= 2; ++a)
                    for (size_t bi = 0; bi < sizeof blocks / sizeof *blocks; ++bi)
                        for (int th = 1; th <= 2; ++th) {
                            attn_sdpa_opts o = f.o;
                            o.algo = (attn_algo)a;
                            o.block_q = blocks[bi][0];
                            o.block_k = blocks[bi][1];
                            o.threads = th;
                            o.lse = &lse.v;
                            o.weights = a == 1 ? &w.v : NULL;
                            snprintf(what, sizeof what, "%s %s %s algo %d blocks %lld/%lld",
                                     va_files[fi], d ? "f64" : "f32", sd_lay_name[l], a,
                                     (long long)o.block_q, (long long)o.block_k);
                            attn_status st = attn_sdpa(&q.v, &k.v, &v.v, &o, &out.v, NULL, 0);
                            ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
                            tu_check_close(&out.v, &want.v, TU_RTOL(dt), TU_ATOL(dt), what);
                            tu_check_close(&lse.v, &wl.v, TU_RTOL(dt), TU_ATOL(dt), what);
                            if (a == 1)
                                tu_check_close(&w.v, &ww.v, TU_RTOL(dt), TU_ATOL(dt), what);
                        }
                sd_t *all[] = {&q, &k, &v, &out, &want, &wl, &ww, &lse, &w};
                for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
                    sd_free(all[i]);
                va_fx_free(&f);
            }
        fx_free(fx);
    }
}
END_TEST

/*
 * The backward of each fixture (from this library's own out and lse), block sizes
 * 1 to 64, 1 and 2 threads, both dtypes and layouts: dq, dk, dv and dsinks agree with
 * the generator's autograd, accumulated onto what the gradients held.
 */
START_TEST(va_fixtures_backward) {
    static const int64_t blocks[][2] = {{0, 0}, {1, 1}, {3, 2}, {4, 5}, {64, 3}};
    for (size_t fi = 0; fi < VA_NFILES; ++fi) {
        fx_file *fx = fx_load(va_files[fi]);
        ck_assert_msg(fx != NULL, "%s", va_files[fi]);
        for (int d = 0; d < 2; ++d)
            for (int lay = 0; lay < 2; ++lay) {
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                sd_lay l = lay ? LY_BTHD : LY_CONTIG;
                va_fx f;
                va_fx_opts(fx, dt, &f);
                sd_t q = va_tensor(fx, "q", dt, l), k = va_tensor(fx, "k", dt, l);
                sd_t v = va_tensor(fx, "v", dt, l), out = va_tensor(fx, "out", dt, l);
                sd_t dout = va_tensor(fx, "dout", dt, l);
                sd_t lse = sd_zeros(dt, 3, q.v.shape);
                sd_t dq = va_tensor(fx, "dq", dt, l), dk = va_tensor(fx, "dk", dt, l);
                sd_t dv = va_tensor(fx, "dv", dt, l);
                sd_t wq = sd_from_fx(fx_get(fx, "dq"), ATTN_F64);
                sd_t wk = sd_from_fx(fx_get(fx, "dk"), ATTN_F64);
                sd_t wv = sd_from_fx(fx_get(fx, "dv"), ATTN_F64);
                bool sinks = fx_find(fx, "dsinks") != NULL;
                sd_t ds = sd_zeros(dt, 1, (int64_t[]){q.v.shape[1]}), wds = ds;
                if (sinks)
                    wds = sd_from_fx(fx_get(fx, "dsinks"), ATTN_F64);
                attn_sdpa_opts o = f.o;
                o.lse = &lse.v;
                ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &o, &out.v, NULL, 0), ATTN_OK);
                char what[160];
                for (size_t bi = 0; bi < sizeof blocks / sizeof *blocks; ++bi)
                    for (int th = 1; th <= 2; ++th) {
                        attn_sdpa_opts ob = f.o;
                        ob.block_q = blocks[bi][0];
                        ob.block_k = blocks[bi][1];
                        ob.threads = th;
                        ob.dsinks = sinks ? &ds.v : NULL;
                        attn_view *g[4] = {&dq.v, &dk.v, &dv.v, &ds.v};
                        for (int i = 0; i < 4; ++i) { /* the gradients start at -0.5 */
                            int64_t idx[4] = {0};
                            do
                                tu_set(g[i], idx, -0.5);
                            while (tu_inc(idx, g[i]->shape, g[i]->ndim));
                        }
                        attn_status st =
                            attn_sdpa_backward(&q.v, &k.v, &v.v, &ob, &out.v, &lse.v, &dout.v,
                                               &dq.v, &dk.v, &dv.v, NULL, 0);
                        snprintf(what, sizeof what, "%s %s %s blocks %lld/%lld threads %d",
                                 va_files[fi], d ? "f64" : "f32", sd_lay_name[l],
                                 (long long)ob.block_q, (long long)ob.block_k, th);
                        ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
                        sd_t *got[4] = {&dq, &dk, &dv, &ds}, *want[4] = {&wq, &wk, &wv, &wds};
                        for (int i = 0; i < (sinks ? 4 : 3); ++i) {
                            int64_t idx[4] = {0};
                            do
                                tu_set(&got[i]->v, idx, tu_get(&got[i]->v, idx) + 0.5);
                            while (tu_inc(idx, got[i]->v.shape, got[i]->v.ndim));
                            tu_check_close(&got[i]->v, &want[i]->v, TU_RTOL(dt),
                                           dt == ATTN_F64 ? 1e-12 : 1e-5, what);
                        }
                    }
                sd_t *all[] = {&q,  &k,  &v,  &out, &dout, &lse, &dq,
                               &dk, &dv, &wq, &wk,  &wv,   &ds};
                for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
                    sd_free(all[i]);
                if (sinks)
                    sd_free(&wds);
                va_fx_free(&f);
            }
        fx_free(fx);
    }
}
END_TEST

/* sum(out * dout) of this library's forward (f64). */
static double va_loss(const attn_view *q, const attn_view *k, const attn_view *v,
                      const attn_sdpa_opts *o, attn_view *out, const attn_view *dout) {
    ck_assert_int_eq(attn_sdpa(q, k, v, o, out, NULL, 0), ATTN_OK);
    double l = 0;
    int64_t idx[4] = {0};
    do
        l += tu_get(out, idx) * tu_get(dout, idx);
    while (tu_inc(idx, out->shape, 4));
    return l;
}

/*
 * Every variant at once (variant_all.txt: window, softcap, ALiBi, sinks, keep, bias,
 * kv_len, GQA), f64: each element of q, k, v and sinks against central differences
 * of this library's own forward (step 1e-6; the differences are good to ~1e-8).
 */
START_TEST(va_backward_finite_differences) {
    fx_file *fx = fx_load("variant_all.txt");
    ck_assert_ptr_nonnull(fx);
    va_fx f;
    va_fx_opts(fx, ATTN_F64, &f);
    sd_t q = va_tensor(fx, "q", ATTN_F64, LY_CONTIG),
         k = va_tensor(fx, "k", ATTN_F64, LY_CONTIG);
    sd_t v = va_tensor(fx, "v", ATTN_F64, LY_CONTIG),
         out = va_tensor(fx, "out", ATTN_F64, LY_CONTIG);
    sd_t dout = va_tensor(fx, "dout", ATTN_F64, LY_CONTIG),
         lse = sd_zeros(ATTN_F64, 3, q.v.shape);
    sd_t dq = sd_zeros(ATTN_F64, 4, q.v.shape), dk = sd_zeros(ATTN_F64, 4, k.v.shape);
    sd_t dv = sd_zeros(ATTN_F64, 4, v.v.shape), ds = sd_zeros(ATTN_F64, 1, f.sinks.v.shape);
    attn_sdpa_opts o = f.o;
    o.lse = &lse.v;
    va_loss(&q.v, &k.v, &v.v, &o, &out.v, &dout.v);
    attn_sdpa_opts ob = f.o;
    ob.dsinks = &ds.v;
    ck_assert_int_eq(attn_sdpa_backward(&q.v, &k.v, &v.v, &ob, &out.v, &lse.v, &dout.v, &dq.v,
                                        &dk.v, &dv.v, NULL, 0),
                     ATTN_OK);
    sd_t *x[4] = {&q, &k, &v, &f.sinks}, *g[4] = {&dq, &dk, &dv, &ds};
    sd_t scratch = sd_zeros(ATTN_F64, 4, out.v.shape);
    double worst = 0;
    for (int t = 0; t < 4; ++t) {
        int64_t n = tu_numel(&x[t]->v);
        double *xd = x[t]->mem, *gd = g[t]->mem;
        for (int64_t e = 0; e < n; e += (t == 3 ? 1 : 7)) {
            double x0 = xd[e], h = 1e-6;
            xd[e] = x0 + h;
            double lp = va_loss(&q.v, &k.v, &v.v, &f.o, &scratch.v, &dout.v);
            xd[e] = x0 - h;
            double lm = va_loss(&q.v, &k.v, &v.v, &f.o, &scratch.v, &dout.v);
            xd[e] = x0;
            double fd = (lp - lm) / (2 * h), err = fabs(fd - gd[e]) / (1 + fabs(fd));
            worst = err > worst ? err : worst;
            ck_assert_msg(err < 1e-6,
                          "tensor %d element %lld: backward %.12g, differences %.12g", t,
                          (long long)e, gd[e], fd);
        }
    }
    sd_t *all[] = {&q, &k, &v, &out, &dout, &lse, &dq, &dk, &dv, &ds, &scratch};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        sd_free(all[i]);
    va_fx_free(&f);
    fx_free(fx);
}
END_TEST

/* ---- the same answers by other routes, at sizes with many tiles ------------------------ */

/*
 * A window is a band keep mask, ALiBi a bias -m_h |p - j|, packed sequences a
 * block-diagonal keep mask over one long sequence: at T 300 with 64-row tiles the
 * variant's tile skipping and slicing must give what the dense masks give (to rounding).
 */
START_TEST(va_equivalent_masks) {
    enum { B = 1, H = 4, Hkv = 2, T = 300, D = 16 };
    for (int d = 0; d < 2; ++d)
        for (int kind = 0; kind < 3; ++kind) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            uint64_t seed = 5 + (uint64_t)kind;
            sd_t q = sd_make(dt, (int64_t[]){B, H, T, D}, LY_CONTIG, &seed, 1.0);
            sd_t k = sd_make(dt, (int64_t[]){B, Hkv, T, D}, LY_CONTIG, &seed, 1.0);
            sd_t v = sd_make(dt, (int64_t[]){B, Hkv, T, D}, LY_CONTIG, &seed, 1.0);
            sd_t o1 = sd_zeros(dt, 4, q.v.shape), o2 = sd_zeros(dt, 4, q.v.shape);
            sd_t l1 = sd_zeros(dt, 3, q.v.shape), l2 = sd_zeros(dt, 3, q.v.shape);
            sd_t keep = sd_zeros(ATTN_U8, 2, (int64_t[]){T, T});
            sd_t bias = sd_zeros(dt, 4, (int64_t[]){1, H, T, T}),
                 slopes = sd_zeros(dt, 1, (int64_t[]){H});
            int64_t cu[5] = {0, 70, 71, 200, T};
            attn_sdpa_opts var = {.causal = ATTN_CAUSAL_TOP_LEFT,
                                  .block_q = 64,
                                  .block_k = 64,
                                  .lse = &l1.v},
                           dense = var;
            dense.lse = &l2.v;
            uint8_t *km = keep.mem;
            if (kind == 0) { /* window (37, 5) with causal: band j in [i - 37, i] */
                var.window = true, var.window_left = 37, var.window_right = 5;
                for (int64_t i = 0; i < T; ++i)
                    for (int64_t j = 0; j < T; ++j)
                        km[i * T + j] = j >= i - 37 && j <= i + 5;
                dense.keep = &keep.v;
            } else if (kind == 1) { /* ALiBi */
                attn_alibi_slopes(&slopes.v, 0.0);
                var.alibi = &slopes.v;
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t i = 0; i < T; ++i)
                        for (int64_t j = 0; j < T; ++j)
                            tu_set(&bias.v, (int64_t[]){0, h, i, j},
                                   -tu_get(&slopes.v, (int64_t[]){h}) * fabs((double)(i - j)));
                dense.bias = &bias.v;
            } else { /* four packed sequences (one of a single token), causal within each */
                var.n_seqs = 4, var.cu_seqlens_q = cu, var.cu_seqlens_k = cu;
                for (int n = 0; n < 4; ++n)
                    for (int64_t i = cu[n]; i < cu[n + 1]; ++i)
                        for (int64_t j = cu[n]; j < cu[n + 1]; ++j)
                            km[i * T + j] = 1;
                dense.keep = &keep.v;
            }
            for (int th = 1; th <= 2; ++th) {
                var.threads = dense.threads = th;
                ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &var, &o1.v, NULL, 0), ATTN_OK);
                ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &dense, &o2.v, NULL, 0), ATTN_OK);
                tu_check_close(&o1.v, &o2.v, TU_RTOL(dt), TU_ATOL(dt), "out, variant vs mask");
                tu_check_close(&l1.v, &l2.v, TU_RTOL(dt), TU_ATOL(dt), "lse, variant vs mask");
            }
            sd_t *all[] = {&q, &k, &v, &o1, &o2, &l1, &l2, &keep, &bias, &slopes};
            for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
                sd_free(all[i]);
        }
}
END_TEST

/*
 * Few (batch, head, query block) tasks split their keys across threads, each piece
 * merged afterwards with the sink added once: with 2 threads and one query block of
 * T 600 rows, every variant at once and packed sequences give what one thread (no
 * split, checked against the fixtures) gives.
 */
START_TEST(va_key_split) {
    enum { H = 2, T = 600, D = 16 };
    for (int d = 0; d < 2; ++d)
        for (int packed = 0; packed < 2; ++packed) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            uint64_t seed = 17;
            sd_t q = sd_make(dt, (int64_t[]){1, H, T, D}, LY_CONTIG, &seed, 1.0);
            sd_t k = sd_make(dt, (int64_t[]){1, 1, T, D}, LY_CONTIG, &seed, 1.0);
            sd_t v = sd_make(dt, (int64_t[]){1, 1, T, D}, LY_CONTIG, &seed, 1.0);
            sd_t al = sd_zeros(dt, 1, (int64_t[]){H}), sk = sd_zeros(dt, 1, (int64_t[]){H});
            attn_alibi_slopes(&al.v, 2.0);
            tu_fill(&sk.v, &seed, 3.0);
            int64_t cu[3] = {0, 250, T};
            attn_sdpa_opts o = {.causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                                .window = true,
                                .window_left = 300,
                                .softcap = 5.0,
                                .alibi = &al.v,
                                .sinks = &sk.v,
                                .algo = ATTN_ALGO_TILED,
                                .block_q = T,
                                .block_k = 64};
            if (packed)
                o.n_seqs = 2, o.cu_seqlens_q = cu, o.cu_seqlens_k = cu;
            sd_t out[2], lse[2];
            for (int th = 0; th < 2; ++th) {
                out[th] = sd_zeros(dt, 4, q.v.shape);
                lse[th] = sd_zeros(dt, 3, q.v.shape);
                o.threads = th + 1;
                o.lse = &lse[th].v;
                ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &o, &out[th].v, NULL, 0), ATTN_OK);
            }
            tu_check_close(&out[1].v, &out[0].v, TU_RTOL(dt), TU_ATOL(dt), "out, key split");
            tu_check_close(&lse[1].v, &lse[0].v, TU_RTOL(dt), TU_ATOL(dt), "lse, key split");
            sd_t *all[] = {&q, &k, &v, &al, &sk, &out[0], &out[1], &lse[0], &lse[1]};
            for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
                sd_free(all[i]);
        }
}
END_TEST

/* ---- O(T W): the products a window and packed sequences skip ------------------------- */

/* Multiply-adds attn_sdpa hands to the BLAS for one call (one thread). */
static double va_call_macs(const attn_view *q, const attn_view *k, const attn_view *v,
                           attn_sdpa_opts o, attn_view *out) {
    o.threads = 1;
    va_macs = 0;
    va_count_on = 1;
    ck_assert_int_eq(attn_sdpa(q, k, v, &o, out, NULL, 0), ATTN_OK);
    va_count_on = 0;
    return va_macs;
}

/*
 * T 4096, D 32, tiles 64 x 64: a causal window of 64 keys must run at most
 * T (W + 2 * 64) (D + Dv) multiply-adds (the band plus a tile's edge on each side),
 * under a tenth of full causal attention's; 16 packed sequences of 128 at most
 * 16 * 256^2 (D + Dv), a sixteenth of one sequence's T^2.
 */
START_TEST(va_window_work) {
    enum { T = 4096, D = 32, W = 64 };
    uint64_t seed = 3;
    sd_t q = sd_make(ATTN_F32, (int64_t[]){1, 1, T, D}, LY_CONTIG, &seed, 1.0);
    sd_t k = sd_make(ATTN_F32, (int64_t[]){1, 1, T, D}, LY_CONTIG, &seed, 1.0);
    sd_t v = sd_make(ATTN_F32, (int64_t[]){1, 1, T, D}, LY_CONTIG, &seed, 1.0);
    sd_t out = sd_zeros(ATTN_F32, 4, q.v.shape);
    attn_sdpa_opts full = {.causal = ATTN_CAUSAL_TOP_LEFT,
                           .algo = ATTN_ALGO_TILED,
                           .block_q = 64,
                           .block_k = 64},
                   win = full, packed = full;
    win.window = true, win.window_left = W - 1;
    int64_t cu[17];
    for (int n = 0; n <= 16; ++n)
        cu[n] = n * (T / 16);
    packed.n_seqs = 16, packed.cu_seqlens_q = cu, packed.cu_seqlens_k = cu;
    double mf = va_call_macs(&q.v, &k.v, &v.v, full, &out.v);
    double mw = va_call_macs(&q.v, &k.v, &v.v, win, &out.v);
    double mp = va_call_macs(&q.v, &k.v, &v.v, packed, &out.v);
    ck_assert_msg(mf > 0, "the BLAS hook saw no product");
    ck_assert_msg(mw <= (double)T * (W + 2 * 64) * (2 * D) && mw * 10 < mf,
                  "window: %.3g multiply-adds, full causal %.3g", mw, mf);
    ck_assert_msg(mp <= 16.0 * (T / 16) * (T / 16) * (2 * D),
                  "packed: %.3g multiply-adds, full causal %.3g", mp, mf);
    /* the backward: five products per visited (64 x 64) tile pair, at most three tiles
       of the key grid per query block for a window of 64 */
    sd_t lse = sd_zeros(ATTN_F32, 3, q.v.shape), dq = sd_zeros(ATTN_F32, 4, q.v.shape);
    double mb[2];
    for (int w = 0; w < 2; ++w) {
        attn_sdpa_opts o = w ? win : full;
        o.lse = &lse.v;
        ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &o, &out.v, NULL, 0), ATTN_OK);
        o.threads = 1;
        va_macs = 0;
        va_count_on = 1;
        ck_assert_int_eq(attn_sdpa_backward(&q.v, &k.v, &v.v, &o, &out.v, &lse.v, &v.v, &dq.v,
                                            NULL, NULL, NULL, 0),
                         ATTN_OK);
        va_count_on = 0;
        mb[w] = va_macs;
    }
    ck_assert_msg(mb[1] <= (double)T * 3 * 64 * (3 * D) && mb[1] * 5 < mb[0],
                  "window backward: %.3g multiply-adds, full causal %.3g", mb[1], mb[0]);
    sd_free(&lse), sd_free(&dq);
    sd_free(&q), sd_free(&k), sd_free(&v), sd_free(&out);
}
END_TEST

/* ---- the ALiBi slopes ------------------------------------------------------------------ */

/* attn_alibi_slopes against the generator's formula (BLOOM, ggml), H a power of two or not. */
START_TEST(va_alibi_slopes) {
    fx_file *fx = fx_load("variant_alibi_slopes.txt");
    ck_assert_ptr_nonnull(fx);
    static const int hs[] = {1, 2, 3, 4, 5, 8, 12, 16, 6};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; ++i)
        for (int d = 0; d < 2; ++d) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            char name[32];
            snprintf(name, sizeof name, i == 8 ? "slopes_%d_bias_4" : "slopes_%d", hs[i]);
            sd_t want = sd_from_fx(fx_get(fx, name), ATTN_F64);
            sd_t got = sd_zeros(dt, 1, (int64_t[]){hs[i]});
            ck_assert_int_eq(attn_alibi_slopes(&got.v, i == 8 ? 4.0 : 0.0), ATTN_OK);
            tu_check_close(&got.v, &want.v, d ? 1e-15 : 1e-7, 0, name);
            sd_free(&want), sd_free(&got);
        }
    /* H 8, max_bias 8: 1/2 .. 1/256 exactly */
    double s8[8];
    attn_view v8, bad;
    attn_view_init(&v8, ATTN_F64, s8, 1, (int64_t[]){8});
    ck_assert_int_eq(attn_alibi_slopes(&v8, 8.0), ATTN_OK);
    for (int h = 0; h < 8; ++h)
        ck_assert(s8[h] == ldexp(1.0, -(h + 1)));
    ck_assert_int_eq(attn_alibi_slopes(NULL, 0), ATTN_EINVAL);
    ck_assert_int_eq(attn_alibi_slopes(&v8, -1), ATTN_EINVAL);
    ck_assert_int_eq(attn_alibi_slopes(&v8, NAN), ATTN_EINVAL);
    attn_view_init(&bad, ATTN_F64, s8, 2, (int64_t[]){2, 4});
    ck_assert_int_eq(attn_alibi_slopes(&bad, 0), ATTN_ESHAPE);
    attn_view_init_strided(&bad, ATTN_F64, s8, 1, (int64_t[]){4}, (int64_t[]){0});
    ck_assert_int_eq(attn_alibi_slopes(&bad, 0), ATTN_ESTRIDE);
    attn_view_init(&bad, ATTN_U8, s8, 1, (int64_t[]){4});
    ck_assert_int_eq(attn_alibi_slopes(&bad, 0), ATTN_EDTYPE);
    fx_free(fx);
}
END_TEST

/* ---- bad input: a status, nothing written ------------------------------------------- */

START_TEST(va_errors) {
    enum { B = 2, H = 2, T = 4, D = 2 };
    uint64_t seed = 9;
    sd_t q = sd_make(ATTN_F64, (int64_t[]){B, H, T, D}, LY_CONTIG, &seed, 1.0);
    sd_t q1 = sd_make(ATTN_F64, (int64_t[]){1, H, T, D}, LY_CONTIG, &seed, 1.0);
    sd_t out = sd_make(ATTN_F64, (int64_t[]){B, H, T, D}, LY_CONTIG, &seed, 1.0);
    sd_t out1 = sd_make(ATTN_F64, (int64_t[]){1, H, T, D}, LY_CONTIG, &seed, 1.0);
    sd_t hv = sd_zeros(ATTN_F64, 1, (int64_t[]){H}), h3 = sd_zeros(ATTN_F64, 1, (int64_t[]){3});
    sd_t hf = sd_zeros(ATTN_F32, 1, (int64_t[]){H}),
         h2d = sd_zeros(ATTN_F64, 2, (int64_t[]){1, H});
    size_t ob = sizeof(double) * B * H * T * D;
    void *snap = malloc(ob), *snap1 = malloc(ob / 2);
    memcpy(snap, out.mem, ob);
    memcpy(snap1, out1.mem, ob / 2);
    int64_t cu_ok[3] = {0, 1, T}, cu_start[3] = {1, 1, T}, cu_dec[3] = {0, 3, 2},
            cu_end[3] = {0, 1, T - 1};
    struct {
        attn_sdpa_opts o;
        bool packed; /* on the B 1 views */
        attn_status want;
        const char *what;
    } cases[] = {
        {{.window = true, .window_left = -1}, false, ATTN_EINVAL, "window_left -1"},
        {{.window = true, .window_right = -2}, false, ATTN_EINVAL, "window_right -2"},
        {{.window_left = 3}, false, ATTN_EINVAL, "window sizes without window"},
        {{.softcap = -1}, false, ATTN_EINVAL, "softcap -1"},
        {{.softcap = INFINITY}, false, ATTN_EINVAL, "softcap inf"},
        {{.softcap = NAN}, false, ATTN_EINVAL, "softcap NaN"},
        {{.alibi = &h3.v}, false, ATTN_ESHAPE, "alibi (3)"},
        {{.alibi = &h2d.v}, false, ATTN_ESHAPE, "alibi (1, H)"},
        {{.alibi = &hf.v}, false, ATTN_EDTYPE, "alibi f32"},
        {{.sinks = &h3.v}, false, ATTN_ESHAPE, "sinks (3)"},
        {{.sinks = &hf.v}, false, ATTN_EDTYPE, "sinks f32"},
        {{.dsinks = &hv.v}, false, ATTN_EINVAL, "dsinks to the forward"},
        {{.n_seqs = -1}, false, ATTN_EINVAL, "n_seqs -1"},
        {{.n_seqs = 2, .cu_seqlens_q = cu_ok}, true, ATTN_EINVAL, "cu_seqlens_k missing"},
        {{.cu_seqlens_q = cu_ok, .cu_seqlens_k = cu_ok},
         true,
         ATTN_EINVAL,
         "cu_seqlens without n_seqs"},
        {{.n_seqs = 2, .cu_seqlens_q = cu_ok, .cu_seqlens_k = cu_ok},
         false,
         ATTN_ESHAPE,
         "n_seqs with B 2"},
        {{.n_seqs = 2, .cu_seqlens_q = cu_start, .cu_seqlens_k = cu_ok},
         true,
         ATTN_ERANGE,
         "cu_seqlens_q not starting at 0"},
        {{.n_seqs = 2, .cu_seqlens_q = cu_ok, .cu_seqlens_k = cu_dec},
         true,
         ATTN_ERANGE,
         "cu_seqlens_k decreasing"},
        {{.n_seqs = 2, .cu_seqlens_q = cu_end, .cu_seqlens_k = cu_ok},
         true,
         ATTN_ERANGE,
         "cu_seqlens_q not ending at Tq"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
        attn_view *qq = cases[i].packed ? &q1.v : &q.v,
                  *oo = cases[i].packed ? &out1.v : &out.v;
        attn_status st = attn_sdpa(qq, qq, qq, &cases[i].o, oo, NULL, 0);
        ck_assert_msg(st == cases[i].want, "%s: got %s", cases[i].what, attn_status_name(st));
        ck_assert_msg(attn_sdpa_workspace_size(qq, qq, qq, &cases[i].o) == 0, "%s: size",
                      cases[i].what);
        ck_assert_msg(!memcmp(snap, out.mem, ob) && !memcmp(snap1, out1.mem, ob / 2),
                      "%s: out written", cases[i].what);
    }
    /* the backward's dsinks: without sinks, of the wrong shape, over an input */
    sd_t lse = sd_zeros(ATTN_F64, 3, q.v.shape), dq = sd_zeros(ATTN_F64, 4, q.v.shape);
    attn_sdpa_opts fo = {.sinks = &hv.v, .lse = &lse.v};
    ck_assert_int_eq(attn_sdpa(&q.v, &q.v, &q.v, &fo, &out.v, NULL, 0), ATTN_OK);
    memcpy(snap, dq.mem, ob);
    double hsnap[H] = {0};
    attn_view qh; /* H elements at the start of q */
    attn_view_init(&qh, ATTN_F64, q.mem, 1, (int64_t[]){H});
    struct {
        attn_sdpa_opts o;
        attn_status want;
        const char *what;
    } bw[] = {{{.dsinks = &hv.v}, ATTN_EINVAL, "dsinks without sinks"},
              {{.sinks = &hv.v, .dsinks = &h3.v}, ATTN_ESHAPE, "dsinks (3)"},
              {{.sinks = &hv.v, .dsinks = &hf.v}, ATTN_EDTYPE, "dsinks f32"},
              {{.sinks = &hv.v, .dsinks = &qh}, ATTN_EALIAS, "dsinks over q"},
              {{.sinks = &hv.v, .dsinks = &hv.v}, ATTN_EALIAS, "dsinks over sinks"}};
    for (size_t i = 0; i < sizeof bw / sizeof *bw; ++i) {
        attn_status st = attn_sdpa_backward(&q.v, &q.v, &q.v, &bw[i].o, &out.v, &lse.v, &out.v,
                                            &dq.v, NULL, NULL, NULL, 0);
        ck_assert_msg(st == bw[i].want, "%s: got %s", bw[i].what, attn_status_name(st));
        ck_assert_msg(!memcmp(snap, dq.mem, ob) && !memcmp(hsnap, hv.mem, sizeof hsnap),
                      "%s: a gradient written", bw[i].what);
    }
    sd_free(&lse), sd_free(&dq);
    free(snap), free(snap1);
    sd_t *all[] = {&q, &q1, &out, &out1, &hv, &h3, &hf, &h2d};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        sd_free(all[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("variants");
    TCase *tc = tcase_create("attn_sdpa");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, va_fixtures);
    tcase_add_test(tc, va_fixtures_backward);
    tcase_add_test(tc, va_backward_finite_differences);
    tcase_add_test(tc, va_equivalent_masks);
    tcase_add_test(tc, va_key_split);
    tcase_add_test(tc, va_window_work);
    tcase_add_test(tc, va_errors);
    tcase_add_test(tc, va_alibi_slopes);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
