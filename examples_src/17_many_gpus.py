r"""
Step 17: Your operator on many GPUs
===================================

A model that trains on many GPUs keeps its activations sharded: in sequence
parallelism each device holds a slice of the sequence, in FSDP2 each holds
its part of the batch and a shard of every weight. PyTorch's distributed
engine describes such tensors as ``DTensor``\ s: a local tensor on each
device plus its *placement* on a device mesh (``Shard(dim)``, ``Replicate()``,
``Partial("sum")``). An operator that DTensor does not know stops it: the
call fails with "does not have a sharding strategy registered" (`the error
<https://github.com/pytorch/pytorch/blob/main/torch/distributed/tensor/_sharding_prop.py>`__
of DTensor's sharding propagation). This step
teaches DTensor how ``opguide``'s operators shard, then runs them, and one
training step of a transformer block, in two processes.

In this step you will learn:

* how to write sharding rules for your operator with
  ``torch.distributed.tensor.experimental.register_sharding``, forward and
  backward, and why the weight's gradient is a partial sum;
* how to handle an operator that updates an argument in place, which
  ``register_sharding`` cannot describe, with
  :func:`torch.library.register_torch_dispatch`;
* how to check that a sharded call communicates nothing (``CommDebugMode``),
  and that a tensor/sequence-parallel and an FSDP2 training step match one
  device;
* how to launch it: ``torchrun``, NCCL on GPUs, gloo on the CPU.

The rules
---------
A norm normalises each row on its own, so its rule has one idea: rows may be
split across devices, a row may not. For each layout the operator accepts,
a rule returns the placements of the outputs and of the inputs, for one
dimension of the device mesh (DTensor extends it to meshes of several
dimensions). A layout that no rule accepts (``x`` split along the normalised
dimension, or a partial sum) is redistributed by DTensor to one that a rule
accepts before the kernel runs. The file, whole:

.. literalinclude:: /../opguide/distributed.py
   :language: python
   :caption: opguide/distributed.py

Three points carry over to any operator:

* **The rule is about the operator, not the kernel.** The kernels (CPU, CUDA,
  Triton) run unchanged on each device's local rows; DTensor calls them with
  the local tensors.
* **A reduction over the sharded dimension returns a partial result.** The
  backward's ``grad_weight`` sums over all rows; with the rows split, each
  device's sum is a part of it, ``Partial("sum")``. DTensor reduces it when
  someone needs the whole value (an optimizer updating a replicated weight,
  or ``full_tensor()``), and not
  before.
* **In-place updates need the placement to stay.** ``register_sharding``
  treats an operator whose name ends in ``_`` as one that writes and returns
  its first argument (``OpSchema.is_inplace_op`` in DTensor's `_op_schema.py
  <https://github.com/pytorch/pytorch/blob/main/torch/distributed/tensor/_op_schema.py>`__);
  ``fused_add_rms_norm_`` writes its second and returns
  two new tensors. ``register_torch_dispatch`` lets the module handle DTensor
  arguments itself: it redistributes ``x`` to ``residual``'s layout, runs the
  kernel on the local shards, and refuses a ``residual`` sharded along the
  normalised (last) dimension, or a partial sum (its layout cannot change in
  place), with an error that says what to do.

``opguide.rms_norm`` and ``opguide.fused_add_rms_norm_`` import
``opguide.distributed`` the first time they see a DTensor; code that calls
``torch.ops.opguide.*`` directly imports it once itself.

The program
-----------
The run is a program of its own, launched once per device by PyTorch's
launcher. It checks the operators on DTensors against one device, counting
the collectives each call issues, then trains one step of a small
pre-norm transformer block (attention and MLP, random weights) in two ways:

* **tensor and sequence parallel**: the norms run on the sequence shards
  (``SequenceParallel``), the projections are split column- and row-wise;
* **FSDP2** (``fully_shard``): each device holds a shard of every weight and
  trains on its part of the batch.

Each is run with ``opguide.rms_norm`` as the block's norm and again with
``torch.nn.RMSNorm``; losses, gradients and the weights after one SGD step
must equal the ``torch.nn.RMSNorm`` block's on one device.

.. literalinclude:: /../examples_src/many_gpus_worker.py
   :language: python
   :caption: examples_src/many_gpus_worker.py
"""

# %%
# Running it
# ----------
# ``torchrun --standalone --nproc-per-node 2`` starts two processes on this
# machine. With two GPUs or more, each process takes one and they talk over
# NCCL; with fewer than two GPUs, they run on the CPU and talk over gloo. The
# first line of the output names the backend this run used.
import json
import os
import subprocess
import sys
import time

import torch

from guidekit.compile_checks import source_root
from guidekit.recorded import pages, sources

# sphinx_gallery_thumbnail_path = "_thumbnails/17.png"
ROOT = source_root()
WORKER = ROOT / "examples_src" / "many_gpus_worker.py"
RECORD = ROOT / "docs" / "recorded" / "many_gpus_nccl.json"

command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
print("$ torchrun --standalone --nproc-per-node 2 examples_src/many_gpus_worker.py")
start = time.perf_counter()
proc = subprocess.run([*command, str(WORKER)], capture_output=True, text=True, cwd=ROOT)
seconds = time.perf_counter() - start
if proc.returncode != 0:
    print(proc.stdout[-4000:], proc.stderr[-6000:])
    raise RuntimeError(f"the two-process run failed (exit status {proc.returncode})")
report = proc.stdout.strip().splitlines()
print("\n".join(report))
print(f"(exit status 0, {seconds:.0f} s)")

# %%
# Reading the output
# ------------------
# ``S(1)`` is ``Shard(1)``, ``R`` is ``Replicate()``, ``P(sum)`` is
# ``Partial("sum")``. What the lines above say, read from them:
ops = [line for line in report if line.endswith("; equal")]
rows_split = [line for line in ops if "x S(2)" not in line]
silent = [line for line in rows_split if "no collective" in line]
print(f"rows split: {len(silent)} of {len(rows_split)} calls issued no collective")
last_dim = next(line for line in ops if "x S(2)" in line)
print("normalised dimension split:", last_dim.split(": ")[1].removesuffix("; equal"))
for kind in ("TP/SP", "FSDP2"):
    counts = [
        report[i + 1].split("; ")[1] for i, line in enumerate(report) if line.startswith(kind)
    ]
    verdict = "the same" if len(set(counts)) == 1 else "different"
    print(f"{kind}: opguide.rms_norm and torch.nn.RMSNorm blocks issue {verdict} collectives")
    # The paragraph below reads these lines; a run that says otherwise fails the page.
    assert verdict == "the same", report
assert len(silent) == len(rows_split), report

# %%
# With rows split, the operator and its backward issue no collective: each
# device normalises its own rows, and the weight's gradient stays a partial
# sum until the optimizer reduces it. Split along the normalised dimension,
# DTensor first moves the data so that each device holds whole rows (the
# count above), then runs the same kernel. In the training steps the block
# with ``opguide.rms_norm`` communicates exactly as the block with
# ``torch.nn.RMSNorm`` does (the comparison above): the collectives are the
# projections' (tensor parallel) or FSDP2's (one gather of the weights in the
# forward, one reduce-scatter of the gradients in the backward), none of them
# the norm's.
#
# On two GPUs
# -----------
# The same program on a machine with two GPUs runs on NCCL. Recorded with
# ``OPGUIDE_RECORD_GPU=1`` on such a machine, or run live when this build has
# two GPUs:
if proc.stdout.startswith("2 processes, backend nccl"):
    if os.environ.get("OPGUIDE_RECORD_GPU") == "1":
        record = {
            "device": torch.cuda.get_device_name(0),
            "gpus": torch.cuda.device_count(),
            "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"),
            "lines": report,
        }
        RECORD.write_text(json.dumps(record, indent=2) + "\n")
        sources.stamp(RECORD)  # the hash of the sources it ran
        print(f"recorded to docs/recorded/{RECORD.name}")
    print("the run above was on NCCL, live")
elif RECORD.exists():
    recorded = json.loads(RECORD.read_text())
    print(
        f"Recorded on {recorded['gpus']} x {recorded['device']}, torch {recorded['torch']}, "
        f"{recorded['date']}:"
    )
    pages.say_stale(RECORD.name)
    print("\n".join(recorded["lines"]))
    # A recorded call whose line differs from the run above: the runs differ in
    # backend, perhaps in torch and in the sources, and the lines say which.
    differ = [line for line in recorded["lines"][1:] if line.endswith("; equal")]
    differ = [line for line in differ if line not in report]
    if differ:
        why = ["the backend (NCCL there, gloo here)"]
        if recorded["torch"].split("+")[0] != torch.__version__.split("+")[0]:
            why.append(f"torch ({recorded['torch']} there, {torch.__version__} here)")
        if "opguide/distributed.py" in (sources.stale_files(RECORD) or []):
            why.append("the sharding rules (opguide/distributed.py changed since the record)")
        pages.say(
            f"{len(differ)} recorded call(s) differ from the run above, each still equal to "
            f"one device's result: {'; '.join(differ)}. DTensor chooses how to move an "
            "input the rule cannot take as it is; the two runs differ in " + ", ".join(why) + "."
        )
else:
    print(
        f"SKIPPED: {torch.cuda.device_count()} GPU(s) here and no recorded NCCL run "
        f"(docs/recorded/{RECORD.name})"
    )

# %%
# What to take to your own operator
# ---------------------------------
# * Write the rule from what the operator reads: which dimensions each output
#   element depends on. Every other dimension can be sharded, with the same
#   placement on the inputs and outputs.
# * A sum over a sharded dimension is ``Partial("sum")``; leave it to DTensor
#   to reduce.
# * Test with ``CommDebugMode``: count the collectives of a call, and assert
#   zero where the layout needs none. Test one training step against one
#   device: loss, gradients and the weights after an optimizer step.
# * On the CPU the same code runs on gloo in two processes: the distributed
#   tests need no GPU.
