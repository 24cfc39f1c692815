"""silu_and_mul's public function and what Python adds to its compiled operators.

The schemas and kernels are C++ (``csrc/silu_and_mul/``). This module adds
the checked wrapper :func:`silu_and_mul` and, for ``opguide::silu_and_mul``
and ``opguide::silu_and_mul_backward``, the fake kernels and the registrations
of the rules of ``rules.py``: autograd (``register_autograd``), vmap,
autocast and FLOP formulas.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula

from ..backends import compiled_device_types, native_under_compile, resolve_backend
from . import rules
from ._checks import check_silu_and_mul_args, check_silu_and_mul_backward_args
from .reference import silu_and_mul_reference

_OPS = torch.ops.opguide
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def silu_and_mul(
    x: torch.Tensor, *, backend: str = "auto", compiled: str = "kernel"
) -> torch.Tensor:
    """The gated activation of Llama-style MLPs: ``silu(x[..., :d]) * x[..., d:]``.

    ``x`` holds the gate projection then the up projection side by side (one
    matmul computes both); ``silu(a) = a * sigmoid(a)``. Computed in float32
    (float64 for float64 inputs) and rounded once to the dtype of ``x``.

    Args:
        x: input of shape ``(..., 2*d)``; float32, float16, bfloat16 or float64.
            Non-contiguous inputs are accepted (they are made contiguous).
        backend: ``"auto"`` (default), ``"cpp"`` (the compiled C++/CUDA
            kernels) or ``"triton"`` (the Triton kernels, float32, float16 and
            bfloat16 only); see :mod:`opguide.backends`.
        compiled: what ``torch.compile`` and ``torch.export`` get when they
            trace the call: ``"kernel"`` (default), the operator
            ``opguide::silu_and_mul`` itself, which an exported program or
            AOTInductor package calls; or ``"native"``, the plain-PyTorch form
            (:func:`silu_and_mul_reference`), which pays where Inductor fuses
            it with its neighbours (a cast, the next pointwise operation)
            into faster code than the kernel's (see :mod:`opguide.backends`).
            Eager calls always run the operator.

    Returns:
        A new contiguous tensor of shape ``(..., d)`` and the dtype of ``x``,
        differentiable (first order) with respect to ``x``: its backward runs
        ``opguide::silu_and_mul_backward`` (``backend="triton"``: its Triton twin).
        Inside ``torch.autocast`` the operator runs in float32 and returns
        float32 (see ``rules.py``).

    Raises:
        TypeError: ``x`` is not a tensor, or not of a floating dtype the kernels take.
        ValueError: ``x`` is 0-d, its last dimension is odd, or ``backend``
            or ``compiled`` is unknown.
        RuntimeError: the backend is not available.

    Example:
        >>> import torch, opguide
        >>> x = torch.randn(4, 2 * 8)
        >>> opguide.silu_and_mul(x).shape
        torch.Size([4, 8])
    """
    if native_under_compile("silu_and_mul", compiled):
        # Inductor generates the activation and fuses it with its neighbours
        # (vLLM's forward_native), when the caller asks for it.
        check_silu_and_mul_args(x)
        resolve_backend("silu_and_mul", "silu_and_mul", backend, x)
        return silu_and_mul_reference(x)
    if type(x) in _PLAIN and (backend == "auto" or backend == "cpp"):
        if x.device.type in compiled_device_types("silu_and_mul"):
            # The common call, made cheap: the compiled operator checks the
            # same things with the same messages.
            return _SILU_AND_MUL(x)
    check_silu_and_mul_args(x)
    if resolve_backend("silu_and_mul", "silu_and_mul", backend, x) == "triton":
        from . import triton  # registered by opguide/__init__.py when usable

        return triton.silu_and_mul_triton(x)
    return _SILU_AND_MUL(x)


_SILU_AND_MUL = _OPS.silu_and_mul.default
_SILU_AND_MUL_BACKWARD = _OPS.silu_and_mul_backward.default


# Fake kernels: the outputs' shapes and dtypes without running a kernel, for
# torch.compile, torch.export and opcheck. Outputs are new and contiguous, as
# the kernels return them.
@torch.library.register_fake("opguide::silu_and_mul")
def _silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    check_silu_and_mul_args(x)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.register_fake("opguide::silu_and_mul_backward")
def _silu_and_mul_backward_fake(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    check_silu_and_mul_backward_args(grad_y, x)
    return x.new_empty(x.shape)


# Autograd, vmap, autocast and FLOPs: the rules of rules.py, with the
# compiled backward.
def _backward(ctx, grad_y):
    (x,) = ctx.saved_tensors
    return _SILU_AND_MUL_BACKWARD(grad_y, x)


torch.library.register_autograd(
    "opguide::silu_and_mul", _backward, setup_context=rules.setup_context
)
torch.library.register_vmap("opguide::silu_and_mul", rules.forward_vmap_rule(_SILU_AND_MUL))
torch.library.register_vmap(
    "opguide::silu_and_mul_backward", rules.backward_vmap_rule(_SILU_AND_MUL_BACKWARD)
)
rules.register_autocast("opguide::silu_and_mul")
register_flop_formula(_OPS.silu_and_mul)(rules.silu_and_mul_flop)
register_flop_formula(_OPS.silu_and_mul_backward)(rules.silu_and_mul_backward_flop)
