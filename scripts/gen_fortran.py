#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate fortran/attn_capi.f90, the ISO_C_BINDING mirror of attn's C API.

Reads the public headers (those the umbrella include/attn/attn.h includes, in its
order, then any other include/attn/*.h) and writes one module, attn_capi, with
  - every integer #define and every enum constant as an integer(c_int) parameter
    (ATTN_OK, ATTN_F32, ATTN_MAX_DIMS, ...);
  - every struct as a bind(c) derived type with the C field names (attn_view,
    attn_sdpa_opts, the layer configs, params and attn_trace);
  - an interface for every ATTN_API function, with the C name and the C
    parameter names (so keyword arguments work).
The module attn (fortran/attn.f90, hand-written) re-exports all of it and adds the
array helpers. tests/fortran_test.sh fails when the committed file differs from a
fresh generation: run this script after changing a public header. Needs only the
Python standard library.

Mapping rules (docs/fortran.md lists them for users):
  enum types, int            -> integer(c_int)
  int64_t / uint64_t         -> integer(c_int64_t)    (unsigned values reinterpreted)
  int32_t / uint32_t         -> integer(c_int32_t)
  size_t, double, float, bool-> integer(c_size_t), real(c_double), real(c_float),
                                logical(c_bool)
  by value                   -> value dummies
  void * / pointer fields    -> type(c_ptr), value      (c_loc(x) or c_null_ptr)
  const void **              -> type(c_ptr), intent(out)
  handle * (an opaque struct)-> type(c_ptr), value    (as the function returned it)
  handle **                  -> type(c_ptr), intent(out)
  struct T * (const or not)  -> type(T), optional       (absent = NULL)
  const number * / number[N] -> assumed-size array x(*) / explicit x(N)
  number * (not const)       -> a scalar, optional (absent = NULL); pass a(1) for
                                an array output
  const char * result        -> type(c_ptr) result, interface named <name>_c
                                (module attn gives the Fortran-string version)
Headers that need <mpi.h> (attn/ring.h: an MPI_Comm is not interoperable) are not
bound. Anything else the rules do not cover stops the generator with an error,
so a new kind of declaration is never bound silently wrong.
"""
import os
import re
import sys
import textwrap

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
INC = os.path.join(ROOT, "include", "attn")
OUT = os.path.join(ROOT, "fortran", "attn_capi.f90")
# The layout check: two programs print every type's size and every field's offset,
# one in C, one through the Fortran types; tests/fortran_test.sh compares the outputs.
ABI_C = os.path.join(ROOT, "tests", "fortran_abi.c")
ABI_F = os.path.join(ROOT, "tests", "fortran_abi.f90")
OUT_MPI = os.path.join(ROOT, "fortran", "attn_mpi.f90")
SHIM_MPI = os.path.join(ROOT, "fortran", "attn_mpi_shim.c")
ABI_MPI_C = os.path.join(ROOT, "tests", "fortran_abi_mpi.c")
ABI_MPI_F = os.path.join(ROOT, "tests", "fortran_abi_mpi.f90")

SCALARS = {
    "int": ("integer(c_int)", "c_int"),
    "int64_t": ("integer(c_int64_t)", "c_int64_t"),
    "uint64_t": ("integer(c_int64_t)", "c_int64_t"),
    "int32_t": ("integer(c_int32_t)", "c_int32_t"),
    "uint32_t": ("integer(c_int32_t)", "c_int32_t"),
    "unsigned": ("integer(c_int)", "c_int"),
    "int16_t": ("integer(c_int16_t)", "c_int16_t"),
    "uint16_t": ("integer(c_int16_t)", "c_int16_t"),
    "int8_t": ("integer(c_int8_t)", "c_int8_t"),
    "uint8_t": ("integer(c_int8_t)", "c_int8_t"),
    "size_t": ("integer(c_size_t)", "c_size_t"),
    "double": ("real(c_double)", "c_double"),
    "float": ("real(c_float)", "c_float"),
    "bool": ("logical(c_bool)", "c_bool"),
}


class GenError(Exception):
    pass


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def public_headers():
    """The public headers in the umbrella attn/attn.h's order, then any other
    include/attn/*.h (sorted), each after the headers it includes; except export.h
    and those that need <mpi.h> (returned apart)."""
    text = open(os.path.join(INC, "attn.h"), encoding="utf-8").read()
    names = re.findall(r'#include\s+"attn/([a-z0-9_]+\.h)"', text)
    for n in sorted(os.listdir(INC)):
        n = n[:-3] if n.endswith(".h.in") else n
        if n.endswith(".h") and n not in names and n != "attn.h":
            names.append(n)
    def path_of(n):
        path = os.path.join(INC, n)
        if not os.path.exists(path) and os.path.exists(path + ".in"):
            path += ".in"  # version.h is configured by meson from version.h.in
        if not os.path.exists(path):
            raise GenError(f"attn/{n} is included but is not in include/attn")
        return path

    # each header after the attn headers it includes itself (its types come first)
    order, state = [], {}

    def visit(n):
        if state.get(n) == "done":
            return
        if state.get(n) == "open":
            raise GenError(f"attn/{n} is part of an include cycle")
        state[n] = "open"
        text = open(path_of(n), encoding="utf-8").read()
        for dep in re.findall(r'#include\s+"attn/([a-z0-9_]+\.h)"', text):
            visit(dep)
        state[n] = "done"
        order.append(n)

    for n in names:
        visit(n)
    out, skipped = [], []
    for n in order:
        if n == "export.h":
            continue
        path = path_of(n)
        if re.search(r"#\s*include\s*<mpi\.h>", open(path, encoding="utf-8").read()):
            skipped.append(n)  # MPI_Comm is not interoperable (docs/fortran.md)
            continue
        out.append((n, path))
    return out, skipped


class Api:
    def __init__(self):
        self.consts = []   # (name, value, header)
        self.enums = set()
        self.structs = []  # (name, [(ftype-decl, field name, dims)], header)
        self.struct_names = set()
        self.opaque = set()  # typedef struct X X; without a body: handles, type(c_ptr)
        self.funcs = []    # (name, ret, [(ctype, name)], header)

    # ---- parsing -------------------------------------------------------
    def parse(self, hname, path):
        raw = open(path, encoding="utf-8").read()
        for m in re.finditer(r"^\s*#\s*define\s+(ATTN_\w+)\s+(\(?-?(?:0x[0-9A-Fa-f]+|\d+)\)?)\s*$",
                             strip_comments(raw), re.M):
            self.consts.append((m.group(1), int(m.group(2).strip("()"), 0), hname, None))
        text = strip_comments(raw)
        text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
        text = re.sub(r'extern\s+"C"\s*\{|^\s*\}\s*$', " ", text, flags=re.M)
        tok = re.compile(r"typedef\s+enum\s+(\w*)\s*\{(.*?)\}\s*(\w+)\s*;"
                         r"|typedef\s+struct\s+(\w*)\s*\{(.*?)\}\s*(\w+)\s*;"
                         r"|ATTN_API\s+([^;]*?)\s*;"
                         r"|typedef\s+struct\s+\w+\s+(\w+)\s*;", re.S)
        for m in tok.finditer(text):
            if m.group(3):
                self.parse_enum(m.group(3), m.group(2), hname)
            elif m.group(6):
                self.parse_struct(m.group(6), m.group(5), hname)
            elif m.group(8):
                self.opaque.add(m.group(8))
            else:
                self.parse_func(m.group(7), hname)

    def parse_enum(self, name, body, hname):
        self.enums.add(name)
        val = -1
        items = []
        for item in [i.strip() for i in body.split(",") if i.strip()]:
            m = re.fullmatch(r"(\w+)\s*(?:=\s*(-?(?:0x[0-9A-Fa-f]+|\d+)))?", item)
            if not m:
                raise GenError(f"{hname}: enum {name}: cannot read '{item}'")
            val = int(m.group(2), 0) if m.group(2) is not None else val + 1
            items.append((m.group(1), val))
        # A constant spelled like a function (ATTN_INIT_UNIFORM, attn_init_uniform) is
        # one name to Fortran: it becomes <ENUM TYPE>_<rest>, e.g. ATTN_INIT_DIST_UNIFORM.
        prefix = os.path.commonprefix([n for n, _ in items])
        prefix = prefix[: prefix.rfind("_") + 1] if len(items) > 1 else "ATTN_"
        for n, v in items:
            alt = name.upper() + "_" + n[len(prefix):]
            self.consts.append((n, v, hname, alt))

    def ctype_scalar(self, t, where):
        t = t.replace("const", "").strip()
        if t in self.enums or t == "attn_status":
            return "integer(c_int)", "c_int"
        if t in SCALARS:
            return SCALARS[t]
        raise GenError(f"{where}: no Fortran mapping for the C type '{t}'")

    def parse_struct(self, name, body, hname):
        fields = []
        for decl in [d.strip() for d in body.split(";") if d.strip()]:
            decl = re.sub(r"\s+", " ", decl)
            m = re.match(r"((?:const )?\w+)\s*(.*)", decl)
            base, rest = m.group(1), m.group(2)
            for d in [x.strip() for x in rest.split(",")]:
                dm = re.fullmatch(r"(\*+)?\s*(\w+)\s*(?:\[(\w+)\])?", d)
                if not dm:
                    raise GenError(f"{hname}: struct {name}: cannot read field '{d}'")
                ptr, fname, dim = dm.groups()
                where = f"{hname}: {name}.{fname}"
                # default initialization to C's all-zero value: a Fortran variable of
                # the type starts as what `= {0}` gives in C (the documented defaults)
                if ptr:
                    ftype, init = "type(c_ptr)", "c_null_ptr"
                elif base.replace("const ", "") in self.struct_names:
                    ftype, init = f"type({base.replace('const ', '')})", None
                else:
                    ftype, kind = self.ctype_scalar(base, where)
                    init = ".false." if kind == "c_bool" else (
                        f"0.0_{kind}" if ftype.startswith("real") else f"0_{kind}")
                fields.append((ftype, fname, dim, init))
        self.structs.append((name, fields, hname))
        self.struct_names.add(name)

    def parse_func(self, decl, hname):
        decl = re.sub(r"\s+", " ", decl).strip()
        m = re.fullmatch(r"(.*?)\b(attn_\w+)\s*\((.*)\)", decl)
        if not m:
            raise GenError(f"{hname}: cannot read the declaration '{decl}'")
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
        if name.startswith("attn__"):
            return  # internal, never public
        plist = []
        if params and params != "void":
            for p in [x.strip() for x in params.split(",")]:
                pm = re.fullmatch(r"(.*?)\s*\b(\w+)\s*(\[\s*\w*\s*\])?", p)
                if not pm:
                    raise GenError(f"{hname}: {name}: cannot read the parameter '{p}'")
                ctype, pname, arr = pm.group(1).strip(), pm.group(2), pm.group(3)
                if arr:
                    ctype += " " + arr.replace(" ", "")
                plist.append((ctype, pname))
        self.funcs.append((name, ret, plist, hname))

    # ---- emitting ------------------------------------------------------
    def dummy(self, fname, ctype, pname):
        """Declaration line and kind/type names it needs, for one dummy argument."""
        where = f"{fname}({pname})"
        t = re.sub(r"\s+", " ", ctype).replace(" *", "*").strip()
        arr = re.search(r"\[(\w*)\]$", t)
        if arr:
            t = t[: arr.start()].strip()
        const = t.startswith("const ")
        base = t.replace("const ", "").strip()
        stars = base.count("*")
        base = base.replace("*", "").strip()
        if arr:
            if stars:
                raise GenError(f"{where}: arrays of pointers are not bound")
            decl, kind = self.ctype_scalar(base, where)
            dim = arr.group(1) or "*"
            return (f"{decl}, intent({'in' if const else 'inout'}) :: {pname}({dim})",
                    {kind} | ({dim} if re.fullmatch(r"[A-Za-z_]\w*", dim) else set()))
        if base == "void":
            if stars == 1:
                return f"type(c_ptr), value :: {pname}", {"c_ptr"}
            if stars == 2:
                return f"type(c_ptr), intent(out) :: {pname}", {"c_ptr"}
        if stars == 0 and base == "MPI_Comm":  # the Fortran handle (MPI_Fint) via the shim
            return f"integer(c_int), value :: {pname}", {"c_int"}
        if stars == 0:
            if base in self.struct_names:
                raise GenError(f"{where}: structs passed by value are not bound")
            decl, kind = self.ctype_scalar(base, where)
            return f"{decl}, value :: {pname}", {kind}
        if stars == 2 and base in self.opaque and not const:  # where a handle is returned
            return f"type(c_ptr), intent(out) :: {pname}", {"c_ptr"}
        if stars == 1 and base in self.opaque:  # a handle: pass it on as it came
            return f"type(c_ptr), value :: {pname}", {"c_ptr"}
        if stars == 1 and base in self.struct_names:
            intent = "intent(in), " if const else ""
            return f"type({base}), {intent}optional :: {pname}", {base}
        if stars == 1 and base == "char" and const:
            return f"character(kind=c_char), intent(in) :: {pname}(*)", {"c_char"}
        if stars == 1:
            decl, kind = self.ctype_scalar(base, where)
            if const:
                return f"{decl}, intent(in) :: {pname}(*)", {kind}
            return f"{decl}, optional :: {pname}", {kind}
        raise GenError(f"{where}: no Fortran mapping for the C type '{ctype}'")

    @staticmethod
    def is_string(ret):
        return ret.replace("ATTN_NODISCARD", "").replace(" ", "") == "constchar*"

    def result(self, fname, ret):
        r = re.sub(r"\s+", " ", ret).replace("ATTN_NODISCARD", "").strip()
        if r == "void":
            return None, set()
        if r.replace(" ", "") == "constchar*":
            return "type(c_ptr)", {"c_ptr"}
        if r.endswith("*") and r.replace("const", "").replace("*", "").strip() in self.opaque:
            return "type(c_ptr)", {"c_ptr"}
        if "*" in r:
            raise GenError(f"{fname}: no Fortran mapping for the result type '{ret}'")
        decl, kind = self.ctype_scalar(r, fname)
        return decl, {kind}

    def emit(self, headers, skipped, module="attn_capi"):
        src = "! GENERATED by scripts/gen_fortran.py from " + ", ".join(
            f"include/attn/{h}" for h, _ in headers) + "."
        L = ["! SPDX-License-Identifier: MIT"] + [
            "! " + l for l in textwrap.wrap(src[2:], 86)]
        if module == "attn_capi":
            L += (["! Not bound here: " + ", ".join(f"attn/{h}" for h in skipped) +
                   " (needs <mpi.h>: module attn_mpi)."] if skipped else []) + [
                "! Do not edit: change the header and rerun the script (the suite checks).",
                "!",
                "! attn_capi: the C API of attn through ISO_C_BINDING: every constant, struct and",
                "! public function, with the C names. Use the module attn (fortran/attn.f90),",
                "! which re-exports all of this and adds views of Fortran arrays.",
                "module attn_capi",
                "  use, intrinsic :: iso_c_binding",
                "  implicit none",
                "  private",
                ""]
        else:
            L += ["! Do not edit: change the header and rerun the script (the suite checks).",
                  "!",
                  f"! {module}: the MPI part of attn's C API (libattn_mpi) for Fortran. An MPI_Comm",
                  "! argument is the Fortran handle, an integer: comm%MPI_VAL of mpi_f08's",
                  "! type(MPI_Comm), or use mpi's integer comm; the C shim",
                  "! (fortran/attn_mpi_shim.c) converts it with MPI_Comm_f2c.",
                  f"module {module}",
                  "  use, intrinsic :: iso_c_binding",
                  "  use attn_capi",
                  "  implicit none",
                  "  private",
                  ""]
        seen = {}

        def claim(name, what):
            key = name.lower()
            if key in seen:
                raise GenError(f"{what} '{name}' is '{seen[key]}' to Fortran (case-insensitive)")
            if len(name) > 63:
                raise GenError(f"{what} '{name}' is longer than Fortran's 63 characters")
            seen[key] = name

        funcs = {(n + "_c" if self.is_string(r) else n).lower() for n, r, _, _ in self.funcs}
        cur = None
        for name, val, h, alt in self.consts:
            if h != cur:
                L.append(f"  ! {h}")
                cur = h
            if name.lower() in funcs and alt:
                L.append(f"  ! C's {name} is spelled like the function {name.lower()}")
                name = alt
            claim(name, "constant")
            L.append(f"  integer(c_int), parameter, public :: {name} = {val}")
        L.append("")
        for name, fields, h in self.structs:
            claim(name, "type")
            L.append(f"  ! {h}: struct {name}")
            L.append(f"  type, bind(c), public :: {name}")
            for ftype, fname, dim, init in fields:
                L.append(f"    {ftype} :: {fname}" + (f"({dim})" if dim else "") +
                         (f" = {init}" if init else ""))
            L.append(f"  end type {name}")
            L.append("")
        L.append("  interface")
        cur = None
        for name, ret, params, h in self.funcs:
            rdecl, kinds = self.result(name, ret)
            fname = name + "_c" if self.is_string(ret) else name
            claim(fname, "function")
            if h != cur:
                L.append(f"    ! ---- {h}")
                cur = h
            decls = []
            pseen = set()
            for ctype, pname in params:
                if pname.lower() in pseen or pname.lower() == fname.lower():
                    raise GenError(f"{name}: parameter '{pname}' clashes in Fortran")
                pseen.add(pname.lower())
                d, k = self.dummy(name, ctype, pname)
                decls.append(d)
                kinds |= k
            args = ", ".join(p for _, p in params)
            kw = "function" if rdecl else "subroutine"
            cname = name + "_fint" if any(t.strip() == "MPI_Comm" for t, _ in params) else name
            head = f"    {kw} {fname}({args}) bind(c, name='{cname}')"
            L += wrap(head, "      ")
            L += wrap("      import :: " + ", ".join(sorted(kinds)), "        ")
            for d in decls:
                L += wrap("      " + d, "        ")
            if rdecl:
                L.append(f"      {rdecl} :: {fname}")
            L.append(f"    end {kw} {fname}")
        L.append("  end interface")
        L.append("")
        for n, r, _, _ in self.funcs:
            L.append("  public :: " + (n + "_c" if self.is_string(r) else n))
        L.append(f"end module {module}")
        return "\n".join(L) + "\n"


def emit_abi(api, headers, prog="fortran_abi", module="attn"):
    includes = [f"#include <attn/{h}>" for h, _ in headers]
    c = ["/* SPDX-License-Identifier: MIT */",
         "/* GENERATED by scripts/gen_fortran.py: the size of every attn struct and the offset",
         f"   and size of every field, as C lays them out; tests/{prog}.f90 prints the same through",
         "   the Fortran bind(c) types and tests/fortran_test.sh compares the two. */",
         "#include <stddef.h>", "#include <stdio.h>", ""] + includes + ["",
         "int main(void) {"]
    f = ["! SPDX-License-Identifier: MIT",
         f"! GENERATED by scripts/gen_fortran.py: tests/{prog}.c's output, through the",
         f"! bind(c) types of the module {module} (sizes, field offsets and field sizes in bytes).",
         f"program {prog}",
         "  use, intrinsic :: iso_c_binding",
         f"  use {module}",
         "  implicit none"]
    body = []
    for i, (name, fields, _) in enumerate(api.structs):
        var = f"t{i}"
        f.append(f"  type({name}), target :: {var}")
        c.append(f'    printf("{name} %zu\\n", sizeof({name}));')
        body.append(f"  print '(a, 1x, i0)', '{name}', c_sizeof({var})")
        for _, fname, _, _ in fields:
            c.append(f'    printf("{name}.{fname} %zu %zu\\n", offsetof({name}, {fname}), '
                     f'sizeof(((const {name} *)0)->{fname}));')
            body += wrap(f"  print '(a, 2(1x, i0))', '{name}.{fname}', off(c_loc({var}%{fname}), "
                         f"c_loc({var})), c_sizeof({var}%{fname})", "    ")
    c += ["    return 0;", "}"]
    f += body + ["contains",
                 "  integer(c_intptr_t) function off(field, base)",
                 "    type(c_ptr), intent(in) :: field, base",
                 "    off = transfer(field, 0_c_intptr_t) - transfer(base, 0_c_intptr_t)",
                 "  end function off",
                 f"end program {prog}"]
    return "\n".join(c) + "\n", "\n".join(f) + "\n"


def wrap(line, indent, width=100):
    """Free-form continuation lines (Fortran allows 132 characters)."""
    out = []
    while len(line) > width:
        cut = line.rfind(", ", 0, width - 2)
        if cut <= len(indent):
            break
        out.append(line[: cut + 1] + " &")
        line = indent + line[cut + 2:]
    out.append(line)
    return out


def emit_shim(api, headers):
    """C wrappers taking the Fortran MPI handle for every function with an MPI_Comm."""
    L = ["/* SPDX-License-Identifier: MIT */",
         "/* GENERATED by scripts/gen_fortran.py: the functions of " +
         ", ".join(f"attn/{h}" for h, _ in headers) + " that take",
         "   an MPI_Comm, taking the Fortran handle (MPI_Fint) instead, for the module attn_mpi",
         "   (fortran/attn_mpi.f90). MPI_Comm_f2c converts it; nothing else happens here. */",
         "#include <mpi.h>", ""] + [f'#include "attn/{h}"' for h, _ in headers] + [""]
    for name, ret, params, _ in api.funcs:
        if not any(t.strip() == "MPI_Comm" for t, _ in params):
            continue
        decl, call = [], []
        for t, p in params:
            arr = re.search(r"\s*(\[\w*\])$", t)
            if t.strip() == "MPI_Comm":
                decl.append(f"MPI_Fint {p}")
                call.append(f"MPI_Comm_f2c({p})")
            else:
                base = t[: arr.start()] if arr else t
                sep = "" if base.endswith("*") else " "
                decl.append(f"{base}{sep}{p}{arr.group(1) if arr else ''}")
                call.append(p)
        r = ret.replace("ATTN_NODISCARD", "").strip()
        L.append(f"ATTN_API {r} {name}_fint({', '.join(decl)});")
        L.append(f"{r} {name}_fint({', '.join(decl)}) {{")
        L.append(f"    {'' if r == 'void' else 'return '}{name}({', '.join(call)});")
        L.append("}")
        L.append("")
    return "\n".join(L)


def generate():
    api = Api()
    headers, skipped = public_headers()
    for h, path in headers:
        api.parse(h, path)
    abi_c, abi_f = emit_abi(api, headers)
    files = {OUT: api.emit(headers, skipped), ABI_C: abi_c, ABI_F: abi_f}
    if skipped:  # the MPI headers: module attn_mpi, on the types of attn_capi
        mpi = Api()
        mpi.enums, mpi.struct_names, mpi.opaque = set(api.enums), set(api.struct_names), set(api.opaque)
        mheaders = [(h, os.path.join(INC, h)) for h in skipped]
        for h, path in mheaders:
            mpi.parse(h, path)
        files[OUT_MPI] = mpi.emit(mheaders, [], module="attn_mpi")
        files[SHIM_MPI] = emit_shim(mpi, mheaders)
        c, f = emit_abi(mpi, mheaders, "fortran_abi_mpi", "attn_mpi")
        files[ABI_MPI_C], files[ABI_MPI_F] = c, f
    return files, api


def main(argv):
    """No argument: write the files. --check: exit 1 (naming them) when a committed
    file differs from a fresh generation, as tests/fortran_test.sh runs it."""
    try:
        files, api = generate()
    except GenError as e:
        print("gen_fortran.py: " + str(e), file=sys.stderr)
        return 1
    if len(argv) > 1 and argv[1] == "--check":
        stale = []
        for path, text in files.items():
            try:
                same = open(path, encoding="utf-8").read() == text
            except OSError:
                same = False
            if not same:
                stale.append(os.path.relpath(path, ROOT))
        if stale:
            print("stale (rerun scripts/gen_fortran.py): " + " ".join(stale))
            return 1
        return 0
    for path, text in files.items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"fortran/attn_capi.f90: {len(api.funcs)} functions, {len(api.structs)} types, "
          f"{len(api.consts)} constants; tests/fortran_abi.c, tests/fortran_abi.f90")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
