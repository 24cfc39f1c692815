"""Compiling one launch for one target, and reading its registers, spills and shared memory."""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import subprocess
import time
from pathlib import Path

from .targets import Launch, Target, Usage


def _cache_dir() -> Path:
    from guidekit.compile_checks import source_root

    try:
        root = source_root()
    except FileNotFoundError:
        root = Path.cwd()
    return root / "build" / "triton_targets"


def _kernel_object(launch: Launch):
    """The launch's JITFunction, or None: an autotuner (or heuristics) wraps one in ``fn``."""
    import importlib

    import triton

    value = getattr(importlib.import_module(launch.module), launch.kernel)
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


def _new_usage(launch: Launch, target: Target) -> Usage:
    """An empty :class:`Usage` of ``launch`` on ``target``, with the target's budgets."""
    usage = Usage(launch.kernel, launch.config(), launch.dtypes(), target.name)
    usage.num_warps = int(launch.kw.get("num_warps", 4))
    usage.reg_budget = target.register_budget(usage.num_warps)
    usage.smem_budget = target.smem_per_block
    return usage


def _prepare(launch: Launch, target: Target):
    """(Usage with its budgets, cache key, compile inputs); (Usage with an error, None, None).

    Triton's own argument binder computes the specialisation (types, 16-byte
    alignment, ints equal to 1 or multiples of 16) from stand-in CPU tensors
    of the launch's dtypes, exactly as a launch on the target would.
    """
    import triton
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    usage = _new_usage(launch, target)
    kernel, kw = _kernel_object(launch), launch.kw
    backend = make_backend(target.gpu_target())
    try:
        binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        bound, spec, opts = binder(*(_stand_in(a) for a in launch.args), **kw)
        options, signature, constexprs, attrs = kernel._pack_args(backend, kw, bound, spec, opts)
    except Exception as error:  # options the target's backend does not take
        usage.status, usage.reason = "error", f"{type(error).__name__}: {error}"
        return usage, None, None
    tables = (signature, constexprs, attrs, options.__dict__)
    parts = (kernel.cache_key, target, *(sorted(t.items()) for t in tables), triton.__version__)
    key = hashlib.sha256(repr(parts).encode()).hexdigest()
    return usage, key, tables


_MEASURED = ("regs", "agprs", "sgprs", "spills", "sgpr_spills", "scratch", "shared", "seconds")


def _compile(launch: Launch, target: Target, inputs) -> Usage:
    import triton
    from triton.compiler import ASTSource

    usage = _new_usage(launch, target)
    signature, constexprs, attrs, options = inputs
    kernel = _kernel_object(launch)
    start = time.perf_counter()
    log = io.StringIO()
    try:
        source = ASTSource(kernel, signature, constexprs, attrs)
        with _ptxas_log(), contextlib.redirect_stdout(log):
            compiled = triton.compile(source, target=target.gpu_target(), options=options)
    except Exception as error:
        usage.status = "error"
        usage.reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
        usage.seconds = time.perf_counter() - start
        return usage
    usage.seconds = time.perf_counter() - start
    usage.shared = int(compiled.metadata.shared)
    if target.backend == "hip":
        _read_amdgcn(compiled.asm["amdgcn"], usage)
    else:
        _read_ptxas(log.getvalue(), compiled.asm["ptx"], target, usage)
    _judge(usage, target)
    return usage


@contextlib.contextmanager
def _ptxas_log():
    """Triton prints the log of ``ptxas -v`` (registers, spills) after each cubin."""
    from triton import knobs

    # Compiled again even when Triton's cache holds the kernel, so that the
    # log is always there (this module keeps its own cache of the results).
    old = knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile
    knobs.nvidia.dump_ptxas_log = knobs.compilation.always_compile = True
    try:
        yield
    finally:
        knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = old


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
        command = [get_ptxas(target.arch).path, "-v", f"--gpu-name={arch}", str(src)]
        done = subprocess.run([*command, "-o", f"{src}.o"], capture_output=True, text=True)
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
