"""Triton's interpreter, selected on a machine without a GPU.

Triton compiles kernels for GPUs. Without one, its interpreter runs the same
kernels on CPU tensors (with NumPy, slowly). ``TRITON_INTERPRET=1`` selects
it, and Triton reads it when ``@triton.jit`` runs, so this module sets it
before ``triton`` is imported; every module of :mod:`opguide.triton` imports
it first. A ``TRITON_INTERPRET`` already in the environment wins.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
#: Whether the kernels run in Triton's interpreter in this process.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

import triton.language as tl  # noqa: E402

if INTERPRET and type(tl.zeros).__name__ == "JITFunction":
    # triton.language was imported before TRITON_INTERPRET=1 was set: its own
    # helpers are compiled-mode functions, which the interpreter cannot call.
    raise ImportError(
        "opguide: triton was imported before TRITON_INTERPRET=1 was set, so Triton's "
        "interpreter cannot run; set TRITON_INTERPRET=1 in the environment, or import "
        "opguide before anything that imports triton"
    )
