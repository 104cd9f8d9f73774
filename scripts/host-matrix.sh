#!/bin/sh
# SPDX-License-Identifier: MIT
# attn-host-bench with both of Debian's OpenBLAS builds (pthread, the default, and
# OpenMP), and optionally against other libattn builds in the same run, alternating,
# so that their figures share the machine's state (docs/benchmarks.md "Inside a host
# program"). Run on a quiet machine; the environment is passed on as it is.
#
#   sh scripts/host-matrix.sh [OUTDIR] [LIBDIR...]
#     OUTDIR  default bench-results/host
#     LIBDIR  the src/ directory of another build of attn (its libattn.so), e.g. of an
#             earlier commit; "this" (the default) is this tree's build-release
#   ATTN_HOST_REPS (default 21) rounds per run, ATTN_HOST_RUNS (default 2) runs each.
#
# Writes OUTDIR/<build>-<lib>-<run>.{txt,json}.
set -e
cd "$(dirname "$0")/.."
out="${1:-bench-results/host}"
[ $# -gt 0 ] && shift
libs="this $*"
sh scripts/deps.sh # both OpenBLAS builds among them
[ -d build-release/meson-private ] || meson setup build-release --buildtype=release
meson compile -C build-release bench/attn-host-bench >/dev/null
mkdir -p "$out"
omp=/usr/lib/x86_64-linux-gnu/openblas-openmp
for run in $(seq "${ATTN_HOST_RUNS:-2}"); do
  for variant in pthread openmp; do
    j=0
    for lib in $libs; do
      j=$((j + 1))
      dir=""; [ "$lib" != this ] && dir="$lib"
      [ "$variant" = openmp ] && dir="$omp${dir:+:$dir}"
      name="$variant-lib$j-$run"; [ "$lib" = this ] && name="$variant-this-$run"
      echo "host-matrix: $variant, libattn from ${lib}, run $run" >&2
      env ${dir:+LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"} \
        build-release/bench/attn-host-bench --reps "${ATTN_HOST_REPS:-21}" \
        --json "$out/$name.json" > "$out/$name.txt"
    done
  done
done
echo "host-matrix: results in $out" >&2
