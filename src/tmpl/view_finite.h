/* SPDX-License-Identifier: MIT */
/* Per-dtype finite test of a 2-D view, shared by the sdpa forward and backward templates
 * (included by tmpl/sdpa.h and tmpl/sdpa_backward.h, which define SDPA_FINITE: the
 * vectorized test of a unit-stride run). */

/* True when every element of the 2-D view v is finite. */
static bool SFX(view_finite)(const attn_view *v) {
    int64_t r = v->shape[0], n = v->shape[1], s0 = v->stride[0], s1 = v->stride[1];
    const T *x = (const T *)v->data;
    if (r == 0 || n == 0) /* empty (data may be NULL: no pointer arithmetic on it) */
        return true;
    if (s1 == 1 || n == 1) { /* rows of unit stride: the vectorized test per row */
        if (s0 == n && r > 0)
            return SDPA_FINITE(x, r * n);
        for (int64_t i = 0; i < r; ++i)
            if (!SDPA_FINITE(x + i * s0, n))
                return false;
        return true;
    }
    T acc = 0;
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < n; ++j)
            acc += x[i * s0 + j * s1] * 0; /* NaN and inf make it NaN */
    return acc == 0;
}
