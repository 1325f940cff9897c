"""flytune.torch without a GPU: the custom op's schema and fake implementation (torch.library.opcheck on
meta tensors), torch.compile tracing, the runtime's messages for shapes the export does not serve, and the
drop-in fused_experts' argument handling."""
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


def test_cpu_tensors_are_refused(cpu_export):
    p = cpu_export.problems[0]
    with pytest.raises(flytune.ArgumentError, match="must be on a GPU"):
        torch.ops.flytune.moe_layer(*_args(p, 3, cpu_export, device="cpu"))


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
