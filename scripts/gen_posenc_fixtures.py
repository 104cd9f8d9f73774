#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Sinusoidal position tables for tests/test_posenc.c, from the lesson-11 seed itself.

The seed's own `sinusoidal_positions` (shared/seeds/004_*.txt) is cut out of
the seed file and executed unchanged with torch (float32), for the seed's 4x4
table and a longer 64x16 one. For the f64 comparison the same formula is
evaluated in float64 (the seed's code with dtype=torch.float64), also with a
non-default base. Run with Debian's /usr/bin/python3 (python3-torch 1.13).
Writes tests/data/posenc_sinusoidal.txt.
"""
import glob
import math
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_io  # noqa: E402

SEEDS = os.environ.get("ATTN_SEEDS", os.path.join(HERE, "..", "..", "shared", "seeds"))


def seed_function():
    """The seed's def sinusoidal_positions(...) block, executed as written."""
    path = glob.glob(os.path.join(SEEDS, "004_*.txt"))[0]
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^def sinusoidal_positions\(.*?(?=^\S)", text, re.S | re.M)
    ns = {"torch": torch, "math": math}
    exec(compile(m.group(0), path, "exec"), ns)
    return ns["sinusoidal_positions"], m.group(0)


def formula_f64(length, width, base=10000.0):
    """The seed's formula, every tensor float64 instead of float32."""
    positions = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    even = torch.arange(0, width, 2, dtype=torch.float64)
    frequencies = torch.exp(-math.log(base) * even / width)
    result = torch.zeros(length, width, dtype=torch.float64)
    result[:, 0::2] = torch.sin(positions * frequencies)
    result[:, 1::2] = torch.cos(positions * frequencies)
    return result


def main():
    fn, src = seed_function()
    t = {
        "seed_4x4_f32": fn(4, 4).double().numpy(),
        "seed_64x16_f32": fn(64, 16).double().numpy(),
        "f64_64x16": formula_f64(64, 16).numpy(),
        "f64_base100_9x6": formula_f64(9, 6, 100.0).numpy(),
    }
    out = os.path.join(HERE, "..", "tests", "data", "posenc_sinusoidal.txt")
    header = ("Sinusoidal tables (scripts/gen_posenc_fixtures.py, torch %s); the seed's function:\n"
              % torch.__version__ + src.rstrip())
    fixture_io.write(out, {}, t, header)
    print("wrote", out)


if __name__ == "__main__":
    main()
