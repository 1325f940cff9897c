"""The package without a framework: the shipped runtime, flytune.load and the runtime's errors."""
import ctypes
import json
import subprocess
import warnings

import pytest

import flytune
from conftest import REPO, cuda_devices


def _c_open_error(path) -> tuple:
    """ft_runtime_open of the shipped library through ctypes: (status, message)."""
    lib = ctypes.CDLL(flytune.library_path())
    rt = ctypes.c_void_p()
    err = ctypes.create_string_buffer(1024)
    st = lib.ft_runtime_open(str(path).encode(), ctypes.byref(rt), err, ctypes.c_size_t(len(err)))
    if st == 0:
        lib.ft_runtime_close(rt)
    return st, err.value.decode()


def test_ships_the_runtime_with_its_c_api():
    header = open(flytune.runtime_header()).read()
    assert header == (REPO / "runtime" / "include" / "flytune_runtime.h").read_text()
    symbols = subprocess.run(["nm", "-D", "--defined-only", flytune.library_path()], check=True,
                             capture_output=True, text=True).stdout.split()
    exported = {s.split("@")[0] for s in symbols if s.startswith("ft_")}  # each under its version (ft_x@@FLYTUNE_...)
    declared = {line.split("(")[0].split()[-1].lstrip("*") for line in header.splitlines()
                if line.startswith(("int ft_", "void ft_", "const char* ft_"))}
    assert declared and declared <= exported, declared - exported
    # Nothing of the libraries linked in (fmt, nlohmann_json, xxHash) leaks out.
    foreign = [s for s in symbols if len(s) > 2 and s[0] not in "TtWwDdBbRrVvUuAaiu" and not s.startswith("ft_")
               and "open_without_device" not in s and "device_selector_of" not in s]
    assert not any("fmt" in s or "nlohmann" in s or "XXH" in s for s in foreign), foreign


def test_load_lists_the_exports_problems_and_buckets(export_dir):
    e = flytune.load(export_dir, device="none")
    manifest = json.loads((export_dir / "manifest.json").read_text())
    assert e.target == manifest["target"]
    assert e.device == "none"
    assert [p.key for p in e.problems] == [p["key"] for p in manifest["problems"]]
    for p, m in zip(e.problems, manifest["problems"]):
        assert p.buckets == tuple(b["tokens"] for b in m["buckets"])
        assert (p.experts, p.hidden, p.inter, p.topk, p.dtype) == (m["experts"], m["hidden"], m["inter"], m["topk"],
                                                                   m["dtype"])


def test_plans_follow_the_selection_rule_and_size_the_workspace(cpu_export, export_dir):
    manifest = json.loads((export_dir / "manifest.json").read_text())
    for p, m in zip(cpu_export.problems, manifest["problems"]):
        by_tokens = {b["tokens"]: b for b in m["buckets"]}
        for t in (1, 2, p.buckets[-1] - 1, p.buckets[-1], p.buckets[-1] + 7, 3000):
            plan = cpu_export.plan(p.key, t)
            expected = next((b for b in p.buckets if b >= t), p.buckets[-1])
            assert plan["bucket"] == expected and plan["tokens"] == t
            bucket = by_tokens[expected]
            assert plan["w1_shuffled"] == (bucket["weights"]["w1"] == "shuffled")
            assert plan["w2_tiled"] == (bucket["weights"]["w2"] == "tiled")
            assert (plan["w1"], plan["w2"]) == (bucket["weights"]["w1"] == "plain", bucket["weights"]["w2"] == "plain")
            ws = plan["workspace"]
            if t == expected:  # the manifest records the program's buffer sizes at the bucket's T
                for name in ("inter", "y_acc", "sorted_ids", "block_experts", "padded_rows"):
                    assert ws["bytes"][name] == bucket["buffers_at_bucket"][name], name
            offsets = sorted((ws["offsets"][n], ws["bytes"][n]) for n in ws["offsets"])
            for (o1, b1), (o2, _) in zip(offsets, offsets[1:]):
                assert o1 % 256 == 0 and o1 + b1 <= o2
            assert offsets[-1][0] + offsets[-1][1] <= ws["total"]
        layouts = {f"{w}_{bucket['weights'][w]}" for bucket in m["buckets"] for w in ("w1", "w2")}
        assert set(cpu_export.weight_copies(p.key)) == {c for c in layouts if not c.endswith("plain")}
        assert set(cpu_export.weights_read(p.key)) == {c.replace("_plain", "") for c in layouts}


def test_the_plan_cache_is_bounded_over_many_token_counts(export_dir):
    """A server calls with a new T on most steps: the plans kept stay at PLAN_CACHE_PLANS (least recently
    used freed first), and a plan made again after its eviction answers as the first one did."""
    export = flytune.load(export_dir, device="none")  # its own cache
    bound = flytune.PLAN_CACHE_PLANS
    assert 16 <= bound <= 4096
    key = export.problems[0].key
    first = export.plan(key, 1)
    for t in range(1, 3 * bound + 1):
        export.plan(key, t)
        assert export.cached_plans() <= bound, f"{export.cached_plans()} plans cached after T=1..{t}"
    assert export.cached_plans() == bound
    assert export.plan(key, 1) == first  # evicted long ago, made again
    assert export.cached_plans() == bound


def test_the_coverage_warnings_remembered_are_bounded_too(export_dir):
    """Every T above the largest bucket warns once (flytune.CoverageWarning): an Export remembers the
    PLAN_CACHE_PLANS T it warned about last, so a server seeing ever new T holds a bounded set, and a T forgotten
    warns again when it comes back."""
    export = flytune.load(export_dir, device="none")
    bound = flytune.PLAN_CACHE_PLANS
    p = export.problems[0]
    above = [p.buckets[-1] + i for i in range(1, 3 * bound + 1)]

    def warned(tokens):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for t in tokens:
                export.plan(p.key, t)
        return [w for w in seen if issubclass(w.category, flytune.CoverageWarning)]

    assert len(warned(above)) == len(above)  # each T once
    assert len(export._coverage_warned) == bound
    assert warned(above[-bound:]) == []  # the last bound T are remembered (and stay so, most recent last)
    assert len(warned(above[:1])) == 1 and len(export._coverage_warned) == bound  # forgotten: warns again


def test_unknown_shapes_get_the_runtimes_answer(cpu_export):
    p = cpu_export.problems[0]
    with pytest.raises(flytune.NotFoundError) as e:
        cpu_export.find_problem(p.experts * 2, p.hidden, p.inter, p.topk, p.dtype)
    assert f"no tuned kernels for problem 'moe_e{p.experts * 2}_h{p.hidden}" in str(e.value)
    assert f"(the export has: {p.key})" in str(e.value)
    assert cpu_export.find_problem(p.experts, p.hidden, p.inter, p.topk, p.dtype) == p
    with pytest.raises(flytune.ArgumentError, match="token count 0 < 1"):
        cpu_export.plan(p.key, 0)


def test_plan_info_says_how_each_T_is_served(cpu_export):
    p = cpu_export.problems[0]
    top = p.buckets[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", flytune.CoverageWarning)  # a tuned T warns about nothing
        for t in (1, top - 1, top):
            plan = cpu_export.plan(p.key, t)
            assert plan["coverage"] == "tuned" and plan["coverage_note"] == "", t
    with pytest.warns(flytune.CoverageWarning, match=f"T={top + 3} is above the largest tuned bucket, T={top}"):
        above = cpu_export.plan(p.key, top + 3)
    assert above["coverage"] == "above_largest" and above["bucket"] == top
    assert above["coverage_note"].startswith(f"T={top + 3} is above the largest tuned bucket")
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        cpu_export.plan(p.key, top + 3)
    assert not [w for w in again if issubclass(w.category, flytune.CoverageWarning)], "warned twice for one plan"


def test_a_missing_bucket_is_served_by_another_and_says_so(export_copy):
    """An export written with --allow-missing: its largest bucket has no layer (missing_buckets)."""
    m = json.loads((export_copy / "manifest.json").read_text())
    buckets = m["problems"][0]["buckets"]
    top, below = buckets[-1]["tokens"], buckets[-2]["tokens"]
    del buckets[-1]
    m["problems"][0]["missing_buckets"] = [top]
    (export_copy / "manifest.json").write_text(json.dumps(m))
    e = flytune.load(export_copy, device="none")
    key = m["problems"][0]["key"]
    with pytest.warns(flytune.CoverageWarning, match=f"T={top} is served by the T={below} bucket's kernels"):
        plan = e.plan(key, top)
    assert plan["coverage"] == "missing_bucket" and plan["bucket"] == below
    assert f"bucket T={top} has no layer in this export" in plan["coverage_note"]
    assert e.plan(key, below)["coverage"] == "tuned"


@pytest.mark.parametrize("damage, error, message", [
    ("missing", flytune.FileError, "manifest.json is missing"),
    ("manifest", flytune.ManifestError, "manifest.json"),
    ("hash", flytune.HashError, "hash"),
    ("schema", flytune.ManifestError, "schema"),
])
def test_a_bad_export_raises_the_runtimes_message(export_copy, damage, error, message):
    if damage == "missing":
        (export_copy / "manifest.json").unlink()
    elif damage == "manifest":
        (export_copy / "manifest.json").write_text("{ not json")
    elif damage == "schema":
        m = json.loads((export_copy / "manifest.json").read_text())
        m["schema_version"] = 99
        (export_copy / "manifest.json").write_text(json.dumps(m))
    else:
        obj = next(export_copy.glob("*.cubin"), None) or next(export_copy.glob("*.hsaco"))
        data = bytearray(obj.read_bytes())
        data[len(data) // 2] ^= 0xFF
        obj.write_bytes(bytes(data))
    with pytest.raises(error) as e:
        flytune.load(export_copy, device="none")
    assert message in str(e.value)
    # The very message the C API gives (the device is only opened after these checks).
    status, c_message = _c_open_error(export_copy)
    assert status == error.status and str(e.value) == c_message


@pytest.mark.skipif(cuda_devices() > 0, reason="a GPU is present: load() opens it")
def test_load_without_a_gpu_raises_the_runtimes_device_error(export_dir):
    with pytest.raises(flytune.DeviceError) as e:
        flytune.load(export_dir)
    status, c_message = _c_open_error(export_dir)
    assert status == flytune.DeviceError.status and str(e.value) == c_message
    assert "no GPU found" in c_message
