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
