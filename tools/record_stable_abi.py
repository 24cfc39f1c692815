"""Runs the stable-ABI library's tests from a wheel under the torch of this machine.

The wheel was built elsewhere (another torch, perhaps another machine); this
installs it into a temporary folder, runs ``stable/tests`` against it in a
fresh process, and writes what happened to a JSON file that step 15 of the
guide reads. On a GPU that the wheel's Triton forward was compiled for
(ahead of time), it also times an eager call of each backend (``"cpp"``, the
library's CUDA kernel, and ``"triton"``) at a few bfloat16 shapes: rounds
that take the backends in turn, each round many calls then one
synchronisation; quartiles over the rounds::

    python tools/record_stable_abi.py --wheel dist/opguide_stable-*.whl \\
        --out docs/recorded/stable_abi_torch2.11_cuda.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The timing child: prints {shape: {backend: [q1, median, q3]}} in us per call.
_PER_CALL = """
import json, statistics, sys, time
import torch, opguide_stable
rounds, calls = int(sys.argv[1]), int(sys.argv[2])
backends = ("cpp", "triton")
out = {}
for rows, cols in ((1, 4096), (8192, 4096), (65536, 1024)):
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    for b in backends:  # the first calls load the kernels
        for _ in range(10):
            opguide_stable.rms_norm(x, w, backend=b)
    times = {b: [] for b in backends}
    for r in range(rounds):
        for b in backends if r % 2 == 0 else backends[::-1]:
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                opguide_stable.rms_norm(x, w, backend=b)
            torch.cuda.synchronize()
            times[b].append((time.perf_counter() - start) / calls * 1e6)
    out[f"{rows}x{cols}"] = {b: statistics.quantiles(t, n=4) for b, t in times.items()}
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--rounds", type=int, default=21, help="timing rounds (GPU only)")
    parser.add_argument("--calls", type=int, default=200, help="calls per round")
    args = parser.parse_args()

    import torch

    with tempfile.TemporaryDirectory() as target:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                target,
                str(args.wheel),
            ],
            check=True,
        )
        env = dict(os.environ, PYTHONPATH=target)
        info = subprocess.run(
            [
                sys.executable,
                "-c",
                "import json, opguide_stable; print(json.dumps(opguide_stable.BUILD_INFO))",
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        if info.returncode != 0:
            raise SystemExit(
                f"the wheel does not load under torch {torch.__version__}:\n" + info.stderr[-3000:]
            )
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(ROOT / "stable" / "tests"),
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=target,
        )
        built = json.loads(info.stdout)
        per_call = None
        # Only on a GPU the wheel's Triton kernels were compiled for: elsewhere
        # the "triton" backend runs the CUDA kernel after a warning.
        here = (
            "sm_{}{}".format(*torch.cuda.get_device_capability())
            if torch.cuda.is_available()
            else None
        )
        if here is not None and here in built.get("triton_aot", []):
            timed = subprocess.run(
                [sys.executable, "-c", _PER_CALL, str(args.rounds), str(args.calls)],
                env=env, capture_output=True, text=True, cwd=target,
            )  # fmt: skip
            if timed.returncode != 0:
                raise SystemExit("timing the backends failed:\n" + timed.stderr[-3000:])
            per_call = json.loads(timed.stdout.splitlines()[-1])
    print(run.stdout[-3000:], run.stderr[-2000:])
    summary = [line for line in run.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    record = {
        "wheel": args.wheel.name,
        "built_with": built,
        "run_with": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU",
        },
        "pytest_exit_code": run.returncode,
        "pytest_summary": summary[-1].strip("= ") if summary else run.stdout[-300:],
        # us per eager call, [q1, median, q3] over rounds; None without a GPU
        # or without the Triton forward in the wheel.
        "per_call_us": per_call,
        "per_call_method": (
            {"dtype": "bfloat16", "rounds": args.rounds, "calls": args.calls} if per_call else None
        ),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
