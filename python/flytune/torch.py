"""flytune's MoE layer as a PyTorch custom op (docs/PYTHON.md).

    import flytune, flytune.torch as ft
    export = flytune.load("export/")
    ft.use(export)                                    # the export fused_experts calls
    y = ft.fused_experts(hidden_states, w1, w2, topk_weights, topk_ids)   # vLLM's convention
    y = torch.ops.flytune.moe_layer(hidden_states, w1, w2, topk_weights, topk_ids, export.key)

The op flytune::moe_layer launches the runtime's layer program on the current
CUDA stream; its workspace and output come from PyTorch's caching allocator, so
it can be captured in a CUDA graph and traced by torch.compile (a fake
implementation gives its output's shape). Weights a plan reads arranged
(shuffled / tiled) are arranged once per weight tensor (and again after an
in-place change) and kept beside it: run one call, or prepare_weights, before
capturing a graph.
"""
from __future__ import annotations

import threading
import weakref
from typing import Optional

import torch

import flytune
from flytune import _core

__all__ = ["moe_layer", "fused_experts", "prepare_weights", "use"]

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
_default_export: Optional[flytune.Export] = None


def use(export: flytune.Export) -> None:
    """Makes `export` the one fused_experts calls when given none."""
    global _default_export
    _default_export = export


def _selector(device: torch.device) -> str:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"{'hip' if torch.version.hip else 'cuda'}:{index}"


def _problem(export: flytune.Export, hidden_states, w1, w2, topk_weights, topk_ids) -> flytune.Problem:
    """Checks the vLLM argument shapes and finds the export's problem (the runtime's message where none fits)."""
    context = (f"flytune::moe_layer: hidden_states {tuple(hidden_states.shape)} {hidden_states.dtype}, "
               f"w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)}, topk_ids {tuple(topk_ids.shape)}")
    if hidden_states.dim() != 2 or w1.dim() != 3 or w2.dim() != 3 or topk_ids.dim() != 2 or \
            topk_weights.shape != topk_ids.shape or topk_ids.shape[0] != hidden_states.shape[0]:
        raise flytune.ArgumentError(f"{context}: expected hidden_states [T, H], w1 [E, 2I, H], w2 [E, H, I], "
                                    f"topk_weights and topk_ids [T, k]")
    experts, two_inter, hidden = w1.shape
    if tuple(w2.shape) != (experts, hidden, two_inter // 2) or hidden_states.shape[1] != hidden or two_inter % 2:
        raise flytune.ArgumentError(f"{context}: w1 [E, 2I, H] and w2 [E, H, I] do not fit hidden_states [T, H]")
    if w1.dtype != hidden_states.dtype or w2.dtype != hidden_states.dtype:
        raise flytune.ArgumentError(f"{context}: w1 {w1.dtype} and w2 {w2.dtype} must be of hidden_states' dtype")
    if topk_ids.dtype != torch.int32 or topk_weights.dtype != torch.float32:
        raise flytune.ArgumentError(f"{context}: topk_ids must be int32 and topk_weights float32 "
                                    f"(got {topk_ids.dtype}, {topk_weights.dtype}; fused_experts converts them)")
    dtype = _DTYPES.get(hidden_states.dtype, str(hidden_states.dtype).replace("torch.", ""))
    tokens = max(int(hidden_states.shape[0]), 1)
    key = flytune._call(export._core.find_problem, int(experts), int(hidden), int(two_inter) // 2,
                        int(topk_ids.shape[1]), dtype, tokens, context=context)
    return export.problem(key)


# Arranged copies by (weight tensor, layout name): rebuilt when the tensor
# changes in place (its version) and dropped with it.
_arranged: dict = {}
_arranged_lock = threading.Lock()


def _arranged_copy(export: flytune.Export, selector: str, w: torch.Tensor, name: str) -> torch.Tensor:
    key = (id(w), name, export.key)
    with _arranged_lock:
        hit = _arranged.get(key)
    if hit is not None and hit[0] == w._version and hit[1] == w.data_ptr():
        return hit[2]
    layout = _core.WEIGHT_LAYOUT_SHUFFLED if name.endswith("shuffled") else _core.WEIGHT_LAYOUT_TILED
    src = w.contiguous()
    dst = torch.empty_like(src)
    rows, cols = src.numel() // src.shape[-1], src.shape[-1]
    stream = torch.cuda.current_stream(src.device).cuda_stream
    flytune._call(export._core.arrange, selector, src.data_ptr(), dst.data_ptr(), rows, cols, layout, stream,
                  context=f"flytune: arranging {name}")
    with _arranged_lock:
        if hit is None:
            weakref.finalize(w, _arranged.pop, key, None)
        _arranged[key] = (w._version, w.data_ptr(), dst)
    return dst


def _ensure_open(export: flytune.Export, selector: str) -> None:
    if not export.is_open_on(selector):
        export.open_on(selector)


def prepare_weights(w1: torch.Tensor, w2: torch.Tensor, export: Optional[flytune.Export] = None) -> None:
    """Arranges w1 and w2 in every layout the export's plans for their shapes read, now (before a CUDA graph
    is captured, or to keep the first call fast)."""
    export = export or _default_export
    if export is None:
        raise flytune.ArgumentError("flytune.torch.prepare_weights: no export (pass one, or flytune.torch.use it)")
    experts, two_inter, hidden = w1.shape
    dtype = _DTYPES.get(w1.dtype, str(w1.dtype))
    problems = [p for p in export.problems if (p.experts, p.hidden, p.inter, p.dtype) ==
                (experts, hidden, two_inter // 2, dtype)]
    if not problems:
        export.find_problem(experts, hidden, two_inter // 2, 1, dtype)  # the runtime's NotFoundError
    selector = _selector(w1.device)
    _ensure_open(export, selector)
    for p in problems:
        for name in export.weight_copies(p.key):
            _arranged_copy(export, selector, w1 if name.startswith("w1") else w2, name)


@torch.library.custom_op("flytune::moe_layer", mutates_args=())
def moe_layer(hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, export: str) -> torch.Tensor:
    """The MoE layer of the export whose key is `export` (flytune.Export.key), in vLLM's convention:
    hidden_states [T, H], w1 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I], topk_weights [T, k]
    float32, topk_ids [T, k] int32 (-1: no expert). Returns [T, H] of hidden_states' dtype."""
    e = flytune._find_export(export)
    problem = _problem(e, hidden_states, w1, w2, topk_weights, topk_ids)
    if hidden_states.device.type != "cuda":
        raise flytune.ArgumentError(f"flytune::moe_layer: tensors must be on a GPU, got {hidden_states.device}")
    y = torch.empty_like(hidden_states)
    tokens = int(hidden_states.shape[0])
    if tokens == 0:
        return y
    selector = _selector(hidden_states.device)
    _ensure_open(e, selector)
    plan = e.plan(problem.key, tokens)
    copies = {}
    for name in flytune._LAYOUT_SHAPES:
        if plan[name]:
            copies[name] = _arranged_copy(e, selector, w1 if name.startswith("w1") else w2, name)
    workspace = torch.empty(plan["workspace"]["total"], dtype=torch.uint8, device=hidden_states.device)
    x, ids, wts = hidden_states.contiguous(), topk_ids.contiguous(), topk_weights.contiguous()
    w1c, w2c = w1.contiguous(), w2.contiguous()
    ptr = lambda name: copies[name].data_ptr() if name in copies else 0  # noqa: E731
    stream = torch.cuda.current_stream(hidden_states.device).cuda_stream
    flytune._call(e._core.launch, selector, problem.key, tokens, x.data_ptr(), ids.data_ptr(), wts.data_ptr(),
                  w1c.data_ptr(), w2c.data_ptr(), ptr("w1_shuffled"), ptr("w2_shuffled"), ptr("w1_tiled"),
                  ptr("w2_tiled"), workspace.data_ptr(), workspace.numel(), y.data_ptr(), stream,
                  context="flytune::moe_layer")
    return y


@moe_layer.register_fake
def _(hidden_states, w1, w2, topk_weights, topk_ids, export):
    _problem(flytune._find_export(export), hidden_states, w1, w2, topk_weights, topk_ids)
    return torch.empty_like(hidden_states)


def fused_experts(hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, inplace: bool = False, activation: str = "silu",
                  apply_router_weight_on_input: bool = False, use_fp8_w8a8: bool = False,
                  use_int8_w8a8: bool = False, use_int8_w8a16: bool = False, use_int4_w4a16: bool = False,
                  use_mxfp4_w4a4: bool = False, per_channel_quant: bool = False, global_num_experts: int = -1,
                  expert_map: Optional[torch.Tensor] = None, w1_scale=None, w2_scale=None, w1_zp=None, w2_zp=None,
                  a1_scale=None, a2_scale=None, block_shape=None, w1_bias=None, w2_bias=None,
                  export: Optional[flytune.Export] = None, **unsupported) -> torch.Tensor:
    """vLLM's fused_experts, on flytune's tuned kernels: SwiGLU (silu) experts in bf16/f16, routed weights
    applied after the down projection; expert_map (expert parallelism: global id -> local id, -1 elsewhere)
    is applied to topk_ids. Quantised weights, biases and other activations raise NotImplementedError."""
    export = export or _default_export
    if export is None:
        raise flytune.ArgumentError("flytune.torch.fused_experts: no export (pass export=, or flytune.torch.use one)")
    quantised = {"use_fp8_w8a8": use_fp8_w8a8, "use_int8_w8a8": use_int8_w8a8, "use_int8_w8a16": use_int8_w8a16,
                 "use_int4_w4a16": use_int4_w4a16, "use_mxfp4_w4a4": use_mxfp4_w4a4,
                 "per_channel_quant": per_channel_quant}
    given = [k for k, v in quantised.items() if v]
    given += [k for k, v in {"w1_scale": w1_scale, "w2_scale": w2_scale, "w1_zp": w1_zp, "w2_zp": w2_zp,
                             "a1_scale": a1_scale, "a2_scale": a2_scale, "block_shape": block_shape,
                             "w1_bias": w1_bias, "w2_bias": w2_bias}.items() if v is not None]
    given += [k for k, v in unsupported.items() if v not in (None, False)]
    if activation != "silu":
        given.append(f"activation={activation!r}")
    if apply_router_weight_on_input:
        given.append("apply_router_weight_on_input=True")
    if given:
        raise NotImplementedError(f"flytune.torch.fused_experts serves bf16/f16 SwiGLU experts without "
                                  f"quantisation or biases; not supported: {', '.join(given)}")
    ids = topk_ids
    if expert_map is not None:
        ids = torch.where(ids >= 0, expert_map[ids.clamp(min=0).long()], torch.full_like(ids, -1))
    ids = ids.to(torch.int32)
    y = torch.ops.flytune.moe_layer(hidden_states, w1, w2, topk_weights.to(torch.float32), ids, export.key)
    if inplace:
        hidden_states.copy_(y)
        return hidden_states
    return y
