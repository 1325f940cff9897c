"""flytune.torch without a GPU: the custom op's schema and fake implementation (torch.library.opcheck on
meta tensors), torch.compile tracing, the runtime's messages for shapes the export does not serve, and the
drop-in fused_experts' argument handling."""
import re

import pytest

from conftest import framework

torch = framework("torch")
import flytune  # noqa: E402
import flytune.torch as ftt  # noqa: E402


def _args(problem, tokens, export, device="meta", hidden=None, experts=None, dtype=torch.bfloat16):
    h = hidden or problem.hidden
    e = experts or problem.experts
    x = torch.empty(tokens, h, dtype=dtype, device=device)
    w1 = torch.empty(e, 2 * problem.inter, h, dtype=dtype, device=device)
    w2 = torch.empty(e, h, problem.inter, dtype=dtype, device=device)
    weights = torch.empty(tokens, problem.topk, dtype=torch.float32, device=device)
    ids = torch.empty(tokens, problem.topk, dtype=torch.int32, device=device)
    return x, w1, w2, weights, ids, export.key


@pytest.mark.parametrize("tokens", [1, 5, 300])
def test_opcheck_on_meta_tensors(cpu_export, tokens):
    p = cpu_export.problems[0]
    torch.library.opcheck(torch.ops.flytune.moe_layer.default, _args(p, tokens, cpu_export))


def test_the_fake_gives_the_output_shape(cpu_export):
    p = cpu_export.problems[0]
    y = torch.ops.flytune.moe_layer(*_args(p, 7, cpu_export))
    assert y.shape == (7, p.hidden) and y.dtype == torch.bfloat16 and y.device.type == "meta"


def test_torch_compile_traces_the_op(cpu_export):
    p = cpu_export.problems[0]
    seen = []

    def backend(gm, example_inputs):
        seen.append(str(gm.graph))
        return gm.forward

    @torch.compile(backend=backend, fullgraph=True)
    def layer(x, w1, w2, weights, ids):
        return ftt.fused_experts(x, w1, w2, weights, ids, export=cpu_export) * 2

    x, w1, w2, weights, ids, _ = _args(p, 9, cpu_export)
    y = layer(x, w1, w2, weights, ids)
    assert y.shape == x.shape
    assert seen and "flytune.moe_layer" in seen[0]


def test_shapes_the_export_does_not_serve_raise_the_runtimes_message(cpu_export):
    p = cpu_export.problems[0]
    with pytest.raises(flytune.NotFoundError, match=r"no tuned kernels for problem 'moe_e8_h256_i512_k2_bf16_"
                                                    r"swiglu_uniform' \(the export has: " + p.key):
        torch.ops.flytune.moe_layer(*_args(p, 5, cpu_export, experts=8))
    with pytest.raises(flytune.NotFoundError, match=r"'moe_e4_h256_i512_k2_f16_swiglu_uniform'.*the export has"):
        torch.ops.flytune.moe_layer(*_args(p, 5, cpu_export, dtype=torch.float16))
    x, w1, w2, weights, ids, key = _args(p, 5, cpu_export)
    with pytest.raises(flytune.ArgumentError, match="do not fit"):
        torch.ops.flytune.moe_layer(x[:, :128], w1, w2, weights, ids, key)
    with pytest.raises(flytune.ArgumentError, match="int32"):
        torch.ops.flytune.moe_layer(x, w1, w2, weights, ids.long(), key)
    with pytest.raises(flytune.ArgumentError, match="no export 'nowhere' is loaded"):
        torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, "nowhere")


def test_fused_experts_refuses_what_it_does_not_serve(cpu_export):
    p = cpu_export.problems[0]
    x, w1, w2, weights, ids, _ = _args(p, 3, cpu_export)
    with pytest.raises(NotImplementedError, match="use_fp8_w8a8, w1_scale"):
        ftt.fused_experts(x, w1, w2, weights, ids, use_fp8_w8a8=True, w1_scale=torch.empty(1), export=cpu_export)
    with pytest.raises(NotImplementedError, match="activation='gelu'"):
        ftt.fused_experts(x, w1, w2, weights, ids, activation="gelu", export=cpu_export)
    with pytest.raises(NotImplementedError, match="apply_router_weight_on_input"):
        ftt.fused_experts(x, w1, w2, weights, ids, apply_router_weight_on_input=True, export=cpu_export)
    ftt.use(None)
    with pytest.raises(flytune.ArgumentError, match="no export"):
        ftt.fused_experts(x, w1, w2, weights, ids)


def test_fused_experts_converts_vllms_routing_types(cpu_export):
    # vLLM hands topk_ids as int64 (or int32) and the weights as float32 or the activation dtype.
    p = cpu_export.problems[0]
    x, w1, w2, weights, ids, _ = _args(p, 4, cpu_export)
    ftt.use(cpu_export)
    y = ftt.fused_experts(x, w1, w2, weights.to(torch.bfloat16), ids.long(),
                          expert_map=torch.empty(16, dtype=torch.int32, device="meta"), global_num_experts=16)
    assert y.shape == x.shape
    y2 = ftt.fused_experts(x, w1, w2, weights, ids, inplace=True)
    assert y2 is x


# ---------------------------------------------------------------- fp8 (the export of tests/data/tiny_fp8.db)

def _fp8_problem(export, mode):
    (p,) = [p for p in export.problems if p.scales == mode]
    return p


def _fp8_args(p, tokens, device="meta", wdtype=torch.float8_e4m3fn):
    x = torch.empty(tokens, p.hidden, dtype=torch.bfloat16, device=device)
    w1 = torch.empty(p.w1_shape, dtype=wdtype, device=device)
    w2 = torch.empty(p.w2_shape, dtype=wdtype, device=device)
    weights = torch.empty(tokens, p.topk, dtype=torch.float32, device=device)
    ids = torch.empty(tokens, p.topk, dtype=torch.int32, device=device)
    scales = {n: torch.empty(s, dtype=torch.float32, device=device) for n, s in p.scale_shapes}
    return (x, w1, w2, weights, ids), scales


@pytest.mark.parametrize("mode", ["per-tensor", "per-token", "block128"])
@pytest.mark.parametrize("wdtype", [torch.float8_e4m3fn, torch.uint8])
def test_fp8_opcheck_on_meta_tensors(cpu_fp8_export, mode, wdtype):
    p = _fp8_problem(cpu_fp8_export, mode)
    args, scales = _fp8_args(p, 5, wdtype=wdtype)
    torch.library.opcheck(torch.ops.flytune.moe_layer.default, (*args, cpu_fp8_export.key), scales)
    y = torch.ops.flytune.moe_layer(*args, cpu_fp8_export.key, **scales)
    assert y.shape == (5, p.hidden) and y.dtype == torch.bfloat16


def _refused(export, args, scales, match):
    with pytest.raises(flytune.ArgumentError, match=match):
        torch.ops.flytune.moe_layer(*args, export.key, **scales)


def test_fp8_scales_are_checked_against_the_problem(cpu_fp8_export):
    e = cpu_fp8_export
    key = {m: _fp8_problem(e, m).key for m in ("per-tensor", "per-token", "block128")}
    args, tensor = _fp8_args(_fp8_problem(e, "per-tensor"), 3)
    _, token = _fp8_args(_fp8_problem(e, "per-token"), 3)
    _, block = _fp8_args(_fp8_problem(e, "block128"), 3)
    f32 = lambda *s: torch.empty(*s, dtype=torch.float32, device="meta")  # noqa: E731
    # missing scales
    _refused(e, args, {}, r"an fp8 layer needs its scales: w1_scales \[4, 4, 1\] \(block128\) or \[4\] "
                          r"\(per-tensor\) or \[4, 512\] \(per-token\) float32")
    _refused(e, args, dict(tensor, x_scale=None), re.escape(f"{key['per-tensor']} needs x_scale [1] float32"))
    _refused(e, args, dict(block, w2_scales=None), re.escape(f"{key['block128']} needs w2_scales [4, 1, 2] float32"))
    # the w1_scales shape picks the mode; the others must then fit it
    _refused(e, args, dict(tensor, w1_scales=f32(4, 2)), r"w1_scales \[4, 2\] fits no fp8 problem of the export for "
                                                         r"these shapes: expected \[4, 4, 1\] \(block128\) or")
    _refused(e, args, dict(token, w2_scales=f32(4)), re.escape(f"w2_scales must be [4, 128] (per-token scales of "
                                                               f"{key['per-token']}), got [4]"))
    _refused(e, args, dict(block, w2_scales=f32(4, 2, 1)), re.escape("w2_scales must be [4, 1, 2] (block128"))
    _refused(e, args, dict(token, x_scale=f32(1)), re.escape(f"x_scale given, but {key['per-token']} reads none "
                                                             f"(per-token: the activations are scaled on the device)"))
    # dtypes
    _refused(e, args, dict(tensor, w2_scales=tensor["w2_scales"].half()), "w2_scales must be float32, got float16")
    x, w1, w2, weights, ids = args
    _refused(e, (x.half(), w1, w2, weights, ids), tensor, "fp8 layers take hidden_states in torch.bfloat16")
    _refused(e, (x, w1.view(torch.float8_e4m3fnuz), w2.view(torch.float8_e4m3fnuz), weights, ids), tensor,
             r"the export's fp8 weights are e4m3: w1 and w2 must both be torch.float8_e4m3fn \(or their torch.uint8 "
             r"codes\), got torch.float8_e4m3fnuz")
    _refused(e, (x, w1, w2.view(torch.uint8), weights, ids), tensor, "must both be")
    # a 0-dim x_scale is the static scale too; every mode's own scales pass
    torch.ops.flytune.moe_layer(*args, e.key, **dict(tensor, x_scale=f32(())))
    for scales in (tensor, token, block):
        torch.ops.flytune.moe_layer(*args, e.key, **scales)


def test_fp8_shapes_the_export_does_not_serve(cpu_fp8_export):
    p = _fp8_problem(cpu_fp8_export, "per-tensor")
    (x, w1, w2, weights, ids), scales = _fp8_args(p, 3)
    with pytest.raises(flytune.NotFoundError, match=r"no fp8 problem of experts 4, hidden 128, inter 256, topk 1 "
                                                    r"\(the export has: moe_e4_h128_i256_k2_e4m3:block128"):
        torch.ops.flytune.moe_layer(x, w1, w2, weights[:, :1], ids[:, :1], cpu_fp8_export.key, **scales)
    # bf16 weights of the same shapes: the runtime's answer (the export has fp8 problems only)
    with pytest.raises(flytune.NotFoundError, match=r"'moe_e4_h128_i256_k2_bf16_swiglu_uniform' \(the export has: "):
        torch.ops.flytune.moe_layer(x, w1.to(torch.bfloat16), w2.to(torch.bfloat16), weights, ids, cpu_fp8_export.key)


def test_sixteen_bit_layers_refuse_scales(cpu_export):
    p = cpu_export.problems[0]
    x, w1, w2, weights, ids, key = _args(p, 3, cpu_export)
    with pytest.raises(flytune.ArgumentError, match="w1_scales, w2_scales given, but a bf16 layer takes no scales"):
        torch.ops.flytune.moe_layer(x, w1, w2, weights, ids, key, w1_scales=torch.empty(4, device="meta"),
                                    w2_scales=torch.empty(4, device="meta"))


def test_fp8_tensors_must_share_the_gpu(cpu_fp8_export):
    p = _fp8_problem(cpu_fp8_export, "per-tensor")
    args, scales = _fp8_args(p, 3, device="cpu")
    with pytest.raises(flytune.ArgumentError, match="must be on a GPU"):
        torch.ops.flytune.moe_layer(*args, cpu_fp8_export.key, **scales)


def test_ocp_to_fnuz_on_torch_cpu_tensors():
    codes = torch.tensor([1.0, -0.0, 448.0, -2.0], dtype=torch.float32).to(torch.float8_e4m3fn)
    scales = torch.tensor([0.25], dtype=torch.float32)
    assert flytune.fp8_ocp_to_fnuz(codes, scales) == 0
    assert scales.tolist() == [0.5]
    # the same values read as fnuz with the doubled scale; -0 became +0
    assert (codes.view(torch.float8_e4m3fnuz).float() * scales).tolist() == [0.25, 0.0, 112.0, -0.5]
    assert codes.view(torch.uint8).tolist()[1] == 0
    with pytest.raises(flytune.ArgumentError, match="codes must be in host memory"):
        flytune.fp8_ocp_to_fnuz(torch.empty(4, dtype=torch.uint8, device="meta"), scales)
    with pytest.raises(flytune.ArgumentError, match="codes must be uint8 or float8_e4m3fn, got float8_e4m3fnuz"):
        flytune.fp8_ocp_to_fnuz(codes.view(torch.float8_e4m3fnuz), scales)
