"""An out-of-range index on the GPU: where does Python report the error?

CUDA kernels run asynchronously, so a kernel's failure surfaces at a later
CUDA call that checks for errors. Run it twice: as is, and with
CUDA_LAUNCH_BLOCKING=1, which makes every launch wait for its kernel.
"""

import torch

x = torch.randn(1000, device="cuda")
index = torch.tensor([0, 5000], device="cuda")  # 5000 is out of range
y = x[index]  # the failing kernel is launched here
z = (y * 2).sum()
print("sum:", z.item())  # .item() waits for the GPU; a later launch may report the error first
