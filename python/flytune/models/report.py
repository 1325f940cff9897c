"""The drivers' common parts, framework-free: flytune-mixtral (JAX, flytune.models.generate) and
flytune-mixtral-torch (flytune.models.torch_generate) parse, report progress, compare implementations, write
--json and print their table with these, so their options and outputs are the same."""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time


def ints(text: str) -> list:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers >= 1 separated by commas, got '{text}'")
    return values


def impl_list(known: tuple):
    """The argparse type of --impl: comma-separated names among `known`."""
    def parse(text: str) -> list:
        values = [v.strip() for v in text.split(",") if v.strip()]
        for v in values:
            if v not in known:
                raise argparse.ArgumentTypeError(f"unknown implementation '{v}' (known: {', '.join(known)})")
        if not values:
            raise argparse.ArgumentTypeError("no implementation given")
        return values
    return parse


def positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {v}")
    return v


def model_parser(name: str, doc: str, impls: tuple, default_impls: list, impl_help: str) -> argparse.ArgumentParser:
    """A driver's parser (its module docstring's first paragraph, and its first command as the example) with the
    options both drivers take alike: the model's shape and dtype, the implementations, the shapes run, timing,
    output, the export, fp8 experts, a checkpoint (impl_help: why dense runs first, for this framework)."""
    example = doc.split("\n\n")[1].strip()
    p = argparse.ArgumentParser(prog=name, description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=f"example:\n  {example}")
    p.add_argument("--impl", type=impl_list(impls), default=default_impls,
                   help=f"MoE implementations, comma-separated: {', '.join(impls)} (default {','.join(default_impls)}: "
                        f"dense first{impl_help}; the first is the one the others are compared with)")
    p.add_argument("--config", default="mixtral-8x7b", choices=["mixtral-8x7b", "tiny"],
                   help="model shape (default mixtral-8x7b; tiny: the tests' 2-layer model)")
    p.add_argument("--layers", type=positive, help="decoder layers to build (default: all of the config)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32"],
                   help="weights and activations (default bf16; f32 for checks on the CPU: flytune's layers are 16-bit)")
    p.add_argument("--batch", type=ints, default=[1], help="batch sizes, comma-separated (default 1)")
    p.add_argument("--prompt-len", type=ints, default=[512], help="prompt lengths, comma-separated (default 512)")
    p.add_argument("--new-tokens", type=positive, default=32, help="greedy decode steps (default 32)")
    p.add_argument("--repeats", type=positive, default=3, help="timed prefills and part timings (median; default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompts (default 0)")
    p.add_argument("--no-parts", action="store_true", help="skip the per-part timings")
    p.add_argument("--json", help="write the results as JSON to this file ('-': stdout)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on stderr (default: when stderr is a terminal)")
    p.add_argument("--export", help="the flytune export folder (flytune search + flytune export) for the flytune "
                                    "implementation: it must hold the model's MoE problem")
    p.add_argument("--fp8", action="store_true",
                   help="fp8 experts: w1/w2 quantised per tensor to e4m3 (one scale per expert matrix; flytune's "
                        "per-tensor fp8 problem, which --export must hold), x bf16 scaled per call by its amax; "
                        "the other implementations dequantise the same codes to bf16 in the step")
    p.add_argument("--checkpoint", help="a Hugging Face Mixtral folder (config.json + *.safetensors) instead of "
                                        "random weights (flytune.models.checkpoint; needs jax)")
    return p


def check_model_args(args) -> None:
    """ValueError for what the parser cannot see: flytune without an export, fp8 experts without bf16."""
    if "flytune" in args.impl and not args.export:
        raise ValueError("the flytune implementation needs --export DIR (an export of the model's MoE problem; "
                         "or leave flytune out of --impl)")
    if args.fp8 and args.dtype != "bf16":
        raise ValueError("--fp8 takes bf16 activations (--dtype bf16): flytune's fp8 layers read and write bf16")


def find_layer_problem(export, c, args):
    """The export's problem of the model's MoE layer (fp8: per-tensor e4m3), or the runtime's NotFoundError, before
    anything is timed."""
    if args.fp8:
        return export.find_problem(c.experts, c.hidden, c.inter, c.topk, "e4m3", scales="per-tensor")
    return export.find_problem(c.experts, c.hidden, c.inter, c.topk, args.dtype)


def header(name: str, args, c, source: str, weight_bytes: int, device: str, framework_version: dict) -> dict:
    """The --json keys before the runs, both drivers' (framework_version: {"jax": ...} and the like)."""
    import flytune
    return {"model": args.config if not args.checkpoint else "checkpoint",
            "config": {k: getattr(c, k) for k in c.__dataclass_fields__},
            "layers": c.layers, "dtype": args.dtype, "weights": source,
            "experts": "e4m3 per-tensor" if args.fp8 else args.dtype, "weight_bytes": weight_bytes,
            "device": device, **framework_version, "flytune": flytune.__version__, "export": args.export,
            "new_tokens": args.new_tokens, "repeats": args.repeats, "command": " ".join([name] + sys.argv[1:]),
            "runs": []}


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.start = time.perf_counter()

    def bar(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r{label:<40} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    def note(self, text: str) -> None:
        """A line of what is being done (always: a log of a bounded run shows how far it got)."""
        sys.stderr.write(f"[{time.perf_counter() - self.start:6.1f} s] {text}\n")
        sys.stderr.flush()


def stats(times: list) -> dict:
    import numpy as np
    a = np.asarray(times)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)),
            "n": len(times)}


def agreement(ref_logits, ref_tokens, logits, tokens) -> dict:
    import numpy as np
    a, b = np.asarray(logits, np.float64), np.asarray(ref_logits, np.float64)
    same = np.asarray(tokens) == np.asarray(ref_tokens)               # [B, steps]
    steps = same.shape[1]
    first_diff = [int(np.argmin(row)) if not row.all() else steps for row in same]
    return {"logits_max_abs": float(np.abs(a - b).max()),
            "logits_rel_l2": float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)),
            "tokens_equal_steps": int(min(first_diff)), "steps": steps,
            "tokens_equal_fraction": float(same.mean())}


def write_json(result: dict, path) -> None:
    if not path:
        return
    text = json.dumps(result, indent=1)
    if path == "-":
        print(text)
        return
    with open(path + ".part", "w") as f:
        f.write(text + "\n")
    os.replace(path + ".part", path)


def failed(result: dict, progress: Progress, impl: str, shape, e: Exception) -> None:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    where = impl if shape is None else f"{impl} B={shape[0]} P={shape[1]}"
    result["errors"].append({"impl": impl, "shape": shape, "error": f"{type(e).__name__}: {first}"})
    progress.note(f"{where}: FAILED: {type(e).__name__}: {first}")


def speedups(runs: list) -> list:
    """flytune's tokens/s over the faster of the other implementations, per batch x prompt."""
    out = []
    for r in runs:
        if r["impl"] != "flytune":
            continue
        others = [o for o in runs if o["impl"] != "flytune" and (o["batch"], o["prompt_len"]) ==
                  (r["batch"], r["prompt_len"])]
        if not others:
            continue
        row = {"batch": r["batch"], "prompt_len": r["prompt_len"]}
        for phase in ("prefill", "decode"):
            best = max(others, key=lambda o: o[f"{phase}_tokens_per_s"])
            row[phase] = {"vs": best["impl"], "speedup": r[f"{phase}_tokens_per_s"] / best[f"{phase}_tokens_per_s"]}
        out.append(row)
    return out


def line(r: dict) -> str:
    text = (f"{r['impl']:<10} B={r['batch']:<3} P={r['prompt_len']:<5} prefill {r['prefill_tokens_per_s']:10.1f} tok/s "
            f"({1e3 * r['prefill_s']['median']:.1f} ms)  decode {r['decode_tokens_per_s']:8.1f} tok/s "
            f"({r['decode_ms_per_step']:.2f} ms/step)")
    if "agreement" in r:
        a = r["agreement"]
        text += f"  vs {a['vs']}: logits rel L2 {a['logits_rel_l2']:.1e}, tokens equal {a['tokens_equal_steps']}/{a['steps']}"
    return text


def table(result: dict) -> str:
    """The results as a Markdown table (docs/PERFORMANCE.md's)."""
    lines = ["| impl | batch | prompt | prefill tok/s | decode tok/s | prefill: attention / MoE / rest ms | "
             "decode step: attention / MoE / rest ms | vs first: logits rel L2, tokens equal |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    L = result["layers"]
    for r in result["runs"]:
        cells = []
        for phase in ("prefill", "decode"):
            t = r.get("parts", {}).get(phase)
            cells.append("-" if not t else f"{1e3 * L * t['attention_s']['median']:.1f} / "
                         f"{1e3 * L * t['moe_s']['median']:.1f} / {1e3 * t['rest_s']:.1f}")
        a = r.get("agreement")
        agree = "-" if not a else f"{a['logits_rel_l2']:.1e}, {a['tokens_equal_steps']}/{a['steps']}"
        lines.append(f"| {r['impl']} | {r['batch']} | {r['prompt_len']} | {r['prefill_tokens_per_s']:.0f} | "
                     f"{r['decode_tokens_per_s']:.1f} | {cells[0]} | {cells[1]} | {agree} |")
    for note in result.get("notes", []):
        lines.append(f"\n{note}")
    for s in result.get("speedups", []):
        lines.append(f"\nflytune B={s['batch']} P={s['prompt_len']}: prefill {s['prefill']['speedup']:.2f}x "
                     f"{s['prefill']['vs']}, decode {s['decode']['speedup']:.2f}x {s['decode']['vs']}")
    return "\n".join(lines)


def measure_impls(result: dict, args, progress: Progress, prompts: dict, prepare, layers: int, measure) -> None:
    """Every implementation of args.impl in turn: prepare(impl) -> (model, its MoE weights' bytes, the allocator's
    statistics), then each (batch, prompt length) -> prompt of `prompts` through measure(model, b, p, prompt) ->
    (row, last logits, greedy tokens), compared with the first implementation's (row["agreement"]). A failure is
    recorded in result["errors"] and the rest go on; --json is rewritten after every row (a run cut short keeps
    what it measured). The model goes before the next implementation is prepared."""
    reference = {}
    result["errors"] = []
    for impl in args.impl:
        progress.note(f"{impl}: preparing the MoE weights of {layers} layers")
        try:
            model, weight_bytes, memory = prepare(impl)
        except Exception as e:  # reported in the results and the exit code, and the next implementation runs
            failed(result, progress, impl, None, e)
            continue
        result.setdefault("moe_weight_bytes", {})[impl] = weight_bytes
        result.setdefault("memory_after_prepare", {})[impl] = memory
        for (b, p), prompt in prompts.items():
            try:
                row, logits, generated = measure(model, b, p, prompt)
            except Exception as e:
                failed(result, progress, impl, (b, p), e)
                continue
            if (b, p) in reference:
                row["agreement"] = {"vs": reference[(b, p)][0], **agreement(*reference[(b, p)][1:], logits, generated)}
            else:
                reference[(b, p)] = (impl, logits, generated)
            result["runs"].append(row)
            progress.note(line(row))
            if args.json != "-":
                result["speedups"] = speedups(result["runs"])
                write_json(result, args.json)
        del model
        gc.collect()
    result["speedups"] = speedups(result["runs"])


def main(name: str, run, args) -> int:
    """A driver's main: run(args) -> result, its table printed and --json written; bad input (a flytune error,
    ValueError, OSError, KeyError) is one line `NAME: error: ...` and exit 1, and so is any implementation that
    failed (each one's line after the table)."""
    try:
        import flytune
        result = run(args)
    except (flytune.FlytuneError, ValueError, OSError, KeyError) as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 1
    print(table(result))
    write_json(result, args.json)
    for e in result["errors"]:
        where = e["impl"] if e["shape"] is None else f"{e['impl']} B={e['shape'][0]} P={e['shape'][1]}"
        print(f"{name}: error: {where}: {e['error']}", file=sys.stderr)
    return 1 if result["errors"] else 0


def measure(model, args, b: int, p: int, tokens, progress: Progress, wait, memory) -> tuple:
    """One implementation at one batch x prompt, either framework's: (its row, the prefill's last logits, the greedy
    tokens). model: prefill(tokens, length) -> (next token, logits, cache), decode(...) -> (tokens, seconds) and
    parts(...) (the driver's Model); wait(result) returns the result once the device has computed it; memory() the
    allocator's statistics. A warm-up prefill and two decode steps (compiling, under jit), the median of
    --repeats prefills, --new-tokens decode steps, the time per part (attention and MoE blocks alone, times the
    layers; "rest": the step less those)."""
    label = f"{model.impl} B={b} P={p}"
    progress.note(f"{label}: compiling and warming up")
    length = p + args.new_tokens
    nxt, logits, cache = model.prefill(tokens, length)
    model.decode(nxt, cache, p, min(2, args.new_tokens), Progress(False), label)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        nxt, logits, cache = wait(model.prefill(tokens, length))
        times.append(time.perf_counter() - t0)
    prefill = stats(times)
    generated, decode_s = model.decode(nxt, cache, p, args.new_tokens, progress, f"{label} decode")
    row = {"impl": model.impl, "batch": b, "prompt_len": p, "new_tokens": args.new_tokens,
           "prefill_s": prefill, "prefill_tokens_per_s": b * p / prefill["median"],
           "decode_s": decode_s, "decode_tokens_per_s": b * args.new_tokens / decode_s,
           "decode_ms_per_step": 1e3 * decode_s / args.new_tokens}
    if not args.no_parts:
        parts = model.parts(b, p, args.new_tokens, args.repeats, args.seed)
        whole = {"prefill": prefill["median"], "decode": decode_s / args.new_tokens}
        for phase, t in parts.items():
            t["layers_s"] = model.c.layers * (t["attention_s"]["median"] + t["moe_s"]["median"])
            t["rest_s"] = whole[phase] - t["layers_s"]
        row["parts"] = parts
    row["memory"] = memory()
    return row, logits, generated


def greedy_decode(step, wait, nxt, cache, pos: int, steps: int, progress: Progress, label: str) -> tuple:
    """`steps` greedy tokens from the prefill's token `nxt` and its cache at position `pos`, step(token, cache,
    pos) -> (next token, logits, cache) each: (the tokens, nxt first, and the seconds from the first step's dispatch
    to the last's result, wait(x) returning x once computed). The caller stacks the tokens after the clock stopped
    (under jit the stack compiles at each new shape: ~70 ms on the H200)."""
    wait(nxt)
    out = [nxt]
    t0 = time.perf_counter()
    for i in range(steps):
        nxt, _, cache = step(nxt, cache, pos + i)
        out.append(nxt)
        progress.bar(label, i + 1, steps)
    wait(nxt)
    return out, time.perf_counter() - t0
