"""The check of a project copied from manifests/cpp_fused_add_rms_norm.txt, run in it by
tests/test_manifests.py: ``python cpp_fused_add_rms_norm.check.py DEVICE...``, with the
devices the copy was built for."""

import sys

import torch

import opguide

DEVICES = sys.argv[1:] or ["cpu"]
for device in DEVICES:
    x = torch.randn(5, 37, dtype=torch.float64, device=device)
    residual = torch.randn(5, 37, dtype=torch.float64, device=device)
    w = torch.randn(37, dtype=torch.float64, device=device)
    summed = residual + x
    out, _ = opguide.fused_add_rms_norm_(x, residual, w, 1e-6)
    torch.testing.assert_close(residual, summed)
    ref = summed / torch.sqrt(summed.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(out, ref)
    print("fused_add_rms_norm_ matches the reference on", device)

print("from", opguide.__file__.rsplit("/opguide/", 1)[0])
