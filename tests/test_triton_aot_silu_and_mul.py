"""silu_and_mul's Triton kernels compiled ahead of time (``csrc/triton_aot/silu_and_mul_*``).

``opguide::silu_and_mul_triton_aot`` and its backward have the JIT route's
signatures; on a GPU the build compiled them for, they launch the compiled
kernels from C++ with the JIT route's tile, and give its bits. The items
without a marker run anywhere: the tile and the keys against the JIT route's
and the build's, and, in Triton's interpreter, the operators on CPU tensors
(which take the JIT route). Items marked ``cuda`` need a CUDA build on its GPU::

    python -m pytest tests/test_triton_aot_silu_and_mul.py -p no:xdist -q -rs
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from opguide import silu_and_mul_reference

triton_ops = pytest.importorskip(
    "opguide.triton", reason="the JIT route the operators fall back to needs the triton package"
)
from test_triton_aot import NoJit as RefusingJit  # noqa: E402
from test_triton_aot import _cuda_route_ready, _require_artifacts  # noqa: E402

from opguide._silu_and_mul.triton import ops as silu_jit  # noqa: E402
from opguide._silu_and_mul.triton.ops import silu_and_mul_config  # noqa: E402
from opguide.triton import launch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPS = torch.ops.opguide
NAMES = ("silu_and_mul_triton_aot", "silu_and_mul_backward_triton_aot")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Every d up to 300, the powers of two and their neighbours, and rows of y
# past the widest tile, with each ALIGN.
LENGTHS = sorted(
    set(range(1, 300))
    | {p + d for p in (512, 1024, 2048, 4096, 8192) for d in (-1, 0, 1)}
    | {4098, 4100, 4104, 4112, 11008, 14336}
)
DEVICES = [("sm_90", True), ("sm_80", False), ("gfx942", False)]

KEY = torch.ops.opguide_checks.triton_aot_silu_and_mul_key

interpreter = pytest.mark.skipif(
    not triton_ops.INTERPRET,
    reason="Triton's interpreter is off in this process (a GPU is visible); "
    "run with TRITON_INTERPRET=1 for the CPU items",
)


def _inputs(shape, dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).to(device)


# -- schemas, tile and keys -------------------------------------------------------------


def test_the_operators_have_the_jit_route_signatures_and_cpp_kernels():
    for name in NAMES:
        aot = getattr(OPS, name).default._schema
        twin = getattr(OPS, name.removesuffix("_aot")).default._schema
        assert [(a.name, str(a.type)) for a in aot.arguments] == [
            (a.name, str(a.type)) for a in twin.arguments
        ]
        assert [str(r.type) for r in aot.returns] == [str(r.type) for r in twin.returns]
        for key in ("Meta", "CPU"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"opguide::{name}", key)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(
        "opguide::silu_and_mul_triton_aot", "Autograd"
    )


def test_the_builds_tile_is_the_jit_routes():
    from opguide._silu_and_mul.triton.aot import tile

    for d in range(1, 20000):
        c = silu_and_mul_config(d)
        assert tile(d) == (c.block_n, c.rows, c.num_warps), d


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d[0])
def test_every_key_the_cpp_route_asks_for_is_compiled_by_the_build(device):
    from opguide.triton import aot

    target, gdc = device
    compiled = {la.key for la in aot.launches(target, cols=LENGTHS)}
    words = ((torch.float32, "fp32"), (torch.float16, "fp16"), (torch.bfloat16, "bf16"))
    for kernel in ("silu_and_mul_forward", "silu_and_mul_backward"):
        for dtype, word in words:
            for d in LENGTHS:
                asked = KEY(kernel, d, word, target, gdc)
                c = silu_and_mul_config(d)
                cx = {"BLOCK_N": c.block_n, "ROWS": c.rows, "ALIGN": launch.align(d), "GDC": gdc}
                assert asked == aot.key(kernel, target, dtype, cx, d, c.num_warps)
                assert asked in compiled
    # The full table holds every key: past 4096 + 16 the keys repeat.
    full = {la.key for la in aot.launches(target, dtypes=["bfloat16"])}
    for d in (5000, 11008, 14337, 65536):
        assert KEY("silu_and_mul_forward", d, "bf16", target, gdc) in full, d


def test_the_compiled_kernels_take_the_arguments_the_launcher_passes(tmp_path):
    from test_triton_aot import check_launcher_params

    # silu_and_mul_triton_aot_cuda.cu's launch_tiles: the pointers ("p"), M and
    # N (4 bytes each; N left out where it is the constexpr 1), then Triton's
    # two scratch pointers.
    check_launcher_params(
        tmp_path,
        {
            ("silu_and_mul_forward", "N"): "pp44pp",  # x, y
            ("silu_and_mul_forward", "1"): "pp4pp",
            ("silu_and_mul_backward", "N"): "ppp44pp",  # grad_y, x, grad_x
            ("silu_and_mul_backward", "1"): "ppp4pp",
        },
    )


def test_nvcc_compiles_the_cuda_source():
    from guidekit import compile_checks

    source = ROOT / "csrc" / "triton_aot" / "silu_and_mul_triton_aot_cuda.cu"
    result = compile_checks.nvcc_check(source, with_torch=True)
    if result.status == "skipped":
        pytest.skip(result.reason)
    assert result.ok, result.summary() + "\n" + result.output[-6000:]


# -- CPU tensors: the JIT route, in Triton's interpreter ------------------------------


@interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 2), (3, 14), (2, 3, 80), (0, 8), (3, 0)], ids=str)
def test_cpu_calls_match_the_jit_route(shape, dtype):
    x = _inputs(shape, dtype)
    y = OPS.silu_and_mul_triton_aot(x)
    torch.testing.assert_close(y, OPS.silu_and_mul_triton(x), rtol=0, atol=0)
    g = _inputs(y.shape, dtype, seed=1)
    torch.testing.assert_close(
        OPS.silu_and_mul_backward_triton_aot(g, x),
        OPS.silu_and_mul_backward_triton(g, x),
        rtol=0,
        atol=0,
    )


@interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_autograd_matches_the_reference(dtype):
    x = _inputs((4, 66), dtype).requires_grad_()
    y = OPS.silu_and_mul_triton_aot(x)
    xr = x.detach().double().requires_grad_()
    ref = silu_and_mul_reference(xr)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(y.double(), ref, **tol)
    g = _inputs(y.shape, dtype, seed=1)
    y.backward(g)
    ref.backward(g.double())
    torch.testing.assert_close(x.grad.double(), xr.grad, **tol)
    with torch.no_grad():
        assert not OPS.silu_and_mul_triton_aot(x).requires_grad


@interpreter
def test_cpu_opcheck():
    x = _inputs((3, 2, 24), torch.float32).requires_grad_()
    torch.library.opcheck(OPS.silu_and_mul_triton_aot.default, (x,))
    g = _inputs((3, 2, 12), torch.float32, seed=1)
    torch.library.opcheck(OPS.silu_and_mul_backward_triton_aot.default, (g, x.detach()))


@interpreter
def test_cpu_fallback_says_why(capfd):
    x = _inputs((2, 8), torch.float32)
    try:
        torch.set_warn_always(True)
        OPS.silu_and_mul_triton_aot(x)
    finally:
        torch.set_warn_always(False)
    err = capfd.readouterr().err
    assert "opguide::silu_and_mul_triton_aot: x is on cpu" in err
    assert "the JIT Triton route runs (opguide::silu_and_mul_triton)" in err


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="last dimension of x must be even"):
        OPS.silu_and_mul_triton_aot(torch.ones(2, 3))
    with pytest.raises(ValueError, match="grad_y must have the shape of y"):
        OPS.silu_and_mul_backward_triton_aot(torch.ones(2, 3), torch.ones(2, 4))


def test_meta_kernels_take_symbolic_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        x = mode.from_tensor(torch.empty(5, 64), static_shapes=False)
        y = OPS.silu_and_mul_triton_aot(x)
        assert y.shape[0] == x.shape[0] and y.shape[1] * 2 == x.shape[1]
        grad_x = OPS.silu_and_mul_backward_triton_aot(y, x)
        assert grad_x.shape == x.shape


# -- CUDA: the compiled kernels ---------------------------------------------------------


_READY, _WHY = _cuda_route_ready("opguide::silu_and_mul_triton_aot")
cuda_route = pytest.mark.skipif(not _READY, reason=_WHY)


def NoJit():
    """Makes every launch of silu_and_mul's JIT route fail while entered."""
    return RefusingJit(silu_jit)


@interpreter
def test_no_jit_sees_a_jit_launch():
    with pytest.raises(AssertionError, match="the JIT route launched"), NoJit():
        OPS.silu_and_mul_triton(_inputs((2, 8), torch.float32))


CUDA_SHAPES = [
    (1, 8192), (4096, 28672), (16384, 2048), (7, 22016), (33, 1000), (5, 2), (3, 2, 1536)
]  # fmt: skip
CUDA_IDS = ["x".join(map(str, s)) for s in CUDA_SHAPES]


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=CUDA_IDS)
def test_cuda_route_keys_are_found_and_give_the_jit_routes_bits(shape, dtype):
    from opguide.triton import aot

    _require_artifacts()
    x = _inputs(shape, dtype, "cuda")
    target = torch.ops.opguide_checks.triton_aot_device(x)[0]
    d = shape[-1] // 2
    c = silu_and_mul_config(d)
    gdc = int(bool(launch.pdl_options(x).get("GDC")))
    for direction in ("forward", "backward"):
        key, found = torch.ops.opguide_checks.triton_aot_silu_and_mul_route(direction, x)
        cx = {"BLOCK_N": c.block_n, "ROWS": c.rows, "ALIGN": launch.align(d), "GDC": gdc}
        assert key == aot.key(f"silu_and_mul_{direction}", target, dtype, cx, d, c.num_warps)
        assert found == "found"
    g = _inputs((*shape[:-1], d), dtype, "cuda", seed=1)
    with NoJit():
        y = OPS.silu_and_mul_triton_aot(x)
        grad_x = OPS.silu_and_mul_backward_triton_aot(g, x)
    torch.testing.assert_close(y, OPS.silu_and_mul_triton(x), rtol=0, atol=0)
    torch.testing.assert_close(grad_x, OPS.silu_and_mul_backward_triton(g, x), rtol=0, atol=0)


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_autograd_runs_the_compiled_kernels(dtype):
    _require_artifacts()
    x = _inputs((64, 2000), dtype, "cuda").requires_grad_()
    g = _inputs((64, 1000), dtype, "cuda", seed=1)
    with NoJit():
        OPS.silu_and_mul_triton_aot(x).backward(g)
    xj = x.detach().clone().requires_grad_()
    OPS.silu_and_mul_triton(xj).backward(g)
    torch.testing.assert_close(x.grad, xj.grad, rtol=0, atol=0)


@pytest.mark.cuda
@cuda_route
def test_cuda_misaligned_view_takes_the_jit_route_and_says_why(capfd):
    _require_artifacts()
    x = _inputs((8, 66), torch.bfloat16, "cuda")[:, 2:]  # rows of 64, at an offset of 4 bytes
    assert x.is_contiguous() is False
    xs = _inputs((8 * 64 + 2,), torch.bfloat16, "cuda")[2:].view(8, 64)  # contiguous, offset
    try:
        torch.set_warn_always(True)
        y = OPS.silu_and_mul_triton_aot(xs)
    finally:
        torch.set_warn_always(False)
    torch.testing.assert_close(y, OPS.silu_and_mul_triton(xs), rtol=0, atol=0)
    err = capfd.readouterr().err
    assert "opguide::silu_and_mul_triton_aot:" in err and "silu_and_mul_triton)" in err
    # A non-contiguous x is copied first: its copy is aligned, no fallback.
    want = OPS.silu_and_mul_triton(x)
    with NoJit():
        y = OPS.silu_and_mul_triton_aot(x)
    torch.testing.assert_close(y, want, rtol=0, atol=0)


@pytest.mark.cuda
@cuda_route
def test_cuda_graph_capture_launches_on_the_current_stream():
    _require_artifacts()
    x = _inputs((256, 4096), torch.bfloat16, "cuda")
    OPS.silu_and_mul_triton_aot(x)  # loads the image outside the capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        y = OPS.silu_and_mul_triton_aot(x)
    x.copy_(_inputs((256, 4096), torch.bfloat16, "cuda", seed=2))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, OPS.silu_and_mul_triton(x), rtol=0, atol=0)


@pytest.mark.cuda
@cuda_route
def test_cuda_empty_inputs_and_float64(capfd):
    _require_artifacts()
    for shape in ((0, 8), (4, 0), (2, 0, 6)):
        x = _inputs(shape, torch.bfloat16, "cuda")
        y = OPS.silu_and_mul_triton_aot(x)
        assert y.shape == (*shape[:-1], shape[-1] // 2) and y.dtype == x.dtype
        g = torch.empty(y.shape, dtype=x.dtype, device="cuda")
        assert OPS.silu_and_mul_backward_triton_aot(g, x).shape == x.shape
    # An empty view at an offset needs no kernel: no fallback, no warning.
    empty_view = _inputs((9,), torch.bfloat16, "cuda")[1:1].view(0, 8)
    try:
        torch.set_warn_always(True)
        assert OPS.silu_and_mul_triton_aot(empty_view).shape == (0, 4)
    finally:
        torch.set_warn_always(False)
    assert "silu_and_mul_triton_aot" not in capfd.readouterr().err
    # float64 goes to the JIT route, which refuses it, empty or not.
    for shape in ((0, 8), (2, 8)):
        with pytest.raises(TypeError):
            OPS.silu_and_mul_triton_aot(torch.zeros(shape, dtype=torch.float64, device="cuda"))
