#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch parity fixtures for attn's decoder block (run with Debian's /usr/bin/python3).

nn.TransformerDecoderLayer (torch 1.13) in float64, train mode with dropout 0,
batch_first, pre- and post-norm: the inputs (tgt x, memory m), the parameters in
torch's own (out, in) layout (the C tests view them transposed, without copies),
the output of the whole-sequence forward with a causal tgt_mask, a random upstream
gradient dout and the autograd gradients of sum(out * dout) with respect to x, the
memory and every parameter. The decoder-only case (no cross-attention) is
nn.TransformerEncoderLayer with a causal mask, the block a GPT-style model stacks.
Because the self-attention is causal, row t of out depends only on x[:, :t+1]:
the C tests also check their token-by-token cached steps against these rows.
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
import fixture_io  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data")
torch.manual_seed(20261201)
torch.set_default_dtype(torch.float64)


def randomize(m):
    with torch.no_grad():
        for n_, p in m.named_parameters():
            if "norm" in n_:
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if n_.endswith("weight")
                        else 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 0.3)


def mha_tensors(prefix, a, t):
    """in_proj (3C, C) chunks and out_proj of an nn.MultiheadAttention, with gradients."""
    w = a.in_proj_weight.detach().chunk(3)
    g = a.in_proj_weight.grad.chunk(3)
    b = a.in_proj_bias.detach().chunk(3)
    gb = a.in_proj_bias.grad.chunk(3)
    for i, n in enumerate("qkv"):
        t[f"{prefix}w{n}"] = w[i]
        t[f"d{prefix}w{n}"] = g[i]
        t[f"{prefix}b{n}"] = b[i]
        t[f"d{prefix}b{n}"] = gb[i]
    t[f"{prefix}wo"] = a.out_proj.weight.detach()
    t[f"d{prefix}wo"] = a.out_proj.weight.grad
    t[f"{prefix}bo"] = a.out_proj.bias.detach()
    t[f"d{prefix}bo"] = a.out_proj.bias.grad


def common(m, t, norms):
    t.update({"w1": m.linear1.weight.detach(), "b1": m.linear1.bias.detach(),
              "w2": m.linear2.weight.detach(), "b2": m.linear2.bias.detach(),
              "dw1": m.linear1.weight.grad, "db1": m.linear1.bias.grad,
              "dw2": m.linear2.weight.grad, "db2": m.linear2.bias.grad})
    for i, nm in norms:
        norm = getattr(m, nm)
        t[f"ln{i}_g"] = norm.weight.detach()
        t[f"ln{i}_b"] = norm.bias.detach()
        t[f"dln{i}_g"] = norm.weight.grad
        t[f"dln{i}_b"] = norm.bias.grad


def dec_case(name, B, T, S, C, H, F, act, norm_first, mem_len, tgt_len):
    m = nn.TransformerDecoderLayer(C, H, dim_feedforward=F, dropout=0.0, activation=act,
                                   batch_first=True, norm_first=norm_first,
                                   layer_norm_eps=1e-5)
    randomize(m)
    m.train()
    x = torch.randn(B, T, C, requires_grad=True)
    mem = torch.randn(B, S, C, requires_grad=True)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    mkpm = None if mem_len is None else \
        torch.arange(S)[None, :] >= torch.tensor(mem_len)[:, None]
    tkpm = None if tgt_len is None else \
        torch.arange(T)[None, :] >= torch.tensor(tgt_len)[:, None]
    out = m(x, mem, tgt_mask=causal, tgt_key_padding_mask=tkpm,
            memory_key_padding_mask=mkpm)
    dout = torch.randn_like(out)
    (out * dout).sum().backward()
    t = {"x": x.detach(), "memory": mem.detach(), "out": out.detach(), "dout": dout,
         "dx": x.grad, "dmemory": mem.grad}
    mha_tensors("s", m.self_attn, t)
    mha_tensors("c", m.multihead_attn, t)
    common(m, t, [(1, "norm1"), (2, "norm2"), (3, "norm3")])
    if mem_len is not None:
        t["mem_len"] = torch.tensor(mem_len, dtype=torch.float64)
    if tgt_len is not None:
        t["tgt_len"] = torch.tensor(tgt_len, dtype=torch.float64)
    meta = {"B": B, "T": T, "S": S, "C": C, "H": H, "F": F, "relu": act == "relu",
            "norm_first": norm_first, "cross": True, "mem_pad": mem_len is not None,
            "tgt_pad": tgt_len is not None}
    fixture_io.write(os.path.join(OUT, f"decoder_{name}.txt"), meta, t,
                     f"nn.TransformerDecoderLayer parity case {name}; torch {torch.__version__}")


def gpt_case(name, B, T, C, H, F, act, norm_first):
    """Decoder-only block: nn.TransformerEncoderLayer with a causal mask; its norm2 is
    attn's ln3 (the FFN's LayerNorm)."""
    m = nn.TransformerEncoderLayer(C, H, dim_feedforward=F, dropout=0.0, activation=act,
                                   batch_first=True, norm_first=norm_first,
                                   layer_norm_eps=1e-5)
    randomize(m)
    m.train()
    x = torch.randn(B, T, C, requires_grad=True)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    out = m(x, src_mask=causal)
    dout = torch.randn_like(out)
    (out * dout).sum().backward()
    t = {"x": x.detach(), "out": out.detach(), "dout": dout, "dx": x.grad}
    mha_tensors("s", m.self_attn, t)
    common(m, t, [(1, "norm1"), (3, "norm2")])
    meta = {"B": B, "T": T, "S": 0, "C": C, "H": H, "F": F, "relu": act == "relu",
            "norm_first": norm_first, "cross": False, "mem_pad": False, "tgt_pad": False}
    fixture_io.write(os.path.join(OUT, f"decoder_{name}.txt"), meta, t,
                     f"decoder-only (nn.TransformerEncoderLayer, causal) case {name}; "
                     f"torch {torch.__version__}")


def main():
    os.makedirs(OUT, exist_ok=True)
    dec_case("post_relu_mempad", 2, 5, 6, 8, 2, 16, "relu", False, [6, 4], None)
    dec_case("pre_gelu_tgtpad", 2, 6, 4, 8, 4, 12, "gelu", True, None, [6, 4])
    dec_case("pre_relu_both", 1, 7, 5, 12, 3, 20, "relu", True, [3], None)
    dec_case("post_gelu", 2, 4, 3, 6, 3, 10, "gelu", False, None, None)
    gpt_case("gpt_pre_gelu", 2, 6, 8, 2, 16, "gelu", True)
    gpt_case("gpt_post_relu", 1, 5, 8, 4, 12, "relu", False)


if __name__ == "__main__":
    main()
