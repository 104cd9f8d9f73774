#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build, and run attn's main job: the sequence-length benchmark sweep
# (until attn-bench lands: the demo program).
set -e
cd "$(dirname "$0")/.."
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Haswell}"
sh scripts/deps.sh
[ -d build-release/meson-private ] || meson setup build-release --buildtype=release
meson setup --reconfigure build-release >/dev/null
meson compile -C build-release
if [ -x build-release/bench/attn-bench ]; then
  exec build-release/bench/attn-bench --quick --csv bench-results/sweep.csv \
       --plot bench-results/sweep.png "$@"
fi
exec build-release/examples/consumer
