"""fp8 exports without a framework or a GPU: what the binding reports of an fp8 problem and plan (against the
manifest the export wrote), problems found by scale mode, the scale pointers reaching the runtime, and
flytune.fp8_ocp_to_fnuz on known codes."""
import json
import math

import numpy as np
import pytest

import flytune

MODES = ("per-tensor", "per-token", "block128")


def _manifest_problems(export_dir) -> dict:
    return {p["key"]: p for p in json.loads((export_dir / "manifest.json").read_text())["problems"]}


def _problem(export, mode) -> flytune.Problem:
    (p,) = [p for p in export.problems if p.scales == mode]
    return p


@pytest.mark.parametrize("mode", MODES)
def test_problems_and_plans_report_the_scales_as_the_manifest_has_them(cpu_fp8_export, fp8_export_dir, mode):
    p = _problem(cpu_fp8_export, mode)
    m = _manifest_problems(fp8_export_dir)[p.key]
    assert (p.dtype, p.element_bytes, p.scales, p.fp8) == ("e4m3", 1, m["scales"], True)
    tensors = m["fp8"]["scale_tensors"]
    assert dict(p.scale_shapes) == {name: tuple(t["shape"]) for name, t in tensors.items()}
    assert ("x_scale" in tensors) == (mode == "per-tensor")
    for t in (1, 7, 300):
        plan = cpu_fp8_export.plan(p.key, t)
        assert (plan["dtype"], plan["element_bytes"], plan["scales"]) == ("e4m3", 1, mode)
        assert {n: tuple(s) for n, s in plan["scale_shapes"].items()} == dict(p.scale_shapes)
        # fp8 plans carve their quantise buffers from the one workspace too
        assert {"xq", "inter_q", "inter_scales"} <= set(plan["workspace"]["bytes"])


def test_sixteen_bit_problems_report_no_scales(cpu_export):
    for p in cpu_export.problems:
        assert (p.scales, p.scale_shapes, p.element_bytes, p.fp8) == ("none", (), 2, False)
        plan = cpu_export.plan(p.key, 5)
        assert (plan["scales"], plan["scale_shapes"], plan["element_bytes"]) == ("none", {}, 2)


def test_problems_are_found_by_scale_mode(cpu_fp8_export):
    for mode in MODES:
        assert cpu_fp8_export.find_problem(4, 128, 256, 2, "e4m3", scales=mode) == _problem(cpu_fp8_export, mode)
    with pytest.raises(flytune.NotFoundError, match=r"'moe_e4_h128_i256_k2_e4m3_swiglu_uniform' \(the export has: "):
        cpu_fp8_export.find_problem(4, 128, 256, 2, "e4m3")  # no scale mode: a 16-bit-style key
    with pytest.raises(flytune.NotFoundError, match=r"'moe_e8_h128_i256_k2_e4m3:block128_swiglu_uniform'"):
        cpu_fp8_export.find_problem(8, 128, 256, 2, "e4m3", scales="block128")


@pytest.mark.parametrize("mode", MODES)
def test_the_scales_reach_the_runtime(cpu_fp8_export, mode):
    # Without a device the runtime checks the buffers, then refuses to run: missing scales are named by its
    # buffer check, a call with all of them gets as far as "no device".
    p = _problem(cpu_fp8_export, mode)
    plan = cpu_fp8_export.plan(p.key, 3)
    fake = 1 << 20  # never dereferenced: the runtime stops before any launch
    scales = {n: fake for n in dict(p.scale_shapes)}

    def launch(**given):
        cpu_fp8_export._core.launch("none", p.key, 3, fake, fake, fake, fake, fake, 0, 0, 0, 0, fake,
                                    plan["workspace"]["total"], fake, 0, **given)

    with pytest.raises(flytune.DeviceError, match="no device"):
        flytune._call(launch, **scales)
    for name in scales:
        with pytest.raises(flytune.ArgumentError, match=f"null layer buffers: {name}"):
            flytune._call(launch, **{n: v for n, v in scales.items() if n != name})


# fp8_ocp_to_fnuz: the same bits mean half the value in fnuz, so codes stay and scales double.
def _e4m3(code: int, bias: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    return sign * (math.ldexp(m / 8, 1 - bias) if e == 0 else math.ldexp(1 + m / 8, e - bias))


def ocp(code):  # float8_e4m3fn: bias 7, S.1111.111 is NaN
    return math.nan if code & 0x7F == 0x7F else _e4m3(code, 7)


def fnuz(code):  # float8_e4m3fnuz: bias 8, 0x80 is the only NaN
    return math.nan if code == 0x80 else _e4m3(code, 8)


def test_ocp_to_fnuz_converts_known_codes_in_place():
    codes = np.array([0x00, 0x80, 0x7F, 0xFF, 0x38, 0xB8, 0x7E, 0x01], np.uint8)
    scales = np.array([0.5, 3.0], np.float32)
    nans = flytune.fp8_ocp_to_fnuz(codes, scales)
    assert nans == 2
    assert codes.tolist() == [0x00, 0x00, 0x80, 0x80, 0x38, 0xB8, 0x7E, 0x01]
    assert scales.tolist() == [1.0, 6.0]
    assert (ocp(0x38), fnuz(0x38), ocp(0x7E), fnuz(0x7E)) == (1.0, 0.5, 448.0, 224.0)


def test_ocp_to_fnuz_keeps_every_value():
    codes = np.arange(256, dtype=np.uint8)
    scale = np.array([0.375], np.float32)
    out_codes, out_scale = codes.copy(), scale.copy()
    assert flytune.fp8_ocp_to_fnuz(out_codes, out_scale) == 2
    for c, o in zip(codes.tolist(), out_codes.tolist()):
        want, got = ocp(c) * float(scale[0]), fnuz(o) * float(out_scale[0])
        assert (math.isnan(want) and math.isnan(got)) or want == got, (hex(c), hex(o), want, got)


def test_ocp_to_fnuz_refuses_bad_arrays_and_changes_nothing():
    codes = np.array([0x38, 0x80], np.uint8)
    huge = np.array([1.0, 3e38], np.float32)
    with pytest.raises(flytune.ArgumentError, match="ft_fp8_ocp_to_fnuz"):
        flytune.fp8_ocp_to_fnuz(codes, huge)
    assert codes.tolist() == [0x38, 0x80] and huge.tolist() == [1.0, np.float32(3e38)]
    with pytest.raises(flytune.ArgumentError, match="codes must be uint8 or float8_e4m3fn, got int8"):
        flytune.fp8_ocp_to_fnuz(codes.view(np.int8), np.ones(1, np.float32))
    with pytest.raises(flytune.ArgumentError, match="scales must be float32, got float64"):
        flytune.fp8_ocp_to_fnuz(codes, np.ones(1))
    with pytest.raises(flytune.ArgumentError, match="C-contiguous and writable"):
        flytune.fp8_ocp_to_fnuz(np.zeros(8, np.uint8)[::2], np.ones(1, np.float32))
    with pytest.raises(flytune.ArgumentError, match="numpy array or a torch CPU tensor, got list"):
        flytune.fp8_ocp_to_fnuz([0x38], np.ones(1, np.float32))


def _shaped(mode, shapes) -> flytune.Problem:
    return flytune.Problem(key=f"moe_e8_h256_i512_k2_e4m3:{mode}_swiglu_uniform", experts=8, hidden=256, inter=512,
                           topk=2, dtype="e4m3", buckets=(1,), element_bytes=1, scales=mode,
                           scale_shapes=tuple(shapes))


# per-tensor and static layers read the same weight scales: the one check of both wrappers tells them apart by
# inter_scale (given: static, [1] or 0-dim; not given: per-tensor) and refuses it where the layer reads none.
@pytest.mark.parametrize("inter, candidates, want", [
    (None, ("per-tensor", "static"), "per-tensor"),
    ((1,), ("per-tensor", "static"), "static"),
    ((), ("per-tensor", "static"), "static"),
    (None, ("static",), "needs inter_scale [1] float32"),
    ((1,), ("per-tensor",), "inter_scale given, but"),
    ((2,), ("static",), "inter_scale must be [1]"),
])
def test_static_and_per_tensor_are_told_apart_by_inter_scale(inter, candidates, want):
    tensor = [("x_scale", (1,)), ("w1_scales", (8,)), ("w2_scales", (8,))]
    problems = {"per-tensor": _shaped("per-tensor", tensor), "static": _shaped("static", tensor + [("inter_scale", (1,))])}
    given = {"x_scale": ((1,), "float32"), "w1_scales": ((8,), "float32"), "w2_scales": ((8,), "float32")}
    if inter is not None:
        given["inter_scale"] = (inter, "float32")
    cands = [problems[m] for m in candidates]
    if want in MODES + ("static",):
        assert flytune._scaled_problem(cands, "ctx", given).scales == want
    else:
        with pytest.raises(flytune.ArgumentError, match=want.replace("[", r"\[").replace("]", r"\]")):
            flytune._scaled_problem(cands, "ctx", given)
