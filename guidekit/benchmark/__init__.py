"""Benchmarks of the RMSNorm implementations against the memory floor.

RMSNorm is memory-bound: its floor is the bytes it must move (read ``x`` and
``weight`` once, write ``y`` once) divided by the device's bandwidth. This
package measures that bandwidth with a large device-to-device copy and every
implementation in the same run, so the ratios compare like with like.

Timing: CUDA events around a batch of calls queued behind a GPU spin (so
the host's launch latency is not counted), the implementations' batches
taken in turn (so a drifting clock slows all of them alike), L2 cleaned
before each batch (so no batch pays for the dirty lines of the one before),
inputs rotated through enough buffers to exceed the L2 cache (so no call
reads the previous call's data from L2), warm-up first, the median of
several batches reported. On the CPU the same loop uses ``time.perf_counter``.
Next to the implementations, every GPU pass times a copy of the same bytes
(``copy (same bytes)``): what a kernel of that size reaches at all.

What one run measures:

* on a GPU, three passes at each shape and dtype: ``forward`` (``y`` from
  ``x`` and ``weight``), ``backward`` (``grad_x`` and ``grad_weight`` from ``grad_y``) and
  ``fused`` (residual add + RMSNorm), for opguide's compiled and Triton
  kernels and for the PyTorch reference points, and the peer libraries'
  kernels where they import (Liger, Quack; vLLM's for the fused pass);
* on any machine (``cpu``): the cost of calling an operator on a tiny input
  (the ``TORCH_LIBRARY`` op, ``torch.rms_norm``, the Python wrapper, a Python
  ``custom_op``), and the C++ CPU kernel on a large float32 input next to a
  copy of the same size. These run interleaved (round robin over the
  implementations, repeated; medians), so that a machine that is busy with
  something else slows every implementation alike.

An implementation that cannot run (a kernel that is not registered for the
device, Triton not installed) is skipped and the reason is recorded.

Run ``python -m guidekit.benchmark --help``; ``--cpu-only`` runs the CPU part.

Its modules, each one part of the job:

* ``passes``: the passes, dtypes and bytes model, the rows and skips;
* ``timing``: GPU batches behind a spin, round robin, clean L2, rotation;
* ``implementations``: what each pass compares, and the peer libraries;
* ``fixed_shapes``: each pass at fixed shapes, and ``measure``;
* ``sweep``: every row length at a fixed number of elements;
* ``eager``: wall-clock time per call, and the parts of a training call;
* ``cpu``: the cost of a call and the C++ CPU kernel, on any machine;
* ``results``: the environment, the text reports, saving a result file;
* ``cli``: the command line (``__main__`` runs it).
"""

from .cli import main
from .cpu import run_cpu_kernel
from .eager import EAGER_KERNELS, EMPTY_FUNCTION, FUNCTION_NODE, TRITON_EXPERIMENTAL, run_eager
from .fixed_shapes import measure
from .implementations import FUSED_PEERS, fused_implementations, peer_implementations
from .passes import BYTES_MODEL, DTYPES, EPS, FORMAT, GPU_PASSES, SAME_SIZE_COPY, SWEEP_PASSES
from .results import environment, format_sweep_report
from .sweep import run_sweep
from .timing import MIN_SETS, copy_bandwidth, time_per_call, time_round_robin

__all__ = [
    "BYTES_MODEL",
    "DTYPES",
    "EAGER_KERNELS",
    "EMPTY_FUNCTION",
    "EPS",
    "FORMAT",
    "FUSED_PEERS",
    "FUNCTION_NODE",
    "GPU_PASSES",
    "MIN_SETS",
    "SAME_SIZE_COPY",
    "SWEEP_PASSES",
    "TRITON_EXPERIMENTAL",
    "copy_bandwidth",
    "environment",
    "format_sweep_report",
    "fused_implementations",
    "main",
    "measure",
    "peer_implementations",
    "run_cpu_kernel",
    "run_eager",
    "run_sweep",
    "time_per_call",
    "time_round_robin",
]
