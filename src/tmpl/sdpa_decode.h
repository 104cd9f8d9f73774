/* SPDX-License-Identifier: MIT */
/* Per-dtype body of the split-KV decode kernel (kernels/sdpa_decode.c; tmpl/dtype_on.h sets T).
 */

/*
 * s[j] = scale q . k_j for n keys k_j = k + j ldk (unit stride in D). With
 * GCC or Clang vector extensions and D a multiple of a 64-byte vector: each
 * key's products summed in two vector accumulators, then halved down to one
 * lane (keys are independent, so their reductions overlap in the core); the
 * scalar loop otherwise.
 */
#if defined(__GNUC__)
typedef T SFX(vec) __attribute__((vector_size(64), aligned(sizeof(T))));
typedef T SFX(vec32) __attribute__((vector_size(32), aligned(sizeof(T))));
typedef T SFX(vec16) __attribute__((vector_size(16), aligned(sizeof(T))));
enum { SFX(NL) = 64 / sizeof(T) };

static inline __attribute__((always_inline)) T SFX(hsum)(const SFX(vec) * v) {
    SFX(vec32) a, b;
    memcpy(&a, v, 32);
    memcpy(&b, (const char *)v + 32, 32);
    a += b;
    SFX(vec16) c, d;
    memcpy(&c, &a, 16);
    memcpy(&d, (char *)&a + 16, 16);
    c += d;
    T t = 0;
    for (size_t l = 0; l < 16 / sizeof(T); ++l)
        t += c[l];
    return t;
}
#endif

ATTN_CLONES static void SFX(dots)(const T *restrict q, const T *restrict k, int64_t ldk,
                                  int64_t n, int64_t D, T scale, T *restrict s) {
#if defined(__GNUC__) && T_IS_F32 && (defined(__clang__) || __GNUC__ >= 12)
    /*
     * Four keys at a time: their 16-lane sums are halved and transposed
     * together (10 shuffles and adds for 4 keys instead of 8 per key).
     */
    if (D % SFX(NL) == 0) {
        typedef float v8 __attribute__((vector_size(32), aligned(4)));
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            SFX(vec) a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, x, y0, y1, y2, y3;
            const T *k0 = k + j * ldk;
            for (int64_t d = 0; d < D; d += SFX(NL)) {
                memcpy(&x, q + d, 64);
                memcpy(&y0, k0 + d, 64);
                memcpy(&y1, k0 + ldk + d, 64);
                memcpy(&y2, k0 + 2 * ldk + d, 64);
                memcpy(&y3, k0 + 3 * ldk + d, 64);
                a0 += x * y0;
                a1 += x * y1;
                a2 += x * y2;
                a3 += x * y3;
            }
            SFX(vec) a[4] = {a0, a1, a2, a3};
            v8 h[4];
            for (int r = 0; r < 4; ++r) {
                v8 lo, hi;
                memcpy(&lo, &a[r], 32);
                memcpy(&hi, (char *)&a[r] + 32, 32);
                h[r] = lo + hi;
            }
            v8 x01 = __builtin_shufflevector(h[0], h[1], 0, 1, 2, 3, 8, 9, 10, 11) +
                     __builtin_shufflevector(h[0], h[1], 4, 5, 6, 7, 12, 13, 14, 15);
            v8 x23 = __builtin_shufflevector(h[2], h[3], 0, 1, 2, 3, 8, 9, 10, 11) +
                     __builtin_shufflevector(h[2], h[3], 4, 5, 6, 7, 12, 13, 14, 15);
            /* lanes: key 0 (2), key 2 (2), key 1 (2), key 3 (2) */
            v8 yv = __builtin_shufflevector(x01, x23, 0, 1, 8, 9, 4, 5, 12, 13) +
                    __builtin_shufflevector(x01, x23, 2, 3, 10, 11, 6, 7, 14, 15);
            v8 z = yv + __builtin_shufflevector(yv, yv, 1, 0, 3, 2, 5, 4, 7, 6);
            s[j] = scale * z[0];
            s[j + 1] = scale * z[4];
            s[j + 2] = scale * z[2];
            s[j + 3] = scale * z[6];
        }
        for (; j < n; ++j) {
            SFX(vec) a0 = {0}, x, y;
            for (int64_t d = 0; d < D; d += SFX(NL)) {
                memcpy(&x, q + d, 64);
                memcpy(&y, k + j * ldk + d, 64);
                a0 += x * y;
            }
            s[j] = scale * SFX(hsum)(&a0);
        }
        return;
    }
#endif
#if defined(__GNUC__)
    if (D % (2 * SFX(NL)) == 0) {
        for (int64_t j = 0; j < n; ++j) {
            const T *kj = k + j * ldk;
            SFX(vec) a0 = {0}, a1 = {0}, x, y;
            for (int64_t d = 0; d < D; d += 2 * SFX(NL)) {
                memcpy(&x, q + d, 64);
                memcpy(&y, kj + d, 64);
                a0 += x * y;
                memcpy(&x, q + d + SFX(NL), 64);
                memcpy(&y, kj + d + SFX(NL), 64);
                a1 += x * y;
            }
            a0 += a1;
            s[j] = scale * SFX(hsum)(&a0);
        }
        return;
    }
#endif
    for (int64_t j = 0; j < n; ++j) {
        const T *kj = k + j * ldk;
        T t = 0;
        for (int64_t d = 0; d < D; ++d)
            t += q[d] * kj[d];
        s[j] = scale * t;
    }
}

/* acc += sum_j p[j] v_j for n values v_j = v + j ldv (unit stride in D), four keys a pass. */
ATTN_CLONES static void SFX(axpys)(T *restrict acc, const T *restrict p, const T *restrict v,
                                   int64_t ldv, int64_t n, int64_t D) {
    int64_t j = 0;
#if defined(__GNUC__)
    if (D % SFX(NL) == 0) {
        /* up to four vectors of acc stay in registers while the keys stream by */
        for (int64_t d0 = 0; d0 < D; d0 += 4 * SFX(NL)) {
            int nv = (int)((D - d0) / SFX(NL) < 4 ? (D - d0) / SFX(NL) : 4);
            SFX(vec) a[4] = {{0}, {0}, {0}, {0}}, x;
            for (int r = 0; r < nv; ++r)
                memcpy(&a[r], acc + d0 + r * SFX(NL), 64);
            if (nv == 4) { /* named accumulators: GCC keeps them in registers */
                SFX(vec) a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], x1, x2, x3;
                for (j = 0; j < n; ++j) {
                    const T *vj = v + j * ldv + d0;
                    memcpy(&x, vj, 64);
                    memcpy(&x1, vj + SFX(NL), 64);
                    memcpy(&x2, vj + 2 * SFX(NL), 64);
                    memcpy(&x3, vj + 3 * SFX(NL), 64);
                    a0 += p[j] * x;
                    a1 += p[j] * x1;
                    a2 += p[j] * x2;
                    a3 += p[j] * x3;
                }
                a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
            } else
                for (j = 0; j < n; ++j)
                    for (int r = 0; r < nv; ++r) {
                        memcpy(&x, v + j * ldv + d0 + r * SFX(NL), 64);
                        a[r] += p[j] * x;
                    }
            for (int r = 0; r < nv; ++r)
                memcpy(acc + d0 + r * SFX(NL), &a[r], 64);
        }
        return;
    }
#endif
    for (; j + 4 <= n; j += 4) {
        const T *v0 = v + j * ldv, *v1 = v0 + ldv, *v2 = v1 + ldv, *v3 = v2 + ldv;
        T p0 = p[j], p1 = p[j + 1], p2 = p[j + 2], p3 = p[j + 3];
        for (int64_t d = 0; d < D; ++d)
            acc[d] += p0 * v0[d] + p1 * v1[d] + p2 * v2[d] + p3 * v3[d];
    }
    for (; j < n; ++j) {
        const T *vj = v + j * ldv;
        for (int64_t d = 0; d < D; ++d)
            acc[d] += p[j] * vj[d];
    }
}

/* The same two loops for any strides. */
static void SFX(dots_strided)(const T *q, const T *k, int64_t ldk, int64_t sk, int64_t n,
                              int64_t D, T scale, T *s) {
    for (int64_t j = 0; j < n; ++j) {
        T t = 0;
        for (int64_t d = 0; d < D; ++d)
            t += q[d] * k[j * ldk + d * sk];
        s[j] = scale * t;
    }
}
static void SFX(axpys_strided)(T *acc, const T *p, const T *v, int64_t ldv, int64_t sv,
                               int64_t n, int64_t D) {
    for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < D; ++d)
            acc[d] += p[j] * v[j * ldv + d * sv];
}

/*
 * acc += sum_j p[j] v_j over the keys with p[j] != 0 only: with keep or bias a masked
 * key inside the row's range has weight exactly 0, and 0 * (NaN or inf in its v) must
 * not reach the row (docs/numerics.md "Masked positions and NaN").
 */
static void SFX(axpys_skip)(T *acc, const T *p, const T *v, int64_t ldv, int64_t sv, int64_t n,
                            int64_t D) {
    for (int64_t j = 0; j < n; ++j) {
        if (p[j] == 0)
            continue;
        const T *vj = v + j * ldv;
        T pj = p[j];
        if (sv == 1)
            for (int64_t d = 0; d < D; ++d)
                acc[d] += pj * vj[d];
        else
            for (int64_t d = 0; d < D; ++d)
                acc[d] += pj * vj[d * sv];
    }
}

#include "tmpl/mask.h"

/* Element h of a (H) view of the plan's dtype, in double (ALiBi slopes, sinks). */
static inline double SFX(head_value)(const attn_view *v, int64_t h) {
    return (double)*(const T *)attn__elem(v, &h);
}

/* Keys below this limit row i of batch b may see (causal, window, its length). */
static inline int64_t SFX(row_limit)(const attn__decode_plan *p, int64_t b, int64_t i) {
    int64_t L = p->klen[b], pos = p->qpos0[b] + i;
    if (i >= (p->nrows ? p->nrows[b] : p->Tq))
        return 0;
    if (p->causal && pos + 1 < L)
        L = pos + 1;
    if (p->window && p->wr < L - pos - 1)
        L = pos + p->wr + 1;
    return L < 0 ? 0 : L;
}

/* The first key row i of batch b may see (a window's left edge; 0 without). */
static inline int64_t SFX(row_first)(const attn__decode_plan *p, int64_t b, int64_t i) {
    int64_t pos = p->qpos0[b] + i;
    return p->window && pos > p->wl ? pos - p->wl : 0;
}

/*
 * Task (b, kv head hk, split s): the G query heads x Tq rows that read kv
 * head hk, against keys [j0, j1) of the split, in blocks of BLK keys with an
 * online softmax (running max m, sum l, unnormalized acc). The split's
 * normalized partial out and its lse go to the partials for the merge; with
 * one split per head (B Hkv at least the thread count) the task writes out
 * and lse itself and no merge pass runs.
 */
static void SFX(split_task)(const attn__decode_plan *p, const attn_view *q, const attn_view *k,
                            const attn_view *v, int64_t b, int64_t hk, int64_t s, char *w,
                            int tid, const attn_view *out, const attn_view *lse) {
    int64_t R = p->G * p->Tq, D = p->D, Tq = p->Tq;
    size_t es = sizeof(T), rd = attn__align64((size_t)(R * D) * es);
    char *ws = w + (size_t)tid * p->per_thread;
    T *qb = (T *)ws, *acc = (T *)(ws + rd), *sc = (T *)(ws + 2 * rd);
    T *m = (T *)(ws + 2 * rd + attn__align64((size_t)(R * BLK) * es));
    T *l = m + attn__align64((size_t)R * es) / es;
    size_t slot = (size_t)((b * p->Hkv + hk) * p->nsplit + s);
    T *part = (T *)(w + p->off_part) + slot * (size_t)(R * D);
    double *pm = (double *)(w + p->off_lse) + 2 * slot * (size_t)R, *pl = pm + R; /* max, sum */
    int64_t L = p->klen[b], ns, chunk;
    splits_of(p, L, &ns, &chunk);
    bool direct = p->nsplit == 1;
    for (int64_t r = 0; r < R; ++r) {
        pm[r] = -INFINITY;
        pl[r] = 0;
        m[r] = (T)-INFINITY;
        l[r] = 0;
    }
    if (s >= ns)
        return;
    int64_t j0 = s * chunk, j1 = j0 + chunk < L ? j0 + chunk : L, khi = j0;
    for (int64_t r = 0; r < R; ++r) {
        int64_t lim = SFX(row_limit)(p, b, r % Tq);
        khi = lim > khi ? lim : khi;
    }
    khi = khi < j1 ? khi : j1;
    int64_t klo = SFX(row_first)(p, b, 0); /* a window: no key before the first row's */
    klo = klo > j0 ? klo : j0;
    if (khi <= j0 && !direct)
        return;
    for (int64_t r = 0; r < R; ++r) {
        const T *qr = (const T *)attn__at4(q, b, hk * p->G + r / Tq, r % Tq, 0);
        for (int64_t d = 0; d < D; ++d)
            qb[r * D + d] = qr[d * q->stride[3]];
    }
    memset(acc, 0, (size_t)(R * D) * es);
    const T *kb = (const T *)attn__at4(k, b, hk, 0, 0),
            *vb = (const T *)attn__at4(v, b, hk, 0, 0);
    int64_t ldk = k->stride[2], ldv = v->stride[2];
    bool unit = k->stride[3] == 1 && v->stride[3] == 1;
    for (int64_t jb = klo; jb < khi; jb += BLK) {
        int64_t n = khi - jb < BLK ? khi - jb : BLK;
        for (int64_t r = 0; r < R; ++r) {
            int64_t h = hk * p->G + r / Tq, i = r % Tq;
            int64_t lim = SFX(row_limit)(p, b, i) - jb, a = SFX(row_first)(p, b, i) - jb;
            lim = lim < 0 ? 0 : lim > n ? n : lim;
            a = a < 0 ? 0 : a;
            if (lim <= a)
                continue;
            T *sr = sc + r * BLK;
            for (int64_t c = 0; c < a; ++c) /* left of the row's window */
                sr[c] = (T)-INFINITY;
            if (unit)
                SFX(dots)
                (qb + r * D, kb + (jb + a) * ldk, ldk, lim - a, D, (T)p->scale, sr + a);
            else
                SFX(dots_strided)
            (qb + r * D, kb + (jb + a) * ldk, ldk, k->stride[3], lim - a, D, (T)p->scale,
             sr + a);
            const T *br = p->has_bias ? (const T *)attn__at4(&p->bias, b, h, i, jb + a) : NULL;
            const uint8_t *kr =
                p->has_keep ? (const uint8_t *)attn__at4(&p->keep, b, h, i, jb + a) : NULL;
            attn__score_xf xf = {p->softcap, 0.0, p->qpos0[b] + i - (jb + a)};
            if (p->has_alibi)
                xf.slope = SFX(head_value)(&p->alibi, h);
            SFX(attn_mask_scores)
            (sr + a, lim - a, &xf, br, p->bias.stride[3], kr, p->keep.stride[3]);
            T mt = T_VMAX(sr, lim);
            T mn = mt > m[r] ? mt : m[r];
            if (mn == (T)-INFINITY) { /* nothing visible yet; VMAX skips NaN: poison l */
                T nan = SFX(attn_mask_nan)(sr, lim);
                if (nan != 0)
                    l[r] = nan;
                continue;
            }
            T sum = T_VEXP_SUM(sr, lim, mn);            /* sr := exp(sr - mn) */
            T corr = (T)exp((double)m[r] - (double)mn); /* 0 when m was -inf */
            l[r] = l[r] * corr + sum;
            m[r] = mn;
            if (corr != 1)
                for (int64_t d = 0; d < D; ++d)
                    acc[r * D + d] *= corr;
            if (p->has_keep || p->has_bias) /* masked keys inside [a, lim): skip their v */
                SFX(axpys_skip)
            (acc + r * D, sr + a, vb + (jb + a) * ldv, ldv, v->stride[3], lim - a, D);
            else if (unit) /* from the row's first visible key: no 0 * v of a hidden one */
                SFX(axpys)(acc + r * D, sr + a, vb + (jb + a) * ldv, ldv, lim - a, D);
            else
                SFX(axpys_strided)
            (acc + r * D, sr + a, vb + (jb + a) * ldv, ldv, v->stride[3], lim - a, D);
        }
    }
    for (int64_t r = 0; r < R; ++r) {
        bool live = !(l[r] <= 0); /* else no key: out 0, lse empty; a NaN l propagates */
        int64_t h = hk * p->G + r / Tq;
        double sink = direct && p->has_sinks ? SFX(head_value)(&p->sinks, h) : -INFINITY;
        double invd = 0, lr = p->has_sinks ? sink : ATTN__SDPA_LSE_EMPTY;
        if (live)
            attn__sdpa_finish((double)m[r], (double)l[r], sink, &invd, &lr);
        T inv = (T)invd;
        if (direct) {
            int64_t i = r % Tq, so = out->stride[3];
            T *o = (T *)attn__at4(out, b, h, i, 0);
            for (int64_t d = 0; d < D; ++d)
                o[d * so] = acc[r * D + d] * inv;
            if (lse)
                *(T *)attn__at3(lse, b, h, i) = (T)lr;
            continue;
        }
        if (!live)
            continue; /* the split contributes nothing */
        for (int64_t d = 0; d < D; ++d)
            part[r * D + d] = acc[r * D + d] * inv;
        pm[r] = (double)m[r];
        pl[r] = (double)l[r];
    }
}

/* out[b, h, i] and lse[b, h, i] for the heads of kv head hk: the splits merged by max and sum.
 */
static void SFX(merge_rows)(const attn__decode_plan *p, int64_t b, int64_t hk,
                            const attn_view *out, const attn_view *lse, char *w) {
    int64_t R = p->G * p->Tq, D = p->D, Tq = p->Tq;
    size_t slot0 = (size_t)((b * p->Hkv + hk) * p->nsplit);
    const T *part = (const T *)(w + p->off_part);
    const double *stats = (const double *)(w + p->off_lse);
    for (int64_t r = 0; r < R; ++r) {
        int64_t h = hk * p->G + r / Tq, i = r % Tq;
        T *o = (T *)attn__at4(out, b, h, i, 0);
        int64_t so = out->stride[3];
        double rm = -INFINITY, rl = 0;
        for (int64_t s = 0; s < p->nsplit; ++s) {
            size_t slot = slot0 + (size_t)s;
            const double *pm = stats + 2 * slot * (size_t)R, *pl = pm + R;
            SFX(attn__softmax_merge_row)
            (o, so, &rm, &rl, part + (slot * (size_t)R + (size_t)r) * (size_t)D, pm[r], pl[r],
             D);
        }
        double sink = p->has_sinks ? SFX(head_value)(&p->sinks, h) : -INFINITY, inv = 0,
               lr = p->has_sinks ? sink : ATTN__SDPA_LSE_EMPTY;
        if (rl == 0) /* no key in any split: out 0, lse empty (or the sink) */
            for (int64_t d = 0; d < D; ++d)
                o[d * so] = 0;
        else
            attn__sdpa_finish(rm, rl, sink, &inv, &lr);
        if (rl != 0 && p->has_sinks) /* the merged out is acc / rl: rescale by rl inv */
            for (int64_t d = 0; d < D; ++d)
                o[d * so] = (T)((double)o[d * so] * (rl * inv));
        if (lse)
            *(T *)attn__at3(lse, b, h, i) = (T)lr;
    }
}
