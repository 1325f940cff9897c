"""The PyTorch Mixtral model (flytune.models.torch_mixtral) and its driver flytune-mixtral-torch on the tiny config,
on the CPU: the model against the JAX model on the same weights (which test_model.py holds to a float64
reference), the MoE implementations against each other and the per-token reference, prefill + decode against
the whole sequence, the driver end to end with every implementation -- flytune's on the CPU emulator -- and its
bad options.

Bounds (stated in docs/PYTHON.md, "The PyTorch model"):
- float32: the torch model's logits within 1e-5 relative L2 of the JAX model's on the same weights (prefill and
  two decode steps), grouped_mm (and its per-expert loop) and dense within 1e-5 of the per-token reference,
  prefill + decode within 1e-5 of the whole sequence's logits;
- bf16: the driver's implementations within 3e-2 of the first one's logits, greedy tokens equal for the first 4
  of the 9 generated (flytune-mixtral's bound);
- the CPU emulator (tiny_emu_bf16.db's export), flytune against grouped_mm, bf16: 3e-2 on the last logits, the
  greedy tokens equal for all 4 of prompt 5 + 3 steps; fp8 per-tensor (tiny_emu_fp8.db): 6e-2 and the first token.
"""
import json

import numpy as np
import pytest

from conftest import check_two_implementations, cuda_devices, framework, run_driver
from layer_reference import ref_moe, rel_l2

torch = framework("torch")
from flytune.models import config, generate, report, torch_generate, torch_mixtral as tm  # noqa: E402

TINY = config.TINY


@pytest.fixture(scope="module")
def f32_layer():
    return tm.random_layer(TINY, 3, 0, "cpu", torch.float32)


@pytest.mark.parametrize("impl, loop", [("grouped_mm", False), ("grouped_mm", True), ("dense", False)])
def test_moe_implementations_match_the_per_token_reference(impl, loop, f32_layer, monkeypatch):
    if loop:  # the fallback of a torch without torch._grouped_mm on this device
        monkeypatch.setitem(tm._GROUPED, ("cpu", torch.float32), "per-expert loop (forced by the test)")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, TINY.hidden)).astype(np.float32)
    ids = np.stack([rng.choice(TINY.experts, TINY.topk, replace=False) for _ in range(37)]).astype(np.int32)
    ids[:9] = 0  # one expert gets many rows, and (37 rows, 4 experts, top 2) some expert may get none
    ids[:9, 1] = 1
    w = rng.random((37, TINY.topk)).astype(np.float32)
    w1, w2 = f32_layer["w1"], f32_layer["w2"]
    want = ref_moe(x.astype(np.float64), ids, w, w1.double().numpy(), w2.double().numpy())
    e = tm.prepare(impl, w1, w2)
    got = tm.apply(impl, torch.from_numpy(x), torch.from_numpy(ids), torch.from_numpy(w), e)
    assert rel_l2(got.numpy(), want) < 1e-5
    wrong = tm.apply(impl, torch.from_numpy(x), torch.from_numpy((ids + 1) % TINY.experts), torch.from_numpy(w), e)
    assert rel_l2(wrong.numpy(), want) > 0.1


def test_the_grouped_backend_is_probed_once_and_named(monkeypatch):
    monkeypatch.setattr(tm, "_GROUPED", {})
    assert tm.grouped_mm_backend(torch.device("cpu"), torch.float32) == "torch._grouped_mm"  # torch 2.11 has it
    monkeypatch.setattr(tm, "_GROUPED", {})
    monkeypatch.delattr(torch, "_grouped_mm")
    assert tm.grouped_mm_backend(torch.device("cpu"), torch.bfloat16) == \
        f"per-expert loop (torch {torch.__version__} has no torch._grouped_mm)"


def test_the_torch_model_equals_the_jax_model_on_the_same_weights():
    jax = framework("jax")
    import jax.numpy as jnp
    from flytune.models import mixtral
    c = TINY
    params = tm.random_params(c, 5, "cpu", torch.float32)  # torch's, handed to JAX as they are
    jparams = {k: [{n: jnp.asarray(t.numpy()) for n, t in layer.items()} for layer in v] if k == "layers"
               else jnp.asarray(v.numpy()) for k, v in params.items()}
    experts = [tm.prepare("dense", p.pop("w1"), p.pop("w2")) for p in params["layers"]]
    back = tm.weights_from_jax(jparams, "cpu")  # the driver's way from JAX (DLPack): bit-exact
    assert torch.equal(back["embed"], params["embed"]) and torch.equal(back["layers"][1]["w1"], experts[1].w1)
    tokens = np.random.default_rng(6).integers(0, c.vocab, (2, 7)).astype(np.int32)
    jweights = [(p["w1"], p["w2"]) for p in jparams["layers"]]
    jforward = jax.jit(lambda t, cache, pos: mixtral.forward(c, "dense", jparams, jweights, t, cache, pos))
    jcache = mixtral.empty_cache(c, 2, 10, jnp.float32)
    cache = tm.empty_cache(c, 2, 10, "cpu", torch.float32)
    want, jcache = jforward(jnp.asarray(tokens), jcache, 0)
    got = tm.forward(c, "dense", params, experts, torch.from_numpy(tokens).long(), cache, 0)
    assert rel_l2(got.numpy(), np.asarray(want)) < 1e-5
    nxt = np.asarray(want).argmax(-1).astype(np.int32)[:, None]
    for pos in (7, 8):
        want, jcache = jforward(jnp.asarray(nxt), jcache, pos)
        got = tm.forward(c, "dense", params, experts, torch.from_numpy(nxt).long(), cache, pos)
        assert rel_l2(got.numpy(), np.asarray(want)) < 1e-5
        nxt = np.asarray(want).argmax(-1).astype(np.int32)[:, None]


def test_prefill_then_decode_equals_the_whole_sequence():
    c = TINY.with_layers(1)
    params = tm.random_params(c, 4, "cpu", torch.float32)
    experts = [tm.prepare("grouped_mm", p["w1"], p["w2"]) for p in params["layers"]]
    tokens = torch.from_numpy(np.random.default_rng(4).integers(0, c.vocab, (2, 10)))
    whole = tm.forward(c, "grouped_mm", params, experts, tokens, tm.empty_cache(c, 2, 16, "cpu", torch.float32), 0,
                       last_only=False)
    cache = tm.empty_cache(c, 2, 16, "cpu", torch.float32)
    tm.forward(c, "grouped_mm", params, experts, tokens[:, :7], cache, 0)
    steps = [tm.forward(c, "grouped_mm", params, experts, tokens[:, i:i + 1], cache, i) for i in range(7, 10)]
    assert rel_l2(torch.stack(steps, 1).numpy(), whole[:, 7:].numpy()) < 1e-5
    # a chunk of 3 after the prompt (the masked case: neither a prefill from 0 nor one token)
    cache = tm.empty_cache(c, 2, 16, "cpu", torch.float32)
    tm.forward(c, "grouped_mm", params, experts, tokens[:, :7], cache, 0)
    chunk = tm.forward(c, "grouped_mm", params, experts, tokens[:, 7:10], cache, 7, last_only=False)
    assert rel_l2(chunk.numpy(), whole[:, 7:].numpy()) < 1e-5
    # static shapes (pos a tensor: the whole cache masked by position, what a CUDA graph of the step replays),
    # on a cache whose rows past the prompt hold another sequence's values (the mask must hide them)
    cache = tm.empty_cache(c, 2, 16, "cpu", torch.float32)
    tm.forward(c, "grouped_mm", params, experts, tokens.flip(1), cache, 0)
    tm.forward(c, "grouped_mm", params, experts, tokens[:, :7], cache, 0)
    static = [tm.forward(c, "grouped_mm", params, experts, tokens[:, i:i + 1], cache, torch.tensor(i))
              for i in range(7, 10)]
    assert rel_l2(torch.stack(static, 1).numpy(), whole[:, 7:].numpy()) < 1e-5
    # a cache position off by one is far outside the bound
    cache = tm.empty_cache(c, 2, 16, "cpu", torch.float32)
    tm.forward(c, "grouped_mm", params, experts, tokens[:, :7], cache, 0)
    shifted = tm.forward(c, "grouped_mm", params, experts, tokens[:, 7:8], cache, 8)
    assert rel_l2(shifted.numpy(), whole[:, 7].numpy()) > 1e-3


def _run(tmp_path, *args, device="cpu"):
    return run_driver(torch_generate.main, tmp_path, "--device", device, *args)


def test_the_driver_runs_grouped_mm_and_dense_end_to_end_with_the_jax_drivers_keys(tmp_path):
    r = _run(tmp_path, "--impl", "grouped_mm,dense")
    check_two_implementations(r, "grouped_mm", "dense")
    experts = TINY.layers * 3 * TINY.experts * TINY.hidden * TINY.inter * 2
    assert r["moe_weight_bytes"] == {"grouped_mm": experts, "dense": experts}
    assert r["framework"] == "torch" and r["grouped_mm"] == "torch._grouped_mm" and r["notes"] == []
    assert r["weights"] == "random (seed 0, the JAX model's)" and r["jax"]
    # flytune-mixtral's keys (its smallest run), for scripts that read either driver's --json
    jax_run = tmp_path / "jax.json"
    assert generate.main(["--config", "tiny", "--batch", "1", "--prompt-len", "4", "--new-tokens", "1", "--repeats",
                          "1", "--impl", "dense", "--no-parts", "--json", str(jax_run), "--no-progress"]) == 0
    j = json.loads(jax_run.read_text())
    assert set(j) <= set(r), set(j) - set(r)
    assert set(j["runs"][0]) | {"parts"} == set(r["runs"][0])
    for phase in ("prefill", "decode"):
        assert set(r["runs"][0]["parts"][phase]) == {"attention_s", "moe_s", "layers_s", "rest_s"}


def test_the_driver_runs_flytune_on_the_cpu_emulator(tmp_path, emu_export_dir):
    r = _run(tmp_path, "--impl", "grouped_mm,flytune", "--export", str(emu_export_dir), "--batch", "1",
             "--prompt-len", "5", "--new-tokens", "3", "--no-parts")
    assert r["flytune_device"] == "emulate"
    a = r["runs"][1]["agreement"]
    assert r["runs"][1]["impl"] == "flytune" and a["vs"] == "grouped_mm"
    assert a["logits_rel_l2"] < 3e-2 and a["tokens_equal_steps"] == a["steps"] == 4, a
    # flytune holds the arranged copies its plans read and the plain weights they read, once: in this export every
    # plan reads w1 tiled (w1 is a stand-in of one element), T=1 w2 plain and T=8 w2 tiled
    import flytune
    e = flytune.load(emu_export_dir, device="none")
    key = e.problems[0].key
    one = {"w1": TINY.experts * 2 * TINY.inter * TINY.hidden * 2, "w2": TINY.experts * TINY.hidden * TINY.inter * 2}
    held = sum(one[n[:2]] for n in e.weight_copies(key)) + sum(one[n] if n in e.weights_read(key) else 2
                                                                for n in ("w1", "w2"))
    assert e.weights_read(key) == ["w2", "w1_tiled", "w2_tiled"], e.weights_read(key)
    assert r["moe_weight_bytes"]["flytune"] == TINY.layers * held
    assert r["speedups"] and r["speedups"][0]["decode"]["vs"] == "grouped_mm"


def test_the_driver_runs_the_fp8_model_with_flytune_on_the_cpu_emulator(tmp_path, emu_fp8_export_dir):
    r = _run(tmp_path, "--impl", "grouped_mm,flytune,dense", "--fp8", "--export", str(emu_fp8_export_dir), "--batch",
             "1", "--prompt-len", "5", "--new-tokens", "1", "--no-parts")
    assert r["experts"] == "e4m3 per-tensor" and [x["impl"] for x in r["runs"]] == ["grouped_mm", "flytune", "dense"]
    flytune_row, dense_row = r["runs"][1]["agreement"], r["runs"][2]["agreement"]
    assert flytune_row["logits_rel_l2"] < 6e-2 and flytune_row["tokens_equal_steps"] >= 1, flytune_row
    assert dense_row["logits_rel_l2"] < 3e-2, dense_row  # both dequantise the same codes
    codes = TINY.layers * 3 * TINY.experts * TINY.hidden * TINY.inter
    assert r["moe_weight_bytes"]["dense"] == codes + TINY.layers * 2 * TINY.experts * 4


def test_a_torch_without_grouped_mm_runs_the_loop_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tm, "_GROUPED", {})
    monkeypatch.delattr(torch, "_grouped_mm")
    r = _run(tmp_path, "--impl", "grouped_mm,dense", "--no-parts", "--weights", "torch")
    note = f"grouped_mm: per-expert loop (torch {torch.__version__} has no torch._grouped_mm)"
    assert r["grouped_mm"] == note.split(": ", 1)[1] and r["notes"] == [note]
    assert note in capsys.readouterr().out
    assert r["weights"] == "random (seed 0, torch)" and r["jax"] is None
    a = r["runs"][1]["agreement"]
    assert a["logits_rel_l2"] < 3e-2 and a["tokens_equal_steps"] >= 4, a


@pytest.mark.parametrize("args, message", [
    (["--fp8", "--dtype", "f32", "--impl", "dense"], "--fp8 takes bf16 activations"),
    (["--layers", "3", "--impl", "dense"], "--layers must be between 1 and 2 for this config, got 3"),
    (["--impl", "flytune"], "the flytune implementation needs --export DIR"),
    (["--impl", "dense", "--device", "cuda"], "--device cuda: torch sees no GPU"),
    (["--impl", "dense", "--device", "cpu", "--cuda-graph"], "--cuda-graph needs --device cuda (the model runs on cpu)"),
])
def test_bad_input_is_one_line_and_exit_1(capsys, args, message):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("torch sees a GPU")
    assert torch_generate.main(["--config", "tiny", "--no-progress", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("flytune-mixtral-torch: error: ") and message in err and "\n" not in err


def test_a_gpu_export_on_the_cpu_is_refused_in_one_line(capsys, export_dir):
    assert torch_generate.main(["--config", "tiny", "--no-progress", "--device", "cpu", "--impl", "flytune",
                                "--export", str(export_dir)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("flytune-mixtral-torch: error: ") and "not host libraries for the CPU emulator" in err
    assert "\n" not in err


@pytest.mark.parametrize("args", [["--impl", "ragged_dot"], ["--batch", "0"], ["--device", "tpu"],
                                  ["--weights", "numpy"]])
def test_usage_errors_exit_2(capsys, args):
    with pytest.raises(SystemExit) as e:
        torch_generate.main(["--config", "tiny", *args])
    assert e.value.code == 2


# --- on a GPU ------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(cuda_devices() == 0, reason="no NVIDIA GPU (libcuda.so.1 / cuDeviceGetCount)")
def test_gpu_the_driver_runs_every_implementation(export_dir, tmp_path):
    import flytune
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    try:
        flytune.load(export_dir, device="cuda:0")
    except flytune.TargetError as e:
        pytest.skip(f"the export is for another GPU: {e}")
    r = _run(tmp_path, "--impl", "grouped_mm,flytune,dense", "--export", str(export_dir), "--batch", "1,4",
             "--no-parts", device="cuda")
    assert {x["impl"] for x in r["runs"]} == {"grouped_mm", "flytune", "dense"} and r["flytune_device"] == "cuda:0"
    for row in r["runs"][2:]:  # flytune and dense, each batch, against grouped_mm
        a = row["agreement"]
        assert a["logits_rel_l2"] < 3e-2 and a["tokens_equal_steps"] >= 4, (row["impl"], row["batch"], a, r["notes"])


@pytest.mark.gpu
@pytest.mark.skipif(cuda_devices() == 0, reason="no NVIDIA GPU (libcuda.so.1 / cuDeviceGetCount)")
@pytest.mark.parametrize("impl", ["grouped_mm", "flytune"])
def test_gpu_the_decode_step_replayed_from_a_cuda_graph_is_the_eager_one(impl, export_dir):
    import flytune
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    try:
        export = flytune.load(export_dir, device="cuda:0") if impl == "flytune" else None
    except flytune.TargetError as e:
        pytest.skip(f"the export is for another GPU: {e}")
    dev = torch.device("cuda:0")
    params = tm.random_params(TINY, 2, dev, torch.bfloat16)
    params["lm_head"] = params["lm_head"].float()
    experts = [tm.prepare(impl, p.pop("w1"), p.pop("w2"), export) for p in params["layers"]]
    prompt = torch.from_numpy(np.random.default_rng(3).integers(0, TINY.vocab, (3, 6))).to(dev)
    # the same static step (a position tensor) run eagerly: the graph's replays must give its tokens exactly
    eager = torch_generate.Model(TINY, impl, params, experts, dev)
    nxt, _, cache = eager.prefill(prompt, 12)
    want = [nxt]
    for pos in range(6, 11):
        nxt, _ = eager.static_step(nxt, cache, torch.tensor(pos, device=dev))
        want.append(nxt)
    model = torch_generate.Model(TINY, impl, params, experts, dev, graph=True)
    for _ in range(2):  # the second prefill reuses the graph's cache and its captured step
        nxt, _, cache = model.prefill(prompt, 12)
        got = model.decode(nxt, cache, 6, 5, report.Progress(False), "test")[0]
        assert torch.equal(got, torch.stack(want, 1)), (got, want)
    assert len(model._graphs) == 1
