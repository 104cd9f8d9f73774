/* SPDX-License-Identifier: MIT */
/*
 * The decode API (attn/decode.h) in the promise harness: included by test_promises.c
 * (it shares the arena, the case struct and the mutation engine). A KV cache's k and v
 * are views of the case like any other; its per-batch lengths `len` are a raw int64
 * array in the arena, registered as a U8 view of its bytes (raw: passed by pointer
 * only, never mutated as a view), so "a refused call changed no byte" covers them, the
 * aliasing loops move outputs onto them and them onto every other view, and an
 * accepted call must leave them as the reference says. Cases 44-47:
 *   44 attn_sdpa_decode, 45 attn_mha_step, 46 attn_decoder_memory, 47 attn_decoder_step.
 */

enum { DC_B = 2, DC_TQ = 2, DC_TMAX = 6, DC_C = 4, DC_S = 3, DC_CM = 3, DC_F = 8 };
enum { DC_NSAVED = (int)(sizeof(attn_decoder_saved) / sizeof(attn_view)) };

/* A raw int64 array of n entries in the arena (a U8 view of its bytes), set to vals. */
static int pr_raw_i64(pr_case *c, int kind, int64_t n, const int64_t *vals) {
    int i = pr_add(c, kind, 1, SH(8 * n), ATTN_U8);
    memcpy(c->v[i].data, vals, (size_t)(8 * n));
    c->raw |= (uint64_t)1 << i;
    pr_ptrs(c, i, i + 1);
    return i;
}
static int64_t *pr_i64(pr_case *c, int i) {
    const attn_view *v = PV(i);
    return v ? (int64_t *)v->data : NULL;
}
/* The cache of views (k, v, len) at index i. */
static attn_kv_cache pr_cache(pr_case *c, int i) {
    attn_kv_cache k = {.len = pr_i64(c, i + 2)};
    if (PV(i)) /* by value: a same-object mutation passes another view's contents */
        k.k = *PV(i);
    if (PV(i + 1))
        k.v = *PV(i + 1);
    return k;
}
static attn_decode_opts *pr_dopts(pr_case *c) {
    c->dopts = (attn_decode_opts){.scale = c->step.scale,
                                  .threads = c->step.threads,
                                  .split = c->step.split,
                                  .window = c->step.window,
                                  .window_left = c->step.window_left,
                                  .window_right = c->step.window_right,
                                  .softcap = c->step.softcap};
    return PTR(0, &c->dopts);
}
static attn_step_opts *pr_sopts(pr_case *c) {
    c->step.n_new = c->use_nnew ? c->n_new : NULL;
    c->step.keep = PV(c->keep_i);
    return PTR(0, &c->step);
}
static void pr_gqa_param_views(pr_case *c, int kind, int64_t ckv, int64_t C, int64_t HD,
                               int64_t KD) {
    pr_add(c, kind, 2, SH(C, HD), c->dt);
    pr_add(c, kind, 2, SH(ckv, KD), c->dt);
    pr_add(c, kind, 2, SH(ckv, KD), c->dt);
    pr_add(c, kind, 2, SH(HD, C), c->dt);
    pr_add(c, kind, 1, SH(HD), c->dt);
    pr_add(c, kind, 1, SH(KD), c->dt);
    pr_add(c, kind, 1, SH(KD), c->dt);
    pr_add(c, kind, 1, SH(C), c->dt);
}
/* ln1 (2), self (8), ln2 (2), cross (8), ln3 (2), ffn (4): 26 views from p0. */
static void pr_dec_param_views(pr_case *c, int kind) {
    pr_add(c, kind, 1, SH(DC_C), c->dt), pr_add(c, kind, 1, SH(DC_C), c->dt);
    pr_gqa_param_views(c, kind, DC_C, DC_C, 4, 2);
    pr_add(c, kind, 1, SH(DC_C), c->dt), pr_add(c, kind, 1, SH(DC_C), c->dt);
    pr_gqa_param_views(c, kind, DC_CM, DC_C, 4, 4);
    pr_add(c, kind, 1, SH(DC_C), c->dt), pr_add(c, kind, 1, SH(DC_C), c->dt);
    pr_ffn_param_views(c, kind, DC_C, DC_F);
}
static attn_decoder_params pr_dec_params(pr_case *c, int i) {
    attn_decoder_params p = {.ln1_g = *V(i),
                             .ln1_b = *V(i + 1),
                             .ln2_g = *V(i + 10),
                             .ln2_b = *V(i + 11),
                             .ln3_g = *V(i + 20),
                             .ln3_b = *V(i + 21)};
    p.self_attn = pr_mha_params(c, i + 2, true);
    p.cross = pr_mha_params(c, i + 12, true);
    p.ffn = pr_ffn_params(c, i + 22);
    return p;
}

/* ---- the calls (pointer slots: 0 opts, 1 cfg, 2 params, 3 cache, 4 memory cache) ---- */

static attn_status call_sdpa_decode(pr_case *c) {
    return attn_sdpa_decode(PV(0), PV(1), PV(2), pr_i64(c, 3), true, pr_dopts(c), PV(4), PV(5),
                            c->work, c->work_size);
}
static size_t q_sdpa_decode(pr_case *c) {
    return attn_sdpa_decode_workspace_size(V(0), V(1), V(2), pr_dopts(c));
}
static attn_status call_mha_step(pr_case *c) {
    attn_mha_params p = pr_mha_params(c, c->p0, true);
    attn_kv_cache k = pr_cache(c, c->ck_i);
    return attn_mha_step(PTR(1, &c->mha), PTR(2, &p), pr_sopts(c), PV(c->x_i), PTR(3, &k),
                         PV(c->out_i), c->work, c->work_size);
}
static size_t q_mha_step(pr_case *c) {
    attn_kv_cache k = pr_cache(c, c->ck_i);
    return attn_mha_step_workspace_size(&c->mha, V(c->x_i), &k, pr_sopts(c));
}
static attn_status call_dec_memory(pr_case *c) {
    attn_decoder_params p = {.cross = pr_mha_params(c, c->p0, true)}; /* all it reads */
    attn_kv_cache m = pr_cache(c, c->mk_i);
    return attn_decoder_memory(PTR(1, &c->dec), PTR(2, &p), PV(c->xkv_i),
                               c->use_kv ? c->kv_len : NULL, PTR(3, &m), c->work, c->work_size);
}
static size_t q_dec_memory(pr_case *c) {
    attn_kv_cache m = pr_cache(c, c->mk_i);
    return attn_decoder_memory_workspace_size(&c->dec, V(c->xkv_i), &m);
}
static attn_status call_dec_step(pr_case *c) {
    attn_decoder_params p = pr_dec_params(c, c->p0);
    attn_kv_cache k = pr_cache(c, c->ck_i), m = pr_cache(c, c->mk_i);
    return attn_decoder_step(PTR(1, &c->dec), PTR(2, &p), pr_sopts(c), PV(c->x_i), PTR(3, &k),
                             PTR(4, &m), PV(c->out_i), c->work, c->work_size);
}
static size_t q_dec_step(pr_case *c) {
    attn_kv_cache k = pr_cache(c, c->ck_i), m = pr_cache(c, c->mk_i);
    return attn_decoder_step_workspace_size(&c->dec, V(c->x_i), &k, &m, pr_sopts(c));
}

/* pointer slots of the decoder block: 0 self opts, 1 cfg, 2 params, 3 saved, 4 grads,
   5 cross opts; the saved views start at c->s0, in attn_decoder_saved's field order */
static attn_decoder_saved pr_saved(pr_case *c) {
    attn_decoder_saved sv;
    memset(&sv, 0, sizeof sv);
    attn_view *f = (attn_view *)&sv;
    for (int k = 0; k < DC_NSAVED; ++k)
        if (c->saved_idx[k] >= 0)
            f[k] = *PV(c->saved_idx[k]);
    return sv;
}
static attn_decoder_params pr_dec_params_at(pr_case *c, int i, bool cross) {
    if (cross)
        return pr_dec_params(c, i);
    attn_decoder_params p = {.ln1_g = *V(i),
                             .ln1_b = *V(i + 1),
                             .ln3_g = *V(i + 10),
                             .ln3_b = *V(i + 11)}; /* no cross: no ln2, no cross */
    p.self_attn = pr_mha_params(c, i + 2, true);
    p.ffn = pr_ffn_params(c, i + 12);
    return p;
}
static const attn_sdpa_opts pr_cross_opts; /* defaults */
static attn_status call_dec_fwd(pr_case *c) {
    attn_decoder_params p = pr_dec_params_at(c, c->p0, true);
    attn_decoder_saved sv = pr_saved(c);
    return attn_decoder_forward(PTR(1, &c->dec), PTR(2, &p), PV(c->x_i), PV(c->xkv_i),
                                pr_opts(c), PTR(5, &pr_cross_opts), PV(c->out_i), PTR(3, &sv),
                                c->work, c->work_size);
}
static size_t q_dec_fwd(pr_case *c) {
    return attn_decoder_workspace_size(&c->dec, V(c->x_i), PV(c->xkv_i), pr_opts(c),
                                       &pr_cross_opts);
}
static attn_status call_dec_bwd(pr_case *c) {
    attn_decoder_params p = pr_dec_params_at(c, c->p0, false);
    attn_decoder_params g = pr_dec_params_at(c, c->g0, false);
    attn_decoder_saved sv = pr_saved(c);
    return attn_decoder_backward(PTR(1, &c->dec), PTR(2, &p), PV(c->x_i), NULL, pr_opts(c),
                                 PTR(5, &pr_cross_opts), PTR(3, &sv), PV(c->dout_i),
                                 PV(c->dx_i), NULL, PTR(4, &g), c->work, c->work_size);
}
static size_t q_dec_bwd(pr_case *c) {
    return attn_decoder_backward_workspace_size(&c->dec, V(c->x_i), NULL, pr_opts(c),
                                                &pr_cross_opts);
}

/* ---- references (naive loops in double on dense copies) ------------------------------ */

/*
 * Attention of query rows q (B, Tq, H*D) over keys 0..L_b+n_b-1 of the cache views
 * kc, vc (B, Hkv, Tmax, D) (dense copies), row i of batch b seeing keys j <= L_b + i
 * (causal) or every j < L_b + n_b (not causal); rows i >= n_b are left 0. o (B, Tq, H*D).
 */
static void pr_ref_cached(int64_t B, int64_t Tq, int64_t H, int64_t Hkv, int64_t D,
                          int64_t Tmax, const double *q, const double *kc, const double *vc,
                          const int64_t *L, const int64_t *n, bool causal, double scale,
                          double *o) {
    memset(o, 0, sizeof(double) * (size_t)(B * Tq * H * D));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < n[b]; ++i) {
                int64_t g = h / (H / Hkv), last = causal ? L[b] + i : L[b] + n[b] - 1;
                const double *qi = q + (b * Tq + i) * H * D + h * D;
                double m = -INFINITY, l = 0, *oi = o + (b * Tq + i) * H * D + h * D;
                for (int64_t j = 0; j <= last; ++j) {
                    const double *kj = kc + ((b * Hkv + g) * Tmax + j) * D;
                    double s = 0;
                    for (int64_t d = 0; d < D; ++d)
                        s += qi[d] * kj[d];
                    m = fmax(m, scale * s);
                }
                for (int64_t j = 0; j <= last; ++j) {
                    const double *kj = kc + ((b * Hkv + g) * Tmax + j) * D;
                    const double *vj = vc + ((b * Hkv + g) * Tmax + j) * D;
                    double s = 0;
                    for (int64_t d = 0; d < D; ++d)
                        s += qi[d] * kj[d];
                    double p = exp(scale * s - m);
                    l += p;
                    for (int64_t d = 0; d < D; ++d)
                        oi[d] += p * vj[d];
                }
                for (int64_t d = 0; d < D && l > 0; ++d)
                    oi[d] /= l;
            }
}

static void ref_sdpa_decode_c(pr_case *c, attn_view *want) {
    int64_t B = DC_B, H = 2, Hkv = 1, D = 2, Tq = DC_TQ, Tmax = DC_TMAX, n[DC_B];
    const int64_t *L = pr_i64(c, 3);
    double *q = pr_dense(V(0)), *k = pr_dense(V(1)), *v = pr_dense(V(2));
    double *qr = malloc(sizeof(double) * (size_t)(B * Tq * H * D)), *o = malloc(sizeof *o * 64);
    for (int64_t b = 0; b < B; ++b) /* (B, H, Tq, D) -> rows (B, Tq, H*D); the last Tq keys */
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Tq; ++i)
                memcpy(qr + (b * Tq + i) * H * D + h * D, q + ((b * H + h) * Tq + i) * D,
                       sizeof(double) * (size_t)D);
    int64_t Lq[DC_B];
    for (int64_t b = 0; b < B; ++b)
        n[b] = Tq, Lq[b] = L[b] - Tq; /* query i sees j <= L - Tq + i */
    pr_ref_cached(B, Tq, H, Hkv, D, Tmax, qr, k, v, Lq, n, true, 1 / sqrt((double)D), o);
    double *lse = malloc(sizeof(double) * (size_t)(B * H * Tq));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Tq; ++i) {
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j <= Lq[b] + i; ++j) {
                    double s = 0;
                    for (int64_t d = 0; d < D; ++d)
                        s += q[((b * H + h) * Tq + i) * D + d] * k[(b * Tmax + j) * D + d];
                    s /= sqrt((double)D);
                    double mm = fmax(m, s);
                    l = l * exp(m - mm) + exp(s - mm), m = mm;
                }
                lse[(b * H + h) * Tq + i] = l > 0 ? m + log(l) : -1e30;
            }
    double *od = malloc(sizeof(double) * (size_t)(B * H * Tq * D));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Tq; ++i)
                memcpy(od + ((b * H + h) * Tq + i) * D, o + (b * Tq + i) * H * D + h * D,
                       sizeof(double) * (size_t)D);
    pr_undense(&want[4], od);
    pr_undense(&want[5], lse);
    free(q), free(k), free(v), free(qr), free(o), free(lse), free(od);
}

/* The self-attention step on dense rows xs (B, Tq, C): appends to kc, vc (dense cache
   copies), advances L, writes y (B, Tq, C) (0 in padding rows). Parameters at p0. */
static void pr_ref_step(pr_case *c, int p0, const double *xs, double *kc, double *vc,
                        int64_t *L, const int64_t *n, double *y) {
    int64_t B = DC_B, Tq = DC_TQ, C = DC_C, H = 2, Hkv = 1, D = 2, Tmax = DC_TMAX;
    double *w[8];
    for (int i = 0; i < 8; ++i)
        w[i] = pr_dense(V(p0 + i));
    double q[DC_B * DC_TQ * 4], k[DC_B * DC_TQ * 2], v[DC_B * DC_TQ * 2], o[DC_B * DC_TQ * 4];
    ref_l_linear(B * Tq, C, H * D, xs, w[0], w[4], q);
    ref_l_linear(B * Tq, C, Hkv * D, xs, w[1], w[5], k);
    ref_l_linear(B * Tq, C, Hkv * D, xs, w[2], w[6], v);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n[b]; ++i)
            for (int64_t d = 0; d < D; ++d) {
                kc[(b * Tmax + L[b] + i) * D + d] = k[(b * Tq + i) * D + d];
                vc[(b * Tmax + L[b] + i) * D + d] = v[(b * Tq + i) * D + d];
            }
    pr_ref_cached(B, Tq, H, Hkv, D, Tmax, q, kc, vc, L, n, true, 1 / sqrt((double)D), o);
    ref_l_linear(B * Tq, H * D, C, o, w[3], w[7], y);
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = n[b]; i < Tq; ++i)
            memset(y + (b * Tq + i) * C, 0, sizeof(double) * (size_t)C);
        L[b] += n[b];
    }
    for (int i = 0; i < 8; ++i)
        free(w[i]);
}
/* want for a raw int64 array: its bytes, as the U8 view holds them */
static void pr_want_raw(const attn_view *w, const int64_t *vals, int64_t n) {
    unsigned char b[64];
    memcpy(b, vals, (size_t)(8 * n));
    for (int64_t i = 0; i < 8 * n; ++i)
        ((double *)w->data)[i] = b[i];
}
static void ref_mha_step_c(pr_case *c, attn_view *want) {
    double *x = pr_dense(V(c->x_i)), *kc = pr_dense(V(c->ck_i)), *vc = pr_dense(V(c->ck_i + 1));
    double y[DC_B * DC_TQ * DC_C];
    int64_t L[DC_B];
    memcpy(L, pr_i64(c, c->ck_i + 2), sizeof L);
    pr_ref_step(c, c->p0, x, kc, vc, L, c->n_new, y);
    pr_undense(&want[c->out_i], y);
    pr_undense(&want[c->ck_i], kc);
    pr_undense(&want[c->ck_i + 1], vc);
    pr_want_raw(&want[c->ck_i + 2], L, DC_B);
    free(x), free(kc), free(vc);
}
static void ref_dec_memory_c(pr_case *c, attn_view *want) {
    int64_t B = DC_B, S = DC_S, H = 2, D = 2, Tm = DC_S + 1;
    double *m = pr_dense(V(c->xkv_i)), *w[8], k[DC_B * DC_S * 4], v[DC_B * DC_S * 4];
    for (int i = 0; i < 8; ++i)
        w[i] = pr_dense(V(c->p0 + i));
    ref_l_linear(B * S, DC_CM, H * D, m, w[1], w[5], k);
    ref_l_linear(B * S, DC_CM, H * D, m, w[2], w[6], v);
    double *kc = pr_dense(V(c->mk_i)), *vc = pr_dense(V(c->mk_i + 1));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s)
                for (int64_t d = 0; d < D; ++d) {
                    kc[((b * H + h) * Tm + s) * D + d] = k[(b * S + s) * H * D + h * D + d];
                    vc[((b * H + h) * Tm + s) * D + d] = v[(b * S + s) * H * D + h * D + d];
                }
    pr_undense(&want[c->mk_i], kc);
    pr_undense(&want[c->mk_i + 1], vc);
    pr_want_raw(&want[c->mk_i + 2], c->kv_len, DC_B);
    for (int i = 0; i < 8; ++i)
        free(w[i]);
    free(m), free(kc), free(vc);
}
static void ref_dec_step_c(pr_case *c, attn_view *want) {
    int64_t B = DC_B, Tq = DC_TQ, C = DC_C, n = B * Tq * C, *nn = c->n_new;
    double *x = pr_dense(V(c->x_i)), *kc = pr_dense(V(c->ck_i)), *vc = pr_dense(V(c->ck_i + 1));
    double *g[6], l[DC_B * DC_TQ * DC_C], a[DC_B * DC_TQ * DC_C], r1[DC_B * DC_TQ * DC_C];
    double y[DC_B * DC_TQ * DC_C];
    static const int gi[6] = {0, 1, 10, 11, 20, 21};
    for (int i = 0; i < 6; ++i)
        g[i] = pr_dense(V(c->p0 + gi[i]));
    int64_t L[DC_B];
    memcpy(L, pr_i64(c, c->ck_i + 2), sizeof L);
    ref_l_layernorm(B * Tq, C, 1e-5, x, g[0], g[1], l); /* pre-norm */
    pr_ref_step(c, c->p0 + 2, l, kc, vc, L, nn, a);
    for (int64_t i = 0; i < n; ++i)
        r1[i] = x[i] + a[i];
    /* cross-attention over the projected memory, every key < mem len */
    double *w[8], q[DC_B * DC_TQ * 4], o[DC_B * DC_TQ * 4];
    for (int i = 0; i < 8; ++i)
        w[i] = pr_dense(V(c->p0 + 12 + i));
    double *mk = pr_dense(V(c->mk_i)), *mv = pr_dense(V(c->mk_i + 1));
    int64_t ML[DC_B];
    memcpy(ML, pr_i64(c, c->mk_i + 2), sizeof ML);
    for (int64_t b = 0; b < B; ++b)
        ML[b] -= nn[b]; /* not causal: rows see keys j < (mem len - n) + n */
    ref_l_layernorm(B * Tq, C, 1e-5, r1, g[2], g[3], l);
    ref_l_linear(B * Tq, C, 4, l, w[0], w[4], q);
    pr_ref_cached(B, Tq, 2, 2, 2, DC_S + 1, q, mk, mv, ML, nn, false, 1 / sqrt(2.0), o);
    ref_l_linear(B * Tq, 4, C, o, w[3], w[7], a);
    for (int64_t i = 0; i < n; ++i)
        r1[i] += a[i]; /* r2 */
    ref_l_layernorm(B * Tq, C, 1e-5, r1, g[4], g[5], l);
    pr_ref_ffn(c, c->p0 + 22, B * Tq, l, a);
    for (int64_t i = 0; i < n; ++i)
        y[i] = r1[i] + a[i];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = nn[b]; i < Tq; ++i)
            memset(y + (b * Tq + i) * C, 0, sizeof(double) * (size_t)C);
    pr_undense(&want[c->out_i], y);
    pr_undense(&want[c->ck_i], kc);
    pr_undense(&want[c->ck_i + 1], vc);
    pr_want_raw(&want[c->ck_i + 2], L, DC_B);
    for (int i = 0; i < 8; ++i)
        free(w[i]);
    for (int i = 0; i < 6; ++i)
        free(g[i]);
    free(x), free(kc), free(vc), free(mk), free(mv);
}

static void ref_dec_fwd_c(pr_case *c, attn_view *want) {
    const attn_view *X = V(c->x_i);
    int64_t B = X->shape[0], T = X->shape[1], C = X->shape[2], n = B * T * C, S = DC_S + 1;
    double *x = pr_dense(X), *m = pr_dense(V(c->xkv_i)), *g[6];
    double *l = malloc(sizeof(double) * (size_t)n), *a = malloc(sizeof(double) * (size_t)n);
    double *r = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    static const int gi[6] = {0, 1, 10, 11, 20, 21};
    for (int i = 0; i < 6; ++i)
        g[i] = pr_dense(V(c->p0 + gi[i]));
    ref_l_layernorm(B * T, C, 1e-5, x, g[0], g[1], l);             /* pre-norm */
    pr_ref_mha(c, &c->dec.self_attn, c->p0 + 2, l, l, B, T, T, a); /* kv_len: self only */
    for (int64_t i = 0; i < n; ++i)
        r[i] = x[i] + a[i];
    ref_l_layernorm(B * T, C, 1e-5, r, g[2], g[3], l);
    c->use_kv = false;
    pr_ref_mha(c, &c->dec.cross, c->p0 + 12, l, m, B, T, S, a);
    c->use_kv = true;
    for (int64_t i = 0; i < n; ++i)
        r[i] += a[i];
    ref_l_layernorm(B * T, C, 1e-5, r, g[4], g[5], l);
    pr_ref_ffn(c, c->p0 + 22, B * T, l, a);
    for (int64_t i = 0; i < n; ++i)
        y[i] = r[i] + a[i];
    pr_undense(&want[c->out_i], y);
    for (int i = 0; i < 6; ++i)
        free(g[i]);
    free(x), free(m), free(l), free(a), free(r), free(y);
}

/* The saved views of cfg for (B, T, S) as views of the case, shaped as the binder says. */
static void pr_saved_views(pr_case *c, int kind, int64_t B, int64_t T, int64_t S) {
    attn_decoder_saved sv;
    size_t need = attn_decoder_saved_size(&c->dec, B, T, S);
    ck_assert_uint_gt(need, 0);
    void *slab = aligned_alloc(64, (need + 63) / 64 * 64);
    PR_OK(attn_decoder_saved_bind(&sv, &c->dec, B, T, S, slab, need));
    const attn_view *f = (const attn_view *)&sv;
    for (int k = 0; k < DC_NSAVED; ++k) {
        c->saved_idx[k] = -1;
        if (f[k].ndim > 0 && f[k].data) {
            c->saved_idx[k] = pr_add(c, kind, f[k].ndim, f[k].shape, c->dt);
            if (kind == K_OUT)
                c->optional |= 0; /* the struct is optional as a whole (slot 3) */
        }
    }
    free(slab);
}

/* ---- the cases -------------------------------------------------------------------- */

static const int64_t dc_len[DC_B] = {4, 1}, dc_nnew[DC_B] = {2, 1};

static bool pr_build_decode(int which, attn_dtype dt, pr_case *c) {
    int64_t B = DC_B, Tq = DC_TQ, C = DC_C, Tmax = DC_TMAX;
    c->has_step = true, c->ref_all = true;
    c->ffn = (attn_ffn_config){
        .dtype = dt, .d_model = C, .d_ff = DC_F, .bias = true, .act = ATTN_ACT_GELU_ERF};
    c->mha = (attn_mha_config){
        .dtype = dt, .d_model = C, .heads = 2, .kv_heads = 1, .d_head = 2, .bias = true};
    c->dec = (attn_decoder_config){
        .self_attn = c->mha,
        .cross =
            {.dtype = dt, .d_model = C, .heads = 2, .d_kv = DC_CM, .d_head = 2, .bias = true},
        .ffn = c->ffn,
        .norm = ATTN_PRE_NORM,
        .ln_affine = true};
    switch (which) {
    case 44: /* q (B, H, Tq, D) against a cache k, v (B, 1, Tmax, D), len, out, lse */
        c->name = "attn_sdpa_decode", c->call = call_sdpa_decode, c->query = q_sdpa_decode;
        c->ref = ref_sdpa_decode_c, c->nptr = 1, c->ptr_optional = 1;
        pr_in(c, 4, SH(B, 2, Tq, 2));
        pr_in(c, 4, SH(B, 1, Tmax, 2));
        pr_in(c, 4, SH(B, 1, Tmax, 2));
        pr_ptrs(c, 0, 3);
        pr_raw_i64(c, K_IN, B, dc_len); /* 3 */
        pr_out(c, 4, SH(B, 2, Tq, 2));
        pr_out(c, 3, SH(B, 2, Tq));
        pr_ptrs(c, 4, 6);
        c->optional |= (uint64_t)1 << 5;
        c->len_i = 3;
        return true;
    case 45: /* the cached MHA step, GQA (2 heads, 1 KV head), two batches, n_new */
        c->name = "attn_mha_step", c->call = call_mha_step, c->query = q_mha_step;
        c->ref = ref_mha_step_c, c->nptr = 4, c->ptr_optional = 1;
        c->x_i = pr_in(c, 3, SH(B, Tq, C));
        pr_ptrs(c, c->x_i, c->x_i + 1);
        c->p0 = c->nv;
        pr_gqa_param_views(c, K_IN, C, C, 4, 2);
        c->ck_i = pr_acc(c, 4, SH(B, 1, Tmax, 2));
        pr_acc(c, 4, SH(B, 1, Tmax, 2));
        pr_raw_i64(c, K_ACC, B, dc_len);
        c->out_i = pr_out(c, 3, SH(B, Tq, C));
        pr_ptrs(c, c->out_i, c->out_i + 1);
        c->len_i = c->ck_i + 2, c->use_nnew = true;
        memcpy(c->n_new, dc_nnew, sizeof dc_nnew);
        return true;
    case 46: /* the encoder memory projected into a cache (Tmax = S + 1), memory lengths */
        c->name = "attn_decoder_memory", c->call = call_dec_memory, c->query = q_dec_memory;
        c->ref = ref_dec_memory_c, c->nptr = 4, c->ptr_optional = 1; /* slot 0 unused */
        c->xkv_i = pr_in(c, 3, SH(B, DC_S, DC_CM));
        pr_ptrs(c, c->xkv_i, c->xkv_i + 1);
        c->p0 = c->nv; /* the cross-attention's parameters only */
        pr_gqa_param_views(c, K_IN, DC_CM, DC_C, 4, 4);
        c->mk_i = pr_acc(c, 4, SH(B, 2, DC_S + 1, 2));
        pr_acc(c, 4, SH(B, 2, DC_S + 1, 2));
        pr_raw_i64(c, K_OUT, B, (int64_t[]){0, 2});
        c->use_kv = true, c->kv_len[0] = DC_S, c->kv_len[1] = 1;
        c->len_i = -1, c->mlen = true;
        return true;
    case 47: /* the decoder block's step: self cache appended, memory cache read */
        c->name = "attn_decoder_step", c->call = call_dec_step, c->query = q_dec_step;
        c->ref = ref_dec_step_c, c->nptr = 5, c->ptr_optional = 1;
        c->x_i = pr_in(c, 3, SH(B, Tq, C));
        pr_ptrs(c, c->x_i, c->x_i + 1);
        c->p0 = c->nv;
        pr_dec_param_views(c, K_IN);
        c->ck_i = pr_acc(c, 4, SH(B, 1, Tmax, 2));
        pr_acc(c, 4, SH(B, 1, Tmax, 2));
        pr_raw_i64(c, K_ACC, B, dc_len);
        c->mk_i = pr_in(c, 4, SH(B, 2, DC_S + 1, 2));
        pr_in(c, 4, SH(B, 2, DC_S + 1, 2));
        pr_raw_i64(c, K_IN, B, (int64_t[]){DC_S, 2});
        c->out_i = pr_out(c, 3, SH(B, Tq, C));
        pr_ptrs(c, c->out_i, c->out_i + 1);
        c->len_i = c->ck_i + 2, c->use_nnew = true;
        memcpy(c->n_new, dc_nnew, sizeof dc_nnew);
        return true;
    case 48: /* the decoder block forward (pre-norm, cross), every saved view */
        c->name = "attn_decoder_forward", c->call = call_dec_fwd, c->query = q_dec_fwd;
        c->ref = ref_dec_fwd_c, c->ref_all = false, c->has_step = false, c->has_opts = true;
        c->nptr = 6, c->ptr_optional = 1 | 8 | 16 | 32; /* slot 4 unused */
        c->query_upper = true; /* it sizes for saved NULL; saved views need less room */
        c->x_i = pr_in(c, 3, SH(B, 3, C));
        c->xkv_i = pr_in(c, 3, SH(B, DC_S + 1, DC_CM));
        pr_ptrs(c, 0, 2);
        c->p0 = c->nv;
        pr_dec_param_views(c, K_IN);
        c->out_i = pr_out(c, 3, SH(B, 3, C));
        pr_ptrs(c, c->out_i, c->out_i + 1);
        pr_saved_views(c, K_OUT, B, 3, DC_S + 1);
        c->use_kv = true, c->kv_len[0] = 3, c->kv_len[1] = 2;
        return true;
    case 49: { /* the decoder-only block backward from its saved views, every gradient */
        c->name = "attn_decoder_backward (decoder-only)", c->call = call_dec_bwd;
        c->query = q_dec_bwd, c->has_step = false, c->ref_all = false, c->has_opts = true;
        c->nptr = 6, c->ptr_optional = 1 | 16 | 32;
        c->dec.cross = (attn_mha_config){0};
        c->x_i = pr_in(c, 3, SH(B, 3, C));
        pr_ptrs(c, c->x_i, c->x_i + 1);
        c->p0 = c->nv;
        for (int k = 0; k < 2; ++k) { /* ln1, self, ln3, ffn */
            pr_add(c, k ? K_ACC : K_IN, 1, SH(DC_C), dt),
                pr_add(c, k ? K_ACC : K_IN, 1, SH(DC_C), dt);
            pr_gqa_param_views(c, k ? K_ACC : K_IN, DC_C, DC_C, 4, 2);
            pr_add(c, k ? K_ACC : K_IN, 1, SH(DC_C), dt),
                pr_add(c, k ? K_ACC : K_IN, 1, SH(DC_C), dt);
            pr_ffn_param_views(c, k ? K_ACC : K_IN, DC_C, DC_F);
            if (!k) {
                pr_saved_views(c, K_IN, B, 3, 1);
                c->dout_i = pr_in(c, 3, SH(B, 3, C));
                c->dx_i = pr_acc(c, 3, SH(B, 3, C));
                pr_ptrs(c, c->dout_i, c->dx_i + 1);
                c->optional |= (uint64_t)1 << c->dx_i;
                c->g0 = c->nv;
            }
        }
        c->use_kv = true, c->kv_len[0] = 3, c->kv_len[1] = 2;
        /* the saved views from one forward (values only; the test is the backward) */
        attn_decoder_params p = pr_dec_params_at(c, c->p0, false);
        attn_decoder_saved sv = pr_saved(c);
        attn_view out = *V(c->dout_i);
        out.data = malloc(pr_bytes(&out));
        PR_OK(attn_decoder_forward(&c->dec, &p, V(c->x_i), NULL, pr_opts(c), NULL, &out, &sv,
                                   NULL, 0));
        free(out.data);
        return true;
    }
    }
    return false;
}

/* Mutations of the step options and the lengths: the statuses decode.h documents. */
static void pr_step_mutations(int which, attn_dtype dt, pr_case *c, const pr_vals *base) {
    static const char *const desc[] = {
        "step scale NaN", "step scale inf",     "step threads -1", "step split -1",
        "n_new Tq + 1",   "n_new -1",           "rope style 9",    "len Tmax + 1",
        "len -1",         "len + n_new > Tmax", "mem_len S + 1",   "mem_len -1",
        "step window_left -1", "step softcap NaN"};
    for (int m = 0; m < 14; ++m) {
        pr_build(which, dt, c);
        attn_status want = ATTN_EINVAL;
        int64_t *len = c->len_i >= 0 ? (int64_t *)c->v[c->len_i].data : NULL;
        bool sdpa = which == 44, mem = which == 46, step = which == 45;
        if ((m == 4 || m == 5) && !c->use_nnew)
            continue;
        if (m >= 7 && m <= 9 && !len)
            continue;
        if (m >= 10 && m <= 11 && !mem)
            continue;
        if (m >= 12 && mem)
            continue;
        if (m == 6 && !step) /* the decoder takes rope from its config; decode has none */
            continue;
        switch (m) {
        case 0:
            c->step.scale = NAN;
            break;
        case 1:
            c->step.scale = INFINITY;
            break;
        case 2:
            c->step.threads = -1;
            break;
        case 3:
            c->step.split = -1;
            break;
        case 4: /* every per-batch length out of range: ATTN_ERANGE */
            c->n_new[0] = DC_TQ + 1, want = ATTN_ERANGE;
            break;
        case 5:
            c->n_new[1] = -1, want = ATTN_ERANGE;
            break;
        case 6:
            c->step.rope = (attn_rope_config){.on = true, .style = (attn_rope_style)9};
            break;
        case 7:
            len[0] = DC_TMAX + 1, want = ATTN_ERANGE;
            break;
        case 8:
            len[1] = -1, want = ATTN_ERANGE;
            break;
        case 9:
            if (sdpa)
                continue;
            len[0] = DC_TMAX - 1, want = ATTN_ERANGE; /* + n_new[0] = 2 overflows */
            break;
        case 10:
            c->kv_len[0] = DC_S + 1, want = ATTN_ERANGE;
            break;
        case 11:
            c->kv_len[1] = -1, want = ATTN_ERANGE;
            break;
        case 12:
            c->step.window = true, c->step.window_left = -1;
            break;
        default:
            c->step.softcap = NAN;
            break;
        }
        if (mem && m < 10)
            continue; /* no step options */
        pr_try(c, base, E_REFUSE, want, desc[m]);
    }
    /* options a decoder step must refuse */
    if (which == 47) {
        pr_build(which, dt, c);
        c->step.rope.on = true;
        pr_try(c, base, E_REFUSE, ATTN_EINVAL, "rope in the options");
    }
    /* a missing memory cache with cross-attention; a memory without it */
    if (which == 47) {
        pr_build(which, dt, c);
        c->dec.cross = (attn_mha_config){0};
        pr_try(c, base, E_REFUSE, ATTN_EINVAL, "memory cache without cross-attention");
    }
}

/* ---- the binders: kv cache, decoder parameters, decoder saved views ------------------ */

/* Every view of a bound struct of n views lies in [slab, slab + size) and none overlaps
   another (the binder's outputs are the struct and the slab's len entries). */
static void pr_bound_views(const char *what, const attn_view *f, int n, const void *slab,
                           size_t size) {
    const unsigned char *lo = slab, *hi = lo + size;
    for (int i = 0; i < n; ++i) {
        if (!f[i].data)
            continue;
        size_t b = pr_bytes(&f[i]);
        const unsigned char *p = f[i].data;
        ck_assert_msg(attn_view_check(&f[i]) == ATTN_OK && p >= lo && p + b <= hi,
                      "%s: view %d outside the slab", what, i);
        for (int j = 0; j < i; ++j) {
            const unsigned char *q = f[j].data;
            ck_assert_msg(!q || p + b <= q || q + pr_bytes(&f[j]) <= p,
                          "%s: views %d and %d overlap", what, i, j);
        }
    }
}

enum { BD_CACHE, BD_PARAMS, BD_SAVED };
/* One binder call on the arena; m selects the mutation (0 none). */
static attn_status pr_bind(int which, int m, attn_dtype dt, void *st, size_t *need) {
    pr_case c0;
    pr_build(48, dt, &c0); /* for its decoder config */
    attn_decoder_config dc = c0.dec;
    attn_mha_config mc = dc.self_attn;
    int64_t B = 2, T = 6, S = 3;
    *need = which == BD_CACHE    ? attn_kv_cache_size(&mc, B, T)
            : which == BD_PARAMS ? attn_decoder_params_size(&dc)
                                 : attn_decoder_saved_size(&dc, B, T, S);
    memset(pr_mem, PR_SENTINEL, sizeof pr_mem);
    unsigned char *slab = pr_mem + 64;
    size_t size = *need;
    void *out = st;
    switch (m) {
    case 0:
        break;
    case 1:
        out = NULL;
        break; /* the struct NULL: EINVAL */
    case 2:
        slab = NULL;
        break; /* EINVAL */
    case 3:
        slab += 8;
        break; /* misaligned: EINVAL */
    case 4:
        size -= 1;
        break; /* EWORKSPACE */
    case 5:
        mc.heads = dc.self_attn.heads = 0;
        break; /* invalid config: EINVAL */
    case 6:
        dc.eps = -1, mc.d_model = -1;
        break; /* invalid config: EINVAL */
    case 7:
        B = 0;
        break; /* EINVAL (not for params) */
    case 8:
        T = 0;
        break; /* EINVAL (not for params) */
    default:
        B = INT64_MAX / 4, T = INT64_MAX / 4;
        break; /* ERANGE (cache), EINVAL */
    }
    memcpy(pr_snap, pr_mem, PR_ARENA);
    if (which == BD_CACHE)
        return attn_kv_cache_bind(out, m == 5 || m == 6 ? &mc : &c0.mha, B, T, slab, size);
    if (which == BD_PARAMS)
        return attn_decoder_params_bind(out, &dc, slab, size);
    return attn_decoder_saved_bind(out, &dc, B, T, S, slab, size);
}

START_TEST(pr_decode_binds) {
    static const char *const names[] = {"attn_kv_cache_bind", "attn_decoder_params_bind",
                                        "attn_decoder_saved_bind"};
    static const attn_status want[][10] = {
        {ATTN_OK, ATTN_EINVAL, ATTN_EINVAL, ATTN_EINVAL, ATTN_EWORKSPACE, ATTN_EINVAL,
         ATTN_EINVAL, ATTN_EINVAL, ATTN_EINVAL, ATTN_ERANGE},
        {ATTN_OK, ATTN_EINVAL, ATTN_EINVAL, ATTN_EINVAL, ATTN_EWORKSPACE, ATTN_EINVAL,
         ATTN_EINVAL, ATTN_OK, ATTN_OK, ATTN_OK},
        {ATTN_OK, ATTN_EINVAL, ATTN_EINVAL, ATTN_EINVAL, ATTN_EWORKSPACE, ATTN_EINVAL,
         ATTN_EINVAL, ATTN_EINVAL, ATTN_EINVAL, ATTN_ERANGE}};
    union {
        attn_kv_cache k;
        attn_decoder_params p;
        attn_decoder_saved s;
    } st, before;
    for (int d = pr_light; d < 2; ++d)
        for (int w = 0; w < 3; ++w)
            for (int m = 0; m < 10; ++m) {
                attn_dtype dt = d ? ATTN_F64 : ATTN_F32;
                pr_case c0;
                pr_build(45, dt,
                         &c0); /* its cache's config (the bind below resets the arena) */
                size_t need;
                memset(&st, 0xAB, sizeof st);
                before = st;
                attn_status s = pr_bind(w, m, dt, &st, &need);
                ck_assert_msg(s == want[w][m] || (m == 9 && w && s == ATTN_EINVAL),
                              "%s mutation %d: %s, want %s", names[w], m, attn_status_name(s),
                              attn_status_name(want[w][m]));
                if (s != ATTN_OK) {
                    ck_assert_msg(
                        !memcmp(pr_snap, pr_mem, PR_ARENA) && !memcmp(&st, &before, sizeof st),
                        "%s mutation %d: %s after writing", names[w], m, attn_status_name(s));
                    continue;
                }
                /* accepted: every view inside the slab, disjoint; only the slab written */
                unsigned char *slab = pr_mem + 64;
                /* the first byte written outside the slab: one assert, not one a byte */
                size_t b = 0;
                while (b < PR_ARENA && (pr_mem[b] == pr_snap[b] ||
                                        (pr_mem + b >= slab && pr_mem + b < slab + need)))
                    ++b;
                ck_assert_msg(b == PR_ARENA, "%s wrote byte %zu outside its slab", names[w], b);
                if (w == BD_CACHE) {
                    pr_bound_views(names[w], &st.k.k, 2, slab, need);
                    ck_assert(st.k.len && (unsigned char *)st.k.len >= slab &&
                              (unsigned char *)(st.k.len + 2) <= slab + need);
                    ck_assert(st.k.len[0] == 0 && st.k.len[1] == 0);
                    ck_assert_int_eq(attn_kv_cache_check(&st.k, &c0.mha), ATTN_OK);
                } else if (w == BD_PARAMS && m == 0) {
                    pr_bound_views(names[w], (const attn_view *)&st.p,
                                   (int)(sizeof st.p / sizeof(attn_view)), slab, need);
                } else if (w == BD_SAVED) {
                    pr_bound_views(names[w], (const attn_view *)&st.s, DC_NSAVED, slab, need);
                }
            }
}
END_TEST
