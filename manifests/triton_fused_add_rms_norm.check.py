"""The check of a project copied from manifests/triton_fused_add_rms_norm.txt, run in it by
tests/test_manifests.py: ``python triton_fused_add_rms_norm.check.py DEVICE``, ``cuda``, or
``cpu`` in Triton's interpreter (TRITON_INTERPRET=1)."""

import sys

import torch

import opguide.triton

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
x = torch.randn(5, 37, device=DEVICE)
residual = torch.randn(5, 37, device=DEVICE)
w = torch.randn(37, device=DEVICE)
summed = residual + x
out, _ = opguide.triton.fused_add_rms_norm_triton_(x, residual, w, 1e-6)
torch.testing.assert_close(residual, summed)
ref = summed / torch.sqrt(summed.pow(2).mean(-1, keepdim=True) + 1e-6) * w
torch.testing.assert_close(out, ref)
print("fused_add_rms_norm_triton_ matches the reference on", DEVICE)

print("from", opguide.__file__.rsplit("/opguide/", 1)[0])
