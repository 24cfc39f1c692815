"""How the shared-process tests call ``opguide.rms_norm`` (``tests/op_calls.py``)."""

from __future__ import annotations

from op_calls import Calls, Tensors, randn

import opguide


def _inputs(shape, dtype, gen) -> Tensors:
    return {
        "x": randn(shape, dtype, gen),
        "weight": randn(shape[-1:], dtype, gen),
        "grad_y": randn(shape, dtype, gen),
    }


def _call(inputs: Tensors, kwargs: dict, backward: bool = True) -> Tensors:
    # New leaves on the same memory: each call's gradients are its own.
    x = inputs["x"].detach().requires_grad_(backward)
    weight = inputs["weight"].detach().requires_grad_(backward)
    y = opguide.rms_norm(x, weight, 1e-6, **kwargs)
    if not backward:
        return {"y": y}
    y.backward(inputs["grad_y"])
    return {"y": y.detach(), "grad_x": x.grad, "grad_weight": weight.grad}


CALLS = Calls(_inputs, _call)
