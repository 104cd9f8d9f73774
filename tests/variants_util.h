/* SPDX-License-Identifier: MIT */
/* What the attention-variant suites share: a fixture of scripts/gen_variant_fixtures.py
 * as attn_sdpa options and tensors. */
#ifndef ATTN_VARIANTS_UTIL_H
#define ATTN_VARIANTS_UTIL_H

#include "fixture.h"
#include "sdpa_util.h"

/* ---- a fixture's call ----------------------------------------------------------------- */

/* Everything a fixture's options point at, in dtype dt. */
typedef struct va_fx {
    sd_masks m;
    sd_t alibi, sinks;
    int64_t cu_q[16], cu_k[16];
    attn_sdpa_opts o;
} va_fx;

static inline void va_fx_opts(fx_file *fx, attn_dtype dt, va_fx *f) {
    memset(f, 0, sizeof *f);
    sd_masks *m = &f->m;
    attn_sdpa_opts *o = &f->o;
    o->causal = (attn_causal)fx_meta(fx, "causal", 0);
    if (fx_find(fx, "keep")) {
        m->keep = sd_from_fx(fx_get(fx, "keep"), ATTN_U8);
        m->keep_v = m->keep.v;
        o->keep = &m->keep_v;
    }
    if (fx_find(fx, "bias")) {
        m->bias = sd_from_fx(fx_get(fx, "bias"), dt);
        m->bias_v = m->bias.v;
        o->bias = &m->bias_v;
    }
    if (fx_find(fx, "kv_len")) {
        fx_tensor *x = fx_get(fx, "kv_len");
        for (int64_t i = 0; i < x->n; ++i)
            m->kvl[i] = (int64_t)x->data[i];
        o->kv_len = m->kvl;
    }
    o->window = fx_meta(fx, "window", 0) != 0;
    o->window_left = fx_meta(fx, "window_left", 0);
    o->window_right = fx_meta(fx, "window_right", 0);
    o->softcap = fx_get(fx, "softcap")->data[0];
    if (fx_find(fx, "alibi")) {
        f->alibi = sd_from_fx(fx_get(fx, "alibi"), dt);
        o->alibi = &f->alibi.v;
    }
    if (fx_find(fx, "sinks")) {
        f->sinks = sd_from_fx(fx_get(fx, "sinks"), dt);
        o->sinks = &f->sinks.v;
    }
    o->n_seqs = fx_meta(fx, "n_seqs", 0);
    if (o->n_seqs > 0) {
        for (int64_t i = 0; i <= o->n_seqs; ++i) {
            f->cu_q[i] = (int64_t)fx_get(fx, "cu_q")->data[i];
            f->cu_k[i] = (int64_t)fx_get(fx, "cu_k")->data[i];
        }
        o->cu_seqlens_q = f->cu_q;
        o->cu_seqlens_k = f->cu_k;
    }
}

static inline void va_fx_free(va_fx *f) {
    sd_masks_free(&f->m);
    sd_free(&f->alibi);
    sd_free(&f->sinks);
}

/* A fixture tensor in layout l (4-D) or contiguous. */
static inline sd_t va_tensor(fx_file *fx, const char *name, attn_dtype dt, sd_lay l) {
    fx_tensor *x = fx_get(fx, name);
    uint64_t seed = 1;
    sd_t t =
        x->ndim == 4 ? sd_make(dt, x->shape, l, &seed, 1.0) : sd_zeros(dt, x->ndim, x->shape);
    int64_t idx[4] = {0}, n = 0;
    do
        tu_set(&t.v, idx, x->data[n++]);
    while (tu_inc(idx, x->shape, x->ndim));
    return t;
}

#endif
