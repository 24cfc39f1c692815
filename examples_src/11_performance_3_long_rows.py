r"""
Step 11.3: Rows longer than a block
===================================

Part I's CUDA kernel gives a row one block and reads it once. Past a certain
length no block holds the row, and a kernel that reads it twice moves more
bytes than :doc:`11_performance`'s floor. How are such rows split, and what
does each way cost?

In this step you will learn:

* how a thread-block cluster shares a row between blocks (CUDA, Hopper), and
  Triton programs through global memory;
* what pushing the sums gained over a barrier, and why a Triton program
  should not fence.

The GPU numbers are **recorded** (``docs/recorded/``); the page prints each
file's device and date.
"""

# %%
# Without a GPU, the Triton kernels run in Triton's interpreter, selected
# before anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# Clusters
# --------
# On Hopper (``sm_90`` and later) a row longer than a block holds is split
# over a *thread-block cluster*: blocks that run at once on neighbouring
# multiprocessors and read each other's shared memory. Each holds its slice
# and they exchange partial sums, so the row is read once. On older GPUs, and
# for long rows of no whole number of 16-byte vectors, the kernels read it
# twice.
#
# The thresholds, read from ``csrc/rms_norm/rms_norm_config.h`` and its fused
# twin. The forward sends rows to clusters before one block is full; its tool
# times one block against a cluster of two only at the shortest such row
# (further down), so the longer rows one block could hold go to clusters
# untimed on one block:
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
# The simplest exchange publishes each block's total in its shared memory
# and, after a cluster barrier, reads all of them; one more barrier after the
# last row keeps a block from exiting while another reads its slot (the CUDA
# Programming Guide's rule for distributed shared memory):
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
# Triton splits long rows over programs that meet through global memory
# (:doc:`step 9.2 <09_triton_kernel_2_long_rows>`); its backward splits
# sooner, holding ``x``, ``grad_y``, the weight and its gradient. Its register
# kernel at its longest rows, bfloat16, as an H100 launches it (``sm_90``,
# PDL), compiled here by ``guidekit.triton_targets`` with the installed
# Triton:
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
# :doc:`11_performance`'s sweep at long rows, bfloat16, with Quack and Liger
# (their fused kernels in the fused pass; ``-``: could not run). Right of the
# dotted line, the CUDA kernels use clusters:
sweep_file = recorded("sweep_<gpu>.json")
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
# With ``cluster_sum``, every row stops the cluster at a barrier, then reads
# the other blocks' totals, a second round trip. The kernels push instead:
# each warp stores its partial sum into every block's shared memory with
# ``st.async``, which counts the bytes on that block's *mbarrier* (`PTX ISA
# <https://docs.nvidia.com/cuda/parallel-thread-execution/>`__), and a block
# waits only until its own slots are full. The backward pushes the next
# row's partial before it waits for this row's total:
#
# .. literalinclude:: /../csrc/common/cluster.cuh
#    :language: cuda
#    :start-after: // [cluster-push]
#    :end-before: // [cluster-push-end]
#
# The forward both ways (``tools/sweep_rms_norm_forward_cluster.cu``), and
# the library's backward against one that pushes after the wait
# (``..._backward_cluster.cu``). A name gives threads x vectors a thread, a
# cell the cluster size; these differ too, so a gain is the changes'
# together, not the push's alone:
BARRIER, PUSH = "loop 1024 x 4, barrier", "loop 512 x 4, push"
FORWARD = tool_rows(recorded_text("sweep_rms_norm_forward_cluster_<gpu>.txt"))
BACKWARD = tool_rows(recorded_text("sweep_rms_norm_backward_cluster_<gpu>.txt"))
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
# A persistent cluster kernel runs one 512-thread block per multiprocessor,
# looping over rows. The library gives each cluster one row in small blocks
# (128 threads, a 16 KiB slice staged with ``cp.async``): several share a
# multiprocessor, and while one waits for its sum the others load. Both, the
# best ``staged`` persistent variant, and at 16384 one block (``library``)
# against a cluster of two:
staged = {}
for r in select(FORWARD, variant=lambda v: v.startswith("staged")):
    if r["pct"] > staged.get((r["dtype"], r["n"]), {"pct": 0})["pct"]:
        staged[(r["dtype"], r["n"])] = {**r, "variant": "best staged"}
per_row = select(FORWARD, variant=("library", PUSH, "one row 128 x 8")) + list(staged.values())
show(table(per_row, ("dtype", "n"), "variant", lambda r: f"{r['pct']:.0f}%"))

# %%
# Wait without a fence
# --------------------
# A kernel that writes a part, then counts it in with an atomic add, needs
# release ordering between the two (the PTX ISA's `memory consistency model
# <https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#memory-consistency-model>`__),
# which orders every earlier store against the count and can make the
# program wait. The Triton split kernels send the part and its mark in one
# 64-bit relaxed ``tl.atomic_xchg``: a reader that sees the mark has the
# part. ``tools/sweep_triton.py``'s ``split-fenced`` (release atomics) and
# ``split`` (slots) runs (the backward's ``late`` loads one row ahead,
# ``ahead`` two), each at its best launch, in % of the 1 GiB copy, then the
# library's split backward against the best:
fenced = select(tool_rows(recorded_text("sweep_triton_split_fenced_<gpu>.txt")), best=True)
slots = tool_rows(recorded_text("sweep_triton_split_<gpu>.txt"))
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
# Why does the library not launch the fastest? The fastest launch at each
# row length and the library's, with the values of ``x`` a thread holds,
# compiled here for sm_80 and sm_90 by the installed Triton (the sweep's
# Triton is in its header above):
def split_backward(seg: int, warps: int, n: int) -> triton_targets.Launch:
    """The split backward's launch on bfloat16 rows of ``n``, as ``ops.py`` makes it."""
    rows, segments = 2**26 // n, n // seg
    pointers = ("*bfloat16",) * 3 + ("*float32", "*bfloat16", "*float32", "*int64")
    options = (("ALIGN", 16), ("SEG", seg), ("SP", segments), ("num_warps", warps))
    kernel = "_rms_norm_backward_split_kernel"
    return triton_targets.Launch(
        "opguide.triton.split", kernel, (*pointers, rows, n, segments), options
    )


fastest = {r["n"]: r for r in select(slots, best=True, variant="two rows ahead")}
launches = {}  # (who, N, SEG, warps) -> its launch
for n, r in sorted(fastest.items()):
    seg, warps = (int(w) for w in r["launch"].split()[1:4:2])  # "SEG 4096 warps 4 ..."
    launches[("fastest", n, seg, warps)] = split_backward(seg, warps, n)
    launches[("library", n, b.seg, b.num_warps)] = split_backward(b.seg, b.num_warps, n)
usage = triton_targets.check(["sm_80", "sm_90"], launches=list(launches.values()))
compiled_rows, spilled = [], {"fastest": set(), "library": set()}
for (who, n, seg, warps), launch in launches.items():
    held = f"{who} {seg}/{warps}w, {seg // (32 * warps)} a thread"
    for u in (u for u in usage if u.config == launch.config()):
        compiled_rows.append({"n": n, "launch": held, "target": u.target, "u": u})
        if u.spills:
            spilled[who].add(u.target)
cell = lambda r: f"{r['u'].regs} regs, {r['u'].spills} B spilled"  # noqa: E731
show(table(compiled_rows, ("n", "launch"), "target", cell))
for who, targets in spilled.items():
    say(f"the {who} launches spill on: {', '.join(sorted(targets)) or 'neither'}")
only_fastest = sorted(spilled["fastest"] - spilled["library"])
say(
    f"So the library's launch gives up those points not to spill on {', '.join(only_fastest)}."
    if only_fastest
    else "Here the fastest launches spill no more than the library's: this Triton shows no "
    "reason for the library's launch."
)


# %%
# Where the best launch meets the backward's target, the Triton backward's
# misses on split rows in :doc:`11_performance` are what the library's launch
# gives up, not a cost of splitting.
#
# Every change on this page, in points of the copy gained at each point
# measured (the Triton lines at each variant's best launch), ranked against
# how far a second run moved a point in step 11's two sweeps:
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
