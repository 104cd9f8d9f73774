/* SPDX-License-Identifier: MIT */
/* attn_gemm: maps strided, batched views onto cblas_?gemm; the only CBLAS caller. */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "attn_config.h"
#include "core/internal.h"

/*
 * A logical matrix: op(X) as an (r, c) array with element strides (sr, sc),
 * i.e. the transpose is folded into the strides, so every operand looks the
 * same from here on.
 */
typedef struct lmat {
    int64_t r, c, sr, sc;
} lmat;

/* How a logical matrix reaches CBLAS (row-major layout, per operand flag). */
typedef struct blas_form {
    bool    direct;  /* false: pack into a contiguous (r, c) block first */
    bool    trans;   /* true: the memory holds op(X)^T in row-major order */
    int64_t ld;
} blas_form;

static blas_form form_of(lmat m) {
    blas_form f = {false, false, 0};
    int64_t sr = m.sr, sc = m.sc;
    /* the stride of an extent-1 axis never matters: pick the convenient one */
    if (m.c <= 1)
        sc = 1;
    if (m.r <= 1)
        sr = m.c > 1 ? m.c : 1;
    if (sc == 1 && sr >= (m.c > 1 ? m.c : 1)) {
        f.direct = true;
        f.ld = sr;
        return f;
    }
    sr = m.sr;
    sc = m.sc;
    if (m.r <= 1)
        sr = 1;
    if (m.c <= 1)
        sc = m.r > 1 ? m.r : 1;
    if (sr == 1 && sc >= (m.r > 1 ? m.r : 1)) {
        f.direct = f.trans = true;
        f.ld = sc;
    }
    return f;
}

/* Operand set-up shared by attn_gemm and its workspace query. */
typedef struct gemm_plan {
    lmat       a, b, c;
    blas_form  fa, fb, fc;
    int        nb;                    /* batch dims of C */
    int64_t    bshape[2];             /* batch extents */
    int64_t    astr[2], bstr[2], cstr[2]; /* batch strides (0 = broadcast) */
    size_t     es, wa, wb, wc;        /* element size, packed bytes per operand */
} gemm_plan;

static lmat logical(const attn_view *v, attn_trans t) {
    int n = v->ndim;
    lmat m = {v->shape[n - 2], v->shape[n - 1], v->stride[n - 2], v->stride[n - 1]};
    if (t == ATTN_TRANS) {
        int64_t x = m.r; m.r = m.c; m.c = x;
        x = m.sr; m.sr = m.sc; m.sc = x;
    }
    return m;
}

/* Broadcast operand batch dims against C's: NumPy alignment from the right. */
static attn_status batch_strides(const attn_view *x, const gemm_plan *p, int64_t *str) {
    int nbx = x->ndim - 2;
    if (nbx > p->nb)
        return ATTN_ESHAPE;
    for (int i = 0; i < p->nb; ++i) {
        int j = i - (p->nb - nbx);
        str[i] = 0;
        if (j < 0)
            continue;
        if (x->shape[j] == p->bshape[i])
            str[i] = x->stride[j];
        else if (x->shape[j] != 1)
            return ATTN_ESHAPE;
        if (p->bshape[i] <= 1)
            str[i] = 0;
    }
    return ATTN_OK;
}

static bool fits_int(int64_t x) { return x >= 0 && x <= INT_MAX; }

/* The views themselves (the public door only): present, well-formed, one float dtype. */
static attn_status gemm_check_views(attn_trans ta, attn_trans tb, const attn_view *a,
                                    const attn_view *b, const attn_view *c) {
    if (!a || !b || !c || (ta != ATTN_NO_TRANS && ta != ATTN_TRANS) ||
        (tb != ATTN_NO_TRANS && tb != ATTN_TRANS))
        return ATTN_EINVAL;
    ATTN_TRY(attn_view_check(a));
    ATTN_TRY(attn_view_check(b));
    ATTN_TRY(attn_view_check(c));
    if (a->ndim < 2 || b->ndim < 2 || c->ndim < 2)
        return ATTN_EINVAL;
    if (a->dtype != b->dtype || a->dtype != c->dtype)
        return ATTN_EDTYPE;
    if (c->dtype != ATTN_F32 && c->dtype != ATTN_F64)
        return ATTN_EDTYPE;
    return ATTN_OK;
}

/* C must not overlap itself (ESTRIDE) nor A or B (EALIAS). */
static attn_status gemm_check_aliasing(const attn_view *a, const attn_view *b,
                                       const attn_view *c) {
    if (attn__self_overlaps(c))
        return ATTN_ESTRIDE;
    if (attn__overlaps_raw(c, a) || attn__overlaps_raw(c, b))
        return ATTN_EALIAS;
    return ATTN_OK;
}

/*
 * Shapes, batch broadcasting, CBLAS forms and packing sizes of valid views: the
 * only set-up the trusted attn__gemm_* functions do (no view checks, no sort, no
 * overlap tests). ESHAPE or ERANGE.
 */
static attn_status gemm_layout(attn_trans ta, attn_trans tb, const attn_view *a,
                               const attn_view *b, const attn_view *c, gemm_plan *p) {
    memset(p, 0, sizeof *p);
    p->a = logical(a, ta);
    p->b = logical(b, tb);
    p->c = logical(c, ATTN_NO_TRANS);
    if (p->a.r != p->c.r || p->b.c != p->c.c || p->a.c != p->b.r)
        return ATTN_ESHAPE;
    p->nb = c->ndim - 2;
    for (int i = 0; i < p->nb; ++i)
        p->bshape[i] = c->shape[i];
    ATTN_TRY(batch_strides(a, p, p->astr));
    ATTN_TRY(batch_strides(b, p, p->bstr));
    for (int i = 0; i < p->nb; ++i)
        p->cstr[i] = p->bshape[i] > 1 ? c->stride[i] : 0;
    if (!fits_int(p->c.r) || !fits_int(p->c.c) || !fits_int(p->a.c))
        return ATTN_ERANGE;
    p->es = attn_dtype_size(c->dtype);
    p->fa = form_of(p->a);
    p->fb = form_of(p->b);
    p->fc = form_of(p->c);
    const lmat *m[3] = {&p->a, &p->b, &p->c};
    blas_form *f[3] = {&p->fa, &p->fb, &p->fc};
    size_t *w[3] = {&p->wa, &p->wb, &p->wc};
    for (int i = 0; i < 3; ++i) {
        if (f[i]->direct) {
            if (!fits_int(f[i]->ld))
                f[i]->direct = false; /* too wide a leading dim: pack instead */
            else
                continue;
        }
        size_t bytes;
        if (!attn__mul_sz((size_t)m[i]->r, (size_t)m[i]->c, &bytes) ||
            !attn__mul_sz(bytes, p->es, &bytes) || bytes > SIZE_MAX - 64)
            return ATTN_ERANGE;
        *w[i] = attn__align64(bytes);
        f[i]->ld = m[i]->c > 1 ? m[i]->c : 1;
        f[i]->trans = false;
    }
    size_t total;
    if (!attn__add_sz(p->wa, p->wb, &total) || !attn__add_sz(total, p->wc, &total))
        return ATTN_ERANGE;
    if (attn__numel(c) == 0) /* e.g. 0 batches of (2^31-1, 8): nothing is packed */
        p->wa = p->wb = p->wc = 0;
    return ATTN_OK;
}

/* Every check of the public door, in the documented order (docs/reliability.md). */
static attn_status gemm_check(attn_trans ta, attn_trans tb, const attn_view *a,
                              const attn_view *b, const attn_view *c, gemm_plan *p) {
    ATTN_TRY(gemm_check_views(ta, tb, a, b, c));
    ATTN_TRY(gemm_layout(ta, tb, a, b, c, p));
    return gemm_check_aliasing(a, b, c);
}

size_t attn__gemm_pack_size(const attn_view *x, attn_trans t) {
    lmat m = logical(x, t);
    blas_form f = form_of(m);
    if (f.direct && fits_int(f.ld))
        return 0;
    return attn__align64((size_t)m.r * (size_t)m.c * attn_dtype_size(x->dtype));
}

attn_status attn__gemm_need(attn_trans ta, attn_trans tb, const attn_view *a,
                            const attn_view *b, const attn_view *c, size_t *bytes) {
    gemm_plan p;
    ATTN_ASSERT(gemm_check_views(ta, tb, a, b, c) == ATTN_OK);
    ATTN_TRY(gemm_layout(ta, tb, a, b, c, &p));
    *bytes = p.wa + p.wb + p.wc;
    return ATTN_OK;
}

size_t attn_gemm_workspace_size(attn_trans ta, attn_trans tb, const attn_view *a,
                                const attn_view *b, const attn_view *c) {
    gemm_plan p;
    if (gemm_check(ta, tb, a, b, c, &p) != ATTN_OK)
        return 0;
    return p.wa + p.wb + p.wc;
}

/* Copy a logical matrix to/from a contiguous row-major block. */
static void pack(const char *src, lmat m, size_t es, char *dst) {
    for (int64_t i = 0; i < m.r; ++i)
        for (int64_t j = 0; j < m.c; ++j)
            memcpy(dst + (size_t)(i * m.c + j) * es, src + (i * m.sr + j * m.sc) * (int64_t)es,
                   es);
}

static void unpack(const char *src, lmat m, size_t es, char *dst) {
    for (int64_t i = 0; i < m.r; ++i)
        for (int64_t j = 0; j < m.c; ++j)
            memcpy(dst + (i * m.sr + j * m.sc) * (int64_t)es, src + (size_t)(i * m.c + j) * es,
                   es);
}

/* One row-major CBLAS product, as the BLAS takes it. */
typedef struct rm_gemm {
    size_t                 es;
    enum CBLAS_TRANSPOSE   ta, tb;
    int                    m, n, k, lda, ldb, ldc;
    double                 alpha, beta;
    const void            *a, *b;
    void                  *c;
} rm_gemm;

/*
 * C's one row as a matrix-vector product, y := alpha op(B)^T x + beta y with x the row
 * of op(A): the BLAS's GEMV streams op(B) once, where its GEMM packs it first (a
 * decode step's projections; docs/decoding.md). y is zeroed first when beta == 0, so
 * that C is never read then, whatever the BLAS's scaling does with NaN.
 */
static void rm_gemv(const rm_gemm *g) {
    int incx = g->ta == CblasNoTrans ? 1 : g->lda;
    /* op(B) (K, N): B stored (K, N) is y = B^T x; B stored (N, K) is y = B x */
    enum CBLAS_TRANSPOSE t = g->tb == CblasNoTrans ? CblasTrans : CblasNoTrans;
    int rows = g->tb == CblasNoTrans ? g->k : g->n, cols = g->tb == CblasNoTrans ? g->n : g->k;
    if (g->beta == 0.0)
        memset(g->c, 0, (size_t)g->n * g->es);
    if (g->es == 4)
        cblas_sgemv(CblasRowMajor, t, rows, cols, (float)g->alpha, (const float *)g->b, g->ldb,
                    (const float *)g->a, incx, (float)g->beta, (float *)g->c, 1);
    else
        cblas_dgemv(CblasRowMajor, t, rows, cols, g->alpha, (const double *)g->b, g->ldb,
                    (const double *)g->a, incx, g->beta, (double *)g->c, 1);
}

/* The product as one BLAS call, single-threaded where the thread rule says so: GEMV
   for one row of C, GEMM otherwise. */
static void rm_run(const rm_gemm *g) {
    int tok = attn__blas_begin();
    if (g->m == 1)
        rm_gemv(g);
    else if (g->es == 4)
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, g->m, g->n, g->k, (float)g->alpha,
                    (const float *)g->a, g->lda, (const float *)g->b, g->ldb,
                    (float)g->beta, (float *)g->c, g->ldc);
    else
        cblas_dgemm(CblasRowMajor, g->ta, g->tb, g->m, g->n, g->k, g->alpha,
                    (const double *)g->a, g->lda, (const double *)g->b, g->ldb, g->beta,
                    (double *)g->c, g->ldc);
    attn__blas_end(tok);
}

/* One C := alpha op(A) op(B) + beta C on raw pointers, in row-major CBLAS terms. */
static void blas_call(const gemm_plan *p, double alpha, const void *a, const void *b,
                      double beta, void *c) {
    int M = (int)p->c.r, N = (int)p->c.c, K = (int)p->a.c;
    if (M == 0 || N == 0)
        return;
    if (K == 0) { /* C := beta C; BLAS quick-return rules differ between libraries */
        lmat m = p->c;
        for (int64_t i = 0; i < m.r; ++i)
            for (int64_t j = 0; j < m.c; ++j) {
                int64_t off = p->fc.trans ? i + j * p->fc.ld : i * p->fc.ld + j;
                if (p->es == 4)
                    ((float *)c)[off] = beta == 0.0 ? 0.0f : (float)beta * ((float *)c)[off];
                else
                    ((double *)c)[off] = beta == 0.0 ? 0.0 : beta * ((double *)c)[off];
            }
        return;
    }
    const void *A = a, *B = b;
    blas_form fa = p->fa, fb = p->fb;
    if (p->fc.trans) {
        /* C is column-major: compute C^T = op(B)^T op(A)^T in row-major terms */
        const void *t = A; A = B; B = t;
        blas_form ft = fa; fa = fb; fb = ft;
        fa.trans = !fa.trans;
        fb.trans = !fb.trans;
        int x = M; M = N; N = x;
    }
    rm_gemm g = {.es = p->es,
                 .ta = fa.trans ? CblasTrans : CblasNoTrans,
                 .tb = fb.trans ? CblasTrans : CblasNoTrans,
                 .m = M, .n = N, .k = K,
                 .lda = (int)fa.ld, .ldb = (int)fb.ld, .ldc = (int)p->fc.ld,
                 .alpha = alpha, .beta = beta, .a = A, .b = B, .c = c};
    rm_run(&g);
}

/*
 * When B is shared by the whole batch and A and C are row-major with batch
 * dims that continue their row stride, the batch is just more rows of A and
 * C: one large GEMM (a projection of (B, T, C) activations by a (C, N)
 * weight) instead of B*T/T small ones.
 */
static bool fold_batch(gemm_plan *p) {
    if (p->nb == 0 || !p->fa.direct || p->fa.trans || !p->fc.direct || p->fc.trans)
        return false;
    int64_t rows = p->c.r;
    for (int i = p->nb - 1; i >= 0; --i) {
        if (p->bshape[i] == 1)
            continue;
        if (p->bstr[i] != 0)
            return false;
        if (p->astr[i] != rows * p->fa.ld || p->cstr[i] != rows * p->fc.ld)
            return false;
        rows *= p->bshape[i];
    }
    if (!fits_int(rows))
        return false;
    p->a.r = p->c.r = rows;
    p->nb = 0;
    return true;
}

/* The products of a laid-out plan, on a workspace of at least wa + wb + wc bytes. */
static void gemm_exec(gemm_plan *p, double alpha, const attn_view *a, const attn_view *b,
                      double beta, attn_view *c, void *work) {
    fold_batch(p);
    char *wa = work, *wb = wa ? wa + p->wa : NULL, *wc = wb ? wb + p->wb : NULL;
    /* an empty C needs nothing, however many batches it has (2^32 of them must not loop) */
    int64_t nbatch = p->c.r > 0 && p->c.c > 0;
    for (int i = 0; i < p->nb; ++i)
        nbatch *= p->bshape[i];
    int64_t es = (int64_t)p->es;
    for (int64_t t = 0; t < nbatch; ++t) {
        int64_t idx[2] = {0, 0}, rem = t;
        for (int i = p->nb - 1; i >= 0; --i) {
            idx[i] = rem % p->bshape[i];
            rem /= p->bshape[i];
        }
        int64_t oa = 0, ob = 0, oc = 0;
        for (int i = 0; i < p->nb; ++i) {
            oa += idx[i] * p->astr[i];
            ob += idx[i] * p->bstr[i];
            oc += idx[i] * p->cstr[i];
        }
        /* integer arithmetic: an empty operand (K == 0) may have NULL data, never read */
        const char *pa = (const char *)((uintptr_t)a->data + (uintptr_t)(oa * es));
        const char *pb = (const char *)((uintptr_t)b->data + (uintptr_t)(ob * es));
        char *pc = (char *)((uintptr_t)c->data + (uintptr_t)(oc * es));
        if (p->wa) {
            pack(pa, p->a, p->es, wa);
            pa = wa;
        }
        if (p->wb) {
            pack(pb, p->b, p->es, wb);
            pb = wb;
        }
        if (p->wc) {
            if (beta != 0.0)
                pack(pc, p->c, p->es, wc);
            blas_call(p, alpha, pa, pb, beta, wc);
            unpack(wc, p->c, p->es, pc);
        } else {
            blas_call(p, alpha, pa, pb, beta, pc);
        }
    }
}

void attn__gemm_run(attn_trans ta, attn_trans tb, double alpha, const attn_view *a,
                    const attn_view *b, double beta, attn_view *c, void *work,
                    size_t work_size) {
    gemm_plan p;
    ATTN_ASSERT(gemm_check(ta, tb, a, b, c, &p) == ATTN_OK);
    attn_status st = gemm_layout(ta, tb, a, b, c, &p);
    ATTN_ASSERT(st == ATTN_OK && p.wa + p.wb + p.wc <= work_size);
    (void)st;
    (void)work_size;
    gemm_exec(&p, alpha, a, b, beta, c, work);
}

attn_status attn_gemm(attn_trans ta, attn_trans tb, double alpha, const attn_view *a,
                      const attn_view *b, double beta, attn_view *c, void *work,
                      size_t work_size) {
    gemm_plan p;
    ATTN_TRY(gemm_check(ta, tb, a, b, c, &p));
    size_t need = p.wa + p.wb + p.wc;
    void *owned = NULL;
    ATTN_TRY(attn__work_acquire(&work, &work_size, need, &owned));
    /* a caller's packing workspace must not overlap an operand (it is written first) */
    if (!owned && need > 0 && attn__work_overlaps(work, need, (const attn_view *[]){a, b, c}, 3))
        return ATTN_EALIAS;
    gemm_exec(&p, alpha, a, b, beta, c, work);
    free(owned);
    return ATTN_OK;
}
