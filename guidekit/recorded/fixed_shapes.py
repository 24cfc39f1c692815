"""Two fixed-shape runs of ``python -m guidekit.benchmark`` side by side.

A fixed-shape run reports every row as a fraction of the 1 GiB copy's
bandwidth (``of_copy``). Two runs that differ in one setting (L2 cleaned or
not, a kernel change, PDL) are compared point by point, in points of that
copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Change(NamedTuple):
    """One point of two runs: how many points of the copy it moved, and where."""

    points: float
    impl: str
    where: str  # "dtype MxN"
    before: float  # fraction of the copy
    after: float


def of_copy(result: dict, pass_name: str) -> dict:
    """{(impl, dtype, m, n): fraction of the 1 GiB copy's bandwidth} of a fixed-shape run."""
    return {(r["impl"], r["dtype"], r["m"], r["n"]): r["of_copy"] for r in result[pass_name]}


def compare(pass_name: str, impls: Sequence[str], before: dict, after: dict) -> list[Change]:
    """The points of ``impls`` that both runs measured, in the order of ``after``.

    Args:
        pass_name: ``"forward"``, ``"backward"`` or ``"fused"``.
        impls: the implementations to compare.
        before, after: the two result files.

    Returns:
        One :class:`Change` per point, ``points`` = 100 * (after - before).
    """
    old, new = of_copy(before, pass_name), of_copy(after, pass_name)
    return [
        Change(100 * (new[key] - old[key]), key[0], f"{key[1]} {key[2]}x{key[3]}", old[key], v)
        for key, v in new.items()
        if key[0] in impls and key in old
    ]


def compare_lines(pass_name: str, changes: Sequence[Change], labels: tuple) -> list[str]:
    """The two runs' % of the copy side by side, under a header naming them."""
    lines = [f"  {pass_name:8} {'impl':19} {'dtype, shape':>16} {labels[0]:>12} {labels[1]:>12}"]
    for c in changes:
        lines.append(
            f"  {pass_name:8} {c.impl:19} {c.where:>16} "
            f"{100 * c.before:11.1f}% {100 * c.after:11.1f}%"
        )
    return lines


def moved_by_more_than(changes: Sequence[Change], points: float = 1.0) -> list[str]:
    """The implementations (sorted) with a point that moved by more than ``points``."""
    return sorted({c.impl for c in changes if abs(c.points) > points})


def largest(changes: Sequence[Change]) -> Change:
    """The change of the largest size, either way."""
    return max(changes, key=lambda c: abs(c.points))


def gain_range(changes: Sequence[Change]) -> tuple[float, float]:
    """The smallest and the largest change, in points."""
    return min(c.points for c in changes), max(c.points for c in changes)
