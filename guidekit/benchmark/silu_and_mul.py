"""silu_and_mul's time against a copy of the same bytes.

``python -m guidekit.benchmark.silu_and_mul [--out FILE.json] [--rounds N] [--smoke]``

For each shape (rows, d) and dtype, the forward (it reads 2d elements a row
and writes d) and the forward with its backward (which reads grad_y and x,
3d, and writes grad_x, 2d) of: opguide's CUDA kernels, opguide's Triton
kernels, ``torch.compile`` of :func:`opguide.silu_and_mul_reference`, and
Liger-Kernel's ``LigerSiLUMulFunction`` (given the two halves as contiguous
tensors, as a model that uses it holds them; named as missing when it does
not import). Each is shown as a percentage of the bandwidth of a copy that
reads and writes as many bytes: 1.5d elements a row each way for the
forward, 4d with the backward. The backward runs through autograd for
every implementation.

Timed with :mod:`guidekit.benchmark.timing`: CUDA events around batches
queued behind a spin, the implementations round robin, L2 cleaned before
each batch, inputs rotated through enough sets to exceed L2, the median
over ``--rounds`` rounds. ``--smoke`` runs tiny shapes on the CPU (the C++
kernels, Triton's interpreter) to show that the script works; its numbers
mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

import opguide

from .results import environment
from .timing import _rotation, time_round_robin

SHAPES = [(8192, 4096), (16384, 8192), (65536, 1024)]  # (rows, d)
DTYPES = [torch.bfloat16, torch.float16]
SMOKE_SHAPES = [(8, 256)]


def _forward_backward(f):
    """Forward then backward through autograd, for inputs that require grad."""

    def run(*args):
        *inputs, grad_y = args
        return torch.autograd.grad(f(*inputs), inputs, grad_y)

    return run


def _implementations(device: torch.device) -> tuple[dict, dict[str, str]]:
    """name -> (forward on x or on its halves, takes halves); and the missing ones, with why."""
    impls, missing = {}, {}
    # The compiled library's kernels: CUDA on a GPU, C++ on the CPU (--smoke).
    impls[f"opguide {device.type}"] = (lambda x: opguide.silu_and_mul(x, backend="cpp"), False)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if opguide.backends.triton_ready() and (device.type == "cuda" or interpret):
        impls["opguide triton"] = (lambda x: opguide.silu_and_mul(x, backend="triton"), False)
    elif opguide.backends.triton_ready():
        missing["opguide triton"] = "CPU tensors run in Triton's interpreter: TRITON_INTERPRET=1"
    else:
        missing["opguide triton"] = "Triton is not usable in this process"
    # dynamic=False: a kernel specialised to each shape, as a model of fixed
    # shapes gets (by default a second shape compiles one kernel for any shape).
    impls["torch.compile"] = (
        torch.compile(opguide.silu_and_mul_reference, dynamic=False),
        False,
    )
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError as error:
        missing["liger"] = f"liger_kernel.ops.swiglu does not import: {error}"
    else:
        if device.type == "cuda":
            impls["liger"] = (LigerSiLUMulFunction.apply, True)
        else:
            # Liger's kernels are Triton kernels: CPU tensors need them
            # interpreted, which is decided when liger_kernel is first imported
            # (TRITON_INTERPRET=1 then), so one small call says.
            try:
                LigerSiLUMulFunction.apply(*torch.randn(2, 32, device=device).chunk(2, dim=-1))
            except Exception as error:  # noqa: BLE001 (any failure: leave it out, say why)
                missing["liger"] = f"Liger's Triton kernels do not take CPU tensors here: {error}"
            else:
                impls["liger"] = (LigerSiLUMulFunction.apply, True)
    return impls, missing


def _inputs(rows: int, d: int, dtype, device, backward: bool) -> list[tuple]:
    """Enough sets of (x, grad_y or None) to exceed L2, drawn on the device."""
    sets = _rotation(rows * d * dtype.itemsize * (5 if backward else 3), device)
    out = []
    for s in range(sets):
        gen = torch.Generator(device=device).manual_seed(s)
        x = torch.randn(rows, 2 * d, generator=gen, device=device, dtype=dtype)
        grad_y = torch.randn(rows, d, generator=gen, device=device, dtype=dtype)
        out.append((x, grad_y if backward else None))
    return out


def _arg_sets(inputs: list[tuple], backward: bool, halves: bool) -> list[tuple]:
    """Each set as the implementation takes it: x, or its two halves (contiguous)."""
    out = []
    for x, grad_y in inputs:
        args = [h.contiguous() for h in x.chunk(2, dim=-1)] if halves else [x]
        if backward:
            args = [a.detach().clone().requires_grad_() for a in args] + [grad_y]
        out.append(tuple(args))
    return out


def _copy_sets(rows: int, cols: int, dtype, device) -> list[tuple]:
    sets = _rotation(2 * rows * cols * dtype.itemsize, device)
    src = [torch.randn(rows, cols, device=device, dtype=dtype) for _ in range(sets)]
    return [(s, torch.empty_like(s)) for s in src]


def measure(shapes, dtypes, device, rounds: int, calls: int) -> dict:
    """Seconds per call and % of the copy's bandwidth, by shape, dtype, pass and implementation."""
    impls, missing = _implementations(device)
    rows_out = []
    for rows, d in shapes:
        for dtype in dtypes:
            for backward in (False, True):
                print(f"silu_and_mul: {rows}x{d} {dtype} backward={backward}", file=sys.stderr)
                # A fresh start for torch.compile at each case, so that no case
                # hits the recompilation limit and falls back to eager.
                torch.compiler.reset()
                inputs = _inputs(rows, d, dtype, device, backward)
                fns = {}
                for name, (f, halves) in impls.items():
                    fn = _forward_backward(f) if backward else f
                    fns[name] = (fn, _arg_sets(inputs, backward, halves))
                # Forward: 3d elements a row moved; with the backward 8d.
                copy_cols = 4 * d if backward else 3 * d // 2
                copies = _copy_sets(rows, copy_cols, dtype, device)
                fns["copy"] = (lambda src, dst: dst.copy_(src), copies)
                seconds = time_round_robin(
                    fns, device=device, batches=rounds, calls_per_batch=calls, warmup=2
                )
                for name, t in seconds.items():
                    rows_out.append({
                        "rows": rows, "d": d, "dtype": str(dtype).removeprefix("torch."),
                        "pass": "forward+backward" if backward else "forward", "impl": name,
                        "seconds": t, "pct_of_copy": 100 * seconds["copy"] / t,
                    })  # fmt: skip
                del fns, inputs
    return {"results": rows_out, "missing": missing}


def format_table(result: dict) -> str:
    """One line per shape, dtype and pass: each implementation as % of the copy's bandwidth."""
    names = list(dict.fromkeys(r["impl"] for r in result["results"] if r["impl"] != "copy"))
    lines = [f"{'rows x d':>14} {'dtype':>8} {'pass':>16} " + " ".join(f"{n:>15}" for n in names)]
    cells: dict[tuple, dict[str, float]] = {}
    for r in result["results"]:
        cells.setdefault((r["rows"], r["d"], r["dtype"], r["pass"]), {})[r["impl"]] = r
    for (rows, d, dtype, name), by_impl in cells.items():
        row = " ".join(f"{by_impl[n]['pct_of_copy']:>14.1f}%" for n in names)
        copy_us = by_impl["copy"]["seconds"] * 1e6
        lines.append(f"{f'{rows}x{d}':>14} {dtype:>8} {name:>16} {row}   (copy {copy_us:.1f} us)")
    lines += [f"missing: {n}: {why}" for n, why in result["missing"].items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; prints the table and, with ``--out``, writes the JSON result.

    Returns:
        The exit status: 0, or 2 without a GPU and without ``--smoke``.
    """
    parser = argparse.ArgumentParser(prog="python -m guidekit.benchmark.silu_and_mul")
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (median)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    args = parser.parse_args(argv)
    if args.smoke:
        device, shapes, dtypes, calls = torch.device("cpu"), SMOKE_SHAPES, [torch.bfloat16], 1
    elif torch.cuda.is_available():
        device, shapes, dtypes, calls = torch.device("cuda"), SHAPES, DTYPES, 10
    else:
        print("silu_and_mul benchmark: no GPU visible; --smoke runs it on the CPU")
        return 2
    result = measure(shapes, dtypes, device, args.rounds, calls)
    cli = sys.argv[1:] if argv is None else list(argv)
    cli = [Path(a).name if args.out and a == str(args.out) else a for a in cli]
    result = {
        **environment(device), "smoke": args.smoke,
        "command": " ".join(["python -m guidekit.benchmark.silu_and_mul", *cli]), **result,
    }  # fmt: skip
    print(format_table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
