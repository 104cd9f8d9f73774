#!/bin/sh
# SPDX-License-Identifier: MIT
# The Fortran module attn (docs/fortran.md), TAP:
#   1 fortran/attn_capi.f90 and the layout programs equal a fresh scripts/gen_fortran.py
#   2 every public function has its interface (no Python): attn_capi's with the C name,
#     attn_mpi's (headers that need <mpi.h>) through the MPI_Fint shim <name>_fint
#   3 every bind(c) type has C's size, field offsets and field sizes
#     (tests/fortran_abi.{c,f90}, and tests/fortran_abi_mpi.{c,f90} with MPI)
#   4-6 installed into a temporary prefix, examples/fortran/sdpa.f90 builds with
#       gfortran $(pkg-config --cflags --libs attn-fortran), shared and --static, and runs
#   7 the ```fortran program of docs/fortran.md builds and runs the same way
# usage: fortran_test.sh <src> <fortran_abi_c exe|none> <fortran_abi_f exe|none>
#                        [<fortran_abi_mpi_c exe> <fortran_abi_mpi_f exe>]
src="$1"; abi_c="$2"; abi_f="$3"; abi_mc="${4:-none}"; abi_mf="${5:-none}"
. "$src/tests/install_util.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "1..7"
rc=0

if ! have python3; then
  echo "ok 1 - generated module is current # SKIP python3 not found (scripts/gen_fortran.py)"
elif python3 "$src/scripts/gen_fortran.py" --check >"$tmp/gen" 2>&1; then
  echo "ok 1 - fortran/attn_capi.f90 equals a fresh scripts/gen_fortran.py"
else
  sed 's/^/# /' "$tmp/gen"; echo "not ok 1 - generated Fortran files are stale"; rc=1
fi

funcs() { cat "$@" | tr '\n' ' ' | sed 's/;/;\n/g' |
           sed -n 's/.*ATTN_API[^(]*[ *]\(attn_[a-z0-9_]*\) *(.*/\1/p' | grep -v '^attn__' | sort -u; }
plain=""; mpi=""
for h in "$src"/include/attn/*.h "$src"/include/attn/*.h.in; do
  [ -e "$h" ] || continue
  if grep -q '#include <mpi.h>' "$h"; then mpi="$mpi $h"; else plain="$plain $h"; fi
done
missing=""; n=0
for f in $(funcs $plain); do
  n=$((n + 1)); grep -q "name='$f')" "$src/fortran/attn_capi.f90" || missing="$missing $f"
done
if [ -n "$mpi" ]; then
  for f in $(funcs $mpi); do
    n=$((n + 1))
    grep -Eq "name='${f}(_fint)?'\)" "$src/fortran/attn_mpi.f90" || missing="$missing $f"
  done
fi
if [ -z "$missing" ]; then
  echo "ok 2 - all $n public functions have a Fortran interface"
else
  echo "not ok 2 - no Fortran interface for:$missing (rerun scripts/gen_fortran.py)"; rc=1
fi

if [ "$abi_c" = none ] || [ "$abi_f" = none ]; then
  echo "ok 3 - bind(c) layouts # SKIP attn was configured without Fortran (-Dfortran)"
elif "$abi_c" >"$tmp/c.txt" 2>&1 && "$abi_f" >"$tmp/f.txt" 2>&1 &&
     { [ "$abi_mc" = none ] || { "$abi_mc" >>"$tmp/c.txt" 2>&1 && "$abi_mf" >>"$tmp/f.txt" 2>&1; }; } &&
     [ -s "$tmp/c.txt" ] && diff "$tmp/c.txt" "$tmp/f.txt" >"$tmp/diff"; then
  echo "ok 3 - $(grep -c '\.' "$tmp/c.txt") field offsets and $(grep -vc '\.' "$tmp/c.txt") sizes agree with C"
else
  sed 's/^/# /' "$tmp/diff" "$tmp/f.txt" 2>/dev/null | head -n 40
  echo "not ok 3 - a bind(c) type differs from its C struct"; rc=1
fi

# meson points LD_LIBRARY_PATH at the suite's libattn for the two programs above (an
# ASan one in the sanitizer build); the installed consumers below must load their own
unset LD_LIBRARY_PATH
if ! have gfortran || ! have pkg-config; then
  why="gfortran or pkg-config not found"
  for i in 4 5 6 7; do echo "ok $i - installed module # SKIP $why"; done
  awk '/^```fortran$/{n++; f=1; next} /^```/{f=0} f && n == 1' "$src/docs/fortran.md" >"$tmp/doc.f90"
if [ -s "$tmp/doc.f90" ] &&
   (cd "$tmp" && gfortran -o doc_prog doc.f90 $(pkg-config --cflags --libs attn-fortran) \
      -Wl,-rpath,"$attn_libdir") >"$tmp/err" 2>&1 && "$tmp/doc_prog" >"$tmp/out" 2>&1; then
  echo "ok 7 - the program of docs/fortran.md builds and runs"
else
  sed 's/^/# /' "$tmp/err" "$tmp/out" 2>/dev/null; echo "not ok 7 - docs/fortran.md's program"; rc=1
fi
exit $rc
fi
if install_attn "$src" "$tmp" -Dmpi=disabled -Dfortran=enabled; then
  echo "ok 4 - meson install (Fortran module) into a temporary prefix"
else
  echo "not ok 4 - meson install into a temporary prefix"
  for i in 5 6 7; do echo "ok $i # SKIP no install"; done; exit 1
fi
prog="$src/examples/fortran/sdpa.f90"
if (cd "$tmp" && gfortran -o sdpa_shared "$prog" $(pkg-config --cflags --libs attn-fortran) \
      -Wl,-rpath,"$attn_libdir") >"$tmp/err" 2>&1 && "$tmp/sdpa_shared" >"$tmp/out" 2>&1; then
  echo "ok 5 - shared: gfortran sdpa.f90 \$(pkg-config --cflags --libs attn-fortran)"
else
  sed 's/^/# /' "$tmp/err" "$tmp/out" 2>/dev/null; echo "not ok 5 - shared"; rc=1
fi
if (cd "$tmp" && gfortran -static -o sdpa_static "$prog" \
      $(pkg-config --static --cflags --libs attn-fortran)) >"$tmp/err" 2>&1 &&
   "$tmp/sdpa_static" >"$tmp/out" 2>&1; then
  echo "ok 6 - static: gfortran -static sdpa.f90 \$(pkg-config --static --cflags --libs attn-fortran)"
else
  sed 's/^/# /' "$tmp/err" "$tmp/out" 2>/dev/null; echo "not ok 6 - static"; rc=1
fi
awk '/^```fortran$/{n++; f=1; next} /^```/{f=0} f && n == 1' "$src/docs/fortran.md" >"$tmp/doc.f90"
if [ -s "$tmp/doc.f90" ] &&
   (cd "$tmp" && gfortran -o doc_prog doc.f90 $(pkg-config --cflags --libs attn-fortran) \
      -Wl,-rpath,"$attn_libdir") >"$tmp/err" 2>&1 && "$tmp/doc_prog" >"$tmp/out" 2>&1; then
  echo "ok 7 - the program of docs/fortran.md builds and runs"
else
  sed 's/^/# /' "$tmp/err" "$tmp/out" 2>/dev/null; echo "not ok 7 - docs/fortran.md's program"; rc=1
fi
exit $rc
