/* SPDX-License-Identifier: MIT */
/* Naive layer references: the seed's formulas as loops, in double. */
#include "ref_layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_l_linear(int64_t n, int64_t in, int64_t out, const double *x, const double *w,
                const double *b, double *y) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < out; ++j) {
            double s = b ? b[j] : 0.0;
            for (int64_t k = 0; k < in; ++k)
                s += x[i * in + k] * w[k * out + j];
            y[i * out + j] = s;
        }
}

void ref_l_mha(const ref_l_mha_args *a, double *out, double *weights) {
    int64_t B = a->B, Tq = a->Tq, Tk = a->Tk, H = a->H, D = a->D, G = a->H / a->Hkv;
    int64_t HD = H * D, KD = a->Hkv * D;
    double *q = malloc(sizeof(double) * B * Tq * HD), *k = malloc(sizeof(double) * B * Tk * KD);
    double *v = malloc(sizeof(double) * B * Tk * KD), *o = malloc(sizeof(double) * B * Tq * HD);
    double *s = malloc(sizeof(double) * (Tk + 1));
    ref_l_linear(B * Tq, a->C, HD, a->xq, a->wq, a->bq, q);
    ref_l_linear(B * Tk, a->Ckv, KD, a->xkv, a->wk, a->bk, k);
    ref_l_linear(B * Tk, a->Ckv, KD, a->xkv, a->wv, a->bv, v);
    double scale = a->scale != 0 ? a->scale : 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            int64_t hk = h / G;
            for (int64_t i = 0; i < Tq; ++i) {
                double m = -INFINITY;
                for (int64_t j = 0; j < Tk; ++j) {
                    bool ok = !a->kv_len || j < a->kv_len[b];
                    if (a->keep && !a->keep[(b * Tq + i) * Tk + j]) ok = false;
                    if (a->causal == 1 && j > i) ok = false;
                    if (a->causal == 2 && j > i + Tk - Tq) ok = false;
                    double d = 0;
                    for (int64_t e = 0; e < D; ++e)
                        d += q[(b * Tq + i) * HD + h * D + e] * k[(b * Tk + j) * KD + hk * D + e];
                    s[j] = ok ? d * scale : -INFINITY;
                    if (s[j] > m) m = s[j];
                }
                double z = 0;
                for (int64_t j = 0; j < Tk; ++j) {
                    s[j] = m == -INFINITY ? 0 : exp(s[j] - m);
                    z += s[j];
                }
                for (int64_t j = 0; j < Tk; ++j) {
                    s[j] = z > 0 ? s[j] / z : 0;
                    if (weights) weights[((b * H + h) * Tq + i) * Tk + j] = s[j];
                }
                for (int64_t e = 0; e < D; ++e) {
                    double acc = 0;
                    for (int64_t j = 0; j < Tk; ++j)
                        acc += s[j] * v[(b * Tk + j) * KD + hk * D + e];
                    o[(b * Tq + i) * HD + h * D + e] = acc;
                }
            }
        }
    ref_l_linear(B * Tq, HD, a->C, o, a->wo, a->bo, out);
    free(q); free(k); free(v); free(o); free(s);
}

void ref_l_layernorm(int64_t n, int64_t C, double eps, const double *x, const double *g,
                   const double *b, double *y) {
    for (int64_t i = 0; i < n; ++i) {
        double m = 0, var = 0;
        for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
        m /= (double)C;
        for (int64_t c = 0; c < C; ++c) var += (x[i * C + c] - m) * (x[i * C + c] - m);
        var /= (double)C;
        for (int64_t c = 0; c < C; ++c) {
            double t = (x[i * C + c] - m) / sqrt(var + eps);
            y[i * C + c] = t * (g ? g[c] : 1.0) + (b ? b[c] : 0.0);
        }
    }
}

double ref_l_act(int act, double x) {
    if (act == 0) return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    if (act == 1) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    return x > 0 ? x : 0;
}

void ref_l_ffn(int64_t n, int64_t C, int64_t F, int act, const double *x, const double *w1,
             const double *b1, const double *w2, const double *b2, double *y) {
    double *h = malloc(sizeof(double) * n * F);
    ref_l_linear(n, C, F, x, w1, b1, h);
    for (int64_t i = 0; i < n * F; ++i) h[i] = ref_l_act(act, h[i]);
    ref_l_linear(n, F, C, h, w2, b2, y);
    free(h);
}
