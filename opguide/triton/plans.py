"""Launch plans: each planner's choice and its grid, worked out once per problem.

:func:`plan` turns the planners of :mod:`opguide.triton.launch` into a
:class:`Plan` (the configuration, the grid and the values derived from
them) and caches it per (rows, cols, dtype, device) for eager calls, so
that a model that calls the same few shapes again and again plans each once.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from .launch import (
    GRAD_WEIGHT_SUM,
    Config,
    GradWeightSum,
    Registers,
    Split,
    align,
    backward_config,
    cdiv,
    forward_config,
    fused_config,
    sm_count,
    split_launch,
)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One launch, worked out from the problem once: the configuration and its grid.

    Attributes:
        config: the planner's configuration (:mod:`opguide.triton.launch`).
        grid: the grid of the main kernel.
        align: ALIGN of the kernels (:func:`opguide.triton.launch.align`).
        programs: rows of the backward's grad_weight partial sums; for a split
            launch, also the programs per segment index.
        segments: S, programs per row of a split launch (0 otherwise).
        sp: SP, S rounded up to a power of two (0 otherwise).
        grad_weight_grid: the grid of the backward's second grad_weight kernel(s):
            ``(strips, programs)`` of the column kernel for chunked rows, else
            the grid of the final sum.
        sum_grid: the grid of the backward's final grad_weight sum; ``()`` for the
            forward and the fused operator, and for a backward whose one
            program writes grad_weight itself.
    """

    config: Config
    grid: tuple[int, ...]
    align: int = 16
    programs: int = 0
    segments: int = 0
    sp: int = 0
    grad_weight_grid: tuple[int, ...] = ()
    sum_grid: tuple[int, ...] = ()


def _rows_plan(config: Config, rows: int, cols: int, device: torch.device) -> Plan:
    # The forward and the fused operator: one program per ROWS rows, per
    # segment of a row, or per row.
    if isinstance(config, Registers):
        return Plan(config, (cdiv(rows, config.rows),), align(cols))
    if isinstance(config, Split):
        programs, segments, sp = split_launch(config, rows, cols, device, groups=False)
        return Plan(config, (programs * segments,), align(cols), programs, segments, sp)
    return Plan(config, (rows,), align(cols))


def _plan_forward(rows, cols, dtype, device, forced=None) -> Plan:
    return _rows_plan(forward_config(rows, cols, dtype, device, forced), rows, cols, device)


def _plan_fused(rows, cols, dtype, device, forced=None) -> Plan:
    return _rows_plan(fused_config(rows, cols, dtype, device, forced), rows, cols, device)


def _plan_backward(
    rows, cols, dtype, device, forced=None, grad_weight_sum: GradWeightSum = GRAD_WEIGHT_SUM
) -> Plan:
    config = backward_config(rows, cols, dtype, device, forced)
    a = align(cols)
    sum_grid = (cdiv(cols, grad_weight_sum.block_n),)
    if isinstance(config, Registers):
        # The whole row in registers, rows looped over by a grid that fits.
        # A grid of one program (a single row: the programs never outnumber the
        # rows) holds the whole sum: it writes grad_weight itself, and the sum
        # kernel is not launched.
        if config.programs == 1:
            sum_grid = ()
        return Plan(config, (config.programs,), a, config.programs, sum_grid=sum_grid)
    if isinstance(config, Split):
        # Longer rows: each split over programs that meet through memory.
        programs, segments, sp = split_launch(config, rows, cols, device, groups=True)
        return Plan(config, (programs * segments,), a, programs, segments, sp, (), sum_grid)
    # Rows too long to split: grad_x row by row, grad_weight over column strips.
    strips = cdiv(cols, config.block_n)
    programs = max(1, min(rows, sm_count(device) * 4 // strips))
    return Plan(config, (rows,), a, programs, 0, 0, (strips, programs), sum_grid)


# The plans of eager calls, per (rows, cols, dtype, device): a model calls
# the same few shapes again and again. A forced configuration, or a call on
# tensors that are not real (a fake tensor under a tracer), is planned afresh.
_CACHED = {
    "forward": functools.lru_cache(maxsize=1024)(_plan_forward),
    "backward": functools.lru_cache(maxsize=1024)(_plan_backward),
    "fused": functools.lru_cache(maxsize=1024)(_plan_fused),
}
_PLANNERS = {"forward": _plan_forward, "backward": _plan_backward, "fused": _plan_fused}


def plan(
    op: str,
    t: torch.Tensor,
    rows: int,
    cols: int,
    forced: Config | None = None,
    grad_weight_sum: GradWeightSum = GRAD_WEIGHT_SUM,
) -> Plan:
    """The :class:`Plan` of ``op`` (``"forward"``, ``"backward"`` or ``"fused"``) on ``t``.

    Args:
        op: which operator's planner.
        t: the input (its dtype and device; whether it is a real tensor).
        rows, cols: M and N.
        forced: a configuration to launch instead of the planner's.
        grad_weight_sum: the backward's grad_weight sum configuration.

    Returns:
        The plan, from the cache when ``t`` is a plain tensor and nothing is forced.
    """
    extra = (grad_weight_sum,) if op == "backward" else ()
    if forced is None and grad_weight_sum is GRAD_WEIGHT_SUM and type(t) is torch.Tensor:
        return _CACHED[op](rows, cols, t.dtype, t.device)
    return _PLANNERS[op](rows, cols, t.dtype, t.device, forced, *extra)
