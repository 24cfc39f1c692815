"""What a page calls to show a record: read it, pick rows, print a table, draw one figure.

Every reader here prints the record's device line (or its date and device
lines) before it returns the data, and names the sources it measured that
have changed since, so a page never shows a number without saying which GPU
and which day measured it. The rest is generic: rows are dicts (a sweep's
``pass``, ``impl``, ``dtype``, ``n``, ``vs_copy``, ...), picked with
:func:`select`, printed with :func:`table` or :func:`ranges` and drawn with
:func:`lines_figure` or :func:`bars_figure`; a page computes the sentence
it states from the same rows.
"""

from __future__ import annotations

import operator
import re
import statistics
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from . import describe, load, recorded_dir, resolve, sources

#: The widest line a page prints: wider ones would scroll sideways at 1280 px.
WIDTH = 88
#: One colour per implementation, the same on every figure.
COLORS = {
    "opguide": "C0",
    "opguide triton": "C1",
    "F.rms_norm": "C2",
    "liger": "C4",
    "liger (fused)": "C4",
    "quack": "C5",
    "quack (residual)": "C5",
}


def say(line: str) -> None:
    """Prints a line, wrapped at :data:`WIDTH` with the rest indented."""
    print(textwrap.fill(line, WIDTH, subsequent_indent="    ") if len(line) > WIDTH else line)


def show(lines: Iterable[str]) -> None:
    """Prints each line with :func:`say`."""
    for line in lines:
        say(line)


def say_stale(name: str, directory: Path | None = None) -> None:
    """Prints, when the sources a record measured have changed since, which ones.

    Args:
        name: the record's file name in ``docs/recorded/``.
        directory: another folder to read it from (tests).
    """
    note = sources.stale_note((directory or recorded_dir()) / resolve(name, directory))
    if note:
        say(note)


def recorded(name: str, directory: Path | None = None) -> dict:
    """A recorded JSON result; prints where and when it was measured.

    Args:
        name: the file name in ``docs/recorded/``.
        directory: another folder to read it from (tests).
    """
    name = resolve(name, directory)
    data = load(name, directory)
    say(describe(name, data))
    say_stale(name, directory)
    return data


def recorded_text(name: str, directory: Path | None = None) -> str:
    """A tool's recorded text output; prints its date and its first device line.

    ``tools/gpu_records.sh`` starts each text record with ``# <GPU>, ...,
    <date>`` and the tool prints a line that starts with ``NVIDIA``.
    """
    name = resolve(name, directory)
    text = ((directory or recorded_dir()) / name).read_text()
    date = re.search(r"\b(\d{4}-\d\d-\d\d)\s*$", text.split("\n", 1)[0])
    device = next((line for line in text.splitlines() if line.startswith("NVIDIA")), "no device")
    say(f"{name}: {device}, " + (f"recorded {date[1]}" if date else "no date recorded"))
    say_stale(name, directory)
    return text


# The lines of tool_rows: a CUDA tool's variant, a Triton launch, a ``name value`` field.
_VARIANT_LINE = re.compile(r"  (.+?)\s+cluster\s+(\d+) x\s+\d+:.*?(\d\.\d\d) of copy")
_TRITON_LINE = re.compile(r"\s+(best\s+)?\d+x(\d+) (\w+) (.+?) (SEG .+?)\s+[\d.]+ us\s+([\d.]+)%")
_FIELD = re.compile(r"([a-z][A-Za-z_/]*[A-Za-z])\s+(\d+)(?![\d.x])")


def tool_rows(text: str) -> list[dict]:
    """The timed lines of a ``tools/sweep_*`` program's output, one dict each.

    A CUDA tool prints a shape's head (``bf16 M=4096 N=16384: library ...
    0.97 of copy``), then one line per variant (``  name  cluster 2 x 66:
    ... 0.81 of copy``) or per launch (``  bf16 32768x4096 vecs/thr 4 ...
    99.4%``), under a setting's line (``OPGUIDE_KEEP_PACKED=1, ...``);
    ``tools/sweep_triton.py split`` prints ``[best] MxN pass variant SEG ...
    us P%``. Each dict has ``pct`` (% of the copy), ``dtype``, ``n``,
    ``shape``, ``section`` (the setting), ``variant`` where the line names
    one, ``best`` (a Triton line that is a variant's best launch), and every
    ``name value`` field of the line (``regs``, ``vecs/thr``, ``cluster``, ...).
    """
    rows, dtype, n, section = [], None, None, ""
    for line in text.splitlines():
        if line.startswith("OPGUIDE_"):
            section = line.split(",")[0]
        if head := re.match(r"(\w+) M=\d+ N=(\d+): library .*?(\d\.\d\d) of copy", line):
            dtype, n = head[1], int(head[2])
            rows.append({"dtype": dtype, "n": n, "variant": "library", "pct": 100 * float(head[3])})
        elif v := re.match(_VARIANT_LINE, line):
            rows.append({"dtype": dtype, "n": n, "variant": v[1], "cluster": int(v[2]),
                         "pct": 100 * float(v[3])})  # fmt: skip
        elif t := re.match(_TRITON_LINE, line):
            rows.append({"n": int(t[2]), "pass": t[3], "variant": t[4], "launch": t[5].strip(),
                         "best": bool(t[1]), "pct": float(t[6])})  # fmt: skip
        elif (p := re.search(r"(\d+\.\d)%", line)) and line.startswith("  "):
            dtype_, shape = line.split()[:2]
            fields = {k: int(v) for k, v in re.findall(_FIELD, line)}
            rows.append({"dtype": dtype_, "shape": shape, "n": int(shape.split("x")[-1]),
                         "section": section, "pct": float(p[1]), **fields})  # fmt: skip
    return rows


def select(rows: Iterable[dict], **where) -> list[dict]:
    """The rows whose fields equal ``where``'s values; a tuple, list or set value means
    one of them, a callable one a test of the field (``n=lambda n: n > 8192``)."""

    def matches(value, want) -> bool:
        if callable(want):
            return want(value)
        return value in want if isinstance(want, tuple | list | set) else value == want

    return [r for r in rows if all(k in r and matches(r[k], w) for k, w in where.items())]


def best(rows: Iterable[dict], **where) -> dict | None:
    """The row of :func:`select` with the highest ``pct`` (None if none matches)."""
    return max(select(rows, **where), key=lambda r: r["pct"], default=None)


def percent(row: dict) -> str:
    """A sweep row's speed as % of the copy of the same bytes."""
    return f"{100 * row['vs_copy']:.1f}%"


def table(
    rows: Iterable[dict], down: Sequence[str], across: str, cell: Callable[[dict], str] = percent
) -> list[str]:
    """Rows as a table: one line per value of the ``down`` fields, one column per ``across``.

    Args:
        rows: the rows to show.
        down: the fields that name a line (``("pass", "n")``).
        across: the field whose values are the columns (``"impl"``).
        cell: a row -> its cell's text (default :func:`percent`); ``-`` where none.
    """
    cells: dict = {}
    for r in rows:
        cells.setdefault(tuple(r[k] for k in down), {})[r[across]] = cell(r)
    columns = list(dict.fromkeys(c for found in cells.values() for c in found))
    # Each column as wide as its widest text, the name or a cell.
    texts = [list(map(str, [*down, *columns]))]
    texts += [
        [*map(str, key), *(found.get(c, "-") for c in columns)] for key, found in cells.items()
    ]
    widths = [max(len(t[i]) for t in texts) for i in range(len(texts[0]))]
    k, lines = len(down), []
    for line in texts:
        left = " ".join(f"{t:{w}}" for t, w in zip(line[:k], widths, strict=False))
        right = "".join(f"  {t:>{w}}" for t, w in zip(line[k:], widths[k:], strict=True))
        lines.append((left + right).rstrip())
    return lines


def ranges(rows: Iterable[dict], by: Sequence[str], value: str = "vs_copy") -> list[str]:
    """Per group of ``by``'s fields: the lowest, median and highest ``value``, in %, with the N
    of the two ends (``value`` ``"vs_copy"`` is a fraction, ``"pct"`` already in %)."""
    scale = 100 if value == "vs_copy" else 1
    groups: dict = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in by), []).append((scale * r[value], r["n"]))
    lines = []
    for key, found in groups.items():
        (low, at_low), (high, at_high) = min(found), max(found)
        middle = statistics.median(v for v, _ in found)
        lines.append(
            f"{' '.join(map(str, key))}: {low:.1f}% (N = {at_low}) to {high:.1f}% "
            f"(N = {at_high}), median {middle:.1f}%"
        )
    return lines


def versus(rows: Iterable[dict], ours: str, theirs: str, tie: float = 1.0) -> str:
    """``ours`` against ``theirs`` at each point both timed (same pass, dtype and N).

    Args:
        rows: sweep rows.
        ours, theirs: two implementations.
        tie: a gap under this many points of the copy counts as a tie (a point
            of a sweep is one timing, with no spread recorded).

    Returns:
        ``"ours ahead at 3, theirs at 1, within 1 point at 6 of 10 points"``,
        with ``theirs``' largest lead where it leads.
    """
    at = {(r["pass"], r["dtype"], r["n"], r["impl"]): r["vs_copy"] for r in rows}
    gaps = [
        100 * (v - at[(*k[:3], theirs)])
        for k, v in at.items()
        if k[3] == ours and (*k[:3], theirs) in at
    ]
    ahead, behind = sum(g >= tie for g in gaps), sum(g <= -tie for g in gaps)
    text = (
        f"{ours} ahead at {ahead}, {theirs} at {behind}, within {tie:g} point at "
        f"{len(gaps) - ahead - behind} of {len(gaps)} points"
    )
    if behind:
        text += f"; {theirs} ahead by {-min(gaps):.1f} points of the copy at most"
    return text


def one_gpu(*records: dict) -> bool:
    """Whether the records ran on one kind of GPU; if not, says so (a page then compares
    nothing: percentages of two GPUs' copies are not one scale)."""
    devices = list(dict.fromkeys(r["device"] for r in records))
    if len(devices) > 1:
        say(f"measured on different GPUs ({', '.join(devices)}): not compared here")
    return len(devices) == 1


def fixed_changes(before: dict, after: dict, pass_name: str, impls: Sequence[str]) -> list[dict]:
    """Two fixed-shape runs point by point, in % of their 1 GiB copies (``of_copy``).

    Returns:
        One row per point both measured, for :func:`table`: ``impl``,
        ``shape`` (``"dtype MxN"``), ``before`` and ``after`` (fractions),
        ``points`` (100 * (after - before)). No rows when the two ran on
        different GPUs (see :func:`one_gpu`).
    """
    if not one_gpu(before, after):
        return []
    old = {(r["impl"], r["dtype"], r["m"], r["n"]): r["of_copy"] for r in before[pass_name]}
    return [
        {
            "pass": pass_name,
            "impl": r["impl"],
            "shape": f"{r['dtype']} {r['m']}x{r['n']}",
            "before": old[k],
            "after": r["of_copy"],
            "points": 100 * (r["of_copy"] - old[k]),
        }
        for r in after[pass_name]
        if r["impl"] in impls and (k := (r["impl"], r["dtype"], r["m"], r["n"])) in old
    ]


def rerun_noise() -> float:
    """The most a second run moved a point of opguide's two kernel families, in points of
    the copy: ``sweep_<gpu>.json`` against ``sweep_opguide_<gpu>.json`` (their device lines
    printed). A change no larger is no measurable difference."""
    point = operator.itemgetter("impl", "pass", "dtype", "n")
    first = {point(r): r["vs_copy"] for r in recorded("sweep_<gpu>.json")["sweep"]["rows"]}
    again = recorded("sweep_opguide_<gpu>.json")["sweep"]["rows"]
    ours = select(again, impl=("opguide", "opguide triton"))
    return max(abs(100 * (r["vs_copy"] - first[point(r)])) for r in ours if point(r) in first)


def ranking(gains: Mapping[str, Sequence[float]], noise: float) -> list[str]:
    """Changes ranked by their median gain (points of the copy), and which lose measurably.

    Args:
        gains: {change: [points gained at each point measured]}, at least one.
        noise: the most a second run moves a point (:func:`rerun_noise`); a
            loss no larger is no measurable loss.
    """
    order = sorted(gains, key=lambda k: statistics.median(gains[k]), reverse=True)
    lines = [
        f"{k:26} median {statistics.median(gains[k]):+5.1f}, {min(gains[k]):+5.1f} to "
        f"{max(gains[k]):+5.1f} ({len(gains[k])} points)"
        for k in order
    ]
    lose = [k for k in order if min(gains[k]) < -noise]
    lines.append(
        f"Lose at some point by more than a second run moves one ({noise:.2f} points): "
        f"{', '.join(lose) or 'none'}."
    )
    return lines


def _figure(rows: int, cols: int, size: tuple[float, float]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=size, layout="constrained", squeeze=False)
    fig.set_facecolor("white")
    for ax in axes.flat:
        ax.set_facecolor("white")
        ax.grid(alpha=0.3)
    return fig, axes


def lines_figure(
    rows: Sequence[dict],
    title: str,
    series: Sequence[str] = ("impl",),
    marks: Mapping[str, Mapping[str, float]] | None = None,
):
    """One panel per pass, one line per value of the ``series`` fields: % of the copy against N.

    Args:
        rows: a sweep's rows to draw.
        title: the figure's title (say where and when it was recorded).
        series: the fields that name a line; a float16 line is dashed.
        marks: ``{"target": {pass: y}, "limit": {pass: N}}``: a dashed
            horizontal or dotted vertical grey line per panel, under that name.

    Returns:
        The matplotlib figure (drawn with pyplot, so sphinx-gallery shows it).
    """
    names = list(dict.fromkeys(r["pass"] for r in rows))
    cols = min(2, len(names))
    fig, axes = _figure(-(-len(names) // cols), cols, (5.8 * cols, 4.2 * -(-len(names) // cols)))
    for ax in axes.flat[len(names) :]:
        ax.remove()
    legend: dict = {}
    for ax, name in zip(axes.flat, names, strict=False):
        found = select(rows, **{"pass": name})
        for key in dict.fromkeys(tuple(r[s] for s in series) for r in found):
            points = sorted(
                (r["n"], 100 * r["vs_copy"]) for r in found if tuple(r[s] for s in series) == key
            )
            (line,) = ax.plot(
                *zip(*points, strict=True),
                marker="o",
                markersize=3,
                linestyle="--" if "fp16" in key else "-",
                color=COLORS.get(key[0]),
                label=", ".join(map(str, key)),
            )
            legend.setdefault(line.get_label(), line)
        for mark, at in (marks or {}).items():
            if name in at:
                draw, style = (ax.axhline, "--") if mark == "target" else (ax.axvline, ":")
                legend.setdefault(mark, draw(at[name], color="grey", label=mark, linestyle=style))
        ns = sorted({r["n"] for r in found})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns], rotation=45, fontsize=8)
        ax.minorticks_off()
        ax.set(title=str(name), xlabel="N (row length)", ylabel="% of the same-size copy")
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=4, fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def bars_figure(panels: Mapping[str, Mapping[str, Sequence[float]]], title: str):
    """Per panel, one bar per name: the median of its values, a whisker from the lowest to
    the highest and a dot for each where there are several.

    Args:
        panels: {panel title (its unit in it): {name: [values]}}.
        title: the figure's title.
    """
    fig, axes = _figure(len(panels), 1, (9, sum(0.5 * len(p) + 1.2 for p in panels.values())))
    for ax, (name, runs) in zip(axes.flat, panels.items(), strict=True):
        keys = list(runs)
        mid = [statistics.median(runs[k]) for k in keys]
        low = [m - min(runs[k]) for m, k in zip(mid, keys, strict=True)]
        high = [max(runs[k]) - m for m, k in zip(mid, keys, strict=True)]
        colors = [f"C{i}" for i in range(len(keys))]
        ax.barh(range(len(keys)), mid, xerr=[low, high], capsize=3, alpha=0.5, color=colors)
        for i, k in enumerate(keys):
            if len(runs[k]) > 1:
                ax.plot(runs[k], [i] * len(runs[k]), "o", color="black", markersize=3)
        ax.set_yticks(range(len(keys)), keys)
        ax.invert_yaxis()
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_title(name, fontsize=10)
    fig.suptitle(title)
    return fig
