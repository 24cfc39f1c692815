"""RMSNorm layers of a local kernel repository, for ``kernels.kernelize``.

Transformers marks each norm of a Llama for the ``kernels`` package: it
decorates ``LlamaRMSNorm`` with ``use_kernel_forward_from_hub("RMSNorm")``.
``kernels.kernelize`` gives every marked module the ``forward`` of the layer
class that a kernel mapping names for ``"RMSNorm"``. A layer is stateless:
no ``__init__``, no member but ``forward`` and two flags, and its ``forward``
reads the module's own ``weight`` and ``variance_epsilon``.

The flags say in which modes the layer runs: ``has_backward`` covers
``Mode.TRAINING`` and ``can_torch_compile`` covers ``Mode.TORCH_COMPILE``; in
a mode a layer does not declare, ``kernelize`` leaves the model's own
``forward``. This file is the repository's ``layers.py``; the flags come from
the ``support.json`` beside it, which ``guidekit.model_swap`` writes from a
measurement. Where a layer runs, it runs opguide's kernel, traced or not
(``compiled="kernel"``): whether Inductor's own code should run instead under
``torch.compile`` is the mode's choice, made by ``can_torch_compile``.
"""

import json
from pathlib import Path

import torch
import torch.nn.functional as F

import opguide

_SUPPORT_FILE = Path(__file__).with_name("support.json")
# Imported on its own, without the file, a layer declares neither flag.
SUPPORT = json.loads(_SUPPORT_FILE.read_text()) if _SUPPORT_FILE.exists() else {}


def _declared(layer: str, flag: str) -> bool:
    return bool(SUPPORT.get(layer, {}).get(flag, False))


class OpguideRMSNorm(torch.nn.Module):
    """``opguide.rms_norm`` on its compiled C++/CUDA kernels."""

    has_backward = _declared("OpguideRMSNorm", "has_backward")
    can_torch_compile = _declared("OpguideRMSNorm", "can_torch_compile")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        w, eps = self.weight, self.variance_epsilon
        return opguide.rms_norm(hidden_states, w, eps, backend="cpp", compiled="kernel")


class OpguideRMSNormTriton(torch.nn.Module):
    """``opguide.rms_norm`` on its Triton kernels."""

    has_backward = _declared("OpguideRMSNormTriton", "has_backward")
    can_torch_compile = _declared("OpguideRMSNormTriton", "can_torch_compile")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        w, eps = self.weight, self.variance_epsilon
        return opguide.rms_norm(hidden_states, w, eps, backend="triton", compiled="kernel")


class TorchRMSNorm(torch.nn.Module):
    """PyTorch's ``F.rms_norm``, the comparison."""

    has_backward = _declared("TorchRMSNorm", "has_backward")
    can_torch_compile = _declared("TorchRMSNorm", "can_torch_compile")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        w, eps = self.weight, self.variance_epsilon
        return F.rms_norm(hidden_states, w.shape, w, eps)
