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
capturing a graph; arranged_weights also gives back stand-ins for the weights no
plan reads plain, so the layer's weights are held once. On an export opened on
the CPU emulator (flytune.load(dir, device="emulate")) the same op runs on CPU
tensors, synchronously.

Training: flytune::moe_layer has an autograd formula (torch.library.register_autograd)
whose backward is the custom op flytune::moe_layer_backward: the export's backward
buckets (`flytune search --pass both`), the saved tensors recomputed from x, the
routing and w1; gradients for hidden_states, w1, w2 (in the weights' dtype) and topk_weights. It reads the
plain weights (not stand-ins of arranged_weights); fp8 layers and exports without
backward buckets raise one line in the backward (docs/TRAINING.md).
"""
from __future__ import annotations

import threading
import weakref
from typing import Optional

import torch

import flytune
from flytune import _core

__all__ = ["moe_layer", "moe_layer_backward", "fused_experts", "prepare_weights", "arranged_weights", "use"]

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
# fp8 weights by the export's format (Problem.dtype); torch.uint8 holds either's codes.
_FP8_TORCH = {"e4m3": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
_FP8_WEIGHTS = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.uint8)
_default_export: Optional[flytune.Export] = None


def use(export: flytune.Export) -> None:
    """Makes `export` the one fused_experts calls when given none."""
    global _default_export
    _default_export = export


def _selector(export: flytune.Export, device: torch.device) -> str:
    """The runtime device a launch on `device` runs on: the CPU emulator (export.device "emulate") for an emulated
    export, whose tensors are CPU tensors (_check_devices), else the tensor's GPU."""
    if export.emulated:
        return export.device
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"{'hip' if torch.version.hip else 'cuda'}:{index}"


def _stream(device: torch.device) -> int:
    """The stream a launch is enqueued on: PyTorch's current one on a GPU; none on the CPU emulator, which runs
    the layer synchronously on host memory before the call returns."""
    return 0 if device.type == "cpu" else torch.cuda.current_stream(device).cuda_stream


def _problem(export: flytune.Export, hidden_states, w1, w2, topk_weights, topk_ids, scales: dict) -> flytune.Problem:
    """Checks the vLLM argument shapes and finds the export's problem (the runtime's message where none fits);
    for fp8 weights also their dtype and the scale tensors (`scales`: x_scale, w1_scales, w2_scales, inter_scale or None)."""
    context = (f"flytune::moe_layer: hidden_states {tuple(hidden_states.shape)} {hidden_states.dtype}, "
               f"w1 {tuple(w1.shape)} {w1.dtype}, w2 {tuple(w2.shape)}, topk_ids {tuple(topk_ids.shape)}")
    if hidden_states.dim() != 2 or w1.dim() != 3 or w2.dim() != 3 or topk_ids.dim() != 2 or \
            topk_weights.shape != topk_ids.shape or topk_ids.shape[0] != hidden_states.shape[0]:
        raise flytune.ArgumentError(f"{context}: expected hidden_states [T, H], w1 [E, 2I, H], w2 [E, H, I], "
                                    f"topk_weights and topk_ids [T, k]")
    experts, two_inter, hidden = w1.shape
    if tuple(w2.shape) != (experts, hidden, two_inter // 2) or hidden_states.shape[1] != hidden or two_inter % 2:
        raise flytune.ArgumentError(f"{context}: w1 [E, 2I, H] and w2 [E, H, I] do not fit hidden_states [T, H]")
    if topk_ids.dtype != torch.int32 or topk_weights.dtype != torch.float32:
        raise flytune.ArgumentError(f"{context}: topk_ids must be int32 and topk_weights float32 "
                                    f"(got {topk_ids.dtype}, {topk_weights.dtype}; fused_experts converts them)")
    shape = (int(experts), int(hidden), int(two_inter) // 2, int(topk_ids.shape[1]))
    tokens = max(int(hidden_states.shape[0]), 1)
    if w1.dtype in _FP8_WEIGHTS:
        return _fp8_problem(export, context, shape, hidden_states, w1, w2, scales)
    if w1.dtype != hidden_states.dtype or w2.dtype != hidden_states.dtype:
        raise flytune.ArgumentError(f"{context}: w1 {w1.dtype} and w2 {w2.dtype} must be of hidden_states' dtype "
                                    f"(or fp8 codes: {', '.join(map(str, _FP8_WEIGHTS))})")
    dtype = _DTYPES.get(hidden_states.dtype, str(hidden_states.dtype).replace("torch.", ""))
    given = [name for name, t in scales.items() if t is not None]
    if given:
        raise flytune.ArgumentError(f"{context}: {', '.join(given)} given, but a {dtype} layer takes no scales "
                                    f"(only fp8 layers do)")
    key = flytune._call(export._core.find_problem, *shape, dtype, tokens, context=context)
    return export.problem(key)


def _fp8_problem(export: flytune.Export, context: str, shape: tuple, hidden_states, w1, w2,
                 scales: dict) -> flytune.Problem:
    """The export's fp8 problem of these shapes whose w1_scales shape is the given one; every scale tensor
    checked against its shape (Problem.scale_shapes: the runtime's ft_plan_scale_shape)."""
    candidates = [p for p in export.problems if p.fp8 and (p.experts, p.hidden, p.inter, p.topk) == shape]
    if not candidates:
        raise flytune.NotFoundError(f"{context}: the export has no fp8 problem of experts {shape[0]}, hidden "
                                    f"{shape[1]}, inter {shape[2]}, topk {shape[3]} (the export has: "
                                    f"{', '.join(p.key for p in export.problems)})")
    fmt = candidates[0].dtype  # the target's e4m3 flavour: one per export
    if w1.dtype not in (_FP8_TORCH[fmt], torch.uint8) or w2.dtype != w1.dtype:
        hint = " (OCP checkpoints: flytune.fp8_ocp_to_fnuz converts them)" if fmt == "e4m3fnuz" else ""
        raise flytune.ArgumentError(f"{context}: the export's fp8 weights are {fmt}: w1 and w2 must both be "
                                    f"{_FP8_TORCH[fmt]} (or their torch.uint8 codes), got {w1.dtype} and "
                                    f"{w2.dtype}{hint}")
    if hidden_states.dtype != torch.bfloat16:
        raise flytune.ArgumentError(f"{context}: fp8 layers take hidden_states in torch.bfloat16 (their y too), "
                                    f"got {hidden_states.dtype}")
    given = {n: None if t is None else (tuple(t.shape), str(t.dtype).replace("torch.", ""))
             for n, t in scales.items()}
    return flytune._scaled_problem(candidates, context, given)


def _check_devices(export: flytune.Export, hidden_states, tensors: dict) -> None:
    """Every tensor of a launch where the export runs (a kernel would fault on another device's memory): CPU
    tensors for an export opened on the CPU emulator, else tensors on one GPU."""
    where = hidden_states.device
    if export.emulated and where.type != "cpu":
        raise flytune.ArgumentError(f"flytune::moe_layer: the export {export.dir} runs on the CPU emulator "
                                    f"(device='emulate'): tensors must be CPU tensors, got {where}")
    if not export.emulated and where.type != "cuda":
        raise flytune.ArgumentError(f"flytune::moe_layer: tensors must be on a GPU, got {where} (the export "
                                    f"{export.dir} is opened on {export.device}; CPU tensors run on an export of "
                                    f"flytune search --emulate loaded with device='emulate')")
    for name, t in tensors.items():
        if t is not None and t.device != hidden_states.device:
            raise flytune.ArgumentError(f"flytune::moe_layer: {name} is on {t.device}, hidden_states on "
                                        f"{hidden_states.device}")


# Arranged copies by (weight tensor, layout name): rebuilt when the tensor
# changes in place (its version) and dropped with it.
_arranged: dict = {}
_arranged_lock = threading.Lock()


# Stand-ins (arranged_weights) by id: tensors without values under which arranged copies are kept.
_stand_ins: set = set()


def _arranged_copy(export: flytune.Export, selector: str, w: torch.Tensor, name: str) -> torch.Tensor:
    key = (id(w), name, export.key)
    with _arranged_lock:
        hit = _arranged.get(key)
        stand_in = id(w) in _stand_ins
    if hit is not None and hit[0] == w._version and hit[1] == w.data_ptr():
        return hit[2]
    if stand_in:
        raise flytune.ArgumentError(f"flytune::moe_layer: a weight stand-in of arranged_weights {tuple(w.shape)} has "
                                    f"no {name} for the export {export.dir} (it holds the copies of the export it "
                                    f"was made for; call arranged_weights with the real weights for this one)")
    layout = _core.WEIGHT_LAYOUT_SHUFFLED if name.endswith("shuffled") else _core.WEIGHT_LAYOUT_TILED
    src = w.contiguous()
    dst = torch.empty_like(src)
    rows, cols = src.numel() // src.shape[-1], src.shape[-1]
    flytune._call(export._core.arrange, selector, src.data_ptr(), dst.data_ptr(), rows, cols, layout,
                  _stream(src.device), src.element_size(), context=f"flytune: arranging {name}")
    with _arranged_lock:
        if hit is None:
            weakref.finalize(w, _arranged.pop, key, None)
        _arranged[key] = (w._version, w.data_ptr(), dst)
    return dst


def _weights_fit(p: flytune.Problem, w: torch.Tensor) -> bool:
    if p.fp8:
        return w.dtype in (_FP8_TORCH[p.dtype], torch.uint8)
    return _DTYPES.get(w.dtype) == p.dtype


def _ensure_open(export: flytune.Export, selector: str) -> None:
    if not export.is_open_on(selector):
        export.open_on(selector)


def prepare_weights(w1: torch.Tensor, w2: torch.Tensor, export: Optional[flytune.Export] = None) -> list:
    """Arranges w1 and w2 in every layout the export's plans for their shapes read, now (before a CUDA graph
    is captured, or to keep the first call fast). Returns the export's problems these weights serve."""
    export = export or _default_export
    if export is None:
        raise flytune.ArgumentError("flytune.torch.prepare_weights: no export (pass one, or flytune.torch.use it)")
    experts, two_inter, hidden = w1.shape
    dtype = _DTYPES.get(w1.dtype, str(w1.dtype).replace("torch.", ""))
    problems = [p for p in export.problems if (p.experts, p.hidden, p.inter) == (experts, hidden, two_inter // 2)
                and _weights_fit(p, w1)]
    if not problems:
        if w1.dtype in _FP8_WEIGHTS:
            raise flytune.NotFoundError(f"flytune.torch.prepare_weights: no fp8 problem of the export fits w1 "
                                        f"{tuple(w1.shape)} {w1.dtype} (the export has: "
                                        f"{', '.join(p.key for p in export.problems)})")
        export.find_problem(experts, hidden, two_inter // 2, 1, dtype)  # the runtime's NotFoundError
    _check_devices(export, w1, {"w2": w2})
    selector = _selector(export, w1.device)
    _ensure_open(export, selector)
    for p in problems:
        for name in export.weight_copies(p.key):
            _arranged_copy(export, selector, w1 if name.startswith("w1") else w2, name)
    return problems


def arranged_weights(w1: torch.Tensor, w2: torch.Tensor, export: Optional[flytune.Export] = None) -> tuple:
    """prepare_weights, and the (w1, w2) to give the op from then on so that the layer's weights are held once:
    a weight some plan of the export reads plain (Export.weights_read) comes back as it is; one that every plan
    reads only arranged comes back as a stand-in -- its shape, dtype and device, one element of storage (a
    stride-0 view) -- that keeps its arranged copies. Drop your own w1/w2 and the copies are all that is held.
    The op never reads a stand-in's values; one given to another export (or changed) raises ArgumentError."""
    export = export or _default_export
    problems = prepare_weights(w1, w2, export)
    read = {n for p in problems for n in export.weights_read(p.key)}
    out = []
    for name, w in (("w1", w1), ("w2", w2)):
        if name in read:
            out.append(w)
            continue
        stand_in = torch.empty((1,) * w.dim(), dtype=w.dtype, device=w.device).expand(w.shape)
        with _arranged_lock:
            for (owner, layout, key), (_, _, copy) in list(_arranged.items()):
                if owner == id(w) and key == export.key:
                    new_key = (id(stand_in), layout, key)
                    _arranged[new_key] = (stand_in._version, stand_in.data_ptr(), copy)
                    weakref.finalize(stand_in, _arranged.pop, new_key, None)
            _stand_ins.add(id(stand_in))
        weakref.finalize(stand_in, _stand_ins.discard, id(stand_in))
        out.append(stand_in)
    return tuple(out)


@torch.library.custom_op("flytune::moe_layer", mutates_args=())
def moe_layer(hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, export: str, w1_scales: Optional[torch.Tensor] = None,
              w2_scales: Optional[torch.Tensor] = None, x_scale: Optional[torch.Tensor] = None,
              inter_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The MoE layer of the export whose key is `export` (flytune.Export.key), in vLLM's convention:
    hidden_states [T, H], w1 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I], topk_weights [T, k]
    float32, topk_ids [T, k] int32 (-1: no expert). Returns [T, H] of hidden_states' dtype.

    fp8 exports: w1/w2 are e4m3 codes (torch.float8_e4m3fn, torch.float8_e4m3fnuz on gfx942, or their
    torch.uint8 view), hidden_states bf16, and the float32 scales (a weight value is code * scale) shaped as
    the problem's scale_shapes: per-tensor x_scale [1] (x quantised as x / x_scale), w1_scales [E],
    w2_scales [E]; per-token w1_scales [E, 2I], w2_scales [E, H]; block128 w1_scales [E, 2I/128, H/128],
    w2_scales [E, H/128, I/128]; static as per-tensor, and inter_scale [1] (the intermediate stored as
    h / inter_scale: vLLM's a2_scale, an FP8 checkpoint's w2 input scale). 16-bit exports take no scales."""
    e = flytune._find_export(export)
    scales = {"x_scale": x_scale, "w1_scales": w1_scales, "w2_scales": w2_scales, "inter_scale": inter_scale}
    problem = _problem(e, hidden_states, w1, w2, topk_weights, topk_ids, scales)
    _check_devices(e, hidden_states, dict(w1=w1, w2=w2, topk_weights=topk_weights, topk_ids=topk_ids, **scales))
    y = torch.empty_like(hidden_states)
    tokens = int(hidden_states.shape[0])
    if tokens == 0:
        return y
    selector = _selector(e, hidden_states.device)
    _ensure_open(e, selector)
    plan = e.plan(problem.key, tokens)
    copies = {}
    for name in flytune._LAYOUT_SHAPES:
        if plan[name]:
            copies[name] = _arranged_copy(e, selector, w1 if name.startswith("w1") else w2, name)
    workspace = torch.empty(plan["workspace"]["total"], dtype=torch.uint8, device=hidden_states.device)
    x, ids, wts = hidden_states.contiguous(), topk_ids.contiguous(), topk_weights.contiguous()
    # the plain weights only where this plan reads them (a stand-in of arranged_weights has no values to copy)
    w1c, w2c = (w.contiguous() if plan[n] else None for n, w in (("w1", w1), ("w2", w2)))
    scale_ptrs = {n: t.contiguous() for n, t in scales.items() if t is not None}  # kept alive over the launch
    ptr = lambda name: copies[name].data_ptr() if name in copies else 0  # noqa: E731
    sptr = lambda name: scale_ptrs[name].data_ptr() if name in scale_ptrs else 0  # noqa: E731
    stream = _stream(hidden_states.device)
    plain = lambda t: t.data_ptr() if t is not None else 0  # noqa: E731
    flytune._call(e._core.launch, selector, problem.key, tokens, x.data_ptr(), ids.data_ptr(), wts.data_ptr(),
                  plain(w1c), plain(w2c), ptr("w1_shuffled"), ptr("w2_shuffled"), ptr("w1_tiled"),
                  ptr("w2_tiled"), workspace.data_ptr(), workspace.numel(), y.data_ptr(), stream,
                  sptr("x_scale"), sptr("w1_scales"), sptr("w2_scales"), sptr("inter_scale"),
                  context="flytune::moe_layer")
    return y


@moe_layer.register_fake
def _(hidden_states, w1, w2, topk_weights, topk_ids, export, w1_scales=None, w2_scales=None, x_scale=None,
      inter_scale=None):
    _problem(flytune._find_export(export), hidden_states, w1, w2, topk_weights, topk_ids,
             {"x_scale": x_scale, "w1_scales": w1_scales, "w2_scales": w2_scales, "inter_scale": inter_scale})
    return torch.empty_like(hidden_states)


def _setup_context(ctx, inputs, output):
    hidden_states, w1, w2, topk_weights, topk_ids, export, w1_scales, w2_scales, x_scale, inter_scale = inputs
    ctx.export = export
    ctx.fp8 = w1.dtype in _FP8_WEIGHTS or any(t is not None for t in (w1_scales, w2_scales, x_scale, inter_scale))
    ctx.save_for_backward(hidden_states, w1, w2, topk_weights, topk_ids)


def _backward(ctx, grad_output):
    if ctx.fp8:
        raise NotImplementedError("flytune::moe_layer: fp8 layers have no backward (their weights are e4m3 codes); "
                                  "train in bf16/f16 (docs/TRAINING.md)")
    hidden_states, w1, w2, topk_weights, topk_ids = ctx.saved_tensors
    dx, dw1, dw2, dtw = torch.ops.flytune.moe_layer_backward(grad_output, hidden_states, w1, w2, topk_weights,
                                                             topk_ids, ctx.export)
    return dx.to(hidden_states.dtype), dw1, dw2, dtw, None, None, None, None, None, None  # dw1, dw2: w1's dtype


moe_layer.register_autograd(_backward, setup_context=_setup_context)


def _is_stand_in(w: torch.Tensor) -> bool:
    """A stand-in of arranged_weights: a stride-0 view of one element (no values to read)."""
    return w.numel() > 1 and all(s == 0 for s in w.stride())


@torch.library.custom_op("flytune::moe_layer_backward", mutates_args=())
def moe_layer_backward(grad_output: torch.Tensor, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                       topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                       export: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of flytune::moe_layer (16-bit layers) on the export whose key is `export`: grad_output [T, H]
    (dL/dy) and the forward's inputs in; d hidden_states [T, H] and d topk_weights [T, k] in float32 (the
    runtime's fp32 accumulators), d w1 [E, 2I, H] and d w2 [E, H, I] in the weights' dtype (the kernels round
    their fp32 accumulators once: ft_layer_grads' dw1_16, dw2_16) out. Where the export's kernels predate that
    (Export.plan(...)["backward"]["dw16"] False), dW is written in float32 and cast, with a
    flytune.Fp32WeightGradientsWarning (docs/TRAINING.md). The saved tensors the forward does not keep are
    recomputed first (ft_plan_backward_saved), then the backward program runs (ft_plan_backward_launch)."""
    if w1.dtype in _FP8_WEIGHTS:
        raise NotImplementedError(f"flytune::moe_layer_backward: fp8 layers have no backward (w1 {w1.dtype}); "
                                  f"train in bf16/f16 (docs/TRAINING.md)")
    e = flytune._find_export(export)
    problem = _problem(e, hidden_states, w1, w2, topk_weights, topk_ids, dict.fromkeys(flytune.SCALE_TENSORS))
    context = f"flytune::moe_layer_backward: {problem.key}"
    if grad_output.shape != hidden_states.shape or grad_output.dtype != hidden_states.dtype:
        raise flytune.ArgumentError(f"{context}: grad_output must be {tuple(hidden_states.shape)} "
                                    f"{hidden_states.dtype} (the layer's output), got {tuple(grad_output.shape)} "
                                    f"{grad_output.dtype}")
    stand_ins = [n for n, w in (("w1", w1), ("w2", w2)) if _is_stand_in(w)]
    if stand_ins:
        raise flytune.ArgumentError(f"{context}: the backward reads the plain {' and '.join(stand_ins)}, given as "
                                    f"a stand-in of arranged_weights (no values): train with the real weights")
    _check_devices(e, hidden_states, dict(grad_output=grad_output, w1=w1, w2=w2, topk_weights=topk_weights,
                                          topk_ids=topk_ids))
    device = hidden_states.device
    f32 = dict(dtype=torch.float32, device=device)
    tokens = int(hidden_states.shape[0])
    dx, dtw = torch.empty(hidden_states.shape, **f32), torch.empty(topk_weights.shape, **f32)
    if tokens == 0:
        return dx, torch.zeros(w1.shape, dtype=w1.dtype, device=device), \
            torch.zeros(w2.shape, dtype=w2.dtype, device=device), dtw
    plan = e.plan(problem.key, tokens)
    backward = plan["backward"]
    if not backward["available"]:
        raise flytune.NotFoundError(f"{context} at T={tokens}: {backward['why']}")
    # dW in the weights' dtype, written so by the kernels (dw1_16, dw2_16); else in fp32 (dw1, dw2) and cast.
    dw16 = e._backward_dw16(plan)
    dw1, dw2 = (torch.empty(w.shape, dtype=w.dtype if dw16 else torch.float32, device=device) for w in (w1, w2))
    selector = _selector(e, device)
    _ensure_open(e, selector)
    scratch = torch.empty(backward["scratch"]["total"], dtype=torch.uint8, device=device)
    operands = [t.contiguous() for t in (hidden_states, topk_ids, topk_weights, w1, w2, grad_output)]
    dw = dict(dw1=0, dw2=0, dw1_16=dw1.data_ptr(), dw2_16=dw2.data_ptr()) if dw16 else \
        dict(dw1=dw1.data_ptr(), dw2=dw2.data_ptr(), dw1_16=0, dw2_16=0)
    flytune._call(e._core.launch_backward, selector, problem.key, tokens, *(t.data_ptr() for t in operands),
                  dx=dx.data_ptr(), d_topk_weights=dtw.data_ptr(), scratch=scratch.data_ptr(),
                  scratch_bytes=scratch.numel(), stream=_stream(device), **dw, context="flytune::moe_layer_backward")
    if not dw16:
        dw1, dw2 = dw1.to(w1.dtype), dw2.to(w2.dtype)
    return dx, dw1, dw2, dtw


@moe_layer_backward.register_fake
def _(grad_output, hidden_states, w1, w2, topk_weights, topk_ids, export):
    _problem(flytune._find_export(export), hidden_states, w1, w2, topk_weights, topk_ids,
             dict.fromkeys(flytune.SCALE_TENSORS))
    f32 = dict(dtype=torch.float32, device=hidden_states.device)
    device = hidden_states.device
    return (torch.empty(hidden_states.shape, **f32), torch.empty(w1.shape, dtype=w1.dtype, device=device),
            torch.empty(w2.shape, dtype=w2.dtype, device=device), torch.empty(topk_weights.shape, **f32))


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
