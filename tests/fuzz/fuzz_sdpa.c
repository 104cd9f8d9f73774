/* SPDX-License-Identifier: MIT */
/* Fuzz target: attn_sdpa with arbitrary shapes, strides, masks, options and workspaces vs
 * ref_sdpa. */
#include <limits.h>

#include "../ref/ref.h"
#include "fuzz_common.h"

static const double scales[] = {0.0, 0.5, 1.0, -1.0, 0.125, 3.0, NAN, INFINITY};

/* Mask shape: (B|1, H|1, Tq, Tk) in 4, 3 or 2 dims, sometimes one extent off. */
static int mask_shape(fz *f, const int64_t *full, int64_t *shape) {
    int nd = 2 + (int)fz_below(f, 3), lead = 4 - nd;
    for (int k = 0; k < nd; ++k) {
        int64_t e = full[k + lead];
        if (k + lead < 2 && fz_bool(f))
            e = 1;
        shape[k] = e;
    }
    if (fz_u8(f) >= 250) {
        int i = (int)fz_below(f, (uint32_t)nd); /* does not broadcast: ATTN_ESHAPE */
        shape[i] = (int64_t)((uint64_t)shape[i] + 1);
    }
    return nd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    attn_dtype dt = fz_bool(&f) ? ATTN_F64 : ATTN_F32;
    int64_t B = fz_extent(&f), Hkv = fz_extent(&f) % 4, group = 1 + fz_below(&f, 3);
    int64_t Tq = fz_extent(&f), Tk = fz_extent(&f), D = fz_extent(&f), Dv = fz_extent(&f);
    int64_t H = Hkv * group + (fz_u8(&f) >= 250); /* sometimes H % Hkv != 0 */
    int64_t sq[4] = {B, H, Tq, D}, sk[4] = {B, Hkv, Tk, D}, sv[4] = {B, Hkv, Tk, Dv};
    int64_t so[4] = {B, H, Tq, Dv}, sw[4] = {B, H, Tq, Tk};
    attn_view q, k, v, out, keep, bias, weights, lse;
    if (!fz_view(&f, dt, 4, sq, &q) || !fz_view(&f, fz_dtype(&f, dt), 4, sk, &k) ||
        !fz_view(&f, fz_dtype(&f, dt), 4, sv, &v) ||
        !fz_view(&f, fz_dtype(&f, dt), 4 - (fz_u8(&f) == 255), so, &out))
        return 0;
    attn_sdpa_opts o = {.scale = scales[fz_below(&f, 8)],
                        .causal = (attn_causal)fz_below(&f, 4),
                        .algo = (attn_algo)fz_below(&f, 4),
                        .block_q = (int64_t)fz_below(&f, 6) - (fz_u8(&f) == 1),
                        .block_k = (int64_t)fz_below(&f, 6),
                        .threads = (int)fz_below(&f, 3) - (fz_u8(&f) == 2)};
    int64_t msh[4];
    uint8_t opt = fz_u8(&f);
    if (opt & 1) {
        int nd = mask_shape(&f, sw, msh);
        if (!fz_view(&f, fz_u8(&f) == 7 ? dt : ATTN_U8, nd, msh, &keep))
            return 0;
        o.keep = &keep;
    }
    if (opt & 2) {
        int nd = mask_shape(&f, sw, msh);
        if (!fz_view(&f, fz_dtype(&f, dt), nd, msh, &bias))
            return 0;
        o.bias = &bias;
    }
    int64_t kv_len[8];
    if ((opt & 4) && B > 0 && B <= 8) {
        for (int64_t b = 0; b < B; ++b)
            kv_len[b] = (int64_t)fz_below(&f, (uint32_t)(Tk > 0 && Tk < 250 ? Tk + 2 : 3)) -
                        (fz_u8(&f) == 3);
        o.kv_len = kv_len;
    }
    if (opt & 8) {
        if (!fz_view(&f, fz_dtype(&f, dt), 4, sw, &weights))
            return 0;
        o.weights = &weights;
    }
    if (opt & 16) {
        if (!fz_view(&f, fz_dtype(&f, dt), 3, sq, &lse))
            return 0;
        o.lse = &lse;
    }
    const attn_view *ins[5] = {&q, &k, &v, o.keep, o.bias};
    const attn_view *outs[3] = {&out, o.weights, o.lse};
    for (int i = 0; i < 3; ++i)
        if (outs[i] && !fz_in_arena(outs[i]) && attn_view_check(outs[i]) == ATTN_OK)
            return 0;

    /* our reading of kernels.h's contract for attn_sdpa */
    bool ok = true;
    for (int i = 0; i < 5; ++i)
        ok = ok && (!ins[i] || attn_view_check(ins[i]) == ATTN_OK);
    for (int i = 0; i < 3; ++i)
        ok = ok && (!outs[i] || attn_view_check(outs[i]) == ATTN_OK);
    ok = ok && k.dtype == dt && v.dtype == dt && out.dtype == dt;
    ok = ok && fz_same_shape(&out, 4, so) && (Hkv > 0 ? H % Hkv == 0 : H == 0);
    ok = ok && (!o.keep || (keep.dtype == ATTN_U8 && fz_broadcasts(&keep, sw)));
    ok = ok && (!o.bias || (bias.dtype == dt && fz_broadcasts(&bias, sw)));
    ok = ok && (!o.weights || (weights.dtype == dt && fz_same_shape(&weights, 4, sw)));
    ok = ok && (!o.lse || (lse.dtype == dt && fz_same_shape(&lse, 3, sq)));
    for (int64_t b = 0; ok && o.kv_len && b < B; ++b)
        ok = kv_len[b] >= 0 && kv_len[b] <= Tk;
    ok = ok && (unsigned)o.causal <= ATTN_CAUSAL_BOTTOM_RIGHT &&
         (unsigned)o.algo <= ATTN_ALGO_TILED;
    ok = ok && o.block_q >= 0 && o.threads >= 0 && isfinite(o.scale);
    bool unsupported = ok && o.weights && o.algo == ATTN_ALGO_TILED;
    bool tiled = o.algo == ATTN_ALGO_TILED || (o.algo == ATTN_ALGO_AUTO && !o.weights);
    bool big = D > INT_MAX || Dv > INT_MAX || (!tiled && Tk > INT_MAX);
    bool alias = false;
    for (int i = 0; i < 3; ++i)
        for (int j = 0; outs[i] && j < 5; ++j)
            alias = alias || (ins[j] && fz_overlap(outs[i], ins[j]));
    for (int i = 0; i < 3; ++i)
        for (int j = i + 1; outs[i] && j < 3; ++j)
            alias = alias || (outs[j] && fz_overlap(outs[i], outs[j]));
    /* the reference loops over every row; the library must not when there is nothing to write
     */
    double rows = 1.0;
    for (int i = 0; i < 3; ++i)
        rows *= sw[i] > 0 ? (double)sw[i] : 0.0;
    double cost = rows * ((double)(Tk > 0 ? Tk : 0) + 1.0) *
                      ((double)(D > 0 ? D : 0) + (double)(Dv > 0 ? Dv : 0) + 1.0) +
                  (double)(B > 0 ? B : 0) * (double)(H > 0 ? H : 0); /* empty (b, h) loops */
    bool nothing = ok && fz_numel(&out) == 0 && (!o.weights || fz_numel(&weights) == 0) &&
                   (!o.lse || fz_numel(&lse) == 0);
    if (ok && !big && !nothing && cost > 32768)
        return 0; /* valid but too slow for the reference */
    size_t need = attn_sdpa_workspace_size(&q, &k, &v, &o);
    fz_work w;
    if (!fz_work_get(&f, need, &w))
        return 0;
    fz_fill(&f, dt);
    bool expect_ok = ok && !unsupported && !big && !alias;
    double *want = NULL, *want_w = NULL, *want_l = NULL;
    attn_view wo, ww, wl;
    if (expect_ok && !nothing) {
        want = malloc(sizeof(double) * (size_t)(fz_numel(&out) + 1));
        want_w = malloc(sizeof(double) * (size_t)(B * H * Tq * Tk + 1));
        want_l = malloc(sizeof(double) * (size_t)(B * H * Tq + 1));
        wo = fz_f64_like(&out, want);
        attn_view_init(&ww, ATTN_F64, want_w, 4, sw);
        attn_view_init(&wl, ATTN_F64, want_l, 3, sq);
        ref_sdpa(&q, &k, &v, &o, &wo, o.weights ? &ww : NULL, o.lse ? &wl : NULL);
    }
    const attn_view *args[8] = {&q, &k, &v, o.keep, o.bias, &out, o.weights, o.lse};
    fz_arm(args, 8);
    attn_status st = attn_sdpa(&q, &k, &v, &o, &out, w.ptr, w.size);
    fz_disarm();
    fz_check_untouched(st, outs, 3, "attn_sdpa");
    if (st == ATTN_OK) {
        FZ_REQUIRE(ok && !unsupported && !big, "attn_sdpa accepted an invalid call");
        FZ_REQUIRE(!alias, "attn_sdpa accepted outputs that alias");
        FZ_REQUIRE(!w.short_by_one, "attn_sdpa accepted a workspace one byte short");
        double rtol = dt == ATTN_F64 ? 1e-10 : 2e-4, atol = dt == ATTN_F64 ? 1e-12 : 1e-5;
        if (want)
            fz_check_close(&out, want, rtol, atol, "attn_sdpa out");
        if (want && o.weights)
            fz_check_close(&weights, want_w, rtol, atol, "attn_sdpa weights");
        if (want && o.lse) /* empty rows: -1e30 exactly, rounded to the dtype */
            fz_check_close(&lse, want_l, rtol, atol, "attn_sdpa lse");
    } else if (expect_ok) {
        FZ_REQUIRE(st == ATTN_ESTRIDE || (st == ATTN_EWORKSPACE && w.short_by_one),
                   "attn_sdpa refused a valid call: %s", attn_status_name(st));
    }
    if (unsupported && !big && !alias)
        FZ_REQUIRE(st != ATTN_OK, "weights with ATTN_ALGO_TILED accepted");
    free(want);
    free(want_w);
    free(want_l);
    fz_work_free(&w);
    return 0;
}
