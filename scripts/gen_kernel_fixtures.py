#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch parity data for attn's row and elementwise kernels (tests/test_kernels.c).

Forward values and autograd gradients, float64, for GELU (tanh and erf), softmax
(also with -inf entries), LayerNorm with affine, and a linear map with PyTorch's
(out, in) weight. The upstream gradient of every output is the tensor `w`.
Run with Debian's /usr/bin/python3 (python3-torch 1.13, python3-numpy).
Writes tests/data/kernels_torch.txt.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_io  # noqa: E402


def grads(fn, *inputs, w):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in inputs]
    y = fn(*ts)
    (y * torch.tensor(w)).sum().backward()
    return [y.detach().numpy()] + [t.grad.numpy() for t in ts]


def main():
    rng = np.random.default_rng(20261129)
    x = rng.normal(0, 2, (3, 7))
    w = rng.normal(0, 1, (3, 7))
    gamma = rng.normal(1, .3, 7)
    beta = rng.normal(0, .3, 7)
    masked = x.copy()
    masked[0, [1, 4]] = -np.inf
    t = {"x": x, "w": w, "gamma": gamma, "beta": beta, "masked": masked}
    for name, approx in (("gelu_tanh", "tanh"), ("gelu_erf", "none")):
        y, dx = grads(lambda a: F.gelu(a, approximate=approx), x, w=w)
        t[name], t[name + "_dx"] = y, dx
    t["softmax"], t["softmax_dx"] = grads(lambda a: F.softmax(a, -1), x, w=w)
    t["softmax_masked"] = F.softmax(torch.tensor(masked), -1).numpy()
    y, dx, dg, db = grads(lambda a, g, b: F.layer_norm(a, (7,), g, b, 1e-5), x, gamma, beta,
                          w=w)
    t.update(layernorm=y, layernorm_dx=dx, layernorm_dgamma=dg, layernorm_dbeta=db)
    # linear: x (3, 7) -> (3, 5) with torch's (out, in) = (5, 7) weight
    wl = rng.normal(0, .5, (5, 7))
    bl = rng.normal(0, .5, 5)
    wo = rng.normal(0, 1, (3, 5))
    y, dx, dw, db = grads(lambda a, m, b: F.linear(a, m, b), x, wl, bl, w=wo)
    t.update(lin_w_out_in=wl, lin_b=bl, lin_upstream=wo, linear=y, linear_dx=dx,
             linear_dw_out_in=dw, linear_db=db)
    out = os.path.join(HERE, "..", "tests", "data", "kernels_torch.txt")
    fixture_io.write(out, {}, t, "PyTorch %s float64 kernels parity (scripts/gen_kernel_fixtures.py)"
                     % torch.__version__)
    print("wrote", out)


if __name__ == "__main__":
    main()
