"""silu_and_mul's Triton kernels, forward and backward: one family, tiles of y.

Each program takes a (ROWS, BLOCK_N) tile of ``y`` (of ``grad_y`` for the
backward): BLOCK_N columns of each half of ROWS rows of ``x``, computed in
float32 and rounded once. ``aligned`` lets the compiler see that each
half-row starts on a 16-byte boundary when the row length allows, so the
loads are whole vectors. Row offsets are int64: tensors past 2**31 elements
index correctly. ``ops.py`` chooses the tile and launches them.
"""

import triton
import triton.language as tl

from ...triton.prologue import aligned, pdl_prologue


# do_not_specialize: Triton compiles a kernel for each kind of int argument;
# that matters for N (vector accesses), not for M (it only bounds rows).
@triton.jit(do_not_specialize=["M"])
def _silu_and_mul_forward_kernel(
    x_ptr,  # [M, 2 * N] input: the gate x[:, :N], then the up projection x[:, N:]
    y_ptr,  # [M, N] output, x's dtype
    M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, ALIGN: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: each half-row starts aligned
    pdl_prologue(GDC)
    rows = (tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS))[:, None]
    cols = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]
    mask = (rows < M) & (cols < N)
    x_row = x_ptr + rows * (2 * N)  # rows is int64: offsets past 2**31 are exact
    a = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + N + cols, mask=mask, other=0.0).to(tl.float32)
    y = a * tl.sigmoid(a) * b
    tl.store(y_ptr + rows * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _silu_and_mul_backward_kernel(
    grad_y_ptr,  # [M, N] gradient of y, x's dtype
    x_ptr,  # [M, 2 * N] the forward's input
    grad_x_ptr,  # [M, 2 * N] output: the gate's gradient, then the up projection's
    M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, ALIGN: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)
    pdl_prologue(GDC)
    rows = (tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS))[:, None]
    cols = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]
    mask = (rows < M) & (cols < N)
    g = tl.load(grad_y_ptr + rows * N + cols, mask=mask, other=0.0).to(tl.float32)
    x_row = x_ptr + rows * (2 * N)
    a = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + N + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid(a)
    gs = g * s
    grad_a = gs * b * (1.0 + a * (1.0 - s))
    grad_x_row = grad_x_ptr + rows * (2 * N)
    out_ty = grad_x_ptr.dtype.element_ty
    tl.store(grad_x_row + cols, grad_a.to(out_ty), mask=mask)
    tl.store(grad_x_row + N + cols, (gs * a).to(out_ty), mask=mask)
