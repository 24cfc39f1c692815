"""Tests of ``opguide.experimental.inductor_fusion``: torch.compile calls the fused
residual-add + RMSNorm where a model adds and then normalises.

For each form the norm takes (transformers' ``LlamaRMSNorm`` as written,
``F.rms_norm``, ``opguide.rms_norm``), in training and in inference, a small
model compiled with the pass must call ``opguide::fused_add_rms_norm_`` in its
generated code, write in place (no copy of an operand), and give the outputs
and gradients of the uncompiled model. Places where writing would need a copy
must be left alone. A tiny Hugging Face Llama runs the same checks when
``transformers`` is installed.

Every compile here runs the pass: the Inductor and AOTAutograd caches are off,
since a graph served from a cache runs no pass.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import ReinplaceCounters
from torch._inductor.utils import run_and_get_code

import opguide
from opguide.experimental import inductor_fusion

FUSED_CALL = "torch.ops.opguide.fused_add_rms_norm_.default("
EPS = 1e-5


@pytest.fixture(autouse=True)
def fresh_compiles():
    torch._dynamo.reset()
    inductor_fusion.reset_replacements()
    ReinplaceCounters.clear()
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        yield
    torch._dynamo.reset()


def test_private_apis_are_present():
    assert inductor_fusion.missing_private_apis() == [], (
        "torch lacks private APIs the experiment needs"
    )


def test_bad_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be one of"):
        inductor_fusion.compile_options(backend="cuda")


def llama_norm(h, weight, eps):
    # transformers' LlamaRMSNorm.forward, as that file writes it.
    input_dtype = h.dtype
    h = h.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


NORMS = {
    "llama": llama_norm,
    "functional": lambda h, w, eps: F.rms_norm(h, (h.shape[-1],), w, eps),
    # The operator itself in the graph: the pass rewrites an add and opguide's operator.
    "opguide": lambda h, w, eps: opguide.rms_norm(h, w, eps, compiled="kernel"),
}


class Stack(torch.nn.Module):
    """Blocks of ``residual = residual + proj(x); x = norm(residual)``."""

    def __init__(self, n: int, blocks: int, norm: str):
        super().__init__()
        self.norm = NORMS[norm]
        self.projs = torch.nn.ModuleList(torch.nn.Linear(n, n) for _ in range(blocks))
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.rand(n) + 0.5) for _ in range(blocks)
        )

    def forward(self, x):
        residual = x
        for proj, weight in zip(self.projs, self.weights, strict=True):
            residual = residual + proj(x)
            x = self.norm(residual, weight, EPS)
        return x


def missed_in_place_writes() -> int:
    # Inductor counts the operands of functionalized mutating operators that it
    # had to copy instead of writing in place; the pass emits the only ones.
    return ReinplaceCounters._values.get("missed_tensors_AUTO_FUNC_V1", 0)


def run_compiled(model, step, backend="cpp"):
    compiled = torch.compile(model, options=inductor_fusion.compile_options(backend))
    result, code = run_and_get_code(step, compiled)
    return result, "\n".join(code)


def train_step(model, x):
    model.zero_grad(set_to_none=True)
    out = model(x)
    # Weights every output element differently, so a wrong row or column shows.
    probe = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
    (out * probe).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return out.detach(), [x.grad.clone(), *grads]


def inputs(dtype=torch.float32, requires_grad=False):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 32, generator=gen).to(dtype)
    return x.requires_grad_(requires_grad)


# float32: the fused kernel sums and normalises in float32 as Inductor's code
# does, in another order; differences are a few float32 roundings of values
# of order 1, accumulated over 32 elements, well inside 1e-5.
F32 = dict(atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", list(NORMS))
def test_inference_calls_the_fused_operator(norm):
    torch.manual_seed(0)
    model = Stack(32, blocks=2, norm=norm)
    x = inputs()
    with torch.no_grad():
        expected = model(x)
        out, code = run_compiled(model, lambda m: m(x))
    # Both blocks: the first adds into proj's fresh output (x is read again),
    # the second into proj's output as well.
    assert inductor_fusion.replacements() == 2
    assert code.count(FUSED_CALL) == 2
    assert missed_in_place_writes() == 0
    torch.testing.assert_close(out, expected, **F32)


@pytest.mark.parametrize("norm", list(NORMS))
def test_training_calls_the_fused_operator_and_gradients_match(norm):
    torch.manual_seed(0)
    model = Stack(32, blocks=2, norm=norm)
    x = inputs(requires_grad=True)
    expected_out, expected_grads = train_step(model, x)
    x.grad = None
    (out, grads), code = run_compiled(model, lambda m: train_step(m, x))
    replaced = inductor_fusion.replacements()
    # Which sums the partitioner keeps for the backward (and so which the pass
    # must leave alone) is its choice; at least one block's is free.
    assert 1 <= replaced <= 2
    assert code.count(FUSED_CALL) == replaced
    assert missed_in_place_writes() == 0
    torch.testing.assert_close(out, expected_out, **F32)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, **F32)


def test_sums_that_would_need_a_copy_are_left_alone():
    # Both operands are inputs of the compiled function: writing into either
    # would change the caller's tensor, so the fused op would need a copy.
    def add_then_norm(x, residual, weight):
        return llama_norm(x + residual, weight, EPS)

    x, residual = inputs(), inputs() * 2
    weight = torch.rand(32) + 0.5
    compiled = torch.compile(add_then_norm, options=inductor_fusion.compile_options())
    out, code = run_and_get_code(compiled, x, residual, weight)
    assert inductor_fusion.replacements() == 0
    assert FUSED_CALL not in "\n".join(code)
    torch.testing.assert_close(out, add_then_norm(x, residual, weight), **F32)


def test_bfloat16_differs_by_at_most_one_rounding():
    # The fused operator rounds the normalised row once, after the weight;
    # LlamaRMSNorm rounds before the weight too. On values of order 1 the two
    # differ by at most about one bfloat16 step (2**-8 relative).
    torch.manual_seed(0)
    model = Stack(32, blocks=1, norm="llama").to(torch.bfloat16)
    x = inputs(torch.bfloat16)
    with torch.no_grad():
        expected = model(x)
        out, code = run_compiled(model, lambda m: m(x))
    assert code.count(FUSED_CALL) == 1
    step = 2.0**-8
    torch.testing.assert_close(out, expected, atol=2 * step, rtol=2 * step)


def test_the_context_manager_turns_the_pass_on_for_the_first_call():
    torch.manual_seed(0)
    model = Stack(32, blocks=1, norm="opguide")
    compiled = torch.compile(model)
    x = inputs()
    with torch.no_grad(), inductor_fusion.enabled():
        out, code = run_and_get_code(compiled, x)
    assert "\n".join(code).count(FUSED_CALL) == 1
    torch.testing.assert_close(out, model(x).detach(), **F32)


def test_triton_backend():
    from opguide.backends import TRITON_INSTALLED

    if not TRITON_INSTALLED:
        pytest.skip("triton is not installed")
    from opguide.triton import INTERPRET

    if not (INTERPRET or torch.cuda.is_available()):
        pytest.skip("no GPU, and Triton's interpreter is off (set TRITON_INTERPRET=1)")
    device = "cuda" if torch.cuda.is_available() and not INTERPRET else "cpu"
    torch.manual_seed(0)
    model = Stack(32, blocks=1, norm="llama").to(device)
    x = inputs().to(device)
    with torch.no_grad():
        expected = model(x)
        out, code = run_compiled(model, lambda m: m(x), backend="triton")
    assert "torch.ops.opguide.fused_add_rms_norm_triton_.default(" in code
    torch.testing.assert_close(out, expected, **F32)


def tiny_llama(layers: int):
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed: the Llama case needs it"
    )
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


LAYERS = 1
# Every norm but the first layer's input norm follows a sum: two per layer.
LLAMA_SUMS = 2 * LAYERS


def llama_ids():
    return torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))


def test_hugging_face_llama_training():
    model = tiny_llama(LAYERS)
    ids = llama_ids()

    def step(m):
        model.zero_grad(set_to_none=True)
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    expected_loss, expected_grads = step(model)
    (loss, grads), code = run_compiled(model, step)
    replaced = inductor_fusion.replacements()
    assert 1 <= replaced <= LLAMA_SUMS
    assert code.count(FUSED_CALL) == replaced
    assert missed_in_place_writes() == 0
    torch.testing.assert_close(loss, expected_loss, **F32)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, **F32)


def test_hugging_face_llama_inference():
    model = tiny_llama(LAYERS)
    ids = llama_ids()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        logits, code = run_compiled(model, lambda m: m(input_ids=ids).logits)
    assert inductor_fusion.replacements() == LLAMA_SUMS
    assert code.count(FUSED_CALL) == LLAMA_SUMS
    assert missed_in_place_writes() == 0
    torch.testing.assert_close(logits, expected, **F32)
