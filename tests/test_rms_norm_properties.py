"""Property-based tests of ``opguide.rms_norm``: random shapes and strides against the reference.

Hypothesis draws the batch shape (including empty dimensions), the row
length, a stride on the last dimension, a transpose of the batch dimensions
and ``eps``; every draw must match the reference, forward and backward. The
example count is bounded and the search is derandomized, so a run takes a few
seconds and fails the same way every time.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import opguide
from opguide import rms_norm_backward_reference, rms_norm_reference
from opguide.testing import TOLERANCES

PROPERTY_SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def strided_inputs(draw):
    """Draws ``(x, weight, eps)``; ``x`` and ``weight`` are often non-contiguous views."""
    batch = draw(st.lists(st.integers(0, 5), min_size=0, max_size=2))
    n = draw(st.integers(1, 70))
    step = draw(st.integers(1, 3))  # stride of the last dimension
    transpose = len(batch) == 2 and draw(st.booleans())
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    eps = draw(st.sampled_from([1e-6, 1e-3, 0.5]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.randn(*batch, n * step, generator=gen, dtype=dtype)[..., ::step]
    if transpose:
        x = x.transpose(0, 1)
    weight = torch.randn(n * step, generator=gen, dtype=dtype)[::step]
    return x, weight, eps


@PROPERTY_SETTINGS
@given(strided_inputs())
def test_forward_matches_reference(inputs):
    x, weight, eps = inputs
    y = opguide.rms_norm(x, weight, eps)
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    torch.testing.assert_close(y, rms_norm_reference(x, weight, eps), **TOLERANCES[x.dtype])


@PROPERTY_SETTINGS
@given(strided_inputs(), st.integers(0, 2**31 - 1))
def test_backward_matches_reference(inputs, seed):
    x, weight, eps = inputs
    x = x.detach().requires_grad_(True)
    weight = weight.detach().requires_grad_(True)
    y = opguide.rms_norm(x, weight, eps)
    # A non-contiguous incoming gradient, as a transposing consumer would give.
    gen = torch.Generator().manual_seed(seed)
    grad_y = torch.randn(tuple(reversed(x.shape)), generator=gen, dtype=x.dtype).permute(
        *reversed(range(x.dim()))
    )
    y.backward(grad_y)
    grad_x, grad_weight = rms_norm_backward_reference(grad_y, x, weight, eps)
    tol = TOLERANCES[x.dtype]
    scale = max(1.0, grad_weight.abs().max().item() if grad_weight.numel() else 0.0)
    torch.testing.assert_close(x.grad, grad_x, **tol)
    torch.testing.assert_close(weight.grad, grad_weight, atol=tol["atol"] * scale, rtol=tol["rtol"])
