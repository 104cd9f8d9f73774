/* SPDX-License-Identifier: MIT */
/* Sequence-parallel ring attention over MPI (companion library attn_mpi, attn-mpi.pc). */
#ifndef ATTN_RING_H
#define ATTN_RING_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/export.h"
#include "attn/kernels.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: B batch, T sequence, H heads, Hkv key/value heads, D head
 * width (Dv value head width); P ranks in the communicator, T_r the tokens
 * held by rank r, n = sum of T_r the global sequence length.
 *
 * This header is NOT part of the umbrella attn/attn.h: it needs <mpi.h>.
 * Link with attn_mpi (`pkg-config --cflags --libs attn-mpi`), which requires
 * attn and the MPI. docs/distributed.md explains the algorithm.
 */

/** Which part of the global sequence each rank holds. */
typedef enum attn_ring_layout {
    /* rank r holds tokens [off_r, off_r + T_r), off_r = T_0 + ... + T_{r-1} */
    ATTN_RING_CONTIGUOUS = 0,
    /* the sequence is cut into 2P chunks; rank r holds chunk r (its first
       ceil(T_r / 2) tokens) followed by chunk 2P-1-r (its other floor(T_r / 2)),
       so under a causal mask every rank does the same work (load balanced) */
    ATTN_RING_ZIGZAG = 1
} attn_ring_layout;

/** Measurements of one attn_ring_sdpa(_backward) call on this rank (opts.stats). */
typedef struct attn_ring_stats {
    double seconds;         /* wall time of the whole call (a monotonic clock) */
    double wait_seconds;    /* time blocked in MPI_Waitall on the ring's exchange: the
                               communication that computation did not hide */
    int64_t bytes_sent;     /* bytes this rank sent around the ring (K/V blocks, and in
                               the backward the travelling dK/dV accumulators too) */
    int blocks_computed;    /* K/V blocks this rank attended to (of P) */
    int blocks_skipped;     /* blocks entirely in this rank's future (causal) */
    double compute_seconds; /* time in the local attention (attn_sdpa calls and merges):
                               its spread over the ranks is the load (im)balance */
} attn_ring_stats;

/**
 * Options for attn_ring_sdpa and attn_ring_sdpa_backward; all-zero means the
 * defaults. New fields only at the end.
 */
typedef struct attn_ring_opts {
    double scale;            /* 0 -> 1/sqrt(D); the same on every rank */
    attn_causal causal;      /* NONE, or TOP_LEFT over the global sequence (BOTTOM_RIGHT
                                is the same rule here: Tq == Tk globally); same on every rank */
    attn_ring_layout layout; /* same on every rank */
    const int64_t *kv_len;   /* (B) valid keys of THIS rank's k/v block per batch: local
                                key t is masked when t >= kv_len[b] (a ragged last block,
                                padded batches); NULL = all T_r valid */
    attn_view *lse;          /* out (B, H, T_r), q's dtype, natural-log sum-exp of the
                                scaled masked scores over the global keys; or NULL */
    int threads;             /* threads of the local attn_sdpa calls; 0 -> the BLAS's count */
    attn_ring_stats *stats;  /* out, or NULL */
    /* attention variants as in attn_sdpa_opts, positions global (a query's and a key's
       position in the whole sequence); the same on every rank */
    bool window;
    int64_t window_left, window_right;
    double softcap;
    const attn_view *alibi;  /* (H), q's dtype */
    const attn_view *sinks;  /* (H), q's dtype */
    attn_view *dsinks;       /* backward only: (H), accumulates dL/dsinks summed over
                                every rank's queries (the same on every rank) */
} attn_ring_opts;

/**
 * Ring attention (Liu, Zaharia, Abbeel 2023, arXiv 2310.01889). Collective
 * over comm: every rank calls it with its own block of one global sequence,
 *   out = softmax(scale * Q K^T + mask) V   over the n global keys,
 * for its own queries, and gets exactly what attn_sdpa computes on one
 * process over the whole sequence (same causal rule, GQA, masked keys, the
 * same out 0 / finite lse for a row that sees no key), with the variants of
 * opts (window, softcap, ALiBi, sinks; docs/numerics.md) at global
 * positions: key blocks wholly outside every local query's window are
 * skipped like blocks in the causal future.
 *
 * Shapes on rank r: q_local (B, H, T_r, D), k_local (B, Hkv, T_r, D),
 * v_local (B, Hkv, T_r, Dv), out_local (B, H, T_r, Dv); H % Hkv == 0. B, H,
 * Hkv, D, Dv, the dtype (F32 or F64), scale, causal and layout must agree
 * across ranks; T_r may differ (T_r == 0 allowed). Any strides.
 *
 * Algorithm: the K/V block of each rank travels around the ring (P - 1
 * MPI_Isend/MPI_Irecv steps, double-buffered in the workspace) while the
 * rank runs attn_sdpa (tiled, with lse) on the block in hand; partial
 * results merge through their lse. Under a causal mask, blocks entirely in
 * a rank's future are not computed. Memory per rank is O(T_max (D + Dv)
 * B Hkv + T_r Dv B H), T_max = max_r T_r: O(n/P d) for balanced blocks.
 *
 * Aliasing: out_local and opts->lse must not overlap q, k, v or each other.
 * Workspace: attn_ring_sdpa_workspace_size(...) bytes (collective too);
 * work == NULL && work_size == 0 allocates for this call. A caller workspace
 * must be 8-byte aligned (else ATTN_EINVAL) and must not overlap any argument
 * (ATTN_EALIAS). Exact at any finite logit magnitude: blocks merge by their
 * row max and sum in double (docs/numerics.md "Backward at large logits").
 * MPI: MPI must be initialized; the call duplicates comm (MPI_Comm_dup, so
 * its messages never mix with the caller's) with MPI_ERRORS_RETURN, and
 * issues MPI calls from the calling thread only (MPI_THREAD_FUNNELED, or
 * SINGLE when attn runs without OpenMP).
 *
 * Every rank returns the same status (the ranks agree on it before
 * returning): ATTN_OK; ATTN_EINVAL (NULL argument, malformed view, bad enum,
 * non-finite scale, threads < 0, bad variants as attn_sdpa's, dsinks given
 * to the forward or without sinks, or scale / causal / layout / the variants
 * differ across ranks); ATTN_EDTYPE (not F32/F64, mixed, or dtypes differ across ranks);
 * ATTN_ESHAPE (shapes inconsistent locally, H % Hkv, or B, H, Hkv, D, Dv
 * differ across ranks); ATTN_ESTRIDE (an output overlaps itself);
 * ATTN_EALIAS; ATTN_ERANGE (kv_len outside [0, T_r], as every per-batch
 * length; sizes overflow, or a K/V block of more than INT_MAX elements: one
 * MPI message); ATTN_EWORKSPACE; ATTN_ENOMEM;
 * ATTN_EMPI (comm is MPI_COMM_NULL or an intercommunicator, MPI not
 * initialized or already finalized, or an MPI call failed on some rank).
 * When several ranks fail differently the largest status code wins.
 * Outputs are untouched on every status except ATTN_EMPI raised during the
 * exchange itself, after which out_local and lse are unspecified.
 * Since 0.1.
 */
ATTN_API attn_status attn_ring_sdpa(MPI_Comm comm, const attn_view *q_local,
                                    const attn_view *k_local, const attn_view *v_local,
                                    const attn_ring_opts *opts, attn_view *out_local,
                                    void *work, size_t work_size);

/**
 * Bytes of workspace attn_ring_sdpa needs on this rank for these arguments.
 * Collective over comm (it learns the longest block, T_max): call it on
 * every rank. Returns 0 on every rank when the arguments are invalid on any
 * rank (the call itself then reports why). Since 0.1.
 */
ATTN_API size_t attn_ring_sdpa_workspace_size(MPI_Comm comm, const attn_view *q_local,
                                              const attn_view *k_local,
                                              const attn_view *v_local,
                                              const attn_ring_opts *opts);

/**
 * Backward of attn_ring_sdpa, collective over comm, ACCUMULATING like
 * attn_sdpa_backward (zero the gradients before the first backward of a
 * step; each of dq_local, dk_local, dv_local may be NULL):
 *   P = exp(scale q k^T - lse) over the visible global keys,
 *   dv += P^T dout,  dS = P * (dout v^T - rowsum(dout * out)),
 *   dq += scale dS k,  dk += scale dS^T q  (GQA: dk, dv sum their query heads),
 * where dk, dv of rank r's block sum the contributions of every rank's
 * queries. out_local (B, H, T_r, Dv) and lse_local (B, H, T_r) are this
 * rank's outputs of the forward attn_ring_sdpa (run it with opts.lse set);
 * dout_local has out's shape; dq_local, dk_local, dv_local have q's, k's,
 * v's shapes, any strides. opts must be the forward's (scale, causal,
 * layout, kv_len, variants); opts->lse is ignored; opts->dsinks (with sinks)
 * accumulates the sinks' gradient over the global sequence on every rank.
 *
 * Algorithm: the K/V blocks travel the ring as in the forward; each block's
 * dK/dV accumulator travels one step behind it, picking up every rank's
 * contribution (attn_sdpa_backward with the global out and lse, so each
 * block's P is the global probability), and a last step brings each
 * accumulator home to the block's owner. Each rank sends 2P - 1 messages.
 * Memory per rank: five packed blocks of B Hkv T_max (D + Dv) elements (two
 * K/V, two gradient accumulators, one scratch) plus attn_sdpa_backward's
 * tiles.
 *
 * Aliasing: the gradients must not overlap any input or each other.
 * Workspace: attn_ring_sdpa_backward_workspace_size(...) bytes (collective);
 * work == NULL && work_size == 0 allocates for this call.
 * Statuses as attn_ring_sdpa (every rank returns the same), with ATTN_EINVAL
 * also for a NULL out_local, lse_local or dout_local. Gradients are
 * untouched on every status except ATTN_EMPI raised during the exchange,
 * after which they are unspecified. Since 0.1.
 */
ATTN_API attn_status attn_ring_sdpa_backward(
    MPI_Comm comm, const attn_view *q_local, const attn_view *k_local, const attn_view *v_local,
    const attn_ring_opts *opts, const attn_view *out_local, const attn_view *lse_local,
    const attn_view *dout_local, attn_view *dq_local, attn_view *dk_local, attn_view *dv_local,
    void *work, size_t work_size);

/**
 * Bytes of workspace attn_ring_sdpa_backward needs on this rank. Collective,
 * like attn_ring_sdpa_workspace_size; 0 on every rank when the arguments
 * are invalid on any rank. Since 0.1.
 */
ATTN_API size_t attn_ring_sdpa_backward_workspace_size(MPI_Comm comm, const attn_view *q_local,
                                                       const attn_view *k_local,
                                                       const attn_view *v_local,
                                                       const attn_ring_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_RING_H */
