"""Runs the template's generated projects on a GPU machine and records what their tests did.

The stable-ABI route builds with the stable headers of torch 2.13 or later and
loads into torch 2.11 and later, so its wheels are built on a machine with
such a torch and nvcc (no GPU needed) and carried to the GPU machine, whose
torch may be older. The Triton and Python routes ship pure-Python wheels,
built the same way. The classic C++ route's wheel loads only into the torch
it was built with, so it is built on the GPU machine itself, and so is the
Triton route's with ``--triton-aot`` (its kernels compiled ahead of time, for
``--arch``, by the Triton that runs them). Two steps::

    # where torch >= 2.13 and nvcc are (CUDA_HOME: a toolkit with libcudart.so)
    python tools/record_template_gpu.py build build/template_gpu --abi stable --arch 9.0
    # on the GPU machine, no network needed
    python tools/record_template_gpu.py run build/template_gpu \\
        --out docs/recorded/template_stable_cuda_h100.json --jobs 7

``run`` installs each wheel alone (no dependencies: the machine's torch and
Triton, and pytest and hypothesis, must be there) into a folder of its own,
runs the project's tests against it from another folder, and counts the test
items whose id names ``cuda``: the ones that ran the CUDA kernels. With
``--memcheck scatter,indexed`` it runs those kinds' CUDA items again under
``compute-sanitizer --tool memcheck``: the wheels are release builds
(``-DNDEBUG``), so this checks that a bad index writes nothing out of bounds
where no ``assert`` is left. ``--jobs N`` runs N projects at once (they share
only the GPU); the classic route's wheels then build at once too.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guidekit import template_variants as tv  # noqa: E402

PREFIX = "gpu"  # package names: gpu_cpp_stable_rowwise_inplace, ...


def variants(route: str, abi: str) -> list[tuple[str, str, str, bool]]:
    return [v for v in tv.EVERY if v[:2] == (route, abi)]


def build(args: argparse.Namespace) -> int:
    out = Path(args.dir).resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "wheels").mkdir(parents=True)
    if args.triton_aot and args.route != "triton":
        raise SystemExit("record_template_gpu.py build: --triton-aot is the triton route's")
    env = dict(os.environ, USE_CUDA="1", TORCH_CUDA_ARCH_LIST=args.arch)
    chosen = variants(args.route, args.abi)
    carried = (args.route != "cpp" or args.abi == "stable") and not args.triton_aot
    for number, (route, abi, kind, inplace) in enumerate(chosen, 1):
        project = tv.render_variant(
            out / "projects", route, abi, kind, inplace, PREFIX, triton_aot=args.triton_aot
        )
        print(f"[{number}/{len(chosen)}] {project.name}: rendered", flush=True)
        if not carried:
            continue  # built where it runs: a classic-ABI wheel, or kernels compiled ahead of time
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
             "-w", str(out / "wheels"), "."],
            cwd=project, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            print(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise SystemExit(f"{project.name}: the wheel did not build")
        print(f"[{number}/{len(chosen)}] {project.name}: wheel built", flush=True)
    import torch

    info = {"route": args.route, "abi": args.abi, "torch": torch.__version__, "arch": args.arch}
    info["triton_aot"] = args.triton_aot
    info["python"] = platform.python_version()
    (out / "built.json").write_text(json.dumps(info, indent=1) + "\n")
    return 0


def _cuda_items(junit: Path) -> dict[str, int]:
    """The test items whose id names cuda, by outcome."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in ET.parse(junit).iter("testcase"):
        if "cuda" not in case.get("name", ""):
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def memcheck(project: Path, target: Path, scratch: str) -> dict:
    """The project's CUDA test items under compute-sanitizer's memcheck: its summary lines."""
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        return {"exit_code": None, "tests": "compute-sanitizer not found", "errors": ""}
    proc = subprocess.run(
        [sanitizer, "--tool", "memcheck", "--error-exitcode", "9", sys.executable, "-m",
         "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", str(project / "tests")],
        cwd=scratch, env=dict(os.environ, PYTHONPATH=str(target)), capture_output=True,
        text=True,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    tests = [re.sub(r"=+", "", line).strip() for line in lines if re.search(r"\d+ passed", line)]
    errors = [line.strip() for line in lines if "ERROR SUMMARY" in line]
    return {
        "exit_code": proc.returncode,
        "tests": tests[-1] if tests else "(no summary)",
        "errors": errors[-1].removeprefix("========= ") if errors else "(no summary)",
    }


def _one(project: Path, folder: Path, scratch: str, memcheck_kinds: list[str], arch: str) -> dict:
    """Builds (classic ABI, Triton AOT) or takes a project's wheel; installs it alone; tests it."""
    wheel = sorted((folder / "wheels").glob(f"{project.name}-*.whl"))
    if not wheel:  # built here, against this torch (and Triton)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
             "--no-deps", "-w", str(folder / "wheels"), "."],
            cwd=project, capture_output=True, text=True,
            env=dict(os.environ, TORCH_CUDA_ARCH_LIST=arch),
        )  # fmt: skip
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).splitlines()
            errors = [line.strip() for line in output if "error:" in line][:10]
            return {"project": project.name, "wheel": None, "pytest_exit_code": None,
                    "summary": "the wheel did not build", "cuda_items": {},
                    "failures": errors}  # fmt: skip
        wheel = sorted((folder / "wheels").glob(f"{project.name}-*.whl"))
    target = Path(scratch) / project.name
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
         str(target), str(wheel[0])],
        check=True,
    )  # fmt: skip
    junit = Path(scratch) / f"{project.name}.xml"
    # Each project runs from a folder of its own, so that concurrent runs share no files.
    here = Path(scratch) / f"{project.name}.run"
    here.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
         f"--junitxml={junit}", str(project / "tests")],
        cwd=here, env=env, capture_output=True, text=True,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    row = {
        "project": project.name,
        "wheel": wheel[0].name,
        "pytest_exit_code": proc.returncode,
        "summary": re.sub(r"=+", "", lines[-1]).strip() if lines else "(no output)",
        "cuda_items": _cuda_items(junit) if junit.exists() else {},
        "failures": [line for line in lines if line.startswith("FAILED")],
    }
    if any(f"_{kind}" in project.name for kind in memcheck_kinds):
        row["memcheck"] = memcheck(project, target, str(here))
    return row


def _failed(row: dict) -> bool:
    return row["pytest_exit_code"] != 0 or row.get("memcheck", {}).get("exit_code", 0) != 0


def run(args: argparse.Namespace) -> int:
    import torch
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("record_template_gpu.py run: no CUDA GPU visible to torch")
    folder = Path(args.dir).resolve()
    built = json.loads((folder / "built.json").read_text())
    projects = sorted(p for p in (folder / "projects").iterdir() if p.is_dir())
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        # Projects share nothing but the GPU, so --jobs of them run at once; each
        # line below is printed when its project finishes.
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {
                pool.submit(_one, p, folder, scratch, args.memcheck, built["arch"]): p
                for p in projects
            }
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                row = future.result()
                rows[row["project"]] = row
                extra = f"; memcheck {row['memcheck']}" if "memcheck" in row else ""
                print(f"[{done}/{len(projects)}] {row['project']}: {row['summary']}; "
                      f"cuda items {row['cuda_items']}{extra}", flush=True)  # fmt: skip
                for line in row["failures"]:
                    print("    " + line, flush=True)
    rows = [rows[p.name] for p in projects]
    failed = sum(_failed(row) for row in rows)
    record = {
        "format": 1,
        "built_with": built,
        "run_with": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "python": platform.python_version(),
            "device": torch.cuda.get_device_name(),
        },
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python tools/record_template_gpu.py run DIR --out "
        + Path(args.out).name
        + (f" --memcheck {','.join(args.memcheck)}" if args.memcheck else ""),
        "projects": rows,
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}: {len(rows) - failed} of {len(rows)} projects passed")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    b = sub.add_parser("build", help="render the variants; build the wheels that travel")
    b.add_argument("dir")
    b.add_argument("--route", default="cpp", choices=["cpp", "triton", "python"])
    b.add_argument("--abi", default="stable", choices=["classic", "stable"])
    b.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST (default 9.0)")
    b.add_argument(
        "--triton-aot",
        action="store_true",
        help="the triton route with triton_aot: kernels compiled ahead of time, on the GPU machine",
    )
    r = sub.add_parser("run", help="on the GPU machine: install each wheel, run its tests")
    r.add_argument("dir")
    r.add_argument("--out", required=True)
    r.add_argument(
        "--memcheck",
        default="",
        type=lambda text: [k for k in text.split(",") if k],
        help="kinds whose CUDA tests also run under compute-sanitizer memcheck, e.g. scatter",
    )
    r.add_argument("--jobs", type=int, default=1, help="projects run at once (default 1)")
    args = parser.parse_args()
    return build(args) if args.step == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
