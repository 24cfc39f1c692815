"""Argument checks of silu_and_mul, worded as ``csrc/silu_and_mul/silu_and_mul_checks.cpp``.

The public wrapper, the fake kernels and the Triton operators all call them,
so that an error reads the same in eager mode, under ``torch.compile`` and
from ``torch.ops.opguide.silu_and_mul`` called directly.
"""

from __future__ import annotations

import torch

_FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_silu_and_mul_args(x: torch.Tensor) -> None:
    """Raises a clear error for an ``x`` the kernels do not accept.

    Raises:
        TypeError: ``x`` is not a tensor, or not float32, float16, bfloat16 or float64.
        ValueError: ``x`` is 0-d, or its last dimension is odd.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"silu_and_mul: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOATING:
        raise TypeError(
            "silu_and_mul: x must be a floating-point tensor (float32, float16, bfloat16 "
            f"or float64), got {x.dtype}"
        )
    if x.dim() < 1:
        raise ValueError(
            "silu_and_mul: x must have at least one dimension, (..., 2*d), got a 0-d tensor"
        )
    if x.shape[-1] % 2 != 0:
        raise ValueError(
            "silu_and_mul: the last dimension of x must be even (x is (..., 2*d), the gate "
            f"then the up projection), got shape {tuple(x.shape)}"
        )


def check_silu_and_mul_backward_args(grad_y: torch.Tensor, x: torch.Tensor) -> None:
    """Raises a clear error unless ``grad_y`` has the shape, dtype and device of ``y``.

    Raises:
        TypeError, ValueError: as :func:`check_silu_and_mul_args` for ``x``; ``grad_y``
            is not shaped ``x.shape[:-1] + (d,)`` or has another dtype.
        RuntimeError: ``grad_y`` is on another device.
    """
    check_silu_and_mul_args(x)
    y_shape = (*x.shape[:-1], x.shape[-1] // 2)
    if tuple(grad_y.shape) != y_shape:
        raise ValueError(
            f"silu_and_mul_backward: grad_y must have the shape of y {y_shape} "
            f"(x.shape[:-1] + (d,)), got {tuple(grad_y.shape)}"
        )
    if grad_y.dtype != x.dtype:
        raise TypeError(
            f"silu_and_mul_backward: grad_y must have the dtype of x ({x.dtype}), "
            f"got {grad_y.dtype}"
        )
    if grad_y.device != x.device:
        raise RuntimeError(
            f"silu_and_mul_backward: grad_y must be on the device of x ({x.device}), "
            f"got {grad_y.device}"
        )
