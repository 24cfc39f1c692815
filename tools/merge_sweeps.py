"""Merges the result files of several ``guidekit.benchmark --sweep`` processes.

Each pass and dtype of the recorded sweep runs in a process of its own (so
that one pass's compiled kernels and allocations do not weigh on the next):

    for d in bf16 fp16; do for p in forward backward training fused; do
        python -m guidekit.benchmark --sweep --dtypes $d --passes $p --out sweep_${d}_$p.json
    done; done
    python tools/merge_sweeps.py sweep_*_*.json --out docs/recorded/sweep_<gpu>.json

The merged file has every row, skip and missing peer of the inputs; its copy
bandwidth per dtype is the mean of the processes' copies of that dtype. The
inputs must come from one machine and one software stack (checked).
"""

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

SAME = ("torch", "cuda", "python", "device", "triton", "format")


def merge(paths: list[Path]) -> dict:
    runs = [json.loads(p.read_text()) for p in paths]
    first = runs[0]
    for path, run in zip(paths, runs, strict=True):
        for key in SAME:
            if run.get(key) != first.get(key):
                raise SystemExit(f"{path}: {key} is {run.get(key)!r}, not {first.get(key)!r}")
        for key, what in (("elements", "M * N"), ("min_sets", "--min-sets")):
            if run["sweep"][key] != first["sweep"][key]:
                raise SystemExit(f"{path}: another {what}")
    merged = {k: v for k, v in first.items() if k != "sweep"}
    merged["date"] = min(r["date"] for r in runs)
    sweeps = [run["sweep"] for run in runs]
    rows = [row for sweep in sweeps for row in sweep["rows"]]
    # Each in the order first met.
    dtypes = list(dict.fromkeys(d for sweep in sweeps for d in sweep["dtypes"]))
    passes = list(dict.fromkeys(row["pass"] for row in rows))
    copies: dict[str, list[float]] = {}
    for run in runs:
        for dtype in run["sweep"]["dtypes"]:
            copies.setdefault(dtype, []).append(run["copy_bandwidth_GBps"])
    merged["copy_bandwidth_GBps"] = statistics.mean(v for c in copies.values() for v in c)
    merged["copy_bandwidth_GBps_per_dtype"] = {d: statistics.mean(c) for d, c in copies.items()}
    merged["sweep"] = {
        "elements": first["sweep"]["elements"],
        "ns": sorted({n for sweep in sweeps for n in sweep["ns"]}),
        "dtypes": dtypes,
        "rows": rows,
        "skipped": [skip for sweep in sweeps for skip in sweep["skipped"]],
        "peers_missing": {k: v for sweep in sweeps for k, v in sweep["peers_missing"].items()},
        "min_sets": first["sweep"]["min_sets"],
    }
    # The first process's command with its dtype, pass and output file as placeholders.
    command = re.sub(r" --out \S+", "", first.get("command", "python -m guidekit.benchmark"))
    command = re.sub(r"--dtypes \S+", "--dtypes DTYPE", command)
    command = re.sub(r"--passes \S+", "--passes PASS", command)
    each = f"DTYPE {', '.join(dtypes)}; PASS {', '.join(passes)}: one process each, in one run"
    merged["command"] = f"{command} ({each})"
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    merged = merge(args.files)
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"{args.out}: {len(merged['sweep']['rows'])} rows from {len(args.files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
