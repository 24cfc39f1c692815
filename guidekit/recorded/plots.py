"""The step 11 pages' figures, drawn from the recorded results.

Each function draws one matplotlib figure with pyplot (so sphinx-gallery
captures it) and returns it. Figures have a white face and dark text, legible
in the site's light and dark themes, and every title says the data is
recorded and on which device.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from guidekit.benchmark.passes import SAME_SIZE_COPY, SWEEP_PASSES

from .eager import PARTS, SHORT
from .sweeps import ONE_BLOCK, TARGETS

#: One colour per implementation, the same on every figure.
COLORS = {
    "opguide": "C0",
    "opguide triton": "C1",
    "F.rms_norm": "C2",
    "compile(reference)": "C3",
    "compile(unfused reference)": "C6",
    "eager add + F.rms_norm": "C8",
    "compile(residual += x; F.rms_norm)": "C9",
    "liger": "C4",
    "quack": "C5",
    # A peer's fused kernel takes its library's colour (the fused pass is a
    # panel of its own).
    "liger (fused)": "C4",
    "quack (residual)": "C5",
    SAME_SIZE_COPY: "black",
}
#: The peers' kernels in the fused pass, by the name they have in the others.
FUSED_PEER = {"liger": "liger (fused)", "quack": "quack (residual)"}


def _figure(rows: int, cols: int, size: tuple[float, float]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=size, layout="constrained", squeeze=False)
    fig.set_facecolor("white")
    for ax in axes.flat:
        ax.set_facecolor("white")
        ax.grid(alpha=0.3)
    return fig, axes


def _row_length_axis(ax, ns: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns], rotation=45)
    ax.minorticks_off()
    ax.set_xlabel("N (row length)")


def sweep_figure(rows: Sequence[dict], ns: Sequence[int], title: str):
    """GB/s of every implementation against the row length, one panel per pass.

    Args:
        rows: one dtype's sweep rows; the same-size copy is drawn dashed.
        ns: the row lengths (the x ticks).
        title: the figure's title.
    """
    fig, axes = _figure(2, 2, (12, 8.5))
    handles = {}
    for ax, pass_name in zip(axes.flat, SWEEP_PASSES, strict=True):
        found = [r for r in rows if r["pass"] == pass_name]
        for impl in dict.fromkeys(r["impl"] for r in found):
            points = sorted((r["n"], r["GBps"]) for r in found if r["impl"] == impl)
            copy = impl == SAME_SIZE_COPY
            (line,) = ax.plot(
                *zip(*points, strict=True), marker="" if copy else "o", markersize=4,
                linestyle="--" if copy else "-", color=COLORS.get(impl), label=impl,
            )  # fmt: skip
            handles.setdefault(impl, line)
        _row_length_axis(ax, ns)
        ax.set_ylim(bottom=0)
        ax.set_title(pass_name)
        ax.set_ylabel("GB/s")
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=5)
    fig.suptitle(title)
    return fig


def long_rows_figure(at_: Mapping, ns: Sequence[int], title: str, shortest: int = 8192):
    """% of the same-size copy at rows of ``shortest`` and more, with each pass's target.

    A dotted line marks the longest row the CUDA planner gives one block
    (:data:`.ONE_BLOCK`); it sends longer rows to a cluster.

    Args:
        at_: one dtype's sweep rows by ``(pass, impl, N)`` (:func:`.sweeps.at`).
        ns: the sweep's row lengths.
        title: the figure's title.
        shortest: the shortest row drawn.
    """
    fig, axes = _figure(2, 2, (12, 8))
    long_ns = [n for n in ns if n >= shortest]
    for ax, pass_name in zip(axes.flat, SWEEP_PASSES, strict=True):
        impls = ("opguide", "opguide triton", "quack", "liger", "F.rms_norm")
        if pass_name == "fused":
            impls = tuple(FUSED_PEER.get(i, i) for i in impls)
        for impl in impls:
            points = [(n, 100 * at_[(pass_name, impl, n)]["vs_copy"])
                      for n in long_ns if (pass_name, impl, n) in at_]  # fmt: skip
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", markersize=4,
                        color=COLORS[impl], label=impl)  # fmt: skip
        ax.axhline(100 * TARGETS[pass_name], color="grey", linestyle="--", label="target")
        ax.axvline(
            ONE_BLOCK[pass_name], color="grey", linestyle=":", label="CUDA: clusters past this"
        )
        _row_length_axis(ax, long_ns)
        ax.set_ylim(0, 110)
        ax.set_title(pass_name)
        ax.set_ylabel("% of the same-size copy")
    legend = {}  # every panel's lines, each label once
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=5)
    fig.suptitle(title)
    return fig


def odd_rows_figure(wide_only: Mapping, odd: Mapping, ns: Sequence[int], title: str):
    """% of the copy at row lengths that are not whole 16-byte vectors, bfloat16.

    Args:
        wide_only: {(pass, impl, N): vs_copy} of the run with 16-byte accesses only.
        odd: {(dtype, pass, impl, N): vs_copy} of the run as built.
        ns: the row lengths (categories on the x axis).
        title: the figure's title.
    """
    fig, axes = _figure(2, 2, (12, 7.5))
    x = range(len(ns))
    for ax, pass_name in zip(axes.flat, SWEEP_PASSES, strict=True):
        for impl in ("opguide", "opguide triton", "F.rms_norm"):
            got = [odd.get(("bf16", pass_name, impl, n)) for n in ns]
            if any(g is not None for g in got):
                ax.plot(x, [None if g is None else 100 * g for g in got], marker="o",
                        color=COLORS[impl], label=impl)  # fmt: skip
        wide = [wide_only.get((pass_name, "opguide", n)) for n in ns]
        ax.plot(x, [None if w is None else 100 * w for w in wide], marker="x", linestyle="",
                color=COLORS["opguide"], label="opguide, 16-byte accesses only")  # fmt: skip
        ax.set_xticks(list(x), [str(n) for n in ns])
        ax.set_xlabel("N (row length)")
        ax.set_ylim(0, 110)
        ax.set_title(pass_name)
        ax.set_ylabel("% of the same-size copy")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4)
    fig.suptitle(title)
    return fig


def eager_figure(rows: Sequence[dict], title: str):
    """Microseconds per eager call, median over the shapes, the range as a whisker.

    Args:
        rows: the eager rows (``python -m guidekit.benchmark --eager``); the
            rows that time a part of a call (:data:`.eager.PARTS`) are left out.
        title: the figure's title.
    """
    fig, axes = _figure(1, 2, (12, 4))
    for ax, mode in zip(axes.flat, ("forward", "training"), strict=True):
        impls = [i for i in dict.fromkeys(r["impl"] for r in rows if r["mode"] == mode)
                 if i not in PARTS]  # fmt: skip
        us = [[1e6 * r["seconds"] for r in rows if (r["mode"], r["impl"]) == (mode, i)]
              for i in impls]  # fmt: skip
        mid = [statistics.median(u) for u in us]
        spread = [
            [m - min(u) for m, u in zip(mid, us, strict=True)],
            [max(u) - m for m, u in zip(mid, us, strict=True)],
        ]
        ax.barh(range(len(impls)), mid, xerr=spread, capsize=3,
                color=[COLORS.get(i, "C7") for i in impls])  # fmt: skip
        ax.set_yticks(range(len(impls)), [SHORT.get(i, i) for i in impls])
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("microseconds per call (log scale)")
        ax.set_title(mode)
    fig.suptitle(title)
    return fig


def gains_figure(gains: Mapping[str, Sequence[float]], title: str):
    """Each change's gain at every point it was measured, in points of the copy.

    Rows are sorted by the median gain, largest on top; a bar shows the median,
    dots the single points.

    Args:
        gains: {change: [points gained at each measured point]}.
        title: the figure's title.
    """
    order = sorted(gains, key=lambda k: statistics.median(gains[k]), reverse=True)
    fig, axes = _figure(1, 1, (9, 0.55 * len(order) + 1.6))
    ax = axes[0, 0]
    medians = [statistics.median(gains[k]) for k in order]
    ax.barh(range(len(order)), medians, color="C0", alpha=0.4, label="median")
    for y, k in enumerate(order):
        ax.plot(gains[k], [y] * len(gains[k]), "o", color="C0", markersize=4)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xlabel("points of the copy gained (after - before)")
    ax.set_title(title)
    return fig


def timings_figure(panels: Mapping[str, Mapping[str, Sequence[float]]], title: str):
    """Timings side by side: per panel, one bar per implementation.

    A bar is the median of its runs; with more than one run a whisker spans
    the fastest to the slowest and dots mark the single runs.

    Args:
        panels: {panel title (its unit in it): {implementation: [time of each run]}}.
        title: the figure's title.
    """
    fig, axes = _figure(len(panels), 1, (9, sum(0.5 * len(p) + 1.2 for p in panels.values())))
    for ax, (panel, runs) in zip(axes.flat, panels.items(), strict=True):
        names = list(runs)
        mid = [statistics.median(runs[k]) for k in names]
        spread = [
            [m - min(runs[k]) for m, k in zip(mid, names, strict=True)],
            [max(runs[k]) - m for m, k in zip(mid, names, strict=True)],
        ]
        ax.barh(range(len(names)), mid, xerr=spread, capsize=3, alpha=0.5,
                color=[f"C{i}" for i in range(len(names))])  # fmt: skip
        for y, k in enumerate(names):
            if len(runs[k]) > 1:
                ax.plot(runs[k], [y] * len(runs[k]), "o", color="black", markersize=3)
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        ax.set_xlim(left=0)
        ax.set_title(panel, fontsize=10)
    fig.suptitle(title)
    return fig
