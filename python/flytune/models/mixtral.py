"""A Mixtral-architecture decoder in plain JAX (docs/PYTHON.md, "The Mixtral model").

RMSNorm, grouped-query attention with RoPE and a KV cache, a top-k softmax
router and the SwiGLU mixture of experts, whose layer is one of
flytune.models.moe's implementations on the same weights. The layers are kept
as a list of per-layer arrays (not stacked for lax.scan): each layer's weights
are their own buffers, so no implementation pays for slicing a stacked tensor
inside the loop, and flytune's arranged copies are made per layer.

Weights (the layout flytune's layer takes): w1 [E, 2I, H] (gate rows, then up
rows), w2 [E, H, I]; attention wq [H, Nq*D], wk/wv [H, Nkv*D], wo [Nq*D, H];
router [H, E]; embed [V, H]; lm_head [H, V].
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from flytune.models import moe
from flytune.models.config import CONFIGS, MIXTRAL_8X7B, TINY, Config  # noqa: F401  (the model's shapes)

DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32}


# --- weights ----------------------------------------------------------------------------------------------------

def layer_shapes(c: Config) -> dict:
    return {
        "attn_norm": (c.hidden,),
        "wq": (c.hidden, c.heads * c.head_dim),
        "wk": (c.hidden, c.kv_heads * c.head_dim),
        "wv": (c.hidden, c.kv_heads * c.head_dim),
        "wo": (c.heads * c.head_dim, c.hidden),
        "moe_norm": (c.hidden,),
        "router": (c.hidden, c.experts),
        "w1": (c.experts, 2 * c.inter, c.hidden),
        "w2": (c.experts, c.hidden, c.inter),
    }


# The experts' weights: the MoE implementation's to hold (moe.prepare makes its layout from them and the
# original can go), not the shared params'.
EXPERTS = ("w1", "w2")


def _fan_in(name: str, shape: tuple) -> int:
    return shape[-1] if name in EXPERTS else shape[0]


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _random_layer(key, c: Config, dtype, names: tuple):
    """The layer's tensors among `names`; each one's values are the same whichever others are asked for."""
    out = {}
    for i, (name, shape) in enumerate(layer_shapes(c).items()):
        if name not in names:
            continue
        if name.endswith("norm"):
            out[name] = jnp.ones(shape, dtype)
        else:
            k = jax.random.fold_in(key, i)
            out[name] = (jax.random.normal(k, shape, dtype) * (1.0 / math.sqrt(_fan_in(name, shape)))).astype(dtype)
    return out


@functools.partial(jax.jit, static_argnums=(1, 2))
def _random_outer(key, c: Config, dtype):
    k1, k2 = jax.random.split(key)
    return {"embed": jax.random.normal(k1, (c.vocab, c.hidden), dtype),
            "final_norm": jnp.ones((c.hidden,), dtype),
            "lm_head": (jax.random.normal(k2, (c.hidden, c.vocab), dtype) / math.sqrt(c.hidden)).astype(dtype)}


def random_params(c: Config, seed: int = 0, dtype=jnp.bfloat16, experts: bool = True) -> dict:
    """Random weights with a fixed seed, one layer at a time on the default device (no host copies). With
    experts False the layers lack w1/w2 (random_experts gives them, the same values, one layer at a time)."""
    key = jax.random.PRNGKey(seed)
    params = _random_outer(jax.random.fold_in(key, 1 << 20), c, dtype)
    names = tuple(n for n in layer_shapes(c) if experts or n not in EXPERTS)
    params["layers"] = [_random_layer(jax.random.fold_in(key, layer), c, dtype, names) for layer in range(c.layers)]
    return params


def random_experts(c: Config, seed: int, layer: int, dtype=jnp.bfloat16) -> tuple:
    """(w1, w2) of `layer`: random_params's values for the same seed."""
    p = _random_layer(jax.random.fold_in(jax.random.PRNGKey(seed), layer), c, dtype, EXPERTS)
    return p["w1"], p["w2"]


def expert_bytes(c: Config, dtype) -> int:
    """Bytes of every layer's w1 and w2."""
    shapes = layer_shapes(c)
    return c.layers * sum(math.prod(shapes[n]) for n in EXPERTS) * jnp.dtype(dtype).itemsize


def check_params(c: Config, params: dict) -> None:
    """Every tensor of `params` has the shape `c` says (ValueError naming the first that has not); w1/w2 may be
    left out of every layer (random_params(experts=False))."""
    want = {"embed": (c.vocab, c.hidden), "final_norm": (c.hidden,), "lm_head": (c.hidden, c.vocab)}
    for name, shape in want.items():
        if tuple(params[name].shape) != shape:
            raise ValueError(f"{name} is {tuple(params[name].shape)}, the config needs {shape}")
    if len(params["layers"]) != c.layers:
        raise ValueError(f"{len(params['layers'])} layers given, the config has {c.layers}")
    for i, layer in enumerate(params["layers"]):
        for name, shape in layer_shapes(c).items():
            if name in EXPERTS and name not in layer:
                continue
            if tuple(layer[name].shape) != shape:
                raise ValueError(f"layer {i} {name} is {tuple(layer[name].shape)}, the config needs {shape}")


# --- the blocks -------------------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * w.astype(jnp.float32)).astype(x.dtype)


def rope(x, positions, theta):
    """Rotary embedding of x [B, T, N, D] at positions [T] (the half-split convention of Mixtral's checkpoints)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * freqs[None, :]         # [T, half]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention(c: Config, p: dict, x, cache_k, cache_v, pos):
    """Grouped-query attention of x [B, T, H] at positions pos..pos+T-1 over the cache [B, S, Nkv, D], which gets
    this step's keys and values. Returns (the block's output [B, T, H] before the residual, cache_k, cache_v)."""
    B, T, _ = x.shape
    D, nkv, group = c.head_dim, c.kv_heads, c.heads // c.kv_heads
    q = (x @ p["wq"]).reshape(B, T, c.heads, D)
    k = (x @ p["wk"]).reshape(B, T, nkv, D)
    v = (x @ p["wv"]).reshape(B, T, nkv, D)
    positions = pos + jnp.arange(T)
    q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
    cache_k = jax.lax.dynamic_update_slice(cache_k, k.astype(cache_k.dtype), (0, pos, 0, 0))
    cache_v = jax.lax.dynamic_update_slice(cache_v, v.astype(cache_v.dtype), (0, pos, 0, 0))
    S = cache_k.shape[1]
    qg = q.reshape(B, T, nkv, group, D)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, cache_k, preferred_element_type=jnp.float32) / math.sqrt(D)
    visible = jnp.arange(S)[None, :] <= positions[:, None]                  # [T, S]: causal, and only what is written
    scores = jnp.where(visible, scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1).astype(cache_v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, cache_v, preferred_element_type=jnp.float32)
    out = out.reshape(B, T, c.heads * D).astype(x.dtype)
    return out @ p["wo"], cache_k, cache_v


def route(logits, topk: int):
    """Mixtral's router: the top-k experts of the softmax, their probabilities renormalised over the k (the
    softmax of the k largest logits). logits [T, E] float32 -> (ids [T, k] int32, weights [T, k] float32)."""
    top, ids = jax.lax.top_k(logits, topk)
    return ids.astype(jnp.int32), jax.nn.softmax(top, axis=-1)


def moe_block(c: Config, p: dict, impl: str, weights, x):
    """The mixture-of-experts block of x [B, T, H] (normed inside), before the residual."""
    B, T, H = x.shape
    h = rms_norm(x, p["moe_norm"], c.norm_eps).reshape(B * T, H)
    logits = jnp.dot(h, p["router"], preferred_element_type=jnp.float32)
    ids, w = route(logits, c.topk)
    return moe.apply(impl, h, ids, w, weights).reshape(B, T, H)


def decoder_layer(c: Config, p: dict, impl: str, weights, x, cache_k, cache_v, pos):
    a, cache_k, cache_v = attention(c, p, rms_norm(x, p["attn_norm"], c.norm_eps), cache_k, cache_v, pos)
    x = x + a
    x = x + moe_block(c, p, impl, weights, x)
    return x, cache_k, cache_v


def empty_cache(c: Config, batch: int, length: int, dtype) -> list:
    """The KV cache: per layer (k, v), each [B, S, Nkv, D]."""
    shape = (batch, length, c.kv_heads, c.head_dim)
    return [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(c.layers)]


def forward(c: Config, impl: str, params: dict, moe_weights: list, tokens, cache: list, pos, last_only: bool = True):
    """The decoder on tokens [B, T] at positions pos..pos+T-1: (logits float32 [B, V] of the last position, or
    [B, T, V] with last_only False; the updated cache). moe_weights[l] is moe.prepare's for layer l."""
    x = params["embed"][tokens]
    new_cache = []
    for p, w, (ck, cv) in zip(params["layers"], moe_weights, cache):
        x, ck, cv = decoder_layer(c, p, impl, w, x, ck, cv, pos)
        new_cache.append((ck, cv))
    if last_only:
        x = x[:, -1]
    x = rms_norm(x, params["final_norm"], c.norm_eps)
    return jnp.dot(x, params["lm_head"], preferred_element_type=jnp.float32), new_cache
