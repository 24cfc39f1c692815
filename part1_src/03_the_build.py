r"""
3. The build
============

:doc:`Page 2 <02_a_cpu_and_a_cuda_kernel>` wrote two source files. This page
compiles them into one library, ``first_op/_C``, with setuptools and the
extension classes of :mod:`torch.utils.cpp_extension`, then calls the
operator on each kernel.

On this page you will:

* read a ``setup.py`` that builds the C++ kernel everywhere and the CUDA
  kernel where CUDA is at hand;
* build the project against the torch you have installed;
* call the operator on the CPU, and on a GPU where there is one.

``setup.py``
------------

.. literalinclude:: /../first_operator/setup.py
   :language: python
   :caption: first_operator/setup.py

:class:`~torch.utils.cpp_extension.CppExtension` and
:class:`~torch.utils.cpp_extension.CUDAExtension` add torch's include
folders, libraries and flags; ``CUDAExtension`` also compiles ``.cu`` files
with nvcc and links the CUDA runtime. Where torch is not a CUDA build, or
no CUDA toolkit is found, the library is built from the ``.cpp`` file alone
and the operator has no CUDA kernel. nvcc compiles for the architectures in
``TORCH_CUDA_ARCH_LIST`` (``9.0`` for an H100, say); unset, torch takes those
of the visible GPUs, so a machine without one needs it set.
``BuildExtension`` runs the compilers (with ninja when it is installed,
several files at a time).

``py_limited_api=True`` and the wheel's ``py_limited_api`` option make one
build serve every CPython from 3.10 on (a wheel tagged ``cp310-abi3``): the
library calls no Python C API, and the ``Py_LIMITED_API`` macro makes the
compiler refuse any call outside the limited API should a header bring one
in. It is still tied to the torch it was built against, whose C++ API changes
from one release to the next.

The package metadata sits in ``pyproject.toml``:

.. literalinclude:: /../first_operator/pyproject.toml
   :language: toml
   :caption: first_operator/pyproject.toml

Building it
-----------
From the project folder, in an environment that has torch:

.. code-block:: bash

   pip install --no-build-isolation -e .

``--no-build-isolation`` compiles against the torch already installed.
Without it, pip would build in a fresh temporary environment with whatever
torch it downloads there, and the library would then refuse to load next to
yours, or crash. ``-e`` installs the project in place: the library lands in
``first_op/`` beside the Python files, and an edit of a Python file needs no
new install (an edit of a C++ file needs the command again).

The cell below builds a wheel from a copy of the project, the same build
that the install runs, and lists what it holds:
"""

import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import first_op
import torch

PROJECT = Path(first_op.__file__).resolve().parents[1]  # first_operator/
print(f"torch {torch.__version__}, GPU visible: {torch.cuda.is_available()}")
with tempfile.TemporaryDirectory(prefix="first_op-build-") as work:
    copy = Path(work) / "first_operator"
    built = ("build", "dist", "*.egg-info", "_C.*", "__pycache__")
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns(*built))
    print("$ pip wheel --no-build-isolation --no-deps -w dist .")
    start = time.perf_counter()
    pip = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    pip += ["-w", "dist", "."]
    done = subprocess.run(pip, cwd=copy, capture_output=True, text=True)
    if done.returncode != 0:
        print((done.stdout + done.stderr)[-4000:])
    assert done.returncode == 0, "the build failed"
    wheel = next((copy / "dist").glob("*.whl"))
    print(f"built {wheel.name} in {time.perf_counter() - start:.0f} s")
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            print(f"{info.file_size:>10,d}  {info.filename}")

# %%
# The wheel holds the two Python files and the library, ``_C.abi3.so``; its
# name carries the ``cp310-abi3`` tag. ``pip install`` of that file, in an
# environment with the same torch, installs the operator.
#
# Where each kernel runs
# ----------------------
# This site's environment has the project installed with the command above.
# ``import first_op`` loads the library (:doc:`page 4 <04_the_python_side>`
# shows how), and the dispatcher then picks the kernel by the device of the
# tensors. On the CPU, in every dtype, against PyTorch's own
# :func:`torch.nn.functional.rms_norm`:
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def ulps_from_pytorch(device: str, dtype: torch.dtype) -> float:
    """The largest difference of first_op.rms_norm from F.rms_norm on random
    (33, 4097) inputs, in units in the last place of the dtype (ulps)."""
    x = torch.randn(33, 4097, dtype=dtype, device=device)
    weight = torch.randn(4097, dtype=dtype, device=device)
    y = first_op.rms_norm(x, weight, 1e-6).double()
    expected = torch.nn.functional.rms_norm(x, (4097,), weight, eps=1e-6).double()
    # The spacing of the dtype's numbers at each expected value.
    magnitude = expected.abs().clamp_min(torch.finfo(dtype).tiny)
    ulp = torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(magnitude)))
    return ((y - expected).abs() / ulp).max().item()


torch.manual_seed(0)
for dtype in DTYPES:
    apart = ulps_from_pytorch("cpu", dtype)
    print(f"cpu  {str(dtype):15} at most {apart:.0f} ulp apart")

# %%
# The two add up each row in a different order. In float32 and float64 the
# sums are kept in the output's own precision, so the order shows in the
# low bits of the results: some ulps, a few bits of the 24 or 53 (the first
# two lines above). A 16-bit result is a float32 value rounded once,
# so the two differ only where that value lies close to halfway between two
# 16-bit numbers, and then by one unit. On a GPU the same call runs the CUDA kernel;
# where this page ran without one, the cell says so instead:
if torch.cuda.is_available():
    print("GPU:", torch.cuda.get_device_name())
    for dtype in DTYPES:
        apart = ulps_from_pytorch("cuda", dtype)
        print(f"cuda {str(dtype):15} at most {apart:.0f} ulp apart")
else:
    print("SKIPPED: no CUDA GPU here; the CUDA kernel was compiled on page 2, not run")
