"""Eager time per call of each RMSNorm, forward and forward+backward, on one GPU.

Every implementation is timed in the same process with
:func:`triton.testing.do_bench` (median of its repetitions), in interleaved
rounds, at the shapes of the per-call targets::

    python tools/bench_per_call.py                      # the table, bf16
    python tools/bench_per_call.py --out per_call.json  # and a JSON record
    python tools/bench_per_call.py --profile            # where a 1x4096 call's time goes

Implementations: ``opguide cuda`` (``backend="cpp"``), ``opguide triton``
(``backend="triton"``), ``F.rms_norm``, ``torch.compile`` of
:func:`opguide.rms_norm_reference`, and two floors: ``x * w`` (one multiply,
the same broadcast weight), the least that a call through autograd costs,
and the same multiply inside a Python :class:`torch.autograd.Function`, the
least that a call whose backward is Python costs (the Triton route's is).
Forward+backward is ``y = f(x, w)`` then
``y.backward(grad_y)`` on leaves whose ``.grad`` is reset to None first, as an
optimiser's ``zero_grad`` does. ``--profile`` prints the
:mod:`torch.profiler` table of 200 such calls of each opguide route at
1x4096, CPU time first: the host's cost, layer by layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

SHAPES = ((1, 4096), (1024, 4096), (8192, 4096), (4096, 8192), (65536, 1024), (16384, 16384))
EPS = 1e-6


def implementations() -> dict:
    """The calls timed, by name; each takes ``(x, w)`` and returns y."""
    import opguide

    compiled = torch.compile(opguide.rms_norm_reference)
    return {
        "opguide cuda": lambda x, w: opguide.rms_norm(x, w, EPS, backend="cpp"),
        "opguide triton": lambda x, w: opguide.rms_norm(x, w, EPS, backend="triton"),
        "F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),
        "compile(reference)": lambda x, w: compiled(x, w, EPS),
        FLOOR: lambda x, w: x * w,
        PYTHON_FLOOR: _Multiply.apply,
    }


#: The multiply that measures autograd's floor.
FLOOR = "x * w (floor)"
#: The same multiply in a Python autograd Function: the floor of a Python backward.
PYTHON_FLOOR = "Function(x * w) (floor)"


class _Multiply(torch.autograd.Function):
    """``x * w`` with a backward written in Python, as a ``register_autograd`` one is."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad_y):
        x, w = ctx.saved_tensors
        return grad_y * w, (grad_y * x).sum(0)


def _forward(fn, x, w):
    def step():
        fn(x, w)

    return step


def _training(fn, x, w, grad_y):
    def step():
        x.grad = None
        w.grad = None
        fn(x, w).backward(grad_y)

    return step


def measure(rounds: int, dtype: torch.dtype) -> dict:
    """{shape: {name: {"forward": [us...], "training": [us...]}}}, one value per round."""
    from triton.testing import do_bench

    impls = implementations()
    out: dict = {}
    for m, n in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
        w = torch.rand(n, device="cuda", dtype=dtype, generator=gen) + 0.5
        grad_y = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        row = out.setdefault(f"{m}x{n}", {})
        calls = {}
        for name, fn in impls.items():
            calls[name] = {"forward": _forward(fn, x, w), "training": _training(fn, xg, wg, grad_y)}
            for call in calls[name].values():  # compile, autotune and warm up
                for _ in range(3):
                    call()
        torch.cuda.synchronize()
        for _ in range(rounds):  # interleaved: every implementation once per round
            for name, kinds in calls.items():
                for kind, call in kinds.items():
                    us = do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
                    row.setdefault(name, {}).setdefault(kind, []).append(us)
        calls.clear()
        torch.cuda.empty_cache()
    return out


def print_table(results: dict) -> None:
    names = list(next(iter(results.values())))
    print("microseconds per call, median over rounds [quartiles]; forward / forward+backward")
    print(f"{'shape':>12} " + " ".join(f"{n:>34}" for n in names))
    for shape, row in results.items():
        cells = []
        for name in names:
            parts = []
            for kind in ("forward", "training"):
                q = statistics.quantiles(row[name][kind], n=4) if len(row[name][kind]) > 1 else None
                med = statistics.median(row[name][kind])
                parts.append(f"{med:.1f}" + (f"[{q[0]:.0f}-{q[2]:.0f}]" if q else ""))
            cells.append(" / ".join(parts))
        print(f"{shape:>12} " + " ".join(f"{c:>34}" for c in cells))
    one = results["1x4096"]
    med = {k: {d: statistics.median(v) for d, v in kinds.items()} for k, kinds in one.items()}
    print()
    print("targets at 1x4096:")
    # (label, measured, bound, the floor under a training call of that route)
    targets = (
        ("Triton forward <= 20 us", med["opguide triton"]["forward"], 20, None),
        ("Triton forward+backward <= 100 us", med["opguide triton"]["training"], 100, PYTHON_FLOOR),
        ("CUDA forward+backward <= 60 us", med["opguide cuda"]["training"], 60, FLOOR),
    )
    for label, value, bound, _ in targets:
        print(f"  {label}: {value:.1f} us -> {'met' if value <= bound else 'NOT met'}")
    floors = {name: med[name]["training"] for name in (FLOOR, PYTHON_FLOOR)}
    print(f"  floor, one multiply's forward+backward through autograd: {floors[FLOOR]:.1f} us")
    print(f"  floor, the same in a Python autograd.Function: {floors[PYTHON_FLOOR]:.1f} us")
    for label, _, bound, floor in targets:
        if floor is not None and bound < floors[floor]:
            print(f"  {label}: below its route's floor ({floors[floor]:.1f} us), out of reach here")


def profile(dtype: torch.dtype) -> None:
    """torch.profiler tables of 200 eager calls of each opguide route at 1x4096."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    impls = implementations()
    x = torch.randn(1, 4096, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.rand(4096, device="cuda", dtype=dtype, requires_grad=True)
    grad_y = torch.randn(1, 4096, device="cuda", dtype=dtype)
    for name in ("opguide triton", "opguide cuda"):
        step = _training(impls[name], x, w, grad_y)
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with torch_profile(activities=activities, with_stack=False) as prof:
            for _ in range(200):
                step()
            torch.cuda.synchronize()
        print(f"== {name}: 200 forward+backward calls at 1x4096 ==")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (15)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--out", help="also write the results to this JSON file")
    parser.add_argument("--profile", action="store_true", help="profile 1x4096 calls instead")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_per_call: needs a GPU", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    if args.profile:
        profile(dtype)
        return 0
    results = measure(args.rounds, dtype)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}")
    print_table(results)
    if args.out:
        record = {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "dtype": args.dtype,
            "rounds": args.rounds,
            "us_per_call": results,
        }
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
