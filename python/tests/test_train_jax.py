"""Training through flytune.jax without a GPU: jax.grad of moe_layer (its jax.custom_vjp, the typed FFI target
flytune_moe_layer_backward on JAX's CPU platform) running the real backward kernels of an emulated export with
backward buckets (conftest's emu_train_export_dir: tests/data/tiny_emu_train.db, from `flytune search --emulate
--pass both`), against jax.grad of a float32 reference of the layer (layer_reference.jax_layer_fp32, jitted) on
fresh inputs: ragged counts with an empty expert and -1 ids, T not a multiple of any tile, T above the largest
backward bucket, under jit and vmap; a mutant routing must miss the reference. The weight gradients' dtype: the
weights', written so by the kernels (the FFI call's dW results in bf16, nothing cast) on an export searched by this
flytune (conftest's emu_train16_export_dir), and written in float32 and cast, with one
Fp32WeightGradientsWarning, on the committed export, whose kernels predate that. Refusals: an export without
backward buckets, fp8 layers, weights without their plain w1 / w2 -- one line each, at trace time."""
import re
import warnings

import numpy as np
import pytest

from conftest import framework
from layer_reference import GRAD_NAMES, TOLERANCE, grad_case, jax_layer_fp32, rel_l2

jax = framework("jax")
import jax.numpy as jnp  # noqa: E402

import flytune  # noqa: E402
import flytune.jax as fj  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::flytune.CoverageWarning")  # T = 13 above the largest bucket, 9


@pytest.fixture(scope="module")
def emu_train(emu_train_export_dir):
    return flytune.load(emu_train_export_dir, device="emulate")


def _arrays(case):
    x, w1, w2, ids, weights, dy = case
    bf16 = lambda a: jnp.asarray(a, jnp.bfloat16)  # noqa: E731
    return bf16(x), jnp.asarray(ids), jnp.asarray(weights), bf16(w1), bf16(w2), bf16(dy)


# jax.grad of the float32 layer under jit: one XLA compile per shape, where eagerly every primitive of the
# forward and the backward was one (130 compiles, two thirds of this file's time on two cores).
_REFERENCE_GRAD = jax.jit(jax.grad(lambda x, w1, w2, tw, ids, dy: jnp.sum(jax_layer_fp32(jnp, x, w1, w2, ids, tw) * dy),
                                   argnums=(0, 1, 2, 3)))


def _reference_grads(case):
    """jax.grad of the float32 layer: d(sum(y * dy)) for x, w1, w2, topk_weights."""
    x, w1, w2, ids, weights, dy = case
    return [np.asarray(g) for g in _REFERENCE_GRAD(x, w1, w2, weights, jnp.asarray(ids), dy)]


def _flytune_grads(export, x, ids, tw, w1, w2, dy, jit=True):
    """jax.grad of sum(moe_layer(...) * dy) for x, w1, w2, topk_weights, with prepare_weights inside the
    differentiated function (the arranged copies under stop_gradient, the plain weights kept)."""
    def loss(x, w1, w2, tw):
        y = fj.moe_layer(x, ids, tw, fj.prepare_weights(export, w1, w2, trainable=True))
        return jnp.sum(y.astype(jnp.float32) * dy.astype(jnp.float32))
    grad = jax.grad(loss, argnums=(0, 1, 2, 3))
    return (jax.jit(grad) if jit else grad)(x, w1, w2, tw)


def _check(got, want, context):
    for name, g, w in zip(GRAD_NAMES, got, want):
        assert g.shape == w.shape, (context, name, g.shape, w.shape)
        assert rel_l2(np.asarray(g, np.float32), w) < TOLERANCE, (context, name, rel_l2(np.asarray(g, np.float32), w))


def test_the_export_has_backward_buckets(emu_train):
    (p,) = emu_train.problems
    assert p.has_backward and p.dtype == "bf16"
    plan = emu_train.plan(p.key, 5)
    assert plan["backward"]["available"] and plan["backward"]["bucket"] == 9
    assert set(plan["backward"]["scratch"]["bytes"]) == {"saved_gate_up", "saved_inter", "workspace"}
    # the saved tensors: [T*k, 2I] and [T*k, I] in bf16
    assert plan["backward"]["scratch"]["bytes"]["saved_gate_up"] == 5 * 2 * 2 * p.inter * 2
    assert plan["backward"]["scratch"]["bytes"]["saved_inter"] == 5 * 2 * p.inter * 2


@pytest.mark.parametrize("tokens, kind", [(1, "uniform"), (7, "ragged"), (9, "masked"), (13, "one-empty")])
def test_jax_grad_matches_the_float32_reference(emu_train, tokens, kind):
    p = emu_train.problems[0]
    case = grad_case(p, tokens, kind, seed=tokens)
    x, ids, tw, w1, w2, dy = _arrays(case)
    got = _flytune_grads(emu_train, x, ids, tw, w1, w2, dy)
    assert [g.dtype for g in got] == [jnp.bfloat16, jnp.bfloat16, jnp.bfloat16, jnp.float32]
    want = _reference_grads(case)
    _check(got, want, (tokens, kind))
    if kind == "masked":  # slots routed nowhere get no d(topk_weights)
        assert np.all(np.asarray(got[3])[case[3] < 0] == 0)
    # the mutant: every token's experts shifted by one must miss the reference's gradients
    wrong = jnp.where(ids >= 0, (ids + 1) % p.experts, ids)
    bad = _flytune_grads(emu_train, x, wrong, tw, w1, w2, dy)
    assert max(rel_l2(np.asarray(g, np.float32), w) for g, w in zip(bad, want)) > 10 * TOLERANCE


@pytest.fixture(scope="module")
def emu_train16(emu_train16_export_dir):
    return flytune.load(emu_train16_export_dir, device="emulate")


def _backward_results(export, x, ids, tw, w1, w2, dy):
    """The result types of the backward's FFI call in the lowered jax.grad (dx, dw1, dw2, d_topk_weights,
    scratch), and the whole program's text."""
    def loss(x, w1, w2, tw):
        y = fj.moe_layer(x, ids, tw, fj.prepare_weights(export, w1, w2, trainable=True))
        return jnp.sum(y.astype(jnp.float32) * dy.astype(jnp.float32))
    text = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(x, w1, w2, tw).as_text()
    (call,) = [line for line in text.splitlines() if "custom_call @flytune_moe_layer_backward" in line]
    return re.search(r"-> \((.*)\)$", call).group(1).split(", "), text


@pytest.mark.parametrize("tokens, kind", [(1, "uniform"), (9, "masked"), (13, "one-empty")])
def test_weight_gradients_come_in_the_weights_dtype_from_the_kernels(emu_train16, tokens, kind):
    p = emu_train16.problems[0]
    assert emu_train16.plan(p.key, tokens)["backward"]["dw16"]  # searched by this flytune: kgrouped_args_bytes 96
    case = grad_case(p, tokens, kind, seed=40 + tokens)
    x, ids, tw, w1, w2, dy = _arrays(case)
    (E, two_i, H), inter = w1.shape, w2.shape[2]
    with warnings.catch_warnings():
        warnings.simplefilter("error", flytune.Fp32WeightGradientsWarning)
        results, text = _backward_results(emu_train16, x, ids, tw, w1, w2, dy)
        got = _flytune_grads(emu_train16, x, ids, tw, w1, w2, dy)
    # The call's dW results are bf16 (the handler passes them as ft_layer_grads' dw1_16, dw2_16): no float32 dW
    # anywhere in the program, so nothing is cast.
    assert results[:4] == [f"tensor<{tokens}x{H}xf32>", f"tensor<{E}x{two_i}x{H}xbf16>",
                           f"tensor<{E}x{H}x{inter}xbf16>", f"tensor<{tokens}x{p.topk}xf32>"], results
    assert f"tensor<{E}x{two_i}x{H}xf32>" not in text and f"tensor<{E}x{H}x{inter}xf32>" not in text
    assert [g.dtype for g in got] == [jnp.bfloat16, jnp.bfloat16, jnp.bfloat16, jnp.float32]
    want = _reference_grads(case)
    _check(got, want, ("16-bit dW", tokens, kind))
    wrong = jnp.where(ids >= 0, (ids + 1) % p.experts, ids)
    bad = _flytune_grads(emu_train16, x, wrong, tw, w1, w2, dy)
    assert max(rel_l2(np.asarray(g, np.float32), w) for g, w in zip(bad[1:3], want[1:3])) > 10 * TOLERANCE


def test_kernels_that_predate_16_bit_weight_gradients_give_float32_cast_and_say_so(emu_train_export_dir):
    export = flytune.load(emu_train_export_dir, device="emulate")  # an Export of its own: nothing warned yet
    p = export.problems[0]
    assert not export.plan(p.key, 5)["backward"]["dw16"]  # an earlier flytune compiled the committed kernels
    case = grad_case(p, 5, "ragged", seed=12)
    x, ids, tw, w1, w2, dy = _arrays(case)
    (E, two_i, H), inter = w1.shape, w2.shape[2]
    with pytest.warns(flytune.Fp32WeightGradientsWarning,
                      match=r"\(bucket 9\) predate the 16-bit weight gradients: dW1 and dW2 are written in float32 "
                            r"and cast to the weights' dtype"):
        got = _flytune_grads(export, x, ids, tw, w1, w2, dy)
    assert [g.dtype for g in got] == [jnp.bfloat16, jnp.bfloat16, jnp.bfloat16, jnp.float32]
    _check(got, _reference_grads(case), "float32 dW, cast")
    with warnings.catch_warnings():  # once per (problem, backward bucket)
        warnings.simplefilter("error", flytune.Fp32WeightGradientsWarning)
        results, _ = _backward_results(export, x, ids, tw, w1, w2, dy)
    assert results[1:3] == [f"tensor<{E}x{two_i}x{H}xf32>", f"tensor<{E}x{H}x{inter}xf32>"], results


def test_grad_of_moe_weights_goes_to_the_plain_weights(emu_train):
    # jax.grad with respect to the MoeWeights pytree: the plain w1 / w2 get the gradients, the arranged copies none.
    p = emu_train.problems[0]
    case = grad_case(p, 5, "ragged", seed=11)
    x, ids, tw, w1, w2, dy = _arrays(case)
    moe = fj.prepare_weights(emu_train, w1, w2, trainable=True)
    assert moe.w1 is not None and moe.w2 is not None
    g = jax.jit(jax.grad(lambda m: jnp.sum(fj.moe_layer(x, ids, tw, m).astype(jnp.float32) * dy)))(moe)
    want = _reference_grads(case)
    assert rel_l2(np.asarray(g.w1, np.float32), want[1]) < TOLERANCE
    assert rel_l2(np.asarray(g.w2, np.float32), want[2]) < TOLERANCE
    for name in ("w1_shuffled", "w2_shuffled", "w1_tiled", "w2_tiled"):
        copy = getattr(g, name)
        assert copy is None or not np.any(np.asarray(copy, np.float32)), name


def test_eager_grad_and_value_and_grad(emu_train):
    p = emu_train.problems[0]
    case = grad_case(p, 3, "uniform", seed=3)
    x, ids, tw, w1, w2, dy = _arrays(case)
    _check(_flytune_grads(emu_train, x, ids, tw, w1, w2, dy, jit=False), _reference_grads(case), "eager")
    moe = fj.prepare_weights(emu_train, w1, w2, trainable=True)
    value, dx = jax.value_and_grad(lambda x: jnp.sum(fj.moe_layer(x, ids, tw, moe).astype(jnp.float32) * dy))(x)
    assert value == pytest.approx(float(jnp.sum(fj.moe_layer(x, ids, tw, moe).astype(jnp.float32) * dy)))
    assert dx.shape == x.shape


def test_vmap_of_grad_gives_per_example_gradients_and_grad_of_vmap_their_sum(emu_train):
    p = emu_train.problems[0]
    cases = [grad_case(p, 6, kind, seed=30 + i) for i, kind in enumerate(("uniform", "ragged", "masked"))]
    x = jnp.stack([_arrays(c)[0] for c in cases])
    ids = jnp.stack([_arrays(c)[1] for c in cases])
    tw = jnp.stack([_arrays(c)[2] for c in cases])
    dy = jnp.stack([_arrays(c)[5] for c in cases])
    w1, w2 = _arrays(cases[0])[3], _arrays(cases[0])[4]  # one set of weights for every example
    shared = [(c[0], cases[0][1], cases[0][2], c[3], c[4], c[5]) for c in cases]
    want = [_reference_grads(c) for c in shared]

    def loss(x, ids, tw, dy, w1, w2):
        y = fj.moe_layer(x, ids, tw, fj.prepare_weights(emu_train, w1, w2, trainable=True))
        return jnp.sum(y.astype(jnp.float32) * dy.astype(jnp.float32))

    per_example = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 4, 5, 2)), in_axes=(0, 0, 0, 0, None, None)))
    dx, dw1, dw2, dtw = per_example(x, ids, tw, dy, w1, w2)
    assert dw1.shape == (3,) + w1.shape
    for b in range(3):
        _check((dx[b], dw1[b], dw2[b], dtw[b]), want[b], ("per example", b))
    batched = lambda *a: jnp.sum(jax.vmap(loss, in_axes=(0, 0, 0, 0, None, None))(*a))  # noqa: E731
    dx, dw1, dw2, dtw = jax.jit(jax.grad(batched, argnums=(0, 4, 5, 2)))(x, ids, tw, dy, w1, w2)
    assert dw1.shape == w1.shape and dx.shape == x.shape
    for b in range(3):
        assert rel_l2(np.asarray(dx[b], np.float32), want[b][0]) < TOLERANCE
        assert rel_l2(np.asarray(dtw[b]), want[b][3]) < TOLERANCE
    assert rel_l2(np.asarray(dw1, np.float32), sum(w[1] for w in want)) < TOLERANCE
    assert rel_l2(np.asarray(dw2, np.float32), sum(w[2] for w in want)) < TOLERANCE


def test_the_backward_lowers_to_its_typed_ffi_call(emu_train):
    p = emu_train.problems[0]
    x, ids, tw, w1, w2, dy = _arrays(grad_case(p, 4, "uniform", seed=1))
    moe = fj.prepare_weights(emu_train, w1, w2, trainable=True)

    def loss(x, m):
        return jnp.sum(fj.moe_layer(x, ids, tw, m).astype(jnp.float32) * dy)
    # gradients only: the backward's call, and no forward (its output is not needed: the backward recomputes)
    text = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, moe).as_text()
    assert "stablehlo.custom_call @flytune_moe_layer_backward" in text and f'problem = "{p.key}"' in text
    assert not re.search(r"custom_call @flytune_moe_layer(?!_backward)", text)
    # the value too: one forward call and one backward call
    text = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(x, moe).as_text()
    assert len(re.findall(r"custom_call @flytune_moe_layer(?!_backward)", text)) == 1
    assert text.count("custom_call @flytune_moe_layer_backward") == 1


def test_zero_tokens_give_zero_gradients(emu_train):
    p = emu_train.problems[0]
    x, ids, tw, w1, w2, dy = _arrays(grad_case(p, 2, "uniform", seed=2))
    dx, dw1, dw2, dtw = _flytune_grads(emu_train, x[:0], ids[:0], tw[:0], w1, w2, dy[:0])
    assert dx.shape == (0, p.hidden) and dtw.shape == (0, p.topk)
    assert not np.any(np.asarray(dw1, np.float32)) and not np.any(np.asarray(dw2, np.float32))


def test_an_export_without_backward_buckets_is_refused_in_one_line(emu_export_dir):
    forward_only = flytune.load(emu_export_dir, device="emulate")  # tests/data/tiny_emu_bf16.db: forward winners
    p = forward_only.problems[0]
    assert not p.has_backward and not forward_only.plan(p.key, 1)["backward"]["available"]
    x, ids, tw, w1, w2, dy = _arrays(grad_case(p, 2, "uniform", seed=2))
    with pytest.raises(flytune.NotFoundError) as e:
        _flytune_grads(forward_only, x, ids, tw, w1, w2, dy)
    message = str(e.value)
    assert "\n" not in message and message.startswith("flytune.jax.moe_layer: differentiating the layer")
    assert "the export has no backward of this problem: search it with flytune search --pass backward" in message
    # the forward alone still runs
    y = fj.moe_layer(x, ids, tw, fj.prepare_weights(forward_only, w1, w2))
    assert y.shape == x.shape


def test_weights_without_their_plain_copies_are_refused(emu_export_dir, emu_train):
    forward_only = flytune.load(emu_export_dir, device="emulate")
    p = forward_only.problems[0]
    x, ids, tw, w1, w2, dy = _arrays(grad_case(p, 2, "uniform", seed=2))
    moe = fj.prepare_weights(forward_only, w1, w2)  # its plans read w1 only tiled: no plain w1 kept
    assert moe.w1 is None
    with pytest.raises(flytune.ArgumentError, match=r"the backward reads the plain w1, which these weights do not "
                                                    r"keep: flytune.jax.prepare_weights\(export, w1, w2, "
                                                    r"trainable=True\)"):
        jax.grad(lambda x: jnp.sum(fj.moe_layer(x, ids, tw, moe).astype(jnp.float32)))(x)


def test_fp8_layers_are_refused_when_differentiated(cpu_fp8_export):
    (p,) = [q for q in cpu_fp8_export.problems if q.scales == "per-tensor"]
    c1 = jnp.zeros(p.w1_shape, jnp.float8_e4m3fn)
    c2 = jnp.zeros(p.w2_shape, jnp.float8_e4m3fn)
    moe = fj.prepare_weights(cpu_fp8_export, c1, c2, w1_scales=jnp.ones(p.experts), w2_scales=jnp.ones(p.experts),
                             x_scale=jnp.ones(1))
    x = jnp.zeros((3, p.hidden), jnp.bfloat16)
    ids = jnp.zeros((3, p.topk), jnp.int32)
    tw = jnp.ones((3, p.topk), jnp.float32)
    with pytest.raises(NotImplementedError) as e:
        jax.grad(lambda x: jnp.sum(fj.moe_layer(x, ids, tw, moe).astype(jnp.float32)))(x)
    assert "\n" not in str(e.value) and "fp8 layers have no backward (per-tensor scales)" in str(e.value)


SHARD_MAP = r"""
import sys, numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
sys.path.insert(0, {tests!r})
import flytune, flytune.jax as fj
from layer_reference import GRAD_NAMES, TOLERANCE, grad_case, jax_layer_fp32, rel_l2
e = flytune.load({export!r}, device="emulate")
p = e.problems[0]
assert len(jax.devices()) == 2, jax.devices()
x, w1, w2, ids, tw, dy = grad_case(p, 10, "ragged", seed=41)
ref = lambda x, w1, w2, tw: jnp.sum(jax_layer_fp32(jnp, x, w1, w2, jnp.asarray(ids), tw) * dy)
want = jax.jit(jax.grad(ref, argnums=(0, 1, 2, 3)))(x, w1, w2, tw)
mesh = Mesh(np.array(jax.devices()), ("t",))

def local(x, ids, tw, dy, w1, w2):  # each shard: the layer of its 5 tokens, the loss summed over shards
    y = fj.moe_layer(x, ids, tw, fj.prepare_weights(e, w1, w2, trainable=True))
    return jax.lax.psum(jnp.sum(y.astype(jnp.float32) * dy), "t")

layer = shard_map(local, mesh=mesh, in_specs=(P("t"), P("t"), P("t"), P("t"), P(), P()), out_specs=P())
bf16 = lambda a: jnp.asarray(a, jnp.bfloat16)
got = jax.jit(jax.grad(lambda x, w1, w2, tw: layer(x, jnp.asarray(ids), tw, jnp.asarray(dy), w1, w2),
                       argnums=(0, 1, 2, 3)))(bf16(x), bf16(w1), bf16(w2), jnp.asarray(tw))
errors = {{n: rel_l2(np.asarray(g, np.float32), np.asarray(w)) for n, g, w in zip(GRAD_NAMES, got, want)}}
print(errors)
assert all(v < TOLERANCE for v in errors.values()), errors
"""


def test_shard_map_over_tokens_on_two_host_devices(emu_train_export_dir):
    # Two CPU devices (a fresh process: XLA reads the flag at start); the tokens sharded, the weights replicated:
    # shard_map's transpose sums the shards' weight gradients.
    import os
    import subprocess
    import sys
    from conftest import REPO
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", SHARD_MAP.format(tests=str(REPO / "python" / "tests"),
                                                               export=str(emu_train_export_dir))],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
