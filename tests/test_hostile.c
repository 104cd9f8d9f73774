/* SPDX-License-Identifier: MIT */
/* Check suite for hostile inputs: sizes that overflow, outputs that alias inputs, extreme
 * values. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <float.h>
#include <limits.h>
#include <sys/mman.h>

#include "ref/ref.h"
#include "testutil.h"

/* ---- hooks: what the library allocates and hands to the BLAS ---------------------- */

/*
 * The test executable interposes aligned_alloc (attn's only allocator, in
 * attn__work_acquire) and cblas_sgemm/dgemm (attn's only BLAS entry points):
 * the shared library's calls resolve to these first. Each counts, then
 * forwards to the next definition (libc / the sanitizer's / valgrind's
 * allocator, OpenBLAS). "ERANGE before any allocation or BLAS call" is then
 * a plain count. hs_hooks_see_calls checks the hooks do see the calls.
 */
static volatile int hs_allocs, hs_blas; /* volatile: GCC assumes aligned_alloc leaves globals alone */
static size_t hs_alloc_size; /* the last size requested */

void *aligned_alloc(size_t alignment, size_t size) {
    static void *(*next)(size_t, size_t);
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "aligned_alloc");
    __atomic_add_fetch(&hs_allocs, 1, __ATOMIC_RELAXED);
    hs_alloc_size = size;
    return next(alignment, size);
}

/* valgrind replaces the executable's allocator too: then the allocation hook is not live. */
static bool hs_alloc_hook_live(void) {
    int a0 = hs_allocs;
    free(aligned_alloc(64, 64));
    return hs_allocs > a0;
}

typedef void (*hs_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                            const float *, int, float, float *, int);
typedef void (*hs_dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                            const double *, int, double, double *, int);
/* CBLAS's enums are passed as int, which is their ABI. */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    static hs_sgemm_fn next;
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "cblas_sgemm");
    __atomic_add_fetch(&hs_blas, 1, __ATOMIC_RELAXED);
    next(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc);
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc) {
    static hs_dgemm_fn next;
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "cblas_dgemm");
    __atomic_add_fetch(&hs_blas, 1, __ATOMIC_RELAXED);
    next(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- the arena and the cases ---------------------------------------------------- */

/*
 * Every tensor of a case is carved from one arena, contiguous and 64-byte
 * aligned, with room behind the last one: an aliasing test moves an output
 * onto an input and the moved view still lies in the arena. A snapshot of
 * the arena before each call proves "nothing written on error".
 */
#define HS_ARENA_BYTES (1 << 18)
static _Alignas(64) unsigned char hs_mem[HS_ARENA_BYTES];
static unsigned char hs_snap[HS_ARENA_BYTES];
static size_t hs_used;
static uint64_t hs_seed; /* reset per case: a case built twice holds the same values */

#define HS_MAXV 64

typedef struct hs_case hs_case;
struct hs_case {
    const char *name;
    attn_dtype dt;
    int nin, nout; /* v[0..nin) inputs, v[nin..nin+nout) outputs */
    attn_view v[HS_MAXV];
    uint64_t same_ok[HS_MAXV]; /* bit i of same_ok[o]: output o may BE input i */
    attn_status (*call)(hs_case *);
    attn_sdpa_opts opts; /* sdpa: keep/bias/weights/lse point into v */
    int act;
    double eps;
    /* layers: configs; parameters, caches and gradients are views of v */
    attn_mha_config mha;
    attn_ffn_config ffn;
    attn_encoder_config enc;
    attn_trace tr;
    int p0, g0; /* index of the first parameter view and of the first gradient */
};

static attn_view *hs_out(hs_case *c, int o) { return &c->v[c->nin + o]; }

/* A contiguous tensor carved from the arena, filled with values in [-1, 1). */
static int hs_add(hs_case *c, int ndim, const int64_t *shape, attn_dtype dt) {
    int k = c->nin + c->nout;
    ck_assert_int_lt(k, HS_MAXV);
    size_t es = attn_dtype_size(dt), n = 1;
    for (int d = 0; d < ndim; ++d)
        n *= (size_t)shape[d];
    hs_used = (hs_used + 63) & ~(size_t)63;
    ck_assert_uint_le(hs_used + n * es, HS_ARENA_BYTES / 2);
    ck_assert_int_eq(attn_view_init(&c->v[k], dt, hs_mem + hs_used, ndim, shape), ATTN_OK);
    hs_used += n * es;
    if (dt == ATTN_U8)
        memset(c->v[k].data, 1, n); /* masks: keep everything */
    else
        tu_fill(&c->v[k], &hs_seed, 1.0);
    return k;
}
static void hs_in(hs_case *c, int ndim, const int64_t *shape) {
    hs_add(c, ndim, shape, c->dt);
    c->nin++;
}
static void hs_outp(hs_case *c, int ndim, const int64_t *shape) {
    hs_add(c, ndim, shape, c->dt);
    c->nout++;
}

/* ---- one small valid call per public function ------------------------------------ */

/* The workspace every case passes: NULL/0 (convenience) unless a test sets one. */
static void *hs_work;
static size_t hs_work_size;

#define V(i)        (&c->v[i])
#define SH(...)     ((const int64_t[]){__VA_ARGS__})
#define HS_OK(call) ck_assert_int_eq((call), ATTN_OK)

static attn_status call_gemm(hs_case *c) {
    return attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, 0.5, V(0), V(1), 1.0, V(2), hs_work,
                     hs_work_size);
}
static attn_status call_copy(hs_case *c) { return attn_view_copy(V(0), V(1)); }
static attn_status call_softmax(hs_case *c) { return attn_softmax(V(0), V(1)); }
static attn_status call_softmax_bwd(hs_case *c) {
    return attn_softmax_backward(V(0), V(1), V(2));
}
static attn_status call_layernorm(hs_case *c) {
    return attn_layernorm(c->eps, V(0), V(1), V(2), V(3), V(4), V(5));
}
static attn_status call_layernorm_bwd(hs_case *c) {
    return attn_layernorm_backward(V(0), V(1), V(2), V(3), V(4), V(5), V(6), V(7));
}
static attn_status call_act(hs_case *c) {
    return attn_activation((attn_act)c->act, V(0), V(1));
}
static attn_status call_act_bwd(hs_case *c) {
    return attn_activation_backward((attn_act)c->act, V(0), V(1), V(2));
}
static attn_status call_add(hs_case *c) { return attn_add(V(0), V(1), V(2)); }
static attn_status call_add_bwd(hs_case *c) { return attn_add_backward(V(0), V(1), V(2)); }
static attn_status call_linear(hs_case *c) {
    return attn_linear(V(0), V(1), V(2), V(3), hs_work, hs_work_size);
}
static attn_status call_linear_bwd(hs_case *c) {
    return attn_linear_backward(V(0), V(1), V(2), V(3), V(4), V(5), hs_work, hs_work_size);
}
/* sdpa: q k v keep bias | out weights lse */
static attn_status call_sdpa(hs_case *c) {
    c->opts.keep = V(3);
    c->opts.bias = V(4);
    c->opts.weights = V(6);
    c->opts.lse = V(7);
    return attn_sdpa(V(0), V(1), V(2), &c->opts, V(5), hs_work, hs_work_size);
}
/* sdpa backward: q k v out lse dout keep | dq dk dv */
static attn_status call_sdpa_bwd(hs_case *c) {
    c->opts.keep = V(6);
    return attn_sdpa_backward(V(0), V(1), V(2), &c->opts, V(3), V(4), V(5), V(7), V(8), V(9),
                              hs_work, hs_work_size);
}
static attn_status call_entropy(hs_case *c) { return attn_diag_entropy(V(0), V(1)); }
static attn_status call_jac_fro(hs_case *c) {
    return attn_diag_softmax_jacobian_fro(V(0), V(1));
}
static attn_status call_jac_spec(hs_case *c) {
    return attn_diag_softmax_jacobian_spectral(V(0), V(1), hs_work, hs_work_size, NULL);
}
static attn_status call_svd(hs_case *c) {
    return attn_diag_singular_values(V(0), V(1), hs_work, hs_work_size, NULL);
}
static attn_status call_init_uniform(hs_case *c) {
    return attn_init_uniform(1, 2, 0, -1.0, 1.0, V(0));
}
static attn_status call_init_orth(hs_case *c) {
    return attn_init_orthogonal(1.0, 1, 2, V(0), hs_work, hs_work_size, NULL);
}

static attn_status call_posenc_add(hs_case *c) { return attn_posenc_add(1, V(0), V(1)); }
static attn_status call_posenc_add_bwd(hs_case *c) {
    return attn_posenc_add_backward(1, V(0), V(1));
}
static attn_status call_patchify(hs_case *c) { return attn_patchify(2, V(0), V(1)); }
static attn_status call_sinusoidal(hs_case *c) { return attn_posenc_sinusoidal(0, V(0)); }
static attn_status call_rope(hs_case *c) { return attn_rope(ATTN_ROPE_HALF, 0, 2, V(0)); }

/* Parameter structs over consecutive views of v, starting at index i. */
static attn_mha_params hs_mha_params(hs_case *c, int i, bool bias) {
    attn_mha_params p = {.wq = *V(i), .wk = *V(i + 1), .wv = *V(i + 2), .wo = *V(i + 3)};
    if (bias)
        p.bq = *V(i + 4), p.bk = *V(i + 5), p.bv = *V(i + 6), p.bo = *V(i + 7);
    return p;
}
static attn_ffn_params hs_ffn_params(hs_case *c, int i) {
    return (attn_ffn_params){*V(i), *V(i + 1), *V(i + 2), *V(i + 3)};
}
static attn_encoder_params hs_enc_params(hs_case *c, int i) {
    attn_encoder_params p = {
        .ln1_g = *V(i), .ln1_b = *V(i + 1), .ln2_g = *V(i + 10), .ln2_b = *V(i + 11)};
    p.mha = hs_mha_params(c, i + 2, true);
    p.ffn = hs_ffn_params(c, i + 12);
    return p;
}

/* mha forward: x_q x_kv wq wk wv wo bq bk bv bo | out */
static attn_status call_mha(hs_case *c) {
    attn_mha_params p = hs_mha_params(c, 2, true);
    return attn_mha_forward(&c->mha, &p, V(0), V(1), NULL, V(10), NULL, hs_work, hs_work_size);
}
/* mha backward (self, no bias): x wq wk wv wo [q k v concat lse] dout | dx dwq dwk dwv dwo */
static attn_status call_mha_bwd(hs_case *c) {
    attn_mha_params p = hs_mha_params(c, 1, false), g = hs_mha_params(c, c->g0, false);
    return attn_mha_backward(&c->mha, &p, V(0), NULL, NULL, &c->tr, V(10), V(11), NULL, &g,
                             hs_work, hs_work_size);
}
/* ffn forward: x w1 b1 w2 b2 | out */
static attn_status call_ffn(hs_case *c) {
    attn_ffn_params p = hs_ffn_params(c, 1);
    return attn_ffn_forward(&c->ffn, &p, V(0), V(5), NULL, hs_work, hs_work_size);
}
/* ffn backward: x w1 b1 w2 b2 hidden_pre hidden dout | dx dw1 db1 dw2 db2 */
static attn_status call_ffn_bwd(hs_case *c) {
    attn_ffn_params p = hs_ffn_params(c, 1), g = hs_ffn_params(c, c->g0);
    c->tr = (attn_trace){.mlp_hidden_pre = V(5), .mlp_hidden = V(6)};
    return attn_ffn_backward(&c->ffn, &p, V(0), &c->tr, V(7), V(8), &g, hs_work, hs_work_size);
}
/* encoder forward: x, 16 parameters | out */
static attn_status call_enc(hs_case *c) {
    attn_encoder_params p = hs_enc_params(c, 1);
    return attn_encoder_forward(&c->enc, &p, V(0), NULL, V(17), NULL, hs_work, hs_work_size);
}
/* encoder backward: x, 16 parameters, 15 cache views, dout | dx, 16 gradients */
static attn_status call_enc_bwd(hs_case *c) {
    attn_encoder_params p = hs_enc_params(c, 1), g = hs_enc_params(c, c->g0);
    return attn_encoder_backward(&c->enc, &p, V(0), NULL, &c->tr, V(32), V(33), &g, hs_work,
                                 hs_work_size);
}

/* A slab of the arena, 64-byte aligned, filled with values in [-1, 1) of dtype dt. */
static void *hs_slab(size_t bytes, attn_dtype dt) {
    hs_used = (hs_used + 63) & ~(size_t)63;
    ck_assert_uint_le(hs_used + bytes, HS_ARENA_BYTES / 2);
    void *p = hs_mem + hs_used;
    hs_used += bytes;
    attn_view all;
    size_t es = attn_dtype_size(dt);
    HS_OK(attn_view_init(&all, dt, p, 1, (int64_t[]){(int64_t)(bytes / es)}));
    tu_fill(&all, &hs_seed, 1.0);
    return p;
}

static void hs_mha_inputs(hs_case *c, bool bias, int64_t ckv) {
    for (int i = 0; i < 4; ++i)
        hs_in(c, 2, (int64_t[]){i == 1 || i == 2 ? ckv : 4, 4});
    for (int i = 0; bias && i < 4; ++i)
        hs_in(c, 1, SH(4));
}
static void hs_ffn_inputs(hs_case *c) {
    hs_in(c, 2, SH(4, 8));
    hs_in(c, 1, SH(8));
    hs_in(c, 2, SH(8, 4));
    hs_in(c, 1, SH(4));
}

/* Probability rows for the diag functions (uniform rows of width Tk). */
static void hs_uniform_rows(attn_view *p) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do
        tu_set(p, idx, 1.0 / (double)p->shape[p->ndim - 1]);
    while (tu_inc(idx, p->shape, p->ndim));
}

enum { HS_NCASES = 36 };

/* Build case `which` for dtype dt into *c; false past the last case. */
static bool hs_build(int which, attn_dtype dt, hs_case *c) {
    memset(c, 0, sizeof *c);
    hs_used = 0;
    hs_seed = 42;
    c->dt = dt;
    switch (which) {
    case 0:
        c->name = "attn_gemm", c->call = call_gemm;
        hs_in(c, 3, SH(2, 3, 4));
        hs_in(c, 2, SH(5, 4));
        hs_outp(c, 3, SH(2, 3, 5));
        return true;
    case 1:
        c->name = "attn_view_copy", c->call = call_copy;
        hs_in(c, 2, SH(3, 4));
        hs_outp(c, 2, SH(3, 4));
        return true;
    case 2:
        c->name = "attn_softmax", c->call = call_softmax;
        hs_in(c, 3, SH(2, 3, 5));
        hs_outp(c, 3, SH(2, 3, 5));
        c->same_ok[0] = 1;
        return true;
    case 3:
        c->name = "attn_softmax_backward", c->call = call_softmax_bwd;
        hs_in(c, 2, SH(3, 5));
        hs_in(c, 2, SH(3, 5));
        hs_outp(c, 2, SH(3, 5));
        return true;
    case 4:
        c->name = "attn_layernorm", c->call = call_layernorm, c->eps = 1e-5;
        hs_in(c, 3, SH(2, 3, 6));
        hs_in(c, 1, SH(6));
        hs_in(c, 1, SH(6));
        hs_outp(c, 3, SH(2, 3, 6));
        hs_outp(c, 2, SH(2, 3));
        hs_outp(c, 2, SH(2, 3));
        c->same_ok[0] = 1;
        return true;
    case 5:
        c->name = "attn_layernorm_backward", c->call = call_layernorm_bwd;
        hs_in(c, 2, SH(3, 6)); /* x */
        hs_in(c, 1, SH(6));    /* gamma */
        hs_in(c, 1, SH(3));    /* mean */
        hs_in(c, 1, SH(3));    /* rstd */
        hs_in(c, 2, SH(3, 6)); /* dy */
        hs_outp(c, 2, SH(3, 6));
        hs_outp(c, 1, SH(6));
        hs_outp(c, 1, SH(6));
        return true;
    case 6:
    case 7:
    case 8:
        c->name = "attn_activation", c->call = call_act, c->act = which - 6;
        hs_in(c, 2, SH(4, 5));
        hs_outp(c, 2, SH(4, 5));
        c->same_ok[0] = 1;
        return true;
    case 9:
    case 10:
    case 11:
        c->name = "attn_activation_backward", c->call = call_act_bwd, c->act = which - 9;
        hs_in(c, 2, SH(4, 5));
        hs_in(c, 2, SH(4, 5));
        hs_outp(c, 2, SH(4, 5));
        return true;
    case 12:
        c->name = "attn_add (bias)", c->call = call_add;
        hs_in(c, 3, SH(2, 3, 4));
        hs_in(c, 1, SH(4));
        hs_outp(c, 3, SH(2, 3, 4));
        c->same_ok[0] = 1;
        return true;
    case 13:
        c->name = "attn_add (residual)", c->call = call_add;
        hs_in(c, 3, SH(2, 3, 4));
        hs_in(c, 3, SH(2, 3, 4));
        hs_outp(c, 3, SH(2, 3, 4));
        c->same_ok[0] = 1 | 2;
        return true;
    case 14:
        c->name = "attn_add_backward", c->call = call_add_bwd;
        hs_in(c, 3, SH(2, 3, 4));
        hs_outp(c, 3, SH(2, 3, 4));
        hs_outp(c, 1, SH(4));
        return true;
    case 15:
        c->name = "attn_linear", c->call = call_linear;
        hs_in(c, 3, SH(2, 3, 4));
        hs_in(c, 2, SH(4, 5));
        hs_in(c, 1, SH(5));
        hs_outp(c, 3, SH(2, 3, 5));
        return true;
    case 16:
        c->name = "attn_linear_backward", c->call = call_linear_bwd;
        hs_in(c, 3, SH(2, 3, 4));
        hs_in(c, 2, SH(4, 5));
        hs_in(c, 3, SH(2, 3, 5));
        hs_outp(c, 3, SH(2, 3, 4));
        hs_outp(c, 2, SH(4, 5));
        hs_outp(c, 1, SH(5));
        return true;
    case 17:
        c->name = "attn_sdpa", c->call = call_sdpa;
        c->opts.algo = ATTN_ALGO_MATERIALIZED;
        hs_in(c, 4, SH(1, 2, 3, 4));
        hs_in(c, 4, SH(1, 2, 5, 4));
        hs_in(c, 4, SH(1, 2, 5, 3));
        hs_add(c, 4, SH(1, 1, 3, 5), ATTN_U8), c->nin++;
        hs_in(c, 4, SH(1, 2, 3, 5));
        hs_outp(c, 4, SH(1, 2, 3, 3));
        hs_outp(c, 4, SH(1, 2, 3, 5));
        hs_outp(c, 3, SH(1, 2, 3));
        return true;
    case 18:
        c->name = "attn_sdpa_backward", c->call = call_sdpa_bwd;
        hs_in(c, 4, SH(1, 2, 3, 4));
        hs_in(c, 4, SH(1, 1, 5, 4));
        hs_in(c, 4, SH(1, 1, 5, 3));
        hs_in(c, 4, SH(1, 2, 3, 3)); /* out */
        hs_in(c, 3, SH(1, 2, 3));    /* lse */
        hs_in(c, 4, SH(1, 2, 3, 3)); /* dout */
        hs_add(c, 4, SH(1, 1, 3, 5), ATTN_U8), c->nin++;
        hs_outp(c, 4, SH(1, 2, 3, 4));
        hs_outp(c, 4, SH(1, 1, 5, 4));
        hs_outp(c, 4, SH(1, 1, 5, 3));
        return true;
    case 19:
        c->name = "attn_diag_entropy", c->call = call_entropy;
        hs_in(c, 2, SH(3, 4));
        hs_outp(c, 1, SH(3));
        hs_uniform_rows(V(0));
        return true;
    case 20:
        c->name = "attn_diag_softmax_jacobian_fro", c->call = call_jac_fro;
        hs_in(c, 2, SH(3, 4));
        hs_outp(c, 1, SH(3));
        hs_uniform_rows(V(0));
        return true;
    case 21:
        c->name = "attn_diag_softmax_jacobian_spectral", c->call = call_jac_spec;
        hs_in(c, 2, SH(3, 4));
        hs_outp(c, 1, SH(3));
        hs_uniform_rows(V(0));
        return true;
    case 22:
        c->name = "attn_diag_singular_values", c->call = call_svd;
        hs_in(c, 2, SH(4, 3));
        hs_outp(c, 1, SH(3));
        return true;
    case 23:
        c->name = "attn_init_orthogonal", c->call = call_init_orth;
        hs_outp(c, 2, SH(4, 3));
        return true;
    case 24:
        c->name = "attn_init_uniform", c->call = call_init_uniform;
        hs_outp(c, 3, SH(2, 4, 3));
        return true;
    case 25:
        c->name = "attn_posenc_add", c->call = call_posenc_add;
        hs_in(c, 2, SH(5, 4));
        hs_outp(c, 3, SH(2, 3, 4));
        return true;
    case 26:
        c->name = "attn_posenc_add_backward", c->call = call_posenc_add_bwd;
        hs_in(c, 3, SH(2, 3, 4));
        hs_outp(c, 2, SH(5, 4));
        return true;
    case 27:
        c->name = "attn_patchify", c->call = call_patchify;
        hs_in(c, 3, SH(3, 4, 6));
        hs_outp(c, 2, SH(6, 12));
        return true;
    case 28:
        c->name = "attn_posenc_sinusoidal", c->call = call_sinusoidal;
        hs_outp(c, 2, SH(5, 4));
        return true;
    case 29:
        c->name = "attn_rope", c->call = call_rope;
        hs_outp(c, 4, SH(1, 2, 3, 4));
        return true;
    case 30:
        c->name = "attn_mha_forward", c->call = call_mha;
        c->mha =
            (attn_mha_config){.dtype = dt, .d_model = 4, .heads = 2, .d_kv = 3, .bias = true};
        hs_in(c, 3, SH(2, 3, 4));
        hs_in(c, 3, SH(2, 5, 3));
        hs_mha_inputs(c, true, 3);
        hs_outp(c, 3, SH(2, 3, 4));
        return true;
    case 31: {
        c->name = "attn_mha_backward", c->call = call_mha_bwd;
        c->mha = (attn_mha_config){.dtype = dt, .d_model = 4, .heads = 2};
        hs_in(c, 3, SH(2, 3, 4));
        hs_mha_inputs(c, false, 4);
        size_t n = attn_mha_cache_size(&c->mha, 2, 3, 3);
        void *slab = hs_slab(n, dt);
        HS_OK(attn_mha_cache_bind(&c->mha, 2, 3, 3, slab, n, &c->v[c->nin], &c->tr));
        c->nin += 5;
        hs_in(c, 3, SH(2, 3, 4)); /* dout: index 10 */
        hs_outp(c, 3, SH(2, 3, 4));
        c->g0 = c->nin + 1;
        hs_mha_inputs(c, false, 4), c->nin -= 4, c->nout += 4; /* the gradients are outputs */
        return true;
    }
    case 32:
        c->name = "attn_ffn_forward", c->call = call_ffn;
        c->ffn = (attn_ffn_config){.dtype = dt, .d_model = 4, .d_ff = 8, .bias = true};
        hs_in(c, 3, SH(2, 3, 4));
        hs_ffn_inputs(c);
        hs_outp(c, 3, SH(2, 3, 4));
        return true;
    case 33:
        c->name = "attn_ffn_backward", c->call = call_ffn_bwd;
        c->ffn = (attn_ffn_config){
            .dtype = dt, .d_model = 4, .d_ff = 8, .bias = true, .act = ATTN_ACT_GELU_ERF};
        hs_in(c, 3, SH(2, 3, 4));
        hs_ffn_inputs(c);
        hs_in(c, 3, SH(2, 3, 8));
        hs_in(c, 3, SH(2, 3, 8));
        hs_in(c, 3, SH(2, 3, 4));
        hs_outp(c, 3, SH(2, 3, 4));
        c->g0 = c->nin + 1;
        hs_ffn_inputs(c), c->nin -= 4, c->nout += 4;
        return true;
    case 34:
    case 35: {
        bool bwd = which == 35;
        c->name = bwd ? "attn_encoder_backward" : "attn_encoder_forward";
        c->call = bwd ? call_enc_bwd : call_enc;
        c->enc =
            (attn_encoder_config){.mha = {.dtype = dt, .d_model = 4, .heads = 2, .bias = true},
                                  .ffn = {.dtype = dt, .d_model = 4, .d_ff = 8, .bias = true},
                                  .norm = bwd ? ATTN_POST_NORM : ATTN_PRE_NORM,
                                  .ln_affine = true};
        hs_in(c, 3, SH(2, 3, 4));
        for (int g = 0; g < (bwd ? 2 : 1); ++g) {
            if (g == 1)
                c->g0 = c->nin + 1;
            int first = c->nin;
            hs_in(c, 1, SH(4)), hs_in(c, 1, SH(4));
            hs_mha_inputs(c, true, 4);
            hs_in(c, 1, SH(4)), hs_in(c, 1, SH(4));
            hs_ffn_inputs(c);
            if (g == 1) /* the gradients are outputs */
                c->nout += c->nin - first, c->nin = first;
            if (!bwd) {
                hs_outp(c, 3, SH(2, 3, 4));
                return true;
            }
            if (g == 0) {
                size_t n = attn_encoder_cache_size(&c->enc, 2, 3);
                void *slab = hs_slab(n, dt);
                HS_OK(attn_encoder_cache_bind(&c->enc, 2, 3, slab, n, &c->v[c->nin], &c->tr));
                c->nin += 15;
                hs_in(c, 3, SH(2, 3, 4));   /* dout: index 32 */
                hs_outp(c, 3, SH(2, 3, 4)); /* dx: index 33 */
            }
        }
        return true;
    }
    }
    return false;
}

/* Call c, requiring `want` and (unless OK) an arena identical to before the call. */
static void hs_expect(hs_case *c, attn_status want, const char *what) {
    memcpy(hs_snap, hs_mem, sizeof hs_mem);
    attn_status st = c->call(c);
    ck_assert_msg(st == want, "%s %s (%s): got %s, want %s", c->name,
                  c->dt == ATTN_F64 ? "f64" : "f32", what, attn_status_name(st),
                  attn_status_name(want));
    if (want != ATTN_OK)
        ck_assert_msg(memcmp(hs_snap, hs_mem, sizeof hs_mem) == 0,
                      "%s (%s): returned %s but wrote to memory", c->name, what,
                      attn_status_name(st));
}

static bool hs_same_view(const attn_view *a, const attn_view *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

/* ---- every case is valid as built ------------------------------------------------ */

START_TEST(hs_baseline) {
    int built = 0;
    for (int d = 0; d < 2; ++d)
        for (int w = 0; w < HS_NCASES; ++w) {
            hs_case c;
            if (!hs_build(w, d ? ATTN_F64 : ATTN_F32, &c))
                continue;
            hs_expect(&c, ATTN_OK, "as built");
            ++built;
        }
    ck_assert_int_eq(built, 2 * HS_NCASES);
}
END_TEST

/* ---- aliasing ---------------------------------------------------------------------- */

/*
 * For every output o and every other argument a (inputs and the other
 * outputs): o moved to start exactly at a, and one element past a's start,
 * is ATTN_EALIAS with nothing written -- unless o then IS a and the function
 * documents that in-place call (checked to give the out-of-place result).
 */
static void hs_alias_case(int which, attn_dtype dt) {
    hs_case c;
    if (!hs_build(which, dt, &c))
        return;
    int nv = c.nin + c.nout;
    for (int o = 0; o < c.nout; ++o)
        for (int a = 0; a < nv; ++a) {
            if (a == c.nin + o)
                continue;
            for (int shift = 0; shift < 2; ++shift) {
                hs_build(which, dt, &c);
                attn_view *ov = hs_out(&c, o), *av = &c.v[a];
                size_t es = attn_dtype_size(ov->dtype);
                size_t abytes = (size_t)tu_numel(av) * attn_dtype_size(av->dtype);
                if (shift && abytes <= es)
                    continue; /* a has no second element to land on */
                ov->data = (char *)av->data + shift * es;
                char what[64];
                snprintf(what, sizeof what, "output %d on argument %d%s", o, a,
                         shift ? " + 1 element" : "");
                bool same = a < c.nin && hs_same_view(ov, av) && (c.same_ok[o] >> a & 1);
                if (!same) {
                    hs_expect(&c, ATTN_EALIAS, what);
                    continue;
                }
                /* documented in-place: the same bits as out of place */
                hs_case ref;
                hs_build(which, dt, &ref);
                hs_expect(&ref, ATTN_OK, "out of place");
                size_t ob = (size_t)tu_numel(hs_out(&ref, o)) * es;
                unsigned char *want = malloc(ob);
                memcpy(want, hs_out(&ref, o)->data, ob);
                hs_build(which, dt, &c);
                hs_out(&c, o)->data = c.v[a].data;
                hs_expect(&c, ATTN_OK, what);
                ck_assert_msg(memcmp(want, c.v[a].data, ob) == 0,
                              "%s in place differs from out of place", c.name);
                free(want);
            }
        }
}

START_TEST(hs_alias_every_output) {
    for (int d = 0; d < 2; ++d)
        for (int w = 0; w < HS_NCASES; ++w)
            hs_alias_case(w, d ? ATTN_F64 : ATTN_F32);
}
END_TEST

/* ---- overflow --------------------------------------------------------------------- */

/*
 * A hand-built view of argument k's ndim and dtype over its own (tiny)
 * memory whose element count (or, 1-D, byte size) overflows int64: every
 * function must say ATTN_ERANGE, allocate nothing, call no BLAS, write
 * nothing.
 */
static attn_view hs_overflowing(const attn_view *like) {
    attn_view h = *like;
    h.shape[0] = INT64_C(1) << 62;
    h.stride[0] = 0;
    for (int d = 1; d < h.ndim; ++d) {
        h.shape[d] = 4;
        h.stride[d] = 0;
    }
    if (h.ndim == 1) { /* one axis: 2^62 elements of >= 4 bytes overflow the byte size */
        h.stride[0] = 1;
    }
    return h;
}

START_TEST(hs_range_numel_overflow) {
    for (int d = 0; d < 2; ++d)
        for (int w = 0; w < HS_NCASES; ++w) {
            hs_case c;
            if (!hs_build(w, d ? ATTN_F64 : ATTN_F32, &c))
                continue;
            for (int k = 0; k < c.nin + c.nout; ++k) {
                hs_build(w, d ? ATTN_F64 : ATTN_F32, &c);
                if (c.v[k].dtype == ATTN_U8 && c.v[k].ndim == 1)
                    continue;
                c.v[k] = hs_overflowing(&c.v[k]);
                int a0 = hs_allocs, b0 = hs_blas;
                char what[48];
                snprintf(what, sizeof what, "argument %d overflows", k);
                hs_expect(&c, ATTN_ERANGE, what);
                ck_assert_msg(hs_allocs == a0 && hs_blas == b0,
                              "%s: allocated or called the BLAS before ATTN_ERANGE", c.name);
            }
        }
}
END_TEST

/* The view constructors and algebra: every overflow is ERANGE and leaves *out alone. */
START_TEST(hs_range_views) {
    char buf[64];
    attn_view v, v0;
    memset(&v, 0x77, sizeof v);
    v0 = v;
    int64_t big = INT64_C(1) << 32;
    /* element count 2^64 */
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, buf, 2, SH(big, big)), ATTN_ERANGE);
    /* bytes 2^61 * 8 = 2^64 */
    ck_assert_int_eq(attn_view_init(&v, ATTN_F64, buf, 1, SH(INT64_C(1) << 61)), ATTN_ERANGE);
    /* element count fits, the address span does not */
    ck_assert_int_eq(
        attn_view_init_strided(&v, ATTN_F32, buf, 2, SH(3, 3), SH(INT64_MAX / 2, 1)),
        ATTN_ERANGE);
    ck_assert_int_eq(attn_view_init_strided(&v, ATTN_F32, buf, 1, SH(2), SH(INT64_MIN)),
                     ATTN_ERANGE);
    ck_assert_int_eq(
        attn_view_init_strided(&v, ATTN_U8, buf, 2, SH(2, 2), SH(INT64_MIN + 1, 1)),
        ATTN_ERANGE);
    ck_assert(memcmp(&v, &v0, sizeof v) == 0);
    /* a petabyte description of 64 bytes is a valid view (nothing was touched) */
    ck_assert_int_eq(
        attn_view_init_strided(&v, ATTN_F32, buf, 2, SH(INT64_C(1) << 48, 16), SH(0, 1)),
        ATTN_OK);
    /* broadcasting it further overflows the element count */
    attn_view w = v0;
    ck_assert_int_eq(attn_view_broadcast(&v, 3, SH(INT64_C(1) << 20, INT64_C(1) << 48, 16), &w),
                     ATTN_ERANGE);
    ck_assert(memcmp(&w, &v0, sizeof w) == 0);
    ck_assert_int_eq(
        attn_view_numel(&(attn_view){
            .data = buf, .dtype = ATTN_F32, .ndim = 2, .shape = {big, big}, .stride = {0, 0}}),
        0);
    /* slicing with indices that would overflow start * stride */
    ck_assert_int_eq(attn_view_slice(&v, 0, INT64_MAX, INT64_MAX, 1, &w), ATTN_ERANGE);
    ck_assert_int_eq(attn_view_select(&v, 0, INT64_MAX, &w), ATTN_ERANGE);
    ck_assert(memcmp(&w, &v0, sizeof w) == 0);
}
END_TEST

/* Run f expecting ATTN_ERANGE with no allocation and no BLAS call. */
#define HS_RANGE(call)                                                                         \
    do {                                                                                       \
        int a0_ = hs_allocs, b0_ = hs_blas;                                                    \
        attn_status st_ = (call);                                                              \
        ck_assert_msg(st_ == ATTN_ERANGE, "%s: %s", #call, attn_status_name(st_));             \
        ck_assert_msg(hs_allocs == a0_ && hs_blas == b0_,                                      \
                      "%s allocated or called the BLAS first", #call);                         \
    } while (0)

/*
 * Dims beyond INT_MAX (the BLAS's int) on valid views: inputs broadcast
 * over a few bytes, outputs are petabyte descriptions of a small buffer.
 * Every one is ATTN_ERANGE before any allocation or BLAS call, and the
 * workspace queries say 0.
 */
START_TEST(hs_range_int_max) {
    const int64_t huge = (int64_t)INT_MAX + 1;
    static _Alignas(64) double tiny[256]; /* every view below fits in its first bytes */
    attn_view a, b, c;
    /* gemm: K beyond INT_MAX */
    HS_OK(attn_view_init_strided(&a, ATTN_F32, tiny, 2, SH(2, huge), SH(0, 0)));
    HS_OK(attn_view_init_strided(&b, ATTN_F32, tiny, 2, SH(huge, 2), SH(0, 0)));
    HS_OK(attn_view_init(&c, ATTN_F32, tiny + 8, 2, SH(2, 2)));
    HS_RANGE(attn_gemm(0, 0, 1.0, &a, &b, 0.0, &c, NULL, 0));
    ck_assert_uint_eq(attn_gemm_workspace_size(0, 0, &a, &b, &c), 0);
    /* gemm: N beyond INT_MAX (C a petabyte description) */
    HS_OK(attn_view_init_strided(&a, ATTN_F32, tiny, 2, SH(2, 3), SH(0, 0)));
    HS_OK(attn_view_init_strided(&b, ATTN_F32, tiny, 2, SH(3, huge), SH(0, 0)));
    HS_OK(attn_view_init_strided(&c, ATTN_F32, tiny + 8, 2, SH(2, huge), SH(huge, 1)));
    HS_RANGE(attn_gemm(0, 0, 1.0, &a, &b, 0.0, &c, NULL, 0));
    /*
     * (No size_t overflow of gemm's packing buffers is reachable: a valid
     * view's bytes fit int64, and M, K, N <= INT_MAX. Too large a workspace
     * is ATTN_ENOMEM: test_gemm's gm_errors.)
     */

    /* sdpa: D beyond INT_MAX */
    attn_view q, k, v, o;
    HS_OK(attn_view_init_strided(&q, ATTN_F32, tiny, 4, SH(1, 1, 2, huge), SH(0, 0, 0, 0)));
    HS_OK(attn_view_init_strided(&k, ATTN_F32, tiny, 4, SH(1, 1, 3, huge), SH(0, 0, 0, 0)));
    HS_OK(attn_view_init_strided(&v, ATTN_F32, tiny, 4, SH(1, 1, 3, 2), SH(0, 0, 0, 0)));
    HS_OK(attn_view_init(&o, ATTN_F32, tiny + 8, 4, SH(1, 1, 2, 2)));
    HS_RANGE(attn_sdpa(&q, &k, &v, NULL, &o, NULL, 0));
    ck_assert_uint_eq(attn_sdpa_workspace_size(&q, &k, &v, NULL), 0);
    /* sdpa materialized: a score row of 2^31 keys */
    attn_sdpa_opts mat = {.algo = ATTN_ALGO_MATERIALIZED};
    HS_OK(attn_view_init_strided(&q, ATTN_F32, tiny, 4, SH(1, 1, 2, 2), SH(0, 0, 0, 0)));
    HS_OK(attn_view_init_strided(&k, ATTN_F32, tiny, 4, SH(1, 1, huge, 2), SH(0, 0, 0, 0)));
    HS_OK(attn_view_init_strided(&v, ATTN_F32, tiny, 4, SH(1, 1, huge, 2), SH(0, 0, 0, 0)));
    HS_RANGE(attn_sdpa(&q, &k, &v, &mat, &o, NULL, 0));
    ck_assert_uint_eq(attn_sdpa_workspace_size(&q, &k, &v, &mat), 0);
    {
        attn_view lse;
        HS_OK(attn_view_init(&lse, ATTN_F32, tiny + 16, 3, SH(1, 1, 2)));
        HS_OK(attn_view_init_strided(&q, ATTN_F32, tiny, 4, SH(1, 1, 2, huge), SH(0, 0, 0, 0)));
        HS_OK(attn_view_init_strided(&k, ATTN_F32, tiny, 4, SH(1, 1, 3, huge), SH(0, 0, 0, 0)));
        HS_OK(attn_view_init_strided(&v, ATTN_F32, tiny, 4, SH(1, 1, 3, 2), SH(0, 0, 0, 0)));
        attn_view dqh;
        HS_OK(attn_view_init_strided(&dqh, ATTN_F32, tiny + 64, 4, SH(1, 1, 2, huge),
                                     SH(0, 0, huge, 1)));
        HS_RANGE(attn_sdpa_backward(&q, &k, &v, NULL, &o, &lse, &o, &dqh, NULL, NULL, NULL, 0));
        ck_assert_uint_eq(attn_sdpa_backward_workspace_size(&q, &k, &v, NULL), 0);
    }
    /* linear: In beyond INT_MAX */
    {
        attn_view x, w, y;
        HS_OK(attn_view_init_strided(&x, ATTN_F32, tiny, 2, SH(2, huge), SH(0, 0)));
        HS_OK(attn_view_init_strided(&w, ATTN_F32, tiny, 2, SH(huge, 3), SH(0, 0)));
        HS_OK(attn_view_init(&y, ATTN_F32, tiny + 8, 2, SH(2, 3)));
        HS_RANGE(attn_linear(&x, &w, NULL, &y, NULL, 0));
        ck_assert_uint_eq(attn_linear_workspace_size(&x, &w, &y), 0);
        {
            attn_view dy;
            HS_OK(attn_view_init_strided(&dy, ATTN_F32, tiny, 2, SH(2, 3), SH(0, 0)));
            attn_view dxh;
            HS_OK(
                attn_view_init_strided(&dxh, ATTN_F32, tiny + 64, 2, SH(2, huge), SH(huge, 1)));
            HS_RANGE(attn_linear_backward(&x, &w, &dy, &dxh, NULL, NULL, NULL, 0));
        }
    }
    /* diag: a LAPACK dim beyond INT_MAX */
    attn_view s;
    HS_OK(attn_view_init_strided(&a, ATTN_F32, tiny, 2, SH(huge, 2), SH(0, 0)));
    HS_OK(attn_view_init(&s, ATTN_F32, tiny + 8, 1, SH(2)));
    HS_RANGE(attn_diag_singular_values(&a, &s, NULL, 0, NULL));
    ck_assert_uint_eq(attn_diag_singular_values_workspace_size(&a), 0);
    HS_OK(attn_view_init_strided(&a, ATTN_F32, tiny, 2, SH(huge, 2), SH(2, 1)));
    HS_RANGE(attn_init_orthogonal(1.0, 1, 2, &a, NULL, 0, NULL));
    ck_assert_uint_eq(attn_init_orthogonal_workspace_size(&a), 0);
}
END_TEST

/* The hooks see attn's allocations and BLAS calls (else the tests above prove nothing). */
START_TEST(hs_hooks_see_calls) {
    float a[12], b[12], c[9];
    for (int i = 0; i < 12; ++i)
        a[i] = b[i] = (float)i;
    attn_view A, B, C;
    attn_view_init_strided(&A, ATTN_F32, a, 2, SH(3, 2), SH(4, 2)); /* packed */
    attn_view_init(&B, ATTN_F32, b, 2, SH(2, 3));
    attn_view_init(&C, ATTN_F32, c, 2, SH(3, 3));
    bool alloc_hook = hs_alloc_hook_live(); /* under valgrind: the BLAS hook only */
    int a0 = hs_allocs, b0 = hs_blas;
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &A, &B, 0.0, &C, NULL, 0), ATTN_OK);
    if (alloc_hook)
        ck_assert_int_gt(hs_allocs, a0);
    ck_assert_int_gt(hs_blas, b0);
    ck_assert(c[0] == a[0] * b[0] + a[2] * b[3]);
}
END_TEST

/*
 * A leading dimension beyond INT_MAX is not an error: the operand is packed.
 * A (2, 3) with row stride 2^31 spans 8 GiB of address space: reserved with
 * mmap(MAP_NORESERVE), only two pages are ever touched.
 */
START_TEST(hs_ld_beyond_int_max_packs) {
    const int64_t ld = (int64_t)INT_MAX + 1;
    size_t bytes = (size_t)(ld + 3) * sizeof(float);
    float *big = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (big == MAP_FAILED)
        return; /* no 8 GiB of address space here (e.g. under a memory checker) */
    for (int j = 0; j < 3; ++j)
        big[j] = (float)(j + 1), big[ld + j] = (float)(j + 4);
    float b[6] = {1, 0, 0, 1, 1, 1}, c[4];
    attn_view A, B, C;
    ck_assert_int_eq(attn_view_init_strided(&A, ATTN_F32, big, 2, SH(2, 3), SH(ld, 1)),
                     ATTN_OK);
    attn_view_init(&B, ATTN_F32, b, 2, SH(3, 2));
    attn_view_init(&C, ATTN_F32, c, 2, SH(2, 2));
    ck_assert_uint_gt(attn_gemm_workspace_size(0, 0, &A, &B, &C), 0);
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &A, &B, 0.0, &C, NULL, 0), ATTN_OK);
    /* rows (1 2 3), (4 5 6) times B = ((1 0) (0 1) (1 1)) */
    ck_assert(c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11);
    munmap(big, bytes);
}
END_TEST

/* ---- hostile numerics -------------------------------------------------------------- */

/* softmax rows: extreme but finite logits stay finite; non-finite ones follow the header. */
static void hs_softmax_rows(attn_dtype dt) {
    const double inf = INFINITY, dn = dt == ATTN_F64 ? 4e-310 : 4e-40; /* denormal */
    enum { R = 9, N = 4 };
    const double rows[R][N] = {
        {1e30, -1e30, 0, 1e30},       /* two maxima share, the rest 0 */
        {-1e30, -1e30, -1e30, -1e30}, /* uniform */
        {1e30, 1e30 * (1 - 1e-6), 5, -5},
        {dn, -dn, 2 * dn, 0},     /* denormals: uniform to rounding */
        {-inf, -inf, -inf, -inf}, /* no key: zeros */
        {-inf, 3, -inf, 3},
        {inf, 1, inf, -inf}, /* +inf share equally */
        {NAN, 1, 2, 3},      /* NaN row */
        {1, 2, 3, NAN},
    };
    const double want[R][N] = {
        {0.5, 0, 0, 0.5},     {0.25, 0.25, 0.25, 0.25},
        {1, 0, 0, 0},         {0.25, 0.25, 0.25, 0.25},
        {0, 0, 0, 0},         {0, 0.5, 0, 0.5},
        {0.5, 0, 0.5, 0},     {NAN, NAN, NAN, NAN},
        {NAN, NAN, NAN, NAN},
    };
    double xm[R * N], ym[R * N], wm[R * N];
    float xf[R * N], yf[R * N];
    attn_view x, y, w;
    attn_view_init(&x, dt, dt == ATTN_F64 ? (void *)xm : (void *)xf, 2, SH(R, N));
    attn_view_init(&y, dt, dt == ATTN_F64 ? (void *)ym : (void *)yf, 2, SH(R, N));
    attn_view_init(&w, ATTN_F64, wm, 2, SH(R, N));
    for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < N; ++j) {
            tu_set(&x, (int64_t[]){i, j}, rows[i][j]);
            tu_set(&w, (int64_t[]){i, j}, want[i][j]);
        }
    if (dt == ATTN_F32) /* 1e30 (1 - 1e-6) rounds to a different float than 1e30 */
        ck_assert(xf[8] != xf[9]);
    ck_assert_int_eq(attn_softmax(&x, &y), ATTN_OK);
    tu_check_close(&y, &w, TU_RTOL(dt), TU_ATOL(dt), "softmax of hostile rows");
}

START_TEST(hs_softmax_extremes) {
    hs_softmax_rows(ATTN_F32);
    hs_softmax_rows(ATTN_F64);
}
END_TEST

/*
 * sdpa with logits of +-1e30 (through the additive bias and through q k^T
 * itself) and with denormal inputs: finite, and equal to the naive
 * reference, in both algorithms and both dtypes.
 */
static void hs_sdpa_extreme_case(attn_dtype dt, attn_algo algo, int kind) {
    enum { B = 1, H = 2, TQ = 3, TK = 5, D = 4 };
    size_t es = attn_dtype_size(dt);
    void *qm = calloc(B * H * TQ * D, es), *km = calloc(B * H * TK * D, es),
         *vm = calloc(B * H * TK * D, es), *bm = calloc(B * H * TQ * TK, es),
         *om = calloc(B * H * TQ * D, es);
    double wmem[B * H * TQ * D], lmem[B * H * TQ], lgot_m[B * H * TQ * 2];
    attn_view q, k, v, bias, o, want, wl, lg;
    attn_view_init(&q, dt, qm, 4, SH(B, H, TQ, D));
    attn_view_init(&k, dt, km, 4, SH(B, H, TK, D));
    attn_view_init(&v, dt, vm, 4, SH(B, H, TK, D));
    attn_view_init(&bias, dt, bm, 4, SH(B, H, TQ, TK));
    attn_view_init(&o, dt, om, 4, SH(B, H, TQ, D));
    attn_view_init(&want, ATTN_F64, wmem, 4, SH(B, H, TQ, D));
    attn_view_init(&wl, ATTN_F64, lmem, 3, SH(B, H, TQ));
    attn_view_init(&lg, dt, lgot_m, 3, SH(B, H, TQ));
    uint64_t seed = 7;
    tu_fill(&q, &seed, 1.0);
    tu_fill(&k, &seed, 1.0);
    tu_fill(&v, &seed, 1.0);
    attn_sdpa_opts opts = {.algo = algo, .lse = &lg};
    double dn = dt == ATTN_F64 ? 1e-310 : 1e-40;
    int64_t idx[4] = {0};
    switch (kind) {
    case 0: /* bias +-1e30: one dominant key per row, -1e30 elsewhere but one key */
        do {
            double b = idx[3] == (idx[2] + idx[1]) % TK ? 1e30
                       : idx[3] == (idx[2] + 2) % TK    ? 0.0
                                                        : -1e30;
            tu_set(&bias, idx, b);
        } while (tu_inc(idx, bias.shape, 4));
        opts.bias = &bias;
        break;
    case 1: /* every score of a row -1e30 (a fully "masked" row by value): uniform */
        do
            tu_set(&bias, idx, -1e30);
        while (tu_inc(idx, bias.shape, 4));
        opts.bias = &bias;
        break;
    case 2: /* q k^T itself about +-1e30: q, k entries +-1e15 */
        do
            tu_set(&q, idx, tu_get(&q, idx) * 1e15);
        while (tu_inc(idx, q.shape, 4));
        memset(idx, 0, sizeof idx);
        do
            tu_set(&k, idx, (tu_get(&k, idx) > 0 ? 1e15 : -1e15));
        while (tu_inc(idx, k.shape, 4));
        break;
    default: /* denormal q, k and v */
        do
            tu_set(&q, idx, tu_get(&q, idx) * dn);
        while (tu_inc(idx, q.shape, 4));
        memset(idx, 0, sizeof idx);
        do
            tu_set(&k, idx, tu_get(&k, idx) * dn);
        while (tu_inc(idx, k.shape, 4));
        memset(idx, 0, sizeof idx);
        do
            tu_set(&v, idx, tu_get(&v, idx) * dn);
        while (tu_inc(idx, v.shape, 4));
        break;
    }
    ref_sdpa(&q, &k, &v, &opts, &want, NULL, &wl);
    ck_assert_int_eq(attn_sdpa(&q, &k, &v, &opts, &o, NULL, 0), ATTN_OK);
    char what[64];
    snprintf(what, sizeof what, "sdpa extreme kind %d algo %d %s", kind, algo,
             dt == ATTN_F64 ? "f64" : "f32");
    memset(idx, 0, sizeof idx);
    do {
        ck_assert_msg(isfinite(tu_get(&o, idx)), "%s: non-finite output", what);
    } while (tu_inc(idx, o.shape, 4));
    /* denormal outputs: compared absolutely (their relative precision is gone) */
    double atol = kind == 3 ? dn : TU_ATOL(dt);
    tu_check_close(&o, &want, dt == ATTN_F64 ? 1e-12 : 1e-4, atol, what);
    memset(idx, 0, sizeof idx);
    do
        ck_assert_msg(isfinite(tu_get(&lg, idx)), "%s: non-finite lse", what);
    while (tu_inc(idx, lg.shape, 3));
    free(qm), free(km), free(vm), free(bm), free(om);
}

START_TEST(hs_sdpa_extremes) {
    for (int d = 0; d < 2; ++d)
        for (int algo = ATTN_ALGO_MATERIALIZED; algo <= ATTN_ALGO_TILED; ++algo)
            for (int kind = 0; kind < 4; ++kind)
                hs_sdpa_extreme_case(d ? ATTN_F64 : ATTN_F32, (attn_algo)algo, kind);
}
END_TEST

/*
 * NaN inputs to sdpa: a NaN in query row i poisons row i only; a NaN score
 * that a mask removes (keep == 0 at that key) is gone; no hang, no crash.
 */
START_TEST(hs_sdpa_nan) {
    for (int algo = ATTN_ALGO_MATERIALIZED; algo <= ATTN_ALGO_TILED; ++algo) {
        enum { TQ = 4, TK = 6, D = 3 };
        double q[TQ * D], k[TK * D], v[TK * D], o[TQ * D];
        unsigned char keep[TQ * TK];
        uint64_t seed = 3;
        attn_view Q, K, V, O, M;
        attn_view_init(&Q, ATTN_F64, q, 4, SH(1, 1, TQ, D));
        attn_view_init(&K, ATTN_F64, k, 4, SH(1, 1, TK, D));
        attn_view_init(&V, ATTN_F64, v, 4, SH(1, 1, TK, D));
        attn_view_init(&O, ATTN_F64, o, 4, SH(1, 1, TQ, D));
        attn_view_init(&M, ATTN_U8, keep, 4, SH(1, 1, TQ, TK));
        tu_fill(&Q, &seed, 1.0);
        tu_fill(&K, &seed, 1.0);
        tu_fill(&V, &seed, 1.0);
        memset(keep, 1, sizeof keep);
        q[1 * D + 2] = NAN; /* query row 1 */
        k[4 * D + 0] = NAN; /* key 4, hidden from every row by the mask */
        for (int i = 0; i < TQ; ++i)
            keep[i * TK + 4] = 0;
        attn_sdpa_opts opts = {.algo = (attn_algo)algo, .keep = &M};
        ck_assert_int_eq(attn_sdpa(&Q, &K, &V, &opts, &O, NULL, 0), ATTN_OK);
        for (int i = 0; i < TQ; ++i)
            for (int d = 0; d < D; ++d)
                ck_assert_msg(i == 1 ? isnan(o[i * D + d]) : isfinite(o[i * D + d]),
                              "algo %d: row %d col %d = %g", algo, i, d, o[i * D + d]);
    }
}
END_TEST

/* layernorm: huge, denormal and non-finite rows, each row on its own. */
START_TEST(hs_layernorm_extremes) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        double dn = d ? 1e-310 : 1e-40;
        enum { R = 5, C = 4 };
        const double rows[R][C] = {
            {1e30, -1e30, 3e29, 0}, /* variance 1e60: fine in double */
            {dn, -dn, 2 * dn, 0},   /* tiny variance: eps dominates, output ~0 */
            {NAN, 1, 2, 3},         /* NaN row */
            {INFINITY, 1, 2, 3},    /* inf row: NaN (inf - inf) */
            {1, 2, 3, 4},           /* an ordinary row stays ordinary */
        };
        double xm[R * C], ym[R * C], wm[R * C];
        attn_view x, y, w;
        attn_view_init(&x, dt, xm, 2, SH(R, C));
        attn_view_init(&y, dt, ym, 2, SH(R, C));
        attn_view_init(&w, ATTN_F64, wm, 2, SH(R, C));
        for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < C; ++j)
                tu_set(&x, (int64_t[]){i, j}, rows[i][j]);
        ck_assert_int_eq(attn_layernorm(1e-5, &x, NULL, NULL, &y, NULL, NULL), ATTN_OK);
        ref_layernorm(1e-5, &x, NULL, NULL, &w, NULL, NULL);
        for (int64_t j = 0; j < C; ++j) {
            ck_assert(isfinite(tu_get(&y, (int64_t[]){0, j})));
            ck_assert(fabs(tu_get(&y, (int64_t[]){1, j})) < 1e-3);
            ck_assert(isnan(tu_get(&y, (int64_t[]){2, j})));
            ck_assert(isnan(tu_get(&y, (int64_t[]){3, j})));
        }
        attn_view y4, w4;
        attn_view_select(&y, 0, 4, &y4);
        attn_view_select(&w, 0, 4, &w4);
        tu_check_close(&y4, &w4, TU_RTOL(dt), TU_ATOL(dt), "layernorm ordinary row");
        attn_view_select(&y, 0, 0, &y4);
        attn_view_select(&w, 0, 0, &w4);
        tu_check_close(&y4, &w4, TU_RTOL(dt), TU_ATOL(dt), "layernorm row of 1e30");
    }
}
END_TEST

/* Activations at the ends of the line: +-inf, NaN, +-1e30, denormals. */
START_TEST(hs_activation_extremes) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        double dn = d ? 1e-310 : 1e-40;
        enum { N = 7 };
        const double xs[N] = {INFINITY, -INFINITY, NAN, 1e30, -1e30, dn, -dn};
        for (int act = 0; act < 3; ++act) {
            double xm[N], ym[N];
            attn_view x, y;
            attn_view_init(&x, dt, xm, 1, SH(N));
            attn_view_init(&y, dt, ym, 1, SH(N));
            for (int64_t i = 0; i < N; ++i)
                tu_set(&x, &i, xs[i]);
            ck_assert_int_eq(attn_activation((attn_act)act, &x, &y), ATTN_OK);
            double r[N];
            for (int64_t i = 0; i < N; ++i)
                r[i] = tu_get(&y, &i);
            ck_assert_msg(r[0] == INFINITY, "act %d: f(+inf) = %g", act, r[0]);
            /* docs/numerics.md: GELU(-inf) is NaN (0 inf), as the formulas give */
            ck_assert_msg(act == ATTN_ACT_RELU ? r[1] == 0.0 : isnan(r[1]),
                          "act %d: f(-inf) = %g", act, r[1]);
            ck_assert_msg(isnan(r[2]), "act %d: f(NaN) = %g", act, r[2]);
            ck_assert_msg(r[3] == (dt == ATTN_F32 ? (double)1e30f : 1e30),
                          "act %d: f(1e30) = %g", act, r[3]);
            ck_assert_msg(r[4] == 0.0, "act %d: f(-1e30) = %g", act, r[4]);
            ck_assert_msg(isfinite(r[5]) && isfinite(r[6]) && fabs(r[5]) <= dn &&
                              fabs(r[6]) <= dn,
                          "act %d: denormals", act);
        }
    }
}
END_TEST

/*
 * No allocation in the hot path: every case that allocates with work == NULL
 * (exactly once: attn__work_acquire) runs with a caller workspace of that size
 * and then allocates nothing.
 */
START_TEST(hs_no_alloc_with_workspace) {
    if (!hs_alloc_hook_live())
        return; /* valgrind: the ASan and plain runs check this */
    int allocating = 0;
    for (int d = 0; d < 2; ++d)
        for (int w = 0; w < HS_NCASES; ++w) {
            hs_case c;
            hs_build(w, d ? ATTN_F64 : ATTN_F32, &c);
            int a0 = hs_allocs;
            hs_expect(&c, ATTN_OK, "work NULL");
            int n = hs_allocs - a0;
            ck_assert_msg(n <= 1, "%s allocated %d times", c.name, n);
            if (n == 0)
                continue;
            ++allocating;
            hs_work_size = hs_alloc_size;
            hs_work = malloc(hs_work_size);
            hs_build(w, d ? ATTN_F64 : ATTN_F32, &c);
            a0 = hs_allocs;
            hs_expect(&c, ATTN_OK, "caller workspace");
            ck_assert_msg(hs_allocs == a0, "%s allocated with a workspace", c.name);
            free(hs_work);
            hs_work = NULL, hs_work_size = 0;
        }
    ck_assert_int_ge(allocating, 2 * 8); /* gemm, linear, sdpa, layers, diag, orthogonal */
}
END_TEST

/* ---- regressions: inputs the fuzzers found --------------------------------------- */

/*
 * Views describing address ranges beyond the address space (valid: never
 * touched) go through every algebra op and attn_view_span without
 * undefined pointer arithmetic (UBSan in CI), split/merge strides that
 * would overflow int64 are handled, and attn_view_copy refuses a destination
 * that overlaps itself (fuzz_view).
 */
START_TEST(hs_regress_view_arithmetic) {
    static unsigned char buf[16];
    attn_view v, w;
    /* span 2^62 bytes below buf: lo wraps below address 0 */
    HS_OK(attn_view_init_strided(&v, ATTN_U8, buf, 2, SH(3, 2), SH(-(INT64_C(1) << 61), 1)));
    const void *lo, *hi;
    attn_view_span(&v, &lo, &hi);
    ck_assert_uint_eq((uintptr_t)buf - (uintptr_t)lo, (uint64_t)1 << 62);
    ck_assert_uint_eq((uintptr_t)hi - (uintptr_t)buf, 2);
    HS_OK(attn_view_flip(&v, 0, &w));
    ck_assert_uint_eq((uintptr_t)buf - (uintptr_t)w.data, (uint64_t)1 << 62);
    HS_OK(attn_view_select(&v, 0, 2, &w));
    HS_OK(attn_view_slice(&v, 0, 1, 3, 1, &w));
    /* split whose outer extent is 1: stride * inner overflows, and is never used */
    HS_OK(attn_view_init_strided(&v, ATTN_U8, buf, 1, SH(3), SH(INT64_MAX / 4)));
    HS_OK(attn_view_split(&v, 0, 3, &w));
    ck_assert_int_eq(w.shape[0], 1);
    ck_assert_int_eq(w.stride[1], INT64_MAX / 4);
    HS_OK(attn_view_check(&w));
    /* merge test n1 * s1 overflows: not mergeable, no overflow */
    HS_OK(attn_view_init_strided(&v, ATTN_U8, buf, 2, SH(2, 3), SH(1, INT64_MAX / 4)));
    ck_assert_int_eq(attn_view_merge(&v, 0, &w), ATTN_ESTRIDE);
    /* an empty view obeys the same rules: the non-zero extents' product must fit */
    ck_assert_int_eq(attn_view_init(&v, ATTN_U8, NULL, 3, SH(0, INT64_C(1) << 40, 1 << 30)),
                     ATTN_ERANGE);
    HS_OK(attn_view_init(&v, ATTN_U8, NULL, 2, SH(0, 5)));
    /* splitting its empty axis with a huge inner extent would break them: ERANGE */
    ck_assert_int_eq(attn_view_split(&v, 0, INT64_C(1) << 62, &w), ATTN_ERANGE);
    ck_assert_int_eq(attn_view_numel(&v), 0);
    /* attn_view_copy into a destination whose strides revisit elements (1, 1) */
    static unsigned char src[4] = {1, 2, 3, 4}, dst[8];
    HS_OK(attn_view_init(&v, ATTN_U8, src, 2, SH(2, 2)));
    HS_OK(attn_view_init_strided(&w, ATTN_U8, dst, 2, SH(2, 2), SH(1, 1)));
    ck_assert_int_eq(attn_view_copy(&v, &w), ATTN_ESTRIDE);
}
END_TEST

/*
 * gemm on an empty C with 2^56 batches returns at once (it looped over every
 * batch), and plans no packing workspace (fuzz_gemm, fuzz_layers).
 */
START_TEST(hs_regress_gemm_empty_batches) {
    static double a[8], b[8], c[12];
    attn_view A, B, C;
    int64_t nb = INT64_C(1) << 28; /* 2^56 batches */
    HS_OK(attn_view_init_strided(&A, ATTN_F64, a, 4, SH(nb, nb, 0, 2), SH(0, 0, 2, 1)));
    HS_OK(attn_view_init(&B, ATTN_F64, b, 2, SH(2, 3)));
    HS_OK(attn_view_init_strided(&C, ATTN_F64, c, 4, SH(nb, nb, 0, 3), SH(0, 0, 3, 1)));
    /* C has no rows: nothing to do, and no loop over 2^56 batches */
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &A, &B, 0.0, &C, NULL, 0), ATTN_OK);
    /* an empty C plans no packing: 0 batches of (2^31 - 1, 8) asked for 64 GiB (ENOMEM) */
    attn_view Ab, Cp;
    HS_OK(attn_view_init_strided(&Ab, ATTN_F64, a, 2, SH(INT_MAX, 2), SH(0, 0)));
    HS_OK(attn_view_init_strided(&Cp, ATTN_F64, c, 3, SH(0, INT_MAX, 3), SH(0, 2, 2)));
    ck_assert_uint_eq(attn_gemm_workspace_size(0, 0, &Ab, &B, &Cp), 0);
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &Ab, &B, 0.0, &Cp, NULL, 0), ATTN_OK);
    /* K == 0 with NULL operands: C := beta C, the NULL pointers are never offset */
    attn_view A0, B0, C0;
    HS_OK(attn_view_init(&A0, ATTN_F64, NULL, 3, SH(2, 2, 0)));
    HS_OK(attn_view_init(&B0, ATTN_F64, NULL, 2, SH(0, 3)));
    HS_OK(attn_view_init(&C0, ATTN_F64, c, 3, SH(2, 2, 3)));
    for (int i = 0; i < 12; ++i)
        c[i] = i;
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &A0, &B0, 2.0, &C0, NULL, 0), ATTN_OK);
    for (int i = 0; i < 12; ++i)
        ck_assert(c[i] == 2.0 * i);
}
END_TEST

/*
 * sdpa with nothing to write (Dv == 0, no lse or weights) returns at once:
 * it looped over B*H*Tq rows (2^40 here). Empty views with NULL data are
 * never offset (fuzz_sdpa, UBSan).
 */
START_TEST(hs_regress_sdpa_nothing_to_write) {
    static float mem[64];
    attn_view q, k, v, o;
    int64_t tq = INT64_C(1) << 40;
    HS_OK(attn_view_init_strided(&q, ATTN_F32, mem, 4, SH(1, 1, tq, 2), SH(0, 0, 0, 1)));
    HS_OK(attn_view_init(&k, ATTN_F32, mem, 4, SH(1, 1, 3, 2)));
    HS_OK(attn_view_init(&v, ATTN_F32, NULL, 4, SH(1, 1, 3, 0)));
    HS_OK(attn_view_init(&o, ATTN_F32, NULL, 4, SH(1, 1, tq, 0)));
    for (int algo = 0; algo <= ATTN_ALGO_TILED; ++algo) {
        attn_sdpa_opts opts = {.algo = (attn_algo)algo};
        ck_assert_int_eq(attn_sdpa(&q, &k, &v, &opts, &o, NULL, 0), ATTN_OK);
    }
    HS_OK(attn_view_init(&q, ATTN_F32, NULL, 4, SH(1, 1, 0, 2)));
    HS_OK(attn_view_init(&o, ATTN_F32, NULL, 4, SH(1, 1, 0, 3)));
    HS_OK(attn_view_init(&v, ATTN_F32, mem, 4, SH(1, 1, 3, 3)));
    ck_assert_uint_eq(attn_sdpa_workspace_size(&q, &k, &v, NULL), 0);
    ck_assert_int_eq(attn_sdpa(&q, &k, &v, NULL, &o, NULL, 0), ATTN_OK);
}
END_TEST

/*
 * Encoder forward and backward with weights that attn_gemm must pack (no unit
 * stride), convenience workspace: they said ATTN_EWORKSPACE, because the
 * counting pass gave every scratch view one dummy address and the nested
 * workspace queries saw aliases (fuzz_layers). Same results as contiguous weights.
 */
START_TEST(hs_regress_encoder_packed_weights) {
    enum { B = 2, T = 3, C = 8, F = 16 };
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        attn_encoder_config cfg = {.mha = {.dtype = dt, .d_model = C, .heads = 2, .bias = true},
                                   .ffn = {.dtype = dt, .d_model = C, .d_ff = F, .bias = true},
                                   .ln_affine = true};
        size_t n = attn_encoder_params_size(&cfg);
        void *slab = aligned_alloc(64, n), *gslab = aligned_alloc(64, n);
        attn_encoder_params p, g;
        HS_OK(attn_encoder_params_bind(&p, &cfg, slab, n));
        HS_OK(attn_encoder_params_bind(&g, &cfg, gslab, n));
        attn_view all;
        HS_OK(attn_view_init(&all, dt, slab, 1, SH((int64_t)(n / attn_dtype_size(dt)))));
        uint64_t seed = 5;
        tu_fill(&all, &seed, 0.5);
        double xm[B * T * C], o1[B * T * C], o2[B * T * C], dx1[B * T * C], dx2[B * T * C];
        double packed_w1[2 * C * F];
        attn_view x, out1, out2, dx, w1p;
        HS_OK(attn_view_init(&x, dt, xm, 3, SH(B, T, C)));
        HS_OK(attn_view_init(&out1, dt, o1, 3, SH(B, T, C)));
        HS_OK(attn_view_init(&out2, dt, o2, 3, SH(B, T, C)));
        tu_fill(&x, &seed, 1.0);
        HS_OK(attn_encoder_forward(&cfg, &p, &x, NULL, &out1, NULL, NULL, 0));
        /* w1 (C, F) every other element of a (C, 2F) buffer: strides (2F, 2) */
        HS_OK(attn_view_init_strided(&w1p, dt, packed_w1, 2, SH(C, F), SH(2 * F, 2)));
        HS_OK(attn_view_copy(&p.ffn.w1, &w1p));
        attn_encoder_params pp = p;
        pp.ffn.w1 = w1p;
        HS_OK(attn_encoder_forward(&cfg, &pp, &x, NULL, &out2, NULL, NULL, 0));
        tu_check_close(&out2, &out1, TU_RTOL(dt), TU_ATOL(dt), "encoder, packed w1");
        /* backward through the same weights, from a bound cache */
        size_t cn = attn_encoder_cache_size(&cfg, B, T);
        void *cslab = aligned_alloc(64, cn);
        attn_view cv[15];
        attn_trace cache;
        HS_OK(attn_encoder_cache_bind(&cfg, B, T, cslab, cn, cv, &cache));
        HS_OK(attn_encoder_forward(&cfg, &p, &x, NULL, &out1, &cache, NULL, 0));
        for (int pass = 0; pass < 2; ++pass) {
            HS_OK(attn_view_init(&dx, dt, pass ? dx2 : dx1, 3, SH(B, T, C)));
            memset(pass ? dx2 : dx1, 0, sizeof dx1);
            memset(gslab, 0, n);
            HS_OK(attn_encoder_backward(&cfg, pass ? &pp : &p, &x, NULL, &cache, &out1, &dx, &g,
                                        NULL, 0));
        }
        attn_view dxa, dxb;
        HS_OK(attn_view_init(&dxa, dt, dx1, 3, SH(B, T, C)));
        HS_OK(attn_view_init(&dxb, dt, dx2, 3, SH(B, T, C)));
        tu_check_close(&dxb, &dxa, TU_RTOL(dt), TU_ATOL(dt), "encoder backward, packed w1");
        free(slab), free(gslab), free(cslab);
    }
}
END_TEST

/* ---- one status for a length out of range -------------------------------------- */

/* n bytes carved from the arena, 64-byte aligned, zeroed. */
static void *hs_carve(size_t n) {
    hs_used = (hs_used + 63) & ~(size_t)63;
    ck_assert_uint_le(hs_used + n, HS_ARENA_BYTES / 2);
    void *p = hs_mem + hs_used;
    memset(p, 0, n);
    hs_used += n;
    return p;
}

/* call must return ATTN_ERANGE and leave every byte of the arena as it was */
#define HS_LEN_RANGE(call, what)                                                            \
    do {                                                                                    \
        memcpy(hs_snap, hs_mem, sizeof hs_mem);                                             \
        attn_status st_ = (call);                                                           \
        ck_assert_msg(st_ == ATTN_ERANGE, "%s: got %s, want ATTN_ERANGE", (what),           \
                      attn_status_name(st_));                                               \
        ck_assert_msg(memcmp(hs_snap, hs_mem, sizeof hs_mem) == 0, "%s: wrote memory",      \
                      (what));                                                              \
    } while (0)

/*
 * A per-batch length one past the end or -1: ATTN_ERANGE, nothing written, through
 * attn_sdpa (kv_len), attn_mha_forward and attn_decoder_forward (kv_len), attn_sdpa_decode
 * (len) and attn_mha_step (the cache's len); every tensor, length and parameter in the
 * arena. Each call is first run valid (ATTN_OK).
 */
START_TEST(hs_length_out_of_range) {
    enum { B = 2, T = 3, C = 4, H = 2, TM = 6 };
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        hs_case c0, *c = &c0;
        memset(c, 0, sizeof *c);
        hs_used = 0;
        hs_seed = 7;
        c->dt = dt;
        /* sdpa and decode: q, k, v, out; the cache k, v (B, 1, TM, D) */
        hs_in(c, 4, SH(B, H, T, 2));
        hs_in(c, 4, SH(B, 1, T, 2));
        hs_in(c, 4, SH(B, 1, T, 2));
        hs_in(c, 4, SH(B, H, 1, 2));
        hs_in(c, 4, SH(B, 1, TM, 2));
        hs_in(c, 4, SH(B, 1, TM, 2));
        hs_in(c, 3, SH(B, T, C));
        hs_in(c, 3, SH(B, 1, C));
        hs_outp(c, 4, SH(B, H, T, 2));
        hs_outp(c, 4, SH(B, H, 1, 2));
        hs_outp(c, 3, SH(B, T, C));
        hs_outp(c, 3, SH(B, 1, C));
        attn_view *out = hs_out(c, 0), *dout = hs_out(c, 1), *lout = hs_out(c, 2),
                  *sout = hs_out(c, 3);
        int64_t *kv_len = hs_carve(B * sizeof(int64_t)), *len = hs_carve(B * sizeof(int64_t));
        /* the layers: an MHA with its parameters, a cache, a decoder-only block */
        attn_mha_config mc = {.dtype = dt, .d_model = C, .heads = H, .bias = true};
        attn_decoder_config dc = {.self_attn = mc,
                                  .ffn = {.dtype = dt, .d_model = C, .d_ff = 8, .bias = true}};
        size_t mn = attn_mha_params_size(&mc), cn = attn_kv_cache_size(&mc, B, TM),
               dn = attn_decoder_params_size(&dc);
        attn_mha_params mp;
        attn_kv_cache kc;
        attn_decoder_params dp;
        HS_OK(attn_mha_params_bind(&mp, &mc, hs_carve(mn), mn));
        HS_OK(attn_kv_cache_bind(&kc, &mc, B, TM, hs_carve(cn), cn));
        HS_OK(attn_decoder_params_bind(&dp, &dc, hs_carve(dn), dn));
        attn_sdpa_opts so = {.kv_len = kv_len};
        int64_t bad[2][2] = {{T + 1, T}, {T, -1}}, badc[2][2] = {{TM + 1, 0}, {0, -1}};
        for (int m = 0; m < 2; ++m) {
            kv_len[0] = kv_len[1] = T;
            len[0] = len[1] = 4;
            kc.len[0] = kc.len[1] = 2;
            HS_OK(attn_sdpa(V(0), V(1), V(2), &so, out, NULL, 0));
            HS_OK(attn_sdpa_decode(V(3), V(4), V(5), len, true, NULL, dout, NULL, NULL, 0));
            HS_OK(attn_mha_forward(&mc, &mp, V(6), NULL, &so, lout, NULL, NULL, 0));
            HS_OK(attn_decoder_forward(&dc, &dp, V(6), NULL, &so, NULL, lout, NULL, NULL, 0));
            HS_OK(attn_mha_step(&mc, &mp, NULL, V(7), &kc, sout, NULL, 0));
            kv_len[0] = bad[m][0], kv_len[1] = bad[m][1];
            len[0] = badc[m][0], len[1] = badc[m][1];
            kc.len[0] = badc[m][0], kc.len[1] = badc[m][1];
            HS_LEN_RANGE(attn_sdpa(V(0), V(1), V(2), &so, out, NULL, 0), "attn_sdpa kv_len");
            HS_LEN_RANGE(attn_mha_forward(&mc, &mp, V(6), NULL, &so, lout, NULL, NULL, 0),
                     "attn_mha_forward kv_len");
            HS_LEN_RANGE(attn_decoder_forward(&dc, &dp, V(6), NULL, &so, NULL, lout, NULL, NULL, 0),
                     "attn_decoder_forward kv_len");
            HS_LEN_RANGE(attn_sdpa_decode(V(3), V(4), V(5), len, true, NULL, dout, NULL, NULL, 0),
                     "attn_sdpa_decode len");
            HS_LEN_RANGE(attn_mha_step(&mc, &mp, NULL, V(7), &kc, sout, NULL, 0),
                     "attn_mha_step cache len");
        }
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("aliasing");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, hs_baseline);
    tcase_add_test(tc, hs_alias_every_output);
    tcase_add_test(tc, hs_length_out_of_range);
    suite_add_tcase(s, tc);
    tc = tcase_create("overflow");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, hs_hooks_see_calls);
    tcase_add_test(tc, hs_no_alloc_with_workspace);
    tcase_add_test(tc, hs_range_numel_overflow);
    tcase_add_test(tc, hs_range_views);
    tcase_add_test(tc, hs_range_int_max);
    tcase_add_test(tc, hs_ld_beyond_int_max_packs);
    suite_add_tcase(s, tc);
    tc = tcase_create("numerics");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, hs_softmax_extremes);
    tcase_add_test(tc, hs_sdpa_extremes);
    tcase_add_test(tc, hs_sdpa_nan);
    tcase_add_test(tc, hs_layernorm_extremes);
    tcase_add_test(tc, hs_activation_extremes);
    suite_add_tcase(s, tc);
    tc = tcase_create("regressions");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, hs_regress_view_arithmetic);
    tcase_add_test(tc, hs_regress_gemm_empty_batches);
    tcase_add_test(tc, hs_regress_sdpa_nothing_to_write);
    tcase_add_test(tc, hs_regress_encoder_packed_weights);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
