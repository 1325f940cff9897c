"""Mixtral weights from a Hugging Face checkpoint folder (config.json and *.safetensors).

    from flytune.models import checkpoint
    c = checkpoint.config_from_dir("Mixtral-8x7B-v0.1").with_layers(16)
    params = checkpoint.load("Mixtral-8x7B-v0.1", c, jnp.bfloat16)    # the first c.layers layers

Needs the `safetensors` package (pip install safetensors). Tensors are read one at a time (safe_open), so the
host holds one layer's experts at most. Names and layouts (torch Linear weights are [out, in]):

| checkpoint tensor | here |
| --- | --- |
| model.embed_tokens.weight [V, H] | embed [V, H] |
| model.layers.L.input_layernorm.weight | layers[L].attn_norm |
| model.layers.L.self_attn.{q,k,v}_proj.weight [N*D, H] | layers[L].w{q,k,v} [H, N*D] (transposed) |
| model.layers.L.self_attn.o_proj.weight [H, Nq*D] | layers[L].wo [Nq*D, H] (transposed) |
| model.layers.L.post_attention_layernorm.weight | layers[L].moe_norm |
| model.layers.L.block_sparse_moe.gate.weight [E, H] | layers[L].router [H, E] (transposed) |
| model.layers.L.block_sparse_moe.experts.X.w1 / w3 / w2 .weight | layers[L].w1[X] = [w1; w3] [2I, H], w2[X] [H, I] |
| model.norm.weight | final_norm |
| lm_head.weight [V, H] | lm_head [H, V] (transposed) |
"""
from __future__ import annotations

import glob
import json
import os

from flytune.models.config import Config

# config.json key -> Config field
_HF_KEYS = {"vocab_size": "vocab", "hidden_size": "hidden", "intermediate_size": "inter",
            "num_hidden_layers": "layers", "num_attention_heads": "heads", "num_key_value_heads": "kv_heads",
            "num_local_experts": "experts", "num_experts_per_tok": "topk"}


def config_from_dir(folder: str) -> Config:
    path = os.path.join(folder, "config.json")
    try:
        with open(path) as f:
            hf = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: no config.json (a Hugging Face Mixtral checkpoint folder has one)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    missing = [k for k in _HF_KEYS if k not in hf]
    if missing:
        raise ValueError(f"{path}: not a Mixtral config: {', '.join(missing)} missing")
    fields = {field: int(hf[k]) for k, field in _HF_KEYS.items()}
    fields["head_dim"] = int(hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"])
    fields["rope_theta"] = float(hf.get("rope_theta", 1e6))
    fields["norm_eps"] = float(hf.get("rms_norm_eps", 1e-5))
    return Config(**fields)


class _Tensors:
    """Tensors by name over the folder's safetensors files, opened lazily."""

    def __init__(self, folder: str):
        try:
            from safetensors import safe_open
        except ImportError:
            raise ValueError("loading a checkpoint needs the safetensors package (pip install safetensors)") from None
        files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
        if not files:
            raise ValueError(f"{folder}: no *.safetensors files")
        self._where = {}
        self._open = {}
        for path in files:
            h = safe_open(path, framework="flax")
            self._open[path] = h
            for name in h.keys():
                self._where[name] = path

    def get(self, name: str):
        path = self._where.get(name)
        if path is None:
            raise ValueError(f"the checkpoint has no tensor '{name}'")
        return self._open[path].get_tensor(name)


class Checkpoint:
    """The folder's tensors as the model's params, the experts' weights apart (one layer at a time: an
    implementation that keeps its own layout of them reads each layer, arranges it and lets it go)."""

    def __init__(self, folder: str, c: Config, dtype):
        self.c, self.dtype, self._t = c, dtype, _Tensors(folder)

    def _get(self, name: str, transpose: bool = False):
        import jax.numpy as jnp
        a = jnp.asarray(self._t.get(name)).astype(self.dtype)
        return a.T if transpose else a

    def params(self, experts: bool = True) -> dict:
        """The first c.layers layers (without w1/w2 where experts is False)."""
        get = self._get
        params = {"embed": get("model.embed_tokens.weight"), "final_norm": get("model.norm.weight"),
                  "lm_head": get("lm_head.weight", transpose=True), "layers": []}
        for L in range(self.c.layers):
            pre = f"model.layers.{L}."
            layer = {
                "attn_norm": get(pre + "input_layernorm.weight"),
                "wq": get(pre + "self_attn.q_proj.weight", True),
                "wk": get(pre + "self_attn.k_proj.weight", True),
                "wv": get(pre + "self_attn.v_proj.weight", True),
                "wo": get(pre + "self_attn.o_proj.weight", True),
                "moe_norm": get(pre + "post_attention_layernorm.weight"),
                "router": get(pre + "block_sparse_moe.gate.weight", True),
            }
            if experts:
                layer["w1"], layer["w2"] = self.experts(L)
            params["layers"].append(layer)
        return params

    def experts(self, L: int) -> tuple:
        """(w1 [E, 2I, H], w2 [E, H, I]) of layer L."""
        import jax.numpy as jnp
        moe = f"model.layers.{L}.block_sparse_moe.experts."
        e = range(self.c.experts)
        w1 = jnp.stack([jnp.concatenate([self._get(f"{moe}{x}.w1.weight"), self._get(f"{moe}{x}.w3.weight")]) for x in e])
        return w1, jnp.stack([self._get(f"{moe}{x}.w2.weight") for x in e])


def load(folder: str, c: Config, dtype, experts: bool = True) -> dict:
    """The first c.layers layers of the checkpoint in `folder`, as flytune.models.mixtral's params (on the
    default device, in `dtype`; without w1/w2 where experts is False: Checkpoint.experts reads them)."""
    return Checkpoint(folder, c, dtype).params(experts)
