"""How the shared-process tests call each operator of the registry.

``tests/test_concurrency.py`` and ``tests/shared_gpu_probe.py`` call every
operator of :data:`opguide.registry.OPERATORS` the same way. What differs
from one operator to the next (its inputs, its call, whether it has a
backward) lives in the operator's own module, ``tests/calls_<name>.py``,
which defines ``CALLS``: a new operator adds that file, and these tests
take it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

Tensors = dict[str, torch.Tensor]


def randn(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Normal values from ``gen``, on its device, drawn in float32 and cast to ``dtype``."""
    return torch.randn(shape, generator=gen, device=gen.device).to(dtype)


@dataclass(frozen=True)
class Calls:
    """How the tests call one operator.

    Attributes:
        inputs: ``(shape, dtype, generator)`` -> the operator's input tensors, on
            the generator's device; ``shape`` is that of its main input ``x``.
        call: ``(inputs, keyword arguments, backward)`` -> every result of one
            forward call, and with ``backward`` of its ``.backward()``: the
            outputs, the gradients and the tensors it writes in place. The
            inputs are left as they were, so that a call can be repeated.
        backward: whether the operator has a backward to call.
    """

    inputs: Callable[[tuple[int, ...], torch.dtype, torch.Generator], Tensors]
    call: Callable[[Tensors, dict[str, str], bool], Tensors]
    backward: bool = True


def calls_for(name: str) -> Calls:
    """``CALLS`` of ``tests/calls_<name>.py`` for the registry's operator ``name``.

    Raises:
        LookupError: the operator has no such module.
    """
    try:
        module = importlib.import_module(f"calls_{name}")
    except ModuleNotFoundError:
        raise LookupError(
            f"tests/calls_{name}.py does not exist: the operator {name!r} of "
            "opguide.registry.OPERATORS needs it (how to make its inputs and call it)"
        ) from None
    return module.CALLS


def modules() -> list[str]:
    """The operator names of the ``tests/calls_<name>.py`` files."""
    here = Path(__file__).parent
    return sorted(p.stem.removeprefix("calls_") for p in here.glob("calls_*.py"))
