#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The markdown table of docs/benchmarks.md "attn inside a host program" from
scripts/host-matrix.sh's four JSON files: default ms / tuned ms (medians) and
default / best (the median of the runs' paired ratios) per cell, bold above the
1.1x target, then the fresh-process shares (each process's T 256 rate against
its own T 1024 rate, median over the processes).

    /usr/bin/python3 scripts/host_table.py OUTDIR
"""
import json
import os
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


def main(outdir):
    runs = {c: json.load(open(os.path.join(outdir, f"{c[0]}-{c[1]}.json"))) for c in CONFIGS}
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
                r = next(r for r in runs[c]["results"] if r["call"] == key and r["T"] == t)
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
            f = runs[c].get("fresh") or {}
            a, b = f.get(f"{env}_t256_gflops"), f.get(f"{env}_t1024_gflops")
            share = f.get(f"{env}_share") or (a / b if a and b else None)
            q1, q3 = f.get(f"{env}_share_q1"), f.get(f"{env}_share_q3")
            spread = f" ({100 * q1:.0f}-{100 * q3:.0f})" if q1 and q3 else ""
            vals.append("not measured" if not share else f"{100 * share:.1f}%{spread}")
        print(f"| {env} | " + " | ".join(vals) + " |")
    print(f"\n{n - over} of {n} attn cells within 1.1x; worst {worst:.2f}x")
    wrong = []
    for c in CONFIGS:
        r = runs[c]
        print(f"- {c[0]} {c[1]}: {r['environment']['date']}, kernel "
              f"{r['environment']['blas_corename']}, {r['environment']['blas_threading']}, "
              f"load average {r['load_before']} before, {r['load_after']} after")
        if r["environment"]["blas_threading"] != c[0]:
            wrong.append(f"{c[0]} {c[1]}")
    if wrong:  # a column that measured another build than its heading says
        sys.exit("host_table: measured with another OpenBLAS build: " + ", ".join(wrong))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench-results/host")
