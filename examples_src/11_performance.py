r"""
Step 11: Performance against the memory floor
=============================================

RMSNorm reads each element once and writes it once: it is memory-bound, its
time set by the bytes it moves: those bytes are its floor, and a copy of the
same bytes is the yardstick. This page answers one question: how close do
opguide's kernels come to that yardstick, and to the other libraries, at
every row length?

In this step you will learn:

* how to compute the floor of a memory-bound operator;
* how to time a GPU kernel so that the number means something;
* how to read a sweep over the row length against other libraries;
* what rows that are not whole 16-byte vectors cost.

Step 11 has four pages, each answering one question:

* this page: how fast, against the floor and the peers;
* :doc:`11_performance_2_eager`: what a call costs as a user makes it;
* :doc:`11_performance_3_long_rows`: how rows too long for one block are split;
* :doc:`11_performance_4_tuning`: which tuning changes moved the kernels.

The GPU numbers on these pages are **recorded**: ``python -m
guidekit.benchmark`` and the ``tools/sweep_*`` programs wrote them on a GPU
into ``docs/recorded/``. Each page prints the device and the date of every
file it reads, and :mod:`guidekit.recorded` (tested in
``tests/test_recorded.py``) computes what the page says of them. The CPU
measurement at the end runs live, and so does the forward at two row
lengths where the page is built on a GPU.
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
# The floor
# ---------
# Per element, the forward squares and sums, then multiplies by ``1/rms`` and
# by the weight; in bfloat16 it moves four bytes. A GPU does far more
# arithmetic per byte than that in the time a byte arrives from memory, so
# the bytes set the time. The benchmark counts, for each pass, the bytes that
# no implementation can avoid moving:

# sphinx_gallery_parallel = False  # it times kernels on the CPU: runs alone
from guidekit import benchmark
from guidekit.recorded import listed, plots, sweeps
from guidekit.recorded.long_rows import (
    access_lines,
    behind_lines,
    odd_row_lines,
    slower_as_built,
)
from guidekit.recorded.pages import (
    compare,
    cpu_lines,
    live_forward_lines,
    recorded,
    say,
    show,
    sweep_rows,
)

for pass_name in benchmark.GPU_PASSES:
    say(f"{pass_name:9} {benchmark.BYTES_MODEL[pass_name]}")
say("training  the forward's bytes plus the backward's")

# %%
# .. literalinclude:: /../guidekit/benchmark/passes.py
#    :pyobject: bytes_moved
#
# Which bandwidth to divide by? Not the data sheet's, which no kernel
# reaches. In the same run, the benchmark times ``copy (same bytes)``, a
# ``copy_`` of exactly the pass's bytes, and reports each implementation as
# the copy's time over its own: 100% is the copy's speed, and a kernel that
# moves its bytes faster than torch's ``copy_`` scores more. A copy of one
# gigabyte is timed too, as the device's bandwidth. The last line below says
# how much the copy's own speed moves between row lengths.
sweep_file = recorded("sweep_h100.json")
sweep = sweep_file["sweep"]
say(f"1 GiB copy: {sweep_file['copy_bandwidth_GBps']:.0f} GB/s")
show(sweeps.copy_lines([r for r in sweep["rows"] if r["dtype"] == "bf16"]))

# %%
# How to time
# -----------
# The GPU runs asynchronously, so a timer around one call measures the
# launch. The benchmark records CUDA events around a batch of calls queued
# behind a short GPU spin (``torch.cuda._sleep``), so the calls run back to
# back: this is **GPU time**, how long the kernels occupy the GPU. Before
# each batch it reads a buffer three times the size of L2; the calls rotate
# through at least three input sets, so no call reads what the one before it
# read. Implementations take turns, and the median batch counts:
#
# .. literalinclude:: /../guidekit/benchmark/timing.py
#    :pyobject: _timed_batch
#
# The time a user waits for one call is another number, which
# :doc:`11_performance_2_eager` measures.
#
# Does cleaning L2 matter? Two recorded runs at fixed shapes, without the
# clean (``--keep-l2``) and with it, in % of the 1 GiB copy:
kept, cleaned = recorded("l2_keep_h100.json"), recorded("l2_clean_h100.json")
impls = ["opguide", "opguide triton", "compile(reference)", "F.rms_norm"]
l2 = compare("forward", impls, kept, cleaned, ("L2 as left", "L2 cleaned"))
moved = [c for c in l2 if abs(c.points) > 1]
say(f"Moved by more than a point: {listed(sorted({c.impl for c in moved}))}")
say(f"The largest change: {max(l2, key=lambda c: abs(c.points)).points:+.1f} points")

# %%
# Why three input sets? The sweep's ``x`` alone is larger than L2 (its size
# is printed below), yet a call that reads the set the call before it read
# may find part of it there, and how much depends on the kernel. The
# bfloat16 forward of the sweep below, recorded by a separate command with
# one set (``--min-sets 1``), against three:
one_set = recorded("sweep_one_input_set_h100.json")["sweep"]
ONE = sweeps.fractions(one_set["rows"])
FORWARD = [r for r in sweep["rows"] if (r["dtype"], r["pass"]) == ("bf16", "forward")]
THREE = sweeps.fractions(FORWARD)
say(f"x in bfloat16: {sweep['elements'] * 2 / 2**20:.0f} MiB per input set")
say(f"sets: {one_set['min_sets']} against {sweep['min_sets']}")
show(sweeps.one_set_lines(sweeps.one_set_gains(ONE, THREE)))
say("the CUDA forward slower than Liger or Quack at N =")
say(f"  with one set: {listed(sweeps.behind_peer(ONE, one_set['ns']))}")
say(f"  with three:   {listed(sweeps.behind_peer(THREE, one_set['ns']))}")

# %%
# The last two lines say where the order of the kernels depends on the
# number of input sets.
#
# Every row length
# ----------------
# The sweep keeps ``M * N`` fixed, so every point moves the same bytes and
# only the row length ``N`` changes. It times four passes: the forward; the
# backward (``grad_x`` and ``grad_weight`` from ``grad_y``); training (forward, then
# backward through autograd); and the fused residual add + RMSNorm. Next to
# opguide's CUDA and Triton kernels it times ``F.rms_norm``,
# ``torch.compile`` of the Python reference, Liger-Kernel (Triton) and Quack
# (CuTe DSL), and vLLM's fused kernel where it imports, in bfloat16 and
# float16. A peer that did not import is named, with its own run where one
# was recorded:
say(f"{sweep['dtypes']}, M * N = {sweep['elements']} elements")
say(f"N = {sweep['ns']}")
say(f"Triton {sweep_file['triton']}, CUDA {sweep_file['cuda']}")
ALL_ROWS = sweep_rows(sweep_file)
ROWS = [r for r in ALL_ROWS if r["dtype"] == "bf16"]
AT, BY_DTYPE = sweeps.at(ROWS), sweeps.by_dtype(ALL_ROWS)

# %%
# Each pass in GB/s against the row length, bfloat16; the dashed line is the
# copy of the same bytes:
title = f"RMSNorm, bfloat16, GPU time: {sweep_file['device']} (recorded)"
_ = plots.sweep_figure(ROWS, sweep["ns"], title)

# %%
# The targets, in % of the same-size copy, apply to both of opguide's
# kernels; the CUDA kernel should also be at least as fast as the fastest of
# Liger, Quack, ``F.rms_norm`` and ``torch.compile`` in the forward and in
# training, and, in the fused residual-add + RMSNorm, as Liger's and Quack's
# fused kernels and ``torch.compile`` of the two operations. A second run of
# the sweep (further down) need not give the CUDA kernel the same numbers as
# the first. Where it and the fastest peer are no further apart than the
# CUDA kernel's largest change in that pass between the two runs (printed
# first; the peers ran once), the last column says ``tie``. bfloat16, every point:
say("targets: " + ", ".join(f"{p} {100 * t:.0f}%" for p, t in sweeps.TARGETS.items()))
again_file = recorded("sweep_opguide_h100.json")
RERUN = sweeps.rerun_changes(ALL_ROWS, again_file["sweep"]["rows"])
SPREAD = sweeps.rerun_spread(RERUN)
say(
    "a tie within: "
    + ", ".join(f"{p} {SPREAD[p]:.2f} points" for p in sweeps.PASS_PEERS if p in SPREAD)
)
show(sweeps.target_lines(AT, sweep["ns"], SPREAD))
say("float16, the same targets:")
show(sweeps.dtype_target_lines(BY_DTYPE))
misses = sweeps.target_misses(BY_DTYPE)
expected, other = sweeps.expected_misses(misses)
say(f"Misses on rows split over blocks or programs: {'; '.join(expected) or 'none'}")
say(f"Misses on rows one block or program holds: {'; '.join(other) or 'none'}")
against = sweeps.slower_than_fastest_peer(BY_DTYPE, SPREAD)
slow = against["SLOWER"]
say(
    f"The CUDA kernel against the fastest peer, at {sum(map(len, against.values()))} forward, "
    "training and fused points, both 16-bit types: "
    f"faster at {len(against['faster'])}, a tie at {len(against['tie'])}, "
    f"slower at {len(slow)}"
)
say(f"  slower: {listed(slow)}")
say(f"  a tie: {listed(against['tie'])}")
behind = sorted({s.split()[1] for s in slow})
if behind:
    say(f"The passes where a peer is faster somewhere: {', '.join(behind)}; the table above")
    say("  names that peer at each N (the 'fastest peer' column).")
gaps = sweeps.dtype_gaps(ALL_ROWS)
say(f"float16 against bfloat16, opguide: at most {max(gaps):.1f} points apart")
why_not: dict[str, list[str]] = {}  # each reason once, with the points it stopped
for s in sweep["skipped"]:
    why_not.setdefault(s["reason"], []).append(f"{s['pass']} {s['impl']} {s['dtype']} N={s['n']}")
for reason, where in why_not.items():
    say(f"could not run ({len(where)}): {listed(where)}")
    say(f"  {reason}")

# %%
# The lines above are the conclusion: where a target is missed, or a peer is
# faster, they name the point. Rows longer than a block holds are split over
# blocks or programs that wait for each other:
# :doc:`11_performance_3_long_rows` shows how. The CUDA forward sends to
# clusters some rows that one block could still hold (that page prints the
# two lengths); the longest such row of this sweep runs on a cluster by that
# choice, which no record times on one block. The Triton backward's misses on
# split rows come from its launch, not from splitting itself: in that page's
# sweep of the split kernels ("Wait without a fence"), the same backward at
# its fastest launch, which holds 32 values a thread, is above the backward's
# target at every row length timed. The library keeps to 16 values a thread
# or fewer, because at 32 the kernel spills registers with Triton 3.8 and 3.9
# (the comment on ``SPLIT_BACKWARD`` in ``opguide/triton/launch.py``), which
# no record here shows; the sweep's own Triton is printed above.
#
# How much of this is the run? The same sweep of opguide's kernels and the
# copy, recorded again on the same kind of GPU with the same versions
# (``sweep_opguide_h100.json``, read above), against the run above, in points
# of the copy:
show(sweeps.rerun_lines(RERUN))

# %%
# A difference between two kernels smaller than these changes is not one to
# read much into; the comparison with the peers above counts it as a tie.
#
# Odd row lengths
# ---------------
# A row of 12300 bfloat16 elements (24600 bytes) is not a whole number of
# 16-byte vectors, and a slice may start anywhere. The CUDA kernels then choose
# the widest access that the row length, the stride and every pointer allow,
# with more accesses per thread the narrower they are, for rows up to the
# length the narrow kernels hold. The backward's narrow kernels hold shorter
# rows than that (``narrow_backward_plan`` in
# ``csrc/rms_norm/rms_norm_planner.cuh``, below the lines shown, with
# ``narrow_backward_regs`` in ``csrc/rms_norm/rms_norm_config.h``); a longer
# odd row's backward takes the chunked kernel, which reads the row twice. The
# table below gives each row length's before and after:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_planner.cuh
#    :language: cuda
#    :start-after: // [vector-width]
#    :end-before: // [vector-width-end]
#
# Triton vectorises only what it can prove, and it proves that ``N`` is a
# multiple of 16 by specialising on it:
#
# .. literalinclude:: /../opguide/triton/launch.py
#    :language: python
#    :pyobject: align
#
# Two recorded runs, with 16-byte accesses only and as built (bfloat16, % of
# the same-size copy, before and after; ``F.rms_norm`` from the second run;
# ``-``: a point the run did not record, such as ``F.rms_norm`` in the fused
# pass, which it has no kernel for):
#
# .. dropdown:: tools/variants/odd_rows_16_byte_only.patch (16-byte accesses or one element)
#
#    .. literalinclude:: /../tools/variants/odd_rows_16_byte_only.patch
#       :language: diff
#       :caption: tools/variants/odd_rows_16_byte_only.patch
wide_file = recorded("sweep_odd_rows_16_byte_only_h100.json")
WIDE_ROWS = sweeps.by_dtype(wide_file["sweep"]["rows"])
WIDE = {k[1:]: r["vs_copy"] for k, r in WIDE_ROWS.items()}
odd_file = recorded("sweep_odd_rows_h100.json")
ODD = {k: r["vs_copy"] for k, r in sweeps.by_dtype(odd_file["sweep"]["rows"]).items()}
show(odd_row_lines(WIDE, ODD, odd_file["sweep"]["ns"]))
show(slower_as_built(WIDE, ODD))
title = f"Odd row lengths, bfloat16: {odd_file['device']} (recorded)"
_ = plots.odd_rows_figure(WIDE, ODD, odd_file["sweep"]["ns"], title)

# %%
# The plot's crosses are the CUDA kernels with 16-byte accesses only, where
# they can take the row at all. By access width, both 16-bit types, the
# lowest and highest % of the copy (the backward and training points whose
# backward takes the chunked kernel are left out: that kernel reads the row
# twice whatever the access), and where the CUDA kernels trail by more than 2
# points:
show(access_lines(ODD))
for other_impl in ("F.rms_norm", "opguide triton"):
    show(behind_lines(ODD, other_impl))

# %%
# A narrower access takes more instructions per byte; rows of an odd number
# of elements take the narrowest, two bytes. Where the ranges above do not
# fall with the width, or a point trails its 16-byte-only build, the
# instruction count is not what limits that kernel. The fused kernel's 4-byte
# path is such a point: at the one row length measured with it (2050), it is
# slower in bfloat16 than the single elements that the 16-byte-only build
# takes there, and in both 16-bit types slower than its own single elements
# at 2049. For the fused kernel at that row length the planner's 4-byte
# choice is a measured loss; these runs do not time its cause.
#
# On the CPU
# ----------
# The C++ CPU kernel on a float32 (4096, 4096) tensor, measured live while
# this page is built, next to ``copy_`` (one read and one write of every
# element, into a tensor that exists: the floor, unless a row that moves at
# least as many bytes beats it; a line under the table says which) and
# ``clone`` (a copy into newly allocated memory). An operator that returns a new tensor
# allocates its output too, but what the new pages cost depends on how it
# asks for them: this one asks for transparent huge pages for large outputs
# (``csrc/rms_norm/rms_norm_cpu.cpp``), so it can beat ``clone``.
# ``opguide into existing y`` times the loop alone.
# The implementations take turns; medians count:
cpu = benchmark.run_cpu_kernel()
show(cpu_lines(cpu))
_ = plots.timings_figure(
    {
        f"float32 {tuple(cpu['shape'])}: ms a call, median of {cpu['rounds']} rounds": {
            r["impl"]: [1e3 * r["seconds"]] for r in cpu["rows"]
        }
    },
    f"The C++ CPU kernel, {cpu['threads']} thread(s) (measured live)",
)

# %%
# Run it yourself
# ---------------
# ``python -m guidekit.benchmark --sweep`` writes a sweep like the one above,
# ``--eager`` the eager table of :doc:`11_performance_2_eager`,
# ``--cpu-only`` the CPU measurement; ``--out`` saves the result as JSON
# with its device, versions and date. On a machine with a CUDA GPU and
# opguide's CUDA kernels, this page also times the forward at two row
# lengths live, on as many elements a call as the sweep above, each beside
# the sweep's number and the GPU it was recorded on (on the same GPU model,
# another run: expect a few points of difference, more where other work
# shares the GPU; on another GPU the two need not agree):
show(live_forward_lines(record=sweep_file))

# %%
# Next: :doc:`11_performance_2_eager`, what a call costs when the host, not
# the GPU, sets the time.
