"""Public operators of opguide: checked Python wrappers over ``torch.ops.opguide``.

The schemas and kernels are C++ (``csrc/``); this module adds what only
Python can add: argument checks with clear messages, and the fake (meta)
kernels that let ``torch.compile`` trace the operators without running them.
"""

from __future__ import annotations

import torch

from .backends import resolve_backend

_FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check_rms_norm_args(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Raises a clear error for arguments the kernels do not accept.

    The wording matches the C++ checks in ``csrc/rms_norm.h``, so an error
    reads the same in eager mode, under ``torch.compile`` and from
    ``torch.ops.opguide.rms_norm`` called directly.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rms_norm: x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"rms_norm: weight must be a torch.Tensor, got {type(weight).__name__}")
    if x.dtype not in _FLOATING:
        raise TypeError(
            "rms_norm: x must be a floating-point tensor (float32, float16, bfloat16 "
            f"or float64), got {x.dtype}"
        )
    if weight.dtype != x.dtype:
        raise TypeError(
            f"rms_norm: weight must have the dtype of x ({x.dtype}), got {weight.dtype}"
        )
    if x.dim() < 1:
        raise ValueError("rms_norm: x must have at least one dimension")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(
            f"rms_norm: weight must have shape ({x.shape[-1]},) to match the last "
            f"dimension of x, got {tuple(weight.shape)}"
        )
    if weight.device != x.device:
        raise RuntimeError(
            f"rms_norm: weight must be on the device of x ({x.device}), got {weight.device}"
        )
    if eps < 0:
        raise ValueError(f"rms_norm: eps must be non-negative, got {eps}")


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, backend: str = "auto"
) -> torch.Tensor:
    """Root-mean-square normalisation over the last dimension.

    Computes ``x / sqrt(mean(x**2, dim=-1) + eps) * weight`` with float32
    accumulation (float64 for float64 inputs), rounding once to the dtype of
    ``x``. Runs the compiled kernel of the device of ``x``.

    Args:
        x: input of shape ``(..., N)``; float32, float16, bfloat16 or float64.
            Non-contiguous inputs are accepted (they are made contiguous).
        weight: scale of shape ``(N,)``, same dtype and device as ``x``.
        eps: non-negative number added to the mean square. Default ``1e-6``.
        backend: ``"auto"`` (default), ``"cpp"`` (the compiled C++/CUDA
            kernels) or ``"triton"`` (the Triton kernels, float32, float16 and
            bfloat16 only); see :mod:`opguide.backends`.

    Returns:
        A new contiguous tensor with the shape and dtype of ``x``.

    Raises:
        TypeError: ``x`` is not floating point, or ``weight`` has another dtype.
        ValueError: ``weight`` is not of shape ``(N,)``, ``x`` is 0-d, ``eps < 0``,
            or ``backend`` is unknown.
        RuntimeError: ``x`` and ``weight`` are on different devices, or the
            backend is not available.

    Example:
        >>> import torch, opguide
        >>> x = torch.randn(4, 8)
        >>> y = opguide.rms_norm(x, torch.ones(8))
        >>> y.shape
        torch.Size([4, 8])
    """
    _check_rms_norm_args(x, weight, eps)
    if resolve_backend("rms_norm", "rms_norm", backend, x) == "triton":
        return torch.ops.opguide.rms_norm_triton.default(x, weight, float(eps))
    return torch.ops.opguide.rms_norm.default(x, weight, float(eps))


# [fake-rms-norm]
@torch.library.register_fake("opguide::rms_norm")
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Describe the output without computing it: same shape and dtype as x,
    # contiguous (as the real kernels return it), on x's device.
    _check_rms_norm_args(x, weight, eps)
    return x.new_empty(x.shape)


# [fake-rms-norm-end]
