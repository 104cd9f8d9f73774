#!/bin/sh
# SPDX-License-Identifier: MIT
# Install attn into a temporary prefix, then build and run examples/consumer.c
# against it through pkg-config, once shared and once with --static. TAP output.
src="$1"; build="$2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "1..3"
if meson setup "$tmp/build" "$src" --prefix="$tmp/prefix" -Dtests=disabled \
      -Dbenchmarks=false -Dexamples=false -Dmpi=disabled -Ddocs=disabled >"$tmp/log" 2>&1 &&
   meson install -C "$tmp/build" >>"$tmp/log" 2>&1; then
  echo "ok 1 - meson install into a temporary prefix"
else
  sed 's/^/# /' "$tmp/log"; echo "not ok 1 - meson install into a temporary prefix"
  echo "not ok 2 - shared # SKIP"; echo "not ok 3 - static # SKIP"; exit 1
fi
pc=$(dirname "$(find "$tmp/prefix" -name attn.pc | head -n1)")
export PKG_CONFIG_PATH="$pc"
libdir=$(pkg-config --variable=libdir attn)
rc=0
if ${CC:-cc} -o "$tmp/consumer_shared" "$src/examples/consumer.c" \
      $(pkg-config --cflags --libs attn) -Wl,-rpath,"$libdir" 2>"$tmp/err" &&
   "$tmp/consumer_shared" >"$tmp/out" 2>&1; then
  echo "ok 2 - shared: cc consumer.c \$(pkg-config --cflags --libs attn)"
else
  sed 's/^/# /' "$tmp/err" "$tmp/out" 2>/dev/null; echo "not ok 2 - shared"; rc=1
fi
if ${CC:-cc} -static -o "$tmp/consumer_static" "$src/examples/consumer.c" \
      $(pkg-config --static --cflags --libs attn) 2>"$tmp/err" &&
   "$tmp/consumer_static" >"$tmp/out" 2>&1; then
  echo "ok 3 - static: cc -static consumer.c \$(pkg-config --static --cflags --libs attn)"
else
  sed 's/^/# /' "$tmp/err" "$tmp/out" 2>/dev/null; echo "not ok 3 - static"; rc=1
fi
exit $rc
