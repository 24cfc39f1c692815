"""Which implementation runs an operator: the compiled kernels or the Triton ones.

Every operator of opguide that has a Triton twin takes ``backend=``:

``"cpp"``
    the compiled library ``opguide._C``: the C++ kernel on CPU tensors, the
    CUDA kernel on CUDA tensors (when the library was built with CUDA);
``"triton"``
    the Triton kernels of :mod:`opguide.triton` (needs ``triton``;
    on CPU tensors they run in Triton's interpreter, which is slow);
``"auto"`` (the default)
    ``"cpp"`` when ``opguide._C`` has a kernel for the device of the input,
    otherwise ``"triton"`` when Triton is installed, otherwise ``"cpp"`` (and
    the dispatcher says which kernel is missing).

The choice is a keyword argument rather than a global switch so that it is
visible at each call, and so that ``torch.compile`` sees a constant.

A second keyword, ``compiled=``, says what a call gives ``torch.compile``
and ``torch.export`` when they trace it:

``"kernel"`` (the default)
    opguide's operator, as one call in the graph (``opguide::rms_norm``,
    say), with its fake kernel and autograd, running the kernel that
    ``backend=`` chooses; an exported program or AOTInductor package calls it;
``"native"``
    the operator's plain-PyTorch form, its reference
    (:func:`opguide.rms_norm_reference`, say). It pays under ``torch.compile``
    when Inductor's code for it, fused with its neighbours (a residual add, a
    cast, the next pointwise operation), is faster than the kernel plus the
    neighbours' own passes over memory: measure both. ``torch.export``
    traces as ``torch.compile`` does, so an exported program of such a call
    holds the plain-PyTorch form, not the operator.

Eager calls run opguide's kernels whatever ``compiled=`` says.
"""

from __future__ import annotations

import importlib.util

import torch

from .registry import OPERATORS

BACKENDS = ("auto", "cpp", "triton")
COMPILED = ("kernel", "native")
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
# Why the Triton operators could not be defined although triton is installed
# (set by opguide/__init__.py), or None.
TRITON_UNUSABLE: str | None = None


def triton_ready() -> bool:
    """Whether the Triton operators are defined in this process."""
    return TRITON_INSTALLED and TRITON_UNUSABLE is None


def _compiled_device_types(op_name: str) -> frozenset[str]:
    op = getattr(torch.ops.opguide, op_name).default
    return frozenset(
        device
        for device, key in (("cpu", torch.DispatchKey.CPU), ("cuda", torch.DispatchKey.CUDA))
        if op.has_kernel_for_dispatch_key(key)
    )


# Read once, at import, for every compiled operator of the registry: the
# compiled library registers its kernels when it is loaded, and torch.compile
# need not trace the dispatcher query.
_COMPILED = {name: _compiled_device_types(name) for op in OPERATORS for name in op.ops}


def compiled_device_types(op_name: str) -> frozenset[str]:
    """The device types (``"cpu"``, ``"cuda"``) with a compiled kernel for ``op_name``.

    Args:
        op_name: a compiled operator of :data:`opguide.registry.OPERATORS`
            (``"rms_norm"``).
    """
    return _COMPILED[op_name]


def resolve_backend(fn: str, op_name: str, backend: str, x: torch.Tensor) -> str:
    """Returns ``"cpp"`` or ``"triton"`` for a call of ``fn`` on ``x``.

    Args:
        fn: the public function's name, for error messages.
        op_name: the compiled operator (``"rms_norm"``) whose kernels ``"auto"`` looks for.
        backend: ``"auto"``, ``"cpp"`` or ``"triton"``.
        x: the input whose device decides ``"auto"``.

    Raises:
        ValueError: ``backend`` is not one of the three names.
        RuntimeError: ``backend="triton"`` but Triton is not installed, or its
            operators could not be defined in this process.
    """
    if backend not in BACKENDS:
        raise ValueError(f"{fn}: backend must be 'auto', 'cpp' or 'triton', got {backend!r}")
    if backend == "auto":
        if x.device.type in _COMPILED[op_name] or not triton_ready():
            return "cpp"
        return "triton"
    if backend == "triton" and not TRITON_INSTALLED:
        raise RuntimeError(
            f"{fn}: backend='triton' needs the triton package, which is not installed "
            "(pip install triton, or install opguide with the 'test' extra)"
        )
    if backend == "triton" and TRITON_UNUSABLE is not None:
        raise RuntimeError(f"{fn}: backend='triton' is off in this process: {TRITON_UNUSABLE}")
    return backend


def native_under_compile(fn: str, compiled: str) -> bool:
    """Whether a call of ``fn`` gives its plain-PyTorch form to the tracer now.

    True only while ``torch.compile`` or ``torch.export`` traces the call
    (:func:`torch.compiler.is_compiling`) and ``compiled`` is ``"native"``;
    eager calls always run opguide's kernels, and so does every traced call
    with the default ``compiled="kernel"``. Export is not told apart from
    compile: on torch 2.11, ``torch.compiler.is_exporting`` is also true
    inside ``torch.compile``
    (https://github.com/pytorch/pytorch/issues/176347; on torch 2.13 it is
    false there).

    Args:
        fn: the public function's name, for error messages.
        compiled: ``"kernel"`` or ``"native"`` (see the module's docstring).

    Raises:
        ValueError: ``compiled`` is not one of the two names.
    """
    if compiled == "kernel":
        return False
    if compiled != "native":
        raise ValueError(f"{fn}: compiled must be 'kernel' or 'native', got {compiled!r}")
    return torch.compiler.is_compiling()
