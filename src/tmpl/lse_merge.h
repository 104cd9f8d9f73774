/* SPDX-License-Identifier: MIT */
/* Per-dtype body of the softmax merge (kernels/lse_merge.c; tmpl/dtype_on.h sets T, SFX). */

void SFX(attn__softmax_merge_row)(T *o, int64_t so, double *rm, double *rl, const T *p,
                                  double m, double l, int64_t Dv) {
    if (l == 0) /* the piece saw no key */
        return;
    if (*rl == 0) { /* the first real piece: copied exactly */
        for (int64_t d = 0; d < Dv; ++d)
            o[d * so] = p[d];
        *rm = m;
        *rl = l;
        return;
    }
    double M = *rm > m ? *rm : m, a = *rl * exp(*rm - M), c = l * exp(m - M), s = a + c;
    for (int64_t d = 0; d < Dv; ++d)
        o[d * so] = (T)((a * (double)o[d * so] + c * (double)p[d]) / s);
    *rm = M;
    *rl = s;
}
