"""The first lines of every kernel, as ``@triton.jit`` helpers.

Triton inlines a helper into the kernel that calls it before it optimises,
so a helper compiles to the same machine code as its lines written in place.
"""

import triton
import triton.language as tl


@triton.jit
def aligned(N, ALIGN: tl.constexpr):
    """N, written so that the compiler sees it is a multiple of ALIGN.

    Triton specialises an integer argument that is a multiple of 16 (and a
    pointer that is 16-byte aligned): the compiler then knows that every row
    starts on a 16-byte boundary and loads whole vectors. For any other N it
    knows nothing, and each element is loaded alone. ALIGN, a constexpr, is
    the largest power of two up to 16 that divides N (``launch.align``), so
    ``N // ALIGN * ALIGN`` is N itself: rows of 4104 elements (ALIGN 8) get
    16-byte loads, at the cost of one compiled variant per ALIGN
    (``guidekit.benchmark --sweep``, docs/recorded/sweep_odd_rows_<gpu>.json).
    """
    return N // ALIGN * ALIGN


@triton.jit
def pdl_prologue(GDC: tl.constexpr):
    """Programmatic dependent launch, when GDC is set (``launch.pdl_options``).

    ``gdc_wait`` waits for the previous kernel's results before this one
    reads memory; ``gdc_launch_dependents`` lets the next kernel be scheduled
    while this one runs. GDC is a constexpr: with it False the branch, and
    the instructions, are not compiled at all.
    """
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def row_block(M, N, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """(row_ids, rows, cols, mask) of a program that holds ROWS whole rows.

    The block is (ROWS, BLOCK_N): BLOCK_N is N rounded up to a power of two,
    and the mask covers the padding and the rows past M. Row indices are
    int64, since ``row * N`` may pass 2**31.
    """
    row_ids = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rows = row_ids[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    return row_ids, rows, cols, (rows < M) & (cols < N)
