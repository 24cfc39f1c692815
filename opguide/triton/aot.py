"""The RMSNorm Triton kernels compiled ahead of time, for GPUs named at build time.

The JIT route compiles a kernel the first time a launch needs it, on the
machine that runs it. This module compiles, on the build machine and
without a GPU, every launch that the C++ route of ``csrc/triton_aot/`` can
ask for on a named target, through Triton's public compile API
(:func:`triton.compile` of a :class:`triton.compiler.ASTSource` for a
:class:`triton.backends.compiler.GPUTarget`), and writes what the build
embeds in the extension:

* each compiled image (a cubin or a hsaco) and, per target, one blob of them all;
* ``manifest.json``: per artifact its :func:`key`, target, symbol, warps,
  threads per warp, dynamic shared memory, programmatic dependent launch,
  image file, offset in the blob and size;
* ``triton_aot_artifacts.cpp``: the table of ``csrc/triton_aot/artifacts.h``
  (``artifacts()`` and ``artifact_count()``), the blobs included by the
  assembler (``.incbin``), so that tens of megabytes compile in a second.

The launches come from the library's own planners (:mod:`opguide.triton.launch`),
called with the interpreter off on a model of the target's device: the
kernels ``rms_norm_forward`` (the Registers plans, rows of up to
:data:`~opguide.triton.launch.MAX_REGISTER_ROW` elements, with and without
inv_rms), ``rms_norm_backward`` (rows of up to
:data:`~opguide.triton.launch.MAX_REGISTER_ROW_BACKWARD`) and
``grad_weight_sum`` (its second stage), for float32, float16 and bfloat16.
A launch without an artifact (a longer row, another device, a misaligned
pointer) takes the JIT route.

``setup.py`` runs this module for the targets a CUDA or ROCm build names;
it also runs by hand::

    python -m opguide.triton.aot --targets sm_90,gfx942 --out build/triton_aot

(or ``python opguide/triton/aot.py ...`` in a source tree whose extension is
not built yet).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

#: The kernels compiled ahead of time: the key's name -> (module, kernel object's name).
KERNELS = {
    "rms_norm_forward": ("forward", "_rms_norm_forward_kernel"),
    "rms_norm_backward": ("backward", "_rms_norm_backward_kernel"),
    "grad_weight_sum": ("backward", "_grad_weight_sum_kernel"),
}
#: Each kernel's constexpr parameters, in its parameter order: the key lists them so.
CONSTEXPRS = {
    "rms_norm_forward": ("BLOCK_N", "ROWS", "STORE_INV", "GDC", "ALIGN"),
    "rms_norm_backward": ("BLOCK_N", "ROWS", "STAGES", "GDC", "ALIGN"),
    "grad_weight_sum": ("BLOCK_P", "BLOCK_N", "GDC", "ALIGN"),
}
#: The dtypes of x (and the weight), as the key and Triton's signatures spell them.
DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

# Opt-in shared memory per block, bytes: what
# torch.cuda.get_device_properties(...).shared_memory_per_block_optin reports
# on each target (the CUDA C++ Programming Guide's "Technical Specifications per
# Compute Capability": 163 KiB on 8.0 and 8.7, 99 KiB on 8.6, 8.9 and 12.0,
# 227 KiB on 9.0 and 10.0; the LDS per workgroup of the ROCm "GPU hardware
# specifications" on AMD). It sets the backward's STAGES, and nothing else in
# the plans this module compiles reads the device (the SM count sets only grids).
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

_MAGIC_ELF = b"\x7fELF"
# Each image starts on a 64-byte boundary of its target's blob.
_IMAGE_ALIGN = 64


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


def _library():
    """(launch, forward, backward): the planners' module and the kernels' modules."""
    if not __package__:  # run as a file, in a source tree: see _enter_source_tree
        _enter_source_tree()
    from . import backward, forward, launch

    return launch, forward, backward


def _enter_source_tree() -> None:
    """Makes ``opguide.triton``'s modules importable without running the packages' ``__init__``.

    ``opguide/__init__.py`` loads the compiled extension, which ``setup.py``
    is about to build when it runs this file; the planners and the kernels
    need neither it nor the operators.
    """
    here = Path(__file__).resolve().parent
    if sys.path and Path(sys.path[0]).resolve() == here:  # python opguide/triton/aot.py
        del sys.path[0]  # its neighbours are the package's modules, not top-level ones
    for name, folder in (("opguide", here.parent), ("opguide.triton", here)):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
    globals()["__package__"] = "opguide.triton"


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

    gpu = target(target_name)
    launch, _, _ = _library()
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
    no constexpr; one row and many are both planned all the same.

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
        lengths = sorted(set(cols)) if cols is not None else None
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for n in lengths or range(1, launch.MAX_REGISTER_ROW + 1):
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
    return [found[k] for k in sorted(found)]


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
    _, forward, backward = _library()
    module = {"forward": forward, "backward": backward}[KERNELS[la.kernel][0]]
    fn = getattr(module, KERNELS[la.kernel][1])
    if not hasattr(fn, "arg_names") or type(fn).__name__ != "JITFunction":
        raise RuntimeError(
            "opguide.triton.aot: the kernels are interpreted functions in this process "
            "(TRITON_INTERPRET=1); run it with TRITON_INTERPRET=0"
        )
    x = f"*{la.dtype}"
    cx = dict(la.constexprs)
    pointers = {
        "rms_norm_forward": {
            "x_ptr": x, "w_ptr": x, "y_ptr": x,
            "inv_rms_ptr": "*fp32" if cx.get("STORE_INV") else x,
        },
        "rms_norm_backward": {
            "grad_y_ptr": x, "x_ptr": x, "w_ptr": x, "inv_rms_ptr": "*fp32",
            "grad_x_ptr": x, "grad_weight_partial_ptr": "*fp32",
        },
        "grad_weight_sum": {"partial_ptr": "*fp32", "grad_weight_ptr": x},
    }[la.kernel]  # fmt: skip
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

    The kernels' files, this file (the compile options), and the ``TRITON_``
    environment variables (another ptxas, for one).
    """
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in ("forward.py", "backward.py", "prologue.py", "aot.py"):
        digest.update((here / name).read_bytes())
    # Not these: where Triton keeps files, and a default that the options set.
    skip = ("TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_") and k not in skip)
    digest.update(repr(env).encode())
    return digest.hexdigest()


def _cache_name(la: Launch, source_hash: str) -> str:
    import triton

    return hashlib.sha256(f"{la.key}|{triton.__version__}|{source_hash}".encode()).hexdigest()[:32]


def _compile_chunk(chunk: list[tuple[Launch, str]], cache: str) -> list[str]:
    """Compiles each (launch, cache name) into ``cache``; returns the keys done."""
    import triton
    from triton.compiler import ASTSource

    os.environ["TRITON_INTERPRET"] = "0"  # a spawned worker imports triton afresh
    # Line tables make images about half as large again, and change no instruction.
    triton.knobs.compilation.disable_line_info = True
    done = []
    for la, name in chunk:
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
        folder = Path(cache)
        _write(folder / f"{name}.img", image)
        _write(folder / f"{name}.json", json.dumps(meta).encode())
        done.append(la.key)
    return done


def _write(path: Path, data: bytes) -> None:
    """Writes ``data`` whole or not at all (another process may read the file)."""
    tmp = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def compile_launches(
    todo: Sequence[Launch], cache: Path, jobs: int | None = None, log=print
) -> dict[str, tuple[dict, bytes]]:
    """Compiles ``todo`` (those not in ``cache`` yet) on ``jobs`` processes.

    Args:
        todo: the launches.
        cache: a folder of compiled images, named by key, Triton's version
            and :func:`_source_hash`.
        jobs: processes that compile at once (default: the CPU count).
        log: where the progress lines go (``triton aot sm_90: 300/640``).

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
    if missing:
        log(f"triton aot: compiled {len(missing)} in {time.perf_counter() - start:.0f} s")
    result = {}
    for la in todo:
        meta = json.loads((cache / f"{names[la.key]}.json").read_text())
        result[la.key] = (meta, (cache / f"{names[la.key]}.img").read_bytes())
    return result


def write_outputs(out: Path, targets: Sequence[str], compiled: Mapping[str, tuple[dict, bytes]]):
    """Writes the images, each target's blob, ``manifest.json`` and ``triton_aot_artifacts.cpp``.

    Files are rewritten only when their bytes change, so that a build that
    compiles nothing new recompiles no C++.

    Returns:
        The path of ``triton_aot_artifacts.cpp``.
    """
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"triton": _triton_version(), "targets": list(targets), "artifacts": []}
    rows, blobs = [], []
    for t in targets:
        blob = bytearray()
        suffix = "cubin" if t.startswith("sm_") else "hsaco"
        for k in sorted(k for k in compiled if k.split("|")[1] == t):
            meta, image = compiled[k]
            digest = hashlib.sha256(k.encode()).hexdigest()[:16]
            image_file = f"images/{t}/{k.split('|')[0]}-{digest}.{suffix}"
            _write_if_changed(out / image_file, image)
            blob += b"\0" * (-len(blob) % _IMAGE_ALIGN)
            entry = {**meta, "image": image_file, "offset": len(blob), "size": len(image)}
            blob += image
            manifest["artifacts"].append(entry)
            rows.append((entry, _symbol(t)))
        _write_if_changed(out / f"{t}.bin", bytes(blob))
        blobs.append((t, out / f"{t}.bin", hashlib.sha256(blob).hexdigest()))
    manifest["artifacts"].sort(key=lambda e: e["key"])
    rows.sort(key=lambda r: r[0]["key"])
    _write_if_changed(out / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    cpp = out / "triton_aot_artifacts.cpp"
    _write_if_changed(cpp, _cpp(rows, blobs).encode())
    return cpp


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, data)


def _symbol(target_name: str) -> str:
    return f"opguide_triton_aot_{target_name}"


def _cpp(rows: list[tuple[dict, str]], blobs: list[tuple[str, Path, str]]) -> str:
    """The C++ of the table: each target's blob by ``.incbin``, then one Artifact per row."""
    lines = [
        "// Generated by opguide/triton/aot.py: the Triton kernels compiled ahead of time.",
        '#include "triton_aot/artifacts.h"',
        "",
    ]
    for t, path, digest in blobs:
        # The digest changes this file when the blob changes, so the build recompiles it.
        lines += [
            f"// {t}: {path.name}, sha256 {digest}",
            'asm(".pushsection .rodata\\n"',
            f'    ".balign {_IMAGE_ALIGN}\\n"',
            f'    ".globl {_symbol(t)}\\n"',
            f'    ".hidden {_symbol(t)}\\n"',
            f'    "{_symbol(t)}:\\n"',
            f'    ".incbin \\"{_asm_path(path)}\\"\\n"',
            '    ".popsection\\n");',
            f'extern "C" const unsigned char {_symbol(t)}[];',
            "",
        ]
    lines += ["namespace opguide::triton_aot {", ""]
    if rows:
        lines.append("static const Artifact kArtifacts[] = {")
        for e, symbol in rows:
            strings = f'"{e["key"]}", "{e["target"]}", "{e["function"]}"'
            image = f"{symbol} + {e['offset']}, {e['size']}"
            numbers = f"{e['num_warps']}, {e['threads_per_warp']}, {e['shared']}"
            lines.append(f"    {{{strings}, {image}, {numbers}, {str(e['launch_pdl']).lower()}}},")
        lines += [
            "};",
            "",
            "const Artifact* artifacts() { return kArtifacts; }",
            "size_t artifact_count() { return sizeof(kArtifacts) / sizeof(kArtifacts[0]); }",
        ]
    else:
        lines += [
            "const Artifact* artifacts() { return nullptr; }",
            "size_t artifact_count() { return 0; }",
        ]
    lines += ["", "}  // namespace opguide::triton_aot", ""]
    return "\n".join(lines)


def _asm_path(path: Path) -> str:
    """``path`` for the assembler's ``.incbin``: absolute, with forward slashes and no quote."""
    text = path.resolve().as_posix()
    if '"' in text or "\\" in text:
        raise ValueError(f"opguide.triton.aot: cannot name {text!r} in assembly; use another --out")
    return text


def build(
    targets: Sequence[str],
    out: Path | str,
    kernels: Sequence[str] | None = None,
    cols: Iterable[int] | None = None,
    dtypes: Sequence[str] = tuple(DTYPES),
    jobs: int | None = None,
    cache: Path | str | None = None,
    log=print,
) -> Path:
    """Compiles every launch of ``targets`` and writes the outputs into ``out``.

    Args:
        targets: target names (:data:`SHARED_MEMORY_OPTIN`); none gives an empty table.
        out: the output folder.
        kernels: only these kernels (names of :data:`KERNELS`).
        cols: only the launches of these row lengths (a quick build).
        dtypes: only these dtypes (names of :data:`DTYPES`).
        jobs: processes that compile at once (default: the CPU count).
        cache: the folder of compiled images (default: ``out/cache``).
        log: where the progress lines go.

    Returns:
        The path of the generated ``triton_aot_artifacts.cpp``.
    """
    out = Path(out)
    for name in kernels or ():
        if name not in KERNELS:
            raise ValueError(
                f"opguide.triton.aot: kernel must be one of {', '.join(KERNELS)}, got {name!r}"
            )
    todo = []
    for t in targets:
        found = [la for la in launches(t, cols, dtypes) if not kernels or la.kernel in kernels]
        counts = ", ".join(f"{k} {sum(la.kernel == k for la in found)}" for k in KERNELS)
        log(f"triton aot {t}: {len(found)} launches ({counts})")
        todo += found
    compiled = compile_launches(todo, Path(cache) if cache else out / "cache", jobs, log)
    return write_outputs(out, list(targets), compiled)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m opguide.triton.aot``: :func:`build` from the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m opguide.triton.aot",
        description="Compile the RMSNorm Triton kernels ahead of time for named GPUs.",
    )
    parser.add_argument("--targets", required=True, help="e.g. sm_90,gfx942 (empty: none)")
    parser.add_argument("--out", required=True, help="the output folder")
    parser.add_argument("--only", action="append", choices=list(KERNELS), help="repeatable")
    parser.add_argument("--cols", help="only these row lengths, e.g. 4096,100")
    parser.add_argument("--dtypes", help=f"only these dtypes, of {','.join(DTYPES)}")
    parser.add_argument("--jobs", type=int, default=None, help="default: the CPU count")
    parser.add_argument("--cache", default=None, help="default: OUT/cache")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        target(t)  # the error names the known targets
    cols = [int(c) for c in args.cols.split(",")] if args.cols else None
    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else tuple(DTYPES)
    for d in dtypes:
        _dtype_name(d)
    cpp = build(targets, args.out, args.only, cols, dtypes, args.jobs, args.cache)
    print(f"triton aot: wrote {cpp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
