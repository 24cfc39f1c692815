"""Rows too long for one program, split over S programs that meet through global memory."""

import triton
import triton.language as tl

from .prologue import aligned


# Rows too long for one program, split over S programs that meet through
# global memory, the role a thread-block cluster plays for the CUDA kernels
# (csrc/rms_norm/rms_norm_forward_cluster.cuh). Each program holds SEG
# columns of a row in registers, writes its part of the row's sum to its
# slot, slots[row, s] (zeroed for each call), and waits until all S slots of
# the row are written; then it adds the S parts in one fixed order, so every
# segment of a row uses the same total and the result is the same on every
# run. A slot holds its part and the mark that says it was written, in one
# 64-bit store: a count of the parts written next to them would need a fence
# between part and count, which waits for every store the program has in
# flight (``tools/sweep_triton.py split``,
# docs/recorded/sweep_triton_split_<gpu>.txt against
# docs/recorded/sweep_triton_split_fenced_<gpu>.txt).
#
# Nothing in CUDA promises that the S programs of a row run at the same time.
# On a GPU of its own, the GPU starts programs in the order of their index,
# and those of a row are neighbours, so a waiting program only ever waits for
# programs already running, or next to start, as long as S programs fit on
# the GPU at once (``launch._split_or_chunked`` keeps S to at most the number
# of SMs). Beside other work that holds SMs they may not fit: the programs
# that run wait for those that cannot start, until the other work ends, and
# for ever if that work waits for work queued after this kernel.
# ``OPGUIDE_TRITON_SPLIT=0`` walks such rows in chunks instead
# (``tests/test_shared_gpu.py``, step 10.5). The interpreter runs programs
# one after another: there S is 1.
@triton.jit
def _count_in(
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    row,
    s,
    part,
    S,
):
    """Writes this program's ``part`` of a row's sum into its slot, marked as written.

    A slot is 64 bits: the part's float32 bits below, 1 above (0 in a slot
    not yet written). Value and mark arrive in one store, so the reader needs
    no fence to know that the value is there.
    """
    bits = part.to(tl.float32).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    tl.atomic_xchg(slots_ptr + row * S + s, bits | (1 << 32), sem="relaxed", scope="gpu")


@triton.jit
def _wait_total(
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    row,
    S,
    SP: tl.constexpr,
):
    """The sum of a row's S parts once all S slots are written (SP: S up to a power of 2)."""
    k = tl.arange(0, SP)
    slots = slots_ptr + row * S + k
    found = tl.load(slots, mask=k < S, other=1 << 32, volatile=True)
    while tl.min(found >> 32, axis=0) == 0:
        found = tl.load(slots, mask=k < S, other=1 << 32, volatile=True)
    parts = (found & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    return tl.sum(tl.where(k < S, parts, 0.0), axis=0)


@triton.jit
def _segment(S, N, SEG: tl.constexpr):
    """(group, s, cols, mask) of this program: segment s of the rows of group ``pid // S``."""
    pid = tl.program_id(0)
    s = pid % S
    cols = s * SEG + tl.arange(0, SEG)
    return (pid // S).to(tl.int64), s, cols, cols < N


@triton.jit
def _rms_norm_forward_split_kernel(
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    y_ptr,  # [M, N] output, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    N, eps, S, SEG: tl.constexpr, SP: tl.constexpr, STORE_INV: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: rows start aligned
    # Program (row, s) normalises columns [s * SEG, (s + 1) * SEG) of a row,
    # read from memory once. While it waits, the GPU runs other programs.
    row, s, cols, mask = _segment(S, N, SEG)
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    _count_in(slots_ptr, row, s, tl.sum(x * x, axis=0), S)
    total = _wait_total(slots_ptr, row, S, SP)
    inv_rms = tl.rsqrt(total / N + eps).to(tl.float32)
    if STORE_INV:
        tl.store(inv_rms_ptr + row, inv_rms, mask=s == 0)
    tl.store(y_ptr + row * N + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_backward_split_kernel(
    grad_y_ptr,  # [M, N] gradient of y, x's dtype
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    grad_x_ptr,  # [M, N] gradient of x, x's dtype
    grad_weight_partial_ptr,  # [P, N] float32, one row of partial sums per program
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    M, N, S, SEG: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: rows start aligned
    # Program (g, s) of G * S takes segment s of the rows g, g + G, g + 2G,
    # ... (``per_sm`` programs per SM in all, ``launch.split_launch``; one for
    # ``launch.SPLIT_BACKWARD``) and adds its segment of grad_weight over them
    # into row g of grad_weight_partial. It holds three rows: this one, whose total it
    # waits for; the next, whose part of the sum, sum(grad_y * w * x_hat), it
    # counts in before that wait; and the one after, whose loads it starts
    # first, so that they have a whole row's work to arrive
    # (``tools/sweep_triton.py split``, docs/recorded/sweep_triton_split_<gpu>.txt).
    G = tl.num_programs(0) // S
    g, s, cols, mask = _segment(S, N, SEG)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    grad_weight = tl.zeros([SEG], dtype=tl.float32)
    # Rows g and g + G; masks are vectors, as the interpreter needs.
    x = tl.load(x_ptr + g * N + cols, mask=mask, other=0.0)
    grad_y = tl.load(grad_y_ptr + g * N + cols, mask=mask, other=0.0)
    inv_rms = tl.load(inv_rms_ptr + g)
    x_next = tl.load(x_ptr + (g + G) * N + cols, mask=mask & (g + G + 0 * cols < M), other=0.0)
    grad_y_next = tl.load(
        grad_y_ptr + (g + G) * N + cols, mask=mask & (g + G + 0 * cols < M), other=0.0
    )
    inv_next = tl.load(inv_rms_ptr + tl.minimum(g + G, M - 1))  # unused past the last row
    part = tl.sum(grad_y.to(tl.float32) * w * x.to(tl.float32), axis=0) * inv_rms
    _count_in(slots_ptr, g, s, part, S)
    for row in range(g, M, G):
        ahead = row + 2 * G
        in_rows = mask & (ahead + 0 * cols < M)
        x_after = tl.load(x_ptr + ahead * N + cols, mask=in_rows, other=0.0)
        grad_y_after = tl.load(grad_y_ptr + ahead * N + cols, mask=in_rows, other=0.0)
        inv_after = tl.load(inv_rms_ptr + tl.minimum(ahead, M - 1))
        if row + G < M:
            part = tl.sum(grad_y_next.to(tl.float32) * w * x_next.to(tl.float32), axis=0) * inv_next
            _count_in(slots_ptr, row + G, s, part, S)
        total = _wait_total(slots_ptr, row, S, SP)
        x_hat = x.to(tl.float32) * inv_rms
        gw = grad_y.to(tl.float32) * w
        grad_x = inv_rms * (gw - x_hat * (total / N))
        tl.store(grad_x_ptr + row * N + cols, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)
        grad_weight += grad_y.to(tl.float32) * x_hat
        x, grad_y, inv_rms = x_next, grad_y_next, inv_next
        x_next, grad_y_next, inv_next = x_after, grad_y_after, inv_after
    tl.store(grad_weight_partial_ptr + g * N + cols, grad_weight, mask=mask)


@triton.jit
def _fused_add_rms_norm_split_kernel(
    x_ptr,  # [M, N] input, x's dtype
    res_ptr,  # [M, N] residual, written in place
    w_ptr,  # [N] weight, x's dtype
    out_ptr,  # [M, N] output, out_dtype
    inv_rms_ptr,  # [M] float32, one per row
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    N, eps, S, HAS_WEIGHT: tl.constexpr, SEG: tl.constexpr, SP: tl.constexpr,
    ALIGN: tl.constexpr,
):  # fmt: skip
    N = aligned(N, ALIGN)  # a multiple of ALIGN: rows start aligned
    # As the split forward: the new residual is stored before the wait.
    row, s, cols, mask = _segment(S, N, SEG)
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    r = tl.load(res_ptr + row * N + cols, mask=mask, other=0.0)
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    h = (x.to(tl.float32) + r.to(tl.float32)).to(res_ptr.dtype.element_ty)
    tl.store(res_ptr + row * N + cols, h, mask=mask)
    h = h.to(tl.float32)
    _count_in(slots_ptr, row, s, tl.sum(h * h, axis=0), S)
    total = _wait_total(slots_ptr, row, S, SP)
    inv_rms = tl.rsqrt(total / N + eps).to(tl.float32)
    tl.store(inv_rms_ptr + row, inv_rms, mask=s == 0)
    y = h * inv_rms
    if HAS_WEIGHT:
        y = y * w
    tl.store(out_ptr + row * N + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
