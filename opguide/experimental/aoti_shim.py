"""EXPERIMENTAL, off by default: AOTInductor calls ``opguide.rms_norm`` through a C shim.

A package compiled by AOTInductor calls an operator that is not ATen's
through its proxy executor, which boxes the arguments and calls the operator
by name at every call. Two private options of ``torch._inductor.config``
replace that call with a direct call of a C function:

* ``aot_inductor.custom_ops_to_c_shims``: ``{operator: [C declaration]}``;
  the generated code declares each function and calls
  ``aoti_torch_<device>_<operator name>`` with the C shim ABI;
* ``aot_inductor.custom_op_libs``: the libraries the package links against
  for those functions (``-l`` names; the linker finds them through
  ``LIBRARY_PATH``).

``aoti_shim.cpp`` beside this file holds the functions for
``opguide::rms_norm``. :func:`build` compiles it into a shared library and
loads it, so that a package that needs it finds it in the process;
:func:`compile_package` compiles an exported program with or without it;
:func:`calls` counts, in a package's generated code, the calls of each kind.
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
import zipfile
from pathlib import Path

import torch

#: The shim's source, and the name of the library it is built into.
SOURCE = Path(__file__).with_name("aoti_shim.cpp")
LIBRARY = "opguide_aoti_shim"
#: The functions of ``aoti_shim.cpp``, as the generated code declares them.
DECLARATIONS = [
    f"AOTITorchError aoti_torch_{device}_rms_norm(AtenTensorHandle x, "
    "AtenTensorHandle weight, double eps, AtenTensorHandle* ret0)"
    for device in ("cpu", "cuda")
]


def build(build_dir: str | Path | None = None) -> Path:
    """Compiles ``aoti_shim.cpp`` into a shared library and loads it into this process.

    Args:
        build_dir: where the library is built (default: a folder of the
            system's temporary directory, per torch version); a second call
            reuses a build that is up to date.

    Returns:
        The library's path. Its soname is its file name, so a package that
        lists it among its needed libraries finds the copy loaded here.

    Raises:
        FileNotFoundError: ``aoti_shim.cpp`` is not installed beside this file
            (a wheel carries no C++ source; a checkout does).
        RuntimeError: the compiler failed.
    """
    from torch.utils import cpp_extension

    if not SOURCE.is_file():
        raise FileNotFoundError(f"{SOURCE} is not installed; build the shim from a checkout")

    folder = Path(build_dir or Path(tempfile.gettempdir()) / LIBRARY / torch.__version__)
    folder.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name=LIBRARY,
        sources=[str(SOURCE)],
        build_directory=str(folder),
        is_python_module=False,
        extra_ldflags=[f"-Wl,-soname,{LIBRARY}.so"],
    )
    path = folder / f"{LIBRARY}.so"
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    return path


def compile_package(exported, package_path: str | Path, shim: Path | None) -> str:
    """``torch._inductor.aoti_compile_and_package``, with the C shim or without it.

    Args:
        exported: a ``torch.export.ExportedProgram``.
        package_path: the ``.pt2`` file to write.
        shim: the library :func:`build` returned, or None for the proxy executor.

    Returns:
        The package's path.
    """
    # The shim options are not all part of Inductor's cache key: with the caches
    # on, a package compiled earlier from the same graph, with or without the
    # shim, has been handed back for the other choice. Compile without them.
    configs = {"force_disable_caches": True}
    if shim is not None:
        op = torch.ops.opguide.rms_norm.default
        configs |= {
            "aot_inductor.custom_ops_to_c_shims": {op: DECLARATIONS},
            # "-l:NAME" links the file NAME, found in LIBRARY_PATH.
            "aot_inductor.custom_op_libs": [f":{shim.name}"],
        }
    saved = os.environ.get("LIBRARY_PATH")
    if shim is not None:
        os.environ["LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(shim.parent), saved]))
    try:
        return torch._inductor.aoti_compile_and_package(
            exported, package_path=str(package_path), inductor_configs=configs
        )
    finally:
        if saved is None:
            os.environ.pop("LIBRARY_PATH", None)
        else:
            os.environ["LIBRARY_PATH"] = saved


# A call, wrapped in an error check or not (torch releases differ); the
# shim's declarations (``extern AOTITorchError aoti_torch_cpu_rms_norm(...)``)
# are not calls.
_SHIM_CALL = re.compile(r"^(?!.*\bextern\b).*\baoti_torch_\w+_rms_norm\(", re.MULTILINE)
_PROXY_CALL = re.compile(r"\baoti_torch_proxy_executor_call_function\(")


def calls(package_path: str | Path) -> dict[str, int]:
    """``{"C shim": n, "proxy executor": m}``: the calls in a package's generated C++.

    Every C++ source of the package is read: the file that holds the wrapper
    is named ``*.wrapper.cpp`` by some torch releases and ``*.cpp`` by others.
    """
    found = {"C shim": 0, "proxy executor": 0}
    with zipfile.ZipFile(package_path) as package:
        for name in package.namelist():
            if name.endswith(".cpp"):
                code = package.read(name).decode()
                found["C shim"] += len(_SHIM_CALL.findall(code))
                found["proxy executor"] += len(_PROXY_CALL.findall(code))
    return found


__all__ = ["DECLARATIONS", "LIBRARY", "SOURCE", "build", "calls", "compile_package"]
