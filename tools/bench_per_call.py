"""Eager time per call of each RMSNorm, forward and forward+backward, on one GPU.

The eager mode of ``python -m guidekit.benchmark`` (:func:`guidekit.benchmark.run_eager`)
at one row and at 1024 rows of 4096 and 8192 (or the ``--shapes`` given), with
its rows of the autograd floor (``empty Python Function``: autograd around a
Python Function that launches nothing), and ``opguide triton aot`` where the
build holds the ahead-of-time Triton operator (``torch.ops.opguide.rms_norm_triton_aot``,
step 9.3); or, with ``--profile``, where the time of a call goes::

    python tools/bench_per_call.py --rounds 15   # the table, bf16
    python tools/bench_per_call.py --shapes 1x4096,8192x4096,4096x8192,65536x1024
    python tools/bench_per_call.py --profile     # torch.profiler, 200 calls of each route

``--out FILE`` also times the GPU (:func:`guidekit.benchmark.timing.time_round_robin`)
of the ahead-of-time, JIT and CUDA routes' kernels at the shapes of 2**25 elements and more,
forward and forward+backward (the operators without autograd), beside a copy
of the same bytes, and writes both tables and the build's artifact manifest as
JSON (``docs/recorded/triton_aot_<gpu>.json``, which step 9.3 reads).

``--profile`` prints the :mod:`torch.profiler` table of 200 forward+backward calls of
each opguide route at 1x4096, CPU time first: the host's cost, layer by layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from guidekit.benchmark import DTYPES, environment, format_sweep_report, run_eager
from guidekit.benchmark import eager as eager_module
from guidekit.benchmark.passes import EPS

AOT = "opguide triton aot"


def with_aot(implementations):
    """``implementations`` (:func:`guidekit.benchmark.eager.eager_implementations`) and
    the ahead-of-time Triton operator's row, where this build defines it."""

    def both(mode, device=None):
        impls = implementations(mode, device)
        if hasattr(torch.ops.opguide, "rms_norm_triton_aot"):
            op = torch.ops.opguide.rms_norm_triton_aot.default
            if mode == "forward":
                impls[AOT] = lambda x, w, grad_y: op(x, w, EPS)
            else:

                def step(x, w, grad_y):
                    x.grad = w.grad = None
                    op(x, w, EPS).backward(grad_y)

                impls[AOT] = step
        return impls

    return both


def shapes(text: str) -> list[tuple[int, int]]:
    """``"1x4096,8192x4096"`` -> ``[(1, 4096), (8192, 4096)]``."""
    try:
        return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"shapes are MxN, comma-separated; got {text!r}") from None


#: The operators of each route, without autograd: (inference forward, training forward, backward).
ROUTES = {
    "opguide triton aot": ("rms_norm_triton_aot", "rms_norm_forward_triton_aot",
                           "rms_norm_backward_triton_aot"),
    "opguide triton": ("rms_norm_triton", "rms_norm_forward_triton", "rms_norm_backward_triton"),
    "opguide": ("rms_norm", "rms_norm_forward", "rms_norm_backward"),
}  # fmt: skip


def gpu_times(shape_list, dtype: torch.dtype, device: torch.device, batches: int) -> list[dict]:
    """GPU seconds per call of each route's kernels and of a copy of the same bytes.

    The forward reads x and writes y (a copy of x moves those bytes); forward
    and backward read x twice and grad_y once and write y and grad_x (a copy of
    2.5 times x). The per-row and per-column vectors are left out of both.
    """
    from guidekit.benchmark.timing import time_round_robin

    rows = []
    for m, n in shape_list:
        sets = [
            tuple(
                torch.randn(*shape, device=device, dtype=dtype) for shape in ((m, n), (n,), (m, n))
            )
            for _ in range(2)
        ]
        for mode, copied in (("forward", m * n), ("training", m * n * 5 // 2)):
            src = [tuple(torch.empty(copied, device=device, dtype=dtype) for _ in range(2))
                   for _ in range(2)]  # fmt: skip
            fns = {"copy (same bytes)": (lambda a, b: b.copy_(a), src)}
            for name, (inference, forward, backward) in ROUTES.items():
                if not hasattr(torch.ops.opguide, inference):
                    continue
                ops = [
                    getattr(torch.ops.opguide, op).default for op in (inference, forward, backward)
                ]
                if mode == "forward":
                    fns[name] = (lambda x, w, g, f=ops[0]: f(x, w, EPS), sets)
                else:

                    def step(x, w, g, f=ops[1], b=ops[2]):
                        b(g, x, w, f(x, w, EPS)[1])

                    fns[name] = (step, sets)
            seconds = time_round_robin(fns, device=device, batches=batches)
            rows += [{"mode": mode, "impl": name, "m": m, "n": n, "seconds": t,
                      "pct_of_copy": 100 * seconds["copy (same bytes)"] / t}
                     for name, t in seconds.items()]  # fmt: skip
    return rows


#: A floor of a training call with GPU work: autograd around an elementwise product.
FLOOR = "x * w (autograd)"


def per_call(shape_list, dtype: torch.dtype, device: torch.device, rounds: int, calls: int = 50):
    """Wall-clock seconds per eager call of the three routes and the two floors, with quartiles.

    The rows of :func:`run_eager` that the ahead-of-time route is judged by:
    ``calls`` calls back to back, then a synchronisation, in rounds that take
    the implementations in turn (the order reversed every other round); the
    median and quartiles are over rounds.
    """
    keep = ("opguide", "opguide triton", AOT, eager_module.EMPTY_FUNCTION)
    rows = []
    for mode in ("forward", "training"):
        impls = eager_module.eager_implementations(mode, device)
        fns = {name: impls[name] for name in keep if name in impls}
        if mode == "training":

            def floor(x, w, g):
                x.grad = w.grad = None
                (x * w).backward(g)

            fns[FLOOR] = floor
        for m, n in shape_list:
            grad = mode == "training"
            x = torch.randn(m, n, device=device, dtype=dtype, requires_grad=grad)
            w = torch.randn(n, device=device, dtype=dtype, requires_grad=grad)
            g = torch.randn(m, n, device=device, dtype=dtype)
            samples = {name: [] for name in fns}
            for r in range(rounds + 2):  # two rounds of warm-up
                for name in fns if r % 2 == 0 else reversed(fns):
                    x.grad = w.grad = None
                    torch.cuda.synchronize(device)
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fns[name](x, w, g)
                    torch.cuda.synchronize(device)
                    if r >= 2:
                        samples[name].append((time.perf_counter() - t0) / calls)
            for name, s in samples.items():
                q1, median, q3 = statistics.quantiles(s, n=4)
                rows.append({"mode": mode, "impl": name, "m": m, "n": n,
                             "median": median, "q1": q1, "q3": q3})  # fmt: skip
    return rows


def manifest() -> dict | None:
    """The build's manifest of ahead-of-time Triton artifacts, or None."""
    import opguide

    path = Path(opguide.__file__).parent / "triton_aot_manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def profile(dtype: torch.dtype) -> None:
    """torch.profiler tables of 200 eager training calls of each opguide route at 1x4096."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import opguide

    x = torch.randn(1, 4096, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.rand(4096, device="cuda", dtype=dtype, requires_grad=True)
    grad_y = torch.randn(1, 4096, device="cuda", dtype=dtype)
    for backend in ("triton", "cpp"):

        def step(backend=backend):
            x.grad = w.grad = None
            opguide.rms_norm(x, w, 1e-6, backend=backend).backward(grad_y)

        for _ in range(20):
            step()
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(200):
                step()
            torch.cuda.synchronize()
        print(f"== opguide, backend={backend!r}: 200 forward+backward calls at 1x4096 ==")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (15)")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--profile", action="store_true", help="profile 1x4096 calls instead")
    parser.add_argument(
        "--shapes", type=shapes, help="MxN,... (default: 1 and 1024 rows of 4096, 8192)"
    )
    parser.add_argument("--out", help="also time the GPU and write everything to this JSON file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_per_call: needs a GPU", file=sys.stderr)
        return 2
    if args.profile:
        profile(DTYPES[args.dtype])
        return 0
    device = torch.device("cuda")
    eager_module.eager_implementations = with_aot(eager_module.eager_implementations)
    import opguide.triton  # noqa: F401  (the JIT operators the ahead-of-time one falls back to)

    if args.shapes is None:
        eager = run_eager(device, dtype=args.dtype, ms=(1, 1024), rounds=args.rounds)
    else:  # each shape on its own: the rows of every run, in turn
        runs = [run_eager(device, dtype=args.dtype, ms=(m,), ns=(n,), rounds=args.rounds)
                for m, n in args.shapes]  # fmt: skip
        eager = {**runs[0], "rows": [r for run in runs for r in run["rows"]],
                 "skipped": [s for run in runs for s in run["skipped"]]}  # fmt: skip
    result = {**environment(device), "eager": eager}
    print(format_sweep_report(result))
    if args.out:
        from guidekit.recorded import tool_command
        from guidekit.recorded.sources import stamp

        # Shapes whose every tensor outgrows L2 (2**25 elements, 64 MiB of bfloat16):
        # two argument sets, taken in turn, then never start in cache.
        large = [(m, n) for m, n in args.shapes or [(8192, 4096)] if m * n >= 2**25]
        shape_list = args.shapes or [(1, 4096), (8192, 4096)]
        result["per_call"] = per_call(shape_list, DTYPES[args.dtype], device, args.rounds)
        for row in result["per_call"]:
            median, q1, q3 = (row[k] * 1e6 for k in ("median", "q1", "q3"))
            print(f"{row['mode']:8} {row['m']}x{row['n']} {row['impl']:22} "
                  f"{median:7.1f} us ({q1:.1f}-{q3:.1f})")  # fmt: skip
        result["gpu_time"] = gpu_times(large, DTYPES[args.dtype], device, batches=args.rounds)
        for row in result["gpu_time"]:
            us, pct = row["seconds"] * 1e6, row["pct_of_copy"]
            print(f"{row['mode']:8} {row['m']}x{row['n']} {row['impl']:18} {us:7.1f} us {pct:.0f}%")
        result["command"] = tool_command("tools/bench_per_call.py", sys.argv[1:])
        result["artifacts"] = manifest()
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        stamp(Path(args.out))  # the hashes of the sources it ran
    return 0


if __name__ == "__main__":
    sys.exit(main())
