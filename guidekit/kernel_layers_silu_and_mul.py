"""The Llama MLP's layer of a local kernel repository, for ``kernels.kernelize``.

A Llama MLP computes ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with
``act_fn`` SiLU. This layer computes the same with one matmul for the gate
and up projections and ``opguide.silu_and_mul`` for the activation and the
product: the matmul's output holds the gate projection then the up
projection side by side, the layout the operator reads.

A layer of a kernel repository is stateless: no ``__init__``, no member but
``forward`` and two flags, and its ``forward`` reads the module's own
``gate_proj``, ``up_proj`` and ``down_proj``. The flags say in which modes
the layer runs (``has_backward``: ``Mode.TRAINING``; ``can_torch_compile``:
``Mode.TORCH_COMPILE``); they come from the ``support.json`` beside this file
(:func:`guidekit.model_swap_silu_and_mul.layer_repository` writes it). This
file is the repository's ``layers.py``.
"""

import json
from pathlib import Path

import torch
import torch.nn.functional as F

import opguide

_SUPPORT_FILE = Path(__file__).with_name("support.json")
# Imported on its own, without the file, the layer declares neither flag.
SUPPORT = json.loads(_SUPPORT_FILE.read_text()) if _SUPPORT_FILE.exists() else {}


class OpguideSiluAndMulMLP(torch.nn.Module):
    """A Llama MLP on one gate-and-up matmul and ``opguide.silu_and_mul``."""

    has_backward = bool(SUPPORT.get("OpguideSiluAndMulMLP", {}).get("has_backward"))
    can_torch_compile = bool(SUPPORT.get("OpguideSiluAndMulMLP", {}).get("can_torch_compile"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj, self.up_proj
        # The layer holds no state, so the two weights are joined at each call;
        # a model that stores them joined (vLLM's merged gate_up projection)
        # skips this copy of the weights.
        weight = torch.cat((gate.weight, up.weight))
        bias = None if gate.bias is None else torch.cat((gate.bias, up.bias))
        gate_up = F.linear(x, weight, bias)  # [..., 2 * intermediate_size]
        # compiled="kernel": under torch.compile too, the operator runs.
        hidden = opguide.silu_and_mul(gate_up, backend="cpp", compiled="kernel")
        return self.down_proj(hidden)
