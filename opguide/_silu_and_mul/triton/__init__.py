"""silu_and_mul's Triton kernels, as operators of the ``opguide`` namespace.

Importing this package (``opguide/__init__.py`` does, where Triton works)
registers the Triton twins of the compiled operators, with their schemas
and contract:

* ``opguide::silu_and_mul_triton``: ``y = silu(x[..., :d]) * x[..., d:]``;
  differentiable, its backward the next one;
* ``opguide::silu_and_mul_backward_triton``: ``grad_x`` from ``grad_y`` and ``x``.

Users reach them through ``opguide.silu_and_mul(x, backend="triton")``.
Float32, float16 and bfloat16; CPU tensors run in Triton's interpreter
(``TRITON_INTERPRET=1``). The modules: ``kernels.py`` (the kernels),
``ops.py`` (the tile planner, launch functions and registrations).
"""

from .ops import (
    SiluAndMulConfig,
    silu_and_mul_backward,
    silu_and_mul_backward_triton,
    silu_and_mul_config,
    silu_and_mul_forward,
    silu_and_mul_triton,
)

__all__ = [
    "SiluAndMulConfig",
    "silu_and_mul_backward",
    "silu_and_mul_backward_triton",
    "silu_and_mul_config",
    "silu_and_mul_forward",
    "silu_and_mul_triton",
]
