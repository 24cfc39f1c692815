"""The launch configurations the library chooses, found by running its launch code."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Iterable, Sequence
from pathlib import Path
from unittest import mock

from .targets import _DTYPES, KERNEL_MODULES, LIBRARY, ROW_LENGTHS, Launch, Target


@contextlib.contextmanager
def _pretend_gpu(target: Target):
    """torch.cuda answers as on one GPU like ``target``: device 0, its properties."""
    import types

    import torch

    props = types.SimpleNamespace(
        multi_processor_count=target.sm_count,
        shared_memory_per_block_optin=target.smem_per_block,
        major=target.capability[0],
        minor=target.capability[1],
        name=target.gpu,
    )
    # An AMD GPU is seen through a ROCm build of torch.
    hip = "7.0" if target.backend == "hip" else None
    with (
        mock.patch.multiple(
            torch.cuda,
            get_device_properties=lambda *a, **k: props,
            get_device_capability=lambda *a, **k: target.capability,
            current_device=lambda: 0,
            _lazy_init=lambda: None,
        ),
        mock.patch.object(torch.version, "hip", hip),
    ):
        yield


def library_launches(
    target: Target,
    row_lengths: Iterable[int] = ROW_LENGTHS,
    dtypes: Sequence[str] = _DTYPES,
) -> list[Launch]:
    """Every kernel launch the library makes on a GPU like ``target``, deduplicated.

    The library's operators run on fake CUDA tensors (shapes, no memory) while
    ``torch.cuda`` answers with the target's properties, and their kernel
    launches are recorded instead of made: the configurations are the launch
    code's own answers, not a copy of its rules. An eager call on real
    tensors also passes the options of ``pdl_options``; each launch that takes GDC is
    recorded both ways.

    Args:
        target: the GPU whose properties the launch rules read.
        row_lengths: the row lengths N to call each operator with.
        dtypes: the dtypes of x (weight, residual and output share it).

    Returns:
        The launches, in the order first made.

    Raises:
        RuntimeError: if Triton's interpreter is selected in this process.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    lib = importlib.import_module(LIBRARY)
    if lib.INTERPRET:
        raise RuntimeError(
            "guidekit.triton_targets: Triton's interpreter is selected in this process "
            "(TRITON_INTERPRET=1); check() runs the compiles in a child process instead"
        )
    made: list[tuple] = []

    class _Recorder:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kw):
                made.append((self.kernel, args, kw))

            return launch

    def describe(value):
        if isinstance(value, torch.Tensor):
            return "*" + str(value.dtype).removeprefix("torch.")
        return value

    # The options launch.pdl_options picks for an eager call: a plain tensor is its eager case.
    meta = torch.empty(1, device="meta")
    with _pretend_gpu(target), mock.patch.multiple(lib.launch, _PDL_CAPABLE={}, _PDL_ENABLED=True):
        pdl = dict(lib.launch.pdl_options(meta))
    seen: dict[Launch, None] = {}
    ops = lib.ops
    with _pretend_gpu(target), mock.patch.object(ops, "launchable", _Recorder), FakeTensorMode():
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for n in row_lengths:
                made.clear()
                x = torch.empty((3, n), dtype=dtype, device="cuda")
                w = torch.empty((n,), dtype=dtype, device="cuda")
                inv = torch.empty((3,), dtype=torch.float32, device="cuda")
                ops.rms_norm_forward(x, w, 1e-6, None)
                ops.rms_norm_forward(x, w, 1e-6, inv)
                ops.rms_norm_backward(x, x, w, inv)
                ops.fused_add_rms_norm(x, x.clone(), w, 1e-6)
                ops.fused_add_rms_norm(x, x.clone(), None, 1e-6)
                for kernel, args, kw in made:
                    variants = [kw, {**kw, **pdl}] if "GDC" in kw and pdl.get("GDC") else [kw]
                    named = tuple(describe(a) for a in args)
                    for opts in (o for v in variants for o in _autotune_options(kernel, v)):
                        launch = Launch(*_name_of(kernel), named, tuple(sorted(opts.items())))
                        seen.setdefault(_canonical(launch))
    return list(seen)


def _autotune_options(kernel, kw: dict) -> list[dict]:
    """The options of each config an autotuner may pick (it times them all)."""
    configs = getattr(kernel, "configs", None)
    if configs is None:
        return [kw]
    return [{**kw, **c.all_kwargs()} for c in configs]


def _canonical(launch: Launch) -> Launch:
    """The launch with its ints replaced by what Triton specialises on (1, a multiple of 16, other).

    Two launches that differ only in M or N compile to the same kernel when
    those agree; 17 stands for "other", 16 for a multiple of 16.
    """

    def spec(a):
        if isinstance(a, bool) or not isinstance(a, int):
            return a
        return 1 if a == 1 else 16 if a % 16 == 0 else 17

    return dataclasses.replace(launch, args=tuple(spec(a) for a in launch.args))


def _name_of(kernel) -> tuple[str, str]:
    """(module, name) of a kernel of the library's kernel modules."""
    for module_name in KERNEL_MODULES:
        for name, value in vars(importlib.import_module(module_name)).items():
            if value is kernel:
                return module_name, name
    raise LookupError(f"{kernel} is not a module-level name of {', '.join(KERNEL_MODULES)}")


def library_kernels() -> list[str]:
    """The library's kernels that a launch starts (not the Triton helpers they call).

    Read from the sources of the package's modules, without importing them
    (so it works whatever TRITON_INTERPRET is): the functions decorated with
    ``triton.jit`` that no other such function calls.
    """
    import ast

    folder = Path(importlib.util.find_spec(LIBRARY).origin).parent
    nodes = (n for path in sorted(folder.glob("*.py")) for n in ast.parse(path.read_text()).body)
    jitted = {
        n.name: n
        for n in nodes
        if isinstance(n, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in n.decorator_list)
    }
    called = {
        call.func.id
        for node in jitted.values()
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
    }
    return [name for name in jitted if name not in called]


def _weight(launch: Launch) -> tuple:
    """Elements each thread holds, for picking the extremes of a kernel's configurations."""
    kw = launch.kw
    block = 1
    for key in ("BLOCK_N", "ROWS", "SEG", "BLOCK_P"):
        block *= int(kw.get(key, 1))
    itemsize = 4 if any(a == "*float32" for a in launch.args[:1]) else 2
    per_thread = block / (kw.get("num_warps", 4) * 32)
    return per_thread * itemsize, kw.get("STAGES", 1) * block * itemsize


def representative(launches: Sequence[Launch]) -> list[Launch]:
    """A subset with every kernel at the extremes of its configurations.

    For each kernel: the launch with the most bytes per thread (the most
    registers), the fewest, the most shared-memory stages, and each distinct
    set of launch options (GDC on and off).
    """
    by_kernel: dict[str, list[Launch]] = {}
    for launch in launches:
        by_kernel.setdefault(launch.kernel, []).append(launch)
    chosen: dict[Launch, None] = {}
    for group in by_kernel.values():
        for key in (lambda la: _weight(la)[0], lambda la: _weight(la)[1]):
            chosen.setdefault(max(group, key=key))
        chosen.setdefault(min(group, key=lambda la: _weight(la)[0]))
        gdc = [la for la in group if la.kw.get("GDC")]
        if gdc:
            chosen.setdefault(max(gdc, key=lambda la: _weight(la)[0]))
    return list(chosen)
