r"""
Step 10.5: Beside other work
============================

The earlier steps time each operator on a GPU of its own. In a training job
it shares the GPU: communication kernels that spin until data arrives,
persistent kernels on other streams, other processes under MPS. This step
asks what an operator needs from the GPU to finish, and covers:

* a kernel that holds all but two SMs, and two probes built on it;
* which of opguide's kernels need more than the free SMs, and the two
  settings that send those rows to kernels that do not;
* where a call waits on the host for the GPU;
* calls from several threads and streams, CUDA graphs, tensors past
  ``2**31`` elements, and a call that fails halfway;
* what your own operator must check.

Holding the GPU
---------------
``tests/shared_gpu_probe.py`` launches a Triton kernel on a stream of its
own: one program per held SM, 1024 threads that each keep 64 values in
registers, which fills an SM's register file, so nothing else runs beside
it. The programs wait for a flag. Each case (operator, direction, backend,
row length) then runs on another stream, twice:

* **progress**: a timer sets the flag after a few seconds. The case must
  come back to the host at once and finish on the two free SMs before that.
* **dependent**: only a copy queued on the case's stream after the case sets
  the flag. A case that needs the held SMs, or waits on the host for the GPU,
  never finishes, until the timer releases the holder and the probe fails.

Each result must equal the same call's result on an idle GPU, bit for bit.
Before it trusts any of this, the probe runs a small kernel beside the holder
and reads, with ``%smid``, which SMs ran it: only the free ones may.
``tests/test_shared_gpu.py`` runs it on a GPU, once per route.

What needs more than the free SMs
---------------------------------
Two defaults need several SMs at once:

* The CUDA kernels for long rows launch **thread-block clusters** (step 11.3).
  The hardware starts a cluster only when all its blocks fit at once on SMs
  of one GPC, so with two SMs free such a kernel waits for the other work to
  end. ``OPGUIDE_CLUSTERS=0`` launches the one-block and chunked kernels
  instead (read once per process):

.. literalinclude:: /../csrc/common/launch_settings.cu
   :language: cpp
   :start-after: // [max-cluster]
   :end-before: // [max-cluster-end]

* The Triton kernels **split** a long row over programs that wait for each
  other's partial sums (:doc:`step 9.2 <09_triton_kernel_2_long_rows>`). On
  two free SMs the programs that run wait for programs that cannot start.
  ``OPGUIDE_TRITON_SPLIT=0`` walks such rows in chunks, one program each:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: _split_or_chunked

A cluster waits to start, split programs wait once started; either waits for
ever when the other work waits for work queued after it, which is the
dependent probe.
"""

# %%
# The probes with the two settings
# --------------------------------
# The records of ``tests/shared_gpu_probe.py``, one per route, each run with
# its setting:
import matplotlib.pyplot as plt

from guidekit.recorded import load
from guidekit.recorded.pages import say, say_stale

RECORDS = {"CUDA": "shared_gpu_cuda_h200.json", "Triton": "shared_gpu_triton_h200.json"}
runs = {route: load(name) for route, name in RECORDS.items()}
for name, run in zip(RECORDS.values(), runs.values(), strict=True):
    say(f"{name}: {run['device']}, torch {run['torch']}, Triton {run['triton']}")
    say_stale(name)
for route, run in runs.items():
    rows = run["rows"]
    settings = ", ".join(f"{k}={v}" for k, v in run["settings"].items()) or "none"
    held = f"{run['held_sms']} of {run['sms']} SMs held; other work ran on {run['other_work_sms']}"
    finished = [r for r in rows if r["ok"]]
    say(
        f"{route} ({settings}): {held}; {len(finished)} of {len(rows)} probes finished "
        f"before the release, equal to the idle GPU's results; slowest finish "
        f"{max(r['finished_s'] for r in rows) * 1e3:.0f} ms, slowest return to the "
        f"host {max(r['returned_s'] for r in rows) * 1e3:.1f} ms, against a release "
        f"after {run['timeout_s']:.0f} s"
    )

# %%
# Every call must come back to the host while the GPU is held:
back = max(r["returned_s"] for run in runs.values() for r in run["rows"])
say(
    f"slowest return to the host, all probes: {back * 1e3:.1f} ms: "
    + ("no call waited for the held SMs" if back < 0.5 else "a call waited for the GPU")
)

# %%
# Each case's time to finish on the two free SMs, by row length:
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True, layout="constrained")
for ax, (route, run) in zip(axes, runs.items(), strict=True):
    series = sorted({(r["op"], r["direction"]) for r in run["rows"]})
    for i, (op, direction) in enumerate(series):
        for probe, marker in (("progress", "o"), ("dependent", "x")):
            key = (op, direction, probe)
            pts = [r for r in run["rows"] if (r["op"], r["direction"], r["probe"]) == key]
            ax.plot(
                [r["n"] for r in pts], [r["finished_s"] * 1e3 for r in pts], marker,
                color=f"C{i}", label=f"{op} {direction}" if probe == "progress" else None,
            )  # fmt: skip
    ax.axhline(run["timeout_s"] * 1e3, color="black", linestyle="--", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlabel="row length N (8 rows)", title=route)
axes[0].set_ylabel("ms to finish (o progress, x dependent)")
axes[0].legend(fontsize=8, loc="upper left")
title = fig.suptitle(f"All but two SMs held, {runs['CUDA']['device']}; dashed: the release")

# %%
# What the figure shows, read from the records:
for route, run in runs.items():
    late = [
        f"{r['op']} {r['direction']} N={r['n']} ({r['probe']})" for r in run["rows"] if not r["ok"]
    ]
    slowest = max(run["rows"], key=lambda r: r["finished_s"])
    if late:
        say(f"{route}: did not finish on the free SMs: {'; '.join(late)}")
    else:
        say(
            f"{route}: every case finished on the free SMs; the slowest, {slowest['op']} "
            f"{slowest['direction']} at N={slowest['n']}, took {slowest['finished_s'] * 1e3:.0f} "
            f"ms of the {run['timeout_s']:.0f} s before the release"
        )

# %%
# The records were made with the settings. Without them, for the reasons
# above, the cluster and split rows of both routes wait for the held SMs; no
# record of such a run is kept here.
#
# What the settings cost
# ----------------------
# The kernels they choose read a long row twice: the one-block CUDA forward
# re-reads it from L2 (step 3), the chunked Triton kernels walk it twice,
# where a cluster or a split row keeps it in registers across SMs. For rows
# longer than L2 holds at once, that is one more read from memory per row
# than the default (step 11.3 times the cluster kernels, step 9.2 the split
# ones). On a GPU of its own, keep the defaults; beside
# work that may hold SMs until yours is done, set the settings.
#
# Waiting on the host
# -------------------
# No eager call of opguide waits for the GPU once its kernels are loaded.
# Two waits remain before that:
#
# * **The first launch of a kernel loads its module**, which waits for the
#   GPU to be idle (Triton loads each compiled kernel on its first call, and
#   CUDA's lazy loading does the same for the extension's kernels). Call each
#   operator once, at each shape family, before sharing the GPU with work
#   that waits for yours; ``CUDA_MODULE_LOADING=EAGER`` loads the
#   extension's kernels when it is imported.
# * **An autotuner times its configs on the first call**, and its timing
#   synchronises. opguide's Triton kernels take fixed launches from their
#   planners for that reason (step 9.2).
#
# Threads, streams and graphs
# ---------------------------
# ``tests/test_concurrency.py`` calls forward and backward of every operator
# from 8 threads at once, each on its own CUDA stream on a GPU (both
# backends), and on CPU, where the C++ kernels run on ATen's thread pool:
# every result must equal a one-thread run bit for bit. It also captures
# forward and backward in a CUDA graph and replays it on fresh inputs while
# another stream runs matmuls. Between calls opguide keeps only caches of
# its launch plans and of device facts, keyed by what they depend on.
#
# Past 2**31 elements
# -------------------
# An index computed in 32 bits wraps past ``2**31`` elements, silently.
# ``tests/test_large_tensors.py`` runs every RMSNorm kernel family of both
# routes (registers, one block, clusters, split, chunked; forward, backward
# and fused) on a shape past ``2**31`` elements and checks the rows on both
# sides of element ``2**31`` and the whole ``grad_weight``;
# ``tests/test_silu_and_mul_cuda.py`` does the same for ``silu_and_mul``.
#
# A call that fails halfway
# -------------------------
# ``fused_add_rms_norm_`` writes its ``residual``. Every route allocates its
# outputs and plans its launch before the kernel writes anything, and writes
# a strided ``residual`` back from a dense copy only after the kernel ran.
# So when the call raises on the host (out of memory, a refused launch, an
# argument check), ``residual`` and its version counter are as they were, and
# the same call succeeds once the cause is gone; on CPU the out-of-memory
# error is a ``RuntimeError``, not ``torch.OutOfMemoryError``.
# ``tests/test_failure_contract.py`` forces each failure. An error inside a
# running kernel is not covered: on a GPU it leaves the context unusable.
#
# Your own operator
# -----------------
# * A block that waits for another block needs the GPU to run both at once,
#   which a GPU shared with other work does not promise. Keep a form that
#   needs no co-scheduling (a second kernel, or one program walking the row)
#   and a setting that selects it, as opguide's two settings do; make the
#   waiting form the default only where the GPU is yours.
# * Do not read the GPU from the host inside a call, autotune, or copy to
#   the host: each one waits behind whatever else the GPU runs.
# * Allocate and check everything before the first write to an input.
# * Use 64-bit indices where a product of sizes can pass ``2**31``.
# * Test beside a kernel that holds the GPU, from several threads, and past
#   ``2**31`` elements, as these tests do.
#
# What remains
# ------------
# The defaults still need more than two free SMs for long rows; the settings
# are off by default because on a GPU of its own they cost a read. The probes
# hold SMs with one kernel of this process; they say nothing of SMs held by
# another process under MPS or of MPS's own limits. The template's generated
# GPU tests do not run shapes past ``2**31`` elements: each such case needs
# tens of GiB of GPU memory, more than a reader's CI GPU may have; copy
# ``tests/test_large_tensors.py``'s checks when yours has it.
#
# What's next
# -----------
# :doc:`Step 11 <11_performance>` measures the kernels, each on a GPU of
# its own.
