"""The operator across PyTorch: vmap, autocast, AOTInductor packages, CUDA graphs.

``examples_src/16_across_pytorch.py`` shows each of these; the tests pin them
down on every device the machine has (``cuda`` tests skip without a GPU).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys

import pytest
import torch

import opguide
from opguide import _library
from opguide.registry import OPERATORS

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def test_vmap_shared_weight_matches_a_loop():
    x, w = torch.randn(5, 3, 32), torch.rand(32) + 0.5
    expected = torch.stack([opguide.rms_norm(x[i], w) for i in range(5)])
    torch.testing.assert_close(torch.vmap(lambda a: opguide.rms_norm(a, w))(x), expected)
    # the batch dimension need not be the first one
    got = torch.vmap(lambda a: opguide.rms_norm(a, w), in_dims=1)(x.transpose(0, 1))
    torch.testing.assert_close(got, expected)


def test_vmap_weight_per_example_matches_a_loop():
    x, w = torch.randn(4, 6, 16), torch.rand(4, 16) + 0.5
    expected = torch.stack([opguide.rms_norm(x[i], w[i]) for i in range(4)])
    torch.testing.assert_close(torch.vmap(opguide.rms_norm)(x, w), expected)
    # x shared, weight batched
    expected = torch.stack([opguide.rms_norm(x[0], w[i]) for i in range(4)])
    torch.testing.assert_close(torch.vmap(opguide.rms_norm, in_dims=(None, 0))(x[0], w), expected)


def test_vmap_of_the_training_ops_matches_a_loop():
    x, w, grad_y = torch.randn(3, 5, 16), torch.rand(16) + 0.5, torch.randn(3, 5, 16)
    forward = torch.ops.opguide.rms_norm_forward.default
    backward = torch.ops.opguide.rms_norm_backward.default
    y, inv_rms = torch.vmap(forward, in_dims=(0, None, None))(x, w, 1e-6)
    for i in range(3):
        y_i, inv_i = forward(x[i], w, 1e-6)
        torch.testing.assert_close(y[i], y_i)
        torch.testing.assert_close(inv_rms[i], inv_i)
    grad_x, grad_weight = torch.vmap(backward, in_dims=(0, 0, None, 0))(grad_y, x, w, inv_rms)
    for i in range(3):
        gx_i, grad_weight_i = backward(grad_y[i], x[i], w, inv_rms[i])
        torch.testing.assert_close(grad_x[i], gx_i)
        torch.testing.assert_close(grad_weight[i], grad_weight_i)  # one weight gradient per example


def test_backward_through_vmap_matches_a_loop():
    x, w = torch.randn(4, 3, 16), (torch.rand(16) + 0.5).requires_grad_()
    torch.vmap(lambda a: opguide.rms_norm(a, w))(x).square().sum().backward()
    via_vmap, w.grad = w.grad.clone(), None
    sum(opguide.rms_norm(x[i], w).square().sum() for i in range(4)).backward()
    torch.testing.assert_close(via_vmap, w.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_autocast_runs_the_norm_in_float32(device, x_dtype):
    x = torch.randn(4, 32, device=device, dtype=x_dtype)
    w = torch.rand(32, device=device) + 0.5  # float32, as autocast leaves parameters
    with torch.autocast(device, dtype=torch.bfloat16):
        y = opguide.rms_norm(x, w)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, opguide.rms_norm_reference(x.float(), w))
    # outside autocast the mixed pair is refused, with the reason
    if x_dtype != torch.float32:
        with pytest.raises(TypeError, match="weight must have the dtype of x"):
            opguide.rms_norm(x, w)


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_training_path_and_gradients(device):
    x = torch.randn(4, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.rand(32, device=device) + 0.5).requires_grad_()
    with torch.autocast(device, dtype=torch.bfloat16):
        y = opguide.rms_norm(x, w)
    assert y.dtype == torch.float32
    y.sum().backward()
    assert x.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
def test_fused_op_under_autocast_keeps_its_dtypes(device):
    # No autocast rule for the op that mutates residual: a cast would update a copy.
    x = torch.randn(4, 32, device=device, dtype=torch.bfloat16)
    residual = torch.randn(4, 32, device=device, dtype=torch.bfloat16)
    w = torch.rand(32, device=device, dtype=torch.bfloat16) + 0.5
    expected_res = residual + x
    with torch.autocast(device, dtype=torch.float16):
        out, _ = opguide.fused_add_rms_norm_(x, residual, w)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(residual, expected_res)


RUNNER = """
import sys, torch
torch.ops.load_library(sys.argv[1])
runner = torch._inductor.aoti_load_package(sys.argv[2])
io = torch.load(sys.argv[3])
got = runner(*io["args"])
assert len(got) == len(io["expected"]), (len(got), len(io["expected"]))
for g, e in zip(got, io["expected"]):
    torch.testing.assert_close(g, e)
assert not [m for m in sys.modules if m.split(".")[0] == "opguide"], "opguide was imported"
print("ok")
"""


class _Block(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.proj = torch.nn.Linear(n, n)
        self.w1 = torch.nn.Parameter(torch.rand(n) + 0.5)
        self.w2 = torch.nn.Parameter(torch.rand(n) + 0.5)

    def forward(self, x, residual):
        h = opguide.rms_norm(x, self.w1)
        residual = residual.clone()
        out, _ = opguide.fused_add_rms_norm_(self.proj(h), residual, self.w2)
        return out, residual


class _EveryOperator(torch.nn.Module):
    """Every operator of the registry, each called with its default arguments:
    the modules of ``default_call()`` in each one's ``tests/test_<name>.py``."""

    def __init__(self):
        super().__init__()
        calls = [importlib.import_module(f"test_{op.name}").default_call() for op in OPERATORS]
        self.calls = torch.nn.ModuleList(module for module, _ in calls)
        self.arity = [len(args) for _, args in calls]
        self.args = tuple(arg for _, args in calls for arg in args)

    def forward(self, *args):
        outs, start = [], 0
        for call, n in zip(self.calls, self.arity, strict=True):
            out = call(*args[start : start + n])
            outs.extend(out if isinstance(out, tuple) else (out,))
            start += n
        return tuple(outs)


OLD_TORCH = tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13)


# AOTInductor compiles the package's C++ with the compiler that Inductor
# calls on this platform (its config.cpp.cxx: $CXX, else g++, clang++ on macOS).
CXX = os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")
needs_cxx = pytest.mark.skipif(
    shutil.which(CXX) is None, reason=f"AOTInductor needs a C++ compiler; {CXX} is not on PATH"
)


@needs_cxx
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.xfail(OLD_TORCH, reason="the fresh process crashes (exit -11) with torch 2.11 (H100)")
def test_aoti_package_runs_without_opguide_python(device, tmp_path):
    model = _EveryOperator().eval()
    args = tuple(arg.to(device) for arg in model.args)
    ep = torch.export.export(model, tuple(arg.clone() for arg in args))
    called = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    # the compiled operator that each registry operator's public function calls
    wanted = {getattr(torch.ops.opguide, op.ops[0]).default for op in OPERATORS}
    assert wanted <= called, called
    pt2 = tmp_path / "block.pt2"
    torch._inductor.aoti_compile_and_package(ep, package_path=str(pt2))
    io = tmp_path / "io.pt"
    # the package gets the inputs that the eager call got (an operator may write one)
    torch.save({"args": args, "expected": model(*[arg.clone() for arg in args])}, io)
    run = subprocess.run(
        [sys.executable, "-c", RUNNER, _library.library_path(), str(pt2), str(io)],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"


@pytest.mark.cuda
def test_cuda_graph_capture_and_replay():
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(1024, device="cuda", dtype=torch.bfloat16) + 0.5
    residual = torch.randn_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        opguide.rms_norm(x, w)
        opguide.fused_add_rms_norm_(x, residual.clone(), w)
    torch.cuda.current_stream().wait_stream(side)
    res_static = residual.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = opguide.rms_norm(x, w)
        out, _ = opguide.fused_add_rms_norm_(y, res_static, w)
    x.copy_(torch.randn_like(x))
    res_static.copy_(residual)
    graph.replay()
    y_ref = opguide.rms_norm(x, w)
    res_ref = residual.clone()
    out_ref, _ = opguide.fused_add_rms_norm_(y_ref, res_ref, w)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(res_static, res_ref)


@pytest.mark.cuda
def test_reduce_overhead_compiles_into_cuda_graphs():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _Block(512).cuda().requires_grad_(False)
    x, residual = torch.randn(16, 512, device="cuda"), torch.randn(16, 512, device="cuda")
    step = torch.compile(model, mode="reduce-overhead")
    for _ in range(3):
        got = step(x, residual)
    expected = model(x, residual)
    torch.testing.assert_close(got[0], expected[0], atol=1e-4, rtol=1e-4)
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])
