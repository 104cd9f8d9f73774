/* SPDX-License-Identifier: MIT */
/* Check suite for init.h: Philox known answers, reproducible fills, moments, scalings, orthogonal init. */
#include <float.h>
#include <pthread.h>

#include "ref/ref.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

typedef enum layout { L_CONTIG, L_TRANS, L_SLICED, L_NEG, L_PERM4, L_STRIDED1, L_COUNT } layout;
static const char *layout_name[L_COUNT] = {"contig", "transposed", "sliced",
                                           "negative", "permuted4", "strided1"};

/* A view of the given layout over a fresh buffer of `fill` values; *mem must be freed. */
static attn_view make(attn_dtype dt, layout l, void **mem, size_t *bytes) {
    size_t es = attn_dtype_size(dt);
    int64_t shape[4], stride[4], off = 0, span;
    int nd;
    switch (l) {
    case L_CONTIG: nd = 3; span = 2 * 3 * 5;
        memcpy(shape, (int64_t[]){2, 3, 5}, 24); memcpy(stride, (int64_t[]){15, 5, 1}, 24); break;
    case L_TRANS: nd = 2; span = 4 * 5; /* a (4, 5) buffer seen as (5, 4) */
        memcpy(shape, (int64_t[]){5, 4}, 16); memcpy(stride, (int64_t[]){1, 5}, 16); break;
    case L_SLICED: nd = 2; span = 4 * 7; /* 5 of 7 columns */
        memcpy(shape, (int64_t[]){4, 5}, 16); memcpy(stride, (int64_t[]){7, 1}, 16); break;
    case L_NEG: nd = 2; span = 3 * 6; off = 2 * 6 + 5; /* both axes reversed */
        memcpy(shape, (int64_t[]){3, 6}, 16); memcpy(stride, (int64_t[]){-6, -1}, 16); break;
    case L_PERM4: nd = 4; span = 2 * 3 * 2 * 4; /* (2,3,2,4) buffer permuted (0,2,1,3) */
        memcpy(shape, (int64_t[]){2, 2, 3, 4}, 32);
        memcpy(stride, (int64_t[]){24, 4, 8, 1}, 32); break;
    default: nd = 1; span = 3 * 9; /* every third element */
        shape[0] = 9; stride[0] = 3; break;
    }
    *bytes = (size_t)span * es;
    *mem = malloc(*bytes);
    memset(*mem, 0x5A, *bytes);
    attn_view v;
    ck_assert_int_eq(attn_view_init_strided(&v, dt, (char *)*mem + off * (int64_t)es, nd,
                                            shape, stride), ATTN_OK);
    return v;
}

/* Expected value at stream index i, computed from the reference generator. */
static double want_uniform(double lo, double hi, uint64_t seed, uint64_t st, uint64_t i) {
    double t = (hi - lo) * ref_uniform01(seed, st, i);
    return lo + t;
}

/* For every element in row-major order: got == want(offset + k), to rtol (0 = bitwise). */
typedef double (*want_fn)(double, double, uint64_t, uint64_t, uint64_t);
static double want_normal(double mean, double std, uint64_t seed, uint64_t st, uint64_t i) {
    double t = std * ref_normal(seed, st, i);
    return mean + t;
}
static void check_stream(const attn_view *v, want_fn fn, double a, double b, uint64_t seed,
                         uint64_t st, uint64_t offset, double rtol, const char *what) {
    if (tu_numel(v) == 0) return;
    int64_t idx[4] = {0};
    uint64_t k = 0;
    do {
        double w = fn(a, b, seed, st, offset + k);
        if (v->dtype == ATTN_F32) w = (float)w;
        double g = tu_get(v, idx);
        ck_assert_msg(fabs(g - w) <= rtol * fabs(w), "%s: element %llu got %.17g want %.17g",
                      what, (unsigned long long)k, g, w);
        ++k;
    } while (tu_inc(idx, v->shape, v->ndim));
}

/* ---- attn_philox4x32_10 ---------------------------------------------------- */

/* Random123 tests/kat_vectors, the three "philox4x32 10" lines: ctr[4] key[2] -> out[4]. */
static const uint32_t kat[3][10] = {
    {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
    {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
     0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
    {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
     0x94fdcceb, 0x5001e420, 0x24126ea1},
};

START_TEST(ph_known_answers) {
    for (int t = 0; t < 3; ++t) {
        uint32_t got[4], ref[4], inplace[4] = {kat[t][0], kat[t][1], kat[t][2], kat[t][3]};
        attn_philox4x32_10(kat[t], kat[t] + 4, got);
        ref_philox(kat[t], kat[t] + 4, ref);
        attn_philox4x32_10(inplace, kat[t] + 4, inplace); /* out may alias ctr */
        for (int k = 0; k < 4; ++k) {
            ck_assert_msg(got[k] == kat[t][6 + k], "kat %d word %d: %08x", t, k, got[k]);
            ck_assert_msg(ref[k] == kat[t][6 + k], "ref kat %d word %d: %08x", t, k, ref[k]);
            ck_assert_uint_eq(inplace[k], kat[t][6 + k]);
        }
    }
}
END_TEST

/* ---- attn_rng_bits ----------------------------------------------------------- */

START_TEST(rb_matches_reference) {
    static const uint64_t seeds[] = {0, 1, 20260918, UINT64_C(0xDEADBEEFCAFEF00D), UINT64_MAX};
    static const uint64_t streams[] = {0, 1, 7, UINT64_C(1) << 40, UINT64_MAX};
    static const uint64_t idx[] = {0, 1, 2, 3, 1001, UINT64_C(1) << 33, (UINT64_C(1) << 33) + 1,
                                   UINT64_MAX - 1, UINT64_MAX};
    for (size_t a = 0; a < 5; ++a)
        for (size_t b = 0; b < 5; ++b)
            for (size_t c = 0; c < sizeof idx / sizeof *idx; ++c)
                ck_assert_msg(attn_rng_bits(seeds[a], streams[b], idx[c]) ==
                                  ref_rng_bits(seeds[a], streams[b], idx[c]),
                              "seed %zu stream %zu index %zu", a, b, c);
    /* golden values: word i of (0, 0) are halves of the all-zero KAT block */
    ck_assert(attn_rng_bits(0, 0, 0) == UINT64_C(0xe169c58d6627e8d5));
    ck_assert(attn_rng_bits(0, 0, 1) == UINT64_C(0x9b00dbd8bc57ac4c));
    /* seeds and streams are independent sequences */
    ck_assert(attn_rng_bits(1, 0, 0) != attn_rng_bits(0, 0, 0));
    ck_assert(attn_rng_bits(0, 1, 0) != attn_rng_bits(0, 0, 0));
}
END_TEST

/* ---- attn_init_uniform ------------------------------------------------------- */

START_TEST(un_layouts_match_reference) {
    for (int d = 0; d < 2; ++d)
        for (int l = 0; l < L_COUNT; ++l) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            void *mem;
            size_t bytes;
            attn_view v = make(dt, (layout)l, &mem, &bytes);
            uint64_t offset = (uint64_t)l * 1000 + 3;
            ck_assert_int_eq(attn_init_uniform(42, 9, offset, -0.5, 1.5, &v), ATTN_OK);
            char what[64];
            snprintf(what, sizeof what, "%s %s", d ? "f64" : "f32", layout_name[l]);
            check_stream(&v, want_uniform, -0.5, 1.5, 42, 9, offset, 0.0, what);
            free(mem);
        }
}
END_TEST

/* A transposed view receives the transposed matrix of the same values. */
START_TEST(un_transposed_view_gets_transpose) {
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        double a[6 * 4], b[6 * 4];
        attn_view va, vb, vt;
        attn_view_init(&va, dt, a, 2, (int64_t[]){4, 6});
        attn_view_init(&vb, dt, b, 2, (int64_t[]){6, 4});
        attn_view_transpose(&vb, 0, 1, &vt); /* (4, 6) over b */
        ck_assert_int_eq(attn_init_uniform(5, 1, 0, 0, 1, &va), ATTN_OK);
        ck_assert_int_eq(attn_init_uniform(5, 1, 0, 0, 1, &vt), ATTN_OK);
        for (int64_t i = 0; i < 4; ++i)
            for (int64_t j = 0; j < 6; ++j) {
                int64_t ij[2] = {i, j}, ji[2] = {j, i};
                ck_assert(tu_get(&va, ij) == tu_get(&vb, ji));
            }
    }
}
END_TEST

/* Same arguments, same bits; another seed or stream, other bits. */
START_TEST(un_repeatable) {
    enum { N = 1000 };
    double a[N], b[N], c[N];
    attn_view va, vb, vc;
    attn_view_init(&va, ATTN_F64, a, 1, (int64_t[]){N});
    attn_view_init(&vb, ATTN_F64, b, 1, (int64_t[]){N});
    attn_view_init(&vc, ATTN_F64, c, 1, (int64_t[]){N});
    ck_assert_int_eq(attn_init_uniform(77, 3, 0, -1, 1, &va), ATTN_OK);
    ck_assert_int_eq(attn_init_uniform(77, 3, 0, -1, 1, &vb), ATTN_OK);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert_int_eq(attn_init_uniform(78, 3, 0, -1, 1, &vc), ATTN_OK);
    ck_assert(memcmp(a, c, sizeof a) != 0);
    ck_assert_int_eq(attn_init_uniform(77, 4, 0, -1, 1, &vc), ATTN_OK);
    ck_assert(memcmp(a, c, sizeof a) != 0);
}
END_TEST

/* Fill chunks of a view from several threads, each with its offset; compare to one fill. */
typedef struct chunk {
    attn_view v;
    uint64_t  offset;
    int       normal;
    attn_status st;
} chunk;
static void *fill_chunk(void *arg) {
    chunk *c = arg;
    c->st = c->normal ? attn_init_normal(2026, 11, c->offset, 0.25, 3.0, &c->v)
                      : attn_init_uniform(2026, 11, c->offset, -3.0, 2.0, &c->v);
    return NULL;
}
static void threaded_vs_serial(attn_dtype dt, int normal) {
    enum { R = 301, C = 37 }; /* odd chunk offsets split Box-Muller pairs */
    size_t es = attn_dtype_size(dt);
    char *serial = malloc(R * C * es), *par = malloc(R * C * es);
    attn_view s, p;
    attn_view_init(&s, dt, serial, 2, (int64_t[]){R, C});
    attn_view_init(&p, dt, par, 2, (int64_t[]){R, C});
    chunk whole = {s, 0, normal, ATTN_EINVAL};
    fill_chunk(&whole);
    ck_assert_int_eq(whole.st, ATTN_OK);
    static const int64_t cuts[][4] = {{0, 150, R, R}, {0, 101, 202, R}, {0, 1, 300, R}};
    for (int t = 0; t < 3; ++t) {
        memset(par, 0, R * C * es);
        chunk ch[3];
        pthread_t th[3];
        for (int k = 0; k < 3; ++k) {
            ck_assert_int_eq(attn_view_slice(&p, 0, cuts[t][k], cuts[t][k + 1], 1, &ch[k].v),
                             ATTN_OK);
            ch[k].offset = (uint64_t)(cuts[t][k] * C);
            ch[k].normal = normal;
            ck_assert_int_eq(pthread_create(&th[k], NULL, fill_chunk, &ch[k]), 0);
        }
        for (int k = 0; k < 3; ++k) {
            pthread_join(th[k], NULL);
            ck_assert_int_eq(ch[k].st, ATTN_OK);
        }
        ck_assert_msg(memcmp(serial, par, R * C * es) == 0, "cut %d differs", t);
    }
    free(serial);
    free(par);
}

START_TEST(un_threads_match_serial) {
    threaded_vs_serial(ATTN_F64, 0);
    threaded_vs_serial(ATTN_F32, 0);
}
END_TEST

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* Kolmogorov-Smirnov distance of sorted x[0..n) to the CDF F. */
static double ks_distance(double *x, int64_t n, double (*cdf)(double)) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    double d = 0;
    for (int64_t i = 0; i < n; ++i) {
        double f = cdf(x[i]);
        double a = (double)(i + 1) / (double)n - f, b = f - (double)i / (double)n;
        if (a > d) d = a;
        if (b > d) d = b;
    }
    return d;
}
static double cdf_unit(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }
static double cdf_normal(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

#define NMOM 1000000
/* mean and variance of n samples */
static void moments(const double *x, int64_t n, double *mean, double *var) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; ++i) ss += (x[i] - *mean) * (x[i] - *mean);
    *var = ss / (double)(n - 1);
}

START_TEST(un_moments) {
    double *x = malloc(NMOM * sizeof *x);
    attn_view v;
    attn_view_init(&v, ATTN_F64, x, 1, (int64_t[]){NMOM});
    ck_assert_int_eq(attn_init_uniform(123, 0, 0, -2.0, 3.0, &v), ATTN_OK);
    double mean, var;
    moments(x, NMOM, &mean, &var);
    /* 5 standard errors: sd(mean) = sqrt(25/12 / n), sd(var) = sqrt((625/80 - (25/12)^2) / n) */
    ck_assert_msg(fabs(mean - 0.5) < 5 * sqrt(25.0 / 12 / NMOM), "mean %.6f", mean);
    ck_assert_msg(fabs(var - 25.0 / 12) < 5 * sqrt((625.0 / 80 - 625.0 / 144) / NMOM),
                  "var %.6f", var);
    for (int64_t i = 0; i < NMOM; ++i) {
        ck_assert(x[i] >= -2.0 && x[i] < 3.0);
        x[i] = (x[i] + 2.0) / 5.0;
    }
    double d = ks_distance(x, NMOM, cdf_unit);
    ck_assert_msg(d < 1.95 / sqrt((double)NMOM), "KS distance %.3g (alpha 0.001)", d);
    free(x);
}
END_TEST

/* Values stay inside [lo, hi) in the target dtype, even for intervals of one value. */
START_TEST(un_bounds) {
    double x[64];
    float f[64];
    attn_view v, vf;
    attn_view_init(&v, ATTN_F64, x, 1, (int64_t[]){64});
    attn_view_init(&vf, ATTN_F32, f, 1, (int64_t[]){64});
    /* [1, 1 + ulp): lo + t rounds up to hi for about half the draws; all must be 1 */
    ck_assert_int_eq(attn_init_uniform(1, 2, 0, 1.0, nextafter(1.0, 2.0), &v), ATTN_OK);
    for (int i = 0; i < 64; ++i) ck_assert(x[i] == 1.0);
    ck_assert_int_eq(attn_init_uniform(1, 2, 0, 1.0, 1.0 + 1e-9, &vf), ATTN_OK);
    for (int i = 0; i < 64; ++i) ck_assert(f[i] == 1.0f);
    ck_assert_int_eq(attn_init_uniform(1, 2, 0, 0.1, 0.2, &vf), ATTN_OK); /* inexact bounds */
    for (int i = 0; i < 64; ++i) ck_assert((double)f[i] >= 0.1 && (double)f[i] < 0.2);
    ck_assert_int_eq(attn_init_uniform(1, 2, 0, -1e300, 1e300, &v), ATTN_OK);
    /* the last indices of the counter space are valid */
    ck_assert_int_eq(attn_init_uniform(1, 2, UINT64_MAX - 63, 0, 1, &v), ATTN_OK);
    check_stream(&v, want_uniform, 0, 1, 1, 2, UINT64_MAX - 63, 0.0, "counter end");
}
END_TEST

/* Every status, with the buffer left exactly as it was. */
static void fill_errors(int normal) {
    double buf[64], keep[64];
    for (int i = 0; i < 64; ++i) buf[i] = keep[i] = -7.25;
    attn_view v, vf, u, bc, ov, bad;
    attn_view_init(&v, ATTN_F64, buf, 2, (int64_t[]){4, 5});
    attn_view_init(&vf, ATTN_F32, buf, 2, (int64_t[]){4, 5});
    attn_view_init(&u, ATTN_U8, buf, 2, (int64_t[]){4, 5});
    attn_view_init_strided(&bc, ATTN_F64, buf, 2, (int64_t[]){4, 5}, (int64_t[]){0, 1});
    attn_view_init_strided(&ov, ATTN_F64, buf, 2, (int64_t[]){4, 5}, (int64_t[]){1, 1});
    bad = v;
    bad.ndim = 0;
#define FILL(view, a, b, off)                                                   \
    (normal ? attn_init_normal(1, 1, (off), (a), (b), (view))                   \
            : attn_init_uniform(1, 1, (off), (a), (b), (view)))
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert_msg(memcmp(buf, keep, sizeof buf) == 0, "written on error");  \
    } while (0)
    EXPECT(ATTN_EINVAL, FILL(NULL, 0, 1, 0));
    EXPECT(ATTN_EINVAL, FILL(&bad, 0, 1, 0));
    EXPECT(ATTN_EDTYPE, FILL(&u, 0, 1, 0));
    EXPECT(ATTN_ESTRIDE, FILL(&bc, 0, 1, 0));
    EXPECT(ATTN_ESTRIDE, FILL(&ov, 0, 1, 0));
    EXPECT(ATTN_ERANGE, FILL(&v, 0, 1, UINT64_MAX - 18)); /* needs indices up to max + 1 */
    EXPECT(ATTN_EINVAL, FILL(&v, NAN, 1, 0));
    EXPECT(ATTN_EINVAL, FILL(&v, 0, INFINITY, 0));
    if (normal) {
        EXPECT(ATTN_EINVAL, FILL(&v, 0, -1, 0));
        EXPECT(ATTN_ERANGE, FILL(&v, 0, DBL_MAX / 8, 0));
        EXPECT(ATTN_ERANGE, FILL(&vf, 0, 1e38, 0));
    } else {
        EXPECT(ATTN_EINVAL, FILL(&v, 1, 1, 0));
        EXPECT(ATTN_EINVAL, FILL(&v, 2, 1, 0));
        EXPECT(ATTN_ERANGE, FILL(&v, -DBL_MAX, DBL_MAX, 0));
        EXPECT(ATTN_ERANGE, FILL(&vf, -1e39, 0, 0));
        EXPECT(ATTN_EINVAL, FILL(&vf, 1.0 + 1e-9, 1.0 + 2e-9, 0)); /* no float inside */
    }
    ck_assert_int_eq(FILL(&v, 0, 1, UINT64_MAX - 19), ATTN_OK); /* the boundary itself */
#undef FILL
#undef EXPECT
}

START_TEST(un_errors) { fill_errors(0); }
END_TEST

/* ---- attn_init_normal -------------------------------------------------------- */

START_TEST(no_layouts_match_reference) {
    for (int d = 0; d < 2; ++d)
        for (int l = 0; l < L_COUNT; ++l) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            void *mem;
            size_t bytes;
            attn_view v = make(dt, (layout)l, &mem, &bytes);
            uint64_t offset = (uint64_t)l * 7 + 1; /* odd: starts mid-pair */
            ck_assert_int_eq(attn_init_normal(8, 2, offset, 1.0, 0.5, &v), ATTN_OK);
            char what[64];
            snprintf(what, sizeof what, "%s %s", d ? "f64" : "f32", layout_name[l]);
            /* libm's log/sin/cos: allow a few ulp against the reference's calls */
            check_stream(&v, want_normal, 1.0, 0.5, 8, 2, offset, d ? 1e-15 : 1.2e-7, what);
            free(mem);
        }
}
END_TEST

START_TEST(no_threads_match_serial) {
    threaded_vs_serial(ATTN_F64, 1);
    threaded_vs_serial(ATTN_F32, 1);
}
END_TEST

START_TEST(no_moments) {
    double *x = malloc(NMOM * sizeof *x);
    attn_view v;
    attn_view_init(&v, ATTN_F64, x, 1, (int64_t[]){NMOM});
    ck_assert_int_eq(attn_init_normal(99, 5, 0, 1.5, 2.0, &v), ATTN_OK);
    double mean, var;
    moments(x, NMOM, &mean, &var);
    /* sd(mean) = 2 / sqrt(n); sd(var) = 4 sqrt(2 / n) */
    ck_assert_msg(fabs(mean - 1.5) < 5 * 2.0 / sqrt((double)NMOM), "mean %.6f", mean);
    ck_assert_msg(fabs(var - 4.0) < 5 * 4.0 * sqrt(2.0 / NMOM), "var %.6f", var);
    for (int64_t i = 0; i < NMOM; ++i) x[i] = (x[i] - 1.5) / 2.0;
    double d = ks_distance(x, NMOM, cdf_normal);
    ck_assert_msg(d < 1.95 / sqrt((double)NMOM), "KS distance %.3g (alpha 0.001)", d);
    ck_assert(fabs(x[0]) < 8.6 && fabs(x[NMOM - 1]) < 8.6); /* sorted: the extremes */
    free(x);
}
END_TEST

START_TEST(no_errors) { fill_errors(1); }
END_TEST

/* ---- attn_init_xavier / attn_init_kaiming ----------------------------------- */

/* w (in, out) filled with U(-a, a) or N(0, s^2) as the reference computes it. */
static void check_scaled(attn_view *w, attn_init_dist dist, double scale, uint64_t seed,
                         uint64_t st, const char *what) {
    double tol = w->dtype == ATTN_F64 ? (dist == ATTN_INIT_UNIFORM ? 0 : 1e-15) : 1.2e-7;
    if (dist == ATTN_INIT_UNIFORM)
        check_stream(w, want_uniform, -scale, scale, seed, st, 0, tol, what);
    else
        check_stream(w, want_normal, 0.0, scale, seed, st, 0, tol, what);
}

START_TEST(xa_scale) {
    for (int d = 0; d < 2; ++d)
        for (int dist = 0; dist < 2; ++dist) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            double *buf = malloc(30 * 20 * sizeof(double));
            attn_view w, wt;
            attn_view_init(&w, dt, buf, 2, (int64_t[]){30, 20}); /* in 30, out 20 */
            double fac = dist == ATTN_INIT_UNIFORM ? 6.0 : 2.0;
            ck_assert_int_eq(attn_init_xavier(dist, 0, 3, 4, &w), ATTN_OK);
            check_scaled(&w, dist, sqrt(fac / 50), 3, 4, "xavier gain 0");
            ck_assert_int_eq(attn_init_xavier(dist, 2.5, 3, 4, &w), ATTN_OK);
            check_scaled(&w, dist, 2.5 * sqrt(fac / 50), 3, 4, "xavier gain 2.5");
            /* a PyTorch (out, in) buffer viewed transposed: the same fans */
            attn_view_init(&wt, dt, buf, 2, (int64_t[]){20, 30});
            attn_view_transpose(&wt, 0, 1, &wt);
            ck_assert_int_eq(attn_init_xavier(dist, 1, 3, 4, &wt), ATTN_OK);
            check_scaled(&wt, dist, sqrt(fac / 50), 3, 4, "xavier transposed");
            free(buf);
        }
}
END_TEST

static void scaled_errors(attn_status (*fn)(attn_init_dist, double, uint64_t, uint64_t,
                                            attn_view *)) {
    double buf[64], keep[64];
    for (int i = 0; i < 64; ++i) buf[i] = keep[i] = 3.5;
    attn_view v, v3, u, bc, empty;
    attn_view_init(&v, ATTN_F64, buf, 2, (int64_t[]){4, 5});
    attn_view_init(&v3, ATTN_F64, buf, 3, (int64_t[]){2, 2, 5});
    attn_view_init(&u, ATTN_U8, buf, 2, (int64_t[]){4, 5});
    attn_view_init_strided(&bc, ATTN_F64, buf, 2, (int64_t[]){4, 5}, (int64_t[]){5, 0});
    attn_view_init(&empty, ATTN_F64, buf, 2, (int64_t[]){0, 5});
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert_msg(memcmp(buf, keep, sizeof buf) == 0, "written on error");  \
    } while (0)
    EXPECT(ATTN_EINVAL, fn(ATTN_INIT_UNIFORM, 1, 0, 0, NULL));
    EXPECT(ATTN_EINVAL, fn((attn_init_dist)2, 1, 0, 0, &v));
    EXPECT(ATTN_EINVAL, fn(ATTN_INIT_NORMAL, -1, 0, 0, &v));
    EXPECT(ATTN_EINVAL, fn(ATTN_INIT_NORMAL, NAN, 0, 0, &v));
    EXPECT(ATTN_ESHAPE, fn(ATTN_INIT_NORMAL, 1, 0, 0, &v3));
    EXPECT(ATTN_EDTYPE, fn(ATTN_INIT_NORMAL, 1, 0, 0, &u));
    EXPECT(ATTN_ESTRIDE, fn(ATTN_INIT_UNIFORM, 1, 0, 0, &bc));
    EXPECT(ATTN_ERANGE, fn(ATTN_INIT_UNIFORM, DBL_MAX, 0, 0, &v));
    EXPECT(ATTN_OK, fn(ATTN_INIT_UNIFORM, 1, 0, 0, &empty)); /* nothing to do */
#undef EXPECT
}

START_TEST(xa_errors) { scaled_errors(attn_init_xavier); }
END_TEST

START_TEST(ka_scale) {
    for (int d = 0; d < 2; ++d)
        for (int dist = 0; dist < 2; ++dist) {
            attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
            double buf[24 * 10];
            attn_view w;
            attn_view_init(&w, dt, buf, 2, (int64_t[]){24, 10}); /* fan_in 24 */
            double fac = dist == ATTN_INIT_UNIFORM ? 3.0 : 1.0;
            ck_assert_int_eq(attn_init_kaiming(dist, 0, 6, 1, &w), ATTN_OK);
            check_scaled(&w, dist, sqrt(2.0) * sqrt(fac / 24), 6, 1, "kaiming relu gain");
            ck_assert_int_eq(attn_init_kaiming(dist, 1, 6, 1, &w), ATTN_OK);
            check_scaled(&w, dist, sqrt(fac / 24), 6, 1, "kaiming gain 1");
        }
}
END_TEST

START_TEST(ka_errors) { scaled_errors(attn_init_kaiming); }
END_TEST

/* ---- attn_init_orthogonal ------------------------------------------------------ */

/* max |W^T W - g^2 I| (tall) or |W W^T - g^2 I| (wide), in double. */
static double ortho_defect(const attn_view *w, double gain) {
    int64_t m = w->shape[0], n = w->shape[1];
    int tall = m >= n;
    int64_t q = tall ? n : m, l = tall ? m : n;
    double worst = 0;
    for (int64_t a = 0; a < q; ++a)
        for (int64_t b = 0; b < q; ++b) {
            double s = 0;
            for (int64_t r = 0; r < l; ++r) {
                int64_t x[2] = {tall ? r : a, tall ? a : r}, y[2] = {tall ? r : b, tall ? b : r};
                s += tu_get(w, x) * tu_get(w, y);
            }
            double e = fabs(s - (a == b ? gain * gain : 0));
            if (e > worst) worst = e;
        }
    return worst;
}

static const int64_t oshapes[][2] = {{8, 8}, {12, 5}, {5, 12}, {1, 1}, {7, 1}, {1, 7}, {33, 33}};

START_TEST(or_orthonormal) {
    for (int d = 0; d < 2; ++d)
        for (size_t s = 0; s < sizeof oshapes / sizeof *oshapes; ++s)
            for (int g = 0; g < 2; ++g) {
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                int64_t m = oshapes[s][0], n = oshapes[s][1];
                double gain = g ? 0.5 : 0; /* 0 -> 1 */
                double *buf = malloc((size_t)(m * n) * sizeof(double));
                attn_view w;
                attn_view_init(&w, dt, buf, 2, (int64_t[]){m, n});
                int info = 123;
                ck_assert_int_eq(attn_init_orthogonal(gain, 17, 2, &w, NULL, 0, &info), ATTN_OK);
                ck_assert_int_eq(info, 0);
                double e = ortho_defect(&w, g ? 0.5 : 1.0);
                ck_assert_msg(e < (d ? 1e-12 : 1e-5), "%s (%lld, %lld): defect %.3g",
                              d ? "f64" : "f32", (long long)m, (long long)n, e);
                free(buf);
            }
}
END_TEST

/*
 * QR with a positive R diagonal is unique, so the sign-corrected Householder Q
 * must equal Gram-Schmidt's Q of the same Gaussian matrix.
 */
START_TEST(or_matches_gram_schmidt) {
    for (size_t s = 0; s < sizeof oshapes / sizeof *oshapes; ++s) {
        int64_t m = oshapes[s][0], n = oshapes[s][1];
        double *buf = malloc((size_t)(m * n) * sizeof(double));
        double *ref = malloc((size_t)(m * n) * sizeof(double));
        attn_view w, r;
        attn_view_init(&w, ATTN_F64, buf, 2, (int64_t[]){m, n});
        attn_view_init(&r, ATTN_F64, ref, 2, (int64_t[]){m, n});
        ck_assert_int_eq(attn_init_orthogonal(1.5, 2026, 7, &w, NULL, 0, NULL), ATTN_OK);
        ref_orthogonal(1.5, 2026, 7, m, n, ref);
        tu_check_close(&w, &r, 0, 1e-11, "orthogonal vs Gram-Schmidt");
        free(buf);
        free(ref);
    }
}
END_TEST

/* Strided, transposed and reversed outputs receive the same logical matrix. */
START_TEST(or_strided_outputs) {
    enum { M = 9, N = 4 };
    double base[M * N], t[M * N], neg[M * 2 * N];
    attn_view vb, vt, vn;
    attn_view_init(&vb, ATTN_F64, base, 2, (int64_t[]){M, N});
    attn_view_init(&vt, ATTN_F64, t, 2, (int64_t[]){N, M});
    attn_view_transpose(&vt, 0, 1, &vt);
    attn_view_init_strided(&vn, ATTN_F64, neg + (M - 1) * 2 * N + 2 * (N - 1), 2,
                           (int64_t[]){M, N}, (int64_t[]){-2 * N, -2});
    ck_assert_int_eq(attn_init_orthogonal(1, 5, 5, &vb, NULL, 0, NULL), ATTN_OK);
    ck_assert_int_eq(attn_init_orthogonal(1, 5, 5, &vt, NULL, 0, NULL), ATTN_OK);
    ck_assert_int_eq(attn_init_orthogonal(1, 5, 5, &vn, NULL, 0, NULL), ATTN_OK);
    tu_check_close(&vt, &vb, 0, 0, "transposed output");
    tu_check_close(&vn, &vb, 0, 0, "negative strides");
    /* and the result repeats exactly, with the caller's workspace */
    double again[M * N];
    attn_view va;
    attn_view_init(&va, ATTN_F64, again, 2, (int64_t[]){M, N});
    size_t ws = attn_init_orthogonal_workspace_size(&va);
    void *work = malloc(ws);
    ck_assert_int_eq(attn_init_orthogonal(1, 5, 5, &va, work, ws, NULL), ATTN_OK);
    ck_assert(memcmp(again, base, sizeof base) == 0);
    free(work);
}
END_TEST

START_TEST(or_errors) {
    double buf[64], keep[64];
    for (int i = 0; i < 64; ++i) buf[i] = keep[i] = 9.0;
    attn_view v, v1, u, bc, empty;
    attn_view_init(&v, ATTN_F64, buf, 2, (int64_t[]){6, 4});
    attn_view_init(&v1, ATTN_F64, buf, 1, (int64_t[]){6});
    attn_view_init(&u, ATTN_U8, buf, 2, (int64_t[]){6, 4});
    attn_view_init_strided(&bc, ATTN_F64, buf, 2, (int64_t[]){6, 4}, (int64_t[]){0, 1});
    attn_view_init(&empty, ATTN_F64, buf, 2, (int64_t[]){0, 4});
    int info = 55;
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert_msg(memcmp(buf, keep, sizeof buf) == 0, "written on error");  \
    } while (0)
    EXPECT(ATTN_EINVAL, attn_init_orthogonal(1, 0, 0, NULL, NULL, 0, &info));
    ck_assert_int_eq(info, 0); /* always written */
    EXPECT(ATTN_EINVAL, attn_init_orthogonal(-1, 0, 0, &v, NULL, 0, NULL));
    EXPECT(ATTN_EINVAL, attn_init_orthogonal(INFINITY, 0, 0, &v, NULL, 0, NULL));
    EXPECT(ATTN_ESHAPE, attn_init_orthogonal(1, 0, 0, &v1, NULL, 0, NULL));
    EXPECT(ATTN_EDTYPE, attn_init_orthogonal(1, 0, 0, &u, NULL, 0, NULL));
    EXPECT(ATTN_ESTRIDE, attn_init_orthogonal(1, 0, 0, &bc, NULL, 0, NULL));
    size_t ws = attn_init_orthogonal_workspace_size(&v);
    ck_assert_uint_gt(ws, 0);
    char *w = malloc(ws);
    EXPECT(ATTN_EWORKSPACE, attn_init_orthogonal(1, 0, 0, &v, w, ws - 1, NULL));
    EXPECT(ATTN_EWORKSPACE, attn_init_orthogonal(1, 0, 0, &v, NULL, ws, NULL));
    free(w);
    /* a dim beyond LAPACK's int: refused before any allocation */
    attn_view huge;
    attn_view_init_strided(&huge, ATTN_F64, buf, 2, (int64_t[]){INT64_C(1) << 31, 1},
                           (int64_t[]){1, 1});
    EXPECT(ATTN_ERANGE, attn_init_orthogonal(1, 0, 0, &huge, NULL, 0, NULL));
    EXPECT(ATTN_OK, attn_init_orthogonal(1, 0, 0, &empty, NULL, 0, NULL));
#undef EXPECT
}
END_TEST

/* ---- attn_init_orthogonal_workspace_size ------------------------------------- */

START_TEST(ow_sizes) {
    double buf[4];
    attn_view v, big, empty, v3, u;
    attn_view_init(&v, ATTN_F64, buf, 2, (int64_t[]){2, 2});
    attn_view_init_strided(&big, ATTN_F32, buf, 2, (int64_t[]){300, 40}, (int64_t[]){0, 0});
    attn_view_init(&empty, ATTN_F64, buf, 2, (int64_t[]){3, 0});
    attn_view_init(&v3, ATTN_F64, buf, 3, (int64_t[]){1, 2, 2});
    attn_view_init(&u, ATTN_U8, buf, 2, (int64_t[]){2, 2});
    /* at least the (p, q) double matrix, its tau and signs */
    ck_assert_uint_ge(attn_init_orthogonal_workspace_size(&v), 4 * 8 + 2 * 2 * 8);
    ck_assert_uint_ge(attn_init_orthogonal_workspace_size(&big), 300 * 40 * 8);
    ck_assert_uint_eq(attn_init_orthogonal_workspace_size(&empty), 0);
    ck_assert_uint_eq(attn_init_orthogonal_workspace_size(NULL), 0);
    ck_assert_uint_eq(attn_init_orthogonal_workspace_size(&v3), 0);
    ck_assert_uint_eq(attn_init_orthogonal_workspace_size(&u), 0);
}
END_TEST

/* ---- layer helpers ---------------------------------------------------------------- */

/* w (in, out) equals Xavier-uniform of stream st, computed from the reference. */
static void check_xavier(const attn_view *w, uint64_t seed, uint64_t st, const char *what) {
    double a = sqrt(6.0 / (double)(w->shape[0] + w->shape[1]));
    check_stream(w, want_uniform, -a, a, seed, st, 0, 0.0, what);
}
static void check_const(const attn_view *v, double c, const char *what) {
    int64_t idx[4] = {0};
    if (tu_numel(v) == 0) return;
    do ck_assert_msg(tu_get(v, idx) == c, "%s: %g", what, tu_get(v, idx));
    while (tu_inc(idx, v->shape, v->ndim));
}

static const attn_mha_config mha_cfgs[] = {
    {.dtype = ATTN_F64, .d_model = 8, .heads = 2, .bias = true},
    {.dtype = ATTN_F32, .d_model = 6, .heads = 4, .kv_heads = 2, .d_head = 3, .d_kv = 5},
};

START_TEST(lm_weights_and_biases) {
    for (size_t c = 0; c < sizeof mha_cfgs / sizeof *mha_cfgs; ++c) {
        const attn_mha_config *cfg = &mha_cfgs[c];
        size_t bytes = attn_mha_params_size(cfg);
        char *slab = aligned_alloc(64, bytes);
        memset(slab, 0xFF, bytes); /* NaN everywhere */
        attn_mha_params p;
        ck_assert_int_eq(attn_mha_params_bind(&p, cfg, slab, bytes), ATTN_OK);
        ck_assert_int_eq(attn_mha_params_init(cfg, &p, 2026), ATTN_OK);
        check_xavier(&p.wq, 2026, ATTN_STREAM_WQ, "wq");
        check_xavier(&p.wk, 2026, ATTN_STREAM_WK, "wk");
        check_xavier(&p.wv, 2026, ATTN_STREAM_WV, "wv");
        check_xavier(&p.wo, 2026, ATTN_STREAM_WO, "wo");
        if (cfg->bias) {
            check_const(&p.bq, 0, "bq"); check_const(&p.bk, 0, "bk");
            check_const(&p.bv, 0, "bv"); check_const(&p.bo, 0, "bo");
        }
        free(slab);
    }
}
END_TEST

/* Every status, with the parameter slab left as it was. */
START_TEST(lm_errors) {
    const attn_mha_config *cfg = &mha_cfgs[0];
    size_t bytes = attn_mha_params_size(cfg);
    char *slab = aligned_alloc(64, bytes), *keep = malloc(bytes);
    memset(slab, 0x11, bytes);
    memcpy(keep, slab, bytes);
    attn_mha_params p, q;
    ck_assert_int_eq(attn_mha_params_bind(&p, cfg, slab, bytes), ATTN_OK);
    attn_mha_config bad = *cfg, f32 = *cfg;
    bad.heads = 3; /* 8 % 3 != 0 */
    f32.dtype = ATTN_F32;
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert_msg(memcmp(slab, keep, bytes) == 0, "written on error");      \
    } while (0)
    EXPECT(ATTN_EINVAL, attn_mha_params_init(NULL, &p, 1));
    EXPECT(ATTN_EINVAL, attn_mha_params_init(cfg, NULL, 1));
    EXPECT(ATTN_EINVAL, attn_mha_params_init(&bad, &p, 1));
    EXPECT(ATTN_EDTYPE, attn_mha_params_init(&f32, &p, 1));
    q = p; q.bo.shape[0] = 7; /* the last view checked: nothing before it may be written */
    EXPECT(ATTN_ESHAPE, attn_mha_params_init(cfg, &q, 1));
    q = p; q.wo.stride[0] = 0;
    EXPECT(ATTN_ESTRIDE, attn_mha_params_init(cfg, &q, 1));
    q = p; q.wk.ndim = 1;
    EXPECT(ATTN_ESHAPE, attn_mha_params_init(cfg, &q, 1));
#undef EXPECT
    free(slab);
    free(keep);
}
END_TEST

START_TEST(lf_weights_and_biases) {
    for (int b = 0; b < 2; ++b) {
        attn_ffn_config cfg = {.dtype = b ? ATTN_F64 : ATTN_F32, .d_model = 6, .bias = b};
        size_t bytes = attn_ffn_params_size(&cfg);
        char *slab = aligned_alloc(64, bytes);
        memset(slab, 0xFF, bytes);
        attn_ffn_params p;
        ck_assert_int_eq(attn_ffn_params_bind(&p, &cfg, slab, bytes), ATTN_OK);
        ck_assert_int_eq(attn_ffn_params_init(&cfg, &p, 7), ATTN_OK);
        ck_assert_int_eq(p.w1.shape[1], 24); /* d_ff 0 -> 4 C */
        check_xavier(&p.w1, 7, ATTN_STREAM_W1, "w1");
        check_xavier(&p.w2, 7, ATTN_STREAM_W2, "w2");
        if (b) { check_const(&p.b1, 0, "b1"); check_const(&p.b2, 0, "b2"); }
        ck_assert_int_eq(attn_ffn_params_init(NULL, &p, 7), ATTN_EINVAL);
        attn_ffn_config bad = cfg;
        bad.d_model = 0;
        ck_assert_int_eq(attn_ffn_params_init(&bad, &p, 7), ATTN_EINVAL);
        attn_ffn_params q = p;
        q.w2.shape[1] = 5;
        ck_assert_int_eq(attn_ffn_params_init(&cfg, &q, 7), ATTN_ESHAPE);
        free(slab);
    }
}
END_TEST

/* An encoder's MHA and FFN equal standalone ones of the same seed; LayerNorm is (1, 0). */
START_TEST(le_matches_parts) {
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F64, .d_model = 8, .heads = 2, .bias = true},
        .ffn = {.dtype = ATTN_F64, .d_model = 8, .d_ff = 12, .bias = true},
        .ln_affine = true};
    size_t eb = attn_encoder_params_size(&cfg), mb = attn_mha_params_size(&cfg.mha),
           fb = attn_ffn_params_size(&cfg.ffn);
    char *es = aligned_alloc(64, eb), *ms = aligned_alloc(64, mb), *fs = aligned_alloc(64, fb);
    memset(es, 0xFF, eb);
    attn_encoder_params e;
    attn_mha_params m;
    attn_ffn_params f;
    ck_assert_int_eq(attn_encoder_params_bind(&e, &cfg, es, eb), ATTN_OK);
    ck_assert_int_eq(attn_mha_params_bind(&m, &cfg.mha, ms, mb), ATTN_OK);
    ck_assert_int_eq(attn_ffn_params_bind(&f, &cfg.ffn, fs, fb), ATTN_OK);
    ck_assert_int_eq(attn_encoder_params_init(&cfg, &e, 99), ATTN_OK);
    ck_assert_int_eq(attn_mha_params_init(&cfg.mha, &m, 99), ATTN_OK);
    ck_assert_int_eq(attn_ffn_params_init(&cfg.ffn, &f, 99), ATTN_OK);
    const attn_view *ev[] = {&e.mha.wq, &e.mha.wk, &e.mha.wv, &e.mha.wo, &e.mha.bo,
                             &e.ffn.w1, &e.ffn.w2, &e.ffn.b1};
    const attn_view *sv[] = {&m.wq, &m.wk, &m.wv, &m.wo, &m.bo, &f.w1, &f.w2, &f.b1};
    for (int i = 0; i < 8; ++i) tu_check_close(ev[i], sv[i], 0, 0, "encoder part");
    check_const(&e.ln1_g, 1, "ln1_g"); check_const(&e.ln1_b, 0, "ln1_b");
    check_const(&e.ln2_g, 1, "ln2_g"); check_const(&e.ln2_b, 0, "ln2_b");
    /* errors: nothing written */
    memset(es, 0x22, eb);
    char *keep = malloc(eb);
    memcpy(keep, es, eb);
    attn_encoder_config bad = cfg;
    bad.ffn.d_model = 6;
    ck_assert_int_eq(attn_encoder_params_init(&bad, &e, 1), ATTN_EINVAL);
    ck_assert_int_eq(attn_encoder_params_init(&cfg, NULL, 1), ATTN_EINVAL);
    attn_encoder_params q = e;
    q.ln2_b.shape[0] = 9; /* checked last */
    ck_assert_int_eq(attn_encoder_params_init(&cfg, &q, 1), ATTN_ESHAPE);
    q = e;
    q.ffn.w1.dtype = ATTN_F32;
    ck_assert_int_eq(attn_encoder_params_init(&cfg, &q, 1), ATTN_EDTYPE);
    ck_assert(memcmp(es, keep, eb) == 0);
    free(es); free(ms); free(fs); free(keep);
}
END_TEST

int main(void) {
    Suite *s = suite_create("init");
    struct {
        const char *name;
        const TTest *tests[8];
    } cases[] = {
        {"attn_philox4x32_10", {ph_known_answers}},
        {"attn_rng_bits", {rb_matches_reference}},
        {"attn_init_uniform",
         {un_layouts_match_reference, un_transposed_view_gets_transpose, un_repeatable,
          un_threads_match_serial, un_moments, un_bounds, un_errors}},
        {"attn_init_normal",
         {no_layouts_match_reference, no_threads_match_serial, no_moments, no_errors}},
        {"attn_init_xavier", {xa_scale, xa_errors}},
        {"attn_init_kaiming", {ka_scale, ka_errors}},
        {"attn_init_orthogonal",
         {or_orthonormal, or_matches_gram_schmidt, or_strided_outputs, or_errors}},
        {"attn_init_orthogonal_workspace_size", {ow_sizes}},
        {"attn_mha_params_init", {lm_weights_and_biases, lm_errors}},
        {"attn_ffn_params_init", {lf_weights_and_biases}},
        {"attn_encoder_params_init", {le_matches_parts}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c) {
        TCase *tc = tcase_create(cases[c].name);
        tcase_set_timeout(tc, 60);
        for (int t = 0; t < 8 && cases[c].tests[t]; ++t)
            tcase_add_test(tc, cases[c].tests[t]);
        suite_add_tcase(s, tc);
    }
    return tu_run(s);
}
