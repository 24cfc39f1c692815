"""Threads, streams and CUDA graphs: opguide's operators in a shared process.

A serving process calls the same operators from several threads at once, each
thread on its own CUDA stream, and replays them from CUDA graphs while other
work runs beside them. These tests call every operator of
:data:`opguide.registry.OPERATORS`, forward and backward, from 8 threads at
once for ``OPGUIDE_CONCURRENCY_SECONDS`` seconds (default 2 on CPU, 60 on a
GPU), and replay them from CUDA graphs next to a stream busy with matmuls.
Every result must equal, bit for bit (``torch.equal``), what one thread
computes from the same inputs: the kernels sum in a fixed order, so any other
answer is one call seeing another call's state (a shared buffer, a cache
filled by two threads at once, a kernel launched on another stream).

A thread makes its first calls while the other seven make theirs, so in a
fresh process Triton's compiles and the launchers' caches fill under
contention. Its later calls must equal its first ones, and after the threads
end one thread recomputes the first ones alone; both comparisons together say
that every call equals the one-thread run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import torch
from op_calls import Calls, Tensors, calls_for, modules

from opguide import backends
from opguide.registry import OPERATORS

SECONDS = "OPGUIDE_CONCURRENCY_SECONDS"


@dataclass(frozen=True)
class Job:
    """One operator called one way: how it is called and its keyword arguments."""

    label: str
    calls: Calls
    kwargs: dict[str, str]

    def run(self, inputs: Tensors) -> Tensors:
        """Every result of one call on ``inputs``."""
        return self.calls.call(inputs, self.kwargs, self.calls.backward)


def _cpu_jobs() -> list[Job]:
    # On CPU, backend="cpp" and the default (which picks the C++ kernels
    # there). The Triton kernels run on CPU only in Triton's interpreter,
    # which patches triton.language's module state while a kernel runs, so
    # two threads in it at once break each other: the interpreter is not
    # tested from threads; the GPU tests run the Triton backend from threads.
    return [
        Job(f"{op.name} {how}", calls_for(op.name), kwargs)
        for op in OPERATORS
        for how, kwargs in (("backend='cpp'", {"backend": "cpp"}), ("default backend", {}))
    ]


def _cuda_jobs() -> list[Job]:
    return [
        Job(f"{op.name} backend={route!r}", calls_for(op.name), {"backend": route})
        for op in OPERATORS
        for route in op.routes
        if route in backends.BACKENDS
    ]


def test_every_operator_has_calls():
    registry = {op.name for op in OPERATORS}
    missing = sorted(registry - set(modules()))
    assert not missing, f"operators of the registry without tests/calls_<name>.py: {missing}"
    unknown = sorted(set(modules()) - registry)
    assert not unknown, f"tests/calls_<name>.py for operators the registry lacks: {unknown}"
    for name in registry:
        assert isinstance(calls_for(name), Calls)


# -- Comparing results ------------------------------------------------------------


def assert_same_bits(got: Tensors, want: Tensors, where: str, want_is: str) -> None:
    """Asserts that ``got`` holds the tensors of ``want``, equal with ``torch.equal``.

    ``want_is`` says what ``want`` is, for the message.

    Raises:
        AssertionError: a name, dtype, shape or value differs; the message
            says where, which result, and how many elements differ.
    """
    assert got.keys() == want.keys(), f"{where}: results {sorted(got)} != {sorted(want)}"
    for name, w in want.items():
        g = got[name]
        assert g is not None and w is not None, f"{where}: {name} is None"
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{where}: {name} is {g.dtype} {tuple(g.shape)}, expected {w.dtype} {tuple(w.shape)}"
        )
        if not torch.equal(g, w):
            differ = int((g != w).sum())
            raise AssertionError(
                f"{where}: {name} differs from {want_is} in {differ} of {w.numel()} elements"
            )


def _to(tensors: Tensors, device: str) -> Tensors:
    return {name: t.to(device) for name, t in tensors.items()}


# -- Threads ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One thread's inputs: the shape of ``x``, its dtype and the generator's seed."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    seed: int

    def inputs(self, calls: Calls, device: str) -> Tensors:
        """The inputs of ``calls`` for this case, on ``device``."""
        gen = torch.Generator().manual_seed(self.seed)
        return _to(calls.inputs(self.shape, self.dtype, gen), device)

    def __str__(self) -> str:
        return f"x {tuple(self.shape)} {str(self.dtype).removeprefix('torch.')}"


# One thread per case, 8 of each.
#
# The C++ CPU kernels spread rows over ATen's thread pool with tasks of at
# least GRAIN_SIZE (32768) elements, and rms_norm's backward also spreads the
# columns of grad_weight: rows of 65536 and more elements take several tasks
# each, and so do many short rows. Every last dimension is even (one operator
# halves it).
CPU_CASES = (
    Case((4, 65536), torch.float32, 0),
    Case((1, 131072), torch.float32, 1),
    Case((256, 1024), torch.float32, 2),
    Case((300, 128), torch.float16, 3),
    Case((17, 1000), torch.bfloat16, 4),
    Case((3, 4096), torch.float16, 5),
    Case((2, 3, 640), torch.float64, 6),
    Case((1, 8), torch.float32, 7),
)

# Rows of 32768 and 262144 bfloat16 take the long-row kernels: thread-block
# clusters (CUDA, from 16384 bfloat16 elements on compute capability 9.0 and
# later: csrc/rms_norm/rms_norm_config.h) and rows split over several programs
# or chunked (Triton: opguide/triton/launch.py). Short rows
# take the one-block and one-program kernels. float16, bfloat16 and float32
# only: the Triton kernels take no float64.
CUDA_CASES = (
    Case((4, 262144), torch.bfloat16, 10),
    Case((1, 262144), torch.float16, 11),
    Case((2, 32768), torch.bfloat16, 12),
    Case((3, 32768), torch.float32, 13),
    Case((256, 4096), torch.bfloat16, 14),
    Case((1024, 1024), torch.float16, 15),
    Case((7, 5120), torch.float32, 16),
    Case((5, 770), torch.bfloat16, 17),
)


def concurrency_seconds(default: float) -> float:
    """How long each thread keeps calling: ``OPGUIDE_CONCURRENCY_SECONDS``, or ``default``.

    Raises:
        ValueError: the variable is not a non-negative number.
    """
    text = os.environ.get(SECONDS)
    if text is None:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        raise ValueError(f"{SECONDS} must be a non-negative number of seconds, got {text!r}")
    return seconds


def _one_thread(
    case: Case, jobs: list[Job], device: str, seconds: float, start: threading.Barrier
) -> tuple[dict[str, Tensors], int]:
    """One thread's calls: every job on ``case``'s inputs, again and again for ``seconds``.

    On CUDA the thread runs on a stream of its own. Every call's results must
    equal the thread's first call of the same job.

    Returns:
        The first call's results of each job, on CPU, and the number of calls made.
    """
    stream = torch.cuda.Stream() if device == "cuda" else None
    on_stream = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def synchronize() -> None:
        # Results are compared only once the stream has finished them.
        if stream is not None:
            stream.synchronize()

    with on_stream:
        inputs = {job.label: case.inputs(job.calls, device) for job in jobs}
        start.wait()
        deadline = time.monotonic() + seconds
        first = {job.label: job.run(inputs[job.label]) for job in jobs}
        synchronize()
        calls = len(jobs)
        while True:  # at least one more call of each job, whatever the duration
            for job in jobs:
                got = job.run(inputs[job.label])
                synchronize()
                where = f"{case}, {job.label}, call {calls}"
                assert_same_bits(got, first[job.label], where, "the thread's first call")
                calls += 1
            if time.monotonic() >= deadline:
                break
        first = {label: _to(results, "cpu") for label, results in first.items()}
    return first, calls


def _thread(case, jobs, device, seconds, start):
    try:
        return _one_thread(case, jobs, device, seconds, start)
    except BaseException:
        start.abort()  # the others stop waiting for this one
        raise


def run_threads(cases: tuple[Case, ...], jobs: list[Job], device: str, seconds: float) -> None:
    """Runs :func:`_one_thread` on one thread per case, all at once, then checks them.

    After the threads end, this thread computes each case's results alone,
    and each thread's first results must equal them.

    Raises:
        AssertionError: a result differs (the first thread's failure is raised).
    """
    start = threading.Barrier(len(cases))
    with ThreadPoolExecutor(len(cases), thread_name_prefix="opguide-concurrency") as pool:
        futures = [pool.submit(_thread, case, jobs, device, seconds, start) for case in cases]
    errors = [f.exception() for f in futures]
    causes = [
        e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)
    ]
    if causes:
        raise causes[0]
    for index, (case, future) in enumerate(zip(cases, futures, strict=True)):
        first, calls = future.result()
        # How much each thread did, for the log of a run that passes (pytest -s or -rP).
        print(f"thread {index} ({case}, {device}): {calls} calls in {seconds:g} s")
        for job in jobs:
            alone = _to(job.run(case.inputs(job.calls, device)), "cpu")
            where = f"{case}, {job.label}, first call"
            assert_same_bits(first[job.label], alone, where, "the one-thread run")


@pytest.mark.parametrize("text", ["two", "-1", "nan"])
def test_seconds_setting_refuses_what_is_not_a_duration(monkeypatch, text):
    monkeypatch.setenv(SECONDS, text)
    with pytest.raises(ValueError, match=f"{SECONDS} must be a non-negative number"):
        concurrency_seconds(2.0)


@pytest.mark.cpu
def test_threads_cpu():
    run_threads(CPU_CASES, _cpu_jobs(), "cpu", concurrency_seconds(2.0))


def _skip_in_triton_interpreter() -> None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip(
            "TRITON_INTERPRET=1: the Triton kernels run in Triton's interpreter, which "
            "patches triton.language's module state while a kernel runs (unset it on a GPU)"
        )


@pytest.mark.cuda
def test_threads_on_streams_cuda():
    _skip_in_triton_interpreter()
    run_threads(CUDA_CASES, _cuda_jobs(), "cuda", concurrency_seconds(60.0))


# -- CUDA graphs --------------------------------------------------------------------

GRAPH_JOBS = [
    pytest.param(op.name, route, id=f"{op.name}-{route}")
    for op in OPERATORS
    for route in op.routes
    if route in backends.BACKENDS
]
# A short row, a row of clusters (CUDA) or split programs (Triton), and the
# longest rows of the thread test.
GRAPH_CASES = [
    pytest.param(Case((64, 4096), torch.bfloat16, 30), id="64x4096"),
    pytest.param(Case((4, 32768), torch.bfloat16, 31), id="4x32768"),
    pytest.param(Case((2, 262144), torch.bfloat16, 32), id="2x262144"),
]
REPLAYS = 4
# Matmuls queued on another stream before each replay, 1.4 TFLOP of float32
# work in all, so that they are still running when the replay and the eager
# call start on the current stream.
BUSY_SIZE, BUSY_MATMULS = 4096, 10


@pytest.mark.cuda
@pytest.mark.parametrize("case", GRAPH_CASES)
@pytest.mark.parametrize(("name", "route"), GRAPH_JOBS)
def test_cuda_graph_replays_beside_other_work(name, route, case):
    """Forward and backward captured in one CUDA graph, replayed on fresh inputs.

    The capture follows PyTorch's whole-network pattern: static inputs,
    warm-up calls on a side stream (which also compile the Triton kernels
    before the capture), then one forward and ``.backward()`` under
    ``torch.cuda.graph``, whose gradients are allocated inside the capture.
    Before each replay fresh values are copied into the static inputs, and
    the replayed results must equal an eager call on those values.
    fused_add_rms_norm_ has no backward: its graph holds the forward, which
    writes the copy of residual that the call makes.
    """
    if route == "triton":
        _skip_in_triton_interpreter()
    job = Job(f"{name} backend={route!r}", calls_for(name), {"backend": route})
    static = case.inputs(job.calls, "cuda")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            job.run(static)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = job.run(static)

    busy = torch.cuda.Stream()
    a = torch.randn(BUSY_SIZE, BUSY_SIZE, device="cuda")
    product = torch.empty_like(a)
    busy.wait_stream(torch.cuda.current_stream())
    previous = None
    for replay in range(REPLAYS):
        with torch.cuda.stream(busy):
            for _ in range(BUSY_MATMULS):
                torch.mm(a, a, out=product)
        fresh = Case(case.shape, case.dtype, case.seed + 1 + replay).inputs(job.calls, "cuda")
        for key, tensor in static.items():
            tensor.copy_(fresh[key])
        graph.replay()
        eager = job.run(fresh)
        torch.cuda.current_stream().synchronize()
        where = f"{case}, {job.label}, replay {replay}"
        assert_same_bits(replayed, eager, where, "an eager call on the same inputs")
        first_output = next(iter(replayed.values()))
        # The replay reads the values copied in: its output changes with them.
        assert previous is None or not torch.equal(first_output, previous), (
            f"{case}, {job.label}: replay {replay} gave the output of the replay before it"
        )
        previous = first_output.clone()
    busy.synchronize()
