"""The implementations the benchmark compares, by pass, and the other libraries.

Each pass has opguide's compiled kernels (``backend="cpp"``), its Triton
kernels where they can be timed, and PyTorch's reference points
(``F.rms_norm``, ``torch.compile`` of the Python reference, the eager
reference); :func:`peer_implementations` adds Liger-Kernel and Quack when
they import, and for the fused pass vLLM as well.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

# Loads the compiled library: the torch.ops.opguide operators timed here.
import opguide

from .passes import EPS, _reason


def _reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _unfused_reference(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # What a model writes without the fused operator: the add, then RMSNorm.
    h = residual + x
    return _reference(h, w, eps), h


def _add_then_norm_in_place(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # The fused operator's contract in plain torch: the sum written into residual.
    residual += x
    return torch.nn.functional.rms_norm(residual, (x.shape[-1],), w, eps), residual


def _triton_available(device: torch.device | None = None) -> str | None:
    """None when opguide's Triton operators can be timed on ``device``, else why not."""
    if device is not None and device.type == "cpu":
        return "on CPU tensors Triton kernels run in Triton's interpreter: not a measurement"
    try:
        # Imported here, not at the top: importing it registers the Triton
        # operators, and a machine without Triton still times the rest.
        import opguide.triton  # noqa: F401
    except ImportError as err:
        return _reason(err)
    return None


def forward_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """The forward implementations to compare, by name."""

    compiled_reference = torch.compile(_reference, dynamic=False)
    impls = {
        "opguide": lambda x, w: opguide.rms_norm(x, w, EPS, backend="cpp"),
        "F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),
        "compile(reference)": lambda x, w: compiled_reference(x, w, EPS),
        "eager reference": lambda x, w: _reference(x, w, EPS),
    }
    if _triton_available(device) is None:
        impls["opguide triton"] = lambda x, w: opguide.rms_norm(x, w, EPS, backend="triton")
    return impls


def _inv_rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The per-row statistic that the forward pass saves for the backward one."""
    try:
        return torch.ops.opguide.rms_norm_forward.default(x, w, EPS)[1]
    except (AttributeError, NotImplementedError, RuntimeError):
        # No rms_norm_forward kernel for this device: the same statistic, by torch.
        return torch.rsqrt(x.float().pow(2).mean(-1) + EPS)


def _autograd_backward(forward: Callable) -> Callable:
    """Prepares a fixed graph ``y = forward(x, w)`` whose backward is then timed."""

    def prepare(x: torch.Tensor, w: torch.Tensor, grad_y: torch.Tensor) -> Callable[[], object]:
        x = x.detach().requires_grad_()
        w = w.detach().requires_grad_()
        y = forward(x, w)
        return lambda: torch.autograd.grad(y, (x, w), grad_y, retain_graph=True)

    return prepare


def backward_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """The backward implementations to compare, by name.

    Each value prepares one call from ``(x, w, grad_y)`` (running the forward
    pass once, untimed) and returns a function without arguments that runs
    only the backward pass: the backward operator itself where opguide has
    one, else ``torch.autograd.grad`` on a graph built once and kept.
    """

    def opguide_op(x, w, grad_y):
        # Missing in a build without the autograd chapter: AttributeError.
        op = torch.ops.opguide.rms_norm_backward.default
        inv_rms = _inv_rms(x, w)
        return lambda: op(grad_y, x, w, inv_rms)

    compiled_reference = torch.compile(_reference, dynamic=False)
    impls = {
        "opguide": opguide_op,
        "opguide autograd": _autograd_backward(lambda x, w: opguide.rms_norm(x, w, EPS)),
        "F.rms_norm": _autograd_backward(
            lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)
        ),
        "compile(reference)": _autograd_backward(lambda x, w: compiled_reference(x, w, EPS)),
        "eager reference": _autograd_backward(lambda x, w: _reference(x, w, EPS)),
    }
    if _triton_available(device) is None:

        def triton_op(x, w, grad_y):
            op = torch.ops.opguide.rms_norm_backward_triton.default
            inv_rms = torch.ops.opguide.rms_norm_forward_triton.default(x, w, EPS)[1]
            return lambda: op(grad_y, x, w, inv_rms)

        impls["opguide triton"] = triton_op
    return impls


def fused_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """The residual-add + RMSNorm implementations to compare, by name."""

    compiled = torch.compile(_unfused_reference, dynamic=False)
    in_place = torch.compile(_add_then_norm_in_place, dynamic=False)
    impls = {
        "opguide": lambda x, r, w: opguide.fused_add_rms_norm_(x, r, w, EPS, backend="cpp"),
        "compile(unfused reference)": lambda x, r, w: compiled(x, r, w, EPS),
        "compile(residual += x; F.rms_norm)": lambda x, r, w: in_place(x, r, w, EPS),
        "eager add + F.rms_norm": lambda x, r, w: torch.nn.functional.rms_norm(
            r + x, (x.shape[-1],), w, EPS
        ),
    }
    if _triton_available(device) is None:
        impls["opguide triton"] = lambda x, r, w: opguide.fused_add_rms_norm_(
            x, r, w, EPS, backend="triton"
        )
    return impls


def _select(impls: dict, only: Sequence[str] | None) -> dict:
    return impls if only is None else {k: v for k, v in impls.items() if k in only}


def _liger_fused() -> Callable:
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    # Returns the norm and the sum, in new tensors; casting mode of LlamaRMSNorm.
    return lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)


def _quack_fused() -> Callable:
    from quack.rmsnorm import rmsnorm_fwd

    # Returns the norm, the sum and no inverse RMS (store_rstd=False), in new tensors.
    return lambda x, r, w: rmsnorm_fwd(x, w, residual=r, eps=EPS)


def _vllm_fused() -> Callable:
    from vllm._custom_ops import fused_add_rms_norm

    # In place: the sum into r, the norm into x (a value change only: the
    # work of the next call, on the same buffers, is the same).
    return lambda x, r, w: fused_add_rms_norm(x, r, w, EPS)


#: The other libraries' residual-add + RMSNorm: a name, then a function that
#: imports the library and returns ``fn(x, residual, w)``.
FUSED_PEERS: dict[str, Callable[[], Callable]] = {
    "liger (fused)": _liger_fused,
    "quack (residual)": _quack_fused,
    "vllm": _vllm_fused,
}


def peer_implementations(pass_name: str) -> tuple[dict[str, Callable], dict[str, str]]:
    """Other libraries' RMSNorm for ``pass_name``, and why each missing one is missing.

    Liger-Kernel (``liger_kernel``, Triton) and Quack (``quack``, CuTe DSL)
    are optional: a library that does not import is left out, with the
    reason. Forward entries take the pass's inputs; backward entries prepare
    a call (see :func:`backward_implementations`); training entries run
    forward and backward (see :func:`training_implementations`). The fused
    pass takes :data:`FUSED_PEERS`: Liger's and Quack's norm with a residual,
    and vLLM's ``fused_add_rms_norm``.
    """
    impls: dict[str, Callable] = {}
    missing: dict[str, str] = {}
    if pass_name == "fused":
        for name, load in FUSED_PEERS.items():
            try:
                impls[name] = load()
            except Exception as err:  # ImportError, or a broken install
                missing[name] = _reason(err)
        return impls, missing
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        def liger(x, w):
            return LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)

    except Exception as err:  # ImportError, or a broken install
        missing["liger"] = _reason(err)
        liger = None
    try:
        from quack.rmsnorm import rmsnorm as quack_rmsnorm

        def quack(x, w):
            return quack_rmsnorm(x, w, eps=EPS)

    except Exception as err:
        missing["quack"] = _reason(err)
        quack = None
    for name, fn in (("liger", liger), ("quack", quack)):
        if fn is None:
            continue
        if pass_name == "forward":
            impls[name] = fn
        elif pass_name == "backward":
            impls[name] = _autograd_backward(fn)
        elif pass_name == "training":
            impls[name] = _training(fn)
    return impls, missing


def _training(forward: Callable) -> Callable:
    """A training step's norm: ``y = forward(x, w)``, then ``grad_x, grad_weight`` by autograd."""

    def step(x: torch.Tensor, w: torch.Tensor, grad_y: torch.Tensor):
        return torch.autograd.grad(forward(x, w), (x, w), grad_y)

    return step


def training_implementations(device: torch.device | None = None) -> dict[str, Callable]:
    """Forward + backward through autograd, as a training step calls the norm."""

    compiled_reference = torch.compile(_reference, dynamic=False)
    impls = {
        "opguide": _training(lambda x, w: opguide.rms_norm(x, w, EPS, backend="cpp")),
        "F.rms_norm": _training(
            lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)
        ),
        "compile(reference)": _training(lambda x, w: compiled_reference(x, w, EPS)),
    }
    if _triton_available(device) is None:
        impls["opguide triton"] = _training(
            lambda x, w: opguide.rms_norm(x, w, EPS, backend="triton")
        )
    return impls
