r"""
Step 11.4: Which tuning changes moved the kernels
=================================================

A kernel that is correct still has choices left that move its speed: how
many registers it holds, in which order it loads, what it asks of the
cache, how it is launched. This page answers one question: which of the
changes in opguide's kernels move them, and by how much? Each is measured
before and after on the same machine, and the plot at the end ranks them by
what they gain.

In this step you will learn:

* why registers are a budget, and how to read it from the compiler;
* what issuing every load before the arithmetic that needs it gained;
* how a pipeline in shared memory keeps the backward's loads in flight;
* when cache hints and programmatic dependent launch pay, and when not.

The numbers are **recorded** in ``docs/recorded/``: fixed-shape runs of
``python -m guidekit.benchmark`` (in % of its 1 GiB copy) and the output of
the ``tools/sweep_*`` programs, torch-free programs that time variants of a
kernel against a copy. A change the library does not make is a patch in
``tools/variants/`` or a define, applied to a copy of the sources and timed
beside the library as it is (``tools/gpu_records.sh 5``); each section shows
its patches.
The page prints each file's device and date.
Previous page: :doc:`11_performance_3_long_rows`.
"""

# %%
# Without a GPU, this page's Triton kernels run in Triton's interpreter. A
# program selects it before anything imports ``triton`` (opguide only reads
# the choice, in :mod:`opguide.triton.interpreter`):
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# Hold the row in registers, and count the registers
# --------------------------------------------------
# Each thread loads its vectors of ``x`` and of the weight once and keeps them
# until it writes the output, so ``x`` is read once. The more vectors per
# thread, the fewer threads a row needs, but the more registers each one
# uses; past what ``__launch_bounds__`` allows, the compiler spills to
# memory. In bfloat16, the compiler otherwise keeps the 32 floats of a first
# conversion alive across the reduction, where 16 registers of packed values
# would do; ``keep_packed`` (:doc:`step 3 <03_cuda_kernel>`) keeps the packed
# values instead. Without it, the kernel at 4 vectors a thread needs more than
# the 64 registers that ``__launch_bounds__(1024)`` allows and spills
# (``test_without_keep_packed_bfloat16_spills`` in
# ``tests/test_compile_checks.py`` compiles it and checks the spill). The
# forward, by vectors per thread, with and without ``keep_packed``:
from guidekit.recorded import recorded_dir
from guidekit.recorded import sources as record_sources
from guidekit.recorded.pages import (
    bars_figure,
    best,
    fixed_changes,
    ranking,
    recorded,
    recorded_text,
    rerun_noise,
    say,
    select,
    show,
    table,
    tool_rows,
)

packed = tool_rows(recorded_text("sweep_rms_norm_forward_keep_packed_h100.txt"))
ON, OFF = "OPGUIDE_KEEP_PACKED=1", "OPGUIDE_KEEP_PACKED=0"
columns = {"4 vecs": (ON, 4), "2 vecs": (ON, 2), "1 vec": (ON, 1), "4, no keep_packed": (OFF, 4)}
cells = [
    {**found, "column": name}
    for shape in dict.fromkeys(r["shape"] for r in packed)
    for name, (section, vecs) in columns.items()
    if (found := best(packed, dtype="bf16", shape=shape, section=section, **{"vecs/thr": vecs}))
]
show(table(cells, ("shape",), "column", lambda r: f"{r['pct']:.1f}% ({r['regs']} reg)"))
on, off = select(cells, column="4 vecs"), select(cells, column="4, no keep_packed")
keep_packed = [a["pct"] - b["pct"] for a, b in zip(on, off, strict=True)]
same = sum(a["threads/SM"] == b["threads/SM"] for a, b in zip(on, off, strict=True))
say(
    f"keep_packed at 4 vectors a thread: {min(keep_packed):+.1f} to {max(keep_packed):+.1f} "
    f"points; its fastest launches run as many threads per multiprocessor as those without "
    f"it at {same} of {len(on)} shapes (where they do, its fewer registers do not explain "
    "the gap through occupancy)"
)

# %%
# A test reads the machine code (``tests/test_compile_checks.py``) and fails
# if the forward spills. Registers also set how many blocks fit on a
# multiprocessor, which has 65536 of them. The fused kernel's blocks have up to
# 1024 threads; ``__launch_bounds__(1024, 2)`` caps it at 32 registers per
# thread, so that two such blocks fit, and the same test checks that they do.
# The kernel's comment (:doc:`step 10 <10_patterns>`) gives a reason for two:
# with one block per SM, the memory system idles between rows. No record here
# runs the kernel at one block per SM, so that reason is not measured.

# %%
# All loads before the arithmetic
# -------------------------------
# A thread needs eight 16-byte vectors (four of ``x``, four of the weight).
# Written as one loop that loads a vector and adds its squares, the kernel
# is slower (below). Written as all the loads first, then the sums, the eight
# loads are in flight together; ``tests/test_compile_checks.py`` checks that
# order in the machine code of the kernel as built. The comment in the kernel
# names the interleaved form's cause (a wait for each ``x`` before the next
# load); no test or record here reads the interleaved form's machine code,
# so the runs below show the cost, not the cause:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_forward.cuh
#    :language: cuda
#    :start-at: // All loads first
#    :end-before: if constexpr (kChunked)
#
# The CUDA forward, interleaved and then loads first:
#
# .. dropdown:: tools/variants/cuda_forward_loads_interleaved.patch
#
#    .. literalinclude:: /../tools/variants/cuda_forward_loads_interleaved.patch
#       :language: diff
#       :caption: tools/variants/cuda_forward_loads_interleaved.patch
loads_first = recorded("cuda_forward_loads_first_h100.json")
loads = fixed_changes(
    recorded("cuda_forward_loads_interleaved_h100.json"), loads_first, "forward", ["opguide"]
)
BEFORE_AFTER = lambda r: f"{r['before']:.1%} -> {r['after']:.1%}"  # noqa: E731
show(table(loads, ("impl", "shape"), "pass", BEFORE_AFTER))
say(
    f"gain: {min(c['points'] for c in loads):+.1f} to {max(c['points'] for c in loads):+.1f} points"
)

# %%
# The backward: a pipeline in shared memory
# -----------------------------------------
# The backward reads ``x`` and ``grad_y`` for a row, reduces across the block,
# then writes ``grad_x``; a barrier per row makes every warp wait for the slowest
# load. Prefetching the next row into registers keeps one row of loads in
# flight. The pipelined kernel keeps the next rows (``kStages``) in shared
# memory and queues their copies with ``cp.async``, which returns at once:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_backward.cuh
#    :language: cuda
#    :start-after: // [pipelined-backward-kernel]
#    :end-before: // [pipelined-backward-kernel-end]
#
# The register-prefetch kernel against the best pipelined layout, per shape:
pipelined = tool_rows(recorded_text("sweep_rms_norm_backward_pipelined_h100.txt"))
pipeline_gains = []
for dtype, shape in dict.fromkeys((r["dtype"], r["shape"]) for r in pipelined):
    prefetch = best(pipelined, dtype=dtype, shape=shape, prefetch=1)
    staged = best(pipelined, dtype=dtype, shape=shape, stages=lambda n: n > 0)
    pipeline_gains.append(staged["pct"] - prefetch["pct"])
    say(
        f"  {dtype} {shape:>10}: prefetch {prefetch['pct']:5.1f}%, pipeline {staged['pct']:5.1f}% "
        f"({staged['stages']} stages, {staged['regs']} registers)"
    )
say(f"gain: {min(pipeline_gains):+.1f} to {max(pipeline_gains):+.1f} points")

# %%
# Cache hints, and what L2 holds
# ------------------------------
# A CUDA load or store can carry a ``.cs`` ("streaming") hint, and a Triton
# load an ``eviction_policy="evict_first"``: the same request, to let L2
# drop these lines first, as ``x`` and ``y`` are touched once. What that
# does may depend on what else L2 holds; the runs below clean L2 before each
# timing, as the benchmark does, and give the times, not the cause. The CUDA
# forward with the hints, then without any (built with
# ``-DOPGUIDE_STREAMING_HINTS=0``), then the Triton kernels with and without
# ``evict_first``:
#
# .. dropdown:: The two patches (tools/variants/)
#
#    .. literalinclude:: /../tools/variants/cuda_forward_hints_on.patch
#       :language: diff
#       :caption: tools/variants/cuda_forward_hints_on.patch
#
#    .. literalinclude:: /../tools/variants/triton_evict_first_on.patch
#       :language: diff
#       :caption: tools/variants/triton_evict_first_on.patch
hints_on = recorded("cuda_forward_hints_on_h100.json")
hints_off = recorded("cuda_forward_hints_off_h100.json")
hints = fixed_changes(hints_on, hints_off, "forward", ["opguide"])
evict_on = recorded("triton_evict_first_on_h100.json")
evict_off = recorded("triton_evict_first_off_h100.json")
evict = [
    c
    for p in ("forward", "fused")
    for c in fixed_changes(evict_on, evict_off, p, ["opguide triton"])
]
show(table(hints + evict, ("pass", "shape"), "impl", BEFORE_AFTER))
# The most a second run moved a point: step 11's rerun, whose two records
# print their lines here.
NOISE = rerun_noise()
moved = [c["points"] for c in hints + evict]
say(
    f"without the hints: {min(moved):+.1f} to {max(moved):+.1f} points; "
    f"{sum(abs(m) > NOISE for m in moved)} of {len(moved)} points move by more than the "
    f"{NOISE:.2f} points a second run moves one"
)

# %%
# The library's forward kernels use no hints. The line above gives the
# range of what leaving them out gained, and how many of those points moved
# by more than a second run moves one: only those show it measurably. The
# backward keeps ``.cs`` on
# its ``grad_x`` stores; the same runs measured it both ways:
grad_x = fixed_changes(hints_on, hints_off, "backward", ["opguide"])
most = max(grad_x, key=lambda c: abs(c["points"]))
say(f"without them, the backward's largest change: {most['points']:+.1f} at {most['shape']}")

# %%
# Programmatic dependent launch
# -----------------------------
# The next kernel's blocks normally start only when the last block of this
# one ends, so the GPU drains and fills again at every launch. On Hopper, a
# kernel launched with the programmatic stream serialization attribute may
# start while the previous one drains; it waits (``griddepcontrol.wait``)
# before it reads memory, so results are untouched. The overlap hides part of
# the gap between two kernels (`programmatic dependent launch
# <https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#programmatic-dependent-launch-and-synchronization>`__
# in the CUDA Programming Guide), which matters most for short kernels; the
# runs below measure the kernels' bandwidth with it off and on, not the time
# per launch:
#
# .. literalinclude:: /../csrc/common/launch.cuh
#    :language: cuda
#    :start-after: // [pdl-device]
#    :end-before: // [pdl-device-end]
#
# The CUDA kernels with ``OPGUIDE_PDL=0`` and ``=1``. PDL is on by default on
# Hopper, so the ``PDL on`` forward is the same kernel as the ``loads first``
# and ``no hints`` forward above, timed in another run; the first line below
# says how far the two runs of that kernel stand apart, a part of the
# forward's gains that is the gap between runs, not PDL:
pdl_off, pdl_on = recorded("pdl_off.json"), recorded("pdl_on.json")
gap = [c["points"] for c in fixed_changes(loads_first, pdl_on, "forward", ["opguide"])]
say(
    f"PDL on against the loads-first run, the same forward: {round(min(gap), 1) + 0.0:+.1f} to "
    f"{max(gap):+.1f} points"
)
pdl = [c for p in ("forward", "backward") for c in fixed_changes(pdl_off, pdl_on, p, ["opguide"])]
show(table(pdl, ("pass", "shape"), "impl", BEFORE_AFTER))
points = [c["points"] for c in pdl]
gained, lost = sum(g > NOISE for g in points), sum(g < -NOISE for g in points)
say(
    f"PDL on: {min(points):+.1f} to {max(points):+.1f} points; past the {NOISE:.2f} points a "
    f"second run moves one, {gained} gained, {lost} lost, {len(points) - gained - lost} within"
)
say(
    "PDL stays on: it loses nowhere measurably."
    if not lost
    else f"PDL loses measurably at {lost} points: measure it on your own GPU."
)
if not pdl_on.get("clean_l2"):
    say("These two runs did not clean L2 before each batch: single points are less certain.")
pdl_changed = [
    f for name in ("pdl_off.json", "pdl_on.json")
    for f in record_sources.stale_files(recorded_dir() / name) or []
]  # fmt: skip
if pdl_changed:
    say(
        "The two PDL runs measured kernels that have changed since (the files named "
        "above): the verdict is about those kernels. The kernels as they are launch "
        "with PDL on Hopper, unmeasured here until the runs are recorded again."
    )

# %%
# The ranking
# -----------
# Every change on this page that changes the machine code, in points of the
# copy gained at each point it was measured (for the hints: what leaving them
# out gains; for PDL: against its own ``PDL off`` run, so its forward points
# carry the gap between runs described above):
gains = {
    "keep_packed": keep_packed,
    "loads first": [c["points"] for c in loads],
    "shared-memory pipeline": pipeline_gains,
    "no .cs (CUDA forward)": [c["points"] for c in hints],
    "no .cs (CUDA backward)": [c["points"] for c in grad_x],
    "no evict_first (Triton)": [c["points"] for c in evict],
    "PDL": points,
}
_ = bars_figure({"points of the copy gained": gains}, "Tuning changes, before and after (recorded)")
show(ranking(gains, NOISE))

# %%
# The printed ranking is the page's conclusion: the changes at the top are
# the ones to make first in a kernel of your own (two whose medians stand
# closer than a second run moves a point, printed in its last line, this run
# does not order), and a change listed as losing by more than that is one to
# measure on your own GPU before you keep it.
#
# Back to the start of the step: :doc:`11_performance`.
