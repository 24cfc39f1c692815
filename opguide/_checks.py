"""Argument checks of the public operators, worded as the C++ checks are.

The Python wrappers (:mod:`opguide.ops`, :mod:`opguide.fused_add_rms_norm`),
the fake kernels and the Triton operators (:mod:`opguide.triton.ops`) all
call them; they live in their own module so that each of those imports it
and none imports another.
"""

from __future__ import annotations

import torch

_FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check_rms_norm_args(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, autocast: bool = False
) -> None:
    """Raises a clear error for arguments the kernels do not accept.

    The wording matches the C++ checks in ``csrc/rms_norm/rms_norm.h``, so an error
    reads the same in eager mode, under ``torch.compile`` and from
    ``torch.ops.opguide.rms_norm`` called directly. With ``autocast=True``,
    when an autocast region is active on the device of ``x``, ``x`` and
    ``weight`` may differ in floating dtype: the autocast kernel casts both to
    float32 before any kernel runs.
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
    mixed_ok = autocast and torch.is_autocast_enabled(x.device.type)
    if weight.dtype != x.dtype and not (mixed_ok and weight.dtype in _FLOATING):
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


_OP = "fused_add_rms_norm_: "


def _check_fused_add_rms_norm_args(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    out_dtype: torch.dtype | None,
) -> None:
    """Raises the errors of ``csrc/fused_add_rms_norm/fused_add_rms_norm.h``, worded the same."""
    for name, t in (("x", x), ("residual", residual)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_OP}{name} must be a torch.Tensor, got {type(t).__name__}")
    if weight is not None and not isinstance(weight, torch.Tensor):
        raise TypeError(f"{_OP}weight must be a torch.Tensor or None, got {type(weight).__name__}")
    if x.dtype not in _FLOATING:
        raise TypeError(
            f"{_OP}x must be a floating-point tensor (float32, float16, bfloat16 or "
            f"float64), got {x.dtype}"
        )
    if x.dim() < 1:
        raise ValueError(f"{_OP}x must have at least one dimension")
    if residual.shape != x.shape:
        raise ValueError(
            f"{_OP}residual must have the shape of x {tuple(x.shape)}, got {tuple(residual.shape)}"
        )
    if residual.dtype not in (x.dtype, torch.float32):
        raise TypeError(
            f"{_OP}residual must have the dtype of x ({x.dtype}) or torch.float32, "
            f"got {residual.dtype}"
        )
    if residual.device != x.device:
        raise RuntimeError(
            f"{_OP}residual must be on the device of x ({x.device}), got {residual.device}"
        )
    if weight is not None:
        if weight.dtype != x.dtype:
            raise TypeError(f"{_OP}weight must have the dtype of x ({x.dtype}), got {weight.dtype}")
        if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
            raise ValueError(
                f"{_OP}weight must have shape ({x.shape[-1]},) to match the last dimension "
                f"of x, got {tuple(weight.shape)}"
            )
        if weight.device != x.device:
            raise RuntimeError(
                f"{_OP}weight must be on the device of x ({x.device}), got {weight.device}"
            )
    if out_dtype is not None and out_dtype not in _FLOATING:
        raise TypeError(
            f"{_OP}out_dtype must be a floating-point dtype (float32, float16, bfloat16 "
            f"or float64), got {out_dtype}"
        )
    if eps < 0:
        raise ValueError(f"{_OP}eps must be non-negative, got {eps}")
    # An expand()ed residual has several elements at one address (stride 0).
    if any(s == 0 and n > 1 for s, n in zip(residual.stride(), residual.shape, strict=True)):
        raise RuntimeError(
            f"{_OP}residual must not have elements that share memory (e.g. an expand()ed "
            "tensor); pass residual.clone()"
        )
