/* SPDX-License-Identifier: MIT */
/* Fuzz target: attn_gemm on arbitrary views, workspaces and scalars against ref_gemm. */
#include <limits.h>

#include "../ref/ref.h"
#include "fuzz_common.h"

static const double scalars[] = {0.0, 1.0, -1.0, 0.5, 2.0, -0.25, 0.125, -3.0};

/* Broadcast compatibility of operand batch dims with C's (NumPy alignment from the right). */
static bool batch_ok(const attn_view *x, const attn_view *c) {
    int nbx = x->ndim - 2, nbc = c->ndim - 2;
    if (nbx > nbc)
        return false;
    for (int j = 0; j < nbx; ++j) {
        int64_t e = x->shape[j], ce = c->shape[j + nbc - nbx];
        if (e != ce && e != 1)
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    attn_dtype dt = fz_bool(&f) ? ATTN_F64 : ATTN_F32;
    attn_trans ta = (attn_trans)(fz_u8(&f) == 255 ? 2 : fz_below(&f, 2));
    attn_trans tb = (attn_trans)fz_below(&f, 2);
    double alpha = scalars[fz_below(&f, 8)], beta = scalars[fz_below(&f, 8)];
    int64_t M = fz_extent(&f), N = fz_extent(&f), K = fz_extent(&f);
    int nbc = (int)fz_below(&f, 3), nba = (int)fz_below(&f, 3), nbb = (int)fz_below(&f, 3);
    int64_t bc[2] = {fz_extent(&f), fz_extent(&f)};
    int64_t sa[4], sb[4], sc[4] = {bc[0], bc[1]};
    /* operand batch extents: C's (aligned from the right), 1, or anything */
    for (int j = 0; j < 2; ++j) {
        int ia = j + nbc - nba, ib = j + nbc - nbb;
        uint8_t c = fz_u8(&f);
        sa[j] = c < 160 && ia >= 0 && ia < nbc ? bc[ia] : c < 220 ? 1 : fz_extent(&f);
        c = fz_u8(&f);
        sb[j] = c < 160 && ib >= 0 && ib < nbc ? bc[ib] : c < 220 ? 1 : fz_extent(&f);
    }
    sa[nba] = ta ? K : M;
    sa[nba + 1] = ta ? M : K;
    sb[nbb] = tb ? N : K;
    sb[nbb + 1] = tb ? K : N;
    sc[nbc] = M;
    sc[nbc + 1] = N;
    if (fz_u8(&f) == 254)
        sb[nbb] = (int64_t)((uint64_t)sb[nbb] + 1); /* inner dims disagree: ATTN_ESHAPE */
    attn_view a, b, c;
    if (!fz_view(&f, fz_dtype(&f, dt), nba + 2, sa, &a) ||
        !fz_view(&f, fz_dtype(&f, dt), nbb + 2, sb, &b) ||
        !fz_view(&f, fz_dtype(&f, dt), nbc + 2 - (fz_u8(&f) == 253), sc, &c))
        return 0;
    if (fz_u8(&f) >= 240 && a.data && c.data) /* C starts inside A: ATTN_EALIAS */
        c.data = (unsigned char *)a.data + fz_es(c.dtype) * fz_below(&f, 4);
    if (!fz_in_arena(&c) && attn_view_check(&c) == ATTN_OK)
        return 0;

    /* our own reading of the contract */
    bool views_ok = attn_view_check(&a) == ATTN_OK && attn_view_check(&b) == ATTN_OK &&
                    attn_view_check(&c) == ATTN_OK;
    if (a.dtype == b.dtype && b.dtype == c.dtype)
        dt = c.dtype; /* all three swapped dtype: still a valid call */
    /* M, N, K and the batch as the views themselves say (the decoder may have bent them) */
    bool shapes = views_ok && ta <= 1 && a.ndim >= 2 && b.ndim >= 2 && c.ndim >= 2;
    if (shapes) {
        int na = a.ndim, nb = b.ndim, nc = c.ndim;
        M = c.shape[nc - 2], N = c.shape[nc - 1];
        K = ta ? a.shape[na - 2] : a.shape[na - 1];
        shapes = (ta ? a.shape[na - 1] : a.shape[na - 2]) == M &&
                 (tb ? b.shape[nb - 1] : b.shape[nb - 2]) == K &&
                 (tb ? b.shape[nb - 2] : b.shape[nb - 1]) == N && batch_ok(&a, &c) &&
                 batch_ok(&b, &c);
    }
    bool sane = shapes && a.dtype == dt && b.dtype == dt && c.dtype == dt &&
                (dt == ATTN_F32 || dt == ATTN_F64);
    bool big = M > INT_MAX || N > INT_MAX || K > INT_MAX;
    /* the reference loops over every batch and row, even of an empty C (the library must not)
     */
    double cost =
        (double)(M > 0 ? M : 0) * (1.0 + (double)(N > 0 ? N : 0) * ((K > 0 ? K : 0) + 1.0));
    double nbatch = 1.0;
    for (int i = 0; sane && i < c.ndim - 2; ++i)
        nbatch *= (double)c.shape[i];
    cost *= nbatch;
    bool run_ref = nbatch <= 4096.0;
    if (sane && !big && cost > 32768)
        return 0; /* valid but too slow to fuzz */
    size_t need = attn_gemm_workspace_size(ta, tb, &a, &b, &c);
    fz_work w;
    if (!fz_work_get(&f, need, &w))
        return 0;
    fz_fill(&f, dt == ATTN_F64 ? ATTN_F64 : ATTN_F32);
    double *want = NULL;
    attn_view wv;
    bool expect_ok = sane && !big && !fz_overlap(&c, &a) && !fz_overlap(&c, &b);
    if (expect_ok && run_ref) {
        want = malloc(sizeof(double) * (size_t)(fz_numel(&c) + 1));
        wv = fz_f64_like(&c, want);
        ref_gemm(ta, tb, alpha, &a, &b, beta, &c, &wv);
    }
    const attn_view *args[3] = {&a, &b, &c};
    fz_arm(args, 3);
    attn_status st = attn_gemm(ta, tb, alpha, &a, &b, beta, &c, w.ptr, w.size);
    fz_disarm();
    const attn_view *outs[1] = {&c};
    fz_check_untouched(st, outs, 1, "attn_gemm");
    if (st == ATTN_OK && !(sane && !big)) {
        fprintf(stderr, "ta %d tb %d M %lld N %lld K %lld\n", ta, tb, (long long)M,
                (long long)N, (long long)K);
        fz_print("a", &a), fz_print("b", &b), fz_print("c", &c);
    }
    if (st == ATTN_OK) {
        FZ_REQUIRE(sane && !big, "attn_gemm accepted invalid operands");
        FZ_REQUIRE(!fz_overlap(&c, &a) && !fz_overlap(&c, &b), "attn_gemm accepted aliasing");
        FZ_REQUIRE(!w.short_by_one, "attn_gemm accepted a workspace one byte short");
        /* dyadic values: every product and sum is exact in both dtypes */
        if (want)
            fz_check_close(&c, want, 0.0, 0.0, "attn_gemm");
    } else if (expect_ok) {
        /* only the documented reasons a valid, non-aliasing call may still refuse */
        FZ_REQUIRE(st == ATTN_ESTRIDE || (st == ATTN_EWORKSPACE && w.short_by_one),
                   "attn_gemm refused a valid call: %s", attn_status_name(st));
    }
    if (big && views_ok)
        FZ_REQUIRE(st != ATTN_OK, "attn_gemm accepted a dim beyond INT_MAX");
    free(want);
    fz_work_free(&w);
    return 0;
}
