"""On a GPU (marker gpu; skipped with the reason where there is no NVIDIA GPU): both bindings against a
float32 reference of the layer at several token counts and routings, inside a CUDA graph (torch) or an XLA
command buffer (JAX), under jit, vmap, shard_map and torch.compile.

The export: $FLYTUNE_EXPORT_DIR, else the tool's export of tests/data/tiny_forms.db (sm_90a: an H200).
Its first problem is tested; T = 1 and 5 read shuffled and tiled weights in the tiny export's plans.

fp8 (torch, and JAX with torch's inputs): $FLYTUNE_FP8_EXPORT_DIR, else the tool searches the tiny problem in fp8 on this GPU in every
scale mode (one database, ~45 s a mode) and exports it; each mode the export holds is run against a
dequantised fp32 reference, and with its weight scales doubled (a mutant the comparison must catch).
"""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, _flytune_bin, cuda_devices, framework
from layer_reference import (FP8_MODES, TOLERANCE, fp8_inputs, fp8_reference, inputs, inter_row_scales, reference,
                             rel_l2, routing, to_bf16, torch_fp8_close, torch_rel_l2)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cuda_devices() == 0, reason="no NVIDIA GPU (libcuda.so.1 / cuDeviceGetCount)")]

TOKENS = [1, 5, 16, 33, 100, 300, 1000]
ROUTINGS = ["uniform", "hot", "masked", "one-empty", "bad-ids"]


@pytest.fixture(scope="module")
def gpu_export(export_dir):
    import flytune
    try:
        return flytune.load(export_dir, device="cuda:0")
    except flytune.TargetError as e:
        pytest.skip(f"the export is for another GPU: {e}")


# ---------------------------------------------------------------- torch

@pytest.fixture(scope="module")
def torch_mod():
    torch = framework("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    import flytune.torch  # noqa: F401  registers torch.ops.flytune, whichever tests are selected
    return torch


def _torch_case(torch, problem, tokens, kind, seed=0):
    x, w1, w2 = (to_bf16(a) for a in inputs(problem, tokens, seed))
    ids, weights = routing(kind, tokens, problem.experts, problem.topk, seed)
    dev = "cuda"
    t = lambda a, dt: torch.from_numpy(a).to(dev, dt)  # noqa: E731
    args = (t(x, torch.bfloat16), t(w1, torch.bfloat16), t(w2, torch.bfloat16), t(weights, torch.float32),
            t(ids, torch.int64))
    return args, reference(x, w1, w2, np.where((ids >= 0) & (ids < problem.experts), ids, -1), weights)


@pytest.mark.parametrize("kind", ROUTINGS)
@pytest.mark.parametrize("tokens", TOKENS)
def test_torch_fused_experts_matches_the_reference(torch_mod, gpu_export, tokens, kind):
    import flytune.torch as ftt
    p = gpu_export.problems[0]
    args, want = _torch_case(torch_mod, p, tokens, kind, seed=tokens)
    y = ftt.fused_experts(*args, export=gpu_export)
    torch_mod.cuda.synchronize()
    assert rel_l2(y.float().cpu().numpy(), want) < TOLERANCE


def test_torch_in_a_cuda_graph(torch_mod, gpu_export):
    import flytune.torch as ftt
    torch = torch_mod
    p = gpu_export.problems[0]
    args, _ = _torch_case(torch, p, 33, "uniform", seed=1)
    static = [a.clone() for a in args]
    ftt.prepare_weights(static[1], static[2], gpu_export)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ftt.fused_experts(*static, export=gpu_export)  # warm-up: plans and arranged copies exist before capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ftt.fused_experts(*static, export=gpu_export)
    for seed in (2, 3):
        new, want = _torch_case(torch, p, 33, "masked" if seed == 3 else "uniform", seed=seed)
        static[0].copy_(new[0]), static[3].copy_(new[3]), static[4].copy_(new[4])
        # the weights are the graph's: keep them, recompute the reference with them
        x = new[0].float().cpu().numpy()
        w1, w2 = static[1].float().cpu().numpy(), static[2].float().cpu().numpy()
        ids = new[4].cpu().numpy()
        want = reference(x, w1, w2, ids, new[3].cpu().numpy())
        graph.replay()
        torch.cuda.synchronize()
        assert rel_l2(out.float().cpu().numpy(), want) < TOLERANCE


def test_torch_compile(torch_mod, gpu_export):
    import flytune.torch as ftt
    torch = torch_mod
    p = gpu_export.problems[0]
    layer = torch.compile(lambda *a: ftt.fused_experts(*a, export=gpu_export) + 0, fullgraph=True)
    for tokens in (7, 64):
        args, want = _torch_case(torch, p, tokens, "uniform", seed=tokens)
        y = layer(*args)
        torch.cuda.synchronize()
        assert rel_l2(y.float().cpu().numpy(), want) < TOLERANCE


def test_torch_expert_map(torch_mod, gpu_export):
    # Expert parallelism as vLLM passes it: global ids, and a map to this rank's local ids (-1 elsewhere).
    import flytune.torch as ftt
    torch = torch_mod
    p = gpu_export.problems[0]
    args, _ = _torch_case(torch, p, 50, "uniform", seed=5)
    global_ids = args[4] + p.experts  # this rank holds global experts [E, 2E)
    global_ids[::2, 0] = 0            # an expert of another rank
    expert_map = torch.full((2 * p.experts,), -1, dtype=torch.int32, device="cuda")
    expert_map[p.experts:] = torch.arange(p.experts, dtype=torch.int32, device="cuda")
    y = ftt.fused_experts(args[0], args[1], args[2], args[3], global_ids, expert_map=expert_map,
                          global_num_experts=2 * p.experts, export=gpu_export)
    local = np.where(global_ids.cpu().numpy() >= p.experts, global_ids.cpu().numpy() - p.experts, -1)
    want = reference(args[0].float().cpu().numpy(), args[1].float().cpu().numpy(), args[2].float().cpu().numpy(),
                     local, args[3].cpu().numpy())
    assert rel_l2(y.float().cpu().numpy(), want) < TOLERANCE


# ---------------------------------------------------------------- torch, fp8

@pytest.fixture(scope="module")
def fp8_export(torch_mod, tmp_path_factory):
    import flytune
    given = os.environ.get("FLYTUNE_FP8_EXPORT_DIR")
    if given:
        path = pathlib.Path(given)
    else:
        tmp = tmp_path_factory.mktemp("fp8")
        db, path = tmp / "fp8.db", tmp / "export"
        for mode in FP8_MODES:
            subprocess.run([str(_flytune_bin()), "search", "--problem", "tiny", "--dtype", "fp8", "--scales", mode,
                            "--tokens", "1,16,128", "--db", str(db), "--seed", "42"], check=True,
                           capture_output=True, text=True, timeout=300)
        subprocess.run([str(_flytune_bin()), "export", "--db", str(db), "--out", str(path), "--check", "none"],
                       check=True, capture_output=True, text=True, timeout=120)
    try:
        return flytune.load(path, device="cuda:0")
    except flytune.TargetError as e:
        pytest.skip(f"the fp8 export is for another GPU: {e}")


def _fp8_problem(export, mode):
    found = [p for p in export.problems if p.scales == mode]
    if not found:
        pytest.skip(f"the fp8 export has no {mode} problem ({', '.join(p.key for p in export.problems)})")
    return found[0]


@pytest.mark.parametrize("kind", ["uniform", "masked"])
@pytest.mark.parametrize("tokens", [1, 5, 33, 300])
@pytest.mark.parametrize("mode", FP8_MODES)
def test_torch_fp8_matches_the_dequantised_reference(torch_mod, fp8_export, mode, tokens, kind):
    torch = torch_mod
    p = _fp8_problem(fp8_export, mode)
    x, w1, w2, ids, weights, scales = fp8_inputs(torch, p, tokens, kind, seed=tokens)
    rows = inter_row_scales(fp8_export, p, tokens)
    want = fp8_reference(torch, p, x, w1, w2, ids, weights, scales, rows)
    codes = (w1, w2) if tokens != 5 else (w1.view(torch.uint8), w2.view(torch.uint8))  # uint8 codes serve too
    y = torch.ops.flytune.moe_layer(x, *codes, weights, ids, fp8_export.key, **scales)
    torch.cuda.synchronize()
    assert y.dtype == torch.bfloat16
    assert torch_fp8_close(y, want), torch_rel_l2(y, want)
    if float(want.norm()) == 0:  # every slot masked: nothing for a mutant to change
        return
    # the mutant: every scale doubled (weights twice as large) must not pass
    doubled = {n: 2 * s for n, s in scales.items()}
    y2 = torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, fp8_export.key, **doubled)
    torch.cuda.synchronize()
    assert torch_rel_l2(y2, want) > 0.5
    assert not torch_fp8_close(y2, want)
    assert torch_fp8_close(y2, fp8_reference(torch, p, x, w1, w2, ids, weights, doubled, rows))


def test_torch_fp8_in_a_cuda_graph(torch_mod, fp8_export):
    torch = torch_mod
    modes = [q.scales for q in fp8_export.problems if q.fp8]
    p = _fp8_problem(fp8_export, "block128" if "block128" in modes else (modes or ["per-tensor"])[0])
    x, w1, w2, ids, weights, scales = fp8_inputs(torch, p, 33, "uniform", seed=1)
    layer = lambda: torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, fp8_export.key, **scales)  # noqa: E731
    layer()  # warm-up: the plan and any arranged copies exist before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer()
    for seed in (2, 3):
        new = fp8_inputs(torch, p, 33, "masked" if seed == 3 else "uniform", seed=seed)
        x.copy_(new[0]), ids.copy_(new[3]), weights.copy_(new[4])
        graph.replay()
        torch.cuda.synchronize()
        assert torch_fp8_close(out, fp8_reference(torch, p, x, w1, w2, ids, weights, scales,
                                                   inter_row_scales(fp8_export, p, 33)))


# ---------------------------------------------------------------- JAX

@pytest.fixture(scope="module")
def jax_mod():
    jax = framework("jax")
    try:
        if not jax.devices("gpu"):
            raise RuntimeError("none")
    except RuntimeError as e:
        pytest.skip(f"JAX has no GPU backend ({e}): install jax[cuda12] / jax[cuda13]")
    return jax


def _jax_case(jnp, problem, tokens, kind, seed=0):
    x, w1, w2 = (to_bf16(a) for a in inputs(problem, tokens, seed))
    ids, weights = routing(kind, tokens, problem.experts, problem.topk, seed)
    want = reference(x, w1, w2, np.where((ids >= 0) & (ids < problem.experts), ids, -1), weights)
    return (jnp.asarray(x, jnp.bfloat16), jnp.asarray(ids), jnp.asarray(weights),
            jnp.asarray(w1, jnp.bfloat16), jnp.asarray(w2, jnp.bfloat16)), want


@pytest.mark.parametrize("kind", ROUTINGS)
@pytest.mark.parametrize("tokens", TOKENS)
def test_jax_jit_matches_the_reference(jax_mod, gpu_export, tokens, kind):
    import jax.numpy as jnp
    import flytune.jax as fj
    p = gpu_export.problems[0]
    (x, ids, weights, w1, w2), want = _jax_case(jnp, p, tokens, kind, seed=tokens)
    moe = fj.prepare_weights(gpu_export, w1, w2)
    y = jax_mod.jit(fj.moe_layer)(x, ids, weights, moe)
    assert rel_l2(np.asarray(y, np.float32), want) < TOLERANCE


def test_jax_vmap(jax_mod, gpu_export):
    import jax.numpy as jnp
    import flytune.jax as fj
    p = gpu_export.problems[0]
    cases = [_jax_case(jnp, p, 9, kind, seed=20 + i) for i, kind in enumerate(("uniform", "masked", "hot"))]
    x = jnp.stack([c[0][0] for c in cases])
    ids = jnp.stack([c[0][1] for c in cases])
    weights = jnp.stack([c[0][2] for c in cases])
    # one set of weights for all: recompute the references with the first case's
    w1, w2 = cases[0][0][3], cases[0][0][4]
    moe = fj.prepare_weights(gpu_export, w1, w2)
    y = jax_mod.jit(jax_mod.vmap(fj.moe_layer, in_axes=(0, 0, 0, None)))(x, ids, weights, moe)
    for b in range(3):
        want = reference(np.asarray(x[b], np.float32), np.asarray(w1, np.float32), np.asarray(w2, np.float32),
                         np.asarray(ids[b]), np.asarray(weights[b]))
        assert rel_l2(np.asarray(y[b], np.float32), want) < TOLERANCE


def test_jax_shard_map_over_tokens(jax_mod, gpu_export):
    import jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec as P
    import flytune.jax as fj
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    devices = jax_mod.devices("gpu")
    p = gpu_export.problems[0]
    tokens = 24 * len(devices)
    (x, ids, weights, w1, w2), want = _jax_case(jnp, p, tokens, "uniform", seed=7)
    moe = fj.prepare_weights(gpu_export, w1, w2)
    mesh = Mesh(np.array(devices), ("tokens",))
    layer = shard_map(lambda a, b, c, m: fj.moe_layer(a, b, c, m), mesh=mesh,
                      in_specs=(P("tokens"), P("tokens"), P("tokens"), P()), out_specs=P("tokens"))
    y = jax_mod.jit(layer)(x, ids, weights, moe)
    assert rel_l2(np.asarray(y, np.float32), want) < TOLERANCE


@pytest.mark.parametrize("mode", FP8_MODES)
def test_jax_fp8_matches_the_dequantised_reference(jax_mod, torch_mod, fp8_export, mode):
    # The torch test's inputs and reference, the codes handed to JAX as uint8 (bit-exact).
    import jax.numpy as jnp
    import flytune.jax as fj
    torch = torch_mod
    p = _fp8_problem(fp8_export, mode)
    x, w1, w2, ids, weights, scales = fp8_inputs(torch, p, 33, "masked", seed=4)
    want = fp8_reference(torch, p, x, w1, w2, ids, weights, scales, inter_row_scales(fp8_export, p, 33)).cpu().numpy()
    host = lambda t: t.cpu().numpy()  # noqa: E731
    moe = fj.prepare_weights(fp8_export, jnp.asarray(host(w1.view(torch.uint8))),
                             jnp.asarray(host(w2.view(torch.uint8))),
                             **{n: jnp.asarray(host(s)) for n, s in scales.items()})
    y = jax_mod.jit(fj.moe_layer)(jnp.asarray(host(x.float()), jnp.bfloat16), jnp.asarray(host(ids)),
                                  jnp.asarray(host(weights)), moe)
    assert torch_fp8_close(torch.from_numpy(np.asarray(y, np.float32)), torch.from_numpy(want))


SCRIPT = r"""
import sys, numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, {tests!r})
import test_gpu as t, flytune, flytune.jax as fj
e = flytune.load({export!r}, device="cuda:0")
p = e.problems[0]
worst = 0.0
for tokens, kind in ((5, "uniform"), (33, "masked"), (300, "hot")):
    (x, ids, w, w1, w2), want = t._jax_case(jnp, p, tokens, kind, seed=tokens)
    moe = fj.prepare_weights(e, w1, w2)
    f = jax.jit(lambda a, b, c, m: fj.moe_layer(a, b, c, m) * 1)
    for _ in range(3):  # the first run records the command buffer, the later ones replay it
        y = f(x, ids, w, moe)
    worst = max(worst, t.rel_l2(np.asarray(y, np.float32), want))
print("worst rel L2", worst)
assert worst < t.TOLERANCE
"""


def test_jax_in_an_xla_command_buffer(jax_mod, export_dir):
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "") +
               " --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1",
               XLA_PYTHON_CLIENT_PREALLOCATE="false")
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(tests=str(REPO / "python" / "tests"),
                                                            export=str(export_dir))],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]


# ---------------------------------------------------------------- training (the backward)

@pytest.fixture(scope="module")
def train_export(tmp_path_factory):
    """An export with backward buckets: $FLYTUNE_TRAIN_EXPORT_DIR, else the tiny problem searched on this GPU with
    both passes (`flytune search --problem tiny --pass both --budget 2`) and exported."""
    import flytune
    given = os.environ.get("FLYTUNE_TRAIN_EXPORT_DIR")
    if given:
        path = pathlib.Path(given)
    else:
        tmp = tmp_path_factory.mktemp("train")
        db, path = tmp / "train.db", tmp / "export"
        subprocess.run([str(_flytune_bin()), "search", "--problem", "tiny", "--pass", "both", "--budget", "2",
                        "--tokens", "1,16,128", "--db", str(db), "--seed", "42"], check=True, capture_output=True,
                       text=True, timeout=600)
        subprocess.run([str(_flytune_bin()), "export", "--db", str(db), "--out", str(path), "--check", "none"],
                       check=True, capture_output=True, text=True, timeout=120)
    try:
        export = flytune.load(path, device="cuda:0")
    except flytune.TargetError as e:
        pytest.skip(f"the training export is for another GPU: {e}")
    if not any(p.has_backward for p in export.problems):
        pytest.fail(f"the training export {path} has no backward buckets")
    return export


TRAIN_CASES = [(1, "uniform"), (33, "ragged"), (300, "masked"), (1000, "one-empty")]


@pytest.mark.parametrize("tokens, kind", TRAIN_CASES)
def test_torch_autograd_matches_the_float32_reference(torch_mod, train_export, tokens, kind):
    from layer_reference import GRAD_NAMES, grad_case, torch_layer_fp32
    torch = torch_mod
    p = next(q for q in train_export.problems if q.has_backward)
    case = grad_case(p, tokens, kind, seed=tokens)
    x, w1, w2, ids, weights, dy = (torch.from_numpy(a).cuda() for a in case)
    leaves = [t.clone().requires_grad_() for t in (x, w1, w2, weights)]
    want = torch.autograd.grad(torch_layer_fp32(torch, leaves[0], leaves[1], leaves[2], ids, leaves[3]), leaves, dy)
    got_leaves = [t.to(dt).requires_grad_() for t, dt in zip((x, w1, w2, weights), (torch.bfloat16,) * 3 +
                                                             (torch.float32,))]
    y = torch.ops.flytune.moe_layer(*got_leaves, ids.to(torch.int32), train_export.key)
    got = torch.autograd.grad(y, got_leaves, dy.bfloat16())
    for name, g, w in zip(GRAD_NAMES, got, want):
        assert torch_rel_l2(g, w) < TOLERANCE, (name, torch_rel_l2(g, w))


@pytest.mark.parametrize("tokens, kind", TRAIN_CASES)
def test_jax_grad_matches_the_float32_reference(jax_mod, train_export, tokens, kind):
    import jax.numpy as jnp
    import flytune.jax as fj
    from layer_reference import grad_case, jax_layer_fp32
    jax = jax_mod
    p = next(q for q in train_export.problems if q.has_backward)
    x, w1, w2, ids, weights, dy = grad_case(p, tokens, kind, seed=tokens)
    ref = lambda *a: jnp.sum(jax_layer_fp32(jnp, a[0], a[1], a[2], jnp.asarray(ids), a[3]) * dy)  # noqa: E731
    want = jax.grad(ref, argnums=(0, 1, 2, 3))(x, w1, w2, weights)

    def loss(x, w1, w2, tw):
        y = fj.moe_layer(x, jnp.asarray(ids), tw, fj.prepare_weights(train_export, w1, w2, trainable=True))
        return jnp.sum(y.astype(jnp.float32) * dy)
    bf16 = lambda a: jnp.asarray(a, jnp.bfloat16)  # noqa: E731
    got = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(bf16(x), bf16(w1), bf16(w2), jnp.asarray(weights))
    for g, w in zip(got, want):
        assert rel_l2(np.asarray(g, np.float32), np.asarray(w)) < TOLERANCE
