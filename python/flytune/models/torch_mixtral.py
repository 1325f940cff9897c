"""The Mixtral-architecture decoder in PyTorch (docs/PYTHON.md, "The PyTorch model"), beside the JAX one.

The same architecture, shapes and weight layout as flytune.models.mixtral -- RMSNorm, grouped-query attention
with RoPE and a KV cache, a top-k softmax router, the SwiGLU mixture of experts -- so the same weights run in
both (weights_from_jax converts the JAX model's fixed-seed random weights, or a checkpoint's). The MoE layer is
one of three implementations on the same w1 [E, 2I, H] / w2 [E, H, I]:

- "flytune": the custom op flytune::moe_layer (flytune.torch) on an export of the layer's problem: CUDA tensors
  on a GPU export, CPU tensors on an export of `flytune search --emulate` opened with device="emulate";
- "grouped_mm": torch._grouped_mm on the (token, slot) pairs sorted by expert (bench/h200_peers.py's layer),
  where this torch has it for the device and dtype; else a loop of one GEMM per expert (grouped_mm_backend says
  which, and the driver prints it);
- "dense": every expert on every token, masked and summed by the router's weights.

fp8 experts (per-tensor e4m3, as the JAX model's --fp8): w1/w2 quantised once to codes with one float32 scale per
expert matrix; flytune's layer quantises x by its current amax / 448 at every call, grouped_mm and dense take
the same codes and dequantise the weights to bf16 in the step. Weights here: wq [H, Nq*D], wk/wv [H, Nkv*D],
wo [Nq*D, H], router [H, E], embed [V, H], lm_head [H, V] (the JAX model's).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch
import torch.nn.functional as F

from flytune.models.config import Config

IMPLS = ("flytune", "grouped_mm", "dense")
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
E4M3_MAX = 448.0  # the largest finite OCP e4m3 value
EXPERTS = ("w1", "w2")


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown MoE implementation '{impl}' (known: {', '.join(IMPLS)})")


# --- weights ----------------------------------------------------------------------------------------------------

def layer_shapes(c: Config) -> dict:
    """The JAX model's per-layer tensors and shapes (flytune.models.mixtral.layer_shapes), in its order."""
    return {"attn_norm": (c.hidden,), "wq": (c.hidden, c.heads * c.head_dim), "wk": (c.hidden, c.kv_heads * c.head_dim),
            "wv": (c.hidden, c.kv_heads * c.head_dim), "wo": (c.heads * c.head_dim, c.hidden), "moe_norm": (c.hidden,),
            "router": (c.hidden, c.experts), "w1": (c.experts, 2 * c.inter, c.hidden),
            "w2": (c.experts, c.hidden, c.inter)}


def _normal(shape, fan_in: int, seed: int, device, dtype) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) / math.sqrt(fan_in)).to(dtype)


def random_layer(c: Config, seed: int, layer: int, device, dtype, names=None) -> dict:
    """Layer `layer`'s tensors among `names` (default all) from torch's generator: norms 1, the rest normal over
    sqrt(fan-in) (the JAX model's rule; other values than its, which weights_from_jax gives)."""
    out = {}
    for i, (name, shape) in enumerate(layer_shapes(c).items()):
        if names is not None and name not in names:
            continue
        if name.endswith("norm"):
            out[name] = torch.ones(shape, device=device, dtype=dtype)
        else:
            fan_in = shape[-1] if name in EXPERTS else shape[0]
            out[name] = _normal(shape, fan_in, (seed * 1_000_003 + layer) * 64 + i, device, dtype)
    return out


def random_params(c: Config, seed: int, device, dtype, experts: bool = True) -> dict:
    """torch.Generator weights with a fixed seed (without w1/w2 where experts is False: random_layer(names=EXPERTS)
    gives the same values)."""
    names = None if experts else tuple(n for n in layer_shapes(c) if n not in EXPERTS)
    return {"embed": _normal((c.vocab, c.hidden), 1, seed * 2 + 1, device, dtype),
            "final_norm": torch.ones(c.hidden, device=device, dtype=dtype),
            "lm_head": _normal((c.hidden, c.vocab), c.hidden, seed * 2 + 2, device, dtype),
            "layers": [random_layer(c, seed, layer, device, dtype, names) for layer in range(c.layers)]}


def from_jax(a, device) -> torch.Tensor:
    """A JAX array as a torch tensor on `device`, through DLPack, copied into torch's memory: the JAX array can go,
    so on a GPU JAX's allocator holds one layer's weights at a time (as it makes them), not the model's."""
    return torch.from_dlpack(a).to(device, copy=True)


def weights_from_jax(tree, device):
    """The JAX model's params (flytune.models.mixtral.random_params, checkpoint.Checkpoint) as torch tensors."""
    if isinstance(tree, dict):
        return {k: weights_from_jax(v, device) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(weights_from_jax(v, device) for v in tree)
    return from_jax(tree, device)


def param_bytes(tree) -> int:
    """The bytes the tensors of `tree` hold (their storage: a view holds its whole tensor, a stand-in of
    flytune.torch.arranged_weights one element)."""
    if isinstance(tree, torch.Tensor):
        return tree.untyped_storage().nbytes()
    if isinstance(tree, dict):
        return sum(param_bytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(param_bytes(v) for v in tree)
    if dataclasses.is_dataclass(tree):
        return sum(param_bytes(getattr(tree, f.name)) for f in dataclasses.fields(tree))
    return 0


# --- the MoE implementations ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Experts:
    """One layer's experts as an implementation holds them: w1/w2 in its layout (dense: [E, 2I, H] and [E, H, I];
    grouped_mm: their [E, H, 2I] / [E, I, H] transposed views; flytune: flytune.torch.arranged_weights' pair,
    which keeps the arranged copies), fp8 codes with per-expert scales or None, and flytune's export."""
    w1: torch.Tensor
    w2: torch.Tensor
    w1_scales: Optional[torch.Tensor] = None
    w2_scales: Optional[torch.Tensor] = None
    export: object = None


def quantise_per_tensor(w: torch.Tensor):
    """w [E, R, C] -> (e4m3 codes, float32 scales [E]): each expert matrix's amax maps to 448 (an all-zero one gets
    scale 1); flytune.models.moe.quantise_per_tensor's rule."""
    w32 = w.float()
    amax = w32.abs().amax(dim=(1, 2))
    scales = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return (w32 / scales[:, None, None]).to(torch.float8_e4m3fn), scales.contiguous()


def prepare(impl: str, w1: torch.Tensor, w2: torch.Tensor, export=None, fp8: bool = False,
            trainable: bool = False) -> Experts:
    """What `apply` reads for one layer, made once at load from w1 and w2 (fp8: quantised per tensor first).
    trainable=True (16-bit only): flytune's layer takes the plain w1 / w2 (its op arranges the copies it reads
    and arranges them again after an in-place update; its autograd formula gives w1 / w2 their gradients) instead
    of arranged_weights' stand-ins; grouped_mm's transposed views pass their gradients back to w1 / w2."""
    check_impl(impl)
    if impl == "flytune" and export is None:
        raise ValueError("the flytune implementation needs an export (flytune.load(DIR); --export DIR)")
    if fp8 and trainable:
        raise ValueError("fp8 experts are not trainable (flytune's layer has no fp8 backward; docs/TRAINING.md)")
    if impl == "flytune" and trainable:
        return Experts(w1, w2, None, None, export)
    s1 = s2 = None
    if fp8:
        (w1, s1), (w2, s2) = quantise_per_tensor(w1), quantise_per_tensor(w2)
    if impl == "flytune":
        import flytune.torch as ftt
        # the arranged copies, made now; a weight no plan reads plain is given to the op as a stand-in without
        # values, so the layer's experts are held once (the copies) once the caller drops w1 / w2
        w1, w2 = ftt.arranged_weights(w1, w2, export)
    if impl == "grouped_mm":
        w1, w2 = w1.transpose(1, 2), w2.transpose(1, 2)  # views: column-major, as _grouped_mm takes them
        grouped_mm_backend(w1.device, w1.dtype)  # its probe copies from the host: never inside a graph capture
    return Experts(w1, w2, s1, s2, export)


def current_x_scale(x: torch.Tensor) -> torch.Tensor:
    """The per-tensor scale mapping x's amax onto 448 ([1] float32; 1 for an all-zero x)."""
    amax = x.float().abs().amax()
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).reshape(1)


def _dequantised(codes: torch.Tensor, scales: torch.Tensor, dtype) -> torch.Tensor:
    return (codes.float() * scales[:, None, None]).to(dtype)


def apply(impl: str, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, e: Experts) -> torch.Tensor:
    """The layer on x [T, H], ids [T, k] int32, weights [T, k] float32 -> [T, H] of x's dtype."""
    check_impl(impl)
    if impl == "flytune":
        scales = {}
        if e.w1_scales is not None:
            scales = {"w1_scales": e.w1_scales, "w2_scales": e.w2_scales, "x_scale": current_x_scale(x)}
        return torch.ops.flytune.moe_layer(x, e.w1, e.w2, weights, ids, e.export.key, **scales)
    w1, w2 = e.w1, e.w2
    if e.w1_scales is not None:
        w1, w2 = _dequantised(w1, e.w1_scales, x.dtype), _dequantised(w2, e.w2_scales, x.dtype)
    return (grouped_layer if impl == "grouped_mm" else dense_layer)(x, ids, weights, w1, w2)


def _swiglu(gu: torch.Tensor, inter: int, dtype) -> torch.Tensor:
    g, u = gu[..., :inter].float(), gu[..., inter:].float()
    return (F.silu(g) * u).to(dtype)


_GROUPED: dict = {}  # (device type, dtype) -> "torch._grouped_mm", or the loop and why


def grouped_mm_backend(device: torch.device, dtype) -> str:
    """"torch._grouped_mm" where this torch has it and it runs on `device` in `dtype` (tried once on a small
    case), else "per-expert loop (...why)": grouped_layer's fallback, one GEMM per expert."""
    key = (device.type, dtype)
    if key not in _GROUPED:
        if not hasattr(torch, "_grouped_mm"):
            _GROUPED[key] = f"per-expert loop (torch {torch.__version__} has no torch._grouped_mm)"
        else:
            try:
                a = torch.ones(16, 16, device=device, dtype=dtype)
                b = torch.ones(2, 16, 16, device=device, dtype=dtype)
                torch._grouped_mm(a, b.transpose(1, 2), offs=torch.tensor([8, 16], device=device, dtype=torch.int32))
                _GROUPED[key] = "torch._grouped_mm"
            except (RuntimeError, NotImplementedError) as err:
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                _GROUPED[key] = f"per-expert loop (torch._grouped_mm on {device.type} {dtype}: {first[:160]})"
    return _GROUPED[key]


def _grouped_gemm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Rows of a [M, K] grouped by expert (group e ends at offs[e]) times b[e] [K, N]."""
    if grouped_mm_backend(a.device, a.dtype) == "torch._grouped_mm":
        return torch._grouped_mm(a, b, offs=offs)
    out = torch.empty(a.shape[0], b.shape[2], device=a.device, dtype=a.dtype)
    start = 0
    for e, n in enumerate(counts.tolist()):
        if n:
            torch.matmul(a[start:start + n], b[e], out=out[start:start + n])
        start += n
    return out


def grouped_layer(x, ids, weights, w1t, w2t) -> torch.Tensor:
    """w1t [E, H, 2I], w2t [E, I, H]: the pairs sorted by expert, x rows gathered, two grouped GEMMs, the routed
    weights applied and the pairs summed back per token in float32."""
    experts, inter, hidden = w2t.shape
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    # per-expert pair counts without a device-to-host sync (bincount sizes its output from the largest id,
    # which a CUDA graph capture cannot read); ids are in [0, E) here
    counts = torch.zeros(experts, dtype=torch.long, device=flat.device).index_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    tok = order // ids.shape[-1]
    gu = _grouped_gemm(x[tok], w1t, offs, counts)
    o = _grouped_gemm(_swiglu(gu, inter, x.dtype), w2t, offs, counts)
    o = o.float() * weights.reshape(-1)[order][:, None]
    return torch.zeros(x.shape[0], hidden, device=x.device, dtype=torch.float32).index_add_(0, tok, o).to(x.dtype)


def dense_layer(x, ids, weights, w1, w2) -> torch.Tensor:
    """Every expert on every token ([E, T, 2I] and [E, T, H] products), masked by the router's weights."""
    experts, hidden, inter = w2.shape
    gu = torch.einsum("th,eoh->eto", x, w1)
    o = torch.einsum("eti,ehi->eth", _swiglu(gu, inter, x.dtype), w2)
    combine = torch.zeros(x.shape[0], experts, device=x.device, dtype=torch.float32)
    combine.scatter_add_(1, ids.long(), weights.float())
    return torch.einsum("te,eth->th", combine, o.float()).to(x.dtype)


# --- the blocks -------------------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of x [B, T, N, D] at positions [T] (the half-split convention)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None] * freqs[None, :]
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def attention(c: Config, p: dict, x: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, pos):
    """Grouped-query attention of x [B, T, H] at positions pos..pos+T-1 over the cache [B, S, Nkv, D], whose rows
    pos..pos+T-1 get this step's keys and values (in place). Returns the block's output before the residual.
    pos: an int, or a 0-dim int64 tensor on x's device: then every shape is static (the whole cache, masked by
    position), so the step can be captured in a CUDA graph and replayed at any position."""
    B, T, _ = x.shape
    D = c.head_dim
    static = isinstance(pos, torch.Tensor)
    positions = pos + torch.arange(T, device=x.device) if static else torch.arange(pos, pos + T, device=x.device)
    q = rope((x @ p["wq"]).view(B, T, c.heads, D), positions, c.rope_theta)
    k = rope((x @ p["wk"]).view(B, T, c.kv_heads, D), positions, c.rope_theta).to(cache_k.dtype)
    v = (x @ p["wv"]).view(B, T, c.kv_heads, D).to(cache_v.dtype)
    # Causal: query t sees the cache up to its own position pos + t. A prefill (pos 0) is SDPA's causal case and a
    # decode step (T 1) sees all it has: no mask, so a fused kernel serves both; other chunks and static steps
    # get the mask.
    if static:
        cache_k.index_copy_(1, positions, k)
        cache_v.index_copy_(1, positions, v)
        keys, values = cache_k.transpose(1, 2), cache_v.transpose(1, 2)  # [B, Nkv, S, D]
    else:
        cache_k[:, pos:pos + T], cache_v[:, pos:pos + T] = k, v
        keys, values = cache_k[:, :pos + T].transpose(1, 2), cache_v[:, :pos + T].transpose(1, 2)
    mask = None
    if static or (T > 1 and pos > 0):
        mask = torch.arange(keys.shape[2], device=x.device)[None, :] <= positions[:, None]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask,
                                         is_causal=mask is None and T > 1, enable_gqa=True)
    return out.transpose(1, 2).reshape(B, T, c.heads * D) @ p["wo"]


def route(logits: torch.Tensor, topk: int):
    """The top-k experts of the softmax, renormalised over the k: (ids [T, k] int32, weights [T, k] float32)."""
    top, ids = torch.topk(logits, topk, dim=-1)
    return ids.to(torch.int32), torch.softmax(top, dim=-1)


def moe_block(c: Config, p: dict, impl: str, experts: Experts, x: torch.Tensor) -> torch.Tensor:
    B, T, H = x.shape
    h = rms_norm(x, p["moe_norm"], c.norm_eps).reshape(B * T, H)
    ids, w = route(h.float() @ p["router"].float(), c.topk)
    return apply(impl, h, ids, w.contiguous(), experts).reshape(B, T, H)


def decoder_layer(c: Config, p: dict, impl: str, experts: Experts, x, cache_k, cache_v, pos):
    x = x + attention(c, p, rms_norm(x, p["attn_norm"], c.norm_eps), cache_k, cache_v, pos)
    return x + moe_block(c, p, impl, experts, x)


def empty_cache(c: Config, batch: int, length: int, device, dtype) -> list:
    """The KV cache: per layer (k, v), each [B, S, Nkv, D], written in place by attention."""
    shape = (batch, length, c.kv_heads, c.head_dim)
    return [(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
            for _ in range(c.layers)]


@torch.inference_mode()
def forward(c: Config, impl: str, params: dict, experts: list, tokens: torch.Tensor, cache: list, pos,
            last_only: bool = True) -> torch.Tensor:
    """The decoder on tokens [B, T] at positions pos..pos+T-1 (cache updated in place; pos an int, or a 0-dim
    tensor for static shapes: attention): float32 logits [B, V] of the last position, or [B, T, V] with last_only
    False. experts[l] is prepare's for layer l. The logits are
    float32 products of the normed x and lm_head (the JAX model's float32 accumulation; a float32 lm_head, which
    the driver makes once, saves the conversion per step). Under inference_mode: decoder is the same with
    autograd (training: flytune.models.torch_train)."""
    return decoder(c, impl, params, experts, tokens, cache, pos, last_only)


def decoder(c: Config, impl: str, params: dict, experts: list, tokens: torch.Tensor, cache: list, pos,
            last_only: bool = True) -> torch.Tensor:
    """forward's decoder, recorded by autograd where its tensors need gradients."""
    x = params["embed"][tokens]
    for p, e, (ck, cv) in zip(params["layers"], experts, cache):
        x = decoder_layer(c, p, impl, e, x, ck, cv, pos)
    if last_only:
        x = x[:, -1]
    return rms_norm(x, params["final_norm"], c.norm_eps).float() @ params["lm_head"].float()
