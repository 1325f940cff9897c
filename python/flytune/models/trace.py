"""A jax.profiler trace of a few steps and what it says about them (flytune-mixtral --trace DIR).

    with trace.capture("trace/flytune-B1-P512"):
        ...                                        # the steps
    trace.summary("trace/flytune-B1-P512")         # per process of the trace: busy time, top events

The trace is JAX's perfetto file (perfetto_trace.json.gz, Chrome trace events). For each process in it (the
host's threads; each GPU with its streams) the summary gives the span from its first event to its last end,
the time covered by at least one event (busy; the rest of the span is idle), and the events that took the
most time by name (count, total, median): on a GPU, the kernels and copies; on the host, XLA's thunks and the
CUDA calls the profiler records. Where a decode step's time goes outside its kernels shows there as the GPU's
idle time and as the host events that fill it.
"""
from __future__ import annotations

import contextlib
import glob
import gzip
import json
import os


@contextlib.contextmanager
def capture(folder: str):
    """A jax.profiler trace of the block into `folder` (its perfetto file too); waits for the device first."""
    import jax
    os.makedirs(folder, exist_ok=True)
    with jax.profiler.trace(folder, create_perfetto_trace=True):
        yield
        jax.effects_barrier()


def _busy(intervals: list) -> float:
    """Time covered by the union of [start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _top(events: list, top: int) -> list:
    by = {}
    for name, dur in events:
        by.setdefault(name, []).append(dur)
    rows = sorted(by.items(), key=lambda kv: -sum(kv[1]))[:top]
    return [{"name": name[:160], "count": len(d), "total_us": round(sum(d), 1),
             "median_us": round(sorted(d)[len(d) // 2], 2)} for name, d in rows]


def summary(folder: str, top: int = 15) -> dict:
    """The summary of the newest perfetto trace under `folder` ({"file": None} where there is none)."""
    files = sorted(glob.glob(os.path.join(folder, "**", "perfetto_trace.json.gz"), recursive=True),
                   key=os.path.getmtime)
    if not files:
        return {"file": None}
    with gzip.open(files[-1], "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e.get("args", {}).get("name", str(e["pid"])) for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    spans = {}
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        spans.setdefault(e["pid"], []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("name", "?")))
    processes = []
    for pid, evs in spans.items():
        start, end = min(a for a, _, _ in evs), max(b for _, b, _ in evs)
        busy = _busy([(a, b) for a, b, _ in evs])
        processes.append({"name": names.get(pid, str(pid)), "events": len(evs), "span_us": round(end - start, 1),
                          "busy_us": round(busy, 1), "idle_us": round(end - start - busy, 1),
                          "top": _top([(n, b - a) for a, b, n in evs], top)})
    return {"file": os.path.relpath(files[-1], folder), "processes": processes}
