"""The CPU kernel's large-output path.

A large output of ``rms_norm`` is advised for transparent huge pages before
the kernel writes it (csrc/rms_norm/rms_norm_cpu.cpp, ``empty_output``). These tests
check that this changes nothing a user can see: the values, the ownership of
the memory, and that it is freed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import opguide
from opguide import rms_norm_reference
from opguide.testing import make_inputs

# 16 MiB: holds several whole 2 MiB blocks. (1000, 2049) is ~8 MiB with rows
# that are not a multiple of 16 elements, so rows straddle the block edges.
LARGE_SHAPES = [(1024, 4096), (1000, 2049)]


@pytest.mark.parametrize("shape", LARGE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_large_output_matches_reference_and_the_unadvised_kernel(shape):
    x, w = make_inputs(shape)
    y = opguide.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6))
    # The same kernel over slices of rows whose outputs are too small to be
    # advised: bit for bit equal, so the huge-page advice does not change a
    # single value.
    y_small = torch.cat([opguide.rms_norm(part, w, 1e-6) for part in x.split(64)])
    assert torch.equal(y, y_small)


def test_large_output_is_an_ordinary_owned_tensor():
    x, w = make_inputs((1024, 4096))
    y = opguide.rms_norm(x, w)
    storage = y.untyped_storage()
    assert y.is_contiguous() and y.storage_offset() == 0
    assert storage.nbytes() == x.numel() * x.element_size()
    assert storage.data_ptr() != x.untyped_storage().data_ptr()
    # Memory from the CPU allocator, so it can grow like any tensor's.
    assert storage.resizable()
    y.resize_(2048, 4096)
    y[1024:] = 1.0
    assert y[1024:].eq(1.0).all()


def _rss_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_large_outputs_are_freed():
    x, w = make_inputs((2048, 4096))  # 32 MiB outputs
    for _ in range(3):  # warm up: let the allocator settle
        opguide.rms_norm(x, w)
    before = _rss_bytes()
    for _ in range(20):
        y = opguide.rms_norm(x, w)
        del y
    # 20 outputs that were never freed would add 640 MiB.
    assert _rss_bytes() - before < 128 * 2**20


def _vm_flags(address: int) -> list[str] | None:
    """The VmFlags of the mapping that holds ``address`` (None if not listed)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        span = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if span:
            inside = int(span[1], 16) <= address < int(span[2], 16)
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None


@pytest.mark.skipif(
    not Path("/proc/self/smaps").exists()
    or not Path("/sys/kernel/mm/transparent_hugepage/enabled").exists(),
    reason="needs Linux with transparent huge pages (reads /proc/self/smaps)",
)
def test_large_output_is_advised_for_huge_pages():
    x, w = make_inputs((1024, 4096))
    y = opguide.rms_norm(x, w)
    assert y.data_ptr() % (2 * 2**20) == 0  # starts on a 2 MiB boundary
    flags = _vm_flags(y.data_ptr())
    assert flags is not None
    assert "hg" in flags  # VM_HUGEPAGE: madvise(MADV_HUGEPAGE) was applied
