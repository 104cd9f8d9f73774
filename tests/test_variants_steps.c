/* SPDX-License-Identifier: MIT */
/* The attention variants through the decode kernel, the cached steps and the layers. */
#include "variants_util.h"

/* ---- the decode kernel and the cached steps -------------------------------------------- */

/*
 * attn_sdpa_decode with window, softcap, ALiBi and sinks against the generator (queries
 * at the end of each batch's len, keys at their cache positions): one split and many,
 * 1 and 2 threads, both dtypes.
 */
START_TEST(va_decode_fixtures) {
    static const char *files[] = {"variant_decode_causal.txt", "variant_decode_open.txt"};
    for (size_t fi = 0; fi < 2; ++fi) {
        fx_file *fx = fx_load(files[fi]);
        ck_assert_msg(fx != NULL, "%s", files[fi]);
        for (int d = 0; d < 2; ++d) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            sd_t q = va_tensor(fx, "q", dt, LY_CONTIG), k = va_tensor(fx, "k", dt, LY_BTHD);
            sd_t v = va_tensor(fx, "v", dt, LY_BTHD), out = va_tensor(fx, "out", dt, LY_CONTIG);
            sd_t al = sd_from_fx(fx_get(fx, "alibi"), dt),
                 sk = sd_from_fx(fx_get(fx, "sinks"), dt);
            sd_t want = sd_from_fx(fx_get(fx, "out"), ATTN_F64);
            sd_t wl = sd_from_fx(fx_get(fx, "lse"), ATTN_F64),
                 lse = sd_zeros(dt, 3, wl.v.shape);
            fx_tensor *lt = fx_get(fx, "len");
            int64_t len[4];
            for (int64_t b = 0; b < lt->n; ++b)
                len[b] = (int64_t)lt->data[b];
            bool causal = fx_meta(fx, "causal", 0) != 0;
            static const int64_t splits[] = {0, 16, 64};
            for (int si = 0; si < 3; ++si)
                for (int th = 1; th <= 2; ++th) {
                    attn_decode_opts o = {.window = fx_meta(fx, "window", 0) != 0,
                                          .window_left = fx_meta(fx, "window_left", 0),
                                          .window_right = fx_meta(fx, "window_right", 0),
                                          .softcap = fx_get(fx, "softcap")->data[0],
                                          .alibi = &al.v,
                                          .sinks = &sk.v,
                                          .split = splits[si],
                                          .threads = th};
                    attn_status st = attn_sdpa_decode(&q.v, &k.v, &v.v, len, causal, &o, &out.v,
                                                      &lse.v, NULL, 0);
                    char what[128];
                    snprintf(what, sizeof what, "%s %s (k, v %s) split %lld threads %d",
                             files[fi], d ? "f64" : "f32", sd_lay_name[LY_BTHD],
                             (long long)splits[si], th);
                    ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_status_name(st));
                    tu_check_close(&out.v, &want.v, TU_RTOL(dt), TU_ATOL(dt), what);
                    tu_check_close(&lse.v, &wl.v, TU_RTOL(dt), TU_ATOL(dt), what);
                }
            sd_t *all[] = {&q, &k, &v, &out, &al, &sk, &want, &wl, &lse};
            for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
                sd_free(all[i]);
        }
        fx_free(fx);
    }
}
END_TEST

/*
 * attn_mha_step with every variant, a prefill of 5 tokens then one token at a time
 * (the decode kernel), and a prefill long enough for attn_sdpa's tiles (GQA rows > 64),
 * equals attn_mha_forward over the whole sequence with causal and the same variants:
 * the step's positions are the cache's absolute ones.
 */
START_TEST(va_step_equals_forward) {
    enum { B = 2, C = 16, H = 4, T = 40 };
    for (int d = 0; d < 2; ++d)
        for (int mode = 0; mode < 2; ++mode) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            attn_mha_config cfg = {
                .dtype = dt, .d_model = C, .heads = H, .kv_heads = 2, .bias = true};
            size_t ps = attn_mha_params_size(&cfg), cs = attn_kv_cache_size(&cfg, B, T);
            void *pslab = aligned_alloc(64, (ps + 63) / 64 * 64);
            void *cslab = aligned_alloc(64, (cs + 63) / 64 * 64);
            attn_mha_params p;
            attn_kv_cache kc;
            ck_assert_int_eq(attn_mha_params_bind(&p, &cfg, pslab, ps), ATTN_OK);
            ck_assert_int_eq(attn_kv_cache_bind(&kc, &cfg, B, T, cslab, cs), ATTN_OK);
            uint64_t seed = 21;
            attn_view *pv[8] = {&p.wq, &p.wk, &p.wv, &p.wo, &p.bq, &p.bk, &p.bv, &p.bo};
            for (int i = 0; i < 8; ++i)
                tu_fill(pv[i], &seed, 0.8);
            sd_t x = sd_zeros(dt, 3, (int64_t[]){B, T, C}), full = sd_zeros(dt, 3, x.v.shape);
            tu_fill(&x.v, &seed, 1.0);
            sd_t al = sd_zeros(dt, 1, (int64_t[]){H}), sk = sd_zeros(dt, 1, (int64_t[]){H});
            attn_alibi_slopes(&al.v, 0);
            tu_fill(&sk.v, &seed, 2.0);
            attn_sdpa_opts fo = {.causal = ATTN_CAUSAL_TOP_LEFT,
                                 .window = true,
                                 .window_left = 6,
                                 .window_right = 0,
                                 .softcap = 1.5,
                                 .alibi = &al.v,
                                 .sinks = &sk.v};
            ck_assert_int_eq(
                attn_mha_forward(&cfg, &p, &x.v, NULL, &fo, &full.v, NULL, NULL, 0), ATTN_OK);
            attn_step_opts so = {.window = true,
                                 .window_left = 6,
                                 .softcap = 1.5,
                                 .alibi = &al.v,
                                 .sinks = &sk.v,
                                 .split = 4};
            /* mode 0: prefill 5, then tokens one by one; mode 1: prefill 36 (GQA rows 72) */
            int64_t t = 0, first = mode ? 36 : 5;
            while (t < T) {
                int64_t n = t == 0 ? first : 1;
                attn_view xt, ft;
                sd_t out = sd_zeros(dt, 3, (int64_t[]){B, n, C});
                attn_view_slice(&x.v, 1, t, t + n, 1, &xt);
                attn_view_slice(&full.v, 1, t, t + n, 1, &ft);
                ck_assert_int_eq(attn_mha_step(&cfg, &p, &so, &xt, &kc, &out.v, NULL, 0),
                                 ATTN_OK);
                tu_check_close(&out.v, &ft, dt == ATTN_F64 ? 1e-11 : 1e-4,
                               dt == ATTN_F64 ? 1e-12 : 1e-5, "step vs forward");
                sd_free(&out);
                t += n;
            }
            sd_free(&x), sd_free(&full), sd_free(&al), sd_free(&sk);
            free(pslab), free(cslab);
        }
}
END_TEST

/*
 * The layers pass the variants through: attn_mha_forward and attn_mha_backward with a
 * causal window and ALiBi equal the same calls with a band keep mask and the ALiBi
 * term as a bias (dx and every parameter gradient), both dtypes.
 */
START_TEST(va_layers_through) {
    enum { B = 2, T = 70, C = 16, H = 4 };
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        attn_mha_config cfg = {
            .dtype = dt, .d_model = C, .heads = H, .kv_heads = 2, .bias = true};
        size_t ps = attn_mha_params_size(&cfg), cs = attn_mha_cache_size(&cfg, B, T, T);
        void *slab = aligned_alloc(64, (ps + 63) / 64 * 64);
        void *gs[2] = {aligned_alloc(64, (ps + 63) / 64 * 64),
                       aligned_alloc(64, (ps + 63) / 64 * 64)};
        void *cache[2] = {aligned_alloc(64, (cs + 63) / 64 * 64),
                          aligned_alloc(64, (cs + 63) / 64 * 64)};
        attn_mha_params p, g[2];
        ck_assert_int_eq(attn_mha_params_bind(&p, &cfg, slab, ps), ATTN_OK);
        uint64_t seed = 31;
        attn_view *pv[8] = {&p.wq, &p.wk, &p.wv, &p.wo, &p.bq, &p.bk, &p.bv, &p.bo};
        for (int i = 0; i < 8; ++i)
            tu_fill(pv[i], &seed, 0.6);
        sd_t x = sd_zeros(dt, 3, (int64_t[]){B, T, C}), dout = sd_zeros(dt, 3, x.v.shape);
        tu_fill(&x.v, &seed, 1.0);
        tu_fill(&dout.v, &seed, 1.0);
        sd_t al = sd_zeros(dt, 1, (int64_t[]){H}),
             keep = sd_zeros(ATTN_U8, 2, (int64_t[]){T, T});
        sd_t bias = sd_zeros(dt, 4, (int64_t[]){1, H, T, T});
        attn_alibi_slopes(&al.v, 0);
        for (int64_t i = 0; i < T; ++i)
            for (int64_t j = 0; j < T; ++j) {
                ((uint8_t *)keep.mem)[i * T + j] = j >= i - 9;
                for (int64_t h = 0; h < H; ++h)
                    tu_set(&bias.v, (int64_t[]){0, h, i, j},
                           -tu_get(&al.v, &h) * fabs((double)(i - j)));
            }
        attn_sdpa_opts o[2] = {
            {.causal = ATTN_CAUSAL_TOP_LEFT, .window = true, .window_left = 9, .alibi = &al.v},
            {.causal = ATTN_CAUSAL_TOP_LEFT, .keep = &keep.v, .bias = &bias.v}};
        sd_t out[2], dx[2];
        for (int r = 0; r < 2; ++r) {
            attn_view views[5];
            attn_trace tr;
            out[r] = sd_zeros(dt, 3, x.v.shape);
            dx[r] = sd_zeros(dt, 3, x.v.shape);
            memset(gs[r], 0, ps);
            ck_assert_int_eq(attn_mha_params_bind(&g[r], &cfg, gs[r], ps), ATTN_OK);
            ck_assert_int_eq(attn_mha_cache_bind(&cfg, B, T, T, cache[r], cs, views, &tr),
                             ATTN_OK);
            ck_assert_int_eq(
                attn_mha_forward(&cfg, &p, &x.v, NULL, &o[r], &out[r].v, &tr, NULL, 0),
                ATTN_OK);
            ck_assert_int_eq(attn_mha_backward(&cfg, &p, &x.v, NULL, &o[r], &tr, &dout.v,
                                               &dx[r].v, NULL, &g[r], NULL, 0),
                             ATTN_OK);
        }
        double rt = dt == ATTN_F64 ? 1e-11 : 2e-4, at = dt == ATTN_F64 ? 1e-12 : 2e-5;
        tu_check_close(&out[0].v, &out[1].v, rt, at, "mha out, window+ALiBi vs masks");
        tu_check_close(&dx[0].v, &dx[1].v, rt, at, "mha dx, window+ALiBi vs masks");
        attn_view *ga[8] = {&g[0].wq, &g[0].wk, &g[0].wv, &g[0].wo,
                            &g[0].bq, &g[0].bk, &g[0].bv, &g[0].bo};
        attn_view *gb[8] = {&g[1].wq, &g[1].wk, &g[1].wv, &g[1].wo,
                            &g[1].bq, &g[1].bk, &g[1].bv, &g[1].bo};
        for (int i = 0; i < 8; ++i)
            tu_check_close(ga[i], gb[i], rt, at, "mha parameter gradient");
        for (int r = 0; r < 2; ++r)
            sd_free(&out[r]), sd_free(&dx[r]), free(gs[r]), free(cache[r]);
        sd_free(&x), sd_free(&dout), sd_free(&al), sd_free(&keep), sd_free(&bias);
        free(slab);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("variants_steps");
    TCase *tc = tcase_create("attn_sdpa_decode");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, va_decode_fixtures);
    suite_add_tcase(s, tc);
    tc = tcase_create("attn_mha_step");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, va_step_equals_forward);
    suite_add_tcase(s, tc);
    tc = tcase_create("attn_mha_backward");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, va_layers_through);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
