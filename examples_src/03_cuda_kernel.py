r"""
Step 3: A CUDA kernel
=====================

The C++ kernel of step 2 serves CPU tensors. This step adds the kernel for
CUDA tensors behind the same schema: the dispatcher picks it whenever ``x``
lives on a GPU, and nothing changes for the caller.

In this step you will learn:

* how to split a GPU kernel into torch-free device code (a ``.cuh`` header that
  nvcc and hipcc can compile alone) and a thin torch wrapper (a ``.cu`` file);
* how the kernel is shaped for a memory-bound op: one block row per tensor row,
  16-byte loads, the row kept in registers between the two passes;
* how the wrapper picks the stream, the device and the dtype, and checks the
  launch;
* how to build it with :func:`torch.utils.cpp_extension.load`, and how to
  compile-check it with ``nvcc`` on a machine with no GPU.

On a machine with a CUDA GPU this page compiles the kernel, runs it and checks
it against the reference. Without one it compiles the same files with
``nvcc -c`` (when nvcc is installed) and says plainly that nothing ran on a GPU.

The device code
---------------
RMSNorm reads ``x`` and writes ``y`` once; the arithmetic is a few operations
per element. Its speed is therefore the memory bandwidth it reaches, and the
kernel is shaped around memory traffic:

* **one read of x**: each thread loads its part of the row into registers,
  with the matching part of the weight, sums the squares, and, after the
  row's threads have combined their sums, scales the values it already holds;
* **16-byte accesses**: eight bf16 (or four fp32) elements per load
  instruction, when the row length and the pointers allow;
* **float32 accumulation** whatever the storage type.

The element type conversions, the vector type, and the cache-hint helpers
that the backward uses:

.. literalinclude:: /../csrc/rms_norm.cuh
   :language: cuda
   :start-after: // [convert]
   :end-before: // [vector-end]

``keep_packed``, in its own header because the fused kernel of step 10 uses
it too, is an empty ``asm`` statement that stops the compiler from holding
converted copies of ``x`` in extra registers (step 11, story 13, measures
what that is worth):

.. literalinclude:: /../csrc/keep_packed.cuh
   :language: cuda
   :start-after: // [keep-packed]
   :end-before: // [keep-packed-end]

The reduction over a row: shuffles inside each warp, then one value per warp
through shared memory:

.. literalinclude:: /../csrc/rms_norm.cuh
   :language: cuda
   :start-after: // [reduce]
   :end-before: // [reduce-end]

The kernel. ``threadIdx.y`` selects the row inside the block, ``threadIdx.x``
the thread inside the row:

.. literalinclude:: /../csrc/rms_norm.cuh
   :language: cuda
   :start-after: // [kernel]
   :end-before: // [kernel-end]

The grid shape comes from the row length: enough threads per row that each
holds four 16-byte vectors of ``x`` and four of the weight (measured: see
step 11), and two rows per block when rows are short. The
launcher also picks the vector width from the alignment of the data, and
launches through a helper of ``csrc/launch.cuh`` that step 11 explains:

.. literalinclude:: /../csrc/rms_norm.cuh
   :language: cuda
   :start-after: // [launch]
   :end-before: // [launch-end]

The torch wrapper
-----------------
The ``.cu`` file is the only place that knows about tensors. It maps torch's
``at::Half``/``at::BFloat16`` to CUDA's types (same bits):

.. literalinclude:: /../csrc/rms_norm_cuda.cu
   :language: cuda
   :start-after: // [cuda-types]
   :end-before: // [cuda-types-end]

and does four things every CUDA operator must do:

* **device guard**: ``c10::cuda::CUDAGuard`` makes ``x``'s GPU current for the
  duration of the call, so allocations and the launch go to the right GPU on a
  multi-GPU machine;
* **current stream**: the kernel is queued on
  ``c10::cuda::getCurrentCUDAStream()`` (``at::cuda::getCurrentCUDAStream`` is the
  same function), the stream PyTorch uses on this thread. A kernel launched on
  the default stream instead would race with work on side streams and escape
  CUDA graph capture;
* **dtype dispatch**: ``AT_DISPATCH_FLOATING_TYPES_AND2`` instantiates the
  launcher for float32, float64, float16 and bfloat16;
* **error checks**: ``C10_CUDA_CHECK`` on the launch's return code and
  ``C10_CUDA_KERNEL_LAUNCH_CHECK()`` after it turn a bad launch into a Python
  ``RuntimeError`` instead of a silent wrong answer.

.. literalinclude:: /../csrc/rms_norm_cuda.cu
   :language: cuda
   :start-after: // [cuda-host]
   :end-before: // [cuda-host-end]

It registers for the ``CUDA`` dispatch key, next to step 2's ``CPU`` kernel:

.. literalinclude:: /../csrc/rms_norm_cuda.cu
   :language: cuda
   :start-after: // [cuda-register]
   :end-before: // [cuda-register-end]

The wrapper includes only ``c10/cuda`` headers, not ``ATen/cuda/CUDAContext.h``:
the latter pulls in cuBLAS and cuSPARSE headers, which a CPU-only torch does
not ship, and this kernel needs neither.
"""

# %%
# Where are we running?
# ---------------------
import time
from pathlib import Path

import torch

from opguide import compile_checks

ROOT = Path.cwd().parent  # sphinx-gallery runs this script from examples_src/
CSRC = ROOT / "csrc"
HAVE_GPU = torch.version.cuda is not None and torch.cuda.is_available()
print(f"torch {torch.__version__}, CUDA build: {torch.version.cuda}, GPU visible: {HAVE_GPU}")
if HAVE_GPU:
    print("GPU:", torch.cuda.get_device_name())

# %%
# Compile-checking without a GPU
# ------------------------------
# ``nvcc -c`` needs no GPU. :mod:`opguide.compile_checks` compiles the
# torch-free device code on its own (every kernel instantiated for every dtype
# by ``csrc/device_checks/rms_norm.cu``), then the torch wrapper against the
# installed torch's headers with the flags torch's own builds use. This runs
# on every machine that has nvcc, GPU or not; the test suite does the same.
nvcc = compile_checks.find_nvcc()
print("nvcc:", nvcc or "not found")
results = [
    compile_checks.nvcc_check(CSRC / "device_checks" / "rms_norm.cu", with_torch=False),
    compile_checks.nvcc_check(CSRC / "rms_norm_cuda.cu", with_torch=True),
]
for result in results:
    print(result.summary())
    if result.status == "failed":
        print(result.output[-3000:])
assert not any(r.status == "failed" for r in results), "a CUDA source does not compile"
if results[1].ok:
    flags = [c for c in results[1].command if c.startswith(("-arch", "-std", "-D__CUDA", "--expt"))]
    print("flags:", " ".join(flags))

# %%
# Building and running it on a GPU
# --------------------------------
# :func:`torch.utils.cpp_extension.load` compiles ``.cu`` sources with nvcc
# and the rest with the C++ compiler, then links one library. As in step 2,
# this copy registers under its own namespace (``opguide_jit_cuda``) so that it
# can share the process with the installed package.
if not HAVE_GPU:
    print(
        "SKIPPED: no CUDA GPU here, so the kernel was compiled (above, when nvcc is "
        "present) but not run. On a CUDA machine this cell builds and runs it."
    )
else:
    from torch.utils.cpp_extension import load

    build_dir = ROOT / "build" / "jit" / "rms_norm_cuda"
    build_dir.mkdir(parents=True, exist_ok=True)
    define = "-DOPGUIDE_NAMESPACE=opguide_jit_cuda"
    start = time.perf_counter()
    load(
        name="opguide_jit_cuda",
        sources=[
            str(CSRC / f)
            for f in ("opguide.cpp", "rms_norm_checks.cpp", "rms_norm_cpu.cpp", "rms_norm_cuda.cu")
        ],
        extra_include_paths=[str(CSRC)],
        extra_cflags=["-O3", define],
        extra_cuda_cflags=["-O3", define],
        build_directory=str(build_dir),
        is_python_module=False,
    )
    print(f"built and loaded in {time.perf_counter() - start:.1f} s")
    op = torch.ops.opguide_jit_cuda.rms_norm.default
    print(op._schema)
    for key in ("CPU", "CUDA"):
        print(f"{key} kernel:", torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key))

# %%
# Checking it against the reference
# ---------------------------------
# Random inputs in every dtype, with row lengths that take the 16-byte path
# (4096), the one-element path (4097, odd) and the longest rows:
from opguide.reference import rms_norm_reference  # noqa: E402

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
}
if HAVE_GPU:
    torch.manual_seed(0)
    for dtype in TOL:
        for shape in [(1, 7), (1000, 4096), (33, 4097), (4, 16384)]:
            x = torch.randn(shape, dtype=dtype, device="cuda")
            w = torch.randn(shape[-1], dtype=dtype, device="cuda")
            y = torch.ops.opguide_jit_cuda.rms_norm(x, w, 1e-6)
            ref = rms_norm_reference(x, w, 1e-6)
            torch.testing.assert_close(y, ref, **TOL[dtype])
            err = (y.float() - ref.float()).abs().max().item()
            print(f"{str(dtype):15} {str(shape):12} max |error| = {err:.2e}")
else:
    print("SKIPPED: no CUDA GPU; the CPU kernel was checked in step 2.")

# %%
# The installed package
# ---------------------
# ``setup.py`` adds ``csrc/*.cu`` to the extension when torch has CUDA and a
# toolkit is found (``USE_CUDA=1`` insists, ``USE_CUDA=0`` refuses;
# ``TORCH_CUDA_ARCH_LIST="9.0"`` targets H100/H200). ``opguide.rms_norm`` then
# reaches the CUDA kernel for CUDA tensors through the dispatcher:
import opguide  # noqa: E402

op = torch.ops.opguide.rms_norm.default
has_cuda_kernel = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CUDA")
print("installed opguide has a CUDA kernel:", has_cuda_kernel)
if HAVE_GPU and has_cuda_kernel:
    x = torch.randn(8192, 4096, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
    torch.testing.assert_close(
        opguide.rms_norm(x, w), rms_norm_reference(x, w), **TOL[torch.bfloat16]
    )

    def gpu_ms(fn, reps=50):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / reps

    moved = 2 * x.numel() * x.element_size()
    for name, fn in [
        ("opguide.rms_norm", lambda: opguide.rms_norm(x, w)),
        ("torch.nn.functional.rms_norm", lambda: torch.nn.functional.rms_norm(x, (4096,), w)),
        ("x.clone() (memory floor)", lambda: x.clone()),
    ]:
        ms = gpu_ms(fn)
        print(f"{name:30} {ms * 1e3:7.1f} us  {moved / ms / 1e6:6.0f} GB/s")
elif not HAVE_GPU:
    print(
        "SKIPPED: no CUDA GPU, nothing to run. The performance chapter shows recorded GPU numbers."
    )
