#!/usr/bin/env python3
"""One table over several bench/h200_peers.py runs (issue 18): per shape and token count, the
runtime's share of the same-run floor, the target it is held to, and the ratio to the fastest
same-run peer, with a mark where a target is missed. Reads the suite.md.json files the bench
writes; a shape measured in more than one file is taken from the last file given.

    python3 bench/suite_summary.py docs/runs/*/suite.md.json > summary.md
"""
import argparse
import json
import sys

# Issue 18's targets: share of the same-run floor by token count.
def floor_target(tokens):
    if tokens <= 1:
        return 0.80
    if tokens <= 512:
        return 0.90
    return 0.80


PEERS = (("torch", "torch._grouped_mm"), ("triton", "Triton"), ("jax", "jax ragged_dot"))


def best_peer(row):
    """(time, name) of the fastest peer that produced a time, or None."""
    times = [(row[key], label) for key, label in PEERS if isinstance(row.get(key), (int, float))]
    return min(times) if times else None


def verdict(row, tokens):
    """Which of issue 18's targets a row meets, in words ('' when all are met)."""
    ours = row.get("runtime")
    if not isinstance(ours, (int, float)):
        return "no runtime time"
    misses = []
    share = row["floor"] / ours
    if share < floor_target(tokens):
        misses.append(f"floor {share:.0%} < {floor_target(tokens):.0%}")
    peer = best_peer(row)
    if peer:
        peer_share = row["floor"] / peer[0]
        ratio = peer[0] / ours
        if peer_share < 0.85 and ratio < 1.15:
            misses.append(f"{ratio:.2f}x {peer[1]} < 1.15x")
        elif peer_share >= 0.85 and ratio < 1.0:
            misses.append(f"slower than {peer[1]} at its limit")
    else:
        misses.append("no peer timed")
    return "; ".join(misses)


def load(paths):
    shapes, sources = {}, {}
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        for problem in report["problems"]:
            if "rows" not in problem:
                continue
            shapes[problem["name"]] = problem
            sources[problem["name"]] = (path, report.get("date", "?"), report.get("tool", "?"))
    return shapes, sources


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", help="suite.md.json files of bench/h200_peers.py")
    args = ap.parse_args()
    try:
        shapes, sources = load(args.reports)
    except (OSError, ValueError, KeyError) as e:
        print(f"suite_summary: cannot read the reports: {e}", file=sys.stderr)
        return 1
    if not shapes:
        print("suite_summary: no measured shape in the reports", file=sys.stderr)
        return 1
    tokens = sorted({row["T"] for p in shapes.values() for row in p["rows"]})
    print("| shape | search s | " + " | ".join(f"T={t}" for t in tokens) + " |")
    print("| --- | --- |" + " --- |" * len(tokens))
    misses = []
    for name, problem in shapes.items():
        cells = []
        by_t = {row["T"]: row for row in problem["rows"]}
        for t in tokens:
            row = by_t.get(t)
            if row is None or not isinstance(row.get("runtime"), (int, float)):
                cells.append("-")
                continue
            peer = best_peer(row)
            ratio = f", {peer[0] / row['runtime']:.2f}x {peer[1]}" if peer else ""
            why = verdict(row, t)
            cells.append(f"{row['floor'] / row['runtime']:.0%}{ratio}" + (" ✗" if why else ""))
            if why:
                misses.append(f"{name} T={t}: {why}")
        search = problem.get("search_s")
        print(f"| {name} | {search:.0f} | " if isinstance(search, (int, float)) else f"| {name} | - | ", end="")
        print(" | ".join(cells) + " |")
    print()
    print("Cells: the runtime's share of the same-run floor, then the ratio of the fastest same-run peer's")
    print("time to flytune's (above 1: flytune faster); ✗ marks a missed target of issue 18.")
    print()
    print("Sources: " + "; ".join(f"{n}: {p} ({d})" for n, (p, d, _) in sources.items()))
    if misses:
        print()
        print("Misses:")
        for m in misses:
            print(f"- {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
