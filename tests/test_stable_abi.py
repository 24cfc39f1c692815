"""The stable-ABI library (``stable/``): builds as one abi3 wheel, needs nothing
from libtorch's C++ API, and passes its own tests from the wheel.

The symbol check is tried on a library with one classic ``TORCH_CHECK`` in it,
so a check that cannot fail would fail here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from opguide import _library

ROOT = Path(__file__).resolve().parents[1]
STABLE = ROOT / "stable"

import torch  # noqa: E402

if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13):
    pytest.skip("stable/ builds against torch 2.13 or later", allow_module_level=True)
if shutil.which("nm") is None:
    pytest.skip("nm (binutils) is not installed", allow_module_level=True)

_spec = importlib.util.spec_from_file_location("check_abi", STABLE / "tools" / "check_abi.py")
check_abi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_abi)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("stable")
    env = dict(os.environ, USE_CUDA=os.environ.get("OPGUIDE_STABLE_USE_CUDA", ""))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
         str(STABLE), "-w", str(out / "dist")],
        check=True, env=env,
    )  # fmt: skip
    wheel = next((out / "dist").glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
         str(out / "site"), str(wheel)],
        check=True,
    )  # fmt: skip
    library = next((out / "site" / "opguide_stable").glob("_C*.so"))
    return wheel, library, out


def test_the_wheel_is_abi3(built):
    wheel, _, _ = built
    assert "-cp310-abi3-" in wheel.name


def test_no_symbol_from_libtorch_cpp_api(built):
    _, library, _ = built
    assert check_abi.torch_cpp_symbols(str(library)) == []
    shim = check_abi.c_shim_symbols(str(library))
    assert "torch_library_impl" in shim or "aoti_torch_library_impl" in shim


def test_the_library_exports_none_of_its_own_functions(built):
    # Hidden visibility (stable/setup.py): where either this library or
    # opguide's is loaded RTLD_GLOBAL, neither binds to the other's copy of
    # opguide's launcher.
    _, library, _ = built
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", "-C", str(library)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert listing.strip(), "nm listed no symbol: the check would see nothing"
    assert [line for line in listing.splitlines() if "opguide" in line] == []


def test_the_classic_library_does_use_the_cpp_api():
    assert check_abi.torch_cpp_symbols(_library.library_path())


def test_the_check_catches_a_classic_torch_check(built, tmp_path):
    text = (STABLE / "csrc" / "rms_norm.cpp").read_text()
    text = text.replace('#include "rms_norm.h"', '#include "rms_norm.h"\n#include <c10/util/Exception.h>')  # fmt: skip  # noqa: E501
    text = text.replace("STD_TORCH_CHECK(x.is_cpu()", "TORCH_CHECK(x.is_cpu()", 1)
    source = tmp_path / "probe.cpp"
    source.write_text(text)
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{STABLE / 'csrc'}"]
    probe = tmp_path / "probe.so"
    subprocess.run(
        ["c++", "-shared", "-fPIC", "-O1", "-std=c++17", *includes, str(source),
         f"-L{cpp_extension.library_paths()[0]}", "-lc10", "-ltorch_cpu", "-o", str(probe)],
        check=True, capture_output=True,
    )  # fmt: skip
    found = check_abi.torch_cpp_symbols(str(probe))
    assert any("torchCheckFail" in s for s in found), found
    assert check_abi.main([str(probe)]) == 1


def test_its_tests_pass_from_the_wheel(built):
    _, _, out = built
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(STABLE / "tests")],
        capture_output=True, text=True, cwd=out, env=dict(os.environ, PYTHONPATH=str(out / "site")),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:]


def test_each_shim_function_has_the_release_that_added_it():
    versions = check_abi.shim_versions(check_abi.shim_headers())
    # torch_call_dispatcher sits in the 2.10 block of torch/csrc/stable/c/shim.h;
    # aoti_torch_get_dim is older than every versioned block.
    assert versions["torch_call_dispatcher"] == (2, 10)
    assert versions["aoti_torch_get_dim"] is None
    assert max(v for v in versions.values() if v) >= (2, 13)


def test_the_stable_library_fits_its_target(built, capsys):
    _, library, _ = built
    setup = (STABLE / "setup.py").read_text()
    target = re.search(r"^TARGET = \((\d+), (\d+)\)", setup, re.M).group(1, 2)
    assert check_abi.main([str(library), "--target", ".".join(target)]) == 0
    assert "shim functions newer than torch" in capsys.readouterr().out


def _probe(tmp_path: Path, source: str) -> str:
    (tmp_path / "probe.cpp").write_text(source)
    probe = tmp_path / "probe.so"
    subprocess.run(
        ["c++", "-shared", "-fPIC", "-O1", str(tmp_path / "probe.cpp"), "-o", str(probe)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(probe)


def test_the_check_catches_a_shim_newer_than_the_target(tmp_path):
    """A library that calls the newest shim function fails a check for the release before it."""
    versions = check_abi.shim_versions(check_abi.shim_headers())
    newest = max(v for v in versions.values() if v)
    name = next(n for n, v in versions.items() if v == newest)
    probe = _probe(tmp_path, f'extern "C" void {name}();\nextern "C" void f() {{ {name}(); }}\n')
    before = f"{newest[0]}.{newest[1] - 1}"
    assert check_abi.newer_than_target(probe, (newest[0], newest[1] - 1), versions) == [
        f"{name} (torch {newest[0]}.{newest[1]})"
    ]
    assert check_abi.main([probe, "--target", before]) == 1
    assert check_abi.main([probe, "--target", f"{newest[0]}.{newest[1]}"]) == 0


def test_the_check_reads_glibc_versions_against_the_platform_tag(tmp_path):
    """getrandom came with glibc 2.25: too new for manylinux2014 (glibc 2.17)."""
    probe = _probe(
        tmp_path,
        '#include <sys/random.h>\nextern "C" long f(void* b) { return getrandom(b, 8, 0); }\n',
    )
    need = check_abi.glibc_needed(probe)
    assert need >= (2, 25)
    assert check_abi.glibc_of_tag("manylinux2014_x86_64") == (2, 17)
    assert check_abi.glibc_of_tag("manylinux_2_28_x86_64") == (2, 28)
    assert check_abi.main([probe, "--manylinux", "manylinux2014_x86_64"]) == 1
    assert check_abi.main([probe, "--manylinux", f"manylinux_{need[0]}_{need[1]}_x86_64"]) == 0
    with pytest.raises(ValueError, match="not a manylinux platform tag"):
        check_abi.glibc_of_tag("linux_x86_64")


def test_the_check_reads_libstdcxx_versions_against_the_platform_tag(tmp_path):
    """A std::string of the C++11 ABI needs GLIBCXX 3.4.21: too new for manylinux2014."""
    probe = _probe(
        tmp_path,
        '#include <string>\nextern "C" unsigned long f(const char* s) {\n'
        "  std::string t(s); t += s; return t.size(); }\n",
    )
    need = check_abi.libstdcxx_needed(probe)
    assert need["GLIBCXX"] >= (3, 4, 21), need
    assert check_abi.libstdcxx_of_tag("manylinux2014_x86_64") == {
        "GLIBCXX": (3, 4, 19), "CXXABI": (1, 3, 7)}  # fmt: skip
    assert check_abi.libstdcxx_of_tag("manylinux_2_30_x86_64")["GLIBCXX"] == (3, 4, 24)
    assert check_abi.main([probe, "--manylinux", "manylinux2014_x86_64"]) == 1
    newest = check_abi.LIBSTDCXX_OF_GLIBC[max(check_abi.LIBSTDCXX_OF_GLIBC)]
    if need["GLIBCXX"] <= newest[0] and need.get("CXXABI", ()) <= newest[1]:
        glibc = check_abi.glibc_needed(probe)
        # The oldest tag whose glibc and libstdc++ both cover the probe passes.
        tag = next(
            f"manylinux_{g[0]}_{g[1]}_x86_64"
            for g, (cxx, abi) in sorted(check_abi.LIBSTDCXX_OF_GLIBC.items())
            if g >= glibc and cxx >= need["GLIBCXX"] and abi >= need.get("CXXABI", ())
        )
        assert check_abi.main([probe, "--manylinux", tag]) == 0, tag


def test_the_libstdcxx_table_matches_auditwheel_where_installed():
    policy = pytest.importorskip("auditwheel.policy")
    path = Path(policy.__file__).parent / "manylinux-policy.json"
    if not path.exists():
        pytest.skip("this auditwheel keeps no manylinux-policy.json")
    import json

    def newest(versions):
        plain = [tuple(map(int, v.split("."))) for v in versions if re.fullmatch(r"[\d.]+", v)]
        return max(plain)

    for entry in json.loads(path.read_text()):
        match = re.fullmatch(r"manylinux_(\d+)_(\d+)", entry["name"])
        found = entry["symbol_versions"].get("x86_64", {})
        if not match or "GLIBCXX" not in found:
            continue
        tag = f"{entry['name']}_x86_64"
        want = {"GLIBCXX": newest(found["GLIBCXX"]), "CXXABI": newest(found["CXXABI"])}
        assert check_abi.libstdcxx_of_tag(tag) == want, tag


def test_the_oldest_tag_covers_glibc_and_libstdcxx(tmp_path, monkeypatch):
    """glibc 2.32 with GLIBCXX 3.4.29 (g++ 11's): manylinux_2_34, as auditwheel says."""
    monkeypatch.setattr(
        check_abi, "undefined_symbols",
        lambda library, demangle=True: ["memcpy@GLIBC_2.14", "f@GLIBC_2.32",
                                        "_ZNSt7__cxx11@GLIBCXX_3.4.29", "__cxa_x@CXXABI_1.3.9"],
    )  # fmt: skip
    assert check_abi.oldest_tag("x.so") == (2, 34)
    assert check_abi.main(["x.so", "--manylinux", "manylinux_2_28_x86_64"]) == 1
    assert check_abi.main(["x.so", "--manylinux", "manylinux_2_34_x86_64"]) == 0


def _nvcc_library(tmp_path: Path, sources: list[Path], defines: list[str]):
    """nvcc's run that compiles the sources into one shared library, with stable/setup.py's
    target version and include folders; (the library's path, nvcc's run)."""
    from guidekit import compile_checks

    nvcc = compile_checks.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    setup = (STABLE / "setup.py").read_text()
    major, minor = re.search(r"^TARGET = \((\d+), (\d+)\)", setup, re.M).group(1, 2)
    version = f"0x{int(major):02x}{int(minor):02x}000000000000"
    includes = [*cpp_extension.include_paths(), STABLE / "csrc", ROOT / "csrc" / "minimal",
                ROOT / "csrc"]  # fmt: skip
    library = tmp_path / "probe.so"
    command = [str(nvcc), "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-arch=sm_90",
               f"-DTORCH_TARGET_VERSION={version}", "-DUSE_CUDA", *defines,
               *[f"-I{p}" for p in includes], *map(str, sources), "-o", str(library)]  # fmt: skip
    return str(library), subprocess.run(command, capture_output=True, text=True)


def test_the_triton_forward_of_a_cuda_build_stays_on_the_stable_abi(tmp_path):
    """The sources of a CUDA build with the Triton forward (its operator and opguide's
    launcher beside the library's own), compiled with stable/setup.py's target version,
    defines and include folders (here all by nvcc), call no libtorch C++ function. Without
    OPGUIDE_STABLE_ABI the launcher would raise with c10's TORCH_CHECK, whose header refuses
    to compile under TORCH_TARGET_VERSION. The table of kernels, generated at build time,
    is left out."""
    names = ["rms_norm.cpp", "rms_norm_cuda.cu", "triton_aot_launch.cu", "rms_norm_triton_aot.cu"]
    sources = [STABLE / "csrc" / name for name in names]
    library, done = _nvcc_library(tmp_path, sources, ["-DOPGUIDE_STABLE_ABI"])
    assert done.returncode == 0, done.stderr[-4000:]
    assert check_abi.torch_cpp_symbols(library) == []
    # The operator's own calls into torch: through the C shim.
    assert "aoti_torch_warn" in check_abi.c_shim_symbols(library)
    _, classic = _nvcc_library(tmp_path, [STABLE / "csrc" / "triton_aot_launch.cu"], [])
    assert classic.returncode != 0
    assert "c10/util/Exception.h" in classic.stderr and "TORCH_TARGET_VERSION" in classic.stderr
