"""The Mixtral model (flytune.models): its blocks against a float64 numpy reference written here, the three MoE
implementations against each other on the same weights, the driver end to end on the tiny config, the
checkpoint loader on a checkpoint this test writes, and (marker gpu) flytune's layers inside the model on a GPU.

Bounds (stated in docs/PYTHON.md):
- float32, CPU: ragged_dot and dense agree with the per-token reference to 1e-5 relative L2, a decoder layer
  with its reference to 1e-5, prefill + decode with the whole sequence's logits to 1e-5;
- bfloat16: the driver's logits within 3e-2 relative L2 of the first implementation's, greedy tokens equal for
  the first 4 of the 9 generated (bf16 rounding in another summation order can flip a near tie later);
- GPU, flytune vs ragged_dot on the tiny export, bf16: the same 3e-2 and 4 steps;
- CPU emulator (device="emulate"), flytune vs ragged_dot on the tiny problem's emulator export, bf16: 3e-2 on
  the prefill and the first decode step's logits, the same greedy token;
- fp8 experts (per-tensor e4m3): XLA's paths equal the per-token reference on the dequantised codes to 1e-5
  (float32), and within 6e-2 of the unquantised weights; on the emulator, flytune's fp8 layers against ragged_dot
  on the same codes: FP8_MODEL_BOUND on both logits, the same greedy token.
"""
import json
import math
import os

import numpy as np
import pytest

from conftest import check_two_implementations, cuda_devices, framework, run_driver
from layer_reference import ref_moe

jax = framework("jax")
import jax.numpy as jnp  # noqa: E402

import flytune  # noqa: E402
import flytune.jax  # noqa: E402,F401
from flytune.models import checkpoint, generate, mixtral, moe, report  # noqa: E402

TINY = mixtral.TINY
FP8_MODEL_BOUND = 6e-2  # flytune's fp8 layer quantises x and the intermediate; XLA's paths keep them bf16


# --- a float64 reference of the blocks, written from the architecture's definition ---------------------------

def ref_norm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def ref_layer(c, p, x):
    """One decoder layer on x [T, H] (positions 0..T-1), causal attention without a cache."""
    T, D = x.shape[0], c.head_dim
    h = ref_norm(x, p["attn_norm"], c.norm_eps)
    q = (h @ p["wq"]).reshape(T, c.heads, D)
    k = (h @ p["wk"]).reshape(T, c.kv_heads, D)
    v = (h @ p["wv"]).reshape(T, c.kv_heads, D)
    half = D // 2
    ang = np.arange(T)[:, None] * c.rope_theta ** (-np.arange(half) / half)[None, :]

    def rot(a):
        a1, a2 = a[..., :half], a[..., half:]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        return np.concatenate([a1 * cos - a2 * sin, a2 * cos + a1 * sin], axis=-1)

    q, k = rot(q), rot(k)
    out = np.zeros((T, c.heads, D))
    for head in range(c.heads):
        kv = head // (c.heads // c.kv_heads)
        s = q[:, head] @ k[:, kv].T / math.sqrt(D)
        s = np.where(np.tril(np.ones((T, T))) > 0, s, -np.inf)
        a = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, head] = (a / a.sum(axis=1, keepdims=True)) @ v[:, kv]
    x = x + out.reshape(T, -1) @ p["wo"]
    h = ref_norm(x, p["moe_norm"], c.norm_eps)
    logits = h @ p["router"]
    ids = np.argsort(-logits, axis=1)[:, :c.topk]
    top = np.take_along_axis(logits, ids, axis=1)
    w = np.exp(top - top.max(axis=1, keepdims=True))
    return x + ref_moe(h, ids, w / w.sum(axis=1, keepdims=True), p["w1"], p["w2"])


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.fixture(scope="module")
def f32_params():
    return mixtral.random_params(TINY, 3, jnp.float32)


def _routing(rng, tokens, experts, topk):
    ids = np.stack([rng.choice(experts, topk, replace=False) for _ in range(tokens)]).astype(np.int32)
    return ids, rng.random((tokens, topk)).astype(np.float32)


@pytest.mark.parametrize("impl", ["ragged_dot", "dense"])
def test_moe_implementations_match_the_per_token_reference(impl, f32_params):
    rng = np.random.default_rng(1)
    layer = f32_params["layers"][0]
    x = rng.standard_normal((37, TINY.hidden)).astype(np.float32)
    ids, w = _routing(rng, 37, TINY.experts, TINY.topk)
    want = ref_moe(x.astype(np.float64), ids, w, np.asarray(layer["w1"], np.float64), np.asarray(layer["w2"], np.float64))
    prepared = moe.prepare(impl, layer["w1"], layer["w2"])
    layer_fn = jax.jit(lambda *a: moe.apply(impl, *a))
    got = layer_fn(jnp.asarray(x), jnp.asarray(ids), jnp.asarray(w), prepared)
    assert rel_l2(got, want) < 1e-5
    # A wrong expert is far outside the bound (the comparison can fail).
    got_wrong = layer_fn(jnp.asarray(x), jnp.asarray((ids + 1) % TINY.experts), jnp.asarray(w), prepared)
    assert rel_l2(got_wrong, want) > 0.1


def test_a_decoder_layer_matches_the_reference(f32_params):
    rng = np.random.default_rng(2)
    p = f32_params["layers"][1]
    x = rng.standard_normal((1, 12, TINY.hidden)).astype(np.float32)
    (ck, cv), = mixtral.empty_cache(TINY.with_layers(1), 1, 20, jnp.float32)
    got, _, _ = jax.jit(lambda p, x, ck, cv: mixtral.decoder_layer(TINY, p, "dense", (p["w1"], p["w2"]), x, ck, cv, 0))(
        p, jnp.asarray(x), ck, cv)
    want = ref_layer(TINY, {k: np.asarray(v, np.float64) for k, v in p.items()}, x[0].astype(np.float64))
    assert rel_l2(got[0], want) < 1e-5


def test_the_experts_come_apart_with_the_same_values(f32_params):
    c = TINY
    bare = mixtral.random_params(c, 3, jnp.float32, experts=False)
    mixtral.check_params(c, bare)
    for L, layer in enumerate(f32_params["layers"]):
        assert "w1" not in bare["layers"][L]
        np.testing.assert_array_equal(np.asarray(bare["layers"][L]["wq"]), np.asarray(layer["wq"]))
        w1, w2 = mixtral.random_experts(c, 3, L, jnp.float32)
        np.testing.assert_array_equal(np.asarray(w1), np.asarray(layer["w1"]))
        np.testing.assert_array_equal(np.asarray(w2), np.asarray(layer["w2"]))
    assert not np.array_equal(np.asarray(mixtral.random_experts(c, 3, 0, jnp.float32)[0]),
                              np.asarray(mixtral.random_experts(c, 3, 1, jnp.float32)[0]))
    assert mixtral.expert_bytes(c, jnp.bfloat16) == c.layers * 3 * c.experts * c.inter * c.hidden * 2


def test_prefill_then_decode_equals_the_whole_sequence(f32_params):
    c = TINY.with_layers(1)
    params = {**f32_params, "layers": f32_params["layers"][:1]}
    tokens = jnp.asarray(np.random.default_rng(4).integers(0, c.vocab, (2, 10)), jnp.int32)
    weights = [(p["w1"], p["w2"]) for p in params["layers"]]

    @jax.jit
    def both(params, weights, tokens):
        whole, _ = mixtral.forward(c, "dense", params, weights, tokens, mixtral.empty_cache(c, 2, 16, jnp.float32),
                                   0, last_only=False)
        _, cache = mixtral.forward(c, "dense", params, weights, tokens[:, :7], mixtral.empty_cache(c, 2, 16, jnp.float32), 0)
        steps = []
        for i in range(7, 10):
            logits, cache = mixtral.forward(c, "dense", params, weights, tokens[:, i:i + 1], cache, i)
            steps.append(logits)
        return whole[:, 7:], jnp.stack(steps, 1)

    whole, steps = both(params, weights, tokens)
    assert rel_l2(steps, whole) < 1e-5


def _run(tmp_path, *args):
    return run_driver(generate.main, tmp_path, *args)


def test_the_driver_runs_every_xla_implementation_end_to_end(tmp_path):
    r = _run(tmp_path, "--impl", "ragged_dot,dense")
    check_two_implementations(r, "ragged_dot", "dense")
    assert r["layers"] == 2 and r["config"]["experts"] == TINY.experts and r["dtype"] == "bf16"
    experts = mixtral.expert_bytes(TINY, jnp.bfloat16)  # each implementation holds its own layout, once
    assert r["moe_weight_bytes"] == {"ragged_dot": experts, "dense": experts}
    assert r["weight_bytes"] > experts


def test_the_decode_time_is_the_steps_alone(monkeypatch):
    # The tokens are stacked after the clock stops: a stack at a new shape compiles (70 ms on the H200, which the
    # first implementation of a run paid inside its decode time until 2026-12-03; docs/PERFORMANCE.md).
    import time as _time
    params = mixtral.random_params(TINY, 0, jnp.bfloat16)
    model = generate.Model(TINY, "dense", params, [(p["w1"], p["w2"]) for p in params["layers"]])
    nxt, _, cache = model.prefill(jnp.zeros((1, 4), jnp.int32), 8)
    model.decode(nxt, cache, 4, 2, report.Progress(False), "warm-up")
    nxt, _, cache = model.prefill(jnp.zeros((1, 4), jnp.int32), 8)
    real = jnp.stack
    monkeypatch.setattr(jnp, "stack", lambda *a, **k: (_time.sleep(1.0), real(*a, **k))[1])
    tokens, seconds = model.decode(nxt, cache, 4, 2, report.Progress(False), "timed")
    assert tokens.shape == (1, 3) and seconds < 1.0


def test_a_failing_implementation_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    real = moe.prepare

    def prepare(impl, *args, **kwargs):
        if impl == "dense":
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory allocating 99 GB\nmore lines")
        return real(impl, *args, **kwargs)

    monkeypatch.setattr(moe, "prepare", prepare)
    out = tmp_path / "run.json"
    rc = generate.main(["--config", "tiny", "--batch", "2", "--prompt-len", "16", "--new-tokens", "8", "--repeats", "1",
                        "--impl", "dense,ragged_dot", "--no-parts", "--no-progress", "--json", str(out)])
    assert rc == 1
    r = json.loads(out.read_text())
    assert [x["impl"] for x in r["runs"]] == ["ragged_dot"]
    assert r["errors"] == [{"impl": "dense", "shape": None,
                            "error": "RuntimeError: RESOURCE_EXHAUSTED: out of memory allocating 99 GB"}]
    assert "flytune-mixtral: error: dense: RuntimeError: RESOURCE_EXHAUSTED" in capsys.readouterr().err


def test_speedups_are_over_the_faster_other_implementation_per_shape():
    def row(impl, b, prefill, decode):
        return {"impl": impl, "batch": b, "prompt_len": 512, "prefill_tokens_per_s": prefill,
                "decode_tokens_per_s": decode}
    runs = [row("flytune", 1, 300.0, 60.0), row("ragged_dot", 1, 100.0, 30.0), row("dense", 1, 150.0, 20.0),
            row("flytune", 32, 800.0, 90.0), row("ragged_dot", 32, 200.0, 100.0)]
    assert report.speedups(runs) == [
        {"batch": 1, "prompt_len": 512, "prefill": {"vs": "dense", "speedup": 2.0},
         "decode": {"vs": "ragged_dot", "speedup": 2.0}},
        {"batch": 32, "prompt_len": 512, "prefill": {"vs": "ragged_dot", "speedup": 4.0},
         "decode": {"vs": "ragged_dot", "speedup": 0.9}}]
    assert report.speedups(runs[1:3]) == []  # no flytune row: nothing to compare


def test_the_flytune_implementation_lowers_to_flytunes_call_in_every_layer(cpu_export):
    # Without a GPU the export opens with device="none": the model traces and lowers through flytune's FFI call
    # (one per layer), and running it reaches the runtime, which has no device and says so.
    params = mixtral.random_params(TINY, 0, jnp.bfloat16)
    weights = [flytune.jax.MoeWeights(p["w1"], p["w2"], p["w1"], p["w2"], p["w1"], p["w2"], cpu_export)
               for p in params["layers"]]
    tokens = jnp.zeros((1, 5), jnp.int32)
    fwd = jax.jit(lambda params, w, t: mixtral.forward(TINY, "flytune", params, w, t,
                                                       mixtral.empty_cache(TINY, 1, 8, jnp.bfloat16), 0))
    text = fwd.lower(params, weights, tokens).as_text()
    assert text.count("stablehlo.custom_call @flytune_moe_layer") == TINY.layers
    with pytest.raises(Exception, match="at T=5: no device: the export was opened without one"):
        jax.block_until_ready(fwd(params, weights, tokens))


def test_flytune_in_the_model_on_the_cpu_emulator_agrees_with_ragged_dot(emu_export_dir):
    # The tiny problem's emulator export (device="emulate"): the model's flytune path runs the real kernels on
    # the CPU through JAX's CPU handler, prefill (T=5) then one decode step (T=1), against ragged_dot's logits.
    # every bucket's stage 1 reads the tiled copy, T=1's stage 2 the plain w2
    f, r = _emulated_logits(emu_export_dir, False, lambda m: m.w1 is None and m.w2 is not None and
                            m.w1_tiled is not None)
    assert int(f[2][0, 0]) == int(r[2][0, 0])
    assert rel_l2(f[0], r[0]) < 3e-2 and rel_l2(f[1], r[1]) < 3e-2


def _emulated_logits(export_dir, fp8: bool, check_flytune):
    """flytune (the export opened on the CPU emulator) and ragged_dot in the tiny bf16 model: for each, the
    prefill's (T=5) logits, one decode step's (T=1) and the greedy token between them; check_flytune(m) must hold
    for every layer's flytune weights."""
    export = flytune.load(export_dir, device="emulate")
    params = mixtral.random_params(TINY, 0, jnp.bfloat16)
    prompt = jnp.asarray(np.random.default_rng(0).integers(0, TINY.vocab, (1, 5)), jnp.int32)
    logits = {}
    for impl in ("flytune", "ragged_dot"):
        step = jax.jit(lambda params, w, t, cache, pos, impl=impl: mixtral.forward(TINY, impl, params, w, t, cache,
                                                                                   pos), static_argnums=4)
        w = [moe.prepare(impl, p["w1"], p["w2"], export, fp8=fp8) for p in params["layers"]]
        if impl == "flytune":
            assert all(check_flytune(m) for m in w)
        first, cache = step(params, w, prompt, mixtral.empty_cache(TINY, 1, 8, jnp.bfloat16), 0)
        nxt = jnp.argmax(first, axis=-1).astype(jnp.int32)[:, None]
        second, _ = step(params, w, nxt, cache, 5)
        logits[impl] = (first, second, nxt)
    return logits["flytune"], logits["ragged_dot"]


# --- fp8 experts ---------------------------------------------------------------------------------------------

def test_per_tensor_quantisation_maps_each_amax_to_the_largest_code():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 16, 32)).astype(np.float32) * np.array([1e-3, 1.0, 0.0])[:, None, None]
    codes, scales = moe.quantise_per_tensor(jnp.asarray(w))
    assert codes.dtype == jnp.float8_e4m3fn and scales.shape == (3,)
    back = np.asarray(codes, np.float32) * np.asarray(scales)[:, None, None]
    for e in (0, 1):  # e4m3 keeps 3 mantissa bits: within 2^-4 relative of each value, the amax exact
        assert np.abs(np.asarray(codes[e], np.float32)).max() == moe.E4M3_MAX
        assert np.all(np.abs(back[e] - w[e]) <= 2.0 ** -4 * np.abs(w[e]) + 2.0 ** -9 * float(scales[e]))
    assert float(scales[2]) == 1.0 and not np.any(back[2])  # an all-zero expert stays zero, no NaN
    assert float(moe.current_x_scale(jnp.zeros((2, 4)))[0]) == 1.0
    assert float(moe.current_x_scale(jnp.asarray([[-896.0, 1.0]]))[0]) == 2.0


@pytest.mark.parametrize("impl", ["ragged_dot", "dense"])
def test_fp8_experts_on_xlas_paths_are_the_dequantised_weights(impl, f32_params):
    rng = np.random.default_rng(2)
    layer = f32_params["layers"][0]
    x = rng.standard_normal((19, TINY.hidden)).astype(np.float32)
    ids, w = _routing(rng, 19, TINY.experts, TINY.topk)
    deq = [np.asarray(c, np.float64) * np.asarray(s, np.float64)[:, None, None]
           for c, s in (moe.quantise_per_tensor(layer[n]) for n in ("w1", "w2"))]
    prepared = moe.prepare(impl, layer["w1"], layer["w2"], fp8=True)
    assert isinstance(prepared, moe.Fp8Experts) and prepared.w1.dtype == jnp.float8_e4m3fn
    got = jax.jit(lambda *a: moe.apply(impl, *a))(jnp.asarray(x), jnp.asarray(ids), jnp.asarray(w), prepared)
    assert rel_l2(got, ref_moe(x.astype(np.float64), ids, w, *deq)) < 1e-5
    exact = ref_moe(x.astype(np.float64), ids, w, *(np.asarray(layer[n], np.float64) for n in ("w1", "w2")))
    assert 1e-4 < rel_l2(got, exact) < 6e-2  # the codes are not the weights, but close


def test_the_driver_runs_the_fp8_model_end_to_end(tmp_path):
    r = _run(tmp_path, "--impl", "ragged_dot,dense", "--fp8")
    assert r["experts"] == "e4m3 per-tensor" and [x["impl"] for x in r["runs"]] == ["ragged_dot", "dense"]
    a = r["runs"][1]["agreement"]
    assert a["logits_rel_l2"] < 3e-2 and a["tokens_equal_steps"] >= 4, a
    codes = mixtral.expert_bytes(TINY, jnp.float8_e4m3fn)
    scales = TINY.layers * 2 * TINY.experts * 4  # one float32 per expert matrix
    assert r["moe_weight_bytes"] == {"ragged_dot": codes + scales, "dense": codes + scales}


def test_flytune_fp8_in_the_model_on_the_cpu_emulator_agrees_with_ragged_dot(emu_fp8_export_dir):
    # The tiny problem's fp8 per-tensor emulator export: flytune's fp8 layer (x quantised by its current amax,
    # the intermediate requantised) against ragged_dot on the same codes dequantised, prefill then one step.
    f, r = _emulated_logits(emu_fp8_export_dir, True, lambda m: m.scales == "per-tensor" and
                            m.w1_scales.shape == (TINY.experts,))
    assert int(f[2][0, 0]) == int(r[2][0, 0])
    assert rel_l2(f[0], r[0]) < FP8_MODEL_BOUND and rel_l2(f[1], r[1]) < FP8_MODEL_BOUND


@pytest.mark.parametrize("args, message", [
    (["--fp8", "--dtype", "f32", "--impl", "dense"], "--fp8 takes bf16 activations"),
    (["--layers", "3", "--impl", "dense"], "--layers must be between 1 and 2 for this config, got 3"),
    (["--impl", "flytune"], "the flytune implementation needs --export DIR"),
])
def test_bad_input_is_one_line_and_exit_1(capsys, args, message):
    assert generate.main(["--config", "tiny", "--no-progress", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"flytune-mixtral: error: {err.split('error: ', 1)[1]}" and message in err and "\n" not in err


@pytest.mark.parametrize("args", [["--impl", "cutlass"], ["--batch", "0"], ["--new-tokens", "x"], ["--dtype", "f16"]])
def test_usage_errors_exit_2(capsys, args):
    with pytest.raises(SystemExit) as e:
        generate.main(["--config", "tiny", *args])
    assert e.value.code == 2


# --- checkpoints ---------------------------------------------------------------------------------------------

def _write_hf_checkpoint(folder, c, params):
    """A Hugging Face Mixtral folder of `params` (this test's own statement of that layout)."""
    from safetensors.numpy import save_file
    n = lambda a: np.ascontiguousarray(np.asarray(a, np.float32))  # noqa: E731
    t = {"model.embed_tokens.weight": n(params["embed"]), "model.norm.weight": n(params["final_norm"]),
         "lm_head.weight": n(np.asarray(params["lm_head"]).T)}
    for L, p in enumerate(params["layers"]):
        pre = f"model.layers.{L}."
        t[pre + "input_layernorm.weight"] = n(p["attn_norm"])
        t[pre + "post_attention_layernorm.weight"] = n(p["moe_norm"])
        for name in "qkvo":
            t[pre + f"self_attn.{name}_proj.weight"] = n(np.asarray(p["w" + name]).T)
        t[pre + "block_sparse_moe.gate.weight"] = n(np.asarray(p["router"]).T)
        for e in range(c.experts):
            ex = pre + f"block_sparse_moe.experts.{e}."
            t[ex + "w1.weight"] = n(p["w1"][e, :c.inter])
            t[ex + "w3.weight"] = n(p["w1"][e, c.inter:])
            t[ex + "w2.weight"] = n(p["w2"][e])
    names = sorted(t)
    half = len(names) // 2  # two shards, as real checkpoints come
    save_file({k: t[k] for k in names[:half]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({k: t[k] for k in names[half:]}, str(folder / "model-00002-of-00002.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["MixtralForCausalLM"], "vocab_size": c.vocab, "hidden_size": c.hidden,
        "intermediate_size": c.inter, "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads, "num_local_experts": c.experts, "num_experts_per_tok": c.topk,
        "rope_theta": c.rope_theta, "rms_norm_eps": c.norm_eps}))


def test_a_checkpoint_loads_into_the_same_model(tmp_path, f32_params):
    framework("safetensors")
    _write_hf_checkpoint(tmp_path, TINY, f32_params)
    c = checkpoint.config_from_dir(str(tmp_path))
    assert c == TINY
    loaded = checkpoint.load(str(tmp_path), c.with_layers(1), jnp.float32)
    mixtral.check_params(c.with_layers(1), loaded)
    for name, want in f32_params["layers"][0].items():
        np.testing.assert_array_equal(np.asarray(loaded["layers"][0][name]), np.asarray(want), err_msg=name)
    ckpt = checkpoint.Checkpoint(str(tmp_path), c, jnp.float32)
    assert "w1" not in ckpt.params(experts=False)["layers"][1]
    for got, want in zip(ckpt.experts(1), (f32_params["layers"][1]["w1"], f32_params["layers"][1]["w2"])):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(loaded["lm_head"]), np.asarray(f32_params["lm_head"]))
    r = _run(tmp_path, "--impl", "dense", "--checkpoint", str(tmp_path), "--no-parts")  # the driver test's shapes
    assert r["weights"] == f"checkpoint {tmp_path}" and r["layers"] == TINY.layers


def test_a_folder_without_a_mixtral_config_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert generate.main(["--checkpoint", str(tmp_path), "--impl", "dense", "--no-progress"]) == 1
    assert "not a Mixtral config: vocab_size" in capsys.readouterr().err


# --- on a GPU ------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(cuda_devices() == 0, reason="no NVIDIA GPU (libcuda.so.1 / cuDeviceGetCount)")
def test_gpu_flytune_in_the_model_agrees_with_ragged_dot(export_dir, tmp_path):
    try:
        flytune.load(export_dir, device="cuda:0")
    except flytune.TargetError as e:
        pytest.skip(f"the export is for another GPU: {e}")
    r = _run(tmp_path, "--impl", "ragged_dot,flytune,dense", "--export", str(export_dir), "--batch", "1,4",
             "--no-parts")
    for row in r["runs"][2:]:  # flytune and dense, each batch, against ragged_dot
        a = row["agreement"]
        assert a["logits_rel_l2"] < 3e-2 and a["tokens_equal_steps"] >= 4, (row["impl"], row["batch"], a)
    assert {x["impl"] for x in r["runs"]} == {"ragged_dot", "flytune", "dense"}


# --- traces --------------------------------------------------------------------------------------------------

def test_a_trace_summary_counts_busy_and_idle_time_per_process(tmp_path):
    import gzip
    from flytune.models import trace
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
              {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
              # the GPU: two kernels overlapping on two streams (0-10, 5-12), a gap, one more (20-25)
              {"ph": "X", "pid": 1, "tid": 7, "ts": 0, "dur": 10, "name": "gemm"},
              {"ph": "X", "pid": 1, "tid": 8, "ts": 5, "dur": 7, "name": "gemm"},
              {"ph": "X", "pid": 1, "tid": 7, "ts": 20, "dur": 5, "name": "flytune_moe1"},
              {"ph": "X", "pid": 2, "tid": 1, "ts": 0, "dur": 30, "name": "ExecuteOnStream"},
              {"ph": "i", "pid": 2, "tid": 1, "ts": 3, "name": "a marker without a duration"}]
    folder = tmp_path / "t" / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    with gzip.open(folder / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    s = trace.summary(str(tmp_path / "t"))
    gpu, host = sorted(s["processes"], key=lambda p: p["name"])
    assert gpu["name"] == "/device:GPU:0" and (gpu["events"], gpu["span_us"], gpu["busy_us"], gpu["idle_us"]) == \
        (3, 25.0, 17.0, 8.0)
    assert [(t["name"], t["count"], t["total_us"]) for t in gpu["top"]] == [("gemm", 2, 17.0), ("flytune_moe1", 1, 5.0)]
    assert (host["busy_us"], host["idle_us"]) == (30.0, 0.0)
    assert trace.summary(str(tmp_path / "none")) == {"file": None}


def test_the_driver_traces_the_decode_steps(tmp_path):
    r = _run(tmp_path, "--impl", "ragged_dot", "--no-parts", "--trace", str(tmp_path / "traces"))
    t = r["runs"][0]["trace"]
    assert t["steps"] == 8 and t["file"] and t["folder"].endswith("ragged_dot-B2-P16")
    assert sum(p["events"] for p in t["processes"]) > 0
