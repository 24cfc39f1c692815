"""opguide: the operator library built, step by step, by the opguide guide.

Importing the package loads the compiled library ``opguide._C``, which
registers the ``torch.ops.opguide`` operators with the PyTorch dispatcher.
The functions exported here are the checked, documented entry points; which
operators there are, and which module defines each, is
:data:`opguide.registry.OPERATORS`.
"""

from __future__ import annotations

from . import registry

# isort: split
# (Its own statement: a route without compiled kernels leaves it out.)
from . import _library

_library.load()

__all__: list[str] = []

from .reference import (  # noqa: E402
    fused_add_rms_norm_reference,
    rms_norm_backward_reference,
    rms_norm_reference,
)

__all__ += ["rms_norm_reference", "rms_norm_backward_reference", "fused_add_rms_norm_reference"]


def _import_operators() -> None:
    """Imports each operator's module (its public function, fake kernels and
    autograd, vmap and autocast rules; it needs the schemas loaded above) and
    exports its public names."""
    import importlib

    for op in registry.OPERATORS:
        module = importlib.import_module(op.module)
        for name in op.public:
            globals()[name] = getattr(module, name)
            __all__.append(name)


def _import_triton_operators() -> None:
    """Registers the Triton operators of every operator that has them; when
    that cannot work in this process, says so, and the compiled operators still do."""
    import importlib
    import warnings

    from . import backends

    try:
        for name in dict.fromkeys(op.triton_module for op in registry.OPERATORS):
            if name is not None:
                importlib.import_module(name)
    except ImportError as error:
        backends.TRITON_UNUSABLE = str(error)
        warnings.warn(f"{error}; the Triton backend is off", RuntimeWarning, stacklevel=3)


_import_operators()

from .backends import TRITON_INSTALLED  # noqa: E402

if TRITON_INSTALLED:
    _import_triton_operators()
# FLOP formulas for torch.utils.flop_counter, for every operator defined above.
from . import flops  # noqa: E402, F401

__version__ = "0.1.0"
