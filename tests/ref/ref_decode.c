/* SPDX-License-Identifier: MIT */
/* Naive decoding references: attention with absolute positions and RoPE, the decoder block. */
#include "ref_decode.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_layers.h"

/* Rotate row r (D wide) at position pos: each pair as z = a + ib times e^{i p theta_i}. */
static void rope_row(double *r, int64_t D, double pos, bool half, double base) {
    for (int64_t i = 0; i < D / 2; ++i) {
        int64_t ja = half ? i : 2 * i, jb = half ? i + D / 2 : 2 * i + 1;
        double complex z = r[ja] + I * r[jb];
        z *= cexp(I * pos * pow(base, -2.0 * (double)i / (double)D));
        r[ja] = creal(z);
        r[jb] = cimag(z);
    }
}

void ref_d_attention(const ref_d_attn *a, double *out) {
    int64_t Tq = a->Tq, Tk = a->Tk, H = a->H, D = a->D, G = a->H / a->Hkv;
    int64_t HD = H * D, KD = a->Hkv * D;
    double *q = malloc(sizeof(double) * (size_t)(Tq * HD + 1));
    double *k = malloc(sizeof(double) * (size_t)(Tk * KD + 1));
    double *v = malloc(sizeof(double) * (size_t)(Tk * KD + 1));
    double *o = calloc((size_t)(Tq * HD + 1), sizeof(double));
    double *s = malloc(sizeof(double) * (size_t)(Tk + 1));
    ref_l_linear(Tq, a->C, HD, a->xq, a->wq, a->bq, q);
    ref_l_linear(Tk, a->Ckv, KD, a->xkv, a->wk, a->bk, k);
    ref_l_linear(Tk, a->Ckv, KD, a->xkv, a->wv, a->bv, v);
    double base = a->rope_base != 0 ? a->rope_base : 10000.0;
    if (a->rope) {
        for (int64_t i = 0; i < Tq; ++i)
            for (int64_t h = 0; h < H; ++h)
                rope_row(q + i * HD + h * D, D, (double)(a->qpos0 + i), a->rope_half, base);
        for (int64_t j = 0; j < Tk; ++j)
            for (int64_t h = 0; h < a->Hkv; ++h)
                rope_row(k + j * KD + h * D, D, (double)j, a->rope_half, base);
    }
    double scale = a->scale != 0 ? a->scale : 1.0 / sqrt((double)D);
    for (int64_t h = 0; h < H; ++h) {
        int64_t hk = h / G;
        for (int64_t i = 0; i < Tq; ++i) {
            double m = -INFINITY;
            for (int64_t j = 0; j < Tk; ++j) {
                bool ok = j < a->kv_len && (!a->causal || j <= a->qpos0 + i) &&
                          (!a->keep || a->keep[i * Tk + j]);
                double d = 0;
                for (int64_t e = 0; e < D; ++e)
                    d += q[i * HD + h * D + e] * k[j * KD + hk * D + e];
                s[j] = ok ? d * scale : -INFINITY;
                if (s[j] > m)
                    m = s[j];
            }
            double z = 0;
            for (int64_t j = 0; j < Tk; ++j) {
                s[j] = m == -INFINITY ? 0 : exp(s[j] - m);
                z += s[j];
            }
            for (int64_t e = 0; e < D; ++e) {
                double acc = 0;
                for (int64_t j = 0; j < Tk; ++j)
                    acc += s[j] * v[j * KD + hk * D + e];
                o[i * HD + h * D + e] = z > 0 ? acc / z : 0;
            }
        }
    }
    ref_l_linear(Tq, HD, a->C, o, a->wo, a->bo, out);
    free(q);
    free(k);
    free(v);
    free(o);
    free(s);
}

static void add_to(int64_t n, const double *a, const double *b, double *y) {
    for (int64_t i = 0; i < n; ++i)
        y[i] = a[i] + b[i];
}

void ref_d_decoder_forward(const ref_d_decoder *a, const double *x, const double *m,
                           double *out) {
    int64_t T = a->T, C = a->C, n = T * C;
    double *h = malloc(sizeof(double) * (size_t)n), *r = malloc(sizeof(double) * (size_t)n);
    double *t = malloc(sizeof(double) * (size_t)n), *cur = malloc(sizeof(double) * (size_t)n);
    memcpy(cur, x, sizeof(double) * (size_t)n);
    for (int blk = 0; blk < 3; ++blk) {
        if (blk == 1 && !a->cross)
            continue;
        /* the sub-block's input: LN(cur) before (pre-norm), cur itself after (post-norm) */
        const double *in = cur;
        if (a->pre_norm) {
            ref_l_layernorm(T, C, a->eps, cur, a->ln_g[blk], a->ln_b[blk], t);
            in = t;
        }
        if (blk == 0) {
            ref_d_attn s = {T,
                            T,
                            C,
                            C,
                            a->H,
                            a->Hkv,
                            a->D,
                            in,
                            in,
                            a->s[0],
                            a->s[1],
                            a->s[2],
                            a->s[3],
                            a->s[4],
                            a->s[5],
                            a->s[6],
                            a->s[7],
                            true,
                            0,
                            a->tgt_len,
                            a->rope,
                            a->rope_half,
                            a->rope_base,
                            NULL,
                            0};
            ref_d_attention(&s, h);
        } else if (blk == 1) {
            ref_d_attn c = {T,       a->S,    C,       a->Cm,   a->Hc,   a->Hckv,    a->Dc,
                            in,      m,       a->c[0], a->c[1], a->c[2], a->c[3],    a->c[4],
                            a->c[5], a->c[6], a->c[7], false,   0,       a->mem_len, false,
                            false,   0,       NULL,    0};
            ref_d_attention(&c, h);
        } else {
            ref_l_ffn(T, C, a->F, a->act, in, a->w1, a->b1, a->w2, a->b2, h);
        }
        add_to(n, cur, h, r);
        if (a->pre_norm)
            memcpy(cur, r, sizeof(double) * (size_t)n);
        else
            ref_l_layernorm(T, C, a->eps, r, a->ln_g[blk], a->ln_b[blk], cur);
    }
    memcpy(out, cur, sizeof(double) * (size_t)n);
    free(h);
    free(r);
    free(t);
    free(cur);
}
