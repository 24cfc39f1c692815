r"""
Step 9.2: Rows too long for one program
=======================================

The Triton kernels of :doc:`step 9 <09_triton_kernel>` hold whole rows in
registers, up to ``launch.MAX_REGISTER_ROW`` elements in the forward and
``launch.MAX_REGISTER_ROW_BACKWARD`` in the backward (the cell "Which
kernel takes which row" prints both). A longer row does not fit in one
program's registers. This step takes such rows: split over several programs
that meet through global memory, and, past what a GPU can run at once,
walked in chunks by one program.

In this step you will learn:

* how to split a row over programs that exchange their partial sums, and
  why waiting for one another ends, without a cluster's guarantees;
* how the backward splits its rows, and counts in the next row before it waits;
* what takes a row of more segments than the GPU has multiprocessors;
* how fast the split kernels run on a GPU, against the CUDA kernels'
  clusters (recorded);
* how to compile the kernels for GPUs you do not have, and read their
  registers and spills.

Split rows
----------
A row too long for one program is split over ``S`` programs, each holding
``SEG`` columns of it, which meet through global memory: each writes its part
of the row's sum into a slot of its own, marked as written in the same 64-bit
store, and waits until all the row's slots are marked. Then each adds all the
parts in the same order, so every segment uses the same total, the same on
every run. This is what a thread-block cluster does for the CUDA kernels
(:doc:`step 11.3 <11_performance_3_long_rows>`), without the cluster's
guarantee that the programs run at the same time. The comment says why the
wait still ends. Its argument rests on an order that CUDA does not promise:
that the GPU starts no program later than one of higher index. NVIDIA GPUs
do so in practice, and CUB's single-pass scan relies on the same order
(`agent_scan.cuh
<https://github.com/NVIDIA/cccl/blob/main/cub/cub/agent/agent_scan.cuh>`_:
"Blocks are launched in increasing order"). The forward and fused kernels
run one program per segment, the backward one per segment of a group of
rows:

.. literalinclude:: /../opguide/triton/split.py
   :language: python
   :caption: opguide/triton/split.py

In the backward, program ``(g, s)`` takes segment ``s`` of the rows ``g``,
``g + G``, ``g + 2G``, ..., adds its segment of ``grad_weight`` over them into
row ``g`` of the buffer that ``_grad_weight_sum_kernel`` sums (:doc:`step 9
<09_triton_kernel>`), and counts one row ahead: it writes its part of the
next row's sum before it waits for this row's total, and it has already
started the loads of the row after that (``two rows ahead`` in the recorded
sweep of step 11.3, where ``one row late``, which loads one row ahead, is
slower).

Each planner of ``launch.py`` chooses a split only while the row's segments
fit on the GPU at once, one per multiprocessor (SM) at most:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: Split

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: _split_or_chunked

The fused kernel's segments are sized for 16-bit rows; its float32 rows
take half as many columns, so that a thread holds as many bytes:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: split_for

Rows longer still: chunks
-------------------------
A row of more segments than the GPU has SMs is not split: one program walks
it in chunks of ``BLOCK_N``, twice, once for the sum of squares and once to
write the output. That kernel uses the autotuner, with a single config under
the interpreter, where timing means nothing and costs a lot:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: Chunked

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _long_row_configs

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _rms_norm_forward_chunked_kernel

The backward's chunked kernels do the same: one program per row walks it
twice, for the row's sum and for ``grad_x``, and ``grad_weight`` is summed over
strips of columns:

.. literalinclude:: /../opguide/triton/backward.py
   :language: python
   :pyobject: _rms_norm_backward_chunked_kernel

.. literalinclude:: /../opguide/triton/backward.py
   :language: python
   :pyobject: _grad_weight_columns_kernel
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
# Which kernel takes which row
# ----------------------------
# The planners' choice at a few row lengths, on this machine. Under the
# interpreter, programs run one after another, so a split row has one
# segment, and the chunked kernels start past ``2**17`` elements. On a GPU
# they take rows of more segments than it has SMs: the last length printed
# is the shortest ``2**k + 3`` that all three planners chunk here.
import torch

import opguide
from guidekit.recorded.pages import lines_figure, ranges, recorded, say, select, show, versus
from opguide import rms_norm_reference
from opguide import triton as triton_ops
from opguide.testing import TOLERANCES as TOL

launch = triton_ops.launch
print("MAX_REGISTER_ROW =", launch.MAX_REGISTER_ROW)
print("MAX_REGISTER_ROW_BACKWARD =", launch.MAX_REGISTER_ROW_BACKWARD)
device = torch.device("cuda" if not triton_ops.INTERPRET else "cpu")
PLANNERS = (launch.forward_config, launch.backward_config, launch.fused_config)


def all_chunked(n: int) -> bool:
    return all(isinstance(plan(2, n, torch.float32, device), launch.Chunked) for plan in PLANNERS)


chunked_n = next(2**k + 3 for k in range(17, 30) if all_chunked(2**k + 3))
for n in sorted({8192, 8193, 16385, 20000, 2**17, 2**17 + 3, chunked_n}):
    forward = launch.forward_config(8, n, torch.float32, device)
    backward = launch.backward_config(8, n, torch.float32, device)
    kinds = f"forward {type(forward).__name__:9} backward {type(backward).__name__}"
    print(f"N = {n:6}: {kinds}")

# %%
# Checking the long rows
# ----------------------
# Long rows, of 20000 elements, ``2**17 + 3`` and the first length that all
# three planners chunk (the same as ``2**17 + 3`` under the interpreter; the
# cell above says which kernels take them here),
# through the forward, the backward and the fused operator of :doc:`step 10
# <10_patterns>`, against the reference, in float32:
torch.manual_seed(0)
for n in sorted({20000, 2**17 + 3, chunked_n}):
    x = torch.randn(2, n, device=device, requires_grad=True)
    w = torch.randn(n, device=device, requires_grad=True)
    grad = torch.randn(2, n, device=device)
    y = opguide.rms_norm(x, w, backend="triton")
    torch.testing.assert_close(y, rms_norm_reference(x, w), **TOL[torch.float32])
    y.backward(grad)
    grad_x, grad_weight = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    rms_norm_reference(x, w).backward(grad)
    torch.testing.assert_close(grad_x, x.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad_weight, w.grad, atol=1e-4, rtol=1e-4)
    residual = torch.randn(2, n, device=device)
    h = x.detach() + residual
    fused = opguide.fused_add_rms_norm_
    out, _ = fused(x.detach(), residual, w.detach(), 1e-6, backend="triton")
    torch.testing.assert_close(residual, h)
    expected = rms_norm_reference(h, w.detach())
    torch.testing.assert_close(out, expected, **TOL[torch.float32])
    err = (y - rms_norm_reference(x, w)).abs().max().item()
    print(f"N = {n}: forward, backward and fused match; max |y error| = {err:.1e}")

# %%
# Under the interpreter each split row above is one segment, so the wait
# between a row's programs does not run; on a GPU the split kernels run the
# same rows with several segments. That run is in the :doc:`Building page's GPU
# records </building>`: the GPU suite's gallery log, in which this step
# passed, and a site build on a GPU.

# %%
# How fast, on a GPU (recorded)
# -----------------------------
# The recorded sweep of :doc:`step 9 <09_triton_kernel>`, at the row lengths
# past each pass's register kernel only: the split kernels of this page
# against the CUDA kernels, which split a long row over a thread-block cluster
# (:doc:`step 11.3 <11_performance_3_long_rows>`), in % of a copy of the same
# bytes, both 16-bit types. The segments of the sweep's longest row, computed
# from the launch rules, say which kernel ran: the split one wherever the
# GPU has at least that many SMs. The split backward runs at the library's
# launch, segments of 4096 on 16 warps, 8 values each of ``x`` and ``grad_y``
# a thread (the comment on ``SPLIT_BACKWARD`` in ``opguide/triton/launch.py``).
# :doc:`Step 11.3 <11_performance_3_long_rows>` times the split backward at
# its fastest launches too, which hold 32 values a thread and spilled
# registers on sm_80 and sm_90 with Triton 3.8 and 3.9 (the same comment), and
# prints how far the library's launch stays behind them.
record = recorded("sweep_opguide_h100.json")
say(f"Triton {record['triton']}, CUDA {record['cuda']}")
longest = max(record["sweep"]["ns"])
# The fused kernel's limit depends on the dtype: the longest 16-bit row it
# keeps in registers, asked of its planner.
cpu = torch.device("cpu")
fused_registers = [
    n
    for n in (2**k for k in range(8, 20))
    if isinstance(launch.fused_config(1, n, torch.bfloat16, cpu), launch.Registers)
]
LONGER_THAN = {
    "forward": launch.MAX_REGISTER_ROW,
    "backward": launch.MAX_REGISTER_ROW_BACKWARD,
    "fused": max(fused_registers),
}
SPLITS = {
    "forward": launch.SPLIT_FORWARD,
    "backward": launch.SPLIT_BACKWARD,
    "fused": launch.SPLIT_FUSED,
}
for pass_name, split in SPLITS.items():
    print(
        f"{pass_name:8} N > {LONGER_THAN[pass_name]:5}: split; N = {longest} is "
        f"{split.segments(longest)} segments of {split.seg}"
    )
ROUTES = ("opguide triton", "opguide")  # Triton, and the CUDA kernels
rows = [
    r
    for r in select(record["sweep"]["rows"], impl=ROUTES, **{"pass": tuple(LONGER_THAN)})
    if r["n"] > LONGER_THAN[r["pass"]]
]
fig = lines_figure(rows, f"Recorded on {record['device']}", series=("impl", "dtype"))
show(ranges(rows, ("pass", "dtype", "impl")))

# %%
# Each point of the sweep is the median of one run's batches; the sweep was
# not repeated and records no spread, so a small gap may be noise: a gap
# under 1 point of the copy counts as a tie.
for pass_name, floor in LONGER_THAN.items():
    say(f"{pass_name}, N > {floor}: " + versus(select(rows, **{"pass": pass_name}), *ROUTES))

# %%
# Compiled for seven GPUs, without running them
# ----------------------------------------------
# Registers set where a row stops fitting in one program, and they differ
# from GPU to GPU. Triton compiles for any GPU it is told about, not only the
# one present: ``triton.compile`` with a ``GPUTarget`` goes down to AMD's
# ``hsaco`` or NVIDIA's ``cubin`` on a machine with no GPU at all.
# ``guidekit/triton_targets/`` does so for every launch configuration the
# library's launch code chooses (it calls the operators on fake CUDA tensors
# and records their launches), and reads registers, spills and shared memory
# from the machine code. Here, the forward's split kernel on each target. By
# default ``check`` takes a representative few of the kernel's launches, not
# every one (``triton_targets.representative``): the launch that holds the
# most bytes per thread, the one that holds the fewest, the one with the
# largest staged block, and the heaviest with GDC where there is one. The
# line under the table says which dtypes that gave.
# ``OPGUIDE_TRITON_TARGETS_FULL=1`` takes every launch:
import triton  # noqa: E402

from guidekit import triton_targets  # noqa: E402
from guidekit.triton_targets.targets import FULL_ENV  # noqa: E402

full = os.environ.get(FULL_ENV, "0") == "1"
results = triton_targets.check(kernels=["_rms_norm_forward_split_kernel"], full=full)
header = f"{'target':8} {'x':8} {'launch':24} {'regs':>4} {'spill':>5} {'shared':>6}"
print(header, "budget", f"(Triton {triton.__version__})")


def knobs(config: str) -> str:
    """The words of a compiled variant's configuration that set its launch shape."""
    return " ".join(w for w in config.split() if w.startswith(("BLOCK_N", "ROWS", "SEG", "num_w")))


for u in results:
    print(
        f"{u.target:8} {u.dtypes[:7]:8} {knobs(u.config):24} {u.regs:>4} "
        f"{u.spills + u.sgpr_spills:>5} {u.shared:>6} "
        f"{u.reg_budget}r/{u.smem_budget // 1024}K {u.status}"
    )
statuses = ("ok", "spill", "over budget", "error")
print(
    f"{len(results)} compiles: "
    + ", ".join(f"{sum(u.status == s for u in results)} {s}" for s in statuses)
)
launches = sorted({knobs(u.config) for u in results})
checked = "every launch" if full else "the representative launches"
x_dtypes = sorted({u.dtypes.split(",")[0] for u in results})
print(
    f"checked {checked} of the launch code: x in {', '.join(x_dtypes)}; "
    + (
        f"one launch configuration, {launches[0]}."
        if len(launches) == 1
        else f"{len(launches)} launch configurations: {'; '.join(launches)}."
    )
)
for name, target in triton_targets.TARGETS.items():
    mine = [u for u in results if u.target == name]
    fit, refused = sum(u.ok for u in mine), sum(u.status == "error" for u in mine)
    print(f"{name:8} ({target.gpu}): {fit} of {len(mine)} fit, {refused} refused")
print(
    "GPU on this machine:",
    torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
)

# %%
# What this shows: the kernel compiles for these GPUs, and each compile
# marked ``ok`` fits the GPU's registers and shared memory without
# spilling (the ``budget`` column: registers per thread for that many
# warps, and shared memory per block). A line marked ``error`` is a launch
# the library would make there that Triton refuses. What it does not show:
# this check runs no kernel, so it says nothing about results or speed (the
# H100's is the recorded sweep above, compiled by the Triton that its
# ``Triton`` line names, while this table comes from the Triton installed
# here, whose register counts may differ; the other targets have not run
# these kernels); correctness on AMD GPUs is not tested by this.
# ``tests/test_triton_targets.py`` runs the same check for every kernel and
# fails on any spill outside a short list of known ones, each with its reason
# (``KNOWN_SPILLS``); ``OPGUIDE_TRITON_TARGETS_FULL=1`` takes every
# configuration, not only the extremes.

# %%
# What's next
# -----------
# :doc:`Step 10 <10_patterns>` writes an operator that updates one of its
# inputs and returns two tensors, in C++, CUDA and Triton.
