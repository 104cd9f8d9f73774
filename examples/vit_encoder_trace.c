/* SPDX-License-Identifier: MIT */
/* LAB 09 (seed 000): a ViT-style pre-norm encoder block on a 4x4 image, every intermediate
 * named. */
#include "walkthrough.h"

/*
 * The seed's computation on attn's public API, in float64:
 *   image (4, 4) -> attn_patchify -> four 2x2 patches (4, 4), row-major order
 *   X = patches W_patch + position                         (attn_gemm, attn_add)
 *   pre-norm block (attn_encoder_forward, the whole trace requested):
 *     r1 = X + MHA(LN(X)),  out = r1 + FFN(LN(r1))
 *     LN without affine, eps 1e-5; 2 heads of width 2; FFN 4 -> 6 -> 4 with
 *     GELU (tanh); no biases
 * with the seed's weights (np.random.default_rng(20260918).normal(0, .35)),
 * read from the fixture file tests/data/vit_seed.txt, which
 * scripts/gen_vit_fixture.py made by running the seed itself. Every number
 * computed here is compared with the seed's own to 1e-12 (absolute, relative
 * above 1).
 *
 * Then the seed's checks (manual read-back, rows summing to 1, the residual
 * identities, finiteness, identical tokens, permutation equivariance without
 * position), the one-pixel study and the remove-position study. Written to
 * the output folder: results.json, token-changes.csv, tensors/<name>.npy
 * (NPY 1.0, loadable by numpy.load) and, when gnuplot is installed,
 * 01-patches.png, 02-readback.png, 03-change-one-patch.png.
 *
 * Usage: vit_encoder_trace [vit_seed.txt=tests/data/vit_seed.txt] [out=attn-out/vit]
 * Exit status 0 when every check passes, 1 when one fails, 2 on bad input.
 */
enum { N = 4, D = 4, HEADS = 2, DH = 2, DFF = 6 };
static const double TOL = 1e-12;

static const double IMAGE[16] = {0.,  0.2, 0.8, 1.0, 0.1, 0.3, 0.7, 0.9,
                                 0.9, 0.7, 0.2, 0.1, 1.,  0.8, 0.3, 0.};
static const double W_PATCH[16] = {1., .1,  0., -.2, .2,  .8, -.1, 0.,
                                   0., -.2, 1., .2,  -.1, 0., .1,  .9};
static const double POSITION[16] = {.2, 0., 0., 0., 0., .2, 0., 0.,
                                    0., 0., .2, 0., 0., 0., 0., .2};

/* Every intermediate of one encoder call, row-major, batch of one. */
typedef struct enc_run {
    double input[N * D], ln1[N * D], q[N * D], k[N * D], v[N * D];
    double scores[HEADS * N * N], attention[HEADS * N * N], read_values[HEADS * N * DH];
    double concat[N * D], proj[N * D], res1[N * D], ln2[N * D];
    double hpre[N * DFF], h[N * DFF], mlp[N * D], output[N * D];
} enc_run;

/* One named tensor of the seed's trace, as a view without the batch dim. */
typedef struct named {
    const char *name;
    attn_view v;
} named;
enum { NTRACE = 19 };

/* The seed's trace dict, in its order: Q_heads etc. are views of Q (no copies). */
static void trace_views(enc_run *r, named out[NTRACE]) {
    attn_view q = WK_VIEW(ATTN_F64, r->q, N, D), k = WK_VIEW(ATTN_F64, r->k, N, D);
    attn_view v = WK_VIEW(ATTN_F64, r->v, N, D), heads[3];
    const attn_view *src[3] = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) { /* (T, H*DH) -> (T, H, DH) -> (H, T, DH) */
        CHECK(attn_view_split(src[i], 1, DH, &heads[i]));
        CHECK(attn_view_permute(&heads[i], (const int[]){1, 0, 2}, &heads[i]));
    }
    named t[NTRACE] = {{"input", WK_VIEW(ATTN_F64, r->input, N, D)},
                       {"ln1", WK_VIEW(ATTN_F64, r->ln1, N, D)},
                       {"Q", q},
                       {"Q_heads", heads[0]},
                       {"K", k},
                       {"K_heads", heads[1]},
                       {"V", v},
                       {"V_heads", heads[2]},
                       {"scores", WK_VIEW(ATTN_F64, r->scores, HEADS, N, N)},
                       {"attention", WK_VIEW(ATTN_F64, r->attention, HEADS, N, N)},
                       {"read_values", WK_VIEW(ATTN_F64, r->read_values, HEADS, N, DH)},
                       {"concat", WK_VIEW(ATTN_F64, r->concat, N, D)},
                       {"projected_attention", WK_VIEW(ATTN_F64, r->proj, N, D)},
                       {"residual1", WK_VIEW(ATTN_F64, r->res1, N, D)},
                       {"ln2", WK_VIEW(ATTN_F64, r->ln2, N, D)},
                       {"mlp_hidden_pre", WK_VIEW(ATTN_F64, r->hpre, N, DFF)},
                       {"mlp_hidden", WK_VIEW(ATTN_F64, r->h, N, DFF)},
                       {"mlp_output", WK_VIEW(ATTN_F64, r->mlp, N, D)},
                       {"output", WK_VIEW(ATTN_F64, r->output, N, D)}};
    memcpy(out, t, sizeof t);
}

static attn_view find(named *t, const char *name) {
    for (int i = 0; i < NTRACE; ++i)
        if (!strcmp(t[i].name, name))
            return t[i].v;
    fprintf(stderr, "no trace tensor %s\n", name);
    exit(2);
}

/* Run the block on x (N, D), filling every field of *r. */
static void encode(const attn_encoder_config *cfg, const attn_encoder_params *p,
                   const double *x, enc_run *r) {
    memcpy(r->input, x, sizeof r->input);
    attn_view in = WK_VIEW(ATTN_F64, r->input, 1, N, D),
              out = WK_VIEW(ATTN_F64, r->output, 1, N, D);
    attn_view ln1 = WK_VIEW(ATTN_F64, r->ln1, 1, N, D), q = WK_VIEW(ATTN_F64, r->q, 1, N, D);
    attn_view k = WK_VIEW(ATTN_F64, r->k, 1, N, D), v = WK_VIEW(ATTN_F64, r->v, 1, N, D);
    attn_view sc = WK_VIEW(ATTN_F64, r->scores, 1, HEADS, N, N);
    attn_view at = WK_VIEW(ATTN_F64, r->attention, 1, HEADS, N, N);
    attn_view rv = WK_VIEW(ATTN_F64, r->read_values, 1, HEADS, N, DH);
    attn_view cc = WK_VIEW(ATTN_F64, r->concat, 1, N, D),
              pa = WK_VIEW(ATTN_F64, r->proj, 1, N, D);
    attn_view r1 = WK_VIEW(ATTN_F64, r->res1, 1, N, D),
              ln2 = WK_VIEW(ATTN_F64, r->ln2, 1, N, D);
    attn_view hp = WK_VIEW(ATTN_F64, r->hpre, 1, N, DFF),
              h = WK_VIEW(ATTN_F64, r->h, 1, N, DFF);
    attn_view mo = WK_VIEW(ATTN_F64, r->mlp, 1, N, D);
    attn_trace tr = {.ln1 = &ln1,
                     .q = &q,
                     .k = &k,
                     .v = &v,
                     .scores = &sc,
                     .attention = &at,
                     .read_values = &rv,
                     .concat = &cc,
                     .projected_attention = &pa,
                     .residual1 = &r1,
                     .ln2 = &ln2,
                     .mlp_hidden_pre = &hp,
                     .mlp_hidden = &h,
                     .mlp_output = &mo};
    CHECK(attn_encoder_forward(cfg, p, &in, NULL, &out, &tr, NULL, 0));
}

/* X = patchify(image) W_patch (+ position when given); patches (N, 4) also returned. */
static void embed(const double *image, const double *position, double *patches, double *x) {
    attn_view im = WK_VIEW(ATTN_F64, (void *)image, 4, 4),
              pt = WK_VIEW(ATTN_F64, patches, N, 4);
    attn_view wp = WK_VIEW(ATTN_F64, (void *)W_PATCH, 4, D), xv = WK_VIEW(ATTN_F64, x, N, D);
    CHECK(attn_patchify(2, &im, &pt));
    CHECK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &pt, &wp, 0.0, &xv, NULL, 0));
    if (position) {
        attn_view pv = WK_VIEW(ATTN_F64, (void *)position, N, D);
        CHECK(attn_add(&xv, &pv, &xv));
    }
}

/* Row-wise L2 norms of a - b, both (N, D). */
static void row_change(const double *a, const double *b, double out[N]) {
    for (int t = 0; t < N; ++t) {
        double s = 0;
        for (int c = 0; c < D; ++c)
            s += (a[t * D + c] - b[t * D + c]) * (a[t * D + c] - b[t * D + c]);
        out[t] = sqrt(s);
    }
}

/* Worst |got - want| / max(1, |want|) over a view and a row-major array. */
static double disagreement(const attn_view *got, const double *want) {
    double m = 0;
    for (int64_t i = 0, n = attn_view_numel(got); i < n; ++i) {
        double d = fabs(wk_at(got, i) - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(d <= m))
            m = d;
    }
    return m;
}

static void shape_str(const attn_view *v, char *buf, size_t n) {
    int off = snprintf(buf, n, "(");
    for (int d = 0; d < v->ndim; ++d)
        off += snprintf(buf + off, n - (size_t)off, "%s%lld", d ? ", " : "",
                        (long long)v->shape[d]);
    snprintf(buf + off, n - (size_t)off, v->ndim == 1 ? ",)" : ")");
}

static void print_tensor(const char *name, const attn_view *v) {
    char s[64];
    shape_str(v, s, sizeof s);
    printf("%s %s\n", name, s);
    int64_t cols = v->shape[v->ndim - 1], rows = attn_view_numel(v) / cols;
    int64_t block = v->ndim == 3 ? v->shape[1] : rows;
    for (int64_t r = 0; r < rows; ++r) {
        if (v->ndim == 3 && r % block == 0)
            printf("  [%lld]\n", (long long)(r / block));
        printf("   ");
        for (int64_t c = 0; c < cols; ++c)
            printf(" % .4f", wk_at(v, r * cols + c));
        printf("\n");
    }
}

/* ---- output files --------------------------------------------------------------- */

/* NPY format 1.0: magic, version, header length, a dict padded to 64 bytes, data. */
static void write_npy(const char *dir, const char *name, const attn_view *v) {
    char file[128], hdr[256], shape[64];
    snprintf(file, sizeof file, "%s.npy", name);
    shape_str(v, shape, sizeof shape);
    int len = snprintf(hdr, sizeof hdr,
                       "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }", shape);
    int total =
        (10 + len + 1 + 63) / 64 * 64; /* magic(6) + version(2) + length(2) + dict + '\n' */
    while (10 + len < total - 1)
        hdr[len++] = ' ';
    hdr[len++] = '\n';
    FILE *f = wk_open(dir, file);
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)(len & 0xff),
                             (unsigned char)(len >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int64_t i = 0, n = attn_view_numel(v); i < n; ++i) {
        double x = wk_at(v, i);
        unsigned char b[8];
        uint64_t u;
        memcpy(&u, &x, 8);
        for (int k = 0; k < 8; ++k)
            b[k] = (unsigned char)(u >> (8 * k)); /* little-endian */
        fwrite(b, 1, 8, f);
    }
    fclose(f);
}

typedef struct study {
    double one_pixel[5][N]; /* input, projected_attention, residual1, mlp_output, output */
    double remove_position[N];
    double identical_dev, permutation_err;
} study;
static const char *const ONE_PIXEL[5] = {"input", "projected_attention", "residual1",
                                         "mlp_output", "output"};

static void write_gnuplot_matrix(FILE *g, const char *block, const double *m, int rows,
                                 int cols) {
    fprintf(g, "$%s << EOD\n", block);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c)
            fprintf(g, "%.17g ", m[r * cols + c]);
        fprintf(g, "\n");
    }
    fprintf(g, "EOD\n");
}

/* Matplotlib's look: open axes, tab10 line colours, viridis and Blues palettes. */
static const char *const GP_STYLE =
    "reset\nset encoding utf8\nset border 3\nset tics nomirror out\n"
    "set title font ',14'\nset key noopaque\n"
    "set linetype 1 lc rgb '#1f77b4' lw 2 pt 7 ps 1.2\n"
    "set linetype 2 lc rgb '#ff7f0e' lw 2 pt 5 ps 1.2\n"
    "set linetype 3 lc rgb '#2ca02c' lw 2 pt 9 ps 1.4\n";
static const char *const GP_VIRIDIS =
    "set palette defined (0 '#440154', 0.25 '#3b528b', 0.5 '#21908d', 0.75 '#5dc963', "
    "1 '#fde725')\n";
static const char *const GP_BLUES =
    "set palette defined (0 '#f7fbff', 0.125 '#deebf7', 0.25 '#c6dbef', 0.375 '#9ecae1', "
    "0.5 '#6baed6', 0.625 '#4292c6', 0.75 '#2171b5', 0.875 '#08519c', 1 '#08306b')\n";
/* A square heatmap of a 4x4 matrix, row 0 at the top (imshow's orientation). */
static const char *const GP_HEATMAP =
    "set size ratio -1\nset xrange [-0.5:3.5]\nset yrange [3.5:-0.5]\n"
    "set xtics 0,1,3\nset ytics 0,1,3\n";

/* The seed's three figures through gnuplot (pngcairo). Returns false when gnuplot fails. */
static bool plot(const char *dir, const enc_run *r, const study *st) {
    FILE *g = popen("gnuplot", "w");
    if (!g)
        return false;
    write_gnuplot_matrix(g, "img", IMAGE, 4, 4);
    write_gnuplot_matrix(g, "X", r->input, N, D);
    write_gnuplot_matrix(g, "A0", r->attention, N, N);
    write_gnuplot_matrix(g, "A1", r->attention + N * N, N, N);
    fprintf(g, "$norms << EOD\n");
    for (int t = 0; t < N; ++t) {
        double pa = 0, mo = 0;
        for (int c = 0; c < D; ++c) {
            pa += r->proj[t * D + c] * r->proj[t * D + c];
            mo += r->mlp[t * D + c] * r->mlp[t * D + c];
        }
        fprintf(g, "%d %.17g %.17g\n", t, sqrt(pa), sqrt(mo));
    }
    fprintf(g, "EOD\n$change << EOD\n");
    for (int t = 0; t < N; ++t)
        fprintf(g, "%d %.17g %.17g %.17g\n", t, st->one_pixel[0][t], st->one_pixel[1][t],
                st->one_pixel[4][t]);
    fprintf(g, "EOD\n");

    /* 01: the image cut into patches | the tokens X */
    fprintf(g, "%s%s", GP_STYLE, GP_HEATMAP);
    fprintf(g,
            "set terminal pngcairo size 1080,456 font 'DejaVu Sans,12'\n"
            "set output '%s/01-patches.png'\nset multiplot layout 1,2\n"
            "set palette gray\nset cbrange [0:1]\nunset colorbox\n"
            "set title 'Constructed image | 4 patches'\n"
            "set arrow 1 from 1.5,-0.5 to 1.5,3.5 nohead lc rgb '#e6b450' lw 3 front\n"
            "set arrow 2 from -0.5,1.5 to 3.5,1.5 nohead lc rgb '#e6b450' lw 3 front\n",
            dir);
    const double lp[4][2] = {{0.5, .5}, {2.5, .5}, {.5, 2.5}, {2.5, 2.5}};
    for (int i = 0; i < 4; ++i)
        fprintf(g,
                "set label %d 'P%d' at %g,%g center front tc rgb '#f2ab32' "
                "font 'DejaVu Sans:Bold,12'\n",
                i + 1, i, lp[i][0], lp[i][1]);
    fprintf(g,
            "plot $img matrix with image notitle\n"
            "unset arrow\nunset label\n%sset cbrange [*:*]\nset autoscale cbfix\nset colorbox\n"
            "set title 'Projected pixels + position'\nset xlabel 'Channel'\n"
            "set ylabel 'Patch token'\nplot $X matrix with image notitle\nunset multiplot\n",
            GP_VIRIDIS);

    /* 02: the two heads' attention, annotated, and the two branch norms per token */
    fprintf(g, "%s%s%s", GP_STYLE, GP_HEATMAP, GP_BLUES);
    fprintf(g,
            "set terminal pngcairo size 1440,408 font 'DejaVu Sans,12'\n"
            "set output '%s/02-readback.png'\nset multiplot layout 1,3\n"
            "set cbrange [0:1]\nset xlabel 'Read from key'\nset ylabel 'Query'\n",
            dir);
    for (int h = 0; h < HEADS; ++h)
        fprintf(g,
                "set title 'Head %d: all-to-all read'\n%s"
                "plot $A%d matrix with image notitle, "
                "$A%d matrix using 1:2:(sprintf('%%.2f', $3)) with labels notitle\n",
                h, h == 0 ? "unset colorbox\n" : "set colorbox\n", h, h);
    fprintf(g,
            "set size noratio\nset autoscale\nset xrange [-0.2:3.2]\nset yrange [0:*]\n"
            "set xtics 0,1,3\nset ytics auto\n"
            "set title 'Two updates to a residual path'\nset xlabel 'Token'\n"
            "set ylabel 'Branch output L2 norm'\nset key bottom right Left reverse font ',10'\n"
            "plot $norms using 1:2 with linespoints lt 1 title 'Attention branch', "
            "$norms using 1:3 with linespoints lt 2 dt 2 title 'MLP branch'\n"
            "unset multiplot\n");

    /* 03: what one changed pixel in patch 3 does to every token */
    fprintf(g, "%s", GP_STYLE);
    fprintf(g,
            "set terminal pngcairo size 960,456 font 'DejaVu Sans,12'\n"
            "set output '%s/03-change-one-patch.png'\n"
            "set xlabel 'Token index'\nset ylabel 'L2 change'\nset xtics 0,1,3\n"
            "set xrange [-0.15:3.15]\nset yrange [-0.03:*]\n"
            "set title 'Change one pixel in patch 3; all weights fixed'\n"
            "set key top left Left reverse box\n"
            "plot $change using 1:2 with linespoints lt 1 dt 2 title 'input', "
            "$change using 1:3 with linespoints lt 2 title 'projected\\_attention', "
            "$change using 1:4 with linespoints lt 3 title 'output'\n"
            "set output\n",
            dir);
    return pclose(g) == 0;
}

static void write_json(const char *dir, named *tr, const double *patches, const double *W[6],
                       const study *st, const bool checks[5], double worst) {
    static const char *wn[6] = {"W_Q", "W_K", "W_V", "W_O", "W_1", "W_2"};
    static const int64_t ws[6][2] = {{D, D}, {D, D}, {D, D}, {D, D}, {D, DFF}, {DFF, D}};
    wk_json j = {wk_open(dir, "results.json"), 0, true};
    wk_json_open(&j, NULL, '{');
    wk_json_str(&j, "kind", "exact_constructed_calculation_not_trained_model");
    wk_json_int(&j, "seed", 20260918);
    wk_json_environment(&j);
    wk_json_open(&j, "structure", '{');
    wk_json_str(&j, "norm", "pre-norm");
    wk_json_int(&j, "heads", HEADS);
    wk_json_int(&j, "d_model", D);
    wk_json_int(&j, "d_head", DH);
    wk_json_int(&j, "d_ff", DFF);
    wk_json_num(&j, "epsilon", 1e-5);
    wk_json_str(&j, "mask", "none");
    wk_json_int(&j, "dropout", 0);
    wk_json_str(&j, "gelu", "tanh approximation");
    wk_json_bool(&j, "class_token", false);
    wk_json_close(&j, '}');
    attn_view v = WK_VIEW(ATTN_F64, (void *)IMAGE, 4, 4);
    wk_json_view(&j, "image", &v);
    v = WK_VIEW(ATTN_F64, (void *)patches, N, 4);
    wk_json_view(&j, "patches", &v);
    v = WK_VIEW(ATTN_F64, (void *)POSITION, N, D);
    wk_json_view(&j, "position", &v);
    v = WK_VIEW(ATTN_F64, (void *)W_PATCH, 4, D);
    wk_json_view(&j, "patch_projection", &v);
    wk_json_open(&j, "weights", '{');
    for (int i = 0; i < 6; ++i) {
        v = WK_VIEW(ATTN_F64, (void *)W[i], ws[i][0], ws[i][1]);
        wk_json_view(&j, wn[i], &v);
    }
    wk_json_close(&j, '}');
    wk_json_open(&j, "trace", '{');
    for (int i = 0; i < NTRACE; ++i)
        wk_json_view(&j, tr[i].name, &tr[i].v);
    wk_json_close(&j, '}');
    wk_json_open(&j, "changes", '{');
    wk_json_open(&j, "one_pixel", '{');
    for (int k = 0; k < 5; ++k) {
        v = WK_VIEW(ATTN_F64, (void *)st->one_pixel[k], N);
        wk_json_view(&j, ONE_PIXEL[k], &v);
    }
    wk_json_close(&j, '}');
    v = WK_VIEW(ATTN_F64, (void *)st->remove_position, N);
    wk_json_view(&j, "remove_position", &v);
    wk_json_num(&j, "identical_attention_max_deviation_from_uniform", st->identical_dev);
    wk_json_num(&j, "permutation_max_error", st->permutation_err);
    wk_json_close(&j, '}');
    wk_json_open(&j, "checks", '{');
    static const char *cn[5] = {"manual_readback", "softmax_rows_sum_one", "residuals",
                                "identical_tokens_uniform",
                                "no_position_permutation_equivariance"};
    for (int i = 0; i < 5; ++i)
        wk_json_bool(&j, cn[i], checks[i]);
    wk_json_num(&j, "max_disagreement_with_seed", worst);
    wk_json_close(&j, '}');
    wk_json_close(&j, '}');
    fclose(j.f);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "tests/data/vit_seed.txt";
    const char *dir = argc > 2 ? argv[2] : "attn-out/vit";
    if (argc > 3) {
        fprintf(stderr, "usage: vit_encoder_trace [vit_seed.txt] [output folder]\n");
        return 2;
    }
    wk_fixture *fx = wk_load(path);
    if (!fx)
        return 2;
    printf("LAB 09: a ViT-style encoder block on a constructed image, with attn %s\n\n",
           attn_version_string());

    /* ---- patches, projection, position ---- */
    double patches[N * 4], X[N * D], embedded[N * D];
    embed(IMAGE, POSITION, patches, X);
    embed(IMAGE, NULL, patches, embedded);
    printf("image (4, 4) patches (4, 4) embedding (4, 4) tokens X (4, 4)\n");
    attn_view pv = WK_VIEW(ATTN_F64, patches, N, 4), xv = WK_VIEW(ATTN_F64, X, N, D);
    wk_print("patch vectors (attn_patchify, P = 2; row-major patch order):", &pv, " %6.4f");
    wk_print("X = patches @ W_patch + position:", &xv, " % .4f");
    printf("\n");

    /* ---- the block, with the seed's weights bound into a parameter slab ---- */
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F64, .d_model = D, .heads = HEADS, .d_head = DH},
        .ffn = {.dtype = ATTN_F64, .d_model = D, .d_ff = DFF, .act = ATTN_ACT_GELU_TANH},
        .eps = 1e-5,
        .norm = ATTN_PRE_NORM,
        .ln_affine = false};
    size_t pbytes = attn_encoder_params_size(&cfg);
    void *slab = aligned_alloc(64, (pbytes + 63) / 64 * 64);
    attn_encoder_params p;
    CHECK(attn_encoder_params_bind(&p, &cfg, slab, pbytes));
    static const char *wn[6] = {"W_Q", "W_K", "W_V", "W_O", "W_1", "W_2"};
    attn_view *dst[6] = {&p.mha.wq, &p.mha.wk, &p.mha.wv, &p.mha.wo, &p.ffn.w1, &p.ffn.w2};
    const double *W[6];
    for (int i = 0; i < 6; ++i) {
        W[i] = wk_get(fx, wn[i], attn_view_numel(dst[i]));
        attn_view src = wk_view(ATTN_F64, (void *)W[i], 2, dst[i]->shape);
        CHECK(attn_view_copy(&src, dst[i]));
    }
    printf(
        "encoder block: pre-norm, %lld parameters (%d heads of width %d, d_ff %d, no biases,\n"
        "LayerNorm without affine, eps 1e-5, GELU tanh)\n\n",
        (long long)attn_encoder_param_count(&cfg), HEADS, DH, DFF);

    enc_run *run = calloc(5, sizeof *run); /* trace, pixel, no position, identical, permuted */
    enc_run *tr = &run[0];
    encode(&cfg, &p, X, tr);
    named t[NTRACE];
    trace_views(tr, t);
    for (int i = 0; i < NTRACE; ++i) {
        char s[64];
        shape_str(&t[i].v, s, sizeof s);
        printf("%-22s %s\n", t[i].name, s);
    }
    attn_view a0, rv0, outv = find(t, "output");
    attn_view att = find(t, "attention"), rvals = find(t, "read_values");
    CHECK(attn_view_select(&att, 0, 0, &a0));
    CHECK(attn_view_select(&rvals, 0, 0, &rv0));
    wk_print("Head 0 attention weights (row=query, column=key):", &a0, " %.4f");
    wk_print("Head 0 read-back values:", &rv0, " % .4f");
    wk_print("Final output:", &outv, " % .4f");
    printf("\n");
    static const char *shown[] = {"ln1",
                                  "Q",
                                  "K",
                                  "V",
                                  "scores",
                                  "concat",
                                  "projected_attention",
                                  "residual1",
                                  "ln2",
                                  "mlp_hidden_pre",
                                  "mlp_hidden",
                                  "mlp_output",
                                  "output"};
    for (size_t i = 0; i < sizeof shown / sizeof *shown; ++i) {
        attn_view v = find(t, shown[i]);
        print_tensor(shown[i], &v);
    }

    /* ---- the seed's checks ---- */
    printf("\nChecks:\n");
    double manual[DH] = {0};
    attn_view vh = find(t, "V_heads");
    for (int k = 0; k < N; ++k)
        for (int c = 0; c < DH; ++c)
            manual[c] += tr->attention[k] * wk_at(&vh, k * DH + c);
    printf("  Manual readback:     [% .17g, % .17g]\n", manual[0], manual[1]);
    printf("  Vectorized readback: [% .17g, % .17g]\n", tr->read_values[0], tr->read_values[1]);
    printf("  Softmax row sums:");
    double rowsum_err = 0;
    for (int r = 0; r < HEADS * N; ++r) {
        double s = 0;
        for (int k = 0; k < N; ++k)
            s += tr->attention[r * N + k];
        printf(" %.17g", s);
        rowsum_err = fmax(rowsum_err, fabs(s - 1));
    }
    printf("\n");
    bool checks[5];
    double dmanual =
        fmax(fabs(manual[0] - tr->read_values[0]), fabs(manual[1] - tr->read_values[1]));
    checks[0] =
        wk_check(dmanual <= TOL,
                 "manual read-back of head 0, query 0 == read_values (diff %.1e)", dmanual);
    checks[1] =
        wk_check(rowsum_err <= TOL, "softmax rows sum to 1 (max |sum - 1| %.1e)", rowsum_err);
    double r1 = 0, r2 = 0;
    for (int i = 0; i < N * D; ++i) {
        r1 = fmax(r1, fabs(tr->res1[i] - X[i] - tr->proj[i]));
        r2 = fmax(r2, fabs(tr->output[i] - tr->res1[i] - tr->mlp[i]));
    }
    checks[2] = wk_check(
        fmax(r1, r2) <= TOL,
        "residual1 - X == projected_attention (%.1e), output - residual1 == mlp_output (%.1e)",
        r1, r2);
    bool finite = true;
    for (int i = 0; i < NTRACE; ++i)
        for (int64_t k = 0, n = attn_view_numel(&t[i].v); k < n; ++k)
            finite = finite && isfinite(wk_at(&t[i].v, k));
    wk_check(finite, "every trace tensor is finite");

    /* ---- the studies: one pixel, no position, identical tokens, a permutation ---- */
    study st;
    double changed_image[16], X_pixel[N * D], tmp[N * 4];
    memcpy(changed_image, IMAGE, sizeof changed_image);
    changed_image[3 * 4 + 3] += .4;
    embed(changed_image, POSITION, tmp, X_pixel);
    encode(&cfg, &p, X_pixel, &run[1]);
    const double *a[5] = {run[1].input, run[1].proj, run[1].res1, run[1].mlp, run[1].output};
    const double *b[5] = {tr->input, tr->proj, tr->res1, tr->mlp, tr->output};
    for (int k = 0; k < 5; ++k)
        row_change(a[k], b[k], st.one_pixel[k]);
    encode(&cfg, &p, embedded, &run[2]);
    row_change(run[2].output, tr->output, st.remove_position);
    double identical[N * D], permuted[N * D];
    static const int perm[N] = {2, 0, 3, 1};
    for (int tk = 0; tk < N; ++tk)
        for (int c = 0; c < D; ++c) {
            identical[tk * D + c] = embedded[c];
            permuted[tk * D + c] = embedded[perm[tk] * D + c];
        }
    encode(&cfg, &p, identical, &run[3]);
    encode(&cfg, &p, permuted, &run[4]);
    st.identical_dev = st.permutation_err = 0;
    double rows_same = 0;
    for (int i = 0; i < HEADS * N * N; ++i)
        st.identical_dev = fmax(st.identical_dev, fabs(run[3].attention[i] - .25));
    for (int i = 0; i < N * D; ++i) {
        rows_same = fmax(rows_same, fabs(run[3].output[i] - run[3].output[i % D]));
        st.permutation_err =
            fmax(st.permutation_err,
                 fabs(run[4].output[i] - run[2].output[perm[i / D] * D + i % D]));
    }
    checks[3] = wk_check(
        st.identical_dev <= 1e-8 && rows_same <= 1e-8,
        "identical tokens: uniform attention (max |w - 1/4| %.1e), identical outputs (%.1e)",
        st.identical_dev, rows_same);
    checks[4] =
        wk_check(st.permutation_err <= 1e-8,
                 "without position, permuting the tokens permutes the outputs (max error %.1e)",
                 st.permutation_err);
    printf("\nOne pixel (image[3][3] += 0.4, patch 3) changes, L2 per token:\n");
    for (int k = 0; k < 5; ++k)
        printf("  %-20s %.6f %.6f %.6f %.6f\n", ONE_PIXEL[k], st.one_pixel[k][0],
               st.one_pixel[k][1], st.one_pixel[k][2], st.one_pixel[k][3]);
    printf("Removing the position changes the output by %.6f %.6f %.6f %.6f\n",
           st.remove_position[0], st.remove_position[1], st.remove_position[2],
           st.remove_position[3]);
    wk_check(st.one_pixel[0][0] == 0 && st.one_pixel[0][1] == 0 && st.one_pixel[0][2] == 0 &&
                 st.one_pixel[0][3] > 0,
             "the pixel changes only token 3's input; attention spreads it to all %d tokens",
             N);

    /* ---- every number against the seed's own ---- */
    printf("\nAgreement with the seed's numbers (|diff| / max(1, |seed|)):\n");
    double worst = 0;
    for (int i = 0; i < NTRACE; ++i) {
        double d = disagreement(&t[i].v, wk_get(fx, t[i].name, attn_view_numel(&t[i].v)));
        worst = fmax(worst, d);
        printf("  %-20s %.1e\n", t[i].name, d);
    }
    struct {
        const char *name;
        const double *got;
        int n;
    } more[] = {{"image", IMAGE, 16},
                {"patches", patches, 16},
                {"W_patch", W_PATCH, 16},
                {"position", POSITION, 16},
                {"change_one_pixel_input", st.one_pixel[0], N},
                {"change_one_pixel_projected_attention", st.one_pixel[1], N},
                {"change_one_pixel_residual1", st.one_pixel[2], N},
                {"change_one_pixel_mlp_output", st.one_pixel[3], N},
                {"change_one_pixel_output", st.one_pixel[4], N},
                {"change_remove_position", st.remove_position, N},
                {"identical_attention_max_deviation", &st.identical_dev, 1},
                {"permutation_max_error", &st.permutation_err, 1}};
    for (size_t i = 0; i < sizeof more / sizeof *more; ++i) {
        attn_view v = WK_VIEW(ATTN_F64, (void *)more[i].got, more[i].n);
        double d = disagreement(&v, wk_get(fx, more[i].name, more[i].n));
        worst = fmax(worst, d);
        printf("  %-37s %.1e\n", more[i].name, d);
    }
    wk_check(worst <= TOL, "every number agrees with the seed's to 1e-12 (worst %.1e)", worst);

    /* ---- artifacts ---- */
    char tdir[1024];
    snprintf(tdir, sizeof tdir, "%s/tensors", dir);
    wk_mkdirs(tdir);
    write_json(dir, t, patches, W, &st, checks, worst);
    FILE *csv = wk_open(dir, "token-changes.csv");
    fprintf(csv, "token,input_l2_change,attention_branch_l2_change,output_l2_change\r\n");
    for (int tk = 0; tk < N; ++tk) {
        char c0[40], c1[40], c2[40];
        wk_fmt(c0, sizeof c0, st.one_pixel[0][tk]);
        wk_fmt(c1, sizeof c1, st.one_pixel[1][tk]);
        wk_fmt(c2, sizeof c2, st.one_pixel[4][tk]);
        fprintf(csv, "%d,%s,%s,%s\r\n", tk, c0, c1, c2); /* Python's csv writes \r\n */
    }
    fclose(csv);
    for (int i = 0; i < NTRACE; ++i)
        write_npy(tdir, t[i].name, &t[i].v);
    for (int i = 0; i < 6; ++i)
        write_npy(tdir, wn[i], dst[i]);
    attn_view iv = WK_VIEW(ATTN_F64, (void *)IMAGE, 4, 4),
              posv = WK_VIEW(ATTN_F64, (void *)POSITION, N, D);
    attn_view wpv = WK_VIEW(ATTN_F64, (void *)W_PATCH, 4, D);
    write_npy(tdir, "image", &iv);
    write_npy(tdir, "position", &posv);
    write_npy(tdir, "W_patch", &wpv);
    printf("\nWrote %s/results.json, token-changes.csv, tensors/*.npy (%d tensors)\n", dir,
           NTRACE + 9);
    if (system("command -v gnuplot >/dev/null 2>&1") == 0)
        wk_check(plot(dir, tr, &st),
                 "gnuplot drew 01-patches.png, 02-readback.png, 03-change-one-patch.png");
    else
        printf("gnuplot is not installed: the three plots are skipped\n");

    free(run);
    free(slab);
    wk_free(fx);
    return wk_result();
}
