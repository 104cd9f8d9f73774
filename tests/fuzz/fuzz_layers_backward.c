/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the MHA, FFN and encoder backwards (f64) with decoded configs, parameters,
 * inputs and gradients of any layout, masks and workspaces, against central finite
 * differences of L = sum(dout * forward(x)) in every input and parameter element.
 * A refused call must write nothing; an accepted one only its gradients.
 */
#include <limits.h>

#include "fuzz_common.h"

typedef struct lb {
    int kind; /* 0 mha self, 1 mha cross, 2 ffn, 3 encoder */
    attn_mha_config mc;
    attn_ffn_config fc;
    attn_encoder_config ec;
    attn_mha_params mp, mg;
    attn_ffn_params fp, fg;
    attn_encoder_params ep, eg;
    attn_sdpa_opts o;
    int64_t kv_len[4];
    attn_view x, xkv, dout, dx, dxkv;
    bool has_dx, has_dxkv, has_grads;
} lb;

static bool param(fz *f, int ndim, int64_t r, int64_t c, attn_view *v) {
    int64_t sh[2] = {r, c};
    return fz_view(f, fz_dtype(f, ATTN_F64), ndim, ndim == 2 ? sh : &sh[1], v);
}
/* The parameter views of a config, in a fixed order (NULL entries absent). */
static int mha_views(const attn_mha_config *c, attn_mha_params *p, attn_view **l, int n) {
    attn_view *v[] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < (c->bias ? 8 : 4); ++i)
        l[n++] = v[i];
    return n;
}
static int ffn_views(const attn_ffn_config *c, attn_ffn_params *p, attn_view **l, int n) {
    attn_view *v[] = {&p->w1, &p->w2, &p->b1, &p->b2};
    for (int i = 0; i < (c->bias ? 4 : 2); ++i)
        l[n++] = v[i];
    return n;
}
static int params_of(lb *t, bool grads, attn_view **l) {
    int n = 0;
    if (t->kind <= 1)
        return mha_views(&t->mc, grads ? &t->mg : &t->mp, l, 0);
    if (t->kind == 2)
        return ffn_views(&t->fc, grads ? &t->fg : &t->fp, l, 0);
    attn_encoder_params *p = grads ? &t->eg : &t->ep;
    n = mha_views(&t->ec.mha, &p->mha, l, 0);
    n = ffn_views(&t->ec.ffn, &p->ffn, l, n);
    if (t->ec.ln_affine)
        l[n++] = &p->ln1_g, l[n++] = &p->ln1_b, l[n++] = &p->ln2_g, l[n++] = &p->ln2_b;
    return n;
}
static bool mha_decode(fz *f, const attn_mha_config *c, attn_mha_params *p) {
    int64_t HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head;
    return param(f, 2, c->d_model, HD, &p->wq) && param(f, 2, c->d_kv, KD, &p->wk) &&
           param(f, 2, c->d_kv, KD, &p->wv) && param(f, 2, HD, c->d_model, &p->wo) &&
           (!c->bias || (param(f, 1, 0, HD, &p->bq) && param(f, 1, 0, KD, &p->bk) &&
                         param(f, 1, 0, KD, &p->bv) && param(f, 1, 0, c->d_model, &p->bo)));
}
static bool ffn_decode(fz *f, const attn_ffn_config *c, attn_ffn_params *p) {
    return param(f, 2, c->d_model, c->d_ff, &p->w1) &&
           param(f, 2, c->d_ff, c->d_model, &p->w2) &&
           (!c->bias ||
            (param(f, 1, 0, c->d_ff, &p->b1) && param(f, 1, 0, c->d_model, &p->b2)));
}

/* sum(dout * forward(x)) on the current values (the views as they are, work NULL). */
static double loss(lb *t, void *cache_mem, size_t cache_n, attn_status *st) {
    int64_t B = t->x.shape[0], T = t->x.shape[1], C = t->x.shape[2];
    double *y = malloc(sizeof(double) * (size_t)(B * T * C + 1));
    attn_view out;
    attn_view_init(&out, ATTN_F64, y, 3, t->x.shape);
    (void)cache_mem, (void)cache_n;
    if (t->kind <= 1)
        *st = attn_mha_forward(&t->mc, &t->mp, &t->x, t->kind ? &t->xkv : NULL, &t->o, &out,
                               NULL, NULL, 0);
    else if (t->kind == 2)
        *st = attn_ffn_forward(&t->fc, &t->fp, &t->x, &out, NULL, NULL, 0);
    else
        *st = attn_encoder_forward(&t->ec, &t->ep, &t->x, &t->o, &out, NULL, NULL, 0);
    double s = 0;
    int64_t idx[3] = {0};
    for (int64_t e = 0; e < B * T * C; ++e) {
        s += y[e] * fz_get(&t->dout, idx);
        for (int k = 2; k >= 0; --k) {
            if (++idx[k] < t->x.shape[k])
                break;
            idx[k] = 0;
        }
    }
    free(y);
    return s;
}

static double *elem(const attn_view *v, int64_t e) {
    int64_t idx[4] = {0}, off = 0;
    for (int k = v->ndim - 1; k >= 0; --k) {
        idx[k] = e % v->shape[k];
        e /= v->shape[k];
    }
    for (int k = 0; k < v->ndim; ++k)
        off += idx[k] * v->stride[k];
    return (double *)v->data + off;
}

/* True when two elements of v share memory (a broadcast or overlapping layout). */
static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}
static bool self_shared(const attn_view *v) {
    int64_t n = fz_numel(v);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    for (int64_t e = 0; e < n; ++e)
        off[e] = elem(v, e) - (double *)v->data;
    qsort(off, (size_t)n, sizeof *off, cmp_i64);
    bool dup = false;
    for (int64_t e = 1; e < n && !dup; ++e)
        dup = off[e] == off[e - 1];
    free(off);
    return dup;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    lb t;
    memset(&t, 0, sizeof t);
    t.kind = (int)fz_below(&f, 4);
    int64_t C = 1 + fz_below(&f, 5), B = fz_below(&f, 3), T = fz_below(&f, 4);
    int64_t Tk = fz_below(&f, 4), H = 1 + fz_below(&f, 2);
    t.mc = (attn_mha_config){.dtype = ATTN_F64,
                             .d_model = C,
                             .heads = H,
                             .kv_heads = fz_bool(&f) ? 1 : H,
                             .d_head = 1 + fz_below(&f, 3),
                             .d_kv = t.kind == 1 ? 1 + fz_below(&f, 4) : 0,
                             .bias = fz_bool(&f)};
    t.fc = (attn_ffn_config){.dtype = ATTN_F64,
                             .d_model = C,
                             .d_ff = fz_below(&f, 7),
                             .act = (attn_act)fz_below(&f, 2),
                             .bias = fz_bool(&f)}; /* no ReLU: its kink at 0 */
    t.ec = (attn_encoder_config){.mha = t.mc,
                                 .ffn = t.fc,
                                 .eps = 1e-5,
                                 .norm = (attn_norm_order)fz_below(&f, 2),
                                 .ln_affine = fz_bool(&f)};
    t.ec.mha.d_kv = 0;
    if (attn_mha_config_resolve(&t.mc, &t.mc) != ATTN_OK ||
        attn_ffn_config_resolve(&t.fc, &t.fc) != ATTN_OK ||
        attn_encoder_config_resolve(&t.ec, &t.ec) != ATTN_OK)
        return 0;
    int64_t Tkv = t.kind == 1 ? Tk : T, Ckv = t.kind == 1 ? t.mc.d_kv : C;
    const int64_t xs[3] = {B, T, C}, kvs[3] = {B, Tkv, Ckv};
    if (!fz_view(&f, fz_dtype(&f, ATTN_F64), 3, xs, &t.x) ||
        (t.kind == 1 && !fz_view(&f, fz_dtype(&f, ATTN_F64), 3, kvs, &t.xkv)) ||
        !fz_view(&f, fz_dtype(&f, ATTN_F64), 3, xs, &t.dout))
        return 0;
    uint8_t gm = fz_u8(&f);
    t.has_dx = gm & 1, t.has_dxkv = t.kind == 1 && (gm & 2), t.has_grads = gm & 4;
    if ((t.has_dx && !fz_view(&f, fz_dtype(&f, ATTN_F64), 3, xs, &t.dx)) ||
        (t.has_dxkv && !fz_view(&f, fz_dtype(&f, ATTN_F64), 3, kvs, &t.dxkv)))
        return 0;
    bool dec = true;
    for (int g = 0; g < (t.has_grads ? 2 : 1) && dec; ++g) {
        if (t.kind <= 1)
            dec = mha_decode(&f, &t.mc, g ? &t.mg : &t.mp);
        else if (t.kind == 2)
            dec = ffn_decode(&f, &t.fc, g ? &t.fg : &t.fp);
        else {
            attn_encoder_params *p = g ? &t.eg : &t.ep;
            dec = mha_decode(&f, &t.ec.mha, &p->mha) && ffn_decode(&f, &t.ec.ffn, &p->ffn) &&
                  (!t.ec.ln_affine ||
                   (param(&f, 1, 0, C, &p->ln1_g) && param(&f, 1, 0, C, &p->ln1_b) &&
                    param(&f, 1, 0, C, &p->ln2_g) && param(&f, 1, 0, C, &p->ln2_b)));
        }
    }
    if (!dec)
        return 0;
    t.o.causal = t.kind == 2 ? ATTN_CAUSAL_NONE : (attn_causal)fz_below(&f, 3);
    if (t.kind != 2 && fz_bool(&f) && B > 0) {
        for (int64_t b = 0; b < B; ++b)
            t.kv_len[b] = (int64_t)fz_below(&f, (uint32_t)Tkv + 2) - (fz_u8(&f) == 9);
        t.o.kv_len = t.kv_len;
    }
    t.o.algo = (attn_algo)fz_below(&f, 3);
    t.o.block_q = fz_below(&f, 4), t.o.block_k = fz_below(&f, 4);
    t.o.threads = (int)fz_below(&f, 3) - (fz_u8(&f) == 4);

    attn_view *pv[24], *gv[24];
    int np = params_of(&t, false, pv), ng = t.has_grads ? params_of(&t, true, gv) : 0;
    const attn_view *ins[32], *outs[32];
    int ni = 0, no = 0;
    ins[ni++] = &t.x, ins[ni++] = &t.dout;
    if (t.kind == 1)
        ins[ni++] = &t.xkv;
    for (int i = 0; i < np; ++i)
        ins[ni++] = pv[i];
    if (t.has_dx)
        outs[no++] = &t.dx;
    if (t.has_dxkv)
        outs[no++] = &t.dxkv;
    for (int i = 0; i < ng; ++i)
        outs[no++] = gv[i];
    for (int i = 0; i < no; ++i)
        if (!fz_in_arena(outs[i]) && attn_view_check(outs[i]) == ATTN_OK)
            return 0;
    bool ok = true;
    for (int i = 0; i < ni; ++i)
        ok = ok && attn_view_check(ins[i]) == ATTN_OK && ins[i]->dtype == ATTN_F64;
    for (int i = 0; i < no; ++i)
        ok = ok && attn_view_check(outs[i]) == ATTN_OK && outs[i]->dtype == ATTN_F64;
    for (int64_t b = 0; ok && t.o.kv_len && b < B; ++b)
        ok = t.kv_len[b] >= 0 && t.kv_len[b] <= Tkv;
    ok = ok && t.o.threads >= 0;
    bool alias = false;
    for (int i = 0; i < no; ++i) {
        for (int j = 0; j < ni; ++j)
            alias = alias || fz_overlap(outs[i], ins[j]);
        for (int j = i + 1; j < no; ++j)
            alias = alias || fz_overlap(outs[i], outs[j]);
    }
    /* the parameters and inputs overlapping each other make finite differences meaningless */
    bool shared = false;
    for (int i = 0; i < ni; ++i)
        for (int j = i + 1; j < ni; ++j)
            shared = shared || fz_overlap(ins[i], ins[j]);
    fz_work w;
    size_t need = t.kind <= 1   ? attn_mha_backward_workspace_size(&t.mc, &t.x,
                                                                 t.kind ? &t.xkv : NULL, &t.o)
                  : t.kind == 2 ? attn_ffn_backward_workspace_size(&t.fc, &t.x)
                                : attn_encoder_backward_workspace_size(&t.ec, &t.x, &t.o);
    if (!fz_work_get(&f, need, &w))
        return 0;
    fz_fill(&f, ATTN_F64);
    /* the cache, outside the arena, filled by the forward on the arena's values */
    size_t cn = t.kind <= 1   ? attn_mha_cache_size(&t.mc, B, T, Tkv)
                : t.kind == 2 ? (size_t)(2 * B * T * (t.fc.d_ff + 1) * 8 + 128)
                              : attn_encoder_cache_size(&t.ec, B, T);
    void *cslab = aligned_alloc(64, (cn + 63) / 64 * 64 + 64);
    attn_view cv[15], hpre, hid;
    attn_trace cache = {0};
    if (t.kind <= 1)
        attn_mha_cache_bind(&t.mc, B, T, Tkv, cslab, cn, cv, &cache);
    else if (t.kind == 3)
        attn_encoder_cache_bind(&t.ec, B, T, cslab, cn, cv, &cache);
    else {
        int64_t hs[3] = {B, T, t.fc.d_ff};
        attn_view_init(&hpre, ATTN_F64, cslab, 3, hs);
        attn_view_init(&hid, ATTN_F64, (double *)cslab + B * T * t.fc.d_ff + 8, 3, hs);
        cache.mlp_hidden_pre = &hpre, cache.mlp_hidden = &hid;
    }
    double *y = malloc(sizeof(double) * (size_t)(B * T * C + 1));
    attn_view yv;
    attn_view_init(&yv, ATTN_F64, y, 3, xs);
    attn_status fst =
        t.kind <= 1   ? attn_mha_forward(&t.mc, &t.mp, &t.x, t.kind ? &t.xkv : NULL, &t.o, &yv,
                                         &cache, NULL, 0)
        : t.kind == 2 ? attn_ffn_forward(&t.fc, &t.fp, &t.x, &yv, &cache, NULL, 0)
                      : attn_encoder_forward(&t.ec, &t.ep, &t.x, &t.o, &yv, &cache, NULL, 0);
    free(y);
    bool expect_ok = ok && !alias && fst == ATTN_OK;
    /* the gradients' start values */
    double *g0[32];
    for (int i = 0; i < no; ++i) {
        bool readable = attn_view_check(outs[i]) == ATTN_OK && outs[i]->dtype == ATTN_F64 &&
                        fz_in_arena(outs[i]);
        int64_t n = readable ? fz_numel(outs[i]) : 0; /* an invalid view is only refused */
        g0[i] = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t e = 0; e < n; ++e)
            g0[i][e] = *elem(outs[i], e);
    }
    const attn_view *args[64];
    int na = 0;
    for (int i = 0; i < ni; ++i)
        args[na++] = ins[i];
    for (int i = 0; i < no; ++i)
        args[na++] = outs[i];
    fz_arm(args, na);
    attn_status st =
        t.kind <= 1
            ? attn_mha_backward(&t.mc, &t.mp, &t.x, t.kind ? &t.xkv : NULL, &t.o, &cache,
                                &t.dout, t.has_dx ? &t.dx : NULL, t.has_dxkv ? &t.dxkv : NULL,
                                t.has_grads ? &t.mg : NULL, w.ptr, w.size)
        : t.kind == 2
            ? attn_ffn_backward(&t.fc, &t.fp, &t.x, &cache, &t.dout, t.has_dx ? &t.dx : NULL,
                                t.has_grads ? &t.fg : NULL, w.ptr, w.size)
            : attn_encoder_backward(&t.ec, &t.ep, &t.x, &t.o, &cache, &t.dout,
                                    t.has_dx ? &t.dx : NULL, t.has_grads ? &t.eg : NULL, w.ptr,
                                    w.size);
    fz_disarm();
    static const char *names[] = {"attn_mha_backward", "attn_mha_backward (cross)",
                                  "attn_ffn_backward", "attn_encoder_backward"};
    fz_check_untouched(st, outs, no, names[t.kind]);
    if (st == ATTN_OK) {
        FZ_REQUIRE(ok, "%s accepted an invalid call", names[t.kind]);
        FZ_REQUIRE(!alias, "%s accepted gradients that alias", names[t.kind]);
        FZ_REQUIRE(!w.short_by_one, "%s accepted a workspace one byte short", names[t.kind]);
    } else if (expect_ok) {
        FZ_REQUIRE(st == ATTN_ESTRIDE || (st == ATTN_EWORKSPACE && w.ptr),
                   "%s refused a valid call: %s", names[t.kind], attn_status_name(st));
    }
    /* finite differences: every element of x, x_kv and every parameter (an input whose
       elements share memory has no per-element difference: skipped) */
    for (int i = 0; st == ATTN_OK && !shared && i < ni; ++i)
        shared = self_shared(ins[i]);
    if (st == ATTN_OK && !shared) {
        const attn_view *wrt[32];
        const attn_view *got[32];
        int nw = 0;
        if (t.has_dx)
            wrt[nw] = &t.x, got[nw++] = &t.dx;
        if (t.has_dxkv)
            wrt[nw] = &t.xkv, got[nw++] = &t.dxkv;
        for (int i = 0; i < ng; ++i)
            wrt[nw] = pv[i], got[nw++] = gv[i];
        for (int i = 0; i < nw; ++i) {
            int oi = i; /* outs and wrt list the gradients in the same order */
            int64_t n = fz_numel(wrt[i]);
            for (int64_t e = 0; e < n; ++e) {
                double *p = elem(wrt[i], e), x0 = *p, h = 1e-5;
                attn_status s1, s2;
                *p = x0 + h;
                double lp = loss(&t, NULL, 0, &s1);
                *p = x0 - h;
                double lm = loss(&t, NULL, 0, &s2);
                *p = x0;
                FZ_REQUIRE(s1 == ATTN_OK && s2 == ATTN_OK, "forward for the difference failed");
                double fd = (lp - lm) / (2 * h), gr = *elem(got[i], e) - g0[oi][e];
                FZ_REQUIRE(fabs(fd - gr) <= 1e-5 + 1e-4 * fabs(fd),
                           "%s: gradient %d element %lld: %.12g, finite difference %.12g",
                           names[t.kind], i, (long long)e, gr, fd);
            }
        }
    }
    for (int i = 0; i < no; ++i)
        free(g0[i]);
    free(cslab);
    fz_work_free(&w);
    return 0;
}
