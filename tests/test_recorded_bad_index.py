"""The record of what reporting a bad index costs (step 10.3), its tool and the page's claims.

``tools/record_bad_index.py`` times ``tools/bad_index.cu`` on a GPU; without
one, these tests check the record against the sentences step 10.3 says about
it, the helpers that read it, and that the CUDA file compiles (where nvcc is).
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import subprocess

import pytest

from guidekit import compile_checks
from guidekit.recorded import bad_index, load, recorded_dir

pytestmark = pytest.mark.cpu
ROOT = recorded_dir().parents[1]
RECORD = "bad_index_h100.json"


def _tool():
    spec = importlib.util.spec_from_file_location(
        "record_bad_index", ROOT / "tools" / "record_bad_index.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timing(q1, median, q3):
    return {"q1_us": q1, "median_us": median, "q3_us": q3, "samples_us": [q1, median, q3]}


def test_versus_says_no_difference_only_where_the_middle_halves_overlap():
    a, b = _timing(10, 11, 12), _timing(11.5, 13, 14)
    assert bad_index.versus(a, b, "b") == "no measurable difference from b"
    assert bad_index.versus(_timing(20, 24, 25), b, "b") == "11.0 us more than b (1.85x)"
    assert bad_index.versus(_timing(5, 6, 7), b, "b") == "7.0 us less than b (0.46x)"


def test_the_strategy_codes_match_the_cuda_enum():
    """The tool passes a strategy's place in its list; the kernel reads it as its enum."""
    source = (ROOT / "tools" / "bad_index.cu").read_text()
    enum = re.search(r"enum Strategy : int \{([^}]*)\}", source)[1]
    codes = {m[1]: int(m[2]) for m in re.finditer(r"k(\w+) = (\d+)", enum)}
    names = _tool().STRATEGIES
    camel = [name.title().replace("_", "") for name in names]
    assert codes == {c: i for i, c in enumerate(camel)}, codes
    assert tuple(bad_index.STRATEGIES) == names


def test_the_record_holds_every_strategy_at_every_shape_from_its_rounds():
    record = load(RECORD)
    assert [s["tokens"] for s in record["shapes"]] == list(_tool().TOKENS)
    for shape in record["shapes"]:
        timings = bad_index.timings(shape)
        assert set(timings) == {*bad_index.STRATEGIES, bad_index.TORCH_ROW}
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


def test_the_lines_the_page_prints_follow_the_record():
    record = load(RECORD)
    lines = bad_index.cost_lines(record)
    assert len(lines) == 6 * len(record["shapes"])
    summary = bad_index.summary_lines(record)
    assert summary[0].startswith("told during the call")
    for line, name in zip(summary[1:], bad_index.SKIPS_WORK, strict=True):
        assert line.startswith(f"{name}: ")
    assert len(bad_index.table_lines(record)) == 2 + len(bad_index.STRATEGIES) + 1


def test_memcheck_summary_keeps_every_count_and_a_failed_exit():
    run = {
        "tests": "3 failed, 80 passed, 2 deselected in 9.1s",
        "errors": "ERROR SUMMARY: 4 errors",
    }
    assert bad_index.memcheck_summary({"memcheck": {**run, "exit_code": 9}}) == (
        "3 failed, 80 passed, 2 deselected; memcheck 4 errors, exit status 9"
    )
    clean = {"tests": "83 passed in 9.1s", "errors": "ERROR SUMMARY: 0 errors", "exit_code": 0}
    assert bad_index.memcheck_summary({"memcheck": clean}) == "83 passed; memcheck 0 errors"


def test_the_template_s_writing_kind_ran_clean_under_memcheck():
    """Step 10.3 shows the template's writing kind under memcheck: a C++ project among them,
    every run clean, and its tests include a slot past the caches on CUDA."""
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
        assert "_scatter" in project["project"], (name, project["project"])
        assert project["memcheck"]["exit_code"] == 0, (name, project["memcheck"])
        assert project["memcheck"]["errors"] == "ERROR SUMMARY: 0 errors", project["memcheck"]
    assert len(bad_index.memcheck_lines(records)) == len(checked)
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
