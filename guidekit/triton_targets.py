"""Compile the library's Triton kernels for AMD and NVIDIA GPUs, on a machine without one.

Triton compiles a kernel for a GPU it is told about, not only for the one it
runs on: ``triton.compile`` with a ``GPUTarget`` goes all the way to the
machine code (an ``hsaco`` for AMD, a ``cubin`` for NVIDIA) on a CPU-only
machine. This module compiles every kernel of :mod:`opguide.triton`
in each launch configuration that the library's own launch code chooses (for
row lengths from 1 to 2**23 and the three dtypes it takes) for seven GPUs,
and reads from each compile the registers, the spills and the shared memory.
A kernel passes when it spills nothing and fits the GPU's per-thread register
and per-block shared-memory limits (:data:`TARGETS` cites them).

What this proves: the kernels compile for these GPUs and fit their
registers and shared memory. What it does not: nothing ran there, so it says
nothing about the kernels' results or speed on those GPUs.

``python -m guidekit.triton_targets`` prints one line per kernel, launch
configuration and target and a summary line, and exits 1 when a kernel
spills, does not fit, or does not compile. By default it checks a
representative subset (every kernel on every target, at the extremes of its
configurations); ``--full`` or ``OPGUIDE_TRITON_TARGETS_FULL=1`` checks every
configuration. Results are cached under ``build/triton_targets``, keyed on the
kernel's source (with the Triton functions it calls), its specialisation, the
options, the target and the Triton version.

The compiles run in a child process when the current one has Triton's
interpreter selected (``TRITON_INTERPRET=1``: ``@triton.jit`` then makes
functions the compiler cannot take).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "Target",
    "TARGETS",
    "Launch",
    "Usage",
    "library_launches",
    "representative",
    "check",
    "summary",
    "format_table",
    "main",
]

#: The environment variable that selects every configuration by default.
FULL_ENV = "OPGUIDE_TRITON_TARGETS_FULL"


@dataclasses.dataclass(frozen=True)
class Target:
    """One GPU to compile for, with the properties the launch rules and the budget read.

    Attributes:
        name: the architecture, as Triton spells it (``gfx942``, ``sm_90``).
        backend: ``"hip"`` or ``"cuda"``.
        arch: ``GPUTarget``'s arch: the gfx name, or the compute capability as an int.
        warp_size: threads per warp (wavefront).
        gpu: the GPU whose counts are used below.
        capability: what ``torch.cuda.get_device_capability`` reports on it.
        sm_count: ``multi_processor_count`` (SMs or CUs) of that GPU.
        smem_per_block: the largest shared memory (LDS) one block may use, bytes.
        regs_per_thread: the most 32-bit registers (VGPRs on AMD) one thread may use.
        regfile_per_lane: AMD: VGPRs per lane of one SIMD, shared by its waves;
            NVIDIA: 32-bit registers per SM, shared by its threads.
        regs_total: the most registers one thread may use in all: on CDNA (gfx90a,
            gfx942, gfx950) 256 architectural + 256 accumulation VGPRs.
        simds: AMD: SIMDs per CU over which a workgroup's waves are spread.
    """

    name: str
    backend: str
    arch: object
    warp_size: int
    gpu: str
    capability: tuple[int, int]
    sm_count: int
    smem_per_block: int
    regs_per_thread: int
    regfile_per_lane: int
    regs_total: int
    simds: int = 4

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    def register_budget(self, num_warps: int) -> int:
        """Registers per thread (arch + accumulation VGPRs on AMD) a block of num_warps may use."""
        if self.backend == "cuda":
            # All threads of a block are resident on one SM at once.
            per_thread = self.regfile_per_lane // (num_warps * self.warp_size)
            return min(self.regs_per_thread, per_thread // 8 * 8)  # allocated in units of 8
        # A workgroup's waves are spread over the CU's SIMDs, and the waves on one
        # SIMD share its VGPR file.
        waves_per_simd = -(-num_warps // self.simds)
        return min(self.regs_total, self.regfile_per_lane // waves_per_simd)


# Sources of the numbers below:
# - AMD: LLVM's AMDGPUUsage ("Processors", and the register limits of each
#   generation), the AMD CDNA2/CDNA3/CDNA4 ISA guides and the "GPU hardware
#   specifications" table of the ROCm documentation: 64 KiB LDS per workgroup on
#   gfx90a, gfx942 and gfx1100, 160 KiB on gfx950; 512 VGPRs per lane per SIMD
#   on CDNA (256 architectural + 256 accumulation, one unified file), at most
#   256 architectural VGPRs per wave; RDNA3 (gfx1100, Navi 31) has 1536 VGPRs
#   per lane per SIMD and at most 256 per wave. ROCm reports the gfx version as
#   the capability: (9, 0), (9, 4), (9, 5), (11, 0).
# - NVIDIA: the CUDA C++ Programming Guide, "Compute Capabilities", technical
#   specifications: 255 registers per thread, 64 Ki 32-bit registers per SM,
#   shared memory per block (opt-in) 163 KiB on 8.0, 227 KiB on 9.0 and 10.0.
# - SM and CU counts: MI250X (one GCD), MI300X, MI355X, RX 7900 XTX, A100 SXM,
#   H100 SXM, B200, from the vendors' data sheets. They change which kernel a
#   long row takes (opguide.triton.launch's planners), not how a kernel compiles.
TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("gfx90a", "hip", "gfx90a", 64, "MI250X", (9, 0), 110, 64 * 1024, 256, 512, 512),
        Target("gfx942", "hip", "gfx942", 64, "MI300X", (9, 4), 304, 64 * 1024, 256, 512, 512),
        Target("gfx950", "hip", "gfx950", 64, "MI355X", (9, 5), 256, 160 * 1024, 256, 512, 512),
        Target(
            "gfx1100", "hip", "gfx1100", 32, "RX 7900 XTX", (11, 0), 96, 64 * 1024, 256, 1536, 256
        ),
        Target("sm_80", "cuda", 80, 32, "A100", (8, 0), 108, 163 * 1024, 255, 65536, 255),
        Target("sm_90", "cuda", 90, 32, "H100", (9, 0), 132, 227 * 1024, 255, 65536, 255),
        Target("sm_100", "cuda", 100, 32, "B200", (10, 0), 148, 227 * 1024, 255, 65536, 255),
    )
}

#: The library's Triton package, and its modules that hold kernels.
LIBRARY = "opguide.triton"
KERNEL_MODULES = tuple(f"{LIBRARY}.{name}" for name in ("forward", "backward", "split", "fused"))
_DTYPES = ("float32", "float16", "bfloat16")
#: Row lengths: each power of two from 1 to 2**23 (past the longest row any
#: target splits, so every kernel is reached) and the lengths 1, 2, 4 and 8
#: above it, which give every ALIGN the kernels specialise on.
ROW_LENGTHS = tuple(sorted({2**e + d for e in range(24) for d in (0, 1, 2, 4, 8)}))


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of a kernel, as the library makes it.

    Attributes:
        module: the module that defines the kernel.
        kernel: its name there (a ``@triton.jit`` or ``@triton.autotune`` object).
        args: the positional arguments: a tensor as ``"*dtype"``, an int or a float.
        options: the keyword arguments (constexprs, ``num_warps``, launch options),
            sorted by name.
    """

    module: str
    kernel: str
    args: tuple
    options: tuple

    @property
    def kw(self) -> dict:
        return dict(self.options)

    def config(self) -> str:
        """The constexprs and options that pick a compiled variant, as ``K=v`` words."""
        return " ".join(f"{k}={v}" for k, v in self.options)

    def dtypes(self) -> str:
        return ",".join(sorted({a[1:] for a in self.args if isinstance(a, str)}))


@dataclasses.dataclass
class Usage:
    """What one compile of a kernel for one target uses, and whether it fits.

    Attributes:
        kernel, config, dtypes, target: what was compiled, for which GPU.
        status: ``"ok"``, ``"spill"``, ``"over budget"`` or ``"error"``.
        regs: registers per thread (architectural VGPRs on AMD).
        agprs: AMD accumulation VGPRs (0 on NVIDIA).
        sgprs: AMD scalar registers (None on NVIDIA).
        spills: bytes spilled (NVIDIA: stores + loads) or VGPRs spilled (AMD).
        sgpr_spills: AMD: SGPRs spilled (into VGPR lanes, or memory).
        scratch: per-thread local memory: NVIDIA stack frame, AMD private segment, bytes.
        shared: shared memory (LDS) bytes per block.
        reg_budget, smem_budget: the limits checked.
        reason: why it is not ok.
        seconds: compile time (0 for a cached result).
        cached: whether it came from the cache.
    """

    kernel: str
    config: str
    dtypes: str
    target: str
    status: str = "ok"
    regs: int | None = None
    agprs: int = 0
    sgprs: int | None = None
    spills: int = 0
    sgpr_spills: int = 0
    scratch: int = 0
    shared: int = 0
    num_warps: int = 0
    reg_budget: int = 0
    smem_budget: int = 0
    reason: str = ""
    seconds: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ---------------------------------------------------------------------------
# The launch configurations the library chooses


def _pdl_choice(lib, target: Target) -> dict:
    """The options ``launch.pdl_options`` picks for an eager call on a GPU like ``target``."""
    import torch

    meta = torch.empty(1, device="meta")  # a plain tensor: pdl_options's eager case
    with (
        _pretend_gpu(target),
        _patched(lib.launch, "_PDL_CAPABLE", {}),
        _patched(lib.launch, "_PDL_ENABLED", True),
    ):
        return dict(lib.launch.pdl_options(meta))


@contextlib.contextmanager
def _patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


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
    with contextlib.ExitStack() as stack:
        for name, value in (
            ("get_device_properties", lambda *a, **k: props),
            ("get_device_capability", lambda *a, **k: target.capability),
            ("current_device", lambda: 0),
            ("_lazy_init", lambda: None),
        ):
            stack.enter_context(_patched(torch.cuda, name, value))
        # An AMD GPU is seen through a ROCm build of torch.
        hip = "7.0" if target.backend == "hip" else None
        stack.enter_context(_patched(torch.version, "hip", hip))
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

    lib = _library()
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

    seen: dict[Launch, None] = {}
    pdl = _pdl_choice(lib, target)
    ops = lib.ops
    with _pretend_gpu(target), _patched(ops, "launchable", _Recorder), FakeTensorMode():
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
                    variants = [kw]
                    if "GDC" in kw and pdl.get("GDC"):
                        variants.append({**kw, **pdl})
                    for options in variants:
                        options = _autotune_options(kernel, options)
                        for opts in options:
                            launch = Launch(
                                *_name_of(kernel),
                                tuple(describe(a) for a in args),
                                tuple(sorted(opts.items())),
                            )
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
    import importlib

    for module_name in KERNEL_MODULES:
        for name, value in vars(importlib.import_module(module_name)).items():
            if value is kernel:
                return module_name, name
    raise LookupError(f"{kernel} is not a module-level name of {', '.join(KERNEL_MODULES)}")


def _library():
    import importlib

    lib = importlib.import_module(LIBRARY)
    if lib.INTERPRET:
        raise RuntimeError(
            "guidekit.triton_targets: Triton's interpreter is selected in this process "
            "(TRITON_INTERPRET=1); check() runs the compiles in a child process instead"
        )
    return lib


def library_kernels() -> list[str]:
    """The library's kernels that a launch starts (not the Triton helpers they call).

    Read from the sources of the package's modules, without importing them
    (so it works whatever TRITON_INTERPRET is): the functions decorated with
    ``triton.jit`` that no other such function calls.
    """
    import ast
    import importlib.util

    folder = Path(importlib.util.find_spec(LIBRARY).origin).parent
    jitted = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                "jit" in ast.unparse(d) for d in node.decorator_list
            ):
                jitted[node.name] = node
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


# ---------------------------------------------------------------------------
# Compiling one launch for one target


def _cache_dir() -> Path:
    from guidekit.compile_checks import source_root

    try:
        root = source_root()
    except FileNotFoundError:
        root = Path.cwd()
    return root / "build" / "triton_targets"


def _kernel_object(launch: Launch):
    import importlib

    return _jit_function(getattr(importlib.import_module(launch.module), launch.kernel))


def _jit_function(value):
    """The JITFunction of a kernel, or None: an autotuner (or heuristics) wraps one in ``fn``."""
    import triton

    while not isinstance(value, triton.runtime.JITFunction):
        if not isinstance(value, triton.runtime.KernelInterface):
            return None
        value = value.fn
    return value


def _stand_in(arg):
    import torch

    if isinstance(arg, str) and arg.startswith("*"):
        return torch.empty(16, dtype=getattr(torch, arg[1:]))  # 64-byte aligned
    return arg


def _prepare(launch: Launch, target: Target):
    """(Usage with its budgets, cache key, compile inputs); (Usage with an error, None, None).

    Triton's own argument binder computes the specialisation (types, 16-byte
    alignment, ints equal to 1 or multiples of 16) from stand-in CPU tensors
    of the launch's dtypes, exactly as a launch on the target would.
    """
    import triton
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    usage = Usage(launch.kernel, launch.config(), launch.dtypes(), target.name)
    kernel = _kernel_object(launch)
    kw = launch.kw
    usage.num_warps = int(kw.get("num_warps", 4))
    usage.reg_budget = target.register_budget(usage.num_warps)
    usage.smem_budget = target.smem_per_block
    backend = make_backend(target.gpu_target())
    try:
        binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        bound, spec, opts = binder(*(_stand_in(a) for a in launch.args), **kw)
        options, signature, constexprs, attrs = kernel._pack_args(backend, kw, bound, spec, opts)
    except Exception as error:  # options the target's backend does not take
        usage.status, usage.reason = "error", f"{type(error).__name__}: {error}"
        return usage, None, None
    parts = (
        kernel.cache_key,
        target,
        sorted(signature.items()),
        sorted(constexprs.items()),
        sorted(attrs.items()),
        sorted(options.__dict__.items()),
        triton.__version__,
    )
    key = hashlib.sha256(repr(parts).encode()).hexdigest()
    return usage, key, (signature, constexprs, attrs, options.__dict__)


def compile_launch(launch: Launch, target: Target, cache: dict | None = None) -> Usage:
    """Compiles one launch for one target and reads its registers, spills and shared memory.

    Args:
        launch: the kernel and its arguments and options.
        target: the GPU to compile for.
        cache: results by key, updated in place (None: no cache).

    Returns:
        The :class:`Usage`; a compile error gives status ``"error"``, not an exception.
    """
    usage, key, inputs = _prepare(launch, target)
    if key is None:
        return usage
    if cache is not None and key in cache:
        return _from_cache(cache[key], usage)
    _compile(launch, target, inputs, usage)
    if cache is not None and usage.status != "error":  # an error is worth seeing again
        cache[key] = _cacheable(usage)
    return usage


def _cacheable(usage: Usage) -> dict:
    return {k: v for k, v in dataclasses.asdict(usage).items() if k in _MEASURED}


_MEASURED = ("regs", "agprs", "sgprs", "spills", "sgpr_spills", "scratch", "shared", "seconds")


def _from_cache(found: dict, usage: Usage) -> Usage:
    usage = dataclasses.replace(usage, **found)
    usage.cached = True
    target = TARGETS[usage.target]
    _judge(usage, target)
    return usage


def _compile(launch: Launch, target: Target, inputs, usage: Usage) -> None:
    import triton
    from triton.compiler import ASTSource

    signature, constexprs, attrs, options = inputs
    kernel = _kernel_object(launch)
    start = time.perf_counter()
    log = io.StringIO()
    try:
        with _ptxas_log(), contextlib.redirect_stdout(log):
            compiled = triton.compile(
                ASTSource(kernel, signature, constexprs, attrs),
                target=target.gpu_target(),
                options=options,
            )
    except Exception as error:
        usage.status = "error"
        usage.reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
        usage.seconds = time.perf_counter() - start
        return
    usage.seconds = time.perf_counter() - start
    usage.shared = int(compiled.metadata.shared)
    if target.backend == "hip":
        _read_amdgcn(compiled.asm["amdgcn"], usage)
    else:
        _read_ptxas(log.getvalue(), compiled.asm["ptx"], target, usage)
    _judge(usage, target)


@contextlib.contextmanager
def _ptxas_log():
    """Triton prints the log of ``ptxas -v`` (registers, spills) after each cubin."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is None:
        yield
        return
    # Compiled again even when Triton's cache holds the kernel, so that the
    # log is always there (this module keeps its own cache of the results).
    with (
        _patched(knobs.nvidia, "dump_ptxas_log", True),
        _patched(knobs.compilation, "always_compile", True),
    ):
        yield


def _read_amdgcn(asm: str, usage: Usage) -> None:
    """Reads the kernel's register counts and spills from the AMDGPU assembly.

    ``.vgpr_count`` of the metadata is the unified total; the ``.set`` lines
    split it into architectural VGPRs and AGPRs (which LLVM also uses as
    spill slots for VGPRs on CDNA, without memory).
    """

    def field(pattern: str) -> int | None:
        found = re.search(pattern, asm, re.M)
        return int(found.group(1)) if found else None

    total = field(r"^\s*\.vgpr_count:\s+(\d+)") or 0
    usage.regs = field(r"^\s*\.set\s+\S+\.num_vgpr,\s*(\d+)")
    usage.agprs = field(r"^\s*\.set\s+\S+\.num_agpr,\s*(\d+)") or 0
    if usage.regs is None:
        usage.regs, usage.agprs = total, 0
    usage.sgprs = field(r"^\s*\.sgpr_count:\s+(\d+)")
    usage.spills = field(r"^\s*\.vgpr_spill_count:\s+(\d+)") or 0
    usage.sgpr_spills = field(r"^\s*\.sgpr_spill_count:\s+(\d+)") or 0
    usage.scratch = field(r"^\s*\.private_segment_fixed_size:\s+(\d+)") or 0


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _read_ptxas(log: str, ptx: str, target: Target, usage: Usage) -> None:
    """Reads registers and spills from ``ptxas -v``: Triton's log, else ptxas run again."""
    if not _PTXAS_REGS.search(log):
        log = _run_ptxas(ptx, target)
    regs = _PTXAS_REGS.findall(log)
    spills = _PTXAS_SPILLS.findall(log)
    usage.regs = int(regs[-1]) if regs else None
    usage.spills = sum(int(st) + int(ld) for st, ld in spills[-1:])
    stack = re.findall(r"(\d+) bytes stack frame", log)
    usage.scratch = int(stack[-1]) if stack else 0


def _run_ptxas(ptx: str, target: Target) -> str:
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as folder:
        src = Path(folder) / "k.ptx"
        src.write_text(ptx)
        arch = sm_arch_from_capability(target.arch)
        done = subprocess.run(
            [
                get_ptxas(target.arch).path,
                "-v",
                f"--gpu-name={arch}",
                str(src),
                "-o",
                str(src) + ".o",
            ],
            capture_output=True,
            text=True,
        )
    return done.stdout + done.stderr


def _judge(usage: Usage, target: Target) -> None:
    reasons = []
    usage.status = "ok"
    if usage.spills or usage.sgpr_spills or usage.scratch:
        usage.status = "spill"
        unit = "VGPRs" if target.backend == "hip" else "B"
        words = f"spills {usage.spills} {unit}, scratch {usage.scratch} B"
        if usage.sgpr_spills:
            where = "to VGPR lanes" if not usage.scratch else "to VGPR lanes or memory"
            words += f", {usage.sgpr_spills} SGPRs spilled {where}"
        reasons.append(words)
    regs = (usage.regs or 0) + usage.agprs
    if usage.regs is None:
        reasons.append("register count not found")
    elif usage.regs > target.regs_per_thread or regs > usage.reg_budget:
        reasons.append(f"{regs} registers > {usage.reg_budget} for {usage.num_warps} warps")
    if usage.shared > target.smem_per_block:
        reasons.append(f"{usage.shared} B shared > {target.smem_per_block}")
    if reasons and usage.status == "ok":
        usage.status = "over budget"
    usage.reason = "; ".join(reasons)


# ---------------------------------------------------------------------------
# The check, in this process or a child


def _can_compile_here() -> bool:
    # opguide selects the interpreter on a machine without a GPU unless
    # TRITON_INTERPRET already has a value.
    return os.environ.get("TRITON_INTERPRET") == "0"


def _child_env() -> dict:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"  # a value: opguide keeps one already set
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default, said explicitly
    env.setdefault("TRITON_CACHE_DIR", str(_cache_dir() / "triton_cache"))
    return env


def check(
    targets: Sequence[str] = tuple(TARGETS),
    full: bool | None = None,
    kernels: Sequence[str] | None = None,
    launches: Sequence[Launch] | None = None,
    jobs: int | None = None,
) -> list[Usage]:
    """Compiles the library's kernels (or ``launches``) for ``targets`` and checks each.

    Args:
        targets: names from :data:`TARGETS`.
        full: every configuration (True) or :func:`representative` ones (False);
            None reads ``OPGUIDE_TRITON_TARGETS_FULL``.
        kernels: only these kernels of the library (names), if given.
        launches: these launches instead of the library's, each compiled for every target.
        jobs: compiles at once (default: the CPU count).

    Returns:
        One :class:`Usage` per kernel, configuration and target.
    """
    if full is None:
        full = os.environ.get(FULL_ENV, "0") == "1"
    request = {
        "targets": list(targets),
        "full": bool(full),
        "kernels": list(kernels) if kernels else None,
        "launches": [dataclasses.asdict(la) for la in launches] if launches else None,
        "jobs": jobs,
    }
    if not _can_compile_here():
        done = subprocess.run(
            [sys.executable, "-m", "guidekit.triton_targets", "--request", json.dumps(request)],
            capture_output=True,
            text=True,
            env=_child_env(),
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"guidekit.triton_targets child failed ({done.returncode}):\n{done.stderr[-4000:]}"
            )
        return [Usage(**u) for u in json.loads(done.stdout.splitlines()[-1])]
    return _check_here(request)


def _launch_from(d: dict) -> Launch:
    return Launch(
        d["module"],
        d["kernel"],
        tuple(d["args"]),
        tuple((k, v) for k, v in d["options"]),
    )


def _check_here(request: dict) -> list[Usage]:
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    todo: list[tuple[Launch, str]] = []
    for name in request["targets"]:
        target = TARGETS[name]
        if request["launches"]:
            chosen = [_launch_from(d) for d in request["launches"]]
        else:
            chosen = library_launches(target)
            if request["kernels"]:
                chosen = [la for la in chosen if la.kernel in request["kernels"]]
            if not request["full"]:
                chosen = representative(chosen)
        todo += [(la, name) for la in chosen]
    cache_file = _cache_dir() / "results.json"
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    results: list[Usage] = []
    missing: dict[str, list[int]] = {}  # key -> the results it fills
    work: list[tuple] = []
    for launch, name in todo:
        usage, key, inputs = _prepare(launch, TARGETS[name])
        results.append(usage)
        if key is None:
            continue
        if key in cache:
            results[-1] = _from_cache(cache[key], usage)
        elif key in missing:
            missing[key].append(len(results) - 1)
        else:
            missing[key] = [len(results) - 1]
            work.append((key, launch, name, inputs))
    jobs = max(1, min(request.get("jobs") or os.cpu_count() or 1, len(work)))
    chunks = [work[i : i + 8] for i in range(0, len(work), 8)]
    saved = time.monotonic()

    def take(done: list[tuple[str, Usage]]) -> None:
        nonlocal saved
        for key, usage in done:
            for i in missing[key]:
                results[i] = usage
            if usage.status != "error":  # an error is worth seeing again
                cache[key] = _cacheable(usage)
        if time.monotonic() - saved > 30:  # a long run keeps what it has done
            _save(cache_file, cache)
            saved = time.monotonic()

    if jobs > 1:
        import concurrent.futures
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            for done in pool.map(_compile_chunk, chunks):
                take(done)
    else:
        for chunk in chunks:
            take(_compile_chunk(chunk))
    _save(cache_file, cache)
    return results


def _save(cache_file: Path, cache: dict) -> None:
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cache))
    tmp.replace(cache_file)


def _compile_chunk(chunk) -> list[tuple[str, Usage]]:
    os.environ["TRITON_INTERPRET"] = "0"  # a spawned worker imports opguide afresh
    out = []
    for key, launch, name, inputs in chunk:
        target = TARGETS[name]
        usage = Usage(launch.kernel, launch.config(), launch.dtypes(), name)
        usage.num_warps = int(launch.kw.get("num_warps", 4))
        usage.reg_budget = target.register_budget(usage.num_warps)
        usage.smem_budget = target.smem_per_block
        _compile(launch, target, inputs, usage)
        out.append((key, usage))
    return out


# ---------------------------------------------------------------------------
# Reporting


def summary(results: Sequence[Usage]) -> str:
    """One line: how many compiles, kernels and targets, and how many failed and why."""
    bad = [u for u in results if not u.ok]
    kinds = {s: sum(u.status == s for u in bad) for s in ("spill", "over budget", "error")}
    kernels = len({u.kernel for u in results})
    targets = len({u.target for u in results})
    words = ", ".join(f"{v} {k}" for k, v in kinds.items())
    return (
        f"{len(results)} compiles ({kernels} kernels x {targets} targets): "
        f"{len(results) - len(bad)} ok, {words}"
    )


def format_table(results: Sequence[Usage], width: int = 60) -> str:
    """A line per compile: kernel, target, configuration, registers, spills, shared memory."""
    head = (
        f"{'kernel':32} {'target':8} {'regs':>7} {'sgpr':>4} {'spill':>5} {'shared':>7} "
        f"{'budget':>11}  {'status':11} config"
    )
    lines = [head]
    for u in results:
        regs = "-" if u.regs is None else f"{u.regs}+{u.agprs}" if u.agprs else f"{u.regs}"
        sgpr = "" if u.sgprs is None else str(u.sgprs)
        budget = f"{u.reg_budget}r/{u.smem_budget // 1024}K"
        config = f"{u.dtypes} {u.config}"
        if len(config) > width:
            config = config[: width - 3] + "..."
        status = u.status if u.ok else f"{u.status}: {u.reason}"
        lines.append(
            f"{u.kernel:32} {u.target:8} {regs:>7} {sgpr:>4} {u.spills + u.sgpr_spills:>5} "
            f"{u.shared:>7} "
            f"{budget:>11}  {status:11} {config}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m guidekit.triton_targets``: the table and the summary; 1 if any compile fails."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m guidekit.triton_targets", description=__doc__)
    parser.add_argument("--target", action="append", choices=list(TARGETS), help="repeatable")
    parser.add_argument("--kernel", action="append", help="a kernel name; repeatable")
    parser.add_argument("--full", action="store_true", default=None, help="every configuration")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--quiet", action="store_true", help="failures and the summary only")
    parser.add_argument("--request", help=argparse.SUPPRESS)  # check()'s child process
    args = parser.parse_args(argv)
    if "triton" not in sys.modules:  # nothing compiled for the interpreter yet: compile here
        os.environ["TRITON_INTERPRET"] = "0"
        os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        os.environ.setdefault("TRITON_CACHE_DIR", str(_cache_dir() / "triton_cache"))
    if args.request is not None:
        results = _check_here(json.loads(args.request))
        print(json.dumps([dataclasses.asdict(u) for u in results]))
        return 0
    start = time.perf_counter()
    results = check(
        targets=args.target or tuple(TARGETS), full=args.full, kernels=args.kernel, jobs=args.jobs
    )
    shown = [u for u in results if not u.ok] if args.quiet else results
    print(format_table(shown))
    compiled = sum(not u.cached and u.seconds > 0 for u in results)
    print(
        f"{summary(results)}; {compiled} compiled, {len(results) - compiled} cached, "
        f"{time.perf_counter() - start:.0f} s"
    )
    return 0 if all(u.ok for u in results) else 1


if __name__ == "__main__":
    sys.exit(main())
