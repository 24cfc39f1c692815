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

Compiled extensions, Triton and Inductor caches are kept under ``build/``.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import time

import nox

ROOT = pathlib.Path(__file__).resolve().parent
BUILD = ROOT / "build"
TORCH_SPEC = os.environ.get("OPGUIDE_TORCH", "torch==2.13.0")
SYSTEM_TORCH = os.environ.get("OPGUIDE_SYSTEM_TORCH", "") == "1"
WHEELHOUSE = os.environ.get("OPGUIDE_WHEELHOUSE", "")
# With OPGUIDE_SYSTEM_TORCH=1 the sessions run in the interpreter that runs nox.
VENV_BACKEND = "none" if SYSTEM_TORCH else None

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


def _pip(session: nox.Session, *args: str) -> None:
    extra = ["--no-index", "--find-links", WHEELHOUSE] if WHEELHOUSE else []
    session.run("python", "-m", "pip", "install", *extra, *args, external=SYSTEM_TORCH)


def _build_fingerprint(session: nox.Session, extra: str) -> str:
    """Hashes what the compiled library depends on: sources, build files, torch."""
    digest = hashlib.sha256(extra.encode())
    inputs = sorted(ROOT.glob("csrc/**/*")) + [ROOT / "setup.py", ROOT / "pyproject.toml"]
    inputs += sorted(ROOT.glob("opguide/_C.*"))  # a library rebuilt by another session
    for path in inputs:
        if path.is_file():
            digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    torch_version = session.run(
        "python",
        "-c",
        "import torch; print(torch.__version__, torch.version.cuda)",
        silent=True,
        external=SYSTEM_TORCH,
    )
    digest.update(str(torch_version).encode())
    for name in ("USE_CUDA", "DEBUG", "TORCH_CUDA_ARCH_LIST"):
        digest.update(f"{name}={os.environ.get(name, '')}".encode())
    return digest.hexdigest()


def _install(session: nox.Session, extra: str) -> None:
    """Installs torch (unless reused), the build tools, then opguide with ``extra``.

    opguide is installed in editable mode, so the compiled library lands in
    opguide/ next to the Python sources. The install (and its compile) is
    skipped when nothing it depends on changed since the last one.
    """
    session.env.update(CACHE_ENV)
    if SYSTEM_TORCH:
        session.run(
            "python",
            "-c",
            "import torch; print('using torch', torch.__version__, "
            "'cuda', torch.version.cuda, 'at', torch.__file__)",
            external=True,
        )
    else:
        _pip(session, "-q", TORCH_SPEC)
    stamp_dir = BUILD if SYSTEM_TORCH else pathlib.Path(session.virtualenv.location)
    stamp = stamp_dir / f"opguide-{session.name}.stamp"
    fingerprint = _build_fingerprint(session, extra)
    if stamp.exists() and stamp.read_text() == fingerprint:
        session.log("opguide: sources, build files and torch unchanged; reusing opguide/_C")
        return
    _pip(session, "-q", "setuptools>=77", "wheel", "ninja")
    # No build isolation: the extension is compiled against the torch above.
    session.log("opguide: compiling the C++ extension (a minute or two on 2 cores)")
    start = time.perf_counter()
    _pip(session, "--no-build-isolation", "-e", f".[{extra}]")
    session.log(f"opguide: installed in {time.perf_counter() - start:.0f} s")
    stamp_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(_build_fingerprint(session, extra))


@nox.session(venv_backend=VENV_BACKEND)
def tests(session: nox.Session) -> None:
    """Runs pytest over tests/, the gallery scripts and the notebooks."""
    _install(session, "test")
    # Most items wait on a compiler or a child process on one core: two
    # processes take about 40% off the suite on a 2-core machine. Arguments
    # that choose the processes themselves (-n, -p no:xdist) win.
    chosen = any(a.startswith(("-n", "--numprocesses", "--dist")) for a in session.posargs)
    chosen = chosen or "no:xdist" in session.posargs
    workers = ["-n", str(JOBS), "--dist", "loadfile"] if JOBS > 1 and not chosen else []
    session.run(
        "python",
        "-m",
        "pytest",
        "--nbval-current-env",
        *workers,
        *session.posargs,
        external=SYSTEM_TORCH,
    )


@nox.session(venv_backend=VENV_BACKEND)
def docs(session: nox.Session) -> None:
    """Builds the site into docs/_build/html, warnings as errors, running every example."""
    _install(session, "docs")
    session.run(
        "python",
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-b",
        "html",
        "docs",
        "docs/_build/html",
        *session.posargs,
        external=SYSTEM_TORCH,
    )
    session.log(f"site: {ROOT / 'docs/_build/html/index.html'}")


# The library's C++/CUDA folders that .clang-format covers (the guide's demo
# folders under csrc/ keep the layout their pages show).
CLANG_FORMAT_DIRS = ("common", "rms_norm", "fused_add_rms_norm")


@nox.session(venv_backend=VENV_BACKEND)
def lint(session: nox.Session) -> None:
    """Runs ruff on the Python sources and clang-format on the library's C++/CUDA."""
    _pip(session, "-q", "ruff>=0.6")
    session.run("python", "-m", "ruff", "check", ".", external=SYSTEM_TORCH)
    session.run("python", "-m", "ruff", "format", "--check", ".", external=SYSTEM_TORCH)
    clang_format = shutil.which("clang-format")
    if clang_format is None:
        session.log("clang-format check skipped: clang-format is not installed")
        return
    sources = [ROOT / "csrc" / "opguide.cpp"]
    for folder in CLANG_FORMAT_DIRS:
        sources += sorted(p for p in (ROOT / "csrc" / folder).iterdir() if p.is_file())
    session.run(clang_format, "--dry-run", "--Werror", *map(str, sources), external=True)
