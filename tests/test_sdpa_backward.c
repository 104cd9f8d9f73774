/* SPDX-License-Identifier: MIT */
/* Check suite for attn_sdpa_backward: reference formulas, finite differences, PyTorch autograd. */
#include "fixture.h"
#include "sdpa_util.h"

static const sd_case cases[] = {
    /* B  H Hkv Tq  Tk  D  Dv  causal                     keep bias kvl scale */
    {1, 1, 1, 5, 7, 3, 4, ATTN_CAUSAL_NONE, 0, 0, 0, 0},
    {2, 2, 2, 9, 9, 4, 4, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0},
    {1, 4, 2, 6, 11, 5, 3, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0}, /* GQA, KV cache */
    {3, 3, 1, 11, 6, 4, 5, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0}, /* MQA, empty rows */
    {2, 2, 1, 8, 13, 4, 4, ATTN_CAUSAL_NONE, 1, 1, 0, 0.4},
    {3, 2, 2, 7, 10, 3, 2, ATTN_CAUSAL_TOP_LEFT, 2, 3, 1, 0},
    {2, 4, 2, 10, 10, 4, 4, ATTN_CAUSAL_BOTTOM_RIGHT, 4, 2, 1, 0},
    {1, 2, 1, 19, 23, 8, 8, ATTN_CAUSAL_TOP_LEFT, 3, 0, 1, 0},
};
#define NCASES (sizeof cases / sizeof *cases)

typedef struct sb_run {
    attn_algo algo;
    int64_t bq, bk;
    int threads;
    sd_lay lin, lgrad;
} sb_run;

/* A forward + backward problem with every tensor it needs. */
typedef struct sb_prob {
    sd_t q, k, v, out, lse, dout, dq, dk, dv, g0q, g0k, g0v;
    sd_masks m;
    attn_sdpa_opts o;
} sb_prob;

static void sb_make(sb_prob *P, attn_dtype dt, const sd_case *c, sd_lay lin, sd_lay lgrad,
                    uint64_t seed) {
    int64_t qs[4] = {c->B, c->H, c->Tq, c->D}, ks[4] = {c->B, c->Hkv, c->Tk, c->D};
    int64_t vs[4] = {c->B, c->Hkv, c->Tk, c->Dv}, os[4] = {c->B, c->H, c->Tq, c->Dv};
    memset(P, 0, sizeof *P);
    P->q = sd_make(dt, qs, lin, &seed, 1.0);
    P->k = sd_make(dt, ks, lin, &seed, 1.0);
    P->v = sd_make(dt, vs, lin, &seed, 1.0);
    P->dout = sd_make(dt, os, lin, &seed, 1.0);
    P->dq = sd_make(dt, qs, lgrad, &seed, 1.0); /* gradients start non-zero: they accumulate */
    P->dk = sd_make(dt, ks, lgrad, &seed, 1.0);
    P->dv = sd_make(dt, vs, lgrad, &seed, 1.0);
    P->out = sd_zeros(dt, 4, os);
    P->lse = sd_zeros(dt, 3, os);
    sd_masks_make(c, dt, &seed, &P->m, &P->o);
    /* the forward fills out and lse (tested on its own in test_sdpa) */
    ck_assert_int_eq(attn_sdpa(&P->q.v, &P->k.v, &P->v.v, &P->o, &P->out.v, NULL, 0), ATTN_OK);
    attn_sdpa_opts o = P->o;
    o.lse = &P->lse.v;
    ck_assert_int_eq(attn_sdpa(&P->q.v, &P->k.v, &P->v.v, &o, &P->out.v, NULL, 0), ATTN_OK);
    /* the starting gradients, as doubles, for want = g0 + reference */
    P->g0q = sd_zeros(ATTN_F64, 4, qs);
    P->g0k = sd_zeros(ATTN_F64, 4, ks);
    P->g0v = sd_zeros(ATTN_F64, 4, vs);
    sd_t *src[3] = {&P->dq, &P->dk, &P->dv}, *dst[3] = {&P->g0q, &P->g0k, &P->g0v};
    for (int i = 0; i < 3; ++i) {
        int64_t idx[4] = {0};
        if (tu_numel(&src[i]->v))
            do tu_set(&dst[i]->v, idx, tu_get(&src[i]->v, idx));
            while (tu_inc(idx, src[i]->v.shape, 4));
    }
}

static void sb_free(sb_prob *P) {
    sd_t *all[] = {&P->q, &P->k, &P->v, &P->out, &P->lse, &P->dout, &P->dq, &P->dk, &P->dv,
                   &P->g0q, &P->g0k, &P->g0v};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i) sd_free(all[i]);
    sd_masks_free(&P->m);
}

static attn_status sb_call(sb_prob *P, const attn_sdpa_opts *o, bool dq, bool dk, bool dv) {
    size_t ws = attn_sdpa_backward_workspace_size(&P->q.v, &P->k.v, &P->v.v, o);
    void *work = ws ? malloc(ws) : NULL;
    attn_status st = attn_sdpa_backward(&P->q.v, &P->k.v, &P->v.v, o, &P->out.v, &P->lse.v,
                                        &P->dout.v, dq ? &P->dq.v : NULL, dk ? &P->dk.v : NULL,
                                        dv ? &P->dv.v : NULL, work, ws);
    free(work);
    return st;
}

/* want := g0 + ref for each gradient, compared with what the library accumulated. */
static void sb_check(sb_prob *P, attn_dtype dt, const char *what, bool dq, bool dk, bool dv) {
    sd_t rq = sd_zeros(ATTN_F64, 4, P->q.v.shape), rk = sd_zeros(ATTN_F64, 4, P->k.v.shape);
    sd_t rv = sd_zeros(ATTN_F64, 4, P->v.v.shape);
    ref_sdpa_backward(&P->q.v, &P->k.v, &P->v.v, &P->o, &P->dout.v, &rq.v, &rk.v, &rv.v);
    sd_t *ref[3] = {&rq, &rk, &rv}, *g0[3] = {&P->g0q, &P->g0k, &P->g0v};
    sd_t *got[3] = {&P->dq, &P->dk, &P->dv};
    bool on[3] = {dq, dk, dv};
    const char *name[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
        int64_t n = tu_numel(&ref[i]->v);
        double *r = ref[i]->mem, *z = g0[i]->mem;
        for (int64_t e = 0; e < n; ++e) r[e] = on[i] ? r[e] + z[e] : z[e];
        char msg[260];
        snprintf(msg, sizeof msg, "%s %s", what, name[i]);
        tu_check_close(&got[i]->v, &ref[i]->v, TU_RTOL(dt), TU_ATOL(dt), msg);
    }
    sd_free(&rq); sd_free(&rk); sd_free(&rv);
}

static void run(attn_dtype dt, const sd_case *c, const sb_run *r, uint64_t seed, bool dq,
                bool dk, bool dv) {
    sb_prob P;
    sb_make(&P, dt, c, r->lin, r->lgrad, seed);
    attn_sdpa_opts o = P.o;
    o.algo = r->algo;
    o.block_q = r->bq;
    o.block_k = r->bk;
    o.threads = r->threads;
    char what[220];
    snprintf(what, sizeof what,
             "%s B%lld H%lld/%lld Tq%lld Tk%lld D%lld/%lld causal%d keep%d bias%d kvl%d "
             "algo%d bq%lld bk%lld thr%d in=%s grad=%s",
             dt == ATTN_F64 ? "f64" : "f32", (long long)c->B, (long long)c->H,
             (long long)c->Hkv, (long long)c->Tq, (long long)c->Tk, (long long)c->D,
             (long long)c->Dv, c->causal, c->keep, c->bias, c->kv_len, r->algo,
             (long long)r->bq, (long long)r->bk, r->threads, sd_lay_name[r->lin],
             sd_lay_name[r->lgrad]);
    attn_status st = sb_call(&P, &o, dq, dk, dv);
    ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_strerror(st));
    sb_check(&P, dt, what, dq, dk, dv);
    sb_free(&P);
}

/* Every case, both algorithms, tiles that do not divide, 1 and 2 threads (both schedules). */
static void sweep(attn_dtype dt) {
    static const sb_run runs[] = {
        {ATTN_ALGO_MATERIALIZED, 0, 0, 1, LY_CONTIG, LY_CONTIG},
        {ATTN_ALGO_MATERIALIZED, 4, 0, 2, LY_CONTIG, LY_CONTIG},
        {ATTN_ALGO_TILED, 3, 4, 1, LY_CONTIG, LY_CONTIG},
        {ATTN_ALGO_TILED, 4, 3, 2, LY_CONTIG, LY_CONTIG},
        {ATTN_ALGO_AUTO, 0, 0, 0, LY_CONTIG, LY_CONTIG},
    };
    for (size_t ci = 0; ci < NCASES; ++ci)
        for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ++ri)
            run(dt, &cases[ci], &runs[ri], 300 + ci * 13 + ri, true, true, true);
}

/* The cache-derived default tiles (block_q = block_k = 0) at odd head widths, both schedules. */
static void sweep_default_tiles(attn_dtype dt) {
    static const sd_case big[] = {
        /* B  H Hkv Tq  Tk  D  Dv  causal                     keep bias kvl scale */
        {1, 2, 1, 150, 300, 40, 24, ATTN_CAUSAL_NONE, 0, 1, 0, 0},
        {2, 1, 1, 70, 600, 12, 20, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, 1, 0},
    };
    static const sb_run runs[] = {
        {ATTN_ALGO_TILED, 0, 0, 1, LY_CONTIG, LY_CONTIG},
        {ATTN_ALGO_TILED, 0, 0, 2, LY_CONTIG, LY_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof big / sizeof *big; ++ci)
        for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ++ri)
            run(dt, &big[ci], &runs[ri], 900 + ci * 13 + ri, true, true, true);
}

START_TEST(sb_default_tiles_f64) { sweep_default_tiles(ATTN_F64); }
END_TEST
START_TEST(sb_default_tiles_f32) { sweep_default_tiles(ATTN_F32); }
END_TEST

START_TEST(sb_reference_f64) { sweep(ATTN_F64); }
END_TEST
START_TEST(sb_reference_f32) { sweep(ATTN_F32); }
END_TEST

/* Strided inputs and gradients; any subset of the gradients (NULL skips). */
START_TEST(sb_layouts_and_subsets) {
    static const sd_lay grads[] = {LY_CONTIG, LY_BTHD, LY_NEG, LY_PACKED, LY_COLMAJOR};
    for (int d = 0; d < 2; ++d)
        for (int li = 0; li < LY_COUNT; ++li)
            for (size_t gi = 0; gi < 5; ++gi) {
                sb_run r = {li % 2 ? ATTN_ALGO_TILED : ATTN_ALGO_MATERIALIZED, 4, 5, 2,
                            (sd_lay)li, grads[gi]};
                run(d ? ATTN_F64 : ATTN_F32, &cases[2 + gi % 3], &r, 77 + li, true, true, true);
            }
    for (unsigned mask = 0; mask < 8; ++mask) {
        sb_run r = {ATTN_ALGO_TILED, 3, 4, 2, LY_CONTIG, LY_CONTIG};
        run(ATTN_F64, &cases[4], &r, 9, mask & 1, mask & 2, mask & 4);
    }
}
END_TEST

/* Loss L = sum(dout * out): central differences in f64, relative error < 1e-6. */
static double loss(sb_prob *P, const attn_sdpa_opts *o, sd_t *out) {
    ck_assert_int_eq(attn_sdpa(&P->q.v, &P->k.v, &P->v.v, o, &out->v, NULL, 0), ATTN_OK);
    double L = 0;
    int64_t idx[4] = {0};
    do L += tu_get(&P->dout.v, idx) * tu_get(&out->v, idx);
    while (tu_inc(idx, out->v.shape, 4));
    return L;
}

START_TEST(sb_finite_differences) {
    static const size_t which[] = {0, 2, 3, 4, 5, 6};
    for (size_t wi = 0; wi < sizeof which / sizeof *which; ++wi)
        for (int a = 1; a <= 2; ++a) {
            sb_prob P;
            sb_make(&P, ATTN_F64, &cases[which[wi]], LY_CONTIG, LY_CONTIG, 500 + wi);
            attn_sdpa_opts o = P.o;
            o.algo = (attn_algo)a;
            o.block_q = 3;
            o.block_k = 4;
            /* analytic: zero the gradients, run once */
            sd_t *g[3] = {&P.dq, &P.dk, &P.dv}, *x[3] = {&P.q, &P.k, &P.v};
            for (int i = 0; i < 3; ++i) memset(g[i]->mem, 0, (size_t)tu_numel(&g[i]->v) * 8);
            ck_assert_int_eq(sb_call(&P, &o, true, true, true), ATTN_OK);
            sd_t out = sd_zeros(ATTN_F64, 4, P.out.v.shape);
            double worst = 0;
            for (int i = 0; i < 3; ++i) {
                int64_t idx[4] = {0};
                do {
                    double *px = tu_at(&x[i]->v, idx), x0 = *px, h = 1e-5;
                    *px = x0 + h;
                    double lp = loss(&P, &o, &out);
                    *px = x0 - h;
                    double lm = loss(&P, &o, &out);
                    *px = x0;
                    double fd = (lp - lm) / (2 * h), an = tu_get(&g[i]->v, idx);
                    double err = fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), 1e-2);
                    worst = fmax(worst, err);
                    ck_assert_msg(err < 1e-6, "case %zu algo %d grad %d [%lld %lld %lld %lld]: "
                                  "fd %.12g analytic %.12g", which[wi], a, i, (long long)idx[0],
                                  (long long)idx[1], (long long)idx[2], (long long)idx[3], fd, an);
                } while (tu_inc(idx, x[i]->v.shape, 4));
            }
            sd_free(&out);
            sb_free(&P);
        }
}
END_TEST

/* f32 gradients agree with the f64 ones computed from the same (f32-exact) inputs. */
START_TEST(sb_f32_vs_f64) {
    const sd_case *c = &cases[6];
    for (int a = 1; a <= 2; ++a) {
        sb_prob P32, P64;
        sb_make(&P32, ATTN_F32, c, LY_CONTIG, LY_CONTIG, 61);
        sb_make(&P64, ATTN_F64, c, LY_CONTIG, LY_CONTIG, 61); /* same seed: same masks */
        sd_t *f[] = {&P32.q, &P32.k, &P32.v, &P32.dout, &P32.m.bias};
        sd_t *dd[] = {&P64.q, &P64.k, &P64.v, &P64.dout, &P64.m.bias};
        for (int i = 0; i < 5; ++i) {
            int64_t idx[4] = {0};
            do tu_set(&dd[i]->v, idx, tu_get(&f[i]->v, idx));
            while (tu_inc(idx, f[i]->v.shape, f[i]->v.ndim));
        }
        sd_t *gs[] = {&P32.dq, &P32.dk, &P32.dv, &P64.dq, &P64.dk, &P64.dv};
        for (int i = 0; i < 6; ++i)
            memset(gs[i]->mem, 0, (size_t)tu_numel(&gs[i]->v) * attn_dtype_size(gs[i]->v.dtype));
        attn_sdpa_opts o64 = P64.o;
        o64.lse = &P64.lse.v;
        ck_assert_int_eq(attn_sdpa(&P64.q.v, &P64.k.v, &P64.v.v, &o64, &P64.out.v, NULL, 0),
                         ATTN_OK);
        attn_sdpa_opts o32 = P32.o;
        o32.algo = o64.algo = (attn_algo)a;
        ck_assert_int_eq(sb_call(&P32, &o32, true, true, true), ATTN_OK);
        ck_assert_int_eq(sb_call(&P64, &o64, true, true, true), ATTN_OK);
        tu_check_close(&P32.dq.v, &P64.dq.v, TU_RTOL(ATTN_F32), TU_ATOL(ATTN_F32), "dq f32 vs f64");
        tu_check_close(&P32.dk.v, &P64.dk.v, TU_RTOL(ATTN_F32), TU_ATOL(ATTN_F32), "dk f32 vs f64");
        tu_check_close(&P32.dv.v, &P64.dv.v, TU_RTOL(ATTN_F32), TU_ATOL(ATTN_F32), "dv f32 vs f64");
        sb_free(&P32);
        sb_free(&P64);
    }
}
END_TEST

/* Fully masked rows and empty batches: exactly zero gradients, never NaN. */
START_TEST(sb_fully_masked_zero) {
    for (int d = 0; d < 2; ++d)
        for (int a = 1; a <= 2; ++a) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            /* B 3 (batch 2 has kv_len 0), keep (B,1,Tq,Tk) with row 0 of each batch empty */
            sd_case c = {3, 2, 1, 6, 7, 4, 4, ATTN_CAUSAL_NONE, 3, 0, 1, 0};
            sb_prob P;
            sb_make(&P, dt, &c, LY_CONTIG, LY_CONTIG, 8);
            sd_t *g[3] = {&P.dq, &P.dk, &P.dv};
            for (int i = 0; i < 3; ++i)
                memset(g[i]->mem, 0, (size_t)tu_numel(&g[i]->v) * attn_dtype_size(dt));
            attn_sdpa_opts o = P.o;
            o.algo = (attn_algo)a;
            ck_assert_int_eq(sb_call(&P, &o, true, true, true), ATTN_OK);
            for (int i = 0; i < 3; ++i) sd_check_no_nan(&g[i]->v, "gradient");
            for (int64_t b = 0; b < 3; ++b)
                for (int64_t h = 0; h < 2; ++h)
                    for (int64_t e = 0; e < 4; ++e) {
                        ck_assert(tu_get(&P.dq.v, (int64_t[]){b, h, 0, e}) == 0.0);
                        for (int64_t i = 0; i < 6; ++i)
                            if (b == 2) ck_assert(tu_get(&P.dq.v, (int64_t[]){b, h, i, e}) == 0.0);
                    }
            for (int64_t j = 0; j < 7; ++j)
                for (int64_t e = 0; e < 4; ++e) {
                    ck_assert(tu_get(&P.dk.v, (int64_t[]){2, 0, j, e}) == 0.0);
                    ck_assert(tu_get(&P.dv.v, (int64_t[]){2, 0, j, e}) == 0.0);
                }
            sb_free(&P);
        }
}
END_TEST

/* Gradients accumulate: two calls from zero give twice one call. */
START_TEST(sb_accumulates) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        sb_prob P;
        sb_make(&P, dt, &cases[5], LY_CONTIG, LY_CONTIG, 21);
        sd_t *g[3] = {&P.dq, &P.dk, &P.dv};
        sd_t once[3];
        for (int i = 0; i < 3; ++i) memset(g[i]->mem, 0, (size_t)tu_numel(&g[i]->v) * attn_dtype_size(dt));
        attn_sdpa_opts o = P.o;
        o.algo = ATTN_ALGO_TILED;
        o.block_k = 4;
        ck_assert_int_eq(sb_call(&P, &o, true, true, true), ATTN_OK);
        for (int i = 0; i < 3; ++i) {
            once[i] = sd_zeros(ATTN_F64, 4, g[i]->v.shape);
            int64_t idx[4] = {0};
            do tu_set(&once[i].v, idx, 2 * tu_get(&g[i]->v, idx));
            while (tu_inc(idx, g[i]->v.shape, 4));
        }
        ck_assert_int_eq(sb_call(&P, &o, true, true, true), ATTN_OK);
        for (int i = 0; i < 3; ++i) {
            tu_check_close(&g[i]->v, &once[i].v, TU_RTOL(dt), TU_ATOL(dt), "twice = 2x once");
            sd_free(&once[i]);
        }
        sb_free(&P);
    }
}
END_TEST

/* PyTorch autograd (float64) gradients of sum(out * dout). */
START_TEST(sb_fixtures) {
    static const char *files[] = {"sdpa_keep_bias.txt", "sdpa_gqa_causal.txt",
                                  "sdpa_bottom_right.txt", "sdpa_padding.txt"};
    for (size_t fi = 0; fi < sizeof files / sizeof *files; ++fi) {
        fx_file *fx = fx_load(files[fi]);
        ck_assert_msg(fx != NULL, "%s", files[fi]);
        const char *names[] = {"q", "k", "v", "dout", "dq", "dk", "dv"};
        sd_t t[7];
        for (int i = 0; i < 7; ++i) t[i] = sd_from_fx(fx_get(fx, names[i]), ATTN_F64);
        attn_sdpa_opts o = {0};
        sd_masks m;
        sd_fx_masks(fx, ATTN_F64, &m, &o);
        sd_t out = sd_zeros(ATTN_F64, 4, t[3].v.shape), lse = sd_zeros(ATTN_F64, 3, t[3].v.shape);
        for (int a = 1; a <= 2; ++a) {
            attn_sdpa_opts fo = o;
            fo.lse = &lse.v;
            fo.algo = (attn_algo)a;
            fo.block_q = a == 2 ? 2 : 0;
            fo.block_k = a == 2 ? 3 : 0;
            ck_assert_int_eq(attn_sdpa(&t[0].v, &t[1].v, &t[2].v, &fo, &out.v, NULL, 0), ATTN_OK);
            sd_t g[3];
            for (int i = 0; i < 3; ++i) g[i] = sd_zeros(ATTN_F64, 4, t[i].v.shape);
            ck_assert_int_eq(attn_sdpa_backward(&t[0].v, &t[1].v, &t[2].v, &fo, &out.v, &lse.v,
                                                &t[3].v, &g[0].v, &g[1].v, &g[2].v, NULL, 0),
                             ATTN_OK);
            for (int i = 0; i < 3; ++i) {
                tu_check_close(&g[i].v, &t[4 + i].v, TU_RTOL(ATTN_F64), TU_ATOL(ATTN_F64),
                               files[fi]);
                sd_free(&g[i]);
            }
        }
        for (int i = 0; i < 7; ++i) sd_free(&t[i]);
        sd_free(&out);
        sd_free(&lse);
        sd_masks_free(&m);
        fx_free(fx);
    }
}
END_TEST

/* Every status, with the gradients left exactly as they were. */
START_TEST(sb_errors) {
    sb_prob P;
    sd_case c = {2, 4, 2, 3, 5, 2, 3, ATTN_CAUSAL_NONE, 2, 2, 0, 0};
    sb_make(&P, ATTN_F32, &c, LY_CONTIG, LY_CONTIG, 4);
    size_t nq = (size_t)tu_numel(&P.dq.v) * 4, nk = (size_t)tu_numel(&P.dk.v) * 4;
    size_t nv = (size_t)tu_numel(&P.dv.v) * 4;
    void *q0 = malloc(nq), *k0 = malloc(nk), *v0 = malloc(nv);
    memcpy(q0, P.dq.mem, nq); memcpy(k0, P.dk.mem, nk); memcpy(v0, P.dv.mem, nv);
    attn_view Q = P.q.v, K = P.k.v, V = P.v.v, O = P.out.v, L = P.lse.v, DO = P.dout.v;
    attn_view DQ = P.dq.v, DK = P.dk.v, DV = P.dv.v, bad;
    attn_sdpa_opts ok = P.o, x;
#define EXPECT(code, opts, q_, k_, v_, o_, l_, do_, dq_, dk_, dv_, w_, ws_)                    \
    do {                                                                                       \
        attn_sdpa_opts op_ = (opts);                                                           \
        ck_assert_int_eq(attn_sdpa_backward(q_, k_, v_, &op_, o_, l_, do_, dq_, dk_, dv_, w_,  \
                                            ws_), code);                                       \
        ck_assert_int_eq(memcmp(P.dq.mem, q0, nq), 0);                                         \
        ck_assert_int_eq(memcmp(P.dk.mem, k0, nk), 0);                                         \
        ck_assert_int_eq(memcmp(P.dv.mem, v0, nv), 0);                                         \
    } while (0)
    EXPECT(ATTN_EINVAL, ok, NULL, &K, &V, &O, &L, &DO, &DQ, &DK, &DV, NULL, 0);
    EXPECT(ATTN_EINVAL, ok, &Q, &K, &V, NULL, &L, &DO, &DQ, &DK, &DV, NULL, 0);
    EXPECT(ATTN_EINVAL, ok, &Q, &K, &V, &O, NULL, &DO, &DQ, &DK, &DV, NULL, 0);
    EXPECT(ATTN_EINVAL, ok, &Q, &K, &V, &O, &L, NULL, &DQ, &DK, &DV, NULL, 0);
    x = ok; x.causal = (attn_causal)5; EXPECT(ATTN_EINVAL, x, &Q, &K, &V, &O, &L, &DO, &DQ, &DK, &DV, NULL, 0);
    /* dtypes */
    sd_t dq64 = sd_zeros(ATTN_F64, 4, DQ.shape);
    EXPECT(ATTN_EDTYPE, ok, &Q, &K, &V, &O, &L, &DO, &dq64.v, &DK, &DV, NULL, 0);
    bad = L; bad.dtype = ATTN_F64; EXPECT(ATTN_EDTYPE, ok, &Q, &K, &V, &O, &bad, &DO, &DQ, &DK, &DV, NULL, 0);
    x = ok; x.keep = &P.m.bias.v; EXPECT(ATTN_EDTYPE, x, &Q, &K, &V, &O, &L, &DO, &DQ, &DK, &DV, NULL, 0);
    /* shapes: gradients, out, lse, dout, H % Hkv, masks */
    bad = DK; bad.shape[2] = 4; EXPECT(ATTN_ESHAPE, ok, &Q, &K, &V, &O, &L, &DO, &DQ, &bad, &DV, NULL, 0);
    bad = DO; bad.shape[3] = 2; EXPECT(ATTN_ESHAPE, ok, &Q, &K, &V, &O, &L, &bad, &DQ, &DK, &DV, NULL, 0);
    bad = L; bad.shape[2] = 2; EXPECT(ATTN_ESHAPE, ok, &Q, &K, &V, &O, &bad, &DO, &DQ, &DK, &DV, NULL, 0);
    bad = O; bad.ndim = 3; EXPECT(ATTN_ESHAPE, ok, &Q, &K, &V, &bad, &L, &DO, &DQ, &DK, &DV, NULL, 0);
    attn_view K3 = K; K3.shape[1] = 3;
    EXPECT(ATTN_ESHAPE, ok, &Q, &K3, &V, &O, &L, &DO, &DQ, &DK, &DV, NULL, 0);
    attn_view kp = *ok.keep; kp.shape[0] = 2; kp.ndim = 2; kp.shape[1] = 5;
    x = ok; x.keep = &kp; EXPECT(ATTN_ESHAPE, x, &Q, &K, &V, &O, &L, &DO, &DQ, &DK, &DV, NULL, 0);
    /* outputs: broadcast gradient, gradient over an input, gradients over each other */
    bad = DV; bad.stride[1] = 0; EXPECT(ATTN_ESTRIDE, ok, &Q, &K, &V, &O, &L, &DO, &DQ, &DK, &bad, NULL, 0);
    attn_view over_q = Q; /* dq aliasing q itself */
    EXPECT(ATTN_EALIAS, ok, &Q, &K, &V, &O, &L, &DO, &over_q, &DK, &DV, NULL, 0);
    attn_view dk_on_dq = DQ; dk_on_dq.shape[1] = 2; dk_on_dq.shape[2] = 5;
    dk_on_dq.stride[0] = 20; dk_on_dq.stride[1] = 10; /* (2,2,5,2) inside dq's memory */
    EXPECT(ATTN_EALIAS, ok, &Q, &K, &V, &O, &L, &DO, &DQ, &dk_on_dq, &DV, NULL, 0);
    attn_view dv_on_do = DO; dv_on_do.shape[1] = 2; dv_on_do.shape[2] = 5;
    dv_on_do.stride[0] = 30; dv_on_do.stride[1] = 15;
    EXPECT(ATTN_EALIAS, ok, &Q, &K, &V, &O, &L, &DO, &DQ, &DK, &dv_on_do, NULL, 0);
    /* workspace one byte short, NULL with a size */
    size_t ws = attn_sdpa_backward_workspace_size(&Q, &K, &V, &ok);
    ck_assert_uint_gt(ws, 0);
    char *w = malloc(ws);
    EXPECT(ATTN_EWORKSPACE, ok, &Q, &K, &V, &O, &L, &DO, &DQ, &DK, &DV, w, ws - 1);
    EXPECT(ATTN_EWORKSPACE, ok, &Q, &K, &V, &O, &L, &DO, &DQ, &DK, &DV, NULL, ws);
    /* weights in the forward's opts are ignored, even with TILED */
    x = ok; x.weights = &O; x.algo = ATTN_ALGO_TILED;
    ck_assert_int_eq(attn_sdpa_backward(&Q, &K, &V, &x, &O, &L, &DO, &DQ, &DK, &DV, w, ws),
                     ATTN_OK);
    ck_assert_int_ne(memcmp(P.dq.mem, q0, nq), 0);
    free(w);
#undef EXPECT
    sd_free(&dq64);
    free(q0); free(k0); free(v0);
    sb_free(&P);
}
END_TEST

/* Schedules: per key/value head (threads 1, or many heads) and split (few heads) agree. */
START_TEST(sb_schedules_agree) {
    sd_case c = {1, 3, 1, 17, 21, 6, 5, ATTN_CAUSAL_TOP_LEFT, 1, 2, 0, 0}; /* B * Hkv = 1 */
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        sb_run r1 = {ATTN_ALGO_TILED, 4, 6, 1, LY_CONTIG, LY_CONTIG};
        sb_run r2 = {ATTN_ALGO_TILED, 4, 6, 2, LY_CONTIG, LY_CONTIG};
        run(dt, &c, &r1, 3, true, true, true);
        run(dt, &c, &r2, 3, true, true, true);
        run(dt, &c, &r2, 3, true, false, false); /* split with dQ only: one pass */
        run(dt, &c, &r2, 3, false, true, false);
    }
}
END_TEST

START_TEST(sbw_tiled_independent_of_tk) {
    float dummy[1];
    attn_view q, k;
    int64_t sh[4] = {1, 12, 65536, 64}, st[4] = {0, 0, 0, 0};
    attn_view_init_strided(&q, ATTN_F32, dummy, 4, sh, st);
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, sh, st);
    attn_sdpa_opts o = {.algo = ATTN_ALGO_TILED, .threads = 2, .causal = ATTN_CAUSAL_TOP_LEFT};
    size_t big = attn_sdpa_backward_workspace_size(&q, &k, &k, &o);
    sh[2] = 1024;
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, sh, st);
    size_t small = attn_sdpa_backward_workspace_size(&q, &k, &k, &o);
    ck_assert_uint_gt(big, 0);
    ck_assert_uint_eq(big, small);
    ck_assert_uint_lt(big, (size_t)64 << 20);
    o.algo = ATTN_ALGO_MATERIALIZED; /* whole rows: grows with Tk */
    size_t mat_small = attn_sdpa_backward_workspace_size(&q, &k, &k, &o);
    attn_view_init_strided(&k, ATTN_F32, dummy, 4, (int64_t[]){1, 12, 65536, 64}, st);
    ck_assert_uint_gt(attn_sdpa_backward_workspace_size(&q, &k, &k, &o), 8 * mat_small);
}
END_TEST

START_TEST(sbw_invalid_is_zero) {
    float d[8] = {0};
    attn_view q, k;
    attn_view_init(&q, ATTN_F32, d, 4, (int64_t[]){1, 2, 2, 2});
    attn_view_init(&k, ATTN_F32, d, 4, (int64_t[]){1, 3, 2, 2}); /* H 2 % Hkv 3 */
    ck_assert_uint_eq(attn_sdpa_backward_workspace_size(&q, &k, &k, NULL), 0);
    ck_assert_uint_eq(attn_sdpa_backward_workspace_size(&q, NULL, &k, NULL), 0);
    attn_sdpa_opts o = {.block_k = -3};
    ck_assert_uint_eq(attn_sdpa_backward_workspace_size(&q, &q, &q, &o), 0);
    ck_assert_uint_gt(attn_sdpa_backward_workspace_size(&q, &q, &q, NULL), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sdpa_backward");
    TCase *tc = tcase_create("attn_sdpa_backward");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sb_reference_f64);
    tcase_add_test(tc, sb_reference_f32);
    tcase_add_test(tc, sb_default_tiles_f64);
    tcase_add_test(tc, sb_default_tiles_f32);
    tcase_add_test(tc, sb_layouts_and_subsets);
    tcase_add_test(tc, sb_finite_differences);
    tcase_add_test(tc, sb_f32_vs_f64);
    tcase_add_test(tc, sb_fully_masked_zero);
    tcase_add_test(tc, sb_accumulates);
    tcase_add_test(tc, sb_fixtures);
    tcase_add_test(tc, sb_errors);
    tcase_add_test(tc, sb_schedules_agree);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("attn_sdpa_backward_workspace_size");
    tcase_add_test(tw, sbw_tiled_independent_of_tk);
    tcase_add_test(tw, sbw_invalid_is_zero);
    suite_add_tcase(s, tw);
    return tu_run(s);
}
