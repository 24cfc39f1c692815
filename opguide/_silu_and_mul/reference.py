"""silu_and_mul in plain PyTorch: the ground truth of the tests, and what
``torch.compile`` gets with ``compiled="native"``."""

from __future__ import annotations

import torch


def _acc(dtype: torch.dtype) -> torch.dtype:
    # The kernels compute in float32, or in float64 for float64 inputs.
    return torch.float64 if dtype == torch.float64 else torch.float32


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]``, computed in float32 (float64 for float64).

    Rounded once to the dtype of ``x``: the contract of the kernels.

    Args:
        x: input of shape ``(..., 2*d)``.

    Returns:
        A contiguous tensor of shape ``(..., d)`` and the dtype of ``x``.

    Example:
        >>> import torch, opguide
        >>> opguide.silu_and_mul_reference(torch.tensor([1.0, 2.0])).shape
        torch.Size([1])
    """
    d = x.shape[-1] // 2
    xf = x.to(_acc(x.dtype))
    y = torch.nn.functional.silu(xf[..., :d]) * xf[..., d:]
    return y.to(x.dtype).contiguous()


def silu_and_mul_backward_reference(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The gradient of :func:`silu_and_mul_reference` with respect to ``x``.

    Computed by autograd through the reference in float32 (float64 for
    float64), so it does not share the kernels' hand-derived formula.

    Args:
        grad_y: gradient of the loss with respect to ``y``, shape ``(..., d)``.
        x: the forward's input, shape ``(..., 2*d)``.

    Returns:
        ``grad_x``, with the shape and dtype of ``x``.
    """
    acc = _acc(x.dtype)
    xf = x.detach().to(acc).requires_grad_(True)
    d = x.shape[-1] // 2
    with torch.enable_grad():
        yf = torch.nn.functional.silu(xf[..., :d]) * xf[..., d:]
        (grad_x,) = torch.autograd.grad(yf, (xf,), grad_y.to(acc))
    return grad_x.to(x.dtype)
