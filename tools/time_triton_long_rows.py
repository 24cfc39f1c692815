"""Times the Triton route's long-row launches against each other on a GPU: split, chunked, copy.

    python3 tools/time_triton_long_rows.py [--out FILE.json]

For rows of 32768 to 524288 bfloat16 elements (M * N = 2**26), the forward,
the backward and the fused operator with the planner's launch (split rows)
and with the chunked launch that ``OPGUIDE_TRITON_SPLIT=0`` selects, beside
a copy of the forward's bytes. Rounds interleave the launches (21 rounds of
10 calls, the order reversed every other round); each line gives the median
per call and the quartiles, in microseconds, from CUDA events.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from opguide.triton import launch, ops

ROUNDS, CALLS = 21, 10


def _interleaved(fns: dict) -> dict[str, list[float]]:
    """Each call's quartiles in microseconds: ``[q1, median, q3]``."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # compiles and loads every kernel first
        fn()
    torch.cuda.synchronize()
    names = list(fns)
    for r in range(ROUNDS):
        for name in names if r % 2 == 0 else reversed(names):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(CALLS):
                fns[name]()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e3 / CALLS)
    return {name: statistics.quantiles(v, n=4) for name, v in samples.items()}


def _launches(x, r, g, w, inv, y) -> dict:
    """The timed calls on one shape's tensors, by name."""
    chunked = launch.CHUNKED
    return {
        "forward split": lambda: ops.rms_norm_forward(x, w, 1e-6, inv),
        "forward chunked": lambda: ops.rms_norm_forward(x, w, 1e-6, inv, forced=chunked),
        "backward split": lambda: ops.rms_norm_backward(g, x, w, inv),
        "backward chunked": lambda: ops.rms_norm_backward(g, x, w, inv, forced=chunked),
        # Timing only: the residual grows call after call.
        "fused split": lambda: ops.fused_add_rms_norm(x, r, w, 1e-6),
        "fused chunked": lambda: ops.fused_add_rms_norm(x, r, w, 1e-6, forced=chunked),
        "copy of x": lambda: y.copy_(x),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    rows = []
    for n in (32768, 65536, 131072, 262144, 524288):
        m = 2**26 // n
        x, r, g = (torch.randn(m, n, device=device, dtype=torch.bfloat16) for _ in range(3))
        w = torch.randn(n, device=device, dtype=torch.bfloat16)
        inv, y = torch.empty(m, device=device), torch.empty_like(x)
        ops.rms_norm_forward(x, w, 1e-6, inv)
        fns = _launches(x, r, g, w, inv, y)
        planned = {
            "forward": launch.forward_config(m, n, x.dtype, device),
            "backward": launch.backward_config(m, n, x.dtype, device),
            "fused": launch.fused_config(m, n, x.dtype, device),
        }
        for name, (q1, median, q3) in _interleaved(fns).items():
            print(f"N={n:7d} M={m:5d} {name:17s} {median:8.1f} us [{q1:.1f}, {q3:.1f}]", flush=True)
            plan = planned.get(name.split()[0])
            planned_name = type(plan).__name__ if plan else None
            rows.append({"n": n, "m": m, "launch": name, "q1_us": q1, "median_us": median,
                         "q3_us": q3, "planned": planned_name})  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
