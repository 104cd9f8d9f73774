#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run the lesson-11 seed's own model and keep its numbers for examples/causal_mha.

The seed (shared/seeds/004_*.txt) is executed as written but not as __main__,
so its definitions (attention, TinyMultiHeadAttention, sinusoidal_positions)
exist and its main() does not run: main() calls
F.scaled_dot_product_attention, which Debian's torch 1.13 lacks. The steps
of main() that need no SDPA are then repeated here in the same order with the
same seed, so the model's weights (torch.manual_seed(1111), nn.Linear's
default init) and x (torch.randn(2, 4, 4)) are the seed's own.
Run with Debian's /usr/bin/python3 (python3-torch 1.13).
Writes tests/data/lesson11.txt (weights in torch's (out, in) layout).
"""
import glob
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_io  # noqa: E402

SEEDS = os.environ.get("ATTN_SEEDS", os.path.join(HERE, "..", "..", "shared", "seeds"))


def load_seed():
    path = glob.glob(os.path.join(SEEDS, "004_*.txt"))[0]
    ns = {"__name__": "__seed__", "__file__": path}
    exec(compile(open(path, encoding="utf-8").read(), path, "exec"), ns)
    return ns


def main():
    s = load_seed()
    torch.set_num_threads(2)
    t = {}
    # the hand-checkable case
    q = torch.tensor([[1., 0.], [0., 1.], [1., 1.]])
    k = q.clone()
    v = torch.tensor([[1., 0.], [0., 2.], [3., 3.]])
    full = s["attention"](q, k, v, causal=False)
    causal = s["attention"](q, k, v, causal=True)
    for name in ("raw", "scaled", "weights", "output"):
        t["tiny_full_" + name] = full[name]
    for name in ("masked", "weights", "output"):
        t["tiny_causal_" + name] = causal[name]
    t["tiny_causal_mask"] = causal["mask"].double()

    # the tiny MHA, exactly as main() builds it
    torch.manual_seed(1111)
    model = s["TinyMultiHeadAttention"](d_model=4, heads=2)
    x = torch.randn(2, 4, 4)
    with torch.no_grad():
        y, weights, _ = model(x)
        altered = x.clone()
        altered[:, 3] += torch.tensor([10., -7., 4., 6.])
        altered_causal, _, _ = model(altered, causal=True)
        full_y, _, _ = model(x, causal=False)
        altered_full, _, _ = model(altered, causal=False)
        perm = torch.tensor([2, 0, 3, 1])
        permuted, _, _ = model(x[:, perm], causal=False)
        pe = s["sinusoidal_positions"](4, 4)
        with_positions, _, _ = model(x + pe, causal=False)
        changed_content_order, _, _ = model(x[:, perm] + pe, causal=False)
    gradient_input = x.detach().clone().requires_grad_(True)
    grad_output, _, _ = model(gradient_input, causal=True)
    grad_output[0, 1].sum().backward()

    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        t[name] = getattr(model, name).weight.detach()
    t.update({"x": x, "y": y, "weights": weights, "altered_causal": altered_causal,
              "full_y": full_y, "altered_full": altered_full, "permuted": permuted,
              "sinusoidal_4x4": pe, "with_positions": with_positions,
              "changed_content_order": changed_content_order,
              "grad_out01_wrt_x": gradient_input.grad})
    t = {k: v.detach().double().numpy() for k, v in t.items()}
    out = os.path.join(HERE, "..", "tests", "data", "lesson11.txt")
    fixture_io.write(out, {"seed": 1111}, t,
                     "Numbers of shared/seeds/004 (lesson 11), its own model run by "
                     "scripts/gen_lesson11_fixture.py (torch %s, float32)" % torch.__version__)
    print("wrote", out, "with", len(t), "tensors")


if __name__ == "__main__":
    main()
