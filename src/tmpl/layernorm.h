/* SPDX-License-Identifier: MIT */
/* LayerNorm over rows, forward and backward, for one dtype T (see tmpl/dtype_on.h). */

/* Row statistics by two passes in double, summed in lanes (k_lanes_sum, rows.h):
 * the mean, then the biased variance of x - mean. */
static inline __attribute__((always_inline)) void
SFX(ln_stats)(const T *x, int64_t sx, int64_t n, double eps, double *mean, double *rstd) {
    enum { L = K_LANES };
    int64_t nl = n / L * L, i;
    double s[L] = {0}, t = 0;
    for (i = 0; i < nl; i += L)
        for (int j = 0; j < L; ++j)
            s[j] += x[(i + j) * sx];
    for (; i < n; ++i)
        t += x[i * sx];
    double mu = k_lanes_sum(s, t) / (double)n, v[L] = {0};
    t = 0;
    for (i = 0; i < nl; i += L)
        for (int j = 0; j < L; ++j) {
            double d = x[(i + j) * sx] - mu;
            v[j] += d * d;
        }
    for (; i < n; ++i) {
        double d = x[i * sx] - mu;
        t += d * d;
    }
    *mean = mu;
    *rstd = 1.0 / sqrt(k_lanes_sum(v, t) / (double)n + eps);
}

/* The affine parameters of a row (NULL when absent) and their strides. */
typedef struct SFX(ln_affine) {
    const T *g, *b;
    int64_t sg, sb;
} SFX(ln_affine);

/* y = (x - mu) rs g + b for one row; strides are arguments so that the unit-stride
 * call below is compiled with constants. */
static inline __attribute__((always_inline)) void
SFX(ln_row)(const T *x, int64_t sx, T *y, int64_t sy, int64_t n, double mu, double rs,
            const T *g, int64_t sg, const T *b, int64_t sb) {
    if (g && b)
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = (T)((x[i * sx] - mu) * rs * g[i * sg] + b[i * sb]);
    else if (g)
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = (T)((x[i * sx] - mu) * rs * g[i * sg]);
    else if (b)
        for (int64_t i = 0; i < n; ++i)
            y[i * sy] = (T)((x[i * sx] - mu) * rs + b[i * sb]);
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

/* Rows as tasks; the unit-stride case (x, y, gamma and beta contiguous) is its own
 * instance of the inlined row code, which the clones vectorize. */
static ATTN_CLONES void SFX(ln_tasks)(void *ctx, int64_t r0, int64_t r1) {
    const SFX(ln_ctx) *c = ctx;
    const k_iter *it = c->it;
    int64_t sx = it->rstride[0], sy = it->rstride[1], off[2], soff[2] = {0, 0}, n = it->n;
    const T *g = c->a.g, *b = c->a.b;
    bool unit = sx == 1 && sy == 1 && (!g || c->a.sg == 1) && (!b || c->a.sb == 1);
    for (int64_t r = r0; r < r1; ++r) {
        double mu, rs;
        k_iter_row(it, r, off);
        const T *x = c->x + off[0];
        T *y = c->y + off[1];
        if (unit) {
            SFX(ln_stats)(x, 1, n, c->eps, &mu, &rs);
            SFX(ln_row)(x, 1, y, 1, n, mu, rs, g, 1, b, 1);
        } else {
            SFX(ln_stats)(x, sx, n, c->eps, &mu, &rs);
            SFX(ln_row)(x, sx, y, sy, n, mu, rs, g, c->a.sg, b, c->a.sb);
        }
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
/* One row of the dx backward (g: gamma or NULL); the sums in lanes as in ln_stats. */
static inline __attribute__((always_inline)) void
SFX(ln_bwd_row)(const T *xr, int64_t sx, const T *dyr, int64_t sdy, T *dxr, int64_t sdx,
                const T *g, int64_t sg, int64_t n, double mu, double rs) {
    enum { L = K_LANES };
    int64_t nl = n / L * L, i;
    double a1[L] = {0}, ax[L] = {0}, t1 = 0, tx = 0;
    for (i = 0; i < nl; i += L)
        for (int j = 0; j < L; ++j) {
            int64_t k = i + j;
            double gi = g ? (double)dyr[k * sdy] * g[k * sg] : dyr[k * sdy];
            a1[j] += gi;
            ax[j] += gi * ((xr[k * sx] - mu) * rs);
        }
    for (; i < n; ++i) {
        double gi = g ? (double)dyr[i * sdy] * g[i * sg] : dyr[i * sdy];
        t1 += gi;
        tx += gi * ((xr[i * sx] - mu) * rs);
    }
    double sg1 = k_lanes_sum(a1, t1) / (double)n;
    double sgx = k_lanes_sum(ax, tx) / (double)n;
    for (i = 0; i < n; ++i) {
        double gi = g ? (double)dyr[i * sdy] * g[i * sg] : dyr[i * sdy];
        double xh = (xr[i * sx] - mu) * rs;
        dxr[i * sdx] += (T)(rs * (gi - sg1 - xh * sgx));
    }
}

static ATTN_CLONES void SFX(ln_bwd_dx_tasks)(void *ctx, int64_t r0, int64_t r1) {
    const SFX(ln_ctx) *c = ctx;
    const k_iter *it = c->it;
    const T *g = c->g;
    int64_t n = it->n, sx = it->rstride[0], sdy = it->rstride[1], sdx = it->rstride[2];
    int64_t sg = c->sg, off[3], soff[2];
    bool unit = sx == 1 && sdy == 1 && sdx == 1 && (!g || sg == 1);
    for (int64_t r = r0; r < r1; ++r) {
        k_iter_row(it, r, off);
        k_iter_row(c->ist, r, soff);
        const T *xr = c->x + off[0], *dyr = c->dy + off[1];
        T *dxr = c->y + off[2];
        double mu = c->cmean[soff[0]], rs = c->crstd[soff[1]];
        if (unit && g)
            SFX(ln_bwd_row)(xr, 1, dyr, 1, dxr, 1, g, 1, n, mu, rs);
        else if (unit)
            SFX(ln_bwd_row)(xr, 1, dyr, 1, dxr, 1, NULL, 0, n, mu, rs);
        else
            SFX(ln_bwd_row)(xr, sx, dyr, sdy, dxr, sdx, g, sg, n, mu, rs);
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

/* One chunk row of the parameter sums (ag += dy xh, ab += dy). */
static inline __attribute__((always_inline)) void
SFX(ln_params_row)(const T *xr, int64_t sx, const T *dyr, int64_t sdy, int64_t len, double mu,
                   double rs, double *restrict ag, double *restrict ab) {
    if (ag)
        for (int64_t i = 0; i < len; ++i)
            ag[i] += (double)dyr[i * sdy] * ((xr[i * sx] - mu) * rs);
    if (ab)
        for (int64_t i = 0; i < len; ++i)
            ab[i] += dyr[i * sdy];
}

static ATTN_CLONES void SFX(ln_bwd_params_tasks)(void *ctx, int64_t k0, int64_t k1) {
    enum { CHUNK = SFX(LN_PCHUNK) };
    const SFX(ln_ctx) *c = ctx;
    const k_iter *it = c->it;
    T *dg = c->dg, *db = c->db;
    int64_t sx = it->rstride[0], sdy = it->rstride[1], off[3], soff[2];
    bool unit = sx == 1 && sdy == 1;
    for (int64_t k = k0; k < k1; ++k) {
        int64_t c0 = k * CHUNK, len = it->n - c0 < CHUNK ? it->n - c0 : CHUNK;
        double ag[CHUNK] = {0}, ab[CHUNK] = {0};
        for (int64_t r = 0; r < it->nrows; ++r) {
            k_iter_row(it, r, off);
            const T *xr = c->x + off[0] + c0 * sx, *dyr = c->dy + off[1] + c0 * sdy;
            double mu = 0, rs = 0;
            if (dg) {
                k_iter_row(c->ist, r, soff);
                mu = c->cmean[soff[0]];
                rs = c->crstd[soff[1]];
            }
            if (unit)
                SFX(ln_params_row)(xr, 1, dyr, 1, len, mu, rs, dg ? ag : NULL, db ? ab : NULL);
            else
                SFX(ln_params_row)(xr, sx, dyr, sdy, len, mu, rs, dg ? ag : NULL,
                                   db ? ab : NULL);
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
