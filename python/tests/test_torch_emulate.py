"""flytune.torch on CPU tensors: the custom op runs an export of `flytune search --emulate` opened on the CPU
emulator (flytune.load(dir, device="emulate")), its real kernels on torch's host memory, checked against the
float32 references of layer_reference.py (the GPU tests' own): the bf16 layer (tests/data/tiny_emu_bf16.db: the
tiny Mixtral's problem, whose plans read tiled and plain weights) and the fp8 layer in every scale mode
(tests/data/tiny_fp8.db), each with a mutant the comparison must catch; CPU tensors on a GPU export and GPU
tensors on an emulated export are refused with one line, and the op's argument checks are the GPU's."""
import gc
import types

import pytest

from conftest import cuda_devices, framework
from layer_reference import (FP8_MODES, TOLERANCE, fp8_inputs, fp8_reference, inputs, inter_row_scales, reference,
                             rel_l2, routing, to_bf16, torch_fp8_close, torch_rel_l2)

torch = framework("torch")
import flytune  # noqa: E402
import flytune.torch as ftt  # noqa: E402


@pytest.fixture(scope="module")
def emu_bf16(emu_export_dir):
    return flytune.load(emu_export_dir, device="emulate")


@pytest.fixture(scope="module")
def emu_fp8(fp8_export_dir):
    return flytune.load(fp8_export_dir, device="emulate")


def _bf16_case(problem, tokens, kind, seed):
    x, w1, w2 = (to_bf16(a) for a in inputs(problem, tokens, seed))
    ids, weights = routing(kind, tokens, problem.experts, problem.topk, seed)
    t = lambda a, dtype: torch.from_numpy(a).to(dtype)  # noqa: E731
    args = (t(x, torch.bfloat16), t(w1, torch.bfloat16), t(w2, torch.bfloat16), t(weights, torch.float32),
            t(ids, torch.int32))
    return args, reference(x, w1, w2, ids, weights)


@pytest.mark.parametrize("tokens, kind", [(1, "uniform"), (5, "masked"), (8, "hot")])
def test_the_bf16_layer_runs_on_cpu_tensors(emu_bf16, tokens, kind):
    p = emu_bf16.problems[0]
    args, want = _bf16_case(p, tokens, kind, seed=tokens)
    y = ftt.fused_experts(*args, export=emu_bf16)
    assert y.device.type == "cpu" and y.dtype == torch.bfloat16 and y.shape == args[0].shape
    assert rel_l2(y.float().numpy(), want) < TOLERANCE
    # the mutant: every token sent to the next expert must miss the reference
    x, w1, w2, weights, ids = args
    wrong = torch.where(ids >= 0, (ids + 1) % p.experts, ids)
    y2 = torch.ops.flytune.moe_layer(x, w1, w2, weights, wrong, emu_bf16.key)
    assert rel_l2(y2.float().numpy(), want) > 10 * TOLERANCE


def test_the_arranged_copies_are_made_on_the_cpu(emu_bf16):
    p = emu_bf16.problems[0]
    (x, w1, w2, weights, ids), want = _bf16_case(p, 8, "uniform", seed=3)
    assert emu_bf16.weight_copies(p.key), "the tiny emulator export's plans read arranged weights"
    ftt.prepare_weights(w1, w2, emu_bf16)
    copies = [v[2] for k, v in ftt._arranged.items() if k[0] in (id(w1), id(w2)) and k[2] == emu_bf16.key]
    assert copies and all(c.device.type == "cpu" and c.shape in (w1.shape, w2.shape) for c in copies)
    assert not all(torch.equal(c, w1) for c in copies if c.shape == w1.shape)  # arranged, not copied
    y = torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, emu_bf16.key)
    assert rel_l2(y.float().numpy(), want) < TOLERANCE


def test_arranged_weights_hold_the_layer_once(emu_bf16):
    # tiny_emu_bf16.db's plans read w1 only tiled (every bucket) and w2 plain at T=1: w1 comes back as a stand-in
    # without values, w2 as it is; the layer is the same with the original w1 gone.
    p = emu_bf16.problems[0]
    assert "w1" not in emu_bf16.weights_read(p.key) and "w2" in emu_bf16.weights_read(p.key)
    (x, w1, w2, weights, ids), _ = _bf16_case(p, 8, "uniform", seed=4)
    want = {t: torch.ops.flytune.moe_layer(x[:t], w1, w2, weights[:t], ids[:t], emu_bf16.key) for t in (1, 8)}
    s1, s2 = ftt.arranged_weights(w1.clone(), w2, emu_bf16)
    assert s2 is w2 and s1.shape == w1.shape and s1.dtype == w1.dtype and s1.untyped_storage().nbytes() == 2
    gc.collect()  # the clone s1 was made from is gone: its copies live on under s1
    for t, y in want.items():
        assert torch.equal(torch.ops.flytune.moe_layer(x[:t], s1, s2, weights[:t], ids[:t], emu_bf16.key), y), t
    other = flytune.load(emu_bf16.dir, device="emulate")  # another export: the stand-in holds none of its copies
    with pytest.raises(flytune.ArgumentError, match=r"a weight stand-in of arranged_weights \(4, 1024, 256\) has "
                                                    r"no w1_tiled for the export"):
        torch.ops.flytune.moe_layer(x, s1, s2, weights, ids, other.key)


@pytest.mark.filterwarnings("ignore::flytune.CoverageWarning")  # T=5 above tiny_fp8.db's one bucket, T=1: on purpose
@pytest.mark.parametrize("mode", FP8_MODES)
def test_the_fp8_layer_runs_on_cpu_tensors(emu_fp8, mode):
    (p,) = [q for q in emu_fp8.problems if q.scales == mode]
    x, w1, w2, ids, weights, scales = fp8_inputs(torch, p, 5, "masked", seed=7, device="cpu")
    want = fp8_reference(torch, p, x, w1, w2, ids, weights, scales, inter_row_scales(emu_fp8, p, 5))
    y = torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, emu_fp8.key, **scales)
    assert y.device.type == "cpu" and y.dtype == torch.bfloat16
    assert torch_fp8_close(y, want), torch_rel_l2(y, want)
    # the mutant: the w1 scales doubled must not pass
    doubled = dict(scales, w1_scales=2 * scales["w1_scales"])
    y2 = torch.ops.flytune.moe_layer(x, w1.view(torch.uint8), w2.view(torch.uint8), weights, ids, emu_fp8.key,
                                     **doubled)
    assert not torch_fp8_close(y2, want) and torch_rel_l2(y2, want) > 0.5


def test_cpu_tensors_on_a_gpu_export_are_refused_in_one_line(cpu_export):
    p = cpu_export.problems[0]
    (x, w1, w2, weights, ids), _ = _bf16_case(p, 3, "uniform", seed=0)
    with pytest.raises(flytune.ArgumentError) as e:
        torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, cpu_export.key)
    message = str(e.value)
    assert "\n" not in message and message.startswith("flytune::moe_layer: tensors must be on a GPU, got cpu")
    assert f"is opened on {cpu_export.device}" in message and "device='emulate'" in message


def test_gpu_tensors_on_an_emulated_export_are_refused_in_one_line(emu_bf16):
    # Without a GPU no CUDA tensor can be made: the device check (the op's first step after the shapes) is handed
    # stand-ins that have a CUDA device, as a CUDA tensor has; test_gpu_tensors_on_the_emulator_... makes real ones.
    on_gpu = types.SimpleNamespace(device=torch.device("cuda", 0))
    with pytest.raises(flytune.ArgumentError) as e:
        ftt._check_devices(emu_bf16, on_gpu, {})
    message = str(e.value)
    assert "\n" not in message and "runs on the CPU emulator" in message
    assert message.endswith("tensors must be CPU tensors, got cuda:0")
    with pytest.raises(flytune.ArgumentError, match="w2 is on cuda:0, hidden_states on cpu"):
        ftt._check_devices(emu_bf16, torch.empty(1), {"w2": on_gpu})


@pytest.mark.gpu
@pytest.mark.skipif(cuda_devices() == 0, reason="no NVIDIA GPU (libcuda.so.1 / cuDeviceGetCount)")
def test_gpu_tensors_on_the_emulator_are_refused_by_the_op(emu_bf16):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    p = emu_bf16.problems[0]
    args, _ = _bf16_case(p, 3, "uniform", seed=0)
    with pytest.raises(flytune.ArgumentError, match="runs on the CPU emulator .* must be CPU tensors, got cuda:0"):
        torch.ops.flytune.moe_layer(*(a.to("cuda:0") for a in args), emu_bf16.key)


@pytest.mark.parametrize("change, error, message", [
    (lambda a: a[:4] + (a[4].long(),), flytune.ArgumentError, "topk_ids must be int32 and topk_weights float32"),
    (lambda a: (a[0][:, :128],) + a[1:], flytune.ArgumentError, "do not fit hidden_states"),
    (lambda a: (a[0].half(), a[1].half(), a[2].half()) + a[3:], flytune.NotFoundError, "_f16_swiglu_uniform"),
    (lambda a: a[:3] + (a[3][:2], a[4][:2]), flytune.ArgumentError, "expected hidden_states \\[T, H\\]"),
])
def test_the_argument_checks_are_the_gpus(emu_bf16, change, error, message):
    args, _ = _bf16_case(emu_bf16.problems[0], 3, "uniform", seed=0)
    with pytest.raises(error, match=message):
        torch.ops.flytune.moe_layer(*change(args), emu_bf16.key)


def test_an_fp8_layer_without_its_scales_is_refused_on_the_cpu(emu_fp8):
    (p,) = [q for q in emu_fp8.problems if q.scales == "per-tensor"]
    x, w1, w2, ids, weights, scales = fp8_inputs(torch, p, 2, "uniform", seed=1, device="cpu")
    with pytest.raises(flytune.ArgumentError, match="an fp8 layer needs its scales"):
        torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, emu_fp8.key)
    with pytest.raises(flytune.ArgumentError, match=r"needs x_scale \[1\] float32"):
        torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, emu_fp8.key, w1_scales=scales["w1_scales"],
                                    w2_scales=scales["w2_scales"])
