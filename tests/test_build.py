"""Tests of the build: the installed library and ``guidekit.buildinfo``.

Building a wheel from scratch, installing it and importing it in a fresh
process is done once per run by the gallery script
``examples_src/06_the_build.py`` (a test item of this suite too), so it is not
repeated here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

import opguide
from guidekit import buildinfo

ROOT = Path(__file__).resolve().parents[1]


def test_installed_library_is_abi3():
    # py_limited_api=True: one library for every CPython >= 3.10.
    path = Path(opguide._library.library_path())
    assert path.name == "_C" + buildinfo.build_config()["abi3_suffix"]
    assert str(path) in torch.ops.loaded_libraries


def test_build_config_describes_this_torch():
    config = buildinfo.build_config()
    assert config["torch"] == torch.__version__
    assert config["cxx11_abi"] == int(torch.compiled_with_cxx11_abi())
    headers = [Path(d) / "torch" / "library.h" for d in config["include_dirs"]]
    assert any(h.is_file() for h in headers), config["include_dirs"]
    assert any((Path(d) / "libc10.so").exists() for d in config["library_dirs"])
    assert {"c10", "torch", "torch_cpu"} <= set(config["libraries"])
    assert "torch_python" not in config["libraries"]  # not linked by abi3 extensions
    assert f"-D_GLIBCXX_USE_CXX11_ABI={config['cxx11_abi']}" in config["cxx_flags"]
    assert any(flag.startswith("-std=c++") for flag in config["cxx_flags"])
    assert config["abi3_flags"] == ["-DPy_LIMITED_API=0x030A0000"]
    assert config["ext_suffix"].endswith(".so") and "abi3" in config["abi3_suffix"]
    assert config["installed_library"] == opguide._library.library_path()


def test_build_config_reads_switches(monkeypatch):
    monkeypatch.setenv("MAX_JOBS", "3")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/tmp/opguide-ext")
    monkeypatch.delenv("DEBUG", raising=False)
    config = buildinfo.build_config()
    assert config["env"]["MAX_JOBS"] == "3"
    assert "DEBUG" not in config["env"]
    assert config["jit_cache"] == "/tmp/opguide-ext"
    text = buildinfo.format_build_config(config)
    assert "MAX_JOBS=3" in text and "jit_cache" in text


def test_load_line_tells_a_build_from_a_reused_library(tmp_path):
    library = tmp_path / "libx.so"
    library.write_bytes(b"")
    old = library.stat().st_mtime
    assert buildinfo.load_line(library, since=old + 10).startswith("loaded libx.so in ")
    assert buildinfo.load_line(library, since=old + 10).endswith("(its build was up to date)")
    assert buildinfo.load_line(library, since=old - 10).startswith("built and loaded libx.so in ")
    assert buildinfo.load_line(library, since=old - 10, loaded=False).startswith("built libx.so")
    reused = buildinfo.load_line(library, since=old + 10, loaded=False, name="x")
    assert reused.startswith("x was up to date (checked in ")


def test_buildinfo_runs_as_a_module_and_as_a_script():
    env = dict(os.environ, MAX_JOBS="2")
    for args in (["-m", "guidekit.buildinfo"], [str(ROOT / "guidekit" / "buildinfo.py")]):
        out = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, check=True, env=env
        ).stdout
        assert out.startswith("torch ") and torch.__version__ in out
        assert "include_dirs" in out and "MAX_JOBS=2" in out


def test_compiler_folder_is_hidden_in_the_compiler_and_env_lines():
    text = (
        "compiler          : /opt/gcc/bin/g++: g++ (GCC) 13.3.0\n"
        "env               : USE_CUDA=1, CUDA_HOME=/usr/local/cuda, CXX=/opt/gcc/bin/g++, "
        "CC=/opt/gcc/bin/gcc, MAX_JOBS=4"
    )
    shown = buildinfo.without_compiler_folder(text)
    assert "/opt/gcc" not in shown
    assert "compiler          : <bin>/g++: g++ (GCC) 13.3.0" in shown
    assert "CXX=<bin>/g++, CC=<bin>/gcc, MAX_JOBS=4" in shown
    # CUDA_HOME is a toolkit's folder, not the compiler's: it stays.
    assert "CUDA_HOME=/usr/local/cuda" in shown
    # A compiler named without a folder is left as it is.
    assert buildinfo.without_compiler_folder("env : CXX=g++") == "env : CXX=g++"
