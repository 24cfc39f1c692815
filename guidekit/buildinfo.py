"""What a C++/CUDA extension build sees on this machine, for debugging builds.

Run ``python -m guidekit.buildinfo`` (no compiler is invoked; ``python
guidekit/buildinfo.py`` works too when the package is not built) to print the
torch that extensions compile against, the compiler and its version, the
include and library directories and compile flags that
:class:`torch.utils.cpp_extension.BuildExtension` adds, the file suffixes a
built extension gets, the toolkits found, the build switches of ``setup.py``
as currently set in the environment, and the libraries loaded in this process.

Most "it builds here but not there" problems show up as a difference between
two machines' outputs of this command: another torch, another C++ ABI, no
CUDA toolkit, or a wheel built for another Python.
"""

from __future__ import annotations

import collections
import glob
import importlib.util
import inspect
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from importlib import machinery

import torch
from torch.utils import cpp_extension

# The switches setup.py, BuildExtension and the compilers read, and where the
# JIT cache goes.
ENV_SWITCHES = (
    "USE_CUDA",
    "DEBUG",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "CUDA_HOME",
    "ROCM_HOME",
    "CXX",
    "CC",
    "TORCH_EXTENSIONS_DIR",
)


def _installed_library() -> str | None:
    # The compiled half of opguide, if it was built. Found by file name, next
    # to opguide's sources, so that this module also runs as a plain script
    # (python guidekit/buildinfo.py) when `import opguide` would fail.
    spec = importlib.util.find_spec("opguide")
    if spec is not None and spec.submodule_search_locations:
        package = list(spec.submodule_search_locations)[0]
    else:
        checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        package = os.path.join(checkout, "opguide")
    found = sorted(
        glob.glob(os.path.join(package, "_C.*.so")) + glob.glob(os.path.join(package, "_C.*.pyd"))
    )
    return found[0] if found else None


def _compiler_version(compiler: str) -> str:
    # The first line of `compiler --version`, with the compiler's path.
    path = shutil.which(compiler)
    if path is None:
        return f"{compiler}: not found on PATH"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{path}: could not run ({err})"
    first = (out.stdout or out.stderr).splitlines()
    return f"{path}: {first[0] if first else '(no version output)'}"


def cxx_standard() -> str:
    """The ``-std=c++NN`` flag that BuildExtension and ``load()`` pass with this torch.

    Read from ``torch.utils.cpp_extension`` itself, so that it follows torch
    upgrades (torch 2.11 builds extensions as C++17, later releases as C++20);
    ``"(not found)"`` where that source names none.
    """
    flags = re.findall(r"-std=c\+\+\d+", inspect.getsource(cpp_extension))
    return collections.Counter(flags).most_common(1)[0][0] if flags else "(not found)"


def build_config() -> dict[str, object]:
    """Collects the build configuration of this environment.

    Returns:
        A dict with keys ``torch`` (version), ``torch_cuda`` and ``torch_hip``
        (toolkit versions torch was built with, or ``None``), ``cxx11_abi``
        (the ``_GLIBCXX_USE_CXX11_ABI`` value extensions must match),
        ``extension`` (the factory used: ``CUDAExtension`` when torch and a
        toolkit support it, else ``CppExtension``), ``include_dirs``,
        ``library_dirs`` and ``libraries`` (what that factory adds to an
        abi3 extension like ``opguide._C``), ``cxx_flags`` (the flags BuildExtension
        adds to every C++ compile), ``abi3_flags`` (added for
        ``py_limited_api=True`` extensions), ``ext_suffix`` (this interpreter's suffix
        for a version-specific extension) and ``abi3_suffix`` (the suffix of a
        ``py_limited_api`` one), ``cuda_home`` and ``rocm_home`` (toolkits found,
        or ``None``), ``jit_cache`` (where :func:`torch.utils.cpp_extension.load`
        builds), ``python`` (version and interpreter) and ``platform``,
        ``compiler`` (the C++ compiler ``$CXX``, or ``c++``, and its version),
        ``env`` (the build switches as set now, unset ones omitted),
        ``installed_library`` (the path of ``opguide/_C``, or ``None`` if the
        package was not built) and ``loaded_libraries`` (the libraries loaded
        with :func:`torch.ops.load_library` in this process).
    """
    # Ask torch's own Extension factory what it would compile and link with:
    # the same call setup.py makes, minus the sources (nothing is compiled).
    gpu = (torch.version.cuda or torch.version.hip) and (
        cpp_extension.CUDA_HOME or cpp_extension.ROCM_HOME
    )
    factory = cpp_extension.CUDAExtension if gpu else cpp_extension.CppExtension
    probe = factory("opguide._C", sources=[], py_limited_api=True)
    abi = int(torch.compiled_with_cxx11_abi())
    cxx_flags = [
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        cxx_standard(),
        "-fPIC",
    ]
    # Added only for py_limited_api=True extensions: the oldest CPython whose
    # stable ABI the library may use.
    limited = getattr(cpp_extension, "min_supported_cpython", None)
    jit_cache = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": torch.version.hip,
        "cxx11_abi": abi,
        "extension": f"{factory.__name__}(py_limited_api=True)",
        "include_dirs": probe.include_dirs,
        "library_dirs": probe.library_dirs,
        "libraries": probe.libraries,
        "cxx_flags": cxx_flags,
        "abi3_flags": [f"-DPy_LIMITED_API={limited}"] if limited else [],
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "abi3_suffix": next(s for s in machinery.EXTENSION_SUFFIXES if "abi3" in s),
        "cuda_home": cpp_extension.CUDA_HOME,
        "rocm_home": cpp_extension.ROCM_HOME,
        "jit_cache": jit_cache,
        "python": f"{platform.python_version()} at {sys.executable}",
        "platform": sysconfig.get_platform(),
        "compiler": _compiler_version(os.environ.get("CXX", "c++")),
        "env": {name: os.environ[name] for name in ENV_SWITCHES if name in os.environ},
        "installed_library": _installed_library(),
        "loaded_libraries": sorted(torch.ops.loaded_libraries),
    }


def format_build_config(config: dict[str, object] | None = None) -> str:
    """Formats :func:`build_config` as aligned ``key: value`` lines.

    Args:
        config: a dict from :func:`build_config`; collected now when ``None``.

    Returns:
        The text, one key per line; lists are printed one item per line.
    """
    config = build_config() if config is None else config
    width = max(len(key) for key in config)
    lines = []
    for key, value in config.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "(none set)"
        first, *more = value if isinstance(value, list | tuple) and value else [value]
        lines.append(f"{key:<{width}} : {first}")
        lines.extend(f"{'':<{width}}   {item}" for item in more)
    return "\n".join(lines)


def load_line(
    library: str | os.PathLike, since: float, name: str | None = None, loaded: bool = True
) -> str:
    """How a :func:`torch.utils.cpp_extension.load` call went, for a page's output.

    ``load`` compiles only what changed, and returns at once for a library
    this process has already loaded, so its time alone does not say whether
    anything was built.

    Args:
        library: the library file ``load`` returned (or built).
        since: :func:`time.time` just before the call.
        name: how to name the library (default: the file's name).
        loaded: whether this process loaded it (``False`` for a build in a
            child process).

    Returns:
        ``"built and loaded NAME in 12.3 s"`` where the file is newer than
        ``since``, else ``"loaded NAME in 0.1 s (its build was up to date)"``;
        without ``loaded``, ``"built NAME ..."`` or ``"NAME was up to date ..."``.
    """
    seconds = time.time() - since
    name = name or os.path.basename(library)
    built = os.path.getmtime(library) >= since
    if built:
        return f"built{' and loaded' if loaded else ''} {name} in {seconds:.1f} s"
    if loaded:
        return f"loaded {name} in {seconds:.1f} s (its build was up to date)"
    return f"{name} was up to date (checked in {seconds:.1f} s)"


def without_compiler_folder(text: str) -> str:
    """``text`` (this module's output) with the compiler's folder written as ``<bin>``, in
    the ``compiler`` line and in the ``CXX`` and ``CC`` switches of the ``env`` line: the
    folder says where the output was made, the name and version do not."""
    text = re.sub(r"^(compiler\s*: )\S*/", r"\1<bin>/", text, flags=re.M)
    return re.sub(r"\b(CXX|CC)=[^\s,]*/", r"\1=<bin>/", text)


def registered_operators(namespace: str) -> list[str]:
    """Lists the operators the dispatcher knows in ``namespace``, with overloads.

    Args:
        namespace: an operator namespace, e.g. ``"opguide"``.

    Returns:
        Sorted names like ``"opguide::rms_norm"`` (``"name.overload"`` when the
        overload is not the default one); empty when nothing is registered.
    """
    prefix = namespace + "::"
    return sorted(name for name in torch._C._dispatch_get_all_op_names() if name.startswith(prefix))


def main() -> None:
    """Prints the build configuration (``python -m guidekit.buildinfo``)."""
    print(format_build_config())


if __name__ == "__main__":
    main()
