#!/usr/bin/env python3
"""Side-by-side MoE-layer timings on one GPU, in one run, over the public shape
suite (issue 18: bf16, SwiGLU, uniform routing; shapes are flytune's presets):
  mixtral-8x7b, mixtral-8x7b-tp8, qwen3-30b, qwen3-235b, deepseek-v3, olmoe,
  gpt-oss-120b-like (or --problems with presets / name:E:H:I:K shapes).
Per problem, in this order (so a run cut short keeps every problem it finished):
  - flytune's tuned layer: `flytune search --graph --json` (every variant verified
    before it is timed; the layer winners timed by graph replay with L2 flushed),
    then `flytune export --check gpu` (every bucket re-checked through the runtime);
  - the exported layer through the runtime as users call it (the flytune.torch op on
    libflytune_runtime, when the Python package is importable), on the peers'
    inputs, graph-captured, L2 flushed: its time must agree with the search's
    within 5% (the "runtime / search" column);
  - the peers a user would pick instead: torch._grouped_mm (graph-captured), our
    tuned Triton fused-MoE (bench/triton_moe.py, a few configs per token count,
    the fastest kept, graph-captured) and jax.lax.ragged_dot under jit (T <= 4096).
Every output is checked against an fp32 reference (rel L2). Same-run ceilings:
dense bf16 GEMM, HBM copy and a read-only stream; floors from them, and the
shares of the H200 datasheet peaks (4.8 TB/s, 989 TFLOP/s dense bf16) beside.
Writes (--out) a Markdown section for docs/PERFORMANCE.md (date, GPU, commit,
command, per problem a ratio table and a per-stage table); raw numbers go to
OUT.json, each search's JSON to search_NAME.json beside OUT.

Usage (on the GPU machine):
  python3 bench/h200_peers.py --flytune build/release/cli/flytune --out $OUT/bench.md
  options: --problems qwen3-30b,olmoe --tokens 1,16,64 --skip-triton --skip-jax
           --budget-s 540 (skip what no longer fits, say so in the table)
           --search-json 'dir/search_{name}.json' (reuse saved searches)

Timing: CUDA events after warm-up, median of repetitions; graph-captured layers
replay after a 256 MiB L2 flush inside the timed region, whose own time is
subtracted. JAX is timed on the host around block_until_ready (no flush).
"""
import argparse, json, math, os, re, shlex, subprocess, sys, time
from dataclasses import dataclass

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch
import torch
# What the peer benches share (fp8_peers.py and backward_peers.py take them as hp.*):
from peer_common import (Clock, capture, ceilings, cuda_time, first_line, flush_buffer, host_time, pct,  # noqa: F401
                         report_head, run_parser, run_peer, time_graph, timed, token_list, untimed_cell, write_report)

SUITE = ["mixtral-8x7b", "mixtral-8x7b-tp8", "qwen3-30b", "qwen3-235b", "deepseek-v3", "olmoe", "gpt-oss-120b-like"]
TOKENS = [1, 16, 64, 512, 4096, 16384]
JAX_MAX_TOKENS = 4096
ERR_LIMIT = 2e-2  # a Triton config above this rel L2 is broken, not slow: never the winner
DATASHEET_TBPS, DATASHEET_TFLOPS = 4.8, 989.0  # H200 SXM: HBM3e bandwidth, dense bf16 tensor-core peak
AGREE = 0.05  # the runtime's time and the search's must agree within this share


@dataclass
class Shape:
    name: str
    E: int
    H: int
    I: int
    K: int


def active_experts(s, T):
    """Expected experts hit by T tokens under uniform top-k routing."""
    return s.E * (1 - (1 - s.K / s.E) ** T)


def layer_work(s, T):
    """(FLOPs, bytes) of the layer: the touched experts' weights, X and Y."""
    return 6.0 * T * s.K * s.H * s.I, active_experts(s, T) * 3 * s.H * s.I * 2 + 2 * T * s.H * 2


def floor_us(s, T, gemm, rate):
    flops, bytes_ = layer_work(s, T)
    return max(flops / gemm, bytes_ / rate) * 1e6


def stage_floors_us(s, T, gemm, copy):
    """Floors of stage 1 (X @ W1^T, 2I wide) and stage 2 (H @ W2^T), weights only."""
    act = active_experts(s, T)
    s1 = max(2.0 * T * s.K * s.H * 2 * s.I / gemm, act * 2 * s.I * s.H * 2 / copy)
    s2 = max(2.0 * T * s.K * s.I * s.H / gemm, act * s.H * s.I * 2 / copy)
    return s1 * 1e6, s2 * 1e6


def routing(T, gen, experts=8, topk=2):
    logits = torch.randn(T, experts, device=gen.device, generator=gen)
    w, ids = torch.topk(torch.softmax(logits, -1), topk, dim=-1)
    return ids.to(torch.int32), (w / w.sum(-1, keepdim=True)).float()


def reference(x, ids, w, w1, w2):
    E, I, H = w2.shape[0], w2.shape[2], x.shape[1]
    y = torch.zeros(x.shape[0], H, device=x.device, dtype=torch.float32)
    for e in range(E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        xe = x[tok].float()
        gu = xe @ w1[e].float().t()
        h = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]).to(torch.bfloat16).float()
        y.index_add_(0, tok, (h @ w2[e].float().t()) * w[tok, slot][:, None])
    return y


def rel_l2(out, ref):
    return (out.float() - ref).norm().item() / ref.norm().item()


def preset_shape(name):
    """name:E:H:I:K, or a preset's shape from generator/problem.cpp (its one home)."""
    if ":" in name:
        n, *dims = name.split(":")
        return Shape(n, *map(int, dims))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(repo, "generator", "problem.cpp")) as f:
        m = re.search(r'ProblemPreset\{"' + re.escape(name) + r'",\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)', f.read())
    if not m:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: no preset '{name}' in generator/problem.cpp "
                         "(or give name:E:H:I:K)")
    return Shape(name, *map(int, m.groups()))


# --- peers ---------------------------------------------------------------------

def torch_grouped_layer(x, ids, w, w1t, w2t):
    """Sort pairs by expert, grouped GEMMs, SwiGLU, weighted scatter-add."""
    E, I, H, K = w1t.shape[0], w2t.shape[1], x.shape[1], ids.shape[1]
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(E, device=x.device, dtype=torch.int32).scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    tok = order // K
    a = x[tok]
    gu = torch._grouped_mm(a, w1t, offs=offs)
    h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
    o = torch._grouped_mm(h, w2t, offs=offs)
    o = o.float() * w.reshape(-1)[order][:, None]
    y = torch.zeros(x.shape[0], H, device=x.device, dtype=torch.float32).index_add_(0, tok, o)
    return y.to(torch.bfloat16)


def bench_torch(x, ids, w, w1, w2, ref):
    w1t = w1.transpose(1, 2)  # [E, H, 2I], column-major as _grouped_mm wants
    w2t = w2.transpose(1, 2)  # [E, I, H]
    err = rel_l2(torch_grouped_layer(x, ids, w, w1t, w2t), ref)
    static_x = x.clone()
    g = capture(lambda: torch_grouped_layer(static_x, ids, w, w1t, w2t))
    return time_graph(g), err


def bench_triton(x, ids, w, w1, w2, ref):
    """Each candidate config checked and timed (graph-captured, 10 replays),
    the fastest correct one timed again like the other peers. Returns
    (us, rel L2, config name, every config's outcome)."""
    import triton_moe  # here, so a machine without Triton loses only this peer
    tried, best = [], None
    for cfg in triton_moe.candidate_configs(ids.numel(), x.shape[1], w2.shape[2]):
        name = triton_moe.config_name(cfg)
        try:
            err = rel_l2(triton_moe.moe_layer(x, ids, w, w1, w2, cfg), ref)
            if not err < ERR_LIMIT:  # also catches NaN
                tried.append({"config": name, "err": err})
                continue
            us = time_graph(capture(lambda: triton_moe.moe_layer(x, ids, w, w1, w2, cfg)), reps=10)
        except Exception as e:  # e.g. out of shared memory: skip the config
            tried.append({"config": name, "error": str(e)[:200]})
            continue
        tried.append({"config": name, "us": us, "err": err})
        if best is None or us < best[0]:
            best = (us, cfg, err)
    if best is None:
        raise RuntimeError("no Triton config ran: " + "; ".join(f"{t['config']}: {t.get('error', t.get('err'))}" for t in tried))
    _, cfg, err = best
    us = time_graph(capture(lambda: triton_moe.moe_layer(x, ids, w, w1, w2, cfg)))
    return us, err, triton_moe.config_name(cfg), tried


_JAX_WEIGHTS = {}


def jax_layer(xj, idsj, wj, w1j, w2j):
    """The layer in JAX: pairs sorted by expert, jax.lax.ragged_dot for both stages
    (fp32 accumulation, h in bf16), weighted scatter-add; w1j [E, H, 2I], w2j [E, I, H]."""
    import jax, jax.numpy as jnp
    E, I, H, K = w1j.shape[0], w2j.shape[1], xj.shape[1], idsj.shape[1]
    flat = idsj.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    sizes = jnp.bincount(flat, length=E).astype(jnp.int32)
    tok = order // K
    gu = jax.lax.ragged_dot(xj[tok], w1j, sizes, preferred_element_type=jnp.float32)
    h = (jax.nn.silu(gu[:, :I]) * gu[:, I:]).astype(jnp.bfloat16)
    o = jax.lax.ragged_dot(h, w2j, sizes, preferred_element_type=jnp.float32)
    o = o * wj.reshape(-1)[order][:, None]
    return jnp.zeros((xj.shape[0], H), jnp.float32).at[tok].add(o).astype(jnp.bfloat16)


def to_jax_bf16(t):
    import jax.numpy as jnp
    import ml_dtypes
    return jnp.asarray(t.contiguous().view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16))


def bench_jax(x, ids, w, w1, w2, ref):
    import jax, jax.numpy as jnp
    import numpy as np
    if _JAX_WEIGHTS.get("source") is not w1:  # converted once per problem's weights
        _JAX_WEIGHTS.clear()
        _JAX_WEIGHTS["w1"] = to_jax_bf16(w1.transpose(1, 2))  # [E, H, 2I]
        _JAX_WEIGHTS["w2"] = to_jax_bf16(w2.transpose(1, 2))  # [E, I, H]
        _JAX_WEIGHTS["source"] = w1
    xj = to_jax_bf16(x)
    w1j, w2j = _JAX_WEIGHTS["w1"], _JAX_WEIGHTS["w2"]
    idsj = jnp.asarray(ids.cpu().numpy())
    wj = jnp.asarray(w.cpu().numpy())

    layer = jax.jit(jax_layer)
    out = layer(xj, idsj, wj, w1j, w2j).block_until_ready()
    err = rel_l2(torch.from_numpy(np.asarray(out.astype(jnp.float32))).cuda(), ref)
    return host_time(lambda: layer(xj, idsj, wj, w1j, w2j).block_until_ready()), err


# --- flytune -----------------------------------------------------------------------

def run_tool(cmd, limit_s):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(limit_s, 1))
    if r.returncode != 0:
        print(r.stderr[-2000:], flush=True)
        raise RuntimeError(f"{os.path.basename(cmd[0])} {cmd[1]} exited {r.returncode}: {r.stderr.strip()[-150:]}")
    return r.stdout, time.time() - t0


def flytune_search(args, name, ceil, limit_s):
    """flytune's `search --json` summary for problem `name`: loaded from
    --search-json, or run here (in its own process, before the peers take GPU
    memory) into a database of its own and saved beside --out. Returns
    (summary, database path or None, seconds)."""
    if args.search_json:
        with open(args.search_json.format(name=name)) as f:
            return json.load(f), None, 0.0
    out_dir = os.path.dirname(args.out) or "."
    problem = ["--problem", name]
    if ":" in name:  # name:E:H:I:K
        n, e, h, i, k = name.split(":")
        problem = ["--experts", e, "--hidden", h, "--inter", i, "--topk", k]
    # One database for every problem (--db): the cost model of --strategy model
    # learns from the problems searched before; else one per problem.
    db = args.db or os.path.join(args.work, f"{name.split(':')[0]}.db")
    cmd = [args.flytune, "search", *problem, "--tokens", args.tokens, "--db", db, "--seed", "42",
           "--graph", "--json", "--ceilings", f"{ceil['gemm']/1e12:.1f},{ceil['copy']/1e12:.3f}",
           "--strategy", strategy_for(args, name)]
    if args.space:
        cmd += ["--space", args.space]
    out, secs = run_tool(cmd, limit_s)
    with open(os.path.join(out_dir, f"search_{name.split(':')[0]}.json"), "w") as f:
        f.write(out)
    print(f"flytune search {name} done in {secs:.0f} s", flush=True)
    return json.loads(out), db, secs


def strategy_for(args, name):
    """--strategy-for name=strategy,... else --strategy."""
    for item in filter(None, (args.strategy_for or "").split(",")):
        n, _, s = item.partition("=")
        if n == name.split(":")[0]:
            return s
    return args.strategy


def model_check(args):
    """`flytune db model-check --json` on the shared database: how often the cost
    model's pick holds the winner of the buckets that were timed in full."""
    if not args.db or not os.path.exists(args.db):
        return None
    try:
        out = subprocess.run([args.flytune, "db", "--db", args.db, "model-check", "--json"], capture_output=True, text=True,
                             timeout=300)
        return json.loads(out.stdout) if out.returncode == 0 else {"error": (out.stderr or out.stdout).strip()[-300:]}
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        return {"error": str(e)[:300]}


def flytune_export(args, name, db, limit_s):
    """`flytune export --check gpu` (every bucket re-checked through the runtime); returns the folder."""
    folder = os.path.join(args.work, f"{name.split(':')[0]}-export")
    problem = ["--problem", name] if ":" not in name else []
    out, secs = run_tool([args.flytune, "export", "--db", db, *problem, "--out", folder, "--force", "--check", "gpu"], limit_s)
    print(f"flytune export {name} in {secs:.0f} s: {out.strip().splitlines()[-1] if out.strip() else ''}", flush=True)
    return folder


def runtime_op():
    """The flytune.torch op on libflytune_runtime, or the reason it is not importable."""
    try:
        import flytune, flytune.torch  # noqa: F401
        return flytune, None
    except Exception as e:  # the runtime column then says why
        return None, f"flytune package: {e}"[:120]


def bench_runtime(ft, export, x, ids, w, w1, w2, ref):
    """The exported layer as a user calls it: torch.ops.flytune.moe_layer, graph-captured, L2 flushed."""
    op = lambda: torch.ops.flytune.moe_layer(x, w1, w2, w, ids, export.key)
    err = rel_l2(op(), ref)  # the first call also arranges the weights a plan needs (before capture)
    return time_graph(capture(op)), err


def winners_by_kind(summary):
    """{kind: {tokens: winner}} for kinds moe1, moe2, layer."""
    out = {"moe1": {}, "moe2": {}, "layer": {}}
    for w in (summary or {}).get("winners", []):
        out.setdefault(w["kind"], {})[w["tokens"]] = w
    return out


def stage_row(s, T, wins, ceil):
    """Where flytune's time goes at T: stage winners (timed alone) and the
    layer, each beside its floor."""
    f1, f2 = stage_floors_us(s, T, ceil["gemm"], ceil["copy"])
    med = lambda kind: wins[kind].get(T, {}).get("median_us")
    return {"T": T, "stage1_floor": f1, "stage2_floor": f2, "layer_floor": floor_us(s, T, ceil["gemm"], ceil["copy"]),
            "stage1": med("moe1"), "stage2": med("moe2"), "layer": med("layer"),
            "stage1_kernel": wins["moe1"].get(T, {}).get("kernel"), "stage2_kernel": wins["moe2"].get(T, {}).get("kernel"),
            "layer_kernel": wins["layer"].get(T, {}).get("kernel")}


# --- one problem -------------------------------------------------------------------

def peer(row, key, fn, clock, need_s=5.0):
    """Runs one peer into row[key] (+ key_err, extras); a failure or no time left is the cell's text."""
    if clock.left() < need_s:
        row[key + "_error"] = "no time left in --budget-s"
        return
    try:
        res = fn()
        row[key], row[key + "_err"] = res[0], res[1]
        if len(res) > 2:
            row[key + "_config"], row[key + "_tried"] = res[2], res[3]
    except Exception as e:
        row[key + "_error"] = str(e)[:200]


def bench_problem(s, tokens, wins, export, args, ceil, gen, clock):
    """flytune's runtime and the peers at every token count for shape s; a peer
    that fails is reported in its cell, not fatal."""
    w1 = (torch.randn(s.E, 2 * s.I, s.H, device="cuda", generator=gen) / math.sqrt(s.H)).to(torch.bfloat16)
    w2 = (torch.randn(s.E, s.H, s.I, device="cuda", generator=gen) / math.sqrt(s.I)).to(torch.bfloat16)
    ft, ft_error = runtime_op() if export else (None, "no export")
    ft_export = None
    if ft:
        try:
            ft_export = ft.load(export)
        except Exception as e:
            ft_error = f"flytune.load: {e}"[:120]
    rows = []
    for T in tokens:
        x = torch.randn(T, s.H, device="cuda", generator=gen).to(torch.bfloat16)
        ids, w = routing(T, gen, s.E, s.K)
        ref = reference(x, ids, w, w1, w2)
        flops, bytes_ = layer_work(s, T)
        row = {"T": T, "floor": floor_us(s, T, ceil["gemm"], ceil["copy"]),
               "read_floor": floor_us(s, T, ceil["gemm"], ceil["read"]),
               "datasheet_floor": max(flops / (DATASHEET_TFLOPS * 1e12), bytes_ / (DATASHEET_TBPS * 1e12)) * 1e6,
               "flytune": wins["layer"].get(T, {}).get("median_us"),
               "flytune_kernel": wins["layer"].get(T, {}).get("kernel")}
        if ft_export is not None:
            peer(row, "runtime", lambda: bench_runtime(ft, ft_export, x, ids, w, w1, w2, ref), clock)
        else:
            row["runtime_error"] = ft_error
        peer(row, "torch", lambda: bench_torch(x, ids, w, w1, w2, ref), clock)
        if not args.skip_triton:
            peer(row, "triton", lambda: bench_triton(x, ids, w, w1, w2, ref), clock, need_s=20)
        if not args.skip_jax and T <= args.jax_max_tokens:
            peer(row, "jax", lambda: bench_jax(x, ids, w, w1, w2, ref), clock, need_s=15)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_tried")}), flush=True)
        rows.append(row)
        del x, ids, w, ref
        torch.cuda.empty_cache()
    del w1, w2
    _JAX_WEIGHTS.clear()
    torch.cuda.empty_cache()
    return rows


# --- Markdown -----------------------------------------------------------------------

METHOD = """\
One process measures the ceilings, then per problem runs `flytune search --graph --json`
(every variant verified against its reference on fresh inputs before it is timed; layer
winners timed by graph replay with L2 flushed) and `flytune export --check gpu` (every
bucket re-checked through libflytune_runtime), then times the exported layer through the
runtime as a user calls it (the `flytune::moe_layer` torch op, graph-captured, on the
peers' inputs) and the peers, each output checked against an fp32 reference (rel L2
shown; bf16 bound 8e-3). "flytune (search)" is the search's own graph-replay time of its
layer winner; "runtime / search" must be within 1 +- 0.05. torch._grouped_mm: the whole
layer (sort, gather, two grouped GEMMs, SwiGLU, weighted index_add) graph-captured.
Triton fused-MoE: our kernels (bench/triton_moe.py: align in torch, stage 1 with SwiGLU
fused, stage 2 with the routed weight fused, summed over k in torch), graph-captured; per
token count a few tile configs are checked and timed (10 replays) and the fastest is
timed again. Graph-captured layers: 20 replays, median, a 256 MiB flush inside the timed
region with its own time subtracted. jax.lax.ragged_dot: the same layer under jit, timed
on the host around `block_until_ready` (includes dispatch; no L2 flush), T <= 4096.
Floor = max(FLOPs at the same-run GEMM rate, bytes at the same-run copy rate); bytes =
the experts uniform routing touches (expected count) x 3·H·I·2 + X + Y. "read floor" uses
the same-run read-only stream rate instead (a read-mostly layer can beat the copy-rate
floor); "datasheet" uses 4.8 TB/s and 989 TFLOP/s. "vs X" = X's time / flytune's
runtime time (above 1: flytune faster)."""

STAGE_NOTE = """\
Per stage: flytune's stage-1 and stage-2 winners timed alone (L2 flushed), each
beside its own floor (stage 1: FLOPs 2·T·k·H·2I, bytes active·2I·H·2; stage 2:
FLOPs 2·T·k·I·H, bytes active·H·I·2; weights only). "layer − stages" is the
layer's time beyond the two stage winners (align, clears, reduce, padding to the
pair's tile, launch gaps)."""


def peer_cell(row, k):
    if row.get(k) is None:
        return row.get(k + "_error", "-")[:60].replace("|", "/").replace("\n", " ")
    extra = f", {row[k + '_err']:.1e}" if (k + "_err") in row else ""
    return f"{row[k]:.1f} ({pct(row['floor'], row[k])}{extra})"


def ratio(row, k, base="runtime"):
    f = row.get(base) or row.get("flytune")
    return f"{row[k] / f:.2f}x" if f and row.get(k) else "-"


def ratio_table(rows, search_error):
    lines = ["| tokens | floor us | read floor us | flytune (search) us (% floor) | flytune runtime us (% floor, rel L2) "
             "| runtime / search | % read floor | % datasheet | torch._grouped_mm us (% floor, rel L2) "
             "| Triton fused-MoE us (% floor, rel L2) | jax ragged_dot us (% floor, rel L2) "
             "| vs torch | vs Triton | vs jax |",
             "| --- " * 14 + "|"]
    for row in rows:
        if row.get("flytune") is None and search_error:
            row = dict(row, flytune_error=search_error)
        best = row.get("runtime") or row.get("flytune")
        agree = f"{row['runtime'] / row['flytune']:.3f}" if row.get("runtime") and row.get("flytune") else "-"
        shares = [pct(row[f], best) if best else "-" for f in ("read_floor", "datasheet_floor")]
        lines.append(f"| {row['T']} | {row['floor']:.0f} | {row['read_floor']:.0f} | {peer_cell(row, 'flytune')} "
                     f"| {peer_cell(row, 'runtime')} | {agree} | {shares[0]} | {shares[1]} | {peer_cell(row, 'torch')} "
                     f"| {peer_cell(row, 'triton')} | {peer_cell(row, 'jax')} "
                     f"| {ratio(row, 'torch')} | {ratio(row, 'triton')} | {ratio(row, 'jax')} |")
    configs = [f"{r['T']}: {r['triton_config']}" for r in rows if r.get("triton_config")]
    if configs:
        lines += ["", "Triton configs chosen (tokens: BLOCK_M/N/K, warps, stages): " + "; ".join(configs) + "."]
    return lines


def stage_table(stage_rows):
    def t(us, floor):
        return f"{us:.1f} ({pct(floor, us)})" if us else "-"
    lines = ["| tokens | stage 1 floor us | stage 1 us (% floor) | stage 2 floor us | stage 2 us (% floor) "
             "| layer floor us | layer us (% floor) | layer − stages us | layer winner |",
             "| --- " * 9 + "|"]
    for r in stage_rows:
        gap = f"{r['layer'] - r['stage1'] - r['stage2']:.1f}" if r["layer"] and r["stage1"] and r["stage2"] else "-"
        lines.append(f"| {r['T']} | {r['stage1_floor']:.0f} | {t(r['stage1'], r['stage1_floor'])} | {r['stage2_floor']:.0f} "
                     f"| {t(r['stage2'], r['stage2_floor'])} | {r['layer_floor']:.0f} | {t(r['layer'], r['layer_floor'])} "
                     f"| {gap} | `{r['layer_kernel'] or '-'}` |")
    return lines


def markdown(report):
    c = report["ceilings"]
    lines = report_head(report, "flytune vs peers over the suite", f"Tool: `{report['tool']}`", METHOD) + [
             f"Same-run ceilings: dense bf16 GEMM {c['gemm']/1e12:.0f} TFLOP/s (8192^3), HBM copy "
             f"{c['copy']/1e12:.2f} TB/s, read-only stream {c['read']/1e12:.2f} TB/s."]
    for p in report["problems"]:
        shape = p.get("shape")
        head = f"### {p['name']}" + (f" (E {shape['E']}, H {shape['H']}, I {shape['I']}, top-{shape['K']})" if shape else "")
        lines += ["", head, ""]
        if p.get("search_s") is not None:
            lines += [f"flytune search: {p['search_s']:.0f} s for {len(report['tokens'])} buckets; export checked "
                      f"through the runtime: {'yes' if not p.get('search_error') else p['search_error']}.", ""]
        if not p.get("rows"):
            lines += [f"Not measured: {p.get('search_error') or p.get('skipped') or 'no rows'}."]
            continue
        lines += ratio_table(p["rows"], p.get("search_error"))
        lines += ["", STAGE_NOTE, ""]
        lines += stage_table(p["stages"])
    return "\n".join(lines) + "\n"


def tool_version(flytune):
    """`flytune --version`: the tool's commit and templates hash."""
    try:
        return subprocess.run([flytune, "--version"], capture_output=True, text=True).stdout.strip() or "?"
    except OSError as e:
        return f"? ({e})"


def manifest_shape(name, folder):
    """Shape of the export's one problem (its manifest.json: what the runtime serves)."""
    with open(os.path.join(folder, "manifest.json")) as f:
        problems = json.load(f)["problems"]
    if len(problems) != 1:
        raise RuntimeError(f"{name}: the export holds {len(problems)} problems, expected 1")
    p = problems[0]
    return Shape(name, p["experts"], p["hidden"], p["inter"], p["topk"])


def one_problem(name, args, tokens, ceil, gen, clock):
    p = {"name": name}
    summary, export, shape = None, None, None
    if ":" in name:  # name:E:H:I:K: the peers run even if flytune fails
        n, *dims = name.split(":")
        shape = Shape(n, *map(int, dims))
    try:
        summary, db, p["search_s"] = flytune_search(args, name, ceil, clock.left())
        if db:
            export = flytune_export(args, name, db, clock.left())
            shape = manifest_shape(name, export)
    except Exception as e:
        p["search_error"] = str(e)[:200]
    if shape is None:
        return p  # no shape to give the peers
    p["shape"] = vars(shape)
    wins = winners_by_kind(summary)
    p["rows"] = bench_problem(shape, tokens, wins, export, args, ceil, gen, clock)
    p["stages"] = [stage_row(shape, T, wins, ceil) for T in tokens]
    p["winners"] = (summary or {}).get("winners", [])
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flytune", required=True, help="the flytune binary")
    ap.add_argument("--out", required=True, help="Markdown output; OUT.json gets the raw numbers")
    ap.add_argument("--problems", default=",".join(SUITE), help="flytune presets or name:E:H:I:K shapes (default: the suite)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts, for every problem")
    ap.add_argument("--search-json", help="load flytune's search --json output per problem from this path "
                                          "({name} is replaced) instead of running the search (no runtime column)")
    ap.add_argument("--space", help="flytune's variant space (--space of flytune search; default: its default space)")
    ap.add_argument("--work", default="/tmp/flytune-bench", help="databases and exports")
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting work after this many seconds (0: none)")
    ap.add_argument("--skip-triton", action="store_true")
    ap.add_argument("--skip-jax", action="store_true")
    ap.add_argument("--jax-max-tokens", type=int, default=JAX_MAX_TOKENS, help="jax.lax.ragged_dot only up to this T")
    ap.add_argument("--db", help="one database for every problem's search (the cost model learns across them)")
    ap.add_argument("--strategy", default="halving", help="flytune search --strategy")
    ap.add_argument("--strategy-for", help="per problem: name=strategy,... (e.g. deepseek-v3=model)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    clock = Clock(args.budget_s)
    tokens = [int(t) for t in args.tokens.split(",")]
    torch.manual_seed(0)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
              "tool": tool_version(args.flytune), "command": "python3 " + shlex.join(sys.argv), "tokens": tokens, "problems": []}
    gemm, copy, read = ceilings()
    torch.cuda.empty_cache()
    report["ceilings"] = ceil = {"gemm": gemm, "copy": copy, "read": read}
    print(f"ceilings: dense bf16 GEMM {gemm/1e12:.0f} TFLOP/s, HBM copy {copy/1e12:.2f} TB/s, read {read/1e12:.2f} TB/s",
          flush=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for name in args.problems.split(","):
        if clock.left() < 30:
            report["problems"].append({"name": name, "skipped": "no time left in --budget-s"})
        else:
            report["problems"].append(one_problem(name, args, tokens, ceil, gen, clock))
        write_report(report, args.out, markdown)  # after every problem: a run cut short keeps what it measured
    report["model_check"] = model_check(args)
    write_report(report, args.out, markdown)
    print(markdown(report))


if __name__ == "__main__":
    main()
