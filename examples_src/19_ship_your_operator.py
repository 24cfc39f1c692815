r"""
Step 19: Ship your operator
===========================

A wheel your users can install is tagged for their platforms, carries the
libraries it needs and none of torch's, and says which torch it loads into.
This step takes :doc:`step 15 <15_one_wheel_for_every_torch>`'s stable-ABI
project through a release (live where torch is 2.13 or later; each cell says
when it skips): build, read the tags, repair with ``auditwheel``, install
into a fresh virtual environment, test. It also shows:

* how many wheels a release needs, with and without ``abi3`` and the stable ABI;
* how projects name CUDA 12 and 13 builds, and what an architecture list
  costs in size;
* two traps: a classic-API wheel that does not pin its torch, and
  ``TORCH_TARGET_VERSION`` with the wrong bytes.

``tests/test_wheels.py`` takes the library's own wheel through the same
steps; the functions called here are in ``guidekit/wheels.py``, shown at the
end.
"""

# %%
# How many wheels
# ---------------
# A wheel's tags name the Python, its ABI and the platform. A classic C++ API
# library adds an axis no tag shows, the torch release: it calls torch's C++
# functions by mangled names that another release may change (:doc:`step 15
# <15_one_wheel_for_every_torch>` lists them). A CUDA build adds the CUDA
# major (``libcudart.so.12`` or ``.13``). For five torch releases, two CUDA
# majors, four Pythons and two CPU architectures:
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
# ``abi3`` removes the Python axis and the stable ABI the torch axis
# (`its notes
# <https://docs.pytorch.org/docs/stable/notes/libtorch_stable_abi.html>`__):
# one wheel per platform and CUDA major.
#
# Building the wheel
# ------------------
# From a scratch copy of ``stable/``, the CPU kernel only (``USE_CUDA=0``):
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
# PyPI refuses ``linux_x86_64``, which promises nothing about the system; the
# repair gives a ``manylinux`` tag.
#
# What the library loads
# ----------------------
# Its ``DT_NEEDED`` libraries, sorted into those torch brings and those the
# system must have:
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
# ``auditwheel repair`` picks the oldest ``manylinux`` tag the library's
# glibc and libstdc++ symbol versions allow, and copies in every needed
# library not on the manylinux list. Torch's are on no list and no system
# path, so a plain repair stops:
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
# Bundling them would load a second ``libtorch_cpu.so`` beside torch's, so
# they are excluded; torch, imported first, provides them (as it provides
# ``libcudart`` to a CUDA build, from its ``nvidia-cuda-runtime`` wheel):
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
# The ``manylinux_2_X`` number is the oldest glibc the wheel runs with, set by
# the building machine's; releases build in the PyPA's ``manylinux_2_28``
# images (``quay.io/pypa``; the last line gives torch's own tag) or with
# ``cibuildwheel``, as the template's CI does (:doc:`step 18
# <18_your_own_operator>`).
#
# Installing it into a fresh environment
# --------------------------------------
# A new virtual environment that never saw the source tree, the wheel from
# pip, the tests run from a folder holding only them:
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
# A warning there, if any, is torch's own at import: the environment has no
# NumPy, which these tests do not need.
#
# CUDA builds and their names
# ---------------------------
# The tags have no place for the CUDA version, so projects use **separate
# names** (``yourlib-cu12``, ``yourlib-cu13``, as NVIDIA's ``nvidia-*-cu12``
# packages), **one name on several indexes** with a local version
# (``1.0+cu130``, as PyTorch; `PEP 440
# <https://peps.python.org/pep-0440/#local-version-identifiers>`__ keeps local
# versions off PyPI), or **PyPI for one** CUDA major and an index for the
# others.
#
# A classic-API wheel pins its torch release in its metadata, or pip may
# install it beside another; the stable-ABI wheel's pin is a floor:
if wheel is not None:
    print("opguide-stable requires:", wheels.requirements(wheel))
setup_py = (ROOT / "setup.py").read_text().splitlines()
pin = next(line for line in setup_py if "install_requires" in line)
print("opguide (classic) setup.py:", pin.strip())

# %%
# What an architecture list costs
# -------------------------------
# Each ``TORCH_CUDA_ARCH_LIST`` entry compiles every kernel once more; PyPI
# takes files up to 100 MB and 10 GB a project (`storage limits
# <https://docs.pypi.org/project-management/storage-limits/>`__). With nvcc,
# step 3's minimal kernels for growing lists:
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
# A release's list runs from the oldest supported GPU to ``+PTX`` of the
# newest, which newer GPUs compile at load time.
#
# ``TORCH_TARGET_VERSION``'s bytes
# --------------------------------
# ``torch/headeronly/version.h`` puts the major version in the top byte, the
# minor in the next. ``2.11`` written as it reads, ``0x0211...``, is minor
# ``0x11``, 17: every ``#if TORCH_FEATURE_VERSION >= ...`` block opens. What
# the headers see with each value:
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
# The first is ``stable/setup.py``'s (``major << 56 | minor << 48``). With
# torch 2.13 and 2.14 headers the second silently opens 2.13's APIs; from 2.15
# the headers refuse a target newer than themselves (`pytorch#193962
# <https://github.com/pytorch/pytorch/pull/193962>`__). Step 15's
# ``check_abi.py --target 2.11`` catches what such a build calls.
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
# * Build in the ``manylinux_2_28`` container with ``pip wheel
#   --no-build-isolation --no-deps``: a classic wheel against the torch it
#   pins, a stable one with ``TORCH_TARGET_VERSION`` at its oldest torch.
# * ``auditwheel repair --exclude`` every library torch brings.
# * Test the repaired wheel in a fresh environment before uploading.
# * The template (:doc:`step 18 <18_your_own_operator>`) writes these commands
#   into its README and CI.
