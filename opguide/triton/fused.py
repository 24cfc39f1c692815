"""Fused residual add + RMSNorm kernels: whole rows in registers, and rows walked in chunks.

``residual`` is updated in place (``h = x + residual``, rounded once to its
dtype) and ``h`` normalised; ``launch.fused_config`` chooses between these
kernels (and ``split.py``'s ``_fused_add_rms_norm_split_kernel``).
"""

import triton
import triton.language as tl

from .prologue import aligned, pdl_prologue, row_block


@triton.jit(do_not_specialize=["M"])  # M only bounds rows: one kernel for every M
def _fused_add_rms_norm_kernel(
    x_ptr,  # [M, N] input, x's dtype
    res_ptr,  # [M, N] residual, written in place
    w_ptr,  # [N] weight, x's dtype
    out_ptr,  # [M, N] output, out_dtype
    inv_rms_ptr,  # [M] float32, one per row
    M, N, eps, HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
    GDC: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: rows start aligned
    # One program takes ROWS whole rows, in registers, as the forward does:
    # the updated residual is stored and normalised without being read back
    # from memory.
    pdl_prologue(GDC)
    row_ids, rows, cols, mask = row_block(M, N, ROWS, BLOCK_N)
    # No cache hints, as in forward.py's _rms_norm_forward_kernel.
    x = tl.load(x_ptr + rows * N + cols, mask=mask, other=0.0)
    r = tl.load(res_ptr + rows * N + cols, mask=mask, other=0.0)
    if HAS_WEIGHT:  # loaded now, so that the load overlaps the reduction
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    h = (x.to(tl.float32) + r.to(tl.float32)).to(res_ptr.dtype.element_ty)  # rounded once
    tl.store(res_ptr + rows * N + cols, h, mask=mask)
    h = h.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(h * h, axis=1) / N + eps).to(tl.float32)
    tl.store(inv_rms_ptr + row_ids, inv_rms, mask=row_ids < M)
    y = h * inv_rms[:, None]
    if HAS_WEIGHT:  # a constexpr: the branch is resolved when the kernel is compiled
        y = y * w
    tl.store(out_ptr + rows * N + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fused_add_rms_norm_chunked_kernel(
    x_ptr,  # [M, N] input, x's dtype
    res_ptr,  # [M, N] residual, written in place
    w_ptr,  # [N] weight, x's dtype
    out_ptr,  # [M, N] output, out_dtype
    inv_rms_ptr,  # [M] float32, one per row
    N, eps, HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    # Rows too long for registers: pass 1 adds, stores the residual and sums
    # squares chunk by chunk; pass 2 reads the new residual back (mostly from
    # L2) to normalise it.
    pdl_prologue(GDC)
    row = tl.program_id(0).to(tl.int64)
    sum_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
        r = tl.load(res_ptr + row * N + cols, mask=mask, other=0.0)
        h = (x.to(tl.float32) + r.to(tl.float32)).to(res_ptr.dtype.element_ty)
        tl.store(res_ptr + row * N + cols, h, mask=mask)
        hf = h.to(tl.float32)
        sum_sq += hf * hf
    # Pass 2 reads what other threads of the program stored in pass 1.
    tl.debug_barrier()
    inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps).to(tl.float32)
    tl.store(inv_rms_ptr + row, inv_rms)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        y = tl.load(res_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32) * inv_rms
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * N + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
