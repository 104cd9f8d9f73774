/* SPDX-License-Identifier: MIT */
/* Check suite: 8 threads run every public forward and backward at once, bit-identical to
 * serial; and the thread rule (src/core/threads.c) as a host program sees it. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

/*
 * Every job reads shared, read-only inputs (built once, serially) and writes
 * its outputs into the calling thread's own arena, carved in the same order
 * every time, with its own workspace. A serial pass records each job's
 * arena bytes; then NTHREADS threads run every job ROUNDS times, each
 * starting at a different job, and compare their bytes with the serial
 * ones. Accumulating backwards start from a zeroed arena, so they compare
 * too. sdpa runs with opts.threads = 0: its own OpenMP team inside each
 * user thread, which is the case that shares the BLAS thread setting.
 */
enum { NTHREADS = 8, ROUNDS = 2, ARENA = 1 << 19 };

typedef struct thr {
    unsigned char *arena;
    size_t used, high; /* bytes carved by the current job; the most any job carved */
    void *work;        /* this thread's workspace, grown on demand */
    size_t work_size;
} thr;

/* A zeroed, 64-byte-aligned output view in the thread's arena. */
static attn_view th_out(thr *t, attn_dtype dt, int ndim, const int64_t *shape) {
    size_t n = attn_dtype_size(dt);
    for (int k = 0; k < ndim; ++k)
        n *= (size_t)shape[k];
    t->used = (t->used + 63) & ~(size_t)63;
    ck_assert_uint_le(t->used + n, ARENA);
    attn_view v;
    ck_assert_int_eq(attn_view_init(&v, dt, t->arena + t->used, ndim, shape), ATTN_OK);
    t->used += n;
    return v;
}
static void *th_scalar(thr *t, size_t bytes) {
    t->used = (t->used + 63) & ~(size_t)63;
    void *p = t->arena + t->used;
    t->used += bytes;
    return p;
}
/* The thread's own workspace of `need` bytes (never shared, never NULL). */
static void *th_work(thr *t, size_t need) {
    if (need > t->work_size || !t->work) {
        free(t->work);
        t->work = malloc(need ? need : 1);
        t->work_size = need;
    }
    return t->work;
}

#define SH(...)  ((const int64_t[]){__VA_ARGS__})
#define OK(call) ck_assert_int_eq((call), ATTN_OK)
#define ATTN_TRY_T(call)                                                                       \
    do {                                                                                       \
        attn_status st_ = (call);                                                              \
        if (st_ != ATTN_OK)                                                                    \
            return st_;                                                                        \
    } while (0)

/* ---- shared inputs, one set per dtype ------------------------------------------------ */

enum { B = 2, T = 16, C = 32, H = 4, HKV = 2, D = 8, TK = 24, F = 64 };

typedef struct inputs {
    attn_dtype dt;
    attn_view x, dy, gamma, beta, bias, w, wb, dyl, p, mean, rstd;
    attn_view q, k, v, dout, out, lse;
    attn_view keep, table, image, a2;
    attn_sdpa_opts opts;
    attn_mha_config mha;
    attn_mha_params mp;
    attn_ffn_config ffn;
    attn_ffn_params fp;
    attn_encoder_config enc;
    attn_encoder_params ep;
    attn_trace mcache, fcache, ecache;
    attn_view mviews[5], fviews[2], eviews[15];
    void *mem[32];
    int nmem;
} inputs;

static inputs IN[2];

static attn_view in_tensor(inputs *in, attn_dtype dt, int ndim, const int64_t *shape,
                           uint64_t *seed) {
    size_t n = 1;
    for (int k = 0; k < ndim; ++k)
        n *= (size_t)shape[k];
    void *m = calloc(n, attn_dtype_size(dt));
    in->mem[in->nmem++] = m;
    attn_view v;
    OK(attn_view_init(&v, dt, m, ndim, shape));
    if (dt == ATTN_U8)
        for (size_t i = 0; i < n; ++i)
            ((unsigned char *)m)[i] = (unsigned char)(tu_next(seed) % 4 != 0);
    else
        tu_fill(&v, seed, 1.0);
    return v;
}
static void *in_slab(inputs *in, size_t bytes) {
    void *m = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    memset(m, 0, bytes);
    in->mem[in->nmem++] = m;
    return m;
}

static void inputs_build(inputs *in, attn_dtype dt) {
    uint64_t seed = dt == ATTN_F64 ? 11 : 7;
    memset(in, 0, sizeof *in);
    in->dt = dt;
    in->x = in_tensor(in, dt, 3, SH(B, T, C), &seed);
    in->dy = in_tensor(in, dt, 3, SH(B, T, C), &seed);
    in->gamma = in_tensor(in, dt, 1, SH(C), &seed);
    in->beta = in_tensor(in, dt, 1, SH(C), &seed);
    in->bias = in_tensor(in, dt, 1, SH(F), &seed);
    in->w = in_tensor(in, dt, 2, SH(C, F), &seed);
    in->wb = in_tensor(in, dt, 1, SH(F), &seed);
    in->dyl = in_tensor(in, dt, 3, SH(B, T, F), &seed);
    in->q = in_tensor(in, dt, 4, SH(B, H, T, D), &seed);
    in->k = in_tensor(in, dt, 4, SH(B, HKV, TK, D), &seed);
    in->v = in_tensor(in, dt, 4, SH(B, HKV, TK, D), &seed);
    in->dout = in_tensor(in, dt, 4, SH(B, H, T, D), &seed);
    in->keep = in_tensor(in, ATTN_U8, 4, SH(1, 1, T, TK), &seed);
    in->table = in_tensor(in, dt, 2, SH(T + 4, C), &seed);
    in->image = in_tensor(in, dt, 3, SH(3, 8, 8), &seed);
    /* derived inputs, computed once: probabilities, LN statistics, sdpa out and lse */
    in->p = in_tensor(in, dt, 3, SH(B, T, C), &seed);
    OK(attn_softmax(&in->x, &in->p));
    in->mean = in_tensor(in, dt, 2, SH(B, T), &seed);
    in->rstd = in_tensor(in, dt, 2, SH(B, T), &seed);
    attn_view y = in_tensor(in, dt, 3, SH(B, T, C), &seed);
    OK(attn_layernorm(1e-5, &in->x, &in->gamma, &in->beta, &y, &in->mean, &in->rstd));
    OK(attn_view_select(&in->x, 0, 0, &in->a2)); /* (T, C) for the SVD */
    in->out = in_tensor(in, dt, 4, SH(B, H, T, D), &seed);
    in->lse = in_tensor(in, dt, 3, SH(B, H, T), &seed);
    in->opts = (attn_sdpa_opts){.causal = ATTN_CAUSAL_BOTTOM_RIGHT, .keep = &in->keep};
    attn_sdpa_opts o = in->opts;
    o.lse = &in->lse;
    OK(attn_sdpa(&in->q, &in->k, &in->v, &o, &in->out, NULL, 0));
    /* layers: parameters from attn_init, caches from one serial forward */
    in->mha =
        (attn_mha_config){.dtype = dt, .d_model = C, .heads = H, .kv_heads = HKV, .bias = true};
    size_t n = attn_mha_params_size(&in->mha);
    OK(attn_mha_params_bind(&in->mp, &in->mha, in_slab(in, n), n));
    attn_view *mv[] = {&in->mp.wq, &in->mp.wk, &in->mp.wv, &in->mp.wo,
                       &in->mp.bq, &in->mp.bk, &in->mp.bv, &in->mp.bo};
    for (int i = 0; i < 8; ++i)
        OK(attn_init_normal(3, (uint64_t)i, 0, 0.0, 0.2, mv[i]));
    n = attn_mha_cache_size(&in->mha, B, T, T);
    OK(attn_mha_cache_bind(&in->mha, B, T, T, in_slab(in, n), n, in->mviews, &in->mcache));
    attn_view mo = in_tensor(in, dt, 3, SH(B, T, C), &seed);
    OK(attn_mha_forward(&in->mha, &in->mp, &in->x, NULL, NULL, &mo, &in->mcache, NULL, 0));

    in->ffn = (attn_ffn_config){
        .dtype = dt, .d_model = C, .d_ff = F, .bias = true, .act = ATTN_ACT_GELU_TANH};
    n = attn_ffn_params_size(&in->ffn);
    OK(attn_ffn_params_bind(&in->fp, &in->ffn, in_slab(in, n), n));
    attn_view *fv[] = {&in->fp.w1, &in->fp.b1, &in->fp.w2, &in->fp.b2};
    for (int i = 0; i < 4; ++i)
        OK(attn_init_normal(4, (uint64_t)i, 0, 0.0, 0.2, fv[i]));
    in->fviews[0] = in_tensor(in, dt, 3, SH(B, T, F), &seed);
    in->fviews[1] = in_tensor(in, dt, 3, SH(B, T, F), &seed);
    in->fcache = (attn_trace){.mlp_hidden_pre = &in->fviews[0], .mlp_hidden = &in->fviews[1]};
    attn_view fo = in_tensor(in, dt, 3, SH(B, T, C), &seed);
    OK(attn_ffn_forward(&in->ffn, &in->fp, &in->x, &fo, &in->fcache, NULL, 0));

    in->enc = (attn_encoder_config){
        .mha = in->mha, .ffn = in->ffn, .ln_affine = true, .norm = ATTN_PRE_NORM};
    n = attn_encoder_params_size(&in->enc);
    OK(attn_encoder_params_bind(&in->ep, &in->enc, in_slab(in, n), n));
    OK(attn_init_uniform(5, 0, 0, -0.3, 0.3, &in->ep.mha.wq));
    OK(attn_init_uniform(5, 1, 0, -0.3, 0.3, &in->ep.mha.wk));
    OK(attn_init_uniform(5, 2, 0, -0.3, 0.3, &in->ep.mha.wv));
    OK(attn_init_uniform(5, 3, 0, -0.3, 0.3, &in->ep.mha.wo));
    OK(attn_init_uniform(5, 4, 0, -0.3, 0.3, &in->ep.ffn.w1));
    OK(attn_init_uniform(5, 5, 0, -0.3, 0.3, &in->ep.ffn.w2));
    OK(attn_init_uniform(5, 6, 0, 0.5, 1.5, &in->ep.ln1_g));
    OK(attn_init_uniform(5, 7, 0, 0.5, 1.5, &in->ep.ln2_g));
    n = attn_encoder_cache_size(&in->enc, B, T);
    OK(attn_encoder_cache_bind(&in->enc, B, T, in_slab(in, n), n, in->eviews, &in->ecache));
    attn_view eo = in_tensor(in, dt, 3, SH(B, T, C), &seed);
    OK(attn_encoder_forward(&in->enc, &in->ep, &in->x, NULL, &eo, &in->ecache, NULL, 0));
}

static void inputs_free(inputs *in) {
    for (int i = 0; i < in->nmem; ++i)
        free(in->mem[i]);
    in->nmem = 0;
}

/* ---- the jobs: one call (or an in-place pair) each, outputs in the thread's arena ---- */

typedef attn_status (*job_fn)(thr *t, const inputs *in);

static attn_status j_gemm(thr *t, const inputs *in) {
    attn_view c = th_out(t, in->dt, 3, SH(B, T, F));
    attn_view wt;
    attn_view_transpose(&in->w, 0, 1, &wt); /* (F, C) viewed back: packed or transposed */
    size_t n = attn_gemm_workspace_size(ATTN_NO_TRANS, ATTN_TRANS, &in->x, &wt, &c);
    return attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, 0.5, &in->x, &wt, 0.0, &c, th_work(t, n), n);
}
static attn_status j_copy(thr *t, const inputs *in) {
    attn_view y = th_out(t, in->dt, 3, SH(B, T, C));
    return attn_view_copy(&in->x, &y);
}
static attn_status j_softmax(thr *t, const inputs *in) {
    attn_view y = th_out(t, in->dt, 3, SH(B, T, C));
    return attn_softmax(&in->x, &y);
}
static attn_status j_softmax_bwd(thr *t, const inputs *in) {
    attn_view dx = th_out(t, in->dt, 3, SH(B, T, C));
    return attn_softmax_backward(&in->p, &in->dy, &dx);
}
static attn_status j_layernorm(thr *t, const inputs *in) {
    attn_view y = th_out(t, in->dt, 3, SH(B, T, C)), m = th_out(t, in->dt, 2, SH(B, T)),
              r = th_out(t, in->dt, 2, SH(B, T));
    return attn_layernorm(1e-5, &in->x, &in->gamma, &in->beta, &y, &m, &r);
}
static attn_status j_layernorm_bwd(thr *t, const inputs *in) {
    attn_view dx = th_out(t, in->dt, 3, SH(B, T, C)), dg = th_out(t, in->dt, 1, SH(C)),
              db = th_out(t, in->dt, 1, SH(C));
    return attn_layernorm_backward(&in->x, &in->gamma, &in->mean, &in->rstd, &in->dy, &dx, &dg,
                                   &db);
}
static attn_status j_activation(thr *t, const inputs *in) {
    for (int a = 0; a < 3; ++a) {
        attn_view y = th_out(t, in->dt, 3, SH(B, T, C));
        ATTN_TRY_T(attn_activation((attn_act)a, &in->x, &y));
    }
    attn_view g = th_out(t, in->dt, 3, SH(B, T, C)), r = th_out(t, in->dt, 3, SH(B, T, C));
    ATTN_TRY_T(attn_gelu(ATTN_ACT_GELU_ERF, &in->x, &g));
    ATTN_TRY_T(attn_relu(&in->x, &r));
    uint32_t *rng = th_scalar(t, 4 * sizeof(uint32_t) + sizeof(uint64_t));
    attn_philox4x32_10((const uint32_t[]){1, 2, 3, 4}, (const uint32_t[]){5, 6}, rng);
    uint64_t bits = attn_rng_bits(7, 8, 9);
    memcpy(rng + 4, &bits, sizeof bits);
    return ATTN_OK;
}
static attn_status j_activation_bwd(thr *t, const inputs *in) {
    for (int a = 0; a < 3; ++a) {
        attn_view dx = th_out(t, in->dt, 3, SH(B, T, C));
        ATTN_TRY_T(attn_activation_backward((attn_act)a, &in->x, &in->dy, &dx));
    }
    return ATTN_OK;
}
static attn_status j_add(thr *t, const inputs *in) {
    attn_view y = th_out(t, in->dt, 3, SH(B, T, C));
    return attn_add(&in->x, &in->gamma, &y);
}
static attn_status j_add_bwd(thr *t, const inputs *in) {
    attn_view dx = th_out(t, in->dt, 3, SH(B, T, C)), db = th_out(t, in->dt, 1, SH(C));
    return attn_add_backward(&in->dy, &dx, &db);
}
static attn_status j_linear(thr *t, const inputs *in) {
    attn_view y = th_out(t, in->dt, 3, SH(B, T, F));
    size_t n = attn_linear_workspace_size(&in->x, &in->w, &y);
    return attn_linear(&in->x, &in->w, &in->wb, &y, th_work(t, n), n);
}
static attn_status j_linear_bwd(thr *t, const inputs *in) {
    attn_view dx = th_out(t, in->dt, 3, SH(B, T, C)), dw = th_out(t, in->dt, 2, SH(C, F)),
              db = th_out(t, in->dt, 1, SH(F));
    size_t n = attn_linear_backward_workspace_size(&in->x, &in->w, &in->dyl, &dx, &dw);
    return attn_linear_backward(&in->x, &in->w, &in->dyl, &dx, &dw, &db, th_work(t, n), n);
}
static attn_status j_sdpa(thr *t, const inputs *in, attn_algo algo) {
    attn_view o = th_out(t, in->dt, 4, SH(B, H, T, D)), l = th_out(t, in->dt, 3, SH(B, H, T));
    attn_view w = th_out(t, in->dt, 4, SH(B, H, T, TK));
    attn_sdpa_opts opts = in->opts;
    opts.algo = algo;
    opts.lse = &l;
    opts.weights = algo == ATTN_ALGO_MATERIALIZED ? &w : NULL;
    size_t n = attn_sdpa_workspace_size(&in->q, &in->k, &in->v, &opts);
    return attn_sdpa(&in->q, &in->k, &in->v, &opts, &o, th_work(t, n), n);
}
static attn_status j_sdpa_mat(thr *t, const inputs *in) {
    return j_sdpa(t, in, ATTN_ALGO_MATERIALIZED);
}
static attn_status j_sdpa_tiled(thr *t, const inputs *in) {
    return j_sdpa(t, in, ATTN_ALGO_TILED);
}
static attn_status j_sdpa_bwd(thr *t, const inputs *in) {
    attn_view dq = th_out(t, in->dt, 4, SH(B, H, T, D)),
              dk = th_out(t, in->dt, 4, SH(B, HKV, TK, D)),
              dv = th_out(t, in->dt, 4, SH(B, HKV, TK, D));
    size_t n = attn_sdpa_backward_workspace_size(&in->q, &in->k, &in->v, &in->opts);
    return attn_sdpa_backward(&in->q, &in->k, &in->v, &in->opts, &in->out, &in->lse, &in->dout,
                              &dq, &dk, &dv, th_work(t, n), n);
}
static attn_status j_mha(thr *t, const inputs *in) {
    attn_view o = th_out(t, in->dt, 3, SH(B, T, C));
    size_t n = attn_mha_workspace_size(&in->mha, &in->x, NULL, NULL, NULL);
    return attn_mha_forward(&in->mha, &in->mp, &in->x, NULL, NULL, &o, NULL, th_work(t, n), n);
}
static attn_status j_mha_bwd(thr *t, const inputs *in) {
    attn_view dx = th_out(t, in->dt, 3, SH(B, T, C));
    size_t n = attn_mha_params_size(&in->mha);
    attn_mha_params g;
    ATTN_TRY_T(attn_mha_params_bind(&g, &in->mha, th_scalar(t, n), n));
    n = attn_mha_backward_workspace_size(&in->mha, &in->x, NULL, NULL);
    return attn_mha_backward(&in->mha, &in->mp, &in->x, NULL, NULL, &in->mcache, &in->dy, &dx,
                             NULL, &g, th_work(t, n), n);
}
static attn_status j_ffn(thr *t, const inputs *in) {
    attn_view o = th_out(t, in->dt, 3, SH(B, T, C));
    size_t n = attn_ffn_workspace_size(&in->ffn, &in->x, NULL);
    return attn_ffn_forward(&in->ffn, &in->fp, &in->x, &o, NULL, th_work(t, n), n);
}
static attn_status j_ffn_bwd(thr *t, const inputs *in) {
    attn_view dx = th_out(t, in->dt, 3, SH(B, T, C));
    size_t n = attn_ffn_params_size(&in->ffn);
    attn_ffn_params g;
    ATTN_TRY_T(attn_ffn_params_bind(&g, &in->ffn, th_scalar(t, n), n));
    n = attn_ffn_backward_workspace_size(&in->ffn, &in->x);
    return attn_ffn_backward(&in->ffn, &in->fp, &in->x, &in->fcache, &in->dy, &dx, &g,
                             th_work(t, n), n);
}
static attn_status j_encoder(thr *t, const inputs *in) {
    attn_view o = th_out(t, in->dt, 3, SH(B, T, C));
    size_t n = attn_encoder_workspace_size(&in->enc, &in->x, NULL, NULL);
    return attn_encoder_forward(&in->enc, &in->ep, &in->x, NULL, &o, NULL, th_work(t, n), n);
}
static attn_status j_encoder_bwd(thr *t, const inputs *in) {
    attn_view dx = th_out(t, in->dt, 3, SH(B, T, C));
    size_t n = attn_encoder_params_size(&in->enc);
    attn_encoder_params g;
    ATTN_TRY_T(attn_encoder_params_bind(&g, &in->enc, th_scalar(t, n), n));
    n = attn_encoder_backward_workspace_size(&in->enc, &in->x, NULL);
    return attn_encoder_backward(&in->enc, &in->ep, &in->x, NULL, &in->ecache, &in->dy, &dx, &g,
                                 th_work(t, n), n);
}
static attn_status j_posenc(thr *t, const inputs *in) {
    attn_view tab = th_out(t, in->dt, 2, SH(T, C));
    ATTN_TRY_T(attn_posenc_sinusoidal(0, &tab));
    attn_view x = th_out(t, in->dt, 3, SH(B, T, C));
    attn_view dtab = th_out(t, in->dt, 2, SH(T + 4, C));
    ATTN_TRY_T(attn_view_copy(&in->x, &x));
    ATTN_TRY_T(attn_posenc_add(2, &in->table, &x));
    ATTN_TRY_T(attn_posenc_add_backward(2, &in->dy, &dtab));
    attn_view pt = th_out(t, in->dt, 2, SH(4, 48));
    return attn_patchify(4, &in->image, &pt);
}
static attn_status j_rope(thr *t, const inputs *in) {
    attn_view x = th_out(t, in->dt, 4, SH(B, H, T, D)),
              g = th_out(t, in->dt, 4, SH(B, H, T, D));
    ATTN_TRY_T(attn_view_copy(&in->q, &x));
    ATTN_TRY_T(attn_rope(ATTN_ROPE_INTERLEAVED, 0, 3, &x));
    ATTN_TRY_T(attn_view_copy(&in->dout, &g));
    return attn_rope_backward(ATTN_ROPE_HALF, 500.0, 1, &g);
}
static attn_status j_init(thr *t, const inputs *in) {
    attn_view u = th_out(t, in->dt, 2, SH(C, F)), nrm = th_out(t, in->dt, 2, SH(C, F));
    attn_view xa = th_out(t, in->dt, 2, SH(C, F)), ka = th_out(t, in->dt, 2, SH(C, F));
    attn_view o = th_out(t, in->dt, 2, SH(F, C));
    ATTN_TRY_T(attn_init_uniform(9, 1, 5, -1, 1, &u));
    ATTN_TRY_T(attn_init_normal(9, 2, 0, 0, 1, &nrm));
    ATTN_TRY_T(attn_init_xavier(ATTN_INIT_NORMAL, 0, 9, 3, &xa));
    ATTN_TRY_T(attn_init_kaiming(ATTN_INIT_UNIFORM, 0, 9, 4, &ka));
    size_t n = attn_init_orthogonal_workspace_size(&o);
    int *info = th_scalar(t, sizeof(int));
    return attn_init_orthogonal(1.0, 9, 5, &o, th_work(t, n), n, info);
}
static attn_status j_diag(thr *t, const inputs *in) {
    attn_view h = th_out(t, in->dt, 2, SH(B, T)), fro = th_out(t, in->dt, 2, SH(B, T));
    attn_view spec = th_out(t, in->dt, 2, SH(B, T)), s = th_out(t, in->dt, 1, SH(T));
    double *mean = th_scalar(t, 2 * sizeof(double));
    int64_t *rank = th_scalar(t, sizeof(int64_t));
    int *info = th_scalar(t, sizeof(int));
    ATTN_TRY_T(attn_diag_entropy(&in->p, &h));
    ATTN_TRY_T(attn_diag_entropy_mean(&in->p, mean));
    ATTN_TRY_T(attn_diag_softmax_jacobian_fro(&in->p, &fro));
    /*
     * Two rows only: dsyevd's dsymv runs on OpenBLAS's thread server even at
     * n = 32, and 8 callers queue there, spinning (docs/reliability.md).
     */
    attn_view p2, spec2;
    ATTN_TRY_T(attn_view_slice(&in->p, 1, 0, 1, 1, &p2));
    ATTN_TRY_T(attn_view_slice(&spec, 1, 0, 1, 1, &spec2));
    size_t n = attn_diag_softmax_jacobian_spectral_workspace_size(&p2);
    ATTN_TRY_T(attn_diag_softmax_jacobian_spectral(&p2, &spec2, th_work(t, n), n, info));
    n = attn_diag_singular_values_workspace_size(&in->a2);
    ATTN_TRY_T(attn_diag_singular_values(&in->a2, &s, th_work(t, n), n, info));
    n = attn_diag_effective_rank_workspace_size(&in->a2);
    return attn_diag_effective_rank(0, &in->a2, mean + 1, rank, th_work(t, n), n, info);
}

static const struct {
    const char *name;
    job_fn fn;
} jobs[] = {
    {"attn_gemm", j_gemm},
    {"attn_view_copy", j_copy},
    {"attn_softmax", j_softmax},
    {"attn_softmax_backward", j_softmax_bwd},
    {"attn_layernorm", j_layernorm},
    {"attn_layernorm_backward", j_layernorm_bwd},
    {"activations (attn_activation, attn_gelu, attn_relu; philox, rng_bits)", j_activation},
    {"attn_activation_backward", j_activation_bwd},
    {"attn_add", j_add},
    {"attn_add_backward", j_add_bwd},
    {"attn_linear", j_linear},
    {"attn_linear_backward", j_linear_bwd},
    {"attn_sdpa materialized", j_sdpa_mat},
    {"attn_sdpa tiled", j_sdpa_tiled},
    {"attn_sdpa_backward", j_sdpa_bwd},
    {"attn_mha_forward", j_mha},
    {"attn_mha_backward", j_mha_bwd},
    {"attn_ffn_forward", j_ffn},
    {"attn_ffn_backward", j_ffn_bwd},
    {"attn_encoder_forward", j_encoder},
    {"attn_encoder_backward", j_encoder_bwd},
    {"posenc (sinusoidal, add, add_backward, patchify)", j_posenc},
    {"attn_rope / attn_rope_backward", j_rope},
    {"init (uniform, normal, xavier, kaiming, orthogonal)", j_init},
    {"diag (entropy, jacobian norms, singular values, rank)", j_diag},
};
enum { NJOBS = sizeof jobs / sizeof *jobs };

/* ---- serial reference and the concurrent run ----------------------------------------- */

typedef struct result {
    unsigned char *bytes;
    size_t n;
} result;
static result serial[2][NJOBS];

/* Run job j of dtype d on thread state t; its arena bytes in *n. */
static attn_status run_job(thr *t, int d, int j, size_t *n) {
    memset(t->arena, 0, t->high); /* every job starts from zeros (backwards accumulate) */
    t->used = 0;
    attn_status st = jobs[j].fn(t, &IN[d]);
    *n = t->used;
    t->high = t->used > t->high ? t->used : t->high;
    return st;
}

static thr thr_new(void) {
    thr t = {aligned_alloc(64, ARENA), 0, 0, NULL, 0};
    memset(t.arena, 0, ARENA);
    return t;
}
static void thr_free(thr *t) {
    free(t->arena);
    free(t->work);
}

typedef struct worker {
    int id, failures;
    char msg[256];
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    thr t = thr_new();
    for (int r = 0; r < ROUNDS; ++r)
        for (int k = 0; k < 2 * NJOBS; ++k) {
            int i = (k + w->id * 3 + r) % (2 * NJOBS), d = i / NJOBS, j = i % NJOBS;
            size_t n;
            attn_status st = run_job(&t, d, j, &n);
            if (st != ATTN_OK || n != serial[d][j].n ||
                memcmp(t.arena, serial[d][j].bytes, n) != 0) {
                if (!w->failures++)
                    snprintf(w->msg, sizeof w->msg, "thread %d, %s %s: %s", w->id, jobs[j].name,
                             d ? "f64" : "f32",
                             st != ATTN_OK ? attn_status_name(st) : "bits differ from serial");
            }
        }
    thr_free(&t);
    return NULL;
}

static void setup(void) {
    inputs_build(&IN[0], ATTN_F32);
    inputs_build(&IN[1], ATTN_F64);
    thr t = thr_new();
    for (int d = 0; d < 2; ++d)
        for (int j = 0; j < NJOBS; ++j) {
            size_t n;
            attn_status st = run_job(&t, d, j, &n);
            ck_assert_msg(st == ATTN_OK, "%s %s serially: %s", jobs[j].name, d ? "f64" : "f32",
                          attn_status_name(st));
            serial[d][j].bytes = malloc(n);
            memcpy(serial[d][j].bytes, t.arena, n);
            serial[d][j].n = n;
        }
    thr_free(&t);
}
static void teardown(void) {
    for (int d = 0; d < 2; ++d) {
        inputs_free(&IN[d]);
        for (int j = 0; j < NJOBS; ++j)
            free(serial[d][j].bytes);
    }
}

/* Serially, a second run gives the same bits (else the threaded comparison means nothing). */
START_TEST(th_serial_repeatable) {
    thr t = thr_new();
    for (int d = 0; d < 2; ++d)
        for (int j = 0; j < NJOBS; ++j) {
            size_t n;
            ck_assert_int_eq(run_job(&t, d, j, &n), ATTN_OK);
            ck_assert_msg(n == serial[d][j].n && memcmp(t.arena, serial[d][j].bytes, n) == 0,
                          "%s %s: a second serial run differs", jobs[j].name,
                          d ? "f64" : "f32");
        }
    thr_free(&t);
}
END_TEST

START_TEST(th_eight_threads_bit_identical) {
    pthread_t tid[NTHREADS];
    worker w[NTHREADS];
    for (int i = 0; i < NTHREADS; ++i) {
        w[i] = (worker){.id = i};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; ++i)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < NTHREADS; ++i)
        ck_assert_msg(w[i].failures == 0, "%d failures; first: %s", w[i].failures, w[i].msg);
}
END_TEST

/* One threaded sdpa (B 1, H 4, T 128, D 32) into out. */
static attn_status fork_sdpa(float *buf, float *out, void *work, size_t wn) {
    int64_t sh[4] = {1, 4, 128, 32};
    attn_view q, k, v, o;
    size_t n = 4 * 128 * 32;
    attn_view_init(&q, ATTN_F32, buf, 4, sh);
    attn_view_init(&k, ATTN_F32, buf + n, 4, sh);
    attn_view_init(&v, ATTN_F32, buf + 2 * n, 4, sh);
    attn_view_init(&o, ATTN_F32, out, 4, sh);
    attn_sdpa_opts opts = {.threads = 2};
    if (attn_sdpa_workspace_size(&q, &k, &v, &opts) > wn)
        return ATTN_ENOMEM;
    return attn_sdpa(&q, &k, &v, &opts, &o, work, wn);
}

/* One attn_gemm large enough for the BLAS's own threads (2 * 680^3 = 6.3e8 flops), on
   integers whose sums are exact in float. */
enum { FG = 680 };
static attn_status fork_gemm(float *g, float *c) {
    attn_view A, B, C;
    attn_view_init(&A, ATTN_F32, g, 2, (int64_t[]){FG, FG});
    attn_view_init(&B, ATTN_F32, g + FG * FG, 2, (int64_t[]){FG, FG});
    attn_view_init(&C, ATTN_F32, c, 2, (int64_t[]){FG, FG});
    return attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &A, &B, 0.0, &C, NULL, 0);
}

/* fork_gemm on buffers of its own: a product large enough for the BLAS's threads. */
static attn_status fork_gemm_ok(void) {
    float *g = calloc(3 * FG * FG, sizeof *g);
    ck_assert_ptr_nonnull(g);
    attn_status st = fork_gemm(g, g + 2 * FG * FG);
    free(g);
    return st;
}

/* A threaded call in the parent, then fork: the child's threaded call finishes with the
   same bytes (with the OpenMP OpenBLAS the parent's libgomp pool is dead in the child, so
   attn must not start a team there; the pthread OpenBLAS restarts its server), and so does
   a product large enough for the BLAS's own threads (with the OpenMP OpenBLAS a region of
   more than one thread hangs there: attn sets the child's OpenMP thread count to 1). */
START_TEST(th_fork_child) {
    size_t n = 4 * 128 * 32, wn = (size_t)1 << 22;
    float *buf = malloc(3 * n * sizeof *buf), *a = malloc(n * sizeof *a);
    float *b = malloc(n * sizeof *b);
    void *work = malloc(wn);
    float *g = malloc(2 * FG * FG * sizeof *g), *ga = malloc(FG * FG * sizeof *ga);
    float *gb = malloc(FG * FG * sizeof *gb);
    ck_assert(buf && a && b && work && g && ga && gb);
    for (size_t i = 0; i < 3 * n; ++i)
        buf[i] = (float)((i * 7919u) % 1000u) / 500.0f - 1.0f;
    for (size_t i = 0; i < 2 * FG * FG; ++i)
        g[i] = (float)((int)(i * 7919u % 5u) - 2);
    ck_assert_int_eq(fork_sdpa(buf, a, work, wn), ATTN_OK);
    ck_assert_int_eq(fork_gemm(g, ga), ATTN_OK);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* Check's own timer handler would kill the group */
        alarm(60);                /* a hang ends the child with SIGALRM */
        int code = fork_sdpa(buf, b, work, wn) != ATTN_OK      ? 2
                   : memcmp(a, b, n * sizeof *a) != 0          ? 3
                   : fork_gemm(g, gb) != ATTN_OK               ? 4
                   : memcmp(ga, gb, FG * FG * sizeof *ga) != 0 ? 5
                                                               : 0;
        /* the child's leak check (valgrind) */
        free(buf), free(a), free(b), free(work), free(g), free(ga), free(gb);
        _exit(code);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "the child's calls did not finish (signal %d)",
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    ck_assert_msg(WEXITSTATUS(status) == 0, "the child's %s (exit status %d)",
                  WEXITSTATUS(status) == 2   ? "sdpa failed"
                  : WEXITSTATUS(status) == 3 ? "sdpa differs from the parent's"
                  : WEXITSTATUS(status) == 4 ? "gemm failed"
                  : WEXITSTATUS(status) == 5 ? "gemm differs from the parent's"
                                             : "calls had errors",
                  WEXITSTATUS(status));
    free(buf), free(a), free(b), free(work), free(g), free(ga), free(gb);
}
END_TEST

/* ---- the BLAS, seen from the test ---------------------------------------------------- */

/*
 * OpenBLAS's own queries and libgomp's, looked up at run time (the test links only
 * libattn, and other BLASes lack them). This executable's cblas_sgemm comes before
 * OpenBLAS's for libattn's calls (ELF interposition): while armed, it records the most
 * threads the BLAS could give any call, by OpenBLAS's own rules (pthread build: its
 * process-wide count; OpenMP build: the caller's nthreads ICV outside a parallel region),
 * then forwards to the real one.
 */
typedef void sgemm_fn(int, int, int, int, int, int, float, const float *, int, const float *,
                      int, float, float *, int);
static sgemm_fn   *real_sgemm;
static int        (*blas_threads_of)(void);     /* openblas_get_num_threads */
static int        (*blas_parallel_of)(void);    /* openblas_get_parallel */
static int        (*omp_max_of)(void), (*omp_in_of)(void);
static atomic_int  sgemm_armed, sgemm_calls, sgemm_most;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_lookup(void) {
    *(void **)&real_sgemm = dlsym(RTLD_NEXT, "cblas_sgemm");
    *(void **)&blas_threads_of = dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    *(void **)&blas_parallel_of = dlsym(RTLD_DEFAULT, "openblas_get_parallel");
    *(void **)&omp_max_of = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    *(void **)&omp_in_of = dlsym(RTLD_DEFAULT, "omp_in_parallel");
}

static int blas_threads_now(void) {
    if (blas_parallel_of && blas_parallel_of() == 2) /* OpenMP build */
        return omp_in_of && omp_in_of() ? 1 : omp_max_of ? omp_max_of() : 1;
    return blas_threads_of ? blas_threads_of() : 1;
}

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    pthread_once(&blas_once, blas_lookup);
    if (atomic_load(&sgemm_armed)) {
        atomic_fetch_add(&sgemm_calls, 1);
        int t = blas_threads_now(), most = atomic_load(&sgemm_most);
        while (t > most && !atomic_compare_exchange_weak(&sgemm_most, &most, t)) {
        }
    }
    real_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* With ATTN_TEST_BLAS=pthread or openmp (tests/meson.build's threads_openmp), the suite
   runs against that OpenBLAS build, not whichever the dynamic linker fell back to. */
START_TEST(th_blas_build) {
    const char *want = getenv("ATTN_TEST_BLAS");
    if (!want)
        return;
    /* OpenBLAS's own report of its threading (1 pthread, 2 OpenMP) */
    pthread_once(&blas_once, blas_lookup);
    ck_assert_msg(blas_parallel_of, "ATTN_TEST_BLAS=%s but the BLAS is not OpenBLAS", want);
    int got = blas_parallel_of(), expect = strcmp(want, "openmp") == 0 ? 2 : 1;
    ck_assert_msg(got == expect, "ATTN_TEST_BLAS=%s but openblas_get_parallel() is %d", want,
                  got);
}
END_TEST

/* ---- the thread rule, seen from the host ---------------------------------------------- */

/* The threads of this process (/proc/self/task). */
static int process_threads(void) {
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* One attn_sdpa (B 1, H 4, T 256, D 64, f32) with the given thread option; 0 on success. */
typedef struct sdpa_case {
    float *buf;
    attn_view q, k, v, o;
} sdpa_case;

static void sdpa_case_init(sdpa_case *c) {
    enum { TT = 256, DD = 64, HH = 4 };
    const int64_t sh[4] = {1, HH, TT, DD};
    size_t n = (size_t)HH * TT * DD;
    c->buf = malloc(4 * n * sizeof *c->buf);
    ck_assert_ptr_nonnull(c->buf);
    OK(attn_view_init(&c->q, ATTN_F32, c->buf, 4, sh));
    OK(attn_view_init(&c->k, ATTN_F32, c->buf + n, 4, sh));
    OK(attn_view_init(&c->v, ATTN_F32, c->buf + 2 * n, 4, sh));
    OK(attn_view_init(&c->o, ATTN_F32, c->buf + 3 * n, 4, sh));
    uint64_t seed = 7919;
    tu_fill(&c->q, &seed, 1.0), tu_fill(&c->k, &seed, 1.0), tu_fill(&c->v, &seed, 1.0);
}

static attn_status sdpa_case_run(sdpa_case *c, attn_view *o, int threads) {
    attn_sdpa_opts opts = {.threads = threads};
    return attn_sdpa(&c->q, &c->k, &c->v, &opts, o, NULL, 0);
}

/* With OMP_NUM_THREADS=1 (an MPI rank's setting; tests/meson.build's threads_omp1), attn
   calls run on the calling thread and start no thread of their own: the process keeps
   the one thread it has (the pthread OpenBLAS starts no worker for a count of 1). */
START_TEST(th_omp1_no_threads) {
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!omp || strcmp(omp, "1") != 0)
        return;
    sdpa_case c;
    sdpa_case_init(&c);
    int before = process_threads();
    for (int i = 0; i < 3; ++i) {
        OK(sdpa_case_run(&c, &c.o, 0));
        OK(fork_gemm_ok());
    }
    ck_assert_int_eq(before, 1);
    ck_assert_int_eq(process_threads(), 1);
    free(c.buf);
}
END_TEST

/* attn's loops run on the BLAS's own threads: once a threaded product has started them,
   attn calls add no thread to the process. */
START_TEST(th_no_threads_of_its_own) {
    sdpa_case c;
    sdpa_case_init(&c);
    OK(fork_gemm_ok()); /* the BLAS's threads, started */
    OK(sdpa_case_run(&c, &c.o, 0));
    int before = process_threads();
    for (int i = 0; i < 3; ++i) {
        OK(sdpa_case_run(&c, &c.o, 0));
        OK(sdpa_case_run(&c, &c.o, 2));
        OK(fork_gemm_ok());
    }
    ck_assert_int_eq(process_threads(), before);
    free(c.buf);
}
END_TEST

/* Inside the host's OpenMP parallel region every attn call runs on its calling thread:
   each product single-threaded, the bits those of a serial call, the BLAS's count the
   same afterwards. */
START_TEST(th_inside_host_region) {
#ifdef _OPENMP
    pthread_once(&blas_once, blas_lookup);
    sdpa_case c;
    sdpa_case_init(&c);
    size_t n = (size_t)attn_view_numel(&c.o);
    float *ref = malloc(n * sizeof *ref), *out = malloc(4 * n * sizeof *out);
    ck_assert(ref && out);
    attn_view r = c.o;
    r.data = ref;
    OK(sdpa_case_run(&c, &r, 1));
    int before = blas_threads_now();
    atomic_store(&sgemm_calls, 0);
    atomic_store(&sgemm_most, 0);
    atomic_store(&sgemm_armed, 1);
    int bad = 0;
#pragma omp parallel for num_threads(2) reduction(+ : bad)
    for (int i = 0; i < 4; ++i) {
        attn_view o = c.o;
        o.data = out + (size_t)i * n;
        bad += sdpa_case_run(&c, &o, i % 2 ? 0 : 3) != ATTN_OK;
    }
    atomic_store(&sgemm_armed, 0);
    ck_assert_int_eq(bad, 0);
    ck_assert_msg(atomic_load(&sgemm_calls) > 0, "no cblas_sgemm call seen: not interposed?");
    ck_assert_msg(atomic_load(&sgemm_most) == 1,
                  "inside the host's region a product ran with %d BLAS threads",
                  atomic_load(&sgemm_most));
    for (int i = 0; i < 4; ++i)
        ck_assert_msg(memcmp(out + (size_t)i * n, ref, n * sizeof *ref) == 0,
                      "call %d inside the region differs from the serial call", i);
    ck_assert_int_eq(blas_threads_now(), before);
    free(ref), free(out), free(c.buf);
#endif
}
END_TEST

/* A second host thread reads OpenBLAS's thread count while this one runs threaded attn
   calls: with the OpenMP build it never changes (attn uses only the calling thread's
   own controls); with the pthread build it is the user's count again once attn is done
   (docs/guide.md "Threads" says what it reads meanwhile). */
static atomic_int sampler_stop, sampler_changed, sampler_samples;
static int sampler_want;
static void *sampler_main(void *arg) {
    (void)arg;
    while (!atomic_load(&sampler_stop)) {
        if (blas_threads_of() != sampler_want)
            atomic_fetch_add(&sampler_changed, 1);
        atomic_fetch_add(&sampler_samples, 1);
    }
    return NULL;
}

START_TEST(th_count_seen_by_host) {
    pthread_once(&blas_once, blas_lookup);
    if (!blas_threads_of || !blas_parallel_of)
        return;
    sdpa_case c;
    sdpa_case_init(&c);
    sampler_want = blas_threads_of();
    atomic_store(&sampler_stop, 0);
    atomic_store(&sampler_changed, 0);
    atomic_store(&sampler_samples, 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, sampler_main, NULL), 0);
    for (int i = 0; i < 20 || atomic_load(&sampler_samples) < 1000; ++i) {
        OK(sdpa_case_run(&c, &c.o, i % 3));
        ck_assert_int_lt(i, 100000);
    }
    atomic_store(&sampler_stop, 1);
    pthread_join(t, NULL);
    if (blas_parallel_of() == 2)
        ck_assert_msg(atomic_load(&sampler_changed) == 0,
                      "OpenMP OpenBLAS: another thread saw the count change %d times",
                      atomic_load(&sampler_changed));
    ck_assert_int_eq(blas_threads_of(), sampler_want);
    free(c.buf);
}
END_TEST

/* ---- the same bits for every thread count -------------------------------------------- */

/* v := a fresh view of the given shape over calloc'd memory, filled from seed when asked. */
static attn_view bits_view(attn_dtype dt, int nd, const int64_t *sh, uint64_t *seed) {
    attn_view v;
    int64_t n = 1;
    for (int i = 0; i < nd; ++i)
        n *= sh[i];
    void *p = calloc((size_t)n + 1, attn_dtype_size(dt));
    ck_assert_ptr_nonnull(p);
    OK(attn_view_init(&v, dt, p, nd, sh));
    if (seed)
        tu_fill(&v, seed, 1.0);
    return v;
}

static void bits_same(const attn_view *a, const attn_view *b, const char *what, int threads) {
    size_t n = (size_t)tu_numel(a) * attn_dtype_size(a->dtype);
    ck_assert_msg(memcmp(a->data, b->data, n) == 0, "%s: threads %d gives other bits",
                  what, threads);
}

/* Does the BLAS's GEMM give the same bits single-threaded (attn_gemm inside an active
   OpenMP region: rule 4) as on its own threads, for an (M, K) x (K, N) product? attn
   leaves the layers' products outside its loops to the BLAS (rule 5), so a layer's bits
   across thread counts are the BLAS's: OpenBLAS's Prescott kernels agree, others need not
   (valgrind's emulated CPU gets other kernels). */
static bool blas_gemm_same_bits(attn_dtype dt, int64_t M, int64_t K, int64_t N) {
    bool same = true;
#ifdef _OPENMP
    uint64_t seed = 3;
    attn_view a = bits_view(dt, 2, (int64_t[]){M, K}, &seed);
    attn_view b = bits_view(dt, 2, (int64_t[]){K, N}, &seed);
    attn_view c1 = bits_view(dt, 2, (int64_t[]){M, N}, NULL);
    attn_view c2 = bits_view(dt, 2, (int64_t[]){M, N}, NULL);
    OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &a, &b, 0.0, &c1, NULL, 0));
    attn_status st = ATTN_OK;
#pragma omp parallel num_threads(2)
    {
#pragma omp master
        st = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &a, &b, 0.0, &c2, NULL, 0);
    }
    OK(st);
    same = memcmp(c1.data, c2.data, (size_t)(M * N) * attn_dtype_size(dt)) == 0;
    free(a.data), free(b.data), free(c1.data), free(c2.data);
#else
    (void)dt, (void)M, (void)K, (void)N;
#endif
    return same;
}

/* A pre-norm GELU encoder block of width C, F 4 C, 4 heads: its config, and its parameters
   in *slab (free it), filled from seed (scale 0.1). */
static attn_encoder_params encoder_block(attn_dtype dt, int64_t C, attn_encoder_config *cfg,
                                         void **slab, uint64_t *seed) {
    *cfg = (attn_encoder_config){
        .mha = {.dtype = dt, .d_model = C, .heads = 4, .bias = true},
        .ffn = {.dtype = dt, .d_model = C, .d_ff = 4 * C, .act = ATTN_ACT_GELU_ERF, .bias = true},
        .norm = ATTN_PRE_NORM, .ln_affine = true};
    OK(attn_encoder_config_resolve(cfg, cfg));
    size_t pb = attn_encoder_params_size(cfg);
    *slab = aligned_alloc(64, (pb + 63) / 64 * 64);
    ck_assert_ptr_nonnull(*slab);
    attn_encoder_params prm;
    OK(attn_encoder_params_bind(&prm, cfg, *slab, pb));
    attn_view *pv[] = {&prm.ln1_g, &prm.ln1_b, &prm.mha.wq, &prm.mha.wk, &prm.mha.wv,
                       &prm.mha.wo, &prm.mha.bq, &prm.mha.bk, &prm.mha.bv, &prm.mha.bo,
                       &prm.ln2_g, &prm.ln2_b, &prm.ffn.w1, &prm.ffn.b1, &prm.ffn.w2,
                       &prm.ffn.b2};
    for (size_t i = 0; i < sizeof pv / sizeof pv[0]; ++i)
        tu_fill(pv[i], seed, 0.1);
    return prm;
}

/* sdpa (tiled with a key split and materialized, causal or not, with lse), decode, a cached
   one-token MHA step and the encoder block give the same bits for threads 1, 2, 3 and 0 (run under both OpenBLAS
   builds: threads and threads_openmp). */
START_TEST(th_bits_every_thread_count) {
    static const int counts[] = {1, 2, 3, 0};
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        uint64_t seed = 11;
        /* one (b, h) row block and 512 keys: the tiled path splits keys across threads */
        int64_t qs[4] = {1, 2, 64, 32}, ks[4] = {1, 1, 512, 32}, ls[3] = {1, 2, 64};
        attn_view q = bits_view(dt, 4, qs, &seed), k = bits_view(dt, 4, ks, &seed);
        attn_view v = bits_view(dt, 4, ks, &seed);
        for (int algo = 1; algo <= 2; ++algo)
            for (int causal = 0; causal < 2; ++causal) {
                attn_view o[4], l[4];
                for (int c = 0; c < 4; ++c) {
                    o[c] = bits_view(dt, 4, qs, NULL), l[c] = bits_view(dt, 3, ls, NULL);
                    attn_sdpa_opts opts = {.algo = (attn_algo)algo, .threads = counts[c],
                                           .causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : 0,
                                           .lse = &l[c]};
                    OK(attn_sdpa(&q, &k, &v, &opts, &o[c], NULL, 0));
                    if (c > 0) {
                        bits_same(&o[c], &o[0], "sdpa out", counts[c]);
                        bits_same(&l[c], &l[0], "sdpa lse", counts[c]);
                    }
                }
                for (int c = 0; c < 4; ++c)
                    free(o[c].data), free(l[c].data);
            }
        /* decode: 4 query rows against 3000 cached keys of one (b, kv head) */
        int64_t dq[4] = {1, 2, 4, 32}, dk[4] = {1, 1, 3000, 32}, len[1] = {2900};
        attn_view cq = bits_view(dt, 4, dq, &seed), ck = bits_view(dt, 4, dk, &seed);
        attn_view cv = bits_view(dt, 4, dk, &seed), co[4];
        for (int c = 0; c < 4; ++c) {
            co[c] = bits_view(dt, 4, dq, NULL);
            attn_decode_opts so = {.threads = counts[c]};
            OK(attn_sdpa_decode(&cq, &ck, &cv, len, true, &so, &co[c], NULL, NULL, 0));
            if (c > 0)
                bits_same(&co[c], &co[0], "decode", counts[c]);
        }
        for (int c = 0; c < 4; ++c)
            free(co[c].data);
        free(cq.data), free(ck.data), free(cv.data);
        /* a cached MHA step of one token (its projections one-row GEMVs) at prefix 500 */
        attn_mha_config mc = {.dtype = dt, .d_model = 64, .heads = 4, .bias = true};
        size_t mb = attn_mha_params_size(&mc), kb = attn_kv_cache_size(&mc, 1, 600);
        void *mslab = aligned_alloc(64, (mb + 63) / 64 * 64),
             *kslab = aligned_alloc(64, (kb + 63) / 64 * 64);
        ck_assert(mslab && kslab);
        attn_mha_params mp;
        attn_kv_cache kc;
        OK(attn_mha_params_bind(&mp, &mc, mslab, mb));
        OK(attn_kv_cache_bind(&kc, &mc, 1, 600, kslab, kb));
        attn_view *mv[] = {&mp.wq, &mp.wk, &mp.wv, &mp.wo, &mp.bq, &mp.bk, &mp.bv, &mp.bo,
                           &kc.k, &kc.v};
        for (size_t i = 0; i < sizeof mv / sizeof mv[0]; ++i)
            tu_fill(mv[i], &seed, 0.1);
        int64_t xs1[3] = {1, 1, 64};
        attn_view sx = bits_view(dt, 3, xs1, &seed), so[4];
        for (int c = 0; c < 4; ++c) {
            so[c] = bits_view(dt, 3, xs1, NULL);
            kc.len[0] = 500;
            attn_step_opts sop = {.threads = counts[c]};
            OK(attn_mha_step(&mc, &mp, &sop, &sx, &kc, &so[c], NULL, 0));
            if (c > 0)
                bits_same(&so[c], &so[0], "mha step", counts[c]);
        }
        for (int c = 0; c < 4; ++c)
            free(so[c].data);
        free(sx.data), free(mslab), free(kslab);
        /* the encoder block, pre-norm, causal */
        attn_encoder_config cfg;
        void *slab;
        attn_encoder_params prm = encoder_block(dt, 64, &cfg, &slab, &seed);
        int64_t xs[3] = {2, 200, 64};
        attn_view x = bits_view(dt, 3, xs, &seed), y[4];
        /* threads 1 makes the projections serial: compare it only where the BLAS's own
           serial and threaded GEMMs agree (the QKV and FFN products' shapes) */
        bool serial_too = blas_gemm_same_bits(dt, 400, 64, 192) &&
                          blas_gemm_same_bits(dt, 400, 64, 256) &&
                          blas_gemm_same_bits(dt, 400, 256, 64);
        for (int c = 0; c < 4; ++c) {
            y[c] = bits_view(dt, 3, xs, NULL);
            attn_sdpa_opts opts = {.threads = counts[c], .causal = ATTN_CAUSAL_TOP_LEFT};
            OK(attn_encoder_forward(&cfg, &prm, &x, &opts, &y[c], NULL, NULL, 0));
            if (c > 1 || (c == 1 && serial_too))
                bits_same(&y[c], &y[c == 1 ? 0 : 1], "encoder", counts[c]);
        }
        for (int c = 0; c < 4; ++c)
            free(y[c].data);
        free(x.data), free(slab);
        free(q.data), free(k.data), free(v.data);
    }
}
END_TEST

/* ---- threads = 1: one thread, the BLAS's products included --------------------------- */

/* attn_sdpa and attn_encoder_forward with opts.threads = 1 run every product with the
   BLAS on one thread, and restore the BLAS's count afterwards. */
START_TEST(th_one_thread_blas_too) {
    pthread_once(&blas_once, blas_lookup);
    ck_assert_ptr_nonnull(real_sgemm);
    int before = blas_threads_now();
    if (before < 2)
        return; /* one core, or OPENBLAS_NUM_THREADS=1: nothing to tell apart */
    enum { TT = 256, DD = 64, HH = 4 };
    const int64_t sh[4] = {1, HH, TT, DD};
    size_t n = (size_t)HH * TT * DD;
    float *q = malloc(4 * n * sizeof *q);
    ck_assert_ptr_nonnull(q);
    attn_view vq, vk, vv, vo;
    OK(attn_view_init(&vq, ATTN_F32, q, 4, sh));
    OK(attn_view_init(&vk, ATTN_F32, q + n, 4, sh));
    OK(attn_view_init(&vv, ATTN_F32, q + 2 * n, 4, sh));
    OK(attn_view_init(&vo, ATTN_F32, q + 3 * n, 4, sh));
    uint64_t seed = 7919;
    tu_fill(&vq, &seed, 1.0), tu_fill(&vk, &seed, 1.0), tu_fill(&vv, &seed, 1.0);
    attn_sdpa_opts o = {.threads = 1};
    size_t wn = attn_sdpa_workspace_size(&vq, &vk, &vv, &o);
    void *work = malloc(wn ? wn : 1);
    ck_assert_ptr_nonnull(work);
    atomic_store(&sgemm_calls, 0);
    atomic_store(&sgemm_most, 0);
    atomic_store(&sgemm_armed, 1);
    attn_status st = attn_sdpa(&vq, &vk, &vv, &o, &vo, work, wn);
    atomic_store(&sgemm_armed, 0);
    OK(st);
    ck_assert_msg(atomic_load(&sgemm_calls) >= 2 * HH, "%d cblas_sgemm calls seen: not interposed?",
                  atomic_load(&sgemm_calls));
    ck_assert_msg(atomic_load(&sgemm_most) == 1, "threads = 1: a product ran with %d BLAS threads",
                  atomic_load(&sgemm_most));
    ck_assert_int_eq(blas_threads_now(), before);
    free(q), free(work);

    /* a layer: the encoder block's projections and FFN products too */
    attn_encoder_config cfg;
    void *slab;
    attn_encoder_params prm = encoder_block(ATTN_F32, 256, &cfg, &slab, &seed);
    int64_t xs[3] = {1, 256, 256};
    float *xy = calloc(2 * 256 * 256, sizeof *xy);
    ck_assert_ptr_nonnull(xy);
    attn_view x, y;
    OK(attn_view_init(&x, ATTN_F32, xy, 3, xs));
    OK(attn_view_init(&y, ATTN_F32, xy + 256 * 256, 3, xs));
    atomic_store(&sgemm_calls, 0);
    atomic_store(&sgemm_most, 0);
    atomic_store(&sgemm_armed, 1);
    st = attn_encoder_forward(&cfg, &prm, &x, &o, &y, NULL, NULL, 0);
    atomic_store(&sgemm_armed, 0);
    OK(st);
    ck_assert_msg(atomic_load(&sgemm_calls) >= 4, "%d cblas_sgemm calls seen", atomic_load(&sgemm_calls));
    ck_assert_msg(atomic_load(&sgemm_most) == 1,
                  "encoder, threads = 1: a product ran with %d BLAS threads",
                  atomic_load(&sgemm_most));
    ck_assert_int_eq(blas_threads_now(), before);
    free(slab), free(xy);
}
END_TEST

int main(void) {
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("concurrency");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, th_omp1_no_threads);
    tcase_add_test(tc, th_serial_repeatable);
    tcase_add_test(tc, th_eight_threads_bit_identical);
    tcase_add_test(tc, th_fork_child);
    tcase_add_test(tc, th_blas_build);
    tcase_add_test(tc, th_no_threads_of_its_own);
    tcase_add_test(tc, th_inside_host_region);
    tcase_add_test(tc, th_count_seen_by_host);
    tcase_add_test(tc, th_one_thread_blas_too);
    tcase_add_test(tc, th_bits_every_thread_count);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
