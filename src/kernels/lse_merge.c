/* SPDX-License-Identifier: MIT */
/* The softmax merge of partial attention results (kernels/lse_merge.h), for each dtype. */
#include <math.h>

#include "kernels/lse_merge.h"

/* clang-format off */
#define ATTN_TMPL_F32
#include "tmpl/dtype_on.h"
#include "tmpl/lse_merge.h"
#include "tmpl/dtype_off.h"
#define ATTN_TMPL_F64
#include "tmpl/dtype_on.h"
#include "tmpl/lse_merge.h"
#include "tmpl/dtype_off.h"
/* clang-format on */
