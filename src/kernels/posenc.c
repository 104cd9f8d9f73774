/* SPDX-License-Identifier: MIT */
/* Positional encodings (sinusoidal table, learned additive table, RoPE) and patchify. */
#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"
#include "kernels/rows.h"

#define DEFAULT_BASE 10000.0

/* base 0 -> the default; negative, NaN or infinite bases are invalid (0 returned). */
static double resolve_base(double base) {
    if (base == 0)
        return DEFAULT_BASE;
    return base > 0 && isfinite(base) ? base : 0;
}

/* f_i = exp(-ln(base) * 2i / width): the seed's frequencies (and RoPE's base^(-2i/D)). */
static double frequency(double log_base, int64_t i, int64_t width) {
    return exp(-log_base * (double)(2 * i) / (double)width);
}

static void store(const attn_view *v, int64_t r, int64_t c, double x) {
    int64_t off = r * v->stride[0] + c * v->stride[1];
    if (v->dtype == ATTN_F32)
        ((float *)v->data)[off] = (float)x;
    else
        ((double *)v->data)[off] = x;
}

attn_status attn_posenc_sinusoidal(double base, attn_view *out) {
    ATTN_TRY(k_check_float(out, 0));
    if (out->ndim != 2)
        return ATTN_ESHAPE;
    int64_t T = out->shape[0], C = out->shape[1];
    base = resolve_base(base);
    if (C % 2 != 0 || base == 0)
        return ATTN_EINVAL;
    ATTN_TRY(k_check_out(out, 0, NULL, 0));
    double lb = log(base);
    for (int64_t i = 0; i < C / 2; ++i) {
        double f = frequency(lb, i, C);
        for (int64_t t = 0; t < T; ++t) {
            store(out, t, 2 * i, sin((double)t * f));
            store(out, t, 2 * i + 1, cos((double)t * f));
        }
    }
    return ATTN_OK;
}

/*
 * Shared checks of attn_posenc_add and its backward: a (B, T, C) or (T, C)
 * activation, a (Tmax, C) table, offset + T <= Tmax, no overlap between the
 * two; *rows is the table's rows offset..offset+T-1. act_out: the activation
 * is the output (forward), else the table is (backward).
 */
static attn_status check_table(int64_t offset, const attn_view *act, const attn_view *table,
                               bool act_out, attn_view *rows) {
    if (!table)
        return ATTN_EINVAL;
    ATTN_TRY(k_check_float(act, 0));
    ATTN_TRY(k_check_float(table, act->dtype));
    if ((act->ndim != 2 && act->ndim != 3) || table->ndim != 2 ||
        table->shape[1] != act->shape[act->ndim - 1])
        return ATTN_ESHAPE;
    if (offset < 0)
        return ATTN_EINVAL;
    int64_t T = act->shape[act->ndim - 2];
    if (offset > table->shape[0] || T > table->shape[0] - offset)
        return ATTN_ERANGE;
    ATTN_TRY(attn_view_slice(table, 0, offset, offset + T, 1, rows));
    if (attn__self_overlaps(act_out ? act : rows))
        return ATTN_ESTRIDE;
    return attn_view_overlaps(act, table) ? ATTN_EALIAS : ATTN_OK;
}

attn_status attn_posenc_add(int64_t offset, const attn_view *table, attn_view *x) {
    attn_view rows;
    ATTN_TRY(check_table(offset, x, table, true, &rows));
    attn__add_run(x, &rows, x); /* (T, C) broadcast over the batch */
    return ATTN_OK;
}

attn_status attn_posenc_add_backward(int64_t offset, const attn_view *dx, attn_view *dtable) {
    attn_view rows;
    ATTN_TRY(check_table(offset, dx, dtable, false, &rows));
    attn__add_backward_run(dx, NULL, &rows); /* sums over the batch */
    return ATTN_OK;
}

/* ---- RoPE ------------------------------------------------------------------------ */

typedef struct rope_plan {
    bool half_style;
    double log_base;
    int64_t offset, t, d, st, sd; /* first position, T, D, strides of the T and D axes */
    int nlead_dims;               /* dims before (T, D): 0..2 */
    int64_t lshape[2], lstride[2];
    int64_t nlead; /* number of leading indices (batch x heads) */
} rope_plan;

static inline double rope_inv_freq(const rope_plan *rp, int64_t i) {
    return frequency(rp->log_base, i, rp->d);
}

static inline int64_t rope_lead_offset(const rope_plan *rp, int64_t l) {
    int64_t off = 0;
    for (int k = rp->nlead_dims - 1; k >= 0; --k) {
        off += (l % rp->lshape[k]) * rp->lstride[k];
        l /= rp->lshape[k];
    }
    return off;
}

/* Instantiate the template for float, then double (include order matters). */
/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/rope.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/rope.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

/* The rotation on a view the checks below accepted (base already resolved). */
static void rope_apply(attn_rope_style style, double base, int64_t offset, attn_view *x,
                       double sign) {
    int nd = x->ndim;
    rope_plan rp = {.half_style = style == ATTN_ROPE_HALF,
                    .log_base = log(base),
                    .offset = offset,
                    .t = x->shape[nd - 2],
                    .d = x->shape[nd - 1],
                    .st = x->stride[nd - 2],
                    .sd = x->stride[nd - 1],
                    .nlead_dims = nd - 2,
                    .nlead = 1};
    for (int k = 0; k < nd - 2; ++k) {
        rp.lshape[k] = x->shape[k];
        rp.lstride[k] = x->stride[k];
        rp.nlead *= x->shape[k];
    }
    if (attn__numel(x) == 0)
        return;
    if (x->dtype == ATTN_F32)
        rope_f32(&rp, sign, x);
    else
        rope_f64(&rp, sign, x);
}

static attn_status rope_run(attn_rope_style style, double base, int64_t offset, attn_view *x,
                            double sign) {
    if (style != ATTN_ROPE_INTERLEAVED && style != ATTN_ROPE_HALF)
        return ATTN_EINVAL;
    ATTN_TRY(k_check_float(x, 0));
    if (x->ndim < 2)
        return ATTN_ESHAPE;
    int nd = x->ndim;
    base = resolve_base(base);
    if (x->shape[nd - 1] % 2 != 0 || offset < 0 || base == 0)
        return ATTN_EINVAL;
    if (x->shape[nd - 2] > INT64_MAX - offset)
        return ATTN_ERANGE;
    ATTN_TRY(k_check_out(x, 0, NULL, 0));
    rope_apply(style, base, offset, x, sign);
    return ATTN_OK;
}

void attn__rope_run(attn_rope_style style, double base, int64_t offset, attn_view *x,
                    bool backward) {
    rope_apply(style, resolve_base(base), offset, x, backward ? -1.0 : 1.0);
}

attn_status attn_rope(attn_rope_style style, double base, int64_t offset, attn_view *x) {
    return rope_run(style, base, offset, x, 1.0);
}

attn_status attn_rope_backward(attn_rope_style style, double base, int64_t offset,
                               attn_view *dx) {
    return rope_run(style, base, offset, dx, -1.0);
}

/* ---- patchify --------------------------------------------------------------------- */

attn_status attn_alibi_slopes(attn_view *slopes, double max_bias) {
    if (!slopes)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(slopes, 1));
    if (!(max_bias >= 0) || !isfinite(max_bias))
        return ATTN_EINVAL;
    int64_t H = slopes->shape[0];
    if (H < 1)
        return ATTN_ESHAPE;
    if (attn__self_overlaps(slopes))
        return ATTN_ESTRIDE;
    double mb = max_bias > 0 ? max_bias : 8.0;
    int64_t n = 1;
    while (n <= H / 2)
        n *= 2; /* 2^floor(log2 H) */
    double m0 = pow(2.0, -mb / (double)n), m1 = pow(2.0, -mb / 2.0 / (double)n);
    for (int64_t h = 0; h < H; ++h) {
        double m = h < n ? pow(m0, (double)(h + 1)) : pow(m1, (double)(2 * (h - n) + 1));
        void *e = attn__elem(slopes, &h);
        if (slopes->dtype == ATTN_F32)
            *(float *)e = (float)m;
        else
            *(double *)e = m;
    }
    return ATTN_OK;
}

attn_status attn_patchify(int64_t p, const attn_view *image, attn_view *out) {
    ATTN_TRY(k_check_float(image, 0));
    ATTN_TRY(k_check_float(out, image->dtype));
    if (p < 1)
        return ATTN_EINVAL;
    int nd = image->ndim;
    if (nd < 2)
        return ATTN_ESHAPE;
    /* image as (B, Ch, H, W) with B = Ch = 1 when absent */
    int64_t shp[4] = {1, 1, 1, 1}, str[4] = {0, 0, 0, 0};
    for (int k = 0; k < nd; ++k) {
        shp[4 - nd + k] = image->shape[k];
        str[4 - nd + k] = image->stride[k];
    }
    int64_t B = shp[0], Ch = shp[1], H = shp[2], W = shp[3];
    if (H % p != 0 || W % p != 0)
        return ATTN_ESHAPE;
    int64_t pw = W / p, N = (H / p) * pw, F = Ch * p * p;
    int ond = nd == 4 ? 3 : 2;
    int64_t want[3] = {B, N, F};
    if (out->ndim != ond)
        return ATTN_ESHAPE;
    for (int k = 0; k < ond; ++k)
        if (out->shape[k] != want[3 - ond + k])
            return ATTN_ESHAPE;
    ATTN_TRY(k_check_out(out, 1, (const attn_view *[]){image}, 0));
    int64_t ob = ond == 3 ? out->stride[0] : 0, on = out->stride[ond - 2],
            of = out->stride[ond - 1];
    size_t es = attn_dtype_size(image->dtype);
    const char *src = image->data;
    char *dst = out->data;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < Ch; ++c)
                for (int64_t i = 0; i < p; ++i)
                    for (int64_t j = 0; j < p; ++j) {
                        int64_t s = b * str[0] + c * str[1] + ((n / pw) * p + i) * str[2] +
                                    ((n % pw) * p + j) * str[3];
                        int64_t d = b * ob + n * on + ((c * p + i) * p + j) * of;
                        memcpy(dst + d * (int64_t)es, src + s * (int64_t)es, es);
                    }
    return ATTN_OK;
}
