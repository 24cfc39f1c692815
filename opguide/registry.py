"""The one list of opguide's operators: their routes, kernel files and kernel families.

Everything that enumerates operators reads :data:`OPERATORS`: the package's
exports (``opguide/__init__.py``), the build (``setup.py`` compiles the
``csrc`` folder of each entry), the backends' kernel lookup, the FLOP formulas
and sharding rules, the manifests of each route (``guidekit/manifests.py``)
and the records' sources (``guidekit/recorded/sources.py``). Adding an
operator is an entry here, its own folders and its tests.

This module imports nothing but the standard library, so that ``setup.py``
can read it before the package is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["COMMON", "OPERATORS", "Operator", "get"]


@dataclass(frozen=True)
class Operator:
    """One operator of the ``opguide`` namespace and everything that implements it.

    Attributes:
        name: the public function's name (``opguide.<name>``).
        module: the Python module that defines the public function, the fake
            kernels and the autograd, vmap and autocast registrations.
        public: the names that ``import opguide`` exports from ``module``.
        csrc: the folder of its C++/CUDA sources (schema, CPU kernels, CUDA
            kernels, planner), or None for an operator without compiled kernels.
        ops: its compiled operators, ``torch.ops.opguide.<op>``.
        triton_ops: the Triton twin of each of ``ops``, in the same order
            (empty: no Triton route).
        triton_module: the module whose import defines ``triton_ops``.
        routes: the routes a reader can take it by; each has a manifest,
            ``manifests/<route>_<name>.txt``.
        kernels: kernel family -> the files that define its kernels.
        planning: route (``"cpu"``, ``"cuda"``, ``"triton"``) -> the files
            that choose a kernel and launch it (configuration, planner,
            launch functions), besides :data:`COMMON`.
        python: the Python every eager call runs before a kernel (wrapper, checks).
        aot: its Triton kernels compiled ahead of time: the build that compiles
            them and the C++ that plans, keys and launches a call (empty: none).
        aot_module: the module that tells the ahead-of-time build
            (:mod:`opguide.triton.aot`) its Triton kernels and every launch of
            them (``KERNELS``, ``launches``); None where the build's own
            module does (rms_norm's) or there are none.
    """

    name: str
    module: str
    public: tuple[str, ...]
    csrc: str | None
    ops: tuple[str, ...]
    triton_ops: tuple[str, ...] = ()
    triton_module: str | None = None
    routes: tuple[str, ...] = ("cpp",)
    kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    planning: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    python: tuple[str, ...] = ()
    aot: tuple[str, ...] = ()
    aot_module: str | None = None

    def twins(self) -> tuple[tuple[str, str | None], ...]:
        """(compiled operator, its Triton twin or None) for each of :attr:`ops`."""
        triton = self.triton_ops or (None,) * len(self.ops)
        return tuple(zip(self.ops, triton, strict=True))

    def manifests(self) -> tuple[str, ...]:
        """The names of its manifests, ``<route>_<name>``."""
        return tuple(f"{route}_{self.name}" for route in self.routes)


#: Code that every operator shares, by role: device code, launch helpers,
#: Triton helpers and the pieces of error messages.
COMMON: Mapping[str, tuple[str, ...]] = {
    "device": ("csrc/common/device.cuh",),
    "cluster": ("csrc/common/cluster.cuh",),
    "launch": (
        "csrc/common/launch.cuh",
        "csrc/common/row_plan.cuh",
        "csrc/common/launch_settings.h",
        "csrc/common/launch_settings.cu",
        "csrc/common/cuda_type.cuh",
    ),
    "triton": ("opguide/triton/prologue.py", "opguide/triton/interpreter.py"),
    "messages": ("csrc/common/messages.h", "csrc/common/messages.cpp"),
}

_RMS = "csrc/rms_norm/"
_FUSED = "csrc/fused_add_rms_norm/"
_AOT = "csrc/triton_aot/"
# What every operator's Triton kernels compiled ahead of time share: the
# build that compiles them, and the C++ that keys, loads and launches them.
_AOT_SHARED = (
    "opguide/triton/aot.py",
    "opguide/triton/aot_launches.py",
    "opguide/triton/aot_compile.py",
    "opguide/triton/aot_build.py",
    _AOT + "artifacts.h",
    _AOT + "check.h",
    _AOT + "plan.h",
    _AOT + "route.h",
    _AOT + "triton_aot.h",
    _AOT + "triton_aot_fallback.cpp",
    _AOT + "triton_aot_launch.cu",
    _AOT + "triton_aot_launch.h",
)

OPERATORS: tuple[Operator, ...] = (
    Operator(
        name="rms_norm",
        module="opguide.ops",
        public=("rms_norm",),
        csrc="csrc/rms_norm",
        ops=("rms_norm", "rms_norm_forward", "rms_norm_backward"),
        triton_ops=("rms_norm_triton", "rms_norm_forward_triton", "rms_norm_backward_triton"),
        triton_module="opguide.triton",
        routes=("cpp", "triton"),
        kernels={
            "cpu": (_RMS + "rms_norm_cpu.h", _RMS + "rms_norm_cpu.cpp"),
            "cpu_backward": (_RMS + "rms_norm_cpu.h", _RMS + "rms_norm_backward_cpu.cpp"),
            "cuda_forward": (_RMS + "rms_norm_forward.cuh",),
            "cuda_forward_cluster": (_RMS + "rms_norm_forward.cuh",),
            "cuda_backward": (_RMS + "rms_norm_backward.cuh",),
            "cuda_backward_cluster": (
                _RMS + "rms_norm_backward.cuh",
                _RMS + "rms_norm_backward_long_rows.cuh",
            ),
            "cuda_backward_chunked": (_RMS + "rms_norm_backward_long_rows.cuh",),
            "triton_forward": ("opguide/triton/forward.py",),
            "triton_backward": ("opguide/triton/backward.py",),
            "triton_split": ("opguide/triton/split.py",),
        },
        planning={
            "cpu": (_RMS + "rms_norm.h", _RMS + "rms_norm_checks.cpp"),
            "cuda": (
                _RMS + "rms_norm_config.h",
                _RMS + "rms_norm_forward_planner.cuh",
                _RMS + "rms_norm_backward_planner.cuh",
                _RMS + "rms_norm_launch.cuh",
                _RMS + "rms_norm_cuda.cu",
            ),
            "triton": (
                "opguide/triton/launch.py",
                "opguide/triton/plans.py",
                "opguide/triton/ops.py",
            ),
        },
        python=("opguide/ops.py", "opguide/_checks.py", "opguide/backends.py"),
        aot=(
            *_AOT_SHARED,
            _AOT + "triton_aot_autograd.cpp",
            _AOT + "triton_aot_cuda.cu",
            _AOT + "triton_aot_schema.cpp",
        ),
    ),
    Operator(
        name="fused_add_rms_norm",
        module="opguide.fused_add_rms_norm",
        public=("fused_add_rms_norm_",),
        csrc="csrc/fused_add_rms_norm",
        ops=("fused_add_rms_norm_",),
        triton_ops=("fused_add_rms_norm_triton_",),
        triton_module="opguide.triton",
        routes=("cpp", "triton"),
        kernels={
            "cpu": (_FUSED + "fused_add_rms_norm_cpu.cpp",),
            "cuda_fused": (_FUSED + "fused_add_rms_norm.cuh",),
            "cuda_fused_cluster": (_FUSED + "fused_add_rms_norm.cuh",),
            "triton_fused": ("opguide/triton/fused.py",),
            "triton_split": ("opguide/triton/split.py",),
        },
        planning={
            "cpu": (_FUSED + "fused_add_rms_norm.h", _FUSED + "fused_add_rms_norm_checks.cpp"),
            "cuda": (
                _FUSED + "fused_add_rms_norm_config.h",
                _FUSED + "fused_add_rms_norm_planner.cuh",
                _FUSED + "fused_add_rms_norm_launch.cuh",
                _FUSED + "fused_add_rms_norm_cuda.cu",
            ),
            "triton": (
                "opguide/triton/launch.py",
                "opguide/triton/plans.py",
                "opguide/triton/ops.py",
            ),
        },
        python=("opguide/fused_add_rms_norm.py", "opguide/_checks.py", "opguide/backends.py"),
    ),
    Operator(
        # [registry-silu-and-mul]
        name="silu_and_mul",
        module="opguide._silu_and_mul",
        public=("silu_and_mul", "silu_and_mul_reference"),
        csrc="csrc/silu_and_mul",
        ops=("silu_and_mul", "silu_and_mul_backward"),
        triton_ops=("silu_and_mul_triton", "silu_and_mul_backward_triton"),
        triton_module="opguide._silu_and_mul.triton",
        routes=("cpp", "triton"),
        # One family per route: the forward and backward kernels of each
        # share their file.
        kernels={
            "cpu": (
                "csrc/silu_and_mul/silu_and_mul_cpu.h",
                "csrc/silu_and_mul/silu_and_mul_cpu.cpp",
            ),
            "cuda": ("csrc/silu_and_mul/silu_and_mul.cuh",),
            "triton": ("opguide/_silu_and_mul/triton/kernels.py",),
        },
        planning={
            "cpu": (
                "csrc/silu_and_mul/silu_and_mul.h",
                "csrc/silu_and_mul/silu_and_mul_checks.cpp",
                "csrc/silu_and_mul/silu_and_mul_schema.cpp",
            ),
            "cuda": (
                "csrc/silu_and_mul/silu_and_mul_config.h",
                "csrc/silu_and_mul/silu_and_mul_cuda.cu",
            ),
            "triton": (
                "opguide/_silu_and_mul/triton/ops.py",
                "opguide/triton/launch.py",
                "opguide/triton/ops.py",
            ),
        },
        python=(
            "opguide/_silu_and_mul/ops.py",
            "opguide/_silu_and_mul/_checks.py",
            "opguide/backends.py",
        ),
        aot=(
            *_AOT_SHARED,
            "opguide/_silu_and_mul/triton/aot.py",
            "opguide/_silu_and_mul/triton/kernels.py",
            _AOT + "silu_and_mul_triton_aot.h",
            _AOT + "silu_and_mul_triton_aot.cpp",
            _AOT + "silu_and_mul_triton_aot_cuda.cu",
        ),
        aot_module="opguide._silu_and_mul.triton.aot",
        # [registry-silu-and-mul-end]
    ),
)


def get(name: str) -> Operator:
    """The entry of the operator ``name`` (its public name, or one of its dispatcher ops).

    Raises:
        KeyError: no operator of the registry has that name.
    """
    for op in OPERATORS:
        if name == op.name or name in op.ops or name in op.triton_ops or name in op.public:
            return op
    raise KeyError(f"opguide.registry: no operator named {name!r}")
