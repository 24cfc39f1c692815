"""Step 20's GPU record read: a table, sentences computed from it, and a plot.

``tools/record_model_step.py`` writes ``docs/recorded/model_step_<gpu>.json``:
per mode (eager, compiled) and step (training step, inference forward), each
variant's times in interleaved rounds, with their median and quartiles.

* :func:`record_table`: the results by group
  (:func:`guidekit.model_swap.record_rows`) as lines of text;
* :func:`record_winners`: the fastest variant of each group, and whether the
  record can tell it from the next;
* :func:`record_findings`: opguide's operator, the fusion pass and the
  kernelized model against the model's own norm, in sentences;
* :func:`plot_record`: each variant's median over the model's own.
"""

from __future__ import annotations

from guidekit.model_step import compare, spread
from guidekit.model_swap import OWN, measured_support, record_rows

OPGUIDE = "opguide.rms_norm"
FUSION_PASS = "fusion pass"
#: The prefix of the rows of a model swapped by ``kernels.kernelize`` with the
#: support its layers declare (:mod:`guidekit.model_swap`).
KERNELIZED = "kernelized "


def record_table(record: dict) -> list[str]:
    """The record as lines of text: each group's variants, fastest first, in ms.

    Returns:
        Lines of at most 80 columns. Per group a heading, then per variant its
        median, quartiles and change from the model's own norm.
    """
    lines = []
    groups = record_rows(record)
    # Every name whole: the longest sets the column (the other columns take 36).
    width = max([34] + [len(r["variant"]) for rows in groups.values() for r in rows])
    for (mode, step), rows in groups.items():
        lines.append(f"{mode} {step}: ms, median (quartiles), change from the model's own")
        for r in sorted(rows, key=lambda r: r["median"]):
            quartiles = f"({r['q1']:.2f}-{r['q3']:.2f})"
            change = "" if r["ratio"] is None else f"{(r['ratio'] - 1) * 100:+6.1f}%"
            lines.append(f"  {r['variant']:{width}} {r['median']:7.2f} {quartiles:13} {change}")
    return lines


def record_winners(record: dict) -> list[str]:
    """Per group of the record, the fastest variant, and whether the record tells it from the next.

    Args:
        record: a ``model_step_<gpu>.json`` read with ``json.loads``.

    Returns:
        One sentence per ``(mode, step)``: the fastest variant by the median,
        then the next, where their quartiles do not overlap; where they do,
        "no measurable difference" between the two, no winner named. A group
        of one variant names it alone.
    """
    said = []
    for (mode, step), rows in record_rows(record).items():
        first, *others = sorted(rows, key=lambda r: r["median"])
        change, overlap = compare(others[0], first) if others else (0.0, True)
        group = f"{mode.capitalize()} {step}"
        if others and f"{change:.1f}" == "0.0":
            # Equal medians to the printed digit: a tie, whatever the order.
            line = (
                f"{group}: {first['variant']} and {others[0]['variant']} tie, "
                f"{first['median']:.2f} and {others[0]['median']:.2f} ms by the medians, 0.0% apart"
            )
        elif others and overlap:
            # Quartiles that overlap: the record names no winner.
            line = (
                f"{group}: no measurable difference between the two fastest, {first['variant']}, "
                f"{first['median']:.2f} ms by the median, and {others[0]['variant']}, "
                f"{change:.1f}% more time"
            )
        else:
            line = f"{group}: {first['variant']} is fastest, {first['median']:.2f} ms"
            if others:
                line += f"; next {others[0]['variant']}, {change:.1f}% more time: "
                line += "their quartiles do not overlap"
        said.append(line + ".")
    return said


def _backend(variant: str) -> str:
    """``"opguide.rms_norm (cpp)"`` -> ``"cpp"``: the last parenthesis, or the name."""
    inside = variant.rpartition("(")[2].rstrip(")")
    return inside if "(" in variant else variant


def record_findings(record: dict) -> list[str]:
    """What a record says, as sentences computed from it.

    The sentences cover: opguide's operator against the model's own norm in
    the eager training step (the fastest backend, then each); the plain
    operator under ``torch.compile``, training and inference; the model's own
    norm with the fusion pass, against the same; the variants not measured.

    Args:
        record: a ``model_step_<gpu>.json`` read with ``json.loads``.

    Returns:
        The sentences, in that order; a comparison whose rows are absent
        from the record is left out.
    """
    groups = record_rows(record)
    said = []

    def pick(mode, step, prefix):
        return [r for r in groups.get((mode, step), []) if r["variant"].startswith(prefix)]

    def own(mode, step):
        return next((r for r in groups.get((mode, step), []) if r["variant"] == OWN), None)

    def each(rows, base):
        return ", ".join(
            f"{_backend(r['variant'])} {r['median']:.2f} ms ({compare(r, base)[0]:+.1f}%)"
            for r in rows
        )

    base, ops = own("eager", "training step"), pick("eager", "training step", OPGUIDE)
    if base and ops:
        best = min(ops, key=lambda r: r["median"])
        change, overlap = compare(best, base)
        less = "less" if change < 0 else "more"
        said.append(
            f"Eager, the training step with {best['variant']} takes {best['median']:.2f} ms "
            f"against {base['median']:.2f} ms with the model's own norm: "
            f"{base['median'] / best['median']:.2f}x as fast, {abs(change):.1f}% {less} "
            f"time; {spread(overlap)}. Each backend: {each(ops, base)}."
        )
    for step in ("training step", "inference forward"):
        base, ops = own("compiled", step), pick("compiled", step, OPGUIDE)
        if not (base and ops):
            continue
        best = min(ops, key=lambda r: r["median"])
        change, overlap = compare(best, base)
        # A gap for the fusion pass to win back only where the operator is measurably slower.
        gap = change > 0 and not overlap
        if overlap:
            verdict = (
                "no measurable difference from the model's own norm "
                f"({change:+.1f}% by the medians; their quartiles overlap)"
            )
        elif change > 0:
            verdict = (
                f"{change:.1f}% slower than with the model's own norm ({spread(overlap)}). "
                "Inductor can fuse the model's own norm with the add in front of it; "
                "the operator, opaque to Inductor, takes no part in that fusion, so "
                "the sum goes to memory and is read back"
            )
        else:
            verdict = (
                f"{-change:.1f}% faster than with the model's own norm "
                f"({spread(overlap)}), although Inductor fuses nothing into the operator"
            )
        said.append(
            f"Compiled, the {step} with {best['variant']} takes "
            f"{best['median']:.2f} ms: {verdict}. Each backend: {each(ops, base)}."
        )
        fused = pick("compiled", step, OWN + " + " + FUSION_PASS)
        if not fused:
            continue
        win = min(fused, key=lambda r: r["median"])
        change, overlap = compare(win, base)
        if overlap:
            verdict = "no measurable difference"
        elif change <= 0 and gap:
            verdict = "the pass wins back the operator's gap"
        elif change <= 0:
            verdict = "the step with the pass is faster than with the model's own norm"
        elif gap and win["median"] < best["median"]:
            verdict = "the pass wins back part of the operator's gap"
        elif gap:
            verdict = "the pass does not win back the operator's gap"
        else:
            verdict = "the step with the pass is slower than with the model's own norm"
        said.append(
            f"Compiled with the fusion pass ({_backend(win['variant'])}), the {step} "
            f"takes {win['median']:.2f} ms, {change:+.1f}% from the model's own norm "
            f"without it ({spread(overlap)}): {verdict}. "
            f"Each backend of the pass: {each(fused, base)}."
        )
    said += _kernelized_findings(record, groups)
    for name, why in record.get("missing", {}).items():
        said.append(f"Not measured on that machine: {name} ({why}).")
    for f in record.get("failed", []):
        said.append(f"Failed: {f['mode']} {f['step']} with {f['variant']} ({f['error']}).")
    return said


def _kernelized_findings(record: dict, groups: dict) -> list[str]:
    """The kernelized rows of a record against the model's own norm, or that there are none."""
    rows = [
        (mode, step, r)
        for (mode, step), group in groups.items()
        for r in group
        if r["variant"].startswith(KERNELIZED)
    ]
    if not rows:
        return [
            "This record holds no row of the kernelized model (kernels.kernelize with "
            "the support its layers declare): not recorded."
        ]
    about = record.get("kernelized", {})
    forwards = {
        (f["mode"], f["step"], f["variant"]): f["forward"] for f in about.get("forwards", [])
    }
    said = []
    for mode, step, r in rows:
        base = next((o for o in groups[mode, step] if o["variant"] == OWN), None)
        if base is None:
            continue
        change, overlap = compare(r, base)
        runs = forwards.get((mode, step, r["variant"]), "an unrecorded forward")
        sentence = (
            f"{mode.capitalize()} {step}, {r['variant']}: its norms run {runs}; "
            f"{r['median']:.2f} ms, {change:+.1f}% from the model's own norm "
            f"({'no measurable difference' if overlap else 'their quartiles do not overlap'})."
        )
        if (mode, step, r["variant"]) in forwards and "Opguide" not in runs and not overlap:
            # The model's own norm code in both rows, yet apart: say so.
            sentence += (
                " Its norms run the model's own code, as the model's own row does, so the "
                "norm does not explain this difference; the record does not say what does."
            )
        said.append(sentence)
    if about.get("from"):

        def flags(support: dict) -> str:
            return "; ".join(
                f"{layer}: {', '.join(f for f, on in s.items() if on is True) or 'no flag'}"
                for layer, s in support.items()
            )

        used, own = flags(about.get("support", {})), flags(measured_support(record))
        same = "the same flags" if used == own else f"other flags ({own})"
        command = record.get("command", "")
        # Without --support-from the tool reads the record that --out replaces.
        given = "--support-from" in command or not command
        source = f"--support-from {about['from']}" if given else f"read from {about['from']}"
        said.append(
            f"The kernelized layers declared the modes that this run was given "
            f"({source}): {used}. This record's own numbers give {same}."
        )
    elif "from" in about:
        said.append(
            "This run was given no support record: the kernelized layers "
            "declared no flag, so only eager inference runs them."
        )
    return said


def _colour(variant: str) -> str:
    """Blue for the fusion pass, green for a kernelized model, red for opguide's operator."""
    if FUSION_PASS in variant:
        return "#1f77b4"
    if variant.startswith(KERNELIZED):
        return "#2ca02c"
    return "#d62728" if variant.startswith(OPGUIDE) else "#7f7f7f"


def plot_record(record: dict):
    """Each variant's median over the model's own norm's, per mode and step.

    One panel per ``(mode, step)``; a point per variant, its error bar the
    quartiles (also over the model's own median), its change in percent
    beside it; a line at 1. The figure is
    white with dark text, legible on light and dark pages alike.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    groups = {k: v for k, v in record_rows(record).items() if v[0]["ratio"] is not None}
    cols = 2
    nrows = max(1, -(-len(groups) // cols))
    tall = max(len(rows) for rows in groups.values()) if groups else 1
    size = (10, nrows * (0.9 + 0.32 * tall))
    fig, axes = plt.subplots(nrows, cols, figsize=size, layout="constrained", squeeze=False)
    fig.set_facecolor("white")
    for ax, ((mode, step), rows) in zip(axes.flat, groups.items(), strict=False):
        ax.set_facecolor("white")
        ys = range(len(rows))
        for y, r in zip(ys, rows, strict=True):
            below, above = r["ratio"] - r["ratio_q1"], r["ratio_q3"] - r["ratio"]
            colour = _colour(r["variant"])
            ax.errorbar(r["ratio"], y, xerr=[[below], [above]], fmt="o", color=colour, capsize=3)
            change = f"{(r['ratio'] - 1) * 100:+.1f}%"
            ax.annotate(change, (r["ratio_q3"], y), xytext=(6, 0), textcoords="offset points",
                        va="center", fontsize=8, color="black")  # fmt: skip
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(list(ys), [r["variant"] for r in rows], fontsize=8)
        low, high = min(r["ratio_q1"] for r in rows), max(r["ratio_q3"] for r in rows)
        pad = max(0.01, (high - low) * 0.12)
        ax.set_xlim(low - pad, high + 2.5 * pad)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_title(f"{mode}, {step}", fontsize=10)
        ax.set_xlabel("median time / model's own median", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"{record['device']}, {record['dtype']}, recorded {record['date']}: "
        "left of 1 is faster; error bars are the quartiles",
        fontsize=10,
    )
    return fig
