"""How the shared-process tests call ``opguide.silu_and_mul`` (``tests/op_calls.py``)."""

from __future__ import annotations

from op_calls import Calls, Tensors, randn

import opguide


def _inputs(shape, dtype, gen) -> Tensors:
    return {
        "x": randn(shape, dtype, gen),
        "grad_y": randn((*shape[:-1], shape[-1] // 2), dtype, gen),
    }


def _call(inputs: Tensors, kwargs: dict, backward: bool = True) -> Tensors:
    x = inputs["x"].detach().requires_grad_(backward)
    y = opguide.silu_and_mul(x, **kwargs)
    if not backward:
        return {"y": y}
    y.backward(inputs["grad_y"])
    return {"y": y.detach(), "grad_x": x.grad}


CALLS = Calls(_inputs, _call)
