/* SPDX-License-Identifier: MIT */
/* The masking rules every attention path shares (tiled, materialized, decode; ring through
 * attn_sdpa's runs), per dtype: included by tmpl/sdpa.h and tmpl/sdpa_decode.h. */

/*
 * s := cap tanh(s / cap) on s[0..n). f32: tanh(x) = 1 - 2 / (e^{2x} + 1) through
 * the vectorized exp (relative error ~1e-7: an absolute error of ~1e-7 cap in the
 * capped score; e^{2x} = inf gives cap, 0 gives -cap, NaN stays NaN); f64: libm.
 */
static inline void SFX(attn_softcap)(T *s, int64_t n, double cap) {
#if T_IS_F32
    float c = (float)cap, k = 2.0f / c;
    for (int64_t i = 0; i < n; ++i)
        s[i] *= k;
    (void)attn__vexp_sum_f32(s, n, 0.0f);
    for (int64_t i = 0; i < n; ++i)
        s[i] = c - 2.0f * c / (s[i] + 1.0f);
#else
    for (int64_t i = 0; i < n; ++i)
        s[i] = cap * tanh(s[i] / cap);
#endif
}

/* s[c] -= slope |dist0 - c| on s[0..n) (n < 2^31: a tile or a row the BLAS took). */
static inline void SFX(attn_alibi)(T *s, int64_t n, double slope, int64_t dist0) {
    T m = (T)slope, base = (T)dist0;
    for (int c = 0; c < (int)n; ++c) {
        T d = base - (T)c;
        s[c] -= m * (d < 0 ? -d : d);
    }
}

/*
 * The scores s[0..n) of one query row, in the order docs/numerics.md gives:
 * the transforms xf (NULL: none; softcap, then the ALiBi term), then the
 * bias, except that a -inf bias masks whatever the score (a NaN or +inf score
 * it hides stays hidden: -inf, never NaN; "Masks, -inf and NaN"); then
 * s = -inf where keep == 0. bias, keep: the row's first element and its
 * stride in elements, or NULL when absent. Unit strides take the vectorized
 * loops.
 */
static inline void SFX(attn_mask_scores)(T *s, int64_t n, const attn__score_xf *xf,
                                         const T *bias, int64_t sb, const uint8_t *keep,
                                         int64_t sk) {
    if (xf && xf->softcap > 0)
        SFX(attn_softcap)(s, n, xf->softcap);
    if (xf && xf->slope != 0)
        SFX(attn_alibi)(s, n, xf->slope, xf->dist0);
    if (bias) {
        if (sb == 1)
            SFX(attn__sdpa_bias_row)(s, bias, n);
        else
            for (int64_t c = 0; c < n; ++c) {
                T bv = bias[c * sb];
                s[c] = bv == (T)-INFINITY ? bv : s[c] + bv;
            }
    }
    if (keep) {
        if (sk == 1)
            SFX(attn__sdpa_keep_row)(s, keep, n);
        else
            for (int64_t c = 0; c < n; ++c)
                s[c] = keep[c * sk] ? s[c] : (T)-INFINITY;
    }
}

/*
 * A NaN among the n masked scores of a row whose maximum is -inf (the vector max
 * may skip NaN): the row's sum must become NaN, never 0, so that an unmasked NaN
 * reaches the output in every path. Returns the NaN, or 0 when there is none.
 */
static inline T SFX(attn_mask_nan)(const T *s, int64_t n) {
    for (int64_t c = 0; c < n; ++c)
        if (s[c] != s[c])
            return s[c];
    return 0;
}
