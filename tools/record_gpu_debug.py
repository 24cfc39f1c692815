"""Records the GPU debugging demonstrations of gallery step 14 on a real GPU.

Needs an NVIDIA GPU and, on PATH: nvcc, compute-sanitizer, ncu, and a
python3 with a CUDA build of torch. Compiles the programs in
tools/gpu_debug/, runs each under its tool, and writes everything (commands,
exit statuses, outputs, device, versions, date) to OUT/gpu_debug.json::

    python3 tools/record_gpu_debug.py --out OUT

Copy the file to docs/recorded/gpu_debug.json and the step 14 page shows it,
labelled as a recording. Nothing here runs while the docs are built.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "gpu_debug"
TOOLS = ("nvidia-smi", "nvcc", "compute-sanitizer", "ncu")
# Outputs longer than this keep their head and tail.
MAX_CHARS = 9000


def _which(tool: str) -> str | None:
    """Finds a CUDA tool on PATH, else in the toolkit (CUDA_HOME, /usr/local/cuda)."""
    found = shutil.which(tool)
    if found:
        return found
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    for candidate in (home / "bin" / tool, home / tool / tool):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600):
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    # The programs run in a temporary folder; the record names it "./", the
    # folder the commands are shown to run in.
    out = (proc.stdout + proc.stderr).replace(f"{cwd}/", "./")
    if len(out) > MAX_CHARS:
        out = out[:2000] + "\n[... output shortened ...]\n" + out[-(MAX_CHARS - 2000) :]
    return proc.returncode, out


def _first_line(cmd: list[str]) -> str:
    code, out = _run(cmd, Path.cwd(), timeout=120)
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[0] if code == 0 and lines else f"(failed: {out.strip()[:200]})"


def _last_line(cmd: list[str]) -> str:
    code, out = _run(cmd, Path.cwd(), timeout=120)
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1] if code == 0 and lines else f"(failed: {out.strip()[:200]})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu_debug.json")
    args = parser.parse_args(argv)

    path = {tool: _which(tool) for tool in TOOLS}
    missing = [tool for tool, found in path.items() if found is None]
    if missing:
        print(
            f"record_gpu_debug: not found on PATH or in CUDA_HOME: {', '.join(missing)}",
            file=sys.stderr,
        )
        return 2
    gpu = _first_line(
        [path["nvidia-smi"], "--query-gpu=name,driver_version", "--format=csv,noheader"]
    )
    if gpu.startswith("(failed"):
        print(f"record_gpu_debug: no usable NVIDIA GPU: {gpu}", file=sys.stderr)
        return 2

    record = {
        "device": gpu.split(",")[0].strip(),
        "driver": gpu.split(",")[-1].strip(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nvcc": _last_line([path["nvcc"], "--version"]),
        "compute-sanitizer": _last_line([path["compute-sanitizer"], "--version"]),
        "ncu": _last_line([path["ncu"], "--version"]),
        "torch": _first_line(
            [sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"]
        ),
        "runs": [],
    }

    with tempfile.TemporaryDirectory(prefix="opguide_gpu_debug_") as tmp:
        work = Path(tmp)
        for name in ("oob_write", "shared_race", "saxpy"):
            cmd = [
                path["nvcc"],
                "-O2",
                "-lineinfo",
                "-arch=native",
                "-o",
                name,
                str(PROGRAMS / f"{name}.cu"),
            ]
            code, out = _run(cmd, work)
            if code != 0:
                print(f"record_gpu_debug: {' '.join(cmd)} failed:\n{out}", file=sys.stderr)
                return 1
        shutil.copy(PROGRAMS / "async_error.py", work / "async_error.py")

        runs = [
            ("oob_write, no tool", ["./oob_write"], {}),
            (
                "oob_write under memcheck",
                ["compute-sanitizer", "--tool", "memcheck", "./oob_write"],
                {},
            ),
            ("shared_race, no tool", ["./shared_race"], {}),
            (
                "shared_race under racecheck",
                ["compute-sanitizer", "--tool", "racecheck", "./shared_race"],
                {},
            ),
            (
                "saxpy under Nsight Compute",
                ["ncu", "--section", "SpeedOfLight", "--section", "LaunchStats", "./saxpy"],
                {},
            ),
            ("async_error.py", [sys.executable, "async_error.py"], {}),
            (
                "async_error.py with CUDA_LAUNCH_BLOCKING=1",
                [sys.executable, "async_error.py"],
                {"CUDA_LAUNCH_BLOCKING": "1"},
            ),
        ]
        for title, cmd, env in runs:
            shown = " ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "")
            shown += " ".join("python3" if c == sys.executable else c for c in cmd)
            print(f"record_gpu_debug: {shown}", file=sys.stderr)
            code, out = _run([path.get(cmd[0]) or cmd[0], *cmd[1:]], work, env)
            record["runs"].append(
                {"title": title, "command": shown, "returncode": code, "output": out}
            )

    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "gpu_debug.json"
    target.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record_gpu_debug: wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
