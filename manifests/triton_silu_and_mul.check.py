"""The check of a project copied from manifests/triton_silu_and_mul.txt, run in it by
tests/test_manifests.py: ``python triton_silu_and_mul.check.py DEVICE``, ``cuda``, or
``cpu`` in Triton's interpreter (TRITON_INTERPRET=1)."""

import sys

import torch

import opguide
from opguide._silu_and_mul.triton import silu_and_mul_triton

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
x = torch.randn(5, 2 * 37, device=DEVICE, requires_grad=True)
y = silu_and_mul_triton(x)
a, b = x.chunk(2, dim=-1)
ref = a / (1 + torch.exp(-a)) * b
torch.testing.assert_close(y, ref)
grad_y = torch.randn_like(y)
(grad_x,) = torch.autograd.grad(y, x, grad_y)
torch.testing.assert_close(grad_x, torch.autograd.grad(ref, x, grad_y)[0])
print("silu_and_mul matches the reference on", DEVICE)

print("from", opguide.__file__.rsplit("/opguide/", 1)[0])
