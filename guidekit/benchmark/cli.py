"""The command line: ``python -m guidekit.benchmark``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from .eager import EAGER_MS, EAGER_NS, run_eager
from .fixed_shapes import measure
from .passes import BYTES_MODEL, FORMAT, PASSES, SWEEP_ELEMENTS, SWEEP_NS, SWEEP_PASSES
from .results import _save, environment, format_report, format_sweep_report
from .sweep import run_sweep
from .timing import MIN_SETS, copy_bandwidth

DESCRIPTION = "Benchmarks of the RMSNorm implementations against the memory floor."


def _shape(text: str) -> tuple[int, int]:
    """``"MxN"`` as ``(M, N)``."""
    m, n = (int(v) for v in text.split("x"))
    return m, n


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark as ``python -m guidekit.benchmark`` does.

    Args:
        argv: the command-line arguments (``None``: ``sys.argv[1:]``); see
            ``--help``.

    Returns:
        The exit status, 0. The result is printed as text tables and, with
        ``--out``, written as JSON.
    """
    parser = argparse.ArgumentParser(prog="python -m guidekit.benchmark", description=DESCRIPTION)
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
        "dirty cache lines of the batch before it (the result records clean_l2: false)",
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
    # --cpu-only has made the device the CPU, where the one pass is "cpu".
    passes = list(PASSES) if device.type != "cpu" else ["cpu"]
    result = measure(
        device,
        passes=args.passes.split(",") if args.passes and not args.cpu_only else passes,
        shapes=[_shape(s) for s in args.shapes.split(",")],
        dtypes=args.dtypes.split(","),
        only=args.impls.split(",") if args.impls else None,
        copy_bytes=args.copy_mib * 2**20,
        tiny_shape=args.tiny_shape,
        cpu_shape=args.cpu_shape,
        cpu_rounds=args.cpu_rounds,
        clean_l2=not args.keep_l2,
        progress=say,
    )
    _save(result, args.out, argv)
    print(format_report(result))
    return 0
