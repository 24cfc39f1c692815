"""Tests of opguide.experimental.triton_epilogue: a pointwise operation fused into a Triton kernel.

The kernel must compute RMSNorm (on a GPU, or in Triton's interpreter) and
keep the one store that the fusion needs; the module must say why the fusion
cannot run where it cannot. On a GPU with torch 2.12 or later, compiling the
norm followed by a scale leaves no kernel of Inductor's own when the option
is on, and one when it is off.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import textwrap

import pytest
import torch

import opguide

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="the module needs triton"
)
if importlib.util.find_spec("triton") is not None:
    from opguide.experimental import triton_epilogue

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("shape", [(3, 100), (2, 5, 64), (1, 1)])
def test_rms_norm_y_matches_the_reference(shape):
    x = torch.randn(shape, device=DEVICE)
    w = torch.randn(shape[-1], device=DEVICE)
    y = triton_epilogue.rms_norm_y(x, w, 1e-6)
    torch.testing.assert_close(y, opguide.rms_norm_reference(x, w, 1e-6))


def test_rms_norm_y_refuses_strided_rows():
    x = torch.randn(4, 16, device=DEVICE)
    with pytest.raises(ValueError, match="contiguous"):
        triton_epilogue.rms_norm_y(x[:, ::2], torch.randn(8, device=DEVICE), 1e-6)


def test_the_kernel_has_one_store():
    # Inductor rewrites the value of the kernel's only tl.store; two stores: no fusion.
    source = textwrap.dedent(inspect.getsource(triton_epilogue._rms_norm_y_kernel.fn))
    stores = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.store"
    ]
    assert len(stores) == 1


def test_why_not_names_the_reason(monkeypatch):
    assert "on cpu" in triton_epilogue.why_not("cpu")
    from torch._inductor import config

    if hasattr(config, triton_epilogue.OPTION):
        monkeypatch.delattr(config, triton_epilogue.OPTION)
    assert "2.12" in triton_epilogue.why_not("cuda")
    with pytest.raises(RuntimeError, match="2.12"), triton_epilogue.enabled():
        pass


def test_kernels_splits_inductors_from_the_users():
    code = (
        "triton_poi_fused_mul_0 = async_compile.triton('triton_poi_fused_mul_0', '''\n"
        "_rms_norm_y_kernel_0 = async_compile.triton('_rms_norm_y_kernel_0', '''\n"
    )
    assert triton_epilogue.kernels(code) == (["triton_poi_fused_mul_0"], ["_rms_norm_y_kernel_0"])


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or triton_epilogue.why_not("cuda") is not None,
    reason="needs a GPU and torch 2.12 or later",
)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_scale_after_the_norm_joins_the_kernel():
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)

    def plain(x, w):
        return triton_epilogue.rms_norm_y(x, w, 1e-6) * 0.5

    def fused(x, w):
        return triton_epilogue.rms_norm_y(x, w, 1e-6) * 0.5

    want = plain(x, w)
    got, code = run_and_get_code(torch.compile(plain), x, w)
    torch.testing.assert_close(got, want)
    inductors, users = triton_epilogue.kernels("\n".join(code))
    assert len(inductors) == 1 and len(users) == 1, (inductors, users)
    with triton_epilogue.enabled():
        got, code = run_and_get_code(torch.compile(fused), x, w)
    torch.testing.assert_close(got, want)
    inductors, users = triton_epilogue.kernels("\n".join(code))
    assert not inductors and len(users) == 1, (inductors, users)
