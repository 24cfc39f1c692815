"""The operators beside other work on the GPU: a kernel that holds all but two SMs.

``tests/shared_gpu_probe.py`` runs each case with a kernel on another stream
that keeps all but two SMs busy, twice: once released by a timer (the case
must finish on the two free SMs first), once released only by the case's own
stream after the case (a case that needs the held SMs, or that waits on the
host for the GPU, would never finish). Every result must equal the idle
GPU's bit for bit. Two defaults need more of the GPU than two free SMs: the
CUDA kernels for long rows launch thread-block clusters, which need several
free SMs of one GPC at once, and the Triton kernels split a long row over
programs that wait for each other. ``OPGUIDE_CLUSTERS=0`` and
``OPGUIDE_TRITON_SPLIT=0`` are the settings for a shared GPU, and the probes
run with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("shared_gpu_probe.py")


def _run_probe(tmp_path, routes: str, env: dict) -> dict:
    out = tmp_path / f"probe_{routes}.json"
    proc = subprocess.run(
        [sys.executable, str(PROBE), "--routes", routes, "--json", str(out)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(proc.stdout[-6000:], proc.stderr[-4000:])
    assert out.exists(), f"the probe wrote no results (exit {proc.returncode})"
    record = json.loads(out.read_text())
    assert record["trusted"], (
        f"the holding kernel ran on {record['held_sms']} SMs and other work on "
        f"{record['other_work_sms']}: it did not hold all but {record['free']} alone"
    )
    return record


def _failures(record: dict) -> list[str]:
    return [
        f"{r['probe']} {r['backend']} {r['op']} {r['direction']} N={r['n']}: "
        f"finished {r['finished_s']} s, released by timer {r['released_by_timer']}, "
        f"equal {r['equal']}"
        for r in record["rows"]
        if not r["ok"]
    ]


@pytest.mark.cuda
def test_triton_route_without_splits_progresses_on_two_free_sms(tmp_path):
    pytest.importorskip("triton")
    record = _run_probe(tmp_path, "triton", {"OPGUIDE_TRITON_SPLIT": "0"})
    assert record["rows"] and not _failures(record), "\n".join(_failures(record))


@pytest.mark.cuda
def test_cuda_route_without_clusters_progresses_on_two_free_sms(tmp_path):
    pytest.importorskip("triton")  # the holding kernel is a Triton kernel
    record = _run_probe(tmp_path, "cpp", {"OPGUIDE_CLUSTERS": "0"})
    assert record["rows"] and not _failures(record), "\n".join(_failures(record))
