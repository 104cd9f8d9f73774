/* SPDX-License-Identifier: MIT */
/* Lecture 7 (seed 003): self-attention step by step, on attn's public API. */
#include "walkthrough.h"

/*
 * The six demos of the seed, in its order:
 *   1 attention as a soft dictionary look-up;
 *   2 self-attention step by step, a loop and the matrix form agreeing;
 *   3 why scores are divided by sqrt(d_k): saturation and the softmax Jacobian;
 *   4 permutation equivariance, and positional vectors breaking it;
 *   5 the causal mask, and the isolation it gives;
 *   6 the FLOP count of one layer: when the n^2 attention matrix dominates.
 * Inputs of demos 2, 4 and 5 are the seed's own numbers (NumPy's
 * default_rng(0) draws, kept in tests/data/lecture7.txt by
 * scripts/gen_lecture7_fixture.py); every result is compared with the seed's
 * to 1e-12. Demo 3 draws its 2000 x 5 random trials from attn's Philox
 * generator instead, so its numbers differ from NumPy's while its statistics
 * agree with the seed's (checked within 5 standard errors).
 *
 * Usage: self_attention_walkthrough [lecture7.txt=tests/data/lecture7.txt]
 * Exit status 0 when every check passes, 1 when one fails, 2 on bad input.
 */

static const double TOL = 1e-12; /* agreement with the seed's float64 numbers */

static void header(const char *title) {
    printf("\n======================================================================\n");
    printf("  %s\n", title);
    printf("======================================================================\n");
}

/* The seed's print_matrix: labels, then each value as "%{fw}.{prec}f" right-aligned. */
static void print_matrix(const double *m, int rows, int cols, const char *const *rl,
                         const char *const *cl, int fw, int prec) {
    int width = fw;
    for (int c = 0; c < cols; ++c)
        if ((int)strlen(cl[c]) > width)
            width = (int)strlen(cl[c]);
    width += 1;
    printf("        ");
    for (int c = 0; c < cols; ++c)
        printf("%*s", width, cl[c]);
    printf("\n");
    for (int r = 0; r < rows; ++r) {
        printf("  %-6s", rl[r]);
        for (int c = 0; c < cols; ++c) {
            char b[64];
            snprintf(b, sizeof b, "%*.*f", fw, prec, m[r * cols + c]);
            printf("%*s", width, b);
        }
        printf("\n");
    }
}

static double maxdiff(const double *a, const double *b, int n) {
    double m = 0;
    for (int i = 0; i < n; ++i)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/*
 * The seed's self_attention(): Q, K, V = X W_Q, X W_K, X W_V (attn_linear),
 * out = softmax(Q K^T / sqrt(d_k) + mask) V and its weights A (attn_sdpa).
 * X (n, d), W_* (d, dk), out (n, dk), A (n, n).
 */
static void self_attention(int n, int d, int dk, const double *X, const double *WQ,
                           const double *WK, const double *WV, attn_causal causal, double *out,
                           double *A) {
    double Q[16 * 16], K[16 * 16], V[16 * 16];
    attn_view x = WK_VIEW(ATTN_F64, (void *)X, n, d);
    const double *w[3] = {WQ, WK, WV};
    double *p[3] = {Q, K, V};
    for (int i = 0; i < 3; ++i) {
        attn_view wv = WK_VIEW(ATTN_F64, (void *)w[i], d, dk),
                  pv = WK_VIEW(ATTN_F64, p[i], n, dk);
        CHECK(attn_linear(&x, &wv, NULL, &pv, NULL, 0));
    }
    attn_view q = WK_VIEW(ATTN_F64, Q, 1, 1, n, dk), k = WK_VIEW(ATTN_F64, K, 1, 1, n, dk);
    attn_view v = WK_VIEW(ATTN_F64, V, 1, 1, n, dk), o = WK_VIEW(ATTN_F64, out, 1, 1, n, dk);
    attn_view a = WK_VIEW(ATTN_F64, A, 1, 1, n, n);
    attn_sdpa_opts opts = {.causal = causal, .weights = &a};
    CHECK(attn_sdpa(&q, &k, &v, &opts, &o, NULL, 0));
}

/* ---- demo 1 ------------------------------------------------------------------ */

static void demo_lookup(const wk_fixture *fx) {
    header("Demo 1: attention = a \"soft\" dictionary look-up");
    printf("\n  A dictionary look-up is hard: the query must equal a key. Attention is soft:\n"
           "  the query is compared with every key and the values are averaged by softmax(keys "
           "q).\n");
    double keys[6] = {1.0, 0.0, 0.0, 1.0, 0.7, 0.7}, values[3] = {10.0, 20.0, 30.0};
    double queries[3][2] = {{10.0, 0.0}, {1.0, 0.0}, {0.5, 0.5}};
    const double *want_w = wk_get(fx, "d1_weights", 9), *want_o = wk_get(fx, "d1_outputs", 3);
    double worst = 0;
    for (int i = 0; i < 3; ++i) {
        /* one query against three keys, scale 1 (the seed does not divide here) */
        double w[3], out;
        attn_view q = WK_VIEW(ATTN_F64, queries[i], 1, 1, 1, 2);
        attn_view k = WK_VIEW(ATTN_F64, keys, 1, 1, 3, 2);
        attn_view v = WK_VIEW(ATTN_F64, values, 1, 1, 3, 1);
        attn_view o = WK_VIEW(ATTN_F64, &out, 1, 1, 1, 1),
                  wv = WK_VIEW(ATTN_F64, w, 1, 1, 1, 3);
        attn_sdpa_opts opts = {.scale = 1.0, .weights = &wv};
        CHECK(attn_sdpa(&q, &k, &v, &opts, &o, NULL, 0));
        printf("\n    query [%g, %g]: weights [%.3f, %.3f, %.3f], output = %.2f\n",
               queries[i][0], queries[i][1], w[0], w[1], w[2], out);
        worst = fmax(worst, fmax(maxdiff(w, want_w + 3 * i, 3), fabs(out - want_o[i])));
    }
    printf("\n  Query (10, 0) points along key 1 and is long: ~95%% of the weight goes to "
           "value 1.\n"
           "  (1, 0) has the same direction but is short: the weights spread out. The size of "
           "the\n"
           "  scores sets how sharp the softmax is; demo 3 shows why that matters.\n\n");
    wk_check(worst <= TOL, "weights and outputs equal the seed's (max diff %.1e)", worst);
}

/* ---- demo 2 ------------------------------------------------------------------ */

static void demo_step_by_step(const wk_fixture *fx) {
    header("Demo 2: self-attention step by step (4 words, d = 4, d_k = d_v = 3)");
    enum { n = 4, d = 4, dk = 3 };
    static const char *words[] = {"the", "cat", "sat", "down"};
    static const char *xc[] = {"x0", "x1", "x2", "x3"}, *qc[] = {"q0", "q1", "q2"},
                      *oc[] = {"o0", "o1", "o2"};
    const double *X = wk_get(fx, "d2_X", n * d), *WQ = wk_get(fx, "d2_W_Q", d * dk);
    const double *WK = wk_get(fx, "d2_W_K", d * dk), *WV = wk_get(fx, "d2_W_V", d * dk);
    printf("\n  Input X (one row per word; the seed's draws, rounded to 0.1):\n");
    print_matrix(X, n, d, words, xc, 6, 2);

    /* the matrix form, one attn call per step */
    double Q[n * dk], K[n * dk], V[n * dk], S[n * n], A[n * n], out[n * dk];
    attn_view x = WK_VIEW(ATTN_F64, (void *)X, n, d);
    attn_view wq = WK_VIEW(ATTN_F64, (void *)WQ, d, dk),
              wk = WK_VIEW(ATTN_F64, (void *)WK, d, dk);
    attn_view wv = WK_VIEW(ATTN_F64, (void *)WV, d, dk);
    attn_view q = WK_VIEW(ATTN_F64, Q, n, dk), k = WK_VIEW(ATTN_F64, K, n, dk);
    attn_view v = WK_VIEW(ATTN_F64, V, n, dk), s = WK_VIEW(ATTN_F64, S, n, n);
    attn_view a = WK_VIEW(ATTN_F64, A, n, n), o = WK_VIEW(ATTN_F64, out, n, dk);
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &x, &wq, 0.0, &q, NULL, 0));
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &x, &wk, 0.0, &k, NULL, 0));
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &x, &wv, 0.0, &v, NULL, 0));
    printf("\n  Step 1: Q = X W_Q (each word's query)\n");
    print_matrix(Q, n, dk, words, qc, 6, 2);
    CHECK(
        attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, 1.0 / sqrt((double)dk), &q, &k, 0.0, &s, NULL, 0));
    printf("\n  Step 2: scores S = Q K^T / sqrt(3) (row i, column j: word i's score for word "
           "j)\n");
    print_matrix(S, n, n, words, words, 6, 2);
    CHECK(attn_softmax(&s, &a));
    printf("\n  Step 3: softmax of each row gives the attention weights A (rows sum to 1)\n");
    print_matrix(A, n, n, words, words, 6, 2);
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &a, &v, 0.0, &o, NULL, 0));
    printf("\n  Step 4: output = A V (each word's output is a weighted mean of all value "
           "vectors)\n");
    print_matrix(out, n, dk, words, oc, 6, 2);

    /* the loop form, as the seed's self_attention_loop: one word at a time, plain C */
    double out_loop[n * dk] = {0}, A_loop[n * n];
    for (int i = 0; i < n; ++i) {
        double qi[dk] = {0}, sc[n], mx = -INFINITY, sum = 0;
        for (int c = 0; c < dk; ++c)
            for (int j = 0; j < d; ++j)
                qi[c] += X[i * d + j] * WQ[j * dk + c];
        for (int t = 0; t < n; ++t) {
            double kt[dk] = {0};
            for (int c = 0; c < dk; ++c)
                for (int j = 0; j < d; ++j)
                    kt[c] += X[t * d + j] * WK[j * dk + c];
            sc[t] = 0;
            for (int c = 0; c < dk; ++c)
                sc[t] += qi[c] * kt[c];
            sc[t] /= sqrt((double)dk);
            mx = fmax(mx, sc[t]);
        }
        for (int t = 0; t < n; ++t)
            sum += (A_loop[i * n + t] = exp(sc[t] - mx));
        for (int t = 0; t < n; ++t) {
            A_loop[i * n + t] /= sum;
            for (int c = 0; c < dk; ++c) {
                double vt = 0;
                for (int j = 0; j < d; ++j)
                    vt += X[t * d + j] * WV[j * dk + c];
                out_loop[i * dk + c] += A_loop[i * n + t] * vt;
            }
        }
    }
    /* and the fused call: attn_sdpa with its weights output */
    double out_sdpa[n * dk], A_sdpa[n * n];
    self_attention(n, d, dk, X, WQ, WK, WV, ATTN_CAUSAL_NONE, out_sdpa, A_sdpa);

    printf("\n  Self-checks:\n");
    double dl = fmax(maxdiff(out_loop, out, n * dk), maxdiff(A_loop, A, n * n));
    double ds = fmax(maxdiff(out_sdpa, out, n * dk), maxdiff(A_sdpa, A, n * n));
    wk_check(dl <= TOL, "loop form == matrix form (max diff %.1e)", dl);
    wk_check(ds <= TOL, "attn_sdpa (one call) == the four steps (max diff %.1e)", ds);
    double rs = 0;
    for (int i = 0; i < n; ++i)
        rs = fmax(rs, fabs(A[i * n] + A[i * n + 1] + A[i * n + 2] + A[i * n + 3] - 1));
    wk_check(rs <= TOL, "every row of A sums to 1 (max |sum - 1| %.1e)", rs);
    double dq = maxdiff(Q, wk_get(fx, "d2_Q", n * dk), n * dk);
    double dS = maxdiff(S, wk_get(fx, "d2_S", n * n), n * n);
    double dA = maxdiff(A, wk_get(fx, "d2_A", n * n), n * n);
    double dout = maxdiff(out, wk_get(fx, "d2_out", n * dk), n * dk);
    wk_check(fmax(fmax(dq, dS), fmax(dA, dout)) <= TOL,
             "Q, S, A and the output equal the seed's (max diffs %.1e %.1e %.1e %.1e)", dq, dS,
             dA, dout);
}

/* ---- demo 3 ------------------------------------------------------------------ */

enum { TRIALS = 2000, NKEYS = 10, CHUNK = 250 };

/* Mean and standard error of the mean of n values. */
static void mean_se(const double *x, int n, double *mean, double *se) {
    double m = 0, v = 0;
    for (int i = 0; i < n; ++i)
        m += x[i];
    m /= n;
    for (int i = 0; i < n; ++i)
        v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *se = sqrt(v / (n - 1) / n);
}

static void demo_scaling(const wk_fixture *fx) {
    header("Demo 3: why divide by sqrt(d_k)?");
    printf(
        "\n  If q and k have independent N(0, 1) entries, q.k is a sum of d_k products: its\n"
        "  variance is d_k. The larger d_k, the larger the scores and the sharper the "
        "softmax.\n"
        "  For each d_k, 2000 trials: 1 query, 10 keys, all standard normal.\n"
        "  The vectors come from attn's Philox4x32-10 generator (seed 0, one stream per "
        "tensor\n"
        "  and d_k), not from NumPy's default_rng(0): the numbers differ from the seed's, the\n"
        "  statistics agree (compared below with the seed's own table).\n");
    static const int dks[5] = {4, 16, 64, 256, 1024};
    const double *seed_stats = wk_get(fx, "d3_stats", 5 * 6);
    double stats[5][6], se[5][6], spec[5][2], ent[5][2];
    double *qbuf = malloc(sizeof(double) * CHUNK * 1024);
    double *kbuf = malloc(sizeof(double) * CHUNK * NKEYS * 1024);
    static double dots[TRIALS], mr[TRIALS], gr[TRIALS], ms[TRIALS], gs[TRIALS], sr[TRIALS],
        ss[TRIALS], er[TRIALS], es[TRIALS];
    double z[CHUNK * NKEYS], pr[CHUNK * NKEYS], ps[CHUNK * NKEYS], p1[CHUNK * NKEYS];
    double zero = 0, outbuf[CHUNK];
    double sdpa_vs_softmax = 0;
    if (!qbuf || !kbuf) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int di = 0; di < 5; ++di) {
        int dk = dks[di];
        for (int t0 = 0; t0 < TRIALS; t0 += CHUNK) {
            /* trial t's query is values t*dk.. of stream 2 dk, its keys values t*10*dk.. of
               stream 2 dk + 1: filling chunk by chunk gives the numbers of one big fill */
            attn_view qv = WK_VIEW(ATTN_F64, qbuf, CHUNK, dk, 1);
            attn_view kv = WK_VIEW(ATTN_F64, kbuf, CHUNK, NKEYS, dk);
            CHECK(attn_init_normal(0, 2 * (uint64_t)dk, (uint64_t)t0 * dk, 0.0, 1.0, &qv));
            CHECK(attn_init_normal(0, 2 * (uint64_t)dk + 1, (uint64_t)t0 * NKEYS * dk, 0.0, 1.0,
                                   &kv));
            /* z = K q for every trial at once: a batched GEMM (CHUNK, 10, dk) x (CHUNK, dk, 1)
             */
            attn_view zv = WK_VIEW(ATTN_F64, z, CHUNK, NKEYS, 1);
            CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &kv, &qv, 0.0, &zv, NULL, 0));
            /* unscaled weights: softmax(z) */
            attn_view z2 = WK_VIEW(ATTN_F64, z, CHUNK, NKEYS),
                      prv = WK_VIEW(ATTN_F64, pr, CHUNK, NKEYS);
            CHECK(attn_softmax(&z2, &prv));
            /* scaled weights: attn_sdpa's default scale 1/sqrt(d_k), its weights output; the
               values do not matter here (one zero, broadcast) */
            attn_view q4 = WK_VIEW(ATTN_F64, qbuf, CHUNK, 1, 1, dk);
            attn_view k4 = WK_VIEW(ATTN_F64, kbuf, CHUNK, 1, NKEYS, dk);
            attn_view v4, o4 = WK_VIEW(ATTN_F64, outbuf, CHUNK, 1, 1, 1);
            CHECK(attn_view_init_strided(&v4, ATTN_F64, &zero, 4,
                                         (int64_t[]){CHUNK, 1, NKEYS, 1},
                                         (int64_t[]){0, 0, 0, 0}));
            attn_view psv = WK_VIEW(ATTN_F64, ps, CHUNK, 1, 1, NKEYS);
            attn_sdpa_opts scaled = {.weights = &psv};
            CHECK(attn_sdpa(&q4, &k4, &v4, &scaled, &o4, NULL, 0));
            /* cross-check: attn_sdpa with scale 1 gives softmax(z) */
            attn_view p1v = WK_VIEW(ATTN_F64, p1, CHUNK, 1, 1, NKEYS);
            attn_sdpa_opts unscaled = {.scale = 1.0, .weights = &p1v};
            CHECK(attn_sdpa(&q4, &k4, &v4, &unscaled, &o4, NULL, 0));
            sdpa_vs_softmax = fmax(sdpa_vs_softmax, maxdiff(p1, pr, CHUNK * NKEYS));
            /* diagnostics per row: Jacobian norms (Frobenius, spectral) and entropy */
            attn_view psv2 = WK_VIEW(ATTN_F64, ps, CHUNK, NKEYS);
            attn_view gv = WK_VIEW(ATTN_F64, gr + t0, CHUNK),
                      gsv = WK_VIEW(ATTN_F64, gs + t0, CHUNK);
            attn_view srv = WK_VIEW(ATTN_F64, sr + t0, CHUNK),
                      ssv = WK_VIEW(ATTN_F64, ss + t0, CHUNK);
            attn_view erv = WK_VIEW(ATTN_F64, er + t0, CHUNK),
                      esv = WK_VIEW(ATTN_F64, es + t0, CHUNK);
            CHECK(attn_diag_softmax_jacobian_fro(&prv, &gv));
            CHECK(attn_diag_softmax_jacobian_fro(&psv2, &gsv));
            CHECK(attn_diag_softmax_jacobian_spectral(&prv, &srv, NULL, 0, NULL));
            CHECK(attn_diag_softmax_jacobian_spectral(&psv2, &ssv, NULL, 0, NULL));
            CHECK(attn_diag_entropy(&prv, &erv));
            CHECK(attn_diag_entropy(&psv2, &esv));
            for (int t = 0; t < CHUNK; ++t) {
                dots[t0 + t] = z[t * NKEYS];
                double a = 0, b = 0;
                for (int j = 0; j < NKEYS; ++j) {
                    a = fmax(a, pr[t * NKEYS + j]);
                    b = fmax(b, ps[t * NKEYS + j]);
                }
                mr[t0 + t] = a;
                ms[t0 + t] = b;
            }
        }
        /* np.std is the population standard deviation (ddof 0) */
        double m, s2 = 0, dummy;
        mean_se(dots, TRIALS, &m, &dummy);
        for (int t = 0; t < TRIALS; ++t)
            s2 += (dots[t] - m) * (dots[t] - m);
        stats[di][0] = dk;
        stats[di][1] = sqrt(s2 / TRIALS);
        se[di][1] = stats[di][1] / sqrt(2.0 * TRIALS); /* se of a normal sample's std */
        const double *cols[4] = {mr, gr, ms, gs};
        for (int c = 0; c < 4; ++c)
            mean_se(cols[c], TRIALS, &stats[di][2 + c], &se[di][2 + c]);
        mean_se(sr, TRIALS, &spec[di][0], &dummy);
        mean_se(ss, TRIALS, &spec[di][1], &dummy);
        mean_se(er, TRIALS, &ent[di][0], &dummy);
        mean_se(es, TRIALS, &ent[di][1], &dummy);
    }
    free(qbuf);
    free(kbuf);

    const char *hdr =
        "       d_k  std(q.k) | unscaled: max weight  ||J||_F | scaled: max weight  ||J||_F\n";
    printf("\n  attn (Philox):\n%s", hdr);
    for (int di = 0; di < 5; ++di)
        printf("    %6d %9.1f | %20.3f %8.4f | %18.3f %8.4f\n", dks[di], stats[di][1],
               stats[di][2], stats[di][3], stats[di][4], stats[di][5]);
    printf("\n  the seed (NumPy default_rng(0)), as it prints them:\n%s", hdr);
    for (int di = 0; di < 5; ++di) {
        const double *r = seed_stats + 6 * di;
        printf("    %6d %9.1f | %20.3f %8.4f | %18.3f %8.4f\n", (int)r[0], r[1], r[2], r[3],
               r[4], r[5]);
    }
    printf("\n  attn's other diagnostics of the same rows (means): the spectral norm of the\n"
           "  softmax Jacobian diag(p) - p p^T (LAPACK dsyevd) and the entropy in nats (log 10 "
           "= %.3f):\n",
           log(10.0));
    printf("       d_k | unscaled: ||J||_2  entropy | scaled: ||J||_2  entropy\n");
    for (int di = 0; di < 5; ++di)
        printf("    %6d | %16.4f %8.3f | %14.4f %8.3f\n", dks[di], spec[di][0], ent[di][0],
               spec[di][1], ent[di][1]);
    printf("\n  The score spread grows as sqrt(d_k); unscaled, the largest weight tends to 1 "
           "(softmax\n"
           "  becomes argmax) and the Jacobian norm to 0: little gradient reaches Q and K. "
           "Divided by\n"
           "  sqrt(d_k), the scores have variance 1 again and the sharpness stays the same for "
           "every d_k.\n\n");

    wk_check(sdpa_vs_softmax <= TOL,
             "attn_sdpa(scale 1) weights == attn_softmax(K q) (max diff %.1e)",
             sdpa_vs_softmax);
    double worst_sd = 0, worst_z = 0;
    for (int di = 0; di < 5; ++di) {
        worst_sd = fmax(worst_sd, fabs(stats[di][1] / sqrt((double)dks[di]) - 1));
        for (int c = 1; c < 6; ++c) {
            double zsc = fabs(stats[di][c] - seed_stats[6 * di + c]) / (sqrt(2.0) * se[di][c]);
            worst_z = fmax(worst_z, zsc);
        }
    }
    wk_check(worst_sd < 0.05, "std(q.k) = sqrt(d_k) within 5%% (worst %.1f%%)", 100 * worst_sd);
    wk_check(worst_z < 5,
             "every statistic agrees with the seed's within 5 standard errors "
             "(worst %.2f)",
             worst_z);
    bool mono = true;
    for (int di = 1; di < 5; ++di)
        mono = mono && stats[di][2] > stats[di - 1][2] && stats[di][3] < stats[di - 1][3];
    wk_check(mono && stats[4][2] > 0.9 && stats[4][3] < 0.1,
             "unscaled: max weight rises to %.3f and ||J||_F falls to %.4f as d_k grows",
             stats[4][2], stats[4][3]);
    double lo_m = 1, hi_m = 0, lo_g = 1, hi_g = 0;
    for (int di = 0; di < 5; ++di) {
        lo_m = fmin(lo_m, stats[di][4]);
        hi_m = fmax(hi_m, stats[di][4]);
        lo_g = fmin(lo_g, stats[di][5]);
        hi_g = fmax(hi_g, stats[di][5]);
    }
    wk_check(hi_m - lo_m < 0.05 && hi_g - lo_g < 0.05,
             "scaled: max weight %.3f..%.3f and ||J||_F %.4f..%.4f stay put", lo_m, hi_m, lo_g,
             hi_g);
}

/* ---- demo 4 ------------------------------------------------------------------ */

static void demo_permutation(const wk_fixture *fx) {
    header("Demo 4: self-attention does not know word order (permutation equivariance)");
    static const char *words[3] = {"dog", "bites", "man"};
    const double *emb = wk_get(fx, "d4_emb", 12), *WQ = wk_get(fx, "d4_W_Q", 16);
    const double *WK = wk_get(fx, "d4_W_K", 16), *WV = wk_get(fx, "d4_W_V", 16);
    double X1[12], X2[12], o1[12], o2[12], A[9];
    static const int order2[3] = {2, 1, 0}; /* "man bites dog" */
    for (int t = 0; t < 3; ++t)
        for (int c = 0; c < 4; ++c) {
            X1[t * 4 + c] = emb[t * 4 + c];
            X2[t * 4 + c] = emb[order2[t] * 4 + c];
        }
    self_attention(3, 4, 4, X1, WQ, WK, WV, ATTN_CAUSAL_NONE, o1, A);
    self_attention(3, 4, 4, X2, WQ, WK, WV, ATTN_CAUSAL_NONE, o2, A);
    printf("\n  sentence 1: dog bites man        sentence 2: man bites dog\n");
    double worst = 0;
    for (int w = 0; w < 3; ++w) {
        int i2 = order2[w]; /* position of word w in sentence 2 */
        double dd = maxdiff(o1 + 4 * w, o2 + 4 * i2, 4);
        worst = fmax(worst, dd);
        printf("    is \"%s\"'s output the same in both sentences? %s (max diff %.1e)\n",
               words[w], dd <= TOL ? "True" : "False", dd);
    }
    printf(
        "\n  Shuffling the words only shuffles the outputs: to self-attention a sentence is a "
        "set.\n"
        "  Scores q_i.k_j depend on the two vectors, not on where they stand. The fix: add a\n"
        "  different vector to each position (here the seed's P[p] = sin(t (p + 1)), t = "
        "0..3).\n");
    double P[12], X1p[12], X2p[12], o1p[12], o2p[12];
    for (int p = 0; p < 3; ++p)
        for (int t = 0; t < 4; ++t)
            P[p * 4 + t] = sin((double)t * (p + 1));
    attn_view x1 = WK_VIEW(ATTN_F64, X1, 3, 4), x2 = WK_VIEW(ATTN_F64, X2, 3, 4);
    attn_view pv = WK_VIEW(ATTN_F64, P, 3, 4);
    attn_view x1p = WK_VIEW(ATTN_F64, X1p, 3, 4), x2p = WK_VIEW(ATTN_F64, X2p, 3, 4);
    CHECK(attn_add(&x1, &pv, &x1p));
    CHECK(attn_add(&x2, &pv, &x2p));
    self_attention(3, 4, 4, X1p, WQ, WK, WV, ATTN_CAUSAL_NONE, o1p, A);
    self_attention(3, 4, 4, X2p, WQ, WK, WV, ATTN_CAUSAL_NONE, o2p, A);
    double dpos = maxdiff(o1p, o2p + 8, 4);
    printf("  with position vectors added, is \"dog\"'s output still the same? %s (max diff "
           "%.3f)\n\n",
           dpos <= TOL ? "True" : "False", dpos);
    wk_check(worst <= TOL, "without positions each word's output is the same (max diff %.1e)",
             worst);
    wk_check(dpos > 1e-3, "with positions \"dog\"'s output changes (by %.3f)", dpos);
    double d = fmax(fmax(maxdiff(o1, wk_get(fx, "d4_o1", 12), 12),
                         maxdiff(o2, wk_get(fx, "d4_o2", 12), 12)),
                    fmax(maxdiff(o1p, wk_get(fx, "d4_o1p", 12), 12),
                         maxdiff(o2p, wk_get(fx, "d4_o2p", 12), 12)));
    d = fmax(d, maxdiff(P, wk_get(fx, "d4_P", 12), 12));
    wk_check(d <= TOL, "P and the four outputs equal the seed's (max diff %.1e)", d);
}

/* ---- demo 5 ------------------------------------------------------------------ */

static void demo_causal(const wk_fixture *fx) {
    header("Demo 5: the causal mask: look only at earlier words");
    static const char *words[4] = {"<s>", "the", "cat", "sat"};
    const double *X = wk_get(fx, "d5_X", 16), *WQ = wk_get(fx, "d5_W_Q", 12);
    const double *WK = wk_get(fx, "d5_W_K", 12), *WV = wk_get(fx, "d5_W_V", 12);
    double out[12], A[16], mask[16];
    /* ATTN_CAUSAL_TOP_LEFT: query i sees keys j <= i, the seed's np.tril(ones) */
    self_attention(4, 4, 3, X, WQ, WK, WV, ATTN_CAUSAL_TOP_LEFT, out, A);
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            mask[i * 4 + j] = j <= i;
    printf("\n  The mask (1 = may look, 0 = may not):\n");
    print_matrix(mask, 4, 4, words, words, 4, 0);
    printf("\n  Attention weights with the mask (the upper right is all 0):\n");
    print_matrix(A, 4, 4, words, words, 6, 2);
    double Xc[16], out2[12], A2[16];
    memcpy(Xc, X, sizeof Xc);
    memcpy(Xc + 12, wk_get(fx, "d5_new_last", 4), 4 * sizeof(double));
    self_attention(4, 4, 3, Xc, WQ, WK, WV, ATTN_CAUSAL_TOP_LEFT, out2, A2);
    bool same = memcmp(out, out2, 9 * sizeof(double)) == 0;
    printf("\n  Replace the last word: did the outputs of the first 3 positions change? %s\n",
           same ? "False" : "True");
    printf(
        "\n  Word i attends to words 1..i only. A language model predicts word i+1 from "
        "position\n"
        "  i's output; seeing word i+1 would be reading the answer. With the mask the whole\n"
        "  sentence is computed in parallel, each position exactly as if the model had only "
        "seen\n"
        "  the first i words: this is why Transformers train fast.\n\n");
    double upper = 0;
    for (int i = 0; i < 4; ++i)
        for (int j = i + 1; j < 4; ++j)
            upper = fmax(upper, fabs(A[i * 4 + j]));
    wk_check(upper == 0, "weights above the diagonal are exactly 0");
    wk_check(same, "editing the last word leaves the first 3 outputs bit-identical");
    wk_check(maxdiff(out2 + 9, out + 9, 3) > 1e-6, "and changes the last output");
    double d = fmax(fmax(maxdiff(A, wk_get(fx, "d5_A", 16), 16),
                         maxdiff(out, wk_get(fx, "d5_out", 12), 12)),
                    maxdiff(out2, wk_get(fx, "d5_out_changed", 12), 12));
    wk_check(d <= TOL, "weights and both outputs equal the seed's (max diff %.1e)", d);
}

/* ---- demo 6 ------------------------------------------------------------------ */

static void demo_flops(const wk_fixture *fx) {
    header("Demo 6: compute: when does the O(n^2) attention matrix become the bottleneck?");
    printf(
        "\n  One Transformer layer (d = d_model, FFN hidden 4d) on n tokens, in multiply-adds\n"
        "  (1 multiply-add = 2 floating-point operations):\n"
        "    Q, K, V and output projections: 4 d x d matrix products -> 4 n d^2\n"
        "    feed-forward d -> 4d -> d                              -> 8 n d^2\n"
        "    scores Q K^T and the weighted sum A V                  -> 2 n^2 d\n"
        "  The ratio 2 n^2 d / 12 n d^2 = n / (6d): past n = 6d the attention matrix "
        "dominates.\n");
    const int64_t d = 768;
    static const int64_t ns[6] = {128, 512, 1024, 4096, 16384, 65536};
    const double *want = wk_get(fx, "d6_flops", 24);
    printf("\n    d = %lld (GPT-2 small)\n", (long long)d);
    /* the seed's columns and formats: {n:>7d} {lin:>18.2f} {att:>14.2f} {share:>14.1%} */
    printf("    %7s %18s %14s %14s\n", "n", "linear (1e9 MACs)", "attention", "attn share");
    bool same = true;
    for (int i = 0; i < 6; ++i) {
        int64_t n = ns[i];
        double lin = (double)(12 * n * d * d) / 1e9, att = (double)(2 * n * n * d) / 1e9;
        double share = att / (lin + att);
        char pct[32];
        snprintf(pct, sizeof pct, "%.1f%%", 100 * share);
        printf("    %7lld %18.2f %14.2f %14s\n", (long long)n, lin, att, pct);
        same = same && want[4 * i] == (double)n && want[4 * i + 1] == lin &&
               want[4 * i + 2] == att && want[4 * i + 3] == share;
    }
    printf(
        "\n  At n = 1024 (GPT-2's context) the attention matrix is about 18%% of the work; at\n"
        "  n = 65536 over 90%%. The n x n matrix must also be stored (per head, per layer): "
        "memory\n"
        "  grows as n^2 too (attn_sdpa's tiled algorithm never stores it).\n\n");
    wk_check(same, "the table's numbers are bit-identical to the seed's");
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "tests/data/lecture7.txt";
    if (argc > 2) {
        fprintf(stderr, "usage: self_attention_walkthrough [lecture7.txt]\n");
        return 2;
    }
    wk_fixture *fx = wk_load(path);
    if (!fx)
        return 2;
    printf("Lecture 7: self-attention step by step, with attn %s\n", attn_version_string());
    demo_lookup(fx);
    demo_step_by_step(fx);
    demo_scaling(fx);
    demo_permutation(fx);
    demo_causal(fx);
    demo_flops(fx);
    wk_free(fx);
    return wk_result();
}
