"""silu_and_mul, the gated activation of Llama-style MLPs, as an opguide operator.

For ``x`` of shape ``(..., 2*d)``, ``y = silu(x[..., :d]) * x[..., d:]`` of shape
``(..., d)``. Its entry of :data:`opguide.registry.OPERATORS` names everything
that implements it:

* ``csrc/silu_and_mul/``: the schemas (``TORCH_LIBRARY_FRAGMENT``), the CPU
  and CUDA kernels, the CUDA kernels' configuration and planner;
* ``ops.py``: :func:`silu_and_mul`, and the fake kernels and registrations
  of the compiled operators;
* ``rules.py``: the autograd, vmap, autocast and FLOP rules both pairs of
  operators share;
* ``reference.py``: :func:`silu_and_mul_reference`, plain PyTorch;
* ``triton/``: the Triton twins ``opguide::silu_and_mul_triton`` and
  ``opguide::silu_and_mul_backward_triton`` (imported by ``opguide/__init__.py``
  where Triton works).
"""

from .ops import silu_and_mul
from .reference import silu_and_mul_backward_reference, silu_and_mul_reference
from .rules import MIN_BYTES

__all__ = [
    "MIN_BYTES",
    "silu_and_mul",
    "silu_and_mul_backward_reference",
    "silu_and_mul_reference",
]
