/* SPDX-License-Identifier: MIT */
/* What every program in bench/ needs around the timed calls: clocks, medians,
   64-byte aligned buffers and deterministic uniform fills. */
#ifndef ATTN_BENCH_UTIL_H
#define ATTN_BENCH_UTIL_H

#include <attn/attn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on a clock: CLOCK_MONOTONIC for wall time, CLOCK_PROCESS_CPUTIME_ID for the
   CPU time of the whole process (less disturbed by other processes on a shared machine). */
static inline double bench_clock(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static inline double bench_now(void) { return bench_clock(CLOCK_MONOTONIC); }
static inline double bench_cpu_now(void) { return bench_clock(CLOCK_PROCESS_CPUTIME_ID); }

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts t[0..n) in place (so t[0] is the minimum, t[n - 1] the maximum) and returns
   the median (the mean of the two middle values when n is even). n >= 1. */
static inline double bench_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* 64-byte aligned, the size rounded up to 64 bytes; never NULL for 0 bytes; NULL when
   the allocation fails or the size overflows. Release with free(). */
static inline void *bench_alloc64(size_t bytes) {
    size_t r = (bytes + 63) / 64 * 64;
    if (r < bytes)
        return NULL;
    return aligned_alloc(64, r ? r : 64);
}

/* count values of dtype dt (ATTN_F32 or ATTN_F64) at p, uniform in [-a, a], from a
   64-bit LCG started at seed: the same inputs on every run and machine. */
static inline void bench_fill(void *p, size_t count, attn_dtype dt, double a, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (size_t i = 0; i < count; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = a * (2.0 * (double)(s >> 11) * 0x1.0p-53 - 1.0);
        if (dt == ATTN_F32)
            ((float *)p)[i] = (float)u;
        else
            ((double *)p)[i] = u;
    }
}

#endif
