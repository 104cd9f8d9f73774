/* SPDX-License-Identifier: MIT */
/* Activations (forward, backward), adds and the broadcast-sum of add's backward, for one
 * dtype T (see tmpl/dtype_on.h). */

/*
 * Forward in T's own precision (the FFN's hot loop); the formulas are the seeds':
 *   GELU tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   GELU erf:  0.5 x (1 + erf(x / sqrt(2))), written as 0.5 x erfc(-x / sqrt(2)), which
 *              is the same function without the cancellation for negative x
 *   ReLU:      max(x, 0); NaN stays NaN.
 */
static inline T SFX(act_fwd)(attn_act act, T x) {
    switch (act) {
    case ATTN_ACT_GELU_TANH:
        return (T)0.5 * x * ((T)1 + T_TANH((T)K_SQRT_2_PI * (x + (T)0.044715 * x * x * x)));
    case ATTN_ACT_GELU_ERF:
        return (T)0.5 * x * T_ERFC(-x * (T)K_SQRT1_2);
    case ATTN_ACT_RELU:
        break;
    }
    return x < 0 ? (T)0 : x;
}

/* act'(x) in double (f32 GELU tanh takes gelu_tanh_fast_bwd below instead). */
static inline double SFX(act_grad)(attn_act act, double x) {
    switch (act) {
    case ATTN_ACT_GELU_TANH: {
        double u = K_SQRT_2_PI * (x + 0.044715 * x * x * x), t = tanh(u);
        return 0.5 * (1 + t) +
               0.5 * x * (1 - t) * (1 + t) * K_SQRT_2_PI * (1 + 3 * 0.044715 * x * x);
    }
    case ATTN_ACT_GELU_ERF: /* Phi(x) + x phi(x) */
        return 0.5 * erfc(-x * K_SQRT1_2) + x * exp(-0.5 * x * x) * K_INV_SQRT_2PI;
    case ATTN_ACT_RELU:
        break;
    }
    return x > 0 ? 1.0 : x == x ? 0.0 : x; /* 0 at x = 0 (PyTorch); NaN propagates */
}

/*
 * GELU tanh in f32, the FFN's hot loop: 0.5 x (1 + tanh u) = x / (1 + exp(-2u)),
 * the same function without tanh's cancellation for negative x, with the
 * vectorized exp of src/vexp.c over chunks (relative error a few 1e-7).
 * Backward: with s = 1 / (1 + exp(-2u)), d/dx = s + 2 x u' s (1 - s).
 */
static inline void SFX(gelu_tanh_chunk)(const T *x, int64_t sx, int64_t n, T *e) {
    for (int64_t i = 0; i < n; ++i) {
        T v = x[i * sx];
        e[i] = (T)(-2 * K_SQRT_2_PI) * (v + (T)0.044715 * v * v * v);
    }
    T_VEXP_SUM(e, n, 0); /* e = exp(-2u) */
}

static void SFX(gelu_tanh_fast)(const T *x, int64_t sx, T *y, int64_t sy, int64_t n) {
    T e[GELU_CHUNK];
    for (int64_t c0 = 0; c0 < n; c0 += GELU_CHUNK) {
        int64_t len = n - c0 < GELU_CHUNK ? n - c0 : GELU_CHUNK;
        const T *xc = x + c0 * sx;
        T *yc = y + c0 * sy;
        SFX(gelu_tanh_chunk)(xc, sx, len, e);
        for (int64_t i = 0; i < len; ++i)
            yc[i * sy] = xc[i * sx] / ((T)1 + e[i]);
    }
}

static void SFX(gelu_tanh_fast_bwd)(const T *x, int64_t sx, const T *dy, int64_t sdy, T *dx,
                                    int64_t sdx, int64_t n) {
    T e[GELU_CHUNK];
    for (int64_t c0 = 0; c0 < n; c0 += GELU_CHUNK) {
        int64_t len = n - c0 < GELU_CHUNK ? n - c0 : GELU_CHUNK;
        const T *xc = x + c0 * sx, *dyc = dy + c0 * sdy;
        T *dxc = dx + c0 * sdx;
        SFX(gelu_tanh_chunk)(xc, sx, len, e);
        for (int64_t i = 0; i < len; ++i) {
            T v = xc[i * sx], s = (T)1 / ((T)1 + e[i]);
            T q = e[i] > (T)1e30 ? (T)1 : e[i] * s; /* 1 - s, exactly where it is tiny */
            T du = (T)K_SQRT_2_PI * ((T)1 + (T)(3 * 0.044715) * v * v);
            dxc[i * sdx] += (s + 2 * v * du * s * q) * dyc[i * sdy];
        }
    }
}

static void SFX(act)(attn_act act, const k_iter *it, const attn_view *x, attn_view *y) {
    const T *xp = x->data;
    T *yp = y->data;
    int64_t sx = it->rstride[0], sy = it->rstride[1], off[2];
    for (int64_t r = 0; r < it->nrows; ++r) {
        k_iter_row(it, r, off);
        const T *xr = xp + off[0];
        T *yr = yp + off[1];
        if (T_IS_F32 && act == ATTN_ACT_GELU_TANH)
            SFX(gelu_tanh_fast)(xr, sx, yr, sy, it->n);
        else if (sx == 1 && sy == 1)
            for (int64_t i = 0; i < it->n; ++i)
                yr[i] = SFX(act_fwd)(act, xr[i]);
        else
            for (int64_t i = 0; i < it->n; ++i)
                yr[i * sy] = SFX(act_fwd)(act, xr[i * sx]);
    }
}

static void SFX(act_bwd)(attn_act act, const k_iter *it, const attn_view *x,
                         const attn_view *dy, attn_view *dx) {
    const T *xp = x->data, *dyp = dy->data;
    T *dxp = dx->data;
    int64_t s0 = it->rstride[0], s1 = it->rstride[1], s2 = it->rstride[2], off[3];
    for (int64_t r = 0; r < it->nrows; ++r) {
        k_iter_row(it, r, off);
        if (T_IS_F32 && act == ATTN_ACT_GELU_TANH) {
            SFX(gelu_tanh_fast_bwd)(xp + off[0], s0, dyp + off[1], s1, dxp + off[2], s2, it->n);
            continue;
        }
        for (int64_t i = 0; i < it->n; ++i)
            dxp[off[2] + i * s2] +=
                (T)(SFX(act_grad)(act, xp[off[0] + i * s0]) * dyp[off[1] + i * s1]);
    }
}

/* y = x + b (b already broadcast to x's shape); dx += dy is the same loop with y = dx. */
static void SFX(add)(const k_iter *it, const attn_view *x, const attn_view *b, attn_view *y) {
    const T *xp = x->data, *bp = b->data;
    T *yp = y->data;
    int64_t s0 = it->rstride[0], s1 = it->rstride[1], s2 = it->rstride[2], off[3];
    for (int64_t r = 0; r < it->nrows; ++r) {
        k_iter_row(it, r, off);
        const T *xr = xp + off[0], *br = bp + off[1];
        T *yr = yp + off[2];
        if (s0 == 1 && s1 == 1 && s2 == 1)
            for (int64_t i = 0; i < it->n; ++i)
                yr[i] = xr[i] + br[i];
        else if (s0 == 1 && s1 == 0 && s2 == 1)
            for (int64_t i = 0; i < it->n; ++i)
                yr[i] = xr[i] + br[0];
        else
            for (int64_t i = 0; i < it->n; ++i)
                yr[i * s2] = xr[i * s0] + br[i * s1];
    }
}

/*
 * db += dy summed over the axes db broadcasts along (db seen broadcast to dy's shape,
 * stride 0 on those axes). The kept axes are walked outside; the summed ones inside,
 * with partial sums in double on the stack (columns in chunks when the last axis is
 * kept), so f32 sums over many rows keep double accuracy without a workspace.
 */
static void SFX(sum_into)(const k_sum *p, const attn_view *dy, attn_view *db) {
    enum { CHUNK = 256 };
    const T *dyp = dy->data;
    T *dbp = db->data;
    for (int64_t kk = 0; kk < p->nkeep; ++kk) {
        int64_t ok_src, ok_dst, or_src, or_dst;
        k_sum_offset(&p->keep, kk, &ok_src, &ok_dst);
        if (!p->last_kept) {
            double acc = 0;
            for (int64_t rr = 0; rr < p->nred; ++rr) {
                k_sum_offset(&p->red, rr, &or_src, &or_dst);
                const T *s = dyp + ok_src + or_src;
                for (int64_t i = 0; i < p->n; ++i)
                    acc += s[i * p->sn];
            }
            dbp[ok_dst] += (T)acc;
            continue;
        }
        for (int64_t c0 = 0; c0 < p->n; c0 += CHUNK) {
            int64_t len = p->n - c0 < CHUNK ? p->n - c0 : CHUNK;
            double acc[CHUNK] = {0};
            for (int64_t rr = 0; rr < p->nred; ++rr) {
                k_sum_offset(&p->red, rr, &or_src, &or_dst);
                const T *s = dyp + ok_src + or_src + c0 * p->sn;
                for (int64_t i = 0; i < len; ++i)
                    acc[i] += s[i * p->sn];
            }
            T *d = dbp + ok_dst + c0 * p->dn;
            for (int64_t i = 0; i < len; ++i)
                d[i * p->dn] += (T)acc[i];
        }
    }
}
