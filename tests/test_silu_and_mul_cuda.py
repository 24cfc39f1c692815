"""Tests of ``opguide.silu_and_mul`` on CUDA, its CUDA and Triton kernels: every item
needs a GPU (marker ``cuda``)."""

from __future__ import annotations

import pytest
import torch

import opguide
from opguide import backends, silu_and_mul_reference
from opguide._silu_and_mul.reference import silu_and_mul_backward_reference
from opguide.testing import TOLERANCES

pytestmark = pytest.mark.cuda
OPS = torch.ops.opguide
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Odd (scalar accesses), multiples of the 16-byte vector, one row per
# thread up to rows longer than a block, and the sizes of real models.
DS = [1, 3, 7, 8, 64, 769, 1024, 4096, 5125, 8192, 14336]
ROWS = [1, 3, 257, 4097]
BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(
    not backends.triton_ready(), reason="Triton is not usable in this process"))]  # fmt: skip
GRAD_TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
}


def make_x(shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(shape, generator=gen)).to(dtype=dtype, device="cuda")


def _backward(backend):
    return OPS.silu_and_mul_backward if backend == "cpp" else OPS.silu_and_mul_backward_triton


def check(x, backend, dtype):
    y = opguide.silu_and_mul(x, backend=backend)
    assert y.shape == (*x.shape[:-1], x.shape[-1] // 2) and y.is_contiguous()
    torch.testing.assert_close(y, silu_and_mul_reference(x), **TOLERANCES[dtype])
    grad_y = make_x(y.shape, dtype, seed=1)
    grad_x = _backward(backend)(grad_y, x)
    expected = silu_and_mul_backward_reference(grad_y, x)
    torch.testing.assert_close(grad_x, expected, **GRAD_TOLERANCES[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("d", DS)
def test_matches_reference(d, rows, dtype, backend):
    check(make_x((rows, 2 * d), dtype), backend, dtype)


def test_float64_and_leading_dims():
    check(make_x((2, 0, 2 * 16), torch.float64), "cpp", torch.float64)
    check(make_x((3, 5, 2 * 769), torch.float64), "cpp", torch.float64)
    x = make_x((3, 2 * 7), torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(opguide.silu_and_mul, (x,))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned_and_strided_inputs(dtype, backend):
    # An offset of one element: no 16-byte vectors (the scalar kernels).
    base = make_x((64 * 2 * 1024 + 1,), dtype)
    check(base[1:].view(64, 2 * 1024), backend, dtype)
    check(make_x((300, 4 * 512), dtype)[:, 3 : 3 + 2 * 512], backend, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_cpu_kernel(backend):
    x = make_x((129, 2 * 4096), torch.bfloat16)
    torch.testing.assert_close(
        opguide.silu_and_mul(x, backend=backend).cpu(), opguide.silu_and_mul(x.cpu()),
        atol=1.6e-2, rtol=1.6e-2,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(dtype):
    x = make_x((5, 2 * 264), dtype)
    grad_y = make_x((5, 264), dtype, seed=1)
    torch.library.opcheck(OPS.silu_and_mul.default, (x,))
    torch.library.opcheck(OPS.silu_and_mul.default, (x.clone().requires_grad_(),))
    torch.library.opcheck(OPS.silu_and_mul_backward.default, (grad_y, x))
    if backends.triton_ready():
        torch.library.opcheck(OPS.silu_and_mul_triton.default, (x,))
        torch.library.opcheck(OPS.silu_and_mul_backward_triton.default, (grad_y, x))


def test_compile_kernel_forward_and_backward():
    torch._dynamo.reset()
    fn = torch.compile(lambda x: opguide.silu_and_mul(x, compiled="kernel") * 2, fullgraph=True)
    x = make_x((64, 2 * 1024), torch.bfloat16).requires_grad_()
    y = fn(x)
    torch.testing.assert_close(y, silu_and_mul_reference(x) * 2)
    y.sum().backward()
    ones = torch.full((64, 1024), 2.0, device="cuda", dtype=torch.bfloat16)
    expected = silu_and_mul_backward_reference(ones, x)
    torch.testing.assert_close(x.grad, expected, **GRAD_TOLERANCES[torch.bfloat16])


def test_runs_on_the_current_stream():
    x = make_x((4096, 2 * 4096), torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = opguide.silu_and_mul(x)
        grad_x = OPS.silu_and_mul_backward(y, x)
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(y, silu_and_mul_reference(x), **TOLERANCES[torch.bfloat16])
    expected = silu_and_mul_backward_reference(y, x)
    torch.testing.assert_close(grad_x, expected, **GRAD_TOLERANCES[torch.bfloat16])


# More than 2**31 elements in x, grad_x and (with d = 2**15) in nothing else:
# an index computed in 32 bits would wrap in the last rows.
BIG_ROWS, BIG_D = 2**15 + 1, 2**15


@pytest.mark.parametrize("backend", BACKENDS)
def test_past_two_to_the_31_elements(backend):
    x_bytes = BIG_ROWS * 2 * BIG_D * 2
    free, _ = torch.cuda.mem_get_info()
    if free < 4 * x_bytes:  # x, y, grad_y, grad_x, and room for the check
        need, have = 4 * x_bytes / 2**30, free / 2**30
        pytest.skip(f"needs {need:.0f} GiB of free GPU memory, has {have:.0f} GiB")
    torch.cuda.empty_cache()
    x = torch.empty(BIG_ROWS, 2 * BIG_D, dtype=torch.bfloat16, device="cuda")
    assert x.numel() > 2**31
    x.uniform_(-6, 6)
    y = opguide.silu_and_mul(x, backend=backend)
    # The rows whose offsets pass 2**31, against the reference on those rows alone.
    last = x[-3:]
    torch.testing.assert_close(y[-3:], silu_and_mul_reference(last), **TOLERANCES[torch.bfloat16])
    torch.testing.assert_close(y[:2], silu_and_mul_reference(x[:2]), **TOLERANCES[torch.bfloat16])
    grad_y = y  # any values of y's shape
    grad_x = _backward(backend)(grad_y, x)
    del y
    expected = silu_and_mul_backward_reference(grad_y[-3:], last)
    torch.testing.assert_close(grad_x[-3:], expected, **GRAD_TOLERANCES[torch.bfloat16])


@pytest.mark.parametrize("backend", BACKENDS)
def test_past_2_31_elements(backend):
    # An index computed in 32 bits wraps past 2**31 elements: the output here
    # passes that, and the rows on both sides of element 2**31 are checked,
    # as tests/test_large_tensors.py checks the RMSNorm kernels.
    from test_large_tensors import need_free_gib, rows_past, sampled_rows

    d = 4096
    rows = rows_past(d)
    need_free_gib(6 * rows * d * 2 / 2**30 + 4)  # bfloat16 x, grad_x, y and grad_y, and room
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(rows, 2 * d, device="cuda", dtype=torch.bfloat16, generator=gen)
    x.requires_grad_()
    grad = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    y = opguide.silu_and_mul(x, backend=backend)
    y.backward(grad)
    sample = sampled_rows(rows, d)
    xs = x.detach()[sample]
    torch.testing.assert_close(
        y.detach()[sample], silu_and_mul_reference(xs), **TOLERANCES[torch.bfloat16]
    )
    want = silu_and_mul_backward_reference(grad[sample], xs)
    torch.testing.assert_close(x.grad[sample], want, **GRAD_TOLERANCES[torch.bfloat16])
