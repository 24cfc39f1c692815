"""The in-place contract with autograd, for every operator of opguide that writes an input.

``torch.library.opcheck`` checks that a kernel writes only what its schema
says, but not what eager autograd needs from an operator that writes an input
(step 10.2, "In place, and autograd"). This file does, for every backend and
every device here:

* the version counter of each written tensor grows, and its storage is the same;
* a tensor that autograd saved for another operation, then overwritten by the
  operator, makes ``backward()`` raise "modified by an inplace operation"
  (without the version bump it silently computes a wrong gradient);
* with grad mode on, an input that requires grad is refused before anything is
  written, with an error that names the differentiable form; a leaf that
  requires grad is refused with PyTorch's own wording;
* under ``torch.no_grad()`` the same call works, as an optimizer's update does.

The operators are found in the dispatcher, not listed by hand: an operator
whose schema writes an argument and that has no case below fails
``test_every_mutating_operator_has_a_case``. The last tests run the checks on an
operator made to break the contract, and show that they fail.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import pytest
import torch

import opguide
from opguide.backends import compiled_device_types, triton_ready

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def mutating_operators(namespace: str) -> set[str]:
    """Names of the operators in ``namespace`` whose schema writes an argument (``(a!)``)."""
    found = set()
    for qualname in torch._C._dispatch_get_all_op_names():
        ns, _, name = qualname.partition("::")
        if ns != namespace:
            continue
        packet = getattr(getattr(torch.ops, ns), name)
        for overload in packet.overloads():
            schema = getattr(packet, overload)._schema
            if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
                found.add(name)
    return found


@dataclasses.dataclass(frozen=True)
class Case:
    """One way to call an operator that writes an input.

    ``make(device)`` returns fresh named arguments; ``call(args)`` runs the
    operator on them; ``written`` names the arguments it writes and
    ``differentiable`` the floating-point tensors a caller could ask grads of.
    """

    id: str
    operator: str
    devices: tuple[str, ...]
    make: Callable[[str], dict]
    call: Callable[[dict], object]
    written: tuple[str, ...]
    differentiable: tuple[str, ...]
    # A phrase of the refusal that names the differentiable form.
    instead: str


def fused_args(device: str) -> dict:
    gen = torch.Generator().manual_seed(0)
    x, residual = (torch.randn(4, 64, generator=gen) for _ in range(2))
    weight = torch.randn(64, generator=gen)
    return {k: v.to(device) for k, v in dict(x=x, residual=residual, weight=weight).items()}


def _devices(*candidates: str) -> tuple[str, ...]:
    return tuple(d for d in candidates if d == "cpu" or torch.cuda.is_available())


CPP_FUSED_DEVICES = tuple(
    d for d in _devices("cpu", "cuda") if d in compiled_device_types("fused_add_rms_norm_")
)
TRITON_DEVICES = _devices("cpu" if INTERPRET else "cuda") if triton_ready() else ()
FUSED_INSTEAD = "opguide.rms_norm(residual + x, weight, eps)"

CASES = [
    Case(
        "fused_add_rms_norm_-op",
        "fused_add_rms_norm_",
        CPP_FUSED_DEVICES,
        fused_args,
        lambda a: torch.ops.opguide.fused_add_rms_norm_.default(
            a["x"], a["residual"], a["weight"], 1e-6, None
        ),
        ("residual",),
        ("x", "residual", "weight"),
        FUSED_INSTEAD,
    ),
    *(
        Case(
            f"fused_add_rms_norm_-{backend}",
            operator,
            devices,
            fused_args,
            lambda a, backend=backend: opguide.fused_add_rms_norm_(**a, backend=backend),
            ("residual",),
            ("x", "residual", "weight"),
            FUSED_INSTEAD,
        )
        for backend, operator, devices in (
            ("cpp", "fused_add_rms_norm_", CPP_FUSED_DEVICES),
            ("triton", "fused_add_rms_norm_triton_", TRITON_DEVICES),
        )
    ),
]


def params(per_argument: bool = False):
    out = []
    for case in CASES:
        if not case.devices:
            out.append(
                pytest.param(
                    case,
                    "none",
                    None,
                    id=case.id,
                    marks=pytest.mark.skip(reason=f"{case.id}: no device here runs this backend"),
                )
            )
            continue
        for device in case.devices:
            names = case.differentiable if per_argument else (None,)
            for name in names:
                suffix = f"-{name}" if name else ""
                out.append(pytest.param(case, device, name, id=f"{case.id}-{device}{suffix}"))
    return out


# The checks, as plain functions, so that the last tests can run them on an
# operator that breaks the contract.
def check_version_bump(case: Case, device: str) -> None:
    args = case.make(device)
    before = {n: (args[n]._version, args[n].data_ptr()) for n in case.written}
    case.call(args)
    for name, (version, pointer) in before.items():
        assert args[name].data_ptr() == pointer, f"{case.id}: {name} moved to new storage"
        assert args[name]._version > version, (
            f"{case.id}: {name} was written but its version counter stayed at {version}"
        )


def check_saved_tensor_refusal(case: Case, device: str) -> None:
    for name in case.written:
        args = case.make(device)
        a = torch.randn(args[name].shape, device=device, requires_grad=True)
        saved = args[name] * a  # autograd saves args[name] for the gradient of a
        case.call(args)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            saved.sum().backward()


def check_requires_grad_refused(case: Case, device: str, name: str) -> None:
    for leaf in (True, False):
        args = case.make(device)
        base = args[name].detach().clone().requires_grad_()
        args[name] = base if leaf else base * 1  # a leaf, or a tensor with a history
        written = {n: args[n].detach().clone() for n in case.written}
        versions = {n: args[n]._version for n in case.written}
        if name in case.written and leaf:
            expected = "leaf Variable that requires grad is being used in an in-place operation"
        else:
            expected = f"{name} requires grad"
        with pytest.raises(RuntimeError, match=expected) as error:
            case.call(args)
        assert case.instead in str(error.value), f"{case.id}: the error names no alternative"
        for n in case.written:
            torch.testing.assert_close(args[n].detach(), written[n], rtol=0, atol=0, equal_nan=True)
            assert args[n]._version == versions[n], f"{case.id}: {n} written before refusing"


def check_no_grad_accepts(case: Case, device: str) -> None:
    args = case.make(device)
    for name in case.differentiable:
        args[name].requires_grad_()
    versions = {n: args[n]._version for n in case.written}
    with torch.no_grad():
        case.call(args)
    assert all(args[n]._version > versions[n] for n in case.written)


def test_every_mutating_operator_has_a_case():
    found = mutating_operators("opguide")
    covered = {case.operator for case in CASES}
    assert found, "no operator of opguide writes an input: the dispatcher query is wrong"
    assert found <= covered, f"operators that write an input without a case here: {found - covered}"


@pytest.mark.parametrize("case, device, _", params())
def test_written_tensor_gets_a_new_version(case, device, _):
    check_version_bump(case, device)


@pytest.mark.parametrize("case, device, _", params())
def test_backward_through_an_overwritten_saved_tensor_raises(case, device, _):
    check_saved_tensor_refusal(case, device)


@pytest.mark.parametrize("case, device, name", params(per_argument=True))
def test_input_that_requires_grad_is_refused(case, device, name):
    check_requires_grad_refused(case, device, name)


@pytest.mark.parametrize("case, device, _", params())
def test_no_grad_call_accepts_inputs_that_require_grad(case, device, _):
    check_no_grad_accepts(case, device)


@pytest.mark.parametrize("case, device, _", params())
def test_compiled_call_refuses_the_same_inputs(case, device, _):
    # torch.compile traces the checks: the refusal holds in a compiled call too.
    if case.id.endswith("-op"):
        pytest.skip("the operator itself; the public function is compiled in its own cases")
    args = case.make(device)
    args[case.written[0]] = args[case.written[0]].detach().requires_grad_() * 1
    torch._dynamo.reset()
    with pytest.raises(Exception, match="requires grad"):
        torch.compile(case.call, backend="aot_eager", fullgraph=True)(args)


# An operator that writes its input and does nothing else: what a TORCH_LIBRARY
# schema with (a!) gives without the two kernels of
# csrc/fused_add_rms_norm/fused_add_rms_norm_autograd.cpp. The checks above must fail on it.
_broken = torch.library.Library("opguide_broken_contract", "DEF")
_broken.define("add_one_(Tensor(a!) x) -> ()")


def _add_one_kernel(x: torch.Tensor) -> None:
    # .data has a version counter of its own: the write reaches x's memory
    # and leaves x's counter alone, as a C++ kernel's raw pointer does.
    x.data.add_(1)


_broken.impl("add_one_", _add_one_kernel, "CPU")
BROKEN = Case(
    "broken",
    "add_one_",
    ("cpu",),
    lambda device: dict(x=torch.randn(3, device=device)),
    lambda a: torch.ops.opguide_broken_contract.add_one_.default(a["x"]),
    ("x",),
    ("x",),
    "anything",
)


def test_the_checks_fail_on_an_operator_without_the_contract():
    assert mutating_operators("opguide_broken_contract") == {"add_one_"}
    with pytest.raises(AssertionError, match="version counter stayed"):
        check_version_bump(BROKEN, "cpu")
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        check_saved_tensor_refusal(BROKEN, "cpu")
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        check_requires_grad_refused(BROKEN, "cpu", "x")
