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
__version__ = "0.1.0"
