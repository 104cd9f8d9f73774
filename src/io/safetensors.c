/* SPDX-License-Identifier: MIT */
/* safetensors files: map, validate the JSON header once (jansson), hand out views. */
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_internal.h"

/* The safetensors reference implementation's own cap on the header. */
#define MAX_HEADER ((uint64_t)100000000)

static const struct {
    const char *name;
    unsigned size;
} dtypes[] = {{"BOOL", 1},    {"U8", 1},  {"I8", 1},   {"I16", 2}, {"U16", 2},
              {"I32", 4},     {"U32", 4}, {"I64", 8},  {"U64", 8}, {"F8_E5M2", 1},
              {"F8_E4M3", 1}, {"F16", 2}, {"BF16", 2}, {"F32", 4}, {"F64", 8}};

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const attn__st_entry *)a)->name, ((const attn__st_entry *)b)->name);
}

static int begin_cmp(const void *a, const void *b) {
    const attn__st_entry *x = *(const attn__st_entry *const *)a,
                         *y = *(const attn__st_entry *const *)b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

/* A JSON integer in [0, INT64_MAX]. */
static bool nonneg(const json_t *j, uint64_t *v) {
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *v = (uint64_t)json_integer_value(j);
    return true;
}

/*
 * One header entry checked and parsed into *e (shape stored in dims). Its
 * byte size is the product of the shape (of the non-zero extents when checking
 * overflow, as attn views count an empty view) times the element size.
 */
static bool parse_entry(const char *name, const json_t *o, uint64_t data_size,
                        attn__st_entry *e, int64_t *dims) {
    const json_t *dt = json_object_get(o, "dtype"), *sh = json_object_get(o, "shape"),
                 *off = json_object_get(o, "data_offsets");
    if (!json_is_object(o) || !json_is_string(dt) || !json_is_array(sh) ||
        !json_is_array(off) || json_array_size(off) != 2)
        return false;
    e->name = name;
    e->esize = 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; ++i)
        if (!strcmp(json_string_value(dt), dtypes[i].name)) {
            e->esize = dtypes[i].size;
            e->dtype = !strcmp(dtypes[i].name, "F32")   ? ATTN_F32
                       : !strcmp(dtypes[i].name, "F64") ? ATTN_F64
                                                        : (attn_dtype)0;
        }
    if (e->esize == 0)
        return false;
    e->ndim = (int)json_array_size(sh);
    e->shape = dims;
    uint64_t nz = e->esize, bytes = e->esize, d;
    for (int k = 0; k < e->ndim; ++k) {
        if (!nonneg(json_array_get(sh, (size_t)k), &d))
            return false;
        dims[k] = (int64_t)d;
        if (d && (__builtin_mul_overflow(nz, d, &nz) || nz > INT64_MAX))
            return false;
        bytes = d ? bytes * d : 0; /* bytes <= nz: no overflow */
    }
    uint64_t b, en;
    if (!nonneg(json_array_get(off, 0), &b) || !nonneg(json_array_get(off, 1), &en) || b > en ||
        en > data_size || en - b != bytes)
        return false;
    e->begin = b;
    e->end = en;
    return true;
}

/* "__metadata__": an object of strings. */
static bool metadata_ok(const json_t *m) {
    const char *k;
    const json_t *v;
    if (!json_is_object(m))
        return false;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v))
            return false;
    }
    return true;
}

/*
 * Validate the header (JSON text hdr, n bytes) for a data area of data_size
 * bytes and build the sorted entry table, all in one allocation: struct,
 * entries, shapes, names.
 */
static attn_status parse_header(const char *hdr, size_t n, uint64_t data_size,
                                attn_safetensors **out) {
    json_error_t err;
    json_t *root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return ATTN_EFORMAT;
    attn_status st = ATTN_EFORMAT;
    attn_safetensors *f = NULL;
    attn__st_entry **order = NULL;
    if (!json_is_object(root))
        goto done;
    size_t count = 0, names = 0, dims = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!metadata_ok(val))
                goto done;
            continue;
        }
        const json_t *sh = json_object_get(val, "shape");
        count++;
        names += strlen(key) + 1;
        dims += json_is_array(sh) ? json_array_size(sh) : 0;
    }
    /* sizes bounded by the header (at most 100 MB of JSON): no overflow */
    size_t head = sizeof *f + count * sizeof(attn__st_entry) + dims * sizeof(int64_t);
    f = malloc(head + names);
    order = malloc((count ? count : 1) * sizeof *order);
    if (!f || !order) {
        st = ATTN_ENOMEM;
        goto done;
    }
    memset(f, 0, sizeof *f);
    f->entries = (attn__st_entry *)(f + 1);
    int64_t *dim = (int64_t *)(f->entries + count);
    char *name = (char *)(dim + dims);
    size_t i = 0;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__"))
            continue;
        size_t len = strlen(key) + 1;
        memcpy(name, key, len);
        if (!parse_entry(name, val, data_size, &f->entries[i], dim))
            goto done;
        dim += f->entries[i].ndim;
        name += len;
        order[i] = &f->entries[i];
        i++;
    }
    f->count = count;
    /* no two tensors share a byte: sorted by begin, each starts at or after the last end */
    qsort(order, count, sizeof *order, begin_cmp);
    for (size_t k = 1; k < count; ++k)
        if (order[k]->begin < order[k - 1]->end)
            goto done;
    qsort(f->entries, count, sizeof *f->entries, entry_cmp);
    *out = f;
    f = NULL;
    st = ATTN_OK;
done:
    free(order);
    free(f);
    json_decref(root);
    return st;
}

attn_status attn_safetensors_open(const char *path, attn_safetensors **out) {
    if (out)
        *out = NULL;
    if (!path || !out)
        return ATTN_EINVAL;
    /* O_NONBLOCK: a FIFO must not block the open; a regular file ignores it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return ATTN_EIO;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 0) {
        close(fd);
        return ATTN_EIO;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8 || size > SIZE_MAX) {
        close(fd);
        return size < 8 ? ATTN_EFORMAT : ATTN_EIO;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return ATTN_EIO;
    const unsigned char *b = map;
    uint64_t n = 0;
    for (int k = 7; k >= 0; --k) /* little-endian u64 */
        n = n << 8 | b[k];
    attn_status st = ATTN_EFORMAT;
    attn_safetensors *f = NULL;
    if (n <= size - 8 && n <= MAX_HEADER)
        st = parse_header((const char *)b + 8, (size_t)n, size - 8 - n, &f);
    if (st != ATTN_OK) {
        munmap(map, (size_t)size);
        return st;
    }
    f->map = map;
    f->map_size = (size_t)size;
    f->data = (const char *)b + 8 + n;
    *out = f;
    return ATTN_OK;
}

void attn_safetensors_close(attn_safetensors *f) {
    if (!f)
        return;
    munmap(f->map, f->map_size);
    free(f);
}

/* strcmp(nm, a b c) for the concatenation of the parts (NULL parts are empty). */
static int cmp_parts(const char *nm, const char *a, const char *b, const char *c) {
    const char *parts[3] = {a, b, c};
    for (int i = 0; i < 3; ++i)
        for (const char *s = parts[i]; s && *s; ++s, ++nm)
            if (*nm != *s)
                return (unsigned char)*nm < (unsigned char)*s ? -1 : 1;
    return *nm ? 1 : 0;
}

const attn__st_entry *attn__st_find(const attn_safetensors *f, const char *prefix,
                                    const char *mid, const char *suffix) {
    size_t lo = 0, hi = f->count;
    while (lo < hi) { /* binary search over the names sorted by strcmp */
        size_t m = lo + (hi - lo) / 2;
        int c = cmp_parts(f->entries[m].name, prefix, mid, suffix);
        if (c == 0)
            return &f->entries[m];
        if (c < 0)
            lo = m + 1;
        else
            hi = m;
    }
    return NULL;
}

attn_status attn__st_entry_view(const attn_safetensors *f, const attn__st_entry *e,
                                attn_view *out) {
    if (e->dtype != ATTN_F32 && e->dtype != ATTN_F64)
        return ATTN_EDTYPE;
    if (e->ndim > ATTN_MAX_DIMS)
        return ATTN_ESHAPE;
    const char *p = f->data + e->begin;
    if (e->end > e->begin && (uintptr_t)p % e->esize != 0) /* an empty view reads nothing */
        return ATTN_EFORMAT;
    int64_t one = 1;
    /* read-only mapping: the view's data pointer is non-const by attn_view's type */
    return attn_view_init(out, e->dtype, (void *)(uintptr_t)p, e->ndim ? e->ndim : 1,
                          e->ndim ? e->shape : &one);
}

attn_status attn_safetensors_view(const attn_safetensors *f, const char *name, attn_view *out) {
    if (!f || !name || !out)
        return ATTN_EINVAL;
    const attn__st_entry *e = attn__st_find(f, NULL, NULL, name);
    if (!e)
        return ATTN_ENOTFOUND;
    attn_view v;
    ATTN_TRY(attn__st_entry_view(f, e, &v));
    *out = v;
    return ATTN_OK;
}
