/* SPDX-License-Identifier: MIT */
/*
 * Check suite for the promises of status.h and docs/reliability.md under hostile use:
 * every public function with outputs, every single-argument mutation, every aliasing
 * combination of its outputs (trace and gradient views included), over a sentinel arena.
 * A refused call must leave every byte of the arena as it was; an accepted call must
 * write only its outputs (and the workspace it was given) and give the reference's
 * numbers. ATTN_PROMISES_FULL=1 runs the exhaustive version (CI).
 */
#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>

#include "ref/ref.h"
#include "ref/ref_layers.h"
#include "testutil.h"

/* ---- the arena ---------------------------------------------------------------------- */

/*
 * Every tensor, slab and workspace of a case lives in one arena. The arena is
 * prefilled with a sentinel (0xFF bytes: NaN in both float types), inputs
 * get values, accumulating outputs (gradients) a finite start, and
 * everything else keeps the sentinel: a kernel that reads an output before
 * writing it, or a workspace before filling it, computes NaN and fails the
 * reference comparison. The lower half holds the case, the upper half
 * relaid inputs and workspaces.
 */
#define PR_ARENA    (1 << 19)
#define PR_HALF     (PR_ARENA / 2)
#define PR_SENTINEL 0xFF
static _Alignas(64) unsigned char pr_mem[PR_ARENA];
static unsigned char pr_snap[PR_ARENA];
static unsigned char pr_wmask[PR_ARENA];
static size_t pr_lo_used, pr_hi_used;
static uint64_t pr_seed;
static bool pr_full; /* ATTN_PROMISES_FULL=1 */
static int pr_light; /* ATTN_PROMISES_LIGHT=1: f64 only (valgrind runs it, 50x slower) */

#define PR_MAXV 64
enum { K_IN = 0, K_OUT = 1, K_ACC = 2 }; /* input, output, accumulating output */

typedef struct pr_case pr_case;
struct pr_case {
    const char *name;
    attn_dtype dt;
    int nv;
    attn_view v[PR_MAXV];
    unsigned char kind[PR_MAXV];
    uint64_t byptr;            /* bit i: view i is passed by pointer (a NULL can be passed) */
    uint64_t optional;         /* bit i: view i may be NULL (the call is then another call) */
    uint64_t nullv;            /* bit i: pass view i as NULL in this call */
    int same_as[PR_MAXV];      /* j + 1: pass &v[j] where view i goes (the same object) */
    uint64_t same_ok[PR_MAXV]; /* bit a of same_ok[o]: output o may BE input a (in place) */
    int nptr;                  /* other pointer arguments (configs, params, opts, trace) */
    uint64_t ptr_optional;     /* bit k: pointer argument k may be NULL */
    int nul_ptr;               /* pointer argument passed as NULL, -1 none */
    attn_status (*call)(pr_case *);
    size_t (*query)(pr_case *);              /* workspace query, NULL: no workspace argument */
    void (*ref)(pr_case *, attn_view *want); /* reference for the baseline, or NULL */
    void *work;
    size_t work_size;
    /* options */
    attn_sdpa_opts opts;
    int keep_i, bias_i, weights_i, lse_i; /* view indices behind opts, -1 none */
    int64_t kv_len[4];
    bool use_kv;
    bool has_opts, has_eps, has_act, has_trans;
    double eps;
    int act, ta, tb;
    double alpha, beta;
    /* layers */
    attn_mha_config mha;
    attn_ffn_config ffn;
    attn_encoder_config enc;
    int tr_idx[21]; /* view index of each attn_trace field (declaration order), -1 none */
    int p0, g0, x_i, xkv_i, dout_i, dx_i, dxkv_i, out_i;
    /* decode (promises_decode.c) */
    uint64_t raw;        /* bit i: view i is a raw int64 array (cache lengths), not a view */
    attn_step_opts step; /* options of a cached step */
    attn_decode_opts dopts; /* the decode kernel's: scale, threads, split of step */
    int64_t n_new[4];
    bool use_nnew, has_step, mlen;
    bool ref_all;     /* the baseline compares every output (cache entries, lengths) */
    bool query_upper; /* the query is an upper bound (it cannot see every argument) */
    attn_decoder_config dec;
    int ck_i, mk_i, len_i; /* self cache k (v, len follow), memory cache k, step lengths */
    int saved_idx[32];     /* view index of each attn_decoder_saved field, -1 none */
};

#define V(i) (&c->v[i])
#define PV(i)                                                                                  \
    ((i) < 0 || (c->nullv >> (i)&1) ? NULL : &c->v[c->same_as[i] ? c->same_as[i] - 1 : (i)])
#define PTR(k, e) (c->nul_ptr == (k) ? NULL : (e))
#define SH(...)   ((const int64_t[]){__VA_ARGS__})
#define PR_OK(call) TU_REQUIRE_OK(call) /* testutil.h: reports only a failure */

/* attn_trace fields in declaration order, as an array of member offsets. */
static const size_t pr_tr_off[21] = {offsetof(attn_trace, ln1),
                                     offsetof(attn_trace, q),
                                     offsetof(attn_trace, k),
                                     offsetof(attn_trace, v),
                                     offsetof(attn_trace, scores),
                                     offsetof(attn_trace, attention),
                                     offsetof(attn_trace, read_values),
                                     offsetof(attn_trace, concat),
                                     offsetof(attn_trace, projected_attention),
                                     offsetof(attn_trace, residual1),
                                     offsetof(attn_trace, ln2),
                                     offsetof(attn_trace, mlp_hidden_pre),
                                     offsetof(attn_trace, mlp_hidden),
                                     offsetof(attn_trace, mlp_output),
                                     offsetof(attn_trace, output),
                                     offsetof(attn_trace, lse),
                                     offsetof(attn_trace, ln1_mean),
                                     offsetof(attn_trace, ln1_rstd),
                                     offsetof(attn_trace, ln2_mean),
                                     offsetof(attn_trace, ln2_rstd),
                                     offsetof(attn_trace, residual2)};
enum {
    TR_LN1,
    TR_Q,
    TR_K,
    TR_V,
    TR_SCORES,
    TR_ATTN,
    TR_RV,
    TR_CONCAT,
    TR_PROJ,
    TR_R1,
    TR_LN2,
    TR_HPRE,
    TR_H,
    TR_MLPO,
    TR_OUT,
    TR_LSE,
    TR_M1,
    TR_S1,
    TR_M2,
    TR_S2,
    TR_R2
};

static attn_trace pr_trace(pr_case *c) {
    attn_trace t;
    memset(&t, 0, sizeof t);
    for (int f = 0; f < 21; ++f)
        if (c->tr_idx[f] >= 0)
            *(attn_view **)((char *)&t + pr_tr_off[f]) = PV(c->tr_idx[f]);
    return t;
}

static size_t pr_bytes(const attn_view *v) {
    return (size_t)tu_numel(v) * attn_dtype_size(v->dtype);
}

static int pr_add(pr_case *c, int kind, int ndim, const int64_t *shape, attn_dtype dt) {
    int k = c->nv++;
    TU_REQUIRE(k < PR_MAXV);
    size_t es = attn_dtype_size(dt), n = 1;
    for (int d = 0; d < ndim; ++d)
        n *= (size_t)shape[d];
    pr_lo_used = (pr_lo_used + 63) & ~(size_t)63;
    TU_REQUIRE(pr_lo_used + n * es <= PR_HALF);
    PR_OK(attn_view_init(&c->v[k], dt, pr_mem + pr_lo_used, ndim, shape));
    pr_lo_used += n * es;
    c->kind[k] = (unsigned char)kind;
    if (dt == ATTN_U8)
        memset(c->v[k].data, 1, n);
    else if (kind == K_IN)
        tu_fill(&c->v[k], &pr_seed, 1.0);
    else if (kind == K_ACC)
        tu_fill(&c->v[k], &pr_seed, 0.25);
    /* K_OUT keeps the sentinel */
    return k;
}
static int pr_in(pr_case *c, int ndim, const int64_t *shape) {
    return pr_add(c, K_IN, ndim, shape, c->dt);
}
static int pr_out(pr_case *c, int ndim, const int64_t *shape) {
    return pr_add(c, K_OUT, ndim, shape, c->dt);
}
static int pr_acc(pr_case *c, int ndim, const int64_t *shape) {
    return pr_add(c, K_ACC, ndim, shape, c->dt);
}
/* mark views [a, b) as passed by pointer */
static void pr_ptrs(pr_case *c, int a, int b) {
    for (int i = a; i < b; ++i)
        c->byptr |= (uint64_t)1 << i;
}

/* Room in the upper half (relaid inputs, workspaces); 64-byte aligned. */
static unsigned char *pr_hi(size_t bytes) {
    pr_hi_used = (pr_hi_used + 63) & ~(size_t)63;
    TU_REQUIRE(pr_hi_used + bytes <= PR_HALF);
    unsigned char *p = pr_mem + PR_HALF + pr_hi_used;
    pr_hi_used += bytes;
    return p;
}

/* ---- the calls ----------------------------------------------------------------------- */

static attn_sdpa_opts *pr_opts(pr_case *c) {
    c->opts.keep = PV(c->keep_i);
    c->opts.bias = PV(c->bias_i);
    c->opts.weights = PV(c->weights_i);
    c->opts.lse = PV(c->lse_i);
    c->opts.kv_len = c->use_kv ? c->kv_len : NULL;
    return PTR(0, &c->opts);
}

static attn_status call_gemm(pr_case *c) {
    return attn_gemm((attn_trans)c->ta, (attn_trans)c->tb, c->alpha, PV(0), PV(1), c->beta,
                     PV(2), c->work, c->work_size);
}
static size_t q_gemm(pr_case *c) {
    return attn_gemm_workspace_size((attn_trans)c->ta, (attn_trans)c->tb, V(0), V(1), V(2));
}
static void ref_gemm_c(pr_case *c, attn_view *w) {
    ref_gemm((attn_trans)c->ta, (attn_trans)c->tb, c->alpha, V(0), V(1), c->beta, V(2), &w[2]);
}
static attn_status call_copy(pr_case *c) { return attn_view_copy(PV(0), PV(1)); }
static void ref_copy(pr_case *c, attn_view *w) {
    int64_t idx[4] = {0};
    do
        tu_set(&w[1], idx, tu_get(V(0), idx));
    while (tu_inc(idx, V(0)->shape, V(0)->ndim));
}
static attn_status call_softmax(pr_case *c) { return attn_softmax(PV(0), PV(1)); }
static void ref_softmax_c(pr_case *c, attn_view *w) { ref_softmax(V(0), &w[1]); }
static attn_status call_softmax_bwd(pr_case *c) {
    return attn_softmax_backward(PV(0), PV(1), PV(2));
}
static void ref_softmax_bwd_c(pr_case *c, attn_view *w) {
    ref_softmax_backward(V(0), V(1), &w[2]);
}
static attn_status call_layernorm(pr_case *c) {
    return attn_layernorm(c->eps, PV(0), PV(1), PV(2), PV(3), PV(4), PV(5));
}
static void ref_layernorm_c(pr_case *c, attn_view *w) {
    ref_layernorm(c->eps, V(0), V(1), V(2), &w[3], &w[4], &w[5]);
}
static attn_status call_layernorm_bwd(pr_case *c) {
    return attn_layernorm_backward(PV(0), PV(1), PV(2), PV(3), PV(4), PV(5), PV(6), PV(7));
}
static void ref_layernorm_bwd_c(pr_case *c, attn_view *w) {
    ref_layernorm_backward(c->eps, V(0), V(1), V(4), &w[5], &w[6], &w[7]);
}
static attn_status call_act(pr_case *c) {
    return attn_activation((attn_act)c->act, PV(0), PV(1));
}
static void ref_act_c(pr_case *c, attn_view *w) {
    ref_activation((attn_act)c->act, V(0), &w[1]);
}
static attn_status call_act_bwd(pr_case *c) {
    return attn_activation_backward((attn_act)c->act, PV(0), PV(1), PV(2));
}
static void ref_act_bwd_c(pr_case *c, attn_view *w) {
    ref_activation_backward((attn_act)c->act, V(0), V(1), &w[2]);
}
static attn_status call_add(pr_case *c) { return attn_add(PV(0), PV(1), PV(2)); }
static void ref_add_c(pr_case *c, attn_view *w) { ref_add(V(0), V(1), &w[2]); }
static attn_status call_add_bwd(pr_case *c) { return attn_add_backward(PV(0), PV(1), PV(2)); }
static void ref_add_bwd_c(pr_case *c, attn_view *w) { ref_add_backward(V(0), &w[1], &w[2]); }
static attn_status call_linear(pr_case *c) {
    return attn_linear(PV(0), PV(1), PV(2), PV(3), c->work, c->work_size);
}
static size_t q_linear(pr_case *c) { return attn_linear_workspace_size(V(0), V(1), V(3)); }
static void ref_linear_c(pr_case *c, attn_view *w) { ref_linear(V(0), V(1), V(2), &w[3]); }
static attn_status call_linear_bwd(pr_case *c) {
    return attn_linear_backward(PV(0), PV(1), PV(2), PV(3), PV(4), PV(5), c->work,
                                c->work_size);
}
static size_t q_linear_bwd(pr_case *c) {
    return attn_linear_backward_workspace_size(V(0), V(1), V(2), V(3), V(4));
}
static void ref_linear_bwd_c(pr_case *c, attn_view *w) {
    ref_linear_backward(V(0), V(1), V(2), &w[3], &w[4], &w[5]);
}
/* sdpa: q k v keep bias | out weights lse */
static attn_status call_sdpa(pr_case *c) {
    attn_sdpa_opts *o = pr_opts(c);
    return attn_sdpa(PV(0), PV(1), PV(2), o, PV(5), c->work, c->work_size);
}
static size_t q_sdpa(pr_case *c) {
    return attn_sdpa_workspace_size(V(0), V(1), V(2), pr_opts(c));
}
static void ref_sdpa_c(pr_case *c, attn_view *w) {
    ref_sdpa(V(0), V(1), V(2), pr_opts(c), &w[5], c->weights_i >= 0 ? &w[c->weights_i] : NULL,
             &w[c->lse_i]);
}
/* sdpa backward: q k v out lse dout keep | dq dk dv */
static attn_status call_sdpa_bwd(pr_case *c) {
    attn_sdpa_opts *o = pr_opts(c);
    return attn_sdpa_backward(PV(0), PV(1), PV(2), o, PV(3), PV(4), PV(5), PV(7), PV(8), PV(9),
                              c->work, c->work_size);
}
static size_t q_sdpa_bwd(pr_case *c) {
    return attn_sdpa_backward_workspace_size(V(0), V(1), V(2), pr_opts(c));
}
static void ref_sdpa_bwd_c(pr_case *c, attn_view *w) {
    /* the reference overwrites: start from the initial gradients, add */
    attn_view g[3];
    double *buf[3];
    for (int n = 0; n < 3; ++n) {
        buf[n] = calloc((size_t)tu_numel(&w[7 + n]) + 1, sizeof(double));
        PR_OK(attn_view_init(&g[n], ATTN_F64, buf[n], 4, w[7 + n].shape));
    }
    ref_sdpa_backward(V(0), V(1), V(2), pr_opts(c), V(5), &g[0], &g[1], &g[2]);
    for (int n = 0; n < 3; ++n) {
        int64_t idx[4] = {0};
        do
            tu_set(&w[7 + n], idx, tu_get(&w[7 + n], idx) + tu_get(&g[n], idx));
        while (tu_inc(idx, g[n].shape, 4));
        free(buf[n]);
    }
}
static attn_status call_entropy(pr_case *c) { return attn_diag_entropy(PV(0), PV(1)); }
static attn_status call_jac_fro(pr_case *c) {
    return attn_diag_softmax_jacobian_fro(PV(0), PV(1));
}
static attn_status call_jac_spec(pr_case *c) {
    return attn_diag_softmax_jacobian_spectral(PV(0), PV(1), c->work, c->work_size, NULL);
}
static size_t q_jac_spec(pr_case *c) {
    return attn_diag_softmax_jacobian_spectral_workspace_size(V(0));
}
static attn_status call_svd(pr_case *c) {
    return attn_diag_singular_values(PV(0), PV(1), c->work, c->work_size, NULL);
}
static size_t q_svd(pr_case *c) { return attn_diag_singular_values_workspace_size(V(0)); }
static attn_status call_init_uniform(pr_case *c) {
    return attn_init_uniform(1, 2, 0, -1.0, 1.0, PV(0));
}
static attn_status call_init_orth(pr_case *c) {
    return attn_init_orthogonal(1.0, 1, 2, PV(0), c->work, c->work_size, NULL);
}
static size_t q_init_orth(pr_case *c) { return attn_init_orthogonal_workspace_size(V(0)); }
static attn_status call_posenc_add(pr_case *c) { return attn_posenc_add(1, PV(0), PV(1)); }
static attn_status call_posenc_add_bwd(pr_case *c) {
    return attn_posenc_add_backward(1, PV(0), PV(1));
}
static attn_status call_patchify(pr_case *c) { return attn_patchify(2, PV(0), PV(1)); }
static void ref_patchify_c(pr_case *c, attn_view *w) { ref_patchify(2, V(0), &w[1]); }
static attn_status call_sinusoidal(pr_case *c) { return attn_posenc_sinusoidal(0, PV(0)); }
static void ref_sinusoidal_c(pr_case *c, attn_view *w) {
    (void)c;
    ref_sinusoidal(10000.0, &w[0]);
}
static attn_status call_rope(pr_case *c) { return attn_rope(ATTN_ROPE_HALF, 0, 2, PV(0)); }

/* Parameter structs over consecutive views starting at index i. */
static attn_mha_params pr_mha_params(pr_case *c, int i, bool bias) {
    attn_mha_params p = {.wq = *V(i), .wk = *V(i + 1), .wv = *V(i + 2), .wo = *V(i + 3)};
    if (bias)
        p.bq = *V(i + 4), p.bk = *V(i + 5), p.bv = *V(i + 6), p.bo = *V(i + 7);
    return p;
}
static attn_ffn_params pr_ffn_params(pr_case *c, int i) {
    return (attn_ffn_params){*V(i), *V(i + 1), *V(i + 2), *V(i + 3)};
}
static attn_encoder_params pr_enc_params(pr_case *c, int i) {
    attn_encoder_params p = {
        .ln1_g = *V(i), .ln1_b = *V(i + 1), .ln2_g = *V(i + 10), .ln2_b = *V(i + 11)};
    p.mha = pr_mha_params(c, i + 2, true);
    p.ffn = pr_ffn_params(c, i + 12);
    return p;
}

/* pointer slots: 0 opts, 1 cfg, 2 params, 3 trace/cache, 4 grads */
static attn_status call_mha(pr_case *c) {
    attn_mha_params p = pr_mha_params(c, c->p0, true);
    attn_trace t = pr_trace(c);
    attn_sdpa_opts *o = pr_opts(c);
    return attn_mha_forward(PTR(1, &c->mha), PTR(2, &p), PV(c->x_i), PV(c->xkv_i), o,
                            PV(c->out_i), PTR(3, &t), c->work, c->work_size);
}
static size_t q_mha(pr_case *c) {
    attn_trace t = pr_trace(c);
    return attn_mha_workspace_size(&c->mha, V(c->x_i), PV(c->xkv_i), pr_opts(c), &t);
}
static attn_status call_mha_bwd(pr_case *c) {
    attn_mha_params p = pr_mha_params(c, c->p0, true), g = pr_mha_params(c, c->g0, true);
    attn_trace t = pr_trace(c);
    attn_sdpa_opts *o = pr_opts(c);
    return attn_mha_backward(PTR(1, &c->mha), PTR(2, &p), PV(c->x_i), PV(c->xkv_i), o,
                             PTR(3, &t), PV(c->dout_i), PV(c->dx_i), PV(c->dxkv_i), PTR(4, &g),
                             c->work, c->work_size);
}
static size_t q_mha_bwd(pr_case *c) {
    return attn_mha_backward_workspace_size(&c->mha, V(c->x_i), PV(c->xkv_i), pr_opts(c));
}
static attn_status call_ffn(pr_case *c) {
    attn_ffn_params p = pr_ffn_params(c, c->p0);
    attn_trace t = pr_trace(c);
    return attn_ffn_forward(PTR(1, &c->ffn), PTR(2, &p), PV(c->x_i), PV(c->out_i), PTR(3, &t),
                            c->work, c->work_size);
}
static size_t q_ffn(pr_case *c) {
    attn_trace t = pr_trace(c);
    return attn_ffn_workspace_size(&c->ffn, V(c->x_i), &t);
}
static attn_status call_ffn_bwd(pr_case *c) {
    attn_ffn_params p = pr_ffn_params(c, c->p0), g = pr_ffn_params(c, c->g0);
    attn_trace t = pr_trace(c);
    return attn_ffn_backward(PTR(1, &c->ffn), PTR(2, &p), PV(c->x_i), PTR(3, &t), PV(c->dout_i),
                             PV(c->dx_i), PTR(4, &g), c->work, c->work_size);
}
static size_t q_ffn_bwd(pr_case *c) {
    return attn_ffn_backward_workspace_size(&c->ffn, V(c->x_i));
}
static attn_status call_enc(pr_case *c) {
    attn_encoder_params p = pr_enc_params(c, c->p0);
    attn_trace t = pr_trace(c);
    attn_sdpa_opts *o = pr_opts(c);
    return attn_encoder_forward(PTR(1, &c->enc), PTR(2, &p), PV(c->x_i), o, PV(c->out_i),
                                PTR(3, &t), c->work, c->work_size);
}
static size_t q_enc(pr_case *c) {
    attn_trace t = pr_trace(c);
    return attn_encoder_workspace_size(&c->enc, V(c->x_i), pr_opts(c), &t);
}
static attn_status call_enc_bwd(pr_case *c) {
    attn_encoder_params p = pr_enc_params(c, c->p0), g = pr_enc_params(c, c->g0);
    attn_trace t = pr_trace(c);
    attn_sdpa_opts *o = pr_opts(c);
    return attn_encoder_backward(PTR(1, &c->enc), PTR(2, &p), PV(c->x_i), o, PTR(3, &t),
                                 PV(c->dout_i), PV(c->dx_i), PTR(4, &g), c->work, c->work_size);
}
static size_t q_enc_bwd(pr_case *c) {
    return attn_encoder_backward_workspace_size(&c->enc, V(c->x_i), pr_opts(c));
}

/* ---- layer references (forwards, on dense copies) -------------------------------------- */

static double *pr_dense(const attn_view *v) {
    int64_t n = tu_numel(v), idx[4] = {0}, e = 0;
    double *d = malloc(sizeof(double) * (size_t)(n + 1));
    if (n)
        do
            d[e++] = tu_get(v, idx);
        while (tu_inc(idx, v->shape, v->ndim));
    return d;
}
static void pr_undense(const attn_view *w, const double *d) {
    int64_t idx[4] = {0}, e = 0;
    if (tu_numel(w))
        do
            tu_set(w, idx, d[e++]);
        while (tu_inc(idx, w->shape, w->ndim));
}

/* MHA with the case's options (kv_len, causal none) on dense rows. */
static void pr_ref_mha(pr_case *c, const attn_mha_config *cfg, int p0, const double *xq,
                       const double *xkv, int64_t B, int64_t Tq, int64_t Tk, double *y) {
    double *w[8];
    for (int i = 0; i < 8; ++i)
        w[i] = pr_dense(V(p0 + i));
    ref_l_mha_args a = {.B = B,
                        .Tq = Tq,
                        .Tk = Tk,
                        .C = cfg->d_model,
                        .Ckv = cfg->d_kv ? cfg->d_kv : cfg->d_model,
                        .H = cfg->heads,
                        .Hkv = cfg->kv_heads ? cfg->kv_heads : cfg->heads,
                        .D = cfg->d_head ? cfg->d_head : cfg->d_model / cfg->heads,
                        .xq = xq,
                        .xkv = xkv,
                        .wq = w[0],
                        .wk = w[1],
                        .wv = w[2],
                        .wo = w[3],
                        .bq = w[4],
                        .bk = w[5],
                        .bv = w[6],
                        .bo = w[7],
                        .kv_len = c->use_kv ? c->kv_len : NULL};
    ref_l_mha(&a, y, NULL);
    for (int i = 0; i < 8; ++i)
        free(w[i]);
}
static void ref_mha_c(pr_case *c, attn_view *want) {
    double *xq = pr_dense(V(c->x_i)), *xkv = pr_dense(V(c->xkv_i));
    double *y = malloc(sizeof(double) * (size_t)tu_numel(V(c->out_i)));
    pr_ref_mha(c, &c->mha, c->p0, xq, xkv, V(c->x_i)->shape[0], V(c->x_i)->shape[1],
               V(c->xkv_i)->shape[1], y);
    pr_undense(&want[c->out_i], y);
    free(xq), free(xkv), free(y);
}
static void pr_ref_ffn(pr_case *c, int p0, int64_t n, const double *x, double *y) {
    double *w[4];
    for (int i = 0; i < 4; ++i)
        w[i] = pr_dense(V(p0 + i));
    ref_l_ffn(n, c->ffn.d_model, c->ffn.d_ff, (int)c->ffn.act, x, w[0], w[1], w[2], w[3], y);
    for (int i = 0; i < 4; ++i)
        free(w[i]);
}
static void ref_ffn_c(pr_case *c, attn_view *want) {
    double *x = pr_dense(V(c->x_i));
    int64_t n = tu_numel(V(c->x_i)) / c->ffn.d_model;
    double *y = malloc(sizeof(double) * (size_t)tu_numel(V(c->out_i)));
    pr_ref_ffn(c, c->p0, n, x, y);
    pr_undense(&want[c->out_i], y);
    free(x), free(y);
}
static void ref_enc_c(pr_case *c, attn_view *want) {
    const attn_view *X = V(c->x_i);
    int64_t B = X->shape[0], T = X->shape[1], C = X->shape[2], n = B * T * C;
    double *x = pr_dense(X), *a = malloc(sizeof(double) * (size_t)n);
    double *r1 = malloc(sizeof(double) * (size_t)n), *l = malloc(sizeof(double) * (size_t)n);
    double *m = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    double *g1 = pr_dense(V(c->p0)), *b1 = pr_dense(V(c->p0 + 1));
    double *g2 = pr_dense(V(c->p0 + 10)), *b2 = pr_dense(V(c->p0 + 11));
    double eps = c->enc.eps ? c->enc.eps : 1e-5;
    attn_mha_config mc = c->enc.mha;
    if (c->enc.norm == ATTN_PRE_NORM) {
        ref_l_layernorm(B * T, C, eps, x, g1, b1, l);
        pr_ref_mha(c, &mc, c->p0 + 2, l, l, B, T, T, a);
        for (int64_t i = 0; i < n; ++i)
            r1[i] = x[i] + a[i];
        ref_l_layernorm(B * T, C, eps, r1, g2, b2, l);
        pr_ref_ffn(c, c->p0 + 12, B * T, l, m);
        for (int64_t i = 0; i < n; ++i)
            y[i] = r1[i] + m[i];
    } else {
        pr_ref_mha(c, &mc, c->p0 + 2, x, x, B, T, T, a);
        for (int64_t i = 0; i < n; ++i)
            a[i] += x[i];
        ref_l_layernorm(B * T, C, eps, a, g1, b1, r1);
        pr_ref_ffn(c, c->p0 + 12, B * T, r1, m);
        for (int64_t i = 0; i < n; ++i)
            m[i] += r1[i];
        ref_l_layernorm(B * T, C, eps, m, g2, b2, y);
    }
    pr_undense(&want[c->out_i], y);
    free(x), free(a), free(r1), free(l), free(m), free(y);
    free(g1), free(b1), free(g2), free(b2);
}

/* ---- the cases ------------------------------------------------------------------------ */

static void pr_mha_param_views(pr_case *c, int kind, int64_t ckv, int64_t C, int64_t HD) {
    for (int i = 0; i < 4; ++i)
        pr_add(c, kind, 2, i == 0 ? SH(C, HD) : i == 3 ? SH(HD, C) : SH(ckv, HD), c->dt);
    for (int i = 0; i < 4; ++i)
        pr_add(c, kind, 1, i == 3 ? SH(C) : SH(HD), c->dt);
}
static void pr_ffn_param_views(pr_case *c, int kind, int64_t C, int64_t F) {
    pr_add(c, kind, 2, SH(C, F), c->dt);
    pr_add(c, kind, 1, SH(F), c->dt);
    pr_add(c, kind, 2, SH(F, C), c->dt);
    pr_add(c, kind, 1, SH(C), c->dt);
}
static void pr_enc_param_views(pr_case *c, int kind, int64_t C, int64_t F) {
    pr_add(c, kind, 1, SH(C), c->dt), pr_add(c, kind, 1, SH(C), c->dt);
    pr_mha_param_views(c, kind, C, C, C);
    pr_add(c, kind, 1, SH(C), c->dt), pr_add(c, kind, 1, SH(C), c->dt);
    pr_ffn_param_views(c, kind, C, F);
}
/* A trace field as a new view of the case. */
static void pr_tr(pr_case *c, int field, int kind, int ndim, const int64_t *shape) {
    c->tr_idx[field] = pr_add(c, kind, ndim, shape, c->dt);
    pr_ptrs(c, c->tr_idx[field], c->tr_idx[field] + 1);
    if (kind == K_OUT) /* a forward's trace views are optional */
        c->optional |= (uint64_t)1 << c->tr_idx[field];
}
static void pr_mha_trace(pr_case *c, int kind, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t D, bool materialized) {
    pr_tr(c, TR_Q, kind, 3, SH(B, Tq, H * D));
    pr_tr(c, TR_K, kind, 3, SH(B, Tk, H * D));
    pr_tr(c, TR_V, kind, 3, SH(B, Tk, H * D));
    pr_tr(c, TR_CONCAT, kind, 3, SH(B, Tq, H * D));
    pr_tr(c, TR_LSE, kind, 3, SH(B, H, Tq));
    if (kind == K_OUT) {
        pr_tr(c, TR_RV, kind, 4, SH(B, H, Tq, D));
        if (materialized) {
            pr_tr(c, TR_SCORES, kind, 4, SH(B, H, Tq, Tk));
            pr_tr(c, TR_ATTN, kind, 4, SH(B, H, Tq, Tk));
        }
    }
}
static void pr_enc_trace(pr_case *c, int kind, int64_t B, int64_t T, int64_t C, int64_t F,
                         bool post) {
    pr_tr(c, TR_LN1, kind, 3, SH(B, T, C));
    pr_mha_trace(c, kind, B, T, T, 2, C / 2, false);
    pr_tr(c, TR_R1, kind, 3, SH(B, T, C));
    pr_tr(c, TR_HPRE, kind, 3, SH(B, T, F));
    pr_tr(c, TR_H, kind, 3, SH(B, T, F));
    pr_tr(c, TR_M1, kind, 2, SH(B, T));
    pr_tr(c, TR_S1, kind, 2, SH(B, T));
    pr_tr(c, TR_M2, kind, 2, SH(B, T));
    pr_tr(c, TR_S2, kind, 2, SH(B, T));
    if (kind == K_OUT || !post)
        pr_tr(c, TR_LN2, kind, 3, SH(B, T, C));
    if (kind == K_OUT || post)
        pr_tr(c, TR_R2, kind, 3, SH(B, T, C));
    if (kind == K_OUT) {
        pr_tr(c, TR_PROJ, kind, 3, SH(B, T, C));
        pr_tr(c, TR_MLPO, kind, 3, SH(B, T, C));
        pr_tr(c, TR_OUT, kind, 3, SH(B, T, C));
    }
}

static void pr_uniform_rows(attn_view *p) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do
        tu_set(p, idx, 1.0 / (double)p->shape[p->ndim - 1]);
    while (tu_inc(idx, p->shape, p->ndim));
}

/* Fill a backward cache by running the forward once (values only; the test is the backward). */
static void pr_fill_cache_mha(pr_case *c) {
    attn_mha_params p = pr_mha_params(c, c->p0, true);
    attn_trace t = pr_trace(c);
    size_t n = pr_bytes(V(c->dout_i));
    void *o = malloc(n);
    attn_view out = *V(c->dout_i);
    out.data = o;
    PR_OK(
        attn_mha_forward(&c->mha, &p, V(c->x_i), PV(c->xkv_i), pr_opts(c), &out, &t, NULL, 0));
    free(o);
}
static void pr_fill_cache_ffn(pr_case *c) {
    attn_ffn_params p = pr_ffn_params(c, c->p0);
    attn_trace t = pr_trace(c);
    void *o = malloc(pr_bytes(V(c->dout_i)));
    attn_view out = *V(c->dout_i);
    out.data = o;
    PR_OK(attn_ffn_forward(&c->ffn, &p, V(c->x_i), &out, &t, NULL, 0));
    free(o);
}
static void pr_fill_cache_enc(pr_case *c) {
    attn_encoder_params p = pr_enc_params(c, c->p0);
    attn_trace t = pr_trace(c);
    void *o = malloc(pr_bytes(V(c->dout_i)));
    attn_view out = *V(c->dout_i);
    out.data = o;
    PR_OK(attn_encoder_forward(&c->enc, &p, V(c->x_i), pr_opts(c), &out, &t, NULL, 0));
    free(o);
}

static bool pr_relayout(pr_case *c, int i, int how);
enum { L_NEG, L_PAD, L_SPREAD, L_COLMAJOR, L_COUNT };
enum { PR_NCASES = 44, PR_DECODE_END = 50 };
static bool pr_build_decode(int which, attn_dtype dt, pr_case *c);

static bool pr_build(int which, attn_dtype dt, pr_case *c) {
    memset(c, 0, sizeof *c);
    memset(pr_mem, PR_SENTINEL, sizeof pr_mem);
    pr_lo_used = pr_hi_used = 0;
    pr_seed = 1234 + (uint64_t)which;
    c->dt = dt;
    c->nul_ptr = -1;
    c->keep_i = c->bias_i = c->weights_i = c->lse_i = -1;
    c->x_i = c->xkv_i = c->dout_i = c->dx_i = c->dxkv_i = c->out_i = -1;
    c->ck_i = c->mk_i = c->len_i = -1;
    for (int f = 0; f < 21; ++f)
        c->tr_idx[f] = -1;
    enum { B = 2, T = 3, C = 4, F = 8 };
    switch (which) {
    case 0:
    case 1:
        c->name = which ? "attn_gemm (ta, beta)" : "attn_gemm", c->call = call_gemm;
        c->query = q_gemm, c->ref = ref_gemm_c, c->has_trans = true;
        c->ta = which ? ATTN_TRANS : ATTN_NO_TRANS, c->tb = ATTN_TRANS;
        c->alpha = 0.5, c->beta = which ? 1.0 : 0.0;
        pr_in(c, 3, which ? SH(2, 4, 3) : SH(2, 3, 4));
        pr_in(c, 2, SH(5, 4));
        which ? pr_acc(c, 3, SH(2, 3, 5)) : pr_out(c, 3, SH(2, 3, 5));
        pr_ptrs(c, 0, 3);
        return true;
    case 43:
        c->name = "attn_gemm (B packed)", c->call = call_gemm;
        c->query = q_gemm, c->ref = ref_gemm_c, c->has_trans = true;
        c->ta = ATTN_NO_TRANS, c->tb = ATTN_TRANS, c->alpha = 1.0, c->beta = 0.0;
        pr_in(c, 3, SH(2, 3, 4));
        pr_in(c, 2, SH(5, 4));
        pr_out(c, 3, SH(2, 3, 5));
        pr_ptrs(c, 0, 3);
        pr_relayout(c, 1, L_SPREAD);
        return true;
    case 2:
        c->name = "attn_view_copy", c->call = call_copy, c->ref = ref_copy;
        pr_in(c, 2, SH(3, 4));
        pr_out(c, 2, SH(3, 4));
        pr_ptrs(c, 0, 2);
        return true;
    case 3:
        c->name = "attn_softmax", c->call = call_softmax, c->ref = ref_softmax_c;
        pr_in(c, 3, SH(2, 3, 5));
        pr_out(c, 3, SH(2, 3, 5));
        pr_ptrs(c, 0, 2);
        c->same_ok[1] = 1;
        return true;
    case 4:
        c->name = "attn_softmax_backward", c->call = call_softmax_bwd,
        c->ref = ref_softmax_bwd_c;
        pr_in(c, 2, SH(3, 5));
        pr_uniform_rows(V(0));
        pr_in(c, 2, SH(3, 5));
        pr_acc(c, 2, SH(3, 5));
        pr_ptrs(c, 0, 3);
        return true;
    case 5:
        c->name = "attn_layernorm", c->call = call_layernorm, c->ref = ref_layernorm_c;
        c->has_eps = true, c->eps = 1e-5;
        pr_in(c, 3, SH(2, 3, 6));
        pr_in(c, 1, SH(6));
        pr_in(c, 1, SH(6));
        pr_out(c, 3, SH(2, 3, 6));
        pr_out(c, 2, SH(2, 3));
        pr_out(c, 2, SH(2, 3));
        pr_ptrs(c, 0, 6);
        c->optional = 2 | 4 | 16 | 32;
        c->same_ok[3] = 1;
        return true;
    case 6: {
        c->name = "attn_layernorm_backward", c->call = call_layernorm_bwd;
        c->ref = ref_layernorm_bwd_c, c->eps = 1e-5;
        pr_in(c, 2, SH(3, 6)); /* x */
        pr_in(c, 1, SH(6));    /* gamma */
        pr_in(c, 1, SH(3));    /* mean */
        pr_in(c, 1, SH(3));    /* rstd */
        pr_in(c, 2, SH(3, 6)); /* dy */
        pr_acc(c, 2, SH(3, 6));
        pr_acc(c, 1, SH(6));
        pr_acc(c, 1, SH(6));
        pr_ptrs(c, 0, 8);
        c->optional = 2 | 32 | 64 | 128;
        /* the saved statistics of x (the reference recomputes them from x with eps) */
        attn_view y;
        void *tmp = malloc(18 * 8);
        PR_OK(attn_view_init(&y, dt, tmp, 2, SH(3, 6)));
        PR_OK(attn_layernorm(1e-5, V(0), NULL, NULL, &y, V(2), V(3)));
        free(tmp);
        return true;
    }
    case 7:
    case 8:
    case 9:
        c->name = "attn_activation", c->call = call_act, c->ref = ref_act_c;
        c->act = which - 7, c->has_act = true;
        pr_in(c, 2, SH(4, 5));
        pr_out(c, 2, SH(4, 5));
        pr_ptrs(c, 0, 2);
        c->same_ok[1] = 1;
        return true;
    case 10:
    case 11:
    case 12:
        c->name = "attn_activation_backward", c->call = call_act_bwd, c->ref = ref_act_bwd_c;
        c->act = which - 10, c->has_act = true;
        pr_in(c, 2, SH(4, 5));
        pr_in(c, 2, SH(4, 5));
        pr_acc(c, 2, SH(4, 5));
        pr_ptrs(c, 0, 3);
        return true;
    case 13:
        c->name = "attn_add (bias)", c->call = call_add, c->ref = ref_add_c;
        pr_in(c, 3, SH(2, 3, 4));
        pr_in(c, 1, SH(4));
        pr_out(c, 3, SH(2, 3, 4));
        pr_ptrs(c, 0, 3);
        c->same_ok[2] = 1;
        return true;
    case 14:
        c->name = "attn_add (residual)", c->call = call_add, c->ref = ref_add_c;
        pr_in(c, 3, SH(2, 3, 4));
        pr_in(c, 3, SH(2, 3, 4));
        pr_out(c, 3, SH(2, 3, 4));
        pr_ptrs(c, 0, 3);
        c->same_ok[2] = 1 | 2;
        return true;
    case 15:
        c->name = "attn_add_backward", c->call = call_add_bwd, c->ref = ref_add_bwd_c;
        pr_in(c, 3, SH(2, 3, 4));
        pr_acc(c, 3, SH(2, 3, 4));
        pr_acc(c, 1, SH(4));
        pr_ptrs(c, 0, 3);
        c->optional = 2 | 4;
        return true;
    case 16:
        c->name = "attn_linear", c->call = call_linear, c->ref = ref_linear_c;
        c->query = q_linear;
        pr_in(c, 3, SH(2, 3, 4));
        pr_in(c, 2, SH(4, 5));
        pr_in(c, 1, SH(5));
        pr_out(c, 3, SH(2, 3, 5));
        pr_ptrs(c, 0, 4);
        c->optional = 4;
        return true;
    case 17:
        c->name = "attn_linear_backward", c->call = call_linear_bwd, c->ref = ref_linear_bwd_c;
        c->query = q_linear_bwd;
        pr_in(c, 3, SH(2, 3, 4));
        pr_in(c, 2, SH(4, 5));
        pr_in(c, 3, SH(2, 3, 5));
        pr_acc(c, 3, SH(2, 3, 4));
        pr_acc(c, 2, SH(4, 5));
        pr_acc(c, 1, SH(5));
        pr_ptrs(c, 0, 6);
        c->optional = 8 | 16 | 32;
        return true;
    case 18:
    case 19:
        c->name = which == 18 ? "attn_sdpa (materialized)" : "attn_sdpa (tiled)";
        c->call = call_sdpa, c->query = q_sdpa, c->ref = ref_sdpa_c, c->has_opts = true;
        c->opts.algo = which == 18 ? ATTN_ALGO_MATERIALIZED : ATTN_ALGO_TILED;
        c->opts.block_q = 2, c->opts.block_k = 2;
        pr_in(c, 4, SH(2, 2, 3, 4));
        pr_in(c, 4, SH(2, 1, 5, 4));
        pr_in(c, 4, SH(2, 1, 5, 3));
        c->keep_i = pr_add(c, K_IN, 4, SH(1, 1, 3, 5), ATTN_U8);
        c->bias_i = pr_in(c, 4, SH(2, 2, 3, 5));
        pr_out(c, 4, SH(2, 2, 3, 3));
        if (which == 18)
            c->weights_i = pr_out(c, 4, SH(2, 2, 3, 5));
        c->lse_i = pr_out(c, 3, SH(2, 2, 3));
        pr_ptrs(c, 0, c->nv);
        c->optional = 8 | 16 | (uint64_t)1 << c->lse_i;
        if (c->weights_i >= 0)
            c->optional |= (uint64_t)1 << c->weights_i;
        c->use_kv = true, c->kv_len[0] = 5, c->kv_len[1] = 4;
        return true;
    case 20:
    case 21: {
        c->name =
            which == 20 ? "attn_sdpa_backward (materialized)" : "attn_sdpa_backward (tiled)";
        c->call = call_sdpa_bwd, c->query = q_sdpa_bwd, c->ref = ref_sdpa_bwd_c;
        c->has_opts = true;
        c->opts.algo = which == 20 ? ATTN_ALGO_MATERIALIZED : ATTN_ALGO_TILED;
        c->opts.block_q = 2, c->opts.block_k = 2;
        pr_in(c, 4, SH(2, 2, 3, 4));
        pr_in(c, 4, SH(2, 1, 5, 4));
        pr_in(c, 4, SH(2, 1, 5, 3));
        pr_in(c, 4, SH(2, 2, 3, 3)); /* out */
        pr_in(c, 3, SH(2, 2, 3));    /* lse */
        pr_in(c, 4, SH(2, 2, 3, 3)); /* dout */
        c->keep_i = pr_add(c, K_IN, 4, SH(1, 1, 3, 5), ATTN_U8);
        pr_acc(c, 4, SH(2, 2, 3, 4));
        pr_acc(c, 4, SH(2, 1, 5, 4));
        pr_acc(c, 4, SH(2, 1, 5, 3));
        pr_ptrs(c, 0, 10);
        c->optional = 64 | 128 | 256 | 512;
        c->use_kv = true, c->kv_len[0] = 5, c->kv_len[1] = 4;
        /* out and lse of the forward */
        attn_sdpa_opts o = c->opts;
        o.keep = V(6), o.kv_len = c->kv_len, o.lse = V(4);
        PR_OK(attn_sdpa(V(0), V(1), V(2), &o, V(3), NULL, 0));
        return true;
    }
    case 22:
        c->name = "attn_diag_entropy", c->call = call_entropy;
        pr_in(c, 2, SH(3, 4));
        pr_uniform_rows(V(0));
        pr_out(c, 1, SH(3));
        pr_ptrs(c, 0, 2);
        return true;
    case 23:
        c->name = "attn_diag_softmax_jacobian_fro", c->call = call_jac_fro;
        pr_in(c, 2, SH(3, 4));
        pr_uniform_rows(V(0));
        pr_out(c, 1, SH(3));
        pr_ptrs(c, 0, 2);
        return true;
    case 24:
        c->name = "attn_diag_softmax_jacobian_spectral", c->call = call_jac_spec;
        c->query = q_jac_spec;
        pr_in(c, 2, SH(3, 4));
        pr_uniform_rows(V(0));
        pr_out(c, 1, SH(3));
        pr_ptrs(c, 0, 2);
        return true;
    case 25:
        c->name = "attn_diag_singular_values", c->call = call_svd, c->query = q_svd;
        pr_in(c, 2, SH(4, 3));
        pr_out(c, 1, SH(3));
        pr_ptrs(c, 0, 2);
        return true;
    case 26:
        c->name = "attn_init_orthogonal", c->call = call_init_orth, c->query = q_init_orth;
        pr_out(c, 2, SH(4, 3));
        pr_ptrs(c, 0, 1);
        return true;
    case 27:
        c->name = "attn_init_uniform", c->call = call_init_uniform;
        pr_out(c, 3, SH(2, 4, 3));
        pr_ptrs(c, 0, 1);
        return true;
    case 28:
        c->name = "attn_posenc_add", c->call = call_posenc_add;
        pr_in(c, 2, SH(5, 4));
        pr_acc(c, 3, SH(2, 3, 4));
        pr_ptrs(c, 0, 2);
        return true;
    case 29:
        c->name = "attn_posenc_add_backward", c->call = call_posenc_add_bwd;
        pr_in(c, 3, SH(2, 3, 4));
        pr_acc(c, 2, SH(5, 4));
        pr_ptrs(c, 0, 2);
        return true;
    case 30:
        c->name = "attn_patchify", c->call = call_patchify, c->ref = ref_patchify_c;
        pr_in(c, 3, SH(3, 4, 6));
        pr_out(c, 2, SH(6, 12));
        pr_ptrs(c, 0, 2);
        return true;
    case 31:
        c->name = "attn_posenc_sinusoidal", c->call = call_sinusoidal,
        c->ref = ref_sinusoidal_c;
        pr_out(c, 2, SH(5, 4));
        pr_ptrs(c, 0, 1);
        return true;
    case 32:
        c->name = "attn_rope", c->call = call_rope;
        pr_acc(c, 4, SH(1, 2, 3, 4));
        pr_ptrs(c, 0, 1);
        return true;
    case 33:
    case 34: { /* MHA forward, cross-attention with biases, the whole trace */
        bool mat = which == 34;
        c->name = mat ? "attn_mha_forward (scores, attention)" : "attn_mha_forward";
        c->call = call_mha, c->query = q_mha, c->ref = ref_mha_c, c->has_opts = true;
        c->nptr = 4, c->ptr_optional = 1 | 8;
        c->mha =
            (attn_mha_config){.dtype = dt, .d_model = C, .heads = 2, .d_kv = 3, .bias = true};
        c->x_i = pr_in(c, 3, SH(B, T, C));
        c->xkv_i = pr_in(c, 3, SH(B, 5, 3));
        pr_ptrs(c, 0, 2);
        c->optional |= 2; /* NULL: self-attention (here a shape error) */
        c->p0 = c->nv;
        pr_mha_param_views(c, K_IN, 3, C, C);
        c->out_i = pr_out(c, 3, SH(B, T, C));
        pr_ptrs(c, c->out_i, c->out_i + 1);
        pr_mha_trace(c, K_OUT, B, T, 5, 2, 2, mat);
        c->use_kv = true, c->kv_len[0] = 5, c->kv_len[1] = 3;
        return true;
    }
    case 35:
    case 36: { /* MHA backward: cross (x_kv, dx_kv) or self, biases, every gradient */
        bool cross = which == 35;
        c->name = cross ? "attn_mha_backward (cross)" : "attn_mha_backward (self)";
        c->call = call_mha_bwd, c->query = q_mha_bwd, c->has_opts = true;
        c->nptr = 5, c->ptr_optional = 1 | 16;
        int64_t ckv = cross ? 3 : C, tk = cross ? 5 : T;
        c->mha =
            (attn_mha_config){.dtype = dt, .d_model = C, .heads = 2, .d_kv = ckv, .bias = true};
        c->x_i = pr_in(c, 3, SH(B, T, C));
        pr_ptrs(c, c->x_i, c->x_i + 1);
        if (cross) {
            c->xkv_i = pr_in(c, 3, SH(B, tk, ckv));
            pr_ptrs(c, c->xkv_i, c->xkv_i + 1);
            c->optional |= (uint64_t)1 << c->xkv_i;
        }
        c->p0 = c->nv;
        pr_mha_param_views(c, K_IN, ckv, C, C);
        pr_mha_trace(c, K_IN, B, T, tk, 2, 2, false);
        c->dout_i = pr_in(c, 3, SH(B, T, C));
        c->dx_i = pr_acc(c, 3, SH(B, T, C));
        pr_ptrs(c, c->dout_i, c->dx_i + 1);
        if (cross) {
            c->dxkv_i = pr_acc(c, 3, SH(B, tk, ckv));
            pr_ptrs(c, c->dxkv_i, c->dxkv_i + 1);
        }
        c->optional |= (uint64_t)1 << c->dx_i | (c->dxkv_i >= 0 ? (uint64_t)1 << c->dxkv_i : 0);
        c->g0 = c->nv;
        pr_mha_param_views(c, K_ACC, ckv, C, C);
        c->use_kv = true, c->kv_len[0] = tk, c->kv_len[1] = tk - 1;
        pr_fill_cache_mha(c);
        return true;
    }
    case 37:
        c->name = "attn_ffn_forward", c->call = call_ffn, c->query = q_ffn, c->ref = ref_ffn_c;
        c->nptr = 4, c->ptr_optional = 1 | 8; /* slot 0 (opts) unused */
        c->ffn = (attn_ffn_config){
            .dtype = dt, .d_model = C, .d_ff = F, .bias = true, .act = ATTN_ACT_GELU_ERF};
        c->x_i = pr_in(c, 3, SH(B, T, C));
        c->p0 = c->nv;
        pr_ffn_param_views(c, K_IN, C, F);
        c->out_i = pr_out(c, 3, SH(B, T, C));
        pr_ptrs(c, c->x_i, c->x_i + 1), pr_ptrs(c, c->out_i, c->out_i + 1);
        pr_tr(c, TR_HPRE, K_OUT, 3, SH(B, T, F));
        pr_tr(c, TR_H, K_OUT, 3, SH(B, T, F));
        pr_tr(c, TR_MLPO, K_OUT, 3, SH(B, T, C));
        return true;
    case 38:
        c->name = "attn_ffn_backward", c->call = call_ffn_bwd, c->query = q_ffn_bwd;
        c->nptr = 5, c->ptr_optional = 1 | 16; /* slot 0 (opts) unused */
        c->ffn = (attn_ffn_config){
            .dtype = dt, .d_model = C, .d_ff = F, .bias = true, .act = ATTN_ACT_GELU_ERF};
        c->x_i = pr_in(c, 3, SH(B, T, C));
        pr_ptrs(c, c->x_i, c->x_i + 1);
        c->p0 = c->nv;
        pr_ffn_param_views(c, K_IN, C, F);
        pr_tr(c, TR_HPRE, K_IN, 3, SH(B, T, F));
        pr_tr(c, TR_H, K_IN, 3, SH(B, T, F));
        c->dout_i = pr_in(c, 3, SH(B, T, C));
        c->dx_i = pr_acc(c, 3, SH(B, T, C));
        pr_ptrs(c, c->dout_i, c->dx_i + 1);
        c->optional |= (uint64_t)1 << c->dx_i;
        c->g0 = c->nv;
        pr_ffn_param_views(c, K_ACC, C, F);
        pr_fill_cache_ffn(c);
        return true;
    case 39:
    case 40: { /* encoder forward, pre- and post-norm, every trace field */
        bool post = which == 40;
        c->name = post ? "attn_encoder_forward (post-norm)" : "attn_encoder_forward (pre-norm)";
        c->call = call_enc, c->query = q_enc, c->ref = ref_enc_c, c->has_opts = true;
        c->nptr = 4, c->ptr_optional = 1 | 8;
        c->enc =
            (attn_encoder_config){.mha = {.dtype = dt, .d_model = C, .heads = 2, .bias = true},
                                  .ffn = {.dtype = dt, .d_model = C, .d_ff = F, .bias = true},
                                  .norm = post ? ATTN_POST_NORM : ATTN_PRE_NORM,
                                  .ln_affine = true};
        c->x_i = pr_in(c, 3, SH(B, T, C));
        c->p0 = c->nv;
        pr_enc_param_views(c, K_IN, C, F);
        c->out_i = pr_out(c, 3, SH(B, T, C));
        pr_ptrs(c, c->x_i, c->x_i + 1), pr_ptrs(c, c->out_i, c->out_i + 1);
        pr_enc_trace(c, K_OUT, B, T, C, F, post);
        c->use_kv = true, c->kv_len[0] = T, c->kv_len[1] = T - 1;
        c->ffn = c->enc.ffn;
        return true;
    }
    case 41:
    case 42: { /* encoder backward, pre- and post-norm, every gradient */
        bool post = which == 42;
        c->name =
            post ? "attn_encoder_backward (post-norm)" : "attn_encoder_backward (pre-norm)";
        c->call = call_enc_bwd, c->query = q_enc_bwd, c->has_opts = true;
        c->nptr = 5, c->ptr_optional = 1 | 16;
        c->enc =
            (attn_encoder_config){.mha = {.dtype = dt, .d_model = C, .heads = 2, .bias = true},
                                  .ffn = {.dtype = dt, .d_model = C, .d_ff = F, .bias = true},
                                  .norm = post ? ATTN_POST_NORM : ATTN_PRE_NORM,
                                  .ln_affine = true};
        c->x_i = pr_in(c, 3, SH(B, T, C));
        pr_ptrs(c, c->x_i, c->x_i + 1);
        c->p0 = c->nv;
        pr_enc_param_views(c, K_IN, C, F);
        pr_enc_trace(c, K_IN, B, T, C, F, post);
        c->dout_i = pr_in(c, 3, SH(B, T, C));
        c->dx_i = pr_acc(c, 3, SH(B, T, C));
        pr_ptrs(c, c->dout_i, c->dx_i + 1);
        c->optional |= (uint64_t)1 << c->dx_i;
        c->g0 = c->nv;
        pr_enc_param_views(c, K_ACC, C, F);
        c->use_kv = true, c->kv_len[0] = T, c->kv_len[1] = T - 1;
        pr_fill_cache_enc(c);
        return true;
    }
    }
    return pr_build_decode(which, dt, c);
}

/* ---- the promise checks ----------------------------------------------------------------- */

static int pr_nfail, pr_ncalls;
#define PR_MAX_REPORTS 400
static void pr_fail(const pr_case *c, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pr_fail(const pr_case *c, const char *what, const char *fmt, ...) {
    if (pr_nfail++ < PR_MAX_REPORTS) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "# promise broken: %s %s, %s: ", c->name,
                c->dt == ATTN_F64 ? "f64" : "f32", what);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

/* The outputs' values (row-major by index), for comparing calls. */
typedef struct pr_vals {
    double *v[PR_MAXV];
    int64_t n[PR_MAXV];
} pr_vals;
static bool pr_is_out(const pr_case *c, int i) { return c->kind[i] != K_IN; }
static void pr_read(const pr_case *c, pr_vals *r) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < c->nv; ++i)
        if (pr_is_out(c, i) && !(c->nullv >> i & 1)) {
            r->n[i] = tu_numel(PV(i));
            r->v[i] = pr_dense(PV(i));
        }
}
static void pr_free(pr_vals *r) {
    for (int i = 0; i < PR_MAXV; ++i)
        free(r->v[i]);
}

/* Mark the bytes of every element of v writable. */
static void pr_mark(const attn_view *v) {
    int64_t n = tu_numel(v), idx[4] = {0};
    size_t es = attn_dtype_size(v->dtype);
    for (int64_t e = 0; e < n; ++e) {
        unsigned char *p = tu_at(v, idx);
        if (p >= pr_mem && p + es <= pr_mem + PR_ARENA)
            memset(pr_wmask + (p - pr_mem), 1, es);
        tu_inc(idx, v->shape, v->ndim);
    }
}

enum { E_REFUSE, E_SAME, E_OK, E_EITHER, E_ANY, E_NOTOK };

/*
 * Run c once. E_REFUSE: status `want` and the arena unchanged. E_SAME: OK, only the
 * outputs and the workspace written, the outputs equal to `base`. E_OK: OK, only outputs
 * and workspace written. E_EITHER: E_SAME, or refused with nothing written. E_ANY:
 * E_OK, or refused with nothing written. E_NOTOK: refused (any status), nothing written.
 */
static bool pr_trace_calls; /* ATTN_PROMISES_TRACE=1: name every call on stderr first */
static void pr_try(pr_case *c, const pr_vals *base, int e, attn_status want, const char *what) {
    if (pr_trace_calls)
        fprintf(stderr, "# call %s %s: %s\n", c->name, c->dt == ATTN_F64 ? "f64" : "f32", what);
    memcpy(pr_snap, pr_mem, PR_ARENA);
    attn_status st = c->call(c);
    ++pr_ncalls;
    bool refused = st != ATTN_OK;
    if (e == E_NOTOK && !refused)
        pr_fail(c, what, "accepted, want a refusal");
    if (e == E_REFUSE || e == E_NOTOK || ((e == E_EITHER || e == E_ANY) && refused)) {
        if (e == E_REFUSE && st != want)
            pr_fail(c, what, "got %s, want %s", attn_status_name(st), attn_status_name(want));
        if (refused && memcmp(pr_snap, pr_mem, PR_ARENA) != 0) {
            size_t b = 0;
            while (pr_snap[b] == pr_mem[b])
                ++b;
            pr_fail(c, what, "returned %s after writing (first changed byte %zu)",
                    attn_status_name(st), b);
        }
        return;
    }
    if (refused) {
        pr_fail(c, what, "refused a valid call: %s", attn_status_name(st));
        return;
    }
    memset(pr_wmask, 0, PR_ARENA);
    for (int i = 0; i < c->nv; ++i)
        if (pr_is_out(c, i) && !(c->nullv >> i & 1))
            pr_mark(PV(i));
    unsigned char *w = c->work;
    if (w >= pr_mem && w < pr_mem + PR_ARENA)
        memset(pr_wmask + (w - pr_mem), 1,
               c->work_size < (size_t)(pr_mem + PR_ARENA - w)
                   ? c->work_size
                   : (size_t)(pr_mem + PR_ARENA - w));
    for (size_t b = 0; b < PR_ARENA; ++b)
        if (!pr_wmask[b] && pr_mem[b] != pr_snap[b]) {
            pr_fail(c, what, "wrote byte %zu, outside every output and the workspace", b);
            break;
        }
    if (e != E_SAME && e != E_EITHER)
        return;
    double rtol = c->dt == ATTN_F64 ? 1e-12 : 1e-5, atol = c->dt == ATTN_F64 ? 1e-13 : 1e-6;
    pr_vals got;
    pr_read(c, &got);
    for (int i = 0; i < c->nv; ++i) {
        if (!got.v[i] || !base->v[i])
            continue;
        for (int64_t k = 0; k < got.n[i] && k < base->n[i]; ++k) {
            double g = got.v[i][k], b = base->v[i][k];
            bool same =
                g == b || (isnan(g) && isnan(b)) || fabs(g - b) <= atol + rtol * fabs(b);
            if (!same) {
                pr_fail(c, what, "view %d element %lld: %.17g, the unmutated call gave %.17g",
                        i, (long long)k, g, b);
                break;
            }
        }
    }
    pr_free(&got);
}

/* The baseline: valid as built, equal to the reference (where there is one). */
static bool pr_baseline(int which, attn_dtype dt, pr_vals *base) {
    pr_case c0, *c = &c0;
    if (!pr_build(which, dt, c))
        return false;
    attn_view want[PR_MAXV];
    double *buf[PR_MAXV] = {0};
    if (c->ref) {
        for (int i = 0; i < c->nv; ++i) {
            if (!pr_is_out(c, i))
                continue;
            buf[i] = pr_dense(&c->v[i]); /* accumulating outputs: the start value */
            PR_OK(attn_view_init(&want[i], ATTN_F64, buf[i], c->v[i].ndim, c->v[i].shape));
        }
        c->ref(c, want);
    }
    memcpy(pr_snap, pr_mem, PR_ARENA);
    attn_status st = c->call(c);
    ck_assert_msg(st == ATTN_OK, "%s %s as built: %s", c->name, dt == ATTN_F64 ? "f64" : "f32",
                  attn_status_name(st));
    double rtol = dt == ATTN_F64 ? 1e-10 : 1e-4, atol = dt == ATTN_F64 ? 1e-12 : 1e-5;
    for (int i = 0; i < c->nv && c->ref; ++i)
        if (buf[i] && (c->out_i < 0 || i == c->out_i || c->ref_all)) { /* layers: out only */
            char what[96];
            snprintf(what, sizeof what, "%s %s view %d against the reference", c->name,
                     dt == ATTN_F64 ? "f64" : "f32", i);
            tu_check_close(&c->v[i], &want[i], rtol, atol, what);
        }
    for (int i = 0; i < c->nv; ++i)
        free(buf[i]);
    pr_read(c, base);
    return true;
}

/* A copy of view i (values and all) in the upper half with another layout. */
static const char *const pr_layout_name[L_COUNT] = {"flipped", "padded", "spread (packed)",
                                                    "column-major"};
static bool pr_relayout(pr_case *c, int i, int how) {
    attn_view *v = &c->v[i], w = *v;
    int nd = v->ndim;
    int64_t st[4], s = 1, extra = 0;
    if (how == L_COLMAJOR && nd < 2)
        return false;
    for (int k = (how == L_COLMAJOR ? 0 : nd - 1); how == L_COLMAJOR ? k < nd : k >= 0;
         k += (how == L_COLMAJOR ? 1 : -1)) {
        int64_t step = how == L_SPREAD ? 2 : 1;
        st[k] = s * step;
        s = s * step * (v->shape[k] > 1 ? v->shape[k] : 1);
        if (how == L_PAD && k == nd - 1)
            s += 3, extra = 3;
    }
    (void)extra;
    size_t es = attn_dtype_size(v->dtype);
    size_t bytes = (size_t)s * es + 64;
    unsigned char *mem = pr_hi(bytes);
    PR_OK(attn_view_init_strided(&w, v->dtype, mem, nd, v->shape, st));
    if (how == L_NEG)
        PR_OK(attn_view_flip(&w, 0, &w));
    if (c->kind[i] != K_OUT) { /* inputs and accumulators carry their values */
        int64_t idx[4] = {0};
        if (tu_numel(v))
            do
                tu_set(&w, idx, tu_get(v, idx));
            while (tu_inc(idx, v->shape, nd));
    }
    *v = w;
    return true;
}

/* Does view i's shape change give another valid call (outputs of generators, p rows)? */
static bool pr_shape_free(const pr_case *c, int i) {
    const char *n = c->name;
    if (!strncmp(n, "attn_init", 9) || !strcmp(n, "attn_posenc_sinusoidal") ||
        !strncmp(n, "attn_rope", 9))
        return true;
    return i == 0 &&
           (!strcmp(n, "attn_diag_entropy") || !strcmp(n, "attn_diag_softmax_jacobian_fro") ||
            !strcmp(n, "attn_diag_softmax_jacobian_spectral"));
}

#include "promises_decode.c"

enum { PART_ARGS = 1, PART_ALIAS = 2, PART_WORK = 4 };
static void pr_run(int which, attn_dtype dt, int parts) {
    pr_vals base;
    if (!pr_baseline(which, dt, &base))
        return;
    pr_case c0, *c = &c0;
    pr_build(which, dt, c);
    const int nv = c->nv;
    char what[160];
    /* ---- one view at a time ---- */
    for (int i = 0; i < nv && (parts & PART_ARGS); ++i) {
        bool out = pr_is_out(c, i), u8 = c->v[i].dtype == ATTN_U8;
        /* NULL view pointer */
        pr_build(which, dt, c);
        if (c->byptr >> i & 1) {
            c->nullv = (uint64_t)1 << i;
            snprintf(what, sizeof what, "view %d NULL", i);
            pr_try(c, &base, c->optional >> i & 1 ? E_ANY : E_REFUSE, ATTN_EINVAL, what);
        }
        if (c->raw >> i & 1)
            continue; /* a raw array (cache lengths): its values are mutated below */
        /* malformed views: the status attn_view_check gives them */
        for (int m = 0; m < 4; ++m) {
            pr_build(which, dt, c);
            attn_view *v = &c->v[i];
            const char *desc[] = {"data NULL", "ndim 5", "ndim 0", "extent -1"};
            if (m == 0)
                v->data = NULL;
            else if (m == 1)
                v->ndim = 5;
            else if (m == 2)
                v->ndim = 0;
            else
                v->shape[0] = -1;
            snprintf(what, sizeof what, "view %d %s", i, desc[m]);
            pr_try(c, &base, E_REFUSE, attn_view_check(v), what);
        }
        /* wrong dtypes */
        for (int m = 0; m < 3; ++m) {
            pr_build(which, dt, c);
            attn_view *v = &c->v[i];
            attn_dtype to = m == 0   ? (u8               ? dt
                                        : dt == ATTN_F32 ? ATTN_F64
                                                         : ATTN_F32)
                            : m == 1 ? (u8 ? (dt == ATTN_F32 ? ATTN_F64 : ATTN_F32) : ATTN_U8)
                                     : (attn_dtype)0;
            v->dtype = to;
            snprintf(what, sizeof what, "view %d dtype %d", i, (int)to);
            bool gen = m == 0 && !u8 && pr_shape_free(c, i) && i == 0 && c->nv == 1;
            pr_try(c, &base, gen ? E_ANY : E_REFUSE, m == 2 ? attn_view_check(v) : ATTN_EDTYPE,
                   what); /* a generator's output picks its dtype */
        }
        /* wrong shapes: the last extent, or (full) the first, one larger */
        for (int m = 0; m < (pr_full ? 2 : 1); ++m) {
            pr_build(which, dt, c);
            attn_view *v = &c->v[i];
            int ax = m == 0 ? v->ndim - 1 : 0;
            int64_t sh[4];
            memcpy(sh, v->shape, sizeof sh);
            sh[ax] += 1;
            PR_OK(attn_view_init(v, v->dtype, v->data, v->ndim, sh));
            snprintf(what, sizeof what, "view %d extent %d + 1", i, ax);
            /* a longer first axis may be another valid call (a mask that now matches B, a
               longer posenc table): refused with nothing written, or accepted */
            pr_try(c, &base, pr_shape_free(c, i) || m == 1 ? E_ANY : E_REFUSE, ATTN_ESHAPE,
                   what);
        }
        /* outputs that broadcast or overlap themselves */
        if (out) {
            for (int m = 0; m < 2; ++m) {
                pr_build(which, dt, c);
                attn_view *v = &c->v[i];
                int ax = -1;
                for (int k = 0; k < v->ndim; ++k)
                    if (v->shape[k] > 1)
                        ax = k;
                if (ax < 0 || (m == 1 && ax == 0))
                    continue;
                if (m == 0)
                    v->stride[ax] = 0;
                else
                    v->stride[ax - 1] = 1; /* rows overlap */
                snprintf(what, sizeof what, "output %d %s", i,
                         m ? "overlapping rows" : "stride 0");
                pr_try(c, &base, E_REFUSE, ATTN_ESTRIDE, what);
            }
        }
        /* the same values in another layout: the same result (work = NULL) */
        for (int l = 0; l < L_COUNT; ++l) {
            if (!pr_full && l != i % L_COUNT)
                continue;
            pr_build(which, dt, c);
            if (!pr_relayout(c, i, l))
                continue;
            snprintf(what, sizeof what, "view %d %s", i, pr_layout_name[l]);
            pr_try(c, &base, E_SAME, ATTN_OK, what);
        }
    }
    if (c->has_step && (parts & PART_ARGS))
        pr_step_mutations(which, dt, c, &base);
    /* ---- other pointer arguments ---- */
    for (int k = 0; k < c->nptr && (parts & PART_ARGS); ++k) {
        pr_build(which, dt, c);
        c->nul_ptr = k;
        snprintf(what, sizeof what, "pointer argument %d NULL", k);
        pr_try(c, &base, c->ptr_optional >> k & 1 ? E_ANY : E_REFUSE, ATTN_EINVAL, what);
    }
    /* ---- options ---- */
    if (c->has_opts && (parts & PART_ARGS)) {
        for (int m = 0; m < 13; ++m) {
            pr_build(which, dt, c);
            attn_sdpa_opts *o = &c->opts;
            const char *desc[] = {"threads -1",    "block_q -1", "block_k -1",     "scale NaN",
                                  "scale +inf",    "scale -inf", "causal 7",       "algo 9",
                                  "kv_len Tk + 1", "kv_len -1",  "window_left -1", "softcap NaN",
                                  "n_seqs -1"};
            switch (m) {
            case 0:
                o->threads = -1;
                break;
            case 1:
                o->block_q = -1;
                break;
            case 2:
                o->block_k = -1;
                break;
            case 3:
                o->scale = NAN;
                break;
            case 4:
                o->scale = INFINITY;
                break;
            case 5:
                o->scale = -INFINITY;
                break;
            case 6:
                o->causal = (attn_causal)7;
                break;
            case 7:
                o->algo = (attn_algo)9;
                break;
            case 8:
                c->kv_len[0] += 1;
                break;
            case 9:
                c->kv_len[1] = -1;
                break;
            case 10:
                o->window = true, o->window_left = -1;
                break;
            case 11:
                o->softcap = NAN;
                break;
            default:
                o->n_seqs = -1;
                break;
            }
            snprintf(what, sizeof what, "opts %s", desc[m]);
            pr_try(c, &base, E_REFUSE, m == 8 || m == 9 ? ATTN_ERANGE : ATTN_EINVAL, what);
        }
    }
    if (c->has_eps && (parts & PART_ARGS))
        for (int m = 0; m < 3; ++m) {
            pr_build(which, dt, c);
            c->eps = m == 0 ? NAN : m == 1 ? -1.0 : INFINITY;
            snprintf(what, sizeof what, "eps %g", c->eps);
            pr_try(c, &base, E_REFUSE, ATTN_EINVAL, what);
        }
    if (c->has_act && (parts & PART_ARGS)) {
        pr_build(which, dt, c);
        c->act = 9;
        pr_try(c, &base, E_REFUSE, ATTN_EINVAL, "act 9");
    }
    if (c->has_trans && (parts & PART_ARGS))
        for (int m = 0; m < 2; ++m) {
            pr_build(which, dt, c);
            *(m ? &c->tb : &c->ta) = 2;
            pr_try(c, &base, E_REFUSE, ATTN_EINVAL, m ? "tb 2" : "ta 2");
        }
    /* ---- workspaces ---- */
    if (c->query && (parts & PART_WORK)) {
        pr_build(which, dt, c);
        size_t need = c->query(c);
        /* exact, generous, in the sentinel-filled upper half */
        for (int m = 0; m < 2; ++m) {
            pr_build(which, dt, c);
            c->work_size = need + (m ? 4096 : 0);
            c->work = pr_hi(c->work_size);
            pr_try(c, &base, E_SAME, ATTN_OK, m ? "workspace generous" : "workspace exact");
        }
        if (need > 0) {
            pr_build(which, dt, c);
            c->work_size = need - 1;
            c->work = pr_hi(need);
            pr_try(c, &base, c->query_upper ? E_EITHER : E_REFUSE, ATTN_EWORKSPACE,
                   "workspace one byte short");
        }
        /* misaligned: accepted with the same result, or refused with nothing written */
        static const size_t offs[] = {4, 1, 2, 8, 16, 32};
        for (int m = 0; m < (pr_full ? 6 : 1); ++m) {
            pr_build(which, dt, c);
            c->work_size = need;
            c->work = pr_hi(need + 64) + offs[m];
            snprintf(what, sizeof what, "workspace misaligned by %zu", offs[m]);
            pr_try(c, &base, offs[m] % 8 == 0 || need == 0 ? E_SAME : E_REFUSE, ATTN_EINVAL,
                   what);
        }
        /* overlapping an input or an output: ATTN_EALIAS, nothing written */
        for (int i = 0; need > 0 && i < nv; ++i) {
            pr_build(which, dt, c);
            c->work = c->v[i].data;
            c->work_size = need;
            snprintf(what, sizeof what, "workspace overlapping %s %d",
                     pr_is_out(c, i) ? "output" : "input", i);
            pr_try(c, &base, E_REFUSE, ATTN_EALIAS, what);
        }
    }
    /* ---- aliasing: every output onto every other view ---- */
    for (int o = 0; o < nv && (parts & PART_ALIAS); ++o) {
        if (!pr_is_out(c, o))
            continue;
        for (int a = 0; a < nv; ++a) {
            if (a == o)
                continue;
            for (int shift = 0; shift < (pr_full ? 3 : 1); ++shift) {
                pr_build(which, dt, c);
                attn_view *ov = &c->v[o], *av = &c->v[a];
                size_t es = attn_dtype_size(ov->dtype), ab = pr_bytes(av);
                size_t off = shift == 0 ? 0 : shift == 1 ? es : ab / es / 2 * es;
                if (c->raw >> o & 1) /* an int64_t * off by 1-7 bytes is the caller's UB */
                    off = off / 8 * 8;
                if (shift && (off >= ab || off == 0))
                    continue;
                ov->data = (char *)av->data + off;
                bool same = off == 0 && !pr_is_out(c, a) && (c->same_ok[o] >> a & 1) &&
                            memcmp(ov, av, sizeof *ov) == 0;
                snprintf(what, sizeof what, "output %d on view %d + %zu bytes", o, a, off);
                /* moved cache lengths read other bytes: a range error may come first */
                pr_try(c, &base,
                       same              ? E_SAME
                       : c->raw >> o & 1 ? E_NOTOK
                                         : E_REFUSE,
                       ATTN_EALIAS, what);
            }
        }
    }
    /* ---- the same object passed as an output and as another argument ---- */
    for (int o = 0; o < nv && (parts & PART_ALIAS); ++o) {
        if (!pr_is_out(c, o) || !(c->byptr >> o & 1))
            continue;
        for (int a = 0; a < nv; ++a) {
            if (a == o || !(c->byptr >> a & 1) || c->v[a].dtype != c->v[o].dtype ||
                c->v[a].ndim != c->v[o].ndim ||
                memcmp(c->v[a].shape, c->v[o].shape, sizeof(int64_t) * (size_t)c->v[o].ndim))
                continue; /* another shape: a shape error, not an alias */
            pr_build(which, dt, c);
            c->same_as[o] = a + 1;
            bool same = !pr_is_out(c, a) && (c->same_ok[o] >> a & 1);
            snprintf(what, sizeof what, "output %d the same object as view %d", o, a);
            pr_try(c, &base, same ? E_SAME : E_REFUSE, ATTN_EALIAS, what);
        }
    }
    pr_free(&base);
}

static int pr_first_case(void) {
    const char *s = getenv("ATTN_PROMISES_CASE");
    return s ? atoi(s) : 0;
}

/*
 * Split the cases over a few tests so each stays short and a failure names its function
 * and its kind of mutation (arguments, aliasing, workspaces).
 */
#define PR_TEST(name, lo, hi, parts)                                                           \
    START_TEST(name) {                                                                         \
        pr_nfail = 0;                                                                          \
        int first = pr_first_case();                                                           \
        for (int w = (lo); w < (hi); ++w)                                                      \
            for (int d = pr_light; d < 2; ++d)                                                 \
                if (w >= first)                                                                \
                    pr_run(w, d ? ATTN_F64 : ATTN_F32, parts);                                 \
        ck_assert_msg(pr_nfail == 0, "%d broken promises (the first %d on stderr)", pr_nfail,  \
                      PR_MAX_REPORTS);                                                         \
    }                                                                                          \
    END_TEST
#define PR_GROUP(name, lo, hi)                                                                 \
    PR_TEST(name##_args, lo, hi, PART_ARGS)                                                    \
    PR_TEST(name##_alias, lo, hi, PART_ALIAS)                                                  \
    PR_TEST(name##_work, lo, hi, PART_WORK)
PR_GROUP(pr_gemm_copy, 0, 3)
PR_GROUP(pr_gemm_packed, 43, PR_NCASES)
PR_GROUP(pr_row_kernels, 3, 16)
PR_GROUP(pr_linear, 16, 18)
PR_GROUP(pr_sdpa, 18, 22)
PR_GROUP(pr_diag_init_posenc, 22, 33)
PR_GROUP(pr_mha, 33, 37)
PR_GROUP(pr_ffn, 37, 39)
PR_GROUP(pr_encoder, 39, 43)
PR_GROUP(pr_decode, PR_NCASES, PR_DECODE_END)
#define PR_ADD(tc, name)                                                                       \
    tcase_add_test(tc, name##_args), tcase_add_test(tc, name##_alias),                         \
        tcase_add_test(tc, name##_work)

/* ---- regressions: misuse that once got past the checks, one test per case ---------- */

/* Build case `which`, mutate, expect: a compact form of one harness call. */
#define RG_BEGIN(which, dt)                                                                    \
    do {                                                                                       \
        pr_vals base_;                                                                         \
        ck_assert(pr_baseline((which), (dt), &base_));                                         \
        pr_case c0_, *c = &c0_;                                                                \
        pr_build((which), (dt), c);
#define RG_END(e, st, what)                                                                    \
    pr_try(c, &base_, (e), (st), (what));                                                      \
    pr_free(&base_);                                                                           \
    }                                                                                          \
    while (0)
#define RG_CHECK() ck_assert_msg(pr_nfail == 0, "%d broken promises (stderr)", pr_nfail)

/*
 * Class A: bad sdpa options through the layers (threads, block_q, block_k -1; scale
 * +-inf, NaN) are ATTN_EINVAL with nothing written: attn_mha_forward with trace views,
 * attn_mha_backward with parameter gradients, attn_encoder_forward with the pre-norm
 * trace, attn_encoder_backward with dx.
 */
START_TEST(rg_layers_bad_options) {
    pr_nfail = 0;
    static const int cases[] = {33, 34, 35, 36, 39, 40, 41, 42};
    for (int d = 0; d < 2; ++d)
        for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n)
            for (int m = 0; m < 6; ++m) {
                RG_BEGIN(cases[n], d ? ATTN_F64 : ATTN_F32);
                attn_sdpa_opts *o = &c->opts;
                if (m == 0)
                    o->threads = -1;
                else if (m == 1)
                    o->block_q = -1;
                else if (m == 2)
                    o->block_k = -1;
                else
                    o->scale = m == 3 ? INFINITY : m == 4 ? -INFINITY : NAN;
                RG_END(E_REFUSE, ATTN_EINVAL, "bad sdpa option");
            }
    RG_CHECK();
}
END_TEST

/*
 * Class A: parameter gradients that broadcast (a stride 0) are ATTN_ESTRIDE before any
 * gradient is accumulated (attn_mha_backward: grads.wo and grads.bo come first;
 * attn_encoder_backward: every one of its 28 gradient fields).
 */
START_TEST(rg_layers_gradient_stride0) {
    pr_nfail = 0;
    static const int cases[] = {35, 36, 38, 41, 42};
    for (int d = 0; d < 2; ++d)
        for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) {
            pr_case c1;
            pr_build(cases[n], d ? ATTN_F64 : ATTN_F32, &c1);
            for (int g = c1.g0; g < c1.nv; ++g) {
                RG_BEGIN(cases[n], d ? ATTN_F64 : ATTN_F32);
                c->v[g].stride[0] = 0;
                char what[64];
                snprintf(what, sizeof what, "gradient view %d stride 0", g);
                RG_END(E_REFUSE, ATTN_ESTRIDE, what);
            }
        }
    RG_CHECK();
}
END_TEST

/*
 * Class A: trace views that are the same object as another output: trace.q ==
 * trace.concat, trace.concat == out (MHA), trace.output == out (encoder),
 * trace.mlp_hidden == out (FFN, shapes permitting: mlp_output here), trace.k == trace.v
 * and trace.q == trace.k are ATTN_EALIAS with nothing written.
 */
START_TEST(rg_layers_trace_same_object) {
    pr_nfail = 0;
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        pr_case b;
        pr_build(33, dt, &b);
        /* cross-attention with Tq != Tk: q and k differ in shape; use self-attention sizes */
        int pairs[][2] = {{b.tr_idx[TR_Q], b.tr_idx[TR_CONCAT]},
                          {b.tr_idx[TR_CONCAT], b.tr_idx[TR_Q]},
                          {b.tr_idx[TR_K], b.tr_idx[TR_V]},
                          {b.tr_idx[TR_V], b.tr_idx[TR_K]}};
        for (int n = 0; n < 4; ++n) {
            RG_BEGIN(33, dt);
            c->same_as[pairs[n][0]] = pairs[n][1] + 1;
            RG_END(E_REFUSE, ATTN_EALIAS, "MHA trace views the same object");
        }
        pr_build(39, dt, &b);
        int enc[][2] = {
            {b.out_i, b.tr_idx[TR_OUT]},           {b.tr_idx[TR_OUT], b.out_i},
            {b.tr_idx[TR_Q], b.tr_idx[TR_K]},      {b.tr_idx[TR_K], b.tr_idx[TR_V]},
            {b.tr_idx[TR_Q], b.tr_idx[TR_CONCAT]}, {b.tr_idx[TR_LN2], b.out_i},
            {b.tr_idx[TR_MLPO], b.out_i},          {b.tr_idx[TR_R1], b.tr_idx[TR_LN1]}};
        for (int n = 0; n < 8; ++n) {
            RG_BEGIN(39, dt);
            c->same_as[enc[n][0]] = enc[n][1] + 1;
            RG_END(E_REFUSE, ATTN_EALIAS,
                   "encoder trace view the same object as another output");
        }
        pr_build(37, dt, &b);
        int ffn[][2] = {{b.tr_idx[TR_MLPO], b.out_i},
                        {b.out_i, b.tr_idx[TR_MLPO]},
                        {b.tr_idx[TR_H], b.tr_idx[TR_HPRE]}};
        for (int n = 0; n < 3; ++n) {
            RG_BEGIN(37, dt);
            c->same_as[ffn[n][0]] = ffn[n][1] + 1;
            RG_END(E_REFUSE, ATTN_EALIAS, "FFN trace view the same object as another output");
        }
    }
    RG_CHECK();
}
END_TEST

/* A contiguous encoder (C 8, 2 heads, F 64) with parameters from one slab. */
typedef struct rg_enc {
    attn_encoder_config cfg;
    attn_encoder_params p, g;
    void *slab, *gslab, *cslab;
    size_t n;
    attn_view cv[15];
    attn_trace cache;
} rg_enc;
static void rg_enc_init(rg_enc *e, attn_dtype dt, attn_norm_order norm, int64_t B, int64_t T) {
    memset(e, 0, sizeof *e);
    e->cfg = (attn_encoder_config){.mha = {.dtype = dt, .d_model = 8, .heads = 2, .bias = true},
                                   .ffn = {.dtype = dt, .d_model = 8, .d_ff = 64, .bias = true},
                                   .norm = norm,
                                   .ln_affine = true};
    e->n = attn_encoder_params_size(&e->cfg);
    e->slab = aligned_alloc(64, e->n);
    e->gslab = aligned_alloc(64, e->n);
    PR_OK(attn_encoder_params_bind(&e->p, &e->cfg, e->slab, e->n));
    PR_OK(attn_encoder_params_bind(&e->g, &e->cfg, e->gslab, e->n));
    attn_view all;
    PR_OK(attn_view_init(&all, dt, e->slab, 1, SH((int64_t)(e->n / attn_dtype_size(dt)))));
    uint64_t seed = 11;
    tu_fill(&all, &seed, 0.5);
    size_t cn = attn_encoder_cache_size(&e->cfg, B, T);
    e->cslab = aligned_alloc(64, cn ? cn : 64);
    PR_OK(attn_encoder_cache_bind(&e->cfg, B, T, e->cslab, cn, e->cv, &e->cache));
}
static void rg_enc_free(rg_enc *e) { free(e->slab), free(e->gslab), free(e->cslab); }

/*
 * Class A: attn_encoder_backward with work = NULL and a strided FFN weight at
 * d_ff >= 64 (post-norm) sizes the nested workspace for the strided weight: ATTN_OK,
 * with the unit-stride result.
 */
START_TEST(rg_encoder_backward_strided_weight) {
    enum { B = 2, T = 3, C = 8, F = 64 };
    for (int d = 0; d < 2; ++d)
        for (int norm = 0; norm < 2; ++norm)
            for (int which = 0; which < 2; ++which) { /* w1 or w2 strided */
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                rg_enc e;
                rg_enc_init(&e, dt, (attn_norm_order)norm, B, T);
                double xm[B * T * C], om[B * T * C], dxa[B * T * C], dxb[B * T * C];
                double *wsp = malloc(sizeof(double) * 4 * C * F);
                attn_view x, out, dx, ws;
                PR_OK(attn_view_init(&x, dt, xm, 3, SH(B, T, C)));
                PR_OK(attn_view_init(&out, dt, om, 3, SH(B, T, C)));
                uint64_t seed = 3;
                tu_fill(&x, &seed, 1.0);
                PR_OK(attn_encoder_forward(&e.cfg, &e.p, &x, NULL, &out, &e.cache, NULL, 0));
                attn_view *w = which ? &e.p.ffn.w2 : &e.p.ffn.w1;
                int64_t r = w->shape[0], cl = w->shape[1];
                PR_OK(attn_view_init_strided(&ws, dt, wsp, 2, SH(r, cl), SH(2 * cl, 2)));
                PR_OK(attn_view_copy(w, &ws));
                attn_encoder_params ps = e.p;
                *(which ? &ps.ffn.w2 : &ps.ffn.w1) = ws;
                double *gr[2];
                for (int pass = 0; pass < 2; ++pass) {
                    PR_OK(attn_view_init(&dx, dt, pass ? dxb : dxa, 3, SH(B, T, C)));
                    memset(pass ? dxb : dxa, 0, sizeof dxa);
                    memset(e.gslab, 0, e.n);
                    attn_status st = attn_encoder_backward(&e.cfg, pass ? &ps : &e.p, &x, NULL,
                                                           &e.cache, &out, &dx, &e.g, NULL, 0);
                    ck_assert_msg(st == ATTN_OK, "%s-norm, %s strided, %s: %s",
                                  norm ? "post" : "pre", which ? "w2" : "w1", d ? "f64" : "f32",
                                  attn_status_name(st));
                    gr[pass] = malloc(e.n);
                    memcpy(gr[pass], e.gslab, e.n);
                }
                attn_view a, b;
                PR_OK(attn_view_init(&a, dt, dxa, 3, SH(B, T, C)));
                PR_OK(attn_view_init(&b, dt, dxb, 3, SH(B, T, C)));
                tu_check_close(&b, &a, TU_RTOL(dt), TU_ATOL(dt), "dx, strided FFN weight");
                int64_t ne = (int64_t)(e.n / attn_dtype_size(dt));
                PR_OK(attn_view_init(&a, dt, gr[0], 1, &ne));
                PR_OK(attn_view_init(&b, dt, gr[1], 1, &ne));
                tu_check_close(&b, &a, TU_RTOL(dt), TU_ATOL(dt), "grads, strided FFN weight");
                free(gr[0]), free(gr[1]), free(wsp);
                rg_enc_free(&e);
            }
}
END_TEST

/*
 * Class B: attn_linear_backward and its query divided by zero (slice_of) for an empty
 * x whose leading dims cannot merge, a contiguous (0, 0, 4), reachable through
 * cross-attention backward with B = 0: ATTN_OK, nothing changes, UBSan clean.
 */
START_TEST(rg_linear_backward_empty) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        double wm[20], dwm[20], dbm[5];
        attn_view x, w, dy, dx, dw, db;
        PR_OK(attn_view_init(&x, dt, NULL, 3, SH(0, 0, 4)));
        PR_OK(attn_view_init(&dx, dt, NULL, 3, SH(0, 0, 4)));
        PR_OK(attn_view_init(&dy, dt, NULL, 3, SH(0, 0, 5)));
        PR_OK(attn_view_init(&w, dt, wm, 2, SH(4, 5)));
        PR_OK(attn_view_init(&dw, dt, dwm, 2, SH(4, 5)));
        PR_OK(attn_view_init(&db, dt, dbm, 1, SH(5)));
        for (int i = 0; i < 20; ++i)
            wm[i] = dwm[i] = 0.5 * i;
        for (int i = 0; i < 5; ++i)
            dbm[i] = i;
        double dw0[20], db0[5];
        memcpy(dw0, dwm, sizeof dw0), memcpy(db0, dbm, sizeof db0);
        (void)attn_linear_backward_workspace_size(&x, &w, &dy, &dx, &dw);
        ck_assert_int_eq(attn_linear_backward(&x, &w, &dy, &dx, &dw, &db, NULL, 0), ATTN_OK);
        ck_assert(memcmp(dw0, dwm, sizeof dw0) == 0 && memcmp(db0, dbm, sizeof db0) == 0);
        /* strided empty x: (0, 3, 4) with a padded middle stride cannot merge either */
        PR_OK(attn_view_init_strided(&x, dt, NULL, 3, SH(0, 3, 4), SH(20, 5, 1)));
        PR_OK(attn_view_init_strided(&dx, dt, NULL, 3, SH(0, 3, 4), SH(20, 5, 1)));
        PR_OK(attn_view_init(&dy, dt, NULL, 3, SH(0, 3, 5)));
        (void)attn_linear_backward_workspace_size(&x, &w, &dy, &dx, &dw);
        ck_assert_int_eq(attn_linear_backward(&x, &w, &dy, &dx, &dw, &db, NULL, 0), ATTN_OK);
        ck_assert(memcmp(dw0, dwm, sizeof dw0) == 0 && memcmp(db0, dbm, sizeof db0) == 0);
    }
    /* 2^40 leading rows, none with an element: no loop over 2^40 empty products (fuzz_backward)
     */
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        double wm[20], dwm[20];
        attn_view x, w, dy, dw;
        int64_t n = INT64_C(1) << 40;
        PR_OK(attn_view_init_strided(&x, dt, NULL, 3, SH(n, 0, 4), SH(8, 4, 1)));
        PR_OK(attn_view_init_strided(&dy, dt, NULL, 3, SH(n, 0, 5), SH(8, 5, 1)));
        PR_OK(attn_view_init(&w, dt, wm, 2, SH(4, 5)));
        PR_OK(attn_view_init(&dw, dt, dwm, 2, SH(4, 5)));
        for (int i = 0; i < 20; ++i)
            wm[i] = dwm[i] = i;
        ck_assert_int_eq(attn_linear_backward(&x, &w, &dy, NULL, &dw, NULL, NULL, 0), ATTN_OK);
        for (int i = 0; i < 20; ++i)
            ck_assert(dwm[i] == i);
    }
    /* through cross-attention backward with B = 0 */
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        attn_mha_config cfg = {.dtype = dt, .d_model = 4, .heads = 2, .d_kv = 3, .bias = true};
        size_t n = attn_mha_params_size(&cfg);
        void *slab = aligned_alloc(64, n), *gslab = aligned_alloc(64, n);
        memset(slab, 0, n), memset(gslab, 0, n);
        attn_mha_params p, g;
        PR_OK(attn_mha_params_bind(&p, &cfg, slab, n));
        PR_OK(attn_mha_params_bind(&g, &cfg, gslab, n));
        size_t cn = attn_mha_cache_size(&cfg, 0, 3, 5);
        void *cslab = aligned_alloc(64, 64 + cn);
        attn_view cv[5], xq, xkv, dout, dxq, dxkv, out;
        attn_trace cache;
        PR_OK(attn_mha_cache_bind(&cfg, 0, 3, 5, cslab, cn, cv, &cache));
        PR_OK(attn_view_init(&xq, dt, NULL, 3, SH(0, 3, 4)));
        PR_OK(attn_view_init(&xkv, dt, NULL, 3, SH(0, 5, 3)));
        PR_OK(attn_view_init(&out, dt, NULL, 3, SH(0, 3, 4)));
        PR_OK(attn_view_init(&dout, dt, NULL, 3, SH(0, 3, 4)));
        PR_OK(attn_view_init(&dxq, dt, NULL, 3, SH(0, 3, 4)));
        PR_OK(attn_view_init(&dxkv, dt, NULL, 3, SH(0, 5, 3)));
        PR_OK(attn_mha_forward(&cfg, &p, &xq, &xkv, NULL, &out, &cache, NULL, 0));
        (void)attn_mha_backward_workspace_size(&cfg, &xq, &xkv, NULL);
        ck_assert_int_eq(attn_mha_backward(&cfg, &p, &xq, &xkv, NULL, &cache, &dout, &dxq,
                                           &dxkv, &g, NULL, 0),
                         ATTN_OK);
        unsigned char *gb = gslab;
        for (size_t i = 0; i < n; ++i)
            ck_assert_msg(gb[i] == 0, "a gradient of an empty batch changed");
        free(slab), free(gslab), free(cslab);
    }
}
END_TEST

/*
 * Class B: a workspace that overlaps an input or an output (attn_sdpa; attn_gemm with
 * its packing workspace overlapping B) is ATTN_EALIAS with nothing written, in debug
 * and release builds and with 2 threads.
 */
START_TEST(rg_workspace_overlap) {
    pr_nfail = 0;
    static const int cases[] = {43, 18, 19, 20, 21, 16, 17};
    for (int d = 0; d < 2; ++d)
        for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n) {
            pr_case c1;
            pr_build(cases[n], d ? ATTN_F64 : ATTN_F32, &c1);
            size_t need = c1.query(&c1);
            if (need == 0)
                continue;
            for (int i = 0; i < c1.nv; ++i)
                for (int threads = 1; threads <= 2; ++threads) {
                    RG_BEGIN(cases[n], d ? ATTN_F64 : ATTN_F32);
                    c->opts.threads = threads;
                    c->work = c->v[i].data;
                    c->work_size = c->query(c);
                    char what[64];
                    snprintf(what, sizeof what, "workspace on view %d, %d threads", i, threads);
                    RG_END(E_REFUSE, ATTN_EALIAS, what);
                }
        }
    /* the issue's own: gemm packing B, workspace over B, OK with a wrong C */
    float a[12], b[40], cm[15], cw[15];
    attn_view A, Bs, Cv;
    for (int i = 0; i < 12; ++i)
        a[i] = (float)i / 4;
    for (int i = 0; i < 40; ++i)
        b[i] = (float)(i % 7) / 2;
    PR_OK(attn_view_init(&A, ATTN_F32, a, 2, SH(3, 4)));
    PR_OK(attn_view_init_strided(&Bs, ATTN_F32, b, 2, SH(4, 5), SH(10, 2)));
    PR_OK(attn_view_init(&Cv, ATTN_F32, cm, 2, SH(3, 5)));
    size_t need = attn_gemm_workspace_size(0, 0, &A, &Bs, &Cv);
    ck_assert_uint_gt(need, 0);
    memset(cm, 0, sizeof cm);
    memcpy(cw, cm, sizeof cw);
    float b0[40];
    memcpy(b0, b, sizeof b0);
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &A, &Bs, 0.0, &Cv, b, need), ATTN_EALIAS);
    ck_assert(memcmp(b, b0, sizeof b) == 0 && memcmp(cm, cw, sizeof cm) == 0);
    RG_CHECK();
}
END_TEST

/* Scores exactly representable around a large offset: the softmax gradient is exact. */
static void rg_extreme_case(attn_dtype dt, double offset, double step, int algo, int64_t bk,
                            const char *what) {
    enum { Tq = 3, Tk = 4, D = 2, Dv = 2 };
    double qm[Tq * D], km[Tk * D], vm[Tk * Dv], bm[Tq * Tk], om[Tq * Dv], lm[Tq], gm[Tq * Dv];
    double dqm[Tq * D], dkm[Tk * D], dvm[Tk * Dv];
    double rq[Tq * D], rk[Tk * D], rv[Tk * Dv];
    attn_view q, k, v, bias, out, lse, dout, dq, dk, dv, wq, wk, wv;
    PR_OK(attn_view_init(&q, dt, qm, 4, SH(1, 1, Tq, D)));
    PR_OK(attn_view_init(&k, dt, km, 4, SH(1, 1, Tk, D)));
    PR_OK(attn_view_init(&v, dt, vm, 4, SH(1, 1, Tk, Dv)));
    PR_OK(attn_view_init(&bias, dt, bm, 4, SH(1, 1, Tq, Tk)));
    PR_OK(attn_view_init(&out, dt, om, 4, SH(1, 1, Tq, Dv)));
    PR_OK(attn_view_init(&lse, dt, lm, 3, SH(1, 1, Tq)));
    PR_OK(attn_view_init(&dout, dt, gm, 4, SH(1, 1, Tq, Dv)));
    PR_OK(attn_view_init(&dq, dt, dqm, 4, SH(1, 1, Tq, D)));
    PR_OK(attn_view_init(&dk, dt, dkm, 4, SH(1, 1, Tk, D)));
    PR_OK(attn_view_init(&dv, dt, dvm, 4, SH(1, 1, Tk, Dv)));
    PR_OK(attn_view_init(&wq, ATTN_F64, rq, 4, SH(1, 1, Tq, D)));
    PR_OK(attn_view_init(&wk, ATTN_F64, rk, 4, SH(1, 1, Tk, D)));
    PR_OK(attn_view_init(&wv, ATTN_F64, rv, 4, SH(1, 1, Tk, Dv)));
    /* dyadic data: q.k / 2 is exact; the bias row i is offset + step * ((i + j) % 3) */
    for (int64_t i = 0; i < Tq; ++i)
        for (int64_t d = 0; d < D; ++d)
            tu_set(&q, (int64_t[]){0, 0, i, d}, (double)((i * 3 + d * 5) % 7 - 3) / 4);
    for (int64_t j = 0; j < Tk; ++j) {
        for (int64_t d = 0; d < D; ++d)
            tu_set(&k, (int64_t[]){0, 0, j, d}, (double)((j * 5 + d * 3) % 7 - 3) / 4);
        for (int64_t d = 0; d < Dv; ++d)
            tu_set(&v, (int64_t[]){0, 0, j, d}, (double)((j * 7 + d) % 5 - 2) / 2);
    }
    for (int64_t i = 0; i < Tq; ++i) {
        for (int64_t j = 0; j < Tk; ++j)
            tu_set(&bias, (int64_t[]){0, 0, i, j}, offset + step * (double)((i + j) % 3));
        for (int64_t d = 0; d < Dv; ++d)
            tu_set(&dout, (int64_t[]){0, 0, i, d}, (double)((i + 2 * d) % 3 - 1));
    }
    /* step 0 (the offset swallows q.k): q = 0 keeps every score exactly the offset */
    if (step == 0)
        memset(qm, 0, sizeof qm);
    memset(dqm, 0, sizeof dqm), memset(dkm, 0, sizeof dkm), memset(dvm, 0, sizeof dvm);
    attn_sdpa_opts o = {.scale = 0.5,
                        .bias = &bias,
                        .lse = &lse,
                        .algo = (attn_algo)algo,
                        .block_k = bk,
                        .threads = 1};
    PR_OK(attn_sdpa(&q, &k, &v, &o, &out, NULL, 0));
    o.lse = NULL;
    PR_OK(attn_sdpa_backward(&q, &k, &v, &o, &out, &lse, &dout, &dq, &dk, &dv, NULL, 0));
    ref_sdpa_backward(&q, &k, &v, &o, &dout, &wq, &wk, &wv);
    double rtol = dt == ATTN_F64 ? 1e-10 : 1e-4, atol = dt == ATTN_F64 ? 1e-12 : 1e-6;
    char msg[128];
    snprintf(msg, sizeof msg, "%s, algo %d, block_k %lld: dq", what, algo, (long long)bk);
    tu_check_close(&dq, &wq, rtol, atol, msg);
    snprintf(msg, sizeof msg, "%s, algo %d, block_k %lld: dk", what, algo, (long long)bk);
    tu_check_close(&dk, &wk, rtol, atol, msg);
    snprintf(msg, sizeof msg, "%s, algo %d, block_k %lld: dv", what, algo, (long long)bk);
    tu_check_close(&dv, &wv, rtol, atol, msg);
}

/*
 * Class C: attn_sdpa_backward recomputes P = exp(S - lse); with lse = m + log l stored in
 * the input dtype, at large |m| the log l term is lost and every visible key would get
 * P = 1 (dv 4x too large at Tk = 4). f32 with a -1e9 bias row (the padding idiom), f64
 * logits at +-1e30, -1e20, -1e16, -1e15, against the true softmax gradient
 * (ref_sdpa_backward, double, max-subtracted), both algorithms, several tile widths.
 */
START_TEST(rg_backward_extreme_logits) {
    static const int64_t bks[] = {0, 1, 3};
    for (int algo = ATTN_ALGO_MATERIALIZED; algo <= ATTN_ALGO_TILED; ++algo)
        for (int n = 0; n < 3; ++n) {
            if (algo == ATTN_ALGO_MATERIALIZED && n > 0)
                continue;
            rg_extreme_case(ATTN_F32, -1e9, 0, algo, bks[n], "f32 bias -1e9");
            rg_extreme_case(ATTN_F32, 1e9, 0, algo, bks[n], "f32 bias +1e9");
            rg_extreme_case(ATTN_F32, -1e30, 0, algo, bks[n], "f32 bias -1e30");
            rg_extreme_case(ATTN_F32, -1e5, 0.0078125, algo, bks[n], "f32 bias -1e5");
            rg_extreme_case(ATTN_F64, 1e30, 0, algo, bks[n], "f64 logits +1e30");
            rg_extreme_case(ATTN_F64, -1e30, 0, algo, bks[n], "f64 logits -1e30");
            rg_extreme_case(ATTN_F64, -1e20, 0, algo, bks[n], "f64 logits -1e20");
            rg_extreme_case(ATTN_F64, -1e16, 2.0, algo, bks[n], "f64 logits -1e16");
            rg_extreme_case(ATTN_F64, -1e15, 0.125, algo, bks[n], "f64 logits -1e15");
            rg_extreme_case(ATTN_F64, 1e15, 0.125, algo, bks[n], "f64 logits +1e15");
        }
}
END_TEST

/*
 * Class C through the layers: MHA with Wq = 0 has scores exactly equal to the bias, so
 * a -1e9 (f32) / -1e20 (f64) bias on a whole query row gives the same function as a 0
 * bias there (softmax ignores a row constant). The backward must not see a difference.
 */
START_TEST(rg_layers_extreme_bias) {
    enum { B = 1, T = 4, C = 4 };
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        attn_mha_config cfg = {.dtype = dt, .d_model = C, .heads = 2, .bias = false};
        size_t n = attn_mha_params_size(&cfg), cn = attn_mha_cache_size(&cfg, B, T, T);
        void *slab = aligned_alloc(64, n), *gslab[2], *cslab = aligned_alloc(64, cn);
        attn_mha_params p, g[2];
        PR_OK(attn_mha_params_bind(&p, &cfg, slab, n));
        attn_view all;
        PR_OK(attn_view_init(&all, dt, slab, 1, SH((int64_t)(n / attn_dtype_size(dt)))));
        uint64_t seed = 7;
        tu_fill(&all, &seed, 0.5);
        memset(p.wq.data, 0, pr_bytes(&p.wq));
        double xm[B * T * C], om[B * T * C], gm[B * T * C], dxm[2][B * T * C], bm[2][T * T];
        attn_view x, out, dout, dx[2], bias[2], cv[5];
        attn_trace cache;
        PR_OK(attn_mha_cache_bind(&cfg, B, T, T, cslab, cn, cv, &cache));
        PR_OK(attn_view_init(&x, dt, xm, 3, SH(B, T, C)));
        PR_OK(attn_view_init(&out, dt, om, 3, SH(B, T, C)));
        PR_OK(attn_view_init(&dout, dt, gm, 3, SH(B, T, C)));
        tu_fill(&x, &seed, 1.0);
        tu_fill(&dout, &seed, 1.0);
        for (int pass = 0; pass < 2; ++pass) {
            gslab[pass] = aligned_alloc(64, n);
            memset(gslab[pass], 0, n);
            PR_OK(attn_mha_params_bind(&g[pass], &cfg, gslab[pass], n));
            PR_OK(attn_view_init(&bias[pass], dt, bm[pass], 2, SH(T, T)));
            PR_OK(attn_view_init(&dx[pass], dt, dxm[pass], 3, SH(B, T, C)));
            memset(dxm[pass], 0, sizeof dxm[pass]);
            for (int64_t i = 0; i < T; ++i)
                for (int64_t j = 0; j < T; ++j)
                    tu_set(&bias[pass], (int64_t[]){i, j},
                           pass && i == 1 ? (d ? -1e20 : -1e9) : 0.0);
            attn_sdpa_opts o = {.bias = &bias[pass]};
            PR_OK(attn_mha_forward(&cfg, &p, &x, NULL, &o, &out, &cache, NULL, 0));
            PR_OK(attn_mha_backward(&cfg, &p, &x, NULL, &o, &cache, &dout, &dx[pass], NULL,
                                    &g[pass], NULL, 0));
        }
        tu_check_close(&dx[1], &dx[0], d ? 1e-10 : 1e-4, d ? 1e-12 : 1e-6,
                       "MHA dx, -1e9/-1e20 bias row vs 0");
        attn_view *ga[] = {&g[0].wq, &g[0].wk, &g[0].wv, &g[0].wo};
        attn_view *gb[] = {&g[1].wq, &g[1].wk, &g[1].wv, &g[1].wo};
        for (int i = 0; i < 4; ++i)
            tu_check_close(gb[i], ga[i], d ? 1e-10 : 1e-4, d ? 1e-12 : 1e-6,
                           "MHA weight gradient, -1e9/-1e20 bias row vs 0");
        free(slab), free(gslab[0]), free(gslab[1]), free(cslab);
    }
}
END_TEST
/*
 * The NaN rule for masked positions (docs/numerics.md): a value stored at a masked
 * position -- a key masked for a query (causal, keep, -inf bias, kv_len), or a query
 * row with no visible key -- never reaches an output or gradient element of a pair that
 * cannot see it, whatever the algorithm, block size and thread count: with causal
 * masking a NaN in v at key 6 must leave rows 0-5 finite when a computed tile holds
 * key 6, and a NaN in q of a fully masked row must not reach dk.
 */
enum { NR_T = 8, NR_D = 3, NR_DV = 2 };
/* kind: 0 causal + NaN v[6]; 1 causal + NaN k[6]; 2 key 2 kept from every row + NaN in
   k[2], v[2] and its bias column; 3 kv_len 5 + NaN/inf in keys 5..7; 4 query row 3 fully
   masked + NaN in q[3], dout[3] and its bias row */
static void nr_run(attn_dtype dt, int kind, int algo, int64_t bq, int64_t bk, int threads) {
    enum { T = NR_T, D = NR_D, DV = NR_DV };
    double qm[T * D], km[T * D], vm[T * DV], bm[T * T], om[T * DV], lm[T], gm[T * DV];
    double dqm[T * D], dkm[T * D], dvm[T * DV], rom[T * DV], rlm[T];
    double rq[T * D], rk[T * D], rv[T * DV];
    unsigned char keep[T * T];
    attn_view q, k, v, bias, out, lse, dout, dq, dk, dv, M, wo, wl, wq, wk, wv;
    PR_OK(attn_view_init(&q, dt, qm, 4, SH(1, 1, T, D)));
    PR_OK(attn_view_init(&k, dt, km, 4, SH(1, 1, T, D)));
    PR_OK(attn_view_init(&v, dt, vm, 4, SH(1, 1, T, DV)));
    PR_OK(attn_view_init(&bias, dt, bm, 2, SH(T, T)));
    PR_OK(attn_view_init(&out, dt, om, 4, SH(1, 1, T, DV)));
    PR_OK(attn_view_init(&lse, dt, lm, 3, SH(1, 1, T)));
    PR_OK(attn_view_init(&dout, dt, gm, 4, SH(1, 1, T, DV)));
    PR_OK(attn_view_init(&dq, dt, dqm, 4, SH(1, 1, T, D)));
    PR_OK(attn_view_init(&dk, dt, dkm, 4, SH(1, 1, T, D)));
    PR_OK(attn_view_init(&dv, dt, dvm, 4, SH(1, 1, T, DV)));
    PR_OK(attn_view_init(&M, ATTN_U8, keep, 2, SH(T, T)));
    PR_OK(attn_view_init(&wo, ATTN_F64, rom, 4, SH(1, 1, T, DV)));
    PR_OK(attn_view_init(&wl, ATTN_F64, rlm, 3, SH(1, 1, T)));
    PR_OK(attn_view_init(&wq, ATTN_F64, rq, 4, SH(1, 1, T, D)));
    PR_OK(attn_view_init(&wk, ATTN_F64, rk, 4, SH(1, 1, T, D)));
    PR_OK(attn_view_init(&wv, ATTN_F64, rv, 4, SH(1, 1, T, DV)));
    uint64_t seed = 99;
    tu_fill(&q, &seed, 1.0), tu_fill(&k, &seed, 1.0), tu_fill(&v, &seed, 1.0);
    tu_fill(&bias, &seed, 0.5), tu_fill(&dout, &seed, 1.0);
    memset(keep, 1, sizeof keep);
    int64_t kv_len[1] = {T};
    attn_sdpa_opts o = {.bias = &bias,
                        .keep = &M,
                        .algo = (attn_algo)algo,
                        .block_q = bq,
                        .block_k = bk,
                        .threads = threads};
    switch (kind) {
    case 0:
        o.causal = ATTN_CAUSAL_TOP_LEFT;
        for (int d = 0; d < DV; ++d)
            tu_set(&v, (int64_t[]){0, 0, 6, d}, NAN);
        break;
    case 1:
        o.causal = ATTN_CAUSAL_TOP_LEFT;
        for (int d = 0; d < D; ++d)
            tu_set(&k, (int64_t[]){0, 0, 6, d}, NAN);
        break;
    case 2:
        for (int i = 0; i < T; ++i) {
            keep[i * T + 2] = 0;
            tu_set(&bias, (int64_t[]){i, 2}, NAN);
        }
        tu_set(&k, (int64_t[]){0, 0, 2, 0}, NAN);
        tu_set(&v, (int64_t[]){0, 0, 2, 1}, NAN);
        break;
    case 3:
        kv_len[0] = 5;
        o.kv_len = kv_len;
        for (int j = 5; j < T; ++j) {
            tu_set(&k, (int64_t[]){0, 0, j, 0}, NAN);
            tu_set(&v, (int64_t[]){0, 0, j, 0}, INFINITY);
            tu_set(&bias, (int64_t[]){1, j}, NAN);
        }
        break;
    default:
        for (int j = 0; j < T; ++j)
            keep[3 * T + j] = 0;
        for (int d = 0; d < D; ++d)
            tu_set(&q, (int64_t[]){0, 0, 3, d}, NAN);
        for (int d = 0; d < DV; ++d)
            tu_set(&dout, (int64_t[]){0, 0, 3, d}, NAN);
        tu_set(&bias, (int64_t[]){3, 1}, NAN);
        break;
    }
    char what[128];
    snprintf(what, sizeof what,
             "%s NaN rule kind %d, algo %d, block_q %lld, block_k %lld, %d threads",
             dt == ATTN_F64 ? "f64" : "f32", kind, algo, (long long)bq, (long long)bk, threads);
    ref_sdpa(&q, &k, &v, &o, &wo, NULL, &wl);
    o.lse = &lse;
    ck_assert_int_eq(attn_sdpa(&q, &k, &v, &o, &out, NULL, 0), ATTN_OK);
    double rtol = dt == ATTN_F64 ? 1e-10 : 1e-4, atol = dt == ATTN_F64 ? 1e-12 : 1e-5;
    tu_check_close(&out, &wo, rtol, atol, what);
    tu_check_close(&lse, &wl, rtol, atol, what);
    o.lse = NULL;
    memset(dqm, 0, sizeof dqm), memset(dkm, 0, sizeof dkm), memset(dvm, 0, sizeof dvm);
    ck_assert_int_eq(
        attn_sdpa_backward(&q, &k, &v, &o, &out, &lse, &dout, &dq, &dk, &dv, NULL, 0), ATTN_OK);
    ref_sdpa_backward(&q, &k, &v, &o, &dout, &wq, &wk, &wv);
    tu_check_close(&dq, &wq, rtol, atol, what);
    tu_check_close(&dk, &wk, rtol, atol, what);
    tu_check_close(&dv, &wv, rtol, atol, what);
}

START_TEST(rg_masked_nan_rule) {
    static const int64_t blocks[] = {0, 1, 2, 3, 4, 5, 8};
    for (int d = 0; d < 2; ++d)
        for (int kind = 0; kind < 5; ++kind)
            for (int algo = ATTN_ALGO_MATERIALIZED; algo <= ATTN_ALGO_TILED; ++algo)
                for (int i = 0; i < 7; ++i)
                    for (int j = 0; j < (algo == ATTN_ALGO_TILED ? 7 : 1); ++j)
                        nr_run(d ? ATTN_F64 : ATTN_F32, kind, algo, blocks[i], blocks[j],
                               1 + (i + j) % 2);
}
END_TEST

/*
 * Class D: a per-batch length out of range is ATTN_ERANGE everywhere (kv_len outside
 * 0..Tk through attn_sdpa, its backward and the layers; docs/reliability.md).
 */
START_TEST(rg_kv_len_status) {
    pr_nfail = 0;
    static const int cases[] = {18, 19, 20, 21, 33, 34, 35, 36, 39, 40, 41, 42, 48, 49};
    for (int d = 0; d < 2; ++d)
        for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n)
            for (int m = 0; m < 3; ++m) {
                RG_BEGIN(cases[n], d ? ATTN_F64 : ATTN_F32);
                if (m == 0)
                    c->kv_len[0] += 1;
                else if (m == 1)
                    c->kv_len[1] = -1;
                else
                    c->kv_len[0] = INT64_MAX;
                RG_END(E_REFUSE, ATTN_ERANGE, "kv_len out of range");
            }
    /* the same misuse through the decode API: attn_sdpa_decode's len, the cache's len of
       attn_mha_step and attn_decoder_step, and the memory lengths of attn_decoder_memory */
    static const int dcases[] = {44, 45, 46, 47};
    for (int d = 0; d < 2; ++d)
        for (size_t n = 0; n < sizeof dcases / sizeof *dcases; ++n)
            for (int m = 0; m < 3; ++m) {
                RG_BEGIN(dcases[n], d ? ATTN_F64 : ATTN_F32);
                int64_t *len = dcases[n] == 46 ? c->kv_len : (int64_t *)c->v[c->len_i].data;
                int64_t hi = dcases[n] == 46 ? DC_S : DC_TMAX;
                if (m == 0)
                    len[0] = hi + 1;
                else if (m == 1)
                    len[1] = -1;
                else
                    len[0] = INT64_MAX;
                RG_END(E_REFUSE, ATTN_ERANGE, "per-batch length out of range");
            }
    RG_CHECK();
}
END_TEST

/*
 * Class D: a misaligned slab is ATTN_EINVAL from *_params_bind and from *_cache_bind
 * alike (an invalid argument, whatever its size), the views left untouched.
 */
START_TEST(rg_slab_alignment_status) {
    static _Alignas(64) unsigned char slab[1 << 16];
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        attn_mha_config mc = {.dtype = dt, .d_model = 4, .heads = 2, .bias = true};
        attn_ffn_config fc = {.dtype = dt, .d_model = 4, .d_ff = 8, .bias = true};
        attn_encoder_config ec = {.mha = mc, .ffn = fc, .ln_affine = true};
        for (size_t off = 1; off < 64; off = off * 2 + (off == 1 ? 1 : 0)) {
            unsigned char *p = slab + off;
            size_t big = sizeof slab - 64;
            attn_mha_params mp;
            attn_ffn_params fp;
            attn_encoder_params ep;
            attn_view views[15], v0[15];
            attn_trace tr, tr0;
            memset(views, 0x5A, sizeof views), memcpy(v0, views, sizeof v0);
            memset(&tr, 0x5A, sizeof tr), memcpy(&tr0, &tr, sizeof tr);
            ck_assert_int_eq(attn_mha_params_bind(&mp, &mc, p, big), ATTN_EINVAL);
            ck_assert_int_eq(attn_ffn_params_bind(&fp, &fc, p, big), ATTN_EINVAL);
            ck_assert_int_eq(attn_encoder_params_bind(&ep, &ec, p, big), ATTN_EINVAL);
            ck_assert_msg(attn_mha_cache_bind(&mc, 2, 3, 3, p, big, views, &tr) == ATTN_EINVAL,
                          "mha_cache_bind misaligned by %zu", off);
            ck_assert_msg(attn_encoder_cache_bind(&ec, 2, 3, p, big, views, &tr) == ATTN_EINVAL,
                          "encoder_cache_bind misaligned by %zu", off);
            ck_assert(memcmp(views, v0, sizeof v0) == 0 && memcmp(&tr, &tr0, sizeof tr) == 0);
            /* too small (and aligned) stays ATTN_EWORKSPACE */
            ck_assert_int_eq(attn_mha_cache_bind(&mc, 2, 3, 3, slab, 16, views, &tr),
                             ATTN_EWORKSPACE);
        }
    }
}
END_TEST

/*
 * Class D: a workspace offset by a few bytes must not be read misaligned (UBSan watches
 * tmpl/sdpa.h and vexp.c). The rule (docs/reliability.md): a workspace
 * the call uses must be 8-byte aligned (malloc's is), else ATTN_EINVAL with nothing
 * written; 8-aligned but not 64-aligned gives the aligned result, UBSan clean in CI.
 */
START_TEST(rg_workspace_misaligned) {
    pr_nfail = 0;
    static const int cases[] = {43, 16, 17, 18, 19, 20, 21, 24, 25,
                                26, 33, 35, 37, 38, 39, 41, 42};
    static const size_t offs[] = {1, 4, 8, 12, 36};
    for (int d = 0; d < 2; ++d)
        for (size_t n = 0; n < sizeof cases / sizeof *cases; ++n)
            for (size_t m = 0; m < sizeof offs / sizeof *offs; ++m) {
                RG_BEGIN(cases[n], d ? ATTN_F64 : ATTN_F32);
                c->work_size = c->query(c);
                c->work = pr_hi(c->work_size + 64) + offs[m];
                char what[64];
                snprintf(what, sizeof what, "workspace misaligned by %zu", offs[m]);
                /* 8-byte aligned works (malloc's); less is ATTN_EINVAL, nothing written */
                bool aligned = offs[m] % 8 == 0 || c->work_size == 0;
                RG_END(aligned ? E_SAME : E_REFUSE, ATTN_EINVAL, what);
            }
    RG_CHECK();
}
END_TEST

/*
 * Class D: the order of checks. A 40 GiB view (tests/test_gemm's gm_errors) may overlap
 * the test's stack arrays in a --buildtype=debug build; range comes before aliasing. The
 * documented order is NULL and malformed views, dtype, shape and range, aliasing,
 * workspace: a call with two faults reports the earlier one, wherever the caller's
 * arrays sit.
 */
START_TEST(rg_check_order) {
    static _Alignas(64) float mem[4096];
    attn_view A, B, C, Cbig;
    PR_OK(attn_view_init(&A, ATTN_F32, mem, 2, SH(4, 3)));
    PR_OK(attn_view_init(&B, ATTN_F32, mem + 64, 2, SH(3, 5)));
    PR_OK(attn_view_init(&C, ATTN_F32, mem + 128, 2, SH(4, 5)));
    /* a 2^31-row C over A (range + alias): ERANGE */
    attn_view Abig;
    PR_OK(attn_view_init_strided(&Abig, ATTN_F32, mem, 2, SH(INT64_C(1) << 31, 3), SH(0, 1)));
    PR_OK(attn_view_init_strided(&Cbig, ATTN_F32, mem, 2, SH(INT64_C(1) << 31, 5), SH(5, 1)));
    ck_assert_int_eq(attn_gemm(0, 0, 1, &Abig, &B, 0, &Cbig, NULL, 0), ATTN_ERANGE);
    /* the same with C before, inside and after A's memory: the status does not move */
    for (int where = 0; where < 3; ++where) {
        Cbig.data = where == 0   ? (void *)mem
                    : where == 1 ? (void *)(mem + 2)
                                 : (void *)(mem + 3000);
        ck_assert_int_eq(attn_gemm(0, 0, 1, &Abig, &B, 0, &Cbig, NULL, 0), ATTN_ERANGE);
    }
    /* dtype + alias: EDTYPE; shape + alias: ESHAPE; alias + short workspace: EALIAS */
    attn_view Cd = A;
    Cd.dtype = ATTN_F64;
    ck_assert_int_eq(attn_gemm(0, 0, 1, &A, &B, 0, &Cd, NULL, 0), ATTN_EDTYPE);
    attn_view Cs;
    PR_OK(attn_view_init(&Cs, ATTN_F32, mem, 2, SH(4, 6)));
    ck_assert_int_eq(attn_gemm(0, 0, 1, &A, &B, 0, &Cs, NULL, 0), ATTN_ESHAPE);
    attn_view Bp, Ca;
    PR_OK(attn_view_init_strided(&Bp, ATTN_F32, mem + 64, 2, SH(3, 5), SH(10, 2)));
    PR_OK(attn_view_init(&Ca, ATTN_F32, mem + 2, 2, SH(4, 5)));
    ck_assert_uint_gt(attn_gemm_workspace_size(0, 0, &A, &Bp, &C), 0);
    ck_assert_int_eq(attn_gemm(0, 0, 1, &A, &Bp, 0, &Ca, mem + 1024, 1), ATTN_EALIAS);
    /* malformed + dtype: the malformed view's status */
    attn_view Am = A;
    Am.ndim = 7;
    ck_assert_int_eq(attn_gemm(0, 0, 1, &Am, &B, 0, &Cd, NULL, 0), attn_view_check(&Am));
    /* sdpa: a D beyond INT_MAX on an out that overlaps q: ERANGE, wherever out sits */
    attn_view q, k, v, o;
    int64_t huge = (int64_t)INT_MAX + 1;
    PR_OK(attn_view_init_strided(&q, ATTN_F32, mem, 4, SH(1, 1, 2, huge), SH(0, 0, 0, 0)));
    PR_OK(attn_view_init_strided(&k, ATTN_F32, mem, 4, SH(1, 1, 2, huge), SH(0, 0, 0, 0)));
    PR_OK(attn_view_init(&v, ATTN_F32, mem + 8, 4, SH(1, 1, 2, 2)));
    PR_OK(attn_view_init(&o, ATTN_F32, mem, 4, SH(1, 1, 2, 2)));
    ck_assert_int_eq(attn_sdpa(&q, &k, &v, NULL, &o, NULL, 0), ATTN_ERANGE);
    /* sdpa: out overlapping q and a bias of the wrong dtype: EDTYPE */
    attn_view q2, bias;
    PR_OK(attn_view_init(&q2, ATTN_F32, mem, 4, SH(1, 1, 2, 2)));
    PR_OK(attn_view_init(&bias, ATTN_F64, mem + 512, 2, SH(2, 2)));
    attn_sdpa_opts opts = {.bias = &bias};
    ck_assert_int_eq(attn_sdpa(&q2, &q2, &v, &opts, &o, NULL, 0), ATTN_EDTYPE);
    /* sdpa: out overlapping q and an out of the wrong shape: ESHAPE */
    attn_view o3;
    PR_OK(attn_view_init(&o3, ATTN_F32, mem, 4, SH(1, 1, 3, 2)));
    ck_assert_int_eq(attn_sdpa(&q2, &q2, &v, NULL, &o3, NULL, 0), ATTN_ESHAPE);
    /* sdpa: out overlapping q, bad kv_len: ERANGE (lengths precede aliasing) */
    int64_t kv[1] = {7};
    attn_sdpa_opts o2 = {.kv_len = kv};
    ck_assert_int_eq(attn_sdpa(&q2, &q2, &v, &o2, &o, NULL, 0), ATTN_ERANGE);
    /* linear: x overlapping y, W of the wrong dtype: EDTYPE */
    attn_view x, w, y;
    PR_OK(attn_view_init(&x, ATTN_F32, mem, 2, SH(3, 4)));
    PR_OK(attn_view_init(&w, ATTN_F64, mem + 256, 2, SH(4, 5)));
    PR_OK(attn_view_init(&y, ATTN_F32, mem, 2, SH(3, 5)));
    ck_assert_int_eq(attn_linear(&x, &w, NULL, &y, NULL, 0), ATTN_EDTYPE);
}
END_TEST

int main(void) {
    const char *full = getenv("ATTN_PROMISES_FULL");
    pr_full = full && *full && strcmp(full, "0") != 0;
    pr_trace_calls = getenv("ATTN_PROMISES_TRACE") != NULL;
    const char *light = getenv("ATTN_PROMISES_LIGHT");
    pr_light = light && *light && strcmp(light, "0") != 0;
    Suite *s = suite_create("promises");
    TCase *tc = tcase_create("harness_kernels");
    tcase_set_timeout(tc, pr_full ? 3000 : 300);
    PR_ADD(tc, pr_gemm_copy);
    PR_ADD(tc, pr_gemm_packed);
    PR_ADD(tc, pr_row_kernels);
    PR_ADD(tc, pr_linear);
    PR_ADD(tc, pr_sdpa);
    PR_ADD(tc, pr_diag_init_posenc);
    suite_add_tcase(s, tc);
    tc = tcase_create("harness_layers");
    tcase_set_timeout(tc, pr_full ? 3000 : 300);
    PR_ADD(tc, pr_mha);
    PR_ADD(tc, pr_ffn);
    PR_ADD(tc, pr_encoder);
    suite_add_tcase(s, tc);
    tc = tcase_create("harness_decode");
    tcase_set_timeout(tc, pr_full ? 3000 : 300);
    PR_ADD(tc, pr_decode);
    tcase_add_test(tc, pr_decode_binds);
    suite_add_tcase(s, tc);
    /* class A (the layers validate everything before the first write) */
    tc = tcase_create("regress_layers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rg_layers_bad_options);
    tcase_add_test(tc, rg_layers_gradient_stride0);
    tcase_add_test(tc, rg_layers_trace_same_object);
    tcase_add_test(tc, rg_encoder_backward_strided_weight);
    suite_add_tcase(s, tc);
    /* classes B, C, D */
    tc = tcase_create("regress_kernels");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rg_linear_backward_empty);
    tcase_add_test(tc, rg_workspace_overlap);
    tcase_add_test(tc, rg_workspace_misaligned);
    tcase_add_test(tc, rg_kv_len_status);
    tcase_add_test(tc, rg_slab_alignment_status);
    tcase_add_test(tc, rg_check_order);
    suite_add_tcase(s, tc);
    tc = tcase_create("regress_numerics");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rg_backward_extreme_logits);
    tcase_add_test(tc, rg_layers_extreme_bias);
    tcase_add_test(tc, rg_masked_nan_rule);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
