"""flytune.load(dir, device="emulate"): an export of `flytune search --emulate` (tests/data/tiny_fp8.db's host
libraries) opened on the CPU emulator, and JAX's CPU handler running its real kernels on host buffers, checked
against a dequantised float reference; a GPU export is refused with the runtime's message and the hint."""
import numpy as np
import pytest

import flytune
from conftest import framework

TOLERANCE = 2e-2  # relative L2, test_gpu.py's fp8 bound


@pytest.fixture(scope="module")
def emulated(fp8_export_dir):
    return flytune.load(fp8_export_dir, device="emulate")


def test_the_export_opens_on_the_emulator_and_says_so(emulated):
    assert emulated.device == "emulate" and emulated.emulated
    assert "CPU emulator" in repr(emulated) and emulated.target in repr(emulated)
    assert emulated.is_open_on("emulate")


def test_a_gpu_export_is_refused_on_the_emulator(export_dir):
    with pytest.raises(flytune.TargetError, match=r"the export holds cubin code objects for sm_90a, not host "
                                                  r"libraries for the CPU emulator .*flytune check-export --emulate"):
        flytune.load(export_dir, device="emulate")


def _case(jnp, problem, tokens, seed):
    """Per-tensor fp8 inputs: x, e4m3 weight codes with per-expert scales, x_scale, routing."""
    E, H, I, k = problem.experts, problem.hidden, problem.inter, problem.topk
    rng = np.random.default_rng(seed)
    x = np.asarray(jnp.asarray(rng.standard_normal((tokens, H)), jnp.bfloat16).astype(jnp.float32))
    w1 = rng.standard_normal((E, 2 * I, H)).astype(np.float32) / np.sqrt(H)
    w2 = rng.standard_normal((E, H, I)).astype(np.float32) / np.sqrt(I)
    s1 = (np.abs(w1).reshape(E, -1).max(1) / 448).astype(np.float32)
    s2 = (np.abs(w2).reshape(E, -1).max(1) / 448).astype(np.float32)
    c1 = jnp.asarray(w1 / s1[:, None, None]).astype(jnp.float8_e4m3fn)
    c2 = jnp.asarray(w2 / s2[:, None, None]).astype(jnp.float8_e4m3fn)
    xs = np.array([np.abs(x).max() / 448], np.float32)
    ids = np.stack([rng.permutation(E)[:k] for _ in range(tokens)]).astype(np.int32)
    ids[0, -1] = -1  # a slot routed nowhere
    tw = rng.random((tokens, k)).astype(np.float32)
    return x, c1, c2, s1, s2, xs, ids, tw


def _reference(jnp, x, c1, c2, s1, s2, xs, ids, tw):
    """reference.hpp's per-tensor rule in float64: x quantised with x_scale, weights code x scale, the
    intermediate quantised in 1 x 128 groups with scale amax / 448."""
    e4m3 = lambda a: np.asarray(jnp.asarray(a, jnp.float32).astype(jnp.float8_e4m3fn).astype(jnp.float32))  # noqa
    w1 = e4m3(c1.astype(jnp.float32)).astype(np.float64) * s1[:, None, None]
    w2 = e4m3(c2.astype(jnp.float32)).astype(np.float64) * s2[:, None, None]
    xq = e4m3(x / xs[0]).astype(np.float64) * xs[0]
    inter = w1.shape[1] // 2
    y = np.zeros((x.shape[0], w2.shape[1]))
    for t, s in zip(*np.nonzero(ids >= 0)):
        e = ids[t, s]
        g, u = w1[e, :inter] @ xq[t], w1[e, inter:] @ xq[t]
        h = (g / (1 + np.exp(-g)) * u * tw[t, s]).reshape(-1, 128)
        scale = np.maximum(np.abs(h).max(1, keepdims=True) / 448, 1e-30)
        y[t] += w2[e] @ (e4m3(h / scale) * scale).reshape(-1)
    return y


def _rel_l2(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize("tokens", [1, 5])
def test_jax_runs_the_fp8_layer_on_the_emulator(emulated, tokens):
    jax = framework("jax")
    import jax.numpy as jnp
    import flytune.jax as fj
    (p,) = [p for p in emulated.problems if p.scales == "per-tensor"]
    x, c1, c2, s1, s2, xs, ids, tw = _case(jnp, p, tokens, seed=tokens)
    want = _reference(jnp, x, c1, c2, s1, s2, xs, ids, tw)
    run = lambda w1_scales: np.asarray(fj.moe_layer(  # noqa: E731
        jnp.asarray(x, jnp.bfloat16), jnp.asarray(ids), jnp.asarray(tw),
        fj.prepare_weights(emulated, c1, c2, w1_scales=jnp.asarray(w1_scales), w2_scales=jnp.asarray(s2),
                           x_scale=jnp.asarray(xs))).astype(jnp.float32))
    y = run(s1)
    assert jax.devices()[0].platform == "cpu"
    assert _rel_l2(y, want) < TOLERANCE
    # The kernels read the scales: doubled w1 scales miss this reference.
    assert _rel_l2(run(2 * s1), want) > 10 * TOLERANCE
