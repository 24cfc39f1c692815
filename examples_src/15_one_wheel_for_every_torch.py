r"""
Step 15: One wheel for every torch (the stable ABI)
===================================================

The library of steps :doc:`2 <02_cpp_cpu_kernel>` to :doc:`14 <14_debugging>`
uses LibTorch's C++ API (``at::Tensor``, ``TORCH_CHECK``,
``c10::cuda::getCurrentCUDAStream``). That API has no binary compatibility
promise: a library built against one torch release calls C++ functions by their
mangled names, and the next release may rename, move or change them. The
symptom is familiar: ``undefined symbol: _ZN3c10...`` after
``pip install -U torch``, and one wheel to build per torch release.

PyTorch's answer is the **LibTorch stable ABI** (`its notes
<https://docs.pytorch.org/docs/stable/notes/libtorch_stable_abi.html>`__, and
the `stable C++ API <https://docs.pytorch.org/cppdocs/api/stable/index.html>`__,
"when distributing pre-compiled binaries"): headers under
``torch/csrc/stable/`` and ``torch/headeronly/``, and every call into torch
made through a C shim whose functions keep their signatures. A library built
against one torch loads into the later ones, from the version it targets on:
the notes promise each shim function for at least two years after the
release that brings it.

In this step you will learn:

* how the running example's forward, CPU and CUDA, reads on the stable ABI,
  and where it differs from the classic API;
* how ``TORCH_TARGET_VERSION`` and ``py_limited_api`` give one wheel per
  platform;
* how to check a built library for C++ API symbols, shim functions newer than
  its target torch and glibc versions newer than its platform tag, and what the
  check finds when one slips in;
* that a wheel built once passes its tests under other torch releases
  (recorded runs, each saying whether its wheel held the CUDA kernel).

The project lives in ``stable/`` beside the guide's library: a package
``opguide_stable`` with one operator, ``opguide_stable::rms_norm``.
"""

# %%
# The CPU kernel on the stable ABI
# --------------------------------
# Compare with :doc:`step 2 <02_cpp_cpu_kernel>`'s
# ``csrc/minimal/rms_norm_minimal.cpp``: the loop is the same; what changes is
# every place the file touches torch.
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
# The device code is :doc:`step 3 <03_cuda_kernel>`'s torch-free header,
# included as it is. Only the wrapper changes; compare with
# ``csrc/minimal/rms_norm_minimal_cuda.cu``:
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
#      - ``torch::stable::empty_like``, ``torch::stable::contiguous``: a
#        small set in ``torch/csrc/stable/ops.h``, growing each release
#    * - dtype dispatch
#      - ``AT_DISPATCH_FLOATING_TYPES_AND2``
#      - ``THO_DISPATCH_V2(dtype, name, lambda, types...)``, header-only
#    * - accumulation type
#      - ``at::opmath_type<scalar_t>``
#      - written out (``acc_type`` in ``rms_norm.h``)
#    * - checks
#      - ``TORCH_CHECK``, ``TORCH_CHECK_TYPE``, ``TORCH_CHECK_VALUE``
#        (Python sees ``RuntimeError``, ``TypeError``, ``ValueError``)
#      - ``STD_TORCH_CHECK`` (a ``std::runtime_error``: Python sees
#        ``RuntimeError``; typed errors belong in a Python wrapper)
#    * - threads
#      - ``at::parallel_for``
#      - ``torch::stable::parallel_for``
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
# ``setup.py`` is the one of :doc:`step 6 <06_the_build>` with two additions:
# the target version, and the CUDA file built with ``CppExtension`` (the
# library links no torch CUDA library, so a CPU-only torch with nvcc can build
# the CUDA kernel too):
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
# Where the installed torch is recent enough, ``pip wheel`` builds it against
# that torch (no build isolation), then the wheel is installed into a folder of
# its own:
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
        f"CUDA kernel: {'yes' if info['cuda_kernel'] else 'no'}"
    )

# %%
# The wheel's tag, ``cp310-abi3``, says "any CPython from 3.10 on". Nothing in
# the name or the metadata pins a torch release beyond ``torch>=2.11``. With a
# CPU-only torch and no ``USE_CUDA=1`` the wheel holds the CPU kernel only;
# ``USE_CUDA=1`` with nvcc adds the CUDA kernel (each recorded run below says
# which its wheel held).
#
# What the library takes from torch
# ---------------------------------
# ``nm -D --undefined-only`` lists the symbols a library needs from elsewhere.
# This small script sorts them: names from the C shim are fine, demangled
# ``at::``/``c10::``/``torch::`` names tie the build to one torch. The cell
# runs it on the wheel's library and on the classic ``opguide._C``:
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
# The easiest slip is a ``TORCH_CHECK`` (the classic macro) where
# ``STD_TORCH_CHECK`` belongs. Where the wheel was built, the cell compiles the
# CPU file twice more with one check switched to the classic macro (and its
# header included). With ``TORCH_TARGET_VERSION`` defined, torch's classic
# headers refuse to compile;
# in a build that forgot the define, the file compiles, and the symbol check
# catches it:
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
# Two more promises a wheel makes. torch's stable headers declare each shim
# function added since torch 2.10 inside an
# ``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_X_0`` block, which names the
# release that added it (the older ``aoti_torch_*`` functions sit outside any
# block: every torch with the C shim has them); a build without
# ``TORCH_TARGET_VERSION`` can call one that the oldest supported torch lacks,
# and only that torch finds out, at load time. ``--target`` reads those blocks
# from the installed headers and checks every shim symbol the library imports.
# A platform tag such as ``manylinux_2_28`` promises that the library loads
# with glibc 2.28 and the libstdc++ of those distributions; ``--manylinux``
# compares it with the newest glibc, ``GLIBCXX_`` and ``CXXABI_`` symbol
# versions the library asks for, as ``auditwheel`` does (:doc:`step 19
# <19_ship_your_operator>` repairs a wheel with it). The cell checks the wheel's library, then a
# probe that calls the newest shim function the installed torch declares:
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
# The tests import only ``opguide_stable`` and torch, so they run wherever the
# wheel is installed. Where the wheel was built above, they run here with the
# torch it was built against:
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
# The promise is about other releases, which this build does not have.
# Wheels built against torch 2.13 (target 2.11) were carried to other
# machines and their tests run there with the repository's
# ``tools/record_stable_abi.py``; each block below is one recorded run, and
# says whether its wheel held the CUDA kernel:
records = sorted((ROOT / "docs" / "recorded").glob("stable_abi_*.json"))
cross = [json.loads(p.read_text()) for p in records]
for path, r in zip(records, cross, strict=True):
    b, u = r["built_with"], r["run_with"]
    print(
        f"built with torch {b['torch']} (target {b['target_version']}, "
        f"CUDA kernel: {'yes' if b['cuda_kernel'] else 'no'}), {r['date'][:10]}"
    )
    print(f"  ran with torch {u['torch']} on {u['device']}: {r['pytest_summary']}")
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
# A CUDA build links the CUDA runtime by the name the runtime gives itself,
# its ``SONAME``. The toolkit here, where there is one, says which (the
# ``libcudart.so`` that ``-lcudart`` finds, read with ``readelf -d``):
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
# * **The CUDA runtime.** The CUDA build links the runtime by that name,
#   which carries the CUDA major version (``libcudart.so.13`` from CUDA 13),
#   and a torch of another CUDA major brings another runtime; this guide has
#   not run a CUDA 13 build against a CUDA 12 torch. One wheel per CUDA major
#   version remains.
# * **Older torch.** ``TORCH_TARGET_VERSION`` is a floor: the headers let the
#   library call the shim functions of 2.11 and earlier, so the wheel is for
#   2.11 and later; this guide does not run it on 2.10.
# * **The API surface.** ``torch/csrc/stable/ops.h`` wraps a small set of ATen
#   operators (``empty_like``, ``contiguous``, ``copy_``, ``sum``, ``matmul``,
#   ...). Most of those wrappers are inline calls of
#   ``torch_call_dispatcher`` (or ``aoti_torch_call_dispatcher``), which
#   calls any operator by name; the list of shim functions the library calls,
#   printed above where the check ran, shows which of them it uses.
# * **The Python side.** The fake kernel is registered from Python
#   (``torch.library``), as for the classic library
#   (:doc:`step 5 <05_bindings_and_registration>`). The stable ABI's headers
#   (`torch/csrc/stable <https://github.com/pytorch/pytorch/tree/main/torch/csrc/stable>`__)
#   hold no autograd API: an
#   operator built on it that needs gradients registers its formula from
#   Python with ``register_autograd``, as :doc:`step 8 <08_autograd>` shows
#   (the classic library's formula is C++).
#
# ``stable/`` is a whole project: copy it, rename the namespace, and replace
# the kernel with yours.
