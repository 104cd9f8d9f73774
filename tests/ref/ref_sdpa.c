/* SPDX-License-Identifier: MIT */
/* Naive attention forward and backward in double: plain loops, no library kernels. */
#include <math.h>
#include <stdlib.h>

#include "ref.h"

/* Element of a view at (i0..i3) with NumPy broadcasting against (B, H, Tq, Tk). */
static double get4(const attn_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t idx4[4] = {i0, i1, i2, i3}, off = 0;
    for (int d = 0; d < v->ndim; ++d) {
        int64_t i = idx4[4 - v->ndim + d];
        if (v->shape[d] > 1)
            off += i * v->stride[d];
    }
    if (v->dtype == ATTN_F64)
        return ((const double *)v->data)[off];
    if (v->dtype == ATTN_F32)
        return ((const float *)v->data)[off];
    return ((const unsigned char *)v->data)[off];
}

static double *at(const attn_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t idx4[4] = {i0, i1, i2, i3}, off = 0;
    for (int d = 0; d < v->ndim; ++d)
        off += idx4[d] * v->stride[d];
    return (double *)v->data + off;
}

/* Whether query i of (b, h) may attend key j. */
static int visible(const attn_sdpa_opts *o, int64_t b, int64_t h, int64_t i, int64_t j,
                   int64_t Tq, int64_t Tk) {
    if (o->kv_len && j >= o->kv_len[b])
        return 0;
    if (o->causal == ATTN_CAUSAL_TOP_LEFT && j > i)
        return 0;
    if (o->causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + (Tk - Tq))
        return 0;
    if (o->keep && get4(o->keep, b, h, i, j) == 0)
        return 0;
    return 1;
}

/* p (Tk) := softmax row of (b, h, i); returns 0 when no key is visible. */
static int prob_row(const attn_view *q, const attn_view *k, const attn_sdpa_opts *o, int64_t b,
                    int64_t h, int64_t i, double *s, double *p, double *lse) {
    int64_t H = q->shape[1], Tq = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], Tk = k->shape[2], hk = h / (H / Hkv);
    double scale = o->scale != 0 ? o->scale : D > 0 ? 1.0 / sqrt((double)D) : 1.0; /* D = 0: any */
    double mx = -INFINITY;
    int nan = 0;
    for (int64_t j = 0; j < Tk; ++j) {
        p[j] = 0;
        if (!visible(o, b, h, i, j, Tq, Tk)) {
            s[j] = -INFINITY;
            continue;
        }
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
            dot += get4(q, b, h, i, d) * get4(k, b, hk, j, d);
        s[j] = scale * dot + (o->bias ? get4(o->bias, b, h, i, j) : 0.0);
        nan = nan || isnan(s[j]);
        if (s[j] > mx)
            mx = s[j];
    }
    if (nan) { /* a NaN score on a visible key poisons its row */
        for (int64_t j = 0; j < Tk; ++j)
            p[j] = s[j] == -INFINITY ? 0.0 : NAN;
        *lse = NAN;
        return 1;
    }
    if (mx == -INFINITY) {
        *lse = -1e30;
        return 0;
    }
    double l = 0;
    for (int64_t j = 0; j < Tk; ++j)
        if (s[j] > -INFINITY)
            l += exp(s[j] - mx);
    for (int64_t j = 0; j < Tk; ++j)
        p[j] = s[j] > -INFINITY ? exp(s[j] - mx) / l : 0.0;
    *lse = mx + log(l);
    return 1;
}

void ref_sdpa(const attn_view *q, const attn_view *k, const attn_view *v,
              const attn_sdpa_opts *opts, const attn_view *out, const attn_view *weights,
              const attn_view *lse) {
    attn_sdpa_opts zero = {0};
    const attn_sdpa_opts *o = opts ? opts : &zero;
    int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2];
    int64_t Hkv = k->shape[1], Tk = k->shape[2], Dv = v->shape[3];
    double *s = malloc(sizeof(double) * (size_t)(Tk + 1));
    double *p = malloc(sizeof(double) * (size_t)(Tk + 1));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Tq; ++i) {
                double l;
                prob_row(q, k, o, b, h, i, s, p, &l);
                if (lse)
                    *at(lse, b, h, i, 0) = l;
                if (weights)
                    for (int64_t j = 0; j < Tk; ++j)
                        *at(weights, b, h, i, j) = p[j];
                if (out) /* masked keys never contribute (a NaN stored there included) */
                    for (int64_t d = 0; d < Dv; ++d) {
                        double acc = 0;
                        for (int64_t j = 0; j < Tk; ++j)
                            if (s[j] > -INFINITY || isnan(s[j]))
                                acc += p[j] * get4(v, b, h / (H / Hkv), j, d);
                        *at(out, b, h, i, d) = acc;
                    }
            }
    free(s);
    free(p);
}

void ref_sdpa_backward(const attn_view *q, const attn_view *k, const attn_view *v,
                       const attn_sdpa_opts *opts, const attn_view *dout, const attn_view *dq,
                       const attn_view *dk, const attn_view *dv) {
    attn_sdpa_opts zero = {0};
    const attn_sdpa_opts *o = opts ? opts : &zero;
    int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], Tk = k->shape[2], Dv = v->shape[3], G = H / Hkv;
    double scale = o->scale != 0 ? o->scale : D > 0 ? 1.0 / sqrt((double)D) : 1.0; /* D = 0: any */
    const attn_view *outs[3] = {dq, dk, dv};
    for (int n = 0; n < 3; ++n)
        if (outs[n]) {
            int64_t cnt = 1;
            for (int d = 0; d < 4; ++d)
                cnt *= outs[n]->shape[d];
            for (int64_t e = 0; e < cnt; ++e)
                ((double *)outs[n]->data)[e] = 0;
        }
    double *s = malloc(sizeof(double) * (size_t)(Tk + 1));
    double *p = malloc(sizeof(double) * (size_t)(Tk + 1));
    double *dp = malloc(sizeof(double) * (size_t)(Tk + 1));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Tq; ++i) {
                double l;
                if (!prob_row(q, k, o, b, h, i, s, p, &l))
                    continue; /* a row with no key contributes nothing (NaN in it included) */
                double rowdot = 0;
                for (int64_t j = 0; j < Tk; ++j) {
                    dp[j] = 0;
                    if (s[j] == -INFINITY)
                        continue; /* masked: never contributes */
                    for (int64_t d = 0; d < Dv; ++d)
                        dp[j] += get4(dout, b, h, i, d) * get4(v, b, h / G, j, d);
                    rowdot += p[j] * dp[j];
                }
                for (int64_t j = 0; j < Tk; ++j) {
                    if (s[j] == -INFINITY)
                        continue;
                    double ds = p[j] * (dp[j] - rowdot);
                    if (dv)
                        for (int64_t d = 0; d < Dv; ++d)
                            *at(dv, b, h / G, j, d) += p[j] * get4(dout, b, h, i, d);
                    if (dq)
                        for (int64_t d = 0; d < D; ++d)
                            *at(dq, b, h, i, d) += scale * ds * get4(k, b, h / G, j, d);
                    if (dk)
                        for (int64_t d = 0; d < D; ++d)
                            *at(dk, b, h / G, j, d) += scale * ds * get4(q, b, h, i, d);
                }
            }
    free(s);
    free(p);
    free(dp);
}
