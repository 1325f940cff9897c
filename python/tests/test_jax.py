"""flytune.jax without a GPU: the FFI handlers compile against jaxlib's headers and register, the call lowers
to the typed custom call, runs through XLA's FFI on the CPU platform up to the runtime (which has no device
there and says so), and shapes or dtypes the export does not serve raise the runtime's message."""
import dataclasses
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, framework

jax = framework("jax")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import flytune  # noqa: E402
import flytune.jax as fj  # noqa: E402
from flytune import _core  # noqa: E402


def _inputs(problem, tokens, dtype=jnp.bfloat16, export=None, batch=()):
    x = jnp.zeros(batch + (tokens, problem.hidden), dtype)
    ids = jnp.zeros(batch + (tokens, problem.topk), jnp.int32)
    w = jnp.ones(batch + (tokens, problem.topk), jnp.float32)
    w1 = jnp.zeros(problem.w1_shape, jnp.bfloat16)
    w2 = jnp.zeros(problem.w2_shape, jnp.bfloat16)
    weights = fj.MoeWeights(w1, w2, w1, w2, w1, w2, export)  # every copy present: no plan lacks one
    return x, ids, w, weights


def test_handlers_register_for_cuda_rocm_and_cpu():
    platforms = {(name, platform) for name, platform, _ in _core.jax_handlers()}
    assert {("flytune_moe_layer", "CUDA"), ("flytune_moe_layer", "ROCM"), ("flytune_arrange_weights", "CUDA"),
            ("flytune_arrange_weights", "ROCM"), ("flytune_moe_layer", "cpu")} <= platforms
    fj.register()  # done on import; idempotent
    major, minor = _core.JAX_FFI_API_VERSION
    assert major == 0 and minor >= 1


def test_the_call_lowers_to_the_typed_ffi_custom_call(cpu_export):
    p = cpu_export.problems[0]
    x, ids, w, weights = _inputs(p, 5, export=cpu_export)
    text = jax.jit(fj.moe_layer).lower(x, ids, w, weights).as_text()
    assert "stablehlo.custom_call @flytune_moe_layer" in text
    assert f'problem = "{p.key}"' in text and f'export = "{cpu_export.key}"' in text
    total = cpu_export.plan(p.key, 5)["workspace"]["total"]
    assert f"tensor<{total}xui8>" in text  # the workspace: a scratch result XLA allocates
    assert "api_version = 4" in text or "custom_call_api_version" not in text


def test_a_jitted_call_reaches_the_runtime_through_xla(cpu_export):
    # On the CPU platform the handler decodes the buffers and attributes, plans the layer and asks the
    # runtime to launch it; the export has no device, and the runtime's message comes back through XLA.
    p = cpu_export.problems[0]
    x, ids, w, weights = _inputs(p, 5, export=cpu_export)
    with pytest.raises(Exception, match=f"{p.key} at T=5: no device: the export was opened without one"):
        jax.block_until_ready(jax.jit(fj.moe_layer)(x, ids, w, weights))


def test_a_call_without_the_plain_weights_reaches_the_runtime_where_no_stage_reads_them(cpu_export):
    # T=5's bucket reads only arranged copies: the handler takes empty w1 / w2 (the buffers the runtime checks
    # are the copies) and the call gets as far as the launch.
    p = cpu_export.problems[0]
    x, ids, w, weights = _inputs(p, 5, export=cpu_export)
    plan = cpu_export.plan(p.key, 5)
    assert not plan["w1"] and not plan["w2"], "the test export's bucket for T=5 reads arranged weights"
    no_plain = dataclasses.replace(weights, w1=None, w2=None, plain_shapes=(p.w1_shape, p.w2_shape, "bfloat16"))
    with pytest.raises(Exception, match=f"{p.key} at T=5: no device: the export was opened without one"):
        jax.block_until_ready(jax.jit(fj.moe_layer)(x, ids, w, no_plain))


def test_vmap_makes_leading_dimensions_tokens(cpu_export):
    p = cpu_export.problems[0]
    x, ids, w, weights = _inputs(p, 5, export=cpu_export, batch=(3,))
    assert jax.eval_shape(fj.moe_layer, x, ids, w, weights).shape == x.shape
    single = _inputs(p, 5, export=cpu_export)
    batched = jax.vmap(fj.moe_layer, in_axes=(0, 0, 0, None))
    with pytest.raises(Exception, match=f"{p.key} at T=15: no device"):  # 3 x 5 tokens, one launch
        jax.block_until_ready(jax.jit(batched)(x, ids, w, single[3]))
    # The one launch gets the workspace of 15 tokens, not 3 of 5 (which is smaller).
    want = cpu_export._core.plan_info(p.key, 15)["workspace"]["total"]
    per_five = cpu_export._core.plan_info(p.key, 5)["workspace"]["total"]
    assert want != 3 * per_five
    hlo = jax.jit(batched).lower(x, ids, w, single[3]).as_text()
    assert f"tensor<{want}xui8>" in hlo, hlo[-2000:]
    assert f"tensor<3x{per_five}xui8>" not in hlo


def test_shapes_the_export_does_not_serve_raise_the_runtimes_message(cpu_export):
    p = cpu_export.problems[0]
    x, ids, w, weights = _inputs(p, 5, export=cpu_export)
    with pytest.raises(flytune.NotFoundError, match=r"no tuned kernels for problem 'moe_e4_h256_i512_k2_f16_"
                                                    r"swiglu_uniform' \(the export has: " + p.key):
        fj.moe_layer(x.astype(jnp.float16), ids, w, weights)
    with pytest.raises(flytune.NotFoundError, match=r"float32.*the export has"):
        fj.moe_layer(x.astype(jnp.float32), ids, w, weights)
    with pytest.raises(flytune.NotFoundError, match=r"'moe_e4_h256_i512_k3_bf16_swiglu_uniform'"):
        fj.moe_layer(x, jnp.zeros((5, 3), jnp.int32), jnp.zeros((5, 3), jnp.float32), weights)
    with pytest.raises(flytune.ArgumentError, match="same leading dimensions"):
        fj.moe_layer(x, ids[:4], w[:4], weights)
    with pytest.raises(flytune.ArgumentError, match="topk_ids must be integers"):
        fj.moe_layer(x, ids.astype(jnp.float32), w, weights)
    missing = fj.MoeWeights(weights.w1, weights.w2, None, None, None, None, cpu_export)
    plan = cpu_export.plan(p.key, 5)
    needed = [n for n in ("w1_shuffled", "w2_shuffled", "w1_tiled", "w2_tiled") if plan[n]]
    assert needed, "the test export's bucket for T=5 reads arranged weights"
    with pytest.raises(flytune.ArgumentError, match=f"reads {needed[0]}: prepare the weights"):
        fj.moe_layer(x, ids, w, missing)
    # The plain weights left out (as prepare_weights leaves them where no plan reads them): refused at a T whose
    # bucket reads them, with their shapes from plain_shapes.
    plain_t = next(t for t in p.buckets if cpu_export.plan(p.key, t)["w1"])
    shapes = (p.w1_shape, p.w2_shape, "bfloat16")
    no_plain = dataclasses.replace(weights, w1=None, w2=None, plain_shapes=shapes)
    xt, idst, wt, _ = _inputs(p, plain_t, export=cpu_export)
    with pytest.raises(flytune.ArgumentError, match=f"at T={plain_t} reads w1: prepare the weights"):
        fj.moe_layer(xt, idst, wt, no_plain)
    with pytest.raises(flytune.ArgumentError, match="plain_shapes says nothing"):
        fj.moe_layer(xt, idst, wt, dataclasses.replace(weights, w1=None, w2=None))


def test_prepare_weights_refuses_shapes_the_export_does_not_serve(cpu_export):
    p = cpu_export.problems[0]
    with pytest.raises(flytune.NotFoundError, match="the export has"):
        fj.prepare_weights(cpu_export, jnp.zeros((8,) + p.w1_shape[1:], jnp.bfloat16),
                           jnp.zeros((8,) + p.w2_shape[1:], jnp.bfloat16))
    with pytest.raises(flytune.ArgumentError, match=r"\[E, 2I, H\]"):
        fj.prepare_weights(cpu_export, jnp.zeros(p.w1_shape, jnp.bfloat16), jnp.zeros(p.w1_shape, jnp.bfloat16))


def test_zero_tokens_need_no_launch(cpu_export):
    p = cpu_export.problems[0]
    x, ids, w, weights = _inputs(p, 0, export=cpu_export)
    assert jax.jit(fj.moe_layer)(x, ids, w, weights).shape == (0, p.hidden)


def test_the_handlers_compile_against_this_jaxlibs_headers(tmp_path):
    # The wheel was built against the oldest jaxlib supported (scripts/python-test.sh); the same source
    # must compile against the headers of the jaxlib installed here.
    include = jax.ffi.include_dir() if hasattr(jax, "ffi") else jax.extend.ffi.include_dir()
    cmd = ["g++", "-std=c++23", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{REPO}", f"-isystem{include}",
           str(REPO / "python" / "src" / "jax_ffi.cpp")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]


# ---------------------------------------------------------------- fp8 (the export of tests/data/tiny_fp8.db)

FP8_MODES = ["per-tensor", "per-token", "block128"]


def _fp8_problem(export, mode):
    (p,) = [p for p in export.problems if p.scales == mode]
    return p


def _fp8_weights(p, wdtype=jnp.float8_e4m3fn):
    w1 = jnp.zeros(p.w1_shape, wdtype)
    w2 = jnp.zeros(p.w2_shape, wdtype)
    return w1, w2, {n: jnp.ones(s, jnp.float32) for n, s in p.scale_shapes}


@pytest.mark.parametrize("mode", FP8_MODES)
def test_fp8_layers_lower_with_their_scales_and_reach_the_runtime(cpu_fp8_export, mode):
    p = _fp8_problem(cpu_fp8_export, mode)
    w1, w2, scales = _fp8_weights(p, jnp.uint8 if mode == "per-token" else jnp.float8_e4m3fn)
    weights = fj.prepare_weights(cpu_fp8_export, w1, w2, **scales)
    assert weights.scales == mode
    x, ids, w, _ = _inputs(p, 5)
    text = jax.jit(fj.moe_layer).lower(x, ids, w, weights).as_text()
    assert "stablehlo.custom_call @flytune_moe_layer" in text and f'problem = "{p.key}"' in text
    for shape in dict(p.scale_shapes).values():
        assert f"tensor<{'x'.join(map(str, shape))}xf32>" in text
    # through XLA's FFI on the CPU platform: the handler checks the scales, the runtime's buffer check passes
    # (every scale pointer given) and it answers that there is no device
    with pytest.raises(Exception, match=f"{p.key} at T=5: no device: the export was opened without one"):
        jax.block_until_ready(jax.jit(fj.moe_layer)(x, ids, w, weights))


def test_fp8_scales_are_checked_by_prepare_weights_and_the_handler(cpu_fp8_export):
    e = cpu_fp8_export
    p = _fp8_problem(e, "per-tensor")
    w1, w2, scales = _fp8_weights(p)
    with pytest.raises(flytune.ArgumentError, match=r"an fp8 layer needs its scales: w1_scales \[4, 4, 1\] "
                                                    r"\(block128\) or \[4\] \(per-tensor\) or \[4, 512\]"):
        fj.prepare_weights(e, w1, w2)
    with pytest.raises(flytune.ArgumentError, match=re.escape(f"{p.key} needs x_scale [1] float32")):
        fj.prepare_weights(e, w1, w2, scales["w1_scales"], scales["w2_scales"])
    with pytest.raises(flytune.ArgumentError, match=re.escape("w2_scales must be [4] (per-tensor")):
        fj.prepare_weights(e, w1, w2, scales["w1_scales"], jnp.ones((4, 128), jnp.float32), scales["x_scale"])
    with pytest.raises(flytune.ArgumentError, match="w1_scales must be float32, got bfloat16"):
        fj.prepare_weights(e, w1, w2, scales["w1_scales"].astype(jnp.bfloat16), scales["w2_scales"],
                           scales["x_scale"])
    with pytest.raises(flytune.ArgumentError, match="must both be float8_e4m3fn"):
        fj.prepare_weights(e, w1.astype(jnp.float8_e4m3fnuz), w2.astype(jnp.float8_e4m3fnuz), **scales)
    weights = fj.prepare_weights(e, w1, w2, **scales)
    x, ids, w, _ = _inputs(p, 3)
    with pytest.raises(flytune.ArgumentError, match=r"fp8 layers take x \[\.\.\., 128\] in bfloat16"):
        fj.moe_layer(x.astype(jnp.float16), ids, w, weights)
    # scales that bypass prepare_weights: the handler's own check, before any pointer is used
    bad = dataclasses.replace(weights, w2_scales=jnp.ones((3,), jnp.float32))
    with pytest.raises(Exception, match=r"w2_scales \[3\] does not fit " + re.escape(p.key) + r" \(4 float32"):
        jax.block_until_ready(jax.jit(fj.moe_layer)(x, ids, w, bad))


def test_sixteen_bit_weights_take_no_scales(cpu_export):
    p = cpu_export.problems[0]
    w1, w2 = jnp.zeros(p.w1_shape, jnp.bfloat16), jnp.zeros(p.w2_shape, jnp.bfloat16)
    with pytest.raises(flytune.ArgumentError, match="w1_scales given, but bf16 layers take no scales"):
        fj.prepare_weights(cpu_export, w1, w2, w1_scales=jnp.ones((p.experts,), jnp.float32))
