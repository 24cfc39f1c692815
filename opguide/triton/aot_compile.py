"""Compiling the launches of :mod:`opguide.triton.aot_launches`, on a process pool, into a cache.

:func:`triton.compile` of an :class:`triton.compiler.ASTSource` for a
:class:`triton.backends.compiler.GPUTarget`: Triton's public compile API,
which needs no GPU. :mod:`opguide.triton.aot` documents the route.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from .aot_launches import KERNELS, OPERATOR_MODULES, POINTERS, Launch, kernel_function, target

_MAGIC_ELF = b"\x7fELF"


def compile_inputs(la: Launch):
    """(kernel, signature, constexprs, attrs, options) of :func:`triton.compile` for ``la``.

    What Triton's JIT binds for the same launch on tensors whose pointers are
    16-byte aligned (as the C++ route requires of its inputs), with M and P
    (``do_not_specialize``) below 2**31:

    * pointers typed by the tensors the JIT route passes: x's dtype, float32
      for inv_rms and grad_weight's partial sums (the forward without
      inv_rms passes y, of x's dtype, and never reads it), each with
      ``tt.divisibility`` 16;
    * M and P ``i32``; N ``i32``, with ``tt.divisibility`` 16 when its spec is
      ``D``, or the constexpr 1 when it is ``1``; eps ``fp32``;
    * options: the plan's ``num_warps``, ``enable_fp_fusion`` (Triton's
      default, said explicitly) and ``launch_pdl`` where GDC is set.

    On AMD the JIT also marks pointers to storage of at most 2 GiB
    (``tt.pointer_range`` 32, for buffer loads); artifacts are compiled
    without it, so that they serve tensors of any size.
    """
    fn = kernel_function(la.kernel)
    if not hasattr(fn, "arg_names") or type(fn).__name__ != "JITFunction":
        raise RuntimeError(
            "opguide.triton.aot: the kernels are interpreted functions in this process "
            "(TRITON_INTERPRET=1); run it with TRITON_INTERPRET=0"
        )
    x = f"*{la.dtype}"
    cx = dict(la.constexprs)
    rms_norm = {
        "rms_norm_forward": {
            "x_ptr": x, "w_ptr": x, "y_ptr": x,
            "inv_rms_ptr": "*fp32" if cx.get("STORE_INV") else x,
        },
        "rms_norm_backward": {
            "grad_y_ptr": x, "x_ptr": x, "w_ptr": x, "inv_rms_ptr": "*fp32",
            "grad_x_ptr": x, "grad_weight_partial_ptr": "*fp32",
        },
        "grad_weight_sum": {"partial_ptr": "*fp32", "grad_weight_ptr": x},
    }  # fmt: skip
    if la.kernel in rms_norm:
        pointers = rms_norm[la.kernel]
    else:  # an operator's (its aot_module's KERNELS)
        pointers = {k: x if v == "x" else v for k, v in POINTERS[la.kernel].items()}
    divisible = [["tt.divisibility", 16]]
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in pointers:
            signature[name], attrs[(i,)] = pointers[name], divisible
        elif name in ("M", "P"):
            signature[name] = "i32"
        elif name == "N" and la.spec == "1":
            signature[name], constexprs[(i,)] = "constexpr", 1
        elif name == "N":
            signature[name] = "i32"
            if la.spec == "D":
                attrs[(i,)] = divisible
        elif name == "eps":
            signature[name] = "fp32"
        elif name in cx:
            signature[name], constexprs[(i,)] = "constexpr", cx[name]
        else:
            raise RuntimeError(f"opguide.triton.aot: {fn.__name__} has an unknown parameter {name}")
    options = {"num_warps": la.num_warps, "enable_fp_fusion": True}
    if la.launch_pdl:
        options["launch_pdl"] = True
    return fn, signature, constexprs, attrs, options


def _source_hash() -> str:
    """Hash of what a compiled image depends on besides its key and Triton's version.

    The kernels' modules (those of ``KERNELS``), the prologue they share,
    aot_launches.py, the operators' ``aot_module`` and this file (the
    signatures and the compile options), and the ``TRITON_`` environment
    variables (another ptxas, for one).
    """
    import importlib.util

    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in ("prologue.py", "aot_launches.py", "aot_compile.py"):
        digest.update((here / name).read_bytes())
    # The operators' kernels and launches.
    modules = sorted({m for m, _ in KERNELS.values()} | {m.__name__ for m in OPERATOR_MODULES})
    for name in modules:
        digest.update(Path(importlib.util.find_spec(name).origin).read_bytes())
    # Not these: where Triton keeps files, and a default that the options set.
    skip = ("TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_") and k not in skip)
    digest.update(repr(env).encode())
    return digest.hexdigest()


def _cache_name(la: Launch, source_hash: str) -> str:
    import triton

    return hashlib.sha256(f"{la.key}|{triton.__version__}|{source_hash}".encode()).hexdigest()[:32]


@contextlib.contextmanager
def _no_line_info():
    """Compiles without line tables, then puts Triton's settings back as they were.

    Line tables serve profilers' source views: they make images larger and
    change no instruction. On one process the compiles run in the caller:
    the knobs' ``scope`` restores the setting and its environment variable.
    """
    import triton

    with triton.knobs.compilation.scope():
        triton.knobs.compilation.disable_line_info = True
        yield


def _compile_chunk(chunk: list[tuple[Launch, str]], cache: str) -> list[str]:
    """Compiles each (launch, cache name) into ``cache``; returns the keys done."""
    done = []
    with _no_line_info():
        for la, name in chunk:
            _compile_one(la, Path(cache) / name)
            done.append(la.key)
    return done


def _compile_one(la: Launch, stem: Path) -> None:
    """Compiles ``la``; writes its image to ``stem.img`` and its metadata to ``stem.json``."""
    import triton
    from triton.compiler import ASTSource

    fn, signature, constexprs, attrs, options = compile_inputs(la)
    gpu = target(la.target)
    try:
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs, attrs),
            target=gpu.gpu_target(),
            options=options,
        )
    except Exception as error:
        raise RuntimeError(
            f"opguide.triton.aot: compiling {la.key} failed: {type(error).__name__}: {error}"
        ) from error
    md = compiled.metadata
    image = compiled.asm["cubin" if gpu.backend == "cuda" else "hsaco"]
    # The C++ route passes null scratch pointers: a kernel that needs scratch cannot run.
    scratch = (getattr(md, "global_scratch_size", 0), getattr(md, "profile_scratch_size", 0))
    if any(scratch) or not image.startswith(_MAGIC_ELF):
        raise RuntimeError(
            f"opguide.triton.aot: {la.key} compiled to an image the C++ route cannot "
            f"launch (scratch sizes {scratch}, image starts {image[:4]!r})"
        )
    meta = {
        "key": la.key,
        "target": la.target,
        "function": md.name,
        "num_warps": int(md.num_warps),
        "threads_per_warp": int(getattr(md, "warp_size", gpu.warp_size)),
        "shared": int(md.shared),
        "launch_pdl": bool(getattr(md, "launch_pdl", False)),
    }
    _write(stem.with_suffix(".img"), image)
    _write(stem.with_suffix(".json"), json.dumps(meta).encode())


def _write(path: Path, data: bytes) -> None:
    """Writes ``data`` whole or not at all (another process may read the file)."""
    tmp = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def compile_launches(
    todo: Sequence[Launch], cache: Path, jobs: int | None = None, log=print, stats=None
) -> dict[str, tuple[dict, bytes]]:
    """Compiles ``todo`` (those not in ``cache`` yet) on ``jobs`` processes.

    Args:
        todo: the launches.
        cache: a folder of compiled images, named by key, Triton's version
            and :func:`_source_hash`.
        jobs: processes that compile at once (default: the CPU count).
        log: where the progress lines go (``triton aot sm_90: 300/640``).
        stats: a dict to fill with ``launches``, ``compiled`` (those not
            cached), ``jobs`` and ``seconds`` (the wall time of the compiles).

    Returns:
        key -> (metadata, image) of every launch.

    Raises:
        RuntimeError: naming the launch whose compile failed.
    """
    import concurrent.futures
    import multiprocessing

    cache.mkdir(parents=True, exist_ok=True)
    source_hash = _source_hash()
    names = {la.key: _cache_name(la, source_hash) for la in todo}
    missing = [la for la in todo if not (cache / f"{names[la.key]}.json").exists()]
    per_target = collections.Counter(la.target for la in todo)
    done = per_target - collections.Counter(la.target for la in missing)
    start = time.perf_counter()
    for t, count in per_target.items():
        log(f"triton aot {t}: {done[t]}/{count} cached, compiling {count - done[t]}")
    chunks = [[(la, names[la.key]) for la in missing[i : i + 4]] for i in range(0, len(missing), 4)]
    shown = {t: done[t] for t in per_target}
    step = max(1, len(missing) // 20)

    def take(keys: list[str]) -> None:
        for k in keys:
            done[k.split("|")[1]] += 1
        for t in per_target:
            if done[t] - shown[t] >= step or (done[t] == per_target[t] != shown[t]):
                log(f"triton aot {t}: {done[t]}/{per_target[t]}")
                shown[t] = done[t]

    jobs = max(1, min(jobs or os.cpu_count() or 1, len(chunks)))
    if jobs == 1:
        for chunk in chunks:
            take(_compile_chunk(chunk, str(cache)))
    elif chunks:
        # Spawned workers: a forked copy of a process that runs threads may hang.
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = [pool.submit(_compile_chunk, chunk, str(cache)) for chunk in chunks]
            try:
                for future in concurrent.futures.as_completed(futures):
                    take(future.result())
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    seconds = time.perf_counter() - start
    if missing:
        log(f"triton aot: compiled {len(missing)} in {seconds:.0f} s")
    if stats is not None:
        stats.update(launches=len(todo), compiled=len(missing), jobs=jobs, seconds=seconds)
    result = {}
    for la in todo:
        meta = json.loads((cache / f"{names[la.key]}.json").read_text())
        result[la.key] = (meta, (cache / f"{names[la.key]}.img").read_bytes())
    return result
