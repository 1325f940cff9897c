#!/usr/bin/env python3
"""flytune's Python bindings against their peers and against the runtime itself, on one GPU, in one process
(issue 17's benchmark): the Mixtral 8x7B MoE layer (E 8, H 4096, I 14336, top-2, bf16, uniform routing).

JAX (jitted):
  - flytune-jax: flytune.jax.moe_layer, the XLA FFI call (weights prepared once with prepare_weights);
  - jax ragged_dot: the same layer with jax.lax.ragged_dot (pairs sorted by expert, SwiGLU, weighted top-k sum;
    bench/h200_peers.py's layer).
PyTorch (each whole layer captured in a CUDA graph):
  - flytune-torch: flytune.torch.fused_experts, the custom op flytune::moe_layer;
  - Triton fused-MoE: bench/triton_moe.py with the config bench/h200_peers.py's tuning chose at this T on the
    H200 (--triton-tune: time every candidate config and keep the fastest, as h200_peers.py does);
  - torch._grouped_mm: bench/h200_peers.py's layer.
The runtime itself:
  - runtime: libflytune_runtime.so (the package's, flytune.library_path()) through its C API by ctypes:
    ft_runtime_open_on, ft_runtime_select, ft_runtime_arrange_weights, ft_plan_launch on the torch stream,
    captured in a CUDA graph (no nanobind, no framework op in between);
  - search: the layer time `flytune search` measured for the bucket (the export's manifest, time_us).

Every output is checked against an fp32 reference (rel L2, bound 2e-2) before it is timed. Timing:
  - "graph, L2 flushed" (torch side and runtime): a 256 MiB buffer written, then CUDA events around one graph
    replay; --reps samples;
  - "back-to-back" (JAX, and the runtime for the FFI ratio): n calls enqueued without waiting, one
    block_until_ready (JAX) / one event pair around n graph replays (runtime); the sample is the mean per call
    (device-bound: the layer takes far longer than a dispatch), --reps samples; no L2 flush, and none needed:
    the weights the layer reads (2 to 8 experts of 352 MB) are far larger than the 60 MB L2.
Medians with p10-p90. FFI / runtime = flytune-jax / runtime, both back-to-back (the issue's target: within 5%).
A peer that fails is reported in its cell and the run goes on; results are written after every measurement.

Usage (on the GPU machine, the flytune wheel installed):
  python3 bench/python_bindings.py --export /tmp/mixtral-export --out $OUT/python_bindings
  options: --tokens 1,16,64,512,4096,16384 --deadline-s 200 --triton-tune --skip-jax --skip-torch ...
Writes OUT.md (the tables) and OUT.json (every sample's summary, errors, versions).
"""
import argparse
import ctypes
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
import traceback

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with torch

HERE = os.path.dirname(os.path.abspath(__file__))
E, H, I, K = 8, 4096, 14336, 2
TOKENS = [1, 16, 64, 512, 4096, 16384]
ERR_LIMIT = 2e-2
# The Triton config bench/h200_peers.py's tuning chose per T on the H200 (docs/PERFORMANCE.md,
# 2026-11-30 10:15 UTC run): (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages).
TRITON_TUNED = {1: (16, 64, 128, 4, 4), 16: (16, 128, 128, 4, 3), 64: (16, 64, 128, 4, 4), 512: (64, 128, 64, 4, 4),
                4096: (128, 128, 64, 8, 3), 16384: (128, 128, 64, 8, 4)}
# Issue 17's targets.
FFI_TARGET = 1.05
RAGGED_TARGETS = {1: 3.5, 512: 2.5, 4096: 2.5, 16384: 2.5}

START = time.time()


def log(msg):
    print(f"[{time.time() - START:6.1f}s] {msg}", flush=True)


def summary(samples):
    s = sorted(samples)
    q = lambda f: s[min(len(s) - 1, max(0, int(round(f * (len(s) - 1)))))]  # noqa: E731
    return {"median": statistics.median(s), "p10": q(0.1), "p90": q(0.9), "n": len(s)}


def short(e):
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text[:300]


# --- the runtime's C API through ctypes -------------------------------------------------------------------------

class LayerBuffers(ctypes.Structure):
    """ft_layer_buffers (runtime/include/flytune_runtime.h), field for field."""
    _fields_ = [(name, ctypes.c_void_p) for name in (
        "x", "topk_ids", "topk_weights", "w1", "w2", "w1_shuffled", "w2_shuffled", "inter", "y_acc", "sorted_ids",
        "block_experts", "padded_rows", "y", "w1_tiled", "w2_tiled", "bad_ids")]


class WorkspaceSizes(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("inter", "y_acc", "sorted_ids", "block_experts", "padded_rows")]


class CRuntime:
    """libflytune_runtime.so's C API: one runtime handle of its own on `device`."""

    def __init__(self, lib_path, export_dir, device):
        lib = ctypes.CDLL(lib_path)
        vp, cp, ci = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        lib.ft_runtime_open_on.argtypes = [cp, cp, ctypes.POINTER(vp), cp, ctypes.c_size_t]
        lib.ft_runtime_last_error.argtypes = [vp]
        lib.ft_runtime_last_error.restype = cp
        lib.ft_runtime_select.argtypes = [vp, cp, ci, ctypes.POINTER(vp)]
        lib.ft_plan_bucket.argtypes = [vp]
        lib.ft_plan_needs_shuffled.argtypes = [vp, ci]
        lib.ft_plan_needs_tiled.argtypes = [vp, ci]
        lib.ft_plan_workspace.argtypes = [vp, ctypes.POINTER(WorkspaceSizes)]
        lib.ft_plan_workspace.restype = None
        lib.ft_plan_launch.argtypes = [vp, ctypes.POINTER(LayerBuffers), vp]
        lib.ft_runtime_arrange_weights.argtypes = [vp, vp, vp, ci, ci, ci, vp]
        lib.ft_plan_free.argtypes = [vp]
        lib.ft_plan_free.restype = None
        self.lib = lib
        self.rt = vp()
        err = ctypes.create_string_buffer(2048)
        if lib.ft_runtime_open_on(export_dir.encode(), device.encode(), ctypes.byref(self.rt), err, len(err)) != 0:
            raise RuntimeError(f"ft_runtime_open_on: {err.value.decode()}")

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: status {rc}: {self.lib.ft_runtime_last_error(self.rt).decode()}")

    def select(self, key, tokens):
        plan = ctypes.c_void_p()
        self.check(self.lib.ft_runtime_select(self.rt, key.encode(), tokens, ctypes.byref(plan)), "ft_runtime_select")
        ws = WorkspaceSizes()
        self.lib.ft_plan_workspace(plan, ctypes.byref(ws))
        layouts = {"w1_shuffled": self.lib.ft_plan_needs_shuffled(plan, 1), "w2_shuffled": self.lib.ft_plan_needs_shuffled(plan, 2),
                   "w1_tiled": self.lib.ft_plan_needs_tiled(plan, 1), "w2_tiled": self.lib.ft_plan_needs_tiled(plan, 2)}
        return plan, self.lib.ft_plan_bucket(plan), {f: getattr(ws, f) for f, _ in WorkspaceSizes._fields_}, layouts

    def arrange(self, src, dst, rows, cols, layout, stream):
        self.check(self.lib.ft_runtime_arrange_weights(self.rt, src, dst, rows, cols, layout, stream),
                   "ft_runtime_arrange_weights")

    def launch(self, plan, buffers, stream):
        self.check(self.lib.ft_plan_launch(plan, ctypes.byref(buffers), stream), "ft_plan_launch")


def ragged_layer(x, ids, wts, w1t, w2t):
    """The layer with jax.lax.ragged_dot: flytune.models.moe's (the Mixtral model's ragged_dot path; bench/
    h200_peers.py's layer): (token, choice) pairs sorted by expert, x rows gathered, grouped GEMM with w1t
    [E, H, 2I], SwiGLU, grouped GEMM with w2t [E, I, H], routed weights, summed per token."""
    from flytune.models.moe import ragged_dot_layer
    return ragged_dot_layer(x, ids, wts, w1t, w2t)


# --- the bench ----------------------------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        import torch
        sys.path.insert(0, HERE)
        import h200_peers  # reference, routing, the grouped_mm layer, graph capture
        self.torch, self.peers, self.args = torch, h200_peers, args
        self.deadline = START + args.deadline_s if args.deadline_s else None
        self.report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "command": "python3 " + shlex.join(sys.argv), "gpu": torch.cuda.get_device_name(),
                       "versions": {"python": platform.python_version(), "torch": torch.__version__},
                       "problem": {"experts": E, "hidden": H, "inter": I, "topk": K, "dtype": "bf16",
                                   "routing": "uniform (softmax top-2 of random logits)"},
                       "xla_flags": os.environ.get("XLA_FLAGS", ""), "errors": {}, "rows": []}
        self.rows = {}
        self.flush = torch.empty(256 * 1024 ** 2, device="cuda", dtype=torch.uint8)
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        self.gen = gen
        self.w1 = (torch.randn(E, 2 * I, H, device="cuda", generator=gen) / math.sqrt(H)).to(torch.bfloat16)
        self.w2 = (torch.randn(E, H, I, device="cuda", generator=gen) / math.sqrt(I)).to(torch.bfloat16)
        self.cases = {}
        self.export = self.key = self.crt = None
        self.manifest_times = {}
        try:
            import flytune
            self.report["versions"]["flytune"] = flytune.__version__
            self.export = flytune.load(args.export, device="cuda:0")
            self.key = self.export.find_problem(E, H, I, K, "bf16").key
            self.report["export"] = {"dir": args.export, "problem": self.key, "target": self.export.target,
                                     "buckets": list(self.export.problem(self.key).buckets)}
            with open(os.path.join(args.export, "manifest.json")) as f:
                manifest = json.load(f)
            for p in manifest["problems"]:
                if p["key"] == self.key:
                    self.manifest_times = {b["tokens"]: b.get("time_us") for b in p["buckets"]}
            self.report["export"]["device"] = manifest.get("device")
            self.report["export"]["time_us_by_bucket"] = self.manifest_times
        except Exception as e:  # the peers still run; flytune's cells say why
            self.report["errors"]["flytune"] = short(e)
            log(f"flytune: {short(e)}")

    # ---- bookkeeping
    def left(self):
        return float("inf") if self.deadline is None else self.deadline - time.time()

    def row(self, T):
        if T not in self.rows:
            self.rows[T] = {"T": T}
            self.report["rows"].append(self.rows[T])
        return self.rows[T]

    def case(self, T):
        """x, ids, weights and the fp32 reference at T (kept for the second pass)."""
        if T not in self.cases:
            torch = self.torch
            x = torch.randn(T, H, device="cuda", generator=self.gen).to(torch.bfloat16)
            ids, w = self.peers.routing(T, self.gen)
            self.cases[T] = (x, ids, w, self.peers.reference(x, ids, w, self.w1, self.w2))
        return self.cases[T]

    def measure(self, T, name, fn, need_s=5.0):
        """Runs fn() -> dict of results into row[name...]; an exception or the deadline becomes the cell's text."""
        r = self.row(T)
        if self.left() < need_s:
            r[name + "_error"] = "skipped: out of time (--deadline-s)"
            log(f"T={T} {name}: skipped, out of time")
            return
        t0 = time.time()
        try:
            out = fn()
            for k, v in out.items():
                r[f"{name}_{k}" if k else name] = v
            m = r[name]["median"] if isinstance(r.get(name), dict) else None
            err = r.get(name + "_err")
            log(f"T={T} {name}: " + (f"{m:.1f} us" if m is not None else "done")
                + (f", rel L2 {err:.1e}" if err is not None else "") + f" ({time.time() - t0:.1f} s)")
        except Exception as e:
            r[name + "_error"] = short(e)
            log(f"T={T} {name}: FAILED {short(e)}")
            if self.args.verbose:
                traceback.print_exc()
            try:
                self.torch.cuda.synchronize()
                self.torch.cuda.empty_cache()
            except Exception:
                pass
        self.write()

    def checked(self, out, ref):
        err = self.peers.rel_l2(out, ref)
        if not err < ERR_LIMIT:  # NaN too
            raise RuntimeError(f"wrong result: rel L2 {err:.3g} against the fp32 reference (bound {ERR_LIMIT})")
        return err

    # ---- timing
    def graph_flushed(self, g, reps=None):
        """CUDA events around one replay each, the L2 flushed (256 MiB written) before it, outside the events."""
        torch = self.torch
        reps = reps or self.args.reps
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        out = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.flush.zero_()
            s.record()
            g.replay()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) * 1000.0)
        return summary(out)

    def batch_size(self, us):
        return max(2, min(200, int(math.ceil(self.args.batch_ms * 1000.0 / max(us, 1.0)))))

    def graph_b2b(self, g, est_us):
        """Per-call mean of n back-to-back replays between one pair of events; --reps samples."""
        torch = self.torch
        n = self.batch_size(est_us)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        out = []
        for _ in range(self.args.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(n):
                g.replay()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) * 1000.0 / n)
        return dict(summary(out), calls=n)

    def jax_b2b(self, f, args):
        """Per-call mean of n back-to-back jitted calls (host clock, one block_until_ready); --reps samples."""
        for _ in range(3):
            f(*args).block_until_ready()
        t0 = time.perf_counter()
        f(*args).block_until_ready()
        n = self.batch_size((time.perf_counter() - t0) * 1e6)
        out = []
        for _ in range(self.args.reps):
            t0 = time.perf_counter()
            for _ in range(n):
                y = f(*args)
            y.block_until_ready()
            out.append((time.perf_counter() - t0) * 1e6 / n)
        return dict(summary(out), calls=n)

    def capture(self, fn):
        return self.peers.capture(fn)

    # ---- JAX
    def setup_jax(self):
        import jax
        import jax.numpy as jnp
        self.jax, self.jnp = jax, jnp
        from importlib.metadata import version
        if jax.devices()[0].platform not in ("gpu", "cuda", "rocm"):
            raise RuntimeError(f"JAX has no GPU backend (its first device is {jax.devices()[0]})")
        self.report["versions"].update(jax=jax.__version__, jaxlib=version("jaxlib"), jax_device=str(jax.devices()[0]))
        self.w1j, self.w2j = self.to_jax(self.w1), self.to_jax(self.w2)
        self.moe = None
        if self.export is not None:
            import flytune.jax as fj
            self.fj = fj
            self.moe = fj.prepare_weights(self.export, self.w1j, self.w2j)
            jax.block_until_ready(self.moe)
            self.fly_jit = jax.jit(fj.moe_layer)
        swap = jax.jit(lambda a: jnp.swapaxes(a, 1, 2))
        self.w1t, self.w2t = swap(self.w1j), swap(self.w2j)  # [E, H, 2I], [E, I, H] as ragged_dot wants

        self.ragged = jax.jit(ragged_layer)
        jax.block_until_ready((self.w1t, self.w2t))

    def to_jax(self, t):
        """A JAX copy of a torch CUDA tensor (dlpack, else through the host)."""
        self.torch.cuda.synchronize()
        try:
            return self.jnp.array(self.jax.dlpack.from_dlpack(t.contiguous()), copy=True)
        except Exception:
            import ml_dtypes
            import numpy as np
            a = t.contiguous()
            if a.dtype == self.torch.bfloat16:
                return self.jnp.asarray(a.view(self.torch.int16).cpu().numpy().view(ml_dtypes.bfloat16))
            return self.jnp.asarray(np.asarray(a.cpu().numpy()))

    def from_jax(self, y):
        import numpy as np
        return self.torch.from_numpy(np.asarray(y.astype(self.jnp.float32))).cuda()

    def jax_inputs(self, T):
        x, ids, w, ref = self.case(T)
        return self.to_jax(x), self.to_jax(ids), self.to_jax(w), ref

    def flytune_jax(self, T):
        if self.moe is None:
            raise RuntimeError(self.report["errors"].get("flytune", "no export"))
        xj, idsj, wj, ref = self.jax_inputs(T)
        err = self.checked(self.from_jax(self.fly_jit(xj, idsj, wj, self.moe)), ref)
        return {"": self.jax_b2b(self.fly_jit, (xj, idsj, wj, self.moe)), "err": err,
                "bucket": self.export.plan(self.key, T)["bucket"]}

    def ragged_dot(self, T):
        xj, idsj, wj, ref = self.jax_inputs(T)
        args = (xj, idsj, wj, self.w1t, self.w2t)
        err = self.checked(self.from_jax(self.ragged(*args)), ref)
        return {"": self.jax_b2b(self.ragged, args), "err": err}

    # ---- the runtime through its C API
    def setup_runtime(self):
        import flytune
        self.crt = CRuntime(flytune.library_path(), self.args.export, "cuda:0")
        self.arranged = {}

    def runtime_layer(self, T):
        """The layer through ft_plan_launch on torch buffers; returns (launch fn, y, bucket)."""
        torch = self.torch
        x, ids, w, _ = self.case(T)
        plan, bucket, ws, layouts = self.crt.select(self.key, T)
        stream = torch.cuda.current_stream().cuda_stream
        for name, needed in layouts.items():
            if needed and name not in self.arranged:
                src = self.w1 if name.startswith("w1") else self.w2
                dst = torch.empty_like(src)
                self.crt.arrange(src.data_ptr(), dst.data_ptr(), src.numel() // src.shape[-1], src.shape[-1],
                                 1 if name.endswith("shuffled") else 2, stream)
                self.arranged[name] = dst
        work = {k: torch.empty(max(v, 256), device="cuda", dtype=torch.uint8) for k, v in ws.items()}
        y = torch.empty_like(x)
        b = LayerBuffers(x=x.data_ptr(), topk_ids=ids.data_ptr(), topk_weights=w.data_ptr(), w1=self.w1.data_ptr(),
                         w2=self.w2.data_ptr(), y=y.data_ptr(), **{k: t.data_ptr() for k, t in work.items()},
                         **{k: t.data_ptr() for k, t in self.arranged.items() if layouts.get(k)})
        keep = (work, b, plan)  # alive as long as the launch function

        def launch():
            self.crt.launch(keep[2], keep[1], torch.cuda.current_stream().cuda_stream)
        return launch, y, bucket

    def runtime(self, T):
        if self.export is None:
            raise RuntimeError(self.report["errors"].get("flytune", "no export"))
        if self.crt is None:
            self.setup_runtime()
        _, _, _, ref = self.case(T)
        launch, y, bucket = self.runtime_layer(T)
        launch()
        err = self.checked(y, ref)
        g = self.capture(launch)
        flushed = self.graph_flushed(g)
        b2b = self.graph_b2b(g, flushed["median"])
        return {"": flushed, "b2b": b2b, "err": err, "bucket": bucket}

    # ---- PyTorch
    def flytune_torch(self, T):
        if self.export is None:
            raise RuntimeError(self.report["errors"].get("flytune", "no export"))
        import flytune.torch as ftt
        x, ids, w, ref = self.case(T)
        ftt.prepare_weights(self.w1, self.w2, self.export)
        err = self.checked(ftt.fused_experts(x, self.w1, self.w2, w, ids, export=self.export), ref)
        g = self.capture(lambda: ftt.fused_experts(x, self.w1, self.w2, w, ids, export=self.export))
        return {"": self.graph_flushed(g), "err": err}

    def triton(self, T):
        import triton_moe
        x, ids, w, ref = self.case(T)
        configs = triton_moe.candidate_configs(T * K, H, I) if self.args.triton_tune else \
            [TRITON_TUNED.get(T) or triton_moe.candidate_configs(T * K, H, I)[0]]
        best, tried = None, []
        for cfg in configs:
            name = triton_moe.config_name(cfg)
            try:
                err = self.checked(triton_moe.moe_layer(x, ids, w, self.w1, self.w2, cfg), ref)
                t = self.graph_flushed(self.capture(lambda: triton_moe.moe_layer(x, ids, w, self.w1, self.w2, cfg)),
                                       reps=10 if len(configs) > 1 else None)
                tried.append({"config": name, "us": t["median"], "err": err})
                if best is None or t["median"] < best[0]["median"]:
                    best = (t, cfg, err)
            except Exception as e:
                tried.append({"config": name, "error": short(e)})
        if best is None:
            raise RuntimeError("no Triton config ran: " + "; ".join(f"{t['config']}: {t.get('error')}" for t in tried))
        t, cfg, err = best
        if len(configs) > 1:
            t = self.graph_flushed(self.capture(lambda: triton_moe.moe_layer(x, ids, w, self.w1, self.w2, cfg)))
        return {"": t, "err": err, "config": triton_moe.config_name(cfg), "tried": tried}

    def grouped_mm(self, T):
        x, ids, w, ref = self.case(T)
        w1t, w2t = self.w1.transpose(1, 2), self.w2.transpose(1, 2)
        err = self.checked(self.peers.torch_grouped_layer(x, ids, w, w1t, w2t), ref)
        g = self.capture(lambda: self.peers.torch_grouped_layer(x, ids, w, w1t, w2t))
        return {"": self.graph_flushed(g), "err": err}

    # ---- output
    def write(self):
        out = self.args.out
        with open(out + ".json", "w") as f:
            json.dump(self.report, f, indent=1, default=str)
        with open(out + ".md", "w") as f:
            f.write(markdown(self.report))


# --- Markdown ------------------------------------------------------------------------------------------------------

def med(row, k):
    v = row.get(k)
    return v.get("median") if isinstance(v, dict) else None


def cell(row, k, err=True):
    v = row.get(k)
    if not isinstance(v, dict):
        return row.get(k + "_error", "-")[:70].replace("|", "/")
    e = f", {row[k + '_err']:.1e}" if err and row.get(k + "_err") is not None else ""
    return f"{v['median']:.1f} ({v['p10']:.0f}-{v['p90']:.0f}{e})"


def ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}x" if a and b else "-"


def markdown(report):
    rows = sorted(report["rows"], key=lambda r: r["T"])
    times = report.get("export", {}).get("time_us_by_bucket", {})
    lines = [f"## {report['date']}, {report['gpu']}: flytune from JAX and PyTorch (Mixtral 8x7B bf16 layer, "
             f"E 8, H 4096, I 14336, top-2, uniform routing)", "", "Command:", "", "```sh", report["command"], "```",
             "", "Versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".", ""]
    lines += ["JAX, jitted (back-to-back calls, per-call median (p10-p90) us, rel L2 against fp32); runtime: the "
              "same export through the C API (ft_plan_launch) in a CUDA graph, back-to-back replays.", "",
              "| T | bucket | flytune-jax us | jax ragged_dot us | flytune vs ragged_dot | runtime graph us "
              "| FFI / runtime |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        fj, rd, rt = med(r, "flytune_jax"), med(r, "ragged_dot"), (r.get("runtime_b2b") or {}).get("median")
        target = RAGGED_TARGETS.get(r["T"])
        speed = ratio(rd, fj) + (f" ({'met' if rd / fj >= target else 'missed'} {target}x)" if fj and rd and target else "")
        ffi = (f"{fj / rt:.3f} ({'within' if fj / rt <= FFI_TARGET else 'over'} 5%)" if fj and rt else "-")
        rtc = (f"{rt:.1f} ({r['runtime_b2b']['p10']:.0f}-{r['runtime_b2b']['p90']:.0f})" if rt else
               r.get("runtime_error", "-")[:70])
        lines.append(f"| {r['T']} | {r.get('flytune_jax_bucket', r.get('runtime_bucket', '-'))} "
                     f"| {cell(r, 'flytune_jax')} | {cell(r, 'ragged_dot')} | {speed} | {rtc} | {ffi} |")
    lines += ["", "PyTorch, each layer captured in a CUDA graph, L2 flushed before each replay (median (p10-p90) us, "
              "rel L2); runtime: the C API in a CUDA graph, same protocol; search: the layer time `flytune search` "
              "recorded for the bucket (the export's time_us).", "",
              "| T | flytune-torch us | Triton fused-MoE us | torch._grouped_mm us | flytune vs Triton "
              "| flytune vs grouped_mm | runtime graph us | flytune-torch / runtime | search us |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ft, tr, gm, rt = med(r, "flytune_torch"), med(r, "triton"), med(r, "grouped_mm"), med(r, "runtime")
        bucket = r.get("runtime_bucket") or r.get("flytune_jax_bucket")
        st = (times.get(bucket) or times.get(str(bucket)) or {}).get("median") if bucket else None
        lines.append(f"| {r['T']} | {cell(r, 'flytune_torch')} | {cell(r, 'triton')} | {cell(r, 'grouped_mm')} "
                     f"| {ratio(tr, ft)} | {ratio(gm, ft)} | {cell(r, 'runtime')} "
                     f"| {f'{ft / rt:.3f}' if ft and rt else '-'} | {f'{st:.1f}' if st else '-'} |")
    configs = [f"{r['T']}: {r['triton_config']}" for r in rows if r.get("triton_config")]
    if configs:
        lines += ["", "Triton configs (T: BLOCK_M/N/K, warps, stages): " + "; ".join(configs) + "."]
    if report.get("errors"):
        lines += ["", "Errors: " + "; ".join(f"{k}: {v}" for k, v in report["errors"].items())]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", required=True, help="a flytune export holding the Mixtral 8x7B problem")
    ap.add_argument("--out", required=True, help="output prefix: OUT.md and OUT.json")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts (default %(default)s)")
    ap.add_argument("--reps", type=int, default=20, help="samples per measurement (default %(default)s)")
    ap.add_argument("--batch-ms", type=float, default=20.0,
                    help="back-to-back batches last about this long (n calls, 2..200; default %(default)s)")
    ap.add_argument("--deadline-s", type=float, default=0,
                    help="skip what is left once this many seconds have passed since start (0: no limit)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--triton-tune", action="store_true",
                    help="time every candidate Triton config (triton_moe.candidate_configs), keep the fastest")
    for peer in ("jax", "torch", "triton", "grouped-mm", "ragged-dot", "runtime"):
        ap.add_argument(f"--skip-{peer}", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="tracebacks of failures")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]

    b = Bench(args)
    torch = b.torch
    log(f"{b.report['gpu']}, torch {torch.__version__}, export {b.report.get('export', {}).get('problem')}, "
        f"buckets {b.report.get('export', {}).get('buckets')}")
    if not args.skip_jax:
        try:
            b.setup_jax()
            log(f"jax {b.report['versions'].get('jax')} ready: weights on the GPU, flytune weights prepared")
        except Exception as e:
            b.report["errors"]["jax"] = short(e)
            log(f"jax setup FAILED: {short(e)}")
            if args.verbose:
                traceback.print_exc()
            args.skip_jax = True
    try:
        import triton
        b.report["versions"]["triton"] = triton.__version__
    except Exception:
        pass
    b.write()

    # First pass: what issue 17's targets are about (the FFI call against the runtime and ragged_dot), with the
    # torch op; second pass: the torch peers (Triton compiles its kernels here).
    for T in tokens:
        if not args.skip_jax:
            b.measure(T, "flytune_jax", lambda: b.flytune_jax(T))
        if not args.skip_runtime:
            b.measure(T, "runtime", lambda: b.runtime(T))
        if not args.skip_jax and not args.skip_ragged_dot:
            b.measure(T, "ragged_dot", lambda: b.ragged_dot(T), need_s=10 if T < 4096 else 20)
        if not args.skip_torch:
            b.measure(T, "flytune_torch", lambda: b.flytune_torch(T))
    for T in tokens:
        if not args.skip_torch and not args.skip_triton:
            b.measure(T, "triton", lambda: b.triton(T), need_s=15)
        if not args.skip_torch and not args.skip_grouped_mm:
            b.measure(T, "grouped_mm", lambda: b.grouped_mm(T))
    b.report["wall_s"] = time.time() - START
    b.write()
    print(markdown(b.report), flush=True)


if __name__ == "__main__":
    main()
