"""FLOP and byte counts of opguide's operators.

Importing this module (``import opguide`` does) registers a FLOP formula for
every operator that does arithmetic with
:func:`torch.utils.flop_counter.register_flop_formula`, so that
:class:`torch.utils.flop_counter.FlopCounterMode` counts them under their
names. A formula receives the shapes of the operator's tensor arguments (other
arguments as they are) and ``out_shape``, the shapes of its outputs.

The counts are per element of ``x`` (M rows of N): each add, multiply and
square is one FLOP, a sum over a row is one add per element. Left out: the
per-row scalar work (the divide by N, the ``+ eps``, the ``rsqrt``; N times
fewer operations), conversions between dtypes, and index arithmetic. The
C++, CUDA and Triton kernels of one operator share its formula.

:func:`min_bytes` gives the other half of a roofline: the bytes an operator
must read and write at the least.

Inside FlopCounterMode, ``torch.compile`` runs a function eagerly (Dynamo does
not compile while a dispatch mode is active): the counts are the eager calls'.
"""

from __future__ import annotations

import importlib
from math import prod

import torch
from torch.utils.flop_counter import register_flop_formula

from . import registry

_OPS = torch.ops.opguide


def _defined(*names: str | None) -> list:
    # The packets torch.ops.opguide.<name> of an operator and its Triton twin,
    # which exists only where the Triton module could be imported.
    return [getattr(_OPS, name) for name in names if name and hasattr(_OPS, name)]


# The registry's operators, each with its twin: the inference forward, the
# training forward (which also returns inv_rms) and the backward of RMSNorm;
# the fused residual-add + RMSNorm.
_INFERENCE, _TRAINING, _BACKWARD = (_defined(*ops) for ops in registry.get("rms_norm").twins())
(_FUSED,) = (_defined(*ops) for ops in registry.get("fused_add_rms_norm").twins())


@register_flop_formula(_INFERENCE + _TRAINING)
def rms_norm_flop(x_shape, weight_shape, *args, out_shape=None, **kwargs) -> int:
    """RMSNorm forward, ``y = x * rsqrt(mean(x**2) + eps) * weight``: 4 per element.

    Square ``x``, add it to the row's sum, multiply by the row's ``inv_rms``,
    multiply by ``weight``. Storing ``inv_rms`` (``rms_norm_forward``) adds no
    arithmetic.

    Args:
        x_shape: the shape of ``x``.
        weight_shape: the shape of ``weight``.

    Returns:
        ``4 * x.numel()``.
    """
    return 4 * prod(x_shape)


@register_flop_formula(_BACKWARD)
def rms_norm_backward_flop(grad_shape, x_shape, *args, out_shape=None, **kwargs) -> int:
    """RMSNorm backward, ``(grad_x, grad_weight)``: 9 per element.

    With ``r = inv_rms`` of the row, ``g = grad_y * weight`` and ``h = x * r``
    (2), ``c = sum(g * h)`` over the row (2), ``grad_x = r * (g - h * c / N)``
    (3, the ``c / N`` once per row), and ``grad_weight = sum(grad_y * h)``
    over the rows (2).

    Args:
        grad_shape: the shape of ``grad_y``.
        x_shape: the shape of ``x``.

    Returns:
        ``9 * x.numel()``.
    """
    return 9 * prod(x_shape)


@register_flop_formula(_FUSED)
def fused_add_rms_norm_flop(
    x_shape, residual_shape, weight_shape=None, *args, out_shape=None, **kwargs
) -> int:
    """Residual add, then RMSNorm: 5 per element, 4 without a weight.

    ``residual += x`` (1), then the forward of :func:`rms_norm_flop` on the
    sum (4), less the multiply by ``weight`` when ``weight`` is None.

    Args:
        x_shape: the shape of ``x``.
        residual_shape: the shape of ``residual``.
        weight_shape: the shape of ``weight``, ``None`` for no weight.

    Returns:
        ``5 * x.numel()``, or ``4 * x.numel()`` when ``weight`` is None.
    """
    return (4 if weight_shape is None else 5) * prod(x_shape)


def _nbytes(name: str, t: torch.Tensor) -> int:
    if not isinstance(t, torch.Tensor):
        got = type(t).__name__
        raise TypeError(f"min_bytes: {name} must be a torch.Tensor, got {got}")
    return t.numel() * t.element_size()


def _inv_rms_bytes(x: torch.Tensor) -> int:
    # One value per row, float64 for float64 inputs, float32 otherwise.
    return prod(x.shape[:-1]) * (8 if x.dtype == torch.float64 else 4)


def _rms_norm_bytes(x, weight, eps=None):
    # Read x and weight, write y (like x).
    return _nbytes("x", x) + _nbytes("weight", weight), _nbytes("x", x)


def _rms_norm_forward_bytes(x, weight, eps=None):
    # As rms_norm, and write inv_rms.
    read, written = _rms_norm_bytes(x, weight)
    return read, written + _inv_rms_bytes(x)


def _rms_norm_backward_bytes(grad_y, x, weight, inv_rms):
    # Read grad_y, x, weight and inv_rms; write grad_x and grad_weight.
    read = _nbytes("grad_y", grad_y) + _nbytes("x", x)
    read += _nbytes("weight", weight) + _nbytes("inv_rms", inv_rms)
    return read, _nbytes("x", x) + _nbytes("weight", weight)


def _fused_bytes(x, residual, weight=None, eps=None, out_dtype=None):
    # Read x, residual and weight; write residual, out (in out_dtype) and inv_rms.
    read = _nbytes("x", x) + _nbytes("residual", residual)
    read += 0 if weight is None else _nbytes("weight", weight)
    out = x.numel() * (out_dtype or x.dtype).itemsize
    return read, _nbytes("residual", residual) + out + _inv_rms_bytes(residual)


_BYTES = {
    **dict.fromkeys(_INFERENCE, _rms_norm_bytes),
    **dict.fromkeys(_TRAINING, _rms_norm_forward_bytes),
    **dict.fromkeys(_BACKWARD, _rms_norm_backward_bytes),
    **dict.fromkeys(_FUSED, _fused_bytes),
}
# Other operators of the registry give their own formulas: their module's
# MIN_BYTES, {compiled operator name: function}, which the Triton twin shares.
for _op in registry.OPERATORS:
    _own = getattr(importlib.import_module(_op.module), "MIN_BYTES", {})
    for _compiled, _triton in _op.twins():
        if _compiled in _own:
            _BYTES.update(dict.fromkeys(_defined(_compiled, _triton), _own[_compiled]))


def min_bytes(op, *args, **kwargs) -> tuple[int, int]:
    r"""The bytes an operator must read and write at the least: its memory roofline.

    Every input read once, every output and every input it writes written
    once. A memory-bound kernel's time is at least this over the bandwidth.

    Args:
        op: an opguide operator, e.g. ``torch.ops.opguide.rms_norm`` or its
            ``.default``.
        \*args: the operator's arguments (and \*\*kwargs its keyword
            arguments). Only shapes and dtypes are read: ``meta`` tensors
            will do.

    Returns:
        ``(read, written)``, in bytes.

    Raises:
        ValueError: ``op`` is not an operator of opguide.
        TypeError: a tensor argument is not a tensor.
    """
    packet = getattr(op, "overloadpacket", op)  # an OpOverload's packet
    if packet not in _BYTES:
        names = ", ".join(sorted(str(p) for p in _BYTES))
        raise ValueError(f"min_bytes: op must be one of {names}; got {op}")
    return _BYTES[packet](*args, **kwargs)
