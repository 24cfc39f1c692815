"""How the shared-process tests call ``opguide.fused_add_rms_norm_`` (``tests/op_calls.py``)."""

from __future__ import annotations

from op_calls import Calls, Tensors, randn

import opguide


def _inputs(shape, dtype, gen) -> Tensors:
    return {
        "x": randn(shape, dtype, gen),
        "residual": randn(shape, dtype, gen),
        "weight": randn(shape[-1:], dtype, gen),
    }


def _call(inputs: Tensors, kwargs: dict, backward: bool = False) -> Tensors:
    # The operator adds x into residual in place, so each call writes a copy
    # of its own. It has no backward: it refuses inputs that need grad.
    residual = inputs["residual"].clone()
    out, inv_rms = opguide.fused_add_rms_norm_(
        inputs["x"], residual, inputs["weight"], 1e-6, **kwargs
    )
    return {"out": out, "inv_rms": inv_rms, "residual": residual}


CALLS = Calls(_inputs, _call, backward=False)
