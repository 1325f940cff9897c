"""bench/backward_peers.py on the CPU (no GPU needed; a few seconds): the backward's floors
on known shapes, the torch._grouped_mm peer's autograd gradients (torch._grouped_mm runs on
the CPU in torch 2.11, scripts/python-test.sh's) and the jax.lax.ragged_dot peer's VJP on
tiny shapes against the fp32 reference, the check catching wrong gradients, the parsing of a
`flytune search --json` summary's backward and forward winners, bad input, and the Markdown
table from fake timings. Skips where torch (or, for the VJP, jax) is not importable, unless
FLYTUNE_EXPECT_TORCH / FLYTUNE_EXPECT_JAX say it was installed (CI's step 3): then it fails."""
import json
import math
import pathlib
import subprocess
import sys

import pytest
from conftest import framework

torch = framework("torch")  # skips where torch is missing, fails where scripts/python-test.sh installed it
BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import backward_peers as bp  # noqa: E402
import h200_peers as hp  # noqa: E402

MIXTRAL = hp.Shape("mixtral-8x7b", 8, 4096, 14336, 2)
CEIL = {"gemm": 8e14, "copy": 4.5e12}

# (shape, T, FLOPs, bytes, floor us at CEIL), worked by hand:
#   FLOPs = 12 T k H I; bytes = 2 x active x 3 H I x 2 + 3 T H x 2, active = E (1 - (1 - k/E)^T)
#   T = 4096: active = 8, 12*4096*2*4096*14336 FLOPs, 2*8*3*4096*14336*2 + 3*4096*4096*2 bytes: FLOP-bound
#   T = 1: active = 8 * (1 - 6/8) = 2, 2*2*3*4096*14336*2 + 3*4096*2 bytes: byte-bound
FLOORS = [
    (MIXTRAL, 4096, 5_772_436_045_824, 5_737_807_872, 5_772_436_045_824 / 8e14 * 1e6),
    (MIXTRAL, 1, 1_409_286_144, 1_409_310_720, 1_409_310_720 / 4.5e12 * 1e6),
    (hp.Shape("qwen3-30b", 128, 2048, 768, 8), 1, 12 * 8 * 2048 * 768, 2 * 8 * 3 * 2048 * 768 * 2 + 3 * 2048 * 2,
     (2 * 8 * 3 * 2048 * 768 * 2 + 3 * 2048 * 2) / 4.5e12 * 1e6),
]


@pytest.mark.parametrize("shape,T,flops,bytes_,floor", FLOORS, ids=["mixtral-4096", "mixtral-1", "qwen3-30b-1"])
def test_backward_floor_on_known_shapes(shape, T, flops, bytes_, floor):
    got_flops, got_bytes = bp.backward_work(shape, T)
    assert got_flops == flops
    assert got_bytes == pytest.approx(bytes_, rel=1e-9)
    assert bp.backward_floor_us(shape, T, CEIL) == pytest.approx(floor, rel=1e-9)
    assert got_flops == 2 * hp.layer_work(shape, T)[0]  # the backward's FLOPs are twice the forward's


def test_presets_come_from_generator_problem_cpp():
    s = hp.preset_shape("qwen3-30b")
    assert (s.E, s.H, s.I, s.K) == (128, 2048, 768, 8)
    assert hp.preset_shape("t:4:32:16:2") == hp.Shape("t", 4, 32, 16, 2)
    with pytest.raises(SystemExit, match="no preset 'nope'"):
        hp.preset_shape("nope")


# Tiny layers: uniform routing over every expert, and E = 8 with T = 2 (top-2): at least
# four experts get no token.
TINY = [(hp.Shape("t", 4, 32, 16, 2), 9), (hp.Shape("empty", 8, 32, 16, 2), 2), (hp.Shape("k4", 6, 64, 32, 4), 5)]


def tiny(shape, T, seed=0):
    inp = bp.layer_inputs(shape, T, torch.Generator().manual_seed(seed))
    return inp, bp.reference_grads(inp)


def test_the_fp32_reference_layer_is_the_forward_reference():
    """layer_fp32 (the gradients' reference) against h200_peers.reference, written apart
    (it rounds h to bf16, hence the bound); a wrong expert's weights are far off."""
    inp, _ = tiny(*TINY[0])
    args = [inp["x"].float(), inp["ids"], inp["w"], inp["w1"].float(), inp["w2"].float()]
    y = bp.layer_fp32(*args)
    ref = hp.reference(inp["x"], inp["ids"], inp["w"], inp["w1"], inp["w2"])
    assert hp.rel_l2(y, ref) < 1e-2
    args[3] = args[3].roll(1, dims=0)
    assert hp.rel_l2(bp.layer_fp32(*args), ref) > 0.3


def grouped_mm_runs_on_cpu():
    try:
        a, b = torch.ones(4, 16, dtype=torch.bfloat16), torch.ones(2, 16, 16, dtype=torch.bfloat16)
        torch._grouped_mm(a, b, offs=torch.tensor([1, 4], dtype=torch.int32))
        return True
    except (AttributeError, RuntimeError):
        return False


@pytest.mark.skipif(not grouped_mm_runs_on_cpu(), reason=f"torch {torch.__version__}: no torch._grouped_mm on the CPU")
@pytest.mark.parametrize("shape,T", TINY, ids=[s.name for s, _ in TINY])
def test_torch_grouped_mm_autograd_matches_the_reference(shape, T):
    inp, ref = tiny(shape, T)
    backward, names = bp.torch_backward(inp)
    grads = dict(zip(names, backward()))
    check = bp.check_grads(grads, ref)
    assert bp.verdict(check) is None, check
    assert set(check["rel"]) == {"dx", "dw1", "dw2", "dw"} and check["worst"] > 0
    again = dict(zip(names, backward()))  # the retained graph runs again (as the timed loop does)
    assert all(torch.equal(again[k], grads[k]) for k in grads)


@pytest.mark.parametrize("shape,T", TINY, ids=[s.name for s, _ in TINY])
def test_jax_ragged_dot_vjp_matches_the_reference(shape, T):
    jax = framework("jax")
    inp, ref = tiny(shape, T)
    vjp, to_torch = bp.jax_vjp(inp)
    grads = to_torch(jax.block_until_ready(vjp()))
    assert {k: tuple(v.shape) for k, v in grads.items()} == {k: tuple(v.shape) for k, v in ref.items()}
    check = bp.check_grads(grads, ref)
    assert bp.verdict(check) is None, check


def mutants(grads):
    """Gradients a broken backward would give: one expert's dW1 from another, d(topk_weights)
    of the other slot, dX scaled, dW2 left out, a NaN."""
    m = lambda k, v: {**grads, k: v}
    nan = grads["dx"].clone()
    nan[0, 0] = math.nan
    out = {k: v for k, v in grads.items() if k != "dw2"}
    return {"dw1 rolled": m("dw1", grads["dw1"].roll(1, dims=0)), "dw slots swapped": m("dw", grads["dw"].flip(1)),
            "dx x1.1": m("dx", grads["dx"] * 1.1), "dw2 missing": out, "dx nan": m("dx", nan)}


@pytest.mark.parametrize("mutant", ["dw1 rolled", "dw slots swapped", "dx x1.1", "dw2 missing", "dx nan"])
def test_the_check_refuses_wrong_gradients(mutant):
    inp, ref = tiny(*TINY[0])
    exact = {k: v.clone() for k, v in ref.items()}
    assert bp.verdict(bp.check_grads(exact, ref)) is None
    text = bp.verdict(bp.check_grads(mutants(exact)[mutant], ref))
    assert text and text.startswith("wrong: rel L2 ") and text.endswith(f"> {bp.BOUND:g}")
    assert bp.GRADS[mutant.split()[0]] in text


def summary(winners):
    """A `flytune search --pass both --json` summary in search/search.cpp's shape."""
    return {"run_id": 3, "db": "x.db", "device": "cuda:0", "interrupted": False, "measurements": 12, "resumed": False,
            "seconds": 40.0, "dry_run": False, "notes": [], "targets": [], "missing_layers": [], "gpus": [],
            "winners": [{"tokens": t, "pass": p, "kind": k, "kernel": n, "median_us": us, "p10_us": us, "p90_us": us}
                        for t, p, k, n, us in winners]}


SUMMARY = summary([(4096, "forward", "moe1", "ft_s1", 100.0), (4096, "forward", "layer", "ft_fwd_4096", 900.0),
                   (4096, "backward", "layer", "ft_dgrad2+ft_dgrad1+ft_kg+ft_kg", 2100.0),
                   (16384, "backward", "layer", "ft_bwd_16384", 7000.0)])


def test_flytune_summary_backward_and_forward_layer_winners(tmp_path):
    times = bp.flytune_times(SUMMARY, "s.json")
    assert times == {4096: {"forward": {"us": 900.0, "kernel": "ft_fwd_4096"},
                            "backward": {"us": 2100.0, "kernel": "ft_dgrad2+ft_dgrad1+ft_kg+ft_kg"}},
                     16384: {"backward": {"us": 7000.0, "kernel": "ft_bwd_16384"}}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SUMMARY))
    assert bp.flytune_for([f"qwen3-30b={path}"], "qwen3-30b", "mixtral-8x7b") == times
    assert bp.flytune_for([f"qwen3-30b={path}"], "mixtral-8x7b", "mixtral-8x7b") == {}
    assert bp.flytune_for([str(path)], "mixtral-8x7b", "mixtral-8x7b") == times  # bare PATH: the first problem


@pytest.mark.parametrize("content,message", [
    ("{not json", "Expecting property name"), (json.dumps({"targets": []}), "no winners list"),
    (json.dumps(summary([(1, "backward", "layer", "k", None)])), "lacks tokens, median_us or kernel")])
def test_a_bad_flytune_summary_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(SystemExit, match=message):
        bp.flytune_for([f"mixtral-8x7b={path}"], "mixtral-8x7b", "mixtral-8x7b")


@pytest.mark.parametrize("args,message", [(["--problems", "nope"], "no preset 'nope'"),
                                          (["--tokens", "4096,x"], "not a list of positive integers"),
                                          (["--tokens", "0"], "not a list of positive integers"),
                                          (["--flytune-json", "/nonexistent.json"], "No such file"),
                                          (["--flytune-json", "olmoe=/x.json"], "'olmoe' is not one of --problems")])
def test_bad_command_lines_stop_before_any_gpu_work(tmp_path, monkeypatch, args, message):
    monkeypatch.setattr(sys, "argv", ["backward_peers.py", "--out", str(tmp_path / "b.md"), *args])
    with pytest.raises(SystemExit, match=message) as e:
        bp.main()
    assert "\n" not in str(e.value.code) and not (tmp_path / "b.md").exists()


def test_the_process_prints_one_line_and_exits_1(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH / "backward_peers.py"), "--out", str(tmp_path / "b.md"), "--problems",
                        "nope"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "backward_peers.py: no preset 'nope' in generator/problem.cpp (or give name:E:H:I:K)"], r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here")
def test_without_a_gpu_the_bench_says_so_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH / "backward_peers.py"), "--out", str(tmp_path / "b.md")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip() == ("backward_peers: no CUDA GPU (this bench runs on one; its CPU "
                                                      "tests: python/tests/test_bench_backward.py)"), r.stderr
    assert not (tmp_path / "b.md").exists()


def test_markdown_table_from_fake_timings():
    floor = bp.backward_floor_us(MIXTRAL, 4096, CEIL)
    fwd_floor = hp.floor_us(MIXTRAL, 4096, CEIL["gemm"], CEIL["copy"])
    rel = {"dx": 4e-3, "dw1": 5e-3, "dw2": 3e-3, "dw": 2e-3}
    row = {"T": 4096, "floor": floor, "fwd_floor": fwd_floor, "flytune": 2 * floor, "flytune_kernel": "ft_bwd",
           "flytune_fwd": 2 * fwd_floor, "torch": {"us": 2.6 * floor, "how": "graph", "rel": rel, "worst": 5e-3},
           "jax": {"us": 5 * floor, "how": "host", "rel": rel, "worst": 4e-3}}
    wrong = {"T": 16384, "floor": 4 * floor, "fwd_floor": 4 * fwd_floor, "flytune": None, "flytune_fwd": None,
             "torch": {"wrong": "wrong: rel L2 dW1 3.0e-02 > 0.02"}, "jax": {"error": "RESOURCE_EXHAUSTED: out of memory"}}
    skipped = {"T": 65536, "floor": 16 * floor, "fwd_floor": 16 * fwd_floor, "flytune": 20 * floor, "flytune_fwd": None,
               "skipped": "no time left in --budget-s"}
    report = {"date": "d", "gpu": "NVIDIA H200", "torch": "2.11", "jax": "0.10.2", "command": "python3 bench/backward_peers.py",
              "ceilings": CEIL, "problems": [{"name": "mixtral-8x7b", "shape": vars(MIXTRAL), "rows": [row, wrong, skipped]},
                                              {"name": "qwen3-30b", "shape": vars(hp.preset_shape("qwen3-30b")), "rows": [],
                                               "skipped": "no time left in --budget-s"}]}
    md = bp.markdown(report)
    assert "### mixtral-8x7b (E 8, H 4096, I 14336, top-2)" in md
    both = floor + fwd_floor
    assert (f"| 4096 | {floor:.0f} | {2 * floor:.1f} (50%) | {2.6 * floor:.1f} (38%, 5.0e-03) | {5 * floor:.1f} (20%, 4.0e-03) "
            f"| 1.30x | 2.50x | {both:.0f} | {2 * both:.1f} (50%) |") in md
    assert (f"| 16384 | {4 * floor:.0f} | - | wrong: rel L2 dW1 3.0e-02 > 0.02 | RESOURCE_EXHAUSTED: out of memory "
            f"| - | - | {4 * both:.0f} | - |") in md
    assert f"| 65536 | {16 * floor:.0f} | {20 * floor:.1f} (80%) | " + " | ".join(["no time left in --budget-s"] * 4) in md
    assert "flytune's backward winners (tokens: program): 4096: `ft_bwd`." in md
    assert "### qwen3-30b (E 128, H 2048, I 768, top-8)\n\nNot measured: no time left in --budget-s." in md
    eager = dict(row, torch=dict(row["torch"], how="eager (capture refused: operation not permitted)"))
    assert "38%, 5.0e-03, eager (capture refused: operation not permitted))" in bp.problem_table({"rows": [eager]})[2]


class Args:
    skip_torch, skip_jax = True, False


class Left:
    """A budget clock with `seconds` left."""
    def __init__(self, seconds):
        self.seconds = seconds

    def left(self):
        return self.seconds


def test_a_row_on_the_cpu_fills_flytune_jax_and_skips_what_the_budget_leaves_out():
    """bench_row as main runs it, on the CPU (the torch peer needs CUDA streams: left out):
    the summary's times, the floors, the VJP checked and timed; then the budget's cuts."""
    framework("jax")
    shape, T = TINY[0]
    flytune = bp.flytune_times(summary([(T, "backward", "layer", "ft_b", 30.0), (T, "forward", "layer", "ft_f", 10.0)]), "s")
    row = bp.bench_row(shape, T, CEIL, flytune, Args, Left(1e9), torch.Generator().manual_seed(0))
    assert (row["flytune"], row["flytune_kernel"], row["flytune_fwd"], row["flytune_fwd_kernel"]) == (30.0, "ft_b", 10.0, "ft_f")
    assert row["floor"] == bp.backward_floor_us(shape, T, CEIL) and "torch" not in row and "skipped" not in row
    assert row["jax"]["us"] > 0 and row["jax"]["worst"] < bp.BOUND and row["jax"]["how"] == "host", row["jax"]
    late = bp.bench_row(shape, T, CEIL, {}, Args, Left(25), torch.Generator().manual_seed(0))
    assert late["jax"] == {"error": "no time left in --budget-s"} and late["flytune"] is None
    assert bp.bench_row(shape, T, CEIL, {}, Args, Left(5), torch.Generator())["skipped"] == "no time left in --budget-s"
