/* SPDX-License-Identifier: MIT */
/* attn::mpi from CMake: attn_ring_sdpa over MPI_COMM_WORLD equals attn_sdpa of the
   whole sequence (each rank holds T tokens of a causal sequence of P T). */
#include <math.h>
#include <stdio.h>

#include <attn/attn.h>
#include <attn/ring.h>

enum { T = 4, D = 4, TMAX = 64 };

static double val(int kind, int t, int d) { return sin(0.37 * t + 1.1 * d + 2.3 * kind); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (P * T > TMAX) {
        MPI_Finalize();
        return 2;
    }
    static double q[TMAX * D], k[TMAX * D], v[TMAX * D], o[TMAX * D], lq[T * D], lk[T * D],
        lv[T * D], lo[T * D];
    for (int t = 0; t < P * T; ++t)
        for (int d = 0; d < D; ++d) {
            q[t * D + d] = val(0, t, d);
            k[t * D + d] = val(1, t, d);
            v[t * D + d] = val(2, t, d);
        }
    for (int i = 0; i < T * D; ++i) {
        lq[i] = q[rank * T * D + i];
        lk[i] = k[rank * T * D + i];
        lv[i] = v[rank * T * D + i];
    }
    attn_view Q, K, V, O, LQ, LK, LV, LO;
    int64_t whole[4] = {1, 1, P * T, D}, part[4] = {1, 1, T, D};
    attn_view_init(&Q, ATTN_F64, q, 4, whole);
    attn_view_init(&K, ATTN_F64, k, 4, whole);
    attn_view_init(&V, ATTN_F64, v, 4, whole);
    attn_view_init(&O, ATTN_F64, o, 4, whole);
    attn_view_init(&LQ, ATTN_F64, lq, 4, part);
    attn_view_init(&LK, ATTN_F64, lk, 4, part);
    attn_view_init(&LV, ATTN_F64, lv, 4, part);
    attn_view_init(&LO, ATTN_F64, lo, 4, part);
    attn_sdpa_opts so = {0};
    so.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_ring_opts ro = {0};
    ro.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_status s1 = attn_sdpa(&Q, &K, &V, &so, &O, NULL, 0);
    attn_status s2 = attn_ring_sdpa(MPI_COMM_WORLD, &LQ, &LK, &LV, &ro, &LO, NULL, 0);
    double err = 0;
    for (int i = 0; i < T * D; ++i)
        err = fmax(err, fabs(lo[i] - o[rank * T * D + i]));
    int bad = s1 != ATTN_OK || s2 != ATTN_OK || !(err < 1e-12);
    if (rank == 0)
        printf("attn_ring_sdpa on %d rank(s): %s, max error %.2g\n", P,
               bad ? attn_strerror(s2) : "ok", err);
    MPI_Finalize();
    return bad;
}
