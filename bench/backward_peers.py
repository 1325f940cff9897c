#!/usr/bin/env python3
"""The MoE layer's backward pass beside its peers on one GPU, in one run (issue 34:
bf16, SwiGLU, uniform top-k routing; shapes are flytune's presets, read from
generator/problem.cpp, or name:E:H:I:K). Per problem and token count, one layer
(X, routing, weights, dY) and its gradients dX, dW1, dW2 and d(topk_weights):
  torch     the layer of bench/h200_peers.py's torch._grouped_mm peer, its backward
            by autograd: the forward runs once outside the timed region and its
            graph is retained; torch.autograd.grad(y, inputs, dY, retain_graph=True)
            alone is graph-captured (on the forward's stream) and timed with L2
            flushed; where capture is refused, eager with the reason in the cell;
  jax       the same layer with jax.lax.ragged_dot (h200_peers.jax_layer): jax.vjp
            under jit once, then the VJP function alone (jitted, applied to its
            residuals and dY) timed on the host around block_until_ready (no flush);
  flytune   the layer winners of pass "backward" (and "forward", for forward +
            backward) of a `flytune search --pass both --json` summary (--flytune-json).
Every peer's gradients are checked against an fp32 reference (the layer in fp32, a
loop over experts, autograd) before it is timed: rel L2 of each gradient at most
2e-2 (h200_peers.ERR_LIMIT), else the cell says wrong and nothing is timed.
Floors: backward FLOPs 12·T·k·H·I (twice the forward's) at the same-run dense bf16
GEMM rate, bytes (the touched experts' W1 and W2 read and dW1, dW2 written in bf16,
X and dY read, dX written) at the same-run copy rate; forward + backward's floor is
the sum of the two passes' floors.

Usage (on the GPU machine, from the repository root):
  python3 bench/backward_peers.py --out $OUT/backward.md --budget-s 300 \\
      --flytune-json mixtral-8x7b=search_mixtral.json --flytune-json qwen3-30b=search_qwen.json
  options: --problems mixtral-8x7b,qwen3-30b --tokens 4096,16384 --skip-torch --skip-jax
Writes --out (a Markdown section for docs/PERFORMANCE.md: date, GPU, command, a table
per problem) and OUT.json (raw numbers).
"""
import json, math, os, shlex, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import h200_peers as hp  # ceilings, timing, capture, L2 flush, routing, the grouped_mm and ragged_dot layers

PROBLEMS = ["mixtral-8x7b", "qwen3-30b"]
TOKENS = [4096, 16384]
BOUND = hp.ERR_LIMIT  # rel L2 of every gradient against the fp32 reference
GRADS = {"dx": "dX", "dw1": "dW1", "dw2": "dW2", "dw": "d(topk_weights)"}
TARGET = {"torch": 1.3, "jax": 2.0, "fwd_bwd": 0.70}  # issue 34
PEERS = {"torch": "torch._grouped_mm autograd", "jax": "jax.lax.ragged_dot VJP"}


# --- floors -------------------------------------------------------------------------

def backward_work(s, T):
    """(FLOPs, bytes) of the backward: twice the forward's FLOPs; the touched experts'
    W1, W2 read and dW1, dW2 written (bf16), X and dY read, dX written."""
    flops = 2 * hp.layer_work(s, T)[0]
    return flops, 2 * hp.active_experts(s, T) * 3 * s.H * s.I * 2 + 3 * T * s.H * 2


def backward_floor_us(s, T, ceil):
    flops, bytes_ = backward_work(s, T)
    return max(flops / ceil["gemm"], bytes_ / ceil["copy"]) * 1e6


# --- inputs and the reference --------------------------------------------------------

def layer_inputs(s, T, gen):
    """bf16 X [T, H], W1 [E, 2I, H], W2 [E, H, I] (scaled as h200_peers'), uniform top-k
    routing (int32 ids, fp32 weights [T, k]) and a bf16 dY [T, H], on gen's device."""
    dev = gen.device
    w1 = (torch.randn(s.E, 2 * s.I, s.H, device=dev, generator=gen) / math.sqrt(s.H)).to(torch.bfloat16)
    w2 = (torch.randn(s.E, s.H, s.I, device=dev, generator=gen) / math.sqrt(s.I)).to(torch.bfloat16)
    x = torch.randn(T, s.H, device=dev, generator=gen).to(torch.bfloat16)
    ids, w = hp.routing(T, gen, s.E, s.K)
    dy = torch.randn(T, s.H, device=dev, generator=gen).to(torch.bfloat16)
    return {"x": x, "ids": ids, "w": w.contiguous(), "w1": w1, "w2": w2, "dy": dy}


def layer_fp32(x, ids, w, w1, w2):
    """The layer in fp32 without rounding, a loop over experts (differentiable)."""
    I = w1.shape[1] // 2
    y = torch.zeros(x.shape[0], w2.shape[1], device=x.device, dtype=torch.float32)
    for e in range(w1.shape[0]):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        gu = x[tok] @ w1[e].t()
        h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
        y = y.index_add(0, tok, (h @ w2[e].t()) * w[tok, slot][:, None])
    return y


def reference_grads(inp):
    """{dx, dw1, dw2, dw}: the fp32 layer's gradients (from the bf16 inputs' values) for dY."""
    leaves = [inp[k].detach().float().requires_grad_() for k in ("x", "w", "w1", "w2")]
    y = layer_fp32(leaves[0], inp["ids"], *leaves[1:])
    g = torch.autograd.grad(y, leaves, inp["dy"].float())
    return dict(zip(("dx", "dw", "dw1", "dw2"), g))


def check_grads(grads, ref):
    """{"rel": {grad: rel L2}, "worst": the largest (NaN if any is NaN or a gradient is missing)}."""
    rel = {k: (hp.rel_l2(grads[k], ref[k]) if k in grads and grads[k].shape == ref[k].shape else math.nan)
           for k in GRADS}
    worst = math.nan if any(math.isnan(v) for v in rel.values()) else max(rel.values())
    return {"rel": rel, "worst": worst}


def verdict(check):
    """None if every gradient is within BOUND, else the cell's text."""
    if check["worst"] < BOUND:
        return None
    bad = [f"{GRADS[k]} {v:.1e}" for k, v in check["rel"].items() if not v < BOUND]
    return f"wrong: rel L2 {', '.join(bad)} > {BOUND:g}"


# --- torch._grouped_mm with autograd ---------------------------------------------------

def torch_backward(inp):
    """(backward, names): the grouped_mm layer's forward run now, its graph retained;
    backward() is torch.autograd.grad of it for dY: the gradients in `names`' order."""
    names = ("dx", "dw", "dw1", "dw2")
    leaves = [inp[k].detach().clone().requires_grad_() for k in ("x", "w", "w1", "w2")]
    x, w, w1, w2 = leaves
    y = hp.torch_grouped_layer(x, inp["ids"], w, w1.transpose(1, 2), w2.transpose(1, 2))
    dy = inp["dy"]
    return (lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)), names


def capture_on(stream):
    """A capture function for hp.timed that captures on `stream` (where the forward
    ran: autograd runs each backward op on its forward op's stream)."""
    def capture(fn):
        fn()  # warm-up: allocator, lazy init
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            fn()
        return g
    return capture


def bench_torch(inp, ref):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # forward, check and timing all on one side stream
        backward, names = torch_backward(inp)
        check = check_grads(dict(zip(names, backward())), ref)
        wrong = verdict(check)
        if wrong:
            return {"wrong": wrong, **check}
        us, how = hp.timed(backward, capture_on(stream))
    torch.cuda.current_stream().wait_stream(stream)
    return {"us": us, "how": how, **check}


# --- jax.lax.ragged_dot's VJP ------------------------------------------------------------

def jax_vjp(inp):
    """(vjp, dy, to_torch): jax.vjp of h200_peers.jax_layer under jit, run now; vjp(f, dy)
    the jitted VJP function; to_torch(cotangents) gives {dx, dw, dw1, dw2} in torch fp32 in
    the reference's layouts (W1 [E, 2I, H], W2 [E, H, I])."""
    import jax, jax.numpy as jnp
    import numpy as np
    dev = inp["x"].device
    xj, dyj = hp.to_jax_bf16(inp["x"]), hp.to_jax_bf16(inp["dy"])
    w1j, w2j = hp.to_jax_bf16(inp["w1"].transpose(1, 2)), hp.to_jax_bf16(inp["w2"].transpose(1, 2))
    idsj, wj = jnp.asarray(inp["ids"].cpu().numpy()), jnp.asarray(inp["w"].cpu().numpy())
    forward = jax.jit(lambda x, w, a, b, ids: jax.vjp(lambda *p: hp.jax_layer(p[0], ids, *p[1:]), x, w, a, b))
    _, f = forward(xj, wj, w1j, w2j, idsj)
    vjp = jax.jit(lambda f, dy: f(dy))

    def to_torch(cts):
        t = [torch.from_numpy(np.array(c.astype(jnp.float32))).to(dev) for c in cts]
        return {"dx": t[0], "dw": t[1], "dw1": t[2].transpose(1, 2), "dw2": t[3].transpose(1, 2)}
    return (lambda: vjp(f, dyj)), to_torch


def bench_jax(inp, ref):
    import jax
    vjp, to_torch = jax_vjp(inp)
    check = check_grads(to_torch(jax.block_until_ready(vjp())), ref)
    wrong = verdict(check)
    if wrong:
        return {"wrong": wrong, **check}
    return {"us": hp.host_time(lambda: jax.block_until_ready(vjp())), "how": "host", **check}


# --- flytune's search summary --------------------------------------------------------------

def flytune_times(summary, where):
    """{tokens: {"backward": {us, kernel}, "forward": {us, kernel}}} from the layer winners
    of a `flytune search --json` summary (a winner without a pass is the forward's)."""
    if not isinstance(summary, dict) or not isinstance(summary.get("winners"), list):
        raise SystemExit(f"backward_peers: {where}: not a `flytune search --json` summary (no winners list)")
    out = {}
    for w in summary["winners"]:
        if w.get("kind") != "layer":
            continue
        try:
            out.setdefault(int(w["tokens"]), {})[w.get("pass", "forward")] = {"us": float(w["median_us"]),
                                                                             "kernel": w["kernel"]}
        except (KeyError, TypeError, ValueError) as e:
            raise SystemExit(f"backward_peers: {where}: a layer winner lacks tokens, median_us or kernel ({e})")
    return out


def flytune_for(items, problem, first_problem):
    """The times of the --flytune-json summary given for `problem` (a bare PATH: the first problem's)."""
    for item in items or []:
        key, sep, path = item.rpartition("=")
        if (key if sep else first_problem) != problem:
            continue
        try:
            with open(path) as f:
                summary = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"backward_peers: --flytune-json {item}: {e}")
        return flytune_times(summary, path)
    return {}


# --- one problem ---------------------------------------------------------------------

def bench_row(s, T, ceil, flytune, args, clock, gen):
    row = {"T": T, "floor": backward_floor_us(s, T, ceil), "fwd_floor": hp.floor_us(s, T, ceil["gemm"], ceil["copy"])}
    row["flops"], row["bytes"] = backward_work(s, T)
    bwd, fwd = (flytune.get(T, {}).get(p) or {} for p in ("backward", "forward"))
    row.update(flytune=bwd.get("us"), flytune_kernel=bwd.get("kernel"), flytune_fwd=fwd.get("us"),
               flytune_fwd_kernel=fwd.get("kernel"))
    if clock.left() < 20:
        row["skipped"] = "no time left in --budget-s"
        return row
    inp = layer_inputs(s, T, gen)
    try:
        ref = reference_grads(inp)
    except Exception as e:  # e.g. out of memory: the row says so, the next one runs
        row["skipped"] = f"the fp32 reference failed: {hp.first_line(e)}"[:120]
        return row
    if not args.skip_torch:
        row["torch"] = hp.run_peer(lambda: bench_torch(inp, ref), clock, 15)
        torch.cuda.empty_cache()
    if not args.skip_jax:
        row["jax"] = hp.run_peer(lambda: bench_jax(inp, ref), clock, 30)
    del inp, ref
    torch.cuda.empty_cache()
    return row


# --- Markdown ---------------------------------------------------------------------------

METHOD = """\
One process measures the ceilings, then per problem and token count makes one bf16 layer
(X, W1, W2, uniform top-k routing, dY) and its fp32 reference gradients (the layer in fp32
from the same values, a loop over experts, autograd): dX, dW1, dW2, d(topk_weights). Each
peer's gradients are checked against them before it is timed (rel L2 of each at most 2e-2;
the worst shown; over it the cell says wrong and is not timed). torch._grouped_mm autograd:
bench/h200_peers.py's grouped_mm layer (sort, gather, two grouped GEMMs, SwiGLU, weighted
index_add), its forward run once outside the timed region with the graph retained, then
`torch.autograd.grad(y, (x, w, w1, w2), dy, retain_graph=True)` alone, graph-captured on the
forward's stream: 20 replays, median, a 256 MiB L2 flush inside the timed region with its
own time subtracted (where capture is refused: eager, the reason in the cell).
jax.lax.ragged_dot VJP: the same layer (h200_peers.jax_layer), `jax.vjp` under jit once, then
the VJP function alone, jitted, on its residuals and dY, timed on the host around
`block_until_ready` (includes dispatch; no L2 flush), median of 10. flytune: the layer
winners of pass backward and forward of the given `flytune search --pass both --json`
(each program verified against the CPU backward before it is timed; events around the
whole program, L2 flushed). Backward floor = max(12·T·k·H·I FLOPs at the same-run bf16 GEMM
rate, bytes at the same-run copy rate); bytes = the experts uniform routing touches
(expected count) x 3·H·I·2 read (W1, W2) and as much written (dW1, dW2 in bf16) + X and dY
read + dX written. The forward's floor as bench/h200_peers.py's; forward + backward's floor
is the sum of both. "torch / flytune" = torch's time / flytune's backward time (issue 34's
target >= 1.3x), "VJP / flytune" likewise (target >= 2x); fwd + bwd target >= 70%."""


pct = hp.pct


def peer_cell(row, key):
    c = row.get(key)
    if not c or c.get("us") is None:
        return hp.untimed_cell(c, 90)
    how = "" if c.get("how") in ("graph", "host") else f", {c['how']}"
    return f"{c['us']:.1f} ({pct(row['floor'], c['us'])}, {c['worst']:.1e}{how})"


def ratio(row, key):
    us, ft = (row.get(key) or {}).get("us"), row.get("flytune")
    return f"{us / ft:.2f}x" if us and ft else "-"


def problem_table(p):
    head = ["tokens", "backward floor us", "flytune backward us (% floor)",
            f"{PEERS['torch']} us (% floor, worst rel L2)", f"{PEERS['jax']} us (% floor, worst rel L2)",
            f"torch / flytune (>= {TARGET['torch']}x)", f"VJP / flytune (>= {TARGET['jax']:g}x)",
            "fwd + bwd floor us", f"flytune fwd + bwd us (% floor, >= {100 * TARGET['fwd_bwd']:.0f}%)"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for row in p["rows"]:
        ft, fwd = row.get("flytune"), row.get("flytune_fwd")
        both_floor = row["floor"] + row["fwd_floor"]
        cells = [str(row["T"]), f"{row['floor']:.0f}", f"{ft:.1f} ({pct(row['floor'], ft)})" if ft else "-"]
        if row.get("skipped"):
            cells += [row["skipped"]] * 4
        else:
            cells += [peer_cell(row, "torch"), peer_cell(row, "jax"), ratio(row, "torch"), ratio(row, "jax")]
        cells += [f"{both_floor:.0f}", f"{ft + fwd:.1f} ({pct(both_floor, ft + fwd)})" if ft and fwd else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    kernels = [f"{r['T']}: `{r['flytune_kernel']}`" for r in p["rows"] if r.get("flytune_kernel")]
    if kernels:
        lines += ["", "flytune's backward winners (tokens: program): " + "; ".join(kernels) + "."]
    return lines


def markdown(report):
    c = report["ceilings"]
    lines = hp.report_head(report, "the backward pass beside its peers", f"torch {report['torch']}, jax {report['jax']}",
                           METHOD) + [
             f"Same-run ceilings: dense bf16 GEMM {c['gemm']/1e12:.0f} TFLOP/s (8192^3), HBM copy {c['copy']/1e12:.2f} TB/s."]
    for p in report["problems"]:
        s = p["shape"]
        lines += ["", f"### {p['name']} (E {s['E']}, H {s['H']}, I {s['I']}, top-{s['K']})", ""]
        lines += problem_table(p) if p.get("rows") else [f"Not measured: {p.get('skipped', 'no rows')}."]
    return "\n".join(lines) + "\n"


def jax_version():
    try:
        import jax
        return jax.__version__
    except ImportError:
        return "none"


def main():
    ap = hp.run_parser(__doc__, PROBLEMS, TOKENS, ("torch", "jax"))
    ap.add_argument("--flytune-json", action="append", metavar="[PROBLEM=]PATH",
                    help="a `flytune search --pass both --json` summary of PROBLEM (bare PATH: the first problem); "
                         "its layer winners of pass backward and forward fill the flytune columns")
    args = ap.parse_args()
    tokens = hp.token_list(args.tokens)
    shapes = [hp.preset_shape(n) for n in args.problems.split(",")]
    for item in args.flytune_json or []:
        key, sep, _ = item.rpartition("=")
        if sep and key not in {s.name for s in shapes}:
            raise SystemExit(f"backward_peers: --flytune-json {item}: '{key}' is not one of --problems {args.problems}")
    flytune = {s.name: flytune_for(args.flytune_json, s.name, shapes[0].name) for s in shapes}
    if not torch.cuda.is_available():
        raise SystemExit("backward_peers: no CUDA GPU (this bench runs on one; its CPU tests: "
                         "python/tests/test_bench_backward.py)")
    clock = hp.Clock(args.budget_s)
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference in fp32
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "jax": jax_version(), "command": "python3 " + shlex.join(sys.argv),
              "tokens": tokens, "problems": []}
    gemm, copy, _ = hp.ceilings()
    torch.cuda.empty_cache()
    report["ceilings"] = ceil = {"gemm": gemm, "copy": copy}
    print(f"ceilings: dense bf16 GEMM {gemm/1e12:.0f} TFLOP/s, HBM copy {copy/1e12:.2f} TB/s", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for s in shapes:
        p = {"name": s.name, "shape": vars(s), "rows": []}
        report["problems"].append(p)
        if clock.left() < 30:
            p["skipped"] = "no time left in --budget-s"
            continue
        for T in tokens:
            p["rows"].append(bench_row(s, T, ceil, flytune[s.name], args, clock, gen))
            print(json.dumps({"problem": s.name, **p["rows"][-1]}), flush=True)
            hp.write_report(report, args.out, markdown)  # after every row: a run cut short keeps what it measured
    hp.write_report(report, args.out, markdown)
    print(markdown(report))


if __name__ == "__main__":
    main()
