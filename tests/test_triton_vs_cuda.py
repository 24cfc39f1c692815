"""guidekit.recorded.triton_vs_cuda: the recorded sweep as steps 9 and 10 show it, on a small
synthetic record and on the recorded file itself."""

from __future__ import annotations

import matplotlib

from guidekit.recorded import load, triton_vs_cuda

matplotlib.use("Agg")


def row(pass_name, impl, n, vs_copy, dtype="bf16"):
    """A sweep row with the fields the functions read."""
    return {"pass": pass_name, "impl": impl, "n": n, "dtype": dtype, "vs_copy": vs_copy}


def record(rows):
    return {
        "device": "GPU X",
        "torch": "2.0",
        "triton": "3.0",
        "cuda": "12.0",
        "date": "2026-01-02T03:04:05+00:00",
        "sweep": {"ns": sorted({r["n"] for r in rows}), "rows": rows},
    }


ROWS = [
    row("forward", "opguide triton", 1024, 1.0),
    row("forward", "opguide triton", 32768, 0.9),
    row("forward", "opguide", 1024, 0.95),
    row("forward", "opguide", 32768, 0.99),
    row("forward", "opguide triton", 1024, 0.975, "fp16"),
    row("forward", "opguide", 1024, 0.97, "fp16"),
    row("forward", "copy (same bytes)", 1024, 1.0),
]


def test_measured_on_names_device_versions_and_day():
    assert triton_vs_cuda.measured_on(record(ROWS)) == (
        "GPU X, torch 2.0, Triton 3.0, CUDA 12.0, 2026-01-02"
    )


def test_series_by_n_and_longer_than():
    assert triton_vs_cuda.series(ROWS, "forward", "opguide triton", "bf16") == [
        (1024, 100.0),
        (32768, 90.0),
    ]
    longer = triton_vs_cuda.series(ROWS, "forward", "opguide triton", "bf16", 16384)
    assert longer == [(32768, 90.0)]
    assert triton_vs_cuda.series(ROWS, "backward", "opguide", "bf16") == []


def test_range_lines():
    lines = triton_vs_cuda.range_lines(ROWS, ["forward"])
    assert len(lines) == 4  # two types, two implementations
    assert "Triton" in lines[0] and "90.0% (N = 32768) to 100.0% (N = 1024)" in lines[0]
    assert "median  95.0%" in lines[0]
    assert (
        triton_vs_cuda.range_lines(ROWS, ["forward"], longer_than={"forward": 16384})[0].count(
            "N = 32768"
        )
        == 2
    )


def test_head_to_head_counts_small_gaps_as_ties():
    score = triton_vs_cuda.head_to_head(ROWS, "forward")
    # bf16 1024: Triton 5 points ahead; bf16 32768: CUDA 9 ahead; fp16 1024: 0.5, a tie
    assert (score.triton_ahead, score.cuda_ahead, score.ties, score.points) == (1, 1, 1, 3)
    assert round(score.cuda_lead, 6) == 9.0
    assert score.sentence() == (
        "Triton ahead at 1, CUDA at 1, within 1 point at 1 of 3 points; "
        "CUDA ahead by 9.0 points of the copy at most"
    )
    # With a wider tie, every gap under it is a tie and no lead is claimed.
    wide = triton_vs_cuda.head_to_head(ROWS, "forward", tie=10.0)
    assert (wide.triton_ahead, wide.cuda_ahead, wide.ties) == (0, 0, 3)
    assert "CUDA ahead by" not in wide.sentence()
    assert triton_vs_cuda.head_to_head(ROWS, "backward").points == 0
    # Only the rows longer than longer_than.
    assert triton_vs_cuda.head_to_head(ROWS, "forward", longer_than=16384).cuda_ahead == 1


def test_plot_has_a_panel_per_pass_and_says_recorded():
    fig = triton_vs_cuda.plot_fractions(record(ROWS), ["forward"], limits={"forward": 16384})
    assert len(fig.axes) == 1
    assert fig.get_facecolor()[:3] == (1.0, 1.0, 1.0)
    assert "Recorded on GPU X" in fig._suptitle.get_text()
    assert len(fig.axes[0].get_lines()) == 4 + 2  # four series, 100% and the limit
    fig = triton_vs_cuda.plot_fractions(record(ROWS), ["forward"], longer_than={"forward": 2048})
    assert len(fig.axes[0].get_lines()) == 2 + 1  # bfloat16 at 32768, twice; 100%


def test_on_the_recorded_sweep():
    data = load("sweep_opguide_h100.json")
    rows = data["sweep"]["rows"]
    for pass_name in ("forward", "backward", "fused"):
        for dtype in triton_vs_cuda.DTYPES:
            for impl in (triton_vs_cuda.TRITON, triton_vs_cuda.CUDA):
                assert len(triton_vs_cuda.series(rows, pass_name, impl, dtype)) == len(
                    data["sweep"]["ns"]
                )
    fig = triton_vs_cuda.plot_fractions(data, ["forward", "backward"])
    assert len(fig.axes) == 2


def test_plot_in_two_columns_wraps_into_rows():
    rows = [row(p, "opguide triton", n, 0.9) for p in ("forward", "backward", "fused")
            for n in (1024, 32768)]  # fmt: skip
    fig = triton_vs_cuda.plot_fractions(record(rows), ["forward", "backward", "fused"], columns=2)
    assert len(fig.axes) == 3  # two rows of two, the empty cell removed
    assert fig.get_size_inches()[0] < 4.6 * 3  # narrower than three in a row


def test_compile_lines_state_every_factor():
    from types import SimpleNamespace

    def usage(target, dtypes, status="ok"):
        return SimpleNamespace(kernel="k", config="SEG=4096 num_warps=2 GDC=1", dtypes=dtypes,
                               target=target, status=status)  # fmt: skip

    results = [usage(t, d) for t in ("sm_80", "sm_90") for d in ("float32", "float16")]
    count, statuses = triton_vs_cuda.compile_lines(results)
    assert count == "4 compiles = 1 kernel x 1 launch x 2 dtypes x 2 targets"
    assert statuses == "4 ok, 0 spill, 0 over budget, 0 error"
    assert triton_vs_cuda.launch_knobs("SEG=4096 num_warps=2 GDC=1") == "SEG=4096 num_warps=2"
    count, _ = triton_vs_cuda.compile_lines(results[:3])
    assert count.startswith("3 compiles of the 4 combinations of 1 kernel x")
