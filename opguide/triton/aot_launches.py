"""What the ahead-of-time build compiles: every launch the C++ route can ask for, and its key.

:mod:`opguide.triton.aot` re-exports these names and documents the route.
Only the standard library is imported here at once: torch, triton and the
kernels when a function needs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import types
from collections.abc import Iterable, Mapping, Sequence

#: The kernels compiled ahead of time: the key's name -> (module, kernel object's name).
#: RMSNorm's, then those that the registry's operators name (:func:`_operators`).
KERNELS = {
    "rms_norm_forward": ("opguide.triton.forward", "_rms_norm_forward_kernel"),
    "rms_norm_backward": ("opguide.triton.backward", "_rms_norm_backward_kernel"),
    "grad_weight_sum": ("opguide.triton.backward", "_grad_weight_sum_kernel"),
}
#: Each kernel's constexpr parameters, in its parameter order: the key lists them so.
CONSTEXPRS = {
    "rms_norm_forward": ("BLOCK_N", "ROWS", "STORE_INV", "GDC", "ALIGN"),
    "rms_norm_backward": ("BLOCK_N", "ROWS", "STAGES", "GDC", "ALIGN"),
    "grad_weight_sum": ("BLOCK_P", "BLOCK_N", "GDC", "ALIGN"),
}
#: The pointer arguments of the operators' kernels and their types (``"x"``: x's dtype).
POINTERS: dict[str, dict[str, str]] = {}
#: The registry's ``aot_module`` of each operator that has one.
OPERATOR_MODULES: list[types.ModuleType] = []


def _operators() -> None:
    """Adds the kernels of each operator whose registry entry names an ``aot_module``."""
    from ..registry import OPERATORS

    for op in OPERATORS:
        if op.aot_module:
            module = importlib.import_module(op.aot_module)
            OPERATOR_MODULES.append(module)
            for name, (where, function, constexprs, pointers) in module.KERNELS.items():
                KERNELS[name] = (where, function)
                CONSTEXPRS[name] = tuple(constexprs)
                POINTERS[name] = dict(pointers)


_operators()
#: The dtypes of x (and the weight), as the key and Triton's signatures spell them.
DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

# Opt-in shared memory per block, bytes: what
# torch.cuda.get_device_properties(...).shared_memory_per_block_optin reports
# on each target (the CUDA C++ Programming Guide's "Technical Specifications per
# Compute Capability": 163 KiB on 8.0 and 8.7, 99 KiB on 8.6, 8.9 and 12.0,
# 227 KiB on 9.0 and 10.0; the LDS per workgroup of the ROCm "GPU hardware
# specifications" on AMD). It sets the backward's STAGES, and nothing else in
# the plans compiled ahead of time reads the device (the SM count sets only grids).
# A device that reports another figure (a HIP release that reports 0, for one)
# may plan a STAGES that has no artifact: that launch takes the JIT route.
SHARED_MEMORY_OPTIN = {
    "sm_80": 166912,
    "sm_86": 101376,
    "sm_87": 166912,
    "sm_89": 101376,
    "sm_90": 232448,
    "sm_100": 232448,
    "sm_120": 101376,
    "gfx90a": 65536,
    "gfx942": 65536,
    "gfx950": 163840,
    "gfx1100": 65536,
    "gfx1101": 65536,
    "gfx1200": 65536,
    "gfx1201": 65536,
}


@dataclasses.dataclass(frozen=True)
class Target:
    """A GPU to compile for, as the key names it, and the device model the planners read.

    Attributes:
        name: ``sm_{major}{minor}`` on NVIDIA, the gfx name on AMD.
        backend: ``"cuda"`` or ``"hip"``.
        arch: :class:`~triton.backends.compiler.GPUTarget`'s arch: the
            capability as an int (90) on NVIDIA, the gfx name on AMD.
        warp_size: threads per warp: 32, and 64 on AMD's gfx9 (CDNA).
        capability: what ``torch.cuda.get_device_capability`` reports there
            (ROCm reports the gfx version).
        smem_optin: :data:`SHARED_MEMORY_OPTIN` of the target.
    """

    name: str
    backend: str
    arch: int | str
    warp_size: int
    capability: tuple[int, int]
    smem_optin: int

    def gpu_target(self):
        """The target as Triton's compiler takes it."""
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)


def target(name: str) -> Target:
    """The :class:`Target` called ``name`` (``"sm_90"``, ``"gfx942"``).

    Raises:
        ValueError: if the name is not of either form, or has no entry in
            :data:`SHARED_MEMORY_OPTIN`.
    """
    if name not in SHARED_MEMORY_OPTIN:
        raise ValueError(
            f"opguide.triton.aot: no device model for target {name!r}; "
            f"expected one of {', '.join(SHARED_MEMORY_OPTIN)}"
        )
    if name.startswith("sm_"):
        digits = name[3:]
        capability = (int(digits[:-1]), int(digits[-1]))
        return Target(name, "cuda", int(digits), 32, capability, SHARED_MEMORY_OPTIN[name])
    version = name[3:]  # gfx942 -> 9, 4; gfx1100 -> 11, 0 (ROCm's capability)
    major = version[:-2]
    capability = (int(major), int(version[-2], 16))
    warp_size = 64 if major == "9" else 32
    return Target(name, "hip", name, warp_size, capability, SHARED_MEMORY_OPTIN[name])


def spec(n: int) -> str:
    """How Triton specialises the row length N: ``"1"``, ``"D"`` (a multiple of 16) or ``"N"``."""
    return "1" if n == 1 else "D" if n % 16 == 0 else "N"


def key(
    kernel: str,
    target: str,
    dtype,
    constexprs: Mapping[str, int | bool],
    n: int,
    num_warps: int,
) -> str:
    """The name of one compiled kernel: ``"kernel|target|dtype|C=v,...|spec|wN"``.

    The C++ route forms the same string for the launch it is about to make and
    looks it up in the table of ``csrc/triton_aot/artifacts.h``, for example
    ``rms_norm_forward|sm_90|bf16|BLOCK_N=4096,ROWS=1,STORE_INV=1,GDC=1,ALIGN=16|D|w8``.

    Args:
        kernel: a name of :data:`KERNELS`.
        target: the target's name (:func:`target`).
        dtype: x's dtype (the weight's, for ``grad_weight_sum``): a torch
            dtype or its name (``"bfloat16"``).
        constexprs: the kernel's constexprs (:data:`CONSTEXPRS`), booleans as
            ``True``/``False`` or 1/0; written in the kernel's parameter order.
        n: the row length N, which sets the spec (:func:`spec`).
        num_warps: the plan's warps.

    Raises:
        ValueError: if the kernel or the dtype is not one of this module's, or
            ``constexprs`` does not name exactly the kernel's constexprs.
    """
    return _key(kernel, target, _dtype_name(dtype), tuple(constexprs.items()), spec(n), num_warps)


def _dtype_name(dtype) -> str:
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(
            f"opguide.triton.aot: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}"
        )
    return DTYPES[name]


def _key(kernel, target, dtype, constexprs, spec, num_warps) -> str:
    if kernel not in CONSTEXPRS:
        raise ValueError(
            f"opguide.triton.aot: kernel must be one of {', '.join(CONSTEXPRS)}, got {kernel!r}"
        )
    values = dict(constexprs)
    if set(values) != set(CONSTEXPRS[kernel]):
        raise ValueError(
            f"opguide.triton.aot: constexprs of {kernel} must be "
            f"{', '.join(CONSTEXPRS[kernel])}, got {', '.join(values)}"
        )
    words = ",".join(f"{name}={int(values[name])}" for name in CONSTEXPRS[kernel])
    return f"{kernel}|{target}|{dtype}|{words}|{spec}|w{num_warps}"


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel compiled for one target: what its key says, in fields.

    Attributes:
        kernel: a name of :data:`KERNELS`.
        target: the target's name.
        dtype: x's dtype (the weight's for ``grad_weight_sum``), as the key spells it.
        constexprs: ``(name, int)`` pairs in the kernel's parameter order.
        spec: :func:`spec` of the row lengths it serves.
        num_warps: warps per program.
        launch_pdl: whether it is launched with programmatic dependent launch
            (the plan's GDC).
    """

    kernel: str
    target: str
    dtype: str
    constexprs: tuple[tuple[str, int], ...]
    spec: str
    num_warps: int
    launch_pdl: bool

    @property
    def key(self) -> str:
        """:func:`key` of the launch."""
        return _key(
            self.kernel, self.target, self.dtype, self.constexprs, self.spec, self.num_warps
        )


def kernel_function(name: str):
    """The ``@triton.jit`` function of the kernel ``name`` (a name of :data:`KERNELS`)."""
    module, function = KERNELS[name]
    return getattr(importlib.import_module(module), function)


@contextlib.contextmanager
def device_model(target_name: str):
    """The planners of :mod:`opguide.triton.launch` as they run on a GPU like ``target_name``.

    With the interpreter off, and ``torch.cuda`` answering with the target's
    capability and shared memory (the SM count, which sets only grids, is
    132), the planners and ``pdl_options`` return what they return on a real
    device of that kind, for a CUDA device ``torch.device("cuda", 0)``.
    Process-wide while entered: for build tools and tests, not beside launches.

    Yields:
        The module :mod:`opguide.triton.launch`.
    """
    from unittest import mock

    import torch

    from . import launch

    gpu = target(target_name)
    props = types.SimpleNamespace(
        multi_processor_count=132,
        shared_memory_per_block_optin=gpu.smem_optin,
        major=gpu.capability[0],
        minor=gpu.capability[1],
    )
    with (
        mock.patch.object(launch, "INTERPRET", False),
        mock.patch.multiple(launch, _PDL_ENABLED=True, _PDL_CAPABLE={}),
        mock.patch.multiple(
            torch.cuda,
            get_device_properties=lambda *a, **k: props,
            get_device_capability=lambda *a, **k: gpu.capability,
            current_device=lambda: 0,
        ),
        # An AMD GPU is seen through a ROCm build of torch.
        mock.patch.object(torch.version, "hip", "rocm" if gpu.backend == "hip" else None),
    ):
        yield launch


def launches(
    target_name: str,
    cols: Iterable[int] | None = None,
    dtypes: Sequence[str] = tuple(DTYPES),
) -> list[Launch]:
    """Every launch the C++ route can ask for on ``target_name``, one per key, sorted by key.

    For each dtype and row length N the library's planners give the
    forward's plan (rows of up to ``MAX_REGISTER_ROW``, with and without
    inv_rms), the backward's (up to ``MAX_REGISTER_ROW_BACKWARD``) and
    ``GRAD_WEIGHT_SUM``; ALIGN is ``launch.align(N)`` and GDC what
    ``launch.pdl_options`` gives an eager call there. The number of rows sets
    no constexpr; each length is planned for one row and for 2**20
    all the same, so that a planner that came to read it would show here.
    Then each operator's ``aot_module`` adds its own launches, for the same
    dtypes, GDC and row lengths.

    Args:
        target_name: a name of :data:`SHARED_MEMORY_OPTIN`.
        cols: only these row lengths (default: every length the plans cover).
        dtypes: only these dtypes of x (names of :data:`DTYPES`).

    Returns:
        The launches, sorted by key.
    """
    import torch

    gpu = target(target_name)
    found: dict[str, Launch] = {}

    def add(kernel, dtype, constexprs, n, num_warps, gdc):
        la = Launch(kernel, gpu.name, DTYPES[dtype], tuple(constexprs), spec(n), num_warps, gdc)
        found.setdefault(la.key, la)

    with device_model(gpu.name) as launch:
        device = torch.device("cuda", 0)
        pdl = launch.pdl_options(torch.empty(1, device="meta"))
        gdc = bool(pdl.get("GDC")) and bool(pdl.get("launch_pdl"))
        lengths = sorted(set(cols)) if cols is not None else range(1, launch.MAX_REGISTER_ROW + 1)
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for n in lengths:
                a = launch.align(n)
                for rows in (1, 1 << 20):
                    fwd = launch.forward_config(rows, n, dtype, device)
                    if isinstance(fwd, launch.Registers):
                        for store_inv in (0, 1):
                            cx = (("BLOCK_N", fwd.block_n), ("ROWS", fwd.rows))
                            cx += (("STORE_INV", store_inv), ("GDC", int(gdc)), ("ALIGN", a))
                            add("rms_norm_forward", dtype_name, cx, n, fwd.num_warps, gdc)
                    bwd = launch.backward_config(rows, n, dtype, device)
                    if isinstance(bwd, launch.Registers):
                        cx = (("BLOCK_N", bwd.block_n), ("ROWS", bwd.rows))
                        cx += (("STAGES", bwd.stages), ("GDC", int(gdc)), ("ALIGN", a))
                        add("rms_norm_backward", dtype_name, cx, n, bwd.num_warps, gdc)
                        s = launch.GRAD_WEIGHT_SUM
                        cx = (("BLOCK_P", s.block_p), ("BLOCK_N", s.block_n))
                        cx += (("GDC", int(gdc)), ("ALIGN", a))
                        add("grad_weight_sum", dtype_name, cx, n, s.num_warps, gdc)
            # The operators' own launches, for this dtype.
            for module in OPERATOR_MODULES:
                module.launches(
                    lambda kernel, cx, n, warps, d=dtype_name: add(kernel, d, cx, n, warps, gdc),
                    launch.align, gdc, cols,
                )  # fmt: skip
    return [found[k] for k in sorted(found)]
