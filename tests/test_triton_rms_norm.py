"""Tests of the Triton RMSNorm (``backend="triton"``): forward, backward, registration.

Items without a device marker run the kernels on CPU tensors in Triton's
interpreter (the suite's conftest.py selects it when no GPU is visible); they are kept small
because the interpreter is slow. Items marked ``cuda`` run the compiled kernels
on a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import opguide
from opguide import rms_norm_reference
from opguide.testing import (
    GRAD_TOLERANCES,
    TOLERANCES,
    assert_grads_close,
    make_inputs,
    reference_grads,
)

# conftest.py selects Triton's interpreter (no GPU) before anything imports triton.
triton_ops = pytest.importorskip(
    "opguide.triton", reason="the Triton backend needs the triton package"
)
from opguide.triton import launch, plans  # noqa: E402

interpreter = pytest.mark.skipif(
    not triton_ops.INTERPRET,
    reason="Triton's interpreter is off in this process (a GPU is visible); "
    "run with TRITON_INTERPRET=1 for the CPU items",
)
# On a GPU machine run with TRITON_INTERPRET=1 (for the CPU items), the GPU items skip.
compiled_triton = pytest.mark.skipif(
    triton_ops.INTERPRET and torch.cuda.is_available(),
    reason="TRITON_INTERPRET=1: the kernels are not compiled for the GPU",
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Small for the interpreter; (2, 1500) walks a row in two chunks of its block.
CPU_SHAPES = [(1, 1), (3, 7), (4, 33), (2, 3, 40), (2, 1500)]
CUDA_SHAPES = [(1, 1), (3, 7), (64, 1000), (16, 4096), (4, 8192), (7, 5000), (2, 3, 768)]


class OpRecorder(TorchDispatchMode):
    """Records the operators that reach the dispatcher's backends."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


# -- CPU tensors, Triton's interpreter ---------------------------------------------------


@interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", CPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_matches_reference(shape, dtype):
    x, w = make_inputs(shape, dtype)
    y = opguide.rms_norm(x, w, eps=1e-6, backend="triton")
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6), **TOLERANCES[dtype])


@interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 7), (9, 40), (2, 3, 16)], ids=str)
def test_backward_matches_reference(shape, dtype):
    x, w = make_inputs(shape, dtype, requires_grad=True)
    grad = torch.randn(shape).to(dtype)
    opguide.rms_norm(x, w, backend="triton").backward(grad)
    grad_x, grad_weight = reference_grads(x, w, grad)
    torch.testing.assert_close(x.grad, grad_x, **GRAD_TOLERANCES[dtype])
    torch.testing.assert_close(w.grad, grad_weight, **GRAD_TOLERANCES[dtype])


@interpreter
def test_backward_many_rows_per_program():
    # 37 rows over 4 programs: uneven row ranges, partial grad_weight sums added up.
    x, w = make_inputs((37, 24), torch.float32, requires_grad=True)
    grad = torch.randn(37, 24)
    opguide.rms_norm(x, w, backend="triton").backward(grad)
    grad_x, grad_weight = reference_grads(x, w, grad)
    torch.testing.assert_close(x.grad, grad_x, **GRAD_TOLERANCES[torch.float32])
    torch.testing.assert_close(w.grad, grad_weight, **GRAD_TOLERANCES[torch.float32])


@interpreter
@pytest.mark.filterwarnings("ignore:Input #.* is not a double precision:UserWarning")
def test_gradcheck_float32():
    # Finite differences in float32 are noisy; a loose check on a tiny input.
    x, w = make_inputs((3, 5), torch.float32, requires_grad=True)
    torch.autograd.gradcheck(
        lambda x, w: torch.ops.opguide.rms_norm_triton(x, w, 1e-6),
        (x, w),
        eps=1e-2,
        atol=5e-2,
        rtol=5e-2,
    )


@interpreter
def test_non_contiguous_input():
    x, w = make_inputs((6, 10), torch.float32)
    xt = x.t()  # (10, 6), strided
    wt, _ = make_inputs((6,), torch.float32, seed=1)
    torch.testing.assert_close(
        opguide.rms_norm(xt, wt, backend="triton"), rms_norm_reference(xt, wt)
    )


@interpreter
@pytest.mark.parametrize("shape", [(0, 8), (4, 0)], ids=str)
def test_empty(shape):
    x, w = make_inputs(shape, torch.float32, requires_grad=True)
    y = opguide.rms_norm(x, w, backend="triton")
    assert y.shape == x.shape
    y.sum().backward()
    assert w.grad.shape == w.shape


@interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_forward(dtype):
    x, w = make_inputs((4, 24), dtype)
    torch.library.opcheck(torch.ops.opguide.rms_norm_triton.default, (x, w, 1e-6))
    x, w = make_inputs((4, 24), dtype, requires_grad=True)  # checks the autograd registration
    torch.library.opcheck(torch.ops.opguide.rms_norm_triton.default, (x, w, 1e-6))


@interpreter
def test_opcheck_backward():
    x, w = make_inputs((5, 24), torch.float32)
    grad = torch.randn(5, 24)
    inv_rms = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
    torch.library.opcheck(torch.ops.opguide.rms_norm_backward_triton.default, (grad, x, w, inv_rms))
    x, w = make_inputs((5, 24), torch.float32, requires_grad=True)
    torch.library.opcheck(torch.ops.opguide.rms_norm_forward_triton.default, (x, w, 1e-6))


def test_registered_with_library_define_and_impl():
    """The operators are dispatcher operators (no custom_op wrapper), one kernel for all devices."""
    for name in ("rms_norm_triton", "rms_norm_forward_triton", "rms_norm_backward_triton"):
        op = getattr(triton_ops, name)
        assert op is getattr(torch.ops.opguide, name).default
        assert not isinstance(op, torch.library.CustomOpDef)
        assert op.has_kernel_for_dispatch_key(torch.DispatchKey.CompositeExplicitAutograd)
    assert "grad_y" in str(torch.ops.opguide.rms_norm_backward_triton.default._schema)


@interpreter
def test_compile_fullgraph_forward_and_backward():
    torch._dynamo.reset()

    def f(x, w):
        return opguide.rms_norm(x, w, backend="triton") * 2

    compiled = torch.compile(f, fullgraph=True)
    x, w = make_inputs((6, 32), torch.float32, requires_grad=True)
    grad = torch.randn(6, 32)
    y = compiled(x, w)
    torch.testing.assert_close(y, rms_norm_reference(x, w) * 2)
    y.backward(grad)
    grad_x, grad_weight = reference_grads(x, w, 2 * grad)
    torch.testing.assert_close(x.grad, grad_x, **GRAD_TOLERANCES[torch.float32])
    torch.testing.assert_close(w.grad, grad_weight, **GRAD_TOLERANCES[torch.float32])


def test_backend_choice_reaches_the_right_operator():
    x, w = make_inputs((2, 8), torch.float32)
    for backend, expected in [
        ("auto", "opguide.rms_norm.default"),
        ("cpp", "opguide.rms_norm.default"),
        ("triton", "opguide.rms_norm_triton.default"),
    ]:
        if backend == "triton" and not triton_ops.INTERPRET:
            continue  # CPU tensors need the interpreter
        with OpRecorder() as rec:
            opguide.rms_norm(x, w, backend=backend)
        assert expected in rec.ops, (backend, rec.ops)


def test_unknown_backend():
    x, w = make_inputs((2, 8), torch.float32)
    with pytest.raises(ValueError, match=r"backend must be 'auto', 'cpp' or 'triton', got 'cuda'"):
        opguide.rms_norm(x, w, backend="cuda")


@interpreter
def test_float64_is_rejected():
    x, w = make_inputs((2, 8), torch.float64)
    with pytest.raises(TypeError, match=r"Triton backend supports float32, float16 and bfloat16"):
        opguide.rms_norm(x, w, backend="triton")


@interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_long_rows_forward_backward_and_fused(dtype):
    # Rows past every register kernel (the forward's 16384 elements, the
    # fused kernel's 32 KiB): the split kernels (one segment under the
    # interpreter), forward, backward and fused.
    n = 16385 if dtype == torch.float32 else 32769
    x, w = make_inputs((2, n), dtype, requires_grad=True)
    grad = torch.randn(2, n).to(dtype)
    y = opguide.rms_norm(x, w, backend="triton")
    torch.testing.assert_close(y, rms_norm_reference(x, w), **TOLERANCES[dtype])
    y.backward(grad)
    rx, rw = reference_grads(x, w, grad)
    torch.testing.assert_close(x.grad, rx, **GRAD_TOLERANCES[dtype])
    torch.testing.assert_close(w.grad.float(), rw.float(), atol=0.2, rtol=5e-2)  # 2-row sum
    residual = torch.randn(2, n).to(dtype)
    expected_h = (x.detach().float() + residual.float()).to(dtype)
    out, inv_rms = opguide.fused_add_rms_norm_(
        x.detach(), residual, w.detach(), 1e-6, backend="triton"
    )
    # (The interpreter rounds to bfloat16 its own way: a tolerance, not equality.)
    torch.testing.assert_close(residual, expected_h, **TOLERANCES[dtype])
    expected_inv = torch.rsqrt(expected_h.float().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(inv_rms, expected_inv, atol=1e-2, rtol=5e-3)
    torch.testing.assert_close(out, rms_norm_reference(expected_h, w.detach()), **TOLERANCES[dtype])


@interpreter
def test_rows_too_long_to_split_take_the_chunked_kernels():
    # Past 2**17 elements the interpreter takes the chunked kernels, which a
    # GPU takes for rows of more segments than it has SMs (opguide/triton/split.py).
    n = 2**17 + 3
    cpu = torch.device("cpu")
    assert isinstance(launch.forward_config(2, n, torch.float32, cpu), launch.Chunked)
    split = launch.forward_config(2, n - 4, torch.float32, cpu)
    assert split.seg == 2**17 and split.segments(n - 4) == 1
    x, w = make_inputs((2, n), torch.float32, requires_grad=True)
    grad = torch.randn(2, n)
    y = opguide.rms_norm(x, w, backend="triton")
    torch.testing.assert_close(y, rms_norm_reference(x, w), **TOLERANCES[torch.float32])
    y.backward(grad)
    assert_grads_close((x.grad, w.grad), reference_grads(x, w, grad))
    residual = torch.randn(2, n)
    h = x.detach() + residual
    out, _ = opguide.fused_add_rms_norm_(x.detach(), residual, w.detach(), 1e-6, backend="triton")
    torch.testing.assert_close(residual, h)
    torch.testing.assert_close(out, rms_norm_reference(h, w.detach()), **TOLERANCES[torch.float32])


# One backward contract for both backends: (grad_y, x, weight, inv_rms) in,
# (grad_x, grad_weight) out, with the inv_rms of the backend's training forward.
BACKWARD_OPS = {
    "cpp": ("rms_norm_forward", "rms_norm_backward"),
    "triton": ("rms_norm_forward_triton", "rms_norm_backward_triton"),
}


@interpreter
@pytest.mark.parametrize("backend", list(BACKWARD_OPS))
# (5, 20000): split rows (the interpreter runs one segment per row)
@pytest.mark.parametrize("shape", [(5, 24), (3, 7), (5, 20000)], ids=str)
def test_backward_ops_share_one_contract(backend, shape):
    forward, backward = (getattr(torch.ops.opguide, name).default for name in BACKWARD_OPS[backend])
    x, w = make_inputs(shape, torch.float32)
    grad = torch.randn(shape)
    y, inv_rms = forward(x, w, 1e-6)
    assert inv_rms.shape == x.shape[:-1] and inv_rms.dtype == torch.float32
    torch.testing.assert_close(inv_rms, torch.rsqrt(x.pow(2).mean(-1) + 1e-6))
    grad_x, grad_weight = backward(grad, x, w, inv_rms)
    assert_grads_close((grad_x, grad_weight), reference_grads(x, w, grad))
    # Both backends' backward ops, fed the same inv_rms, agree with each other.
    other = "cpp" if backend == "triton" else "triton"
    other_grad_x, other_grad_weight = getattr(torch.ops.opguide, BACKWARD_OPS[other][1]).default(
        grad, x, w, inv_rms
    )
    torch.testing.assert_close(grad_x, other_grad_x, **GRAD_TOLERANCES[torch.float32])
    torch.testing.assert_close(grad_weight, other_grad_weight, **GRAD_TOLERANCES[torch.float32])


@interpreter
@pytest.mark.parametrize("rows", [1, 2, 3, 5])
def test_split_backward_with_several_rows_per_program(rows):
    # Two row groups, so each program loops over several rows, counts in the
    # row after the one it waits for and loads the row after that (past the
    # last row too); then as many groups as rows. One segment per row: the
    # interpreter runs programs one after another.
    x, w = make_inputs((rows, 20000), torch.float32)
    grad = torch.randn(rows, 20000)
    _, inv_rms = torch.ops.opguide.rms_norm_forward_triton.default(x, w, 1e-6)
    for groups in (2, rows):
        forced = launch.Split(seg=32768, num_warps=2, per_sm=groups)
        grad_x, grad_weight = triton_ops.ops.rms_norm_backward(grad, x, w, inv_rms, forced=forced)
        assert_grads_close((grad_x, grad_weight), reference_grads(x, w, grad))


def test_no_row_is_split_when_the_setting_says_so(monkeypatch):
    # OPGUIDE_TRITON_SPLIT=0 (read when the module is imported) sends every
    # long row to the chunked kernels, whose programs never wait for each
    # other: the setting for a GPU shared with kernels that hold SMs.
    cpu = torch.device("cpu")
    planners = (launch.forward_config, launch.backward_config, launch.fused_config)
    assert any(isinstance(p(2, 20000, torch.float32, cpu), launch.Split) for p in planners)
    monkeypatch.setattr(launch, "SPLIT_ENABLED", False)
    for planner in planners:
        assert planner(2, 20000, torch.float32, cpu) == launch.CHUNKED


def test_the_split_setting_is_read_from_the_environment():
    code = "from opguide.triton import launch; print(launch.SPLIT_ENABLED)"
    env = {**os.environ, "OPGUIDE_TRITON_SPLIT": "0", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_launch_configurations_are_frozen_and_forced_ones_are_taken_as_they_are():
    import dataclasses

    cpu = torch.device("cpu")
    config = launch.forward_config(8, 1000, torch.bfloat16, cpu)
    assert isinstance(config, launch.Registers) and config.block_n == 1024
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.rows = 2
    forced = launch.Registers(block_n=1024, rows=2, num_warps=4)
    for planner in (launch.forward_config, launch.backward_config, launch.fused_config):
        assert planner(8, 1000, torch.bfloat16, cpu, forced=forced) is forced


@interpreter
def test_a_forced_configuration_gives_the_same_result():
    x, w = make_inputs((5, 40), torch.float32)
    inv = torch.empty(5)
    want = triton_ops.ops.rms_norm_forward(x, w, 1e-6, inv)
    forced = launch.Registers(block_n=64, rows=2, num_warps=1)
    torch.testing.assert_close(triton_ops.ops.rms_norm_forward(x, w, 1e-6, forced=forced), want)
    grad = torch.randn(5, 40)
    want = triton_ops.ops.rms_norm_backward(grad, x, w, inv)
    got = triton_ops.ops.rms_norm_backward(
        grad, x, w, inv, grad_weight_sum=launch.GradWeightSum(16, 64, 1)
    )
    assert_grads_close(got, want)


@interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_backward_of_one_program_writes_grad_weight_itself(dtype):
    # One program holds the whole sum over rows: the plan has no sum kernel,
    # grad_weight comes out in weight's dtype, and it matches the sum of the
    # partial rows of three programs.
    x, w = make_inputs((3, 40), dtype)
    grad = torch.randn(3, 40, dtype=dtype)
    _, inv = torch.ops.opguide.rms_norm_forward_triton.default(x, w, 1e-6)
    one = launch.Registers(block_n=64, rows=1, num_warps=1, programs=1)
    three = launch.Registers(block_n=64, rows=1, num_warps=1, programs=3)
    assert plans.plan("backward", x, 3, 40, one).sum_grid == ()
    assert plans.plan("backward", x, 3, 40, three).sum_grid != ()
    got = triton_ops.ops.rms_norm_backward(grad, x, w, inv, forced=one)
    want = triton_ops.ops.rms_norm_backward(grad, x, w, inv, forced=three)
    assert got[1].dtype == dtype
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    assert_grads_close(got, want)
    assert_grads_close(got, reference_grads(x, w, grad))


def test_device_guard_is_read_once_from_the_environment():
    """OPGUIDE_TRITON_DEVICE_GUARD=0 (tools/record_two_gpus.py) turns the guard off."""
    import os
    import subprocess
    import sys

    code = "import opguide.triton.launch as launch; print(launch._DEVICE_GUARD)"
    for value, expected in (("0", "False"), ("1", "True")):
        env = {**os.environ, "OPGUIDE_TRITON_DEVICE_GUARD": value}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert proc.stdout.strip().splitlines()[-1:] == [expected], proc.stderr[-2000:]


def test_input_checks_apply():
    x, w = make_inputs((2, 8), torch.float32)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        opguide.rms_norm(x, w[:4], backend="triton")


# -- CUDA tensors, compiled kernels, torch.library.triton_op -------------------------------


@pytest.mark.cuda
@compiled_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_forward_matches_reference(shape, dtype):
    x, w = make_inputs(shape, dtype, device="cuda")
    y = opguide.rms_norm(x, w, backend="triton")
    assert y.device == x.device and y.dtype == dtype
    torch.testing.assert_close(y, rms_norm_reference(x, w), **TOLERANCES[dtype])


@pytest.mark.cuda
@compiled_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 7), (64, 1000), (513, 4096), (2, 3, 768)], ids=str)
def test_cuda_backward_matches_reference(shape, dtype):
    x, w = make_inputs(shape, dtype, device="cuda", requires_grad=True)
    grad = torch.randn(shape, device="cuda").to(dtype)
    opguide.rms_norm(x, w, backend="triton").backward(grad)
    grad_x, grad_weight = reference_grads(x, w, grad)
    tol = dict(GRAD_TOLERANCES[dtype])
    if shape[0] > 100 and dtype != torch.float32:
        tol = dict(atol=0.25, rtol=5e-2)  # grad_weight sums hundreds of rounded rows
    torch.testing.assert_close(x.grad, grad_x, **GRAD_TOLERANCES[dtype])
    torch.testing.assert_close(w.grad, grad_weight, **tol)


def _sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


# Long rows (opguide/triton/split.py): split over 2 to 64 programs, more rows than run
# at once, odd N, one row; then rows of more segments than SMs (the chunked
# kernels), past the forward's segments and past the backward's.
LONG_SHAPES = [(3, 32768), (300, 65536), (7, 131072), (5, 100003), (600, 16384), (1, 262144)]
LONG_IDS = [*map(str, LONG_SHAPES), "forward-chunked", "backward-chunked"]


@pytest.mark.cuda
@compiled_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(len(LONG_IDS)), ids=LONG_IDS)
def test_cuda_long_rows(case, dtype):
    if case < len(LONG_SHAPES):
        shape = LONG_SHAPES[case]
    else:
        planner = (launch.forward_config, launch.backward_config)[case - len(LONG_SHAPES)]
        seg = (launch.SPLIT_FORWARD, launch.SPLIT_BACKWARD)[case - len(LONG_SHAPES)].seg
        shape = (2, seg * _sms() + 5)
        config = planner(2, shape[1], dtype, torch.device("cuda"))
        assert isinstance(config, launch.Chunked), config
    x, w = make_inputs(shape, dtype, device="cuda", requires_grad=True)
    grad = torch.randn(shape, device="cuda").to(dtype)
    y = opguide.rms_norm(x, w, backend="triton")
    torch.testing.assert_close(y, rms_norm_reference(x, w), **TOLERANCES[dtype])
    y.backward(grad)
    grad_x, grad_weight = reference_grads(x, w, grad)
    torch.testing.assert_close(x.grad, grad_x, **GRAD_TOLERANCES[dtype])
    tol = dict(GRAD_TOLERANCES[dtype])
    if dtype != torch.float32:
        tol = dict(atol=0.25 * max(1, shape[0] // 100), rtol=5e-2)  # rounded rows summed
    torch.testing.assert_close(w.grad, grad_weight, **tol)
    residual = torch.randn(shape, device="cuda").to(dtype)
    h = (x.detach().float() + residual.float()).to(dtype)
    out, inv_rms = opguide.fused_add_rms_norm_(
        x.detach(), residual, w.detach(), 1e-6, backend="triton"
    )
    torch.testing.assert_close(residual, h)
    torch.testing.assert_close(out, rms_norm_reference(h, w.detach()), **TOLERANCES[dtype])
    expected_inv = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(inv_rms, expected_inv, atol=1e-5, rtol=1e-4)


@pytest.mark.cuda
@compiled_triton
@pytest.mark.parametrize("shape", [(300, 65536), (5, 100003)], ids=str)
def test_cuda_long_rows_are_deterministic(shape):
    # Every segment adds the parts of its row in one order: the same bits on every run.
    x, w = make_inputs(shape, torch.bfloat16, device="cuda", requires_grad=True)
    grad = torch.randn(shape, device="cuda").to(torch.bfloat16)
    runs = []
    for _ in range(3):
        x.grad = w.grad = None
        y = opguide.rms_norm(x, w, backend="triton")
        y.backward(grad)
        runs.append((y, x.grad, w.grad))
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            assert torch.equal(a, b)


@pytest.mark.cuda
@compiled_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_opcheck_triton_op(dtype):
    x, w = make_inputs((8, 256), dtype, device="cuda")
    torch.library.opcheck(torch.ops.opguide.rms_norm_triton.default, (x, w, 1e-6))
    x, w = make_inputs((8, 256), dtype, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.opguide.rms_norm_triton.default, (x, w, 1e-6))
    grad = torch.randn(8, 256, device="cuda").to(dtype)
    inv_rms = torch.rsqrt(x.detach().float().pow(2).mean(-1) + 1e-6)
    torch.library.opcheck(
        torch.ops.opguide.rms_norm_backward_triton.default,
        (grad, x.detach(), w.detach(), inv_rms),
    )
    torch.library.opcheck(torch.ops.opguide.rms_norm_forward_triton.default, (x, w, 1e-6))


@pytest.mark.cuda
@compiled_triton
@pytest.mark.parametrize("compiled", ["native", "kernel"])
def test_cuda_compile_fullgraph_calls_the_form_asked_for(compiled):
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()

    def f(x, w):
        return opguide.rms_norm(x + 1, w, backend="triton", compiled=compiled) * 2

    x, w = make_inputs((32, 1024), torch.float16, device="cuda")
    y, code = run_and_get_code(torch.compile(f, fullgraph=True), x, w)
    torch.testing.assert_close(y, rms_norm_reference(x + 1, w) * 2, **TOLERANCES[torch.float16])
    # "native": Inductor generates the norm itself; "kernel": its code calls
    # the operator, one opaque call that launches opguide's kernel.
    assert ("rms_norm_triton" in "\n".join(code)) == (compiled == "kernel")


@pytest.mark.cuda
@compiled_triton
def test_cuda_compile_backward():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: opguide.rms_norm(x, w, backend="triton"), fullgraph=True)
    x, w = make_inputs((64, 512), torch.float32, device="cuda", requires_grad=True)
    grad = torch.randn(64, 512, device="cuda")
    compiled(x, w).backward(grad)
    grad_x, grad_weight = reference_grads(x, w, grad)
    torch.testing.assert_close(x.grad, grad_x, **GRAD_TOLERANCES[torch.float32])
    torch.testing.assert_close(w.grad, grad_weight, **GRAD_TOLERANCES[torch.float32])


@pytest.mark.cuda
@compiled_triton
def test_cuda_cpu_tensor_needs_the_interpreter():
    x, w = make_inputs((2, 8), torch.float32)
    with pytest.raises(RuntimeError, match=r"runs CPU tensors only in Triton's interpreter"):
        opguide.rms_norm(x, w, backend="triton")


def _run_cpu_only(code: str, interpret: str | None) -> str:
    """Runs ``code`` in a fresh CPU-only interpreter; TRITON_INTERPRET as given (None: unset)."""
    import os
    import subprocess
    import sys
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    with tempfile.TemporaryDirectory() as folder:
        # A file, not -c: @triton.jit reads the source of the function it decorates.
        script = os.path.join(folder, "check.py")
        with open(script, "w") as f:
            f.write(code)
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# What a reader's own Triton kernel and the environment look like after `import opguide`.
_IMPORT_LEAVES_PROCESS_ALONE = """
import os, warnings
before = dict(os.environ)
import torch, triton, triton.language as tl
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import opguide
print("warned:", [str(w.message) for w in caught if "Triton" in str(w.message)])
print("environ unchanged:", dict(os.environ) == before)
@triton.jit
def reader_kernel(
    x_ptr,  # [n] never read
    n,
):
    pass
print("reader kernel:", type(reader_kernel).__name__)
print("opguide interprets:", opguide.triton.INTERPRET)
x = torch.randn(3, 8)
torch.testing.assert_close(
    opguide.rms_norm(x, torch.ones(8)), opguide.rms_norm_reference(x, torch.ones(8))
)
try:
    y = opguide.rms_norm(x, torch.ones(8), backend="triton")
    torch.testing.assert_close(y, opguide.rms_norm_reference(x, torch.ones(8)))
    print("triton on cpu: ran")
except RuntimeError as error:
    print("triton on cpu: refused:", error)
"""


def test_import_leaves_triton_interpret_and_other_kernels_alone():
    """No GPU, no TRITON_INTERPRET: importing opguide sets nothing, a reader's kernel compiles.

    The Triton operators are defined; on CPU tensors they refuse, naming the
    variable that turns the interpreter on, and the compiled operators run.
    """
    out = _run_cpu_only(_IMPORT_LEAVES_PROCESS_ALONE, interpret=None).splitlines()
    assert out[0] == "warned: []"
    assert out[1] == "environ unchanged: True"
    assert out[2] == "reader kernel: JITFunction"
    assert out[3] == "opguide interprets: False"
    assert out[4].startswith("triton on cpu: refused: rms_norm: the Triton backend runs CPU")
    assert "TRITON_INTERPRET=1" in out[4]


def test_interpreter_chosen_by_the_reader_runs_the_kernels_on_cpu():
    """TRITON_INTERPRET=1 set by the reader: opguide's kernels and the reader's are interpreted."""
    out = _run_cpu_only(_IMPORT_LEAVES_PROCESS_ALONE, interpret="1").splitlines()
    assert out[0] == "warned: []"
    assert out[1] == "environ unchanged: True"
    assert out[2] == "reader kernel: InterpretedFunction"
    assert out[3] == "opguide interprets: True"
    assert out[4] == "triton on cpu: ran"


def test_interpreter_set_after_triton_was_imported_turns_only_triton_off():
    """TRITON_INTERPRET=1 set after triton loaded: the Triton backend is off, C++ ops work."""
    code = (
        "import os, warnings, torch, triton.language\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import opguide\n"
        "print([str(w.message) for w in caught if 'Triton backend is off' in str(w.message)])\n"
        "x = torch.randn(3, 8)\n"
        "torch.testing.assert_close(opguide.rms_norm(x, torch.ones(8)), "
        "opguide.rms_norm_reference(x, torch.ones(8)))\n"
        "try:\n"
        "    opguide.rms_norm(x, torch.ones(8), backend='triton')\n"
        "except RuntimeError as error:\n"
        "    print('refused:', error)\n"
    )
    warned, refused = _run_cpu_only(code, interpret=None).strip().splitlines()
    assert "imported before TRITON_INTERPRET=1" in warned
    assert refused.startswith("refused: rms_norm: backend='triton' is off in this process")


@interpreter
def test_eager_calls_plan_each_problem_once():
    """A second eager call of one shape takes its launch plan from the cache; a forced one not."""
    from opguide.triton import plans

    x, w = make_inputs((3, 48), torch.float32)
    cached = plans._CACHED["forward"]
    opguide.rms_norm(x, w, backend="triton")
    before = cached.cache_info()
    opguide.rms_norm(x, w, backend="triton")
    after = cached.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    forced = launch.Registers(64, 1, 1)
    triton_ops.ops.rms_norm_forward(x, w, 1e-6, forced=forced)
    assert cached.cache_info() == after
