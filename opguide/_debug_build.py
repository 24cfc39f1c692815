"""What a C++ extension build will use, and what is loaded: a debugging aid.

Most "it builds on my machine" problems are a mismatch between two of these:
the torch the extension compiles against, the compiler and its C++ ABI
setting, the CUDA toolkit, the cache folder holding an old build, and the
libraries already loaded into the process. :func:`print_build_settings`
prints all of them in one place; gallery step 13 shows its output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import torch
import torch.utils.cpp_extension as cpp_extension

# Environment variables read by torch.utils.cpp_extension or by the compilers.
BUILD_ENV = (
    "CXX",
    "CC",
    "CUDA_HOME",
    "ROCM_HOME",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "TORCH_EXTENSIONS_DIR",
    "USE_CUDA",
    "DEBUG",
)


def _compiler_version(compiler: str) -> str:
    path = shutil.which(compiler)
    if path is None:
        return f"{compiler}: not found on PATH"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{path}: could not run ({err})"
    first = (out.stdout or out.stderr).splitlines()
    return f"{path}: {first[0] if first else '(no version output)'}"


def build_settings() -> dict[str, object]:
    """Collects the settings an extension build depends on.

    Returns:
        A dict: Python and torch versions and paths, the compiler and its
        version, the C++ ABI flag torch was built with, the include and
        library folders, the CUDA/ROCm toolkit found, the JIT cache folder,
        the build-related environment variables (``None`` when unset), and
        the libraries loaded with :func:`torch.ops.load_library`.
    """
    compiler = os.environ.get("CXX", "c++")
    return {
        "python": f"{sys.version.split()[0]} at {sys.executable}",
        "torch": f"{torch.__version__} at {os.path.dirname(torch.__file__)}",
        "torch CUDA / HIP": f"{torch.version.cuda} / {torch.version.hip}",
        "compiler": _compiler_version(compiler),
        "_GLIBCXX_USE_CXX11_ABI": int(torch._C._GLIBCXX_USE_CXX11_ABI),
        "include paths": cpp_extension.include_paths(),
        "library paths": cpp_extension.library_paths(),
        "CUDA toolkit (CUDA_HOME)": cpp_extension.CUDA_HOME,
        "ROCm toolkit (ROCM_HOME)": cpp_extension.ROCM_HOME,
        "JIT cache root for load()": os.environ.get("TORCH_EXTENSIONS_DIR")
        or cpp_extension.get_default_build_root(),
        "environment": {name: os.environ.get(name) for name in BUILD_ENV},
        "loaded libraries": sorted(torch.ops.loaded_libraries),
    }


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


def print_build_settings(file=None) -> None:
    """Prints :func:`build_settings`, one setting per line.

    Args:
        file: where to write; defaults to ``sys.stdout``.
    """
    out = file or sys.stdout
    for key, value in build_settings().items():
        if isinstance(value, dict):
            print(f"{key}:", file=out)
            for name, setting in value.items():
                print(f"    {name} = {setting if setting is not None else '(unset)'}", file=out)
        elif isinstance(value, list):
            print(f"{key}:", file=out)
            for item in value or ["(none)"]:
                print(f"    {item}", file=out)
        else:
            print(f"{key}: {value}", file=out)
