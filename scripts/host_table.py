#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The markdown table of docs/benchmarks.md "attn inside a host program" from
scripts/host-matrix.sh's four JSON files: default ms / tuned ms (medians) and
default / best (the median of the runs' paired ratios) per cell, bold above the
1.1x target, then the fresh-process shares (each process's T 256 rate against
its own T 1024 rate, median over the processes, with their quartiles).

    /usr/bin/python3 scripts/host_table.py OUTDIR [OUTDIR...]

With several OUTDIRs (matrices run one after the other) every figure is the
median over the matrices, each fresh share followed by the matrices' own, and
a line per matrix gives its own count of cells within 1.1x.
"""
import json
import os
import statistics
import sys

CONFIGS = [("pthread", "quiet"), ("pthread", "loaded"), ("openmp", "quiet"), ("openmp", "loaded")]
CALLS = [("sdpa_b2b", "attn_sdpa, back to back"),
         ("sdpa_int", "attn_sdpa, between host sgemms"),
         ("enc_b2b", "attn_encoder_forward, back to back"),
         ("enc_int", "attn_encoder_forward, between host sgemms"),
         ("host_after", "host sgemm 1024^3 right after attn")]


def ratio(r):
    """default / best: the median of the runs' paired ratios (attn-host-bench
    since 3 December 2026), else the ratio of the medians (older files)."""
    d, t = r["default_ms"], r["tuned_ms"]
    if d is None or t is None:
        return None
    return r["ratio"] if r.get("ratio") is not None else d / min(d, t)


def cell(r):
    x = ratio(r)
    if x is None:
        return "not measured"
    s = f"{r['default_ms']:.3g} / {r['tuned_ms']:.3g}: {x:.2f}x"
    return f"**{s}**" if x > 1.1 else s


def load(outdir):
    return {c: json.load(open(os.path.join(outdir, f"{c[0]}-{c[1]}.json"))) for c in CONFIGS}


def merged(rs):
    """One cell from the same cell of several matrices: the medians of their
    figures (one matrix: its own)."""
    if len(rs) == 1:
        return rs[0]
    xs = [ratio(r) for r in rs]
    if any(x is None for x in xs):
        return {"default_ms": None, "tuned_ms": None}
    return {"default_ms": statistics.median(r["default_ms"] for r in rs),
            "tuned_ms": statistics.median(r["tuned_ms"] for r in rs),
            "ratio": statistics.median(xs)}


def fresh_share(run, env):
    f = run.get("fresh") or {}
    a, b = f.get(f"{env}_t256_gflops"), f.get(f"{env}_t1024_gflops")
    return f.get(f"{env}_share") or (a / b if a and b else None)


def summary(run):
    """(cells within 1.1x, cells, worst ratio) of one matrix."""
    xs = [ratio(r) for c in CONFIGS for r in run[c]["results"] if r["call"] != "host_after"]
    xs = [x for x in xs if x is not None]
    return sum(x <= 1.1 for x in xs), len(xs), max(xs, default=1.0)


def main(outdirs):
    matrices = [load(d) for d in outdirs]
    runs = matrices[0]
    first = runs[CONFIGS[0]]["environment"]
    print(f"<!-- {first['cpu']}; {first['blas_config']}; kernel {first['blas_corename']}; "
          f"environment: {first['env'] or 'none'} -->")
    print("| call | T | " + " | ".join(f"{'OpenMP' if v == 'openmp' else v} {l}"
                                       for v, l in CONFIGS) + " |")
    print("| --- | ---: |" + " ---: |" * len(CONFIGS))
    worst, over, n = 1.0, 0, 0
    for key, name in CALLS:
        ts = sorted({r["T"] for r in runs[CONFIGS[0]]["results"] if r["call"] == key})
        for t in ts:
            cells = []
            for c in CONFIGS:
                r = merged([next(r for r in m[c]["results"] if r["call"] == key and r["T"] == t)
                              for m in matrices])
                cells.append(cell(r))
                x = ratio(r)
                if key != "host_after" and x is not None:
                    worst, n = max(worst, x), n + 1
                    over += x > 1.1
            print(f"| {name} | {t} | " + " | ".join(cells) + " |")
    print()
    print("| fresh process: T 256 / T 1024 | " + " | ".join(
        f"{'OpenMP' if v == 'openmp' else v} {l}" for v, l in CONFIGS) + " |")
    print("| --- |" + " ---: |" * len(CONFIGS))
    for env in ("default", "tuned"):
        vals = []
        for c in CONFIGS:
            shares = [fresh_share(m[c], env) for m in matrices]
            if any(x is None for x in shares):
                vals.append("not measured")
            elif len(matrices) > 1:
                each = " / ".join(f"{100 * x:.1f}" for x in shares)
                vals.append(f"{100 * statistics.median(shares):.1f}% ({each})")
            else:
                f = runs[c].get("fresh") or {}
                q1, q3 = f.get(f"{env}_share_q1"), f.get(f"{env}_share_q3")
                spread = f" ({100 * q1:.0f}-{100 * q3:.0f})" if q1 and q3 else ""
                vals.append(f"{100 * shares[0]:.1f}%{spread}")
        print(f"| {env} | " + " | ".join(vals) + " |")
    print(f"\n{n - over} of {n} attn cells within 1.1x; worst {worst:.2f}x")
    if len(matrices) > 1:
        for d, m in zip(outdirs, matrices):
            k, total, w = summary(m)
            print(f"- {d} alone: {k} of {total} within 1.1x; worst {w:.2f}x")
    wrong = []
    for d, m in zip(outdirs, matrices):
        for c in CONFIGS:
            r = m[c]
            print(f"- {d}, {c[0]} {c[1]}: {r['environment']['date']}, kernel "
                  f"{r['environment']['blas_corename']}, {r['environment']['blas_threading']}, "
                  f"load average {r['load_before']} before, {r['load_after']} after")
            if r["environment"]["blas_threading"] != c[0]:
                wrong.append(f"{d} {c[0]} {c[1]}")
    if wrong:  # a column that measured another build than its heading says
        sys.exit("host_table: measured with another OpenBLAS build: " + ", ".join(wrong))


if __name__ == "__main__":
    main(sys.argv[1:] or ["bench-results/host"])
