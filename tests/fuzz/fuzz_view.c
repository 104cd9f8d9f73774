/* SPDX-License-Identifier: MIT */
/* Fuzz target: view constructors, check, algebra and copy against independent re-derivations.
 */
#include "fuzz_common.h"

/* view.h's validity rules, re-derived in 128-bit arithmetic. */
static bool valid_parts(attn_dtype dt, const void *data, int ndim, const int64_t *shape,
                        const int64_t *stride) {
    if (ndim < 1 || ndim > ATTN_MAX_DIMS || fz_es(dt) == 0)
        return false;
    bool empty = false;
    for (int k = 0; k < ndim; ++k) {
        if (shape[k] < 0)
            return false;
        empty |= shape[k] == 0;
    }
    /* an empty view obeys the same rules, its numel being the product of the non-zero extents
     */
    const __int128 lim = INT64_MAX;
    __int128 numel = 1, span = 0;
    for (int k = 0; k < ndim; ++k) {
        numel *= shape[k] > 0 ? shape[k] : 1;
        if (numel > lim)
            return false;
        if (shape[k] > 1) {
            __int128 s = stride[k] < 0 ? -(__int128)stride[k] : stride[k];
            span += s * (shape[k] - 1);
            if (s > lim || span > lim)
                return false;
        }
    }
    if ((span + 1) * fz_es(dt) > lim || numel * fz_es(dt) > lim)
        return false;
    return data != NULL || empty;
}

static bool same_view(const attn_view *a, const attn_view *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int k = 0; k < a->ndim; ++k)
        if (a->shape[k] != b->shape[k] || (a->shape[k] > 1 && a->stride[k] != b->stride[k]))
            return false;
    return true;
}

/* Address of element idx of v, by our own formula (integers: v may describe no real memory). */
static uintptr_t addr(const attn_view *v, const int64_t *idx) {
    uint64_t off = 0;
    for (int k = 0; k < v->ndim; ++k)
        off += (uint64_t)idx[k] * (uint64_t)v->stride[k];
    return (uintptr_t)v->data + (uintptr_t)(off * (uint64_t)fz_es(v->dtype));
}

enum op {
    OP_SLICE,
    OP_SELECT,
    OP_PERMUTE,
    OP_TRANSPOSE,
    OP_SPLIT,
    OP_MERGE,
    OP_BROADCAST,
    OP_FLIP,
    OP_COUNT
};

typedef struct opargs {
    enum op op;
    int axis, a1, ndim, perm[ATTN_MAX_DIMS];
    int64_t start, stop, step, index, inner, shape[ATTN_MAX_DIMS];
} opargs;

static attn_status apply(const opargs *o, const attn_view *v, attn_view *out) {
    switch (o->op) {
    case OP_SLICE:
        return attn_view_slice(v, o->axis, o->start, o->stop, o->step, out);
    case OP_SELECT:
        return attn_view_select(v, o->axis, o->index, out);
    case OP_PERMUTE:
        return attn_view_permute(v, o->perm, out);
    case OP_TRANSPOSE:
        return attn_view_transpose(v, o->axis, o->a1, out);
    case OP_SPLIT:
        return attn_view_split(v, o->axis, o->inner, out);
    case OP_MERGE:
        return attn_view_merge(v, o->axis, out);
    case OP_BROADCAST:
        return attn_view_broadcast(v, o->ndim, o->shape, out);
    default:
        return attn_view_flip(v, o->axis, out);
    }
}

/* Whether the op must succeed on the valid view v (view.h's documented preconditions). */
static bool expect_ok(const opargs *o, const attn_view *v) {
    int n = v->ndim;
    bool ax = o->axis >= 0 && o->axis < n;
    switch (o->op) {
    case OP_SLICE:
        return ax && o->step >= 1 && o->start >= 0 && o->start <= o->stop &&
               o->stop <= v->shape[o->axis];
    case OP_SELECT:
        return ax && n > 1 && o->index >= 0 && o->index < v->shape[o->axis];
    case OP_PERMUTE: {
        bool seen[ATTN_MAX_DIMS] = {false};
        for (int k = 0; k < n; ++k) {
            if (o->perm[k] < 0 || o->perm[k] >= n || seen[o->perm[k]])
                return false;
            seen[o->perm[k]] = true;
        }
        return true;
    }
    case OP_TRANSPOSE:
        return ax && o->a1 >= 0 && o->a1 < n;
    case OP_SPLIT: {
        if (!ax || o->inner < 1 || n >= ATTN_MAX_DIMS || v->shape[o->axis] % o->inner != 0)
            return false;
        int64_t sh[ATTN_MAX_DIMS], st[ATTN_MAX_DIMS];
        for (int k = 0, j = 0; k < n; ++k, ++j) {
            sh[j] = k == o->axis ? v->shape[k] / o->inner : v->shape[k];
            st[j] = v->stride[k];
            if (k == o->axis) {
                __int128 outer = (__int128)v->stride[k] * o->inner;
                st[j] = outer > INT64_MAX || outer < INT64_MIN ? 0 : (int64_t)outer;
                sh[++j] = o->inner;
                st[j] = v->stride[k];
            }
        }
        return valid_parts(v->dtype, v->data, n + 1, sh, st);
    }
    case OP_MERGE: {
        if (!ax || o->axis + 1 >= n)
            return false;
        int64_t n0 = v->shape[o->axis], n1 = v->shape[o->axis + 1];
        return n1 == 1 || n0 == 1 ||
               v->stride[o->axis] == (__int128)n1 * v->stride[o->axis + 1];
    }
    case OP_BROADCAST: {
        if (o->ndim < n || o->ndim > ATTN_MAX_DIMS)
            return false;
        int64_t st[ATTN_MAX_DIMS];
        for (int k = 0; k < o->ndim; ++k) {
            int j = k - (o->ndim - n);
            if (o->shape[k] < 0 || (j >= 0 && v->shape[j] != o->shape[k] && v->shape[j] != 1))
                return false;
            st[k] = j >= 0 && v->shape[j] == o->shape[k] ? v->stride[j] : 0;
        }
        return valid_parts(v->dtype, v->data, o->ndim, o->shape, st);
    }
    default:
        return ax;
    }
}

/* The input index that output index oi maps to, by each op's definition. */
static void map_index(const opargs *o, const attn_view *v, const int64_t *oi, int64_t *ii) {
    int n = v->ndim;
    switch (o->op) {
    case OP_SLICE:
        memcpy(ii, oi, sizeof(int64_t) * ATTN_MAX_DIMS);
        ii[o->axis] = o->start + oi[o->axis] * o->step;
        break;
    case OP_SELECT:
        for (int k = 0, j = 0; k < n; ++k)
            ii[k] = k == o->axis ? o->index : oi[j++];
        break;
    case OP_PERMUTE:
        for (int k = 0; k < n; ++k)
            ii[o->perm[k]] = oi[k];
        break;
    case OP_TRANSPOSE:
        memcpy(ii, oi, sizeof(int64_t) * ATTN_MAX_DIMS);
        ii[o->axis] = oi[o->a1];
        ii[o->a1] = oi[o->axis];
        break;
    case OP_SPLIT:
        for (int k = 0; k < n; ++k)
            ii[k] = k < o->axis   ? oi[k]
                    : k > o->axis ? oi[k + 1]
                                  : oi[k] * o->inner + oi[k + 1];
        break;
    case OP_MERGE: {
        int64_t n1 = v->shape[o->axis + 1];
        for (int k = 0; k < o->axis; ++k)
            ii[k] = oi[k];
        ii[o->axis] = oi[o->axis] / n1;
        ii[o->axis + 1] = oi[o->axis] % n1;
        for (int k = o->axis + 2; k < n; ++k)
            ii[k] = oi[k - 1];
        break;
    }
    case OP_BROADCAST:
        for (int k = 0; k < n; ++k) {
            int j = k + (o->ndim - n);
            ii[k] = v->shape[k] == 1 ? 0 : oi[j];
        }
        break;
    default:
        memcpy(ii, oi, sizeof(int64_t) * ATTN_MAX_DIMS);
        ii[o->axis] = v->shape[o->axis] - 1 - oi[o->axis];
        break;
    }
}

static void decode_op(fz *f, const attn_view *v, opargs *o) {
    memset(o, 0, sizeof *o);
    o->op = (enum op)fz_below(f, OP_COUNT);
    o->axis = (int)fz_below(f, 6) - 1;
    o->a1 = (int)fz_below(f, 6) - 1;
    int64_t ext = o->axis >= 0 && o->axis < v->ndim ? v->shape[o->axis] : 3;
    uint8_t c = fz_u8(f);
    o->start = c < 250 ? (int64_t)(c % 8) - (c == 249) : fz_extent(f);
    o->stop = fz_bool(f) ? ext : (int64_t)((uint64_t)o->start + fz_below(f, 9) - 1u);
    o->step = (int64_t)fz_below(f, 5) - (fz_u8(f) == 0 ? 5 : 0);
    o->index = (int64_t)fz_below(f, 9) - 1;
    o->inner = fz_bool(f) ? (int64_t)fz_below(f, 5) : fz_extent(f);
    o->ndim = (int)fz_below(f, 6);
    for (int k = 0; k < ATTN_MAX_DIMS; ++k) {
        o->perm[k] = fz_bool(f) ? ATTN_MAX_DIMS - 1 - k : (int)fz_below(f, 5) - (k == 3);
        int j = k - (o->ndim - v->ndim);
        o->shape[k] = j >= 0 && j < v->ndim && fz_bool(f) ? v->shape[j] : fz_extent(f);
    }
}

/* One algebra op: status agrees with the preconditions; the result maps elements exactly. */
static void check_op(fz *f, const attn_view *v) {
    opargs o;
    decode_op(f, v, &o);
    attn_view out, out0, same = *v;
    memset(&out, 0xA5, sizeof out);
    out0 = out;
    attn_status st = apply(&o, v, &out);
    bool ok = attn_view_check(v) == ATTN_OK && expect_ok(&o, v);
    FZ_REQUIRE((st == ATTN_OK) == ok, "view op %d returned %s, expected %s", o.op,
               attn_status_name(st), ok ? "OK" : "an error");
    if (st != ATTN_OK) {
        FZ_REQUIRE(memcmp(&out, &out0, sizeof out) == 0, "view op %d wrote out on error", o.op);
        return;
    }
    /* out may be the input view itself */
    FZ_REQUIRE(apply(&o, &same, &same) == ATTN_OK && same_view(&same, &out),
               "view op %d in place differs", o.op);
    FZ_REQUIRE(attn_view_check(&out) == ATTN_OK, "view op %d made an invalid view", o.op);
    int64_t n = fz_numel(&out), oi[ATTN_MAX_DIMS] = {0}, ii[ATTN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n && e < 512; ++e) {
        map_index(&o, v, oi, ii);
        for (int k = 0; k < v->ndim; ++k)
            FZ_REQUIRE(ii[k] >= 0 && ii[k] < v->shape[k], "view op %d: bad index map", o.op);
        FZ_REQUIRE(addr(&out, oi) == addr(v, ii), "view op %d: element %lld moved", o.op,
                   (long long)e);
        for (int k = out.ndim - 1; k >= 0; --k) {
            if (++oi[k] < out.shape[k])
                break;
            oi[k] = 0;
        }
    }
    /* a view never escapes its parent's bytes (checked where the bytes are real memory) */
    __int128 lo, hi, plo, phi;
    if (fz_in_arena(v) && fz_span(&out, &lo, &hi) && fz_span(v, &plo, &phi))
        FZ_REQUIRE(lo >= plo && hi <= phi, "view op %d escapes its parent", o.op);
}

/* attn_view_copy between two arena views: either refused untouched, or an exact copy. */
static void check_copy(fz *f, const attn_view *src) {
    attn_dtype dt = fz_u8(f) == 7 ? ATTN_F32 : src->dtype;
    attn_view dst;
    int64_t shape[ATTN_MAX_DIMS];
    for (int k = 0; k < src->ndim; ++k)
        shape[k] = fz_u8(f) == 3 ? src->shape[k] + 1 : src->shape[k];
    if (!fz_view(f, dt, src->ndim, shape, &dst))
        return;
    const attn_view *args[2] = {src, &dst};
    fz_arm(args, 2);
    attn_status st = attn_view_copy(src, &dst);
    fz_disarm();
    const attn_view *outs[1] = {&dst};
    fz_check_untouched(st, outs, 1, "attn_view_copy");
    if (st != ATTN_OK)
        return;
    FZ_REQUIRE(!fz_overlap(src, &dst), "attn_view_copy accepted overlapping views");
    int64_t n = fz_numel(src), idx[ATTN_MAX_DIMS] = {0}, es = fz_es(dt);
    for (int64_t e = 0; e < n; ++e) {
        size_t so = (size_t)(addr(src, idx) - (uintptr_t)fz_mem());
        FZ_REQUIRE(memcmp((const void *)addr(&dst, idx), fz_A.snap + so, (size_t)es) == 0,
                   "attn_view_copy: element %lld differs", (long long)e);
        for (int k = src->ndim - 1; k >= 0; --k) {
            if (++idx[k] < src->shape[k])
                break;
            idx[k] = 0;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    attn_dtype dt = (attn_dtype)fz_below(&f, 5); /* 0 and 4 are not dtypes */
    int ndim = (int)fz_below(&f, 6);
    attn_view v;
    bool in_arena = fz_view(&f, dt, ndim, NULL, &v);
    /* the constructors agree with the rules, and leave *v alone on error */
    attn_view c, c0;
    memset(&c, 0x5A, sizeof c);
    c0 = c;
    bool valid = valid_parts(v.dtype, v.data, v.ndim, v.shape, v.stride);
    attn_status st = attn_view_init_strided(&c, v.dtype, v.data, v.ndim, v.shape, v.stride);
    if ((st == ATTN_OK) != valid)
        fz_print("view", &v);
    FZ_REQUIRE((st == ATTN_OK) == valid, "attn_view_init_strided returned %s for a%s view",
               attn_status_name(st), valid ? " valid" : "n invalid");
    FZ_REQUIRE(st == ATTN_OK ? same_view(&c, &v) : memcmp(&c, &c0, sizeof c) == 0,
               "attn_view_init_strided: wrong result or wrote on error");
    FZ_REQUIRE((attn_view_check(&v) == ATTN_OK) == valid, "attn_view_check disagrees");
    c = c0;
    st = attn_view_init(&c, v.dtype, v.data, v.ndim, v.shape);
    if (st != ATTN_OK)
        FZ_REQUIRE(memcmp(&c, &c0, sizeof c) == 0, "attn_view_init wrote on error");
    else
        FZ_REQUIRE(attn_view_is_contiguous(&c), "attn_view_init made a strided view");
    if (!valid) {
        FZ_REQUIRE(attn_view_numel(&v) == 0, "attn_view_numel of an invalid view");
        return 0;
    }
    int64_t n = attn_view_numel(&v);
    FZ_REQUIRE(n == fz_numel(&v), "attn_view_numel %lld", (long long)n);
    const void *lo, *hi;
    attn_view_span(&v, &lo, &hi);
    __int128 l, h;
    if (fz_span(&v, &l, &h))
        FZ_REQUIRE((uint64_t)((uintptr_t)lo - (uintptr_t)fz_mem()) == (uint64_t)l &&
                       (uint64_t)((uintptr_t)hi - (uintptr_t)fz_mem()) == (uint64_t)h,
                   "attn_view_span differs"); /* modulo 2^64: the range may leave memory */
    else
        FZ_REQUIRE(lo == hi, "attn_view_span of an empty view is not empty");
    for (int i = 0; i < 8 && f.n > 0; ++i) {
        attn_view cur = v;
        check_op(&f, &cur);
        opargs o;
        decode_op(&f, &v, &o);
        if (apply(&o, &v, &cur) == ATTN_OK)
            v = cur; /* walk on from the new view */
    }
    if (in_arena && fz_in_arena(&v) && fz_es(v.dtype)) {
        fz_fill(&f, v.dtype);
        check_copy(&f, &v);
    }
    return 0;
}
