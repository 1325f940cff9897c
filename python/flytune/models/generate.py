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
import os
import sys
import time

from flytune.models import report

NAME = "flytune-mixtral"


def parser() -> argparse.ArgumentParser:
    from flytune.models import moe
    p = report.model_parser(NAME, __doc__, moe.IMPLS, ["dense", "flytune", "ragged_dot"],
                            ": its large temporaries come before the other two's weight copies have cut the GPU "
                            "allocator's memory into pieces")
    p.add_argument("--trace", metavar="DIR",
                   help="after each measurement, a jax.profiler trace of a few more decode steps into DIR/<impl>-B<b>-P<p> "
                        "(perfetto_trace.json.gz) and its summary in the results (flytune.models.trace)")
    return p


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
    result = report.stats(times)
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

    def decode(self, nxt, cache, pos: int, steps: int, progress: report.Progress, label: str):
        """Greedy decode of `steps` tokens from the prefill's token `nxt` and its cache at position `pos`:
        (tokens [B, 1 + steps] (nxt, then each step's), seconds from the first step's dispatch to the last's end)."""
        import jax
        import jax.numpy as jnp
        out, elapsed = report.greedy_decode(self.step, jax.block_until_ready, nxt, cache, pos, steps, progress, label)
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


def _load_weights(args, progress: report.Progress):
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


def run(args) -> dict:
    import jax
    import numpy as np

    import flytune
    from flytune.models import mixtral
    progress = report.Progress(sys.stderr.isatty() if args.progress is None else args.progress)
    report.check_model_args(args)
    export = flytune.load(args.export) if args.export and "flytune" in args.impl else None
    c, params, source, experts = _load_weights(args, progress)
    mixtral.check_params(c, params)
    if export is not None:
        report.find_layer_problem(export, c, args)
    weight_bytes = _param_bytes(params) + mixtral.expert_bytes(c, jax.numpy.float8_e4m3fn if args.fp8 else
                                                               mixtral.DTYPES[args.dtype])
    result = report.header(NAME, args, c, source, weight_bytes,
                           f"{jax.devices()[0].platform}:{jax.devices()[0].device_kind}", {"jax": jax.__version__})
    rng = np.random.default_rng(args.seed)
    prompts = {(b, p): rng.integers(0, c.vocab, size=(b, p), dtype=np.int32)
               for b in args.batch for p in args.prompt_len}

    def prepare(impl):
        prepared = _prepare(impl, c, experts, export, args.fp8)
        return Model(c, impl, params, prepared), _param_bytes(prepared), _memory()

    report.measure_impls(result, args, progress, prompts, prepare, c.layers,
                         lambda model, b, p, prompt: _measure(model, args, b, p, jax.numpy.asarray(prompt), progress))
    return result


def _measure(model: Model, args, b: int, p: int, tokens, progress: report.Progress):
    """One implementation at one batch x prompt: (its row, the prefill's last logits, the greedy tokens)."""
    import jax
    row, logits, generated = report.measure(model, args, b, p, tokens, progress, jax.block_until_ready, _memory)
    length, label = p + args.new_tokens, f"{model.impl} B={b} P={p}"
    if args.trace:
        from flytune.models import trace
        folder = os.path.join(args.trace, f"{model.impl}-B{b}-P{p}")
        steps = min(8, args.new_tokens)
        try:  # a profiler that cannot start costs the trace, not the row
            nxt, _, cache = model.prefill(tokens, length)
            with trace.capture(folder):
                model.decode(nxt, cache, p, steps, report.Progress(False), label)
            row["trace"] = {"folder": folder, "steps": steps, **trace.summary(folder)}
        except Exception as e:
            row["trace"] = {"folder": folder, "error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    return row, logits, generated


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return report.main(NAME, run, args)


if __name__ == "__main__":
    sys.exit(main())
