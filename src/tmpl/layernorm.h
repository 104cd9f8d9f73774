/* SPDX-License-Identifier: MIT */
/* LayerNorm over rows, forward and backward, for one dtype T (see tmpl/dtype_on.h). */

/* Row statistics by two passes in double: mean, then the biased variance of x - mean. */
static inline __attribute__((always_inline)) void
SFX(ln_stats)(const T *x, int64_t sx, int64_t n, double eps, double *mean, double *rstd) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
        s += x[i * sx];
    double mu = s / (double)n, v = 0;
    for (int64_t i = 0; i < n; ++i) {
        double d = x[i * sx] - mu;
        v += d * d;
    }
    *mean = mu;
    *rstd = 1.0 / sqrt(v / (double)n + eps);
}

/* The affine parameters of a row (NULL when absent) and their strides. */
typedef struct SFX(ln_affine) {
    const T *g, *b;
    int64_t sg, sb;
} SFX(ln_affine);

static inline __attribute__((always_inline)) void SFX(ln_row)(const T *x, int64_t sx, T *y,
                                                              int64_t sy, int64_t n, double mu,
                                                              double rs, SFX(ln_affine) a) {
    if (a.g && a.b)
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = (T)((x[i * sx] - mu) * rs * a.g[i * a.sg] + a.b[i * a.sb]);
    else if (a.g)
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = (T)((x[i * sx] - mu) * rs * a.g[i * a.sg]);
    else if (a.b)
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = (T)((x[i * sx] - mu) * rs + a.b[i * a.sb]);
    else
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = (T)((x[i * sx] - mu) * rs);
}

/* it: rows of (x, y); mean/rstd (NULL allowed) are indexed by the row number r through
 * their own row iterator ist (one element per row). Rows are tasks, threaded. */
typedef struct SFX(ln_ctx) {
    double eps;
    const k_iter *it, *ist;
    const T *x, *dy, *g;
    T *y;
    SFX(ln_affine) a;
    T *mean, *rstd;
    const T *cmean, *crstd;
    int64_t sg;
    T *dg, *db;
    int64_t sdg, sdb;
} SFX(ln_ctx);

static void SFX(ln_tasks)(void *ctx, int64_t r0, int64_t r1) {
    const SFX(ln_ctx) *c = ctx;
    const k_iter *it = c->it;
    int64_t sx = it->rstride[0], sy = it->rstride[1], off[2], soff[2] = {0, 0};
    for (int64_t r = r0; r < r1; ++r) {
        double mu, rs;
        k_iter_row(it, r, off);
        if (sx == 1)
            SFX(ln_stats)(c->x + off[0], 1, it->n, c->eps, &mu, &rs);
        else
            SFX(ln_stats)(c->x + off[0], sx, it->n, c->eps, &mu, &rs);
        if (sx == 1 && sy == 1)
            SFX(ln_row)(c->x + off[0], 1, c->y + off[1], 1, it->n, mu, rs, c->a);
        else
            SFX(ln_row)(c->x + off[0], sx, c->y + off[1], sy, it->n, mu, rs, c->a);
        if (c->ist) {
            k_iter_row(c->ist, r, soff);
            if (c->mean)
                c->mean[soff[0]] = (T)mu;
            if (c->rstd)
                c->rstd[soff[1]] = (T)rs;
        }
    }
}

static void SFX(layernorm)(double eps, const k_iter *it, const attn_view *x, attn_view *y,
                           SFX(ln_affine) a, const k_iter *ist, attn_view *mean,
                           attn_view *rstd) {
    SFX(ln_ctx) c = {.eps = eps, .it = it, .ist = ist, .x = x->data, .y = y->data, .a = a,
                     .mean = mean ? mean->data : NULL, .rstd = rstd ? rstd->data : NULL};
    attn__k_parallel(it->nrows, (double)it->nrows * (double)it->n * 2 * K_MEM_FLOPS,
                     SFX(ln_tasks), &c);
}

/*
 * Backward per row, with xh = (x - mean) rstd and g = dy * gamma (dy without affine):
 *   dx += rstd * (g - mean(g) - xh * mean(g * xh))
 * (the LayerNorm Jacobian applied to g; see e.g. llm.c's layernorm_backward).
 */
static void SFX(ln_bwd_dx_tasks)(void *ctx, int64_t r0, int64_t r1) {
    const SFX(ln_ctx) *c = ctx;
    const k_iter *it = c->it;
    const T *g = c->g;
    int64_t n = it->n, sx = it->rstride[0], sdy = it->rstride[1], sdx = it->rstride[2];
    int64_t sg = c->sg, off[3], soff[2];
    for (int64_t r = r0; r < r1; ++r) {
        k_iter_row(it, r, off);
        k_iter_row(c->ist, r, soff);
        const T *xr = c->x + off[0], *dyr = c->dy + off[1];
        T *dxr = c->y + off[2];
        double mu = c->cmean[soff[0]], rs = c->crstd[soff[1]], sg1 = 0, sgx = 0;
        for (int64_t i = 0; i < n; ++i) {
            double gi = g ? (double)dyr[i * sdy] * g[i * sg] : dyr[i * sdy];
            sg1 += gi;
            sgx += gi * (xr[i * sx] - mu) * rs;
        }
        sg1 /= (double)n;
        sgx /= (double)n;
        for (int64_t i = 0; i < n; ++i) {
            double gi = g ? (double)dyr[i * sdy] * g[i * sg] : dyr[i * sdy];
            double xh = (xr[i * sx] - mu) * rs;
            dxr[i * sdx] += (T)(rs * (gi - sg1 - xh * sgx));
        }
    }
}

static void SFX(layernorm_bwd_dx)(const k_iter *it, const attn_view *x, const attn_view *dy,
                                  attn_view *dx, const T *g, int64_t sg, const k_iter *ist,
                                  const attn_view *mean, const attn_view *rstd) {
    SFX(ln_ctx) c = {.it = it, .ist = ist, .x = x->data, .dy = dy->data, .g = g, .sg = sg,
                     .y = dx->data, .cmean = mean->data, .crstd = rstd->data};
    attn__k_parallel(it->nrows, (double)it->nrows * (double)it->n * 3 * K_MEM_FLOPS,
                     SFX(ln_bwd_dx_tasks), &c);
}

enum { SFX(LN_PCHUNK) = 128 };

static void SFX(ln_bwd_params_tasks)(void *ctx, int64_t k0, int64_t k1) {
    enum { CHUNK = SFX(LN_PCHUNK) };
    const SFX(ln_ctx) *c = ctx;
    const k_iter *it = c->it;
    T *dg = c->dg, *db = c->db;
    int64_t sx = it->rstride[0], sdy = it->rstride[1], off[3], soff[2];
    for (int64_t k = k0; k < k1; ++k) {
        int64_t c0 = k * CHUNK, len = it->n - c0 < CHUNK ? it->n - c0 : CHUNK;
        double ag[CHUNK] = {0}, ab[CHUNK] = {0};
        for (int64_t r = 0; r < it->nrows; ++r) {
            k_iter_row(it, r, off);
            const T *xr = c->x + off[0] + c0 * sx, *dyr = c->dy + off[1] + c0 * sdy;
            if (dg) {
                k_iter_row(c->ist, r, soff);
                double mu = c->cmean[soff[0]], rs = c->crstd[soff[1]];
                for (int64_t i = 0; i < len; ++i)
                    ag[i] += (double)dyr[i * sdy] * ((xr[i * sx] - mu) * rs);
            }
            if (db)
                for (int64_t i = 0; i < len; ++i)
                    ab[i] += dyr[i * sdy];
        }
        for (int64_t i = 0; i < len; ++i) {
            if (dg)
                dg[(c0 + i) * c->sdg] += (T)ag[i];
            if (db)
                db[(c0 + i) * c->sdb] += (T)ab[i];
        }
    }
}

/*
 * dgamma += sum over rows of dy * xh, dbeta += sum over rows of dy. Columns go in
 * chunks (the tasks, threaded: each owns its columns) whose partial sums live in
 * double on the stack, so f32 sums over many rows keep double accuracy without a
 * workspace.
 */
static void SFX(layernorm_bwd_params)(const k_iter *it, const attn_view *x, const attn_view *dy,
                                      const k_iter *ist, const attn_view *mean,
                                      const attn_view *rstd, T *dg, int64_t sdg, T *db,
                                      int64_t sdb) {
    SFX(ln_ctx) c = {.it = it, .ist = ist, .x = x->data, .dy = dy->data, .cmean = mean->data,
                     .crstd = rstd->data, .dg = dg, .db = db, .sdg = sdg, .sdb = sdb};
    int64_t nk = (it->n + SFX(LN_PCHUNK) - 1) / SFX(LN_PCHUNK);
    attn__k_parallel(nk, (double)it->nrows * (double)it->n * 2 * K_MEM_FLOPS,
                     SFX(ln_bwd_params_tasks), &c);
}
