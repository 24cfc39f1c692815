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
    Parallel compile jobs for ninja; read by ``BuildExtension`` itself. Also
    the processes that compile the Triton kernels ahead of time.
``OPGUIDE_TRITON_AOT``
    The GPUs a CUDA or ROCm build compiles the Triton RMSNorm kernels for
    ahead of time (``opguide/triton/aot.py``), embedded in the extension:
    ``sm_90,gfx942`` names them, ``0`` compiles none; unset, the targets of
    ``TORCH_CUDA_ARCH_LIST`` (NVIDIA) or ``PYTORCH_ROCM_ARCH`` (AMD), else
    the visible GPUs.

Build without build isolation so that the extension is compiled against the
torch you already have: ``pip install --no-build-isolation .``
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
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


def _aot_build():
    """opguide/triton/aot_build.py, read as a file, as the registry is."""
    spec = importlib.util.spec_from_file_location(
        "_opguide_aot_build", os.path.join(HERE, "opguide", "triton", "aot_build.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _visible_targets() -> list[str]:
    """The visible GPUs' target names (``sm_90``, ``gfx942``): torch builds for them."""
    if not torch.cuda.is_available():
        return []
    devices = range(torch.cuda.device_count())
    if torch.version.hip is not None:
        return [torch.cuda.get_device_properties(i).gcnArchName.split(":")[0] for i in devices]
    return ["sm_{}{}".format(*torch.cuda.get_device_capability(i)) for i in devices]


def triton_aot(out: str) -> str:
    """Compiles the Triton kernels for the build's targets into ``out``; the table's C++ file.

    The targets are ``opguide/triton/aot_build.py``'s ``targets()``. Those
    that ``opguide/triton/aot.py`` has no device model for are left out,
    unless ``OPGUIDE_TRITON_AOT`` names them; without triton the table is
    empty (``aot_build.py`` says why).
    """
    aot_build = _aot_build()
    targets, named = aot_build.targets(torch.version.hip is not None, _visible_targets)
    cpp = aot_build.compile_table(targets, out, skip_unknown=not named)
    return os.path.relpath(cpp, HERE)


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


EXTENSION = make_extension()
GPU_BUILD = any(source.endswith(".cu") for source in EXTENSION.sources)  # CUDA or ROCm
#: Where a GPU build compiles the Triton kernels ahead of time (images, manifest, table).
AOT_OUT = os.path.join(HERE, "build", "triton_aot")

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

    def build_extensions(self):
        # A CUDA or ROCm build also compiles the Triton kernels ahead of time,
        # embeds them (csrc/triton_aot/artifacts.h's table), and puts their
        # manifest next to the extension.
        (ext,) = self.extensions
        if GPU_BUILD:
            ext.sources.append(triton_aot(AOT_OUT))
        super().build_extensions()
        if GPU_BUILD:
            _copy_manifest(os.path.dirname(self.get_ext_fullpath(ext.name)))

    def copy_extensions_to_source(self):
        # An in-place build copies the extension into the source tree; its manifest goes too.
        super().copy_extensions_to_source()
        if GPU_BUILD:
            _copy_manifest(os.path.join(HERE, "opguide"))


def _copy_manifest(folder: str) -> None:
    """The manifest of the Triton kernels compiled ahead of time, into the package ``folder``."""
    shutil.copyfile(os.path.join(AOT_OUT, "manifest.json"),
                    os.path.join(folder, "triton_aot_manifest.json"))  # fmt: skip


setup(
    install_requires=[f"torch=={TORCH_RELEASE}.*"],
    packages=find_packages(include=PACKAGES + (["guidekit", "guidekit.*"] if EDITABLE else [])),
    # The C shim the AOTInductor experiment compiles when it is first used.
    package_data={"opguide.experimental": ["aoti_shim.cpp"]},
    ext_modules=[EXTENSION],
    cmdclass={"build_ext": BuildInTree},
    options={"bdist_wheel": {"py_limited_api": LIMITED_API_TAG}},
)
