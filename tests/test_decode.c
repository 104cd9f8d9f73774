/* SPDX-License-Identifier: MIT */
/* Check suite for decoding: the KV cache, the cached MHA step, split-KV decode, the decoder
 * block. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "layer_util.h"
#include "ref/ref.h"
#include "ref/ref_decode.h"

/*
 * aligned_alloc is attn's only allocator (attn__work_acquire); the test
 * executable interposes it to count the library's allocations (as
 * test_hostile does): a step given a workspace must make none.
 */
static volatile int dc_allocs; /* volatile: GCC assumes aligned_alloc leaves globals alone */
void *aligned_alloc(size_t alignment, size_t size) {
    static void *(*next)(size_t, size_t);
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "aligned_alloc");
    __atomic_add_fetch(&dc_allocs, 1, __ATOMIC_RELAXED);
    return next(alignment, size);
}

#define TOL_R(dt) ((dt) == ATTN_F64 ? 1e-12 : 1e-5)
#define TOL_A(dt) ((dt) == ATTN_F64 ? 1e-12 : 1e-5)

/* ---- the cache ------------------------------------------------------------- */

START_TEST(kv_bind_and_check) {
    attn_mha_config c = {.dtype = ATTN_F64, .d_model = 8, .heads = 4, .kv_heads = 2};
    size_t n = attn_kv_cache_size(&c, 3, 10);
    /* k, v (3, 2, 10, 2) doubles = 960 bytes each, len 3 int64 rounded to 64 */
    ck_assert_uint_eq(n, 960 + 960 + 64);
    ck_assert_uint_eq(attn_kv_cache_size(&c, 0, 10), 0);
    ck_assert_uint_eq(attn_kv_cache_size(&c, 3, 0), 0);
    ck_assert_uint_eq(attn_kv_cache_size(&c, INT64_MAX / 2, INT64_MAX / 2), 0);
    attn_mha_config bad = {.dtype = ATTN_F64, .d_model = 5, .heads = 2};
    ck_assert_uint_eq(attn_kv_cache_size(&bad, 3, 10), 0);
    char *slab = slab_new(n + 64);
    attn_kv_cache kc, kc0;
    memset(&kc, 0x5A, sizeof kc);
    kc0 = kc;
    ck_assert_int_eq(attn_kv_cache_bind(&kc, &c, 3, 10, slab, n - 1), ATTN_EWORKSPACE);
    ck_assert_int_eq(attn_kv_cache_bind(&kc, &c, 3, 10, slab + 8, n), ATTN_EINVAL);
    ck_assert_int_eq(attn_kv_cache_bind(&kc, &c, 0, 10, slab, n), ATTN_EINVAL);
    ck_assert_int_eq(attn_kv_cache_bind(&kc, &bad, 3, 10, slab, n), ATTN_EINVAL);
    ck_assert_int_eq(attn_kv_cache_bind(NULL, &c, 3, 10, slab, n), ATTN_EINVAL);
    ck_assert_int_eq(memcmp(&kc, &kc0, sizeof kc), 0);
    memset(slab, 0x7F, n);
    ck_assert_int_eq(attn_kv_cache_bind(&kc, &c, 3, 10, slab, n), ATTN_OK);
    ck_assert_int_eq(kc.k.ndim, 4);
    int64_t want[4] = {3, 2, 10, 2};
    for (int d = 0; d < 4; ++d) {
        ck_assert_int_eq(kc.k.shape[d], want[d]);
        ck_assert_int_eq(kc.v.shape[d], want[d]);
    }
    for (int b = 0; b < 3; ++b)
        ck_assert_int_eq(kc.len[b], 0);
    ck_assert((char *)(kc.len + 3) <= slab + n);
    ck_assert_int_eq(attn_kv_cache_check(&kc, &c), ATTN_OK);
    /* the check: lengths, dtype, shapes, overlap */
    kc.len[1] = 11;
    ck_assert_int_eq(attn_kv_cache_check(&kc, &c), ATTN_ERANGE);
    kc.len[1] = -1;
    ck_assert_int_eq(attn_kv_cache_check(&kc, &c), ATTN_ERANGE);
    kc.len[1] = 10;
    ck_assert_int_eq(attn_kv_cache_check(&kc, &c), ATTN_OK);
    attn_mha_config c32 = c;
    c32.dtype = ATTN_F32;
    ck_assert_int_eq(attn_kv_cache_check(&kc, &c32), ATTN_EDTYPE);
    attn_mha_config c3 = {.dtype = ATTN_F64, .d_model = 8, .heads = 4, .kv_heads = 4};
    ck_assert_int_eq(attn_kv_cache_check(&kc, &c3), ATTN_ESHAPE);
    attn_kv_cache k2 = kc;
    k2.v = kc.k; /* k and v the same memory */
    ck_assert_int_eq(attn_kv_cache_check(&k2, &c), ATTN_EALIAS);
    k2 = kc;
    k2.v.shape[2] = 9; /* k and v disagree on Tmax */
    ck_assert_int_eq(attn_kv_cache_check(&k2, &c), ATTN_ESHAPE);
    k2 = kc;
    k2.len = NULL;
    ck_assert_int_eq(attn_kv_cache_check(&k2, &c), ATTN_EINVAL);
    k2 = kc;
    k2.len = (int64_t *)kc.v.data; /* lengths inside the values */
    ck_assert_int_eq(attn_kv_cache_check(&k2, &c), ATTN_EALIAS);
    free(slab);
}
END_TEST

/* ---- the MHA step against the naive reference ------------------------------- */

enum { MAXB = 3, MAXSTEPS = 8, MAXT = 24 };

typedef struct step_case {
    attn_dtype dt;
    int64_t B, C, H, Hkv, D, Tmax;
    bool bias;
    int rope; /* 0 none, 1 interleaved, 2 half */
    bool keep, strided;
    int64_t split;
    int threads;
    int nsteps;
    int64_t tq[MAXSTEPS];      /* Tq of each step */
    int64_t n[MAXSTEPS][MAXB]; /* n_new per batch (-1: NULL = Tq for all) */
} step_case;

static const step_case step_cases[] = {
    /* prefill 5, then four single-token decodes, then a 2-token chunk */
    {ATTN_F64,
     2,
     8,
     2,
     2,
     0,
     16,
     true,
     0,
     false,
     false,
     0,
     0,
     6,
     {5, 1, 1, 1, 1, 2},
     {{-1}, {-1}, {-1}, {-1}, {-1}, {-1}}},
    /* GQA, RoPE (interleaved), ragged prefill and a finished sequence (n 0) */
    {ATTN_F64,
     3,
     16,
     4,
     2,
     0,
     20,
     false,
     1,
     false,
     false,
     0,
     0,
     5,
     {4, 1, 1, 3, 1},
     {{4, 2, 1}, {1, 1, 0}, {1, 1, 1}, {3, 1, 2}, {1, 0, 1}}},
    /* MQA, D != C/H, RoPE half, tiny splits, a keep mask, two threads */
    {ATTN_F64,
     2,
     6,
     3,
     1,
     4,
     14,
     true,
     2,
     true,
     false,
     3,
     2,
     5,
     {3, 1, 1, 1, 2},
     {{3, 1}, {-1}, {-1}, {-1}, {2, 1}}},
    /* a strided cache (a (B, Tmax, Hkv, D) array viewed as (B, Hkv, Tmax, D)) */
    {ATTN_F64,
     2,
     8,
     2,
     2,
     0,
     12,
     true,
     1,
     false,
     true,
     2,
     1,
     4,
     {6, 1, 1, 1},
     {{6, 4}, {-1}, {-1}, {-1}}},
    /* up to the brim: Tmax exactly filled */
    {ATTN_F64,
     1,
     4,
     2,
     2,
     0,
     6,
     false,
     0,
     false,
     false,
     1,
     0,
     3,
     {4, 1, 1},
     {{-1}, {-1}, {-1}}},
    /* float32 */
    {ATTN_F32,
     2,
     8,
     2,
     1,
     0,
     16,
     true,
     1,
     false,
     false,
     0,
     0,
     4,
     {5, 1, 1, 2},
     {{5, 3}, {-1}, {-1}, {2, 1}}},
    {ATTN_F32,
     1,
     16,
     4,
     4,
     0,
     24,
     false,
     2,
     true,
     false,
     5,
     2,
     3,
     {8, 1, 1},
     {{-1}, {-1}, {-1}}},
};

/* The cache for a case: bound from a slab, or a strided (B, Tmax, Hkv, D) layout. */
static void *make_cache(const step_case *sc, const attn_mha_config *cfg, attn_kv_cache *kc,
                        int64_t *len) {
    int64_t D = sc->D ? sc->D : sc->C / sc->H;
    if (!sc->strided) {
        size_t n = attn_kv_cache_size(cfg, sc->B, sc->Tmax);
        void *slab = slab_new(n);
        ck_assert_int_eq(attn_kv_cache_bind(kc, cfg, sc->B, sc->Tmax, slab, n), ATTN_OK);
        return slab;
    }
    size_t es = attn_dtype_size(sc->dt), one = (size_t)(sc->B * sc->Tmax * sc->Hkv * D) * es;
    char *mem = slab_new(2 * one);
    attn_view k, v;
    int64_t sh[4] = {sc->B, sc->Tmax, sc->Hkv, D};
    ck_assert_int_eq(attn_view_init(&k, sc->dt, mem, 4, sh), ATTN_OK);
    ck_assert_int_eq(attn_view_init(&v, sc->dt, mem + one, 4, sh), ATTN_OK);
    ck_assert_int_eq(attn_view_transpose(&k, 1, 2, &kc->k), ATTN_OK);
    ck_assert_int_eq(attn_view_transpose(&v, 1, 2, &kc->v), ATTN_OK);
    for (int64_t b = 0; b < sc->B; ++b)
        len[b] = 0;
    kc->len = len;
    return mem;
}

static void run_step_case(const step_case *sc) {
    attn_dtype dt = sc->dt;
    uint64_t seed = 1000 + (uint64_t)sc->C * 7 + (uint64_t)sc->B;
    attn_mha_config cfg = {.dtype = dt,
                           .d_model = sc->C,
                           .heads = sc->H,
                           .kv_heads = sc->Hkv,
                           .d_head = sc->D,
                           .bias = sc->bias};
    attn_mha_config rc;
    ck_assert_int_eq(attn_mha_config_resolve(&cfg, &rc), ATTN_OK);
    size_t ps = attn_mha_params_size(&cfg);
    void *pslab = slab_new(ps);
    attn_mha_params p;
    ck_assert_int_eq(attn_mha_params_bind(&p, &cfg, pslab, ps), ATTN_OK);
    fill_views(&p.wq, 8, &seed, 0.5);
    double *w[8];
    const attn_view *pv[8] = {&p.wq, &p.wk, &p.wv, &p.wo, &p.bq, &p.bk, &p.bv, &p.bo};
    for (int i = 0; i < 8; ++i)
        w[i] = (i < 4 || sc->bias) ? lt_doubles(pv[i]) : NULL;
    attn_kv_cache kc;
    int64_t own_len[MAXB];
    void *cmem = make_cache(sc, &cfg, &kc, own_len);
    /* every token fed to batch b so far, (T_b, C) row-major doubles */
    double *hist[MAXB];
    int64_t T[MAXB] = {0};
    for (int64_t b = 0; b < sc->B; ++b)
        hist[b] = calloc((size_t)(MAXT * sc->C), sizeof(double));
    uint8_t keep_hist[MAXB][MAXT][MAXT]; /* keep of each token's own row (absolute keys) */
    memset(keep_hist, 1, sizeof keep_hist);
    for (int s = 0; s < sc->nsteps; ++s) {
        int64_t Tq = sc->tq[s], n[MAXB];
        bool null_n = sc->n[s][0] < 0;
        for (int64_t b = 0; b < sc->B; ++b)
            n[b] = null_n ? Tq : sc->n[s][b];
        lt x = lt_rand(dt, 3, (int64_t[]){sc->B, Tq, sc->C}, &seed, 1.0);
        lt out = lt_new(dt, 3, (int64_t[]){sc->B, Tq, sc->C});
        tu_fill(&out.v, &seed, 100.0); /* garbage: every row must be written */
        uint8_t *keep = NULL;
        attn_view keepv;
        attn_step_opts o = {
            .n_new = null_n ? NULL : n, .split = sc->split, .threads = sc->threads};
        if (sc->rope)
            o.rope = (attn_rope_config){.on = true,
                                        .style = sc->rope == 2 ? ATTN_ROPE_HALF
                                                               : ATTN_ROPE_INTERLEAVED,
                                        .base = sc->rope == 2 ? 500.0 : 0};
        if (sc->keep) {
            keep = malloc((size_t)(sc->B * Tq * sc->Tmax));
            for (int64_t i = 0; i < sc->B * Tq * sc->Tmax; ++i)
                keep[i] = (uint8_t)(tu_next(&seed) % 3 != 0);
            attn_view_init(&keepv, ATTN_U8, keep, 4, (int64_t[]){sc->B, 1, Tq, sc->Tmax});
            o.keep = &keepv;
        }
        int64_t L0[MAXB];
        for (int64_t b = 0; b < sc->B; ++b)
            L0[b] = kc.len[b];
        size_t ws = attn_mha_step_workspace_size(&cfg, &x.v, &kc, &o);
        ck_assert_msg(ws > 0, "case C %lld B %lld step %d: no workspace size", (long long)sc->C,
                      (long long)sc->B, s);
        void *work = malloc(ws);
        attn_status st = attn_mha_step(&cfg, &p, &o, &x.v, &kc, &out.v, work, ws);
        ck_assert_msg(st == ATTN_OK, "step %d: %s", s, attn_strerror(st));
        free(work);
        for (int64_t b = 0; b < sc->B; ++b) {
            ck_assert_int_eq(kc.len[b], L0[b] + n[b]);
            for (int64_t i = 0; i < n[b]; ++i) {
                for (int64_t c = 0; c < sc->C; ++c)
                    hist[b][(T[b] + i) * sc->C + c] = tu_get(&x.v, (int64_t[]){b, i, c});
                for (int64_t j = 0; j < MAXT; ++j)
                    keep_hist[b][T[b] + i][j] =
                        !keep || j >= sc->Tmax || keep[(b * Tq + i) * sc->Tmax + j];
            }
            T[b] += n[b];
            /* the reference: the whole sequence so far, causal, from scratch */
            uint8_t *kr = malloc((size_t)(T[b] * T[b] + 1));
            for (int64_t i = 0; i < T[b]; ++i)
                for (int64_t j = 0; j < T[b]; ++j)
                    kr[i * T[b] + j] = keep_hist[b][i][j];
            double *want = malloc(sizeof(double) * (size_t)(T[b] * sc->C + 1));
            ref_d_attn a = {T[b],
                            T[b],
                            sc->C,
                            sc->C,
                            sc->H,
                            rc.kv_heads,
                            rc.d_head,
                            hist[b],
                            hist[b],
                            w[0],
                            w[1],
                            w[2],
                            w[3],
                            w[4],
                            w[5],
                            w[6],
                            w[7],
                            true,
                            0,
                            T[b],
                            sc->rope != 0,
                            sc->rope == 2,
                            sc->rope == 2 ? 500.0 : 0,
                            sc->keep ? kr : NULL,
                            0};
            ref_d_attention(&a, want);
            attn_view ob, got, wv;
            ck_assert_int_eq(attn_view_select(&out.v, 0, b, &ob), ATTN_OK);
            if (n[b] > 0) {
                ck_assert_int_eq(attn_view_slice(&ob, 0, 0, n[b], 1, &got), ATTN_OK);
                wv = lt_wrap(want + L0[b] * sc->C, 2, (int64_t[]){n[b], sc->C});
                tu_check_close(&got, &wv, TOL_R(dt), TOL_A(dt), "step vs reference");
            }
            for (int64_t i = n[b]; i < Tq; ++i) /* padding rows are 0 */
                for (int64_t c = 0; c < sc->C; ++c)
                    ck_assert(tu_get(&ob, (int64_t[]){i, c}) == 0.0);
            free(want);
            free(kr);
        }
        free(keep);
        lt_free(&x);
        lt_free(&out);
    }
    for (int64_t b = 0; b < sc->B; ++b)
        free(hist[b]);
    for (int i = 0; i < 8; ++i)
        free(w[i]);
    free(pslab);
    free(cmem);
}

START_TEST(step_vs_reference) {
    for (size_t i = 0; i < sizeof step_cases / sizeof *step_cases; ++i)
        run_step_case(&step_cases[i]);
}
END_TEST

/* The cached step gives the recompute: attn_mha_forward over the prefix, causal top-left. */
START_TEST(step_equals_recompute) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        enum { B = 2, C = 8, H = 2, TT = 9 };
        attn_mha_config cfg = {.dtype = dt, .d_model = C, .heads = H, .bias = true};
        size_t ps = attn_mha_params_size(&cfg);
        void *pslab = slab_new(ps);
        attn_mha_params p;
        ck_assert_int_eq(attn_mha_params_bind(&p, &cfg, pslab, ps), ATTN_OK);
        uint64_t seed = 99;
        fill_views(&p.wq, 8, &seed, 0.5);
        size_t cs = attn_kv_cache_size(&cfg, B, TT);
        void *cslab = slab_new(cs);
        attn_kv_cache kc;
        ck_assert_int_eq(attn_kv_cache_bind(&kc, &cfg, B, TT, cslab, cs), ATTN_OK);
        lt x = lt_rand(dt, 3, (int64_t[]){B, TT, C}, &seed, 1.0);
        lt full = lt_new(dt, 3, (int64_t[]){B, TT, C});
        attn_sdpa_opts co = {.causal = ATTN_CAUSAL_TOP_LEFT};
        ck_assert_int_eq(attn_mha_forward(&cfg, &p, &x.v, NULL, &co, &full.v, NULL, NULL, 0),
                         ATTN_OK);
        size_t ws = 0;
        void *work = NULL;
        for (int64_t t = 0; t < TT; ++t) {
            attn_view xt, ft;
            lt out = lt_new(dt, 3, (int64_t[]){B, 1, C});
            ck_assert_int_eq(attn_view_slice(&x.v, 1, t, t + 1, 1, &xt), ATTN_OK);
            ck_assert_int_eq(attn_view_slice(&full.v, 1, t, t + 1, 1, &ft), ATTN_OK);
            size_t need = attn_mha_step_workspace_size(&cfg, &xt, &kc, NULL);
            if (need > ws) {
                free(work);
                work = malloc(need);
                ws = need;
            }
            ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &xt, &kc, &out.v, work, ws),
                             ATTN_OK);
            double *fd = lt_doubles(&ft);
            attn_view fv = lt_wrap(fd, 3, ft.shape);
            tu_check_close(&out.v, &fv, TOL_R(dt), TOL_A(dt), "step vs recompute");
            free(fd);
            lt_free(&out);
        }
        free(work);
        lt_free(&x);
        lt_free(&full);
        free(pslab);
        free(cslab);
    }
}
END_TEST

/* ---- errors: a status, and neither out nor the cache changed ---------------- */

START_TEST(step_errors) {
    enum { B = 2, C = 8, H = 2, TM = 6 };
    attn_mha_config cfg = {.dtype = ATTN_F64, .d_model = C, .heads = H};
    size_t ps = attn_mha_params_size(&cfg);
    void *pslab = slab_new(ps);
    attn_mha_params p;
    ck_assert_int_eq(attn_mha_params_bind(&p, &cfg, pslab, ps), ATTN_OK);
    uint64_t seed = 17;
    fill_views(&p.wq, 4, &seed, 0.5);
    size_t cs = attn_kv_cache_size(&cfg, B, TM);
    char *cslab = slab_new(cs), *csnap = malloc(cs);
    attn_kv_cache kc;
    ck_assert_int_eq(attn_kv_cache_bind(&kc, &cfg, B, TM, cslab, cs), ATTN_OK);
    /* fill 4 of 6 positions */
    lt x4 = lt_rand(ATTN_F64, 3, (int64_t[]){B, 4, C}, &seed, 1.0);
    lt o4 = lt_new(ATTN_F64, 3, (int64_t[]){B, 4, C});
    ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &x4.v, &kc, &o4.v, NULL, 0), ATTN_OK);
    memcpy(csnap, cslab, cs);
    lt x3 = lt_rand(ATTN_F64, 3, (int64_t[]){B, 3, C}, &seed, 1.0);
    lt out = lt_new(ATTN_F64, 3, (int64_t[]){B, 3, C});
    double *od = out.mem;
    for (int i = 0; i < B * 3 * C; ++i)
        od[i] = -4242.0; /* sentinel */
    lt out0 = lt_new(ATTN_F64, 3, (int64_t[]){B, 3, C});
    memcpy(out0.mem, out.mem, sizeof(double) * B * 3 * C);
#define UNTOUCHED()                                                                            \
    do {                                                                                       \
        ck_assert_int_eq(memcmp(out.mem, out0.mem, sizeof(double) * B * 3 * C), 0);            \
        ck_assert_int_eq(memcmp(cslab, csnap, cs), 0);                                         \
    } while (0)
    /* 4 + 3 > 6: the cache would overflow */
    ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &x3.v, &kc, &out.v, NULL, 0), ATTN_ERANGE);
    UNTOUCHED();
    /* only batch 1 would overflow: still nothing written anywhere */
    int64_t n1[B] = {2, 3};
    attn_step_opts on = {.n_new = n1};
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &on, &x3.v, &kc, &out.v, NULL, 0), ATTN_ERANGE);
    UNTOUCHED();
    /* n_new out of range: a per-batch length, ATTN_ERANGE */
    int64_t nb[B] = {4, 1};
    attn_step_opts onb = {.n_new = nb};
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &onb, &x3.v, &kc, &out.v, NULL, 0), ATTN_ERANGE);
    nb[0] = -1;
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &onb, &x3.v, &kc, &out.v, NULL, 0), ATTN_ERANGE);
    UNTOUCHED();
    /* a length past Tmax */
    kc.len[0] = TM + 1;
    memcpy(csnap, cslab, cs);
    lt x1 = lt_rand(ATTN_F64, 3, (int64_t[]){B, 1, C}, &seed, 1.0);
    lt o1 = lt_new(ATTN_F64, 3, (int64_t[]){B, 1, C});
    tu_fill(&o1.v, &seed, 7.0);
    lt o1s = lt_new(ATTN_F64, 3, (int64_t[]){B, 1, C});
    memcpy(o1s.mem, o1.mem, sizeof(double) * B * C);
    ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &x1.v, &kc, &o1.v, NULL, 0), ATTN_ERANGE);
    ck_assert_int_eq(memcmp(o1.mem, o1s.mem, sizeof(double) * B * C), 0);
    ck_assert_int_eq(memcmp(cslab, csnap, cs), 0);
    kc.len[0] = 4;
    memcpy(csnap, cslab, cs);
    /* mismatched shapes: batch, width, dtype, a cache for another config */
    lt xb = lt_rand(ATTN_F64, 3, (int64_t[]){B + 1, 3, C}, &seed, 1.0);
    lt ob = lt_new(ATTN_F64, 3, (int64_t[]){B + 1, 3, C});
    ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &xb.v, &kc, &ob.v, NULL, 0), ATTN_ESHAPE);
    lt xc = lt_rand(ATTN_F64, 3, (int64_t[]){B, 3, C + 1}, &seed, 1.0);
    ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &xc.v, &kc, &out.v, NULL, 0), ATTN_ESHAPE);
    lt xf = lt_rand(ATTN_F32, 3, (int64_t[]){B, 3, C}, &seed, 1.0);
    ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &xf.v, &kc, &out.v, NULL, 0), ATTN_EDTYPE);
    lt x0 = lt_new(ATTN_F64, 3, (int64_t[]){B, 0, C}),
       o0 = lt_new(ATTN_F64, 3, (int64_t[]){B, 0, C});
    ck_assert_int_eq(attn_mha_step(&cfg, &p, NULL, &x0.v, &kc, &o0.v, NULL, 0), ATTN_ESHAPE);
    lt o2 = lt_new(ATTN_F64, 3, (int64_t[]){B, 2, C});
    int64_t one1[B] = {1, 1};
    attn_step_opts on1 = {.n_new = one1};
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &on1, &x3.v, &kc, &o2.v, NULL, 0), ATTN_ESHAPE);
    attn_mha_config gqa = {.dtype = ATTN_F64, .d_model = C, .heads = H, .kv_heads = 1};
    ck_assert_int_eq(attn_mha_step(&gqa, &p, NULL, &x3.v, &kc, &out.v, NULL, 0), ATTN_ESHAPE);
    attn_mha_config cross = {.dtype = ATTN_F64, .d_model = C, .heads = H, .d_kv = 4};
    ck_assert_int_eq(attn_mha_step(&cross, &p, NULL, &x3.v, &kc, &out.v, NULL, 0), ATTN_EINVAL);
    UNTOUCHED();
    /* options */
    attn_step_opts obad = {.scale = NAN};
    int64_t one[B] = {1, 1};
    obad.n_new = one;
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &obad, &x3.v, &kc, &out.v, NULL, 0), ATTN_EINVAL);
    attn_step_opts osplit = {.split = -1, .n_new = one};
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &osplit, &x3.v, &kc, &out.v, NULL, 0),
                     ATTN_EINVAL);
    attn_step_opts orope = {.rope = {.on = true, .style = (attn_rope_style)7}, .n_new = one};
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &orope, &x3.v, &kc, &out.v, NULL, 0), ATTN_EINVAL);
    uint8_t kb[64];
    memset(kb, 1, sizeof kb);
    attn_view keep;
    attn_view_init(&keep, ATTN_U8, kb, 4, (int64_t[]){B, 1, 3, TM - 1}); /* not Tmax wide */
    attn_step_opts okeep = {.keep = &keep, .n_new = one};
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &okeep, &x3.v, &kc, &out.v, NULL, 0), ATTN_ESHAPE);
    UNTOUCHED();
    /* aliasing: out over the cache, out over x */
    attn_view kv_as_out;
    attn_view_init(&kv_as_out, ATTN_F64, kc.k.data, 3, (int64_t[]){B, 3, C});
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &on1, &x3.v, &kc, &kv_as_out, NULL, 0),
                     ATTN_EALIAS);
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &on1, &x3.v, &kc, &x3.v, NULL, 0), ATTN_EALIAS);
    /* the cache over the weights */
    attn_kv_cache kbad = kc;
    attn_view_init(&kbad.k, ATTN_F64, p.wq.data, 4, kc.k.shape);
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &on1, &x3.v, &kbad, &out.v, NULL, 0), ATTN_EALIAS);
    UNTOUCHED();
    /* the workspace query is exact */
    int64_t ok_n[B] = {2, 1};
    attn_step_opts ook = {.n_new = ok_n};
    size_t ws = attn_mha_step_workspace_size(&cfg, &x3.v, &kc, &ook);
    ck_assert_uint_gt(ws, 0);
    void *w = malloc(ws);
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &ook, &x3.v, &kc, &out.v, w, ws - 1),
                     ATTN_EWORKSPACE);
    UNTOUCHED();
    ck_assert_int_eq(attn_mha_step(&cfg, &p, &ook, &x3.v, &kc, &out.v, w, ws), ATTN_OK);
    ck_assert_int_eq(kc.len[0], 6);
    ck_assert_int_eq(kc.len[1], 5);
#undef UNTOUCHED
    free(w);
    lt_free(&x4);
    lt_free(&o4);
    lt_free(&x3);
    lt_free(&out);
    lt_free(&out0);
    lt_free(&x1);
    lt_free(&o1);
    lt_free(&o1s);
    lt_free(&xb);
    lt_free(&ob);
    lt_free(&xc);
    lt_free(&xf);
    lt_free(&x0);
    lt_free(&o0);
    lt_free(&o2);
    free(pslab);
    free(cslab);
    free(csnap);
}
END_TEST

/* ---- the split-KV decode kernel against ref_sdpa ---------------------------- */

START_TEST(decode_vs_reference) {
    struct {
        attn_dtype dt;
        int64_t B, H, Hkv, Tq, D, Tmax;
        int64_t len[3];
        bool causal, strided;
        int64_t split;
        int threads;
    } cases[] = {
        {ATTN_F64, 1, 4, 4, 1, 8, 300, {300}, true, false, 0, 0},
        {ATTN_F64, 2, 6, 2, 1, 16, 700, {700, 333}, true, false, 64, 2},
        {ATTN_F64, 3, 2, 1, 2, 4, 50, {50, 1, 0}, true, true, 7, 2}, /* len 0: empty rows */
        {ATTN_F64, 2, 4, 2, 3, 8, 40, {40, 2}, true, false, 5, 1}, /* row 0 of batch 1 empty */
        {ATTN_F64, 2, 2, 2, 2, 8, 90, {90, 17}, false, false, 0, 0},
        {ATTN_F64, 1, 1, 1, 1, 8, 5000, {4999}, true, false, 0, 2},
        {ATTN_F32, 2, 12, 12, 1, 64, 1200, {1200, 600}, true, false, 0, 0},
        {ATTN_F32, 1, 3, 1, 4, 32, 257, {257}, true, true, 16, 2},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ++ci) {
        __typeof__(cases[0]) *c = &cases[ci];
        uint64_t seed = 300 + ci;
        lt q = lt_rand(c->dt, 4, (int64_t[]){c->B, c->H, c->Tq, c->D}, &seed, 1.5);
        lt kst, vst;
        attn_view k, v;
        if (c->strided) { /* (B, Tmax, Hkv, D) storage */
            kst = lt_rand(c->dt, 4, (int64_t[]){c->B, c->Tmax, c->Hkv, c->D}, &seed, 1.5);
            vst = lt_rand(c->dt, 4, (int64_t[]){c->B, c->Tmax, c->Hkv, c->D}, &seed, 1.0);
            attn_view_transpose(&kst.v, 1, 2, &k);
            attn_view_transpose(&vst.v, 1, 2, &v);
        } else {
            kst = lt_rand(c->dt, 4, (int64_t[]){c->B, c->Hkv, c->Tmax, c->D}, &seed, 1.5);
            vst = lt_rand(c->dt, 4, (int64_t[]){c->B, c->Hkv, c->Tmax, c->D}, &seed, 1.0);
            k = kst.v;
            v = vst.v;
        }
        lt out = lt_new(c->dt, 4, q.v.shape), lse = lt_new(c->dt, 3, q.v.shape);
        tu_fill(&out.v, &seed, 50.0);
        attn_decode_opts o = {.split = c->split, .threads = c->threads};
        size_t ws = attn_sdpa_decode_workspace_size(&q.v, &k, &v, &o);
        void *w = malloc(ws ? ws : 1);
        attn_status st =
            attn_sdpa_decode(&q.v, &k, &v, c->len, c->causal, &o, &out.v, &lse.v, w, ws);
        ck_assert_msg(st == ATTN_OK, "case %zu: %s", ci, attn_strerror(st));
        free(w);
        for (int64_t b = 0; b < c->B; ++b) {
            /* the reference per batch: keys 0..len-1, bottom-right causal */
            attn_view qb, kb, vb, ob, lb, kb2, vb2;
            attn_view_slice(&q.v, 0, b, b + 1, 1, &qb);
            attn_view_slice(&k, 0, b, b + 1, 1, &kb2);
            attn_view_slice(&v, 0, b, b + 1, 1, &vb2);
            attn_view_slice(&kb2, 2, 0, c->len[b], 1, &kb);
            attn_view_slice(&vb2, 2, 0, c->len[b], 1, &vb);
            attn_view_slice(&out.v, 0, b, b + 1, 1, &ob);
            attn_view_slice(&lse.v, 0, b, b + 1, 1, &lb);
            lt wo = lt_new(ATTN_F64, 4, ob.shape), wl = lt_new(ATTN_F64, 3, lb.shape);
            attn_sdpa_opts ro = {.causal =
                                     c->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE};
            ref_sdpa(&qb, &kb, &vb, &ro, &wo.v, NULL, &wl.v);
            tu_check_close(&ob, &wo.v, TOL_R(c->dt), c->dt == ATTN_F64 ? 1e-13 : 1e-6,
                           "decode out");
            tu_check_close(&lb, &wl.v, TOL_R(c->dt), c->dt == ATTN_F64 ? 1e-13 : 1e-5,
                           "decode lse");
            lt_free(&wo);
            lt_free(&wl);
        }
        lt_free(&q);
        lt_free(&kst);
        lt_free(&vst);
        lt_free(&out);
        lt_free(&lse);
    }
}
END_TEST

START_TEST(decode_errors) {
    int64_t len[2] = {5, 9};
    lt q = lt_new(ATTN_F64, 4, (int64_t[]){2, 4, 1, 8});
    lt k = lt_new(ATTN_F64, 4, (int64_t[]){2, 2, 8, 8}),
       v = lt_new(ATTN_F64, 4, (int64_t[]){2, 2, 8, 8});
    lt out = lt_new(ATTN_F64, 4, (int64_t[]){2, 4, 1, 8});
    ck_assert_int_eq(attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, NULL, &out.v, NULL, NULL, 0),
                     ATTN_ERANGE); /* 9 > Tmax 8 */
    len[1] = 8;
    ck_assert_int_eq(
        attn_sdpa_decode(&q.v, &k.v, &v.v, NULL, true, NULL, &out.v, NULL, NULL, 0),
        ATTN_EINVAL);
    ck_assert_int_eq(attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, NULL, &q.v, NULL, NULL, 0),
                     ATTN_EALIAS);
    lt q3 = lt_new(ATTN_F64, 4, (int64_t[]){2, 3, 1, 8}); /* 3 % 2 */
    lt o3 = lt_new(ATTN_F64, 4, (int64_t[]){2, 3, 1, 8});
    ck_assert_int_eq(attn_sdpa_decode(&q3.v, &k.v, &v.v, len, true, NULL, &o3.v, NULL, NULL, 0),
                     ATTN_ESHAPE);
    attn_decode_opts bad = {.split = -1};
    ck_assert_int_eq(attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, &bad, &out.v, NULL, NULL, 0),
                     ATTN_EINVAL);
    len[0] = -1; /* a per-batch length out of range: ATTN_ERANGE, nothing written */
    ck_assert_int_eq(attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, NULL, &out.v, NULL, NULL, 0),
                     ATTN_ERANGE);
    len[0] = 5;
    lt lbad = lt_new(ATTN_F64, 3, (int64_t[]){2, 4, 2});
    ck_assert_int_eq(
        attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, NULL, &out.v, &lbad.v, NULL, 0),
        ATTN_ESHAPE);
    ck_assert_int_eq(attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, NULL, &out.v, NULL, NULL, 0),
                     ATTN_OK);
    lt_free(&q);
    lt_free(&k);
    lt_free(&v);
    lt_free(&out);
    lt_free(&q3);
    lt_free(&o3);
    lt_free(&lbad);
}
END_TEST

/*
 * The masking rule of every path (tmpl/mask.h) in the decode kernel: a -inf bias
 * hides a NaN score (NaN in k) and keep = 0 an inf one, and their values (NaN, -inf
 * in v) never reach a row; the result is the reference's over the same masks with
 * those keys made finite. A NaN score a row can see makes that row NaN (never
 * out 0). One split and several.
 */
START_TEST(dc_masked_nan) {
    enum { H = 2, TQ = 2, D = 4, TM = 8, L = 6 };
    for (int d = 0; d < 2; ++d)
        for (int sp = 0; sp < 2; ++sp) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            uint64_t seed = 77 + (uint64_t)d;
            int64_t len[1] = {L};
            lt q = lt_rand(dt, 4, (int64_t[]){1, H, TQ, D}, &seed, 1.0);
            lt k = lt_rand(dt, 4, (int64_t[]){1, 1, TM, D}, &seed, 1.0);
            lt v = lt_rand(dt, 4, (int64_t[]){1, 1, TM, D}, &seed, 1.0);
            lt bias = lt_rand(dt, 4, (int64_t[]){1, 1, TQ, TM}, &seed, 0.5);
            lt keep = lt_new(ATTN_U8, 4, (int64_t[]){1, 1, 1, TM});
            lt out = lt_new(dt, 4, (int64_t[]){1, H, TQ, D}), lse = lt_new(dt, 3, q.v.shape);
            for (int64_t j = 0; j < TM; ++j)
                ((uint8_t *)keep.mem)[j] = j != 4;
            for (int64_t i = 0; i < TQ; ++i)
                tu_set(&bias.v, (int64_t[]){0, 0, i, 2}, -INFINITY);
            /* the reference: keys 0..L-1, made finite, bottom-right causal, same masks */
            attn_view kr, vr, br, mr;
            attn_view_slice(&k.v, 2, 0, L, 1, &kr);
            attn_view_slice(&v.v, 2, 0, L, 1, &vr);
            attn_view_slice(&bias.v, 3, 0, L, 1, &br);
            attn_view_slice(&keep.v, 3, 0, L, 1, &mr);
            lt wo = lt_new(ATTN_F64, 4, out.v.shape), wl = lt_new(ATTN_F64, 3, q.v.shape);
            attn_sdpa_opts ro = {.causal = ATTN_CAUSAL_BOTTOM_RIGHT, .bias = &br, .keep = &mr};
            ref_sdpa(&q.v, &kr, &vr, &ro, &wo.v, NULL, &wl.v);
            for (int64_t e = 0; e < D; ++e) { /* then the hidden keys' scores and values */
                tu_set(&k.v, (int64_t[]){0, 0, 2, e}, NAN);
                tu_set(&k.v, (int64_t[]){0, 0, 4, e}, INFINITY);
                tu_set(&v.v, (int64_t[]){0, 0, 2, e}, NAN);
                tu_set(&v.v, (int64_t[]){0, 0, 4, e}, -INFINITY);
            }
            attn_decode_opts o = {.bias = &bias.v, .keep = &keep.v, .split = sp ? 2 : 0};
            ck_assert_int_eq(
                attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, &o, &out.v, &lse.v, NULL, 0),
                ATTN_OK);
            tu_check_close(&out.v, &wo.v, TOL_R(dt), dt == ATTN_F64 ? 1e-13 : 1e-6, "out");
            tu_check_close(&lse.v, &wl.v, TOL_R(dt), dt == ATTN_F64 ? 1e-13 : 1e-5, "lse");
            /* a NaN score every row sees (key 1): every row NaN */
            tu_set(&k.v, (int64_t[]){0, 0, 1, 0}, NAN);
            ck_assert_int_eq(
                attn_sdpa_decode(&q.v, &k.v, &v.v, len, true, &o, &out.v, &lse.v, NULL, 0),
                ATTN_OK);
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < TQ; ++i) {
                    ck_assert(isnan(tu_get(&out.v, (int64_t[]){0, h, i, 0})));
                    ck_assert(isnan(tu_get(&lse.v, (int64_t[]){0, h, i})));
                }
            lt_free(&q), lt_free(&k), lt_free(&v), lt_free(&bias), lt_free(&keep);
            lt_free(&out), lt_free(&lse), lt_free(&wo), lt_free(&wl);
        }
}
END_TEST

/* ---- the decoder block against PyTorch -------------------------------------- */

static const char *dec_fixtures[] = {
    "decoder_post_relu_mempad.txt", "decoder_pre_gelu_tgtpad.txt", "decoder_pre_relu_both.txt",
    "decoder_post_gelu.txt",        "decoder_gpt_pre_gelu.txt",    "decoder_gpt_post_relu.txt",
};

typedef struct dec_fx {
    attn_decoder_config cfg;
    attn_decoder_params p;
    lt store[48];
    int nstore;
    int64_t B, T, S, C;
    bool cross;
    int64_t mem_len[4], tgt_len[4];
    bool mem_pad, tgt_pad;
} dec_fx;

/* A fixture tensor in dtype dt, a weight viewed transposed (torch (out, in) -> (in, out)). */
static attn_view dfx_view(dec_fx *d, fx_file *fx, const char *name, attn_dtype dt, bool w) {
    lt *s = &d->store[d->nstore++];
    *s = lt_from_fx(fx_get(fx, name), dt);
    if (!w)
        return s->v;
    attn_view t;
    ck_assert_int_eq(attn_view_transpose(&s->v, 0, 1, &t), ATTN_OK);
    return t;
}

static void dfx_mha(dec_fx *d, fx_file *fx, char pre, attn_dtype dt, attn_mha_params *m) {
    static const char *n[8] = {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"};
    attn_view *v[8] = {&m->wq, &m->wk, &m->wv, &m->wo, &m->bq, &m->bk, &m->bv, &m->bo};
    for (int i = 0; i < 8; ++i) {
        char name[8];
        snprintf(name, sizeof name, "%c%s", pre, n[i]);
        *v[i] = dfx_view(d, fx, name, dt, i < 4);
    }
}

static void dfx_load(dec_fx *d, fx_file *fx, attn_dtype dt) {
    memset(d, 0, sizeof *d);
    d->B = fx_meta(fx, "B", 0);
    d->T = fx_meta(fx, "T", 0);
    d->S = fx_meta(fx, "S", 0);
    d->C = fx_meta(fx, "C", 0);
    d->cross = fx_meta(fx, "cross", 0);
    int64_t C = d->C, H = fx_meta(fx, "H", 0);
    attn_decoder_config c = {
        .self_attn = {.dtype = dt, .d_model = C, .heads = H, .bias = true},
        .ffn = {.dtype = dt,
                .d_model = C,
                .d_ff = fx_meta(fx, "F", 0),
                .act = fx_meta(fx, "relu", 0) ? ATTN_ACT_RELU : ATTN_ACT_GELU_ERF,
                .bias = true},
        .eps = 1e-5,
        .norm = fx_meta(fx, "norm_first", 0) ? ATTN_PRE_NORM : ATTN_POST_NORM,
        .ln_affine = true};
    if (d->cross)
        c.cross = (attn_mha_config){.dtype = dt, .d_model = C, .heads = H, .bias = true};
    d->cfg = c;
    dfx_mha(d, fx, 's', dt, &d->p.self_attn);
    if (d->cross)
        dfx_mha(d, fx, 'c', dt, &d->p.cross);
    d->p.ffn.w1 = dfx_view(d, fx, "w1", dt, true);
    d->p.ffn.b1 = dfx_view(d, fx, "b1", dt, false);
    d->p.ffn.w2 = dfx_view(d, fx, "w2", dt, true);
    d->p.ffn.b2 = dfx_view(d, fx, "b2", dt, false);
    d->p.ln1_g = dfx_view(d, fx, "ln1_g", dt, false);
    d->p.ln1_b = dfx_view(d, fx, "ln1_b", dt, false);
    if (d->cross) {
        d->p.ln2_g = dfx_view(d, fx, "ln2_g", dt, false);
        d->p.ln2_b = dfx_view(d, fx, "ln2_b", dt, false);
    }
    d->p.ln3_g = dfx_view(d, fx, "ln3_g", dt, false);
    d->p.ln3_b = dfx_view(d, fx, "ln3_b", dt, false);
    d->mem_pad = fx_meta(fx, "mem_pad", 0);
    d->tgt_pad = fx_meta(fx, "tgt_pad", 0);
    for (int64_t b = 0; b < d->B; ++b) {
        d->mem_len[b] = d->mem_pad ? (int64_t)fx_get(fx, "mem_len")->data[b] : d->S;
        d->tgt_len[b] = d->tgt_pad ? (int64_t)fx_get(fx, "tgt_len")->data[b] : d->T;
    }
}

static void dfx_free(dec_fx *d) {
    for (int i = 0; i < d->nstore; ++i)
        lt_free(&d->store[i]);
}

START_TEST(decoder_forward_torch) {
    for (size_t fi = 0; fi < sizeof dec_fixtures / sizeof *dec_fixtures; ++fi)
        for (int di = 0; di < 2; ++di) {
            attn_dtype dt = di ? ATTN_F32 : ATTN_F64;
            fx_file *fx = fx_load(dec_fixtures[fi]);
            ck_assert_ptr_nonnull(fx);
            dec_fx d;
            dfx_load(&d, fx, dt);
            lt x = lt_from_fx(fx_get(fx, "x"), dt);
            lt m = d.cross ? lt_from_fx(fx_get(fx, "memory"), dt) : (lt){0};
            lt out = lt_new(dt, 3, x.v.shape);
            attn_sdpa_opts so = {.causal = ATTN_CAUSAL_TOP_LEFT,
                                 .kv_len = d.tgt_pad ? d.tgt_len : NULL};
            attn_sdpa_opts co = {.kv_len = d.mem_pad ? d.mem_len : NULL};
            attn_status st = attn_decoder_forward(&d.cfg, &d.p, &x.v, d.cross ? &m.v : NULL,
                                                  &so, &co, &out.v, NULL, NULL, 0);
            ck_assert_msg(st == ATTN_OK, "%s: %s", dec_fixtures[fi], attn_strerror(st));
            fx_tensor *want = fx_get(fx, "out");
            attn_view wv = lt_wrap(want->data, 3, want->shape);
            tu_check_close(&out.v, &wv, TOL_R(dt), TOL_A(dt), dec_fixtures[fi]);
            lt_free(&x);
            lt_free(&m);
            lt_free(&out);
            dfx_free(&d);
            fx_free(fx);
        }
}
END_TEST

/* g (attn's layout) against torch's gradient t ((out, in) for a weight). */
static void cmp_g(const attn_view *g, fx_file *fx, const char *name, bool w, attn_dtype dt) {
    fx_tensor *t = fx_get(fx, name);
    ck_assert_ptr_nonnull(t);
    attn_view v = lt_wrap(t->data, t->ndim, t->shape), vt;
    if (w)
        attn_view_transpose(&v, 0, 1, &vt);
    tu_check_close(g, w ? &vt : &v, TOL_R(dt), dt == ATTN_F64 ? 1e-12 : 2e-5, name);
}

static void cmp_mha_g(const attn_mha_params *g, fx_file *fx, char pre, attn_dtype dt) {
    static const char *n[8] = {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"};
    const attn_view *v[8] = {&g->wq, &g->wk, &g->wv, &g->wo, &g->bq, &g->bk, &g->bv, &g->bo};
    for (int i = 0; i < 8; ++i) {
        char name[8];
        snprintf(name, sizeof name, "d%c%s", pre, n[i]);
        cmp_g(v[i], fx, name, i < 4, dt);
    }
}

START_TEST(decoder_backward_torch) {
    for (size_t fi = 0; fi < sizeof dec_fixtures / sizeof *dec_fixtures; ++fi)
        for (int di = 0; di < 2; ++di) {
            attn_dtype dt = di ? ATTN_F32 : ATTN_F64;
            fx_file *fx = fx_load(dec_fixtures[fi]);
            ck_assert_ptr_nonnull(fx);
            dec_fx d;
            dfx_load(&d, fx, dt);
            lt x = lt_from_fx(fx_get(fx, "x"), dt);
            lt m = d.cross ? lt_from_fx(fx_get(fx, "memory"), dt) : (lt){0};
            lt dout = lt_from_fx(fx_get(fx, "dout"), dt);
            lt out = lt_new(dt, 3, x.v.shape), dx = lt_new(dt, 3, x.v.shape);
            lt dm = d.cross ? lt_new(dt, 3, m.v.shape) : (lt){0};
            attn_sdpa_opts so = {.causal = ATTN_CAUSAL_TOP_LEFT,
                                 .kv_len = d.tgt_pad ? d.tgt_len : NULL};
            attn_sdpa_opts co = {.kv_len = d.mem_pad ? d.mem_len : NULL};
            size_t ss = attn_decoder_saved_size(&d.cfg, d.B, d.T, d.S);
            ck_assert_uint_gt(ss, 0);
            void *sslab = slab_new(ss);
            attn_decoder_saved sv;
            ck_assert_int_eq(attn_decoder_saved_bind(&sv, &d.cfg, d.B, d.T, d.S, sslab, ss),
                             ATTN_OK);
            ck_assert_int_eq(attn_decoder_forward(&d.cfg, &d.p, &x.v, d.cross ? &m.v : NULL,
                                                  &so, &co, &out.v, &sv, NULL, 0),
                             ATTN_OK);
            size_t gs = attn_decoder_params_size(&d.cfg);
            void *gslab = slab_new(gs);
            attn_decoder_params g;
            ck_assert_int_eq(attn_decoder_params_bind(&g, &d.cfg, gslab, gs), ATTN_OK);
            size_t ws = attn_decoder_backward_workspace_size(&d.cfg, &x.v,
                                                             d.cross ? &m.v : NULL, &so, &co);
            ck_assert_uint_gt(ws, 0);
            void *w = malloc(ws);
            attn_status st =
                attn_decoder_backward(&d.cfg, &d.p, &x.v, d.cross ? &m.v : NULL, &so, &co, &sv,
                                      &dout.v, &dx.v, d.cross ? &dm.v : NULL, &g, w, ws);
            ck_assert_msg(st == ATTN_OK, "%s: %s", dec_fixtures[fi], attn_strerror(st));
            cmp_g(&dx.v, fx, "dx", false, dt);
            if (d.cross)
                cmp_g(&dm.v, fx, "dmemory", false, dt);
            cmp_mha_g(&g.self_attn, fx, 's', dt);
            if (d.cross)
                cmp_mha_g(&g.cross, fx, 'c', dt);
            cmp_g(&g.ffn.w1, fx, "dw1", true, dt);
            cmp_g(&g.ffn.b1, fx, "db1", false, dt);
            cmp_g(&g.ffn.w2, fx, "dw2", true, dt);
            cmp_g(&g.ffn.b2, fx, "db2", false, dt);
            cmp_g(&g.ln1_g, fx, "dln1_g", false, dt);
            cmp_g(&g.ln1_b, fx, "dln1_b", false, dt);
            if (d.cross) {
                cmp_g(&g.ln2_g, fx, "dln2_g", false, dt);
                cmp_g(&g.ln2_b, fx, "dln2_b", false, dt);
            }
            cmp_g(&g.ln3_g, fx, "dln3_g", false, dt);
            cmp_g(&g.ln3_b, fx, "dln3_b", false, dt);
            /* accumulation: a second backward doubles dx */
            ck_assert_int_eq(attn_decoder_backward(&d.cfg, &d.p, &x.v, d.cross ? &m.v : NULL,
                                                   &so, &co, &sv, &dout.v, &dx.v, NULL, NULL, w,
                                                   ws),
                             ATTN_OK);
            fx_tensor *t = fx_get(fx, "dx");
            double *twice = malloc(sizeof(double) * (size_t)t->n);
            for (int64_t i = 0; i < t->n; ++i)
                twice[i] = 2 * t->data[i];
            attn_view tv = lt_wrap(twice, 3, t->shape);
            tu_check_close(&dx.v, &tv, TOL_R(dt), dt == ATTN_F64 ? 1e-12 : 4e-5, "2 dx");
            free(twice);
            free(w);
            free(gslab);
            free(sslab);
            lt_free(&x);
            lt_free(&m);
            lt_free(&dout);
            lt_free(&out);
            lt_free(&dx);
            lt_free(&dm);
            dfx_free(&d);
            fx_free(fx);
        }
}
END_TEST

/* Generation with the cache reproduces PyTorch's whole-sequence rows, token by token. */
START_TEST(decoder_step_torch) {
    for (size_t fi = 0; fi < sizeof dec_fixtures / sizeof *dec_fixtures; ++fi)
        for (int di = 0; di < 2; ++di) {
            attn_dtype dt = di ? ATTN_F32 : ATTN_F64;
            fx_file *fx = fx_load(dec_fixtures[fi]);
            ck_assert_ptr_nonnull(fx);
            dec_fx d;
            dfx_load(&d, fx, dt);
            if (d.tgt_pad) { /* padded target keys are not a prefix: no cached equivalent */
                dfx_free(&d);
                fx_free(fx);
                continue;
            }
            lt x = lt_from_fx(fx_get(fx, "x"), dt);
            lt m = d.cross ? lt_from_fx(fx_get(fx, "memory"), dt) : (lt){0};
            fx_tensor *want = fx_get(fx, "out");
            attn_view wv = lt_wrap(want->data, 3, want->shape);
            size_t cs = attn_kv_cache_size(&d.cfg.self_attn, d.B, d.T);
            void *cslab = slab_new(cs), *mslab = NULL;
            attn_kv_cache kc, mc;
            ck_assert_int_eq(attn_kv_cache_bind(&kc, &d.cfg.self_attn, d.B, d.T, cslab, cs),
                             ATTN_OK);
            if (d.cross) {
                size_t ms = attn_kv_cache_size(&d.cfg.cross, d.B, d.S + 2);
                mslab = slab_new(ms);
                ck_assert_int_eq(attn_kv_cache_bind(&mc, &d.cfg.cross, d.B, d.S + 2, mslab, ms),
                                 ATTN_OK);
                ck_assert_int_eq(attn_decoder_memory(&d.cfg, &d.p, &m.v,
                                                     d.mem_pad ? d.mem_len : NULL, &mc, NULL,
                                                     0),
                                 ATTN_OK);
                for (int64_t b = 0; b < d.B; ++b)
                    ck_assert_int_eq(mc.len[b], d.mem_len[b]);
            }
            /* a 2-token prefill, then one token at a time */
            for (int64_t t0 = 0; t0 < d.T;) {
                int64_t n = t0 == 0 ? 2 : 1;
                attn_view xt, wt;
                lt out = lt_new(dt, 3, (int64_t[]){d.B, n, d.C});
                ck_assert_int_eq(attn_view_slice(&x.v, 1, t0, t0 + n, 1, &xt), ATTN_OK);
                ck_assert_int_eq(attn_view_slice(&wv, 1, t0, t0 + n, 1, &wt), ATTN_OK);
                size_t ws = attn_decoder_step_workspace_size(&d.cfg, &xt, &kc,
                                                             d.cross ? &mc : NULL, NULL);
                ck_assert_uint_gt(ws, 0);
                void *w = malloc(ws);
                attn_status st = attn_decoder_step(&d.cfg, &d.p, NULL, &xt, &kc,
                                                   d.cross ? &mc : NULL, &out.v, w, ws);
                ck_assert_msg(st == ATTN_OK, "%s t %lld: %s", dec_fixtures[fi], (long long)t0,
                              attn_strerror(st));
                tu_check_close(&out.v, &wt, TOL_R(dt), TOL_A(dt), dec_fixtures[fi]);
                free(w);
                lt_free(&out);
                t0 += n;
            }
            for (int64_t b = 0; b < d.B; ++b)
                ck_assert_int_eq(kc.len[b], d.T);
            free(cslab);
            free(mslab);
            lt_free(&x);
            lt_free(&m);
            dfx_free(&d);
            fx_free(fx);
        }
}
END_TEST

/* ---- RoPE, GQA, a memory of another width: forward and steps vs the naive block -- */

START_TEST(decoder_rope_vs_reference) {
    enum { B = 2, T = 7, S = 5, C = 16, CM = 6, H = 4, HKV = 2, HC = 2, F = 20, DH = C / H };
    for (int norm = 0; norm < 2; ++norm) {
        attn_dtype dt = ATTN_F64;
        attn_decoder_config cfg = {
            .self_attn = {.dtype = dt, .d_model = C, .heads = H, .kv_heads = HKV, .bias = true},
            .cross = {.dtype = dt,
                      .d_model = C,
                      .heads = HC,
                      .kv_heads = 1,
                      .d_head = 4,
                      .d_kv = CM,
                      .bias = false},
            .ffn =
                {.dtype = dt, .d_model = C, .d_ff = F, .act = ATTN_ACT_GELU_TANH, .bias = true},
            .norm = (attn_norm_order)norm,
            .ln_affine = true,
            .rope = {.on = true, .style = ATTN_ROPE_HALF}};
        size_t ps = attn_decoder_params_size(&cfg);
        ck_assert_uint_gt(ps, 0);
        void *pslab = slab_new(ps);
        attn_decoder_params p;
        ck_assert_int_eq(attn_decoder_params_bind(&p, &cfg, pslab, ps), ATTN_OK);
        uint64_t seed = 4242 + (uint64_t)norm;
        fill_views(&p.self_attn.wq, 8, &seed, 0.4);
        fill_views(&p.cross.wq, 4, &seed, 0.4);
        fill_views(&p.ffn.w1, 4, &seed, 0.3);
        attn_view *ln[6] = {&p.ln1_g, &p.ln1_b, &p.ln2_g, &p.ln2_b, &p.ln3_g, &p.ln3_b};
        for (int i = 0; i < 6; ++i)
            tu_fill(ln[i], &seed, 0.5);
        ck_assert_int_eq(attn_decoder_param_count(&cfg),
                         6 * C +
                             (2 * C * H * DH + 2 * C * HKV * DH + H * DH + 2 * HKV * DH + C) +
                             (C * HC * 4 + 2 * CM * 4 + HC * 4 * C) + (2 * C * F + F + C));
        lt x = lt_rand(dt, 3, (int64_t[]){B, T, C}, &seed, 1.0);
        lt m = lt_rand(dt, 3, (int64_t[]){B, S, CM}, &seed, 1.0);
        lt out = lt_new(dt, 3, x.v.shape);
        int64_t mem_len[B] = {5, 3};
        attn_sdpa_opts so = {.causal = ATTN_CAUSAL_TOP_LEFT}, co = {.kv_len = mem_len};
        ck_assert_int_eq(
            attn_decoder_forward(&cfg, &p, &x.v, &m.v, &so, &co, &out.v, NULL, NULL, 0),
            ATTN_OK);
        /* the reference, one sequence at a time */
        /* the parameters as row-major doubles, in the reference's order */
        const attn_view *pv[] = {
            &p.ln1_g,        &p.ln2_g,        &p.ln3_g,        &p.ln1_b,        &p.ln2_b,
            &p.ln3_b,        &p.self_attn.wq, &p.self_attn.wk, &p.self_attn.wv, &p.self_attn.wo,
            &p.self_attn.bq, &p.self_attn.bk, &p.self_attn.bv, &p.self_attn.bo, &p.cross.wq,
            &p.cross.wk,     &p.cross.wv,     &p.cross.wo,     &p.ffn.w1,       &p.ffn.b1,
            &p.ffn.w2,       &p.ffn.b2};
        enum { NW = sizeof pv / sizeof *pv };
        double *wt[NW];
        int nw = NW;
        for (int i = 0; i < NW; ++i)
            wt[i] = lt_doubles(pv[i]);
        ref_d_decoder r = {T,
                           S,
                           C,
                           CM,
                           H,
                           HKV,
                           DH,
                           HC,
                           1,
                           4,
                           F,
                           norm == 0,
                           true,
                           0,
                           1e-5,
                           true,
                           true,
                           0,
                           T,
                           0,
                           {wt[0], wt[1], wt[2]},
                           {wt[3], wt[4], wt[5]},
                           {wt[6], wt[7], wt[8], wt[9], wt[10], wt[11], wt[12], wt[13]},
                           {wt[14], wt[15], wt[16], wt[17], NULL, NULL, NULL, NULL},
                           wt[18],
                           wt[19],
                           wt[20],
                           wt[21]};
        double *xd = lt_doubles(&x.v), *md = lt_doubles(&m.v);
        double *want = malloc(sizeof(double) * B * T * C);
        for (int b = 0; b < B; ++b) {
            r.mem_len = mem_len[b];
            ref_d_decoder_forward(&r, xd + b * T * C, md + b * S * CM, want + b * T * C);
        }
        attn_view wv = lt_wrap(want, 3, x.v.shape);
        tu_check_close(&out.v, &wv, 1e-12, 1e-12, "rope decoder forward vs reference");
        /* generation: one token at a time, the same rows */
        size_t cs = attn_kv_cache_size(&cfg.self_attn, B, T);
        size_t ms = attn_kv_cache_size(&cfg.cross, B, S);
        void *cslab = slab_new(cs), *mslab = slab_new(ms);
        attn_kv_cache kc, mc;
        ck_assert_int_eq(attn_kv_cache_bind(&kc, &cfg.self_attn, B, T, cslab, cs), ATTN_OK);
        ck_assert_int_eq(attn_kv_cache_bind(&mc, &cfg.cross, B, S, mslab, ms), ATTN_OK);
        ck_assert_int_eq(attn_decoder_memory(&cfg, &p, &m.v, mem_len, &mc, NULL, 0), ATTN_OK);
        for (int64_t t = 0; t < T; ++t) {
            attn_view xt, wtv;
            lt o1 = lt_new(dt, 3, (int64_t[]){B, 1, C});
            attn_view_slice(&x.v, 1, t, t + 1, 1, &xt);
            attn_view_slice(&wv, 1, t, t + 1, 1, &wtv);
            ck_assert_int_eq(attn_decoder_step(&cfg, &p, NULL, &xt, &kc, &mc, &o1.v, NULL, 0),
                             ATTN_OK);
            tu_check_close(&o1.v, &wtv, 1e-12, 1e-12, "rope decoder step vs reference");
            lt_free(&o1);
        }
        /* the cache is full now: one more token is ATTN_ERANGE, nothing written */
        lt o1 = lt_new(dt, 3, (int64_t[]){B, 1, C});
        tu_fill(&o1.v, &seed, 3.0);
        lt o1s = lt_new(dt, 3, (int64_t[]){B, 1, C});
        memcpy(o1s.mem, o1.mem, sizeof(double) * B * C);
        void *snap = malloc(cs);
        memcpy(snap, cslab, cs);
        attn_view xt;
        attn_view_slice(&x.v, 1, 0, 1, 1, &xt);
        ck_assert_int_eq(attn_decoder_step(&cfg, &p, NULL, &xt, &kc, &mc, &o1.v, NULL, 0),
                         ATTN_ERANGE);
        ck_assert_int_eq(memcmp(o1.mem, o1s.mem, sizeof(double) * B * C), 0);
        ck_assert_int_eq(memcmp(snap, cslab, cs), 0);
        /* cross-attention without its memory, rope given twice */
        kc.len[0] = kc.len[1] = 0;
        memcpy(snap, cslab, cs);
        ck_assert_int_eq(attn_decoder_step(&cfg, &p, NULL, &xt, &kc, NULL, &o1.v, NULL, 0),
                         ATTN_EINVAL);
        attn_step_opts orope = {.rope = {.on = true}};
        ck_assert_int_eq(attn_decoder_step(&cfg, &p, &orope, &xt, &kc, &mc, &o1.v, NULL, 0),
                         ATTN_EINVAL);
        ck_assert_int_eq(memcmp(o1.mem, o1s.mem, sizeof(double) * B * C), 0);
        ck_assert_int_eq(memcmp(snap, cslab, cs), 0);
        /* a memory longer than its cache */
        lt mlong = lt_rand(dt, 3, (int64_t[]){B, S + 1, CM}, &seed, 1.0);
        ck_assert_int_eq(attn_decoder_memory(&cfg, &p, &mlong.v, NULL, &mc, NULL, 0),
                         ATTN_ERANGE);
        ck_assert_int_eq(mc.len[1], 3);
        lt_free(&mlong);
        free(snap);
        for (int i = 0; i < nw; ++i)
            free(wt[i]);
        free(xd);
        free(md);
        free(want);
        free(pslab);
        free(cslab);
        free(mslab);
        lt_free(&x);
        lt_free(&m);
        lt_free(&out);
        lt_free(&o1);
        lt_free(&o1s);
    }
}
END_TEST

START_TEST(decoder_config_and_errors) {
    attn_decoder_config c = {.self_attn = {.dtype = ATTN_F64, .d_model = 8, .heads = 2},
                             .ffn = {.dtype = ATTN_F64, .d_model = 8, .d_ff = 16}},
                        r;
    ck_assert_int_eq(attn_decoder_config_resolve(&c, &r), ATTN_OK);
    ck_assert(r.eps == 1e-5);
    ck_assert_int_eq(r.cross.heads, 0);
    /* decoder-only: 4 C^2 + 2 C F (no bias, no affine LayerNorm) */
    ck_assert_int_eq(attn_decoder_param_count(&c), 4 * 64 + 2 * 8 * 16);
    attn_decoder_config e = c;
    e.ffn.d_model = 6;
    ck_assert_int_eq(attn_decoder_config_resolve(&e, &r), ATTN_EINVAL);
    e = c;
    e.ffn.dtype = ATTN_F32;
    ck_assert_int_eq(attn_decoder_config_resolve(&e, &r), ATTN_EINVAL);
    e = c;
    e.self_attn.d_kv = 4;
    ck_assert_int_eq(attn_decoder_config_resolve(&e, &r), ATTN_EINVAL);
    e = c;
    e.cross = (attn_mha_config){.dtype = ATTN_F64, .d_model = 6, .heads = 2};
    ck_assert_int_eq(attn_decoder_config_resolve(&e, &r), ATTN_EINVAL);
    e = c;
    e.eps = -1;
    ck_assert_int_eq(attn_decoder_config_resolve(&e, &r), ATTN_EINVAL);
    e = c;
    e.rope = (attn_rope_config){.on = true, .base = -2};
    ck_assert_int_eq(attn_decoder_config_resolve(&e, &r), ATTN_EINVAL);
    e = c;
    e.self_attn.d_head = 3; /* RoPE needs an even head width */
    e.rope.on = true;
    ck_assert_int_eq(attn_decoder_config_resolve(&e, &r), ATTN_EINVAL);
    ck_assert_int_eq(attn_decoder_params_size(&e), 0);
    ck_assert_int_eq(attn_decoder_param_count(&e), -1);
    /* the forward refuses before writing */
    size_t ps = attn_decoder_params_size(&c);
    void *pslab = slab_new(ps);
    attn_decoder_params p;
    ck_assert_int_eq(attn_decoder_params_bind(&p, &c, pslab, ps), ATTN_OK);
    uint64_t seed = 8;
    lt x = lt_rand(ATTN_F64, 3, (int64_t[]){2, 3, 8}, &seed, 1.0);
    lt m = lt_rand(ATTN_F64, 3, (int64_t[]){2, 3, 8}, &seed, 1.0);
    lt out = lt_new(ATTN_F64, 3, (int64_t[]){2, 3, 8}),
       out0 = lt_new(ATTN_F64, 3, (int64_t[]){2, 3, 8});
    tu_fill(&out.v, &seed, 9.0);
    memcpy(out0.mem, out.mem, sizeof(double) * 48);
    ck_assert_int_eq(
        attn_decoder_forward(&c, &p, &x.v, &m.v, NULL, NULL, &out.v, NULL, NULL, 0),
        ATTN_EINVAL); /* a memory without cross-attention */
    ck_assert_int_eq(attn_decoder_forward(&c, &p, &x.v, NULL, NULL, NULL, &x.v, NULL, NULL, 0),
                     ATTN_EALIAS);
    attn_decoder_params p2 = p;
    p2.ffn.w1.shape[1] = 15;
    ck_assert_int_eq(
        attn_decoder_forward(&c, &p2, &x.v, NULL, NULL, NULL, &out.v, NULL, NULL, 0),
        ATTN_ESHAPE);
    int64_t kl[2] = {3, 4};
    attn_sdpa_opts bad = {.kv_len = kl};
    ck_assert_int_eq(
        attn_decoder_forward(&c, &p, &x.v, NULL, &bad, NULL, &out.v, NULL, NULL, 0),
        ATTN_ERANGE); /* kv_len out of range: ATTN_ERANGE, as every per-batch length */
    ck_assert_int_eq(memcmp(out.mem, out0.mem, sizeof(double) * 48), 0);
    ck_assert_int_eq(attn_decoder_backward(&c, &p, &x.v, NULL, NULL, NULL, NULL, &out.v, NULL,
                                           NULL, NULL, NULL, 0),
                     ATTN_EINVAL); /* no saved */
    ck_assert_int_eq(
        attn_decoder_forward(&c, &p, &x.v, NULL, NULL, NULL, &out.v, NULL, NULL, 0), ATTN_OK);
    free(pslab);
    lt_free(&x);
    lt_free(&m);
    lt_free(&out);
    lt_free(&out0);
}
END_TEST

/* ---- no allocation per step with a workspace; exact workspace queries ----------- */

START_TEST(no_alloc_with_workspace) {
    int a0 = dc_allocs;
    void *volatile probe = aligned_alloc(64, 64); /* volatile: GCC elides a plain pair at -O2 */
    free(probe);
    if (dc_allocs == a0)
        return; /* valgrind replaces the allocator: the plain and ASan runs check this */
    enum { B = 2, T = 6, S = 4, C = 8, H = 2 };
    attn_decoder_config cfg = {
        .self_attn = {.dtype = ATTN_F64, .d_model = C, .heads = H, .bias = true},
        .cross = {.dtype = ATTN_F64, .d_model = C, .heads = H, .bias = true},
        .ffn = {.dtype = ATTN_F64, .d_model = C, .d_ff = 16, .bias = true},
        .ln_affine = true,
        .rope = {.on = true}};
    size_t ps = attn_decoder_params_size(&cfg);
    void *pslab = slab_new(ps);
    attn_decoder_params p;
    ck_assert_int_eq(attn_decoder_params_bind(&p, &cfg, pslab, ps), ATTN_OK);
    uint64_t seed = 31;
    fill_views(&p.self_attn.wq, 8, &seed, 0.4);
    fill_views(&p.cross.wq, 8, &seed, 0.4);
    fill_views(&p.ffn.w1, 4, &seed, 0.4);
    size_t cs = attn_kv_cache_size(&cfg.self_attn, B, T),
           ms = attn_kv_cache_size(&cfg.cross, B, S);
    void *cslab = slab_new(cs), *mslab = slab_new(ms);
    attn_kv_cache kc, mc;
    ck_assert_int_eq(attn_kv_cache_bind(&kc, &cfg.self_attn, B, T, cslab, cs), ATTN_OK);
    ck_assert_int_eq(attn_kv_cache_bind(&mc, &cfg.cross, B, S, mslab, ms), ATTN_OK);
    lt m = lt_rand(ATTN_F64, 3, (int64_t[]){B, S, C}, &seed, 1.0);
    lt x = lt_rand(ATTN_F64, 3, (int64_t[]){B, 2, C}, &seed, 1.0);
    lt out = lt_new(ATTN_F64, 3, (int64_t[]){B, 2, C});
    /* the memory projection, then steps: each query is exact (one byte short refuses) */
    size_t mw = attn_decoder_memory_workspace_size(&cfg, &m.v, &mc);
    ck_assert_uint_gt(mw, 0);
    void *w = malloc(mw);
    ck_assert_int_eq(attn_decoder_memory(&cfg, &p, &m.v, NULL, &mc, w, mw - 1),
                     ATTN_EWORKSPACE);
    a0 = dc_allocs;
    ck_assert_int_eq(attn_decoder_memory(&cfg, &p, &m.v, NULL, &mc, w, mw), ATTN_OK);
    ck_assert_int_eq(dc_allocs, a0);
    free(w);
    size_t sw = attn_decoder_step_workspace_size(&cfg, &x.v, &kc, &mc, NULL);
    ck_assert_uint_gt(sw, 0);
    w = malloc(sw);
    ck_assert_int_eq(attn_decoder_step(&cfg, &p, NULL, &x.v, &kc, &mc, &out.v, w, sw - 1),
                     ATTN_EWORKSPACE);
    ck_assert_int_eq(kc.len[0], 0);
    a0 = dc_allocs;
    for (int t = 0; t < 3; ++t) /* three 2-token steps fill the cache */
        ck_assert_int_eq(attn_decoder_step(&cfg, &p, NULL, &x.v, &kc, &mc, &out.v, w, sw),
                         ATTN_OK);
    ck_assert_int_eq(dc_allocs, a0);
    ck_assert_int_eq(kc.len[1], T);
    /* without a workspace the call allocates (so the hook is live) */
    kc.len[0] = kc.len[1] = 0;
    a0 = dc_allocs;
    ck_assert_int_eq(attn_decoder_step(&cfg, &p, NULL, &x.v, &kc, &mc, &out.v, NULL, 0),
                     ATTN_OK);
    ck_assert_int_gt(dc_allocs, a0);
    free(w);
    /* the MHA step and the decode kernel likewise */
    kc.len[0] = kc.len[1] = 0;
    sw = attn_mha_step_workspace_size(&cfg.self_attn, &x.v, &kc, NULL);
    w = malloc(sw);
    a0 = dc_allocs;
    ck_assert_int_eq(
        attn_mha_step(&cfg.self_attn, &p.self_attn, NULL, &x.v, &kc, &out.v, w, sw), ATTN_OK);
    ck_assert_int_eq(dc_allocs, a0);
    free(w);
    attn_view q;
    lt qs = lt_rand(ATTN_F64, 4, (int64_t[]){B, H, 1, C / H}, &seed, 1.0);
    lt os = lt_new(ATTN_F64, 4, (int64_t[]){B, H, 1, C / H});
    q = qs.v;
    size_t dw = attn_sdpa_decode_workspace_size(&q, &kc.k, &kc.v, NULL);
    w = malloc(dw);
    ck_assert_int_eq(
        attn_sdpa_decode(&q, &kc.k, &kc.v, kc.len, true, NULL, &os.v, NULL, w, dw - 1),
        ATTN_EWORKSPACE);
    a0 = dc_allocs;
    ck_assert_int_eq(attn_sdpa_decode(&q, &kc.k, &kc.v, kc.len, true, NULL, &os.v, NULL, w, dw),
                     ATTN_OK);
    ck_assert_int_eq(dc_allocs, a0);
    /* a workspace that overlaps an operand is refused */
    ck_assert_int_eq(
        attn_sdpa_decode(&q, &kc.k, &kc.v, kc.len, true, NULL, &os.v, NULL, kc.k.data, dw),
        ATTN_EALIAS);
    free(w);
    /* forward and backward: exact queries */
    lt xf = lt_rand(ATTN_F64, 3, (int64_t[]){B, T, C}, &seed, 1.0);
    lt of = lt_new(ATTN_F64, 3, (int64_t[]){B, T, C}),
       dof = lt_rand(ATTN_F64, 3, (int64_t[]){B, T, C}, &seed, 1.0);
    lt dxf = lt_new(ATTN_F64, 3, (int64_t[]){B, T, C});
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};
    size_t fw = attn_decoder_workspace_size(&cfg, &xf.v, &m.v, &causal, NULL);
    ck_assert_uint_gt(fw, 0);
    size_t ss = attn_decoder_saved_size(&cfg, B, T, S);
    void *sslab = slab_new(ss);
    attn_decoder_saved sv;
    ck_assert_int_eq(attn_decoder_saved_bind(&sv, &cfg, B, T, S, sslab, ss), ATTN_OK);
    w = malloc(fw);
    /* the query takes no saved views: exact without them, enough with them */
    ck_assert_int_eq(
        attn_decoder_forward(&cfg, &p, &xf.v, &m.v, &causal, NULL, &of.v, NULL, w, fw - 1),
        ATTN_EWORKSPACE);
    ck_assert_int_eq(
        attn_decoder_forward(&cfg, &p, &xf.v, &m.v, &causal, NULL, &of.v, NULL, w, fw), ATTN_OK);
    ck_assert_int_eq(
        attn_decoder_forward(&cfg, &p, &xf.v, &m.v, &causal, NULL, &of.v, &sv, w, fw), ATTN_OK);
    free(w);
    size_t bw = attn_decoder_backward_workspace_size(&cfg, &xf.v, &m.v, &causal, NULL);
    ck_assert_uint_gt(bw, 0);
    w = malloc(bw);
    /* the query counts every gradient: exact with all of them, enough with fewer */
    void *gslab = slab_new(ps);
    attn_decoder_params g;
    ck_assert_int_eq(attn_decoder_params_bind(&g, &cfg, gslab, ps), ATTN_OK);
    lt dm = lt_new(ATTN_F64, 3, (int64_t[]){B, S, C});
    ck_assert_int_eq(attn_decoder_backward(&cfg, &p, &xf.v, &m.v, &causal, NULL, &sv, &dof.v,
                                           &dxf.v, &dm.v, &g, w, bw - 1),
                     ATTN_EWORKSPACE);
    ck_assert_int_eq(attn_decoder_backward(&cfg, &p, &xf.v, &m.v, &causal, NULL, &sv, &dof.v,
                                           &dxf.v, &dm.v, &g, w, bw),
                     ATTN_OK);
    free(gslab);
    lt_free(&dm);
    a0 = dc_allocs;
    ck_assert_int_eq(attn_decoder_backward(&cfg, &p, &xf.v, &m.v, &causal, NULL, &sv, &dof.v,
                                           &dxf.v, NULL, NULL, w, bw),
                     ATTN_OK);
    ck_assert_int_eq(dc_allocs, a0);
    free(w);
    free(pslab);
    free(cslab);
    free(mslab);
    free(sslab);
    lt_free(&m);
    lt_free(&x);
    lt_free(&out);
    lt_free(&qs);
    lt_free(&os);
    lt_free(&xf);
    lt_free(&of);
    lt_free(&dof);
    lt_free(&dxf);
}
END_TEST

/* ---- the backward through RoPE, against central differences ---------------------- */

/* L = sum(out * dout) of the whole-sequence forward. */
static double dec_loss(const attn_decoder_config *c, const attn_decoder_params *p,
                       const attn_view *x, const attn_view *dout) {
    lt out = lt_new(ATTN_F64, 3, x->shape);
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};
    ck_assert_int_eq(attn_decoder_forward(c, p, x, NULL, &causal, NULL, &out.v, NULL, NULL, 0),
                     ATTN_OK);
    double s = 0, *o = out.mem;
    for (int64_t i = 0; i < tu_numel(x); ++i)
        s += o[i] * ((double *)dout->data)[i];
    lt_free(&out);
    return s;
}

START_TEST(decoder_backward_rope_fd) {
    enum { B = 1, T = 5, C = 8, H = 2 };
    for (int norm = 0; norm < 2; ++norm) {
        attn_decoder_config cfg = {
            .self_attn =
                {.dtype = ATTN_F64, .d_model = C, .heads = H, .kv_heads = 1, .bias = true},
            .ffn = {.dtype = ATTN_F64,
                    .d_model = C,
                    .d_ff = 12,
                    .act = ATTN_ACT_GELU_ERF,
                    .bias = true},
            .norm = (attn_norm_order)norm,
            .ln_affine = true,
            .rope = {.on = true, .style = ATTN_ROPE_INTERLEAVED, .base = 100}};
        size_t ps = attn_decoder_params_size(&cfg);
        void *pslab = slab_new(ps), *gslab = slab_new(ps);
        attn_decoder_params p, g;
        ck_assert_int_eq(attn_decoder_params_bind(&p, &cfg, pslab, ps), ATTN_OK);
        ck_assert_int_eq(attn_decoder_params_bind(&g, &cfg, gslab, ps), ATTN_OK);
        uint64_t seed = 77 + (uint64_t)norm;
        fill_views(&p.self_attn.wq, 8, &seed, 0.6);
        fill_views(&p.ffn.w1, 4, &seed, 0.5);
        tu_fill(&p.ln1_g, &seed, 1.0);
        tu_fill(&p.ln3_b, &seed, 0.5);
        lt x = lt_rand(ATTN_F64, 3, (int64_t[]){B, T, C}, &seed, 1.0);
        lt dout = lt_rand(ATTN_F64, 3, (int64_t[]){B, T, C}, &seed, 1.0);
        lt out = lt_new(ATTN_F64, 3, x.v.shape), dx = lt_new(ATTN_F64, 3, x.v.shape);
        size_t ss = attn_decoder_saved_size(&cfg, B, T, 0);
        void *sslab = slab_new(ss);
        attn_decoder_saved sv;
        ck_assert_int_eq(attn_decoder_saved_bind(&sv, &cfg, B, T, 0, sslab, ss), ATTN_OK);
        attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};
        ck_assert_int_eq(
            attn_decoder_forward(&cfg, &p, &x.v, NULL, &causal, NULL, &out.v, &sv, NULL, 0),
            ATTN_OK);
        ck_assert_int_eq(attn_decoder_backward(&cfg, &p, &x.v, NULL, &causal, NULL, &sv,
                                               &dout.v, &dx.v, NULL, &g, NULL, 0),
                         ATTN_OK);
        /* every element of x, wq, wk (the rotated projections) and ln1_g */
        struct {
            attn_view *v, *gv;
            const char *name;
        } ts[] = {{&x.v, &dx.v, "dx"},
                  {&p.self_attn.wq, &g.self_attn.wq, "dwq"},
                  {&p.self_attn.wk, &g.self_attn.wk, "dwk"},
                  {&p.ln1_g, &g.ln1_g, "dln1_g"}};
        for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ++ti) {
            int64_t idx[4] = {0};
            do {
                double *e = tu_at(ts[ti].v, idx), keep = *e, h = 1e-5;
                *e = keep + h;
                double lp = dec_loss(&cfg, &p, &x.v, &dout.v);
                *e = keep - h;
                double lm = dec_loss(&cfg, &p, &x.v, &dout.v);
                *e = keep;
                double fd = (lp - lm) / (2 * h), an = tu_get(ts[ti].gv, idx);
                ck_assert_msg(fabs(fd - an) <= 1e-7 * (1 + fabs(fd)),
                              "%s[%lld,%lld,%lld] norm %d: backward %.12g, differences %.12g",
                              ts[ti].name, (long long)idx[0], (long long)idx[1],
                              (long long)idx[2], norm, an, fd);
            } while (tu_inc(idx, ts[ti].v->shape, ts[ti].v->ndim));
        }
        free(pslab);
        free(gslab);
        free(sslab);
        lt_free(&x);
        lt_free(&dout);
        lt_free(&out);
        lt_free(&dx);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("decode");
    struct {
        const char *tc;
        const TTest *t;
    } tests[] = {
        {"attn_kv_cache", kv_bind_and_check},
        {"attn_mha_step", step_vs_reference},
        {"attn_mha_step", step_equals_recompute},
        {"attn_mha_step", step_errors},
        {"attn_sdpa_decode", decode_vs_reference},
        {"attn_sdpa_decode", decode_errors},
        {"attn_sdpa_decode", dc_masked_nan},
        {"attn_decoder_forward", decoder_forward_torch},
        {"attn_decoder_forward", decoder_config_and_errors},
        {"attn_decoder_backward", decoder_backward_torch},
        {"attn_decoder_backward", decoder_backward_rope_fd},
        {"attn_decoder_step", decoder_step_torch},
        {"attn_decoder_step", decoder_rope_vs_reference},
        {"workspace", no_alloc_with_workspace},
    };
    TCase *tc = NULL;
    const char *last = "";
    for (size_t i = 0; i < sizeof tests / sizeof *tests; ++i) {
        if (strcmp(tests[i].tc, last)) {
            tc = tcase_create(tests[i].tc);
            tcase_set_timeout(tc, 120);
            suite_add_tcase(s, tc);
            last = tests[i].tc;
        }
        _tcase_add_test(tc, tests[i].t, 0, 0, 0, 1);
    }
    return tu_run(s);
}
