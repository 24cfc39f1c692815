"""A double backward through any operator's backward is an error, never zeros.

The backward operators of the registry's operators (and their Triton and
ahead-of-time twins) have no derivative of their own. An operator
with no kernel at the Autograd key passes a second backward through with a
warning and zero gradients; each of these has a kernel that makes it an error
naming the operator. Every route of every operator of the registry is called
as ``tests/calls_<name>.py`` calls it, with ``create_graph=True``, and the
gradients it returns are differentiated again.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from contextlib import contextmanager

import pytest
import torch
from op_calls import calls_for

import opguide  # noqa: F401  registers the operators
from opguide import backends
from opguide.registry import OPERATORS

# What PyTorch says when an operator has no autograd kernel: the silent path.
FALLBACK = "an autograd kernel was not registered"
# What the operators' own kernels say.
REFUSED = re.compile(
    r"derivative for opguide::\w+ is not implemented|opguide::\w+ has no derivative"
)


def _skip_without_triton(device: str) -> None:
    if not backends.triton_ready():
        pytest.skip("Triton is not installed")
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton runs CPU tensors only in its interpreter (TRITON_INTERPRET=1)")


@contextmanager
def backward_with_create_graph():
    """``Tensor.backward`` as if called with ``create_graph=True`` (the calls modules call it)."""
    backward = torch.Tensor.backward

    def with_graph(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        return backward(self, gradient, retain_graph, True, inputs)

    torch.Tensor.backward = with_graph
    try:
        yield
    finally:
        torch.Tensor.backward = backward


def _second_backward_refused(grads: list[torch.Tensor]) -> None:
    assert grads, "the call returned no gradient"
    for grad in grads:
        assert grad.requires_grad, "a gradient made with create_graph=True has no graph"
        with pytest.raises(RuntimeError, match=REFUSED):
            grad.float().square().sum().backward()


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
ROUTES = [
    pytest.param(op.name, route, id=f"{op.name}-{route}")
    for op in OPERATORS
    for route in op.routes
    if route in backends.BACKENDS
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "route"), ROUTES)
def test_second_backward_through_every_route_is_an_error(name, route, device):
    calls = calls_for(name)
    if not calls.backward:
        pytest.skip(f"{name} has no backward")
    if route == "triton":
        _skip_without_triton(device)
    gen = torch.Generator(device).manual_seed(0)
    inputs = calls.inputs((4, 64), torch.float32, gen)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=f".*{FALLBACK}")
        # backward(create_graph=True) warns of a reference cycle through .grad.
        warnings.filterwarnings("ignore", message=".*create_graph=True will create a reference")
        with backward_with_create_graph():
            out = calls.call(inputs, {"backend": route}, True)
        grads = [t for key, t in out.items() if key.startswith("grad_") and t is not None]
        _second_backward_refused(grads)


def _aot_cases():
    """(operator, its differentiable operator compiled ahead of time): each Triton
    operator's ``_aot`` twin that the library registers."""
    for op in OPERATORS:
        for triton_op in op.triton_ops:
            # The operators that write an input have no backward.
            if "backward" in triton_op or triton_op.endswith("_"):
                continue
            if hasattr(torch.ops.opguide, triton_op + "_aot"):
                yield pytest.param(op, triton_op + "_aot", id=triton_op + "_aot")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("op", "aot_op"), list(_aot_cases()))
def test_second_backward_through_the_aot_operators_is_an_error(op, aot_op, device):
    _skip_without_triton(device)
    # The JIT operators, which the CPU calls of the AOT operators go to.
    importlib.import_module(op.triton_module)
    gen = torch.Generator(device).manual_seed(0)
    inputs = calls_for(op.name).inputs((4, 64), torch.float32, gen)
    tensors = [inputs["x"].detach().requires_grad_()]
    if "weight" in inputs:
        tensors.append(inputs["weight"].detach().requires_grad_())
    eps = (1e-6,) if "weight" in inputs else ()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*compiled ahead of time")
        warnings.filterwarnings("error", message=f".*{FALLBACK}")
        y = getattr(torch.ops.opguide, aot_op)(*tensors, *eps)
        y = y[0] if isinstance(y, tuple) else y  # the training forward's (y, inv_rms)
        grads = torch.autograd.grad(y.square().sum(), tensors, create_graph=True)
        _second_backward_refused(list(grads))
