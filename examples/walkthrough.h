/* SPDX-License-Identifier: MIT */
/* Helpers shared by the seed walkthroughs: fixture reader, check tally, views, JSON/NPY/CSV
 * output. */
#ifndef ATTN_EXAMPLES_WALKTHROUGH_H
#define ATTN_EXAMPLES_WALKTHROUGH_H

#include <attn/attn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* An attn call that must succeed: report and exit 2 otherwise. */
#define CHECK(call)                                                                            \
    do {                                                                                       \
        attn_status s_ = (call);                                                               \
        if (s_ != ATTN_OK) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, attn_strerror(s_));  \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

/* ---- checks: every one is printed; main() returns wk_result() --------------- */

static int wk_checks, wk_failed;

/* Record one check; print "[ok]" or "[FAIL]" and the formatted message. */
static inline bool wk_check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  [%s] ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    ++wk_checks;
    wk_failed += !ok;
    return ok;
}

/* The exit status: 0 when every check passed. */
static inline int wk_result(void) {
    printf("\n%d checks, %d failed: %s\n", wk_checks, wk_failed, wk_failed ? "FAILED" : "OK");
    return wk_failed ? 1 : 0;
}

/* ---- views ------------------------------------------------------------------ */

/* A row-major view of data (the shape given as a list: WK_VIEW(ATTN_F64, p, 2, 4)). */
static inline attn_view wk_view(attn_dtype dt, void *data, int ndim, const int64_t *shape) {
    attn_view v;
    CHECK(attn_view_init(&v, dt, data, ndim, shape));
    return v;
}
#define WK_VIEW(dt, data, ...)                                                                 \
    wk_view(dt, data, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),               \
            (int64_t[]){__VA_ARGS__})

/* Element k (row-major logical index) of any F32/F64 view, whatever its strides. */
static inline double wk_at(const attn_view *v, int64_t k) {
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; --d) {
        off += (k % v->shape[d]) * v->stride[d];
        k /= v->shape[d];
    }
    return v->dtype == ATTN_F32 ? (double)((const float *)v->data)[off]
                                : ((const double *)v->data)[off];
}

/* Print a 2-D view (or the last two dims of the first matrix) with printf format fmt. */
static inline void wk_print(const char *title, const attn_view *v, const char *fmt) {
    if (title)
        printf("%s\n", title);
    int64_t cols = v->shape[v->ndim - 1], rows = attn_view_numel(v) / (cols ? cols : 1);
    for (int64_t r = 0; r < rows; ++r) {
        printf("   ");
        for (int64_t c = 0; c < cols; ++c)
            printf(fmt, wk_at(v, r * cols + c));
        printf("\n");
    }
}

/* ---- the fixture format of scripts/fixture_io.py ---------------------------- */
/*
 *   # comment lines
 *   meta <key> <integer>
 *   tensor <name> <ndim> <d0> ... <d{ndim-1}>
 *   <values, row-major, %.17g, whitespace separated>
 */

typedef struct wk_tensor {
    char name[64];
    int ndim;
    int64_t shape[4], n;
    double *data;
} wk_tensor;

typedef struct wk_fixture {
    int n;
    wk_tensor t[64];
} wk_fixture;

/* Read a fixture file; NULL (and a message) when it cannot be opened or parsed. */
static inline wk_fixture *wk_load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    wk_fixture *fx = calloc(1, sizeof *fx);
    char word[64];
    bool ok = fx != NULL;
    while (ok && fscanf(f, "%63s", word) == 1) {
        if (word[0] == '#') {
            int c;
            while ((c = fgetc(f)) != '\n' && c != EOF) {
            }
        } else if (!strcmp(word, "meta")) {
            long long val;
            ok = fscanf(f, "%63s %lld", word, &val) == 2;
        } else if (!strcmp(word, "tensor") && fx->n < 64) {
            wk_tensor *t = &fx->t[fx->n++];
            ok = fscanf(f, "%63s %d", t->name, &t->ndim) == 2 && t->ndim >= 0 && t->ndim <= 4;
            t->n = 1;
            for (int k = 0; ok && k < t->ndim; ++k) {
                long long d;
                ok = fscanf(f, "%lld", &d) == 1 && d >= 0;
                t->shape[k] = d;
                t->n *= d;
            }
            t->data = ok ? malloc(sizeof(double) * (size_t)(t->n ? t->n : 1)) : NULL;
            ok = ok && t->data;
            for (int64_t i = 0; ok && i < t->n; ++i)
                ok = fscanf(f, "%lf", &t->data[i]) == 1;
        } else {
            ok = false;
        }
    }
    fclose(f);
    if (!ok) {
        fprintf(stderr, "%s: not a fixture file (near \"%s\")\n", path, word);
        if (fx)
            for (int i = 0; i < fx->n; ++i)
                free(fx->t[i].data);
        free(fx);
        return NULL;
    }
    return fx;
}

/* The data of tensor `name`, which must have n elements; exits when it is missing. */
static inline double *wk_get(const wk_fixture *fx, const char *name, int64_t n) {
    for (int i = 0; i < fx->n; ++i)
        if (!strcmp(fx->t[i].name, name)) {
            if (fx->t[i].n != n) {
                fprintf(stderr, "fixture tensor %s has %lld values, expected %lld\n", name,
                        (long long)fx->t[i].n, (long long)n);
                exit(2);
            }
            return fx->t[i].data;
        }
    fprintf(stderr, "fixture has no tensor %s\n", name);
    exit(2);
}

static inline void wk_free(wk_fixture *fx) {
    if (!fx)
        return;
    for (int i = 0; i < fx->n; ++i)
        free(fx->t[i].data);
    free(fx);
}

/* ---- files -------------------------------------------------------------------- */

/* mkdir -p; exits on failure. */
static inline void wk_mkdirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; ++p) {
        char c = *p;
        if (c == '/' || c == '\0') {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                fprintf(stderr, "cannot create %s: %s\n", buf, strerror(errno));
                exit(2);
            }
            *p = c;
        }
        if (c == '\0')
            break;
    }
}

static inline FILE *wk_open(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return f;
}

/*
 * x as Python's repr() writes a float: the fewest significant digits p that
 * read back as x, positional for decimal exponents -4..15 (with ".0" when
 * integral), scientific otherwise; NaN and +-Infinity as Python's json.
 */
static inline void wk_fmt(char *buf, size_t n, double x) {
    if (isnan(x) || isinf(x)) {
        snprintf(buf, n, isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    int p = 1;
    for (; p < 17; ++p) {
        snprintf(buf, n, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    int e = x == 0 ? 0 : atoi(strchr(buf, 'e') + 1);
    if (e < -4 || e >= 16) {
        snprintf(buf, n, "%.*e", p - 1, x);
        return;
    }
    snprintf(buf, n, "%.*f", p - 1 - e > 0 ? p - 1 - e : 0, x);
    if (!strchr(buf, '.') && strlen(buf) + 3 <= n)
        strcat(buf, ".0");
}

/* ---- JSON, written as it goes (pretty-printed, innermost arrays on one line) ---- */

typedef struct wk_json {
    FILE *f;
    int depth;
    bool first; /* no element yet at this depth */
} wk_json;

static inline void wk_json_sep(wk_json *j, const char *key) {
    fprintf(j->f, "%s\n%*s", j->first ? "" : ",", 2 * j->depth, "");
    j->first = false;
    if (key)
        fprintf(j->f, "\"%s\": ", key);
}
static inline void wk_json_open(wk_json *j, const char *key, char brace) {
    if (j->depth > 0 || !j->first)
        wk_json_sep(j, key);
    fputc(brace, j->f);
    j->depth++;
    j->first = true;
}
static inline void wk_json_close(wk_json *j, char brace) {
    j->depth--;
    if (!j->first)
        fprintf(j->f, "\n%*s", 2 * j->depth, "");
    fputc(brace, j->f);
    j->first = false;
    if (j->depth == 0)
        fputc('\n', j->f);
}
static inline void wk_json_num(wk_json *j, const char *key, double x) {
    char b[40];
    wk_fmt(b, sizeof b, x);
    wk_json_sep(j, key);
    fputs(b, j->f);
}
static inline void wk_json_int(wk_json *j, const char *key, long long x) {
    wk_json_sep(j, key);
    fprintf(j->f, "%lld", x);
}
static inline void wk_json_bool(wk_json *j, const char *key, bool x) {
    wk_json_sep(j, key);
    fputs(x ? "true" : "false", j->f);
}
static inline void wk_json_str(wk_json *j, const char *key, const char *s) {
    wk_json_sep(j, key);
    fputc('"', j->f);
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\')
            fputc('\\', j->f);
        if ((unsigned char)*s < 0x20)
            fprintf(j->f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, j->f);
    }
    fputc('"', j->f);
}

/* A view as nested lists (the NumPy/PyTorch .tolist() layout). */
static inline void wk_json_view_rec(wk_json *j, const attn_view *v, int dim, int64_t *k) {
    /* ndim <= ATTN_MAX_DIMS: the second test only tells the compiler so */
    if (dim == v->ndim - 1 || dim == ATTN_MAX_DIMS - 1) {
        fputc('[', j->f);
        for (int64_t i = 0; i < v->shape[dim]; ++i) {
            char b[40];
            wk_fmt(b, sizeof b, wk_at(v, (*k)++));
            fprintf(j->f, "%s%s", i ? ", " : "", b);
        }
        fputc(']', j->f);
        return;
    }
    fputc('[', j->f);
    for (int64_t i = 0; i < v->shape[dim]; ++i) {
        fprintf(j->f, "%s\n%*s", i ? "," : "", 2 * (j->depth + dim + 1), "");
        wk_json_view_rec(j, v, dim + 1, k);
    }
    fprintf(j->f, "\n%*s]", 2 * (j->depth + dim), "");
}
static inline void wk_json_view(wk_json *j, const char *key, const attn_view *v) {
    wk_json_sep(j, key);
    int64_t k = 0;
    wk_json_view_rec(j, v, 0, &k);
}
static inline void wk_json_shape(wk_json *j, const char *key, const attn_view *v) {
    wk_json_sep(j, key);
    fputc('[', j->f);
    for (int d = 0; d < v->ndim; ++d)
        fprintf(j->f, "%s%lld", d ? ", " : "", (long long)v->shape[d]);
    fputc(']', j->f);
}

/* The environment block: attn version, compiler, C standard, operating system. */
static inline void wk_json_environment(wk_json *j) {
    wk_json_open(j, "environment", '{');
    wk_json_str(j, "attn", attn_version_string());
#if defined(__clang__)
    wk_json_str(j, "compiler", "clang " __clang_version__);
#elif defined(__GNUC__)
    wk_json_str(j, "compiler", "gcc " __VERSION__);
#else
    wk_json_str(j, "compiler", "unknown");
#endif
    wk_json_int(j, "c_standard", __STDC_VERSION__);
    FILE *p = popen("uname -srm 2>/dev/null", "r");
    char line[256] = "";
    if (p) {
        if (fgets(line, sizeof line, p))
            line[strcspn(line, "\n")] = '\0';
        pclose(p);
    }
    wk_json_str(j, "platform", line);
    const char *core = getenv("OPENBLAS_CORETYPE");
    wk_json_str(j, "OPENBLAS_CORETYPE", core ? core : "");
    wk_json_close(j, '}');
}

#endif /* ATTN_EXAMPLES_WALKTHROUGH_H */
