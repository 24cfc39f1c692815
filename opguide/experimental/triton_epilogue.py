"""EXPERIMENTAL, off by default: a pointwise operation fused into a Triton operator's kernel.

An operator made with :func:`torch.library.triton_op` is transparent to
Inductor: ``torch.compile`` traces into it and launches its Triton kernels
from the code it generates. With the private option
``torch._inductor.config.epilogue_fusion_user_defined_triton_kernel``
(torch 2.12 and later, off by default), Inductor can also fold a pointwise
operation that follows such a kernel into the kernel's store, so that the
output is written once, already transformed, instead of written, read back
and written again by a second kernel.

Inductor does so only when (``UserDefinedTritonKernel.can_fuse_epilogue`` in
``torch/_inductor/ir.py``, the checks of ``torch/_inductor/scheduler.py`` and
``torch/_higher_order_ops/triton_kernel_wrap.py``):

* the kernel writes one tensor, with one ``tl.store`` in its source, and
  does not read that tensor;
* that tensor is allocated empty inside the operator (``torch.empty_like``),
  not passed in;
* the operation that follows is pointwise, reads that tensor alone
  (constants are fine), and has its size and strides (its dtype may differ).

opguide's Triton forward kernel stores ``y`` and, for the backward, the
inverse RMS: two stores, so it does not qualify. :func:`rms_norm_y` is an
RMSNorm forward with one store, for inference, made for this fusion. Inductor
compiles a user Triton kernel for a GPU; on a machine without one, Triton
runs the kernel only in its interpreter, outside ``torch.compile``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import torch
import triton
import triton.language as tl

#: The private Inductor option this module turns on.
OPTION = "epilogue_fusion_user_defined_triton_kernel"


# [kernel]
@triton.jit
def _rms_norm_y_kernel(
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    y_ptr,  # [M, N] output, x's dtype
    N,
    eps,
    BLOCK_N: tl.constexpr,
):
    # One row per program; the only store is y's, the one Inductor rewrites.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


@torch.library.triton_op("opguide_experimental::rms_norm_y", mutates_args=())
def rms_norm_y(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension of a contiguous ``x``, with one Triton store.

    Args:
        x: ``(..., N)``, contiguous, float32, float16 or bfloat16.
        weight: ``(N,)``, the dtype of ``x``.
        eps: added to the mean square.

    Returns:
        ``y``, a new tensor shaped and typed like ``x``.

    Raises:
        ValueError: ``x`` is not contiguous, or ``weight`` is not ``(N,)``.
    """
    if not x.is_contiguous() or weight.shape != x.shape[-1:]:
        raise ValueError(
            f"rms_norm_y: x must be contiguous and weight of shape ({x.shape[-1]},); "
            f"got x strides {tuple(x.stride())}, weight shape {tuple(weight.shape)}"
        )
    y = torch.empty_like(x)  # empty: the condition for the epilogue fusion
    n = int(x.shape[-1])
    rows = int(x.numel()) // n if n else 0
    if rows:
        block = triton.next_power_of_2(n)
        torch.library.wrap_triton(_rms_norm_y_kernel)[(rows,)](
            x, weight, y, n, eps, BLOCK_N=block, num_warps=min(16, max(1, block // 512))
        )
    return y


# [kernel-end]


def why_not(device: torch.device | str) -> str | None:
    """Why the fusion cannot run for tensors on ``device`` here, or None when it can.

    Returns:
        ``None``, or a sentence: this torch lacks the option, or ``device`` is
        not a GPU (Triton compiles kernels for GPUs; on the CPU they run only
        in Triton's interpreter, which ``torch.compile`` does not use).
    """
    from torch._inductor import config

    if not hasattr(config, OPTION):
        return f"torch {torch.__version__} has no torch._inductor.config.{OPTION}"
    if torch.device(device).type != "cuda":
        return (
            f"the tensors are on {torch.device(device).type}: Inductor compiles a user "
            "Triton kernel for a GPU, and without one Triton runs kernels only in its "
            "interpreter, outside torch.compile"
        )
    return None


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """Turns the fusion on for the graphs Inductor compiles inside the block.

    Raises:
        RuntimeError: this torch lacks the option.
    """
    from torch._inductor import config

    if not hasattr(config, OPTION):
        raise RuntimeError(why_not("cuda"))
    with config.patch({OPTION: True}):
        yield


_KERNEL_NAME = re.compile(r"async_compile\.triton\('(\w+)'")


def kernels(code: str) -> tuple[list[str], list[str]]:
    """The Triton kernels of Inductor's generated ``code``: ``(Inductor's, the user's)``.

    Inductor names the kernels it writes ``triton_...``; a user kernel keeps
    its own name with a number after it.
    """
    names = _KERNEL_NAME.findall(code)
    inductors = [n for n in names if n.startswith("triton_")]
    return inductors, [n for n in names if n not in inductors]


__all__ = ["OPTION", "enabled", "kernels", "rms_norm_y", "why_not"]
