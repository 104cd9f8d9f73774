/* SPDX-License-Identifier: MIT */
/* Helpers shared by the sdpa suites: (B, H, T, D) views in many layouts, masks, cases. */
#ifndef ATTN_SDPA_UTIL_H
#define ATTN_SDPA_UTIL_H

#include "ref/ref.h"
#include "testutil.h"

/* Memory layouts of a (B, H, T, D) tensor. */
typedef enum sd_lay {
    LY_CONTIG,   /* row-major (B, H, T, D) */
    LY_BTHD,     /* memory (B, T, H, D): heads split from (B, T, H*D) and permuted */
    LY_PADDED,   /* row stride D + 3: a slice of wider rows */
    LY_NEG,      /* T reversed: negative row stride */
    LY_PACKED,   /* D stride 2: no unit stride, attn_gemm packs */
    LY_COLMAJOR, /* each (T, D) head column-major */
    LY_COUNT
} sd_lay;
static const char *sd_lay_name[LY_COUNT] = {"contig", "bthd", "padded", "neg", "packed",
                                            "colmajor"};

/* A tensor in a given layout; the whole buffer (gaps too) is filled with values in [-1, 1). */
typedef struct sd_t {
    attn_view v;
    void *mem;
} sd_t;

static inline sd_t sd_make(attn_dtype dt, const int64_t sh[4], sd_lay l, uint64_t *seed,
                           double scale) {
    int64_t B = sh[0], H = sh[1], T = sh[2], D = sh[3], st[4], span, off = 0;
    switch (l) {
    case LY_BTHD:
        st[0] = T * H * D; st[1] = D; st[2] = H * D; st[3] = 1; span = B * T * H * D; break;
    case LY_PADDED:
        st[3] = 1; st[2] = D + 3; st[1] = T * (D + 3); st[0] = H * T * (D + 3);
        span = B * H * T * (D + 3); break;
    case LY_NEG:
        st[3] = 1; st[2] = -D; st[1] = T * D; st[0] = H * T * D; span = B * H * T * D;
        off = (T - 1) * D; break;
    case LY_PACKED:
        st[3] = 2; st[2] = 2 * D; st[1] = 2 * T * D; st[0] = 2 * H * T * D;
        span = 2 * B * H * T * D; break;
    case LY_COLMAJOR:
        st[2] = 1; st[3] = T; st[1] = T * D; st[0] = H * T * D; span = B * H * T * D; break;
    default:
        st[3] = 1; st[2] = D; st[1] = T * D; st[0] = H * T * D; span = B * H * T * D; break;
    }
    if (off < 0) off = 0;
    sd_t t;
    size_t es = attn_dtype_size(dt);
    t.mem = calloc((size_t)(span > 0 ? span : 1), es);
    if (span > 0) {
        attn_view all;
        attn_view_init(&all, dt, t.mem, 1, (int64_t[]){span});
        tu_fill(&all, seed, scale);
    }
    ck_assert_int_eq(attn_view_init_strided(&t.v, dt, (char *)t.mem + off * (int64_t)es, 4, sh,
                                            st), ATTN_OK);
    return t;
}

/* A contiguous zeroed F64 tensor (the reference's outputs). */
static inline sd_t sd_zeros(attn_dtype dt, int ndim, const int64_t *sh) {
    int64_t n = 1;
    for (int k = 0; k < ndim; ++k) n *= sh[k];
    sd_t t;
    t.mem = calloc((size_t)(n > 0 ? n : 1), attn_dtype_size(dt));
    ck_assert_int_eq(attn_view_init(&t.v, dt, t.mem, ndim, sh), ATTN_OK);
    return t;
}

static inline void sd_free(sd_t *t) { free(t->mem); t->mem = NULL; }

/* One attention problem: shapes and which masks it carries. */
typedef struct sd_case {
    int64_t B, H, Hkv, Tq, Tk, D, Dv;
    attn_causal causal;
    int keep;   /* 0 none, 1 full (B,H,Tq,Tk), 2 (Tq,Tk), 3 (B,1,Tq,Tk), 4 stride 0 over H */
    int bias;   /* 0 none, 1 full, 2 (Tq,Tk), 3 (1,H,Tq,Tk) */
    int kv_len; /* 0 none, 1 per-batch lengths (one of them 0 when B > 2) */
    double scale;
} sd_case;

/* The masks of a case; free with sd_masks_free. */
typedef struct sd_masks {
    sd_t keep, bias;
    attn_view keep_v, bias_v;
    int64_t kvl[8];
} sd_masks;

static inline void sd_masks_make(const sd_case *c, attn_dtype dt, uint64_t *seed, sd_masks *m,
                                 attn_sdpa_opts *o) {
    memset(m, 0, sizeof *m);
    int64_t full[4] = {c->B, c->H, c->Tq, c->Tk};
    if (c->keep) {
        /* memory (B, H, Tq, Tk), (Tq, Tk) or (B, 1, Tq, Tk); 75% of the keys kept */
        int64_t sh[4] = {c->B, c->keep >= 3 ? 1 : c->H, c->Tq, c->Tk};
        int nd = c->keep == 2 ? 2 : 4;
        m->keep = sd_zeros(ATTN_U8, nd, nd == 2 ? sh + 2 : sh);
        uint8_t *k = m->keep.mem;
        int64_t n = tu_numel(&m->keep.v);
        for (int64_t i = 0; i < n; ++i) k[i] = (tu_next(seed) % 4) != 0;
        /* the first query row of every (Tq, Tk) slice sees nothing: a fully masked row */
        for (int64_t r = 0; c->Tk > 0 && r < n / c->Tk; r += c->Tq)
            memset(k + r * c->Tk, 0, (size_t)c->Tk);
        m->keep_v = m->keep.v;
        if (c->keep == 4) /* the (B, 1, Tq, Tk) memory seen as (B, H, Tq, Tk), stride 0 */
            attn_view_init_strided(&m->keep_v, ATTN_U8, m->keep.mem, 4, full,
                                   (int64_t[]){c->Tq * c->Tk, 0, c->Tk, 1});
        o->keep = &m->keep_v;
    }
    if (c->bias) {
        int64_t sh[4] = {c->B, c->H, c->Tq, c->Tk};
        if (c->bias == 3) sh[0] = 1;
        int nd = c->bias == 2 ? 2 : 4;
        m->bias = sd_zeros(dt, nd, nd == 2 ? sh + 2 : sh);
        tu_fill(&m->bias.v, seed, 2.0);
        m->bias_v = m->bias.v;
        o->bias = &m->bias_v;
    }
    if (c->kv_len) {
        for (int64_t b = 0; b < c->B && b < 8; ++b)
            m->kvl[b] = c->Tk - (b * 3) % (c->Tk + 1);
        if (c->B > 2) m->kvl[2] = 0;
        o->kv_len = m->kvl;
    }
    o->causal = c->causal;
    o->scale = c->scale;
}

static inline void sd_masks_free(sd_masks *m) {
    sd_free(&m->keep);
    sd_free(&m->bias);
}

#ifdef ATTN_FIXTURE_H /* fixture helpers for suites that include fixture.h first */
/* A fixture tensor as a contiguous tensor of dtype dt (U8: non-zero -> 1). */
static inline sd_t sd_from_fx(const fx_tensor *x, attn_dtype dt) {
    ck_assert_ptr_nonnull(x);
    sd_t t = sd_zeros(dt, x->ndim, x->shape);
    int64_t idx[4] = {0}, n = 0;
    if (x->n)
        do tu_set(&t.v, idx, dt == ATTN_U8 ? x->data[n++] != 0 : x->data[n++]);
        while (tu_inc(idx, x->shape, x->ndim));
    return t;
}

/* The masks a generator fixture declares (meta causal, has_keep, has_bias, has_kv_len). */
static inline void sd_fx_masks(fx_file *fx, attn_dtype dt, sd_masks *m, attn_sdpa_opts *o) {
    memset(m, 0, sizeof *m);
    o->causal = (attn_causal)fx_meta(fx, "causal", 0);
    if (fx_meta(fx, "has_keep", 0)) {
        m->keep = sd_from_fx(fx_get(fx, "keep"), ATTN_U8);
        m->keep_v = m->keep.v;
        o->keep = &m->keep_v;
    }
    if (fx_meta(fx, "has_bias", 0)) {
        m->bias = sd_from_fx(fx_get(fx, "bias"), dt);
        m->bias_v = m->bias.v;
        o->bias = &m->bias_v;
    }
    if (fx_meta(fx, "has_kv_len", 0)) {
        fx_tensor *x = fx_get(fx, "kv_len");
        ck_assert(x && x->n <= 8);
        for (int64_t i = 0; i < x->n; ++i) m->kvl[i] = (int64_t)x->data[i];
        o->kv_len = m->kvl;
    }
}
#endif

/* No element of v is NaN. */
static inline void sd_check_no_nan(const attn_view *v, const char *what) {
    if (tu_numel(v) == 0) return;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do ck_assert_msg(!isnan(tu_get(v, idx)), "%s: NaN", what);
    while (tu_inc(idx, v->shape, v->ndim));
}

#endif
