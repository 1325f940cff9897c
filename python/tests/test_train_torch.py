"""Training through flytune.torch without a GPU: torch autograd of the custom op flytune::moe_layer (its
torch.library.register_autograd formula, whose backward is the custom op flytune::moe_layer_backward) on CPU
tensors, running the real backward kernels of an emulated export with backward buckets (conftest's
emu_train_export_dir), against autograd of a float32 reference of the layer (layer_reference.torch_layer_fp32) on
fresh inputs: ragged counts with an empty expert and -1 ids, T not a multiple of any tile, T above the largest
backward bucket; a mutant routing must miss it. torch.library.opcheck of both ops (schema, autograd
registration, fake tensors, AOT dispatch) on the emulator, torch.compile of forward and backward; the refusals -- an export without backward buckets,
fp8 layers, stand-ins of arranged_weights -- one line each. The weight gradients' dtype: the weights', written so by
the kernels (the op returns the very tensors it passed as dw1_16, dw2_16) on an export searched by this flytune
(conftest's emu_train16_export_dir), and written in float32 and cast, with one Fp32WeightGradientsWarning, on the
committed export, whose kernels predate that."""
import warnings

import numpy as np
import pytest

from conftest import framework
from layer_reference import GRAD_NAMES, TOLERANCE, grad_case, torch_layer_fp32, torch_rel_l2

torch = framework("torch")
import flytune  # noqa: E402
import flytune.torch as ftt  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::flytune.CoverageWarning")  # T = 13 above the largest bucket, 9


@pytest.fixture(scope="module")
def emu_train(emu_train_export_dir):
    return flytune.load(emu_train_export_dir, device="emulate")


def _tensors(case, requires_grad=True):
    """bf16 x, w1, w2 and float32 topk_weights as leaves needing gradients; int32 ids; bf16 dy."""
    x, w1, w2, ids, weights, dy = case
    leaf = lambda a, dtype: torch.from_numpy(a).to(dtype).requires_grad_(requires_grad)  # noqa: E731
    return (leaf(x, torch.bfloat16), leaf(w1, torch.bfloat16), leaf(w2, torch.bfloat16),
            leaf(weights, torch.float32), torch.from_numpy(ids).to(torch.int32), torch.from_numpy(dy).bfloat16())


def _reference_grads(case):
    x, w1, w2, ids, weights, dy = (torch.from_numpy(a) for a in case)
    leaves = [t.clone().requires_grad_() for t in (x, w1, w2, weights)]
    y = torch_layer_fp32(torch, leaves[0], leaves[1], leaves[2], ids, leaves[3])
    return torch.autograd.grad(y, leaves, dy)


def _flytune_grads(export, x, w1, w2, tw, ids, dy):
    y = torch.ops.flytune.moe_layer(x, w1, w2, tw, ids, export.key)
    return torch.autograd.grad(y, (x, w1, w2, tw), dy)


@pytest.mark.parametrize("tokens, kind", [(1, "uniform"), (7, "ragged"), (9, "masked"), (13, "one-empty")])
def test_autograd_matches_the_float32_reference(emu_train, tokens, kind):
    p = emu_train.problems[0]
    case = grad_case(p, tokens, kind, seed=tokens)
    x, w1, w2, tw, ids, dy = _tensors(case)
    got = _flytune_grads(emu_train, x, w1, w2, tw, ids, dy)
    assert [g.dtype for g in got] == [torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float32]
    want = _reference_grads(case)
    for name, g, w in zip(GRAD_NAMES, got, want):
        assert g.shape == w.shape and torch_rel_l2(g, w) < TOLERANCE, (name, torch_rel_l2(g, w))
    if kind == "masked":  # slots routed nowhere get no d(topk_weights)
        assert torch.all(got[3][ids < 0] == 0)
    # the mutant: every token's experts shifted by one must miss the reference's gradients
    wrong = torch.where(ids >= 0, (ids + 1) % p.experts, ids)
    bad = _flytune_grads(emu_train, x, w1, w2, tw, wrong, dy)
    assert max(torch_rel_l2(g, w) for g, w in zip(bad, want)) > 10 * TOLERANCE


def test_backward_through_fused_experts_and_a_loss(emu_train):
    # The op inside a small model: fused_experts (int64 ids converted), a loss, .backward() into .grad; the
    # directional derivative of the reference's loss along the gradient agrees with the gradient's norm.
    p = emu_train.problems[0]
    case = grad_case(p, 5, "ragged", seed=21)
    x, w1, w2, tw, ids, dy = _tensors(case)
    y = ftt.fused_experts(x, w1, w2, tw, ids.long(), export=emu_train)
    (y.float() * dy.float()).sum().backward()
    want = _reference_grads(case)
    for name, leaf, w in zip(GRAD_NAMES, (x, w1, w2, tw), want):
        assert leaf.grad is not None and torch_rel_l2(leaf.grad, w) < TOLERANCE, name
    # central differences of the float32 reference along flytune's dW2: <dW2, v> within 2e-2
    xf, w1f, w2f, idsf, twf, dyf = (torch.from_numpy(a) for a in case)
    v = w2.grad.float() / w2.grad.float().norm()
    eps = 1e-2
    loss = lambda w: float((torch_layer_fp32(torch, xf, w1f, w, idsf, twf) * dyf).sum())  # noqa: E731
    numeric = (loss(w2f + eps * v) - loss(w2f - eps * v)) / (2 * eps)
    assert numeric == pytest.approx(float((w2.grad.float() * v).sum()), rel=2e-2)


def test_torch_compile_traces_forward_and_backward(emu_train):
    # AOT autograd (backend aot_eager: no inductor build) traces the op, its autograd formula and the backward
    # op's fake, then runs the real kernels.
    p = emu_train.problems[0]
    case = grad_case(p, 6, "ragged", seed=8)
    x, w1, w2, tw, ids, dy = _tensors(case)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def loss(x, w1, w2, tw, ids, dy):
        return (torch.ops.flytune.moe_layer(x, w1, w2, tw, ids, emu_train.key).float() * dy.float()).sum()

    loss(x, w1, w2, tw, ids, dy).backward()
    for name, leaf, w in zip(GRAD_NAMES, (x, w1, w2, tw), _reference_grads(case)):
        assert torch_rel_l2(leaf.grad, w) < TOLERANCE, name


def test_opcheck_of_the_layer_with_gradients(emu_train):
    p = emu_train.problems[0]
    x, w1, w2, tw, ids, _ = _tensors(grad_case(p, 5, "ragged", seed=5))
    torch.library.opcheck(torch.ops.flytune.moe_layer.default, (x, w1, w2, tw, ids, emu_train.key))


def test_opcheck_of_the_backward_op(emu_train):
    p = emu_train.problems[0]
    x, w1, w2, tw, ids, dy = _tensors(grad_case(p, 6, "masked", seed=6), requires_grad=False)
    torch.library.opcheck(torch.ops.flytune.moe_layer_backward.default, (dy, x, w1, w2, tw, ids, emu_train.key))


def test_the_backward_ops_fake_on_meta_tensors(emu_train):
    p = emu_train.problems[0]
    meta = dict(device="meta")
    x = torch.empty(11, p.hidden, dtype=torch.bfloat16, **meta)
    w1 = torch.empty(p.w1_shape, dtype=torch.bfloat16, **meta)
    w2 = torch.empty(p.w2_shape, dtype=torch.bfloat16, **meta)
    tw = torch.empty(11, p.topk, **meta)
    ids = torch.empty(11, p.topk, dtype=torch.int32, **meta)
    out = torch.ops.flytune.moe_layer_backward(x, x, w1, w2, tw, ids, emu_train.key)
    assert [t.shape for t in out] == [x.shape, w1.shape, w2.shape, tw.shape]
    assert [t.dtype for t in out] == [torch.float32, torch.bfloat16, torch.bfloat16, torch.float32]
    assert all(t.device.type == "meta" for t in out)


@pytest.fixture(scope="module")
def emu_train16(emu_train16_export_dir):
    return flytune.load(emu_train16_export_dir, device="emulate")


def _launches(monkeypatch):
    """The keyword arguments of each backward launch the op makes (flytune._call of _core.launch_backward)."""
    seen, call = [], flytune._call

    def recording(fn, *args, **kwargs):
        if getattr(fn, "__name__", "") == "launch_backward":
            seen.append(kwargs)
        return call(fn, *args, **kwargs)
    monkeypatch.setattr(flytune, "_call", recording)
    return seen


@pytest.mark.parametrize("tokens, kind", [(1, "uniform"), (9, "masked"), (13, "one-empty")])
def test_weight_gradients_come_in_the_weights_dtype_from_the_kernels(emu_train16, monkeypatch, tokens, kind):
    p = emu_train16.problems[0]
    assert emu_train16.plan(p.key, tokens)["backward"]["dw16"]  # searched by this flytune: kgrouped_args_bytes 96
    case = grad_case(p, tokens, kind, seed=40 + tokens)
    x, w1, w2, tw, ids, dy = _tensors(case, requires_grad=False)
    launches = _launches(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", flytune.Fp32WeightGradientsWarning)
        out = torch.ops.flytune.moe_layer_backward(dy, x, w1, w2, tw, ids, emu_train16.key)
    assert [t.dtype for t in out] == [torch.float32, torch.bfloat16, torch.bfloat16, torch.float32]
    # The kernels wrote the returned dW themselves: no float32 dW passed, no cast after.
    (launch,) = launches
    assert (launch["dw1"], launch["dw2"]) == (0, 0)
    assert (launch["dw1_16"], launch["dw2_16"]) == (out[1].data_ptr(), out[2].data_ptr())
    want = _reference_grads(case)
    for name, g, w in zip(GRAD_NAMES, out, want):
        assert g.shape == w.shape and torch_rel_l2(g, w) < TOLERANCE, (name, torch_rel_l2(g, w))
    # and through autograd into the leaves' dtype
    x, w1, w2, tw, ids, dy = _tensors(case)
    got = _flytune_grads(emu_train16, x, w1, w2, tw, ids, dy)
    assert [g.dtype for g in got] == [torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float32]
    for name, g, w in zip(GRAD_NAMES, got, want):
        assert torch_rel_l2(g, w) < TOLERANCE, (name, torch_rel_l2(g, w))
    wrong = torch.where(ids >= 0, (ids + 1) % p.experts, ids)
    bad = _flytune_grads(emu_train16, x, w1, w2, tw, wrong, dy)
    assert max(torch_rel_l2(g, w) for g, w in zip(bad[1:3], want[1:3])) > 10 * TOLERANCE


def test_opcheck_of_the_backward_op_writing_16_bit_weight_gradients(emu_train16):
    p = emu_train16.problems[0]
    x, w1, w2, tw, ids, dy = _tensors(grad_case(p, 6, "masked", seed=6), requires_grad=False)
    torch.library.opcheck(torch.ops.flytune.moe_layer_backward.default, (dy, x, w1, w2, tw, ids, emu_train16.key))


def test_kernels_that_predate_16_bit_weight_gradients_give_float32_cast_and_say_so(emu_train_export_dir,
                                                                                    monkeypatch):
    export = flytune.load(emu_train_export_dir, device="emulate")  # an Export of its own: nothing warned yet
    p = export.problems[0]
    assert not export.plan(p.key, 5)["backward"]["dw16"]  # an earlier flytune compiled the committed kernels
    case = grad_case(p, 5, "ragged", seed=12)
    x, w1, w2, tw, ids, dy = _tensors(case, requires_grad=False)
    launches = _launches(monkeypatch)
    with pytest.warns(flytune.Fp32WeightGradientsWarning,
                      match=r"\(bucket 9\) predate the 16-bit weight gradients: dW1 and dW2 are written in float32 "
                            r"and cast to the weights' dtype"):
        out = torch.ops.flytune.moe_layer_backward(dy, x, w1, w2, tw, ids, export.key)
    (launch,) = launches
    assert (launch["dw1_16"], launch["dw2_16"]) == (0, 0) and launch["dw1"] and launch["dw2"]
    assert [t.dtype for t in out] == [torch.float32, torch.bfloat16, torch.bfloat16, torch.float32]
    for name, g, w in zip(GRAD_NAMES, out, _reference_grads(case)):
        assert torch_rel_l2(g, w) < TOLERANCE, (name, torch_rel_l2(g, w))
    with warnings.catch_warnings():  # once per (problem, backward bucket)
        warnings.simplefilter("error", flytune.Fp32WeightGradientsWarning)
        torch.ops.flytune.moe_layer_backward(dy, x, w1, w2, tw, ids, export.key)


def test_zero_tokens_give_zero_weight_gradients(emu_train):
    p = emu_train.problems[0]
    x, w1, w2, tw, ids, dy = _tensors(grad_case(p, 2, "uniform", seed=2))
    dx, dw1, dw2, dtw = _flytune_grads(emu_train, x[:0], w1, w2, tw[:0], ids[:0], dy[:0])
    assert dx.shape == (0, p.hidden) and dtw.shape == (0, p.topk)
    assert not dw1.any() and not dw2.any()


def test_an_export_without_backward_buckets_is_refused_in_one_line(emu_export_dir):
    forward_only = flytune.load(emu_export_dir, device="emulate")  # tests/data/tiny_emu_bf16.db: forward winners
    p = forward_only.problems[0]
    x, w1, w2, tw, ids, dy = _tensors(grad_case(p, 2, "uniform", seed=2))
    y = torch.ops.flytune.moe_layer(x, w1, w2, tw, ids, forward_only.key)  # the forward runs
    with pytest.raises(flytune.NotFoundError) as e:
        y.backward(dy)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"flytune::moe_layer_backward: {p.key} at T=2: ")
    assert "the export has no backward of this problem: search it with flytune search --pass backward" in message


def test_stand_ins_of_arranged_weights_are_refused_in_the_backward(emu_train):
    p = emu_train.problems[0]
    x, w1, w2, tw, ids, dy = _tensors(grad_case(p, 3, "uniform", seed=3), requires_grad=False)
    stand_in = torch.empty((1, 1, 1), dtype=torch.bfloat16).expand(p.w1_shape)
    with pytest.raises(flytune.ArgumentError, match=r"the backward reads the plain w1, given as a stand-in of "
                                                    r"arranged_weights \(no values\): train with the real weights"):
        torch.ops.flytune.moe_layer_backward(dy, x, stand_in, w2, tw, ids, emu_train.key)


def test_a_wrong_grad_output_is_refused(emu_train):
    p = emu_train.problems[0]
    x, w1, w2, tw, ids, dy = _tensors(grad_case(p, 3, "uniform", seed=3), requires_grad=False)
    with pytest.raises(flytune.ArgumentError, match=r"grad_output must be \(3, 64\) torch.bfloat16"):
        torch.ops.flytune.moe_layer_backward(dy.float(), x, w1, w2, tw, ids, emu_train.key)


def test_fp8_layers_are_refused_in_the_backward(emu_fp8_export_dir):
    from layer_reference import fp8_inputs
    fp8 = flytune.load(emu_fp8_export_dir, device="emulate")
    (p,) = [q for q in fp8.problems if q.scales == "per-tensor"]
    x, w1, w2, ids, weights, scales = fp8_inputs(torch, p, 2, "uniform", seed=1, device="cpu")
    x.requires_grad_()
    y = torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, fp8.key, **scales)
    with pytest.raises(NotImplementedError) as e:
        y.sum().backward()
    assert "\n" not in str(e.value) and "fp8 layers have no backward" in str(e.value)


def test_no_gradient_is_recorded_without_inputs_that_need_one(emu_train):
    p = emu_train.problems[0]
    x, w1, w2, tw, ids, _ = _tensors(grad_case(p, 3, "uniform", seed=3), requires_grad=False)
    y = torch.ops.flytune.moe_layer(x, w1, w2, tw, ids, emu_train.key)
    assert not y.requires_grad and y.grad_fn is None
    with torch.no_grad():
        assert torch.ops.flytune.moe_layer(x.requires_grad_(), w1, w2, tw, ids, emu_train.key).grad_fn is None
