#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run the ViT seed (shared/seeds/000_*.txt) itself and keep its numbers as a fixture.

The seed's Python is executed unchanged (matplotlib on the Agg backend, in a
temporary folder); its own tensors.npz and results.json are then written to
tests/data/vit_seed.txt for the C tests and examples/vit_encoder_trace.
Run with Debian's /usr/bin/python3 (numpy, matplotlib).
"""
import glob
import json
import os
import sys
import tempfile

import matplotlib
matplotlib.use("Agg")
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_io  # noqa: E402

SEEDS = os.environ.get("ATTN_SEEDS", os.path.join(HERE, "..", "..", "shared", "seeds"))


def main():
    seed = glob.glob(os.path.join(SEEDS, "000_*.txt"))[0]
    lines = open(seed, encoding="utf-8").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("from pathlib"))
    code = "\n".join(lines[start:])
    out = os.path.join(HERE, "..", "tests", "data", "vit_seed.txt")
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            import matplotlib.pyplot as plt
            plt.show = lambda *a, **k: None
            exec(compile(code, seed, "exec"), {"__name__": "__seed__"})
            z = np.load("outputs/LAB-B/tensors.npz")
            res = json.load(open("outputs/LAB-B/results.json"))
        finally:
            os.chdir(cwd)
    tensors = {k: z[k] for k in z.files}
    tensors["patches"] = np.array(res["patches"])
    for k, v in res["changes"]["one_pixel"].items():
        tensors["change_one_pixel_" + k] = np.array(v)
    tensors["change_remove_position"] = np.array(res["changes"]["remove_position"])
    tensors["identical_attention_max_deviation"] = np.array(
        [res["changes"]["identical_attention_max_deviation_from_uniform"]])
    tensors["permutation_max_error"] = np.array([res["changes"]["permutation_max_error"]])
    fixture_io.write(out, {"seed": res["seed"]}, tensors,
                     "Numbers of shared/seeds/000 (LAB 09), produced by running the seed itself")
    print("wrote", out, "with", len(tensors), "tensors")


if __name__ == "__main__":
    main()
