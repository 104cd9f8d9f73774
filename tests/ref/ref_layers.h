/* SPDX-License-Identifier: MIT */
/* Naive double references for the layers (tests only): plain loops on contiguous arrays. */
#ifndef ATTN_REF_LAYERS_H
#define ATTN_REF_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

/* Weights are (in, out) row-major; biases may be NULL. keep (B, Tq, Tk) or NULL;
   kv_len (B) or NULL; causal 0 none, 1 top-left, 2 bottom-right. */
typedef struct ref_l_mha_args {
    int64_t B, Tq, Tk, C, Ckv, H, Hkv, D;
    const double *xq, *xkv;
    const double *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;
    int causal;
    const uint8_t *keep;
    const int64_t *kv_len;
    double scale; /* 0 -> 1/sqrt(D) */
} ref_l_mha_args;

/* out (B, Tq, C); optionally attention weights (B, H, Tq, Tk) */
void ref_l_mha(const ref_l_mha_args *a, double *out, double *weights);

/* y = LN(x) over the last dim C, rows n; gamma/beta may be NULL */
void ref_l_layernorm(int64_t n, int64_t C, double eps, const double *x, const double *g,
                   const double *b, double *y);

/* act: 0 gelu tanh, 1 gelu erf, 2 relu */
double ref_l_act(int act, double x);

/* y = act(x W1 + b1) W2 + b2, rows n */
void ref_l_ffn(int64_t n, int64_t C, int64_t F, int act, const double *x, const double *w1,
             const double *b1, const double *w2, const double *b2, double *y);

/* y (n, out) = x (n, in) W (in, out) + b */
void ref_l_linear(int64_t n, int64_t in, int64_t out, const double *x, const double *w,
                const double *b, double *y);

#endif
