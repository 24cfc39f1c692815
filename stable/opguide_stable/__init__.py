"""RMSNorm from a library built on the LibTorch stable ABI.

Importing the package loads ``_C`` (its static initialisers register
``opguide_stable::rms_norm`` with the dispatcher) and adds the fake kernel that
``torch.compile`` and ``torch.export`` trace with.
"""

from __future__ import annotations

import glob
import json
import os

import torch

__all__ = ["BUILD_INFO", "library_path", "rms_norm"]


def library_path() -> str:
    """The compiled library next to this file (``_C.abi3.so``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(
        glob.glob(os.path.join(here, "_C*.so")) + glob.glob(os.path.join(here, "_C*.pyd"))
    )
    if not found:
        raise ImportError(
            f"opguide_stable: no compiled _C library in {here}; build the package with "
            "`pip install --no-build-isolation .` in stable/"
        )
    return found[0]


torch.ops.load_library(library_path())

#: How this copy was built: ``torch`` (the version whose headers it was
#: compiled against), ``target_version``, ``cuda_kernel``, ``python``.
with open(os.path.join(os.path.dirname(library_path()), "_build_info.json")) as _f:
    BUILD_INFO: dict = json.load(_f)


@torch.library.register_fake("opguide_stable::rms_norm")
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dimension (forward only)."""
    return torch.ops.opguide_stable.rms_norm(x, weight, eps)
