"""What the peer benches share (bench/h200_peers.py, fp8_peers.py, backward_peers.py,
and python_bindings.py through h200_peers): CUDA-event medians, the same-run
ceilings, graph capture with a 256 MiB L2 flush inside the timed region (its own
time subtracted), eager timing where capture is refused, host timing for JAX, the
--budget-s clock, and the report's files and Markdown head."""
import argparse, json, os, statistics, sys, time

import torch


def cuda_time(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        times.append(s.elapsed_time(e) * 1000.0)
    return statistics.median(times), min(times), max(times)


def ceilings():
    """Same-run rates: dense bf16 GEMM (FLOP/s), HBM copy and read-only stream (bytes/s)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t, _, _ = cuda_time(lambda: a @ b, 10)
    gemm = 2 * 8192 ** 3 / (t * 1e-6)
    x = torch.empty(2 * 1024 ** 3, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    t, _, _ = cuda_time(lambda: y.copy_(x), 10)
    copy = 2 * x.numel() / (t * 1e-6)
    xf = x.view(torch.float32).normal_()
    t, _, _ = cuda_time(lambda: xf.sum(), 10)  # reads 2 GiB, writes one number
    read = x.numel() / (t * 1e-6)
    del a, b, x, y, xf
    return gemm, copy, read


# --- graph capture and timing shared by the graph-captured peers ------------

_FLUSH = []


def flush_buffer():
    if not _FLUSH:
        _FLUSH.append(torch.empty(256 * 1024 ** 2, device="cuda", dtype=torch.uint8))
    return _FLUSH[0]


def capture(fn):
    """fn once on a side stream (lazy init, allocator warm-up, no JIT inside
    the capture), then fn captured into a CUDA graph."""
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        fn()
    return g


def time_graph(g, reps=20):
    """Median replay time with L2 flushed before each replay. The flush is
    inside the timed region: time it alone and subtract."""
    flush = flush_buffer()

    def run():
        flush.zero_()
        g.replay()
    t_all, _, _ = cuda_time(run, reps)
    t_flush, _, _ = cuda_time(lambda: flush.zero_(), reps)
    return t_all - t_flush


def timed(fn, capture_fn=capture):
    """Graph-captured (capture_fn(fn)), L2-flushed median; eager with the flush
    subtracted where capture is refused. Returns (us, how): how is "graph", or
    "eager (capture refused: the reason)"."""
    try:
        return time_graph(capture_fn(fn)), "graph"
    except Exception as e:
        torch.cuda.synchronize()
        reason = first_line(e)[:80]
        flush = flush_buffer()
        t_all, _, _ = cuda_time(lambda: (flush.zero_(), fn()), 20)
        t_flush, _, _ = cuda_time(lambda: flush.zero_(), 20)
        return t_all - t_flush, f"eager (capture refused: {reason})"


def host_time(fn, reps=10, warmup=3):
    """Median host time (us) of fn(), which waits for its own result (JAX: block_until_ready)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


class Clock:
    def __init__(self, budget_s):
        self.t0, self.budget = time.time(), budget_s

    def left(self):
        return self.budget - (time.time() - self.t0) if self.budget else 1e9


def pct(floor, us):
    return f"{100 * floor / us:.0f}%"


def run_parser(doc, problems, tokens, peers):
    """The parser of a peer bench (its description: doc's first line) with the options
    every one takes: --out, --problems, --tokens, --budget-s, and --skip-PEER for each of peers."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", required=True, help="Markdown output; OUT.json gets the raw numbers")
    ap.add_argument("--problems", default=",".join(problems), help="flytune presets or name:E:H:I:K shapes")
    ap.add_argument("--tokens", default=",".join(map(str, tokens)), help="token counts, for every problem")
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting work after this many seconds (0: none)")
    for peer in peers:
        ap.add_argument(f"--skip-{peer}", action="store_true", help=f"leave the {peer} peer out")
    return ap


def token_list(text):
    """--tokens' positive integers, or one line and exit."""
    try:
        tokens = [int(t) for t in text.split(",")]
    except ValueError:
        tokens = []
    if not tokens or min(tokens) < 1:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: --tokens {text}: not a list of positive integers")
    return tokens


def first_line(e):
    """An exception's first line (its type's name where it has no text)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def run_peer(fn, clock, need_s):
    """fn()'s cell, or {"error": why}: no time left in the budget for need_s more
    seconds, or fn refused (this GPU, this library, these shapes)."""
    if clock.left() < need_s:
        return {"error": "no time left in --budget-s"}
    try:
        return fn()
    except Exception as e:
        return {"error": first_line(e)[:200]}


def untimed_cell(c, width):
    """A peer's table cell without a time: "-" for no cell, else its wrong or error
    text, cut to width and safe in a Markdown table."""
    if not c:
        return "-"
    return (c.get("wrong") or c.get("error") or "-")[:width].replace("|", "/").replace("\n", " ")


def report_head(report, title, versions, method):
    """The Markdown section's first lines: its heading (date, GPU, title, the problems),
    the versions, the command and the method."""
    names = ", ".join(p["name"] for p in report["problems"])
    return [f"## {report['date']}, {report['gpu']}: {title}, same run ({names})", "", f"{versions}. Command:", "",
            "```sh", report["command"], "```", "", method, ""]


def write_report(report, out, markdown):
    """OUT: markdown(report); OUT.json: the report's numbers."""
    with open(out, "w") as f:
        f.write(markdown(report))
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1)
