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
import re

from guidekit.compile_checks import source_root
from guidekit.recorded.pages import (
    bars_figure,
    lines_figure,
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
from opguide.triton import launch as triton_launch


def constants(path: str) -> dict[str, int]:
    """The integer ``constexpr`` constants of one of the library's C++ headers."""
    text = (source_root() / "csrc" / path).read_text()
    return {k: int(v) for k, v in re.findall(r"constexpr\s+\w+\s+(k\w+)\s*=\s*(\d+)\s*;", text)}


rms = constants("rms_norm/rms_norm_config.h")
fused = constants("fused_add_rms_norm/fused_add_rms_norm_config.h")
holds = rms["kMaxThreadsPerRow"] * rms["kForwardRegVecs"] * 8  # 8 bfloat16 to a vector
# The longest bfloat16 row each pass gives one CUDA block (clusters past it);
# the backward's block holds kBackwardMaxThreads x 4 vectors (rms_norm_backward_planner.cuh).
ONE_BLOCK = {
    "forward": rms["kClusterForwardMinVecs"] * 8,
    "backward": rms["kBackwardMaxThreads"] * 4 * 8,
    "training": rms["kBackwardMaxThreads"] * 4 * 8,
    "fused": fused["kFusedClusterMinVecs"] * 8,
}
say(
    f"forward: one block holds {holds} elements; the planner sends rows past "
    f"{ONE_BLOCK['forward']} to clusters"
)
say("rows given one CUDA block, up to: " + ", ".join(f"{p} {n}" for p, n in ONE_BLOCK.items()))
say(
    f"rows given one Triton program, up to: forward {triton_launch.MAX_REGISTER_ROW}, "
    f"backward {triton_launch.MAX_REGISTER_ROW_BACKWARD}"
)

# %%
# The kernels are in ``csrc/rms_norm/`` and ``csrc/fused_add_rms_norm/``.
# The simplest exchange publishes each block's total in its
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
# .. dropdown:: csrc/rms_norm/rms_norm_forward.cuh (the one-block and cluster forward)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_forward.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_forward.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward_long_rows.cuh (the cluster and chunked backward)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_long_rows.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_backward_long_rows.cuh
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm.cuh (fused, one block and clusters)
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
#       :language: cuda
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_forward_planner.cuh (the forward's planner)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_forward_planner.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_forward_planner.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward_planner.cuh (the backward's planner)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_planner.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_backward_planner.cuh
#
# Triton has no clusters: its long rows are split over programs that meet
# through global memory (``opguide/triton/split.py``,
# :doc:`step 9.2 <09_triton_kernel_2_long_rows>`), each writing its part of the row's sum
# into a slot and waiting for the others. The Triton backward splits rows
# sooner than the forward: its register kernel holds ``x``, ``grad_y``, the
# weight and its gradient. The compiler's report on it at the longest rows it
# takes, bfloat16, as an eager call on an H100 launches it (``sm_90``, with
# PDL): compiled here without a GPU by ``guidekit.triton_targets`` (:doc:`step
# 9.2 <09_triton_kernel_2_long_rows>`), with the Triton installed here, whose
# counts may differ from those of the sweeps' Triton:
from guidekit import triton_targets

compiled = triton_targets.check(
    ["sm_90"], full=True, kernels=["_rms_norm_backward_kernel"], row_lengths=[2048, 4096, 8192],
    dtypes=["bfloat16"],
)  # fmt: skip
backward = [u for u in compiled if "GDC=True" in u.config]
for u in backward:
    launch = " ".join(w for w in u.config.split() if w.startswith(("BLOCK_N", "ROWS", "num_w")))
    say(f"{launch}: {u.regs} registers, {u.spills} bytes spilled")
say(f"spills: {[u.config for u in backward if u.spills] or 'none'}")

# %%
# The long rows of the sweep of :doc:`11_performance`, bfloat16, next to
# Quack and Liger (in the fused pass, their fused kernels; ``-``: could not
# run). Right of the dotted line, the CUDA kernels split the row over a
# cluster:
sweep_file = recorded("sweep_h100.json")
FUSED_PEER = {"liger (fused)": "liger", "quack (residual)": "quack"}
LONG = [
    {**r, "impl": FUSED_PEER.get(r["impl"], r["impl"])}
    for r in select(
        sweep_file["sweep"]["rows"],
        dtype="bf16",
        n=lambda n: n >= 8192,
        impl=("opguide", "opguide triton", "liger", "quack", *FUSED_PEER),
    )
]
show(table(select(LONG, n=lambda n: n >= 32768), ("pass", "n"), "impl"))
at = {(r["pass"], r["impl"], r["n"]): r["vs_copy"] for r in LONG}
behind = [
    f"{p} {n}"
    for (p, i, n), v in at.items()
    if i == "quack" and n > ONE_BLOCK[p] and v > at[(p, "opguide", n)]
]
say(f"cluster rows where Quack is faster: {', '.join(behind) or 'none'}")
title = f"Long rows, bfloat16: {sweep_file['device']} (recorded)"
_ = lines_figure(LONG, title, marks={"limit": ONE_BLOCK})

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
# length), so the gap need not be the ordering's alone. A variant's name
# gives its block, threads x 16-byte vectors a thread, and each cell its
# cluster size: the forward's variants differ in those too, so its gain
# belongs to these changes together, not to the push alone:
BARRIER, PUSH = "loop 1024 x 4, barrier", "loop 512 x 4, push"
FORWARD = tool_rows(recorded_text("sweep_rms_norm_forward_cluster_h100.txt"))
BACKWARD = tool_rows(recorded_text("sweep_rms_norm_backward_cluster_h100.txt"))
pushed = select(
    FORWARD, dtype="bf16", variant=(BARRIER, PUSH), n=lambda n: n > ONE_BLOCK["forward"]
)
ahead = select(BACKWARD, dtype="bf16", variant=("library", "512 x 4, 3 stages"))
for pass_name, rows in (("forward", pushed), ("backward", ahead)):
    say(f"{pass_name}, % of the copy (cluster size):")
    show(table(rows, ("n",), "variant", lambda r: f"{r['pct']:.0f}% ({r.get('cluster', '-')})"))

# %%
# One row per cluster, many small blocks
# --------------------------------------
# A persistent cluster kernel runs one block of 512 threads per
# multiprocessor, looping over rows with its slice in registers; a block
# waiting for its cluster's sum leaves one row of loads in flight. The
# library gives each cluster one row, in small blocks (128 threads, a 16 KiB
# slice staged with ``cp.async``): several share a multiprocessor, and while
# one waits the others load. The same tool times both, and at 16384 the
# one-block kernel against a cluster of two; its ``staged`` variants stage
# ``x`` one to three rows ahead inside the persistent loop, the best of them
# in the last column:
staged = {}
for r in select(FORWARD, variant=lambda v: v.startswith("staged")):
    if r["pct"] > staged.get((r["dtype"], r["n"]), {"pct": 0})["pct"]:
        staged[(r["dtype"], r["n"])] = {**r, "variant": "best staged"}
per_row = select(FORWARD, variant=("library", PUSH, "one row 128 x 8")) + list(staged.values())
show(table(per_row, ("dtype", "n"), "variant", lambda r: f"{r['pct']:.0f}%"))

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
# of its launch parameters (segment, warps), in % of the 1 GiB copy, then the
# library's launch of the split backward against the best:
fenced = select(tool_rows(recorded_text("sweep_triton_split_fenced_h100.txt")), best=True)
slots = tool_rows(recorded_text("sweep_triton_split_h100.txt"))
# Columns: fenced, each row waited for, and one row late; with slots the
# same two, and the backward's two rows ahead.
SHORT = {"row at a time": "each row", "one row late": "late", "two rows ahead": "ahead"}
SPLIT = [{**r, "variant": f"fenced, {SHORT[r['variant']]}"} for r in fenced] + [
    {**r, "variant": f"slots, {SHORT[r['variant']]}"}
    for r in select(slots, best=True, variant=tuple(SHORT))
]
SPLIT.sort(key=lambda r: (r["pass"], r["n"]))
show(table(SPLIT, ("pass", "n"), "variant", lambda r: f"{r['pct']:.1f}%"))
b = triton_launch.SPLIT_BACKWARD  # the library's launch of the split backward
built = select(
    slots,
    best=False,
    variant="two rows ahead",
    launch=f"SEG {b.seg} warps {b.num_warps} per SM {b.per_sm}",
)
top = {r["n"]: r["pct"] for r in select(slots, best=True, variant="two rows ahead")}
say(
    f"the library's launch ({b.seg}, {b.num_warps} warps, {b.per_sm} per SM) behind the best "
    f"launch: at most {max(top[r['n']] - r['pct'] for r in built):.1f} points"
)


# %%
# The backward's best launches hold 32 values a thread. The library keeps to
# launches that hold 16 or fewer, the fastest of those at its slowest row
# length, and gives up the points that the last line prints: the comment on
# ``SPLIT_BACKWARD`` in ``opguide/triton/launch.py`` says that 32 values a
# thread spilled registers on sm_80 and sm_90 with Triton 3.8 and 3.9, an
# observation that no record here shows (the sweep's own Triton is in its
# header above). Where the best launch meets the backward's target at a row
# length, the Triton backward's misses on split rows in :doc:`11_performance`
# are what the library's launch gives up, not a cost of splitting itself.
#
# Every change on this page, in points of the copy at each point it was
# measured (the Triton lines at each variant's best launch, not the
# library's), ranked against how far a second run of the library's kernels
# moved a point in step 11's two sweeps: a loss no larger is no measurable
# loss.
def gain(new: list[dict], old: list[dict], key=("dtype", "n")) -> list[float]:
    """Points of the copy ``new`` gains over ``old`` at each point both timed."""
    before = {tuple(r.get(k) for k in key): r["pct"] for r in old}
    return [r["pct"] - before[k] for r in new if (k := tuple(r.get(k) for k in key)) in before]


long_forward = select(FORWARD, n=lambda n: n > ONE_BLOCK["forward"])
gains = {
    "push, forward": gain(select(pushed, variant=PUSH), select(pushed, variant=BARRIER)),
    "push ahead, backward": gain(
        select(ahead, variant="library"), select(ahead, variant="512 x 4, 3 stages")
    ),
    "one row per cluster": gain(
        select(long_forward, variant="library"), select(long_forward, variant=PUSH)
    ),
    "Triton forward: slots": gain(
        select(slots, best=True, variant="row at a time"),
        select(fenced, variant="row at a time", **{"pass": "forward"}),
        ("pass", "n"),
    ),
    "Triton backward: slots, ahead": gain(
        select(slots, best=True, variant="two rows ahead"),
        select(fenced, variant="row at a time", **{"pass": "backward"}),
        ("pass", "n"),
    ),
}
_ = bars_figure({"points of the copy gained": gains}, "Long-row changes (recorded)")
show(ranking(gains, rerun_noise()))

# %%
# Next: :doc:`11_performance_4_tuning`, the changes that hold for rows of
# every length.
