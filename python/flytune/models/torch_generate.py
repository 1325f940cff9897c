"""flytune-mixtral-torch: the Mixtral model in PyTorch generating with each MoE implementation, and its tokens/s.

    flytune-mixtral-torch --export DIR --layers 16 --batch 1,32 --prompt-len 512 --new-tokens 64 --json run.json

flytune-mixtral's driver (flytune.models.generate) for the PyTorch model (flytune.models.torch_mixtral): for every
implementation asked for (--impl, default all three: dense, flytune, grouped_mm) and every batch x prompt length,
the same random prompts as flytune-mixtral's (--seed), the prefill, then greedy decode of --new-tokens tokens, one
eager step per token into a preallocated KV cache. The weights are the JAX model's for the same --seed (converted
through DLPack; --weights torch: torch's generator, without JAX) or --checkpoint's; only the MoE layer differs.
Printed and in --json (flytune-mixtral's keys): prefill and decode tokens/s, the time per layer part (attention,
MoE, the rest) from the blocks run alone on the same shapes, and how far each implementation's logits and greedy
tokens are from the first one's. On the CPU (--device cpu) flytune's layers run on the CPU emulator: an export of
`flytune search --emulate`, for tests, never for timing. docs/PYTHON.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

from flytune.models import report

NAME = "flytune-mixtral-torch"


def parser() -> argparse.ArgumentParser:
    from flytune.models import torch_mixtral as tm
    p = report.model_parser(NAME, __doc__, tm.IMPLS, ["dense", "flytune", "grouped_mm"], "")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   help="where the model runs (default cuda where torch sees a GPU, else cpu: flytune's layers on the "
                        "CPU emulator, whose export is one of flytune search --emulate)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="decode steps replayed from a CUDA graph of the step, captured at the first step of each "
                        "batch x prompt (static shapes: the whole KV cache masked by position); --device cuda")
    p.add_argument("--weights", choices=["jax", "torch"],
                   help="random weights: jax, the JAX model's for --seed (needs jax; the default where it imports), "
                        "or torch: torch's generator (other values)")
    return p


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, args: tuple, repeats: int, device) -> dict:
    """Seconds per call of fn(*args): after a warm-up call, `repeats` rounds of back-to-back calls (as many as fill
    ~0.1 s, one synchronisation at the end of a round), each round's time over its calls."""
    fn(*args)
    _sync(device)
    t0 = time.perf_counter()
    fn(*args)
    _sync(device)
    inner = max(1, min(50, int(0.1 / max(time.perf_counter() - t0, 1e-6))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        _sync(device)
        times.append((time.perf_counter() - t0) / inner)
    result = report.stats(times)
    result["calls_per_round"] = inner
    return result


class _GraphedStep:
    """The decode step captured in a CUDA graph on one cache, replayed per token with the token and position copied
    into its inputs (static shapes: torch_mixtral.attention with a position tensor). Captured at its first step's
    position, after two warm-up steps there that write the cache row the step itself writes."""

    def __init__(self, model: "Model", token, cache, pos: int):
        import torch
        self.token = token.clone()
        self.pos = torch.full((), pos, dtype=torch.int64, device=model.device)
        side = torch.cuda.Stream(model.device)
        side.wait_stream(torch.cuda.current_stream(model.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                model.static_step(self.token, cache, self.pos)
        torch.cuda.current_stream(model.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.next, self.logits = model.static_step(self.token, cache, self.pos)

    def __call__(self, token, pos: int):
        self.token.copy_(token)
        self.pos.fill_(pos)
        self.graph.replay()
        return self.next.clone(), self.logits


class Model:
    """One implementation's prefill and decode step over shared weights: eager PyTorch, or (graph) the decode
    step replayed from a CUDA graph per batch x cache length, on a cache kept for it."""

    def __init__(self, c, impl: str, params: dict, prepared: list, device, graph: bool = False):
        self.c, self.impl, self.params, self.prepared, self.device = c, impl, params, prepared, device
        self.dtype = params["embed"].dtype
        self.graph = graph
        self._caches, self._graphs = {}, {}  # (batch, length) -> cache; id(cache) -> _GraphedStep

    def prefill(self, tokens, length: int):
        import torch
        from flytune.models import torch_mixtral as tm
        shape = (tokens.shape[0], length)
        if not self.graph:
            cache = tm.empty_cache(self.c, *shape, self.device, self.dtype)
        else:  # the graph's cache: written by every prefill of this shape (rows past the prompt are masked)
            if shape not in self._caches:
                self._caches[shape] = tm.empty_cache(self.c, *shape, self.device, self.dtype)
            cache = self._caches[shape]
        logits = tm.forward(self.c, self.impl, self.params, self.prepared, tokens, cache, 0)
        return torch.argmax(logits, dim=-1), logits, cache

    def step(self, token, cache, pos: int):
        import torch
        from flytune.models import torch_mixtral as tm
        if self.graph:
            if id(cache) not in self._graphs:
                self._graphs[id(cache)] = _GraphedStep(self, token, cache, pos)
            nxt, logits = self._graphs[id(cache)](token, pos)
            return nxt, logits, cache
        logits = tm.forward(self.c, self.impl, self.params, self.prepared, token[:, None], cache, pos)
        return torch.argmax(logits, dim=-1), logits, cache

    def static_step(self, token, cache, pos):
        """The step at a position tensor (static shapes): (the next token, the logits)."""
        import torch
        from flytune.models import torch_mixtral as tm
        logits = tm.forward(self.c, self.impl, self.params, self.prepared, token[:, None], cache, pos)
        return torch.argmax(logits, dim=-1), logits

    def decode(self, nxt, cache, pos: int, steps: int, progress: report.Progress, label: str):
        """Greedy decode of `steps` tokens from the prefill's token `nxt` and its cache at position `pos`:
        (tokens [B, 1 + steps] (nxt, then each step's), seconds from the first step's launch to the last's end)."""
        import torch
        out, elapsed = report.greedy_decode(self.step, lambda x: _sync(self.device), nxt, cache, pos, steps, progress,
                                            label)
        return torch.stack(out, dim=1), elapsed

    def parts(self, batch: int, prompt: int, new_tokens: int, repeats: int, seed: int) -> dict:
        """Seconds of one layer's attention block (with its norm) and MoE block at the prefill shape and at a
        decode step."""
        import torch
        from flytune.models import torch_mixtral as tm
        c, p, e = self.c, self.params["layers"][0], self.prepared[0]
        out = {}
        with torch.inference_mode():
            for phase, T, pos in (("prefill", prompt, 0), ("decode", 1, prompt)):
                g = torch.Generator(device=self.device).manual_seed(seed + T)
                x = torch.randn(batch, T, c.hidden, generator=g, device=self.device).to(self.dtype)
                (ck, cv), = tm.empty_cache(c.with_layers(1), batch, prompt + new_tokens, self.device, self.dtype)
                attn = _timed(lambda: tm.attention(c, p, tm.rms_norm(x, p["attn_norm"], c.norm_eps), ck, cv, pos), (),
                              repeats, self.device)
                moe_t = _timed(lambda: tm.moe_block(c, p, self.impl, e, x), (), repeats, self.device)
                out[phase] = {"attention_s": attn, "moe_s": moe_t}
        return out


def _jax_dtype(name: str):
    import jax.numpy as jnp
    return {"bf16": jnp.bfloat16, "f32": jnp.float32}[name]


def _load_weights(args, device, progress: report.Progress):
    """(config, the params without the experts, their source, experts(layer) -> (w1, w2)) on `device`: each
    implementation reads every layer's experts afresh and keeps only its own layout of them."""
    from flytune.models import torch_mixtral as tm
    from flytune.models.config import CONFIGS
    dtype = tm.DTYPES[args.dtype]
    source = "torch" if args.checkpoint is None and args.weights == "torch" else "jax"
    if source == "jax" and importlib.util.find_spec("jax") is None:
        raise ValueError(f"{'--checkpoint' if args.checkpoint else '--weights jax'} needs jax (pip install jax), "
                         f"which does not import here" + ("" if args.checkpoint else "; --weights torch needs none"))
    if args.checkpoint:
        from flytune.models import checkpoint
        c = checkpoint.config_from_dir(args.checkpoint)
        c = c.with_layers(args.layers) if args.layers else c
        progress.note(f"loading {c.layers} layers from {args.checkpoint}")
        ckpt = checkpoint.Checkpoint(args.checkpoint, c, _jax_dtype(args.dtype))
        return (c, tm.weights_from_jax(ckpt.params(experts=False), device), f"checkpoint {args.checkpoint}",
                lambda layer: tuple(tm.from_jax(a, device) for a in ckpt.experts(layer)))
    c = CONFIGS[args.config]
    c = c.with_layers(args.layers) if args.layers else c
    progress.note(f"random weights: {c.layers} layers of {args.config} (seed {args.seed}, {args.dtype}, {source})")
    if source == "jax":
        from flytune.models import mixtral
        jdtype = _jax_dtype(args.dtype)
        return (c, tm.weights_from_jax(mixtral.random_params(c, args.seed, jdtype, experts=False), device),
                f"random (seed {args.seed}, the JAX model's)",
                lambda layer: tuple(tm.from_jax(a, device) for a in mixtral.random_experts(c, args.seed, layer, jdtype)))

    def experts(layer):
        w = tm.random_layer(c, args.seed, layer, device, dtype, tm.EXPERTS)
        return w["w1"], w["w2"]
    return c, tm.random_params(c, args.seed, device, dtype, experts=False), f"random (seed {args.seed}, torch)", experts


def _prepare(impl: str, c, experts, export, args) -> tuple:
    """(every layer's experts in the implementation's layout, made one layer at a time, the bytes it holds):
    flytune's are the arranged copies its plans read (kept by flytune.torch) and the plain weights they read."""
    from flytune.models import torch_mixtral as tm
    prepared = [tm.prepare(impl, *experts(layer), export, args.fp8) for layer in range(c.layers)]
    held = tm.param_bytes(prepared)
    if impl == "flytune":
        e, key = prepared[0], report.find_layer_problem(export, c, args).key
        copies = [e.w1 if n.startswith("w1") else e.w2 for n in export.weight_copies(key)]
        held += c.layers * sum(t.numel() * t.element_size() for t in copies)
    return prepared, held


def _memory(device) -> dict:
    """The CUDA caching allocator's statistics (bytes; flytune-mixtral's keys), none on the CPU."""
    import torch
    if device.type != "cuda":
        return {}
    s = torch.cuda.memory_stats(device)
    return {"bytes_in_use": int(s.get("allocated_bytes.all.current", 0)),
            "peak_bytes_in_use": int(s.get("allocated_bytes.all.peak", 0)),
            "bytes_limit": int(torch.cuda.get_device_properties(device).total_memory)}


def _open_export(args, device):
    import flytune
    if not args.export or "flytune" not in args.impl:
        return None
    import flytune.torch  # noqa: F401  registers torch.ops.flytune
    return flytune.load(args.export, device="emulate" if device.type == "cpu" else None)


def run(args) -> dict:
    import numpy as np
    import torch

    from flytune.models import torch_mixtral as tm
    progress = report.Progress(sys.stderr.isatty() if args.progress is None else args.progress)
    report.check_model_args(args)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no GPU (torch.cuda.is_available() is False); --device cpu runs "
                         "flytune's layers on the CPU emulator")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.cuda_graph and device.type != "cuda":
        raise ValueError(f"--cuda-graph needs --device cuda (the model runs on {device.type})")
    if args.weights is None:
        args.weights = "jax" if importlib.util.find_spec("jax") else "torch"
    export = _open_export(args, device)
    c, params, source, experts = _load_weights(args, device, progress)
    params["lm_head"] = params["lm_head"].float()  # once: the logits are float32 products (torch_mixtral.forward)
    if export is not None:
        report.find_layer_problem(export, c, args)
    grouped = tm.grouped_mm_backend(device, tm.DTYPES[args.dtype])
    jax_version = None
    if args.weights == "jax" or args.checkpoint:
        import jax
        jax_version = jax.__version__
    expert_bytes = c.layers * 3 * c.experts * c.hidden * c.inter * (1 if args.fp8 else tm.DTYPES[args.dtype].itemsize)
    result = report.header(NAME, args, c, source, tm.param_bytes(params) + expert_bytes,
                           f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else "cpu:cpu",
                           {"jax": jax_version, "framework": "torch", "torch": torch.__version__})
    result["grouped_mm"], result["cuda_graph"] = grouped, args.cuda_graph
    result["flytune_device"] = export.device if export is not None else None
    result["notes"] = [] if grouped == "torch._grouped_mm" or "grouped_mm" not in args.impl else [f"grouped_mm: {grouped}"]
    for note in result["notes"]:
        progress.note(note)
    rng = np.random.default_rng(args.seed)  # flytune-mixtral's prompts for the same seed
    prompts = {(b, p): rng.integers(0, c.vocab, size=(b, p), dtype=np.int32)
               for b in args.batch for p in args.prompt_len}

    def prepare(impl):
        prepared, held = _prepare(impl, c, experts, export, args)
        return Model(c, impl, params, prepared, device, args.cuda_graph), held, _memory(device)

    report.measure_impls(result, args, progress, prompts, prepare, c.layers,
                         lambda model, b, p, prompt: _measure(model, args, b, p, prompt, progress))
    return result


def _measure(model: Model, args, b: int, p: int, prompt, progress: report.Progress):
    """One implementation at one batch x prompt (report.measure): its row, the last logits and the greedy tokens
    in host memory."""
    import torch
    tokens = torch.from_numpy(prompt).to(model.device).long()

    def wait(out):
        _sync(model.device)
        return out
    row, logits, generated = report.measure(model, args, b, p, tokens, progress, wait, lambda: _memory(model.device))
    return row, logits.cpu().numpy(), generated.cpu().numpy()


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX makes the weights beside torch
    return report.main(NAME, run, args)


if __name__ == "__main__":
    sys.exit(main())
