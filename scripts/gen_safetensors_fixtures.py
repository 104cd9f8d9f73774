#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch models saved as safetensors, with their outputs, for tests/test_io.c.

Needs torch 2.x and the safetensors package (PyPI, in a venv outside the repo):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch safetensors numpy
    /tmp/venv/bin/python scripts/gen_safetensors_fixtures.py

Each case writes tests/data/st_<case>.safetensors, exactly what
safetensors.torch.save_file(model.state_dict(), path) writes, and
tests/data/st_<case>.txt (scripts/fixture_io.py's format): the inputs, PyTorch's
outputs, and a few raw parameters that the C test compares with the views it
reads from the file. The models run in train mode with dropout 0 (no fast path),
batch_first:
  enc_*: nn.TransformerEncoder, 3 layers and a final LayerNorm; out = model(x);
         out_l0_causal = layers[0](x) with a causal src_mask (the decoder-only block
         attn_decoder_params_from_torch binds without cross-attention);
  dec_*: nn.TransformerDecoder, 2 layers and a final LayerNorm; out = model(x, memory)
         with a causal tgt_mask;
  st_<enc case>_io.safetensors (two cases): x and out, for examples/fortran/safetensors.f90;
  transformer_*: nn.Transformer (encoder and decoder stacks in one file) with its
         src, tgt and out in st_<case>_io.safetensors, for examples/torch_transformer.c;
  mha_*: nn.MultiheadAttention; out = its attention output for (x, mem, mem)
         (mha_kdim: kdim = vdim != embed_dim, PyTorch's three separate weights).
"""
import os
import sys

import torch
from safetensors.torch import save_file
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
import fixture_io  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data")
DT = {"f32": torch.float32, "f64": torch.float64}


def randomize(m):
    with torch.no_grad():
        for n_, p in m.named_parameters():
            if "norm" in n_:
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if n_.endswith("weight")
                        else 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 0.3)


def causal(T):
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def write(name, model, meta, t, what):
    save_file(model.state_dict(), os.path.join(OUT, f"st_{name}.safetensors"))
    fixture_io.write(os.path.join(OUT, f"st_{name}.txt"), meta,
                     {k: v.detach().double() for k, v in t.items()},
                     f"{what}; torch {torch.__version__}")


def enc_case(name, dt, B, T, C, H, F, act, norm_first, L=3, io=False):
    torch.manual_seed(20261205 + sum(map(ord, name)))
    layer = nn.TransformerEncoderLayer(C, H, dim_feedforward=F, dropout=0.0, activation=act,
                                       batch_first=True, norm_first=norm_first,
                                       layer_norm_eps=1e-5, dtype=DT[dt])
    m = nn.TransformerEncoder(layer, num_layers=L, norm=nn.LayerNorm(C, dtype=DT[dt]),
                              enable_nested_tensor=False)
    randomize(m)
    m.train()
    x = torch.randn(B, T, C, dtype=DT[dt])
    with torch.no_grad():
        out = m(x)
        out_l0_causal = m.layers[0](x, src_mask=causal(T), is_causal=True)
    sd = m.state_dict()
    t = {"x": x, "out": out, "out_l0_causal": out_l0_causal,
         "probe_in_proj_weight": sd["layers.1.self_attn.in_proj_weight"],
         "probe_linear1_weight": sd["layers.2.linear1.weight"],
         "probe_norm_bias": sd["norm.bias"]}
    meta = {"B": B, "T": T, "C": C, "H": H, "F": F, "L": L, "f64": dt == "f64",
            "relu": act == "relu", "norm_first": norm_first}
    write(name, m, meta, t, f"nn.TransformerEncoder ({L} layers + norm) case {name}")
    if io:  # x and out as safetensors too, for the Fortran example
        save_file({"x": x.contiguous(), "out": out.contiguous()},
                  os.path.join(OUT, f"st_{name}_io.safetensors"))


def dec_case(name, dt, B, T, S, C, H, F, act, norm_first, L=2):
    torch.manual_seed(20261205 + sum(map(ord, name)))
    layer = nn.TransformerDecoderLayer(C, H, dim_feedforward=F, dropout=0.0, activation=act,
                                       batch_first=True, norm_first=norm_first,
                                       layer_norm_eps=1e-5, dtype=DT[dt])
    m = nn.TransformerDecoder(layer, num_layers=L, norm=nn.LayerNorm(C, dtype=DT[dt]))
    randomize(m)
    m.train()
    x = torch.randn(B, T, C, dtype=DT[dt])
    mem = torch.randn(B, S, C, dtype=DT[dt])
    with torch.no_grad():
        out = m(x, mem, tgt_mask=causal(T), tgt_is_causal=True)
    sd = m.state_dict()
    t = {"x": x, "memory": mem, "out": out,
         "probe_in_proj_weight": sd["layers.1.multihead_attn.in_proj_weight"],
         "probe_linear2_weight": sd["layers.0.linear2.weight"]}
    meta = {"B": B, "T": T, "S": S, "C": C, "H": H, "F": F, "L": L, "f64": dt == "f64",
            "relu": act == "relu", "norm_first": norm_first}
    write(name, m, meta, t, f"nn.TransformerDecoder ({L} layers + norm) case {name}")


def mha_case(name, dt, B, Tq, Tk, C, H, kdim):
    torch.manual_seed(20261205 + sum(map(ord, name)))
    m = nn.MultiheadAttention(C, H, batch_first=True, kdim=kdim, vdim=kdim, dtype=DT[dt])
    randomize(m)
    x = torch.randn(B, Tq, C, dtype=DT[dt])
    mem = torch.randn(B, Tk, kdim or C, dtype=DT[dt])
    with torch.no_grad():
        out, _ = m(x, mem, mem, need_weights=False)
    meta = {"B": B, "Tq": Tq, "Tk": Tk, "C": C, "H": H, "Ckv": kdim or C,
            "f64": dt == "f64"}
    write(name, m, meta, {"x": x, "memory": mem, "out": out},
          f"nn.MultiheadAttention case {name}")


def transformer_case(name, dt, B, S, T, C, H, F, act, norm_first, Le, Ld):
    """nn.Transformer: encoder.layers.*, encoder.norm.*, decoder.layers.*, decoder.norm.*
    in one file; x and out in st_<name>_io.safetensors (examples/torch_transformer.c)."""
    torch.manual_seed(20261205 + sum(map(ord, name)))
    m = nn.Transformer(C, H, num_encoder_layers=Le, num_decoder_layers=Ld, dim_feedforward=F,
                       dropout=0.0, activation=act, batch_first=True, norm_first=norm_first,
                       dtype=DT[dt])
    randomize(m)
    m.train()
    src = torch.randn(B, S, C, dtype=DT[dt])
    tgt = torch.randn(B, T, C, dtype=DT[dt])
    with torch.no_grad():
        out = m(src, tgt, tgt_mask=causal(T), tgt_is_causal=True)
    save_file(m.state_dict(), os.path.join(OUT, f"st_{name}.safetensors"))
    save_file({"src": src, "tgt": tgt, "out": out},
              os.path.join(OUT, f"st_{name}_io.safetensors"))


def main():
    os.makedirs(OUT, exist_ok=True)
    enc_case("enc_post_relu_f64", "f64", 2, 5, 8, 2, 16, "relu", False, io=True)
    enc_case("enc_pre_gelu_f64", "f64", 2, 6, 8, 4, 12, "gelu", True)
    enc_case("enc_post_gelu_f32", "f32", 2, 5, 8, 2, 16, "gelu", False)
    enc_case("enc_pre_relu_f32", "f32", 1, 7, 12, 3, 20, "relu", True, io=True)
    dec_case("dec_post_gelu_f64", "f64", 2, 5, 4, 8, 4, 12, "gelu", False)
    dec_case("dec_pre_relu_f32", "f32", 2, 4, 6, 8, 2, 16, "relu", True)
    mha_case("mha_f64", "f64", 2, 5, 5, 8, 2, None)
    mha_case("mha_kdim_f32", "f32", 2, 4, 6, 8, 2, 6)
    transformer_case("transformer_f64", "f64", 2, 6, 5, 8, 2, 16, "gelu", False, 3, 2)


if __name__ == "__main__":
    main()
