/* SPDX-License-Identifier: MIT */
/* Undo tmpl/dtype_on.h so the next instantiation can redefine the macros. */
#undef T
#undef T_IS_F32
#undef T_VEXP_SUM
#undef T_VMAX
#undef T_VGELU
#undef T_VGELU_GRAD
#undef SFX
#undef T_EXP
#undef ATTN_TMPL_F32
#undef ATTN_TMPL_F64
