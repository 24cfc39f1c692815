"""Compile the library's Triton kernels for AMD and NVIDIA GPUs, on a machine without one.

Triton compiles a kernel for a GPU it is told about, not only for the one it
runs on: ``triton.compile`` with a ``GPUTarget`` goes all the way to the
machine code (an ``hsaco`` for AMD, a ``cubin`` for NVIDIA) on a CPU-only
machine. This module compiles every kernel of :mod:`opguide.triton`
in each launch configuration that the library's own launch code chooses (for
row lengths from 1 to 2**23 and the three dtypes it takes) for seven GPUs,
and reads from each compile the registers, the spills and the shared memory.
A kernel passes when it spills nothing and fits the GPU's per-thread register
and per-block shared-memory limits (:data:`TARGETS` cites them).

What this proves: the kernels compile for these GPUs and fit their
registers and shared memory. What it does not: nothing ran there, so it says
nothing about the kernels' results or speed on those GPUs.

``python -m guidekit.triton_targets`` prints one line per kernel, launch
configuration and target and a summary line, and exits 1 when a kernel
spills, does not fit, or does not compile. By default it checks a
representative subset (every kernel on every target, at the extremes of its
configurations); ``--full`` or ``OPGUIDE_TRITON_TARGETS_FULL=1`` checks every
configuration. Results are cached under ``build/triton_targets``, keyed on the
kernel's source (with the Triton functions it calls), its specialisation, the
options, the target and the Triton version.

The compiles run in a child process when the current one has Triton's
interpreter selected (``TRITON_INTERPRET=1``: ``@triton.jit`` then makes
functions the compiler cannot take).

The modules, by role: ``targets`` (the GPUs, a launch, a compile's usage),
``launches`` (the configurations the library's launch code chooses),
``compiling`` (one launch compiled for one target, its usage read and
judged), ``checking`` (every launch for every target, cached, in this process
or a child; the table, the summary, the command line).
"""

from __future__ import annotations

from .checking import check, format_table, main, summary
from .launches import library_kernels, library_launches, representative
from .targets import KERNEL_MODULES, LIBRARY, ROW_LENGTHS, TARGETS, Launch, Target, Usage

__all__ = [
    "KERNEL_MODULES",
    "LIBRARY",
    "ROW_LENGTHS",
    "TARGETS",
    "Launch",
    "Target",
    "Usage",
    "check",
    "format_table",
    "library_kernels",
    "library_launches",
    "main",
    "representative",
    "summary",
]
