"""Compile checks of the GPU sources that run on any machine (CI has no GPU).

nvcc compiles the CUDA sources; hipcc compiles the hipified, torch-free device
code for AMD GPUs. When a compiler is missing the test is skipped with the
reason; when it is present, a compile error fails the test.
"""

from __future__ import annotations

import pytest

from opguide import compile_checks

pytestmark = pytest.mark.cpu
ROOT = compile_checks.source_root()
CSRC = ROOT / "csrc"
DEVICE_CHECKS = sorted((CSRC / "device_checks").glob("*.cu"))
EXTENSION_SOURCES = sorted(CSRC.glob("*.cu"))


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
    assert "cudaStream_t" not in text and "hipStream_t" in text
    flags = [] if compile_checks.hip_has_bf16() else ["-DOPGUIDE_NO_BF16"]
    _require(compile_checks.hipcc_check(hip_source, extra_flags=flags))


def test_nvcc_catches_a_broken_kernel(tmp_path):
    # The check must be able to fail: a device-code type error is reported.
    if compile_checks.find_nvcc() is None:
        pytest.skip("nvcc not found (set CUDA_HOME or PATH)")
    bad = tmp_path / "csrc" / "broken.cu"
    bad.parent.mkdir()
    bad.write_text("__global__ void k(float* p) { p[0] = undefined_symbol; }\n")
    result = compile_checks.nvcc_check(bad, with_torch=False, cache_dir=tmp_path / "cache")
    assert result.status == "failed" and "undefined_symbol" in result.output
