/* SPDX-License-Identifier: MIT */
/* Per-dtype body of attn_sdpa_backward (included by src/kernels/sdpa_backward.c between tmpl/dtype_on.h and dtype_off.h). */

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
static void SFX(bwd_tile)(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t j0,
                          unsigned want, char *wsp) {
    const attn__sdpa_plan *p = c->p;
    int64_t rows = p->Tq - i0 < p->bq ? p->Tq - i0 : p->bq;
    int64_t khi = attn__sdpa_key_limit(p, b, i0 + rows - 1);
    if (j0 >= khi)
        return;
    int64_t cols = khi - j0 < p->bk ? khi - j0 : p->bk, lds = p->bk, hk = h / p->group;
    if (p->has_keep && !attn__sdpa_keep_any(p, b, h, i0, rows, j0, cols))
        return;
    T *P = (T *)(wsp + c->off_p), *dS = (T *)(wsp + c->off_ds);
    void *gw = c->gws ? wsp + c->off_gw : NULL;
    attn__sdpa_scores(p, c->q, c->k, b, h, i0, rows, j0, cols, P, lds, gw, c->gws);
    for (int64_t r = 0; r < rows; ++r) {
        int64_t lim = attn__sdpa_key_limit(p, b, i0 + r) - j0;
        lim = lim < 0 ? 0 : lim > cols ? cols : lim;
        T lse = *(const T *)attn__at3(c->lse, b, h, i0 + r);
        T_VEXP_SUM(P + r * lds, lim, lse); /* masked (-inf) entries give exactly 0 */
        memset(P + r * lds + lim, 0, (size_t)(cols - lim) * sizeof(T));
    }
    attn_view pv = attn__sdpa_buf(p->dt, P, rows, cols, lds);
    attn_view dov = attn__sdpa_rows(c->dout, b, h, i0, rows);
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
        T dl = (T)delta, *pr = P + r * lds, *dr = dS + r * lds;
        for (int64_t j = 0; j < cols; ++j)
            dr[j] = pr[j] * (dr[j] - dl);
    }
    if (want & WANT_DK) {
        attn_view qt = attn__sdpa_rows(c->q, b, h, i0, rows);
        attn_view dkt = attn__sdpa_rows(c->dk, b, hk, j0, cols);
        attn__gemm_run(ATTN_TRANS, ATTN_NO_TRANS, p->scale, &dsv, &qt, 1.0, &dkt, gw, c->gws);
    }
    if (want & WANT_DQ) {
        attn_view kt = attn__sdpa_rows(c->k, b, hk, j0, cols);
        attn_view dqt = attn__sdpa_rows(c->dq, b, h, i0, rows);
        attn__gemm_run(ATTN_NO_TRANS, ATTN_NO_TRANS, p->scale, &dsv, &kt, 1.0, &dqt, gw, c->gws);
    }
}
