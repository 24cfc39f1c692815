"""Tests of ``guidekit.model_swap_silu_and_mul``: ``opguide.silu_and_mul`` put into a
Llama's MLPs by ``kernels.kernelize``.

The swapped model must compute the model's own outputs and gradients, run the
operator in the modes the layer declares and the model's own MLP in the
others, and leave the norms' ``forward`` as it was.
"""

from __future__ import annotations

import copy

import pytest
import torch

from guidekit import model_step, model_swap
from guidekit import model_swap_silu_and_mul as mlp_swap

pytestmark = pytest.mark.cpu
kernels = pytest.importorskip("kernels")
pytest.importorskip("transformers")

TINY = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=32,
)
LAYER_FORWARD = f"{mlp_swap.LAYER}.forward"


@pytest.fixture(scope="module")
def base():
    return model_step.llama(TINY, torch.float32, "cpu")


@pytest.fixture(scope="module")
def ids():
    return model_step.token_ids(TINY, 2, 16, "cpu")


@pytest.fixture(scope="module")
def every_mode(tmp_path_factory):
    return mlp_swap.layer_repository(tmp_path_factory.mktemp("mlp"), True, True)


def test_swapped_mlps_give_the_models_loss_gradients_and_logits(base, ids, every_mode):
    own = copy.deepcopy(base)
    model = mlp_swap.kernelized(copy.deepcopy(base), every_mode, kernels.Mode.TRAINING)
    assert mlp_swap.mlp_forwards(model) == {LAYER_FORWARD: TINY["num_hidden_layers"]}
    with model_swap.OpguideCalls() as counted:
        loss = model_step.training_step(model, ids)
    layers = TINY["num_hidden_layers"]
    assert counted.counts == {
        "opguide::silu_and_mul": layers,
        "opguide::silu_and_mul_backward": layers,
    }
    torch.testing.assert_close(loss, model_step.training_step(own, ids), atol=1e-6, rtol=1e-6)
    grads = dict(own.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, atol=1e-6, rtol=1e-5, msg=name)
    want = model_step.inference_forward(own, ids)
    torch.testing.assert_close(model_step.inference_forward(model, ids), want)


def test_a_mode_the_layer_does_not_declare_keeps_the_models_own_mlp(tmp_path, base, ids):
    none_declared = mlp_swap.layer_repository(tmp_path, False, False)
    model = mlp_swap.kernelized(copy.deepcopy(base), none_declared, kernels.Mode.TRAINING)
    assert mlp_swap.mlp_forwards(model) == {"LlamaMLP.forward": TINY["num_hidden_layers"]}
    with model_swap.OpguideCalls() as counted:
        model_step.training_step(model, ids)
    assert counted.total == 0
    # Eager inference: kernels has no flag for it, and the layer runs.
    mlp_swap.kernelized(model, none_declared, kernels.Mode.INFERENCE)
    assert mlp_swap.mlp_forwards(model) == {LAYER_FORWARD: TINY["num_hidden_layers"]}


def test_the_norms_keep_their_forward(tmp_path, base, ids, every_mode):
    norms = model_swap.layer_repository(tmp_path, model_swap.EVERY_MODE)
    model = copy.deepcopy(base)
    model_swap.kernelized(model, norms, "OpguideRMSNorm", kernels.Mode.TRAINING)
    before = model_swap.norm_forwards(model)
    assert set(before) == {"OpguideRMSNorm.forward"}
    mlp_swap.kernelized(model, every_mode, kernels.Mode.TRAINING)
    assert model_swap.norm_forwards(model) == before
    with model_swap.OpguideCalls() as counted:
        loss = model_step.training_step(model, ids)
    assert counted.counts["opguide::silu_and_mul"] == TINY["num_hidden_layers"]
    assert any(name.startswith("opguide::rms_norm") for name in counted.counts)
    torch.testing.assert_close(loss, model_step.training_step(copy.deepcopy(base), ids))


def test_compiled_inference_calls_the_operator(base, ids, every_mode):
    from torch._inductor.utils import run_and_get_code

    mode = kernels.Mode.INFERENCE | kernels.Mode.TORCH_COMPILE
    model = mlp_swap.kernelized(copy.deepcopy(base), every_mode, mode)
    got, code = run_and_get_code(model_step.inference_forward, torch.compile(model), ids)
    calls = "\n".join(code).count("torch.ops.opguide.silu_and_mul.default(")
    assert calls == TINY["num_hidden_layers"]
    torch.testing.assert_close(got, model_step.inference_forward(base, ids), atol=1e-5, rtol=1e-5)


def test_an_activation_other_than_silu_is_refused(every_mode):
    model = model_step.llama(dict(TINY, hidden_act="gelu"), torch.float32, "cpu")
    with pytest.raises(ValueError, match="hidden_act='silu'.*'gelu'"):
        mlp_swap.kernelized(model, every_mode, kernels.Mode.INFERENCE)
    with pytest.raises(ValueError, match="no LlamaMLP"):
        mlp_swap.kernelized(torch.nn.Linear(2, 2), every_mode, kernels.Mode.INFERENCE)
