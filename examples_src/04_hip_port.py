r"""
Step 4: Porting to ROCm/HIP
===========================

AMD GPUs run HIP, a C++ dialect that mirrors CUDA almost name for name. PyTorch
for ROCm does not ask you to write a second kernel: when you build a
``CUDAExtension`` against a ROCm build of torch, it runs **hipify** over your
CUDA sources first, then compiles the result with ``hipcc``.

In this step you will learn:

* what hipify changes in the real sources of :doc:`step 3 <03_cuda_kernel>`, shown as a diff;
* what differs on AMD hardware that the code itself must handle (64-wide
  wavefronts, NVIDIA-only features, shuffle intrinsics, bfloat16 headers);
* how to compile-check the hipified, torch-free device code with ``hipcc`` on a
  machine with no AMD GPU.

The page's output says what was done: which files were hipified, and which
were compiled for which AMD targets. No AMD GPU ran this code.

What changes on AMD GPUs
------------------------
* **Wavefronts of 64.** A CUDA warp is 32 threads; an AMD wavefront is 64 on
  the CDNA data-centre GPUs (MI200 ``gfx90a``, MI300 ``gfx94x``) and 32 on RDNA.
  Code that hard-codes 32 (shuffle loops, ``blockDim.x % 32``, per-warp shared
  memory) silently computes wrong sums on a 64-wide wavefront. The device code
  uses ``__AMDGCN_WAVEFRONT_SIZE`` where the compiler defines it, and 64
  otherwise: the width of the CDNA GPUs (MI200, MI300) this guide targets.
  The host takes the width from the device. LLVM deprecated that macro
  (`llvm/llvm-project#112849 <https://github.com/llvm/llvm-project/pull/112849>`_)
  and then removed it
  (`llvm/llvm-project#157463 <https://github.com/llvm/llvm-project/pull/157463>`_),
  so a build for a wave32 GPU (RDNA) with a compiler that lacks the macro
  gets 64: such a build needs the width set to 32 explicitly.

  .. literalinclude:: /../csrc/common/platform.cuh
     :language: cuda
     :start-after: // [portability]
     :end-before: // [portability-end]

* **NVIDIA-only features.** The shared headers compile out, under HIP,
  ``cp.async`` (``common/async_copy.cuh``), thread-block clusters
  (``common/cluster.cuh``), programmatic dependent launch
  (``common/launch.cuh``), the cache-hint loads and stores (``common/vec.cuh``)
  and the ``keep_packed`` inline assembly (``common/keep_packed.cuh``); the
  kernels then use plain loads, stores and launches.
* **Warp intrinsics.** ``__shfl_xor_sync(mask, v, lane)`` takes a mask of the
  threads taking part; HIP's ``__shfl_xor(v, lane)`` takes none. One function,
  ``shfl_xor``, covers
  both, in the header every kernel shares (``csrc/common/platform.cuh``).
* **Sources and names.** hipify renames ``x.cu`` to ``x.hip``, ``cuda`` in
  a file name becoming ``hip`` (``rms_norm_cuda.cu`` becomes
  ``rms_norm_hip.hip``), and any other file in which it rewrote something
  (``rms_norm_forward.cuh`` becomes ``rms_norm_forward_hip.cuh``; a file with
  nothing to rewrite keeps its name, as the list below shows); it rewrites
  ``cuda*`` calls and types to ``hip*`` and ``<<<grid, block, 0, stream>>>``
  launches to ``hipLaunchKernelGGL``. torch's own headers are mapped too:
  ``c10/cuda/CUDAGuard.h`` becomes ``c10/hip/HIPGuard.h``. In ROCm builds of
  torch the ``CUDA`` dispatch key and the ``torch.cuda`` API serve AMD GPUs,
  so the registration and the Python side do not change at all.
* **bfloat16.** CUDA's ``__nv_bfloat16`` maps to ``__hip_bfloat16`` from
  ``hip/hip_bf16.h``, a header that older ROCm releases lack (the check below
  says whether this machine's hipcc has it).
"""

# %%
# Running hipify on the real sources
# ----------------------------------
# :func:`guidekit.compile_checks.hipify` copies ``csrc/`` to a scratch folder
# and calls ``torch.utils.hipify.hipify_python.hipify`` the way
# ``torch.utils.cpp_extension`` does on ROCm.
import datetime
import difflib
import json
import os
import subprocess
import tempfile
from pathlib import Path

from guidekit import compile_checks
from guidekit.compile_checks import source_root  # noqa: E402
from guidekit.recorded import sources as record_sources  # noqa: E402
from guidekit.recorded.pages import say_stale  # noqa: E402

# sphinx_gallery_thumbnail_path = "_thumbnails/04.png"
ROOT = source_root()  # the opguide source tree, wherever this script runs from
CSRC = ROOT / "csrc"
scratch = Path(tempfile.mkdtemp(prefix="opguide-hipify-"))
WRAPPER = CSRC / "rms_norm" / "rms_norm_cuda.cu"
sources = [WRAPPER, CSRC / "device_checks" / "rms_norm.cu"]
mapping = compile_checks.hipify(sources, scratch, root=CSRC)
for original, hipified in sorted(mapping.items()):
    print(f"{original.relative_to(ROOT)!s:36} -> {hipified.relative_to(scratch)}")


def show_diff(original: Path, hipified: Path, context: int = 0) -> None:
    """Prints the lines hipify changed, as a unified diff."""
    diff = difflib.unified_diff(
        original.read_text().splitlines(),
        hipified.read_text().splitlines(),
        str(original.relative_to(ROOT)),
        str(hipified.relative_to(scratch)),
        n=context,
        lineterm="",
    )
    print("\n".join(diff))


# %%
# The device header: its includes, the bfloat16 header among them.
FORWARD = CSRC / "rms_norm" / "rms_norm_forward.cuh"
show_diff(FORWARD, mapping[FORWARD])

# %%
# The torch wrapper: torch's CUDA headers map to their HIP twins, and the
# diff shows each other CUDA name hipify replaced. Everything about tensors
# is unchanged.
show_diff(WRAPPER, mapping[WRAPPER])

# %%
# Compile-checking the device code with hipcc
# -------------------------------------------
# Debian packages ``hipcc`` (ROCm 5.2) with the clang that targets AMD GPUs.
# ``HIP_PLATFORM=amd`` makes it compile for AMD even where it would otherwise
# hand the file to nvcc. It cannot compile the hipified *wrapper* (that needs
# a ROCm build of torch's headers), so the check covers the torch-free device
# code: every kernel, instantiated for the dtypes the hipcc at hand compiles,
# for MI200 (``gfx90a``) and MI300X (``gfx942``; a hipcc whose clang predates
# it, such as Debian's ROCm 5.2 hipcc, takes ``gfx940``, the first target of
# the same instruction set, whose code MI300X does not run). The output says
# which targets and dtypes; where
# hipcc is missing, the recorded check below lists them.
hipcc = compile_checks.find_hipcc()
hip_source = mapping[CSRC / "device_checks" / "rms_norm.cu"]
flags = []
archs = compile_checks.hip_archs(hipcc)
if hipcc is not None:
    version = subprocess.run([hipcc, "--version"], capture_output=True, text=True).stdout
    print(f"hipcc: found ({(version.splitlines() or ['version unknown'])[0]});", end=" ")
    print("targets:", " and ".join(archs))
    if archs[-1] != "gfx942":
        print("this hipcc's clang does not know gfx942: gfx940 instead")
    if compile_checks.hip_has_bf16():
        print("hip/hip_bf16.h found: bfloat16 kernels included")
    else:
        flags = ["-DOPGUIDE_NO_BF16"]
        print("hip/hip_bf16.h not found (an older ROCm): bfloat16 kernels left out of this check")
result = compile_checks.hipcc_check(hip_source, archs=archs, extra_flags=flags)
print(result.summary())
if result.status == "failed":
    print(result.output[-3000:])
assert result.status != "failed", "the hipified device code does not compile"

# %%
# Where ``hipcc`` is missing, the page shows the last check that passed:
# ``OPGUIDE_RECORD_HIPCC=1`` on a machine with ``hipcc`` writes it to
# ``docs/recorded/hipcc_check.json``. That record comes from ROCm 5.2's hipcc,
# which lacks ``hip/hip_bf16.h``, so it lists float32, float64 and float16
# kernels only: no recorded check has compiled the bfloat16 mapping for HIP.
RECORD = ROOT / "docs" / "recorded" / "hipcc_check.json"
kinds = ["float32", "float64", "float16"] + ([] if flags else ["bfloat16"])
if result.ok and os.environ.get("OPGUIDE_RECORD_HIPCC") == "1":
    version = subprocess.run([hipcc, "--version"], capture_output=True, text=True).stdout
    record = {
        "hipcc": version.splitlines()[0] if version else "(unknown)",
        "date": datetime.date.today().isoformat(),
        "targets": list(archs),
        "kernels": kinds,
    }
    RECORD.write_text(json.dumps(record, indent=2) + "\n")
    record_sources.stamp(RECORD)  # the hash of the sources it compiled
    print(f"recorded to docs/recorded/{RECORD.name}")
recorded = None
if not result.ok and RECORD.exists():
    recorded = json.loads(RECORD.read_text())
    print(
        f"The check as recorded on {recorded['date']} with hipcc "
        f"({recorded['hipcc']}): compiled for {' and '.join(recorded['targets'])}, "
        f"{', '.join(recorded['kernels'])} kernels"
    )
    say_stale(RECORD.name)

# %%
# What was and was not done
# -------------------------
if result.ok:
    print(
        f"compiled for {' and '.join(archs)}: the hipified device code ({', '.join(kinds)} kernels)"
    )
elif recorded is not None:
    print(f"not compiled for AMD on this machine; compiled on {recorded['date']} (recorded above)")
else:
    print(f"not compiled for AMD: {result.reason}")
print("not compiled: the hipified torch wrapper (needs a ROCm build of torch)")
print("not run: anything on an AMD GPU (no AMD GPU ran this code)")

# %%
# Building on a ROCm machine
# --------------------------
# ``setup.py`` has a ROCm path too: with a ROCm build of torch,
# ``torch.version.hip`` is set, ``CUDAExtension`` hipifies the ``.cu`` files
# beside the sources (``x.cu`` gets an ``x.hip`` next to it, in the source
# tree, ``cuda`` in its name made ``hip`` as above) and compiles them with
# hipcc, and ``PYTORCH_ROCM_ARCH``
# (for example ``"gfx90a;gfx942"``) plays the part of ``TORCH_CUDA_ARCH_LIST``.
# The same ``pip install --no-build-isolation .`` is meant to build it, but
# this guide has not built the package against a ROCm torch (the output above
# says so). If it fails, look first at the flags ``setup.py`` gives nvcc
# (``-lineinfo``), which ``CUDAExtension`` hands to hipcc on ROCm.
