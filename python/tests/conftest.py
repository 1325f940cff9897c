"""Fixtures of the Python package's tests (docs/PYTHON.md, scripts/python-test.sh).

The export they load is made by the flytune tool from tests/data/tiny_forms.db
(H200 winners of one small problem covering shuffled and tiled weights, split-K,
partials and persistent stages): $FLYTUNE_BIN, else build/release/cli/flytune.
$FLYTUNE_EXPORT_DIR replaces it with an export of your own (GPU runs).

The fp8 tests without a GPU load the export of tests/data/tiny_fp8.db: the CPU
emulator's sm_90a winners of one fp8 problem (E 4, H 128, I 256, k 2) in each
scale mode (per-tensor, per-token, block128), from `flytune search --emulate
--target sm_90a --dtype fp8 --scales MODE --space "small;wgmma_tile_m=64;
wgmma_tile_n=64;wgmma_stages=3;tile_m=32" --tokens 1 --no-baseline` per mode into
one database; it holds host libraries, so it is opened with device="none" or "emulate".

The tiny model's test on the CPU emulator loads the export of tests/data/tiny_emu_bf16.db: the emulator's
sm_90a winners of the tiny Mixtral's MoE problem (E 4, H 256, I 512, k 2, bf16), from `flytune search
--emulate --target sm_90a --dtype bf16 --experts 4 --hidden 256 --inter 512 --topk 2 --space "small;
wgmma_tile_m=64;wgmma_tile_n=64;wgmma_stages=3;tile_m=32" --tokens 1,8 --no-baseline`.

The training tests (test_train_jax.py, test_train_torch.py) load the export of tests/data/tiny_emu_train.db: a
small bf16 layer (E 4, H 64, I 64, k 2) with forward and backward buckets at T = 1 and 9, the CPU emulator's gfx950
winners of `flytune search --emulate --target gfx950 --experts 4 --hidden 64 --inter 64 --topk 2 --pass both
--space small --budget 1 --tokens 1,9 --seed 5` (committed rather than searched in each pytest session: the search
took 40-80 s of every session on two cores with a cold cache; the search itself is ctest's, BackwardExport and
SearchBackward). Re-make it with that command (--db tests/data/tiny_emu_train.db, then
`sqlite3 tests/data/tiny_emu_train.db 'PRAGMA journal_mode=DELETE; VACUUM'`) when the emulator's kernel
arguments change incompatibly. Its backward kernels were compiled by an earlier flytune, so its export cannot
promise that they write dW in 16 bits (kgrouped_args_bytes 88): the Python package's fp32 fallback. The 16-bit
weight gradients are tested on emu_train16_export_dir: the same problem searched in the session by this flytune
(one variant per kind and backward role, the backward bucket T = 9 alone: about 10 s on two cores with a warm
compile cache), whose export says 96.
"""
import importlib
import json
import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
# JAX would take 75% of the GPU's memory at start; the torch tests share the GPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _flytune_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("FLYTUNE_BIN", REPO / "build" / "release" / "cli" / "flytune"))
    if not path.is_file():
        pytest.fail(f"no flytune tool at {path} to make the test export: build it "
                    f"(cmake --build build/release --target flytune), or set FLYTUNE_BIN or FLYTUNE_EXPORT_DIR")
    return path


def _export_test_db(tmp_path_factory, db: str, folder: str) -> pathlib.Path:
    """tests/data/<db> exported (without a check) into a fresh folder <folder>."""
    out = tmp_path_factory.mktemp("export") / folder
    subprocess.run([str(_flytune_bin()), "export", "--db", str(REPO / "tests" / "data" / db), "--out", str(out),
                    "--check", "none"], check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory) -> pathlib.Path:
    given = os.environ.get("FLYTUNE_EXPORT_DIR")
    if given:
        return pathlib.Path(given)
    return _export_test_db(tmp_path_factory, "tiny_forms.db", "tiny")


@pytest.fixture(scope="session")
def fp8_export_dir(tmp_path_factory) -> pathlib.Path:
    return _export_test_db(tmp_path_factory, "tiny_fp8.db", "tiny_fp8")


@pytest.fixture(scope="session")
def emu_export_dir(tmp_path_factory) -> pathlib.Path:
    """The tiny Mixtral's MoE problem (E 4, H 256, I 512, k 2, bf16) searched on the CPU emulator (host libraries:
    opened with device="emulate" or "none")."""
    return _export_test_db(tmp_path_factory, "tiny_emu_bf16.db", "tiny_emu")


@pytest.fixture(scope="session")
def emu_fp8_export_dir(tmp_path_factory) -> pathlib.Path:
    """The tiny Mixtral's MoE problem with fp8 per-tensor experts (E 4, H 256, I 512, k 2, e4m3) searched on the
    CPU emulator at T = 1, 8 (tests/data/tiny_emu_fp8.db)."""
    return _export_test_db(tmp_path_factory, "tiny_emu_fp8.db", "tiny_emu_fp8")


@pytest.fixture(scope="session")
def emu_train_export_dir(tmp_path_factory) -> pathlib.Path:
    """A bf16 layer (E 4, H 64, I 64, k 2) with forward and backward buckets at T = 1 and 9, searched on the CPU
    emulator of gfx950 (tests/data/tiny_emu_train.db) and exported (host libraries: opened with device="emulate" or
    "none")."""
    return _export_test_db(tmp_path_factory, "tiny_emu_train.db", "tiny_emu_train")


@pytest.fixture(scope="session")
def emu_train16_export_dir(tmp_path_factory) -> pathlib.Path:
    """tests/data/tiny_emu_train.db's problem searched now (`flytune search --emulate --pass both`, backward
    bucket T = 9) and exported: backward kernels compiled from this flytune's templates, which write dW1 and dW2
    in the weights' type when asked (the plan's backward "dw16")."""
    folder = tmp_path_factory.mktemp("train16")
    db, out = folder / "train16.db", folder / "tiny_emu_train16"
    search = [str(_flytune_bin()), "search", "--emulate", "--target", "gfx950", "--experts", "4", "--hidden", "64",
              "--inter", "64", "--topk", "2", "--pass", "both", "--space", "small", "--strategy", "random",
              "--budget", "1", "--tokens", "9", "--seed", "5", "--no-baseline", "--db", str(db)]
    for command in (search, [str(_flytune_bin()), "export", "--db", str(db), "--out", str(out), "--check", "none"]):
        r = subprocess.run(command, capture_output=True, text=True)
        assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-2000:])
    return out


def train_model_config():
    """The two-layer model of the training-step tests (test_train_model.py, test_train_model_torch.py): its MoE
    layer is the training export's problem, the rest as small as the attention allows."""
    from flytune.models.config import Config
    return Config(vocab=128, hidden=64, inter=64, layers=2, heads=4, kv_heads=2, head_dim=16, experts=4, topk=2,
                  rope_theta=1e4)


@pytest.fixture(scope="session")
def emu_train_model_export(emu_train_export_dir):
    """The training export opened on the CPU emulator, checked to be train_model_config()'s MoE problem."""
    import flytune
    c = train_model_config()
    export = flytune.load(emu_train_export_dir, device="emulate")
    (p,) = export.problems
    assert (p.experts, p.hidden, p.inter, p.topk, p.dtype) == (c.experts, c.hidden, c.inter, c.topk, "bf16")
    assert p.has_backward
    return export


@pytest.fixture(scope="session")
def cpu_fp8_export(fp8_export_dir):
    import flytune
    return flytune.load(fp8_export_dir, device="none")


@pytest.fixture()
def export_copy(export_dir, tmp_path) -> pathlib.Path:
    """A copy of the export to damage."""
    dst = tmp_path / "copy"
    shutil.copytree(export_dir, dst)
    return dst


@pytest.fixture(scope="session")
def cpu_export(export_dir):
    import flytune
    return flytune.load(export_dir, device="none")


def framework(name: str):
    """Imports jax or torch; where scripts/python-test.sh installed it (FLYTUNE_EXPECT_<NAME>=1) a failed
    import fails the tests instead of skipping them."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if os.environ.get(f"FLYTUNE_EXPECT_{name.upper()}") == "1":
            pytest.fail(f"{name} was expected (FLYTUNE_EXPECT_{name.upper()}=1) but does not import: {e}")
        pytest.skip(f"{name} is not installed: {e}", allow_module_level=True)  # also at a module's top


def cuda_devices() -> int:
    """Visible NVIDIA GPUs, through the driver (no framework needed)."""
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    n = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return 0
    return n.value


def run_driver(main, tmp_path, *args, name="run.json") -> dict:
    """A model driver's main (flytune-mixtral's or flytune-mixtral-torch's) on the tiny config, batch 2 x prompt
    16, 8 new tokens, one repeat, and more `args`: its --json, after it exited 0."""
    out = tmp_path / name
    assert main(["--config", "tiny", "--batch", "2", "--prompt-len", "16", "--new-tokens", "8", "--repeats", "1",
                 "--json", str(out), "--no-progress", *args]) == 0
    return json.loads(out.read_text())


def check_two_implementations(r: dict, first: str, second: str) -> None:
    """run_driver's result of --impl first,second: a row each, the second's last logits within 3e-2 relative L2
    of the first's and their greedy tokens equal for the first 4 of 9 (the drivers' bf16 bound), tokens/s and the
    time per part measured."""
    assert [(x["impl"], x["batch"], x["prompt_len"]) for x in r["runs"]] == [(first, 2, 16), (second, 2, 16)]
    a = r["runs"][1]["agreement"]
    assert a["vs"] == first and a["logits_rel_l2"] < 3e-2 and a["tokens_equal_steps"] >= 4, a
    for x in r["runs"]:
        assert x["prefill_tokens_per_s"] > 0 and x["decode_tokens_per_s"] > 0
        assert set(x["parts"]) == {"prefill", "decode"} and x["parts"]["decode"]["moe_s"]["median"] > 0
