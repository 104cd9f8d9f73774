#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reference data for attn_sdpa's attention variants (tests/test_variants.c).

An independent naive float64 implementation with explicit masks, in torch
(autograd gives the gradients). For batch b, query head h, query row i, key j:

    p     = i + (Tk - Tq) with bottom-right causal (2), else i   (aligned position)
    s     = scale q_i . k_j                    (scale 0 -> 1/sqrt(D))
    s     = softcap tanh(s / softcap)          (softcap > 0)
    s    += -alibi[h] |p - j|                  (alibi slopes given)
    s    += bias[b, h, i, j]
    key j visible iff keep, causal (j <= p), window (p - left <= j <= p + right),
    j < kv_len[b], and s != -inf (a -inf bias masks)
    out_i = sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sink_h}),   over visible j
    lse_i = log(sum_j e^{s_j} + e^{sink_h})
A row with nothing visible gives out 0 and lse = sink_h, or -1e30 without
sinks (attn's convention). Packed variable-length sequences (n_seqs > 0, B 1):
query rows cu_q[n] .. cu_q[n+1]-1 see only keys cu_k[n] .. cu_k[n+1]-1, and
i, j, p count from the start of their sequence. GQA: key/value head
h // (H // Hkv). weights are the softmax's (no sink column). Gradients are
autograd's of sum(out * dout), dsinks included.

Run with a Python that has numpy and torch (1.13 or 2.x). Writes tests/data/variant_*.txt.
"""
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_io  # noqa: E402

DATA = os.path.join(HERE, "..", "tests", "data")


def positions(o, B, Tq, Tk):
    """Per (b, i, j): same sequence, query position p, key position j (local in varlen)."""
    same = np.zeros((B, Tq, Tk), dtype=bool)
    p = np.zeros((B, Tq, Tk))
    jp = np.zeros((B, Tq, Tk))
    causal = o.get("causal", 0)
    if o.get("n_seqs", 0) > 0:
        cq, ck = o["cu_q"], o["cu_k"]
        for n in range(o["n_seqs"]):
            tqn, tkn = cq[n + 1] - cq[n], ck[n + 1] - ck[n]
            for il in range(tqn):
                for jl in range(tkn):
                    i, j = cq[n] + il, ck[n] + jl
                    same[0, i, j] = True
                    p[0, i, j] = il + (tkn - tqn if causal == 2 or o.get("br_pos") else 0)
                    jp[0, i, j] = jl
    else:
        for i in range(Tq):
            for j in range(Tk):
                same[:, i, j] = True
                p[:, i, j] = i + (Tk - Tq if causal == 2 or o.get("br_pos") else 0)
                jp[:, i, j] = j
    return same, p, jp


def attention(t, o):
    q, k, v = t["q"], t["k"], t["v"]
    B, H, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    g = H // Hkv
    kk = k.repeat_interleave(g, dim=1)
    vv = v.repeat_interleave(g, dim=1)
    scale = o.get("scale", 0.0) or 1.0 / math.sqrt(D)
    s = scale * (q @ kk.transpose(-1, -2))
    if o.get("softcap", 0.0) > 0:
        c = o["softcap"]
        s = c * torch.tanh(s / c)
    same, p, jp = positions(o, B, Tq, Tk)
    allowed = torch.tensor(same).view(B, 1, Tq, Tk).expand(B, H, Tq, Tk)
    if "alibi" in t:
        dist = torch.tensor(np.abs(p - jp)).view(B, 1, Tq, Tk)
        s = s - t["alibi"].view(1, H, 1, 1) * dist
    if "bias" in t:
        s = s + t["bias"]
    if "keep" in t:
        allowed = allowed & t["keep"].bool()
    pt, jt = torch.tensor(p).view(B, 1, Tq, Tk), torch.tensor(jp).view(B, 1, Tq, Tk)
    if o.get("causal", 0):
        allowed = allowed & (jt <= pt)
    if o.get("window", False):
        allowed = allowed & (jt >= pt - o["left"]) & (jt <= pt + o["right"])
    if "kv_len" in t:
        j = torch.arange(Tk).view(1, 1, 1, Tk)
        allowed = allowed & (j < t["kv_len"].view(B, 1, 1, 1))
    allowed = allowed & torch.isfinite(s.detach())
    neg = torch.tensor(-np.inf, dtype=s.dtype)
    s = torch.where(allowed, s, neg)
    if "sinks" in t:
        sink = t["sinks"].view(1, H, 1, 1).expand(B, H, Tq, 1)
        full = torch.cat([s, sink], -1)
        lse = torch.logsumexp(full, -1)
        pr = torch.exp(full - lse.unsqueeze(-1))[..., :Tk] * allowed
        return pr @ vv, lse, pr
    live = allowed.any(-1, keepdim=True)
    s = torch.where(live, s, torch.zeros((), dtype=s.dtype))
    pr = torch.softmax(s, -1) * allowed
    lse = torch.where(live[..., 0], torch.logsumexp(s, -1), torch.tensor(-1e30, dtype=s.dtype))
    return pr @ vv, lse, pr


def alibi_slopes(H, max_bias=8.0):
    """BLOOM's and ggml's geometric ALiBi slopes for H heads (ggml_flash_attn_ext's max_bias)."""
    n = 2 ** math.floor(math.log2(H))
    m0, m1 = 2.0 ** (-max_bias / n), 2.0 ** (-max_bias / 2.0 / n)
    return np.array([m0 ** (h + 1) if h < n else m1 ** (2 * (h - n) + 1) for h in range(H)])


def case(name, rng, B, H, Hkv, Tq, Tk, D, Dv, o, keep=False, bias=False, kv_len=None,
         alibi=False, sinks=False, qscale=1.0, note=""):
    t = {"q": rng.normal(0, qscale, (B, H, Tq, D)), "k": rng.normal(0, 1, (B, Hkv, Tk, D)),
         "v": rng.normal(0, 1, (B, Hkv, Tk, Dv))}
    if keep:
        t["keep"] = (rng.random((B, 1, Tq, Tk)) < 0.75).astype(np.float64)
        t["keep"][0, 0, 1, :] = 0  # one row that sees nothing
    if bias:
        t["bias"] = rng.normal(0, 1, (1, H, Tq, Tk))
        t["bias"][0, 0, Tq - 1, 0] = -np.inf
    if kv_len is not None:
        t["kv_len"] = np.array(kv_len, dtype=np.float64)
    if alibi:
        t["alibi"] = alibi_slopes(H)
    if sinks:
        t["sinks"] = rng.normal(0, 1, (H,))
        t["sinks"][-1] = 30.0 if H > 2 else t["sinks"][-1]  # a sink that dominates
    t["dout"] = rng.normal(0, 1, (B, H, Tq, Dv))
    tt = {n: torch.tensor(a) for n, a in t.items()}
    grads = ["q", "k", "v"] + (["sinks"] if sinks else [])
    for n in grads:
        tt[n].requires_grad_(True)
    out, lse, pr = attention(tt, o)
    (out * tt["dout"]).sum().backward()
    t.update(out=out.detach().numpy(), lse=lse.detach().numpy(),
             weights=pr.detach().numpy())
    for n in grads:
        t["d" + n] = tt[n].grad.numpy()
    if o.get("n_seqs", 0) > 0:
        t["cu_q"] = np.array(o["cu_q"], dtype=np.float64)
        t["cu_k"] = np.array(o["cu_k"], dtype=np.float64)
    t["softcap"] = np.array([o.get("softcap", 0.0)])
    meta = {"causal": o.get("causal", 0), "window": o.get("window", False),
            "window_left": o.get("left", 0), "window_right": o.get("right", 0),
            "n_seqs": o.get("n_seqs", 0)}
    fixture_io.write(os.path.join(DATA, name), meta, t,
                     header=f"{name}: {note}\ngenerated by scripts/gen_variant_fixtures.py "
                     f"(torch {torch.__version__}, float64, explicit masks)")


def decode_case(name, rng, B, H, Hkv, Tq, Tmax, D, lens, o, note=""):
    """attn_sdpa_decode: the Tq queries of batch b at positions len_b - Tq .. len_b - 1
    against its keys 0 .. len_b - 1 of a cache of Tmax (the rest is never read)."""
    t = {"q": rng.normal(0, 1.5, (B, H, Tq, D)), "k": rng.normal(0, 1, (B, Hkv, Tmax, D)),
         "v": rng.normal(0, 1, (B, Hkv, Tmax, D)), "alibi": alibi_slopes(H),
         "sinks": rng.normal(0, 1, (H,))}
    outs, lses = [], []
    for b in range(B):
        L = lens[b]
        tb = {"q": torch.tensor(t["q"][b:b + 1]), "k": torch.tensor(t["k"][b:b + 1, :, :L]),
              "v": torch.tensor(t["v"][b:b + 1, :, :L]), "alibi": torch.tensor(t["alibi"]),
              "sinks": torch.tensor(t["sinks"])}
        out, lse, _ = attention(tb, dict(o, br_pos=True))
        outs.append(out.numpy()[0])
        lses.append(lse.numpy()[0])
    t.update(out=np.stack(outs), lse=np.stack(lses), len=np.array(lens, dtype=np.float64),
             softcap=np.array([o.get("softcap", 0.0)]))
    meta = {"causal": o.get("causal", 0), "window": o.get("window", False),
            "window_left": o.get("left", 0), "window_right": o.get("right", 0)}
    fixture_io.write(os.path.join(DATA, name), meta, t,
                     header=f"{name}: {note}\ngenerated by scripts/gen_variant_fixtures.py "
                     f"(torch {torch.__version__}, float64, explicit masks)")


def main():
    slopes = {f"slopes_{H}": alibi_slopes(H) for H in (1, 2, 3, 4, 5, 8, 12, 16)}
    slopes["slopes_6_bias_4"] = alibi_slopes(6, 4.0)
    fixture_io.write(os.path.join(DATA, "variant_alibi_slopes.txt"), {}, slopes,
                     header="variant_alibi_slopes.txt: ALiBi slopes for H heads, max_bias 8 "
                     "(and 4 for H 6)\ngenerated by scripts/gen_variant_fixtures.py")
    rng = np.random.default_rng(20261205)
    case("variant_window_causal.txt", rng, 2, 2, 1, 12, 12, 4, 3,
         {"causal": 1, "window": True, "left": 3, "right": 0},
         note="sliding window of 4 keys, top-left causal, multi-query")
    case("variant_window_sym.txt", rng, 1, 2, 2, 7, 10, 4, 4,
         {"window": True, "left": 2, "right": 3}, keep=True,
         note="window (2, 3) without causal, Tq < Tk (p = i), keep with an empty row")
    case("variant_window_br.txt", rng, 2, 4, 2, 4, 11, 8, 4,
         {"causal": 2, "window": True, "left": 5, "right": 1}, kv_len=[11, 7],
         note="window (5, 1) with bottom-right causal (p = i + Tk - Tq), kv_len, GQA")
    case("variant_softcap.txt", rng, 1, 2, 1, 6, 9, 4, 4, {"softcap": 2.0}, bias=True,
         qscale=3.0, note="softcap 2 on large scores, then a bias with one -inf")
    case("variant_alibi.txt", rng, 1, 4, 4, 8, 8, 4, 4, {"causal": 1}, alibi=True,
         note="ALiBi slopes for 4 heads (max_bias 8), top-left causal")
    case("variant_sinks.txt", rng, 2, 3, 1, 5, 6, 4, 3, {"causal": 2}, keep=True, sinks=True,
         note="a sink logit per head (one of 30), keep with an empty row (out 0, lse sink)")
    case("variant_varlen.txt", rng, 1, 2, 1, 10, 13, 4, 4,
         {"causal": 2, "window": True, "left": 2, "right": 0, "n_seqs": 4,
          "cu_q": [0, 3, 3, 8, 10], "cu_k": [0, 4, 7, 13, 13]},
         note="four packed sequences (queries 3,0,5,2; keys 4,3,6,0), bottom-right causal, "
         "window 3")
    case("variant_varlen_mix.txt", rng, 1, 2, 2, 9, 9, 4, 3,
         {"softcap": 1.5, "n_seqs": 3, "cu_q": [0, 4, 5, 9], "cu_k": [0, 4, 5, 9]},
         alibi=True, sinks=True, qscale=2.0,
         note="three packed self-attention sequences, no causal, softcap, ALiBi, sinks")
    case("variant_all.txt", rng, 2, 4, 2, 10, 13, 8, 5,
         {"causal": 2, "window": True, "left": 4, "right": 2, "softcap": 3.0},
         keep=True, bias=True, kv_len=[13, 9], alibi=True, sinks=True, qscale=2.0,
         note="window, softcap, ALiBi, sinks, keep, bias, kv_len, GQA, bottom-right causal")
    decode_case("variant_decode_causal.txt", rng, 2, 4, 2, 3, 300, 8, [300, 9],
                {"causal": 2, "window": True, "left": 40, "right": 0, "softcap": 4.0},
                note="decode: 3 queries at the end of 300 and 9 keys, causal window of 41, "
                "softcap, ALiBi, sinks, GQA")
    decode_case("variant_decode_open.txt", rng, 2, 2, 1, 2, 20, 4, [20, 6],
                {"window": True, "left": 4, "right": 2},
                note="decode without causal: window (4, 2) around position len - Tq + i, "
                "ALiBi, sinks")


if __name__ == "__main__":
    main()
