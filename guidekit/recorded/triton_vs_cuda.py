"""The recorded GPU sweep as steps 9 and 10 show it: each kernel in % of a copy of its bytes.

A sweep record (``python -m guidekit.benchmark --sweep``, e.g.
``docs/recorded/sweep_opguide_h100.json``) holds one row per pass,
implementation, dtype and row length N, each with ``vs_copy``: the time of a
copy of the same bytes over the kernel's (1.0: as fast as the copy). The
functions here pick the rows a page talks about, say where they were
measured, print their ranges and plot them; ``tests/test_triton_vs_cuda.py``
runs them on a small synthetic record and on the recorded file.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: The two implementations that steps 9 and 10 compare: Triton and CUDA.
TRITON, CUDA = "opguide triton", "opguide"
#: How the pages name them.
LABELS = {TRITON: "Triton", CUDA: "CUDA"}
#: The 16-bit types of the sweep, and how the pages name them.
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
#: The colours of step 11's plots for the two implementations.
COLOURS = {CUDA: "C0", TRITON: "C1"}


def measured_on(record: dict) -> str:
    """``"device, torch X, Triton Y, CUDA Z, date"``: where and when a sweep was recorded."""
    parts = [record["device"], f"torch {record['torch']}"]
    if record.get("triton"):
        parts.append(f"Triton {record['triton']}")
    if record.get("cuda"):
        parts.append(f"CUDA {record['cuda']}")
    parts.append(record["date"][:10])
    return ", ".join(parts)


def series(
    rows: Iterable[dict], pass_name: str, impl: str, dtype: str, longer_than: int = 0
) -> list[tuple[int, float]]:
    """``[(N, % of the copy)]`` of one pass, implementation and dtype, by N.

    Args:
        rows: the sweep's rows.
        pass_name: ``"forward"``, ``"backward"``, ``"fused"`` or ``"training"``.
        impl: the implementation, e.g. :data:`TRITON`.
        dtype: ``"bf16"`` or ``"fp16"``.
        longer_than: keep only the row lengths above this one.
    """
    return sorted(
        (r["n"], 100 * r["vs_copy"])
        for r in rows
        if (r["pass"], r["impl"], r["dtype"]) == (pass_name, impl, dtype) and r["n"] > longer_than
    )


def range_lines(
    rows: Sequence[dict],
    passes: Sequence[str],
    impls: Sequence[str] = (TRITON, CUDA),
    longer_than: int | dict[str, int] = 0,
) -> list[str]:
    """Per pass, dtype and implementation: the lowest, median and highest % of the copy.

    Args:
        rows: the sweep's rows.
        passes: the passes to report.
        impls: the implementations to report.
        longer_than: only rows longer than this (one number, or one per pass).

    Returns:
        One line each, ``"forward  bfloat16 Triton  90.1% at N = 131072 ... median 101.0%"``.
    """
    lines = []
    for pass_name in passes:
        floor = longer_than if isinstance(longer_than, int) else longer_than[pass_name]
        for dtype, dtype_name in DTYPES.items():
            for impl in impls:
                found = series(rows, pass_name, impl, dtype, floor)
                if not found:
                    continue
                low, high = min(found, key=lambda p: p[1]), max(found, key=lambda p: p[1])
                lines.append(
                    f"{pass_name:8} {dtype_name:8} {LABELS.get(impl, impl):6} "
                    f"{low[1]:5.1f}% (N = {low[0]}) to {high[1]:5.1f}% (N = {high[0]}), "
                    f"median {statistics.median(v for _, v in found):5.1f}%"
                )
    return lines


#: Each point of a sweep is one timing, not repeated: a gap under ``TIE``
#: points of the copy between Triton and CUDA counts as a tie.
TIE = 1.0


@dataclass(frozen=True)
class Score:
    """Triton against CUDA over the points of one pass (see :func:`head_to_head`)."""

    triton_ahead: int
    cuda_ahead: int
    ties: int
    cuda_lead: float  # CUDA's largest lead in points of the copy (0.0 where it never leads)

    @property
    def points(self) -> int:
        return self.triton_ahead + self.cuda_ahead + self.ties

    def sentence(self) -> str:
        """``"Triton ahead at 3, CUDA at 1, within 1 point at 6 of 10 points; ..."``."""
        text = (
            f"Triton ahead at {self.triton_ahead}, CUDA at {self.cuda_ahead}, "
            f"within {TIE:g} point at {self.ties} of {self.points} points"
        )
        if self.cuda_ahead:
            text += f"; CUDA ahead by {self.cuda_lead:.1f} points of the copy at most"
        return text


def head_to_head(
    rows: Iterable[dict], pass_name: str, longer_than: int = 0, tie: float = TIE
) -> Score:
    """Triton against CUDA at each (dtype, N) of one pass, gaps under ``tie`` counted as ties.

    Args:
        rows: the sweep's rows.
        pass_name: the pass to compare.
        longer_than: only rows longer than this.
        tie: the smallest gap, in points of the copy, that counts as a lead.
    """
    rows = list(rows)
    gaps = []  # Triton's % of the copy minus CUDA's
    for dtype in DTYPES:
        triton = dict(series(rows, pass_name, TRITON, dtype, longer_than))
        cuda = dict(series(rows, pass_name, CUDA, dtype, longer_than))
        gaps += [triton[n] - cuda[n] for n in sorted(triton.keys() & cuda.keys())]
    triton_ahead = sum(g >= tie for g in gaps)
    cuda_ahead = sum(g <= -tie for g in gaps)
    lead = max((-g for g in gaps if g <= -tie), default=0.0)
    return Score(triton_ahead, cuda_ahead, len(gaps) - triton_ahead - cuda_ahead, lead)


def plot_fractions(
    record: dict,
    passes: Sequence[str],
    impls: Sequence[str] = (TRITON, CUDA),
    limits: dict[str, int] | None = None,
    longer_than: dict[str, int] | None = None,
    columns: int | None = None,
):
    """One panel per pass: each implementation in % of the copy against N, both 16-bit types.

    Solid lines are bfloat16, dashed float16; a grey line marks 100% (the
    copy's speed) and, where ``limits`` gives one for the pass, a dotted
    vertical line the longest row one Triton program holds. The figure is
    white with dark text, legible on light and dark pages alike.

    Args:
        record: a sweep record.
        passes: the passes to plot, one panel each.
        impls: the implementations to plot.
        limits: ``{pass: N}`` to mark, e.g. ``sweeps.TRITON_BLOCK``.
        longer_than: ``{pass: N}``: plot only the row lengths above N.
        columns: panels per row of the figure (default: all in one row); fewer
            make a narrower figure of several rows, whose labels stay legible
            in a page's content column.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    rows = record["sweep"]["rows"]
    ns = record["sweep"]["ns"]
    longer_than = longer_than or {}
    cols = min(columns or len(passes), len(passes))
    nrows = -(-len(passes) // cols)
    fig, axes = plt.subplots(
        nrows,
        cols,
        figsize=(4.6 * cols + 0.6, 3.8 * nrows),
        layout="constrained",
        facecolor="white",
        squeeze=False,
    )
    for ax in axes.flat[len(passes) :]:
        ax.remove()  # the empty cells of the last row
    for ax, pass_name in zip(axes.flat, passes, strict=False):
        ax.set_facecolor("white")
        for impl in impls:
            for dtype, style in zip(DTYPES, ("-", "--"), strict=True):
                found = series(rows, pass_name, impl, dtype, longer_than.get(pass_name, 0))
                if found:
                    ax.plot(
                        *zip(*found, strict=True),
                        marker="o",
                        markersize=3,
                        linestyle=style,
                        color=COLOURS.get(impl),
                        label=f"{LABELS.get(impl, impl)}, {DTYPES[dtype]}",
                    )
        ax.axhline(100, color="grey", linewidth=0.8)
        if limits and pass_name in limits:
            ax.axvline(limits[pass_name], color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        shown = [n for n in ns if n > longer_than.get(pass_name, 0)]
        ax.set_xticks(shown, [str(n) for n in shown], rotation=45, color="black", fontsize=8)
        ax.tick_params(colors="black")
        ax.set_title(pass_name, color="black")
        ax.set_xlabel("N (row length)", color="black")
        ax.set_ylabel("% of a copy of the same bytes", color="black")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, facecolor="white", labelcolor="black")
    # Two lines: one panel is too narrow for the device, versions and date on one.
    device, rest = measured_on(record).split(", ", 1)
    fig.suptitle(f"Recorded on {device}\n{rest}", color="black", fontsize=10)
    return fig


def launch_knobs(config: str) -> str:
    """The words of a compiled variant's configuration that set its launch shape.

    ``BLOCK_N``, ``ROWS``, ``SEG`` and ``num_warps`` (as :mod:`guidekit.triton_targets`
    writes a configuration: ``K=v`` words).
    """
    return " ".join(w for w in config.split() if w.startswith(("BLOCK_N", "ROWS", "SEG", "num_w")))


def compile_lines(results: Sequence) -> list[str]:
    """How many compiles, as the product of all its factors, and how they fared.

    Args:
        results: :func:`guidekit.triton_targets.check`'s usages (``kernel``,
            ``config``, ``dtypes``, ``target``, ``ok``, ``status``).

    Returns:
        Two lines: the count with its factors (kernels, launch configurations,
        dtypes, targets), and the count of each status.
    """
    factors = {
        "kernel": {u.kernel for u in results},
        "launch": {launch_knobs(u.config) for u in results},
        "dtype": {u.dtypes for u in results},
        "target": {u.target for u in results},
    }
    product = 1
    for found in factors.values():
        product *= len(found)
    words = " x ".join(f"{len(v)} {k}{'s' * (len(v) != 1)}" for k, v in factors.items())
    count = (
        f"{len(results)} compiles = {words}"
        if product == len(results)
        else f"{len(results)} compiles of the {product} combinations of {words}"
    )
    statuses = {
        s: sum(u.status == s for u in results) for s in ("ok", "spill", "over budget", "error")
    }
    return [count, ", ".join(f"{v} {k}" for k, v in statuses.items())]
