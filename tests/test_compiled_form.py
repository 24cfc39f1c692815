"""What ``torch.compile`` and ``torch.export`` get from opguide's functions.

By default (``compiled="kernel"``) a traced call of every public function of
the registry's operators gives the tracer opguide's operator itself (its fake
kernel, its autograd), so an exported program holds ``opguide::<op>``; with
``compiled="native"`` the tracer gets the plain-PyTorch reference, which
Inductor compiles with the code around it. Either way the compiled results and
gradients are the eager ones, and eager calls run the kernels. The graphs are
recorded with AOTAutograd and no code generation.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.utils._python_dispatch import TorchDispatchMode

import opguide
from opguide.backends import triton_ready
from opguide.registry import OPERATORS

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


# None: the argument left out, which must mean "kernel".
COMPILED = [None, "kernel", "native"]


def _compiled_kwargs(compiled: str | None) -> dict:
    return {} if compiled is None else {"compiled": compiled}


@pytest.mark.parametrize("compiled", COMPILED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_rms_norm_graph_and_grads(backend, compiled):
    device = _device(backend)
    gen = torch.Generator().manual_seed(0)
    x0, w0 = torch.randn(3, 5, 32, generator=gen), torch.rand(32, generator=gen) + 0.5
    probe = torch.randn(3, 5, 32, generator=gen)
    x0, w0, probe = x0.to(device), w0.to(device), probe.to(device)

    def loss(x, w):
        y = opguide.rms_norm(x, w, backend=backend, **_compiled_kwargs(compiled))
        return (y * probe).sum()

    fn, seen = compile_and_record(loss)
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    fn(x, w).backward()
    ex, ew = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    loss(ex, ew).backward()
    torch.testing.assert_close((x.grad, w.grad), (ex.grad, ew.grad), **TOL)
    if compiled == "native":
        assert opguide_ops(seen) == [], seen
    else:  # "kernel", the default
        suffix = "_triton" if backend == "triton" else ""
        assert f"opguide.rms_norm_forward{suffix}.default" in seen
        assert f"opguide.rms_norm_backward{suffix}.default" in seen


@pytest.mark.parametrize("compiled", COMPILED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_add_rms_norm_graph_and_residual(backend, compiled):
    device = _device(backend)
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 32, generator=gen), torch.randn(32, generator=gen)
    residual = torch.randn(4, 32, generator=gen)
    x, w, residual = x.to(device), w.to(device), residual.to(device)

    def step(x, residual, w):
        out, inv_rms = opguide.fused_add_rms_norm_(
            x, residual, w, backend=backend, **_compiled_kwargs(compiled)
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
    else:  # "kernel", the default
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


def default_call(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A module calling operator ``name``'s public function with its default
    arguments, and inputs for it: ``default_call()`` of ``tests/test_<name>.py``."""
    own = getattr(importlib.import_module(f"test_{name}"), "default_call", None)
    assert own is not None, f"tests/test_{name}.py defines no default_call()"
    return own()


def _called(program: torch.export.ExportedProgram) -> list:
    return [node.target for node in program.graph.nodes if node.op == "call_function"]


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
@pytest.mark.parametrize("op", OPERATORS, ids=lambda op: op.name)
def test_export_with_default_arguments_records_the_operator(op, strict):
    # the compiled operator the public function calls: opguide::rms_norm, say
    wanted = getattr(torch.ops.opguide, op.ops[0]).default
    module, args = default_call(op.name)
    program = torch.export.export(module, tuple(a.clone() for a in args), strict=strict)
    assert wanted in _called(program), _called(program)
    # the program runs the operator: its results (and any input it writes) are the eager ones
    exported, eager = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(program.module()(*exported), module(*eager))
    torch.testing.assert_close(exported, eager)


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_export_takes_the_form_compiled_names(strict):
    class Norm(torch.nn.Module):
        def __init__(self, compiled):
            super().__init__()
            self.compiled = compiled

        def forward(self, x, w):
            return opguide.rms_norm(x, w, **_compiled_kwargs(self.compiled))

    x, w = torch.randn(4, 32), torch.rand(32) + 0.5
    for compiled in COMPILED:
        ep = torch.export.export(Norm(compiled), (x, w), strict=strict)
        has_op = torch.ops.opguide.rms_norm.default in _called(ep)
        assert has_op == (compiled != "native"), (compiled, _called(ep))


def test_unknown_compiled_value_is_refused():
    x, w = torch.randn(2, 16), torch.randn(16)
    with pytest.raises(ValueError, match="rms_norm: compiled must be 'kernel' or 'native'"):
        torch.compile(lambda x, w: opguide.rms_norm(x, w, compiled="inductor"))(x, w)
    with pytest.raises(ValueError, match="fused_add_rms_norm_: compiled must be 'kernel' or 'nat"):
        opguide.fused_add_rms_norm_(x, x.clone(), w, compiled="yes")
