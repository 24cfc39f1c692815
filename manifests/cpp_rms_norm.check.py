"""The check of a project copied from manifests/cpp_rms_norm.txt, run in it by
tests/test_manifests.py: ``python cpp_rms_norm.check.py DEVICE...``, with the
devices the copy was built for."""

import sys

import torch

import opguide

DEVICES = sys.argv[1:] or ["cpu"]
for device in DEVICES:
    x = torch.randn(5, 37, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(37, dtype=torch.float64, device=device, requires_grad=True)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(opguide.rms_norm(x, w, 1e-6), ref)
    torch.autograd.gradcheck(lambda x, w: opguide.rms_norm(x, w, 1e-6), (x, w))
    print("rms_norm matches the reference on", device)

print("from", opguide.__file__.rsplit("/opguide/", 1)[0])
