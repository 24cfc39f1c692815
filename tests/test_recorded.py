"""guidekit.recorded: the analysis that step 11 prints, on small synthetic records
and on the recorded files of ``docs/recorded/``.

The claims the page makes about the recorded files ("no misses", "faster at
8 of 8 shapes", "31 of 64 points behind") are asserted here on the functions
that compute them, so a new recording that changes a claim fails a test
rather than leaving the page's prose behind.
"""

from __future__ import annotations

import pytest

from guidekit.recorded import (
    describe,
    eager,
    fixed_shapes,
    lessons,
    listed,
    load,
    long_rows,
    recorded_dir,
    sweeps,
    tool_outputs,
)


def row(pass_name, impl, n, vs_copy, dtype="bf16", seconds=1.0):
    """A sweep row with the fields the analysis reads."""
    return {"pass": pass_name, "impl": impl, "n": n, "dtype": dtype, "vs_copy": vs_copy,
            "seconds": seconds, "bytes": 2**20, "GBps": 1.0}  # fmt: skip


# Synthetic records ------------------------------------------------------------


def test_compare_two_fixed_shape_runs():
    def run(values):
        return {"forward": [{"impl": i, "dtype": "bf16", "m": 8, "n": n, "of_copy": v}
                            for (i, n), v in values.items()]}  # fmt: skip

    before = run({("a", 64): 0.90, ("b", 64): 0.80, ("a", 128): 0.95})
    after = run({("a", 64): 0.92, ("b", 64): 0.805, ("c", 64): 0.5})
    changes = fixed_shapes.compare("forward", ["a", "b", "c"], before, after)
    assert [(c.impl, c.where) for c in changes] == [("a", "bf16 8x64"), ("b", "bf16 8x64")]
    assert changes[0].points == pytest.approx(2.0)
    assert fixed_shapes.moved_by_more_than(changes) == ["a"]
    assert fixed_shapes.largest(changes).impl == "a"
    lines = fixed_shapes.compare_lines("forward", changes, ("before", "after"))
    assert lines[1].endswith("90.0%        92.0%")


def test_targets_misses_expected_and_not():
    rows = [
        row("backward", "opguide triton", 16384, 0.80, "bf16"),  # split row: expected
        row("backward", "opguide triton", 16384, 0.81, "fp16"),
        row("forward", "opguide", 4096, 0.85, "bf16"),  # one block: not expected
        row("forward", "opguide", 4096, 0.95, "fp16"),
        row("fused", "opguide", 256, 0.895, "bf16"),  # a hair under the target
        row("fused", "opguide", 256, 0.905, "fp16"),
        row("forward", "F.rms_norm", 4096, 0.99, "bf16"),
    ]
    by = sweeps.by_dtype(rows)
    misses = sweeps.target_misses(by)
    assert misses == {
        ("opguide triton", "backward"): {16384: ["bf16", "fp16"]},
        ("opguide", "forward"): {4096: ["bf16"]},
        ("opguide", "fused"): {256: ["bf16"]},
    }
    expected, other = sweeps.expected_misses(misses)
    assert expected == ["opguide triton backward at N = 16384"]
    assert other == ["opguide forward at N = 4096 (bf16)", "opguide fused at N = 256 (bf16)"]
    hair, split = sweeps.one_type_misses(misses, by)
    assert [h[:3] for h in hair] == [("opguide", "fused", 256)]
    assert [s[:3] for s in split] == [("opguide", "forward", 4096)]
    assert "95.0% against 85.0%" in split[0][3]  # float16 first
    again = [row("forward", "opguide", 4096, 0.93, "bf16")]
    assert "a slow spell" in sweeps.measured_again_lines(split, again)[0]
    slow, compared = sweeps.slower_than_fastest_peer(by)
    assert (slow, compared) == (["bf16 forward 4096"], 1)  # fp16 4096 has no peer


def test_target_table_says_missed_and_could_not_run():
    at = sweeps.at([row("forward", "opguide", 256, 0.5), row("forward", "liger", 256, 0.6)])
    line = next(x for x in sweeps.target_lines(at, [256]) if x.startswith("forward"))
    assert "MISSED" in line and "could not run" in line and "liger  60.0%: slower" in line


def test_one_input_set_gains_and_peers():
    one = {("opguide", 256): 1.0, ("liger", 256): 1.2, ("copy (same bytes)", 256): 1.0}
    three = {("opguide", 256): 1.0, ("liger", 256): 1.05}
    gains = sweeps.one_set_gains(one, three)
    assert set(gains) == {"opguide", "liger"}
    assert gains["liger"][256] == pytest.approx(15.0)
    assert any(x.startswith("  Surprising: liger gains 15.0") for x in sweeps.one_set_lines(gains))
    assert sweeps.behind_peer(one, [256]) == [256]
    assert sweeps.behind_peer(three, [256]) == [256]
    assert sweeps.points(-0.04) == "+0.0"
    assert listed([]) == "none" and listed([1, 2]) == "1, 2"


def test_head_to_head_and_dtype_gaps():
    rows = [row("forward", "opguide", 256, 1.0, seconds=1.0),
            row("forward", "quack", 256, 1.0, seconds=2.0),
            row("forward", "opguide", 512, 1.0, seconds=3.0),
            row("forward", "quack", 512, 1.0, seconds=2.0)]  # fmt: skip
    assert sweeps.head_to_head(rows, "quack") == (1, 2, ["forward bf16 512"])
    gaps = sweeps.dtype_gaps([row("forward", "opguide", 256, 0.9, "bf16"),
                              row("forward", "opguide", 256, 0.93, "fp16")])  # fmt: skip
    assert gaps == [pytest.approx(3.0)]


def test_odd_rows_behind_by_more_than_two_points():
    odd = {
        ("bf16", "forward", "opguide", 2049): 0.50,
        ("bf16", "forward", "F.rms_norm", 2049): 0.53,
        ("bf16", "forward", "opguide", 4104): 0.90,
        ("bf16", "forward", "F.rms_norm", 4104): 0.91,
    }
    found, both = long_rows.behind(odd, "F.rms_norm")
    assert found == [("forward", "2049 bf16")] and len(both) == 2
    assert long_rows.behind_lines(odd, "F.rms_norm")[0].endswith("at 1 of 2 points:")
    assert [long_rows.access_bytes(n) for n in (4096, 4100, 2050, 2049)] == [16, 8, 4, 2]


def test_tool_output_parsers():
    cluster = (
        "NVIDIA X, 1 SMs\n"
        "bf16 M=4096 N=32768: library 92.4 us, 2904 GB/s, 0.96 of copy\n"
        "  loop 512 x 4, push     cluster  2 x 4096:   92.7 us   2895 GB/s  0.91 of copy\n"
    )
    assert tool_outputs.device_lines(cluster) == ["NVIDIA X, 1 SMs"]
    assert tool_outputs.cluster_sweep(cluster, "loop 512 x 4, push") == {32768: (0.91, 0.96)}
    variant, library = tool_outputs.cluster_variants(cluster)
    assert library == {("bf16", 32768): 0.96}
    assert variant == {("bf16", 32768, "loop 512 x 4, push"): 0.91}
    split = (
        "    4096x16384 backward one row late SEG 1024 warps 2 per SM 1   719.6 us  18.5%\n"
        "  best 4096x16384 backward one row late SEG 4096 warps 4 per SM 2   198.4 us  67.3%\n"
    )
    best, every = tool_outputs.split_sweep(split)
    assert best == {("backward", "one row late", 16384): (67.3, "SEG 4096 warps 4 per SM 2")}
    assert every == {("backward", "one row late", "SEG 1024 warps 2 per SM 1", 16384): 18.5}
    assert tool_outputs.launch("SEG 4096 warps 2 per SM 1") == "(4096, 2 warps)"
    sweep = (
        "NVIDIA Y\nOPGUIDE_KEEP_PACKED=1, L2 cleaned\n"
        "  bf16  32768x4096  vecs/thr 4 rows/blk  1 regs  57 blocks/SM  8    129.6 us  97.0%\n"
        "  bf16  32768x4096  vecs/thr 4 rows/blk  2 regs  57 blocks/SM  4    128.8 us  97.5%\n"
    )
    header, lines = tool_outputs.read_sweep(sweep)
    assert header == ["NVIDIA Y"] and len(lines) == 2
    assert lines[0]["section"] == "OPGUIDE_KEEP_PACKED=1" and lines[0]["regs"] == 57
    assert tool_outputs.best(lines, **{"vecs/thr": 4})["pct"] == 97.5
    assert tool_outputs.best(lines, regs=1) is None


def test_eager_targets_and_parts():
    rows = []
    for impl, fwd, train in (("F.rms_norm", 10e-6, 100e-6), ("opguide", 8e-6, 120e-6),
                             ("opguide ops", None, 40e-6)):  # fmt: skip
        for mode, t in (("forward", fwd), ("training", train)):
            if t is not None:
                base = 10e-6 if mode == "forward" else 100e-6
                rows.append({"mode": mode, "impl": impl, "m": 1, "n": 64, "seconds": t,
                             "vs_F.rms_norm": t / base})  # fmt: skip
    assert eager.target_misses(rows, "opguide", "forward") == 0
    assert eager.target_misses(rows, "opguide", "training") == 1
    assert eager.target_misses(rows, "opguide triton", "forward") is None
    parts, lines = eager.training_parts(rows)
    assert parts["opguide"] == pytest.approx((120.0, 40.0, 80.0))
    assert lines == [
        "opguide         training   120 us: the operators   40 us, autograd and the rest   80 us",
        "F.rms_norm: not timed without autograd in this file",
    ]
    assert eager.node_lines(rows) == []  # no autograd::Function row


# The recorded files -------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep():
    return load("sweep_h100.json")


def test_recorded_files_say_where_they_were_measured(sweep):
    assert describe("sweep_h100.json", sweep).startswith("sweep_h100.json: NVIDIA H100")
    assert (recorded_dir() / "eager_bf16_h100.json").is_file()


def test_recorded_sweep_meets_every_target_with_no_misses(sweep):
    by = sweeps.by_dtype(sweep["sweep"]["rows"])
    misses = sweeps.target_misses(by)
    assert misses == {}  # the page: "Expected misses: none", "Other ...: none"
    assert sweeps.expected_misses(misses) == ([], [])
    assert sweeps.one_type_misses(misses, by) == ([], [])
    assert all("missed at N = none" in line for line in sweeps.dtype_target_lines(by))
    assert sweeps.slower_than_fastest_peer(by) == ([], 40)


def test_recorded_sweep_peers_and_long_rows(sweep):
    rows = [r for r in sweep["sweep"]["rows"] if r["dtype"] == "bf16"]
    at, ns = sweeps.at(rows), sweep["sweep"]["ns"]
    assert long_rows.cluster_lines(at, ns)[1] == []  # Quack faster at no cluster row
    assert long_rows.triton_fused_faster(at, ns) == []
    one = sweeps.fractions(load("sweep_one_input_set_h100.json")["sweep"]["rows"])
    three = sweeps.fractions(r for r in rows if r["pass"] == "forward")
    assert sweeps.behind_peer(three, ns) == []  # "with three: none"
    assert sweeps.behind_peer(one, ns)  # with one set, slower somewhere
    assert not any(
        "Surprising" in x for x in sweeps.one_set_lines(sweeps.one_set_gains(one, three))
    )


def test_recorded_l2_clean_moves_only_the_cuda_forward():
    kept, cleaned = load("l2_keep_h200.json"), load("l2_clean_h200.json")
    impls = ["opguide", "opguide triton", "compile(reference)", "F.rms_norm"]
    changes = fixed_shapes.compare("forward", impls, kept, cleaned)
    assert fixed_shapes.moved_by_more_than(changes) == ["opguide"]


def test_recorded_odd_rows_behind_counts():
    odd = {(r["dtype"], r["pass"], r["impl"], r["n"]): r["vs_copy"]
           for r in load("sweep_odd_rows_h100.json")["sweep"]["rows"]}  # fmt: skip
    assert [len(x) for x in long_rows.behind(odd, "F.rms_norm")] == [11, 48]
    assert [len(x) for x in long_rows.behind(odd, "opguide triton")] == [31, 64]


def test_recorded_eager_targets_met_and_parts():
    bf16 = load("eager_bf16_h100.json")["eager"]["rows"]
    fp16 = load("eager_fp16_h100.json")["eager"]["rows"]
    for rows in (bf16, fp16):
        for impl in eager.EAGER_TARGETS:
            for mode in ("forward", "training"):
                assert eager.target_misses(rows, impl, mode) == 0, (impl, mode)
    parts, lines = eager.training_parts(bf16)
    assert set(parts) == {"opguide", "opguide triton", "F.rms_norm", eager.TRITON_EXPERIMENTAL}
    assert lines[-1].startswith("Surprising: the Python autograd Function")
    # One output costs less than two at the median shape (the page's last eager line).
    assert " us less per training call" in eager.node_lines(bf16)[0]
    # The default Triton path (a plain launch) is within 1.5x of Liger's, which launches
    # its kernels the same way; F.rms_norm is far ahead of both.
    for line in eager.plain_launch_lines({"bf16": bf16, "fp16": fp16}):
        worst_vs_liger = float(line.rsplit("-", 1)[1].split("x")[0])
        assert worst_vs_liger < 1.5, line


def test_rerun_of_the_sweep():
    first = [
        {"impl": "opguide", "pass": "forward", "dtype": "bf16", "n": 256, "vs_copy": 0.9},
        {"impl": "opguide", "pass": "forward", "dtype": "bf16", "n": 512, "vs_copy": 0.9},
    ]
    again = [{"impl": "opguide", "pass": "forward", "dtype": "bf16", "n": 256, "vs_copy": 0.93},
             {"impl": "opguide", "pass": "forward", "dtype": "bf16", "n": 512, "vs_copy": 0.91},
             {"impl": "copy (same bytes)", "pass": "forward", "dtype": "bf16", "n": 256,
              "vs_copy": 1.0}]  # fmt: skip
    changes = sweeps.rerun_changes(first, again)
    assert list(changes) == [("opguide", "forward")]
    lines = sweeps.rerun_lines(changes)
    assert lines[0].split() == ["opguide", "forward", "+1.0", "to", "+3.0", "points"]
    assert lines[1] == "Points that moved by more than 2: opguide forward bf16 N = 256 (+3.0)"
    # The recorded second run: the CUDA kernels within 2 points of the first at every point.
    rerun = sweeps.rerun_changes(
        load("sweep_h100.json")["sweep"]["rows"], load("sweep_opguide_h100.json")["sweep"]["rows"]
    )
    cuda = [c for (impl, _), found in rerun.items() if impl == "opguide" for *_, c in found]
    assert len(cuda) == 80 and max(abs(c) for c in cuda) <= 2.0


def test_recorded_lessons():
    _, spilled = lessons.spill_lines(load("triton_registers_h100.json"))
    assert spilled == [16384]
    text = (recorded_dir() / "sweep_rms_norm_backward_cluster_h100.txt").read_text()
    backward = tool_outputs.cluster_sweep(text, "512 x 4, 3 stages")
    forward = tool_outputs.cluster_sweep(
        (recorded_dir() / "sweep_rms_norm_forward_cluster_h100.txt").read_text(),
        "loop 1024 x 4, barrier", after="loop 512 x 4, push",
    )  # fmt: skip
    rows = [r for r in load("sweep_h100.json")["sweep"]["rows"] if r["dtype"] == "bf16"]
    lines, older = lessons.push_lines(forward, backward, sweeps.at(rows))
    assert older == [] and len(lines) == 6  # the sweep ran the pushing backward
    pipelined = tool_outputs.read_sweep(
        (recorded_dir() / "sweep_rms_norm_backward_pipelined_h200.txt").read_text()
    )[1]
    assert min(lessons.pipeline_lines(pipelined)[1]) > 0  # the pipeline gains at every shape
    on, off = load("pdl_on.json"), load("pdl_off.json")
    pdl = [c.points for p in ("forward", "backward")
           for c in fixed_shapes.compare(p, ["opguide"], off, on)]  # fmt: skip
    assert lessons.pdl_lines(pdl, on.get("clean_l2"))[-1] == "PDL stays on: the median point gains."
