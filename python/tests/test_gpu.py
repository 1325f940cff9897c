"""On a GPU (marker gpu; skipped with the reason where there is no NVIDIA GPU): both bindings against a
float32 reference of the layer at several token counts and routings, inside a CUDA graph (torch) or an XLA
command buffer (JAX), under jit, vmap, shard_map and torch.compile.

The export: $FLYTUNE_EXPORT_DIR, else the tool's export of tests/data/tiny_forms.db (sm_90a: an H200).
Its first problem is tested; T = 1 and 5 read shuffled and tiled weights in the tiny export's plans.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, cuda_devices, framework

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cuda_devices() == 0, reason="no NVIDIA GPU (libcuda.so.1 / cuDeviceGetCount)")]

TOKENS = [1, 5, 16, 33, 100, 300, 1000]
ROUTINGS = ["uniform", "hot", "masked", "one-empty", "bad-ids"]
TOLERANCE = 2e-2  # relative L2; a wrong expert, layout or scale gives ~1


@pytest.fixture(scope="module")
def gpu_export(export_dir):
    import flytune
    try:
        return flytune.load(export_dir, device="cuda:0")
    except flytune.TargetError as e:
        pytest.skip(f"the export is for another GPU: {e}")


def routing(kind, tokens, experts, topk, seed):
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(experts, topk, replace=False) for _ in range(tokens)]).astype(np.int32)
    if kind == "hot":
        ids[:] = np.arange(topk)
    elif kind == "masked":
        ids[ids >= experts // 2] = -1
    elif kind == "one-empty":
        ids = np.stack([rng.choice(experts - 1, topk, replace=False) for _ in range(tokens)]).astype(np.int32)
    elif kind == "bad-ids":
        ids[::3, 0] = experts + 3  # left out by the layer (and counted as bad ids)
    weights = rng.random((tokens, topk)).astype(np.float32)
    return ids, weights


def inputs(problem, tokens, seed):
    rng = np.random.default_rng(seed + 1000)
    x = rng.standard_normal((tokens, problem.hidden)).astype(np.float32)
    w1 = (rng.standard_normal(problem.w1_shape) / np.sqrt(problem.hidden)).astype(np.float32)
    w2 = (rng.standard_normal(problem.w2_shape) / np.sqrt(problem.inter)).astype(np.float32)
    return x, w1, w2


def to_bf16(a):
    """Rounds float32 to bfloat16 (nearest even), returned as float32."""
    b = np.ascontiguousarray(a, np.float32).view(np.uint32)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.view(np.float32)


def reference(x, w1, w2, ids, weights):
    """y[t] = sum_s weights[t,s] * W2[e] (silu(W1g[e] x) * W1u[e] x), e = ids[t,s] in [0, E); fp32, with the
    intermediate rounded to 16 bits as the layer stores it. Inputs already rounded to the layer's dtype."""
    experts, two_inter, _ = w1.shape
    inter = two_inter // 2
    y = np.zeros((x.shape[0], w2.shape[1]), np.float32)
    for e in range(experts):
        t, s = np.nonzero(ids == e)
        if t.size == 0:
            continue
        g = x[t] @ w1[e, :inter].T
        u = x[t] @ w1[e, inter:].T
        h = to_bf16(g / (1 + np.exp(-g)) * u * weights[t, s][:, None])
        np.add.at(y, t, h @ w2[e].T)
    return y


def rel_l2(got, want):
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


# ---------------------------------------------------------------- torch

@pytest.fixture(scope="module")
def torch_mod():
    torch = framework("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
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
