r"""
Step 17: Your operator on many GPUs
===================================

Sharded activations are ``DTensor``\ s: a local tensor on each device and
its *placement* on a device mesh (``Shard(dim)``, ``Replicate()``,
``Partial("sum")``). An operator DTensor does not know fails with "does not
have a sharding strategy registered" (`_sharding_prop.py
<https://github.com/pytorch/pytorch/blob/main/torch/distributed/tensor/_sharding_prop.py>`__).
This step adds:

* sharding rules with
  ``torch.distributed.tensor.experimental.register_sharding``, forward and
  backward, the weight's gradient a partial sum;
* :func:`torch.library.register_torch_dispatch` for an operator that writes
  an argument, which ``register_sharding`` cannot describe;
* ``CommDebugMode`` to show a sharded call communicates nothing, and
  tensor/sequence-parallel and FSDP2 training steps that match one device;
* ``torchrun``: NCCL on GPUs, gloo on the CPU.

The rules
---------
A norm's rule has one idea: rows may be split across devices, a row may not.
Each rule gives the placements of outputs and inputs for one mesh dimension;
DTensor redistributes any other layout to one a rule accepts:

.. literalinclude:: /../opguide/distributed.py
   :language: python
   :caption: opguide/distributed.py

* **The rule is the operator's, not the kernel's**: the kernels run unchanged
  on each device's local rows.
* **A sum over the sharded dimension is partial**: ``grad_weight`` is
  ``Partial("sum")`` until someone needs the whole value.
* **An in-place update keeps its placement**: ``register_sharding`` takes a
  name ending in ``_`` to write and return its first argument
  (``OpSchema.is_inplace_op`` in `_op_schema.py
  <https://github.com/pytorch/pytorch/blob/main/torch/distributed/tensor/_op_schema.py>`__),
  but ``fused_add_rms_norm_`` writes its second. Its
  ``register_torch_dispatch`` handler moves ``x`` to ``residual``'s layout,
  runs the kernel on the shards, and refuses a ``residual`` whose layout
  would have to change.

``opguide``'s wrappers import ``opguide.distributed`` at their first DTensor;
callers of ``torch.ops.opguide.*`` import it themselves.

The program
-----------
Launched once per device, it checks the operators on DTensors against one
device, counting collectives, then trains one step of a small transformer
block, tensor and sequence parallel and with FSDP2, with ``opguide.rms_norm``
and with ``torch.nn.RMSNorm``: losses, gradients and weights after one SGD
step must equal one device's.

.. literalinclude:: /../examples_src/many_gpus_worker.py
   :language: python
   :caption: examples_src/many_gpus_worker.py
"""

# %%
# Running it
# ----------
# ``torchrun --standalone --nproc-per-node 2``: NCCL with two GPUs, else gloo
# on the CPU; the first line names the backend:
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
# ``S(1)`` is ``Shard(1)``, ``R`` ``Replicate()``, ``P(sum)``
# ``Partial("sum")``. Read from the lines above:
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
# Split along the normalised dimension, DTensor first moves data so each
# device holds whole rows. In training, the collectives are the
# projections' or FSDP2's, none the norm's.
#
# On two GPUs
# -----------
# Live with two GPUs, else recorded with ``OPGUIDE_RECORD_GPU=1``:
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
# * Write the rule from the dimensions each output element depends on; every
#   other dimension may be sharded alike on inputs and outputs.
# * Leave ``Partial("sum")`` to DTensor to reduce.
# * Assert zero collectives with ``CommDebugMode`` where none are needed; test
#   a training step against one device.
# * On gloo the distributed tests need no GPU.
