/* SPDX-License-Identifier: MIT */
/* Per-dtype bodies of attn_ring_sdpa (src/ring/ring.c): the lse merge and the output fills. */

/* Element (b, h, i, 0) of a 4-D view, or (b, h, i) of a 3-D one, as a T pointer. Integer
   address arithmetic: an empty view may have data NULL (NULL + 0 is UB; fuzz_ring). */
static inline T *SFX(row)(const attn_view *v, int64_t b, int64_t h, int64_t i) {
    int64_t off = (b * v->stride[0] + h * v->stride[1] + i * v->stride[2]) * (int64_t)sizeof(T);
    return (T *)((uintptr_t)v->data + (uintptr_t)off);
}

/* out (B, H, T, Dv) := 0: the result of a row that has seen no key yet. */
static void SFX(zero_out)(const attn_view *out) {
    int64_t sd = out->stride[3];
    for (int64_t b = 0; b < out->shape[0]; ++b)
        for (int64_t h = 0; h < out->shape[1]; ++h)
            for (int64_t i = 0; i < out->shape[2]; ++i) {
                T *o = SFX(row)(out, b, h, i);
                for (int64_t d = 0; d < out->shape[3]; ++d)
                    o[d * sd] = 0;
            }
}

/*
 * Fold one partial result into the running one, for the query rows
 * [q0, q0 + nq) of out (B, H, T, Dv), running statistics (rm, rl) (B, H, T):
 * piece out p (B, H, nq, Dv) and its row max pm and sum pl (B, H, nq), all in
 * double but out and p, row by row through attn__softmax_merge_row
 * (kernels/lse_merge.h), exact at any logit magnitude: no lse is formed
 * until the end.
 */
static void SFX(merge)(const attn_view *out, double *rm, double *rl, const T *p,
                       const double *pm, const double *pl, int64_t q0, int64_t nq) {
    int64_t B = out->shape[0], H = out->shape[1], Tr = out->shape[2], Dv = out->shape[3];
    int64_t sd = out->stride[3];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < nq; ++i) {
                int64_t pr = (b * H + h) * nq + i, at = (b * H + h) * Tr + q0 + i;
                SFX(attn__softmax_merge_row)
                (SFX(row)(out, b, h, q0 + i), sd, &rm[at], &rl[at], p + pr * Dv, pm[pr], pl[pr],
                 Dv);
            }
}

/* lse (B, H, T) := m + log l (a row that saw no key: the empty value; NaN propagates). */
static void SFX(store_lse)(const attn_view *lse, const double *rm, const double *rl) {
    int64_t H = lse->shape[1], Tr = lse->shape[2];
    for (int64_t b = 0; b < lse->shape[0]; ++b)
        for (int64_t h = 0; h < H; ++h) {
            T *o = SFX(row)(lse, b, h, 0);
            for (int64_t i = 0; i < Tr; ++i) {
                int64_t at = (b * H + h) * Tr + i;
                double l = rl[at];
                o[i * lse->stride[2]] = (T)(l == 0 ? ATTN__SDPA_LSE_EMPTY : rm[at] + log(l));
            }
        }
}

/*
 * The sinks at the end of the forward, on the running (m, l) (B, H, T) and out:
 * with M = max(m, sink_h), a = l e^{m - M}, c = e^{sink_h - M}: out *= a / (a + c),
 * (m, l) := (M, a + c). A row that saw no key keeps out 0 and gets (sink_h, 1).
 */
static void SFX(sink_rows)(const attn_view *out, double *rm, double *rl,
                           const attn_view *sinks) {
    int64_t H = out->shape[1], Tr = out->shape[2], Dv = out->shape[3], sd = out->stride[3];
    for (int64_t b = 0; b < out->shape[0]; ++b)
        for (int64_t h = 0; h < H; ++h) {
            double sink = (double)*(const T *)attn__elem(sinks, &h);
            for (int64_t i = 0; i < Tr; ++i) {
                int64_t at = (b * H + h) * Tr + i;
                double m = rm[at], l = rl[at];
                if (l == 0) {
                    rm[at] = sink, rl[at] = 1;
                    continue;
                }
                double M = m > sink ? m : sink, a = l * exp(m - M), e = exp(sink - M);
                T *o = SFX(row)(out, b, h, i);
                for (int64_t d = 0; d < Dv; ++d)
                    o[d * sd] = (T)((double)o[d * sd] * (a / (a + e)));
                rm[at] = M, rl[at] = a + e;
            }
        }
}

/*
 * Row (b, h, i)'s sink share e^{sink_h - lse_bhi} (the backward), and this rank's part of
 * dL/dsinks: part[h] -= e^{sink_h - lse} (dout . out) over the local rows.
 */
static double SFX(sink_share)(const attn_view *sinks, const attn_view *lse, int64_t b,
                              int64_t h, int64_t i) {
    double sink = (double)*(const T *)attn__elem(sinks, &h);
    return exp(sink - (double)*SFX(row)(lse, b, h, i));
}
static void SFX(dsinks_part)(const attn_view *sinks, const attn_view *lse, const attn_view *out,
                             const attn_view *dout, double *part) {
    int64_t H = out->shape[1], Dv = out->shape[3];
    for (int64_t h = 0; h < H; ++h)
        part[h] = 0;
    for (int64_t b = 0; b < out->shape[0]; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < out->shape[2]; ++i) {
                const T *o = SFX(row)(out, b, h, i), *g = SFX(row)(dout, b, h, i);
                double delta = 0;
                for (int64_t d = 0; d < Dv; ++d)
                    delta += (double)o[d * out->stride[3]] * (double)g[d * dout->stride[3]];
                part[h] -= SFX(sink_share)(sinks, lse, b, h, i) * delta;
            }
}
