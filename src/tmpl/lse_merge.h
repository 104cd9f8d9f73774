/* SPDX-License-Identifier: MIT */
/* Per-dtype body of the lse merge (kernels/lse_merge.c; tmpl/dtype_on.h sets T, SFX). */

void SFX(attn__lse_merge_row)(T *o, int64_t so, double *run, const T *p, double l, int64_t Dv) {
    if (l <= 0.5 * ATTN__SDPA_LSE_EMPTY)
        return;
    if (*run <= 0.5 * ATTN__SDPA_LSE_EMPTY) {
        for (int64_t d = 0; d < Dv; ++d)
            o[d * so] = p[d];
        *run = l;
        return;
    }
    double m = *run > l ? *run : l, a = exp(*run - m), c = exp(l - m), s = a + c;
    a /= s;
    c /= s;
    for (int64_t d = 0; d < Dv; ++d)
        o[d * so] = (T)(a * (double)o[d * so] + c * (double)p[d]);
    *run = m + log(s);
}
