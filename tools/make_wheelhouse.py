"""Downloads the Python tools the docs and tests need into a wheelhouse.

For a machine with no network (such as a GPU host with its own torch): run
this where PyPI is reachable, carry the folder over, then point the nox
sessions at it with ``OPGUIDE_WHEELHOUSE``. torch itself is never downloaded.

    python tools/make_wheelhouse.py --python-version 3.12 --dest .whl \\
        --skip-present tools/gpu_image_packages.txt

``--skip-present`` drops wheels of packages that the target already has (one
name per line), to keep the folder small; pip on the target still checks
that the installed versions satisfy every requirement.

``--leave-out DIR`` drops the wheels that wheelhouse DIR already holds, for a
machine that takes only so much at a time: install DIR's wheels there first
(``pip install --no-index --find-links DIR DIR/*.whl``), then use this one.
For example, the docs' tools beside a wheelhouse made as above with ``--extras test``:

    python tools/make_wheelhouse.py --python-version 3.12 --dest docs-whl \\
        --extras docs --skip-present tools/gpu_image_packages.txt --leave-out .whl
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# manylinux2014 is manylinux_2_17 under its older name, which some wheels carry alone.
PLATFORMS = ["manylinux2014_x86_64"] + [f"manylinux_2_{v}_x86_64" for v in (17, 27, 28, 34, 35)]


def requirements(extras: list[str]) -> list[str]:
    """The requirements of the given extras of pyproject.toml, torch excluded, plus nox."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [req for extra in extras for req in project["optional-dependencies"][extra]]
    return sorted({"nox", *(req for req in reqs if not re.match(r"^(torch|triton)\b", req))})


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=ROOT / ".whl")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--extras", default="docs,test")
    parser.add_argument("--skip-present", type=Path)
    parser.add_argument("--leave-out", type=Path, metavar="DIR")
    args = parser.parse_args()
    if args.leave_out and not args.leave_out.is_dir():
        parser.error(f"--leave-out: {args.leave_out} is not a folder")
    if args.leave_out and args.leave_out.resolve() == args.dest.resolve():
        parser.error("--leave-out: DIR is --dest itself, which would leave out every wheel")
    args.dest.mkdir(parents=True, exist_ok=True)
    reqs = requirements(args.extras.split(","))
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
    cmd += ["-d", str(args.dest), "--python-version", args.python_version, "--implementation", "cp"]
    cmd += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    print("downloading:", " ".join(reqs))
    subprocess.run(cmd + reqs, check=True)
    lines = args.skip_present.read_text().splitlines() if args.skip_present else []
    present = {
        normalise(line.strip()) for line in lines if line.strip() and not line.startswith("#")
    }
    held = {w.name for w in args.leave_out.glob("*.whl")} if args.leave_out else set()
    for wheel in sorted(args.dest.glob("*.whl")):
        if normalise(wheel.name.split("-")[0]) in present or wheel.name in held:
            wheel.unlink()
    if args.leave_out:
        print(f"left out the wheels that {args.leave_out} holds: install those first")
    wheels = sorted(args.dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
