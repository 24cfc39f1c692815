"""Build the compiled half of opguide: one extension, ``opguide._C``.

Environment switches (read at build time):

``USE_CUDA``
    ``1`` builds the CUDA sources (the ``.cu`` files of ``csrc/``) and fails if that is not
    possible, ``0`` never builds them, unset builds them when the installed
    torch was built with CUDA (or ROCm) and a CUDA toolkit is found.
``DEBUG``
    ``1`` compiles with ``-O0 -g`` (and ``-G`` for device code).
``TORCH_CUDA_ARCH_LIST``
    GPU architectures to compile for, e.g. ``"8.0;9.0"``; read by
    :class:`torch.utils.cpp_extension.BuildExtension` itself. Unset, torch
    takes the architectures of the visible GPUs; with none visible,
    :data:`DEFAULT_ARCH_LIST`.
``MAX_JOBS``
    Parallel compile jobs for ninja; read by ``BuildExtension`` itself.

Build without build isolation so that the extension is compiled against the
torch you already have: ``pip install --no-build-isolation .``
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
import sysconfig

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import (
    CUDA_HOME,
    ROCM_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
)

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("csrc")


def _registry():
    """opguide/registry.py, read as a file: the package cannot be imported before it is built."""
    spec = importlib.util.spec_from_file_location(
        "_opguide_registry", os.path.join(HERE, "opguide", "registry.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


# The library's folders: the namespace file at the top of csrc/, the shared
# device code, the launcher of the Triton kernels compiled ahead of time, and
# the folder of each operator of the registry. The guide's demo folders
# (minimal/, dispatcher/, index_inputs/, device_checks/) stay out.
LIBRARY_DIRS = ["", "common", "triton_aot"] + [
    os.path.relpath(op.csrc, CSRC) for op in _registry().OPERATORS if op.csrc is not None
]


def _csrc_files(*patterns: str) -> list[str]:
    """The files of the library's csrc/ folders that match any of `patterns`."""
    found = []
    for folder in LIBRARY_DIRS:
        for pattern in patterns:
            found += glob.glob(os.path.join(CSRC, folder, pattern))
    return sorted(found)


# py_limited_api=True makes torch define Py_LIMITED_API for CPython 3.10, the
# oldest Python torch supports; the wheel's tag says the same (cp310-abi3).
LIMITED_API_TAG = "cp310"
# When no GPU is visible torch has no architecture to pick: Ampere (A100; its
# code also runs on RTX 30/40), Hopper (H100/H200), and PTX for newer GPUs.
# The kernels use cp.async, so nothing older than sm_80.
DEFAULT_ARCH_LIST = "8.0;9.0+PTX"
# Only this repository's: guidekit/ (the guide's benchmarks, compile checks
# and build information) needs a checkout, so an editable install
# (pip install -e .) installs it next to opguide and a wheel leaves it out.
EDITABLE = "editable_wheel" in sys.argv or "develop" in sys.argv
# The library's packages: opguide, its Triton kernels and the opt-in experiments.
PACKAGES = ["opguide", "opguide.*"]


def _flag(name: str) -> bool | None:
    """Reads a 0/1 environment switch; ``None`` when it is unset."""
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    if value not in ("0", "1"):
        raise SystemExit(f"setup.py: {name} must be 0 or 1, got {value!r}")
    return value == "1"


def _has_cudart(toolkit: str) -> bool:
    """Whether the toolkit holds the CUDA runtime that CUDAExtension links (-lcudart)."""
    folders = (
        "lib64",
        "lib",
        os.path.join("targets", "x86_64-linux", "lib"),
        os.path.join("lib", "x64"),
    )
    names = ("libcudart.so", "cudart.lib")
    return any(os.path.exists(os.path.join(toolkit, f, n)) for f in folders for n in names)


def _want_cuda() -> bool:
    requested = _flag("USE_CUDA")
    torch_has_gpu = torch.version.cuda is not None or torch.version.hip is not None
    toolkit = CUDA_HOME if torch.version.hip is None else ROCM_HOME
    cu_sources = _csrc_files("*.cu")
    if requested is False:
        return False
    problems = []
    if not torch_has_gpu:
        problems.append(f"torch {torch.__version__} was built without CUDA or ROCm")
    if toolkit is None:
        problems.append("no CUDA/ROCm toolkit was found (set CUDA_HOME)")
    elif torch.version.cuda is not None and not _has_cudart(toolkit):
        problems.append(
            f"the CUDA toolkit at {toolkit} has nvcc but no CUDA runtime library "
            "(libcudart) to link with (set CUDA_HOME to a complete toolkit)"
        )
    if not cu_sources:
        problems.append("there are no .cu sources in csrc/")
    if problems:
        if requested:
            raise SystemExit("setup.py: USE_CUDA=1 but " + "; ".join(problems))
        print("setup.py: building CPU kernels only: " + "; ".join(problems))
        return False
    return True


def make_extension():
    debug = bool(_flag("DEBUG"))
    use_cuda = _want_cuda()
    sources = _csrc_files("*.cpp")
    if use_cuda:
        sources += _csrc_files("*.cu")
    depends = _csrc_files("*.h", "*.cuh")

    # No Python.h API is used (registration goes through TORCH_LIBRARY), so the
    # library can target the stable ABI and one wheel serves every CPython >= 3.10.
    # Python's own compiler flags hold -g, so a release build would carry debug
    # information: -g0 leaves it out, which makes the compile faster and the
    # library much smaller. DEBUG=1 keeps it.
    cxx = ["-O0", "-g"] if debug else ["-O3", "-g0"]
    # at::parallel_for runs on PyTorch's intra-op threads only in code compiled
    # with OpenMP (ATen/ParallelOpenMP.h); without the flag it is a plain loop
    # on one thread. The library then shares torch's OpenMP runtime (libgomp).
    openmp = ["/openmp"] if os.name == "nt" else ["-fopenmp"]
    cxx += openmp
    nvcc = ["-O0", "-g", "-G"] if debug else ["-O3", "-lineinfo"]

    if use_cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
        os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_ARCH_LIST
        print(f"setup.py: no GPU visible, so TORCH_CUDA_ARCH_LIST={DEFAULT_ARCH_LIST}")

    kind = CUDAExtension if use_cuda else CppExtension
    extra = {"cxx": cxx, "nvcc": nvcc} if use_cuda else {"cxx": cxx}
    if use_cuda:
        extra["cxx"] = cxx + ["-DOPGUIDE_WITH_CUDA"]
        extra["nvcc"] = nvcc + ["-DOPGUIDE_WITH_CUDA"]
    print(
        "setup.py: opguide._C from "
        + ", ".join(os.path.basename(s) for s in sources)
        + f" | torch {torch.__version__} | cuda={'yes' if use_cuda else 'no'}"
        + f" | debug={'yes' if debug else 'no'}"
        + f" | TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '(torch default)')}"
        + f" | MAX_JOBS={os.environ.get('MAX_JOBS', '(torch default)')}",
        file=sys.stderr,
    )
    return kind(
        name="opguide._C",
        sources=sources,
        depends=depends,
        include_dirs=[os.path.join(HERE, CSRC)],
        extra_compile_args=extra,
        extra_link_args=[] if os.name == "nt" else openmp,
        py_limited_api=True,
    )


# The classic C++ API gives no binary compatibility across torch releases
# (https://docs.pytorch.org/docs/stable/notes/libtorch_stable_abi.html): the
# library links against mangled C++ symbols of libtorch (step 15 lists them),
# which another release may change, so the wheel pins the minor release it was
# built with instead of installing beside a torch it may fail to load into.
TORCH_RELEASE = ".".join(torch.__version__.split("+")[0].split(".")[:2])


class BuildInTree(BuildExtension):
    """torch's BuildExtension, with its objects in ``build/temp.*`` for every kind of install.

    ``pip wheel`` and ``pip install .`` compile into ``build/temp.<platform>-<python>``
    of the source tree, but an editable install (``pip install -e .``) compiles
    in a temporary folder that pip deletes afterwards, so every editable
    reinstall recompiles every source. With one folder for all of them, ninja
    recompiles only the sources that changed since any earlier build.
    """

    def finalize_options(self):
        super().finalize_options()
        tag = f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
        self.build_temp = os.path.join(HERE, "build", f"temp.{tag}")


setup(
    install_requires=[f"torch=={TORCH_RELEASE}.*"],
    packages=find_packages(include=PACKAGES + (["guidekit", "guidekit.*"] if EDITABLE else [])),
    # The C shim the AOTInductor experiment compiles when it is first used.
    package_data={"opguide.experimental": ["aoti_shim.cpp"]},
    ext_modules=[make_extension()],
    cmdclass={"build_ext": BuildInTree},
    options={"bdist_wheel": {"py_limited_api": LIMITED_API_TAG}},
)
