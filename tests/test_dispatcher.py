"""Tests of the dispatcher chapter (gallery steps 12-14) and its C++ in csrc/dispatcher/.

The libraries are separate demo libraries, not part of opguide._C. Loading
them changes process-wide state (a CPU override of aten::neg, the name of the
PrivateUse1 backend, operator namespaces), so every check runs in a child
Python process; the pytest process itself loads none of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "csrc" / "dispatcher"
BUILD = ROOT / "build" / "jit"

# name -> (source, extra flags); the same names and flags as the gallery steps
# use, so that both share one build each.
LIBRARIES = {
    "opguide_hostdev": ("hostdev_backend.cpp", []),
    "opguide_cpu_override": ("cpu_override.cpp", []),
    "opguide_mm_naive": ("matmul_naive.cpp", []),
    "opguide_mm_tiled": ("matmul_tiled.cpp", ["-DMATMUL_NAMESPACE=opguide_mm_tiled"]),
    "opguide_mm_tiled_fragment": ("matmul_tiled.cpp", ["-DMATMUL_FRAGMENT"]),
    "opguide_mm_tiled_same_ns": ("matmul_tiled.cpp", []),
}
HOSTDEV_SETUP = """
import types, torch
torch.ops.load_library(LIB["opguide_hostdev"])
torch.utils.rename_privateuse1_backend("hostdev")
module = types.ModuleType("torch.hostdev")
module.is_available, module.current_device = (lambda: True), (lambda: 0)
module._is_in_bad_fork, module.manual_seed_all = (lambda: False), (lambda seed: None)
torch._register_device_module("hostdev", module)
torch.utils.generate_methods_for_privateuse1_backend()
"""


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh Python; the override switches start unset."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPGUIDE_DISABLE_OVERRIDE_", "OPGUIDE_LOG", "OPGUIDE_OVERRIDE"))
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )


def _build_code(names: list[str]) -> str:
    lines = ["from torch.utils.cpp_extension import load", "import os"]
    for name in names:
        source, flags = LIBRARIES[name]
        lines.append(
            f"os.makedirs({str(BUILD / name)!r}, exist_ok=True)\n"
            f"print({name!r}, load(name={name!r}, sources=[{str(SRC / source)!r}], "
            f"extra_include_paths=[{str(SRC)!r}], extra_cflags={['-O2', *flags]!r}, "
            f"build_directory={str(BUILD / name)!r}, is_python_module=False))"
        )
    return "\n".join(lines)


@pytest.fixture(scope="module")
def libs() -> dict[str, str]:
    """Builds every library (in children: loading is part of load()) and returns the paths."""
    paths = {}
    # The colliding library must not be loaded next to opguide_mm_naive.
    for group in (
        [n for n in LIBRARIES if n != "opguide_mm_tiled_same_ns"],
        ["opguide_mm_tiled_same_ns"],
    ):
        proc = _child(_build_code(group))
        assert proc.returncode == 0, proc.stderr
        for line in proc.stdout.splitlines():
            name, path = line.split(" ", 1)
            paths[name] = path
    assert set(paths) == set(LIBRARIES)
    return paths


def _run(libs: dict[str, str], code: str, **env: str) -> subprocess.CompletedProcess:
    return _child(f"LIB = {libs!r}\n" + textwrap.dedent(code), **env)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


# --- the PrivateUse1 backend -------------------------------------------------


def test_hostdev_program_matches_cpu(libs):
    code = (
        HOSTDEV_SETUP
        + """
torch.manual_seed(0)
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32):
    x = torch.randn(17, 31).mul(50).to(dtype)
    y = torch.randn(17, 31).mul(50).to(dtype)
    xd, yd = x.to("hostdev"), y.hostdev()
    assert xd.device == torch.device("hostdev:0") and xd.is_hostdev
    ones = torch.full((17, 31), 1, dtype=dtype, device="hostdev")  # empty + fill_
    zd = -(xd + yd) + ones
    assert zd.device.type == "hostdev"
    z = zd.cpu()
    assert z.device.type == "cpu"
    torch.testing.assert_close(z, -(x + y) + 1, rtol=0, atol=0)
    # ATen may fuse x + 3 * y into one rounding (FMA); ours rounds twice: 1 ulp apart at most.
    low = dtype in (torch.float16, torch.bfloat16)
    torch.testing.assert_close(
        torch.add(xd, yd, alpha=3).cpu(), torch.add(x, y, alpha=3),
        rtol=1e-2 if low else 1e-6, atol=1e-5)
    torch.testing.assert_close((xd + 2).cpu(), x + 2)
print("OK")
"""
    )
    assert _ok(_run(libs, code)).stdout.strip() == "OK"


def test_hostdev_log_prints_one_line_per_call(libs):
    code = (
        HOSTDEV_SETUP
        + """
import sys
xd, yd = torch.randn(3, 5).hostdev(), torch.randn(3, 5).hostdev()
print("--- start", file=sys.stderr, flush=True)
for _ in range(3):
    -xd
xd + yd
xd + yd
"""
    )
    proc = _ok(_run(libs, code, OPGUIDE_LOG_OVERRIDES="1"))
    after = proc.stderr.split("--- start", 1)[1].splitlines()
    assert sum("aten::neg on hostdev: float32 (3, 5)" in line for line in after) == 3
    assert sum("aten::add.Tensor on hostdev" in line for line in after) == 2
    # every output was allocated through our empty kernel
    assert sum("aten::empty.memory_format on hostdev" in line for line in after) == 5


def test_hostdev_without_log_switch_is_silent(libs):
    proc = _ok(_run(libs, HOSTDEV_SETUP + "-(torch.randn(3).hostdev())\n"))
    assert "[opguide override]" not in proc.stderr


def test_hostdev_disable_neg_leaves_no_kernel(libs):
    code = (
        HOSTDEV_SETUP
        + """
xd = torch.randn(4).hostdev()
print("add works:", torch.equal((xd + xd).cpu(), xd.cpu() * 2))
try:
    -xd
except NotImplementedError as err:
    print(str(err).split(". ")[0])
"""
    )
    proc = _ok(_run(libs, code, OPGUIDE_DISABLE_OVERRIDE_neg="1"))
    assert "add works: True" in proc.stdout
    assert "Could not run 'aten::neg.out' with arguments from the 'hostdev' backend" in proc.stdout
    assert "aten::neg not overridden (OPGUIDE_DISABLE_OVERRIDE_neg=1)" in proc.stderr


def test_hostdev_errors_name_the_argument(libs):
    code = (
        HOSTDEV_SETUP
        + """
xd = torch.randn(4, 5).hostdev()
for bad in (lambda: xd + torch.randn(2, 5).hostdev(), lambda: xd + xd.double(),
            lambda: -torch.ones(3, dtype=torch.bool).hostdev()):
    try:
        bad()
        print("no error")
    except RuntimeError as err:
        print(err)
"""
    )
    out = _ok(_run(libs, code)).stdout.splitlines()
    assert out == [
        "hostdev add: other must have the shape of self [4, 5] (no broadcasting here), got [2, 5]",
        "hostdev add: other must have the dtype of self (torch.float32), got torch.float64",
        "hostdev neg: self must not be a bool tensor (use logical_not)",
    ]


# --- the CPU override --------------------------------------------------------

CPU_OVERRIDE_PROGRAM = """
import sys, torch
def cpu_entry(op):
    table = torch._C._dispatch_dump_table(op).splitlines()
    return next(line for line in table if line.startswith("CPU:"))
before = {op: cpu_entry(op) for op in ("aten::neg", "aten::add.Tensor")}
x, y = torch.randn(4, 8), torch.randn(4, 8)
expected_neg, expected_add = -x, x + y
torch.ops.load_library(LIB["opguide_cpu_override"])
print("--- loaded", file=sys.stderr, flush=True)
for op in before:
    print(op, "unchanged" if cpu_entry(op) == before[op] else "overridden:" + cpu_entry(op))
for _ in range(3):
    assert torch.equal(-x, expected_neg)
for _ in range(2):
    assert torch.equal(x + y, expected_add)
"""


def _log_lines(stderr: str, op: str) -> int:
    after = stderr.split("--- loaded", 1)[1].splitlines()
    return sum(line.startswith(f"[opguide override] {op} on CPU") for line in after)


def test_cpu_override_warns_logs_each_call_and_matches_aten(libs):
    proc = _ok(_run(libs, CPU_OVERRIDE_PROGRAM, OPGUIDE_LOG_OVERRIDES="1"))
    # torch warns about the override, in words that change between releases
    # (2.15's does not say "Overriding a previously registered kernel"); the
    # dispatcher's own table below is what this test checks.
    assert "aten::neg overridden:CPU: registered at" in proc.stdout
    assert "cpu_override.cpp" in proc.stdout.splitlines()[0]
    assert "aten::add.Tensor overridden:" in proc.stdout
    assert _log_lines(proc.stderr, "aten::neg") == 3
    assert _log_lines(proc.stderr, "aten::add.Tensor") == 2


def test_cpu_override_without_log_switch_is_silent(libs):
    proc = _ok(_run(libs, CPU_OVERRIDE_PROGRAM))
    assert "[opguide override]" not in proc.stderr


def test_disable_variable_restores_atens_cpu_kernel(libs):
    proc = _ok(
        _run(
            libs, CPU_OVERRIDE_PROGRAM, OPGUIDE_LOG_OVERRIDES="1", OPGUIDE_DISABLE_OVERRIDE_neg="1"
        )
    )
    # The dispatch table holds ATen's own CPU kernel of neg again, and neg
    # calls do not reach the override; add is still overridden.
    assert "aten::neg unchanged" in proc.stdout
    assert "aten::add.Tensor overridden:" in proc.stdout
    assert _log_lines(proc.stderr, "aten::neg") == 0
    assert _log_lines(proc.stderr, "aten::add.Tensor") == 2


def test_calling_the_overridden_op_is_reported_not_recursed(libs):
    proc = _run(libs, CPU_OVERRIDE_PROGRAM, OPGUIDE_OVERRIDE_NAIVE_NEG="1")
    assert proc.returncode == 1
    assert "the CPU kernel of aten::neg re-entered itself" in proc.stderr
    assert "at::cpu::neg" in proc.stderr


# --- namespaces and fragments ------------------------------------------------


def test_two_torch_library_blocks_for_one_namespace_abort(libs):
    code = """
import torch
torch.ops.load_library(LIB["opguide_mm_naive"])
torch.ops.load_library(LIB["opguide_mm_tiled_same_ns"])
print("not reached")
"""
    proc = _run(libs, code)
    assert proc.returncode != 0
    assert "not reached" not in proc.stdout
    assert (
        "Only a single TORCH_LIBRARY can be used to register the namespace opguide_mm"
        in proc.stderr
    )
    assert "matmul_naive.cpp" in proc.stderr and "matmul_tiled.cpp" in proc.stderr


def test_distinct_namespaces_and_fragments_both_work(libs):
    code = """
import torch
for name in ("opguide_mm_naive", "opguide_mm_tiled", "opguide_mm_tiled_fragment"):
    torch.ops.load_library(LIB[name])
a, b = torch.randn(67, 130, dtype=torch.float64), torch.randn(130, 71, dtype=torch.float64)
for op in (torch.ops.opguide_mm.matmul_naive, torch.ops.opguide_mm.matmul_tiled,
           torch.ops.opguide_mm_tiled.matmul_tiled):
    torch.testing.assert_close(op(a, b), a @ b)
    af, bf = a.float(), b.float()
    torch.testing.assert_close(op(af, bf), af @ bf, rtol=1e-4, atol=1e-4)
try:
    torch.ops.opguide_mm.matmul_naive(a, b.t())
except RuntimeError as err:
    print(err)
print("OK")
"""
    out = _ok(_run(libs, code)).stdout.splitlines()
    assert out == [
        "matmul_naive: b must have 130 rows to match the columns of a, got 71",
        "OK",
    ]


def test_build_settings_helper():
    import torch

    import opguide  # noqa: F401  loads the library, which registers its operators
    from guidekit.buildinfo import build_config, format_build_config, registered_operators

    config = build_config()
    assert config["torch"] == torch.__version__
    assert config["include_dirs"] and all(Path(p).is_dir() for p in config["include_dirs"])
    assert config["compiler"]
    assert "opguide::rms_norm" in registered_operators("opguide")
    assert registered_operators("no_such_namespace_here") == []
    text = format_build_config(config)
    assert "cxx11_abi" in text and "loaded_libraries" in text
    assert "opguide/_C" in text.replace(os.sep, "/")


# --- the GPU debugging material ----------------------------------------------


def test_gpu_recorder_says_what_is_missing(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "CUDA_HOME": str(tmp_path / "none")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "record_gpu_debug.py"), "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "not found on PATH or in CUDA_HOME: nvidia-smi, nvcc, compute-sanitizer, ncu" in (
        proc.stderr
    )
    assert not (tmp_path / "gpu_debug.json").exists()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("program", ["oob_write", "shared_race", "saxpy"])
def test_gpu_debug_programs_compile(program, tmp_path):
    proc = subprocess.run(
        [
            "nvcc",
            "-c",
            "-lineinfo",
            "-o",
            str(tmp_path / f"{program}.o"),
            str(ROOT / "tools" / "gpu_debug" / f"{program}.cu"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
