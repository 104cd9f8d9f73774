/* SPDX-License-Identifier: MIT */
/* Per-dtype macros for template bodies (GSL's templates_on.h): define ATTN_TMPL_F32 or
 * ATTN_TMPL_F64, include this, include the template, include dtype_off.h. */
#if defined(ATTN_TMPL_F32)
#define T          float
#define T_IS_F32   1
#define SFX(name)  name##_f32
#define T_EXP      expf
#define T_VEXP_SUM attn__vexp_sum_f32
#define T_VMAX     attn__vmax_f32
#define T_VGELU    attn__vgelu_f32
#define T_VGELU_GRAD attn__vgelu_grad_f32
#elif defined(ATTN_TMPL_F64)
#define T          double
#define T_IS_F32   0
#define SFX(name)  name##_f64
#define T_EXP      exp
#define T_VEXP_SUM attn__vexp_sum_f64
#define T_VMAX     attn__vmax_f64
#define T_VGELU    attn__vgelu_f64
#define T_VGELU_GRAD attn__vgelu_grad_f64
#else
#error "define ATTN_TMPL_F32 or ATTN_TMPL_F64 before including tmpl/dtype_on.h"
#endif
