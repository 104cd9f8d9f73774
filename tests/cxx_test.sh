#!/bin/sh
# SPDX-License-Identifier: MIT
# attn from C++ (docs/guide.md, "From C++"), TAP:
#   1 every ```cpp block of docs/guide.md appears, up to white space, in examples/cxx/guide.cpp
#   2 meson install into a temporary prefix
#   3 examples/cxx/guide.cpp compiles as C++17 with -Wall -Wextra -pedantic -Werror
#     against the installed attn ($(pkg-config --cflags --libs attn)) and runs
#   4 the installed umbrella header compiles as C++11, C++14 and C++20 too
src="$1"
. "$src/tests/install_util.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "1..4"
squash() { tr -d ' \t\n'; }
prog="$src/examples/cxx/guide.cpp"
awk -v dir="$tmp" '/^```cpp$/{n++; f=1; next} /^```/{f=0} f{print > (dir "/block" n)}' \
    "$src/docs/guide.md"
squash <"$prog" >"$tmp/prog"
nb=0; bad=""
for b in "$tmp"/block*; do
  [ -e "$b" ] || continue
  nb=$((nb + 1))
  grep -qF -- "$(squash <"$b")" "$tmp/prog" || bad="$bad $(head -n1 "$b" | cut -c1-50)"
done
rc=0
if [ $nb -gt 0 ] && [ -z "$bad" ]; then
  echo "ok 1 - $nb C++ block(s) of docs/guide.md are in examples/cxx/guide.cpp"
else
  echo "not ok 1 - guide C++ blocks ($nb) not in examples/cxx/guide.cpp:$bad"; rc=1
fi
CXX="${CXX:-c++}"
if ! have "$CXX" || ! have pkg-config; then
  for i in 2 3 4; do echo "ok $i - C++ consumer # SKIP $CXX or pkg-config not found"; done
  exit $rc
fi
if install_attn "$src" "$tmp" -Dmpi=disabled -Dfortran=disabled; then
  echo "ok 2 - meson install into a temporary prefix"
else
  echo "not ok 2 - meson install"; echo "ok 3 # SKIP no install"; echo "ok 4 # SKIP no install"
  exit 1
fi
if "$CXX" -std=c++17 -Wall -Wextra -pedantic -Werror -o "$tmp/guide_cpp" "$prog" \
      $(pkg-config --cflags --libs attn) -Wl,-rpath,"$attn_libdir" >"$tmp/err" 2>&1 &&
   "$tmp/guide_cpp" >"$tmp/out" 2>&1; then
  echo "ok 3 - c++ -std=c++17 -Wall -Wextra -pedantic -Werror guide.cpp: $(cat "$tmp/out")"
else
  sed 's/^/# /' "$tmp/err" "$tmp/out" 2>/dev/null; echo "not ok 3 - the guide's C++ as C++17"; rc=1
fi
printf '#include <attn/attn.h>\nint main() { return attn_version_number() > 0 ? 0 : 1; }\n' >"$tmp/h.cpp"
bad=""
for std in c++11 c++14 c++20; do
  "$CXX" -std=$std -Wall -Wextra -pedantic -Werror -fsyntax-only "$tmp/h.cpp" \
      $(pkg-config --cflags attn) >"$tmp/err" 2>&1 || { sed 's/^/# /' "$tmp/err"; bad="$bad $std"; }
done
if [ -z "$bad" ]; then
  echo "ok 4 - attn/attn.h compiles as C++11, C++14, C++20 (-pedantic -Werror)"
else
  echo "not ok 4 - attn/attn.h does not compile as:$bad"; rc=1
fi
exit $rc
