"""The RMSNorm forward kernels: whole rows in registers, and rows walked in chunks.

``launch.forward_config`` chooses between them (and the split kernels of
``split.py``) and their knobs.
"""

import triton
import triton.language as tl

from .prologue import aligned, pdl_prologue, row_block


# do_not_specialize: Triton compiles a kernel for each kind of int argument
# (equal to 1, a multiple of 16, other), which helps where the int shapes
# vector accesses (N) and not where it only bounds rows (M): one compiled
# kernel serves every M.
@triton.jit(do_not_specialize=["M"])
def _rms_norm_forward_kernel(
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    y_ptr,  # [M, N] output, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STORE_INV: tl.constexpr,
    GDC: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: rows start aligned
    # One program normalises ROWS whole rows, held in registers as a
    # (ROWS, BLOCK_N) block: x is read from memory once. BLOCK_N is N rounded
    # up to a power of two; the mask covers the padding and the last rows.
    # STORE_INV (the training forward) also writes inv_rms, one per row.
    pdl_prologue(GDC)
    row_ids, rows, cols, mask = row_block(M, N, ROWS, BLOCK_N)
    # No cache hints: eviction_policy="evict_first" on x and y costs one to two
    # points of the copy when L2 holds other data (guidekit.benchmark,
    # docs/recorded/triton_evict_first_on_<gpu>.json against ..._off_<gpu>.json).
    x = tl.load(x_ptr + rows * N + cols, mask=mask, other=0.0)
    # The weight is loaded now, so that its load overlaps the reduction.
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    x = x.to(tl.float32)
    # .to(float32): Inductor may pass the scalar eps as float64.
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps).to(tl.float32)
    if STORE_INV:
        tl.store(inv_rms_ptr + row_ids, inv_rms, mask=row_ids < M)
    y = x * inv_rms[:, None] * w
    tl.store(y_ptr + rows * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_forward_chunked_kernel(
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    y_ptr,  # [M, N] output, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    N,
    eps,
    BLOCK_N: tl.constexpr,
    STORE_INV: tl.constexpr,
):
    # Rows too long for registers: one program per row walks it in chunks of
    # BLOCK_N columns twice, once for the sum of squares, once to write y
    # (where the row fits in the L2 cache, the second read can come from it).
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    sum_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        sum_sq += x * x
    inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps).to(tl.float32)
    if STORE_INV:
        tl.store(inv_rms_ptr + row, inv_rms)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)
