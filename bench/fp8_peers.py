#!/usr/bin/env python3
"""fp8 (e4m3 OCP) MoE-layer peers on one GPU, in one run (issue 19: w8a8, SwiGLU,
uniform routing; shapes are flytune's presets, read from generator/problem.cpp, or
name:E:H:I:K). Per problem and scale mode, at each token count:
  per-tensor  our Triton fused-MoE in fp8 (bench/triton_moe_fp8.py): a static X
              scale, one scale per expert, h written as fp8 with a static scale;
  block128    the same layer DeepSeek-V3 style: X and h quantised on the device in
              1x128 groups, 128x128 weight blocks, scales applied per k-step;
  static      per-tensor's Triton layer with the same calibrated static X and h
              scales, beside flytune's static mode (`flytune search --scales
              static`: the caller's static x_scale and inter_scale, stage 1
              quantising h on store, calibrated on its batch by the same rule);
              per-tensor's flytune column is its dynamic per-row h scales;
  rowwise     torch._scaled_grouped_mm (where this torch has it): per-token X and
              h scales x per-channel weight scales, the whole layer graph-captured.
Triton layers: a few configs per token count checked and timed, the fastest kept,
graph-captured, L2 flushed (bench/h200_peers.py's timing, imported from it).
Every output is checked against an fp32 reference from its own dequantised inputs
(1 - 2<x,y>/(|x|^2+|y|^2), bound 1e-3, and rel L2); a peer over the bound is marked
wrong and never timed as a win. Same-run ceilings: the fp8 dense GEMM rate
(torch._scaled_mm at 8192^3, per-tensor scales, the faster of fast-accumulate on and
off) and the HBM copy rate; the fp8 floor = max(FLOPs at the fp8 rate, bytes of the
touched experts' fp8 weights + their scales + X + Y (bf16) at the copy rate).
--flytune-json adds a "flytune (search)" column from a `flytune search --json` summary
of an fp8 problem (its layer winners' median_us).

Usage (on the GPU machine, from the repository root):
  python3 bench/fp8_peers.py --out $OUT/fp8.md --budget-s 270
  options: --problems mixtral-8x7b,deepseek-v3 --tokens 1,16,64 --modes per-tensor,block128
           --flytune-json mixtral-8x7b:per-tensor=search.json (repeatable; a bare PATH
           is the first problem's per-tensor table) --skip-triton --skip-torch
Writes --out (a Markdown section: date, GPU, command, a table per problem and scale
mode with % of the fp8 floor) and OUT.json (raw numbers).
"""
import json, math, os, shlex, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import h200_peers as hp  # timing, capture, L2 flush, routing, active experts, budget clock

PROBLEMS = ["mixtral-8x7b", "deepseek-v3"]
MODES = ["per-tensor", "block128", "rowwise", "static"]
PEERS = {"per-tensor": ["triton"], "block128": ["triton"], "rowwise": ["torch"], "static": ["triton"]}
PEER_NAMES = {"triton": "Triton fp8 fused-MoE", "torch": "torch._scaled_grouped_mm"}
BOUND = 1e-3  # 1 - 2<x,y>/(|x|^2+|y|^2) against the fp32 reference
FP8 = torch.float8_e4m3fn


preset_shape = hp.preset_shape  # name:E:H:I:K or a preset of generator/problem.cpp


def fp8_gemm_rates():
    """torch._scaled_mm at 8192^3 (e4m3, per-tensor scales, bf16 out): FLOP/s with
    fast accumulation off and on."""
    n = 8192
    a = torch.randn(n, n, device="cuda").to(FP8)
    b = torch.randn(n, n, device="cuda").to(FP8)
    one = torch.ones((), device="cuda")
    rates = {}
    for fast in (False, True):
        t, _, _ = hp.cuda_time(lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                        use_fast_accum=fast), 10)
        rates["fast" if fast else "exact"] = 2 * n ** 3 / (t * 1e-6)
    return rates


def fp8_work(s, T, mode):
    """(FLOPs, bytes): touched experts' fp8 weights and their scales, X and Y in bf16."""
    scale_bytes = {"per-tensor": 2 * 4, "static": 2 * 4, "rowwise": (2 * s.I + s.H) * 4,
                   "block128": 3 * s.H * s.I // (128 * 128) * 4}[mode]
    return 6.0 * T * s.K * s.H * s.I, hp.active_experts(s, T) * (3 * s.H * s.I + scale_bytes) + 2 * T * s.H * 2


def fp8_floor_us(s, T, mode, ceil):
    flops, bytes_ = fp8_work(s, T, mode)
    return max(flops / ceil["fp8_gemm"], bytes_ / ceil["copy"]) * 1e6


# --- inputs ------------------------------------------------------------------------

def master_weights(s, gen):
    """bf16 W1 [E, 2I, H], W2 [E, H, I] (scaled like h200_peers.py's)."""
    w1 = (torch.randn(s.E, 2 * s.I, s.H, device="cuda", generator=gen) / math.sqrt(s.H)).to(torch.bfloat16)
    w2 = (torch.randn(s.E, s.H, s.I, device="cuda", generator=gen) / math.sqrt(s.I)).to(torch.bfloat16)
    return w1, w2


def quantised_weights(tm8, w, mode, chunk=16):
    """fp8 weights and scales of a mode, a few experts at a time (fp32 temporaries stay small)."""
    parts = [tm8.quantise_weights(w[e:e + chunk], mode) for e in range(0, w.shape[0], chunk)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def batch(s, T, seed):
    """X [T, H] bf16 and uniform top-k routing, the same for every mode at this T."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, s.H, device="cuda", generator=gen).to(torch.bfloat16)
    ids, w = hp.routing(T, gen, s.E, s.K)
    return x, ids, w.contiguous()


# --- peers -------------------------------------------------------------------------

def bench_triton(tm8, mode, x, ids, w, w1, w2, scales, ref):
    """Each candidate config checked, the correct ones timed (graph, 10 replays), the
    fastest timed again. Returns a cell dict."""
    tried, best = [], None
    for cfg in tm8.candidate_configs(mode, ids.numel(), x.shape[1], w2.shape[2]):
        name = tm8.config_name(cfg)
        layer = lambda: tm8.moe_layer(mode, x, ids, w, w1, w2, scales, cfg)
        try:
            dis, rel = tm8.agreement(layer(), ref)
            if not dis < BOUND:  # also NaN
                tried.append({"config": name, "dis": dis, "rel": rel, "wrong": True})
                continue
            us = hp.time_graph(hp.capture(layer), reps=10)
        except Exception as e:  # e.g. out of shared memory: skip the config
            tried.append({"config": name, "error": str(e)[:200]})
            continue
        tried.append({"config": name, "us": us, "dis": dis, "rel": rel})
        if best is None or us < best[0]:
            best = (us, cfg, dis, rel)
    if best is None:
        wrong = [t for t in tried if t.get("wrong")]
        if wrong:
            return {"wrong": f"wrong: 1-cos {min(t['dis'] for t in wrong):.1e} > {BOUND:g}", "tried": tried}
        raise RuntimeError("no Triton config ran: " + "; ".join(f"{t['config']}: {t.get('error')}" for t in tried))
    _, cfg, dis, rel = best
    us = hp.time_graph(hp.capture(lambda: tm8.moe_layer(mode, x, ids, w, w1, w2, scales, cfg)))
    return {"us": us, "dis": dis, "rel": rel, "config": tm8.config_name(cfg), "tried": tried}


def torch_scaled_layer(tm8, x, ids, w, w1t, s1, w2t, s2):
    """Per-token quantise, sort pairs by expert, two rowwise-scaled grouped GEMMs
    (bf16 out), SwiGLU, per-token quantise of h, weighted scatter-add."""
    E, I, H, K = w1t.shape[0], w2t.shape[1], x.shape[1], ids.shape[1]
    xq, xs = tm8.quantise_rows(x)
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(E, device="cuda", dtype=torch.int32).scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    tok = order // K
    a = xq.view(torch.uint8)[tok].view(FP8)
    gu = torch._scaled_grouped_mm(a, w1t, xs[tok].contiguous(), s1, offs=offs, out_dtype=torch.bfloat16)
    h = torch.nn.functional.silu(gu[:, :I].float()) * gu[:, I:].float()
    hq, hs = tm8.quantise_rows(h)
    o = torch._scaled_grouped_mm(hq, w2t, hs, s2, offs=offs, out_dtype=torch.bfloat16)
    o = o.float() * w.reshape(-1)[order][:, None]
    return torch.zeros(x.shape[0], H, device="cuda", dtype=torch.float32).index_add_(0, tok, o).to(torch.bfloat16)


def bench_torch(tm8, x, ids, w, w1, w2, scales, ref):
    if not hasattr(torch, "_scaled_grouped_mm"):
        return {"error": f"torch {torch.__version__} has no torch._scaled_grouped_mm"}
    w1t, w2t = w1.transpose(1, 2), w2.transpose(1, 2)  # [E, H, 2I], [E, I, H]: column-major as it wants
    layer = lambda: torch_scaled_layer(tm8, x, ids, w, w1t, scales["w1"], w2t, scales["w2"])
    try:
        dis, rel = tm8.agreement(layer(), ref)
    except Exception as e:  # refused (this GPU, this torch, these shapes): the cell says why
        return {"error": f"refused: {str(e).splitlines()[0]}"[:200]}
    if not dis < BOUND:
        return {"wrong": f"wrong: 1-cos {dis:.1e} > {BOUND:g}", "dis": dis, "rel": rel}
    us, how = hp.timed(layer)
    return {"us": us, "dis": dis, "rel": rel, "how": how}


# --- one problem -------------------------------------------------------------------

def mode_scales(tm8, mode, s1, s2, x, ids, w1):
    """The scale tensors a mode's layer takes; per-tensor's (and static's) static X and h
    scales are calibrated on this batch (outside the timed layer)."""
    scales = {"w1": s1, "w2": s2}
    if mode in ("per-tensor", "static"):
        scales["x"] = tm8.quantise_per_tensor(x)[1]
        scales["h"] = tm8.calibrate_h_scale(x, ids, w1, scales)
    return scales


def bench_mode(tm8, s, mode, tokens, masters, args, ceil, clock, flytune):
    w1, s1 = quantised_weights(tm8, masters[0], mode)
    w2, s2 = quantised_weights(tm8, masters[1], mode)
    rows = []
    for i, T in enumerate(tokens):
        if clock.left() < 10:
            rows.append({"T": T, "floor": fp8_floor_us(s, T, mode, ceil), "skipped": "no time left in --budget-s"})
            continue
        x, ids, w = batch(s, T, seed=1000 + i)
        scales = mode_scales(tm8, mode, s1, s2, x, ids, w1)
        ref = tm8.reference(mode, x, ids, w, w1, w2, scales)
        flops, bytes_ = fp8_work(s, T, mode)
        row = {"T": T, "floor": fp8_floor_us(s, T, mode, ceil), "flops": flops, "bytes": bytes_,
               "flytune": flytune.get(T, {}).get("median_us"), "flytune_kernel": flytune.get(T, {}).get("kernel")}
        if "triton" in PEERS[mode] and not args.skip_triton:
            row["triton"] = hp.run_peer(lambda: bench_triton(tm8, mode, x, ids, w, w1, w2, scales, ref), clock, 20)
        if "torch" in PEERS[mode] and not args.skip_torch:
            row["torch"] = hp.run_peer(lambda: bench_torch(tm8, x, ids, w, w1, w2, scales, ref), clock, 5)
        print(json.dumps({"problem": s.name, "mode": mode, **{k: ({kk: vv for kk, vv in v.items() if kk != "tried"}
                                                                    if isinstance(v, dict) else v) for k, v in row.items()}}),
              flush=True)
        rows.append(row)
        del x, ids, w, ref
        torch.cuda.empty_cache()
    del w1, w2, s1, s2
    torch.cuda.empty_cache()
    return rows


def flytune_winners(args, problem, mode, first_problem):
    """{tokens: layer winner} of the --flytune-json summary given for problem:mode."""
    for item in args.flytune_json or []:
        key, sep, path = item.rpartition("=")
        if not sep:
            key, path = f"{first_problem}:per-tensor", item
        if key == f"{problem}:{mode}":
            with open(path) as f:
                summary = json.load(f)
            return {w["tokens"]: w for w in summary.get("winners", []) if w.get("kind") == "layer"}
    return {}


# --- Markdown -----------------------------------------------------------------------

METHOD = """\
One process measures the ceilings, then per problem and scale mode makes fp8 weights
from one bf16 set (per expert, per 128x128 block or per output channel) and, per token
count, one bf16 X and uniform top-k routing shared by the modes. Each peer's output is
checked against an fp32 layer computed from that mode's dequantised inputs (X as the
layer quantises it, weights with their scales, h kept in fp32): "1-cos" is
1 - 2<x,y>/(|x|^2+|y|^2) (bound 1e-3; over it the cell says wrong and is not timed),
then rel L2. Triton fp8 fused-MoE (bench/triton_moe_fp8.py: align in torch, X quantised
in the layer, stage 1 with SwiGLU and h's quantise-on-store fused, stage 2 with the
routed weight fused, summed over k in torch): per-tensor = static X and h scales
(calibrated once on the batch), one fp32 scale per expert, dequantised in the epilogues
(static: the same Triton layer and scales, its flytune column `--scales static`, whose h is
quantised on store with a static scale calibrated the same way);
block128 = X and h quantised on the device in 1x128 groups, 128x128 weight blocks, the
scales applied per 128-deep k-step in the main loop. Per token count a few tile configs
are checked and timed (10 replays), the fastest timed again. torch._scaled_grouped_mm:
per-token X and h scales x per-channel weight scales (bf16 out), the whole layer (quantise,
sort, gather, two grouped GEMMs, SwiGLU, weighted index_add). Graph-captured layers: 20
replays, median, a 256 MiB L2 flush inside the timed region with its own time subtracted.
fp8 floor = max(FLOPs at the same-run fp8 GEMM rate, bytes at the same-run copy rate);
bytes = the experts uniform routing touches (expected count) x (3·H·I fp8 weights + their
scales) + X + Y in bf16. "best peer" is the fastest correct peer of any scale mode at that
token count (% of this table's floor). "flytune (search)" is the layer winner's graph-replay
time from the given `flytune search --json`; "vs best peer" = best peer's time / flytune's."""


pct = hp.pct


def cell(row, key):
    c = row.get(key)
    if not c or c.get("us") is None:
        return hp.untimed_cell(c, 70)
    how = "" if c.get("how", "graph") == "graph" else f", {c['how']}"
    return f"{c['us']:.1f} ({pct(row['floor'], c['us'])}, {c['dis']:.1e}, {c['rel']:.1e}{how})"


def best_peer(problem, T):
    """(us, name) of the fastest correct peer of any mode at T."""
    best = None
    for mode, rows in problem["modes"].items():
        for row in rows:
            for key in PEERS[mode]:
                us = (row.get(key) or {}).get("us")
                if row["T"] == T and us and (best is None or us < best[0]):
                    best = (us, f"{PEER_NAMES[key]} {mode}")
    return best


def mode_table(problem, mode):
    rows = problem["modes"][mode]
    peers = PEERS[mode]
    head = ["tokens", "fp8 floor us", "flytune (search) us (% floor)"]
    head += [f"{PEER_NAMES[k]} us (% floor, 1-cos, rel L2)" for k in peers] + ["best peer us (% floor)", "vs best peer"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for row in rows:
        if row.get("skipped"):
            lines.append(f"| {row['T']} | {row['floor']:.0f} | " + " | ".join([row["skipped"]] * (len(head) - 2)) + " |")
            continue
        ft = row.get("flytune")
        best = best_peer(problem, row["T"])
        cells = [str(row["T"]), f"{row['floor']:.0f}", f"{ft:.1f} ({pct(row['floor'], ft)})" if ft else "-"]
        cells += [cell(row, k) for k in peers]
        cells.append(f"{best[0]:.1f} ({pct(row['floor'], best[0])}, {best[1]})" if best else "-")
        cells.append(f"{best[0] / ft:.2f}x" if best and ft else "-")
        lines.append("| " + " | ".join(cells) + " |")
    configs = [f"{r['T']}: {r['triton']['config']}" for r in rows if (r.get("triton") or {}).get("config")]
    if configs:
        lines += ["", "Triton configs chosen (tokens: BLOCK_M/N/K, warps, stages): " + "; ".join(configs) + "."]
    return lines


def markdown(report):
    c = report["ceilings"]
    lines = hp.report_head(report, "fp8 (e4m3) MoE peers", f"torch {report['torch']}, triton {report['triton']}", METHOD) + [
             f"Same-run ceilings: fp8 dense GEMM {c['fp8_gemm']/1e12:.0f} TFLOP/s (torch._scaled_mm 8192^3, fast accumulate "
             f"{c['fp8_fast']/1e12:.0f}, exact {c['fp8_exact']/1e12:.0f}), dense bf16 GEMM {c['gemm']/1e12:.0f} TFLOP/s, "
             f"HBM copy {c['copy']/1e12:.2f} TB/s."]
    for p in report["problems"]:
        shape = p.get("shape")
        for mode in p.get("modes", {}):
            lines += ["", f"### {p['name']} (E {shape['E']}, H {shape['H']}, I {shape['I']}, top-{shape['K']}), {mode}", ""]
            lines += mode_table(p, mode)
        if p.get("skipped"):
            lines += ["", f"### {p['name']}", "", f"Not measured: {p['skipped']}."]
    return "\n".join(lines) + "\n"


def main():
    ap = hp.run_parser(__doc__, PROBLEMS, hp.TOKENS, ("triton", "torch"))
    ap.add_argument("--modes", default=",".join(MODES[:3]), help="scale modes: per-tensor, block128, rowwise, static")
    ap.add_argument("--flytune-json", action="append", metavar="[PROBLEM:MODE=]PATH",
                    help="a `flytune search --json` summary of an fp8 problem; its layer winners fill the "
                         "'flytune (search)' column of PROBLEM's MODE table (bare PATH: first problem, per-tensor)")
    args = ap.parse_args()
    clock = hp.Clock(args.budget_s)
    tokens = hp.token_list(args.tokens)
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"fp8_peers: unknown scale mode '{m}' (one of {', '.join(MODES)})")
    shapes = [preset_shape(n) for n in args.problems.split(",")]
    import triton
    import triton_moe_fp8 as tm8
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__,
              "command": "python3 " + shlex.join(sys.argv), "tokens": tokens, "problems": []}
    gemm, copy, _ = hp.ceilings()
    rates = fp8_gemm_rates()
    torch.cuda.empty_cache()
    report["ceilings"] = ceil = {"fp8_gemm": max(rates.values()), "fp8_fast": rates["fast"], "fp8_exact": rates["exact"],
                                 "gemm": gemm, "copy": copy}
    print(f"ceilings: fp8 GEMM {ceil['fp8_gemm']/1e12:.0f} TFLOP/s (fast {rates['fast']/1e12:.0f}, exact "
          f"{rates['exact']/1e12:.0f}), bf16 GEMM {gemm/1e12:.0f} TFLOP/s, HBM copy {copy/1e12:.2f} TB/s", flush=True)
    for s in shapes:
        p = {"name": s.name, "shape": vars(s), "modes": {}}
        report["problems"].append(p)
        if clock.left() < 30:
            p["skipped"] = "no time left in --budget-s"
            continue
        masters = master_weights(s, torch.Generator(device="cuda").manual_seed(1))
        for mode in modes:
            flytune = flytune_winners(args, s.name, mode, shapes[0].name)
            p["modes"][mode] = bench_mode(tm8, s, mode, tokens, masters, args, ceil, clock, flytune)
            hp.write_report(report, args.out, markdown)  # after every table: a run cut short keeps what it measured
        del masters
        torch.cuda.empty_cache()
    hp.write_report(report, args.out, markdown)
    print(markdown(report))


if __name__ == "__main__":
    main()
