"""docs/ARCHITECTURE.md read as data, for scripts/check-architecture.py.

The dependency table (one Row per part: its folders, its CMake target, the parts it depends
on), the "Known exceptions" list and the link diagram drawn "as CMake links them", each with
the line it came from; and which row a path belongs to. Parsing only: what the rows are
checked against (the build graph, the includes) is the checker's.
"""

from __future__ import annotations

import dataclasses
import re

TABLE_HEADER = ("folder", "library")
DEPENDS_HEADER = "depends on"
EXCEPTIONS_HEADING = "known exceptions"
LINK_DIAGRAM_MARK = "as CMake links them"


@dataclasses.dataclass
class Row:
    key: str  # the first folder, without a trailing slash
    folders: list[str]  # prefixes, as written (a trailing slash means a folder)
    library: str | None  # the CMake target, None for header-only parts
    deps: list[str]  # backticked names of the last column
    checked: bool
    line: int


@dataclasses.dataclass
class Doc:
    rows: list[Row]
    exceptions: dict[tuple[str, str], int]  # (from, to) -> line
    errors: list[str]
    links: dict[tuple[str, str], int] | None = None  # the link diagram's edges -> line, if the doc has one


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def outside_parentheses(cell: str) -> str:
    """The text of a cell without its (parenthesised commentary), nested or not."""
    out, depth, in_code = [], 0, False
    for c in cell:
        if c == "`":
            in_code = not in_code
        elif not in_code and c == "(":
            depth += 1
            continue
        elif not in_code and c == ")" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(c)
    return "".join(out)


def parse_doc(text: str, doc_name: str) -> Doc:
    rows: list[Row] = []
    errors: list[str] = []
    exceptions: dict[tuple[str, str], int] = {}
    lines = text.splitlines()
    header: list[str] | None = None
    in_exceptions = False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            in_exceptions = EXCEPTIONS_HEADING in stripped.lower()
            continue
        if in_exceptions and stripped.startswith("- "):
            m = re.match(r"-\s+`([^`]+)`\s*->\s*`([^`]+)`\s*:\s*(\S.*)", stripped)
            if not m:
                errors.append(f"{doc_name}:{number}: malformed exception (want: - `from` -> `to`: reason)")
            else:
                exceptions[(m.group(1).rstrip("/"), m.group(2).rstrip("/"))] = number
            continue
        if not stripped.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(stripped) <= set("|-: "):
            continue  # the separator row
        if header[: len(TABLE_HEADER)] != list(TABLE_HEADER) or DEPENDS_HEADER not in header:
            continue
        if len(cells) != len(header):
            errors.append(f"{doc_name}:{number}: table row has {len(cells)} cells, the header {len(header)}")
            continue
        folders = backticked(cells[0])
        if not folders:
            errors.append(f"{doc_name}:{number}: table row names no folder")
            continue
        library = backticked(cells[1])
        deps_cell = cells[header.index(DEPENDS_HEADER)]
        rows.append(Row(key=folders[0].rstrip("/"), folders=folders, library=library[0] if library else None,
                        deps=[d.rstrip("/") for d in backticked(outside_parentheses(deps_cell))],
                        checked="not checked" not in deps_cell.lower(), line=number))
    links = parse_link_diagram(lines)
    if not rows:
        errors.append(f"{doc_name}: no dependency table (a Markdown table with columns folder | library | ... | depends on)")
    return Doc(rows=rows, exceptions=exceptions, errors=errors, links=links)


def parse_link_diagram(lines: list[str]) -> dict[tuple[str, str], int] | None:
    """The fenced block after a line saying "as CMake links them": `a, b -> c, d (comment)` lines."""
    start = next((i for i, line in enumerate(lines) if LINK_DIAGRAM_MARK in line), None)
    if start is None:
        return None
    fence = next((i for i in range(start, len(lines)) if lines[i].startswith("```")), None)
    if fence is None:
        return None
    edges: dict[tuple[str, str], int] = {}
    for i in range(fence + 1, len(lines)):
        if lines[i].startswith("```"):
            break
        if "->" not in lines[i]:
            continue
        left, right = lines[i].split("->", 1)
        for a in re.findall(r"[A-Za-z_]\w*", left):
            for b in re.findall(r"[A-Za-z_]\w*", outside_parentheses(right)):
                edges[(a, b)] = i + 1
    return edges


def folder_matches(prefix: str, path: str) -> bool:
    if prefix.endswith("/"):
        return path.startswith(prefix)
    return path.startswith(prefix) and len(path) > len(prefix) and path[len(prefix)] in "./"


def row_of(rows: list[Row], path: str) -> Row | None:
    best: tuple[int, Row] | None = None
    for row in rows:
        for folder in row.folders:
            if folder_matches(folder, path) and (best is None or len(folder) > best[0]):
                best = (len(folder), row)
    return best[1] if best else None
