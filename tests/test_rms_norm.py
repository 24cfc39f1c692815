"""Tests of ``opguide.rms_norm`` on the CPU: reference match, opcheck, compile, errors, autograd."""

from __future__ import annotations

import pytest
import torch

import opguide
from opguide import rms_norm_backward_reference, rms_norm_reference
from opguide.testing import TOLERANCES, make_inputs

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (M, N): N below, at and off the 16-lane width, odd, large, a single row.
SHAPES = [(1, 1), (3, 7), (4, 16), (5, 17), (8, 33), (2, 255), (16, 4096), (1, 8191), (64, 1000)]


@pytest.mark.parametrize("dtype", DTYPES + [torch.float64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(shape, dtype):
    x, w = make_inputs(shape, dtype)
    y = opguide.rms_norm(x, w, eps=1e-6)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6), **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch_rms_norm(dtype):
    x, w = make_inputs((32, 96), dtype)
    expected = torch.nn.functional.rms_norm(x.float(), (96,), w.float(), eps=1e-5).to(dtype)
    torch.testing.assert_close(opguide.rms_norm(x, w, 1e-5), expected, **TOLERANCES[dtype])


def test_batched_and_non_contiguous():
    x, w = make_inputs((4, 6, 40), torch.float32)
    ref = rms_norm_reference(x, w)
    torch.testing.assert_close(opguide.rms_norm(x, w), ref)
    xt = x.transpose(0, 1)  # non-contiguous, same last dimension
    assert not xt.is_contiguous()
    torch.testing.assert_close(opguide.rms_norm(xt, w), rms_norm_reference(xt, w))
    xs = x[..., ::2]  # last dimension strided
    ws = w[::2]  # non-contiguous weight
    torch.testing.assert_close(opguide.rms_norm(xs, ws), rms_norm_reference(xs, ws))


def test_eps_is_used():
    x = torch.zeros(2, 8)
    w = torch.ones(8)
    # All-zero rows normalise to zero for any eps > 0 ...
    assert torch.equal(opguide.rms_norm(x, w, 1e-3), x)
    # ... and a large eps visibly shrinks the output.
    x = torch.ones(2, 8)
    torch.testing.assert_close(opguide.rms_norm(x, w, 3.0), torch.full((2, 8), 0.5))


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (0,)], ids=str)
def test_empty(shape):
    x, w = make_inputs(shape, torch.float32)
    y = opguide.rms_norm(x, w)
    assert y.shape == x.shape


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(dtype):
    x, w = make_inputs((5, 33), dtype)
    torch.library.opcheck(torch.ops.opguide.rms_norm.default, (x, w, 1e-6))
    xt, _ = make_inputs((33, 5), dtype)
    torch.library.opcheck(torch.ops.opguide.rms_norm.default, (xt.t(), w, 1e-6))


def test_compile_fullgraph():
    # The graph holds opguide::rms_norm itself (the default, compiled="kernel"),
    # traced with its fake kernel.
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w: opguide.rms_norm(x, w) * 2, fullgraph=True)
    x, w = make_inputs((8, 64), torch.float32)
    torch.testing.assert_close(fn(x, w), rms_norm_reference(x, w) * 2)


class _RmsNorm(torch.nn.Module):
    def forward(self, x, weight):
        return opguide.rms_norm(x, weight)


def default_call() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A module calling the public function with its default arguments, and inputs
    for it: what tests/test_compiled_form.py exports and tests/test_across_pytorch.py
    packages with AOTInductor, for every operator of the registry."""
    return _RmsNorm(), make_inputs((4, 32), torch.float32)


BAD_INPUTS = [
    (
        "integer x",
        lambda: (torch.ones(2, 4, dtype=torch.int32), torch.ones(4, dtype=torch.int32)),
        TypeError,
        r"x must be a floating-point tensor .* got torch\.int32",
    ),
    (
        "weight dtype",
        lambda: (torch.ones(2, 4), torch.ones(4, dtype=torch.float16)),
        TypeError,
        r"weight must have the dtype of x \(torch\.float32\), got torch\.float16",
    ),
    (
        "weight shape",
        lambda: (torch.ones(2, 4), torch.ones(5)),
        ValueError,
        r"weight must have shape \(4,\) to match the last dimension of x, got \(5,\)",
    ),
    (
        "weight 2-d",
        lambda: (torch.ones(2, 4), torch.ones(1, 4)),
        ValueError,
        r"weight must have shape \(4,\)",
    ),
    (
        "0-d x",
        lambda: (torch.tensor(1.0), torch.ones(1)),
        ValueError,
        r"x must have at least one dimension",
    ),
    (
        "device",
        lambda: (torch.ones(2, 4), torch.ones(4, device="meta")),
        RuntimeError,
        r"weight must be on the device of x \(cpu\), got meta",
    ),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_public_api(case):
    _, make, exc, message = case
    x, w = make()
    with pytest.raises(exc, match=message):
        opguide.rms_norm(x, w)


@pytest.mark.parametrize("case", BAD_INPUTS[:-1], ids=[c[0] for c in BAD_INPUTS[:-1]])
def test_bad_input_cpp_checks(case):
    # The C++ checks catch the same mistakes when the op is called directly.
    _, make, exc, message = case
    x, w = make()
    with pytest.raises(exc, match=message):
        torch.ops.opguide.rms_norm(x, w, 1e-6)


def test_negative_eps():
    with pytest.raises(ValueError, match=r"eps must be non-negative, got -1"):
        opguide.rms_norm(torch.ones(2, 4), torch.ones(4), eps=-1.0)
    with pytest.raises(ValueError, match=r"eps must be non-negative"):
        torch.ops.opguide.rms_norm(torch.ones(2, 4), torch.ones(4), -1.0)


def test_not_a_tensor():
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        opguide.rms_norm([1.0, 2.0], torch.ones(2))


# ---------------------------------------------------------------------------
# Autograd: rms_norm_forward + rms_norm_backward (step 8)


def assert_grads_close(actual, expected, dtype):
    # A gradient is a sum over many rows or columns, so its error grows with
    # its magnitude: scale the absolute tolerance by the largest value.
    tol = TOLERANCES[dtype]
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual, expected, atol=tol["atol"] * scale, rtol=tol["rtol"])


GRAD_SHAPES = [(1, 1), (3, 7), (5, 17), (4, 3, 33), (64, 1000)]


@pytest.mark.parametrize("dtype", DTYPES + [torch.float64], ids=str)
@pytest.mark.parametrize("shape", GRAD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_matches_reference(shape, dtype):
    x, w = make_inputs(shape, dtype)
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = opguide.rms_norm(x, w, eps=1e-5)
    grad_y = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    y.backward(grad_y)
    grad_x, grad_weight = rms_norm_backward_reference(grad_y, x, w, 1e-5)
    assert x.grad.dtype == dtype and w.grad.dtype == dtype
    assert_grads_close(x.grad, grad_x, dtype)
    assert_grads_close(w.grad, grad_weight, dtype)


def test_forward_saves_inv_rms():
    x, w = make_inputs((4, 3, 10), torch.bfloat16)
    y, inv_rms = torch.ops.opguide.rms_norm_forward(x, w, 1e-6)
    assert inv_rms.shape == (4, 3) and inv_rms.dtype == torch.float32
    expected = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(inv_rms, expected)
    torch.testing.assert_close(y, rms_norm_reference(x, w), **TOLERANCES[torch.bfloat16])


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(lambda x, w: opguide.rms_norm(x, w, 1e-3), id="opguide.rms_norm"),
        # The operator itself: with inputs that require grad, its C++ autograd
        # kernel runs the training forward, rms_norm_forward, which saves inv_rms.
        pytest.param(lambda x, w: torch.ops.opguide.rms_norm(x, w, 1e-3), id="ops.rms_norm"),
    ],
)
def test_gradcheck(entry):
    x, w = make_inputs((4, 3, 9), torch.float64)
    x_t = make_inputs((9, 5), torch.float64, seed=2)[0].t()  # non-contiguous
    for a in (x, x_t):
        a = a.detach().requires_grad_(True)
        wg = w[: a.shape[-1]].detach().requires_grad_(True)
        assert torch.autograd.gradcheck(entry, (a, wg))


def test_graph_node_behaves_as_a_function_node():
    # opguide::rms_norm builds its graph node with torch::autograd::Function
    # (csrc/rms_norm/rms_norm_autograd.cpp): one node leading to x and weight.
    x, w = make_inputs((4, 16), torch.float64, requires_grad=True)
    y = opguide.rms_norm(x, w)
    assert "RmsNormWithGrad" in y.grad_fn.name()
    assert len(y.grad_fn.next_functions) == 2
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()  # the saved tensors were freed
    y = opguide.rms_norm(x, w)
    with torch.no_grad():
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        y = opguide.rms_norm(x, w)
    assert [t.shape for t in packed] == [x.shape, w.shape, x.shape[:-1]]
    (only_w,) = torch.autograd.grad(opguide.rms_norm(x.detach(), w).sum(), (w,))
    assert only_w.shape == w.shape
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level(), pytest.raises(RuntimeError, match="forward-mode"):
        opguide.rms_norm(fwAD.make_dual(x.detach(), torch.ones_like(x)), w)


def test_backward_is_deterministic():
    x, w = make_inputs((3000, 96), torch.float32)
    grad_y = torch.randn_like(x)
    _, inv_rms = torch.ops.opguide.rms_norm_forward(x, w, 1e-6)
    first = torch.ops.opguide.rms_norm_backward(grad_y, x, w, inv_rms)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # another split of the rows over threads
        second = torch.ops.opguide.rms_norm_backward(grad_y, x, w, inv_rms)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck_training_ops(dtype):
    x, w = make_inputs((5, 33), dtype)
    # requires_grad inputs make opcheck also test the autograd registration.
    sample = (x.requires_grad_(True), w.requires_grad_(True), 1e-6)
    torch.library.opcheck(torch.ops.opguide.rms_norm_forward.default, sample)
    torch.library.opcheck(torch.ops.opguide.rms_norm.default, sample)
    _, inv_rms = torch.ops.opguide.rms_norm_forward(x.detach(), w.detach(), 1e-6)
    grad_y = torch.randn(5, 33).to(dtype)
    torch.library.opcheck(
        torch.ops.opguide.rms_norm_backward.default, (grad_y, x.detach(), w.detach(), inv_rms)
    )


def test_compile_dynamic_forward_backward_no_recompiles():
    # fullgraph: no graph break in forward or backward; dynamic=True plus
    # error_on_recompile: one graph serves every shape below. The operators
    # are in the graph (compiled="kernel", the default), traced with their
    # fake kernels.
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    def loss_fn(x, w):
        return (opguide.rms_norm(x, w) * 2.0).sum()

    compiled = torch.compile(loss_fn, fullgraph=True, dynamic=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for shape in [(8, 64), (5, 33), (17, 128)]:
            x, w = make_inputs(shape, torch.float32)
            x.requires_grad_(True)
            w.requires_grad_(True)
            compiled(x, w).backward()
            grad_x, grad_weight = rms_norm_backward_reference(torch.full(shape, 2.0), x, w)
            assert_grads_close(x.grad, grad_x, torch.float32)
            assert_grads_close(w.grad, grad_weight, torch.float32)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (0,)], ids=str)
def test_empty_backward(shape):
    x, w = make_inputs(shape, torch.float32)
    x.requires_grad_(True)
    w.requires_grad_(True)
    opguide.rms_norm(x, w).sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(w.grad, torch.zeros_like(w))


def _backward_args(**override):
    x, w = make_inputs((2, 4), torch.float32)
    args = dict(grad_y=torch.ones(2, 4), x=x, weight=w, inv_rms=torch.ones(2))
    args.update(override)
    return args


BAD_BACKWARD_INPUTS = [
    (
        "grad_y shape",
        _backward_args(grad_y=torch.ones(2, 5)),
        ValueError,
        r"grad_y must have the shape of x \(2, 4\), got \(2, 5\)",
    ),
    (
        "grad_y dtype",
        _backward_args(grad_y=torch.ones(2, 4, dtype=torch.float64)),
        TypeError,
        r"grad_y must have the dtype of x \(torch\.float32\), got torch\.float64",
    ),
    (
        "inv_rms dtype",
        _backward_args(inv_rms=torch.ones(2, dtype=torch.float16)),
        TypeError,
        r"inv_rms must have dtype torch\.float32, got torch\.float16",
    ),
    (
        "inv_rms shape",
        _backward_args(inv_rms=torch.ones(2, 1)),
        ValueError,
        r"inv_rms must have shape \(2,\) \(x\.shape\[:-1\]\), got \(2, 1\)",
    ),
]


@pytest.mark.parametrize("case", BAD_BACKWARD_INPUTS, ids=[c[0] for c in BAD_BACKWARD_INPUTS])
def test_bad_input_backward(case):
    _, args, exc, message = case
    with pytest.raises(exc, match=message):
        torch.ops.opguide.rms_norm_backward(**args)
