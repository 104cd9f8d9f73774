/* SPDX-License-Identifier: MIT */
/* Check suite for the layer forwards: naive references, the ViT seed, lesson 11, PyTorch. */
#include "layer_util.h"
#include "ref/ref_layers.h"

/* ---- MHA against the naive reference ---------------------------------- */

typedef struct mha_case {
    int64_t B, Tq, Tk, C, Ckv, H, Hkv, D;
    bool bias, cross;
    int causal; /* 0, 1 top-left, 2 bottom-right */
    bool keep, kv_len;
} mha_case;

static const mha_case mha_cases[] = {
    {2, 5, 5, 8, 8, 2, 0, 0, true, false, 0, false, false},
    {1, 7, 7, 12, 12, 4, 2, 0, false, false, 1, false, false},  /* GQA, causal */
    {2, 3, 6, 8, 5, 2, 1, 3, true, true, 2, false, true},       /* cross, MQA, D != C/H */
    {2, 6, 6, 6, 6, 3, 3, 0, true, false, 0, true, true},       /* keep mask + padding */
    {1, 4, 9, 8, 8, 2, 2, 0, false, true, 2, true, false},      /* bottom-right + keep */
    {2, 160, 160, 64, 64, 2, 0, 0, true, false, 1, false, false}, /* bias fills > 16384 */
};

/*
 * The slab keeps wq, wk, wv as (out, in) matrices, adjacent when each is a
 * multiple of 64 bytes; the cache binds q, k, v as column blocks of one tensor
 * (k, v for cross-attention). The traced forward, which then projects with one
 * GEMM, against the reference: the output and each projection.
 */
static void mha_traced(const mha_case *mc, const attn_mha_config *rc, const attn_mha_params *p,
                       const attn_view *xq, const attn_view *xkv, const attn_sdpa_opts *o,
                       const attn_view *want, const double *dq, const double *dkv,
                       double *const *w) {
    attn_dtype dt = rc->dtype;
    size_t es = attn_dtype_size(dt);
    int64_t HD = rc->heads * rc->d_head, KD = rc->kv_heads * rc->d_head;
    bool qa = (size_t)(mc->C * HD) * es % 64 == 0, ka = (size_t)(rc->d_kv * KD) * es % 64 == 0;
    ck_assert(p->wq.stride[0] == 1 && p->wq.stride[1] == mc->C);
    ck_assert((char *)p->wk.data == (char *)p->wq.data + (size_t)(mc->C * HD) * es ||
              (!qa && !((uintptr_t)p->wk.data & 63u)));
    ck_assert((char *)p->wv.data == (char *)p->wk.data + (size_t)(rc->d_kv * KD) * es || !ka);
    size_t cs = attn_mha_cache_size(rc, mc->B, mc->Tq, mc->Tk);
    void *cslab = slab_new(cs);
    attn_view cv[5];
    attn_trace tr;
    ck_assert_int_eq(attn_mha_cache_bind(rc, mc->B, mc->Tq, mc->Tk, cslab, cs, cv, &tr),
                     ATTN_OK);
    ck_assert((char *)cv[2].data == (char *)cv[1].data + (size_t)KD * es); /* k, v adjacent */
    lt out = lt_new(dt, 3, want->shape);
    attn_status st = attn_mha_forward(rc, p, xq, xkv, o, &out.v, &tr, NULL, 0);
    ck_assert_msg(st == ATTN_OK, "traced mha forward: %s", attn_strerror(st));
    double rt = dt == ATTN_F64 ? 1e-12 : 1e-5, at = dt == ATTN_F64 ? 1e-13 : 1e-5;
    tu_check_close(&out.v, want, rt, at, "traced mha vs ref");
    int64_t nq = mc->B * mc->Tq, nk = mc->B * mc->Tk;
    double *r = malloc(sizeof(double) * (size_t)((nq > nk ? nq : nk) * (HD > KD ? HD : KD)));
    const double *xs[3] = {dq, dkv, dkv};
    int64_t rows[3] = {nq, nk, nk}, ins[3] = {mc->C, rc->d_kv, rc->d_kv};
    int64_t outs[3] = {HD, KD, KD};
    for (int i = 0; i < 3; ++i) {
        ref_l_linear(rows[i], ins[i], outs[i], xs[i], w[i], w[4 + i], r);
        attn_view rv = lt_wrap(r, 3, cv[i].shape);
        tu_check_close(&cv[i], &rv, rt, at, "traced q/k/v vs ref");
    }
    free(r); free(cslab); lt_free(&out);
}

static void run_mha_case(const mha_case *mc, attn_dtype dt) {
    uint64_t seed = 77 + (uint64_t)mc->C * 13 + (uint64_t)mc->H;
    attn_mha_config cfg = {.dtype = dt, .d_model = mc->C, .heads = mc->H,
                           .kv_heads = mc->Hkv, .d_head = mc->D, .d_kv = mc->Ckv,
                           .bias = mc->bias};
    attn_mha_config rc;
    ck_assert_int_eq(attn_mha_config_resolve(&cfg, &rc), ATTN_OK);
    size_t ps = attn_mha_params_size(&cfg);
    void *slab = slab_new(ps);
    attn_mha_params p;
    ck_assert_int_eq(attn_mha_params_bind(&p, &cfg, slab, ps), ATTN_OK);
    fill_views(&p.wq, 8, &seed, 0.5);
    lt xq = lt_rand(dt, 3, (int64_t[]){mc->B, mc->Tq, mc->C}, &seed, 1.0);
    lt xkv = mc->cross ? lt_rand(dt, 3, (int64_t[]){mc->B, mc->Tk, mc->Ckv}, &seed, 1.0)
                       : (lt){0};
    lt out = lt_new(dt, 3, (int64_t[]){mc->B, mc->Tq, mc->C});
    uint8_t *keep = NULL;
    attn_view keepv;
    int64_t kv_len[4] = {mc->Tk, mc->Tk - 2, mc->Tk - 1, 1};
    attn_sdpa_opts o = {.causal = (attn_causal)mc->causal, .kv_len = mc->kv_len ? kv_len : NULL};
    if (mc->keep) {
        /* (B, 1, Tq, Tk) broadcast over heads through extent 1 */
        keep = malloc((size_t)(mc->B * mc->Tq * mc->Tk));
        for (int64_t i = 0; i < mc->B * mc->Tq * mc->Tk; ++i)
            keep[i] = (uint8_t)((tu_next(&seed) % 4) != 0);
        attn_view_init(&keepv, ATTN_U8, keep, 4, (int64_t[]){mc->B, 1, mc->Tq, mc->Tk});
        o.keep = &keepv;
    }
    attn_status st = attn_mha_forward(&cfg, &p, &xq.v, mc->cross ? &xkv.v : NULL, &o, &out.v,
                                      NULL, NULL, 0);
    ck_assert_msg(st == ATTN_OK, "mha forward: %s", attn_strerror(st));
    double *dq = lt_doubles(&xq.v), *dkv = mc->cross ? lt_doubles(&xkv.v) : dq;
    double *w[8];
    const attn_view *pv[8] = {&p.wq, &p.wk, &p.wv, &p.wo, &p.bq, &p.bk, &p.bv, &p.bo};
    for (int i = 0; i < 8; ++i) w[i] = (i < 4 || mc->bias) ? lt_doubles(pv[i]) : NULL;
    ref_l_mha_args a = {mc->B, mc->Tq, mc->Tk, mc->C, rc.d_kv, mc->H, rc.kv_heads, rc.d_head,
                      dq, dkv, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
                      mc->causal, keep, mc->kv_len ? kv_len : NULL, 0};
    double *want = malloc(sizeof(double) * (size_t)(mc->B * mc->Tq * mc->C));
    ref_l_mha(&a, want, NULL);
    attn_view wv = lt_wrap(want, 3, out.v.shape);
    tu_check_close(&out.v, &wv, dt == ATTN_F64 ? 1e-12 : 1e-5, dt == ATTN_F64 ? 1e-13 : 1e-5,
                   "mha vs ref");
    mha_traced(mc, &rc, &p, &xq.v, mc->cross ? &xkv.v : NULL, &o, &wv, dq, dkv, w);
    free(want); free(dq);
    if (mc->cross) free(dkv);
    for (int i = 0; i < 8; ++i) free(w[i]);
    free(keep); free(slab);
    lt_free(&xq); lt_free(&xkv); lt_free(&out);
}

START_TEST(mf_vs_reference) {
    for (size_t i = 0; i < sizeof mha_cases / sizeof *mha_cases; ++i) {
        run_mha_case(&mha_cases[i], ATTN_F64);
        run_mha_case(&mha_cases[i], ATTN_F32);
    }
}
END_TEST

/* ---- config / params ------------------------------------------------------ */

START_TEST(mc_config_errors) {
    attn_mha_config c = {.dtype = ATTN_F64, .d_model = 5, .heads = 2}, r;
    ck_assert_int_eq(attn_mha_config_resolve(&c, &r), ATTN_EINVAL); /* 5 % 2 */
    ck_assert_int_eq(attn_mha_params_size(&c), 0);
    ck_assert_int_eq(attn_mha_param_count(&c), -1);
    c.d_model = 4;
    c.kv_heads = 3;
    ck_assert_int_eq(attn_mha_config_resolve(&c, &r), ATTN_EINVAL); /* 2 % 3 */
    c.kv_heads = 0;
    c.dtype = ATTN_U8;
    ck_assert_int_eq(attn_mha_config_resolve(&c, &r), ATTN_EINVAL);
    c.dtype = 0;
    ck_assert_int_eq(attn_mha_config_resolve(&c, &r), ATTN_OK);
    ck_assert_int_eq(r.dtype, ATTN_F32);
    ck_assert_int_eq(r.d_head, 2);
    ck_assert_int_eq(r.kv_heads, 2);
    ck_assert_int_eq(r.d_kv, 4);
    c.heads = -1;
    ck_assert_int_eq(attn_mha_config_resolve(&c, &r), ATTN_EINVAL);
    ck_assert_int_eq(attn_mha_config_resolve(NULL, &r), ATTN_EINVAL);
    /* 5 heads of width 3 over d_model 4 is explicit, hence fine */
    attn_mha_config e = {.d_model = 4, .heads = 5, .d_head = 3};
    ck_assert_int_eq(attn_mha_config_resolve(&e, &r), ATTN_OK);
}
END_TEST

START_TEST(mp_param_count_and_bind) {
    /* lesson 11: d_model 4, 2 heads, no bias: 4 matrices of 4x4 = 64 */
    attn_mha_config c = {.dtype = ATTN_F32, .d_model = 4, .heads = 2};
    ck_assert_int_eq(attn_mha_param_count(&c), 64);
    c.bias = true;
    ck_assert_int_eq(attn_mha_param_count(&c), 80);
    attn_ffn_config f = {.dtype = ATTN_F64, .d_model = 4, .d_ff = 6};
    ck_assert_int_eq(attn_ffn_param_count(&f), 48);
    attn_encoder_config e = {.mha = {.dtype = ATTN_F64, .d_model = 4, .heads = 2}, .ffn = f};
    ck_assert_int_eq(attn_encoder_param_count(&e), 64 + 48);
    e.ln_affine = true;
    ck_assert_int_eq(attn_encoder_param_count(&e), 64 + 48 + 16);
    size_t ps = attn_mha_params_size(&c);
    char *slab = slab_new(ps + 64);
    attn_mha_params p, p0;
    memset(&p, 0x5A, sizeof p);
    p0 = p;
    ck_assert_int_eq(attn_mha_params_bind(&p, &c, slab, ps - 1), ATTN_EWORKSPACE);
    ck_assert_int_eq(attn_mha_params_bind(&p, &c, slab + 4, ps), ATTN_EINVAL); /* misaligned */
    ck_assert_int_eq(memcmp(&p, &p0, sizeof p), 0);
    ck_assert_int_eq(attn_mha_params_bind(&p, &c, slab, ps), ATTN_OK);
    ck_assert_int_eq(p.wq.shape[0], 4);
    ck_assert_int_eq(p.wq.shape[1], 4);
    ck_assert_int_eq(p.bo.ndim, 1);
    ck_assert((char *)p.bo.data + 16 <= slab + ps);
    free(slab);
}
END_TEST

/* ---- lesson 11: the tiny MHA, its shapes and causal isolation ------------ */

START_TEST(mf_lesson11_tiny) {
    attn_mha_config c = {.dtype = ATTN_F32, .d_model = 4, .heads = 2};
    size_t ps = attn_mha_params_size(&c);
    void *slab = slab_new(ps);
    attn_mha_params p;
    ck_assert_int_eq(attn_mha_params_bind(&p, &c, slab, ps), ATTN_OK);
    uint64_t seed = 11;
    fill_views(&p.wq, 4, &seed, 0.5);
    lt x = lt_rand(ATTN_F32, 3, (int64_t[]){1, 3, 4}, &seed, 1.0);
    lt o1 = lt_new(ATTN_F32, 3, (int64_t[]){1, 3, 4}), o2 = lt_new(ATTN_F32, 3, (int64_t[]){1, 3, 4});
    lt q = lt_new(ATTN_F32, 3, (int64_t[]){1, 3, 4});
    lt sc = lt_new(ATTN_F32, 4, (int64_t[]){1, 2, 3, 3}), at = lt_new(ATTN_F32, 4, (int64_t[]){1, 2, 3, 3});
    lt rv = lt_new(ATTN_F32, 4, (int64_t[]){1, 2, 3, 2}), cc = lt_new(ATTN_F32, 3, (int64_t[]){1, 3, 4});
    attn_trace tr = {.q = &q.v, .scores = &sc.v, .attention = &at.v, .read_values = &rv.v,
                     .concat = &cc.v};
    attn_sdpa_opts o = {.causal = ATTN_CAUSAL_TOP_LEFT};
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, &o, &o1.v, &tr, NULL, 0), ATTN_OK);
    /* the causal weights: row 0 is [1, 0, 0]; masked scores are -inf; rows sum to 1 */
    float *w = at.mem, *s = sc.mem;
    for (int h = 0; h < 2; ++h) {
        ck_assert(w[h * 9 + 0] == 1.0f && w[h * 9 + 1] == 0.0f && w[h * 9 + 2] == 0.0f);
        ck_assert(isinf(s[h * 9 + 1]) && s[h * 9 + 1] < 0);
        for (int i = 0; i < 3; ++i)
            ck_assert(fabsf(w[h * 9 + i * 3] + w[h * 9 + i * 3 + 1] + w[h * 9 + i * 3 + 2] - 1) < 1e-6f);
    }
    /* edit the future token: earlier outputs stay bit-identical */
    float *xd = x.mem;
    for (int k = 0; k < 4; ++k) xd[2 * 4 + k] += 3.0f;
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, &o, &o2.v, NULL, NULL, 0), ATTN_OK);
    ck_assert_int_eq(memcmp(o1.mem, o2.mem, 2 * 4 * sizeof(float)), 0);
    ck_assert(memcmp((float *)o1.mem + 8, (float *)o2.mem + 8, 4 * sizeof(float)) != 0);
    /* the d_model 5 / 2 heads error, before any work */
    attn_mha_config bad = {.dtype = ATTN_F32, .d_model = 5, .heads = 2};
    ck_assert_int_eq(attn_mha_forward(&bad, &p, &x.v, NULL, &o, &o2.v, NULL, NULL, 0),
                     ATTN_EINVAL);
    lt_free(&x); lt_free(&o1); lt_free(&o2); lt_free(&q); lt_free(&sc); lt_free(&at);
    lt_free(&rv); lt_free(&cc); free(slab);
}
END_TEST

/* ---- errors: every one leaves out untouched ------------------------------- */

START_TEST(mf_errors) {
    attn_mha_config c = {.dtype = ATTN_F64, .d_model = 4, .heads = 2};
    size_t ps = attn_mha_params_size(&c);
    void *slab = slab_new(ps);
    attn_mha_params p;
    attn_mha_params_bind(&p, &c, slab, ps);
    uint64_t seed = 5;
    fill_views(&p.wq, 4, &seed, 0.5);
    lt x = lt_rand(ATTN_F64, 3, (int64_t[]){2, 3, 4}, &seed, 1.0);
    lt x32 = lt_rand(ATTN_F32, 3, (int64_t[]){2, 3, 4}, &seed, 1.0);
    lt x5 = lt_rand(ATTN_F64, 3, (int64_t[]){2, 3, 5}, &seed, 1.0);
    lt out = lt_new(ATTN_F64, 3, (int64_t[]){2, 3, 4});
    double *o = out.mem;
    for (int i = 0; i < 24; ++i) o[i] = -42;
    lt out0 = lt_new(ATTN_F64, 3, (int64_t[]){2, 3, 4});
    memcpy(out0.mem, out.mem, 24 * sizeof(double));
#define UNTOUCHED() ck_assert_int_eq(memcmp(out.mem, out0.mem, 24 * sizeof(double)), 0)
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x32.v, NULL, NULL, &out.v, NULL, NULL, 0), ATTN_EDTYPE);
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x5.v, NULL, NULL, &out.v, NULL, NULL, 0), ATTN_ESHAPE);
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, NULL, &x.v, NULL, NULL, 0), ATTN_EALIAS);
    ck_assert_int_eq(attn_mha_forward(&c, NULL, &x.v, NULL, NULL, &out.v, NULL, NULL, 0), ATTN_EINVAL);
    attn_view wbad = p.wq;
    attn_mha_params p2 = p;
    wbad.shape[1] = 3;
    p2.wq = wbad;
    ck_assert_int_eq(attn_mha_forward(&c, &p2, &x.v, NULL, NULL, &out.v, NULL, NULL, 0), ATTN_ESHAPE);
    UNTOUCHED();
    /* masks: wrong dtype, shape that does not broadcast, kv_len out of range */
    attn_view keep;
    uint8_t kb[64] = {1};
    attn_view_init(&keep, ATTN_U8, kb, 4, (int64_t[]){2, 1, 3, 2});
    attn_sdpa_opts o1 = {.keep = &keep};
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, &o1, &out.v, NULL, NULL, 0), ATTN_ESHAPE);
    attn_sdpa_opts o2 = {.keep = &x.v};
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, &o2, &out.v, NULL, NULL, 0), ATTN_EDTYPE);
    int64_t kl[2] = {3, 4};
    attn_sdpa_opts o3 = {.kv_len = kl};
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, &o3, &out.v, NULL, NULL, 0), ATTN_ERANGE); /* as attn_sdpa documents */
    /* a trace view of the wrong shape */
    lt badq = lt_new(ATTN_F64, 3, (int64_t[]){2, 3, 3});
    attn_trace tr = {.q = &badq.v};
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, NULL, &out.v, &tr, NULL, 0), ATTN_ESHAPE);
    UNTOUCHED();
    /* the workspace query is exact: one byte short fails, the size itself works */
    size_t ws = attn_mha_workspace_size(&c, &x.v, NULL, NULL, NULL);
    ck_assert_uint_gt(ws, 0);
    void *w = malloc(ws);
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, NULL, &out.v, NULL, w, ws - 1), ATTN_EWORKSPACE);
    UNTOUCHED();
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, NULL, NULL, &out.v, NULL, w, ws), ATTN_OK);
#undef UNTOUCHED
    free(w); free(slab);
    lt_free(&x); lt_free(&x32); lt_free(&x5); lt_free(&out); lt_free(&out0); lt_free(&badq);
}
END_TEST

/* ---- refused calls write nothing: every trace view set, every bad sdpa option ---- */

enum { NTR = 21 };

/* A full encoder trace (every slot its own buffer) for x (B, T, C), H heads, F hidden. */
typedef struct full_trace {
    lt t[NTR];
    attn_trace tr;
} full_trace;

static void full_trace_new(full_trace *f, attn_dtype dt, int64_t B, int64_t T, int64_t C,
                           int64_t H, int64_t F) {
    int64_t btc[3] = {B, T, C}, btf[3] = {B, T, F}, bt[2] = {B, T};
    int64_t bhtt[4] = {B, H, T, T}, bhtd[4] = {B, H, T, C / H}, bht[3] = {B, H, T};
    attn_view **slot[NTR] = {&f->tr.ln1,        &f->tr.q,           &f->tr.k,
                             &f->tr.v,          &f->tr.scores,      &f->tr.attention,
                             &f->tr.read_values, &f->tr.concat,     &f->tr.projected_attention,
                             &f->tr.residual1,  &f->tr.ln2,         &f->tr.mlp_hidden_pre,
                             &f->tr.mlp_hidden, &f->tr.mlp_output,  &f->tr.output,
                             &f->tr.lse,        &f->tr.ln1_mean,    &f->tr.ln1_rstd,
                             &f->tr.ln2_mean,   &f->tr.ln2_rstd,    &f->tr.residual2};
    const int64_t *shp[NTR] = {btc, btc, btc, btc, bhtt, bhtt, bhtd, btc, btc, btc, btc,
                               btf, btf, btc, btc, bht, bt, bt, bt, bt, btc};
    int nd[NTR] = {3, 3, 3, 3, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 3};
    for (int i = 0; i < NTR; ++i) {
        f->t[i] = lt_new(dt, nd[i], shp[i]);
        memset(f->t[i].mem, 0xA5, (size_t)tu_numel(&f->t[i].v) * attn_dtype_size(dt));
        *slot[i] = &f->t[i].v;
    }
}

/* Every byte of every trace buffer and of out still 0xA5. */
static void full_trace_untouched(const full_trace *f, const lt *out, const char *what) {
    for (int i = -1; i < NTR; ++i) {
        const lt *t = i < 0 ? out : &f->t[i];
        size_t n = (size_t)tu_numel(&t->v) * attn_dtype_size(t->v.dtype);
        for (size_t b = 0; b < n; ++b)
            ck_assert_msg(((const unsigned char *)t->mem)[b] == 0xA5,
                          "%s: trace slot %d byte %zu written by a refused call", what, i, b);
    }
}

static void full_trace_free(full_trace *f) {
    for (int i = 0; i < NTR; ++i)
        lt_free(&f->t[i]);
}

START_TEST(lf_refused_writes_nothing) {
    enum { B = 2, T = 3, C = 4, H = 2, F = 6 };
    attn_dtype dt = ATTN_F64;
    attn_encoder_config ec = {.mha = {.dtype = dt, .d_model = C, .heads = H, .bias = true},
                              .ffn = {.dtype = dt, .d_model = C, .d_ff = F, .bias = true},
                              .ln_affine = true};
    size_t ps = attn_encoder_params_size(&ec);
    void *slab = slab_new(ps);
    attn_encoder_params p;
    ck_assert_int_eq(attn_encoder_params_bind(&p, &ec, slab, ps), ATTN_OK);
    uint64_t seed = 9;
    lt x = lt_rand(dt, 3, (int64_t[]){B, T, C}, &seed, 1.0);
    tu_fill(&p.mha.wq, &seed, 0.5);
    int64_t kl_bad[B] = {T, T + 1}, kl_neg[B] = {-1, T};
    attn_sdpa_opts bad[] = {{.threads = -1},      {.block_q = -1},        {.block_k = -1},
                            {.scale = INFINITY},  {.scale = -INFINITY},   {.scale = NAN},
                            {.causal = 7},        {.algo = 9},            {.kv_len = kl_bad},
                            {.kv_len = kl_neg}};
    for (size_t o = 0; o < sizeof bad / sizeof *bad; ++o) {
        for (int layer = 0; layer < 3; ++layer) {
            full_trace f;
            full_trace_new(&f, dt, B, T, C, H, F);
            lt out = lt_new(dt, 3, (int64_t[]){B, T, C});
            memset(out.mem, 0xA5, (size_t)(B * T * C) * sizeof(double));
            attn_status st;
            if (layer == 0) { /* MHA: its own trace slots only */
                attn_trace mt = {.q = f.tr.q, .k = f.tr.k, .v = f.tr.v, .scores = f.tr.scores,
                                 .attention = f.tr.attention, .read_values = f.tr.read_values,
                                 .concat = f.tr.concat, .lse = f.tr.lse};
                st = attn_mha_forward(&ec.mha, &p.mha, &x.v, NULL, &bad[o], &out.v, &mt, NULL, 0);
            } else {
                ec.norm = layer == 1 ? ATTN_PRE_NORM : ATTN_POST_NORM;
                st = attn_encoder_forward(&ec, &p, &x.v, &bad[o], &out.v, &f.tr, NULL, 0);
            }
            attn_status want = bad[o].kv_len ? ATTN_ERANGE : ATTN_EINVAL;
            ck_assert_msg(st == want, "option %zu, layer %d: status %d", o, layer, st);
            full_trace_untouched(&f, &out, layer == 0 ? "mha" : "encoder");
            full_trace_free(&f);
            lt_free(&out);
        }
    }
    /* kv_len out of range: one documented status through every entry point */
    attn_sdpa_opts o = {.kv_len = kl_bad};
    lt q = lt_rand(dt, 4, (int64_t[]){B, H, T, C / H}, &seed, 1.0);
    lt so = lt_new(dt, 4, (int64_t[]){B, H, T, C / H}), lo = lt_new(dt, 3, (int64_t[]){B, T, C});
    ck_assert_int_eq(attn_sdpa(&q.v, &q.v, &q.v, &o, &so.v, NULL, 0), ATTN_ERANGE);
    ck_assert_int_eq(attn_mha_forward(&ec.mha, &p.mha, &x.v, NULL, &o, &lo.v, NULL, NULL, 0),
                     ATTN_ERANGE);
    ck_assert_int_eq(attn_encoder_forward(&ec, &p, &x.v, &o, &lo.v, NULL, NULL, 0), ATTN_ERANGE);
    lt_free(&q); lt_free(&so); lt_free(&lo); lt_free(&x);
    free(slab);
}
END_TEST

/* ---- FFN against the reference -------------------------------------------- */

START_TEST(ff_vs_reference) {
    /* sizes: small, and one whose bias fill (B T F > 16384) takes the threaded row path */
    static const int64_t sz[2][3] = {{5, 6, 10}, {40, 16, 300}}; /* T, C, F; B = 2 */
    for (int z = 0; z < 2; ++z)
        for (int d = 0; d < 2; ++d)
            for (int act = 0; act < 3; ++act) {
                int64_t T = sz[z][0], C = sz[z][1], F = sz[z][2], n = 2 * T;
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                attn_ffn_config c = {.dtype = dt, .d_model = C, .d_ff = F,
                                     .act = (attn_act)act, .bias = act != 1 || z};
                size_t ps = attn_ffn_params_size(&c);
                void *slab = slab_new(ps);
                attn_ffn_params p;
                ck_assert_int_eq(attn_ffn_params_bind(&p, &c, slab, ps), ATTN_OK);
                uint64_t seed = 3 + (uint64_t)act;
                fill_views(&p.w1, 4, &seed, z ? 0.2 : 0.6);
                lt x = lt_rand(dt, 3, (int64_t[]){2, T, C}, &seed, 1.0);
                lt out = lt_new(dt, 3, (int64_t[]){2, T, C});
                lt hp = lt_new(dt, 3, (int64_t[]){2, T, F});
                attn_trace tr = {.mlp_hidden_pre = &hp.v};
                ck_assert_int_eq(attn_ffn_forward(&c, &p, &x.v, &out.v, &tr, NULL, 0), ATTN_OK);
                double *dx = lt_doubles(&x.v), *w1 = lt_doubles(&p.w1), *w2 = lt_doubles(&p.w2);
                double *b1 = c.bias ? lt_doubles(&p.b1) : NULL;
                double *b2 = c.bias ? lt_doubles(&p.b2) : NULL;
                double *want = malloc(sizeof(double) * (size_t)(n * C));
                double *pre = malloc(sizeof(double) * (size_t)(n * F));
                ref_l_ffn(n, C, F, act, dx, w1, b1, w2, b2, want);
                ref_l_linear(n, C, F, dx, w1, b1, pre);
                attn_view wv = lt_wrap(want, 3, out.v.shape), pv = lt_wrap(pre, 3, hp.v.shape);
                double tol = d ? 1e-12 : 1e-5;
                tu_check_close(&out.v, &wv, tol, tol, "ffn vs ref");
                tu_check_close(&hp.v, &pv, tol, tol, "ffn hidden_pre vs ref");
                free(dx); free(w1); free(w2); free(b1); free(b2); free(slab);
                free(want); free(pre);
                lt_free(&x); lt_free(&out); lt_free(&hp);
            }
}
END_TEST

/* ---- the ViT seed, from its own weights, trace to 1e-12 ------------------ */

START_TEST(ef_vit_seed_trace) {
    fx_file *fx = fx_load("vit_seed.txt");
    ck_assert_ptr_nonnull(fx);
    attn_encoder_config c = {.mha = {.dtype = ATTN_F64, .d_model = 4, .heads = 2},
                             .ffn = {.dtype = ATTN_F64, .d_model = 4, .d_ff = 6,
                                     .act = ATTN_ACT_GELU_TANH},
                             .eps = 1e-5, .norm = ATTN_PRE_NORM};
    attn_encoder_params p;
    lt wq = lt_from_fx(fx_get(fx, "W_Q"), ATTN_F64), wk = lt_from_fx(fx_get(fx, "W_K"), ATTN_F64);
    lt wv = lt_from_fx(fx_get(fx, "W_V"), ATTN_F64), wo = lt_from_fx(fx_get(fx, "W_O"), ATTN_F64);
    lt w1 = lt_from_fx(fx_get(fx, "W_1"), ATTN_F64), w2 = lt_from_fx(fx_get(fx, "W_2"), ATTN_F64);
    memset(&p, 0, sizeof p);
    p.mha.wq = wq.v; p.mha.wk = wk.v; p.mha.wv = wv.v; p.mha.wo = wo.v;
    p.ffn.w1 = w1.v; p.ffn.w2 = w2.v;
    fx_tensor *in = fx_get(fx, "input");
    lt x = lt_new(ATTN_F64, 3, (int64_t[]){1, 4, 4});
    memcpy(x.mem, in->data, 16 * sizeof(double));
    static const char *names[] = {"ln1", "Q", "K", "V", "scores", "attention", "read_values",
                                  "concat", "projected_attention", "residual1", "ln2",
                                  "mlp_hidden_pre", "mlp_hidden", "mlp_output", "output"};
    enum { N = sizeof names / sizeof *names };
    lt got[N];
    attn_view *slots[N];
    for (int i = 0; i < N; ++i) {
        fx_tensor *t = fx_get(fx, names[i]);
        int64_t shape[4] = {1, t->shape[0], t->shape[1], t->ndim == 3 ? t->shape[2] : 0};
        got[i] = lt_new(ATTN_F64, t->ndim + 1, shape);
        slots[i] = &got[i].v;
    }
    attn_trace tr = {.ln1 = slots[0], .q = slots[1], .k = slots[2], .v = slots[3],
                     .scores = slots[4], .attention = slots[5], .read_values = slots[6],
                     .concat = slots[7], .projected_attention = slots[8], .residual1 = slots[9],
                     .ln2 = slots[10], .mlp_hidden_pre = slots[11], .mlp_hidden = slots[12],
                     .mlp_output = slots[13], .output = slots[14]};
    lt out = lt_new(ATTN_F64, 3, (int64_t[]){1, 4, 4});
    attn_status st = attn_encoder_forward(&c, &p, &x.v, NULL, &out.v, &tr, NULL, 0);
    ck_assert_msg(st == ATTN_OK, "%s", attn_strerror(st));
    for (int i = 0; i < N; ++i) {
        fx_tensor *t = fx_get(fx, names[i]);
        attn_view want = lt_wrap(t->data, got[i].v.ndim, got[i].v.shape);
        tu_check_close(&got[i].v, &want, 1e-12, 1e-14, names[i]);
        lt_free(&got[i]);
    }
    attn_view wout = lt_wrap(fx_get(fx, "output")->data, 3, out.v.shape);
    tu_check_close(&out.v, &wout, 1e-12, 1e-14, "output");
    lt_free(&x); lt_free(&out); lt_free(&wq); lt_free(&wk); lt_free(&wv); lt_free(&wo);
    lt_free(&w1); lt_free(&w2);
    fx_free(fx);
}
END_TEST

/* ---- permutation equivariance without position, and its loss with it ---- */

START_TEST(ef_permutation_equivariance) {
    attn_encoder_config c = {.mha = {.dtype = ATTN_F64, .d_model = 8, .heads = 2, .bias = true},
                             .ffn = {.dtype = ATTN_F64, .d_model = 8, .d_ff = 16, .bias = true},
                             .ln_affine = true};
    size_t ps = attn_encoder_params_size(&c);
    void *slab = slab_new(ps);
    attn_encoder_params p;
    ck_assert_int_eq(attn_encoder_params_bind(&p, &c, slab, ps), ATTN_OK);
    uint64_t seed = 9;
    attn_view all;
    attn_view_init(&all, ATTN_F64, slab, 1, (int64_t[]){(int64_t)(ps / 8)});
    tu_fill(&all, &seed, 0.5);
    int perm[5] = {2, 0, 4, 3, 1};
    lt x = lt_rand(ATTN_F64, 3, (int64_t[]){1, 5, 8}, &seed, 1.0);
    lt pos = lt_rand(ATTN_F64, 3, (int64_t[]){1, 5, 8}, &seed, 1.0);
    lt xp = lt_new(ATTN_F64, 3, (int64_t[]){1, 5, 8});
    lt y = lt_new(ATTN_F64, 3, (int64_t[]){1, 5, 8}), yp = lt_new(ATTN_F64, 3, (int64_t[]){1, 5, 8});
    double *X = x.mem, *XP = xp.mem, *Y = y.mem, *YP = yp.mem;
    for (int t = 0; t < 5; ++t) memcpy(XP + t * 8, X + perm[t] * 8, 8 * sizeof(double));
    ck_assert_int_eq(attn_encoder_forward(&c, &p, &x.v, NULL, &y.v, NULL, NULL, 0), ATTN_OK);
    ck_assert_int_eq(attn_encoder_forward(&c, &p, &xp.v, NULL, &yp.v, NULL, NULL, 0), ATTN_OK);
    double err = 0;
    for (int t = 0; t < 5; ++t)
        for (int k = 0; k < 8; ++k) err = fmax(err, fabs(YP[t * 8 + k] - Y[perm[t] * 8 + k]));
    ck_assert_msg(err < 1e-12, "equivariance error %g", err);
    /* add positions (not permuted with the tokens): equivariance is gone */
    ck_assert_int_eq(attn_add(&x.v, &pos.v, &x.v), ATTN_OK);
    ck_assert_int_eq(attn_add(&xp.v, &pos.v, &xp.v), ATTN_OK);
    ck_assert_int_eq(attn_encoder_forward(&c, &p, &x.v, NULL, &y.v, NULL, NULL, 0), ATTN_OK);
    ck_assert_int_eq(attn_encoder_forward(&c, &p, &xp.v, NULL, &yp.v, NULL, NULL, 0), ATTN_OK);
    err = 0;
    for (int t = 0; t < 5; ++t)
        for (int k = 0; k < 8; ++k) err = fmax(err, fabs(YP[t * 8 + k] - Y[perm[t] * 8 + k]));
    ck_assert_msg(err > 1e-3, "positions should break equivariance (%g)", err);
    lt_free(&x); lt_free(&pos); lt_free(&xp); lt_free(&y); lt_free(&yp); free(slab);
}
END_TEST

/* ---- encoder against the naive reference, both norms, both dtypes ------- */

START_TEST(ef_vs_reference) {
    for (int d = 0; d < 2; ++d)
        for (int post = 0; post < 2; ++post) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            attn_encoder_config c = {
                .mha = {.dtype = dt, .d_model = 8, .heads = 4, .kv_heads = 2, .bias = true},
                .ffn = {.dtype = dt, .d_model = 8, .d_ff = 12, .act = ATTN_ACT_GELU_ERF,
                        .bias = true},
                .norm = post ? ATTN_POST_NORM : ATTN_PRE_NORM, .ln_affine = true, .eps = 1e-5};
            size_t ps = attn_encoder_params_size(&c);
            void *slab = slab_new(ps);
            attn_encoder_params p;
            ck_assert_int_eq(attn_encoder_params_bind(&p, &c, slab, ps), ATTN_OK);
            uint64_t seed = 21 + (uint64_t)post;
            attn_view all;
            attn_view_init(&all, dt, slab, 1, (int64_t[]){(int64_t)(ps / attn_dtype_size(dt))});
            tu_fill(&all, &seed, 0.5);
            int64_t B = 2, T = 6, C = 8;
            lt x = lt_rand(dt, 3, (int64_t[]){B, T, C}, &seed, 1.0);
            lt out = lt_new(dt, 3, (int64_t[]){B, T, C});
            attn_sdpa_opts o = {.causal = ATTN_CAUSAL_TOP_LEFT};
            ck_assert_int_eq(attn_encoder_forward(&c, &p, &x.v, &o, &out.v, NULL, NULL, 0), ATTN_OK);
            /* reference */
            double *X = lt_doubles(&x.v), *g1 = lt_doubles(&p.ln1_g), *b1 = lt_doubles(&p.ln1_b);
            double *g2 = lt_doubles(&p.ln2_g), *b2 = lt_doubles(&p.ln2_b);
            double *w[8], *f[4];
            const attn_view *pv[8] = {&p.mha.wq, &p.mha.wk, &p.mha.wv, &p.mha.wo,
                                      &p.mha.bq, &p.mha.bk, &p.mha.bv, &p.mha.bo};
            const attn_view *fv[4] = {&p.ffn.w1, &p.ffn.b1, &p.ffn.w2, &p.ffn.b2};
            for (int i = 0; i < 8; ++i) w[i] = lt_doubles(pv[i]);
            for (int i = 0; i < 4; ++i) f[i] = lt_doubles(fv[i]);
            int64_t n = B * T;
            double *t1 = malloc(sizeof(double) * n * C), *t2 = malloc(sizeof(double) * n * C);
            double *t3 = malloc(sizeof(double) * n * C), *want = malloc(sizeof(double) * n * C);
            ref_l_mha_args a = {B, T, T, C, C, 4, 2, 2, NULL, NULL, w[0], w[1], w[2], w[3],
                              w[4], w[5], w[6], w[7], 1, NULL, NULL, 0};
            if (!post) {
                ref_l_layernorm(n, C, 1e-5, X, g1, b1, t1);
                a.xq = a.xkv = t1;
                ref_l_mha(&a, t2, NULL);
                for (int64_t i = 0; i < n * C; ++i) t2[i] += X[i]; /* r1 */
                ref_l_layernorm(n, C, 1e-5, t2, g2, b2, t1);
                ref_l_ffn(n, C, 12, 1, t1, f[0], f[1], f[2], f[3], t3);
                for (int64_t i = 0; i < n * C; ++i) want[i] = t2[i] + t3[i];
            } else {
                a.xq = a.xkv = X;
                ref_l_mha(&a, t1, NULL);
                for (int64_t i = 0; i < n * C; ++i) t1[i] += X[i];
                ref_l_layernorm(n, C, 1e-5, t1, g1, b1, t2); /* r1 */
                ref_l_ffn(n, C, 12, 1, t2, f[0], f[1], f[2], f[3], t3);
                for (int64_t i = 0; i < n * C; ++i) t3[i] += t2[i];
                ref_l_layernorm(n, C, 1e-5, t3, g2, b2, want);
            }
            attn_view wv = lt_wrap(want, 3, out.v.shape);
            double tol = d ? 1e-12 : 2e-5;
            tu_check_close(&out.v, &wv, tol, tol, post ? "post-norm encoder" : "pre-norm encoder");
            free(X); free(g1); free(b1); free(g2); free(b2); free(t1); free(t2); free(t3); free(want);
            for (int i = 0; i < 8; ++i) free(w[i]);
            for (int i = 0; i < 4; ++i) free(f[i]);
            lt_free(&x); lt_free(&out); free(slab);
        }
}
END_TEST

/* ---- PyTorch parity ------------------------------------------------------ */

START_TEST(mf_torch_parity) {
    static const char *cases[] = {"layers_mha_self.txt", "layers_mha_causal_pad.txt",
                                  "layers_mha_cross.txt"};
    for (int ci = 0; ci < 3; ++ci) {
        fx_file *fx = fx_load(cases[ci]);
        ck_assert_ptr_nonnull(fx);
        bool bias = fx_meta(fx, "bias", 0), cross = fx_find(fx, "x_kv") != NULL;
        attn_mha_config c = {.dtype = ATTN_F64, .d_model = fx_meta(fx, "C", 0),
                             .heads = fx_meta(fx, "H", 0), .d_kv = fx_meta(fx, "Ckv", 0),
                             .bias = bias};
        lt s[8];
        attn_mha_params p;
        torch_mha(fx, bias, &p, s);
        lt xq = lt_from_fx(fx_get(fx, "x_q"), ATTN_F64);
        lt xkv = cross ? lt_from_fx(fx_get(fx, "x_kv"), ATTN_F64) : (lt){0};
        fx_tensor *want = fx_get(fx, "out");
        lt out = lt_new(ATTN_F64, 3, want->shape);
        int64_t kv_len[8];
        attn_sdpa_opts o = torch_opts(fx, kv_len);
        attn_status st = attn_mha_forward(&c, &p, &xq.v, cross ? &xkv.v : NULL, &o, &out.v,
                                          NULL, NULL, 0);
        ck_assert_msg(st == ATTN_OK, "%s: %s", cases[ci], attn_strerror(st));
        attn_view wv = lt_wrap(want->data, 3, want->shape);
        tu_check_close(&out.v, &wv, 1e-12, 1e-13, cases[ci]);
        for (int i = 0; i < 8; ++i) lt_free(&s[i]);
        lt_free(&xq); lt_free(&xkv); lt_free(&out);
        fx_free(fx);
    }
}
END_TEST

START_TEST(ef_torch_parity) {
    static const char *cases[] = {"layers_enc_post_relu_pad.txt", "layers_enc_post_gelu_causal.txt",
                                  "layers_enc_pre_gelu_pad.txt", "layers_enc_pre_relu_causal.txt"};
    for (int ci = 0; ci < 4; ++ci) {
        fx_file *fx = fx_load(cases[ci]);
        ck_assert_ptr_nonnull(fx);
        attn_encoder_config c;
        attn_encoder_params p;
        lt s[16];
        torch_encoder(fx, &c, &p, s);
        lt x = lt_from_fx(fx_get(fx, "x"), ATTN_F64);
        fx_tensor *want = fx_get(fx, "out");
        lt out = lt_new(ATTN_F64, 3, want->shape);
        int64_t kv_len[8];
        attn_sdpa_opts o = torch_opts(fx, kv_len);
        attn_status st = attn_encoder_forward(&c, &p, &x.v, &o, &out.v, NULL, NULL, 0);
        ck_assert_msg(st == ATTN_OK, "%s: %s", cases[ci], attn_strerror(st));
        attn_view wv = lt_wrap(want->data, 3, want->shape);
        tu_check_close(&out.v, &wv, 1e-12, 1e-12, cases[ci]);
        for (int i = 0; i < 16; ++i) lt_free(&s[i]);
        lt_free(&x); lt_free(&out);
        fx_free(fx);
    }
}
END_TEST

START_TEST(ec_config_errors) {
    attn_encoder_config c = {.mha = {.dtype = ATTN_F64, .d_model = 8, .heads = 2},
                             .ffn = {.dtype = ATTN_F32, .d_model = 8}}, r;
    ck_assert_int_eq(attn_encoder_config_resolve(&c, &r), ATTN_EINVAL); /* dtypes differ */
    c.ffn.dtype = ATTN_F64;
    c.ffn.d_model = 6;
    ck_assert_int_eq(attn_encoder_config_resolve(&c, &r), ATTN_EINVAL); /* widths differ */
    c.ffn.d_model = 8;
    c.eps = -1;
    ck_assert_int_eq(attn_encoder_config_resolve(&c, &r), ATTN_EINVAL);
    c.eps = NAN;
    ck_assert_int_eq(attn_encoder_config_resolve(&c, &r), ATTN_EINVAL);
    c.eps = 0;
    ck_assert_int_eq(attn_encoder_config_resolve(&c, &r), ATTN_OK);
    ck_assert(r.eps == 1e-5);
    ck_assert_int_eq(r.ffn.d_ff, 32);
    c.ffn.act = (attn_act)7;
    ck_assert_int_eq(attn_encoder_config_resolve(&c, &r), ATTN_EINVAL);
}
END_TEST

int main(void) {
    Suite *s = suite_create("layers");
    struct { const char *tc; const TTest *t; } tests[] = {
        {"attn_mha_config_resolve", mc_config_errors},
        {"attn_mha_params_bind", mp_param_count_and_bind},
        {"attn_mha_forward", mf_vs_reference},
        {"attn_mha_forward", mf_lesson11_tiny},
        {"attn_mha_forward", mf_errors},
        {"attn_mha_forward", mf_torch_parity},
        {"attn_mha_forward", lf_refused_writes_nothing},
        {"attn_ffn_forward", ff_vs_reference},
        {"attn_encoder_config_resolve", ec_config_errors},
        {"attn_encoder_forward", ef_vit_seed_trace},
        {"attn_encoder_forward", ef_permutation_equivariance},
        {"attn_encoder_forward", ef_vs_reference},
        {"attn_encoder_forward", ef_torch_parity},
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
