"""first_op: RMSNorm as a PyTorch operator, with a C++ CPU kernel and a CUDA kernel.

``first_op.rms_norm(x, weight, eps)`` calls the operator
``torch.ops.first_op.rms_norm``.
"""

from pathlib import Path

import torch

# Loading the compiled library runs its TORCH_LIBRARY blocks: the schema and
# the kernels join PyTorch's dispatcher. The library is no Python module, so
# it is loaded by its path rather than imported.
_library = sorted(Path(__file__).parent.glob("_C.*"))
if not _library:
    raise ImportError(
        "first_op: the compiled library first_op/_C is missing; build it from the "
        "project folder with: pip install --no-build-isolation -e ."
    )
torch.ops.load_library(_library[0])

# The fake kernel and the autograd formula, registered on import.
from first_op.ops import rms_norm  # noqa: E402

__all__ = ["rms_norm"]
