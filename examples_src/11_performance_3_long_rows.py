r"""
Step 11.3: Rows longer than a block
===================================

A kernel that holds a row in registers reads it once. Past a certain length
no block holds the row, and a kernel that reads it twice moves more bytes
than the floor of :doc:`11_performance` counts. This page answers one
question: how are rows too long for one block split, and what does each way
of splitting cost?

In this step you will learn:

* how a thread-block cluster shares a row between blocks (CUDA, Hopper);
* how Triton programs share a row through global memory instead;
* what pushing the sums, together with the block and cluster sizes that
  came with it, gained over waiting at a barrier, and why a Triton program
  should not fence.

The GPU numbers are **recorded** in ``docs/recorded/`` by ``python -m
guidekit.benchmark --sweep`` and by the ``tools/sweep_*`` programs; the page
prints each file's device and date. Previous page:
:doc:`11_performance_2_eager`; next: :doc:`11_performance_4_tuning`.
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
# Clusters
# --------
# A block of the CUDA forward keeps its row in registers, a few 16-byte
# vectors a thread; the backward, which holds ``x`` and ``grad_y``, keeps fewer.
# A row longer than a block holds would have to be read twice, once for its
# sum and again for the output, the second time from L2 or from memory.
#
# On Hopper (``sm_90`` and later) the kernels can split a row over a
# *thread-block cluster*: a group of blocks that run at the same time on
# neighbouring multiprocessors and can read each other's shared memory. Each
# block holds its slice of the row and the blocks exchange their partial
# sums, so the row is read once. On older GPUs, and for long rows that are
# not whole 16-byte vectors, the kernels read the row twice.
#
# Where the planner sends rows to clusters is a choice, not only where a row
# stops fitting, and only part of it is measured. The lines below read the constants of
# ``csrc/rms_norm/rms_norm_config.h`` and its fused twin. The forward's
# threshold is where the configuration starts to send rows to clusters,
# from ``tools/sweep_rms_norm_forward_cluster.cu``
# (``docs/recorded/sweep_rms_norm_forward_cluster_h100.txt``), whose lines
# further down compare one block with a cluster of two at the shortest row it
# times; rows from that length to twice it, which clusters take though one
# block could hold them, were not timed on one block. The fused operator's
# one-block kernel reads a long row twice up to its threshold, and clusters
# take the longer rows. Then the
# longest row each kernel family gives one block or one program:
from guidekit.recorded import lessons, listed, long_rows, plots, sweeps, tool_outputs
from guidekit.recorded.pages import recorded, recorded_text, rerun_noise, say, show
from opguide.triton import launch as triton_launch

show(long_rows.planner_lines())
LONGEST = {"CUDA block": sweeps.ONE_BLOCK, "Triton program": sweeps.TRITON_BLOCK}
for who, longest in LONGEST.items():
    upto = ", ".join(f"{p} {n}" for p, n in longest.items())
    say(f"rows given one {who}, up to: {upto}")

# %%
# The kernels are in ``csrc/rms_norm/`` and ``csrc/fused_add_rms_norm/``, one
# family a file. The simplest exchange publishes each block's total in its
# shared memory and, after a cluster barrier, reads all of them. A kernel that
# uses it also ends with one more cluster barrier after its last row, so that
# no block exits while another still reads its slot (the CUDA Programming
# Guide's rule for distributed shared memory; ``cluster_sum``'s caller in
# ``tools/sweep_rms_norm_forward_cluster.cu`` does so):
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
# .. dropdown:: csrc/rms_norm/rms_norm_backward_chunked.cuh (the chunked backward)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_chunked.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_backward_chunked.cuh
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
# :doc:`step 9.2 <09_triton_kernel_2_long_rows>`), each writing its part of the row's sum
# into a slot and waiting for the others. The Triton backward splits rows
# sooner than the forward: its register kernel holds ``x``, ``grad_y``, the
# weight and its gradient. The compiler's report on it, at the rows it takes:
show(lessons.spill_lines(recorded("triton_registers_h100.json"))[0])

# %%
# The long rows of the sweep of :doc:`11_performance`, bfloat16, next to
# Quack and Liger (in the fused pass, their fused kernels; ``-``: could not
# run):
sweep_file = recorded("sweep_h100.json")
sweep = sweep_file["sweep"]
ALL_ROWS = sweep["rows"]
AT = sweeps.at(r for r in ALL_ROWS if r["dtype"] == "bf16")
lines, behind = long_rows.cluster_lines(AT, sweep["ns"])
show(lines)
say("cluster rows where Quack is faster: " + ("; ".join(behind) or "none"))
show(long_rows.triton_split_lines(AT, sweep["ns"]))
faster = long_rows.triton_fused_faster(AT, sweep["ns"])
say(f"Triton fused faster than the CUDA cluster kernel by a point at: {listed(faster)}")
title = f"Long rows, bfloat16: {sweep_file['device']} (recorded)"
_ = plots.long_rows_figure(AT, sweep["ns"], title)

# %%
# Right of the dotted line, the CUDA kernels split the row over a cluster;
# the dashed line is the pass's target. The lines above name any cluster
# row where Quack is faster. The Triton kernels (``opguide triton``) at rows
# of 16384 and more, in both 16-bit types, against the targets; the
# ``program`` column says whether the pass splits the row over programs or
# gives it one:
show(long_rows.triton_long_row_lines(sweeps.by_dtype(ALL_ROWS), sweep["ns"]))

# %%
# Push the sums, or wait at a barrier
# -----------------------------------
# With ``cluster_sum`` above, every row stops the whole cluster at a barrier,
# then reads the other blocks' totals, a second round trip. The kernels push
# instead: each warp stores its partial sum into every block's shared memory
# with ``st.async``, which counts the bytes on that block's *mbarrier* (the
# `PTX ISA <https://docs.nvidia.com/cuda/parallel-thread-execution/>`__
# defines both; the `CUDA Programming Guide
# <https://docs.nvidia.com/cuda/cuda-c-programming-guide/>`__ describes
# clusters and distributed shared memory), and a
# block waits only until its own slots are full. The backward pushes its
# partial of the next row before it waits for this row's total:
#
# .. literalinclude:: /../csrc/common/cluster.cuh
#    :language: cuda
#    :start-after: // [cluster-push]
#    :end-before: // [cluster-push-end]
#
# The forward both ways, timed by ``tools/sweep_rms_norm_forward_cluster.cu``
# (both variants loop over rows in persistent clusters). The backward always
# pushes; ``..._backward_cluster.cu`` times the library's, which pushes its
# next row's partial before it waits, against a variant that pushes after the
# wait with 4 vectors a thread in 3 stages (the library picks both by row
# length), so the gap need not be the ordering's alone:
BARRIER, PUSH = "loop 1024 x 4, barrier", "loop 512 x 4, push"
forward_push = tool_outputs.cluster_sweep(
    recorded_text("sweep_rms_norm_forward_cluster_h100.txt"), BARRIER, after=PUSH
)
backward_push = tool_outputs.cluster_sweep(
    recorded_text("sweep_rms_norm_backward_cluster_h100.txt"), "512 x 4, 3 stages"
)
lines, waiting = lessons.push_lines(forward_push, backward_push, AT)
show(lines)
say(
    f"The sweep's backward is closer to the variant that pushes after the wait at "
    f"{', '.join(waiting)}."
    if waiting
    else "The sweep's long backward rows are closer to the library's, which pushes ahead."
)

# %%
# The forward's two variants differ in more than the exchange. A variant's
# name gives its block, threads x 16-byte vectors a thread, so the barrier's
# blocks are twice as wide; and their clusters, below, need not be the same
# size. Unless the record has a barrier variant of the pushing one's shape
# (the last line says), the forward's gain belongs to these changes
# together, not to the push alone:
FORWARD_TEXT = recorded_text("sweep_rms_norm_forward_cluster_h100.txt")
for n, (barrier_size, push_size) in tool_outputs.cluster_sizes(
    FORWARD_TEXT, (BARRIER, PUSH)
).items():
    if n > sweeps.ONE_BLOCK["forward"]:
        say(f"forward N = {n:6}: clusters of {barrier_size} ({BARRIER}), {push_size} ({PUSH})")
variants = tool_outputs.cluster_variants(FORWARD_TEXT)[0]
barriers = sorted({v for _, _, v in variants if "barrier" in v})
same_shape = PUSH.replace(", push", ", barrier") in barriers
say(
    f"Barrier variants in the record: {', '.join(barriers)}; "
    + ("one has the pushing one's shape." if same_shape else "none has the pushing one's shape.")
)

# %%
# One row per cluster, many small blocks
# --------------------------------------
# A persistent cluster kernel runs one block of 512 threads per
# multiprocessor, looping over rows with its slice in registers; a block
# waiting for its cluster's sum leaves one row of loads in flight. The
# library gives each cluster one row, in small blocks (128 threads, a 16 KiB
# slice staged with ``cp.async``): several share a multiprocessor, and while
# one waits the others load. The same tool times both, and at 16384 the
# one-block kernel against a cluster of two:
FORWARD_CLUSTER = recorded_text("sweep_rms_norm_forward_cluster_h100.txt")
VARIANTS, LIBRARY = tool_outputs.cluster_variants(FORWARD_CLUSTER)
lines, per_row = lessons.per_row_cluster_lines(VARIANTS, LIBRARY)
show(lines)
# The tool also stages x one to three rows ahead inside the persistent loop
# ("staged"), which keeps more bytes in flight too:
show(lessons.staged_lines(VARIANTS, LIBRARY))

# %%
# Wait without a fence
# --------------------
# A split kernel that writes a part, then counts it in with an atomic add,
# needs release ordering between the two, a fence or a release atomic (the
# count must not be seen before the part; the `memory consistency model
# <https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#memory-consistency-model>`__
# of the PTX ISA); the fenced variants below count with a release atomic
# add. Either orders every store the program has made before it against the
# count, which can make the program wait for them. The Triton split kernels
# send the part and its mark in one 64-bit relaxed atomic exchange
# (``tl.atomic_xchg`` in ``opguide/triton/split.py``), which needs no
# release ordering: a reader that sees the mark has the part in the same
# word. The backward also counts one row ahead:
# it writes its part of the next row before it waits for this row's total.
# And it loads two rows ahead, not one, so that the loads it waits on have
# had time to land. Two runs of ``tools/sweep_triton.py``: ``split-fenced``,
# every split kernel fenced, and ``split``, the slots, each variant at the best
# of its launch parameters (segment, warps), in % of the 1 GiB copy:
fenced_text = recorded_text("sweep_triton_split_fenced_h100.txt", 1)
fenced = tool_outputs.split_sweep(fenced_text)
slots = tool_outputs.split_sweep(recorded_text("sweep_triton_split_h100.txt", 1))
b = triton_launch.SPLIT_BACKWARD  # the library's launch of the split backward
built = f"SEG {b.seg} warps {b.num_warps} per SM {b.per_sm}"
show(lessons.split_lines(fenced, slots, built))

# %%
# The forward's lines name its best launch each way: with the fence, and with
# slots. The backward's line names how far the library's launch falls behind
# the best one the sweep found: the faster launches hold 32 values a thread.
# The library keeps to launches that hold 16 or fewer, the fastest of those
# at its slowest row length, and gives up the points that line prints: the
# comment on ``SPLIT_BACKWARD`` in ``opguide/triton/launch.py`` says that 32
# values a thread spilled registers on sm_80 and sm_90 with Triton 3.8 and
# 3.9, an observation that no record here shows (the sweep's own Triton is
# in its header above). At its fastest launch the split backward is above
# the backward's target at every row length this sweep times: the Triton
# backward's misses on split rows in :doc:`11_performance` are what the
# library's launch gives up, not a cost of splitting itself.
# Every change on this page, in points of the copy at each point it was
# measured. The Triton lines set each variant at its best launch, not at the
# library's; the ``push, forward`` line also carries the forward variants'
# other block and cluster sizes (above):
gains = long_rows.change_gains(forward_push, backward_push, per_row, fenced, slots)
_ = plots.gains_figure(gains, "Long-row changes (recorded)")
# Against how far a second run of the library's kernels moved a point in
# step 11's two sweeps, taken as the spread of these variants' runs too: a
# loss no larger is no measurable loss.
show(lessons.ranking_lines(gains, rerun_noise()))

# %%
# Next: :doc:`11_performance_4_tuning`, the changes that hold for rows of
# every length.
