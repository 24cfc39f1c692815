"""Loads the compiled library ``opguide._C`` into the PyTorch dispatcher."""

from __future__ import annotations

import glob
import os

import torch

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def library_path() -> str:
    """Returns the path of the compiled library shipped in this package.

    Raises:
        ImportError: if the package was not built (no ``_C`` library next to
            this file), with the command that builds it.
    """
    candidates = sorted(
        glob.glob(os.path.join(_PACKAGE_DIR, "_C.*.so"))
        + glob.glob(os.path.join(_PACKAGE_DIR, "_C.*.pyd"))
    )
    if not candidates:
        raise ImportError(
            f"opguide: the compiled library _C was not found in {_PACKAGE_DIR}. "
            "Build and install the package with `pip install --no-build-isolation .` "
            "from the source tree (torch must be installed first)."
        )
    return candidates[0]


def load() -> str:
    """Loads ``_C`` once; its static initialisers run ``TORCH_LIBRARY``.

    The library has no Python module in it (it registers operators, nothing
    else), so it is loaded with :func:`torch.ops.load_library`, not imported.

    Returns:
        The path of the loaded library.
    """
    path = library_path()
    if path not in torch.ops.loaded_libraries:
        torch.ops.load_library(path)
    return path
