"""The Python surface under bad input, property-based (hypothesis): shapes, dtypes, strides, devices and
scale tensors drawn around the test exports' problems, for the torch op flytune::moe_layer and
flytune.jax.moe_layer. Each call either runs (valid arguments: the output's shape) or raises one
flytune error -- ArgumentError or NotFoundError, one line naming what was wrong -- and never anything
else: no other exception, no crash of the interpreter (a crash ends the test process, and the test with
it). Without a GPU the torch op runs on meta tensors (its fake implementation: the same checks) and on
CPU tensors (the real one, which refuses them after its checks); JAX traces with jax.eval_shape (the
checks run at trace time; nothing is launched)."""
import pytest

from conftest import framework

hypothesis = framework("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import flytune  # noqa: E402

# Reproducible in CI: the same examples every run, no example database.
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CLEAR_ERRORS = (flytune.ArgumentError, flytune.NotFoundError)


def _one_clear_line(e: BaseException) -> None:
    text = str(e)
    assert isinstance(e, CLEAR_ERRORS), f"{type(e).__name__}: {text}"
    assert text and "\n" not in text and len(text) < 2000, text
    assert "Traceback" not in text


def _dims(base: int):
    """A dimension: the problem's own most often, else a near or far other one."""
    return st.one_of(st.just(base), st.just(base), st.sampled_from([1, 2, 3, base // 2, base + 1, 2 * base]))


@st.composite
def _layer_args(draw, problem, fp8_problems=()):
    """Shapes (E, H, I, k, T), per-tensor dims and dtypes, layouts and scale tensors of one call."""
    e, h, i, k = (draw(_dims(v)) for v in (problem.experts, problem.hidden, problem.inter, problem.topk))
    return {
        "E": max(e, 1), "H": max(h, 1), "I": max(i, 1), "k": max(k, 1), "T": draw(st.integers(0, 9)),
        "x_rank": draw(st.sampled_from([2, 2, 2, 1, 3])), "w_rank": draw(st.sampled_from([3, 3, 3, 2])),
        "x_dtype": draw(st.sampled_from(["bf16", "bf16", "f16", "f32", "i32", "u8", "e4m3"])),
        "w_dtype": draw(st.sampled_from(["same", "same", "bf16", "f16", "e4m3", "u8", "f32"])),
        "ids_dtype": draw(st.sampled_from(["i32", "i32", "i64", "f32", "bool"])),
        "weights_dtype": draw(st.sampled_from(["f32", "f32", "bf16", "f64"])),
        "ids_tokens": draw(st.sampled_from([0, 0, 0, 1, -1])),  # topk_ids' T off by this
        "strided": draw(st.sampled_from(["no", "no", "x", "w1", "ids"])),
        "scales": draw(st.sampled_from(["none", "none", "mode", "wrong-shape", "wrong-dtype", "one"])),
        "fp8_mode": draw(st.sampled_from([p.scales for p in fp8_problems])) if fp8_problems else None,
    }


# ---------------------------------------------------------------------------------------------------- torch

def _torch_tensors(torch, a, device, fp8_shapes=None):
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32,
          "i64": torch.int64, "u8": torch.uint8, "e4m3": torch.float8_e4m3fn, "bool": torch.bool,
          "f64": torch.float64}
    x_dtype = dt[a["x_dtype"]]
    w_dtype = x_dtype if a["w_dtype"] == "same" else dt[a["w_dtype"]]
    E, H, I, k, T = a["E"], a["H"], a["I"], a["k"], a["T"]

    def make(shape, dtype, strided):
        if strided and len(shape) >= 1 and shape[-1] > 0:  # every other column of a wider tensor
            return torch.empty(*shape[:-1], 2 * shape[-1], dtype=dtype, device=device)[..., ::2]
        return torch.empty(*shape, dtype=dtype, device=device)

    x_shape = {2: (T, H), 1: (H,), 3: (1, T, H)}[a["x_rank"]]
    w1_shape = (E, 2 * I, H) if a["w_rank"] == 3 else (2 * I, H)
    x = make(x_shape, x_dtype, a["strided"] == "x")
    w1 = make(w1_shape, w_dtype, a["strided"] == "w1")
    w2 = make((E, H, I), w_dtype, False)
    t_ids = max(T + a["ids_tokens"], 0)
    ids = make((t_ids, k), dt[a["ids_dtype"]], a["strided"] == "ids")
    weights = make((t_ids, k), dt[a["weights_dtype"]], False)
    scales = {}
    if a["scales"] == "one":
        scales["w1_scales"] = torch.empty(E, dtype=torch.float32, device=device)
    elif a["scales"] != "none" and fp8_shapes:
        for name, shape in fp8_shapes:
            shape = tuple(shape)
            if a["scales"] == "wrong-shape" and name == "w2_scales":
                shape = shape + (3,)
            dtype = torch.float16 if a["scales"] == "wrong-dtype" and name == "w1_scales" else torch.float32
            scales[name] = torch.empty(shape, dtype=dtype, device=device)
    return (x, w1, w2, weights, ids), scales


def _torch_call(torch, export, args, scales):
    try:
        y = torch.ops.flytune.moe_layer(*args, export.key, **scales)
    except CLEAR_ERRORS as e:
        _one_clear_line(e)
        return None
    except Exception as e:  # anything else is a bug: report it as one
        pytest.fail(f"{type(e).__name__} instead of a flytune error: {e}")
    assert tuple(y.shape) == tuple(args[0].shape) and y.dtype == args[0].dtype
    return y


@SETTINGS
@given(data=st.data())
def test_torch_op_meets_bad_input_with_one_clear_error(cpu_export, cpu_fp8_export, data):
    torch = framework("torch")
    import flytune.torch  # noqa: F401  (registers the op)
    export = data.draw(st.sampled_from([cpu_export, cpu_fp8_export]))
    problem = data.draw(st.sampled_from(export.problems))
    a = data.draw(_layer_args(problem, [p for p in export.problems if p.fp8]))
    fp8_shapes = None
    if a["fp8_mode"]:
        fp8_shapes = next(p.scale_shapes for p in export.problems if p.scales == a["fp8_mode"])
    device = data.draw(st.sampled_from(["meta", "meta", "cpu"]))
    args, scales = _torch_tensors(torch, a, device, fp8_shapes)
    y = _torch_call(torch, export, args, scales)
    if device == "cpu" and args[0].numel() > 0:
        assert y is None, "a CPU tensor reached a launch"


# ------------------------------------------------------------------------------------------------------ jax

def _jax_structs(jax, jnp, a, export, problem, fp8_shapes=None):
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32, "i32": jnp.int32, "i64": jnp.int32,
          "u8": jnp.uint8, "e4m3": jnp.float8_e4m3fn, "bool": jnp.bool_, "f64": jnp.float32}
    s = jax.ShapeDtypeStruct
    x_dtype = dt[a["x_dtype"]]
    w_dtype = x_dtype if a["w_dtype"] == "same" else dt[a["w_dtype"]]
    E, H, I, k, T = a["E"], a["H"], a["I"], a["k"], a["T"]
    x = s({2: (T, H), 1: (H,), 3: (1, T, H)}[a["x_rank"]], x_dtype)
    t_ids = max(T + a["ids_tokens"], 0)
    lead = (1,) if a["x_rank"] == 3 else ()
    ids = s(lead + (t_ids, k), dt[a["ids_dtype"]])
    weights = s(lead + (t_ids, k), dt[a["weights_dtype"]])
    w1 = s((E, 2 * I, H) if a["w_rank"] == 3 else (2 * I, H), w_dtype)
    w2 = s((E, H, I), w_dtype)
    copies = {n: (w1 if n.startswith("w1") else w2) for n in ("w1_shuffled", "w2_shuffled", "w1_tiled", "w2_tiled")
              if a["strided"] != "w1"}  # "strided" (JAX arrays have none): the copies left out instead
    scales, mode = {}, "none"
    if a["scales"] == "one":
        scales["w1_scales"] = s((E,), jnp.float32)
    elif a["scales"] != "none" and fp8_shapes:
        mode = a["fp8_mode"]
        for name, shape in fp8_shapes:
            shape = tuple(shape) + ((3,) if a["scales"] == "wrong-shape" and name == "w2_scales" else ())
            scales[name] = s(shape, jnp.float16 if a["scales"] == "wrong-dtype" and name == "w1_scales" else jnp.float32)
    import flytune.jax as fj
    mw = fj.MoeWeights(w1, w2, copies.get("w1_shuffled"), copies.get("w2_shuffled"), copies.get("w1_tiled"),
                       copies.get("w2_tiled"), export, x_scale=scales.get("x_scale"), w1_scales=scales.get("w1_scales"),
                       w2_scales=scales.get("w2_scales"), inter_scale=scales.get("inter_scale"), scales=mode)
    return x, ids, weights, mw


@SETTINGS
@given(data=st.data())
def test_jax_moe_layer_meets_bad_input_with_one_clear_error(cpu_export, cpu_fp8_export, data):
    jax = framework("jax")
    import jax.numpy as jnp
    import flytune.jax as fj
    export = data.draw(st.sampled_from([cpu_export, cpu_fp8_export]))
    problem = data.draw(st.sampled_from(export.problems))
    a = data.draw(_layer_args(problem, [p for p in export.problems if p.fp8]))
    fp8_shapes = None
    if a["fp8_mode"]:
        fp8_shapes = next(p.scale_shapes for p in export.problems if p.scales == a["fp8_mode"])
    x, ids, weights, mw = _jax_structs(jax, jnp, a, export, problem, fp8_shapes)
    try:
        y = jax.eval_shape(fj.moe_layer, x, ids, weights, mw)
    except CLEAR_ERRORS as e:
        _one_clear_line(e)
        return
    except Exception as e:
        pytest.fail(f"{type(e).__name__} instead of a flytune error: {e}")
    assert tuple(y.shape) == tuple(x.shape) and y.dtype == x.dtype
