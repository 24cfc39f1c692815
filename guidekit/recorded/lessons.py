"""The optimisations measured before and after, from the tools' recorded sweeps.

Each function takes what :mod:`.tool_outputs` read from a recorded file and
returns the lines step 11 prints, with the numbers they state.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from .sweeps import ONE_BLOCK
from .tool_outputs import best, launch


def push_lines(forward: dict, backward: dict, at_: dict) -> tuple[list[str], list[str]]:
    """Long rows: a barrier against pushed sums (forward); the backward's push after its
    wait (another layout too) against the library's push ahead.

    Args:
        forward, backward: :func:`.tool_outputs.cluster_sweep` of the two tools.
        at_: the bfloat16 sweep's rows by ``(pass, impl, N)``.

    Returns:
        ``(lines, older)``: the table, and the backward points where the
        recorded sweep is closer to the kernel before than to the pushing one.
    """
    lines, older = [], []
    for pass_name, table, before in (
        ("forward", forward, ("barrier", "pushed")),
        ("backward", backward, ("pushed after the wait", "pushed ahead")),
    ):
        for n, (old, new) in table.items():
            if n <= ONE_BLOCK[pass_name]:
                continue
            lines.append(
                f"{pass_name:8} N = {n:6}: {before[0]:21} {100 * old:4.0f}% of the copy; "
                f"{before[1]} {100 * new:4.0f}%"
            )
            if pass_name == "backward":  # the library's backward is the pushing kernel
                in_sweep = at_[(pass_name, "opguide", n)]["vs_copy"]
                if abs(in_sweep - old) < abs(in_sweep - new):
                    older.append(f"{pass_name} {n}")
    return lines, older


def per_row_cluster_lines(variant: dict, library: dict) -> tuple[list[str], dict]:
    """One row per cluster (the library) against the persistent loop, and at 16384 a
    cluster of two against one block.

    Args:
        variant, library: :func:`.tool_outputs.cluster_variants` of the forward tool.

    Returns:
        ``(lines, gains)``: the lines, and {dtype: [fractions gained over the loop]}.
    """
    lines, gains = [], {}
    for dtype in ("bf16", "fp16"):
        for (d, n), lib in sorted(library.items()):
            if d != dtype:
                continue
            if n <= ONE_BLOCK["forward"]:
                two = variant[(dtype, n, "one row 128 x 8")]
                # Two points of the copy: what a second run of a sweep moves a kernel
                # (step 11, "How much of this is the run?").
                if abs(two - lib) < 0.02:
                    verdict = ": within two points of each other"
                else:
                    verdict = ": one block is faster" if two < lib else ": Surprising, clusters win"
                lines.append(
                    f"forward {dtype} N = {n:6}: one block {100 * lib:4.0f}% of the copy, a "
                    f"cluster of two {100 * two:4.0f}%{verdict}"
                )
                continue
            loop = variant[(dtype, n, "loop 512 x 4, push")]
            gains.setdefault(dtype, []).append(lib - loop)
            lines.append(
                f"forward {dtype} N = {n:6}: persistent loop {100 * loop:4.0f}% of the copy; "
                f"one row per cluster {100 * lib:4.0f}%"
            )
    for dtype, g in gains.items():
        lines.append(f"{dtype}: {100 * min(g):+.0f} to {100 * max(g):+.0f} points")
    return lines, gains


def staged_lines(variant: dict, library: dict) -> list[str]:
    """The best of the staged persistent variants against one row per cluster."""
    lines = []
    for dtype in ("bf16", "fp16"):
        for n in (n for n in (65536, 131072) if (dtype, n) in library):
            staged = {
                v: f for (d, m, v), f in variant.items()
                if (d, m) == (dtype, n) and v.startswith("staged")
            }  # fmt: skip
            top = max(staged, key=staged.get)
            lib = library[(dtype, n)]
            lines.append(
                f"forward {dtype} N = {n:6}: best of {len(staged)} staged variants "
                f"{100 * staged[top]:.0f}% ({top}); one row per cluster {100 * lib:.0f}%"
                + ("" if staged[top] <= lib else ". Surprising: staging is faster here.")
            )
    return lines


def split_lines(fenced: tuple[dict, dict], slots: tuple[dict, dict], built: str) -> list[str]:
    """The Triton split kernels fenced against slots, and the library's backward launch.

    Args:
        fenced, slots: :func:`.tool_outputs.split_sweep` of the two runs.
        built: the library's backward launch at the longest row, as the
            tool writes it (``"SEG 4096 warps 4 per SM 2"``).
    """
    (fenced_best, fenced_every), (slots_best, slots_every) = fenced, slots
    lines = []
    for n in (32768, 65536, 131072):
        pct, best_launch = fenced_best[("forward", "row at a time", n)]
        now_pct, now_launch = slots_best[("forward", "row at a time", n)]
        lines.append(
            f"forward  N = {n:6}: fenced {pct:4.1f}% {launch(best_launch)}, "
            f"{fenced_every[('forward', 'row at a time', now_launch, n)]:4.1f}% "
            f"{launch(now_launch)}; slots {now_pct:4.1f}% {launch(now_launch)}"
        )
    ahead_gain, behind_best = [], []
    for n in (16384, 32768, 65536, 131072):
        late_pct = slots_best[("backward", "one row late", n)][0]
        ahead_pct = slots_best[("backward", "two rows ahead", n)][0]
        lines.append(
            f"backward N = {n:6}: fenced {fenced_best[('backward', 'row at a time', n)][0]:4.1f}%, "
            f"fenced one row late {fenced_best[('backward', 'one row late', n)][0]:4.1f}%, "
            f"slots one row late {late_pct:4.1f}%, two rows ahead {ahead_pct:4.1f}%"
        )
        ahead_gain.append(ahead_pct - late_pct)
        behind_best.append(ahead_pct - slots_every[("backward", "two rows ahead", built, n)])
    lines.append(
        f"two rows ahead against one: {min(ahead_gain):+.1f} to {max(ahead_gain):+.1f} points; "
        f"the library's launch, {launch(built)}, {max(behind_best):.1f} points or less behind "
        "the best launch at each N"
    )
    late = [v[0] for k, v in slots_best.items() if k[:2] == ("forward", "one row late")]
    each = [v[0] for k, v in slots_best.items() if k[:2] == ("forward", "row at a time")]
    if late and each:
        each_range = f"{min(each):.1f}-{max(each):.1f}%"
        verdict = (
            f"below the library's forward, which waits for each row ({each_range})"
            if max(late) < min(each)
            else f"not below the library's forward (each row waited for) at every N ({each_range})"
        )
        lines.append(
            f"the backward's way tried on the forward (persistent programs that count in "
            f"the next row before they wait, one row late), at its best: "
            f"{min(late):.1f}-{max(late):.1f}%; {verdict}"
        )
    return lines


def keep_packed_lines(packed: list[dict]) -> list[str]:
    """The bfloat16 forward by vectors per thread, with and without ``keep_packed``."""
    on, off = "OPGUIDE_KEEP_PACKED=1", "OPGUIDE_KEEP_PACKED=0"
    lines = [f"{'bf16':11} {'4 vecs':>13} {'2 vecs':>13} {'1 vec':>13} {'4, no keep_packed':>19}"]
    columns: dict = {"4": [], "2": [], "1": [], "no keep_packed": []}
    for shape in dict.fromkeys(r["shape"] for r in packed):
        cells = [
            best(packed, section=on, dtype="bf16", shape=shape, **{"vecs/thr": v})
            for v in (4, 2, 1)
        ]
        cells.append(best(packed, section=off, dtype="bf16", shape=shape, **{"vecs/thr": 4}))
        for column, cell in zip(columns.values(), cells, strict=True):
            column.extend([cell] if cell else [])
        lines.append(
            f"{shape:11} "
            + " ".join(
                f"{c['pct']:5.1f}% ({c['regs']:2} reg)" if c else f"{'-':>13}" for c in cells
            )
        )
    for name, cells in columns.items():
        pcts, regs = [c["pct"] for c in cells], sorted({c["regs"] for c in cells})
        lines.append(
            f"{name:>14}: {min(pcts)}-{max(pcts)}% of the copy, "
            f"{'/'.join(map(str, regs))} registers"
        )
    return lines


def _two_blocks_registers(per_thread: int) -> int:
    """Registers two blocks of 1024 threads take on an SM: allocated per warp, in units of
    256 (the CUDA occupancy calculator's allocation granularity for sm_50 to sm_90)."""
    per_warp = -(-per_thread * 32 // 256) * 256
    return 2 * 32 * per_warp


def register_cap_lines(uncapped: list[dict], capped: list[dict]) -> tuple[list[str], float | None]:
    """The fused kernel at float16 4096x8192 without and with its register cap.

    Returns:
        ``(lines, gain)``: the lines, and the points the cap gains; None where
        the kernel has as many registers without the cap (the two runs then
        timed the same machine code).
    """
    lines, pct, regs = [], [], []
    for label, found in (("no cap", uncapped), ("cap", capped)):
        r = best(found, dtype="fp16", shape="4096x8192", **{"vecs/thr": 1, "rows/blk": 1})
        lines.append(
            f"fp16 4096x8192, {label:6}: {r['regs']} registers "
            f"({_two_blocks_registers(r['regs'])} for two blocks of 1024 threads), "
            f"{r['blocks/SM']} block(s) per SM: {r['pct']}% of the copy"
        )
        pct.append(r["pct"])
        regs.append(r["regs"])
    gain = None if regs[0] == regs[1] else pct[1] - pct[0]
    if gain is None:
        lines.append(
            f"without the cap the compiler already stays at {regs[0]} registers: the cap "
            f"takes no register away, so the {pct[1] - pct[0]:+.1f} points between the two "
            "runs do not come from fewer registers"
        )
    else:
        lines.append(
            f"the cap takes {regs[0] - regs[1]} registers a thread away: "
            f"{gain:+.1f} points of the copy"
        )
    return lines, gain


def pipeline_lines(pipelined: list[dict]) -> tuple[list[str], list[float]]:
    """The register-prefetch backward against the best pipelined layout, per shape.

    Returns:
        ``(lines, gains)``: the lines, and the points gained at each shape.
    """
    lines, steps = [], []
    for dtype, shape in dict.fromkeys((r["dtype"], r["shape"]) for r in pipelined):
        registers = best(pipelined, dtype=dtype, shape=shape, prefetch=1)["pct"]
        staged = max(
            (r for r in pipelined if (r["dtype"], r["shape"]) == (dtype, shape) and "stages" in r),
            key=lambda r: r["pct"],
        )
        steps.append(staged["pct"] - registers)
        lines.append(
            f"  {dtype} {shape:>10}: prefetch {registers:5.1f}%, pipeline {staged['pct']:5.1f}% "
            f"({staged['stages']} stages, {staged['regs']} registers)"
        )
    lines.append(f"gain: {min(steps):+.1f} to {max(steps):+.1f} points")
    return lines, steps


def spill_lines(registers: dict) -> tuple[list[str], list[int]]:
    """The Triton register backward's registers and spills by N (``triton_registers_*.json``).

    Returns:
        ``(lines, spilled)``: the lines, and the row lengths where it spills.
    """
    kernels = [k for k in registers["kernels"] if k["kernel"] == "_rms_norm_bwd_kernel"]
    lines = [
        f"  Triton backward, N = {k['n']:5}: {k['registers']} registers per thread, "
        f"{k['spill_bytes']} bytes spilled ({k['num_warps']} warps)"
        for k in kernels
    ]
    spilled = [k["n"] for k in kernels if k["spill_bytes"] > 0]
    if spilled:
        lines.append(
            f"At N = {', '.join(map(str, spilled))} the Triton register backward holds more of "
            "a row (x, grad_y, the weight, its gradient) than a thread's registers, and Triton "
            "spills the rest to memory; those rows take the split kernel."
        )
    elif kernels:
        lines.append(
            f"Up to N = {max(k['n'] for k in kernels)}, the longest row the register backward "
            "takes, nothing spills; longer rows take the split kernel."
        )
    return lines, spilled


def pdl_lines(changes: Sequence[float], clean_l2: bool, noise: float = 0.0) -> list[str]:
    """The verdict on programmatic dependent launch from its changes in points.

    Args:
        changes: PDL on against off, in points of the copy, one per point measured
            (at least one).
        clean_l2: whether the runs cleaned L2 before each batch.
        noise: the most a second run moves a point (step 11's rerun); with it, a
            change no larger is no measurable difference and the verdict counts
            only the changes past it. Without it (0), the verdict reads the signs.
    """
    median = statistics.median(changes)
    if not noise:
        lost = sum(g < 0 for g in changes)
        lines = [
            f"PDL on: median {median:+.1f} points, from {min(changes):+.1f} "
            f"to {max(changes):+.1f}; {lost} of {len(changes)} points below zero"
        ]
        if median <= 0:
            verdict = "PDL does not pay here: the median point does not gain."
        elif lost:
            verdict = "A small change either way: PDL stays on for the median point's gain."
        else:
            verdict = "PDL gains at every point: it stays on."
    else:
        gained = sum(g > noise for g in changes)
        lost = sum(g < -noise for g in changes)
        lines = [
            f"PDL on: median {median:+.1f} points, from {min(changes):+.1f} to {max(changes):+.1f}",
            f"  past the {noise:.2f} points a second run moves one: {gained} gained, "
            f"{lost} lost, {len(changes) - gained - lost} within",
        ]
        if not gained and not lost:
            verdict = (
                "No point moves by more than a second run moves one: no measurable "
                "difference. PDL stays on, since it loses nowhere measurably."
            )
        elif not gained:
            verdict = f"PDL loses at {lost} points by more than a second run moves one: off."
        elif lost:
            verdict = (
                f"PDL gains at {gained} points and loses at {lost} (at most "
                f"{-min(changes):.1f} points) by more than a second run moves one: "
                "measure it on your own GPU."
            )
        elif gained == len(changes):
            verdict = "PDL gains at every point by more than a second run moves one: it stays on."
        else:
            verdict = (
                f"PDL gains at {gained} of {len(changes)} points by more than a second run "
                "moves one, and loses nowhere by as much: it stays on."
            )
    if not clean_l2:
        lines.append("These two runs did not clean L2 before each batch: single points are less")
        lines.append("  certain.")
    lines.append(verdict)
    return lines


def keep_packed_occupancy_line(packed: list[dict]) -> str:
    """Whether ``keep_packed``'s fewer registers let more threads run at once.

    At four vectors per thread, each bfloat16 shape's fastest launch with and
    without ``keep_packed``: their threads per multiprocessor (the tool's
    ``threads/SM``). Where these are the same, the register counts cannot
    explain the gap through occupancy.
    """
    pairs = []
    for shape in dict.fromkeys(r["shape"] for r in packed):
        want = {"dtype": "bf16", "shape": shape, "vecs/thr": 4}
        on = best(packed, section="OPGUIDE_KEEP_PACKED=1", **want)
        off = best(packed, section="OPGUIDE_KEEP_PACKED=0", **want)
        if on and off and "threads/SM" in on and "threads/SM" in off:
            pairs.append((on["threads/SM"], off["threads/SM"]))
    same = sum(a == b for a, b in pairs)
    head = (
        f"At 4 vectors a thread, the fastest launches with and without keep_packed run as "
        f"many threads per multiprocessor at {same} of {len(pairs)} shapes"
    )
    if pairs and same == len(pairs):
        return (
            head + ": the registers saved do not let more threads run at once; the spill "
            "that keep_packed avoids (above) is the likelier cause, which these runs do not "
            "time apart."
        )
    if same == 0 and pairs:
        return head + ": keep_packed's fewer registers let more threads run, a possible cause."
    return head + "."


def keep_packed_gains(packed: list[dict]) -> list[float]:
    """Points gained by ``keep_packed`` at four vectors per thread, at each bfloat16 shape."""
    gains = []
    for shape in dict.fromkeys(r["shape"] for r in packed):
        want = {"dtype": "bf16", "shape": shape, "vecs/thr": 4}
        on = best(packed, section="OPGUIDE_KEEP_PACKED=1", **want)
        off = best(packed, section="OPGUIDE_KEEP_PACKED=0", **want)
        if on and off:
            gains.append(on["pct"] - off["pct"])
    return gains


def ranking_lines(gains: dict[str, Sequence[float]], noise: float = 0.0) -> list[str]:
    """The changes ranked by their median gain, and which of them lose somewhere.

    ``noise``: the most a second run moves a point (step 11's rerun). With it,
    neighbours in the ranking whose medians stand no further apart than that
    are named together, as not ordered; the first and last are named only
    where their medians stand further than that from the next, and a change
    that loses less than that somewhere is named apart, as no measurable loss.
    ``gains`` holds at least one change.
    """
    order = sorted(gains, key=lambda k: statistics.median(gains[k]), reverse=True)
    med = {name: statistics.median(gains[name]) for name in order}
    lines = [
        f"{name:26} median {med[name]:+5.1f}, "
        f"{min(gains[name]):+5.1f} to {max(gains[name]):+5.1f} ({len(gains[name])} points)"
        for name in order
    ]
    # close_to_next[i]: the noise covers the gap between the i-th change and the next.
    close_to_next = [
        bool(noise) and med[above] - med[below] <= noise
        for above, below in zip(order, order[1:], strict=False)
    ]
    if noise:
        groups, group = [], [order[0]]
        for below, tied in zip(order[1:], close_to_next, strict=True):
            if tied:
                group.append(below)
            else:
                groups.append(group)
                group = [below]
        groups.append(group)
        close = [g for g in groups if len(g) > 1]
        if close:
            # Quoted: a change's name may hold a comma ("push, forward").
            named = "; ".join(
                ", ".join(f'"{n}"' for n in g[:-1]) + f' and "{g[-1]}"' for g in close
            )
            lines.append(
                f"Medians within {noise:.2f} points of the next, so not ordered by this "
                f"run: {named}."
            )

    def apart(i: int, end: str) -> str:
        """``end`` (the i-th change or the next), unless the noise covers their gap."""
        if not close_to_next[i]:
            return end
        return f"no measurable difference between {order[i]} and {order[i + 1]}"

    if len(order) > 1:
        last = len(order) - 2  # the gap above the last change
        lines.append(f"Most: {apart(0, order[0])}; least: {apart(last, order[-1])}.")
    else:
        lines.append(f"Most: {order[0]}; least: {order[-1]}.")
    both = [name for name in order if min(gains[name]) < -noise]
    within = [name for name in order if -noise <= min(gains[name]) < 0]
    if noise:
        lines.append(
            f"Lose at some point by more than a second run moves one ({noise:.2f} points): "
            f"{', '.join(both) or 'none'}."
        )
        if within:
            lines.append(f"Lose by less than that, no measurable loss: {', '.join(within)}.")
    else:
        lines.append(f"Lose at some point: {', '.join(both) or 'none'}.")
    return lines
