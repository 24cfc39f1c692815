r"""
Step 3: A CUDA kernel
=====================

The C++ kernel of :doc:`step 2 <02_cpp_cpu_kernel>` serves CPU tensors. This
step adds the kernel for CUDA tensors behind the same schema: the dispatcher
picks it whenever ``x`` lives on a GPU, and nothing changes for the caller.

In this step you will learn:

* how to split a GPU kernel into torch-free device code (a ``.cuh`` header that
  nvcc and hipcc can compile alone) and a thin torch wrapper (a ``.cu`` file);
* what every CUDA operator's wrapper must do: the device guard, the current
  stream, the dtype dispatch and the launch check;
* how to build it with :func:`torch.utils.cpp_extension.load`, and how to
  compile-check it with ``nvcc`` on a machine with no GPU, with the whole
  command printed;
* what the library's own, faster kernel adds, and where it is measured.

On a machine with a CUDA GPU this page compiles the kernel, runs it and checks
it against the reference. Without one it compiles the same files with
``nvcc -c`` (when nvcc is installed) and says plainly that nothing ran on a GPU.

The kernel in its simplest form
-------------------------------
One block of 256 threads per row. The threads stride over the row and each
sums the squares of the elements it visits; the block combines the 256 sums in
shared memory; every thread then scales the elements it visited. The sums are
kept in ``Acc`` (float, or double for double) whatever the stored type. The
header includes no torch file, so it is plain CUDA that nvcc compiles on its
own:

.. literalinclude:: /../csrc/minimal/rms_norm_minimal.cuh
   :language: cuda
   :caption: csrc/minimal/rms_norm_minimal.cuh

The torch side
--------------
The ``.cu`` file is the only place that knows about tensors. It does four
things every CUDA operator must do:

* **device guard**: ``c10::cuda::CUDAGuard`` makes ``x``'s GPU current for the
  duration of the call, so the launch, and the stream that
  ``getCurrentCUDAStream()`` returns, belong to ``x``'s GPU on a multi-GPU
  machine, whichever GPU the caller made current (without it, a
  launcher that uses the current GPU fails or computes on the wrong one:
  :doc:`step 9 <09_triton_kernel>` shows the Triton launches failing on the
  second of two GPUs when their guard is removed);
* **current stream**: the kernel is queued on
  ``c10::cuda::getCurrentCUDAStream()`` (``at::cuda::getCurrentCUDAStream`` is the
  same function), the stream PyTorch uses on this thread. A kernel launched on
  the default stream instead would race with work on side streams, and during
  a CUDA graph capture it would make the capture fail (PyTorch's `CUDA
  semantics <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-streams>`__
  notes on streams and on graph capture);
* **dtype dispatch**: ``AT_DISPATCH_FLOATING_TYPES_AND2`` instantiates the
  launcher for float32, float64, float16 and bfloat16;
* **error checks**: ``C10_CUDA_CHECK`` on the launch's error code turns a bad
  launch into a Python ``RuntimeError`` instead of a silent wrong answer.

It registers for the ``CUDA`` dispatch key of the namespace that :doc:`step 2 <02_cpp_cpu_kernel>`'s
file defined, so the two files together are one operator with two kernels:

.. literalinclude:: /../csrc/minimal/rms_norm_minimal_cuda.cu
   :language: cuda
   :caption: csrc/minimal/rms_norm_minimal_cuda.cu

The wrapper includes only ``c10/cuda`` headers, not ``ATen/cuda/CUDAContext.h``:
the latter pulls in the cuBLAS, cuSPARSE and cuSOLVER headers, which a CUDA
install without those libraries (the compiler alone, as pip's
``nvidia-cuda-nvcc`` brings it) lacks, and this kernel needs none of them.
"""

# %%
# Where are we running?
# ---------------------
import shlex
import time
from pathlib import Path

import torch

from guidekit import compile_checks

# sphinx_gallery_thumbnail_path = "_thumbnails/03.png"
ROOT = compile_checks.source_root()  # the opguide source tree (csrc/ is there)
CSRC = ROOT / "csrc"
HAVE_GPU = torch.version.cuda is not None and torch.cuda.is_available()
print(f"torch {torch.__version__}, CUDA build: {torch.version.cuda}, GPU visible: {HAVE_GPU}")
if HAVE_GPU:
    print("GPU:", torch.cuda.get_device_name())

# %%
# Compile-checking without a GPU
# ------------------------------
# ``nvcc -c`` needs no GPU. The wrapper compiles against the installed
# torch's headers with the flags that torch's own extension builds give nvcc
# (``COMMON_NVCC_FLAGS`` of :mod:`torch.utils.cpp_extension`, and the C++
# standard it adds when no ``-std`` is given, which depends on the torch
# release: ``guidekit.buildinfo.cxx_standard`` reads it), and one more that a
# CPU-only torch needs: ``-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE``
# (``c10/cuda/CUDAMacros.h`` would otherwise include
# ``c10/cuda/impl/cuda_cmake_macros.h``, which only CUDA builds of torch ship).
# Here is the whole command, as you would type it; the test suite runs the
# same check on every machine that has nvcc:
torch_include = str(Path(torch.__file__).parent / "include")
FIND_INCLUDE = "import torch.utils.cpp_extension as c; print(c.include_paths()[0])"
nvcc = compile_checks.find_nvcc()
print("nvcc:", "found" if nvcc else "not found")
minimal = compile_checks.nvcc_check(CSRC / "minimal" / "rms_norm_minimal_cuda.cu", with_torch=True)
typed = ["nvcc", *minimal.command[1:]] if minimal.command else []
typed = [arg.replace(torch_include, "$TORCH_INCLUDE").replace(f"{ROOT}/", "") for arg in typed]
print("TORCH_INCLUDE=$(python -c " + shlex.quote(FIND_INCLUDE) + ")")
print(shlex.join(typed).replace("'", '"') if typed else "(nvcc not found: nothing to show)")
print(minimal.summary())
if minimal.status == "failed":
    print(minimal.output[-3000:])
assert minimal.status != "failed", "the minimal CUDA kernel does not compile"

# %%
# Building and running it on a GPU
# --------------------------------
# :func:`torch.utils.cpp_extension.load` compiles ``.cu`` sources with nvcc
# and the rest with the C++ compiler, then links one library. The CUDA file
# needs the schema that :doc:`step 2 <02_cpp_cpu_kernel>`'s file defines, so
# the cell first loads :doc:`step 2 <02_cpp_cpu_kernel>`'s library (built and
# loaded again only if this process does not have it yet: the same ``load``
# call is a no-op the second time), then the CUDA kernel. Each result must match
# the reference within one rounding to its dtype (opguide's tests use the same
# table of tolerances).
from opguide.testing import TOLERANCES as TOL  # noqa: E402

if not HAVE_GPU:
    print(
        "SKIPPED: no CUDA GPU here, so the kernel was compiled (above, when nvcc is "
        "present) but not run. On a CUDA machine this cell builds and runs it."
    )
else:
    from torch.utils.cpp_extension import load

    from guidekit.buildinfo import load_line
    from opguide.reference import rms_norm_reference

    def jit_build(name, source, **flags):
        build_dir = ROOT / "build" / "jit" / name
        build_dir.mkdir(parents=True, exist_ok=True)
        return load(
            name=name,
            sources=[str(source)],
            build_directory=str(build_dir),
            is_python_module=False,
            **flags,
        )

    start = time.time()
    # Step 2's flags exactly: with other flags, load builds a second library
    # under the same name, and its TORCH_LIBRARY(opguide_minimal) aborts.
    cpu_library = jit_build(
        "rms_norm_minimal_cpu",
        CSRC / "minimal" / "rms_norm_minimal.cpp",
        extra_cflags=["-O3", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
    )
    print(load_line(cpu_library, since=start))
    start = time.time()
    cuda_library = jit_build(
        "rms_norm_minimal_cuda",
        CSRC / "minimal" / "rms_norm_minimal_cuda.cu",
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3"],
    )
    print(load_line(cuda_library, since=start))
    op = torch.ops.opguide_minimal.rms_norm.default
    for key in ("CPU", "CUDA"):
        print(f"{key} kernel:", torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key))
    # Random inputs in every dtype, short and long rows, odd lengths:
    torch.manual_seed(0)
    for dtype in TOL:
        for shape in [(1, 7), (1000, 4096), (33, 4097), (4, 16384)]:
            x = torch.randn(shape, dtype=dtype, device="cuda")
            w = torch.randn(shape[-1], dtype=dtype, device="cuda")
            y = op(x, w, 1e-6)
            ref = rms_norm_reference(x, w, 1e-6)
            torch.testing.assert_close(y, ref, **TOL[dtype])
            err = (y.float() - ref.float()).abs().max().item()
            print(f"{str(dtype):15} {str(shape):12} max |error| = {err:.2e}")

# %%
# Where no GPU ran this page, the cell prints only that it skipped. Its run on
# a GPU is in the :doc:`Building page's GPU records </building>`: the GPU
# suite's gallery log, in which this step passed, its ``assert_close`` checks
# included, and a site build on a GPU.

# %%
# The library's CUDA kernel
# -------------------------
# ``opguide.rms_norm`` runs a kernel with the same contract, written for
# speed. What it adds to the simple kernel:
#
# * **16-byte loads**: eight bfloat16 (or four float32) elements per load
#   instruction when the row length and the pointers allow; otherwise the
#   widest narrower access (8, 4 or 2 bytes). In the backward, such odd rows
#   that the narrow kernels cannot hold take a kernel that reads the row twice
#   (measured in :doc:`step 11 <11_performance>`, "Odd row lengths");
# * **the row held in registers**: each thread loads its part of ``x`` and of
#   the weight once, before the reduction, and scales the values it holds, so
#   ``x`` is read from memory once. One block holds a row of up to 1024
#   threads x 4 16-byte vectors; on GPUs of compute capability 9.0 and later a
#   row of more than 2048 whole 16-byte vectors (32 KiB) of a 16- or 32-bit
#   type goes to a thread-block cluster, which holds it (:doc:`step 11.3
#   <11_performance_3_long_rows>`); elsewhere a row longer than a block holds
#   is read a second time, mostly from L2;
# * **several short rows per block**, and the number of threads per row chosen
#   from the row length;
# * **warp shuffles** for the reduction inside each warp, then one value per
#   warp through shared memory, added in a loop;
# * ``keep_packed``, an empty ``asm`` statement that stops the compiler from
#   keeping 32 converted floats alive where 16 packed bfloat16 registers do
#   (measured in :doc:`step 11.4 <11_performance_4_tuning>`);
# * **programmatic dependent launch** on compute capability 9.0 and later
#   (``common/launch.cuh``), so a kernel's start overlaps the end of the one
#   before it (measured in step 11.4).
#
# Its contract differs from the simple kernel's in one place: the launchers
# take ``eps`` as a float (``static_cast<float>(eps)`` in ``rms_norm_cuda.cu``),
# for float64 inputs too, where the simple kernel and the CPU kernels take it
# as a double. So float64 rows whose mean square is near ``eps`` differ from a
# float64 reference by up to about 1e-9 relative, far past the 1e-12 of
# opguide's float64 tolerance; on rows of ``torch.randn``, as the tests use,
# the difference is about 1e-15.
#
# The same four duties (guard, stream, dispatch, checks) are in its wrapper.
# The files, whole:
#
# .. dropdown:: csrc/rms_norm/rms_norm_forward.cuh (the forward kernel)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_forward.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_forward.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward.cuh (the backward kernels, step 8's formula)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_backward.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_config.h (every tuned constant, and the kernel families)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_config.h
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_config.h
#
# .. dropdown:: csrc/rms_norm/rms_norm_planner.cuh (the one place that chooses a kernel)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_planner.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_planner.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_launch.cuh (the launchers)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_launch.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_launch.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_cuda.cu (the torch side)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_cuda.cu
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_cuda.cu
#
# .. dropdown:: csrc/common/platform.cuh (the warp width and the HIP shim)
#
#    .. literalinclude:: /../csrc/common/platform.cuh
#       :language: cuda
#       :caption: csrc/common/platform.cuh
#
# .. dropdown:: csrc/common/vec.cuh (conversions and vectors)
#
#    .. literalinclude:: /../csrc/common/vec.cuh
#       :language: cuda
#       :caption: csrc/common/vec.cuh
#
# .. dropdown:: csrc/common/reduce.cuh (warp and block sums)
#
#    .. literalinclude:: /../csrc/common/reduce.cuh
#       :language: cuda
#       :caption: csrc/common/reduce.cuh
#
# .. dropdown:: csrc/common/async_copy.cuh (cp.async)
#
#    .. literalinclude:: /../csrc/common/async_copy.cuh
#       :language: cuda
#       :caption: csrc/common/async_copy.cuh
#
# .. dropdown:: csrc/common/keep_packed.cuh (a register helper)
#
#    .. literalinclude:: /../csrc/common/keep_packed.cuh
#       :language: cuda
#       :caption: csrc/common/keep_packed.cuh
#
# .. dropdown:: csrc/common/launch.cuh (launches with PDL and clusters)
#
#    .. literalinclude:: /../csrc/common/launch.cuh
#       :language: cuda
#       :caption: csrc/common/launch.cuh
#
# .. dropdown:: csrc/common/launch_settings.h and .cu (PDL, warp size and clusters on this GPU)
#
#    .. literalinclude:: /../csrc/common/launch_settings.h
#       :language: cuda
#       :caption: csrc/common/launch_settings.h
#
#    .. literalinclude:: /../csrc/common/launch_settings.cu
#       :language: cuda
#       :caption: csrc/common/launch_settings.cu
#
# They compile without a GPU too: the torch-free device code on its own (every
# kernel instantiated for every dtype by ``csrc/device_checks/rms_norm.cu``),
# then the wrapper, with the command shown above:
results = [
    compile_checks.nvcc_check(CSRC / "device_checks" / "rms_norm.cu", with_torch=False),
    compile_checks.nvcc_check(CSRC / "rms_norm" / "rms_norm_cuda.cu", with_torch=True),
]
for result in results:
    print(result.summary())
    if result.status == "failed":
        print(result.output[-3000:])
assert not any(r.status == "failed" for r in results), "a CUDA source does not compile"

# %%
# The installed package
# ---------------------
# ``setup.py`` adds the ``.cu`` files of ``csrc/`` to the extension when torch has CUDA and a
# toolkit is found (``USE_CUDA=1`` insists, ``USE_CUDA=0`` refuses;
# ``TORCH_CUDA_ARCH_LIST="9.0"`` targets H100/H200). ``opguide.rms_norm`` then
# reaches the CUDA kernel for CUDA tensors through the dispatcher. On a GPU the
# cell times it next to the simple kernel, torch's own ``rms_norm`` and
# ``x.clone()``, which reads and writes as many bytes as one RMSNorm:
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
        ("the simple kernel above", lambda: torch.ops.opguide_minimal.rms_norm(x, w, 1e-6)),
        ("torch.nn.functional.rms_norm", lambda: torch.nn.functional.rms_norm(x, (4096,), w)),
        ("x.clone() (same bytes)", lambda: x.clone()),
    ]:
        ms = gpu_ms(fn)
        print(f"{name:30} {ms * 1e3:7.1f} us  {moved / ms / 1e6:6.0f} GB/s")
elif not HAVE_GPU:
    print("SKIPPED: no CUDA GPU, nothing to run. Recorded GPU numbers for these kernels follow.")

# %%
# The simple kernel, timed on a GPU
# ---------------------------------
# ``tools/record_minimal_cuda.py`` builds the simple kernel as this page does
# and times it on a GPU beside ``y.copy_(x)`` (the same bytes, no arithmetic),
# ``F.rms_norm`` and ``opguide.rms_norm(..., backend="cpp")`` (the table's
# ``minimal`` and ``opguide`` columns are the simple kernel and this one), on
# rows x N = 2**24 elements, and writes
# ``docs/recorded/minimal_cuda_<gpu>.json``. The cell shows each such record:
# every speed as a fraction of the copy's (1.00 is as fast as copying the
# bytes; the bars' lines span the middle half of the rounds). ``y.copy_(x)`` is
# PyTorch's general copy kernel, not the memory's ceiling: a kernel made for
# one job can beat it (:doc:`step 11 <11_performance>` sets the two apart).
import importlib.util  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402

TOOL = ROOT / "tools" / "record_minimal_cuda.py"
spec = importlib.util.spec_from_file_location("record_minimal_cuda", TOOL)
recorder = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recorder)
from guidekit.recorded.pages import say_stale  # noqa: E402

records = sorted((ROOT / "docs" / "recorded").glob("minimal_cuda_*.json"))
if not records:
    print(
        "No recorded GPU timing of the simple kernel: docs/recorded/ has no\n"
        "minimal_cuda_<gpu>.json. `python tools/record_minimal_cuda.py` on a CUDA GPU\n"
        "writes one."
    )
for path in records:
    data = recorder.read_record(path)
    print(f"RECORDED on {data['device']}, torch {data['torch']}, CUDA {data['cuda']},")
    print(f"{data['date']} (not run while this page was built):")
    say_stale(path.name)
    print(recorder.header())
    for result in data["results"]:
        print(recorder.line(result))
    simple = [recorder.fractions(r)[recorder.MINIMAL][0] for r in data["results"]]
    library = [recorder.fractions(r)[recorder.LIBRARY][0] for r in data["results"]]
    print(
        f"The simple kernel reaches {min(simple):.2f} to {max(simple):.2f} of the copy's "
        f"speed there, opguide.rms_norm {min(library):.2f} to {max(library):.2f}."
    )
    # Faster than the copy only where a kernel's slower quartile beats the
    # copy's faster one; a median above 1.00 alone is a match.
    for name in (recorder.MINIMAL, recorder.LIBRARY):
        faster, matched = [], []
        for r in data["results"]:
            case = f"{r['dtype']} N={r['n']}"
            if r["ms"][name]["q3"] < r["ms"][recorder.COPY]["q1"]:
                faster.append(case)
            elif recorder.fractions(r)[name][0] > 1:
                matched.append(case)
        if faster:
            print(f"{name} moved its bytes faster than y.copy_(x) (middle halves apart) on")
            print(f"  {', '.join(faster)}")
        if matched:
            print(f"{name} matched y.copy_(x) (above 1.00, middle halves overlapping) on")
            print(f"  {', '.join(matched)}")
    fig, ax = plt.subplots(figsize=(9, 3.6), layout="constrained")
    recorder.plot(data, ax)
