/* SPDX-License-Identifier: MIT */
/* Umbrella header: everything in attn's public API. */
#ifndef ATTN_ATTN_H
#define ATTN_ATTN_H

#include "attn/export.h"
#include "attn/version.h"
#include "attn/status.h"
#include "attn/view.h"
#include "attn/gemm.h"
#include "attn/kernels.h"
#include "attn/layers.h"
#include "attn/decode.h"
#include "attn/posenc.h"
#include "attn/init.h"
#include "attn/diag.h"
#include "attn/io.h"

#endif /* ATTN_ATTN_H */
