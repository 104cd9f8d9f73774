/* SPDX-License-Identifier: MIT */
/* attn's thread policy: how many threads a parallel loop runs, who runs them, the BLAS inside. */
#include <cblas.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "attn_config.h"
#include "core/internal.h"

#if ATTN_HAVE_OPENMP
#include <omp.h>
#endif

/*
 * Threads and the BLAS (docs/design.md "Threads and the BLAS" has the
 * measurements behind every rule here).
 *
 * attn parallelizes its own loops (batch x head x query block) and calls
 * attn_gemm on small tiles from every thread. Inside a host program that makes
 * its own BLAS calls, one rule decides its speed: one set of threads in the
 * process. The BLAS's idle threads do not sleep at once (pthread OpenBLAS's
 * workers yield in a loop for 2^28 cycles after each threaded call, libgomp's
 * spin for ~300000 pause loops), so a second pool beside them shares their
 * cores with them. attn therefore runs a loop on the BLAS's threads when the
 * BLAS lends them, and on its own pool only otherwise:
 *
 * - pthread OpenBLAS (openblas_get_parallel() == 1) with at least the loop's
 *   thread count: through gotoblas_pthread, its server's entry for
 *   pthread-style work; the worker that was yielding takes tasks at once.
 * - OpenBLAS built with OpenMP (== 2), outside the caller's parallel region:
 *   in an OpenMP team, i.e. libgomp's threads, the same the BLAS uses.
 * - anything else: attn's pool (attn__parallel_for below). Workers spin
 *   ~ATTN__SPIN_NS (less if they lose their core meanwhile) and then sleep on
 *   a condition variable, the caller's thread takes tasks too, and a worker
 *   that is not running when the loop starts simply never joins: the caller
 *   waits only for tasks already under way.
 * - any loop, while the BLAS's threads (server workers or team members)
 *   start late (another process holds their core): attn's pool too ("Late
 *   helpers" below).
 * - while an OpenMP team's members start milliseconds late, libgomp's idle
 *   threads sleep at once instead of spinning (unless the user set how they
 *   wait): "libgomp's idle threads" below.
 *
 * Products of attn_gemm up to ATTN__GEMM_SPLIT_MAX_FLOPS are loops too, of
 * column blocks (src/core/gemm.c, attn__gemm_threads below): OpenBLAS splits
 * its own threaded GEMM statically, so one late helper would hold its part.
 *
 * Every tile product inside a loop runs single-threaded in the BLAS, or the
 * BLAS's threads oversubscribe the cores; so does every product of a call
 * whose caller asked for one thread (attn__one_thread_begin):
 *    - In an OpenMP team, OpenBLAS's OpenMP build is serial by its own rule
 *      (omp_in_parallel()). On attn's pool the workers set their OpenMP
 *      nthreads ICV to 1 once (they are attn's threads); the caller's thread
 *      sets its own to 1 for its share of the loop and restores it.
 *    - pthread OpenBLAS has one process-wide count (in 0.3.21
 *      openblas_set_num_threads_local is the same global setting). The
 *      first loop to begin saves openblas_get_num_threads() and sets 1, the
 *      last to end restores it, unless somebody else changed it meanwhile
 *      (then theirs stays). With NO_AFFINITY builds (Debian's) the call only
 *      stores the count: no thread is created, woken or stopped. While a loop
 *      runs, another user thread's BLAS call is single-threaded too.
 *    - A sequential BLAS, or one attn cannot steer, is left alone.
 *
 * One loop runs at a time; a loop that finds another running (attn called
 * from several user threads at once) runs on its caller's thread alone. The
 * pool's threads are created on first use, never more than a loop asked for,
 * and live until the process ends (after fork(), the child starts a new pool).
 */

/* ---- the BLAS inside a loop -------------------------------------------------- */

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

#if ATTN_HAVE_OPENBLAS_THREADS
static pthread_mutex_t serial_lock = PTHREAD_MUTEX_INITIALIZER;
static int serial_depth;     /* active serial regions */
static int serial_saved = 1; /* the BLAS thread count to restore */
#endif

static void blas_serial_begin(void) {
#if ATTN_HAVE_OPENBLAS_THREADS
    if (blas_parallel() != BLAS_PTHREAD)
        return;
    pthread_mutex_lock(&serial_lock);
    if (serial_depth++ == 0) {
        serial_saved = openblas_get_num_threads();
        if (serial_saved > 1)
            openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&serial_lock);
#endif
}

static void blas_serial_end(void) {
#if ATTN_HAVE_OPENBLAS_THREADS
    if (blas_parallel() != BLAS_PTHREAD)
        return;
    pthread_mutex_lock(&serial_lock);
    /* restore only our own 1: a count the caller set meanwhile is theirs to keep */
    if (--serial_depth == 0 && serial_saved > 1 && openblas_get_num_threads() == 1)
        openblas_set_num_threads(serial_saved);
    pthread_mutex_unlock(&serial_lock);
#endif
}

/* Tasks run from here until caller_serial_end stay on their threads: the
   pthread build's count goes to 1 (blas_serial_begin), and the calling
   thread's OpenMP nthreads ICV, which an OpenMP BLAS reads per call; returns
   the ICV to restore. */
static int caller_serial_begin(void) {
    blas_serial_begin();
#if ATTN_HAVE_OPENMP
    int icv = omp_get_max_threads();
    if (icv > 1)
        omp_set_num_threads(1);
    return icv;
#else
    return 1;
#endif
}

static void caller_serial_end(int icv) {
#if ATTN_HAVE_OPENMP
    if (icv > 1)
        omp_set_num_threads(icv);
#else
    (void)icv;
#endif
    blas_serial_end();
}

/* ---- how many threads --------------------------------------------------------- */

/* Never inlined: clang treats the omp_* queries as free of side effects and
   hoists them above a caller's early return (attn__gemm_threads' in_loop).
   Their first call registers the thread with libomp, whose destructor then
   deadlocks OpenBLAS's fork handler joining a server thread that ran one. */
__attribute__((noinline)) int attn__threads(int requested, int64_t tasks, double flops) {
    int n = 1;
#if ATTN_HAVE_OPENMP
    /* inside the caller's active OpenMP region: its threads already use the cores */
    if (omp_get_active_level() < omp_get_max_active_levels())
        n = requested > 0 ? requested : omp_get_max_threads();
#else
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = requested > 0 ? requested : cores > 0 ? (int)cores : 1;
#endif
    /* automatic: waking a worker costs ~10 us idle, and a scheduler slice when
       another process holds its core; small calls run on the caller's thread */
    if (requested == 0 && flops < ATTN__PARALLEL_MIN_FLOPS)
        n = 1;
    if (n > ATTN__MAX_THREADS)
        n = ATTN__MAX_THREADS;
    if (tasks < n)
        n = tasks > 1 ? (int)tasks : 1;
    return n < 1 ? 1 : n;
}

/* ---- how many threads for one product ---------------------------------------------- */

static _Thread_local int in_loop; /* this thread is running a loop's tasks */

int attn__gemm_threads(double flops, int64_t blocks) {
    if (in_loop || flops > ATTN__GEMM_SPLIT_MAX_FLOPS)
        return 1;
#if ATTN_HAVE_OPENBLAS_THREADS
    int par = blas_parallel();
    if (par != BLAS_OPENMP && par != BLAS_PTHREAD)
        return 1; /* a sequential build, or one attn cannot steer: the BLAS decides */
    /* the OpenMP build's team is omp_get_max_threads(), as attn__threads'; the
       pthread build's count is its own, which the user may have lowered */
    int n = attn__threads(0, blocks, flops);
    if (par == BLAS_PTHREAD && n > openblas_get_num_threads())
        n = openblas_get_num_threads();
    return n < 1 ? 1 : n;
#else
    (void)blocks;
    return 1;
#endif
}

/* ---- the pool ------------------------------------------------------------------ */

typedef struct job {
    attn__task_fn *fn;
    void          *ctx;
    int64_t        n;
    atomic_llong   next;   /* the next unclaimed task */
    int            want;   /* workers that may join (nthreads - 1) */
    int            joined; /* under pool.lock: tids 1..joined are taken */
    atomic_int     busy;   /* joined workers not yet done (changed under pool.lock) */
} job;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t  wake; /* a job was posted */
    pthread_cond_t  done; /* a job's last worker finished */
    atomic_uint     gen;  /* bumped at every post */
    job            *cur;  /* the job workers may join, or NULL */
    int             nworkers;
    bool            in_use;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
          NULL, 0, false};

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

#if ATTN_HAVE_OPENMP
static bool team_used;    /* this process ran a loop in an OpenMP team */
static bool team_unusable; /* a child of such a process: its first region would hang */
#endif

static void park_after_fork(void);

static void pool_after_fork(void) {
    park_after_fork();
#if ATTN_HAVE_OPENMP
    /* libgomp keeps the parent's thread pool in its records, and the child's
       next parallel region waits for those threads forever (GCC PR 60035) */
    team_unusable = team_unusable || team_used;
    /* OpenBLAS's OpenMP build opens such a region for every threaded call
       (attn_gemm's large products, LAPACK): with one thread it runs serial
       instead of hanging, attn's calls and the program's alike. A region of
       one thread needs no pool thread. */
    if (team_unusable)
        omp_set_num_threads(1);
#endif
    /* the child has none of the parent's workers: start over */
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.cur = NULL;
    pool.nworkers = 0;
    pool.in_use = false;
}

static void pool_register(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

/* 64 pause instructions take 1-10 us; a longer gap between two clock reads
   means the thread was not running */
#define PREEMPTED_NS 30e3

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin until *gen moves away from seen, at most ATTN__SPIN_NS, and no longer
   than until the first time the thread loses its core (a gap between two
   clock reads): a spinner that another thread preempts would notice the next
   loop only at its next turn, a sleeper is woken at once. True if gen moved. */
static bool spin_gen(unsigned seen) {
    double until = 0, last = 0;
    for (int i = 0;; ++i) {
        if (atomic_load_explicit(&pool.gen, memory_order_acquire) != seen)
            return true;
        if ((i & 63) == 0) {
            double t = now_ns();
            if (until == 0)
                until = t + ATTN__SPIN_NS;
            else if (t > until || t - last > PREEMPTED_NS)
                return false;
            last = t;
        }
        cpu_relax();
    }
}

static void run_tasks(job *j, int tid) {
    in_loop++;
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= j->n)
            break;
        j->fn(j->ctx, t, tid);
    }
    in_loop--;
}

static void *worker_main(void *arg) {
    (void)arg;
#if ATTN_HAVE_OPENMP
    omp_set_num_threads(1); /* this thread's ICV: an OpenMP BLAS called from here is serial */
#endif
    unsigned seen = atomic_load(&pool.gen);
    for (;;) {
        spin_gen(seen);
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.gen) == seen)
            pthread_cond_wait(&pool.wake, &pool.lock);
        seen = atomic_load(&pool.gen);
        job *j = pool.cur;
        int tid = 0;
        if (j && j->joined < j->want) {
            tid = ++j->joined;
            atomic_fetch_add(&j->busy, 1);
        } else {
            j = NULL;
        }
        pthread_mutex_unlock(&pool.lock);
        if (!j)
            continue;
        run_tasks(j, tid);
        pthread_mutex_lock(&pool.lock);
        if (atomic_fetch_sub(&j->busy, 1) == 1)
            pthread_cond_signal(&pool.done);
        pthread_mutex_unlock(&pool.lock);
    }
    return NULL;
}

/* A detached thread of attn's running fn, with every signal blocked (the user's
   signals go to the user's threads). False if it could not be created. */
static bool spawn_detached(void *(*fn)(void *)) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t t;
    bool ok = pthread_create(&t, NULL, fn, NULL) == 0;
    if (ok)
        pthread_detach(t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

/* Under pool.lock: at least k workers, or as many as could be created. */
static int ensure_workers(int k) {
    if (pool.nworkers >= k)
        return k;
    pthread_once(&pool_once, pool_register);
    while (pool.nworkers < k && spawn_detached(worker_main))
        pool.nworkers++;
    return pool.nworkers < k ? pool.nworkers : k;
}

static void run_serial(int64_t ntasks, attn__task_fn *fn, void *ctx) {
    in_loop++;
    for (int64_t t = 0; t < ntasks; ++t)
        fn(ctx, t, 0);
    in_loop--;
}

int attn__one_thread_begin(int requested) {
    return requested == 1 ? caller_serial_begin() : 0;
}

void attn__one_thread_end(int token) {
    if (token)
        caller_serial_end(token);
}

/* ---- late helpers -------------------------------------------------------------- */

/*
 * The BLAS's idle threads poll for work instead of sleeping: the pthread
 * server's workers yield in a loop (for about 0.1 s after a job), libgomp's
 * spin (~300000 pause loops) with OMP_WAIT_POLICY unset. The scheduler runs
 * a polling thread when its turn comes, not when work arrives: when another
 * process holds its core, a helper starts its share only when that process's
 * turn ends (up to a 4 ms tick here). A short loop then costs the wait (sdpa
 * T 64: 4.0 ms against 0.55 ms), and a long one loses its first milliseconds
 * and the core the polling helper takes from the caller between loops; in a
 * libgomp team the caller also waits at the end barrier for a helper that had
 * no task left. So once a helper has begun more than HELPER_LATE_NS after the
 * loop, the loops of the next `helper_avoid_ns` run on attn's pool, whose
 * sleeping workers are woken at once (and, left idle that long, the BLAS's
 * threads go to sleep); the first loop after that measures the BLAS's threads
 * again. Each late probe doubles the time (to HELPER_AVOID_MAX_NS), a prompt
 * helper clears it.
 */
#define HELPER_LATE_NS      100e3
#define HELPER_AVOID_MIN_NS 50e6
#define HELPER_AVOID_MAX_NS 1.6e9
static double helper_retry_at, helper_avoid_ns = HELPER_AVOID_MIN_NS; /* under pool.in_use */

/* May a loop starting at t0 run on the BLAS's threads? */
static bool helpers_trusted(double t0) { return t0 >= helper_retry_at; }

/* A loop began at t0 on the BLAS's threads, share i of n at began[i] (share 0
   is the caller's). Returns how late the last helper began (ns). */
static double helpers_note(double t0, const double *began, int n) {
    double start = 0; /* when the last helper began */
    for (int i = 1; i < n; ++i)
        if (began[i] > start)
            start = began[i];
    if (start - t0 <= HELPER_LATE_NS) {
        helper_retry_at = 0;
        helper_avoid_ns = HELPER_AVOID_MIN_NS;
    } else {
        if (helper_retry_at > 0 && helper_avoid_ns < HELPER_AVOID_MAX_NS)
            helper_avoid_ns *= 2; /* probed again, and the helper was late again */
        helper_retry_at = start + helper_avoid_ns;
    }
    return start - t0;
}

/* ---- the loop on the pthread OpenBLAS's own threads ------------------------------ */

#if ATTN_HAVE_OPENBLAS_THREADS
/* The pthread OpenBLAS's thread server: runs function(args + i * stride) for
   i < n, i = 0 on the calling thread and the others on its workers, and
   returns when all have returned (exported by Debian's libopenblas0-pthread
   0.3.21, absent from its OpenMP build: weak, and unused when missing). */
extern int gotoblas_pthread(int n, void *function, void *args, int stride) __attribute__((weak));

typedef struct {
    job    *j;
    int     tid;
    double *began; /* began[tid]: when the share began */
} server_share;

/* Release/acquire pairs around the server's own (uninstrumented) hand-over,
   so that ThreadSanitizer sees the order the server guarantees. */
static atomic_uint server_posted, server_done;
static _Thread_local bool on_server; /* this thread runs attn tasks for the server */

static void server_share_run(void *arg) {
    (void)atomic_load_explicit(&server_posted, memory_order_acquire);
    server_share *s = arg;
    s->began[s->tid] = now_ns();
    on_server = true;
    run_tasks(s->j, s->tid);
    on_server = false;
    atomic_fetch_add_explicit(&server_done, 1, memory_order_release);
}

/* Run the loop on the pthread OpenBLAS's threads, if the BLAS is that build
   and has nthreads of them; false if it cannot take the loop. */
static bool run_on_blas_server(job *j, int nthreads) {
    if (!gotoblas_pthread || blas_parallel() != BLAS_PTHREAD)
        return false;
#if ATTN_HAVE_OPENMP
    if (omp_in_parallel()) /* the server warns on stderr there */
        return false;
#endif
    if (openblas_get_num_threads() < nthreads)
        return false;
    double t0 = now_ns();
    if (!helpers_trusted(t0))
        return false;
    server_share share[ATTN__MAX_THREADS];
    double       began[ATTN__MAX_THREADS];
    for (int i = 0; i < nthreads; ++i)
        share[i] = (server_share){j, i, began};
    blas_serial_begin();
    atomic_fetch_add_explicit(&server_posted, 1, memory_order_release);
    gotoblas_pthread(nthreads, (void *)server_share_run, share, (int)sizeof share[0]);
    (void)atomic_load_explicit(&server_done, memory_order_acquire);
    blas_serial_end();
    helpers_note(t0, began, nthreads);
    return true;
}
#else
static bool run_on_blas_server(job *j, int nthreads) { (void)j, (void)nthreads; return false; }
#endif

void attn__blas_serial_guard(void) {
#if ATTN_HAVE_OPENBLAS_THREADS
    /* A threaded call from a server worker would wait for a free worker, itself,
       forever: if another thread raised the count during the loop, lower it again
       (blas_serial_end then restores the raised count). */
    if (on_server && openblas_get_num_threads() != 1) {
        pthread_mutex_lock(&serial_lock);
        int k = openblas_get_num_threads();
        if (k != 1) {
            serial_saved = k;
            openblas_set_num_threads(1);
        }
        pthread_mutex_unlock(&serial_lock);
    }
#endif
}

/* ---- libgomp's idle threads while other processes want the cores -------------------- */

/* libgomp's rule and its omp_pause_resource_all (GCC 9 on) */
#if ATTN_HAVE_OPENMP && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define ATTN_PARK_TEAM 1
/*
 * With OMP_WAIT_POLICY and GOMP_SPINCOUNT unset, an idle libgomp thread spins
 * ~300000 pause loops (9 ms on Zen 3) before it sleeps, unless the process has
 * more OpenMP threads than available CPUs: then 100 (libgomp's manual,
 * GOMP_SPINCOUNT). Its team member spins on after each of the caller's own
 * threaded BLAS calls, and where another process wants the cores, that
 * spinner takes the core the caller's next call (and attn's) needs and starts
 * its own share of that call a scheduler slice late: attn sees a team member
 * begin milliseconds late. Then a thread of attn's (the parker) holds a team
 * of omp_get_num_procs() + 2 - (the late team's size) threads, asleep: the
 * process has more OpenMP threads than CPUs, and every idle libgomp thread
 * in it sleeps after 100 spins, as with OMP_WAIT_POLICY=PASSIVE. After
 * `hold` the parker lets its team go (omp_pause_resource_all frees the
 * calling thread's pool) and libgomp spins as before, which a quiet
 * machine's short calls prefer; a late member soon after that parks it again
 * for twice as long (to PARK_HOLD_MAX_NS), so a lasting load costs one late
 * loop per hold. While parked, lateness says nothing: the members sleep, and
 * a sleeping member's wake-up can be slow for reasons of the scheduler's
 * (queued behind the caller on its CPU). A sleeping member wakes in
 * 15-150 us here; one that another process kept off its core begins 1-5 ms
 * late, hence PARK_LATE_NS. A user who set either variable has chosen how
 * libgomp waits: then never.
 */
#define PARK_LATE_NS     1e6
#define PARK_HOLD_MIN_NS 1e9
#define PARK_HOLD_MAX_NS 16e9
#define PARK_AGAIN_NS    10e9 /* "soon" after a release */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t  wake;
    int             want, held; /* the parked team's size asked for and held (0: none) */
    bool            started;    /* the parker thread runs */
    /* under pool.in_use: */
    double          hold, until, released; /* the current hold, its end, the last release */
} parker = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false, 0, 0, -1e300};
static int park_allowed = -1; /* under pool.in_use: -1 until the environment is read */

static void *parker_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&parker.lock);
    for (;;) {
        while (parker.want == parker.held)
            pthread_cond_wait(&parker.wake, &parker.lock);
        int want = parker.want;
        pthread_mutex_unlock(&parker.lock);
        if (want == 0) {
            omp_pause_resource_all(omp_pause_soft); /* this thread's pool: the parked team */
        } else {
            int size = 0;
#pragma omp parallel num_threads(want)
            {
                if (omp_get_thread_num() == 0)
                    size = omp_get_num_threads(); /* a body, or GCC drops the region */
            }
            (void)size;
        }
        pthread_mutex_lock(&parker.lock);
        parker.held = want;
    }
    return NULL;
}

/* Under pool.in_use, after a loop in an OpenMP team of `size` whose last member
   began `late` ns after the loop, at `now`. */
static void park_note(double late, int size, double now) {
    if (park_allowed < 0)
        park_allowed = !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
    if (!park_allowed)
        return;
    int want = parker.want;
    if (want > 0) {
        if (now >= parker.until) {
            want = 0;
            parker.released = now;
        }
    } else if (late > PARK_LATE_NS) {
        bool again = now - parker.released < PARK_AGAIN_NS;
        parker.hold = !again                            ? PARK_HOLD_MIN_NS
                      : parker.hold < PARK_HOLD_MAX_NS ? 2 * parker.hold
                                                       : PARK_HOLD_MAX_NS;
        parker.until = now + parker.hold;
        want = omp_get_num_procs() + 2 - size; /* with the caller's pool, more than the CPUs */
        if (want < 2)
            want = 2;
    }
    if (want == parker.want)
        return;
    pthread_mutex_lock(&parker.lock);
    if (!parker.started && want > 0)
        parker.started = spawn_detached(parker_main);
    if (parker.started) {
        parker.want = want;
        pthread_cond_signal(&parker.wake);
    }
    pthread_mutex_unlock(&parker.lock);
}

static void park_after_fork(void) {
    /* the child has no parker; libgomp's records keep its team, which only
       keeps the child's idle threads sleeping sooner */
    pthread_mutex_init(&parker.lock, NULL);
    pthread_cond_init(&parker.wake, NULL);
    parker.want = parker.held = 0;
    parker.started = false;
}
#else
static void park_after_fork(void) {}
#endif

/* ---- the loop in the OpenMP OpenBLAS's own team ------------------------------------ */

#if ATTN_HAVE_OPENMP
/* Run the loop in an OpenMP team if the BLAS is OpenBLAS's OpenMP build: its
   threads are the BLAS's (one libgomp pool in the process), and a BLAS call
   inside a parallel region is serial. false if it cannot take the loop. */
static bool run_in_omp_team(job *j, int nthreads) {
    if (blas_parallel() != BLAS_OPENMP || omp_in_parallel() || team_unusable)
        return false;
    double t0 = now_ns();
    if (!helpers_trusted(t0))
        return false;
    if (!team_used) {
        pthread_once(&pool_once, pool_register);
        team_used = true;
    }
    double began[ATTN__MAX_THREADS];
    int size = 1; /* the team libgomp gave */
#pragma omp parallel num_threads(nthreads)
    {
        int tid = omp_get_thread_num();
        began[tid] = now_ns();
        if (tid == 0)
            size = omp_get_num_threads();
        run_tasks(j, tid);
    }
    double late = helpers_note(t0, began, size);
#ifdef ATTN_PARK_TEAM
    park_note(late, size, now_ns());
#else
    (void)late;
#endif
    return true;
}
#else
static bool run_in_omp_team(job *j, int nthreads) { (void)j, (void)nthreads; return false; }
#endif

/* ---- the loop ------------------------------------------------------------------- */

/* The loop on attn's own pool; the caller holds pool.in_use. */
static void run_on_pool(job *j) {
    pthread_mutex_lock(&pool.lock);
    j->want = ensure_workers(j->want);
    pthread_mutex_unlock(&pool.lock);

    int icv = caller_serial_begin(); /* before any task runs */
    pthread_mutex_lock(&pool.lock);
    pool.cur = j;
    atomic_fetch_add_explicit(&pool.gen, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_tasks(j, 0);

    /* wait only for workers that joined: briefly awake, then asleep */
    double until = now_ns() + ATTN__SPIN_NS;
    while (atomic_load(&j->busy) > 0 && now_ns() < until)
        for (int i = 0; i < 64; ++i)
            cpu_relax();
    pthread_mutex_lock(&pool.lock);
    pool.cur = NULL; /* a worker waking from now on joins nothing */
    while (atomic_load(&j->busy) > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    caller_serial_end(icv);
}

void attn__parallel_for(int nthreads, int64_t ntasks, attn__task_fn *fn, void *ctx) {
    if (nthreads > ntasks)
        nthreads = (int)ntasks;
    if (nthreads <= 1) {
        run_serial(ntasks, fn, ctx);
        return;
    }
    job j = {.fn = fn, .ctx = ctx, .n = ntasks, .want = nthreads - 1};
    atomic_init(&j.next, 0);
    atomic_init(&j.busy, 0);
    pthread_mutex_lock(&pool.lock);
    if (pool.in_use) { /* another user thread's loop is running */
        pthread_mutex_unlock(&pool.lock);
        run_serial(ntasks, fn, ctx);
        return;
    }
    pool.in_use = true;
    pthread_mutex_unlock(&pool.lock);

    /* the BLAS's own threads if it lends them, else attn's */
    if (!run_on_blas_server(&j, nthreads) && !run_in_omp_team(&j, nthreads))
        run_on_pool(&j);

    pthread_mutex_lock(&pool.lock);
    pool.in_use = false;
    pthread_mutex_unlock(&pool.lock);
}
