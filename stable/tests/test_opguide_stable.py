"""Tests of the stable-ABI library, runnable under any torch from 2.11 on.

They import only ``opguide_stable`` and torch, so they run where the library
was not built (another torch, another machine) against the wheel alone.
"""

from __future__ import annotations

import opguide_stable
import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
}


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xa = x.to(acc)
    inv_rms = torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + eps)
    return (xa * inv_rms * weight.to(acc)).to(x.dtype)


def has_kernel(device: str) -> bool:
    key = "CUDA" if device == "cuda" else "CPU"
    return torch._C._dispatch_has_kernel_for_dispatch_key("opguide_stable::rms_norm", key)


@pytest.fixture(params=DEVICES)
def device(request):
    if not has_kernel(request.param):
        pytest.skip(f"this build of opguide_stable has no {request.param} kernel")
    return request.param


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 8), (3, 5, 257), (1, 4096), (0, 16)], ids=str)
def test_matches_reference(device, dtype, shape):
    torch.manual_seed(0)
    x = torch.randn(shape, device=device, dtype=dtype)
    w = torch.randn(shape[-1], device=device, dtype=dtype)
    y = opguide_stable.rms_norm(x, w, 1e-6)
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    torch.testing.assert_close(y, reference(x, w, 1e-6), **TOLERANCES[dtype])


def test_strided_input(device):
    x = torch.randn(16, 64, device=device)[:, ::2]
    w = torch.randn(32, device=device)
    torch.testing.assert_close(opguide_stable.rms_norm(x, w), reference(x, w, 1e-6))


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "dtype", "message"),
    [
        ((4, 8), (7,), torch.float32, "weight must have shape"),
        ((4, 8), (8,), torch.int32, "float32, float64, float16 or bfloat16"),
    ],
)
def test_bad_arguments_raise_with_a_message(device, x_shape, w_shape, dtype, message):
    x = torch.ones(x_shape, device=device).to(dtype)
    w = torch.ones(w_shape, device=device).to(dtype)
    with pytest.raises(RuntimeError, match=message):
        opguide_stable.rms_norm(x, w)


def test_opcheck(device):
    x = torch.randn(8, 32, device=device)
    w = torch.randn(32, device=device)
    torch.library.opcheck(torch.ops.opguide_stable.rms_norm.default, (x, w, 1e-6))


def test_torch_compile(device):
    x = torch.randn(8, 32, device=device)
    w = torch.randn(32, device=device)
    compiled = torch.compile(opguide_stable.rms_norm, fullgraph=True)
    torch.testing.assert_close(compiled(x, w), reference(x, w, 1e-6))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_gpu_while_current_is_first():
    if not has_kernel("cuda"):
        pytest.skip("this build of opguide_stable has no cuda kernel")
    torch.cuda.set_device(0)
    x = torch.randn(8, 300, device="cuda:1")
    w = torch.randn(300, device="cuda:1")
    y = opguide_stable.rms_norm(x, w)
    assert y.device == x.device
    torch.testing.assert_close(y, reference(x, w, 1e-6))
