# SPDX-License-Identifier: MIT
"""Write attn's plain-text fixture format (read by tests/fixture.h).

    meta <key> <integer>
    tensor <name> <ndim> <d0> ... <d{ndim-1}>
    <values, row-major, %.17g, whitespace separated>
"""
import numpy as np


def write(path, meta, tensors, header=""):
    with open(path, "w") as f:
        for line in header.strip().splitlines():
            f.write("# " + line + "\n")
        for k, v in meta.items():
            f.write(f"meta {k} {int(v)}\n")
        for name, t in tensors.items():
            a = np.asarray(t, dtype=np.float64)
            f.write(f"tensor {name} {a.ndim} " + " ".join(str(d) for d in a.shape) + "\n")
            flat = a.reshape(-1)
            for i in range(0, flat.size, 4):
                f.write(" ".join("%.17g" % x for x in flat[i:i + 4]) + "\n")
