/* SPDX-License-Identifier: MIT */
/* Where a call's work runs: attn's loops on the BLAS's own threads, or on the calling thread. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>

#include "attn_config.h"
#include "core/internal.h"

#if ATTN_HAVE_OPENMP
#include <omp.h>
#endif

/*
 * The rule (docs/guide.md "Threads" says it for users; docs/design.md "Threads" why):
 * 1. A loop's thread count n: opts.threads when > 0; automatic (0): 1 for a call below
 *    ATTN__PARALLEL_MIN_FLOPS, else the BLAS's own count (openblas_get_num_threads() with
 *    pthread OpenBLAS, else omp_get_max_threads()). Never more than the loop's tasks.
 * 2. n > 1: the loop runs on the threads the loaded BLAS already has: pthread OpenBLAS's
 *    server workers (its exported gotoblas_pthread), else an OpenMP team (libgomp's
 *    threads: the OpenMP OpenBLAS's own). The calling thread takes tasks too. Every BLAS
 *    call inside the loop is single-threaded. Where neither exists, n is 1.
 * 3. The BLAS's threads serve one attn loop at a time. With pthread OpenBLAS's server a
 *    loop from another host thread waits, asleep, until it is free; beside another
 *    thread's OpenMP team a loop runs on its calling thread alone, its products as in 5.
 *    A loop inside the caller's active OpenMP region, or nested in a task of a loop,
 *    runs on its calling thread alone (4).
 * 4. A call with threads = 1, or made inside an active OpenMP region, runs wholly on its
 *    calling thread, its BLAS calls single-threaded too.
 * 5. Any other product outside a loop (projections, FFN, attn_gemm) is one BLAS call,
 *    threaded as the BLAS decides.
 * "Single-threaded": the OpenMP build is serial inside a parallel region, and on the
 * calling thread once its nthreads ICV is 1 (thread-local, restored). pthread OpenBLAS has
 * only its process-wide count (openblas_set_num_threads_local sets it too): it reads 1
 * from the first loop or call that needs it until the last one ends, then the saved count
 * is restored, unless somebody changed it meanwhile.
 */

enum { BLAS_UNKNOWN = -1, BLAS_SERIAL = 0, BLAS_PTHREAD = 1, BLAS_OPENMP = 2 };

static int blas_parallel(void) {
#if ATTN_HAVE_OPENBLAS_GET_PARALLEL
    return openblas_get_parallel();
#elif ATTN_HAVE_OPENBLAS_THREADS
    return BLAS_PTHREAD; /* an OpenBLAS too old to say: assume the process-wide count */
#else
    return BLAS_UNKNOWN;
#endif
}

static _Thread_local bool on_server; /* this thread runs attn tasks for OpenBLAS's server */

/* A server worker is never in an OpenMP region, and must not ask: an omp_* query
   registers the thread with libomp, whose destructor then deadlocks OpenBLAS's fork
   handler joining that worker. Never inlined: clang treats the query as free of side
   effects and would hoist it above the check. */
__attribute__((noinline)) static bool in_omp_region(void) {
    if (on_server)
        return false;
#if ATTN_HAVE_OPENMP
    return omp_get_active_level() > 0;
#else
    return false;
#endif
}

/* ---- single-threaded BLAS calls ------------------------------------------------ */

#if ATTN_HAVE_OPENBLAS_THREADS
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static int count_users;     /* threads that need the process-wide count at 1 */
static int count_saved = 1; /* the count to restore */
#endif

/* The pthread OpenBLAS's count, as the user set it (not attn's temporary 1). */
static int blas_user_count(void) {
#if ATTN_HAVE_OPENBLAS_THREADS
    pthread_mutex_lock(&count_lock);
    int k = count_users ? count_saved : openblas_get_num_threads();
    pthread_mutex_unlock(&count_lock);
    return k;
#else
    return 1;
#endif
}

static _Thread_local int serial_depth; /* this thread's BLAS calls are single-threaded */
#if ATTN_HAVE_OPENMP
static _Thread_local int serial_icv; /* the nthreads ICV to restore */
#endif

static void serial_begin(void) {
    if (serial_depth++ > 0)
        return;
#if ATTN_HAVE_OPENBLAS_THREADS
    if (blas_parallel() == BLAS_PTHREAD) {
        pthread_mutex_lock(&count_lock);
        if (count_users++ == 0) {
            count_saved = openblas_get_num_threads();
            if (count_saved > 1)
                openblas_set_num_threads(1);
        }
        pthread_mutex_unlock(&count_lock);
    }
#endif
#if ATTN_HAVE_OPENMP
    serial_icv = on_server ? 1 : omp_get_max_threads(); /* see in_omp_region */
    if (serial_icv > 1)
        omp_set_num_threads(1);
#endif
}

static void serial_end(void) {
    if (--serial_depth > 0)
        return;
#if ATTN_HAVE_OPENMP
    if (serial_icv > 1)
        omp_set_num_threads(serial_icv);
#endif
#if ATTN_HAVE_OPENBLAS_THREADS
    if (blas_parallel() == BLAS_PTHREAD) {
        pthread_mutex_lock(&count_lock);
        /* restore only our own 1: a count somebody set meanwhile is theirs to keep */
        if (--count_users == 0 && count_saved > 1 && openblas_get_num_threads() == 1)
            openblas_set_num_threads(count_saved);
        pthread_mutex_unlock(&count_lock);
    }
#endif
}

int attn__one_thread_begin(int requested) {
    if (requested != 1 && !in_omp_region())
        return 0;
    serial_begin();
    return 1;
}

void attn__one_thread_end(int token) {
    if (token)
        serial_end();
}

int attn__blas_begin(void) {
#if ATTN_HAVE_OPENBLAS_THREADS
    /* a threaded call from a server worker would wait for a free worker, itself,
       forever: if somebody raised the count during the loop, lower it again
       (the loop's end then restores theirs) */
    if (on_server && openblas_get_num_threads() != 1) {
        pthread_mutex_lock(&count_lock);
        count_saved = openblas_get_num_threads();
        openblas_set_num_threads(1);
        pthread_mutex_unlock(&count_lock);
    }
#endif
    /* rule 4 for a product outside a kernel's call bracket (a layer's projection) */
    if (serial_depth > 0 || !in_omp_region())
        return 0;
    serial_begin();
    return 1;
}

void attn__blas_end(int token) { attn__one_thread_end(token); }

/* ---- how many threads ------------------------------------------------------------ */

int attn__threads(int requested, int64_t tasks, double flops) {
    int n = requested;
    if (n == 0) {
        if (flops < ATTN__PARALLEL_MIN_FLOPS)
            return 1;
        int par = blas_parallel();
        if (par == BLAS_PTHREAD)
            n = blas_user_count();
        else
#if ATTN_HAVE_OPENMP
            n = omp_get_max_threads();
#else
            n = 1;
#endif
    }
    if (n > ATTN__MAX_THREADS)
        n = ATTN__MAX_THREADS;
    if (tasks < n)
        n = tasks > 1 ? (int)tasks : 1;
    return n < 1 ? 1 : n;
}

/* ---- the loop ---------------------------------------------------------------------- */

typedef struct job {
    attn__task_fn *fn;
    void          *ctx;
    int64_t        n;
    atomic_llong   next; /* the next unclaimed task */
} job;

static void run_tasks(job *j, int tid) {
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= j->n)
            break;
        j->fn(j->ctx, t, tid);
    }
}

#if ATTN_HAVE_OPENBLAS_THREADS
/* The pthread OpenBLAS's thread server: runs function(args + i * stride) for i < n,
   i = 0 on the calling thread and the others on its workers, and returns when all
   have returned (exported by Debian's libopenblas0-pthread, absent from its OpenMP
   build: weak, and unused when missing). */
extern int gotoblas_pthread(int n, void *function, void *args, int stride) __attribute__((weak));

typedef struct {
    job *j;
    int  tid;
} server_share;

/* Release/acquire pairs around the server's own (uninstrumented) hand-over, so that
   ThreadSanitizer sees the order the server guarantees. */
static atomic_uint server_posted, server_done;

static void server_share_run(void *arg) {
    (void)atomic_load_explicit(&server_posted, memory_order_acquire);
    server_share *s = arg;
    on_server = true;
    run_tasks(s->j, s->tid);
    on_server = false;
    atomic_fetch_add_explicit(&server_done, 1, memory_order_release);
}

static bool server_usable(void) { return gotoblas_pthread && blas_parallel() == BLAS_PTHREAD; }

static bool run_on_server(job *j, int n) {
    if (!server_usable())
        return false;
    int k = blas_user_count(); /* the loop holds the process-wide count at 1 */
    if (n > k) /* the server has k - 1 workers */
        n = k > 1 ? k : 1;
    server_share share[ATTN__MAX_THREADS];
    for (int i = 0; i < n; ++i)
        share[i] = (server_share){j, i};
    atomic_fetch_add_explicit(&server_posted, 1, memory_order_release);
    gotoblas_pthread(n, (void *)server_share_run, share, (int)sizeof share[0]);
    (void)atomic_load_explicit(&server_done, memory_order_acquire);
    return true;
}
#else
static bool server_usable(void) { return false; }
static bool run_on_server(job *j, int n) { (void)j, (void)n; return false; }
#endif

#if ATTN_HAVE_OPENMP
static bool team_used;     /* this process ran a loop in an OpenMP team */
static bool team_unusable; /* a fork child of such a process: its first region would hang */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void team_after_fork(void) {
    /* libgomp keeps the parent's threads in its records, and the child's next
       parallel region waits for them forever (GCC PR 60035). An OpenMP BLAS opens
       such a region for every threaded call: with one thread it runs serial instead. */
    team_unusable = team_unusable || team_used;
    if (team_unusable)
        omp_set_num_threads(1);
}

static void fork_register(void) { pthread_atfork(NULL, NULL, team_after_fork); }

static bool run_in_team(job *j, int n) {
    if (team_unusable)
        return false;
    if (!team_used) {
        pthread_once(&fork_once, fork_register);
        team_used = true;
    }
#pragma omp parallel num_threads(n)
    run_tasks(j, omp_get_thread_num());
    return true;
}
#else
static bool run_in_team(job *j, int n) { (void)j, (void)n; return false; }
#endif

/* The BLAS's threads serve one attn loop at a time. pthread OpenBLAS has one server for
   the process: a loop from another thread waits for it (asleep on loop_lock). OpenMP
   teams are per calling thread: a loop that finds another thread's team running runs on
   its calling thread alone. A loop nested in a task of a loop (on the loop's caller or on
   a server worker), or inside the caller's OpenMP region, runs on its thread alone. */
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local bool in_loop; /* this thread is running a loop's tasks */
static pthread_once_t lock_once = PTHREAD_ONCE_INIT;

/* A fork child has only the forking thread: locks another thread held are free again. */
static void locks_after_fork(void) {
    pthread_mutex_init(&loop_lock, NULL);
#if ATTN_HAVE_OPENBLAS_THREADS
    pthread_mutex_init(&count_lock, NULL);
#endif
}

static void locks_register(void) { pthread_atfork(NULL, NULL, locks_after_fork); }

static bool take_threads(void) {
    if (in_loop || on_server || in_omp_region())
        return false;
    pthread_once(&lock_once, locks_register);
    if (!server_usable())
        return pthread_mutex_trylock(&loop_lock) == 0;
    pthread_mutex_lock(&loop_lock);
    return true;
}

void attn__parallel_for(int nthreads, int64_t ntasks, attn__task_fn *fn, void *ctx) {
    job j = {.fn = fn, .ctx = ctx, .n = ntasks};
    atomic_init(&j.next, 0);
    if (nthreads > ntasks)
        nthreads = (int)ntasks;
    if (nthreads <= 1) {
        run_tasks(&j, 0);
        return;
    }
    if (take_threads()) {
        in_loop = true;
        serial_begin(); /* before any task runs: every BLAS call in the loop is serial */
        if (!run_on_server(&j, nthreads))
            (void)run_in_team(&j, nthreads);
        serial_end();
        in_loop = false;
        pthread_mutex_unlock(&loop_lock);
    }
    run_tasks(&j, 0); /* what is left: all of it when the loop runs on this thread alone */
}
