"""A Hugging Face Llama with its RMSNorm swapped, and a model step timed fairly.

Step 20 runs this on the CPU with a small model; ``tools/record_model_step.py``
runs it on a GPU with a larger one and records the result in
``docs/recorded/model_step_<gpu>.json``, which step 20 reads
(:mod:`guidekit.model_record`). :mod:`guidekit.model_swap` makes the same swap
the way Hugging Face users make it, through the ``kernels`` package.

* :data:`NORMS` and :func:`use_norm`: every ``LlamaRMSNorm`` of a model given
  another ``forward`` by hand, for the peers that no kernel repository holds;
* :func:`llama`: a Llama with random weights built from a config (no download);
* :func:`training_step` and :func:`inference_forward`: the two steps timed;
* :func:`time_interleaved`: the variants timed in turns, round after round, so
  that a machine that slows down or speeds up does so for all of them;
* :func:`summary`, :func:`compare` and :func:`spread`: a median and its
  quartiles, two of them compared, and the words for whether they overlap;
* :func:`time_per_call`, :func:`versus` and :func:`plot_per_call`: short
  calls timed, compared in a sentence, and drawn.
"""

from __future__ import annotations

import statistics
import time
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

import opguide

#: Step 20's model and tokens, small enough to train on a CPU
#: (``tools/record_model_step.py --small`` runs the same).
SMALL_CONFIG = dict(
    vocab_size=512,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)
SMALL_BATCH, SMALL_SEQ = 2, 128


def f_rms_norm(self, hidden_states):
    w, eps = self.weight, self.variance_epsilon
    return F.rms_norm(hidden_states, w.shape, w, eps)


def opguide_cpp(self, hidden_states):
    w, eps = self.weight, self.variance_epsilon
    return opguide.rms_norm(hidden_states, w, eps, backend="cpp")


def opguide_triton(self, hidden_states):
    w, eps = self.weight, self.variance_epsilon
    return opguide.rms_norm(hidden_states, w, eps, backend="triton")


def _liger():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    def liger(self, hidden_states):
        # casting_mode "llama": LlamaRMSNorm's roundings; not in place.
        return LigerRMSNormFunction.apply(
            hidden_states, self.weight, self.variance_epsilon, 0.0, "llama", False
        )

    return liger


def _quack():
    from quack.rmsnorm import rmsnorm

    def quack(self, hidden_states):
        # Quack's kernels take rows: (tokens, hidden).
        rows = hidden_states.reshape(-1, hidden_states.shape[-1])
        out = rmsnorm(rows, self.weight, eps=self.variance_epsilon)
        return out.view(hidden_states.shape)

    return quack


#: The norms a model can be given, by name. Each name maps to the ``forward``
#: that replaces ``LlamaRMSNorm.forward`` (``None`` for the model's own), or to
#: a function that imports a peer library and returns its ``forward``.
NORMS: dict[str, Callable | None] = {
    "model's own": None,
    "F.rms_norm": f_rms_norm,
    "opguide (cpp)": opguide_cpp,
    "opguide (triton)": opguide_triton,
}
PEERS: dict[str, Callable[[], Callable]] = {"Liger": _liger, "Quack": _quack}


def use_norm(model: torch.nn.Module, forward) -> int:
    """Gives every LlamaRMSNorm of ``model`` another ``forward(self, hidden_states)``.

    Args:
        model: a transformers model; it is changed in place.
        forward: the new ``forward``, bound to each norm module.

    Returns:
        How many modules were changed.
    """
    changed = 0
    for module in model.modules():
        if type(module).__name__ == "LlamaRMSNorm":
            module.forward = types.MethodType(forward, module)
            changed += 1
    return changed


def peer_norms() -> tuple[dict[str, Callable], dict[str, str]]:
    """The peer libraries' norms that import here, and why each other one did not.

    Returns:
        ``({name: forward}, {name: reason})``.
    """
    found, missing = {}, {}
    for name, load in PEERS.items():
        try:
            found[name] = load()
        except Exception as err:  # noqa: BLE001  (any import failure leaves it out)
            lines = str(err).strip().splitlines()
            missing[name] = f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
    return found, missing


def llama(config: dict, dtype: torch.dtype, device: str, seed: int = 0):
    """A ``LlamaForCausalLM`` with random weights, built from ``config`` (no download).

    Args:
        config: keyword arguments of ``transformers.LlamaConfig``.
        dtype, device: where its weights live.
        seed: the seed of the weights: one seed, the same weights.

    Returns:
        The model, in training mode.

    Raises:
        ImportError: ``transformers`` is not installed.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**config)).to(device=device, dtype=dtype)


def token_ids(config: dict, batch: int, seq: int, device: str) -> torch.Tensor:
    """Random token ids, shape ``(batch, seq)``, the same on every call."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config["vocab_size"], (batch, seq), generator=gen)
    return ids.to(device)


def training_step(model, ids):
    """Forward, the language-model loss, and backward; no optimizer step.

    Returns the loss, detached.
    """
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach()


def inference_forward(model, ids):
    """The forward alone, without autograd. Returns the logits."""
    with torch.no_grad():
        return model(input_ids=ids).logits


def time_interleaved(
    calls: dict,
    rounds: int,
    sync: Callable[[], None] = lambda: None,
    warmup: int = 1,
) -> dict:
    """Times each call once per round, in an order that turns each round.

    Args:
        calls: ``{name: call}``; each call runs once per round.
        rounds: how many rounds are timed.
        sync: waits for queued work (``torch.cuda.synchronize`` on a GPU).
        warmup: rounds run first and not timed.

    Returns:
        ``{name: [milliseconds, one per timed round]}``.

    Raises:
        ValueError: ``rounds`` is less than 1.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    names = list(calls)
    for _ in range(warmup):
        for name in names:
            calls[name]()
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sync()
            start = time.perf_counter()
            calls[name]()
            sync()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def summary(times: list[float]) -> dict[str, float]:
    """``{"median", "q1", "q3"}`` of a list of times (one time: all three equal it)."""
    q1, median, q3 = statistics.quantiles(times, n=4) if len(times) > 1 else times * 3
    return {"median": median, "q1": q1, "q3": q3}


def compare(a: dict, b: dict) -> tuple[float, bool]:
    """``a``'s median as a percent change from ``b``'s, and whether their quartiles overlap.

    Args:
        a, b: ``{"median", "q1", "q3"}``, as :func:`summary` returns.

    Returns:
        ``(change, overlap)``: ``change`` is negative where ``a`` takes less time.
    """
    change = (a["median"] / b["median"] - 1) * 100
    return change, not (a["q3"] < b["q1"] or b["q3"] < a["q1"])


def spread(overlap: bool, source: str = "the record") -> str:
    """Words for two spreads: ``overlap`` from :func:`compare`; ``source``, what measured them."""
    if overlap:
        return f"their quartiles overlap, so {source} cannot tell them apart"
    return "their quartiles do not overlap"


def time_per_call(
    calls: dict, rounds: int, sync: Callable[[], None] = lambda: None, reps: int = 50
) -> dict[str, dict[str, float]]:
    """Microseconds per call of short calls, each timed ``reps`` times in a row, interleaved.

    Args:
        calls: ``{name: call}``.
        rounds: timed rounds (:func:`time_interleaved`).
        sync: waits for queued work (``torch.cuda.synchronize`` on a GPU).
        reps: calls per timing, so that a timing is much longer than the timer's step.

    Returns:
        ``{name: {"median", "q1", "q3"}}`` in microseconds per call.
    """

    def repeated(call):
        def run():
            for _ in range(reps):
                call()

        return run

    times = time_interleaved({k: repeated(c) for k, c in calls.items()}, rounds, sync=sync)
    return {k: summary([t * 1e3 / reps for t in v]) for k, v in times.items()}


def plot_per_call(stats: dict[str, dict[str, float]], title: str):
    """A bar per name: the median time per call, the quartiles as error bars.

    Returns:
        The matplotlib figure (white, dark text).
    """
    import matplotlib.pyplot as plt

    names = list(stats)
    med = [stats[n]["median"] for n in names]
    err = [[m - stats[n]["q1"] for n, m in zip(names, med, strict=True)],
           [stats[n]["q3"] - m for n, m in zip(names, med, strict=True)]]  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.4 * len(names)), facecolor="white")
    ax.set_facecolor("white")
    colours = ["#7f7f7f"] + ["#1f77b4"] * (len(names) - 1)
    ax.barh(names, med, xerr=err, color=colours, capsize=3, height=0.6)
    ax.invert_yaxis()
    ax.set_xlabel("us per call, median and quartiles")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def versus(stats: dict[str, dict[str, float]], new: str, base: str) -> str:
    """A sentence: ``new``'s median time against ``base``'s, and whether the spread separates them.

    Args:
        stats: ``{name: {"median", "q1", "q3"}}``, as :func:`time_per_call` returns.
        new, base: two of its names.
    """
    change, overlap = compare(stats[new], stats[base])
    more = "less" if change < 0 else "more"
    said = f"{new} takes {abs(change):.1f}% {more} time per call than {base}; "
    return said + spread(overlap, "this run") + "."
