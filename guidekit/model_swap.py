"""opguide's RMSNorm put into a Hugging Face model the way its users do: ``kernels.kernelize``.

The ``kernels`` package (PyPI) swaps a layer's ``forward`` for one from a
kernel repository, on the Hugging Face Hub or in a local folder. Here the
repository is local (:func:`layer_repository`): its layers are those of
:mod:`guidekit.kernel_layers`, and what each declares it supports is decided
from a GPU record of step 20 (:func:`measured_support`), so that
``kernelize`` runs opguide's operator only in the modes where the record
shows it faster than the model's own code.

* :data:`LAYERS` and :data:`FLAGS`: the layers, the record's row that
  measures each, and the steps that decide each flag;
* :func:`record_rows`: a record's results by group, as ratios to the model's
  own norm (:data:`OWN`), which the flags are decided from;
* :func:`measured_support`: each layer's flags, decided from a record;
* :func:`layer_repository`: a local kernel repository with those flags;
* :func:`marked_norm` and :func:`kernelized`: ``LlamaRMSNorm`` marked for
  ``kernels``, and a model's norms given a layer by ``kernels.kernelize``;
* :func:`norm_forwards` and :class:`OpguideCalls`: which ``forward`` each
  norm runs, and the calls of opguide's operators counted.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from guidekit.model_step import compare

#: The variant of a record that is the model's own norm, which the others are measured against.
OWN = "model's own"

#: The layers of the repository, each with the variant of the record that
#: measures it (``tools/record_model_step.py`` names them so).
LAYERS = {
    "OpguideRMSNorm": "opguide.rms_norm (cpp)",
    "OpguideRMSNormTriton": "opguide.rms_norm (triton)",
    "TorchRMSNorm": "F.rms_norm",
}
#: Each flag of a layer, with the ``(mode, step)`` groups of the record that
#: decide it: ``has_backward`` puts the layer into ``Mode.TRAINING``,
#: ``can_torch_compile`` into ``Mode.TORCH_COMPILE``.
FLAGS = {
    "has_backward": [("eager", "training step")],
    "can_torch_compile": [("compiled", "training step"), ("compiled", "inference forward")],
}
#: Every flag declared, so that each layer runs in every mode, as a measurement needs.
EVERY_MODE = {layer: dict.fromkeys(FLAGS, True) for layer in LAYERS}


def record_rows(record: dict) -> dict[tuple[str, str], list[dict]]:
    """A record's results by ``(mode, step)``, each relative to the model's own norm.

    Args:
        record: a ``model_step_<gpu>.json`` read with ``json.loads``.

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


def measured_support(record: dict | None) -> dict[str, dict]:
    """What each layer declares, decided from a GPU record of step 20.

    A layer declares a flag where, in every group that decides it
    (:data:`FLAGS`), the record shows its variant faster than the model's
    own norm by the median with the quartiles apart. No measurable
    difference, a loss, or a row not recorded: the flag is not declared,
    and ``kernelize`` leaves the model's own code in that mode.

    Args:
        record: a ``model_step_<gpu>.json`` read with ``json.loads``, or
            ``None`` where there is none (nothing is declared).

    Returns:
        ``{layer: {flag: bool, ..., "why": {flag: sentence}}}``.
    """
    groups = record_rows(record) if record else {}
    support = {}
    for layer, variant in LAYERS.items():
        support[layer] = {"why": {}}
        for flag, decide in FLAGS.items():
            reasons, declared = [], True
            for mode, step in decide:
                rows = {r["variant"]: r for r in groups.get((mode, step), [])}
                if variant not in rows or OWN not in rows:
                    reasons.append(f"{mode} {step}: not recorded")
                    declared = False
                    continue
                row, own = rows[variant], rows[OWN]
                change, overlap = compare(row, own)
                faster = change < 0 and not overlap
                declared = declared and faster
                verdict = "no measurable difference" if overlap else "slower"
                verdict = "faster" if faster else verdict
                reasons.append(
                    f"{mode} {step} {row['median']:.2f} ms against {own['median']:.2f} ms "
                    f"({change:+.1f}%): {verdict}"
                )
            support[layer][flag] = declared
            support[layer]["why"][flag] = "; ".join(reasons)
    return support


def layer_repository(
    folder: Path | str,
    support: dict[str, dict],
    name: str = "opguide-rms-norm",
    layers: Path | None = None,
) -> Path:
    """Writes a local kernel repository of the layers of ``layers`` with ``support``'s flags.

    The layout is the one ``kernels.LocalLayerRepository`` loads:
    ``build/torch-universal/`` (Python only, any device) holding
    ``metadata.json``, the package (``__init__.py`` and ``layers.py``) and
    ``support.json``. ``kernels`` keeps a loaded repository for the rest of
    the process, so each support gets a folder of its own, named after it.

    Args:
        folder: where the repository's folder is made.
        support: ``{layer: {"has_backward": bool, "can_torch_compile": bool}}``,
            as :func:`measured_support` returns (its ``"why"`` is left out).
        name: the repository's name.
        layers: the file that becomes its ``layers.py`` (default: the norms',
            :mod:`guidekit.kernel_layers`).

    Returns:
        The repository's folder, for ``kernels.LocalLayerRepository``.
    """
    flags = {layer: {f: bool(s.get(f)) for f in FLAGS} for layer, s in support.items()}
    digest = hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()[:12]
    repo = Path(folder) / f"{name}-{digest}"
    variant = repo / "build" / "torch-universal"
    variant.mkdir(parents=True, exist_ok=True)
    metadata = {
        "name": name,
        # The module's name in sys.modules: one per support.
        "id": f"{name.replace('-', '_')}_{digest}",
        "version": 1,
        "license": "BSD-3-Clause",
        "python-depends": [],
        "backend": {"type": "cpu"},
    }
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=1) + "\n")
    (variant / "support.json").write_text(json.dumps(flags, indent=1) + "\n")
    (variant / "__init__.py").write_text("from . import layers\n")
    layers = layers or Path(__file__).with_name("kernel_layers.py")
    shutil.copyfile(layers, variant / "layers.py")
    return repo


def marked_norm() -> str:
    """Marks ``LlamaRMSNorm`` for ``kernels`` where transformers has not; returns its layer name.

    Transformers decorates ``LlamaRMSNorm`` with
    ``use_kernel_forward_from_hub("RMSNorm")`` when a ``kernels`` release it
    accepts is installed; otherwise the class is left unmarked and
    ``kernelize`` passes it by. ``kernels.replace_kernel_forward_from_hub``
    marks it then, under the same name.

    Returns:
        The name a kernel mapping uses for the class (``"RMSNorm"``).

    Raises:
        ImportError: ``kernels`` or ``transformers`` is not installed.
    """
    from kernels import replace_kernel_forward_from_hub
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    if getattr(LlamaRMSNorm, "kernel_layer_name", None) is None:
        replace_kernel_forward_from_hub(LlamaRMSNorm, "RMSNorm")
    return LlamaRMSNorm.kernel_layer_name


def kernelized(model: torch.nn.Module, repository: Path, layer: str, mode) -> torch.nn.Module:
    """Gives every RMSNorm of ``model`` the ``forward`` of ``layer``, where ``mode`` allows it.

    Args:
        model: a transformers model (changed in place), or one of its norms.
        repository: a folder from :func:`layer_repository`.
        layer: one of :data:`LAYERS`.
        mode: a ``kernels.Mode``, e.g. ``Mode.TRAINING | Mode.TORCH_COMPILE``.

    Returns:
        ``model``, its norms kernelized: the layer's ``forward`` where the
        layer declares ``mode``, the model's own where it does not.

    Raises:
        ImportError: ``kernels`` or ``transformers`` is not installed.
    """
    from kernels import LocalLayerRepository, kernelize, use_kernel_mapping

    name = marked_norm()
    repo = LocalLayerRepository(repo_path=Path(repository), layer_name=layer)
    mapping = {name: {device: repo for device in ("cpu", "cuda", "rocm")}}
    # inherit_mapping=False: transformers' own mapping (Hub repositories) is left out.
    with use_kernel_mapping(mapping, inherit_mapping=False):
        return kernelize(model, mode=mode)


def norm_forwards(model: torch.nn.Module) -> Counter:
    """How many norms of ``model`` run each ``forward``, by its qualified name."""
    return Counter(
        m.forward.__func__.__qualname__
        for m in model.modules()
        if type(m).__name__ == "LlamaRMSNorm"
    )


class OpguideCalls(TorchDispatchMode):
    """Counts the calls of opguide's operators (namespace ``opguide``) while it is on.

    ``counts`` holds ``{operator name: calls}``; ``total`` their sum.
    """

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "opguide":
            self.counts[func.name()] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())
