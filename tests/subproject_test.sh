#!/bin/sh
# SPDX-License-Identifier: MIT
# attn as a meson subproject of a parent that says only dependency('attn')
# (examples/subproject), TAP:
#   1 the parent configures, attn coming from subprojects/attn (override_dependency)
#   2 the parent's `meson test --list` is the parent's own tests (C, and Fortran through
#     dependency('attn-fortran') when gfortran is found), none of attn's
#   3 no attn test, example or benchmark is among the parent's build targets
#   4 the parent builds and its test passes
#   5 `meson install` installs only attn's libraries, headers, Fortran modules and .pc files
#   6 a parent that asks (-Dattn:examples=true) gets attn's examples
src="$1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "1..6"
p="$tmp/parent"
cp -r "$src/examples/subproject" "$p"
mkdir -p "$p/subprojects"
ln -s "$src" "$p/subprojects/attn"
# --force-fallback-for: the subproject even if some attn is installed on this machine
if meson setup "$p/build" "$p" --force-fallback-for=attn >"$tmp/log" 2>&1 &&
   grep -q "Dependency attn found: YES .*(overridden)" "$tmp/log"; then
  echo "ok 1 - parent configures with dependency('attn') from subprojects/attn"
else
  sed 's/^/# /' "$tmp/log"; echo "not ok 1 - parent configure"
  for i in 2 3 4 5 6; do echo "ok $i # SKIP not configured"; done; exit 1
fi
rc=0
listed=$(meson test -C "$p/build" --list 2>/dev/null | grep -v "^ninja:")
want="parent"
command -v gfortran >/dev/null 2>&1 && want="parent
parent_fortran"
if [ "$listed" = "$want" ]; then
  echo "ok 2 - meson test --list is the parent's own: $(echo $listed)"
else
  echo "$listed" | sed 's/^/# /'; echo "not ok 2 - the parent's meson test lists attn's tests"; rc=1
fi
meson introspect "$p/build" --targets >"$tmp/targets.json"
bad=$(grep -o '"name": "[^"]*"' "$tmp/targets.json" | sed 's/"name": //; s/"//g' |
      grep -E '^(test_|attn-bench|example|consumer|guide_|fortran_(sdpa|encoder|abi)|readme|train_copy)' |
      tr '\n' ' ')
ntargets=$(grep -o '"name": "[^"]*"' "$tmp/targets.json" | wc -l)
if [ -z "$bad" ]; then
  echo "ok 3 - $ntargets build targets, none of them an attn test, example or benchmark"
else
  echo "not ok 3 - attn's own targets built in the parent: $bad"; rc=1
fi
if meson test -C "$p/build" >"$tmp/log" 2>&1; then
  echo "ok 4 - the parent builds and its tests pass"
else
  sed 's/^/# /' "$tmp/log"; cat "$p/build/meson-logs/testlog.txt" 2>/dev/null | sed 's/^/# /' | tail -n 20
  echo "not ok 4 - the parent's test"; rc=1
fi
if DESTDIR="$tmp/dest" meson install -C "$p/build" >"$tmp/log" 2>&1; then
  (cd "$tmp/dest" && find . -type f -o -type l) | sort >"$tmp/files"
  extra=$(grep -vE '/include/attn/[a-z0-9_]+\.h$|/include/attn/fortran/[^/]+/[a-z0-9_]+\.mod$|/lib[^/]*(/[^/]+)?/libattn(_mpi|_fortran|_fortran_mpi)?\.(a|so[.0-9]*)$|/pkgconfig/attn(-mpi|-fortran|-fortran-mpi)?\.pc$' "$tmp/files" | tr '\n' ' ')
  if [ -z "$extra" ] && grep -q '/attn\.pc$' "$tmp/files" && grep -q '/attn/attn\.h$' "$tmp/files"; then
    echo "ok 5 - meson install: $(wc -l <"$tmp/files") files, only attn's libraries, headers, modules and .pc files"
  else
    sed 's/^/# /' "$tmp/files"; echo "not ok 5 - the parent installs more of attn than its library:$extra"; rc=1
  fi
else
  sed 's/^/# /' "$tmp/log"; echo "not ok 5 - meson install"; rc=1
fi
if meson setup "$p/build2" "$p" --force-fallback-for=attn -Dattn:examples=true >"$tmp/log" 2>&1 &&
   meson introspect "$p/build2" --targets | grep -q '"name": "guide_sdpa"'; then
  echo "ok 6 - -Dattn:examples=true: the parent gets attn's examples when it asks"
else
  sed 's/^/# /' "$tmp/log" | tail -n 20; echo "not ok 6 - -Dattn:examples=true"; rc=1
fi
exit $rc
