"""What ``torch.compile`` gets from opguide's functions: the native form unless asked.

By default (``compiled="native"``) a traced call of :func:`opguide.rms_norm`
or :func:`opguide.fused_add_rms_norm_` gives the tracer the plain-PyTorch
reference, which Inductor compiles with the code around it; with
``compiled="kernel"`` the graph holds opguide's operator. Either way the
compiled results and gradients are the eager ones, and eager calls run the
kernels. The graphs are recorded with AOTAutograd and no code generation.
"""

from __future__ import annotations

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.utils._python_dispatch import TorchDispatchMode

import opguide
from opguide.backends import triton_ready

BACKENDS = ["cpp"] + (["triton"] if triton_ready() else [])
TOL = dict(atol=1e-5, rtol=1e-5)


def _device(backend: str) -> str:
    """Where the backend's kernels run here: the GPU for Triton without its interpreter."""
    if backend == "triton":
        from opguide.triton import INTERPRET

        if INTERPRET:
            return "cpu"
        if not torch.cuda.is_available():
            pytest.skip("no GPU, and Triton's interpreter is off (set TRITON_INTERPRET=1)")
        return "cuda"
    return "cpu"


def compile_and_record(fn):
    """``fn`` compiled with a backend that records the targets of its graphs."""
    seen: list[str] = []

    def record(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function":
                seen.append(str(node.target))
                if "auto_functionalized" in str(node.target):  # an operator that writes
                    seen.append(str(node.args[0]))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=record, bw_compiler=record)
    return torch.compile(fn, backend=backend, fullgraph=True), seen


def opguide_ops(seen: list[str]) -> list[str]:
    return [target for target in seen if "opguide" in target]


@pytest.mark.parametrize("compiled", ["native", "kernel"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_rms_norm_graph_and_grads(backend, compiled):
    device = _device(backend)
    gen = torch.Generator().manual_seed(0)
    x0, w0 = torch.randn(3, 5, 32, generator=gen), torch.rand(32, generator=gen) + 0.5
    probe = torch.randn(3, 5, 32, generator=gen)
    x0, w0, probe = x0.to(device), w0.to(device), probe.to(device)

    def loss(x, w):
        return (opguide.rms_norm(x, w, backend=backend, compiled=compiled) * probe).sum()

    fn, seen = compile_and_record(loss)
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    fn(x, w).backward()
    ex, ew = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    loss(ex, ew).backward()
    torch.testing.assert_close((x.grad, w.grad), (ex.grad, ew.grad), **TOL)
    if compiled == "native":
        assert opguide_ops(seen) == [], seen
    else:
        suffix = "_triton" if backend == "triton" else ""
        assert f"opguide.rms_norm_fwd{suffix}.default" in seen
        assert f"opguide.rms_norm_backward{suffix}.default" in seen


@pytest.mark.parametrize("compiled", ["native", "kernel"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_add_rms_norm_graph_and_residual(backend, compiled):
    device = _device(backend)
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 32, generator=gen), torch.randn(32, generator=gen)
    residual = torch.randn(4, 32, generator=gen)
    x, w, residual = x.to(device), w.to(device), residual.to(device)

    def step(x, residual, w):
        out, inv_rms = opguide.fused_add_rms_norm_(
            x, residual, w, backend=backend, compiled=compiled
        )
        return out * 2, inv_rms

    fn, seen = compile_and_record(step)
    r_compiled, r_eager = residual.clone(), residual.clone()
    got = fn(x, r_compiled, w)
    want = step(x, r_eager, w)
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(r_compiled, r_eager, **TOL)  # written in place both ways
    found = opguide_ops(seen)
    if compiled == "native":
        assert found == [], seen
    else:
        assert any("fused_add_rms_norm_" in target for target in found), seen


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("backend", BACKENDS)
def test_eager_calls_run_the_kernel_whatever_compiled_says(backend):
    device = _device(backend)
    x, w = torch.randn(2, 16, device=device), torch.randn(16, device=device)
    suffix = "_triton" if backend == "triton" else ""
    with _Recorder() as recorder:
        opguide.rms_norm(x, w, backend=backend, compiled="native")
    assert f"opguide.rms_norm{suffix}.default" in recorder.ops


@pytest.mark.parametrize("strict", [False, True])
def test_export_takes_the_form_compiled_names(strict):
    class Norm(torch.nn.Module):
        def __init__(self, compiled):
            super().__init__()
            self.compiled = compiled

        def forward(self, x, w):
            return opguide.rms_norm(x, w, compiled=self.compiled)

    x, w = torch.randn(4, 32), torch.rand(32) + 0.5
    for compiled in ("native", "kernel"):
        ep = torch.export.export(Norm(compiled), (x, w), strict=strict)
        called = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
        has_op = "opguide.rms_norm.default" in called
        assert has_op == (compiled == "kernel"), (compiled, called)


def test_unknown_compiled_value_is_refused():
    x, w = torch.randn(2, 16), torch.randn(16)
    with pytest.raises(ValueError, match="compiled must be 'native' or 'kernel'"):
        torch.compile(lambda x, w: opguide.rms_norm(x, w, compiled="inductor"))(x, w)
    with pytest.raises(ValueError, match="compiled must be 'native' or 'kernel'"):
        opguide.fused_add_rms_norm_(x, x.clone(), w, compiled="yes")
