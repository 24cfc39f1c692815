"""The RMSNorm backward kernels: grad_x, and grad_weight summed in two stages.

grad_weight is a sum over rows: each program of the first stage writes its own
row of float32 partial sums, and ``_grad_weight_sum_kernel`` adds those rows in a
fixed order, so no two programs write the same memory (no atomics) and the
result is the same on every run. ``launch.backward_config`` chooses among
these kernels (and the split kernel of ``split.py``) and their knobs.
"""

import triton
import triton.language as tl

from .prologue import aligned, pdl_prologue


@triton.jit(do_not_specialize=["M"])  # M only bounds rows: one kernel for every M
def _rms_norm_backward_kernel(
    grad_y_ptr,  # [M, N] gradient of y, x's dtype
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    grad_x_ptr,  # [M, N] gradient of x, x's dtype
    grad_weight_partial_ptr,  # [P, N] float32, partial sums, a row per program; [N] if P = 1
    M, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STAGES: tl.constexpr, GDC: tl.constexpr,
    ALIGN: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: rows start aligned
    # Program p handles the groups of ROWS rows p, p + P, p + 2P, ... (P
    # programs, as many as fit on the GPU at once, so that neighbouring rows
    # are read at the same time) and writes its own partial sum of grad_weight to
    # row p of grad_weight_partial; a second kernel sums those rows. No two programs
    # write the same memory. Short rows come several at a time (ROWS > 1), so
    # that each step has enough work; with STAGES > 1 Triton loads the next
    # groups while it computes this one.
    pdl_prologue(GDC)
    pid = tl.program_id(0).to(tl.int64)  # int64: row * N may pass 2**31
    cols = tl.arange(0, BLOCK_N)[None, :]
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    grad_weight = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    for first in tl.range(pid * ROWS, M, tl.num_programs(0) * ROWS, num_stages=STAGES):
        rows = first + tl.arange(0, ROWS)[:, None]
        mask = (rows < M) & (cols < N)
        offset = rows * N + cols
        x = tl.load(x_ptr + offset, mask=mask, other=0.0).to(tl.float32)
        grad_y = tl.load(grad_y_ptr + offset, mask=mask, other=0.0).to(tl.float32)
        # The forward's inv_rms, one per row, saved for this pass.
        inv_rms = tl.load(inv_rms_ptr + rows, mask=rows < M, other=0.0)
        x_hat = x * inv_rms
        g = grad_y * w
        # d/grad_x of x * inv_rms(x): the direct term minus the part through inv_rms.
        grad_x = inv_rms * (g - x_hat * (tl.sum(g * x_hat, axis=1) / N)[:, None])
        tl.store(grad_x_ptr + offset, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)
        grad_weight += grad_y * x_hat
    grad_weight_row = tl.sum(grad_weight, axis=0)[None, :]
    tl.store(
        grad_weight_partial_ptr + pid * N + cols,
        grad_weight_row.to(grad_weight_partial_ptr.dtype.element_ty),
        mask=cols < N,
    )


@triton.jit(do_not_specialize=["P"])
def _grad_weight_sum_kernel(
    partial_ptr,  # [P, N] float32, one row of partial sums per program
    grad_weight_ptr,  # [N] gradient of the weight, the weight's dtype
    P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, GDC: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: rows start aligned
    # grad_weight for BLOCK_N columns: the P partial rows summed in a fixed order
    # (so the result does not vary from run to run), cast to grad_weight's dtype.
    pdl_prologue(GDC)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for first in range(0, P, BLOCK_P):
        rows = first + tl.arange(0, BLOCK_P)[:, None]
        acc += tl.load(partial_ptr + rows * N + cols, mask=(rows < P) & (cols < N), other=0.0)
    total = tl.sum(acc, axis=0)[None, :]
    tl.store(grad_weight_ptr + cols, total.to(grad_weight_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _rms_norm_backward_chunked_kernel(
    grad_y_ptr,  # [M, N] gradient of y, x's dtype
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    grad_x_ptr,  # [M, N] gradient of x, x's dtype
    N, BLOCK_N: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    # Rows too long for registers: one program per row walks it twice in
    # chunks, for sum(grad_y * w * x) and then for grad_x. grad_weight is left to
    # _grad_weight_columns_kernel, which walks the columns.
    pdl_prologue(GDC)
    row = tl.program_id(0).to(tl.int64)
    r = tl.load(inv_rms_ptr + row)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        grad_y = tl.load(grad_y_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        acc += grad_y * w * x
    c = tl.sum(acc, axis=0) * r * r * r / N
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        grad_y = tl.load(grad_y_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        grad_x = r * grad_y * w - c * x
        tl.store(grad_x_ptr + row * N + cols, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _grad_weight_columns_kernel(
    grad_y_ptr,  # [M, N] gradient of y, x's dtype
    x_ptr,  # [M, N] input, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    partial_ptr,  # [P, N] float32, one row of partial sums per program
    M, N, BLOCK_N: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    # Program (c, p) sums grad_y * x * inv_rms over the rows p, p + P, p + 2P, ...
    # of columns [c * BLOCK_N, (c + 1) * BLOCK_N) into row p of partial;
    # _grad_weight_sum_kernel then adds the P rows.
    pdl_prologue(GDC)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    p = tl.program_id(1).to(tl.int64)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(p, M, tl.num_programs(1)):
        r = tl.load(inv_rms_ptr + row)
        grad_y = tl.load(grad_y_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        acc += grad_y * x * r
    tl.store(partial_ptr + p * N + cols, acc, mask=mask)
