/* SPDX-License-Identifier: MIT */
/* Check suite for attn_gemm: layouts x transposes x batches x dtypes against a naive reference. */
#include <limits.h>

#include "ref/ref.h"
#include "testutil.h"

typedef enum layout {
    L_CONTIG,    /* row-major, ld = cols */
    L_COLMAJOR,  /* Fortran order, ld = rows */
    L_SLICED,    /* row-major with ld > cols (a column slice of a wider matrix) */
    L_COLSLICED, /* column-major with ld > rows */
    L_NEGATIVE,  /* rows reversed: negative row stride */
    L_STRIDED,   /* no unit stride at all: must be packed */
    L_BCAST,     /* every row the same (row stride 0): inputs only */
    L_COUNT
} layout;
static const char *layout_name[L_COUNT] = {"contig", "colmajor", "sliced", "colsliced",
                                           "negative", "strided", "bcast"};

/* A batched matrix view with the given layout; *mem must be freed. */
static attn_view make(attn_dtype dt, int nb, const int64_t *bshape, int64_t r, int64_t c,
                      layout l, void **mem, uint64_t *seed) {
    int64_t sr, sc, span, off = 0;
    switch (l) {
    case L_CONTIG: sr = c; sc = 1; span = r * c; break;
    case L_COLMAJOR: sr = 1; sc = r; span = r * c; break;
    case L_SLICED: sr = c + 3; sc = 1; span = r * (c + 3); break;
    case L_COLSLICED: sr = 1; sc = r + 2; span = c * (r + 2); break;
    case L_NEGATIVE: sr = -c; sc = 1; span = r * c; off = (r - 1) * c; break;
    case L_STRIDED: sr = 2 * c; sc = 2; span = 2 * r * c; break;
    default: sr = 0; sc = 1; span = c; break;
    }
    if (span < 1) span = 1;
    int64_t nbatch = 1;
    for (int i = 0; i < nb; ++i) nbatch *= bshape[i];
    size_t es = attn_dtype_size(dt);
    *mem = calloc((size_t)(span * nbatch), es);
    int64_t shape[4], stride[4];
    int64_t bs = span;
    for (int i = nb - 1; i >= 0; --i) { shape[i] = bshape[i]; stride[i] = bs; bs *= bshape[i]; }
    shape[nb] = r; stride[nb] = sr; shape[nb + 1] = c; stride[nb + 1] = sc;
    attn_view v;
    ck_assert_int_eq(attn_view_init_strided(&v, dt, (char *)*mem + off * (int64_t)es,
                                            nb + 2, shape, stride), ATTN_OK);
    /* fill the whole buffer, so packed layouts have junk between elements */
    attn_view all;
    attn_view_init(&all, dt, *mem, 1, (int64_t[]){span * nbatch});
    tu_fill(&all, seed, 1.0);
    return v;
}

typedef struct shape3 { int64_t m, n, k; } shape3;
static const shape3 shapes[] = {{3, 5, 4}, {1, 7, 2}, {6, 1, 3}, {4, 4, 0}, {2, 3, 1}};

typedef struct batchcfg { int nc, na, nb; int64_t c[2], a[2], b[2]; } batchcfg;
static const batchcfg batches[] = {
    {0, 0, 0, {0}, {0}, {0}},                    /* plain 2-D */
    {1, 1, 1, {3}, {3}, {3}},                    /* (3) everywhere */
    {2, 2, 0, {2, 3}, {2, 3}, {0}},              /* shared weight B: folds into one GEMM */
    {2, 1, 2, {2, 3}, {1}, {2, 3}},              /* A broadcast through extent 1 */
};

static void run_case(attn_dtype dt, attn_trans ta, attn_trans tb, layout la, layout lb,
                     layout lc, const shape3 *s, const batchcfg *bc, double alpha,
                     double beta) {
    uint64_t seed = 1234 + (uint64_t)la * 7 + (uint64_t)lb * 131 + (uint64_t)lc * 1009;
    void *ma, *mb, *mc, *mw;
    int64_t ar = ta ? s->k : s->m, ac = ta ? s->m : s->k;
    int64_t br = tb ? s->n : s->k, bcn = tb ? s->k : s->n;
    attn_view a = make(dt, bc->na, bc->a, ar, ac, la, &ma, &seed);
    attn_view b = make(dt, bc->nb, bc->b, br, bcn, lb, &mb, &seed);
    attn_view c = make(dt, bc->nc, bc->c, s->m, s->n, lc, &mc, &seed);
    attn_view want;
    int64_t wshape[4];
    for (int i = 0; i < c.ndim; ++i) wshape[i] = c.shape[i];
    mw = calloc((size_t)(tu_numel(&c) + 1), 8);
    attn_view_init(&want, ATTN_F64, mw, c.ndim, wshape);
    ref_gemm(ta, tb, alpha, &a, &b, beta, &c, &want);
    size_t ws = attn_gemm_workspace_size(ta, tb, &a, &b, &c);
    void *work = ws ? malloc(ws) : NULL;
    attn_status st = attn_gemm(ta, tb, alpha, &a, &b, beta, &c, work, ws);
    char what[160];
    snprintf(what, sizeof what, "%s ta=%d tb=%d A=%s B=%s C=%s m=%lld n=%lld k=%lld nb=%d",
             dt == ATTN_F64 ? "f64" : "f32", ta, tb, layout_name[la], layout_name[lb],
             layout_name[lc], (long long)s->m, (long long)s->n, (long long)s->k, bc->nc);
    ck_assert_msg(st == ATTN_OK, "%s: %s", what, attn_strerror(st));
    double tol = dt == ATTN_F64 ? 1e-13 : 1e-5;
    tu_check_close(&c, &want, tol, tol, what);
    free(work); free(ma); free(mb); free(mc); free(mw);
}

/* Every operand layout x transpose x shape x batch config, one dtype per test. */
static void sweep(attn_dtype dt) {
    static const layout out_layouts[] = {L_CONTIG, L_COLMAJOR, L_SLICED, L_COLSLICED,
                                         L_NEGATIVE, L_STRIDED};
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (int la = 0; la < L_COUNT; ++la)
                for (int lb = 0; lb < L_COUNT; ++lb)
                    for (size_t lc = 0; lc < 6; ++lc)
                        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; ++si)
                            for (size_t bi = 0; bi < sizeof batches / sizeof *batches; ++bi)
                                run_case(dt, ta, tb, la, lb, out_layouts[lc], &shapes[si],
                                         &batches[bi], si % 2 ? 0.5 : 1.0,
                                         bi % 2 ? 0.0 : -1.5);
}

START_TEST(gm_layouts_f64) { sweep(ATTN_F64); }
END_TEST
START_TEST(gm_layouts_f32) { sweep(ATTN_F32); }
END_TEST

START_TEST(gm_large_fold) {
    /* a (2, 64, 96) activation times a shared (96, 80) weight: the folded path */
    for (int d = 0; d < 2; ++d) {
        attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
        batchcfg bc = {1, 1, 0, {2}, {2}, {0}};
        shape3 s = {64, 80, 96};
        run_case(dt, ATTN_NO_TRANS, ATTN_NO_TRANS, L_CONTIG, L_COLMAJOR, L_CONTIG, &s, &bc,
                 1.0, 0.0);
        run_case(dt, ATTN_NO_TRANS, ATTN_TRANS, L_SLICED, L_CONTIG, L_SLICED, &s, &bc, 2.0,
                 1.0);
    }
}
END_TEST

START_TEST(gm_large_products) {
    /* products big enough for the BLAS's threads, and one-row products (GEMV) with
       long rows: every transpose, C row- and column-major and sliced, beta 0 and not */
    static const shape3 big[] = {{64, 700, 192}, {200, 530, 96}, {1, 700, 300}, {300, 1, 500}};
    static const layout outs[] = {L_CONTIG, L_COLMAJOR, L_SLICED};
    for (int d = 0; d < 2; ++d)
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb)
                for (size_t si = 0; si < sizeof big / sizeof *big; ++si)
                    for (size_t lc = 0; lc < 3; ++lc)
                        run_case(d ? ATTN_F64 : ATTN_F32, ta, tb, ta ? L_COLMAJOR : L_SLICED,
                                 tb ? L_CONTIG : L_COLSLICED, outs[lc], &big[si], &batches[0],
                                 si ? 0.5 : 1.0, lc == 1 ? 0.0 : -1.5);
}
END_TEST

START_TEST(gm_beta_zero_ignores_nan) {
    double a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {NAN, NAN, NAN, NAN};
    attn_view A, B, C;
    attn_view_init(&A, ATTN_F64, a, 2, (int64_t[]){2, 2});
    attn_view_init(&B, ATTN_F64, b, 2, (int64_t[]){2, 2});
    attn_view_init(&C, ATTN_F64, c, 2, (int64_t[]){2, 2});
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &A, &B, 0.0, &C, NULL, 0), ATTN_OK);
    for (int i = 0; i < 4; ++i) ck_assert(c[i] == a[i]);
    /* one row (GEMV), both dtypes */
    float af[2] = {1, 2}, bf[4] = {1, 0, 0, 1}, cf[2] = {NAN, NAN};
    attn_view_init(&A, ATTN_F32, af, 2, (int64_t[]){1, 2});
    attn_view_init(&B, ATTN_F32, bf, 2, (int64_t[]){2, 2});
    attn_view_init(&C, ATTN_F32, cf, 2, (int64_t[]){1, 2});
    ck_assert_int_eq(attn_gemm(0, 1, 1.0, &A, &B, 0.0, &C, NULL, 0), ATTN_OK);
    ck_assert(cf[0] == 1.0f && cf[1] == 2.0f);
    c[0] = c[1] = NAN;
    attn_view_init(&A, ATTN_F64, a, 2, (int64_t[]){1, 2});
    attn_view_init(&C, ATTN_F64, c, 2, (int64_t[]){1, 2});
    attn_view_init(&B, ATTN_F64, b, 2, (int64_t[]){2, 2});
    ck_assert_int_eq(attn_gemm(0, 0, 1.0, &A, &B, 0.0, &C, NULL, 0), ATTN_OK);
    ck_assert(c[0] == 1.0 && c[1] == 2.0);
}
END_TEST

/* Every status attn_gemm can return, each with C left exactly as it was. */
START_TEST(gm_errors) {
    float a[64], b[64], c[64], c0[64];
    double d[64];
    for (int i = 0; i < 64; ++i) a[i] = b[i] = (float)i, c[i] = c0[i] = -7.0f;
    attn_view A, B, C, D, U;
    attn_view_init(&A, ATTN_F32, a, 2, (int64_t[]){4, 3});
    attn_view_init(&B, ATTN_F32, b, 2, (int64_t[]){3, 5});
    attn_view_init(&C, ATTN_F32, c, 2, (int64_t[]){4, 5});
    attn_view_init(&D, ATTN_F64, d, 2, (int64_t[]){3, 5});
    attn_view_init(&U, ATTN_U8, d, 2, (int64_t[]){4, 5});
#define EXPECT(st, call)                                                        \
    do {                                                                        \
        ck_assert_int_eq((call), (st));                                         \
        ck_assert_msg(memcmp(c, c0, sizeof c) == 0, "C was written on error"); \
    } while (0)
    EXPECT(ATTN_EINVAL, attn_gemm(0, 0, 1, NULL, &B, 0, &C, NULL, 0));
    EXPECT(ATTN_EINVAL, attn_gemm((attn_trans)2, 0, 1, &A, &B, 0, &C, NULL, 0));
    attn_view v1;
    attn_view_init(&v1, ATTN_F32, a, 1, (int64_t[]){4});
    EXPECT(ATTN_EINVAL, attn_gemm(0, 0, 1, &v1, &B, 0, &C, NULL, 0));
    EXPECT(ATTN_EDTYPE, attn_gemm(0, 0, 1, &A, &D, 0, &C, NULL, 0));
    attn_view UA, UB;
    attn_view_init(&UA, ATTN_U8, a, 2, (int64_t[]){4, 3});
    attn_view_init(&UB, ATTN_U8, b, 2, (int64_t[]){3, 5});
    ck_assert_int_eq(attn_gemm(0, 0, 1, &UA, &UB, 0, &U, NULL, 0), ATTN_EDTYPE);
    EXPECT(ATTN_ESHAPE, attn_gemm(0, 1, 1, &A, &B, 0, &C, NULL, 0));
    EXPECT(ATTN_ESHAPE, attn_gemm(1, 0, 1, &A, &B, 0, &C, NULL, 0));
    attn_view B3, C3;
    attn_view_init(&B3, ATTN_F32, b, 3, (int64_t[]){2, 3, 5});
    attn_view_init(&C3, ATTN_F32, c, 3, (int64_t[]){3, 4, 5});
    EXPECT(ATTN_ESHAPE, attn_gemm(0, 0, 1, &A, &B3, 0, &C3, NULL, 0)); /* batch 2 vs 3 */
    attn_view A3;
    attn_view_init(&A3, ATTN_F32, a, 3, (int64_t[]){2, 4, 3});
    EXPECT(ATTN_ESHAPE, attn_gemm(0, 0, 1, &A3, &B, 0, &C, NULL, 0)); /* A has more batch dims */
    attn_view Cb;
    attn_view_init_strided(&Cb, ATTN_F32, c, 2, (int64_t[]){4, 5}, (int64_t[]){0, 1});
    EXPECT(ATTN_ESTRIDE, attn_gemm(0, 0, 1, &A, &B, 0, &Cb, NULL, 0));
    attn_view Ca;
    attn_view_init(&Ca, ATTN_F32, a + 2, 2, (int64_t[]){4, 5});
    ck_assert_int_eq(attn_gemm(0, 0, 1, &A, &B, 0, &Ca, NULL, 0), ATTN_EALIAS);
    /* M beyond INT_MAX: rejected before anything is touched (C is tiny) */
    attn_view Abig, Cbig;
    attn_view_init_strided(&Abig, ATTN_F32, a, 2, (int64_t[]){INT64_C(1) << 31, 3},
                           (int64_t[]){0, 1});
    attn_view_init_strided(&Cbig, ATTN_F32, c, 2, (int64_t[]){INT64_C(1) << 31, 5},
                           (int64_t[]){5, 1});
    EXPECT(ATTN_ERANGE, attn_gemm(0, 0, 1, &Abig, &B, 0, &Cbig, NULL, 0));
    /* packing needed: one byte short of the workspace is EWORKSPACE */
    attn_view As;
    attn_view_init_strided(&As, ATTN_F32, a, 2, (int64_t[]){4, 3}, (int64_t[]){6, 2});
    size_t ws = attn_gemm_workspace_size(0, 0, &As, &B, &C);
    ck_assert_uint_gt(ws, 0);
    char *w = malloc(ws);
    EXPECT(ATTN_EWORKSPACE, attn_gemm(0, 0, 1, &As, &B, 0, &C, w, ws - 1));
    EXPECT(ATTN_EWORKSPACE, attn_gemm(0, 0, 1, &As, &B, 0, &C, NULL, ws));
    ck_assert_int_eq(attn_gemm(0, 0, 1, &As, &B, 0, &C, w, ws), ATTN_OK);
    free(w);
    memcpy(c, c0, sizeof c);
    /* a packed operand of 2^62 bytes cannot be allocated: ENOMEM, C untouched */
    attn_view Ah, Bh, Ch;
    int64_t big = INT64_C(1) << 30;
    attn_view_init_strided(&Ah, ATTN_F32, a, 2, (int64_t[]){big, big}, (int64_t[]){0, 0});
    attn_view_init_strided(&Bh, ATTN_F32, b, 2, (int64_t[]){big, 1}, (int64_t[]){0, 0});
    /* C's 4 GiB span starts in static memory, far below the stack that holds a and b: it
       must not overlap them whatever the build's stack layout (else EALIAS, which the
       order of checks puts before the workspace, is the right answer) */
    static float ch[64];
    attn_view_init_strided(&Ch, ATTN_F32, ch, 2, (int64_t[]){big, 1}, (int64_t[]){1, 1});
    ck_assert(!attn_view_overlaps(&Ch, &Ah) && !attn_view_overlaps(&Ch, &Bh));
    EXPECT(ATTN_ENOMEM, attn_gemm(0, 0, 1, &Ah, &Bh, 0, &Ch, NULL, 0));
    ck_assert_uint_eq(attn_gemm_workspace_size(0, 1, &A, &B, &C), 0); /* invalid -> 0 */
#undef EXPECT
}
END_TEST

int main(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("attn_gemm");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gm_layouts_f64);
    tcase_add_test(tc, gm_layouts_f32);
    tcase_add_test(tc, gm_large_fold);
    tcase_add_test(tc, gm_large_products);
    tcase_add_test(tc, gm_beta_zero_ignores_nan);
    tcase_add_test(tc, gm_errors);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
