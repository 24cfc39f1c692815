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
        grad_x, grad_weight = torch.autograd.grad(yf, (xf, wf), grad_y.to(acc))
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype)


def fused_add_rms_norm_reference(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused residual-add + RMSNorm, without modifying any input.

    The contract of ``opguide.fused_add_rms_norm_``: the sum ``x + residual``
    is computed in float32 (float64 for a float64 residual), rounded once to
    the residual's dtype, and that rounded value is normalised.

    Args:
        x: input of shape ``(..., N)``.
        residual: same shape as ``x``; not modified.
        weight: optional scale of shape ``(N,)``.
        eps: added to the mean square before the square root.
        out_dtype: dtype of ``out``; ``None`` means the dtype of ``x``.

    Returns:
        ``(out, inv_rms, new_residual)``: the operator's two outputs, and the
        value ``residual`` holds after the operator has run.
    """
    acc = torch.float64 if residual.dtype == torch.float64 else torch.float32
    new_residual = (x.to(acc) + residual.to(acc)).to(residual.dtype)
    h = new_residual.to(acc)
    inv_rms = torch.rsqrt(h.pow(2).mean(dim=-1) + eps)
    out = h * inv_rms.unsqueeze(-1)
    if weight is not None:
        out = out * weight.to(acc)
    out = out.to(x.dtype if out_dtype is None else out_dtype).contiguous()
    return out, inv_rms, new_residual
