#!/bin/sh
# SPDX-License-Identifier: MIT
# Only the public API in the dynamic symbol tables: attn_[a-z0-9]* in libattn.so (and
# the internals src/attn.map names for libattn_mpi), attn_ring_* in libattn_mpi.so (no
# other attn__ internals, no ifunc resolvers), and libattn_mpi.so needs libattn.so. TAP.
#   sh symbols_test.sh <build dir>
build="$1"
n=0; fail=0
check() { # <library> <allowed regex>
  n=$((n + 1))
  if [ ! -f "$1" ]; then echo "ok $n - $(basename "$1") # SKIP not built"; return; fi
  bad=$(nm -D --defined-only "$1" | awk '{print $3}' | grep -v -E "$2")
  if [ -z "$bad" ]; then
    echo "ok $n - $(basename "$1"): $(nm -D --defined-only "$1" | wc -l) symbols, all public"
  else
    echo "not ok $n - $(basename "$1") exports non-public symbols:"; echo "$bad" | sed 's/^/# /'
    fail=1
  fi
}
for_mpi=$(grep -o 'attn__[a-z0-9_]*;' "$(dirname "$0")/../src/attn.map" | tr -d ';' | paste -sd'|')
check "$build/src/libattn.so" "^(attn_[a-z0-9][a-z0-9_]*|$for_mpi)\$"
check "$build/src/ring/libattn_mpi.so" '^attn_ring_[a-z0-9_]*$'
n=$((n + 1))
if [ ! -f "$build/src/ring/libattn_mpi.so" ]; then echo "ok $n - libattn_mpi.so needs libattn.so # SKIP not built"
elif readelf -d "$build/src/ring/libattn_mpi.so" | grep -q 'NEEDED.*\[libattn\.so'; then
  echo "ok $n - libattn_mpi.so needs libattn.so (one copy of the internals)"
else echo "not ok $n - libattn_mpi.so does not need libattn.so"; fail=1; fi
echo "1..$n"
exit $fail
