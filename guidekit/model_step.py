"""A Hugging Face Llama with its RMSNorm swapped, and a model step timed fairly.

Step 20 runs this on the CPU with a small model; ``tools/record_model_step.py``
runs it on a GPU with a larger one and records the result in
``docs/recorded/model_step_<gpu>.json``, which step 20 reads.

* :data:`NORMS` and :func:`use_norm`: every ``LlamaRMSNorm`` of a model given
  another ``forward``, without editing the model's code;
* :func:`llama`: a Llama with random weights built from a config (no download);
* :func:`training_step` and :func:`inference_forward`: the two steps timed;
* :func:`time_interleaved`: the variants timed in turns, round after round, so
  that a machine that slows down or speeds up does so for all of them;
* :func:`record_rows`, :func:`record_table`, :func:`record_findings` and
  :func:`plot_record`: a GPU record read, as ratios to the model's own norm,
  a table, sentences computed from it, and a plot;
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


#: The norms a model can be given: a name, then the ``forward`` that replaces
#: ``LlamaRMSNorm.forward`` (``None``: the model's own), or a function that
#: imports a peer library and returns its ``forward``.
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


# The GPU record: docs/recorded/model_step_<gpu>.json, written by
# tools/record_model_step.py and read by step 20.

OWN = "model's own"
OPGUIDE = "opguide.rms_norm"
FUSION_PASS = "fusion pass"


def record_rows(record: dict) -> dict[tuple[str, str], list[dict]]:
    """A record's results by ``(mode, step)``, each relative to the model's own norm.

    Args:
        record: a ``model_step_<gpu>.json`` read with :func:`json.loads`.

    Returns:
        ``{(mode, step): [row, ...]}`` in the record's order; each row has
        ``variant``, ``median``, ``q1``, ``q3`` (milliseconds) and ``ratio``,
        ``ratio_q1``, ``ratio_q3``: those divided by the median of the model's
        own norm in the same group (``None`` where the group has no such row).
    """
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in record["results"]:
        keep = {k: row[k] for k in ("variant", "median", "q1", "q3")}
        groups.setdefault((row["mode"], row["step"]), []).append(keep)
    for rows in groups.values():
        own = next((r["median"] for r in rows if r["variant"] == OWN), None)
        for r in rows:
            for key in ("median", "q1", "q3"):
                name = "ratio" if key == "median" else f"ratio_{key}"
                r[name] = None if own is None else r[key] / own
    return groups


def record_table(record: dict) -> list[str]:
    """The record as lines of text: each group's variants, fastest first, in ms.

    Returns:
        Lines of at most 80 columns: per group a heading, then per variant its
        median, quartiles and change from the model's own norm.
    """
    lines = []
    for (mode, step), rows in record_rows(record).items():
        lines.append(f"{mode} {step}: ms, median (quartiles), change from the model's own")
        for r in sorted(rows, key=lambda r: r["median"]):
            spread = f"({r['q1']:.2f}-{r['q3']:.2f})"
            change = "" if r["ratio"] is None else f"{(r['ratio'] - 1) * 100:+6.1f}%"
            lines.append(f"  {r['variant'][:34]:34} {r['median']:7.2f} {spread:13} {change}")
    return lines


def _compare(a: dict, b: dict) -> tuple[float, bool]:
    """``a``'s median as a percent change from ``b``'s, and whether their quartiles overlap."""
    change = (a["median"] / b["median"] - 1) * 100
    return change, not (a["q3"] < b["q1"] or b["q3"] < a["q1"])


def _backend(variant: str) -> str:
    """``"opguide.rms_norm (cpp)"`` -> ``"cpp"``: the last parenthesis, or the name."""
    inside = variant.rpartition("(")[2].rstrip(")")
    return inside if "(" in variant else variant


def _spread(overlap: bool, source: str = "the record") -> str:
    if overlap:
        return f"their quartiles overlap, so {source} cannot tell them apart"
    return "their quartiles do not overlap"


def record_findings(record: dict) -> list[str]:
    """What a record says, as sentences computed from it.

    The sentences cover: opguide's operator against the model's own norm in
    the eager training step (the fastest backend, then each); the plain
    operator under ``torch.compile``, training and inference; the model's own
    norm with the fusion pass, against the same; the variants not measured.

    Args:
        record: a ``model_step_<gpu>.json`` read with :func:`json.loads`.

    Returns:
        The sentences, in that order; a comparison whose rows are absent
        from the record is left out.
    """
    groups = record_rows(record)
    said = []

    def pick(mode, step, prefix):
        return [r for r in groups.get((mode, step), []) if r["variant"].startswith(prefix)]

    def own(mode, step):
        return next((r for r in groups.get((mode, step), []) if r["variant"] == OWN), None)

    def each(rows, base):
        return ", ".join(
            f"{_backend(r['variant'])} {r['median']:.2f} ms ({_compare(r, base)[0]:+.1f}%)"
            for r in rows
        )

    base, ops = own("eager", "training step"), pick("eager", "training step", OPGUIDE)
    if base and ops:
        best = min(ops, key=lambda r: r["median"])
        change, overlap = _compare(best, base)
        less = "less" if change < 0 else "more"
        said.append(
            f"Eager, the training step with {best['variant']} takes {best['median']:.2f} ms "
            f"against {base['median']:.2f} ms with the model's own norm: "
            f"{base['median'] / best['median']:.2f}x as fast, {abs(change):.1f}% {less} "
            f"time; {_spread(overlap)}. Each backend: {each(ops, base)}."
        )
    for step in ("training step", "inference forward"):
        base, ops = own("compiled", step), pick("compiled", step, OPGUIDE)
        if not (base and ops):
            continue
        best = min(ops, key=lambda r: r["median"])
        change, overlap = _compare(best, base)
        if change > 0:
            verdict = (
                f"{change:.1f}% slower than with the model's own norm ({_spread(overlap)}). "
                "Inductor can fuse the model's own norm with the add in front of it; "
                "the operator, opaque to Inductor, takes no part in that fusion, so "
                "the sum goes to memory and is read back"
            )
        else:
            verdict = (
                f"{-change:.1f}% faster than with the model's own norm "
                f"({_spread(overlap)}), although Inductor fuses nothing into the operator"
            )
        said.append(
            f"Compiled, the {step} with {best['variant']} takes "
            f"{best['median']:.2f} ms: {verdict}. Each backend: {each(ops, base)}."
        )
        fused = pick("compiled", step, OWN + " + " + FUSION_PASS)
        if not fused:
            continue
        win = min(fused, key=lambda r: r["median"])
        change, overlap = _compare(win, base)
        if change <= 0 and best["median"] > base["median"]:
            verdict = "by the medians, the pass wins back the gap"
        elif change <= 0:
            verdict = "by the medians, the step with the pass is faster too"
        elif win["median"] < best["median"]:
            verdict = "by the medians, the pass wins back part of the gap"
        else:
            verdict = "the pass does not win back the gap"
        said.append(
            f"Compiled with the fusion pass ({_backend(win['variant'])}), the {step} "
            f"takes {win['median']:.2f} ms, {change:+.1f}% from the model's own norm "
            f"without it ({_spread(overlap)}): {verdict}. "
            f"Each backend of the pass: {each(fused, base)}."
        )
    for name, why in record.get("missing", {}).items():
        said.append(f"Not measured on that machine: {name} ({why}).")
    for f in record.get("failed", []):
        said.append(f"Failed: {f['mode']} {f['step']} with {f['variant']} ({f['error']}).")
    return said


def _colour(variant: str) -> str:
    """Blue for the fusion pass, red for opguide's operator, grey for the others."""
    if FUSION_PASS in variant:
        return "#1f77b4"
    return "#d62728" if variant.startswith(OPGUIDE) else "#7f7f7f"


def plot_record(record: dict):
    """Each variant's median over the model's own norm's, per mode and step.

    One panel per ``(mode, step)``; a point per variant, its error bar the
    quartiles (also over the model's own median), its change in percent
    beside it; a line at 1. The figure is
    white with dark text, legible on light and dark pages alike.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    groups = {k: v for k, v in record_rows(record).items() if v[0]["ratio"] is not None}
    cols = 2
    nrows = max(1, -(-len(groups) // cols))
    tall = max(len(rows) for rows in groups.values()) if groups else 1
    fig, axes = plt.subplots(
        nrows,
        cols,
        figsize=(10, nrows * (0.9 + 0.32 * tall)),
        layout="constrained",
        facecolor="white",
        squeeze=False,
    )
    for ax, ((mode, step), rows) in zip(axes.flat, groups.items(), strict=False):
        ax.set_facecolor("white")
        ys = range(len(rows))
        for y, r in zip(ys, rows, strict=True):
            below, above = r["ratio"] - r["ratio_q1"], r["ratio_q3"] - r["ratio"]
            colour = _colour(r["variant"])
            ax.errorbar(r["ratio"], y, xerr=[[below], [above]], fmt="o", color=colour, capsize=3)
            ax.annotate(
                f"{(r['ratio'] - 1) * 100:+.1f}%",
                (r["ratio_q3"], y),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color="black",
            )
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(list(ys), [r["variant"] for r in rows], fontsize=8)
        low = min(r["ratio_q1"] for r in rows)
        high = max(r["ratio_q3"] for r in rows)
        pad = max(0.01, (high - low) * 0.12)
        ax.set_xlim(low - pad, high + 2.5 * pad)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_title(f"{mode}, {step}", fontsize=10)
        ax.set_xlabel("median time / model's own median", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"{record['device']}, {record['dtype']}, recorded {record['date']}: "
        "left of 1 is faster; error bars are the quartiles",
        fontsize=10,
    )
    return fig


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
    change, overlap = _compare(stats[new], stats[base])
    more = "less" if change < 0 else "more"
    said = f"{new} takes {abs(change):.1f}% {more} time per call than {base}; "
    return said + _spread(overlap, "this run") + "."
