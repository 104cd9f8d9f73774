/* SPDX-License-Identifier: MIT */
/* attn-bench's output: the tables on stdout, the CSV and JSON files, the gnuplot plot. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/version.h"
#include "attn_bench.h"

/*
 * The seed's table, row for row: the seed prints
 *   f"    {n:>7d} {lin:>18.2f} {att:>14.2f} {att / (lin + att):>14.1%}"
 * with lin, att = 12 n d^2 / 1e9, 2 n^2 d / 1e9 (GMAC) and Python's % format
 * (the share times 100 in double, then fixed with one decimal). The seed's
 * header is Chinese; this one says the same in English, in the same columns.
 */
void print_analytic(FILE *f, const config *c, const int64_t *ns, int nn) {
    fprintf(f, "    %7s %18s %14s %14s", "n", "linear (GMAC)", "attention", "attn share");
    if (c->window > 0) /* and the same with the window */
        fprintf(f, " %14s %14s", "window attn", "window share");
    fputc('\n', f);
    for (int i = 0; i < nn; ++i) {
        double lin = (double)lin_macs(c, ns[i]) / 1e9, att = (double)att_macs(c, ns[i]) / 1e9;
        double pct = att / (lin + att) * 100.0;
        fprintf(f, "    %7lld %18.2f %14.2f %13.1f%%", (long long)ns[i], lin, att, pct);
        if (c->window > 0) {
            double w = (double)win_att_macs(c, ns[i]) / 1e9;
            fprintf(f, " %14.2f %13.1f%%", w, w / (lin + w) * 100.0);
        }
        fputc('\n', f);
    }
}

void print_config_header(const config *c, const options *o) {
    char win[48] = "";
    if (c->window > 0)
        snprintf(win, sizeof win, " and with a window of %lld keys", (long long)c->window);
    printf("\n== d %lld, %lld heads (D %lld), F %lld, batch %lld, %s, %s%s, algo %s, "
           "%d threads ==\n",
           (long long)c->d, (long long)c->heads, (long long)(c->d / c->heads), (long long)c->ff,
           (long long)c->batch, dtype_name(c->dt), c->causal ? "causal" : "non-causal", win,
           algo_name(o->algo), o->threads);
}

void print_measured(const result *r, const options *o, double peak) {
    printf("Measured: median of %d after %d warm-up; spread = (max - min) / median; "
           "GF/s = 2 MAC / median; %%gemm = GF/s / %.1f (the %s %d^3)\n",
           o->reps, o->warmup, peak, r->cfg.dt == ATTN_F32 ? "sgemm" : "dgemm", GEMM_REF);
    static const char *title[NPARTS] = {"linear ms", "attention ms", "mha ms", "block ms"};
    printf("%7s |", "n");
    for (int k = 0; k < NPARTS; ++k)
        printf("%13s %6s %6s %5s |", title[k], "spread", "GF/s", "%gemm");
    printf(" workspace MiB lin/attn/mha/block\n");
    for (int i = 0; i < r->np; ++i) {
        const point *p = &r->pt[i];
        printf("%7lld |", (long long)p->n);
        for (int k = 0; k < NPARTS; ++k) {
            double g = gflops(part_macs(&r->cfg, p->n, k), p->t[k].med);
            printf("%13.2f %5.1f%% %6.1f %4.0f%% |", 1e3 * p->t[k].med,
                   100.0 * (p->t[k].max - p->t[k].min) / p->t[k].med, g, 100.0 * g / peak);
        }
        for (int k = 0; k < NPARTS; ++k)
            printf("%s%.1f", k ? " / " : " ", p->ws[k] / 1048576.0);
        printf("\n");
    }
}

void print_crossover(const result *r) {
    printf("Crossover: theory %s = %.0f; measured ", theory_name(&r->cfg), r->theory);
    if (isnan(r->x.n))
        printf("none in the range swept\n");
    else if (!strcmp(r->x.kind, "below-range"))
        printf("below the first n (attention already slower at n = %.0f)\n", r->x.n);
    else
        printf("%.0f (%s)\n", r->x.n, r->x.kind);
    printf("  %s.\n", r->why);
}

/*
 * With the window: its attention core, MHA and block, measured like the parts above
 * (GF/s from the window's MACs), and full causal attention's time over the window's.
 */
void print_measured_window(const result *r, double peak) {
    const config *c = &r->cfg;
    printf("With a causal window of %lld keys (key j visible iff i - %lld <= j <= i), "
           "measured as above; GF/s from the window's MACs; full/window = full causal "
           "attention's median / the window's\n",
           (long long)c->window, (long long)(c->window - 1));
    static const char *title[NPARTS] = {"", "window attn ms", "window mha ms",
                                        "window block ms"};
    printf("%7s |", "n");
    for (int k = ATT; k < NPARTS; ++k)
        printf("%16s %6s %6s %5s |", title[k], "spread", "GF/s", "%gemm");
    printf(" %11s | workspace MiB attn/mha/block\n", "full/window");
    for (int i = 0; i < r->np; ++i) {
        const point *p = &r->pt[i];
        printf("%7lld |", (long long)p->n);
        for (int k = ATT; k < NPARTS; ++k) {
            double g = gflops(win_part_macs(c, p->n, k), p->tw[k].med);
            printf("%16.2f %5.1f%% %6.1f %4.0f%% |", 1e3 * p->tw[k].med,
                   100.0 * (p->tw[k].max - p->tw[k].min) / p->tw[k].med, g, 100.0 * g / peak);
        }
        printf(" %10.2fx |", p->t[ATT].med / p->tw[ATT].med);
        for (int k = ATT; k < NPARTS; ++k)
            printf("%s%.1f", k > ATT ? " / " : " ", p->wsw[k] / 1048576.0);
        printf("\n");
    }
}

void print_crossover_window(const result *r) {
    printf("Crossover with the window (W = %lld): theory ", (long long)r->cfg.window);
    if (isnan(r->theory_w))
        printf("none (W <= 2d + F = %lld)", (long long)(2 * r->cfg.d + r->cfg.ff));
    else
        printf("%s = %.0f", theory_name_window(&r->cfg), r->theory_w);
    printf("; measured ");
    if (isnan(r->xw.n))
        printf("none in the range swept\n");
    else if (!strcmp(r->xw.kind, "below-range"))
        printf("below the first n (attention already slower at n = %.0f)\n", r->xw.n);
    else
        printf("%.0f (%s)\n", r->xw.n, r->xw.kind);
    printf("  %s.\n", r->why_w);
}

/* One CSV row per (configuration, n); the columns are documented in docs/benchmarks.md.
   window: the window's columns follow, at the end of each row. */
void write_csv_header(FILE *f, bool window) {
    fprintf(f, "d,heads,d_head,ff,batch,dtype,causal,algo,threads,n,reps,warmup");
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_macs", part_key[k]);
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_flops", part_key[k]);
    fprintf(f, ",attn_share");
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_ms_median,%s_ms_min,%s_ms_max", part_key[k], part_key[k], part_key[k]);
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_gflops", part_key[k]);
    fprintf(f, ",gemm_gflops");
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_frac_gemm", part_key[k]);
    for (int k = 0; k < NPARTS; ++k)
        fprintf(f, ",%s_ws_bytes", part_key[k]);
    fprintf(f, ",theory_crossover,measured_crossover,crossover_kind");
    fprintf(f,
            ",gemm_gflops_start,gemm_gflops_end,gemm_spread,tuned_env,attn_version,blas_config,"
            "blas_corename,blas_threading,blas_threads,omp_threads,cpu,env,date");
    if (window) {
        fprintf(f, ",window");
        for (int k = ATT; k < NPARTS; ++k)
            fprintf(f, ",%s_macs", win_key[k]);
        for (int k = ATT; k < NPARTS; ++k)
            fprintf(f, ",%s_flops", win_key[k]);
        fprintf(f, ",win_attn_share");
        for (int k = ATT; k < NPARTS; ++k)
            fprintf(f, ",%s_ms_median,%s_ms_min,%s_ms_max", win_key[k], win_key[k], win_key[k]);
        for (int k = ATT; k < NPARTS; ++k)
            fprintf(f, ",%s_gflops", win_key[k]);
        for (int k = ATT; k < NPARTS; ++k)
            fprintf(f, ",%s_frac_gemm", win_key[k]);
        for (int k = ATT; k < NPARTS; ++k)
            fprintf(f, ",%s_ws_bytes", win_key[k]);
        fprintf(f, ",win_theory_crossover,win_measured_crossover,win_crossover_kind");
    }
    fputc('\n', f);
}

void write_csv_rows(FILE *f, const result *r, const options *o, const reference *ref,
                    const bench_env *env) {
    double peak = ref->best;
    const config *c = &r->cfg;
    for (int i = 0; i < r->np; ++i) {
        const point *p = &r->pt[i];
        int64_t macs[NPARTS];
        for (int k = 0; k < NPARTS; ++k)
            macs[k] = part_macs(c, p->n, k);
        fprintf(f, "%lld,%lld,%lld,%lld,%lld,%s,%d,%s,%d,%lld,%d,%d", (long long)c->d,
                (long long)c->heads, (long long)(c->d / c->heads), (long long)c->ff,
                (long long)c->batch, dtype_name(c->dt), c->causal, algo_name(o->algo),
                o->threads, (long long)p->n, o->reps, o->warmup);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%lld", (long long)macs[k]);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%lld", (long long)(2 * macs[k]));
        fprintf(f, ",%.6f", (double)macs[ATT] / (double)macs[BLK]);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%.4f,%.4f,%.4f", 1e3 * p->t[k].med, 1e3 * p->t[k].min,
                    1e3 * p->t[k].max);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%.3f", gflops(macs[k], p->t[k].med));
        fprintf(f, ",%.3f", peak);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%.4f", gflops(macs[k], p->t[k].med) / peak);
        for (int k = 0; k < NPARTS; ++k)
            fprintf(f, ",%zu", p->ws[k]);
        fprintf(f, ",%.0f,", r->theory);
        if (!isnan(r->x.n))
            fprintf(f, "%.1f", r->x.n);
        fprintf(f, ",%s", r->x.kind);
        fprintf(f, ",%.3f,%.3f,%.4f,%d,%s,%s,%s,%s,%d,%d,%s,%s,%s", ref->start, ref->end,
                ref->spread, o->tuned_env, env->attn, env->blas_config, env->blas_core,
                env->blas_threading, env->blas_threads, env->omp_threads, env->cpu, env->vars,
                env->date);
        if (c->window > 0) { /* the same columns for the window's parts, then its crossover */
            int64_t wm[NPARTS];
            for (int k = ATT; k < NPARTS; ++k)
                wm[k] = win_part_macs(c, p->n, k);
            fprintf(f, ",%lld", (long long)c->window);
            for (int k = ATT; k < NPARTS; ++k)
                fprintf(f, ",%lld", (long long)wm[k]);
            for (int k = ATT; k < NPARTS; ++k)
                fprintf(f, ",%lld", (long long)(2 * wm[k]));
            fprintf(f, ",%.6f", (double)wm[ATT] / (double)wm[BLK]);
            for (int k = ATT; k < NPARTS; ++k)
                fprintf(f, ",%.4f,%.4f,%.4f", 1e3 * p->tw[k].med, 1e3 * p->tw[k].min,
                        1e3 * p->tw[k].max);
            for (int k = ATT; k < NPARTS; ++k)
                fprintf(f, ",%.3f", gflops(wm[k], p->tw[k].med));
            for (int k = ATT; k < NPARTS; ++k)
                fprintf(f, ",%.4f", gflops(wm[k], p->tw[k].med) / peak);
            for (int k = ATT; k < NPARTS; ++k)
                fprintf(f, ",%zu", p->wsw[k]);
            fputc(',', f);
            if (!isnan(r->theory_w))
                fprintf(f, "%.1f", r->theory_w);
            fputc(',', f);
            if (!isnan(r->xw.n))
                fprintf(f, "%.1f", r->xw.n);
            fprintf(f, ",%s", r->xw.kind);
        }
        fputc('\n', f);
    }
    fflush(f);
}

/* JSON strings here are our own ASCII text: only quotes and backslashes to escape. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void write_json(const char *path, const result *res, int nres, const options *o,
                const reference *const *refs, const bench_env *env) {
    FILE *f = fopen(path, "w");
    if (!f)
        die(1, "cannot write %s: %s", path, strerror(errno));
    fprintf(f, "{\n  \"program\": \"attn-bench\",\n  \"attn_version\": \"%s\",\n",
            ATTN_VERSION_STRING);
    fprintf(f, "  \"environment\": {");
    bench_env_json(f, env);
    fprintf(f, ", \"tuned_env\": %s},\n", o->tuned_env ? "true" : "false");
    fprintf(f, "  \"threads\": %d,\n  \"algo\": \"%s\",\n  \"reps\": %d,\n  \"warmup\": %d,\n",
            o->threads, algo_name(o->algo), o->reps, o->warmup);
    fprintf(f, "  \"gemm_reference\": \"%d^3\",\n  \"runs\": [\n", GEMM_REF);
    for (int r = 0; r < nres; ++r) {
        const result *R = &res[r];
        const config *c = &R->cfg;
        fprintf(f,
                "    {\"d\": %lld, \"heads\": %lld, \"d_head\": %lld, \"ff\": %lld, "
                "\"batch\": %lld, \"dtype\": \"%s\", \"causal\": %s,\n",
                (long long)c->d, (long long)c->heads, (long long)(c->d / c->heads),
                (long long)c->ff, (long long)c->batch, dtype_name(c->dt),
                c->causal ? "true" : "false");
        fprintf(f,
                "     \"gemm_gflops\": %.3f, \"gemm_gflops_start\": %.3f, "
                "\"gemm_gflops_end\": %.3f, \"gemm_spread\": %.4f,\n"
                "     \"theory_crossover\": %.0f, \"theory_name\": \"%s\", ",
                refs[r]->best, refs[r]->start, refs[r]->end, refs[r]->spread, R->theory,
                theory_name(c));
        if (isnan(R->x.n))
            fprintf(f, "\"measured_crossover\": null, ");
        else
            fprintf(f, "\"measured_crossover\": %.1f, ", R->x.n);
        fprintf(f, "\"crossover_kind\": \"%s\",\n     \"explanation\": ", R->x.kind);
        json_string(f, R->why);
        if (c->window > 0) { /* the window's crossover, as the one above */
            fprintf(f, ",\n     \"window\": %lld, \"win_theory_name\": \"%s\", ",
                    (long long)c->window, theory_name_window(c));
            if (isnan(R->theory_w))
                fprintf(f, "\"win_theory_crossover\": null, ");
            else
                fprintf(f, "\"win_theory_crossover\": %.1f, ", R->theory_w);
            if (isnan(R->xw.n))
                fprintf(f, "\"win_measured_crossover\": null, ");
            else
                fprintf(f, "\"win_measured_crossover\": %.1f, ", R->xw.n);
            fprintf(f,
                    "\"win_crossover_kind\": \"%s\",\n     \"win_explanation\": ", R->xw.kind);
            json_string(f, R->why_w);
        }
        fprintf(f, ",\n     \"points\": [\n");
        for (int i = 0; i < R->np; ++i) {
            const point *p = &R->pt[i];
            fprintf(f, "       {\"n\": %lld", (long long)p->n);
            for (int k = 0; k < NPARTS; ++k)
                fprintf(f,
                        ", \"%s\": {\"macs\": %lld, \"ms_median\": %.4f, \"ms_min\": %.4f, "
                        "\"ms_max\": %.4f, \"gflops\": %.3f, \"workspace_bytes\": %zu}",
                        part_key[k], (long long)part_macs(c, p->n, k), 1e3 * p->t[k].med,
                        1e3 * p->t[k].min, 1e3 * p->t[k].max,
                        gflops(part_macs(c, p->n, k), p->t[k].med), p->ws[k]);
            for (int k = ATT; k < NPARTS && c->window > 0; ++k)
                fprintf(f,
                        ", \"%s\": {\"macs\": %lld, \"ms_median\": %.4f, \"ms_min\": %.4f, "
                        "\"ms_max\": %.4f, \"gflops\": %.3f, \"workspace_bytes\": %zu}",
                        win_key[k], (long long)win_part_macs(c, p->n, k), 1e3 * p->tw[k].med,
                        1e3 * p->tw[k].min, 1e3 * p->tw[k].max,
                        gflops(win_part_macs(c, p->n, k), p->tw[k].med), p->wsw[k]);
            fprintf(f, "}%s\n", i + 1 < R->np ? "," : "");
        }
        fprintf(f, "     ]}%s\n", r + 1 < nres ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0)
        die(1, "cannot write %s", path);
}

bool have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

/* Time against n, log-log, one panel per configuration, through gnuplot. */
/* A measured crossover as a vertical line labelled along it: "<below> n = N" when attention
   was slower over the whole range, else "<measured> N", "(extrapolated)" unless interpolated. */
static void plot_crossover(FILE *g, const crossover *x, const char *below, const char *measured,
                           const char *dash, double at, const char *offset, const char *color) {
    char what[64];
    if (!strcmp(x->kind, "below-range"))
        snprintf(what, sizeof what, "%s n = %.0f", below, x->n);
    else
        snprintf(what, sizeof what, "%s %.0f%s", measured, x->n,
                 strcmp(x->kind, "interpolated") ? " (extrapolated)" : "");
    fprintf(g, "set arrow from %g, graph 0 to %g, graph 1 nohead lw 1.5 %slc rgb '%s'\n", x->n,
            x->n, dash, color);
    fprintf(g, "set label '%s' at %g, graph %g rotate by 90 left offset %s tc rgb '%s'\n", what,
            x->n, at, offset, color);
}

void write_plot(const char *path, const result *res, int nres, int threads) {
    char data[] = "/tmp/attn-bench-XXXXXX";
    int fd = mkstemp(data);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f)
        die(1, "cannot create a temporary file for the plot data");
    for (int r = 0; r < nres; ++r) {
        for (int i = 0; i < res[r].np;
             ++i) /* n, linear, attention, block, window's attention */
            fprintf(f, "%lld %.6g %.6g %.6g %.6g\n", (long long)res[r].pt[i].n,
                    1e3 * res[r].pt[i].t[LIN].med, 1e3 * res[r].pt[i].t[ATT].med,
                    1e3 * res[r].pt[i].t[BLK].med, 1e3 * res[r].pt[i].tw[ATT].med);
        fprintf(f, "\n\n");
    }
    fclose(f);
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        remove(data);
        die(1, "cannot run gnuplot");
    }
    int cols = nres > 1 ? 2 : 1, rows = (nres + cols - 1) / cols;
    if (ends_with(path, ".svg"))
        fprintf(g, "set terminal svg size %d,%d dynamic font 'sans,11'\n", 640 * cols,
                460 * rows);
    else
        fprintf(g, "set terminal pngcairo size %d,%d font 'sans,10'\n", 640 * cols, 460 * rows);
    fprintf(g, "set output '%s'\n", path);
    fprintf(g,
            "set multiplot layout %d,%d title 'attn-bench: one encoder layer, time per "
            "forward pass against sequence length n (%d threads)'\n",
            rows, cols, threads);
    fprintf(
        g, "set logscale x 2\nset logscale y 10\nset format y '%%g'\n"
           "set grid xtics ytics\nset key top left opaque box\nset xlabel 'sequence length n'\n"
           "set ylabel 'time per forward pass (ms)'\n"
           "set style line 1 lc rgb '#1f77b4' lw 2 pt 7\n"
           "set style line 2 lc rgb '#d62728' lw 2 pt 5\n"
           "set style line 3 lc rgb '#555555' lw 1.5 pt 9 dt 3\n"
           "set style line 4 lc rgb '#ff7f0e' lw 2 pt 13 dt 4\n");
    for (int r = 0; r < nres; ++r) {
        const result *R = &res[r];
        const config *c = &R->cfg;
        bool have_x = !isnan(R->x.n);
        double lo = fmin((double)R->pt[0].n, R->theory),
               hi = fmax((double)R->pt[R->np - 1].n, R->theory);
        bool win = c->window > 0, have_xw = win && !isnan(R->xw.n);
        if (have_x)
            lo = fmin(lo, R->x.n), hi = fmax(hi, R->x.n);
        if (have_xw)
            lo = fmin(lo, R->xw.n), hi = fmax(hi, R->xw.n);
        fprintf(g, "unset arrow\nunset label\nset xrange [%g:%g]\n", lo / 1.4, hi * 1.4);
        char wtitle[96] = "";
        if (win)
            snprintf(wtitle, sizeof wtitle, ", window %lld%s", (long long)c->window,
                     have_xw ? "" : " (no crossover with the window)");
        fprintf(g, "set title 'd %lld, %lld heads, F %lld, batch %lld, %s, %s%s'\n",
                (long long)c->d, (long long)c->heads, (long long)c->ff, (long long)c->batch,
                dtype_name(c->dt), c->causal ? "causal" : "non-causal", wtitle);
        /* vertical lines, their labels written along them on opposite sides */
        bool x_left = have_x && R->x.n <= R->theory;
        fprintf(g,
                "set arrow from %g, graph 0 to %g, graph 1 nohead dt 2 lw 1.5 lc rgb "
                "'#2ca02c'\n",
                R->theory, R->theory);
        fprintf(g,
                "set label 'theory %s = %.0f' at %g, graph 0.03 rotate by 90 left "
                "offset %s tc rgb '#2ca02c'\n",
                theory_name(c), R->theory, R->theory, x_left ? "1.2,0" : "-1.9,0");
        if (have_x)
            plot_crossover(g, &R->x, "attention slower from", "measured", "", 0.03,
                           x_left ? "-1.9,0" : "1.2,0", "#9467bd");
        if (have_xw) /* the window's crossover, labelled halfway up */
            plot_crossover(g, &R->xw, "window: slower from", "window: measured", "dt 4 ", 0.5,
                           "1.2,0", "#ff7f0e");
        fprintf(g,
                "plot '%s' index %d using 1:2 with linespoints ls 1 title 'linear part "
                "(QKVO + FFN)', '' index %d using 1:3 with linespoints ls 2 title "
                "'attention core (sdpa%s)', '' index %d using 1:4 with linespoints ls 3 "
                "title 'encoder block'",
                data, r, r, win ? ", full causal" : "", r);
        if (win)
            fprintf(g,
                    ", '' index %d using 1:5 with linespoints ls 4 title 'attention core, "
                    "window of %lld keys'",
                    r, (long long)c->window);
        fputc('\n', g);
    }
    fprintf(g, "unset multiplot\n");
    int rc = pclose(g);
    remove(data);
    if (rc != 0)
        die(1, "gnuplot failed to draw %s", path);
}

/* ---- command line --------------------------------------------------------- */
