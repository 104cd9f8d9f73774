/* SPDX-License-Identifier: MIT */
/* Split-KV decode: a few queries against a long KV cache, one memory-bound pass, lse-merged
 * splits. */

/* No -ffast-math (masks rely on -inf); only FP exception flags are given up, as in vexp.c. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "vect-cost-model=dynamic")
#endif

#include <limits.h>
#include <math.h>
#include <string.h>

#include "attn_config.h"
#include "kernels/lse_merge.h"
#include "kernels/sdpa_decode_internal.h"
#include "kernels/simd.h"

enum {
    BLK = 128,      /* keys per score block: K and V blocks stay in L1/L2 between rows */
    MIN_SPLIT = 256 /* automatic splits never hold fewer keys than this */
};

/* Splits of batch b's keys, and keys per split. */
static void splits_of(const attn__decode_plan *p, int64_t L, int64_t *ns, int64_t *chunk) {
    int64_t n = p->split > 0 ? L / p->split + (L % p->split != 0) : L / MIN_SPLIT;
    if (n > p->nsplit)
        n = p->nsplit;
    if (n < 1)
        n = 1;
    *ns = n;
    *chunk = L > 0 ? L / n + (L % n != 0) : 0;
}

/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/sdpa_decode.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/sdpa_decode.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

static attn_status decode_layout(attn__decode_plan *p, int requested_threads) {
    size_t es = attn_dtype_size(p->dt), R = (size_t)(p->G * p->Tq), D = (size_t)p->D;
    p->threads = attn__threads(requested_threads, INT64_MAX, 1e300); /* the most a run uses */
    int64_t bh;
    if (!attn__mul_i64(p->B, p->Hkv, &bh))
        return ATTN_ERANGE;
    if (p->split > 0)
        p->nsplit = p->Tmax / p->split + (p->Tmax % p->split != 0);
    else /* about ATTN__SPLIT_TASKS (b, kv head, split) tasks, by shape alone */
        p->nsplit = bh >= ATTN__SPLIT_TASKS ? 1 : (ATTN__SPLIT_TASKS + bh - 1) / (bh > 0 ? bh : 1);
    if (p->nsplit < 1)
        p->nsplit = 1;
    /* per thread: q rows (R, D), scores (R, BLK), acc (R, D), m and l (R) */
    size_t rd, rb, parts, nrow;
    if (!attn__mul_sz(R, D, &rd) || !attn__mul_sz(rd, es, &rd) ||
        !attn__mul_sz(R, (size_t)BLK * es, &rb))
        return ATTN_ERANGE;
    p->per_thread = 2 * attn__align64(rd) + attn__align64(rb) + 2 * attn__align64(R * es);
    /* partials: (B, Hkv, nsplit, R, D) outputs and (B, Hkv, nsplit, R) lse in double */
    if (!attn__mul_sz((size_t)bh, (size_t)p->nsplit, &nrow) || !attn__mul_sz(nrow, R, &nrow) ||
        !attn__mul_sz(nrow, D * es, &parts) || nrow > SIZE_MAX / 16)
        return ATTN_ERANGE;
    size_t thr;
    if (!attn__mul_sz(p->per_thread, (size_t)p->threads, &thr))
        return ATTN_ERANGE;
    p->off_part = attn__align64(thr);
    p->off_lse = p->off_part + attn__align64(parts);
    p->off_pos = p->off_lse + attn__align64(2 * nrow * sizeof(double)); /* max, sum */
    if ((size_t)p->B > SIZE_MAX / 16 ||
        !attn__add_sz(p->off_pos, attn__align64((size_t)p->B * sizeof(int64_t)), &p->total))
        return ATTN_ERANGE;
    return ATTN_OK;
}

/* The two loops of a decode run, as attn__parallel_for tasks. */
typedef struct decode_ctx {
    const attn__decode_plan *p;
    const attn_view *q, *k, *v, *out, *lse;
    char *w;
} decode_ctx;

/* Task t: split t % nsplit of (b, key/value head) t / nsplit. */
static void split_fn(void *ctx, int64_t t, int tid) {
    const decode_ctx *c = ctx;
    const attn__decode_plan *p = c->p;
    int64_t s = t % p->nsplit, bh = t / p->nsplit;
    if (p->dt == ATTN_F32)
        split_task_f32(p, c->q, c->k, c->v, bh / p->Hkv, bh % p->Hkv, s, c->w, tid, c->out,
                       c->lse);
    else
        split_task_f64(p, c->q, c->k, c->v, bh / p->Hkv, bh % p->Hkv, s, c->w, tid, c->out,
                       c->lse);
}

/* Task bh: merge the splits of (b, key/value head) bh's rows through their lse. */
static void merge_fn(void *ctx, int64_t bh, int tid) {
    const decode_ctx *c = ctx;
    const attn__decode_plan *p = c->p;
    (void)tid;
    if (p->dt == ATTN_F32)
        merge_rows_f32(p, bh / p->Hkv, bh % p->Hkv, c->out, c->lse, c->w);
    else
        merge_rows_f64(p, bh / p->Hkv, bh % p->Hkv, c->out, c->lse, c->w);
}

attn_status attn__decode_run(const attn__decode_plan *p, const attn_view *q, const attn_view *k,
                             const attn_view *v, const attn_view *out, const attn_view *lse,
                             void *work) {
    int64_t ntasks = p->B * p->Hkv * p->nsplit;
    double bytes = 0;
    for (int64_t b = 0; b < p->B; ++b)
        bytes += (double)p->klen[b];
    /* flops of the two passes over K and V: what attn__threads weighs */
    double flops = 4.0 * bytes * (double)(p->Hkv * p->G * p->Tq * p->D);
    int nt = attn__threads(p->threads, ntasks, flops);
    if (nt > p->threads)
        nt = p->threads;
    decode_ctx c = {p, q, k, v, out, lse, work};
    int one = attn__one_thread_begin(p->threads); /* resolved: 1 when asked for 1 */
    attn__parallel_for(nt, ntasks, split_fn, &c);
    /* one split: every row is written already */
    if (p->nsplit > 1)
        attn__parallel_for(nt, p->B * p->Hkv, merge_fn, &c);
    attn__one_thread_end(one);
    return ATTN_OK;
}

attn_status attn__decode_plan_init(attn__decode_plan *p, const attn__qkv *d, double scale,
                                   bool causal, const attn_view *keep, const attn_view *bias,
                                   const attn__decode_variants *var, int64_t split,
                                   int threads) {
    attn__decode_plan t = {.dt = d->dt,
                           .B = d->B,
                           .H = d->H,
                           .Hkv = d->Hkv,
                           .G = d->H / d->Hkv,
                           .Tq = d->Tq,
                           .D = d->D,
                           .Tmax = d->Tk,
                           .causal = causal,
                           .split = split};
    t.scale = scale != 0 ? scale : t.D > 0 ? 1.0 / sqrt((double)t.D) : 1.0;
    if (keep) {
        t.keep = *keep;
        t.has_keep = true;
    }
    if (bias) {
        t.bias = *bias;
        t.has_bias = true;
    }
    if (var) {
        t.window = var->window;
        t.wl = var->wl;
        t.wr = var->wr;
        t.softcap = var->softcap;
        t.has_alibi = var->alibi != NULL;
        t.has_sinks = var->sinks != NULL;
        if (var->alibi)
            t.alibi = *var->alibi;
        if (var->sinks)
            t.sinks = *var->sinks;
    }
    ATTN_TRY(decode_layout(&t, threads));
    *p = t;
    return ATTN_OK;
}

/* ---- the public kernel ------------------------------------------------------ */

static attn_status decode_prepare(const attn_view *q, const attn_view *k, const attn_view *v,
                                  const attn_decode_opts *o, attn__decode_plan *p) {
    static const attn_decode_opts defaults;
    if (!o)
        o = &defaults;
    attn__qkv d;
    ATTN_TRY(attn__check_qkv(q, k, v, &d));
    /* the kernel's own limits: one head width, at least one kv head and one query */
    if (d.Dv != d.D || d.Hkv < 1 || d.Tq < 1)
        return ATTN_ESHAPE;
    if (!isfinite(o->scale) || o->threads < 0 || o->split < 0)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_variants(d.dt, d.H, o->window, o->window_left, o->window_right,
                                  o->softcap, o->alibi, o->sinks));
    int64_t full[4] = {d.B, d.H, d.Tq, d.Tk};
    attn_view keep, bias;
    if (o->keep)
        ATTN_TRY(attn__check_mask(o->keep, ATTN_U8, 4, full, &keep));
    if (o->bias)
        ATTN_TRY(attn__check_mask(o->bias, d.dt, 4, full, &bias));
    if (d.D > INT_MAX)
        return ATTN_ERANGE;
    attn__decode_variants var = {o->window,  o->window_left, o->window_right,
                                 o->softcap, o->alibi,       o->sinks};
    return attn__decode_plan_init(p, &d, o->scale, false, o->keep ? &keep : NULL,
                                  o->bias ? &bias : NULL, &var, o->split, o->threads);
}

size_t attn_sdpa_decode_workspace_size(const attn_view *q, const attn_view *k,
                                       const attn_view *v, const attn_decode_opts *opts) {
    attn__decode_plan p;
    return decode_prepare(q, k, v, opts, &p) == ATTN_OK ? p.total : 0;
}

attn_status attn_sdpa_decode(const attn_view *q, const attn_view *k, const attn_view *v,
                             const int64_t *len, bool causal, const attn_decode_opts *opts,
                             attn_view *out, attn_view *lse, void *work, size_t work_size) {
    attn__decode_plan p;
    ATTN_TRY(decode_prepare(q, k, v, opts, &p));
    if (!len)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_lengths(len, p.B, p.Tmax));
    /* len is read while out is written: its bytes are an input like q, k and v */
    attn_view lenv;
    attn_view_init(&lenv, ATTN_U8, (void *)len, 1, (int64_t[]){p.B * (int64_t)sizeof *len});
    const attn__spec outs[2] = {{out, true, 4, {p.B, p.H, p.Tq, p.D}},
                                {lse, false, 3, {p.B, p.H, p.Tq}}};
    const attn_view *keep = opts ? opts->keep : NULL, *bias = opts ? opts->bias : NULL;
    const attn_view *alibi = opts ? opts->alibi : NULL, *sinks = opts ? opts->sinks : NULL;
    const attn_view *ins[8] = {q, k, v, &lenv, keep, bias, alibi, sinks};
    ATTN_TRY(attn__check_outputs(p.dt, outs, 2, ins, 8));
    void *owned = NULL;
    const attn_view *all[10] = {q, k, v, &lenv, keep, bias, alibi, sinks, out, lse};
    ATTN_TRY(attn__work_take(&work, &work_size, p.total, all, 10, &owned));
    /* the queries are the last Tq tokens of each batch's len: row i at len - Tq + i */
    int64_t *qp = (int64_t *)((char *)work + p.off_pos);
    for (int64_t b = 0; b < p.B; ++b)
        qp[b] = len[b] - p.Tq;
    p.causal = causal;
    p.klen = len;
    p.qpos0 = qp;
    attn_status st = attn__decode_run(&p, q, k, v, out, lse, work);
    free(owned);
    return st;
}
