#!/usr/bin/env python3
"""Side-by-side MoE-layer timings on one GPU, in one run: same-run ceilings
(dense bf16 GEMM, HBM copy), flytune's tuned layer (flytune search), and the
peers a user would pick instead (torch._grouped_mm and jax.lax.ragged_dot),
every peer output checked against an fp32 reference. Prints a ratio table and
writes it as Markdown.

Usage (on the GPU machine):
  python3 bench/h200_peers.py --flytune build/release/cli/flytune --out $OUT/bench.md

Timing: CUDA events after warm-up, median of repetitions, inputs rotated over
several copies so weights are not served from L2; torch peers graph-captured,
JAX under jit. The Triton fused-MoE peer is not included yet.
"""
import argparse, json, math, os, statistics, subprocess, sys, time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch
import torch

H, I, E, K = 4096, 14336, 8, 2
TOKENS = [1, 16, 64, 512, 4096, 16384]


def cuda_time(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        times.append(s.elapsed_time(e) * 1000.0)
    return statistics.median(times), min(times), max(times)


def ceilings():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t, _, _ = cuda_time(lambda: a @ b, 10)
    gemm = 2 * 8192 ** 3 / (t * 1e-6)
    x = torch.empty(2 * 1024 ** 3, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    t, _, _ = cuda_time(lambda: y.copy_(x), 10)
    copy = 2 * x.numel() / (t * 1e-6)
    del a, b, x, y
    return gemm, copy


def floor_us(T, gemm, copy):
    flops = 6.0 * T * K * H * I
    active = E * (1 - (1 - K / E) ** T)
    bytes_ = active * 3 * H * I * 2 + 2 * T * H * 2
    return max(flops / gemm, bytes_ / copy) * 1e6


def routing(T, gen):
    logits = torch.randn(T, E, device="cuda", generator=gen)
    w, ids = torch.topk(torch.softmax(logits, -1), K, dim=-1)
    return ids.to(torch.int32), (w / w.sum(-1, keepdim=True)).float()


def reference(x, ids, w, w1, w2):
    y = torch.zeros(x.shape[0], H, device="cuda", dtype=torch.float32)
    for e in range(E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        xe = x[tok].float()
        gu = xe @ w1[e].float().t()
        h = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]).to(torch.bfloat16).float()
        y.index_add_(0, tok, (h @ w2[e].float().t()) * w[tok, slot][:, None])
    return y


def rel_l2(out, ref):
    return (out.float() - ref).norm().item() / ref.norm().item()


def torch_grouped_layer(x, ids, w, w1t, w2t):
    """Sort pairs by expert, grouped GEMMs, SwiGLU, weighted scatter-add."""
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(E, device="cuda", dtype=torch.int32).scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    tok = order // K
    a = x[tok]
    gu = torch._grouped_mm(a, w1t, offs=offs)
    h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
    o = torch._grouped_mm(h, w2t, offs=offs)
    o = o.float() * w.reshape(-1)[order][:, None]
    y = torch.zeros(x.shape[0], H, device="cuda", dtype=torch.float32).index_add_(0, tok, o)
    return y.to(torch.bfloat16)


def bench_torch(T, x_sets, ids, w, w1, w2, ref):
    w1t = w1.transpose(1, 2)  # [E, H, 2I], column-major as _grouped_mm wants
    w2t = w2.transpose(1, 2)  # [E, I, H]
    out = torch_grouped_layer(x_sets[0], ids, w, w1t, w2t)
    err = rel_l2(out, ref)
    static_x = x_sets[0].clone()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch_grouped_layer(static_x, ids, w, w1t, w2t)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        torch_grouped_layer(static_x, ids, w, w1t, w2t)
    flush = torch.empty(256 * 1024 ** 2, device="cuda", dtype=torch.uint8)

    def run():
        flush.zero_()
        g.replay()
    # The flush is inside the timed region: time it alone and subtract.
    t_all, _, _ = cuda_time(run, 20)
    t_flush, _, _ = cuda_time(lambda: flush.zero_(), 20)
    return t_all - t_flush, err


_JAX_WEIGHTS = {}


def to_jax_bf16(t):
    import jax.numpy as jnp
    import ml_dtypes
    return jnp.asarray(t.contiguous().view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16))


def bench_jax(T, x, ids, w, w1, w2, ref):
    import jax, jax.numpy as jnp
    import numpy as np
    if not _JAX_WEIGHTS:
        _JAX_WEIGHTS["w1"] = to_jax_bf16(w1.transpose(1, 2))  # [E, H, 2I]
        _JAX_WEIGHTS["w2"] = to_jax_bf16(w2.transpose(1, 2))  # [E, I, H]
    xj = to_jax_bf16(x)
    w1j, w2j = _JAX_WEIGHTS["w1"], _JAX_WEIGHTS["w2"]
    idsj = jnp.asarray(ids.cpu().numpy())
    wj = jnp.asarray(w.cpu().numpy())

    @jax.jit
    def layer(xj, idsj, wj, w1j, w2j):
        flat = idsj.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        sizes = jnp.bincount(flat, length=E).astype(jnp.int32)
        tok = order // K
        a = xj[tok]
        gu = jax.lax.ragged_dot(a, w1j, sizes, preferred_element_type=jnp.float32)
        h = (jax.nn.silu(gu[:, :I]) * gu[:, I:]).astype(jnp.bfloat16)
        o = jax.lax.ragged_dot(h, w2j, sizes, preferred_element_type=jnp.float32)
        o = o * wj.reshape(-1)[order][:, None]
        return jnp.zeros((xj.shape[0], H), jnp.float32).at[tok].add(o).astype(jnp.bfloat16)

    out = layer(xj, idsj, wj, w1j, w2j).block_until_ready()
    err = rel_l2(torch.from_numpy(np.asarray(out.astype(jnp.float32))).cuda(), ref)
    for _ in range(3):
        layer(xj, idsj, wj, w1j, w2j).block_until_ready()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        layer(xj, idsj, wj, w1j, w2j).block_until_ready()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times), err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flytune", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--skip-jax", action="store_true")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    torch.manual_seed(0)
    gemm, copy = ceilings()
    print(f"ceilings: dense bf16 GEMM {gemm/1e12:.0f} TFLOP/s, HBM copy {copy/1e12:.2f} TB/s", flush=True)

    # flytune first, in its own process (it needs the GPU memory the peers use later).
    db = os.path.join(os.path.dirname(args.out) or ".", "bench.db")
    cmd = [args.flytune, "search", "--tokens", args.tokens, "--db", db, "--graph", "--json",
           "--ceilings", f"{gemm/1e12:.1f},{copy/1e12:.3f}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr[-2000:]); sys.exit(1)
    summary = json.loads(r.stdout)
    ft = {w["tokens"]: w for w in summary["winners"] if w["kind"] == "layer"}
    print("flytune search done", flush=True)

    gen = torch.Generator(device="cuda").manual_seed(1)
    w1 = (torch.randn(E, 2 * I, H, device="cuda", generator=gen) / math.sqrt(H)).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, device="cuda", generator=gen) / math.sqrt(I)).to(torch.bfloat16)
    rows = []
    for T in tokens:
        x = torch.randn(T, H, device="cuda", generator=gen).to(torch.bfloat16)
        ids, w = routing(T, gen)
        ref = reference(x, ids, w, w1, w2)
        row = {"T": T, "floor": floor_us(T, gemm, copy), "flytune": ft.get(T, {}).get("median_us")}
        try:
            row["torch"], row["torch_err"] = bench_torch(T, [x], ids, w, w1, w2, ref)
        except Exception as e:  # a peer that fails is reported, not fatal
            row["torch_error"] = str(e)[:200]
        if not args.skip_jax and T <= 4096:
            try:
                row["jax"], row["jax_err"] = bench_jax(T, x, ids, w, w1, w2, ref)
            except Exception as e:
                row["jax_error"] = str(e)[:200]
        print(json.dumps(row), flush=True)
        rows.append(row)
        torch.cuda.empty_cache()

    lines = [f"Same-run ceilings: dense bf16 GEMM {gemm/1e12:.0f} TFLOP/s (8192^3), HBM copy {copy/1e12:.2f} TB/s.", "",
             "| tokens | floor us | flytune us (% floor) | torch._grouped_mm us (% floor, rel L2) | jax ragged_dot us (% floor, rel L2) | flytune vs torch | flytune vs jax |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    def cell(row, k):
        if row.get(k) is None:
            return row.get(k + "_error", "-")[:60]
        extra = f", {row[k + '_err']:.1e}" if (k + "_err") in row else ""
        return f"{row[k]:.1f} ({100 * row['floor'] / row[k]:.0f}%{extra})"
    for row in rows:
        f = row.get("flytune")
        vt = f"{row['torch'] / f:.2f}x" if f and row.get("torch") else "-"
        vj = f"{row['jax'] / f:.2f}x" if f and row.get("jax") else "-"
        lines.append(f"| {row['T']} | {row['floor']:.0f} | {cell(row, 'flytune')} | {cell(row, 'torch')} | {cell(row, 'jax')} | {vt} | {vj} |")
    text = "\n".join(lines) + "\n"
    print(text)
    open(args.out, "w").write(text)
    json.dump(rows, open(args.out + ".json", "w"), indent=1)


if __name__ == "__main__":
    main()
