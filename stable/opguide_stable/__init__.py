"""RMSNorm from a library built on the LibTorch stable ABI.

Importing the package loads ``_C`` (its static initialisers register
``opguide_stable::rms_norm`` with the dispatcher) and adds the fake kernel that
``torch.compile`` and ``torch.export`` trace with.

A CUDA build that compiled opguide's Triton forward ahead of time (where
triton was installed at build time) also has
``opguide_stable::rms_norm_triton_aot``: :func:`rms_norm` with
``backend="triton"``. It needs no triton at run time; ``BUILD_INFO["triton_aot"]``
names the GPUs it was compiled for.
"""

from __future__ import annotations

import glob
import json
import os

import torch

__all__ = ["BUILD_INFO", "TRITON_AOT", "library_path", "rms_norm"]


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


#: Whether this build has the Triton forward compiled ahead of time
#: (``opguide_stable::rms_norm_triton_aot``).
TRITON_AOT: bool = hasattr(torch.ops.opguide_stable, "rms_norm_triton_aot")


@torch.library.register_fake("opguide_stable::rms_norm")
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


if TRITON_AOT:

    @torch.library.register_fake("opguide_stable::rms_norm_triton_aot")
    def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return torch.empty_like(x, memory_format=torch.contiguous_format)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, backend: str = "cpp"
) -> torch.Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dimension (forward only).

    Args:
        backend: ``"cpp"`` (default), the library's C++ and CUDA kernels; or
            ``"triton"``, opguide's Triton kernel compiled ahead of time for
            ``BUILD_INFO["triton_aot"]`` and launched from C++. Where none of
            those kernels fits the call (another GPU, rows of more than 16384
            elements, float64, a view at an offset, a CPU tensor,
            ``OPGUIDE_PDL=0`` or ``OPGUIDE_TRITON_AOT_TABLE=0`` in the
            environment), the library's own kernel runs, after a warning
            that says why (once per reason and process; a C++ warning, which
            torch prints on stderr for operators called through ``torch.ops``).

    Raises:
        RuntimeError: ``backend="triton"`` in a build without the Triton kernels.
        ValueError: ``backend`` is neither name.
    """
    if backend == "cpp":
        return torch.ops.opguide_stable.rms_norm(x, weight, eps)
    if backend != "triton":
        raise ValueError(f"rms_norm: backend must be 'cpp' or 'triton', got {backend!r}")
    if not TRITON_AOT:
        raise RuntimeError(
            "rms_norm: backend='triton' needs a CUDA build of opguide_stable that compiled "
            "the Triton kernels ahead of time (triton installed at build time); this one "
            f"did not: {BUILD_INFO}"
        )
    return torch.ops.opguide_stable.rms_norm_triton_aot(x, weight, eps)
