"""EXPERIMENTAL, off by default: Triton RMSNorm launched directly, through private APIs.

``opguide.rms_norm(x, w, backend="triton")`` goes through the operators of
:mod:`opguide.triton.ops`: the custom op's autograd kernel, its device
kernel, ``wrap_triton``'s wrappers and Triton's binding of the arguments,
Python that runs on every call. A call made as a user makes it (plain
tensors on a GPU, nothing tracing or transforming) needs none of them, and
this module skips them all, for rows the kernels hold in registers; every
other call (torch.compile, export, vmap, a dispatch mode, DTensor, long rows)
still goes through the operators. ``guidekit.benchmark --eager`` measures
both (docs/recorded/eager_bf16_h200.json).

It is not in the library's default path because it depends on internals
that any torch or Triton release may change, each to save microseconds:

* ``torch._C._functorch.peek_interpreter_stack``,
  ``torch._C._functorch.is_functorch_wrapped_tensor`` and
  ``torch._C._len_torch_dispatch_stack``: whether anything transforms or
  watches the call (the guard of :func:`direct_call`);
* ``torch._C._FunctionBase.apply``: autograd.Function's C++ apply, called
  without the Python ``Function.apply`` that binds and unwraps arguments;
* ``torch._C._cuda_getCurrentRawStream`` and ``torch._C._cuda_getDevice``:
  the current stream and GPU without ``torch.cuda``'s Python layers;
* Triton's ``CompiledKernel.run``, ``.function``, ``.packed_metadata`` and
  ``.launch_metadata``, ``JITFunction.params`` and
  ``triton.knobs.runtime.launch_enter_hook`` / ``launch_exit_hook``: a
  compiled kernel relaunched with its launcher's own arguments.

``tests/test_experimental_triton_eager.py`` fails, naming the attribute,
when one of them is missing (:func:`missing_private_apis`).

Use::

    from opguide.experimental import triton_eager

    with triton_eager.enabled():
        y = opguide.rms_norm(x, w, backend="triton")

:func:`enable` rebinds ``opguide.rms_norm`` (and ``opguide.ops.rms_norm``)
to a function that tries the direct launch first; :func:`disable` restores
them. :func:`direct_forward` and :func:`direct_backward` are the two
launches on their own.
"""

import contextlib
import functools
import operator
from typing import Optional

import torch
import triton

import opguide
from opguide import ops as _public_ops
from opguide.triton import launch
from opguide.triton.backward import _grad_weight_sum_kernel, _rms_norm_backward_kernel
from opguide.triton.forward import _rms_norm_forward_kernel
from opguide.triton.interpreter import INTERPRET
from opguide.triton.ops import SUPPORTED_DTYPES, rms_norm_backward_triton

_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _Kept:
    """A kernel as Triton compiled it for one kind of call, relaunched directly.

    ``kernel[grid](*args, **kw)`` binds its arguments, works out what the
    compiled kernel is specialised on (the dtype and 16-byte alignment of each
    pointer, and N) and looks the kernel up, on every call. Calls on one GPU,
    dtype and N, with aligned pointers, share all of that, so the first goes
    through Triton and the kernel it returns is kept; later calls hand its
    launcher the changing arguments only, pointers as ints (the launcher
    checks a tensor's pointer with a driver call, an int's not at all).
    """

    # False for the whole process once a launcher refuses these arguments (a
    # Triton whose launcher takes others), or when this Triton keeps its launch
    # hooks elsewhere (before triton.knobs): every call then goes through Triton.
    works = hasattr(triton, "knobs")

    def __init__(self, kernel, grid: int, args: tuple, kw: dict):
        self.compiled = kernel[(grid,)](*args, **kw)
        # The launcher takes every parameter, constexprs included, in order.
        self.constants = tuple(kw.get(p.name, p.default) for p in kernel.params[len(args) :])
        self.run = self.compiled.run
        self.handles = self.compiled.function, self.compiled.packed_metadata

    def __call__(self, grid: int, stream: int, *args) -> bool:
        """Launches on ``stream``; False where launchers refuse direct launches (then always)."""
        values = args + self.constants
        hooks = triton.knobs.runtime  # as JITFunction.run passes them
        enter, leave, meta = hooks.launch_enter_hook, hooks.launch_exit_hook, None
        try:
            if _no_hook(enter) and _no_hook(leave):
                # With no hook to call, the launch metadata (built for the hooks
                # only) is not built, and the launcher calls nothing back.
                enter = leave = None
            elif enter is not None:
                meta = self.compiled.launch_metadata((grid, 1, 1), stream, *values)
            self.run(grid, 1, 1, stream, *self.handles, meta, enter, leave, *values)
        except TypeError:
            _Kept.works = False
        return _Kept.works


def _no_hook(hook) -> bool:
    """Whether a launch hook of triton.knobs calls nothing: None, or an empty chain.

    Recent Triton keeps each hook as a chain that is never None, and whose
    ``calls`` list is empty until a profiler adds to it.
    """
    return hook is None or getattr(hook, "calls", None) == []


# Per GPU, dtype and N: the planners' answers as each kernel's launch options
# (the planners read the GPU's properties, which costs more than a launch),
# and the kept kernels, filled in by the first aligned call of each.
_PLANS: dict = {}


class _Plan:
    def __init__(self, x: torch.Tensor, n: int):
        forward = launch.forward_config(2**31, n, x.dtype, x.device)
        # Only rows of up to MAX_REGISTER_ROW_BACKWARD are launched directly.
        backward = launch.backward_config(2**31, n, x.dtype, x.device)
        weight_sum = launch.GRAD_WEIGHT_SUM
        align, pdl = launch.align(n), launch.pdl_options(x)
        self.rows, self.programs = forward.rows, backward.programs
        self.grad_weight_grid = triton.cdiv(n, weight_sum.block_n)
        # Each kernel's launch options but STORE_INV, which each forward call sets.
        self.forward_kw = dict(
            BLOCK_N=forward.block_n,
            ROWS=forward.rows,
            ALIGN=align,
            num_warps=forward.num_warps,
            **pdl,
        )
        self.backward_kw = dict(
            BLOCK_N=backward.block_n,
            ROWS=backward.rows,
            STAGES=backward.stages,
            ALIGN=align,
            num_warps=backward.num_warps,
            **pdl,
        )
        self.grad_weight_sum_kw = dict(
            BLOCK_P=weight_sum.block_p,
            BLOCK_N=weight_sum.block_n,
            ALIGN=align,
            num_warps=weight_sum.num_warps,
            **pdl,
        )
        self.forward = {}  # training (STORE_INV) -> _Kept
        self.backward = self.grad_weight_sum = None


def _plan(x: torch.Tensor, n: int) -> _Plan:
    key = (x.get_device(), x.dtype, n)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(x, n)
    return plan


def direct_forward(x: torch.Tensor, weight: torch.Tensor, eps: float, training: bool):
    """The forward kernel launched directly: (y, inv_rms), inv_rms only when ``training``.

    Args:
        x: a contiguous CUDA tensor of rows of at most ``MAX_REGISTER_ROW``
            elements, float32, float16 or bfloat16, on the current GPU.
        weight: contiguous, shape ``(N,)``, the dtype of x.
        eps: a non-negative float.
        training: whether to compute and return inv_rms (float32, one per row).

    Returns:
        (y, inv_rms); without ``training`` the second element is y itself.

    Nothing is checked: :func:`direct_call` says which arguments it takes.
    """
    n = x.shape[-1]
    m = x.numel() // n
    plan = _plan(x, n)
    y = torch.empty_like(x)
    inv_rms = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) if training else y
    pointers = x.data_ptr(), weight.data_ptr(), y.data_ptr(), inv_rms.data_ptr()
    aligned = not functools.reduce(operator.or_, pointers) % 16
    grid = triton.cdiv(m, plan.rows)
    kept = plan.forward.get(training)
    if kept is not None and aligned and _Kept.works:
        stream = torch._C._cuda_getCurrentRawStream(x.get_device())
        if kept(grid, stream, *pointers, m, n, eps):
            return y, inv_rms
    args = (x, weight, y, inv_rms, m, n, eps)
    kw = dict(plan.forward_kw, STORE_INV=training)
    if aligned:
        plan.forward[training] = _Kept(_rms_norm_forward_kernel, grid, args, kw)
    else:  # compiled for these pointers: launched, not kept
        _rms_norm_forward_kernel[(grid,)](*args, **kw)
    return y, inv_rms


def direct_backward(grad, x, weight, inv_rms):
    """The backward kernels launched directly: (grad_x, grad_weight).

    Args:
        grad: the gradient of y, shaped like x (made contiguous here).
        x, weight: as for :func:`direct_forward`.
        inv_rms: the float32 inv_rms of ``direct_forward(..., training=True)``.

    Returns:
        (grad_x, grad_weight). Rows longer than ``MAX_REGISTER_ROW_BACKWARD``, x on
        another GPU than the current one, and pointers off 16-byte alignment
        go through ``opguide::rms_norm_backward_triton`` instead.
    """
    n = x.shape[-1]
    m = x.numel() // n
    grad_y = grad.contiguous()
    if n > launch.MAX_REGISTER_ROW_BACKWARD or x.get_device() != torch._C._cuda_getDevice():
        return rms_norm_backward_triton(grad_y, x, weight, inv_rms)  # through the operator
    plan = _plan(x, n)
    programs = min(plan.programs, m)
    grad_x = torch.empty_like(x)
    grad_weight = torch.empty_like(weight)
    grad_weight_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
    pointers = (
        grad_y.data_ptr(), x.data_ptr(), weight.data_ptr(), inv_rms.data_ptr(), grad_x.data_ptr(),
        grad_weight_partial.data_ptr(), grad_weight.data_ptr(),
    )  # fmt: skip
    if functools.reduce(operator.or_, pointers) % 16:  # not a call kernels are kept for
        return rms_norm_backward_triton(grad_y, x, weight, inv_rms)
    if plan.backward is not None and _Kept.works:
        stream = torch._C._cuda_getCurrentRawStream(x.get_device())
        summed = plan.grad_weight_grid, stream, pointers[5], pointers[6], programs, n
        if plan.backward(programs, stream, *pointers[:6], m, n) and plan.grad_weight_sum(*summed):
            return grad_x, grad_weight
    main = (grad_y, x, weight, inv_rms, grad_x, grad_weight_partial, m, n)
    plan.backward = _Kept(_rms_norm_backward_kernel, programs, main, plan.backward_kw)
    total = (grad_weight_partial, grad_weight, programs, n)
    plan.grad_weight_sum = _Kept(
        _grad_weight_sum_kernel, plan.grad_weight_grid, total, plan.grad_weight_sum_kw
    )
    return grad_x, grad_weight


def direct_call(x, weight, eps) -> bool:
    """Whether a call may launch the kernels directly: plain, valid arguments.

    Any other call, including one with invalid arguments, takes the checked
    path, which raises the errors ``opguide._checks._check_rms_norm_args`` words.
    """
    if type(x) not in _PLAIN or type(weight) not in _PLAIN or type(eps) is not float:
        return False
    n = x.shape[-1] if x.dim() else 0
    return (
        not INTERPRET
        and x.is_cuda
        and 0 < n <= launch.MAX_REGISTER_ROW
        and 0 < x.numel() // n < 2**31
        and eps >= 0
        and x.dtype in SUPPORTED_DTYPES
        and weight.dtype == x.dtype  # autocast lets them differ
        and weight.dim() == 1
        and weight.shape[0] == n
        and x.is_contiguous()
        and weight.is_contiguous()
        and x.get_device() == weight.get_device() == torch.cuda.current_device()
        and not torch.compiler.is_compiling()
        and torch._C._len_torch_dispatch_stack() == 0
        and torch._C._functorch.peek_interpreter_stack() is None
        # a tensor left over from a finished torch.func transform, still wrapped
        and not torch._C._functorch.is_functorch_wrapped_tensor(x)
        and not torch._C._functorch.is_functorch_wrapped_tensor(weight)
    )


class _DirectTraining(torch.autograd.Function):
    """The training pair of the direct launches."""

    # forward takes ctx (no separate setup_context): Function.apply then does
    # not bind the arguments to forward's signature on every call. inv_rms is
    # saved, not returned: with one output, autograd always hands backward a
    # grad_y, and allocates no zeros for an output the loss did not use.
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, inv_rms = direct_forward(x, weight, eps, training=True)
        ctx.save_for_backward(x, weight, inv_rms)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, inv_rms = ctx.saved_tensors
        grad_x, grad_weight = direct_backward(grad, x, weight, inv_rms)
        needs = ctx.needs_input_grad
        return grad_x if needs[0] else None, grad_weight if needs[1] else None, None


# Function.apply is Python that binds default arguments (forward has none)
# and unwraps functorch's wrappers (direct_call has ruled out both a
# transform and a wrapper) before it calls the C++ apply it ends in. A
# direct call calls that C++ apply itself.
_C_APPLY = getattr(getattr(torch._C, "_FunctionBase", None), "__dict__", {}).get("apply")
_apply_training = (
    _C_APPLY.__get__(None, _DirectTraining) if _C_APPLY is not None else _DirectTraining.apply
)


def direct_rms_norm(x, weight, eps) -> Optional[torch.Tensor]:  # noqa: UP045
    """``opguide.rms_norm(x, weight, eps, backend="triton")`` launched directly.

    Returns None for a call that needs the operators (see :func:`direct_call`).
    """
    if not direct_call(x, weight, eps):
        return None
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _apply_training(x, weight, eps)
    return direct_forward(x, weight, eps, training=False)[0]


_CHECKED = _public_ops.rms_norm  # the public function this module stands in front of


def _rms_norm(x, weight, eps=1e-6, *, backend="auto"):
    if backend == "triton":
        y = direct_rms_norm(x, weight, eps)
        if y is not None:
            return y
    return _CHECKED(x, weight, eps, backend=backend)


_rms_norm.__doc__ = _CHECKED.__doc__


def is_enabled() -> bool:
    """Whether ``opguide.rms_norm`` tries the direct launch first."""
    return opguide.rms_norm is _rms_norm


def enable() -> None:
    """Makes ``opguide.rms_norm(..., backend="triton")`` launch directly where it can."""
    opguide.rms_norm = _public_ops.rms_norm = _rms_norm


def disable() -> None:
    """Restores ``opguide.rms_norm``: every call through the operators."""
    opguide.rms_norm = _public_ops.rms_norm = _CHECKED


@contextlib.contextmanager
def enabled():
    """:func:`enable` for the ``with`` block, then the state from before it."""
    was = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was:
            disable()


def missing_private_apis() -> list[str]:
    """The private torch and Triton attributes this module uses that this process lacks.

    Those of CUDA and of a compiled kernel (``run``, ``function``,
    ``packed_metadata``) exist only on a GPU: they are checked there, the
    kernel's once a kernel has been kept.
    """
    missing = []
    for owner, name, label in (
        (torch._C, "_len_torch_dispatch_stack", "torch._C._len_torch_dispatch_stack"),
        (getattr(torch._C, "_functorch", None), "peek_interpreter_stack",
         "torch._C._functorch.peek_interpreter_stack"),
        (getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor",
         "torch._C._functorch.is_functorch_wrapped_tensor"),
        (triton, "knobs", "triton.knobs"),
        (getattr(getattr(triton, "knobs", None), "runtime", None), "launch_enter_hook",
         "triton.knobs.runtime.launch_enter_hook"),
        (getattr(getattr(triton, "knobs", None), "runtime", None), "launch_exit_hook",
         "triton.knobs.runtime.launch_exit_hook"),
        (triton.compiler.CompiledKernel, "launch_metadata",
         "triton CompiledKernel.launch_metadata"),
    ):  # fmt: skip
        if owner is None or not hasattr(owner, name):
            missing.append(label)
    if torch.cuda.is_available():  # a CPU build of torch has no CUDA bindings
        for name in ("_cuda_getCurrentRawStream", "_cuda_getDevice"):
            if not hasattr(torch._C, name):
                missing.append(f"torch._C.{name}")
    if not INTERPRET and not hasattr(_rms_norm_forward_kernel, "params"):
        missing.append("triton JITFunction.params")
    if _C_APPLY is None:
        missing.append("torch._C._FunctionBase.apply")
    for plan in _PLANS.values():
        for kept in (*plan.forward.values(), plan.backward, plan.grad_weight_sum):
            for name in ("run", "function", "packed_metadata"):
                if kept is not None and not hasattr(kept.compiled, name):
                    missing.append(f"triton CompiledKernel.{name}")
    return sorted(set(missing))
