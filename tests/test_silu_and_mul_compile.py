"""silu_and_mul's CUDA sources compiled without a GPU: the torch-free kernels alone
(and for AMD GPUs with hipcc after hipify, where hipcc is installed), and what
nvcc makes of the kernels: registers and spills, which the configuration's
comments rely on. The torch wrapper is compiled against torch's headers by
tests/test_compile_checks.py, with every operator's. Skipped, with the reason,
when a compiler is missing."""

from __future__ import annotations

import functools
import shutil

import pytest

from guidekit import compile_checks

pytestmark = pytest.mark.cpu
CSRC = compile_checks.source_root() / "csrc"

# Every instance the launch functions can pick, forward and backward.
DEVICE_CODE = """
#include "silu_and_mul/silu_and_mul.cuh"
using namespace opguide;
void* kernels[] = {
#define BOTH(T, V) (void*)silu_and_mul_forward_kernel<T, V>, \\
                   (void*)silu_and_mul_backward_kernel<T, V>
    BOTH(float, 4), BOTH(float, 1), BOTH(double, 2), BOTH(double, 1),
    BOTH(__half, 8), BOTH(__half, 1),
#if !defined(OPGUIDE_NO_BF16)  // HIP before ROCm 5.7 has no bfloat16
    BOTH(__nv_bfloat16, 8), BOTH(__nv_bfloat16, 1),
#endif
};
// The launch functions, whose kernel launches hipify rewrites.
#define LAUNCH(T)                                                                     \
  template cudaError_t opguide::launch_silu_and_mul_forward<T>(                       \
      const SiluAndMulPlan&, const T*, T*, int64_t, int64_t, cudaStream_t);           \
  template cudaError_t opguide::launch_silu_and_mul_backward<T>(                      \
      const SiluAndMulPlan&, const T*, const T*, T*, int64_t, int64_t, cudaStream_t);
LAUNCH(float)
LAUNCH(double)
LAUNCH(__half)
#if !defined(OPGUIDE_NO_BF16)
LAUNCH(__nv_bfloat16)
#endif
"""


def _require(result):
    if result.status == "skipped":
        pytest.skip(result.reason)
    assert result.ok, result.summary() + "\n" + result.output[-6000:]


def test_nvcc_compiles_the_kernels_without_torch(tmp_path):
    source = tmp_path / "silu_and_mul_device.cu"
    source.write_text(DEVICE_CODE)
    _require(
        compile_checks.nvcc_check(
            source, with_torch=False, extra_flags=[f"-I{CSRC}"], cache_dir=tmp_path / "cache"
        )
    )


def test_hipify_then_hipcc(tmp_path):
    # hipify works on a copy of a source tree: the shared device code, this
    # operator's folder and the check, as a ROCm build of torch hipifies them.
    tree = tmp_path / "csrc"
    for folder in ("common", "silu_and_mul"):
        shutil.copytree(CSRC / folder, tree / folder)
    source = tree / "silu_and_mul_device.cu"
    source.write_text(DEVICE_CODE)
    hip_source = compile_checks.hipify([source], tmp_path / "hip", root=tree)[source]
    assert '#include "silu_and_mul/silu_and_mul_hip.cuh"' in hip_source.read_text()
    kernels = (tmp_path / "hip" / "csrc" / "silu_and_mul" / "silu_and_mul_hip.cuh").read_text()
    assert "hipLaunchKernelGGL" in kernels and "<<<" not in kernels, kernels[-3000:]
    assert "cudaStream_t" not in kernels and "hipStream_t" in kernels
    if compile_checks.find_hipcc() is None:
        pytest.skip("hipify ran; hipcc not found to compile it (Debian: apt-get install hipcc)")
    flags = [] if compile_checks.hip_has_bf16() else ["-DOPGUIDE_NO_BF16"]
    _require(compile_checks.hipcc_check(hip_source, extra_flags=flags))


@functools.cache
def _machine_code():
    if compile_checks.find_nvcc() is None or compile_checks.find_cuobjdump() is None:
        pytest.skip("nvcc or cuobjdump not found (set CUDA_HOME or PATH)")
    return compile_checks.kernel_machine_code(DEVICE_CODE, include_dirs=[CSRC])


def test_kernels_fit_their_launch_bounds_without_spilling():
    # silu_and_mul_config.h: kSiluBlocksPerSm blocks of kSiluThreads threads,
    # 64 registers a thread, and no instance spills at that bound.
    kernels = _machine_code()
    assert len(kernels) == 16, list(kernels)
    for name, code in kernels.items():
        assert code.registers <= 64 and code.stack == 0, (name, code.registers, code.stack)


def test_vector_kernels_load_16_bytes_at_a_time():
    for name, code in _machine_code().items():
        wide = "Li8E" in name or "Li4E" in name or "IdLi2E" in name
        loads = [i for i in code.instructions if "LDG.E" in i]
        assert loads, name
        if wide:
            assert all(".128" in i for i in loads), (name, loads)
