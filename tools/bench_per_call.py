"""Eager time per call of each RMSNorm, forward and forward+backward, on one GPU.

The eager mode of ``python -m guidekit.benchmark`` (:func:`guidekit.benchmark.run_eager`)
at one row and at 1024 rows of 4096 and 8192, with its rows of the autograd floor
(``empty Python Function``: autograd around a Python Function that launches nothing),
or, with ``--profile``, where the time of a call goes::

    python tools/bench_per_call.py --rounds 15   # the table, bf16
    python tools/bench_per_call.py --profile     # torch.profiler, 200 calls of each route

``--profile`` prints the :mod:`torch.profiler` table of 200 forward+backward calls of
each opguide route at 1x4096, CPU time first: the host's cost, layer by layer.
"""

from __future__ import annotations

import argparse
import sys

import torch

from guidekit.benchmark import DTYPES, environment, format_sweep_report, run_eager


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
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_per_call: needs a GPU", file=sys.stderr)
        return 2
    if args.profile:
        profile(DTYPES[args.dtype])
        return 0
    device = torch.device("cuda")
    eager = run_eager(device, dtype=args.dtype, ms=(1, 1024), rounds=args.rounds)
    print(format_sweep_report({**environment(device), "eager": eager}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
