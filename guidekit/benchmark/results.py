"""Result files: the environment they record, their text reports, saving them.

A result file is JSON: the device, the software versions and the date
(:func:`environment`), the format and bytes model of :mod:`.passes`, the
measurements, and the command that wrote it. ``docs/recorded/*.json`` are
such files.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from .passes import GPU_PASSES, SWEEP_PASSES


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# Settings outside opguide that change the CPU numbers: PyTorch's switch for
# transparent huge pages in its CPU allocator, the thread count, glibc's malloc.
CPU_ENV_VARS = ("THP_MEM_ALLOC_ENABLE", "OMP_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_", "LD_PRELOAD")


def _transparent_hugepages() -> str | None:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return None


def environment(device: torch.device) -> dict:
    """Device name, software versions and CPU settings, for the result file."""
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
        "cpu": _cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_env": {name: os.environ.get(name) for name in CPU_ENV_VARS},
        "transparent_hugepage": _transparent_hugepages(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def format_report(result: dict) -> str:
    """The result as text tables (what ``main`` prints)."""
    lines = [
        f"{result['device']}  torch {result['torch']}  CUDA {result['cuda']}  "
        f"Triton {result['triton']}  {result['date']}"
    ]
    if result.get("forward") or result.get("backward") or result.get("fused"):
        lines.append(f"copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s")
    for pass_name in GPU_PASSES:
        if not result.get(pass_name):
            continue
        lines.append(f"\n{pass_name}")
        lines.append(f"{'impl':28} {'shape':>12} {'dtype':>5} {'us':>9} {'GB/s':>7} {'% copy':>7}")
        for r in result[pass_name]:
            shape = f"{r['m']}x{r['n']}"
            lines.append(
                f"{r['impl']:28} {shape:>12} {r['dtype']:>5} "
                f"{r['seconds'] * 1e6:9.1f} {r['GBps']:7.0f} {100 * r['of_copy']:6.1f}%"
            )
    for s in result.get("skipped", []):
        where = "all shapes" if s["m"] is None else f"{s['m']}x{s['n']} {s['dtype']}"
        lines.append(f"skipped: {s['pass']}, {s['impl']}, {where}: {s['reason']}")
    if "cpu_overhead" in result:
        o = result["cpu_overhead"]
        lines.append(f"\nCPU operator-call overhead, float32 {o['shape'][0]}x{o['shape'][1]}")
        lines.append(f"{'impl':44} {'us/call':>9} {'vs torch.rms_norm':>18}")
        for r in o["rows"]:
            lines.append(
                f"{r['impl']:44} {r['seconds'] * 1e6:9.2f} {r['vs_torch_rms_norm']:17.2f}x"
            )
    if "cpu_kernel" in result:
        k = result["cpu_kernel"]
        lines.append(
            f"\nCPU kernel, float32 {k['shape'][0]}x{k['shape'][1]}, {k['threads']} threads"
        )
        lines.append(f"{'impl':28} {'ms':>9} {'GB/s':>7} {'vs copy_':>9}")
        for r in k["rows"]:
            lines.append(
                f"{r['impl']:28} {r['seconds'] * 1e3:9.2f} {r['GBps']:7.1f} {r['vs_copy']:8.2f}x"
            )
        if "target_vs_copy" in k:
            mine = next(r for r in k["rows"] if r["impl"] == "opguide (C++ kernel)")
            verdict = "met" if mine["vs_copy"] <= k["target_vs_copy"] else "not met"
            goal = k["target_vs_copy"]
            lines.append(f"target: opguide (C++ kernel) within {goal}x copy_: {verdict}")
    return "\n".join(lines)


def format_sweep_report(result: dict) -> str:
    """The sweep and eager results as text tables: one column per implementation."""
    lines = [f"{result['device']}  torch {result['torch']}  Triton {result['triton']}"]
    sweep = result.get("sweep")
    if sweep:
        for pass_name in SWEEP_PASSES:
            for dtype in sweep["dtypes"]:
                rows = [r for r in sweep["rows"] if r["pass"] == pass_name and r["dtype"] == dtype]
                if not rows:
                    continue
                impls = list(dict.fromkeys(r["impl"] for r in rows))
                lines.append(f"\n{pass_name} {dtype}: GPU time as a fraction of the copy's speed")
                lines.append(f"{'N':>7} " + " ".join(f"{i[:12]:>12}" for i in impls))
                for n in sweep["ns"]:
                    at = {r["impl"]: r for r in rows if r["n"] == n}
                    cells = [f"{at[i]['vs_copy']:12.2f}" if i in at and at[i]["vs_copy"] else
                             f"{'-':>12}" for i in impls]  # fmt: skip
                    lines.append(f"{n:>7} " + " ".join(cells))
        for s in sweep["skipped"]:
            lines.append(f"skipped: {s['pass']} {s['impl']} {s['m']}x{s['n']}: {s['reason']}")
        for name, why in sweep["peers_missing"].items():
            lines.append(f"not installed: {name}: {why}")
    eager = result.get("eager")
    if eager:
        for mode in ("forward", "training"):
            rows = [r for r in eager["rows"] if r["mode"] == mode]
            impls = list(dict.fromkeys(r["impl"] for r in rows))
            lines.append(f"\neager {mode} {eager['dtype']}: us per call (wall clock)")
            lines.append(f"{'shape':>10} " + " ".join(f"{i[:12]:>12}" for i in impls))
            for n in sorted({r["n"] for r in rows}):
                for m in sorted({r["m"] for r in rows}):
                    at = {r["impl"]: r for r in rows if r["m"] == m and r["n"] == n}
                    cells = [f"{at[i]['seconds'] * 1e6:12.1f}" if i in at else f"{'-':>12}"
                             for i in impls]  # fmt: skip
                    lines.append(f"{f'{m}x{n}':>10} " + " ".join(cells))
        for s in eager["skipped"]:
            lines.append(f"skipped: {s['pass']} {s['impl']} {s['m']}x{s['n']}: {s['reason']}")
    return "\n".join(lines)


def _save(result: dict, out: Path | None, argv: Sequence[str] | None) -> None:
    """Records the command line (so a result file says how it was made); writes ``out``.

    The output path is recorded as its file name: where the measuring machine
    kept its files is no part of the result.
    """
    cli = sys.argv[1:] if argv is None else list(argv)
    if out:
        cli = [Path(a).name if a == str(out) else a for a in cli]
    result["command"] = " ".join(["python -m guidekit.benchmark", *cli])
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
