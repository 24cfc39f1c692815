"""Compile checks of the GPU sources that run on any machine (CI has no GPU).

nvcc compiles the CUDA sources; hipcc compiles the hipified, torch-free device
code for AMD GPUs. When a compiler is missing the test is skipped with the
reason; when it is present, a compile error fails the test.
"""

from __future__ import annotations

import functools

import pytest

from guidekit import compile_checks
from opguide import registry

pytestmark = pytest.mark.cpu
ROOT = compile_checks.source_root()
CSRC = ROOT / "csrc"
DEVICE_CHECKS = sorted((CSRC / "device_checks").glob("*.cu"))
# The library's CUDA sources: the shared device code and each operator's folder.
OPERATOR_FOLDERS = [CSRC / "common", *(ROOT / op.csrc for op in registry.OPERATORS if op.csrc)]
EXTENSION_SOURCES = sorted(p for f in OPERATOR_FOLDERS for p in f.glob("*.cu"))


def _require(result):
    if result.status == "skipped":
        pytest.skip(result.reason)
    assert result.ok, result.summary() + "\n" + result.output[-6000:]


@pytest.mark.parametrize("source", DEVICE_CHECKS, ids=lambda p: p.name)
def test_nvcc_torch_free_device_code(source):
    _require(compile_checks.nvcc_check(source, with_torch=False))


@pytest.mark.parametrize("source", EXTENSION_SOURCES, ids=lambda p: p.name)
def test_nvcc_extension_sources(source):
    _require(compile_checks.nvcc_check(source, with_torch=True))


@pytest.mark.parametrize("source", DEVICE_CHECKS, ids=lambda p: p.name)
def test_hipcc_hipified_device_code(source, tmp_path):
    if compile_checks.find_hipcc() is None:
        pytest.skip("hipcc not found (Debian: apt-get install hipcc)")
    mapping = compile_checks.hipify([source], tmp_path, root=CSRC)
    hip_source = mapping[source]
    assert hip_source.suffix == ".hip"
    text = hip_source.read_text()
    assert "cudaError_t" not in text and "hipError_t" in text
    flags = [] if compile_checks.hip_has_bf16() else ["-DOPGUIDE_NO_BF16"]
    _require(compile_checks.hipcc_check(hip_source, extra_flags=flags))


def test_hip_targets_are_gfx942_where_hipcc_knows_it(tmp_path):
    """MI300X is gfx942; a hipcc whose clang predates it gets gfx940 (same ISA)."""
    for name, knows in (("new", "exit 0"), ("old", 'case "$*" in *gfx942*) exit 1;; esac')):
        fake = tmp_path / f"hipcc_{name}"
        fake.write_text(f"#!/bin/sh\n{knows}\n")
        fake.chmod(0o755)
    assert compile_checks.hip_archs(str(tmp_path / "hipcc_new")) == ("gfx90a", "gfx942")
    assert compile_checks.hip_archs(str(tmp_path / "hipcc_old")) == ("gfx90a", "gfx940")


def test_nvcc_catches_a_broken_kernel(tmp_path):
    # The check must be able to fail: a device-code type error is reported.
    if compile_checks.find_nvcc() is None:
        pytest.skip("nvcc not found (set CUDA_HOME or PATH)")
    bad = tmp_path / "csrc" / "broken.cu"
    bad.parent.mkdir()
    bad.write_text("__global__ void k(float* p) { p[0] = undefined_symbol; }\n")
    result = compile_checks.nvcc_check(bad, with_torch=False, cache_dir=tmp_path / "cache")
    assert result.status == "failed" and "undefined_symbol" in result.output


# What the compiler makes of the CUDA forward kernel (step 11, "Lessons"): the
# speed of a memory-bound kernel depends on details that no output check sees.
FORWARD_KERNELS = """
#include "rms_norm/rms_norm_forward.cuh"
using namespace opguide;
void* kernels[] = {
    (void*)rms_norm_forward_kernel<__nv_bfloat16, 8, kForwardRegVecs, false>,
    (void*)rms_norm_forward_kernel<__half, 8, kForwardRegVecs, false>,
};
"""


def _skip_without_machine_code_tools():
    if compile_checks.find_nvcc() is None or compile_checks.find_cuobjdump() is None:
        pytest.skip("nvcc or cuobjdump not found (set CUDA_HOME or PATH)")


@functools.cache
def _forward_machine_code(*flags):
    _skip_without_machine_code_tools()
    kernels = compile_checks.kernel_machine_code(
        FORWARD_KERNELS, include_dirs=[CSRC], extra_flags=flags
    )
    assert len(kernels) == 2, list(kernels)
    return {("bf16" if "bfloat16" in name else "fp16"): code for name, code in kernels.items()}


def _opcode(instruction):
    words = instruction.split()
    return words[1] if words[0].startswith("@") else words[0]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_forward_kernel_fits_four_blocks_of_256_threads(dtype):
    # 64 registers per thread or fewer, and no spills: 4 blocks of 256 threads
    # per multiprocessor at (4096, 8192), the occupancy that the sweep chose.
    code = _forward_machine_code()[dtype]
    assert code.registers <= 64 and code.stack == 0, (code.registers, code.stack)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_forward_kernel_issues_all_its_loads_before_the_arithmetic(dtype):
    # 4 vectors of x and 4 of the weight per thread: all 8 128-bit loads come
    # before the first floating-point multiply, so their latencies overlap.
    # The kernel written with the sums between the loads compiled to a branch
    # and a wait per vector (71% of the copy instead of 93%).
    ops = [_opcode(i) for i in _forward_machine_code()[dtype].instructions]
    loads = [k for k, op in enumerate(ops) if op.startswith("LDG.E.128")]
    first_math = next(k for k, op in enumerate(ops) if op.startswith(("FFMA", "FMUL")))
    assert len(loads) >= 8 and loads[7] < first_math, (loads, first_math)


def test_without_keep_packed_bfloat16_spills():
    # Why keep_packed exists: without it, this nvcc keeps the 32 converted
    # floats of x across the reduction and runs out of the 64 registers that
    # __launch_bounds__(1024) allows. If a newer compiler stops doing that,
    # this test says so, and keep_packed can go.
    code = _forward_machine_code("-DOPGUIDE_KEEP_PACKED=0")["bf16"]
    assert code.stack > 0 or code.registers > 64, (code.registers, code.stack)


CLUSTER_KERNELS = """
#include "fused_add_rms_norm/fused_add_rms_norm.cuh"
#include "rms_norm/rms_norm_backward_long_rows.cuh"
#include "rms_norm/rms_norm_forward.cuh"
using namespace opguide;
void* kernels[] = {
    (void*)rms_norm_forward_cluster_kernel<__nv_bfloat16, 8, kClusterForwardThreads,
                                           kClusterForwardVecs>,
    (void*)rms_norm_forward_cluster_kernel<__nv_bfloat16, 8, 2 * kClusterForwardThreads,
                                           kClusterForwardVecs>,
    (void*)rms_norm_forward_cluster_kernel<__half, 8, kClusterForwardThreads, kClusterForwardVecs>,
    (void*)rms_norm_forward_cluster_kernel<float, 4, kClusterForwardThreads, kClusterForwardVecs>,
    (void*)rms_norm_backward_cluster_kernel<__nv_bfloat16, 8, kClusterBackwardRegVecs>,
    (void*)rms_norm_backward_cluster_kernel<float, 4, kClusterBackwardRegVecs>,
    (void*)rms_norm_backward_cluster_kernel<__nv_bfloat16, 8, kClusterBackwardRegVecsLong>,
    (void*)rms_norm_backward_cluster_kernel<float, 4, kClusterBackwardRegVecsLong>,
    (void*)fused_add_rms_norm_cluster_kernel<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 8,
                                             kFusedClusterThreads, kFusedClusterVecs>,
    (void*)fused_add_rms_norm_cluster_kernel<__nv_bfloat16, float, float, 4,
                                             kFusedClusterThreads, kFusedClusterVecs>,
    (void*)fused_add_rms_norm_cluster_kernel<float, float, float, 4, kFusedClusterThreads,
                                             kFusedClusterVecs>,
};
"""


@functools.cache
def _cluster_machine_code():
    _skip_without_machine_code_tools()
    kernels = compile_checks.kernel_machine_code(CLUSTER_KERNELS, include_dirs=[CSRC])
    assert len(kernels) == 11, list(kernels)
    return kernels


def test_cluster_kernels_do_not_spill():
    # The cluster kernels keep a slice of every row in registers (the
    # backward also its slices of the weight and of grad_weight), and a spill
    # would send those to local memory on every row.
    kernels = _cluster_machine_code()
    heavy = {name: (c.registers, c.stack) for name, c in kernels.items() if c.stack > 0}
    assert not heavy, heavy


def test_cluster_forward_fits_eight_blocks_per_multiprocessor():
    # The cluster forward's speed is its many small blocks per multiprocessor
    # (step 11, "Long rows"): 64 registers or fewer per thread lets at least
    # eight blocks of 128 threads share one (the fused kernel's: as many as
    # its 24-32 KiB of shared memory allow). Without keep_packed on its
    # weight, the bfloat16 kernel held the weight as floats: 80 registers,
    # six blocks, 87% of a copy at N = 131072 instead of 95%.
    small = {
        name: code.registers
        for name, code in _cluster_machine_code().items()
        if ("forward_cluster" in name or "fused_add" in name) and "Li128ELi8E" in name
    }
    assert len(small) == 6 and max(small.values()) <= 64, small


@functools.cache
def _fused_machine_code():
    _skip_without_machine_code_tools()
    source = CSRC / "device_checks" / "fused_add_rms_norm.cu"
    # Every instantiation the extension launches; "../fused_add_rms_norm/..."
    # resolves through the -I folder.
    kernels = compile_checks.kernel_machine_code(source.read_text(), include_dirs=[source.parent])
    fused = {k: v for k, v in kernels.items() if "fused_add_rms_norm_kernel" in k}
    assert len(fused) >= 30, list(kernels)
    return fused


def test_fused_kernels_fit_two_blocks_of_1024_threads():
    # __launch_bounds__(1024, 2): at most 32 registers, and none of the dtype
    # combinations may pay for that with a stack (spills). At 35 registers the
    # float16 kernel ran one block of 1024 threads per multiprocessor, 80% of
    # the copy instead of 97% (step 11, "Lessons").
    heavy = {
        name: (code.registers, code.stack)
        for name, code in _fused_machine_code().items()
        if code.registers > 32 or code.stack > 0
    }
    assert not heavy, heavy
