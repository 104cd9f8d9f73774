/* SPDX-License-Identifier: MIT */
/* attn's thread policy: how many threads a parallel loop runs, and keeping the BLAS serial inside them. */
#include <cblas.h>
#include <pthread.h>

#include "attn_config.h"
#include "core/internal.h"

#if ATTN_HAVE_OPENMP
#include <omp.h>
#endif

/*
 * Threads and the BLAS (docs/design.md has the measurements).
 *
 * attn parallelizes its own loops (batch x head x query block) with OpenMP
 * and calls attn_gemm on small tiles from every thread. Those calls must run
 * single-threaded inside the BLAS, or the BLAS's own threads oversubscribe
 * the cores (and Debian's pthread OpenBLAS contends with itself when called
 * from two threads at once). Large products issued outside such a region keep
 * the BLAS's threads.
 *
 * - OpenBLAS built with OpenMP (openblas_get_parallel() == 2) is already
 *   serial inside an active OpenMP region: nothing to do.
 * - OpenBLAS built with pthreads (== 1) has only the process-wide
 *   openblas_set_num_threads(). The first region to begin saves the current
 *   count and sets 1; the last to end restores it (a counter under a mutex, so
 *   concurrent attn calls from several user threads nest correctly). While any
 *   region is active, *every* OpenBLAS call in the process is single-threaded,
 *   including other user threads' calls.
 * - A sequential BLAS, or one attn cannot control, is left alone.
 */
#if ATTN_HAVE_OPENBLAS_THREADS
static pthread_mutex_t serial_lock = PTHREAD_MUTEX_INITIALIZER;
static int serial_depth;     /* active serial regions */
static int serial_saved = 1; /* the BLAS thread count to restore */

static bool blas_needs_serial(void) {
#if ATTN_HAVE_OPENBLAS_GET_PARALLEL
    return openblas_get_parallel() == 1;
#else
    return true;
#endif
}
#endif

int attn__threads(int requested, int64_t tasks, double flops) {
    int n = 1;
#if ATTN_HAVE_OPENMP
    if (omp_get_active_level() < omp_get_max_active_levels())
        n = requested > 0 ? requested : omp_get_max_threads();
    /* automatic: a fork/join costs ~10 us idle, and ms when another process holds a core */
    if (requested == 0 && flops < ATTN__PARALLEL_MIN_FLOPS)
        n = 1;
#else
    (void)requested;
    (void)flops;
#endif
    if (tasks < n)
        n = tasks > 1 ? (int)tasks : 1;
    return n < 1 ? 1 : n;
}

void attn__blas_serial_begin(int nthreads) {
#if ATTN_HAVE_OPENBLAS_THREADS
    if (nthreads <= 1 || !blas_needs_serial())
        return;
    pthread_mutex_lock(&serial_lock);
    if (serial_depth++ == 0) {
        serial_saved = openblas_get_num_threads();
        if (serial_saved > 1)
            openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&serial_lock);
#else
    (void)nthreads;
#endif
}

void attn__blas_serial_end(int nthreads) {
#if ATTN_HAVE_OPENBLAS_THREADS
    if (nthreads <= 1 || !blas_needs_serial())
        return;
    pthread_mutex_lock(&serial_lock);
    if (--serial_depth == 0 && serial_saved > 1)
        openblas_set_num_threads(serial_saved);
    pthread_mutex_unlock(&serial_lock);
#else
    (void)nthreads;
#endif
}
