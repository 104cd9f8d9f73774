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

--encoder: the block alone, forward and training step, on the weights as
PyTorch lays them out (attn-bench-encoder: attn sees in_proj_weight and the
(out, in) matrices through strides, so Q, K, V are one GEMM), against
nn.TransformerEncoderLayer(norm_first=True, activation="gelu", dropout=0):
  fwd    eval, no_grad (non-causal: torch's fused fast path; causal: its
         regular path, the fast path takes no src_mask in 1.13)
  train  the layer in train mode, out = layer(x); out.backward(dout) with x
         and every parameter requiring grad; attn: forward into the cache,
         then attn_encoder_backward with every gradient
  mha    nn.MultiheadAttention / attn_mha_forward, forward only
for T = 64..8192, causal and not, with --blas openmp|pthread putting both
sides on the same Debian OpenBLAS build (LD_LIBRARY_PATH, re-executing this
script), /proc/loadavg before and after, and --plot FILE.png (gnuplot).

Both sides run under the same thread environment, set before torch is
imported: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = --threads; everything
else is passed on as given. --tuned-env also sets, where unset,
OPENBLAS_THREAD_TIMEOUT=4 and OMP_WAIT_POLICY=PASSIVE (attn-bench
--tuned-env's settings; torch 1.13 here also mixes OpenMP with the pthread
OpenBLAS). --pairs K runs each --encoder row K times, attn then torch, and
takes each ratio as the median of the pairs' own ratios.
"""
import argparse
import csv
import ctypes
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

torch = F = None  # imported in main(), after the thread environment is set

DEFAULT_N = "256,512,1024,2048,4096"
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


def find_exe(root, name):
    for cand in [os.path.join(root, "build-release", "bench", name)] + sorted(
            glob.glob(os.path.join(root, "build*", "bench", name))):
        if os.access(cand, os.X_OK):
            return cand
    sys.exit(f"compare_torch.py: no {name} under build*/bench; build it (meson setup "
             "build-release --buildtype=release && meson compile -C build-release)")


def loadavg():
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def blas_info():
    """The BLAS libraries this process mapped, and OpenBLAS's kernel and threading."""
    with open("/proc/self/maps") as fh:
        paths = sorted({l.split()[-1] for l in fh if "openblas" in l or "mkl" in l})
    core = par = "?"
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
            par = {0: "sequential", 1: "pthread", 2: "openmp"}.get(lib.openblas_get_parallel(), "?")
            break
        except (OSError, AttributeError):
            continue
    return paths, core, par


def torch_encoder_times(a, n, causal):
    """Median seconds of torch's fwd, train step and MHA for sequence length n."""
    torch.manual_seed(0)
    d, h, f, b = a.d, a.heads, a.ff, a.batch
    layer = torch.nn.TransformerEncoderLayer(d, h, f, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
    x = torch.randn(b, n, d)
    mask = torch.triu(torch.full((n, n), float("-inf")), 1) if causal else None
    out = {}
    layer.eval()
    with torch.no_grad():
        out["fwd"] = timeit(lambda: layer(x, src_mask=mask), a.reps, a.warmup)
        out["mha"] = timeit(lambda: layer.self_attn(x, x, x, need_weights=False,
                                                    attn_mask=mask), a.reps, a.warmup)
    if a.train:
        layer.train()
        xg = x.clone().requires_grad_(True)
        dout = torch.randn(b, n, d)

        def step():
            layer(xg, src_mask=mask).backward(dout)
        out["train"] = timeit(step, a.reps, a.warmup)
    return out


def plot(rows, path):
    """Times against T (both sides, both masks) and torch/attn against T with the 1.15 line."""
    gp = shutil.which("gnuplot")
    if not gp:
        print("compare_torch.py: no gnuplot, no plot", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for causal in (0, 1):
            for key in ("fwd", "train"):
                fn = os.path.join(tmp, f"{key}{causal}.dat")
                with open(fn, "w") as fh:
                    for r in rows:
                        if r["causal"] == causal and r.get(f"torch_{key}"):
                            fh.write(f"{r['n']} {r['attn_' + key]} {r['torch_' + key]} "
                                     f"{r['ratio_' + key]}\n")
                files[key, causal] = fn
        script = ["set terminal pngcairo size 1200,900 font ',10'", f"set output '{path}'",
                  "set multiplot layout 2,2 title 'encoder block: attn vs PyTorch 1.13, "
                  "same OpenBLAS and threads'", "set grid", "set xlabel 'T'",
                  "set key top left", "set logscale x"]
        for key, title in (("fwd", "forward (inference)"), ("train", "training step")):
            f0, f1 = files[key, 0], files[key, 1]
            script += ["set logscale y", "set ylabel 'ms'", f"set title '{title}: time'",
                       f"plot '{f0}' using 1:2 with linespoints title 'attn', "
                       f"'' using 1:3 with linespoints title 'torch', "
                       f"'{f1}' using 1:2 with linespoints title 'attn causal', "
                       f"'' using 1:3 with linespoints title 'torch causal'"]
        for key, title in (("fwd", "forward"), ("train", "training step")):
            f0, f1 = files[key, 0], files[key, 1]
            script += ["unset logscale y", "set ylabel 'torch / attn'",
                       f"set title '{title}: torch time / attn time (above 1: attn faster)'",
                       f"plot '{f0}' using 1:4 with linespoints title 'no mask', "
                       f"'{f1}' using 1:4 with linespoints title 'causal', "
                       "1.15 with lines dashtype 2 title 'target 1.15', "
                       "1 with lines lc rgb 'gray' notitle"]
        script.append("unset multiplot")
        subprocess.run([gp], input="\n".join(script), text=True, check=True)


def pct(r, key, side="attn"):
    """A call's GFLOP/s against the in-run sgemm: attn's rate, scaled by attn's time over
    the side's (both sides do the same nominal FLOPs)."""
    if key == "train":  # nominal: three times the forward's FLOPs (dx and dW per GEMM)
        return 3 * pct(r, "fwd") * r["attn_fwd"] / r[f"{side}_train"]
    rate = r["fwd_rate" if key == "fwd" else "mha_rate"]
    return 100 * rate * r[f"attn_{key}"] / r[f"{side}_{key}"] / r["gemm"]


def encoder_pair(a, bench, n, causal):
    """One attn run then one torch run of row (n, causal): times in ms, rates, load."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "enc.csv")
        cmd = [bench, "--d", str(a.d), "--heads", str(a.heads), "--ff", str(a.ff),
               "--batch", str(a.batch), "--threads", str(a.threads),
               "--reps", str(a.reps), "--warmup", str(a.warmup), "--n", str(n),
               "--csv", out]
        cmd += ["--causal"] if causal else []
        cmd += [] if a.train else ["--no-train"]
        print("running:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        with open(out) as fh:
            o = {int(r["n"]): r for r in csv.DictReader(fh)}[n]
    t = torch_encoder_times(a, n, causal)
    r = {"gemm": float(o["gemm_gflops"]),
         "attn_fwd": float(o["fwd_ms"]), "torch_fwd": 1e3 * t["fwd"],
         "attn_mha": float(o["mha_ms"]), "torch_mha": 1e3 * t["mha"],
         "fwd_rate": float(o["fwd_gflops"]), "mha_rate": float(o["mha_gflops"]),
         "attn_train": float(o["train_ms"]) if a.train else 0.0,
         "torch_train": 1e3 * t["train"] if a.train else 0.0,
         "attn_bwd": float(o["bwd_ms"]) if a.train else 0.0,
         "load": float(loadavg().split()[0])}
    print(f"  T {n} {'causal' if causal else 'non-causal'} done", file=sys.stderr)
    return r


def encoder_main(a, root):
    bench = a.bench or find_exe(root, "attn-bench-encoder")
    global torch
    import torch  # noqa: F811 (after the thread environment is set)
    torch.set_num_threads(a.threads)
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))  # loads the BLAS
    paths, core, par = blas_info()
    load0 = loadavg()
    rows = []
    modes = {"no": [0], "yes": [1], "both": [0, 1]}[a.causal_mode]
    for causal in modes:
        # one T at a time, attn then torch (--pairs times), so that a machine whose
        # load or speed drifts during the run falls on both sides of a row alike
        for n in [int(s) for s in a.n.split(",")]:
            pairs = [encoder_pair(a, bench, n, causal) for _ in range(a.pairs)]
            r = {k: statistics.median(p[k] for p in pairs) for k in pairs[0]}
            # each ratio is the median over pairs of that pair's own ratio: a drift of the
            # machine between pairs falls on both sides of each
            for key in ("fwd", "train", "mha"):
                if r[f"attn_{key}"] > 0:
                    r[f"ratio_{key}"] = statistics.median(p[f"torch_{key}"] / p[f"attn_{key}"]
                                                          for p in pairs)
            r["n"], r["causal"], r["pairs"] = n, causal, a.pairs
            rows.append(r)
    load1 = loadavg()
    print(f"attn vs PyTorch {torch.__version__}: encoder block, d {a.d}, {a.heads} heads, "
          f"F {a.ff}, B {a.batch}, f32, pre-norm, GELU erf; {a.threads} threads both sides; "
          f"OpenBLAS {par}, kernel {core} ({', '.join(sorted({os.path.dirname(p) for p in paths}))}); "
          f"median of {a.reps} after {a.warmup} warm-up, {a.pairs} attn/torch pair(s) per row; "
          f"loadavg {load0} before, {load1} after")
    env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                   if k.startswith(("OMP_", "OPENBLAS_", "GOMP_")))
    print(f"environment: {env}")
    print("torch/attn > 1: attn faster. block/mha %: GFLOP/s of the call against the in-run "
          "2048^3 sgemm, attn's then torch's (the block's nominal FLOPs over each side's time; "
          "training: three times the forward's); "
          "load: 1-minute loadavg as the row finished (this run's own 2 threads included)")
    hdr = (f"{'T':>5} {'mask':>6} | {'fwd attn':>9} {'torch':>9} {'t/a':>5} | "
           f"{'train attn':>10} {'torch':>9} {'t/a':>5} | {'train% a':>8} {'t':>4} | {'bwd/fwd':>7} | {'mha attn':>9} "
           f"{'torch':>9} {'t/a':>5} | {'block% a':>8} {'t':>4} | {'mha% a':>6} {'t':>4} | {'load':>5}")
    print(hdr)
    for r in rows:
        tr = (f"{r['attn_train']:>10.2f} {r['torch_train']:>9.2f} "
              f"{r['ratio_train']:>5.2f} | {pct(r, 'train'):>7.0f}% "
              f"{pct(r, 'train', 'torch'):>3.0f}%" if a.train else f"{'-':>26} | {'-':>13}")
        bf = r["attn_bwd"] / r["attn_fwd"] if a.train else 0.0
        print(f"{r['n']:>5} {'causal' if r['causal'] else 'none':>6} | {r['attn_fwd']:>9.2f} "
              f"{r['torch_fwd']:>9.2f} {r['ratio_fwd']:>5.2f} | {tr} | "
              f"{bf:>7.2f} | {r['attn_mha']:>9.2f} {r['torch_mha']:>9.2f} "
              f"{r['ratio_mha']:>5.2f} | {pct(r, 'fwd'):>7.0f}% "
              f"{pct(r, 'fwd', 'torch'):>3.0f}% | {pct(r, 'mha'):>5.0f}% "
              f"{pct(r, 'mha', 'torch'):>3.0f}% | {r['load']:>5.2f}")
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    if a.plot:
        plot(rows, a.plot)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", help="path of attn-bench (default: build*/bench/attn-bench)")
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ff", type=int, default=0, help="0 -> 4d")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--n", default=DEFAULT_N)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--csv", help="also write the side-by-side table here")
    p.add_argument("--encoder", action="store_true",
                   help="the block forward and training step (attn-bench-encoder), see above")
    p.add_argument("--causal-mode", choices=["no", "yes", "both"], default="both",
                   help="--encoder: which masks (both)")
    p.add_argument("--no-train", dest="train", action="store_false",
                   help="--encoder: forward only")
    p.add_argument("--blas", choices=["openmp", "pthread"],
                   help="run both sides on Debian's OpenBLAS build of that threading "
                        "(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-<blas>)")
    p.add_argument("--plot", help="--encoder: a PNG of time against T (gnuplot)")
    p.add_argument("--tuned-env", action="store_true",
                   help="set OPENBLAS_THREAD_TIMEOUT=4 and OMP_WAIT_POLICY=PASSIVE where unset "
                        "(attn-bench --tuned-env's settings); by default both sides run in the "
                        "environment they are given, as a user's program does")
    p.add_argument("--pairs", type=int, default=1,
                   help="--encoder: run each row this many times, attn then torch; times are "
                        "medians over the pairs, ratios the median of each pair's ratio")
    a = p.parse_args()
    a.ff = a.ff or 4 * a.d
    if a.d % a.heads:
        sys.exit(f"compare_torch.py: --heads {a.heads} does not divide --d {a.d}")
    if a.blas:
        want = f"/usr/lib/x86_64-linux-gnu/openblas-{a.blas}"
        if os.environ.get("LD_LIBRARY_PATH", "").split(":")[0] != want:
            env = dict(os.environ)
            env["LD_LIBRARY_PATH"] = want + (":" + env["LD_LIBRARY_PATH"]
                                             if env.get("LD_LIBRARY_PATH") else "")
            os.execve(sys.executable, [sys.executable] + sys.argv, env)
    for var, val in (("OMP_NUM_THREADS", str(a.threads)),
                     ("OPENBLAS_NUM_THREADS", str(a.threads))):
        os.environ[var] = val
    if a.tuned_env:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if a.encoder:
        if a.n == DEFAULT_N:
            a.n = "64,128,256,512,1024,2048,4096,8192"
        return encoder_main(a, root)
    bench = a.bench or find_bench(root)
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
