"""The operators on DTensors: sharding rules for ``torch.distributed.tensor``.

Importing this module teaches DTensor how each opguide operator shards, so
that a model whose activations are sharded across devices (sequence or data
parallel) calls the kernels on each device's local rows, with no
communication. :func:`opguide.rms_norm` and :func:`opguide.fused_add_rms_norm_`
import it the first time they are called with a DTensor; code that calls
``torch.ops.opguide.*`` on DTensors directly imports it once itself::

    import opguide.distributed  # registers the rules

An RMSNorm normalises each row on its own, so a rule only has to say: rows
may be split, the row itself may not.

* ``x`` sharded on any leading dimension: the output (and ``inv_rms``) are
  sharded the same way; the weight is replicated. No collective.
* ``x`` sharded on the normalised (last) dimension, or a partial sum: no rule
  accepts it, so DTensor first redistributes ``x`` to a layout that one
  accepts (one collective: an all-gather, or an all-to-all to rows), then
  runs the kernel.
* The backward's weight gradient sums over all rows, and each device holds
  some of the rows: it is returned as ``Partial("sum")``, the placement
  PyTorch's own norms use, and DTensor reduces it where a replicated value is
  needed (for example when the optimizer updates a replicated weight).

``fused_add_rms_norm_`` updates ``residual`` in place. DTensor's
``register_sharding`` treats an operator whose name ends in ``_`` as one that
writes its first argument and returns it; this one writes its second and
returns two new tensors, so its rule is written with
:func:`torch.library.register_torch_dispatch` instead: it redistributes ``x``
and ``weight`` to the layout of ``residual`` (which must not change, being
updated in place) and runs the kernel on the local shards.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

from . import registry
from .backends import triton_ready

__all__: list[str] = []  # importing the module is what it is for

ops = torch.ops.opguide


def _forward_rule(x, weight, eps):
    # One (output placements, input placements) pair per acceptable layout on
    # one mesh dimension; None for an argument that is not a tensor.
    strategies = [([Replicate()], [Replicate(), Replicate(), None])]
    for dim in range(x.ndim - 1):  # every dimension but the normalised one
        strategies.append(([Shard(dim)], [Shard(dim), Replicate(), None]))
    return strategies


def _forward_with_stats_rule(x, weight, eps):
    # (y, inv_rms): inv_rms has shape x.shape[:-1], so a leading dimension of
    # x is the same dimension of inv_rms.
    strategies = [([Replicate(), Replicate()], [Replicate(), Replicate(), None])]
    for dim in range(x.ndim - 1):
        strategies.append(([Shard(dim), Shard(dim)], [Shard(dim), Replicate(), None]))
    return strategies


def _backward_rule(grad_y, x, weight, inv_rms):
    # (grad_x, grad_weight): grad_weight sums over the rows, and each device
    # holds some rows, so it is a partial sum.
    strategies = [([Replicate(), Replicate()], [Replicate()] * 4)]
    for dim in range(x.ndim - 1):
        rows = Shard(dim)
        strategies.append(([rows, Partial()], [rows, rows, Replicate(), rows]))
    return strategies


def _with_twin(compiled: str, triton: str | None) -> list[str]:
    """The operator and its Triton twin, where the Triton operators are defined."""
    return [compiled] + ([triton] if triton is not None and triton_ready() else [])


# RMSNorm's inference forward, training forward and backward (the registry's
# order), each with its Triton twin.
_RULES = (_forward_rule, _forward_with_stats_rule, _backward_rule)
for _ops, _rule in zip(registry.get("rms_norm").twins(), _RULES, strict=True):
    for _name in _with_twin(*_ops):
        register_sharding(getattr(ops, _name).default)(_rule)


def _holds_whole_rows(placements, ndim: int) -> bool:
    """Whether a tensor with these placements holds whole rows on every device.

    True for ``Replicate`` and for ``Shard`` of any dimension but the last;
    False for ``Partial`` (a partial sum is not yet the tensor) and for a
    shard of the normalised dimension.
    """
    for p in placements:
        if isinstance(p, Shard) and p.dim % ndim == ndim - 1:
            return False
        if not isinstance(p, (Shard, Replicate)):
            return False
    return True


def _fused_add_rms_norm_dtensor(op, types, args, kwargs):
    x, residual, weight, eps, *rest = args
    if not isinstance(residual, DTensor):
        raise RuntimeError("fused_add_rms_norm_: residual must be a DTensor when x is one")
    if not _holds_whole_rows(residual.placements, residual.ndim):
        raise RuntimeError(
            "fused_add_rms_norm_: residual is updated in place, so its layout cannot change; "
            "it must be replicated or sharded on a leading dimension, got "
            f"{residual.placements}. Redistribute it first, e.g. "
            "residual.redistribute(placements=[Replicate()])"
        )
    mesh, placements = residual.device_mesh, residual.placements
    # x takes residual's layout (a redistribution only when it differs); the
    # weight is needed whole on every device.
    if isinstance(x, DTensor):
        x = x.redistribute(mesh, placements).to_local()
    else:
        raise RuntimeError("fused_add_rms_norm_: x must be a DTensor when residual is one")
    if isinstance(weight, DTensor):
        weight = weight.redistribute(mesh, [Replicate()] * mesh.ndim).to_local()
    out, inv_rms = op(x, residual.to_local(), weight, eps, *rest, **kwargs)
    shape = residual.shape

    def wrap(local: torch.Tensor, global_shape: torch.Size) -> DTensor:
        stride = torch.empty(global_shape, device="meta").stride()
        return DTensor.from_local(
            local, mesh, placements, run_check=False, shape=global_shape, stride=stride
        )

    return wrap(out, shape), wrap(inv_rms, shape[:-1])


def _register_fused(name: str) -> None:
    op = getattr(ops, name).default

    def rule(mode, func, types, args, kwargs):
        return _fused_add_rms_norm_dtensor(func, types, args, kwargs)

    torch.library.register_torch_dispatch(op, DTensor, rule)


for _ops in registry.get("fused_add_rms_norm").twins():
    for _name in _with_twin(*_ops):
        _register_fused(_name)
