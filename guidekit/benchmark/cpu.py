"""The CPU measurements: the cost of a call, and the C++ kernel against a copy.

Both run interleaved (round robin over the implementations, repeated;
medians, :func:`time_interleaved`), so that a machine that is busy with
something else slows every implementation alike.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils import cpp_extension

# Loads the compiled library: the torch.ops.opguide operators timed here.
import opguide

from .passes import EPS
from .timing import time_interleaved


@functools.cache
def python_custom_op() -> Callable:
    """``opguide_bench::rms_norm``: a Python ``custom_op`` around the same C++ kernel.

    Its body calls ``torch.ops.opguide.rms_norm``, so the difference to calling
    that operator directly is the cost of the Python operator layer alone.
    Defined on first use (an operator name can be defined once per process).
    """

    @torch.library.custom_op("opguide_bench::rms_norm", mutates_args=())
    def rms_norm_custom(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return torch.ops.opguide.rms_norm.default(x, weight, eps)

    @rms_norm_custom.register_fake
    def _(x, weight, eps):
        return x.new_empty(x.shape)

    return rms_norm_custom


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


_INTO: Callable | None = None


def _into_existing_y(x: torch.Tensor, w: torch.Tensor) -> Callable[[], object] | None:
    """The row ``opguide into existing y``: the kernel's loop alone, without allocating.

    Builds ``rms_norm_into.cpp`` beside this file on first use (the library's
    CPU row loop from ``csrc/rms_norm/rms_norm_cpu.h``, run into a tensor
    made once here), so that the row times the loop and not fresh memory.
    Returns None, after saying why, where it cannot be built (no C++ compiler,
    or no source tree).
    """
    global _INTO
    if _INTO is None:
        here = Path(__file__).resolve().parent
        header_dir = here.parents[1] / "csrc" / "rms_norm"
        try:
            cpp_extension.load(
                name="opguide_benchmark_into",
                sources=[str(here / "rms_norm_into.cpp")],
                extra_include_paths=[str(header_dir)],
                extra_cflags=["-O3", "-fopenmp"],
                extra_ldflags=["-fopenmp"],
                is_python_module=False,
            )
        except Exception as err:  # a missing row must not stop the others
            print(f"-- no 'opguide into existing y' row: {type(err).__name__}: {err}")
            return None
        _INTO = torch.ops.opguide_benchmark.rms_norm_into.default
    into, fn = torch.empty_like(x), _INTO
    return lambda: fn(x, w, EPS, into)


def run_cpu_kernel(shape: tuple[int, int] = (4096, 4096), *, rounds: int = 15) -> dict:
    """The C++ CPU kernel on a large float32 input next to copies of the same size.

    ``copy_`` (into a tensor that exists) is the memory floor: one read and
    one write of every element. The operator must also allocate its output;
    ``clone`` is a copy that does too, so the cost of fresh memory (page
    faults on first touch) shows separately. ``opguide into existing y``
    runs the same kernel into a tensor that exists (:func:`_into_existing_y`),
    which times the loop alone.

    Returns:
        ``{"shape", "dtype", "threads", "rounds", "copy_bandwidth_GBps",
        "target_vs_copy", "rows"}``; each row has ``impl``, ``seconds``,
        ``bytes``, ``GBps`` and ``vs_copy`` (the ratio of its time to the time
        of ``copy_``). ``target_vs_copy`` is the goal for the allocating
        operator: at most that many times the copy.
    """
    m, n = shape
    x, w = torch.randn(m, n), torch.randn(n)
    dst = torch.empty_like(x)
    fns = {
        "copy_ (memory floor)": lambda: dst.copy_(x),
        "clone (copy + new memory)": lambda: x.clone(),
        "opguide (C++ kernel)": lambda: torch.ops.opguide.rms_norm.default(x, w, EPS),
        "F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (n,), w, EPS),
    }
    into = _into_existing_y(x, w)
    if into is not None:
        fns["opguide into existing y"] = into
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
