/* SPDX-License-Identifier: MIT */
/* Loading PyTorch weights: safetensors files mapped into views, bound to layer params. */
#ifndef ATTN_IO_H
#define ATTN_IO_H

#include "attn/decode.h"
#include "attn/export.h"
#include "attn/layers.h"
#include "attn/status.h"
#include "attn/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Dimension legend: C model width, Ckv width of the key/value input, H heads,
 * Hkv key/value heads, D head width, F feed-forward width.
 *
 * A safetensors file (what safetensors.torch.save_file(model.state_dict(),
 * path) writes) is an 8-byte little-endian header length N, N bytes of JSON
 * mapping each tensor name to its dtype, shape and data_offsets [begin, end)
 * within the data area, then the data area: raw little-endian values,
 * row-major. attn maps the file read-only and hands out views into the
 * mapping: no tensor is copied, and a PyTorch (out, in) weight becomes
 * attn's (in, out) weight through swapped strides.
 *
 * LIFETIME: every view from attn_safetensors_view and every view a binder
 * puts in a params struct points into the mapping. They are valid until
 * attn_safetensors_close(f) and must not be used after it. The mapping is
 * read-only: writing through such a view (e.g. passing it as an output or a
 * gradient) faults. Copy a tensor out (attn_view_copy) to change it.
 * The file itself must not be truncated or rewritten in place while it is
 * open (a mapped page past a new end faults); replacing it by a rename is fine.
 *
 * An open file is immutable: any number of threads may call
 * attn_safetensors_view and the binders on it at once.
 */

/** An open, validated safetensors file (opaque). */
typedef struct attn_safetensors attn_safetensors;

/**
 * Open the safetensors file at path: map it read-only and validate its whole
 * header once: the header length within the file (and at most 100 MB), the
 * header a JSON object (duplicate names refused), each entry (except
 * "__metadata__", an object of strings) an object with a known dtype (BOOL,
 * U8, I8, I16, U16, I32, U32, I64, U64, F8_E5M2, F8_E4M3, F16, BF16, F32, F64),
 * a shape of non-negative integers whose byte size does not overflow, and
 * data_offsets [begin, end] with begin <= end <= the data area's size and
 * end - begin equal to the shape's byte size; no two entries overlap.
 * On success *out is the open file (close it with attn_safetensors_close).
 * Returns ATTN_OK, ATTN_EINVAL (path or out NULL), ATTN_EIO (the file cannot
 * be opened, is not a regular file (a directory, FIFO or device), or cannot be
 * read or mapped), ATTN_EFORMAT
 * (any fault above, a file shorter than 8 bytes included), ATTN_ENOMEM. On
 * any error *out is NULL (when out is not NULL) and nothing stays open or
 * allocated. Since 0.2.
 */
ATTN_API attn_status attn_safetensors_open(const char *path, attn_safetensors **out);

/** Unmap f and free it; every view into it becomes invalid. NULL is a no-op. Since 0.2. */
ATTN_API void attn_safetensors_close(attn_safetensors *f);

/**
 * The tensor called name, as a row-major view into the mapping (no copy):
 * dtype ATTN_F32 or ATTN_F64, shape as in the file (a 0-dim scalar is a
 * view of shape (1)). Valid until attn_safetensors_close(f), and read-only:
 * writing through it faults.
 * Returns ATTN_OK, ATTN_EINVAL (an argument NULL), ATTN_ENOTFOUND (no such
 * tensor), ATTN_EDTYPE (a dtype other than F32/F64: F16, BF16, integers...),
 * ATTN_ESHAPE (more than ATTN_MAX_DIMS dims), ATTN_EFORMAT (the tensor's
 * bytes are not aligned to its element size: files written by safetensors
 * 0.3 or later always are). On error *out is untouched. Since 0.2.
 */
ATTN_API attn_status attn_safetensors_view(const attn_safetensors *f, const char *name,
                                           attn_view *out);

/**
 * Bind an nn.MultiheadAttention's parameters, saved under prefix (e.g.
 * "self_attn."; NULL or "" for none), into *p for cfg, with no copies:
 *   d_kv == C:  in_proj_weight (H*D + 2 Hkv*D, C): wq, wk, wv are its three
 *               row blocks transposed, (C, H*D) etc. with strides (1, C);
 *               they stay adjacent, so Q, K and V remain one GEMM;
 *   d_kv != C:  q_proj_weight (H*D, C), k_proj_weight, v_proj_weight
 *               (Hkv*D, Ckv), each transposed (PyTorch's kdim/vdim layout);
 *   out_proj.weight (C, H*D) transposed: wo (H*D, C);
 *   with cfg->bias: in_proj_bias (H*D + 2 Hkv*D): bq, bk, bv; out_proj.bias (C).
 * PyTorch's own layer has Hkv = H and D = C / H; other configs read the
 * same names with these shapes.
 * Returns ATTN_OK, ATTN_EINVAL (cfg, f or p NULL, cfg invalid), then for
 * the tensors in the order above: ATTN_ENOTFOUND (absent), ATTN_EDTYPE (not
 * cfg's dtype), ATTN_ESHAPE (another shape), ATTN_EFORMAT (misaligned).
 * On error *p is untouched. Since 0.2.
 */
ATTN_API attn_status attn_mha_params_from_torch(const attn_mha_config *cfg,
                                                const attn_safetensors *f, const char *prefix,
                                                attn_mha_params *p);

/**
 * Bind an nn.TransformerEncoderLayer's parameters, saved under prefix (e.g.
 * "layers.3." for layer 3 of an nn.TransformerEncoder), into *p for cfg:
 * self_attn.* as attn_mha_params_from_torch (cfg->mha), linear1.weight (F, C)
 * and linear2.weight (C, F) transposed into ffn.w1 (C, F) and ffn.w2 (F, C),
 * linear1.bias (F), linear2.bias (C) with cfg->ffn.bias, and with
 * cfg->ln_affine norm1.weight/bias into ln1_g/ln1_b, norm2.* into ln2_*.
 * Pre-norm (cfg->norm ATTN_PRE_NORM) is PyTorch's norm_first=True, post-norm
 * its default; PyTorch's activation "relu" is ATTN_ACT_RELU and "gelu" is
 * ATTN_ACT_GELU_ERF; layer_norm_eps is cfg->eps. Statuses as
 * attn_mha_params_from_torch (cfg invalid: attn_encoder_config_resolve's
 * ATTN_EINVAL). On error *p is untouched. Since 0.2.
 */
ATTN_API attn_status attn_encoder_params_from_torch(const attn_encoder_config *cfg,
                                                    const attn_safetensors *f,
                                                    const char *prefix, attn_encoder_params *p);

/**
 * Bind an nn.TransformerDecoderLayer's parameters, saved under prefix, into
 * *p for cfg: self_attn.* (cfg->self_attn), multihead_attn.* (cfg->cross),
 * linear1.*, linear2.* and, with cfg->ln_affine, norm1.* (ln1), norm2.* (ln2),
 * norm3.* (ln3), each as attn_encoder_params_from_torch maps them. Without
 * cross-attention (cfg->cross.heads 0) the block is a causal
 * nn.TransformerEncoderLayer, and its names are read: self_attn.*, linear1.*,
 * linear2.*, norm1.* (ln1) and norm2.* (the FFN's norm, ln3). Statuses as
 * attn_encoder_params_from_torch (cfg invalid: attn_decoder_config_resolve's
 * ATTN_EINVAL). On error *p is untouched. Since 0.2.
 */
ATTN_API attn_status attn_decoder_params_from_torch(const attn_decoder_config *cfg,
                                                    const attn_safetensors *f,
                                                    const char *prefix, attn_decoder_params *p);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_IO_H */
