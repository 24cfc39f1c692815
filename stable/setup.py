"""Build ``opguide_stable._C`` on the LibTorch stable ABI: one wheel for every torch.

The library includes only torch's stable headers and calls torch only through
its C shim, so a build made against one torch loads into the later ones (from
``TORCH_TARGET_VERSION`` on, for the two years at least that PyTorch keeps each
shim function). It has no Python module in it either, so with
``py_limited_api`` the wheel is tagged ``cp310-abi3``: one wheel per platform,
not one per Python and torch pair.

Environment switches:

``USE_CUDA``
    ``1`` builds ``csrc/rms_norm_cuda.cu`` (it needs nvcc and the CUDA runtime
    library, not a CUDA build of torch), ``0`` never does, unset builds it when
    torch has CUDA and a toolkit is found.
``TORCH_CUDA_ARCH_LIST``
    GPU architectures; with no GPU visible and none given, ``8.0;9.0+PTX``.
``OPGUIDE_TRITON_AOT``
    The GPUs a CUDA build compiles opguide's Triton RMSNorm forward for,
    ahead of time, into ``opguide_stable::rms_norm_triton_aot``
    (``csrc/rms_norm_triton_aot.cu``): ``sm_90,sm_80`` names them (AMD names
    are left out: this library is built for NVIDIA GPUs), ``0`` compiles
    none; unset, those of ``TORCH_CUDA_ARCH_LIST``, else of the visible GPUs.
    It needs triton and a CUDA 12.4 or later toolkit at build time only.

Build against the torch you have: ``pip wheel --no-build-isolation --no-deps .``
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import torch
import torch.utils.cpp_extension as cpp_extension
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
# torch 2.11 (major << 56 | minor << 48): the headers then refuse to compile
# the APIs that torch 2.11 does not have.
TARGET = (2, 11)
TORCH_TARGET_VERSION = f"0x{TARGET[0]:02x}{TARGET[1]:02x}000000000000"
# The device code is the torch-free header of the guide's step 3.
MINIMAL = os.path.join(HERE, os.pardir, "csrc", "minimal")
# opguide's C++ folders: the launcher of Triton kernels compiled ahead of
# time, torch-free, is triton_aot/ there.
OPGUIDE_CSRC = os.path.join(os.path.dirname(HERE), "csrc")
AOT_OUT = os.path.join(HERE, "build", "triton_aot")
DEFAULT_ARCH_LIST = "8.0;9.0+PTX"


# torch looks for a CUDA toolkit only when torch itself was built with CUDA.
# This library needs none of torch's CUDA libraries, only nvcc and the CUDA
# runtime, so a CPU-only torch can build its CUDA kernel too: CUDA_HOME set,
# or the toolkit of the nvcc on PATH.
if cpp_extension.CUDA_HOME is None and os.environ.get("USE_CUDA") == "1":
    cpp_extension.CUDA_HOME = cpp_extension._find_cuda_home()
CUDA_HOME = cpp_extension.CUDA_HOME


# The sources use the stable headers of torch 2.13 (THO_DISPATCH_V2 and the
# stable ops); the library they make loads into torch 2.11 and later.
if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13):
    raise SystemExit(
        f"setup.py: build opguide_stable against torch 2.13 or later (found {torch.__version__}); "
        "the wheel it makes loads into torch 2.11 and later"
    )


def _cudart_dir() -> str | None:
    for folder in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
        path = os.path.join(CUDA_HOME or "", folder)
        if CUDA_HOME and os.path.exists(os.path.join(path, "libcudart.so")):
            return path
    return None


def _want_cuda() -> bool:
    requested = os.environ.get("USE_CUDA", "")
    if requested not in ("", "0", "1"):
        raise SystemExit(f"setup.py: USE_CUDA must be 0 or 1, got {requested!r}")
    if requested == "0":
        return False
    problems = []
    if CUDA_HOME is None:
        problems.append("no CUDA toolkit was found (set CUDA_HOME)")
    elif _cudart_dir() is None:
        problems.append(f"the CUDA toolkit at {CUDA_HOME} has no libcudart.so to link")
    if requested == "" and torch.version.cuda is None:
        problems.append(f"torch {torch.__version__} has no CUDA (USE_CUDA=1 builds it anyway)")
    if problems and requested == "1":
        raise SystemExit("setup.py: USE_CUDA=1 but " + "; ".join(problems))
    if problems:
        print("setup.py: CPU kernel only: " + "; ".join(problems), file=sys.stderr)
    return not problems


def _toolkit_version() -> tuple[int, int] | None:
    """The CUDA toolkit's version, as ``nvcc --version`` reports it (None if it does not)."""
    nvcc = os.path.join(CUDA_HOME or "", "bin", "nvcc")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return None
    found = re.search(r"release (\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _triton_aot() -> tuple[list[str], list[str]]:
    """The Triton forward compiled ahead of time for the build's GPUs: (sources, targets).

    Sources: the table of kernels (``opguide/triton/aot_build.py`` compiles
    it), opguide's launcher and this library's operator; none where no
    kernel was compiled (``OPGUIDE_TRITON_AOT=0``, no NVIDIA target Triton
    knows, no triton installed), or where the toolkit predates CUDA 12.4,
    whose runtime library API loads an image no nvcc of the build compiled.
    """
    spec = importlib.util.spec_from_file_location(
        "_opguide_aot_build", os.path.join(HERE, os.pardir, "opguide", "triton", "aot_build.py")
    )
    aot_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aot_build)

    def visible() -> list[str]:  # make_extension sets the list when no GPU is visible
        return [
            "sm_{}{}".format(*torch.cuda.get_device_capability(i))
            for i in range(torch.cuda.device_count())
        ]

    targets, named = aot_build.targets(visible=visible)
    # This library is built for NVIDIA GPUs only.
    targets = [t for t in targets if t.startswith("sm_")]
    if not targets:
        if named:
            print(
                "setup.py: no Triton kernels compiled ahead of time: OPGUIDE_TRITON_AOT "
                "names no NVIDIA target (sm_XY)",
                file=sys.stderr,
            )
        return [], []
    version = _toolkit_version()
    if version is None or version < (12, 4):
        found = (
            f"this one is {version[0]}.{version[1]}"
            if version
            else "nvcc does not report this one's version"
        )
        print(
            "setup.py: no Triton kernels compiled ahead of time: loading them at run "
            f"time needs a CUDA 12.4 or later toolkit, and {found}",
            file=sys.stderr,
        )
        return [], []
    table = aot_build.compile_table(targets, AOT_OUT, ["--inference"], skip_unknown=not named)
    with open(os.path.join(AOT_OUT, "manifest.json")) as f:
        manifest = json.load(f)
    if not manifest["artifacts"]:
        return [], []
    # setuptools takes sources by paths inside this folder: the launcher is
    # included by csrc/triton_aot_launch.cu.
    sources = [os.path.relpath(table, HERE), "csrc/triton_aot_launch.cu"]
    sources.append("csrc/rms_norm_triton_aot.cu")
    return sources, sorted({a["target"] for a in manifest["artifacts"]})


def make_extension() -> CppExtension:
    use_cuda = _want_cuda()
    defines = [f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}"]
    aot_targets: list[str] = []
    sources = ["csrc/rms_norm.cpp"]
    # Hidden symbols: the library exports none of its own functions (it is
    # loaded by torch.ops.load_library), so that where either this library or
    # opguide's is loaded RTLD_GLOBAL, neither binds to the other's copy of
    # opguide's launcher.
    extra = {"cxx": ["-O3", "-fvisibility=hidden", *defines]}
    kwargs = {}
    if use_cuda:
        if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
            os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_ARCH_LIST
        sources.append("csrc/rms_norm_cuda.cu")
        aot_sources, aot_targets = _triton_aot()
        sources += aot_sources
        # USE_CUDA declares the shim's CUDA functions (the current stream);
        # OPGUIDE_STABLE_ABI gives the launcher the stable error check
        # (csrc/triton_aot/check.h).
        extra["nvcc"] = ["-O3", "-Xcompiler", "-fvisibility=hidden", "-DUSE_CUDA", *defines]
        extra["nvcc"] += ["-DOPGUIDE_STABLE_ABI"] if aot_sources else []
        # The current-stream call lives in libtorch_cuda, which libtorch.so pulls
        # in on a CUDA torch: keep libtorch.so as a dependency even though the
        # linker finds none of its symbols when the build's torch has no CUDA.
        kwargs = {
            "libraries": ["cudart"],
            "library_dirs": [_cudart_dir()],
            "extra_link_args": ["-Wl,--no-as-needed", "-ltorch", "-Wl,--as-needed"],
        }
    print(
        f"setup.py: opguide_stable._C from {', '.join(sources)} | built with torch "
        f"{torch.__version__} | TORCH_TARGET_VERSION={TORCH_TARGET_VERSION} | "
        f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '-')}",
        file=sys.stderr,
    )
    # What the build used, for the package to report wherever it is loaded.
    info = {
        "torch": torch.__version__,
        "target_version": f"{TARGET[0]}.{TARGET[1]}",
        "cuda_kernel": use_cuda,
        # The GPUs whose Triton forward is compiled in (rms_norm_triton_aot).
        "triton_aot": aot_targets,
        "python": sys.version.split()[0],
    }
    with open(os.path.join(HERE, "opguide_stable", "_build_info.json"), "w") as f:
        json.dump(info, f)
    # CppExtension, not CUDAExtension, even for the .cu file: the library needs
    # no torch CUDA library (c10_cuda, torch_cuda), only the CUDA runtime.
    return CppExtension(
        name="opguide_stable._C",
        sources=sources,
        include_dirs=[os.path.join(HERE, "csrc"), MINIMAL, OPGUIDE_CSRC],
        extra_compile_args=extra,
        py_limited_api=True,
        **kwargs,
    )


setup(
    ext_modules=[make_extension()],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
