"""The fixed-shape run: each GPU pass at the given shapes, and the CPU part.

:func:`measure` writes what ``python -m guidekit.benchmark`` (without
``--sweep`` or ``--eager``) saves: every implementation of the ``forward``,
``backward`` and ``fused`` passes at each shape and dtype, in % of a 1 GiB
copy, and on any machine the CPU measurements of :mod:`.cpu`.
:func:`_time_impls` is the round robin of one shape, which the sweep shares.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import torch

from .cpu import run_cpu_kernel, run_cpu_overhead
from .implementations import (
    _select,
    _triton_available,
    backward_implementations,
    forward_implementations,
    fused_implementations,
    peer_implementations,
)
from .passes import (
    BYTES_MODEL,
    DTYPES,
    FORMAT,
    GPU_PASSES,
    PASSES,
    SAME_SIZE_COPY,
    Row,
    Skip,
    _element_size,
    _reason,
    bytes_moved,
)
from .results import environment
from .timing import _rotation, copy_bandwidth, time_round_robin


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


def _input_sets(
    pass_name: str, m: int, n: int, dtype: torch.dtype, device: torch.device, count: int
) -> list[tuple]:
    """``count`` random input sets: (x, w), (x, w, grad_y) or (x, residual, w)."""

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
        peers, missing = peer_implementations("fused")
        impls.update(peers)
        skips += [Skip(pass_name, name, None, None, None, why) for name, why in missing.items()
                  if only is None or name in only]  # fmt: skip
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
