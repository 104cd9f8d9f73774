/* SPDX-License-Identifier: MIT */
/* Ring attention's setup: every rank's local checks, the agreement on the call, the
   workspace's carving and the workspace queries (docs/distributed.md). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sdpa_internal.h" /* the sdpa plan and its workspace */
#include "ring/ring_internal.h"

/* Everything this rank can check without talking to the others; io NULL: a workspace query. */
static attn_status check_local(const attn_view *q, const attn_view *k, const attn_view *v,
                               const attn_ring_opts *o, const ring_io *io, ring_ctx *c) {
    attn__qkv d;
    ATTN_TRY(attn__check_qkv(q, k, v, &d));
    c->dt = d.dt;
    c->es = attn_dtype_size(c->dt);
    c->B = d.B;
    c->H = d.H;
    c->T = d.Tq;
    c->D = d.D;
    c->Hkv = d.Hkv;
    c->Dv = d.Dv;
    if (d.Tk != c->T) /* this rank's keys are its queries' tokens */
        return ATTN_ESHAPE;
    if ((unsigned)o->causal > ATTN_CAUSAL_BOTTOM_RIGHT ||
        (unsigned)o->layout > ATTN_RING_ZIGZAG || o->threads < 0 || !isfinite(o->scale))
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_variants(c->dt, c->H, o->window, o->window_left, o->window_right,
                                  o->softcap, o->alibi, o->sinks));
    if (o->dsinks && (!c->bwd || !o->sinks))
        return ATTN_EINVAL;
    if (c->D > INT_MAX || c->Dv > INT_MAX)
        return ATTN_ERANGE;
    ATTN_TRY(attn__check_lengths(o->kv_len, c->B, c->T));
    c->variant = o->window || o->softcap > 0 || o->alibi;
    c->causal = o->causal != ATTN_CAUSAL_NONE;
    c->layout = o->layout;
    c->scale = o->scale != 0.0 ? o->scale : c->D > 0 ? 1.0 / sqrt((double)c->D) : 1.0;
    const int64_t os[4] = {c->B, c->H, c->T, c->Dv};
    if (io && !c->bwd) { /* forward: out (required) and lse */
        const attn__spec outs[2] = {{io->out, true, 4, {os[0], os[1], os[2], os[3]}},
                                    {io->lse, false, 3, {os[0], os[1], os[2]}}};
        const attn_view *ins[5] = {q, k, v, o->alibi, o->sinks};
        ATTN_TRY(attn__check_outputs(c->dt, outs, 2, ins, 5));
    } else if (io) { /* backward: out, lse, dout (required), dq, dk, dv */
        const attn__spec saved[3] = {{io->fout, true, 4, {os[0], os[1], os[2], os[3]}},
                                     {io->flse, true, 3, {os[0], os[1], os[2]}},
                                     {io->dout, true, 4, {os[0], os[1], os[2], os[3]}}};
        ATTN_TRY(attn__check_views(c->dt, saved, 3));
        attn__spec outs[4] = {{io->dq, false, 4, {0}},
                              {io->dk, false, 4, {0}},
                              {io->dv, false, 4, {0}},
                              {o->dsinks, false, 1, {c->H}}};
        const attn_view *like[3] = {q, k, v};
        for (int i = 0; i < 3; ++i)
            memcpy(outs[i].shape, like[i]->shape, sizeof outs[i].shape);
        const attn_view *ins[8] = {q, k, v, io->fout, io->flse, io->dout, o->alibi, o->sinks};
        ATTN_TRY(attn__check_outputs(c->dt, outs, 4, ins, 8));
    }
    int64_t f[NF] = {c->dt,
                     c->B,
                     c->H,
                     c->Hkv,
                     c->D,
                     c->Dv,
                     c->causal,
                     c->layout,
                     o->window,
                     o->window_left,
                     o->window_right,
                     o->alibi != NULL,
                     o->sinks != NULL};
    memcpy(&f[F_SCALE], &c->scale, sizeof(double));
    memcpy(&f[F_CAP], &o->softcap, sizeof(double));
    memcpy(c->f, f, sizeof f);
    c->q = *q;
    c->k = *k;
    c->v = *v;
    if (io)
        c->io = *io;
    return ATTN_OK;
}

/* Carve the workspace for T_max (known on every rank after the agreement). */
static attn_status layout_work(ring_ctx *c) {
    int64_t kvn, bht, bhtd;
    if (!block_elems(c, c->Tmax, &kvn) || kvn > INT_MAX) /* one MPI message per step */
        return ATTN_ERANGE;
    if (!attn__mul_i64(c->B, c->H, &bht) || !attn__mul_i64(bht, c->T, &bht) ||
        !attn__mul_i64(bht, c->Dv, &bhtd))
        return ATTN_ERANGE;
    /* attn_sdpa's (or its backward's) workspace for the largest call: all local queries
       against T_max keys */
    attn_view kb, vb;
    block_views(c, (void *)(uintptr_t)64, c->Tmax, &kb, &vb); /* only strides matter */
    c->sdpa_ws = 0;
    for (int causal = 0; causal < 2; ++causal) {
        attn_sdpa_opts so = {.scale = c->scale,
                             .threads = c->o->threads,
                             .causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
                             .softcap = c->o->softcap}; /* the backward's extra tile */
        attn__sdpa_plan pl;
        size_t ws;
        ATTN_TRY(attn__sdpa_plan_init(&c->q, &kb, &vb, &so, false, &pl));
        ATTN_TRY(c->bwd ? attn__sdpa_backward_need(&pl, &c->q, &kb, &vb, &ws)
                        : attn__sdpa_need(&pl, &c->q, &kb, &vb, &ws));
        c->sdpa_ws = ws > c->sdpa_ws ? ws : c->sdpa_ws;
    }
    /* forward: piece out, piece (m, l) and running (m, l) in double, so that the merge
       is exact at any logit magnitude; backward: the lse corrections (kappa) per row */
    size_t n[W_COUNT] = {(size_t)c->P * (size_t)(c->B + 1),
                         (size_t)kvn,
                         (size_t)kvn,
                         c->bwd ? (size_t)kvn : (size_t)bhtd,
                         c->bwd ? (size_t)kvn : 2 * (size_t)bht,
                         c->bwd ? (size_t)kvn : 2 * (size_t)bht,
                         (size_t)(c->B + c->H), /* key lengths; dsinks' partial sums */
                         c->bwd ? (size_t)bht : 0,
                         c->sdpa_ws};
    size_t es[W_COUNT] = {8, c->es, c->es, c->es, c->bwd ? c->es : 8, c->bwd ? c->es : 8, 8, 8, 1};
    size_t at = 0, bytes;
    for (int i = 0; i < W_COUNT; ++i) {
        c->off[i] = at;
        if (!attn__mul_sz(n[i], es[i], &bytes) || bytes > SIZE_MAX / 2 ||
            !attn__add_sz(at, attn__align64(bytes), &at))
            return ATTN_ERANGE;
    }
    c->total = at;
    return ATTN_OK;
}

/* The views of the call (q, k, v and those of io), for the workspace's overlap check. */
static int call_views(const attn_view *q, const attn_view *k, const attn_view *v,
                      const ring_io *io, const attn_view **all) {
    int m = 0;
    all[m++] = q, all[m++] = k, all[m++] = v;
    if (io) {
        const attn_view *x[8] = {io->out,  io->lse, io->fout, io->flse,
                                 io->dout, io->dq,  io->dk,   io->dv};
        for (int i = 0; i < 8; ++i)
            all[m++] = x[i];
    }
    return m;
}

/*
 * Collective setup shared by the calls and the workspace queries: duplicate the
 * communicator, check locally, agree on the fields and T_max (one Allreduce),
 * lay out the workspace, check (or allocate, *owned) the caller's workspace,
 * agree on the status (a second Allreduce). On success c->comm is live.
 */
attn_status attn__ring_setup(MPI_Comm comm, bool bwd, const attn_view *q, const attn_view *k,
                             const attn_view *v, const attn_ring_opts *opts, const ring_io *io,
                             void **work, size_t work_size, void **owned, ring_ctx *c) {
    static const attn_ring_opts defaults = {0};
    int flag = 0;
    memset(c, 0, sizeof *c);
    c->bwd = bwd;
    c->comm = MPI_COMM_NULL;
    c->o = opts ? opts : &defaults;
    if (comm == MPI_COMM_NULL || MPI_Initialized(&flag) != MPI_SUCCESS || !flag ||
        MPI_Finalized(&flag) != MPI_SUCCESS || flag)
        return ATTN_EMPI;
    if (MPI_Comm_test_inter(comm, &flag) != MPI_SUCCESS || flag)
        return ATTN_EMPI;
    if (MPI_Comm_dup(comm, &c->comm) != MPI_SUCCESS) {
        c->comm = MPI_COMM_NULL;
        return ATTN_EMPI;
    }
    attn_status s = ATTN_EMPI;
    if (MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Comm_rank(c->comm, &c->rank) != MPI_SUCCESS ||
        MPI_Comm_size(c->comm, &c->P) != MPI_SUCCESS || c->P < 1)
        goto fail; /* same outcome on every rank: the MPI is unusable here */
    /* x = [fields, -fields, status, T]: one MAX gives max, min, worst status, T_max */
    s = check_local(q, k, v, c->o, io, c);
    int64_t x[2 * NF + 2], y[2 * NF + 2];
    for (int i = 0; i < NF; ++i) {
        x[i] = s == ATTN_OK ? c->f[i] : 0;
        x[NF + i] = -x[i];
    }
    x[2 * NF] = s;
    x[2 * NF + 1] = s == ATTN_OK ? c->T : 0;
    if (MPI_Allreduce(x, y, 2 * NF + 2, MPI_INT64_T, MPI_MAX, c->comm) != MPI_SUCCESS) {
        s = ATTN_EMPI;
        goto fail;
    }
    s = (attn_status)y[2 * NF];
    for (int i = 0; s == ATTN_OK && i < NF; ++i)
        if (y[i] != -y[NF + i])
            s = i == F_DTYPE ? ATTN_EDTYPE : i <= F_DV ? ATTN_ESHAPE : ATTN_EINVAL;
    if (s != ATTN_OK)
        goto fail; /* every rank saw the same y */
    c->Tmax = y[2 * NF + 1];
    s = layout_work(c);
    if (s == ATTN_OK && work) { /* the library's workspace rule (docs/reliability.md) */
        const attn_view *all[11];
        int n = call_views(q, k, v, io, all);
        s = attn__work_take(work, &work_size, c->total, all, n, owned);
    }
    s = agree(c->comm, s);
    if (s == ATTN_OK)
        return ATTN_OK;
fail:
    MPI_Comm_free(&c->comm);
    if (owned) {
        free(*owned);
        *owned = NULL;
    }
    return s;
}

static size_t workspace_size(MPI_Comm comm, bool bwd, const attn_view *q, const attn_view *k,
                             const attn_view *v, const attn_ring_opts *opts) {
    ring_ctx c;
    if (attn__ring_setup(comm, bwd, q, k, v, opts, NULL, NULL, 0, NULL, &c) != ATTN_OK)
        return 0;
    MPI_Comm_free(&c.comm);
    return c.total;
}

size_t attn_ring_sdpa_workspace_size(MPI_Comm comm, const attn_view *q_local,
                                     const attn_view *k_local, const attn_view *v_local,
                                     const attn_ring_opts *opts) {
    return workspace_size(comm, false, q_local, k_local, v_local, opts);
}

size_t attn_ring_sdpa_backward_workspace_size(MPI_Comm comm, const attn_view *q_local,
                                              const attn_view *k_local,
                                              const attn_view *v_local,
                                              const attn_ring_opts *opts) {
    return workspace_size(comm, true, q_local, k_local, v_local, opts);
}
