/* SPDX-License-Identifier: MIT */
/* Naive double-precision reference implementations (tests only; llm.c's *_naive). */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include <attn/attn.h>

/*
 * want := alpha op(A) op(B) + beta * C0, computed with three plain loops in
 * double. C0 is read from c (its current contents), the result is written to
 * `want`, a row-major F64 view with c's shape. Batch dims broadcast NumPy-style.
 */
void ref_gemm(attn_trans ta, attn_trans tb, double alpha, const attn_view *a,
              const attn_view *b, double beta, const attn_view *c, const attn_view *want);

#endif
