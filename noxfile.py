"""Sessions: ``docs`` builds the site, ``tests`` runs the docs-as-tests suite, ``lint`` runs ruff.

Environment switches:

``OPGUIDE_TORCH``
    The torch requirement installed into the session, default ``torch==2.13.0``
    (e.g. ``OPGUIDE_TORCH="torch==2.11.0"`` or a path to a wheel).
``OPGUIDE_SYSTEM_TORCH=1``
    Use the Python that runs nox and the torch it already has (no virtualenv,
    torch is not installed): for a GPU machine with its own CUDA build of torch.
``OPGUIDE_WHEELHOUSE=DIR``
    Install every Python package from DIR only (``--no-index``): for machines
    with no network.
``OPGUIDE_JOBS``
    How many processes run pytest items (``tests``) and gallery scripts
    (``docs``) at once, default 2 (1 on a one-core machine). ``tests`` hands out
    whole files (``--dist loadfile``), so a notebook's cells stay in order.
    With a process per core, Inductor compiles in the process that asks
    (``TORCHINDUCTOR_COMPILE_THREADS=1``), not in a pool of its own.

``docs`` and ``tests`` share one virtual environment, ``.nox/opguide``: torch
is installed and the C++ library compiled once for the two.
Compiled extensions, Triton and Inductor caches are kept under ``build/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import nox

ROOT = pathlib.Path(__file__).resolve().parent
BUILD = ROOT / "build"
TORCH_SPEC = os.environ.get("OPGUIDE_TORCH", "torch==2.13.0")
SYSTEM_TORCH = os.environ.get("OPGUIDE_SYSTEM_TORCH", "") == "1"
WHEELHOUSE = os.environ.get("OPGUIDE_WHEELHOUSE", "")
# With OPGUIDE_SYSTEM_TORCH=1 the sessions run in the interpreter that runs nox.
VENV_BACKEND = "none" if SYSTEM_TORCH else None
# The environment that docs and tests share (nox gives each session its own).
SHARED_VENV = ROOT / ".nox" / "opguide"

JOBS = int(os.environ.get("OPGUIDE_JOBS", min(2, os.cpu_count() or 1)))

nox.options.sessions = ["tests"]
nox.options.reuse_venv = "yes"

CACHE_ENV = {
    # Every cache the guide fills lives in the build tree, so reruns are warm
    # and `rm -rf build` resets everything.
    "TORCH_EXTENSIONS_DIR": str(BUILD / "torch_extensions"),
    "TRITON_CACHE_DIR": str(BUILD / "triton_cache"),
    "TORCHINDUCTOR_CACHE_DIR": str(BUILD / "inductor_cache"),
    "MPLBACKEND": "Agg",
    "PYTHONUNBUFFERED": "1",
}
if JOBS >= (os.cpu_count() or 1):
    # Each core already runs a page or a test: Inductor compiles in the
    # process that asks (its output is the same) instead of first starting a
    # pool of compile workers, each of which imports torch.
    CACHE_ENV["TORCHINDUCTOR_COMPILE_THREADS"] = "1"


def _python(session: nox.Session) -> str:
    """The interpreter the docs and tests sessions run: the shared venv's, made on first use.

    With ``OPGUIDE_SYSTEM_TORCH=1``, the interpreter that runs nox.
    """
    if SYSTEM_TORCH:
        return "python"
    python = SHARED_VENV / "bin" / "python"
    if not python.exists():
        session.run(sys.executable, "-m", "venv", str(SHARED_VENV), external=True)
    session.env["VIRTUAL_ENV"] = str(SHARED_VENV)
    session.env["PATH"] = os.pathsep.join([str(SHARED_VENV / "bin"), os.environ.get("PATH", "")])
    return str(python)


def _pip_index() -> list[str]:
    """pip's options that choose where packages come from: OPGUIDE_WHEELHOUSE alone, if set."""
    return ["--no-index", "--find-links", WHEELHOUSE] if WHEELHOUSE else []


def _pip(session: nox.Session, *args: str, python: str = "python") -> None:
    session.run(python, "-m", "pip", "install", *_pip_index(), *args, external=True)


def _build_fingerprint(session: nox.Session, python: str) -> str:
    """Hashes what the compiled library depends on: sources, build files, torch."""
    digest = hashlib.sha256()
    # The registry names the operators' folders that setup.py compiles.
    inputs = sorted(ROOT.glob("csrc/**/*")) + [ROOT / "setup.py", ROOT / "pyproject.toml"]
    # Part I's project, built beside opguide (FIRST_OPERATOR): what its library is built from.
    inputs += sorted(FIRST_OPERATOR.glob("csrc/*")) + [FIRST_OPERATOR / "setup.py"]
    inputs.append(ROOT / "opguide" / "registry.py")
    inputs += sorted(ROOT.glob("opguide/_C.*"))  # a library rebuilt by another session
    for path in inputs:
        if path.is_file():
            digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    torch_version = session.run(
        python,
        "-c",
        "import torch; print(torch.__version__, torch.version.cuda)",
        silent=True,
        external=True,
    )
    digest.update(str(torch_version).encode())
    for name in ("USE_CUDA", "DEBUG", "TORCH_CUDA_ARCH_LIST"):
        digest.update(f"{name}={os.environ.get(name, '')}".encode())
    return digest.hexdigest()


def _requirements(extra: str) -> list[str]:
    """What ``pip install .[extra]`` installs besides opguide: its requirements, the extra's."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: nox requires tomli there
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # setup.py pins torch to the release it builds against: the one installed.
    return list(project.get("dependencies", [])) + project["optional-dependencies"][extra]


COMPILE_LOG = BUILD / "opguide-compile.log"
#: Part I's project: its pages import it and its tests are in the test command.
FIRST_OPERATOR = ROOT / "first_operator"
FIRST_OPERATOR_LOG = BUILD / "first_operator-install.log"


def _start(
    session: nox.Session, what: str, command: list[str], log: pathlib.Path
) -> subprocess.Popen:
    """Starts ``command`` in the background for ``what``, its output in ``log``."""
    session.log(f"{what}: started in the background (log: {log})")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env={k: v for k, v in {**os.environ, **session.env}.items() if v is not None},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait(session: nox.Session, what: str, process: subprocess.Popen, log: pathlib.Path) -> None:
    """Waits for a process of :func:`_start`; fails the session with its log's end if it failed."""
    if process.poll() is None:
        session.log(f"{what}: waiting for the compile")
    if process.wait() != 0:
        session.error(f"{what}: the compile failed:\n{log.read_text()[-6000:]}")
    session.log(f"{what}: compiled")


def _install(session: nox.Session, extra: str) -> str:
    """Installs torch (unless reused), the build tools, then opguide with ``extra``.

    opguide is installed in editable mode, so the compiled library lands in
    opguide/ next to the Python sources. Its compile runs while pip installs
    the packages of ``extra``. The install is skipped when nothing it depends
    on changed since the last one and that one brought ``extra``'s packages,
    whichever of the two sessions made it; the other session's extra then
    costs only its packages.

    Returns:
        The interpreter to run the session's commands with.
    """
    session.env.update(CACHE_ENV)
    python = _python(session)
    if SYSTEM_TORCH:
        session.run(
            python,
            "-c",
            "import torch; print('using torch', torch.__version__, "
            "'cuda', torch.version.cuda, 'at', torch.__file__)",
            external=True,
        )
    else:
        _pip(session, "-q", TORCH_SPEC, python=python)
    stamp = (BUILD if SYSTEM_TORCH else SHARED_VENV) / "opguide.stamp"
    fingerprint = _build_fingerprint(session, python)
    try:
        done = json.loads(stamp.read_text())
    except (OSError, ValueError):
        done = {}
    built = done.get("fingerprint") == fingerprint
    extras = set(done.get("extras", [])) if built else set()
    if extra in extras:
        session.log("opguide: sources, build files and torch unchanged; reusing opguide/_C")
        return python
    if built:
        # The library is installed and up to date: only the extra's packages.
        session.log(f"opguide: sources, build files and torch unchanged; adding [{extra}]")
        _pip(session, "-q", *_requirements(extra), python=python)
    else:
        _pip(session, "-q", "setuptools>=77", "wheel", "ninja", python=python)
        start = time.perf_counter()
        # The compile (a minute or two on 2 cores) runs while pip installs the
        # extra's packages; the editable install after both then finds every
        # object up to date in build/ (setup.py's BuildInTree) and only links.
        # setup.py build_ext: the objects go to build/temp.*.
        compiling = _start(session, "opguide", [python, "setup.py", "build_ext"], COMPILE_LOG)
        _pip(session, "-q", *_requirements(extra), python=python)
        # Part I's project, as its README installs it: one C++ file, a minute
        # on one core, compiled while opguide's compile keeps the other busy.
        # It starts once the pip above is done: one pip at a time in the venv.
        pip = [python, "-m", "pip", "install", *_pip_index(), "-q"]
        first = _start(
            session,
            "first_operator",
            [*pip, "--no-build-isolation", "--no-deps", "-e", str(FIRST_OPERATOR)],
            FIRST_OPERATOR_LOG,
        )
        _wait(session, "opguide", compiling, COMPILE_LOG)
        _wait(session, "first_operator", first, FIRST_OPERATOR_LOG)
        # No build isolation: the extension is compiled against the torch above.
        _pip(session, "-q", "--no-build-isolation", "--no-deps", "-e", ".", python=python)
        session.log(f"opguide: installed in {time.perf_counter() - start:.0f} s")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    extras.add(extra)
    record = {"fingerprint": _build_fingerprint(session, python), "extras": sorted(extras)}
    stamp.write_text(json.dumps(record))
    return python


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Runs pytest over tests/, the gallery scripts and the notebooks."""
    python = _install(session, "test")
    # Most items wait on a compiler or a child process on one core: two
    # processes take about 40% off the suite on a 2-core machine. Arguments
    # that choose the processes themselves (-n, -p no:xdist) win. Files go
    # out whole and in collection order (conftest.py puts the longest first):
    # by default pytest-xdist hands out the files with the most items first,
    # which leaves the gallery scripts (one item each, minutes each) to last.
    chosen = any(a.startswith(("-n", "--numprocesses", "--dist")) for a in session.posargs)
    chosen = chosen or "no:xdist" in session.posargs
    workers = ["-n", str(JOBS), "--dist", "loadfile", "--no-loadscope-reorder"]
    workers = workers if JOBS > 1 and not chosen else []
    session.run(
        python, "-m", "pytest", "--nbval-current-env", *workers, *session.posargs, external=True
    )


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """Builds the site into docs/_build/html, warnings as errors, running every example."""
    python = _install(session, "docs")
    session.run(
        python,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-b",
        "html",
        "docs",
        "docs/_build/html",
        *session.posargs,
        external=True,
    )
    session.log(f"site: {ROOT / 'docs/_build/html/index.html'}")


def _clang_format_dirs() -> list[pathlib.Path]:
    """The library's C++/CUDA folders that .clang-format covers: the shared device
    code and each operator's folder of the registry (the guide's demo folders
    under csrc/ keep the layout their pages show)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_registry", ROOT / "opguide" / "registry.py")
    registry = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = registry
    spec.loader.exec_module(registry)
    folders = [ROOT / op.csrc for op in registry.OPERATORS if op.csrc is not None]
    return [ROOT / "csrc" / "common", *folders]


@nox.session(venv_backend=VENV_BACKEND)
def lint(session: nox.Session) -> None:
    """Runs ruff on the Python sources and clang-format on the library's C++/CUDA."""
    _pip(session, "-q", "ruff>=0.6", python="python")
    session.run("python", "-m", "ruff", "check", ".", external=SYSTEM_TORCH)
    session.run("python", "-m", "ruff", "format", "--check", ".", external=SYSTEM_TORCH)
    clang_format = shutil.which("clang-format")
    if clang_format is None:
        session.log("clang-format check skipped: clang-format is not installed")
        return
    sources = [ROOT / "csrc" / "opguide.cpp"]
    for folder in _clang_format_dirs():
        sources += sorted(p for p in folder.iterdir() if p.is_file())
    session.run(clang_format, "--dry-run", "--Werror", *map(str, sources), external=True)
