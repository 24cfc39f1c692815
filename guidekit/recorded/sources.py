"""Which sources each record in ``docs/recorded/`` measured, and whether they changed since.

Every record stores the content hash of the sources it measured: the kernels,
their planners and launch rules, the Python that calls them and the tool that
recorded it. A JSON record keeps it in its ``"sources"`` field; a text record
(``.txt``, ``.log``) in a file beside it, ``<record>.sources``, which holds
the same JSON object. The object is ``{"sha256": ..., "files": {path:
sha256}}``: one hash over the sorted relative paths and their bytes, and one
per file, so that a page can name the files that changed.

:data:`MEASURED` is the one table from a record's name to the sources it
measured. :func:`stale_files` compares a record's stored hashes with the
files as they are; :func:`stale_note` is the sentence a page prints beside the
record when they differ. ``tools/stamp_records.py`` writes the hashes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

__all__ = [
    "MEASURED",
    "current",
    "digest",
    "measured_globs",
    "read_stored",
    "stale_files",
    "stale_note",
    "tree_paths",
    "write_stored",
]

#: The CUDA and C++ kernels, their planners, launch rules and configuration.
KERNELS = ("csrc/opguide.cpp", "csrc/common/**", "csrc/rms_norm/**", "csrc/fused_add_rms_norm/**")
#: The Triton kernels and their launch rules.
TRITON = ("opguide/triton/**",)
#: The Python operators, wrappers and autograd around the kernels.
LIBRARY = ("opguide/*.py", "opguide/experimental/**")
#: The benchmark that times them.
BENCHMARK = ("guidekit/benchmark/**",)
#: The torch-free sweep programs' shared harness.
SWEEP_COMMON = ("tools/sweep_common.cuh",)

#: A record's name (an ``fnmatch`` pattern; the first that matches wins) ->
#: the globs of the sources it measured, relative to the repository root.
MEASURED: dict[str, tuple[str, ...]] = {
    # The minimal kernel, and the library's CUDA kernel timed beside it.
    "minimal_cuda_*.json": (
        "csrc/minimal/**",
        *KERNELS,
        *LIBRARY,
        "tools/record_minimal_cuda.py",
    ),  # fmt: skip
    "bad_index_*.json": ("tools/bad_index.cu", "tools/record_bad_index.py"),
    "model_step_*.json": (
        *KERNELS,
        *TRITON,
        *LIBRARY,
        "guidekit/model_step.py",
        "tools/record_model_step.py",
    ),  # fmt: skip
    "triton_registers_*.json": (*TRITON, "tools/record_triton_registers.py"),
    "two_gpus.json": (
        *KERNELS,
        *TRITON,
        *LIBRARY,
        "tests/test_two_gpus.py",
        "tools/record_two_gpus.py",
    ),  # fmt: skip
    "gpu_debug.json": ("tools/gpu_debug/**", "tools/record_gpu_debug.py"),
    "stable_abi_*.json": ("stable/**", "tools/record_stable_abi.py"),
    # What tools/record_template_gpu.py builds and runs: the answers, each
    # project's package, its C++/CUDA sources and build files, and its tests;
    # not its README, CI workflow or check scripts, which the GPU run never reads.
    "template_*_cuda_*.json": (
        "template/copier.yml",
        "template/questions.yml",
        "template/project/pyproject.toml.jinja",
        "template/project/*setup.py*",
        "template/project/src/**",
        "template/project/{% if route == 'cpp' %}csrc{% endif %}/**",
        "template/project/tests/**",
        "guidekit/template_variants.py",
        "tools/record_template_gpu.py",
    ),  # fmt: skip
    "hipcc_check.json": (*KERNELS, "csrc/device_checks/**", "guidekit/compile_checks.py"),
    "across_pytorch_gpu.json": (*KERNELS, *TRITON, *LIBRARY, "examples_src/16_across_pytorch.py"),
    "many_gpus_nccl.json": (
        *LIBRARY,
        "examples_src/17_many_gpus.py",
        "examples_src/many_gpus_worker.py",
    ),  # fmt: skip
    "sanitizer_*.txt": (*KERNELS, *TRITON, *LIBRARY, "tools/sanitize_kernels.py"),
    "cuda_tests_*.log": (
        *KERNELS,
        *LIBRARY,
        "tests/test_rms_norm_cuda.py",
        "tests/test_fused_add_rms_norm.py",
        "tests/test_rms_norm.py",
    ),  # fmt: skip
    # The suite's logs (tools/record_gpu_suite.sh 1 and 2).
    "gpu_suite_*_tests.log": (
        *KERNELS,
        *TRITON,
        *LIBRARY,
        "tests/**",
        "tools/gpu_suite.sh",
        "tools/record_gpu_suite.sh",
    ),  # fmt: skip
    "gpu_suite_*_gallery_notebooks.log": (
        *KERNELS,
        *TRITON,
        *LIBRARY,
        "examples_src/**",
        "tutorials/**",
        "tools/gpu_suite.sh",
        "tools/record_gpu_suite.sh",
    ),  # fmt: skip
    # The site built on a GPU (tools/record_gpu_docs.sh): the pages it ran and
    # what they ran, the site's build configuration and extensions.
    "gpu_docs_*.log": (
        *KERNELS,
        *TRITON,
        *LIBRARY,
        "examples_src/**",
        "tutorials/**",
        "docs/conf.py",
        "docs/_ext/**",
        "tools/gpu_suite.sh",
        "tools/record_gpu_docs.sh",
    ),  # fmt: skip
    "sweep_triton_split*.txt": (*TRITON, *LIBRARY, "tools/sweep_triton.py"),
    "sweep_fused_add_rms_norm_uncapped_*.txt": (
        "csrc/common/**",
        "csrc/fused_add_rms_norm/**",
        *SWEEP_COMMON,
        "tools/sweep_fused_add_rms_norm.cu",
        "tools/variants/fused_add_rms_norm_uncapped.patch",
    ),  # fmt: skip
    "sweep_fused_add_rms_norm*.txt": (
        "csrc/common/**",
        "csrc/fused_add_rms_norm/**",
        *SWEEP_COMMON,
        "tools/sweep_fused_add_rms_norm.cu",
    ),  # fmt: skip
    "sweep_rms_norm_backward_cluster_*.txt": (
        "csrc/common/**",
        "csrc/rms_norm/**",
        *SWEEP_COMMON,
        "tools/sweep_rms_norm_backward_cluster.cu",
    ),  # fmt: skip
    "sweep_rms_norm_backward_pipelined_*.txt": (
        "csrc/common/**",
        "csrc/rms_norm/**",
        *SWEEP_COMMON,
        "tools/sweep_rms_norm_backward.cu",
    ),  # fmt: skip
    "sweep_rms_norm_forward_cluster_*.txt": (
        "csrc/common/**",
        "csrc/rms_norm/**",
        *SWEEP_COMMON,
        "tools/sweep_rms_norm_forward_cluster.cu",
    ),  # fmt: skip
    "sweep_rms_norm_forward_keep_packed_*.txt": (
        "csrc/common/**",
        "csrc/rms_norm/**",
        *SWEEP_COMMON,
        "tools/sweep_rms_norm_forward_vectors.cu",
    ),  # fmt: skip
    # A benchmark of a variant of the kernels (tools/gpu_records.sh 5): the
    # sources it was applied to, and the patch.
    **{
        f"{record}_*.json": (
            *KERNELS,
            *TRITON,
            *LIBRARY,
            *BENCHMARK,
            f"tools/variants/{patch}.patch",
        )
        for record, patch in (
            ("cuda_forward_hints_on", "cuda_forward_hints_on"),
            ("cuda_forward_hints_off", "cuda_hints_off"),
            ("cuda_forward_loads_interleaved", "cuda_forward_loads_interleaved"),
            ("triton_evict_first_on", "triton_evict_first_on"),
            ("sweep_odd_rows_16_byte_only", "odd_rows_16_byte_only"),
        )
    },
    # Every other JSON record is an output of python -m guidekit.benchmark.
    "*.json": (*KERNELS, *TRITON, *LIBRARY, *BENCHMARK),
}

#: Files under a measured glob that are build products, not sources.
NOT_SOURCES = re.compile(r"(^|/)(__pycache__|build)/|\.(pyc|so|o|a|d)$")
#: The suffix of a text record's hash file.
SIDECAR = ".sources"


def measured_globs(record: str) -> tuple[str, ...]:
    """The globs of the sources that the record ``record`` (a file name) measured.

    Raises:
        KeyError: if no pattern of :data:`MEASURED` matches the name.
    """
    for pattern, globs in MEASURED.items():
        if fnmatch.fnmatchcase(record, pattern):
            return globs
    raise KeyError(f"no entry in guidekit.recorded.sources.MEASURED for {record}")


def _glob_regex(globs: Sequence[str]) -> re.Pattern:
    """One pattern for the globs: ``**`` any path, ``*`` any name within a folder."""
    parts = []
    for glob in globs:
        pieces = re.split(r"(\*\*|\*)", glob)
        parts.append(
            "".join(".*" if p == "**" else "[^/]*" if p == "*" else re.escape(p) for p in pieces)
        )
    return re.compile("(?:" + "|".join(parts) + r")\Z")


def select(paths: Iterable[str], globs: Sequence[str]) -> list[str]:
    """The paths (relative, ``/``-separated) that one of ``globs`` matches, sorted,
    build products left out."""
    pattern = _glob_regex(globs)
    return sorted(p for p in paths if pattern.match(p) and not NOT_SOURCES.search(p))


def digest(files: dict[str, bytes]) -> dict:
    """The stored form of a set of sources: ``{"sha256": all, "files": {path: sha256}}``.

    Args:
        files: relative path -> content.

    Returns:
        The sha256 over the sorted paths, each followed by a NUL, its content's
        length and its content; and each file's own sha256.
    """
    total = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        total.update(path.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return {
        "sha256": total.hexdigest(),
        "files": {p: hashlib.sha256(files[p]).hexdigest() for p in sorted(files)},
    }


def tree_paths(root: Path, globs: Sequence[str]) -> list[str]:
    """The files under ``root`` that the globs match, relative to it, sorted.

    ``**`` matches any path, ``*`` any name within a folder (``"**.py"``: every
    Python file, ``"csrc/*.cpp"``: those directly in ``csrc``). In a git work
    tree these are the files git does not ignore (so build outputs and caches
    never count); elsewhere (a source archive) every file, less
    :data:`NOT_SOURCES`.
    """
    import subprocess

    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root, check=True, capture_output=True,
        ).stdout.decode().split("\0")  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        listed = None
    if listed is not None and (root / ".git").exists():
        return select([p for p in listed if p and (root / p).is_file()], globs)
    tops = {g.split("*")[0].rsplit("/", 1)[0] if "/" in g.split("*")[0] else "" for g in globs}
    found = set()
    for top in tops:
        base = root / top
        if base.is_file():
            found.add(top)
        elif base.is_dir():
            found.update(p.relative_to(root).as_posix() for p in base.rglob("*") if p.is_file())
    return select(found, globs)


def current(record: str, root: Path | None = None) -> dict:
    """The stored form (:func:`digest`) of ``record``'s sources as they are under ``root``.

    Args:
        record: the record's file name.
        root: the repository root (default: the source tree of this checkout).
    """
    root = root or _source_root()
    paths = tree_paths(root, measured_globs(record))
    return digest({p: (root / p).read_bytes() for p in paths})


def files_at_commit(
    record: str, root: Path, commit: str, run: Callable | None = None
) -> dict[str, bytes]:
    """``record``'s sources as they were at a git ``commit``: relative path -> content.

    Args:
        record: the record's file name.
        root: the repository root (a git work tree).
        commit: the commit to read them from.
        run: ``subprocess.run`` (tests pass another).
    """
    import subprocess

    run = run or subprocess.run

    def git(*args: str) -> bytes:
        return run(["git", *args], cwd=root, check=True, capture_output=True).stdout

    listed = git("ls-tree", "-r", "--name-only", commit).decode().splitlines()
    return {p: git("show", f"{commit}:{p}") for p in select(listed, measured_globs(record))}


def at_commit(record: str, root: Path, commit: str, run: Callable | None = None) -> dict:
    """The stored form (:func:`digest`) of ``record``'s sources as they were at a git ``commit``.

    Arguments as for :func:`files_at_commit`.
    """
    return digest(files_at_commit(record, root, commit, run))


def read_stored(path: Path) -> dict | None:
    """The hashes stored with the record at ``path``; None if it has none."""
    if path.suffix == ".json":
        return json.loads(path.read_text()).get("sources")
    sidecar = path.with_name(path.name + SIDECAR)
    return json.loads(sidecar.read_text()) if sidecar.exists() else None


def write_stored(path: Path, stored: dict) -> None:
    """Stores ``stored`` (:func:`digest`'s form) with the record at ``path``.

    A JSON record gets a ``"sources"`` field (its other fields keep their
    order); a text record a ``<name>.sources`` file beside it.
    """
    if path.suffix == ".json":
        text = path.read_text()
        data = json.loads(text)
        data["sources"] = stored
        # Written as it was (its indent, its final newline), so that the
        # record's diff is the new field alone.
        lines = text.splitlines()
        indent = len(lines[1]) - len(lines[1].lstrip(" ")) if len(lines) > 1 else None
        end = "\n" if text.endswith("\n") else ""
        path.write_text(json.dumps(data, indent=indent) + end)
    else:
        path.with_name(path.name + SIDECAR).write_text(json.dumps(stored, indent=1) + "\n")


def stale_files(path: Path, root: Path | None = None) -> list[str] | None:
    """The measured sources that differ from those the record at ``path`` stores.

    Args:
        path: the record.
        root: the repository root whose sources are compared.

    Returns:
        The paths changed, added or removed since the record was made, sorted
        (empty: none); None if the record stores no hashes.
    """
    stored = read_stored(path)
    if stored is None:
        return None
    now = current(path.name, root)
    then, files = stored["files"], now["files"]
    if stored["sha256"] == now["sha256"]:
        return []
    return sorted(p for p in then.keys() | files.keys() if then.get(p) != files.get(p))


def stale_note(path: Path, root: Path | None = None, most: int = 6) -> str | None:
    """The sentence a page prints beside a record whose sources changed.

    Returns None when they did not, or when the record stores no hashes.

    Args:
        path: the record.
        root: the repository root whose sources are compared.
        most: how many changed files the sentence names before counting the rest.
    """
    changed = stale_files(path, root)
    if not changed:  # None: nothing stored (tests/test_recorded.py requires it of every record)
        return None
    named = ", ".join(changed[:most])
    if len(changed) > most:
        named += f" and {len(changed) - most} more"
    return f"{path.name}: measured on sources that have changed since: {named}"


def _source_root() -> Path:
    from guidekit.compile_checks import source_root

    return source_root()


def stamp(path: Path, root: Path | None = None) -> dict:
    """Stores with the record at ``path`` the hashes of its sources as they are now.

    Args:
        path: the record, just written.
        root: the repository root (default: the source tree of this checkout).

    Returns:
        What it stored (:func:`digest`'s form).
    """
    stored = current(path.name, root)
    write_stored(path, stored)
    return stored
