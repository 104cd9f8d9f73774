/* SPDX-License-Identifier: MIT */
/*
 * The machine's read bandwidth, the reference of the decoding figures: two
 * threads, each loading one 8-byte word per 64-byte cache line of its half of
 * a 512 MiB buffer (larger than the last-level cache), so that the time is the
 * memory's alone. Generating a token has to read every weight and the KV cache
 * once, so those bytes over this bandwidth are its floor. Shared by
 * attn-bench-decode and examples/generate, which time as many passes as
 * repetitions right after what they measure and divide by the median: on a
 * shared machine the bandwidth moves with the load, so only figures taken
 * together compare.
 */
#ifndef ATTN_READ_BANDWIDTH_H
#define ATTN_READ_BANDWIDTH_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { RBW_LINE = 64, RBW_THREADS = 2 };
#define RBW_BYTES ((size_t)512 << 20)

/* One word per cache line of p[0, bytes): independent loads, four running sums. */
static inline uint64_t rbw_lines(const char *p, size_t bytes) {
    uint64_t s[4] = {0, 0, 0, 0};
    size_t n = bytes / RBW_LINE, i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; ++j)
            s[j] += *(const volatile uint64_t *)(p + (i + (size_t)j) * RBW_LINE);
    for (; i < n; ++i)
        s[0] += *(const volatile uint64_t *)(p + i * RBW_LINE);
    return s[0] + s[1] + s[2] + s[3];
}

typedef struct rbw_part {
    const char *p;
    size_t bytes;
    uint64_t sum;
} rbw_part;

static void *rbw_run(void *arg) {
    rbw_part *t = arg;
    t->sum = rbw_lines(t->p, t->bytes);
    return NULL;
}

static inline double rbw_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One pass of RBW_THREADS threads over buf's RBW_BYTES: GB/s (0 if a thread did not start). */
static inline double rbw_pass(const char *buf) {
    rbw_part part[RBW_THREADS];
    pthread_t th[RBW_THREADS];
    int started = 0;
    double t0 = rbw_now();
    for (int i = 0; i < RBW_THREADS; ++i) {
        part[i] =
            (rbw_part){buf + RBW_BYTES / RBW_THREADS * (size_t)i, RBW_BYTES / RBW_THREADS, 0};
        started += pthread_create(&th[i], NULL, rbw_run, &part[i]) == 0;
        if (started <= i)
            break;
    }
    for (int i = 0; i < started; ++i)
        pthread_join(th[i], NULL);
    double t = rbw_now() - t0;
    return started == RBW_THREADS && t > 0 ? (double)RBW_BYTES / t / 1e9 : 0;
}

/*
 * A touched RBW_BYTES buffer for rbw_pass, after one warm-up pass (free() it);
 * NULL when it cannot be allocated or a thread cannot start.
 */
static inline char *rbw_buffer(void) {
    char *buf = aligned_alloc(RBW_LINE, RBW_BYTES);
    if (!buf)
        return NULL;
    memset(buf, 1, RBW_BYTES); /* every page mapped before the first pass */
    if (rbw_pass(buf) > 0)
        return buf;
    free(buf);
    return NULL;
}

#endif
