#!/bin/sh
# SPDX-License-Identifier: MIT
# The docs cannot rot: (1) every ```c block of docs/guide.md and README.md appears, up to
# white space, in a program under examples/ (or, for declarations, in a public
# header); (2) every ATTN_API function declared in include/attn has an entry
# "### name" in docs/api.md. TAP output.
src="$1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
squash() { tr -d ' \t\n' ; }
cat "$src"/examples/*.c | squash > "$tmp/examples"
cat "$src"/include/attn/*.h "$src"/include/attn/*.in 2>/dev/null | squash > "$tmp/headers"
awk -v dir="$tmp" '/^```c$/{n++; f=1; next} /^```/{f=0} f{print > (dir "/block" n)}' \
    "$src/docs/guide.md" "$src/README.md"
n=0; fail=0
for b in "$tmp"/block*; do
  [ -e "$b" ] || continue
  n=$((n+1))
  body=$(squash < "$b")
  if grep -qF -- "$body" "$tmp/examples" || grep -qF -- "$body" "$tmp/headers"; then
    echo "ok $n - guide block $(head -n1 "$b" | cut -c1-60)"
  else
    echo "not ok $n - guide block not found in examples/ or headers: $(head -n1 "$b" | cut -c1-60)"
    fail=1
  fi
done
missing=""
for f in $(sed -n 's/.*ATTN_API[^(]*[ *]\(attn_[a-z0-9_]*\)(.*/\1/p' "$src"/include/attn/*.h "$src"/include/attn/version.h.in | sort -u); do
  grep -q "^### $f\b" "$src/docs/api.md" 2>/dev/null || missing="$missing $f"
done
n=$((n+1))
if [ -z "$missing" ]; then
  echo "ok $n - every public function has an entry in docs/api.md"
else
  echo "not ok $n - no docs/api.md entry for:$missing"; fail=1
fi
echo "1..$n"
exit $fail
