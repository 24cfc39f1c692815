"""Runs small programs on the hostdev backend (hostdev_backend.cpp).

Usage: ``python hostdev_demo.py LIBRARY PART`` with PART one of ``program``,
``tiny``, ``errors``. Gallery step 12 runs it in a child process, because
naming the PrivateUse1 backend is once per process and changes how the rest
of PyTorch sees devices (the random-state helpers, for example, start asking
``torch.hostdev`` for its generator state).
"""

from __future__ import annotations

import sys
import types

import torch


def register_hostdev(library: str) -> None:
    """Loads the backend library and names the PrivateUse1 key "hostdev"."""
    torch.ops.load_library(library)  # allocator, guard and kernels register here
    torch.utils.rename_privateuse1_backend("hostdev")
    # PyTorch asks the module torch.<name> about the device: is it available,
    # which index is current, how to seed it.
    module = types.ModuleType("torch.hostdev")
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: 0
    module._is_in_bad_fork = lambda: False
    module.manual_seed_all = lambda seed: None
    torch._register_device_module("hostdev", module)
    # Tensor.hostdev() and Tensor.is_hostdev, like Tensor.cuda() and .is_cuda.
    torch.utils.generate_methods_for_privateuse1_backend()


def small_program() -> None:
    """Create, add, negate, copy back; compare with the same program on the CPU."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
        x = torch.randn(64, 33).mul(100).to(dtype)
        y = torch.randn(64, 33).mul(100).to(dtype)
        xd = x.to("hostdev")  # empty_strided + _copy_from
        yd = y.hostdev()  # the generated method does the same
        zd = -(xd + yd) + torch.full_like(xd, 3)  # add, neg, empty + fill_, add
        z = zd.cpu()  # a CPU empty + our _copy_from
        expected = -(x + y) + 3
        torch.testing.assert_close(z, expected, rtol=0, atol=0)
        print(
            f"{str(dtype):15} on {zd.device}: equal to the CPU result: {torch.equal(z, expected)}"
        )


def tiny() -> None:
    """One line of each: to the device, add, negate, back to the CPU."""
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    z = (-(x.to("hostdev") + y.to("hostdev"))).cpu()
    print("equal to the CPU result:", torch.equal(z, -(x + y)))


def errors() -> None:
    """What the backend does not implement, and what its kernels reject."""
    xd, yd = torch.randn(4, 5).hostdev(), torch.randn(4, 5).hostdev()
    try:
        xd - yd
    except NotImplementedError as err:
        print("NotImplementedError:", str(err).split(". ")[0])
    for bad in (lambda: xd + torch.empty(2, 5, device="hostdev"), lambda: xd + yd.double()):
        try:
            bad()
        except RuntimeError as err:
            print("RuntimeError:", err)


if __name__ == "__main__":
    register_hostdev(sys.argv[1])
    {"program": small_program, "tiny": tiny, "errors": errors}[sys.argv[2]]()
