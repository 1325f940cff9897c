"""One training step of the PyTorch Mixtral model (flytune.models.torch_mixtral), the twin of
flytune.models.train (docs/TRAINING.md, "A training step of the model").

    loss, grads = train_step(config, "flytune", params, tokens, targets, lr, export)   # or "grouped_mm", "dense"

The loss is the next-token cross-entropy of the decoder's float32 logits (the mean over the B*T positions), the
gradients torch.autograd.grad's of every tensor of `params` (random_params' tree, w1 / w2 kept in every layer),
and the update plain SGD in place (p - lr * g in float32, rounded back to p's dtype; flytune's op arranges its
copies of w1 / w2 again after it). The MoE layers take the weights of torch_mixtral.prepare(..., trainable=True):
flytune's op on the plain w1 / w2 (its autograd formula: the export's backward program) or grouped_mm's
transposed views (torch._grouped_mm's autograd, or the per-expert loop's).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from flytune.models import torch_mixtral as tm
from flytune.models.config import Config


def _leaves(tree) -> list:
    if isinstance(tree, dict):
        return [t for k in sorted(tree) for t in _leaves(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _leaves(v)]
    return [tree]


def _like(tree, values):
    """`values` (in _leaves' order) in the shape of `tree`."""
    it = iter(values)

    def build(t):
        if isinstance(t, dict):
            return {k: build(t[k]) for k in sorted(t)}
        if isinstance(t, (list, tuple)):
            return type(t)(build(v) for v in t)
        return next(it)
    return build(tree)


def loss(c: Config, impl: str, params: dict, tokens: torch.Tensor, targets: torch.Tensor, export=None):
    """The mean next-token cross-entropy (float32 0-dim tensor) of the decoder on tokens [B, T] against targets
    [B, T], causal attention over a fresh cache of length T from position 0."""
    B, T = tokens.shape
    dtype = params["embed"].dtype
    experts = [tm.prepare(impl, p["w1"], p["w2"], export, trainable=True) for p in params["layers"]]
    cache = tm.empty_cache(c, B, T, tokens.device, dtype)
    logits = tm.decoder(c, impl, params, experts, tokens, cache, 0, last_only=False)
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1).long())


def loss_and_grads(c: Config, impl: str, params: dict, tokens, targets, export=None):
    """(the loss, its gradients in the tree of `params`), params untouched."""
    leaves = _leaves(params)
    inputs = [t.detach().requires_grad_() for t in leaves]
    value = loss(c, impl, _like(params, inputs), tokens, targets, export)
    grads = torch.autograd.grad(value, inputs)
    return value.detach(), _like(params, grads)


def train_step(c: Config, impl: str, params: dict, tokens, targets, lr: float, export=None):
    """One SGD step, params updated in place: (the loss of the params before it, their gradients)."""
    value, grads = loss_and_grads(c, impl, params, tokens, targets, export)
    with torch.no_grad():
        for p, g in zip(_leaves(params), _leaves(grads)):
            p.copy_((p.float() - lr * g.float()).to(p.dtype))
    return value, grads
