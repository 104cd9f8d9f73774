/* SPDX-License-Identifier: MIT */
/* Reference eigen/singular values (cyclic Jacobi in double) and the dense softmax Jacobian. */
#include <math.h>
#include <stdlib.h>

#include "../testutil.h"
#include "ref.h"

/* Cyclic Jacobi rotations (Golub & Van Loan, alg. 8.5.3) until the off-diagonal vanishes. */
void ref_sym_eigen(int64_t n, double *a, double *ev) {
    for (int sweep = 0; sweep < 100; ++sweep) {
        double off = 0, tot = 0;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
                tot += a[i * n + j] * a[i * n + j];
                if (i != j)
                    off += a[i * n + j] * a[i * n + j];
            }
        if (off <= 1e-36 * tot || off == 0)
            break;
        for (int64_t p = 0; p < n; ++p)
            for (int64_t q = p + 1; q < n; ++q) {
                double apq = a[p * n + q];
                if (apq == 0)
                    continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; ++k) { /* A := A G (columns p, q) */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; ++k) { /* A := G^T A (rows p, q) */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int64_t i = 0; i < n; ++i)
        ev[i] = a[i * n + i];
    for (int64_t i = 1; i < n; ++i) /* insertion sort, ascending */
        for (int64_t j = i; j > 0 && ev[j] < ev[j - 1]; --j) {
            double t = ev[j];
            ev[j] = ev[j - 1];
            ev[j - 1] = t;
        }
}

void ref_singular_values(const attn_view *a, double *s) {
    int64_t m = a->shape[0], n = a->shape[1];
    int wide = m < n;
    int64_t k = wide ? m : n, l = wide ? n : m; /* Gram matrix k x k, summed over l */
    double *g = calloc((size_t)(k * k + 1), sizeof(double)),
           *ev = malloc(sizeof(double) * (size_t)(k + 1));
    for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j)
            for (int64_t r = 0; r < l; ++r) {
                int64_t x[2] = {wide ? i : r, wide ? r : i},
                        y[2] = {wide ? j : r, wide ? r : j};
                g[i * k + j] += tu_get(a, x) * tu_get(a, y);
            }
    ref_sym_eigen(k, g, ev);
    for (int64_t i = 0; i < k; ++i)
        s[i] = sqrt(ev[k - 1 - i] > 0 ? ev[k - 1 - i] : 0);
    free(g);
    free(ev);
}

void ref_softmax_jacobian(int64_t n, const double *p, double *j) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < n; ++c)
            j[r * n + c] = (r == c ? p[r] : 0) - p[r] * p[c];
}
