/* SPDX-License-Identifier: MIT */
/* What the KV cache step (kvcache.c) and the decoder block (decoder.c) share. */
#ifndef ATTN_DECODE_INTERNAL_H
#define ATTN_DECODE_INTERNAL_H

#include "kernels/sdpa_decode_internal.h"
#include "layers/layers_internal.h"

/* n_new[b] of validated step options, or Tq. */
static inline int64_t attn__step_n(const attn_step_opts *o, int64_t b, int64_t Tq) {
    return o->n_new ? o->n_new[b] : Tq;
}

/* RoPE settings for head width D: off, or a known style, base >= 0 finite, D even. */
ATTN_HIDDEN attn_status attn__rope_check(const attn_rope_config *r, int64_t D);

/* attn_kv_cache_check on a resolved config. */
ATTN_HIDDEN attn_status attn__kv_cache_check(const attn_kv_cache *cache,
                                             const attn_mha_config *c);

/* A view spanning the bytes of a cache's len (B int64), for the aliasing checks. */
ATTN_HIDDEN attn_view attn__kv_len_view(const attn_kv_cache *c);

/*
 * Everything a cached MHA step checks before its body: config (d_kv = C for
 * a self-attention step), parameters, x (B, Tq >= 1, C), the cache (cfg's
 * dtype and heads, x's B, lengths in range), the options (scale, threads,
 * split, n_new in [0, Tq], RoPE when self), masks broadcasting to
 * (B, H, Tq, Tmax), and for a self step len + n_new <= Tmax (ATTN_ERANGE).
 * A cross step (self false) reads a fixed projected memory and appends
 * nothing. Aliasing is the caller's (attn__layer_exec).
 */
ATTN_HIDDEN attn_status attn__mha_step_check(const attn_mha_config *cfg,
                                             const attn_mha_params *p, const attn_step_opts *o,
                                             bool self, const attn_view *x,
                                             const attn_kv_cache *cache, attn_mha_config *c);

/*
 * The cached step's body on checked arguments (counting or running): project
 * x, RoPE at the absolute positions and append to the cache (self), attend
 * over the valid prefix (the decode kernel for a few rows, attn_sdpa's tiles
 * per batch otherwise), project out; rows past n_new are 0. The lengths are
 * advanced by attn__mha_step_commit once the whole call has run.
 */
ATTN_HIDDEN attn_status attn__mha_step_body(const attn_mha_config *c, const attn_mha_params *p,
                                            const attn_step_opts *o,
                                            const attn_rope_config *rope, bool self,
                                            const attn_view *x, const attn_kv_cache *cache,
                                            attn_view *out, attn__plan *pl);
ATTN_HIDDEN void attn__mha_step_commit(const attn_step_opts *o, const attn_view *x,
                                       attn_kv_cache *cache);

/* Set every element of a float view to 0 (any strides, up to 4 dims). */
ATTN_HIDDEN void attn__dec_zero(const attn_view *v);

/* ---- the decoder block (decoder_params.c, shared with decoder.c) ---------------- */

enum { ATTN__DEC_NSAVED = 24 }; /* views in attn_decoder_saved */

/* The block has a cross-attention sub-block (a GPT-style block has none). */
static inline bool attn__dec_has_cross(const attn_decoder_config *c) {
    return c->cross.heads != 0;
}

/* Parameters against the config; their views appended to l[n..]; shape-only views. */
ATTN_HIDDEN attn_status attn__dec_check_params(const attn_decoder_config *c,
                                               const attn_decoder_params *p);
ATTN_HIDDEN int attn__dec_param_views(const attn_decoder_config *c,
                                      const attn_decoder_params *p, const attn_view **l, int n);
ATTN_HIDDEN attn_status attn__dec_shape_params(const attn_decoder_config *c,
                                               attn_decoder_params *p);
/* The saved activations: shapes (absent ones ndim 0), slot i, checks, views for aliasing. */
ATTN_HIDDEN void attn__dec_saved_shapes(const attn_decoder_config *c, int64_t B, int64_t T,
                                        int64_t S, int64_t sh[ATTN__DEC_NSAVED][3],
                                        int nd[ATTN__DEC_NSAVED]);
ATTN_HIDDEN attn_view *attn__dec_saved_slot(attn_decoder_saved *s, int i);
ATTN_HIDDEN attn_status attn__dec_check_saved(const attn_decoder_config *c,
                                              const attn_decoder_saved *s, int64_t B, int64_t T,
                                              int64_t S);
ATTN_HIDDEN int attn__dec_saved_views(const attn_decoder_config *c, const attn_decoder_saved *s,
                                      const attn_view **l, int n);

#endif
