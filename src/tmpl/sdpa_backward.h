/* SPDX-License-Identifier: MIT */
/* Per-dtype body of attn_sdpa_backward (included by src/kernels/sdpa_backward.c between
 * tmpl/dtype_on.h and dtype_off.h). */

/*
 * One (query block, key tile) pair of batch b, query head h (FlashAttention-2
 * backward, Dao 2023, Algorithm 2), recomputing the probabilities from lse:
 *   P  = exp(S - lse)                 S = scale q k^T + bias, masked -inf
 *   dV += P^T dO                      (want & WANT_DV)
 *   dP = dO V^T,  dS = P (dP - delta), delta_i = dO_i . O_i
 *   dK += scale dS^T Q                (want & WANT_DK)
 *   dQ += scale dS K                  (want & WANT_DQ)
 * Tiles past the causal / kv_len limit, or fully masked by keep, are skipped.
 */
/*
 * The lse corrections of query block (b, h, i0): kap[r] = log sum_j exp(s_rj - lse_r)
 * over the visible keys, for the rows whose lse is too large to recompute P from
 * (flag[r]); cached per thread for the next tile of the same block. S tiles are
 * computed into P (free until the caller's own S).
 */
/*
 * For the flagged rows of query block (b, h, i0): sum[r] += sum over the visible keys
 * of exp(s_rj - lse_r), S tiles computed into the P buffer (free until the caller's own
 * S). exp(s - lse) <= 1 since lse >= max s.
 */
static void SFX(bwd_row_sums)(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t rows,
                              char *wsp, const unsigned char *flag, double *sum,
                              int64_t stride) {
    const attn__sdpa_plan *p = c->p;
    T *S = (T *)(wsp + c->off_p);
    void *gw = c->gws ? wsp + c->off_gw : NULL;
    int64_t khi = attn__sdpa_key_limit(p, b, i0 + rows - 1), lds = p->bk;
    for (int64_t j0 = 0; j0 < khi; j0 += p->bk) {
        int64_t cols = khi - j0 < p->bk ? khi - j0 : p->bk;
        if (p->has_keep && !attn__sdpa_keep_any(p, b, h, i0, rows, j0, cols))
            continue;
        attn__sdpa_scores(p, c->q, c->k, b, h, i0, rows, j0, cols, S, lds, gw, c->gws);
        for (int64_t r = 0; r < rows; ++r) {
            if (!flag[r])
                continue;
            int64_t lim = attn__sdpa_key_limit(p, b, i0 + r) - j0;
            lim = lim < 0 ? 0 : lim > cols ? cols : lim;
            /* s - lse is exact in T (nearby values); its exp <= 1 (lse >= max s) */
            T L = *(const T *)attn__at3(c->lse, b, h, i0 + r), *x = S + r * lds;
            for (int64_t j = 0; j < lim; ++j)
                x[j] -= L;
            sum[r * stride] += (double)T_VEXP_SUM(x, lim, 0);
        }
    }
}

/*
 * The lse corrections of query block (b, h, i0): kap[r] = log sum_j exp(s_rj - lse_r)
 * over the visible keys, for the rows whose lse is inexact (flag[r]); cached per
 * thread for the next tile of the same block. Given corrections (ring attention)
 * are read instead.
 */
static void SFX(bwd_kappa)(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t rows,
                           char *wsp, const double **kap_out, const unsigned char **flag_out) {
    const attn__sdpa_plan *p = c->p;
    bwd_kap *tag = (bwd_kap *)(wsp + c->off_kap);
    double *kap = (double *)(tag + 1);
    unsigned char *flag = (unsigned char *)(kap + p->bq);
    *kap_out = kap;
    *flag_out = flag;
    if (tag->valid && tag->b == b && tag->h == h && tag->i0 == i0)
        return;
    tag->b = b, tag->h = h, tag->i0 = i0, tag->valid = 1;
    if (c->kappa.base) {
        const double *g = c->kappa.base + b * c->kappa.s0 + h * c->kappa.s1 + i0;
        for (int64_t r = 0; r < rows; ++r) {
            kap[r] = g[r];
            flag[r] = g[r] != 0;
        }
        return;
    }
    bool any = false;
    for (int64_t r = 0; r < rows; ++r) {
        double L = (double)*(const T *)attn__at3(c->lse, b, h, i0 + r);
        flag[r] = attn__sdpa_lse_inexact(p->dt, L);
        kap[r] = 0;
        any = any || flag[r];
    }
    if (!any)
        return;
    SFX(bwd_row_sums)(c, b, h, i0, rows, wsp, flag, kap, 1);
    double sink = attn__sdpa_sink(p, h); /* its share of the row: e^{sink - lse} */
    for (int64_t r = 0; r < rows; ++r)
        if (flag[r] && p->has_sinks)
            kap[r] += exp(sink - (double)*(const T *)attn__at3(c->lse, b, h, i0 + r));
    for (int64_t r = 0; r < rows; ++r)
        if (flag[r]) {
            if (kap[r] > 0 || kap[r] != kap[r])
                kap[r] = log(kap[r]);
            else
                flag[r] = 0, kap[r] = 0; /* no visible key: every P is 0 anyway */
        }
}

/* attn__sdpa_lse_sums for query block (b, h, i0). */
static void SFX(bwd_sums_task)(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0, char *wsp) {
    const attn__sdpa_plan *p = c->p;
    int64_t rows = p->Tq - i0 < p->bq ? p->Tq - i0 : p->bq;
    unsigned char *flag =
        (unsigned char *)((double *)((bwd_kap *)(wsp + c->off_kap) + 1) + p->bq);
    bool any = false;
    for (int64_t r = 0; r < rows; ++r) {
        double L = (double)*(const T *)attn__at3(c->lse, b, h, i0 + r);
        flag[r] = attn__sdpa_lse_inexact(p->dt, L);
        any = any || flag[r];
    }
    if (any)
        SFX(bwd_row_sums)
        (c, b, h, i0, rows, wsp, flag, c->sums.base + b * c->sums.s0 + h * c->sums.s1 + i0, 1);
}

#if T_IS_F32
#define SDPA_VEXP_TAIL attn__vexp_tail_f32
#define SDPA_FINITE    attn__finite_f32
#define SDPA_DS        attn__sdpa_ds_f32
#define SDPA_TANH      tanhf
#else
#define SDPA_VEXP_TAIL attn__vexp_tail_f64
#define SDPA_FINITE    attn__finite_f64
#define SDPA_DS        attn__sdpa_ds_f64
#define SDPA_TANH      tanh
#endif

#include "tmpl/view_finite.h"

/*
 * The tile's products by scalar loops in double, skipping every pair whose P is 0
 * (masked, or exp underflowed): the slow path when an operand holds NaN or inf, so
 * that a value stored at a masked position never reaches a pair that cannot see it
 * (docs/numerics.md "Masked positions and NaN").
 */
static void SFX(bwd_tile_exact)(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0,
                                int64_t rows, int64_t j0, int64_t cols, unsigned want,
                                const T *P, const T *G, int64_t lds) {
    const attn__sdpa_plan *p = c->p;
    int64_t hk = h / p->group, D = p->D, Dv = p->Dv;
    const attn_view *q = c->q, *k = c->k, *v = c->v, *o = c->out, *g = c->dout;
    for (int64_t r = 0; r < rows; ++r) {
        int64_t i = i0 + r;
        double delta = 0;
        for (int64_t d = 0; d < Dv; ++d)
            delta += (double)*(const T *)attn__at4(o, b, h, i, d) *
                     (double)*(const T *)attn__at4(g, b, h, i, d);
        for (int64_t jj = 0; jj < cols; ++jj) {
            double pr = (double)P[r * lds + jj];
            if (pr == 0)
                continue;
            int64_t j = j0 + jj;
            double dp = 0;
            for (int64_t d = 0; d < Dv; ++d) {
                double gd = (double)*(const T *)attn__at4(g, b, h, i, d);
                dp += gd * (double)*(const T *)attn__at4(v, b, hk, j, d);
                if (want & WANT_DV) {
                    T *dvp = (T *)attn__at4(c->dv, b, hk, j, d);
                    *dvp = (T)((double)*dvp + pr * gd);
                }
            }
            double ds = (T)(pr * (dp - delta)) * p->scale;
            if (G) /* softcap: d(cap tanh(u / cap)) / du */
                ds *= (double)G[r * lds + jj];
            for (int64_t d = 0; d < D; ++d) {
                if (want & WANT_DK) {
                    T *dkp = (T *)attn__at4(c->dk, b, hk, j, d);
                    *dkp =
                        (T)((double)*dkp + ds * (double)*(const T *)attn__at4(q, b, h, i, d));
                }
                if (want & WANT_DQ) {
                    T *dqp = (T *)attn__at4(c->dq, b, h, i, d);
                    *dqp =
                        (T)((double)*dqp + ds * (double)*(const T *)attn__at4(k, b, hk, j, d));
                }
            }
        }
    }
}

static void SFX(bwd_tile)(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t j0,
                          unsigned want, char *wsp) {
    const attn__sdpa_plan *p = c->p;
    int64_t rows = p->Tq - i0 < p->bq ? p->Tq - i0 : p->bq;
    int64_t khi = attn__sdpa_key_limit(p, b, i0 + rows - 1);
    if (j0 >= khi)
        return;
    int64_t cols = khi - j0 < p->bk ? khi - j0 : p->bk, lds = p->bk, hk = h / p->group;
    if (p->variant && j0 + cols <= attn__sdpa_row_of(p, b, i0).lo)
        return; /* left of the first row's window, or of its packed sequence */
    if (p->has_keep && !attn__sdpa_keep_any(p, b, h, i0, rows, j0, cols))
        return;
    T *P = (T *)(wsp + c->off_p), *dS = (T *)(wsp + c->off_ds);
    T *G = p->softcap > 0 ? (T *)(wsp + c->off_g) : NULL;
    void *gw = c->gws ? wsp + c->off_gw : NULL;
    const double *kap;
    const unsigned char *flag;
    SFX(bwd_kappa)(c, b, h, i0, rows, wsp, &kap, &flag);
    /* P = exp(S - lse) row by row while the row is in L1: bias and keep, exp, 0 past lim */
    attn__sdpa_scores_gemm(p, c->q, c->k, b, h, i0, rows, j0, cols, P, lds, gw, c->gws);
    for (int64_t r = 0; r < rows; ++r) {
        int64_t lim = attn__sdpa_key_limit(p, b, i0 + r) - j0;
        lim = lim < 0 ? 0 : lim > cols ? cols : lim;
        T lse = *(const T *)attn__at3(c->lse, b, h, i0 + r);
        T *pr = P + r * lds;
        if (G) { /* softcap's derivative 1 - tanh^2(u / cap), from the raw score u */
            T cap = (T)p->softcap, *gr = G + r * lds;
            for (int64_t j = 0; j < lim; ++j) {
                T t = SDPA_TANH(pr[j] / cap);
                gr[j] = 1 - t * t;
            }
        }
        attn__sdpa_mask_row(p, b, h, i0 + r, j0, lim, pr);
        if (flag[r]) { /* exact at any magnitude: s - lse (exact in T), minus the correction */
            for (int64_t j = 0; j < lim; ++j)
                pr[j] -= lse;
            SDPA_VEXP_TAIL(pr, lim, cols, (T)kap[r]);
        } else {
            SDPA_VEXP_TAIL(pr, lim, cols, lse); /* masked (-inf) entries give exactly 0 */
        }
    }
    attn_view pv = attn__sdpa_buf(p->dt, P, rows, cols, lds);
    attn_view dov = attn__sdpa_rows(c->dout, b, h, i0, rows);
    /* NaN or inf in an operand: the exact path, so that 0 * NaN never reaches a gradient */
    {
        attn_view qt = attn__sdpa_rows(c->q, b, h, i0, rows);
        attn_view kt = attn__sdpa_rows(c->k, b, hk, j0, cols);
        attn_view vt = attn__sdpa_rows(c->v, b, hk, j0, cols);
        attn_view ot = attn__sdpa_rows(c->out, b, h, i0, rows);
        if (!SFX(view_finite)(&dov) || !SFX(view_finite)(&vt) || !SFX(view_finite)(&ot) ||
            ((want & WANT_DK) && !SFX(view_finite)(&qt)) ||
            ((want & WANT_DQ) && !SFX(view_finite)(&kt))) {
            SFX(bwd_tile_exact)(c, b, h, i0, rows, j0, cols, want, P, G, lds);
            return;
        }
    }
    if (want & WANT_DV) {
        attn_view dvt = attn__sdpa_rows(c->dv, b, hk, j0, cols);
        attn__gemm_run(ATTN_TRANS, ATTN_NO_TRANS, 1.0, &pv, &dov, 1.0, &dvt, gw, c->gws);
    }
    if (!(want & (WANT_DK | WANT_DQ)))
        return;
    attn_view dsv = attn__sdpa_buf(p->dt, dS, rows, cols, lds);
    attn_view vt = attn__sdpa_rows(c->v, b, hk, j0, cols);
    attn__gemm_run(ATTN_NO_TRANS, ATTN_TRANS, 1.0, &dov, &vt, 0.0, &dsv, gw, c->gws);
    int64_t Dv = p->Dv, so = c->out->stride[3], sd = c->dout->stride[3];
    for (int64_t r = 0; r < rows; ++r) {
        const T *orow = (const T *)attn__at4(c->out, b, h, i0 + r, 0);
        const T *drow = (const T *)attn__at4(c->dout, b, h, i0 + r, 0);
        double delta = 0;
        for (int64_t d = 0; d < Dv; ++d)
            delta += (double)orow[d * so] * (double)drow[d * sd];
        /* dS = P (dP - delta); a zero weight is an exact zero */
        SDPA_DS(P + r * lds, dS + r * lds, cols, (T)delta);
        if (G) { /* softcap: dU = dS (1 - tanh^2); only where P != 0 (G is junk elsewhere) */
            int64_t lim = attn__sdpa_key_limit(p, b, i0 + r) - j0;
            lim = lim < 0 ? 0 : lim > cols ? cols : lim;
            T *dr = dS + r * lds;
            const T *gr = G + r * lds, *pr = P + r * lds;
            for (int64_t j = 0; j < lim; ++j)
                dr[j] = pr[j] != 0 ? dr[j] * gr[j] : dr[j];
        }
    }
    if (want & WANT_DK) {
        attn_view qt = attn__sdpa_rows(c->q, b, h, i0, rows);
        attn_view dkt = attn__sdpa_rows(c->dk, b, hk, j0, cols);
        attn__gemm_run(ATTN_TRANS, ATTN_NO_TRANS, p->scale, &dsv, &qt, 1.0, &dkt, gw, c->gws);
    }
    if (want & WANT_DQ) {
        attn_view kt = attn__sdpa_rows(c->k, b, hk, j0, cols);
        attn_view dqt = attn__sdpa_rows(c->dq, b, h, i0, rows);
        attn__gemm_run(ATTN_NO_TRANS, ATTN_NO_TRANS, p->scale, &dsv, &kt, 1.0, &dqt, gw,
                       c->gws);
    }
}

#undef SDPA_VEXP_TAIL
#undef SDPA_FINITE
#undef SDPA_DS
#undef SDPA_TANH
