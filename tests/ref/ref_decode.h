/* SPDX-License-Identifier: MIT */
/* Naive double references for decoding (tests only): one sequence at a time, plain loops. */
#ifndef ATTN_REF_DECODE_H
#define ATTN_REF_DECODE_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Multi-head attention of one sequence. Weights (in, out) row-major, biases
 * may be NULL. xq (Tq, C), xkv (Tk, Ckv). Query i sits at absolute position
 * qpos0 + i, key j at position j. A key is visible iff j < kv_len and, when
 * causal, j <= qpos0 + i, and keep[i * Tk + j] != 0 when keep is given.
 * rope: q rows rotated at their positions, k rows at theirs (RoFormer's
 * complex-number form: interleaved pairs (2i, 2i+1), or (i, i + D/2) when
 * rope_half). A row with no visible key reads 0.
 */
typedef struct ref_d_attn {
    int64_t Tq, Tk, C, Ckv, H, Hkv, D;
    const double *xq, *xkv;
    const double *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;
    bool causal;
    int64_t qpos0, kv_len;
    bool rope, rope_half;
    double rope_base; /* 0 -> 10000 */
    const uint8_t *keep;
    double scale; /* 0 -> 1/sqrt(D) */
} ref_d_attn;

/* out (Tq, C) */
void ref_d_attention(const ref_d_attn *a, double *out);

/*
 * The decoder block of one sequence, nn.TransformerDecoderLayer's formulas
 * (pre- or post-norm), with a causal self-attention over x (T, C) whose keys
 * are limited to tgt_len, cross-attention over m (S, Cm) limited to mem_len
 * (cross false: no cross-attention, ln2 unused), LayerNorm with gamma/beta
 * (NULL: none), FFN act (0 gelu tanh, 1 gelu erf, 2 relu). Weights (in, out).
 */
typedef struct ref_d_decoder {
    int64_t T, S, C, Cm, H, Hkv, D, Hc, Hckv, Dc, F;
    bool pre_norm, cross;
    int act;
    double eps;
    bool rope, rope_half;
    double rope_base;
    int64_t tgt_len, mem_len;
    const double *ln_g[3], *ln_b[3];
    const double *s[8]; /* wq wk wv wo bq bk bv bo */
    const double *c[8];
    const double *w1, *b1, *w2, *b2;
} ref_d_decoder;

/* out (T, C) */
void ref_d_decoder_forward(const ref_d_decoder *a, const double *x, const double *m,
                           double *out);

#endif
