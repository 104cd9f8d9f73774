/* SPDX-License-Identifier: MIT */
/*
 * What a benchmark figure was measured with: attn's version, the BLAS
 * (OpenBLAS's config string, kernel and threading, when the BLAS is
 * OpenBLAS), the CPU, the thread counts, every OMP_* / OPENBLAS_* / GOMP_*
 * variable of the environment, and the date. Shared by the programs in bench/.
 *
 * The OpenBLAS queries are weak references: with another BLAS they are NULL
 * and the fields read "unknown", so the benchmarks still link.
 */
#ifndef ATTN_BENCH_ENV_H
#define ATTN_BENCH_ENV_H

#include <attn/attn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char *openblas_get_config(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));
extern int openblas_get_parallel(void) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));
extern int omp_get_max_threads(void) __attribute__((weak)); /* libgomp, through libattn */
extern char **environ;

typedef struct bench_env {
    char attn[32], blas_config[160], blas_core[48], blas_threading[16], cpu[128], date[32];
    int  blas_threads, omp_threads, cores;
    char vars[1024]; /* "NAME=value NAME=value", or "(none)" */
} bench_env;

static inline void bench_env_copy(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src && *src ? src : "unknown");
    for (char *p = dst; *p; ++p) /* one line, no quotes: safe in CSV and JSON */
        if (*p == '\n' || *p == '"' || *p == '\\' || *p == ',')
            *p = ' ';
    for (size_t len = strlen(dst); len && dst[len - 1] == ' '; --len)
        dst[len - 1] = 0;
}

static inline void bench_env_collect(bench_env *e) {
    memset(e, 0, sizeof *e);
    bench_env_copy(e->attn, sizeof e->attn, ATTN_VERSION_STRING);
    bench_env_copy(e->blas_config, sizeof e->blas_config,
                   openblas_get_config ? openblas_get_config() : NULL);
    bench_env_copy(e->blas_core, sizeof e->blas_core,
                   openblas_get_corename ? openblas_get_corename() : NULL);
    int par = openblas_get_parallel ? openblas_get_parallel() : -1;
    bench_env_copy(e->blas_threading, sizeof e->blas_threading,
                   par == 0 ? "serial" : par == 1 ? "pthread" : par == 2 ? "openmp" : NULL);
    e->blas_threads = openblas_get_num_threads ? openblas_get_num_threads() : 0;
    e->omp_threads = omp_get_max_threads ? omp_get_max_threads() : 1;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    e->cores = c > 0 ? (int)c : 1;
    char line[256], *cpu = NULL;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && (cpu = strchr(line, ':'))) {
            cpu += 1 + (cpu[1] == ' ');
            break;
        }
    bench_env_copy(e->cpu, sizeof e->cpu, cpu);
    if (f)
        fclose(f);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(e->date, sizeof e->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    size_t used = 0;
    for (char **v = environ; v && *v; ++v) {
        if (strncmp(*v, "OMP_", 4) && strncmp(*v, "OPENBLAS_", 9) && strncmp(*v, "GOMP_", 5))
            continue;
        char one[256];
        bench_env_copy(one, sizeof one, *v);
        int k = snprintf(e->vars + used, sizeof e->vars - used, "%s%s", used ? " " : "", one);
        if (k < 0 || (size_t)k >= sizeof e->vars - used)
            break;
        used += (size_t)k;
    }
    if (!used)
        snprintf(e->vars, sizeof e->vars, "(none)");
}

/* The human-readable header: three lines, each starting with `prefix`. */
static inline void bench_env_print(FILE *f, const char *prefix, const bench_env *e) {
    fprintf(f, "%sattn %s; BLAS: %s (kernel %s, %s threading, %d threads); %s\n", prefix,
            e->attn, e->blas_config, e->blas_core, e->blas_threading, e->blas_threads, e->date);
    fprintf(f, "%sCPU: %s, %d cores online; OpenMP team %d\n", prefix, e->cpu, e->cores,
            e->omp_threads);
    fprintf(f, "%senvironment: %s\n", prefix, e->vars);
}

/*
 * OpenBLAS picks its kernels from the CPU model; an OpenBLAS older than the
 * CPU does not know the model and falls back to old SSE3 kernels (0.3.21 on a
 * family 6 model 207 Xeon: "Prescott", a fifth of its AVX-512 sgemm). Say so:
 * the user may choose the kernels with OPENBLAS_CORETYPE in their own
 * environment. Nothing here sets it.
 */
static inline void bench_env_kernel_note(FILE *f, const char *prefix, const bench_env *e) {
    static const char *const old[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                      "Katmai", "Northwood", "Banias", NULL};
    bool is_old = false;
    for (int i = 0; old[i]; ++i)
        is_old = is_old || !strcmp(e->blas_core, old[i]);
    if (!is_old)
        return;
    char line[4096];
    bool avx2 = false, avx512 = false;
    FILE *c = fopen("/proc/cpuinfo", "r");
    while (c && fgets(line, sizeof line, c))
        if (!strncmp(line, "flags", 5)) {
            avx2 = strstr(line, " avx2") != NULL;
            avx512 = strstr(line, " avx512f") != NULL;
            break;
        }
    if (c)
        fclose(c);
    if (!avx2)
        return;
    fprintf(f, "%sNOTE: OpenBLAS chose its %s kernels on a CPU with %s: this OpenBLAS does not "
               "know the CPU model.\n%s      Every BLAS figure below is that of the fallback "
               "kernels; setting OPENBLAS_CORETYPE to %s in your\n%s      own environment (or a newer "
               "OpenBLAS) selects the machine's own (docs/guide.md \"The BLAS's kernels\").\n",
            prefix, e->blas_core, avx512 ? "AVX-512" : "AVX2", prefix,
            avx512 ? "SkylakeX" : "Haswell", prefix);
}

/* The same as JSON members (no braces), for a benchmark's "environment" object. */
static inline void bench_env_json(FILE *f, const bench_env *e) {
    fprintf(f,
            "\"attn_version\": \"%s\", \"blas_config\": \"%s\", \"blas_corename\": \"%s\", "
            "\"blas_threading\": \"%s\", \"blas_threads\": %d, \"omp_threads\": %d, "
            "\"cores\": %d, \"cpu\": \"%s\", \"env\": \"%s\", \"date\": \"%s\"",
            e->attn, e->blas_config, e->blas_core, e->blas_threading, e->blas_threads,
            e->omp_threads, e->cores, e->cpu, e->vars, e->date);
}

#endif
