"""Tests of ``opguide.fused_add_rms_norm_``: an in-place, two-output operator with
optional arguments, in C++ (CPU), CUDA and Triton.

The residual must be updated in place (same storage, exact values), the two
outputs must match the reference, opcheck must pass for each variant of the
optional arguments, and torch.compile must keep the in-place update visible.
"""

from __future__ import annotations

import pytest
import torch

import opguide
from opguide import fused_add_rms_norm_reference
from opguide.backends import TRITON_INSTALLED

if TRITON_INSTALLED:
    from opguide.triton import INTERPRET
else:
    INTERPRET = False

needs_interpreter = pytest.mark.skipif(
    not INTERPRET,
    reason="the Triton backend runs CPU tensors in Triton's interpreter, which is off "
    "in this process (triton missing, or a GPU is visible; set TRITON_INTERPRET=1)",
)
needs_compiled_triton = pytest.mark.skipif(
    not TRITON_INSTALLED or (INTERPRET and torch.cuda.is_available()),
    reason="needs triton, with TRITON_INTERPRET unset",
)
# Backends for CPU tensors; the Triton one runs in the interpreter (small shapes).
CPU_BACKENDS = ["cpp", pytest.param("triton", marks=needs_interpreter)]
CUDA_BACKENDS = ["cpp", pytest.param("triton", marks=needs_compiled_triton)]

TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
}
# (x dtype, residual dtype, out_dtype): same dtype, a float32 residual stream
# under half precision, and an output dtype other than that of x.
DTYPE_CASES = [
    (torch.float32, torch.float32, None),
    (torch.float16, torch.float16, None),
    (torch.bfloat16, torch.bfloat16, None),
    (torch.bfloat16, torch.float32, None),
    (torch.float16, torch.float32, torch.float32),
    (torch.float32, torch.float32, torch.bfloat16),
]
CPU_ONLY_DTYPE_CASES = [
    (torch.float64, torch.float64, None),
    (torch.float64, torch.float64, torch.float16),
]


def case_id(case):
    x, r, o = case
    name = f"x={str(x)[6:]}-res={str(r)[6:]}"
    return name + (f"-out={str(o)[6:]}" if o is not None else "")


def make_inputs(shape, x_dtype, res_dtype, device="cpu", weight=True, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype=x_dtype, device=device)
    residual = torch.randn(shape, generator=gen).to(dtype=res_dtype, device=device)
    w = torch.randn(shape[-1], generator=gen).to(dtype=x_dtype, device=device) if weight else None
    return x, residual, w


class _FusedAddRmsNorm(torch.nn.Module):
    def forward(self, x, residual, weight):
        return opguide.fused_add_rms_norm_(x, residual, weight)


def default_call() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A module calling the public function with its default arguments, and inputs
    for it: what tests/test_compiled_form.py exports and tests/test_across_pytorch.py
    packages with AOTInductor, for every operator of the registry."""
    return _FusedAddRmsNorm(), make_inputs((4, 32), torch.float32, torch.float32)


def check_against_reference(x, residual, w, out_dtype, backend, eps=1e-6):
    before = residual.clone()
    storage = residual.data_ptr()
    out, inv_rms = opguide.fused_add_rms_norm_(x, residual, w, eps, out_dtype, backend=backend)
    ref_out, ref_inv, ref_residual = fused_add_rms_norm_reference(x, before, w, eps, out_dtype)
    # In place: the same storage now holds exactly x + residual, rounded once.
    assert residual.data_ptr() == storage
    exact = dict(atol=0, rtol=0)
    inv_tol = TOLERANCES[inv_rms.dtype]
    if backend == "triton" and INTERPRET and residual.dtype == torch.bfloat16:
        # Triton's interpreter truncates float32 to bfloat16 (a GPU rounds to
        # nearest): the stored sum may be 1 ulp off, and so what follows.
        exact = dict(atol=0, rtol=2**-7)
        inv_tol = TOLERANCES[torch.bfloat16]
    torch.testing.assert_close(residual, ref_residual, **exact)
    assert not torch.equal(residual, before)
    assert out.dtype == (x.dtype if out_dtype is None else out_dtype)
    assert out.shape == x.shape and inv_rms.shape == x.shape[:-1]
    torch.testing.assert_close(out, ref_out, **TOLERANCES[out.dtype])
    torch.testing.assert_close(inv_rms, ref_inv, **inv_tol)


# -- CPU -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("case", DTYPE_CASES, ids=case_id)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (4, 40), (2, 3, 33)], ids=str)
def test_matches_reference(shape, case, backend):
    x_dtype, res_dtype, out_dtype = case
    x, residual, w = make_inputs(shape, x_dtype, res_dtype)
    check_against_reference(x, residual, w, out_dtype, backend)


@pytest.mark.parametrize("case", CPU_ONLY_DTYPE_CASES, ids=case_id)
def test_matches_reference_float64(case):
    x_dtype, res_dtype, out_dtype = case
    x, residual, w = make_inputs((5, 300), x_dtype, res_dtype)
    check_against_reference(x, residual, w, out_dtype, "cpp")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_large_rows_cpp_and_triton(backend):
    x, residual, w = make_inputs((3, 4096), torch.bfloat16, torch.float32)
    check_against_reference(x, residual, w, None, backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_weight_is_optional(backend):
    x, residual, w = make_inputs((4, 24), torch.float32, torch.float32)
    r1, r2 = residual.clone(), residual.clone()
    out_none, _ = opguide.fused_add_rms_norm_(x, r1, None, backend=backend)
    out_ones, _ = opguide.fused_add_rms_norm_(x, r2, torch.ones_like(w), backend=backend)
    torch.testing.assert_close(out_none, out_ones, atol=0, rtol=0)
    check_against_reference(x, residual, None, None, backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_strided_residual_is_updated_in_place(backend):
    x, _, w = make_inputs((6, 16), torch.float32, torch.float32)
    base = torch.randn(16, 6)
    residual = base.t()  # (6, 16), not contiguous: a view into base
    assert not residual.is_contiguous()
    expected = residual + x
    opguide.fused_add_rms_norm_(x, residual, w, backend=backend)
    torch.testing.assert_close(residual, expected, atol=0, rtol=0)
    torch.testing.assert_close(base.t(), expected, atol=0, rtol=0)  # the caller's buffer


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_repeated_calls_accumulate(backend):
    x, residual, w = make_inputs((3, 20), torch.float32, torch.float32)
    start = residual.clone()
    for _ in range(3):
        opguide.fused_add_rms_norm_(x, residual, w, backend=backend)
    torch.testing.assert_close(residual, start + 3 * x)


@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 4)], ids=str)
def test_empty(shape):
    x, residual, w = make_inputs(shape, torch.float32, torch.float32)
    out, inv_rms = opguide.fused_add_rms_norm_(x, residual, w)
    assert out.shape == x.shape and inv_rms.shape == x.shape[:-1]


OPCHECK_VARIANTS = [
    ("weight", torch.float32, torch.float32, True, None),
    ("no-weight", torch.float32, torch.float32, False, None),
    ("out-dtype", torch.bfloat16, torch.bfloat16, True, torch.float32),
    ("fp32-residual", torch.float16, torch.float32, True, None),
]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("variant", OPCHECK_VARIANTS, ids=[v[0] for v in OPCHECK_VARIANTS])
def test_opcheck(variant, backend):
    _, x_dtype, res_dtype, weight, out_dtype = variant
    x, residual, w = make_inputs((4, 24), x_dtype, res_dtype, weight=weight)
    op = (
        torch.ops.opguide.fused_add_rms_norm_.default
        if backend == "cpp"
        else torch.ops.opguide.fused_add_rms_norm_triton_.default
    )
    torch.library.opcheck(op, (x, residual, w, 1e-6, out_dtype))


def test_schema_says_what_is_written():
    schema = torch.ops.opguide.fused_add_rms_norm_.default._schema
    assert [a.name for a in schema.arguments if a.is_write] == ["residual"]
    assert len(schema.returns) == 2
    assert str(schema.arguments[2].type) == "Optional[Tensor]"
    assert schema.arguments[4].default_value is None


def test_fake_kernel_outputs():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 5, 8, dtype=torch.bfloat16)
        residual = torch.empty(3, 5, 8, dtype=torch.float32)
        out, inv_rms = torch.ops.opguide.fused_add_rms_norm_(x, residual, None, 1e-6, torch.float16)
    assert out.shape == (3, 5, 8) and out.dtype == torch.float16
    assert inv_rms.shape == (3, 5) and inv_rms.dtype == torch.float32


def _block(x, residual, w, backend):
    # A transformer block boundary: add, normalise, and read the residual again.
    out, inv_rms = opguide.fused_add_rms_norm_(x, residual, w, backend=backend)
    return out * 2, inv_rms, residual * 1  # reads residual *after* the update


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_compile_functionalizes_the_mutation(backend):
    torch._dynamo.reset()
    compiled = torch.compile(_block, fullgraph=True)
    x, residual, w = make_inputs((5, 32), torch.float32, torch.float32)
    r_eager, r_compiled = residual.clone(), residual.clone()
    for _ in range(2):  # the second call sees the first call's update
        expected = _block(x, r_eager, w, backend)
        got = compiled(x, r_compiled, w, backend)
        torch.testing.assert_close(r_compiled, r_eager, atol=0, rtol=0)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b)
    torch.testing.assert_close(r_compiled, residual + 2 * x)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_compile_with_a_view_as_residual(backend):
    # The mutated argument is a slice of a bigger buffer: functionalization has
    # to write the result back into the buffer.
    torch._dynamo.reset()

    def f(x, buf, w):
        out, _ = opguide.fused_add_rms_norm_(x, buf[1:3], w, backend=backend)
        return out

    compiled = torch.compile(f, fullgraph=True)
    x, _, w = make_inputs((2, 16), torch.float32, torch.float32)
    buf = torch.randn(4, 16)
    expected_buf = buf.clone()
    expected_buf[1:3] += x
    out = compiled(x, buf, w)
    torch.testing.assert_close(buf, expected_buf, atol=0, rtol=0)
    ref_out, _, _ = fused_add_rms_norm_reference(x, expected_buf[1:3] - x, w)
    torch.testing.assert_close(out, ref_out)


BAD_INPUTS = [
    (
        "integer x",
        lambda: (torch.ones(2, 4, dtype=torch.int32), torch.ones(2, 4), None, {}),
        TypeError,
        r"x must be a floating-point tensor .* got torch\.int32",
    ),
    (
        "residual shape",
        lambda: (torch.ones(2, 4), torch.ones(2, 5), None, {}),
        ValueError,
        r"residual must have the shape of x \(2, 4\), got \(2, 5\)",
    ),
    (
        "residual dtype",
        lambda: (
            torch.ones(2, 4, dtype=torch.bfloat16),
            torch.ones(2, 4, dtype=torch.float16),
            None,
            {},
        ),
        TypeError,
        r"residual must have the dtype of x \(torch\.bfloat16\) or torch\.float32, "
        r"got torch\.float16",
    ),
    (
        "weight dtype",
        lambda: (torch.ones(2, 4), torch.ones(2, 4), torch.ones(4, dtype=torch.float16), {}),
        TypeError,
        r"weight must have the dtype of x \(torch\.float32\), got torch\.float16",
    ),
    (
        "weight shape",
        lambda: (torch.ones(2, 4), torch.ones(2, 4), torch.ones(5), {}),
        ValueError,
        r"weight must have shape \(4,\) to match the last dimension of x, got \(5,\)",
    ),
    (
        "out_dtype",
        lambda: (torch.ones(2, 4), torch.ones(2, 4), None, {"out_dtype": torch.int64}),
        TypeError,
        r"out_dtype must be a floating-point dtype .* got torch\.int64",
    ),
    (
        "eps",
        lambda: (torch.ones(2, 4), torch.ones(2, 4), None, {"eps": -1.0}),
        ValueError,
        r"eps must be non-negative, got -1",
    ),
    (
        "expanded residual",
        lambda: (torch.ones(2, 4), torch.ones(1, 4).expand(2, 4), None, {}),
        RuntimeError,
        r"residual must not have elements that share memory",
    ),
    (
        "0-d x",
        lambda: (torch.tensor(1.0), torch.tensor(1.0), None, {}),
        ValueError,
        r"x must have at least one dimension",
    ),
    (
        "device",
        lambda: (torch.ones(2, 4), torch.ones(2, 4, device="meta"), None, {}),
        RuntimeError,
        r"residual must be on the device of x \(cpu\), got meta",
    ),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_public_api(case):
    _, make, exc, message = case
    x, residual, w, kwargs = make()
    with pytest.raises(exc, match=message):
        opguide.fused_add_rms_norm_(x, residual, w, **kwargs)


@pytest.mark.parametrize("case", BAD_INPUTS[:-1], ids=[c[0] for c in BAD_INPUTS[:-1]])
def test_bad_input_cpp_checks(case):
    # The C++ checks say the same when the operator is called directly.
    _, make, exc, message = case
    x, residual, w, kwargs = make()
    eps = kwargs.get("eps", 1e-6)
    with pytest.raises(exc, match=message):
        torch.ops.opguide.fused_add_rms_norm_(x, residual, w, eps, kwargs.get("out_dtype"))


@needs_interpreter
def test_triton_rejects_float64():
    x, residual, w = make_inputs((2, 8), torch.float64, torch.float64)
    with pytest.raises(TypeError, match=r"Triton backend supports float32, float16 and bfloat16"):
        opguide.fused_add_rms_norm_(x, residual, w, backend="triton")


# -- CUDA ----------------------------------------------------------------------------------

CUDA_SHAPES = [(1, 1), (3, 7), (64, 1000), (16, 4096), (4, 8192), (7, 5000), (2, 3, 768)]
# Long rows: over thread-block clusters on sm_90 and later (the CUDA kernel,
# csrc/fused_add_rms_norm/fused_add_rms_norm.cuh) and over programs that
# meet through memory (Triton):
# cluster sizes 2 to 16, more rows than clusters fit at once, a last block
# with part of a slice (65544), and no weight (NO_WEIGHT).
LONG_CUDA_SHAPES = [(3, 65536), (300, 65536), (2, 131072), (1, 262144), (5, 65544)]
NO_WEIGHT = (3, 65536)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("case", DTYPE_CASES, ids=case_id)
@pytest.mark.parametrize(
    "shape", CUDA_SHAPES + LONG_CUDA_SHAPES, ids=lambda s: "x".join(map(str, s))
)
def test_cuda_matches_reference(shape, case, backend):
    x_dtype, res_dtype, out_dtype = case
    x, residual, w = make_inputs(
        shape, x_dtype, res_dtype, device="cuda", weight=shape != NO_WEIGHT
    )
    check_against_reference(x, residual, w, out_dtype, backend)


@pytest.mark.cuda
@pytest.mark.parametrize("case", CPU_ONLY_DTYPE_CASES, ids=case_id)
def test_cuda_float64(case):
    x_dtype, res_dtype, out_dtype = case
    x, residual, w = make_inputs((5, 300), x_dtype, res_dtype, device="cuda")
    check_against_reference(x, residual, w, out_dtype, "cpp")


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_cuda_unaligned_and_strided(backend):
    # Dense tensors that start one element into their storage are not 16-byte
    # aligned: the CUDA kernel must take its scalar path and still be right.
    def misaligned(t):
        flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = flat[1:].view(t.shape)
        view.copy_(t)
        return view

    x, residual, w = make_inputs((8, 1024), torch.float16, torch.float16, device="cuda")
    x, residual, w = misaligned(x), misaligned(residual), misaligned(w)
    assert x.is_contiguous() and x.data_ptr() % 16 != 0
    check_against_reference(x, residual, w, None, backend)
    # A strided residual is updated through a dense copy that is written back.
    x, residual, w = make_inputs((4, 96), torch.bfloat16, torch.float32, device="cuda")
    check_against_reference(x, residual.t().contiguous().t(), w, None, backend)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("case", DTYPE_CASES, ids=case_id)
@pytest.mark.parametrize("n", [2052, 2050, 2049, 12300])
@pytest.mark.parametrize("offset", [0, 2])
def test_cuda_narrow_accesses(offset, n, case, backend):
    # Rows that are not whole 16-byte vectors, or start 2 elements off a
    # 16-byte boundary: 8-byte, 4-byte or one-element accesses (step 11,
    # "Odd row lengths"), for every dtype combination.
    x_dtype, res_dtype, out_dtype = case
    x, residual, w = make_inputs((37, n), x_dtype, res_dtype, device="cuda")

    def moved(t):  # the same values, `offset` elements into a buffer
        view = torch.empty(t.numel() + offset, dtype=t.dtype, device=t.device)[offset:]
        return view.view(t.shape).copy_(t)

    check_against_reference(moved(x), moved(residual), moved(w), out_dtype, backend)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("variant", OPCHECK_VARIANTS, ids=[v[0] for v in OPCHECK_VARIANTS])
def test_cuda_opcheck(variant, backend):
    _, x_dtype, res_dtype, weight, out_dtype = variant
    x, residual, w = make_inputs((8, 256), x_dtype, res_dtype, device="cuda", weight=weight)
    op = (
        torch.ops.opguide.fused_add_rms_norm_.default
        if backend == "cpp"
        else torch.ops.opguide.fused_add_rms_norm_triton_.default
    )
    torch.library.opcheck(op, (x, residual, w, 1e-6, out_dtype))


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_cuda_compile_functionalizes_the_mutation(backend):
    torch._dynamo.reset()
    compiled = torch.compile(_block, fullgraph=True)
    x, residual, w = make_inputs((64, 1024), torch.bfloat16, torch.float32, device="cuda")
    r_eager, r_compiled = residual.clone(), residual.clone()
    for _ in range(2):
        expected = _block(x, r_eager, w, backend)
        got = compiled(x, r_compiled, w, backend)
        torch.testing.assert_close(r_compiled, r_eager, atol=0, rtol=0)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b, **TOLERANCES[a.dtype])


@pytest.mark.cuda
def test_cuda_on_a_second_stream():
    # The kernel launches on the current stream, so work queued there is ordered.
    x, residual, w = make_inputs((32, 2048), torch.float32, torch.float32, device="cuda")
    before = residual.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out, _ = opguide.fused_add_rms_norm_(x, residual, w)
        out2 = out * 1
    torch.cuda.current_stream().wait_stream(stream)
    ref_out, _, ref_residual = fused_add_rms_norm_reference(x, before, w)
    torch.testing.assert_close(out2, ref_out)
    torch.testing.assert_close(residual, ref_residual, atol=0, rtol=0)
