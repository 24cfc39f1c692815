"""Tests of opguide.experimental.triton_epilogue: a pointwise operation fused into a Triton kernel.

The kernel must compute RMSNorm (on a GPU, or in Triton's interpreter) and
keep the one store that the fusion needs, as Inductor's own analysis of the
kernel finds (run here for an sm_90 target, without a GPU); the module must
say why the fusion cannot run where it cannot. On a GPU with torch 2.12 or later, compiling the
norm followed by a scale leaves no kernel of Inductor's own when the option
is on, and one when it is off.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import subprocess
import sys
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


# Inductor's analysis of a user kernel (private APIs), on an sm_90 target named
# by a stand-in driver: Triton generates TTIR without a GPU. It runs in a
# process of its own, with Triton's interpreter off.
ANALYSIS = """
import json, torch, triton
import opguide
from triton.backends.compiler import GPUTarget
from torch._higher_order_ops.triton_kernel_wrap import identify_accessed_tensors
from opguide.experimental.triton_epilogue import _rms_norm_y_kernel
from opguide.triton.forward import _rms_norm_forward_kernel

class Hopper:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

triton.runtime.driver.set_active(Hopper())
x, w, y, inv = torch.randn(4, 64), torch.randn(64), torch.empty(4, 64), torch.empty(4)
found = {}
for name, kernel, kwargs in [
    ("one store", _rms_norm_y_kernel,
     dict(x_ptr=x, w_ptr=w, y_ptr=y, N=64, eps=1e-6, BLOCK_N=64)),
    ("opguide forward", _rms_norm_forward_kernel,
     dict(x_ptr=x, w_ptr=w, y_ptr=y, inv_rms_ptr=inv, M=4, N=64, eps=1e-6, BLOCK_N=64,
          ROWS=1, STORE_INV=True, GDC=False, ALIGN=16)),
]:
    got = identify_accessed_tensors(kernel, kwargs, {})
    found[name] = [got.can_fuse_epilogue, sorted(d.name for d in got.read_writes.writes)]
print(json.dumps(found))
"""


def test_inductor_allows_an_epilogue_here_and_not_in_the_two_store_kernel():
    from torch._higher_order_ops import triton_kernel_wrap

    if not hasattr(triton_kernel_wrap, "identify_accessed_tensors"):
        pytest.skip(f"torch {torch.__version__} has no epilogue analysis of user kernels")
    # Compiled mode (no interpreter): the kernels and their helpers are JITFunctions.
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run(
        [sys.executable, "-c", ANALYSIS], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["one store"] == [True, ["y_ptr"]], done.stderr[-3000:]
    # opguide's forward with the inverse RMS: two tensors written, no epilogue.
    assert found["opguide forward"] == [False, ["inv_rms_ptr", "y_ptr"]]


def test_why_not_names_the_reason(monkeypatch):
    from torch._inductor import config

    # A torch without the option gives that reason first, for any device.
    if hasattr(config, triton_epilogue.OPTION):
        assert "on cpu" in triton_epilogue.why_not("cpu")
    else:
        assert triton_epilogue.OPTION in triton_epilogue.why_not("cpu")

    if hasattr(config, triton_epilogue.OPTION):
        monkeypatch.delattr(config, triton_epilogue.OPTION)
    assert triton_epilogue.OPTION in triton_epilogue.why_not("cuda")
    with pytest.raises(RuntimeError, match=triton_epilogue.OPTION), triton_epilogue.enabled():
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
