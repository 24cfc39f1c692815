"""EXPERIMENTAL, off by default: torch.compile calls the fused residual-add + RMSNorm.

A transformer block ends ``h = x + residual`` and the next block starts with
an RMSNorm of ``h``. :func:`opguide.fused_add_rms_norm_` does both in one pass
over memory, but a model written with a plain ``+`` and its own norm module
never calls it. This module teaches Inductor to call it, without editing the
model: a pattern pass finds the sum followed by an RMSNorm of the sum in the
graph Inductor compiles and puts the fused operator in their place.

It finds the norm in the forms it takes once traced:

* the Hugging Face ``LlamaRMSNorm`` (float32 upcast, ``pow``, ``mean``,
  ``rsqrt``, a cast back, then the weight), in float32, bfloat16 and float16;
* ``torch.nn.functional.rms_norm`` over the last dimension, for inputs of two
  and three dimensions, in the same dtypes;
* ``opguide.rms_norm``.

Training works: the pass runs on the forward graph after AOTAutograd has
split off the backward, which stays Inductor's own and reads the sum and the
per-row inverse RMS the fused operator returns (it needs no backward). It
rounds once where the Hugging Face norm rounds twice (before and after the
weight): in bfloat16 and float16 outputs may differ by one rounding.

The operator writes its sum into ``residual``; the pass hands it the operand
of the ``+`` that nothing else reads (a fresh matmul output, typically), so
Inductor writes there in place. Where both operands are read again (a graph
input, or in training a tensor saved for the backward), writing would need a
copy first, which moves more bytes than Inductor's own kernel for the sum and
the norm: the pass leaves those places alone.

It depends on private torch APIs, any of which a torch release may change:

* ``torch._inductor.config.post_grad_custom_pre_pass``: the hook the pass
  runs from, and ``torch._inductor.custom_graph_pass.CustomGraphPass``, the
  class it must be (its ``uuid`` keys Inductor's cache);
* ``torch._inductor.pattern_matcher``: ``PatternMatcherPass``,
  ``register_replacement`` and ``fwd_only``, which trace the patterns below;
* ``torch._higher_order_ops.auto_functionalize.auto_functionalized``: the
  functional form of a mutating operator that Inductor's graphs hold.

``tests/test_inductor_fusion.py`` fails, naming the attribute, when one of
them is missing (:func:`missing_private_apis`).

Use ``torch.compile(model, options=inductor_fusion.compile_options())``, or
``with inductor_fusion.enabled():`` around a compiled model's first call
(where it compiles).

:func:`replacements` says how many sums and norms the pass has replaced.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator

import torch

# Each entry: a module, then the attribute the pass uses from it.
_PRIVATE_APIS = (
    ("torch._inductor.config", "post_grad_custom_pre_pass"),
    ("torch._inductor.custom_graph_pass", "CustomGraphPass"),
    ("torch._inductor.custom_graph_pass", "get_hash_for_files"),
    ("torch._inductor.pattern_matcher", "PatternMatcherPass"),
    ("torch._inductor.pattern_matcher", "register_replacement"),
    ("torch._inductor.pattern_matcher", "fwd_only"),
    ("torch._higher_order_ops.auto_functionalize", "auto_functionalized"),
)

_BACKENDS = ("cpp", "triton")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The value eps takes while the patterns are traced: any value no pattern
# contains otherwise, so the tracer can tell eps from the other constants.
_EPS_PLACEHOLDER = 0.1234567


def missing_private_apis() -> list[str]:
    """Names the private torch attributes this module needs and cannot find.

    Returns:
        ``"module.attribute"`` for each one missing; empty when all are there.
    """
    missing = []
    for module_name, attribute in _PRIVATE_APIS:
        try:
            found = hasattr(importlib.import_module(module_name), attribute)
        except ImportError:
            found = False
        if not found:
            missing.append(f"{module_name}.{attribute}")
    return missing


def _fused_op(backend: str) -> torch._ops.OpOverload:
    if backend == "triton":
        from opguide import triton  # noqa: F401  (registers the Triton operators)

        return torch.ops.opguide.fused_add_rms_norm_triton_.default
    return torch.ops.opguide.fused_add_rms_norm_.default


# --- what the pass looks for -------------------------------------------------
# Each search function is traced into a pattern; it returns every value of the
# sum and the norm that the rest of a graph may read: the norm's output, the
# sum (the next residual) and the inverse RMS (saved for the backward).


# [search-llama]
def _llama_rms_norm(h, weight, eps, dtype):
    # transformers' LlamaRMSNorm.forward, with the inverse RMS kept.
    h32 = h.to(torch.float32)
    inv_rms = torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (h32 * inv_rms).to(dtype), inv_rms


def _search_llama(dtype):
    def search(x, residual, weight, eps):
        h = x + residual
        out, inv_rms = _llama_rms_norm(h, weight, eps, dtype)
        return out, h, inv_rms

    return search


# [search-llama-end]


def _search_functional(x, residual, weight, eps):
    # F.rms_norm over the last dimension, as torch's decomposition of
    # aten._fused_rms_norm writes it: the dimension counted from the front,
    # the Scalar overload of add, the weight applied before the cast back.
    h = x + residual
    h32 = h.to(torch.float32)
    variance = torch.pow(h32, 2).mean(dim=[h.dim() - 1], keepdim=True)
    inv_rms = torch.rsqrt(torch.ops.aten.add.Scalar(variance, eps))
    return h32.mul(inv_rms).mul(weight).type_as(h), h, inv_rms


def _search_opguide_training(x, residual, weight, eps):
    h = x + residual
    out, inv_rms = torch.ops.opguide.rms_norm_forward(h, weight, eps)
    return out, h, inv_rms


def _search_opguide_inference(x, residual, weight, eps):
    h = x + residual
    return torch.ops.opguide.rms_norm(h, weight, eps), h


# --- what it puts instead ----------------------------------------------------


# [replace]
def _replace(backend: str, inv_rms_shape: str):
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    op = _fused_op(backend)

    def replace(x, residual, weight, eps):
        out, inv_rms, h = auto_functionalized(
            op, x=x, residual=residual, weight=weight, eps=eps, out_dtype=None
        )
        if inv_rms_shape == "none":
            return out, h
        if inv_rms_shape == "keepdim":
            inv_rms = inv_rms.unsqueeze(-1)
        return out, h, inv_rms

    return replace


# [replace-end]


# Ops that make a view of their first argument, as Inductor's graphs hold them.
_VIEWS = (
    torch.ops.aten.reshape.default,
    torch.ops.aten.view.default,
    torch.ops.aten._unsafe_view.default,
)


def _writable(node, readers) -> bool:
    """Whether only ``readers`` read ``node``, or the tensor it is a view of.

    A graph input, or a tensor that something else reads (in training: a
    tensor saved for the backward), would have to be copied before the fused
    operator writes into it. This decides only whether replacing pays; what
    is safe to write is decided by Inductor's reinplacing, which copies
    wherever writing in place would change a value something else reads.
    """
    while isinstance(node, torch.fx.Node):
        if node.op != "call_function" or not set(node.users) <= readers:
            return False
        if node.target not in _VIEWS:
            return True
        readers, node = {node}, node.args[0]
    return False


def _fits_fused_op(match) -> bool:
    """Whether the fused operator accepts the matched tensors and can write in place."""
    x_node, residual_node = match.kwargs["x"], match.kwargs["residual"]
    vals = {
        name: node.meta.get("val") if isinstance(node, torch.fx.Node) else node
        for name, node in match.kwargs.items()
    }
    x, residual, weight, eps = (vals.get(k) for k in ("x", "residual", "weight", "eps"))
    if not all(isinstance(t, torch.Tensor) for t in (x, residual, weight)):
        return False
    # Writing into an operand read again needs a copy: see the module's docstring.
    readers = set(match.nodes)
    writable = _writable(x_node, readers) or _writable(residual_node, readers)
    return (
        writable
        and x_node is not residual_node
        and x.shape == residual.shape  # the + did not broadcast
        and x.dtype == residual.dtype == weight.dtype
        and weight.dim() == 1
        and x.dim() >= 1
        and weight.shape[0] == x.shape[-1]
        and x.device == residual.device == weight.device
        # torch 2.11 checks a match retraced with eps as a constant, so eps
        # is then not among the match's arguments.
        and ("eps" not in vals or (isinstance(eps, float) and eps >= 0))
    )


@functools.cache
def _patterns(backend: str):
    from torch._inductor.pattern_matcher import (
        PatternMatcherPass,
        fwd_only,
        register_replacement,
    )

    patterns = PatternMatcherPass(pass_name="opguide_fused_add_rms_norm")

    def register(search, replace, dtype, rank):
        shape = (2, 8) if rank == 2 else (2, 3, 8)
        example = [
            torch.empty(shape, dtype=dtype),
            torch.empty(shape, dtype=dtype),
            torch.empty(shape[-1], dtype=dtype),
        ]
        register_replacement(
            search,
            replace,
            example,
            fwd_only,
            patterns,
            extra_check=_fits_fused_op,
            scalar_workaround={"eps": _EPS_PLACEHOLDER},
        )

    keepdim = _replace(backend, "keepdim")
    for dtype in _DTYPES:
        register(_search_llama(dtype), keepdim, dtype, rank=2)
        # aten._fused_rms_norm reduces over dimensions counted from the front.
        for rank in (2, 3):
            register(_search_functional, keepdim, dtype, rank)
    register(_search_opguide_training, _replace(backend, "rowwise"), torch.float32, 2)
    register(_search_opguide_inference, _replace(backend, "none"), torch.float32, 2)
    return patterns


# --- the pass ----------------------------------------------------------------

_REPLACED: dict[str, int] = {"count": 0}


def replacements() -> int:
    """Counts the sums and norms replaced by the fused operator in this process.

    Returns:
        The replacements made, over every graph, since the process started or
        since :func:`reset_replacements`.
    """
    return _REPLACED["count"]


def reset_replacements() -> None:
    """Sets the count of :func:`replacements` back to zero."""
    _REPLACED["count"] = 0


def _write_into_free_operand(graph: torch.fx.Graph, op) -> None:
    # The fused operator writes the sum into `residual`. Where the pattern's
    # `residual` is read again and its `x` is not, swap them: x + residual is
    # residual + x exactly, and Inductor then writes in place, not into a copy.
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    for node in graph.nodes:
        if node.target is not auto_functionalized or node.args[0] is not op:
            continue
        x, residual = node.kwargs["x"], node.kwargs["residual"]
        if not _writable(residual, {node}) and _writable(x, {node}):
            node.kwargs = {**node.kwargs, "x": residual, "residual": x}


def _make_pass_class():
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class FusedAddRMSNormPass(CustomGraphPass):
        """Puts the fused operator where a sum and a norm of the sum are."""

        def __init__(self, backend: str) -> None:
            self.backend = backend

        def __call__(self, graph: torch.fx.Graph) -> None:
            count = _patterns(self.backend).apply(graph)
            if count:
                _write_into_free_operand(graph, _fused_op(self.backend))
                graph.eliminate_dead_code()
            _REPLACED["count"] += count

        def uuid(self):
            # Inductor's cache keys compiled graphs on this: the pass's source
            # and the backend it calls.
            return (get_hash_for_files((__file__,)), self.backend)

    return FusedAddRMSNormPass


def fusion_pass(backend: str = "cpp"):
    """The graph pass, for Inductor's ``post_grad_custom_pre_pass`` hook.

    Args:
        backend: which fused operator the graph calls: ``"cpp"``
            (``opguide::fused_add_rms_norm_``, C++ and CUDA kernels) or
            ``"triton"`` (``opguide::fused_add_rms_norm_triton_``).

    Returns:
        A ``torch._inductor.custom_graph_pass.CustomGraphPass``.

    Raises:
        ValueError: ``backend`` is not ``"cpp"`` or ``"triton"``.
        RuntimeError: this torch lacks a private API the pass needs.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    missing = missing_private_apis()
    if missing:
        raise RuntimeError(
            f"this torch ({torch.__version__}) lacks {', '.join(missing)}, which "
            "opguide.experimental.inductor_fusion needs"
        )
    return _make_pass_class()(backend)


def compile_options(backend: str = "cpp") -> dict:
    """The ``options`` for ``torch.compile`` that turn the fusion pass on.

    Args:
        backend: as for :func:`fusion_pass`.

    Returns:
        ``{"post_grad_custom_pre_pass": fusion_pass(backend)}``, for
        ``torch.compile(model, options=...)``.

    Raises:
        ValueError, RuntimeError: as :func:`fusion_pass` does.
    """
    return {"post_grad_custom_pre_pass": fusion_pass(backend)}


@contextlib.contextmanager
def enabled(backend: str = "cpp") -> Iterator[None]:
    """Turns the fusion pass on for the graphs Inductor compiles inside the block.

    ``torch.compile`` compiles at a model's first call (and again when it
    recompiles), so the block must hold that call.

    Args:
        backend: as for :func:`fusion_pass`.

    Raises:
        ValueError, RuntimeError: as :func:`fusion_pass` does.
    """
    from torch._inductor import config

    with config.patch(compile_options(backend)):
        yield


__all__ = [
    "compile_options",
    "enabled",
    "fusion_pass",
    "missing_private_apis",
    "replacements",
    "reset_replacements",
]
