"""What the step 11 pages call in one line: read a recorded file and say where it was measured,
print the lines the other modules compute, and report the measurements a page makes live.

Every reader here prints the recorded file's device line (or lines) before it
returns the data, so a page never shows a number without saying which GPU and
which day measured it.
"""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

from guidekit.benchmark.passes import SAME_SIZE_COPY

from . import describe, fixed_shapes, listed, load, recorded_dir, sources, sweeps, tool_outputs

#: The widest line a page prints: wider ones would scroll sideways at 1280 px.
WIDTH = 88


def say(line: str) -> None:
    """Prints a line, wrapped at :data:`WIDTH` with the rest indented."""
    print(textwrap.fill(line, WIDTH, subsequent_indent="    ") if len(line) > WIDTH else line)


def say_stale(name: str, directory: Path | None = None) -> None:
    """Prints, when the sources a record measured have changed since, which ones.

    Every reader here calls it after the record's device line; a page that
    reads a record another way calls it beside what it prints.

    Args:
        name: the record's file name in ``docs/recorded/``.
        directory: another folder to read it from (tests).
    """
    note = sources.stale_note((directory or recorded_dir()) / name)
    if note:
        say(note)


def recorded(name: str, directory: Path | None = None) -> dict:
    """A recorded JSON result; prints where and when it was measured.

    Args:
        name: the file name in ``docs/recorded/``.
        directory: another folder to read it from (tests).
    """
    data = load(name, directory)
    say(describe(name, data))
    say_stale(name, directory)
    return data


def recorded_text(name: str, device_lines: int | None = None, directory=None) -> str:
    """A tool's recorded output (``tools/sweep_*``); prints its first ``device_lines``
    device lines (all of them by default)."""
    text = ((directory or recorded_dir()) / name).read_text()
    say_when(name, text)
    for line in tool_outputs.device_lines(text)[:device_lines]:
        say(f"{name}: {line}")
    say_stale(name, directory)
    return text


def say_when(name: str, text: str) -> None:
    """Prints the date a text record was made, or that it names none."""
    when = tool_outputs.recorded_when(text)
    say(f"{name}: recorded {when}" if when else f"{name}: the record names no date")


def tool_sweep(name: str, directory: Path | None = None) -> list[dict]:
    """The data lines of a tool's recorded sweep (:func:`.tool_outputs.read_sweep`);
    prints its device line."""
    text = ((directory or recorded_dir()) / name).read_text()
    say_when(name, text)
    header, lines = tool_outputs.read_sweep(text)
    for line in header:
        say(f"{name}: {line}")
    say_stale(name, directory)
    return lines


def show(lines: Iterable[str]) -> None:
    """Prints lines that :mod:`guidekit.recorded` computed, each wrapped by :func:`say`."""
    for line in lines:
        say(line)


def compare(
    pass_name: str, impls: Sequence[str], before: dict, after: dict, labels: tuple[str, str]
) -> list[fixed_shapes.Change]:
    """Prints two fixed-shape runs side by side (% of the copy); returns the changes.

    Args:
        pass_name: ``"forward"``, ``"backward"`` or ``"fused"``.
        impls: the implementations to compare.
        before, after: the two result files.
        labels: the two columns' names.
    """
    changes = fixed_shapes.compare(pass_name, impls, before, after)
    show(fixed_shapes.compare_lines(pass_name, changes, labels))
    return changes


def rerun_noise() -> float:
    """How far a second run of the library's kernels moved a point in step 11's two sweeps.

    Reads ``sweep_h100.json`` and ``sweep_opguide_h100.json`` (printing their
    device lines) and returns :func:`.sweeps.rerun_noise` of the two, in
    points of the copy: steps 11.3 and 11.4 take it as the spread of their
    own runs.
    """
    rerun = sweeps.rerun_changes(
        recorded("sweep_h100.json")["sweep"]["rows"],
        recorded("sweep_opguide_h100.json")["sweep"]["rows"],
    )
    return sweeps.rerun_noise(rerun)


def sweep_rows(sweep_file: dict, directory: Path | None = None) -> list[dict]:
    """The sweep's rows, with each missing peer's rows from its own recorded run.

    A peer that did not import in the sweep's process may have been recorded
    alone (``sweep_<peer>_h100.json``, next to opguide's CUDA kernel). This
    prints which peers were missing, the command of each own run, and how the
    CUDA kernel fares against the peer in that run's processes.
    """
    directory = directory or recorded_dir()
    sweep = sweep_file["sweep"]
    rows = list(sweep["rows"])
    for name, why in sweep["peers_missing"].items():
        say(f"did not import when recorded: {name} ({why})")
        if not (directory / f"sweep_{name}_h100.json").exists():
            continue
        own = recorded(f"sweep_{name}_h100.json", directory)
        say(f"  {own['command']}")
        rows += [r for r in own["sweep"]["rows"] if r["impl"] == name]
        ahead, points, lost = sweeps.head_to_head(own["sweep"]["rows"], name)
        print(f"  there, opguide's CUDA kernel at least as fast as {name} at {ahead} of {points}")
        say(f"  slower at: {listed(lost)}")
    return rows


def cpu_lines(cpu: dict) -> list[str]:
    """The table of :func:`guidekit.benchmark.run_cpu_kernel`'s result and its verdict."""
    lines = [
        f"  {r['impl']:28} {r['seconds'] * 1e3:7.2f} ms {r['GBps']:6.1f} GB/s "
        f"{r['vs_copy']:5.2f}x copy_"
        for r in cpu["rows"]
    ]
    mine = next(r["vs_copy"] for r in cpu["rows"] if r["impl"] == "opguide (C++ kernel)")
    target = cpu["target_vs_copy"]
    verdict = "met" if mine <= target else "missed"
    lines.append(
        f"On {cpu['threads']} thread(s) the operator takes {mine:.2f}x copy_'s time: "
        f"the target of at most {target}x is {verdict}."
    )
    lines.append(floor_line(cpu["rows"]))
    f_rms = next(r["vs_copy"] for r in cpu["rows"] if r["impl"] == "F.rms_norm")
    if f_rms > 2 * mine:
        ops = f_rms_norm_cpu_operators()
        lines.append(
            f"Surprising: F.rms_norm takes {f_rms / mine:.1f}x the operator's time. On the CPU it "
            f"goes through {len(ops)} ATen operators ({', '.join(ops)}), not one kernel."
        )
    return lines


def floor_line(rows: Sequence[dict]) -> str:
    """Whether ``copy_`` is the floor of :func:`cpu_lines`' table: no other row takes less time
    (as printed, to two decimals).

    Each row that does reads and writes at least the bytes ``copy_`` moves, so
    where one is faster, ``copy_`` does not run at the machine's memory
    bandwidth.
    """
    faster = [
        r["impl"] for r in rows if not r["impl"].startswith("copy_") and round(r["vs_copy"], 2) < 1
    ]
    if not faster:
        return "No row takes less time than copy_: here it is the floor."
    return (
        f"copy_ is no floor on this machine: {listed(faster)} "
        f"{'takes' if len(faster) == 1 else 'take'} less time than it with at least its "
        "bytes to move, so ATen's copy_ does not run at this machine's memory bandwidth."
    )


def f_rms_norm_cpu_operators() -> list[str]:
    """The ATen operators that ``F.rms_norm`` calls on the CPU, as the profiler lists them.

    The profiler's warnings are silenced: some torch releases warn here, and a
    warning prints the path of the profiler's source file on the page.
    """
    import torch

    x, w = torch.randn(4, 64), torch.randn(64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            torch.nn.functional.rms_norm(x, (64,), w)
    return [e.key for e in prof.key_averages() if e.key.startswith("aten::")]


def live_forward_lines(ns: Sequence[int] = (4096, 65536), record: dict | None = None) -> list[str]:
    """The CUDA forward timed live at ``ns``, where a CUDA GPU and opguide's CUDA kernels are.

    Args:
        ns: the row lengths.
        record: a recorded sweep (``sweep_h100.json`` as :func:`recorded` reads it): the live
            run then moves as many elements a call as its sweep did, and each line gives the
            record's bf16 forward at that N beside, with the GPU it was recorded on.

    Returns a ``SKIPPED`` line that says why otherwise, or when the live run fails
    (a live check must not break the page).
    """
    import torch

    from guidekit import benchmark

    op = torch.ops.opguide.rms_norm.default
    if not (torch.cuda.is_available() and op.has_kernel_for_dispatch_key(torch.DispatchKey.CUDA)):
        return [
            "SKIPPED: no CUDA GPU with opguide's CUDA kernels here; "
            "the GPU numbers are the recorded ones."
        ]
    sweep = record["sweep"] if record else {}
    elements = sweep.get("elements", 2**24)
    try:
        live = benchmark.run_sweep(
            torch.device("cuda"), ns=tuple(ns), elements=elements, passes=("forward",),
            only=("opguide", SAME_SIZE_COPY),
        )  # fmt: skip
    except Exception as err:
        return [f"SKIPPED: the live check failed: {type(err).__name__}: {err}"]
    then = {
        r["n"]: r["vs_copy"]
        for r in sweep.get("rows", [])
        if r["impl"] == "opguide" and r["pass"] == "forward" and r["dtype"] == "bf16"
    }
    lines = []
    for r in live["rows"]:
        if r["impl"] == SAME_SIZE_COPY:
            continue
        line = (
            f"LIVE {torch.cuda.get_device_name()}: {r['impl']} N = {r['n']}: "
            f"{100 * r['vs_copy']:.1f}% of the same-size copy"
        )
        if r["n"] in then:
            line += f" (recorded on {record['device']}: {100 * then[r['n']]:.1f}%)"
        lines.append(line)
    return lines
