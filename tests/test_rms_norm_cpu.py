"""The CPU kernels' outputs: new tensors from PyTorch's CPU allocator.

``csrc/rms_norm/rms_norm_cpu.cpp`` (``empty_output``) and the backward take
their outputs from ``at::empty``, so a large output is an ordinary tensor,
freed like any other, and PyTorch's own allocator settings reach it: with
``THP_MEM_ALLOC_ENABLE=1`` PyTorch advises allocations of 2 MiB and more for
transparent huge pages, without it nothing does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import opguide
from opguide import rms_norm_reference
from opguide.testing import make_inputs

# 16 MiB: many 4 KiB pages and several 2 MiB blocks. (1000, 2049) is ~8 MiB
# with rows that are not a multiple of 16 elements.
LARGE_SHAPES = [(1024, 4096), (1000, 2049)]


@pytest.mark.parametrize("shape", LARGE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_large_output_matches_reference_and_small_outputs(shape):
    x, w = make_inputs(shape)
    y = opguide.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6))
    # The same kernel over slices of 64 rows (outputs under 2 MiB): bit for
    # bit equal, so the size of the output changes no value.
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


# Prints, for each large output of the CPU operators, whether the memory
# mapping that holds it is advised for huge pages (VmFlags "hg", set by
# madvise(MADV_HUGEPAGE)).
HUGE_PAGE_PROBE = """
import json, re
from pathlib import Path
import torch, opguide

def advised(address):
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        span = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if span:
            inside = int(span[1], 16) <= address < int(span[2], 16)
        elif inside and line.startswith("VmFlags:"):
            return "hg" in line.split()[1:]
    raise LookupError(hex(address))

x, w = torch.randn(1024, 4096), torch.randn(4096)  # 16 MiB
y, inv_rms = torch.ops.opguide.rms_norm_forward(x, w, 1e-6)
grad_x, _ = torch.ops.opguide.rms_norm_backward(torch.randn_like(x), x, w, inv_rms)
outputs = {"rms_norm": opguide.rms_norm(x, w), "rms_norm_forward": y, "rms_norm_backward": grad_x}
print(json.dumps({name: advised(t.data_ptr()) for name, t in outputs.items()}))
"""


@pytest.mark.skipif(
    not Path("/proc/self/smaps").exists()
    or not Path("/sys/kernel/mm/transparent_hugepage/enabled").exists(),
    reason="needs Linux with transparent huge pages (reads /proc/self/smaps)",
)
@pytest.mark.parametrize("thp_mem_alloc", ["0", "1"])
def test_large_outputs_follow_pytorchs_huge_page_setting(thp_mem_alloc):
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": thp_mem_alloc}
    run = subprocess.run(
        [sys.executable, "-c", HUGE_PAGE_PROBE], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    advised = json.loads(run.stdout.strip().splitlines()[-1])
    # Advised exactly when PyTorch's allocator is told to advise: the outputs
    # come from it, and nothing of the library's own advises them.
    assert advised == dict.fromkeys(advised, thp_mem_alloc == "1"), advised
