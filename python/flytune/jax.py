"""flytune's MoE layer as an XLA FFI call (docs/PYTHON.md).

    import flytune, flytune.jax as fj
    export = flytune.load("export/")
    weights = fj.prepare_weights(export, w1, w2)          # once: arranged copies the plans read
    del w1, w2                  # where every plan reads copies, the weights keep no plain w1 / w2: free yours
    y = jax.jit(fj.moe_layer)(x, topk_ids, topk_weights, weights)

x [T, H] bf16/f16 (the export's dtype), topk_ids [T, k] int32 (-1: no expert),
topk_weights [T, k] float32, w1 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I].
fp8 exports: w1/w2 as e4m3 codes (jnp.float8_e4m3fn, float8_e4m3fnuz on gfx942, or
uint8) and their float32 scales, given to prepare_weights (w1_scales=, w2_scales=,
x_scale=, static layers inter_scale=; shapes: Problem.scale_shapes); x stays bf16.
The call is the typed FFI target "flytune_moe_layer" (platforms CUDA and ROCm):
it launches the runtime's layer program on XLA's stream, with its workspace a
scratch result XLA allocates. Under vmap, leading batch dimensions of x and the
routing are tokens too (weights must not be batched); under shard_map each shard
runs its own layer on its own GPU with its local shapes.

Training: moe_layer is a jax.custom_vjp. Its backward is the typed FFI target
"flytune_moe_layer_backward" (the export's backward buckets, from `flytune search
--pass both`): the saved tensors recomputed from x, the routing and the plain w1,
then the backward program; gradients for x, w1, w2 and topk_weights (topk_ids get
none). The weights must keep their plain w1 / w2: prepare_weights(...,
trainable=True). fp8 layers and exports without backward buckets raise one line
when differentiated (docs/TRAINING.md, "Training through flytune").
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

import flytune
from flytune import _core

__all__ = ["moe_layer", "prepare_weights", "MoeWeights", "register"]

_registered = False


def _ffi():
    # jax.ffi since jax 0.4.38; jax.extend.ffi before.
    return jax.ffi if hasattr(jax, "ffi") else jax.extend.ffi


def register() -> None:
    """Registers the FFI targets with XLA (done on import; idempotent)."""
    global _registered
    if _registered:
        return
    for name, platform, capsule in _core.jax_handlers():
        _ffi().register_ffi_target(name, capsule, platform=platform, api_version=1)
    _registered = True


_DTYPES = {"bf16": jnp.bfloat16, "f16": jnp.float16}
# fp8 weights by the export's format (Problem.dtype); uint8 holds either's codes.
_FP8 = {"e4m3": jnp.float8_e4m3fn, "e4m3fnuz": jnp.float8_e4m3fnuz}


def _is_fp8(dtype) -> bool:
    d = jnp.dtype(dtype)
    return d == jnp.dtype(jnp.uint8) or any(d == jnp.dtype(t) for t in _FP8.values())


def _dtype_name(dtype) -> str:
    d = jnp.dtype(dtype)
    for name, t in _DTYPES.items():
        if d == jnp.dtype(t):
            return name
    return str(d)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass
class MoeWeights:
    """w1, w2 and the arranged copies the export's plans read (None where none does: prepare_weights keeps the
    plain w1 / w2 only where a plan reads them, so an export whose stages all read copies holds each layer's
    weights once); fp8 weights also carry their float32 scales (None where the layer reads none) and the scale
    mode they fit. `plain_shapes` ((E, 2I, H), (E, H, I), dtype name) says what w1 and w2 are when they are None."""
    w1: Optional[jax.Array]
    w2: Optional[jax.Array]
    w1_shuffled: Optional[jax.Array]
    w2_shuffled: Optional[jax.Array]
    w1_tiled: Optional[jax.Array]
    w2_tiled: Optional[jax.Array]
    export: flytune.Export
    x_scale: Optional[jax.Array] = None
    w1_scales: Optional[jax.Array] = None
    w2_scales: Optional[jax.Array] = None
    inter_scale: Optional[jax.Array] = None  # static fp8 layers: the intermediate's static scale [1]
    scales: str = "none"  # Problem.scales of the problems these weights serve
    plain_shapes: Optional[tuple] = None

    def tree_flatten(self):
        return ((self.w1, self.w2, self.w1_shuffled, self.w2_shuffled, self.w1_tiled, self.w2_tiled, self.x_scale,
                 self.w1_scales, self.w2_scales, self.inter_scale), (self.export, self.scales, self.plain_shapes))

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children[:6], aux[0], *children[6:], aux[1], aux[2])

    def _plain(self, index: int):
        w = (self.w1, self.w2)[index]
        if w is not None:
            return tuple(w.shape), jnp.dtype(w.dtype)
        if self.plain_shapes is None:
            raise flytune.ArgumentError("flytune.jax.MoeWeights: w1 and w2 are None and plain_shapes says nothing of "
                                        "them (make the weights with flytune.jax.prepare_weights)")
        return tuple(self.plain_shapes[index]), jnp.dtype(self.plain_shapes[2])

    @property
    def w1_shape(self) -> tuple:
        return self._plain(0)[0]

    @property
    def w2_shape(self) -> tuple:
        return self._plain(1)[0]

    @property
    def weight_dtype(self):
        return self._plain(0)[1]


def _gpu_platform() -> Optional[str]:
    """The runtime selector prefix of JAX's GPU backend, if there is one."""
    try:
        devices = jax.devices("gpu")
    except RuntimeError:
        return None
    if not devices:
        return None
    return "hip" if devices[0].platform == "rocm" else "cuda"


def _open_local_gpus(export: flytune.Export) -> None:
    """Opens the export on every local GPU of JAX's GPU backend (so shard_map's shards find a runtime)."""
    prefix = _gpu_platform()
    if prefix is None or export.device in ("none", "emulate"):
        return
    for d in jax.local_devices(backend="gpu"):
        sel = f"{prefix}:{d.local_hardware_id if d.local_hardware_id is not None else d.id}"
        if not export.is_open_on(sel):
            export.open_on(sel)


def _problems_for(export: flytune.Export, experts: int, hidden: int, inter: int, dtype: str):
    return [p for p in export.problems
            if (p.experts, p.hidden, p.inter, p.dtype) == (experts, hidden, inter, dtype)]


def _arrange(export: flytune.Export, w: jax.Array, layout: int) -> jax.Array:
    rows = int(np.prod(w.shape[:-1]))
    cols = int(w.shape[-1])
    call = _ffi().ffi_call("flytune_arrange_weights", jax.ShapeDtypeStruct(w.shape, w.dtype))
    return call(w, export=export.key, layout=np.int32(layout), rows=np.int32(rows), cols=np.int32(cols))


def _fp8_problems(export: flytune.Export, context: str, w1, w2, scales: dict) -> list:
    """The export's fp8 problems these codes and scales serve (any topk), after the checks of their dtype and
    of every scale tensor (flytune._scaled_problem, the torch op's check)."""
    experts, two_inter, hidden = w1.shape
    candidates = [p for p in export.problems if p.fp8 and (p.experts, p.hidden, p.inter) ==
                  (experts, hidden, two_inter // 2)]
    if not candidates:
        raise flytune.NotFoundError(f"{context}: the export has no fp8 problem of experts {experts}, hidden "
                                    f"{hidden}, inter {two_inter // 2} (the export has: "
                                    f"{', '.join(p.key for p in export.problems)})")
    fmt = candidates[0].dtype  # the target's e4m3 flavour: one per export
    if jnp.dtype(w1.dtype) not in (jnp.dtype(_FP8[fmt]), jnp.dtype(jnp.uint8)) or w2.dtype != w1.dtype:
        hint = " (OCP checkpoints: flytune.fp8_ocp_to_fnuz converts them)" if fmt == "e4m3fnuz" else ""
        raise flytune.ArgumentError(f"{context}: the export's fp8 weights are {fmt}: w1 and w2 must both be "
                                    f"{jnp.dtype(_FP8[fmt]).name} (or their uint8 codes){hint}")
    given = {n: None if t is None else (tuple(t.shape), jnp.dtype(t.dtype).name) for n, t in scales.items()}
    mode = flytune._scaled_problem(candidates, context, given).scales
    return [p for p in candidates if p.scales == mode]


def prepare_weights(export: flytune.Export, w1: jax.Array, w2: jax.Array, w1_scales: Optional[jax.Array] = None,
                    w2_scales: Optional[jax.Array] = None, x_scale: Optional[jax.Array] = None,
                    inter_scale: Optional[jax.Array] = None, trainable: bool = False) -> MoeWeights:
    """Arranges w1 [E, 2I, H] and w2 [E, H, I] once in every layout the export's plans
    for these shapes read (shuffled or tiled copies, through the runtime's own
    kernel), on the weights' device. Call it outside the hot path (at load).
    fp8 exports: w1/w2 are e4m3 codes and the float32 scales come along (shapes:
    Problem.scale_shapes; checked here, ArgumentError naming the tensor); 16-bit
    exports take none. trainable=True keeps the plain w1 and w2 whatever the plans
    read: the backward reads them, and jax.grad of moe_layer gives their gradients
    (the arranged copies are made under stop_gradient and get none: call
    prepare_weights inside the differentiated function, or take the gradient of
    MoeWeights.w1 / w2)."""
    if w1.ndim != 3 or w2.ndim != 3:
        raise flytune.ArgumentError(f"flytune.jax.prepare_weights: w1 must be [E, 2I, H] and w2 [E, H, I], "
                                    f"got {tuple(w1.shape)} and {tuple(w2.shape)}")
    experts, two_inter, hidden = w1.shape
    inter = two_inter // 2
    dtype = _dtype_name(w1.dtype)
    context = f"flytune.jax.prepare_weights: w1 {tuple(w1.shape)} {w1.dtype} and w2 {tuple(w2.shape)} {w2.dtype}"
    if tuple(w2.shape) != (experts, hidden, inter) or w2.dtype != w1.dtype or two_inter % 2:
        raise flytune.ArgumentError(f"{context} are not [E, 2I, H] and [E, H, I] of one dtype")
    scales = {"x_scale": x_scale, "w1_scales": w1_scales, "w2_scales": w2_scales, "inter_scale": inter_scale}
    if _is_fp8(w1.dtype):
        problems = _fp8_problems(export, context, w1, w2, scales)
    else:
        given = [n for n, t in scales.items() if t is not None]
        if given:
            raise flytune.ArgumentError(f"{context}: {', '.join(given)} given, but {dtype} layers take no scales "
                                        f"(only fp8 layers do)")
        problems = _problems_for(export, experts, hidden, inter, dtype)
        if not problems:
            export.find_problem(experts, hidden, inter, 1, dtype)  # raises the runtime's NotFoundError
    read = set()
    for p in problems:
        read.update(export.weights_read(p.key))
    _open_local_gpus(export)
    arranged = {}
    for name in sorted(read - {"w1", "w2"}):
        src = w1 if name.startswith("w1") else w2
        layout = _core.WEIGHT_LAYOUT_SHUFFLED if name.endswith("shuffled") else _core.WEIGHT_LAYOUT_TILED
        arranged[name] = jax.jit(_arrange, static_argnums=(0, 2))(export, jax.lax.stop_gradient(src), layout)
    f32 = lambda t: None if t is None else jnp.asarray(t, jnp.float32)  # noqa: E731
    if trainable:
        read |= {"w1", "w2"}
    return MoeWeights(w1 if "w1" in read else None, w2 if "w2" in read else None, arranged.get("w1_shuffled"),
                      arranged.get("w2_shuffled"), arranged.get("w1_tiled"), arranged.get("w2_tiled"), export,
                      f32(x_scale), f32(w1_scales), f32(w2_scales), f32(inter_scale), problems[0].scales,
                      (tuple(w1.shape), tuple(w2.shape), jnp.dtype(w1.dtype).name))


def _vma(a) -> frozenset:
    """The manual mesh axes `a` varies over inside shard_map (jax.typeof(a).manual_axis_type.varying, .vma
    before jax 0.10; empty outside shard_map, or on a jax without these types)."""
    t = jax.typeof(a)
    m = getattr(t, "manual_axis_type", None)
    return frozenset(m.varying if m is not None else getattr(t, "vma", ()) or ())


def _vary(a, axes: frozenset):
    """`a` typed as varying over `axes` too (a no-op on its values): inside shard_map an FFI call's results are
    typed as varying over nothing, while the layer's output, gradients and the weights they belong to vary with
    the shard's tokens. pcast (jax >= 0.8) or pvary; its transpose sums over the axes (the replicated weights'
    gradients)."""
    missing = tuple(sorted(axes - _vma(a)))
    if not missing:
        return a
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(a, missing, to="varying")
    return jax.lax.pvary(a, missing)


def _empty(dtype):
    return jnp.zeros((0,), dtype)


def moe_layer(x: jax.Array, topk_ids: jax.Array, topk_weights: jax.Array, weights: MoeWeights) -> jax.Array:
    """y = sum over slots s of topk_weights[t, s] * W2[e] (silu(W1g[e] x_t) * W1u[e] x_t), e = topk_ids[t, s].

    x [..., T, H] of the export's dtype; topk_ids [..., T, k] (int32; -1 for an
    empty slot), topk_weights [..., T, k] (float32). Leading dimensions are more
    tokens. Raises flytune.ArgumentError / NotFoundError at trace time for
    shapes or dtypes the export does not serve, with the runtime's message.
    """
    export = weights.export
    if x.ndim < 2 or topk_ids.ndim != x.ndim or topk_weights.shape != topk_ids.shape or \
            topk_ids.shape[:-1] != x.shape[:-1]:
        raise flytune.ArgumentError(
            f"flytune.jax.moe_layer: x must be [..., T, H] and topk_ids, topk_weights [..., T, k] with the same "
            f"leading dimensions; got x {tuple(x.shape)}, topk_ids {tuple(topk_ids.shape)}, "
            f"topk_weights {tuple(topk_weights.shape)}")
    if not jnp.issubdtype(topk_ids.dtype, jnp.integer):
        raise flytune.ArgumentError(f"flytune.jax.moe_layer: topk_ids must be integers, got {topk_ids.dtype}")
    s1, s2 = weights.w1_shape, weights.w2_shape
    if len(s1) != 3 or len(s2) != 3 or s2 != (s1[0], s1[2], s1[1] // 2) or s1[1] % 2:
        raise flytune.ArgumentError(f"flytune.jax.moe_layer: the weights must be w1 [E, 2I, H] and w2 [E, H, I]; "
                                    f"got w1 {s1}, w2 {s2}")
    dtype = weights.weight_dtype
    copies = [getattr(weights, n) if getattr(weights, n) is not None else _empty(dtype)
              for n in ("w1", "w2") + flytune._LAYOUT_SHAPES]
    copies += [getattr(weights, n) if getattr(weights, n) is not None else _empty(jnp.float32)
               for n in flytune.SCALE_TENSORS]
    return _layer(weights)(x, topk_ids.astype(jnp.int32), topk_weights.astype(jnp.float32), *copies)


def _layer(weights: MoeWeights):
    """The layer as a function of arrays with its own vmap rule: a batch is more
    tokens of one launch, whose plan and workspace are those of all the tokens
    (XLA's generic expand_dims would hand the call a workspace sized for one
    batch element, times the batch); and its VJP, the export's backward
    (_grads)."""

    @custom_vmap
    def layer(x, ids, tw, w1, w2, *copies):
        return _launch(weights, x, ids, tw, w1, w2, copies)

    @layer.def_vmap
    def _batched(axis_size, in_batched, x, ids, tw, w1, w2, *copies):
        if any(in_batched[3:]):
            raise flytune.ArgumentError("flytune.jax.moe_layer under vmap: the weights must not be batched "
                                        "(one layer's weights serve every batch element)")
        x, ids, tw = (a if batched else jnp.broadcast_to(a, (axis_size,) + a.shape)
                      for a, batched in zip((x, ids, tw), in_batched[:3]))
        return layer(x, ids, tw, w1, w2, *copies), True

    @jax.custom_vjp
    def differentiable(x, ids, tw, w1, w2, *copies):
        return _vary(layer(x, ids, tw, w1, w2, *copies), _vma(x))

    def fwd(x, ids, tw, w1, w2, *copies):
        _check_differentiable(weights, x, ids)
        return _vary(layer(x, ids, tw, w1, w2, *copies), _vma(x)), (x, ids, tw, w1, w2)

    def bwd(residuals, dy):
        x, ids, tw, w1, w2 = residuals
        dx, dw1, dw2, dtw = (_vary(g, _vma(x)) for g in _grads(weights)(x, ids, tw, w1, w2, dy))
        # topk_ids: integers, no gradient; the arranged copies: stop_gradient'ed copies of w1 / w2, whose
        # gradient is given to the plain weights (the backward's operands). dw1, dw2 come in the weights' dtype.
        return (dx.astype(x.dtype), None, dtw, dw1, dw2) + \
            (None,) * (len(flytune._LAYOUT_SHAPES) + len(flytune.SCALE_TENSORS))

    differentiable.defvjp(fwd, bwd)

    def call(x, ids, tw, *arrays):
        # Inside shard_map every operand varies as the tokens do (the weights' gradients are per shard: the
        # transpose of this cast sums them over the shards).
        axes = frozenset().union(*(_vma(a) for a in (x, ids, tw) + arrays))
        return differentiable(*(_vary(a, axes) for a in (x, ids, tw) + arrays))

    return call


def _problem_key(weights: MoeWeights, x, topk: int, tokens: int, context: str) -> str:
    """The export's problem of the call (the runtime's NotFoundError where none fits)."""
    export = weights.export
    experts, two_inter, hidden = weights.w1_shape
    dtype = _dtype_name(x.dtype)
    if weights.scales != "none":  # fp8: bf16 x, the weights' format from the export's problems of their mode
        if jnp.dtype(x.dtype) != jnp.dtype(jnp.bfloat16) or x.shape[-1] != hidden:
            raise flytune.ArgumentError(f"{context}: fp8 layers take x [..., {hidden}] in bfloat16 (their y too)")
        dtype = next(p.dtype for p in export.problems if p.scales == weights.scales)
    elif x.shape[-1] != hidden or x.dtype != weights.weight_dtype:
        # The runtime's answer for the problem these shapes would be.
        flytune._call(export._core.find_problem, experts, int(x.shape[-1]), two_inter // 2, topk, dtype,
                      max(tokens, 1), context=context)
    return flytune._call(export._core.find_problem, experts, hidden, two_inter // 2, topk, dtype, max(tokens, 1),
                         weights.scales, context=context)


def _check_differentiable(weights: MoeWeights, x, ids) -> None:
    """What differentiating the layer needs, refused with one line at trace time: a 16-bit layer (fp8 layers have
    no backward), the plain w1 and w2 (the backward's operands), and backward buckets in the export."""
    context = f"flytune.jax.moe_layer: differentiating the layer (x {tuple(x.shape)} {x.dtype}, w1 {weights.w1_shape})"
    if weights.scales != "none":
        raise NotImplementedError(f"{context}: fp8 layers have no backward ({weights.scales} scales); train in "
                                  f"bf16/f16 (docs/TRAINING.md)")
    missing = [n for n in ("w1", "w2") if getattr(weights, n) is None]
    if missing:
        raise flytune.ArgumentError(f"{context}: the backward reads the plain {' and '.join(missing)}, which these "
                                    f"weights do not keep: flytune.jax.prepare_weights(export, w1, w2, "
                                    f"trainable=True)")
    tokens = max(int(np.prod(x.shape[:-1])), 1)
    problem = _problem_key(weights, x, int(ids.shape[-1]), tokens, context)
    backward = flytune._call(weights.export._core.plan_info, problem, tokens, context=context)["backward"]
    if not backward["available"]:
        raise flytune.NotFoundError(f"{context}: {backward['why']}")


def _grads(weights: MoeWeights):
    """The backward as a function of arrays with its own vmap rule: one launch per batch element, so that the
    weight gradients are per element (JAX sums them where the weights were not batched)."""

    @custom_vmap
    def grads(x, ids, tw, w1, w2, dy):
        return _launch_backward(weights, x, ids, tw, w1, w2, dy)

    @grads.def_vmap
    def _batched(axis_size, in_batched, x, ids, tw, w1, w2, dy):
        if in_batched[3] or in_batched[4]:
            raise flytune.ArgumentError("flytune.jax.moe_layer's backward under vmap: the weights must not be "
                                        "batched (one layer's weights serve every batch element)")
        x, ids, tw, dy = (a if batched else jnp.broadcast_to(a, (axis_size,) + a.shape)
                          for a, batched in zip((x, ids, tw, dy), in_batched[:3] + in_batched[5:]))
        per = [grads(x[b], ids[b], tw[b], w1, w2, dy[b]) for b in range(axis_size)]
        return tuple(jnp.stack(parts) for parts in zip(*per)), (True, True, True, True)

    return grads


def _launch_backward(weights: MoeWeights, x, ids, tw, w1, w2, dy):
    """One backward launch over every token of x [..., T, H]: dx and d(topk_weights) in float32, dw1 and dw2 in the
    weights' dtype -- written so by the kernels (the plan's backward "dw16"), or, where the export's kernels
    predate that, in float32 and cast here (a flytune.Fp32WeightGradientsWarning says so, docs/TRAINING.md)."""
    export = weights.export
    experts, two_inter, hidden = weights.w1_shape
    tokens = int(np.prod(x.shape[:-1]))
    topk = int(ids.shape[-1])
    context = (f"flytune.jax.moe_layer backward: x {tuple(x.shape)} {x.dtype}, topk {topk}, w1 {weights.w1_shape} "
               f"{weights.weight_dtype}")
    problem = _problem_key(weights, x, topk, tokens, context)
    f32 = jnp.float32
    if tokens == 0:
        return (jnp.zeros(x.shape, f32), jnp.zeros(w1.shape, w1.dtype), jnp.zeros(w2.shape, w2.dtype),
                jnp.zeros(ids.shape, f32))
    plan = flytune._call(export._core.plan_info, problem, tokens, context=context)
    backward = plan["backward"]
    if not backward["available"]:
        raise flytune.NotFoundError(f"{context}: {backward['why']}")
    # The FFI call's dW results in the type the kernels write them in: the weights' (the handler passes
    # ft_layer_grads' dw1_16, dw2_16), else float32 (dw1, dw2), cast below.
    dw16 = export._backward_dw16(plan)
    dw1_type, dw2_type = (w1.dtype, w2.dtype) if dw16 else (f32, f32)
    _open_local_gpus(export)
    call = _ffi().ffi_call(
        "flytune_moe_layer_backward",
        (jax.ShapeDtypeStruct((tokens, hidden), f32), jax.ShapeDtypeStruct(w1.shape, dw1_type),
         jax.ShapeDtypeStruct(w2.shape, dw2_type), jax.ShapeDtypeStruct((tokens, topk), f32),
         jax.ShapeDtypeStruct((backward["scratch"]["total"],), jnp.uint8)))
    dx, dw1, dw2, dtw, _scratch = call(x.reshape(tokens, hidden), ids.reshape(tokens, topk), tw.reshape(tokens, topk),
                                       w1, w2, dy.reshape(tokens, hidden).astype(x.dtype), export=export.key,
                                       problem=problem)
    if not dw16:
        dw1, dw2 = dw1.astype(w1.dtype), dw2.astype(w2.dtype)
    return dx.reshape(x.shape), dw1, dw2, dtw.reshape(ids.shape)


def _launch(weights: MoeWeights, x, ids, tw, w1, w2, copies):
    """One launch over every token of x [..., T, H] (leading dimensions folded into T).
    `weights` says which arranged copies exist; the arrays are the arguments."""
    export = weights.export
    experts, two_inter, hidden = weights.w1_shape
    tokens = int(np.prod(x.shape[:-1]))
    topk = int(ids.shape[-1])
    context = (f"flytune.jax.moe_layer: x {tuple(x.shape)} {x.dtype}, topk {topk}, w1 {weights.w1_shape} "
               f"{weights.weight_dtype}")
    problem = _problem_key(weights, x, topk, tokens, context)
    if tokens == 0:
        return jnp.zeros(x.shape, x.dtype)
    plan = flytune._call(export._core.plan_info, problem, tokens, context=context)
    export._warn_coverage(plan)
    for name in ("w1", "w2") + flytune._LAYOUT_SHAPES:
        if plan[name] and getattr(weights, name) is None:
            raise flytune.ArgumentError(f"{context}: the layer at T={tokens} reads {name}: prepare the weights "
                                        f"with flytune.jax.prepare_weights(export, w1, w2)")
    _open_local_gpus(export)
    # No vmap_method: _layer's rule batches the call, so XLA never has to.
    call = _ffi().ffi_call(
        "flytune_moe_layer",
        (jax.ShapeDtypeStruct((tokens, hidden), x.dtype), jax.ShapeDtypeStruct((plan["workspace"]["total"],), jnp.uint8)))
    y, _workspace = call(x.reshape(tokens, hidden), ids.reshape(tokens, topk), tw.reshape(tokens, topk), w1, w2,
                         *copies, export=export.key, problem=problem)
    return y.reshape(x.shape)


register()
