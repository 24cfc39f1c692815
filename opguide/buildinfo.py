"""What a C++/CUDA extension build sees on this machine, for debugging builds.

Run ``python -m opguide.buildinfo`` (no compiler is invoked; ``python
opguide/buildinfo.py`` works too when the package is not built) to print the
torch that extensions compile against, the include and library directories
and compile flags that :class:`torch.utils.cpp_extension.BuildExtension`
adds, the file suffixes a built extension gets, the toolkits found, and the
build switches of ``setup.py`` as currently set in the environment.

Most "it builds here but not there" problems show up as a difference between
two machines' outputs of this command: another torch, another C++ ABI, no
CUDA toolkit, or a wheel built for another Python.
"""

from __future__ import annotations

import collections
import glob
import inspect
import os
import platform
import re
import sysconfig
from importlib import machinery

import torch
from torch.utils import cpp_extension

# The switches setup.py and BuildExtension read, and where the JIT cache goes.
ENV_SWITCHES = (
    "USE_CUDA",
    "DEBUG",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "CUDA_HOME",
    "CXX",
    "TORCH_EXTENSIONS_DIR",
)


def _installed_library() -> str | None:
    # The compiled half of this package, if it was built. Found by file name so
    # that this module also runs as a plain script (python opguide/buildinfo.py)
    # when the package is not built and `import opguide` would fail.
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(
        glob.glob(os.path.join(here, "_C.*.so")) + glob.glob(os.path.join(here, "_C.*.pyd"))
    )
    return found[0] if found else None


def _cxx_standard() -> str:
    # The -std flag BuildExtension and load() pass with this torch, read from
    # torch.utils.cpp_extension itself so that it follows torch upgrades.
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
        builds), ``python`` and ``platform``, ``env`` (the build switches as set
        now, unset ones omitted) and ``installed_library`` (the path of
        ``opguide/_C``, or ``None`` if the package was not built).
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
        _cxx_standard(),
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
        "python": platform.python_version(),
        "platform": sysconfig.get_platform(),
        "env": {name: os.environ[name] for name in ENV_SWITCHES if name in os.environ},
        "installed_library": _installed_library(),
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
        if isinstance(value, list | tuple) and value:
            lines.append(f"{key:<{width}} : {value[0]}")
            lines.extend(f"{'':<{width}}   {item}" for item in value[1:])
        elif isinstance(value, dict):
            shown = ", ".join(f"{k}={v}" for k, v in value.items()) or "(none set)"
            lines.append(f"{key:<{width}} : {shown}")
        else:
            lines.append(f"{key:<{width}} : {value}")
    return "\n".join(lines)


def main() -> None:
    """Prints the build configuration (``python -m opguide.buildinfo``)."""
    print(format_build_config())


if __name__ == "__main__":
    main()
