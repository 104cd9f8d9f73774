/* SPDX-License-Identifier: MIT */
/* Fuzz target: the MHA, FFN and encoder forwards with arbitrary configs, views and masks. */
#include <limits.h>

#include "../ref/ref_layers.h"
#include "fuzz_common.h"

static double *dense_opt(const attn_view *v, bool present) {
    return present ? fz_doubles(v) : NULL;
}

/*
 * A matrix operand with no unit stride in its last two dims is packed by
 * attn_gemm; the layer workspace queries do not see the parameters or out
 * (layers.h: they assume a unit stride in one dim), so such calls may say
 * ATTN_EWORKSPACE with the queried size.
 */
static bool packed(const attn_view *v) {
    if (!v || v->ndim < 2)
        return false;
    int64_t r = v->shape[v->ndim - 2], c = v->shape[v->ndim - 1];
    int64_t sr = v->stride[v->ndim - 2], sc = v->stride[v->ndim - 1];
    bool row = (c <= 1 || sc == 1) && (r <= 1 || sr >= (c > 1 ? c : 1));
    bool col = (r <= 1 || sr == 1) && (c <= 1 || sc >= (r > 1 ? r : 1));
    return !row && !col;
}

/* A parameter view of the given shape (NULL shape: a 1-D (n) bias). */
static bool param(fz *f, attn_dtype dt, int ndim, int64_t r, int64_t c, attn_view *v) {
    int64_t sh[2] = {r, c};
    return fz_view(f, fz_dtype(f, dt), ndim, ndim == 2 ? sh : &sh[1], v);
}
static bool mha_params(fz *f, const attn_mha_config *c, attn_mha_params *p) {
    int64_t HD = c->heads * c->d_head, KD = c->kv_heads * c->d_head;
    return param(f, c->dtype, 2, c->d_model, HD, &p->wq) &&
           param(f, c->dtype, 2, c->d_kv, KD, &p->wk) &&
           param(f, c->dtype, 2, c->d_kv, KD, &p->wv) &&
           param(f, c->dtype, 2, HD, c->d_model, &p->wo) &&
           (!c->bias ||
            (param(f, c->dtype, 1, 0, HD, &p->bq) && param(f, c->dtype, 1, 0, KD, &p->bk) &&
             param(f, c->dtype, 1, 0, KD, &p->bv) &&
             param(f, c->dtype, 1, 0, c->d_model, &p->bo)));
}
static bool ffn_params(fz *f, const attn_ffn_config *c, attn_ffn_params *p) {
    return param(f, c->dtype, 2, c->d_model, c->d_ff, &p->w1) &&
           param(f, c->dtype, 2, c->d_ff, c->d_model, &p->w2) &&
           (!c->bias || (param(f, c->dtype, 1, 0, c->d_ff, &p->b1) &&
                         param(f, c->dtype, 1, 0, c->d_model, &p->b2)));
}
static int mha_list(const attn_mha_config *c, const attn_mha_params *p, const attn_view **l,
                    int n) {
    const attn_view *v[] = {&p->wq, &p->wk, &p->wv, &p->wo, &p->bq, &p->bk, &p->bv, &p->bo};
    for (int i = 0; i < (c->bias ? 8 : 4); ++i)
        l[n++] = v[i];
    return n;
}
static int ffn_list(const attn_ffn_config *c, const attn_ffn_params *p, const attn_view **l,
                    int n) {
    const attn_view *v[] = {&p->w1, &p->w2, &p->b1, &p->b2};
    for (int i = 0; i < (c->bias ? 4 : 2); ++i)
        l[n++] = v[i];
    return n;
}

/* The naive MHA of ref_layers.c on dense copies of the views. */
static void ref_mha(const attn_mha_config *c, const attn_mha_params *p, const attn_view *xq,
                    const attn_view *xkv, const attn_sdpa_opts *o, const uint8_t *keep,
                    double *y) {
    ref_l_mha_args a = {.B = xq->shape[0],
                        .Tq = xq->shape[1],
                        .Tk = xkv->shape[1],
                        .C = c->d_model,
                        .Ckv = c->d_kv,
                        .H = c->heads,
                        .Hkv = c->kv_heads,
                        .D = c->d_head,
                        .causal = o ? (int)o->causal : 0,
                        .keep = keep,
                        .kv_len = o ? o->kv_len : NULL};
    double *m[10] = {fz_doubles(xq),
                     fz_doubles(xkv),
                     fz_doubles(&p->wq),
                     fz_doubles(&p->wk),
                     fz_doubles(&p->wv),
                     fz_doubles(&p->wo),
                     dense_opt(&p->bq, c->bias),
                     dense_opt(&p->bk, c->bias),
                     dense_opt(&p->bv, c->bias),
                     dense_opt(&p->bo, c->bias)};
    a.xq = m[0], a.xkv = m[1], a.wq = m[2], a.wk = m[3], a.wv = m[4], a.wo = m[5];
    a.bq = m[6], a.bk = m[7], a.bv = m[8], a.bo = m[9];
    ref_l_mha(&a, y, NULL);
    for (int i = 0; i < 10; ++i)
        free(m[i]);
}
static void ref_ffn(const attn_ffn_config *c, const attn_ffn_params *p, int64_t n,
                    const double *x, double *y) {
    double *m[4] = {fz_doubles(&p->w1), dense_opt(&p->b1, c->bias), fz_doubles(&p->w2),
                    dense_opt(&p->b2, c->bias)};
    ref_l_ffn(n, c->d_model, c->d_ff, (int)c->act, x, m[0], m[1], m[2], m[3], y);
    for (int i = 0; i < 4; ++i)
        free(m[i]);
}
/* A dense (n, C) array as a contiguous F64 view (B, T, C) for ref_mha. */
static attn_view as_view(double *d, int64_t B, int64_t T, int64_t C) {
    attn_view v;
    attn_view_init(&v, ATTN_F64, d, 3, (const int64_t[]){B, T, C});
    return v;
}
/* Pre-norm r1 = x + MHA(LN1 x), out = r1 + FFN(LN2 r1); post-norm with LN after each add. */
static void ref_encoder(const attn_encoder_config *c, const attn_encoder_params *p,
                        const attn_view *x, const attn_sdpa_opts *o, const uint8_t *keep,
                        double *y) {
    int64_t B = x->shape[0], T = x->shape[1], C = c->mha.d_model, n = B * T * C;
    double *xd = fz_doubles(x), *t = malloc(sizeof(double) * (size_t)(n + 1));
    double *r = malloc(sizeof(double) * (size_t)(n + 1)),
           *u = malloc(sizeof(double) * (size_t)(n + 1));
    double *g[4] = {dense_opt(&p->ln1_g, c->ln_affine), dense_opt(&p->ln1_b, c->ln_affine),
                    dense_opt(&p->ln2_g, c->ln_affine), dense_opt(&p->ln2_b, c->ln_affine)};
    attn_view tv;
    if (c->norm == ATTN_PRE_NORM) {
        ref_l_layernorm(B * T, C, c->eps, xd, g[0], g[1], t);
        tv = as_view(t, B, T, C);
        ref_mha(&c->mha, &p->mha, &tv, &tv, o, keep, u);
        for (int64_t i = 0; i < n; ++i)
            r[i] = xd[i] + u[i];
        ref_l_layernorm(B * T, C, c->eps, r, g[2], g[3], t);
        ref_ffn(&c->ffn, &p->ffn, B * T, t, u);
        for (int64_t i = 0; i < n; ++i)
            y[i] = r[i] + u[i];
    } else {
        tv = as_view(xd, B, T, C);
        ref_mha(&c->mha, &p->mha, &tv, &tv, o, keep, u);
        for (int64_t i = 0; i < n; ++i)
            t[i] = xd[i] + u[i];
        ref_l_layernorm(B * T, C, c->eps, t, g[0], g[1], r);
        ref_ffn(&c->ffn, &p->ffn, B * T, r, u);
        for (int64_t i = 0; i < n; ++i)
            t[i] = r[i] + u[i];
        ref_l_layernorm(B * T, C, c->eps, t, g[2], g[3], y);
    }
    free(xd), free(t), free(r), free(u);
    for (int i = 0; i < 4; ++i)
        free(g[i]);
}

static attn_mha_config decode_mha(fz *f, attn_dtype dt, int64_t C) {
    attn_mha_config c = {.dtype = fz_u8(f) == 250 ? (attn_dtype)3 : dt, .d_model = C};
    c.heads = 1 + fz_below(f, 3) - (fz_u8(f) == 251);
    c.kv_heads = fz_below(f, 4);
    c.d_head = fz_below(f, 4);
    c.d_kv = fz_below(f, 6);
    c.bias = fz_bool(f);
    return c;
}
static attn_ffn_config decode_ffn(fz *f, attn_dtype dt, int64_t C) {
    attn_ffn_config c = {.dtype = dt,
                         .d_model = C,
                         .d_ff = fz_below(f, 10),
                         .act = (attn_act)fz_below(f, 4),
                         .bias = fz_bool(f)};
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const double epss[] = {0.0, 1e-5, 1e-3, 0.5, -1.0, NAN};
    fz f = {data, size};
    int kind = (int)fz_below(&f, 3); /* 0 mha, 1 ffn, 2 encoder */
    attn_dtype dt = fz_bool(&f) ? ATTN_F64 : ATTN_F32;
    int64_t C = fz_u8(&f) < 250 ? 1 + (int64_t)fz_below(&f, 8) : fz_extent(&f);
    int64_t B = fz_extent(&f), T = fz_extent(&f), Tk = fz_extent(&f);
    attn_mha_config mc = decode_mha(&f, dt, C), mr = mc;
    attn_ffn_config fc = decode_ffn(&f, dt, C), fr = fc;
    attn_encoder_config ec = {.mha = mc,
                              .ffn = fc,
                              .eps = epss[fz_below(&f, 6)],
                              .norm = (attn_norm_order)fz_below(&f, 3),
                              .ln_affine = fz_bool(&f)};
    attn_encoder_config er = ec;
    if (kind == 2) {
        ec.mha.d_kv = 0;
        ec.ffn.dtype = fz_u8(&f) == 9 ? (dt == ATTN_F32 ? ATTN_F64 : ATTN_F32) : ec.mha.dtype;
    }
    bool cfg_ok = kind == 0   ? attn_mha_config_resolve(&mc, &mr) == ATTN_OK
                  : kind == 1 ? attn_ffn_config_resolve(&fc, &fr) == ATTN_OK
                              : attn_encoder_config_resolve(&ec, &er) == ATTN_OK;
    if (!cfg_ok) { /* no parameter shapes to build: any call must fail, with nothing written */
        mr = mc, fr = fc, er = ec;
    } else if (kind == 2) {
        mr = er.mha, fr = er.ffn;
    }
    attn_dtype cdt = kind == 1 ? fr.dtype : mr.dtype;
    if (cdt != ATTN_F32 && cdt != ATTN_F64)
        cdt = dt;
    attn_mha_params mp = {0};
    attn_ffn_params fp = {0};
    attn_encoder_params ep = {0};
    attn_view x, xkv, out, keep;
    bool cross = kind == 0 && fz_bool(&f);
    int64_t Ckv = cross && cfg_ok ? mr.d_kv : C, Tkv = cross ? Tk : T;
    if (!fz_view(&f, fz_dtype(&f, cdt), 3, (const int64_t[]){B, T, C}, &x) ||
        (cross && !fz_view(&f, fz_dtype(&f, cdt), 3, (const int64_t[]){B, Tk, Ckv}, &xkv)) ||
        !fz_view(&f, fz_dtype(&f, cdt), 3, (const int64_t[]){B, T, C}, &out))
        return 0;
    if (cfg_ok) {
        if (kind == 0 && !mha_params(&f, &mr, &mp))
            return 0;
        if (kind == 1 && !ffn_params(&f, &fr, &fp))
            return 0;
        if (kind == 2) {
            if (!mha_params(&f, &er.mha, &ep.mha) || !ffn_params(&f, &er.ffn, &ep.ffn))
                return 0;
            if (er.ln_affine &&
                (!param(&f, cdt, 1, 0, C, &ep.ln1_g) || !param(&f, cdt, 1, 0, C, &ep.ln1_b) ||
                 !param(&f, cdt, 1, 0, C, &ep.ln2_g) || !param(&f, cdt, 1, 0, C, &ep.ln2_b)))
                return 0;
        }
    }
    /* attention options: causal, kv_len, a (B, 1, Tq, Tk) keep mask */
    attn_sdpa_opts o = {.causal = (attn_causal)fz_below(&f, 3)};
    int64_t kv_len[8];
    uint8_t opt = fz_u8(&f);
    if ((opt & 1) && B > 0 && B <= 8) {
        for (int64_t b = 0; b < B; ++b)
            kv_len[b] = (int64_t)fz_below(&f, (uint32_t)(Tkv >= 0 && Tkv < 250 ? Tkv + 1 : 2));
        o.kv_len = kv_len;
    }
    if ((opt & 2) && kind != 1) {
        if (!fz_view(&f, ATTN_U8, 4, (const int64_t[]){B, 1, T, Tkv}, &keep))
            return 0;
        o.keep = &keep;
    }
    const attn_sdpa_opts *op = (opt & 4) ? NULL : &o;
    if (!op)
        o.kv_len = NULL, o.keep = NULL, o.causal = ATTN_CAUSAL_NONE;

    /* inputs, for the aliasing rule and the poisoning */
    const attn_view *ins[24] = {&x, cross ? &xkv : NULL, o.keep};
    int nin = 3;
    if (cfg_ok && kind == 0)
        nin = mha_list(&mr, &mp, ins, nin);
    if (cfg_ok && kind == 1)
        nin = ffn_list(&fr, &fp, ins, nin);
    if (cfg_ok && kind == 2) {
        nin = ffn_list(&er.ffn, &ep.ffn, ins, mha_list(&er.mha, &ep.mha, ins, nin));
        if (er.ln_affine)
            ins[nin++] = &ep.ln1_g, ins[nin++] = &ep.ln1_b, ins[nin++] = &ep.ln2_g,
            ins[nin++] = &ep.ln2_b;
    }
    bool ok = cfg_ok && attn_view_check(&out) == ATTN_OK && out.dtype == cdt;
    ok = ok && (kind != 0 || cross || mr.d_kv == C); /* self-attention reads x as x_kv */
    for (int i = 0; i < nin; ++i)
        ok = ok && (!ins[i] || attn_view_check(ins[i]) == ATTN_OK);
    for (int i = 0; ok && i < nin; ++i)
        ok = !ins[i] || ins[i] == o.keep || ins[i]->dtype == cdt;
    for (int i = 0; ok && kind != 1 && op && o.kv_len && i < B; ++i)
        ok = kv_len[i] >= 0 && kv_len[i] <= Tkv;
    bool alias = false;
    for (int i = 0; i < nin; ++i)
        alias = alias || (ins[i] && fz_overlap(&out, ins[i]));
    if (!fz_in_arena(&out) && attn_view_check(&out) == ATTN_OK)
        return 0;
    /* dims beyond INT_MAX must fail unless there is nothing to compute, and may fail anyway */
    bool big_any = B > INT_MAX || T > INT_MAX || Tkv > INT_MAX || C > INT_MAX;
    bool big = big_any && B > 0 && T > 0;
    double rows = (double)(B > 0 ? B : 0) * (double)(T > 0 ? T : 0);
    double width = cfg_ok && kind != 1
                       ? ((double)mr.heads + (double)mr.kv_heads) * (double)mr.d_head
                       : 0.0;
    double cost = rows * ((double)(Tkv > 0 ? Tkv : 0) + (double)C) * (width + 1.0) +
                  rows * (double)C * (double)(fr.d_ff > 0 ? fr.d_ff : 1);
    cost += (double)(B > 0 ? B : 0) * (double)(Tkv > 0 ? Tkv : 0) * ((double)Ckv + 1.0) *
            (width + 1.0); /* the reference projects every key row */
    bool nothing = ok && fz_numel(&out) == 0;
    if (ok && !big && !nothing && cost > 32768)
        return 0;

    size_t need = kind == 0   ? attn_mha_workspace_size(&mc, &x, cross ? &xkv : NULL, op, NULL)
                  : kind == 1 ? attn_ffn_workspace_size(&fc, &x, NULL)
                              : attn_encoder_workspace_size(&ec, &x, op, NULL);
    fz_work w;
    if (!fz_work_get(&f, need, &w))
        return 0;
    fz_fill(&f, cdt);
    /* keep masks from the fill's bytes; the reference reads them as (B, Tq, Tk) bytes */
    uint8_t *kd = NULL;
    if (o.keep && ok) {
        attn_view kk = keep;
        kd = malloc((size_t)(fz_numel(&kk) + 1));
        int64_t idx[4] = {0};
        for (int64_t e = 0; e < fz_numel(&kk); ++e) {
            kd[e] = fz_get(&kk, idx) != 0;
            for (int k = 3; k >= 0; --k) {
                if (++idx[k] < kk.shape[k])
                    break;
                idx[k] = 0;
            }
        }
    }
    double *want = NULL;
    bool expect_ok = ok && !alias && !big;
    if (expect_ok && !nothing) {
        want = malloc(sizeof(double) * (size_t)(fz_numel(&out) + 1));
        if (kind == 0)
            ref_mha(&mr, &mp, &x, cross ? &xkv : &x, op, kd, want);
        else if (kind == 1) {
            double *xd = fz_doubles(&x);
            ref_ffn(&fr, &fp, B * T, xd, want);
            free(xd);
        } else
            ref_encoder(&er, &ep, &x, op, kd, want);
    }
    const attn_view *args[25];
    for (int i = 0; i < nin; ++i)
        args[i] = ins[i];
    args[nin] = &out;
    fz_arm(args, nin + 1);
    attn_status st =
        kind == 0
            ? attn_mha_forward(&mc, &mp, &x, cross ? &xkv : NULL, op, &out, NULL, w.ptr, w.size)
        : kind == 1 ? attn_ffn_forward(&fc, &fp, &x, &out, NULL, w.ptr, w.size)
                    : attn_encoder_forward(&ec, &ep, &x, op, &out, NULL, w.ptr, w.size);
    fz_disarm();
    const attn_view *outs[1] = {&out};
    static const char *names[] = {"attn_mha_forward", "attn_ffn_forward",
                                  "attn_encoder_forward"};
    fz_check_untouched(st, outs, 1, names[kind]);
    bool any_packed = packed(&out);
    for (int i = 0; i < nin; ++i)
        any_packed = any_packed || packed(ins[i]);
    bool may_refuse = st == ATTN_ESTRIDE || (st == ATTN_EWORKSPACE && w.short_by_one) ||
                      (st == ATTN_EWORKSPACE && any_packed && w.ptr) ||
                      (st == ATTN_ERANGE && big_any);
    if ((st == ATTN_OK && !(ok && !big && !alias)) ||
        (st != ATTN_OK && expect_ok && !may_refuse)) {
        fprintf(stderr, "cfg_ok %d big %d B %lld T %lld Tk %lld C %lld kv_len %d\n", cfg_ok,
                big, (long long)B, (long long)T, (long long)Tk, (long long)C, o.kv_len != NULL);
        fz_print("x", &x), fz_print("out", &out);
        for (int i = 0; i < nin; ++i)
            if (ins[i])
                fz_print("in", ins[i]);
    }
    if (st == ATTN_OK) {
        FZ_REQUIRE(ok && !big, "%s accepted an invalid call", names[kind]);
        FZ_REQUIRE(!alias, "%s accepted an output that aliases an input", names[kind]);
        FZ_REQUIRE(!w.short_by_one, "%s accepted a workspace one byte short", names[kind]);
        double tol = cdt == ATTN_F64 ? 1e-9 : 2e-3;
        if (want)
            fz_check_close(&out, want, tol, tol, names[kind]);
    } else if (expect_ok) {
        FZ_REQUIRE(may_refuse, "%s refused a valid call: %s", names[kind],
                   attn_status_name(st));
    }
    free(want);
    free(kd);
    fz_work_free(&w);
    return 0;
}
