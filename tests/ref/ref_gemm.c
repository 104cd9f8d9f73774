/* SPDX-License-Identifier: MIT */
/* Reference GEMM: triple loop in double over arbitrary strided, broadcast views. */
#include "ref.h"
#include "../testutil.h"

/* Element of X at batch index bi (aligned to C's nb batch dims) and matrix (i, j). */
static double at(const attn_view *x, int nb, const int64_t *bi, int64_t i, int64_t j) {
    int64_t idx[ATTN_MAX_DIMS];
    int nbx = x->ndim - 2;
    for (int k = 0; k < nbx; ++k) {
        int64_t b = bi[nb - nbx + k];
        idx[k] = x->shape[k] == 1 ? 0 : b;
    }
    idx[nbx] = i;
    idx[nbx + 1] = j;
    return tu_get(x, idx);
}

void ref_gemm(attn_trans ta, attn_trans tb, double alpha, const attn_view *a,
              const attn_view *b, double beta, const attn_view *c, const attn_view *want) {
    int nb = c->ndim - 2;
    int64_t M = c->shape[nb], N = c->shape[nb + 1];
    int64_t K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t bshape[2] = {1, 1}, bi[2] = {0, 0};
    for (int k = 0; k < nb; ++k) bshape[k] = c->shape[k];
    int64_t nbatch = 1;
    for (int k = 0; k < nb; ++k) nbatch *= bshape[k];
    for (int64_t t = 0; t < nbatch; ++t) {
        int64_t r = t;
        for (int k = nb - 1; k >= 0; --k) { bi[k] = r % bshape[k]; r /= bshape[k]; }
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double s = 0;
                for (int64_t p = 0; p < K; ++p) {
                    double x = ta ? at(a, nb, bi, p, i) : at(a, nb, bi, i, p);
                    double y = tb ? at(b, nb, bi, j, p) : at(b, nb, bi, p, j);
                    s += x * y;
                }
                int64_t idx[ATTN_MAX_DIMS] = {0};
                for (int k = 0; k < nb; ++k) idx[k] = bi[k];
                idx[nb] = i; idx[nb + 1] = j;
                double c0 = beta == 0 ? 0 : beta * tu_get(c, idx);
                tu_set(want, idx, alpha * s + c0);
            }
    }
}
