/* SPDX-License-Identifier: MIT */
/* Diagnostics: entropy, softmax-Jacobian norms, SVD and effective rank (LAPACKE). */
#include <float.h>
#include <limits.h>
#include <math.h>

#include <lapacke.h>

#include "core/internal.h"

/* ---- probability rows ---------------------------------------------------- */

/* Element k of a row starting at base, stride in elements, read as double. */
static inline double row_at(const char *base, int64_t k, int64_t stride, attn_dtype dt) {
    return dt == ATTN_F64 ? ((const double *)base)[k * stride]
                          : (double)((const float *)base)[k * stride];
}

/* Address of element idx of v (nidx leading indices, the rest 0). */
static char *lead_elem(const attn_view *v, const int64_t *idx, int nidx) {
    int64_t off = 0;
    for (int k = 0; k < nidx; ++k)
        off += idx[k] * v->stride[k];
    return (char *)v->data + off * (int64_t)attn_dtype_size(v->dtype);
}

/* Row r of p (..., Tk) in row-major order of the leading dims: its leading index. */
static void row_index(const attn_view *p, int64_t r, int64_t *idx) {
    for (int k = p->ndim - 2; k >= 0; --k) {
        idx[k] = r % p->shape[k];
        r /= p->shape[k];
    }
}

static int64_t row_count(const attn_view *p) {
    int64_t n = 1;
    for (int k = 0; k + 1 < p->ndim; ++k)
        n *= p->shape[k];
    return n;
}

/* A row is a distribution: entries >= 0 (not NaN), sum within the dtype's tolerance. */
static bool row_ok(const char *base, int64_t n, int64_t stride, attn_dtype dt) {
    double s = 0;
    for (int64_t k = 0; k < n; ++k) {
        double x = row_at(base, k, stride, dt);
        if (!(x >= 0))
            return false;
        s += x;
    }
    double tol = dt == ATTN_F64 ? 1e-12 * (double)n : 1e-6 + (double)n * 0x1p-24;
    return fabs(s - 1.0) <= tol; /* false for an infinite or NaN sum */
}

/* Validate p (any ndim) and every one of its rows. */
static attn_status check_prob(const attn_view *p) {
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(p, 0));
    int64_t rows = row_count(p), n = p->shape[p->ndim - 1], idx[ATTN_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; ++r) {
        row_index(p, r, idx);
        if (!row_ok(lead_elem(p, idx, p->ndim - 1), n, p->stride[p->ndim - 1], p->dtype))
            return ATTN_EINVAL;
    }
    return ATTN_OK;
}

/* A per-row output: p's dtype, shape p.shape[:-1] ((1) for a 1-D p), writable. */
static attn_status check_row_out(const attn_view *p, const attn_view *out) {
    if (!out)
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(out));
    if (out->dtype != p->dtype)
        return ATTN_EDTYPE;
    int nd = p->ndim > 1 ? p->ndim - 1 : 1;
    if (out->ndim != nd)
        return ATTN_ESHAPE;
    for (int k = 0; k < nd; ++k)
        if (out->shape[k] != (p->ndim > 1 ? p->shape[k] : 1))
            return ATTN_ESHAPE;
    if (attn__self_overlaps(out))
        return ATTN_ESTRIDE;
    if (attn_view_overlaps(out, p))
        return ATTN_EALIAS;
    return ATTN_OK;
}

static void put(attn_dtype dt, char *dst, double v) {
    if (dt == ATTN_F64)
        *(double *)dst = v;
    else
        *(float *)dst = (float)v;
}

/* A statistic of one probability row. */
typedef double (*row_stat)(const char *base, int64_t n, int64_t stride, attn_dtype dt);

/* -sum p log p, 0 log 0 = 0. */
static double row_entropy(const char *base, int64_t n, int64_t stride, attn_dtype dt) {
    double h = 0;
    for (int64_t k = 0; k < n; ++k) {
        double x = row_at(base, k, stride, dt);
        if (x > 0)
            h -= x * log(x);
    }
    return h;
}

/*
 * ||diag(p) - p p^T||_F = sqrt(sum_i (p_i (1 - p_i))^2 + 2 sum_{i<j} p_i^2 p_j^2): the
 * diagonal and off-diagonal parts, each a sum of nonnegative terms (the off-diagonal
 * one through a running prefix sum of p_j^2), so nothing cancels.
 */
static double row_jacobian_fro(const char *base, int64_t n, int64_t stride, attn_dtype dt) {
    double diag = 0, off = 0, prefix = 0;
    for (int64_t k = 0; k < n; ++k) {
        double x = row_at(base, k, stride, dt), d = x * (1.0 - x), q = x * x;
        diag += d * d;
        off += q * prefix;
        prefix += q;
    }
    return sqrt(diag + 2.0 * off);
}

/* out[r] = stat(p[r, :]) for every row, after validating everything. */
static attn_status map_rows(const attn_view *p, attn_view *out, row_stat stat) {
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(p, 0));
    ATTN_TRY(check_row_out(p, out));
    ATTN_TRY(check_prob(p));
    int64_t rows = row_count(p), n = p->shape[p->ndim - 1], idx[ATTN_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; ++r) {
        row_index(p, r, idx);
        double v = stat(lead_elem(p, idx, p->ndim - 1), n, p->stride[p->ndim - 1], p->dtype);
        put(out->dtype, lead_elem(out, idx, p->ndim - 1), v);
    }
    return ATTN_OK;
}

attn_status attn_diag_entropy(const attn_view *p, attn_view *h) {
    return map_rows(p, h, row_entropy);
}

attn_status attn_diag_softmax_jacobian_fro(const attn_view *p, attn_view *out) {
    return map_rows(p, out, row_jacobian_fro);
}

attn_status attn_diag_entropy_mean(const attn_view *p, double *mean) {
    if (!mean)
        return ATTN_EINVAL;
    ATTN_TRY(check_prob(p));
    int64_t rows = row_count(p), n = p->shape[p->ndim - 1], idx[ATTN_MAX_DIMS] = {0};
    if (rows == 0)
        return ATTN_ESHAPE;
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) {
        row_index(p, r, idx);
        s += row_entropy(lead_elem(p, idx, p->ndim - 1), n, p->stride[p->ndim - 1], p->dtype);
    }
    *mean = s / (double)rows;
    return ATTN_OK;
}

/* ---- LAPACK plumbing ------------------------------------------------------- */

/* The doubles of a LAPACK workspace query, as a checked lapack_int count (>= 1). */
static attn_status lwork_of(double q, lapack_int *lw) {
    if (!(q <= INT_MAX))
        return ATTN_ERANGE;
    *lw = q < 1 ? 1 : (lapack_int)q;
    return ATTN_OK;
}

/* Carve `count` elements of `size` at *offset = *total, 64-byte aligned; false on overflow. */
static bool add_block(size_t *total, size_t count, size_t size, size_t *offset) {
    size_t b;
    if (!attn__mul_sz(count, size, &b) || attn__align64(b) < b)
        return false;
    *offset = *total;
    return attn__add_sz(*total, attn__align64(b), total);
}

/* ---- softmax Jacobian spectral norm (dsyevd) ------------------------------- */

/* Workspace: J (n x n), eigenvalues (n), one result per row, work (lwork), iwork (liwork). */
typedef struct eig_plan {
    lapack_int n, lwork, liwork;
    int64_t rows;
    size_t w_off, r_off, l_off, i_off, total; /* J at offset 0 */
} eig_plan;

static attn_status eig_plan_make(const attn_view *p, eig_plan *pl, int *info) {
    ATTN_TRY(attn__check_float(p, 0));
    int64_t n = p->shape[p->ndim - 1];
    *pl = (eig_plan){.rows = row_count(p)};
    if (n == 0 || pl->rows == 0)
        return ATTN_OK;
    if (n > INT_MAX)
        return ATTN_ERANGE;
    double dummy = 0, wq = 0;
    lapack_int iq = 0;
    lapack_int li = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'N', 'L', (lapack_int)n, &dummy,
                                        (lapack_int)n, &dummy, &wq, -1, &iq, -1);
    if (li != 0) {
        *info = (int)li;
        return ATTN_ELAPACK;
    }
    pl->n = (lapack_int)n;
    ATTN_TRY(lwork_of(wq, &pl->lwork));
    pl->liwork = iq < 1 ? 1 : iq;
    size_t j_off;
    if (!add_block(&pl->total, (size_t)n, (size_t)n * sizeof(double), &j_off) ||
        !add_block(&pl->total, (size_t)n, sizeof(double), &pl->w_off) ||
        !add_block(&pl->total, (size_t)pl->rows, sizeof(double), &pl->r_off) ||
        !add_block(&pl->total, (size_t)pl->lwork, sizeof(double), &pl->l_off) ||
        !add_block(&pl->total, (size_t)pl->liwork, sizeof(lapack_int), &pl->i_off))
        return ATTN_ERANGE;
    return ATTN_OK;
}

size_t attn_diag_softmax_jacobian_spectral_workspace_size(const attn_view *p) {
    eig_plan pl;
    int info;
    if (!p || eig_plan_make(p, &pl, &info) != ATTN_OK)
        return 0;
    return pl.total;
}

attn_status attn_diag_softmax_jacobian_spectral(const attn_view *p, attn_view *out, void *work,
                                                size_t work_size, int *info) {
    int dummy_info;
    if (!info)
        info = &dummy_info;
    *info = 0;
    if (!p)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(p, 0));
    ATTN_TRY(check_row_out(p, out));
    eig_plan pl;
    ATTN_TRY(eig_plan_make(p, &pl, info)); /* size checks before the O(numel) row scan */
    ATTN_TRY(check_prob(p));
    if (pl.rows == 0)
        return ATTN_OK;
    void *owned;
    ATTN_TRY(attn__work_acquire(&work, &work_size, pl.total, &owned));
    if (!owned && attn__work_overlaps(work, pl.total, (const attn_view *[]){p, out}, 2))
        return ATTN_EALIAS; /* a caller workspace over an argument: nothing written */
    char *wb = work;
    double *j = work, *w = (double *)(wb + pl.w_off), *res = (double *)(wb + pl.r_off);
    double *lw = (double *)(wb + pl.l_off);
    lapack_int *iw = (lapack_int *)(wb + pl.i_off);
    int64_t n = pl.n, st = p->stride[p->ndim - 1], idx[ATTN_MAX_DIMS] = {0};

    /* every norm into the workspace first: a LAPACK failure leaves out untouched */
    for (int64_t r = 0; r < pl.rows; ++r) {
        row_index(p, r, idx);
        const char *base = lead_elem(p, idx, p->ndim - 1);
        /* J = diag(p) - p p^T, lower triangle, column-major; J_cc = p_c (1 - p_c) keeps
           full relative accuracy where p_c - p_c^2 would cancel (p_c near 1) */
        for (int64_t c = 0; c < n; ++c) {
            double pc = row_at(base, c, st, p->dtype);
            j[c + c * n] = pc * (1.0 - pc);
            for (int64_t i = c + 1; i < n; ++i)
                j[i + c * n] = -row_at(base, i, st, p->dtype) * pc;
        }
        lapack_int li = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'N', 'L', pl.n, j, pl.n, w, lw,
                                            pl.lwork, iw, pl.liwork);
        if (li != 0) {
            free(owned);
            *info = (int)li;
            return ATTN_ELAPACK;
        }
        res[r] = fmax(fabs(w[0]), fabs(w[n - 1])); /* ascending eigenvalues */
    }
    for (int64_t r = 0; r < pl.rows; ++r) {
        row_index(p, r, idx);
        put(out->dtype, lead_elem(out, idx, p->ndim - 1), res[r]);
    }
    free(owned);
    return ATTN_OK;
}

/* ---- singular values (dgesdd) and effective rank --------------------------- */

/* Workspace: A (m x n, column-major), s (k), work (lwork), iwork (8 k); k = min(m, n). */
typedef struct svd_plan {
    lapack_int m, n, k, lwork;
    size_t s_off, l_off, i_off, total; /* A at offset 0 */
} svd_plan;

static attn_status svd_plan_make(const attn_view *a, svd_plan *pl, int *info) {
    ATTN_TRY(attn__check_float(a, 2));
    int64_t m = a->shape[0], n = a->shape[1], k = m < n ? m : n;
    *pl = (svd_plan){0};
    if (k == 0)
        return ATTN_OK;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX / 8)
        return ATTN_ERANGE;
    double dummy = 0, wq = 0;
    lapack_int idummy = 0;
    lapack_int li =
        LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, 'N', (lapack_int)m, (lapack_int)n, &dummy,
                            (lapack_int)m, &dummy, &dummy, 1, &dummy, 1, &wq, -1, &idummy);
    if (li != 0) {
        *info = (int)li;
        return ATTN_ELAPACK;
    }
    pl->m = (lapack_int)m;
    pl->n = (lapack_int)n;
    pl->k = (lapack_int)k;
    ATTN_TRY(lwork_of(wq, &pl->lwork));
    size_t a_off;
    if (!add_block(&pl->total, (size_t)m, (size_t)n * sizeof(double), &a_off) ||
        !add_block(&pl->total, (size_t)k, sizeof(double), &pl->s_off) ||
        !add_block(&pl->total, (size_t)pl->lwork, sizeof(double), &pl->l_off) ||
        !add_block(&pl->total, 8 * (size_t)k, sizeof(lapack_int), &pl->i_off))
        return ATTN_ERANGE;
    return ATTN_OK;
}

/*
 * Copy a into the workspace column-major (LAPACK overwrites it), refusing
 * non-finite entries, and compute the singular values into *s (in work).
 */
static attn_status svd_run(const attn_view *a, const svd_plan *pl, void *work, double **s,
                           int *info) {
    double *A = work, *lw = (double *)((char *)work + pl->l_off);
    lapack_int *iw = (lapack_int *)((char *)work + pl->i_off);
    *s = (double *)((char *)work + pl->s_off);
    int64_t m = pl->m, n = pl->n, s0 = a->stride[0], s1 = a->stride[1];
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
            int64_t off = i * s0 + j * s1;
            double x = a->dtype == ATTN_F64 ? ((const double *)a->data)[off]
                                            : (double)((const float *)a->data)[off];
            if (!isfinite(x))
                return ATTN_EINVAL;
            A[i + j * m] = x;
        }
    double dummy = 0;
    lapack_int li = LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, 'N', pl->m, pl->n, A, pl->m, *s,
                                        &dummy, 1, &dummy, 1, lw, pl->lwork, iw);
    if (li != 0) {
        *info = (int)li;
        return ATTN_ELAPACK;
    }
    return ATTN_OK;
}

size_t attn_diag_singular_values_workspace_size(const attn_view *a) {
    svd_plan pl;
    int info;
    if (!a || svd_plan_make(a, &pl, &info) != ATTN_OK)
        return 0;
    return pl.total;
}

size_t attn_diag_effective_rank_workspace_size(const attn_view *a) {
    return attn_diag_singular_values_workspace_size(a);
}

attn_status attn_diag_singular_values(const attn_view *a, attn_view *s, void *work,
                                      size_t work_size, int *info) {
    int dummy_info;
    if (!info)
        info = &dummy_info;
    *info = 0;
    if (!a || !s)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(a, 2));
    ATTN_TRY(attn_view_check(s));
    if (s->dtype != a->dtype)
        return ATTN_EDTYPE;
    int64_t k = a->shape[0] < a->shape[1] ? a->shape[0] : a->shape[1];
    if (s->ndim != 1 || s->shape[0] != k)
        return ATTN_ESHAPE;
    if (attn__self_overlaps(s))
        return ATTN_ESTRIDE;
    if (attn_view_overlaps(s, a))
        return ATTN_EALIAS;
    svd_plan pl;
    ATTN_TRY(svd_plan_make(a, &pl, info));
    if (k == 0)
        return ATTN_OK;
    void *owned;
    ATTN_TRY(attn__work_acquire(&work, &work_size, pl.total, &owned));
    if (!owned && attn__work_overlaps(work, pl.total, (const attn_view *[]){a, s}, 2))
        return ATTN_EALIAS;
    double *sv;
    attn_status st = svd_run(a, &pl, work, &sv, info);
    if (st == ATTN_OK) {
        size_t es = attn_dtype_size(s->dtype);
        for (int64_t i = 0; i < k; ++i)
            put(s->dtype, (char *)s->data + i * s->stride[0] * (int64_t)es, sv[i]);
    }
    free(owned);
    return st;
}

attn_status attn_diag_effective_rank(double tol, const attn_view *a, double *erank,
                                     int64_t *rank, void *work, size_t work_size, int *info) {
    int dummy_info;
    if (!info)
        info = &dummy_info;
    *info = 0;
    if (!a || !isfinite(tol))
        return ATTN_EINVAL;
    svd_plan pl;
    ATTN_TRY(svd_plan_make(a, &pl, info));
    double er = 0;
    int64_t count = 0;
    if (pl.k > 0) {
        void *owned;
        ATTN_TRY(attn__work_acquire(&work, &work_size, pl.total, &owned));
        if (!owned && attn__work_overlaps(work, pl.total, (const attn_view *[]){a}, 1))
            return ATTN_EALIAS;
        double *sv;
        attn_status st = svd_run(a, &pl, work, &sv, info);
        if (st != ATTN_OK) {
            free(owned);
            return st;
        }
        double total = 0, smax = sv[0]; /* dgesdd sorts descending */
        for (lapack_int i = 0; i < pl.k; ++i)
            total += sv[i];
        if (total > 0) {
            double h = 0;
            for (lapack_int i = 0; i < pl.k; ++i) {
                double q = sv[i] / total;
                if (q > 0)
                    h -= q * log(q);
            }
            er = exp(h);
        }
        double eps = a->dtype == ATTN_F64 ? DBL_EPSILON : FLT_EPSILON;
        double rel = tol > 0 ? tol : (double)(pl.m > pl.n ? pl.m : pl.n) * eps;
        for (lapack_int i = 0; i < pl.k; ++i)
            count += sv[i] > rel * smax;
        free(owned);
    }
    if (erank)
        *erank = er;
    if (rank)
        *rank = count;
    return ATTN_OK;
}
