"""How the Triton kernels are launched: their knobs as frozen dataclasses, one planner per operator.

Each planner (:func:`forward_config`, :func:`backward_config`,
:func:`fused_config`) chooses the kernel and its knobs from the rows, the
row length, the dtype and the device, and returns one of :class:`Registers`,
:class:`Split` or :class:`Chunked`; the launch functions of
:mod:`opguide.triton.ops` take that choice, or a ``forced=`` one, which is
how ``tools/sweep_triton.py`` times each configuration. The numbers come
from ``python3 tools/sweep_triton.py forward backward fused grad-weight-sum split``
on a GPU, which prints every configuration's time (step 11.3 shows the split
sweep's record; run the command for the others), not from
:func:`triton.autotune` keyed on N: an autotuner picks a
kernel's parameters only, and times them on the first call, which waits
for the GPU. The backward's plan also sets, from the number of rows, how
many programs run and the buffer of partial sums they write.

Three environment variables are read once, when this module is imported:
``OPGUIDE_PDL=0`` turns programmatic dependent launch off (for the CUDA
kernels too), ``OPGUIDE_TRITON_SPLIT=0`` walks long rows in chunks instead
of splitting them (:func:`_split_or_chunked`), and
``OPGUIDE_TRITON_DEVICE_GUARD=0`` launches without making the input's GPU
current (``tools/record_two_gpus.py`` records what fails then).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import torch

from .interpreter import INTERPRET

#: Longest row (elements) that the forward kernel keeps in registers; longer
#: rows are split over several programs (``split.py``).
MAX_REGISTER_ROW = 16384
#: Longest row (elements) that the backward keeps in registers; its register
#: kernel spills past it, and longer rows take the split kernel.
MAX_REGISTER_ROW_BACKWARD = 8192


# Plain-int forms of triton.cdiv and triton.next_power_of_2. Those two are
# also callable inside kernels, and on the host that costs microseconds a
# call in some Triton releases; planning calls them on every launch.
def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ints."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for n <= 1)."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


@dataclasses.dataclass(frozen=True)
class Registers:
    """Whole rows in registers: a program holds ``rows`` rows of ``block_n`` columns.

    Attributes:
        block_n: BLOCK_N, the row length rounded up to a power of two.
        rows: ROWS, rows per program (per loop step for the backward).
        num_warps: warps per program.
        programs: the backward's grid (programs loop over the rows); 0 elsewhere.
        stages: the backward's software-pipeline stages (rows loaded ahead).
    """

    block_n: int
    rows: int
    num_warps: int
    programs: int = 0
    stages: int = 1


@dataclasses.dataclass(frozen=True)
class Split:
    """Each row split into segments of ``seg`` columns, one program each (``split.py``).

    Attributes:
        seg: SEG, columns per program.
        num_warps: warps per program.
        per_sm: the backward's programs per SM in all (its row groups share them).
    """

    seg: int
    num_warps: int
    per_sm: int = 2

    def segments(self, n: int) -> int:
        """S, the programs that share a row of ``n`` elements."""
        return cdiv(n, self.seg)


@dataclasses.dataclass(frozen=True)
class Chunked:
    """One program per row, walking it in chunks of ``block_n`` columns on ``num_warps`` warps."""

    block_n: int
    num_warps: int


CHUNKED = Chunked(1024, 1) if INTERPRET else Chunked(4096, 8)  #: the chunked kernels' launch


@dataclasses.dataclass(frozen=True)
class GradWeightSum:
    """The grad_weight sum: ``block_p`` partial rows by ``block_n`` columns per step.

    Narrow column strips give many programs, tall ones few steps;
    ``tools/sweep_triton.py grad-weight-sum`` times the alternatives on a GPU.
    """

    block_p: int = 128
    block_n: int = 32
    num_warps: int = 2


GRAD_WEIGHT_SUM = GradWeightSum()
# The split kernels of the forward and the fused kernel: of the launches that
# `tools/sweep_triton.py split` times (M * N = 2**26, bfloat16, N from 16384
# to 131072), the one whose slowest N is fastest on the GPU it ran on. Step
# 11.3 prints the kept run (docs/recorded/sweep_triton_split_<gpu>.txt) and
# how far this launch stands from that run's best.
SPLIT_FORWARD = Split(seg=4096, num_warps=2)
SPLIT_FUSED = Split(seg=16384, num_warps=16)


def split_for(split: Split, dtype: torch.dtype) -> Split:
    """The fused kernel's ``split`` for rows of ``dtype``: half the segment for float32.

    The launch is timed on 16-bit rows. A float32 segment of as many columns
    holds twice the bytes per thread: 32 values each of x, the residual and
    their sum spill 16-28 B under the 128 registers a thread has in 16 warps
    (sm_90 and sm_100, rows of odd length, Triton 3.9). Half the columns give
    a thread the bytes of the 16-bit launch; every element is still read once.

    Args:
        split: :data:`SPLIT_FUSED`.
        dtype: the dtype of x.

    Returns:
        ``split``, with half its ``seg`` for 32-bit dtypes.
    """
    if dtype.itemsize <= 2:
        return split
    return dataclasses.replace(split, seg=split.seg // 2)


# The split backward holds three rows of x and grad_y and its part of grad_weight:
# segments of 4096 elements on 16 warps, one program per SM, 8 values of
# each per thread (4 on a 64-lane wavefront). The same sweep's fastest
# launches hold 32 a thread on 4 warps, and those spill on sm_80 (step 11.3
# compiles both for sm_80 and sm_90 and prints registers and spills beside
# the times). Of the launches that hold 16 or fewer, this one's slowest N
# is fastest, and a row splits into as many segments.
SPLIT_BACKWARD = Split(seg=4096, num_warps=16, per_sm=1)


Config = Registers | Split | Chunked


def align(n: int) -> int:
    """ALIGN of the kernels: the largest of 1, 2, 4, 8 and 16 that divides n (16 for 0).

    Triton specialises an integer argument that is a multiple of 16 (and a
    pointer that is 16-byte aligned): the compiler then knows that every row
    starts on a 16-byte boundary and loads whole vectors. For any other N it
    knows nothing, and each element is loaded alone. Each kernel begins with
    ``N = aligned(N, ALIGN)`` (``prologue.py``): the same N, written so that
    the compiler can see it is a multiple of ALIGN. Rows of 4104 elements
    (ALIGN 8) get 16-byte loads, at the cost of one compiled variant per ALIGN
    (``guidekit.benchmark --sweep``, docs/recorded/sweep_odd_rows_<gpu>.json
    against docs/recorded/sweep_odd_rows_16_byte_only_<gpu>.json).
    """
    return min(n & -n, 16) or 16


def sm_count(device: torch.device) -> int:
    """Programs that run at once, one per SM: 1 in the interpreter, which runs them in turn."""
    if INTERPRET or device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


#: Whether long rows may be split (``OPGUIDE_TRITON_SPLIT=0``: never).
SPLIT_ENABLED = os.environ.get("OPGUIDE_TRITON_SPLIT", "1") != "0"


def _split_or_chunked(n: int, device: torch.device, split: Split) -> Split | None:
    """``split`` when rows of n elements may be split, else None (the chunked kernels).

    A row of more segments than SMs is not split: its programs are not sure
    to run at once. With ``OPGUIDE_TRITON_SPLIT=0`` no row is: beside a
    kernel that holds all but a few SMs until work queued after this one
    runs, they would wait for ever (``tests/test_shared_gpu.py``). The
    interpreter splits into one segment, and chunks past 2**17 elements.
    """
    if not SPLIT_ENABLED:
        return None
    if INTERPRET or device.type != "cuda":
        return dataclasses.replace(split, seg=next_power_of_2(n)) if n <= 2**17 else None
    return split if split.segments(n) <= sm_count(device) else None


def forward_config(
    rows: int, cols: int, dtype: torch.dtype, device: torch.device, forced: Config | None = None
) -> Config:
    """The kernel and knobs of ``rms_norm``'s forward for ``rows`` rows of ``cols`` elements.

    Registers: 2048 elements per program (one row, where longer) and 16 per
    thread, 32 for rows longer than 4096.

    Args:
        rows: the number of rows (M).
        cols: the row length (N).
        dtype: the dtype of x.
        device: the device of x (its SM count and shared memory are read).
        forced: a configuration to return as it is (``tools/sweep_triton.py``).

    Returns:
        A :class:`Registers`, :class:`Split` or :class:`Chunked`.
    """
    if forced is not None:
        return forced
    if cols <= MAX_REGISTER_ROW:
        block = next_power_of_2(cols)
        if INTERPRET:
            return Registers(block, 1, 1)
        per_program = max(1, 2048 // block)
        elements = per_program * block
        warps = min(max(elements // 512, 1), 8 if elements <= 8192 else 16)
        return Registers(block, per_program, warps)
    return _split_or_chunked(cols, device, SPLIT_FORWARD) or CHUNKED


def backward_config(
    rows: int, cols: int, dtype: torch.dtype, device: torch.device, forced: Config | None = None
) -> Config:
    """The kernel and knobs of ``rms_norm``'s backward (grad_x and the first grad_weight stage).

    Registers: short rows go several to a loop step, 4096 elements (2048 of
    float32, or one longer row) in at most 64 rows; three stages of x and grad_y in shared
    memory when they fit, else fewer; two programs per SM for steps of up to
    4096 elements, one for larger ones (whose stages leave no room for a
    second program); 4 warps for steps below 4096 elements, 8 from 4096.

    Args:
        rows: the number of rows (M).
        cols: the row length (N).
        dtype: the dtype of x.
        device: the device of x (its SM count and shared memory are read).
        forced: a configuration to return as it is (``tools/sweep_triton.py``).

    Returns:
        A :class:`Registers`, :class:`Split` or :class:`Chunked`.
    """
    if forced is not None:
        return forced
    if cols <= MAX_REGISTER_ROW_BACKWARD:
        block = next_power_of_2(cols)
        # 4096 elements a step (2048 of float32), in at most 64 rows. More
        # spill: 64 rows of 64 float32 elements 1.2 KB on sm_90/100 (Triton
        # 3.9), 256 rows of 16 1.4 KB on sm_80/90/100 (Triton 3.6), 2048 rows
        # of one 7 VGPRs on gfx1100 (Triton 3.7); tests/test_triton_targets.py.
        elements = 4096 if dtype.itemsize <= 2 else 2048
        per_step = max(1, min(elements // block, 64))
        if INTERPRET or device.type != "cuda":  # programs run one after another
            return Registers(block, per_step, 1, programs=max(1, min(4, rows)), stages=1)
        props = torch.cuda.get_device_properties(device)
        step = per_step * block
        budget = getattr(props, "shared_memory_per_block_optin", 0) or 96 * 1024
        size = dtype.itemsize
        stages = 3
        while stages > 1 and stages * 2 * step * size > budget - 8 * 1024:
            stages -= 1
        programs = props.multi_processor_count * (2 if step <= 4096 else 1)
        # 8 warps for steps of 4096 elements and more, so that a thread holds
        # 16 values each of x, grad_y and the grad_weight sum (32 for rows of
        # 8192): 16-bit short rows at 32 a thread on 4 warps spill (3-28
        # VGPRs on gfx1100 with Triton 3.7 to 3.9; 40-132 B at 32 rows of
        # 128 on sm_90 and sm_100 with Triton 3.7). Float32 steps of 2048
        # take 4 warps, 16 a thread.
        warps = 4 if step < 4096 else 8
        return Registers(block, per_step, warps, max(1, min(programs, rows)), stages)
    return _split_or_chunked(cols, device, SPLIT_BACKWARD) or CHUNKED


def fused_config(
    rows: int, cols: int, dtype: torch.dtype, device: torch.device, forced: Config | None = None
) -> Config:
    """The kernel and knobs of ``fused_add_rms_norm_``: rows of up to 32 KiB in registers.

    Few warps, many elements each (64 of 16 bits or 32 of float32 per thread at 4096
    and above): the fastest in ``tools/sweep_triton.py fused``.

    Args:
        rows: the number of rows (M).
        cols: the row length (N).
        dtype: the dtype of x.
        device: the device of x (its SM count and shared memory are read).
        forced: a configuration to return as it is (``tools/sweep_triton.py``).

    Returns:
        A :class:`Registers`, :class:`Split` or :class:`Chunked`.
    """
    if forced is not None:
        return forced
    # Rows of up to 32 KiB in registers, on at most 8 warps. 64 KiB rows on
    # 16 warps, which cap a thread at 128 registers, spill: bfloat16 rows of
    # 32768 32 B on sm_100 (Triton 3.8 and 3.9). Longer rows are split.
    if cols * dtype.itemsize <= 32768:
        block = next_power_of_2(cols)
        if INTERPRET:
            return Registers(block, 1, 1)
        # Short rows, several, at most 32: float32 rows of 16 and 32 in 128
        # and 64 rows spill 8-16 B on sm_80 (Triton 3.7 to 3.9).
        per_program = max(1, min(2048 // block, 32))
        # 4 KiB of each row per warp: 64 elements of 16 bits per thread on a
        # 32-lane warp, 32 of float32, whose 64 spill on gfx1100 (Triton 3.7).
        warps = max(2, min(per_program * block * dtype.itemsize // 4096, 16))
        return Registers(block, per_program, warps)
    return _split_or_chunked(cols, device, split_for(SPLIT_FUSED, dtype)) or CHUNKED


def split_launch(config: Split, rows: int, cols: int, device: torch.device, groups: bool):
    """(grid programs, S, SP) of a split launch; with ``groups``, the backward's row groups.

    The backward's G row groups share ``per_sm`` programs per SM; the forward
    and fused kernels run one program per segment of each row.
    """
    segments = config.segments(cols)
    if groups:
        programs = max(1, min(rows, config.per_sm * sm_count(device) // segments))
    else:
        programs = rows
    return programs, segments, next_power_of_2(segments)


def row_slots(x: torch.Tensor, m: int, segments: int) -> torch.Tensor:
    """The split kernels' slots: one per segment of each row, zeroed (not yet written)."""
    return torch.zeros(m * segments, dtype=torch.int64, device=x.device)


def warps(config: Split) -> int:
    """num_warps of a split launch: 1 in the interpreter."""
    return 1 if INTERPRET else config.num_warps


# Programmatic dependent launch (PDL), as for the CUDA kernels (csrc/common/launch.cuh):
# a kernel launched with launch_pdl=True may be scheduled while the previous
# kernel on the stream drains, and GDC=True compiles prologue.pdl_prologue's
# two instructions into the kernel. Hopper and later GPUs only, and only for
# eager calls on real tensors: while torch.compile or opcheck traces an
# operator, wrap_triton analyses the kernel, and that analysis does not
# understand the instructions' inline assembly.
_PDL_ENABLED = not INTERPRET and os.environ.get("OPGUIDE_PDL", "1") != "0"
_PDL_CAPABLE: dict[int, bool] = {}


def pdl_options(t: torch.Tensor) -> dict:
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


_DEVICE_GUARD = os.environ.get("OPGUIDE_TRITON_DEVICE_GUARD", "1") != "0"


def on_device_of(t: torch.Tensor):
    """Makes the GPU of ``t`` current for a launch, as the CUDA wrappers' DeviceGuard does.

    Triton launches on the current GPU and requires every pointer argument to
    live there: a tensor on cuda:1 while cuda:0 is current (a second pipeline
    stage, a replica without ``set_device``) fails with "Pointer argument (at
    0) cannot be accessed from Triton (cpu tensor?)". Under torch.compile the
    code Inductor generates sets the device itself.
    """
    if (
        _DEVICE_GUARD
        and t.is_cuda
        and not torch.compiler.is_compiling()
        and t.get_device() != torch.cuda.current_device()
    ):
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()
