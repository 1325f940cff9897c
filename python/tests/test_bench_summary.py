"""bench/suite_summary.py: issue 18's targets applied to bench reports (no GPU, no package)."""
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "suite_summary.py"


def row(tokens, floor, runtime, **peers):
    r = {"T": tokens, "floor": floor, "runtime": runtime}
    r.update(peers)
    return r


def report(path, name, rows, date="2026-12-02 00:00 UTC"):
    path.write_text(json.dumps({"date": date, "tool": "flytune test", "problems": [
        {"name": name, "search_s": 42.0, "rows": rows}]}))
    return path


def summarise(*paths):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True)


def test_targets_by_token_count_and_peer(tmp_path):
    rows = [
        row(1, 80.0, 100.0, triton=200.0),      # 80% of the floor at T=1: met; 2x the peer
        row(16, 89.0, 100.0, triton=200.0),     # 89% < 90% at T=16: missed
        row(4096, 90.0, 100.0, triton=110.0),   # peer at 82% (< 85%), only 1.10x: missed
        row(16384, 90.0, 100.0, torch=95.0),    # peer at 95% (at the limit) and faster: missed
        row(512, 95.0, 100.0, torch=100.5),    # peer at the limit, flytune as fast: met
    ]
    out = summarise(report(tmp_path / "a.json", "shape-a", rows))
    assert out.returncode == 0, out.stderr
    misses = out.stdout.split("Misses:\n")[1]
    assert "shape-a T=1:" not in misses
    assert "shape-a T=16: floor 89% < 90%" in misses
    assert "shape-a T=4096: 1.10x Triton < 1.15x" in misses
    assert "shape-a T=16384: slower than torch._grouped_mm at its limit" in misses
    assert "shape-a T=512:" not in misses
    assert "| shape-a | 42 | 80%, 2.00x Triton |" in out.stdout


def test_later_report_replaces_a_shape_and_no_peer_is_a_miss(tmp_path):
    old = report(tmp_path / "old.json", "shape-b", [row(1, 90.0, 100.0, triton=300.0)])
    new = report(tmp_path / "new.json", "shape-b", [row(1, 50.0, 100.0)], date="later")
    out = summarise(old, new)
    assert out.returncode == 0, out.stderr
    assert "shape-b T=1: floor 50% < 80%; no peer timed" in out.stdout
    assert "new.json (later)" in out.stdout


def test_unreadable_report_is_one_line_and_nonzero(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = summarise(bad)
    assert out.returncode == 1
    assert out.stderr.startswith("suite_summary: cannot read the reports:")
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr
