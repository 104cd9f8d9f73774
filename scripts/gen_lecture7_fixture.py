#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run the lecture-7 seed and keep its numbers for examples/self_attention_walkthrough.

The seed (shared/seeds/003_*.txt) is executed unchanged, its main() included
(its printout goes to /dev/null), with np.random.default_rng wrapped so that
every array its generator draws is recorded in order. From those draws this
script keeps: the inputs and results of demos 2, 4 and 5 (the C program
reproduces them to 1e-12), the statistics of the sqrt(d_k) study computed
with the seed's own softmax and softmax_jacobian_norm on the seed's draws
(the C program draws its own vectors with attn's Philox generator and
compares statistics), and the FLOP table of demo 6.
Run with Debian's /usr/bin/python3 (numpy). Writes tests/data/lecture7.txt.
"""
import contextlib
import glob
import io
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_io  # noqa: E402

SEEDS = os.environ.get("ATTN_SEEDS", os.path.join(HERE, "..", "..", "shared", "seeds"))
DKS = [4, 16, 64, 256, 1024]
TRIALS = 2000


class Recorder:
    """np.random.Generator whose normal() draws are also appended to `draws`."""

    def __init__(self, gen, draws):
        self.gen, self.draws = gen, draws

    def normal(self, *a, **k):
        x = self.gen.normal(*a, **k)
        self.draws.append(np.array(x, dtype=np.float64))
        return x


def main():
    path = glob.glob(os.path.join(SEEDS, "003_*.txt"))[0]
    ns = {"__name__": "__seed__", "__file__": path}
    exec(compile(open(path, encoding="utf-8").read(), path, "exec"), ns)
    draws = []
    real = np.random.default_rng
    np.random.default_rng = lambda s: Recorder(real(s), draws)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            ns["main"]()
    finally:
        np.random.default_rng = real
    softmax, jnorm, attn = ns["softmax"], ns["softmax_jacobian_norm"], ns["self_attention"]
    t = {}

    # demo 1: the soft dictionary look-up (constants)
    keys = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    values = np.array([10.0, 20.0, 30.0])
    queries = np.array([[10.0, 0.0], [1.0, 0.0], [0.5, 0.5]])
    w = np.stack([softmax(keys @ q) for q in queries])
    t.update({"d1_weights": w, "d1_outputs": w @ values})

    # demo 2: the seed rounds its draws to one decimal
    X, WQ, WK, WV = (d.round(1) for d in draws[:4])
    Q, K, V = X @ WQ, X @ WK, X @ WV
    S = Q @ K.T / np.sqrt(3)
    A = softmax(S, axis=1)
    t.update({"d2_X": X, "d2_W_Q": WQ, "d2_W_K": WK, "d2_W_V": WV, "d2_Q": Q, "d2_S": S,
              "d2_A": A, "d2_out": A @ V})

    # demo 3: the seed's statistics on its own draws
    i = 4
    stats = []
    for dk in DKS:
        dots, mr, gr, ms, gs = [], [], [], [], []
        for _ in range(TRIALS):
            q, Kmat = draws[i], draws[i + 1]
            i += 2
            z = Kmat @ q
            dots.append(z[0])
            pr, ps = softmax(z), softmax(z / np.sqrt(dk))
            mr.append(pr.max()); gr.append(jnorm(pr)); ms.append(ps.max()); gs.append(jnorm(ps))
        stats.append([dk, np.std(dots), np.mean(mr), np.mean(gr), np.mean(ms), np.mean(gs)])
    t["d3_stats"] = np.array(stats)

    # demo 4: dog bites man
    emb = np.stack(draws[i:i + 3])
    WQ, WK, WV = draws[i + 3:i + 6]
    i += 6
    X1, X2 = emb, emb[[2, 1, 0]]
    P = np.stack([np.sin(np.arange(4) * (p + 1)) for p in range(3)])
    t.update({"d4_emb": emb, "d4_W_Q": WQ, "d4_W_K": WK, "d4_W_V": WV,
              "d4_o1": attn(X1, WQ, WK, WV)[0], "d4_o2": attn(X2, WQ, WK, WV)[0], "d4_P": P,
              "d4_o1p": attn(X1 + P, WQ, WK, WV)[0], "d4_o2p": attn(X2 + P, WQ, WK, WV)[0]})

    # demo 5: the causal mask
    X, WQ, WK, WV, new_last = draws[i:i + 5]
    assert i + 5 == len(draws)
    causal = np.tril(np.ones((4, 4), dtype=bool))
    out, A = attn(X, WQ, WK, WV, mask=causal)
    X_changed = X.copy()
    X_changed[3] = new_last
    t.update({"d5_X": X, "d5_W_Q": WQ, "d5_W_K": WK, "d5_W_V": WV, "d5_A": A, "d5_out": out,
              "d5_new_last": new_last, "d5_out_changed": attn(X_changed, WQ, WK, WV, mask=causal)[0]})

    # demo 6: the FLOP table, with the seed's expressions
    d = 768
    rows = []
    for n in [128, 512, 1024, 4096, 16384, 65536]:
        lin, att = 12 * n * d * d / 1e9, 2 * n * n * d / 1e9
        rows.append([n, lin, att, att / (lin + att)])
    t["d6_flops"] = np.array(rows)

    out_path = os.path.join(HERE, "..", "tests", "data", "lecture7.txt")
    fixture_io.write(out_path, {"draws": len(draws)}, t,
                     "Numbers of shared/seeds/003 (lecture 7), from running the seed "
                     "(scripts/gen_lecture7_fixture.py, numpy %s)" % np.__version__)
    print("wrote", out_path, "with", len(t), "tensors")
    for r in stats:
        print("  d_k %5d  std %6.2f  raw max %.3f jac %.4f  scaled max %.3f jac %.4f" % tuple(r))


if __name__ == "__main__":
    main()
