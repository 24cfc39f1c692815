"""Every opguide operator's fake kernel describes the outputs its real kernel returns.

``torch.compile`` never runs an operator while it traces: it runs the
operator's fake kernel (``register_fake``) on fake tensors, and builds the
graph from the shape, strides, dtype and device that the fake returns. When
the fake says "contiguous" and the kernel returns the strides of its input
(or the reverse), the compiled program reads the output with the wrong
strides: a silent wrong answer, or an ``assert_size_stride`` failure at run
time. This file proves, for every operator of the ``torch.ops.opguide``
namespace and every device here that runs it:

* for inputs drawn by Hypothesis (1-D to 3-D, dimensions of size 0 and 1,
  empty tensors; transposed, sliced with a step, expanded where the operator
  allows it, and views that start mid-storage; every dtype the operator
  takes), each output of the fake kernel, run under
  :class:`~torch._subclasses.fake_tensor.FakeTensorMode` on the same inputs,
  has the shape, strides, storage offset, dtype and device of the real
  kernel's output;
* an operator that writes an input (``Tensor(a!)``) leaves that input's
  metadata (shape, strides, storage offset, dtype, device) alone, in the fake
  kernel and in the real one;
* the public functions :func:`opguide.rms_norm` (backends ``"cpp"`` and
  ``"triton"``) and :func:`opguide.fused_add_rms_norm_` (both backends), called
  with ``compiled="kernel"`` so that the graph holds the operator, under
  ``torch.compile(fullgraph=True)``, return outputs with the strides, dtype and
  values of eager mode, and the written ``residual`` keeps its strides and
  gets eager's values: "aot_eager" over several layouts (the compile path
  itself changes no layout), and "inductor" once per function and backend,
  on a layout it must not assume contiguous. The compiled function also
  uses the outputs (``y * 2``): Inductor's generated code reads them with
  the fake kernel's strides, and its size and stride assertion fails when
  the real kernel's differ.

The fake mode runs with ``allow_fallback_kernels=False``, so an operator
without a fake kernel fails here instead of being run for real on zeros, and
with a ``ShapeEnv``, so a fake kernel may return a size that depends on the
data (an unbacked SymInt, from ``torch.library.get_ctx().new_dynamic_size()``):
such a size equals whatever the real kernel returns, and every other size is
compared exactly. The fake inputs keep the real inputs' sizes
(``static_shapes``).

The operators are found in the dispatcher, not listed by hand: an operator of
the namespace with no entry in ``CASES`` fails
``test_every_operator_has_a_case``. The last tests show that the checks fail
on a fake kernel that lies about strides, dtype or a size beside one the data
decides, and on an operator without a case, and that they take a size the
data decides.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import math
import os
import sys
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, has_free_unbacked_symbols

import opguide
from opguide import registry
from opguide.backends import compiled_device_types, triton_ready

NAMESPACE = "opguide"
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
FLOATING = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# A bounded number of examples, always the same ones: the Triton operators
# run in Triton's interpreter on CPU (about 1 s for 100 tiny examples), and
# CI must fail the same way every time.
FAKE_SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None)


def namespace_operators(namespace: str) -> set[str]:
    """Names of every operator registered in ``namespace``, from the dispatcher.

    Iterating ``torch.ops.<namespace>`` lists only the operators that Python
    has already looked up, so the dispatcher's list is the one to trust.
    """
    found = set()
    for qualname in torch._C._dispatch_get_all_op_names():
        ns, _, name = qualname.partition("::")
        if ns == namespace:
            found.add(name)
    return found


def written_arguments(op: torch._ops.OpOverload) -> tuple[int, ...]:
    """Positions of the arguments that the schema of ``op`` says it writes (``(a!)``)."""
    return tuple(
        i
        for i, a in enumerate(op._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )


# ---------------------------------------------------------------------------
# Inputs: any shape, any layout.


@st.composite
def batch_shapes(draw) -> tuple[int, ...]:
    """The leading dimensions of ``x``: none to two, of size 0 to 3."""
    return tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))


ROW_LENGTHS = st.sampled_from([0, 1, 2, 5, 8, 33])


@st.composite
def strided(
    draw,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    *,
    expand: bool = True,
    dense: bool = False,
) -> torch.Tensor:
    """A tensor of ``shape`` whose layout Hypothesis chooses.

    Its memory order is a permutation of its dimensions (transposed), each
    dimension may be sliced with step 2, dimensions may be expanded from size 1
    (stride 0; only with ``expand``), and the view may start mid-storage. With
    ``dense`` the tensor is contiguous, though it may still start mid-storage.
    """
    ndim = len(shape)
    if dense:
        perm, steps, expanded = list(range(ndim)), [1] * ndim, set()
    else:
        perm = draw(st.permutations(range(ndim)))
        steps = [draw(st.sampled_from([1, 1, 2])) for _ in range(ndim)]
        can_expand = [d for d in range(ndim) if shape[d] != 1] if expand else []
        expanded = draw(st.sets(st.sampled_from(can_expand))) if can_expand else set()
    offset = draw(st.sampled_from([0, 0, 3]))
    base = [1 if d in expanded else shape[d] * steps[d] for d in range(ndim)]
    stored = [base[p] for p in perm]
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    storage = torch.randn(offset + math.prod(stored), generator=gen).to(dtype)
    t = storage[offset:].view(stored).permute(tuple(perm.index(d) for d in range(ndim)))
    t = t[tuple(slice(None, None, s) for s in steps)].expand(shape)
    assert t.shape == shape, (t.shape, shape)
    return t if device == "cpu" else copy_layout(t, device)


def copy_layout(t, device):
    """A copy of ``t`` on ``device`` in storage of its own, with the same strides and offset.

    ``clone()`` and ``.to()`` keep the strides of dense tensors only; this
    copies the whole storage and rebuilds the view, so the layout drawn is
    the layout tested. Anything but a tensor is returned as is.
    """
    if not isinstance(t, torch.Tensor):
        return t
    storage = t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    return storage.to(device, copy=True).as_strided(t.shape, t.stride(), t.storage_offset())


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# Argument builders: draw(device, dtype) -> the operator's positional arguments.
def rms_norm_args(draw, device, dtype):
    batch, n = draw(batch_shapes()), draw(ROW_LENGTHS)
    x = draw(strided((*batch, n), dtype, device))
    weight = draw(strided((n,), dtype, device))
    return x, weight, 1e-6


def rms_norm_backward_args(inv_dtype: Callable[[torch.dtype], torch.dtype]):
    def build(draw, device, dtype):
        batch, n = draw(batch_shapes()), draw(ROW_LENGTHS)
        grad_y = draw(strided((*batch, n), dtype, device))
        x = draw(strided((*batch, n), dtype, device))
        weight = draw(strided((n,), dtype, device))
        inv_rms = draw(strided(batch, inv_dtype(dtype), device))
        return grad_y, x, weight, inv_rms

    return build


def fused_args(out_dtypes: tuple[torch.dtype, ...], row_lengths=ROW_LENGTHS):
    def build(draw, device, dtype):
        batch, n = draw(batch_shapes()), draw(row_lengths)
        x = draw(strided((*batch, n), dtype, device))
        residual_dtype = draw(st.sampled_from(sorted({dtype, torch.float32}, key=str)))
        # Written in place: no two elements may share memory, so no expand.
        residual = draw(strided((*batch, n), residual_dtype, device, expand=False))
        weight = draw(st.none() | strided((n,), dtype, device))
        out_dtype = draw(st.none() | st.sampled_from(out_dtypes))
        return x, residual, weight, 1e-6, out_dtype

    return build


# ---------------------------------------------------------------------------
# The table: one case per operator of the namespace.


def _devices(*candidates: str) -> tuple[str, ...]:
    return tuple(d for d in candidates if d == "cpu" or torch.cuda.is_available())


CPP_DEVICES = tuple(d for d in _devices("cpu", "cuda") if d in compiled_device_types("rms_norm"))
FUSED_DEVICES = tuple(
    d for d in _devices("cpu", "cuda") if d in compiled_device_types("fused_add_rms_norm_")
)
# Triton kernels run on CPU tensors only in Triton's interpreter.
TRITON_DEVICES = _devices("cpu" if INTERPRET else "cuda") if triton_ready() else ()


@dataclasses.dataclass(frozen=True)
class Case:
    """How to call one operator: the devices and dtypes it takes, and an argument builder."""

    devices: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    build: Callable  # (draw, device, dtype) -> positional arguments


CASES: dict[str, Case] = {
    "rms_norm": Case(CPP_DEVICES, FLOATING, rms_norm_args),
    "rms_norm_forward": Case(CPP_DEVICES, FLOATING, rms_norm_args),
    "rms_norm_backward": Case(CPP_DEVICES, FLOATING, rms_norm_backward_args(acc_dtype)),
    "fused_add_rms_norm_": Case(FUSED_DEVICES, FLOATING, fused_args(FLOATING)),
    "rms_norm_triton": Case(TRITON_DEVICES, TRITON_DTYPES, rms_norm_args),
    "rms_norm_forward_triton": Case(TRITON_DEVICES, TRITON_DTYPES, rms_norm_args),
    "rms_norm_backward_triton": Case(
        TRITON_DEVICES, TRITON_DTYPES, rms_norm_backward_args(lambda _: torch.float32)
    ),
    "fused_add_rms_norm_triton_": Case(TRITON_DEVICES, TRITON_DTYPES, fused_args(TRITON_DTYPES)),
    # The same kernels compiled ahead of time (csrc/triton_aot/), launched from C++.
    "rms_norm_triton_aot": Case(TRITON_DEVICES, TRITON_DTYPES, rms_norm_args),
    "rms_norm_forward_triton_aot": Case(TRITON_DEVICES, TRITON_DTYPES, rms_norm_args),
    "rms_norm_backward_triton_aot": Case(
        TRITON_DEVICES, TRITON_DTYPES, rms_norm_backward_args(lambda _: torch.float32)
    ),
}


def _own_cases() -> dict[str, Case]:
    """The cases of the registry's other operators: ``fake_cases(kit)`` in each one's
    own ``tests/test_<name>.py``, given this module for its builders."""
    found = {}
    for op in registry.OPERATORS:
        if set(op.ops) <= set(CASES) or importlib.util.find_spec(f"test_{op.name}") is None:
            continue
        own = getattr(importlib.import_module(f"test_{op.name}"), "fake_cases", None)
        found.update(own(sys.modules[__name__]) if own else {})
    return found


CASES.update(_own_cases())


def operators_without_a_case(namespace: str, cases: dict) -> list[str]:
    """The operators of ``namespace`` that ``cases`` does not cover (every overload counts)."""
    missing = []
    for name in sorted(namespace_operators(namespace)):
        # getattr, not the namespace's __getattr__: that one builds a new packet
        # and puts it in place of the one the library registered its FLOP
        # formulas for (a new packet hashes differently).
        overloads = getattr(getattr(torch.ops, namespace), name).overloads()
        # A case calls the default overload; any other overload needs one of its own.
        if name not in cases or overloads != ["default"]:
            missing.append(name)
    return missing


def test_every_operator_has_a_case():
    missing = operators_without_a_case(NAMESPACE, CASES)
    assert missing == [], (
        f"operators of torch.ops.{NAMESPACE} with no case in CASES: {missing}; "
        "add an argument builder for each"
    )
    found = namespace_operators(NAMESPACE)
    # The Triton operators exist only when Triton could be loaded.
    expected = set(CASES) - (set() if triton_ready() else {n for n in CASES if "triton" in n})
    assert expected - found == set(), f"CASES names operators that do not exist: {expected - found}"


# ---------------------------------------------------------------------------
# The comparison.


def metadata(t: torch.Tensor) -> dict:
    """Everything about ``t`` but its values, exactly."""
    return {
        "shape": tuple(t.shape),
        "stride": tuple(t.stride()),
        "storage_offset": t.storage_offset(),
        "dtype": t.dtype,
        "device": t.device,
    }


def output_metadata(t: torch.Tensor, like: torch.Tensor | None = None) -> dict:
    """``metadata(t)`` with the strides that address an element only.

    The stride of a dimension of size 1, and every stride of an empty tensor,
    reaches no element, and PyTorch's own tensors do not agree on them: eager
    ``empty_like`` of an empty tensor keeps its strides, the fake one does not.
    So, as PyTorch's fake-tensor checks do (``check_significant_strides``),
    those strides are left out; every other one must match.

    ``like`` is the real kernel's output when ``t`` is the fake kernel's. A
    size, stride or offset of ``t`` that holds an unbacked SymInt depends on
    the data, which the fake kernel cannot see: it reads as ``like``'s, so it
    equals whatever the real kernel returned. Every other one is an int, kept
    to be compared exactly.
    """
    meta = metadata(t)
    if like is not None:
        if t.dim() != like.dim():
            return meta  # the shapes differ, which the comparison reports first

        def known(f, r):
            return r if has_free_unbacked_symbols(f) else f

        real = metadata(like)
        meta["shape"] = tuple(map(known, meta["shape"], real["shape"]))
        meta["stride"] = tuple(map(known, meta["stride"], real["stride"]))
        meta["storage_offset"] = known(meta["storage_offset"], real["storage_offset"])
    shape = meta["shape"]
    meta["stride"] = (
        tuple(s if n > 1 else None for n, s in zip(shape, meta["stride"], strict=True))
        if math.prod(shape) > 0
        else None
    )
    return meta


def _flat(out) -> list:
    if out is None:
        return []
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_fake_matches_real(op, make_args: Callable[[], tuple]) -> None:
    """Runs ``op`` for real and under FakeTensorMode on the same inputs; compares the metadata.

    ``make_args()`` returns fresh inputs (an operator may write them). Raises
    AssertionError naming the output and the field that differ.
    """
    real_args = make_args()
    fake_source = make_args()
    written = written_arguments(op)
    with FakeTensorMode(
        allow_fallback_kernels=False, shape_env=ShapeEnv(), static_shapes=True
    ) as mode:
        fake_args = tuple(
            mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in fake_source
        )
    for i, (f, r) in enumerate(zip(fake_args, real_args, strict=True)):
        if isinstance(r, torch.Tensor):
            assert metadata(f) == metadata(r), f"{op}: argument {i} changed layout when faked"
    before = {i: metadata(real_args[i]) for i in written}
    with mode:
        fake_out = _flat(op(*fake_args))
    real_out = _flat(op(*real_args))
    assert len(fake_out) == len(real_out), f"{op}: fake returns {len(fake_out)} outputs"
    inputs = [metadata(a) if isinstance(a, torch.Tensor) else a for a in real_args]
    for k, (f, r) in enumerate(zip(fake_out, real_out, strict=True)):
        fm, rm = output_metadata(f, like=r), output_metadata(r)
        for field in rm:
            assert fm[field] == rm[field], (
                f"{op}: output {k}: the fake kernel says {field}={fm[field]}, the real kernel "
                f"returns {field}={rm[field]} (inputs: {inputs})"
            )
    for i, meta in before.items():
        assert metadata(fake_args[i]) == meta, f"{op}: the fake kernel changed argument {i}"
        assert metadata(real_args[i]) == meta, f"{op}: the real kernel changed argument {i}"


def _cases():
    out = []
    for name, case in CASES.items():
        if not case.devices:
            out.append(
                pytest.param(
                    name, "none", marks=pytest.mark.skip(reason=f"{name}: no device here runs it")
                )
            )
        out += [pytest.param(name, device, id=f"{name}-{device}") for device in case.devices]
    return out


@pytest.mark.parametrize(("name", "device"), _cases())
@FAKE_SETTINGS
@given(data=st.data())
def test_fake_matches_real(name, device, data):
    case = CASES[name]
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    dtype = data.draw(st.sampled_from(case.dtypes), label="dtype")
    args = case.build(data.draw, device, dtype)

    assert_fake_matches_real(op, lambda: tuple(copy_layout(a, device) for a in args))


@pytest.mark.skipif(not TRITON_DEVICES, reason="no device here runs the Triton operators")
def test_triton_rows_of_length_zero_match_the_compiled_operators():
    # Rows of length 0: an empty output and NaN statistics (0/0), on both backends.
    device = TRITON_DEVICES[0]
    pairs = [
        (torch.ops.opguide.rms_norm_forward_triton.default,
         torch.ops.opguide.rms_norm_forward.default,
         lambda: (torch.empty(3, 0, device=device), torch.empty(0, device=device), 1e-6)),
        (torch.ops.opguide.fused_add_rms_norm_triton_.default,
         torch.ops.opguide.fused_add_rms_norm_.default,
         lambda: (torch.empty(3, 0, device=device), torch.empty(3, 0, device=device), None, 1e-6,
                  None)),
    ]  # fmt: skip
    for triton_op, cpp_op, make in pairs:
        assert_fake_matches_real(
            triton_op, lambda make=make: tuple(copy_layout(a, device) for a in make())
        )
        got, expected = triton_op(*make()), cpp_op(*make())
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, equal_nan=True)
        assert got[1].isnan().all()


# ---------------------------------------------------------------------------
# torch.compile: the strides of eager mode.


def _layout(name: str, device: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x of shape (3, 4, 8) laid out as ``name`` says (the same values for every layout)."""
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(3, 4, 8, generator=gen, dtype=dtype)
    if name == "contiguous":
        t = values.clone()
    elif name == "transposed":  # the last dimension strided: (1, 3, 12)-like strides
        t = values.permute(2, 1, 0).contiguous().permute(2, 1, 0)
    elif name == "step":  # every other element of each row
        t = torch.zeros(3, 4, 16, dtype=dtype)[..., ::2]
        t.copy_(values)
    elif name == "offset":  # starts mid-storage
        t = torch.zeros(5 + values.numel(), dtype=dtype)[5:].view(3, 4, 8)
        t.copy_(values)
    elif name == "expanded":  # one row block seen three times (stride 0)
        t = values[:1].expand(3, 4, 8)
    else:
        raise ValueError(name)
    return copy_layout(t, device)


LAYOUTS = ("contiguous", "transposed", "step", "offset", "expanded")
RMS_NORM_BACKENDS = {"cpp": CPP_DEVICES, "triton": TRITON_DEVICES}
FUSED_BACKENDS = {"cpp": FUSED_DEVICES, "triton": TRITON_DEVICES}


def _compile_params(backends: dict, layouts: tuple[str, ...]):
    out = []
    for backend, devices in backends.items():
        if not devices:
            out.append(
                pytest.param(
                    backend, "none", "none", "none",
                    marks=pytest.mark.skip(reason=f"backend={backend!r}: no device here runs it"),
                )
            )  # fmt: skip
        for device in devices:
            out += [
                pytest.param(
                    backend, device, layout, "aot_eager", id=f"{backend}-{device}-{layout}"
                )
                for layout in layouts
            ]
            # Inductor once per function and backend, on a layout it must not
            # assume contiguous.
            out.append(
                pytest.param(
                    backend, device, "transposed", "inductor",
                    id=f"{backend}-{device}-transposed-inductor",
                )
            )  # fmt: skip
    return out


def compile_fresh(f: Callable, compiler: str) -> Callable:
    """``torch.compile(f, fullgraph=True)`` that compiles, never loads a cached graph.

    Inductor's on-disk graph cache does not key on the fake kernels: a graph
    compiled with an earlier fake would be loaded with that fake's strides.
    """
    torch.compiler.reset()
    options = {"fx_graph_cache": False} if compiler == "inductor" else None
    return torch.compile(f, fullgraph=True, backend=compiler, options=options)


def assert_same_outputs(compiled, eager, what: str) -> None:
    for k, (c, e) in enumerate(zip(_flat(compiled), _flat(eager), strict=True)):
        assert output_metadata(c) == output_metadata(e), (
            f"{what}: output {k} compiled {metadata(c)}, eager {metadata(e)}"
        )
        torch.testing.assert_close(c, e, equal_nan=True)


@pytest.mark.parametrize(
    ("backend", "device", "layout", "compiler"), _compile_params(RMS_NORM_BACKENDS, LAYOUTS)
)
def test_compiled_rms_norm_has_eager_strides(backend, device, layout, compiler):
    x = _layout(layout, device)
    weight = torch.randn(8, generator=torch.Generator().manual_seed(1)).to(device)

    def f(x, weight):
        y = opguide.rms_norm(x, weight, 1e-6, backend=backend, compiled="kernel")
        # Inductor reads y in the code it generates for y * 2 with the strides
        # the fake kernel gave, and lays y * 2 out like them.
        return y, y * 2

    eager = f(x, weight)
    compiled = compile_fresh(f, compiler)(x, weight)
    assert_same_outputs(compiled, eager, f"rms_norm(backend={backend!r}) on {layout} x")


@pytest.mark.parametrize(
    ("backend", "device"),
    [pytest.param(b, d, id=f"{b}-{d}") for b, ds in RMS_NORM_BACKENDS.items() for d in ds],
)
def test_compiled_rms_norm_training_has_eager_strides(backend, device):
    # The training forward and the backward operator, traced by AOTAutograd.

    def f(x, weight):
        return opguide.rms_norm(x, weight, 1e-6, backend=backend, compiled="kernel")

    def step(fn):
        x = _layout("transposed", device).requires_grad_()
        weight = torch.randn(8, generator=torch.Generator().manual_seed(1)).to(device)
        weight.requires_grad_()
        y = fn(x, weight)
        # autograd.grad returns the backward's outputs as they are (accumulating
        # into .grad would lay them out like x).
        return (y, *torch.autograd.grad(y, (x, weight), _layout("step", device)))

    eager = step(f)
    compiled = step(compile_fresh(f, "aot_eager"))
    assert_same_outputs(compiled, eager, f"rms_norm(backend={backend!r}) forward and backward")


@pytest.mark.parametrize(
    ("backend", "device", "layout", "compiler"),
    _compile_params(
        FUSED_BACKENDS,
        tuple(n for n in LAYOUTS if n != "expanded"),  # residual is written
    ),
)
def test_compiled_fused_add_rms_norm_has_eager_strides(backend, device, layout, compiler):
    gen = torch.Generator().manual_seed(1)
    x = _layout("expanded" if layout == "contiguous" else "contiguous", device)
    weight = torch.randn(8, generator=gen).to(device)

    def f(x, residual, weight):
        out, inv_rms = opguide.fused_add_rms_norm_(
            x, residual, weight, 1e-6, backend=backend, compiled="kernel"
        )
        return out, inv_rms, out * 2, inv_rms * 2  # read with the fake kernel's strides

    residual_eager, residual_compiled = _layout(layout, device), _layout(layout, device)
    eager = f(x, residual_eager, weight)
    compiled = compile_fresh(f, compiler)(x, residual_compiled, weight)
    what = f"fused_add_rms_norm_(backend={backend!r}) on {layout} residual"
    assert_same_outputs(compiled, eager, what)
    # The written input keeps its layout, and holds what eager mode wrote.
    assert metadata(residual_compiled) == metadata(residual_eager), what
    torch.testing.assert_close(residual_compiled, residual_eager)


# ---------------------------------------------------------------------------
# The checks fail when they should.


@functools.cache
def lying_operators() -> dict[str, Callable]:
    """Operators of a scratch namespace whose fake kernels lie, one way each.

    Each real kernel returns (or writes) what it should; each fake gets one
    thing wrong: the strides (contiguous, where the kernel keeps the input's),
    the dtype, or the layout of the argument it writes.
    """
    lib = "opguide_selfcheck"

    @torch.library.custom_op(f"{lib}::keeps_strides", mutates_args=())
    def keeps_strides(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x).copy_(x)  # the strides of x, when x is dense

    @keeps_strides.register_fake
    def _(x):
        return x.new_empty(x.shape)  # wrong: contiguous

    @torch.library.custom_op(f"{lib}::same_dtype", mutates_args=())
    def same_dtype(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @same_dtype.register_fake
    def _(x):
        return x.new_empty(x.shape, dtype=torch.float64)  # wrong: float64

    @torch.library.custom_op(f"{lib}::writes_y", mutates_args=("y",))
    def writes_y(x: torch.Tensor, y: torch.Tensor) -> None:
        y.copy_(x)

    @writes_y.register_fake
    def _(x, y):
        y.as_strided_(y.shape, tuple(reversed(y.stride())))  # wrong: moves y's strides

    return {
        "keeps_strides": torch.ops.opguide_selfcheck.keeps_strides.default,
        "same_dtype": torch.ops.opguide_selfcheck.same_dtype.default,
        "writes_y": torch.ops.opguide_selfcheck.writes_y.default,
    }


def _transposed() -> torch.Tensor:
    return torch.arange(12.0).view(4, 3).t()


@pytest.mark.parametrize(
    ("name", "args", "match"),
    [
        ("keeps_strides", lambda: (_transposed(),), "stride"),
        ("same_dtype", lambda: (torch.ones(2, 3),), "dtype"),
        ("writes_y", lambda: (torch.ones(3, 3), torch.zeros(3, 3)), "changed argument 1"),
    ],
)
def test_check_fails_on_a_lying_fake(name, args, match):
    op = lying_operators()[name]
    with pytest.raises(AssertionError, match=match):
        assert_fake_matches_real(op, args)


def test_check_passes_where_the_lie_does_not_show():
    # keeps_strides's fake is right for contiguous inputs: the check is not
    # a check that always fails.
    assert_fake_matches_real(lying_operators()["keeps_strides"], lambda: (torch.ones(2, 3),))


@functools.cache
def data_sized_operators() -> dict[str, Callable]:
    """Operators of a scratch namespace with outputs sized by the data.

    Each keeps the rows of ``x`` whose id is not negative, and returns them
    and the same rows as columns: how many are kept only the real kernel
    knows, so the fake kernel makes the count an unbacked SymInt (the first
    size of one output, the second size and the first stride of the other).
    ``kept_rows``'s fake is right; ``kept_rows_wrong``'s says one column too
    many.
    """
    lib = "opguide_test"

    def kept_rows(x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = x[ids >= 0]
        return rows, rows.t().clone(memory_format=torch.contiguous_format)

    def fake(extra: int):
        def kept_rows_fake(x, ids):
            kept = torch.library.get_ctx().new_dynamic_size()
            return x.new_empty(kept, x.shape[1] + extra), x.new_empty(x.shape[1], kept)

        return kept_rows_fake

    ops = {}
    for name, extra in (("kept_rows", 0), ("kept_rows_wrong", 1)):
        torch.library.custom_op(f"{lib}::{name}", kept_rows, mutates_args=()).register_fake(
            fake(extra)
        )
        ops[name] = getattr(torch.ops.opguide_test, name).default
    return ops


@pytest.mark.parametrize(
    "ids", [[0, -1, 2, 3, -1], [-1, -1, -1, -1, -1], [0, 1, 2, 3, 4]], ids=["some", "none", "all"]
)
def test_check_takes_a_size_the_data_decides(ids):
    op = data_sized_operators()["kept_rows"]
    assert_fake_matches_real(op, lambda: (torch.randn(5, 3), torch.tensor(ids)))


def test_check_fails_on_a_wrong_size_beside_one_the_data_decides():
    op = data_sized_operators()["kept_rows_wrong"]
    with pytest.raises(AssertionError, match=r"output 0: the fake kernel says shape=\(3, 4\)"):
        assert_fake_matches_real(op, lambda: (torch.randn(5, 3), torch.tensor([0, -1, 2, 3, -1])))


def test_coverage_check_finds_an_operator_without_a_case():
    lying_operators()
    missing = operators_without_a_case("opguide_selfcheck", CASES)
    assert missing == ["keeps_strides", "same_dtype", "writes_y"]
