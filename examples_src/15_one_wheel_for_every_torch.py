r"""
Step 15: One wheel for every torch (the stable ABI)
===================================================

LibTorch's C++ API (``at::Tensor``, ``TORCH_CHECK``), which Part I and the
library use, makes no binary promise: a library calls torch's C++ functions by
their mangled names, the next release may change them, and the symptom is
``undefined symbol: _ZN3c10...`` after ``pip install -U torch``. The
**LibTorch stable ABI** (`its notes
<https://docs.pytorch.org/docs/stable/notes/libtorch_stable_abi.html>`__; the
`stable C++ API <https://docs.pytorch.org/cppdocs/api/stable/index.html>`__)
makes every call into torch through a C shim whose functions keep their
signatures, each for at least two years after the release that brings it.
This step shows:

* the forward, CPU and CUDA, on the stable ABI, beside the classic API;
* one wheel per platform, with ``TORCH_TARGET_VERSION`` and ``py_limited_api``;
* a check of the built library for C++ API symbols, shim functions newer than
  its target, and glibc newer than its tag, and what it finds when one slips in;
* a wheel built once passing its tests under other torch releases (recorded);
* Triton kernels in the same wheel: :doc:`step 9.3 <09_triton_kernel_3_ahead_of_time>`'s
  forward, compiled ahead of time, launched from the library through the CUDA
  runtime on torch's current stream (recorded).

The project is ``stable/``: a package ``opguide_stable`` with one operator.
"""

# %%
# The CPU kernel on the stable ABI
# --------------------------------
# The loop of :doc:`step 2 <02_cpp_cpu_kernel>`'s minimal file; every place
# that touches torch changes:
#
# .. literalinclude:: /../stable/csrc/rms_norm.cpp
#    :language: cpp
#    :caption: stable/csrc/rms_norm.cpp
#
# The checks both kernels share:
#
# .. literalinclude:: /../stable/csrc/rms_norm.h
#    :language: cpp
#    :caption: stable/csrc/rms_norm.h
#
# The CUDA kernel on the stable ABI
# ---------------------------------
# :doc:`Step 3 <03_cuda_kernel>`'s torch-free header, included as it is; only
# the wrapper changes:
#
# .. literalinclude:: /../stable/csrc/rms_norm_cuda.cu
#    :language: cuda
#    :caption: stable/csrc/rms_norm_cuda.cu
#
# Side by side
# ------------
# .. list-table::
#    :header-rows: 1
#    :widths: 18 41 41
#
#    * - what
#      - classic API (steps 2, 3)
#      - stable ABI (this step)
#    * - headers
#      - ``ATen/ATen.h``, ``torch/library.h``, ``c10/cuda/*``
#      - ``torch/csrc/stable/*``, ``torch/headeronly/*`` only
#    * - tensor type
#      - ``at::Tensor``
#      - ``torch::stable::Tensor`` (a handle; each method is a C shim call)
#    * - new tensors, ATen ops
#      - ``at::empty_like``, ``x.contiguous()``
#      - ``torch::stable::empty_like``, ``torch::stable::contiguous``
#    * - dtype dispatch
#      - ``AT_DISPATCH_FLOATING_TYPES_AND2``
#      - ``THO_DISPATCH_V2(dtype, name, lambda, types...)``, header-only
#    * - checks
#      - ``TORCH_CHECK``, ``TORCH_CHECK_TYPE``, ``TORCH_CHECK_VALUE``
#        (Python sees ``RuntimeError``, ``TypeError``, ``ValueError``)
#      - ``STD_TORCH_CHECK`` (a ``std::runtime_error``: Python sees
#        ``RuntimeError``; typed errors belong in a Python wrapper)
#    * - device and stream
#      - ``c10::cuda::CUDAGuard``, ``getCurrentCUDAStream()``
#      - ``torch::stable::accelerator::DeviceGuard``,
#        ``aoti_torch_get_current_cuda_stream`` (C shim)
#    * - launch check
#      - ``C10_CUDA_CHECK``
#      - ``STD_CUDA_CHECK``
#    * - registration
#      - ``TORCH_LIBRARY``, ``TORCH_LIBRARY_IMPL``, ``m.impl(name, &fn)``
#      - ``STABLE_TORCH_LIBRARY``, ``STABLE_TORCH_LIBRARY_IMPL``,
#        ``m.impl(name, TORCH_BOX(&fn))``
#    * - build flags
#      - ``py_limited_api=True`` (:doc:`step 6 <06_the_build>`)
#      - the same, and ``TORCH_TARGET_VERSION`` set to torch 2.11
#        (``0x020b000000000000``): newer APIs fail to compile
#    * - the wheel
#      - ``cp310-abi3``, for the one torch release it was built with
#      - ``cp310-abi3``, for torch 2.11 and the later releases (within the
#        notes' two years): one per platform (and CUDA major version)
#
# The build
# ---------
# Two additions to a classic ``setup.py``: the target version, and the CUDA
# file built with ``CppExtension`` (it links no torch CUDA library, so a
# CPU-only torch with nvcc builds it). A third addition, ``_triton_aot``,
# puts Triton kernels in a CUDA build (`Triton kernels in the same wheel`_,
# below):
#
# .. literalinclude:: /../stable/setup.py
#    :language: python
#    :caption: stable/setup.py
#
# .. literalinclude:: /../stable/pyproject.toml
#    :language: toml
#    :caption: stable/pyproject.toml
#
# The Python package loads the library and adds the fake kernel:
#
# .. literalinclude:: /../stable/opguide_stable/__init__.py
#    :language: python
#    :caption: stable/opguide_stable/__init__.py
#
# Building the wheel
# ------------------
# Where the installed torch is recent enough, against it:
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

from guidekit import compile_checks
from guidekit.recorded import pages

# sphinx_gallery_thumbnail_path = "_thumbnails/15.png"
ROOT = compile_checks.source_root()
STABLE = ROOT / "stable"
OUT = ROOT / "build" / "opguide_stable"
print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")
# The sources use torch 2.13's stable headers; the wheel loads into 2.11 and later.
BUILDABLE = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)
library = None
NOT_BUILT = f"SKIPPED (torch {torch.__version__} is older than 2.13)"
if not BUILDABLE:
    print(
        f"SKIPPED: building needs torch 2.13 or later; this is torch {torch.__version__}. "
        "The recorded runs at the end of the page show a wheel built with 2.13."
    )
else:
    shutil.rmtree(OUT, ignore_errors=True)
    start = time.perf_counter()
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps"]
    build = subprocess.run(
        [*pip_wheel, str(STABLE), "-w", str(OUT / "dist")], capture_output=True, text=True
    )
    if build.returncode != 0:
        print(build.stdout[-3000:], build.stderr[-3000:])
    assert build.returncode == 0, "the stable-ABI wheel did not build"
    wheel = next((OUT / "dist").glob("*.whl"))
    print(f"built {wheel.name} in {time.perf_counter() - start:.0f} s")
    pip_install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run([*pip_install, "--target", str(OUT / "site"), str(wheel)], check=True)
    library = next((OUT / "site" / "opguide_stable").glob("_C*.so"))
    # What setup.py recorded about this build (the package reports it as BUILD_INFO).
    info = json.loads((OUT / "site" / "opguide_stable" / "_build_info.json").read_text())
    print(
        f"built with torch {info['torch']}, target {info['target_version']}, "
        f"CUDA kernel: {'yes' if info['cuda_kernel'] else 'no'}, Triton kernels compiled "
        f"ahead of time for: {', '.join(info['triton_aot']) or 'none'}"
    )

# %%
# Nothing pins a torch release beyond ``torch>=2.11``. ``USE_CUDA=1`` with
# nvcc adds the CUDA kernel.
#
# What the library takes from torch
# ---------------------------------
# Of the symbols ``nm -D --undefined-only`` lists, C shim names are fine;
# ``at::``/``c10::``/``torch::`` names tie a build to one torch. The wheel's
# library, then the classic ``opguide._C``:
#
# .. literalinclude:: /../stable/tools/check_abi.py
#    :language: python
#    :caption: stable/tools/check_abi.py
sys.path.insert(0, str(STABLE / "tools"))
import check_abi

from opguide import _library

if library is not None:
    pairs = [
        ("opguide_stable (stable ABI)", library),
        ("opguide._C (classic)", _library.library_path()),
    ]
    for name, path in pairs:
        shim, cpp = check_abi.c_shim_symbols(str(path)), check_abi.torch_cpp_symbols(str(path))
        print(f"{name:28} C shim: {len(shim):3}   C++ API: {len(cpp):3}")
        for symbol in cpp[:3]:
            print(f"{'':30}{symbol[:90]}")
    stable_cpp = check_abi.torch_cpp_symbols(str(library))
    assert not stable_cpp, f"the stable library uses the C++ API: {stable_cpp}"
    shim_all = check_abi.c_shim_symbols(str(library))
    calls = [s for s in shim_all if "_dtype_" not in s and "_type_" not in s]
    print("shim functions it calls (dtype and device constants left out):")
    print(textwrap.fill(", ".join(sorted(calls)), 88, initial_indent="  ", subsequent_indent="  "))
else:
    print(f"{NOT_BUILT}: no wheel, so no library to check.")

# %%
# When a classic call slips in
# ----------------------------
# A ``TORCH_CHECK`` where ``STD_TORCH_CHECK`` belongs: with
# ``TORCH_TARGET_VERSION`` defined the classic header refuses to compile;
# without it, the symbol check catches the slip:
from torch.utils import cpp_extension

probe_dir = OUT / "probe"
probe_dir.mkdir(parents=True, exist_ok=True)
text = (STABLE / "csrc" / "rms_norm.cpp").read_text()
text = text.replace(
    '#include "rms_norm.h"', '#include "rms_norm.h"\n#include <c10/util/Exception.h>'
)
text = text.replace("STD_TORCH_CHECK(x.is_cpu()", "TORCH_CHECK(x.is_cpu()", 1)
(probe_dir / "rms_norm_probe.cpp").write_text(text)
includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{STABLE / 'csrc'}"]
lib_dir = cpp_extension.library_paths()[0]
probe = probe_dir / "probe.so"


def compile_probe(*defines: str) -> subprocess.CompletedProcess:
    source = str(probe_dir / "rms_norm_probe.cpp")
    libraries = [f"-L{lib_dir}", "-lc10", "-ltorch_cpu"]
    command = ["c++", "-shared", "-fPIC", "-O1", "-std=c++17", *defines, *includes, source]
    return subprocess.run([*command, *libraries, "-o", str(probe)], capture_output=True, text=True)


if library is not None:
    with_define = compile_probe("-DTORCH_TARGET_VERSION=0x020b000000000000")
    lines = with_define.stderr.splitlines()
    errors = [line.split("error: ", 1)[1] for line in lines if "error: " in line]
    print(
        "with TORCH_TARGET_VERSION:", "compiled" if with_define.returncode == 0 else "compile error"
    )
    for line in errors[:2]:
        print("  ", line[:110])
    assert with_define.returncode != 0, "the classic header compiled under TORCH_TARGET_VERSION"
    without_define = compile_probe()
    assert without_define.returncode == 0, without_define.stderr[-3000:]
    found = check_abi.torch_cpp_symbols(str(probe))
    print(f"without it: compiled; probe.so needs {len(found)} C++ API symbol(s):")
    for symbol in found:
        print("  ", symbol[:110])
    assert found, "the check missed a classic TORCH_CHECK"
else:
    print(f"{NOT_BUILT}: the probe was not compiled.")

# %%
# A shim newer than the target, and glibc
# ---------------------------------------
# torch's stable headers declare each shim function added since 2.10 inside
# an ``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_X_0`` block; a build
# without ``TORCH_TARGET_VERSION`` can call one the oldest supported torch
# lacks. ``--target`` checks every shim symbol against those blocks.
# ``--manylinux`` compares the platform tag's glibc with the newest glibc,
# ``GLIBCXX_`` and ``CXXABI_`` versions the library asks for, as
# ``auditwheel`` does (:doc:`step 19 <19_ship_your_operator>`). The wheel's
# library, then a probe that calls the newest shim function:
if library is not None:
    versions = check_abi.shim_versions(check_abi.shim_headers())
    releases = sorted({v for v in versions.values() if v})
    added = {f"{a}.{b}": sum(v == (a, b) for v in versions.values()) for a, b in releases}
    print("shim functions by the release that added them:", added)
    assert check_abi.main([str(library), "--target", "2.11"]) == 0
    need, cxx = check_abi.glibc_needed(str(library)), check_abi.libstdcxx_needed(str(library))
    best = check_abi.oldest_tag(str(library))
    print(
        f"it asks for glibc {need[0]}.{need[1]}, "
        + ", ".join(f"{k} {'.'.join(map(str, v))}" for k, v in sorted(cxx.items()))
        + f": a wheel of it built here can be tagged manylinux_{best[0]}_{best[1]} at best, "
        "the oldest manylinux policy that covers them"
    )
    newest = releases[-1]
    name = sorted(n for n, v in versions.items() if v == newest)[0]
    late = probe_dir / "late.cpp"
    late.write_text(f'extern "C" void {name}();\nextern "C" void f() {{ {name}(); }}\n')
    compiled = ["c++", "-shared", "-fPIC", str(late), "-o", str(probe_dir / "late.so")]
    subprocess.run(compiled, check=True)
    before = f"{newest[0]}.{newest[1] - 1}"
    print(f"\na probe that calls {name}, checked for torch {before}:")
    assert check_abi.main([str(probe_dir / "late.so"), "--target", before]) == 1
else:
    print(f"{NOT_BUILT}: no library to check.")

# %%
# Its tests, from the wheel
# -------------------------
# The tests import only ``opguide_stable`` and torch, so they run wherever
# the wheel is installed; here, with the torch it was built against:
#
# .. literalinclude:: /../stable/tests/test_opguide_stable.py
#    :language: python
#    :caption: stable/tests/test_opguide_stable.py
if library is not None:
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    env = dict(os.environ, PYTHONPATH=str(OUT / "site"))
    run = subprocess.run(
        [*pytest, str(STABLE / "tests")], capture_output=True, text=True, cwd=OUT, env=env
    )
    summary = [line for line in run.stdout.splitlines() if " passed" in line or " failed" in line]
    print(summary[-1] if summary else run.stdout[-2000:])
    assert run.returncode == 0, run.stdout[-3000:]
else:
    print(f"{NOT_BUILT}: no wheel, so its tests did not run here; the recorded runs below did.")

# %%
# The same wheel under other torch releases
# -----------------------------------------
# Wheels built against torch 2.13 (target 2.11), their tests run under other
# releases by ``tools/record_stable_abi.py``; each block is one recorded run:
records = sorted((ROOT / "docs" / "recorded").glob("stable_abi_*.json"))
cross = [json.loads(p.read_text()) for p in records]
for path, r in zip(records, cross, strict=True):
    b, u = r["built_with"], r["run_with"]
    print(
        f"built with torch {b['torch']} (target {b['target_version']}, "
        f"CUDA kernel: {'yes' if b['cuda_kernel'] else 'no'}), {r['date'][:10]}"
    )
    print(f"  ran with torch {u['torch']} on {u['device']}: {r['pytest_summary']}")
    if b.get("triton_aot"):
        print(f"  Triton forward compiled ahead of time for: {', '.join(b['triton_aot'])}")
    pages.say_stale(path.name)
different = [r for r in cross if r["run_with"]["torch"] != r["built_with"]["torch"]]
on_gpu = [
    r for r in different if r["run_with"]["device"] != "CPU" and r["built_with"]["cuda_kernel"]
]
passed = sum(r["pytest_exit_code"] == 0 for r in different)
print(
    f"{len(different)} of {len(cross)} runs used a torch other than the build's; {passed} passed."
)
print(f"The CUDA kernel ran in {len(on_gpu)} of them.")
if len(different) > len(on_gpu):
    print(
        "In the others the machine had no GPU or the wheel no CUDA kernel (the tests"
        " parametrise over the devices present)."
    )


# %%
# Triton kernels in the same wheel
# --------------------------------
# :doc:`Step 9.3 <09_triton_kernel_3_ahead_of_time>` compiles opguide's
# Triton kernels when the library is built and launches them from C++. The
# launcher, ``csrc/triton_aot/triton_aot_launch.cu``, calls no torch
# function: it takes pointers and a stream, and raises through
# ``check.h``'s macro, which is ``STD_TORCH_CHECK`` in a stable build. So a
# CUDA build of this library where ``triton`` is installed (``setup.py``'s
# ``_triton_aot``) compiles the inference forward for the build's GPUs
# (``OPGUIDE_TRITON_AOT``, else ``TORCH_CUDA_ARCH_LIST``, else the visible
# GPUs), with step 9.3's planner and keys, embeds the images, and defines
# ``opguide_stable::rms_norm_triton_aot``: ``rms_norm(x, w,
# backend="triton")``. The library holds the images and launches them
# through the CUDA runtime, with no Python in it, so Triton is needed where
# the wheel is built, not where it runs; the wheel stays one per platform and
# CUDA major version. Where none of the compiled
# kernels fits a call (another GPU, rows of more than 16384 elements,
# float64, a view at an offset, a CPU tensor, ``OPGUIDE_PDL=0`` or
# ``OPGUIDE_TRITON_AOT_TABLE=0`` in the environment), the library's own
# kernel runs after a warning that says why.
#
# To build it, in an opguide checkout (``stable/setup.py`` reads
# ``csrc/minimal/``, ``csrc/triton_aot/`` and ``opguide/triton/`` beside
# ``stable/``), with torch 2.13 or later, a CUDA toolkit of 12.4 or later
# (nvcc, whose runtime loads an image no nvcc compiled) and ``triton``
# installed, run the ``pip wheel`` command of `Building the wheel`_ with
# ``USE_CUDA=1`` and ``TORCH_CUDA_ARCH_LIST`` (``"9.0"`` for an H100 or H200)
# in the environment. Its line there names the targets compiled in
# (``BUILD_INFO["triton_aot"]``); for "none", ``setup.py``'s output says
# why. The operator:
#
# .. literalinclude:: /../stable/csrc/rms_norm_triton_aot.cu
#    :language: cuda
#    :caption: stable/csrc/rms_norm_triton_aot.cu
#
# setuptools takes sources from inside the project's folder only, so one
# file there includes the launcher:
#
# .. literalinclude:: /../stable/csrc/triton_aot_launch.cu
#    :language: cuda
#    :caption: stable/csrc/triton_aot_launch.cu
#
# .. literalinclude:: /../csrc/triton_aot/check.h
#    :language: cpp
#    :caption: csrc/triton_aot/check.h
#
# The recorded runs on a GPU time an eager call of each backend (bfloat16;
# rounds that take the two in turn, quartiles over the rounds):
timed = [(path, r) for path, r in zip(records, cross, strict=True) if r.get("per_call_us")]
for path, r in timed:
    method = r["per_call_method"]
    print(
        f"{r['run_with']['device']}, torch {r['run_with']['torch']}, {method['dtype']}, "
        f"{method['rounds']} rounds of {method['calls']} calls; us per call, median (quartiles)"
    )
    print(f"  {'shape':>10} {'CUDA kernel':>22} {'Triton, compiled ahead':>24}")
    for shape, by in r["per_call_us"].items():
        cells = [f"{q[1]:7.1f} ({q[0]:.1f}-{q[2]:.1f})" for q in (by["cpp"], by["triton"])]
        print(f"  {shape:>10} {cells[0]:>22} {cells[1]:>24}")
    for shape, by in r["per_call_us"].items():
        (c1, cm, c3), (t1, tm, t3) = by["cpp"], by["triton"]
        if t1 > c3 or c1 > t3:
            faster = "the Triton kernel" if tm < cm else "the CUDA kernel"
            say = f"{faster} is faster: Triton {tm:.1f} us, CUDA {cm:.1f} us"
        else:
            say = "no measurable difference (the quartiles overlap)"
        print(f"  {shape}: {say}")
    pages.say_stale(path.name)
if not timed:
    print("No recorded run timed the Triton forward of the stable wheel.")

# %%
# This wheel's CUDA kernel is :doc:`step 3 <03_cuda_kernel>`'s minimal one,
# written to teach, not tuned; the Triton forward is the library's own,
# planned per row length as step 9 plans it. A gap above compares a teaching
# kernel with a tuned one, not CUDA with Triton. The same, as a figure:
if timed:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(timed), figsize=(9, 3.2), layout="constrained", squeeze=False)
    fig.set_facecolor("white")
    for ax, (_, r) in zip(axes[0], timed, strict=True):
        shapes = list(r["per_call_us"])
        for k, (backend, label) in enumerate(
            (("cpp", "CUDA kernel"), ("triton", "Triton, compiled ahead of time"))
        ):
            q = [r["per_call_us"][s][backend] for s in shapes]
            spots = [i + 0.4 * k for i in range(len(shapes))]
            err = [[m - lo for lo, m, _ in q], [hi - m for _, m, hi in q]]
            ax.barh(spots, [m for _, m, _ in q], 0.4, xerr=err, capsize=2, label=label)
        ax.set_yticks([i + 0.2 for i in range(len(shapes))], shapes)
        ax.invert_yaxis()
        ax.set(title=f"{r['run_with']['device']}, torch {r['run_with']['torch']}",
               xlabel="us per eager call (median, quartiles)")  # fmt: skip
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")  # beside the shortest bars
    plt.show()


# %%
# A CUDA build links the runtime by its ``SONAME``; the toolkit here, where
# there is one, says which:
def cudart_soname() -> tuple[str | None, str]:
    """The SONAME of the libcudart.so that ``-lcudart`` finds, or None and why not.

    nvcc's library folders first (``nvcc --dryrun`` prints them), then the
    linker's cache (``ldconfig -p``, where a distribution installs CUDA).
    """
    if shutil.which("readelf") is None:
        return None, "no readelf here"
    folders = []
    nvcc = compile_checks.find_nvcc()
    if nvcc is not None:
        dry = subprocess.run(
            [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        folders = re.findall(r'-L"?([^"\s]+)"?', dry.stdout + dry.stderr)
    candidates = [Path(f) / "libcudart.so" for f in folders]
    if shutil.which("ldconfig") or Path("/sbin/ldconfig").exists():
        cache = subprocess.run(
            [shutil.which("ldconfig") or "/sbin/ldconfig", "-p"],
            capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        candidates += [Path(p) for p in re.findall(r"libcudart\.so \([^)]*\) => (\S+)", cache)]
    for library in candidates:
        if library.exists():
            out = subprocess.run(
                ["readelf", "-d", str(library)], capture_output=True, text=True, timeout=60
            )
            found = re.search(r"Library soname: \[(.+?)\]", out.stdout)
            return (found[1], "") if found else (None, "its libcudart.so names no SONAME")
    where = "nvcc's folders or " if nvcc is not None else ""
    return None, f"no libcudart.so in {where}the linker's cache here"


soname, where = cudart_soname()
print(f"the CUDA runtime here: {soname}" if soname else f"SKIPPED: {where}")

# %%
# What the stable ABI does not cover
# ----------------------------------
# * **The CUDA runtime**: its name carries the CUDA major version, so one
#   wheel per CUDA major remains (no CUDA 13 build has run against a CUDA 12
#   torch here).
# * **Older torch**: ``TORCH_TARGET_VERSION`` is a floor; the wheel is for
#   2.11 and later.
# * **The API surface**: ``torch/csrc/stable/ops.h`` wraps a small set of ATen
#   operators, mostly through ``torch_call_dispatcher``, which calls any
#   operator by name.
# * **The Python side**: fake kernels come from Python as in Part I, and the
#   stable headers (`torch/csrc/stable
#   <https://github.com/pytorch/pytorch/tree/main/torch/csrc/stable>`__) hold
#   no autograd API: gradients come from ``register_autograd``.
#
# ``stable/`` is a whole project but for the device code it reads from
# ``csrc/minimal/`` (and, for its Triton variant, ``csrc/triton_aot/`` and
# ``opguide/triton/``): copy it with those, rename the namespace, replace
# the kernel.
