"""The Triton kernels compiled ahead of time, for a ``setup.py`` that embeds them.

A build runs :mod:`opguide.triton.aot` before opguide's own extension
exists, and ``import opguide`` loads that extension: :func:`compile_table`
runs the module in a child process that imports it through stand-in packages
which only name the source folders. Two builds use it: opguide's
(``setup.py``) and the stable-ABI library's (``stable/setup.py``), which
compiles only the inference forward.

This file imports nothing but the standard library, so that a ``setup.py``
can load it by its path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence

#: The repository's root: the folder that holds ``opguide/``.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def arch_targets(arch_list: str, rocm: bool = False) -> list[str]:
    """Triton's target names for torch's architecture list.

    ``"8.0;9.0+PTX"`` gives ``sm_80, sm_90`` (``"9.0a"`` runs on the GPUs of
    ``"9.0"``); on ROCm ``"gfx90a;gfx942:xnack-"`` gives ``gfx90a, gfx942``.
    Spaces separate as semicolons do; each name once, in order.
    """
    archs = [a for a in arch_list.replace(" ", ";").split(";") if a]
    if rocm:
        names = [a.split(":")[0] for a in archs]
    else:
        names = ["sm_" + a.split("+")[0].rstrip("af").replace(".", "") for a in archs]
    return list(dict.fromkeys(names))


def targets(rocm: bool = False, visible: Callable[[], list[str]] = list) -> tuple[list[str], bool]:
    """The targets a build compiles the kernels for, and whether they were named.

    ``OPGUIDE_TRITON_AOT`` names them (``"sm_90,gfx942"``; ``"0"``: none);
    unset, they are those of torch's architecture list
    (``PYTORCH_ROCM_ARCH`` on ROCm, else ``TORCH_CUDA_ARCH_LIST``, through
    :func:`arch_targets`); with no list, those of the visible GPUs.

    Args:
        rocm: the build is for AMD GPUs (torch's ROCm build).
        visible: returns the visible GPUs' target names (``setup.py`` asks
            torch); called only when no list is set (default: none).

    Returns:
        The target names, each once, and True when ``OPGUIDE_TRITON_AOT`` named them.
    """
    named = os.environ.get("OPGUIDE_TRITON_AOT", "").strip()
    if named:
        names = [] if named == "0" else [t.strip() for t in named.split(",") if t.strip()]
        return list(dict.fromkeys(names)), True
    variable = "PYTORCH_ROCM_ARCH" if rocm else "TORCH_CUDA_ARCH_LIST"
    archs = arch_targets(os.environ.get(variable, ""), rocm) or visible()
    return list(dict.fromkeys(archs)), False


def compile_table(
    targets: Sequence[str], out: str, args: Sequence[str] = (), skip_unknown=True, log=print
) -> str:
    """Compiles the kernels for ``targets`` into ``out``; returns the table's C++ file.

    Targets without a device model in :mod:`opguide.triton.aot` are left
    out, which it says (with ``skip_unknown``; without, they are an error).
    Without an importable ``triton``, and on Windows (the table's
    ``.incbin`` needs GCC), the table is empty, and this says why.
    ``MAX_JOBS``, when set, is the number of compiling processes.

    Args:
        targets: Triton target names (``sm_90``, ``gfx942``).
        out: the output folder (images, ``manifest.json``, the table).
        args: more arguments for ``python -m opguide.triton.aot``
            (``--inference``).
        skip_unknown: leave out the targets without a device model.
        log: where the reasons for an empty table go.

    Raises:
        SystemExit: the compile failed (its output is above).
    """
    targets = list(targets)
    try:
        import triton  # noqa: F401
    except Exception as error:  # not installed, or does not load: the JIT route is off too
        log(f"setup.py: no Triton kernels compiled ahead of time: {error}")
        targets = []
    if targets and os.name == "nt":
        log("setup.py: no Triton kernels compiled ahead of time: the table's .incbin needs GCC")
        targets = []
    packages = os.path.join(out, "packages")
    # A stand-in for each package of opguide (its folders that hold an
    # __init__.py): its path is the stand-in's folder, for the stand-ins of
    # its subpackages, then the source folder.
    source = os.path.join(ROOT, "opguide")
    for folder, _, files in os.walk(source):
        if "__init__.py" not in files or "__pycache__" in folder:
            continue
        package = os.path.join(packages, "opguide", os.path.relpath(folder, source))
        os.makedirs(package, exist_ok=True)
        with open(os.path.join(package, "__init__.py"), "w") as f:
            f.write(f"__path__ = {[os.path.normpath(package), folder]!r}\n")
    command = [sys.executable, "-m", "opguide.triton.aot", "--targets", ",".join(targets)]
    command += ["--out", out, *args] + (["--skip-unknown"] if skip_unknown else [])
    command += ["--jobs", os.environ["MAX_JOBS"]] if os.environ.get("MAX_JOBS") else []
    path = os.pathsep.join(p for p in (packages, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "TRITON_INTERPRET": "0"}
    # Triton's default (fused multiply-add on), named: Triton 3.9 warns when it is unset.
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if subprocess.run(command, env=env, cwd=packages).returncode != 0:
        raise SystemExit("setup.py: compiling the Triton kernels ahead of time failed")
    return os.path.join(out, "triton_aot_artifacts.cpp")
