"""Tests of ``guidekit.model_step`` (step 20 and ``tools/record_model_step.py``).

The norm swap must reach every ``LlamaRMSNorm`` and keep the model's logits;
the timer must give every call its turn in every position; the tool must name
its output after the GPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from guidekit import model_step

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
