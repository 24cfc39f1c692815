"""The docs are the test suite: this file makes them pytest items.

* every gallery script (``part1_src/NN_*.py``, ``examples_src/NN_*.py``)
  becomes one item that copies the script into an empty temporary folder and
  runs it there in a fresh interpreter, as a reader runs the site's download
  of it once opguide (for Part I, its project first_operator/) is installed
  (nothing in a script may depend on the folder it runs from);
  when the docs build of this checkout already ran a script to the end on
  exactly the same inputs (:mod:`guidekit.gallery_runs`), the item takes that
  result instead of running the script a second time;
* every ``tutorials/*.md`` MyST notebook is converted with jupytext and run by
  nbval, one item per cell;
* markers ``cpu``, ``cuda`` and ``rocm`` say which device an item needs. An item
  whose device is missing is skipped with the reason printed in the summary.

This is the one place that decides what runs where.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build"
GALLERY_SCRIPT = re.compile(r"^\d\d_.*\.py$")
# A gallery script declares the devices it needs in a comment line, e.g.
#   # opguide-devices: cuda
DEVICES_LINE = re.compile(r"^#\s*opguide-devices:\s*(.+)$", re.MULTILINE)
DEVICE_MARKERS = {
    "cpu": "runs on any machine",
    "cuda": "needs an NVIDIA GPU and a CUDA build of torch",
    "rocm": "needs an AMD GPU and a ROCm build of torch",
}

# One cache of each kind for the whole run. Inductor's and Triton's caches key
# an entry by the graph or kernel source, the compiler's version and its
# options; the options that Inductor's key leaves out (the AOTInductor C shim
# of opguide/experimental/aoti_shim.py) are compiled with its caches off.
for _name, _sub in (
    ("TORCH_EXTENSIONS_DIR", "torch_extensions"),
    ("TRITON_CACHE_DIR", "triton_cache"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor_cache"),
):
    os.environ.setdefault(_name, str(BUILD / _sub))
os.environ.setdefault("MPLBACKEND", "Agg")


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


# Without a GPU the Triton kernels run in Triton's interpreter, which must be
# chosen before anything imports triton (torch.compile may); set here, it also
# reaches the gallery scripts, which run in child processes.
if _no_gpu():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _device_available(device: str) -> tuple[bool, str]:
    if device == "cpu":
        return True, ""
    import torch

    if device == "cuda":
        if torch.version.cuda is None:
            return False, f"torch {torch.__version__} is not a CUDA build"
        if not torch.cuda.is_available():
            return False, "torch.cuda.is_available() is False (no NVIDIA GPU visible)"
        return True, ""
    if device == "rocm":
        if torch.version.hip is None:
            return False, f"torch {torch.__version__} is not a ROCm build"
        if not torch.cuda.is_available():
            return False, "no AMD GPU visible"
        return True, ""
    raise ValueError(f"unknown device marker {device!r}")


# pytest-xdist hands out whole files (--dist loadfile) in collection order. The
# files that take minutes go first, so that the run ends with short files on
# every process rather than one long file on one: the gallery scripts that take
# longest, longest first (guidekit.gallery_runs.LONGEST_FIRST; the docs build
# starts them first too), those whose tests copy the torch-only virtual
# environment (they build projects in it), and these.
LONG_FILES = ("test_wheels.py", "test_compile_checks.py", "test_browser.py")


def _longest_first() -> tuple[str, ...]:
    try:
        from guidekit.gallery_runs import LONGEST_FIRST
    except ImportError:  # guidekit is not installed: file order
        return ()
    return LONGEST_FIRST


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gallery = {name: rank for rank, name in enumerate(_longest_first())}
    long = {
        item.path
        for item in items
        if "base_venv" in getattr(item, "fixturenames", ()) or item.path.name in LONG_FILES
    }

    def order(item: pytest.Item) -> tuple[int, int]:
        if _is_gallery_script(item.path) and item.path.name in gallery:
            return 0, gallery[item.path.name]
        return (1 if item.path in long else 2), 0

    items.sort(key=order)  # stable: each file keeps its order


def pytest_configure(config: pytest.Config) -> None:
    # The key of the inputs the gallery scripts depend on, before any test
    # runs (a test may set variables): see _docs_build_passed.
    try:
        from guidekit import gallery_runs

        _DOCS_KEY.append(gallery_runs.key())
    except ImportError:  # guidekit is not installed: every script runs
        pass
    for name, doc in DEVICE_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for device in DEVICE_MARKERS:
        if item.get_closest_marker(device) is not None:
            ok, why = _device_available(device)
            if not ok:
                pytest.skip(f"needs {device}: {why}")


class GalleryScriptError(Exception):
    """A gallery script exited with a non-zero status."""


class GalleryScript(pytest.Item):
    """Runs one gallery script as a reader runs its download: alone, in an empty folder."""

    def runtest(self) -> None:
        if _docs_build_passed(self.path.name):
            self.add_report_section(
                "call", "script output", "run by the docs build, on the same inputs"
            )
            print(f"{self.path.name}: ok in the docs build of these same sources")
            return
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="opguide-download-") as empty:
            script = Path(empty) / self.path.name
            shutil.copyfile(self.path, script)
            proc = subprocess.run(
                [sys.executable, script.name],
                cwd=empty,
                capture_output=True,
                text=True,
                timeout=1800,
            )
        self.add_report_section("call", "script output", proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise GalleryScriptError(proc.returncode, proc.stdout, proc.stderr)
        print(f"{self.path.name}: ok in {time.perf_counter() - start:.1f} s")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GalleryScriptError):
            code, out, err = excinfo.value.args
            tail = (out + err)[-6000:]
            return f"{self.path.name} exited with status {code}; last output:\n{tail}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"gallery script {self.path.name}"


_DOCS_KEY: list = []  # guidekit.gallery_runs.key(), computed once per process


def _docs_build_passed(script: str) -> bool:
    """Whether the docs build ran ``script`` to the end on exactly these inputs."""
    try:
        from guidekit import gallery_runs
    except ImportError:  # guidekit is not installed: every script runs
        return False
    if not _DOCS_KEY:
        return False
    return gallery_runs.passed_in_docs_build(script, current_key=_DOCS_KEY[0])


class GalleryFile(pytest.File):
    def collect(self):
        text = self.path.read_text()
        item = GalleryScript.from_parent(self, name="run")
        found = DEVICES_LINE.search(text)
        devices = [d.strip() for d in found.group(1).split(",")] if found else ["cpu"]
        for device in devices:
            if device not in DEVICE_MARKERS:
                raise ValueError(f"{self.path.name}: unknown device {device!r}")
            item.add_marker(device)
        yield item


def _notebook_item(parent: pytest.Collector, md_path: Path):
    """Converts a MyST notebook to .ipynb under build/ and hands it to nbval."""
    import jupytext
    import nbformat
    from nbval.plugin import IPyNbFile

    out_dir = BUILD / "nbval"
    out_dir.mkdir(parents=True, exist_ok=True)
    text = nbformat.writes(jupytext.read(md_path))
    ipynb = out_dir / (md_path.stem + ".ipynb")
    # Each pytest-xdist worker collects the notebook: the file is replaced whole
    # (written beside it, then renamed), so that no worker reads it half written.
    if not ipynb.is_file() or ipynb.read_text() != text:
        partial = ipynb.with_name(f"{ipynb.name}.{os.getpid()}.partial")
        partial.write_text(text)
        os.replace(partial, ipynb)
    return IPyNbFile.from_parent(parent, path=ipynb)


# The folders of the site's galleries: Part I, then Part II (docs/conf.py).
GALLERIES = (ROOT / "part1_src", ROOT / "examples_src")


def _is_gallery_script(path: Path) -> bool:
    return path.parent in GALLERIES and GALLERY_SCRIPT.match(path.name) is not None


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector):
    # A script named on the command line reaches pytest's Python collector,
    # which would import it as a test module from the wrong folder; run it as
    # a gallery script instead.
    if _is_gallery_script(module_path):
        return GalleryFile.from_parent(parent, path=module_path)
    return None


def pytest_collect_file(parent: pytest.Collector, file_path: Path):
    if _is_gallery_script(file_path):
        if parent.session.isinitpath(file_path):
            return None  # named on the command line: pytest_pycollect_makemodule has it
        return GalleryFile.from_parent(parent, path=file_path)
    if file_path.parent == ROOT / "tutorials" and file_path.suffix == ".md":
        return _notebook_item(parent, file_path)
    return None
