"""guidekit.gallery_runs: a gallery item takes the docs build's result only on the same inputs.

Each test works on a small git checkout of its own in a temporary folder,
with its own record file, so nothing here reads or changes this checkout's
``build/gallery_runs.json``.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from guidekit import gallery_runs

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    (root / "opguide").mkdir(parents=True)
    (root / "opguide" / "kernel.py").write_text("SCALE = 1\n")
    (root / ".gitignore").write_text("/build/\n*.so\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    monkeypatch.setattr(gallery_runs, "RECORD", root / "build" / "gallery_runs.json")
    monkeypatch.delenv("OPGUIDE_RERUN_GALLERY", raising=False)
    return root


def test_same_inputs_take_the_docs_result(checkout):
    gallery_runs.write(["01_first.py"], root=checkout)
    assert gallery_runs.passed_in_docs_build("01_first.py", root=checkout)
    assert not gallery_runs.passed_in_docs_build("02_second.py", root=checkout)


def test_a_changed_or_new_file_reruns_every_script(checkout):
    gallery_runs.write(["01_first.py"], root=checkout)
    (checkout / "opguide" / "kernel.py").write_text("SCALE = 2\n")
    assert not gallery_runs.passed_in_docs_build("01_first.py", root=checkout)
    gallery_runs.write(["01_first.py"], root=checkout)
    (checkout / "opguide" / "new.py").write_text("")  # untracked, not ignored
    assert not gallery_runs.passed_in_docs_build("01_first.py", root=checkout)


def test_ignored_files_do_not_count(checkout):
    # Build caches, and the compiled library, whose bytes change with each
    # link: it is built from the sources, which count.
    gallery_runs.write(["01_first.py"], root=checkout)
    (checkout / "build" / "cache.bin").write_bytes(b"x")
    (checkout / "opguide" / "_C.abi3.so").write_bytes(b"\x7fELF")
    assert gallery_runs.passed_in_docs_build("01_first.py", root=checkout)


def test_the_key_of_the_start_is_the_one_recorded(checkout):
    start = gallery_runs.key(checkout)
    (checkout / "opguide" / "kernel.py").write_text("SCALE = 3\n")
    gallery_runs.write(["01_first.py"], root=checkout, at_start=start)
    assert not gallery_runs.passed_in_docs_build("01_first.py", root=checkout)
    (checkout / "opguide" / "kernel.py").write_text("SCALE = 1\n")
    assert gallery_runs.passed_in_docs_build("01_first.py", root=checkout)


def test_the_environment_counts_and_the_switch_reruns(checkout, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    gallery_runs.write(["01_first.py"], root=checkout)
    monkeypatch.setenv("OPGUIDE_JOBS", "7")  # parallelism only: the same inputs
    assert gallery_runs.passed_in_docs_build("01_first.py", root=checkout)
    monkeypatch.setenv("OPGUIDE_RERUN_GALLERY", "1")
    assert not gallery_runs.passed_in_docs_build("01_first.py", root=checkout)
    monkeypatch.delenv("OPGUIDE_RERUN_GALLERY")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not gallery_runs.passed_in_docs_build("01_first.py", root=checkout)


def test_no_git_means_no_key(tmp_path, monkeypatch):
    monkeypatch.setattr(gallery_runs, "RECORD", tmp_path / "gallery_runs.json")
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    gallery_runs.write(["01_first.py"], root=tmp_path)
    assert not gallery_runs.passed_in_docs_build("01_first.py", root=tmp_path)
