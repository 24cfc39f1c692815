"""What the benchmark measures: the passes, the dtypes, the bytes each pass
must move at the least, and the records a measurement leaves.

The bytes are the floor of a memory-bound operator: read ``x`` and ``weight``
once, write ``y`` once. Every row of a result file carries them, and the rows
are compared with a copy of the same bytes (:data:`SAME_SIZE_COPY`).
"""

from __future__ import annotations

import dataclasses

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
EPS = 1e-6
GPU_PASSES = ("forward", "backward", "fused")
PASSES = (*GPU_PASSES, "cpu")
# What each pass must move at the least, for the "bytes" of every row
# (s = bytes per element of x; inv_rms is float32).
BYTES_MODEL = {
    "forward": "read x (M*N*s) and weight (N*s), write y (M*N*s)",
    "backward": "read x, grad_y (M*N*s each), weight (N*s) and inv_rms (M*4); "
    "write grad_x (M*N*s) and grad_weight (N*s)",
    "fused": "read x, residual (M*N*s each) and weight (N*s); write residual and y (M*N*s each)",
    "cpu_kernel": "read x (M*N*4) and weight (N*4), write y (M*N*4); "
    "the copies: read and write M*N*4",
}
# Version of the result file's layout (its "format" field).
FORMAT = 2
# The name of the reference row that every GPU pass has at every shape: a
# copy_ that moves the pass's bytes (half read, half written). Against the
# 1 GiB copy it shows what a kernel of this size can reach at all: a short
# kernel pays for filling and draining the GPU, and a copy does too.
SAME_SIZE_COPY = "copy (same bytes)"
# The row lengths of the sweep, at a fixed total of SWEEP_ELEMENTS elements:
# M = SWEEP_ELEMENTS // N rows, so every point moves the same bytes and only
# the shape of the work changes.
SWEEP_NS = tuple(2**k for k in range(8, 18))  # 256 ... 131072
SWEEP_ELEMENTS = 2**26
SWEEP_PASSES = ("forward", "backward", "training", "fused")


def bytes_moved(pass_name: str, m: int, n: int, s: int) -> int:
    """The bytes that a pass must move at the least (see ``BYTES_MODEL``).

    Args:
        pass_name: ``"forward"``, ``"backward"`` or ``"fused"``.
        m: rows of ``x``.
        n: the normalised dimension.
        s: bytes per element of ``x``.

    Returns:
        The bytes read plus the bytes written.
    """
    if pass_name == "forward":
        return 2 * m * n * s + n * s
    if pass_name == "backward":
        return 3 * m * n * s + 2 * n * s + 4 * m
    return 4 * m * n * s + n * s


def _element_size(dtype: torch.dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


@dataclasses.dataclass
class Row:
    """One measurement: an implementation on one shape and dtype."""

    impl: str
    m: int
    n: int
    dtype: str
    seconds: float
    bytes: int

    @property
    def gbps(self) -> float:
        """Bytes moved per second, in GB/s."""
        return self.bytes / self.seconds / 1e9


@dataclasses.dataclass
class Skip:
    """An implementation that could not run, and why (no shape: at any shape)."""

    pass_: str
    impl: str
    m: int | None
    n: int | None
    dtype: str | None
    reason: str

    def asdict(self) -> dict:
        """The skip as a result file records it (``pass`` for ``pass_``)."""
        return {"pass": self.pass_, "impl": self.impl, "m": self.m, "n": self.n,
                "dtype": self.dtype, "reason": self.reason}  # fmt: skip


def _reason(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
