"""flytune: tuned MoE layers exported by `flytune export`, called from Python.

    import flytune
    export = flytune.load("export/")        # the runtime's checks; opens the first GPU
    export.problems                          # [Problem(key, experts, hidden, inter, topk, dtype, buckets)]

JAX: flytune.jax (an XLA FFI call); PyTorch: flytune.torch (the custom op
flytune::moe_layer and a drop-in fused_experts). docs/PYTHON.md.

The package ships libflytune_runtime.so (C API: flytune.runtime_header()) and
goes through it for everything: opening, checking, planning, launching.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import threading
import warnings
import weakref
from typing import Optional, Sequence

from . import _core

__all__ = [
    "load", "Export", "Problem", "FlytuneError", "ManifestError", "FileError", "HashError", "TargetError",
    "DeviceError", "NotFoundError", "ArgumentError", "InternalError", "library_path", "runtime_header",
    "fp8_ocp_to_fnuz", "CoverageWarning", "Fp32WeightGradientsWarning", "PLAN_CACHE_PLANS",
]
__version__ = "0.1.0"
# The plans an Export keeps per device, least recently used freed first (Export.cached_plans).
PLAN_CACHE_PLANS: int = _core.PLAN_CACHE_PLANS


class FlytuneError(RuntimeError):
    """An error of libflytune_runtime: `status` is its ft_status, the message its own."""

    status = 0

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class ManifestError(FlytuneError):
    """FT_ERR_MANIFEST: a missing, malformed or unsupported manifest."""
    status = _core.FT_ERR_MANIFEST


class FileError(FlytuneError):
    """FT_ERR_FILE: a file outside the export folder, missing or unreadable."""
    status = _core.FT_ERR_FILE


class HashError(FlytuneError):
    """FT_ERR_HASH: a code object whose bytes do not hash to its name."""
    status = _core.FT_ERR_HASH


class TargetError(FlytuneError):
    """FT_ERR_TARGET: the export is for another GPU target than the device's."""
    status = _core.FT_ERR_TARGET


class DeviceError(FlytuneError):
    """FT_ERR_DEVICE: no GPU, or the GPU runtime failed."""
    status = _core.FT_ERR_DEVICE


class NotFoundError(FlytuneError):
    """FT_ERR_NOT_FOUND: the export serves no such problem."""
    status = _core.FT_ERR_NOT_FOUND


class ArgumentError(FlytuneError, ValueError):
    """FT_ERR_ARGUMENT: a bad argument (shape, dtype, buffer, routing ids)."""
    status = _core.FT_ERR_ARGUMENT


class InternalError(FlytuneError):
    """FT_ERR_INTERNAL: an unexpected failure inside the runtime."""
    status = _core.FT_ERR_INTERNAL


_BY_STATUS = {c.status: c for c in (ManifestError, FileError, HashError, TargetError, DeviceError, NotFoundError,
                                    ArgumentError, InternalError)}


def _error(e: "_core.Error", context: str = "") -> FlytuneError:
    status, message = e.args
    cls = _BY_STATUS.get(status, FlytuneError)
    return cls(f"{context}: {message}" if context else message, status)


def _call(fn, *args, context: str = "", **kwargs):
    """Calls into _core; the runtime's errors come out as FlytuneError subclasses."""
    try:
        return fn(*args, **kwargs)
    except _core.Error as e:
        raise _error(e, context) from None


class CoverageWarning(UserWarning):
    """A layer whose T the export serves with another bucket's kernels: T above its largest tuned bucket, or
    the bucket meant for T has no layer (its search found none; exported with --allow-missing). Issued once
    per (problem, T) among the PLAN_CACHE_PLANS most recently warned about (an Export remembers no more, so a
    server seeing ever new T keeps a bounded memory; one forgotten warns again when it comes back);
    Export.plan(...)["coverage"] and ["coverage_note"] say the same (ft_plan_coverage)."""


class Fp32WeightGradientsWarning(UserWarning):
    """A backward whose export's kernels predate the 16-bit weight gradients (ft_layer_grads' dw1_16, dw2_16:
    they were compiled by a flytune of other kernel templates than the exporting one's, so the export cannot
    promise they read KGroupedArgs::c16). flytune.jax and flytune.torch then have dW1 and dW2 written in float32
    and cast to the weights' dtype: the values the kernels would have rounded to, with an fp32 buffer the size of
    each weight and a cast pass more. Issued once per (problem, backward bucket); Export.plan(...)["backward"]["dw16"]
    says the same (False). Search the backward again with this flytune and export for the direct path
    (docs/TRAINING.md, "Gradient dtypes")."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem of an export: the MoE layer shape and its tuned token buckets (has_backward: backward buckets
    too, docs/PYTHON.md "Training").

    fp8 problems (dtype "e4m3", or "e4m3fnuz" on gfx942): w1/w2 are one code byte per element
    (element_bytes 1; x and y stay bf16), scaled as `scales` says ("per-tensor", "per-token",
    "block128", "static": per-tensor with the caller's static inter_scale too); scale_shapes gives each fp32 scale tensor the layer reads, as (name, shape) pairs."""
    key: str
    experts: int
    hidden: int
    inter: int
    topk: int
    dtype: str  # the weights' format: "bf16", "f16", "e4m3" or "e4m3fnuz"
    buckets: tuple
    element_bytes: int = 2
    scales: str = "none"
    scale_shapes: tuple = ()  # (("x_scale", (1,)), ("w1_scales", (E,)), ...); () for 16-bit problems
    # the export holds backward buckets of it (flytune search --pass both): jax.grad / torch autograd run through it
    has_backward: bool = False

    @property
    def fp8(self) -> bool:
        return self.scales != "none"

    def scale_shape(self, name: str) -> Optional[tuple]:
        """The shape of scale tensor `name` ("x_scale", "w1_scales", "w2_scales"), None where the layer reads none."""
        return dict(self.scale_shapes).get(name)

    @property
    def w1_shape(self):
        return (self.experts, 2 * self.inter, self.hidden)

    @property
    def w2_shape(self):
        return (self.experts, self.hidden, self.inter)


_LAYOUT_SHAPES = ("w1_shuffled", "w2_shuffled", "w1_tiled", "w2_tiled")

# Exports by registry key, for the torch op (which carries the key as a string).
_exports: "weakref.WeakValueDictionary[str, Export]" = weakref.WeakValueDictionary()
_exports_lock = threading.Lock()


class Export:
    """An export folder opened through libflytune_runtime (use flytune.load)."""

    def __init__(self, core: "_core.Export"):
        self._core = core
        # Plain attributes (torch.compile traces reads of them).
        self.key: str = core.key        # the process-wide key the FFI call and the torch op find it by
        self.dir: str = core.dir
        self.target: str = core.target  # the GPU target it was tuned for ("sm_90a", "gfx942", ...)
        self.device: str = core.device  # the device opened at load ("cuda:0", "hip:0", "none" or "emulate")
        self.emulated: bool = self.device == "emulate"  # the CPU emulator runs its kernels (tests, not timing)
        self.problems = tuple(Problem(p["key"], p["experts"], p["hidden"], p["inter"], p["topk"], p["dtype"],
                                      tuple(p["buckets"]), p["element_bytes"], p["scales"],
                                      tuple((n, tuple(s)) for n, s in p["scale_shapes"].items()),
                                      p["has_backward"])
                              for p in core.problems())
        # (problem, T) already warned about, least recently warned first: bounded like the plans (a server sees
        # a new T on most calls, and every T above the largest bucket is another key)
        self._coverage_warned: "collections.OrderedDict[tuple, None]" = collections.OrderedDict()
        # (problem, backward bucket) whose fp32 weight gradients were warned about (bounded by the export)
        self._fp32_grads_warned: set = set()
        with _exports_lock:
            _exports[core.key] = self

    def __repr__(self):
        device = f"emulate (CPU emulator of {self.target})" if self.emulated else self.device
        return f"flytune.Export({self.dir!r}, target={self.target}, device={device}, problems={len(self.problems)})"

    def problem(self, key: str) -> Problem:
        for p in self.problems:
            if p.key == key:
                return p
        # The runtime's own answer for an unknown key (it names the problems the export has).
        _call(self._core.plan_info, key, 1)
        raise NotFoundError(f"no problem {key}")  # not reached: the runtime refused it above

    def find_problem(self, experts: int, hidden: int, inter: int, topk: int, dtype: str, tokens: int = 1,
                     scales: str = "none") -> Problem:
        """The export's problem for these shapes (and, fp8, scale mode), or the runtime's NotFoundError naming
        what it serves."""
        key = _call(self._core.find_problem, experts, hidden, inter, topk, dtype, max(tokens, 1), scales)
        return self.problem(key)

    def plan(self, problem: str, tokens: int) -> dict:
        """What the layer for (problem, T) needs: the bucket, the weight copies each stage reads, the workspace,
        the weights' dtype and element_bytes, the scale mode and the scale tensors' shapes (scale_shapes), and
        how T is served: coverage ("tuned", "above_largest", "missing_bucket") with its coverage_note. Other
        than "tuned", a CoverageWarning once per (problem, T). ["backward"]: available (the export holds backward
        buckets of the problem), bucket, dw16 (its kernels write dW1 / dW2 in the weights' dtype; False where
        they predate that: fp32 and a cast, Fp32WeightGradientsWarning), why (the runtime's reason where not
        available) and scratch (total, offsets, bytes: the saved tensors and the backward's workspace of one
        backward call)."""
        plan = _call(self._core.plan_info, problem, tokens)
        self._warn_coverage(plan)
        return plan

    def _warn_coverage(self, plan: dict) -> None:
        if plan["coverage"] == "tuned":
            return
        key = (plan["problem"], plan["tokens"])
        with _exports_lock:
            if key in self._coverage_warned:
                self._coverage_warned.move_to_end(key)
                return
            self._coverage_warned[key] = None
            while len(self._coverage_warned) > PLAN_CACHE_PLANS:
                self._coverage_warned.popitem(last=False)
        warnings.warn(f"flytune: {plan['problem']}: {plan['coverage_note']}", CoverageWarning, stacklevel=3)

    def _backward_dw16(self, plan: dict) -> bool:
        """Whether the backward of `plan` (Export.plan, _core.plan_info) writes dW1 / dW2 in the weights' dtype;
        where its kernels predate that, False and a Fp32WeightGradientsWarning once per (problem, bucket)."""
        backward = plan["backward"]
        if backward["dw16"]:
            return True
        key = (plan["problem"], backward["bucket"])
        with _exports_lock:
            if key in self._fp32_grads_warned:
                return False
            self._fp32_grads_warned.add(key)
        warnings.warn(f"flytune: {plan['problem']}: the export's backward kernels (bucket {backward['bucket']}) "
                      f"predate the 16-bit weight gradients: dW1 and dW2 are written in float32 and cast to the "
                      f"weights' dtype (an fp32 buffer of each and a cast pass more); search the backward again "
                      f"with this flytune and export for the direct path (docs/TRAINING.md)",
                      Fp32WeightGradientsWarning, stacklevel=3)
        return False

    def weight_copies(self, problem: str) -> list:
        """The arranged copies of w1/w2 any bucket of `problem` reads ("w1_shuffled", "w2_tiled", ...)."""
        return _call(self._core.weight_copies, problem)

    def weights_read(self, problem: str) -> list:
        """Every weight tensor any bucket of `problem` reads: "w1" / "w2" (plain, where a stage reads neither
        copy) and the arranged copies."""
        return _call(self._core.weights_read, problem)

    def open_on(self, device: str) -> None:
        """Opens the export on another GPU too ("cuda:1"): loads its code objects there."""
        _call(self._core.open_on, device)

    def is_open_on(self, device: str) -> bool:
        return self._core.is_open_on(device)

    def cached_plans(self, device: Optional[str] = None) -> int:
        """How many plans (one per problem and token count) the export keeps on `device` (default: the one
        opened at load): at most PLAN_CACHE_PLANS, the least recently used freed first."""
        return _call(self._core.cached_plans, device or self.device)


def load(export_dir: os.PathLike | str, device: Optional[str] = None,
         devices: Optional[Sequence[str]] = None) -> Export:
    """Opens a `flytune export` folder through libflytune_runtime.

    device: None for the runtime's default (FLYTUNE_DEVICE, else the first GPU:
    HIP first, then CUDA), "cuda:N" / "hip:N", or "none" for the runtime's
    checks without a GPU (manifest, files, hashes): problems, buckets and plans
    can be listed, nothing can run; or "emulate": the CPU emulator of the
    export's target runs an export of `flytune search --emulate` (its host
    libraries) in this process, on host memory (JAX's CPU platform), slowly:
    for tests without a GPU, never for timing (Export.emulated says so).
    devices: more GPUs to open the export on ("cuda:1", ...); flytune.jax opens
    every local GPU of a jitted call's platform itself.

    Raises the FlytuneError subclass of the runtime's status with its message
    (ManifestError, FileError, HashError, TargetError, DeviceError, ...).
    """
    path = os.fspath(export_dir)
    e = Export(_call(_core.Export.open, path, device or ""))
    for d in devices or ():
        e.open_on(d)
    return e


def _find_export(key: str) -> Export:
    with _exports_lock:
        e = _exports.get(key)
    if e is None:
        raise ArgumentError(f"no export '{key}' is loaded in this process (flytune.load it first)")
    return e


SCALE_TENSORS = ("x_scale", "w1_scales", "w2_scales", "inter_scale")


def _scaled_problem(candidates: Sequence[Problem], context: str, given: dict) -> Problem:
    """The fp8 problem among `candidates` (one shape, possibly several scale modes) whose w1_scales shape is the
    given one (and, between per-tensor and static, which reads an inter_scale as one is given), after checking every scale tensor against its shape (Problem.scale_shapes). `given`: name ->
    None or (shape, dtype name), e.g. ("w1_scales": ((4,), "float32")). The torch op's and the JAX wrapper's
    one check; ArgumentError naming the tensor and the shape expected."""
    expected = " or ".join(f"{list(p.scale_shape('w1_scales'))} ({p.scales})" for p in candidates)
    if given.get("w1_scales") is None:
        raise ArgumentError(f"{context}: an fp8 layer needs its scales: w1_scales {expected} float32, "
                            f"and w2_scales (x_scale per-tensor and static, inter_scale static)")
    w1_shape = tuple(given["w1_scales"][0])
    chosen = [p for p in candidates if p.scale_shape("w1_scales") == w1_shape]
    if not chosen:
        raise ArgumentError(f"{context}: w1_scales {list(w1_shape)} fits no fp8 problem of the export for these "
                            f"shapes: expected {expected}")
    # per-tensor and static layers share their weight scales' shapes: inter_scale tells them apart
    fits = [p for p in chosen if (p.scale_shape("inter_scale") is None) == (given.get("inter_scale") is None)]
    p = (fits or chosen)[0]
    for name in SCALE_TENSORS:
        want, t = p.scale_shape(name), given.get(name)
        if want is None:
            if t is not None:
                why = "the layer scales its intermediate itself" if name == "inter_scale" else \
                    "the activations are scaled on the device"
                raise ArgumentError(f"{context}: {name} given, but {p.key} reads none ({p.scales}: {why})")
            continue
        if t is None:
            raise ArgumentError(f"{context}: {p.key} needs {name} {list(want)} float32")
        shape, dtype = tuple(t[0]), t[1]
        if shape != want and not (name in ("x_scale", "inter_scale") and shape == ()):
            raise ArgumentError(f"{context}: {name} must be {list(want)} ({p.scales} scales of {p.key}), "
                                f"got {list(shape)}")
        if dtype != "float32":
            raise ArgumentError(f"{context}: {name} must be float32, got {dtype}")
    return p


def _host_array(a, name: str, dtypes: tuple):
    """(address, element count) of a C-contiguous, writable host array (numpy, or a torch CPU tensor)."""
    if hasattr(a, "data_ptr") and hasattr(a, "device"):  # a torch tensor (torch is not imported here)
        dtype = str(a.dtype).replace("torch.", "")
        if a.device.type != "cpu":
            raise ArgumentError(f"flytune.fp8_ocp_to_fnuz: {name} must be in host memory (a CPU tensor), "
                                f"got {a.device}")
        if not a.is_contiguous():
            raise ArgumentError(f"flytune.fp8_ocp_to_fnuz: {name} must be contiguous (it is converted in place)")
        if dtype not in dtypes:
            raise ArgumentError(f"flytune.fp8_ocp_to_fnuz: {name} must be {' or '.join(dtypes)}, got {dtype}")
        return a.data_ptr(), a.numel()
    import numpy as np
    if not isinstance(a, np.ndarray):
        raise ArgumentError(f"flytune.fp8_ocp_to_fnuz: {name} must be a numpy array or a torch CPU tensor, "
                            f"got {type(a).__name__}")
    if a.dtype.name not in dtypes:
        raise ArgumentError(f"flytune.fp8_ocp_to_fnuz: {name} must be {' or '.join(dtypes)}, got {a.dtype.name}")
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ArgumentError(f"flytune.fp8_ocp_to_fnuz: {name} must be C-contiguous and writable "
                            f"(it is converted in place)")
    return a.ctypes.data, a.size


def fp8_ocp_to_fnuz(codes, scales) -> int:
    """Converts an OCP e4m3 checkpoint tensor for gfx942 (e4m3fnuz), in place, in host memory.

    codes: the weights' e4m3 codes (numpy uint8 / float8_e4m3fn, or a torch CPU tensor of torch.float8_e4m3fn
    or torch.uint8); scales: every float32 scale of that tensor (any granularity: per tensor, channel or block).
    The same bits mean half the value in fnuz, so the codes are kept and every scale doubled; OCP -0 becomes +0
    and OCP NaNs fnuz's NaN. Returns the count of NaN codes. Nothing is changed when it raises (ArgumentError:
    a scale that would not be finite doubled). A torch tensor is then read as fnuz with
    `codes.view(torch.float8_e4m3fnuz)`. The runtime's ft_fp8_ocp_to_fnuz.
    """
    code_ptr, count = _host_array(codes, "codes", ("uint8", "float8_e4m3fn"))
    scale_ptr, scale_count = _host_array(scales, "scales", ("float32",))
    return _call(_core.fp8_ocp_to_fnuz, code_ptr, count, scale_ptr, scale_count, context="flytune.fp8_ocp_to_fnuz")


def library_path() -> str:
    """The path of the shipped libflytune_runtime.so (link C or C++ code against it)."""
    return os.path.join(os.path.dirname(__file__), "lib", "libflytune_runtime.so")


def runtime_header() -> str:
    """The path of the C API header, flytune_runtime.h."""
    return os.path.join(os.path.dirname(__file__), "include", "flytune_runtime.h")
