"""The Mixtral architecture's shapes, shared by the JAX model (flytune.models.mixtral) and the PyTorch one
(flytune.models.torch_mixtral); no framework is imported here."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int
    topk: int
    rope_theta: float = 1e6
    norm_eps: float = 1e-5

    def with_layers(self, layers: int) -> "Config":
        if not 1 <= layers <= self.layers:
            raise ValueError(f"--layers must be between 1 and {self.layers} for this config, got {layers}")
        return dataclasses.replace(self, layers=layers)


# Mixtral 8x7B (its config.json: hidden_size 4096, intermediate_size 14336, 32 layers, 32 heads / 8 KV heads,
# 8 local experts, 2 per token, vocab 32000, rope_theta 1e6, rms_norm_eps 1e-5).
MIXTRAL_8X7B = Config(vocab=32000, hidden=4096, inter=14336, layers=32, heads=32, kv_heads=8, head_dim=128,
                      experts=8, topk=2)
# The tiny model of the tests: its MoE layer is tests/data/tiny_forms.db's problem (E 4, H 256, I 512, top-2).
TINY = Config(vocab=512, hidden=256, inter=512, layers=2, heads=4, kv_heads=2, head_dim=64, experts=4, topk=2,
              rope_theta=1e4)
CONFIGS = {"mixtral-8x7b": MIXTRAL_8X7B, "tiny": TINY}
