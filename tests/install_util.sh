# SPDX-License-Identifier: MIT
# Sourced by the install tests (fortran_test.sh, cmake_test.sh, cxx_test.sh):
#   install_attn <src> <dir> [meson options]
# configures attn from <src> into <dir>/build (its own build: never the suite's,
# so an ASan suite still installs a plain library), installs it into <dir>/prefix,
# and sets PKG_CONFIG_PATH and attn_libdir. On failure it prints the log as TAP
# comments and returns 1. Nothing is installed outside <dir>. A debug build (-O0):
# these tests check packaging and linking, and -O0 compiles in a quarter of the time.
install_attn() {
  _src="$1"; _dir="$2"; shift 2
  if meson setup "$_dir/build" "$_src" --prefix="$_dir/prefix" --buildtype=debug -Dtests=disabled \
        -Dexamples=false -Dbenchmarks=false -Ddocs=disabled "$@" >"$_dir/install.log" 2>&1 &&
     meson install -C "$_dir/build" >>"$_dir/install.log" 2>&1; then
    PKG_CONFIG_PATH=$(dirname "$(find "$_dir/prefix" -name attn.pc | head -n1)")
    export PKG_CONFIG_PATH
    attn_libdir=$(pkg-config --variable=libdir attn)
    return 0
  fi
  sed 's/^/# /' "$_dir/install.log"
  return 1
}

# have <program>: true when it is on PATH
have() { command -v "$1" >/dev/null 2>&1; }
