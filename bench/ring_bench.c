/* SPDX-License-Identifier: MIT */
/* attn-ring-bench: attn_ring_sdpa on the ranks it is started with (mpirun -np P): time per
 * call, bytes sent per rank, and how much of the K/V exchange the computation hid. */
#define _POSIX_C_SOURCE 200809L
#include <attn/attn.h>
#include <attn/ring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static int rank, P;

static void usage(void) {
    if (rank == 0)
        fprintf(stderr,
                "usage: mpirun -np P attn-ring-bench [--n N] [--batch B] [--heads H]\n"
                "       [--kv-heads Hkv] [--d D] [--reps R] [--f64] [--backward] [--csv]\n"
                "N: global sequence length (default 4096), split evenly over the P ranks.\n"
                "Runs non-causal, causal contiguous and causal zigzag; prints one line each.\n"
                "--backward times attn_ring_sdpa_backward (after one forward) instead.\n");
    MPI_Finalize();
    exit(2);
}

static void die(const char *what, attn_status st) {
    fprintf(stderr, "attn-ring-bench (rank %d): %s: %s\n", rank, what, attn_strerror(st));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void fill(attn_view *v, unsigned s) {
    bench_fill(v->data, (size_t)attn_view_numel(v), v->dtype, 1.0, s);
}

/*
 * The ring's exchange alone: `steps` MPI_Sendrecv of one block, no compute (the
 * forward: P - 1 K/V blocks; the backward: also P gradient blocks). What the
 * overlapped call would cost in communication if nothing hid it.
 */
static double exchange_seconds(size_t bytes, int steps, int reps) {
    if (P == 1)
        return 0;
    char *a = malloc(bytes ? bytes : 1), *b = malloc(bytes ? bytes : 1);
    memset(a, 1, bytes);
    double best = 1e300;
    for (int r = 0; r < reps; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int s = 0; s < steps; ++s)
            MPI_Sendrecv(a, (int)bytes, MPI_BYTE, (rank + 1) % P, 0, b, (int)bytes, MPI_BYTE,
                         (rank + P - 1) % P, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double t = MPI_Wtime() - t0, tmax;
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (tmax < best)
            best = tmax;
    }
    free(a);
    free(b);
    return best;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int64_t n = 4096, B = 1, H = 8, Hkv = 0, D = 64;
    int reps = 5, csv = 0, bwd = 0;
    attn_dtype dt = ATTN_F32;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--n") && more)
            n = atoll(argv[++i]);
        else if (!strcmp(a, "--batch") && more)
            B = atoll(argv[++i]);
        else if (!strcmp(a, "--heads") && more)
            H = atoll(argv[++i]);
        else if (!strcmp(a, "--kv-heads") && more)
            Hkv = atoll(argv[++i]);
        else if (!strcmp(a, "--d") && more)
            D = atoll(argv[++i]);
        else if (!strcmp(a, "--reps") && more)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--f64"))
            dt = ATTN_F64;
        else if (!strcmp(a, "--csv"))
            csv = 1;
        else if (!strcmp(a, "--backward"))
            bwd = 1;
        else
            usage();
    }
    if (Hkv == 0)
        Hkv = H;
    if (n < P || n % P || B < 1 || H < 1 || Hkv < 1 || H % Hkv || D < 1 || reps < 1 ||
        reps > 100)
        usage();
    int64_t T = n / P;
    size_t es = attn_dtype_size(dt);
    int64_t qs[4] = {B, H, T, D}, ks[4] = {B, Hkv, T, D};
    void *qm = malloc((size_t)(B * H * T * D) * es),
         *km = malloc((size_t)(B * Hkv * T * D) * es);
    void *vm = malloc((size_t)(B * Hkv * T * D) * es),
         *om = malloc((size_t)(B * H * T * D) * es);
    attn_view q, k, v, o;
    attn_view_init(&q, dt, qm, 4, qs);
    attn_view_init(&k, dt, km, 4, ks);
    attn_view_init(&v, dt, vm, 4, ks);
    attn_view_init(&o, dt, om, 4, qs);
    fill(&q, 11u + (unsigned)rank);
    fill(&k, 23u + (unsigned)rank);
    fill(&v, 37u + (unsigned)rank);
    size_t block = (size_t)(B * Hkv * T * 2 * D) * es;
    double t_xchg = exchange_seconds(block, bwd ? 2 * P - 1 : P - 1, reps);
    void *lm = malloc((size_t)(B * H * T) * es), *dom = malloc((size_t)(B * H * T * D) * es);
    void *gm[3] = {malloc((size_t)(B * H * T * D) * es), malloc((size_t)(B * Hkv * T * D) * es),
                   malloc((size_t)(B * Hkv * T * D) * es)};
    attn_view lse, dout, dq, dk, dv;
    attn_view_init(&lse, dt, lm, 3, qs);
    attn_view_init(&dout, dt, dom, 4, qs);
    attn_view_init(&dq, dt, gm[0], 4, qs);
    attn_view_init(&dk, dt, gm[1], 4, ks);
    attn_view_init(&dv, dt, gm[2], 4, ks);
    fill(&dout, 51u + (unsigned)rank);
    const char *env = getenv("OMP_NUM_THREADS");
    if (rank == 0) {
        if (csv)
            printf(
                "P,mode,n,B,H,Hkv,D,dtype,threads,ms_per_call,bytes_sent_per_rank,"
                "exchange_ms,wait_ms,hidden_pct,compute_max_ms,compute_min_ms,gflops_total\n");
        else
            printf("attn-ring-bench%s: P=%d n=%lld B=%lld H=%lld Hkv=%lld D=%lld %s, "
                   "OMP_NUM_THREADS=%s, median of %d calls (slowest rank)\n"
                   "%-14s %9s %11s %9s %9s %7s %17s %8s\n",
                   bwd ? " --backward" : "", P, (long long)n, (long long)B, (long long)H,
                   (long long)Hkv, (long long)D, dt == ATTN_F32 ? "f32" : "f64",
                   env ? env : "unset", reps, "mode", "ms/call", "bytes sent", "xchg ms",
                   "wait ms", "hidden", "compute ms max/min", "GFLOP/s");
    }
    static const struct {
        const char *name;
        attn_causal causal;
        attn_ring_layout layout;
    } modes[3] = {{"noncausal", ATTN_CAUSAL_NONE, ATTN_RING_CONTIGUOUS},
                  {"causal", ATTN_CAUSAL_TOP_LEFT, ATTN_RING_CONTIGUOUS},
                  {"causal-zigzag", ATTN_CAUSAL_TOP_LEFT, ATTN_RING_ZIGZAG}};
    for (int m = 0; m < 3; ++m) {
        attn_ring_stats st;
        attn_ring_opts ro = {
            .causal = modes[m].causal, .layout = modes[m].layout, .stats = &st, .lse = &lse};
        size_t need =
            bwd ? attn_ring_sdpa_backward_workspace_size(MPI_COMM_WORLD, &q, &k, &v, &ro)
                : attn_ring_sdpa_workspace_size(MPI_COMM_WORLD, &q, &k, &v, &ro);
        void *work = malloc(need);
        attn_status s = attn_ring_sdpa(MPI_COMM_WORLD, &q, &k, &v, &ro, &o, NULL, 0); /* warm */
        if (s)
            die("attn_ring_sdpa", s);
        double t[100], wait = 0, cmax = 0, cmin = 0;
        int64_t sent = 0;
        for (int r = 0; r < reps; ++r) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            s = bwd ? attn_ring_sdpa_backward(MPI_COMM_WORLD, &q, &k, &v, &ro, &o, &lse, &dout,
                                              &dq, &dk, &dv, work, need)
                    : attn_ring_sdpa(MPI_COMM_WORLD, &q, &k, &v, &ro, &o, work, need);
            double dtm = MPI_Wtime() - t0, w = st.wait_seconds, tmax, wmax;
            if (s)
                die("attn_ring_sdpa", s);
            /* this rank's attention work (attn_sdpa and merges): the load balance */
            double c[2] = {st.compute_seconds, -st.compute_seconds}, cr[2];
            MPI_Allreduce(&dtm, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(&w, &wmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(c, cr, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            t[r] = tmax;
            wait += wmax / reps;
            cmax += cr[0] / reps;
            cmin += -cr[1] / reps;
            sent = st.bytes_sent;
        }
        free(work);
        double med = bench_median(t, reps);
        /* 4 B H n^2 D flops (QK^T and PV) over the whole sequence, half under a causal mask;
           the backward: 10 B H n^2 D (QK^T and dO V^T again, dV, dQ, dK) */
        double flops =
            (bwd ? 10.0 : 4.0) * (double)B * (double)H * (double)n * (double)n * (double)D;
        if (modes[m].causal)
            flops *= 0.5;
        double hidden =
            t_xchg > 0 ? 100.0 * (1.0 - (wait < t_xchg ? wait : t_xchg) / t_xchg) : 0;
        if (rank == 0) {
            if (csv)
                printf(
                    "%d,%s,%lld,%lld,%lld,%lld,%lld,%s,%s,%.3f,%lld,%.3f,%.3f,%.1f,%.3f,%.3f,"
                    "%.2f\n",
                    P, modes[m].name, (long long)n, (long long)B, (long long)H, (long long)Hkv,
                    (long long)D, dt == ATTN_F32 ? "f32" : "f64", env ? env : "", med * 1e3,
                    (long long)sent, t_xchg * 1e3, wait * 1e3, hidden, cmax * 1e3, cmin * 1e3,
                    flops / med * 1e-9);
            else
                printf("%-14s %9.1f %11lld %9.2f %9.2f %6.1f%% %8.1f/%8.1f %8.2f\n",
                       modes[m].name, med * 1e3, (long long)sent, t_xchg * 1e3, wait * 1e3,
                       hidden, cmax * 1e3, cmin * 1e3, flops / med * 1e-9);
        }
    }
    free(qm);
    free(km);
    free(vm);
    free(om);
    free(lm);
    free(dom);
    for (int i = 0; i < 3; ++i)
        free(gm[i]);
    MPI_Finalize();
    return 0;
}
