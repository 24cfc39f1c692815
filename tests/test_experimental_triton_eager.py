"""Tests of opguide.experimental.triton_eager: the opt-in direct launch of the Triton kernels.

The module uses private torch and Triton APIs; the first test fails, naming
each one, when this torch or Triton lacks it. The others pin the module's
behaviour: the same bits as the operators, and the operators for any call
that something traces, transforms or watches. They need a GPU, except the
ones on CPU.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import opguide
from opguide.testing import make_inputs

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="the Triton backend needs triton"
)
if importlib.util.find_spec("triton") is not None:
    from opguide.experimental import triton_eager
    from opguide.triton import INTERPRET, launch
else:
    INTERPRET = True

compiled_triton = pytest.mark.skipif(
    INTERPRET, reason="TRITON_INTERPRET=1 or no GPU: the kernels are not compiled for a GPU"
)


class OpRecorder(TorchDispatchMode):
    """Records the operators that reach the dispatcher's backends."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture(autouse=True)
def _direct_launch_on():
    if importlib.util.find_spec("triton") is None:
        yield
        return
    with triton_eager.enabled():
        yield


@needs_triton
def test_every_private_api_it_uses_is_there():
    missing = triton_eager.missing_private_apis()
    assert not missing, (
        "opguide.experimental.triton_eager uses private APIs that this torch/Triton lacks: "
        + ", ".join(missing)
        + "; the library's default path does not use them (opguide.triton)"
    )


@needs_triton
def test_off_by_default_and_restored():
    triton_eager.disable()
    assert not triton_eager.is_enabled()
    import subprocess
    import sys

    code = "import opguide, opguide.experimental.triton_eager as e; print(e.is_enabled())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]
    with triton_eager.enabled():
        assert opguide.rms_norm is triton_eager._rms_norm
        with triton_eager.enabled():
            pass
        assert triton_eager.is_enabled()
    assert not triton_eager.is_enabled()
    assert opguide.rms_norm is opguide.ops.rms_norm


@needs_triton
@pytest.mark.skipif(not INTERPRET, reason="CPU tensors take Triton only in its interpreter")
def test_on_cpu_every_call_takes_the_operators():
    x, w = make_inputs((3, 40), torch.float32)
    assert not triton_eager.direct_call(x, w, 1e-6)
    y = opguide.rms_norm(x, w, backend="triton")
    torch.testing.assert_close(y, opguide.rms_norm_reference(x, w))


@pytest.mark.cuda
@compiled_triton
@pytest.mark.parametrize(
    "shape", [(1, 4096), (16, 4096), (64, 1000), (17, 8192), (3, 20000)], ids=str
)
def test_cuda_eager_path_matches_the_operators(shape):
    # A plain call launches the kernels directly (no dispatcher), relaunching
    # the kernels Triton compiled for its first call; it must give the
    # operators' bits, forward and backward, and leave the operators to
    # anything that watches the dispatcher.
    x, w = make_inputs(shape, torch.bfloat16, device="cuda", requires_grad=True)
    grad = torch.randn(shape, device="cuda").to(torch.bfloat16)
    assert triton_eager.direct_call(x, w, 1e-6) == (shape[-1] <= launch.MAX_REGISTER_ROW)
    with torch.no_grad():
        y_op = torch.ops.opguide.rms_norm_triton(x, w, 1e-6)
        for _ in range(3):  # the first call goes through Triton, the others relaunch
            assert torch.equal(opguide.rms_norm(x, w, backend="triton"), y_op)
    y_op, _ = torch.ops.opguide.rms_norm_forward_triton(x, w, 1e-6)
    via_op = torch.autograd.grad(y_op, (x, w), grad)
    for _ in range(3):
        direct = torch.autograd.grad(opguide.rms_norm(x, w, backend="triton"), (x, w), grad)
        assert all(map(torch.equal, direct, via_op))
    assert triton_eager._Kept.works, "this Triton's launcher refused the direct launch"
    with OpRecorder() as rec:
        opguide.rms_norm(x, w, backend="triton")
    assert "opguide.rms_norm_forward_triton.default" in rec.ops, rec.ops
    seen = []
    torch.vmap(lambda a: seen.append(triton_eager.direct_call(a, w, 1e-6)) or a)(x.detach())
    assert seen == [False]


@pytest.mark.cuda
@compiled_triton
def test_cuda_eager_path_with_odd_pointers_and_gradients():
    # Inputs 2 bytes off 16-byte alignment, a gradient with stride 0 (from a
    # sum), and a gradient for the weight alone: each must match the operators.
    m, n = 33, 4096
    flat = torch.randn(m * n + 1, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, device="cuda").to(torch.bfloat16).requires_grad_()
    for x in (flat[1:].view(m, n), flat[:-1].view(m, n)):  # misaligned, then aligned
        x = x.detach().requires_grad_()
        for _ in range(2):
            with torch.no_grad():
                expected = torch.ops.opguide.rms_norm_triton(x, w, 1e-6)
                assert torch.equal(opguide.rms_norm(x, w, backend="triton"), expected)
            got = torch.autograd.grad(opguide.rms_norm(x, w, backend="triton").sum(), (x, w))
            want = torch.autograd.grad(
                torch.ops.opguide.rms_norm_forward_triton(x, w, 1e-6)[0].sum(), (x, w)
            )
            assert all(map(torch.equal, got, want))
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    (grad_weight,) = torch.autograd.grad(opguide.rms_norm(x, w, backend="triton").sum(), (w,))
    (want,) = torch.autograd.grad(
        torch.ops.opguide.rms_norm_forward_triton(x, w, 1e-6)[0].sum(), (w,)
    )
    assert torch.equal(grad_weight, want)


@needs_triton
def test_launch_hooks_that_call_nothing_are_skipped():
    # The eager path passes None for Triton's launch hooks when they would
    # call nothing, and the hooks themselves when a profiler has added one.
    import triton

    assert triton_eager._no_hook(None)
    assert not triton_eager._no_hook(lambda metadata: None)
    chain = getattr(triton.knobs, "HookChain", None) if hasattr(triton, "knobs") else None
    if chain is not None:
        hooks = chain()
        assert triton_eager._no_hook(hooks)
        hooks.add(lambda metadata: None)
        assert not triton_eager._no_hook(hooks)


@pytest.mark.cuda
@compiled_triton
def test_cuda_eager_path_calls_a_launch_hook():
    import triton

    x, w = make_inputs((16, 4096), torch.bfloat16, device="cuda", requires_grad=True)
    opguide.rms_norm(x, w, backend="triton").sum().backward()  # kernels kept
    seen = []
    runtime = triton.knobs.runtime
    saved = runtime.launch_enter_hook
    if hasattr(saved, "add"):
        hook = seen.append
        saved.add(hook)
    else:
        runtime.launch_enter_hook = seen.append
    try:
        opguide.rms_norm(x, w, backend="triton").sum().backward()
    finally:
        if hasattr(saved, "remove"):
            saved.remove(hook)
        else:
            runtime.launch_enter_hook = saved
    assert len(seen) == 3, seen  # the forward, the backward, the grad_weight sum


@pytest.mark.cuda
@compiled_triton
def test_cuda_eager_path_leaves_a_leftover_functorch_wrapper_to_the_operators():
    # A tensor kept from inside torch.func.grad is still wrapped after it:
    # the direct path, which reads pointers, must not take it.
    leftover = []
    x, w = make_inputs((4, 256), torch.bfloat16, device="cuda")

    def loss(a):
        leftover.append(a)
        return a.float().square().sum()

    torch.func.grad(loss)(x)
    assert not triton_eager.direct_call(leftover[0], w, 1e-6)
    assert triton_eager.direct_call(x, w, 1e-6)
