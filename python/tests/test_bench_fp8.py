"""bench/triton_moe_fp8.py on the CPU: its Triton kernels under TRITON_INTERPRET=1 on
a tiny problem against the fp32 reference from the dequantised inputs, for both
scale modes, and mutations the check must catch (a wrong block-scale index, a
wrong expert scale). Skips where torch or triton is not importable (triton comes
with torch 2.11's Linux wheel in scripts/python-test.sh's step 3; it is not added
anywhere). Nothing here needs a GPU: about 5 s on one core."""
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("triton", reason="triton is not installed (the fp8 bench's kernels need it)")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import triton_moe_fp8 as fp8  # noqa: E402

# @triton.jit (triton.language's own builtins included) reads TRITON_INTERPRET when
# triton is imported, so the kernel tests run in a fresh process of their own with it
# set; this session's triton stays compiled (torch.compile on a GPU in test_gpu.py).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in test_kernels_under_the_interpreter's process")


@pytest.mark.skipif(INTERPRETED, reason="this is that process")
def test_kernels_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", __file__],
                       cwd=pathlib.Path(__file__).parent, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "runs in test_kernels" not in r.stdout, r.stdout[-2000:]


E, H, I, TOPK, T = 4, 256, 256, 2, 5
BOUND = 1e-3
CFG = (16, 64, 128, 4, 1)  # stage 2 of block128 with BLOCK_N 64 < 128: two N-tiles share a weight scale


def problem(mode, seed=0):
    """Inputs with weight magnitudes that differ a lot between experts and between
    128x128 blocks, so a scale read from the wrong expert or block is far off."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    logits = torch.randn(T, E, generator=g)
    w, ids = torch.topk(torch.softmax(logits, -1), TOPK, dim=-1)
    w = (w / w.sum(-1, keepdim=True)).float().contiguous()
    ids = ids.to(torch.int32)

    def weights(n, k):
        base = torch.randn(E, n, k, generator=g) / k ** 0.5
        spread = torch.exp2(torch.randint(-3, 4, (E, n // 128, 1, k // 128, 1), generator=g).float())
        return (base.view(E, n // 128, 128, k // 128, 128) * spread).view(E, n, k)

    w1f, w2f = weights(2 * I, H), weights(H, I)
    if fp8._mode(mode) == "per-tensor":  # static: per-tensor's layer and scales
        (w1, s1), (w2, s2) = fp8.quantise_per_expert(w1f), fp8.quantise_per_expert(w2f)
        scales = {"x": fp8.quantise_per_tensor(x)[1], "w1": s1, "w2": s2}
        scales["h"] = fp8.calibrate_h_scale(x, ids, w1, scales)
    else:
        (w1, s1), (w2, s2) = fp8.quantise_blocks(w1f), fp8.quantise_blocks(w2f)
        scales = {"w1": s1, "w2": s2}
    return x, ids, w, w1, w2, scales


@interpreted
@pytest.mark.parametrize("mode", fp8.MODES)
def test_layer_matches_the_dequantised_reference(mode):
    x, ids, w, w1, w2, scales = problem(mode)
    ref = fp8.reference(mode, x, ids, w, w1, w2, scales)
    out = fp8.moe_layer(mode, x, ids, w, w1, w2, scales, CFG)
    assert out.shape == (T, H) and out.dtype == torch.bfloat16
    dis, rel = fp8.agreement(out, ref)
    assert dis < BOUND, f"{mode}: 1 - 2<x,y>/(|x|^2+|y|^2) = {dis:.2e}, rel L2 {rel:.2e}"
    assert rel < 5e-2, f"{mode}: rel L2 {rel:.2e}"


@interpreted
def test_the_x_quantise_kernel_gives_the_torch_helpers_values():
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(T, H, generator=g) * torch.exp2(torch.arange(H) % 9 - 4.0)).to(torch.bfloat16)
    x[1, :128] = 0  # an all-zero group
    q, s = fp8.quantise_x(x)
    want_q, want_s = fp8.quantise_groups(x)
    assert torch.equal(s, want_s) and torch.equal(q.float(), want_q.float())
    static = fp8.quantise_per_tensor(x)[1]
    q, s = fp8.quantise_x(x, static)
    assert s is static and torch.equal(q.float(), fp8.quantise(x, static).float())


@interpreted
@pytest.mark.parametrize("axis", [1, 2])  # the N-block index, the K-block index
@pytest.mark.parametrize("which", ["w1", "w2"])
def test_a_wrong_block_scale_index_breaks_the_bound(which, axis):
    """The kernel's output with each weight's block scales shifted by one block (what
    an off-by-one block index in the kernel reads) must fail the check."""
    x, ids, w, w1, w2, scales = problem("block128")
    ref = fp8.reference("block128", x, ids, w, w1, w2, scales)
    bad = dict(scales, **{which: torch.roll(scales[which], 1, dims=axis).contiguous()})
    dis, rel = fp8.agreement(fp8.moe_layer("block128", x, ids, w, w1, w2, bad, CFG), ref)
    assert dis > BOUND, f"shifted {which} scales along dim {axis} passed: {dis:.2e}"


@interpreted
def test_a_wrong_expert_scale_breaks_the_bound():
    x, ids, w, w1, w2, scales = problem("per-tensor")
    ref = fp8.reference("per-tensor", x, ids, w, w1, w2, scales)
    bad = dict(scales, w2=torch.roll(scales["w2"], 1))
    dis, _ = fp8.agreement(fp8.moe_layer("per-tensor", x, ids, w, w1, w2, bad, CFG), ref)
    assert dis > BOUND, f"experts' W2 scales shifted by one passed: {dis:.2e}"


def test_quantisers_round_trip_within_e4m3_precision():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 512, generator=g) * torch.exp2(torch.arange(4).repeat_interleave(128).float())
    q, s = fp8.quantise_groups(x)
    assert q.dtype == fp8.FP8 and s.shape == (3, 4)
    assert torch.allclose(s, x.view(3, 4, 128).abs().amax(-1) / 448)
    back = fp8.dequantise_groups(q, s)
    assert ((back - x).abs() <= x.abs() * 2 ** -4 + s.repeat_interleave(128, 1) * 2 ** -9).all()
    w = torch.randn(2, 256, 384, generator=g) * torch.exp2(torch.arange(3).repeat_interleave(128).float())
    wq, ws = fp8.quantise_blocks(w)
    assert wq.dtype == fp8.FP8 and ws.shape == (2, 2, 3)
    assert torch.allclose(ws, w.view(2, 2, 128, 3, 128).abs().amax(dim=(2, 4)) / 448)
    err = (fp8.dequantise_blocks(wq, ws) - w).abs()
    assert (err <= w.abs() * 2 ** -4 + ws.repeat_interleave(128, 1).repeat_interleave(128, 2) * 2 ** -9).all()
    z, zs = fp8.quantise_groups(torch.zeros(1, 128))
    assert (z.float() == 0).all() and zs.item() == pytest.approx(fp8.SCALE_MIN)


def test_rowwise_helpers_and_reference():
    """The rowwise mode (torch._scaled_grouped_mm's, in bench/fp8_peers.py): per-row
    and per-channel scales, and the reference's X and weights dequantised with them."""
    g = torch.Generator().manual_seed(4)
    w = torch.randn(2, 8, 256, generator=g) * torch.arange(1, 9).float()[None, :, None]
    q, s = fp8.quantise_weights(w, "rowwise")
    assert s.shape == (2, 8) and torch.allclose(s, w.abs().amax(-1) / 448)
    assert torch.allclose(fp8.dequantise_expert(q, s, 1, "rowwise"), w[1], rtol=2 ** -4, atol=1e-6)
    x = torch.randn(3, 256, generator=g) * torch.tensor([[1.0], [100.0], [1e-3]])
    xd = fp8.dequantised_x(x, {}, "rowwise")
    assert torch.allclose(xd, x, rtol=2 ** -4, atol=1e-3 * 2 ** -9 * 448)
    ids = torch.tensor([[0, 1], [1, 0], [0, 1]], dtype=torch.int32)
    wts = torch.full((3, 2), 0.5)
    w1 = torch.randn(2, 16, 256, generator=g)
    w2 = torch.randn(2, 256, 8, generator=g)
    (q1, s1), (q2, s2) = fp8.quantise_weights(w1, "rowwise"), fp8.quantise_weights(w2, "rowwise")
    y = fp8.reference("rowwise", x, ids, wts, q1, q2, {"w1": s1, "w2": s2})
    want = torch.zeros(3, 256)
    for t in range(3):
        for j in range(2):
            e = ids[t, j].item()
            gu = xd[t] @ fp8.dequantise_expert(q1, s1, e, "rowwise").t()
            h = torch.nn.functional.silu(gu[:8]) * gu[8:]
            want[t] += 0.5 * (h @ fp8.dequantise_expert(q2, s2, e, "rowwise").t())
    assert torch.allclose(y, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_agreement_measures():
    y = torch.randn(64, dtype=torch.float64)
    assert fp8.agreement(y, y)[0] == pytest.approx(0, abs=1e-15)
    dis, rel = fp8.agreement(y * 1.01, y)
    assert rel == pytest.approx(0.01, rel=1e-6) and dis == pytest.approx(0.01 ** 2 / (1 + 1.01 ** 2), rel=1e-6)


@interpreted
def test_the_kernels_fp8_store_rounds_as_torch_does():
    """_fp8_store on values across the e4m3 range (normals, subnormals, ties, carries
    into the exponent, saturation) gives torch's float8_e4m3fn values."""
    import triton
    import triton.language as tl

    @triton.jit
    def store(src, dst, N: tl.constexpr):
        o = tl.arange(0, N)
        fp8._fp8_store(dst + o, tl.load(src + o), o < N)

    g = torch.Generator().manual_seed(5)
    mags = torch.exp2(torch.empty(4000).uniform_(-12, 9.5, generator=g))
    v = mags * torch.where(torch.rand(4000, generator=g) < 0.5, -1.0, 1.0)
    grid = torch.arange(-448, 449, dtype=torch.float32)
    ties = (fp8.quantise(v, 1.0).float() + torch.arange(4000) % 7 * 2 ** -12)  # near representable values
    v = torch.cat([v, grid, grid / 512, ties, torch.tensor([0.0, 500.0, -1e9, 7.97, 2 ** -10, 3 * 2 ** -10])])
    v = torch.cat([v, torch.zeros(16384 - v.numel())])
    out = torch.empty(16384, dtype=fp8.FP8)
    store[(1,)](v, out, N=16384)
    want = v.clamp(-448, 448).to(fp8.FP8)
    bad = (out.float() != want.float()).nonzero().flatten()  # by value: the interpreter writes -0 as +0
    assert bad.numel() == 0, f"{bad.numel()} differ, e.g. {v[bad[:4]].tolist()} -> {out[bad[:4]].float().tolist()}"


def test_fp8_peers_shapes_floor_and_tables():
    """bench/fp8_peers.py without a GPU: preset shapes from generator/problem.cpp, the
    fp8 floor's bytes, and a table in which a wrong peer is never the best one."""
    import fp8_peers as fp
    s = fp.preset_shape("mixtral-8x7b")
    assert (s.E, s.H, s.I, s.K) == (8, 4096, 14336, 2)
    assert fp.preset_shape("x:4:256:512:2").I == 512
    with pytest.raises(SystemExit, match="no preset 'nope'"):
        fp.preset_shape("nope")
    flops, bytes_ = fp.fp8_work(s, 16384, "block128")
    assert flops == 6.0 * 16384 * 2 * 4096 * 14336
    assert bytes_ == pytest.approx(8 * 3 * 4096 * 14336 * (1 + 4 / 128 ** 2) + 2 * 16384 * 4096 * 2, rel=1e-6)
    ceil = {"fp8_gemm": 1.2e15, "copy": 4.2e12, "fp8_fast": 1.2e15, "fp8_exact": 1.0e15, "gemm": 8e14}
    floor = fp.fp8_floor_us(s, 1, "per-tensor", ceil)
    assert floor == pytest.approx(fp.fp8_work(s, 1, "per-tensor")[1] / 4.2e12 * 1e6)
    ok = {"us": 2 * floor, "dis": 1e-4, "rel": 1e-2, "config": "m16n64k128 w4 s4"}
    report = {"date": "d", "gpu": "g", "torch": "t", "triton": "tr", "command": "c", "ceilings": ceil, "problems": [
        {"name": s.name, "shape": vars(s), "modes": {
            "per-tensor": [{"T": 1, "floor": floor, "flytune": 1.25 * floor, "triton": ok}],
            "rowwise": [{"T": 1, "floor": floor, "torch": {"wrong": "wrong: 1-cos 5.0e-03 > 0.001"}}],
            "block128": [{"T": 1, "floor": floor, "skipped": "no time left in --budget-s"}]}}]}
    md = fp.markdown(report)
    assert "### mixtral-8x7b (E 8, H 4096, I 14336, top-2), per-tensor" in md
    assert f"| 1 | {floor:.0f} | {1.25 * floor:.1f} (80%) | {2 * floor:.1f} (50%, 1.0e-04, 1.0e-02) " \
           f"| {2 * floor:.1f} (50%, Triton fp8 fused-MoE per-tensor) | 1.60x |" in md
    assert "| wrong: 1-cos 5.0e-03 > 0.001 |" in md
    assert "no time left in --budget-s" in md
