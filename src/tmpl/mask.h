/* SPDX-License-Identifier: MIT */
/* The masking rules every attention path shares (tiled, materialized, decode; ring through
 * attn_sdpa's runs), per dtype: included by tmpl/sdpa.h and tmpl/sdpa_decode.h. */

#if T_IS_F32
#define MASK_TANH tanhf
#else
#define MASK_TANH tanh
#endif

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
    if (xf && xf->softcap > 0) {
        T cap = (T)xf->softcap;
        for (int64_t c = 0; c < n; ++c)
            s[c] = cap * MASK_TANH(s[c] / cap);
    }
    if (xf && xf->slope != 0)
        for (int64_t c = 0; c < n; ++c) {
            int64_t d = xf->dist0 - c;
            s[c] -= (T)(xf->slope * (double)(d < 0 ? -d : d));
        }
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

#undef MASK_TANH
