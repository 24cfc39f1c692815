"""Recorded eager calls (``python -m guidekit.benchmark --eager``), analysed.

Rows are dicts with ``mode`` (``forward`` or ``training``), ``impl``, ``m``,
``n``, ``seconds`` (wall clock per call) and ``vs_F.rms_norm``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from guidekit.benchmark.eager import (
    EAGER_KERNELS,
    EMPTY_FUNCTION,
    FUNCTION_NODE,
    TRITON_EXPERIMENTAL,
)
from guidekit.benchmark.passes import bytes_moved

#: The most times F.rms_norm's time each implementation may take per call.
#: The Triton backend's target is for its opt-in direct launch; its default
#: path (a plain Triton launch) is measured against Liger's, which launches
#: its kernels the same way (:func:`plain_launch_lines`).
EAGER_TARGETS = {"opguide": 1.0, TRITON_EXPERIMENTAL: 2.0}
#: Column names of the tables.
SHORT = {
    "torch.ops.opguide.rms_norm": "torch.ops",
    "opguide triton": "triton",
    EAGER_KERNELS["opguide"]: "ops",
    EAGER_KERNELS["opguide triton"]: "triton ops",
    EAGER_KERNELS["F.rms_norm"]: "F ops",
    EMPTY_FUNCTION: "empty Fn",
    FUNCTION_NODE: "Function",
    TRITON_EXPERIMENTAL: "triton exp",
    EAGER_KERNELS[TRITON_EXPERIMENTAL]: "exp ops",
}
#: The training rows that time a part of a call, not a call.
PARTS = {*EAGER_KERNELS.values(), EMPTY_FUNCTION, FUNCTION_NODE}


def table_lines(rows: Sequence[dict], title: str, impls: Sequence[str], mode: str) -> list[str]:
    """Microseconds per call of ``impls`` at every shape, one column each."""
    lines = [f"{title:>9}" + "".join(f" {SHORT.get(i, i):>10}" for i in impls)]
    for n in sorted({r["n"] for r in rows}):
        for m in sorted({r["m"] for r in rows}):
            at = {r["impl"]: r for r in rows if (r["mode"], r["m"], r["n"]) == (mode, m, n)}
            cells = [
                f" {at[i]['seconds'] * 1e6:10.1f}" if i in at else f" {'-':>10}" for i in impls
            ]
            lines.append(f"{f'{m}x{n}':>9}" + "".join(cells))
    return lines


def tables(rows: Sequence[dict]) -> list[str]:
    """The forward and training tables, then the training parts."""
    lines = []
    for mode in ("forward", "training"):
        impls = list(dict.fromkeys(r["impl"] for r in rows if r["mode"] == mode))
        lines += table_lines(rows, mode, [i for i in impls if i not in PARTS], mode)
        if mode == "training":
            lines += table_lines(rows, "parts", [i for i in impls if i in PARTS], mode)
    return lines


def ratios(rows: Sequence[dict], impl: str, mode: str) -> list[float]:
    """``vs_F.rms_norm`` of one implementation's calls in ``mode``, at every shape."""
    return [r["vs_F.rms_norm"] for r in rows if (r["impl"], r["mode"]) == (impl, mode)]


def target_misses(rows: Sequence[dict], impl: str, mode: str) -> int | None:
    """At how many shapes ``impl`` misses its :data:`EAGER_TARGETS` (None: not recorded)."""
    got = ratios(rows, impl, mode)
    return sum(g > EAGER_TARGETS[impl] for g in got) if got else None


def target_lines(by_dtype: dict[str, Sequence[dict]]) -> list[str]:
    """Each implementation's range of ratios to F.rms_norm, against its target."""
    lines = []
    for dtype, rows in by_dtype.items():
        for impl, target in EAGER_TARGETS.items():
            for mode in ("forward", "training"):
                got = ratios(rows, impl, mode)
                if not got:
                    lines.append(f"{dtype} {impl} {mode}: not recorded")
                    continue
                worse = target_misses(rows, impl, mode)
                verdict = "met"
                if worse:
                    over = max(got) / target - 1
                    verdict = (
                        f"missed at {worse} of {len(got)} shapes, by {over:.0%} at most "
                        "(one run: its spread is not measured)"
                    )
                lines.append(
                    f"{dtype} {impl} {mode}: {min(got):.2f}-{max(got):.2f}x F.rms_norm "
                    f"(target at most {target:.0f}x): {verdict}"
                )
    return lines


def plain_launch_lines(by_dtype: dict[str, Sequence[dict]], peer: str = "liger") -> list[str]:
    """The Triton backend's default path against F.rms_norm and against ``peer``."""
    lines = []
    for dtype, rows in by_dtype.items():
        for mode in ("forward", "training"):
            mine, theirs = seconds(rows, "opguide triton", mode), seconds(rows, peer, mode)
            got = ratios(rows, "opguide triton", mode)
            if not got:
                continue
            line = f"{dtype} opguide triton {mode}: {min(got):.2f}-{max(got):.2f}x F.rms_norm"
            vs = [mine[k] / theirs[k] for k in mine if k in theirs]
            if vs:
                line += f", {min(vs):.2f}-{max(vs):.2f}x {peer}"
            lines.append(line)
    return lines


def seconds(rows: Sequence[dict], impl: str, mode: str) -> dict:
    """{(M, N): seconds} of one implementation's calls in ``mode``."""
    return {(r["m"], r["n"]): r["seconds"] for r in rows if (r["mode"], r["impl"]) == (mode, impl)}


def wrapper_line(rows: Sequence[dict]) -> str:
    """The bare operator against F.rms_norm, and the checked wrapper against the bare operator.

    The sentence follows the sign of the difference at every shape: the
    wrapper faster at all of them, slower at all of them, or either way, and
    then slower at three quarters of them or more (a small cost), at a
    quarter or fewer, or in between (no consistent cost).
    """
    bare = ratios(rows, "torch.ops.opguide.rms_norm", "forward")
    wrapper = seconds(rows, "opguide", "forward")
    op = seconds(rows, "torch.ops.opguide.rms_norm", "forward")
    extra = [1e6 * (wrapper[k] - t) for k, t in op.items() if k in wrapper]
    lo, hi = min(abs(e) for e in extra), max(abs(e) for e in extra)
    if max(extra) < 0:
        spread = (
            f"was {lo:.1f}-{hi:.1f} us faster than the bare call at every shape "
            f"({len(extra)} of {len(extra)}). The wrapper runs its checks and then the "
            "same compiled operator, so this is not what the checks cost; a likely cause "
            "is the bare call's lookup of torch.ops.opguide.rms_norm.default on every "
            "call (the wrapper keeps the operator in a module global), or its place in "
            "the timing order: the record does not tell the two apart."
        )
    elif min(extra) > 0:
        spread = f"adds {lo:.1f}-{hi:.1f} us at every shape ({len(extra)} of {len(extra)})"
    else:
        slower = sum(e > 0 for e in extra)
        middle = sorted(extra)[len(extra) // 2]
        spread = (
            f"is slower at {slower} of {len(extra)} shapes and faster at the others "
            f"({min(extra):+.1f} to {max(extra):+.1f} us, median {middle:+.1f} us)"
        )
        if slower * 4 >= 3 * len(extra):  # slower at three quarters of the shapes or more
            spread += f": a small cost, about {middle:.1f} us a call"
        elif slower * 4 <= len(extra):
            spread += ": if anything faster; the checks cost nothing measurable"
        else:
            spread += ": no consistent cost"
    return (
        f"bare operator: {min(bare):.2f}-{max(bare):.2f}x F.rms_norm; the checked wrapper {spread}"
    )


def training_parts(rows: Sequence[dict]) -> tuple[dict, list[str]]:
    """Where a training call's time goes: the operators alone, and the rest.

    Returns:
        ``(parts, lines)``: {impl: (training us, operators us, the rest us)},
        medians over the shapes, for each implementation timed both ways;
        and the lines that state them.
    """
    parts, lines = {}, []
    for impl, only in EAGER_KERNELS.items():
        full, bare = seconds(rows, impl, "training"), seconds(rows, only, "training")
        if not bare:
            if full:
                lines.append(f"{impl}: not timed without autograd in this file")
            continue
        parts[impl] = (
            statistics.median(full.values()) * 1e6,
            statistics.median(bare.values()) * 1e6,
            statistics.median(full[k] - bare[k] for k in bare) * 1e6,
        )
        lines.append(
            f"{impl:15} training {parts[impl][0]:5.0f} us: the operators {parts[impl][1]:4.0f} us, "
            f"autograd and the rest {parts[impl][2]:4.0f} us"
        )
    if parts:
        lines.append(
            "Each figure is a median over the shapes, taken on its own (the rest: the median "
            "of the per-shape differences), so the parts need not add up to the total."
        )
    if {"opguide", "opguide triton"} <= parts.keys():
        cpp, tri = parts["opguide"], parts["opguide triton"]
        lines.append(
            f"Triton against the C++ operators: its launches take {tri[1] / cpp[1]:.1f}x their "
            f"time, and autograd and the rest {tri[2] - cpp[2]:+.0f} us."
        )
        if tri[2] - cpp[2] > tri[1] - cpp[1]:
            lines.append(
                "Surprising: the Python autograd Function around the Triton launches, with the "
                "Python around its backward's launches, costs more than the launches' own extra "
                "time; this table does not time those parts apart."
            )
    return parts, lines


def floor_lines(rows: Sequence[dict], at: tuple[int, int] = (1, 4096)) -> list[str]:
    """The empty Python Function's training call, against each full call.

    The empty Function measures what autograd costs around an operator
    written as a Python ``autograd.Function``; opguide's C++ Function may cost
    less, so the last line sets opguide's training call less its operators
    against it, shape by shape, and says which way it goes.

    Args:
        rows: the eager rows.
        at: the ``(m, n)`` shape at which each implementation is set against it.

    Returns:
        The empty Function's median and range over the shapes, then one line
        per implementation timed at ``at``: its training call and how many
        times the empty Function's it takes; then opguide's line, if its
        operators were timed alone. Empty if the file has no empty-Function
        rows.
    """
    floor = seconds(rows, EMPTY_FUNCTION, "training")
    if not floor or at not in floor:
        return []
    us = sorted(v * 1e6 for v in floor.values())
    impls = sorted({r["impl"] for r in rows if r["mode"] == "training"} - PARTS)
    calls = {impl: seconds(rows, impl, "training") for impl in impls}
    below = [
        impl
        for impl, by_shape in calls.items()
        if any(shape in floor and t < floor[shape] for shape, t in by_shape.items())
    ]
    lines = [
        f"A Python autograd Function that launches nothing: "
        f"{statistics.median(us):.0f} us per training call (median over the shapes; "
        f"{us[0]:.0f} to {us[-1]:.0f} us). "
        + (
            f"Below it at some shape: {', '.join(below)}."
            if below
            else "Every training call in the file costs more, at every shape."
        ),
        f"Training calls at {at[0]}x{at[1]} against it ({floor[at] * 1e6:.0f} us there):",
    ]
    for impl, by_shape in calls.items():
        full = by_shape.get(at)
        if full is not None:
            lines.append(
                f"  {impl:36} {full * 1e6:5.0f} us, {full / floor[at]:.2f}x the empty Function"
            )
    return lines + cpp_function_line(calls.get("opguide", {}), rows, floor)


def cpp_function_line(full: dict, rows: Sequence[dict], floor: dict) -> list[str]:
    """opguide's training call less its operators, against the empty Python Function.

    Args:
        full: {(M, N): seconds} of opguide's training calls.
        rows: the eager rows (for opguide's operators timed without autograd).
        floor: {(M, N): seconds} of the empty Python Function's training calls.

    Returns:
        One line: at how many shapes the rest of opguide's call (its C++
        Function, autograd and the rest) costs less than the empty Function,
        the range of the differences, and what that says. Empty if opguide's
        operators were not timed alone.
    """
    ops = seconds(rows, EAGER_KERNELS["opguide"], "training")
    shapes = [k for k in ops if k in full and k in floor]
    if not shapes:
        return []
    diffs = [1e6 * (full[k] - ops[k] - floor[k]) for k in shapes]
    less = sum(d < 0 for d in diffs)
    line = (
        "opguide's training call less its operators (its C++ Function, autograd and the rest) "
        f"against the empty Python Function: {min(diffs):+.1f} to {max(diffs):+.1f} us, "
        f"less at {less} of {len(diffs)} shapes"
    )
    if less == len(diffs):
        line += (
            ": here opguide's C++ Function costs less than the Python one, so the empty "
            "Python Function is no floor for opguide's call."
        )
    elif less == 0:
        line += ": here the C++ Function saves nothing against the Python one."
    else:
        line += ": no consistent order between the C++ Function and the Python one."
    return [line]


def node_lines(rows: Sequence[dict]) -> list[str]:
    """``rms_norm``'s Function (one output) against ``rms_norm_fwd``'s (two outputs)."""
    node, function = seconds(rows, "opguide", "training"), seconds(rows, FUNCTION_NODE, "training")
    if not function:
        return []
    saved = [function[k] - node[k] for k in node if k in function]
    median = 1e6 * statistics.median(saved)
    ours = [1e6 * v for v in node.values()]
    return [
        "A Function of one output (y) against one of two (y, inv_rms): "
        + (f"{median:.1f} us less" if median >= 0 else f"{-median:.1f} us more")
        + " per training call (the median of the per-shape differences), faster at "
        f"{sum(d > 0 for d in saved)} of {len(saved)} shapes. One run: its spread is "
        f"not measured, and a training call through the one-output Function takes "
        f"{min(ours):.0f} to {max(ours):.0f} us across the shapes."
    ]


def batch_lines(rows: Sequence[dict], at_: dict, m: int = 1024, n: int = 8192) -> list[str]:
    """F.rms_norm's forward at ``m`` rows against one row at every recorded N, and its
    training call at ``m`` x ``n`` against what its kernels take at the sweep's bandwidth.

    Args:
        rows: the eager rows.
        at_: the bfloat16 sweep's rows by ``(pass, impl, N)``.
        m, n: the shape of the batch.
    """
    forward = seconds(rows, "F.rms_norm", "forward")
    times = {k[1]: forward[k] / forward[(1, k[1])] for k in sorted(forward)
             if k[0] == m and (1, k[1]) in forward}  # fmt: skip
    lines = [
        f"F.rms_norm forward, {m} rows against 1 ({m}x the work): "
        + ", ".join(f"{t:.2f}x the time at N = {k}" for k, t in times.items())
    ]
    if max(times.values()) < 2:
        lines.append(f"At every N, {m}x the work costs less than twice the time: the host sets it.")
    train = seconds(rows, "F.rms_norm", "training")[(m, n)]
    moved = bytes_moved("forward", m, n, 2) + bytes_moved("backward", m, n, 2)
    gpu = at_[("training", "F.rms_norm", n)]  # its GPU time in the sweep, at the same N
    kernels = gpu["seconds"] * moved / gpu["bytes"]
    lines.append(
        f"A training call of F.rms_norm at {m}x{n} takes {train * 1e6:.0f} us, "
        f"{train / forward[(m, n)]:.1f}x its forward call; at the bandwidth the sweep measured "
        f"for it (from memory, L2 cleaned), its kernels take about {kernels * 1e6:.0f} us, "
        "an upper bound where the repeated call's tensors stay in L2."
    )
    return lines
