"""first_op.rms_norm against a reference in plain PyTorch, and its registration.

Run from the project folder: ``python -m pytest -q``. The CUDA cases run where
a GPU is visible, and are skipped elsewhere.
"""

import first_op
import pytest
import torch

EPS = 1e-6
# A 16-bit output may round to the neighbouring number; float32 and float64
# outputs differ in their last bits with the order of the sums.
TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
    torch.bfloat16: dict(atol=1e-2, rtol=1e-2),
}
# Where a GPU is visible, the library must hold the CUDA kernel (setup.py).
NO_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
DEVICES = ["cpu", pytest.param("cuda", marks=NO_GPU)]


def reference(x, weight, eps):
    """The formula in plain PyTorch, summed in float32 (float64 for float64)."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.to(acc)
    return y.to(x.dtype)


SHAPES = [(1, 1), (3, 7), (2, 5, 33), (4, 4097), (0, 8)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(TOL), ids=lambda dtype: str(dtype)[6:])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "x".join(map(str, shape)))
def test_matches_reference(shape, dtype, device):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device)
    y = first_op.rms_norm(x, weight, EPS)
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y, reference(x, weight, EPS), **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_strided_input(device):
    x = torch.randn(64, 48, device=device)[::2, :40]  # rows 2 apart, not dense
    weight = torch.randn(80, device=device)[::2]
    y = first_op.rms_norm(x, weight, EPS)
    torch.testing.assert_close(y, reference(x, weight, EPS))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(dtype, device):
    # The schema, the fake kernel and the autograd registration against the kernel.
    for grad in (False, True):
        x = torch.randn(5, 33, dtype=dtype, device=device, requires_grad=grad)
        weight = torch.randn(33, dtype=dtype, device=device, requires_grad=grad)
        torch.library.opcheck(torch.ops.first_op.rms_norm.default, (x, weight, EPS))


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    # opcheck does not check gradients' values: gradcheck compares the formula
    # with finite differences, in float64.
    x = torch.randn(3, 9, dtype=torch.float64, device=device, requires_grad=True)
    weight = torch.randn(9, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(first_op.rms_norm, (x, weight, EPS))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    x = torch.randn(4, 64, device=device)
    weight = torch.randn(64, device=device)
    compiled = torch.compile(first_op.rms_norm, fullgraph=True)
    expected = first_op.rms_norm(x, weight, EPS)
    torch.testing.assert_close(compiled(x, weight, EPS), expected)


def test_export_records_the_operator():
    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(16))

        def forward(self, x):
            return first_op.rms_norm(x, self.weight, EPS)

    program = torch.export.export(Norm(), (torch.randn(2, 16),))
    targets = [str(node.target) for node in program.graph.nodes]
    assert "first_op.rms_norm.default" in targets, targets


@pytest.mark.parametrize(
    "x, weight, error, message",
    [
        (torch.ones(2, 4), torch.ones(4).double(), TypeError, "one dtype"),
        (torch.ones(2, 4).int(), torch.ones(4).int(), TypeError, "floating point"),
        (
            torch.ones(2, 4, dtype=torch.float8_e4m3fn),
            torch.ones(4, dtype=torch.float8_e4m3fn),
            TypeError,
            "bfloat16",
        ),
        (torch.ones(2, 4), torch.ones(5), ValueError, "shape"),
        (torch.ones(2, 4), torch.ones(2, 4), ValueError, "shape"),
    ],
)
def test_bad_inputs_raise(x, weight, error, message):
    with pytest.raises(error, match=message):
        first_op.rms_norm(x, weight, EPS)
