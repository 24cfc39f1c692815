"""Pure-PyTorch reference implementations: the ground truth for every test."""

from __future__ import annotations

import torch


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension, computed in float32 (float64 for float64).

    ``y = x / sqrt(mean(x**2, dim=-1) + eps) * weight``, rounded once to the
    dtype of ``x``: the same contract as the compiled kernels.

    Args:
        x: input of shape ``(..., N)``.
        weight: scale of shape ``(N,)``.
        eps: added to the mean square before the square root.

    Returns:
        A contiguous tensor with the shape and dtype of ``x``.
    """
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.to(acc)).to(x.dtype).contiguous()


def rms_norm_backward_reference(
    grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of :func:`rms_norm_reference` with respect to ``x`` and ``weight``.

    Computed by autograd through the reference forward, in float32 (float64
    for float64 inputs), so it is independent of the hand-derived formula of
    the backward kernels.

    Args:
        grad_y: gradient of the loss with respect to the output, shape of ``x``.
        x: input of shape ``(..., N)``.
        weight: scale of shape ``(N,)``.
        eps: added to the mean square before the square root.

    Returns:
        ``(grad_x, grad_weight)`` with the shapes and dtypes of ``x`` and ``weight``.
    """
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.detach().to(acc).requires_grad_(True)
    wf = weight.detach().to(acc).requires_grad_(True)
    with torch.enable_grad():
        yf = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * wf
        grad_x, grad_w = torch.autograd.grad(yf, (xf, wf), grad_y.to(acc))
    return grad_x.to(x.dtype), grad_w.to(weight.dtype)
