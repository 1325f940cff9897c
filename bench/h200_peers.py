#!/usr/bin/env python3
"""Side-by-side MoE-layer timings on one GPU, in one run, for the Mixtral 8x7B
layer (bf16, H 4096, E 8, top-2, uniform routing) and its tensor-parallel
slices (I = 14336, 7168, 1792 by default):
  - same-run ceilings (dense bf16 GEMM, HBM copy) and the roofline floor;
  - flytune's tuned layer (`flytune search --graph --json --inter I`, or its
    saved JSON with --search-json) and its stage-1 / stage-2 winners;
  - the peers a user would pick instead: torch._grouped_mm (graph-captured),
    our own tuned Triton fused-MoE kernels (bench/triton_moe.py, a few configs
    per token count, the fastest kept, graph-captured) and jax.lax.ragged_dot
    under jit (I = 14336 and T <= 4096 only, to bound the run time).
Every peer output is checked against an fp32 reference (rel L2). Prints and
writes (--out) a Markdown section for docs/PERFORMANCE.md: date, GPU, command,
ceilings, and per slice a ratio table (each vs the floor, flytune vs each peer)
and a per-stage table (flytune's stage winners vs their own floors); the raw
numbers go to OUT.json, each search's JSON to search_iI.json beside OUT.

Usage (on the GPU machine):
  python3 bench/h200_peers.py --flytune build/release/cli/flytune --out $OUT/bench.md
  options: --tokens 1,16,64 --inter 14336 --skip-triton --skip-jax
           --search-json 'dir/search_i{inter}.json' (reuse saved searches)

Timing: CUDA events after warm-up, median of repetitions; graph-captured peers
replay after a 256 MiB L2 flush inside the timed region, whose own time is
subtracted. JAX is timed on the host around block_until_ready (no flush).
"""
import argparse, json, math, os, shlex, statistics, subprocess, sys, time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch
import torch

H, E, K = 4096, 8, 2
INTER_FULL = 14336  # Mixtral 8x7B unsliced; the TP degree of a slice is INTER_FULL // I
TOKENS = [1, 16, 64, 512, 4096, 16384]
INTERS = [14336, 7168, 1792]
JAX_MAX_TOKENS = 4096
ERR_LIMIT = 2e-2  # a Triton config above this rel L2 is broken, not slow: never the winner


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
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t, _, _ = cuda_time(lambda: a @ b, 10)
    gemm = 2 * 8192 ** 3 / (t * 1e-6)
    x = torch.empty(2 * 1024 ** 3, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    t, _, _ = cuda_time(lambda: y.copy_(x), 10)
    copy = 2 * x.numel() / (t * 1e-6)
    del a, b, x, y
    return gemm, copy


def active_experts(T):
    """Expected experts hit by T tokens under uniform top-k routing."""
    return E * (1 - (1 - K / E) ** T)


def floor_us(T, I, gemm, copy):
    flops = 6.0 * T * K * H * I
    bytes_ = active_experts(T) * 3 * H * I * 2 + 2 * T * H * 2
    return max(flops / gemm, bytes_ / copy) * 1e6


def stage_floors_us(T, I, gemm, copy):
    """Floors of stage 1 (X @ W1^T, 2I wide) and stage 2 (H @ W2^T), weights only."""
    s1 = max(2.0 * T * K * H * 2 * I / gemm, active_experts(T) * 2 * I * H * 2 / copy)
    s2 = max(2.0 * T * K * I * H / gemm, active_experts(T) * H * I * 2 / copy)
    return s1 * 1e6, s2 * 1e6


def routing(T, gen):
    logits = torch.randn(T, E, device="cuda", generator=gen)
    w, ids = torch.topk(torch.softmax(logits, -1), K, dim=-1)
    return ids.to(torch.int32), (w / w.sum(-1, keepdim=True)).float()


def reference(x, ids, w, w1, w2):
    I = w2.shape[2]
    y = torch.zeros(x.shape[0], H, device="cuda", dtype=torch.float32)
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


# --- peers ---------------------------------------------------------------------

def torch_grouped_layer(x, ids, w, w1t, w2t):
    """Sort pairs by expert, grouped GEMMs, SwiGLU, weighted scatter-add."""
    I = w2t.shape[1]
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(E, device="cuda", dtype=torch.int32).scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    tok = order // K
    a = x[tok]
    gu = torch._grouped_mm(a, w1t, offs=offs)
    h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
    o = torch._grouped_mm(h, w2t, offs=offs)
    o = o.float() * w.reshape(-1)[order][:, None]
    y = torch.zeros(x.shape[0], H, device="cuda", dtype=torch.float32).index_add_(0, tok, o)
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
    for cfg in triton_moe.candidate_configs(x.shape[0] * K, H, w2.shape[2]):
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


def to_jax_bf16(t):
    import jax.numpy as jnp
    import ml_dtypes
    return jnp.asarray(t.contiguous().view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16))


def bench_jax(x, ids, w, w1, w2, ref):
    import jax, jax.numpy as jnp
    import numpy as np
    I = w2.shape[2]
    if _JAX_WEIGHTS.get("inter") != I:
        _JAX_WEIGHTS.clear()
        _JAX_WEIGHTS["w1"] = to_jax_bf16(w1.transpose(1, 2))  # [E, H, 2I]
        _JAX_WEIGHTS["w2"] = to_jax_bf16(w2.transpose(1, 2))  # [E, I, H]
        _JAX_WEIGHTS["inter"] = I
    xj = to_jax_bf16(x)
    w1j, w2j = _JAX_WEIGHTS["w1"], _JAX_WEIGHTS["w2"]
    idsj = jnp.asarray(ids.cpu().numpy())
    wj = jnp.asarray(w.cpu().numpy())

    @jax.jit
    def layer(xj, idsj, wj, w1j, w2j):
        flat = idsj.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        sizes = jnp.bincount(flat, length=E).astype(jnp.int32)
        tok = order // K
        a = xj[tok]
        gu = jax.lax.ragged_dot(a, w1j, sizes, preferred_element_type=jnp.float32)
        h = (jax.nn.silu(gu[:, :I]) * gu[:, I:]).astype(jnp.bfloat16)
        o = jax.lax.ragged_dot(h, w2j, sizes, preferred_element_type=jnp.float32)
        o = o * wj.reshape(-1)[order][:, None]
        return jnp.zeros((xj.shape[0], H), jnp.float32).at[tok].add(o).astype(jnp.bfloat16)

    out = layer(xj, idsj, wj, w1j, w2j).block_until_ready()
    err = rel_l2(torch.from_numpy(np.asarray(out.astype(jnp.float32))).cuda(), ref)
    for _ in range(3):
        layer(xj, idsj, wj, w1j, w2j).block_until_ready()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        layer(xj, idsj, wj, w1j, w2j).block_until_ready()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times), err


# --- flytune -----------------------------------------------------------------------

def flytune_search(args, I, gemm, copy):
    """flytune's `search --json` summary for slice I: loaded from
    --search-json, or run here (in its own process, before the peers take
    GPU memory) and saved beside --out."""
    if args.search_json:
        with open(args.search_json.format(inter=I)) as f:
            return json.load(f)
    out_dir = os.path.dirname(args.out) or "."
    cmd = [args.flytune, "search", "--inter", str(I), "--tokens", args.tokens, "--db", os.path.join(out_dir, "bench.db"),
           "--graph", "--json", "--ceilings", f"{gemm/1e12:.1f},{copy/1e12:.3f}"]
    if args.space:
        cmd += ["--space", args.space]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr[-2000:], flush=True)
        raise RuntimeError(f"flytune search exited {r.returncode}: {r.stderr.strip()[-150:]}")
    with open(os.path.join(out_dir, f"search_i{I}.json"), "w") as f:
        f.write(r.stdout)
    print(f"flytune search --inter {I} done in {time.time() - t0:.0f} s", flush=True)
    return json.loads(r.stdout)


def winners_by_kind(summary):
    """{kind: {tokens: winner}} for kinds moe1, moe2, layer."""
    out = {"moe1": {}, "moe2": {}, "layer": {}}
    for w in (summary or {}).get("winners", []):
        out.setdefault(w["kind"], {})[w["tokens"]] = w
    return out


def stage_row(T, I, wins, gemm, copy):
    """Where flytune's time goes at T: stage winners (timed alone) and the
    layer, each beside its floor."""
    f1, f2 = stage_floors_us(T, I, gemm, copy)
    med = lambda kind: wins[kind].get(T, {}).get("median_us")
    row = {"T": T, "stage1_floor": f1, "stage2_floor": f2, "layer_floor": floor_us(T, I, gemm, copy),
           "stage1": med("moe1"), "stage2": med("moe2"), "layer": med("layer"),
           "stage1_kernel": wins["moe1"].get(T, {}).get("kernel"), "stage2_kernel": wins["moe2"].get(T, {}).get("kernel"),
           "layer_kernel": wins["layer"].get(T, {}).get("kernel")}
    # Per-stage times inside the layer exist only when the layer was not
    # graph-replayed (the search here uses --graph, so they are 0).
    stages = wins["layer"].get(T, {}).get("stages") or {}
    if any(v for v in stages.values()):
        row["in_layer"] = stages
    return row


# --- one slice -------------------------------------------------------------------

def bench_slice(I, tokens, wins, args, gemm, copy, gen):
    """Peers at every token count for intermediate size I; a peer that fails
    is reported in its cell, not fatal."""
    w1 = (torch.randn(E, 2 * I, H, device="cuda", generator=gen) / math.sqrt(H)).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, device="cuda", generator=gen) / math.sqrt(I)).to(torch.bfloat16)
    rows = []
    for T in tokens:
        x = torch.randn(T, H, device="cuda", generator=gen).to(torch.bfloat16)
        ids, w = routing(T, gen)
        ref = reference(x, ids, w, w1, w2)
        row = {"I": I, "T": T, "floor": floor_us(T, I, gemm, copy),
               "flytune": wins["layer"].get(T, {}).get("median_us")}
        try:
            row["torch"], row["torch_err"] = bench_torch(x, ids, w, w1, w2, ref)
        except Exception as e:
            row["torch_error"] = str(e)[:200]
        if not args.skip_triton:
            try:
                row["triton"], row["triton_err"], row["triton_config"], row["triton_tried"] = bench_triton(x, ids, w, w1, w2, ref)
            except Exception as e:
                row["triton_error"] = str(e)[:200]
        if not args.skip_jax and I == INTER_FULL and T <= JAX_MAX_TOKENS:
            try:
                row["jax"], row["jax_err"] = bench_jax(x, ids, w, w1, w2, ref)
            except Exception as e:
                row["jax_error"] = str(e)[:200]
        print(json.dumps({k: v for k, v in row.items() if k != "triton_tried"}), flush=True)
        rows.append(row)
        del x, ids, w, ref
        torch.cuda.empty_cache()
    del w1, w2
    _JAX_WEIGHTS.clear()
    torch.cuda.empty_cache()
    return rows


# --- Markdown -----------------------------------------------------------------------

METHOD = """\
One process measures the ceilings, runs `flytune search --graph --json --inter I`
per slice (layer winners timed by graph replay with L2 flushed; every winner
verified against its reference before timing), then the peers on fresh random
inputs, each output checked against an fp32 reference (rel L2 shown; bf16 bound
8e-3). torch._grouped_mm: the whole layer (sort, gather, two grouped GEMMs,
SwiGLU, weighted index_add) graph-captured. Triton fused-MoE: our kernels
(bench/triton_moe.py: align in torch, stage 1 with SwiGLU fused, stage 2 with
the routed weight fused writing one fp32 row per (token, choice), summed over k
in torch), the whole layer graph-captured; per token count a few tile configs
are checked and timed (10 replays) and the fastest is timed again (config
listed under the table). Graph-captured peers: 20 replays, median, a 256 MiB
flush inside the timed region with its own time subtracted. jax.lax.ragged_dot:
the same layer under jit, timed on the host around `block_until_ready`
(includes dispatch; no L2 flush), run only at I = 14336 and T <= 4096.
Floor = max(FLOPs at the same-run GEMM rate, active experts' weight bytes + X +
Y at the same-run copy rate). "flytune vs X" = X's time / flytune's time
(above 1: flytune faster)."""

STAGE_NOTE = """\
Per stage: flytune's stage-1 and stage-2 winners timed alone (L2 flushed), each
beside its own floor (stage 1: FLOPs 2·T·k·H·2I, bytes active·2I·H·2; stage 2:
FLOPs 2·T·k·I·H, bytes active·H·I·2; weights only). "layer − stages" is the
layer's time beyond the two stage winners (align, clears, reduce, padding to the
pair's tile, launch gaps)."""


def pct(floor, us):
    return f"{100 * floor / us:.0f}%"


def peer_cell(row, k):
    if row.get(k) is None:
        return row.get(k + "_error", "-")[:60].replace("|", "/").replace("\n", " ")
    extra = f", {row[k + '_err']:.1e}" if (k + "_err") in row else ""
    return f"{row[k]:.1f} ({pct(row['floor'], row[k])}{extra})"


def ratio(row, k):
    f = row.get("flytune")
    return f"{row[k] / f:.2f}x" if f and row.get(k) else "-"


def ratio_table(rows, search_error):
    lines = ["| tokens | floor us | flytune us (% floor) | torch._grouped_mm us (% floor, rel L2) "
             "| Triton fused-MoE us (% floor, rel L2) | jax ragged_dot us (% floor, rel L2) "
             "| flytune vs torch | flytune vs Triton | flytune vs jax |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if row.get("flytune") is None and search_error:
            row = dict(row, flytune_error=search_error)
        lines.append(f"| {row['T']} | {row['floor']:.0f} | {peer_cell(row, 'flytune')} | {peer_cell(row, 'torch')} "
                     f"| {peer_cell(row, 'triton')} | {peer_cell(row, 'jax')} "
                     f"| {ratio(row, 'torch')} | {ratio(row, 'triton')} | {ratio(row, 'jax')} |")
    configs = [f"{r['T']}: {r['triton_config']}" for r in rows if r.get("triton_config")]
    if configs:
        lines += ["", "Triton configs chosen (tokens: BLOCK_M/N/K, warps, stages): " + "; ".join(configs) + "."]
    return lines


def stage_table(stage_rows):
    def t(us, floor):
        return f"{us:.1f} ({pct(floor, us)})" if us else "-"
    in_layer = any("in_layer" in r for r in stage_rows)
    head = ("| tokens | stage 1 floor us | stage 1 us (% floor) | stage 2 floor us | stage 2 us (% floor) "
            "| layer floor us | layer us (% floor) | layer − stages us |")
    lines = [head + (" align / stage 1 / stage 2 / reduce in layer us |" if in_layer else ""),
             "| --- " * (8 + in_layer) + "|"]
    for r in stage_rows:
        gap = f"{r['layer'] - r['stage1'] - r['stage2']:.1f}" if r["layer"] and r["stage1"] and r["stage2"] else "-"
        line = (f"| {r['T']} | {r['stage1_floor']:.0f} | {t(r['stage1'], r['stage1_floor'])} | {r['stage2_floor']:.0f} "
                f"| {t(r['stage2'], r['stage2_floor'])} | {r['layer_floor']:.0f} | {t(r['layer'], r['layer_floor'])} | {gap} |")
        if in_layer:
            parts = r.get("in_layer") or {}
            keys = ("align_us", "stage1_us", "stage2_us", "reduce_us")
            line += (" " + " / ".join(f"{parts.get(k) or 0:.1f}" for k in keys) + " |") if parts else " - |"
        lines.append(line)
    return lines


def markdown(report):
    inters = ", ".join(str(s["inter"]) for s in report["slices"])
    lines = [f"## {report['date']}, {report['gpu']}: flytune vs peers, same run (Mixtral 8x7B bf16 layer, I = {inters})",
             "", "Command:", "", "```sh", report["command"], "```", "", METHOD, "",
             f"Same-run ceilings: dense bf16 GEMM {report['gemm_flops']/1e12:.0f} TFLOP/s (8192^3), "
             f"HBM copy {report['hbm_bytes']/1e12:.2f} TB/s."]
    for s in report["slices"]:
        lines += ["", f"### I = {s['inter']} (TP{INTER_FULL // s['inter']})", ""]
        lines += ratio_table(s["rows"], s.get("search_error"))
        lines += ["", STAGE_NOTE, ""]
        lines += stage_table(s["stages"])
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flytune", required=True, help="the flytune binary")
    ap.add_argument("--out", required=True, help="Markdown output; OUT.json gets the raw numbers")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts, for every slice")
    ap.add_argument("--inter", default=",".join(map(str, INTERS)), help="intermediate sizes I (tensor-parallel slices)")
    ap.add_argument("--search-json", help="load flytune's search --json output per slice from this path "
                                          "({inter} is replaced by I) instead of running the search")
    ap.add_argument("--space", help="flytune's variant space (--space of flytune search; default: its default space)")
    ap.add_argument("--skip-triton", action="store_true")
    ap.add_argument("--skip-jax", action="store_true")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    inters = [int(i) for i in args.inter.split(",")]
    torch.manual_seed(0)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
              "command": "python3 " + shlex.join(sys.argv), "slices": []}
    gemm, copy = ceilings()
    torch.cuda.empty_cache()
    report["gemm_flops"], report["hbm_bytes"] = gemm, copy
    print(f"ceilings: dense bf16 GEMM {gemm/1e12:.0f} TFLOP/s, HBM copy {copy/1e12:.2f} TB/s", flush=True)

    # One slice at a time (flytune's search in its own process, then the peers),
    # so a run cut short keeps every slice it finished.
    gen = torch.Generator(device="cuda").manual_seed(1)
    for I in inters:
        s = {"inter": I}
        report["slices"].append(s)
        try:
            s["search"] = flytune_search(args, I, gemm, copy)
        except Exception as e:  # the peers still run; the flytune cells say why
            s["search_error"] = str(e)[:200]
        wins = winners_by_kind(s.get("search"))
        s["rows"] = bench_slice(I, tokens, wins, args, gemm, copy, gen)
        s["stages"] = [stage_row(T, I, wins, gemm, copy) for T in tokens]
        s["winners"] = (s.pop("search", None) or {}).get("winners", [])  # the rest is in search_iI.json
        write_report(report, args.out)  # after every slice: a run cut short keeps what it measured
    print(markdown(report))


def write_report(report, out):
    done = {**report, "slices": [s for s in report["slices"] if "rows" in s]}
    with open(out, "w") as f:
        f.write(markdown(done))
    with open(out + ".json", "w") as f:
        json.dump(done, f, indent=1)


if __name__ == "__main__":
    main()
