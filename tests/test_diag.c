/* SPDX-License-Identifier: MIT */
/* Check suite for diag.h: entropy, softmax-Jacobian norms, singular values and effective rank. */
#include <float.h>

#include "ref/ref.h"
#include "testutil.h"

/*
 * ATTN_ELAPACK is not exercised: every argument LAPACK could reject is
 * refused before the call, and dsyevd/dgesdd do not fail on the finite
 * inputs that reach them.
 */

/* ---- probability views ------------------------------------------------------- */

typedef enum playout { P_CONTIG, P_TRANS, P_NEG, P_PERM4, P_ROW1, P_COUNT } playout;
static const char *playout_name[P_COUNT] = {"contig", "transposed", "negative", "permuted4",
                                            "1-D"};

/* Softmax of uniform random scores in [-3, 3), computed in double, stored as dt. */
static void fill_rows(const attn_view *p, uint64_t *seed) {
    int64_t n = p->shape[p->ndim - 1], rows = tu_numel(p) / (n ? n : 1);
    int64_t idx[4] = {0};
    double *e = malloc(sizeof(double) * (size_t)n);
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += e[k] = exp(3 * tu_uniform(seed));
        for (int64_t k = 0; k < n; ++k) {
            idx[p->ndim - 1] = k;
            tu_set(p, idx, e[k] / s);
        }
        idx[p->ndim - 1] = n - 1;
        tu_inc(idx, p->shape, p->ndim);
    }
    free(e);
}

/* A probability view of the given layout over fresh memory (*mem must be freed). */
static attn_view make_prob(attn_dtype dt, playout l, void **mem, uint64_t *seed) {
    size_t es = attn_dtype_size(dt);
    int64_t shape[4], stride[4], off = 0, span;
    int nd;
    switch (l) {
    case P_CONTIG: nd = 3; span = 2 * 3 * 7;
        memcpy(shape, (int64_t[]){2, 3, 7}, 24); memcpy(stride, (int64_t[]){21, 7, 1}, 24); break;
    case P_TRANS: nd = 2; span = 9 * 4; /* a (9, 4) buffer seen as (4, 9): rows strided */
        memcpy(shape, (int64_t[]){4, 9}, 16); memcpy(stride, (int64_t[]){1, 4}, 16); break;
    case P_NEG: nd = 2; span = 3 * 5; off = 3 * 5 - 1;
        memcpy(shape, (int64_t[]){3, 5}, 16); memcpy(stride, (int64_t[]){-5, -1}, 16); break;
    case P_PERM4: nd = 4; span = 2 * 3 * 2 * 6; /* (B, Tq, H, Tk) buffer as (B, H, Tq, Tk) */
        memcpy(shape, (int64_t[]){2, 2, 3, 6}, 32);
        memcpy(stride, (int64_t[]){36, 6, 12, 1}, 32); break;
    default: nd = 1; span = 11; shape[0] = 11; stride[0] = 1; break;
    }
    *mem = calloc((size_t)span, es);
    attn_view v;
    ck_assert_int_eq(attn_view_init_strided(&v, dt, (char *)*mem + off * (int64_t)es, nd, shape,
                                            stride), ATTN_OK);
    fill_rows(&v, seed);
    return v;
}

/* A per-row output for p, with stride 2 along its last dim (not contiguous). */
static attn_view make_out(const attn_view *p, void **mem) {
    int nd = p->ndim > 1 ? p->ndim - 1 : 1;
    int64_t shape[4] = {1, 1, 1, 1}, stride[4], n = 1;
    for (int k = 0; k < nd && p->ndim > 1; ++k) shape[k] = p->shape[k];
    for (int k = nd - 1; k >= 0; --k) { stride[k] = 2 * n; n *= shape[k]; }
    *mem = calloc((size_t)(2 * n), attn_dtype_size(p->dtype));
    attn_view v;
    ck_assert_int_eq(attn_view_init_strided(&v, p->dtype, *mem, nd, shape, stride), ATTN_OK);
    return v;
}

/* Copy row r of p (row-major over the leading dims) into x (doubles). */
static int64_t get_row(const attn_view *p, int64_t r, double *x) {
    int64_t n = p->shape[p->ndim - 1], idx[4] = {0};
    for (int k = p->ndim - 2; k >= 0; --k) { idx[k] = r % p->shape[k]; r /= p->shape[k]; }
    for (int64_t k = 0; k < n; ++k) { idx[p->ndim - 1] = k; x[k] = tu_get(p, idx); }
    return n;
}

/* Naive per-row references in double. */
static double ref_entropy(const double *x, int64_t n) {
    double h = 0;
    for (int64_t k = 0; k < n; ++k) if (x[k] > 0) h -= x[k] * log(x[k]);
    return h;
}
static double ref_fro(const double *x, int64_t n) {
    double *j = malloc(sizeof(double) * (size_t)(n * n)), s = 0;
    ref_softmax_jacobian(n, x, j);
    for (int64_t i = 0; i < n * n; ++i) s += j[i] * j[i];
    free(j);
    return sqrt(s);
}
static double ref_spectral(const double *x, int64_t n) {
    double *j = malloc(sizeof(double) * (size_t)(n * n)), *ev = malloc(sizeof(double) * (size_t)n);
    ref_softmax_jacobian(n, x, j);
    ref_sym_eigen(n, j, ev);
    double s = fmax(fabs(ev[0]), fabs(ev[n - 1]));
    free(j);
    free(ev);
    return s;
}

typedef attn_status (*row_fn)(const attn_view *p, attn_view *out);
static attn_status spectral_fn(const attn_view *p, attn_view *out) {
    return attn_diag_softmax_jacobian_spectral(p, out, NULL, 0, NULL);
}

/* Every layout x dtype: out[r] against ref(p[r, :]). */
static void rows_vs_reference(row_fn fn, double (*ref)(const double *, int64_t), const char *name) {
    uint64_t seed = 314;
    for (int d = 0; d < 2; ++d)
        for (int l = 0; l < P_COUNT; ++l) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            void *pm, *om, *wm;
            attn_view p = make_prob(dt, (playout)l, &pm, &seed);
            attn_view out = make_out(&p, &om);
            ck_assert_int_eq(fn(&p, &out), ATTN_OK);
            int64_t rows = tu_numel(&out), n = p.shape[p.ndim - 1];
            attn_view want;
            wm = malloc(sizeof(double) * (size_t)rows);
            attn_view_init(&want, ATTN_F64, wm, out.ndim, out.shape);
            double *x = malloc(sizeof(double) * (size_t)n);
            for (int64_t r = 0; r < rows; ++r) {
                get_row(&p, r, x);
                ((double *)wm)[r] = ref(x, n);
            }
            char what[96];
            snprintf(what, sizeof what, "%s %s %s", name, d ? "f64" : "f32", playout_name[l]);
            tu_check_close(&out, &want, TU_RTOL(dt), TU_ATOL(dt), what);
            free(x); free(pm); free(om); free(wm);
        }
}

/* Closed forms: uniform rows and one-hot rows, both dtypes, several Tk. */
static void closed_forms(row_fn fn, double (*uniform)(int64_t), const char *name) {
    static const int64_t tks[] = {1, 2, 5, 64, 1000};
    for (int d = 0; d < 2; ++d)
        for (size_t t = 0; t < sizeof tks / sizeof *tks; ++t) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            int64_t n = tks[t];
            double *buf = calloc((size_t)(2 * n), sizeof(double)), got[2] = {-1, -1};
            attn_view p, out;
            attn_view_init(&p, dt, buf, 2, (int64_t[]){2, n});
            attn_view_init(&out, dt, got, 1, (int64_t[]){2});
            for (int64_t k = 0; k < n; ++k) tu_set(&p, (int64_t[]){0, k}, 1.0 / (double)n);
            tu_set(&p, (int64_t[]){1, n / 2}, 1.0);
            ck_assert_int_eq(fn(&p, &out), ATTN_OK);
            double g0 = tu_get(&out, (int64_t[]){0}), g1 = tu_get(&out, (int64_t[]){1});
            double w0 = uniform(n), tol = d ? 1e-12 : 2e-6;
            ck_assert_msg(fabs(g0 - w0) <= tol * fmax(w0, 1e-3), "%s uniform Tk %lld: %.17g vs %.17g",
                          name, (long long)n, g0, w0);
            ck_assert_msg(g1 == 0, "%s one-hot Tk %lld: %.17g", name, (long long)n, g1);
            free(buf);
        }
}

/* Every status of a per-row function, with the output left exactly as it was. */
static void row_errors(row_fn fn) {
    double pb[32], ob[8], ok[8];
    for (int i = 0; i < 32; ++i) pb[i] = 0.25; /* (8, 4) uniform rows */
    for (int i = 0; i < 8; ++i) ob[i] = ok[i] = -3.0;
    attn_view p, out, u, of, o2, o3, obc, oal, pz, oz;
    attn_view_init(&p, ATTN_F64, pb, 2, (int64_t[]){8, 4});
    attn_view_init(&out, ATTN_F64, ob, 1, (int64_t[]){8});
    attn_view_init(&u, ATTN_U8, pb, 2, (int64_t[]){8, 4});
    attn_view_init(&of, ATTN_F32, ob, 1, (int64_t[]){8});
    attn_view_init(&o2, ATTN_F64, ob, 1, (int64_t[]){7});
    attn_view_init(&o3, ATTN_F64, ob, 2, (int64_t[]){8, 1});
    attn_view_init_strided(&obc, ATTN_F64, ob, 1, (int64_t[]){8}, (int64_t[]){0});
    attn_view_init(&oal, ATTN_F64, pb + 20, 1, (int64_t[]){8});
    attn_view_init(&pz, ATTN_F64, pb, 2, (int64_t[]){3, 0});
    attn_view_init(&oz, ATTN_F64, ob, 1, (int64_t[]){3});
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert_msg(memcmp(ob, ok, sizeof ob) == 0, "written on error");      \
    } while (0)
    EXPECT(ATTN_EINVAL, fn(NULL, &out));
    EXPECT(ATTN_EINVAL, fn(&p, NULL));
    EXPECT(ATTN_EDTYPE, fn(&u, &out));
    EXPECT(ATTN_EDTYPE, fn(&p, &of));
    EXPECT(ATTN_ESHAPE, fn(&p, &o2));
    EXPECT(ATTN_ESHAPE, fn(&p, &o3));
    EXPECT(ATTN_ESTRIDE, fn(&p, &obc));
    ck_assert_int_eq(fn(&p, &oal), ATTN_EALIAS);
    EXPECT(ATTN_EINVAL, fn(&pz, &oz)); /* Tk = 0: rows cannot sum to 1 */
    /* bad rows, placed in the last row so that every earlier row is fine */
    pb[31] = -0.25; pb[30] = 0.75;      /* negative entry, sum still 1 */
    EXPECT(ATTN_EINVAL, fn(&p, &out));
    pb[31] = NAN; pb[30] = 0.25;
    EXPECT(ATTN_EINVAL, fn(&p, &out));
    pb[31] = 0.25 + 1e-9;                /* sum off by 1e-9 > 4e-12 */
    EXPECT(ATTN_EINVAL, fn(&p, &out));
    pb[31] = INFINITY;
    EXPECT(ATTN_EINVAL, fn(&p, &out));
    pb[31] = 0.25;
    /* no rows at all: nothing to do */
    attn_view p0, o0;
    attn_view_init(&p0, ATTN_F64, pb, 2, (int64_t[]){0, 4});
    attn_view_init(&o0, ATTN_F64, ob, 1, (int64_t[]){0});
    EXPECT(ATTN_OK, fn(&p0, &o0));
#undef EXPECT
}

/* The sum tolerance: F64 1e-12 Tk, F32 1e-6 + Tk 2^-24; Tk = 8 rows of 1/8. */
static void tolerance_edges(row_fn fn) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        double tol = d ? 8e-12 : 1e-6 + 8 * 0x1p-24;
        for (int side = 0; side < 2; ++side) {
            double buf[8], out[1];
            attn_view p, o;
            attn_view_init(&p, dt, buf, 1, (int64_t[]){8});
            attn_view_init(&o, dt, out, 1, (int64_t[]){1});
            for (int k = 0; k < 8; ++k) tu_set(&p, (int64_t[]){k}, 0.125);
            double delta = side ? 1.1 * tol : 0.9 * tol;
            tu_set(&p, (int64_t[]){7}, 0.125 + delta);
            double sum = 0;
            for (int k = 0; k < 8; ++k) sum += tu_get(&p, (int64_t[]){k});
            ck_assert(side ? fabs(sum - 1) > tol : fabs(sum - 1) <= tol); /* the setup itself */
            ck_assert_int_eq(fn(&p, &o), side ? ATTN_EINVAL : ATTN_OK);
        }
    }
}

static double uniform_entropy(int64_t n) { return log((double)n); }
static double uniform_fro(int64_t n) { return sqrt((double)(n - 1)) / (double)n; }
static double uniform_spectral(int64_t n) { return n == 1 ? 0 : 1.0 / (double)n; }

/* ---- attn_diag_entropy --------------------------------------------------------- */

START_TEST(en_closed_forms) { closed_forms(attn_diag_entropy, uniform_entropy, "entropy"); }
END_TEST
START_TEST(en_layouts_vs_reference) { rows_vs_reference(attn_diag_entropy, ref_entropy, "entropy"); }
END_TEST
START_TEST(en_tolerance) { tolerance_edges(attn_diag_entropy); }
END_TEST
START_TEST(en_errors) { row_errors(attn_diag_entropy); }
END_TEST

/* ---- attn_diag_entropy_mean ----------------------------------------------------- */

START_TEST(em_vs_reference) {
    uint64_t seed = 27;
    for (int d = 0; d < 2; ++d)
        for (int l = 0; l < P_COUNT; ++l) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            void *pm;
            attn_view p = make_prob(dt, (playout)l, &pm, &seed);
            int64_t n = p.shape[p.ndim - 1], rows = tu_numel(&p) / n;
            double *x = malloc(sizeof(double) * (size_t)n), want = 0, got = -1;
            for (int64_t r = 0; r < rows; ++r) {
                get_row(&p, r, x);
                want += ref_entropy(x, n);
            }
            want /= (double)rows;
            ck_assert_int_eq(attn_diag_entropy_mean(&p, &got), ATTN_OK);
            ck_assert_msg(fabs(got - want) <= 1e-12 * want, "%s %s: %.17g vs %.17g",
                          d ? "f64" : "f32", playout_name[l], got, want);
            free(x);
            free(pm);
        }
}
END_TEST

START_TEST(em_errors) {
    double pb[12] = {0.5, 0.5, 0, 1, 0.25, 0.75, 1, 0, 0.5, 0.5, 0.5, 0.5}, mean = -1;
    attn_view p, p0, u;
    attn_view_init(&p, ATTN_F64, pb, 2, (int64_t[]){6, 2});
    attn_view_init(&p0, ATTN_F64, pb, 3, (int64_t[]){2, 0, 2});
    attn_view_init(&u, ATTN_U8, pb, 2, (int64_t[]){6, 2});
    ck_assert_int_eq(attn_diag_entropy_mean(NULL, &mean), ATTN_EINVAL);
    ck_assert_int_eq(attn_diag_entropy_mean(&p, NULL), ATTN_EINVAL);
    ck_assert_int_eq(attn_diag_entropy_mean(&u, &mean), ATTN_EDTYPE);
    ck_assert_int_eq(attn_diag_entropy_mean(&p0, &mean), ATTN_ESHAPE);
    pb[11] = 0.6;
    ck_assert_int_eq(attn_diag_entropy_mean(&p, &mean), ATTN_EINVAL);
    ck_assert(mean == -1); /* untouched */
    pb[11] = 0.5;
    ck_assert_int_eq(attn_diag_entropy_mean(&p, &mean), ATTN_OK);
    double want = (3 * log(2.0) - 0.25 * log(0.25) - 0.75 * log(0.75)) / 6;
    ck_assert(fabs(mean - want) <= 1e-15);
}
END_TEST

/* ---- attn_diag_softmax_jacobian_fro / _spectral --------------------------------- */

/* p = (1 - e, e): J = p0 p1 [[1, -1], [-1, 1]], ||J||_F = ||J||_2 = 2 p0 p1. */
static void two_point(row_fn fn, double rtol) {
    /* powers of two: 1 - e is exact, so the row sums to 1 exactly */
    static const double es[] = {0x1p-1, 0x1p-2, 0x1p-17, 0x1p-34, 0x1p-50};
    for (size_t i = 0; i < sizeof es / sizeof *es; ++i) {
        double p[2] = {1 - es[i], es[i]}, out = -1;
        attn_view vp, vo;
        attn_view_init(&vp, ATTN_F64, p, 1, (int64_t[]){2});
        attn_view_init(&vo, ATTN_F64, &out, 1, (int64_t[]){1});
        ck_assert_int_eq(fn(&vp, &vo), ATTN_OK);
        double want = 2 * p[0] * p[1];
        ck_assert_msg(fabs(out - want) <= rtol * want, "e %g: %.17g vs %.17g", es[i], out, want);
    }
}

START_TEST(jf_closed_forms) {
    closed_forms(attn_diag_softmax_jacobian_fro, uniform_fro, "fro");
    two_point(attn_diag_softmax_jacobian_fro, 1e-14); /* no cancellation near one-hot */
}
END_TEST
START_TEST(jf_vs_dense) {
    rows_vs_reference(attn_diag_softmax_jacobian_fro, ref_fro, "fro");
}
END_TEST
START_TEST(jf_tolerance) { tolerance_edges(attn_diag_softmax_jacobian_fro); }
END_TEST
START_TEST(jf_errors) { row_errors(attn_diag_softmax_jacobian_fro); }
END_TEST

START_TEST(js_closed_forms) {
    closed_forms(spectral_fn, uniform_spectral, "spectral");
    two_point(spectral_fn, 1e-13); /* J_ii = p_i (1 - p_i): no cancellation either */
}
END_TEST
START_TEST(js_vs_dense) { rows_vs_reference(spectral_fn, ref_spectral, "spectral"); }
END_TEST
START_TEST(js_tolerance) { tolerance_edges(spectral_fn); }
END_TEST
START_TEST(js_errors) {
    row_errors(spectral_fn);
    double pb[12], ob[3] = {-3, -3, -3};
    for (int i = 0; i < 12; ++i) pb[i] = 0.25;
    attn_view p, o;
    attn_view_init(&p, ATTN_F64, pb, 2, (int64_t[]){3, 4});
    attn_view_init(&o, ATTN_F64, ob, 1, (int64_t[]){3});
    size_t ws = attn_diag_softmax_jacobian_spectral_workspace_size(&p);
    ck_assert_uint_gt(ws, 0);
    char *w = malloc(ws);
    int info = 9;
    ck_assert_int_eq(attn_diag_softmax_jacobian_spectral(&p, &o, w, ws - 1, &info),
                     ATTN_EWORKSPACE);
    ck_assert_int_eq(info, 0);
    ck_assert_int_eq(attn_diag_softmax_jacobian_spectral(&p, &o, NULL, ws, NULL),
                     ATTN_EWORKSPACE);
    ck_assert(ob[0] == -3 && ob[1] == -3 && ob[2] == -3);
    ck_assert_int_eq(attn_diag_softmax_jacobian_spectral(&p, &o, w, ws, &info), ATTN_OK);
    ck_assert_int_eq(info, 0);
    ck_assert(fabs(ob[2] - 0.25) < 1e-15);
    free(w);
    /* Tk beyond LAPACK's int: refused before the rows are scanned */
    ob[0] = -3;
    attn_view big, ob1;
    attn_view_init_strided(&big, ATTN_F64, pb, 1, (int64_t[]){INT64_C(1) << 31}, (int64_t[]){0});
    attn_view_init(&ob1, ATTN_F64, ob, 1, (int64_t[]){1});
    ck_assert_int_eq(attn_diag_softmax_jacobian_spectral(&big, &ob1, NULL, 0, NULL), ATTN_ERANGE);
    ck_assert(ob[0] == -3);
}
END_TEST

START_TEST(jw_sizes) {
    double pb[4] = {1, 0, 0, 1};
    attn_view p, p3, pe, u;
    attn_view_init(&p, ATTN_F64, pb, 2, (int64_t[]){2, 2});
    attn_view_init(&p3, ATTN_F32, pb, 2, (int64_t[]){5, 40});
    attn_view_init(&pe, ATTN_F64, pb, 2, (int64_t[]){0, 2});
    attn_view_init(&u, ATTN_U8, pb, 2, (int64_t[]){2, 2});
    /* J (Tk^2 doubles), eigenvalues, one result per row */
    ck_assert_uint_ge(attn_diag_softmax_jacobian_spectral_workspace_size(&p), 8 * (4 + 2 + 2));
    ck_assert_uint_ge(attn_diag_softmax_jacobian_spectral_workspace_size(&p3),
                      8 * (1600 + 40 + 5));
    ck_assert_uint_eq(attn_diag_softmax_jacobian_spectral_workspace_size(&pe), 0);
    ck_assert_uint_eq(attn_diag_softmax_jacobian_spectral_workspace_size(&u), 0);
    ck_assert_uint_eq(attn_diag_softmax_jacobian_spectral_workspace_size(NULL), 0);
}
END_TEST

/* ---- matrices --------------------------------------------------------------------- */

typedef enum mlayout { M_CONTIG, M_COLMAJOR, M_SLICED, M_NEG, M_STRIDED, M_COUNT } mlayout;
static const char *mlayout_name[M_COUNT] = {"contig", "colmajor", "sliced", "negative",
                                            "strided"};

/* An (m, n) view of the given layout holding vals (row-major doubles), stored as dt. */
static attn_view make_mat(attn_dtype dt, int64_t m, int64_t n, mlayout l, const double *vals,
                          void **mem) {
    int64_t sr, sc, span, off = 0;
    switch (l) {
    case M_CONTIG: sr = n; sc = 1; span = m * n; break;
    case M_COLMAJOR: sr = 1; sc = m; span = m * n; break;
    case M_SLICED: sr = n + 3; sc = 1; span = m * (n + 3); break;
    case M_NEG: sr = -n; sc = 1; span = m * n; off = (m - 1) * n; break;
    default: sr = 2 * n; sc = 2; span = 2 * m * n; break;
    }
    if (span < 1) span = 1;
    size_t es = attn_dtype_size(dt);
    *mem = calloc((size_t)span, es);
    attn_view v;
    ck_assert_int_eq(attn_view_init_strided(&v, dt, (char *)*mem + (off > 0 ? off : 0) * (int64_t)es,
                                            2, (int64_t[]){m, n}, (int64_t[]){sr, sc}), ATTN_OK);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) tu_set(&v, (int64_t[]){i, j}, vals[i * n + j]);
    return v;
}

/* A rank-r (m, n) matrix X Y with X (m, r), Y (r, n) uniform random (naive loops). */
static double *rank_r(int64_t m, int64_t n, int64_t r, uint64_t *seed) {
    double *x = malloc(sizeof(double) * (size_t)(m * r + 1)), *y = malloc(sizeof(double) * (size_t)(r * n + 1));
    double *a = calloc((size_t)(m * n + 1), sizeof(double));
    for (int64_t i = 0; i < m * r; ++i) x[i] = tu_uniform(seed);
    for (int64_t i = 0; i < r * n; ++i) y[i] = tu_uniform(seed);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            for (int64_t k = 0; k < r; ++k) a[i * n + j] += x[i * r + k] * y[k * n + j];
    free(x);
    free(y);
    return a;
}

static const int64_t mshapes[][2] = {{6, 4}, {4, 6}, {5, 5}, {1, 7}, {7, 1}, {12, 9}};

/* ---- attn_diag_singular_values --------------------------------------------------- */

START_TEST(sv_vs_reference) {
    uint64_t seed = 99;
    for (int d = 0; d < 2; ++d)
        for (size_t s = 0; s < sizeof mshapes / sizeof *mshapes; ++s)
            for (int l = 0; l < M_COUNT; ++l) {
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                int64_t m = mshapes[s][0], n = mshapes[s][1], k = m < n ? m : n;
                double *vals = malloc(sizeof(double) * (size_t)(m * n));
                for (int64_t i = 0; i < m * n; ++i) vals[i] = tu_uniform(&seed);
                void *am, *sm;
                attn_view a = make_mat(dt, m, n, (mlayout)l, vals, &am);
                /* s with stride -1: written back to front */
                sm = calloc((size_t)k, attn_dtype_size(dt));
                attn_view sv, want;
                attn_view_init_strided(&sv, dt, (char *)sm + (k - 1) * (int64_t)attn_dtype_size(dt),
                                       1, (int64_t[]){k}, (int64_t[]){-1});
                int info = 77;
                ck_assert_int_eq(attn_diag_singular_values(&a, &sv, NULL, 0, &info), ATTN_OK);
                ck_assert_int_eq(info, 0);
                double *ws = malloc(sizeof(double) * (size_t)k);
                ref_singular_values(&a, ws);
                attn_view_init(&want, ATTN_F64, ws, 1, (int64_t[]){k});
                char what[96];
                snprintf(what, sizeof what, "sv %s (%lld, %lld) %s", d ? "f64" : "f32",
                         (long long)m, (long long)n, mlayout_name[l]);
                /* relative to s_max: the Gram-matrix reference loses accuracy on small s_i */
                tu_check_close(&sv, &want, TU_RTOL(dt), TU_RTOL(dt) * ws[0], what);
                for (int64_t i = 1; i < k; ++i)
                    ck_assert(tu_get(&sv, (int64_t[]){i}) <= tu_get(&sv, (int64_t[]){i - 1}));
                free(vals); free(am); free(sm); free(ws);
            }
}
END_TEST

START_TEST(sv_errors) {
    double ab[24], sb[8], keep[8];
    for (int i = 0; i < 24; ++i) ab[i] = i % 5;
    for (int i = 0; i < 8; ++i) sb[i] = keep[i] = -1;
    attn_view a, a3, u, s, s3, sf, sbc, sal, s2d;
    attn_view_init(&a, ATTN_F64, ab, 2, (int64_t[]){6, 4});
    attn_view_init(&a3, ATTN_F64, ab, 3, (int64_t[]){2, 3, 4});
    attn_view_init(&u, ATTN_U8, ab, 2, (int64_t[]){6, 4});
    attn_view_init(&s, ATTN_F64, sb, 1, (int64_t[]){4});
    attn_view_init(&s3, ATTN_F64, sb, 1, (int64_t[]){3});
    attn_view_init(&sf, ATTN_F32, sb, 1, (int64_t[]){4});
    attn_view_init_strided(&sbc, ATTN_F64, sb, 1, (int64_t[]){4}, (int64_t[]){0});
    attn_view_init(&sal, ATTN_F64, ab + 2, 1, (int64_t[]){4});
    attn_view_init(&s2d, ATTN_F64, sb, 2, (int64_t[]){1, 4});
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert_msg(memcmp(sb, keep, sizeof sb) == 0, "written on error");    \
    } while (0)
    EXPECT(ATTN_EINVAL, attn_diag_singular_values(NULL, &s, NULL, 0, NULL));
    EXPECT(ATTN_EINVAL, attn_diag_singular_values(&a, NULL, NULL, 0, NULL));
    EXPECT(ATTN_EDTYPE, attn_diag_singular_values(&u, &s, NULL, 0, NULL));
    EXPECT(ATTN_EDTYPE, attn_diag_singular_values(&a, &sf, NULL, 0, NULL));
    EXPECT(ATTN_ESHAPE, attn_diag_singular_values(&a3, &s, NULL, 0, NULL));
    EXPECT(ATTN_ESHAPE, attn_diag_singular_values(&a, &s3, NULL, 0, NULL));
    EXPECT(ATTN_ESHAPE, attn_diag_singular_values(&a, &s2d, NULL, 0, NULL));
    EXPECT(ATTN_ESTRIDE, attn_diag_singular_values(&a, &sbc, NULL, 0, NULL));
    ck_assert_int_eq(attn_diag_singular_values(&a, &sal, NULL, 0, NULL), ATTN_EALIAS);
    size_t ws = attn_diag_singular_values_workspace_size(&a);
    ck_assert_uint_gt(ws, 0);
    char *w = malloc(ws);
    EXPECT(ATTN_EWORKSPACE, attn_diag_singular_values(&a, &s, w, ws - 1, NULL));
    EXPECT(ATTN_EWORKSPACE, attn_diag_singular_values(&a, &s, NULL, ws, NULL));
    ab[17] = NAN;
    EXPECT(ATTN_EINVAL, attn_diag_singular_values(&a, &s, w, ws, NULL));
    ab[17] = -INFINITY;
    EXPECT(ATTN_EINVAL, attn_diag_singular_values(&a, &s, w, ws, NULL));
    ab[17] = 2;
    attn_view huge, sh;
    attn_view_init_strided(&huge, ATTN_F64, ab, 2, (int64_t[]){INT64_C(1) << 31, 2},
                           (int64_t[]){0, 1});
    attn_view_init(&sh, ATTN_F64, sb, 1, (int64_t[]){2});
    EXPECT(ATTN_ERANGE, attn_diag_singular_values(&huge, &sh, NULL, 0, NULL));
    ck_assert_int_eq(attn_diag_singular_values(&a, &s, w, ws, NULL), ATTN_OK);
    free(w);
    /* an empty matrix has no singular values */
    attn_view e, s0;
    attn_view_init(&e, ATTN_F64, ab, 2, (int64_t[]){0, 4});
    attn_view_init(&s0, ATTN_F64, sb, 1, (int64_t[]){0});
    ck_assert_int_eq(attn_diag_singular_values(&e, &s0, NULL, 0, NULL), ATTN_OK);
#undef EXPECT
}
END_TEST

START_TEST(sw_sizes) {
    double b[4];
    attn_view a, big, e, a1, u;
    attn_view_init(&a, ATTN_F64, b, 2, (int64_t[]){2, 2});
    attn_view_init_strided(&big, ATTN_F32, b, 2, (int64_t[]){300, 40}, (int64_t[]){0, 0});
    attn_view_init(&e, ATTN_F64, b, 2, (int64_t[]){0, 2});
    attn_view_init(&a1, ATTN_F64, b, 1, (int64_t[]){4});
    attn_view_init(&u, ATTN_U8, b, 2, (int64_t[]){2, 2});
    ck_assert_uint_ge(attn_diag_singular_values_workspace_size(&a), 8 * (4 + 2));
    ck_assert_uint_ge(attn_diag_singular_values_workspace_size(&big), 8 * (12000 + 40));
    ck_assert_uint_eq(attn_diag_singular_values_workspace_size(&e), 0);
    ck_assert_uint_eq(attn_diag_singular_values_workspace_size(&a1), 0);
    ck_assert_uint_eq(attn_diag_singular_values_workspace_size(&u), 0);
    ck_assert_uint_eq(attn_diag_singular_values_workspace_size(NULL), 0);
}
END_TEST

/* ---- attn_diag_effective_rank ------------------------------------------------------ */

/* Products X (m, r) Y (r, n) have rank r exactly, in every layout and dtype. */
START_TEST(er_known_rank) {
    static const int64_t cases[][3] = {{12, 9, 1}, {12, 9, 4}, {9, 12, 5}, {10, 10, 10},
                                       {16, 16, 7}, {5, 30, 3}};
    uint64_t seed = 4242;
    for (int d = 0; d < 2; ++d)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c)
            for (int l = 0; l < M_COUNT; ++l) {
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                int64_t m = cases[c][0], n = cases[c][1], r = cases[c][2];
                double *vals = rank_r(m, n, r, &seed);
                void *am;
                attn_view a = make_mat(dt, m, n, (mlayout)l, vals, &am);
                double er = -1;
                int64_t rk = -1;
                ck_assert_int_eq(attn_diag_effective_rank(0, &a, &er, &rk, NULL, 0, NULL), ATTN_OK);
                ck_assert_msg(rk == r, "(%lld, %lld) rank %lld: got %lld (%s, %s)", (long long)m,
                              (long long)n, (long long)r, (long long)rk, d ? "f64" : "f32",
                              mlayout_name[l]);
                /* entropy rank against the reference singular values */
                int64_t k = m < n ? m : n;
                double *s = malloc(sizeof(double) * (size_t)k), tot = 0, h = 0;
                ref_singular_values(&a, s);
                for (int64_t i = 0; i < r; ++i) tot += s[i]; /* beyond r: rounding noise */
                for (int64_t i = 0; i < r; ++i) h -= s[i] / tot * log(s[i] / tot);
                ck_assert_msg(fabs(er - exp(h)) <= (d ? 1e-9 : 1e-5) * exp(h), "erank %.17g vs %.17g",
                              er, exp(h));
                ck_assert_msg(er >= 1 - 1e-12 && er <= (double)r * (d ? 1 + 1e-12 : 1 + 1e-4),
                              "erank %.17g for rank %lld", er, (long long)r);
                free(vals); free(am); free(s);
            }
}
END_TEST

/* Closed forms: equal singular values give erank k; diag(3, 1) gives exp(H(3/4, 1/4)). */
START_TEST(er_closed_forms) {
    double eye[5 * 5] = {0}, d31[4 * 3] = {0}, zero[6] = {0}, er;
    int64_t rk;
    for (int i = 0; i < 5; ++i) eye[i * 5 + i] = 2.5;
    d31[0] = 3; d31[4] = -1;
    attn_view a, b, z;
    attn_view_init(&a, ATTN_F64, eye, 2, (int64_t[]){5, 5});
    attn_view_init(&b, ATTN_F64, d31, 2, (int64_t[]){4, 3});
    attn_view_init(&z, ATTN_F64, zero, 2, (int64_t[]){2, 3});
    ck_assert_int_eq(attn_diag_effective_rank(0, &a, &er, &rk, NULL, 0, NULL), ATTN_OK);
    ck_assert(fabs(er - 5) < 1e-13 && rk == 5);
    ck_assert_int_eq(attn_diag_effective_rank(0, &b, &er, &rk, NULL, 0, NULL), ATTN_OK);
    double want = exp(-(0.75 * log(0.75) + 0.25 * log(0.25)));
    ck_assert_msg(fabs(er - want) < 1e-14, "%.17g vs %.17g", er, want);
    ck_assert_int_eq(rk, 2);
    ck_assert_int_eq(attn_diag_effective_rank(0, &z, &er, &rk, NULL, 0, NULL), ATTN_OK);
    ck_assert(er == 0 && rk == 0);
    /* explicit tolerances on diag(1, 1e-3, 1e-9) */
    double g[9] = {1, 0, 0, 0, 1e-3, 0, 0, 0, 1e-9};
    attn_view vg;
    attn_view_init(&vg, ATTN_F64, g, 2, (int64_t[]){3, 3});
    static const struct { double tol; int64_t rank; } t[] = {{0, 3}, {-1, 3}, {1e-10, 3},
                                                             {1e-5, 2}, {1e-2, 1}, {2, 0}};
    for (size_t i = 0; i < sizeof t / sizeof *t; ++i) {
        ck_assert_int_eq(attn_diag_effective_rank(t[i].tol, &vg, NULL, &rk, NULL, 0, NULL), ATTN_OK);
        ck_assert_msg(rk == t[i].rank, "tol %g: rank %lld", t[i].tol, (long long)rk);
        for (int k = 0; k < 9; ++k) g[k] *= 1e-20; /* the threshold is relative to s_max */
        ck_assert_int_eq(attn_diag_effective_rank(t[i].tol, &vg, NULL, &rk, NULL, 0, NULL), ATTN_OK);
        ck_assert_msg(rk == t[i].rank, "scaled, tol %g: rank %lld", t[i].tol, (long long)rk);
        for (int k = 0; k < 9; ++k) g[k] *= 1e20;
    }
    /* the default threshold follows the dtype: 1e-9 is noise for F32 data */
    float gf[9] = {1, 0, 0, 0, 1e-3f, 0, 0, 0, 1e-9f};
    attn_view_init(&vg, ATTN_F32, gf, 2, (int64_t[]){3, 3});
    ck_assert_int_eq(attn_diag_effective_rank(0, &vg, &er, &rk, NULL, 0, NULL), ATTN_OK);
    ck_assert_int_eq(rk, 2);
    /* empty matrix */
    attn_view e;
    attn_view_init(&e, ATTN_F64, g, 2, (int64_t[]){3, 0});
    er = rk = -1;
    ck_assert_int_eq(attn_diag_effective_rank(0, &e, &er, &rk, NULL, 0, NULL), ATTN_OK);
    ck_assert(er == 0 && rk == 0);
}
END_TEST

START_TEST(er_errors) {
    double ab[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, er = -5;
    int64_t rk = -5;
    attn_view a, a1, u;
    attn_view_init(&a, ATTN_F64, ab, 2, (int64_t[]){3, 4});
    attn_view_init(&a1, ATTN_F64, ab, 1, (int64_t[]){12});
    attn_view_init(&u, ATTN_U8, ab, 2, (int64_t[]){3, 4});
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert(er == -5 && rk == -5);                                        \
    } while (0)
    EXPECT(ATTN_EINVAL, attn_diag_effective_rank(0, NULL, &er, &rk, NULL, 0, NULL));
    EXPECT(ATTN_EINVAL, attn_diag_effective_rank(NAN, &a, &er, &rk, NULL, 0, NULL));
    EXPECT(ATTN_EINVAL, attn_diag_effective_rank(INFINITY, &a, &er, &rk, NULL, 0, NULL));
    EXPECT(ATTN_ESHAPE, attn_diag_effective_rank(0, &a1, &er, &rk, NULL, 0, NULL));
    EXPECT(ATTN_EDTYPE, attn_diag_effective_rank(0, &u, &er, &rk, NULL, 0, NULL));
    size_t ws = attn_diag_effective_rank_workspace_size(&a);
    ck_assert_uint_gt(ws, 0);
    char *w = malloc(ws);
    EXPECT(ATTN_EWORKSPACE, attn_diag_effective_rank(0, &a, &er, &rk, w, ws - 1, NULL));
    ab[5] = NAN;
    EXPECT(ATTN_EINVAL, attn_diag_effective_rank(0, &a, &er, &rk, w, ws, NULL));
    ab[5] = 6;
    int info = 3;
    ck_assert_int_eq(attn_diag_effective_rank(0, &a, &er, &rk, w, ws, &info), ATTN_OK);
    ck_assert(rk == 2 && info == 0); /* rows of 1..12 are affine: rank 2 */
    free(w);
#undef EXPECT
}
END_TEST

START_TEST(ew_sizes) {
    double b[6];
    attn_view a, a1;
    attn_view_init(&a, ATTN_F64, b, 2, (int64_t[]){2, 3});
    attn_view_init(&a1, ATTN_F64, b, 1, (int64_t[]){6});
    ck_assert_uint_eq(attn_diag_effective_rank_workspace_size(&a),
                      attn_diag_singular_values_workspace_size(&a));
    ck_assert_uint_ge(attn_diag_effective_rank_workspace_size(&a), 8 * (6 + 2));
    ck_assert_uint_eq(attn_diag_effective_rank_workspace_size(&a1), 0);
    ck_assert_uint_eq(attn_diag_effective_rank_workspace_size(NULL), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("diag");
    struct {
        const char *name;
        const TTest *tests[6];
    } cases[] = {
        {"attn_diag_entropy",
         {en_closed_forms, en_layouts_vs_reference, en_tolerance, en_errors}},
        {"attn_diag_entropy_mean", {em_vs_reference, em_errors}},
        {"attn_diag_softmax_jacobian_fro", {jf_closed_forms, jf_vs_dense, jf_tolerance, jf_errors}},
        {"attn_diag_softmax_jacobian_spectral",
         {js_closed_forms, js_vs_dense, js_tolerance, js_errors}},
        {"attn_diag_softmax_jacobian_spectral_workspace_size", {jw_sizes}},
        {"attn_diag_singular_values", {sv_vs_reference, sv_errors}},
        {"attn_diag_singular_values_workspace_size", {sw_sizes}},
        {"attn_diag_effective_rank", {er_known_rank, er_closed_forms, er_errors}},
        {"attn_diag_effective_rank_workspace_size", {ew_sizes}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c) {
        TCase *tc = tcase_create(cases[c].name);
        tcase_set_timeout(tc, 60);
        for (int t = 0; t < 6 && cases[c].tests[t]; ++t)
            tcase_add_test(tc, cases[c].tests[t]);
        suite_add_tcase(s, tc);
    }
    return tu_run(s);
}
