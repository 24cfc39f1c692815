"""Compile checks for the GPU sources on machines without a GPU.

A CPU-only machine cannot run the CUDA kernels, but it can still compile them:

* :func:`nvcc_check` compiles a ``.cu`` file with ``nvcc -c``. For the host
  wrapper (``csrc/rms_norm/rms_norm_cuda.cu``) it uses the installed torch's headers,
  with the flags torch's own extension builds use.
* :func:`hipify` runs torch's hipify on CUDA sources, as a ROCm build of torch
  does before compiling them, and :func:`hipcc_check` compiles the hipified
  torch-free device code for AMD GPUs with ``hipcc``.
* :func:`~guidekit.machine_code.kernel_machine_code` (:mod:`guidekit.machine_code`, imported here)
  reads back what nvcc made of a torch-free kernel: registers, stack, SASS.

Each check returns a :class:`CompileResult` and never raises when a compiler
is missing: the result says that it was skipped and why. Successful results
are cached under ``build/compile_checks`` keyed on the exact inputs (sources,
headers, flags, compiler version), like ccache, so reruns are instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from guidekit.compilers import find_cuobjdump, find_hipcc, find_nvcc
from guidekit.machine_code import KernelCode, kernel_machine_code

__all__ = [
    "CompileResult",
    "find_nvcc",
    "find_hipcc",
    "nvcc_check",
    "hipify",
    "hipcc_check",
    "hip_has_bf16",
    "source_root",
    "find_cuobjdump",
    "KernelCode",
    "kernel_machine_code",
]


@dataclasses.dataclass
class CompileResult:
    """What one compile check did.

    Attributes:
        compiler: ``"nvcc"`` or ``"hipcc"``.
        source: the file compiled.
        status: ``"ok"``, ``"failed"`` or ``"skipped"``.
        reason: why it was skipped or failed (empty when ok).
        command: the command line, as a list.
        seconds: wall time of the compile (0 when skipped or cached).
        output: what the compiler printed.
        cached: True when an identical earlier compile succeeded.
    """

    compiler: str
    source: str
    status: str
    reason: str = ""
    command: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    output: str = ""
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        """One line: compiler, file, status and time or reason."""
        name = Path(self.source).name
        if self.status == "ok":
            how = (
                "cached result of an identical compile" if self.cached else f"{self.seconds:.1f} s"
            )
            return f"{self.compiler}: {name}: compiled ({how})"
        return f"{self.compiler}: {name}: {self.status.upper()}: {self.reason}"


def source_root() -> Path:
    """The repository root (the folder holding ``csrc/``).

    Searches the current directory and its parents, then the folder above this
    package (an editable install).

    Raises:
        FileNotFoundError: if no ``csrc/`` folder is found.
    """
    here = Path.cwd().resolve()
    for candidate in [here, *here.parents, Path(__file__).resolve().parent.parent]:
        if (candidate / "csrc" / "opguide.cpp").is_file():
            return candidate
    raise FileNotFoundError("opguide: no csrc/ folder found above the current directory")


def without_machine_paths(text: str) -> str:
    """``text`` with this machine's folders written as ``<venv>``, ``<repo>`` and ``<tmp>``.

    The pages print compiler messages, stack traces and build settings as they
    come; the folders in them say where the page was built, which a reader's
    machine does not share. The Python environment is replaced first, as it may
    sit inside the repository (``.nox/docs``); a Python that is not in a
    virtual environment keeps its folders (``/usr/lib/...`` says nothing
    about the build machine).
    """
    if sys.prefix != sys.base_prefix:
        text = text.replace(sys.prefix, "<venv>")
    text = text.replace(str(source_root()), "<repo>")
    text = text.replace(tempfile.gettempdir().rstrip("/") + "/", "<tmp>/")
    # A folder from tempfile.mkdtemp() without a prefix ("tmp" and eight random
    # characters) differs on every run; it says nothing the reader can use.
    return re.sub(r"<tmp>/tmp[a-z0-9_]{8}/", "<tmp>/", text)


def _version(compiler: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([compiler, "--version"], capture_output=True, text=True, env=env)
    return proc.stdout + proc.stderr


def _fingerprint(command: Sequence[str], inputs: Iterable[Path], version: str) -> str:
    digest = hashlib.sha256(version.encode())
    digest.update("\0".join(command).encode())
    for path in sorted(set(inputs)):
        digest.update(str(path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def _run_cached(
    compiler: str,
    source: Path,
    command: list[str],
    inputs: Iterable[Path],
    env: dict[str, str] | None,
    cache_dir: Path | None,
    version_extra: str = "",
) -> CompileResult:
    version = _version(command[0], env) + version_extra
    # The same file compiled from another scratch folder is the same compile.
    key = _fingerprint(
        [c.replace(str(source.parent), "<src>") for c in command[1:]], inputs, version
    )
    stamp = cache_dir / f"{compiler}-{source.stem}-{key}.ok" if cache_dir else None
    if stamp is not None and stamp.is_file():
        return CompileResult(compiler, str(source), "ok", command=command, cached=True)
    start = time.perf_counter()
    # The compiler's scratch files go to a folder of this compile's own,
    # removed after it: hipcc leaves an empty <source>-XXXXXX folder per run
    # in the temporary folder it is given.
    with tempfile.TemporaryDirectory() as scratch:
        run_env = {**(os.environ if env is None else env), "TMPDIR": scratch}
        proc = subprocess.run(command, capture_output=True, text=True, env=run_env)
    seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return CompileResult(
            compiler,
            str(source),
            "failed",
            f"exit status {proc.returncode}",
            command,
            seconds,
            output,
        )
    if stamp is not None:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(" ".join(command) + "\n" + output)
    return CompileResult(compiler, str(source), "ok", "", command, seconds, output)


def _default_cache_dir() -> Path | None:
    try:
        return source_root() / "build" / "compile_checks"
    except FileNotFoundError:
        return None


def _source_tree_headers(source: Path) -> list[Path]:
    """The headers a source may include: those of the nearest ``csrc`` folder above it."""
    folder = next((p for p in source.parents if p.name == "csrc"), source.parent)
    return [p for p in folder.rglob("*") if p.suffix in (".h", ".cuh", ".hpp") and p.is_file()]


def nvcc_check(
    source: str | os.PathLike,
    *,
    with_torch: bool,
    arch: str = "sm_90",
    extra_flags: Sequence[str] = (),
    cache_dir: Path | None = None,
) -> CompileResult:
    """Compiles one CUDA source with ``nvcc -c`` (object file discarded).

    Args:
        source: the ``.cu`` file.
        with_torch: add the installed torch's include paths (for the host
            wrapper). The CPU wheel ships torch's CUDA headers but no
            ``cuda_cmake_macros.h``, hence ``-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE``;
            the wrapper avoids ``ATen/cuda/CUDAContext.h``, whose cuBLAS and
            cuSPARSE headers the CPU wheel lacks.
        arch: the GPU architecture, e.g. ``"sm_90"`` (H100/H200).
        extra_flags: more nvcc flags.
        cache_dir: where successful results are remembered (default
            ``build/compile_checks``).

    Returns:
        The :class:`CompileResult`; ``status == "skipped"`` when nvcc is absent.
    """
    source = Path(source).resolve()
    nvcc = find_nvcc()
    if nvcc is None:
        return CompileResult(
            "nvcc", str(source), "skipped", "nvcc not found (set CUDA_HOME or PATH)"
        )
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS, include_paths

    from guidekit.buildinfo import cxx_standard

    # The C++ standard torch's own extension builds use with this torch.
    standard = cxx_standard()
    standard = standard if standard.startswith("-std=") else "-std=c++17"
    command = [nvcc, "-c", str(source), "-o", os.devnull, f"-arch={arch}", standard]
    command += list(COMMON_NVCC_FLAGS) + ["-I" + str(source.parent)]
    inputs = [source, *_source_tree_headers(source)]
    if with_torch:
        command += ["-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"]
        command += ["-I" + p for p in include_paths()]
    command += list(extra_flags)
    if cache_dir is None:
        cache_dir = _default_cache_dir()
    # torch's headers change with its version; the version stands in for them.
    import torch

    torch_version = f"torch {torch.__version__}" if with_torch else ""
    return _run_cached("nvcc", source, command, inputs, None, cache_dir, torch_version)


def hipify(
    sources: Sequence[str | os.PathLike],
    workdir: str | os.PathLike,
    root: str | os.PathLike | None = None,
) -> dict[Path, Path]:
    """Runs torch's hipify on CUDA sources, as ROCm builds of torch do.

    ``root`` (default: the folder of the first source) is copied into
    ``workdir`` (so the originals are untouched), then every source and the headers it includes
    are rewritten for HIP: ``cuda*`` calls and types become ``hip*``,
    ``<<<...>>>`` launches become ``hipLaunchKernelGGL``, and files are renamed
    (``x.cu`` to ``x.hip``, ``x.cuh`` to ``x_hip.cuh`` where needed).

    Args:
        sources: ``.cu`` files, all under ``root``.
        workdir: an empty or scratch folder.
        root: the source tree to copy; headers the sources include must be in it.

    Returns:
        A map from each original file (sources and headers) to its hipified copy.
    """
    from torch.utils.hipify import hipify_python

    sources = [Path(s).resolve() for s in sources]
    root = Path(root).resolve() if root is not None else sources[0].parent
    work = Path(workdir).resolve() / root.name
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(root, work)
    copies = [work / s.relative_to(root) for s in sources]
    banner = io.StringIO()  # hipify prints a progress banner; keep pages clean
    with contextlib.redirect_stdout(banner), contextlib.redirect_stderr(banner):
        results = hipify_python.hipify(
            project_directory=str(work),
            output_directory=str(work),
            header_include_dirs=[str(work)],
            extra_files=[str(c) for c in copies],
            is_pytorch_extension=True,
            hipify_extra_files_only=True,
            show_progress=False,
        )
    mapping = {}
    for original, result in results.items():
        # hipify keeps its results in a module-level dict across calls, so
        # files of earlier calls (other work folders) are in it too.
        if result.hipified_path and Path(original).is_relative_to(work):
            mapping[root / Path(original).relative_to(work)] = Path(result.hipified_path)
    return mapping


def hip_has_bf16(hipcc: str | None = None) -> bool:
    """Whether this HIP toolchain has ``hip/hip_bf16.h`` (ROCm 5.7 and later)."""
    hipcc = hipcc or find_hipcc()
    if hipcc is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.hip"
        probe.write_text("#include <hip/hip_bf16.h>\n")
        proc = subprocess.run(
            [hipcc, "-fsyntax-only", "-x", "hip", str(probe), "--offload-arch=gfx90a"],
            capture_output=True,
            text=True,
            env={**os.environ, "HIP_PLATFORM": "amd"},
        )
    return proc.returncode == 0


def hip_archs(hipcc: str | None = None) -> tuple[str, ...]:
    """The AMD targets of the hipcc check: MI200 (``gfx90a``) and MI300X/MI300A (``gfx942``).

    A hipcc whose clang predates ``gfx942`` (LLVM 17; Debian's ROCm 5.2 has
    clang 15) gets ``gfx940`` instead, the first target of the same
    instruction set (GFX9.4).

    Args:
        hipcc: the hipcc to ask (default: :func:`~guidekit.compilers.find_hipcc`).

    Returns:
        The targets, ``gfx90a`` first.
    """
    hipcc = hipcc or find_hipcc()
    if hipcc is None:
        return ("gfx90a", "gfx942")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.hip"
        probe.write_text("")
        proc = subprocess.run(
            [hipcc, "-fsyntax-only", "-x", "hip", str(probe), "--offload-arch=gfx942"],
            capture_output=True,
            text=True,
            env={**os.environ, "HIP_PLATFORM": "amd"},
        )
    return ("gfx90a", "gfx942") if proc.returncode == 0 else ("gfx90a", "gfx940")


def hipcc_check(
    source: str | os.PathLike,
    *,
    archs: Sequence[str] | None = None,
    extra_flags: Sequence[str] = (),
    cache_dir: Path | None = None,
) -> CompileResult:
    """Compiles one hipified, torch-free source for AMD GPUs with ``hipcc -c``.

    ``HIP_PLATFORM=amd`` is set so that hipcc targets AMD GPUs (clang) even
    where it would default to NVIDIA.

    Args:
        source: a ``.hip`` file produced by :func:`hipify`.
        archs: AMD targets (default: :func:`hip_archs`), e.g. ``gfx90a`` (MI200)
            and ``gfx942`` (MI300X).
        extra_flags: more hipcc flags.
        cache_dir: where successful results are remembered.

    Returns:
        The :class:`CompileResult`; ``status == "skipped"`` when hipcc is absent.
    """
    source = Path(source).resolve()
    hipcc = find_hipcc()
    if hipcc is None:
        return CompileResult(
            "hipcc", str(source), "skipped", "hipcc not found (Debian: apt-get install hipcc)"
        )
    command = [hipcc, "-c", str(source), "-o", os.devnull, "-std=c++17"]
    command += [f"--offload-arch={a}" for a in archs or hip_archs(hipcc)] + list(extra_flags)
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    inputs = [source, *_source_tree_headers(source)]
    if cache_dir is None:
        cache_dir = _default_cache_dir()
    return _run_cached("hipcc", source, command, inputs, env, cache_dir)


def _main(argv: Sequence[str]) -> int:
    """``python -m guidekit.compile_checks``: runs every check, prints a summary."""
    root = source_root()
    results = [
        nvcc_check(root / "csrc" / "device_checks" / "rms_norm.cu", with_torch=False),
        nvcc_check(root / "csrc" / "rms_norm" / "rms_norm_cuda.cu", with_torch=True),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        mapping = hipify([root / "csrc" / "device_checks" / "rms_norm.cu"], tmp, root / "csrc")
        hip_source = mapping[root / "csrc" / "device_checks" / "rms_norm.cu"]
        flags = [] if hip_has_bf16() else ["-DOPGUIDE_NO_BF16"]
        results.append(hipcc_check(hip_source, extra_flags=flags))
    for result in results:
        print(result.summary())
        if result.status == "failed":
            print(result.output[-4000:])
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
