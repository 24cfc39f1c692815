"""guidekit.recorded: the readers that the pages print records with, on small synthetic
records and on the recorded files of ``docs/recorded/``; and the hashes that say when a
record measured sources that have changed since.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import matplotlib.pyplot as plt
import pytest

from guidekit.recorded import (
    describe,
    equivalence,
    listed,
    load,
    pages,
    recorded_dir,
    resolve,
    sources,
    stamp,
)


def row(pass_name, impl, n, vs_copy, dtype="bf16"):
    return {"pass": pass_name, "impl": impl, "n": n, "dtype": dtype, "vs_copy": vs_copy}


ROWS = [
    row("forward", "opguide", 1024, 0.95),
    row("forward", "opguide triton", 1024, 0.955),  # within a point: a tie
    row("forward", "opguide", 4096, 0.90),
    row("forward", "opguide triton", 4096, 0.97),
    row("forward", "opguide", 4096, 0.99, "fp16"),
    row("forward", "opguide triton", 4096, 0.93, "fp16"),
    row("backward", "opguide", 4096, 0.88),
]


def test_select_best_and_listed():
    assert len(pages.select(ROWS, impl="opguide")) == 4
    assert len(pages.select(ROWS, impl=("opguide", "x"), dtype="fp16")) == 1
    assert [r["n"] for r in pages.select(ROWS, n=lambda n: n > 1024, dtype="bf16")] == [4096] * 3
    assert pages.select(ROWS, missing=1) == []  # a field no row has matches none
    lines = [{"pct": 90.0, "regs": 40}, {"pct": 95.0, "regs": 64}, {"pct": 99.0, "regs": 40}]
    assert pages.best(lines, regs=40)["pct"] == 99.0 and pages.best(lines, regs=1) is None
    assert listed([]) == "none" and listed([1, 2]) == "1, 2"


def test_table_has_a_column_per_value_and_a_dash_where_none():
    lines = pages.table(ROWS, ("pass", "n"), "impl")
    assert lines[0].split() == ["pass", "n", "opguide", "opguide", "triton"]
    assert lines[-1].split() == ["backward", "4096", "88.0%", "-"]
    assert len(lines) == 4  # forward 1024, forward 4096 (both dtypes' last), backward 4096
    assert len({len(line) for line in lines[:-1]}) == 1  # the columns line up
    cells = pages.table(ROWS, ("dtype",), "n", lambda r: f"{r['vs_copy']:.2f}")
    assert cells[1].split()[0] == "bf16"


def test_ranges_and_versus():
    lines = pages.ranges(pages.select(ROWS, dtype="bf16"), ("pass", "impl"))
    assert lines[0] == "forward opguide: 90.0% (N = 4096) to 95.0% (N = 1024), median 92.5%"
    assert pages.ranges([{"n": 1, "pct": 80.0, "k": "a"}], ("k",), "pct") == [
        "a: 80.0% (N = 1) to 80.0% (N = 1), median 80.0%"
    ]
    said = pages.versus(ROWS, "opguide triton", "opguide")
    assert said.startswith("opguide triton ahead at 1, opguide at 1, within 1 point at 1 of 3")
    assert said.endswith("opguide ahead by 6.0 points of the copy at most")
    assert "at most" not in pages.versus(ROWS[:2], "opguide triton", "opguide")


def test_fixed_changes_compare_two_runs_point_by_point():
    def run(*fractions, device="NVIDIA H200"):
        return {
            "device": device,
            "forward": [
                {"impl": i, "dtype": "bf16", "m": 8, "n": 4096, "of_copy": f}
                for i, f in zip(("opguide", "F.rms_norm"), fractions, strict=True)
            ],
        }

    changes = pages.fixed_changes(run(0.90, 0.50), run(0.95, 0.70), "forward", ["opguide"])
    assert len(changes) == 1 and changes[0]["shape"] == "bf16 8x4096"
    assert changes[0]["points"] == pytest.approx(5.0)


def test_runs_of_two_gpus_are_not_compared(capsys):
    def run(device):
        row = {"impl": "opguide", "dtype": "bf16", "m": 8, "n": 4096, "of_copy": 0.9}
        return {"device": device, "forward": [row]}

    assert pages.fixed_changes(run("NVIDIA H100"), run("NVIDIA H200"), "forward", ["opguide"]) == []
    assert "different GPUs (NVIDIA H100, NVIDIA H200)" in capsys.readouterr().out
    assert pages.one_gpu(run("NVIDIA H200"), run("NVIDIA H200"))


def test_tool_rows_read_every_tool_s_lines():
    text = """# NVIDIA H100, torch 2.11, triton 3.6, 2026-11-27
NVIDIA H100 80GB HBM3, 132 SMs, copy 3016 GB/s
OPGUIDE_KEEP_PACKED=1, L2 cleaned before each batch
bf16 M=2048 N=32768: library 92.6 us, 2899 GB/s, 0.96 of copy
  loop 512 x 4, push           cluster  4 x  66:    110.0 us   2441 GB/s  0.81 of copy
  bf16  32768x4096  vecs/thr 4 thr/row  128 regs  58 (threads/SM 1024)    179.2 us  99.4%
    4096x16384 backward two rows ahead SEG 1024 warps 2 per SM 1   529.7 us  25.2%
  best   4096x16384 backward two rows ahead SEG 4096 warps 4 per SM 2   146.8 us  91.0%
"""
    library, push, packed, launch, top = pages.tool_rows(text)
    assert library == {"dtype": "bf16", "n": 32768, "variant": "library", "pct": 96.0}
    assert push["variant"] == "loop 512 x 4, push" and push["cluster"] == 4 and push["n"] == 32768
    assert packed["vecs/thr"] == 4 and packed["regs"] == 58 and packed["threads/SM"] == 1024
    assert packed["section"] == "OPGUIDE_KEEP_PACKED=1" and packed["n"] == 4096
    assert launch["best"] is False and launch["launch"] == "SEG 1024 warps 2 per SM 1"
    assert top["best"] and top["pass"] == "backward" and top["pct"] == 91.0
    # Every recorded tool output reads into timed lines.
    for path in recorded_dir().glob("sweep_*.txt"):
        assert len(pages.tool_rows(path.read_text())) > 20, path.name


def test_ranking_names_a_loss_past_the_noise():
    lines = pages.ranking({"a": [1.0, 3.0], "b": [5.0, -0.5], "c": [-3.0]}, noise=1.0)
    assert [line.split()[0] for line in lines[:3]] == ["b", "a", "c"]
    assert lines[-1] == "Lose at some point by more than a second run moves one (1.00 points): c."


def test_readers_say_where_and_wrap(tmp_path, capsys):
    (tmp_path / "r.json").write_text(
        json.dumps({"device": "NVIDIA X", "date": "2026-01-02T03", "torch": "2.11"})
    )
    (tmp_path / "t.txt").write_text("# NVIDIA X, torch 2.11, 2026-01-02\nNVIDIA X, 132 SMs\n")
    (tmp_path / "u.txt").write_text("NVIDIA Y\n")
    assert pages.recorded("r.json", tmp_path)["torch"] == "2.11"
    assert pages.recorded_text("t.txt", tmp_path).startswith("# NVIDIA X")
    pages.recorded_text("u.txt", tmp_path)
    pages.say("word " * 30)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "r.json: NVIDIA X, 2026-01-02, torch 2.11"
    assert out[1] == "t.txt: NVIDIA X, 132 SMs, recorded 2026-01-02"
    assert out[2] == "u.txt: NVIDIA Y, no date recorded"
    assert max(map(len, out)) <= pages.WIDTH and out[-1].startswith("    ")
    assert describe("r.json", load("r.json", tmp_path)).startswith("r.json: NVIDIA X")


def test_text_records_name_their_date(capsys):
    for path in sorted(recorded_dir().glob("*.txt")):
        pages.recorded_text(path.name)
    # tools/gpu_records.sh writes the date into each text record's first line.
    assert "no date recorded" not in capsys.readouterr().out


def test_figures_draw_a_panel_per_value():
    fig = pages.lines_figure(
        ROWS,
        "t (recorded)",
        series=("impl", "dtype"),
        marks={"target": {"forward": 90}, "limit": {"backward": 2048}},
    )
    assert [ax.get_title() for ax in fig.axes] == ["forward", "backward"]
    assert len(fig.axes[0].get_lines()) == 5  # four series and the target
    fig = pages.bars_figure({"us": {"a": [1.0, 2.0, 3.0], "b": [2.0]}}, "live")
    assert fig.axes[0].get_title() == "us"
    plt.close("all")


def test_the_rerun_of_the_sweep_moves_a_point_by_a_few_points_at_most():
    assert 0 < pages.rerun_noise() < 3.0


FAIL_ON_STALE = os.environ.get("OPGUIDE_STALE_RECORDS", "") == "fail"


def _records():
    return sorted(p for p in recorded_dir().iterdir() if not p.name.endswith(sources.SIDECAR))


def test_every_record_stores_the_hashes_of_the_files_it_lists():
    for path in _records():
        stored = sources.read_stored(path)
        assert stored is not None, f"{path.name}: run python -m guidekit.recorded.stamp {path.name}"
        assert set(stored) == {"sha256", "files"}, path.name
        # A list that differs from what the record measures today makes the
        # record stale, as a changed hash does: its page names the files, and
        # test_no_record_measured_sources_that_changed_since fails on it.
        assert stored["files"] and all(len(h) == 64 for h in stored["files"].values()), path.name
    # A hash file beside a text record belongs to a record that exists.
    for sidecar in recorded_dir().glob("*" + sources.SIDECAR):
        assert sidecar.with_name(sidecar.name.removesuffix(sources.SIDECAR)).exists()


def test_records_list_files_not_folders():
    """Each record lists the files that set its numbers, by name, each one that exists."""
    root = recorded_dir().parents[1]
    lists = {p.name: sources.measured(p.name) for p in _records()}
    for name, files in lists.items():
        assert files, name
        for file in files:
            assert not any(c in file for c in "*?["), (name, file)  # no glob
            assert (root / file).is_file(), (name, file)
    # The benchmark's sweeps of every pass run eleven kernel families of two
    # operators, with their planning and the shared device code: about 38 files.
    # What each record lists averages far below the 54 that whole folders held.
    average = sum(map(len, lists.values())) / len(lists)
    assert average <= 24, average
    with pytest.raises(KeyError):
        sources.measured("notes.md")


@pytest.mark.skipif(not FAIL_ON_STALE, reason="OPGUIDE_STALE_RECORDS=fail is not set")
def test_no_record_measured_sources_that_changed_since():
    stale = [note for p in _records() if (note := sources.stale_note(p))]
    assert not stale, "\n".join(stale)


def test_digest_is_stable_and_names_each_file():
    one = sources.digest({"b.cu": b"x", "a.h": b"y"})
    assert one == sources.digest({"a.h": b"y", "b.cu": b"x"})  # order of the dict: no matter
    assert list(one["files"]) == ["a.h", "b.cu"]
    # The same content under another name is another set of sources.
    assert sources.digest({"a.h": b"x", "c.cu": b"y"})["sha256"] != one["sha256"]


FORWARD_SWEEP = "sweep_rms_norm_forward_cluster_h100.txt"


def _tree(root):
    """The files that ``sweep_h100.json`` and the forward cluster sweep measured, copied
    from this checkout, and the two records, stamped."""
    real = recorded_dir().parents[1]
    for name in ("sweep_h100.json", FORWARD_SWEEP):
        for rel in sources.measured(name):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes((real / rel).read_bytes())
    folder = root / "docs" / "recorded"
    folder.mkdir(parents=True)
    (folder / "sweep_h100.json").write_text(
        json.dumps({"device": "NVIDIA H100", "date": "2026-01-01", "torch": "2.11"}, indent=1)
    )
    (folder / FORWARD_SWEEP).write_text("NVIDIA H100, 132 SMs\n")
    for name in ("sweep_h100.json", FORWARD_SWEEP):
        sources.stamp(folder / name, root)
    return folder


def _edit(path, old, new):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_a_changed_kernel_marks_its_records_stale_on_the_page(tmp_path, monkeypatch, capsys):
    folder = _tree(tmp_path)
    assert json.loads((folder / "sweep_h100.json").read_text())["device"] == "NVIDIA H100"
    assert (folder / f"{FORWARD_SWEEP}.sources").exists()
    monkeypatch.setattr(sources, "_source_root", lambda: tmp_path)

    pages.recorded("sweep_h100.json", folder)
    pages.recorded_text(FORWARD_SWEEP, directory=folder)
    assert "changed since" not in capsys.readouterr().out

    # Comments and docstrings of listed C++, CUDA and Python files: nothing stale.
    cluster = tmp_path / "csrc" / "common" / "cluster.cuh"
    _edit(cluster, "#pragma once", "// Reworded.\n#pragma once  /* a\nb */")
    timing = tmp_path / "guidekit" / "benchmark" / "timing.py"
    _edit(timing, '"""', '"""Reworded. ')
    timing.write_text(timing.read_text() + "# a comment\n")
    assert sources.stale_files(folder / "sweep_h100.json") == []
    assert sources.stale_files(folder / FORWARD_SWEEP) == []

    # Code: the records that list the file, and no other.
    cluster.write_text(cluster.read_text() + "inline int faster() { return 1; }\n")
    pages.recorded("sweep_h100.json", folder)
    pages.recorded_text(FORWARD_SWEEP, directory=folder)
    out = " ".join(capsys.readouterr().out.split())  # the lines as pages.say wraps them, joined
    changed = "csrc/common/cluster.cuh"
    assert f"sweep_h100.json: measured on sources that have changed since: {changed}" in out
    assert f"cluster_h100.txt: measured on sources that have changed since: {changed}" in out
    timing.write_text(timing.read_text() + "SPIN = 2\n")
    assert sources.stale_files(folder / "sweep_h100.json") == [
        "csrc/common/cluster.cuh",
        "guidekit/benchmark/timing.py",
    ]
    assert sources.stale_files(folder / FORWARD_SWEEP) == ["csrc/common/cluster.cuh"]
    # A file no record lists: nothing.
    (tmp_path / "csrc" / "rms_norm" / "notes.cuh").write_text("int x;\n")
    assert sources.stale_files(folder / FORWARD_SWEEP) == ["csrc/common/cluster.cuh"]


def test_the_stamp_command_checks_and_stamps(tmp_path, monkeypatch, capsys):
    folder = _tree(tmp_path)
    monkeypatch.setattr(sources, "ROOT", tmp_path)
    assert stamp.main(["--check"]) == 0
    (tmp_path / "tools" / "sweep_common.cuh").write_text("int changed;\n")
    assert stamp.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert f"{FORWARD_SWEEP}: measured on sources that have changed since: tools/sweep" in out
    assert out.rstrip().endswith("1 of 2 records measured sources that have changed since")
    assert stamp.main([str(folder / FORWARD_SWEEP)]) == 0
    assert stamp.main(["--check"]) == 0
    # A record whose list grew (the registry names a new file) is stale until restamped.
    stored = sources.read_stored(folder / "sweep_h100.json")
    del stored["files"]["guidekit/benchmark/sweep.py"]
    sources.write_stored(folder / "sweep_h100.json", stored)
    assert sources.stale_files(folder / "sweep_h100.json") == ["guidekit/benchmark/sweep.py"]


def test_the_records_command_lists_every_record_once():
    root = recorded_dir().parents[1]
    listing = subprocess.run(
        ["bash", "tools/gpu_records.sh", "list"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    named = re.findall(r"[\w.]+\.(?:json|txt|log)\b", listing)
    assert sorted(named) == sorted(p.name for p in _records())


def test_code_leaves_out_comments_only():
    """What a record's hash of a file covers: comments may change, code may not."""

    def same(path, before, after):
        return equivalence.code(path, before) == equivalence.code(path, after)

    kernel = b'int f(int x) {  // doubles\n  return 2 * x;  /* "no" */\n}\nconst char* s = "//x";\n'
    reworded = b"// Doubles x.\nint f(int x) {\n  return 2 *   x; /* a\nb */\n}\n"
    reworded += b'const char* s = "//x";\n'
    assert same("k.cuh", kernel, reworded)
    assert not same("k.cuh", kernel, kernel.replace(b"2 * x", b"3 * x"))
    assert not same("k.cuh", kernel, kernel.replace(b'"//x"', b'"//y"'))  # in a string: code
    assert not same("k.cuh", kernel, kernel.replace(b"2 * x", b"2 *\n x"))  # moved: stale
    module = b'"""Doc."""\n\n\ndef g(a):\n    """Says."""\n    return a + 1  # one\n'
    assert same("m.py", module, b'"""Other doc."""\ndef g(a):\n    # comment\n    return a + 1\n')
    assert not same("m.py", module, module.replace(b"a + 1", b"a + 2"))
    patch = "--- a/k.cuh\n+++ b/k.cuh\n@@ -1,3 +1,3 @@\n // old context\n-x\n+y\n"
    moved = "--- a/k.cuh\n+++ b/k.cuh\n@@ -4,3 +4,3 @@ int f\n // new context\n-x\n+y\n"
    assert same("v.patch", patch.encode(), moved.encode())
    assert not same("v.patch", patch.encode(), moved.replace("+y", "+z").encode())
    assert same("run.sh", b"#!/bin/sh\n# says\necho 1\n", b"# says more\necho 1\n")
    assert not same("run.sh", b"echo 1\n", b"echo 2\n")
    # copier's message to the reader renders nothing; a question's default does.
    questions = b"_message_after_copy: >-\n  Add one line.\n\nkind:\n  default: a\n"
    assert same("q.yml", questions, questions.replace(b"Add one line.", b"Add two lines."))
    assert not same("q.yml", questions, questions.replace(b"default: a", b"default: b"))
    assert not same("notes.txt", b"a", b"b")
    assert same("bad.py", b"def (", b"def (") and not same("bad.py", b"def (", b"def ( ")


def test_every_variant_patch_applies_to_the_sources():
    """Each patch of ``tools/variants/`` applies to the sources as they are (part 5 needs it)."""
    root = recorded_dir().parents[1]
    patches = sorted((root / "tools" / "variants").glob("*.patch"))
    assert patches
    for patch in patches:
        proc = subprocess.run(
            ["git", "apply", "--check", str(patch)], cwd=root, capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{patch.name} does not apply:\n{proc.stderr}"


def _line_numbers(spec: str, count: int) -> set[int]:
    """The line numbers a literalinclude ``:lines:`` option names (``1-2,30``, ``5-``)."""
    numbers = set()
    for part in spec.replace(" ", "").split(","):
        first, _, last = part.partition("-")
        end = int(last) if last else (count if part.endswith("-") else int(first))
        numbers.update(range(int(first), end + 1))
    return numbers


def test_building_page_shows_each_logs_header_and_summary():
    """``docs/building.md`` shows recorded logs by line numbers: they must name the log's
    first line and pytest's summary, so that a re-recorded log
    cannot shift them."""
    page = (recorded_dir().parent / "building.md").read_text()
    includes = re.findall(r"```\{literalinclude\} recorded/(\S+)\n(?:.*\n)*?:lines: (.+)\n", page)
    assert len(includes) >= 3, includes
    summary = re.compile(r"\b\d+ (passed|failed)\b.* in [\d.]+s")  # pytest's last line
    for name, spec in includes:
        lines = (recorded_dir() / name).read_text().splitlines()
        shown = _line_numbers(spec, len(lines))
        assert 1 in shown, (name, spec)
        last = max(i for i, line in enumerate(lines, 1) if summary.search(line))
        assert last in shown, f"{name}: the summary is line {last}, the page shows {spec}"


def test_a_gpu_placeholder_names_the_one_record_of_its_kind(tmp_path):
    (tmp_path / "sweep_h100.json").write_text("{}")
    (tmp_path / "sweep_odd_rows_h100.json").write_text("{}")
    (tmp_path / "sweep_h100.json.sources").write_text("{}")
    assert resolve("sweep_<gpu>.json", tmp_path) == "sweep_h100.json"
    assert resolve("sweep_odd_rows_<gpu>.json", tmp_path) == "sweep_odd_rows_h100.json"
    assert resolve("pdl_on.json", tmp_path) == "pdl_on.json"
    (tmp_path / "sweep_h200.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="2 records match"):
        resolve("sweep_<gpu>.json", tmp_path)
    with pytest.raises(FileNotFoundError, match="0 records match"):
        resolve("l2_keep_<gpu>.json", tmp_path)


def test_every_placeholder_in_the_pages_names_one_record():
    pages_src = recorded_dir().parents[1] / "examples_src"
    found = (re.findall(r'"(\w+_<gpu>\.\w+)"', p.read_text()) for p in pages_src.glob("*.py"))
    names = {name for names in found for name in names}
    assert names
    for name in sorted(names):
        assert resolve(name), name


# A stand-in for python3 on the PATH of tools/gpu_records.sh: the benchmark writes a
# one-row sweep (and fails at the call numbered $FAKE_STOP_AT, as a call's time
# limit would stop it), pip and the build do nothing, and the rest is Python.
FAKE_PYTHON = r"""#!/usr/bin/env bash
case "$1 ${2:-}" in
  "-m guidekit.benchmark")
    echo "${*}" >> "$FAKE_LOG"
    if [[ "$(wc -l < "$FAKE_LOG")" == "${FAKE_STOP_AT:-0}" ]]; then exit 3; fi
    exec "$REAL_PYTHON" -c '
import json, sys
a = sys.argv[1:]
d, p, out = a[a.index("--dtypes") + 1], a[a.index("--passes") + 1], a[a.index("--out") + 1]
row = {"pass": p, "impl": "opguide", "dtype": d, "n": 4096, "vs_copy": 1.0}
sweep = {"elements": 2**26, "ns": [4096], "dtypes": [d], "rows": [row], "skipped": [],
         "peers_missing": {}, "min_sets": 2}
json.dump({"device": "GPU", "torch": "2", "cuda": "13", "python": "3", "triton": "3",
           "format": 1, "date": "2026-01-01", "copy_bandwidth_GBps": 1.0,
           "command": "python -m guidekit.benchmark --sweep --out x.json", "sweep": sweep},
          open(out, "w"))' "$@" ;;
  "-m pip"|"setup.py -q") exit 0 ;;
  *) exec "$REAL_PYTHON" "$@" ;;
esac
"""


def test_a_stopped_sweep_resumes_where_it_stopped(tmp_path):
    """tools/gpu_records.sh keeps each finished process of a sweep: run again, it runs the rest."""
    root = recorded_dir().parents[1]
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True)
    (tree / "docs" / "recorded").mkdir(parents=True)
    for tool in ("gpu_records.sh", "merge_sweeps.py"):
        (tree / "tools" / tool).write_bytes((root / "tools" / tool).read_bytes())
    (tree / "guidekit").symlink_to(root / "guidekit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    log = tmp_path / "benchmark_calls.log"
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        REAL_PYTHON=sys.executable,
        FAKE_LOG=str(log),
        PYTHONPATH=str(tree),
    )
    command = ["bash", "tools/gpu_records.sh", "1", "", "sweep_gpu.json"]

    def run(**extra):
        return subprocess.run(
            command, cwd=tree, env=dict(env, **extra), capture_output=True, text=True
        )

    stopped = run(FAKE_STOP_AT="3")
    assert stopped.returncode != 0
    kept = list((tree / "build" / "records_partial").glob("sweep_gpu-*/*.json"))
    assert len(kept) == 2  # the two processes before the stop
    assert not (tree / "docs" / "recorded" / "sweep_gpu.json").exists()

    resumed = run()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    calls = log.read_text().splitlines()
    assert len(calls) == 3 + 6  # the stopped call ran again; the two kept did not
    assert resumed.stdout.count("kept: ") == 2
    record = json.loads((tree / "docs" / "recorded" / "sweep_gpu.json").read_text())
    assert len(record["sweep"]["rows"]) == 8  # bf16 and fp16, four passes
    assert not list((tree / "build" / "records_partial").iterdir())


def test_the_stale_listing_names_each_stale_record_once():
    """`tools/gpu_records.sh list stale` names what `stale` remakes, and the stale rest."""
    root = recorded_dir().parents[1]
    listing = subprocess.run(
        ["bash", "tools/gpu_records.sh", "list", "stale"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    named = re.findall(r"^  ([\w.]+\.(?:json|txt|log))\b", listing, re.MULTILINE)
    stale = [
        p.name
        for p in _records()
        if sources.read_stored(p) is None or sources.stale_note(p, sources.ROOT)
    ]
    assert sorted(named) == sorted(stale)
