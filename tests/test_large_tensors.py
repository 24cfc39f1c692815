"""Tensors of more than 2**31 elements through every kernel family, on a GPU.

An index computed in 32 bits wraps past 2**31 elements, and the result is
wrong only in the rows past that point. Each case here has more than 2**31
elements, and its rows are checked against the reference where they matter:
the first and last rows, and the rows on each side of element 2**31. The row
lengths pick every kernel family of both routes: rows in registers or one
block (4096), the Triton backward's split rows (16384), the CUDA forward's
clusters and the Triton split rows (32768, 262144), the CUDA one-block
kernel that re-reads a row from L2 and the longest Triton split rows
(524288), and the Triton chunked kernels (2**20 + 16). ``grad_weight`` sums
every row, so it is checked whole against a float32 sum. Each other operator
of the registry does the same in its own GPU tests.
"""

from __future__ import annotations

import pytest
import torch

import opguide
from opguide import rms_norm_reference
from opguide.testing import GRAD_TOLERANCES, TOLERANCES

pytestmark = pytest.mark.cuda

LIMIT = 2**31
LENGTHS = (4096, 16384, 32768, 262144, 524288, 2**20 + 16)
BACKENDS = ("cpp", "triton")
DTYPE = torch.bfloat16


def rows_past(n: int) -> int:
    """The fewest rows of ``n`` elements past 2**31 elements."""
    return LIMIT // n + 1


def sampled_rows(rows: int, n: int) -> list[int]:
    """The rows checked: the first and last two, and those on each side of element 2**31."""
    at = LIMIT // n  # the row that holds element 2**31
    return sorted({0, 1, at - 1, at, min(at + 1, rows - 1), rows - 1})


def need_free_gib(gib: float) -> None:
    """Skips the test unless the GPU has ``gib`` GiB free."""
    free, _ = torch.cuda.mem_get_info()
    if free < gib * 2**30:
        pytest.skip(f"needs {gib:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")


def _backend(backend: str) -> None:
    if backend == "triton":
        pytest.importorskip("triton")


def _randn(*shape, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", dtype=DTYPE, generator=g)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", LENGTHS)
def test_rms_norm_past_2_31_elements(n, backend):
    _backend(backend)
    rows = rows_past(n)
    need_free_gib(6 * rows * n * DTYPE.itemsize / 2**30 + 4)
    x = _randn(rows, n, seed=n).requires_grad_()
    w = (_randn(n, seed=n + 1) * 0.5 + 1).requires_grad_()
    grad = _randn(rows, n, seed=n + 2)
    y = opguide.rms_norm(x, w, 1e-6, backend=backend)
    y.backward(grad)
    sample = sampled_rows(rows, n)
    xs = x.detach()[sample].clone().requires_grad_()
    ws = w.detach().clone().requires_grad_()
    want = rms_norm_reference(xs, ws)
    torch.testing.assert_close(y.detach()[sample], want, **TOLERANCES[DTYPE])
    want.backward(grad[sample])
    torch.testing.assert_close(x.grad[sample], xs.grad, **GRAD_TOLERANCES[DTYPE])
    # grad_weight = sum over rows of grad * x * inv_rms, in float32, in slices.
    total = torch.zeros(n, device="cuda", dtype=torch.float32)
    step = max(1, 2**27 // n)
    for start in range(0, rows, step):
        xf = x.detach()[start : start + step].float()
        inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        total += (grad[start : start + step].float() * xf * inv).sum(0)
    scale = total.abs().max()
    torch.testing.assert_close(w.grad.float(), total, rtol=2e-2, atol=2e-2 * scale.item())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", (4096, 32768, 2**20 + 16))
def test_fused_add_rms_norm_past_2_31_elements(n, backend):
    _backend(backend)
    rows = rows_past(n)
    need_free_gib(4 * rows * n * DTYPE.itemsize / 2**30 + 4)
    x = _randn(rows, n, seed=n)
    residual = _randn(rows, n, seed=n + 1)
    w = _randn(n, seed=n + 2) * 0.5 + 1
    sample = sampled_rows(rows, n)
    before = residual[sample].clone()
    out, inv_rms = opguide.fused_add_rms_norm_(x, residual, w, 1e-6, backend=backend)
    h = (x[sample].float() + before.float()).to(DTYPE)  # rounded once to the residual's dtype
    assert torch.equal(residual[sample], h)
    torch.testing.assert_close(out[sample], rms_norm_reference(h, w), **TOLERANCES[DTYPE])
    want_inv = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(inv_rms[sample], want_inv, atol=1e-5, rtol=1e-3)
