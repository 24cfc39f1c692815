r"""
Step 2: A C++ CPU kernel
========================

The Python operator of step 1 runs six PyTorch kernels, each a full pass over
memory. Here the same operator becomes one C++ kernel that reads each row
once, with its schema defined in C++ and its kernel registered for the CPU
dispatch key.

In this step you will learn:

* how to define a schema once with ``TORCH_LIBRARY`` and attach a kernel to it
  with ``TORCH_LIBRARY_IMPL(..., CPU, ...)``;
* how to write the kernel: a dtype dispatch, float32 accumulation, and
  ``at::parallel_for`` over rows;
* how to compile it from a script with :func:`torch.utils.cpp_extension.load`
  and call it as a ``torch.ops`` operator;
* how the installed package ``opguide`` ships the same code.

The files shown on this page are the real ones in ``csrc/``; the script below
compiles them.

The schema
----------
One C++ file defines every operator of the library, once:

.. literalinclude:: /../csrc/opguide.cpp
   :language: cpp

``OPGUIDE_LIBRARY(m)`` is ``TORCH_LIBRARY(opguide, m)`` with the namespace
spelled through a macro, so that this step can build a second copy of the same
files under another namespace in the same process (a namespace may be defined
by only one library per process):

.. literalinclude:: /../csrc/registration.h
   :language: cpp
   :start-after: #include <torch/library.h>

The schema string ``rms_norm(Tensor x, Tensor weight, float eps) -> Tensor`` is
the operator's type: ``float`` in a schema is a C++ ``double``, and a plain
``Tensor`` return means a new tensor that aliases no input.

The kernel
----------
The inner loop handles a range of rows. Sixteen independent partial sums let
the compiler vectorise the sum of squares; the second loop finds the row in
cache because it was just read. The loop is plain C++: the compiler turns it
into vector instructions. A library is compiled for the oldest CPUs of its
architecture (on x86-64, 4 floats per vector), so with GCC on x86-64 Linux
``target_clones`` builds a second copy for AVX2 (8 floats per vector), and the
copy the CPU supports is picked when the library loads; step 11 measures it:

.. literalinclude:: /../csrc/rms_norm_cpu.cpp
   :language: cpp
   :start-after: // [cpu-kernel]
   :end-before: // [cpu-kernel-end]

The host function makes the input dense, picks the kernel for the dtype with
``AT_DISPATCH_FLOATING_TYPES_AND2`` (float32, float64, float16, bfloat16) and
splits the rows over threads. The operator checks the arguments and allocates
the output with ``empty_output``: ``at::empty``, or for an output of 2 MiB or
more, memory that the operating system can map in huge pages (step 11 shows
why and how):

.. literalinclude:: /../csrc/rms_norm_cpu.cpp
   :language: cpp
   :start-after: // [cpu-host]
   :end-before: // [cpu-host-end]

The checks are declared in ``rms_norm.h`` and defined once in
``rms_norm_checks.cpp``, shared with the CUDA kernel. Each names the argument
and what was expected, in the words the Python wrapper uses:

.. literalinclude:: /../csrc/rms_norm_checks.cpp
   :language: cpp
   :start-after: // [checks]
   :end-before: // [checks-end]

Finally the kernel is attached to the schema for the ``CPU`` dispatch key
(``_rms_norm_into``, the same kernel writing into an existing tensor, is
there for the benchmark of step 11):

.. literalinclude:: /../csrc/rms_norm_cpu.cpp
   :language: cpp
   :start-after: // [cpu-register]
   :end-before: // [cpu-register-end]
"""

# %%
# Compiling the files from a script
# ---------------------------------
# :func:`torch.utils.cpp_extension.load` writes a ninja file, compiles the
# sources against the installed torch and loads the result. With
# ``is_python_module=False`` the library is loaded with
# :func:`torch.ops.load_library`: it holds no Python module, only operator
# registrations. The build directory is kept inside the repository's
# ``build/`` tree, so a second run only checks timestamps.
#
# ``-DOPGUIDE_NAMESPACE=opguide_jit`` registers this copy as
# ``torch.ops.opguide_jit`` so that it can share the process with the installed
# package, which registers ``torch.ops.opguide``.
import os
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

# sphinx-gallery runs this script from examples_src/; so does the test suite.
ROOT = Path.cwd().parent
CSRC = ROOT / "csrc"
build_dir = ROOT / "build" / "jit" / "rms_norm_cpu"
build_dir.mkdir(parents=True, exist_ok=True)

start = time.perf_counter()
library_path = load(
    name="opguide_jit_cpu",
    sources=[str(CSRC / f) for f in ("opguide.cpp", "rms_norm_checks.cpp", "rms_norm_cpu.cpp")],
    extra_include_paths=[str(CSRC)],
    extra_cflags=["-O3", "-DOPGUIDE_NAMESPACE=opguide_jit"],
    build_directory=str(build_dir),
    is_python_module=False,
    verbose=False,
)
print(f"built and loaded {Path(library_path).name} in {time.perf_counter() - start:.1f} s")
print("objects:", sorted(p.name for p in build_dir.glob("*.o")))

# %%
# The operator is now in the dispatcher, with the schema from C++ and a kernel
# for the CPU key:
op = torch.ops.opguide_jit.rms_norm.default
print(op._schema)
print("CPU kernel registered:", torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU"))

# %%
# Checking it against the reference
# ---------------------------------
# ``opguide.reference`` holds the pure-PyTorch definition (step 1's body) that
# every test compares with. The kernel must match it for every dtype, and for a
# row length that is not a multiple of the 16 lanes:
from opguide.reference import rms_norm_reference  # noqa: E402

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
}
torch.manual_seed(0)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for shape in [(3, 7), (64, 1000), (8, 4096)]:
        x = torch.randn(shape, dtype=dtype)
        w = torch.randn(shape[-1], dtype=dtype)
        y = torch.ops.opguide_jit.rms_norm(x, w, 1e-6)
        torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6), **TOL[dtype])
        err = (y.float() - rms_norm_reference(x, w, 1e-6).float()).abs().max().item()
        print(f"{str(dtype):15} {str(shape):11} max |error| = {err:.2e}")

# %%
# A C++ operator needs a fake kernel too. It is written in Python, as in
# step 1, but registered by name because the operator was defined in C++.
# With it, :func:`torch.library.opcheck` passes:
torch.library.register_fake("opguide_jit::rms_norm")(lambda x, w, eps: x.new_empty(x.shape))
sample = (torch.randn(5, 33), torch.randn(33), 1e-6)
print(torch.library.opcheck(op, sample))

# %%
# The same operator from the installed package
# --------------------------------------------
# ``pip install --no-build-isolation .`` compiles the same files through
# ``setup.py`` into ``opguide/_C.abi3.so``. Importing ``opguide`` loads it,
# registers ``torch.ops.opguide.rms_norm``, adds the fake kernel and exports a
# checked Python wrapper, :func:`opguide.rms_norm`:
import opguide  # noqa: E402

print(
    "loaded", os.path.relpath(opguide._library.library_path(), Path(opguide.__file__).parent.parent)
)
x = torch.randn(16, 4096)
w = torch.randn(4096)
y_package = opguide.rms_norm(x, w, eps=1e-6)
y_ops = torch.ops.opguide.rms_norm(x, w, 1e-6)
y_jit = torch.ops.opguide_jit.rms_norm(x, w, 1e-6)
torch.testing.assert_close(y_package, rms_norm_reference(x, w, 1e-6))
print("package == torch.ops.opguide:", torch.equal(y_package, y_ops))
print("max |package - JIT build|:", (y_package - y_jit).abs().max().item())

# %%
# The wrapper's checks name the argument that is wrong:
for bad in [(x.int(), w), (x, w.half()), (x, w[:100])]:
    try:
        opguide.rms_norm(*bad)
    except (TypeError, ValueError, RuntimeError) as err:
        print(f"{type(err).__name__}: {err}")

# %%
# How fast is it?
# ---------------
# A first look (the performance chapter measures properly): the C++ kernel
# against the Python operator of step 1 and PyTorch's own RMSNorm, on one
# (2048, 4096) float32 input, median of several runs.
import statistics  # noqa: E402


def median_ms(fn, *args, repeat=15):
    fn(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


x = torch.randn(2048, 4096)
w = torch.randn(4096)


def python_ops(x, w):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w


for name, fn in [
    ("opguide.rms_norm (C++)", lambda: opguide.rms_norm(x, w)),
    ("torch.nn.functional.rms_norm", lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6)),
    ("step 1 body (6 PyTorch ops)", lambda: python_ops(x, w)),
    ("x.clone() (memory floor)", lambda: x.clone()),
]:
    print(f"{name:32} {median_ms(fn):7.2f} ms")
