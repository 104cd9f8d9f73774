/* SPDX-License-Identifier: MIT */
/* Shared helpers for the Check suites: deterministic data, strided buffers, comparisons. */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H

#include <attn/attn.h>
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a tiny deterministic generator, independent of the library's. */
static inline uint64_t tu_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform in [-1, 1). */
static inline double tu_uniform(uint64_t *s) {
    return (double)(tu_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* Element address of a view at multi-index idx, computed independently of the library. */
static inline void *tu_at(const attn_view *v, const int64_t *idx) {
    int64_t off = 0;
    for (int k = 0; k < v->ndim; ++k)
        off += idx[k] * v->stride[k];
    size_t es = v->dtype == ATTN_F64 ? 8 : v->dtype == ATTN_F32 ? 4 : 1;
    return (char *)v->data + off * (int64_t)es;
}
static inline double tu_get(const attn_view *v, const int64_t *idx) {
    void *p = tu_at(v, idx);
    if (v->dtype == ATTN_F64) return *(double *)p;
    if (v->dtype == ATTN_F32) return *(float *)p;
    return *(uint8_t *)p;
}
static inline void tu_set(const attn_view *v, const int64_t *idx, double x) {
    void *p = tu_at(v, idx);
    if (v->dtype == ATTN_F64) *(double *)p = x;
    else if (v->dtype == ATTN_F32) *(float *)p = (float)x;
    else *(uint8_t *)p = (uint8_t)x;
}
/* Advance a row-major multi-index over shape; false when done. */
static inline int tu_inc(int64_t *idx, const int64_t *shape, int ndim) {
    for (int k = ndim - 1; k >= 0; --k) {
        if (++idx[k] < shape[k]) return 1;
        idx[k] = 0;
    }
    return 0;
}
static inline int64_t tu_numel(const attn_view *v) {
    int64_t n = 1;
    for (int k = 0; k < v->ndim; ++k) n *= v->shape[k];
    return n;
}
/* Fill every element of v with uniform values in [-scale, scale). */
static inline void tu_fill(const attn_view *v, uint64_t *seed, double scale) {
    if (tu_numel(v) == 0) return;
    int64_t idx[ATTN_MAX_DIMS] = {0};
    do tu_set(v, idx, scale * tu_uniform(seed));
    while (tu_inc(idx, v->shape, v->ndim));
}

/*
 * Compare view got against view want (same shape): |g - w| <= atol + rtol |w|
 * for every element; on failure report the worst element and its index.
 */
static inline void tu_check_close(const attn_view *got, const attn_view *want, double rtol,
                                  double atol, const char *what) {
    ck_assert_int_eq(got->ndim, want->ndim);
    for (int k = 0; k < got->ndim; ++k) ck_assert_int_eq(got->shape[k], want->shape[k]);
    if (tu_numel(got) == 0) return;
    int64_t idx[ATTN_MAX_DIMS] = {0}, worst[ATTN_MAX_DIMS] = {0};
    double worst_excess = -1, wg = 0, ww = 0;
    int bad = 0;
    do {
        double g = tu_get(got, idx), w = tu_get(want, idx);
        double err = fabs(g - w), tol = atol + rtol * fabs(w);
        int nonfinite_ok = (isnan(g) && isnan(w)) || (isinf(g) && g == w);
        double excess = nonfinite_ok ? -1 : (isnan(err) ? INFINITY : err - tol);
        if (excess > worst_excess) {
            worst_excess = excess; wg = g; ww = w;
            memcpy(worst, idx, sizeof worst);
        }
        if (excess > 0) bad = 1;
    } while (tu_inc(idx, got->shape, got->ndim));
    ck_assert_msg(!bad, "%s: worst element [%lld,%lld,%lld,%lld] got %.17g want %.17g "
                  "(|err| %.3g, rtol %.1g atol %.1g)", what, (long long)worst[0],
                  (long long)worst[1], (long long)worst[2], (long long)worst[3], wg, ww,
                  fabs(wg - ww), rtol, atol);
}

/*
 * Checks for hot loops. Every passing ck_assert sends Check's runner a location
 * record (a malloc and a write, unpacked by the parent); one per point or per
 * byte made test_vmath take over ten minutes under ASan, whose full unwinding
 * makes every malloc slow. These report only a failure.
 */
#define TU_REQUIRE(cond)                                                                       \
    do {                                                                                       \
        if (!(cond))                                                                           \
            ck_abort_msg("%s:%d: %s", __FILE__, __LINE__, #cond);                              \
    } while (0)
#define TU_REQUIRE_OK(call)                                                                    \
    do {                                                                                       \
        attn_status tu_st_ = (call);                                                           \
        if (tu_st_ != ATTN_OK)                                                                 \
            ck_abort_msg("%s: %s", #call, attn_status_name(tu_st_));                           \
    } while (0)

/* A sweep's first failing point, noted in the loop and asserted once after it. */
typedef struct {
    bool bad;
    char msg[256];
} tu_first_fail;
#define TU_NOTE_FAIL(ff, cond, ...)                                                            \
    do {                                                                                       \
        if (!(cond) && !(ff)->bad) {                                                           \
            (ff)->bad = true;                                                                  \
            snprintf((ff)->msg, sizeof(ff)->msg, __VA_ARGS__);                                 \
        }                                                                                      \
    } while (0)
#define TU_ASSERT_NO_FAIL(ff) ck_assert_msg(!(ff)->bad, "%s", (ff)->msg)

/* Tolerances per dtype used across the suites. */
#define TU_RTOL(dt) ((dt) == ATTN_F64 ? 1e-12 : 1e-5)
#define TU_ATOL(dt) ((dt) == ATTN_F64 ? 1e-13 : 1e-6)

/* Run all suites with Check's environment-driven output (TAP under meson). */
static inline int tu_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
