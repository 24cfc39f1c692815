"""Test set-up shared by every test module.

Without a GPU, the Triton kernels run in Triton's interpreter. It must be
chosen before triton is first imported, which is why it is set here, before
any test module imports the package.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
