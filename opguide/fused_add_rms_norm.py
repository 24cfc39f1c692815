"""Fused residual-add + RMSNorm: an operator that mutates an input, returns two
outputs and takes optional arguments.

The schema lives in ``csrc/opguide.cpp``::

    fused_add_rms_norm_(Tensor x, Tensor(a!) residual, Tensor? weight, float eps,
                        ScalarType? out_dtype=None) -> (Tensor, Tensor)

``Tensor(a!)`` says that the kernel writes into ``residual``; ``Tensor?`` and
``ScalarType?`` may be ``None``. This module adds the checked wrapper and the
fake kernel; the kernels are C++ (CPU), CUDA and Triton.
"""

from __future__ import annotations

import torch

from ._checks import _OP, _check_fused_add_rms_norm_args
from .backends import native_under_compile, resolve_backend
from .ops import _PLAIN, _register_dtensor_rules
from .reference import fused_add_rms_norm_reference

# [refuse-grad]
_INSTEAD = "out = opguide.rms_norm(residual + x, weight, eps)"


def _refuse_grad(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None) -> None:
    """Raises the refusals of the C++ Autograd kernel, worded the same.

    That kernel is ``csrc/fused_add_rms_norm/fused_add_rms_norm_autograd.cpp``.

    The compiled operator refuses inputs that need grad in its Autograd kernel.
    The Triton operator has no Autograd kernel of its own (it is registered
    with ``Library.define`` and a ``CompositeExplicitAutograd`` ``impl`` that
    bumps ``residual``'s version counter itself), and its body runs below
    autograd, so it cannot tell a training call from a ``torch.no_grad()``
    one. The check lives here, where ``torch.compile`` traces it too.
    """
    if not torch.is_grad_enabled():
        return
    for name, t, written in (
        ("residual", residual, True),
        ("x", x, False),
        ("weight", weight, False),
    ):
        if t is None or not t.requires_grad:
            continue
        if written and t.is_leaf:
            raise RuntimeError(
                f"{_OP}{name} is a leaf tensor that requires grad: a leaf Variable that requires "
                f"grad is being used in an in-place operation. Write it under torch.no_grad(), "
                f"or use {_INSTEAD}"
            )
        raise RuntimeError(
            f"{_OP}{name} requires grad, and fused_add_rms_norm_ has no backward (it writes its "
            f"input in place). Call it under torch.no_grad(), or use the differentiable {_INSTEAD}"
        )


# [refuse-grad-end]


def fused_add_rms_norm_(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    out_dtype: torch.dtype | None = None,
    *,
    backend: str = "auto",
    compiled: str = "kernel",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Adds ``x`` to ``residual`` in place, then RMS-normalises the result.

    The step between two blocks of a transformer, in one pass over memory::

        residual += x                          # in place, in residual's dtype
        out = residual / rms(residual) * weight  # over the last dimension

    Arithmetic is in float32 (float64 for a float64 residual). The sum is
    rounded to the residual's dtype once, stored, and that stored value is what
    gets normalised.

    Args:
        x: the block's output, shape ``(..., N)``; float32, float16, bfloat16
            or float64.
        residual: the residual stream, same shape and device as ``x``, with
            the dtype of ``x`` or float32. **Updated in place.**
        weight: optional scale of shape ``(N,)`` with the dtype of ``x``;
            ``None`` means no scale.
        eps: non-negative number added to the mean square. Default ``1e-6``.
        out_dtype: optional dtype of ``out``; ``None`` means the dtype of ``x``.
        backend: ``"auto"``, ``"cpp"`` or ``"triton"``; see
            :mod:`opguide.backends`. The Triton kernels handle float32, float16
            and bfloat16 only.
        compiled: what ``torch.compile`` and ``torch.export`` get when they
            trace the call: ``"kernel"`` (default), the operator
            ``opguide::fused_add_rms_norm_`` itself, which an exported program
            or AOTInductor package calls; or ``"native"``, the plain-PyTorch
            form (:func:`opguide.fused_add_rms_norm_reference`, the sum
            written back into ``residual`` with ``copy_``), which pays where
            Inductor fuses it with its neighbours into faster code than the
            kernel's (see :mod:`opguide.backends`). Eager calls run the
            kernel either way.

    Returns:
        ``(out, inv_rms)``: ``out`` has the shape of ``x`` and dtype
        ``out_dtype``; ``inv_rms`` holds ``1 / rms`` of each updated row, shape
        ``x.shape[:-1]``, float32 (float64 for a float64 residual).

    Raises:
        TypeError: a dtype is not accepted (``x``, ``residual``, ``weight``,
            ``out_dtype``).
        ValueError: a shape does not match, ``x`` is 0-d, ``eps < 0``, or
            ``backend`` or ``compiled`` is unknown.
        RuntimeError: the tensors are on different devices, ``residual`` has
            elements that share memory, the backend is not available, or (with
            grad mode on) an input requires grad: this operator has no
            backward; ``opguide.rms_norm(residual + x, weight, eps)`` is the
            differentiable form.

    Example:
        >>> import torch, opguide
        >>> x, residual = torch.randn(4, 8), torch.randn(4, 8)
        >>> out, inv_rms = opguide.fused_add_rms_norm_(x, residual, torch.ones(8))
        >>> out.shape, inv_rms.shape
        (torch.Size([4, 8]), torch.Size([4]))
    """
    native = native_under_compile("fused_add_rms_norm_", compiled)
    plain = type(x) in _PLAIN and type(residual) in _PLAIN and type(eps) is float
    if native or not (plain and type(weight) in (*_PLAIN, type(None)) and backend == "triton"):
        # The Triton operator checks the same things with the same messages.
        _check_fused_add_rms_norm_args(x, residual, weight, eps, out_dtype)
    if native:
        # The plain-PyTorch form for Inductor, with the operator's contract:
        # inputs that need grad are refused, residual is written in place.
        resolve_backend("fused_add_rms_norm_", "fused_add_rms_norm_", backend, x)
        _refuse_grad(x, residual, weight)
        out, inv_rms, new_residual = fused_add_rms_norm_reference(
            x, residual, weight, eps, out_dtype
        )
        residual.copy_(new_residual)
        return out, inv_rms
    _register_dtensor_rules(residual)
    if resolve_backend("fused_add_rms_norm_", "fused_add_rms_norm_", backend, x) == "triton":
        _refuse_grad(x, residual, weight)
        op = torch.ops.opguide.fused_add_rms_norm_triton_.default
    else:
        op = torch.ops.opguide.fused_add_rms_norm_.default
    return op(x, residual, weight, float(eps), out_dtype)


# [fake]
@torch.library.register_fake("opguide::fused_add_rms_norm_")
def _fused_add_rms_norm_fake(x, residual, weight, eps, out_dtype=None):
    # The fake kernel describes the outputs only. It does not touch residual:
    # the schema's (a!) already tells torch.compile that residual is written.
    _check_fused_add_rms_norm_args(x, residual, weight, eps, out_dtype)
    out = x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype)
    acc = torch.float64 if residual.dtype == torch.float64 else torch.float32
    inv_rms = x.new_empty(x.shape[:-1], dtype=acc)
    return out, inv_rms


# [fake-end]
