"""What the template's test modules share: render a variant, run its README's commands.

Each case renders the template with copier and then does what the generated
README tells its reader, in a virtual environment of the project's own that
holds torch and nothing else ("with torch already installed"): it runs the
README's install command and its test command as written, read from the
README between their ``<!-- install-command -->`` / ``<!-- test-command -->``
markers (as ``.ci/run`` reads this repository's README), so that README and
test cannot drift. Dependencies come from the project's ``pyproject.toml``
through pip, never from this environment. On the C++ route the README's nvcc
check runs beside the tests, and in every project with Triton kernels its Triton check
(``tools/check_triton_targets.py``: each Triton kernel compiled for four AMD
and three NVIDIA GPUs; no spill, none over a GPU's budget). After them, where
the case asks, the README's wheel command: the wheel's name (its tags) must be
the one the README gives; on the C++ route the repair bundles nothing, and
each library of torch's that the extension needs is one the README's
``--exclude`` leaves out; and the README's wheel-test command in a second copy
of the torch-only venv: the wheel installed with its dependencies from pip,
its tests run from an empty folder against the installed package (whose
``__file__`` must lie in that venv).

The virtual environments. Installing torch into a fresh venv costs tens of
seconds (unpacking the wheel); a venv made with ``--system-site-packages``
would let this environment's packages leak in and hide a missing dependency.
So one venv holding only torch and its requirements is made per run, shared
by the pytest-xdist workers (:func:`torch_only_venv`, which checks what
``pip`` installed against torch's own metadata there: a CUDA build of torch
brings ``nvidia-*`` libraries and Triton), and each case copies it, its files
hard-linked, and points the copied ``bin/`` scripts at the copy
(:func:`clone_venv`).

``OPGUIDE_TEMPLATE_FULL=1`` runs every combination (:data:`EVERY`) instead of
:data:`SOME`, each with its wheel and the wheel's tests in a fresh venv.
"""

from __future__ import annotations

import fnmatch
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

copier = pytest.importorskip("copier", reason="copier is not installed (pip install copier)")

from guidekit import template_variants as tv  # noqa: E402  (after the skip)
from guidekit.template_variants import EVERY, OP_NAMES, render  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TORCH_RELEASE = torch.__version__.split("+")[0]
FULL = os.environ.get("OPGUIDE_TEMPLATE_FULL") == "1"


def run(command: list[str], cwd: Path, timeout: int = 900, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def installed(venv: Path) -> set[str]:
    """The distributions in ``venv``, by normalised name."""
    found = metadata.distributions(path=[str(site_packages(venv))])
    return {normalise(d.metadata["Name"]) for d in found}


def normalise(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_closure(venv: Path) -> set[str]:
    """torch in ``venv`` and every distribution it requires there, by normalised name.

    Read from the metadata of the distributions installed in ``venv``, each
    requirement's marker evaluated (this interpreter made the venv, so its
    Python version and platform are the venv's). torch's own extras are left
    out; an extra that a requirement asks for is followed: a CUDA build of
    torch brings its ``nvidia-*`` libraries and Triton, directly or, from
    torch 2.15, through ``cuda-toolkit[cublas,cudart,...]``; a CPU build brings
    none of them.
    """
    from packaging.requirements import Requirement

    dists = {
        normalise(d.metadata["Name"]): d
        for d in metadata.distributions(path=[str(site_packages(venv))])
    }
    names, seen, todo = set(), set(), [("torch", frozenset())]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(name)
        for line in dists[name].requires or [] if name in dists else []:
            req = Requirement(line)
            wanted = req.marker is None or any(
                req.marker.evaluate({"extra": extra}) for extra in ("", *sorted(extras))
            )
            if wanted:
                todo.append((normalise(req.name), frozenset(req.extras)))
    return names


def assert_only_torch(venv: Path) -> None:
    """Fails when ``venv`` holds a distribution that torch there does not require (pip aside)."""
    extra = installed(venv) - torch_closure(venv) - {"pip", "setuptools"}
    assert not extra, f"the torch-only venv holds more than torch: {sorted(extra)}"


VENVS: dict[str, Path] = {}


def torch_only_venv(tmp_path_factory) -> Path:
    """A virtual environment holding torch and its requirements only, made once per run.

    The pytest-xdist workers share it: the first to ask makes it in the run's
    base temporary folder, under a file lock, and the others wait for it.
    """
    if "torch-only" not in VENVS:
        from filelock import FileLock  # a requirement of torch

        root = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):
            root = root.parent  # a worker's folder is <run's folder>/popen-gw<N>
        base, made = root / "venvs" / "torch-only", root / "venvs" / "torch-only.made"
        base.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(root / "venvs" / "torch-only.lock")):
            if not made.exists():
                shutil.rmtree(base, ignore_errors=True)  # a run stopped half-way
                proc = run([sys.executable, "-m", "venv", str(base)], cwd=base.parent)
                assert proc.returncode == 0, proc.stdout + proc.stderr
                pip = [str(base / "bin" / "python"), "-m", "pip", "install", "-q"]
                proc = run([*pip, f"torch=={TORCH_RELEASE}"], cwd=base.parent)
                assert proc.returncode == 0, proc.stdout + proc.stderr
                assert_only_torch(base)
                made.touch()
        VENVS["torch-only"] = base
    return VENVS["torch-only"]


def _link_or_copy(source: str, dest: str) -> None:
    """A hard link where the file system allows one (no copy of torch's gigabyte), else a copy."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def clone_venv(base: Path, dest: Path) -> Path:
    """Copies ``base`` to ``dest``, files hard-linked; its scripts then name the copy's python.

    pip never writes into an installed file: it installs new files and
    removes old ones, and Python replaces a ``.pyc`` whole, so the copy's
    changes stay in the copy. ``bin/pip`` and the other scripts start with
    ``#!<base>/bin/python``; left so, ``pip install`` in the copy would
    install into ``base``: each is replaced by a new file in the copy.
    """
    shutil.copytree(base, dest, symlinks=True, copy_function=_link_or_copy)
    for script in (dest / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if str(base).encode() in data:
                mode = script.stat().st_mode
                script.unlink()  # a new file: the base's script is the same inode
                script.write_bytes(data.replace(str(base).encode(), str(dest).encode()))
                script.chmod(mode)
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


#: The variants rendered without the C++ route's Triton variant (the
#: ``triton`` question answered false), in every run: the C++ classic scatter
#: one, whose Triton operator the C++ stable scatter case builds and tests.
WITHOUT_TRITON = {("cpp", "classic", "scatter", False)}

#: The variants that get a second operator, of this kind, with the README's
#: add-operator command (the template's ``add_to_project``), before its
#: commands run: a project of two operators, one of them with an output sized
#: by the data, built and tested whole.
ADDED = {
    ("cpp", "classic", "indexed", True): "grouped",
    ("python", "classic", "indexed", True): "grouped",
}


def case(route: str, abi: str, kind: str, inplace: bool, wheel: bool = True, wheel_venv=True):
    op_name = OP_NAMES[kind] + ("_" if inplace else "")
    label = f"{route}{'-stable' if abi == 'stable' else ''}-{kind}{'-inplace' if inplace else ''}"
    label += "-no-triton" if (route, abi, kind, inplace) in WITHOUT_TRITON else ""
    added = ADDED.get((route, abi, kind, inplace))
    label += f"-plus-{added}" if added else ""
    return pytest.param(route, abi, kind, op_name, wheel, wheel_venv, id=label)


# The default cases: each route, kind and in-place choice at least once, one
# build per route, and the scatter kind (an operator that only writes) once
# per route but Triton's, with neither wheel (its packaging is the other
# kinds'): the C++ stable project runs its Triton operator's tests and Triton
# check, the C++ classic one is rendered without the Triton variant
# (WITHOUT_TRITON), and test_template_triton.py installs and tests its
# Triton-route project from a folder of wheels without a package index. The
# pure-Python route once with a wheel. Gallery step 18 builds and tests the
# C++ classic and stable elementwise functional ones,
# test_generated_tests_catch_a_broken_kernel the C++ classic elementwise
# in-place one; each C++ project but WITHOUT_TRITON's also carries the Triton
# operator of its kind, so the Triton route's own case checks its packaging. The last two
# fields: whether the README's wheel command runs (on the classic ABI it is a
# second build), and whether the wheel's tests run in a fresh venv (once per
# route: C++ and Triton).
SOME = [
    ("cpp", "classic", "indexed", True, False, False),
    ("cpp", "stable", "rowwise", True, True, True),
    ("triton", "classic", "elementwise", False, True, True),
    ("cpp", "classic", "scatter", False, False, False),
    ("cpp", "stable", "scatter", False, False, False),
    ("python", "classic", "indexed", True, True, False),
    ("python", "classic", "scatter", False, False, False),
]


def cases(route: str, abi: str = "classic") -> list:
    """The cases of ``route`` (``cpp``, ``triton`` or ``python``) and ``abi``; all when FULL."""
    chosen = EVERY if FULL else SOME
    return [case(*c) for c in chosen if c[:2] == (route, abi)]


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
    # The README names the wheel up to its platform tag, which comes from the
    # machine that builds it: the oldest policy its symbol versions allow.
    promised = re.search(r"gives `wheelhouse/(\S+)-<tag>\.whl`", readme)[1]
    assert repaired[0].name.startswith(f"{promised}-"), f"{repaired[0].name}, README: {promised}"
    assert "--plat" not in command, "the README's repair takes auditwheel's tag (--plat auto)"
    allowed = wheels.platform_constraint(built[0])
    assert allowed in wheels.wheel_tags(repaired[0]).platform.split("."), allowed
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


def check_generated_project(
    tmp_path: Path, base_venv: Path, route: str, abi: str, kind: str, op_name: str,
    wheel: bool, wheel_venv: bool,
) -> None:  # fmt: skip
    """Renders one variant and runs its README's commands in a copy of ``base_venv``."""
    inplace = op_name.endswith("_")
    functional = op_name.rstrip("_")
    package = f"tpl_{route}_{abi}_{kind}{'_inplace' if inplace else ''}"
    assert op_name == tv.op_name(kind, inplace), op_name
    triton = (route, abi, kind, inplace) not in WITHOUT_TRITON and kind != "grouped"
    project = render(tmp_path / package, **tv.answers(route, abi, kind, inplace, package, triton))
    added = ADDED.get((route, abi, kind, inplace))
    expected = {"pyproject.toml", "README.md", f"tests/test_{functional}.py"}
    expected |= {f"src/{package}/reference.py", ".github/workflows/ci.yml"}
    if route == "python":
        expected |= {f"src/{package}/ops.py"}
    elif triton:
        expected |= {"tools/check_triton_targets.py", f"src/{package}/triton_{functional}.py"}
        expected |= {"tests/conftest.py"}
    if route == "cpp":
        expected |= {"setup.py", f"csrc/{package}.cpp", f"csrc/{functional}_cpu.cpp"}
        expected |= {f"csrc/{functional}.cuh", f"csrc/{functional}_cuda.cu"}
        expected |= {f"src/{package}/ops.py"}
    if route == "cpp" and abi == "classic" and inplace:
        expected |= {f"csrc/{functional}_inplace.cpp"}
    if route == "cpp" and abi == "classic" and kind == "scatter":
        expected |= {f"csrc/{functional}_autograd.cpp"}
    if kind != "scatter":
        expected |= {"tests/test_fake_kernels.py"}
    present = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    assert expected <= present, f"missing: {sorted(expected - present)}"
    if route != "cpp":
        assert not (project / "csrc").exists() and not (project / "setup.py").exists()
    if route == "python" or not triton:
        # No Triton: the body is PyTorch operations, or C++ and CUDA kernels alone.
        assert not list(project.rglob("*triton*")), "a Triton file in a project without Triton"
        assert "triton" not in (project / "pyproject.toml").read_text()
        assert not (project / "tests" / "conftest.py").exists(), "it sets TRITON_INTERPRET"
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

    if added is not None:
        add_operator(project, package, added)

    began = time.perf_counter()
    venv = ReaderVenv(base_venv, project)
    print(f"the venv copied: {time.perf_counter() - began:.0f} s")
    venv.install()
    print(f"the README's install: {time.perf_counter() - began:.0f} s")
    # Python run from the folder that holds the project, whose folder has the
    # package's name: the import finds the installed package (src/ layout),
    # not that folder as an empty namespace package.
    proc = venv.shell(f'cd .. && python -c "import {package}; print({package}.__file__)"')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith(f"/src/{package}/__init__.py"), proc.stdout
    nvcc = None
    every_arch = (route, abi, kind) == ("cpp", "classic", "scatter")
    if route == "cpp":
        # The README's nvcc check compiles for every architecture setup.py
        # builds; one case checks that, the others compile for sm_90 alone
        # (the same code, in a third of the time).
        one_arch = "" if every_arch else "TORCH_CUDA_ARCH_LIST=9.0 "
        nvcc = venv.start(one_arch + venv.readme("nvcc-command"))
    triton_targets = None
    if route != "python" and triton:
        triton_targets = venv.start(venv.readme("triton-targets-command"))
    tests = venv.test()
    print(f"the README's tests: {time.perf_counter() - began:.0f} s")
    print(tests.stdout[-3000:])
    summary = assert_passed(tests)
    if inplace:
        assert "test_inplace" in (project / "tests" / f"test_{functional}.py").read_text()
    print(summary)
    if nvcc is not None:
        output, _ = nvcc.communicate(timeout=900)
        print(f"the README's nvcc check: {time.perf_counter() - began:.0f} s")
        print(output)
        assert nvcc.returncode == 0, f"the generated nvcc check failed:\n{output}"
        if not output.startswith("SKIPPED"):
            arches = re.escape("7.5;8.0;9.0+PTX" if every_arch else "9.0")
            compiled = rf"csrc/{functional}_cuda.cu: compiled for {arches}, \d+ warnings?"
            assert re.search(compiled, output), output
    if abi == "stable" and route == "cpp" and shutil.which("nm"):
        # The README's ABI check: the built library calls torch only through
        # its C shim, and no shim function newer than its target torch.
        proc = venv.shell(venv.readme("abi-command"))
        print(proc.stdout)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "shim functions newer than torch 2.11: 0" in proc.stdout, proc.stdout
    # The README's Triton check: every kernel compiled for every GPU, none over budget.
    if triton_targets is not None:
        check_triton_targets(triton_targets, kind)
    if not wheel:
        return
    start = time.perf_counter()
    check_wheel(venv, route)
    print(f"the wheel: {time.perf_counter() - start:.0f} s")
    if wheel_venv:
        start = time.perf_counter()
        check_wheel_in_fresh_venv(base_venv, project, package)
        print(f"the wheel's tests in a fresh venv: {time.perf_counter() - start:.0f} s")


def run_add_operator_command(project: Path, kind: str) -> tuple[str, set[str]]:
    """Runs the README's add-operator command for an operator of ``kind``; checks what it wrote.

    The command runs with this Python's copier. No project file may change, and
    every file written must be named after the new operator.

    Returns:
        The first import line copier's message tells the reader to add (its
        spaces made single), and the files written, relative to ``project``.
    """
    op = tv.OP_NAMES[kind]
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    command = readme_command(project / "README.md", "add-operator-command")
    assert command, "the generated README has no add-operator-command block"
    copier = f"{shlex.quote(sys.executable)} -m copier"
    script = command.replace("TEMPLATE=path/to/opguide/template", f"TEMPLATE={tv.TEMPLATE}")
    script, chosen = re.subn(r"KIND=\S+ OP_NAME=\S+", f"KIND={kind} OP_NAME={op}", script)
    assert chosen == 1, script
    script = re.sub(r"^copier ", copier + " ", script, flags=re.M)
    proc = run(["bash", "-euo", "pipefail", "-c", script], project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    changed = sorted(p.name for p, was in before.items() if p.read_bytes() != was)
    assert not changed, f"adding an operator changed the project's files: {changed}"
    written = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    written -= {p.relative_to(project).as_posix() for p in before}
    assert written and all(op in path for path in written), sorted(written)
    printed = " ".join((proc.stdout + proc.stderr).split())
    found = re.search(r'add "(from \.\S+ import [^"]+)"', printed)
    assert found, printed
    return found[1], written


def add_operator(project: Path, package: str, kind: str) -> None:
    """Adds an operator of ``kind`` to ``project`` as its README says, then joins it to the package.

    The line copier prints is put where it says, in ``__init__.py``; nothing of
    the project's own files but that line changes.
    """
    op = tv.OP_NAMES[kind]
    printed, _ = run_add_operator_command(project, kind)
    init = project / "src" / package / "__init__.py"
    lines = init.read_text().splitlines(keepends=True)
    if printed.startswith("from .triton_"):  # the Triton route: after the first operator's module
        line, first = f"from .triton_{op} import {op}", "from .triton_"
    else:
        line, first = f"from .{op}_ops import {op}  # noqa: E402", "from .ops import"
    assert printed == " ".join(line.split()), printed
    at = next(n for n, text in enumerate(lines) if text.startswith(first))
    lines.insert(at + 1, line + "\n")
    init.write_text("".join(lines).replace("__all__ = [", f'__all__ = ["{op}", ', 1))


def check_triton_targets(triton_targets: subprocess.Popen, kind: str) -> None:
    """Waits for the README's Triton check: it must pass, every kernel on every target."""
    waited = time.perf_counter()
    output, _ = triton_targets.communicate(timeout=900)
    print(f"waited {time.perf_counter() - waited:.0f} s for the Triton check")
    print(output[-3000:])
    assert triton_targets.returncode == 0, f"the Triton target check failed:\n{output}"
    pairs = (1 if kind in ("indexed", "scatter") else 2) * TARGETS
    found = re.search(rf"^{pairs} kernel x target pairs .*: {pairs} ok, 0 failed", output, re.M)
    assert found, output
