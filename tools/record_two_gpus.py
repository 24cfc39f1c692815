"""Records the two-GPU matrix (tests/test_two_gpus.py), with and without the Triton device guard.

On a machine with two GPUs::

    python tools/record_two_gpus.py --out docs/recorded/two_gpus.json

runs the matrix as it is, then again with ``OPGUIDE_TRITON_DEVICE_GUARD=0``
(the Triton launches make no GPU current; ``opguide/triton/launch.py`` reads
the variable when it is imported), and records both pytest
summaries, the failed tests and the first error. Steps 3 and 9 show the
record on builds with fewer GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def summarize(output: str) -> dict:
    """The summary line, the failed tests and the first error of a pytest run."""
    lines = output.strip().splitlines()
    summary = next(line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line))
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in lines if line.startswith("FAILED ")]
    errors = [line[1:].strip() for line in lines if line.startswith("E ") and "Error" in line]
    return {"summary": summary, "failed": failed, "first_error": errors[0] if errors else None}


def run_matrix(device_guard: bool) -> str:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf"]
    env = {**os.environ, "OPGUIDE_TRITON_DEVICE_GUARD": "1" if device_guard else "0"}
    proc = subprocess.run(
        [*command, "tests/test_two_gpus.py"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    return proc.stdout + proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args()
    import torch

    if torch.cuda.device_count() < 2:
        print(f"needs two GPUs, this machine has {torch.cuda.device_count()}")
        return 1
    command = "python -m pytest -q tests/test_two_gpus.py"
    with_guard = run_matrix(device_guard=True)
    without_guard = run_matrix(device_guard=False)
    record = {
        "device": torch.cuda.get_device_name(0),
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "with_guard": {"command": command, **summarize(with_guard)},
        "without_guard": {
            "command": f"OPGUIDE_TRITON_DEVICE_GUARD=0 {command}",
            **summarize(without_guard),
        },
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
