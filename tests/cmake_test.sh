#!/bin/sh
# SPDX-License-Identifier: MIT
# find_package(attn CONFIG) against an installed tree (examples/cmake), TAP:
#   1 meson install (with the Fortran module and attn_mpi when they can be built)
#   2 cmake configures examples/cmake with -DCMAKE_PREFIX_PATH=<prefix> and builds it
#   3 attn::attn: consumer runs    4 attn::attn_static: consumer_static runs
#   5 attn::fortran: sdpa_fortran runs    6 attn::mpi: ring_consumer runs on 2 ranks
#   7 find_package(attn 0.2) refuses 0.1 (docs/versioning.md)
src="$1"
. "$src/tests/install_util.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "1..7"
if ! have cmake || ! have pkg-config; then
  for i in 1 2 3 4 5 6 7; do echo "ok $i - CMake consumer # SKIP cmake or pkg-config not found"; done
  exit 0
fi
if install_attn "$src" "$tmp"; then
  echo "ok 1 - meson install into a temporary prefix"
else
  echo "not ok 1 - meson install"; for i in 2 3 4 5 6 7; do echo "ok $i # SKIP no install"; done
  exit 1
fi
opts=""
have_f=no; have_m=no
if have gfortran && [ -n "$(find "$tmp/prefix" -name attn-fortran.pc)" ]; then
  opts="$opts -DWITH_FORTRAN=ON"; have_f=yes
fi
if have mpirun && [ -n "$(find "$tmp/prefix" -name attn-mpi.pc)" ]; then
  opts="$opts -DWITH_MPI=ON"; have_m=yes
fi
rc=0
if cmake -S "$src/examples/cmake" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" $opts \
      >"$tmp/log" 2>&1 && cmake --build "$tmp/cm" >>"$tmp/log" 2>&1; then
  echo "ok 2 - cmake -S examples/cmake -DCMAKE_PREFIX_PATH=<prefix>$opts; cmake --build"
else
  sed 's/^/# /' "$tmp/log"; echo "not ok 2 - CMake consumer configure/build"; rc=1
fi
run() { # run <n> <description> <command...>
  n="$1"; what="$2"; shift 2
  if "$@" >"$tmp/out" 2>&1; then echo "ok $n - $what"
  else sed 's/^/# /' "$tmp/out"; echo "not ok $n - $what"; rc=1; fi
}
run 3 "attn::attn: consumer" "$tmp/cm/consumer"
if [ -x "$tmp/cm/consumer_static" ]; then
  run 4 "attn::attn_static: consumer_static" "$tmp/cm/consumer_static"
else
  echo "ok 4 - attn::attn_static # SKIP the BLAS and LAPACKE .pc files were not found"
fi
if [ $have_f = yes ]; then
  run 5 "attn::fortran: sdpa_fortran" "$tmp/cm/sdpa_fortran"
else
  echo "ok 5 - attn::fortran # SKIP gfortran not found or attn built without Fortran"
fi
if [ $have_m = yes ]; then
  run 6 "attn::mpi: ring_consumer on 2 ranks" env OMPI_ALLOW_RUN_AS_ROOT=1 \
      OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
      mpirun -np 2 "$tmp/cm/ring_consumer"
else
  echo "ok 6 - attn::mpi # SKIP mpirun not found or attn built without MPI"
fi
mkdir -p "$tmp/v02"
printf 'cmake_minimum_required(VERSION 3.14)\nproject(v LANGUAGES C)\nfind_package(attn 0.2 CONFIG REQUIRED)\n' \
  >"$tmp/v02/CMakeLists.txt"
if cmake -S "$tmp/v02" -B "$tmp/v02/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/log" 2>&1; then
  sed 's/^/# /' "$tmp/log"; echo "not ok 7 - find_package(attn 0.2) accepted $(pkg-config --modversion attn)"; rc=1
elif grep -q "compatible" "$tmp/log" && grep -q "not accepted" "$tmp/log"; then
  echo "ok 7 - find_package(attn 0.2) refuses $(pkg-config --modversion attn)"
else
  sed 's/^/# /' "$tmp/log"; echo "not ok 7 - find_package(attn 0.2) failed for another reason"; rc=1
fi
exit $rc
