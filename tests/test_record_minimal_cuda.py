"""Tests of ``tools/record_minimal_cuda.py``, whose record step 3 shows.

The CPU mode runs the whole tool (build, check, timing, the file) on small
inputs, in a child process: the tool loads a library of the namespace
``opguide_minimal``, which a process may load from one file only.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "record_minimal_cuda.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("record_minimal_cuda", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cpu_record(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("record") / "minimal_cpu.json"
    command = [sys.executable, str(TOOL), "--device", "cpu", "--out", str(out)]
    run = subprocess.run(
        [*command, "--numel", "16384", "--rounds", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"wrote {out}" in run.stdout
    return out


def test_the_cpu_mode_writes_a_record_the_reader_accepts(tool, cpu_record):
    data = tool.read_record(cpu_record)
    assert data["device"].startswith("CPU")
    command = "python tools/record_minimal_cuda.py --device cpu --out minimal_cpu.json"
    assert data["command"].startswith(command)  # the file's name, not the machine's folders
    assert data["torch"] and data["date"] and data["method"]
    cases = {(r["dtype"], r["n"]) for r in data["results"]}
    assert cases == {(d, n) for d in tool.DTYPES for n in tool.ROW_LENGTHS}
    for result in data["results"]:
        assert result["rows"] * result["n"] == 16384
        for ms in result["ms"].values():
            assert 0 < ms["q1"] <= ms["median"] <= ms["q3"]
        for median, low, high in tool.fractions(result).values():
            assert 0 < low <= median <= high


def test_the_reader_names_what_a_record_lacks(tool, cpu_record, tmp_path):
    data = json.loads(cpu_record.read_text())
    del data["device"]
    broken = tmp_path / "no_device.json"
    broken.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no device"):
        tool.read_record(broken)
    data = json.loads(cpu_record.read_text())
    del data["results"][0]["ms"][tool.MINIMAL]
    broken.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="minimal kernel"):
        tool.read_record(broken)


def test_the_plot_draws_a_bar_per_candidate_and_case(tool, cpu_record):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = tool.read_record(cpu_record)
    fig, ax = plt.subplots()
    tool.plot(data, ax)
    assert len(ax.patches) == (len(tool.CANDIDATES) - 1) * len(data["results"])
    plt.close(fig)


def test_the_cpu_mode_never_writes_into_docs_recorded(tool):
    with pytest.raises(SystemExit):
        tool.main(["--device", "cpu"])


def test_gpu_names(tool):
    assert tool.short_gpu_name("NVIDIA H100 80GB HBM3") == "h100"
    assert tool.short_gpu_name("NVIDIA H200") == "h200"
