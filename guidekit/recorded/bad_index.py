"""What reporting a bad index costs a writing operator, read from ``bad_index_*.json``.

``tools/record_bad_index.py`` times the template's key/value write
(``store_kv``) with five ways to handle a slot past the caches (see
``tools/bad_index.cu``), and torch's ``index_copy_`` beside them, per call, at
a few token counts; and calls each way once with one bad slot. These helpers
turn the record into the lines and the figure step 10.3 prints: every
comparison says "no measurable difference" where the two middle halves of the
rounds overlap.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The strategies in the order the page shows them, with what each does.
STRATEGIES = {
    "skip": "the token writes nothing; nobody is told",
    "flag_read": "error flag, read by the host after every launch (the template's)",
    "flag_later": "error flag, read where the host waits anyway",
    "pre_pass": "a checking kernel, read by the host, then the write",
    "trap": "__trap() in the kernel: the launch fails",
}
TORCH_ROW = "index_copy_ (torch)"


def timings(shape: Mapping) -> dict[str, Mapping]:
    """{strategy or torch's row: {median_us, q1_us, q3_us, samples_us}} of one shape."""
    return dict(shape["us_per_call"])


def versus(a: Mapping, b: Mapping, b_name: str) -> str:
    """How ``a`` compares with ``b`` per call, or "no measurable difference" where the
    middle halves of their rounds overlap."""
    if a["q1_us"] <= b["q3_us"] and b["q1_us"] <= a["q3_us"]:
        return f"no measurable difference from {b_name}"
    difference = a["median_us"] - b["median_us"]
    word = "more" if difference > 0 else "less"
    ratio = a["median_us"] / b["median_us"]
    return f"{abs(difference):.1f} us {word} than {b_name} ({ratio:.2f}x)"


def table_lines(record: Mapping) -> list[str]:
    """Microseconds per call: one line per strategy, one column per token count."""
    shapes = record["shapes"]
    counts = [f"{s['tokens']} token{'s' if s['tokens'] > 1 else ''}" for s in shapes]
    lines = ["us per call, median [middle half of the rounds]"]
    lines.append(f"{'':20}" + "".join(f"{c:>20}" for c in counts))
    for name in [*STRATEGIES, TORCH_ROW]:
        cells = []
        for shape in shapes:
            t = timings(shape)[name]
            cells.append(f"{t['median_us']:.1f} [{t['q1_us']:.1f}-{t['q3_us']:.1f}]")
        lines.append(f"{name:20}" + "".join(f"{c:>20}" for c in cells))
    return lines


#: The strategies whose kernel does skip's work on good slots and no more.
SKIPS_WORK = ("flag_later", "trap")


def cost_lines(record: Mapping) -> list[str]:
    """Per token count: each way of reporting against skipping, the pre-pass against the flag.

    A strategy whose kernel does skip's work on good slots and measures faster
    than skip gets a note: no saving, the limit of what the rounds resolve.
    """
    lines = []
    for shape in record["shapes"]:
        t = timings(shape)
        skip = t["skip"]
        lines.append(f"{shape['tokens']} token(s), {shape['row_size']} values a row:")
        for name in ("flag_read", "flag_later", "pre_pass", "trap"):
            line = f"  {name}: {versus(t[name], skip, 'skip')}"
            if name in SKIPS_WORK and t[name]["q3_us"] < skip["q1_us"]:
                line += ": noise, its kernel does skip's work"
            lines.append(line)
        lines.append(f"  pre_pass: {versus(t['pre_pass'], t['flag_read'], 'flag_read')}")
    return lines


def outcome_lines(record: Mapping) -> list[str]:
    """What each strategy did with one bad slot among good ones."""
    lines = []
    for name, outcome in record["bad_slot"].items():
        if name == "trap":
            said = ", ".join(
                f"{step}: {outcome.get(step, '-')}"
                for step in ("launch", "synchronize", "a later allocation")
            )
            lines.append(f"trap: {said}")
            continue
        reported = outcome["reported_during_call"]
        told = "the call reported " + (f"token {reported}" if reported >= 0 else "nothing")
        if outcome["read_from_flag_later"] is not None:
            later = outcome["read_from_flag_later"]
            told += f"; the flag, read later, holds token {later}" if later >= 0 else ""
        written, good = outcome["good_tokens_written"], outcome["good_tokens"]
        written = f"{written} of {good} good tokens written"
        lines.append(f"{name}: {told}; {written}")
    return lines


def figure(record: Mapping, title: str):
    """One panel per token count: each strategy's rounds, microseconds per call."""
    from .plots import timings_figure

    panels = {
        f"{shape['tokens']} token(s), us per call": {
            name: t["samples_us"] for name, t in timings(shape).items()
        }
        for shape in record["shapes"]
    }
    return timings_figure(panels, title)


def summary_lines(record: Mapping) -> list[str]:
    """Across the token counts: what telling the host during the call costs, and whether
    the ways that do not tell it are ever measurably slower than skipping."""
    told, slower = [], {name: [] for name in SKIPS_WORK}
    for shape in record["shapes"]:
        t = timings(shape)
        cheaper = min(("flag_read", "pre_pass"), key=lambda n: t[n]["median_us"])
        extra = t[cheaper]["median_us"] - t["skip"]["median_us"]
        told.append(f"{shape['tokens']}: {cheaper} {extra:+.1f} us")
        for name in slower:
            if t[name]["q1_us"] > t["skip"]["q3_us"]:
                slower[name].append(str(shape["tokens"]))
    lines = ["told during the call (the cheaper of flag_read and pre_pass) against skip, by "
             "token count: " + "; ".join(told)]  # fmt: skip
    for name, at in slower.items():
        if at:
            lines.append(f"{name}: measurably slower than skip at {', '.join(at)} token(s)")
        else:
            lines.append(f"{name}: not measurably slower than skip at any token count")
    return lines


def memcheck_summary(project: Mapping) -> str:
    """``"83 passed, 2 deselected; memcheck 0 errors"``: a template record's project run
    under memcheck (``tools/record_template_gpu.py run --memcheck``), every count of
    pytest's summary, and the run's exit status where it is not 0."""
    run = project["memcheck"]
    tests = run["tests"].rsplit(" in ", 1)[0]  # "83 passed, 2 deselected"
    errors = run["errors"].removeprefix("ERROR SUMMARY: ")  # "0 errors"
    failed = f", exit status {run['exit_code']}" if run.get("exit_code", 0) != 0 else ""
    return f"{tests}; memcheck {errors}{failed}"


def memcheck_lines(records: Mapping[str, Mapping]) -> list[str]:
    """The projects that ran their CUDA tests under compute-sanitizer's memcheck, one line each.

    Args:
        records: {file name: a ``template_*_cuda_*.json`` record}.
    """
    return [
        f"{name}: {project['project']}: {memcheck_summary(project)}"
        for name, record in records.items()
        for project in record["projects"]
        if "memcheck" in project
    ]
