"""Tests of ``opguide.silu_and_mul`` on the CPU: the C++ kernels, the Triton kernels in
Triton's interpreter, and the operator across PyTorch (opcheck, gradcheck,
torch.compile, torch.export, vmap, autocast, FlopCounterMode).

The GPU tests are ``tests/test_silu_and_mul_cuda.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import opguide
from opguide import backends, silu_and_mul_reference
from opguide._silu_and_mul.reference import silu_and_mul_backward_reference
from opguide.testing import TOLERANCES

pytestmark = pytest.mark.cpu
ROOT = Path(__file__).resolve().parent.parent
OPS = torch.ops.opguide
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TRITON_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DS = [1, 3, 769, 5125]
LEADING = [(0,), (1,), (3, 2)]
# The gradients compound two roundings of the low-precision inputs' products.
GRAD_TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
}

# The Triton items here run on CPU tensors, in Triton's interpreter, which the
# process chooses before triton is imported (conftest.py does without a GPU).
needs_triton = pytest.mark.skipif(
    not backends.triton_ready() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton in its interpreter (TRITON_INTERPRET=1) for CPU tensors",
)


def make_x(shape, dtype=torch.float32, seed=0):
    """Normal values scaled by 3, drawn in float32 on the CPU: silu's curved part and tails."""
    gen = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(shape, generator=gen)).to(dtype)


def make_grad(x, seed=1):
    return make_x((*x.shape[:-1], x.shape[-1] // 2), x.dtype, seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("leading", LEADING, ids=str)
@pytest.mark.parametrize("d", DS)
def test_cpu_matches_reference(d, leading, dtype):
    x = make_x((*leading, 2 * d), dtype)
    y = opguide.silu_and_mul(x)
    assert y.shape == (*leading, d) and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y, silu_and_mul_reference(x), **TOLERANCES[dtype])
    grad_y = make_grad(x)
    grad_x = OPS.silu_and_mul_backward(grad_y, x)
    assert grad_x.shape == x.shape and grad_x.dtype == dtype
    expected = silu_and_mul_backward_reference(grad_y, x)
    torch.testing.assert_close(grad_x, expected, **GRAD_TOLERANCES[dtype])


def test_reference_is_the_formula():
    a, b = torch.tensor([[-2.0, 0.5, 3.0]], dtype=torch.float64), torch.tensor([[1.5, -1.0, 2.0]])
    x = torch.cat([a, b.double()], dim=-1)
    torch.testing.assert_close(silu_and_mul_reference(x), a / (1 + torch.exp(-a)) * b.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_non_contiguous_input(dtype):
    wide = make_x((6, 4 * 769), dtype)
    for x in (wide[:, 5 : 5 + 2 * 769], make_x((2 * 769, 6), dtype).t(), wide[::2, ::2]):
        assert not x.is_contiguous()
        torch.testing.assert_close(opguide.silu_and_mul(x), silu_and_mul_reference(x))
        grad_y = make_grad(x)[:, :].t().contiguous().t()  # non-contiguous too
        torch.testing.assert_close(
            OPS.silu_and_mul_backward(grad_y, x),
            silu_and_mul_backward_reference(grad_y, x),
            **GRAD_TOLERANCES[dtype],
        )


def test_empty_inputs():
    for shape in ((0, 8), (4, 0), (2, 0, 6)):
        x = torch.empty(shape)
        y = opguide.silu_and_mul(x)
        assert y.shape == (*shape[:-1], shape[-1] // 2)
        assert OPS.silu_and_mul_backward(y, x).shape == shape


def test_autograd_runs_the_backward_op():
    x = make_x((5, 2 * 33), torch.float64).requires_grad_()
    y = opguide.silu_and_mul(x)
    grad_y = make_grad(x)
    (grad_x,) = torch.autograd.grad(y, x, grad_y)
    torch.testing.assert_close(grad_x, silu_and_mul_backward_reference(grad_y, x))


def test_gradcheck_float64():
    x = make_x((3, 2 * 7), torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(opguide.silu_and_mul, (x,))
    assert torch.autograd.gradcheck(OPS.silu_and_mul, (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(dtype):
    x = make_x((3, 2 * 9), dtype)
    torch.library.opcheck(OPS.silu_and_mul.default, (x,))
    torch.library.opcheck(OPS.silu_and_mul.default, (x.clone().requires_grad_(),))
    torch.library.opcheck(OPS.silu_and_mul_backward.default, (make_grad(x), x))


@needs_triton
@pytest.mark.parametrize("dtype", TRITON_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0, 2), (1, 2), (3, 6), (2, 2 * 769), (1, 2 * 5125)], ids=str)
def test_triton_matches_reference(shape, dtype):
    x = make_x(shape, dtype)
    y = opguide.silu_and_mul(x, backend="triton")
    assert y.shape == (*shape[:-1], shape[-1] // 2) and y.dtype == dtype
    torch.testing.assert_close(y, silu_and_mul_reference(x), **TOLERANCES[dtype])
    grad_y = make_grad(x)
    torch.testing.assert_close(
        OPS.silu_and_mul_backward_triton(grad_y, x),
        silu_and_mul_backward_reference(grad_y, x),
        **GRAD_TOLERANCES[dtype],
    )


@needs_triton
def test_triton_autograd_forced_tile_and_strided_input():
    from opguide._silu_and_mul import triton as silu_triton

    x = make_x((5, 4 * 37))[:, 1 : 1 + 2 * 37].requires_grad_()
    y = opguide.silu_and_mul(x, backend="triton")
    grad_y = make_grad(x)
    (grad_x,) = torch.autograd.grad(y, x, grad_y)
    torch.testing.assert_close(grad_x, silu_and_mul_backward_reference(grad_y, x))
    # A tile smaller than the row: several programs along each row, two rows each.
    tile = silu_triton.SiluAndMulConfig(block_n=8, rows=2, num_warps=1)
    torch.testing.assert_close(
        silu_triton.silu_and_mul_forward(x.detach(), forced=tile), silu_and_mul_reference(x)
    )
    torch.testing.assert_close(
        silu_triton.silu_and_mul_backward(grad_y, x.detach(), forced=tile), grad_x
    )
    assert silu_triton.silu_and_mul_config(5125) == silu_triton.SiluAndMulConfig(4096, 1, 4)
    assert silu_triton.silu_and_mul_config(3).block_n == 4


@needs_triton
def test_triton_opcheck():
    x = make_x((3, 2 * 9), torch.float32)
    torch.library.opcheck(OPS.silu_and_mul_triton.default, (x,))
    torch.library.opcheck(OPS.silu_and_mul_triton.default, (x.clone().requires_grad_(),))
    torch.library.opcheck(OPS.silu_and_mul_backward_triton.default, (make_grad(x), x))


@needs_triton
def test_triton_refuses_float64():
    with pytest.raises(TypeError, match="Triton backend supports float32, float16 and bfloat16"):
        opguide.silu_and_mul(torch.ones(2, 4, dtype=torch.float64), backend="triton")


class _Capture:
    """A torch.compile backend that keeps the graphs it is given and runs them as they are."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self):
        return {node.target for gm in self.graphs for node in gm.graph.nodes}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("compiled", [None, "kernel", "native"])  # None: the default
def test_compile_fullgraph(compiled, dynamic):
    torch._dynamo.reset()
    capture = _Capture()
    kwargs = {} if compiled is None else {"compiled": compiled}
    fn = torch.compile(
        lambda x: opguide.silu_and_mul(x, **kwargs) * 2,
        fullgraph=True,
        dynamic=dynamic,
        backend=capture,
    )
    for shape in ((4, 2 * 33), (7, 2 * 40)):
        x = make_x(shape, torch.bfloat16)
        torch.testing.assert_close(fn(x), silu_and_mul_reference(x) * 2)
    kernel_in_graph = OPS.silu_and_mul.default in capture.targets()
    assert kernel_in_graph == (compiled != "native")
    if dynamic:
        assert len(capture.graphs) == 1  # one graph served both shapes


def test_compile_with_inductor_forward_and_backward():
    torch._dynamo.reset()
    fn = torch.compile(lambda x: opguide.silu_and_mul(x, compiled="kernel"), fullgraph=True)
    x = make_x((4, 2 * 16), torch.float32).requires_grad_()
    y = fn(x)
    torch.testing.assert_close(y, silu_and_mul_reference(x))
    grad_y = make_grad(x)
    y.backward(grad_y)
    torch.testing.assert_close(x.grad, silu_and_mul_backward_reference(grad_y, x))


def test_export_records_the_operator():
    class Mlp(torch.nn.Module):
        def forward(self, x):
            return opguide.silu_and_mul(x, compiled="kernel")

    program = torch.export.export(Mlp(), (make_x((4, 2 * 8)),))
    targets = {node.target for node in program.graph.nodes}
    assert OPS.silu_and_mul.default in targets
    x = make_x((4, 2 * 8), seed=3)
    torch.testing.assert_close(program.module()(x), silu_and_mul_reference(x))


@pytest.mark.parametrize("backend", ["cpp", pytest.param("triton", marks=needs_triton)])
def test_vmap(backend):
    x = make_x((3, 5, 2 * 6))  # batched over dimension 1
    fn = lambda t: opguide.silu_and_mul(t, backend=backend)  # noqa: E731
    expected = torch.stack([silu_and_mul_reference(x[:, i]) for i in range(5)], dim=1)
    torch.testing.assert_close(torch.vmap(fn, in_dims=1, out_dims=1)(x), expected)
    grad_y = make_grad(x)
    backward = OPS.silu_and_mul_backward if backend == "cpp" else OPS.silu_and_mul_backward_triton
    got = torch.vmap(backward, in_dims=(None, 1))(grad_y[:, 0], x)
    expected = torch.stack([backward(grad_y[:, 0], x[:, i]) for i in range(5)])
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", ["cpp", pytest.param("triton", marks=needs_triton)])
def test_autocast_runs_in_float32(backend):
    x = make_x((4, 2 * 16), torch.bfloat16).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = opguide.silu_and_mul(x, backend=backend)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, silu_and_mul_reference(x.detach().float()))
    y.sum().backward()
    assert x.grad.dtype == torch.bfloat16
    ones = torch.ones(4, 16)
    expected = silu_and_mul_backward_reference(ones, x.detach().float())
    torch.testing.assert_close(x.grad, expected.bfloat16())
    # Outside autocast the dtype of x is kept.
    assert opguide.silu_and_mul(x.detach(), backend=backend).dtype == torch.bfloat16


BAD_INPUTS = [
    (torch.ones(3, 7), ValueError, r"last dimension of x must be even .* got shape \(3, 7\)"),
    (torch.ones(5), ValueError, r"must be even .* got shape \(5,\)"),
    (torch.ones(4, dtype=torch.int64), TypeError, "floating-point tensor .* got torch.int64"),
    (torch.tensor(1.0), ValueError, "at least one dimension, .* got a 0-d tensor"),
]


@pytest.mark.parametrize("x, error, message", BAD_INPUTS, ids=["odd", "odd_1d", "int", "0d"])
def test_bad_inputs_give_clear_errors(x, error, message):
    calls = [opguide.silu_and_mul, OPS.silu_and_mul, lambda t: OPS.silu_and_mul(t.to("meta"))]
    if backends.triton_ready() and x.dtype.is_floating_point:
        calls.append(lambda t: opguide.silu_and_mul(t, backend="triton"))
    for call in calls:
        with pytest.raises(error, match=message):
            call(x)


def test_bad_arguments_give_clear_errors():
    x = torch.ones(2, 4)
    with pytest.raises(ValueError, match="backend must be 'auto', 'cpp' or 'triton'"):
        opguide.silu_and_mul(x, backend="cuda")
    with pytest.raises(ValueError, match="compiled must be 'kernel' or 'native'"):
        opguide.silu_and_mul(x, compiled="inductor")
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        opguide.silu_and_mul([1.0, 2.0])
    for backward in (OPS.silu_and_mul_backward, OPS.silu_and_mul_backward_triton):
        with pytest.raises(ValueError, match=r"grad_y must have the shape of y \(2, 2\)"):
            backward(torch.ones(2, 4), x)
        with pytest.raises(TypeError, match="grad_y must have the dtype of x"):
            backward(torch.ones(2, 2, dtype=torch.float64), x)


def test_flop_counter_counts_forward_and_backward():
    x = make_x((6, 2 * 10)).requires_grad_()
    with FlopCounterMode(display=False) as counter:
        opguide.silu_and_mul(x).sum().backward()
    counts = counter.get_flop_counts()["Global"]
    assert counts[OPS.silu_and_mul] == 5 * 60
    assert counts[OPS.silu_and_mul_backward] == 10 * 60
    if backends.triton_ready() and os.environ.get("TRITON_INTERPRET") == "1":
        with FlopCounterMode(display=False) as counter:
            opguide.silu_and_mul(x.detach(), backend="triton")
        assert counter.get_flop_counts()["Global"][OPS.silu_and_mul_triton] == 5 * 60


def test_only_its_own_files_name_it():
    """A new operator is a registry entry, its own folders and its tests: no other
    file of the repository (pages aside) names it."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    others = []
    for path in filter(None, tracked):
        if path.startswith("docs/recorded/") or not (ROOT / path).is_file():
            continue
        try:
            text = (ROOT / path).read_text()
        except UnicodeDecodeError:
            continue
        if "silu_and_mul" not in text:
            continue
        own = path == "opguide/registry.py" or "silu_and_mul" in path
        pages = path.startswith(("docs/", "examples_src/"))
        if not (own or pages):
            others.append(path)
    assert not others, f"files outside silu_and_mul's own that name it: {others}"


def test_benchmark_smoke(tmp_path, capsys):
    from guidekit.benchmark import silu_and_mul as benchmark

    out = tmp_path / "silu.json"
    assert benchmark.main(["--smoke", "--rounds", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8x256" in printed and "forward+backward" in printed, printed
    import json

    result = json.loads(out.read_text())
    assert result["smoke"] and result["command"].endswith("--out silu.json")
    impls = {r["impl"] for r in result["results"]}
    assert {"opguide cpu", "torch.compile", "copy"} <= impls
    assert all(r["seconds"] > 0 for r in result["results"])
    assert "liger" in impls or "liger" in result["missing"]


class _SiluAndMul(torch.nn.Module):
    def forward(self, x):
        return opguide.silu_and_mul(x)


def default_call() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A module calling the public function with its default arguments, and inputs
    for it: what tests/test_compiled_form.py exports and tests/test_across_pytorch.py
    packages with AOTInductor, for every operator of the registry."""
    return _SiluAndMul(), (make_x((4, 2 * 16)),)


def fake_cases(kit):
    """This operator's cases for tests/test_fake_kernels.py, whose module is ``kit``:
    the devices and dtypes each operator takes, and an argument builder."""
    from hypothesis import strategies as st

    def forward_args(draw, device, dtype):
        batch, d = draw(kit.batch_shapes()), draw(st.sampled_from([0, 1, 2, 5, 33]))
        return (draw(kit.strided((*batch, 2 * d), dtype, device)),)

    def backward_args(draw, device, dtype):
        batch, d = draw(kit.batch_shapes()), draw(st.sampled_from([0, 1, 2, 5, 33]))
        grad_y = draw(kit.strided((*batch, d), dtype, device))
        return grad_y, draw(kit.strided((*batch, 2 * d), dtype, device))

    compiled = kit._devices("cpu", "cuda")
    compiled = tuple(d for d in compiled if d in backends.compiled_device_types("silu_and_mul"))
    triton = (kit.TRITON_DEVICES, kit.TRITON_DTYPES)
    return {
        "silu_and_mul": kit.Case(compiled, kit.FLOATING, forward_args),
        "silu_and_mul_backward": kit.Case(compiled, kit.FLOATING, backward_args),
        "silu_and_mul_triton": kit.Case(*triton, forward_args),
        "silu_and_mul_backward_triton": kit.Case(*triton, backward_args),
        # The same kernels compiled ahead of time (csrc/triton_aot/), launched from C++.
        "silu_and_mul_triton_aot": kit.Case(*triton, forward_args),
        "silu_and_mul_backward_triton_aot": kit.Case(*triton, backward_args),
    }
