"""Runs the stable-ABI library's tests from a wheel under the torch of this machine.

The wheel was built elsewhere (another torch, perhaps another machine); this
installs it into a temporary folder, runs ``stable/tests`` against it in a
fresh process, and writes what happened to a JSON file that step 15 of the
guide reads::

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
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
    print(run.stdout[-3000:], run.stderr[-2000:])
    summary = [line for line in run.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    record = {
        "wheel": args.wheel.name,
        "built_with": json.loads(info.stdout),
        "run_with": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU",
        },
        "pytest_exit_code": run.returncode,
        "pytest_summary": summary[-1].strip("= ") if summary else run.stdout[-300:],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
