"""Helpers for testing an RMSNorm kernel: tolerances, seeded inputs, gradients.

opguide's tests and the guide's pages use these, and so can the tests of an
operator of your own: they are what "close enough" means for a norm computed
in float32 and rounded once to the dtype of its input.

Example:
    >>> import torch, opguide
    >>> from opguide.testing import TOLERANCES, make_inputs
    >>> x, w = make_inputs((4, 64), torch.bfloat16)
    >>> y = opguide.rms_norm(x, w)
    >>> torch.testing.assert_close(y, opguide.rms_norm_reference(x, w), **TOLERANCES[x.dtype])
"""

from __future__ import annotations

import torch

from .reference import rms_norm_reference

__all__ = ["TOLERANCES", "GRAD_TOLERANCES", "make_inputs", "reference_grads", "assert_grads_close"]

#: ``assert_close`` tolerances of the forward output, by dtype. For float16
#: and bfloat16 they are about twice the dtype's machine epsilon (the output's
#: rounding, on top of float32 accumulation in another order than the
#: reference's); for float32 1e-5 both ways (``torch.testing``'s default atol;
#: its default rtol for float32 is 1.3e-6).
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
}
#: Tolerances of the gradients, by dtype. grad_x sums over a row and grad_weight
#: over rows, so they are looser in low precision (grad_weight's absolute
#: tolerance also grows with the rows; see :func:`assert_grads_close`).
GRAD_TOLERANCES = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=8e-2, rtol=6e-2),
    torch.float64: dict(atol=1e-10, rtol=1e-10),
}


def make_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    requires_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, weight)``: normal random values, the same for a seed on every device.

    Drawn in float32 on the CPU and then converted, so that a CPU and a GPU
    test with one seed see the same numbers.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype=dtype, device=device)
    w = torch.randn(shape[-1], generator=gen).to(dtype=dtype, device=device)
    return x.requires_grad_(requires_grad), w.requires_grad_(requires_grad)


def reference_grads(
    x: torch.Tensor, weight: torch.Tensor, grad_y: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_x, grad_weight)`` by autograd through the float32 reference, in the inputs'
    dtypes."""
    xr = x.detach().float().requires_grad_()
    wr = weight.detach().float().requires_grad_()
    rms_norm_reference(xr, wr, eps).backward(grad_y.float())
    return xr.grad.to(x.dtype), wr.grad.to(weight.dtype)


def assert_grads_close(
    grads: tuple[torch.Tensor, torch.Tensor], expected: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Compares ``(grad_x, grad_weight)`` with :data:`GRAD_TOLERANCES`.

    grad_weight sums over the rows of grad_x's shape, so its absolute tolerance is
    scaled by the square root of their number (independent rounding errors).
    """
    grad_x, grad_weight = grads
    ex, ew = expected
    tol = GRAD_TOLERANCES[grad_x.dtype]
    rows = grad_x.numel() // max(grad_x.shape[-1], 1) if grad_x.dim() else 1
    torch.testing.assert_close(grad_x, ex.to(grad_x.dtype), **tol)
    torch.testing.assert_close(
        grad_weight.float(), ew.float(), atol=tol["atol"] * max(rows, 1) ** 0.5, rtol=tol["rtol"]
    )
