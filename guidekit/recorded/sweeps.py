"""The sweep over the row length: floors, targets, misses and peers.

A sweep (``python -m guidekit.benchmark --sweep``) times every implementation
at every row length N with ``M * N`` fixed, next to a copy of the same bytes;
each row's ``vs_copy`` is the copy's time over its own (1.0: the copy's
speed). Rows are dicts with ``pass``, ``impl``, ``n``, ``dtype``, ``seconds``,
``bytes``, ``GBps`` and ``vs_copy``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from guidekit.benchmark.passes import SAME_SIZE_COPY, SWEEP_PASSES

from . import listed

#: The targets, as fractions of the same-size copy: the CUDA and Triton
#: kernels at 90% or more in the forward and fused passes, 85% in the
#: backward and training.
TARGETS = {"forward": 0.90, "backward": 0.85, "training": 0.85, "fused": 0.90}
#: The implementations that opguide's CUDA kernel must be at least as fast
#: as, in the forward and in training.
PEERS = ("liger", "quack", "F.rms_norm", "compile(reference)")
#: Short names of the peers, for tables.
SHORT_PEER = {
    "compile(reference)": "compile",
    "quack (residual)": "quack",
    "liger (fused)": "liger",
    "compile(residual += x; F.rms_norm)": "compile",
    "compile(unfused reference)": "compile",
}
#: The peers of each pass that opguide's CUDA kernel is compared with: the
#: same operation from another library or from Inductor.
PASS_PEERS = {
    "forward": PEERS,
    "training": PEERS,
    "fused": (
        "liger (fused)",
        "quack (residual)",
        "compile(residual += x; F.rms_norm)",
        "compile(unfused reference)",
    ),
}
#: opguide's two kernel families.
OURS = ("opguide", "opguide triton")
#: The longest row (bfloat16 elements) that the CUDA planner gives one block,
#: by pass; it sends longer rows to a thread-block cluster. This is where
#: clusters are chosen, not where a row stops fitting one block: the forward
#: goes to clusters where they are faster (:func:`.long_rows.planner_lines`
#: reads the configuration headers, and a test checks these against them).
ONE_BLOCK = {"forward": 16384, "fused": 32768, "backward": 16384, "training": 16384}
#: The longest row (bfloat16 elements) one Triton program holds, by pass
#: (``opguide/triton/launch.py``'s planners; a test checks each against them).
TRITON_BLOCK = {"forward": 16384, "fused": 16384, "backward": 8192, "training": 8192}


def at(rows: Iterable[dict]) -> dict:
    """{(pass, impl, n): row} of one dtype's rows."""
    return {(r["pass"], r["impl"], r["n"]): r for r in rows}


def by_dtype(rows: Iterable[dict]) -> dict:
    """{(dtype, pass, impl, n): row}."""
    return {(r["dtype"], r["pass"], r["impl"], r["n"]): r for r in rows}


def fractions(rows: Iterable[dict]) -> dict:
    """{(impl, n): vs_copy} of one pass and dtype's rows."""
    return {(r["impl"], r["n"]): r["vs_copy"] for r in rows}


def copy_lines(rows: Sequence[dict]) -> list[str]:
    """Each pass's bytes per call, its same-size copies' GB/s and median time, and how far
    the copy's own speed moves across the row lengths (nearly the same bytes at every N)."""
    lines = []
    spreads, sizes = [], []
    for pass_name in SWEEP_PASSES:
        copies = [r for r in rows if r["pass"] == pass_name and r["impl"] == SAME_SIZE_COPY]
        gbps = [r["GBps"] for r in copies]
        size = [r["bytes"] for r in copies]
        sizes.append(100 * (max(size) / min(size) - 1))
        median = statistics.median(r["seconds"] for r in copies)
        spreads.append(100 * (max(gbps) / min(gbps) - 1))
        lines.append(
            f"{pass_name:9} {copies[0]['bytes'] / 2**20:4.0f} MiB per call; same-size copy "
            f"{min(gbps):.0f}-{max(gbps):.0f} GB/s, median {median * 1e6:.0f} us"
        )
    lines.append(
        f"The copy moves the same bytes at every N to within {max(sizes):.2f}%, yet its "
        f"speed differs by up to {max(spreads):.1f}% between row lengths of one pass: "
        "percentages at different N are that much off one scale."
    )
    return lines


def points(x: float) -> str:
    """A change in points with its sign and one decimal (never ``-0.0``)."""
    return f"{round(x, 1) + 0.0:+.1f}"


def one_set_gains(one: dict, three: dict) -> dict[str, dict[int, float]]:
    """{impl: {N: points of the copy gained with one input set instead of three}}."""
    gains: dict[str, dict[int, float]] = {}
    for impl, n in one:
        if impl != SAME_SIZE_COPY and (impl, n) in three:
            gains.setdefault(impl, {})[n] = 100 * (one[(impl, n)] - three[(impl, n)])
    return gains


def one_set_lines(gains: dict[str, dict[int, float]]) -> list[str]:
    """Each implementation's range of gains, and where a gain over 10 points is surprising."""
    lines = []
    for impl, gain in gains.items():
        top = max(gain, key=gain.get)
        lines.append(
            f"  {impl:20} one set {points(min(gain.values()))} to {points(gain[top])} points "
            f"(most at N = {top})"
        )
        if gain[top] > 10:
            lines.append(f"  Surprising: {impl} gains {gain[top]:.1f} points there.")
    return lines


def behind_peer(frac: dict, ns: Iterable[int], peers: Sequence[str] = ("liger", "quack")) -> list:
    """Row lengths where opguide's CUDA kernel is slower than the fastest of ``peers``."""
    return [n for n in ns if frac[("opguide", n)] < max(frac.get((p, n), 0) for p in peers)]


def head_to_head(rows: Iterable[dict], peer: str) -> tuple[int, int, list[str]]:
    """opguide's CUDA kernel against ``peer`` in one run: (at least as fast, points, slower at)."""
    pairs: dict = {}
    for r in rows:
        pairs.setdefault((r["dtype"], r["pass"], r["n"]), {})[r["impl"]] = r["seconds"]
    ahead = sum(p["opguide"] <= p[peer] for p in pairs.values())
    lost = sorted(f"{k[1]} {k[0]} {k[2]}" for k, p in pairs.items() if p["opguide"] > p[peer])
    return ahead, len(pairs), lost


def dtype_gaps(rows: Iterable[dict]) -> list[float]:
    """Points of the copy between opguide's float16 and bfloat16 at each (pass, N)."""
    found: dict = {}
    for r in rows:
        if r["impl"] == "opguide":
            found.setdefault((r["pass"], r["n"]), {})[r["dtype"]] = r["vs_copy"]
    return [100 * abs(v["fp16"] - v["bf16"]) for v in found.values() if len(v) == 2]


def rerun_spread(changes: dict[tuple, list], impl: str = "opguide") -> dict[str, float]:
    """{pass: the largest change of ``impl`` between two runs, in points of the copy}.

    Args:
        changes: :func:`rerun_changes` of the two runs.
        impl: the implementation whose changes count.
    """
    return {p: max(abs(c) for *_, c in found) for (i, p), found in changes.items() if i == impl}


def rerun_noise(changes: dict[tuple, list]) -> float:
    """The most a second run moved any point of opguide's two kernel families, in points.

    A change between two variants no larger than this is no measurable
    difference (steps 11.3 and 11.4 rank their changes against it).

    Args:
        changes: :func:`rerun_changes` of the two runs.
    """
    return max(max(rerun_spread(changes, impl).values(), default=0.0) for impl in OURS)


def peer_verdict(ours: float, best: float, spread: float = 0.0) -> str:
    """``faster``, ``tie`` or ``SLOWER``: the CUDA kernel against the fastest peer.

    Args:
        ours, best: the two fractions of the copy.
        spread: in points of the copy; a difference no larger is a tie, since a
            second run of the same kernel moved it that far.
    """
    diff = 100 * (ours - best)
    if abs(diff) <= spread:
        return "tie"
    return "faster" if diff > 0 else "SLOWER"


def target_lines(at_: dict, ns: Sequence[int], spread: dict[str, float] | None = None) -> list[str]:
    """Per pass and N: each kernel against its target, and the fastest peer's speed.

    The last column is :func:`peer_verdict` of opguide's CUDA kernel against
    that peer (the passes of :data:`PASS_PEERS`), with ``spread`` ({pass:
    points}, :func:`rerun_spread`; none: no ties but exact ones) as the tie.
    """
    spread = spread or {}
    lines = [
        f"{'pass':8} {'N':>6}  {'opguide':>14}  {'opguide triton':>14}  "
        f"{'fastest peer':>16}  {'CUDA vs it':>10}"
    ]
    for pass_name, target in TARGETS.items():
        for n in ns:
            cells = []
            for impl in OURS:
                r = at_.get((pass_name, impl, n))
                if r is None:
                    cells.append(f"{'could not run':>14}")
                    continue
                met = r["vs_copy"] >= target
                cells.append(f"{100 * r['vs_copy']:5.1f}% {'met' if met else 'MISSED':>7}")
            peer_names = PASS_PEERS.get(pass_name, ())
            peers = [at_[(pass_name, p, n)] for p in peer_names if (pass_name, p, n) in at_]
            peer = ""
            if peers:
                # vs_copy, not seconds: a peer read from its own run had its own copy.
                best = max(peers, key=lambda r: r["vs_copy"])
                ours = at_[(pass_name, "opguide", n)]["vs_copy"]
                verdict = peer_verdict(ours, best["vs_copy"], spread.get(pass_name, 0.0))
                name = SHORT_PEER.get(best["impl"], best["impl"])
                peer = f"{name:>9} {100 * best['vs_copy']:5.1f}%  {verdict:>10}"
            lines.append(f"{pass_name:8} {n:6}  {cells[0]}  {cells[1]}  {peer}".rstrip())
    return lines


def dtype_target_lines(rows_by_dtype: dict, dtype: str = "fp16") -> list[str]:
    """Per pass and kernel: at how many row lengths ``dtype`` meets the target."""
    lines = []
    for pass_name, target in TARGETS.items():
        for impl in OURS:
            found = [r for k, r in rows_by_dtype.items() if k[:3] == (dtype, pass_name, impl)]
            missed = sorted(r["n"] for r in found if r["vs_copy"] < target)
            lines.append(
                f"  {pass_name:8} {impl:14} met at {len(found) - len(missed)} of {len(found)} "
                f"row lengths; missed at N = {listed(missed)}"
            )
    return lines


def target_misses(rows_by_dtype: dict) -> dict:
    """{(impl, pass): {N: the dtypes that miss the target there}} of opguide's kernels."""
    misses: dict = {}
    for (dtype, p, impl, n), r in rows_by_dtype.items():
        if impl in OURS and p in TARGETS and r["vs_copy"] < TARGETS[p]:
            misses.setdefault((impl, p), {}).setdefault(n, []).append(dtype)
    return misses


def one_type_misses(misses: dict, rows_by_dtype: dict) -> tuple[list, list]:
    """Points where one 16-bit type misses a target and the other meets it.

    Returns:
        ``(hair, split)``: within 2 points of each other, and further apart;
        each a list of ``(impl, pass, N, text)``, the text float16 first.
    """
    hair, split = [], []
    for (impl, p), at_n in misses.items():
        for n, dtypes in at_n.items():
            keys = [(d, p, impl, n) for d in ("fp16", "bf16")]
            if len(dtypes) == 1 and all(k in rows_by_dtype for k in keys):
                half, brain = (rows_by_dtype[k]["vs_copy"] for k in keys)
                text = f"{impl} {p} {n} ({100 * half:.1f}% against {100 * brain:.1f}%)"
                (hair if abs(half - brain) < 0.02 else split).append((impl, p, n, text))
    return hair, split


def measured_again_lines(split: Sequence[tuple], again: Sequence[dict]) -> list[str]:
    """For each point of ``split``, what another run of it measured."""
    lines = []
    for impl, p, n, _ in split:
        for r in (r for r in again if (r["impl"], r["pass"], r["n"]) == (impl, p, n)):
            verdict = (
                "(met: a slow spell of the recorded run)"
                if r["vs_copy"] >= TARGETS[p]
                else "(missed again)"
            )
            lines.append(
                f"  measured again: {impl} {p} {r['dtype']} N = {n}: "
                f"{100 * r['vs_copy']:.1f}% {verdict}"
            )
    return lines


def expected_misses(misses: dict) -> tuple[list[str], list[str]]:
    """Misses on rows split over blocks or programs (expected), and the others.

    A row longer than :data:`ONE_BLOCK` (CUDA) or :data:`TRITON_BLOCK`
    (Triton) is split over blocks or programs that wait for each other; the
    CUDA forward's cluster kernel reads a long row once too, so none of its
    misses is expected.
    """
    expected, other = [], []
    for (impl, pass_name), at_n in misses.items():
        block = (TRITON_BLOCK if impl == "opguide triton" else ONE_BLOCK)[pass_name]
        long = [n for n in sorted(at_n) if n > block]
        fine = [n for n in sorted(at_n) if n <= block]
        if impl == "opguide" and pass_name == "forward":
            fine, long = fine + long, []
        for group, found in ((expected, long), (other, fine)):
            if found:
                where = [f"{n}" + ("" if len(at_n[n]) == 2 else f" ({at_n[n][0]})") for n in found]
                group.append(f"{impl} {pass_name} at N = {', '.join(where)}")
    return expected, other


def slower_than_fastest_peer(
    rows_by_dtype: dict, spread: dict[str, float] | None = None
) -> dict[str, list[str]]:
    """The CUDA kernel against the fastest peer of its pass, at every point.

    The passes and their peers are :data:`PASS_PEERS` (forward, training, and
    the fused residual-add + RMSNorm).

    Args:
        rows_by_dtype: :func:`by_dtype` of the sweep.
        spread: {pass: points of the copy} (:func:`rerun_spread`): a difference
            no larger is a tie (:func:`peer_verdict`). None: only equal is a tie.

    Returns:
        ``{"faster": [...], "tie": [...], "SLOWER": [...]}``, each a list of
        ``"dtype pass N"``; together, every point that had a peer to compare with.
    """
    spread = spread or {}
    found: dict[str, list[str]] = {"faster": [], "tie": [], "SLOWER": []}
    for d, p, impl, n in rows_by_dtype:
        if p not in PASS_PEERS or impl != "opguide":
            continue
        peers = [
            rows_by_dtype[(d, p, q, n)]["vs_copy"]
            for q in PASS_PEERS[p]
            if (d, p, q, n) in rows_by_dtype
        ]
        if not peers:
            continue
        ours = rows_by_dtype[(d, p, "opguide", n)]["vs_copy"]
        found[peer_verdict(ours, max(peers), spread.get(p, 0.0))].append(f"{d} {p} {n}")
    return found


def rerun_changes(first: Iterable[dict], again: Iterable[dict]) -> dict[tuple, list]:
    """{(impl, pass): [(dtype, N, change in points of the copy)]} between two sweeps.

    Only the implementations and points both runs timed count; the copy, the
    yardstick of both, is left out.
    """
    before = {(r["impl"], r["pass"], r["dtype"], r["n"]): r["vs_copy"] for r in first
              if r.get("vs_copy")}  # fmt: skip
    changes: dict[tuple, list] = {}
    for r in again:
        key = (r["impl"], r["pass"], r["dtype"], r["n"])
        if r["impl"] == SAME_SIZE_COPY or key not in before or not r.get("vs_copy"):
            continue
        change = 100 * (r["vs_copy"] - before[key])
        changes.setdefault((r["impl"], r["pass"]), []).append((r["dtype"], r["n"], change))
    return changes


def rerun_lines(changes: dict[tuple, list], limit: float = 2.0) -> list[str]:
    """Each implementation and pass's range of changes, then the points past ``limit``."""
    lines = []
    for (impl, pass_name), found in sorted(changes.items()):
        moved = [c for _, _, c in found]
        lines.append(f"{impl:15} {pass_name:9} {min(moved):+5.1f} to {max(moved):+5.1f} points")
    past = [(impl, p, d, n, c) for (impl, p), found in sorted(changes.items())
            for d, n, c in found if abs(c) > limit]  # fmt: skip
    lines.append(
        f"Points that moved by more than {limit:g}: "
        + ("; ".join(f"{i} {p} {d} N = {n} ({c:+.1f})" for i, p, d, n, c in past) or "none")
    )
    return lines
