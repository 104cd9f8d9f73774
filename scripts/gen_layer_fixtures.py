#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch parity fixtures for attn's layers (run with Debian's /usr/bin/python3).

nn.MultiheadAttention and nn.TransformerEncoderLayer (torch 1.13) in float64,
train mode with dropout 0 (so no fused fast path), batch_first. Each case writes
tests/data/layers_<case>.txt with the inputs, the torch parameters in torch's own
(out, in) layout (the C tests view them transposed, without copies), the output,
a random upstream gradient dout and the autograd gradients of sum(out * dout).
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
import fixture_io  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data")
torch.manual_seed(20261129)
torch.set_default_dtype(torch.float64)


def masks(B, Tq, Tk, pad, causal):
    """key_padding_mask (True = ignore) from per-batch valid key counts, causal attn_mask."""
    kpm = None
    if pad is not None:
        kpm = torch.arange(Tk)[None, :] >= torch.tensor(pad)[:, None]
    am = torch.triu(torch.ones(Tq, Tk, dtype=torch.bool), diagonal=1) if causal else None
    return kpm, am


def mha_case(name, B, Tq, Tk, C, Ckv, H, bias, pad, causal):
    m = nn.MultiheadAttention(C, H, bias=bias, batch_first=True, kdim=Ckv, vdim=Ckv,
                              dropout=0.0)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.4)
    xq = torch.randn(B, Tq, C, requires_grad=True)
    xkv = torch.randn(B, Tk, Ckv, requires_grad=True) if Ckv != C or Tk != Tq else None
    kpm, am = masks(B, Tq, Tk, pad, causal)
    kv = xkv if xkv is not None else xq
    out, _ = m(xq, kv, kv, key_padding_mask=kpm, attn_mask=am, need_weights=False)
    dout = torch.randn_like(out)
    (out * dout).sum().backward()
    t = {"x_q": xq.detach(), "out": out.detach(), "dout": dout, "dx_q": xq.grad}
    if xkv is not None:
        t.update({"x_kv": xkv.detach(), "dx_kv": xkv.grad})
    if m._qkv_same_embed_dim:
        wq, wk, wv = m.in_proj_weight.detach().chunk(3)
        gq, gk, gv = m.in_proj_weight.grad.chunk(3)
    else:
        wq, wk, wv = m.q_proj_weight.detach(), m.k_proj_weight.detach(), m.v_proj_weight.detach()
        gq, gk, gv = m.q_proj_weight.grad, m.k_proj_weight.grad, m.v_proj_weight.grad
    t.update({"wq": wq, "wk": wk, "wv": wv, "wo": m.out_proj.weight.detach(),
              "dwq": gq, "dwk": gk, "dwv": gv, "dwo": m.out_proj.weight.grad})
    if bias:
        bq, bk, bv = m.in_proj_bias.detach().chunk(3)
        g = m.in_proj_bias.grad.chunk(3)
        t.update({"bq": bq, "bk": bk, "bv": bv, "bo": m.out_proj.bias.detach(),
                  "dbq": g[0], "dbk": g[1], "dbv": g[2], "dbo": m.out_proj.bias.grad})
    if pad is not None:
        t["kv_len"] = torch.tensor(pad, dtype=torch.float64)
    meta = {"B": B, "Tq": Tq, "Tk": Tk, "C": C, "Ckv": Ckv, "H": H, "bias": bias,
            "pad": pad is not None, "causal": causal}
    fixture_io.write(os.path.join(OUT, f"layers_{name}.txt"), meta, t,
                     f"nn.MultiheadAttention parity case {name}; torch {torch.__version__}")


def enc_case(name, B, T, C, H, F, act, norm_first, pad, causal):
    m = nn.TransformerEncoderLayer(C, H, dim_feedforward=F, dropout=0.0, activation=act,
                                   batch_first=True, norm_first=norm_first, layer_norm_eps=1e-5)
    with torch.no_grad():
        for n_, p in m.named_parameters():
            if "norm" in n_:
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if n_.endswith("weight")
                        else 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 0.3)
    m.train()
    x = torch.randn(B, T, C, requires_grad=True)
    kpm, am = masks(B, T, T, pad, causal)
    out = m(x, src_mask=am, src_key_padding_mask=kpm)
    dout = torch.randn_like(out)
    (out * dout).sum().backward()
    sa = m.self_attn
    wq, wk, wv = sa.in_proj_weight.detach().chunk(3)
    gq, gk, gv = sa.in_proj_weight.grad.chunk(3)
    bq, bk, bv = sa.in_proj_bias.detach().chunk(3)
    hq, hk, hv = sa.in_proj_bias.grad.chunk(3)
    t = {"x": x.detach(), "out": out.detach(), "dout": dout, "dx": x.grad,
         "wq": wq, "wk": wk, "wv": wv, "wo": sa.out_proj.weight.detach(),
         "bq": bq, "bk": bk, "bv": bv, "bo": sa.out_proj.bias.detach(),
         "w1": m.linear1.weight.detach(), "b1": m.linear1.bias.detach(),
         "w2": m.linear2.weight.detach(), "b2": m.linear2.bias.detach(),
         "ln1_g": m.norm1.weight.detach(), "ln1_b": m.norm1.bias.detach(),
         "ln2_g": m.norm2.weight.detach(), "ln2_b": m.norm2.bias.detach(),
         "dwq": gq, "dwk": gk, "dwv": gv, "dwo": sa.out_proj.weight.grad,
         "dbq": hq, "dbk": hk, "dbv": hv, "dbo": sa.out_proj.bias.grad,
         "dw1": m.linear1.weight.grad, "db1": m.linear1.bias.grad,
         "dw2": m.linear2.weight.grad, "db2": m.linear2.bias.grad,
         "dln1_g": m.norm1.weight.grad, "dln1_b": m.norm1.bias.grad,
         "dln2_g": m.norm2.weight.grad, "dln2_b": m.norm2.bias.grad}
    if pad is not None:
        t["kv_len"] = torch.tensor(pad, dtype=torch.float64)
    meta = {"B": B, "T": T, "C": C, "H": H, "F": F, "relu": act == "relu",
            "norm_first": norm_first, "pad": pad is not None, "causal": causal}
    fixture_io.write(os.path.join(OUT, f"layers_{name}.txt"), meta, t,
                     f"nn.TransformerEncoderLayer parity case {name}; torch {torch.__version__}")


def main():
    os.makedirs(OUT, exist_ok=True)
    mha_case("mha_self", 2, 5, 5, 8, 8, 2, True, None, False)
    mha_case("mha_causal_pad", 2, 6, 6, 8, 8, 4, True, [6, 4], True)
    mha_case("mha_cross", 2, 3, 7, 8, 6, 2, False, [7, 5], False)
    enc_case("enc_post_relu_pad", 2, 6, 8, 2, 16, "relu", False, [6, 3], False)
    enc_case("enc_post_gelu_causal", 2, 5, 8, 4, 12, "gelu", False, None, True)
    enc_case("enc_pre_gelu_pad", 2, 6, 8, 2, 16, "gelu", True, [4, 6], False)
    enc_case("enc_pre_relu_causal", 1, 7, 12, 3, 20, "relu", True, None, True)


if __name__ == "__main__":
    main()
