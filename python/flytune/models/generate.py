"""flytune-mixtral: a Mixtral-architecture model generating with each MoE implementation, and its tokens/s.

    flytune-mixtral --export DIR --layers 16 --batch 1,32 --prompt-len 512 --new-tokens 64 --json run.json

For every implementation asked for (--impl, default all three: dense, flytune, ragged_dot) and every batch x
prompt length: a batch of random prompts (fixed seed), the prefill under jit, then greedy decode of
--new-tokens tokens, one jitted step per token with the KV cache donated. The weights are the same for every
implementation (random with --seed, or --checkpoint); only the MoE layer differs. Printed and in --json:
prefill tokens/s (median of --repeats prefills), decode tokens/s, the time per layer part (attention, MoE, the
rest) from the blocks jitted alone on the same shapes, and how far each implementation's logits and greedy
tokens are from the first one's. docs/PYTHON.md.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import time

NAME = "flytune-mixtral"


def _ints(text: str) -> list:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers >= 1 separated by commas, got '{text}'")
    return values


def _impls(text: str) -> list:
    from flytune.models import moe
    values = [v.strip() for v in text.split(",") if v.strip()]
    for v in values:
        if v not in moe.IMPLS:
            raise argparse.ArgumentTypeError(f"unknown implementation '{v}' (known: {', '.join(moe.IMPLS)})")
    if not values:
        raise argparse.ArgumentTypeError("no implementation given")
    return values


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {v}")
    return v


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=NAME, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="example:\n  flytune-mixtral --export export/h200 --layers 16 --batch 1,32 "
                                       "--prompt-len 512 --new-tokens 64 --json run.json")
    p.add_argument("--config", default="mixtral-8x7b", choices=["mixtral-8x7b", "tiny"],
                   help="model shape (default mixtral-8x7b; tiny: the tests' 2-layer model)")
    p.add_argument("--layers", type=_positive, help="decoder layers to build (default: all of the config)")
    p.add_argument("--impl", type=_impls, default=["dense", "flytune", "ragged_dot"],
                   help="MoE implementations, comma-separated: flytune, ragged_dot, dense (default all, dense first: "
                        "its large temporaries come before the other two's weight copies have cut the GPU "
                        "allocator's memory into pieces; the first is the one the others are compared with)")
    p.add_argument("--export", help="the flytune export folder (flytune search + flytune export) for the flytune "
                                    "implementation: it must hold the model's MoE problem")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32"],
                   help="weights and activations (default bf16; f32 for checks on the CPU: flytune's layers are 16-bit)")
    p.add_argument("--fp8", action="store_true",
                   help="fp8 experts: w1/w2 quantised per tensor to e4m3 (one scale per expert matrix; flytune's "
                        "per-tensor fp8 problem, which --export must hold), x bf16 scaled per call by its amax; "
                        "ragged_dot and dense dequantise the same codes to bf16 in the step (flytune.models.moe)")
    p.add_argument("--batch", type=_ints, default=[1], help="batch sizes, comma-separated (default 1)")
    p.add_argument("--prompt-len", type=_ints, default=[512], help="prompt lengths, comma-separated (default 512)")
    p.add_argument("--new-tokens", type=_positive, default=32, help="greedy decode steps (default 32)")
    p.add_argument("--repeats", type=_positive, default=3, help="timed prefills and part timings (median; default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompts (default 0)")
    p.add_argument("--checkpoint", help="a Hugging Face Mixtral folder (config.json + *.safetensors) instead of "
                                        "random weights (flytune.models.checkpoint)")
    p.add_argument("--no-parts", action="store_true", help="skip the per-part timings")
    p.add_argument("--trace", metavar="DIR",
                   help="after each measurement, a jax.profiler trace of a few more decode steps into DIR/<impl>-B<b>-P<p> "
                        "(perfetto_trace.json.gz) and its summary in the results (flytune.models.trace)")
    p.add_argument("--json", help="write the results as JSON to this file ('-': stdout)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on stderr (default: when stderr is a terminal)")
    return p


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


def _stats(times: list) -> dict:
    import numpy as np
    a = np.asarray(times)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)),
            "n": len(times)}


def _timed(fn, args: tuple, repeats: int, feed=None) -> dict:
    """Seconds per call of fn(*args): after a warm-up call, `repeats` rounds of back-to-back calls (as many as
    fill ~0.1 s, one block at the end of a round, so the host's dispatch overlaps the device's work as it does
    in the model), each round's time over its calls. `feed(args, result)` gives the next call's arguments (for
    donated buffers)."""
    import jax

    def call(a):
        out = fn(*a)
        return out, (feed(a, out) if feed else a)

    out, args = call(args)
    jax.block_until_ready(out)
    t0 = time.perf_counter()
    out, args = call(args)
    jax.block_until_ready(out)
    inner = max(1, min(50, int(0.1 / max(time.perf_counter() - t0, 1e-6))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            out, args = call(args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / inner)
    result = _stats(times)
    result["calls_per_round"] = inner
    return result


@functools.lru_cache(maxsize=None)
def _attention_block(c):
    """One layer's attention block (norm, attention, output projection) jitted alone, for the part timings; one
    per config, shared by the implementations (it does not depend on the MoE)."""
    import jax

    from flytune.models import mixtral
    return jax.jit(lambda p, x, ck, cv, pos: mixtral.attention(c, p, mixtral.rms_norm(x, p["attn_norm"], c.norm_eps),
                                                              ck, cv, pos), donate_argnums=(2, 3))


@functools.lru_cache(maxsize=None)
def _jitted(c, impl: str):
    """The jitted prefill, decode step and MoE block of (config, implementation): one set per process, so every
    Model of the same config and implementation reuses their compilations."""
    import jax
    import jax.numpy as jnp

    from flytune.models import mixtral

    def prefill(params, prepared, tokens, length):
        cache = mixtral.empty_cache(c, tokens.shape[0], length, params["embed"].dtype)
        logits, cache = mixtral.forward(c, impl, params, prepared, tokens, cache, 0)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits, cache

    def step(params, prepared, token, cache, pos):
        logits, cache = mixtral.forward(c, impl, params, prepared, token[:, None], cache, pos)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits, cache

    return (jax.jit(prefill, static_argnums=(3,)), jax.jit(step, donate_argnums=(3,)),
            jax.jit(lambda p, w, x: mixtral.moe_block(c, p, impl, w, x)))


class Model:
    """One implementation's jitted prefill and decode step over shared weights."""

    def __init__(self, c, impl: str, params: dict, prepared: list):
        self.c, self.impl, self.params, self.prepared = c, impl, params, prepared
        self._prefill, self._step, self._moe = _jitted(c, impl)
        self._attn = _attention_block(c)

    def prefill(self, tokens, length: int):
        return self._prefill(self.params, self.prepared, tokens, length)

    def step(self, token, cache, pos):
        import jax.numpy as jnp
        return self._step(self.params, self.prepared, token, cache, jnp.int32(pos))

    def decode(self, nxt, cache, pos: int, steps: int, progress: Progress, label: str):
        """Greedy decode of `steps` tokens from the prefill's token `nxt` and its cache at position `pos`:
        (tokens [B, 1 + steps] (nxt, then each step's), seconds from the first step's dispatch to the last's end)."""
        import jax
        import jax.numpy as jnp
        jax.block_until_ready(nxt)
        out = [nxt]
        t0 = time.perf_counter()
        for i in range(steps):
            nxt, _, cache = self.step(nxt, cache, pos + i)
            out.append(nxt)
            progress.bar(label, i + 1, steps)
        jax.block_until_ready(nxt)
        elapsed = time.perf_counter() - t0  # before the stack: its first call at a shape compiles (~70 ms on the H200)
        return jnp.stack(out, axis=1), elapsed

    def parts(self, batch: int, prompt: int, new_tokens: int, repeats: int, seed: int) -> dict:
        """Seconds of one layer's attention block and MoE block at the prefill shape and at a decode step."""
        import jax
        import jax.numpy as jnp
        from flytune.models import mixtral
        c, p, w = self.c, self.params["layers"][0], self.prepared[0]
        dtype = self.params["embed"].dtype
        out = {}
        for phase, T, pos in (("prefill", prompt, 0), ("decode", 1, prompt)):
            x = jax.random.normal(jax.random.PRNGKey(seed + T), (batch, T, c.hidden), dtype)
            (ck, cv), = mixtral.empty_cache(c.with_layers(1), batch, prompt + new_tokens, dtype)
            attn = _timed(self._attn, (p, x, ck, cv, jnp.int32(pos)), repeats,
                          feed=lambda a, r: (a[0], a[1], r[1], r[2], a[4]))
            moe_t = _timed(self._moe, (p, w, x), repeats)
            out[phase] = {"attention_s": attn, "moe_s": moe_t}
        return out


def _agreement(ref_logits, ref_tokens, logits, tokens) -> dict:
    import numpy as np
    a, b = np.asarray(logits, np.float64), np.asarray(ref_logits, np.float64)
    same = np.asarray(tokens) == np.asarray(ref_tokens)               # [B, steps]
    steps = same.shape[1]
    first_diff = [int(np.argmin(row)) if not row.all() else steps for row in same]
    return {"logits_max_abs": float(np.abs(a - b).max()),
            "logits_rel_l2": float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)),
            "tokens_equal_steps": int(min(first_diff)), "steps": steps,
            "tokens_equal_fraction": float(same.mean())}


def _load_weights(args, progress: Progress):
    """(config, the params without the experts' weights, their source, experts(layer) -> (w1, w2)): each
    implementation reads every layer's experts afresh and keeps only its own layout of them (moe.prepare), so
    the GPU holds one copy of the experts, not the original beside a rearranged one."""
    from flytune.models import checkpoint, mixtral
    dtype = mixtral.DTYPES[args.dtype]
    if args.checkpoint:
        c = checkpoint.config_from_dir(args.checkpoint)
        if args.layers:
            c = c.with_layers(args.layers)
        progress.note(f"loading {c.layers} layers from {args.checkpoint}")
        ckpt = checkpoint.Checkpoint(args.checkpoint, c, dtype)
        return c, ckpt.params(experts=False), f"checkpoint {args.checkpoint}", ckpt.experts
    c = mixtral.CONFIGS[args.config]
    if args.layers:
        c = c.with_layers(args.layers)
    progress.note(f"random weights: {c.layers} layers of {args.config} (seed {args.seed}, {args.dtype})")
    return (c, mixtral.random_params(c, args.seed, dtype, experts=False), f"random (seed {args.seed})",
            lambda layer: mixtral.random_experts(c, args.seed, layer, dtype))


def _prepare(impl: str, c, experts, export, fp8: bool = False) -> list:
    """Every layer's MoE weights in the implementation's layout, made one layer at a time from experts(layer);
    the originals go as each layer is done (unless the layout is the original: dense)."""
    import jax

    from flytune.models import moe
    prepared = []
    for layer in range(c.layers):
        w1, w2 = experts(layer)
        prepared.append(moe.prepare(impl, w1, w2, export, fp8))
        del w1, w2
        jax.block_until_ready(prepared[-1])
    return prepared


def _memory() -> dict:
    """The default device's allocator statistics (bytes), where the backend keeps them."""
    import jax
    stats = jax.devices()[0].memory_stats() or {}
    return {k: int(stats[k]) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit") if k in stats}


def _param_bytes(tree) -> int:
    import jax
    return sum(int(x.size) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "dtype"))


def _write_json(result: dict, path) -> None:
    if not path:
        return
    text = json.dumps(result, indent=1)
    if path == "-":
        print(text)
        return
    with open(path + ".part", "w") as f:
        f.write(text + "\n")
    os.replace(path + ".part", path)


def run(args) -> dict:
    import jax
    import numpy as np

    import flytune
    from flytune.models import mixtral, moe
    progress = Progress(sys.stderr.isatty() if args.progress is None else args.progress)
    if "flytune" in args.impl and not args.export:
        raise ValueError("the flytune implementation needs --export DIR (an export of the model's MoE problem; "
                         "or leave flytune out of --impl)")
    if args.fp8 and args.dtype != "bf16":
        raise ValueError("--fp8 takes bf16 activations (--dtype bf16): flytune's fp8 layers read and write bf16")
    export = flytune.load(args.export) if args.export and "flytune" in args.impl else None
    c, params, source, experts = _load_weights(args, progress)
    mixtral.check_params(c, params)
    if export is not None:  # the problem must be there before anything is timed
        if args.fp8:
            export.find_problem(c.experts, c.hidden, c.inter, c.topk, "e4m3", scales="per-tensor")
        else:
            export.find_problem(c.experts, c.hidden, c.inter, c.topk, args.dtype)
    result = {
        "model": args.config if not args.checkpoint else "checkpoint",
        "config": {k: getattr(c, k) for k in c.__dataclass_fields__},
        "layers": c.layers, "dtype": args.dtype, "weights": source,
        "experts": "e4m3 per-tensor" if args.fp8 else args.dtype,
        "weight_bytes": _param_bytes(params) + mixtral.expert_bytes(c, jax.numpy.float8_e4m3fn if args.fp8 else
                                                                    mixtral.DTYPES[args.dtype]),
        "device": f"{jax.devices()[0].platform}:{jax.devices()[0].device_kind}", "jax": jax.__version__,
        "flytune": flytune.__version__, "export": args.export, "new_tokens": args.new_tokens,
        "repeats": args.repeats, "command": " ".join([NAME] + sys.argv[1:]), "runs": [],
    }
    rng = np.random.default_rng(args.seed)
    prompts = {(b, p): rng.integers(0, c.vocab, size=(b, p), dtype=np.int32)
               for b in args.batch for p in args.prompt_len}
    reference = {}
    result["errors"] = []
    for impl in args.impl:
        progress.note(f"{impl}: preparing the MoE weights of {c.layers} layers")
        try:
            prepared = _prepare(impl, c, experts, export, args.fp8)
        except Exception as e:  # reported in the results and the exit code, and the next implementation runs
            _failed(result, progress, impl, None, e)
            continue
        result.setdefault("moe_weight_bytes", {})[impl] = _param_bytes(prepared)
        result.setdefault("memory_after_prepare", {})[impl] = _memory()
        model = Model(c, impl, params, prepared)
        for (b, p), prompt in prompts.items():
            try:
                row, logits, generated = _measure(model, args, b, p, jax.numpy.asarray(prompt), progress)
            except Exception as e:
                _failed(result, progress, impl, (b, p), e)
                continue
            if (b, p) in reference:
                row["agreement"] = {"vs": reference[(b, p)][0], **_agreement(*reference[(b, p)][1:], logits, generated)}
            else:
                reference[(b, p)] = (impl, logits, generated)
            result["runs"].append(row)
            progress.note(_line(row))
            if args.json != "-":  # after every row: a run cut short keeps what it measured
                result["speedups"] = _speedups(result["runs"])
                _write_json(result, args.json)
        del model, prepared
        gc.collect()
    result["speedups"] = _speedups(result["runs"])
    return result


def _failed(result: dict, progress: Progress, impl: str, shape, e: Exception) -> None:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    where = impl if shape is None else f"{impl} B={shape[0]} P={shape[1]}"
    result["errors"].append({"impl": impl, "shape": shape, "error": f"{type(e).__name__}: {first}"})
    progress.note(f"{where}: FAILED: {type(e).__name__}: {first}")


def _measure(model: Model, args, b: int, p: int, tokens, progress: Progress):
    """One implementation at one batch x prompt: (its row, the prefill's last logits, the greedy tokens)."""
    import jax
    label = f"{model.impl} B={b} P={p}"
    progress.note(f"{label}: compiling and warming up")
    length = p + args.new_tokens
    nxt, logits, cache = model.prefill(tokens, length)                   # compile, warm up
    model.decode(nxt, cache, p, min(2, args.new_tokens), Progress(False), label)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        nxt, logits, cache = jax.block_until_ready(model.prefill(tokens, length))
        times.append(time.perf_counter() - t0)
    prefill = _stats(times)
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
    row["memory"] = _memory()
    if args.trace:
        from flytune.models import trace
        folder = os.path.join(args.trace, f"{model.impl}-B{b}-P{p}")
        steps = min(8, args.new_tokens)
        try:  # a profiler that cannot start costs the trace, not the row
            nxt, _, cache = model.prefill(tokens, length)
            with trace.capture(folder):
                model.decode(nxt, cache, p, steps, Progress(False), label)
            row["trace"] = {"folder": folder, "steps": steps, **trace.summary(folder)}
        except Exception as e:
            row["trace"] = {"folder": folder, "error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    return row, logits, generated


def _speedups(runs: list) -> list:
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


def _line(r: dict) -> str:
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
    for s in result.get("speedups", []):
        lines.append(f"\nflytune B={s['batch']} P={s['prompt_len']}: prefill {s['prefill']['speedup']:.2f}x "
                     f"{s['prefill']['vs']}, decode {s['decode']['speedup']:.2f}x {s['decode']['vs']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import flytune
        result = run(args)
    except (flytune.FlytuneError, ValueError, OSError, KeyError) as e:
        print(f"{NAME}: error: {e}", file=sys.stderr)
        return 1
    print(table(result))
    _write_json(result, args.json)
    for e in result["errors"]:
        where = e["impl"] if e["shape"] is None else f"{e['impl']} B={e['shape'][0]} P={e['shape'][1]}"
        print(f"{NAME}: error: {where}: {e['error']}", file=sys.stderr)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
