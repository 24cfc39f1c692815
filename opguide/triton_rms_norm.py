"""RMSNorm (forward and backward) and fused residual-add + RMSNorm as Triton kernels.

The kernels are registered as operators of the ``opguide`` namespace, next to
the C++ ones, so that :func:`torch.compile` traces a call to them without a
graph break:

* ``opguide::rms_norm_triton``: ``y = x / rms(x) * weight``; differentiable;
* ``opguide::rms_norm_fwd_triton``: ``(y, inv_rms)``, the training forward,
  which keeps the per-row ``inv_rms`` for the backward;
* ``opguide::rms_norm_backward_triton``: ``(dx, dweight)`` from ``dy``, ``x``,
  ``weight`` and the saved ``inv_rms``, the contract of the C++
  ``opguide::rms_norm_backward``;
* ``opguide::fused_add_rms_norm_triton_``: the Triton twin of
  ``opguide::fused_add_rms_norm_``.

On a machine with a GPU they are :func:`torch.library.triton_op` operators
(Inductor sees the kernels); without one, the kernels run in Triton's
interpreter and the operators are :func:`torch.library.custom_op` operators.
Users reach them through ``backend="triton"`` of :func:`opguide.rms_norm` and
:func:`opguide.fused_add_rms_norm_`.
"""

import contextlib
import functools
import operator
import os
from typing import Optional

import torch

# [interpreter-switch]
# Triton compiles kernels for GPUs. Without one, its interpreter runs the same
# kernels on CPU tensors (with NumPy, slowly). TRITON_INTERPRET=1 selects it,
# and Triton reads it when @triton.jit runs, so it is set here, before triton
# is imported. A TRITON_INTERPRET already in the environment wins.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# [interpreter-switch-end]

if INTERPRET and type(tl.zeros).__name__ == "JITFunction":
    # triton.language was imported before TRITON_INTERPRET=1 was set: its own
    # helpers were compiled-mode functions, which the interpreter cannot call.
    raise ImportError(
        "opguide: triton was imported before TRITON_INTERPRET=1 was set, so Triton's "
        "interpreter cannot run; set TRITON_INTERPRET=1 in the environment, or import "
        "opguide before anything that imports triton"
    )

from .fused_add_rms_norm import _check_fused_add_rms_norm_args  # noqa: E402
from .ops import _PLAIN, _check_rms_norm_args  # noqa: E402

# [register-choice]
if INTERPRET:
    # An opaque operator: torch.compile records one call to it, and Inductor
    # calls this Python function at run time. The interpreter is happy.
    register_op = torch.library.custom_op

    def launchable(kernel):
        return kernel

else:
    # A transparent operator: Inductor traces the body, sees each kernel
    # launch (wrap_triton makes it traceable) and calls the compiled kernels
    # from its own generated code. It needs kernels compiled for a GPU.
    register_op = torch.library.triton_op
    launchable = torch.library.wrap_triton
# [register-choice-end]

#: The dtypes the Triton kernels take.
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# [pdl]
# Programmatic dependent launch (PDL), as for the CUDA kernels (csrc/launch.cuh):
# a kernel launched with launch_pdl=True may be scheduled while the previous
# kernel on the stream drains. GDC=True compiles the two instructions into
# the kernel: gdc_wait (wait for the previous kernel's results before reading
# memory) and gdc_launch_dependents (let the next kernel be scheduled). Hopper
# and later GPUs only, and only for eager calls on real tensors: while
# torch.compile or opcheck traces an operator, wrap_triton analyses the
# kernel, and that analysis does not understand the instructions' inline
# assembly. OPGUIDE_PDL=0 turns PDL off, for the CUDA kernels too.
_PDL_ENABLED = not INTERPRET and os.environ.get("OPGUIDE_PDL", "1") != "0"
_PDL_CAPABLE: dict[int, bool] = {}


def _pdl(t: torch.Tensor) -> dict:
    """The launch options for a kernel on ``t``: GDC, and launch_pdl when PDL is on."""
    off = {"GDC": False}  # passed explicitly: Inductor does not fill in defaults
    if not _PDL_ENABLED or type(t) is not torch.Tensor or torch.compiler.is_compiling():
        return off
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    if get_proxy_mode() is not None:  # make_fx is tracing
        return off
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if index not in _PDL_CAPABLE:
        # PDL is NVIDIA's (Hopper and later); a ROCm build reports AMD GPUs
        # as capability 9.x or 11.x, and Triton's AMD backend has no PDL.
        _PDL_CAPABLE[index] = (
            torch.version.hip is None and torch.cuda.get_device_capability(index)[0] >= 9
        )
    return {"GDC": True, "launch_pdl": True} if _PDL_CAPABLE[index] else off


# [pdl-end]


# [device-guard]
def _on_device_of(t: torch.Tensor):
    """Makes the GPU of ``t`` current for a launch, as the CUDA wrappers' DeviceGuard does.

    Triton launches on the current GPU and requires every pointer argument to
    live there: a tensor on cuda:1 while cuda:0 is current (a second pipeline
    stage, a replica without ``set_device``) fails with "Pointer argument (at
    0) cannot be accessed from Triton (cpu tensor?)". Under torch.compile the
    code Inductor generates sets the device itself.
    """
    if (
        t.is_cuda
        and not torch.compiler.is_compiling()
        and t.get_device() != torch.cuda.current_device()
    ):
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


# [device-guard-end]


def _shape_only(t: torch.Tensor) -> bool:
    """A fake tensor: the body runs to derive output shapes, and launches nothing.

    DTensor derives the global output shapes of an operator this way, with
    fake tensors on the CPU whatever the device of the real ones.
    """
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)


def _check_input(op: str, name: str, t: torch.Tensor) -> None:
    if t.device.type == "cpu" and not INTERPRET and not _shape_only(t):
        raise RuntimeError(
            f"{op}: the Triton backend runs CPU tensors only in Triton's interpreter "
            f"(TRITON_INTERPRET=1, set by opguide when no GPU is visible); {name} is on cpu"
        )
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{op}: the Triton backend supports float32, float16 and bfloat16 {name}, "
            f"got {t.dtype}; use backend='cpp'"
        )


# [autotune-configs]
def _long_row_configs() -> list:
    if INTERPRET:
        # The interpreter would run (slowly) every config to time it, on a
        # device it does not have; one config means no timing at all.
        return [triton.Config({"BLOCK_N": 1024}, num_warps=1)]
    return [
        triton.Config({"BLOCK_N": block}, num_warps=warps)
        for block in (1024, 4096)
        for warps in (4, 8, 16)
    ]


# [autotune-configs-end]


# [forward-kernel]
# do_not_specialize: Triton compiles a kernel for each kind of int argument
# (equal to 1, a multiple of 16, other), which helps where the int shapes
# vector accesses (N) and not where it only bounds rows (M). One kernel for
# every M is also one kernel to keep for the eager path ([eager-path]).
@triton.jit(do_not_specialize=["M"])
def _rms_norm_fwd_kernel(
    x_ptr, w_ptr, y_ptr, inv_rms_ptr, M, N, eps,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STORE_INV: tl.constexpr, GDC: tl.constexpr,
    ALIGN: tl.constexpr,
):  # fmt: skip
    N = N // ALIGN * ALIGN  # a multiple of ALIGN: rows start aligned ([alignment])
    # One program normalises ROWS whole rows, held in registers as a
    # (ROWS, BLOCK_N) block: x is read from memory once. BLOCK_N is N rounded
    # up to a power of two; the mask covers the padding and the last rows.
    # STORE_INV (the training forward) also writes inv_rms, one per row.
    if GDC:  # see [pdl] above; a constexpr, so the branch costs nothing
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    row_ids = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rows = row_ids[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    # No cache hints: eviction_policy="evict_first" on x and y cost 3-5 points
    # of the copy when L2 holds other data (step 11, "Lessons").
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


# [forward-kernel-end]


# [long-row-kernel]
@triton.autotune(configs=_long_row_configs(), key=["N"])
@triton.jit
def _rms_norm_fwd_long_kernel(
    x_ptr, w_ptr, y_ptr, inv_rms_ptr, N, eps, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr
):
    # Rows too long for registers: one program per row walks it in chunks of
    # BLOCK_N columns twice, once for the sum of squares, once to write y
    # (the second read mostly hits the L2 cache).
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


# [long-row-kernel-end]

#: Longest row (elements) that the forward kernel keeps in registers; longer
#: rows are split over several programs ([split-rows]).
MAX_REGISTER_ROW = 16384


# [backward-kernel]
@triton.jit(do_not_specialize=["M"])  # as the forward
def _rms_norm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, inv_rms_ptr, dx_ptr, dw_partial_ptr, M, N,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STAGES: tl.constexpr,
    GDC: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = N // ALIGN * ALIGN  # a multiple of ALIGN: rows start aligned ([alignment])
    # Program p handles the groups of ROWS rows p, p + P, p + 2P, ... (P
    # programs, as many as fit on the GPU at once, so that neighbouring rows
    # are read at the same time) and writes its own partial sum of dweight to
    # row p of dw_partial; a second kernel sums those rows. No two programs
    # write the same memory. Short rows come several at a time (ROWS > 1), so
    # that each step has enough work; with STAGES > 1 Triton loads the next
    # groups while it computes this one.
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0).to(tl.int64)  # int64: row * N may pass 2**31
    cols = tl.arange(0, BLOCK_N)[None, :]
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    dw = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    for first in tl.range(pid * ROWS, M, tl.num_programs(0) * ROWS, num_stages=STAGES):
        rows = first + tl.arange(0, ROWS)[:, None]
        mask = (rows < M) & (cols < N)
        offset = rows * N + cols
        x = tl.load(x_ptr + offset, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offset, mask=mask, other=0.0).to(tl.float32)
        # The forward's inv_rms, one per row, saved for this pass.
        inv_rms = tl.load(inv_rms_ptr + rows, mask=rows < M, other=0.0)
        x_hat = x * inv_rms
        g = dy * w
        # d/dx of x * inv_rms(x): the direct term minus the part through inv_rms.
        dx = inv_rms * (g - x_hat * (tl.sum(g * x_hat, axis=1) / N)[:, None])
        tl.store(dx_ptr + offset, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * x_hat
    tl.store(dw_partial_ptr + pid * N + cols, tl.sum(dw, axis=0)[None, :], mask=cols < N)


@triton.jit(do_not_specialize=["P"])
def _dw_sum_kernel(
    partial_ptr, dw_ptr, P, N,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, GDC: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = N // ALIGN * ALIGN  # a multiple of ALIGN: rows start aligned ([alignment])
    # dweight for BLOCK_N columns: the P partial rows summed in a fixed order
    # (so the result does not vary from run to run), cast to dweight's dtype.
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for first in range(0, P, BLOCK_P):
        rows = first + tl.arange(0, BLOCK_P)[:, None]
        acc += tl.load(partial_ptr + rows * N + cols, mask=(rows < P) & (cols < N), other=0.0)
    total = tl.sum(acc, axis=0)[None, :]
    tl.store(dw_ptr + cols, total.to(dw_ptr.dtype.element_ty), mask=cols < N)


# [backward-kernel-end]


# [long-row-backward]
@triton.jit
def _rms_norm_bwd_long_kernel(
    dy_ptr, x_ptr, w_ptr, inv_rms_ptr, dx_ptr, N, BLOCK_N: tl.constexpr, GDC: tl.constexpr
):  # fmt: skip
    # Rows too long for registers: one program per row walks it twice in
    # chunks, for sum(dy * w * x) and then for dx. dweight is left to
    # _dw_columns_kernel, which walks the columns.
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0).to(tl.int64)
    r = tl.load(inv_rms_ptr + row)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * w * x
    c = tl.sum(acc, axis=0) * r * r * r / N
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        dx = r * dy * w - c * x
        tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dw_columns_kernel(
    dy_ptr, x_ptr, inv_rms_ptr, partial_ptr, M, N, BLOCK_N: tl.constexpr, GDC: tl.constexpr
):  # fmt: skip
    # Program (c, p) sums dy * x * inv_rms over the rows p, p + P, p + 2P, ...
    # of columns [c * BLOCK_N, (c + 1) * BLOCK_N) into row p of partial;
    # _dw_sum_kernel then adds the P rows.
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    p = tl.program_id(1).to(tl.int64)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(p, M, tl.num_programs(1)):
        r = tl.load(inv_rms_ptr + row)
        dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * x * r
    tl.store(partial_ptr + p * N + cols, acc, mask=mask)


# [long-row-backward-end]


# [split-rows]
# Rows too long for one program, split over S programs that meet through
# global memory, the role a thread-block cluster plays for the CUDA kernels
# (csrc/rms_norm_long.cuh). Each program holds SEG columns of a row in
# registers, writes its part of the row's sum to its slot, slots[row, s]
# (zeroed for each call), and waits until all S slots of the row are
# written; then it adds the S parts in one fixed order, so every segment of a
# row uses the same total and the result is the same on every run. A slot
# holds its part and the mark that says it was written, in one 64-bit
# store: a count of the parts written next to them would need a fence
# between part and count, which waits for every store the program has in
# flight (step 11, "Long rows", measures both).
#
# Nothing in CUDA promises that the S programs of a row run at the same time.
# The GPU starts programs in the order of their index, and those of a row are
# neighbours, so a waiting program only ever waits for programs already
# running, or next to start, as long as S programs fit on the GPU at once
# (_split_rows keeps S to at most the number of SMs). The interpreter runs
# programs one after another: there S is 1.
@triton.jit
def _count_in(slots_ptr, row, s, part, S):
    """Writes this program's ``part`` of a row's sum into its slot, marked as written.

    A slot is 64 bits: the part's float32 bits below, 1 above (0 in a slot
    not yet written). Value and mark arrive in one store, so the reader needs
    no fence to know that the value is there.
    """
    bits = part.to(tl.float32).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    tl.atomic_xchg(slots_ptr + row * S + s, bits | (1 << 32), sem="relaxed", scope="gpu")


@triton.jit
def _wait_total(slots_ptr, row, S, SP: tl.constexpr):
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
def _rms_norm_fwd_split_kernel(
    x_ptr, w_ptr, y_ptr, inv_rms_ptr, slots_ptr, N, eps, S,
    SEG: tl.constexpr, SP: tl.constexpr, STORE_INV: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = N // ALIGN * ALIGN  # a multiple of ALIGN: rows start aligned ([alignment])
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
def _rms_norm_bwd_split_kernel(
    dy_ptr, x_ptr, w_ptr, inv_rms_ptr, dx_ptr, dw_partial_ptr, slots_ptr, M, N, S,
    SEG: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = N // ALIGN * ALIGN  # a multiple of ALIGN: rows start aligned ([alignment])
    # Program (g, s) of G * S takes segment s of the rows g, g + G, g + 2G,
    # ... (two programs per SM) and adds its segment of dweight over them
    # into row g of dw_partial. It holds three rows: this one, whose total it
    # waits for; the next, whose part of the sum, sum(dy * w * x_hat), it
    # counts in before that wait; and the one after, whose loads it starts
    # first, so that they have a whole row's work to arrive (step 11, "Long
    # rows", measures each step).
    G = tl.num_programs(0) // S
    g, s, cols, mask = _segment(S, N, SEG)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([SEG], dtype=tl.float32)
    # Rows g and g + G; masks are vectors, as the interpreter needs.
    x = tl.load(x_ptr + g * N + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + g * N + cols, mask=mask, other=0.0)
    inv_rms = tl.load(inv_rms_ptr + g)
    x_next = tl.load(x_ptr + (g + G) * N + cols, mask=mask & (g + G + 0 * cols < M), other=0.0)
    dy_next = tl.load(dy_ptr + (g + G) * N + cols, mask=mask & (g + G + 0 * cols < M), other=0.0)
    inv_next = tl.load(inv_rms_ptr + tl.minimum(g + G, M - 1))  # unused past the last row
    part = tl.sum(dy.to(tl.float32) * w * x.to(tl.float32), axis=0) * inv_rms
    _count_in(slots_ptr, g, s, part, S)
    for row in range(g, M, G):
        ahead = row + 2 * G
        in_rows = mask & (ahead + 0 * cols < M)
        x_after = tl.load(x_ptr + ahead * N + cols, mask=in_rows, other=0.0)
        dy_after = tl.load(dy_ptr + ahead * N + cols, mask=in_rows, other=0.0)
        inv_after = tl.load(inv_rms_ptr + tl.minimum(ahead, M - 1))
        if row + G < M:
            part = tl.sum(dy_next.to(tl.float32) * w * x_next.to(tl.float32), axis=0) * inv_next
            _count_in(slots_ptr, row + G, s, part, S)
        total = _wait_total(slots_ptr, row, S, SP)
        x_hat = x.to(tl.float32) * inv_rms
        gw = dy.to(tl.float32) * w
        dx = inv_rms * (gw - x_hat * (total / N))
        tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy.to(tl.float32) * x_hat
        x, dy, inv_rms = x_next, dy_next, inv_next
        x_next, dy_next, inv_next = x_after, dy_after, inv_after
    tl.store(dw_partial_ptr + g * N + cols, dw, mask=mask)


@triton.jit
def _fused_add_rms_norm_split_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, inv_rms_ptr, slots_ptr, N, eps, S,
    HAS_WEIGHT: tl.constexpr, SEG: tl.constexpr, SP: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    N = N // ALIGN * ALIGN  # a multiple of ALIGN: rows start aligned ([alignment])
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


def _row_slots(x: torch.Tensor, m: int, segments: int) -> torch.Tensor:
    """The split kernels' slots: one per segment of each row, zeroed (not yet written)."""
    return torch.zeros(m * segments, dtype=torch.int64, device=x.device)


# [split-rows-end]


# [launch-rules]
# Launch parameters, from sweeps on an H200 and an H100
# (`python3 tools/sweep_triton.py forward backward fused dwsum split`), not
# triton.autotune keyed on N: the best choice depends on M too, and such an
# autotuner keeps whatever suited the first M it sees.
# [alignment]
# Triton specialises an integer argument that is a multiple of 16 (and a
# pointer that is 16-byte aligned): the compiler then knows that every row
# starts on a 16-byte boundary and loads whole vectors. For any other N it
# knows nothing, and each element is loaded alone. ALIGN, a constexpr, is the
# largest power of two up to 16 that divides N, and each kernel begins with
# N = N // ALIGN * ALIGN: the same N, written so that the compiler can see it
# is a multiple of ALIGN. Rows of 4104 elements (ALIGN 8) get 16-byte loads
# again, at the cost of one compiled variant per ALIGN (step 11, "Odd row
# lengths", measures it).
def _align(n: int) -> int:
    """ALIGN of the kernels: the largest of 1, 2, 4, 8 and 16 that divides n (16 for 0)."""
    return min(n & -n, 16) or 16


# [alignment-end]


def _forward_launch(block: int) -> tuple[int, int]:
    """(ROWS, num_warps) of the forward: about 2048 elements per program, 16 per thread."""
    if INTERPRET:
        return 1, 1
    rows = max(1, 2048 // block)
    elements = rows * block
    return rows, min(max(elements // 512, 1), 8 if elements <= 8192 else 16)


def _sm_count(x: torch.Tensor) -> int:
    if INTERPRET or not x.is_cuda:
        return 1
    return torch.cuda.get_device_properties(x.device).multi_processor_count


def _backward_launch(x: torch.Tensor, m: int, block: int) -> tuple[int, int, int, int]:
    """(programs, ROWS, STAGES, num_warps) of the backward."""
    # Short rows go several to a step: at least 4096 elements per step.
    rows = max(1, 4096 // block)
    if INTERPRET or not x.is_cuda:  # the interpreter runs programs one after another
        return max(1, min(4, m)), rows, 1, 1
    props = torch.cuda.get_device_properties(x.device)
    step = rows * block
    # Three stages of x and dy in shared memory when they fit, else fewer.
    budget = getattr(props, "shared_memory_per_block_optin", 0) or 96 * 1024
    stages = 3
    while stages > 1 and stages * 2 * step * x.element_size() > budget - 8 * 1024:
        stages -= 1
    # Two programs per SM for steps of up to 4096 elements, one for larger
    # ones (whose stages leave no room for a second program).
    programs = props.multi_processor_count * (2 if step <= 4096 else 1)
    return max(1, min(programs, m)), rows, stages, 4 if block < 4096 else 8


# The dweight sum: BLOCK_P partial rows by BLOCK_N columns per step, and
# num_warps. Narrow column strips give many programs, tall ones few steps:
# (128, 32, 2) against the first choice (32, 64, 4) took the whole backward
# from 82% to 88% of the copy at (8192, 4096) (`sweep_triton.py dwsum`).
DW_SUM_BLOCK_P, DW_SUM_BLOCK_N, DW_SUM_WARPS = 128, 32, 2


# The split kernels ([split-rows]): (SEG, num_warps) of the forward and the
# fused kernel, from `sweep_triton.py split` on an H100 at M * N = 2**26,
# bfloat16, N from 16384 to 131072 (docs/recorded/sweep_triton_split_h100.txt):
# the choice whose slowest N is fastest.
SPLIT_FORWARD, SPLIT_FUSED = (4096, 2), (16384, 16)
#: The split backward's (SEG, num_warps, programs per SM); None: the rule of
#: _backward_split. The sweep sets a tuple here to time each choice.
SPLIT_BACKWARD: Optional[tuple[int, int, int]] = None  # noqa: UP045


def _backward_split(n: int) -> tuple[int, int, int]:
    """(SEG, num_warps, programs per SM) of the split backward for rows of n elements.

    Segments of 4096 elements, 32 per thread, two programs of 4 warps per
    SM: within 0.2 points of the copy of the fastest choice at every N of the
    same sweep. Rows past 4096 * SMs take the chunked kernels.
    """
    if SPLIT_BACKWARD is not None:
        return SPLIT_BACKWARD
    return 4096, 4, 2


def _split_groups(x: torch.Tensor, m: int, segments: int, split: tuple) -> int:
    """G, the row groups of the split backward: split[2] programs per SM in all."""
    return max(1, min(m, split[2] * _sm_count(x) // segments))


#: Longest row (elements) that the backward keeps in registers; its register
#: kernel spills past it, and longer rows take the split kernel.
MAX_REGISTER_ROW_BACKWARD = 8192


def _split_rows(x: torch.Tensor, n: int, seg: int) -> Optional[tuple[int, int, int]]:  # noqa: UP045
    """(S, SEG, SP) to split rows of n elements into S segments, or None.

    None when the rows need more segments than SMs (not sure to run at once):
    those rows take the chunked kernels. The interpreter runs one segment per
    row, and the chunked kernels past 2**17 elements, so that both run on CPU.
    """
    if INTERPRET or not x.is_cuda:
        return (1, triton.next_power_of_2(n), 1) if n <= 2**17 else None
    segments = triton.cdiv(n, seg)
    if segments > _sm_count(x):
        return None
    return segments, seg, triton.next_power_of_2(segments)


def _warps(split: tuple[int, int]) -> int:
    return 1 if INTERPRET else split[1]


def _fused_warps(block: int) -> int:
    # Few warps, many elements each (64 at 4096 and above): fastest in the sweep.
    return 1 if INTERPRET else max(2, min(block // 2048, 16))


# [launch-rules-end]


# [forward-op]
def _forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    inv_rms: Optional[torch.Tensor],  # noqa: UP045
):
    """y for x and weight; also fills inv_rms (one float32 per row) when given."""
    _check_rms_norm_args(x, weight, eps)
    _check_input("rms_norm", "x", x)
    xc = x.contiguous()
    y = torch.empty_like(xc)
    # Plain ints: while torch.compile traces a triton_op with dynamic shapes
    # these are SymInts, which Triton's launcher and autotuner cannot hash.
    n = int(xc.shape[-1])
    m = int(xc.numel()) // n if n > 0 else 0
    if m == 0:
        if inv_rms is not None:
            # Rows of length 0: the mean of no squares is 0/0, as the C++ kernels compute.
            inv_rms.fill_(float("nan"))
        return y
    store_inv = inv_rms is not None
    inv_arg = inv_rms if store_inv else y  # not written when STORE_INV is False
    with _on_device_of(xc):
        if n <= MAX_REGISTER_ROW:
            block = triton.next_power_of_2(n)
            rows, warps = _forward_launch(block)
            launchable(_rms_norm_fwd_kernel)[(triton.cdiv(m, rows),)](
                xc, weight.contiguous(), y, inv_arg, m, n, eps, BLOCK_N=block, ROWS=rows,
                STORE_INV=store_inv, ALIGN=_align(n), num_warps=warps, **_pdl(xc),
            )  # fmt: skip
        elif (split := _split_rows(xc, n, SPLIT_FORWARD[0])) is not None:
            segments, seg, sp = split
            slots = _row_slots(xc, m, segments)
            launchable(_rms_norm_fwd_split_kernel)[(m * segments,)](
                xc, weight.contiguous(), y, inv_arg, slots, n, eps, segments,
                SEG=seg, SP=sp, STORE_INV=store_inv, ALIGN=_align(n),
                num_warps=_warps(SPLIT_FORWARD),
            )  # fmt: skip
        else:
            launchable(_rms_norm_fwd_long_kernel)[(m,)](
                xc, weight.contiguous(), y, inv_arg, n, eps, STORE_INV=store_inv
            )
    return y


@register_op("opguide::rms_norm_triton", mutates_args=())
def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _forward(x, weight, eps, None)


@register_op("opguide::rms_norm_fwd_triton", mutates_args=())
def rms_norm_fwd_triton(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # The training forward: y, and inv_rms for rms_norm_backward_triton.
    inv_rms = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    return _forward(x, weight, eps, inv_rms), inv_rms


# [forward-op-end]


# [backward-op]
@register_op("opguide::rms_norm_backward_triton", mutates_args=())
def rms_norm_backward_triton(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_input("rms_norm", "x", x)
    torch._check(grad.shape == x.shape, lambda: "rms_norm_backward: grad_y must match x")
    xc = x.contiguous()
    dy = grad.contiguous()
    rc = inv_rms.contiguous()
    wc = weight.contiguous()
    dx = torch.empty_like(xc)
    # Plain ints: while torch.compile traces a triton_op with dynamic shapes
    # these are SymInts, which Triton's launcher and autotuner cannot hash.
    n = int(xc.shape[-1])
    m = int(xc.numel()) // n if n > 0 else 0
    if m == 0:
        return dx, torch.zeros_like(weight)
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format)
    pdl = _pdl(xc)
    with _on_device_of(xc):
        if n <= MAX_REGISTER_ROW_BACKWARD:
            # The whole row in registers, rows looped over by a grid that fits.
            block = triton.next_power_of_2(n)
            programs, rows, stages, warps = _backward_launch(xc, m, block)
            dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
            launchable(_rms_norm_bwd_kernel)[(programs,)](
                dy, xc, wc, rc, dx, dw_partial, m, n,
                BLOCK_N=block, ROWS=rows, STAGES=stages, ALIGN=_align(n), num_warps=warps, **pdl,
            )  # fmt: skip
        elif (split := _split_rows(xc, n, (config := _backward_split(n))[0])) is not None:
            # Longer rows: each split over programs that meet through memory.
            segments, seg, sp = split
            programs = _split_groups(xc, m, segments, config)
            dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
            slots = _row_slots(xc, m, segments)
            launchable(_rms_norm_bwd_split_kernel)[(programs * segments,)](
                dy, xc, wc, rc, dx, dw_partial, slots, m, n, segments,
                SEG=seg, SP=sp, ALIGN=_align(n), num_warps=_warps(config),
            )  # fmt: skip
        else:
            # Rows too long to split: dx row by row in chunks, dweight over
            # column strips.
            block = 1024 if INTERPRET else 4096
            launchable(_rms_norm_bwd_long_kernel)[(m,)](
                dy, xc, wc, rc, dx, n, BLOCK_N=block, num_warps=1 if INTERPRET else 8, **pdl
            )  # fmt: skip
            strips = triton.cdiv(n, block)
            programs = max(1, min(m, _sm_count(xc) * 4 // strips))
            dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
            launchable(_dw_columns_kernel)[(strips, programs)](
                dy, xc, rc, dw_partial, m, n, BLOCK_N=block, num_warps=1 if INTERPRET else 8,
                **pdl,
            )  # fmt: skip
        # The second stage of the dweight reduction: a sum over `programs` rows.
        launchable(_dw_sum_kernel)[(triton.cdiv(n, DW_SUM_BLOCK_N),)](
            dw_partial, dweight, programs, n, BLOCK_P=DW_SUM_BLOCK_P, BLOCK_N=DW_SUM_BLOCK_N,
            ALIGN=_align(n), num_warps=DW_SUM_WARPS, **pdl,
        )  # fmt: skip
    return dx, dweight


# [backward-op-end]


# [autograd]
# The training forward saves x, weight and inv_rms; its backward is the
# backward operator, the contract of the C++ operators of step 8.
def _fwd_setup_context(ctx, inputs, output):
    x, weight, _eps = inputs
    _y, inv_rms = output
    ctx.save_for_backward(x, weight, inv_rms)
    ctx.mark_non_differentiable(inv_rms)
    ctx.set_materialize_grads(False)  # no zeros allocated for inv_rms's gradient


def _fwd_backward(ctx, grad, _grad_inv_rms):
    if grad is None:  # y took no part in the loss
        return None, None, None
    x, weight, inv_rms = ctx.saved_tensors
    dx, dweight = rms_norm_backward_triton(grad, x, weight, inv_rms)
    return (
        dx if ctx.needs_input_grad[0] else None,
        dweight if ctx.needs_input_grad[1] else None,
        None,  # no gradient for eps
    )


rms_norm_fwd_triton.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


# The inference operator keeps no inv_rms: called directly with inputs that
# require grad, its backward recomputes it first.
def _setup_context(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, grad):
    x, weight = ctx.saved_tensors
    _, inv_rms = rms_norm_fwd_triton(x, weight, ctx.eps)
    dx, dweight = rms_norm_backward_triton(grad, x, weight, inv_rms)
    return dx, dweight, None  # no gradient for eps


rms_norm_triton.register_autograd(_backward, setup_context=_setup_context)
# [autograd-end]


# [eager-path]
# A call made as a user makes it (plain tensors on a GPU, nothing tracing or
# transforming) gains nothing from the operators' dispatcher layers, and each
# is Python that runs on every call: the custom op's autograd kernel, its
# device kernel, wrap_triton's wrappers, Triton's binding of the arguments.
# Such calls, on rows the kernels hold in registers, launch the kernels
# directly; every other call (torch.compile, export, vmap, a dispatch mode,
# DTensor, long rows) goes through the operators above. Step 11, "The eager
# call", measures both.


class _Kept:
    """A kernel as Triton compiled it for one kind of call, relaunched directly.

    ``kernel[grid](*args, **kw)`` binds its arguments, works out what the
    compiled kernel is specialised on (the dtype and 16-byte alignment of each
    pointer, and N) and looks the kernel up, on every call. Calls on one GPU,
    dtype and N, with aligned pointers, share all of that, so the first goes
    through Triton and the kernel it returns is kept; later calls hand its
    launcher the changing arguments only, pointers as ints (the launcher
    checks a tensor's pointer with a driver call, an int's not at all).
    """

    # False for the whole process once a launcher refuses these arguments (a
    # Triton whose launcher takes others), or when this Triton keeps its launch
    # hooks elsewhere (before triton.knobs): every call then goes through Triton.
    works = hasattr(triton, "knobs")

    def __init__(self, kernel, grid: int, args: tuple, kw: dict):
        self.compiled = kernel[(grid,)](*args, **kw)
        # The launcher takes every parameter, constexprs included, in order.
        self.constants = tuple(kw.get(p.name, p.default) for p in kernel.params[len(args) :])
        self.run = self.compiled.run
        self.handles = self.compiled.function, self.compiled.packed_metadata

    def __call__(self, grid: int, stream: int, *args) -> None:
        values = args + self.constants
        hooks = triton.knobs.runtime  # as JITFunction.run passes them
        enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
        if _no_hook(enter) and _no_hook(leave):
            # With no hook to call, the launch metadata (built for the hooks
            # only) is not built, and the launcher calls nothing back.
            self.run(grid, 1, 1, stream, *self.handles, None, None, None, *values)
            return
        grid3 = (grid, 1, 1)
        meta = None if enter is None else self.compiled.launch_metadata(grid3, stream, *values)
        self.run(grid, 1, 1, stream, *self.handles, meta, enter, leave, *values)


def _no_hook(hook) -> bool:
    """Whether a launch hook of triton.knobs calls nothing: None, or an empty chain.

    Recent Triton keeps each hook as a chain that is never None, and whose
    ``calls`` list is empty until a profiler adds to it.
    """
    return hook is None or getattr(hook, "calls", None) == []


# Per GPU, dtype and N: the launch rules' answers (they read the GPU's
# properties, which costs more than a launch), the PDL options, and the kept
# kernels, filled in by the first aligned call of each.
_PLANS: dict = {}


class _Plan:
    def __init__(self, x: torch.Tensor, n: int):
        self.block = triton.next_power_of_2(n)
        self.align = _align(n)
        self.rows, self.warps = _forward_launch(self.block)
        self.programs, self.bwd_rows, self.stages, self.bwd_warps = _backward_launch(
            x, 2**31, self.block
        )
        self.dw_grid = triton.cdiv(n, DW_SUM_BLOCK_N)
        self.pdl = _pdl(x)
        self.forward = {}  # training (STORE_INV) -> _Kept
        self.backward = self.dw_sum = None


def _plan(x: torch.Tensor, n: int) -> _Plan:
    key = (x.get_device(), x.dtype, n)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(x, n)
    return plan


def _direct_forward(x: torch.Tensor, weight: torch.Tensor, eps: float, training: bool):
    """``_forward`` for a direct call: y, and inv_rms when training."""
    n = x.shape[-1]
    m = x.numel() // n
    plan = _plan(x, n)
    y = torch.empty_like(x)
    inv_rms = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) if training else y
    pointers = x.data_ptr(), weight.data_ptr(), y.data_ptr(), inv_rms.data_ptr()
    aligned = not functools.reduce(operator.or_, pointers) % 16
    grid = triton.cdiv(m, plan.rows)
    kept = plan.forward.get(training)
    if kept is not None and aligned and _Kept.works:
        try:
            stream = torch._C._cuda_getCurrentRawStream(x.get_device())
            kept(grid, stream, *pointers, m, n, eps)
            return y, inv_rms
        except TypeError:
            _Kept.works = False
    args = (x, weight, y, inv_rms, m, n, eps)
    kw = dict(
        BLOCK_N=plan.block,
        ROWS=plan.rows,
        STORE_INV=training,
        ALIGN=plan.align,
        num_warps=plan.warps,
    )
    if aligned:
        plan.forward[training] = _Kept(_rms_norm_fwd_kernel, grid, args, {**kw, **plan.pdl})
    else:  # compiled for these pointers: launched, not kept
        _rms_norm_fwd_kernel[(grid,)](*args, **kw, **plan.pdl)
    return y, inv_rms


def _direct_backward(grad, x, weight, inv_rms):
    """``rms_norm_backward_triton`` for a direct call: (dx, dweight).

    It runs once per training call, on autograd's thread: its checks are the
    few the forward did not already make, and the launch rules come from the
    plan (step 11, "The eager call").
    """
    n = x.shape[-1]
    m = x.numel() // n
    dy = grad.contiguous()
    if n > MAX_REGISTER_ROW_BACKWARD or x.get_device() != torch._C._cuda_getDevice():
        return rms_norm_backward_triton(dy, x, weight, inv_rms)  # through the operator
    plan = _plan(x, n)
    programs = min(plan.programs, m)
    dx = torch.empty_like(x)
    dweight = torch.empty_like(weight)
    dw_partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
    pointers = (
        dy.data_ptr(), x.data_ptr(), weight.data_ptr(), inv_rms.data_ptr(), dx.data_ptr(),
        dw_partial.data_ptr(), dweight.data_ptr(),
    )  # fmt: skip
    if functools.reduce(operator.or_, pointers) % 16:
        return rms_norm_backward_triton(dy, x, weight, inv_rms)  # not a call kernels are kept for
    if plan.backward is not None and _Kept.works:
        try:
            stream = torch._C._cuda_getCurrentRawStream(x.get_device())
            plan.backward(programs, stream, *pointers[:6], m, n)
            plan.dw_sum(plan.dw_grid, stream, pointers[5], pointers[6], programs, n)
            return dx, dweight
        except TypeError:
            _Kept.works = False
    main = (dy, x, weight, inv_rms, dx, dw_partial, m, n)
    kw = dict(
        BLOCK_N=plan.block,
        ROWS=plan.bwd_rows,
        STAGES=plan.stages,
        ALIGN=plan.align,
        num_warps=plan.bwd_warps,
    )
    plan.backward = _Kept(_rms_norm_bwd_kernel, programs, main, {**kw, **plan.pdl})
    kw = dict(
        BLOCK_P=DW_SUM_BLOCK_P, BLOCK_N=DW_SUM_BLOCK_N, ALIGN=plan.align, num_warps=DW_SUM_WARPS
    )
    total = (dw_partial, dweight, programs, n)
    plan.dw_sum = _Kept(_dw_sum_kernel, plan.dw_grid, total, {**kw, **plan.pdl})
    return dx, dweight


def _direct_call(x, weight, eps) -> bool:
    """Whether a call may launch the kernels directly: plain, valid arguments.

    Any other call, including one with invalid arguments, takes the checked
    path, which raises the errors ``_check_rms_norm_args`` words.
    """
    if type(x) not in _PLAIN or type(weight) not in _PLAIN or type(eps) is not float:
        return False
    n = x.shape[-1] if x.dim() else 0
    return (
        not INTERPRET
        and x.is_cuda
        and 0 < n <= MAX_REGISTER_ROW
        and 0 < x.numel() // n < 2**31
        and eps >= 0
        and x.dtype in SUPPORTED_DTYPES
        and weight.dtype == x.dtype  # autocast lets them differ
        and weight.dim() == 1
        and weight.shape[0] == n
        and x.is_contiguous()
        and weight.is_contiguous()
        and x.get_device() == weight.get_device() == torch.cuda.current_device()
        and not torch.compiler.is_compiling()
        and torch._C._len_torch_dispatch_stack() == 0
        and torch._C._functorch.peek_interpreter_stack() is None
        # a tensor left over from a finished torch.func transform, still wrapped
        and not torch._C._functorch.is_functorch_wrapped_tensor(x)
        and not torch._C._functorch.is_functorch_wrapped_tensor(weight)
    )


class _DirectTraining(torch.autograd.Function):
    """The training pair of the operators above, for direct calls."""

    # forward takes ctx (no separate setup_context): Function.apply then does
    # not bind the arguments to forward's signature on every call. inv_rms is
    # saved, not returned: with one output, autograd always hands backward a
    # grad_y, and allocates no zeros for an output the loss did not use.
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, inv_rms = _direct_forward(x, weight, eps, training=True)
        ctx.save_for_backward(x, weight, inv_rms)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, inv_rms = ctx.saved_tensors
        dx, dweight = _direct_backward(grad, x, weight, inv_rms)
        needs = ctx.needs_input_grad
        return dx if needs[0] else None, dweight if needs[1] else None, None


# Function.apply is Python that binds default arguments (forward has none)
# and unwraps functorch's wrappers (_direct_call has ruled out both a
# transform and a wrapper) before it calls the C++ apply it ends in. A
# direct call calls that C++ apply itself.
_C_APPLY = getattr(getattr(torch._C, "_FunctionBase", None), "__dict__", {}).get("apply")
_apply_training = (
    _C_APPLY.__get__(None, _DirectTraining) if _C_APPLY is not None else _DirectTraining.apply
)


def direct_rms_norm(x, weight, eps) -> Optional[torch.Tensor]:  # noqa: UP045
    """``opguide.rms_norm(x, weight, eps, backend="triton")`` launched directly.

    Returns None for a call that needs the operators (see ``_direct_call``).
    """
    if not _direct_call(x, weight, eps):
        return None
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _apply_training(x, weight, eps)
    return _direct_forward(x, weight, eps, training=False)[0]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """What ``opguide.rms_norm(x, weight, eps, backend="triton")`` runs on checked arguments.

    Launched directly when nothing needs the dispatcher; otherwise the
    training operator when gradients are needed, the inference one if not.
    """
    y = direct_rms_norm(x, weight, eps)
    if y is not None:
        return y
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return rms_norm_fwd_triton(x, weight, eps)[0]
    return rms_norm_triton(x, weight, eps)


from . import ops  # noqa: E402

# opguide.rms_norm tries it first; the interpreter's calls take the operators.
ops.DIRECT_TRITON = None if INTERPRET else direct_rms_norm

# [eager-path-end]


# [fused-kernel]
@triton.jit(do_not_specialize=["M"])  # as the forward
def _fused_add_rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, inv_rms_ptr, M, N, eps,
    HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, GDC: tl.constexpr,
    ALIGN: tl.constexpr,
):  # fmt: skip
    N = N // ALIGN * ALIGN  # a multiple of ALIGN: rows start aligned ([alignment])
    # One program takes ROWS whole rows, in registers, as the forward does:
    # the updated residual is stored and normalised without being read back
    # from memory.
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    row_ids = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rows = row_ids[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < M) & (cols < N)
    # No cache hints, as in the forward kernel.
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


# [fused-kernel-end]


@triton.jit
def _fused_add_rms_norm_long_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, inv_rms_ptr, N, eps,
    HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    # Rows too long for registers: pass 1 adds, stores the residual and sums
    # squares chunk by chunk; pass 2 reads the new residual back (mostly from
    # L2) to normalise it.
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
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


# [fused-op]
@register_op("opguide::fused_add_rms_norm_triton_", mutates_args=("residual",))
def fused_add_rms_norm_triton_(
    x: torch.Tensor,
    residual: torch.Tensor,
    # Optional[...] rather than X | None: the schema is inferred from these
    # annotations, and Optional is understood by every torch this supports.
    weight: Optional[torch.Tensor],  # noqa: UP045
    eps: float,
    out_dtype: Optional[torch.dtype] = None,  # noqa: UP045
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_fused_add_rms_norm_args(x, residual, weight, eps, out_dtype)
    op = "fused_add_rms_norm_"
    _check_input(op, "x", x)
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{op}: the Triton backend supports float32, float16 and bfloat16 out_dtype, "
            f"got {out_dtype}; use backend='cpp'"
        )
    xc = x.contiguous()
    # The kernel updates a dense buffer; a strided residual is written back.
    rc = residual.contiguous()
    out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    inv_rms = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    n = int(x.shape[-1])  # a plain int for Triton (see rms_norm_triton)
    m = int(inv_rms.numel())
    if m > 0 and n == 0:
        # Rows of length 0: nothing to add, and the mean of no squares is 0/0,
        # as the C++ kernels compute.
        inv_rms.fill_(float("nan"))
    elif m > 0:
        w_arg = xc if weight is None else weight.contiguous()
        with _on_device_of(xc):
            if n <= 65536 // xc.element_size():  # the whole row in registers
                block = triton.next_power_of_2(n)
                rows = 1 if INTERPRET else max(1, 2048 // block)  # short rows, several
                launchable(_fused_add_rms_norm_kernel)[(triton.cdiv(m, rows),)](
                    xc, rc, w_arg, out, inv_rms, m, n, eps, HAS_WEIGHT=weight is not None,
                    BLOCK_N=block, ROWS=rows, ALIGN=_align(n),
                    num_warps=_fused_warps(rows * block),
                    **_pdl(xc),
                )  # fmt: skip
            elif (split := _split_rows(xc, n, SPLIT_FUSED[0])) is not None:
                segments, seg, sp = split
                slots = _row_slots(xc, m, segments)
                launchable(_fused_add_rms_norm_split_kernel)[(m * segments,)](
                    xc, rc, w_arg, out, inv_rms, slots, n, eps, segments,
                    HAS_WEIGHT=weight is not None, SEG=seg, SP=sp, ALIGN=_align(n),
                    num_warps=_warps(SPLIT_FUSED),
                )  # fmt: skip
            else:
                launchable(_fused_add_rms_norm_long_kernel)[(m,)](
                    xc, rc, w_arg, out, inv_rms, n, eps, HAS_WEIGHT=weight is not None,
                    BLOCK_N=1024 if INTERPRET else 4096, num_warps=1 if INTERPRET else 8,
                    **_pdl(xc),
                )  # fmt: skip
    if not residual.is_contiguous():
        residual.copy_(rc)
    return out, inv_rms


# [fused-op-end]


if INTERPRET:
    # custom_op needs to be told what its outputs look like; triton_op works
    # that out by running its body on fake tensors.

    # [fake-kernels]
    @rms_norm_triton.register_fake
    def _(x, weight, eps):
        _check_rms_norm_args(x, weight, eps)
        return x.new_empty(x.shape)

    @rms_norm_fwd_triton.register_fake
    def _(x, weight, eps):
        _check_rms_norm_args(x, weight, eps)
        return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32)

    @rms_norm_backward_triton.register_fake
    def _(grad, x, weight, inv_rms):
        return x.new_empty(x.shape), torch.empty_like(weight)

    @fused_add_rms_norm_triton_.register_fake
    def _(x, residual, weight, eps, out_dtype=None):
        out = x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype)
        return out, x.new_empty(x.shape[:-1], dtype=torch.float32)

    # [fake-kernels-end]
