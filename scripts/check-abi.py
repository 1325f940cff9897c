#!/usr/bin/env python3
"""libflytune_runtime.so against its ABI promises (docs/EXPORT.md, "The runtime's promises").

Checks, one line per problem, exit 1 on any:
  soname       the library's soname is libflytune_runtime.so.<FT_RUNTIME_ABI_MAJOR> (the header's)
  symbols      every symbol it exports is under a version node of runtime/flytune_runtime.map that
               names it (a name, else a pattern, as ld picks); the ft_ names are exactly the header's
               functions (not its inline wrappers) and the unsized launch calls of the headers before ABI 1
  abidiff      abidiff against the committed baseline (tests/abi/libflytune_runtime.abi, abidw output)
               finds no change but added functions and fields appended to ft_layer_buffers or ft_layer_grads
               (tests/abi/abidiff.supp)
  buffers      ft_layer_buffers and ft_layer_grads of the baseline are prefixes of today's: the same
               members, offsets and types, in order (what the suppressions let through is exactly growth
               at the end)

--self-test edits copies of the baseline and shows each mutant is caught: a removed function, a field
inserted in the middle, a field's type changed, the last field removed, a map that does not name the
exports -- and that a field appended at the end passes. --update writes the baseline from the library (after a deliberate ABI change: raise
FT_RUNTIME_ABI_MINOR, or the major and the soname for an incompatible one).

Needs abidw/abidiff (Debian: abigail-tools) and readelf (binutils). Python 3 standard library only.
"""
import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

PROG = "check-abi"
STRUCT = "ft_layer_buffers"
# The structs a caller fills and passes with its size: each may only grow at its end.
SIZED_STRUCTS = (STRUCT, "ft_layer_grads")
# The unsized launch calls kept for programs built against a header before ABI 1 (runtime/src/c_api_abi0.cpp).
LEGACY = {"ft_plan_launch", "ft_plan_launch_checked", "ft_plan_reference"}


class SetupError(Exception):
    pass


def run(command: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise SetupError(f"cannot run {command[0]}: {e} (Debian: apt-get install abigail-tools binutils)")


def header_facts(header: str) -> tuple[int, int, set[str]]:
    text = open(header, encoding="utf-8").read()
    major = re.search(r"^#define FT_RUNTIME_ABI_MAJOR (\d+)", text, re.M)
    minor = re.search(r"^#define FT_RUNTIME_ABI_MINOR (\d+)", text, re.M)
    if not major or not minor:
        raise SetupError(f"{header}: no FT_RUNTIME_ABI_MAJOR / FT_RUNTIME_ABI_MINOR")
    code = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    declared = set()
    for m in re.finditer(r"^([A-Za-z_][\w \*]*?)\b(ft_\w+)\s*\(", code, re.M):
        if "static" in m.group(1).split() or "return" in m.group(1).split():
            continue
        declared.add(m.group(2))
    return int(major.group(1)), int(minor.group(1)), declared


def map_facts(path: str) -> tuple[dict[str, str], set[str]]:
    """C symbol or pattern (ft_*) -> version node, and the C++ signatures, of the version script."""
    text = re.sub(r"/\*.*?\*/", " ", open(path, encoding="utf-8").read(), flags=re.S)
    symbols: dict[str, str] = {}
    cxx: set[str] = set()
    for node, body in re.findall(r"(FLYTUNE_RUNTIME_[\d.]+)\s*\{(.*?)\}\s*[\w.]*\s*;", text, re.S):
        glob = body.split("local:")[0]
        for sig in re.findall(r'"([^"]+)"', glob):
            cxx.add(sig)
        glob = re.sub(r'extern\s+"C\+\+"\s*\{.*', "", glob, flags=re.S)
        for name in re.findall(r"\b(ft_[\w*?]*)\s*;", glob):
            symbols[name] = node
    return symbols, cxx


def exported(library: str) -> tuple[str, list[tuple[str, str]]]:
    d = run(["readelf", "-d", "-W", library])
    if d.returncode != 0:
        raise SetupError(f"readelf -d {library}: {d.stderr.strip()}")
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", d.stdout)
    s = run(["readelf", "--dyn-syms", "-W", "--demangle", library])
    out = []
    for line in s.stdout.splitlines():
        f = line.split(None, 7)
        if len(f) < 8 or f[4] != "GLOBAL" or f[6] in ("UND", "ABS") or f[3] not in ("FUNC", "OBJECT"):
            continue
        name = f[7]
        version = ""
        if "@" in name:
            name, version = name.split("@", 1)
            version = version.lstrip("@")
        out.append((name, version))
    return soname.group(1) if soname else "", out


def check_symbols(library: str, source_dir: str, mapfile: str | None = None) -> list[str]:
    header = os.path.join(source_dir, "runtime", "include", "flytune_runtime.h")
    mapfile = mapfile or os.path.join(source_dir, "runtime", "flytune_runtime.map")
    major, _, declared = header_facts(header)
    symbols, cxx = map_facts(mapfile)
    soname, syms = exported(library)
    out = []
    want = f"libflytune_runtime.so.{major}"
    if soname != want:
        out.append(f"soname: the library's soname is '{soname}', the header's FT_RUNTIME_ABI_MAJOR makes it '{want}'")
    nodes = set(symbols.values())
    exact = {n: v for n, v in symbols.items() if not any(c in n for c in "*?")}
    patterns = {n: v for n, v in symbols.items() if n not in exact}

    def node_of(name: str) -> str | None:  # as ld picks it: a name before a pattern
        if name in exact:
            return exact[name]
        return next((v for p, v in patterns.items() if fnmatch.fnmatchcase(name, p)), None)

    seen_c = set()
    for name, version in syms:
        if not version:
            out.append(f"symbols: {name} is exported without a version")
        elif version not in nodes:
            out.append(f"symbols: {name} is exported under {version}, which the map does not define")
        if name.startswith("ft_"):
            seen_c.add(name)
            if name not in declared and name not in LEGACY:
                out.append(f"symbols: {name} is exported but the header declares no such function")
            if node_of(name) is None:
                out.append(f"symbols: {name} is exported but not listed in {os.path.relpath(mapfile, source_dir)}")
            elif version and node_of(name) != version:
                out.append(f"symbols: {name} is exported under {version}, the map puts it under {node_of(name)}")
        elif not any(name.startswith(sig.split("(")[0].split("[")[0]) for sig in cxx):
            out.append(f"symbols: {name} is exported but is neither the C API nor a C++ entry point of the map")
    for name in sorted(set(exact) - seen_c):
        out.append(f"symbols: {name} is in the map but the library does not export it")
    for name in sorted(declared - seen_c):
        out.append(f"symbols: the header declares {name}, which the library does not export")
    for name in sorted(LEGACY - seen_c):
        out.append(f"symbols: {name} (the unsized call of the headers before ABI 1) is not exported")
    return out


def abidw(library: str, include: str, supp: str, out: str) -> None:
    """The library's ABI as the baseline holds it: its exported interfaces and the public header's types, without
    the build's paths (the same from any checkout)."""
    r = run(["abidw", "--exported-interfaces-only", "--headers-dir", include, "--drop-private-types", "--suppressions", supp,
             "--no-corpus-path", "--no-comp-dir-path", "--no-show-locs", "--type-id-style", "hash", "--out-file", out, library])
    if r.returncode != 0:
        raise SetupError(f"abidw {library}: {r.stderr.strip()}")


def members(xml_path: str, struct: str = STRUCT) -> list[tuple[str, str, str]] | None:
    """(name, offset in bits, type name) of each member of `struct` (ft_layer_buffers) in an abidw file."""
    root = ET.parse(xml_path).getroot()
    names: dict[str, str] = {}
    nodes: dict[str, ET.Element] = {}
    for e in root.iter():
        if "id" in e.attrib:
            nodes[e.attrib["id"]] = e

    def type_name(tid: str, depth: int = 0) -> str:
        e = nodes.get(tid)
        if e is None or depth > 8:
            return tid
        if tid in names:
            return names[tid]
        tag = e.tag
        if tag == "pointer-type-def":
            n = type_name(e.attrib["type-id"], depth + 1) + "*"
        elif tag == "qualified-type-def":
            n = ("const " if e.attrib.get("const") == "yes" else "") + type_name(e.attrib["type-id"], depth + 1)
        else:
            n = e.attrib.get("name", tag)
        names[tid] = n
        return n

    for c in root.iter("class-decl"):
        if c.attrib.get("name") == struct and c.attrib.get("is-declaration-only") != "yes":
            out = []
            for m in c.findall("data-member"):
                v = m.find("var-decl")
                out.append((v.attrib["name"], m.attrib.get("layout-offset-in-bits", "?"), type_name(v.attrib["type-id"])))
            return out
    return None


def check_abi(library: str, source_dir: str, baseline: str, scratch: str) -> list[str]:
    include = os.path.join(source_dir, "runtime", "include")
    supp = os.path.join(source_dir, "tests", "abi", "abidiff.supp")
    current = os.path.join(scratch, "current.abi")
    abidw(library, include, supp, current)
    out = []
    r = run(["abidiff", "--no-added-syms", "--suppressions", supp, baseline, current])
    if r.returncode & 1:
        raise SetupError(f"abidiff failed: {r.stderr.strip()}")
    if r.returncode != 0:
        report = "\n".join("    " + line for line in r.stdout.strip().splitlines())
        out.append(f"abidiff: an ABI change against {os.path.relpath(baseline, source_dir) if baseline.startswith(source_dir) else baseline} "
                   f"(exit {r.returncode}):\n{report}")
    for struct in SIZED_STRUCTS:
        old, new = members(baseline, struct), members(current, struct)
        if old is None:
            out.append(f"buffers: the baseline has no {struct}")
        elif new is None:
            out.append(f"buffers: the library has no {struct}")
        elif new[: len(old)] != old:
            for i, (a, b) in enumerate(zip(old, new + [None] * len(old))):
                if a != b:
                    out.append(f"buffers: {struct} member {i} was {a[0]} ({a[2]} at bit {a[1]}), is "
                               + (f"{b[0]} ({b[2]} at bit {b[1]})" if b else "gone")
                               + ": members may only be appended")
                    break
    return out


def self_test(library: str, source_dir: str, baseline: str, scratch: str) -> int:
    text = open(baseline, encoding="utf-8").read()

    def member_block(name: str) -> str:
        m = re.search(r"\n(\s*<data-member[^>]*>\s*<var-decl name='" + name + r"'.*?</data-member>)", text, re.S)
        if not m:
            raise SetupError(f"self-test: the baseline has no member {name}")
        return m.group(1)

    def remove_function(t: str) -> str:  # the baseline holds a function the library lacks
        t = t.replace("elf-symbol name='ft_plan_tokens'", "elf-symbol name='ft_plan_tokens_gone'")
        return t.replace("elf-symbol-id='ft_plan_tokens", "elf-symbol-id='ft_plan_tokens_gone")

    def type_of(name: str) -> str:
        return re.search(r"<var-decl name='" + name + r"' type-id='([^']+)'", text).group(1)

    last = members(baseline)[-1][0]
    mutants = [
        ("a function removed (ft_plan_tokens)", remove_function, True),
        ("a field inserted in the middle (bad_ids)", lambda t: t.replace(member_block("bad_ids"), "", 1), True),
        ("a field's type changed (workspace_bytes)",
         lambda t: t.replace(f"<var-decl name='workspace_bytes' type-id='{type_of('workspace_bytes')}'",
                             f"<var-decl name='workspace_bytes' type-id='{type_of('x')}'", 1), True),
        ("the last field removed (the baseline has one more)",
         lambda t: t.replace(member_block(last), member_block(last) + member_block(last).replace(
             f"name='{last}'", "name='gone'").replace("layout-offset-in-bits='", "layout-offset-in-bits='9"), 1), True),
        ("a field appended at the end (allowed)", lambda t: t.replace(member_block(last), "", 1), False),
    ]
    failures = 0
    for what, mutate, must_fail in mutants:
        mutant = os.path.join(scratch, "mutant.abi")
        mutated = mutate(text)
        if mutated == text:
            print(f"{PROG}: self-test: the mutant '{what}' did not change the baseline")
            failures += 1
            continue
        with open(mutant, "w", encoding="utf-8") as f:
            f.write(mutated)
        found = check_abi(library, source_dir, mutant, scratch)
        caught = bool(found)
        ok = caught == must_fail
        print(f"{PROG}: self-test: {what}: {'reported' if caught else 'passes'}{'' if ok else '  <-- WRONG'}")
        if not ok:
            failures += 1
            for line in found:
                print(f"{PROG}:   {line}")
    # The symbol list: a map that no longer lists a function the library exports.
    real_map = os.path.join(source_dir, "runtime", "flytune_runtime.map")
    short_map = os.path.join(scratch, "short.map")
    with open(real_map, encoding="utf-8") as f:
        mapped = f.read()
    with open(short_map, "w", encoding="utf-8") as f:
        f.write(mapped.replace("    ft_*;\n", "    ft_runtime_*;\n", 1))
    found = check_symbols(library, source_dir, short_map)
    caught = any("ft_plan_tokens is exported but not listed" in line for line in found) and \
        mapped != mapped.replace("    ft_*;\n", "    ft_runtime_*;\n", 1)
    print(f"{PROG}: self-test: symbols the map does not name: {'reported' if caught else 'passes  <-- WRONG'}")
    failures += 0 if caught else 1
    total = len(mutants) + 1
    print(f"{PROG}: self-test: {total - failures} of {total} mutants judged right")
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--library", required=True, help="libflytune_runtime.so.N as built")
    p.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    p.add_argument("--baseline", help="default: SOURCE/tests/abi/libflytune_runtime.abi")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--update", action="store_true", help="write the baseline from the library")
    a = p.parse_args()
    source_dir = os.path.realpath(a.source_dir)
    baseline = a.baseline or os.path.join(source_dir, "tests", "abi", "libflytune_runtime.abi")
    try:
        for tool in ("abidw", "abidiff", "readelf"):
            if not shutil.which(tool):
                raise SetupError(f"{tool} is not installed (Debian: apt-get install abigail-tools binutils; scripts/setup.sh)")
        with tempfile.TemporaryDirectory(prefix="ft-abi-") as scratch:
            if a.update:
                abidw(a.library, os.path.join(source_dir, "runtime", "include"),
                      os.path.join(source_dir, "tests", "abi", "abidiff.supp"), baseline)
                print(f"{PROG}: wrote {baseline}")
                return 0
            if a.self_test:
                return self_test(a.library, source_dir, baseline, scratch)
            problems = check_symbols(a.library, source_dir) + check_abi(a.library, source_dir, baseline, scratch)
    except (OSError, SetupError, ET.ParseError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    for line in problems:
        print(f"{PROG}: {line}")
    if problems:
        print(f"{PROG}: {len(problems)} problem(s); an intended change: docs/EXPORT.md, 'The runtime's promises'")
        return 1
    print(f"{PROG}: {os.path.basename(a.library)} keeps its ABI (soname, versioned symbols, the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
