"""silu_and_mul's Triton kernels for the ahead-of-time build (:mod:`opguide.triton.aot`).

What the build needs to know of them, named in the registry's ``aot_module``:
``KERNELS`` (each kernel's module, function, constexprs and pointer
arguments) and :func:`launches` (every launch the C++ route,
``csrc/triton_aot/silu_and_mul_triton_aot_cuda.cu``, can ask for). Only the
standard library is imported: the build imports this module before the
extension, which ``import opguide`` loads, exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

_KERNELS_MODULE = "opguide._silu_and_mul.triton.kernels"
_CONSTEXPRS = ("BLOCK_N", "ROWS", "ALIGN", "GDC")

#: name -> (module, function, constexprs in parameter order, pointer
#: argument -> its type, ``"x"`` for x's dtype).
KERNELS = {
    "silu_and_mul_forward": (
        _KERNELS_MODULE, "_silu_and_mul_forward_kernel", _CONSTEXPRS,
        {"x_ptr": "x", "y_ptr": "x"},
    ),
    "silu_and_mul_backward": (
        _KERNELS_MODULE, "_silu_and_mul_backward_kernel", _CONSTEXPRS,
        {"grad_y_ptr": "x", "x_ptr": "x", "grad_x_ptr": "x"},
    ),
}  # fmt: skip

#: Row lengths of y that give every key: the tile is the same from 4096 on,
#: and ALIGN and the spec repeat every 16.
ROW_LENGTHS = 4096 + 16


def tile(d: int) -> tuple[int, int, int]:
    """(BLOCK_N, ROWS, num_warps) for rows of ``d`` elements of y, forward and backward alike.

    The rule of :func:`opguide._silu_and_mul.triton.ops.silu_and_mul_config`,
    whose module registers operators (so a build cannot import it); the C++
    route's is ``silu_and_mul_tile`` (``csrc/triton_aot/silu_and_mul_triton_aot.h``).
    ``tests/test_triton_aot_silu_and_mul.py`` compares the three.
    """
    block_n = min(1 << max(0, d - 1).bit_length(), 4096)
    return block_n, max(1, 4096 // block_n), 4


def launches(
    add: Callable[[str, tuple, int, int], None], align: Callable[[int], int], gdc: bool,
    cols: Iterable[int] | None,
) -> None:  # fmt: skip
    """Calls ``add(kernel, constexprs, d, num_warps)`` for every launch of both kernels.

    Args:
        add: takes the kernel's name, its ``(name, value)`` constexprs, the
            row length of y and the warps.
        align: the build's ALIGN rule (``opguide.triton.launch.align``).
        gdc: whether the target's eager launches take GDC.
        cols: only these row lengths of y (default: every key's).
    """
    for d in sorted(set(cols)) if cols is not None else range(1, ROW_LENGTHS + 1):
        block_n, rows, num_warps = tile(d)
        constexprs = (("BLOCK_N", block_n), ("ROWS", rows), ("ALIGN", align(d)), ("GDC", int(gdc)))
        for kernel in KERNELS:
            add(kernel, constexprs, d, num_warps)
