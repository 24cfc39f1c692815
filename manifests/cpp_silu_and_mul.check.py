"""The check of a project copied from manifests/cpp_silu_and_mul.txt, run in it by
tests/test_manifests.py: ``python cpp_silu_and_mul.check.py DEVICE...``, with the
devices the copy was built for."""

import sys

import torch

import opguide

DEVICES = sys.argv[1:] or ["cpu"]
for device in DEVICES:
    x = torch.randn(5, 2 * 37, dtype=torch.float64, device=device, requires_grad=True)
    a, b = x.chunk(2, dim=-1)
    ref = a / (1 + torch.exp(-a)) * b
    torch.testing.assert_close(opguide.silu_and_mul(x), ref)
    torch.autograd.gradcheck(opguide.silu_and_mul, (x,))
    print("silu_and_mul matches the reference on", device)

print("from", opguide.__file__.rsplit("/opguide/", 1)[0])
