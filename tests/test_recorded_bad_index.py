"""The record of what reporting a bad index costs (step 10.3), its tool and the page's claims.

``tools/record_bad_index.py`` times ``tools/bad_index.cu`` on a GPU; without
one, these tests check the record against the sentences step 10.3 says about
it, and that the CUDA file compiles (where nvcc is).
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import subprocess

import pytest

from guidekit import compile_checks
from guidekit.recorded import load, recorded_dir

pytestmark = pytest.mark.cpu
ROOT = recorded_dir().parents[1]
RECORD = "bad_index_<gpu>.json"


def _tool():
    spec = importlib.util.spec_from_file_location(
        "record_bad_index", ROOT / "tools" / "record_bad_index.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_strategy_codes_match_the_cuda_enum():
    """The tool passes a strategy's place in its list; the kernel reads it as its enum."""
    source = (ROOT / "tools" / "bad_index.cu").read_text()
    enum = re.search(r"enum Strategy : int \{([^}]*)\}", source)[1]
    codes = {m[1]: int(m[2]) for m in re.finditer(r"k(\w+) = (\d+)", enum)}
    names = _tool().STRATEGIES
    camel = [name.title().replace("_", "") for name in names]
    assert codes == {c: i for i, c in enumerate(camel)}, codes
    record = load(RECORD)
    assert all(tuple(s["us_per_call"])[: len(names)] == names for s in record["shapes"])


def test_the_record_holds_every_strategy_at_every_shape_from_its_rounds():
    record = load(RECORD)
    assert [s["tokens"] for s in record["shapes"]] == list(_tool().TOKENS)
    for shape in record["shapes"]:
        timings = shape["us_per_call"]
        assert set(timings) == {*_tool().STRATEGIES, "index_copy_ (torch)"}
        for name, t in timings.items():
            assert len(t["samples_us"]) == record["rounds"] >= 15, name
            q1, median, q3 = statistics.quantiles(t["samples_us"], n=4, method="inclusive")
            assert (q1, median, q3) == (t["q1_us"], t["median_us"], t["q3_us"]), name


def test_the_pages_sentences_about_one_bad_slot_hold():
    """Step 10.3: the flag and the pre-pass tell the call, the pre-pass writes no token,
    the flag the good ones, the later flag holds the token, the trap ends later calls."""
    outcomes = load(RECORD)["bad_slot"]
    for name in ("flag_read", "pre_pass"):
        assert outcomes[name]["reported_during_call"] == 5, name
    for name in ("skip", "flag_later"):
        assert outcomes[name]["reported_during_call"] == -1, name
    assert outcomes["flag_later"]["read_from_flag_later"] == 5
    assert outcomes["pre_pass"]["good_tokens_written"] == 0
    for name in ("skip", "flag_read", "flag_later"):
        assert outcomes[name]["good_tokens_written"] == outcomes[name]["good_tokens"] == 15
    trap = outcomes["trap"]
    assert trap["synchronize"].startswith("raised") and trap["a later allocation"].startswith(
        "raised"
    )


def test_the_template_s_writing_kind_ran_clean_under_memcheck():
    """Step 10.3 shows the template's writing kind under memcheck: a C++ project among them,
    every run clean, and its tests include a slot past the caches on CUDA. The grouped
    kind (step 10.4), which writes rows at places it computes, ran under memcheck too."""
    records = {
        p.name: json.loads(p.read_text())
        for p in sorted(recorded_dir().glob("template_*_cuda_*.json"))
    }
    checked = [
        (name, project)
        for name, record in records.items()
        for project in record["projects"]
        if "memcheck" in project
    ]
    assert any("_cpp_" in project["project"] for _, project in checked), "no C++ project"
    for name, project in checked:
        assert "_scatter" in project["project"] or "_grouped" in project["project"], (
            name,
            project["project"],
        )
        assert project["memcheck"]["exit_code"] == 0, (name, project["memcheck"])
        assert project["memcheck"]["errors"] == "ERROR SUMMARY: 0 errors", project["memcheck"]
    tests = next((ROOT / "template" / "project" / "tests").glob("*kind == 'scatter'*"))
    text = tests.read_text()
    assert "def test_slot_past_the_caches_raises(" in text and '"cuda"' in text


def test_the_cuda_file_compiles(tmp_path):
    nvcc = compile_checks.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME or PATH)")
    command = [nvcc, "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90"]
    command += [str(ROOT / "tools" / "bad_index.cu"), "-o", str(tmp_path / "bad_index.so")]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
