/* SPDX-License-Identifier: MIT */
/* The open safetensors file and the lookups the binders share; never installed. */
#ifndef ATTN_IO_INTERNAL_H
#define ATTN_IO_INTERNAL_H

#include "attn/io.h"
#include "core/internal.h"

/* One validated header entry. dtype is 0 for every type but F32 and F64. */
typedef struct attn__st_entry {
    const char *name;
    attn_dtype dtype;
    unsigned esize;       /* bytes per element */
    int ndim;             /* 0 for a scalar */
    const int64_t *shape; /* (ndim) */
    uint64_t begin, end;  /* data_offsets within the data area */
} attn__st_entry;

struct attn_safetensors {
    void *map; /* the whole file, read-only */
    size_t map_size;
    const char *data; /* the data area: map + 8 + header length */
    size_t count;
    attn__st_entry *entries; /* sorted by name (strcmp) */
};

/* The entry named prefix mid suffix, concatenated (NULL parts are empty), or NULL. */
ATTN_HIDDEN const attn__st_entry *attn__st_find(const attn_safetensors *f, const char *prefix,
                                                const char *mid, const char *suffix);
/* A row-major view of e: ATTN_EDTYPE, ATTN_ESHAPE, ATTN_EFORMAT as attn_safetensors_view. */
ATTN_HIDDEN attn_status attn__st_entry_view(const attn_safetensors *f, const attn__st_entry *e,
                                            attn_view *out);

#endif /* ATTN_IO_INTERNAL_H */
