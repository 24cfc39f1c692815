"""Each route's manifest (``manifests/<route>.txt``) is exactly what a project of its own needs.

* :func:`test_manifest_lists_what_its_files_need`: every ``#include "..."``
  of a listed C++/CUDA file and every module-level import of a listed or
  written Python module is listed, and every listed header and module is
  reached (:func:`guidekit.manifests.problems` names each file that is not);
* :func:`test_a_file_left_out_is_named`: the same check, on a manifest with
  one header and one module taken out, names both;
* :func:`test_a_project_without_a_listed_file_fails_to_compile`: the
  preprocessor, run in a project copied from a manifest without one header,
  stops on it (and passes on the whole copy);
* :func:`test_route_builds_and_runs`: exactly the manifest's files copied
  into an empty folder, its ``write`` files written (cut from this
  repository's, :func:`guidekit.manifests.cut`), built in a virtual
  environment of its own that holds torch and nothing else (a copy of the
  torch-only venv of ``tests/test_template.py``; Triton and NumPy from pip;
  on the GPU machine a venv over its own torch, :func:`project_venv`),
  and checked against the reference formula: the C++ routes built with
  ``USE_CUDA=0`` (on a GPU machine with nvcc, with CUDA, and checked on the
  GPU too), their ``.cu`` files' includes resolved by ``nvcc -M`` from the copy
  when nvcc is present (``python -m guidekit.compile_checks`` compiles them);
  the Triton routes run in Triton's interpreter without a GPU. Each route's
  check is ``manifests/<route>.check.py``; the routes of operators other than
  the first of the registry build only with ``OPGUIDE_MANIFESTS_FULL=1``.

Measured with ``--durations=0`` on 2 cores shared with other builds (load
average 11-13), torch 2.13.0 CPU, pip's cache warm: the torch-only venv
200-220 s, the C++ RMSNorm route 600 s and the fused one 460 s (five
translation units each, ``-O3``), each Triton route 170-210 s (Triton from
pip's cache, the check in the interpreter), the compile-fails check 11 s, the
manifest checks under 0.2 s each. On idle cores the venv takes 21-28 s
(``tests/test_template.py``'s measure).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest
import torch
from template_helpers import clone_venv

from guidekit import manifests
from guidekit.compile_checks import find_nvcc
from opguide import registry

ROOT = Path(__file__).resolve().parent.parent


ROUTES = list(manifests.ROUTES)
# The routes of the running example (the registry's first operator) are
# built by default; the other operators' routes share most of their files with
# those and cost as much again to build, so their manifests are always checked
# (test_manifest_lists_what_its_files_need) and their builds run only with
# OPGUIDE_MANIFESTS_FULL=1, to keep the suite's time.
FULL = os.environ.get("OPGUIDE_MANIFESTS_FULL") == "1"
FIRST = registry.OPERATORS[0].manifests()
BUILT_ROUTES = [
    r
    if FULL or r in FIRST
    else pytest.param(
        r, marks=pytest.mark.skip(reason="set OPGUIDE_MANIFESTS_FULL=1 to build this route too")
    )
    for r in ROUTES
]


def make_project(manifest: manifests.Manifest, dest: Path) -> Path:
    """Copies the manifest's files into ``dest`` and writes its ``write`` files."""
    for path in manifest.copy:
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, dest / path)
    for path in manifest.write:
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_text(manifests.cut(manifest, path))
    return dest


def venv_env(venv: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA", "TRITON_", "PYTEST_"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def shell(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 900):
    proc = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return proc.returncode, proc.stdout + proc.stderr


def torch_include_flags() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return ["-I" + p for p in include_paths()]


@pytest.mark.parametrize("route", ROUTES)
def test_manifest_lists_what_its_files_need(route):
    found = manifests.problems(manifests.read(route))
    assert not found, f"manifests/{route}.txt:\n" + "\n".join(found)


def test_a_file_left_out_is_named():
    whole = manifests.read("cpp_rms_norm")
    header, module = "csrc/common/device.cuh", "opguide/backends.py"
    short = replace(whole, copy=tuple(p for p in whole.copy if p not in (header, module)))
    found = "\n".join(manifests.problems(short))
    assert f"needs {header}, which the manifest does not list" in found, found
    assert f"needs {module}, which the manifest does not list" in found, found
    extra = replace(whole, copy=(*whole.copy, "csrc/fused_add_rms_norm/fused_add_rms_norm.h"))
    assert "fused_add_rms_norm.h is listed but no listed file" in "\n".join(
        manifests.problems(extra)
    )


def test_a_project_without_a_listed_file_fails_to_compile(tmp_path):
    whole = manifests.read("cpp_rms_norm")
    source, header = "csrc/rms_norm/rms_norm_cpu.cpp", "csrc/rms_norm/rms_norm_cpu.h"
    # C++20: torch 2.15's ATen.h refuses an older standard (#error).
    command = [os.environ.get("CXX", "c++"), "-std=c++20", "-E", "-o", os.devnull]
    command += ["-Icsrc", *torch_include_flags(), source]
    full = make_project(whole, tmp_path / "full")
    status, output = shell(command, full, dict(os.environ))
    assert status == 0, output[-3000:]
    short = replace(whole, copy=tuple(p for p in whole.copy if p != header))
    project = make_project(short, tmp_path / "short")
    status, output = shell(command, project, dict(os.environ))
    assert status != 0 and Path(header).name in output, output[-3000:]


def cuda_includes_resolve(project: Path, manifest: manifests.Manifest) -> list[str]:
    """``nvcc -M`` of each copied ``.cu`` (every include found), or why it failed."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    failed = []
    for source in (p for p in manifest.copy if p.endswith(".cu")):
        command = [find_nvcc(), "-M", source, "-o", os.devnull, "-arch=sm_90", "-std=c++20"]
        command += [*COMMON_NVCC_FLAGS, "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", "-Icsrc"]
        command += torch_include_flags()
        status, output = shell(command, project, dict(os.environ))
        if status != 0:
            failed.append(f"nvcc -M {source}:\n{output[-3000:]}")
    return failed


def project_venv(request, dest: Path) -> Path:
    """The copied project's virtual environment: a copy of the torch-only venv.

    With ``OPGUIDE_SYSTEM_TORCH=1`` (``tools/gpu_suite.sh``: a GPU machine with
    its own CUDA build of torch and no package index) a new venv whose
    ``sys.path`` also holds this interpreter's site-packages (a ``.pth`` file),
    so that the copy builds against that torch and finds its Triton.
    """
    if os.environ.get("OPGUIDE_SYSTEM_TORCH") == "1":
        made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)],
                              capture_output=True, text=True)  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        site = next(dest.glob("lib/python*/site-packages"))
        ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        (site / "suite_packages.pth").write_text("\n".join(ours) + "\n")
        return dest
    return clone_venv(request.getfixturevalue("base_venv"), dest)


@pytest.mark.parametrize("route", BUILT_ROUTES)
def test_route_builds_and_runs(route, request, tmp_path):
    manifest = manifests.read(route)
    project = make_project(manifest, tmp_path / "project")
    venv = project_venv(request, tmp_path / "venv")
    env = venv_env(venv)
    python = str(venv / "bin" / "python")
    gpu = torch.cuda.is_available()
    if route.startswith("cpp"):
        if find_nvcc() is not None:
            failed = cuda_includes_resolve(project, manifest)
            assert not failed, "\n".join(failed)
        env["MAX_JOBS"] = "2"
        if not (gpu and find_nvcc()):
            env["USE_CUDA"] = "0"
        build = [python, "setup.py", "-q", "build_ext", "--inplace"]
        status, output = shell(build, project, env)
        assert status == 0, f"the copied project does not build:\n{output[-6000:]}"
        devices = ["cpu", "cuda"] if gpu and find_nvcc() else ["cpu"]
        args = devices
    else:
        # Triton and the NumPy its interpreter needs, the versions this suite runs.
        wanted = [f"triton=={metadata.version('triton')}", f"numpy=={metadata.version('numpy')}"]
        status, output = shell([python, "-m", "pip", "install", "-q", *wanted], project, env)
        assert status == 0, output[-3000:]
        if not gpu:
            env["TRITON_INTERPRET"] = "1"
        args = ["cuda" if gpu else "cpu"]
    # Run from the project, as its reader would: the copy's package is the one imported.
    check = shutil.copy(ROOT / "manifests" / f"{route}.check.py", project)
    status, output = shell([python, Path(check).name, *args], project, env)
    assert status == 0, f"the copied project fails its check:\n{output[-6000:]}"
    assert "matches the reference" in output, output
    assert f"from {project}" in output, f"the check did not import the copied project: {output}"
