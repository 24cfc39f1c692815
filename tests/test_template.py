"""The project template (``template/``): every route renders, installs and passes its own tests.

Each case renders the template with copier into a temporary folder, installs
the generated project into this environment without build isolation (its C++
library compiled against this torch), runs the generated project's own test
suite, and, where nvcc is present, its nvcc compile check of the CUDA sources.
Gallery step 18 (``examples_src/18_your_own_operator.py``) does the same for
the C++ route with the elementwise kernel. A last test breaks the kernel
formula of a generated project and checks that the generated tests catch it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template"
copier = pytest.importorskip("copier", reason="copier is not installed (pip install copier)")


def render(dest: Path, **answers: str) -> Path:
    """Renders the template into ``dest`` with ``answers``, the rest by default."""
    copier.run_copy(str(TEMPLATE), str(dest), data=answers, defaults=True, quiet=True)
    return dest


def run(command: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)


class Installed:
    """A generated project installed (editable) into this environment, removed on exit."""

    def __init__(self, project: Path, package: str):
        self.project, self.package = project, package

    def __enter__(self) -> Installed:
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps"]
        proc = run([*pip, "-e", str(self.project)], cwd=self.project)
        assert proc.returncode == 0, (
            f"installing the generated project failed:\n{proc.stdout}{proc.stderr}"
        )
        return self

    def __exit__(self, *exc) -> None:
        run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", self.package], cwd=self.project)


def start_nvcc_check(project: Path) -> subprocess.Popen | None:
    """Starts the generated ``tools/check_cuda_compiles.py`` (it runs beside the tests)."""
    script = project / "tools" / "check_cuda_compiles.py"
    if not script.is_file():
        return None
    return subprocess.Popen(
        [sys.executable, str(script)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


# The C++ route with the elementwise kernel is what gallery step 18 renders,
# builds, tests and compile-checks, as an item of this suite; it is not
# repeated here.
TORCH_2_13 = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)
NEEDS_2_13 = pytest.mark.skipif(
    not TORCH_2_13,
    reason=f"the stable-ABI sources build with torch >= 2.13, not {torch.__version__}",
)
CASES = [
    pytest.param("cpp", "classic", "rowwise", "scaled_norm", id="cpp-rowwise"),
    pytest.param(
        "cpp", "stable", "elementwise", "silu_mul", id="cpp-stable-elementwise", marks=NEEDS_2_13
    ),
    pytest.param(
        "cpp", "stable", "rowwise", "scaled_norm", id="cpp-stable-rowwise", marks=NEEDS_2_13
    ),
    pytest.param("triton", "classic", "elementwise", "silu_mul", id="triton-elementwise"),
    pytest.param("triton", "classic", "rowwise", "scaled_norm", id="triton-rowwise"),
]


@pytest.mark.parametrize("route, abi, kind, op_name", CASES)
def test_generated_project_builds_and_passes_its_tests(tmp_path, route, abi, kind, op_name):
    package = f"tpl_{route}_{abi}_{kind}"
    answers = dict(package=package, op_name=op_name, route=route, kind=kind)
    if route == "cpp":
        answers["abi"] = abi
    project = render(tmp_path / package, **answers)
    expected = {
        "pyproject.toml",
        "README.md",
        f"tests/test_{op_name}.py",
        f"{package}/reference.py",
    }
    if route == "cpp":
        expected |= {"setup.py", f"csrc/{package}.cpp", f"csrc/{op_name}_cpu.cpp"}
        expected |= {f"csrc/{op_name}.cuh", f"csrc/{op_name}_cuda.cu", f"{package}/ops.py"}
    present = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    assert expected <= present, f"missing: {sorted(expected - present)}"
    if route == "triton":
        assert not (project / "csrc").exists() and not (project / "setup.py").exists()
    if route == "cpp":
        # Each ABI's registration macro, and nothing of the other API.
        sources = "".join(p.read_text() for p in (project / "csrc").iterdir())
        if abi == "stable":
            assert (
                "STABLE_TORCH_LIBRARY(" in sources
                and "TORCH_TARGET_VERSION" in (project / "setup.py").read_text()
            )
            assert "#include <ATen/" not in sources and "at::Tensor" not in sources
        else:
            assert "TORCH_LIBRARY(" in sources and "STABLE_TORCH_LIBRARY" not in sources

    with Installed(project, package):
        nvcc = start_nvcc_check(project)
        tests = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project)
        print(tests.stdout[-3000:])
        assert tests.returncode == 0, f"the generated tests failed:\n{tests.stdout}{tests.stderr}"
        summary = tests.stdout.strip().splitlines()[-1]
        assert re.search(r"\d+ passed", summary) and "failed" not in summary, summary
        if nvcc is not None:
            output, _ = nvcc.communicate(timeout=900)
            print(output)
            assert nvcc.returncode == 0, f"the generated nvcc check failed:\n{output}"
            if not output.startswith("SKIPPED"):
                assert f"csrc/{op_name}_cuda.cu: compiled" in output
        if abi == "stable" and shutil.which("nm"):
            # The built library calls torch only through its C shim.
            library = next((project / package).glob("_C*.so"))
            check_abi = ROOT / "stable" / "tools" / "check_abi.py"
            proc = run([sys.executable, str(check_abi), str(library)], cwd=project)
            print(proc.stdout)
            assert proc.returncode == 0, proc.stdout + proc.stderr


def test_generated_tests_catch_a_wrong_formula(tmp_path):
    """Breaks the CPU kernel's formula of a generated project: its tests must fail."""
    package = "tpl_broken"
    project = render(tmp_path / package, package=package, op_name="silu_mul", route="cpp")
    kernel = project / "csrc" / "silu_mul_cpu.cpp"
    source = kernel.read_text()
    right = "out[i] = static_cast<scalar_t>(v * sigmoid * static_cast<acc_t>(gate[i]));"
    assert right in source
    kernel.write_text(source.replace(right, "out[i] = static_cast<scalar_t>(v * sigmoid);"))
    with Installed(project, package):
        tests = run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cpp"],
            cwd=project,
        )
    assert tests.returncode == 1, tests.stdout + tests.stderr
    failed = set(re.findall(r"FAILED \S+::(\w+)\[", tests.stdout))
    assert "test_matches_reference" in failed, tests.stdout[-3000:]


def test_template_rejects_a_bad_package_name(tmp_path):
    with pytest.raises(Exception, match="lower case"):
        render(tmp_path / "bad", package="My-Lib")
    assert not (tmp_path / "bad" / "pyproject.toml").exists()


def test_copier_command_line_renders_the_project(tmp_path):
    """The one documented command, as a reader types it (answers given as --data)."""
    beside_python = Path(sys.executable).with_name("copier")
    copier_cli = str(beside_python) if beside_python.exists() else shutil.which("copier")
    if copier_cli is None:
        pytest.skip("the copier command is neither beside this Python nor on PATH")
    command = [copier_cli, "copy", "--defaults", "--data", "package=mylib"]
    command += ["--data", "op_name=silu_mul", str(TEMPLATE), "out"]
    proc = run(command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answers = (tmp_path / "out" / ".copier-answers.yml").read_text()
    assert "op_name: silu_mul" in answers and "route: cpp" in answers
