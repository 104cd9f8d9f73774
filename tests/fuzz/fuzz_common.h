/* SPDX-License-Identifier: MIT */
/* libFuzzer harness helpers: a byte reader, a poisoned arena for views, the contract checks. */
#ifndef ATTN_FUZZ_COMMON_H
#define ATTN_FUZZ_COMMON_H

#include <attn/attn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define FZ_ASAN 1
#endif
#endif
#ifndef FZ_ASAN
#define ASAN_POISON_MEMORY_REGION(p, n)   ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

/*
 * A failed contract is a crash: libFuzzer saves the input, CI fails. The
 * message says which promise broke (status, untouched output, reference).
 */
#define FZ_REQUIRE(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz contract violated at %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* The view, for crash reports. */
static inline void fz_print(const char *name, const attn_view *v) {
    fprintf(stderr, "%s: dtype %d ndim %d data %p shape", name, (int)v->dtype, v->ndim,
            v->data);
    for (int k = 0; k < v->ndim && k < ATTN_MAX_DIMS; ++k)
        fprintf(stderr, " %lld", (long long)v->shape[k]);
    fprintf(stderr, " stride");
    for (int k = 0; k < v->ndim && k < ATTN_MAX_DIMS; ++k)
        fprintf(stderr, " %lld", (long long)v->stride[k]);
    fputc('\n', stderr);
}

/* ---- reading decisions from the input bytes --------------------------------- */

typedef struct fz {
    const uint8_t *p;
    size_t n;
} fz;

/* One byte; 0 once the input is exhausted (so every input decodes to something). */
static inline uint8_t fz_u8(fz *f) {
    if (f->n == 0)
        return 0;
    f->n--;
    return *f->p++;
}
static inline uint32_t fz_u32(fz *f) {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i)
        x = x << 8 | fz_u8(f);
    return x;
}
/* An integer in [0, n). */
static inline uint32_t fz_below(fz *f, uint32_t n) { return n ? fz_u8(f) % n : 0; }
static inline bool fz_bool(fz *f) { return fz_u8(f) & 1; }

/* A dtype: mostly the call's, sometimes the other float type, U8 or no dtype at all. */
static inline attn_dtype fz_dtype(fz *f, attn_dtype main) {
    uint8_t c = fz_u8(f);
    if (c < 244)
        return main;
    return c < 250   ? (main == ATTN_F32 ? ATTN_F64 : ATTN_F32)
           : c < 253 ? ATTN_U8
                     : (attn_dtype)0;
}

/*
 * An extent: mostly small (0..6), sometimes medium, rarely one of the values
 * that break naive arithmetic (INT_MAX +- 1, 2^32, 2^62, INT64_MAX, negative).
 */
static inline int64_t fz_extent(fz *f) {
    static const int64_t hostile[] = {INT64_C(2147483647),
                                      INT64_C(2147483648),
                                      INT64_C(4294967296),
                                      INT64_C(1) << 40,
                                      INT64_C(1) << 62,
                                      INT64_MAX,
                                      -1,
                                      INT64_MIN};
    uint8_t c = fz_u8(f);
    if (c < 200)
        return c % 7;
    if (c < 248)
        return 7 + c % 26;
    return hostile[fz_u8(f) % (sizeof hostile / sizeof *hostile)];
}

/* ---- the arena ---------------------------------------------------------------- */

/*
 * Every view of a call points into one arena of FZ_ELEMS doubles, so views
 * can overlap and alias like real caller memory. Before a call, everything
 * but the spans of the arguments is poisoned for ASan: any read or write
 * outside an argument's [lo, hi) byte range is reported at once. FZ_GUARD
 * bytes of permanent guard sit on both sides.
 */
#define FZ_ELEMS 8192
#define FZ_GUARD 256
typedef struct fz_arena {
    unsigned char raw[FZ_GUARD + FZ_ELEMS * 8 + FZ_GUARD];
    unsigned char snap[FZ_ELEMS * 8];
    unsigned char wmask[FZ_ELEMS * 8]; /* bytes an output may change */
} fz_arena;

static fz_arena fz_A;
static inline unsigned char *fz_mem(void) { return fz_A.raw + FZ_GUARD; }
static inline size_t fz_bytes(void) { return (size_t)FZ_ELEMS * 8; }

/* Element size by dtype, computed independently of the library. */
static inline int64_t fz_es(attn_dtype dt) {
    return dt == ATTN_F64 ? 8 : dt == ATTN_F32 ? 4 : dt == ATTN_U8 ? 1 : 0;
}

/*
 * Byte range [lo, hi) of v relative to the arena start, in 128-bit arithmetic
 * (each axis clamped to +-2^100 bytes, far beyond any arena) so hostile
 * shapes cannot fool it. false when v is empty or has no data.
 */
static inline bool fz_span(const attn_view *v, __int128 *lo, __int128 *hi) {
    const __int128 cap = (__int128)1 << 100;
    __int128 neg = 0, pos = 0;
    if (!v->data || v->ndim < 1 || v->ndim > ATTN_MAX_DIMS)
        return false;
    for (int k = 0; k < v->ndim; ++k) {
        if (v->shape[k] == 0)
            return false;
        __int128 e = (__int128)v->stride[k] * ((__int128)v->shape[k] - 1);
        e = e > cap ? cap : e < -cap ? -cap : e;
        if (e < 0)
            neg += e;
        else
            pos += e;
    }
    __int128 es = fz_es(v->dtype);
    __int128 base = (__int128)((uintptr_t)v->data - (uintptr_t)fz_mem());
    if ((uintptr_t)v->data < (uintptr_t)fz_mem())
        base = -(__int128)((uintptr_t)fz_mem() - (uintptr_t)v->data);
    *lo = base + neg * es;
    *hi = base + (pos + 1) * es;
    return true;
}

/* Wrapping product (the harness's own arithmetic must not be UB on hostile extents). */
static inline int64_t fz_mulw(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)b);
}

/* Element count of a valid view (0 for an empty one, whatever its other extents). */
static inline int64_t fz_numel(const attn_view *v) {
    int64_t n = 1;
    for (int k = 0; k < v->ndim; ++k)
        if (v->shape[k] == 0)
            return 0;
    for (int k = 0; k < v->ndim; ++k)
        n *= v->shape[k];
    return n;
}

/* True when v is well formed by our own reading of view.h's rules and lies in the arena. */
static inline bool fz_in_arena(const attn_view *v) {
    if (v->ndim < 1 || v->ndim > ATTN_MAX_DIMS || fz_es(v->dtype) == 0)
        return false;
    for (int k = 0; k < v->ndim; ++k)
        if (v->shape[k] < 0)
            return false;
    __int128 lo, hi;
    if (!fz_span(v, &lo, &hi))
        return true;
    return lo >= 0 && hi <= (__int128)fz_bytes();
}

/* Intersection of two views' byte ranges (the documented aliasing rule). */
static inline bool fz_overlap(const attn_view *a, const attn_view *b) {
    __int128 al, ah, bl, bh;
    if (!fz_span(a, &al, &ah) || !fz_span(b, &bl, &bh))
        return false;
    return al < bh && bl < ah;
}

/*
 * A view into the arena decoded from the input: dtype, ndim, extents and a
 * stride mode (contiguous, transposed, padded, negative, zero, overlapping,
 * or raw hostile strides), at an element offset. Returns false when the view
 * it decodes is valid but not inside the arena (the caller skips the input:
 * the library may legitimately read every element of a valid view). Invalid
 * views are returned as they are: the library must reject them.
 */
static inline bool fz_view(fz *f, attn_dtype dt, int ndim, const int64_t *shape_or_null,
                           attn_view *v) {
    memset(v, 0, sizeof *v);
    v->dtype = dt;
    v->ndim = ndim; /* may be 0 or 5: the library must refuse it */
    ndim = ndim < 1 ? 1 : ndim > ATTN_MAX_DIMS ? ATTN_MAX_DIMS : ndim;
    int64_t shape[ATTN_MAX_DIMS], stride[ATTN_MAX_DIMS];
    for (int k = 0; k < ndim; ++k)
        shape[k] = shape_or_null ? shape_or_null[k] : fz_extent(f);
    uint8_t mode = fz_u8(f) % 16;
    int64_t s = 1;
    switch (mode) {
    default: /* contiguous row-major (most common) */
        for (int k = ndim - 1; k >= 0; --k) {
            stride[k] = s;
            s = fz_mulw(s, shape[k] > 1 ? shape[k] : 1);
        }
        break;
    case 9: /* column-major */
        for (int k = 0; k < ndim; ++k) {
            stride[k] = s;
            s = fz_mulw(s, shape[k] > 1 ? shape[k] : 1);
        }
        break;
    case 10: /* padded rows */
        for (int k = ndim - 1; k >= 0; --k) {
            stride[k] = s;
            s = (int64_t)((uint64_t)fz_mulw(s, shape[k] > 1 ? shape[k] : 1) +
                          (k == ndim - 1 ? 1 + fz_below(f, 3) : 0));
        }
        break;
    case 11: /* negative last-but-one axis */
    case 12: /* negative everything */
        for (int k = ndim - 1; k >= 0; --k) {
            stride[k] = s;
            s = fz_mulw(s, shape[k] > 1 ? shape[k] : 1);
        }
        for (int k = 0; k < ndim; ++k)
            if ((mode == 12 || k == ndim - 2 || ndim == 1) && stride[k] != INT64_MIN)
                stride[k] = -stride[k];
        break;
    case 13: /* one axis broadcast (stride 0) */
        for (int k = ndim - 1; k >= 0; --k) {
            stride[k] = s;
            s = fz_mulw(s, shape[k] > 1 ? shape[k] : 1);
        }
        stride[fz_below(f, (uint32_t)ndim)] = 0;
        break;
    case 14: /* overlapping rows: every stride small */
        for (int k = 0; k < ndim; ++k)
            stride[k] = (int64_t)fz_below(f, 3);
        break;
    case 15: /* raw strides from the input, hostile values included */
        for (int k = 0; k < ndim; ++k) {
            uint8_t c = fz_u8(f);
            stride[k] =
                c < 240 ? (int64_t)(int8_t)c : (c & 1 ? INT64_MAX / (c - 230) : INT64_MIN + c);
        }
        break;
    }
    for (int k = 0; k < ndim; ++k) {
        v->shape[k] = shape[k];
        v->stride[k] = stride[k];
    }
    /* place the view: element offset from the input, then shift negative spans inside */
    int64_t es = fz_es(dt) ? fz_es(dt) : 1;
    int64_t elems = (int64_t)fz_bytes() / es;
    int64_t off = (int64_t)(fz_u32(f) % (uint32_t)elems);
    v->data = fz_mem() + off * es;
    if (fz_u8(f) == 255)
        v->data = NULL; /* must be EINVAL unless the view is empty */
    if (!v->data || fz_es(dt) == 0)
        return true;
    __int128 lo, hi;
    if (!fz_span(v, &lo, &hi))
        return true;
    for (int k = 0; k < ndim; ++k)
        if (shape[k] < 0)
            return true;
    if (v->ndim != ndim)
        return true;
    /* move the view so that it starts inside the arena, if it can fit at all */
    if (hi - lo > (__int128)fz_bytes())
        return attn_view_check(v) != ATTN_OK;
    if (lo < 0)
        v->data = (unsigned char *)v->data + (size_t)(-lo + es - 1) / (size_t)es * (size_t)es;
    else if (hi > (__int128)fz_bytes()) {
        __int128 back = (hi - (__int128)fz_bytes() + es - 1) / es * es;
        v->data = (unsigned char *)v->data - (size_t)back;
    }
    return fz_in_arena(v) || attn_view_check(v) != ATTN_OK;
}

/* Fill the whole arena with small dyadic values of dtype dt (exact sums in f32 and f64). */
static inline void fz_fill(fz *f, attn_dtype dt) {
    uint64_t s = fz_u32(f) | (uint64_t)1 << 40;
    unsigned char *m = fz_mem();
    for (size_t i = 0; i < fz_bytes() / 8; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double x = (double)((int)(s >> 60) - 8) / 8.0; /* -1 .. 0.875 in steps of 1/8 */
        if (dt == ATTN_F32) {
            float y[2] = {(float)x, (float)(x * -0.5)};
            memcpy(m + 8 * i, y, 8);
        } else {
            memcpy(m + 8 * i, &x, 8);
        }
    }
}

/* Before a call: snapshot the arena, poison everything outside the argument spans. */
static inline void fz_arm(const attn_view *const *args, int n) {
    memcpy(fz_A.snap, fz_mem(), fz_bytes());
    ASAN_POISON_MEMORY_REGION(fz_A.raw, sizeof fz_A.raw);
    for (int i = 0; i < n; ++i) {
        __int128 lo, hi;
        if (!args[i] || !fz_in_arena(args[i]) || !fz_span(args[i], &lo, &hi) || !args[i]->data)
            continue;
        lo &= ~(__int128)7; /* ASan granules: unpoison from the granule start */
        ASAN_UNPOISON_MEMORY_REGION(fz_mem() + (size_t)lo, (size_t)(hi - lo));
    }
}

/* After a call: everything addressable again. */
static inline void fz_disarm(void) { ASAN_UNPOISON_MEMORY_REGION(fz_A.raw, sizeof fz_A.raw); }

/* Mark the bytes of every element of output o as writable; false if o hits a byte twice. */
static inline bool fz_mark(const attn_view *o) {
    if (!o)
        return true;
    int64_t n = fz_numel(o), idx[ATTN_MAX_DIMS] = {0}, es = fz_es(o->dtype);
    for (int64_t e = 0; e < n; ++e) {
        int64_t off = 0;
        for (int k = 0; k < o->ndim; ++k)
            off += idx[k] * o->stride[k];
        size_t b = (size_t)((unsigned char *)o->data - fz_mem()) + (size_t)(off * es);
        for (int64_t j = 0; j < es; ++j) {
            if (fz_A.wmask[b + (size_t)j])
                return false;
            fz_A.wmask[b + (size_t)j] = 1;
        }
        for (int k = o->ndim - 1; k >= 0; --k) {
            if (++idx[k] < o->shape[k])
                break;
            idx[k] = 0;
        }
    }
    return true;
}

/*
 * The status contract: non-OK leaves the arena exactly as it was; OK changes
 * nothing but the elements of the outputs, and no output overlaps itself.
 */
static inline void fz_check_untouched(attn_status st, const attn_view *const *outs, int n,
                                      const char *what) {
    if (st != ATTN_OK) {
        FZ_REQUIRE(memcmp(fz_A.snap, fz_mem(), fz_bytes()) == 0,
                   "%s returned %s but wrote to its arguments", what, attn_status_name(st));
        return;
    }
    memset(fz_A.wmask, 0, fz_bytes());
    for (int i = 0; i < n; ++i)
        FZ_REQUIRE(fz_mark(outs[i]),
                   "%s accepted an output that overlaps itself or another "
                   "output",
                   what);
    unsigned char *m = fz_mem();
    for (size_t b = 0; b < fz_bytes(); ++b)
        FZ_REQUIRE(fz_A.wmask[b] || m[b] == fz_A.snap[b],
                   "%s wrote byte %zu, outside every output element", what, b);
}

/* Workspace from the input: exact, one byte short, convenience NULL/0, or generous. */
typedef struct fz_work {
    void *ptr;
    size_t size;
    bool short_by_one; /* the call must then fail */
} fz_work;

#define FZ_WORK_MAX ((size_t)64 << 20) /* never allocate more for a fuzz call */

/* Returns false when the request is too large to test here (the caller skips). */
static inline bool fz_work_get(fz *f, size_t need, fz_work *w) {
    memset(w, 0, sizeof *w);
    uint8_t mode = fz_u8(f) % 8;
    if (need > FZ_WORK_MAX)
        return mode == 1 && (w->size = need - 1, w->short_by_one = true, w->ptr = malloc(1)) !=
                                NULL; /* too small: never touched */
    if (mode == 0 && need > 0)
        return true; /* NULL/0: the library allocates `need` itself */
    if (mode == 1 && need > 0) {
        w->size = need - 1;
        w->short_by_one = true;
    } else {
        w->size = need + (mode == 2 ? 64 : 0);
    }
    w->ptr = malloc(w->size ? w->size : 1); /* exact size: ASan catches any overrun */
    return w->ptr != NULL;
}
static inline void fz_work_free(fz_work *w) { free(w->ptr); }

/* ---- comparing with a reference ---------------------------------------------- */

/* Read element idx of a float view as double. */
static inline double fz_get(const attn_view *v, const int64_t *idx) {
    int64_t off = 0;
    for (int k = 0; k < v->ndim; ++k)
        off += idx[k] * v->stride[k];
    const unsigned char *p = (const unsigned char *)v->data + off * fz_es(v->dtype);
    if (v->dtype == ATTN_F64) {
        double x;
        memcpy(&x, p, 8);
        return x;
    }
    if (v->dtype == ATTN_F32) {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    return *p;
}

/* |got - want| <= atol + rtol |want| element by element (NaN only where want is NaN). */
static inline void fz_check_close(const attn_view *got, const double *want, double rtol,
                                  double atol, const char *what) {
    int64_t n = fz_numel(got), idx[ATTN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; ++e) {
        double g = fz_get(got, idx), w = want[e];
        bool ok =
            isnan(w) ? isnan(g) : (isinf(w) ? g == w : fabs(g - w) <= atol + rtol * fabs(w));
        FZ_REQUIRE(ok, "%s: element %lld got %.17g want %.17g", what, (long long)e, g, w);
        for (int k = got->ndim - 1; k >= 0; --k) {
            if (++idx[k] < got->shape[k])
                break;
            idx[k] = 0;
        }
    }
}

/* The elements of a float view (any strides) as a row-major double array (n + 1 long,
 * so an empty view still gets a buffer); the caller frees it. */
static inline double *fz_doubles(const attn_view *v) {
    int64_t n = fz_numel(v), idx[ATTN_MAX_DIMS] = {0};
    double *d = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t e = 0; e < n; ++e) {
        d[e] = fz_get(v, idx);
        for (int k = v->ndim - 1; k >= 0; --k) {
            if (++idx[k] < v->shape[k])
                break;
            idx[k] = 0;
        }
    }
    return d;
}

/* NumPy broadcasting of a mask view (at most 4 dims) to the 4-D shape `full`. */
static inline bool fz_broadcasts(const attn_view *m, const int64_t *full) {
    if (m->ndim > 4)
        return false;
    for (int k = 0; k < m->ndim; ++k) {
        int64_t e = m->shape[k], want = full[4 - m->ndim + k];
        if (e != want && e != 1)
            return false;
    }
    return true;
}

static inline bool fz_same_shape(const attn_view *v, int ndim, const int64_t *shape) {
    if (v->ndim != ndim)
        return false;
    for (int k = 0; k < ndim; ++k)
        if (v->shape[k] != shape[k])
            return false;
    return true;
}

/* A contiguous F64 view over `buf` with the shape of v (for the references' outputs). */
static inline attn_view fz_f64_like(const attn_view *v, double *buf) {
    attn_view w = {.data = buf, .dtype = ATTN_F64, .ndim = v->ndim};
    int64_t s = 1;
    for (int k = v->ndim - 1; k >= 0; --k) {
        w.shape[k] = v->shape[k];
        w.stride[k] = s;
        s = fz_mulw(s, v->shape[k] > 1 ? v->shape[k] : 1); /* empty views: anything */
    }
    return w;
}

#endif
