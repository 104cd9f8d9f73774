#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up everything a fresh Debian machine needs, build attn, run the whole test suite.
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
[ -d build/meson-private ] || meson setup build --buildtype=debugoptimized
meson setup --reconfigure build >/dev/null
meson compile -C build
meson test -C build --print-errorlogs "$@"
