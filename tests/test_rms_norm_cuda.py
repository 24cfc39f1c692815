"""Tests of ``opguide.rms_norm`` on CUDA: every item needs a GPU (marker ``cuda``)."""

from __future__ import annotations

import functools

import pytest
import torch

import opguide
from opguide import rms_norm_reference
from opguide.testing import (
    GRAD_TOLERANCES,
    TOLERANCES,
    assert_grads_close,
    make_inputs,
    reference_grads,
)

pytestmark = pytest.mark.cuda

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Row lengths 1..16384: tiny, odd (scalar path), multiples of the 16-byte
# vector, around the register-cache limits, and the sizes of real models.
NS = [
    1,
    2,
    3,
    7,
    8,
    31,
    33,
    127,
    128,
    255,
    1000,
    1024,
    2047,
    2048,
    4095,
    4096,
    5120,
    8191,
    8192,
    16383,
    16384,
]
MS = [1, 3, 257]
make_cuda_inputs = functools.partial(make_inputs, device="cuda")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize("n", NS)
def test_matches_reference(n, m, dtype):
    x, w = make_cuda_inputs((m, n), dtype)
    y = opguide.rms_norm(x, w, 1e-6)
    assert y.device == x.device and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6), **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_many_rows(dtype):
    # A grid larger than any block count limit of interest.
    x, w = make_cuda_inputs((65537, 96), dtype)
    torch.testing.assert_close(
        opguide.rms_norm(x, w), rms_norm_reference(x, w), **TOLERANCES[dtype]
    )


def test_float64():
    x, w = make_cuda_inputs((17, 300), torch.float64)
    torch.testing.assert_close(
        opguide.rms_norm(x, w), rms_norm_reference(x, w), **TOLERANCES[torch.float64]
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_cpu_kernel(dtype):
    x, w = make_cuda_inputs((64, 4096), dtype)
    torch.testing.assert_close(
        opguide.rms_norm(x, w).cpu(), opguide.rms_norm(x.cpu(), w.cpu()), **TOLERANCES[dtype]
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous(dtype):
    tol = TOLERANCES[dtype]
    x, w = make_cuda_inputs((64, 2 * 1024), dtype)
    sliced = x[:, :1024]  # strided rows: the kernel reads them in place
    torch.testing.assert_close(
        opguide.rms_norm(sliced, w[:1024]), rms_norm_reference(sliced, w[:1024]), **tol
    )
    xt = x.reshape(8, 8, 2048).transpose(0, 1)  # 3-d, not dense: copied once
    torch.testing.assert_close(opguide.rms_norm(xt, w), rms_norm_reference(xt, w), **tol)
    xs = x[:, ::2]  # strided last dimension
    torch.testing.assert_close(opguide.rms_norm(xs, w[::2]), rms_norm_reference(xs, w[::2]), **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned_pointers(dtype):
    # A view that starts one element in is not 16-byte aligned: scalar path.
    x, w = make_cuda_inputs((9, 4097), dtype)
    xv, wv = x[:, 1:], w[1:]
    torch.testing.assert_close(
        opguide.rms_norm(xv, wv), rms_norm_reference(xv, wv), **TOLERANCES[dtype]
    )


def test_empty():
    for shape in [(0, 64), (4, 0)]:
        x, w = make_cuda_inputs(shape, torch.float32)
        assert opguide.rms_norm(x, w).shape == shape


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(dtype):
    x, w = make_cuda_inputs((5, 264), dtype)
    torch.library.opcheck(torch.ops.opguide.rms_norm.default, (x, w, 1e-6))


def test_compile_fullgraph():
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w: opguide.rms_norm(x, w) + 1.0, fullgraph=True)
    x, w = make_cuda_inputs((32, 4096), torch.bfloat16)
    torch.testing.assert_close(
        fn(x, w), rms_norm_reference(x, w) + 1.0, **TOLERANCES[torch.bfloat16]
    )


def test_cuda_graph_on_side_stream():
    # Capturing on a side stream only works if the kernel is launched on the
    # *current* stream; a kernel hard-wired to the default stream would either
    # fail capture or run outside the graph, leaving `out` stale on replay.
    x, w = make_cuda_inputs((128, 4096), torch.bfloat16)
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm up on the side stream, as capture requires
            opguide.rms_norm(static_x, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = opguide.rms_norm(static_x, w)
    for seed in range(3):
        new_x, _ = make_cuda_inputs((128, 4096), torch.bfloat16, seed=seed + 10)
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, rms_norm_reference(new_x, w), **TOLERANCES[torch.bfloat16])


def test_side_stream_ordering():
    # Work queued on a side stream must see the side stream's earlier writes.
    x, w = make_cuda_inputs((4096, 4096), torch.float16)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        z = x * 2
        y = opguide.rms_norm(z, w)
    side.synchronize()
    torch.testing.assert_close(y, rms_norm_reference(x * 2, w), **TOLERANCES[torch.float16])


def test_device_mismatch_errors():
    x = torch.randn(4, 8, device="cuda")
    w_cpu = torch.randn(8)
    with pytest.raises(
        RuntimeError, match=r"weight must be on the device of x \(cuda:0\), got cpu"
    ):
        opguide.rms_norm(x, w_cpu)
    with pytest.raises(
        RuntimeError, match=r"weight must be on the device of x \(cpu\), got cuda:0"
    ):
        opguide.rms_norm(x.cpu(), w_cpu.cuda())
    # Called directly, the C++ checks give the same message.
    with pytest.raises(RuntimeError, match=r"weight must be on the device of x"):
        torch.ops.opguide.rms_norm(x, w_cpu, 1e-6)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (device guard test)")
def test_second_gpu_while_current_is_first():
    torch.cuda.set_device(0)
    x = torch.randn(16, 512, device="cuda:1")
    w = torch.randn(512, device="cuda:1")
    y = opguide.rms_norm(x, w)
    assert y.device == x.device
    torch.testing.assert_close(y, rms_norm_reference(x, w))


# --- training: rms_norm_forward and rms_norm_backward on CUDA -------------------


def _grads(fn, x, w, grad_y):
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    fn(x, w).backward(grad_y)
    return x.grad, w.grad


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
# (rows, N): the kernel's range, odd rows, a 3-d input, more rows than the
# grid has row slots (each slot then cycles through its pipeline stages), and
# rows the vector kernels leave to the chunked kernels (odd N) or to
# clusters (N past one block's budget).
@pytest.mark.parametrize(
    "shape",
    [(1, 8), (257, 1024), (64, 4096), (3, 5, 8192), (3000, 1024), (1500, 4096), (700, 8192),
     (33, 4097), (4, 16384)],
    ids=str,
)  # fmt: skip
def test_backward_matches_reference(shape, dtype):
    x, w = make_cuda_inputs(shape, dtype)
    grad_y = torch.randn_like(x)
    grad_x, grad_weight = _grads(lambda a, b: opguide.rms_norm(a, b), x, w, grad_y)
    # The reference's gradients by autograd in float32; grad_weight's
    # tolerance grows with the rows it sums over.
    assert_grads_close((grad_x, grad_weight), reference_grads(x, w, grad_y))


# (300, 131072): the cluster kernels, whose partial sums must add up in one order too.
@pytest.mark.parametrize("shape", [(4096, 4096), (300, 131072)], ids=str)
def test_backward_is_deterministic(shape):
    x, w = make_cuda_inputs(shape, torch.bfloat16)
    grad_y = torch.randn_like(x)
    first = _grads(lambda a, b: opguide.rms_norm(a, b), x, w, grad_y)
    second = _grads(lambda a, b: opguide.rms_norm(a, b), x, w, grad_y)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def test_inv_rms_matches_cpu():
    x, w = make_cuda_inputs((37, 1024), torch.float16)
    _, inv_rms = torch.ops.opguide.rms_norm_forward(x, w, 1e-6)
    _, inv_rms_cpu = torch.ops.opguide.rms_norm_forward(x.cpu(), w.cpu(), 1e-6)
    assert inv_rms.dtype == torch.float32 and inv_rms.shape == (37,)
    torch.testing.assert_close(inv_rms.cpu(), inv_rms_cpu)


def test_gradcheck_float64():
    x, w = make_cuda_inputs((6, 32), torch.float64)
    x.requires_grad_()
    w.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: opguide.rms_norm(a, b, 1e-5), (x, w))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_training_ops(dtype):
    x, w = make_cuda_inputs((5, 264), dtype)
    torch.library.opcheck(torch.ops.opguide.rms_norm_forward.default, (x, w, 1e-6))
    _, inv_rms = torch.ops.opguide.rms_norm_forward(x, w, 1e-6)
    grad_y = torch.randn_like(x)
    torch.library.opcheck(torch.ops.opguide.rms_norm_backward.default, (grad_y, x, w, inv_rms))


def test_compile_forward_and_backward():
    torch._dynamo.reset()
    x, w = make_cuda_inputs((64, 2048), torch.bfloat16)
    fn = torch.compile(lambda a, b: opguide.rms_norm(a, b) * 2, fullgraph=True)
    grad_y = torch.randn_like(x)
    grad_x, grad_weight = _grads(fn, x, w, grad_y)
    rx, rw = _grads(lambda a, b: opguide.rms_norm(a, b) * 2, x, w, grad_y)
    torch.testing.assert_close(grad_x, rx)
    torch.testing.assert_close(grad_weight, rw)


# Long rows (csrc/rms_norm/rms_norm_forward.cuh, rms_norm_backward_long_rows.cuh): past
# one block's registers the forward
# and backward split a row over a thread-block cluster (sm_90+), or take the
# chunked kernels (older GPUs, odd N, misaligned rows). Shapes: every cluster
# size (2 to 16 blocks for bfloat16), more rows than clusters fit on the GPU
# at once, and odd N (the chunked kernels on every GPU).
LONG_SHAPES = [(3, 32768), (5, 65536), (300, 65536), (7, 131072), (2, 262144), (5, 100003),
               (3, 40000), (600, 16384)]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", LONG_SHAPES, ids=str)
def test_long_rows_forward_and_backward(shape, dtype):
    x, w = make_cuda_inputs(shape, dtype)
    grad_y = torch.randn_like(x)
    y = opguide.rms_norm(x, w)
    ref = rms_norm_reference(x.float(), w.float()).to(dtype)
    torch.testing.assert_close(y, ref, **TOLERANCES[dtype])
    grad_x, grad_weight = _grads(lambda a, b: opguide.rms_norm(a, b), x, w, grad_y)
    assert_grads_close((grad_x, grad_weight), reference_grads(x, w, grad_y))
    # inv_rms of the training op, per row.
    _, inv_rms = torch.ops.opguide.rms_norm_forward.default(x, w, 1e-6)
    expected = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(inv_rms, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_long_rows_strided_forward(dtype):
    # The first 32768 columns of rows 40000 wide: the cluster forward reads
    # rows at their stride (float64 takes the one-block kernel).
    base, _ = make_cuda_inputs((3, 40000), dtype)
    x = base[:, :32768]
    w = torch.randn(32768, device="cuda", dtype=dtype)
    y, inv_rms = torch.ops.opguide.rms_norm_forward.default(x, w, 1e-6)
    ref = rms_norm_reference(x.double(), w.double()).to(dtype)
    torch.testing.assert_close(y, ref, **TOLERANCES[dtype])
    expected = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6).to(inv_rms.dtype)
    torch.testing.assert_close(inv_rms, expected, atol=1e-5, rtol=1e-4)


# Rows that are not whole 16-byte vectors, or that start off a 16-byte
# boundary, take narrower accesses (step 11, "Odd row lengths"): 8 bytes
# (2052 and 8200 16-bit elements), 4 bytes (2050), one element (2049), and
# past what the narrow backward holds in registers the chunked kernels
# (12300, 4097). `offset` moves every row 1 or 2 elements off the boundary.
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [2052, 2050, 2049, 8200, 12300, 4097])
@pytest.mark.parametrize("offset", [0, 1, 2])
def test_narrow_accesses(n, offset, dtype):
    m = 67
    torch.manual_seed(n + offset)
    x = torch.randn(m * n + offset, device="cuda", dtype=dtype)[offset:].view(m, n)
    w = torch.randn(n, device="cuda", dtype=dtype)
    ref = rms_norm_reference(x.double(), w.double()).to(dtype)
    torch.testing.assert_close(opguide.rms_norm(x, w), ref, **TOLERANCES[dtype])
    grad_y = torch.randn_like(x)
    grad_x, grad_weight = _grads(lambda a, b: opguide.rms_norm(a, b), x, w, grad_y)
    assert_grads_close((grad_x, grad_weight), reference_grads(x, w, grad_y))


def test_long_rows_misaligned_backward():
    # A row that starts 2 bytes past a 16-byte boundary: the chunked kernels.
    base, w = make_cuda_inputs((4, 65537), torch.bfloat16)
    x = base[:, 1:]
    grad_y = torch.randn_like(x)
    grad_x, grad_weight = _grads(lambda a, b: opguide.rms_norm(a, b), x, w[1:].contiguous(), grad_y)
    rx, rw = _grads(
        lambda a, b: rms_norm_reference(a.float(), b.float()).to(a.dtype),
        x, w[1:].contiguous(), grad_y,
    )  # fmt: skip
    torch.testing.assert_close(grad_x, rx, **GRAD_TOLERANCES[torch.bfloat16])
    torch.testing.assert_close(grad_weight.float(), rw.float(), atol=0.2, rtol=6e-2)


def test_long_rows_without_clusters():
    # OPGUIDE_CLUSTERS=0 (read once per process) sends long rows to the
    # chunked backward and the one-block forward: run in a fresh process.
    import subprocess
    import sys

    code = (
        "import torch, opguide\n"
        "from opguide import rms_norm_reference\n"
        "x = torch.randn(5, 131072, device='cuda', dtype=torch.bfloat16, requires_grad=True)\n"
        "w = torch.randn(131072, device='cuda', dtype=torch.bfloat16, requires_grad=True)\n"
        "grad_y = torch.randn_like(x)\n"
        "opguide.rms_norm(x, w).backward(grad_y)\n"
        "xr = x.detach().float().requires_grad_(); wr = w.detach().float().requires_grad_()\n"
        "rms_norm_reference(xr, wr).backward(grad_y.float())\n"
        "torch.testing.assert_close(x.grad.float(), xr.grad, atol=6e-2, rtol=6e-2)\n"
        "torch.testing.assert_close(w.grad.float(), wr.grad, atol=0.2, rtol=6e-2)\n"
        "print('ok')\n"
    )
    env = {**__import__("os").environ, "OPGUIDE_CLUSTERS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
