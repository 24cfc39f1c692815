"""Tests of ``guidekit.model_swap``: opguide's RMSNorm put into a Llama by ``kernels.kernelize``.

The layers declare what a record measured; ``kernelize`` must then run
opguide's operator in the modes they declare and the model's own code in the
others, with the same outputs and gradients as the model left alone.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from guidekit import model_record, model_step, model_swap

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
NORMS = 2 * 2 + 1  # two per layer and the final one


def row(mode, step, variant, median, half=0.1):
    return dict(mode=mode, step=step, variant=variant, median=median, q1=median - half,
                q3=median + half, ms=[median])  # fmt: skip


def test_measured_support_declares_only_what_the_record_shows_faster():
    own = model_record.OWN
    cpp, triton = model_swap.LAYERS["OpguideRMSNorm"], model_swap.LAYERS["OpguideRMSNormTriton"]
    record = {
        "results": [
            row("eager", "training step", own, 40.0),
            row("eager", "training step", cpp, 32.0),
            row("eager", "training step", triton, 39.95),  # within the spread
            row("compiled", "training step", own, 30.0),
            row("compiled", "training step", cpp, 29.0),
            row("compiled", "training step", triton, 29.0),
            row("compiled", "inference forward", own, 10.0),
            row("compiled", "inference forward", cpp, 9.0),
            # the Triton route's compiled inference is not recorded
        ]
    }
    support = model_swap.measured_support(record)
    assert support["OpguideRMSNorm"]["has_backward"] is True
    assert support["OpguideRMSNorm"]["can_torch_compile"] is True
    assert support["OpguideRMSNormTriton"]["has_backward"] is False
    assert "no measurable difference" in support["OpguideRMSNormTriton"]["why"]["has_backward"]
    assert support["OpguideRMSNormTriton"]["can_torch_compile"] is False
    why = support["OpguideRMSNormTriton"]["why"]["can_torch_compile"]
    assert why.startswith("compiled training step 29.00 ms against 30.00 ms (-3.3%): faster")
    assert why.endswith("compiled inference forward: not recorded")
    # Slower: not declared.
    record["results"][4] = row("compiled", "training step", cpp, 31.0)
    slower = model_swap.measured_support(record)["OpguideRMSNorm"]
    assert slower["can_torch_compile"] is False and "slower" in slower["why"]["can_torch_compile"]
    # No record: nothing declared.
    for layer in model_swap.measured_support(None).values():
        assert not layer["has_backward"] and not layer["can_torch_compile"]


def test_measured_support_of_the_recorded_file_follows_its_rows():
    found = sorted((ROOT / "docs" / "recorded").glob("model_step_*.json"))
    if not found:
        pytest.skip("no GPU record of step 20")
    path = found[-1]
    record = json.loads(path.read_text())
    groups = model_record.record_rows(record)
    support = model_swap.measured_support(record)
    for layer, variant in model_swap.LAYERS.items():
        for flag, decide in model_swap.FLAGS.items():
            faster = []
            for key in decide:
                rows = {r["variant"]: r for r in groups.get(key, [])}
                if variant not in rows:
                    faster.append(False)
                    continue
                mine, own = rows[variant], rows[model_record.OWN]
                faster.append(mine["q3"] < own["q1"])
            assert support[layer][flag] is all(faster), (layer, flag)


@pytest.fixture(scope="module")
def kernels_mode():
    pytest.importorskip("transformers", reason="transformers is not installed")
    kernels = pytest.importorskip("kernels", reason="kernels is not installed")
    return kernels.Mode


@pytest.fixture(scope="module")
def base():
    pytest.importorskip("transformers", reason="transformers is not installed")
    return model_step.llama(TINY, torch.float32, "cpu")


def run_step(model, ids):
    """A training step's loss, logits and gradients, and the opguide calls it made."""
    model.zero_grad(set_to_none=True)
    with model_swap.OpguideCalls() as calls:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return out.loss.detach(), out.logits.detach(), grads, calls


SUPPORTS = {
    "training, not compile": {"has_backward": True, "can_torch_compile": False},
    "compile, not training": {"has_backward": False, "can_torch_compile": True},
    "every mode": {"has_backward": True, "can_torch_compile": True},
}


@pytest.mark.parametrize("declared", list(SUPPORTS))
@pytest.mark.parametrize("mode", ["INFERENCE", "TRAINING", "INFERENCE|TORCH_COMPILE",
                                  "TRAINING|TORCH_COMPILE"])  # fmt: skip
def test_kernelized_model_runs_opguide_in_the_declared_modes_only(
    kernels_mode, base, tmp_path_factory, monkeypatch, declared, mode
):
    import huggingface_hub.constants

    # A local repository needs no network; the Hub stays out of reach.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    flags = SUPPORTS[declared]
    folder = tmp_path_factory.mktemp("repositories")
    repo = model_swap.layer_repository(folder, {"OpguideRMSNorm": flags})
    kernels_flag = kernels_mode._NONE
    for part in mode.split("|"):
        kernels_flag |= getattr(kernels_mode, part)
    model = model_swap.kernelized(copy.deepcopy(base), repo, "OpguideRMSNorm", kernels_flag)

    declared_here = (flags["has_backward"] or "TRAINING" not in mode) and (
        flags["can_torch_compile"] or "TORCH_COMPILE" not in mode
    )
    forward = "OpguideRMSNorm.forward" if declared_here else "LlamaRMSNorm.forward"
    assert model_swap.norm_forwards(model) == {forward: NORMS}

    ids = model_step.token_ids(TINY, 2, 8, "cpu")
    loss, logits, grads, calls = run_step(model, ids)
    want_loss, want_logits, want_grads, own_calls = run_step(copy.deepcopy(base), ids)
    assert own_calls.total == 0
    if declared_here:
        # An operator for the forward and one for the backward, once per norm
        # (opguide::rms_norm_forward and opguide::rms_norm_backward).
        assert len(calls.counts) == 2 and set(calls.counts.values()) == {NORMS}
        assert sum("backward" in name for name in calls.counts) == 1
    else:
        assert calls.total == 0
    torch.testing.assert_close(loss, want_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits, want_logits, atol=1e-5, rtol=1e-5)
    assert grads.keys() == want_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, want_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_layer_repository_keeps_one_folder_per_support(tmp_path):
    a = model_swap.layer_repository(tmp_path, model_swap.EVERY_MODE)
    b = model_swap.layer_repository(tmp_path, model_swap.measured_support(None))
    assert a != b and a.parent == b.parent == tmp_path
    variant = a / "build" / "torch-universal"
    assert sorted(p.name for p in variant.iterdir()) == [
        "__init__.py",
        "layers.py",
        "metadata.json",
        "support.json",
    ]
    assert json.loads((variant / "support.json").read_text())["OpguideRMSNorm"] == {
        "has_backward": True,
        "can_torch_compile": True,
    }


def test_record_tool_kernelizes_each_group_for_its_mode(kernels_mode, base, tmp_path, monkeypatch):
    import importlib.util

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    spec = importlib.util.spec_from_file_location(
        "record_model_step", ROOT / "tools" / "record_model_step.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    found, missing = tool.variants("cpu")
    name = "kernelized opguide.rms_norm (cpp)"
    assert found[name] == ("OpguideRMSNorm", "kernelize")
    # On the CPU the Triton route is not measured, nor is its kernelized model.
    assert "kernelized opguide.rms_norm (triton)" in missing
    support = {"OpguideRMSNorm": {"has_backward": False, "can_torch_compile": True}}
    forwards = []
    groups = tool.group_models({name: found[name]}, base, support, forwards)
    assert set(groups) == set(tool.KERNELS_MODES)
    assert all(list(models) == [name] for models in groups.values())
    runs = {(f["mode"], f["step"]): f["forward"] for f in forwards}
    assert runs == {
        ("eager", "training step"): "LlamaRMSNorm.forward",
        ("eager", "inference forward"): "OpguideRMSNorm.forward",
        ("compiled", "training step"): "LlamaRMSNorm.forward",
        ("compiled", "inference forward"): "OpguideRMSNorm.forward",
    }
