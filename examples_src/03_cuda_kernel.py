r"""
Step 3: A CUDA kernel
=====================

Part I adds a CUDA kernel to the operator's schema: the dispatcher picks it
for tensors on a GPU. This step adds:

* the whole ``nvcc`` command that compile-checks the kernel without a GPU;
* what the library's faster kernel adds, and where each addition is measured;
* the simple kernel's recorded speed on a GPU.

On a CUDA GPU the page also builds the kernel, runs it and checks it against
the reference; without one it says that nothing ran on a GPU.

The kernel in its simplest form
-------------------------------
One block of 256 threads per row: each thread sums the squares of the
elements it visits, the block adds the 256 sums in shared memory, and every
thread scales its elements. The header includes no torch file:

.. literalinclude:: /../csrc/minimal/rms_norm_minimal.cuh
   :language: cuda
   :caption: csrc/minimal/rms_norm_minimal.cuh

The torch side
--------------
The ``.cu`` file is the only one that knows about tensors. It does what every
CUDA operator's wrapper does: a device guard (``c10::cuda::CUDAGuard``, so the
launch goes to ``x``'s GPU; :doc:`step 9 <09_triton_kernel>` shows launches
failing on a second GPU without one), the current stream (a launch on the
default stream races with side streams and breaks CUDA graph capture: PyTorch's
`CUDA semantics <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-streams>`__),
the dtype dispatch, and ``C10_CUDA_CHECK`` on the launch. It registers for the
``CUDA`` key of step 2's namespace:

.. literalinclude:: /../csrc/minimal/rms_norm_minimal_cuda.cu
   :language: cuda
   :caption: csrc/minimal/rms_norm_minimal_cuda.cu

It includes only ``c10/cuda`` headers: ``ATen/cuda/CUDAContext.h`` includes
`CUDAContextLight.h
<https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/cuda/CUDAContextLight.h>`__,
which includes the cuBLAS, cuSPARSE and cuSOLVER headers, and a CUDA install
of the compiler alone lacks those.
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
# torch's headers with the flags torch's extension builds give nvcc
# (``COMMON_NVCC_FLAGS`` and the C++ standard of
# :mod:`torch.utils.cpp_extension`), plus ``-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE``
# for a CPU-only torch, which lacks ``c10/cuda/impl/cuda_cmake_macros.h``. The
# whole command, which the test suite runs wherever nvcc is:
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
# The CUDA file needs the schema of step 2's file, so the cell loads step 2's
# library first (the same ``load`` call again is a no-op), then the CUDA
# kernel. Each result must match the reference within one rounding to its
# dtype.
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
# This step's run on a GPU, its checks included, is in the GPU suite's log on
# :doc:`the building page </building>`.

# %%
# The library's CUDA kernel
# -------------------------
# ``opguide.rms_norm``'s CUDA kernel has the same contract, written for speed:
#
# * **16-byte loads** where the row length and pointers allow, else the widest
#   narrower access (measured in :doc:`step 11 <11_performance>`, "Odd row
#   lengths");
# * **the row held in registers**, so ``x`` is read from memory once: a block
#   holds up to 1024 threads x 4 16-byte vectors, and on compute capability
#   9.0 and later a longer row goes to a thread-block cluster
#   (:doc:`step 11.3 <11_performance_3_long_rows>`);
# * **several short rows per block**, threads per row chosen from the length;
# * **warp shuffles**, then one value per warp through shared memory;
# * ``keep_packed``, an empty ``asm`` statement that keeps 16 packed bfloat16
#   registers instead of 32 converted floats, and **programmatic dependent
#   launch** on compute capability 9.0 and later (both measured in
#   :doc:`step 11.4 <11_performance_4_tuning>`).
#
# Its contract is the minimal kernel's: the launchers take ``eps`` in the
# accumulation type (``static_cast<Acc>(eps)`` in ``rms_norm_cuda.cu``), a
# float for float32, float16 and bfloat16 rows and a double for float64 rows,
# as the CPU kernel does, so a float64 result does not depend on ``eps``
# rounded to a float.

# %%
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
# .. dropdown:: csrc/rms_norm/rms_norm_forward_planner.cuh (chooses the forward kernel)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_forward_planner.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_forward_planner.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward_planner.cuh (chooses the backward kernels)
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_planner.cuh
#       :language: cuda
#       :caption: csrc/rms_norm/rms_norm_backward_planner.cuh
#
# .. dropdown:: csrc/rms_norm/rms_norm_launch.cuh (the plan of a call, and its launch)
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
# .. dropdown:: csrc/common/device.cuh (the HIP shim, vectors, keep_packed, sums, cp.async)
#
#    .. literalinclude:: /../csrc/common/device.cuh
#       :language: cuda
#       :caption: csrc/common/device.cuh
#
# .. dropdown:: csrc/common/launch.cuh (launches with PDL and clusters)
#
#    .. literalinclude:: /../csrc/common/launch.cuh
#       :language: cuda
#       :caption: csrc/common/launch.cuh
#
# .. dropdown:: csrc/common/row_plan.cuh (the row plan that the forward shares)
#
#    .. literalinclude:: /../csrc/common/row_plan.cuh
#       :language: cuda
#       :caption: csrc/common/row_plan.cuh
#
# .. dropdown:: csrc/common/cuda_type.cuh (the CUDA type of each ATen dtype)
#
#    .. literalinclude:: /../csrc/common/cuda_type.cuh
#       :language: cuda
#       :caption: csrc/common/cuda_type.cuh
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
# They compile without a GPU too: the device code alone (every kernel and
# dtype, ``csrc/device_checks/rms_norm.cu``), then the wrapper:
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
# ``setup.py`` builds the ``.cu`` files when torch has CUDA and a toolkit is
# found (:doc:`step 6 <06_the_build>`). On a GPU the cell times the library's
# kernel next to the simple one, ``F.rms_norm`` and ``x.clone()`` (the same
# bytes):
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
# ``tools/record_minimal_cuda.py`` times the simple kernel (``minimal``) and
# the library's (``opguide``) beside ``F.rms_norm`` and ``y.copy_(x)`` on
# rows x N = 2**24 elements, and writes ``docs/recorded/minimal_cuda_<gpu>.json``.
# Each speed is a fraction of the copy's; the bars' lines span the middle half
# of the rounds. ``y.copy_(x)`` is PyTorch's general copy, not the memory's
# ceiling (:doc:`step 11 <11_performance>`):
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
