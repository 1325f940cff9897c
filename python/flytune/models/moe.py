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
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

IMPLS = ("flytune", "ragged_dot", "dense")


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown MoE implementation '{impl}' (known: {', '.join(IMPLS)})")


def prepare(impl: str, w1, w2, export=None):
    """What `apply` reads for one layer, made once at load from w1 [E, 2I, H] and w2 [E, H, I]."""
    check_impl(impl)
    if impl == "flytune":
        if export is None:
            raise ValueError("the flytune implementation needs an export (flytune.load(DIR); --export DIR)")
        import flytune.jax as fj
        return fj.prepare_weights(export, w1, w2)
    if impl == "ragged_dot":
        return _ragged_weights(w1, w2)
    return (w1, w2)


@jax.jit
def _ragged_weights(w1, w2):
    return jnp.swapaxes(w1, 1, 2), jnp.swapaxes(w2, 1, 2)


def apply(impl: str, x, ids, weights, prepared):
    check_impl(impl)
    if impl == "flytune":
        import flytune.jax as fj
        return fj.moe_layer(x, ids, weights, prepared)
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
