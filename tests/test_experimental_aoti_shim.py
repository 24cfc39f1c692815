"""Tests of opguide.experimental.aoti_shim: AOTInductor calls opguide.rms_norm through a C shim.

The shim builds, a package compiled with it calls it (and no proxy executor)
where a package compiled without it calls the proxy executor, and both give
the eager model's output. It needs a C++ compiler, as the library's build does.
"""

from __future__ import annotations

import pytest
import torch

import opguide
from opguide.experimental import aoti_shim


class Norms(torch.nn.Module):
    """A linear layer, then opguide.rms_norm, three times."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.linear = torch.nn.Linear(hidden, hidden)
        self.weight = torch.nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x):
        for _ in range(3):
            x = opguide.rms_norm(self.linear(x), self.weight, 1e-6, compiled="kernel")
        return x


def test_the_package_calls_the_shim_and_matches_eager(tmp_path):
    model = Norms().eval()
    x = torch.randn(4, 32)
    exported = torch.export.export(model, (x,))
    shim = aoti_shim.build(tmp_path / "shim")
    assert shim.is_file() and shim.name == f"{aoti_shim.LIBRARY}.so"
    # The package without the shim first, then the one with it, from the same
    # graph: with Inductor's caches on, the second compile has been handed
    # the first one's package, which compile_package prevents.
    proxy = aoti_shim.compile_package(exported, tmp_path / "proxy.pt2", None)
    with_shim = aoti_shim.compile_package(exported, tmp_path / "shim.pt2", shim)
    assert aoti_shim.calls(with_shim) == {"C shim": 3, "proxy executor": 0}
    assert aoti_shim.calls(proxy) == {"C shim": 0, "proxy executor": 3}
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13):
        # Loading a package that calls opguide's operator ends the process
        # with signal 11 on torch 2.11 (as in tests/test_across_pytorch.py).
        pytest.skip(f"the packages are compiled and read, not loaded: torch {torch.__version__}")
    want = model(x)
    for path in (with_shim, proxy):
        torch.testing.assert_close(torch._inductor.aoti_load_package(path)(x), want)
