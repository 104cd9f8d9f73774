#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate docs/api.md from the doc blocks in include/attn/*.h.

Each public function (an ATTN_API declaration) gets an entry: its prototype and
the doc comment written above it (formula, shapes, aliasing, workspace,
statuses, "Since"). A declaration without its own comment shares the comment of
the group it stands in (the nearest preceding one). Types and enums are listed
per header. Run after changing a header; tests/docs_test.sh fails when a public
function has no entry. Needs only the Python standard library.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ORDER = ["status.h", "version.h.in", "view.h", "gemm.h", "kernels.h", "layers.h", "decode.h", "posenc.h",
         "init.h", "diag.h", "io.h", "ring.h"]
INTRO = {
    "status.h": "Status codes and their names.",
    "version.h.in": "Compile-time macros and run-time version queries.",
    "view.h": "The strided view and its copy-free algebra.",
    "gemm.h": "attn_gemm, the one door to CBLAS.",
    "kernels.h": "Softmax, layernorm, activations, adds, linear maps and scaled dot-product "
                 "attention, forward and backward.",
    "layers.h": "Multi-head attention, feed-forward, the encoder block, and the trace.",
    "decode.h": "Incremental decoding: the KV cache, the cached MHA step, split-KV decode and "
                "the decoder block (docs/decoding.md).",
    "posenc.h": "Positional encodings and patchify.",
    "init.h": "Counter-based random streams and weight initialization (LAPACKE QR).",
    "diag.h": "Numerical diagnostics (LAPACKE eigenvalues and SVD).",
    "io.h": "Loading PyTorch weights: safetensors files mapped into views, bound to layer "
            "parameters by PyTorch's names (docs/guide.md \"From PyTorch\").",
    "ring.h": "Ring attention over MPI (companion library attn_mpi, `pkg-config attn-mpi`).",
}


def clean_comment(c):
    c = re.sub(r"^/\*\*?", "", c.strip())
    c = re.sub(r"\*/$", "", c)
    lines = [re.sub(r"^\s*\* ?", "", l) for l in c.splitlines()]
    return "\n".join(lines).strip()


def parse(path):
    text = open(path, encoding="utf-8").read()
    out, types = [], []
    last_doc = ""
    pos = 0
    token = re.compile(r"/\*.*?\*/|ATTN_API[^;]*;|typedef\s+(?:struct|enum)\s+(\w+)", re.S)
    prev_end = 0
    for m in token.finditer(text):
        s = m.group(0)
        if s.startswith("/*"):
            if s.startswith("/**") or "\n" in s:
                last_doc = clean_comment(s)
                last_doc_end = m.end()
            prev_end = m.end()
            continue
        if s.startswith("typedef"):
            types.append(m.group(1))
            continue
        proto = re.sub(r"\s+", " ", s.replace("ATTN_API ", "")).strip()
        proto = proto.replace("( ", "(").replace(" )", ")")
        name = re.search(r"(attn_\w+)\s*\(", proto).group(1)
        out.append((name, proto, last_doc))
    return out, types


def main():
    inc = os.path.join(ROOT, "include", "attn")
    md = ["# attn API reference", "",
          "Generated from the headers by `scripts/gen_api_md.py`; the doc block of each",
          "declaration is the contract. Dimension legend: B batch, T sequence (Tq queries, Tk",
          "keys), C model width, H heads, Hkv key/value heads, D head width (Dv for values),",
          "F feed-forward width. Conventions that hold everywhere (statuses, aliasing,",
          "workspaces, accumulation of gradients) are in [guide.md](guide.md); numerics in",
          "[numerics.md](numerics.md).", ""]
    headers = [h for h in ORDER if os.path.exists(os.path.join(inc, h))]
    md.append("Headers: " + ", ".join(f"[{h}](#{h.replace('.', '')})" for h in headers) + ".")
    md.append("")
    for h in headers:
        funcs, types = parse(os.path.join(inc, h))
        md += [f"## {h}", "", INTRO.get(h, ""), ""]
        if types:
            md += ["Types: " + ", ".join(f"`{t}`" for t in types) + ".", ""]
        prev_doc, prev_name = None, None
        for name, proto, doc in funcs:
            md += [f"### {name}", "", "```c", proto, "```", ""]
            if doc and doc == prev_doc:
                md += [f"Companion of `{prev_name}`: the description above applies.", ""]
            else:
                md += [doc if doc else "(See the header.)", ""]
                prev_doc, prev_name = doc, name
    open(os.path.join(ROOT, "docs", "api.md"), "w", encoding="utf-8").write("\n".join(md))
    print("docs/api.md:", sum(len(parse(os.path.join(inc, h))[0]) for h in headers), "functions")


if __name__ == "__main__":
    sys.exit(main())
