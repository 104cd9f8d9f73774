/* SPDX-License-Identifier: MIT */
/* Check suite for positional encodings (sinusoidal, learned tables, RoPE) and patchify:
 * naive references, the seeds' own numbers, RoPE's rotation properties. */
#include "kernel_util.h"
#include "ref/ref.h"

static const attn_dtype dts[2] = {ATTN_F32, ATTN_F64};

/* ======================================================================================
 * attn_posenc_sinusoidal
 * ====================================================================================== */

START_TEST(ps_layouts) {
    static const int64_t shapes[][2] = {{4, 4}, {7, 10}, {1, 2}, {0, 6}, {5, 0}, {33, 64}};
    static const double bases[] = {0, 100, 2.5};
    for (int d = 0; d < 2; ++d)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; ++si)
            for (int l = 0; l < NOUT_LAYS; ++l)
                for (int bi = 0; bi < 3; ++bi) {
                    uint64_t seed = 5 + si;
                    tbuf out = mk(dts[d], 2, shapes[si], out_lays[l], &seed, 1);
                    tbuf want = mkwant(2, shapes[si]);
                    ref_sinusoidal(bases[bi] == 0 ? 10000 : bases[bi], &want.v);
                    char what[96];
                    snprintf(what, sizeof what, "sinusoidal %s (%lld, %lld) %s base %g",
                             dtn(dts[d]), (long long)shapes[si][0], (long long)shapes[si][1],
                             lay_name[out_lays[l]], bases[bi]);
                    ck_assert_int_eq(attn_posenc_sinusoidal(bases[bi], &out.v), ATTN_OK);
                    tu_check_close(&out.v, &want.v, RT(dts[d]), AT(dts[d]), what);
                    tfree(&out);
                    tfree(&want);
                }
}
END_TEST

/*
 * The lesson-11 seed's own function run by torch (float32; it rounds angles to
 * float, so at t = 63 the seed itself is off by a few 1e-6) and the same formula
 * in float64 (scripts/gen_posenc_fixtures.py).
 */
START_TEST(ps_fixtures) {
    fx_file *fx = fx_load("posenc_sinusoidal.txt");
    ck_assert_ptr_nonnull(fx);
    struct {
        const char *name;
        attn_dtype dt;
        double base, rtol, atol;
    } cases[] = {
        {"seed_4x4_f32", ATTN_F32, 0, 1e-6, 1e-7},
        {"seed_64x16_f32", ATTN_F32, 0, 1e-5, 1e-5},
        {"f64_64x16", ATTN_F64, 0, 1e-12, 1e-13},
        {"f64_base100_9x6", ATTN_F64, 100, 1e-12, 1e-13},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
        attn_view want = fxv(fx, cases[i].name);
        uint64_t seed = 1;
        tbuf out = mk(cases[i].dt, 2, want.shape, L_CONTIG, &seed, 1);
        ck_assert_int_eq(attn_posenc_sinusoidal(cases[i].base, &out.v), ATTN_OK);
        tu_check_close(&out.v, &want, cases[i].rtol, cases[i].atol, cases[i].name);
        tfree(&out);
    }
    fx_free(fx);
}
END_TEST

START_TEST(ps_errors) {
    float o[30];
    for (int i = 0; i < 30; ++i)
        o[i] = 7;
    attn_view O, Odd, O1, O3, Ob, U;
    attn_view_init(&O, ATTN_F32, o, 2, (int64_t[]){5, 6});
    attn_view_init(&Odd, ATTN_F32, o, 2, (int64_t[]){6, 5});
    attn_view_init(&O1, ATTN_F32, o, 1, (int64_t[]){6});
    attn_view_init(&O3, ATTN_F32, o, 3, (int64_t[]){1, 5, 6});
    attn_view_init_strided(&Ob, ATTN_F32, o, 2, (int64_t[]){5, 6}, (int64_t[]){0, 1});
    attn_view_init(&U, ATTN_U8, o, 2, (int64_t[]){5, 6});
    EXPECT(ATTN_EINVAL, attn_posenc_sinusoidal(0, NULL), &O);
    EXPECT(ATTN_EINVAL, attn_posenc_sinusoidal(0, &Odd), &O);
    EXPECT(ATTN_EINVAL, attn_posenc_sinusoidal(-1, &O), &O);
    EXPECT(ATTN_EINVAL, attn_posenc_sinusoidal(NAN, &O), &O);
    EXPECT(ATTN_EINVAL, attn_posenc_sinusoidal(INFINITY, &O), &O);
    EXPECT(ATTN_EDTYPE, attn_posenc_sinusoidal(0, &U), &O);
    EXPECT(ATTN_ESHAPE, attn_posenc_sinusoidal(0, &O1), &O);
    EXPECT(ATTN_ESHAPE, attn_posenc_sinusoidal(0, &O3), &O);
    EXPECT(ATTN_ESTRIDE, attn_posenc_sinusoidal(0, &Ob), &O);
}
END_TEST

/* ======================================================================================
 * attn_posenc_add, attn_posenc_add_backward
 * ====================================================================================== */

typedef struct pacase {
    int nd;
    int64_t x[3];
    int64_t tmax, offset;
} pacase;
static const pacase pa_cases[] = {
    {3, {2, 4, 6}, 4, 0}, {3, {3, 2, 5}, 9, 7}, {2, {5, 3}, 8, 1},
    {3, {1, 1, 4}, 1, 0}, {3, {2, 0, 3}, 2, 2}, {3, {4, 6, 6}, 16, 3},
};
#define NPA (sizeof pa_cases / sizeof *pa_cases)

START_TEST(pa_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t ci = 0; ci < NPA; ++ci)
            for (int l = 0; l < NOUT_LAYS; ++l) {
                const pacase *c = &pa_cases[ci];
                int64_t C = c->x[c->nd - 1], tshape[2] = {c->tmax, C};
                uint64_t seed = 31 + ci * 5 + (uint64_t)l;
                tbuf x = mk(dts[d], c->nd, c->x, out_lays[l], &seed, 1);
                tbuf tab = mk(dts[d], 2, tshape, (lay)((l + 1) % L_COUNT), &seed, 1);
                tbuf want = dup64(&x.v);
                /* want[..., t, :] = x + table[offset + t, :], by plain loops */
                int64_t idx[3] = {0};
                if (tu_numel(&x.v) > 0)
                    do {
                        int64_t tr[2] = {c->offset + idx[c->nd - 2], idx[c->nd - 1]};
                        tu_set(&want.v, idx, tu_get(&want.v, idx) + tu_get(&tab.v, tr));
                    } while (tu_inc(idx, c->x, c->nd));
                char what[64];
                snprintf(what, sizeof what, "posenc_add %s case %zu %s", dtn(dts[d]), ci,
                         lay_name[out_lays[l]]);
                ck_assert_int_eq(attn_posenc_add(c->offset, &tab.v, &x.v), ATTN_OK);
                tu_check_close(&x.v, &want.v, RT(dts[d]), AT(dts[d]), what);
                tfree(&x);
                tfree(&tab);
                tfree(&want);
            }
}
END_TEST

/* Statuses shared by the forward and backward (which = 0, 1); outputs untouched. */
static void pa_errors_run(int which) {
    double x[24], t[40];
    for (int i = 0; i < 24; ++i)
        x[i] = 1;
    for (int i = 0; i < 40; ++i)
        t[i] = 2;
    attn_view X, T, T5, X4, X1, Tf, Xb, Ta, T3;
    float tf[40];
    attn_view_init(&X, ATTN_F64, x, 3, (int64_t[]){2, 3, 4});
    attn_view_init(&T, ATTN_F64, t, 2, (int64_t[]){10, 4});
    attn_view_init(&T5, ATTN_F64, t, 2, (int64_t[]){8, 5});
    attn_view_init(&X4, ATTN_F64, x, 4, (int64_t[]){1, 2, 3, 4});
    attn_view_init(&X1, ATTN_F64, x, 1, (int64_t[]){4});
    attn_view_init(&T3, ATTN_F64, t, 3, (int64_t[]){1, 10, 4});
    attn_view_init(&Tf, ATTN_F32, tf, 2, (int64_t[]){10, 4});
    attn_view_init_strided(&Xb, ATTN_F64, x, 3, (int64_t[]){2, 3, 4}, (int64_t[]){0, 4, 1});
    attn_view_init(&Ta, ATTN_F64, x + 4, 2, (int64_t[]){5, 4}); /* overlaps x */
#define PA(st, off, a, tb)                                                                     \
    EXPECT3(st, which ? attn_posenc_add_backward(off, a, tb) : attn_posenc_add(off, tb, a),    \
            which ? (const attn_view *)(tb) : (const attn_view *)(a), &X, &T)
    PA(ATTN_EINVAL, 0, NULL, &T);
    PA(ATTN_EINVAL, 0, &X, NULL);
    PA(ATTN_EINVAL, -1, &X, &T);
    PA(ATTN_EDTYPE, 0, &X, &Tf);
    PA(ATTN_ESHAPE, 0, &X, &T5);
    PA(ATTN_ESHAPE, 0, &X4, &T);
    PA(ATTN_ESHAPE, 0, &X1, &T);
    PA(ATTN_ESHAPE, 0, &X, &T3);
    PA(ATTN_ERANGE, 8, &X, &T); /* rows 8..10 of 10 */
    PA(ATTN_ERANGE, INT64_MAX, &X, &T);
    PA(ATTN_EALIAS, 0, &X, &Ta);
    if (!which)
        PA(ATTN_ESTRIDE, 0, &Xb, &T); /* x is the output: it must not broadcast */
    else
        ck_assert_int_eq(attn_posenc_add_backward(0, &Xb, &T), ATTN_OK); /* dx may */
#undef PA
}

START_TEST(pa_errors) { pa_errors_run(0); }
END_TEST

typedef struct pa_args {
    int64_t offset;
    attn_view *x0, *table, *y;
} pa_args;
/* y = x0 + table rows (out of place, for finite differences) */
static attn_status pa_run(void *a) {
    pa_args *s = a;
    vcopy(s->x0, s->y);
    return attn_posenc_add(s->offset, s->table, s->y);
}

START_TEST(pab_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t ci = 0; ci < NPA; ++ci)
            for (int l = 0; l < L_COUNT; ++l) {
                const pacase *c = &pa_cases[ci];
                int64_t C = c->x[c->nd - 1], tshape[2] = {c->tmax, C};
                uint64_t seed = 41 + ci * 5 + (uint64_t)l;
                tbuf dx = mk(dts[d], c->nd, c->x, (lay)l, &seed, 1);
                tbuf dt = mk(dts[d], 2, tshape, out_lays[l % NOUT_LAYS], &seed, 1);
                tbuf want = dup64(&dt.v);
                int64_t idx[3] = {0};
                if (tu_numel(&dx.v) > 0)
                    do {
                        int64_t tr[2] = {c->offset + idx[c->nd - 2], idx[c->nd - 1]};
                        tu_set(&want.v, tr, tu_get(&want.v, tr) + tu_get(&dx.v, idx));
                    } while (tu_inc(idx, c->x, c->nd));
                char what[64];
                snprintf(what, sizeof what, "posenc_add_backward %s case %zu %s", dtn(dts[d]),
                         ci, lay_name[l]);
                ck_assert_int_eq(attn_posenc_add_backward(c->offset, &dx.v, &dt.v), ATTN_OK);
                tu_check_close(&dt.v, &want.v, RT(dts[d]), AT(dts[d]), what);
                tfree(&dx);
                tfree(&dt);
                tfree(&want);
            }
}
END_TEST

/* Finite differences through the table; a second call doubles the gradient. */
START_TEST(pab_finite_diff) {
    const pacase *c = &pa_cases[1]; /* (3, 2, 5), rows 7..8 of 9 */
    int64_t tshape[2] = {c->tmax, c->x[2]};
    uint64_t seed = 77;
    tbuf x0 = mk(ATTN_F64, 3, c->x, L_CONTIG, &seed, 1), y = mkwant(3, c->x);
    tbuf tab = mk(ATTN_F64, 2, tshape, L_TRANS, &seed, 1);
    tbuf w = mk(ATTN_F64, 3, c->x, L_NEG, &seed, 1), g = mkwant(2, tshape);
    pa_args a = {c->offset, &x0.v, &tab.v, &y.v};
    fdctx fc = {pa_run, &a, &y.v, &w.v};
    ck_assert_int_eq(attn_posenc_add_backward(c->offset, &w.v, &g.v), ATTN_OK);
    FD_OK(&fc, &tab.v, &g.v, "posenc_add dtable");
    tbuf twice = dup64(&g.v);
    vscale(&twice.v, 2);
    ck_assert_int_eq(attn_posenc_add_backward(c->offset, &w.v, &g.v), ATTN_OK);
    tu_check_close(&g.v, &twice.v, 1e-15, 0, "accumulates");
    tfree(&x0);
    tfree(&y);
    tfree(&tab);
    tfree(&w);
    tfree(&g);
    tfree(&twice);
}
END_TEST

START_TEST(pab_errors) { pa_errors_run(1); }
END_TEST

/* ======================================================================================
 * attn_rope, attn_rope_backward
 * ====================================================================================== */

static const attn_rope_style styles[2] = {ATTN_ROPE_INTERLEAVED, ATTN_ROPE_HALF};
static const char *style_name[2] = {"interleaved", "half"};
static const shp rope_shapes[] = {
    {4, {1, 1, 5, 8}}, {4, {2, 3, 4, 6}}, {3, {3, 7, 2}},
    {2, {5, 4}},       {4, {2, 2, 0, 4}}, {2, {3, 300}}, /* more pairs than one angle chunk */
};
#define NROPE (sizeof rope_shapes / sizeof *rope_shapes)

START_TEST(rp_reference) {
    static const int64_t offsets[] = {0, 7, 100000};
    static const double bases[] = {0, 500};
    for (int d = 0; d < 2; ++d)
        for (int st = 0; st < 2; ++st)
            for (size_t si = 0; si < NROPE; ++si)
                for (int l = 0; l < NOUT_LAYS; ++l)
                    for (int oi = 0; oi < 3; ++oi) {
                        const shp *s = &rope_shapes[si];
                        double base = bases[(si + oi) % 2];
                        uint64_t seed = 51 + si * 7 + (uint64_t)l * 3 + (uint64_t)oi;
                        tbuf x = mk(dts[d], s->nd, s->s, out_lays[l], &seed, 1);
                        tbuf want = mkwant(s->nd, s->s);
                        ref_rope(st, base == 0 ? 10000 : base, offsets[oi], &x.v, &want.v);
                        char what[96];
                        snprintf(what, sizeof what, "rope %s %s nd=%d %s offset %lld",
                                 style_name[st], dtn(dts[d]), s->nd, lay_name[out_lays[l]],
                                 (long long)offsets[oi]);
                        ck_assert_int_eq(attn_rope(styles[st], base, offsets[oi], &x.v),
                                         ATTN_OK);
                        /* angles p f carry p times the rounding of f (an ulp either way) */
                        double pmax = (double)(offsets[oi] + s->s[s->nd - 2]);
                        tu_check_close(&x.v, &want.v, RT(dts[d]), AT(dts[d]) + 4e-16 * pmax,
                                       what);
                        tfree(&x);
                        tfree(&want);
                    }
}
END_TEST

/* Rotations keep every row's norm (f64, to rounding). */
START_TEST(rp_norm_preserved) {
    int64_t shape[4] = {2, 3, 9, 16};
    for (int st = 0; st < 2; ++st) {
        uint64_t seed = 9;
        tbuf x = mk(ATTN_F64, 4, shape, L_STRIDED, &seed, 1);
        tbuf x0 = dup64(&x.v);
        ck_assert_int_eq(attn_rope(styles[st], 0, 3, &x.v), ATTN_OK);
        int64_t idx[4] = {0};
        double worst = 0;
        do {
            double n0 = 0, n1 = 0;
            for (int64_t j = 0; j < shape[3]; ++j) {
                int64_t k[4] = {idx[0], idx[1], idx[2], j};
                n0 += tu_get(&x0.v, k) * tu_get(&x0.v, k);
                n1 += tu_get(&x.v, k) * tu_get(&x.v, k);
            }
            worst = fmax(worst, fabs(sqrt(n1) - sqrt(n0)) / sqrt(n0));
        } while (tu_inc(idx, shape, 3));
        ck_assert_msg(worst < 1e-14, "%s: row norm changed by %.3g", style_name[st], worst);
        tfree(&x);
        tfree(&x0);
    }
}
END_TEST

/* q . k after RoPE at positions (m, n): rotated copies of one q and one k. */
static double rope_dot(attn_rope_style st, const double *q, const double *k, int64_t d,
                       int64_t m, int64_t n) {
    double a[64], b[64];
    memcpy(a, q, (size_t)d * sizeof *a);
    memcpy(b, k, (size_t)d * sizeof *b);
    attn_view A, B;
    attn_view_init(&A, ATTN_F64, a, 2, (int64_t[]){1, d});
    attn_view_init(&B, ATTN_F64, b, 2, (int64_t[]){1, d});
    ck_assert_int_eq(attn_rope(st, 0, m, &A), ATTN_OK);
    ck_assert_int_eq(attn_rope(st, 0, n, &B), ATTN_OK);
    double s = 0;
    for (int64_t i = 0; i < d; ++i)
        s += a[i] * b[i];
    return s;
}

/* The score depends on m - n only (the point of RoPE), and does change with m - n. */
START_TEST(rp_relative_position) {
    enum { D = 32 };
    double q[D], k[D];
    uint64_t seed = 13;
    for (int i = 0; i < D; ++i)
        q[i] = tu_uniform(&seed), k[i] = tu_uniform(&seed);
    for (int st = 0; st < 2; ++st)
        for (int64_t delta = -5; delta <= 5; delta += 5) {
            double ref = rope_dot(styles[st], q, k, D, 10 + delta, 10);
            for (int64_t shift = 1; shift < 2000; shift *= 7) {
                double s = rope_dot(styles[st], q, k, D, 10 + delta + shift, 10 + shift);
                ck_assert_msg(fabs(s - ref) <= 1e-12 * (1 + fabs(ref)),
                              "%s delta %lld shift %lld: %.17g vs %.17g", style_name[st],
                              (long long)delta, (long long)shift, s, ref);
            }
            double other = rope_dot(styles[st], q, k, D, 10 + delta + 1, 10);
            ck_assert_msg(fabs(other - ref) > 1e-6, "score does not depend on m - n");
        }
}
END_TEST

/* The two styles are the same rotation on permuted features: feature i of the half
 * style is feature 2i (i < D/2) or 2(i - D/2) + 1 of the interleaved one. */
START_TEST(rp_styles_related) {
    enum { T = 5, D = 12 };
    double h[T * D], v[T * D];
    uint64_t seed = 17;
    for (int t = 0; t < T; ++t)
        for (int i = 0; i < D; ++i) {
            h[t * D + i] = tu_uniform(&seed);
            int j = i < D / 2 ? 2 * i : 2 * (i - D / 2) + 1;
            v[t * D + j] = h[t * D + i];
        }
    attn_view H, V;
    attn_view_init(&H, ATTN_F64, h, 2, (int64_t[]){T, D});
    attn_view_init(&V, ATTN_F64, v, 2, (int64_t[]){T, D});
    ck_assert_int_eq(attn_rope(ATTN_ROPE_HALF, 0, 2, &H), ATTN_OK);
    ck_assert_int_eq(attn_rope(ATTN_ROPE_INTERLEAVED, 0, 2, &V), ATTN_OK);
    for (int t = 0; t < T; ++t)
        for (int i = 0; i < D; ++i) {
            int j = i < D / 2 ? 2 * i : 2 * (i - D / 2) + 1;
            ck_assert(h[t * D + i] == v[t * D + j]);
        }
}
END_TEST

/* Statuses of attn_rope and attn_rope_backward (which = 0, 1); x untouched. */
static void rope_errors_run(int which) {
    double x[48];
    for (int i = 0; i < 48; ++i)
        x[i] = i;
    attn_view X, Xodd, X1, Xb, U, Xbig;
    attn_view_init(&X, ATTN_F64, x, 3, (int64_t[]){2, 4, 6});
    attn_view_init(&Xodd, ATTN_F64, x, 2, (int64_t[]){3, 5});
    attn_view_init(&X1, ATTN_F64, x, 1, (int64_t[]){6});
    attn_view_init_strided(&Xb, ATTN_F64, x, 3, (int64_t[]){2, 4, 6}, (int64_t[]){0, 6, 1});
    attn_view_init(&U, ATTN_U8, x, 2, (int64_t[]){4, 6});
    attn_view_init_strided(&Xbig, ATTN_F64, x, 2, (int64_t[]){4, 6}, (int64_t[]){6, 1});
#define RP(st, style, base, off, v)                                                            \
    EXPECT(st,                                                                                 \
           which ? attn_rope_backward(style, base, off, v) : attn_rope(style, base, off, v),   \
           &X)
    RP(ATTN_EINVAL, ATTN_ROPE_HALF, 0, 0, NULL);
    RP(ATTN_EINVAL, (attn_rope_style)2, 0, 0, &X);
    RP(ATTN_EINVAL, ATTN_ROPE_HALF, 0, 0, &Xodd);
    RP(ATTN_EINVAL, ATTN_ROPE_HALF, 0, -1, &X);
    RP(ATTN_EINVAL, ATTN_ROPE_HALF, -2, 0, &X);
    RP(ATTN_EINVAL, ATTN_ROPE_HALF, NAN, 0, &X);
    RP(ATTN_EDTYPE, ATTN_ROPE_HALF, 0, 0, &U);
    RP(ATTN_ESHAPE, ATTN_ROPE_HALF, 0, 0, &X1);
    RP(ATTN_ERANGE, ATTN_ROPE_HALF, 0, INT64_MAX - 2, &Xbig);
    RP(ATTN_ESTRIDE, ATTN_ROPE_INTERLEAVED, 0, 0, &Xb);
#undef RP
}

START_TEST(rp_errors) { rope_errors_run(0); }
END_TEST

/* backward(forward(x)) = x: the rotation by -theta undoes the rotation by theta. */
START_TEST(rpb_inverse) {
    for (int d = 0; d < 2; ++d)
        for (int st = 0; st < 2; ++st)
            for (size_t si = 0; si < NROPE; ++si) {
                const shp *s = &rope_shapes[si];
                uint64_t seed = 61 + si;
                tbuf x = mk(dts[d], s->nd, s->s, L_NEG, &seed, 1);
                tbuf x0 = dup64(&x.v);
                ck_assert_int_eq(attn_rope(styles[st], 0, 11, &x.v), ATTN_OK);
                ck_assert_int_eq(attn_rope_backward(styles[st], 0, 11, &x.v), ATTN_OK);
                tu_check_close(&x.v, &x0.v, dts[d] == ATTN_F64 ? 1e-14 : 1e-6,
                               dts[d] == ATTN_F64 ? 1e-15 : 1e-7, style_name[st]);
                tfree(&x);
                tfree(&x0);
            }
}
END_TEST

typedef struct rp_args {
    attn_rope_style st;
    attn_view *x0, *y;
} rp_args;
static attn_status rp_run(void *a) { /* y = rope(x0), out of place for finite differences */
    rp_args *s = a;
    vcopy(s->x0, s->y);
    return attn_rope(s->st, 0, 5, s->y);
}

START_TEST(rpb_finite_diff) {
    int64_t shape[4] = {2, 2, 3, 6};
    for (int st = 0; st < 2; ++st) {
        uint64_t seed = 71;
        tbuf x0 = mk(ATTN_F64, 4, shape, L_TRANS, &seed, 1), y = mkwant(4, shape);
        tbuf w = mk(ATTN_F64, 4, shape, L_CONTIG, &seed, 1);
        tbuf g = dup64(&w.v); /* the backward transforms dL/dy = w into dL/dx in place */
        rp_args a = {styles[st], &x0.v, &y.v};
        fdctx fc = {rp_run, &a, &y.v, &w.v};
        ck_assert_int_eq(attn_rope_backward(styles[st], 0, 5, &g.v), ATTN_OK);
        FD_OK(&fc, &x0.v, &g.v, style_name[st]);
        tfree(&x0);
        tfree(&y);
        tfree(&w);
        tfree(&g);
    }
}
END_TEST

START_TEST(rpb_errors) { rope_errors_run(1); }
END_TEST

/* ======================================================================================
 * attn_patchify
 * ====================================================================================== */

/* The ViT seed's 4x4 image and P = 2: the seed's own patches (vit_seed.txt) and an
 * independent naive loop over the literal image. */
START_TEST(pt_seed) {
    double image[16] = {0.,  0.2, 0.8, 1.0, 0.1, 0.3, 0.7, 0.9,
                        0.9, 0.7, 0.2, 0.1, 1.,  0.8, 0.3, 0.};
    double out[16];
    attn_view I, O;
    attn_view_init(&I, ATTN_F64, image, 2, (int64_t[]){4, 4});
    attn_view_init(&O, ATTN_F64, out, 2, (int64_t[]){4, 4});
    ck_assert_int_eq(attn_patchify(2, &I, &O), ATTN_OK);
    tbuf want = mkwant(2, (int64_t[]){4, 4});
    ref_patchify(2, &I, &want.v);
    tu_check_close(&O, &want.v, 0, 0, "naive loop");
    /* top-left patch = pixels (0,0) (0,1) (1,0) (1,1), as the seed's comment says */
    ck_assert(out[0] == 0. && out[1] == 0.2 && out[2] == 0.1 && out[3] == 0.3);
    fx_file *fx = fx_load("vit_seed.txt");
    ck_assert_ptr_nonnull(fx);
    attn_view seed_image = fxv(fx, "image"), seed_patches = fxv(fx, "patches");
    tu_check_close(&I, &seed_image, 0, 0, "the literal image is the seed's");
    tu_check_close(&O, &seed_patches, 0, 0, "seed patches");
    fx_free(fx);
    tfree(&want);
}
END_TEST

typedef struct ptcase {
    int nd;
    int64_t img[4], p;
} ptcase;
static const ptcase pt_cases[] = {
    {2, {4, 4}, 2},    {2, {6, 9}, 3},       {2, {5, 7}, 1},       {3, {3, 4, 6}, 2},
    {3, {1, 8, 8}, 4}, {4, {2, 3, 4, 4}, 2}, {4, {1, 2, 6, 3}, 3}, {2, {0, 4}, 2},
};

START_TEST(pt_layouts) {
    for (int d = 0; d < 2; ++d)
        for (size_t ci = 0; ci < sizeof pt_cases / sizeof *pt_cases; ++ci)
            for (int l = 0; l < L_COUNT; ++l) {
                const ptcase *c = &pt_cases[ci];
                int nd = c->nd;
                int64_t H = c->img[nd - 2], W = c->img[nd - 1], p = c->p;
                int64_t Ch = nd >= 3 ? c->img[nd - 3] : 1, N = (H / p) * (W / p);
                int64_t oshape[3] = {c->img[0], N, Ch * p * p};
                int ond = nd == 4 ? 3 : 2;
                const int64_t *os = nd == 4 ? oshape : oshape + 1;
                uint64_t seed = 81 + ci * 7 + (uint64_t)l;
                tbuf img = mk(dts[d], nd, c->img, (lay)l, &seed, 1);
                tbuf out = mk(dts[d], ond, os, out_lays[(l + 1) % NOUT_LAYS], &seed, 1);
                tbuf want = mkwant(ond, os);
                ref_patchify(p, &img.v, &want.v);
                char what[64];
                snprintf(what, sizeof what, "patchify %s case %zu %s", dtn(dts[d]), ci,
                         lay_name[l]);
                ck_assert_int_eq(attn_patchify(p, &img.v, &out.v), ATTN_OK);
                tu_check_close(&out.v, &want.v, 0, 0, what); /* a copy: exact */
                tfree(&img);
                tfree(&out);
                tfree(&want);
            }
}
END_TEST

/* Channel-major within a token: [channel 0's P x P pixels row-major, channel 1's, ...]. */
START_TEST(pt_channel_order) {
    float img[2 * 2 * 4], out[2 * 8]; /* (Ch 2, H 2, W 4), P = 2: two tokens of 8 */
    for (int i = 0; i < 16; ++i)
        img[i] = (float)i; /* value = c * 8 + h * 4 + w */
    attn_view I, O;
    attn_view_init(&I, ATTN_F32, img, 3, (int64_t[]){2, 2, 4});
    attn_view_init(&O, ATTN_F32, out, 2, (int64_t[]){2, 8});
    ck_assert_int_eq(attn_patchify(2, &I, &O), ATTN_OK);
    const float want[16] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
    for (int i = 0; i < 16; ++i)
        ck_assert_msg(out[i] == want[i], "element %d: %g, want %g", i, out[i], want[i]);
}
END_TEST

START_TEST(pt_errors) {
    double img[48], out[48];
    float outf[48];
    for (int i = 0; i < 48; ++i)
        img[i] = i, out[i] = -1;
    attn_view I, O, O2, Of, Ob, Oa, I5, I1, U;
    attn_view_init(&I, ATTN_F64, img, 2, (int64_t[]){4, 6});
    attn_view_init(&O, ATTN_F64, out, 2, (int64_t[]){6, 4});
    attn_view_init(&O2, ATTN_F64, out, 2, (int64_t[]){4, 6});
    attn_view_init(&Of, ATTN_F32, outf, 2, (int64_t[]){6, 4});
    attn_view_init_strided(&Ob, ATTN_F64, out, 2, (int64_t[]){6, 4}, (int64_t[]){0, 1});
    attn_view_init(&Oa, ATTN_F64, img + 20, 2, (int64_t[]){6, 4});
    attn_view_init(&I5, ATTN_F64, img, 2, (int64_t[]){5, 6});
    attn_view_init(&I1, ATTN_F64, img, 1, (int64_t[]){6});
    attn_view_init(&U, ATTN_U8, img, 2, (int64_t[]){4, 6});
    EXPECT(ATTN_EINVAL, attn_patchify(2, NULL, &O), &O);
    EXPECT(ATTN_EINVAL, attn_patchify(2, &I, NULL), &O);
    EXPECT(ATTN_EINVAL, attn_patchify(0, &I, &O), &O);
    EXPECT(ATTN_EDTYPE, attn_patchify(2, &I, &Of), &Of);
    EXPECT(ATTN_EDTYPE, attn_patchify(2, &U, &O), &O);
    EXPECT(ATTN_ESHAPE, attn_patchify(2, &I5, &O), &O); /* 5 rows, P = 2 */
    EXPECT(ATTN_ESHAPE, attn_patchify(4, &I, &O), &O);  /* 6 columns, P = 4 */
    EXPECT(ATTN_ESHAPE, attn_patchify(2, &I, &O2), &O);
    EXPECT(ATTN_ESHAPE, attn_patchify(2, &I1, &O), &O);
    EXPECT(ATTN_ESTRIDE, attn_patchify(2, &I, &Ob), &O);
    EXPECT(ATTN_EALIAS, attn_patchify(2, &I, &Oa), &Oa);
}
END_TEST

int main(void) {
    Suite *s = suite_create("posenc");
    struct {
        const char *name;
        const TTest *tests[6];
    } cases[] = {
        {"attn_posenc_sinusoidal", {ps_layouts, ps_fixtures, ps_errors}},
        {"attn_posenc_add", {pa_layouts, pa_errors}},
        {"attn_posenc_add_backward", {pab_layouts, pab_finite_diff, pab_errors}},
        {"attn_rope",
         {rp_reference, rp_norm_preserved, rp_relative_position, rp_styles_related, rp_errors}},
        {"attn_rope_backward", {rpb_inverse, rpb_finite_diff, rpb_errors}},
        {"attn_patchify", {pt_seed, pt_layouts, pt_channel_order, pt_errors}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 60);
        for (int j = 0; j < 6 && cases[i].tests[j]; ++j)
            tcase_add_test(tc, cases[i].tests[j]);
        suite_add_tcase(s, tc);
    }
    return tu_run(s);
}
