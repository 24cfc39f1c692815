r"""
2. A CPU kernel and a CUDA kernel
=================================

The operator of :doc:`page 1 <01_the_operator_in_python>` ran several
PyTorch kernels. This page gives it one kernel of its own for CPU tensors,
in C++, and one for GPU tensors, in CUDA. Each file is shown whole; the next
page builds them into one library.

On this page you will:

* read a CPU kernel: its checks, its dtypes, and the loop over the rows;
* declare the schema with ``TORCH_LIBRARY`` and register a kernel with
  ``TORCH_LIBRARY_IMPL``;
* read a CUDA kernel and the four things its C++ side must do;
* compile the CUDA file with ``nvcc``, which needs no GPU.

The C++ file
------------
One file holds the operator's schema and its CPU kernel:

.. literalinclude:: /../first_operator/csrc/rms_norm.cpp
   :language: cpp
   :caption: first_operator/csrc/rms_norm.cpp

What to notice:

* **Checks first.** A wrong dtype, shape or device raises an error that names
  the argument; ``TORCH_CHECK_TYPE`` and ``TORCH_CHECK_VALUE`` become Python's
  ``TypeError`` and ``ValueError``. The kernels ask more than page 1's Python
  body did: ``weight`` must have the dtype of ``x`` (page 1 cast it), so a
  bfloat16 ``x`` with a float32 ``weight`` is refused, where a model would
  cast its weight first.
* **Dense rows.** ``contiguous()`` copies a strided input into dense rows (and
  returns a dense one as it is), so the kernel can walk each row with one
  pointer.
* **PyTorch allocates.** ``at::empty_like`` takes the output from PyTorch's
  allocator, like every PyTorch operator.
* **Every floating dtype.** ``AT_DISPATCH_FLOATING_TYPES_AND2`` instantiates
  the lambda for float32 and float64, plus the two named 16-bit types, with
  ``scalar_t`` set to each. ``at::opmath_type<scalar_t>`` is float for the
  16-bit types, so sums are kept in float32 and each output is rounded once.
* **Threads.** ``at::parallel_for`` splits the rows over PyTorch's CPU
  threads, in tasks of at least 32768 elements.
* **Registration.** ``TORCH_LIBRARY(first_op, m)`` defines the namespace
  ``first_op`` and, with ``m.def``, the schema: the same text that
  ``custom_op`` inferred on page 1. ``set_python_module`` says where the
  Python side lives (:doc:`page 4 <04_the_python_side>`).
  ``TORCH_LIBRARY_IMPL(first_op, CPU, m)`` gives the operator a kernel for
  the ``CPU`` dispatch key: PyTorch's dispatcher calls it whenever the
  tensors are on the CPU.

The CUDA file
-------------
The GPU kernel runs one block of 256 threads per row. The threads of a
block stride over its row and sum the squares they meet; the block adds the
256 sums in shared memory, halving the number of active threads at each
step; then each thread scales the elements it visited:

.. literalinclude:: /../first_operator/csrc/rms_norm_cuda.cu
   :language: cuda
   :caption: first_operator/csrc/rms_norm_cuda.cu

Its C++ function does four things every CUDA operator must do:

* **device guard**: ``CUDAGuard`` makes ``x``'s GPU the current one during
  the call, so the output is allocated and the kernel launched on that GPU
  whichever GPU the caller made current;
* **current stream**: the kernel is queued on PyTorch's current stream, in
  order with the caller's other work (`CUDA semantics
  <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-streams>`__);
* **dtype dispatch**: the same macro as on the CPU;
* **launch check**: ``C10_CUDA_KERNEL_LAUNCH_CHECK`` turns a failed launch
  into a Python ``RuntimeError``.

The file defines no schema: its ``TORCH_LIBRARY_IMPL(first_op, CUDA, m)``
adds a kernel for the ``CUDA`` key to the operator that ``rms_norm.cpp``
defines. It includes only the ``c10/cuda`` headers it uses; the larger
``ATen/cuda/CUDAContext.h`` would pull in cuBLAS's headers too (through
``ATen/cuda/CUDAContextLight.h``, which includes ``cublas_v2.h``).
"""

# %%
# Compiling the CUDA file without a GPU
# -------------------------------------
# ``nvcc -c`` compiles the file into an object file, and a GPU plays no part
# in that. The command takes torch's include folders and the flags that
# torch's own extension builds give nvcc (``COMMON_NVCC_FLAGS``), and one
# more for a CPU-only torch: ``-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE``, since
# only CUDA builds of torch ship the header that ``c10/cuda`` would otherwise
# include. ``-arch=sm_80`` compiles for Ampere (A100) and adds PTX, which
# later GPUs compile when they load the library. The cell finds the project
# through the installed package, prints the command as you would type it
# from the project folder, and runs it:
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import first_op
from torch.utils.cpp_extension import COMMON_NVCC_FLAGS, include_paths

PROJECT = Path(first_op.__file__).resolve().parents[1]  # first_operator/
TORCH_INCLUDE = include_paths()[0]


def typed(command: list[str], width: int = 80) -> str:
    """A command as a shell takes it, on lines of at most ``width`` characters."""
    words = [w.replace(TORCH_INCLUDE, "$TORCH_INCLUDE") for w in command]
    lines = ["$"]
    for word in words:
        if len(lines[-1]) + len(word) + 1 > width:
            lines.append("   ")
        lines[-1] += " " + (word if word.startswith("-I$") else shlex.quote(word))
    return " \\\n".join(lines)


command = ["nvcc", "-c", "csrc/rms_norm_cuda.cu", "-o", "/dev/null", "-arch=sm_80"]
command += ["-std=c++20", "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", *COMMON_NVCC_FLAGS]
command += ["-I" + path for path in include_paths()]
FIND_INCLUDE = "import torch.utils.cpp_extension as c; print(c.include_paths()[0])"
print(f'$ TORCH_INCLUDE=$(python -c \\\n    "{FIND_INCLUDE}")')
print(typed(command))
nvcc = shutil.which("nvcc")
if nvcc is None:
    print("SKIPPED: nvcc is not on PATH, so the CUDA file was not compiled here")
else:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True)
    said = (done.stdout + done.stderr).splitlines()
    warnings = sum("warning" in line for line in said)
    seconds = time.perf_counter() - start
    print(f"exit status {done.returncode}, {warnings} warning lines, {seconds:.0f} s")
    if done.returncode != 0:
        print((done.stdout + done.stderr)[-3000:])
    assert done.returncode == 0, "the CUDA kernel does not compile"

# %%
# On a machine with a GPU, the build of the next page compiles the same file
# for that GPU's architecture, and the library runs it.
