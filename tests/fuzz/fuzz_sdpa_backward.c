/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: attn_sdpa_backward with arbitrary shapes, strides, masks, options,
 * gradient views and workspaces against ref_sdpa_backward. out and lse are the
 * reference forward's (double, rounded to the dtype), so nothing the library computed
 * feeds its own check. Offset mode puts every score at one huge constant (q = 0, a bias
 * of -1e9 / 1e30 / -1e20): the saved lse must still give the uniform softmax.
 */
#include <limits.h>

#include "../ref/ref.h"
#include "fuzz_common.h"

static const double scales[] = {0.0, 0.5, 1.0, -1.0, 0.125, 3.0, NAN, INFINITY};

static int mask_shape(fz *f, const int64_t *full, int64_t *shape) {
    int nd = 2 + (int)fz_below(f, 3), lead = 4 - nd;
    for (int k = 0; k < nd; ++k) {
        int64_t e = full[k + lead];
        if (k + lead < 2 && fz_bool(f))
            e = 1;
        shape[k] = e;
    }
    if (fz_u8(f) >= 250) {
        int i = (int)fz_below(f, (uint32_t)nd);
        shape[i] = (int64_t)((uint64_t)shape[i] + 1);
    }
    return nd;
}
/* Write want (row-major doubles) into the float view v, element by element. */
static void store(const attn_view *v, const double *want) {
    int64_t n = fz_numel(v), idx[ATTN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; ++e) {
        int64_t off = 0;
        for (int k = 0; k < v->ndim; ++k)
            off += idx[k] * v->stride[k];
        unsigned char *p = (unsigned char *)v->data + off * fz_es(v->dtype);
        if (v->dtype == ATTN_F64)
            memcpy(p, &want[e], 8);
        else {
            float y = (float)want[e];
            memcpy(p, &y, 4);
        }
        for (int k = v->ndim - 1; k >= 0; --k) {
            if (++idx[k] < v->shape[k])
                break;
            idx[k] = 0;
        }
    }
}
/* True when v reaches one element twice (a stride 0, overlapping strides): storing the
 * reference's per-element values into it keeps only the last, so the call would not see
 * the out or lse the reference computed. */
static bool hits_twice(const attn_view *v) {
    int64_t n = fz_numel(v), idx[ATTN_MAX_DIMS] = {0}, es = fz_es(v->dtype);
    if (n <= 1 || !fz_in_arena(v))
        return false;
    unsigned char *seen = calloc(fz_bytes(), 1);
    bool twice = false;
    for (int64_t e = 0; e < n && !twice; ++e) {
        int64_t off = 0;
        for (int k = 0; k < v->ndim; ++k)
            off += idx[k] * v->stride[k];
        size_t b = (size_t)((unsigned char *)v->data - fz_mem()) + (size_t)(off * es);
        twice = seen[b] != 0;
        seen[b] = 1;
        for (int k = v->ndim - 1; k >= 0; --k) {
            if (++idx[k] < v->shape[k])
                break;
            idx[k] = 0;
        }
    }
    free(seen);
    return twice;
}

static void store_const(const attn_view *v, double x) {
    int64_t n = fz_numel(v);
    double *d = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t e = 0; e < n; ++e)
        d[e] = x;
    store(v, d);
    free(d);
}
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    attn_dtype dt = fz_bool(&f) ? ATTN_F64 : ATTN_F32;
    int64_t B = fz_extent(&f), Hkv = fz_extent(&f) % 4, group = 1 + fz_below(&f, 3);
    int64_t Tq = fz_extent(&f), Tk = fz_extent(&f), D = fz_extent(&f), Dv = fz_extent(&f);
    int64_t H = Hkv * group + (fz_u8(&f) >= 250);
    int64_t sq[4] = {B, H, Tq, D}, sk[4] = {B, Hkv, Tk, D}, sv[4] = {B, Hkv, Tk, Dv};
    int64_t so[4] = {B, H, Tq, Dv}, sw[4] = {B, H, Tq, Tk};
    attn_view q, k, v, out, lse, dout, dq, dk, dv, keep, bias;
    if (!fz_view(&f, dt, 4, sq, &q) || !fz_view(&f, fz_dtype(&f, dt), 4, sk, &k) ||
        !fz_view(&f, fz_dtype(&f, dt), 4, sv, &v) ||
        !fz_view(&f, fz_dtype(&f, dt), 4, so, &out) ||
        !fz_view(&f, fz_dtype(&f, dt), 3 + (fz_u8(&f) == 255), sq, &lse) ||
        !fz_view(&f, fz_dtype(&f, dt), 4, so, &dout))
        return 0;
    uint8_t gmask = fz_u8(&f);
    if ((gmask & 1) && !fz_view(&f, fz_dtype(&f, dt), 4, sq, &dq))
        return 0;
    if ((gmask & 2) && !fz_view(&f, fz_dtype(&f, dt), 4, sk, &dk))
        return 0;
    if ((gmask & 4) && !fz_view(&f, fz_dtype(&f, dt), 4, sv, &dv))
        return 0;
    attn_view *g[3] = {(gmask & 1) ? &dq : NULL, (gmask & 2) ? &dk : NULL,
                       (gmask & 4) ? &dv : NULL};
    attn_sdpa_opts o = {.scale = scales[fz_below(&f, 8)],
                        .causal = (attn_causal)fz_below(&f, 4),
                        .algo = (attn_algo)fz_below(&f, 4),
                        .block_q = (int64_t)fz_below(&f, 6) - (fz_u8(&f) == 1),
                        .block_k = (int64_t)fz_below(&f, 6) - (fz_u8(&f) == 1),
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
    bool offset = (opt & 32) && o.bias;
    static const double offsets[2][3] = {{-1e9, 1e9, -1e30}, {-1e20, 1e30, -1e16}};
    double off_value = offsets[dt == ATTN_F64][fz_below(&f, 3)];
    const attn_view *ins[8] = {&q, &k, &v, &out, &lse, &dout, o.keep, o.bias};
    for (int i = 0; i < 3; ++i)
        if (g[i] && !fz_in_arena(g[i]) && attn_view_check(g[i]) == ATTN_OK)
            return 0;
    for (int i = 3; i < 6; ++i) /* written below: they must lie in the arena */
        if (!fz_in_arena(ins[i]) && attn_view_check(ins[i]) == ATTN_OK)
            return 0;

    bool ok = true;
    for (int i = 0; i < 8; ++i)
        ok = ok && (!ins[i] || attn_view_check(ins[i]) == ATTN_OK);
    for (int i = 0; i < 3; ++i)
        ok = ok && (!g[i] || attn_view_check(g[i]) == ATTN_OK);
    ok = ok && k.dtype == dt && v.dtype == dt && out.dtype == dt && lse.dtype == dt &&
         dout.dtype == dt;
    for (int i = 0; i < 3; ++i)
        ok = ok && (!g[i] || g[i]->dtype == dt);
    ok = ok && fz_same_shape(&lse, 3, sq) && (Hkv > 0 ? H % Hkv == 0 : H == 0);
    for (int d = 0; d < 4; ++d)
        ok = ok && sq[d] >= 0 && sk[d] >= 0 && sv[d] >= 0;
    ok = ok && (!o.keep || (keep.dtype == ATTN_U8 && fz_broadcasts(&keep, sw)));
    ok = ok && (!o.bias || (bias.dtype == dt && fz_broadcasts(&bias, sw)));
    for (int64_t b = 0; ok && o.kv_len && b < B; ++b)
        ok = kv_len[b] >= 0 && kv_len[b] <= Tk;
    ok = ok && (unsigned)o.causal <= ATTN_CAUSAL_BOTTOM_RIGHT &&
         (unsigned)o.algo <= ATTN_ALGO_TILED;
    ok = ok && o.block_q >= 0 && o.block_k >= 0 && o.threads >= 0 && isfinite(o.scale);
    bool tiled = o.algo == ATTN_ALGO_TILED || o.algo == ATTN_ALGO_AUTO;
    bool big = D > INT_MAX || Dv > INT_MAX || (!tiled && Tk > INT_MAX) || Tq > INT_MAX;
    bool alias = false;
    for (int i = 0; i < 3; ++i)
        for (int j = 0; g[i] && j < 8; ++j)
            alias = alias || (ins[j] && fz_overlap(g[i], ins[j]));
    for (int i = 0; i < 3; ++i)
        for (int j = i + 1; g[i] && j < 3; ++j)
            alias = alias || (g[j] && fz_overlap(g[i], g[j]));
    double rows = 1.0;
    for (int i = 0; i < 3; ++i)
        rows *= sw[i] > 0 ? (double)sw[i] : 0.0;
    double cost = rows * ((double)(Tk > 0 ? Tk : 0) + 1.0) *
                      ((double)(D > 0 ? D : 0) + (double)(Dv > 0 ? Dv : 0) + 1.0) +
                  (double)(B > 0 ? B : 0) * (double)(H > 0 ? H : 0);
    bool nothing = true; /* then dims beyond INT_MAX may pass */
    for (int i = 0; i < 3; ++i)
        nothing = nothing && (!g[i] || attn_view_check(g[i]) != ATTN_OK || fz_numel(g[i]) == 0);
    bool big_any = big;
    if (big && nothing)
        big = false;
    if (ok && !big && !nothing && cost > 32768)
        return 0;
    size_t need = attn_sdpa_backward_workspace_size(&q, &k, &v, &o);
    fz_work w;
    if (!fz_work_get(&f, need, &w))
        return 0;
    fz_fill(&f, dt);
    bool expect_ok = ok && !big && !alias;
    double *want[3] = {0};
    if (expect_ok && !nothing) {
        if (offset) { /* every score the same huge constant */
            store_const(&q, 0.0);
            store_const(&bias, off_value);
        }
        /* out and lse of the reference forward; they may overlap inputs (not gradients) */
        double *ro = malloc(sizeof(double) * (size_t)(fz_numel(&out) + 1));
        double *rl = malloc(sizeof(double) * (size_t)(B * H * Tq + 1));
        attn_view wo = fz_f64_like(&out, ro), wl;
        attn_view_init(&wl, ATTN_F64, rl, 3, sq);
        if (Hkv > 0) /* Hkv == 0 (so H == 0): nothing to compute */
            ref_sdpa(&q, &k, &v, &o, &wo, NULL, &wl);
        static const int others[] = {0, 1, 2, 6, 7}; /* q k v keep bias */
        bool clash = fz_overlap(&out, &lse) || fz_overlap(&dout, &out) ||
                     fz_overlap(&dout, &lse) || hits_twice(&out) || hits_twice(&lse);
        for (int j = 0; j < 5; ++j) /* writing out or lse would change an input */
            clash = clash || (ins[others[j]] && (fz_overlap(&out, ins[others[j]]) ||
                                                 fz_overlap(&lse, ins[others[j]])));
        if (!clash) {
            store(&out, ro);
            store(&lse, rl);
        }
        free(ro), free(rl);
        if (clash) { /* the reference's inputs would not be the call's */
            fz_work_free(&w);
            return 0;
        }
        double *r[3];
        attn_view rv[3];
        const attn_view *like[3] = {&q, &k, &v};
        for (int i = 0; i < 3; ++i) {
            r[i] = calloc((size_t)(fz_numel(like[i]) + 1), sizeof(double));
            rv[i] = fz_f64_like(like[i], r[i]);
        }
        if (Hkv > 0)
            ref_sdpa_backward(&q, &k, &v, &o, &dout, &rv[0], &rv[1], &rv[2]);
        for (int i = 0; i < 3; ++i) {
            if (g[i]) {
                want[i] = fz_doubles(g[i]);
                for (int64_t e = 0; e < fz_numel(g[i]); ++e)
                    want[i][e] += r[i][e];
            }
            free(r[i]);
        }
    }
    const attn_view *args[11] = {&q,     &k,     &v,   &out, &lse, &dout,
                                 o.keep, o.bias, g[0], g[1], g[2]};
    fz_arm(args, 11);
    attn_status st =
        attn_sdpa_backward(&q, &k, &v, &o, &out, &lse, &dout, g[0], g[1], g[2], w.ptr, w.size);
    fz_disarm();
    const attn_view *outs[3] = {g[0], g[1], g[2]};
    fz_check_untouched(st, outs, 3, "attn_sdpa_backward");
    if (getenv("FZ_VERBOSE") || (st == ATTN_OK && (!ok || big || alias)) ||
        (st != ATTN_OK && expect_ok && st != ATTN_ESTRIDE && !big_any &&
         !(st == ATTN_EWORKSPACE && w.short_by_one))) {
        fprintf(stderr,
                "ok %d big %d alias %d nothing %d B %lld H %lld Hkv %lld Tq %lld Tk %lld "
                "D %lld Dv %lld: %s\n",
                ok, big, alias, nothing, (long long)B, (long long)H, (long long)Hkv,
                (long long)Tq, (long long)Tk, (long long)D, (long long)Dv,
                attn_status_name(st));
        for (int i = 0; i < 8; ++i)
            if (ins[i])
                fz_print("in", ins[i]);
        for (int i = 0; i < 3; ++i)
            if (g[i])
                fz_print("grad", g[i]);
    }
    if (st == ATTN_OK) {
        FZ_REQUIRE(ok && !big, "attn_sdpa_backward accepted an invalid call");
        FZ_REQUIRE(!alias, "attn_sdpa_backward accepted gradients that alias");
        FZ_REQUIRE(!w.short_by_one, "attn_sdpa_backward accepted a workspace one byte short");
        /* f32: the lse rounded to f32 moves P by |lse| 2^-24 relative */
        double rtol = dt == ATTN_F64 ? 1e-9 : 2e-3, atol = dt == ATTN_F64 ? 1e-10 : 2e-3;
        for (int i = 0; i < 3; ++i)
            if (want[i])
                fz_check_close(g[i], want[i], rtol, atol, "attn_sdpa_backward gradient");
    } else if (expect_ok) {
        FZ_REQUIRE(st == ATTN_ESTRIDE || (st == ATTN_EWORKSPACE && w.short_by_one) ||
                       (st == ATTN_ERANGE && big_any),
                   "attn_sdpa_backward refused a valid call: %s", attn_status_name(st));
    }
    for (int i = 0; i < 3; ++i)
        free(want[i]);
    fz_work_free(&w);
    return 0;
}
