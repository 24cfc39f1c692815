"""Where the GPU compilers and tools are: nvcc, hipcc and cuobjdump.

Each ``find_*`` function returns a path or None. An explicit variable wins
(``$NVCC``, ``$HIPCC``, ``$CUOBJDUMP``), then the toolkit's home
(``$CUDA_HOME``/``$CUDA_PATH``, ``$ROCM_HOME``/``$ROCM_PATH``), then the PATH.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

__all__ = ["find_cuobjdump", "find_hipcc", "find_nvcc"]


def _which(name: str, env_var: str, home_vars: Sequence[str]) -> str | None:
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for var in home_vars:
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / name).is_file():
            return str(Path(home) / "bin" / name)
    return shutil.which(name)


def find_nvcc() -> str | None:
    """Path of nvcc: ``$NVCC``, ``$CUDA_HOME/bin/nvcc``, or the PATH; None if absent."""
    return _which("nvcc", "NVCC", ("CUDA_HOME", "CUDA_PATH"))


def find_hipcc() -> str | None:
    """Path of hipcc: ``$HIPCC``, ``$ROCM_HOME/bin/hipcc``, or the PATH; None if absent."""
    return _which("hipcc", "HIPCC", ("ROCM_HOME", "ROCM_PATH"))


def find_cuobjdump() -> str | None:
    """Path of cuobjdump: ``$CUOBJDUMP``, ``$CUDA_HOME/bin``, the PATH, or the
    copy that Triton's wheel carries (``triton/backends/nvidia/bin``); None if absent."""
    found = _which("cuobjdump", "CUOBJDUMP", ("CUDA_HOME", "CUDA_PATH"))
    if found is not None or os.environ.get("CUOBJDUMP"):
        return found
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.is_file() else None
