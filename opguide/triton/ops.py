"""The Triton kernels as operators of the ``opguide`` namespace, and the functions that launch them.

On a machine with a GPU the operators are :func:`torch.library.triton_op`
operators (Inductor sees the kernels); without one, the kernels run in
Triton's interpreter and the operators are :func:`torch.library.custom_op`
operators, with fake kernels. The launch functions (:func:`rms_norm_forward`,
:func:`rms_norm_backward`, :func:`fused_add_rms_norm`) take a ``forced=``
configuration of :mod:`opguide.triton.launch`; the operators pass none.
"""

from typing import Optional

import torch
import triton

from .._checks import _check_fused_add_rms_norm_args, _check_rms_norm_args
from . import launch
from .backward import (
    _dw_columns_kernel,
    _dw_sum_kernel,
    _rms_norm_bwd_kernel,
    _rms_norm_bwd_long_kernel,
)
from .forward import _rms_norm_fwd_kernel, _rms_norm_fwd_long_kernel
from .fused import _fused_add_rms_norm_kernel, _fused_add_rms_norm_long_kernel
from .interpreter import HOW_TO_INTERPRET, INTERPRET
from .launch import Registers, Split
from .split import (
    _fused_add_rms_norm_split_kernel,
    _rms_norm_bwd_split_kernel,
    _rms_norm_fwd_split_kernel,
)

# [register-choice]
if INTERPRET or not torch.cuda.is_available():
    # An opaque operator: torch.compile records one call to it, and Inductor
    # calls this Python function at run time. The interpreter is happy.
    register_op = torch.library.custom_op

    def launchable(kernel):
        return kernel

else:
    # A transparent operator: Inductor traces the body, sees each kernel
    # launch (wrap_triton makes it traceable) and calls the compiled kernels
    # from its own generated code. It needs kernels compiled for a GPU.
    register_op = torch.library.triton_op
    launchable = torch.library.wrap_triton
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
    # Plain ints: while torch.compile traces a triton_op with dynamic shapes
    # these are SymInts, which Triton's launcher and autotuner cannot hash.
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
    config = launch.forward_config(m, n, x.dtype, x.device, forced)
    with launch.on_device_of(xc):
        if isinstance(config, Registers):
            launchable(_rms_norm_fwd_kernel)[(triton.cdiv(m, config.rows),)](
                xc, wc, y, inv_arg, m, n, eps, BLOCK_N=config.block_n, ROWS=config.rows,
                STORE_INV=store_inv, ALIGN=launch.align(n), num_warps=config.num_warps,
                **launch.pdl_options(xc),
            )  # fmt: skip
        elif isinstance(config, Split):
            programs, segments, sp = launch.split_launch(config, m, n, xc.device, groups=False)
            slots = launch.row_slots(xc, m, segments)
            launchable(_rms_norm_fwd_split_kernel)[(programs * segments,)](
                xc, wc, y, inv_arg, slots, n, eps, segments, SEG=config.seg, SP=sp,
                STORE_INV=store_inv, ALIGN=launch.align(n), num_warps=launch.warps(config),
            )  # fmt: skip
        else:
            launchable(_rms_norm_fwd_long_kernel)[(m,)](
                xc, wc, y, inv_arg, n, eps, STORE_INV=store_inv
            )
    return y


def rms_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    inv_rms: torch.Tensor,
    *,
    forced: Optional[launch.Config] = None,  # noqa: UP045
    dw_sum: launch.DwSum = launch.DW_SUM,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) from the output's gradient and the forward's saved ``inv_rms``.

    Args:
        grad: the gradient of y, shaped like x.
        x, weight: the forward's inputs.
        inv_rms: the training forward's per-row inverse RMS (float32).
        forced: the configuration of the dx kernel, instead of
            :func:`opguide.triton.launch.backward_config`'s choice.
        dw_sum: the configuration of the kernel that adds dweight's partial rows.

    Returns:
        dx (contiguous, like x) and dweight (like weight).
    """
    _check_input("rms_norm", "x", x)
    torch._check(grad.shape == x.shape, lambda: "rms_norm_backward: grad_y must match x")
    xc = x.contiguous()
    dy = grad.contiguous()
    rc = inv_rms.contiguous()
    wc = weight.contiguous()
    dx = torch.empty_like(xc)
    n = int(xc.shape[-1])  # plain ints, as in rms_norm_forward
    m = int(xc.numel()) // n if n > 0 else 0
    if m == 0:
        return dx, torch.zeros_like(weight)
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format)
    pdl = launch.pdl_options(xc)
    config = launch.backward_config(m, n, x.dtype, x.device, forced)
    with launch.on_device_of(xc):
        if isinstance(config, Registers):
            # The whole row in registers, rows looped over by a grid that fits.
            programs = config.programs
            dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
            launchable(_rms_norm_bwd_kernel)[(programs,)](
                dy, xc, wc, rc, dx, dw_partial, m, n, BLOCK_N=config.block_n, ROWS=config.rows,
                STAGES=config.stages, ALIGN=launch.align(n), num_warps=config.num_warps, **pdl,
            )  # fmt: skip
        elif isinstance(config, Split):
            # Longer rows: each split over programs that meet through memory.
            programs, segments, sp = launch.split_launch(config, m, n, xc.device, groups=True)
            dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
            slots = launch.row_slots(xc, m, segments)
            launchable(_rms_norm_bwd_split_kernel)[(programs * segments,)](
                dy, xc, wc, rc, dx, dw_partial, slots, m, n, segments,
                SEG=config.seg, SP=sp, ALIGN=launch.align(n), num_warps=launch.warps(config),
            )  # fmt: skip
        else:
            # Rows too long to split: dx row by row in chunks, dweight over
            # column strips.
            block = config.block_n
            launchable(_rms_norm_bwd_long_kernel)[(m,)](
                dy, xc, wc, rc, dx, n, BLOCK_N=block, num_warps=config.num_warps, **pdl
            )  # fmt: skip
            strips = triton.cdiv(n, block)
            programs = max(1, min(m, launch.sm_count(xc.device) * 4 // strips))
            dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
            launchable(_dw_columns_kernel)[(strips, programs)](
                dy, xc, rc, dw_partial, m, n, BLOCK_N=block, num_warps=config.num_warps, **pdl,
            )  # fmt: skip
        # The second stage of the dweight reduction: a sum over `programs` rows.
        launchable(_dw_sum_kernel)[(triton.cdiv(n, dw_sum.block_n),)](
            dw_partial, dweight, programs, n, BLOCK_P=dw_sum.block_p, BLOCK_N=dw_sum.block_n,
            ALIGN=launch.align(n), num_warps=dw_sum.num_warps, **pdl,
        )  # fmt: skip
    return dx, dweight


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
        config = launch.fused_config(m, n, x.dtype, x.device, forced)
        with launch.on_device_of(xc):
            if isinstance(config, Registers):
                launchable(_fused_add_rms_norm_kernel)[(triton.cdiv(m, config.rows),)](
                    xc, rc, w_arg, out, inv_rms, m, n, eps, HAS_WEIGHT=has_weight,
                    BLOCK_N=config.block_n, ROWS=config.rows, ALIGN=launch.align(n),
                    num_warps=config.num_warps, **launch.pdl_options(xc),
                )  # fmt: skip
            elif isinstance(config, Split):
                programs, segments, sp = launch.split_launch(config, m, n, xc.device, False)
                slots = launch.row_slots(xc, m, segments)
                launchable(_fused_add_rms_norm_split_kernel)[(programs * segments,)](
                    xc, rc, w_arg, out, inv_rms, slots, n, eps, segments,
                    HAS_WEIGHT=has_weight, SEG=config.seg, SP=sp, ALIGN=launch.align(n),
                    num_warps=launch.warps(config),
                )  # fmt: skip
            else:
                launchable(_fused_add_rms_norm_long_kernel)[(m,)](
                    xc, rc, w_arg, out, inv_rms, n, eps, HAS_WEIGHT=has_weight,
                    BLOCK_N=config.block_n, num_warps=config.num_warps,
                    **launch.pdl_options(xc),
                )  # fmt: skip
    if not residual.is_contiguous():
        residual.copy_(rc)
    return out, inv_rms


@register_op("opguide::rms_norm_triton", mutates_args=())
def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm_forward(x, weight, eps, None)


@register_op("opguide::rms_norm_fwd_triton", mutates_args=())
def rms_norm_fwd_triton(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # The training forward: y, and inv_rms for rms_norm_backward_triton.
    inv_rms = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    return rms_norm_forward(x, weight, eps, inv_rms), inv_rms


@register_op("opguide::rms_norm_backward_triton", mutates_args=())
def rms_norm_backward_triton(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return rms_norm_backward(grad, x, weight, inv_rms)


@register_op("opguide::fused_add_rms_norm_triton_", mutates_args=("residual",))
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


# Fake kernels for both routes. custom_op needs them; triton_op would run its
# body on fake tensors instead, but DTensor derives output shapes with fake
# CPU tensors, which the body refuses on a GPU machine: a fake kernel never
# runs the body.


# [fake-kernels]
@rms_norm_triton.register_fake
def _(x, weight, eps):
    _check_rms_norm_args(x, weight, eps)
    return x.new_empty(x.shape)


@rms_norm_fwd_triton.register_fake
def _(x, weight, eps):
    _check_rms_norm_args(x, weight, eps)
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32)


@rms_norm_backward_triton.register_fake
def _(grad, x, weight, inv_rms):
    return x.new_empty(x.shape), torch.empty_like(weight)


@fused_add_rms_norm_triton_.register_fake
def _(x, residual, weight, eps, out_dtype=None):
    out = x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype)
    return out, x.new_empty(x.shape[:-1], dtype=torch.float32)


# [fake-kernels-end]
