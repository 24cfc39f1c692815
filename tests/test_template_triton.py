"""The template's Triton route: each variant passes its README's commands; the spill check fails.

The machinery (render, the torch-only venv, the README's commands) is in
``template_helpers.py``; the default cases are its :data:`SOME` of the Triton
route (``OPGUIDE_TEMPLATE_FULL=1``: every combination).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from template_helpers import (
    ReaderVenv,
    add_operator,
    assert_passed,
    cases,
    check_generated_project,
    render,
    run,
    tv,
)


@pytest.mark.parametrize("route, abi, kind, op_name, wheel, wheel_venv", cases("triton"))
def test_generated_project_passes_its_readme_commands(
    tmp_path, base_venv, route, abi, kind, op_name, wheel, wheel_venv
):
    check_generated_project(tmp_path, base_venv, route, abi, kind, op_name, wheel, wheel_venv)


def test_triton_target_check_fails_on_a_spill(tmp_path):
    """The Triton check exits non-zero, naming the kernel, when a kernel spills.

    The row-reduction project's launch code spreads a block of 4096 columns
    over 16 warps; with 4, the backward kernel's float64 launch holds more
    than sm_90's 255 registers a thread and spills. The check runs the
    generated script as the README does, on sm_90 and that kernel only,
    before and after the edit.
    """
    pytest.importorskip("triton", reason="the Triton check needs triton")
    project = render(tmp_path / "tpl_spill", package="tpl_spill", op_name="scaled_norm",
                     route="triton", kind="rowwise")  # fmt: skip
    command = [sys.executable, "tools/check_triton_targets.py", "--target", "sm_90"]
    command += ["--kernel", "_backward_kernel"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    fits = run(command, project, env=env)
    print(fits.stdout)
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert "1 ok, 0 failed" in fits.stdout, fits.stdout
    kernels = project / "src" / "tpl_spill" / "triton_scaled_norm.py"
    source = kernels.read_text()
    rule = "return min(max(block // 256, 1), 16)"
    assert rule in source
    kernels.write_text(source.replace(rule, "return 4"))
    spills = run(command, project, env=env)
    print(spills.stdout)
    assert spills.returncode == 1, spills.stdout + spills.stderr
    failed = [line for line in spills.stdout.splitlines() if "FAILED" in line]
    assert failed, spills.stdout
    assert failed[0].startswith("triton_scaled_norm._backward_kernel"), failed[0]
    assert "sm_90" in failed[0], failed[0]
    assert re.search(r"float64 \S+ .*: spills \d+ B", failed[0]), failed[0]
    assert "0 ok, 1 failed" in spills.stdout, spills.stdout


def test_readme_installs_from_offline_wheels_without_an_index(tmp_path, base_venv):
    """The README's folder of wheels: downloaded with network, then installed with ``--no-index``.

    The download names the target's Python version and processor, the values
    that the README's one-line command prints on the target (run here in the
    project's venv, whose machine plays the target), and it names setuptools
    (pip builds the package in an isolated environment, from that folder too)
    and the test dependencies of the project's ``pyproject.toml`` (checked
    here); torch in the torch-only venv is a CPU build, without Triton, so
    ``triton`` is added as the README says. The install reads
    ``offline_wheels/`` only, and the project's tests then run, in Triton's
    interpreter: the scatter kind with the three written tensors of the GPU
    record's variant.
    """
    from template_helpers import ReaderVenv

    # The scatter variant the GPU record runs: three written tensors.
    written = tv.SCATTER_WRITTEN[("triton", "classic")]
    project = render(tmp_path / "tpl_offline", package="tpl_offline", route="triton",
                     kind="scatter", written=written)  # fmt: skip
    venv = ReaderVenv(base_venv, project)
    download = venv.readme("wheelhouse-command").strip()
    pyproject = (project / "pyproject.toml").read_text()
    test_extras = re.search(r"^test = \[(.*)\]$", pyproject, re.M)[1]
    for requirement in re.findall(r'"([^"]+)"', test_extras):
        assert requirement in download, f"{requirement} is not in the download"
    readme = (project / "README.md").read_text()
    values = venv.shell(re.search(r'`(python -c "import platform, sys;[^`]*)`', readme)[1])
    assert values.returncode == 0, values.stdout + values.stderr
    for assignment in values.stdout.split():  # PYTHON_VERSION=3.12, ARCH=x86_64
        name = assignment.split("=")[0]
        download, replaced = re.subn(rf"^{name}=\S+", assignment, download, flags=re.M)
        assert replaced == 1, f"the download sets no {name}"
    proc = venv.shell(download + " triton")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted((project / "offline_wheels").glob("triton-*.whl")), "triton was not downloaded"
    offline = venv.readme("offline-install-command").strip().splitlines()
    assert offline[-1].split("#")[0].strip() == "python -m pytest", offline
    assert all("--no-index --find-links offline_wheels" in line for line in offline[:-1]), offline
    # No index to reach even if a line forgot --no-index, and no other
    # folder of wheels than offline_wheels/.
    venv.env["PIP_INDEX_URL"] = "http://127.0.0.1:9/simple"
    venv.env.pop("PIP_FIND_LINKS", None)
    proc = venv.shell("\n".join(offline[:-1]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = venv.shell(offline[-1] + " -p no:cacheprovider")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert re.search(r"\d+ passed", tests.stdout.strip().splitlines()[-1]), tests.stdout


def test_aot_project_compiles_its_kernels_and_passes_its_readme_commands(tmp_path, base_venv):
    """The Triton route with its kernels compiled ahead of time (``triton_aot``), as README says.

    A scatter project, with an elementwise operator added as its README says:
    the README's build tools, then its aot-command, which compiles every
    launch of both operators' ``aot_launches()`` for sm_80, sm_90 and gfx942
    on this GPU-less machine; its Triton check, which checks both operators'
    kernels; then its tests (the table's, and the operators'
    in Triton's interpreter, where each launch falls back to the JIT and
    says so). Where a CUDA toolkit is found the launcher is built against its
    runtime. The README's wheel holds the table, every image and the launcher.
    Where HIP's headers are, the launcher's ROCm branch compiles too.
    """
    pytest.importorskip("triton", reason="the build compiles Triton kernels")
    package = "tpl_triton_aot"
    answers = tv.answers("triton", "classic", "scatter", False, package, triton_aot=True)
    project = render(tmp_path / package, **answers)
    add_operator(project, package, "elementwise")
    venv = ReaderVenv(base_venv, project)
    tools = venv.readme("install-command").strip().splitlines()[0]
    assert tools.startswith("pip install setuptools wheel"), tools
    proc = venv.shell(tools + "\n" + venv.readme("aot-command"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kernels = project / "src" / package / "_aot_kernels"
    table = json.loads((kernels / "table.json").read_text())
    assert table["targets"] == ["sm_80", "sm_90", "gfx942"], table["targets"]
    modules = {name.split(".")[0] for name in table["kernels"]}
    assert modules == {"triton_store_kv", "triton_silu_mul"}, modules
    images = sorted(p.relative_to(kernels).as_posix() for p in kernels.rglob("*.bin"))
    assert images == sorted(a["file"] for a in table["artifacts"])
    print(f"{len(images)} kernels compiled for {', '.join(table['targets'])}")
    # The README's Triton check covers the added operator's kernels too.
    proc = venv.shell(venv.readme("triton-targets-command").strip() + " --target sm_90")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = set(re.findall(r"^(triton_\w+)\.\w+ +sm_90 .* ok$", proc.stdout, re.M))
    assert checked == {"triton_store_kv", "triton_silu_mul"}, proc.stdout
    probe = f"from {package} import _aot_launcher; print(_aot_launcher.can_launch())"
    proc = venv.shell(f'python -c "import torch; {probe}"')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    toolkit = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    if os.path.exists(os.path.join(toolkit, "include", "cuda_runtime.h")):
        assert proc.stdout.strip() == "True", "the launcher was built without CUDA's runtime"
    tests = venv.test("-rs")
    print(tests.stdout[-3000:])
    summary = assert_passed(tests)
    skipped = [line for line in tests.stdout.splitlines() if line.startswith("SKIPPED")]
    assert not [line for line in skipped if "test_triton_aot.py" in line], skipped
    print(summary)
    proc = venv.shell(venv.readme("wheel-command"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = sorted((project / "dist").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert f"{package}/_aot_kernels/table.json" in names, names
    assert sum(n.endswith(".bin") for n in names) == len(images), names
    assert any(n.startswith(f"{package}/_aot_launcher") for n in names), names
    # The launcher's ROCm branch, compiled as setup.py compiles it beside a ROCm
    # build of torch (the host compiler and HIP's headers), where those are.
    hip = [
        d for d in ("/opt/rocm/include", "/usr/include") if Path(d, "hip/hip_runtime.h").exists()
    ]
    compiler = shutil.which("g++") or shutil.which("c++")
    if hip and compiler:
        python = sysconfig.get_paths()["include"]
        command = [compiler, "-c", "-std=c++17", "-DUSE_ROCM", "-D__HIP_PLATFORM_AMD__"]
        command += [
            f"-I{hip[0]}",
            f"-I{python}",
            "csrc/aot_launcher.cpp",
            "-o",
            str(tmp_path / "l.o"),
        ]
        proc = run(command, project)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        print("the launcher's ROCm branch compiles with HIP's headers in", hip[0])
