"""flytune's MoE layer as an XLA FFI call (docs/PYTHON.md).

    import flytune, flytune.jax as fj
    export = flytune.load("export/")
    weights = fj.prepare_weights(export, w1, w2)          # once: arranged copies the plans read
    y = jax.jit(fj.moe_layer)(x, topk_ids, topk_weights, weights)

x [T, H] bf16/f16 (the export's dtype), topk_ids [T, k] int32 (-1: no expert),
topk_weights [T, k] float32, w1 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I].
The call is the typed FFI target "flytune_moe_layer" (platforms CUDA and ROCm):
it launches the runtime's layer program on XLA's stream, with its workspace a
scratch result XLA allocates. Under vmap, leading batch dimensions of x and the
routing are tokens too (weights must not be batched); under shard_map each shard
runs its own layer on its own GPU with its local shapes.
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


def _dtype_name(dtype) -> str:
    d = jnp.dtype(dtype)
    for name, t in _DTYPES.items():
        if d == jnp.dtype(t):
            return name
    return str(d)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass
class MoeWeights:
    """w1, w2 and the arranged copies the export's plans read (None where none does)."""
    w1: jax.Array
    w2: jax.Array
    w1_shuffled: Optional[jax.Array]
    w2_shuffled: Optional[jax.Array]
    w1_tiled: Optional[jax.Array]
    w2_tiled: Optional[jax.Array]
    export: flytune.Export

    def tree_flatten(self):
        return ((self.w1, self.w2, self.w1_shuffled, self.w2_shuffled, self.w1_tiled, self.w2_tiled), self.export)

    @classmethod
    def tree_unflatten(cls, export, children):
        return cls(*children, export)


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
    if prefix is None or export.device == "none":
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


def prepare_weights(export: flytune.Export, w1: jax.Array, w2: jax.Array) -> MoeWeights:
    """Arranges w1 [E, 2I, H] and w2 [E, H, I] once in every layout the export's plans
    for these shapes read (shuffled or tiled copies, through the runtime's own
    kernel), on the weights' device. Call it outside the hot path (at load)."""
    if w1.ndim != 3 or w2.ndim != 3:
        raise flytune.ArgumentError(f"flytune.jax.prepare_weights: w1 must be [E, 2I, H] and w2 [E, H, I], "
                                    f"got {tuple(w1.shape)} and {tuple(w2.shape)}")
    experts, two_inter, hidden = w1.shape
    inter = two_inter // 2
    dtype = _dtype_name(w1.dtype)
    if tuple(w2.shape) != (experts, hidden, inter) or w2.dtype != w1.dtype or two_inter % 2:
        raise flytune.ArgumentError(f"flytune.jax.prepare_weights: w1 {tuple(w1.shape)} {w1.dtype} and w2 "
                                    f"{tuple(w2.shape)} {w2.dtype} are not [E, 2I, H] and [E, H, I] of one dtype")
    problems = _problems_for(export, experts, hidden, inter, dtype)
    if not problems:
        export.find_problem(experts, hidden, inter, 1, dtype)  # raises the runtime's NotFoundError
    copies = set()
    for p in problems:
        copies.update(export.weight_copies(p.key))
    _open_local_gpus(export)
    arranged = {}
    for name in copies:
        src = w1 if name.startswith("w1") else w2
        layout = _core.WEIGHT_LAYOUT_SHUFFLED if name.endswith("shuffled") else _core.WEIGHT_LAYOUT_TILED
        arranged[name] = jax.jit(_arrange, static_argnums=(0, 2))(export, src, layout)
    return MoeWeights(w1, w2, arranged.get("w1_shuffled"), arranged.get("w2_shuffled"), arranged.get("w1_tiled"),
                      arranged.get("w2_tiled"), export)


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
    copies = [getattr(weights, n) if getattr(weights, n) is not None else _empty(x.dtype)
              for n in flytune._LAYOUT_SHAPES]
    return _layer(weights)(x, topk_ids.astype(jnp.int32), topk_weights.astype(jnp.float32), weights.w1, weights.w2,
                           *copies)


def _layer(weights: MoeWeights):
    """The layer as a function of arrays with its own vmap rule: a batch is more
    tokens of one launch, whose plan and workspace are those of all the tokens
    (XLA's generic expand_dims would hand the call a workspace sized for one
    batch element, times the batch)."""

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

    return layer


def _launch(weights: MoeWeights, x, ids, tw, w1, w2, copies):
    """One launch over every token of x [..., T, H] (leading dimensions folded into T).
    `weights` says which arranged copies exist; the arrays are the arguments."""
    export = weights.export
    experts, two_inter, hidden = weights.w1.shape
    tokens = int(np.prod(x.shape[:-1]))
    topk = int(ids.shape[-1])
    dtype = _dtype_name(x.dtype)
    context = (f"flytune.jax.moe_layer: x {tuple(x.shape)} {x.dtype}, topk {topk}, w1 {tuple(weights.w1.shape)} "
               f"{weights.w1.dtype}")
    if x.shape[-1] != hidden or x.dtype != weights.w1.dtype:
        # The runtime's answer for the problem these shapes would be.
        flytune._call(export._core.find_problem, experts, int(x.shape[-1]), two_inter // 2, topk, dtype,
                      max(tokens, 1), context=context)
    problem = flytune._call(export._core.find_problem, experts, hidden, two_inter // 2, topk, dtype, max(tokens, 1),
                            context=context)
    if tokens == 0:
        return jnp.zeros(x.shape, x.dtype)
    plan = flytune._call(export._core.plan_info, problem, tokens, context=context)
    for name in flytune._LAYOUT_SHAPES:
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
