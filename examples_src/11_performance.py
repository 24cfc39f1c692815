r"""
Step 11: Performance
====================

RMSNorm reads each element once and writes it once: it is memory-bound, its
time set by the bytes it moves, and a copy of the same bytes is the
yardstick. This step measures how close opguide's kernels come to that floor
at every row length, what a call costs as a user makes it, and which
optimisations mattered most.

In this step you will learn:

* how to compute the floor of a memory-bound operator;
* how to time a GPU kernel so that the number means something, and why the
  time a user waits is another number;
* how to read a sweep over the row length against other libraries;
* how rows too long for one block are split over a cluster of blocks;
* what rows that are not whole 16-byte vectors cost;
* five optimisations, each with its before and after.

The GPU numbers on this page are recorded in ``docs/recorded/`` by ``python
-m guidekit.benchmark`` on a GPU; the page prints the device and date of
each, and :mod:`guidekit.recorded` (tested in ``tests/test_recorded.py``)
computes what it says of them. The CPU measurement at the end runs live, and
so does a two-point GPU check where the page is built on a GPU.
"""

# %%
# The floor
# ---------
# Per element, the forward squares and sums, then multiplies by ``1/rms`` and
# by the weight; in bfloat16 it moves four bytes. A GPU does far more
# arithmetic per byte than that in the time a byte arrives from memory, so
# the bytes set the time. The benchmark counts, for each pass, the bytes that
# no implementation can avoid moving:
import statistics

import matplotlib.pyplot as plt
import torch

from guidekit import benchmark
from guidekit.compile_checks import source_root
from guidekit.recorded import (
    describe,
    eager,
    fixed_shapes,
    lessons,
    listed,
    load,
    long_rows,
    sweeps,
    tool_outputs,
)
from opguide.triton import launch as triton_launch

# sphinx_gallery_parallel = False  # it times kernels on the CPU: runs alone
ROOT = source_root()  # the opguide source tree, wherever this script runs from
RECORDED_DIR = ROOT / "docs" / "recorded"

for pass_name in benchmark.GPU_PASSES:
    print(f"{pass_name:9} {benchmark.BYTES_MODEL[pass_name]}")
print("training  the forward's bytes plus the backward's")

# %%
# .. literalinclude:: /../guidekit/benchmark/passes.py
#    :pyobject: bytes_moved
#
# Which bandwidth to divide by? Not the data sheet's, which no kernel
# reaches. In the same run, the benchmark times ``copy (same bytes)``, a
# ``copy_`` of exactly the pass's bytes, and reports each implementation as
# the copy's time over its own: 100% is the copy's speed. A copy of one
# gigabyte is timed too, as the device's bandwidth.


def recorded(name: str) -> dict:
    """A recorded JSON result; prints where and when it was measured."""
    data = load(name, RECORDED_DIR)
    print(describe(name, data))
    return data


def show(lines: list[str]) -> None:
    """Prints lines that guidekit.recorded computed from the recorded files."""
    for line in lines:
        print(line)


sweep_file = recorded("sweep_h100.json")
sweep = sweep_file["sweep"]
ALL_ROWS = sweep["rows"]
ROWS = [r for r in ALL_ROWS if r["dtype"] == "bf16"]  # the plots; the targets use both
print(f"1 GiB copy: {sweep_file['copy_bandwidth_GBps']:.0f} GB/s")
show(sweeps.copy_lines(ROWS))

# %%
# How to time
# -----------
# There are two times, and they answer different questions.
#
# **GPU time** is how long the kernels occupy the GPU. The GPU runs
# asynchronously, so a timer around one call measures the launch. The
# benchmark records CUDA events around a batch of calls queued behind a short
# GPU spin (``torch.cuda._sleep``), so the calls run back to back. Before each
# batch it reads a buffer three times the size of L2; the calls rotate
# through at least three input sets, so no call reads what the one before it
# read. Implementations take turns, and the median batch counts:
#
# .. literalinclude:: /../guidekit/benchmark/timing.py
#    :pyobject: _timed_batch
#
# **Eager time** is the wall clock of calls made as a user makes them, back to
# back, then one synchronisation. For a small input the GPU finishes each
# kernel before the host has issued the next one, so eager time is the host's
# cost of a call: Python, the dispatcher, autograd and the launches.
#
# Does cleaning L2 matter? Two recorded runs at fixed shapes, without the
# clean (``--keep-l2``) and with it, in % of the 1 GiB copy (as are the
# fixed-shape runs of "Lessons"):


def compare(pass_name: str, impls: list, before: dict, after: dict, labels: tuple) -> list:
    """Prints % of the copy in two runs side by side; returns the changes in points."""
    changes = fixed_shapes.compare(pass_name, impls, before, after)
    show(fixed_shapes.compare_lines(pass_name, changes, labels))
    return changes


kept, cleaned = recorded("l2_keep_h200.json"), recorded("l2_clean_h200.json")
impls = ["opguide", "opguide triton", "compile(reference)", "F.rms_norm"]
l2 = compare("forward", impls, kept, cleaned, ("L2 as left", "L2 cleaned"))
print(
    f"Moved by more than a point: {', '.join(fixed_shapes.moved_by_more_than(l2)) or 'none'}; "
    f"the largest change is {fixed_shapes.largest(l2).points:+.1f} points."
)

# %%
# The cache-hint lesson below says why L2's state matters.
#
# Why three input sets? The sweep's ``x`` alone is 128 MiB in bfloat16, more
# than twice L2, yet a call that reads the set the call before it read finds
# part of it there, and how much depends on the kernel. The bfloat16 forward of the sweep below,
# recorded in the same run with one set (``--min-sets 1``), against three:
one_set = recorded("sweep_one_input_set_h100.json")["sweep"]
ONE = sweeps.fractions(one_set["rows"])
THREE = sweeps.fractions(r for r in ROWS if r["pass"] == "forward")
print(f"sets: {one_set['min_sets']} against {sweep['min_sets']}")
show(sweeps.one_set_lines(sweeps.one_set_gains(ONE, THREE)))
print("the CUDA forward slower than Liger or Quack at N =")
print(f"  with one set: {listed(sweeps.behind_peer(ONE, one_set['ns']))}")
print(f"  with three:   {listed(sweeps.behind_peer(THREE, one_set['ns']))}")

# %%
# Every row length
# ----------------
# The sweep keeps ``M * N`` fixed, so every point moves the same bytes and
# only the row length ``N`` changes. It times four passes: the forward; the
# backward (``dx`` and ``dweight`` from ``dy``); training (forward, then
# backward through autograd); and the fused residual add + RMSNorm. Next to
# opguide's CUDA and Triton kernels it times ``F.rms_norm``,
# ``torch.compile`` of the Python reference, Liger-Kernel (Triton) and Quack
# (CuTe DSL). ``python -m guidekit.benchmark --sweep`` wrote it for bfloat16
# and float16 (the plots show bfloat16). A peer that did not import is named:
print(f"{sweep['dtypes']}, M * N = {sweep['elements']} elements, N = {sweep['ns']}")
print(f"Triton {sweep_file['triton']}, CUDA {sweep_file['cuda']}")
for name, why in sweep["peers_missing"].items():
    print(f"did not import when recorded: {name} ({why})")
for name in sweep["peers_missing"]:
    if not (RECORDED_DIR / f"sweep_{name}_h100.json").exists():
        continue
    own_run = recorded(f"sweep_{name}_h100.json")
    print(f"  {own_run['command']}")
    ALL_ROWS += [r for r in own_run["sweep"]["rows"] if r["impl"] == name]
    ROWS = [r for r in ALL_ROWS if r["dtype"] == "bf16"]
    # Head to head in the same processes: opguide's CUDA kernel against the peer.
    ahead, points, lost = sweeps.head_to_head(own_run["sweep"]["rows"], name)
    print(
        f"  there, opguide's CUDA kernel at least as fast as {name} at {ahead} of {points} points"
    )
    print(f"  slower at: {listed(lost)}")
gaps = sweeps.dtype_gaps(ALL_ROWS)
if gaps:
    print(
        f"opguide, float16 against bfloat16: {statistics.median(gaps):.1f} points of the copy "
        f"apart at the median point, {max(gaps):.1f} at most ({len(gaps)} points)"
    )

# %%
# Each pass in GB/s against the row length, bfloat16; the dashed line is the
# copy of the same bytes:
COLORS = {
    "opguide": "C0",
    "opguide triton": "C1",
    "F.rms_norm": "C2",
    "compile(reference)": "C3",
    "compile(unfused reference)": "C6",
    "eager add + F.rms_norm": "C8",
    "liger": "C4",
    "quack": "C5",
    benchmark.SAME_SIZE_COPY: "black",
}
fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), layout="constrained")
handles = {}
for ax, pass_name in zip(axes.flat, benchmark.SWEEP_PASSES, strict=True):
    rows = [r for r in ROWS if r["pass"] == pass_name]
    for impl in dict.fromkeys(r["impl"] for r in rows):
        points = sorted((r["n"], r["GBps"]) for r in rows if r["impl"] == impl)
        copy = impl == benchmark.SAME_SIZE_COPY
        (line,) = ax.plot(
            *zip(*points, strict=True),
            marker="" if copy else "o",
            markersize=4,
            linestyle="--" if copy else "-",
            color=COLORS.get(impl),
            label=impl,
        )
        handles.setdefault(impl, line)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sweep["ns"], [str(n) for n in sweep["ns"]], rotation=45)
    ax.set_ylim(bottom=0)
    ax.set_title(pass_name)
    ax.set_xlabel("N (row length)")
    ax.set_ylabel("GB/s")
    ax.grid(alpha=0.3)
fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=5)
_ = fig.suptitle(f"RMSNorm, bfloat16, GPU time: {sweep_file['device']} (recorded)")

# %%
# The targets: the CUDA and the Triton kernels at 90% of the same-size copy
# or more in the forward and fused passes, 85% in the backward and training;
# and the CUDA kernel at least as fast as the fastest of Liger, Quack,
# ``F.rms_norm`` and ``torch.compile`` in the forward and in training.
AT = sweeps.at(ROWS)
BY_DTYPE = sweeps.by_dtype(ALL_ROWS)
show(sweeps.target_lines(AT, sweep["ns"]))
print("float16, the same targets:")
show(sweeps.dtype_target_lines(BY_DTYPE))
# Points where one 16-bit type meets a target and the other misses it: by a
# hair (within 2 points of each other), or by more.
misses = sweeps.target_misses(BY_DTYPE)
hair, split = sweeps.one_type_misses(misses, BY_DTYPE)
if hair:
    print(
        "On either side of a target by a hair (float16 first, within 2 points of each other): "
        + "; ".join(h[3] for h in hair)
    )
if split:
    print(
        "Surprising: a kernel meets a target in one 16-bit type and misses it in the other at "
        f"{'; '.join(h[3] for h in split)} (float16 first). Its launch and its bytes are the "
        "same for both types; the types ran in separate processes."
    )
    # A point measured again in another run, where one was recorded.
    again = recorded("sweep_backward_fp16_short_rows_again_h100.json")["sweep"]["rows"]
    show(sweeps.measured_again_lines(split, again))

# %%
# Where the targets are missed, and what could not run. Misses are likeliest
# where a row is split over blocks or programs that wait for each other
# ("Long rows"): the CUDA backward and training past 16384, Triton past 8192
# to 32768 by pass:
expected, other = sweeps.expected_misses(misses)
print(f"Expected misses: {'; '.join(expected) or 'none'}")
print(f"Other misses, not expected: {'; '.join(other) or 'none'}")
# Why the Triton backward splits rows from 16384 on: what the compiler says
# about its register kernel.
show(lessons.spill_lines(recorded("triton_registers_h100.json"))[0])
for s in sweep["skipped"]:
    print(f"could not run: {s['pass']} {s['impl']} {s['dtype']} N={s['n']}: {s['reason'][:70]}")
slow, compared = sweeps.slower_than_fastest_peer(BY_DTYPE)
print(
    f"The CUDA kernel is slower than the fastest peer at {len(slow)} of {compared} forward "
    f"and training points, both 16-bit types{': ' + ', '.join(slow) if slow else ''}."
)

# %%
# How much of this is the run? The same sweep of opguide's kernels and the
# copy, recorded again on the same kind of GPU with the same versions, against
# the run above, in points of the copy:
again_file = recorded("sweep_opguide_h100.json")
show(sweeps.rerun_lines(sweeps.rerun_changes(ALL_ROWS, again_file["sweep"]["rows"])))

# %%
# Long rows
# ---------
# A block of the CUDA forward holds at most 1024 threads × 4 vectors × 8
# bfloat16 elements of a row in registers: 32768. The backward, which holds
# ``x`` and ``dy``, holds 512 threads' worth: 16384. A longer row would have
# to be read twice, once for its sum and again for the output, the second
# time from L2 or from memory.
#
# On Hopper (``sm_90`` and later) the kernel splits such a row over a
# *thread-block cluster*: a group of blocks that run at the same time on
# neighbouring multiprocessors and can read each other's shared memory. Each
# block holds its slice of the row and the blocks exchange their partial
# sums, so the row is read once. Forward rows over 32 KiB take clusters,
# where they are faster. On older GPUs, and for long rows that are not whole
# 16-byte vectors, the kernels read the row twice. The kernels are in
# ``csrc/rms_norm/`` and ``csrc/fused_add_rms_norm/``, one family a file.
# The simplest exchange publishes each block's total in its shared memory
# and, after a cluster barrier, reads all of them (the kernels use a faster
# one, in a lesson below):
#
# .. literalinclude:: /../csrc/common/cluster.cuh
#    :language: cuda
#    :start-after: // [cluster-sum]
#    :end-before: // [cluster-sum-end]
#
# .. dropdown:: csrc/common/cluster.cuh (the cluster sums)
#
#    .. literalinclude:: /../csrc/common/cluster.cuh
#       :language: cuda
#       :caption: csrc/common/cluster.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_forward_cluster.cuh (the cluster forward)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_forward_cluster.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_forward_cluster.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward_cluster.cuh (the cluster backward)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_cluster.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_backward_cluster.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward_two_pass.cuh (the two-pass backward)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_two_pass.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_backward_two_pass.cuh
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_cluster.cuh (fused, clusters)
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cluster.cuh
#       :language: cuda
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_cluster.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_planner.cuh (the planner that chooses among them)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_planner.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_planner.cuh
#
# Triton has no clusters: its long rows are split over programs that meet
# through global memory (``opguide/triton/split.py``,
# :doc:`step 9 <09_triton_kernel>`), each writing its part of the row's sum
# into a slot and waiting for the others (a lesson below makes the wait
# cheap). The fused CUDA kernel has a cluster version (``[cluster-fused]``)
# for rows over 4096 vectors. From the sweep above, next to Quack and Liger:
lines, behind = long_rows.cluster_lines(AT, sweep["ns"])
show(lines)
print("cluster rows where Quack is faster: " + ("; ".join(behind) or "none"))
if behind:
    print(
        "The cluster kernels read each long row once, and Quack is still faster at "
        "these points: reading once is not all it takes."
    )
show(long_rows.triton_split_lines(AT, sweep["ns"]))
faster = long_rows.triton_fused_faster(AT, sweep["ns"])
if faster:
    print(
        "Surprising: the Triton fused kernel, whose programs wait for each other through "
        f"memory, is faster than the CUDA cluster kernel at N = {'; '.join(faster)}. "
        "We have not found why."
    )


# %%
# **Push the sums; do not wait at a barrier.** With ``cluster_sum`` above,
# every row stops the whole cluster at a barrier, then reads the other
# blocks' totals, a second round trip. The kernels push instead: each warp stores
# its partial sum into every block's shared memory with ``st.async``, which
# counts the bytes on that block's *mbarrier*, and a block waits only until
# its own slots are full. The backward pushes its partial of the next row
# before it waits for this row's total. Both ways, in the persistent forward
# and the backward
# (``tools/sweep_rms_norm_forward_cluster.cu``, ``..._backward_cluster.cu``):
#
# .. literalinclude:: /../csrc/common/cluster.cuh
#    :language: cuda
#    :start-after: // [cluster-push]
#    :end-before: // [cluster-push-end]
def recorded_text(name: str, device_lines: int | None = None) -> str:
    """A tool's recorded output; prints its device line(s)."""
    text = (RECORDED_DIR / name).read_text()
    for line in tool_outputs.device_lines(text)[:device_lines]:
        print(f"{name}: {line}")
    return text


# The forward's two variants loop over rows in persistent clusters, as the
# library's forward did before the next lesson.
forward_push = tool_outputs.cluster_sweep(
    recorded_text("sweep_rms_norm_forward_cluster_h100.txt"),
    "loop 1024 x 4, barrier",
    after="loop 512 x 4, push",
)
backward_push = tool_outputs.cluster_sweep(
    recorded_text("sweep_rms_norm_backward_cluster_h100.txt"), "512 x 4, 3 stages"
)
lines, older = lessons.push_lines(forward_push, backward_push, AT)
show(lines)
print(
    f"The sweep above is closer to the backward before at {', '.join(older)}: there it did not "
    "run the kernel this page builds."
    if older
    else "The sweep above ran the backward this page builds (its long-row points are closer to "
    "it than to the kernel before)."
)

# %%
# **One row per cluster, many small blocks.** A persistent cluster kernel
# runs one block of 512 threads per multiprocessor, looping over rows with
# its slice in registers; a block waiting for its cluster's sum leaves one
# row of loads in flight. The library gives each cluster one row, in small
# blocks (128 threads, a 16 KiB slice staged with ``cp.async``): eight or
# more share a multiprocessor, and while one waits the others load. The same
# tool times both, and at 16384 the one-block kernel against a cluster of two:
FORWARD_CLUSTER = (RECORDED_DIR / "sweep_rms_norm_forward_cluster_h100.txt").read_text()
VARIANT_FRACTION, LIBRARY_FRACTION = tool_outputs.cluster_variants(FORWARD_CLUSTER)
show(lessons.per_row_cluster_lines(VARIANT_FRACTION, LIBRARY_FRACTION)[0])
# The same tool also stages x one to three rows ahead inside the persistent
# loop (``staged``), which keeps more bytes in flight too:
show(lessons.staged_lines(VARIANT_FRACTION, LIBRARY_FRACTION))

# %%
# **Wait without a fence.** A split kernel that writes a part, then counts it
# in with an atomic add, needs a release fence between the two (the count
# must not be seen before the part), and a fence waits until every store the
# program has in flight has landed. The Triton split kernels send the part
# and its mark in one 64-bit store, which needs no fence. The backward also
# waits one row late: it writes its part of the next row before it waits for
# this row's total. Last, it loads two rows ahead, not one: the loads it
# waited on behind each total had only just started. Two runs of
# ``tools/sweep_triton.py split``, one with every split kernel fenced and one
# as built, each variant at the best of its launch parameters, in % of the
# 1 GiB copy:
fenced = tool_outputs.split_sweep(recorded_text("sweep_triton_split_fenced_h100.txt", 1))
slots = tool_outputs.split_sweep(recorded_text("sweep_triton_split_h100.txt", 1))
split_backward = triton_launch.SPLIT_BACKWARD
built = f"SEG {split_backward.seg} warps {split_backward.num_warps} per SM {split_backward.per_sm}"
show(lessons.split_lines(fenced, slots, built))

# %%
# Without the fence, short segments with few warps became the forward's
# fastest: more programs fit on an SM, and others load while one waits.
# The Triton long rows in the sweep at the top, in both 16-bit types:
show(long_rows.triton_long_row_lines(BY_DTYPE, sweep["ns"]))


# %%
# Odd row lengths
# ---------------
# A row of 4104 bfloat16 elements is not a whole number of 16-byte vectors,
# and a slice may start anywhere. The CUDA kernels then take the widest
# access that the row length, the stride and every pointer allow, with more
# accesses per thread the narrower they are:
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
# the same-size copy, before and after; ``F.rms_norm`` from the second run):
wide_file = recorded("sweep_odd_rows_16_byte_only_h100.json")
wide_only = {(r["pass"], r["impl"], r["n"]): r["vs_copy"] for r in wide_file["sweep"]["rows"]}
odd_file = recorded("sweep_odd_rows_h100.json")
ODD = {(r["dtype"], r["pass"], r["impl"], r["n"]): r["vs_copy"] for r in odd_file["sweep"]["rows"]}
show(long_rows.odd_row_lines(wide_only, ODD, odd_file["sweep"]["ns"]))
print("CUDA by access, both 16-bit types, lowest-highest % of the copy over N:")
show(long_rows.access_lines(ODD))
for other in ("F.rms_norm", "opguide triton"):  # behind: by more than 2 points of the copy
    show(long_rows.behind_lines(ODD, other))

# %%
# The CUDA kernels are furthest behind on rows of single elements, and on
# backward rows longer than the narrow kernel holds (512 threads of eight
# accesses), which are read twice.


# %%
# The eager call
# --------------
# The same operators, timed as a user calls them (wall clock, bfloat16), in
# microseconds per call. ``torch.ops`` is the bare operator
# ``torch.ops.opguide.rms_norm``; ``opguide`` is the Python wrapper
# :func:`opguide.rms_norm` with its argument checks. Training calls the norm
# and then ``backward``. Its ``parts`` table times pieces of such a call:
# the forward and backward operators without autograd (``ops``; ``F ops``
# are the ATen operators under ``F.rms_norm``), ``opguide::rms_norm_fwd``
# under its ``torch::autograd::Function`` of two outputs (``Function``), and
# autograd around a Python Function that launches nothing (``empty Fn``):
eager_file = recorded("eager_bf16_h100.json")
EAGER = eager_file["eager"]["rows"]
show(eager.tables(EAGER))
EAGER_FP16 = recorded("eager_fp16_h100.json")["eager"]["rows"]
show(eager.target_lines({"bf16": EAGER, "fp16": EAGER_FP16}))
# The Triton backend's default path goes through its custom operators and a
# plain Triton launch (``kernel[grid](...)``), as Liger's kernels do; the
# target above is its opt-in direct launch's:
show(eager.plain_launch_lines({"bf16": EAGER, "fp16": EAGER_FP16}))
print(eager.wrapper_line(EAGER))
show(eager.batch_lines(EAGER, AT))
# Where a training call's time goes: the operators alone, and the rest
# (autograd's graph and its backward pass), medians over the shapes.
show(eager.training_parts(EAGER)[1])
show(eager.node_lines(EAGER))

# %%
# At these sizes the host sets the time, and every layer of a call counts.
# What the library does about each:
#
# * **Autograd in C++.** The formula is a C++ kernel at the ``Autograd`` key
#   (:doc:`step 8 <08_autograd>`): registered from Python it would re-enter
#   the interpreter on every call. Its ``torch::autograd::Function`` returns
#   y alone and keeps ``inv_rms`` as a saved tensor, where
#   ``opguide::rms_norm_fwd``'s returns both; autograd wraps every output.
#   The output's last line measures that:
#
#   .. literalinclude:: /../csrc/rms_norm/rms_norm_autograd.cpp
#      :language: cpp
#      :start-after: // [autograd-rms-norm]
#      :end-before: // [autograd-rms-norm-end]
#
# * **Checks once, in C++.** For plain tensors the wrapper calls the operator
#   at once; the operator's C++ checks raise the same errors as the Python
#   ones, which run only for the other calls.
# * **Triton without the dispatcher (experimental, opt-in).**
#   ``opguide.experimental.triton_eager`` (off by default: it uses private
#   torch and Triton APIs, which its docstring lists) makes a plain eager call
#   of the Triton backend launch the kernels compiled on its first call
#   directly, with pointers as ints and no launch metadata unless a profiler
#   hook wants it (``torch.compile``, export, ``vmap``, DTensor and long rows
#   take the operators). Training calls ``Function``'s C++ ``apply`` itself.
#
# Lessons
# -------
# Five changes that moved the kernels most, each measured before and after on
# the same machine. Most come from ``tools/sweep_*``: torch-free programs
# that time variants of a kernel against a copy.


def read_sweep(name: str) -> list[dict]:
    """The data lines of a recorded sweep; prints its device line."""
    header, lines = tool_outputs.read_sweep((RECORDED_DIR / name).read_text())
    for line in header:
        print(f"{name}: {line}")
    return lines


# %%
# **Hold the row in registers, and count the registers.** Each thread loads
# its vectors of ``x`` and of the weight once and keeps them until it writes
# the output, so ``x`` is read once. The more vectors per thread, the fewer
# threads a row needs, but the more registers each one uses; past what
# ``__launch_bounds__`` allows, the compiler spills to memory. In bfloat16 a
# thread kept the floats of its first conversion alive across the reduction,
# twice the registers of the packed values; ``keep_packed`` (:doc:`step 3 <03_cuda_kernel>`) stops
# that. The forward, by vectors per thread, with and without ``keep_packed``:
packed = read_sweep("sweep_rms_norm_forward_keep_packed_h200.txt")
show(lessons.keep_packed_lines(packed))

# %%
# A test reads the machine code (``tests/test_compile_checks.py``) and fails
# if the forward spills. Registers also set how many blocks fit on a
# multiprocessor, which has 65536 of them. The fused kernel runs rows of 1024
# threads; ``__launch_bounds__(1024, 2)`` caps it at 32 registers per thread,
# so that two such blocks fit. Without the cap and with the cap:
uncapped = read_sweep("sweep_fused_add_rms_norm_uncapped_h100.txt")
capped = read_sweep("sweep_fused_add_rms_norm_h100.txt")
show(lessons.register_cap_lines(uncapped, capped))

# %%
# **All loads before the arithmetic.** A thread needs eight 16-byte vectors
# (four of ``x``, four of the weight). Written as one loop that loads a
# vector and adds its squares, the compiler made each load wait for the
# previous sum. Written as all the loads first, then the sums, the eight
# loads are in flight together; ``tests/test_compile_checks.py`` checks the
# order in the machine code:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_forward.cuh
#    :language: cuda
#    :start-at: // All loads first
#    :end-before: if constexpr (kLongRows)
#
# The CUDA forward, interleaved and then loads first:
gains = compare(
    "forward",
    ["opguide"],
    recorded("cuda_forward_loads_interleaved_h200.json"),
    recorded("cuda_forward_loads_first_h200.json"),
    ("interleaved", "loads first"),
)
print("gain: {:+.1f} to {:+.1f} points".format(*fixed_shapes.gain_range(gains)))

# %%
# **The backward: a pipeline in shared memory.** The backward reads ``x``
# and ``dy`` for a row, reduces across the block, then writes ``dx``; a
# barrier per row makes every warp wait for the slowest load. Prefetching
# the next row into registers keeps one row of loads in flight. The
# pipelined kernel keeps the next rows (``kStages``) in shared memory and
# queues their copies with ``cp.async``, which returns at once:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_backward.cuh
#    :language: cuda
#    :start-after: // [pipelined-backward-kernel]
#    :end-before: // [pipelined-backward-kernel-end]
#
# The register-prefetch kernel against the best pipelined layout, per shape:
pipelined = read_sweep("sweep_rms_norm_backward_pipelined_h200.txt")
show(lessons.pipeline_lines(pipelined)[0])

# %%
# **No cache hints when L2 holds other data.** The forward once read ``x`` and
# wrote ``y`` with ``.cs`` ("streaming") hints, and the Triton kernels asked
# for ``eviction_policy="evict_first"``, the same request: let L2 drop these
# lines first, as ``x`` and ``y`` are touched once. But with L2 full of lines
# nobody marked, as a model or the benchmark's clean leaves it, marked lines
# lose to all of them. The CUDA forward with and without the hints, then the
# Triton kernels with and without ``evict_first``:
hints = compare(
    "forward",
    ["opguide"],
    recorded("cuda_forward_hints_on_h200.json"),
    recorded("cuda_forward_hints_off_h200.json"),
    ("hints", "no hints"),
)
evict_on, evict_off = (
    recorded("triton_evict_first_on_h200.json"),
    recorded("triton_evict_first_off_h200.json"),
)
for pass_name in ("forward", "fused"):
    hints += compare(pass_name, ["opguide triton"], evict_on, evict_off, ("evict_first", "none"))
print("without the hints: {:+.1f} to {:+.1f} points".format(*fixed_shapes.gain_range(hints)))

# %%
# The library's forward kernels use no hints; the backward keeps ``.cs`` on its
# ``dx`` stores, where the same runs measured:
dx = compare(
    "backward",
    ["opguide"],
    recorded("cuda_forward_hints_on_h200.json"),
    recorded("cuda_forward_hints_off_h200.json"),
    ("hints", "no hints"),
)
most = fixed_shapes.largest(dx)
print(f"without them, the backward's largest change: {most.points:+.1f} points, at {most.where}")

# %%
# **Programmatic dependent launch.** The next kernel's blocks normally start
# only when the last block of this one ends, so the GPU drains and fills
# again at every launch. On Hopper, a kernel launched with the programmatic
# stream serialization attribute may start while the previous one drains; it
# waits (``griddepcontrol.wait``) before it reads memory, so results are
# untouched. That saves a fixed time per launch, which matters only for short
# kernels:
#
# .. literalinclude:: /../csrc/common/launch.cuh
#    :language: cuda
#    :start-after: // [pdl-device]
#    :end-before: // [pdl-device-end]
#
# The CUDA kernels with ``OPGUIDE_PDL=0`` and ``=1``:
pdl_off, pdl_on = recorded("pdl_off.json"), recorded("pdl_on.json")
pdl = []
for pass_name in ("forward", "backward"):
    pdl += compare(pass_name, ["opguide"], pdl_off, pdl_on, ("PDL off", "PDL on"))
show(lessons.pdl_lines([c.points for c in pdl], pdl_on.get("clean_l2")))

# %%
# On the CPU
# ----------
# The C++ CPU kernel on a float32 (4096, 4096) tensor, measured live while
# this page is built, next to ``copy_`` (the floor) and ``clone`` (a copy
# into new memory, which an operator that returns a new tensor also pays).
# ``opguide into existing y`` times the loop alone. The operator asks for
# transparent huge pages for large outputs (``csrc/rms_norm/rms_norm_cpu.cpp``). The
# implementations take turns; medians count:
cpu = benchmark.run_cpu_kernel()
for r in cpu["rows"]:
    print(
        f"  {r['impl']:28} {r['seconds'] * 1e3:7.2f} ms {r['GBps']:6.1f} GB/s "
        f"{r['vs_copy']:5.2f}x copy_"
    )
mine = next(r["vs_copy"] for r in cpu["rows"] if r["impl"] == "opguide (C++ kernel)")
target = cpu["target_vs_copy"]
print(
    f"On {cpu['threads']} thread(s), the operator takes {mine:.2f}x the time of copy_: the "
    + (
        f"target of at most {target}x is met."
        if mine <= target
        else f"target of {target}x is missed."
    )
)
f_rms = next(r["vs_copy"] for r in cpu["rows"] if r["impl"] == "F.rms_norm")
if f_rms > 2 * mine:
    x, w = torch.randn(4, 64), torch.randn(64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.rms_norm(x, (64,), w)
    aten = [e.key for e in prof.key_averages() if e.key.startswith("aten::")]
    print(
        f"Surprising: F.rms_norm takes {f_rms / mine:.1f}x the operator's time. On the CPU it "
        f"goes through {len(aten)} ATen operators ({', '.join(aten)}), not one kernel."
    )
rms_norm_op = torch.ops.opguide.rms_norm.default
cuda_kernel = rms_norm_op.has_kernel_for_dispatch_key(torch.DispatchKey.CUDA)
print(
    f"This build of opguide has CUDA kernels: {cuda_kernel}; "
    f"a CUDA GPU here: {torch.cuda.is_available()}"
)

# %%
# Run it yourself
# ---------------
# ``python -m guidekit.benchmark --sweep`` writes a sweep like the one above,
# ``--eager`` the eager table, ``--cpu-only`` the CPU measurement; ``--out``
# saves the result as JSON with its device, versions and date. On a machine
# with a CUDA GPU and opguide's CUDA kernels, this page also times the
# forward at two row lengths live:
if torch.cuda.is_available() and cuda_kernel:
    try:
        live = benchmark.run_sweep(
            torch.device("cuda"),
            ns=(4096, 65536),
            elements=2**24,
            passes=("forward",),
            only=("opguide", benchmark.SAME_SIZE_COPY),
        )
        for r in live["rows"]:
            if r["impl"] == benchmark.SAME_SIZE_COPY:
                continue
            print(
                f"LIVE {torch.cuda.get_device_name()}: {r['impl']} N = {r['n']}: "
                f"{100 * r['vs_copy']:.1f}% of the same-size copy"
            )
    except Exception as err:  # a live check must not break the page
        print(f"SKIPPED: the live check failed: {type(err).__name__}: {err}")
else:
    print(
        "SKIPPED: no CUDA GPU with opguide's CUDA kernels here; "
        "the GPU numbers are the recorded ones."
    )
