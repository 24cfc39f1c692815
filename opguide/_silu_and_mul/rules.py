"""The rules that silu_and_mul's two pairs of operators share.

The compiled pair (``opguide::silu_and_mul``, ``opguide::silu_and_mul_backward``,
registered by ``ops.py``) and its Triton twins (``triton/ops.py``) get the
same autograd context, vmap rules, autocast rule and FLOP formulas from
here. This module touches no operator, so either route can take it alone.
"""

from __future__ import annotations

from math import prod

import torch


# Autograd: y depends on x alone, so x is all the backward keeps; the
# backward operator recomputes sigmoid(a) rather than storing it.
def setup_context(ctx, inputs, output) -> None:
    """Keeps ``x`` for the backward (``register_autograd``'s ``setup_context``)."""
    (x,) = inputs
    ctx.save_for_backward(x)


# vmap: the batch is just more rows, so one call serves it once the batched
# dimension is moved to the front. in_dims name dimensions of the physical
# tensor; the logical last dimension stays last wherever the batch is.
def batch_first(t: torch.Tensor, bdim: int | None, size: int) -> torch.Tensor:
    """``t`` with its batched dimension first, or expanded to ``size`` when it has none."""
    return t.movedim(bdim, 0) if bdim is not None else t.expand(size, *t.shape)


def forward_vmap_rule(op):
    """The vmap rule of a forward operator ``op(x)``."""

    def rule(info, in_dims, x):
        return op(batch_first(x, in_dims[0], info.batch_size)), 0

    return rule


def backward_vmap_rule(op):
    """The vmap rule of a backward operator ``op(grad_y, x)``."""

    def rule(info, in_dims, grad_y, x):
        g_dim, x_dim = in_dims
        size = info.batch_size
        return op(batch_first(grad_y, g_dim, size), batch_first(x, x_dim, size)), 0

    return rule


# Autocast: float32 in, float32 out, on CPU and CUDA alike, as for
# opguide.rms_norm and as autocast does for the pointwise functions built on
# exp (exp, softplus: its float32 list). The kernels compute in float32
# whatever the dtype, so the values are those of a call on the low-precision
# input; the down projection that follows casts the float32 output down
# again, rounding once, as the kernel's own rounding would. What it costs is
# bytes: the cast of x and a float32 output, about three times a bfloat16
# call's traffic. A caller who wants the low-precision call in an autocast
# region calls it inside torch.autocast(..., enabled=False).
def register_autocast(op: str) -> None:
    """Registers the float32 autocast rule above for ``op`` on CPU and CUDA."""
    for device in ("cpu", "cuda"):
        torch.library.register_autocast(op, device, torch.float32)


# FLOP formulas, for torch.utils.flop_counter.FlopCounterMode. Per element of
# y (d of them per row); conversions and index arithmetic are left out, as
# in opguide/flops.py.
def silu_and_mul_flop(x_shape, *args, out_shape=None, **kwargs) -> int:
    """``y = a * sigmoid(a) * b``: 5 per output element.

    ``sigmoid(a) = 1 / (1 + exp(-a))`` (exp, add, divide: 3), times ``a``,
    times ``b``.

    Args:
        x_shape: the shape of ``x``, ``(..., 2*d)``.

    Returns:
        ``5 * y.numel()``, with ``y.numel() = x.numel() / 2``.
    """
    return 5 * (prod(x_shape) // 2)


def silu_and_mul_backward_flop(grad_shape, x_shape, *args, out_shape=None, **kwargs) -> int:
    """``grad_x`` from ``grad_y`` and ``x``: 10 per element of ``grad_y``.

    ``s = sigmoid(a)`` (3), ``gs = grad_y * s`` (1), ``grad_b = gs * a`` (1),
    ``grad_a = gs * b * (1 + a * (1 - s))`` (5).

    Args:
        grad_shape: the shape of ``grad_y``, ``(..., d)``.
        x_shape: the shape of ``x``.

    Returns:
        ``10 * grad_y.numel()``.
    """
    return 10 * prod(grad_shape)


# The bytes each operator must read and write at the least, for
# opguide.flops.min_bytes: every input read once, every output written once.
def _forward_bytes(x) -> tuple[int, int]:
    return x.numel() * x.element_size(), x.numel() // 2 * x.element_size()


def _backward_bytes(grad_y, x) -> tuple[int, int]:
    read = (grad_y.numel() + x.numel()) * x.element_size()
    return read, x.numel() * x.element_size()


#: Compiled operator -> its bytes formula (its Triton twin shares it).
MIN_BYTES = {"silu_and_mul": _forward_bytes, "silu_and_mul_backward": _backward_bytes}
