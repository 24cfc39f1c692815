r"""
Step 9.2: Rows too long for one program
=======================================

Part I's CUDA kernel gives each row one block, :doc:`step 9
<09_triton_kernel>`'s Triton kernels one program. Past
``launch.MAX_REGISTER_ROW`` elements in the forward and
``launch.MAX_REGISTER_ROW_BACKWARD`` in the backward (printed below) a row no
longer fits in one program's registers. This step splits such rows over
programs that meet through global memory and, past what a GPU runs at once,
walks them in chunks.

In this step you will learn:

* how programs split a row and exchange partial sums, and why their wait
  ends without a cluster's guarantees;
* how fast they run against the CUDA kernels' clusters (recorded);
* how to compile kernels for GPUs you do not have and read their registers.

Split rows
----------
A row is split over ``S`` programs of ``SEG`` columns each. Each writes its
part of the row's sum into a slot of its own, marked as written in the same
64-bit store, and waits until all the row's slots are marked; then each adds
the parts in the same order, so every segment uses the same total on every
run. A thread-block cluster does this for the CUDA kernels (:doc:`step 11.3
<11_performance_3_long_rows>`), with a guarantee that its blocks run at once;
here the comment says why the wait still ends. Its argument rests on an order
CUDA does not promise, that no program starts later than one of higher index;
CUB's single-pass scan relies on the same order (`agent_scan.cuh
<https://github.com/NVIDIA/cccl/blob/main/cub/cub/agent/agent_scan.cuh>`_:
"Blocks are launched in increasing order"):

.. literalinclude:: /../opguide/triton/split.py
   :language: python
   :caption: opguide/triton/split.py

In the backward, program ``(g, s)`` takes segment ``s`` of rows ``g``,
``g + G``, ..., sums its segment of ``grad_weight`` into row ``g`` of step 9's
buffer, and counts one row ahead: it writes its part of the next row's sum
before it waits for this row's total (step 11.3 times the orders).

A planner splits only while a row's segments fit on the GPU at once, one per
multiprocessor (SM) at most:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: Split

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: _split_or_chunked

The fused kernel's float32 rows take half the columns, as many bytes a
thread as its 16-bit rows:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: split_for

Rows longer still: chunks
-------------------------
A row of more segments than the GPU has SMs is walked by one program in
chunks of ``BLOCK_N``, twice: for the sum of squares, then for the output.
So is every long row with ``OPGUIDE_TRITON_SPLIT=0``, the setting for a GPU
shared with other work (:doc:`step 10.5 <10_patterns_5_beside_other_work>`).
Its launch is fixed, not autotuned: an autotuner times its configs on the
first call for each N, and that call waits for the GPU.

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: Chunked

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _rms_norm_forward_chunked_kernel

The backward's chunked kernel walks a row twice too, and ``grad_weight`` is
summed over strips of columns:

.. literalinclude:: /../opguide/triton/backward.py
   :language: python
   :pyobject: _rms_norm_backward_chunked_kernel

.. literalinclude:: /../opguide/triton/backward.py
   :language: python
   :pyobject: _grad_weight_columns_kernel
"""

# %%
# Without a GPU, the kernels run in Triton's interpreter, selected before
# anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# Which kernel takes which row
# ----------------------------
# The planners' choice on this machine. Under the interpreter programs run
# one after another, so a split row has one segment. The last length is the
# shortest ``2**k + 3`` that all three planners chunk here.
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
# Rows of 20000, ``2**17 + 3`` and the first chunked length, through the
# forward, the backward and :doc:`step 10 <10_patterns>`'s fused operator,
# against the reference, in float32:
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
# Under the interpreter the wait between a row's programs does not run; on
# a GPU it does, in the GPU suite's gallery log (:doc:`Building page's GPU
# records </building>`).

# %%
# How fast, on a GPU (recorded)
# -----------------------------
# Step 9's recorded sweep past each pass's register kernel, in % of a copy
# of the same bytes. The longest row's segments say which kernel ran: the
# split one wherever the GPU has that many SMs. :doc:`Step 11.3
# <11_performance_3_long_rows>` also times and compiles faster launches of
# the split backward:
record = recorded("sweep_opguide_<gpu>.json")
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
# One run, no spread recorded: a gap under 1 point of the copy is a tie.
for pass_name, floor in LONGER_THAN.items():
    say(f"{pass_name}, N > {floor}: " + versus(select(rows, **{"pass": pass_name}), *ROUTES))

# %%
# Compiled for seven GPUs, without running them
# ----------------------------------------------
# Registers set where a row stops fitting, and they differ between GPUs.
# ``triton.compile`` with a ``GPUTarget`` compiles for a GPU that is not
# there, down to AMD's ``hsaco`` or NVIDIA's ``cubin``.
# ``guidekit/triton_targets/`` does so for the launches the library makes
# (recorded from calls on fake CUDA tensors) and reads registers, spills and
# shared memory from the machine code. The forward's split kernel, at a
# representative few launches (``OPGUIDE_TRITON_TARGETS_FULL=1``: every one):
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
# A compile marked ``ok`` fits the GPU's registers and shared memory (the
# ``budget`` column) without spilling; ``error`` is a launch Triton refuses
# there. The check runs no kernel: it says nothing of results or speed, and
# its counts are the installed Triton's, not the sweep's.
# ``tests/test_triton_targets.py`` runs it for every kernel and fails on any
# spill outside ``KNOWN_SPILLS``, each with its reason.

# %%
# What's next
# -----------
# :doc:`Step 9.3 <09_triton_kernel_3_ahead_of_time>` compiles these kernels
# when the library is built and launches them from C++, as the CUDA kernels
# are launched. :doc:`Step 10 <10_patterns>` writes an operator that updates
# one of its inputs and returns two tensors, in C++, CUDA and Triton.
