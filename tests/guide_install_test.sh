#!/bin/sh
# SPDX-License-Identifier: MIT
# docs/guide.md "Install and link" pasted into a shell as written, TAP:
#   1 the section's ```sh blocks are found
#   2 they run without an error (sh -e -x) in a fresh copy of the source tree, with
#     HOME a temporary folder, so the prefix "$HOME/.local" is temporary too: the
#     install, then the C (shared, static), C++, Fortran, CMake and meson-subproject
#     consumers the section builds and runs
#   3 the prefix holds what the section says is installed
# Skipped when a tool the section uses is missing, or when scripts/deps.sh would have
# to install Debian packages (this test never installs any: apt-get and sudo are
# stubbed out for it).
src="$1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "1..3"
missing=""
for t in cc c++ gfortran cmake pkg-config meson ninja; do
  command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
done
if [ -n "$missing" ]; then
  for i in 1 2 3; do echo "ok $i - guide install section # SKIP not found:$missing"; done
  exit 0
fi
awk '/^## /{sec = ($0 == "## Install and link")} sec && /^```sh$/{f=1; next} /^```/{f=0} f' \
    "$src/docs/guide.md" >"$tmp/section.sh"
nlines=$(grep -c . "$tmp/section.sh")
if [ "$nlines" -gt 5 ]; then
  echo "ok 1 - $nlines lines of shell in the guide's Install and link section"
else
  echo "not ok 1 - no shell blocks in docs/guide.md \"## Install and link\""; exit 1
fi
# a fresh copy of the tree, as a clone would be (no build folders, no .git)
mkdir -p "$tmp/attn" "$tmp/home" "$tmp/stub"
for f in "$src"/* "$src"/.[!.]*; do
  case "$(basename "$f")" in
    build*|.git|bench-results|attn-out|subprojects) ;;
    *) cp -R "$f" "$tmp/attn/" ;;
  esac
done
for s in apt-get sudo; do
  printf '#!/bin/sh\necho "guide_install_test: would run %s $*" >&2\nexit 97\n' "$s" >"$tmp/stub/$s"
  chmod +x "$tmp/stub/$s"
done
if ! (cd "$tmp/attn" && PATH="$tmp/stub:$PATH" sh scripts/deps.sh) >"$tmp/deps" 2>&1; then
  why=$(grep -o 'installing Debian packages:.*' "$tmp/deps" | head -n1)
  echo "ok 2 - the section runs as written # SKIP scripts/deps.sh would install packages ($why)"
  echo "ok 3 - installed files # SKIP"
  exit 0
fi
if (cd "$tmp/attn" && env -u PKG_CONFIG_PATH -u CMAKE_PREFIX_PATH -u LD_LIBRARY_PATH \
      HOME="$tmp/home" PATH="$tmp/stub:$PATH" sh -e -x "$tmp/section.sh") >"$tmp/log" 2>&1; then
  echo "ok 2 - the section runs as written: install, C, C++, Fortran, CMake, meson subproject"
  rc=0
else
  tail -n 60 "$tmp/log" | sed 's/^/# /'; echo "not ok 2 - the guide's install section failed"
  echo "ok 3 - installed files # SKIP"; exit 1
fi
p="$tmp/home/.local"
absent=""
for f in bin/attn-bench lib/pkgconfig/attn.pc lib/pkgconfig/attn-fortran.pc \
         lib/cmake/attn/attnConfig.cmake lib/cmake/attn/attnConfigVersion.cmake \
         include/attn/attn.h lib/libattn.a lib/libattn.so.0; do
  [ -e "$p/$f" ] || absent="$absent $f"
done
if [ -z "$absent" ]; then
  echo "ok 3 - the prefix holds attn-bench, attn.pc, attn-fortran.pc, the CMake package, headers, libraries"
else
  find "$p" | sed 's/^/# /'; echo "not ok 3 - not installed:$absent"; exit 1
fi
