/* SPDX-License-Identifier: MIT */
/* Per-dtype body of attn_sdpa (included by src/kernels/sdpa.c between tmpl/dtype_on.h and
 * dtype_off.h). */

#if T_IS_F32
#define SDPA_VEXP_TAIL attn__vexp_tail_f32
#define SDPA_FINITE    attn__finite_f32
#else
#define SDPA_VEXP_TAIL attn__vexp_tail_f64
#define SDPA_FINITE    attn__finite_f64
#endif

#include "tmpl/mask.h"

/*
 * The transforms, bias and keep on the visible part of score row i (keys j0 ..
 * j0 + lim, all below key_limit(i)), by the shared rule (tmpl/mask.h), while
 * the row is in L1; keys of the part below the row's first visible key (a
 * window, a packed sequence) become -inf. The tail past lim is the caller's
 * (-inf for the trace, 0 written by SDPA_VEXP_TAIL in the forward and the
 * backward).
 */
static void SFX(mask_row)(const attn__sdpa_plan *p, int64_t b, int64_t h, int64_t i, int64_t j0,
                          int64_t lim, T *sr) {
    attn__score_xf xf, *xp = NULL;
    int64_t a = 0;
    if (p->variant) {
        attn__sdpa_row rw = attn__sdpa_row_of(p, b, i);
        a = rw.lo - j0;
        a = a < 0 ? 0 : a > lim ? lim : a;
        for (int64_t c = 0; c < a; ++c)
            sr[c] = (T)-INFINITY;
        xf = (attn__score_xf){p->softcap, attn__sdpa_slope(p, h), rw.pos - (j0 + a - rw.key0)};
        xp = &xf;
    }
    const T *br = p->has_bias ? (const T *)attn__at4(&p->bias, b, h, i, j0 + a) : NULL;
    const uint8_t *kr =
        p->has_keep ? (const uint8_t *)attn__at4(&p->keep, b, h, i, j0 + a) : NULL;
    SFX(attn_mask_scores)(sr + a, lim - a, xp, br, p->bias.stride[3], kr, p->keep.stride[3]);
}

/* The visible length of row i0 + r in the key tile j0 .. j0 + cols. */
static inline int64_t SFX(row_lim)(const attn__sdpa_plan *p, int64_t b, int64_t i, int64_t j0,
                                   int64_t cols) {
    int64_t lim = attn__sdpa_key_limit(p, b, i) - j0;
    return lim < 0 ? 0 : lim > cols ? cols : lim;
}

/* Bias and masks on a score tile S (rows, cols), masked keys -inf (the trace's rule). */
static void SFX(mask_tile)(const attn__sdpa_plan *p, int64_t b, int64_t h, int64_t i0,
                           int64_t rows, int64_t j0, int64_t cols, T *s, int64_t lds) {
    for (int64_t r = 0; r < rows; ++r) {
        T *sr = s + r * lds;
        int64_t lim = SFX(row_lim)(p, b, i0 + r, j0, cols);
        SFX(mask_row)(p, b, h, i0 + r, j0, lim, sr);
        for (int64_t c = lim; c < cols; ++c)
            sr[c] = (T)-INFINITY;
    }
}

#include "tmpl/view_finite.h"

/*
 * Rows r0 .. r0 + rows of a forward task against keys j0 .. j0 + cols: S = scale q k^T;
 * then per row, while it is in L1: bias and keep, max, exp, sum (the online softmax's
 * update of m, l and acc); then acc += P v. The rows' acc is written for the first
 * time when !any (beta 0).
 */
static void SFX(fwd_tile)(const fwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t r0,
                          int64_t rows, int64_t j0, int64_t cols, char *wsp, bool any,
                          bool checked) {
    const attn__sdpa_plan *p = c->p;
    int64_t lds = p->bk, Dv = p->Dv, hk = h / p->group;
    T *s = (T *)(wsp + c->off_s) + r0 * lds, *acc = (T *)(wsp + c->off_acc) + r0 * Dv;
    T *m = (T *)(wsp + c->off_m) + r0, *l = (T *)(wsp + c->off_l) + r0;
    void *gw = c->gws ? wsp + c->off_gw : NULL;
    if (cols <= 0) { /* no row here sees a key of this tile: P = 0 */
        if (!any)
            memset(acc, 0, (size_t)(rows * Dv) * sizeof(T));
        return;
    }
    attn__sdpa_scores_gemm(p, c->q, c->k, b, h, i0 + r0, rows, j0, cols, s, lds, gw, c->gws);
    for (int64_t r = 0; r < rows; ++r) {
        T *sr = s + r * lds;
        int64_t lim = SFX(row_lim)(p, b, i0 + r0 + r, j0, cols);
        SFX(mask_row)(p, b, h, i0 + r0 + r, j0, lim, sr);
        T mt = T_VMAX(sr, lim);
        T mn = mt > m[r] ? mt : m[r];
        if (mn == (T)-INFINITY) {                /* nothing visible yet: P row = 0 */
            T nan = SFX(attn_mask_nan)(sr, lim); /* VMAX skips NaN: it must poison l */
            if (nan != 0)
                l[r] = nan;
            memset(sr, 0, (size_t)cols * sizeof(T));
            continue;
        }
        T sum = SDPA_VEXP_TAIL(sr, lim, cols, mn); /* P = exp(S - m_new), 0 past lim */
        T corr = T_EXP(m[r] - mn);                 /* 0 when m_old = -inf */
        l[r] = l[r] * corr + sum;
        m[r] = mn;
        if (any && corr != 1) {
            T *ar = acc + r * Dv;
            if (corr == 0)
                memset(ar, 0, (size_t)Dv * sizeof(T));
            else
                for (int64_t d = 0; d < Dv; ++d)
                    ar[d] *= corr;
        }
    }
    /* acc (rows, Dv) = P (rows, cols) v[j0:j0+cols] (+ acc) */
    attn_view pv = attn__sdpa_buf(p->dt, s, rows, cols, lds);
    attn_view vt = attn__sdpa_rows(c->v, b, hk, j0, cols);
    attn_view acc_v = attn__sdpa_buf(p->dt, acc, rows, Dv, Dv);
    if (!checked || SFX(view_finite)(&vt))
        attn__gemm_run(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &pv, &vt, any ? 1.0 : 0.0, &acc_v, gw,
                       c->gws);
    else /* NaN or inf in v: skip the zero weights, 0 * NaN must not reach a row */
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t d = 0; d < Dv; ++d) {
                double a = any ? (double)acc[r * Dv + d] : 0.0;
                for (int64_t j = 0; j < cols; ++j)
                    if (s[r * lds + j] != 0)
                        a += (double)s[r * lds + j] *
                             (double)*(const T *)attn__at4(c->v, b, hk, j0 + j, d);
                acc[r * Dv + d] = (T)a;
            }
}

/*
 * One task of the forward: batch b, query head h, query rows i0..i0+rows.
 * Online softmax over key tiles (Milakov & Gimelshein 2018; FlashAttention-2,
 * Dao 2023): per row the running max m and sum l of exp(s - m), and
 * acc = sum_j exp(s_j - m) v_j, rescaled by exp(m_old - m_new) when m grows.
 * The MATERIALIZED algorithm is the same loop with one tile of whole rows
 * (bk = Tk), after which the tile holds the unnormalized weights.
 * A tile that the causal diagonal (or kv_len, a window's edges, a packed sequence's
 * end) cuts, where the rows do not all see all of it, is done in slices of
 * ATTN__SDPA_DIAG_ROWS rows (cut also where a packed sequence ends), each against
 * only the keys from its first row's first visible key (TILED) to its last row's
 * last: at bq 256 that cuts the products wasted on hidden keys from 128 per row on
 * average (bq / 2) to 32. The tiles run from the first row's first visible key to
 * the last row's last, so a window of W keys costs O(W) tiles per query block.
 */
static bool SFX(fwd_task_run)(const fwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t jlo,
                              int64_t jhi, const fwd_piece *piece, char *wsp, bool checked) {
    const attn__sdpa_plan *p = c->p;
    int64_t rows = p->Tq - i0 < p->bq ? p->Tq - i0 : p->bq;
    int64_t lds = p->bk, Dv = p->Dv;
    T *s = (T *)(wsp + c->off_s), *acc = (T *)(wsp + c->off_acc);
    T *m = (T *)(wsp + c->off_m), *l = (T *)(wsp + c->off_l);
    /* the visible keys grow with i: [first row's lo, last row's hi) holds them all */
    attn__sdpa_row first = attn__sdpa_row_of(p, b, i0),
                   last = attn__sdpa_row_of(p, b, i0 + rows - 1);
    int64_t klo = p->tiled && first.lo > jlo ? first.lo : jlo, khi = last.hi;
    if (khi > jhi) /* a key-split piece sees keys [jlo, jhi) */
        khi = jhi;
    bool any = false; /* acc has been written */
    for (int64_t r = 0; r < rows; ++r) {
        m[r] = (T)-INFINITY;
        l[r] = 0;
    }
    for (int64_t j0 = klo; j0 < khi; j0 += p->bk) {
        int64_t cols = khi - j0 < p->bk ? khi - j0 : p->bk;
        if (p->has_keep && !attn__sdpa_keep_any(p, b, h, i0, rows, j0, cols))
            continue; /* a fully masked tile costs nothing */
        /* every row sees the whole tile (then one sequence): one product */
        bool whole = first.lo <= j0 && first.hi >= j0 + cols && last.lo <= j0;
        for (int64_t r0 = 0, n; r0 < rows; r0 += n) {
            n = rows - r0;
            int64_t s0 = j0, s1 = j0 + cols;
            if (!whole) {
                attn__sdpa_row a = attn__sdpa_row_of(p, b, i0 + r0);
                n = n < ATTN__SDPA_DIAG_ROWS ? n : ATTN__SDPA_DIAG_ROWS;
                n = n < a.qend - (i0 + r0) ? n : a.qend - (i0 + r0);
                attn__sdpa_row z = attn__sdpa_row_of(p, b, i0 + r0 + n - 1);
                s0 = p->tiled && a.lo > j0 ? a.lo : j0; /* materialized: whole rows from 0 */
                s1 = z.hi < s1 ? z.hi : s1;
            }
            SFX(fwd_tile)(c, b, h, i0, r0, n, s0, s1 > s0 ? s1 - s0 : 0, wsp, any, checked);
        }
        any = true;
    }
    /*
     * Unchecked (the first run): a NaN or inf in a v tile reaches acc whatever its
     * weights (0 * inf is NaN), so a finite acc proves every v tile used was finite;
     * otherwise the caller runs the task again checking each v tile (exact path).
     */
    if (!checked && any && !SDPA_FINITE(acc, rows * Dv))
        return false;
    /* out = acc / l; lse = m + log(l) (with a sink: attn__sdpa_finish); a row that saw no
       key: 0 and LSE_EMPTY, or the sink */
    double sink = piece ? -INFINITY : attn__sdpa_sink(p, h), lse_r;
    T empty = (T)(p->has_sinks ? sink : ATTN__SDPA_LSE_EMPTY);
    for (int64_t r = 0; r < rows; ++r) {
        bool live = any && !(l[r] <= 0); /* a NaN l (NaN score) propagates, never 0 */
        double invd = 0;
        if (live && (p->has_sinks || c->lse))
            attn__sdpa_finish((double)m[r], (double)l[r], sink, &invd, &lse_r);
        else if (live) /* no lse wanted: no log */
            invd = 1.0 / (double)l[r];
        T inv = (T)invd;
        if (piece) { /* a key chunk: its normalized partial out and statistics, merged later */
            T *po = (T *)piece->o + r * Dv;
            for (int64_t d = 0; d < Dv; ++d)
                po[d] = live ? acc[r * Dv + d] * inv : 0;
            piece->m[r] = live ? (double)m[r] : -INFINITY;
            piece->l[r] = live ? (double)l[r] : 0.0;
            continue;
        }
        T *orow = (T *)attn__at4(c->out, b, h, i0 + r, 0);
        int64_t so = c->out->stride[3];
        for (int64_t d = 0; d < Dv; ++d)
            orow[d * so] = live ? acc[r * Dv + d] * inv : 0;
        if (c->lse)
            *(T *)attn__at3(c->lse, b, h, i0 + r) = live ? (T)lse_r : empty;
        if (c->mo.base) { /* the exact statistics, for merging (ring attention) */
            int64_t at = b * c->mo.s0 + h * c->mo.s1 + i0 + r;
            c->mo.base[at] = live ? (double)m[r] : -INFINITY;
            c->lo.base[b * c->lo.s0 + h * c->lo.s1 + i0 + r] = live ? (double)l[r] : 0.0;
        }
        if (c->weights) { /* materialized: s holds exp(S - m) for keys [0, khi) */
            T *wrow = (T *)attn__at4(c->weights, b, h, i0 + r, 0);
            int64_t sw = c->weights->stride[3];
            int64_t vis = attn__sdpa_key_limit(p, b, i0 + r); /* s is exp(S - m) there */
            for (int64_t j = 0; j < p->Tk; ++j)
                wrow[j * sw] = live && j < vis ? s[r * lds + j] * inv : 0;
        }
    }
    return true;
}

/*
 * One task: unchecked first (no per-tile scan of v), again with the checks when
 * its accumulator is not finite.
 */
static void SFX(fwd_task)(const fwd_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t jlo,
                          int64_t jhi, const fwd_piece *piece, char *wsp) {
    if (!SFX(fwd_task_run)(c, b, h, i0, jlo, jhi, piece, wsp, false))
        SFX(fwd_task_run)(c, b, h, i0, jlo, jhi, piece, wsp, true);
}

/*
 * The merge of key-split task tb = (b, h, query block): its nsplit pieces, in key
 * order, through attn__softmax_merge_row (the ring's and split-KV decode's merge),
 * then lse = m + log(l) (LSE_EMPTY, out 0 for a row that saw no key).
 */
static void SFX(fwd_merge)(const fwd_ctx *c, int64_t nqb, int64_t tb, void *work) {
    const attn__sdpa_plan *p = c->p;
    int64_t qb = nqb - 1 - tb % nqb, bh = tb / nqb, b = bh / p->H, h = bh % p->H;
    int64_t i0 = qb * p->bq, rows = p->Tq - i0 < p->bq ? p->Tq - i0 : p->bq, Dv = p->Dv;
    size_t osz = c->piece_size - 2 * c->piece_ml;
    int64_t so = c->out->stride[3];
    for (int64_t r = 0; r < rows; ++r) {
        T *orow = (T *)attn__at4(c->out, b, h, i0 + r, 0);
        double rm = -INFINITY, rl = 0;
        for (int64_t sp = 0; sp < c->nsplit; ++sp) {
            const char *at = (const char *)work + c->off_pieces +
                             (size_t)(tb * c->nsplit + sp) * c->piece_size;
            const double *pm = (const double *)(at + osz),
                         *pl = (const double *)(at + osz + c->piece_ml);
            SFX(attn__softmax_merge_row)
            (orow, so, &rm, &rl, (const T *)at + r * Dv, pm[r], pl[r], Dv);
        }
        bool live = rl != 0; /* NaN (a NaN score) propagates */
        double sink = attn__sdpa_sink(p, h), inv = 0, lse = sink;
        if (!live)
            for (int64_t d = 0; d < Dv; ++d)
                orow[d * so] = 0;
        else
            attn__sdpa_finish(rm, rl, sink, &inv, &lse);
        if (live && p->has_sinks) /* the merged out is acc / rl: rescale by rl inv */
            for (int64_t d = 0; d < Dv; ++d)
                orow[d * so] = (T)((double)orow[d * so] * (rl * inv));
        if (c->lse)
            *(T *)attn__at3(c->lse, b, h, i0 + r) =
                live || p->has_sinks ? (T)lse : (T)ATTN__SDPA_LSE_EMPTY;
        if (c->mo.base) {
            c->mo.base[b * c->mo.s0 + h * c->mo.s1 + i0 + r] = live ? rm : -INFINITY;
            c->lo.base[b * c->lo.s0 + h * c->lo.s1 + i0 + r] = live ? rl : 0.0;
        }
    }
}

#undef SDPA_VEXP_TAIL
#undef SDPA_FINITE
