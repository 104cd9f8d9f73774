#!/bin/sh
# SPDX-License-Identifier: MIT
# attn-host-bench in the four configurations of docs/benchmarks.md, "attn inside
# a host program": Debian's pthread and OpenMP OpenBLAS builds, quiet and with one
# core loaded by a spinning process. Run on an otherwise idle machine; 20 to 60
# minutes at the defaults. The environment is passed on as it is.
#
#   sh scripts/host-matrix.sh [OUTDIR] [attn-host-bench options]
#     (default OUTDIR bench-results/host, options --reps 21 --runs 9 --fresh-runs 15)
#
# Writes OUTDIR/{pthread,openmp}-{quiet,loaded}.{txt,json}; then
#   /usr/bin/python3 scripts/host_table.py OUTDIR [OUTDIR...]   (several: their medians)
# prints the markdown table.
set -e
cd "$(dirname "$0")/.."
out="${1:-bench-results/host}"
[ $# -gt 0 ] && shift
opts="${*:---reps 21 --runs 9 --fresh-runs 15}"
sh scripts/deps.sh # both OpenBLAS builds among them
[ -d build-release/meson-private ] || meson setup build-release --buildtype=release
meson compile -C build-release bench/attn-host-bench >/dev/null
mkdir -p "$out"
omp=/usr/lib/x86_64-linux-gnu/openblas-openmp
for variant in pthread openmp; do
  for load in quiet loaded; do
    spin=0; [ "$load" = loaded ] && spin=1
    lib=""; [ "$variant" = openmp ] && lib="$omp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "host-matrix: $variant $load" >&2
    # shellcheck disable=SC2086
    env ${lib:+LD_LIBRARY_PATH="$lib"} build-release/bench/attn-host-bench $opts \
      --spin "$spin" --json "$out/$variant-$load.json" >"$out/$variant-$load.txt"
    # the build the dynamic linker took, as the benchmark's header reports it
    if ! grep -q ", $variant threading," "$out/$variant-$load.txt"; then
      echo "host-matrix: $variant-$load ran with another OpenBLAS build:" >&2
      grep -m1 'BLAS:' "$out/$variant-$load.txt" >&2
      exit 1
    fi
  done
done
