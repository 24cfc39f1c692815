"""Every operator and backend on a GPU that is not the current one.

A user's second pipeline stage, a data-parallel replica that never called
``torch.cuda.set_device``, or a model moved with ``.to("cuda:1")`` calls the
operators on ``cuda:1`` while ``cuda:0`` is current. Each kernel must launch
on its inputs' GPU and return its outputs there. Skipped with fewer than two
GPUs.
"""

from __future__ import annotations

import pytest
import torch

import opguide
from opguide import fused_add_rms_norm_reference, rms_norm_reference
from opguide.backends import triton_ready

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"needs two GPUs, this machine has {torch.cuda.device_count()}",
)
BACKENDS = ["cpp"] + (["triton"] if triton_ready() else [])
DTYPES = [torch.float32, torch.bfloat16]
TOLERANCE = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.bfloat16: dict(atol=6e-2, rtol=6e-2),
}
OTHER = torch.device("cuda", 1)


@pytest.fixture(autouse=True)
def first_gpu_current():
    """cuda:0 is the current GPU during each test, whatever the tests before did."""
    previous = torch.cuda.current_device()
    torch.cuda.set_device(0)
    yield
    torch.cuda.set_device(previous)


def _inputs(dtype, shape=(33, 1000)):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(OTHER, dtype)
    weight = (torch.rand(shape[-1], generator=gen) + 0.5).to(OTHER, dtype)
    return x, weight


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_and_backward_on_the_other_gpu(backend, dtype):
    x, weight = _inputs(dtype)
    grad_y = torch.randn_like(x)
    xr, wr = x.clone().requires_grad_(), weight.clone().requires_grad_()
    y = opguide.rms_norm(xr, wr, 1e-6, backend=backend)
    y.backward(grad_y)
    assert torch.cuda.current_device() == 0
    assert y.device == xr.grad.device == wr.grad.device == OTHER
    x32, w32 = x.float().requires_grad_(), weight.float().requires_grad_()
    expected = rms_norm_reference(x32, w32, 1e-6)
    expected.backward(grad_y.float())
    torch.testing.assert_close(y.float(), expected, **TOLERANCE[dtype])
    torch.testing.assert_close(xr.grad.float(), x32.grad, **TOLERANCE[dtype])
    torch.testing.assert_close(wr.grad.float(), w32.grad, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_forward_on_the_other_gpu(backend, dtype):
    x, weight = _inputs(dtype, (4, 40000))  # also the Triton long-row kernel
    y = opguide.rms_norm(x, weight, 1e-6, backend=backend)
    assert y.device == OTHER
    expected = rms_norm_reference(x.float(), weight.float(), 1e-6)
    torch.testing.assert_close(y.float(), expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_op_on_the_other_gpu(backend, dtype):
    x, weight = _inputs(dtype)
    residual = torch.randn_like(x)
    expected_out, _, expected_residual = fused_add_rms_norm_reference(x, residual, weight, 1e-6)
    out, inv_rms = opguide.fused_add_rms_norm_(x, residual, weight, backend=backend)
    assert out.device == inv_rms.device == residual.device == OTHER
    torch.testing.assert_close(out, expected_out, **TOLERANCE[dtype])
    torch.testing.assert_close(residual, expected_residual, **TOLERANCE[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_on_the_other_gpu(backend):
    x, weight = _inputs(torch.float32)
    grad_y = torch.randn_like(x)
    xr, wr = x.clone().requires_grad_(), weight.clone().requires_grad_()
    compiled = torch.compile(
        lambda a, b: opguide.rms_norm(a, b, 1e-6, backend=backend), fullgraph=True
    )
    y = compiled(xr, wr)
    y.backward(grad_y)
    assert y.device == xr.grad.device == OTHER
    x32, w32 = x.clone().requires_grad_(), weight.clone().requires_grad_()
    expected = rms_norm_reference(x32, w32, 1e-6)
    expected.backward(grad_y)
    torch.testing.assert_close(y, expected, **TOLERANCE[torch.float32])
    torch.testing.assert_close(wr.grad, w32.grad, **TOLERANCE[torch.float32])


@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_graph_captured_on_the_other_gpu(backend):
    x, weight = _inputs(torch.bfloat16)
    residual = torch.randn_like(x)
    with torch.cuda.device(OTHER):  # capture and replay on cuda:1's streams
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (and Triton's compilation) off the graph
            for _ in range(2):
                opguide.fused_add_rms_norm_(
                    opguide.rms_norm(x, weight, backend=backend), residual.clone(), weight,
                    backend=backend,
                )  # fmt: skip
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        static_residual = residual.clone()
        with torch.cuda.graph(graph):
            y = opguide.rms_norm(x, weight, backend=backend)
            out, _ = opguide.fused_add_rms_norm_(y, static_residual, weight, backend=backend)
        x.copy_(torch.randn_like(x))
        static_residual.copy_(residual)
        graph.replay()
        torch.cuda.synchronize(OTHER)
    y_ref = opguide.rms_norm(x, weight, backend=backend)
    residual_ref = residual.clone()
    out_ref, _ = opguide.fused_add_rms_norm_(y_ref, residual_ref, weight, backend=backend)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(static_residual, residual_ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_on_two_gpus_are_refused(backend):
    x, weight = _inputs(torch.float32)
    with pytest.raises(RuntimeError, match=r"weight must be on the device of x"):
        opguide.rms_norm(x, weight.to("cuda:0"), backend=backend)
    with pytest.raises(RuntimeError, match=r"residual must be on the device of x"):
        opguide.fused_add_rms_norm_(x, torch.randn_like(x).to("cuda:0"), weight, backend=backend)
