"""RMSNorm (forward and backward) and fused residual-add + RMSNorm as Triton kernels.

Importing this package registers the kernels as operators of the ``opguide``
namespace, next to the C++ ones, so that :func:`torch.compile` traces a call
to them without a graph break:

* ``opguide::rms_norm_triton``: ``y = x / rms(x) * weight``; differentiable;
* ``opguide::rms_norm_forward_triton``: ``(y, inv_rms)``, the training forward,
  which keeps the per-row ``inv_rms`` for the backward;
* ``opguide::rms_norm_backward_triton``: ``(grad_x, grad_weight)`` from ``grad_y``, ``x``,
  ``weight`` and the saved ``inv_rms``, the contract of the C++
  ``opguide::rms_norm_backward``;
* ``opguide::fused_add_rms_norm_triton_``: the Triton twin of
  ``opguide::fused_add_rms_norm_``.

Users reach them through ``backend="triton"`` of :func:`opguide.rms_norm` and
:func:`opguide.fused_add_rms_norm_`. The modules:

* ``interpreter.py``: whether the reader selected Triton's interpreter;
* ``prologue.py``: the first lines of every kernel, as ``@triton.jit`` helpers;
* ``forward.py``, ``backward.py``, ``split.py``, ``fused.py``: the kernels, by family;
* ``launch.py``: each kernel's knobs as frozen dataclasses, one planner per operator;
* ``plans.py``: each planner's choice and its grid, cached per problem for eager calls;
* ``ops.py``: the launch functions and the operators (``Library.define`` and ``impl``);
* ``autograd.py``: ``register_autograd`` for the operators;
* this file: :func:`rms_norm`, which picks the training or the inference operator.
"""

from .interpreter import INTERPRET

# isort: split
import torch

from . import autograd  # noqa: F401  (registers each operator's backward)
from .launch import MAX_REGISTER_ROW, MAX_REGISTER_ROW_BACKWARD
from .ops import (
    SUPPORTED_DTYPES,
    fused_add_rms_norm_triton_,
    rms_norm_backward_triton,
    rms_norm_forward_triton,
    rms_norm_triton,
)

__all__ = [
    "INTERPRET",
    "MAX_REGISTER_ROW",
    "MAX_REGISTER_ROW_BACKWARD",
    "SUPPORTED_DTYPES",
    "fused_add_rms_norm_triton_",
    "rms_norm",
    "rms_norm_backward_triton",
    "rms_norm_forward_triton",
    "rms_norm_triton",
]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """What ``opguide.rms_norm(x, weight, eps, backend="triton")`` runs.

    The training operator when gradients are needed (it keeps inv_rms for the
    backward), the inference one if not. The operators check the arguments, with
    the messages of :func:`opguide.rms_norm`: a caller need not check them first.

    Args:
        x, weight: tensors, as for :func:`opguide.rms_norm`.
        eps: a float, as for :func:`opguide.rms_norm`.

    Returns:
        y, with the shape and dtype of x.

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`opguide.rms_norm` does.
    """
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return rms_norm_forward_triton(x, weight, eps)[0]
    return rms_norm_triton(x, weight, eps)
