#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""attn and PyTorch side by side on the same shapes and thread count.

Runs attn-bench (subprocess, --csv) and times PyTorch on the same shapes:
  linear     q, k, v, o projections (F.linear) + FFN (linear1, GELU, linear2)
  attention  softmax(q k^T / sqrt(D) + mask) v on (B*H, n, D) with bmm: what
             torch 1.13's multi-head attention computes inside (it has no
             scaled_dot_product_attention, so scores are always materialized)
  mha        nn.MultiheadAttention(x, x, x, need_weights=False)
  block      nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
             dropout=0), the same pre-norm block attn-bench times
all in eval mode under torch.inference_mode(), and prints both times and
their ratio. Run with Debian's python3-torch: /usr/bin/python3 bench/compare_torch.py

Both sides run under the same thread environment, set before torch is
imported: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = --threads, and, unless
set, OPENBLAS_THREAD_TIMEOUT=4 and OMP_WAIT_POLICY=PASSIVE (attn-bench --tuned-env's
settings; torch 1.13 here also mixes OpenMP with the pthread OpenBLAS).
"""
import argparse
import csv
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

torch = F = None  # imported in main(), after the thread environment is set

PARTS = [("lin", "linear (QKVO + FFN)"), ("attn", "attention core"),
         ("mha", "MultiheadAttention"), ("block", "TransformerEncoderLayer")]


def find_bench(root):
    for cand in [os.path.join(root, "build-release", "bench", "attn-bench")] + sorted(
            glob.glob(os.path.join(root, "build*", "bench", "attn-bench"))):
        if os.access(cand, os.X_OK):
            return cand
    sys.exit("compare_torch.py: no attn-bench found under build*/bench; build it "
             "(meson setup build-release --buildtype=release && meson compile -C "
             "build-release) or pass --bench")


def timeit(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def torch_times(a, n, dtype):
    """Median seconds of each part for sequence length n."""
    torch.manual_seed(0)
    d, h, f, b = a.d, a.heads, a.ff, a.batch
    D = d // h
    layer = torch.nn.TransformerEncoderLayer(d, h, f, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    layer = layer.to(dtype).eval()
    mha = layer.self_attn
    x = torch.randn(b, n, d, dtype=dtype)
    mask = torch.triu(torch.full((n, n), float("-inf"), dtype=dtype), 1) if a.causal else None
    wq, wk, wv = mha.in_proj_weight.chunk(3)
    bq, bk, bv = mha.in_proj_bias.chunk(3)
    heads = lambda t: t.view(b, n, h, D).transpose(1, 2).reshape(b * h, n, D)
    with torch.inference_mode():
        q, k, v = heads(F.linear(x, wq, bq)), heads(F.linear(x, wk, bk)), heads(F.linear(x, wv, bv))
        att = torch.randn(b, n, d, dtype=dtype)

        def linear():
            F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)
            F.linear(att, mha.out_proj.weight, mha.out_proj.bias)
            layer.linear2(F.gelu(layer.linear1(x)))

        def core():
            s = torch.bmm(q, k.transpose(1, 2)).mul_(D ** -0.5)
            if mask is not None:
                s.add_(mask)
            return torch.bmm(torch.softmax(s, dim=-1), v)

        fns = {"lin": linear, "attn": core,
               "mha": lambda: mha(x, x, x, need_weights=False, attn_mask=mask),
               "block": lambda: layer(x, src_mask=mask)}
        return {k: timeit(fn, a.reps, a.warmup) for k, fn in fns.items()}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", help="path of attn-bench (default: build*/bench/attn-bench)")
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ff", type=int, default=0, help="0 -> 4d")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--n", default="256,512,1024,2048,4096")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--csv", help="also write the side-by-side table here")
    a = p.parse_args()
    a.ff = a.ff or 4 * a.d
    if a.d % a.heads:
        sys.exit(f"compare_torch.py: --heads {a.heads} does not divide --d {a.d}")
    bench = a.bench or find_bench(root)
    for var, val in (("OMP_NUM_THREADS", str(a.threads)),
                     ("OPENBLAS_NUM_THREADS", str(a.threads))):
        os.environ[var] = val
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    global torch, F
    import torch
    import torch.nn.functional as F
    ns = [int(s) for s in a.n.split(",")]
    dtype = torch.float32 if a.dtype == "f32" else torch.float64

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "attn.csv")
        cmd = [bench, "--d", str(a.d), "--heads", str(a.heads), "--ff", str(a.ff),
               "--batch", str(a.batch), "--dtype", a.dtype, "--threads", str(a.threads),
               "--reps", str(a.reps), "--warmup", str(a.warmup), "--n", a.n, "--csv", out]
        if a.causal:
            cmd.append("--causal")
        print("running:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as fh:
            rows = {int(r["n"]): r for r in csv.DictReader(fh)}

    torch.set_num_threads(a.threads)
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))  # loads the BLAS
    with open("/proc/self/maps") as fh:
        libs = {os.path.basename(l.split()[-1]) for l in fh if "openblas" in l or "mkl" in l}
    print(f"attn-bench vs PyTorch {torch.__version__} ({', '.join(sorted(libs)) or 'BLAS ?'}), "
          f"{a.threads} threads, d {a.d}, {a.heads} heads, F {a.ff}, batch {a.batch}, "
          f"{a.dtype}, {'causal' if a.causal else 'non-causal'}; median of {a.reps} "
          f"after {a.warmup} warm-up")
    print(f"{'n':>6}  {'part':<24} {'attn ms':>10} {'torch ms':>10} {'torch/attn':>10}")
    table = []
    for n in ns:
        t = torch_times(a, n, dtype)
        for key, name in PARTS:
            ours = float(rows[n][f"{key}_ms_median"])
            theirs = 1e3 * t[key]
            table.append((n, key, ours, theirs, theirs / ours))
            print(f"{n:>6}  {name:<24} {ours:>10.2f} {theirs:>10.2f} {theirs / ours:>10.2f}")
        sys.stdout.flush()
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["n", "part", "attn_ms", "torch_ms", "torch_over_attn"])
            w.writerows((n, k, f"{x:.4f}", f"{y:.4f}", f"{r:.4f}") for n, k, x, y, r in table)


if __name__ == "__main__":
    main()
