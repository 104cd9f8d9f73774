/* SPDX-License-Identifier: MIT */
/* Ring attention's private declarations: a call's validated context and its workspace
   carving (ring_setup.c), shared with the ring itself (ring.c). */
#ifndef ATTN_RING_INTERNAL_H
#define ATTN_RING_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "attn/ring.h"
#include "core/internal.h"

/* Fields every rank must agree on (checked by one MPI_Allreduce). */
enum {
    F_DTYPE,
    F_B,
    F_H,
    F_HKV,
    F_D,
    F_DV,
    F_CAUSAL,
    F_LAYOUT,
    F_WINDOW, /* the variants: window on, its sizes, alibi and sinks given */
    F_WL,
    F_WR,
    F_ALIBI,
    F_SINKS,
    F_SCALE, /* the doubles' bits */
    F_CAP,
    NF
};

/* The views of a call beyond q, k, v (NULL: absent). */
typedef struct ring_io {
    attn_view *out, *lse;                /* forward: outputs */
    const attn_view *fout, *flse, *dout; /* backward: the forward's out and lse, and dout */
    attn_view *dq, *dk, *dv;             /* backward: gradients, accumulated */
} ring_io;

/* Workspace blocks, in order. X0..X2 are the forward's piece out, piece lse and running
   lse (double), or the backward's two travelling gradient accumulators and this step's
   gradients (each one packed dK/dV block). */
enum { W_GATHER, W_KV0, W_KV1, W_X0, W_X1, W_X2, W_KLEN, W_KAP, W_SDPA, W_COUNT };

/* Validated arguments of one call and the carving of its workspace. */
typedef struct ring_ctx {
    MPI_Comm comm; /* our duplicate of the caller's communicator */
    int rank, P;
    bool bwd; /* attn_ring_sdpa_backward */
    attn_dtype dt;
    size_t es;
    int64_t B, H, Hkv, D, Dv, T, Tmax; /* T: this rank's block; Tmax: the longest */
    int64_t f[NF];
    double scale;
    bool causal;
    attn_ring_layout layout;
    const attn_ring_opts *o;
    attn_view q, k, v;
    ring_io io;
    size_t off[W_COUNT]; /* byte offsets into the workspace */
    bool sums;           /* backward's first ring: the lse corrections' row sums only */
    bool variant;        /* window, softcap or ALiBi: attend_block works chunk by chunk */
    size_t sdpa_ws, total;
} ring_ctx;

/* A contiguous chunk of a rank's block: local rows [lo, lo + n), global chunk index. */
typedef struct seg {
    int64_t lo, n, chunk;
} seg;

/* The chunks of a block of T tokens held by rank r, in local order (global order too). */
static inline int segments(const ring_ctx *c, int r, int64_t T, seg s[2]) {
    if (c->layout == ATTN_RING_CONTIGUOUS) {
        s[0] = (seg){0, T, r};
        return 1;
    }
    int64_t a = (T + 1) / 2;
    s[0] = (seg){0, a, r};
    s[1] = (seg){a, T - a, 2 * (int64_t)c->P - 1 - r};
    return 2;
}

/* Elements of one travelling K/V block of T tokens: k (B, Hkv, T, D) then v (B, Hkv, T, Dv). */
static inline bool block_elems(const ring_ctx *c, int64_t T, int64_t *n) {
    int64_t bh, dd;
    return attn__mul_i64(c->B, c->Hkv, &bh) && attn__add_i64(c->D, c->Dv, &dd) &&
           attn__mul_i64(bh, T, n) && attn__mul_i64(*n, dd, n);
}

/* The k and v views of a packed block of T tokens at buf (B, Hkv, T, D | Dv). */
static inline void block_views(const ring_ctx *c, void *buf, int64_t T, attn_view *k, attn_view *v) {
    int64_t D = c->D, Dv = c->Dv;
    *k = (attn_view){.data = buf,
                     .dtype = c->dt,
                     .ndim = 4,
                     .shape = {c->B, c->Hkv, T, D},
                     .stride = {c->Hkv * T * D, T * D, D, 1}};
    *v = (attn_view){.data = (char *)buf + (size_t)(c->B * c->Hkv * T * D) * c->es,
                     .dtype = c->dt,
                     .ndim = 4,
                     .shape = {c->B, c->Hkv, T, Dv},
                     .stride = {c->Hkv * T * Dv, T * Dv, Dv, 1}};
}

/* Agree on one status: the largest code any rank reports. */
static inline attn_status agree(MPI_Comm comm, attn_status s) {
    int in = (int)s, out;
    if (MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return ATTN_EMPI;
    return (attn_status)out;
}

/* Collective setup shared by the calls and the workspace queries (ring_setup.c). */
attn_status attn__ring_setup(MPI_Comm comm, bool bwd, const attn_view *q, const attn_view *k,
                             const attn_view *v, const attn_ring_opts *opts, const ring_io *io,
                             void **work, size_t work_size, void **owned, ring_ctx *c);

#endif
