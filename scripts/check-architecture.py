#!/usr/bin/env python3
"""Check that docs/ARCHITECTURE.md's dependency table matches the code and the build graph.

The table in docs/ARCHITECTURE.md ("Folders, what they hold, what they may depend on") has
one row per part of the code: the folders or file stems it holds (first column), the CMake
target they are built into (first backticked name of the second column, none for header-only
parts) and, in the last column, the parts it depends on as backticked folder names (text
outside backticks is commentary; external libraries are written without backticks). A row
whose last column says "not checked" (tests/) is left out.

This script configures the sources into a scratch folder (configure only, nothing is built)
with `cmake --graphviz` for each target's direct link dependencies and the CMake file API
(codemodel-v2) for which target compiles which source, scans every `#include "..."` of the
checked rows, and prints one line per mismatch:

  claimed but absent    a row lists a part that none of its files includes
  present but not claimed  a file includes a part its row does not list
  unknown name          a listed name is no row's folder
  no row                a source file under a checked folder, or one CMake compiles, belongs to no row
  misplaced source      CMake builds a file into a target other than its row's library
  link not claimed      CMake links X -> Y but no row of X lists a part of Y
                        (the diagram after "as CMake links them" must also draw the links exactly)
  not linked            a part of X includes a part of library Y that X does not link
  against direction     an include or link edge closes a cycle (between parts or libraries)
  stale exception       a "Known exceptions" entry no longer excuses anything

Edges listed under "Known exceptions" in the doc (`- `a` -> `b`: reason`) are excused from
"not linked" and "against direction". Exit status: 0 when the doc matches, 1 on any mismatch,
2 on usage or setup errors. --self-test mutates copies of the doc (a claim removed, a claim
added, an exception removed) and checks that each mutation is reported. Reading the doc (its
table, exceptions and link diagram) is scripts/architecture_doc.py's job; this file checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # (no __pycache__ beside the script in a checkout)
from architecture_doc import Doc, Row, parse_doc, row_of  # noqa: E402 (the document, read as data)

PROG = "check-architecture"
SOURCE_EXTENSIONS = (".cpp", ".cc", ".hpp", ".h", ".def", ".inc", ".in")


class SetupError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# The build graph


@dataclasses.dataclass
class BuildGraph:
    links: dict[str, set[str]]  # target -> direct link dependencies (all of them, system ones too)
    sources: dict[str, set[str]]  # target -> sources, relative to the source folder


def cache_value(build_dir: str, name: str) -> str | None:
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                m = re.match(rf"{re.escape(name)}:[A-Z]+=(.*)$", line.rstrip("\n"))
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


def configure(cmake: str, source_dir: str, build_dir: str | None, scratch: str) -> BuildGraph:
    query = os.path.join(scratch, ".cmake", "api", "v1", "query")
    os.makedirs(query, exist_ok=True)
    open(os.path.join(query, "codemodel-v2"), "w").close()
    dot = os.path.join(scratch, "graph", "targets.dot")
    command = [cmake, "-S", source_dir, "-B", scratch, f"--graphviz={dot}", "-DFLYTUNE_BUILD_TESTS=OFF"]
    if build_dir:  # the configured build's generator and compilers, so configuring needs nothing new
        for name, flag in (("CMAKE_GENERATOR", "-G"), ("CMAKE_MAKE_PROGRAM", "-DCMAKE_MAKE_PROGRAM="),
                           ("CMAKE_CXX_COMPILER", "-DCMAKE_CXX_COMPILER="), ("CMAKE_C_COMPILER", "-DCMAKE_C_COMPILER=")):
            value = cache_value(build_dir, name)
            if value:
                command += [flag, value] if flag == "-G" else [flag + value]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SetupError(f"configuring {source_dir} failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    return BuildGraph(links=read_graphviz(dot), sources=read_codemodel(scratch, source_dir))


def read_graphviz(dot: str) -> dict[str, set[str]]:
    labels: dict[str, str] = {}
    links: dict[str, set[str]] = {}
    with open(dot, encoding="utf-8") as f:
        text = f.read()
    for node, label in re.findall(r'"(node\d+)"\s*\[\s*label\s*=\s*"([^"]*)"', text):
        labels[node] = label
    for a, b in re.findall(r'"(node\d+)"\s*->\s*"(node\d+)"', text):
        links.setdefault(labels[a], set()).add(labels[b])
    for label in labels.values():
        links.setdefault(label, set())
    return links


def read_codemodel(build_dir: str, source_dir: str) -> dict[str, set[str]]:
    reply = os.path.join(build_dir, ".cmake", "api", "v1", "reply")
    indexes = sorted(glob.glob(os.path.join(reply, "index-*.json")))
    if not indexes:
        raise SetupError(f"no CMake file API reply in {reply}")
    with open(indexes[-1], encoding="utf-8") as f:
        index = json.load(f)
    with open(os.path.join(reply, index["reply"]["codemodel-v2"]["jsonFile"]), encoding="utf-8") as f:
        codemodel = json.load(f)
    model_source = codemodel["paths"]["source"]
    sources: dict[str, set[str]] = {}
    for entry in codemodel["configurations"][0]["targets"]:
        with open(os.path.join(reply, entry["jsonFile"]), encoding="utf-8") as f:
            target = json.load(f)
        paths = set()
        for source in target.get("sources", []):
            path = os.path.normpath(os.path.join(model_source, source["path"]))
            rel = os.path.relpath(path, os.path.realpath(source_dir))
            if not rel.startswith(".."):
                paths.add(rel.replace(os.sep, "/"))
        sources[target["name"]] = paths
    return sources


# ---------------------------------------------------------------------------------------------
# The sources


def list_files(source_dir: str) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", source_dir, "ls-files", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if os.path.isfile(os.path.join(source_dir, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(source_dir):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d != "__pycache__"]
            files += [os.path.relpath(os.path.join(root, n), source_dir).replace(os.sep, "/") for n in names]
    return sorted(f for f in files if f.endswith(SOURCE_EXTENSIONS))


def quoted_includes(text: str) -> list[str]:
    """The "..." of every #include outside comments and string literals (raw ones too)."""
    out: list[str] = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = n if i < 0 else i + 2
        elif c == "#" and line_start:
            m = re.compile(r'#\s*include\s*"([^"\n]+)"').match(text, i)
            if m:
                out.append(m.group(1))
            i = text.find("\n", i)  # the rest of the directive (no continuation lines in #include)
            i = n if i < 0 else i
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.compile(r'R"([^()\\ \n]{0,16})\(').match(text, i)
            if m:
                end = text.find(")" + m.group(1) + '"', m.end())
                i = n if end < 0 else end + len(m.group(1)) + 2
            else:
                i += 1
            line_start = False
        elif c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            i += 1
            while i < n and text[i] != c and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
            line_start = False
        else:
            i += 1
            line_start = False
    return out


def resolve(include: str, including: str, files: set[str], by_suffix: dict[str, list[str]]) -> str | None:
    for candidate in (os.path.normpath(os.path.join(os.path.dirname(including), include)), os.path.normpath(include)):
        for path in (candidate, candidate + ".in"):  # configure_file templates (generator/version.hpp)
            if path in files:
                return path
    # Include roots other than the source folder (templates/ for "ft/...", runtime/include/): a
    # unique file whose path ends with the include.
    matches = by_suffix.get(os.path.normpath(include), [])
    return matches[0] if len(matches) == 1 else None


@dataclasses.dataclass
class Edge:
    src: str
    dst: str
    example: str  # "a.cpp -> b.hpp"


def include_edges(source_dir: str, files: list[str], rows: list[Row]) -> tuple[dict[tuple[str, str], Edge], list[str]]:
    file_set = set(files)
    by_suffix: dict[str, list[str]] = {}
    for f in files:
        parts = f.split("/")
        for k in range(1, len(parts)):
            by_suffix.setdefault("/".join(parts[k:]), []).append(f)
        if f.endswith(".in"):
            by_suffix.setdefault("/".join(parts[1:])[:-3], []).append(f)
    edges: dict[tuple[str, str], Edge] = {}
    problems: list[str] = []
    scanned_tops = {folder.split("/")[0] for r in rows if r.checked for folder in r.folders}
    for f in files:
        row = row_of(rows, f)
        if row is None or not row.checked:
            continue
        with open(os.path.join(source_dir, f), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        for include in quoted_includes(text):
            target = resolve(include, f, file_set, by_suffix)
            if target is None:
                continue  # not the project's (a system or third-party header)
            dst = row_of(rows, target)
            if dst is None:
                if target.split("/")[0] not in scanned_tops:  # (those under it are reported as files)
                    problems.append(f"no row: {target} (included by {f}) belongs to no row of the table")
                continue
            elif dst.key != row.key:
                edges.setdefault((row.key, dst.key), Edge(row.key, dst.key, f"{f} -> {target}"))
    return edges, problems


# ---------------------------------------------------------------------------------------------
# The checks


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return False


def closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return seen


def check(doc: Doc, doc_name: str, graph: BuildGraph, source_dir: str, files: list[str]) -> list[str]:
    out = list(doc.errors)
    rows = [r for r in doc.rows]
    by_name: dict[str, Row] = {}
    for row in rows:
        for folder in row.folders:
            by_name[folder.rstrip("/")] = row
    checked = [r for r in rows if r.checked]
    scanned_tops = {f.split("/")[0] for r in checked for f in r.folders}
    excused_used: set[tuple[str, str]] = set()

    # Every source under a checked row's top-level folder belongs to a row.
    for f in files:
        if f.split("/")[0] in scanned_tops and row_of(rows, f) is None:
            out.append(f"no row: {f} belongs to no row of the table in {doc_name}")

    edges, problems = include_edges(source_dir, files, rows)
    out += problems

    # Claims against includes, row by row.
    for row in checked:
        claimed = set()
        for name in row.deps:
            if name not in by_name:
                out.append(f"unknown name: {doc_name}:{row.line}: `{row.key}` lists `{name}`, which is no row's folder")
            else:
                claimed.add(by_name[name].key)
        actual = {dst for (src, dst) in edges if src == row.key}
        for dst in sorted(claimed - actual):
            out.append(f"claimed but absent: {doc_name}:{row.line}: `{row.key}` lists `{dst}`, "
                       f"but no file of `{row.key}` includes a file of `{dst}`")
        for dst in sorted(actual - claimed):
            out.append(f"present but not claimed: `{row.key}` includes `{dst}` ({edges[(row.key, dst)].example}), "
                       f"but {doc_name}:{row.line} does not list it")

    # Sources against the targets CMake builds them into.
    libraries = {r.library for r in rows if r.library}
    for target, paths in sorted(graph.sources.items()):
        for path in sorted(paths):
            row = row_of(rows, path)
            if row is None:
                if path.split("/")[0] not in scanned_tops:  # (those under it are reported as files)
                    out.append(f"no row: CMake builds {path} into {target}, but no row of {doc_name} holds it")
                continue
            if not row.checked:
                continue
            if row.library != target:
                out.append(f"misplaced source: CMake builds {path} into {target}, "
                           f"but {doc_name}:{row.line} puts it in `{row.key}` ({row.library or 'header-only'})")

    # Links against claims, library by library (the project's libraries CMake knows).
    project = {lib for lib in libraries if lib in graph.links or lib in graph.sources}
    links = {lib: {d for d in graph.links.get(lib, set()) if d in project} for lib in project}
    row_lib = {r.key: r.library for r in rows}
    for lib in sorted(project):
        claimed_libs = {row_lib[dst] for (src, dst) in edges if row_lib[src] == lib} - {lib, None}
        for dep in sorted(links[lib] - claimed_libs):
            out.append(f"link not claimed: CMake links {lib} -> {dep}, but no row of {lib} in {doc_name} "
                       f"lists a part of {dep}")
    if doc.links is not None:  # the diagram of the libraries' links, edge for edge
        actual_links = {(a, b) for a in project for b in links[a]}
        for (a, b), line in sorted(doc.links.items()):
            if (a, b) not in actual_links:
                out.append(f"claimed but absent: {doc_name}:{line}: the link diagram draws {a} -> {b}, "
                           f"but CMake does not link it")
        for a, b in sorted(actual_links - set(doc.links)):
            out.append(f"present but not claimed: CMake links {a} -> {b}, but {doc_name}'s link diagram does not draw it")
    for (src, dst), edge in sorted(edges.items()):
        a, b = row_lib[src], row_lib[dst]
        if a not in project or b not in project or a == b or b in closure(links, a):
            continue
        if (src, dst) in doc.exceptions:
            excused_used.add((src, dst))
            continue
        out.append(f"not linked: `{src}` includes `{dst}` ({edge.example}), but {a} does not link {b}")

    # Direction: no edge may close a cycle, between parts or between libraries, unless excused.
    part_graph: dict[str, set[str]] = {}
    for (src, dst) in edges:
        if (src, dst) in doc.exceptions:
            continue
        part_graph.setdefault(src, set()).add(dst)
    for (src, dst), edge in sorted(edges.items()):
        if (src, dst) in doc.exceptions:
            if reaches({**part_graph, src: part_graph.get(src, set()) | {dst}}, dst, src):
                excused_used.add((src, dst))
            continue
        if reaches(part_graph, dst, src):
            out.append(f"against direction: `{src}` includes `{dst}` ({edge.example}), "
                       f"and `{dst}` depends on `{src}` (a cycle)")
    lib_graph = {lib: set(links[lib]) for lib in project}
    for (src, dst) in edges:
        a, b = row_lib[src], row_lib[dst]
        if a in project and b in project and a != b and (src, dst) not in doc.exceptions:
            lib_graph[a].add(b)
    for (src, dst), edge in sorted(edges.items()):
        a, b = row_lib[src], row_lib[dst]
        if a in project and b in project and a != b and (src, dst) not in doc.exceptions and reaches(lib_graph, b, a):
            out.append(f"against direction: `{src}` ({a}) includes `{dst}` ({b}) ({edge.example}), "
                       f"and {b} depends on {a} (a cycle)")
    for a in sorted(project):
        for b in sorted(links[a]):
            if reaches(lib_graph, b, a):
                out.append(f"against direction: CMake links {a} -> {b}, and {b} depends on {a} (a cycle)")

    for (src, dst), line in sorted(doc.exceptions.items()):
        if (src, dst) not in excused_used:
            why = "no file of it includes the other" if (src, dst) not in edges else "it is linked and closes no cycle"
            out.append(f"stale exception: {doc_name}:{line}: `{src}` -> `{dst}` needs no exception ({why}); remove it")
    return out


# ---------------------------------------------------------------------------------------------
# The self-test: each mutation of the doc must be reported.


def self_test(text: str, doc_name: str, graph: BuildGraph, source_dir: str, files: list[str]) -> int:
    base = set(check(parse_doc(text, doc_name), doc_name, graph, source_dir, files))
    doc = parse_doc(text, doc_name)
    lines = text.splitlines()

    def replace_line(number: int, new: str) -> str:
        copy = lines.copy()
        copy[number - 1] = new
        return "\n".join(copy)

    def last_cell_start(line: str) -> int:
        body = line.rstrip()
        return body.rfind("|", 0, len(body) - 1) + 1

    mutations: list[tuple[str, str, tuple[str, ...]]] = []  # (what, mutated doc, kinds that must appear)
    # A claim removed: the include it stood for is then present but not claimed.
    row = next(r for r in doc.rows if r.checked and r.deps)
    line = lines[row.line - 1]
    start = last_cell_start(line)
    claim = f"`{row.deps[0]}`"
    mutations.append((f"`{row.key}` without its claim {claim}",
                      replace_line(row.line, line[:start] + line[start:].replace(claim, row.deps[0].replace("/", " "), 1)),
                      ("present but not claimed",)))
    # A claim added to a part that includes nothing: claimed but absent.
    bottom = next(r for r in doc.rows if r.checked and not r.deps)
    top = next(r for r in reversed(doc.rows) if r.checked and r.deps)
    line = lines[bottom.line - 1].rstrip()
    mutations.append((f"`{bottom.key}` claiming `{top.key}`", replace_line(bottom.line, line[:-1].rstrip() + f", `{top.key}` |"),
                      ("claimed but absent",)))
    # Every known exception removed in turn: its edge is reported again.
    for (src, dst), number in sorted(doc.exceptions.items(), key=lambda e: e[1]):
        mutations.append((f"the exception `{src}` -> `{dst}` removed", replace_line(number, ""),
                          ("not linked", "against direction")))
    # A line of the link diagram removed: the links it drew are present but not drawn.
    if doc.links:
        number = min(doc.links.values())
        mutations.append((f"line {number} of the link diagram removed", replace_line(number, ""),
                          ("present but not claimed: CMake links",)))
    # A folder's row removed: its files belong to no row.
    without_row = lines[: top.line - 1] + lines[top.line:]
    mutations.append((f"the row of `{top.key}` removed", "\n".join(without_row), ("no row",)))

    failures = 0
    for what, mutated, kinds in mutations:
        new = sorted(set(check(parse_doc(mutated, doc_name), doc_name, graph, source_dir, files)) - base)
        hits = [m for m in new if m.startswith(kinds)]
        if hits:
            print(f"{PROG}: self-test: ok: {what}: {hits[0]}")
        else:
            failures += 1
            print(f"{PROG}: self-test: FAILED: {what} was not reported as {' or '.join(kinds)}")
    print(f"{PROG}: self-test: {len(mutations) - failures} of {len(mutations)} mutations of {doc_name} reported")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--build-dir", help="a configured build folder: its generator and compilers are reused")
    parser.add_argument("--doc", help="the architecture document (default: SOURCE/docs/ARCHITECTURE.md)")
    parser.add_argument("--cmake", default=shutil.which("cmake") or "cmake")
    parser.add_argument("--self-test", action="store_true", help="check that mutations of the doc are reported")
    args = parser.parse_args()
    source_dir = os.path.realpath(args.source_dir)
    doc_path = args.doc or os.path.join(source_dir, "docs", "ARCHITECTURE.md")
    doc_name = os.path.relpath(doc_path, source_dir) if not args.doc else doc_path
    try:
        with open(doc_path, encoding="utf-8") as f:
            text = f.read()
        with tempfile.TemporaryDirectory(prefix="ft-arch-") as scratch:
            graph = configure(args.cmake, source_dir, args.build_dir, scratch)
    except (OSError, SetupError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    files = list_files(source_dir)
    if args.self_test:
        return self_test(text, doc_name, graph, source_dir, files)
    mismatches = check(parse_doc(text, doc_name), doc_name, graph, source_dir, files)
    for m in mismatches:
        print(f"{PROG}: {m}")
    if mismatches:
        print(f"{PROG}: {len(mismatches)} mismatch(es) between {doc_name} and the code; fix the doc, the code, "
              f"or list a justified exception under 'Known exceptions'")
        return 1
    print(f"{PROG}: {doc_name} matches the build graph and the includes "
          f"({sum(r.checked for r in parse_doc(text, doc_name).rows)} parts, {len(graph.sources)} targets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
