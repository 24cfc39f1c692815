"""The Triton kernels as operators of the ``opguide`` namespace, and the functions that launch them.

Each operator is defined with :class:`torch.library.Library` ``define`` (its
schema inferred from the Python function by :func:`torch.library.infer_schema`)
and ``impl``: one Python kernel for every device, which launches the Triton
kernels directly. It gets a fake kernel (``register_fake``) and, where it is
differentiable, a backward (``register_autograd``, in ``autograd.py``). The
launch functions (:func:`rms_norm_forward`, :func:`rms_norm_backward`,
:func:`fused_add_rms_norm`) take a ``forced=`` configuration of
:mod:`opguide.triton.launch`; the operators pass none.
"""

from typing import Optional

import torch

from .._checks import _check_fused_add_rms_norm_args, _check_rms_norm_args
from . import launch, plans
from .backward import (
    _grad_weight_columns_kernel,
    _grad_weight_sum_kernel,
    _rms_norm_backward_chunked_kernel,
    _rms_norm_backward_kernel,
)
from .forward import _rms_norm_forward_chunked_kernel, _rms_norm_forward_kernel
from .fused import _fused_add_rms_norm_chunked_kernel, _fused_add_rms_norm_kernel
from .interpreter import HOW_TO_INTERPRET, INTERPRET
from .launch import Registers, Split
from .split import (
    _fused_add_rms_norm_split_kernel,
    _rms_norm_backward_split_kernel,
    _rms_norm_forward_split_kernel,
)

# [register-choice]
# The operators of this module, defined on a fragment of the opguide namespace.
_LIB = torch.library.Library("opguide", "FRAGMENT")


def register_op(name: str, *, mutates_args: tuple[str, ...]):
    """Defines ``opguide::<name>`` from the decorated function; returns its overload.

    ``Library.define`` with the schema :func:`torch.library.infer_schema` reads
    from the annotations, and ``Library.impl`` of the function for every
    device (``CompositeExplicitAutograd``): a call reaches the function through
    the dispatcher alone, without :func:`torch.library.custom_op`'s Python
    layers (step 11.2 measures each). The function launches the Triton
    kernels as a plain Triton launch; under ``torch.compile`` the operator is
    one opaque call, described by its fake kernel.

    Args:
        name: the operator's name in the ``opguide`` namespace.
        mutates_args: the arguments the function writes. It must bump their
            version counters itself (``torch.autograd.graph.increment_version``).

    Returns:
        A decorator that returns ``torch.ops.opguide.<name>.default``.
    """

    def define(fn):
        schema = torch.library.infer_schema(fn, mutates_args=mutates_args)
        _LIB.define(name + schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
        return getattr(torch.ops.opguide, name).default

    return define


def launchable(kernel):
    """The kernel to launch: the kernel itself (``guidekit.triton_targets`` records through it)."""
    return kernel


# [register-choice-end]

#: The dtypes the Triton kernels take.
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_input(op: str, name: str, t: torch.Tensor) -> None:
    if t.device.type == "cpu" and not INTERPRET:
        raise RuntimeError(
            f"{op}: the Triton backend runs CPU tensors only in Triton's interpreter, "
            f"which is off in this process ({name} is on cpu): {HOW_TO_INTERPRET}"
        )
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{op}: the Triton backend supports float32, float16 and bfloat16 {name}, "
            f"got {t.dtype}; use backend='cpp'"
        )


def rms_norm_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    inv_rms: Optional[torch.Tensor] = None,  # noqa: UP045
    *,
    forced: Optional[launch.Config] = None,  # noqa: UP045
) -> torch.Tensor:
    """y for x and weight; also fills ``inv_rms`` (one float32 per row) when given.

    Args:
        x, weight, eps: as for :func:`opguide.rms_norm`.
        inv_rms: a float32 tensor of shape ``x.shape[:-1]`` to fill, or None.
        forced: the configuration to launch with, instead of
            :func:`opguide.triton.launch.forward_config`'s choice.

    Returns:
        y, contiguous, with the shape and dtype of x.

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`opguide.rms_norm` does.
    """
    _check_rms_norm_args(x, weight, eps)
    _check_input("rms_norm", "x", x)
    xc = x.contiguous()
    y = torch.empty_like(xc)
    # Plain ints: under a tracer with dynamic shapes these are SymInts, which
    # Triton's launcher cannot hash.
    n = int(xc.shape[-1])
    m = int(xc.numel()) // n if n > 0 else 0
    if m == 0:
        if inv_rms is not None:
            # Rows of length 0: the mean of no squares is 0/0, as the C++ kernels compute.
            inv_rms.fill_(float("nan"))
        return y
    store_inv = inv_rms is not None
    inv_arg = inv_rms if store_inv else y  # not written when STORE_INV is False
    wc = weight.contiguous()
    p = plans.plan("forward", xc, m, n, forced)
    config = p.config
    with launch.on_device_of(xc):
        if isinstance(config, Registers):
            launchable(_rms_norm_forward_kernel)[p.grid](
                xc, wc, y, inv_arg, m, n, eps, BLOCK_N=config.block_n, ROWS=config.rows,
                STORE_INV=store_inv, ALIGN=p.align, num_warps=config.num_warps,
                **launch.pdl_options(xc),
            )  # fmt: skip
        elif isinstance(config, Split):
            slots = launch.row_slots(xc, m, p.segments)
            launchable(_rms_norm_forward_split_kernel)[p.grid](
                xc, wc, y, inv_arg, slots, n, eps, p.segments, SEG=config.seg, SP=p.sp,
                STORE_INV=store_inv, ALIGN=p.align, num_warps=launch.warps(config),
            )  # fmt: skip
        else:
            launchable(_rms_norm_forward_chunked_kernel)[p.grid](
                xc, wc, y, inv_arg, n, eps, BLOCK_N=config.block_n, STORE_INV=store_inv,
                num_warps=config.num_warps,
            )  # fmt: skip
    return y


def rms_norm_backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    inv_rms: torch.Tensor,
    *,
    forced: Optional[launch.Config] = None,  # noqa: UP045
    grad_weight_sum: launch.GradWeightSum = launch.GRAD_WEIGHT_SUM,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_weight) from the output's gradient and the forward's saved ``inv_rms``.

    Args:
        grad_y: the gradient of y, shaped like x.
        x, weight: the forward's inputs.
        inv_rms: the training forward's per-row inverse RMS (float32).
        forced: the configuration of the grad_x kernel, instead of
            :func:`opguide.triton.launch.backward_config`'s choice.
        grad_weight_sum: the configuration of the kernel that adds grad_weight's partial rows.

    Returns:
        grad_x (contiguous, like x) and grad_weight (like weight).
    """
    _check_input("rms_norm", "x", x)
    if grad_y.shape != x.shape:  # real shapes: the fake kernel serves the tracers
        raise RuntimeError("rms_norm_backward: grad_y must match x")
    xc = x.contiguous()
    grad_yc = grad_y.contiguous()
    rc = inv_rms.contiguous()
    wc = weight.contiguous()
    grad_x = torch.empty_like(xc)
    n = int(xc.shape[-1])  # plain ints, as in rms_norm_forward
    m = int(xc.numel()) // n if n > 0 else 0
    if m == 0:
        return grad_x, torch.zeros_like(weight)
    grad_weight = torch.empty_like(weight, memory_format=torch.contiguous_format)
    pdl = launch.pdl_options(xc)
    p = plans.plan("backward", xc, m, n, forced, grad_weight_sum)
    config = p.config
    # grad_weight is a sum over rows: each program of the first stage writes its
    # own row of float32 partial sums, and _grad_weight_sum_kernel adds them. A plan
    # without a sum grid has one program, which writes grad_weight itself.
    if p.sum_grid:
        grad_weight_partial = torch.empty((p.programs, n), dtype=torch.float32, device=x.device)
    else:
        grad_weight_partial = grad_weight
    with launch.on_device_of(xc):
        if isinstance(config, Registers):
            # The whole row in registers, rows looped over by a grid that fits.
            launchable(_rms_norm_backward_kernel)[p.grid](
                grad_yc, xc, wc, rc, grad_x, grad_weight_partial, m, n, BLOCK_N=config.block_n,
                ROWS=config.rows, STAGES=config.stages, ALIGN=p.align,
                num_warps=config.num_warps, **pdl,
            )  # fmt: skip
        elif isinstance(config, Split):
            # Longer rows: each split over programs that meet through memory.
            slots = launch.row_slots(xc, m, p.segments)
            launchable(_rms_norm_backward_split_kernel)[p.grid](
                grad_yc, xc, wc, rc, grad_x, grad_weight_partial, slots, m, n, p.segments,
                SEG=config.seg, SP=p.sp, ALIGN=p.align, num_warps=launch.warps(config),
            )  # fmt: skip
        else:
            # Rows too long to split: grad_x row by row in chunks, grad_weight over
            # column strips.
            block = config.block_n
            launchable(_rms_norm_backward_chunked_kernel)[p.grid](
                grad_yc, xc, wc, rc, grad_x, n, BLOCK_N=block, num_warps=config.num_warps, **pdl
            )  # fmt: skip
            launchable(_grad_weight_columns_kernel)[p.grad_weight_grid](
                grad_yc, xc, rc, grad_weight_partial, m, n, BLOCK_N=block,
                num_warps=config.num_warps, **pdl,
            )  # fmt: skip
        if p.sum_grid:
            # The second stage of the grad_weight reduction: a sum over `programs` rows.
            launchable(_grad_weight_sum_kernel)[p.sum_grid](
                grad_weight_partial, grad_weight, p.programs, n, BLOCK_P=grad_weight_sum.block_p,
                BLOCK_N=grad_weight_sum.block_n, ALIGN=p.align, num_warps=grad_weight_sum.num_warps,
                **pdl,
            )  # fmt: skip
    return grad_x, grad_weight


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: Optional[torch.Tensor],  # noqa: UP045
    eps: float,
    out_dtype: Optional[torch.dtype] = None,  # noqa: UP045
    *,
    forced: Optional[launch.Config] = None,  # noqa: UP045
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual += x`` in place, then (RMSNorm of residual, inv_rms).

    Args:
        x, residual, weight, eps, out_dtype: as for :func:`opguide.fused_add_rms_norm_`.
        forced: the configuration to launch with, instead of
            :func:`opguide.triton.launch.fused_config`'s choice.

    Returns:
        out (``out_dtype``, default x's) and inv_rms (float32, one per row).
    """
    _check_fused_add_rms_norm_args(x, residual, weight, eps, out_dtype)
    op = "fused_add_rms_norm_"
    _check_input(op, "x", x)
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{op}: the Triton backend supports float32, float16 and bfloat16 out_dtype, "
            f"got {out_dtype}; use backend='cpp'"
        )
    xc = x.contiguous()
    # The kernel updates a dense buffer; a strided residual is written back.
    rc = residual.contiguous()
    out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    inv_rms = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    n = int(x.shape[-1])  # plain ints, as in rms_norm_forward
    m = int(inv_rms.numel())
    if m > 0 and n == 0:
        # Rows of length 0: nothing to add, and the mean of no squares is 0/0,
        # as the C++ kernels compute.
        inv_rms.fill_(float("nan"))
    elif m > 0:
        w_arg = xc if weight is None else weight.contiguous()
        has_weight = weight is not None
        p = plans.plan("fused", xc, m, n, forced)
        config = p.config
        with launch.on_device_of(xc):
            if isinstance(config, Registers):
                launchable(_fused_add_rms_norm_kernel)[p.grid](
                    xc, rc, w_arg, out, inv_rms, m, n, eps, HAS_WEIGHT=has_weight,
                    BLOCK_N=config.block_n, ROWS=config.rows, ALIGN=p.align,
                    num_warps=config.num_warps, **launch.pdl_options(xc),
                )  # fmt: skip
            elif isinstance(config, Split):
                slots = launch.row_slots(xc, m, p.segments)
                launchable(_fused_add_rms_norm_split_kernel)[p.grid](
                    xc, rc, w_arg, out, inv_rms, slots, n, eps, p.segments,
                    HAS_WEIGHT=has_weight, SEG=config.seg, SP=p.sp, ALIGN=p.align,
                    num_warps=launch.warps(config),
                )  # fmt: skip
            else:
                launchable(_fused_add_rms_norm_chunked_kernel)[p.grid](
                    xc, rc, w_arg, out, inv_rms, n, eps, HAS_WEIGHT=has_weight,
                    BLOCK_N=config.block_n, num_warps=config.num_warps,
                    **launch.pdl_options(xc),
                )  # fmt: skip
    if not residual.is_contiguous():
        residual.copy_(rc)
    # The kernel wrote residual's memory behind autograd's back: its version
    # counter grows, so that a tensor saved before the write is refused by
    # backward() (step 10.2).
    torch.autograd.graph.increment_version(residual)
    return out, inv_rms


@register_op("rms_norm_triton", mutates_args=())
def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm_forward(x, weight, eps, None)


@register_op("rms_norm_forward_triton", mutates_args=())
def rms_norm_forward_triton(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # The training forward: y, and inv_rms for rms_norm_backward_triton.
    inv_rms = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    return rms_norm_forward(x, weight, eps, inv_rms), inv_rms


@register_op("rms_norm_backward_triton", mutates_args=())
def rms_norm_backward_triton(
    grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return rms_norm_backward(grad_y, x, weight, inv_rms)


@register_op("fused_add_rms_norm_triton_", mutates_args=("residual",))
def fused_add_rms_norm_triton_(
    x: torch.Tensor,
    residual: torch.Tensor,
    # Optional[...] rather than X | None: the schema is inferred from these
    # annotations, and Optional is understood by every torch this supports.
    weight: Optional[torch.Tensor],  # noqa: UP045
    eps: float,
    out_dtype: Optional[torch.dtype] = None,  # noqa: UP045
) -> tuple[torch.Tensor, torch.Tensor]:
    return fused_add_rms_norm(x, residual, weight, eps, out_dtype)


# Fake kernels: they describe the outputs without running the kernels, for
# torch.compile, export, opcheck and DTensor's shape propagation.


# [fake-kernels]
@torch.library.register_fake("opguide::rms_norm_triton")
def _(x, weight, eps):
    _check_rms_norm_args(x, weight, eps)
    return x.new_empty(x.shape)


@torch.library.register_fake("opguide::rms_norm_forward_triton")
def _(x, weight, eps):
    _check_rms_norm_args(x, weight, eps)
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake("opguide::rms_norm_backward_triton")
def _(grad_y, x, weight, inv_rms):
    return x.new_empty(x.shape), torch.empty_like(weight)


@torch.library.register_fake("opguide::fused_add_rms_norm_triton_")
def _(x, residual, weight, eps, out_dtype=None):
    out = x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype)
    return out, x.new_empty(x.shape[:-1], dtype=torch.float32)


# [fake-kernels-end]
