#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build, and run attn's main job: the sequence-length benchmark sweep
# (attn-bench --quick: d 256 and 768, causal or not, under two minutes on 2 cores;
# docs/benchmarks.md explains the output).
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
[ -d build-release/meson-private ] || meson setup build-release --buildtype=release
meson setup --reconfigure build-release >/dev/null
meson compile -C build-release
mkdir -p bench-results
exec build-release/bench/attn-bench --quick --csv bench-results/sweep.csv \
     --json bench-results/sweep.json --plot bench-results/sweep.png "$@"
