/* SPDX-License-Identifier: MIT */
/* RoPE rotation of x (..., T, D) in place, for one dtype T (see tmpl/dtype_on.h). */

/*
 * For every position t the angles of one chunk of pairs are computed once in
 * double and applied to every leading index (batch, head). sign = -1 rotates
 * by -theta (the backward).
 */
static void SFX(rope)(const rope_plan *rp, double sign, attn_view *x) {
    enum { CHUNK = 128 };
    T *xp = x->data;
    int64_t half = rp->d / 2, sd = rp->sd;
    for (int64_t t = 0; t < rp->t; ++t) {
        double pos = (double)(rp->offset + t);
        for (int64_t c0 = 0; c0 < half; c0 += CHUNK) {
            int64_t len = half - c0 < CHUNK ? half - c0 : CHUNK;
            double cs[CHUNK], sn[CHUNK];
            for (int64_t i = 0; i < len; ++i) {
                double ang = pos * rope_inv_freq(rp, c0 + i);
                cs[i] = cos(ang);
                sn[i] = sign * sin(ang);
            }
            for (int64_t l = 0; l < rp->nlead; ++l) {
                T *row = xp + rope_lead_offset(rp, l) + t * rp->st;
                /* pair i: (i, i + D/2) or (2i, 2i + 1) */
                int64_t sa = rp->half_style ? sd : 2 * sd,
                        off_b = rp->half_style ? half * sd : sd;
                T *a = row + c0 * sa;
                for (int64_t i = 0; i < len; ++i) {
                    double va = a[i * sa], vb = a[i * sa + off_b];
                    a[i * sa] = (T)(va * cs[i] - vb * sn[i]);
                    a[i * sa + off_b] = (T)(va * sn[i] + vb * cs[i]);
                }
            }
        }
    }
}
