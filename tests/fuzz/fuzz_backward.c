/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the backward kernels (softmax, layernorm, linear, activation, add) with
 * arbitrary shapes, layouts, dtypes, aliasing and workspaces, against the naive
 * references of tests/ref (which add to the initial gradients, as the library does).
 */
#include <limits.h>

#include "../ref/ref.h"
#include "fuzz_common.h"

/* A shape from dims, sometimes one extent off (then the call must fail). */
static void shape_of(fz *f, int nd, const int64_t *dims, int64_t *sh, bool *off) {
    for (int k = 0; k < nd; ++k)
        sh[k] = dims[k];
    if (fz_u8(f) >= 252) {
        int i = (int)fz_below(f, (uint32_t)nd);
        if (sh[i] >= 0 && !*off) { /* one perturbation per call: two could agree again */
            sh[i] = (int64_t)((uint64_t)sh[i] + 1); /* wraps for INT64_MAX: still wrong */
            *off = true;
        }
    }
}

/* Overwrite the elements of a float view with small dyadic values (e.g. for mean / rstd). */
static void set_all(const attn_view *v, double (*fn)(int64_t)) {
    int64_t n = fz_numel(v), idx[ATTN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; ++e) {
        int64_t off = 0;
        for (int k = 0; k < v->ndim; ++k)
            off += idx[k] * v->stride[k];
        unsigned char *p = (unsigned char *)v->data + off * fz_es(v->dtype);
        double x = fn(e);
        if (v->dtype == ATTN_F64)
            memcpy(p, &x, 8);
        else {
            float y = (float)x;
            memcpy(p, &y, 4);
        }
        for (int k = v->ndim - 1; k >= 0; --k) {
            if (++idx[k] < v->shape[k])
                break;
            idx[k] = 0;
        }
    }
}
static double rstd_of(int64_t e) { return 0.5 + (double)(e % 4) / 4; }
static double prob_of(int64_t e) { return (double)(1 + e % 3) / 8; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    int kind = (int)fz_below(&f, 5); /* softmax layernorm linear activation add */
    attn_dtype dt = fz_bool(&f) ? ATTN_F64 : ATTN_F32;
    int nd = 1 + (int)fz_below(&f, 4);
    int64_t dims[4];
    for (int k = 0; k < nd; ++k)
        dims[k] = fz_extent(&f);
    int64_t out_w = fz_extent(&f); /* linear: Out */
    attn_act act = (attn_act)fz_below(&f, 4);
    bool off = false; /* a shape deliberately wrong */
    attn_view v[8];
    const attn_view *in[6] = {0};
    attn_view *out[3] = {0};
    int nin = 0, nout = 0;
    int64_t sh[4];
    uint8_t opt = fz_u8(&f);
    int64_t C = dims[nd - 1];
    int64_t lead[4];
    for (int k = 0; k < nd - 1; ++k)
        lead[k] = dims[k];
    int lnd = nd > 1 ? nd - 1 : 1;
    if (nd == 1)
        lead[0] = 1;
    switch (kind) {
    case 0: /* softmax backward: y, dy | dx */
        for (int i = 0; i < 3; ++i) {
            shape_of(&f, nd, dims, sh, &off);
            if (!fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[i]))
                return 0;
        }
        in[nin++] = &v[0], in[nin++] = &v[1], out[nout++] = &v[2];
        break;
    case 1: /* layernorm backward: x, gamma?, mean, rstd, dy | dx?, dgamma?, dbeta? */
        shape_of(&f, nd, dims, sh, &off);
        if (!fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[0]))
            return 0;
        if ((opt & 1) &&
            (shape_of(&f, 1, &C, sh, &off), !fz_view(&f, fz_dtype(&f, dt), 1, sh, &v[1])))
            return 0;
        for (int i = 2; i < 4; ++i) {
            shape_of(&f, lnd, lead, sh, &off);
            if (!fz_view(&f, fz_dtype(&f, dt), lnd, sh, &v[i]))
                return 0;
        }
        shape_of(&f, nd, dims, sh, &off);
        if (!fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[4]))
            return 0;
        in[nin++] = &v[0], in[nin++] = (opt & 1) ? &v[1] : NULL, in[nin++] = &v[2],
        in[nin++] = &v[3], in[nin++] = &v[4];
        if ((opt & 2) &&
            (shape_of(&f, nd, dims, sh, &off), !fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[5])))
            return 0;
        if ((opt & 4) &&
            (shape_of(&f, 1, &C, sh, &off), !fz_view(&f, fz_dtype(&f, dt), 1, sh, &v[6])))
            return 0;
        if ((opt & 8) &&
            (shape_of(&f, 1, &C, sh, &off), !fz_view(&f, fz_dtype(&f, dt), 1, sh, &v[7])))
            return 0;
        out[nout++] = (opt & 2) ? &v[5] : NULL;
        out[nout++] = (opt & 4) ? &v[6] : NULL;
        out[nout++] = (opt & 8) ? &v[7] : NULL;
        break;
    case 2: { /* linear backward: x (.., In), w (In, Out), dy (.., Out) | dx?, dw?, db? */
        if (nd > 3)
            nd = 3;
        C = dims[nd - 1];
        int64_t wsh[2] = {C, out_w}, ysh[4];
        memcpy(ysh, dims, sizeof ysh);
        ysh[nd - 1] = out_w;
        shape_of(&f, nd, dims, sh, &off);
        if (!fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[0]))
            return 0;
        shape_of(&f, 2, wsh, sh, &off);
        if (!fz_view(&f, fz_dtype(&f, dt), 2, sh, &v[1]))
            return 0;
        shape_of(&f, nd, ysh, sh, &off);
        if (!fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[2]))
            return 0;
        in[nin++] = &v[0], in[nin++] = &v[1], in[nin++] = &v[2];
        if ((opt & 1) &&
            (shape_of(&f, nd, dims, sh, &off), !fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[3])))
            return 0;
        if ((opt & 2) &&
            (shape_of(&f, 2, wsh, sh, &off), !fz_view(&f, fz_dtype(&f, dt), 2, sh, &v[4])))
            return 0;
        if ((opt & 4) &&
            (shape_of(&f, 1, &out_w, sh, &off), !fz_view(&f, fz_dtype(&f, dt), 1, sh, &v[5])))
            return 0;
        out[nout++] = (opt & 1) ? &v[3] : NULL;
        out[nout++] = (opt & 2) ? &v[4] : NULL;
        out[nout++] = (opt & 4) ? &v[5] : NULL;
        break;
    }
    case 3: /* activation backward: x, dy | dx */
        for (int i = 0; i < 3; ++i) {
            shape_of(&f, nd, dims, sh, &off);
            if (!fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[i]))
                return 0;
        }
        in[nin++] = &v[0], in[nin++] = &v[1], out[nout++] = &v[2];
        break;
    default: { /* add backward: dy | dx?, db? (db broadcasts to dy: trailing dims, some 1) */
        if (!fz_view(&f, fz_dtype(&f, dt), nd, dims, &v[0])) /* dy sets the shapes */
            return 0;
        if ((opt & 1) &&
            (shape_of(&f, nd, dims, sh, &off), !fz_view(&f, fz_dtype(&f, dt), nd, sh, &v[1])))
            return 0;
        int bnd = 1 + (int)fz_below(&f, (uint32_t)nd);
        int64_t bsh[4];
        for (int k = 0; k < bnd; ++k)
            bsh[k] = fz_bool(&f) ? 1 : dims[nd - bnd + k];
        if ((opt & 2) &&
            !fz_view(&f, fz_dtype(&f, dt), bnd, bsh, &v[2])) /* 0 -> 1 would still broadcast */
            return 0;
        in[nin++] = &v[0];
        out[nout++] = (opt & 1) ? &v[1] : NULL;
        out[nout++] = (opt & 2) ? &v[2] : NULL;
        break;
    }
    }
    for (int i = 0; i < nout; ++i)
        if (out[i] && !fz_in_arena(out[i]) && attn_view_check(out[i]) == ATTN_OK)
            return 0;
    /* our reading of kernels.h: every view well formed, one float dtype, the shapes right */
    bool ok = !off && (kind != 3 || (unsigned)act <= ATTN_ACT_RELU);
    /* one float dtype for every view: the first input's (the call's dtype is its own) */
    attn_dtype cdt = in[0]->dtype;
    ok = ok && (cdt == ATTN_F32 || cdt == ATTN_F64);
    for (int i = 0; i < nin; ++i)
        ok = ok && (!in[i] || (attn_view_check(in[i]) == ATTN_OK && in[i]->dtype == cdt));
    for (int i = 0; i < nout; ++i)
        ok = ok && (!out[i] || (attn_view_check(out[i]) == ATTN_OK && out[i]->dtype == cdt));
    for (int k = 0; k < nd; ++k)
        ok = ok && dims[k] >= 0;
    ok = ok && (kind != 2 || out_w >= 0);
    if (kind == 1)
        ok = ok && C > 0; /* layernorm of an empty row: ESHAPE */
    bool alias = false;
    for (int i = 0; i < nout; ++i)
        for (int j = 0; out[i] && j < nin; ++j)
            alias = alias || (in[j] && fz_overlap(out[i], in[j]));
    for (int i = 0; i < nout; ++i)
        for (int j = i + 1; out[i] && j < nout; ++j)
            alias = alias || (out[j] && fz_overlap(out[i], out[j]));
    double n = 1;
    for (int k = 0; k < nd; ++k)
        n *= dims[k] > 0 ? (double)dims[k] : 0.0;
    double nr = 1; /* rows: the references loop over them even when a row is empty */
    for (int k = 0; k < nd - 1; ++k)
        nr *= dims[k] > 0 ? (double)dims[k] : 0.0;
    double cw = dims[nd - 1] > 0 ? (double)dims[nd - 1] : 0.0;
    double cost = nr * (cw + 1.0) * (kind == 2 ? (double)(out_w > 0 ? out_w : 0) + 1.0 : 4.0);
    bool big = false;
    /* dims that reach the BLAS (docs/reliability.md section 2): In, Out and the row dim
     * of each product; leading dims are merged into rows when the total fits, else
     * looped over, so a leading dim beyond INT_MAX is no error (an empty one: no work) */
    if (kind == 2)
        big = dims[nd - 1] > INT_MAX || out_w > INT_MAX || (nd >= 2 && dims[nd - 2] > INT_MAX);
    /* dims beyond INT_MAX must fail unless there is nothing to write (then either) */
    bool nothing = true;
    for (int i = 0; i < nout; ++i)
        nothing =
            nothing && (!out[i] || attn_view_check(out[i]) != ATTN_OK || fz_numel(out[i]) == 0);
    bool big_any = big;
    if (big && nothing)
        big = false;
    if (ok && !big && cost > 65536)
        return 0;
    size_t need = kind == 2
                      ? attn_linear_backward_workspace_size(in[0], in[1], in[2], out[0], out[1])
                      : 0;
    fz_work w;
    if (!fz_work_get(&f, need, &w))
        return 0;
    fz_fill(&f, cdt == ATTN_F64 ? ATTN_F64 : ATTN_F32);
    /* valid statistics and probabilities where the formulas need them */
    if (kind == 1 && ok && !alias) {
        set_all(&v[3], rstd_of);
    }
    if (kind == 0 && ok && !alias)
        set_all(&v[0], prob_of);
    bool expect_ok = ok && !alias && !big;
    /* the references, on the initial gradients */
    double *want[3] = {0};
    attn_view wv[3];
    if (expect_ok) {
        for (int i = 0; i < nout; ++i)
            if (out[i]) {
                want[i] = fz_doubles(out[i]);
                wv[i] = fz_f64_like(out[i], want[i]);
            }
        switch (kind) {
        case 0:
            ref_softmax_backward(in[0], in[1], &wv[0]);
            break;
        case 1: {
            /* ref_layernorm_backward recomputes mean / rstd from x; use the given ones by
               passing eps such that they agree only when they do: compare to the formula
               with the saved statistics instead (below) */
            break;
        }
        case 2:
            ref_linear_backward(in[0], in[1], in[2], out[0] ? &wv[0] : NULL,
                                out[1] ? &wv[1] : NULL, out[2] ? &wv[2] : NULL);
            break;
        case 3:
            ref_activation_backward(act, in[0], in[1], &wv[0]);
            break;
        default:
            ref_add_backward(in[0], out[0] ? &wv[0] : NULL, out[1] ? &wv[1] : NULL);
            break;
        }
        if (kind == 1) { /* the documented formula with the saved mean and rstd, in double */
            int64_t rows = (int64_t)(n / (C > 0 ? (double)C : 1.0)), idx[4] = {0};
            for (int64_t r = 0; r < rows; ++r) {
                int64_t li[4] = {0}, t = r;
                for (int k = lnd - 1; k >= 0; --k) {
                    int64_t e = nd > 1 ? lead[k] : 1;
                    li[k] = t % e, t /= e;
                }
                for (int k = 0; k < nd - 1; ++k)
                    idx[k] = li[k];
                double mu = fz_get(in[2], li), rs = fz_get(in[3], li), mg = 0, mgx = 0;
                for (int64_t j = 0; j < C; ++j) {
                    idx[nd - 1] = j;
                    double xh = (fz_get(in[0], idx) - mu) * rs;
                    double g = fz_get(in[4], idx) * (in[1] ? fz_get(in[1], &j) : 1.0);
                    mg += g, mgx += g * xh;
                }
                mg /= (double)C, mgx /= (double)C;
                for (int64_t j = 0; j < C; ++j) {
                    idx[nd - 1] = j;
                    double xh = (fz_get(in[0], idx) - mu) * rs, dy = fz_get(in[4], idx);
                    double g = dy * (in[1] ? fz_get(in[1], &j) : 1.0);
                    if (want[0])
                        want[0][r * C + j] += rs * (g - mg - xh * mgx);
                    if (want[1])
                        want[1][j] += dy * xh;
                    if (want[2])
                        want[2][j] += dy;
                }
            }
        }
    }
    const attn_view *args[9];
    int na = 0;
    for (int i = 0; i < nin; ++i)
        args[na++] = in[i];
    for (int i = 0; i < nout; ++i)
        args[na++] = out[i];
    fz_arm(args, na);
    attn_status st;
    switch (kind) {
    case 0:
        st = attn_softmax_backward(in[0], in[1], out[0]);
        break;
    case 1:
        st = attn_layernorm_backward(in[0], in[1], in[2], in[3], in[4], out[0], out[1], out[2]);
        break;
    case 2:
        st = attn_linear_backward(in[0], in[1], in[2], out[0], out[1], out[2], w.ptr, w.size);
        break;
    case 3:
        st = attn_activation_backward(act, in[0], in[1], out[0]);
        break;
    default:
        st = attn_add_backward(in[0], out[0], out[1]);
        break;
    }
    fz_disarm();
    static const char *names[] = {"attn_softmax_backward", "attn_layernorm_backward",
                                  "attn_linear_backward", "attn_activation_backward",
                                  "attn_add_backward"};
    const attn_view *co[3] = {out[0], out[1], out[2]};
    fz_check_untouched(st, co, nout, names[kind]);
    if (getenv("FZ_VERBOSE") || (st == ATTN_OK && (!ok || big || alias)) ||
        (st != ATTN_OK && expect_ok && st != ATTN_ESTRIDE && !big_any &&
         !(st == ATTN_EWORKSPACE && w.short_by_one))) {
        fprintf(stderr, "kind %d act %d ok %d big %d alias %d off %d: %s\n", kind, (int)act, ok,
                big, alias, off, attn_status_name(st));
        for (int i = 0; i < nin; ++i)
            if (in[i])
                fz_print("in", in[i]);
        for (int i = 0; i < nout; ++i)
            if (out[i])
                fz_print("out", out[i]);
    }
    if (st == ATTN_OK) {
        FZ_REQUIRE(ok && !big, "%s accepted an invalid call", names[kind]);
        FZ_REQUIRE(!alias, "%s accepted outputs that alias", names[kind]);
        FZ_REQUIRE(!w.short_by_one, "%s accepted a workspace one byte short", names[kind]);
        double rtol = cdt == ATTN_F64 ? 1e-10 : 1e-4, atol = cdt == ATTN_F64 ? 1e-10 : 1e-4;
        for (int i = 0; i < nout; ++i)
            if (want[i])
                fz_check_close(out[i], want[i], rtol, atol, names[kind]);
    } else if (expect_ok) {
        FZ_REQUIRE(st == ATTN_ESTRIDE || (st == ATTN_EWORKSPACE && w.short_by_one) ||
                       (st == ATTN_ERANGE && big_any),
                   "%s refused a valid call: %s", names[kind], attn_status_name(st));
    }
    for (int i = 0; i < 3; ++i)
        free(want[i]);
    fz_work_free(&w);
    return 0;
}
