/* SPDX-License-Identifier: MIT */
/* Check suite for attn_sdpa: masks x GQA x causal x layouts x algorithms against a loop reference. */
#include "fixture.h"
#include "sdpa_util.h"

/* How one call is made. */
typedef struct sd_run {
    attn_algo algo;
    int64_t bq, bk;
    int threads;
    sd_lay lin, lout;
    bool weights;
} sd_run;

static const sd_case cases[] = {
    /* B  H Hkv Tq  Tk  D  Dv  causal                     keep bias kvl scale */
    {1, 1, 1, 1, 1, 4, 4, ATTN_CAUSAL_NONE, 0, 0, 0, 0},
    {2, 3, 3, 7, 11, 5, 6, ATTN_CAUSAL_NONE, 0, 0, 0, 0},
    {2, 4, 2, 9, 13, 8, 3, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0},     /* GQA */
    {1, 3, 1, 13, 9, 4, 4, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0}, /* MQA; Tq > Tk: empty rows */
    {2, 2, 2, 6, 17, 4, 5, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0}, /* KV cache: Tq < Tk */
    {1, 2, 2, 17, 6, 4, 5, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0},     /* Tq > Tk */
    {2, 2, 1, 8, 12, 6, 6, ATTN_CAUSAL_NONE, 1, 0, 0, 0.3},
    {2, 2, 2, 8, 12, 6, 6, ATTN_CAUSAL_NONE, 2, 1, 0, 0},
    {3, 2, 2, 9, 10, 3, 4, ATTN_CAUSAL_TOP_LEFT, 3, 2, 1, 0},
    {2, 4, 2, 10, 10, 4, 4, ATTN_CAUSAL_BOTTOM_RIGHT, 4, 3, 1, 0},
    {3, 2, 1, 5, 19, 7, 2, ATTN_CAUSAL_NONE, 0, 1, 1, -0.7},
    {1, 1, 1, 33, 47, 16, 16, ATTN_CAUSAL_TOP_LEFT, 1, 1, 1, 0},
    {2, 2, 2, 21, 21, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 2, 0, 0},
    {2, 2, 1, 7, 9, 2, 9, ATTN_CAUSAL_NONE, 0, 0, 0, 0}, /* Dv > D: v packs more than q, k */
};
#define NCASES (sizeof cases / sizeof *cases)

/* Run one call and compare out, lse and (materialized) weights with ref_sdpa. */
static void run(attn_dtype dt, const sd_case *c, const sd_run *r, uint64_t seed) {
    int64_t qs[4] = {c->B, c->H, c->Tq, c->D}, ks[4] = {c->B, c->Hkv, c->Tk, c->D};
    int64_t vs[4] = {c->B, c->Hkv, c->Tk, c->Dv}, os[4] = {c->B, c->H, c->Tq, c->Dv};
    int64_t wsh[4] = {c->B, c->H, c->Tq, c->Tk};
    sd_t q = sd_make(dt, qs, r->lin, &seed, 1.0), k = sd_make(dt, ks, r->lin, &seed, 1.0);
    sd_t v = sd_make(dt, vs, r->lin, &seed, 1.0), out = sd_make(dt, os, r->lout, &seed, 9.0);
    sd_t w = sd_make(dt, wsh, LY_PADDED, &seed, 9.0), lse = sd_make(dt, wsh, LY_CONTIG, &seed, 9.0);
    attn_view lse3;
    attn_view_select(&lse.v, 3, 0, &lse3); /* (B, H, Tq), row stride Tk */
    attn_sdpa_opts o = {0};
    sd_masks m;
    sd_masks_make(c, dt, &seed, &m, &o);
    o.algo = r->algo;
    o.block_q = r->bq;
    o.block_k = r->bk;
    o.threads = r->threads;
    o.lse = &lse3;
    if (r->weights) o.weights = &w.v;
    size_t ws = attn_sdpa_workspace_size(&q.v, &k.v, &v.v, &o);
    void *work = ws ? malloc(ws) : NULL;
    attn_status st = attn_sdpa(&q.v, &k.v, &v.v, &o, &out.v, work, ws);
    char what[200];
    snprintf(what, sizeof what,
             "%s B%lld H%lld/%lld Tq%lld Tk%lld D%lld/%lld causal%d keep%d bias%d kvl%d "
             "algo%d bq%lld bk%lld thr%d in=%s out=%s",
             dt == ATTN_F64 ? "f64" : "f32", (long long)c->B, (long long)c->H,
             (long long)c->Hkv, (long long)c->Tq, (long long)c->Tk, (long long)c->D,
             (long long)c->Dv, c->causal, c->keep, c->bias, c->kv_len, r->algo,
             (long long)r->bq, (long long)r->bk, r->threads, sd_lay_name[r->lin],
             sd_lay_name[r->lout]);
    ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_strerror(st));
    sd_t wo = sd_zeros(ATTN_F64, 4, os), ww = sd_zeros(ATTN_F64, 4, wsh);
    sd_t wl = sd_zeros(ATTN_F64, 3, wsh);
    ref_sdpa(&q.v, &k.v, &v.v, &o, &wo.v, &ww.v, &wl.v);
    tu_check_close(&out.v, &wo.v, TU_RTOL(dt), TU_ATOL(dt), what);
    tu_check_close(&lse3, &wl.v, TU_RTOL(dt), TU_ATOL(dt), what);
    if (r->weights) tu_check_close(&w.v, &ww.v, TU_RTOL(dt), TU_ATOL(dt), what);
    free(work);
    sd_masks_free(&m);
    sd_t *all[] = {&q, &k, &v, &out, &w, &lse, &wo, &ww, &wl};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i) sd_free(all[i]);
}

/* Every case under each algorithm, tile shape and thread count. */
static void sweep_cases(attn_dtype dt) {
    static const sd_run runs[] = {
        {ATTN_ALGO_MATERIALIZED, 0, 0, 1, LY_CONTIG, LY_CONTIG, true},
        {ATTN_ALGO_MATERIALIZED, 3, 0, 2, LY_CONTIG, LY_CONTIG, true},
        {ATTN_ALGO_TILED, 4, 5, 1, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_TILED, 5, 3, 2, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_TILED, 0, 0, 0, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_AUTO, 0, 0, 0, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_AUTO, 2, 7, 0, LY_CONTIG, LY_CONTIG, true},
    };
    for (size_t ci = 0; ci < NCASES; ++ci)
        for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ++ri)
            run(dt, &cases[ci], &runs[ri], 1000 + ci * 17 + ri);
}

START_TEST(sd_cases_f64) { sweep_cases(ATTN_F64); }
END_TEST
START_TEST(sd_cases_f32) { sweep_cases(ATTN_F32); }
END_TEST

/* Strided, transposed, negative and packed inputs; strided outputs; both algorithms. */
START_TEST(sd_layouts) {
    static const sd_lay outs[] = {LY_CONTIG, LY_BTHD, LY_PADDED, LY_NEG, LY_COLMAJOR};
    static const size_t which[] = {2, 9, 11, 13};
    for (int d = 0; d < 2; ++d)
        for (size_t wi = 0; wi < 4; ++wi)
            for (int li = 0; li < LY_COUNT; ++li)
                for (size_t lo = 0; lo < 5; ++lo)
                    for (int tiled = 0; tiled < 2; ++tiled) {
                        sd_run r = {tiled ? ATTN_ALGO_TILED : ATTN_ALGO_MATERIALIZED,
                                    tiled ? 4 : 0, tiled ? 6 : 0, 2, (sd_lay)li, outs[lo],
                                    !tiled};
                        run(d ? ATTN_F64 : ATTN_F32, &cases[which[wi]], &r, 7 + li * 5 + lo);
                    }
}
END_TEST

/* TILED and MATERIALIZED agree, and thread counts give bit-identical results. */
START_TEST(sd_algos_agree) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        const sd_case *c = &cases[11];
        int64_t qs[4] = {c->B, c->H, c->Tq, c->D}, ks[4] = {c->B, c->Hkv, c->Tk, c->D};
        int64_t os[4] = {c->B, c->H, c->Tq, c->Dv};
        uint64_t seed = 99;
        sd_t q = sd_make(dt, qs, LY_CONTIG, &seed, 1), k = sd_make(dt, ks, LY_CONTIG, &seed, 1);
        sd_t v = sd_make(dt, ks, LY_CONTIG, &seed, 1);
        sd_t o[4];
        attn_sdpa_opts opts = {0};
        sd_masks m;
        sd_masks_make(c, dt, &seed, &m, &opts);
        for (int i = 0; i < 4; ++i) {
            o[i] = sd_zeros(dt, 4, os);
            opts.algo = i == 0 ? ATTN_ALGO_MATERIALIZED : ATTN_ALGO_TILED;
            opts.block_q = i == 0 ? 0 : 8;
            opts.block_k = 8;
            opts.threads = i == 3 ? 2 : 1;
            ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &opts, &o[i].v, NULL, 0), ATTN_OK);
        }
        tu_check_close(&o[1].v, &o[0].v, TU_RTOL(dt), TU_ATOL(dt), "tiled vs materialized");
        ck_assert_int_eq(memcmp(o[2].mem, o[3].mem, (size_t)tu_numel(&o[2].v) *
                                                       attn_dtype_size(dt)), 0);
        ck_assert_int_eq(memcmp(o[1].mem, o[2].mem, (size_t)tu_numel(&o[2].v) *
                                                       attn_dtype_size(dt)), 0);
        sd_masks_free(&m);
        sd_free(&q); sd_free(&k); sd_free(&v);
        for (int i = 0; i < 4; ++i) sd_free(&o[i]);
    }
}
END_TEST

/* Rows that see no key: out 0, weights 0, lse -1e30, never NaN; also kv_len = 0 and Tk = 0. */
START_TEST(sd_fully_masked) {
    for (int d = 0; d < 2; ++d)
        for (int a = 1; a <= 2; ++a) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            int64_t qs[4] = {2, 2, 4, 3}, ks[4] = {2, 2, 5, 3}, ws[4] = {2, 2, 4, 5};
            uint64_t seed = 5;
            sd_t q = sd_make(dt, qs, LY_CONTIG, &seed, 1), k = sd_make(dt, ks, LY_CONTIG, &seed, 1);
            sd_t v = sd_make(dt, ks, LY_CONTIG, &seed, 1), out = sd_make(dt, qs, LY_CONTIG, &seed, 1);
            sd_t w = sd_make(dt, ws, LY_CONTIG, &seed, 1), lse = sd_zeros(dt, 3, ws);
            uint8_t keep[4 * 5] = {0}; /* (Tq, Tk): row 0 and row 2 see nothing */
            for (int j = 0; j < 5; ++j) keep[1 * 5 + j] = keep[3 * 5 + j] = (uint8_t)(j % 2);
            attn_view kv;
            attn_view_init(&kv, ATTN_U8, keep, 2, (int64_t[]){4, 5});
            /* bias -inf on the rest of row 3: -inf bias is also "masked" */
            sd_t bias = sd_zeros(dt, 2, (int64_t[]){4, 5});
            for (int j = 0; j < 5; ++j) tu_set(&bias.v, (int64_t[]){3, j}, -INFINITY);
            int64_t kvl[2] = {5, 0}; /* batch 1 has no keys at all */
            attn_sdpa_opts o = {.keep = &kv, .bias = &bias.v, .kv_len = kvl, .lse = &lse.v,
                                .algo = (attn_algo)a, .block_k = 2};
            if (a == ATTN_ALGO_MATERIALIZED) o.weights = &w.v;
            ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &o, &out.v, NULL, 0), ATTN_OK);
            for (int64_t b = 0; b < 2; ++b)
                for (int64_t h = 0; h < 2; ++h)
                    for (int64_t i = 0; i < 4; ++i) {
                        bool empty = b == 1 || i != 1;
                        double l = tu_get(&lse.v, (int64_t[]){b, h, i});
                        ck_assert(isfinite(l));
                        if (empty) ck_assert_double_eq(l, dt == ATTN_F32 ? (double)-1e30f : -1e30);
                        for (int64_t e = 0; e < 3; ++e) {
                            double x = tu_get(&out.v, (int64_t[]){b, h, i, e});
                            ck_assert(!isnan(x));
                            if (empty) ck_assert(x == 0.0);
                        }
                        if (a == ATTN_ALGO_MATERIALIZED)
                            for (int64_t j = 0; j < 5; ++j)
                                if (empty || j % 2 == 0)
                                    ck_assert(tu_get(&w.v, (int64_t[]){b, h, i, j}) == 0.0);
                    }
            /* Tk = 0: every row is empty */
            int64_t k0[4] = {2, 2, 0, 3};
            attn_view k0v;
            attn_view_init(&k0v, dt, k.mem, 4, k0);
            attn_sdpa_opts o0 = {.lse = &lse.v, .algo = (attn_algo)a};
            ck_assert_int_eq(attn_sdpa(&q.v, &k0v, &k0v, &o0, &out.v, NULL, 0), ATTN_OK);
            int64_t idx[4] = {0};
            do ck_assert(tu_get(&out.v, idx) == 0.0); while (tu_inc(idx, qs, 4));
            sd_free(&q); sd_free(&k); sd_free(&v); sd_free(&out); sd_free(&w); sd_free(&lse);
            sd_free(&bias);
        }
}
END_TEST

/* Scores of order 1e4 (scale 1e4): no overflow, no NaN; matches the reference. */
START_TEST(sd_huge_logits) {
    sd_case c = {2, 2, 1, 9, 14, 8, 8, ATTN_CAUSAL_TOP_LEFT, 1, 1, 0, 1e4};
    for (int a = 1; a <= 2; ++a) {
        sd_run r = {(attn_algo)a, 3, 4, 1, LY_CONTIG, LY_CONTIG, a == 1};
        run(ATTN_F64, &c, &r, 3);
        run(ATTN_F32, &c, &r, 3);
    }
}
END_TEST

/* PyTorch (torch 1.13, float64, explicit softmax(q k^T scale + mask) v) fixtures. */
START_TEST(sd_fixtures) {
    static const char *files[] = {"sdpa_keep_bias.txt", "sdpa_gqa_causal.txt",
                                  "sdpa_bottom_right.txt", "sdpa_padding.txt"};
    for (size_t fi = 0; fi < sizeof files / sizeof *files; ++fi) {
        fx_file *fx = fx_load(files[fi]);
        ck_assert_msg(fx != NULL, "%s", files[fi]);
        for (int d = 0; d < 2; ++d) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            sd_t q = sd_from_fx(fx_get(fx, "q"), dt), k = sd_from_fx(fx_get(fx, "k"), dt);
            sd_t v = sd_from_fx(fx_get(fx, "v"), dt);
            sd_t want = sd_from_fx(fx_get(fx, "out"), ATTN_F64);
            sd_t wl = sd_from_fx(fx_get(fx, "lse"), ATTN_F64);
            sd_t out = sd_zeros(dt, 4, want.v.shape), lse = sd_zeros(dt, 3, wl.v.shape);
            attn_sdpa_opts o = {.lse = &lse.v};
            sd_masks m;
            sd_fx_masks(fx, dt, &m, &o);
            for (int a = 1; a <= 2; ++a) {
                o.algo = (attn_algo)a;
                o.block_q = a == 2 ? 3 : 0;
                o.block_k = a == 2 ? 4 : 0;
                ck_assert_int_eq(attn_sdpa(&q.v, &k.v, &v.v, &o, &out.v, NULL, 0), ATTN_OK);
                tu_check_close(&out.v, &want.v, TU_RTOL(dt), TU_ATOL(dt), files[fi]);
                tu_check_close(&lse.v, &wl.v, TU_RTOL(dt), TU_ATOL(dt), files[fi]);
            }
            sd_t *all[] = {&q, &k, &v, &out, &lse, &want, &wl};
            for (size_t i = 0; i < sizeof all / sizeof *all; ++i) sd_free(all[i]);
            sd_masks_free(&m);
        }
        fx_free(fx);
    }
}
END_TEST

/* Every status, with out/weights/lse left exactly as they were. */
START_TEST(sd_errors) {
    float q[2 * 4 * 3 * 2], k[2 * 2 * 5 * 2], v[2 * 2 * 5 * 3], o[2 * 4 * 3 * 3];
    float w[2 * 4 * 3 * 5], l[2 * 4 * 3], bias[3 * 5], o0[sizeof o / sizeof *o];
    double qd[sizeof q / sizeof *q];
    uint8_t keep[3 * 5];
    uint64_t seed = 11;
    for (size_t i = 0; i < sizeof q / sizeof *q; ++i) q[i] = (float)tu_uniform(&seed);
    for (size_t i = 0; i < sizeof k / sizeof *k; ++i) k[i] = (float)tu_uniform(&seed);
    for (size_t i = 0; i < sizeof v / sizeof *v; ++i) v[i] = (float)tu_uniform(&seed);
    for (size_t i = 0; i < sizeof o / sizeof *o; ++i) o[i] = o0[i] = 7.0f;
    for (size_t i = 0; i < sizeof w / sizeof *w; ++i) w[i] = 7.0f;
    for (size_t i = 0; i < sizeof l / sizeof *l; ++i) l[i] = 7.0f;
    memset(keep, 1, sizeof keep);
    memset(bias, 0, sizeof bias);
    attn_view Q, K, V, O, W, L, KP, BI, Qd, bad;
    attn_view_init(&Q, ATTN_F32, q, 4, (int64_t[]){2, 4, 3, 2});
    attn_view_init(&K, ATTN_F32, k, 4, (int64_t[]){2, 2, 5, 2});
    attn_view_init(&V, ATTN_F32, v, 4, (int64_t[]){2, 2, 5, 3});
    attn_view_init(&O, ATTN_F32, o, 4, (int64_t[]){2, 4, 3, 3});
    attn_view_init(&W, ATTN_F32, w, 4, (int64_t[]){2, 4, 3, 5});
    attn_view_init(&L, ATTN_F32, l, 3, (int64_t[]){2, 4, 3});
    attn_view_init(&KP, ATTN_U8, keep, 2, (int64_t[]){3, 5});
    attn_view_init(&BI, ATTN_F32, bias, 2, (int64_t[]){3, 5});
    attn_view_init(&Qd, ATTN_F64, qd, 4, (int64_t[]){2, 4, 3, 2});
    attn_sdpa_opts ok = {.keep = &KP, .bias = &BI, .lse = &L, .weights = &W};
    ck_assert_int_eq(attn_sdpa(&Q, &K, &V, &ok, &O, NULL, 0), ATTN_OK); /* the baseline works */
    memcpy(o, o0, sizeof o);
    for (size_t i = 0; i < sizeof w / sizeof *w; ++i) w[i] = 7.0f;
    for (size_t i = 0; i < sizeof l / sizeof *l; ++i) l[i] = 7.0f;
#define EXPECT(code, opts, qq, kk, vv, oo, wk, wsz)                                           \
    do {                                                                                       \
        attn_sdpa_opts o_ = (opts);                                                            \
        ck_assert_int_eq(attn_sdpa(qq, kk, vv, &o_, oo, wk, wsz), code);                       \
        ck_assert_int_eq(memcmp(o, o0, sizeof o), 0);                                          \
        for (size_t i_ = 0; i_ < sizeof w / sizeof *w; ++i_) ck_assert(w[i_] == 7.0f);         \
        for (size_t i_ = 0; i_ < sizeof l / sizeof *l; ++i_) ck_assert(l[i_] == 7.0f);         \
    } while (0)
    attn_sdpa_opts x;
    /* NULL views, bad enums, bad numbers */
    EXPECT(ATTN_EINVAL, ok, NULL, &K, &V, &O, NULL, 0);
    EXPECT(ATTN_EINVAL, ok, &Q, &K, &V, NULL, NULL, 0);
    x = ok; x.causal = (attn_causal)7; EXPECT(ATTN_EINVAL, x, &Q, &K, &V, &O, NULL, 0);
    x = ok; x.algo = (attn_algo)9; EXPECT(ATTN_EINVAL, x, &Q, &K, &V, &O, NULL, 0);
    x = ok; x.scale = NAN; EXPECT(ATTN_EINVAL, x, &Q, &K, &V, &O, NULL, 0);
    x = ok; x.block_q = -1; EXPECT(ATTN_EINVAL, x, &Q, &K, &V, &O, NULL, 0);
    x = ok; x.threads = -2; EXPECT(ATTN_EINVAL, x, &Q, &K, &V, &O, NULL, 0);
    int64_t kvl[2] = {5, 6};
    x = ok; x.kv_len = kvl; EXPECT(ATTN_ERANGE, x, &Q, &K, &V, &O, NULL, 0);
    /* dtypes: mixed, wrong mask dtype, U8 data */
    EXPECT(ATTN_EDTYPE, ok, &Qd, &K, &V, &O, NULL, 0);
    x = ok; x.keep = &BI; EXPECT(ATTN_EDTYPE, x, &Q, &K, &V, &O, NULL, 0);
    x = ok; x.bias = &KP; EXPECT(ATTN_EDTYPE, x, &Q, &K, &V, &O, NULL, 0);
    bad = Q; bad.dtype = ATTN_U8; EXPECT(ATTN_EDTYPE, ok, &bad, &K, &V, &O, NULL, 0);
    /* shapes */
    bad = Q; bad.shape[3] = 1; EXPECT(ATTN_ESHAPE, ok, &bad, &K, &V, &O, NULL, 0);      /* D */
    bad = K; bad.shape[1] = 3; bad.stride[0] = 30;
    EXPECT(ATTN_ESHAPE, ok, &Q, &bad, &V, &O, NULL, 0);                                  /* H % Hkv */
    bad = V; bad.shape[2] = 4; EXPECT(ATTN_ESHAPE, ok, &Q, &K, &bad, &O, NULL, 0);      /* Tk */
    bad = O; bad.shape[3] = 2; EXPECT(ATTN_ESHAPE, ok, &Q, &K, &V, &bad, NULL, 0);      /* Dv */
    bad = Q; bad.ndim = 3; EXPECT(ATTN_ESHAPE, ok, &bad, &K, &V, &O, NULL, 0);
    attn_view kp2 = KP; kp2.shape[1] = 4; /* (3, 4) does not broadcast to (.., 3, 5) */
    x = ok; x.keep = &kp2; EXPECT(ATTN_ESHAPE, x, &Q, &K, &V, &O, NULL, 0);
    attn_view bi2 = BI; bi2.shape[0] = 2; bi2.shape[1] = 1; /* (2, 1): 2 vs Tq 3 */
    x = ok; x.bias = &bi2; EXPECT(ATTN_ESHAPE, x, &Q, &K, &V, &O, NULL, 0);
    attn_view w2 = W; w2.shape[3] = 4; x = ok; x.weights = &w2;
    EXPECT(ATTN_ESHAPE, x, &Q, &K, &V, &O, NULL, 0);
    attn_view l2 = L; l2.shape[2] = 2; x = ok; x.lse = &l2;
    EXPECT(ATTN_ESHAPE, x, &Q, &K, &V, &O, NULL, 0);
    /* outputs: broadcast (ESTRIDE), aliasing q, aliasing each other (EALIAS) */
    bad = O; bad.stride[2] = 0; EXPECT(ATTN_ESTRIDE, ok, &Q, &K, &V, &bad, NULL, 0);
    attn_view oq; /* out over q's memory */
    attn_view_init(&oq, ATTN_F32, q, 4, (int64_t[]){2, 4, 3, 1});
    attn_view v1 = V; v1.shape[3] = 1;
    EXPECT(ATTN_EALIAS, ok, &Q, &K, &v1, &oq, NULL, 0);
    attn_view lo; attn_view_init(&lo, ATTN_F32, o, 3, (int64_t[]){2, 4, 3});
    x = ok; x.lse = &lo; EXPECT(ATTN_EALIAS, x, &Q, &K, &V, &O, NULL, 0);
    attn_view wk; attn_view_init(&wk, ATTN_F32, k, 4, (int64_t[]){2, 4, 3, 5});
    x = ok; x.weights = &wk; EXPECT(ATTN_EALIAS, x, &Q, &K, &V, &O, NULL, 0);
    /* weights need whole rows */
    x = ok; x.algo = ATTN_ALGO_TILED; EXPECT(ATTN_EUNSUPPORTED, x, &Q, &K, &V, &O, NULL, 0);
    /* workspace: one byte short, NULL with a size */
    size_t ws = attn_sdpa_workspace_size(&Q, &K, &V, &ok);
    ck_assert_uint_gt(ws, 0);
    char *wk_mem = malloc(ws);
    EXPECT(ATTN_EWORKSPACE, ok, &Q, &K, &V, &O, wk_mem, ws - 1);
    EXPECT(ATTN_EWORKSPACE, ok, &Q, &K, &V, &O, NULL, ws);
    ck_assert_int_eq(attn_sdpa(&Q, &K, &V, &ok, &O, wk_mem, ws), ATTN_OK);
    free(wk_mem);
    /* more keys than the BLAS can take in one materialized row: ERANGE, nothing written */
    memcpy(o, o0, sizeof o);
    for (size_t i = 0; i < sizeof w / sizeof *w; ++i) w[i] = 7.0f;
    for (size_t i = 0; i < sizeof l / sizeof *l; ++i) l[i] = 7.0f;
    attn_view Kh, Vh;
    attn_view_init_strided(&Kh, ATTN_F32, k, 4, (int64_t[]){2, 2, INT64_C(1) << 40, 2},
                           (int64_t[]){0, 0, 0, 1});
    attn_view_init_strided(&Vh, ATTN_F32, v, 4, (int64_t[]){2, 2, INT64_C(1) << 40, 3},
                           (int64_t[]){0, 0, 0, 1});
    x = (attn_sdpa_opts){.algo = ATTN_ALGO_MATERIALIZED};
    EXPECT(ATTN_ERANGE, x, &Q, &Kh, &Vh, &O, NULL, 0);
#undef EXPECT
    (void)qd;
}
END_TEST

/*
 * Small B*H with Tk >= 128 on 2 threads: each (b, h, query block) is split over keys
 * and merged through its lse (src/kernels/sdpa.c fwd_split). Masks, causal, kv_len and
 * GQA against the loop reference; and the cache-derived default tiles at odd head widths.
 */
static const sd_case split_cases[] = {
    /* B  H Hkv Tq  Tk  D  Dv  causal                     keep bias kvl scale */
    {1, 1, 1, 37, 300, 8, 8, ATTN_CAUSAL_NONE, 0, 0, 0, 0},
    {1, 2, 1, 20, 257, 6, 5, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0}, /* GQA */
    {2, 1, 1, 9, 400, 4, 7, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 1, 1, 0},
    {3, 1, 1, 16, 200, 5, 4, ATTN_CAUSAL_NONE, 3, 3, 1, 0.4}, /* a batch with kv_len 0 */
    {1, 4, 2, 40, 333, 16, 16, ATTN_CAUSAL_BOTTOM_RIGHT, 4, 2, 0, 0},
    {1, 1, 1, 300, 700, 40, 24, ATTN_CAUSAL_NONE, 0, 1, 0, 0}, /* odd widths, default tiles */
};

static void sweep_split(attn_dtype dt) {
    static const sd_run runs[] = {
        {ATTN_ALGO_TILED, 0, 0, 2, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_TILED, 16, 32, 2, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_AUTO, 0, 0, 2, LY_BTHD, LY_PADDED, false},
        {ATTN_ALGO_TILED, 0, 0, 1, LY_CONTIG, LY_CONTIG, false},
    };
    for (size_t ci = 0; ci < sizeof split_cases / sizeof *split_cases; ++ci)
        for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ++ri)
            run(dt, &split_cases[ci], &runs[ri], 5000 + ci * 13 + ri);
}

START_TEST(sd_key_split_f64) { sweep_split(ATTN_F64); }
END_TEST
START_TEST(sd_key_split_f32) { sweep_split(ATTN_F32); }
END_TEST

/*
 * Query blocks of more than ATTN__SDPA_DIAG_ROWS (64) rows that the causal diagonal or
 * kv_len cuts: such a tile is done in 64-row slices, each against the keys its last row
 * sees (src/tmpl/sdpa.h fwd_task_run). Tq > Tk bottom-right gives slices that see no key
 * of a tile at all; masks, GQA, weights through block_q, one and two threads.
 */
static const sd_case diag_cases[] = {
    /* B  H Hkv Tq  Tk  D  Dv  causal                     keep bias kvl scale */
    {1, 2, 1, 200, 200, 8, 8, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0},
    {2, 1, 1, 150, 230, 8, 6, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 1, 1, 0},
    {1, 1, 1, 230, 150, 6, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 2, 0, 0}, /* early rows: no key */
    {2, 2, 2, 180, 300, 8, 8, ATTN_CAUSAL_NONE, 0, 0, 1, 0},        /* kv_len alone */
};

START_TEST(sd_diagonal_slices) {
    static const sd_run runs[] = {
        {ATTN_ALGO_TILED, 0, 0, 1, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_TILED, 128, 64, 1, LY_BTHD, LY_PADDED, false},
        {ATTN_ALGO_TILED, 256, 96, 2, LY_CONTIG, LY_CONTIG, false},
        {ATTN_ALGO_MATERIALIZED, 200, 0, 2, LY_CONTIG, LY_CONTIG, true},
    };
    for (int d = 0; d < 2; ++d)
        for (size_t ci = 0; ci < sizeof diag_cases / sizeof *diag_cases; ++ci)
            for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ++ri)
                run(d ? ATTN_F64 : ATTN_F32, &diag_cases[ci], &runs[ri], 7000 + ci * 17 + ri);
}
END_TEST

/* The split's pieces are in the workspace the query reports: one (b, h) row block of
   4096 keys is cut into ATTN__SPLIT_TASKS (8) chunks, each a (64, 64) f32 piece, whatever
   the thread count; 8 heads are enough tasks uncut, with the same tiles per thread. */
START_TEST(sw_key_split_counted) {
    float dummy[1];
    attn_view q, k;
    int64_t qs[4] = {1, 1, 64, 64}, ks[4] = {1, 1, 4096, 64}, st[4] = {0, 0, 0, 0};
    attn_view_init_strided(&q, ATTN_F32, dummy, 4, qs, st);
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, ks, st);
    attn_sdpa_opts o = {.algo = ATTN_ALGO_TILED, .threads = 1, .block_q = 64};
    size_t split = attn_sdpa_workspace_size(&q, &k, &k, &o);
    qs[1] = ks[1] = 8;
    attn_view_init_strided(&q, ATTN_F32, dummy, 4, qs, st);
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, ks, st);
    size_t whole = attn_sdpa_workspace_size(&q, &k, &k, &o);
    ck_assert_uint_gt(whole, 0);
    ck_assert_uint_ge(split, whole + 8 * 64 * 64 * sizeof(float));
}
END_TEST

/* Query rows per block, keys per tile: the workspace size queries. */
START_TEST(sw_tiled_independent_of_tk) {
    /* B 1, H 12, D 64: tiled workspace at Tk = 65536 equals the one at 4096, and < 64 MiB */
    float dummy[1];
    attn_view q, k;
    int64_t qs[4] = {1, 12, 65536, 64}, st[4] = {0, 0, 0, 0};
    attn_view_init_strided(&q, ATTN_F32, dummy, 4, qs, st);
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, qs, st);
    attn_sdpa_opts o = {.algo = ATTN_ALGO_TILED, .threads = 2};
    size_t big = attn_sdpa_workspace_size(&q, &k, &k, &o);
    qs[2] = 4096;
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, qs, st);
    size_t small = attn_sdpa_workspace_size(&q, &k, &k, &o);
    ck_assert_uint_gt(big, 0);
    ck_assert_uint_eq(big, small);
    ck_assert_uint_lt(big, (size_t)64 << 20);
    o.algo = ATTN_ALGO_MATERIALIZED; /* whole rows: grows with Tk */
    size_t mat_small = attn_sdpa_workspace_size(&q, &k, &k, &o);
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, (int64_t[]){1, 12, 65536, 64}, st);
    ck_assert_uint_gt(attn_sdpa_workspace_size(&q, &k, &k, &o), 8 * mat_small);
}
END_TEST

START_TEST(sw_invalid_is_zero) {
    float d[8] = {0};
    attn_view q, k;
    attn_view_init(&q, ATTN_F32, d, 4, (int64_t[]){1, 2, 2, 2});
    attn_view_init(&k, ATTN_F32, d, 4, (int64_t[]){1, 2, 2, 1});
    ck_assert_uint_eq(attn_sdpa_workspace_size(&q, &k, &k, NULL), 0);
    ck_assert_uint_eq(attn_sdpa_workspace_size(NULL, &k, &k, NULL), 0);
    ck_assert_uint_gt(attn_sdpa_workspace_size(&q, &q, &q, NULL), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sdpa");
    TCase *tc = tcase_create("attn_sdpa");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sd_cases_f64);
    tcase_add_test(tc, sd_cases_f32);
    tcase_add_test(tc, sd_layouts);
    tcase_add_test(tc, sd_algos_agree);
    tcase_add_test(tc, sd_fully_masked);
    tcase_add_test(tc, sd_huge_logits);
    tcase_add_test(tc, sd_fixtures);
    tcase_add_test(tc, sd_errors);
    tcase_add_test(tc, sd_key_split_f64);
    tcase_add_test(tc, sd_key_split_f32);
    tcase_add_test(tc, sd_diagonal_slices);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("attn_sdpa_workspace_size");
    tcase_add_test(tw, sw_tiled_independent_of_tk);
    tcase_add_test(tw, sw_invalid_is_zero);
    tcase_add_test(tw, sw_key_split_counted);
    suite_add_tcase(s, tw);
    return tu_run(s);
}
