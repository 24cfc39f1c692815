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
``tools/variants/``, applied to a copy of the sources and timed beside the
library as it is (``tools/gpu_records.sh 5``); each section shows its patch.
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
from guidekit.recorded import fixed_shapes, lessons, plots, recorded_dir
from guidekit.recorded import sources as record_sources
from guidekit.recorded.pages import compare, recorded, rerun_noise, say, show, tool_sweep

packed = tool_sweep("sweep_rms_norm_forward_keep_packed_h100.txt")
show(lessons.keep_packed_lines(packed))
say(lessons.keep_packed_occupancy_line(packed))

# %%
# A test reads the machine code (``tests/test_compile_checks.py``) and fails
# if the forward spills. Registers also set how many blocks fit on a
# multiprocessor, which has 65536 of them. The fused kernel's blocks have up to
# 1024 threads; ``__launch_bounds__(1024, 2)`` caps it at 32 registers per
# thread, so that two such blocks fit. The kernel's comment (:doc:`step 10
# <10_patterns>`) gives a reason for two: with one block per SM, the memory
# system idles between rows. No record here runs the kernel at one block per
# SM, so that reason is not measured; the runs below show only what the cap
# does to the registers. Without the cap and with the cap:
#
# .. dropdown:: tools/variants/fused_add_rms_norm_uncapped.patch
#
#    .. literalinclude:: /../tools/variants/fused_add_rms_norm_uncapped.patch
#       :language: diff
#       :caption: tools/variants/fused_add_rms_norm_uncapped.patch
uncapped = tool_sweep("sweep_fused_add_rms_norm_uncapped_h100.txt")
capped = tool_sweep("sweep_fused_add_rms_norm_h100.txt")
lines, cap_gain = lessons.register_cap_lines(uncapped, capped)
show(lines)

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
loads = compare(
    "forward",
    ["opguide"],
    recorded("cuda_forward_loads_interleaved_h100.json"),
    recorded("cuda_forward_loads_first_h100.json"),
    ("interleaved", "loads first"),
)
say("gain: {:+.1f} to {:+.1f} points".format(*fixed_shapes.gain_range(loads)))

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
lines, pipeline_gains = lessons.pipeline_lines(
    tool_sweep("sweep_rms_norm_backward_pipelined_h100.txt")
)
show(lines)

# %%
# Cache hints, and what L2 holds
# ------------------------------
# A CUDA load or store can carry a ``.cs`` ("streaming") hint, and a Triton
# load an ``eviction_policy="evict_first"``: the same request, to let L2
# drop these lines first, as ``x`` and ``y`` are touched once. What that
# does may depend on what else L2 holds; the runs below clean L2 before each
# timing, as the benchmark does, and give the times, not the cause. The CUDA
# forward with and without the hints, then the Triton kernels with and
# without ``evict_first``:
#
# .. dropdown:: The three patches (tools/variants/)
#
#    .. literalinclude:: /../tools/variants/cuda_forward_hints_on.patch
#       :language: diff
#       :caption: tools/variants/cuda_forward_hints_on.patch
#
#    .. literalinclude:: /../tools/variants/cuda_hints_off.patch
#       :language: diff
#       :caption: tools/variants/cuda_hints_off.patch
#
#    .. literalinclude:: /../tools/variants/triton_evict_first_on.patch
#       :language: diff
#       :caption: tools/variants/triton_evict_first_on.patch
hints_on, hints_off = (
    recorded("cuda_forward_hints_on_h100.json"),
    recorded("cuda_forward_hints_off_h100.json"),
)
hints = compare("forward", ["opguide"], hints_on, hints_off, ("hints", "no hints"))
evict_on, evict_off = (
    recorded("triton_evict_first_on_h100.json"),
    recorded("triton_evict_first_off_h100.json"),
)
evict = [
    change
    for pass_name in ("forward", "fused")
    for change in compare(
        pass_name,
        ["opguide triton"],
        evict_on,
        evict_off,
        ("evict", "none"),
    )
]
low, high = fixed_shapes.gain_range(hints + evict)
# The most a second run moved a point: step 11's rerun, whose two records
# print their lines here.
NOISE = rerun_noise()
past = sum(abs(c.points) > NOISE for c in hints + evict)
say(
    f"without the hints: {low:+.1f} to {high:+.1f} points; {past} of {len(hints + evict)} "
    f"points move by more than the {NOISE:.2f} points a second run moves one"
)

# %%
# The library's forward kernels use no hints. The line above gives the
# range of what leaving them out gained, and how many of those points moved
# by more than a second run moves one: only those show it measurably. The
# backward keeps ``.cs`` on
# its ``grad_x`` stores; the same runs measured it both ways:
grad_x = compare("backward", ["opguide"], hints_on, hints_off, ("hints", "no hints"))
most = fixed_shapes.largest(grad_x)
say(f"without them, the backward's largest change: {most.points:+.1f} at {most.where}")

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
# and ``no hints`` forward above, timed in another run. At 8192x4096 and
# 4096x8192 it reads about two points higher than in those two runs, while
# the backward as built reads within half a point of the ``hints`` run. Part
# of the forward's gains below is that gap between runs: against the
# ``loads first`` run, PDL's bfloat16 forward gains +1.0 to +2.5 points.
pdl_off, pdl_on = recorded("pdl_off.json"), recorded("pdl_on.json")
pdl = [
    change
    for pass_name in ("forward", "backward")
    for change in compare(
        pass_name,
        ["opguide"],
        pdl_off,
        pdl_on,
        ("PDL off", "PDL on"),
    )
]
# Each point below is one run. How far a second run of the library's kernels
# moved a point in step 11's two sweeps, taken as the spread of these runs
# too: a change no larger is no measurable difference.
say(f"a second run of the library's kernels moved a point by up to {NOISE:.2f} points of the copy")
show(lessons.pdl_lines([c.points for c in pdl], pdl_on.get("clean_l2"), NOISE))
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
# out gains; the register cap only where it takes registers away; for PDL:
# against its own ``PDL off`` run, so its forward points carry the gap
# between runs described above):
gains = {
    "keep_packed": lessons.keep_packed_gains(packed),
    **({"register cap": [cap_gain]} if cap_gain is not None else {}),
    "loads first": [c.points for c in loads],
    "shared-memory pipeline": pipeline_gains,
    "no .cs (CUDA forward)": [c.points for c in hints],
    "no .cs (CUDA backward)": [c.points for c in grad_x],
    "no evict_first (Triton)": [c.points for c in evict],
    "PDL": [c.points for c in pdl],
}
_ = plots.gains_figure(gains, "Tuning changes, before and after (recorded)")
show(lessons.ranking_lines(gains, NOISE))

# %%
# The printed ranking is the page's conclusion: the changes at the top are
# the ones to make first in a kernel of your own (changes that it names as
# not ordered by this run are ones to time both ways), and a change listed as
# losing by more than a second run moves a point is one to measure on your
# own GPU before you keep it.
#
# Back to the start of the step: :doc:`11_performance`.
