/* SPDX-License-Identifier: MIT */
/* attn_layernorm and its backward over the last dim (biased variance, eps inside the root). */
#include <math.h>

#include "kernels/kernels_internal.h"
#include "kernels/rows.h"
#include "kernels/simd.h"

/* Instantiate the template for float, then double (include order matters). */
/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/layernorm.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/layernorm.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

/* A per-row statistic (mean, rstd): x's shape minus the last dim; (1) for a 1-D x. */
static attn_status check_stat(const attn_view *s, const attn_view *x) {
    ATTN_TRY(k_check_float(s, x->dtype));
    int nd = x->ndim > 1 ? x->ndim - 1 : 1;
    if (s->ndim != nd)
        return ATTN_ESHAPE;
    for (int k = 0; k < nd; ++k)
        if (s->shape[k] != (x->ndim > 1 ? x->shape[k] : 1))
            return ATTN_ESHAPE;
    return ATTN_OK;
}

/* A (C) parameter vector (gamma, beta or their gradients). */
static attn_status check_param(const attn_view *p, const attn_view *x) {
    ATTN_TRY(k_check_float(p, x->dtype));
    return p->ndim == 1 && p->shape[0] == x->shape[x->ndim - 1] ? ATTN_OK : ATTN_ESHAPE;
}

/* The statistics seen as rows of one element, in the same row order as x's rows. */
static void stat_iter(k_iter *it, const attn_view *a, const attn_view *b) {
    attn_view v[2] = {*a, *b};
    for (int i = 0; i < 2; ++i) {
        v[i].shape[v[i].ndim] = 1;
        v[i].stride[v[i].ndim] = 1;
        v[i].ndim++;
    }
    k_iter_init(it, 2, (const attn_view *[]){&v[0], &v[1]}, false);
}

static attn_status layernorm_check(double eps, const attn_view *x, const attn_view *gamma,
                                   const attn_view *beta, const attn_view *y,
                                   const attn_view *mean, const attn_view *rstd) {
    ATTN_TRY(k_check_float(x, 0));
    ATTN_TRY(k_check_float(y, x->dtype));
    if (!(eps >= 0) || !isfinite(eps))
        return ATTN_EINVAL;
    if (gamma)
        ATTN_TRY(check_param(gamma, x));
    if (beta)
        ATTN_TRY(check_param(beta, x));
    if (mean)
        ATTN_TRY(check_stat(mean, x));
    if (rstd)
        ATTN_TRY(check_stat(rstd, x));
    if (!k_same_shape(x, y) || x->shape[x->ndim - 1] == 0)
        return ATTN_ESHAPE;
    const attn_view *in[] = {x, gamma, beta};
    ATTN_TRY(k_check_out(y, 3, in, 1u));
    const attn_view *outs[] = {mean, rstd};
    for (int i = 0; i < 2; ++i) {
        if (!outs[i])
            continue;
        ATTN_TRY(k_check_out(outs[i], 3, in, 0));
        if (attn_view_overlaps(outs[i], y) ||
            (i == 1 && mean && attn_view_overlaps(rstd, mean)))
            return ATTN_EALIAS;
    }
    return ATTN_OK;
}

attn_status attn_layernorm(double eps, const attn_view *x, const attn_view *gamma,
                           const attn_view *beta, attn_view *y, attn_view *mean,
                           attn_view *rstd) {
    ATTN_TRY(layernorm_check(eps, x, gamma, beta, y, mean, rstd));
    attn__layernorm_run(eps, x, gamma, beta, y, mean, rstd);
    return ATTN_OK;
}

void attn__layernorm_run(double eps, const attn_view *x, const attn_view *gamma,
                         const attn_view *beta, attn_view *y, attn_view *mean,
                         attn_view *rstd) {
    ATTN_ASSERT(layernorm_check(eps, x, gamma, beta, y, mean, rstd) == ATTN_OK);
    if (attn__numel(x) == 0)
        return;
    k_iter it, ist;
    k_iter_init(&it, 2, (const attn_view *[]){x, y}, false);
    if (mean || rstd)
        stat_iter(&ist, mean ? mean : rstd, rstd ? rstd : mean);
    const k_iter *pst = mean || rstd ? &ist : NULL;
    int64_t sg = gamma ? gamma->stride[0] : 0, sb = beta ? beta->stride[0] : 0;
    if (x->dtype == ATTN_F32) {
        ln_affine_f32 a = {gamma ? gamma->data : NULL, beta ? beta->data : NULL, sg, sb};
        layernorm_f32(eps, &it, x, y, a, pst, mean, rstd);
    } else {
        ln_affine_f64 a = {gamma ? gamma->data : NULL, beta ? beta->data : NULL, sg, sb};
        layernorm_f64(eps, &it, x, y, a, pst, mean, rstd);
    }
}

static attn_status backward_check(const attn_view *x, const attn_view *gamma,
                                  const attn_view *mean, const attn_view *rstd,
                                  const attn_view *dy, const attn_view *dx,
                                  const attn_view *dgamma, const attn_view *dbeta) {
    ATTN_TRY(k_check_float(x, 0));
    ATTN_TRY(check_stat(mean, x));
    ATTN_TRY(check_stat(rstd, x));
    ATTN_TRY(k_check_float(dy, x->dtype));
    if (gamma)
        ATTN_TRY(check_param(gamma, x));
    if (dx)
        ATTN_TRY(k_check_float(dx, x->dtype));
    if (dgamma)
        ATTN_TRY(check_param(dgamma, x));
    if (dbeta)
        ATTN_TRY(check_param(dbeta, x));
    if (!k_same_shape(x, dy) || (dx && !k_same_shape(x, dx)) || x->shape[x->ndim - 1] == 0)
        return ATTN_ESHAPE;
    const attn_view *in[] = {x, gamma, mean, rstd, dy};
    const attn_view *outs[] = {dx, dgamma, dbeta};
    for (int i = 0; i < 3; ++i) {
        if (!outs[i])
            continue;
        ATTN_TRY(k_check_out(outs[i], 5, in, 0));
        for (int j = 0; j < i; ++j)
            if (outs[j] && attn_view_overlaps(outs[i], outs[j]))
                return ATTN_EALIAS;
    }
    return ATTN_OK;
}

attn_status attn_layernorm_backward(const attn_view *x, const attn_view *gamma,
                                    const attn_view *mean, const attn_view *rstd,
                                    const attn_view *dy, attn_view *dx, attn_view *dgamma,
                                    attn_view *dbeta) {
    ATTN_TRY(backward_check(x, gamma, mean, rstd, dy, dx, dgamma, dbeta));
    attn__layernorm_backward_run(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
    return ATTN_OK;
}

void attn__layernorm_backward_run(const attn_view *x, const attn_view *gamma,
                                  const attn_view *mean, const attn_view *rstd,
                                  const attn_view *dy, attn_view *dx, attn_view *dgamma,
                                  attn_view *dbeta) {
    ATTN_ASSERT(backward_check(x, gamma, mean, rstd, dy, dx, dgamma, dbeta) == ATTN_OK);
    if (attn__numel(x) == 0)
        return;
    k_iter it, ist;
    k_iter_init(&it, 3, (const attn_view *[]){x, dy, dx ? dx : dy}, false);
    stat_iter(&ist, mean, rstd);
    int64_t sg = gamma ? gamma->stride[0] : 0;
    int64_t sdg = dgamma ? dgamma->stride[0] : 0, sdb = dbeta ? dbeta->stride[0] : 0;
    if (x->dtype == ATTN_F32) {
        if (dx)
            layernorm_bwd_dx_f32(&it, x, dy, dx, gamma ? gamma->data : NULL, sg, &ist, mean,
                                 rstd);
        if (dgamma || dbeta)
            layernorm_bwd_params_f32(&it, x, dy, &ist, mean, rstd, dgamma ? dgamma->data : NULL,
                                     sdg, dbeta ? dbeta->data : NULL, sdb);
    } else {
        if (dx)
            layernorm_bwd_dx_f64(&it, x, dy, dx, gamma ? gamma->data : NULL, sg, &ist, mean,
                                 rstd);
        if (dgamma || dbeta)
            layernorm_bwd_params_f64(&it, x, dy, &ist, mean, rstd, dgamma ? dgamma->data : NULL,
                                     sdg, dbeta ? dbeta->data : NULL, sdb);
    }
}
