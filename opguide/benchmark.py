"""Benchmarks of the RMSNorm implementations against the memory floor.

RMSNorm is memory-bound: its floor is the bytes it must move (read ``x`` and
``weight`` once, write ``y`` once) divided by the device's bandwidth. This
module measures that bandwidth with a large device-to-device copy and every
implementation in the same run, so the ratios compare like with like.

Timing: CUDA events around a batch of calls, inputs rotated through enough
buffers to exceed the L2 cache (so no call reads the previous call's data
from L2), warm-up first, the median of several batches reported. On the CPU
the same loop uses ``time.perf_counter``.

Run ``python -m opguide.benchmark --help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

__all__ = ["copy_bandwidth", "time_per_call", "run_forward", "main"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_per_call(
    fn: Callable[..., object],
    arg_sets: Sequence[tuple],
    *,
    device: torch.device,
    batches: int = 15,
    calls_per_batch: int = 20,
    warmup: int = 3,
) -> float:
    """Median seconds per call of ``fn(*args)``, cycling through ``arg_sets``.

    Args:
        fn: the function to time.
        arg_sets: several argument tuples, each with its own buffers; calls
            cycle through them so that data is not reused from cache.
        device: where ``fn`` runs (CUDA events on a GPU, wall time on a CPU).
        batches: how many timed batches (the median is returned).
        calls_per_batch: calls inside one timed batch.
        warmup: untimed batches first (compilation, autotuning, allocator).

    Returns:
        Seconds per call, median over batches.
    """
    n = len(arg_sets)
    for i in range(warmup * calls_per_batch):
        fn(*arg_sets[i % n])
    _sync(device)
    samples = []
    k = 0
    for _ in range(batches):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls_per_batch):
                fn(*arg_sets[k % n])
                k += 1
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / calls_per_batch)
        else:
            t0 = time.perf_counter()
            for _ in range(calls_per_batch):
                fn(*arg_sets[k % n])
                k += 1
            samples.append((time.perf_counter() - t0) / calls_per_batch)
    return statistics.median(samples)


def _l2_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return int(getattr(props, "L2_cache_size", 50 * 2**20))
    return 64 * 2**20


def _rotation(bytes_per_set: int, device: torch.device) -> int:
    """How many input sets make the working set at least 3x the L2 cache."""
    return max(1, min(64, -(-3 * _l2_bytes(device) // max(1, bytes_per_set))))


def copy_bandwidth(device: torch.device, nbytes: int = 2**30) -> float:
    """Bytes per second of a large device-to-device copy, counting read + write."""
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = time_per_call(
        lambda a, b: b.copy_(a), [(src, dst)], device=device, batches=10, calls_per_batch=5
    )
    return 2 * src.numel() * src.element_size() / seconds


@dataclasses.dataclass
class Row:
    """One measurement: an implementation on one shape and dtype."""

    impl: str
    m: int
    n: int
    dtype: str
    seconds: float
    bytes: int

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9


def _reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def forward_implementations() -> dict[str, Callable]:
    """The forward implementations to compare, by name."""
    import opguide

    compiled_reference = torch.compile(_reference, dynamic=False)
    impls = {
        "opguide": lambda x, w: opguide.rms_norm(x, w, 1e-6),
        "F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6),
        "compile(reference)": lambda x, w: compiled_reference(x, w, 1e-6),
        "eager reference": lambda x, w: _reference(x, w, 1e-6),
    }
    try:
        from opguide import triton_rms_norm  # noqa: F401  (added by the Triton chapter)

        impls["opguide triton"] = lambda x, w: opguide.rms_norm(x, w, 1e-6, backend="triton")
    except ImportError:
        pass
    return impls


def run_forward(
    shapes: Sequence[tuple[int, int]], dtypes: Sequence[str], device: torch.device
) -> list[Row]:
    """Times every forward implementation at every shape and dtype."""
    rows = []
    impls = forward_implementations()
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        for m, n in shapes:
            size = torch.tensor([], dtype=dtype).element_size()
            moved = 2 * m * n * size + n * size
            sets = [
                (torch.randn(m, n, device=device, dtype=dtype), torch.randn(n, device=device, dtype=dtype))
                for _ in range(_rotation(moved, device))
            ]
            for name, fn in impls.items():
                seconds = time_per_call(fn, sets, device=device)
                rows.append(Row(name, m, n, dtype_name, seconds, moved))
            del sets
    return rows


def environment(device: torch.device) -> dict:
    """Device name and software versions, for the result file."""
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="32768x4096,8192x4096,4096x8192,65536x1024")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    bandwidth = copy_bandwidth(device)
    rows = run_forward(shapes, args.dtypes.split(","), device)
    result = {
        **environment(device),
        "copy_bandwidth_GBps": bandwidth / 1e9,
        "forward": [dataclasses.asdict(r) | {"GBps": r.gbps} for r in rows],
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(f"{result['device']}  torch {result['torch']}  copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    print(f"{'impl':20} {'shape':>12} {'dtype':>5} {'us':>9} {'GB/s':>7} {'% copy':>7}")
    for r in rows:
        print(
            f"{r.impl:20} {f'{r.m}x{r.n}':>12} {r.dtype:>5} {r.seconds * 1e6:9.1f} "
            f"{r.gbps:7.0f} {100 * r.gbps * 1e9 / bandwidth:6.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
