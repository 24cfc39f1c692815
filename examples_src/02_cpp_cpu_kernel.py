r"""
Step 2: A C++ CPU kernel
========================

Part I writes RMSNorm as one C++ file: a schema in ``TORCH_LIBRARY``, a CPU
kernel in ``TORCH_LIBRARY_IMPL``. This step adds:

* compiling such a file from a script with :func:`torch.utils.cpp_extension.load`;
* what ``at::parallel_for`` needs to use more than one thread;
* the library's own CPU kernel, its checks, and a first timing.

The whole operator in one file
------------------------------
A file like Part I's, in a namespace of its own, ``opguide_minimal``: every
include, the kernel, the schema and the registration. The cell below builds
it:

.. literalinclude:: /../csrc/minimal/rms_norm_minimal.cpp
   :language: cpp
   :caption: csrc/minimal/rms_norm_minimal.cpp

``at::opmath_type<scalar_t>`` is float for the 16-bit types, so bfloat16 rows
are summed in float32 and rounded once. ``at::parallel_for`` splits the rows
over PyTorch's threads, in tasks of at least ``GRAIN_SIZE`` elements, only in
a file compiled with OpenMP (``-fopenmp``): without it, ATen's headers run the
whole range as one call (`ATen/ParallelOpenMP.h
<https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/ParallelOpenMP.h>`__
defines ``INTRA_OP_PARALLEL`` only under ``_OPENMP``; `ATen/Parallel-inl.h
<https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/Parallel-inl.h>`__
calls ``f(begin, end)`` once without it).
"""

# %%
# Compiling the file from a script
# --------------------------------
# :func:`torch.utils.cpp_extension.load` compiles the sources against the
# installed torch with ninja and loads the result; ``is_python_module=False``
# loads it with :func:`torch.ops.load_library`, since it holds only operator
# registrations. A second run in the same build directory checks timestamps.
import os
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

from guidekit.buildinfo import load_line
from guidekit.compile_checks import source_root

# sphinx_gallery_thumbnail_path = "_thumbnails/02.png"
# sphinx_gallery_parallel = False  # it times kernels on the CPU: runs alone
ROOT = source_root()  # the opguide source tree (csrc/ is there)
build_dir = ROOT / "build" / "jit" / "rms_norm_minimal_cpu"
build_dir.mkdir(parents=True, exist_ok=True)

start = time.time()
library_path = load(
    name="rms_norm_minimal_cpu",
    sources=[str(ROOT / "csrc" / "minimal" / "rms_norm_minimal.cpp")],
    extra_cflags=["-O3", "-fopenmp"],  # -fopenmp: at::parallel_for uses torch's threads
    extra_ldflags=["-fopenmp"],
    build_directory=str(build_dir),
    is_python_module=False,
    verbose=False,
)
print(load_line(library_path, since=start))

# %%
# The schema from C++, and a kernel for the CPU key:
op = torch.ops.opguide_minimal.rms_norm.default
print(op._schema)
print("CPU kernel registered:", torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU"))

# %%
# Checking it against the reference
# ---------------------------------
# Every test compares with ``opguide.reference``, step 1's body that keeps
# float64 for float64, in every dtype and row length:
from opguide.reference import rms_norm_reference  # noqa: E402

# The tolerance of one rounding to each dtype (opguide's tests use the same table).
from opguide.testing import TOLERANCES as TOL  # noqa: E402

torch.manual_seed(0)
for dtype in TOL:  # float32, float16, bfloat16 and float64
    for shape in [(3, 7), (64, 1000), (8, 4096)]:
        x = torch.randn(shape, dtype=dtype)
        w = torch.randn(shape[-1], dtype=dtype)
        y = torch.ops.opguide_minimal.rms_norm(x, w, 1e-6)
        torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6), **TOL[dtype])
        err = (y.float() - rms_norm_reference(x, w, 1e-6).float()).abs().max().item()
        print(f"{str(dtype):15} {str(shape):11} max |error| = {err:.2e}")

# %%
# With ``-fopenmp`` the rows go to :func:`torch.get_num_threads` threads, on a
# torch that uses OpenMP as the Linux wheels do (one built with its native
# thread pool, ``ATen/ParallelNative.h``, shares them without the flag). One
# thread against all, the best of nine calls each, taking turns:
x_big, w_big = torch.randn(4096, 4096), torch.randn(4096)
threads = torch.get_num_threads()
best = {1: float("inf"), threads: float("inf")}
for _ in range(9):
    for n in best:
        torch.set_num_threads(n)
        start = time.perf_counter()
        torch.ops.opguide_minimal.rms_norm(x_big, w_big, 1e-6)
        best[n] = min(best[n], (time.perf_counter() - start) * 1e3)
torch.set_num_threads(threads)
print(f"1 thread: {best[1]:.1f} ms; {threads} threads: {best[threads]:.1f} ms", end="")
print(f", {best[1] / best[threads]:.1f}x as fast" if threads > 1 else " (one thread here)")
if threads > 1 and best[threads] >= best[1]:
    print(
        "More threads were not faster here. Two common causes: other work keeps the cores "
        "busy while OpenMP threads spin waiting for theirs (try OMP_WAIT_POLICY=PASSIVE), or "
        "the library and torch load two OpenMP runtimes (OMP_DISPLAY_ENV=TRUE prints one block "
        "per runtime loaded)."
    )

# %%
# The fake kernel of an operator defined in C++ is registered from Python by
# name; with it, :func:`torch.library.opcheck` passes:
torch.library.register_fake("opguide_minimal::rms_norm")(
    lambda x, w, eps: torch.empty_like(x, memory_format=torch.contiguous_format)
)
sample = (torch.randn(5, 33), torch.randn(33), 1e-6)
print(torch.library.opcheck(op, sample))

# %%
# The library's CPU kernel
# ------------------------
# opguide keeps one folder per operator: a file of schemas, a file per
# kernel, and checks that the CPU and CUDA kernels share. RMSNorm's schemas:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_schema.cpp
#    :language: cpp
#    :caption: csrc/rms_norm/rms_norm_schema.cpp
#
# Its CPU kernel computes what the minimal one does, with two additions,
# each with its reason in the file; this page times neither against its
# absence:
#
# * sixteen independent partial sums of squares;
# * on GCC/x86-64 Linux, ``target_clones("avx2", "default")`` (`GCC's
#   documentation
#   <https://gcc.gnu.org/onlinedocs/gcc/Common-Function-Attributes.html>`__).
#
# Both kernels take their outputs from PyTorch's allocator (``at::empty``),
# so PyTorch's settings reach them: ``THP_MEM_ALLOC_ENABLE=1`` makes its CPU
# allocator advise allocations of 2 MiB and more for transparent huge pages
# (`c10/core/impl/alloc_cpu.cpp
# <https://github.com/pytorch/pytorch/blob/main/c10/core/impl/alloc_cpu.cpp>`__).
#
# The same kernels serve ``rms_norm_forward``, which also returns the statistic
# the backward needs (:doc:`step 8 <08_autograd>`). The row loop is plain C++
# in a header without torch (``rms_norm_cpu.h``).
#
# .. dropdown:: csrc/rms_norm/rms_norm_cpu.h and csrc/rms_norm/rms_norm_cpu.cpp, the whole files
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_cpu.h
#       :language: cpp
#       :caption: csrc/rms_norm/rms_norm_cpu.h
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_cpu.cpp
#       :language: cpp
#       :caption: csrc/rms_norm/rms_norm_cpu.cpp
#
# The checks name the argument and what was expected, spelling dtypes and
# shapes as Python prints them (``csrc/common/messages.h``, shared by every
# operator):
#
# .. dropdown:: The checks and the message pieces, the whole files
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm.h
#       :language: cpp
#       :caption: csrc/rms_norm/rms_norm.h
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_checks.cpp
#       :language: cpp
#       :caption: csrc/rms_norm/rms_norm_checks.cpp
#
#    .. literalinclude:: /../csrc/common/messages.h
#       :language: cpp
#       :caption: csrc/common/messages.h
#
#    .. literalinclude:: /../csrc/common/messages.cpp
#       :language: cpp
#       :caption: csrc/common/messages.cpp
#
# The installed package
# ---------------------
# ``pip install --no-build-isolation .`` compiles these files into
# ``opguide/_C.abi3.so`` (:doc:`step 6 <06_the_build>`). Importing ``opguide``
# loads it, adds the fake kernel and exports the checked wrapper
# :func:`opguide.rms_norm`:
import opguide  # noqa: E402

print(
    "loaded", os.path.relpath(opguide._library.library_path(), Path(opguide.__file__).parent.parent)
)
x = torch.randn(16, 4096)
w = torch.randn(4096)
y_package = opguide.rms_norm(x, w, eps=1e-6)
y_ops = torch.ops.opguide.rms_norm(x, w, 1e-6)
y_minimal = torch.ops.opguide_minimal.rms_norm(x, w, 1e-6)
torch.testing.assert_close(y_package, rms_norm_reference(x, w, 1e-6))
print("package == torch.ops.opguide:", torch.equal(y_package, y_ops))
print("max |package - minimal|:", (y_package - y_minimal).abs().max().item())

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
# A first look (:doc:`step 11 <11_performance>` measures properly) on one
# (2048, 4096) float32 input: the two kernels, step 1's body, PyTorch's
# RMSNorm, and two copies of the same bytes, ``y.copy_(x)`` into a tensor that
# exists and ``x.clone()`` into new memory from PyTorch's allocator, where
# both kernels take their outputs too (step 11 also times the library's loop
# alone, into an existing tensor). The six take turns, round after round;
# each line gives the median and the middle half of the samples, and the last
# lines are computed from this run.
import statistics  # noqa: E402

x = torch.randn(2048, 4096)
w = torch.randn(4096)
y = torch.empty_like(x)


def python_ops(x, w):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w


LIBRARY, MINIMAL = "opguide.rms_norm (C++)", "the minimal kernel above"
COPY = "y.copy_(x) (same bytes)"
candidates = {
    LIBRARY: lambda: opguide.rms_norm(x, w),
    MINIMAL: lambda: torch.ops.opguide_minimal.rms_norm(x, w, 1e-6),
    "F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6),
    "step 1 body (6 PyTorch ops)": lambda: python_ops(x, w),
    COPY: lambda: y.copy_(x),
    "x.clone() (same bytes)": lambda: x.clone(),
}
samples = {name: [] for name in candidates}
for fn in candidates.values():
    fn()
for _ in range(15):
    for name, fn in candidates.items():
        t0 = time.perf_counter()
        fn()
        samples[name].append((time.perf_counter() - t0) * 1e3)
median = {name: statistics.median(v) for name, v in samples.items()}
wide = []  # names whose middle half is wider than a quarter of their median
for name, v in samples.items():
    q1, _, q3 = statistics.quantiles(v, n=4)
    if (q3 - q1) / median[name] > 0.25:
        wide.append(name)
    print(f"{name:30} {median[name]:7.2f} ms   middle half {q1:6.2f} to {q3:6.2f}")
ratio = median[MINIMAL] / median[LIBRARY]
quarts = {name: statistics.quantiles(samples[name], n=4) for name in (LIBRARY, MINIMAL)}
overlap = min(quarts[LIBRARY][2], quarts[MINIMAL][2]) >= max(quarts[LIBRARY][0], quarts[MINIMAL][0])
if overlap:
    print(
        f"the minimal kernel takes {ratio:.2f}x the library kernel's time at the median; "
        "their middle halves overlap: no winner in these samples"
    )
else:
    faster = LIBRARY if ratio > 1 else MINIMAL
    print(f"the minimal kernel takes {ratio:.2f}x the library kernel's time: {faster} won")
clone = median["x.clone() (same bytes)"]
print(f"the library kernel takes {median[LIBRARY] / clone:.2f}x the time of x.clone()")
if COPY in wide:
    print(
        "even the copy's samples spread widely: something on this machine (other work "
        "sharing the cores, for one) slowed some rounds; the order may change"
    )
elif wide:
    print(f"the samples of {', '.join(wide)} spread widely; those of y.copy_(x) did not")

# %%
# Each bar is a median, its line the middle half:
import matplotlib.pyplot as plt  # noqa: E402

names = sorted(samples, key=median.get)
quart = {name: statistics.quantiles(samples[name], n=4) for name in names}
fig, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
ax.barh(
    names,
    [median[n] for n in names],
    xerr=[[median[n] - quart[n][0] for n in names], [quart[n][2] - median[n] for n in names]],
    capsize=3,
)
ax.invert_yaxis()  # the fastest of this run on top
ax.set_xlabel("ms per call (2048 x 4096 float32, CPU): median and middle half")
plt.show()
