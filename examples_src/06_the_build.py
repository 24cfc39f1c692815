r"""
Step 6: The build
=================

Steps :doc:`2 <02_cpp_cpu_kernel>` and :doc:`5 <05_bindings_and_registration>`
compiled C++ from a running script. A library that others install needs a
build: ``setup.py`` turns ``csrc/`` into ``opguide/_C.abi3.so`` inside a wheel.
This step walks through that build, the switches it reads, and the tools for
finding out why a build fails.

In this step you will learn:

* how ``setup.py`` describes the extension with
  :func:`~torch.utils.cpp_extension.CppExtension` /
  :func:`~torch.utils.cpp_extension.CUDAExtension` and builds it with
  :class:`~torch.utils.cpp_extension.BuildExtension`;
* the environment switches ``USE_CUDA``, ``DEBUG``, ``TORCH_CUDA_ARCH_LIST``
  and ``MAX_JOBS``;
* how ``py_limited_api`` produces one ``abi3`` wheel for every Python from
  3.10 on, and how to check that it did;
* why installs (editable or not) use ``--no-build-isolation``;
* where JIT builds (:func:`~torch.utils.cpp_extension.load`,
  :func:`~torch.utils.cpp_extension.load_inline`) keep their cache;
* how to print the build configuration when a build misbehaves.

This page builds a real wheel of the package in a temporary folder, looks
inside it, installs it into another temporary folder and imports it from a
fresh Python process.

``setup.py``
------------
One extension, ``opguide._C``, built from ``csrc/opguide.cpp`` and the
``.cpp`` files of each operator's folder that ``opguide/registry.py`` lists
(and the ``.cu`` files of those folders and of ``csrc/common/`` when CUDA is
built). The whole file:

.. literalinclude:: /../setup.py
   :language: python
   :caption: setup.py

What it does, part by part:

* the docstring lists the switches it reads; ``_flag`` refuses anything but
  ``0``/``1`` and ``_want_cuda`` decides whether to build CUDA, and says why
  not when it does not;
* ``_registry`` reads ``opguide/registry.py`` as a file (the package cannot
  be imported before its library is built), and ``LIBRARY_DIRS`` takes each
  operator's ``csrc`` folder from it;
* ``make_extension`` describes the extension. ``CUDAExtension`` adds the CUDA
  include and library directories and compiles ``.cu`` files with nvcc;
  ``CppExtension`` is the CPU-only version. Both add torch's include
  directories and libraries. With ``py_limited_api=True`` they leave out
  ``libtorch_python``, and ``BuildExtension`` defines ``Py_LIMITED_API``;
  together these allow the ``abi3`` tag;
* ``BuildExtension`` supplies the compiler flags torch needs (C++ standard,
  C++ ABI, ``-DTORCH_EXTENSION_NAME``) and compiles with ninja, in parallel
  (``MAX_JOBS`` jobs) and incrementally. The ``bdist_wheel`` option sets the
  wheel's tag to ``cp310-abi3``.

``pyproject.toml``
------------------
The package's metadata, its optional dependency groups (what the tests and
the site need), and what the build needs. ``torch`` is in
``[build-system] requires`` for builds with isolation; this guide always
builds without it (below says why):

.. literalinclude:: /../pyproject.toml
   :language: toml
   :caption: pyproject.toml
"""

# %%
# The switches are checked
# ------------------------
# ``setup.py`` reads ``USE_CUDA`` and ``DEBUG`` as ``0``/``1`` and refuses
# anything else, and ``USE_CUDA=1`` fails at once, with the reasons, when
# CUDA cannot be built. That is better than a CPU-only wheel on a machine
# where you asked for CUDA. Asking ``setup.py`` only for the package version
# runs these checks without compiling anything:
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

from guidekit import wheels  # noqa: E402
from guidekit.buildinfo import without_compiler_folder  # noqa: E402
from guidekit.compile_checks import source_root, without_machine_paths  # noqa: E402

# sphinx_gallery_thumbnail_path = "_thumbnails/06.png"
ROOT = source_root()  # the opguide source tree, wherever this script runs from


def run(cmd, env=None, cwd=ROOT):
    """Runs a command, returns (exit status, output)."""
    proc = subprocess.run(
        cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True
    )
    return proc.returncode, proc.stdout + proc.stderr


for switches in [{"DEBUG": "2"}, {"USE_CUDA": "1"}]:
    status, out = run([sys.executable, "setup.py", "--version"], env=switches)
    last = [line for line in out.splitlines() if line.strip()][-1]
    print(f"{switches} -> exit status {status}: {last}")

# %%
# On a machine with a CUDA build of torch and a CUDA toolkit, ``USE_CUDA=1``
# passes this check (exit status 0), and ``setup.py`` prints its summary of
# what it would build.
#
# Printing the build configuration
# --------------------------------
# When a build fails, or a built library does not load, the first question is
# what the build saw: which torch, which C++ ABI, which include and library
# directories, which toolkit. ``guidekit.buildinfo`` prints that without
# compiling anything (``python -m guidekit.buildinfo``; ``python
# guidekit/buildinfo.py`` also works before the package is built). It asks
# ``CppExtension``/``CUDAExtension`` themselves what they would add:
#
# .. literalinclude:: /../guidekit/buildinfo.py
#    :language: python
#    :pyobject: build_config
status, out = run([sys.executable, "-m", "guidekit.buildinfo"], env={"MAX_JOBS": "2"})
assert status == 0, out
# <repo>, <venv>, <tmp> for this machine's folders, and <bin> for its compiler's.
print(without_compiler_folder(without_machine_paths(out)))

# %%
# Comparing this output between a machine where the build works and one where
# it does not usually finds the difference: another torch version, another
# ``cxx11_abi``, no ``cuda_home``, or a library built for another Python
# (its suffix would be ``ext_suffix``, not ``abi3_suffix``).
#
# Building the wheel
# ------------------
# ``pip wheel --no-build-isolation --no-deps`` builds the wheel with the torch
# that is installed. With build isolation (pip's default), pip would first
# install a fresh torch into a temporary environment, compile against it and
# throw it away: slow, and the library could be built against another torch
# than the one it will run with. ``--no-deps`` builds only opguide.
#
# Compiled objects go to ``build/temp.*`` in the repository, and ninja only
# recompiles sources that changed. pip would compile an editable install
# (below) in a temporary folder that it deletes afterwards; ``setup.py``'s
# ``BuildInTree`` sends that build to ``build/temp.*`` too, so a wheel built
# after an editable install, or the other way round, compiles nothing that
# did not change:
#
# .. literalinclude:: /../setup.py
#    :language: python
#    :pyobject: BuildInTree
#
# The output says how many sources the extension has, whether ninja had
# anything to compile, and how long the build took on this machine.
workdir = Path(tempfile.mkdtemp(prefix="opguide-step6-"))
start = time.perf_counter()
# The lock keeps two builds of this tree (two test processes) out of build/ at once.
with wheels.build_lock(ROOT):
    status, log = run(
        [sys.executable, "-m", *"pip wheel -v --no-build-isolation --no-deps -w".split()]
        + [str(workdir / "dist"), str(ROOT)],
        env={"MAX_JOBS": "2"},
    )
elapsed = time.perf_counter() - start
if status != 0:
    print(log[-4000:])
    raise RuntimeError("pip wheel failed")
summary = next(line.strip() for line in log.splitlines() if "setup.py: opguide._C from" in line)
print(summary)
sources = summary.split(" from ", 1)[1].split(" | ", 1)[0].split(", ")
print(f"{len(sources)} sources")
print("ninja had no work to do (warm build)" if "ninja: no work to do" in log else "ninja compiled")
wheel = next((workdir / "dist").glob("opguide-*.whl"))
print(f"built {wheel.name} in {elapsed:.1f} s")

# %%
# Looking inside the wheel
# ------------------------
# The file name carries the tags ``{python}-{abi}-{platform}``: ``cp310-abi3``
# means "CPython 3.10 or newer, stable ABI", so the same wheel installs on
# 3.10, 3.11, 3.12 and later (CPython with the GIL: the free-threaded builds
# take no ``abi3`` wheel). The ``WHEEL`` metadata says the same, and the
# library inside is named ``_C.abi3.so``:
python_tag, abi_tag, platform_tag = wheel.stem.split("-")[2:5]
assert (python_tag, abi_tag) == ("cp310", "abi3"), wheel.name
with zipfile.ZipFile(wheel) as zf:
    names = sorted(zf.namelist())
    wheel_meta = zf.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    for name in names:
        print(f"{zf.getinfo(name).file_size:>10,d}  {name}")
print()
print(wheel_meta.strip())
library = next(n for n in names if n.startswith("opguide/_C."))
assert library == "opguide/_C.abi3.so", library
assert "Tag: cp310-abi3-" in wheel_meta
# The wheel holds the operators only: the guide's own tools (guidekit/)
# work in a checkout, and setup.py leaves them out of a wheel.
packages = sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})
print("packages in the wheel:", ", ".join(packages))
assert packages == ["opguide"], packages

# %%
# The tag is a promise that the library does not use any CPython API outside
# the stable ABI. Two things in the library show what it uses. Its dynamic
# dependencies (``NEEDED``) should be torch's C++ libraries, the C/C++
# runtime and, in a CUDA build, the CUDA runtime (``libcudart``), without
# ``libtorch_python``, whose API is tied to one Python version. (An extension
# that setuptools builds on Linux does not list ``libpython``: it finds the
# interpreter's symbols in the process that loads it.) And the symbols it takes from other
# libraries (``nm -D --undefined-only``) show which CPython functions
# (``Py*``, ``_Py*``) it calls, if any:
with zipfile.ZipFile(wheel) as zf:
    zf.extract(library, workdir / "unpacked")
readelf, nm = shutil.which("readelf"), shutil.which("nm")
if readelf is None or nm is None:
    print("skipped: readelf or nm (binutils) is not installed, so the library is not inspected")
else:
    unpacked = str(workdir / "unpacked" / library)
    dynamic = subprocess.run([readelf, "-d", unpacked], capture_output=True, text=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "NEEDED" in line]
    print("NEEDED:", ", ".join(needed))
    assert not any("torch_python" in lib for lib in needed), needed
    symbols = subprocess.run(
        [nm, "-D", "--undefined-only", unpacked], capture_output=True, text=True
    ).stdout.split()
    names = [s.split("@")[0] for s in symbols if s != "U" and s != "w"]
    python_api = sorted(n for n in names if n.startswith(("Py", "_Py")))
    print(f"undefined symbols: {len(names)}; of them CPython functions: {len(python_api)}")
    if python_api:
        print("  " + ", ".join(python_api))
    else:
        print("the library calls no CPython function at all")

# %%
# Installing it and importing it in a fresh process
# -------------------------------------------------
# ``pip install --target`` unpacks the wheel into a folder of its own; a new
# interpreter with that folder first on ``PYTHONPATH`` imports the wheel's
# copy, not the source tree. It loads ``_C.abi3.so``, which registers
# ``torch.ops.opguide``, and runs the operator, forward and backward, against
# the reference:
target = workdir / "site"
status, out = run(
    [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)]
)
assert status == 0, out
CHECK = """
import torch, opguide
torch.manual_seed(0)
x = torch.randn(8, 300, requires_grad=True)
w = torch.randn(300, requires_grad=True)
y = opguide.rms_norm(x, w)
torch.testing.assert_close(y, opguide.rms_norm_reference(x, w))
y.backward(torch.ones_like(y))
grad_x, grad_weight = opguide.rms_norm_backward_reference(torch.ones_like(y), x, w)
torch.testing.assert_close((x.grad, w.grad), (grad_x, grad_weight))
print("imported", opguide.__file__)
print("library ", opguide._library.library_path())
print("forward and backward match the reference")
"""
status, out = run([sys.executable, "-c", CHECK], env={"PYTHONPATH": str(target)}, cwd=workdir)
print(out.replace(str(workdir), "<tmp>"))
assert status == 0, out
assert f"imported {target}" in out, "the fresh process did not import the wheel's copy"

# %%
# Editable installs
# -----------------
# While working on the library, ``pip install --no-build-isolation -e .``
# compiles ``_C`` into ``opguide/`` next to the Python sources and points
# the environment at the source tree, so Python edits need no reinstall
# (C++ edits need the same command again). The test and docs sessions of
# ``noxfile.py`` install opguide this way, and pip records it in the
# distribution's ``direct_url.json``. The wheel build above also left an
# ``opguide.egg-info`` in the source tree, so the cell reads the distribution
# that has that file:
records = [d.read_text("direct_url.json") for d in metadata.distributions(name="opguide")]
direct_url = next((r for r in records if r), None)
print("direct_url.json:", without_machine_paths(str(direct_url)))
print("this process imports opguide from:", end=" ")
import opguide  # noqa: E402

print(Path(opguide.__file__).parent.relative_to(ROOT))

# %%
# JIT builds and their cache
# --------------------------
# :func:`~torch.utils.cpp_extension.load` and
# :func:`~torch.utils.cpp_extension.load_inline` compile at run time, with the
# same flags. Without an explicit ``build_directory`` they build in
# ``$TORCH_EXTENSIONS_DIR/<name>`` where that variable is set, and otherwise
# in ``torch_extensions/<python>_<accelerator>/<name>`` in the user cache
# directory (``py311_cu128``, say, for Python 3.11 and torch for CUDA 12.8;
# ``cpu`` for a CPU-only torch). This project sets ``TORCH_EXTENSIONS_DIR`` to
# ``build/torch_extensions`` in ``noxfile.py``, ``conftest.py`` and
# ``docs/conf.py``, so that every cache stays in the repository. A second
# build with unchanged sources and flags finds its objects there and only
# loads the library; another process benefits too:
JIT_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <torch/library.h>

at::Tensor twice(const at::Tensor& x) { return x.mul(2); }

TORCH_LIBRARY(opguide_step6, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(opguide_step6, CompositeExplicitAutograd, m) { m.impl("twice", &twice); }
"""
# Rewritten only when it changes: ninja compares file times.
source = ROOT / "build" / "jit" / "step6_twice.cpp"
source.parent.mkdir(parents=True, exist_ok=True)
if not source.exists() or source.read_text() != JIT_SOURCE:
    source.write_text(JIT_SOURCE)

JIT = f"""
import time, torch
from pathlib import Path
from torch.utils.cpp_extension import load
start = time.perf_counter()
path = load("opguide_step6_jit", sources=[{str(source)!r}], is_python_module=False)
x = torch.randn(3)
assert torch.equal(torch.ops.opguide_step6.twice(x), x * 2)
print(f"{{time.perf_counter() - start:5.1f}} s  {{Path(path).parent.name}}/{{Path(path).name}}")
"""
# Already set when this page runs under nox, pytest or Sphinx; set the same
# value when the script runs on its own.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / "build" / "torch_extensions"))
cache = Path(os.environ["TORCH_EXTENSIONS_DIR"])
print("TORCH_EXTENSIONS_DIR =", without_machine_paths(str(cache)))
for attempt in ("first process ", "second process"):
    status, out = run([sys.executable, "-c", JIT])
    assert status == 0, out
    print(attempt, out.strip())
print("cache:", sorted(p.name for p in (cache / "opguide_step6_jit").iterdir()))

# %%
# The first process compiles (unless an earlier run left the objects in
# ``build/``); the second only checks timestamps and loads the library.
# Deleting ``build/`` resets every cache.

shutil.rmtree(workdir)

# %%
# The files to take into your own project
# ---------------------------------------
# The wheel above holds every operator. To take only RMSNorm on this route
# into a project of your own, copy the files that
# ``manifests/cpp_rms_norm.txt`` lists, each to the same path, and write the
# two files it names: the registry with RMSNorm's entry alone, and the
# package's ``__init__.py``, each cut here from this repository's own.
# ``setup.py`` needs no edit: it compiles ``csrc/opguide.cpp``,
# ``csrc/common/`` and the ``csrc`` folder of each operator that
# ``opguide/registry.py`` lists.
# ``tests/test_manifests.py`` copies exactly these files into an empty folder,
# builds them in a virtual environment that holds only torch, and checks the
# result against the formula. The list, with each file's lines:

from guidekit import manifests  # noqa: E402

print(manifests.shown("cpp_rms_norm"))

# %%
# What's next
# -----------
# :doc:`Step 7 <07_the_tests>` is the test module that every change to these files must pass.
