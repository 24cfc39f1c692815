"""The Triton RMSNorm kernels compiled ahead of time, launched from C++ (``csrc/triton_aot/``).

``opguide::rms_norm_triton_aot``, ``rms_norm_forward_triton_aot`` and
``rms_norm_backward_triton_aot`` have the signatures of the JIT route's
operators (``opguide/triton/ops.py``); their Meta kernels and autograd are
C++. On a GPU a call plans as the JIT route does, finds the kernel in the
build's table and launches it; a call no artifact fits takes the JIT route's
operator, with a warning (on stderr: operators called through ``torch.ops``
report C++ warnings there) that names the reason.

Items without a device marker run on the CPU: the schemas, the Meta kernels
(concrete and symbolic shapes), the argument errors, and the operators on
CPU tensors, which take the JIT route in Triton's interpreter (the suite's
conftest.py selects it when no GPU is visible); the CUDA source is
compile-checked with nvcc where nvcc is present. Items marked ``cuda`` run the
compiled kernels: against the JIT route (bit for bit: the same kernels with
the same plans) and a float64 reference, through autograd, ``opcheck``,
``torch.compile`` and a CUDA graph; that an AOT call runs no JIT launch;
and each fallback. On a GPU machine::

    python -m pytest tests/test_triton_aot.py -p no:xdist -q -rs
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from opguide import rms_norm_reference
from opguide.testing import TOLERANCES, assert_grads_close, make_inputs, reference_grads

triton_ops = pytest.importorskip(
    "opguide.triton", reason="the JIT route the operators fall back to needs the triton package"
)
from opguide.triton import launch, plans  # noqa: E402
from opguide.triton import ops as jit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPS = torch.ops.opguide
NAMES = ("rms_norm_triton_aot", "rms_norm_forward_triton_aot", "rms_norm_backward_triton_aot")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
EPS = 1e-6

interpreter = pytest.mark.skipif(
    not triton_ops.INTERPRET,
    reason="Triton's interpreter is off in this process (a GPU is visible); "
    "run with TRITON_INTERPRET=1 for the CPU items",
)


# -- schemas ----------------------------------------------------------------------------


def test_the_operators_have_the_jit_route_signatures():
    for name in NAMES:
        aot = getattr(OPS, name).default._schema
        twin = getattr(OPS, name.removesuffix("_aot")).default._schema
        assert aot.name == f"opguide::{name}"
        assert [(a.name, str(a.type)) for a in aot.arguments] == [
            (a.name, str(a.type)) for a in twin.arguments
        ]
        assert [str(r.type) for r in aot.returns] == [str(r.type) for r in twin.returns]


def test_the_operators_have_meta_and_autograd_kernels_in_cpp():
    for name in NAMES:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"opguide::{name}", "Meta")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"opguide::{name}", "CPU")
    for name in NAMES[:2]:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"opguide::{name}", "Autograd")


# -- Meta kernels -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 4096), (3, 7), (2, 3, 40), (0, 16), (4, 0), (5,)], ids=str)
def test_meta_kernels_describe_the_outputs(shape, dtype):
    with FakeTensorMode():
        # 2-D inputs as a transposed view: the outputs are contiguous all the same.
        x = (
            torch.empty(shape[::-1], dtype=dtype).t()
            if len(shape) == 2
            else torch.empty(shape, dtype=dtype)
        )
        w = torch.empty(shape[-1], dtype=dtype)
        y = OPS.rms_norm_triton_aot(x, w, EPS)
        y2, inv_rms = OPS.rms_norm_forward_triton_aot(x, w, EPS)
        grad_x, grad_weight = OPS.rms_norm_backward_triton_aot(x, x, w, inv_rms)
    for out in (y, y2, grad_x):
        assert out.shape == shape and out.dtype == dtype and out.is_contiguous()
    assert inv_rms.shape == shape[:-1] and inv_rms.dtype == torch.float32
    assert grad_weight.shape == (shape[-1],) and grad_weight.dtype == dtype


def test_meta_kernels_take_symbolic_shapes():
    from torch.fx.experimental.proxy_tensor import make_fx

    def train(x, w, g):
        y, inv_rms = OPS.rms_norm_forward_triton_aot(x, w, EPS)
        return y, OPS.rms_norm_backward_triton_aot(g, x, w, inv_rms)

    x, w = make_inputs((3, 2, 8), torch.bfloat16, device="meta")
    graph = make_fx(train, tracing_mode="symbolic")(x, w, x)
    shapes = [n.meta["val"] for n in graph.graph.nodes if n.op == "call_function"]
    assert any(isinstance(s, torch.Tensor) for s in shapes)
    text = graph.code
    assert "rms_norm_forward_triton_aot" in text and "rms_norm_backward_triton_aot" in text
    y, (grad_x, grad_weight) = graph(
        *make_inputs((5, 4, 16), torch.bfloat16, device="meta"), x.new_empty(5, 4, 16)
    )
    assert y.shape == grad_x.shape == (5, 4, 16) and grad_weight.shape == (16,)


# -- argument errors (Meta kernels: no kernel runs) ------------------------------------


def _meta(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((_meta((3, 4)), _meta(5), EPS), ValueError, r"weight must have shape \(4,\)"),
        (
            (_meta((3, 4)), _meta(4, torch.float16), EPS),
            TypeError,
            "weight must have the dtype of x",
        ),
        ((_meta((3, 4)), _meta(4), -1.0), ValueError, "eps must be non-negative"),
        ((_meta((3, 4), torch.int32), _meta(4, torch.int32), EPS), TypeError, "floating-point"),
        ((_meta(()), _meta(1), EPS), ValueError, "at least one dimension"),
    ],
    ids=["weight-shape", "weight-dtype", "eps", "int-x", "scalar-x"],
)
@pytest.mark.parametrize("name", NAMES[:2])
def test_forward_errors_name_the_argument(name, args, error, match):
    with pytest.raises(error, match=match):
        getattr(OPS, name)(*args)


@pytest.mark.parametrize(
    ("grad_y", "inv_rms", "error", "match"),
    [
        (_meta((3, 5)), _meta(3), ValueError, "grad_y must have the shape of x"),
        (_meta((3, 4), torch.float16), _meta(3), TypeError, "grad_y must have the dtype of x"),
        (_meta((3, 4)), _meta(3, torch.float16), TypeError, "inv_rms must have dtype"),
        (_meta((3, 4)), _meta(4), ValueError, r"inv_rms must have shape \(3,\)"),
    ],
    ids=["grad_y-shape", "grad_y-dtype", "inv_rms-dtype", "inv_rms-shape"],
)
def test_backward_errors_name_the_argument(grad_y, inv_rms, error, match):
    with pytest.raises(error, match=match):
        OPS.rms_norm_backward_triton_aot(grad_y, _meta((3, 4)), _meta(4), inv_rms)


def test_symbolic_checks_refuse_a_weight_of_another_length():
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = _meta((3, 8)), _meta(9)
    with pytest.raises(Exception, match="weight must have shape"):
        make_fx(lambda x, w: OPS.rms_norm_triton_aot(x, w, EPS), tracing_mode="symbolic")(x, w)


# -- the keys the C++ side asks for are the keys the build compiles ---------------------

# (target, SM count, opt-in shared memory per block, PDL): the devices
# opguide/triton/aot.py models (the SM count sets grids only).
DEVICES = [
    ("sm_90", 132, 232448, True),
    ("sm_80", 108, 166912, False),
    ("sm_86", 84, 101376, False),
    ("gfx942", 304, 65536, False),
]
# Every length up to 300, the powers of two and their neighbours, odd
# lengths with each ALIGN, and lengths past the Registers plans.
KEY_COLS = sorted(
    set(range(1, 300))
    | {p + d for p in (512, 1024, 2048, 4096, 8192, 16384) for d in (-1, 0, 1)}
    | {1000, 4104, 5000, 12000, 20000}
)


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d[0])
def test_every_key_the_cpp_route_asks_for_is_compiled_by_the_build(device):
    from opguide.triton import aot

    target, sm_count, smem_optin, gdc = device
    compiled = {la.key for la in aot.launches(target, cols=KEY_COLS)}
    asked = set()
    for dtype in ("fp32", "fp16", "bf16"):
        for n in KEY_COLS:
            for rows in (1, 2, 300, 1 << 20):
                for direction in ("forward", "inference", "backward"):
                    asked.update(
                        torch.ops.opguide_checks.triton_aot_keys(
                            direction, rows, n, dtype, target, sm_count, smem_optin, gdc
                        )
                    )
    assert asked - compiled == set()
    # Each key names its kernel, target, dtype and warps as aot.key() spells them.
    forward = torch.ops.opguide_checks.triton_aot_keys(
        "forward", 8, 4104, "bf16", target, sm_count, smem_optin, gdc
    )
    constexprs = {"BLOCK_N": 8192, "ROWS": 1, "STORE_INV": 1, "GDC": int(gdc), "ALIGN": 8}
    assert forward == [aot.key("rms_norm_forward", target, torch.bfloat16, constexprs, 4104, 8)]
    # Rows past the Registers plans ask for nothing: the JIT route runs them.
    assert (
        torch.ops.opguide_checks.triton_aot_keys(
            "backward", 8, 8193, "fp32", target, sm_count, smem_optin, gdc
        )
        == []
    )


def test_a_one_program_16_bit_backward_sums_its_float32_row():
    def kernels(dtype):
        keys = torch.ops.opguide_checks.triton_aot_keys(
            "backward", 1, 4096, dtype, "sm_90", 132, 232448, True
        )
        return [k.split("|")[0] for k in keys]

    assert kernels("bf16") == ["rms_norm_backward", "grad_weight_sum"]
    assert kernels("fp32") == ["rms_norm_backward"]


# -- CPU tensors: the JIT route, in Triton's interpreter ------------------------------


@interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 3, 40), (0, 8), (3, 0)], ids=str)
def test_cpu_calls_match_the_jit_route(shape, dtype):
    x, w = make_inputs(shape, dtype)
    torch.testing.assert_close(OPS.rms_norm_triton_aot(x, w, EPS), OPS.rms_norm_triton(x, w, EPS))
    y, inv_rms = OPS.rms_norm_forward_triton_aot(x, w, EPS)
    y_jit, inv_jit = OPS.rms_norm_forward_triton(x, w, EPS)
    torch.testing.assert_close((y, inv_rms), (y_jit, inv_jit), equal_nan=True)
    g = torch.randn(shape).to(dtype)
    torch.testing.assert_close(
        OPS.rms_norm_backward_triton_aot(g, x, w, inv_rms),
        OPS.rms_norm_backward_triton(g, x, w, inv_jit),
    )


@interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_autograd_matches_the_reference(dtype):
    x, w = make_inputs((4, 33), dtype, requires_grad=True)
    y = OPS.rms_norm_triton_aot(x, w, EPS)
    torch.testing.assert_close(y, rms_norm_reference(x, w, EPS), **TOLERANCES[dtype])
    g = torch.randn(y.shape).to(dtype)
    y.backward(g)
    assert_grads_close((x.grad, w.grad), reference_grads(x, w, g, EPS))
    # The training forward's y also carries the graph; inv_rms does not.
    x.grad = w.grad = None
    y, inv_rms = OPS.rms_norm_forward_triton_aot(x, w, EPS)
    assert y.requires_grad and not inv_rms.requires_grad
    y.backward(g)
    assert_grads_close((x.grad, w.grad), reference_grads(x, w, g, EPS))


@interpreter
def test_cpu_grads_only_where_asked_and_none_without_grad_mode():
    x, w = make_inputs((3, 16), requires_grad=False)
    w.requires_grad_()
    OPS.rms_norm_triton_aot(x, w, EPS).sum().backward()
    assert x.grad is None and w.grad is not None
    with torch.no_grad():
        assert not OPS.rms_norm_triton_aot(x, w, EPS).requires_grad


@interpreter
@pytest.mark.parametrize("name", NAMES)
def test_cpu_opcheck(name):
    x, w = make_inputs((3, 2, 24), torch.float32, requires_grad=name != NAMES[2])
    if name == NAMES[2]:
        _, inv_rms = OPS.rms_norm_forward_triton(x, w, EPS)
        args = (torch.randn_like(x), x, w, inv_rms)
    else:
        args = (x, w, EPS)
    torch.library.opcheck(getattr(OPS, name).default, args)


@interpreter
def test_cpu_fallback_says_why(capfd):
    x, w = make_inputs((2, 8))
    try:
        torch.set_warn_always(True)
        OPS.rms_norm_triton_aot(x, w, EPS)
    finally:
        torch.set_warn_always(False)
    err = capfd.readouterr().err
    assert "opguide::rms_norm_triton_aot: x is on cpu" in err
    assert "the JIT Triton route runs (opguide::rms_norm_triton)" in err
    # Once per operator and reason: the call above was at least the second.
    OPS.rms_norm_triton_aot(x, w, EPS)
    assert "rms_norm_triton_aot" not in capfd.readouterr().err


WITHOUT_TRITON = """
    import sys
    sys.modules["triton"] = None  # as if triton were not installed
    import warnings
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import opguide
    assert not hasattr(torch.ops.opguide, "rms_norm_triton")
    try:
        torch.ops.opguide.rms_norm_triton_aot(torch.ones(2, 8), torch.ones(8), 1e-6)
    except RuntimeError as error:
        print(error)
"""


def test_without_the_jit_route_a_fallback_says_what_it_needs():
    run = _run(WITHOUT_TRITON)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "opguide::rms_norm_triton_aot: x is on cpu" in run.stdout
    assert "needs the JIT Triton route (opguide::rms_norm_triton)" in run.stdout
    assert "`import opguide.triton` registers it" in run.stdout


# -- fake against real (tests/test_fake_kernels.py's check) -----------------------------


def fake_cases(kit):
    """The cases of tests/test_fake_kernels.py for these operators (``kit``: that module).

    On CPU tensors the operators run the JIT route (in the interpreter); on a
    GPU, the kernels compiled ahead of time.
    """
    inv = kit.rms_norm_backward_args(lambda _: torch.float32)
    devices = kit.TRITON_DEVICES
    return {
        "rms_norm_triton_aot": kit.Case(devices, kit.TRITON_DTYPES, kit.rms_norm_args),
        "rms_norm_forward_triton_aot": kit.Case(devices, kit.TRITON_DTYPES, kit.rms_norm_args),
        "rms_norm_backward_triton_aot": kit.Case(devices, kit.TRITON_DTYPES, inv),
    }


def test_fake_matches_real_on_drawn_layouts():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    kit = pytest.importorskip("test_fake_kernels")
    cases = fake_cases(kit)

    @settings(max_examples=15, deadline=None, derandomize=True, database=None)
    @given(data=st.data())
    def check(data):
        name = data.draw(st.sampled_from(sorted(cases)), label="op")
        case = cases[name]
        if not case.devices:
            return
        device = data.draw(st.sampled_from(case.devices), label="device")
        dtype = data.draw(st.sampled_from(case.dtypes), label="dtype")
        args = case.build(data.draw, device, dtype)
        op = getattr(OPS, name).default
        kit.assert_fake_matches_real(op, lambda: tuple(kit.copy_layout(a, device) for a in args))

    if not kit.TRITON_DEVICES:
        pytest.skip("no device here runs the Triton operators")
    check()


# -- the CUDA source, compiled without a GPU --------------------------------------------


@pytest.mark.parametrize("source", ["triton_aot_cuda.cu", "triton_aot_launch.cu"])
def test_nvcc_compiles_the_cuda_sources(source):
    from guidekit import compile_checks

    result = compile_checks.nvcc_check(ROOT / "csrc" / "triton_aot" / source, with_torch=True)
    if result.status == "skipped":
        pytest.skip(result.reason)
    assert result.ok, result.summary() + "\n" + result.output[-6000:]


# The parameters the launcher passes (triton_aot_cuda.cu), "p" a pointer (8
# bytes) and "4" a 4-byte scalar: the kernel's non-constexpr arguments in
# order (N left out where it is the constexpr 1), then Triton's global and
# profile scratch pointers.
LAUNCHER_PARAMS = {
    # x, weight, y, inv_rms, M, N, eps
    ("rms_norm_forward", "N"): "pppp444pp",
    ("rms_norm_forward", "1"): "pppp44pp",
    # grad_y, x, weight, inv_rms, grad_x, grad_weight_partial, M, N
    ("rms_norm_backward", "N"): "pppppp44pp",
    ("rms_norm_backward", "1"): "pppppp4pp",
    # partial, grad_weight, P, N
    ("grad_weight_sum", "N"): "pp44pp",
    ("grad_weight_sum", "1"): "pp4pp",
}


def _kernel_params(cuobjdump: str, image: Path) -> str:
    """The image's kernel parameters by ordinal, as LAUNCHER_PARAMS spells them."""
    import re

    dump = subprocess.run([cuobjdump, "-elf", str(image)], capture_output=True, text=True).stdout
    found = {}
    for ordinal, size, space in re.findall(
        r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*0x[0-9a-f]+\s+Size\s*:\s*(0x[0-9a-f]+)"
        r"\s+Pointee's logAlignment\s*:\s*0x[0-9a-f]+\s+Space\s*:\s*(0x[0-9a-f]+)",
        dump,
    ):
        found[int(ordinal, 16)] = (
            "p" if int(space, 16) and int(size, 16) == 8 else str(int(size, 16))
        )
    return "".join(found[i] for i in sorted(found))


def check_launcher_params(tmp_path, want: dict) -> None:
    """Compiles the kernels ``want`` names for sm_90 at N = 1 and 1000 (bfloat16) and
    checks each image's parameters: ``want`` maps (kernel, ``"1"`` or ``"N"``) to them,
    spelt as :data:`LAUNCHER_PARAMS` spells them. Skips without cuobjdump."""
    from guidekit.compilers import find_cuobjdump

    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("cuobjdump not found (set CUDA_HOME, or install triton's wheel)")
    out = tmp_path / "aot"
    only = "".join(f", '--only', {k!r}" for k in sorted({k for k, _ in want}))
    run = _run(
        f"import sys; from opguide.triton import aot; sys.exit(aot.main(['--targets', 'sm_90', "
        f"'--out', {str(out)!r}, '--cols', '1,1000', '--dtypes', 'bfloat16', '--jobs', '1'"
        f"{only}]))",
        TRITON_INTERPRET="0",
    )
    assert run.returncode == 0, run.stderr[-4000:]
    import json

    artifacts = json.loads((out / "manifest.json").read_text())["artifacts"]
    seen = set()
    for a in artifacts:
        kernel, spec = a["key"].split("|")[0], a["key"].split("|")[4]
        spec = "1" if spec == "1" else "N"
        assert _kernel_params(cuobjdump, out / a["image"]) == want[kernel, spec], a["key"]
        assert a["function"].encode() in (out / a["image"]).read_bytes()
        seen.add((kernel, spec))
    assert seen == set(want)


def test_the_compiled_kernels_take_the_arguments_the_launcher_passes(tmp_path):
    check_launcher_params(tmp_path, LAUNCHER_PARAMS)


# -- CUDA: the compiled kernels ---------------------------------------------------------


def _cuda_route_ready(op: str = "opguide::rms_norm_triton_aot") -> tuple[bool, str]:
    """Whether the CUDA items of ``op``'s compiled kernels can run here, and why not."""
    if not torch.cuda.is_available():
        return False, "no GPU visible"
    if triton_ops.INTERPRET:
        return False, "TRITON_INTERPRET=1: the JIT route is not compiled for the GPU"
    if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
        return False, "this build of opguide has no CUDA kernels (a CPU build)"
    return True, ""


_READY, _WHY = _cuda_route_ready()
cuda_route = pytest.mark.skipif(not _READY, reason=_WHY)
CHECKS = getattr(torch.ops, "opguide_checks", None)


def _device_facts() -> dict:
    x = torch.empty(1, device="cuda")
    target, sms, smem, gdc, held = CHECKS.triton_aot_device(x)
    return {"target": target, "sms": int(sms), "smem": int(smem), "gdc": gdc == "1",
            "held": [t for t in held.split(", ") if t]}  # fmt: skip


def _require_artifacts():
    facts = _device_facts()
    if facts["target"] not in facts["held"]:
        pytest.skip(
            f"this build holds no kernels compiled ahead of time for {facts['target']} "
            f"(it holds {facts['held'] or 'none'}): build it for this GPU "
            "(setup.py's targets)"
        )
    if not facts["gdc"] and os.environ.get("OPGUIDE_PDL") == "0":
        pytest.skip("OPGUIDE_PDL=0: the table's sm_90+ kernels are compiled with GDC")
    return facts


class NoJit:
    """Makes every launch of the JIT route fail while entered (opguide/triton/ops.py's
    ``launchable`` wraps each one; ``module``: another operator's module that
    imported it), and counts the attempts."""

    def __init__(self, module=None):
        self.calls = []
        self.module = module or jit

    def __enter__(self):
        def refuse(kernel):
            self.calls.append(kernel.__name__ if hasattr(kernel, "__name__") else str(kernel))
            raise AssertionError(f"the JIT route launched {self.calls[-1]}")

        self._patch = mock.patch.object(self.module, "launchable", refuse)
        self._patch.__enter__()
        return self

    def __exit__(self, *exc):
        self._patch.__exit__(*exc)


@interpreter
def test_no_jit_sees_a_jit_launch():
    # The check the CUDA items use to show an AOT call runs no JIT kernel can fail.
    x, w = make_inputs((2, 8))
    with pytest.raises(AssertionError, match="the JIT route launched"), NoJit() as seen:
        OPS.rms_norm_triton(x, w, EPS)
    assert seen.calls


CUDA_SHAPES = [(1, 4096), (8192, 4096), (65536, 1024), (7, 4104), (33, 1000), (5, 1), (3, 2, 768)]
CUDA_IDS = ["x".join(map(str, s)) for s in CUDA_SHAPES]


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize("direction", ["forward", "inference", "backward"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", CUDA_SHAPES + [(1, 8192), (2, 16384)], ids=str)
def test_cpp_keys_are_the_build_keys_of_the_jit_plans(shape, dtype, direction):
    from opguide.triton import aot

    x = torch.empty(shape, dtype=dtype, device="cuda")
    facts = _device_facts()
    props = torch.cuda.get_device_properties(x.device)
    if torch.version.hip is None:
        assert facts["target"] == f"sm_{props.major}{props.minor}"
    else:
        assert facts["target"] == props.gcnArchName.split(":")[0]
    assert facts["sms"] == props.multi_processor_count
    assert facts["smem"] == getattr(props, "shared_memory_per_block_optin", 0)
    pdl = launch.pdl_options(x)
    assert facts["gdc"] == bool(pdl.get("GDC"))
    n, m = shape[-1], x.numel() // shape[-1]
    got = CHECKS.triton_aot_route(direction, x)
    p = plans.plan("backward" if direction == "backward" else "forward", x, m, n)
    if not isinstance(p.config, launch.Registers):
        assert got[0] == "fallback" and "longer than" in got[1]
        return
    c, gdc, t = p.config, int(bool(pdl.get("GDC"))), facts["target"]
    if direction == "backward":
        cx = {"BLOCK_N": c.block_n, "ROWS": c.rows, "STAGES": c.stages, "GDC": gdc}
        want = [aot.key("rms_norm_backward", t, dtype, {**cx, "ALIGN": p.align}, n, c.num_warps)]
        if p.sum_grid or dtype != torch.float32:
            s = launch.GRAD_WEIGHT_SUM
            cx = {"BLOCK_P": s.block_p, "BLOCK_N": s.block_n, "GDC": gdc, "ALIGN": p.align}
            want.append(aot.key("grad_weight_sum", t, dtype, cx, n, s.num_warps))
    else:
        cx = {"BLOCK_N": c.block_n, "ROWS": c.rows, "STORE_INV": direction == "forward"}
        cx.update(GDC=gdc, ALIGN=p.align)
        want = [aot.key("rms_norm_forward", t, dtype, cx, n, c.num_warps)]
    assert got[0::2] == want
    if t in facts["held"]:
        assert set(got[1::2]) == {"found"}, got


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=CUDA_IDS)
def test_cuda_forward_matches_the_jit_route_and_the_reference(shape, dtype):
    _require_artifacts()
    x, w = make_inputs(shape, dtype, device="cuda")
    with NoJit():
        y = OPS.rms_norm_triton_aot(x, w, EPS)
        y2, inv_rms = OPS.rms_norm_forward_triton_aot(x, w, EPS)
    y_jit, inv_jit = OPS.rms_norm_forward_triton(x, w, EPS)
    # The same kernels with the same plans: the same bits.
    torch.testing.assert_close(y, OPS.rms_norm_triton(x, w, EPS), rtol=0, atol=0)
    torch.testing.assert_close((y2, inv_rms), (y_jit, inv_jit), rtol=0, atol=0)
    assert y.is_contiguous() and inv_rms.shape == shape[:-1] and inv_rms.dtype == torch.float32
    ref = rms_norm_reference(x.double(), w.double(), EPS)
    torch.testing.assert_close(y.double(), ref, **TOLERANCES[dtype])


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=CUDA_IDS)
def test_cuda_backward_matches_the_jit_route_and_the_reference(shape, dtype):
    _require_artifacts()
    x, w = make_inputs(shape, dtype, device="cuda")
    g = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype).cuda()
    _, inv_rms = OPS.rms_norm_forward_triton(x, w, EPS)
    with NoJit():
        grad_x, grad_weight = OPS.rms_norm_backward_triton_aot(g, x, w, inv_rms)
    want = OPS.rms_norm_backward_triton(g, x, w, inv_rms)
    torch.testing.assert_close((grad_x, grad_weight), want, rtol=0, atol=0)
    assert grad_weight.dtype == dtype and grad_weight.shape == (shape[-1],)
    assert_grads_close((grad_x, grad_weight), reference_grads(x, w, g, EPS))


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_autograd_runs_the_compiled_kernels(dtype):
    _require_artifacts()
    x, w = make_inputs((64, 1000), dtype, device="cuda", requires_grad=True)
    g = torch.randn(64, 1000, device="cuda").to(dtype)
    with NoJit():
        y = OPS.rms_norm_triton_aot(x, w, EPS)
        y.backward(g)
    assert_grads_close((x.grad, w.grad), reference_grads(x, w, g, EPS))
    xj, wj = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    OPS.rms_norm_triton(xj, wj, EPS).backward(g)
    torch.testing.assert_close((x.grad, w.grad), (xj.grad, wj.grad), rtol=0, atol=0)


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize("name", NAMES)
def test_cuda_opcheck(name):
    x, w = make_inputs((4, 3, 512), torch.bfloat16, device="cuda", requires_grad=name != NAMES[2])
    if name == NAMES[2]:
        _, inv_rms = OPS.rms_norm_forward_triton(x, w, EPS)
        args = (torch.randn_like(x), x, w, inv_rms)
    else:
        args = (x, w, EPS)
    torch.library.opcheck(getattr(OPS, name).default, args)


@pytest.mark.cuda
@cuda_route
def test_cuda_compile_and_graph_replay():
    _require_artifacts()
    x, w = make_inputs((256, 4096), torch.bfloat16, device="cuda")
    want = OPS.rms_norm_triton(x, w, EPS)
    compiled = torch.compile(lambda x, w: OPS.rms_norm_triton_aot(x, w, EPS) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(x, w), want * 2, rtol=0, atol=0)
    # Captured into a CUDA graph (the launches carry the PDL attribute on sm_90+).
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        OPS.rms_norm_triton_aot(static_x, w, EPS)  # loads the kernel before the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = OPS.rms_norm_triton_aot(static_x, w, EPS)
    static_x.copy_(x * 3)
    graph.replay()
    torch.testing.assert_close(out, OPS.rms_norm_triton(x * 3, w, EPS), rtol=0, atol=0)


@pytest.mark.cuda
@cuda_route
def test_cuda_misaligned_input_takes_the_jit_route(capfd):
    x, w = make_inputs((9, 256), torch.float16, device="cuda")
    view = x.flatten()[1:].view(-1)[: 8 * 256].view(8, 256)  # 2 bytes past a boundary
    try:
        torch.set_warn_always(True)
        y = OPS.rms_norm_triton_aot(view, w, EPS)
    finally:
        torch.set_warn_always(False)
    assert "does not start on a 16-byte boundary" in capfd.readouterr().err
    torch.testing.assert_close(y, OPS.rms_norm_triton(view, w, EPS), rtol=0, atol=0)


def _run(code: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python (warnings once per process; variables read once)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, **env},
    )  # fmt: skip


LONG_ROWS = """
    import torch, opguide, opguide.triton
    from opguide.testing import make_inputs
    x, w = make_inputs((64, 20000), torch.bfloat16, device="cuda")
    op = torch.ops.opguide
    a = op.rms_norm_forward_triton_aot(x, w, 1e-6)
    b = op.rms_norm_forward_triton_aot(x, w, 1e-6)
    want = op.rms_norm_forward_triton(x, w, 1e-6)
    for got in (a, b):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    g = torch.randn_like(x)
    torch.testing.assert_close(op.rms_norm_backward_triton_aot(g, x, w, want[1]),
                               op.rms_norm_backward_triton(g, x, w, want[1]), rtol=0, atol=0)
    print("ok")
"""


@pytest.mark.cuda
@cuda_route
def test_cuda_long_rows_take_the_jit_route_and_say_so_once():
    run = _run(LONG_ROWS)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-4000:]
    said = [line for line in run.stderr.splitlines() if "rms_norm_forward_triton_aot" in line]
    assert len(said) == 1, run.stderr[-4000:]
    assert "rows of 20000 elements are longer than the 16384" in said[0]
    assert "the JIT Triton route runs (opguide::rms_norm_forward_triton)" in said[0]
    assert "rows of 20000 elements are longer than the 8192" in run.stderr


EMPTY_TABLE = """
    import torch, opguide, opguide.triton
    from opguide.testing import make_inputs
    x, w = make_inputs((8, 4096), torch.bfloat16, device="cuda")
    op = torch.ops.opguide
    torch.testing.assert_close(op.rms_norm_triton_aot(x, w, 1e-6),
                               op.rms_norm_triton(x, w, 1e-6), rtol=0, atol=0)
    print("ok")
"""


@pytest.mark.cuda
@cuda_route
@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"OPGUIDE_TRITON_AOT_TABLE": "0"}, "OPGUIDE_TRITON_AOT_TABLE=0 turns the table"),
        ({"OPGUIDE_PDL": "0"}, None),
    ],
    ids=["empty-table", "pdl-off"],
)
def test_cuda_a_table_without_the_kernel_takes_the_jit_route(env, reason):
    facts = _device_facts()
    if "OPGUIDE_PDL" in env and not facts["gdc"]:
        pytest.skip("no PDL on this GPU: OPGUIDE_PDL=0 changes no key")
    if "OPGUIDE_PDL" in env:
        reason = "GDC=0" if facts["target"] in facts["held"] else "no artifact for"
    run = _run(EMPTY_TABLE, **env)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-4000:]
    assert reason in run.stderr and "the JIT Triton route runs" in run.stderr, run.stderr[-4000:]
