"""Long rows and odd row lengths in the recorded sweeps.

Rows longer than one block holds are split over a cluster of blocks (CUDA)
or over programs that meet through memory (Triton); rows that are not whole
16-byte vectors take narrower accesses. ``at_`` arguments are
:func:`guidekit.recorded.sweeps.at` of one dtype's rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from guidekit.benchmark.passes import SWEEP_PASSES

from .sweeps import ONE_BLOCK, TARGETS, TRITON_BLOCK

#: The repository's C++ sources, next to this package.
CSRC = Path(__file__).resolve().parents[2] / "csrc"


def constants(header: str) -> dict[str, int]:
    """The integer ``constexpr`` constants of a C++ header: ``{name: value}``."""
    return {
        name: int(value)
        for name, value in re.findall(r"constexpr\s+\w+\s+(k\w+)\s*=\s*(\d+)\s*;", header)
    }


def planner_limits(csrc: Path = CSRC) -> dict[str, int]:
    """The row lengths (bfloat16 elements, 8 to a 16-byte vector) of the CUDA planners.

    Returns:
        ``forward_holds``: the longest row one forward block keeps in
        registers (its most threads x vectors per thread x 8);
        ``forward_cluster``: the longest row the forward gives one block
        (clusters past it); ``fused_cluster``: the same for the fused kernel;
        ``backward_holds``: the longest row one backward block keeps (its most
        threads x the 4 vectors a thread takes in the pipelined kernel).
    """
    rms = constants((csrc / "rms_norm" / "rms_norm_config.h").read_text())
    fused = constants((csrc / "fused_add_rms_norm" / "fused_add_rms_norm_config.h").read_text())
    planner = (csrc / "rms_norm" / "rms_norm_planner.cuh").read_text()
    backward_vecs = int(re.search(r"\(kBwdMaxThreads\) \* (\d+)\)", planner)[1])
    return {
        "forward_holds": rms["kMaxThreadsPerRow"] * rms["kForwardRegVecs"] * 8,
        "forward_cluster": rms["kClusterForwardMinVecs"] * 8,
        "fused_cluster": fused["kFusedClusterMinVecs"] * 8,
        "backward_holds": rms["kBwdMaxThreads"] * backward_vecs * 8,
    }


def planner_lines(csrc: Path = CSRC) -> list[str]:
    """Where the CUDA planners send rows to clusters, against what one block holds."""
    rms = constants((csrc / "rms_norm" / "rms_norm_config.h").read_text())
    fused = constants((csrc / "fused_add_rms_norm" / "fused_add_rms_norm_config.h").read_text())
    got = planner_limits(csrc)
    return [
        f"forward: one block holds {rms['kMaxThreadsPerRow']} threads x "
        f"{rms['kForwardRegVecs']} vectors x 8 = {got['forward_holds']} elements",
        f"forward: clusters past {rms['kClusterForwardMinVecs']} vectors = "
        f"{got['forward_cluster']} elements",
        f"fused:   clusters past {fused['kFusedClusterMinVecs']} vectors = "
        f"{got['fused_cluster']} elements",
        f"backward: one block holds {rms['kBwdMaxThreads']} threads x "
        f"{got['backward_holds'] // rms['kBwdMaxThreads'] // 8} vectors x 8 = "
        f"{got['backward_holds']} elements; clusters past it",
        (
            f"The forward takes clusters for rows longer than {got['forward_cluster']} "
            f"that one block could still hold (up to {got['forward_holds']} elements): "
            "the planner's threshold (the sweep below compares the two kernels at the "
            "longest row one block takes; the longer rows that clusters take were not "
            "timed on one block)."
            if got["forward_cluster"] < got["forward_holds"]
            else "The forward takes clusters only for rows one block cannot hold."
        ),
    ]


def cluster_lines(at_: dict, ns: Sequence[int]) -> tuple[list[str], list[str]]:
    """The rows of 32768 and more, next to Quack and Liger (their fused kernels in the fused pass).

    Returns:
        ``(lines, behind)``: the table, and the cluster rows where Quack is
        faster than opguide's CUDA kernel (``"pass N (ours% against theirs%)"``).
    """
    lines = [
        f"{'pass':8} {'N':>6} {'opguide kernel':>14} {'opguide':>8} {'triton':>8} {'quack':>8} "
        f"{'liger':>8}"
    ]
    behind = []
    for pass_name in ("forward", "backward", "training", "fused"):
        fused = pass_name == "fused"
        peers = ("quack (residual)", "liger (fused)") if fused else ("quack", "liger")
        for n in (n for n in ns if n >= 32768):
            cells = [at_.get((pass_name, i, n)) for i in ("opguide", "opguide triton", *peers)]
            kernel = "cluster" if n > ONE_BLOCK[pass_name] else "one block"
            lines.append(
                f"{pass_name:8} {n:6} {kernel:>14} "
                + " ".join(f"{100 * r['vs_copy']:7.1f}%" if r else f"{'-':>8}" for r in cells)
            )
            quack = cells[2]
            if kernel == "cluster" and quack and quack["vs_copy"] > cells[0]["vs_copy"]:
                behind.append(
                    f"{pass_name} {n} ({100 * cells[0]['vs_copy']:.0f}% against "
                    f"{100 * quack['vs_copy']:.0f}%)"
                )
    return lines, behind


def triton_split_lines(at_: dict, ns: Sequence[int]) -> list[str]:
    """The Triton forward and fused kernels at the row lengths where each splits rows.

    Each pass splits the rows longer than one program holds (:data:`.TRITON_BLOCK`),
    so a row length can be split in one pass and not in the other; each line
    says up to where one program holds the row.
    """
    lines = []
    for pass_name in ("forward", "fused"):
        split_ns = [n for n in ns if n > TRITON_BLOCK[pass_name]
                    and (pass_name, "opguide triton", n) in at_]  # fmt: skip
        fractions = [at_[(pass_name, "opguide triton", n)]["vs_copy"] for n in split_ns]
        lines.append(
            f"Triton split {pass_name:7} at N = {', '.join(map(str, split_ns))}: "
            + ", ".join(f"{100 * f:.1f}%" for f in fractions)
            + f" (one program: N <= {TRITON_BLOCK[pass_name]})"
        )
    return lines


def triton_fused_faster(at_: dict, ns: Sequence[int]) -> list[str]:
    """Split rows where the Triton fused kernel beats the CUDA cluster kernel by over a point.

    Closer than a point is within the spread between runs.
    """
    split_ns = [n for n in ns if n > TRITON_BLOCK["fused"]]
    return [
        f"{n} ({100 * at_[('fused', 'opguide triton', n)]['vs_copy']:.1f}% against "
        f"{100 * at_[('fused', 'opguide', n)]['vs_copy']:.1f}%)"
        for n in split_ns
        if at_[("fused", "opguide triton", n)]["vs_copy"]
        > at_[("fused", "opguide", n)]["vs_copy"] + 0.01
    ]


def triton_long_row_lines(rows_by_dtype: dict, ns: Sequence[int]) -> list[str]:
    """opguide's Triton kernels at rows of 16384 and more, both 16-bit types, against the targets.

    The ``program`` column says whether the pass splits the row over programs
    (``split``) or gives it one program (``one``), from :data:`.TRITON_BLOCK`.
    """
    lines = [
        "opguide triton, rows of 16384 and more:",
        f"{'pass':8} {'N':>6} {'program':>7} {'target':>6}  {'bfloat16':>14}  {'float16':>14}",
    ]
    for pass_name, target in TARGETS.items():
        for n in (n for n in ns if n >= 16384):
            cells = []
            for dtype in ("bf16", "fp16"):
                got = rows_by_dtype[(dtype, pass_name, "opguide triton", n)]["vs_copy"]
                cells.append(f"{100 * got:5.1f}% {'met' if got >= target else 'MISSED':>7}")
            split = "split" if n > TRITON_BLOCK[pass_name] else "one"
            lines.append(
                f"{pass_name:8} {n:6} {split:>7} {100 * target:5.0f}%  {cells[0]:>14}  "
                f"{cells[1]:>14}"
            )
    return lines


def odd_row_lines(wide_only: dict, odd: dict, ns: Sequence[int]) -> list[str]:
    """Each kernel with 16-byte accesses only and as built, and ``F.rms_norm``, at each N.

    Args:
        wide_only: {(pass, impl, N): vs_copy} of the run with 16-byte accesses only.
        odd: {(dtype, pass, impl, N): vs_copy} of the run as built.
        ns: the row lengths.
    """
    lines = [f"{'pass':8} {'N':>5}  {'CUDA':>12}  {'Triton':>12}  {'F.rms_norm':>10}"]
    for pass_name in SWEEP_PASSES:
        for n in ns:
            cells = []
            for impl in ("opguide", "opguide triton"):
                old = wide_only.get((pass_name, impl, n))
                old_text = "-" if old is None else f"{100 * old:.0f}%"
                cells.append(f"{old_text:>4} -> {100 * odd[('bf16', pass_name, impl, n)]:3.0f}%")
            f_rms = odd.get(("bf16", pass_name, "F.rms_norm", n))
            f_text = "-" if f_rms is None else f"{100 * f_rms:.0f}%"
            lines.append(f"{pass_name:8} {n:5}  {cells[0]:>12}  {cells[1]:>12}  {f_text:>10}")
    return lines


def slower_as_built(wide_only: dict, odd: dict, points: float = 0.02) -> list[str]:
    """Where the CUDA kernels as built trail their 16-byte-only build, in bfloat16.

    The 16-byte-only build takes a row that is no whole number of 16-byte
    vectors one element at a time; as built, it takes the widest access the
    row allows. A point where the wider access is slower by more than
    ``points`` of the copy contradicts "wider is faster", and is named.

    Returns:
        One line per such point (``pass N: before -> after, access``), or one
        line saying there is none.
    """
    found = [
        f"  {p} N = {n}: {100 * old:.0f}% -> {100 * odd[('bf16', p, i, n)]:.0f}% "
        f"({access_bytes(n)}-byte accesses as built)"
        for (p, i, n), old in sorted(wide_only.items())
        if i == "opguide" and ("bf16", p, i, n) in odd and odd[("bf16", p, i, n)] < old - points
    ]
    if not found:
        return [
            "As built, no CUDA point trails the 16-byte-only build by more than "
            f"{100 * points:.0f} points."
        ]
    return [
        f"Surprising: as built, the CUDA kernels trail the 16-byte-only build "
        f"(one element at a time there) by more than {100 * points:.0f} points at:",
        *found,
    ]


def access_bytes(n: int, size: int = 2) -> int:
    """The CUDA kernels' access for rows of n 16-bit elements (aligned pointers)."""
    return next((b for b in (16, 8, 4) if n * size % b == 0), size)


def narrow_backward_longest(nbytes: int, csrc: Path = CSRC, size: int = 2) -> int:
    """The longest row (elements of ``size`` bytes) the narrow backward of ``nbytes``
    accesses holds: ``kBwdMaxThreads`` x ``narrow_backward_regs<nbytes>()`` vectors
    (``csrc/rms_norm/rms_norm_config.h``; ``narrow_backward_plan`` in the planner).
    Longer rows of such accesses take the chunked kernel, which reads the row twice.
    """
    config = (csrc / "rms_norm" / "rms_norm_config.h").read_text()
    wide, other = re.search(
        r"narrow_backward_regs\(\) \{\s*return kBytes == 8 \? (\d+) : (\d+);", config
    ).groups()
    regs = int(wide) if nbytes == 8 else int(other)
    return constants(config)["kBwdMaxThreads"] * regs * (nbytes // size)


def backward_chunked(n: int, csrc: Path = CSRC) -> bool:
    """Whether the CUDA backward of an aligned row of n 16-bit elements takes the chunked kernel.

    Only rows that are not whole 16-byte vectors can: the planner tries the
    narrow kernels from the widest access the row allows down to 2 bytes, each
    up to :func:`narrow_backward_longest`, and takes the chunked kernel when
    none holds the row.
    """
    nbytes = access_bytes(n)
    widths = [w for w in (8, 4, 2) if w <= nbytes]
    return nbytes < 16 and all(n > narrow_backward_longest(w, csrc) for w in widths)


def access_lines(odd: dict, csrc: Path = CSRC) -> list[str]:
    """The CUDA kernels' lowest and highest % of the copy, by access width and pass.

    The backward and training points whose backward takes the chunked kernel
    (:func:`backward_chunked`) read the row twice whatever the access: they are
    left out of the ranges, and the last line names them.
    """

    # Each row length once: backward_chunked reads the planner's limits from csrc.
    ns = {n for (_, _, i, n) in odd if i == "opguide"}
    chunked_ns = {n for n in ns if backward_chunked(n, csrc)}

    def counted(p: str, n: int) -> bool:
        return not (p in ("backward", "training") and n in chunked_ns)

    lines = [f"{'access':8}" + "".join(f" {p:>10}" for p in SWEEP_PASSES)]
    for nbytes in (16, 8, 4, 2):
        cells = []
        for pass_name in SWEEP_PASSES:
            got = [v for (d, p, i, n), v in odd.items()
                   if (p, i) == (pass_name, "opguide") and access_bytes(n) == nbytes
                   and counted(p, n)]  # fmt: skip
            cells.append(f"{100 * min(got):.0f}-{100 * max(got):.0f}%" if got else "-")
        lines.append(f"{f'{nbytes} B':8}" + "".join(f" {c:>10}" for c in cells))
    chunked = sorted({n for (_, p, i, n) in odd if i == "opguide" and not counted(p, n)})
    lines.append(
        "Left out of backward and training: "
        + (
            f"N = {', '.join(map(str, chunked))}, whose backward takes the chunked kernel "
            "(the row read twice)."
            if chunked
            else "none."
        )
    )
    return lines


def behind(odd: dict, other: str, margin: float = 0.02) -> tuple[list[tuple[str, str]], list]:
    """Points where the CUDA kernel is more than ``margin`` of the copy behind ``other``.

    Returns:
        ``(behind, compared)``: ``(pass, "N dtype")`` of each point behind,
        and the ``(key, vs_copy)`` of every CUDA point that ``other`` also has.
    """
    both = [(k, v) for k, v in odd.items() if k[2] == "opguide" and (*k[:2], other, k[3]) in odd]
    found = [(p, f"{n} {d}") for (d, p, _, n), v in both if v < odd[(d, p, other, n)] - margin]
    return found, both


def behind_lines(odd: dict, other: str) -> list[str]:
    """How many points the CUDA kernel is more than 2 points behind ``other``, by pass."""
    found, both = behind(odd, other)
    lines = [f"CUDA more than 2 points behind {other} at {len(found)} of {len(both)} points:"]
    for pass_name in dict.fromkeys(k[1] for k, _ in both):  # the passes compared
        where = ", ".join(point for p, point in found if p == pass_name)
        lines.append(f"{pass_name}: {where or 'none'}")  # the page wraps it (pages.say)
    return lines


def change_gains(
    forward_push: dict, backward_push: dict, per_row: dict, fenced: tuple, slots: tuple
) -> dict[str, list[float]]:
    """The long-row changes' gains in points of the copy, by change, for a plot.

    Args:
        forward_push, backward_push: :func:`.tool_outputs.cluster_sweep` of the
            barrier against pushed sums (forward), the backward pushed after its
            wait against the library's, which pushes ahead.
        per_row: {dtype: [fractions gained]} of
            :func:`.lessons.per_row_cluster_lines`.
        fenced, slots: :func:`.tool_outputs.split_sweep` of the Triton split
            kernels fenced and as built.
    """
    gains = {
        "push, forward": [100 * (new - old) for n, (old, new) in forward_push.items()
                          if n > ONE_BLOCK["forward"]],
        "push ahead, backward": [100 * (new - old) for n, (old, new) in backward_push.items()
                           if n > ONE_BLOCK["backward"]],
        "one row per cluster": [100 * g for found in per_row.values() for g in found],
    }  # fmt: skip
    (fenced_best, _), (slots_best, _) = fenced, slots
    for pass_name, variant, name in (
        ("forward", "row at a time", "Triton forward: slots"),
        ("backward", "two rows ahead", "Triton backward: slots, late, ahead"),
    ):
        gains[name] = [
            pct - fenced_best[(pass_name, "row at a time", n)][0]
            for (p, v, n), (pct, _) in slots_best.items()
            if (p, v) == (pass_name, variant) and (pass_name, "row at a time", n) in fenced_best
        ]
    return gains
