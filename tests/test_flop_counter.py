"""The FLOP formulas of ``opguide.flops`` under ``torch.utils.flop_counter.FlopCounterMode``,
and the bytes of ``opguide.flops.min_bytes``.

The expected FLOPs are not taken from ``opguide.flops``: they are counted in
plain PyTorch, one FLOP per element of each arithmetic ATen op that a
reference computation runs on tensors of the size of ``x``
(:class:`FullSizeArithmetic`). Ops on smaller tensors, the per-row work, are
left out, as the formulas leave them out. The expected bytes are the sizes of
the tensors a real call reads and returns.

``torch.compile`` is not tested here: Dynamo does not compile a function called
while a dispatch mode such as FlopCounterMode is active (it runs the function
eagerly), so there is no compiled code for the mode to count.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import opguide
from opguide import flops, fused_add_rms_norm_reference, rms_norm_reference
from opguide.backends import TRITON_INSTALLED
from opguide.testing import make_inputs

if TRITON_INSTALLED:
    from opguide.triton import INTERPRET
else:
    INTERPRET = False

needs_interpreter = pytest.mark.skipif(
    not INTERPRET,
    reason="the Triton backend runs CPU tensors in Triton's interpreter, which is off "
    "in this process (triton missing, or a GPU is visible; set TRITON_INTERPRET=1)",
)
BACKENDS = [pytest.param("cpp"), pytest.param("triton", marks=needs_interpreter)]
# Operator names by role; the Triton twin of each adds "_triton" before any "_".
ROLES = {
    "inference": "rms_norm",
    "training": "rms_norm_forward",
    "backward": "rms_norm_backward",
    "fused": "fused_add_rms_norm_",
}
# Rows of N > 1 elements, so the per-row work runs on smaller tensors than x.
SHAPES = [(3, 7), (2, 5, 16), (1, 64)]
SHAPE_IDS = ["x".join(map(str, s)) for s in SHAPES]
EPS = 1e-6


def op_name(role: str, backend: str) -> str:
    name = ROLES[role]
    if backend == "triton":
        name = name[:-1] + "_triton_" if name.endswith("_") else name + "_triton"
    return name


def packet(role: str, backend: str):
    return getattr(torch.ops.opguide, op_name(role, backend))


ARITHMETIC = {
    f"aten.{name}" for name in ("add", "sub", "mul", "div", "pow", "sum", "mean", "rsqrt")
}


class FullSizeArithmetic(TorchDispatchMode):
    """Counts one FLOP per element of each arithmetic op whose largest tensor has ``size``."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func.overloadpacket) in ARITHMETIC:
            tensors = [t for t in (*args, out) if isinstance(t, torch.Tensor)]
            if max(t.numel() for t in tensors) == self.size:
                self.flops += self.size
        return out


def full_size_arithmetic(fn, x: torch.Tensor, *args) -> int:
    with FullSizeArithmetic(x.numel()) as counter:
        fn(x, *args)
    return counter.flops


def backward_by_hand(grad_y, x, weight, inv_rms):
    """RMSNorm's backward with each product computed once (checked below)."""
    r = inv_rms.unsqueeze(-1)
    g = grad_y * weight
    h = x * r
    c = (g * h).sum(-1, keepdim=True) / x.shape[-1]
    grad_x = r * (g - h * c)
    grad_weight = (grad_y * h).reshape(-1, x.shape[-1]).sum(0)
    return grad_x, grad_weight


def counted(fn) -> dict[str, int]:
    """FlopCounterMode's counts of one call, by operator name."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return {str(op): n for op, n in counter.get_flop_counts().get("Global", {}).items()}


def test_backward_by_hand_is_rms_norm_backward():
    x, w = make_inputs((4, 33), torch.float64)
    grad_y = torch.randn_like(x)
    inv_rms = torch.ops.opguide.rms_norm_forward(x, w, EPS)[1]
    expected = opguide.rms_norm_backward_reference(grad_y, x, w, EPS)
    torch.testing.assert_close(backward_by_hand(grad_y, x, w, inv_rms), expected)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_ops_count_their_formula(backend, shape):
    x, w = make_inputs(shape)
    expected = full_size_arithmetic(rms_norm_reference, x, w)
    for role in ("inference", "training"):
        got = counted(lambda role=role: packet(role, backend)(x, w, EPS))
        assert got == {f"opguide.{op_name(role, backend)}": expected}
    assert flops.rms_norm_flop(x.shape, w.shape, EPS) == expected


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_op_counts_its_formula(backend, shape):
    x, w = make_inputs(shape)
    grad_y = torch.randn_like(x)
    inv_rms = torch.ops.opguide.rms_norm_forward(x, w, EPS)[1]
    expected = full_size_arithmetic(backward_by_hand, grad_y, x, w, inv_rms)
    got = counted(lambda: packet("backward", backend)(grad_y, x, w, inv_rms))
    assert got == {f"opguide.{op_name('backward', backend)}": expected}


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no-weight"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_op_counts_its_formula(backend, shape, weighted):
    x, w = make_inputs(shape)
    w = w if weighted else None
    residual = torch.randn_like(x)
    expected = full_size_arithmetic(fused_add_rms_norm_reference, x, residual, w)
    got = counted(lambda: packet("fused", backend)(x, residual.clone(), w, EPS))
    assert got == {f"opguide.{op_name('fused', backend)}": expected}


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_and_backward_count_both_ops(backend):
    x, w = make_inputs((6, 40), requires_grad=True)
    forward = full_size_arithmetic(rms_norm_reference, x.detach(), w.detach())
    grad_y = torch.randn_like(x)
    inv_rms = torch.ops.opguide.rms_norm_forward(x.detach(), w.detach(), EPS)[1]
    backward = full_size_arithmetic(backward_by_hand, grad_y, x.detach(), w.detach(), inv_rms)
    with FlopCounterMode(display=False) as counter:
        opguide.rms_norm(x, w, EPS, backend=backend).backward(grad_y)
    got = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    assert got == {
        f"opguide.{op_name('training', backend)}": forward,
        f"opguide.{op_name('backward', backend)}": backward,
    }
    assert counter.get_total_flops() == forward + backward


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def real_bytes(role: str, backend: str, dtype: torch.dtype, weighted: bool = True):
    """(min_bytes' answer, bytes of the inputs and outputs of a real call)."""
    x, w = make_inputs((5, 24), dtype)
    op = packet(role, backend)
    if role == "backward":
        args = (torch.randn_like(x), x, w, packet("training", backend)(x, w, EPS)[1])
        outputs = op(*args)
    elif role == "fused":
        args = (x, torch.randn_like(x), w if weighted else None, EPS, torch.float32)
        outputs = (*op(args[0], args[1].clone(), *args[2:]), args[1])  # + residual
    else:
        args = (x, w, EPS)
        outputs = op(*args)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return flops.min_bytes(op.default, *args), (nbytes(*tensors), nbytes(*outputs))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_min_bytes_reads_each_input_and_writes_each_output_once(backend, role, dtype):
    computed, real = real_bytes(role, backend, dtype)
    assert computed == real


def test_min_bytes_float64_and_no_weight():
    for role in ROLES:
        computed, real = real_bytes(role, "cpp", torch.float64)
        assert computed == real, role
    computed, real = real_bytes("fused", "cpp", torch.float16, weighted=False)
    assert computed == real


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_min_bytes_agrees_with_the_benchmark(dtype):
    from guidekit.benchmark.passes import bytes_moved

    m, n, s = 48, 256, dtype.itemsize
    x = torch.empty(m, n, dtype=dtype, device="meta")
    w = torch.empty(n, dtype=dtype, device="meta")
    inv_rms = torch.empty(m, dtype=torch.float32, device="meta")
    ops = torch.ops.opguide
    assert sum(flops.min_bytes(ops.rms_norm, x, w, EPS)) == bytes_moved("forward", m, n, s)
    backward = sum(flops.min_bytes(ops.rms_norm_backward, x, x, w, inv_rms))
    assert backward == bytes_moved("backward", m, n, s)
    # The benchmark's training and fused passes leave out the inv_rms that
    # rms_norm_forward and fused_add_rms_norm_ return (4 bytes a row): the floor
    # of the model's step, which needs no inv_rms, rather than of the op.
    training = sum(flops.min_bytes(ops.rms_norm_forward, x, w, EPS)) + backward
    assert training == bytes_moved("forward", m, n, s) + bytes_moved("backward", m, n, s) + 4 * m
    fused = sum(flops.min_bytes(ops.fused_add_rms_norm_, x, x, w, EPS))
    assert fused == bytes_moved("fused", m, n, s) + 4 * m


def test_min_bytes_rejects_other_ops_and_arguments():
    x, w = make_inputs((2, 8))
    with pytest.raises(ValueError, match="min_bytes: op must be one of .*got aten.add"):
        flops.min_bytes(torch.ops.aten.add, x, x)
    with pytest.raises(TypeError, match="min_bytes: weight must be a torch.Tensor, got list"):
        flops.min_bytes(torch.ops.opguide.rms_norm, x, [1.0] * 8, EPS)
