/* SPDX-License-Identifier: MIT */
/* Reproducible init: Philox4x32-10 streams, fills, Xavier/Kaiming, orthogonal by LAPACKE QR. */
#include <float.h>
#include <limits.h>
#include <math.h>

#include <lapacke.h>

#include "layers/layers_internal.h" /* the layers' parameter validators */

/* ---- Philox4x32-10 (Salmon et al., SC'11; constants from Random123) ---- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void attn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { /* the key schedule: a Weyl sequence, bumped between rounds */
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * x0, p1 = (uint64_t)PHILOX_M1 * x2;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
        uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
        x1 = (uint32_t)p1;
        x3 = (uint32_t)p0;
        x0 = y0;
        x2 = y2;
    }
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
}

/* Block j of stream (seed, stream): the 64-bit words bits(2j), bits(2j+1). */
static void rng_block(uint64_t seed, uint64_t stream, uint64_t j, uint64_t w[2]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)j, (uint32_t)(j >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    uint32_t x[4];
    attn_philox4x32_10(ctr, key, x);
    w[0] = (uint64_t)x[0] | (uint64_t)x[1] << 32;
    w[1] = (uint64_t)x[2] | (uint64_t)x[3] << 32;
}

uint64_t attn_rng_bits(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t w[2];
    rng_block(seed, stream, i >> 1, w);
    return w[i & 1];
}

/* The top 53 bits as a double in [0, 1). */
static inline double unit53(uint64_t b) { return (double)(b >> 11) * 0x1p-53; }

/*
 * A reader of one stream that caches the current block, so consecutive
 * indices cost one Philox call per two values. normal: Box-Muller pairs.
 */
typedef struct stream_reader {
    uint64_t seed, stream, j;
    bool normal, valid;
    double v[2]; /* the two values of block j */
} stream_reader;

static double stream_value(stream_reader *g, uint64_t i) {
    uint64_t j = i >> 1;
    if (!g->valid || g->j != j) {
        uint64_t w[2];
        rng_block(g->seed, g->stream, j, w);
        if (g->normal) {
            double u1 = (double)((w[0] >> 11) + 1) * 0x1p-53; /* (0, 1]: log is finite */
            double u2 = unit53(w[1]);
            double r = sqrt(-2.0 * log(u1));
            double th = 6.283185307179586 * u2;
            g->v[0] = r * cos(th);
            g->v[1] = r * sin(th);
        } else {
            g->v[0] = unit53(w[0]);
            g->v[1] = unit53(w[1]);
        }
        g->j = j;
        g->valid = true;
    }
    return g->v[i & 1];
}

/* ---- fills ------------------------------------------------------------ */

/*
 * x[k] = clamp(a + b * value(offset + k), lo, hi) in row-major logical
 * order; the clamp bounds are the extreme representable values of the
 * target interval in x's dtype (infinite for normals).
 */
typedef struct fill_spec {
    bool normal;
    double a, b;
    double lo, hi;
} fill_spec;

static void put(attn_dtype dt, char *p, double v, double lo, double hi) {
    if (dt == ATTN_F64) {
        *(double *)p = v < lo ? lo : v > hi ? hi : v;
    } else {
        float f = (float)v;
        *(float *)p = f < lo ? (float)lo : f > hi ? (float)hi : f;
    }
}

static void fill(const fill_spec *f, uint64_t seed, uint64_t stream, uint64_t offset,
                 attn_view *x) {
    int64_t n = attn_view_numel(x);
    if (n == 0)
        return;
    stream_reader g = {.seed = seed, .stream = stream, .normal = f->normal};
    int last = x->ndim - 1;
    int64_t cols = x->shape[last], rows = n / cols, cs = x->stride[last];
    size_t es = attn_dtype_size(x->dtype);
    int64_t idx[ATTN_MAX_DIMS] = {0};
    uint64_t i = offset;
    for (int64_t r = 0; r < rows; ++r) {
        char *row = attn__elem(x, idx);
        for (int64_t c = 0; c < cols; ++c, ++i) {
            /* separate statements: no FMA contraction; b == 0 is a constant fill */
            double t = f->b == 0 ? 0.0 : f->b * stream_value(&g, i);
            double v = f->a + t;
            put(x->dtype, row + c * cs * (int64_t)es, v, f->lo, f->hi);
        }
        for (int k = last - 1; k >= 0; --k) { /* next row: row-major over leading dims */
            if (++idx[k] < x->shape[k])
                break;
            idx[k] = 0;
        }
    }
}

/* An output of the fills: float dtype, writable without self-overlap, indices fit. */
static attn_status check_fill_out(attn_view *x, int ndim, uint64_t offset) {
    if (!x)
        return ATTN_EINVAL;
    ATTN_TRY(attn__check_float(x, ndim));
    if (attn__self_overlaps(x))
        return ATTN_ESTRIDE;
    int64_t n = attn_view_numel(x);
    if (n > 0 && offset > UINT64_MAX - (uint64_t)(n - 1))
        return ATTN_ERANGE;
    return ATTN_OK;
}

/* The uniform fill's spec: lo + (hi - lo) u, kept inside [lo, hi) in x's dtype. */
static attn_status uniform_spec(attn_dtype dt, double lo, double hi, fill_spec *f) {
    if (!isfinite(lo) || !isfinite(hi) || !(lo < hi))
        return ATTN_EINVAL;
    if (!isfinite(hi - lo))
        return ATTN_ERANGE;
    *f = (fill_spec){
        .normal = false, .a = lo, .b = hi - lo, .lo = lo, .hi = nextafter(hi, -INFINITY)};
    if (dt == ATTN_F32) {
        if (fabs(lo) > FLT_MAX || fabs(hi) > FLT_MAX)
            return ATTN_ERANGE;
        float fl = (float)lo, fh = (float)hi;
        if ((double)fl < lo)
            fl = nextafterf(fl, INFINITY);
        if ((double)fh >= hi)
            fh = nextafterf(fh, -INFINITY);
        if (fl > fh)
            return ATTN_EINVAL; /* no float in [lo, hi) */
        f->lo = fl;
        f->hi = fh;
    }
    return ATTN_OK;
}

static attn_status normal_spec(attn_dtype dt, double mean, double std, fill_spec *f) {
    if (!isfinite(mean) || !isfinite(std) || std < 0)
        return ATTN_EINVAL;
    /* |normal()| <= sqrt(2 * 53 ln 2) < 8.6, so 9 std bounds every value */
    if (!(fabs(mean) + 9.0 * std <= (dt == ATTN_F32 ? FLT_MAX : DBL_MAX)))
        return ATTN_ERANGE;
    *f = (fill_spec){.normal = true, .a = mean, .b = std, .lo = -INFINITY, .hi = INFINITY};
    return ATTN_OK;
}

attn_status attn_init_uniform(uint64_t seed, uint64_t stream, uint64_t offset, double lo,
                              double hi, attn_view *x) {
    ATTN_TRY(check_fill_out(x, 0, offset));
    fill_spec f;
    ATTN_TRY(uniform_spec(x->dtype, lo, hi, &f));
    fill(&f, seed, stream, offset, x);
    return ATTN_OK;
}

attn_status attn_init_normal(uint64_t seed, uint64_t stream, uint64_t offset, double mean,
                             double std, attn_view *x) {
    ATTN_TRY(check_fill_out(x, 0, offset));
    fill_spec f;
    ATTN_TRY(normal_spec(x->dtype, mean, std, &f));
    fill(&f, seed, stream, offset, x);
    return ATTN_OK;
}

/* ---- scaled initializers ---------------------------------------------- */

/* U(-a, a) for ATTN_INIT_UNIFORM, N(0, s^2) for ATTN_INIT_NORMAL, on a 2-D w. */
static attn_status scaled_fill(attn_init_dist dist, double scale, uint64_t seed,
                               uint64_t stream, attn_view *w) {
    fill_spec f;
    if (dist == ATTN_INIT_UNIFORM)
        ATTN_TRY(uniform_spec(w->dtype, -scale, scale, &f));
    else
        ATTN_TRY(normal_spec(w->dtype, 0.0, scale, &f));
    fill(&f, seed, stream, 0, w);
    return ATTN_OK;
}

/* Common checks of the scaled initializers; *empty when w has no element. */
static attn_status check_scaled(attn_init_dist dist, double gain, attn_view *w, bool *empty) {
    if (dist != ATTN_INIT_UNIFORM && dist != ATTN_INIT_NORMAL)
        return ATTN_EINVAL;
    if (!isfinite(gain) || gain < 0)
        return ATTN_EINVAL;
    ATTN_TRY(check_fill_out(w, 2, 0));
    *empty = attn_view_numel(w) == 0;
    return ATTN_OK;
}

attn_status attn_init_xavier(attn_init_dist dist, double gain, uint64_t seed, uint64_t stream,
                             attn_view *w) {
    bool empty;
    ATTN_TRY(check_scaled(dist, gain, w, &empty));
    if (empty)
        return ATTN_OK;
    double fans = (double)w->shape[0] + (double)w->shape[1]; /* fan_in + fan_out */
    double g = gain == 0 ? 1.0 : gain;
    double scale = g * sqrt((dist == ATTN_INIT_UNIFORM ? 6.0 : 2.0) / fans);
    return scaled_fill(dist, scale, seed, stream, w);
}

attn_status attn_init_kaiming(attn_init_dist dist, double gain, uint64_t seed, uint64_t stream,
                              attn_view *w) {
    bool empty;
    ATTN_TRY(check_scaled(dist, gain, w, &empty));
    if (empty)
        return ATTN_OK;
    double fan_in = (double)w->shape[0];
    double g = gain == 0 ? sqrt(2.0) : gain;
    double scale = g * sqrt((dist == ATTN_INIT_UNIFORM ? 3.0 : 1.0) / fan_in);
    return scaled_fill(dist, scale, seed, stream, w);
}

/* ---- orthogonal ------------------------------------------------------- */

/*
 * Workspace layout for the QR of the (p, q) matrix A, column-major:
 * A (p q doubles), tau (q), sign (q), LAPACK's work (lwork doubles).
 */
typedef struct ortho_plan {
    lapack_int p, q, lwork;
    size_t a_bytes, q_bytes, total;
} ortho_plan;

static attn_status ortho_plan_make(const attn_view *w, ortho_plan *pl, int *info) {
    ATTN_TRY(attn__check_float(w, 2));
    int64_t m = w->shape[0], n = w->shape[1];
    int64_t p = m >= n ? m : n, q = m >= n ? n : m;
    *pl = (ortho_plan){0};
    if (q == 0)
        return ATTN_OK;
    size_t a_bytes;
    if (p > INT_MAX || !attn__mul_sz((size_t)p, (size_t)q * sizeof(double), &a_bytes))
        return ATTN_ERANGE;
    double dummy = 0, wq1 = 0, wq2 = 0;
    lapack_int li = LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, (lapack_int)p, (lapack_int)q, &dummy,
                                        (lapack_int)p, &dummy, &wq1, -1);
    if (li == 0)
        li = LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, (lapack_int)p, (lapack_int)q, (lapack_int)q,
                                 &dummy, (lapack_int)p, &dummy, &wq2, -1);
    if (li != 0) {
        *info = (int)li;
        return ATTN_ELAPACK;
    }
    double lw = wq1 > wq2 ? wq1 : wq2;
    if (!(lw <= INT_MAX))
        return ATTN_ERANGE;
    pl->p = (lapack_int)p;
    pl->q = (lapack_int)q;
    pl->lwork = lw < 1 ? 1 : (lapack_int)lw;
    pl->a_bytes = attn__align64(a_bytes);
    pl->q_bytes = attn__align64((size_t)q * sizeof(double));
    pl->total = pl->a_bytes + 2 * pl->q_bytes + (size_t)pl->lwork * sizeof(double);
    if (pl->total < a_bytes)
        return ATTN_ERANGE;
    return ATTN_OK;
}

size_t attn_init_orthogonal_workspace_size(const attn_view *w) {
    ortho_plan pl;
    int info = 0;
    if (!w || ortho_plan_make(w, &pl, &info) != ATTN_OK)
        return 0;
    return pl.total;
}

attn_status attn_init_orthogonal(double gain, uint64_t seed, uint64_t stream, attn_view *w,
                                 void *work, size_t work_size, int *info) {
    int dummy_info;
    if (!info)
        info = &dummy_info;
    *info = 0;
    if (!w || !isfinite(gain) || gain < 0)
        return ATTN_EINVAL;
    ATTN_TRY(check_fill_out(w, 2, 0));
    ortho_plan pl;
    ATTN_TRY(ortho_plan_make(w, &pl, info));
    if (pl.q == 0)
        return ATTN_OK;
    void *owned;
    ATTN_TRY(attn__work_acquire(&work, &work_size, pl.total, &owned));
    if (!owned && attn__work_overlaps(work, pl.total, (const attn_view *[]){w}, 1))
        return ATTN_EALIAS; /* a caller workspace over w: nothing written */
    double *a = work;
    double *tau = (double *)((char *)work + pl.a_bytes);
    double *sign = (double *)((char *)tau + pl.q_bytes);
    double *lw = (double *)((char *)sign + pl.q_bytes);
    int64_t m = w->shape[0], n = w->shape[1], p = pl.p;
    bool tall = m >= n;

    /* A = G (tall) or G^T (wide), G[i][j] = normal(i n + j), column-major (p, q) */
    stream_reader g = {.seed = seed, .stream = stream, .normal = true};
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            a[tall ? i + j * p : j + i * p] = stream_value(&g, (uint64_t)(i * n + j));

    lapack_int li =
        LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, pl.p, pl.q, a, pl.p, tau, lw, pl.lwork);
    if (li == 0) {
        for (lapack_int j = 0; j < pl.q; ++j) /* sign(R_jj), with sign(0) = +1 */
            sign[j] = a[j + j * p] < 0 ? -1.0 : 1.0;
        li =
            LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, pl.p, pl.q, pl.q, a, pl.p, tau, lw, pl.lwork);
    }
    if (li != 0) {
        free(owned);
        *info = (int)li;
        return ATTN_ELAPACK;
    }

    /* w = gain Q diag(sign) (tall) or its transpose (wide) */
    double g0 = gain == 0 ? 1.0 : gain;
    size_t es = attn_dtype_size(w->dtype);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            int64_t r = tall ? i : j, c = tall ? j : i;
            double v = g0 * sign[c] * a[r + c * p];
            char *dst = (char *)w->data + (i * w->stride[0] + j * w->stride[1]) * (int64_t)es;
            put(w->dtype, dst, v, -INFINITY, INFINITY);
        }
    free(owned);
    return ATTN_OK;
}

/* ---- whole layers ------------------------------------------------------ */

/* A parameter view bound for the config: dtype dt, shape (s0) or (s0, s1), writable. */
static attn_status check_param(const attn_view *v, attn_dtype dt, int ndim, int64_t s0,
                               int64_t s1) {
    ATTN_TRY(attn_view_check(v));
    if (v->dtype != dt)
        return ATTN_EDTYPE;
    if (v->ndim != ndim || v->shape[0] != s0 || (ndim == 2 && v->shape[1] != s1))
        return ATTN_ESHAPE;
    if (attn__self_overlaps(v))
        return ATTN_ESTRIDE;
    return ATTN_OK;
}

/* v := c everywhere (a fill with no random part). */
static void fill_const(attn_view *v, double c) {
    fill_spec f = {.normal = false, .a = c, .b = 0, .lo = -INFINITY, .hi = INFINITY};
    fill(&f, 0, 0, 0, v);
}

/* Parameter views to be written: the layers' own validator, then no self-overlap. */
static attn_status check_writable(const attn_view *const *v, int n) {
    for (int i = 0; i < n; ++i)
        if (attn__self_overlaps(v[i]))
            return ATTN_ESTRIDE;
    return ATTN_OK;
}

static attn_status check_mha(const attn_mha_config *c, const attn_mha_params *p) {
    const attn_view *v[8];
    ATTN_TRY(attn__mha_check_params(c, p));
    return check_writable(v, attn__mha_views(c, p, v, 0));
}

/* Xavier-uniform weights from their fixed streams, zero biases (p already checked). */
static void write_mha(const attn_mha_config *c, attn_mha_params *p, uint64_t seed) {
    attn_init_xavier(ATTN_INIT_UNIFORM, 1, seed, ATTN_STREAM_WQ, &p->wq);
    attn_init_xavier(ATTN_INIT_UNIFORM, 1, seed, ATTN_STREAM_WK, &p->wk);
    attn_init_xavier(ATTN_INIT_UNIFORM, 1, seed, ATTN_STREAM_WV, &p->wv);
    attn_init_xavier(ATTN_INIT_UNIFORM, 1, seed, ATTN_STREAM_WO, &p->wo);
    if (c->bias) {
        fill_const(&p->bq, 0);
        fill_const(&p->bk, 0);
        fill_const(&p->bv, 0);
        fill_const(&p->bo, 0);
    }
}

static attn_status check_ffn(const attn_ffn_config *c, const attn_ffn_params *p) {
    const attn_view *v[4];
    ATTN_TRY(attn__ffn_check_params(c, p));
    return check_writable(v, attn__ffn_views(c, p, v, 0));
}

static void write_ffn(const attn_ffn_config *c, attn_ffn_params *p, uint64_t seed) {
    attn_init_xavier(ATTN_INIT_UNIFORM, 1, seed, ATTN_STREAM_W1, &p->w1);
    attn_init_xavier(ATTN_INIT_UNIFORM, 1, seed, ATTN_STREAM_W2, &p->w2);
    if (c->bias) {
        fill_const(&p->b1, 0);
        fill_const(&p->b2, 0);
    }
}

attn_status attn_mha_params_init(const attn_mha_config *cfg, attn_mha_params *p,
                                 uint64_t seed) {
    if (!cfg || !p)
        return ATTN_EINVAL;
    attn_mha_config c;
    ATTN_TRY(attn_mha_config_resolve(cfg, &c));
    ATTN_TRY(check_mha(&c, p));
    write_mha(&c, p, seed);
    return ATTN_OK;
}

attn_status attn_ffn_params_init(const attn_ffn_config *cfg, attn_ffn_params *p,
                                 uint64_t seed) {
    if (!cfg || !p)
        return ATTN_EINVAL;
    attn_ffn_config c;
    ATTN_TRY(attn_ffn_config_resolve(cfg, &c));
    ATTN_TRY(check_ffn(&c, p));
    write_ffn(&c, p, seed);
    return ATTN_OK;
}

attn_status attn_encoder_params_init(const attn_encoder_config *cfg, attn_encoder_params *p,
                                     uint64_t seed) {
    if (!cfg || !p)
        return ATTN_EINVAL;
    attn_encoder_config c;
    ATTN_TRY(attn_encoder_config_resolve(cfg, &c));
    ATTN_TRY(check_mha(&c.mha, &p->mha));
    ATTN_TRY(check_ffn(&c.ffn, &p->ffn));
    if (c.ln_affine) {
        attn_view *ln[4] = {&p->ln1_g, &p->ln1_b, &p->ln2_g, &p->ln2_b};
        for (int i = 0; i < 4; ++i)
            ATTN_TRY(check_param(ln[i], c.mha.dtype, 1, c.mha.d_model, 0));
    }
    write_mha(&c.mha, &p->mha, seed);
    write_ffn(&c.ffn, &p->ffn, seed);
    if (c.ln_affine) {
        fill_const(&p->ln1_g, 1);
        fill_const(&p->ln1_b, 0);
        fill_const(&p->ln2_g, 1);
        fill_const(&p->ln2_b, 0);
    }
    return ATTN_OK;
}
