"""Models built on flytune's layers (docs/PYTHON.md).

flytune.models.mixtral: a Mixtral-architecture decoder in plain JAX whose MoE
layers run through one of three implementations on the same weights
(flytune.models.moe: flytune's FFI call, jax.lax.ragged_dot, dense masked);
flytune.models.generate: the `flytune-mixtral` driver (prefill, greedy decode,
tokens/s); flytune.models.checkpoint: weights from a safetensors checkpoint;
flytune.models.train: one training step of the model (next-token cross-entropy,
jax.value_and_grad, SGD) with any of the MoE implementations; flytune.models.torch_train:
the PyTorch model's.
"""
