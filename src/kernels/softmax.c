/* SPDX-License-Identifier: MIT */
/* attn_softmax and its backward: max-subtracted rows over the last dim. */
#include <math.h>

#include "kernels/rows.h"
#include "kernels/simd.h"

/* Instantiate the template for float, then double (include order matters). */
/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/softmax.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/softmax.h"
#include "tmpl/dtype_off.h"
/* clang-format on */

attn_status attn_softmax(const attn_view *x, attn_view *y) {
    ATTN_TRY(k_check_map(x, true, NULL, y, true));
    if (attn__numel(x) == 0)
        return ATTN_OK;
    k_iter it;
    k_iter_init(&it, 2, (const attn_view *[]){x, y}, false);
    if (x->dtype == ATTN_F32)
        softmax_f32(&it, x, y);
    else
        softmax_f64(&it, x, y);
    return ATTN_OK;
}

attn_status attn_softmax_backward(const attn_view *y, const attn_view *dy, attn_view *dx) {
    ATTN_TRY(k_check_map(y, false, dy, dx, false));
    if (attn__numel(y) == 0)
        return ATTN_OK;
    k_iter it;
    k_iter_init(&it, 3, (const attn_view *[]){y, dy, dx}, false);
    if (y->dtype == ATTN_F32)
        softmax_bwd_f32(&it, y, dy, dx);
    else
        softmax_bwd_f64(&it, y, dy, dx);
    return ATTN_OK;
}
