"""opguide's ``silu_and_mul`` put into a Llama's MLPs through ``kernels.kernelize``.

The layer is :class:`guidekit.kernel_layers_silu_and_mul.OpguideSiluAndMulMLP`.
Transformers marks a Llama's norms for the ``kernels`` package, and may leave
its MLPs unmarked (transformers 5.24 gives ``LlamaMLP`` no
``use_kernel_forward_from_hub``). Where the class is unmarked,
:func:`marked_mlp` marks it with ``kernels``' own
``replace_kernel_forward_from_hub``, as :func:`guidekit.model_swap.marked_norm`
does for a norm that transformers leaves unmarked.

* :func:`layer_repository`: a local kernel repository holding the layer;
* :func:`marked_mlp` and :func:`kernelized`: ``LlamaMLP`` marked, and a
  model's MLPs given the layer by ``kernels.kernelize``, its other layers
  left as they are;
* :func:`mlp_forwards`: which ``forward`` each MLP runs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from . import model_swap

#: The layer's class name in the repository.
LAYER = "OpguideSiluAndMulMLP"
#: The name the MLP is marked with where transformers leaves it unmarked.
MARK = "SiluAndMulMLP"


def layer_repository(folder: Path | str, has_backward: bool, can_torch_compile: bool) -> Path:
    """Writes a local kernel repository whose ``layers.py`` holds the MLP layer
    (a copy of :mod:`guidekit.kernel_layers_silu_and_mul`), with the layer's flags,
    the way :func:`guidekit.model_swap.layer_repository` writes the norms'.

    Args:
        folder: where the repository's folder is made.
        has_backward: the layer runs in ``Mode.TRAINING``.
        can_torch_compile: the layer runs in ``Mode.TORCH_COMPILE``.

    Returns:
        The repository's folder, for ``kernels.LocalLayerRepository``.
    """
    flags = {"has_backward": has_backward, "can_torch_compile": can_torch_compile}
    layers = Path(__file__).with_name("kernel_layers_silu_and_mul.py")
    return model_swap.layer_repository(
        folder, {LAYER: flags}, name="opguide-silu-and-mul-mlp", layers=layers
    )


def marked_mlp() -> str:
    """Marks ``LlamaMLP`` for ``kernels`` where transformers has not; returns its layer name.

    Returns:
        The name a kernel mapping uses for the class: transformers' own where
        it marks the class, :data:`MARK` otherwise.

    Raises:
        ImportError: ``kernels`` or ``transformers`` is not installed.
    """
    from kernels import replace_kernel_forward_from_hub
    from transformers.models.llama.modeling_llama import LlamaMLP

    if getattr(LlamaMLP, "kernel_layer_name", None) is None:
        replace_kernel_forward_from_hub(LlamaMLP, MARK)
    return LlamaMLP.kernel_layer_name


def _mlps(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__ == "LlamaMLP"]


def kernelized(model: torch.nn.Module, repository: Path, mode) -> torch.nn.Module:
    """Gives every Llama MLP of ``model`` the layer's ``forward``, where ``mode`` allows it.

    ``kernelize`` runs on each MLP alone, so the model's other marked layers
    (its norms) keep the ``forward`` they have, kernelized or not.

    Args:
        model: a transformers Llama (changed in place), or one of its MLPs.
        repository: a folder from :func:`layer_repository`.
        mode: a ``kernels.Mode``, e.g. ``Mode.TRAINING | Mode.TORCH_COMPILE``.

    Returns:
        ``model``, its MLPs kernelized: the layer's ``forward`` where the
        layer declares ``mode``, the model's own where it does not.

    Raises:
        ValueError: ``model`` holds no Llama MLP, or an MLP's activation is
            not SiLU (``config.hidden_act``), which the layer computes.
        ImportError: ``kernels`` or ``transformers`` is not installed.
    """
    from kernels import LocalLayerRepository, kernelize, use_kernel_mapping

    mlps = _mlps(model)
    if not mlps:
        raise ValueError("kernelized: model holds no LlamaMLP")
    for mlp in mlps:
        if mlp.config.hidden_act != "silu":
            raise ValueError(
                "kernelized: every LlamaMLP must use hidden_act='silu', the activation the "
                f"layer computes; got hidden_act={mlp.config.hidden_act!r}"
            )
    name = marked_mlp()
    repo = LocalLayerRepository(repo_path=Path(repository), layer_name=LAYER)
    mapping = {name: {device: repo for device in ("cpu", "cuda", "rocm")}}
    # inherit_mapping=False: transformers' own mapping (Hub repositories) is left out.
    with use_kernel_mapping(mapping, inherit_mapping=False):
        for mlp in mlps:
            kernelize(mlp, mode=mode)
    return model


def mlp_forwards(model: torch.nn.Module) -> Counter:
    """How many Llama MLPs of ``model`` run each ``forward``, by its qualified name."""
    return Counter(m.forward.__func__.__qualname__ for m in _mlps(model))
