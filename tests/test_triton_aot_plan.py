"""The C++ planner of the Triton kernels compiled ahead of time plans as the JIT route's.

``csrc/triton_aot/plan.h`` ports the Registers branches of
:func:`opguide.triton.launch.forward_config` and
:func:`~opguide.triton.launch.backward_config` (and :func:`~opguide.triton.launch.align`)
for the launcher in C++; ``csrc/triton_aot/checks.cpp`` exposes it as
``torch.ops.opguide_checks.triton_aot_plan``, in every build. This file runs
both planners as on a CUDA device, on the CPU: ``launch.INTERPRET`` is
patched to False and ``torch.cuda.get_device_properties`` to a stand-in that
gives the SM count and the opt-in shared memory per block, the only device
facts those planners read. The C++ plan must be Python's Registers field for
field, and empty wherever Python returns Split or Chunked: every row length
from 0 to past the longest rows in registers for a few devices and numbers
of rows, then rows, row lengths and devices drawn by Hypothesis.
"""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import opguide  # noqa: F401  (loads the compiled library and its operators)

# The planners only read launch.py; its package imports triton.
pytest.importorskip("opguide.triton", reason="the Triton planners need the triton package")
from opguide.triton import launch  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CUDA = torch.device("cuda", 0)
# Opt-in shared memory per block (bytes): together they give the backward 1, 2
# and 3 stages (test_the_budgets_give_every_number_of_stages); 0 is a device
# that does not say, planned for 96 KiB.
SHARED_MEMORY = (0, 232448, 101376, 49152, 12288)
# (SM count, rows): rows past the backward's programs, rows between one and
# two programs per SM (the short steps' programs are the rows, the long
# steps' the SMs), and no rows at all.
DEVICE_ROWS = ((132, 1 << 20), (132, 263), (1, 0))
# Every row length past the longest rows in registers, where both planners
# return Split or Chunked; Hypothesis draws longer ones.
FORWARD_COLS = range(launch.MAX_REGISTER_ROW + 2)
BACKWARD_COLS = range(launch.MAX_REGISTER_ROW_BACKWARD + 2)
# Always the same examples, so a failure repeats.
PLAN_SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, database=None)


class Device:
    """The stand-in for ``torch.cuda.get_device_properties``: one device's properties.

    ``shared_memory_per_block_optin=None`` leaves the attribute out, as a
    build of PyTorch that does not report it.
    """

    def __init__(self, monkeypatch, sm_count: int, shared_memory_per_block_optin: int | None):
        props = types.SimpleNamespace(multi_processor_count=sm_count)
        if shared_memory_per_block_optin is not None:
            props.shared_memory_per_block_optin = shared_memory_per_block_optin
        self.asked: set[torch.device] = set()

        def get_device_properties(device):
            self.asked.add(torch.device(device))
            return props

        monkeypatch.setattr(launch, "INTERPRET", False)
        monkeypatch.setattr(torch.cuda, "get_device_properties", get_device_properties)


def python_plan(config, rows: int, cols: int, dtype: torch.dtype) -> list[int]:
    """``config``'s plan as the C++ operator returns it: [] unless Registers."""
    plan = config(rows, cols, dtype, CUDA)
    if not isinstance(plan, launch.Registers):
        assert isinstance(plan, launch.Split | launch.Chunked), plan
        return []
    return [plan.block_n, plan.rows, plan.num_warps, plan.programs, plan.stages]


def cpp_plan(op: str, rows: int, cols: int, dtype: torch.dtype, sm_count: int, smem: int):
    """``plan.h``'s plan of ``op`` (``"forward"`` or ``"backward"``): [] unless Registers."""
    return torch.ops.opguide_checks.triton_aot_plan(op, rows, cols, dtype.itemsize, sm_count, smem)


def first_difference(python: list, cpp: list, labels) -> str | None:
    """The first of ``labels`` where the two lists of plans differ, with both plans."""
    for label, p, c in zip(labels, python, cpp, strict=True):
        if p != c:
            return f"{label}: launch.py plans {p}, plan.h plans {c}"
    return None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_plans_every_row_length_as_launch_py(monkeypatch, dtype):
    device = Device(monkeypatch, 132, 232448)
    python = [python_plan(launch.forward_config, 3, n, dtype) for n in FORWARD_COLS]
    cpp = [cpp_plan("forward", 3, n, dtype, 132, 232448) for n in FORWARD_COLS]
    labels = (f"forward, rows=3, cols={n}, {dtype}" for n in FORWARD_COLS)
    assert first_difference(python, cpp, labels) is None
    # Both kinds of answer are compared: only rows past MAX_REGISTER_ROW split.
    assert cpp[launch.MAX_REGISTER_ROW] and not cpp[launch.MAX_REGISTER_ROW + 1]
    assert device.asked <= {CUDA}


@pytest.mark.parametrize("smem", SHARED_MEMORY)
@pytest.mark.parametrize(("sm_count", "rows"), DEVICE_ROWS)
def test_backward_plans_every_row_length_as_launch_py(monkeypatch, sm_count, rows, smem):
    device = Device(monkeypatch, sm_count, smem)
    for dtype in DTYPES:
        python = [python_plan(launch.backward_config, rows, n, dtype) for n in BACKWARD_COLS]
        cpp = [cpp_plan("backward", rows, n, dtype, sm_count, smem) for n in BACKWARD_COLS]
        labels = (
            f"backward, rows={rows}, cols={n}, {dtype}, {sm_count} SMs, shared memory {smem}"
            for n in BACKWARD_COLS
        )
        assert first_difference(python, cpp, labels) is None
        last = launch.MAX_REGISTER_ROW_BACKWARD
        assert cpp[last] and not cpp[last + 1]
    assert device.asked == {CUDA}


def test_the_budgets_give_every_number_of_stages():
    stages = {
        cpp_plan("backward", 1 << 20, n, dtype, 132, smem)[4]
        for smem in SHARED_MEMORY
        for dtype in DTYPES
        for n in (1, 4096, 8192)
    }
    assert stages == {1, 2, 3}


def test_backward_without_shared_memory_plans_for_96_kib(monkeypatch):
    # A device that reports 0, or no such property, gets launch.py's 96 KiB;
    # plan.h takes 0 for both.
    python = {}
    for reported in (None, 0, 96 * 1024):
        Device(monkeypatch, 132, reported)
        python[reported] = [
            python_plan(launch.backward_config, 1 << 20, n, torch.float32) for n in BACKWARD_COLS
        ]
    cpp = {
        smem: [cpp_plan("backward", 1 << 20, n, torch.float32, 132, smem) for n in BACKWARD_COLS]
        for smem in (0, 96 * 1024, 232448)
    }
    assert python[None] == python[0] == python[96 * 1024] == cpp[0] == cpp[96 * 1024]
    # Fewer stages than a larger budget gives, for some rows.
    assert cpp[232448] != cpp[0]


@PLAN_SETTINGS
@given(
    rows=st.integers(0, 1 << 40),
    cols=st.integers(0, 20000),
    dtype=st.sampled_from(DTYPES),
    sm_count=st.integers(1, 1024),
    smem=st.none() | st.integers(0, 1 << 18),
)
def test_plans_of_drawn_problems_match_launch_py(rows, cols, dtype, sm_count, smem):
    # Hypothesis and function-scoped fixtures do not mix: a MonkeyPatch per example.
    with pytest.MonkeyPatch.context() as monkeypatch:
        Device(monkeypatch, sm_count, smem)
        for op, config in (
            ("forward", launch.forward_config),
            ("backward", launch.backward_config),
        ):
            expected = python_plan(config, rows, cols, dtype)
            assert cpp_plan(op, rows, cols, dtype, sm_count, smem or 0) == expected, op


@PLAN_SETTINGS
@given(n=st.integers(-(1 << 63), (1 << 63) - 1))
def test_align_matches_launch_py(n):
    assert torch.ops.opguide_checks.triton_aot_align(n) == launch.align(n)


def test_align_matches_launch_py_for_every_short_row():
    for n in [*range(-64, 20000), -(1 << 63), (1 << 62), (1 << 63) - 1]:
        assert torch.ops.opguide_checks.triton_aot_align(n) == launch.align(n), n


def test_an_unknown_op_is_refused():
    with pytest.raises(ValueError, match='op must be "forward" or "backward", got "sideways"'):
        torch.ops.opguide_checks.triton_aot_plan("sideways", 1, 1, 2, 1, 0)
