/* SPDX-License-Identifier: MIT */
/* Private helpers shared by attn's sources; never installed. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "attn/attn.h"

#define ATTN_HIDDEN __attribute__((visibility("hidden")))
/*
 * The few internals libattn_mpi calls (the sdpa plan and its trusted runs): exported
 * from libattn.so, listed by name in src/attn.map, so that ring attention uses the
 * one copy of attn's internals in the process. Not API: libattn_mpi is built with
 * the libattn of the same release and needs exactly that one.
 */
#define ATTN_FOR_MPI __attribute__((visibility("default")))

/* Propagate a non-OK status. */
#define ATTN_TRY(expr)                     \
    do {                                   \
        attn_status attn_try_s_ = (expr);  \
        if (attn_try_s_ != ATTN_OK)        \
            return attn_try_s_;            \
    } while (0)

/* Overflow-checked arithmetic: return false when the result overflows. */
static inline bool attn__mul_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool attn__add_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_add_overflow(a, b, r);
}
static inline bool attn__mul_sz(size_t a, size_t b, size_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool attn__add_sz(size_t a, size_t b, size_t *r) {
    return !__builtin_add_overflow(a, b, r);
}

/* Round n up to a multiple of 64 bytes (workspace carving keeps alignment). */
static inline size_t attn__align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

/*
 * The alignment a caller workspace must have when the call uses it: that of
 * double and int64_t, the widest types carved from it (every region starts a
 * multiple of 64 bytes from the base). malloc's memory always has it.
 */
#define ATTN__WORK_ALIGN 8u

/*
 * Convenience workspace: when (*work, *size) is (NULL, 0) and need > 0,
 * allocate 64-byte-aligned memory and set *owned (caller frees with
 * free(*owned) after the call). Else check the size (ATTN_EWORKSPACE), then
 * the alignment when need > 0 (ATTN_EINVAL). Overlap with the arguments is
 * the caller's next check (attn__work_overlaps, ATTN_EALIAS).
 */
ATTN_HIDDEN attn_status attn__work_acquire(void **work, size_t *size, size_t need,
                                           void **owned);

/* Element address of v at multi-index idx (ndim entries). */
static inline void *attn__elem(const attn_view *v, const int64_t *idx) {
    int64_t off = 0;
    for (int k = 0; k < v->ndim; ++k)
        off += idx[k] * v->stride[k];
    return (char *)v->data + off * (int64_t)attn_dtype_size(v->dtype);
}

/* Check a view and require a given ndim and a float dtype (F32/F64). */
ATTN_HIDDEN attn_status attn__check_float(const attn_view *v, int ndim);

/*
 * Conservative self-overlap test for outputs: sorting axes by |stride|, each
 * axis must step past everything the inner axes span. Views that fail (stride
 * 0, or interleaved layouts) are rejected as outputs with ATTN_ESTRIDE.
 */
ATTN_HIDDEN bool attn__self_overlaps(const attn_view *v);

/*
 * ---- Validation, once, at the public door (src/core/check.c) -------------
 * The one validator per argument kind; every entry point that takes such an
 * argument calls it, so the same misuse gives the same status everywhere.
 * Order of checks in every function (docs/reliability.md): NULL and malformed
 * views, dtype, shape and range, then aliasing, then workspace.
 */

/* v present and well-formed, of dtype dt, exactly of the given shape. */
ATTN_HIDDEN attn_status attn__want(const attn_view *v, attn_dtype dt, int ndim,
                                   const int64_t *shape);
/* An optional view: NULL is fine, else as attn__want. */
ATTN_HIDDEN attn_status attn__want_opt(const attn_view *v, attn_dtype dt, int ndim,
                                       const int64_t *shape);
/*
 * Aliasing of a whole call: every output (NULL skipped) must not overlap
 * itself (ATTN_ESTRIDE), any input, or any other output (ATTN_EALIAS; the same
 * view object in two output slots is two outputs). At most ATTN__MAX_ALIAS views.
 */
#define ATTN__MAX_ALIAS 128
ATTN_HIDDEN attn_status attn__check_aliasing(const attn_view *const *outs, int nout,
                                             const attn_view *const *ins, int nin);
/* True when the caller's workspace [work, work + bytes) overlaps one of the n views. */
ATTN_HIDDEN bool attn__work_overlaps(const void *work, size_t bytes,
                                     const attn_view *const *views, int n);

/* The shapes of an attention's q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv). */
typedef struct attn__qkv {
    attn_dtype dt;
    int64_t B, H, Hkv, Tq, Tk, D, Dv;
} attn__qkv;
/*
 * q, k, v of every attention (sdpa, its backward, decode, ring): present
 * (ATTN_EINVAL), well-formed, one float dtype (ATTN_EDTYPE), 4-D with the
 * shapes above and H % Hkv == 0 (Hkv == 0 only with H == 0) (ATTN_ESHAPE).
 */
ATTN_FOR_MPI attn_status attn__check_qkv(const attn_view *q, const attn_view *k,
                                        const attn_view *v, attn__qkv *d);

/* What one view argument must be: present if required, ndim dims of the given extents. */
typedef struct attn__spec {
    const attn_view *v;
    bool required;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
} attn__spec;
/*
 * n views of one call, each against its spec and the call's dtype dt, in
 * the documented order over all of them: a required view NULL (ATTN_EINVAL),
 * malformed views, dtypes (ATTN_EDTYPE), shapes (ATTN_ESHAPE).
 */
ATTN_FOR_MPI attn_status attn__check_views(attn_dtype dt, const attn__spec *s, int n);
/* Outputs: attn__check_views, then attn__check_aliasing against each other and ins. */
ATTN_FOR_MPI attn_status attn__check_outputs(attn_dtype dt, const attn__spec *outs, int nout,
                                            const attn_view *const *ins, int nin);

/*
 * A mask (keep: U8; bias: the call's dtype) m, well-formed, of dtype dt
 * (ATTN_EDTYPE), broadcastable to ndim dims of the given shape (ATTN_ESHAPE):
 * *out is m broadcast there.
 */
ATTN_HIDDEN attn_status attn__check_mask(const attn_view *m, attn_dtype dt, int ndim,
                                         const int64_t *shape, attn_view *out);

/*
 * Per-batch lengths (attn_sdpa's kv_len, a KV cache's len, the decode
 * kernel's len, a step's n_new, a memory's lengths): len NULL is fine, else
 * every len[b], b < n, in [0, hi]; ATTN_ERANGE otherwise (docs/reliability.md).
 */
ATTN_FOR_MPI attn_status attn__check_lengths(const int64_t *len, int64_t n, int64_t hi);
/*
 * The attention variants every attention entry point takes (attn_sdpa_opts,
 * attn_decode_opts, attn_step_opts): window sizes >= 0, and 0 unless the
 * window is on, softcap finite and >= 0 (ATTN_EINVAL); alibi and sinks NULL
 * or (H) of dtype dt (ATTN_EDTYPE, ATTN_ESHAPE).
 */
ATTN_FOR_MPI attn_status attn__check_variants(attn_dtype dt, int64_t H, bool window, int64_t wl,
                                             int64_t wr, double softcap, const attn_view *alibi,
                                             const attn_view *sinks);
/*
 * Offsets of n packed sequences cu[0..n] (non-NULL): cu[0] == 0, non-decreasing,
 * cu[n] == total; ATTN_ERANGE otherwise, as a length out of range.
 */
ATTN_HIDDEN attn_status attn__check_offsets(const int64_t *cu, int64_t n, int64_t total);

/*
 * The workspace of a call needing `need` bytes: attn__work_acquire, then
 * (when the caller passed it) no overlap with the n argument views
 * (ATTN_EALIAS). *owned, when set, is freed by the caller after the run.
 */
ATTN_FOR_MPI attn_status attn__work_take(void **work, size_t *size, size_t need,
                                        const attn_view *const *args, int n, void **owned);

/*
 * ---- The trusted inside: run functions take validated arguments ----------
 * Debug builds assert their preconditions; release builds trust the caller.
 */

/*
 * attn_gemm's products on views the caller has validated (well-formed, one
 * float dtype, C not overlapping itself, A or B). attn__gemm_need: the packing
 * workspace (ESHAPE/ERANGE for shapes CBLAS cannot take); attn__gemm_run: the
 * products, with work_size >= that need.
 */
ATTN_HIDDEN attn_status attn__gemm_need(attn_trans ta, attn_trans tb, const attn_view *a,
                                        const attn_view *b, const attn_view *c,
                                        size_t *bytes);
ATTN_HIDDEN void attn__gemm_run(attn_trans ta, attn_trans tb, double alpha,
                                const attn_view *a, const attn_view *b, double beta,
                                attn_view *c, void *work, size_t work_size);
/*
 * Bytes attn_gemm packs for the 2-D operand op(x) (0 when it maps straight
 * onto CBLAS): a product's workspace is the sum over its three operands.
 * For callers that size one workspace for many products on tiles of the same
 * views. x must be valid with a size that fits (no overflow check).
 */
ATTN_HIDDEN size_t attn__gemm_pack_size(const attn_view *x, attn_trans t);

/* dst := src for valid views of one dtype and shape that do not overlap. */
ATTN_FOR_MPI void attn__view_copy_run(const attn_view *src, attn_view *dst);

/*
 * Threads (src/core/threads.c states the rule; docs/guide.md "Threads").
 * attn__threads(requested, tasks, flops): a loop's thread count: `requested` if > 0,
 * else 1 below ATTN__PARALLEL_MIN_FLOPS, else the BLAS's own count; never more than
 * `tasks` or ATTN__MAX_THREADS. It sizes per-thread scratch: a loop may run on fewer.
 * attn__parallel_for(nthreads, ntasks, fn, ctx) runs fn(ctx, task, tid) for every
 * task in [0, ntasks), claimed one at a time in increasing order, on the calling
 * thread (tid 0) and up to nthreads - 1 of the BLAS's threads (tids 1..), every BLAS
 * call in it single-threaded (on the calling thread alone inside an OpenMP region or
 * while another thread's loop has the BLAS's threads); tid < nthreads always, so
 * per-thread scratch can be indexed by it. Returns when every task is done.
 */
#define ATTN__PARALLEL_MIN_FLOPS 4e6
#define ATTN__MAX_THREADS        256
/*
 * A kernel with too few (batch, head, row block) tasks to share among threads cuts
 * each one's keys into chunks merged through their lse, enough chunks for about
 * ATTN__SPLIT_TASKS tasks in all. The cut depends on the shape alone, never on the
 * thread count, so a call's bits are the same for every thread count. 8: four tasks a
 * thread on two cores, two on four; more cuts smaller GEMMs and adds merges (16 made an
 * sdpa of 12 heads at T 256 7% slower on two cores).
 */
#define ATTN__SPLIT_TASKS 8
typedef void attn__task_fn(void *ctx, int64_t task, int tid);
ATTN_HIDDEN int attn__threads(int requested, int64_t tasks, double flops);
ATTN_HIDDEN void attn__parallel_for(int nthreads, int64_t ntasks, attn__task_fn *fn, void *ctx);
/*
 * A kernel brackets its work with token = attn__one_thread_begin(requested) ...
 * attn__one_thread_end(token): with requested == 1, or inside an active OpenMP
 * region, every BLAS call in between runs single-threaded on the calling thread.
 */
ATTN_HIDDEN int  attn__one_thread_begin(int requested);
ATTN_HIDDEN void attn__one_thread_end(int token);
/* Around every BLAS call (src/core/gemm.c): single-threaded where the rule says so. */
ATTN_HIDDEN int  attn__blas_begin(void);
ATTN_HIDDEN void attn__blas_end(int token);

/*
 * Vectorized exponentials (src/kernels/vexp.c): x[i] := exp(x[i] - m) for i < n,
 * returning the sum of the new x[i]. exp(-inf) is exactly 0, NaN stays NaN.
 * The f32 one is a polynomial with a run-time chosen AVX2/AVX-512 clone
 * (max relative error about 1e-7); the f64 one uses libm's exp. attn__vmax_*
 * is the maximum of x[0..n) (-inf for n == 0; NaN entries may be skipped).
 */
ATTN_HIDDEN float attn__vexp_sum_f32(float *x, int64_t n, float m);
ATTN_HIDDEN double attn__vexp_sum_f64(double *x, int64_t n, double m);
ATTN_HIDDEN float attn__vmax_f32(const float *x, int64_t n);
ATTN_HIDDEN double attn__vmax_f64(const double *x, int64_t n);

/*
 * Byte range [lo, hi) an already-validated view can touch (hi == lo when
 * empty), in integer arithmetic. The public attn_view_span/overlaps check
 * the view first; hot internal paths that validated already use these.
 */
static inline void attn__span_raw(const attn_view *v, uintptr_t *lo, uintptr_t *hi) {
    int64_t neg = 0, pos = 0;
    *lo = *hi = (uintptr_t)v->data;
    for (int k = 0; k < v->ndim; ++k) {
        if (v->shape[k] == 0)
            return;
        int64_t e = v->stride[k] * (v->shape[k] - 1);
        if (e < 0)
            neg += e;
        else
            pos += e;
    }
    uintptr_t es = v->dtype == ATTN_F64 ? 8 : v->dtype == ATTN_F32 ? 4 : 1;
    *lo = (uintptr_t)v->data + (uintptr_t)neg * es;
    *hi = (uintptr_t)v->data + (uintptr_t)(pos + 1) * es;
}
static inline bool attn__overlaps_raw(const attn_view *a, const attn_view *b) {
    uintptr_t alo, ahi, blo, bhi;
    attn__span_raw(a, &alo, &ahi);
    attn__span_raw(b, &blo, &bhi);
    return alo != ahi && blo != bhi && alo < bhi && blo < ahi;
}

/* The element count of a view already checked (attn_view_numel checks it again). */
static inline int64_t attn__numel(const attn_view *v) {
    int64_t n = 1;
    for (int k = 0; k < v->ndim; ++k)
        n *= v->shape[k];
    return n;
}

/* Debug-only invariant checks. */
#include <assert.h>
#define ATTN_ASSERT(x) assert(x)

#endif /* ATTN_INTERNAL_H */
