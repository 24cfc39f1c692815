"""The Triton kernels compile for AMD and NVIDIA GPUs and fit their registers and shared memory.

guidekit.triton_targets compiles each kernel of opguide/triton/ in
the launch configurations the library chooses, for seven GPUs, on this
machine (no GPU needed), and reads registers, spills and shared memory from
the machine code. By default a representative subset of configurations is
compiled (every kernel on every target, at its extremes);
OPGUIDE_TRITON_TARGETS_FULL=1 compiles all of them.

Nothing here runs a kernel on those GPUs: it says the kernels compile and
fit, not that their results are right there.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest

from guidekit import triton_targets as tt
from guidekit.triton_targets.compiling import _judge

pytestmark = pytest.mark.cpu


@functools.cache
def _results() -> tuple:
    # One child process compiles for every target at once (both cores busy).
    return tuple(tt.check())


def _of(target: str) -> list:
    return [u for u in _results() if u.target == target]


@pytest.mark.parametrize("target", list(tt.TARGETS))
def test_every_kernel_compiles(target):
    results = _of(target)
    kernels = {u.kernel for u in results}
    assert kernels == set(tt.library_kernels()), "a kernel of the library was not compiled"
    errors = [u for u in results if u.status == "error"]
    assert not errors, "\n" + tt.format_table(errors, width=200)


# Spills the checker finds in the library's kernels that are accepted, each
# with its reason. Any other spill, or any kernel over budget, fails: a
# launch rule that spills under a supported Triton is changed instead
# (opguide/triton/launch.py says which spills set each rule).
_SGPR_LANES = (
    "scalar registers spilled into vector-register lanes, no scratch memory: "
    "the AMD compiler's way to hold more uniform values"
)
KNOWN_SPILLS = {
    **{
        ("_rms_norm_backward_kernel", t): _SGPR_LANES
        for t in ("gfx90a", "gfx942", "gfx950", "gfx1100")
    },
    ("_rms_norm_forward_kernel", "gfx90a"): _SGPR_LANES,  # rows of odd length, Triton 3.8
}


def _accepted(u) -> bool:
    # An SGPR-lane entry accepts no memory spill.
    known = (u.kernel, u.target) in KNOWN_SPILLS
    return known and u.status == "spill" and u.spills == 0 and u.scratch == 0


@pytest.mark.parametrize("target", list(tt.TARGETS))
def test_no_spill_and_within_budget(target):
    results = [u for u in _of(target) if u.status != "error"]
    assert results
    bad = [u for u in results if not u.ok and not _accepted(u)]
    accepted = [u for u in results if _accepted(u)]
    if accepted:
        print(f"accepted spills ({len(accepted)}), see KNOWN_SPILLS:")
        print(tt.format_table(accepted, width=200))
    assert not bad, "\n" + tt.format_table(bad, width=200)


def test_the_check_sees_a_spill():
    # The library's forward kernel with a whole row of 8192 float32 values in
    # one warp (256 values per thread, 8 times what its launch rules give it)
    # cannot fit in registers: the checker must say so.
    hungry = tt.Launch(
        f"{tt.LIBRARY}.forward",
        "_rms_norm_forward_kernel",
        ("*float32", "*float32", "*float32", "*float32", 3, 8192, 1e-6),
        (("ALIGN", 16), ("BLOCK_N", 8192), ("GDC", False), ("ROWS", 1), ("STORE_INV", True),
         ("num_warps", 1)),
    )  # fmt: skip
    results = tt.check(targets=["gfx942", "sm_90"], launches=[hungry])
    assert [u.status for u in results] != ["ok", "ok"], tt.format_table(results)
    spilled = [u for u in results if u.status == "spill"]
    assert spilled, tt.format_table(results)
    assert all(u.spills > 0 or u.scratch > 0 for u in spilled)


def test_a_budget_is_checked():
    # The same kernel as the library launches it, judged against a GPU with
    # half the shared memory it uses: over budget, from the real compile.
    results = [u for u in _of("sm_90") if u.ok and u.shared > 0]
    assert results
    usage = max(results, key=lambda u: u.shared)
    small = dataclasses.replace(tt.TARGETS["sm_90"], smem_per_block=usage.shared // 2)
    judged = dataclasses.replace(usage)
    _judge(judged, small)
    assert judged.status == "over budget" and "shared" in judged.reason
