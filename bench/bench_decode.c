/* SPDX-License-Identifier: MIT */
/* attn-bench-decode: one new token against Tk cached keys, K/V bytes per second as a share of
 * the machine's read bandwidth and beside a streaming read. */
#define _POSIX_C_SOURCE 200809L
#include <attn/attn.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_util.h"
#include "read_bandwidth.h"

/*
 * Decode (Tq = 1) is a memory-bound pass over K and V: 2 B H Tk D elements
 * read, 4 B H Tk D flops. For each B and Tk this reports attn_sdpa_decode's
 * effective bandwidth (K and V bytes / median time) as a share of the
 * machine's read bandwidth (read_bandwidth.h: two threads, one load per cache
 * line over 512 MiB), and beside a plain streaming read of the very same
 * buffers (a vectorized sum over them, on the same number of threads, an
 * OpenMP loop). Each row times its decode reps back to back, then the stream's,
 * then the read bandwidth's passes (a 512 MiB pass between them would evict
 * the buffers the two read). The blocks are not interleaved rep by rep: with
 * the pthread OpenBLAS, decode runs on the BLAS's threads and the stream on
 * OpenMP's, and each set keeps polling for a while after its work, so
 * alternating them would time each against the other's polling threads.
 * Medians; the load average is printed.
 *
 * A second table times a generation step's one-row products (attn_gemm with
 * one row, which goes to the BLAS's GEMV) on weights that come from memory,
 * the other part of a step's floor.
 *
 * --ragged gives the B sequences different lengths, Tk for the first down to
 * about Tk/2 for the last (len[b] = Tk - b Tk / 2B): the bytes are those of
 * the valid rows, and the row is labelled by its longest.
 *
 * Usage: attn-bench-decode [--reps N=15] [--tkmax N=32768] [--b LIST=1,8]
 *                          [--h 12] [--d 64] [--hkv H] [--ragged] [--csv FILE]
 */

static double now(void) { return bench_now(); }
static double median(double *t, int n) { return bench_median(t, n); }

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define CLONES
#endif

/* Sum of n floats with 16 partial sums: the compiler vectorizes it, the loads dominate. */
CLONES static float sum_f32(const float *x, size_t n) {
    float a[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; ++l)
            a[l] += x[i + l];
    float s = 0;
    for (; i < n; ++i)
        s += x[i];
    for (int l = 0; l < 16; ++l)
        s += a[l];
    return s;
}

/*
 * Read the valid rows of k and v once, split over nt threads: a plain streaming read. The
 * cache is (B, Hkv, Tk, D) with len[b] valid rows per (b, head); when every length is Tk the
 * two buffers are read as one contiguous run each, split evenly.
 */
static float stream_read(const float *k, const float *v, const int64_t *len, int64_t B,
                         int64_t Hkv, int64_t Tk, int64_t D, int nt) {
    size_t n = (size_t)(B * Hkv * Tk * D), run = (size_t)(Tk * D), have = 0;
    for (int64_t b = 0; b < B; ++b)
        have += (size_t)(len[b] * Hkv * D);
    float total = 0;
    if (have == n) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) reduction(+ : total) schedule(static)
#endif
        for (int t = 0; t < nt; ++t) {
            size_t lo = n * (size_t)t / (size_t)nt, hi = n * (size_t)(t + 1) / (size_t)nt;
            total += sum_f32(k + lo, hi - lo) + sum_f32(v + lo, hi - lo);
        }
    } else {
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) reduction(+ : total) schedule(static)
#endif
        for (int64_t bh = 0; bh < B * Hkv; ++bh) {
            size_t at = (size_t)bh * run, m = (size_t)(len[bh / Hkv] * D);
            total += sum_f32(k + at, m) + sum_f32(v + at, m);
        }
    }
    (void)nt;
    return total;
}

static void fill(float *x, size_t n, unsigned s) {
    for (size_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

static void die(const char *what, attn_status st) {
    fprintf(stderr, "attn-bench-decode: %s: %s\n", what, attn_strerror(st));
    exit(1);
}

static const char *blas_core(void) {
    char *(*f)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    return f ? f() : "unknown";
}

/*
 * The one-row products of a generation step (the generate example's model: d 768, F 3072,
 * f32) through attn_gemm, as a step makes them, in attn's (in, out) layout and as the
 * transposed view of PyTorch's (out, in). Each weight is used in enough copies (512 MiB or
 * more, in turn) that it comes from memory, not the caches; GB/s is weight bytes over the
 * median time of one product, beside the read bandwidth measured right after.
 */
static void gemv_rows(int reps, const char *rbuf) {
    static const struct {
        const char *name;
        int64_t in, out;
    } w[] = {{"q, k, v", 768, 2304}, {"out", 768, 768}, {"ffn 1", 768, 3072}, {"ffn 2", 3072, 768}};
    printf("\n# one-row products x (1, in) W through attn_gemm, f32, each W in copies of 512 MiB or "
           "more used in turn (from memory)\n%-8s %5s %5s %-10s %9s %9s %9s %8s\n",
           "product", "in", "out", "W layout", "us", "GB/s", "read GB/s", "of read");
    for (size_t i = 0; i < sizeof w / sizeof w[0]; ++i) {
        size_t per = (size_t)(w[i].in * w[i].out), bytes = per * 4;
        size_t nc = (RBW_BYTES + bytes - 1) / bytes;
        float *wb = bench_alloc64(nc * bytes), *x = bench_alloc64((size_t)w[i].in * 4),
              *y = bench_alloc64((size_t)w[i].out * 4);
        if (!wb || !x || !y) {
            fprintf(stderr, "attn-bench-decode: out of memory for the one-row products\n");
            exit(1);
        }
        fill(wb, nc * per, 5);
        fill(x, (size_t)w[i].in, 6);
        attn_view xv, yv;
        attn_view_init(&xv, ATTN_F32, x, 2, (int64_t[]){1, w[i].in});
        attn_view_init(&yv, ATTN_F32, y, 2, (int64_t[]){1, w[i].out});
        for (int torch = 0; torch < 2; ++torch) {
            double t[101], tr[101];
            for (int r = 0; r < reps; ++r) {
                double t0 = now();
                for (size_t c = 0; c < nc; ++c) {
                    attn_view wv, ot;
                    if (torch) { /* (out, in) seen as (in, out) */
                        attn_view_init(&ot, ATTN_F32, wb + c * per, 2,
                                       (int64_t[]){w[i].out, w[i].in});
                        attn_view_transpose(&ot, 0, 1, &wv);
                    } else
                        attn_view_init(&wv, ATTN_F32, wb + c * per, 2,
                                       (int64_t[]){w[i].in, w[i].out});
                    attn_status st = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &xv, &wv, 0.0,
                                               &yv, NULL, 0);
                    if (st)
                        die("attn_gemm", st);
                }
                t[r] = (now() - t0) / (double)nc;
            }
            for (int r = 0; r < reps; ++r)
                tr[r] = rbw_pass(rbuf);
            double d = median(t, reps), bw = median(tr, reps);
            printf("%-8s %5lld %5lld %-10s %9.1f %9.2f %9.2f %7.0f%%\n", w[i].name,
                   (long long)w[i].in, (long long)w[i].out, torch ? "(out, in)" : "(in, out)",
                   1e6 * d, (double)bytes / d / 1e9, bw, 100 * (double)bytes / d / 1e9 / bw);
            fflush(stdout);
        }
        free(wb), free(x), free(y);
    }
}

int main(int argc, char **argv) {
    int reps = 15;
    int64_t tkmax = 32768, H = 12, D = 64, Hkv = 0;
    int64_t bs[8] = {1, 8};
    int nb = 2;
    const char *csv = NULL;
    bool ragged = false;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tkmax") && i + 1 < argc)
            tkmax = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--h") && i + 1 < argc)
            H = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--hkv") && i + 1 < argc)
            Hkv = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--d") && i + 1 < argc)
            D = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--ragged"))
            ragged = true;
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[++i];
        else if (!strcmp(argv[i], "--b") && i + 1 < argc) {
            nb = 0;
            for (char *t = strtok(argv[++i], ","); t && nb < 8; t = strtok(NULL, ","))
                bs[nb++] = atoll(t);
        } else {
            fprintf(stderr, "usage: attn-bench-decode [--reps N] [--tkmax N] [--b 1,8] [--h H] "
                            "[--hkv H] [--d D] [--ragged] [--csv FILE]\n");
            return 2;
        }
    }
    if (Hkv == 0)
        Hkv = H;
    if (reps < 1 || reps > 101 || tkmax < 512 || H < 1 || D < 1 || Hkv < 1 || H % Hkv) {
        fprintf(stderr, "attn-bench-decode: bad arguments\n");
        return 2;
    }
    int nt = 1;
#ifdef _OPENMP
    nt = omp_get_max_threads();
#endif
    char load[64] = "?";
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fgets(load, sizeof load, la))
            load[strcspn(load, "\n")] = '\0';
        fclose(la);
    }
    char *rbuf = rbw_buffer();
    if (!rbuf) {
        fprintf(stderr, "attn-bench-decode: cannot measure the read bandwidth\n");
        return 1;
    }
    printf("# attn-bench-decode: attn %s, f32, H %lld, Hkv %lld, D %lld, Tq 1, %d threads, "
           "OpenBLAS core %s\n# load average at start: %s; medians of %d reps\n"
           "# read: the read bandwidth (%d threads, one load per %d-byte line over 512 MiB), "
           "as many passes as reps after each row\n",
           attn_version_string(), (long long)H, (long long)Hkv, (long long)D, nt, blas_core(),
           load, reps, RBW_THREADS, RBW_LINE);
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (out)
        fprintf(out, "B,Tk,bytes,decode_us,decode_GBs,stream_us,stream_GBs,ratio,read_GBs,"
                     "decode_share\n");
    printf("%3s %7s %10s %11s %11s %9s %8s %11s %11s %7s\n", "B", "Tk", "K+V MB", "decode us",
           "decode GB/s", "read GB/s", "of read", "stream us", "stream GB/s", "ratio");
    for (int bi = 0; bi < nb; ++bi) {
        int64_t B = bs[bi];
        for (int64_t Tk = 512; Tk <= tkmax; Tk *= 2) {
            size_t n = (size_t)(B * Hkv * Tk * D), nq = (size_t)(B * H * D);
            float *k = bench_alloc64(n * 4), *v = bench_alloc64(n * 4);
            float *q = bench_alloc64(nq * 4), *o = bench_alloc64(nq * 4);
            if (!k || !v || !q || !o) {
                fprintf(stderr, "attn-bench-decode: out of memory at B %lld Tk %lld\n",
                        (long long)B, (long long)Tk);
                return 1;
            }
            fill(k, n, 1);
            fill(v, n, 2);
            fill(q, nq, 3);
            attn_view qv, kv, vv, ov;
            attn_view_init(&qv, ATTN_F32, q, 4, (int64_t[]){B, H, 1, D});
            attn_view_init(&ov, ATTN_F32, o, 4, (int64_t[]){B, H, 1, D});
            attn_view_init(&kv, ATTN_F32, k, 4, (int64_t[]){B, Hkv, Tk, D});
            attn_view_init(&vv, ATTN_F32, v, 4, (int64_t[]){B, Hkv, Tk, D});
            int64_t *len = malloc(sizeof(int64_t) * (size_t)B);
            double rows = 0; /* valid rows of one head, all batches */
            for (int64_t b = 0; b < B; ++b) {
                len[b] = ragged ? Tk - b * Tk / (2 * B) : Tk;
                rows += (double)len[b];
            }
            size_t ws = attn_sdpa_decode_workspace_size(&qv, &kv, &vv, NULL);
            void *work = bench_alloc64(ws);
            attn_status st =
                attn_sdpa_decode(&qv, &kv, &vv, len, true, NULL, &ov, NULL, work, ws);
            if (st)
                die("attn_sdpa_decode", st);
            volatile float sink = stream_read(k, v, len, B, Hkv, Tk, D, nt); /* warm both */
            double td[101], ts[101], tr[101];
            for (int r = 0; r < reps; ++r) {
                double t0 = now();
                attn_sdpa_decode(&qv, &kv, &vv, len, true, NULL, &ov, NULL, work, ws);
                td[r] = now() - t0;
            }
            for (int r = 0; r < reps; ++r) {
                double t0 = now();
                sink += stream_read(k, v, len, B, Hkv, Tk, D, nt);
                ts[r] = now() - t0;
            }
            for (int r = 0; r < reps; ++r)
                tr[r] = rbw_pass(rbuf);
            (void)sink;
            double d = median(td, reps), s = median(ts, reps), bw = median(tr, reps);
            double bytes = 2.0 * rows * (double)(Hkv * D) * 4;
            printf("%3lld %7lld %10.1f %11.1f %11.2f %9.2f %7.0f%% %11.1f %11.2f %6.0f%%\n",
                   (long long)B, (long long)Tk, bytes / 1e6, 1e6 * d, bytes / d / 1e9, bw,
                   100 * bytes / d / 1e9 / bw, 1e6 * s, bytes / s / 1e9, 100 * s / d);
            if (out)
                fprintf(out, "%lld,%lld,%.0f,%.2f,%.3f,%.2f,%.3f,%.3f,%.3f,%.3f\n",
                        (long long)B, (long long)Tk, bytes, 1e6 * d, bytes / d / 1e9, 1e6 * s,
                        bytes / s / 1e9, s / d, bw, bytes / d / 1e9 / bw);
            fflush(stdout);
            free(k);
            free(v);
            free(q);
            free(o);
            free(len);
            free(work);
        }
    }
    if (out)
        fclose(out);
    gemv_rows(reps, rbuf);
    free(rbuf);
    return 0;
}
