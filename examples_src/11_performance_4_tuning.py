r"""
Step 11.4: Which tuning changes moved the kernels
=================================================

Part I's CUDA kernel is correct; the library's kernels make further choices:
how many registers they hold, in which order they load, what they ask of the
cache, how they are launched. Which of these move the kernels, and by how
much? Each is measured before and after, and the plot at the end ranks them.

In this step you will learn:

* why registers are a budget, and how to read it from the compiler;
* what issuing every load before the arithmetic gained;
* how a pipeline in shared memory keeps the backward's loads in flight;
* when cache hints and programmatic dependent launch pay.

The numbers are **recorded** in ``docs/recorded/`` (``python -m
guidekit.benchmark`` in % of its 1 GiB copy, and the ``tools/sweep_*``
programs). A change the library does not make is a patch in
``tools/variants/`` or a define, timed beside the library; each section
shows its patches.
"""

# %%
# Without a GPU, the Triton kernels run in Triton's interpreter, selected
# before anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# Hold the row in registers, and count the registers
# --------------------------------------------------
# Each thread keeps its vectors of ``x`` and the weight until it writes the
# output, so ``x`` is read once. More vectors a thread means fewer threads a
# row but more registers each; past what ``__launch_bounds__`` allows, the
# compiler spills to memory. ``keep_packed`` (:doc:`step 3 <03_cuda_kernel>`)
# keeps bfloat16 values packed through the reduction; without it the kernel
# at 4 vectors a thread spills past the 64 registers of
# ``__launch_bounds__(1024)`` (``test_without_keep_packed_bfloat16_spills`` in
# ``tests/test_compile_checks.py`` compiles it and checks). The forward, by
# vectors a thread, with and without ``keep_packed``:
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

packed = tool_rows(recorded_text("sweep_rms_norm_forward_keep_packed_<gpu>.txt"))
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
# ``tests/test_compile_checks.py`` reads the machine code and fails if the
# forward spills. Registers also set how many blocks fit on a multiprocessor
# (65536 of them): ``__launch_bounds__(1024, 2)`` caps the fused kernel at 32
# registers a thread so that two of its 1024-thread blocks fit, and the same
# test checks that they do.

# %%
# All loads before the arithmetic
# -------------------------------
# A thread needs eight 16-byte vectors (four of ``x``, four of the weight).
# Written as all the loads first, then the sums, the eight are in flight
# together (``tests/test_compile_checks.py`` checks that order in the machine
# code); written as one loop that loads a vector and adds its squares, the
# kernel is slower. The runs show the cost, not its cause:
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
loads_first = recorded("cuda_forward_loads_first_<gpu>.json")
loads = fixed_changes(
    recorded("cuda_forward_loads_interleaved_<gpu>.json"), loads_first, "forward", ["opguide"]
)
BEFORE_AFTER = lambda r: f"{r['before']:.1%} -> {r['after']:.1%}"  # noqa: E731
show(table(loads, ("impl", "shape"), "pass", BEFORE_AFTER))
say(
    f"gain: {min(c['points'] for c in loads):+.1f} to {max(c['points'] for c in loads):+.1f} points"
)

# %%
# The backward: a pipeline in shared memory
# -----------------------------------------
# The backward reads ``x`` and ``grad_y`` for a row, reduces across the
# block, then writes ``grad_x``; a barrier per row makes every warp wait for
# the slowest load. Prefetching into registers keeps one row of loads in
# flight; the pipelined kernel keeps the next ``kStages`` rows in shared
# memory, queued with ``cp.async``:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_backward.cuh
#    :language: cuda
#    :start-after: // [pipelined-backward-kernel]
#    :end-before: // [pipelined-backward-kernel-end]
#
# The register-prefetch kernel against the best pipelined layout, per shape:
pipelined = tool_rows(recorded_text("sweep_rms_norm_backward_pipelined_<gpu>.txt"))
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
# A CUDA load or store can carry a ``.cs`` ("streaming") hint, a Triton load
# ``eviction_policy="evict_first"``: both ask L2 to drop these lines first, as
# ``x`` and ``y`` are touched once. The runs clean L2 before each timing and
# give the times, not the cause: the CUDA forward with the hints and without
# (``-DOPGUIDE_STREAMING_HINTS=0``), then the Triton kernels with and without
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
hints_on = recorded("cuda_forward_hints_on_<gpu>.json")
hints_off = recorded("cuda_forward_hints_off_<gpu>.json")
hints = fixed_changes(hints_on, hints_off, "forward", ["opguide"])
evict_on = recorded("triton_evict_first_on_<gpu>.json")
evict_off = recorded("triton_evict_first_off_<gpu>.json")
evict = [
    c
    for p in ("forward", "fused")
    for c in fixed_changes(evict_on, evict_off, p, ["opguide triton"])
]
show(table(hints + evict, ("pass", "shape"), "impl", BEFORE_AFTER))
# The most a second run moved a point: step 11's rerun, whose two records
# print their lines here.
NOISE = rerun_noise()
for name, changes in (("the CUDA forward's hints", hints), ("evict_first", evict)):
    moved = [c["points"] for c in changes]
    if moved:
        say(
            f"without {name}: {min(moved):+.1f} to {max(moved):+.1f} points; "
            f"{sum(abs(m) > NOISE for m in moved)} of {len(moved)} points move by more "
            f"than the {NOISE:.2f} points a second run moves one"
        )

# %%
# The library's forward kernels use no hints; the backward keeps ``.cs`` on
# its ``grad_x`` stores, measured both ways by the same runs:
grad_x = fixed_changes(hints_on, hints_off, "backward", ["opguide"])
if grad_x:
    most = max(grad_x, key=lambda c: abs(c["points"]))
    say(f"without them, the backward's largest change: {most['points']:+.1f} at {most['shape']}")

# %%
# Programmatic dependent launch
# -----------------------------
# A kernel's blocks normally start only when the previous kernel's last
# block ends. On Hopper, a kernel launched with the programmatic stream
# serialization attribute may start while the previous one drains, and waits
# (``griddepcontrol.wait``) before it reads memory (`programmatic dependent
# launch
# <https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#programmatic-dependent-launch-and-synchronization>`__).
# The runs measure bandwidth with it off and on, not time per launch:
#
# .. literalinclude:: /../csrc/common/launch.cuh
#    :language: cuda
#    :start-after: // [pdl-device]
#    :end-before: // [pdl-device-end]
#
# The CUDA kernels with ``OPGUIDE_PDL=0`` and ``=1``. The ``PDL on`` forward
# is the ``loads first`` forward above, timed in another run; the first line
# says how far the two runs stand apart, a part of the gains that is not PDL:
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
        "above): the verdict is about those kernels. The kernels as they are also "
        "launch with PDL on Hopper; no run here has timed them with it off."
    )

# %%
# The ranking
# -----------
# Every change on this page, in points of the copy gained at each point
# measured (for the hints: leaving them out; PDL's forward points carry the
# gap between runs above; a change whose two runs come from different GPUs is
# left out):
gains = {
    "keep_packed": keep_packed,
    "loads first": [c["points"] for c in loads],
    "shared-memory pipeline": pipeline_gains,
    "no .cs (CUDA forward)": [c["points"] for c in hints],
    "no .cs (CUDA backward)": [c["points"] for c in grad_x],
    "no evict_first (Triton)": [c["points"] for c in evict],
    "PDL": points,
}
gains = {change: gained for change, gained in gains.items() if gained}
_ = bars_figure({"points of the copy gained": gains}, "Tuning changes, before and after (recorded)")
show(ranking(gains, NOISE))

# %%
# The changes at the top are the ones to make first in a kernel of your own
# (two whose medians stand closer than a second run moves a point are not
# ordered), and one listed as losing is one to measure on your own GPU before
# you keep it. Back to the start: :doc:`11_performance`.
