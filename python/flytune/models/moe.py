"""Three implementations of one mixture-of-experts layer, on the same weights.

    y[t] = sum over slots s of weights[t, s] * W2[e] (silu(W1g[e] x[t]) * W1u[e] x[t]),  e = ids[t, s]

x [T, H], ids [T, k] int32, weights [T, k] float32, w1 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I].

- "flytune": the typed XLA FFI call of flytune.jax on an export of the layer's problem (its arranged copies are
  made once by prepare, from the same w1/w2);
- "ragged_dot": XLA's grouped GEMM, jax.lax.ragged_dot, on the (token, slot) pairs sorted by expert (the layer
  bench/python_bindings.py measures; prepare makes the [E, H, 2I] / [E, I, H] copies ragged_dot takes);
- "dense": every expert on every token, the outputs masked and summed by the router's weights (the default
  path of a framework without a grouped GEMM).

The gate/up products are accumulated in float32 and SwiGLU is taken in float32 on all three; the intermediate is
rounded to the weights' dtype before the second GEMM, as flytune's layer stores it.

fp8 experts (prepare(..., fp8=True); `flytune-mixtral --fp8`): w1 and w2 are quantised once, per tensor, to e4m3
codes with one float32 scale per expert matrix (a weight is code * scale: flytune's "per-tensor" fp8 problem).
x stays bf16. flytune's layer quantises x itself by a per-tensor x_scale, which apply gives it per call as the
current amax of x over 448 (one reduction in XLA before the call: "current scaling", no calibration pass). XLA's
two paths have no fp8 grouped GEMM to call, so they take the same codes and scales and dequantise the weights to
bf16 inside the step (what a JAX user holding fp8 weights gets from ragged_dot or a dense einsum); their x is not
quantised, so they are the closer to the bf16 model.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

IMPLS = ("flytune", "ragged_dot", "dense")
E4M3_MAX = 448.0  # the largest finite e4m3 (OCP float8_e4m3fn) value


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown MoE implementation '{impl}' (known: {', '.join(IMPLS)})")


@dataclasses.dataclass(frozen=True)
class Fp8Experts:
    """XLA's paths' fp8 experts: e4m3 codes in the implementation's layout and their per-expert float32 scales."""
    w1: jax.Array
    w2: jax.Array
    w1_scales: jax.Array  # [E]
    w2_scales: jax.Array  # [E]


jax.tree_util.register_dataclass(Fp8Experts, data_fields=["w1", "w2", "w1_scales", "w2_scales"], meta_fields=[])


@jax.jit
def quantise_per_tensor(w):
    """w [E, R, C] -> (e4m3 codes [E, R, C], float32 scales [E]): each expert matrix scaled so that its amax is
    the largest e4m3 value (an all-zero matrix gets scale 1)."""
    w32 = w.astype(jnp.float32)
    amax = jnp.max(jnp.abs(w32), axis=(1, 2))
    scales = jnp.where(amax > 0, amax / E4M3_MAX, 1.0)
    return (w32 / scales[:, None, None]).astype(jnp.float8_e4m3fn), scales


def prepare(impl: str, w1, w2, export=None, fp8: bool = False, trainable: bool = False):
    """What `apply` reads for one layer, made once at load from w1 [E, 2I, H] and w2 [E, H, I] (fp8: quantised
    per tensor first, module docstring). trainable=True (bf16/f16 only): flytune's weights keep the plain w1 / w2
    its backward reads (flytune.jax.prepare_weights(..., trainable=True)); called inside a differentiated
    function, every implementation's gradient then reaches w1 and w2 (ragged_dot's through its transpose, the
    arranged copies of flytune's under stop_gradient: flytune.models.train)."""
    check_impl(impl)
    if impl == "flytune" and export is None:
        raise ValueError("the flytune implementation needs an export (flytune.load(DIR); --export DIR)")
    if fp8 and trainable:
        raise ValueError("fp8 experts are not trainable (flytune's layer has no fp8 backward; docs/TRAINING.md)")
    if fp8:
        (c1, s1), (c2, s2) = quantise_per_tensor(w1), quantise_per_tensor(w2)
        if impl == "flytune":
            import flytune.jax as fj
            # x_scale: replaced by x's current amax at every call (apply); 1 until then
            return fj.prepare_weights(export, c1, c2, w1_scales=s1, w2_scales=s2, x_scale=jnp.ones((1,), jnp.float32))
        if impl == "ragged_dot":
            c1, c2 = _ragged_weights(c1, c2)
        return Fp8Experts(c1, c2, s1, s2)
    if impl == "flytune":
        import flytune.jax as fj
        return fj.prepare_weights(export, w1, w2, trainable=trainable)
    if impl == "ragged_dot":
        return _ragged_weights(w1, w2)
    return (w1, w2)


def current_x_scale(x):
    """The per-tensor scale that maps x's amax onto the largest e4m3 value ([1] float32; 1 for an all-zero x)."""
    amax = jnp.max(jnp.abs(x.astype(jnp.float32)))
    return jnp.where(amax > 0, amax / E4M3_MAX, 1.0).reshape(1)


def _dequantised(e: Fp8Experts, dtype):
    return tuple((c.astype(jnp.float32) * s[:, None, None]).astype(dtype)
                 for c, s in ((e.w1, e.w1_scales), (e.w2, e.w2_scales)))


@jax.jit
def _ragged_weights(w1, w2):
    return jnp.swapaxes(w1, 1, 2), jnp.swapaxes(w2, 1, 2)


def apply(impl: str, x, ids, weights, prepared):
    check_impl(impl)
    if impl == "flytune":
        import flytune.jax as fj
        if prepared.scales == "per-tensor":
            prepared = dataclasses.replace(prepared, x_scale=current_x_scale(x))
        return fj.moe_layer(x, ids, weights, prepared)
    if isinstance(prepared, Fp8Experts):
        prepared = _dequantised(prepared, x.dtype)
    if impl == "ragged_dot":
        return ragged_dot_layer(x, ids, weights, *prepared)
    return dense_layer(x, ids, weights, *prepared)


def _swiglu(gu, inter: int, dtype):
    return (jax.nn.silu(gu[..., :inter]) * gu[..., inter:]).astype(dtype)


def ragged_dot_layer(x, ids, weights, w1t, w2t):
    """w1t [E, H, 2I], w2t [E, I, H]: the pairs sorted by expert, x rows gathered, two grouped GEMMs, the routed
    weights applied and the pairs summed back per token."""
    experts, inter, hidden = w2t.shape
    flat = ids.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    sizes = jnp.bincount(flat, length=experts).astype(jnp.int32)
    tok = order // ids.shape[-1]
    gu = jax.lax.ragged_dot(x[tok], w1t, sizes, preferred_element_type=jnp.float32)
    o = jax.lax.ragged_dot(_swiglu(gu, inter, x.dtype), w2t, sizes, preferred_element_type=jnp.float32)
    o = o * weights.reshape(-1)[order][:, None]
    return jnp.zeros((x.shape[0], hidden), jnp.float32).at[tok].add(o).astype(x.dtype)


def dense_layer(x, ids, weights, w1, w2):
    """Every expert on every token ([E, T, 2I] and [E, T, H] products), masked by the router's weights."""
    experts, hidden, inter = w2.shape
    T = x.shape[0]
    gu = jnp.einsum("th,eoh->eto", x, w1, preferred_element_type=jnp.float32)
    o = jnp.einsum("eti,ehi->eth", _swiglu(gu, inter, x.dtype), w2, preferred_element_type=jnp.float32)
    combine = jnp.zeros((T, experts), jnp.float32).at[jnp.arange(T)[:, None], ids].add(weights)
    return jnp.einsum("te,eth->th", combine, o).astype(x.dtype)
