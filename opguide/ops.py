"""Public operators of opguide: checked Python wrappers over ``torch.ops.opguide``.

The schemas and kernels are C++ (``csrc/``); this module adds what only
Python can add: argument checks with clear messages, and the fake (meta)
kernels that let ``torch.compile`` trace the operators without running them.
"""

from __future__ import annotations

import torch

from ._checks import _check_rms_norm_args
from .backends import compiled_device_types, native_under_compile, resolve_backend
from .reference import rms_norm_reference


def _register_dtensor_rules(x: object) -> None:
    """Imports opguide.distributed (once) when an argument is a DTensor."""
    if type(x).__name__ == "DTensor" and type(x).__module__.startswith("torch.distributed"):
        from . import distributed  # noqa: F401  (registers the sharding rules)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    backend: str = "auto",
    compiled: str = "kernel",
) -> torch.Tensor:
    """Root-mean-square normalisation over the last dimension.

    Computes ``x / sqrt(mean(x**2, dim=-1) + eps) * weight`` with float32
    accumulation (float64 for float64 inputs), rounding once to the dtype of
    ``x``. Runs the compiled kernel of the device of ``x``.

    Args:
        x: input of shape ``(..., N)``; float32, float16, bfloat16 or float64.
            Non-contiguous inputs are accepted (they are made contiguous).
        weight: scale of shape ``(N,)``, same dtype and device as ``x``.
        eps: non-negative number added to the mean square. Default ``1e-6``.
        backend: ``"auto"`` (default), ``"cpp"`` (the compiled C++/CUDA
            kernels) or ``"triton"`` (the Triton kernels, float32, float16 and
            bfloat16 only); see :mod:`opguide.backends`.
        compiled: what ``torch.compile`` and ``torch.export`` get when they
            trace the call: ``"kernel"`` (default), the operator
            ``opguide::rms_norm`` itself, which an exported program or
            AOTInductor package calls; or ``"native"``, the plain-PyTorch
            form (:func:`opguide.rms_norm_reference`), which pays where
            Inductor fuses it with its neighbours into faster code than the
            kernel's (see :mod:`opguide.backends`). Eager calls always run the
            operator.

    Returns:
        A new contiguous tensor with the shape and dtype of ``x``. It is
        differentiable (first order) with respect to ``x`` and ``weight``:
        when either requires grad, the forward runs ``opguide::rms_norm_forward``,
        which also keeps the per-row inverse RMS for ``opguide::rms_norm_backward``.

    Raises:
        TypeError: ``x`` is not floating point, or ``weight`` has another dtype.
        ValueError: ``weight`` is not of shape ``(N,)``, ``x`` is 0-d, ``eps < 0``,
            or ``backend`` or ``compiled`` is unknown.
        RuntimeError: ``x`` and ``weight`` are on different devices, or the
            backend is not available.

    Example:
        >>> import torch, opguide
        >>> x = torch.randn(4, 8)
        >>> y = opguide.rms_norm(x, torch.ones(8))
        >>> y.shape
        torch.Size([4, 8])
    """
    if native_under_compile("rms_norm", compiled):
        # What vLLM's CustomOp calls forward_native: Inductor's own code for
        # the norm, fused with its neighbours, when the caller asks for it.
        _check_rms_norm_args(x, weight, eps, autocast=True)
        resolve_backend("rms_norm", "rms_norm", backend, x)
        return rms_norm_reference(x, weight, eps)
    plain = type(x) in _PLAIN and type(weight) in _PLAIN and type(eps) is float
    if plain and (backend == "auto" or backend == "cpp"):
        if (x.is_cuda and _CPP_CUDA) or (x.is_cpu and _CPP_CPU):
            # The common call, made cheap: the compiled operator checks the
            # same things with the same messages, and its C++ autograd kernel
            # picks the training forward when gradients are needed.
            return _RMS_NORM(x, weight, eps)
    if plain and backend == "triton":
        # The Triton route, as cheap: its operators check the same things with
        # the same messages (opguide/_checks.py), and take eps as it is.
        resolve_backend("rms_norm", "rms_norm", backend, x)  # refuses where Triton is off
        from . import triton  # loaded by opguide/__init__.py when usable

        return triton.rms_norm(x, weight, eps)
    _check_rms_norm_args(x, weight, eps, autocast=True)
    _register_dtensor_rules(x)
    if resolve_backend("rms_norm", "rms_norm", backend, x) == "triton":
        from . import triton  # loaded by opguide/__init__.py when usable

        return triton.rms_norm(x, weight, float(eps))
    return _RMS_NORM(x, weight, float(eps))


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_CPP_CPU = "cpu" in compiled_device_types("rms_norm")
_CPP_CUDA = "cuda" in compiled_device_types("rms_norm")
_RMS_NORM = torch.ops.opguide.rms_norm.default


# [fake-rms-norm]
@torch.library.register_fake("opguide::rms_norm")
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Describe the output without computing it: same shape and dtype as x,
    # contiguous (as the real kernels return it), on x's device.
    _check_rms_norm_args(x, weight, eps)
    return x.new_empty(x.shape)


# [fake-rms-norm-end]


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    # The dtype the kernels accumulate in, and the dtype of inv_rms.
    return torch.float64 if dtype == torch.float64 else torch.float32


# [fake-rms-norm-training]
@torch.library.register_fake("opguide::rms_norm_forward")
def _rms_norm_forward_fake(x: torch.Tensor, weight: torch.Tensor, eps: float):
    _check_rms_norm_args(x, weight, eps)
    # y like x; inv_rms: one accumulation-type value per row, shape x.shape[:-1].
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=_acc_dtype(x.dtype))


@torch.library.register_fake("opguide::rms_norm_backward")
def _rms_norm_backward_fake(grad_y, x, weight, inv_rms):
    torch._check(grad_y.shape == x.shape, lambda: "rms_norm_backward: grad_y must match x")
    # grad_x like x, grad_weight like weight; both new and contiguous.
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


# [fake-rms-norm-training-end]


# Autograd: the formula is registered in C++, at the Autograd key, by
# csrc/rms_norm/rms_norm_autograd.cpp (the same formula can be registered from
# Python with torch.library.register_autograd).


# [vmap-rms-norm]
# torch.vmap calls these rules with the batched dimension of each argument
# (in_dims, None when an argument is not batched). The batch is just more rows
# for the forward ops, so one call serves it when the weight is shared. A
# weight per batch element, and the backward (whose grad_weight sums over
# rows, which must stay per element), run one call per batch element.
def _batch_first(t: torch.Tensor, bdim: int | None, size: int) -> torch.Tensor:
    return t.movedim(bdim, 0) if bdim is not None else t.expand(size, *t.shape)


def _vmap_by_loop(op, info, in_dims, *args):
    outs = [
        op(*[a.select(d, i) if d is not None else a for a, d in zip(args, in_dims, strict=True)])
        for i in range(info.batch_size)
    ]
    if isinstance(outs[0], tuple):
        return tuple(torch.stack(o) for o in zip(*outs, strict=True)), (0,) * len(outs[0])
    return torch.stack(outs), 0


def _forward_vmap_rule(op, out_dims):
    """The rule for a forward op taking (x, weight, eps): rows, or a loop."""

    def rule(info, in_dims, x, weight, eps):
        x_bdim, w_bdim, _ = in_dims
        if w_bdim is not None:
            return _vmap_by_loop(op, info, in_dims, x, weight, eps)
        return op(_batch_first(x, x_bdim, info.batch_size), weight, eps), out_dims

    return rule


def _rms_norm_backward_vmap(info, in_dims, grad_y, x, weight, inv_rms):
    op = torch.ops.opguide.rms_norm_backward.default
    return _vmap_by_loop(op, info, in_dims, grad_y, x, weight, inv_rms)


torch.library.register_vmap(
    "opguide::rms_norm", _forward_vmap_rule(torch.ops.opguide.rms_norm.default, 0)
)
torch.library.register_vmap(
    "opguide::rms_norm_forward",
    _forward_vmap_rule(torch.ops.opguide.rms_norm_forward.default, (0, 0)),
)
torch.library.register_vmap("opguide::rms_norm_backward", _rms_norm_backward_vmap)
# [vmap-rms-norm-end]


# [autocast-rms-norm]
# Under torch.autocast a norm runs in float32, as PyTorch's own layer_norm
# does in a CUDA autocast region: both x and weight are cast to float32 (a
# bfloat16 activation with a float32 weight is the usual pair), and the output
# is float32; the next matmul casts it down again. Registered for CPU and
# CUDA, so a model behaves the same on both.
for _op in ("opguide::rms_norm", "opguide::rms_norm_forward"):
    for _device in ("cpu", "cuda"):
        torch.library.register_autocast(_op, _device, torch.float32)
# [autocast-rms-norm-end]
