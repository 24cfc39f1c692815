"""opguide: the operator library built, step by step, by the opguide guide.

Importing the package loads the compiled library ``opguide._C``, which
registers the ``torch.ops.opguide`` operators with the PyTorch dispatcher.
The functions exported here are the checked, documented entry points.
"""

from __future__ import annotations

from . import _library

_library.load()

from .ops import rms_norm  # noqa: E402  (needs the schemas loaded above)
from .reference import rms_norm_backward_reference, rms_norm_reference  # noqa: E402

__all__ = ["rms_norm", "rms_norm_reference", "rms_norm_backward_reference"]

from .backends import TRITON_INSTALLED  # noqa: E402
from .fused_add_rms_norm import fused_add_rms_norm_  # noqa: E402
from .reference import fused_add_rms_norm_reference  # noqa: E402

__all__ += ["fused_add_rms_norm_", "fused_add_rms_norm_reference"]
if TRITON_INSTALLED:
    # Registers the Triton operators; see opguide/triton/. When that cannot
    # work in this process, the compiled operators still do.
    try:
        from . import triton  # noqa: E402, F401
    except ImportError as error:
        import warnings  # noqa: E402

        from . import backends  # noqa: E402

        backends.TRITON_UNUSABLE = str(error)
        warnings.warn(f"{error}; the Triton backend is off", RuntimeWarning, stacklevel=2)
# FLOP formulas for torch.utils.flop_counter, for every operator defined above.
from . import flops  # noqa: E402, F401

__version__ = "0.1.0"
