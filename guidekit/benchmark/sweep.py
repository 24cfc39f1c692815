"""The sweep: GPU time of every implementation at every row length N.

``M * N`` stays fixed (:data:`SWEEP_ELEMENTS`), so every point moves the same
bytes and only the shape of the work changes; every point times a copy of the
same bytes in the same round robin, and each row is reported as the copy's
time over its own (``vs_copy``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import torch

from .fixed_shapes import _input_sets, _time_impls
from .implementations import (
    _select,
    backward_implementations,
    forward_implementations,
    fused_implementations,
    peer_implementations,
    training_implementations,
)
from .passes import (
    DTYPES,
    SAME_SIZE_COPY,
    SWEEP_ELEMENTS,
    SWEEP_NS,
    SWEEP_PASSES,
    Row,
    Skip,
    _element_size,
    bytes_moved,
)
from .timing import MIN_SETS, _rotation


def _sweep_sets(
    pass_name: str, m: int, n: int, dtype: torch.dtype, device: torch.device, count: int
) -> list[tuple]:
    sets = _input_sets("backward" if pass_name == "training" else pass_name, m, n, dtype,
                       device, count)  # fmt: skip
    if pass_name == "training":
        sets = [(x.requires_grad_(), w.requires_grad_(), grad_y) for x, w, grad_y in sets]
    return sets


def run_sweep(
    device: torch.device,
    *,
    dtypes: Sequence[str] = ("bf16",),
    ns: Sequence[int] = SWEEP_NS,
    elements: int = SWEEP_ELEMENTS,
    passes: Sequence[str] = SWEEP_PASSES,
    only: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    min_sets: int = MIN_SETS,
) -> dict:
    """GPU time of every implementation at every row length N, M = elements // N.

    The same timing as the fixed-shape passes (a batch queued behind a GPU
    spin, L2 cleaned, inputs rotated; :func:`time_round_robin`), with a copy
    of the same bytes in every round robin. ``training`` is a forward and a
    backward through autograd, as a training step runs them; its bytes are
    those of the forward plus those of the backward. ``min_sets``: the
    fewest input sets a batch rotates through (:data:`MIN_SETS`; 1 shows
    what reading the previous call's input again gains).

    Returns:
        ``{"elements", "ns", "dtypes", "rows", "skipped", "peers_missing",
        "min_sets"}``;
        each row has ``pass``, ``impl``, ``m``, ``n``, ``dtype``, ``seconds``,
        ``bytes``, ``GBps`` and ``vs_copy`` (the copy's time over the
        implementation's: 1.0 is the copy's speed).
    """
    say = progress or (lambda line: None)
    rows: list[dict] = []
    skips: list[Skip] = []
    missing: dict[str, str] = {}
    for pass_name in passes:
        if pass_name == "forward":
            impls = forward_implementations(device)
            impls.pop("eager reference", None)
        elif pass_name == "backward":
            impls = backward_implementations(device)
            impls.pop("eager reference", None)
            impls.pop("opguide autograd", None)
        elif pass_name == "training":
            impls = training_implementations(device)
        elif pass_name == "fused":
            impls = fused_implementations(device)
        else:
            raise ValueError(f"passes must be among {SWEEP_PASSES}, got {pass_name!r}")
        peers, why = peer_implementations(pass_name)
        missing.update(why)
        impls = _select({**impls, **peers}, only)
        for dtype_name in dtypes:
            dtype = DTYPES[dtype_name]
            s = _element_size(dtype)
            for n in ns:
                m = max(1, elements // n)
                say(f"sweep: {pass_name} {dtype_name} {m}x{n}")
                torch.compiler.reset()
                if pass_name == "training":
                    moved = bytes_moved("forward", m, n, s) + bytes_moved("backward", m, n, s)
                else:
                    moved = bytes_moved(pass_name, m, n, s)
                count = _rotation(moved, device, min_sets)
                make_sets = functools.partial(_sweep_sets, pass_name, m, n, dtype, device, count)
                found: list[Row] = []
                _time_impls(
                    pass_name, impls, make_sets, m=m, n=n, dtype_name=dtype_name, moved=moved,
                    device=device, prepared=pass_name == "backward", rows=found, skips=skips,
                    copy_sets=count,
                )  # fmt: skip
                copy = next((r for r in found if r.impl == SAME_SIZE_COPY), None)
                for r in found:
                    rows.append(dataclasses.asdict(r) | {
                        "pass": pass_name, "GBps": r.gbps,
                        "vs_copy": copy.seconds / r.seconds if copy else None,
                    })  # fmt: skip
    return {"elements": elements, "ns": list(ns), "dtypes": list(dtypes), "rows": rows,
            "skipped": [s.asdict() for s in skips], "peers_missing": missing,
            "min_sets": min_sets}  # fmt: skip
