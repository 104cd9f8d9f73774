/* SPDX-License-Identifier: MIT */
/* Naive double references for the row and elementwise kernels: per-element loops over
 * multi-indices, full Jacobians for the backward passes (independent of src/). */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "ref.h"

static const double PI = 3.14159265358979323846;

/* Row r of a view seen as (rows, n): the multi-index of its first element. */
static void row_index(const attn_view *v, int64_t r, int64_t *idx) {
    for (int k = v->ndim - 2; k >= 0; --k) {
        idx[k] = r % v->shape[k];
        r /= v->shape[k];
    }
    idx[v->ndim - 1] = 0;
}
static int64_t nrows(const attn_view *v) {
    int64_t n = 1;
    for (int k = 0; k < v->ndim - 1; ++k)
        n *= v->shape[k];
    return n;
}
static int64_t rowlen(const attn_view *v) { return v->shape[v->ndim - 1]; }
static double rget(const attn_view *v, int64_t r, int64_t i) {
    int64_t idx[ATTN_MAX_DIMS];
    row_index(v, r, idx);
    idx[v->ndim - 1] = i;
    return tu_get(v, idx);
}
static void rset(const attn_view *v, int64_t r, int64_t i, double x) {
    int64_t idx[ATTN_MAX_DIMS];
    row_index(v, r, idx);
    idx[v->ndim - 1] = i;
    tu_set(v, idx, x);
}
static void radd(const attn_view *v, int64_t r, int64_t i, double x) {
    rset(v, r, i, rget(v, r, i) + x);
}
/* Element i of a 1-D view, or 1 / 0 when the view is absent. */
static double pget(const attn_view *p, int64_t i, double dflt) {
    return p ? tu_get(p, (int64_t[]){i}) : dflt;
}

void ref_softmax(const attn_view *x, const attn_view *want) {
    int64_t n = rowlen(x);
    if (tu_numel(x) == 0)
        return;
    for (int64_t r = 0; r < nrows(x); ++r) {
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < n; ++i)
            m = fmax(m, rget(x, r, i));
        for (int64_t i = 0; i < n; ++i)
            s += exp(rget(x, r, i) - m);
        for (int64_t i = 0; i < n; ++i)
            rset(want, r, i, exp(rget(x, r, i) - m) / s);
    }
}

/* dx_j += sum_i dy_i J_ij with the full Jacobian J_ij = y_i (delta_ij - y_j). */
void ref_softmax_backward(const attn_view *y, const attn_view *dy, const attn_view *want) {
    int64_t n = rowlen(y);
    if (tu_numel(y) == 0)
        return;
    for (int64_t r = 0; r < nrows(y); ++r)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0, yj = rget(y, r, j);
            for (int64_t i = 0; i < n; ++i) {
                double yi = rget(y, r, i);
                s += rget(dy, r, i) * yi * ((i == j) - yj);
            }
            radd(want, r, j, s);
        }
}

/* mean and biased variance of row r, each by its own plain loop */
static void row_stats(const attn_view *x, int64_t r, double *mean, double *var) {
    int64_t n = rowlen(x);
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; ++i)
        s += rget(x, r, i);
    *mean = s / n;
    for (int64_t i = 0; i < n; ++i)
        q += (rget(x, r, i) - *mean) * (rget(x, r, i) - *mean);
    *var = q / n;
}

void ref_layernorm(double eps, const attn_view *x, const attn_view *gamma,
                   const attn_view *beta, const attn_view *want, const attn_view *want_mean,
                   const attn_view *want_rstd) {
    int64_t n = rowlen(x);
    if (tu_numel(x) == 0)
        return;
    for (int64_t r = 0; r < nrows(x); ++r) {
        double mean, var;
        row_stats(x, r, &mean, &var);
        for (int64_t i = 0; i < n; ++i)
            rset(want, r, i,
                 (rget(x, r, i) - mean) / sqrt(var + eps) * pget(gamma, i, 1) +
                     pget(beta, i, 0));
        if (want_mean)
            ((double *)want_mean->data)[r] = mean;
        if (want_rstd)
            ((double *)want_rstd->data)[r] = 1 / sqrt(var + eps);
    }
}

/*
 * Through the Jacobian of xhat = (x - mean) / sqrt(var + eps):
 * d xhat_i / d x_j = s (delta_ij - 1/n) - (x_i - mean)(x_j - mean) s^3 / n, s = rstd.
 */
void ref_layernorm_backward(double eps, const attn_view *x, const attn_view *gamma,
                            const attn_view *dy, const attn_view *want_dx,
                            const attn_view *want_dgamma, const attn_view *want_dbeta) {
    int64_t n = rowlen(x);
    if (tu_numel(x) == 0)
        return;
    for (int64_t r = 0; r < nrows(x); ++r) {
        double mean, var;
        row_stats(x, r, &mean, &var);
        double s = 1 / sqrt(var + eps);
        for (int64_t j = 0; j < n; ++j) {
            double xj = rget(x, r, j) - mean, acc = 0;
            for (int64_t i = 0; i < n; ++i) {
                double xi = rget(x, r, i) - mean;
                double jac = s * ((i == j) - 1.0 / n) - xi * xj * s * s * s / n;
                acc += rget(dy, r, i) * pget(gamma, i, 1) * jac;
            }
            if (want_dx)
                radd(want_dx, r, j, acc);
            int64_t jj[1] = {j};
            if (want_dgamma)
                tu_set(want_dgamma, jj, tu_get(want_dgamma, jj) + rget(dy, r, j) * xj * s);
            if (want_dbeta)
                tu_set(want_dbeta, jj, tu_get(want_dbeta, jj) + rget(dy, r, j));
        }
    }
}

double ref_act(attn_act act, double x) {
    switch (act) {
    case ATTN_ACT_GELU_TANH:
        return .5 * x * (1 + tanh(sqrt(2 / PI) * (x + .044715 * pow(x, 3))));
    case ATTN_ACT_GELU_ERF:
        return .5 * x * (1 + erf(x / sqrt(2)));
    default:
        return x > 0 ? x : 0;
    }
}

double ref_act_grad(attn_act act, double x) {
    switch (act) {
    case ATTN_ACT_GELU_TANH: {
        double c = sqrt(2 / PI), u = c * (x + .044715 * pow(x, 3)), ch = cosh(u);
        return .5 * (1 + tanh(u)) + .5 * x * c * (1 + 3 * .044715 * x * x) / (ch * ch);
    }
    case ATTN_ACT_GELU_ERF:
        return .5 * (1 + erf(x / sqrt(2))) + x * exp(-x * x / 2) / sqrt(2 * PI);
    default:
        return x > 0 ? 1 : 0;
    }
}

void ref_activation(attn_act act, const attn_view *x, const attn_view *want) {
    if (tu_numel(x) == 0)
        return;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do
        tu_set(want, idx, ref_act(act, tu_get(x, idx)));
    while (tu_inc(idx, x->shape, x->ndim));
}

void ref_activation_backward(attn_act act, const attn_view *x, const attn_view *dy,
                             const attn_view *want) {
    if (tu_numel(x) == 0)
        return;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do
        tu_set(want, idx,
               tu_get(want, idx) + ref_act_grad(act, tu_get(x, idx)) * tu_get(dy, idx));
    while (tu_inc(idx, x->shape, x->ndim));
}

/* The index into b (NumPy broadcasting against a full index of `nd` dims). */
static void bcast_index(const attn_view *b, int nd, const int64_t *idx, int64_t *bi) {
    for (int k = 0; k < b->ndim; ++k) {
        int64_t i = idx[nd - b->ndim + k];
        bi[k] = b->shape[k] == 1 ? 0 : i;
    }
}

void ref_add(const attn_view *x, const attn_view *b, const attn_view *want) {
    if (tu_numel(x) == 0)
        return;
    int64_t idx[ATTN_MAX_DIMS] = {0}, bi[ATTN_MAX_DIMS];
    do {
        bcast_index(b, x->ndim, idx, bi);
        tu_set(want, idx, tu_get(x, idx) + tu_get(b, bi));
    } while (tu_inc(idx, x->shape, x->ndim));
}

void ref_add_backward(const attn_view *dy, const attn_view *want_dx, const attn_view *want_db) {
    if (tu_numel(dy) == 0)
        return;
    int64_t idx[ATTN_MAX_DIMS] = {0}, bi[ATTN_MAX_DIMS];
    do {
        double g = tu_get(dy, idx);
        if (want_dx)
            tu_set(want_dx, idx, tu_get(want_dx, idx) + g);
        if (want_db) {
            bcast_index(want_db, dy->ndim, idx, bi);
            tu_set(want_db, bi, tu_get(want_db, bi) + g);
        }
    } while (tu_inc(idx, dy->shape, dy->ndim));
}

void ref_linear(const attn_view *x, const attn_view *w, const attn_view *b,
                const attn_view *want) {
    int64_t in = w->shape[0], out = w->shape[1];
    if (tu_numel(want) == 0)
        return;
    for (int64_t r = 0; r < nrows(x); ++r)
        for (int64_t o = 0; o < out; ++o) {
            double s = pget(b, o, 0);
            for (int64_t i = 0; i < in; ++i)
                s += rget(x, r, i) * tu_get(w, (int64_t[]){i, o});
            rset(want, r, o, s);
        }
}

void ref_linear_backward(const attn_view *x, const attn_view *w, const attn_view *dy,
                         const attn_view *want_dx, const attn_view *want_dw,
                         const attn_view *want_db) {
    int64_t in = w->shape[0], out = w->shape[1];
    for (int64_t r = 0; r < nrows(x); ++r)
        for (int64_t i = 0; i < in; ++i)
            for (int64_t o = 0; o < out; ++o) {
                double g = rget(dy, r, o), wio = tu_get(w, (int64_t[]){i, o});
                if (want_dx)
                    radd(want_dx, r, i, g * wio);
                int64_t io[2] = {i, o};
                if (want_dw)
                    tu_set(want_dw, io, tu_get(want_dw, io) + rget(x, r, i) * g);
            }
    /* db on its own loop: with In = 0 the loop above never runs (fuzz_backward) */
    for (int64_t r = 0; want_db && r < nrows(x); ++r)
        for (int64_t o = 0; o < out; ++o)
            tu_set(want_db, (int64_t[]){o}, pget(want_db, o, 0) + rget(dy, r, o));
}

/* ---- positional encodings and patchify ---- */

void ref_sinusoidal(double base, const attn_view *want) {
    int64_t T = want->shape[0], C = want->shape[1];
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
            double f = pow(base, -(double)(c - c % 2) / (double)C);
            tu_set(want, (int64_t[]){t, c}, c % 2 ? cos(t * f) : sin(t * f));
        }
}

/* Each pair as a complex number z = a + ib, multiplied by e^{i theta}. */
void ref_rope(int half_style, double base, int64_t offset, const attn_view *x,
              const attn_view *want) {
    int nd = x->ndim;
    int64_t D = x->shape[nd - 1], idx[ATTN_MAX_DIMS] = {0};
    if (tu_numel(x) == 0)
        return;
    do {
        if (idx[nd - 1] != 0)
            continue; /* one visit per row */
        double p = (double)(offset + idx[nd - 2]);
        for (int64_t i = 0; i < D / 2; ++i) {
            int64_t ja = half_style ? i : 2 * i, jb = half_style ? i + D / 2 : 2 * i + 1;
            int64_t ia[ATTN_MAX_DIMS], ib[ATTN_MAX_DIMS];
            memcpy(ia, idx, sizeof ia);
            memcpy(ib, idx, sizeof ib);
            ia[nd - 1] = ja;
            ib[nd - 1] = jb;
            double complex z = tu_get(x, ia) + I * tu_get(x, ib);
            z *= cexp(I * p * pow(base, -2.0 * (double)i / (double)D));
            tu_set(want, ia, creal(z));
            tu_set(want, ib, cimag(z));
        }
    } while (tu_inc(idx, x->shape, nd));
}

void ref_patchify(int64_t p, const attn_view *image, const attn_view *want) {
    int nd = image->ndim;
    int64_t B = nd == 4 ? image->shape[0] : 1, Ch = nd >= 3 ? image->shape[nd - 3] : 1;
    int64_t H = image->shape[nd - 2], W = image->shape[nd - 1];
    int64_t token = 0; /* patches in row-major order over the patch grid */
    for (int64_t b = 0; b < B; ++b, token = 0)
        for (int64_t pr = 0; pr < H / p; ++pr)
            for (int64_t pc = 0; pc < W / p; ++pc, ++token) {
                int64_t f = 0;
                for (int64_t c = 0; c < Ch; ++c)
                    for (int64_t i = 0; i < p; ++i)
                        for (int64_t j = 0; j < p; ++j, ++f) {
                            int64_t src[4] = {0}, k = 0, dst[3], m = 0;
                            if (nd == 4)
                                src[k++] = b;
                            if (nd >= 3)
                                src[k++] = c;
                            src[k++] = pr * p + i;
                            src[k++] = pc * p + j;
                            if (nd == 4)
                                dst[m++] = b;
                            dst[m++] = token;
                            dst[m++] = f;
                            tu_set(want, dst, tu_get(image, src));
                        }
            }
}
