"""opguide's Triton kernels compiled ahead of time, for GPUs named at build time.

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
The operators whose registry entry names an ``aot_module`` add their own
kernels and launches (:attr:`opguide.registry.Operator.aot_module`).
A launch without an artifact (a longer row, another device, a misaligned
pointer) takes the JIT route.

``setup.py`` runs this module for the targets a CUDA or ROCm build names;
it also runs by hand::

    python -m opguide.triton.aot --targets sm_90,gfx942 --out build/triton_aot

What to compile, and each launch's key, is :mod:`opguide.triton.aot_launches`;
compiling, :mod:`opguide.triton.aot_compile`; this module re-exports their
public names and writes the outputs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .aot_compile import _write, compile_inputs, compile_launches
from .aot_launches import (
    CONSTEXPRS,
    DTYPES,
    KERNELS,
    SHARED_MEMORY_OPTIN,
    Launch,
    Target,
    _dtype_name,
    device_model,
    key,
    launches,
    spec,
    target,
)

__all__ = [
    "CONSTEXPRS",
    "DTYPES",
    "KERNELS",
    "SHARED_MEMORY_OPTIN",
    "Launch",
    "Target",
    "build",
    "compile_inputs",
    "compile_launches",
    "device_model",
    "key",
    "launches",
    "main",
    "spec",
    "target",
    "write_outputs",
]

# Each image starts on a 64-byte boundary of its target's blob.
_IMAGE_ALIGN = 64


def write_outputs(
    out: Path, targets: Sequence[str], compiled: Mapping[str, tuple[dict, bytes]], stats=None
):
    """Writes the images, each target's blob, ``manifest.json`` and ``triton_aot_artifacts.cpp``.

    ``stats`` (:func:`compile_launches`'s) goes into the manifest as ``"compile"``.

    Files are rewritten only when their bytes change, so that a build that
    compiles nothing new recompiles no C++.

    Returns:
        The path of ``triton_aot_artifacts.cpp``.
    """
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"triton": _triton_version(), "targets": list(targets), "compile": stats,
                "artifacts": []}  # fmt: skip
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
    inference: bool = False,
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
        inference: only the inference forward (``rms_norm_forward`` with
            ``STORE_INV=0``), for a library without training operators.

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
        if inference:
            found = [la for la in found if dict(la.constexprs).get("STORE_INV") == 0]
        counts = ", ".join(f"{k} {sum(la.kernel == k for la in found)}" for k in KERNELS)
        log(f"triton aot {t}: {len(found)} launches ({counts})")
        todo += found
    stats: dict = {}
    compiled = compile_launches(todo, Path(cache) if cache else out / "cache", jobs, log, stats)
    return write_outputs(out, list(targets), compiled, stats)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m opguide.triton.aot``: :func:`build` from the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m opguide.triton.aot",
        description="Compile the Triton kernels of every operator's aot module ahead of time "
        "for named GPUs.",
    )
    parser.add_argument("--targets", required=True, help="e.g. sm_90,gfx942 (empty: none)")
    parser.add_argument("--out", required=True, help="the output folder")
    parser.add_argument("--only", action="append", choices=list(KERNELS), help="repeatable")
    parser.add_argument("--cols", help="only these row lengths, e.g. 4096,100")
    parser.add_argument("--dtypes", help=f"only these dtypes, of {','.join(DTYPES)}")
    parser.add_argument("--jobs", type=int, default=None, help="default: the CPU count")
    parser.add_argument("--cache", default=None, help="default: OUT/cache")
    parser.add_argument(
        "--skip-unknown", action="store_true", help="leave out targets without a device model"
    )
    parser.add_argument(
        "--inference", action="store_true", help="only the inference forward (STORE_INV=0)"
    )
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in SHARED_MEMORY_OPTIN]
    if unknown and args.skip_unknown:
        print(f"triton aot: no device model for {', '.join(unknown)}: none compiled for them")
        targets = [t for t in targets if t not in unknown]
    for t in targets:
        target(t)  # the error names the known targets
    cols = [int(c) for c in args.cols.split(",")] if args.cols else None
    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else tuple(DTYPES)
    for d in dtypes:
        _dtype_name(d)
    cpp = build(
        targets, args.out, args.only, cols, dtypes, args.jobs, args.cache, inference=args.inference
    )
    print(f"triton aot: wrote {cpp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
