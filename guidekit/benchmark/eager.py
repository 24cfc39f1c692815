"""The eager mode: wall-clock time per call, as a user's program waits for it.

Calls as a user writes them, made back to back and then synchronised; where
the kernels are short this is the host's cost of a call (Python, dispatch,
autograd, launches). Training calls also have rows that time parts of such a
call: the operators without autograd, a graph node built by
``torch::autograd::Function``, and autograd around a Python Function that
launches nothing.

The Triton backend is timed as a plain call takes it, and, in rows whose
names end in ``experimental eager``, inside the opt-in fast path of
:mod:`opguide.experimental.triton_eager`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch

# Loads the compiled library: the torch.ops.opguide operators timed here.
import opguide

from .implementations import _triton_available, peer_implementations
from .passes import DTYPES, EPS, Skip, _reason
from .timing import _sync, time_interleaved

# The shapes of the eager mode: decode (one row) to small batches.
EAGER_MS = (1, 16, 128, 1024)
EAGER_NS = (4096, 8192)


def eager_implementations(mode: str, device: torch.device | None = None) -> dict[str, Callable]:
    """Calls as a user writes them, by name; ``mode`` is ``forward`` or ``training``.

    Each value takes ``(x, w, grad_y)``. The row :data:`TRITON_EXPERIMENTAL` is
    the plain Triton call, which :func:`run_eager` makes inside
    ``opguide.experimental.triton_eager.enabled()`` (:func:`_call_context`).
    ``training`` calls ``y = f(x, w)`` and then
    ``y.backward(grad_y)`` on leaves that require grad (their ``.grad`` reset to
    None first, as an optimiser's ``zero_grad`` does). Training also has the
    rows of :data:`EAGER_KERNELS` (the operators without autograd),
    :data:`FUNCTION_NODE` (the C++ operators under ``torch::autograd::Function``)
    and :data:`EMPTY_FUNCTION` (autograd around a Python Function that does nothing).
    """

    norms: dict[str, Callable] = {
        "opguide": lambda x, w: opguide.rms_norm(x, w, EPS, backend="cpp"),
        "F.rms_norm": lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),
    }
    if mode == "forward":
        norms["torch.ops.opguide.rms_norm"] = lambda x, w: torch.ops.opguide.rms_norm.default(
            x, w, EPS
        )
    if _triton_available(device) is None:
        norms["opguide triton"] = lambda x, w: opguide.rms_norm(x, w, EPS, backend="triton")
        # The same call; run_eager makes it inside triton_eager.enabled().
        norms[TRITON_EXPERIMENTAL] = norms["opguide triton"]
    if device is None or device.type != "cpu":  # the peers are GPU libraries
        norms.update(peer_implementations("forward")[0])
    if mode == "forward":

        def forward(f: Callable) -> Callable:
            return lambda x, w, grad_y: f(x, w)

        return {name: forward(f) for name, f in norms.items()}

    def step(f: Callable) -> Callable:
        def run(x, w, grad_y):
            x.grad = w.grad = None
            f(x, w).backward(grad_y)

        return run

    if hasattr(torch.ops.opguide, "rms_norm_forward"):
        forward = torch.ops.opguide.rms_norm_forward.default
        norms[FUNCTION_NODE] = lambda x, w: forward(x, w, EPS)[0]
    impls = {name: step(f) for name, f in norms.items()}
    impls.update(_kernels_without_autograd(device))
    impls[EMPTY_FUNCTION] = step(_EmptyFunction.apply)
    return impls


#: The row of the Triton backend's opt-in eager path
#: (``opguide.experimental.triton_eager``), next to ``opguide triton``, the
#: path a plain call takes.
TRITON_EXPERIMENTAL = "opguide triton, experimental eager"

#: The training mode's row of ``opguide::rms_norm_forward`` under autograd: the
#: same kernels as ``opguide``, under a ``torch::autograd::Function`` that
#: returns two outputs (y and inv_rms) where ``opguide::rms_norm``'s returns y
#: alone and keeps inv_rms as a saved tensor.
FUNCTION_NODE = "opguide, autograd::Function"

#: The training mode's row of a Python ``autograd.Function`` that launches no
#: kernel: what autograd costs around any operator written that way.
EMPTY_FUNCTION = "empty Python Function"


class _EmptyFunction(torch.autograd.Function):
    """Returns an uninitialised tensor like x; its backward passes grad_y through."""

    @staticmethod
    def forward(ctx, x, w):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


#: The training mode's rows that call the forward and backward operators
#: themselves, with no autograd graph, on tensors that do not require grad:
#: what a training call costs without autograd's part.
EAGER_KERNELS = {
    "opguide": "opguide ops",
    "opguide triton": "opguide triton launches",
    "F.rms_norm": "F.rms_norm ops",
    TRITON_EXPERIMENTAL: "opguide triton launches, experimental eager",
}


def _kernels_without_autograd(device: torch.device | None) -> dict[str, Callable]:
    """The rows of :data:`EAGER_KERNELS` that this torch, build and device can run."""
    impls: dict[str, Callable] = {}
    ops = torch.ops.opguide
    if hasattr(ops, "rms_norm_forward") and hasattr(ops, "rms_norm_backward"):
        forward, backward = ops.rms_norm_forward.default, ops.rms_norm_backward.default

        def opguide_ops(x, w, grad_y):
            backward(grad_y, x, w, forward(x, w, EPS)[1])

        impls[EAGER_KERNELS["opguide"]] = opguide_ops
    if device is not None and _triton_available(device) is None:

        def triton_launches(x, w, grad_y):
            # The Triton forward and backward operators, as the default path's
            # autograd formula calls them, without autograd.
            inv_rms = ops.rms_norm_forward_triton.default(x, w, EPS)[1]
            ops.rms_norm_backward_triton.default(grad_y, x, w, inv_rms)

        try:  # optional: a failed import skips this row only, with the reason
            from opguide.experimental import triton_eager
        except ImportError as err:
            missing = err

            def experimental_launches(x, w, grad_y):
                raise missing

        else:

            def experimental_launches(x, w, grad_y):
                # The kernels of the opt-in eager path, launched as its
                # autograd Function launches them, without the Function.
                inv_rms = triton_eager.direct_forward(x, w, EPS, training=True)[1]
                triton_eager.direct_backward(grad_y, x, w, inv_rms)

        impls[EAGER_KERNELS["opguide triton"]] = triton_launches
        impls[EAGER_KERNELS[TRITON_EXPERIMENTAL]] = experimental_launches
    aten = torch.ops.aten
    on_gpu = device is not None and device.type == "cuda"
    if on_gpu and hasattr(aten, "_fused_rms_norm_backward"):
        # What F.rms_norm's autograd node calls on a GPU (on a CPU it is composite).
        def fused(x, w, grad_y):
            shape = [x.shape[-1]]
            rstd = aten._fused_rms_norm.default(x, shape, w, EPS)[1]
            aten._fused_rms_norm_backward.default(grad_y, x, shape, rstd, w, [True, True])

        impls[EAGER_KERNELS["F.rms_norm"]] = fused
    return impls


def _call_context(name: str) -> Callable[[], contextlib.AbstractContextManager]:
    """What a row's calls run inside: ``triton_eager.enabled`` for
    :data:`TRITON_EXPERIMENTAL`, else nothing.

    Raises:
        ImportError: the row is :data:`TRITON_EXPERIMENTAL` and
            ``opguide.experimental.triton_eager`` does not import (the row is
            then recorded as skipped).
    """
    if name != TRITON_EXPERIMENTAL:
        return contextlib.nullcontext
    from opguide.experimental import triton_eager

    return triton_eager.enabled


def run_eager(
    device: torch.device,
    *,
    dtype: str = "bf16",
    ms: Sequence[int] = EAGER_MS,
    ns: Sequence[int] = EAGER_NS,
    calls: int = 50,
    rounds: int = 31,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Wall-clock time per call, as a user's program waits for it.

    No spin and no CUDA graph: ``calls`` calls are made back to back, then the
    device is synchronised, and the elapsed time is divided by ``calls``.
    Where the kernels are short this is the host's cost of a call (Python,
    dispatch, autograd, launches); where they are long, the GPU's. The
    implementations take turns (:func:`time_interleaved`); the batches of
    :data:`TRITON_EXPERIMENTAL` run inside ``triton_eager.enabled()``, entered
    once per batch. A training call's
    host time varies by several percent from round to round, so the median
    takes many rounds.

    Returns:
        ``{"dtype", "calls", "rounds", "rows", "skipped"}``; each row has
        ``mode`` (``forward`` or ``training``), ``impl``, ``m``, ``n``,
        ``seconds`` and ``vs_F.rms_norm`` (the ratio of times).
    """
    say = progress or (lambda line: None)
    dt = DTYPES[dtype]
    rows: list[dict] = []
    skips: list[Skip] = []
    for mode in ("forward", "training"):
        impls = eager_implementations(mode, device)
        for n in ns:
            for m in ms:
                say(f"eager: {mode} {dtype} {m}x{n}")
                grad = mode == "training"
                x = torch.randn(m, n, device=device, dtype=dt, requires_grad=grad)
                w = torch.randn(n, device=device, dtype=dt, requires_grad=grad)
                grad_y = torch.randn(m, n, device=device, dtype=dt)
                fns = {}
                plain = (x.detach(), w.detach(), grad_y)  # for the rows without autograd
                for name, fn in impls.items():
                    args = plain if name in EAGER_KERNELS.values() else (x, w, grad_y)
                    try:
                        context = _call_context(name)
                        with context():
                            fn(*args)
                            _sync(device)
                    except Exception as err:
                        skips.append(Skip(mode, name, m, n, dtype, _reason(err)))
                        continue

                    def batch(fn=fn, args=args, context=context) -> None:
                        with context():  # entered once per batch, not per call
                            for _ in range(calls):
                                fn(*args)
                            _sync(device)

                    fns[name] = batch
                seconds = time_interleaved(fns, rounds=rounds, warmup=2)
                base = seconds.get("F.rms_norm")
                for name, t in seconds.items():
                    per_call = t / calls
                    ratio = per_call / (base / calls) if base else None
                    rows.append({"mode": mode, "impl": name, "m": m, "n": n,
                                 "seconds": per_call, "vs_F.rms_norm": ratio})  # fmt: skip
    return {"dtype": dtype, "calls": calls, "rounds": rounds, "rows": rows,
            "skipped": [s.asdict() for s in skips]}  # fmt: skip
