"""The check of a project copied from manifests/triton_rms_norm.txt, run in it by
tests/test_manifests.py: ``python triton_rms_norm.check.py DEVICE``, ``cuda``, or
``cpu`` in Triton's interpreter (TRITON_INTERPRET=1)."""

import sys

import torch

import opguide.triton

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
x = torch.randn(5, 37, device=DEVICE, requires_grad=True)
w = torch.randn(37, device=DEVICE, requires_grad=True)
y = opguide.triton.rms_norm(x, w, 1e-6)
ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
torch.testing.assert_close(y, ref)
y.sum().backward()
grads = torch.autograd.grad(ref.sum(), (x, w))
torch.testing.assert_close((x.grad, w.grad), grads)
print("rms_norm matches the reference on", DEVICE)

print("from", opguide.__file__.rsplit("/opguide/", 1)[0])
