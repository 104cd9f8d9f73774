/* SPDX-License-Identifier: MIT */
/* Per-dtype bodies of attn_ring_sdpa (src/ring.c): the lse merge and the output fills. */

/* Element (b, h, i, 0) of a 4-D view, or (b, h, i) of a 3-D one, as a T pointer. */
static inline T *SFX(row)(const attn_view *v, int64_t b, int64_t h, int64_t i) {
    return (T *)v->data + b * v->stride[0] + h * v->stride[1] + i * v->stride[2];
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
 * [q0, q0 + nq) of out (B, H, T, Dv), run (B, H, T) the running lse:
 * piece out p (B, H, nq, Dv) and lse l (B, H, nq), both contiguous. Row by
 * row through the lse merge the decode kernel's splits use
 * (kernels/lse_merge.h): a piece row that saw no key is skipped, the first
 * real piece of a row is copied exactly.
 */
static void SFX(merge)(const attn_view *out, double *run, const T *p, const T *lp, int64_t q0,
                       int64_t nq) {
    int64_t B = out->shape[0], H = out->shape[1], Tr = out->shape[2], Dv = out->shape[3];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < nq; ++i) {
                int64_t pr = (b * H + h) * nq + i;
                SFX(attn__lse_merge_row)(SFX(row)(out, b, h, q0 + i), out->stride[3],
                                         run + (b * H + h) * Tr + q0 + i, p + pr * Dv, lp[pr],
                                         Dv);
            }
}

/* lse (B, H, T) := run, the merged lse (rows that saw no key keep the empty value). */
static void SFX(store_lse)(const attn_view *lse, const double *run) {
    int64_t H = lse->shape[1], Tr = lse->shape[2];
    for (int64_t b = 0; b < lse->shape[0]; ++b)
        for (int64_t h = 0; h < H; ++h) {
            T *o = SFX(row)(lse, b, h, 0);
            for (int64_t i = 0; i < Tr; ++i)
                o[i * lse->stride[2]] = (T)run[(b * H + h) * Tr + i];
        }
}
