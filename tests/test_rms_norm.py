"""Tests of ``opguide.rms_norm`` on the CPU: reference match, opcheck, compile, errors."""

from __future__ import annotations

import pytest
import torch

import opguide
from opguide import rms_norm_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Tolerances are those of one rounding to the output dtype on top of float32
# accumulation (the kernel and the reference may round at different points).
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
}
# (M, N): N below, at and off the 16-lane width, odd, large, a single row.
SHAPES = [(1, 1), (3, 7), (4, 16), (5, 17), (8, 33), (2, 255), (16, 4096), (1, 8191), (64, 1000)]


def make_inputs(shape, dtype, device="cpu", seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype=dtype, device=device)
    w = torch.randn(shape[-1], generator=gen, dtype=torch.float32).to(dtype=dtype, device=device)
    return x, w


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
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w: opguide.rms_norm(x, w) * 2, fullgraph=True)
    x, w = make_inputs((8, 64), torch.float32)
    torch.testing.assert_close(fn(x, w), rms_norm_reference(x, w) * 2)


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
