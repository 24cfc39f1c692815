"""Benchmarks of the RMSNorm implementations against the memory floor.

RMSNorm is memory-bound: its floor is the bytes it must move (read ``x`` and
``weight`` once, write ``y`` once) divided by the device's bandwidth. This
module measures that bandwidth with a large device-to-device copy and every
implementation in the same run, so the ratios compare like with like.

Timing: CUDA events around a batch of calls queued behind a GPU spin (so
the host's launch latency is not counted), the implementations' batches
taken in turn (so a drifting clock slows all of them alike), L2 cleaned
before each batch (so no batch pays for the dirty lines of the one before),
inputs rotated through enough buffers to exceed the L2 cache (so no call
reads the previous call's data from L2), warm-up first, the median of
several batches reported. On the CPU the same loop uses ``time.perf_counter``.
Next to the implementations, every GPU pass times a copy of the same bytes
(``copy (same bytes)``): what a kernel of that size reaches at all.

What one run measures:

* on a GPU, three passes at each shape and dtype: ``forward`` (``y`` from
  ``x`` and ``weight``), ``backward`` (``dx`` and ``dweight`` from ``dy``) and
  ``fused`` (residual add + RMSNorm), for opguide's compiled and Triton
  kernels and for the PyTorch reference points;
* on any machine (``cpu``): the cost of calling an operator on a tiny input
  (the ``TORCH_LIBRARY`` op, ``torch.rms_norm``, the Python wrapper, a Python
  ``custom_op``), and the C++ CPU kernel on a large float32 input next to a
  copy of the same size. These run interleaved (round robin over the
  implementations, repeated; medians), so that a machine that is busy with
  something else slows every implementation alike.

An implementation that cannot run (a kernel that is not registered for the
device, Triton not installed) is skipped and the reason is recorded.

Run ``python -m guidekit.benchmark --help``; ``--cpu-only`` runs the CPU part.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

# Loads the compiled library: the torch.ops.opguide operators timed here.
import opguide

__all__ = [
    "copy_bandwidth",
    "time_per_call",
    "time_round_robin",
    "time_interleaved",
    "bytes_moved",
    "run_forward",
    "run_backward",
    "run_fused",
    "run_cpu_overhead",
    "run_cpu_kernel",
    "measure",
    "main",
]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
EPS = 1e-6
GPU_PASSES = ("forward", "backward", "fused")
PASSES = (*GPU_PASSES, "cpu")
# What each pass must move at the least, for the "bytes" of every row
# (s = bytes per element of x; inv_rms is float32).
BYTES_MODEL = {
    "forward": "read x (M*N*s) and weight (N*s), write y (M*N*s)",
    "backward": "read x, dy (M*N*s each), weight (N*s) and inv_rms (M*4); "
    "write dx (M*N*s) and dweight (N*s)",
    "fused": "read x, residual (M*N*s each) and weight (N*s); write residual and y (M*N*s each)",
    "cpu_kernel": "read x (M*N*4) and weight (N*4), write y (M*N*4); "
    "the copies: read and write M*N*4",
}
# Version of the result file's layout: 1 had the forward pass only.
FORMAT = 2
# The name of the reference row that every GPU pass has at every shape: a
# copy_ that moves the pass's bytes (half read, half written). Against the
# 1 GiB copy it shows what a kernel of this size can reach at all: a short
# kernel pays for filling and draining the GPU, and a copy does too.
SAME_SIZE_COPY = "copy (same bytes)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sleep_cycles_per_second(device: torch.device) -> float:
    """How many ``torch.cuda._sleep`` cycles the GPU spins through per second."""
    cached = _SLEEP_RATE.get(device.index)
    if cached is None:
        cycles = 10_000_000
        torch.cuda._sleep(cycles // 10)  # warm-up
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        cached = _SLEEP_RATE[device.index] = cycles / (start.elapsed_time(end) / 1e3)
    return cached


_SLEEP_RATE: dict[int | None, float] = {}


def _queue_seconds(fn: Callable, arg_sets: Sequence[tuple], calls: int) -> float:
    """How long the host takes to queue ``calls`` calls, on an idle GPU."""
    t0 = time.perf_counter()
    for i in range(calls):
        fn(*arg_sets[i % len(arg_sets)])
    return time.perf_counter() - t0


def _clean_l2(device: torch.device) -> None:
    """Leaves the L2 cache holding clean lines only, whatever ran before.

    A batch that writes a lot (``y``, or an eager reference's float32
    temporaries) leaves L2 full of dirty lines, and the next batch pays for
    writing them back to memory. Reading a buffer three times the size of L2
    evicts them all now, before the timing starts, so every batch starts from
    the same state and the order of the batches does not matter.
    """
    buf = _L2_SWEEP.get(device.index)
    if buf is None:
        words = 3 * _l2_bytes(device) // 4
        buf = _L2_SWEEP[device.index] = torch.ones(words, dtype=torch.float32, device=device)
    buf.sum()


_L2_SWEEP: dict[int | None, torch.Tensor] = {}


def _timed_batch(
    fn: Callable,
    arg_sets: Sequence[tuple],
    first: int,
    calls: int,
    device: torch.device,
    sleep_cycles: int,
    clean_l2: bool = True,
) -> float:
    """Seconds per call of one batch of ``calls`` calls starting at set ``first``.

    On a GPU, L2 is cleaned first (:func:`_clean_l2`) unless ``clean_l2`` is
    false; then a spin, long enough for the batch to be queued behind it.
    """
    n = len(arg_sets)
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        if clean_l2:
            _clean_l2(device)
        torch.cuda._sleep(sleep_cycles)
        start.record()
        for k in range(first, first + calls):
            fn(*arg_sets[k % n])
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls
    t0 = time.perf_counter()
    for k in range(first, first + calls):
        fn(*arg_sets[k % n])
    return (time.perf_counter() - t0) / calls


def _prepare(
    fn: Callable, arg_sets: Sequence[tuple], device: torch.device, calls: int, warmup: int
) -> int:
    """Warms ``fn`` up and returns the GPU spin (cycles) to put before each batch."""
    for i in range(warmup * calls):
        fn(*arg_sets[i % len(arg_sets)])
    _sync(device)
    if device.type != "cuda":
        return 0
    queue = _queue_seconds(fn, arg_sets, calls)
    _sync(device)
    # Twice the queueing time, at least 100 us: the GPU is still spinning
    # when the last call of the batch is queued.
    return int(_sleep_cycles_per_second(device) * max(2 * queue, 1e-4))


def time_per_call(
    fn: Callable[..., object],
    arg_sets: Sequence[tuple],
    *,
    device: torch.device,
    batches: int = 15,
    calls_per_batch: int = 20,
    warmup: int = 3,
    clean_l2: bool = True,
) -> float:
    """Median seconds per call of ``fn(*args)``, cycling through ``arg_sets``.

    On a GPU the time is the GPU's: each timed batch is queued behind a short
    spin kernel (``torch.cuda._sleep``) that lasts longer than Python takes
    to queue the batch, so the calls run back to back and the time between
    the two CUDA events does not include the host's launch latency. The cost
    of the Python call itself is measured separately, on the CPU
    (:func:`run_cpu_overhead`).

    Args:
        fn: the function to time.
        arg_sets: several argument tuples, each with its own buffers; calls
            cycle through them so that data is not reused from cache.
        device: where ``fn`` runs (CUDA events on a GPU, wall time on a CPU).
        batches: how many timed batches (the median is returned).
        calls_per_batch: calls inside one timed batch.
        warmup: untimed batches first (compilation, autotuning, allocator).
        clean_l2: on a GPU, evict what the previous batch left in L2 before
            each batch (:func:`_clean_l2`).

    Returns:
        Seconds per call, median over batches.
    """
    return time_round_robin(
        {"fn": (fn, arg_sets)}, device=device, batches=batches,
        calls_per_batch=calls_per_batch, warmup=warmup, clean_l2=clean_l2,
    )["fn"]  # fmt: skip


def time_round_robin(
    fns: dict[str, tuple[Callable[..., object], Sequence[tuple]]],
    *,
    device: torch.device,
    batches: int = 15,
    calls_per_batch: int = 20,
    warmup: int = 3,
    clean_l2: bool = True,
) -> dict[str, float]:
    """Like :func:`time_per_call` for several functions, their batches taken in turn.

    Batch 1 of every function, then batch 2 of every function, and so on
    (the order reversed every other round): a GPU whose clock or temperature
    drifts during the run slows all of them alike, so their ratios hold.
    Each batch starts from a clean L2 (``clean_l2``), so that no function
    pays for the dirty cache lines of the one timed before it.

    Args:
        fns: by name, the function and its argument sets.
        device: where the functions run.
        batches, calls_per_batch, warmup, clean_l2: as for :func:`time_per_call`.

    Returns:
        Seconds per call of each function (median over its batches), by name.
    """
    sleep = {name: _prepare(fn, sets, device, calls_per_batch, warmup)
             for name, (fn, sets) in fns.items()}  # fmt: skip
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for b in range(batches):
        for name in names if b % 2 == 0 else reversed(names):
            fn, sets = fns[name]
            samples[name].append(
                _timed_batch(
                    fn, sets, b * calls_per_batch, calls_per_batch, device, sleep[name], clean_l2
                )
            )
    return {name: statistics.median(v) for name, v in samples.items()}


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    rounds: int = 15,
    calls_per_round: int = 1,
    warmup: int = 1,
) -> dict[str, float]:
    """Median seconds per call of each CPU function, measured round robin.

    Every round times ``calls_per_round`` calls of each function in turn
    (the order reversed every other round), so that a slow spell of a shared
    machine lands on all of them rather than on one. The garbage collector
    is paused while timing, as :mod:`timeit` does.

    Args:
        fns: functions without arguments, by name.
        rounds: timed rounds; the median over rounds is returned.
        calls_per_round: calls of one function inside one timed sample.
        warmup: untimed rounds first.

    Returns:
        Seconds per call of each function, by name.
    """
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            for _ in range(calls_per_round):
                fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            for name in names if r % 2 == 0 else reversed(names):
                fn = fns[name]
                t0 = time.perf_counter()
                for _ in range(calls_per_round):
                    fn()
                samples[name].append((time.perf_counter() - t0) / calls_per_round)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: statistics.median(s) for name, s in samples.items()}


def _l2_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return int(getattr(props, "L2_cache_size", 50 * 2**20))
    return 64 * 2**20


#: The fewest input sets a timed batch rotates through, however large a set.
#: With one set every call reads the previous call's input again, and a set
#: larger than L2 still leaves part of itself there: on an H100 some kernels
#: gained 3-4 points of the copy from it at 2**26 elements (step 11, "How to
#: time"). With three, the set a call reads was last read two calls before.
MIN_SETS = 3


def _rotation(bytes_per_set: int, device: torch.device, min_sets: int = MIN_SETS) -> int:
    """How many input sets to rotate through: at least ``min_sets``, and enough
    to make the working set at least 3x the L2 cache."""
    return max(min_sets, min(64, -(-3 * _l2_bytes(device) // max(1, bytes_per_set))))


def copy_bandwidth(device: torch.device, nbytes: int = 2**30, *, clean_l2: bool = True) -> float:
    """Bytes per second of a large device-to-device copy, counting read + write."""
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = time_per_call(
        lambda a, b: b.copy_(a), [(src, dst)], device=device, batches=10, calls_per_batch=5,
        clean_l2=clean_l2,
    )  # fmt: skip
    return 2 * src.numel() * src.element_size() / seconds


@dataclasses.dataclass
class Row:
    """One measurement: an implementation on one shape and dtype."""

    impl: str
    m: int
    n: int
    dtype: str
    seconds: float
    bytes: int

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9


@dataclasses.dataclass
class Skip:
    """An implementation that could not run, and why (no shape: at any shape)."""

    pass_: str
    impl: str
    m: int | None
    n: int | None
    dtype: str | None
    reason: str

    def asdict(self) -> dict:
        return {"pass": self.pass_, "impl": self.impl, "m": self.m, "n": self.n,
                "dtype": self.dtype, "reason": self.reason}  # fmt: skip


def _reason(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def _reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _unfused_reference(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # What a model writes without the fused operator: the add, then RMSNorm.
    h = residual + x
    return _reference(h, w, eps), h


def _triton_available(device: torch.device | None = None) -> str | None:
    """None when opguide's Triton operators can be timed on ``device``, else why not."""
    if device is not None and device.type == "cpu":
        return "on CPU tensors Triton kernels run in Triton's interpreter: not a measurement"
    try:
        from opguide import triton_rms_norm  # noqa: F401  (registers the operators)
    except ImportError as err:
        return _reason(err)
    return None


def forward_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """The forward implementations to compare, by name."""

    compiled_reference = torch.compile(_reference, dynamic=False)
    impls = {
        "opguide": lambda x, w: opguide.rms_norm(x, w, EPS, backend="cpp"),
        "F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),
        "compile(reference)": lambda x, w: compiled_reference(x, w, EPS),
        "eager reference": lambda x, w: _reference(x, w, EPS),
    }
    if _triton_available(device) is None:
        impls["opguide triton"] = lambda x, w: opguide.rms_norm(x, w, EPS, backend="triton")
    return impls


def _inv_rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The per-row statistic that the forward pass saves for the backward one."""
    try:
        return torch.ops.opguide.rms_norm_fwd.default(x, w, EPS)[1]
    except (AttributeError, NotImplementedError, RuntimeError):
        # No rms_norm_fwd kernel for this device: the same statistic, by torch.
        return torch.rsqrt(x.float().pow(2).mean(-1) + EPS)


def _autograd_backward(forward: Callable) -> Callable:
    """Prepares a fixed graph ``y = forward(x, w)`` whose backward is then timed."""

    def prepare(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> Callable[[], object]:
        x = x.detach().requires_grad_()
        w = w.detach().requires_grad_()
        y = forward(x, w)
        return lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True)

    return prepare


def backward_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """The backward implementations to compare, by name.

    Each value prepares one call from ``(x, w, dy)`` (running the forward
    pass once, untimed) and returns a function without arguments that runs
    only the backward pass: the backward operator itself where opguide has
    one, else ``torch.autograd.grad`` on a graph built once and kept.
    """

    def opguide_op(x, w, dy):
        # Missing in a build without the autograd chapter: AttributeError.
        op = torch.ops.opguide.rms_norm_backward.default
        inv_rms = _inv_rms(x, w)
        return lambda: op(dy, x, w, inv_rms)

    compiled_reference = torch.compile(_reference, dynamic=False)
    impls = {
        "opguide": opguide_op,
        "opguide autograd": _autograd_backward(lambda x, w: opguide.rms_norm(x, w, EPS)),
        "F.rms_norm": _autograd_backward(
            lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)
        ),
        "compile(reference)": _autograd_backward(lambda x, w: compiled_reference(x, w, EPS)),
        "eager reference": _autograd_backward(lambda x, w: _reference(x, w, EPS)),
    }
    if _triton_available(device) is None:

        def triton_op(x, w, dy):
            op = torch.ops.opguide.rms_norm_backward_triton.default
            inv_rms = torch.ops.opguide.rms_norm_fwd_triton.default(x, w, EPS)[1]
            return lambda: op(dy, x, w, inv_rms)

        impls["opguide triton"] = triton_op
    return impls


def fused_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """The residual-add + RMSNorm implementations to compare, by name."""

    compiled = torch.compile(_unfused_reference, dynamic=False)
    impls = {
        "opguide": lambda x, r, w: opguide.fused_add_rms_norm_(x, r, w, EPS, backend="cpp"),
        "compile(unfused reference)": lambda x, r, w: compiled(x, r, w, EPS),
        "eager add + F.rms_norm": lambda x, r, w: torch.nn.functional.rms_norm(
            r + x, (x.shape[-1],), w, EPS
        ),
    }
    if _triton_available(device) is None:
        impls["opguide triton"] = lambda x, r, w: opguide.fused_add_rms_norm_(
            x, r, w, EPS, backend="triton"
        )
    return impls


def _select(impls: dict, only: Sequence[str] | None) -> dict:
    return impls if only is None else {k: v for k, v in impls.items() if k in only}


def _element_size(dtype: torch.dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def _time_impls(
    pass_name: str,
    impls: dict[str, Callable],
    make_sets: Callable[[], list[tuple]],
    *,
    m: int,
    n: int,
    dtype_name: str,
    moved: int,
    device: torch.device,
    prepared: bool,
    rows: list[Row],
    skips: list[Skip],
    clean_l2: bool = True,
    copy_sets: int = 0,
) -> None:
    """Times the implementations round robin on shared inputs; records a skip on failure.

    Every implementation reads the same input sets (the fused pass updates
    its residual in place, which changes values, not the work), so one set
    of buffers serves them all and their batches can alternate. With
    ``copy_sets`` > 0, a copy of ``moved`` bytes (:data:`SAME_SIZE_COPY`)
    runs in the same round robin, through that many pairs of buffers.
    """
    sets = make_sets()
    ready: dict[str, tuple[Callable, list[tuple]]] = {}
    if copy_sets > 0:
        words = max(1, moved // 8)  # float32 words; read once, written once
        pairs = [(torch.empty(words, device=device).uniform_(), torch.empty(words, device=device))
                 for _ in range(copy_sets)]  # fmt: skip
        ready[SAME_SIZE_COPY] = (lambda src, dst: dst.copy_(src), pairs)
    for name, fn in impls.items():
        try:
            if prepared:  # fn builds a call from each set (backward)
                calls = [(fn(*s),) for s in sets]
                timed, arg_sets = (lambda call: call()), calls
            else:
                timed, arg_sets = fn, sets
            timed(*arg_sets[0])  # a failing implementation fails here, once
        except Exception as err:  # recorded, not raised: the others still run
            skips.append(Skip(pass_name, name, m, n, dtype_name, _reason(err)))
        else:
            ready[name] = (timed, arg_sets)
    seconds: dict[str, float] = {}
    try:
        seconds = time_round_robin(ready, device=device, clean_l2=clean_l2)
    except Exception as err:  # a failure while timing: every implementation of this shape
        skips.extend(Skip(pass_name, name, m, n, dtype_name, _reason(err)) for name in ready)
    finally:
        # Free the buffers (and the backward graphs) before the next shape.
        sets = ready = pairs = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for name, t in seconds.items():
        rows.append(Row(name, m, n, dtype_name, t, moved))


def bytes_moved(pass_name: str, m: int, n: int, s: int) -> int:
    """The bytes that a pass must move at the least (see ``BYTES_MODEL``).

    Args:
        pass_name: ``"forward"``, ``"backward"`` or ``"fused"``.
        m: rows of ``x``.
        n: the normalised dimension.
        s: bytes per element of ``x``.

    Returns:
        The bytes read plus the bytes written.
    """
    if pass_name == "forward":
        return 2 * m * n * s + n * s
    if pass_name == "backward":
        return 3 * m * n * s + 2 * n * s + 4 * m
    return 4 * m * n * s + n * s


def _input_sets(
    pass_name: str, m: int, n: int, dtype: torch.dtype, device: torch.device, count: int
) -> list[tuple]:
    """``count`` random input sets: (x, w), (x, w, dy) or (x, residual, w)."""

    def rows() -> torch.Tensor:
        return torch.randn(m, n, device=device, dtype=dtype)

    def weight() -> torch.Tensor:
        return torch.randn(n, device=device, dtype=dtype)

    if pass_name == "forward":
        return [(rows(), weight()) for _ in range(count)]
    if pass_name == "backward":
        return [(rows(), weight(), rows()) for _ in range(count)]
    return [(rows(), rows(), weight()) for _ in range(count)]


def _run_pass(
    pass_name: str,
    shapes: Sequence[tuple[int, int]],
    dtypes: Sequence[str],
    device: torch.device,
    only: Sequence[str] | None,
    clean_l2: bool = True,
) -> tuple[list[Row], list[Skip]]:
    rows: list[Row] = []
    skips: list[Skip] = []
    if pass_name == "forward":
        impls = forward_implementations(device)
    elif pass_name == "backward":
        impls = backward_implementations(device)
    else:
        impls = fused_implementations(device)
    impls = _select(impls, only)
    triton_missing = _triton_available(device)
    if triton_missing is not None and (only is None or "opguide triton" in only):
        skips.append(Skip(pass_name, "opguide triton", None, None, None, triton_missing))
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        s = _element_size(dtype)
        for m, n in shapes:
            # A fresh start for torch.compile at each shape and dtype, so that
            # no run hits its recompilation limit and falls back to eager.
            torch.compiler.reset()
            moved = bytes_moved(pass_name, m, n, s)
            count = _rotation(moved, device)
            make_sets = functools.partial(_input_sets, pass_name, m, n, dtype, device, count)
            with_copy = device.type == "cuda" and (only is None or SAME_SIZE_COPY in only)
            _time_impls(
                pass_name, impls, make_sets,
                m=m, n=n, dtype_name=dtype_name, moved=moved, device=device,
                prepared=pass_name == "backward", rows=rows, skips=skips, clean_l2=clean_l2,
                copy_sets=count if with_copy else 0,
            )  # fmt: skip
    return rows, skips


def run_forward(
    shapes: Sequence[tuple[int, int]],
    dtypes: Sequence[str],
    device: torch.device,
    only: Sequence[str] | None = None,
    clean_l2: bool = True,
) -> list[Row]:
    """Times every forward implementation at every shape and dtype.

    Implementations that fail are left out; :func:`measure` records why.
    """
    return _run_pass("forward", shapes, dtypes, device, only, clean_l2)[0]


def run_backward(
    shapes: Sequence[tuple[int, int]],
    dtypes: Sequence[str],
    device: torch.device,
    only: Sequence[str] | None = None,
    clean_l2: bool = True,
) -> tuple[list[Row], list[Skip]]:
    """Times every backward implementation (``dx`` and ``dweight``); returns rows and skips."""
    return _run_pass("backward", shapes, dtypes, device, only, clean_l2)


def run_fused(
    shapes: Sequence[tuple[int, int]],
    dtypes: Sequence[str],
    device: torch.device,
    only: Sequence[str] | None = None,
    clean_l2: bool = True,
) -> tuple[list[Row], list[Skip]]:
    """Times every residual-add + RMSNorm implementation; returns rows and skips."""
    return _run_pass("fused", shapes, dtypes, device, only, clean_l2)


_PYTHON_CUSTOM_OP: Callable | None = None


def python_custom_op() -> Callable:
    """``opguide_bench::rms_norm``: a Python ``custom_op`` around the same C++ kernel.

    Its body calls ``torch.ops.opguide.rms_norm``, so the difference to calling
    that operator directly is the cost of the Python operator layer alone.
    Defined on first use (an operator name can be defined once per process).
    """
    global _PYTHON_CUSTOM_OP
    if _PYTHON_CUSTOM_OP is None:

        @torch.library.custom_op("opguide_bench::rms_norm", mutates_args=())
        def rms_norm_custom(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
            return torch.ops.opguide.rms_norm.default(x, weight, eps)

        @rms_norm_custom.register_fake
        def _(x, weight, eps):
            return x.new_empty(x.shape)

        _PYTHON_CUSTOM_OP = rms_norm_custom
    return _PYTHON_CUSTOM_OP


def run_cpu_overhead(
    shape: tuple[int, int] = (4, 64), *, rounds: int = 25, calls_per_round: int = 200
) -> dict:
    """Time per call of each way to call RMSNorm on a tiny float32 CPU input.

    On a tiny input the kernel's work is negligible, so the time is the cost
    of the call itself: argument parsing, dispatch, Python layers. One row
    calls the operator under :func:`torch.inference_mode`, which leaves out
    the autograd dispatch keys (and so opguide's autograd kernel, which is
    Python code registered with ``torch.library.register_autograd``).

    Returns:
        ``{"shape", "dtype", "rounds", "calls_per_round", "rows"}``; each row has
        ``impl``, ``seconds`` and ``vs_torch_rms_norm`` (the ratio of times).
    """

    m, n = shape
    x, w = torch.randn(m, n), torch.randn(n)
    custom = python_custom_op()
    op = torch.ops.opguide.rms_norm.default

    def batch(call: Callable[[], object], mode=contextlib.nullcontext) -> Callable[[], None]:
        # calls_per_round calls inside one context (entered once, not per call).
        def run() -> None:
            with mode():
                for _ in range(calls_per_round):
                    call()

        return run

    fns = {
        "torch.ops.opguide.rms_norm": batch(lambda: op(x, w, EPS)),
        "torch.ops.opguide.rms_norm, inference_mode": batch(
            lambda: op(x, w, EPS), torch.inference_mode
        ),
        "torch.rms_norm": batch(lambda: torch.rms_norm(x, (n,), w, EPS)),
        "F.rms_norm": batch(lambda: torch.nn.functional.rms_norm(x, (n,), w, EPS)),
        "opguide.rms_norm": batch(lambda: opguide.rms_norm(x, w, EPS)),
        "Python custom_op": batch(lambda: custom(x, w, EPS)),
    }
    per_batch = time_interleaved(fns, rounds=rounds, calls_per_round=1, warmup=2)
    seconds = {name: t / calls_per_round for name, t in per_batch.items()}
    base = seconds["torch.rms_norm"]
    rows = [{"impl": k, "seconds": v, "vs_torch_rms_norm": v / base} for k, v in seconds.items()]
    return {"shape": [m, n], "dtype": "fp32", "rounds": rounds,
            "calls_per_round": calls_per_round, "rows": rows}  # fmt: skip


# The goal for the CPU kernel (float32 4096x4096): the allocating operator
# within this many times a same-size copy_ (step 11, "On the CPU").
CPU_KERNEL_TARGET = 2.5


def run_cpu_kernel(shape: tuple[int, int] = (4096, 4096), *, rounds: int = 15) -> dict:
    """The C++ CPU kernel on a large float32 input next to copies of the same size.

    ``copy_`` (into a tensor that exists) is the memory floor: one read and
    one write of every element. The operator must also allocate its output;
    ``clone`` is a copy that does too, so the cost of fresh memory (page
    faults on first touch) shows separately. The private operator
    ``_rms_norm_into`` runs the same kernel into an existing tensor, which
    times the loop alone.

    Returns:
        ``{"shape", "dtype", "threads", "rounds", "copy_bandwidth_GBps",
        "target_vs_copy", "rows"}``; each row has ``impl``, ``seconds``,
        ``bytes``, ``GBps`` and ``vs_copy`` (the ratio of its time to the time
        of ``copy_``). ``target_vs_copy`` is the goal for the allocating
        operator: at most that many times the copy.
    """
    m, n = shape
    x, w = torch.randn(m, n), torch.randn(n)
    dst, into = torch.empty_like(x), torch.empty_like(x)
    fns = {
        "copy_ (memory floor)": lambda: dst.copy_(x),
        "clone (copy + new memory)": lambda: x.clone(),
        "opguide (C++ kernel)": lambda: torch.ops.opguide.rms_norm.default(x, w, EPS),
        "opguide into existing y": lambda: torch.ops.opguide._rms_norm_into.default(
            x, w, EPS, into
        ),
        "F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (n,), w, EPS),
    }
    seconds = time_interleaved(fns, rounds=rounds, calls_per_round=1, warmup=1)
    floor = seconds["copy_ (memory floor)"]
    rows = []
    for name, t in seconds.items():
        moved = 2 * m * n * 4 + (0 if name.startswith(("copy", "clone")) else n * 4)
        rows.append({"impl": name, "seconds": t, "bytes": moved, "GBps": moved / t / 1e9,
                     "vs_copy": t / floor})  # fmt: skip
    return {"shape": [m, n], "dtype": "fp32", "threads": torch.get_num_threads(),
            "rounds": rounds, "copy_bandwidth_GBps": 2 * m * n * 4 / floor / 1e9,
            "target_vs_copy": CPU_KERNEL_TARGET, "rows": rows}  # fmt: skip


# The row lengths of the sweep, at a fixed total of SWEEP_ELEMENTS elements:
# M = SWEEP_ELEMENTS // N rows, so every point moves the same bytes and only
# the shape of the work changes.
SWEEP_NS = tuple(2**k for k in range(8, 18))  # 256 ... 131072
SWEEP_ELEMENTS = 2**26
SWEEP_PASSES = ("forward", "backward", "training", "fused")


def peer_implementations(pass_name: str) -> tuple[dict[str, Callable], dict[str, str]]:
    """Other libraries' RMSNorm for ``pass_name``, and why each missing one is missing.

    Liger-Kernel (``liger_kernel``, Triton) and Quack (``quack``, CuTe DSL)
    are optional: a library that does not import is left out, with the
    reason. Forward and fused entries take the pass's inputs; backward
    entries prepare a call (see :func:`backward_implementations`); training
    entries run forward and backward (see :func:`training_implementations`).
    """
    impls: dict[str, Callable] = {}
    missing: dict[str, str] = {}
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        def liger(x, w):
            return LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)

    except Exception as err:  # ImportError, or a broken install
        missing["liger"] = _reason(err)
        liger = None
    try:
        from quack.rmsnorm import rmsnorm as quack_rmsnorm

        def quack(x, w):
            return quack_rmsnorm(x, w, eps=EPS)

    except Exception as err:
        missing["quack"] = _reason(err)
        quack = None
    for name, fn in (("liger", liger), ("quack", quack)):
        if fn is None:
            continue
        if pass_name == "forward":
            impls[name] = fn
        elif pass_name == "backward":
            impls[name] = _autograd_backward(fn)
        elif pass_name == "training":
            impls[name] = _training(fn)
    return impls, missing


def _training(forward: Callable) -> Callable:
    """A training step's norm: ``y = forward(x, w)``, then ``dx, dw`` by autograd."""

    def step(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor):
        return torch.autograd.grad(forward(x, w), (x, w), dy)

    return step


def training_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """Forward + backward through autograd, as a training step calls the norm."""

    compiled_reference = torch.compile(_reference, dynamic=False)
    impls = {
        "opguide": _training(lambda x, w: opguide.rms_norm(x, w, EPS, backend="cpp")),
        "F.rms_norm": _training(
            lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)
        ),
        "compile(reference)": _training(lambda x, w: compiled_reference(x, w, EPS)),
    }
    if _triton_available(device) is None:
        impls["opguide triton"] = _training(
            lambda x, w: opguide.rms_norm(x, w, EPS, backend="triton")
        )
    return impls


def _sweep_sets(
    pass_name: str, m: int, n: int, dtype: torch.dtype, device: torch.device, count: int
) -> list[tuple]:
    sets = _input_sets("backward" if pass_name == "training" else pass_name, m, n, dtype,
                       device, count)  # fmt: skip
    if pass_name == "training":
        sets = [(x.requires_grad_(), w.requires_grad_(), dy) for x, w, dy in sets]
    return sets


def run_sweep(
    device: torch.device,
    *,
    dtypes: Sequence[str] = ("bf16",),
    ns: Sequence[int] = SWEEP_NS,
    elements: int = SWEEP_ELEMENTS,
    passes: Sequence[str] = SWEEP_PASSES,
    only: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    min_sets: int = MIN_SETS,
) -> dict:
    """GPU time of every implementation at every row length N, M = elements // N.

    The same timing as the fixed-shape passes (a batch queued behind a GPU
    spin, L2 cleaned, inputs rotated; :func:`time_round_robin`), with a copy
    of the same bytes in every round robin. ``training`` is a forward and a
    backward through autograd, as a training step runs them; its bytes are
    those of the forward plus those of the backward. ``min_sets``: the
    fewest input sets a batch rotates through (:data:`MIN_SETS`; 1 shows
    what reading the previous call's input again gains).

    Returns:
        ``{"elements", "ns", "dtypes", "rows", "skipped", "peers_missing",
        "min_sets"}``;
        each row has ``pass``, ``impl``, ``m``, ``n``, ``dtype``, ``seconds``,
        ``bytes``, ``GBps`` and ``vs_copy`` (the copy's time over the
        implementation's: 1.0 is the copy's speed).
    """
    say = progress or (lambda line: None)
    rows: list[dict] = []
    skips: list[Skip] = []
    missing: dict[str, str] = {}
    for pass_name in passes:
        if pass_name == "forward":
            impls = forward_implementations(device)
            impls.pop("eager reference", None)
        elif pass_name == "backward":
            impls = backward_implementations(device)
            impls.pop("eager reference", None)
            impls.pop("opguide autograd", None)
        elif pass_name == "training":
            impls = training_implementations(device)
        elif pass_name == "fused":
            impls = fused_implementations(device)
        else:
            raise ValueError(f"passes must be among {SWEEP_PASSES}, got {pass_name!r}")
        peers, why = peer_implementations(pass_name)
        missing.update(why)
        impls = _select({**impls, **peers}, only)
        for dtype_name in dtypes:
            dtype = DTYPES[dtype_name]
            s = _element_size(dtype)
            for n in ns:
                m = max(1, elements // n)
                say(f"sweep: {pass_name} {dtype_name} {m}x{n}")
                torch.compiler.reset()
                if pass_name == "training":
                    moved = bytes_moved("forward", m, n, s) + bytes_moved("backward", m, n, s)
                else:
                    moved = bytes_moved(pass_name, m, n, s)
                count = _rotation(moved, device, min_sets)
                make_sets = functools.partial(_sweep_sets, pass_name, m, n, dtype, device, count)
                found: list[Row] = []
                _time_impls(
                    pass_name, impls, make_sets, m=m, n=n, dtype_name=dtype_name, moved=moved,
                    device=device, prepared=pass_name == "backward", rows=found, skips=skips,
                    copy_sets=count,
                )  # fmt: skip
                copy = next((r for r in found if r.impl == SAME_SIZE_COPY), None)
                for r in found:
                    rows.append(dataclasses.asdict(r) | {
                        "pass": pass_name, "GBps": r.gbps,
                        "vs_copy": copy.seconds / r.seconds if copy else None,
                    })  # fmt: skip
    return {"elements": elements, "ns": list(ns), "dtypes": list(dtypes), "rows": rows,
            "skipped": [s.asdict() for s in skips], "peers_missing": missing,
            "min_sets": min_sets}  # fmt: skip


# The shapes of the eager mode: decode (one row) to small batches.
EAGER_MS = (1, 16, 128, 1024)
EAGER_NS = (4096, 8192)


def eager_implementations(mode: str, device: torch.device | None = None) -> dict[str, Callable]:
    """Calls as a user writes them, by name; ``mode`` is ``forward`` or ``training``.

    Each value takes ``(x, w, dy)``. ``training`` calls ``y = f(x, w)`` and then
    ``y.backward(dy)`` on leaves that require grad (their ``.grad`` reset to
    None first, as an optimiser's ``zero_grad`` does). Training also has the
    rows of :data:`EAGER_KERNELS` (the operators without autograd),
    :data:`FUNCTION_NODE` (the C++ operators under ``torch::autograd::Function``)
    and :data:`EMPTY_FUNCTION` (autograd around a Python Function that does nothing).
    """

    norms: dict[str, Callable] = {
        "opguide": lambda x, w: opguide.rms_norm(x, w, EPS, backend="cpp"),
        "F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),
    }
    if mode == "forward":
        norms["torch.ops.opguide.rms_norm"] = lambda x, w: torch.ops.opguide.rms_norm.default(
            x, w, EPS
        )
    if _triton_available(device) is None:
        norms["opguide triton"] = lambda x, w: opguide.rms_norm(x, w, EPS, backend="triton")
    if device is None or device.type != "cpu":  # the peers are GPU libraries
        norms.update(peer_implementations("forward")[0])
    if mode == "forward":

        def forward(f: Callable) -> Callable:
            return lambda x, w, dy: f(x, w)

        return {name: forward(f) for name, f in norms.items()}

    def step(f: Callable) -> Callable:
        def run(x, w, dy):
            x.grad = w.grad = None
            f(x, w).backward(dy)

        return run

    if hasattr(torch.ops.opguide, "rms_norm_fwd"):
        fwd = torch.ops.opguide.rms_norm_fwd.default
        norms[FUNCTION_NODE] = lambda x, w: fwd(x, w, EPS)[0]
    impls = {name: step(f) for name, f in norms.items()}
    impls.update(_kernels_without_autograd(device))
    impls[EMPTY_FUNCTION] = step(_EmptyFunction.apply)
    return impls


#: The training mode's row of the same operators under a graph node that
#: ``torch::autograd::Function`` builds (``opguide::rms_norm_fwd``'s autograd
#: kernel), where ``opguide`` has the node ``opguide::rms_norm`` builds by hand.
FUNCTION_NODE = "opguide, autograd::Function"

#: The training mode's row of a Python ``autograd.Function`` that launches no
#: kernel: what autograd costs around any operator written that way.
EMPTY_FUNCTION = "empty Python Function"


class _EmptyFunction(torch.autograd.Function):
    """Returns an uninitialised tensor like x; its backward passes dy through."""

    @staticmethod
    def forward(ctx, x, w):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


#: The training mode's rows that call the forward and backward operators
#: themselves, with no autograd graph, on tensors that do not require grad:
#: what a training call costs without autograd's part.
EAGER_KERNELS = {
    "opguide": "opguide ops",
    "opguide triton": "opguide triton launches",
    "F.rms_norm": "F.rms_norm ops",
}


def _kernels_without_autograd(device: torch.device | None) -> dict[str, Callable]:
    """The rows of :data:`EAGER_KERNELS` that this torch, build and device can run."""
    impls: dict[str, Callable] = {}
    ops = torch.ops.opguide
    if hasattr(ops, "rms_norm_fwd") and hasattr(ops, "rms_norm_backward"):
        fwd, bwd = ops.rms_norm_fwd.default, ops.rms_norm_backward.default

        def opguide_ops(x, w, dy):
            bwd(dy, x, w, fwd(x, w, EPS)[1])

        impls[EAGER_KERNELS["opguide"]] = opguide_ops
    if device is not None and _triton_available(device) is None:
        from opguide import triton_rms_norm as tr

        def triton_launches(x, w, dy):
            # The kernels of the direct eager path, launched as its autograd
            # Function launches them, without the Function.
            tr._direct_backward(dy, x, w, tr._direct_forward(x, w, EPS, training=True)[1])

        impls[EAGER_KERNELS["opguide triton"]] = triton_launches
    aten = torch.ops.aten
    on_gpu = device is not None and device.type == "cuda"
    if on_gpu and hasattr(aten, "_fused_rms_norm_backward"):
        # What F.rms_norm's autograd node calls on a GPU (on a CPU it is composite).
        def fused(x, w, dy):
            shape = [x.shape[-1]]
            rstd = aten._fused_rms_norm.default(x, shape, w, EPS)[1]
            aten._fused_rms_norm_backward.default(dy, x, shape, rstd, w, [True, True])

        impls[EAGER_KERNELS["F.rms_norm"]] = fused
    return impls


def run_eager(
    device: torch.device,
    *,
    dtype: str = "bf16",
    ms: Sequence[int] = EAGER_MS,
    ns: Sequence[int] = EAGER_NS,
    calls: int = 50,
    rounds: int = 31,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Wall-clock time per call, as a user's program waits for it.

    No spin and no CUDA graph: ``calls`` calls are made back to back, then the
    device is synchronised, and the elapsed time is divided by ``calls``.
    Where the kernels are short this is the host's cost of a call (Python,
    dispatch, autograd, launches); where they are long, the GPU's. The
    implementations take turns (:func:`time_interleaved`). A training call's
    host time varies by several percent from round to round, so the median
    takes many rounds.

    Returns:
        ``{"dtype", "calls", "rounds", "rows", "skipped"}``; each row has
        ``mode`` (``forward`` or ``training``), ``impl``, ``m``, ``n``,
        ``seconds`` and ``vs_F.rms_norm`` (the ratio of times).
    """
    say = progress or (lambda line: None)
    dt = DTYPES[dtype]
    rows: list[dict] = []
    skips: list[Skip] = []
    for mode in ("forward", "training"):
        impls = eager_implementations(mode, device)
        for n in ns:
            for m in ms:
                say(f"eager: {mode} {dtype} {m}x{n}")
                grad = mode == "training"
                x = torch.randn(m, n, device=device, dtype=dt, requires_grad=grad)
                w = torch.randn(n, device=device, dtype=dt, requires_grad=grad)
                dy = torch.randn(m, n, device=device, dtype=dt)
                fns = {}
                plain = (x.detach(), w.detach(), dy)  # for the rows without autograd
                for name, fn in impls.items():
                    args = plain if name in EAGER_KERNELS.values() else (x, w, dy)
                    try:
                        fn(*args)
                        _sync(device)
                    except Exception as err:
                        skips.append(Skip(mode, name, m, n, dtype, _reason(err)))
                        continue

                    def batch(fn=fn, args=args) -> None:
                        for _ in range(calls):
                            fn(*args)
                        _sync(device)

                    fns[name] = batch
                seconds = time_interleaved(fns, rounds=rounds, warmup=2)
                base = seconds.get("F.rms_norm")
                for name, t in seconds.items():
                    per_call = t / calls
                    ratio = per_call / (base / calls) if base else None
                    rows.append({"mode": mode, "impl": name, "m": m, "n": n,
                                 "seconds": per_call, "vs_F.rms_norm": ratio})  # fmt: skip
    return {"dtype": dtype, "calls": calls, "rounds": rounds, "rows": rows,
            "skipped": [s.asdict() for s in skips]}  # fmt: skip


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# Settings outside opguide that change the CPU numbers: PyTorch's switch for
# transparent huge pages in its CPU allocator, the thread count, glibc's malloc.
CPU_ENV_VARS = ("THP_MEM_ALLOC_ENABLE", "OMP_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_", "LD_PRELOAD")


def _transparent_hugepages() -> str | None:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return None


def environment(device: torch.device) -> dict:
    """Device name, software versions and CPU settings, for the result file."""
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
        "cpu": _cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_env": {name: os.environ.get(name) for name in CPU_ENV_VARS},
        "transparent_hugepage": _transparent_hugepages(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def _row_dict(row: Row, bandwidth: float) -> dict:
    return dataclasses.asdict(row) | {
        "GBps": row.gbps,
        "of_copy": row.bytes / row.seconds / bandwidth,
    }


def measure(
    device: torch.device,
    *,
    passes: Sequence[str],
    shapes: Sequence[tuple[int, int]] = (),
    dtypes: Sequence[str] = (),
    only: Sequence[str] | None = None,
    copy_bytes: int = 2**30,
    tiny_shape: tuple[int, int] = (4, 64),
    cpu_shape: tuple[int, int] = (4096, 4096),
    cpu_rounds: int = 15,
    progress: Callable[[str], None] | None = None,
    clean_l2: bool = True,
) -> dict:
    """Runs the chosen passes and returns the result file's content.

    Args:
        device: where the ``forward``, ``backward`` and ``fused`` passes run.
        passes: any of ``"forward"``, ``"backward"``, ``"fused"``, ``"cpu"``.
        shapes: ``(M, N)`` shapes of the device passes.
        dtypes: dtype names (``"bf16"``, ``"fp16"``, ``"fp32"``) of the device passes.
        only: implementation names to run (``None``: all of them).
        copy_bytes: size of the copy that measures the device's bandwidth.
        tiny_shape: input of the operator-call overhead measurement (``cpu``).
        cpu_shape: input of the CPU kernel measurement (``cpu``).
        cpu_rounds: rounds of the interleaved CPU kernel measurement.
        progress: called with a line of text as each part starts.
        clean_l2: clean L2 before every timed GPU batch (:func:`_clean_l2`);
            recorded in the result as ``clean_l2``.

    Returns:
        A JSON-serialisable dict: the environment (device, versions, date),
        ``copy_bandwidth_GBps``, a list of rows for each pass (``forward``,
        ``backward``, ``fused``; each row with ``impl``, ``m``, ``n``,
        ``dtype``, ``seconds``, ``bytes``, ``GBps``, ``of_copy``),
        ``skipped`` (implementations that could not run, with the reason),
        and ``cpu_overhead`` and ``cpu_kernel`` when ``"cpu"`` was asked for.
    """
    say = progress or (lambda line: None)
    unknown = set(passes) - set(PASSES)
    if unknown:
        raise ValueError(f"passes must be among {PASSES}, got {sorted(unknown)}")
    result = {**environment(device), "format": FORMAT, "bytes_model": BYTES_MODEL}
    result.update({"shapes": [list(s) for s in shapes], "dtypes": list(dtypes)})
    result["clean_l2"] = clean_l2
    result.update({"forward": [], "backward": [], "fused": [], "skipped": []})
    device_passes = [p for p in GPU_PASSES if p in passes]
    if device_passes:
        say(f"copy bandwidth on {device}")
        bandwidth = copy_bandwidth(device, copy_bytes, clean_l2=clean_l2)
        result["copy_bandwidth_GBps"] = bandwidth / 1e9
        for pass_name in device_passes:
            say(f"{pass_name} pass")
            rows, skips = _run_pass(pass_name, shapes, dtypes, device, only, clean_l2)
            result[pass_name] = [_row_dict(r, bandwidth) for r in rows]
            result["skipped"] += [s.asdict() for s in skips]
    if "cpu" in passes:
        say("CPU: operator-call overhead")
        result["cpu_overhead"] = run_cpu_overhead(tiny_shape)
        say("CPU: kernel vs copy")
        result["cpu_kernel"] = run_cpu_kernel(cpu_shape, rounds=cpu_rounds)
        if not device_passes:
            # A CPU-only file still names a bandwidth: that of the CPU copy.
            result["copy_bandwidth_GBps"] = result["cpu_kernel"]["copy_bandwidth_GBps"]
    return result


def format_report(result: dict) -> str:
    """The result as text tables (what ``main`` prints)."""
    lines = [
        f"{result['device']}  torch {result['torch']}  CUDA {result['cuda']}  "
        f"Triton {result['triton']}  {result['date']}"
    ]
    if result.get("forward") or result.get("backward") or result.get("fused"):
        lines.append(f"copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s")
    for pass_name in GPU_PASSES:
        if not result.get(pass_name):
            continue
        lines.append(f"\n{pass_name}")
        lines.append(f"{'impl':28} {'shape':>12} {'dtype':>5} {'us':>9} {'GB/s':>7} {'% copy':>7}")
        for r in result[pass_name]:
            shape = f"{r['m']}x{r['n']}"
            lines.append(
                f"{r['impl']:28} {shape:>12} {r['dtype']:>5} "
                f"{r['seconds'] * 1e6:9.1f} {r['GBps']:7.0f} {100 * r['of_copy']:6.1f}%"
            )
    for s in result.get("skipped", []):
        where = "all shapes" if s["m"] is None else f"{s['m']}x{s['n']} {s['dtype']}"
        lines.append(f"skipped: {s['pass']}, {s['impl']}, {where}: {s['reason']}")
    if "cpu_overhead" in result:
        o = result["cpu_overhead"]
        lines.append(f"\nCPU operator-call overhead, float32 {o['shape'][0]}x{o['shape'][1]}")
        lines.append(f"{'impl':44} {'us/call':>9} {'vs torch.rms_norm':>18}")
        for r in o["rows"]:
            lines.append(
                f"{r['impl']:44} {r['seconds'] * 1e6:9.2f} {r['vs_torch_rms_norm']:17.2f}x"
            )
    if "cpu_kernel" in result:
        k = result["cpu_kernel"]
        lines.append(
            f"\nCPU kernel, float32 {k['shape'][0]}x{k['shape'][1]}, {k['threads']} threads"
        )
        lines.append(f"{'impl':28} {'ms':>9} {'GB/s':>7} {'vs copy_':>9}")
        for r in k["rows"]:
            lines.append(
                f"{r['impl']:28} {r['seconds'] * 1e3:9.2f} {r['GBps']:7.1f} {r['vs_copy']:8.2f}x"
            )
        if "target_vs_copy" in k:
            mine = next(r for r in k["rows"] if r["impl"] == "opguide (C++ kernel)")
            verdict = "met" if mine["vs_copy"] <= k["target_vs_copy"] else "not met"
            goal = k["target_vs_copy"]
            lines.append(f"target: opguide (C++ kernel) within {goal}x copy_: {verdict}")
    return "\n".join(lines)


def format_sweep_report(result: dict) -> str:
    """The sweep and eager results as text tables: one column per implementation."""
    lines = [f"{result['device']}  torch {result['torch']}  Triton {result['triton']}"]
    sweep = result.get("sweep")
    if sweep:
        for pass_name in SWEEP_PASSES:
            for dtype in sweep["dtypes"]:
                rows = [r for r in sweep["rows"] if r["pass"] == pass_name and r["dtype"] == dtype]
                if not rows:
                    continue
                impls = list(dict.fromkeys(r["impl"] for r in rows))
                lines.append(f"\n{pass_name} {dtype}: GPU time as a fraction of the copy's speed")
                lines.append(f"{'N':>7} " + " ".join(f"{i[:12]:>12}" for i in impls))
                for n in sweep["ns"]:
                    at = {r["impl"]: r for r in rows if r["n"] == n}
                    cells = [f"{at[i]['vs_copy']:12.2f}" if i in at and at[i]["vs_copy"] else
                             f"{'-':>12}" for i in impls]  # fmt: skip
                    lines.append(f"{n:>7} " + " ".join(cells))
        for s in sweep["skipped"]:
            lines.append(f"skipped: {s['pass']} {s['impl']} {s['m']}x{s['n']}: {s['reason']}")
        for name, why in sweep["peers_missing"].items():
            lines.append(f"not installed: {name}: {why}")
    eager = result.get("eager")
    if eager:
        for mode in ("forward", "training"):
            rows = [r for r in eager["rows"] if r["mode"] == mode]
            impls = list(dict.fromkeys(r["impl"] for r in rows))
            lines.append(f"\neager {mode} {eager['dtype']}: us per call (wall clock)")
            lines.append(f"{'shape':>10} " + " ".join(f"{i[:12]:>12}" for i in impls))
            for n in sorted({r["n"] for r in rows}):
                for m in sorted({r["m"] for r in rows}):
                    at = {r["impl"]: r for r in rows if r["m"] == m and r["n"] == n}
                    cells = [f"{at[i]['seconds'] * 1e6:12.1f}" if i in at else f"{'-':>12}"
                             for i in impls]  # fmt: skip
                    lines.append(f"{f'{m}x{n}':>10} " + " ".join(cells))
        for s in eager["skipped"]:
            lines.append(f"skipped: {s['pass']} {s['impl']} {s['m']}x{s['n']}: {s['reason']}")
    return "\n".join(lines)


def _shape(text: str) -> tuple[int, int]:
    m, n = (int(v) for v in text.split("x"))
    return m, n


def _save(result: dict, out: Path | None, argv: Sequence[str] | None) -> None:
    """Records the command line (so a result file says how it was made); writes ``out``.

    The output path is recorded as its file name: where the measuring machine
    kept its files is no part of the result.
    """
    cli = sys.argv[1:] if argv is None else list(argv)
    if out:
        cli = [Path(a).name if a == str(out) else a for a in cli]
    result["command"] = " ".join(["python -m guidekit.benchmark", *cli])
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="32768x4096,8192x4096,4096x8192,65536x1024")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument(
        "--passes",
        help=f"comma-separated, among {','.join(PASSES)}; default: all of them on a GPU, "
        "'cpu' on the CPU",
    )
    parser.add_argument(
        "--cpu-only", action="store_true", help="only the CPU measurements (same as --passes cpu)"
    )
    parser.add_argument(
        "--impls", help="comma-separated implementation names to run (default: all)"
    )
    parser.add_argument("--copy-mib", type=int, default=1024, help="size of the bandwidth copy")
    parser.add_argument("--tiny-shape", type=_shape, default=(4, 64), help="overhead input, MxN")
    parser.add_argument("--cpu-shape", type=_shape, default=(4096, 4096), help="CPU kernel input")
    parser.add_argument("--cpu-rounds", type=int, default=15)
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="time every row length N in --sweep-ns at M = 2**26 // N (GPU time) instead of "
        "--shapes; --passes among " + ",".join(SWEEP_PASSES),
    )
    parser.add_argument("--sweep-ns", default=",".join(str(n) for n in SWEEP_NS))
    parser.add_argument(
        "--sweep-elements", type=int, default=SWEEP_ELEMENTS, help="M * N of every sweep point"
    )
    parser.add_argument(
        "--min-sets", type=int, default=MIN_SETS,
        help="the fewest input sets each sweep batch rotates through (1: every call reads "
        "the previous call's input again)",
    )  # fmt: skip
    parser.add_argument(
        "--eager",
        action="store_true",
        help="also time calls as a user makes them (wall clock, no spin) at M in "
        f"{EAGER_MS} and N in {EAGER_NS}, first dtype of --dtypes",
    )
    parser.add_argument(
        "--keep-l2",
        action="store_true",
        help="do not clean L2 before each timed GPU batch: a batch then pays for the "
        "dirty cache lines of the batch before it (how results were taken before)",
    )
    args = parser.parse_args(argv)
    device = torch.device("cpu" if args.cpu_only else args.device)
    say = lambda line: print(f"-- {line}", file=sys.stderr, flush=True)  # noqa: E731
    if args.sweep or args.eager:
        result = {**environment(device), "format": FORMAT, "bytes_model": BYTES_MODEL}
        if args.sweep:
            say(f"copy bandwidth on {device}")
            result["copy_bandwidth_GBps"] = copy_bandwidth(device, args.copy_mib * 2**20) / 1e9
            result["sweep"] = run_sweep(
                device, dtypes=args.dtypes.split(","),
                ns=[int(v) for v in args.sweep_ns.split(",")], elements=args.sweep_elements,
                passes=args.passes.split(",") if args.passes else SWEEP_PASSES,
                only=args.impls.split(",") if args.impls else None, progress=say,
                min_sets=args.min_sets,
            )  # fmt: skip
        if args.eager:
            result["eager"] = run_eager(device, dtype=args.dtypes.split(",")[0], progress=say)
        _save(result, args.out, argv)
        print(format_sweep_report(result))
        return 0
    if args.cpu_only:
        passes = ["cpu"]
    elif args.passes:
        passes = args.passes.split(",")
    else:
        passes = list(PASSES) if device.type != "cpu" else ["cpu"]
    result = measure(
        device,
        passes=passes,
        shapes=[_shape(s) for s in args.shapes.split(",")],
        dtypes=args.dtypes.split(","),
        only=args.impls.split(",") if args.impls else None,
        copy_bytes=args.copy_mib * 2**20,
        tiny_shape=args.tiny_shape,
        cpu_shape=args.cpu_shape,
        cpu_rounds=args.cpu_rounds,
        clean_l2=not args.keep_l2,
        progress=lambda line: print(f"-- {line}", file=sys.stderr, flush=True),
    )
    _save(result, args.out, argv)
    print(format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
