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


# -- the Triton forward compiled ahead of time (CUDA builds with triton at build time) --


def _compiled_for_this_gpu() -> bool:
    if not (opguide_stable.TRITON_AOT and torch.cuda.is_available()):
        return False
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" in opguide_stable.BUILD_INFO["triton_aot"]


needs_aot = pytest.mark.skipif(
    not _compiled_for_this_gpu(),
    reason="needs a GPU that this build compiled the Triton kernels for",
)


def test_triton_backend_needs_the_kernels_or_says_so():
    x = torch.randn(4, 8)
    w = torch.randn(8)
    with pytest.raises(ValueError, match="backend must be 'cpp' or 'triton'"):
        opguide_stable.rms_norm(x, w, backend="cuda")
    if not opguide_stable.TRITON_AOT:
        assert not opguide_stable.BUILD_INFO.get("triton_aot")
        with pytest.raises(RuntimeError, match="compiled the Triton kernels ahead of time"):
            opguide_stable.rms_norm(x, w, backend="triton")


SHAPES = [(4, 8), (3, 5, 257), (1, 4096), (2, 4104), (7, 16384), (0, 16), (5, 1)]


@needs_aot
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_triton_kernel_matches_reference(dtype, shape):
    torch.manual_seed(0)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(shape[-1], device="cuda", dtype=dtype)
    y = opguide_stable.rms_norm(x, w, 1e-6, backend="triton")
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    torch.testing.assert_close(y, reference(x, w, 1e-6), **TOLERANCES[dtype])


# The same shapes in a fresh process, whose stderr shows every fallback (C++
# warnings of an operator called through torch.ops go there, once per reason
# and process).
_NO_FALLBACK = """
import torch, opguide_stable
for shape in SHAPES:
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(shape, device="cuda", dtype=dtype)
        opguide_stable.rms_norm(x, torch.randn(shape[-1], device="cuda", dtype=dtype),
                                backend="triton")
torch.cuda.synchronize()
print("ok")
"""


@needs_aot
def test_every_length_up_to_16384_has_its_compiled_kernel():
    import subprocess
    import sys

    code = f"SHAPES = {SHAPES!r}\n" + _NO_FALLBACK
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.split() == ["ok"], run.stderr[-3000:]
    assert "rms_norm_triton_aot" not in run.stderr, run.stderr[-3000:]


@needs_aot
def test_triton_kernel_runs_on_the_current_stream():
    # Captured into a CUDA graph on a side stream: a launch on any other stream
    # than the capturing one fails the capture.
    x = torch.randn(64, 1024, device="cuda")
    w = torch.randn(1024, device="cuda")
    opguide_stable.rms_norm(x, w, backend="triton")  # loads the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = opguide_stable.rms_norm(x, w, backend="triton")
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, reference(x, w, 1e-6))


@needs_aot
def test_triton_opcheck():
    x = torch.randn(8, 256, device="cuda")
    w = torch.randn(256, device="cuda")
    torch.library.opcheck(torch.ops.opguide_stable.rms_norm_triton_aot.default, (x, w, 1e-6))


# Each reason is told once per process: one fresh process sees each once. The
# warnings are C++ warnings of an operator called through torch.ops: torch
# prints them on stderr.
_FALLBACKS = """
import torch, opguide_stable

def ref(x, w):
    xa = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    inv_rms = torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (xa * inv_rms * w.to(xa.dtype)).to(x.dtype)

cases = {
    "long": torch.randn(3, 20000, device="cuda"),
    "dtype": torch.randn(3, 64, device="cuda", dtype=torch.float64),
    "aligned": torch.randn(3 * 64 + 1, device="cuda")[1:].view(3, 64),
    "cpu": torch.randn(3, 64),
}
for kind, x in cases.items():
    w = torch.randn(x.shape[-1], device=x.device, dtype=x.dtype)
    for _ in range(2):
        torch.testing.assert_close(opguide_stable.rms_norm(x, w, backend="triton"), ref(x, w))
print("ok")
"""


@pytest.mark.skipif(
    not (opguide_stable.TRITON_AOT and torch.cuda.is_available()),
    reason="needs a GPU and a build with the Triton kernels compiled ahead of time",
)
def test_calls_no_kernel_fits_run_the_librarys_kernel_and_say_why():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _FALLBACKS], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.split() == ["ok"], run.stderr[-3000:]
    said = [line for line in run.stderr.splitlines() if "rms_norm_triton_aot" in line]
    reasons = {
        "long": "longer than the 16384",
        "dtype": "x is float64",
        "aligned": "16-byte boundary",
        "cpu": "x is on cpu",
    }
    # Two calls each, one line each: once per reason.
    for kind, words in reasons.items():
        assert sum(words in line for line in said) == 1, (kind, said)
    assert len(said) == len(reasons), said
    assert sum("the CPU kernel runs" in line for line in said) == 1
    assert sum("the CUDA kernel runs" in line for line in said) == 3
