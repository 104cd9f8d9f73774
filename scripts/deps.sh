#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages attn builds and tests with, when any is missing.
set -e
pkgs="gcc g++ gfortran cmake meson ninja-build pkg-config libopenblas-dev liblapacke-dev check gnuplot-nox libjansson-dev
      libopenblas0-pthread libopenblas0-openmp
      libopenmpi-dev openmpi-bin $*"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "attn: installing Debian packages:$missing" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
