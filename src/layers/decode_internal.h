/* SPDX-License-Identifier: MIT */
/* What the KV cache step (kvcache.c) and the decoder block (decoder.c) share. */
#ifndef ATTN_DECODE_INTERNAL_H
#define ATTN_DECODE_INTERNAL_H

#include <string.h>

#include "core/internal.h"
#include "kernels/sdpa_decode_internal.h"

/*
 * Scratch planning, as in the layers: every body runs twice, once counting
 * (no data touched, sizes summed: the *_workspace_size query) and once for
 * real, so the query and the carving cannot disagree.
 */
typedef struct dplan {
    bool   counting;
    char  *base;
    size_t size, used;
    size_t inner; /* largest workspace a nested kernel call needs */
} dplan;

static inline void *dplan_take(dplan *pl, size_t bytes) {
    size_t off = attn__align64(pl->used);
    pl->used = off + attn__align64(bytes ? bytes : 1);
    /* counting: distinct, never-dereferenced addresses, so nested queries see no aliasing */
    if (pl->counting)
        return (void *)(((uintptr_t)1 << 62) + off);
    return pl->base + off;
}
static inline void dplan_inner(dplan *pl, size_t need) {
    if (need > pl->inner)
        pl->inner = need;
}
static inline void *dplan_ibase(const dplan *pl) {
    return pl->counting ? NULL : pl->base + attn__align64(pl->used);
}
static inline size_t dplan_isize(const dplan *pl) {
    return pl->counting ? 0 : pl->size - attn__align64(pl->used);
}
static inline size_t dplan_total(const dplan *pl) { return attn__align64(pl->used) + pl->inner; }

/* A fresh contiguous scratch view, zeroed when asked. */
static inline attn_view dplan_view(dplan *pl, attn_dtype dt, int ndim, const int64_t *shape,
                                   bool zero) {
    size_t n = attn_dtype_size(dt);
    for (int k = 0; k < ndim; ++k)
        n *= (size_t)shape[k];
    void *p = dplan_take(pl, n);
    if (zero && !pl->counting)
        memset(p, 0, n);
    attn_view v;
    attn_view_init(&v, dt, p, ndim, shape);
    return v;
}

/* Run a body for real: count first, then carve the caller's workspace (or allocate). */
#define DPLAN_RUN(body)                                                              \
    do {                                                                             \
        dplan cnt_ = {.counting = true};                                             \
        dplan *pl = &cnt_;                                                           \
        ATTN_TRY(body);                                                              \
        void *owned_ = NULL;                                                         \
        ATTN_TRY(attn__work_acquire(&work, &work_size, dplan_total(&cnt_), &owned_)); \
        dplan real_ = {.base = work, .size = work_size};                             \
        pl = &real_;                                                                 \
        attn_status st_ = (body);                                                    \
        free(owned_);                                                                \
        return st_;                                                                  \
    } while (0)

/* Split (B, T, H*D) into heads (B, H, T, D) without copying. */
static inline attn_status attn__heads_of(const attn_view *x, int64_t D, attn_view *out) {
    attn_view s;
    ATTN_TRY(attn_view_split(x, 2, D, &s));
    return attn_view_permute(&s, (const int[]){0, 2, 1, 3}, out);
}

/* v exists, has dtype dt and the given shape. */
static inline attn_status attn__want(const attn_view *v, attn_dtype dt, int ndim,
                                     const int64_t *shape) {
    if (!v)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(v));
    if (v->dtype != dt)
        return ATTN_EDTYPE;
    if (v->ndim != ndim)
        return ATTN_ESHAPE;
    for (int k = 0; k < ndim; ++k)
        if (v->shape[k] != shape[k])
            return ATTN_ESHAPE;
    return ATTN_OK;
}

/* Outputs (NULL skipped) against themselves, inputs and each other, spans taken once. */
enum { DEC_MAX_VIEWS = 96 };
ATTN_HIDDEN attn_status attn__dec_no_alias(const attn_view *const *outs, int no,
                                           const attn_view *const *ins, int ni);

/* Views of an MHA parameter struct (only those cfg uses) appended to l[n..]; new n. */
ATTN_HIDDEN int attn__dec_mha_views(const attn_mha_config *c, const attn_mha_params *p,
                                    const attn_view **l, int n);
/* Every parameter view of cfg's MHA: the right dtype and shape (ATTN_EINVAL for NULL). */
ATTN_HIDDEN attn_status attn__dec_check_mha(const attn_mha_config *c, const attn_mha_params *p);

/*
 * The validated arguments of a cached step's self- or cross-attention over
 * a cache: the decode kernel's plan (its klen, qpos0, nrows point into the
 * step's scratch), or per-batch attn_sdpa calls for long chunks.
 */
typedef struct attn__step_attn {
    attn__decode_plan dp;
    bool              tiled; /* Tq too large for the decode kernel: attn_sdpa per batch */
    const attn_view  *keep, *bias;
    int               threads;
} attn__step_attn;

/* Validated step options (NULL -> defaults) against x (B, Tq, C). */
ATTN_HIDDEN attn_status attn__step_check_opts(const attn_step_opts *o, int64_t B, int64_t Tq);
/* n_new[b] of the options, or Tq. */
static inline int64_t attn__step_n(const attn_step_opts *o, int64_t b, int64_t Tq) {
    return o->n_new ? o->n_new[b] : Tq;
}

/*
 * The validated MHA step up to its attention: config cfg (resolved), the
 * options, x (B, Tq, C), the cache. causal: a self-attention step (append,
 * RoPE, causal mask); otherwise a cross-attention over a fixed projected
 * memory (the cache is read only). rope: RoPE for the self-attention.
 */
ATTN_HIDDEN attn_status attn__mha_step_body(const attn_mha_config *c, const attn_mha_params *p,
                                            const attn_step_opts *o, const attn_rope_config *rope,
                                            bool self, const attn_view *x,
                                            const attn_kv_cache *cache, attn_view *out,
                                            dplan *pl);
/*
 * Everything attn_mha_step checks, for a self (append) or cross (read-only)
 * step: config (d_kv = C for self), params, x, cache (same B, cfg's shape),
 * lengths (self: len + n_new <= Tmax), masks, out. Aliasing is the caller's.
 */
ATTN_HIDDEN attn_status attn__mha_step_check(const attn_mha_config *cfg, const attn_mha_params *p,
                                             const attn_step_opts *o, bool self,
                                             const attn_view *x, const attn_kv_cache *cache,
                                             attn_mha_config *c);
/* Advance the lengths of a self cache after a successful step. */
ATTN_HIDDEN void attn__mha_step_commit(const attn_step_opts *o, const attn_view *x,
                                       attn_kv_cache *cache);
/* Check the RoPE settings for a head width D (on: style known, base >= 0 finite, D even). */
ATTN_HIDDEN attn_status attn__rope_check(const attn_rope_config *r, int64_t D);

#endif

/*
 * The kernels a decoding body calls, as plan steps: the size of their
 * workspace when counting, the call otherwise. (One place to route them
 * through the kernels' internal run functions.)
 */
static inline attn_status dlin(dplan *pl, const attn_view *x, const attn_view *w,
                               const attn_view *b, attn_view *y) {
    if (pl->counting) {
        dplan_inner(pl, attn_linear_workspace_size(x, w, y));
        return ATTN_OK;
    }
    return attn_linear(x, w, b, y, dplan_ibase(pl), dplan_isize(pl));
}
static inline attn_status dlin_back(dplan *pl, const attn_view *x, const attn_view *w,
                                    const attn_view *dy, attn_view *dx, attn_view *dw,
                                    attn_view *db) {
    if (pl->counting) {
        dplan_inner(pl, attn_linear_backward_workspace_size(x, w, dy, dx, dw));
        return ATTN_OK;
    }
    return attn_linear_backward(x, w, dy, dx, dw, db, dplan_ibase(pl), dplan_isize(pl));
}
#define DRUN(call)                 \
    do {                           \
        if (!pl->counting)         \
            ATTN_TRY(call);        \
    } while (0)

/* Set every element of a float view to 0 (any strides, up to 4 dims). */
ATTN_HIDDEN void attn__dec_zero(const attn_view *v);
