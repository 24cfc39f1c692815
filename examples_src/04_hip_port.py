r"""
Step 4: Porting to ROCm/HIP
===========================

Against a ROCm build of torch, a ``CUDAExtension`` runs **hipify** over the
CUDA sources and compiles the result with ``hipcc``: no second kernel to
write. This step shows what hipify changes in :doc:`step 3 <03_cuda_kernel>`'s
sources, what the code itself must handle on AMD GPUs, and a compile check of
the device code with ``hipcc``. No AMD GPU ran this code; the output says what
was compiled.

What changes on AMD GPUs
------------------------
* **Wavefronts of 64** on the CDNA GPUs (MI200 ``gfx90a``, MI300 ``gfx94x``),
  32 on RDNA: code that hard-codes 32 computes wrong sums. The device code
  uses ``__AMDGCN_WAVEFRONT_SIZE`` where the compiler defines it and 64
  otherwise; the host takes the width from the device. LLVM removed that macro
  (`llvm/llvm-project#157463 <https://github.com/llvm/llvm-project/pull/157463>`_),
  so a wave32 build with a newer compiler must set 32 itself.

  .. literalinclude:: /../csrc/common/device.cuh
     :language: cuda
     :start-after: // [portability]
     :end-before: // [portability-end]

* **NVIDIA-only features** compile out under HIP: ``cp.async``, clusters,
  programmatic dependent launch, cache-hint loads and ``keep_packed``; the
  kernels then use plain loads, stores and launches.
* **Warp intrinsics.** HIP's ``__shfl_xor(v, lane)`` takes no mask; one
  function, ``shfl_xor`` in ``csrc/common/device.cuh``, covers both.
* **Names.** hipify renames a file it rewrote (``rms_norm_cuda.cu`` becomes
  ``rms_norm_hip.hip``, as the list below shows), ``cuda*`` calls to ``hip*``,
  and torch's CUDA headers to their HIP twins. ROCm builds of torch serve AMD
  GPUs through the ``CUDA`` dispatch key and ``torch.cuda``, so the
  registration and the Python side do not change.
* **bfloat16** maps to ``__hip_bfloat16`` from ``hip/hip_bf16.h``, which older
  ROCm releases lack (the check below says whether this hipcc has it).
"""

# %%
# Running hipify on the real sources
# ----------------------------------
# ``compile_checks.hipify`` calls ``torch.utils.hipify.hipify_python.hipify``
# on a scratch copy of ``csrc/``, as ``torch.utils.cpp_extension`` does on ROCm.
import datetime
import difflib
import json
import os
import shutil
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
# The device header's includes, the bfloat16 header among them:
DEVICE = CSRC / "common" / "device.cuh"
show_diff(DEVICE, mapping[DEVICE])

# %%
# The torch wrapper: every CUDA name hipify replaced; nothing about tensors:
show_diff(WRAPPER, mapping[WRAPPER])

# %%
# Compile-checking the device code with hipcc
# -------------------------------------------
# ``hipcc`` (Debian packages ROCm 5.2's) with ``HIP_PLATFORM=amd`` compiles
# the torch-free device code, every kernel, for MI200 (``gfx90a``) and MI300X
# (``gfx942``; a clang that predates it takes ``gfx940``, whose code MI300X
# does not run). The hipified wrapper needs a ROCm build of torch's headers,
# so it is not compiled here:
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
# Where ``hipcc`` is missing, the page shows the last check that passed
# (``OPGUIDE_RECORD_HIPCC=1`` writes ``docs/recorded/hipcc_check.json``); it
# lists the dtypes that hipcc compiled:
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
shutil.rmtree(scratch)  # the hipified copy

# %%
# Building on a ROCm machine
# --------------------------
# With a ROCm build of torch, ``CUDAExtension`` hipifies the ``.cu`` files
# beside the sources and compiles them with hipcc; ``PYTORCH_ROCM_ARCH``
# (``"gfx90a;gfx942"``) plays the part of ``TORCH_CUDA_ARCH_LIST``. The same
# ``pip install --no-build-isolation .`` is meant to build the package there;
# that build is untested.
