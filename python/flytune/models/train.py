"""One training step of the Mixtral model (flytune.models.mixtral) in JAX (docs/TRAINING.md, "A training step of
the model").

    step = make_train_step(config, "flytune", export)      # or "ragged_dot" / "dense" (no export)
    params, loss = step(params, tokens, targets, lr)       # tokens, targets [B, T] int32

The loss is the next-token cross-entropy of the whole decoder (its logits in float32, the mean over the B*T
positions) on `params` as random_params makes them, w1 / w2 kept in every layer; the gradients are
jax.value_and_grad's of every parameter, the update plain SGD (p - lr * g in float32, rounded back to p's
dtype). Each MoE layer's weights are made by moe.prepare(..., trainable=True) inside the differentiated function,
so the gradients of w1 / w2 come from the implementation's own backward: flytune's jax.custom_vjp (the export's
backward program; its arranged copies under stop_gradient) or jax.lax.ragged_dot's transpose. flytune's layer
needs an export with backward buckets (flytune search --pass both) for the MoE problem at B*T tokens.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from flytune.models import mixtral, moe
from flytune.models.config import Config


def loss(c: Config, impl: str, params: dict, tokens, targets, export=None):
    """The mean next-token cross-entropy (float32 scalar) of the decoder on tokens [B, T] against targets [B, T],
    every position attending causally to the ones before it (a fresh cache of length T, position 0)."""
    B, T = tokens.shape
    experts = [moe.prepare(impl, p["w1"], p["w2"], export, trainable=True) for p in params["layers"]]
    cache = mixtral.empty_cache(c, B, T, params["embed"].dtype)
    logits, _ = mixtral.forward(c, impl, params, experts, tokens, cache, 0, last_only=False)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def sgd(params: dict, grads: dict, lr):
    """p - lr * g for every parameter, in float32, rounded back to p's dtype."""
    return jax.tree.map(lambda p, g: (p.astype(jnp.float32) - lr * g.astype(jnp.float32)).astype(p.dtype),
                        params, grads)


def make_train_step(c: Config, impl: str, export=None, with_grads: bool = False):
    """jit of train_step(params, tokens, targets, lr) -> (the updated params, the loss of `params`), and the
    gradients (jax.value_and_grad's, the params' tree and dtypes) after them with with_grads."""
    moe.check_impl(impl)

    def train_step(params, tokens, targets, lr):
        value, grads = jax.value_and_grad(lambda p: loss(c, impl, p, tokens, targets, export))(params)
        new = sgd(params, grads, lr)
        return (new, value, grads) if with_grads else (new, value)
    return jax.jit(train_step)
