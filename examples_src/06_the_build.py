r"""
Step 6: The build
=================

Part I's ``setup.py`` is a screen long. The library's does more, and this
step shows what: checked switches (``USE_CUDA``, ``DEBUG``,
``TORCH_CUDA_ARCH_LIST``, ``MAX_JOBS``), sources taken from the operator
registry, one ``abi3`` wheel for every Python from 3.10 on, and builds that
reuse their objects. The page builds a real wheel, looks inside it, installs
it and imports it in a fresh process; it also shows where JIT builds keep
their cache and how to print what a build sees.

``setup.py``
------------
One extension, ``opguide._C``, from ``csrc/opguide.cpp`` and the folders that
``opguide/registry.py`` lists (their ``.cu`` files too when CUDA is built):

.. literalinclude:: /../setup.py
   :language: python
   :caption: setup.py

Beyond Part I's: ``_flag`` refuses a switch that is not ``0``/``1``;
``_want_cuda`` says why it does not build CUDA; ``_registry`` reads
``opguide/registry.py`` as a file, since the package cannot be imported
before its library exists; ``py_limited_api=True`` leaves out
``libtorch_python`` and, with the ``bdist_wheel`` option, tags the wheel
``cp310-abi3``.

``pyproject.toml``
------------------
Metadata, the optional dependency groups of the tests and the site, and the
build's needs:

.. literalinclude:: /../pyproject.toml
   :language: toml
   :caption: pyproject.toml
"""

# %%
# The switches are checked
# ------------------------
# ``USE_CUDA=1`` fails at once, with its reasons, where CUDA cannot be built,
# rather than yield a CPU-only wheel. ``setup.py --version`` runs the checks
# without compiling:
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
# Printing the build configuration
# --------------------------------
# When a build fails or a library does not load, ask what the build saw:
# ``python -m guidekit.buildinfo`` asks ``CppExtension``/``CUDAExtension``
# what they would add, without compiling:
#
# .. literalinclude:: /../guidekit/buildinfo.py
#    :language: python
#    :pyobject: build_config
status, out = run([sys.executable, "-m", "guidekit.buildinfo"], env={"MAX_JOBS": "2"})
assert status == 0, out
# <repo>, <venv>, <tmp> for this machine's folders, and <bin> for its compiler's.
print(without_compiler_folder(without_machine_paths(out)))

# %%
# Compare it between a machine where the build works and one where it does
# not: torch version, ``cxx11_abi``, ``cuda_home``, suffixes.
#
# Building the wheel
# ------------------
# ``--no-build-isolation`` builds against the installed torch; with isolation
# pip would compile against a fresh torch in a temporary environment, which
# may not be the one the library runs with. ``BuildInTree`` keeps the objects
# of every kind of install in ``build/temp.*``, so ninja recompiles only what
# changed:
#
# .. literalinclude:: /../setup.py
#    :language: python
#    :pyobject: BuildInTree
#
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
# ``cp310-abi3`` means CPython 3.10 or newer (with the GIL), stable ABI; the
# ``WHEEL`` metadata says the same:
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
# The tag promises no CPython API outside the stable ABI. The library's
# ``NEEDED`` entries must leave out ``libtorch_python``, and its undefined
# symbols show which CPython functions (``Py*``) it calls:
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
# A fresh interpreter with the unpacked wheel first on ``PYTHONPATH`` runs the
# operator, forward and backward, against the reference:
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
# ``pip install --no-build-isolation -e .`` compiles ``_C`` into ``opguide/``
# and points the environment at the source tree: Python edits need no
# reinstall, C++ edits the same command again. ``noxfile.py`` installs opguide
# this way, as ``direct_url.json`` records:
records = [d.read_text("direct_url.json") for d in metadata.distributions(name="opguide")]
direct_url = next((r for r in records if r), None)
print("direct_url.json:", without_machine_paths(str(direct_url)))
print("this process imports opguide from:", end=" ")
import opguide  # noqa: E402

print(Path(opguide.__file__).parent.relative_to(ROOT))

# %%
# JIT builds and their cache
# --------------------------
# :func:`~torch.utils.cpp_extension.load` without a ``build_directory``
# builds in ``$TORCH_EXTENSIONS_DIR/<name>``, or else under
# ``torch_extensions/`` in the user cache directory. This project sets it to
# ``build/torch_extensions``. A second process with unchanged sources and
# flags only loads the library:
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
# Deleting ``build/`` resets every cache.

shutil.rmtree(workdir)

# %%
# The files to take into your own project
# ---------------------------------------
# To take RMSNorm alone on this route, copy the files that
# ``manifests/cpp_rms_norm.txt`` lists and write the two it names (a registry
# with RMSNorm's entry alone, and the package's ``__init__.py``).
# ``tests/test_manifests.py`` builds exactly these in an empty folder with
# only torch and checks the result:

from guidekit import manifests  # noqa: E402

print(manifests.shown("cpp_rms_norm"))

# %%
# What's next
# -----------
# :doc:`Step 7 <07_the_tests>`: the tests every change must pass.
