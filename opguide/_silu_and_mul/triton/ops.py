"""silu_and_mul's Triton operators: the tile planner, the launch functions and the registrations.

``opguide::silu_and_mul_triton`` and ``opguide::silu_and_mul_backward_triton``
are defined as :mod:`opguide.triton.ops` defines its operators
(:func:`~opguide.triton.ops.register_op`), with fake kernels and the rules of
``rules.py`` (autograd with the Triton backward, vmap, autocast, FLOPs). The
tile is a :class:`SiluAndMulConfig` that :func:`silu_and_mul_config` chooses;
the launch functions take a ``forced=`` one.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch.utils.flop_counter import register_flop_formula

from ...triton import launch
from ...triton.ops import _check_input, launchable, register_op
from .. import rules
from .._checks import check_silu_and_mul_args, check_silu_and_mul_backward_args
from .kernels import _silu_and_mul_backward_kernel, _silu_and_mul_forward_kernel


@dataclasses.dataclass(frozen=True)
class SiluAndMulConfig:
    """A program's tile: ``rows`` rows of ``block_n`` columns of ``y``, and its warps.

    Attributes:
        block_n: BLOCK_N, columns of each half of ``x`` (a power of two).
        rows: ROWS, rows per program (a power of two).
        num_warps: warps per program.
    """

    block_n: int
    rows: int
    num_warps: int


# Elements of y a program takes: 4096 (32 of each input per thread on 4
# warps, four 16-byte vectors of a 16-bit input), so a long row is still cut into
# programs enough to fill a GPU (a 16384 x 8192 output is 32768 programs) and
# short rows are stacked until a program has as much work. Widest tile row:
# 4096 columns. Chosen by arithmetic; guidekit/benchmark/silu_and_mul.py
# measures the kernels against a copy of the same bytes.
TILE = 4096
MAX_BLOCK_N = 4096
NUM_WARPS = 4


def silu_and_mul_config(n: int) -> SiluAndMulConfig:
    """The tile for rows of ``n`` output elements (forward and backward alike).

    Args:
        n: ``d``, the length of a row of ``y``.

    Returns:
        BLOCK_N: ``n`` rounded up to a power of two, at most :data:`MAX_BLOCK_N`;
        ROWS: enough rows for :data:`TILE` elements.
    """
    block_n = min(launch.next_power_of_2(n), MAX_BLOCK_N)
    return SiluAndMulConfig(block_n=block_n, rows=max(1, TILE // block_n), num_warps=NUM_WARPS)


def _grid(m: int, n: int, config: SiluAndMulConfig) -> tuple[int, int]:
    return launch.cdiv(m, config.rows), launch.cdiv(n, config.block_n)


def silu_and_mul_forward(
    x: torch.Tensor,
    *,
    forced: Optional[SiluAndMulConfig] = None,  # noqa: UP045
) -> torch.Tensor:
    """y for x, by the Triton forward kernel.

    Args:
        x: as for :func:`opguide.silu_and_mul`; float32, float16 or bfloat16.
        forced: the tile to launch with, instead of :func:`silu_and_mul_config`'s.

    Returns:
        y, contiguous, of shape ``x.shape[:-1] + (d,)`` and the dtype of x.

    Raises:
        TypeError, ValueError: as :func:`opguide.silu_and_mul` does; TypeError
            also for float64.
        RuntimeError: x is on the CPU and Triton's interpreter is off.
    """
    check_silu_and_mul_args(x)
    _check_input("silu_and_mul", "x", x)
    xc = x.contiguous()
    # Plain ints: under a tracer with dynamic shapes these are SymInts, which
    # Triton's launcher cannot hash.
    n = int(xc.shape[-1]) // 2
    y = torch.empty((*xc.shape[:-1], n), dtype=xc.dtype, device=xc.device)
    m = int(y.numel()) // n if n > 0 else 0
    if m == 0:
        return y
    config = forced or silu_and_mul_config(n)
    with launch.on_device_of(xc):
        launchable(_silu_and_mul_forward_kernel)[_grid(m, n, config)](
            xc, y, m, n, BLOCK_N=config.block_n, ROWS=config.rows, ALIGN=launch.align(n),
            num_warps=config.num_warps, **launch.pdl_options(xc),
        )  # fmt: skip
    return y


def silu_and_mul_backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    *,
    forced: Optional[SiluAndMulConfig] = None,  # noqa: UP045
) -> torch.Tensor:
    """grad_x for the gradient of y and the forward's input, by the Triton backward kernel.

    Args:
        grad_y: the gradient of y, of shape ``x.shape[:-1] + (d,)``.
        x: the forward's input.
        forced: the tile to launch with, instead of :func:`silu_and_mul_config`'s.

    Returns:
        grad_x, contiguous, with the shape and dtype of x.

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`silu_and_mul_forward`, and
            for a ``grad_y`` of another shape, dtype or device.
    """
    check_silu_and_mul_backward_args(grad_y, x)
    _check_input("silu_and_mul_backward", "x", x)
    xc = x.contiguous()
    grad_yc = grad_y.contiguous()
    grad_x = torch.empty_like(xc)
    n = int(xc.shape[-1]) // 2  # plain ints, as in silu_and_mul_forward
    m = int(grad_yc.numel()) // n if n > 0 else 0
    if m == 0:
        return grad_x
    config = forced or silu_and_mul_config(n)
    with launch.on_device_of(xc):
        launchable(_silu_and_mul_backward_kernel)[_grid(m, n, config)](
            grad_yc, xc, grad_x, m, n, BLOCK_N=config.block_n, ROWS=config.rows,
            ALIGN=launch.align(n), num_warps=config.num_warps, **launch.pdl_options(xc),
        )  # fmt: skip
    return grad_x


@register_op("silu_and_mul_triton", mutates_args=())
def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    return silu_and_mul_forward(x)


@register_op("silu_and_mul_backward_triton", mutates_args=())
def silu_and_mul_backward_triton(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return silu_and_mul_backward(grad_y, x)


@torch.library.register_fake("opguide::silu_and_mul_triton")
def _(x):
    check_silu_and_mul_args(x)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.register_fake("opguide::silu_and_mul_backward_triton")
def _(grad_y, x):
    check_silu_and_mul_backward_args(grad_y, x)
    return x.new_empty(x.shape)


# Autograd, vmap, autocast and FLOPs: the rules of rules.py, with the Triton backward.
def _backward(ctx, grad_y):
    (x,) = ctx.saved_tensors
    return silu_and_mul_backward_triton(grad_y, x)


torch.library.register_autograd(
    "opguide::silu_and_mul_triton", _backward, setup_context=rules.setup_context
)


# The backward has no derivative of its own: a double backward through it is
# an error that names it, not a warning and zero gradients.
def _backward_op_backward(ctx, *grads):
    raise RuntimeError(
        "opguide::silu_and_mul_backward_triton has no derivative: a double backward "
        "through opguide's Triton silu_and_mul is not supported"
    )


torch.library.register_autograd("opguide::silu_and_mul_backward_triton", _backward_op_backward)
torch.library.register_vmap(
    "opguide::silu_and_mul_triton", rules.forward_vmap_rule(silu_and_mul_triton)
)
torch.library.register_vmap(
    "opguide::silu_and_mul_backward_triton", rules.backward_vmap_rule(silu_and_mul_backward_triton)
)
rules.register_autocast("opguide::silu_and_mul_triton")
register_flop_formula(torch.ops.opguide.silu_and_mul_triton)(rules.silu_and_mul_flop)
register_flop_formula(torch.ops.opguide.silu_and_mul_backward_triton)(
    rules.silu_and_mul_backward_flop
)
