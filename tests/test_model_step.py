"""Tests of ``guidekit.model_step`` and ``guidekit.model_record`` (step 20 and its record tool).

The norm swap must reach every ``LlamaRMSNorm`` and keep the model's logits;
the timer must give every call its turn in every position; the tool must name
its output after the GPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from guidekit import model_record, model_step

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=32,
)


@pytest.mark.parametrize("forward", ["f_rms_norm", "opguide_cpp"])
def test_use_norm_reaches_every_norm_and_keeps_the_logits(forward):
    pytest.importorskip("transformers", reason="transformers is not installed")
    model = model_step.llama(TINY, torch.float32, "cpu")
    ids = model_step.token_ids(TINY, 2, 8, "cpu")
    expected = model_step.inference_forward(model, ids)
    # Two norms per layer and the final one.
    assert model_step.use_norm(model, getattr(model_step, forward)) == 2 * 2 + 1
    torch.testing.assert_close(model_step.inference_forward(model, ids), expected)


def test_time_interleaved_turns_the_order_each_round():
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in "abc"}
    times = model_step.time_interleaved(calls, rounds=3, warmup=1)
    assert order == list("abc" + "abc" + "bca" + "cab")
    assert {name: len(ms) for name, ms in times.items()} == {"a": 3, "b": 3, "c": 3}
    with pytest.raises(ValueError, match="rounds"):
        model_step.time_interleaved(calls, rounds=0)


def test_summary():
    assert model_step.summary([4.0, 1.0, 3.0, 2.0, 5.0])["median"] == 3.0
    assert model_step.summary([2.0]) == {"median": 2.0, "q1": 2.0, "q3": 2.0}


def test_record_tool_names_its_file_after_the_gpu():
    spec = importlib.util.spec_from_file_location(
        "record_model_step", ROOT / "tools" / "record_model_step.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.short_gpu_name("NVIDIA H100 80GB HBM3") == "h100"
    assert tool.short_gpu_name("NVIDIA H200") == "h200"
    assert tool.short_gpu_name("NVIDIA A100-SXM4-80GB") == "a100"
    # The record names its file, not the folder of the machine that wrote it.
    assert tool.command_line(["--rounds", "15", "--out", "/tmp/x/model_step_h100.json"]) == (
        "python tools/record_model_step.py --rounds 15 --out model_step_h100.json"
    )
    assert tool.command_line(["--out=/tmp/y.json"]).endswith(" --out=y.json")


def synthetic_record(compiled_op: float, fused: float) -> dict:
    """A record of two groups: eager training and compiled inference, in ms."""

    def row(mode, step, variant, median):
        return dict(
            mode=mode,
            step=step,
            variant=variant,
            median=median,
            q1=median - 0.1,
            q3=median + 0.1,
            ms=[median],
        )

    own = model_record.OWN
    return {
        "device": "GPU X",
        "dtype": "bfloat16",
        "date": "2000-01-01",
        "missing": {"Quack": "ModuleNotFoundError: No module named 'quack'"},
        "failed": [],
        "results": [
            row("eager", "training step", own, 40.0),
            row("eager", "training step", "opguide.rms_norm (cpp)", 32.0),
            row("eager", "training step", "opguide.rms_norm (triton)", 36.0),
            row("compiled", "inference forward", own, 10.0),
            row("compiled", "inference forward", "opguide.rms_norm (cpp)", compiled_op),
            row("compiled", "inference forward", own + " + fusion pass (cpp)", fused),
        ],
    }


def test_record_rows_are_relative_to_the_models_own_norm():
    groups = model_record.record_rows(synthetic_record(10.5, 9.5))
    assert list(groups) == [("eager", "training step"), ("compiled", "inference forward")]
    cpp = groups["eager", "training step"][1]
    assert cpp["variant"] == "opguide.rms_norm (cpp)"
    assert cpp["ratio"] == pytest.approx(0.8)
    assert (cpp["ratio_q1"], cpp["ratio_q3"]) == pytest.approx((31.9 / 40, 32.1 / 40))
    lines = model_record.record_table(synthetic_record(10.5, 9.5))
    assert lines[1].split()[:2] == ["opguide.rms_norm", "(cpp)"]  # fastest first
    assert lines[1].endswith("-20.0%")
    assert max(map(len, lines)) <= 80


def test_record_findings_branch_on_the_record():
    # The operator loses under compile, the pass wins the gap back.
    said = model_record.record_findings(synthetic_record(10.5, 9.5))
    assert len(said) == 5
    assert "opguide.rms_norm (cpp) takes 32.00 ms" in said[0]
    assert "1.25x as fast, 20.0% less time" in said[0]
    assert "cpp 32.00 ms (-20.0%), triton 36.00 ms (-10.0%)" in said[0]
    assert "5.0% slower" in said[1] and "opaque" in said[1]
    assert "do not overlap" in said[1]
    assert "wins back the operator's gap" in said[2] and "-5.0%" in said[2]
    assert said[3].startswith("This record holds no row of the kernelized model")
    assert said[3].endswith("not recorded.")
    assert said[4].startswith("Not measured on that machine: Quack")
    # The pass recovers part of the gap; then none of it.
    assert (
        "part of the operator's gap"
        in model_record.record_findings(synthetic_record(10.5, 10.3))[2]
    )
    assert "does not win back" in model_record.record_findings(synthetic_record(10.5, 10.8))[2]
    # No gap to win back where the operator's difference is within the spread:
    # the pass is then set against the model's own norm alone.
    no_gap = model_record.record_findings(synthetic_record(10.05, 9.5))
    assert "no measurable difference" in no_gap[1]
    assert no_gap[2].endswith(
        "the step with the pass is faster than with the model's own norm. "
        "Each backend of the pass: cpp 9.50 ms (-5.0%)."
    )
    slower = model_record.record_findings(synthetic_record(10.05, 10.5))[2]
    assert "slower than with the model's own norm" in slower and "gap" not in slower
    # The operator ahead under compile, within the spread, and the pass too.
    close = model_record.record_findings(synthetic_record(9.95, 9.9))
    assert "9.95 ms: no measurable difference from the model's own norm (-0.5%" in close[1]
    assert "opaque" not in close[1]
    assert close[2].endswith("(their quartiles overlap, so the record cannot tell them apart): "
                             "no measurable difference. Each backend of the pass: cpp 9.90 ms "
                             "(-1.0%).")  # fmt: skip
    # The operator ahead under compile, beyond the spread.
    faster = model_record.record_findings(synthetic_record(9.5, 9.0))
    assert "5.0% faster than with the model's own norm" in faster[1]
    assert "the step with the pass is faster than with the model's own norm" in faster[2]


def test_plot_record_has_a_panel_per_group():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    fig = model_record.plot_record(synthetic_record(10.5, 9.5))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [
        "eager, training step",
        "compiled, inference forward",
    ]
    assert [t.get_text() for t in shown[0].get_yticklabels()][0] == model_record.OWN


def test_time_per_call_and_its_plot():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    count = {"a": 0, "b": 0}
    calls = {k: (lambda k=k: count.__setitem__(k, count[k] + 1)) for k in count}
    stats = model_step.time_per_call(calls, rounds=3, reps=4)
    assert count == {"a": (3 + 1) * 4, "b": (3 + 1) * 4}  # one warm-up round
    assert set(stats) == {"a", "b"} and all(s["median"] > 0 for s in stats.values())
    fig = model_step.plot_per_call(stats, "t")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["a", "b"]


def test_versus_branches_on_the_spread():
    stats = {
        "a": {"median": 10.0, "q1": 9.9, "q3": 10.1},
        "b": {"median": 8.0, "q1": 7.9, "q3": 8.1},
        "c": {"median": 10.05, "q1": 9.8, "q3": 10.3},
    }
    assert model_step.versus(stats, "b", "a") == (
        "b takes 20.0% less time per call than a; their quartiles do not overlap."
    )
    assert model_step.versus(stats, "c", "a").startswith("c takes 0.5% more time")
    assert "cannot tell them apart" in model_step.versus(stats, "c", "a")


def test_record_winners_say_no_measurable_difference_where_quartiles_overlap():
    said = model_record.record_winners(synthetic_record(10.5, 9.95))
    assert said[0] == (
        "Eager training step: opguide.rms_norm (cpp) is fastest, 32.00 ms; next "
        "opguide.rms_norm (triton), 12.5% more time: their quartiles do not overlap."
    )
    # 9.95 against 10.0, each +-0.1: the quartiles overlap.
    assert said[1] == (
        "Compiled inference forward: no measurable difference between the two fastest, "
        "model's own + fusion pass (cpp), 9.95 ms by the median, and model's own, "
        "0.5% more time."
    )
    assert "fastest," not in said[1].split("fastest, ", 1)[1]
    # Medians equal to the printed digit: a tie, neither named fastest.
    tie = model_record.record_winners(synthetic_record(10.5, 10.0))[1]
    assert tie == (
        "Compiled inference forward: model's own and model's own + fusion pass (cpp) tie, "
        "10.00 and 10.00 ms by the medians, 0.0% apart."
    )


def test_record_findings_read_the_kernelized_rows():
    record = synthetic_record(10.5, 9.5)
    row = dict(record["results"][3], variant="kernelized opguide.rms_norm (cpp)", median=10.02)
    record["results"].append(row)
    record["kernelized"] = {
        "from": "model_step_x.json",
        "support": {
            "OpguideRMSNorm": {"has_backward": True, "can_torch_compile": False, "why": {}},
            "OpguideRMSNormTriton": {"has_backward": False, "can_torch_compile": False},
        },
        "forwards": [
            dict(
                mode="compiled",
                step="inference forward",
                variant=row["variant"],
                forward="LlamaRMSNorm.forward",
            )
        ],
    }
    said = model_record.record_findings(record)
    assert said[3] == (
        "Compiled inference forward, kernelized opguide.rms_norm (cpp): its norms run "
        "LlamaRMSNorm.forward; 10.02 ms, +0.2% from the model's own norm "
        "(no measurable difference)."
    )
    assert said[4].startswith(
        "The kernelized layers declared the modes that this run was given "
        "(--support-from model_step_x.json): OpguideRMSNorm: has_backward; "
        "OpguideRMSNormTriton: no flag. "
        "This record's own numbers give other flags ("
    )
    # A kernelized row that runs the model's own norm and still differs
    # measurably: the sentence says the norm does not explain it.
    apart = dict(row, median=10.5, q1=10.4, q3=10.6)
    record["results"][-1] = apart
    # Without --support-from, the tool read the flags from the record it wrote over.
    record["command"] = "python tools/record_model_step.py --out model_step_x.json"
    assert "(read from model_step_x.json)" in model_record.record_findings(record)[4]
    record["command"] += " --support-from model_step_x.json"
    assert "(--support-from model_step_x.json)" in model_record.record_findings(record)[4]
    said_apart = model_record.record_findings(record)[3]
    assert "their quartiles do not overlap" in said_apart
    assert said_apart.endswith("the record does not say what does.")
    record["results"][-1] = row
    # A run given no support record: nothing to decide from.
    record["kernelized"]["from"] = None
    assert model_record.record_findings(record)[4].startswith("This run was given no support")
    # The names are whole in the table, however long.
    table = model_record.record_table(record)
    assert any("kernelized opguide.rms_norm (cpp) " in line for line in table)
    assert max(map(len, table)) <= 80
