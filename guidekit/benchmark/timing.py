"""How the benchmark times: GPU batches behind a spin, round robin, clean L2.

CUDA events around a batch of calls queued behind a GPU spin (so the host's
launch latency is not counted), the implementations' batches taken in turn
(so a drifting clock slows all of them alike), L2 cleaned before each batch
(so no batch pays for the dirty lines of the one before), inputs rotated
through enough buffers to exceed the L2 cache (so no call reads the previous
call's data from L2), warm-up first, the median of several batches reported.
On the CPU the same loop uses ``time.perf_counter``, and
:func:`time_interleaved` times functions without arguments in turn.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence

import torch


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
#: gained 3-4 points of the copy from it at 2**26 elements
#: (``docs/recorded/sweep_one_input_set_<gpu>.json`` against ``sweep_<gpu>.json``).
#: With three, the set a call reads was last read two calls before.
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
