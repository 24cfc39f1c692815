"""Which sources each record in ``docs/recorded/`` measured, and whether they changed since.

A record stores the hash of each file that set its numbers: the kernels it
ran, the code that planned and launched them, and the script that measured
them. :data:`MEASURED` names them, per record, in the words of the operator
registry (``opguide/registry.py``): ``"cuda:forward"`` is the CUDA kernel
families of the forward pass, their operator's CUDA planning files and the
shared device and launch code; ``"triton:fused"`` the same for Triton;
``"python:rms_norm"`` an operator's Python wrapper; ``"every:cuda"`` every
operator's CUDA code (``"every:triton"`` its Triton code) and Python;
``"aot:rms_norm"`` an operator's Triton kernels compiled ahead of time;
``"bench:sweep"`` the benchmark modules that time a sweep; anything else is a
path.

A JSON record keeps ``{"sha256": total, "files": {path: hash}}`` in its
``"sources"`` field; a text record (``.txt``, ``.log``) in ``<record>.sources``
beside it. Each file's hash is that of its code
(:func:`guidekit.recorded.equivalence.code`), so a change to comments or
docstrings stales no record. :func:`stale_files` names the listed files
whose code changed, and those added to or removed from the list;
:func:`stale_note` is the sentence a page prints beside the record.
``python -m guidekit.recorded.stamp`` writes and checks the hashes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

from .equivalence import code

__all__ = [
    "MEASURED",
    "digest",
    "measured",
    "operator_benchmarks",
    "read_stored",
    "stale_files",
    "stale_note",
    "stamp",
]

#: The benchmark modules that time each kind of run (``python -m guidekit.benchmark``).
_BENCH = "guidekit/benchmark/"
BENCH = {
    "fixed": ("timing.py", "passes.py", "implementations.py", "fixed_shapes.py"),
    "sweep": ("timing.py", "passes.py", "implementations.py", "fixed_shapes.py", "sweep.py"),
    "eager": ("timing.py", "passes.py", "implementations.py", "eager.py"),
}
#: The operator whose kernels each pass runs (``training``: forward, then backward).
PASS_OPERATOR = {"forward": "rms_norm", "backward": "rms_norm", "fused": "fused_add_rms_norm"}
ALL = "forward,backward,fused"
BOTH = "rms_norm,fused_add_rms_norm"
#: Each variant of the template's GPU records: its (route, abi).
TEMPLATE_ROUTES = {
    "stable": ("cpp", "stable"),
    "classic": ("cpp", "classic"),
    "triton": ("triton", "classic"),
    "tritonaot": ("triton", "classic"),  # with triton_aot: its kernels compiled ahead of time
    "python": ("python", "classic"),
}
_VARIANT = "tools/variants/{}.patch"
_SWEEP_TOOL = ("tools/sweep_common.cuh",)

#: A record's name (an ``fnmatch`` pattern; the first that matches wins) ->
#: what it measured (see the module's docstring).
# fmt: off
MEASURED: dict[str, tuple[str, ...]] = {
    # The minimal kernel, and the library's CUDA forward timed beside it.
    "minimal_cuda_*.json": ("csrc/minimal/rms_norm_minimal.cpp",
                            "csrc/minimal/rms_norm_minimal.cuh",
                            "csrc/minimal/rms_norm_minimal_cuda.cu", "cuda:forward",
                            "tools/record_minimal_cuda.py"),
    "bad_index_*.json": ("tools/bad_index.cu", "tools/record_bad_index.py"),
    "model_step_*.json": (f"cuda:{ALL}", f"triton:{ALL}", f"python:{BOTH}",
                          "opguide/experimental/inductor_fusion.py", "guidekit/model_step.py",
                          "tools/record_model_step.py"),
    "two_gpus.json": (f"cuda:{ALL}", f"triton:{ALL}", f"python:{BOTH}", "tests/test_two_gpus.py",
                      "tools/record_two_gpus.py"),
    "gpu_debug.json": ("tools/gpu_debug/async_error.py", "tools/gpu_debug/oob_write.cu",
                       "tools/gpu_debug/saxpy.cu", "tools/gpu_debug/shared_race.cu",
                       "tools/record_gpu_debug.py"),
    # The stable-ABI library: its own files, and the Triton forward a CUDA
    # build compiles ahead of time with opguide's launcher.
    "stable_abi_*.json": ("stable/csrc/rms_norm.cpp", "stable/csrc/rms_norm.h",
                          "stable/csrc/rms_norm_cuda.cu", "stable/csrc/rms_norm_triton_aot.cu",
                          "stable/csrc/triton_aot_launch.cu",
                          "stable/opguide_stable/__init__.py", "stable/pyproject.toml",
                          "stable/setup.py", "stable/tests/test_opguide_stable.py",
                          "csrc/triton_aot/triton_aot_launch.cu",
                          "csrc/triton_aot/triton_aot_launch.h", "csrc/triton_aot/plan.h",
                          "csrc/triton_aot/route.h", "csrc/triton_aot/check.h",
                          "csrc/triton_aot/artifacts.h", "opguide/triton/forward.py",
                          "opguide/triton/prologue.py", "opguide/triton/launch.py",
                          "opguide/triton/aot.py",
                          "opguide/triton/aot_launches.py", "opguide/triton/aot_compile.py",
                          "opguide/triton/aot_build.py", "tools/record_stable_abi.py"),
    # What tools/record_template_gpu.py renders for the record's route and runs.
    "template_*_cuda_*.json": ("template:", "guidekit/template_variants.py",
                               "tools/record_template_gpu.py"),
    # tools/bench_template_aot.py: the Triton route's projects with triton_aot, timed.
    "template_tritonaot_bench_*.json": ("template:", "guidekit/template_variants.py",
                                        "tools/bench_template_aot.py"),
    # tests/shared_gpu_probe.py: every operator's kernels of one route beside a
    # kernel that holds all but two SMs.
    "shared_gpu_cuda_*.json": ("every:cuda", "tests/shared_gpu_probe.py"),
    "shared_gpu_triton_*.json": ("every:triton", "tests/shared_gpu_probe.py"),
    "hipcc_check.json": ("csrc/device_checks/rms_norm.cu",
                         "csrc/device_checks/fused_add_rms_norm.cu", f"cuda:{ALL}",
                         "guidekit/compile_checks.py"),
    "across_pytorch_gpu.json": (f"cuda:{ALL}", f"python:{BOTH}",
                                "examples_src/16_across_pytorch.py"),
    "many_gpus_nccl.json": ("python:rms_norm", "opguide/distributed.py",
                            "examples_src/17_many_gpus.py", "examples_src/many_gpus_worker.py"),
    "sanitizer_*.txt": (f"cuda:{ALL}", f"triton:{ALL}", f"python:{BOTH}",
                        "tools/sanitize_kernels.py"),
    "cuda_tests_*.log": (f"cuda:{ALL}", f"python:{BOTH}", "tests/test_rms_norm_cuda.py",
                         "tests/test_fused_add_rms_norm.py", "tests/test_rms_norm.py"),
    # The suite's logs (tools/record_gpu_suite.sh 1 and 2, which writes down
    # what tools/gpu_suite.sh ran): the library's kernels as the suite ran them
    # on the GPU. The tests and pages are checked on every CPU run; a change to
    # one of them changes a count in the log, not what the log says of the GPU.
    "gpu_suite_*.log": (f"cuda:{ALL}", f"triton:{ALL}", f"python:{BOTH}", "tools/gpu_suite.sh"),
    # The tools' own sweeps (tools/gpu_records.sh 3).
    "sweep_triton_split*.txt": ("triton:forward,backward", "tools/sweep_triton.py"),
    "sweep_fused_add_rms_norm*.txt": ("cuda:fused", *_SWEEP_TOOL,
                                      "tools/sweep_fused_add_rms_norm.cu"),
    "sweep_rms_norm_backward_cluster_*.txt": ("cuda:backward", *_SWEEP_TOOL,
                                              "tools/sweep_rms_norm_backward_cluster.cu"),
    "sweep_rms_norm_backward_pipelined_*.txt": ("cuda:backward", *_SWEEP_TOOL,
                                                "tools/sweep_rms_norm_backward.cu"),
    "sweep_rms_norm_forward_cluster_*.txt": ("cuda:forward", *_SWEEP_TOOL,
                                             "tools/sweep_rms_norm_forward_cluster.cu"),
    "sweep_rms_norm_forward_keep_packed_*.txt": ("cuda:forward", *_SWEEP_TOOL,
                                                 "tools/sweep_rms_norm_forward_vectors.cu"),
    # python -m guidekit.benchmark: the kernels of the passes and the
    # implementations (--passes, --impls) that each record ran (tools/gpu_records.sh).
    "eager_*.json": ("cuda:forward,backward", "triton:forward,backward", "python:rms_norm",
                     "opguide/experimental/triton_eager.py", "bench:eager"),
    "cuda_forward_hints_on_*": ("cuda:forward,backward", "bench:fixed",
                                _VARIANT.format("cuda_forward_hints_on")),
    # Built with -DOPGUIDE_STREAMING_HINTS=0 (tools/gpu_records.sh 5).
    "cuda_forward_hints_off_*": ("cuda:forward,backward", "bench:fixed"),
    "pdl_o*.json": ("cuda:forward,backward", "bench:fixed"),
    "cuda_forward_loads_interleaved_*": ("cuda:forward", "bench:fixed",
                                         _VARIANT.format("cuda_forward_loads_interleaved")),
    "cuda_forward_loads_first_*": ("cuda:forward", "bench:fixed"),
    "triton_evict_first_on_*": ("triton:forward,fused", "bench:fixed",
                                _VARIANT.format("triton_evict_first_on")),
    "triton_evict_first_off_*": ("triton:forward,fused", "bench:fixed"),
    "l2_*.json": ("cuda:forward,fused", "triton:forward,fused", "bench:fixed"),
    "sweep_one_input_set_*": ("cuda:forward", "triton:forward", "bench:sweep"),
    "sweep_odd_rows_16_byte_only_*": (f"cuda:{ALL}", f"triton:{ALL}", "bench:sweep",
                                      _VARIANT.format("odd_rows_16_byte_only")),
    "sweep_*.json": (f"cuda:{ALL}", f"triton:{ALL}", "bench:sweep"),
    # tools/bench_per_call.py --out: every route's eager calls and GPU time,
    # the ahead-of-time Triton route's build and C++ launch among them.
    "triton_aot_*.json": ("cuda:forward,backward", "triton:forward,backward", "python:rms_norm",
                          "aot:rms_norm", "aot_modules", "bench:eager",
                          "tools/bench_per_call.py"),
}
# fmt: on

#: The suffix of a text record's hash file.
SIDECAR = ".sources"
#: The repository this module belongs to: its registry and its records.
ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "opguide" / "registry.py"


@cache
def registry():
    """``opguide/registry.py``, read as a file: it needs no torch and no built library."""
    spec = importlib.util.spec_from_file_location("_opguide_registry", REGISTRY)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _route(route: str, passes: str) -> list[str]:
    """The kernel families that ``passes`` run on ``route``, their planning, the shared code."""
    reg, files = registry(), []
    for name in passes.replace("training", "forward,backward").split(","):
        op = reg.get(PASS_OPERATOR[name])
        for family, paths in op.kernels.items():
            if family.startswith(f"{route}_{name}") or family == f"{route}_split":
                files += paths
        files += op.planning[route]
    return files + _shared(route)


def _shared(route: str) -> list[str]:
    """The code every operator's kernels of ``route`` share (registry ``COMMON``)."""
    roles = ("triton",) if route == "triton" else ("device", "cluster", "launch")
    return [p for role in roles for p in registry().COMMON[role]]


def _gpu_code(op, routes: tuple[str, ...] = ("cuda", "triton")) -> list[str]:
    """An operator's kernel families and planning files of ``routes`` (registry entry ``op``)."""
    return [f for family, paths in (*op.kernels.items(), *op.planning.items())
            if family.startswith(routes) for f in paths]  # fmt: skip


def _every_operator(route: str) -> list[str]:
    """Every operator's kernels and planning of ``route`` (``cuda``, ``triton``), its Python,
    and the shared code of that route."""
    files = [f for op in registry().OPERATORS for f in (*_gpu_code(op, (route,)), *op.python)]
    return files + _shared(route)


def _aot_modules() -> list[str]:
    """The files that set the images an ``aot_module`` adds to the ahead-of-time build:
    the module and its operator's Triton kernels."""
    files = []
    for op in registry().OPERATORS:
        if op.aot_module:
            files.append(op.aot_module.replace(".", "/") + ".py")
            files += op.kernels.get("triton", ())
    return files


def _template(record: str, listed: Callable[[str], list[str]]) -> list[str]:
    """The template's files that render for a project of ``template_<variant>_cuda_*.json``.

    The record ran :data:`guidekit.template_variants.EVERY`'s variants of its
    route and ABI, each a first render (not ``add_to_project``) with the
    ``triton`` question's default; a file counts when its name's conditions
    hold for one of them.
    """
    from guidekit.template_variants import EVERY

    variant = record.split("_")[1]
    route, abi = TEMPLATE_ROUTES[variant]
    projects = [
        dict(route=route, abi=abi, kind=kind, inplace=inplace, triton=kind != "grouped",
             triton_aot=variant == "tritonaot", add_to_project=False)
        for r, a, kind, inplace in EVERY
        if (r, a) == (route, abi)
    ]  # fmt: skip

    def renders(path: str) -> bool:
        conditions = re.findall(r"{% if (.*?) %}", path)
        # The repository's own file names: eval reads the template's conditions.
        return any(all(eval(c, {}, names) for c in conditions) for names in projects)  # noqa: S307

    keep = re.compile(r"template/(copier|questions)\.yml|template/project/(.*pyproject|.*setup\.py"
                      r"|src/|tests/|\{% if route == 'cpp' %\}csrc|\{% if route == 'triton' and "
                      r"triton_aot %\}csrc|tools/.*compile_triton_aot)")  # fmt: skip
    # The Triton check compiles no record's kernels but the ahead-of-time ones,
    # with the compile of one kernel that compile_triton_aot.py takes from it.
    if variant == "tritonaot":
        keep = re.compile(keep.pattern + r"|template/project/tools/.*check_triton_targets")
    return [p for p in listed("template") if keep.match(p) and renders(p)]


def measured(record: str, listed: Callable[[str], list[str]] | None = None) -> list[str]:
    """The files that the record ``record`` (a file name) measured, sorted.

    Args:
        record: the record's file name.
        listed: folder -> the files under it, relative to the repository
            (default: this checkout's); only the template's records list one.

    Raises:
        KeyError: if no pattern of :data:`MEASURED` matches the name.
    """
    spec = next((s for p, s in MEASURED.items() if fnmatch.fnmatchcase(record, p)), None)
    if spec is None:
        return _operator_benchmark(record)
    files: list[str] = []
    for item in spec:
        kind, _, arg = item.partition(":")
        if kind in ("cuda", "triton"):
            files += _route(kind, arg)
        elif kind == "python":
            files += [p for op in arg.split(",") for p in registry().get(op).python]
        elif kind == "bench":
            files += [_BENCH + name for name in BENCH[arg]]
        elif kind == "template":
            files += _template(record, listed or _lister(ROOT))
        elif kind == "aot":  # an operator's Triton kernels compiled ahead of time
            files += registry().get(arg).aot
        elif kind == "aot_modules":  # the other operators' kernels in the same build
            files += _aot_modules()
        elif kind == "every":  # every:cuda, every:triton
            files += _every_operator(arg)
        else:
            files.append(item)
    return sorted(set(files))


def _includes(paths: list[str]) -> set[str]:
    """``paths`` and the repository's headers they include, directly or not."""
    found, todo = set(), list(paths)
    while todo:
        path = todo.pop()
        if path in found or not (ROOT / path).is_file():
            continue
        found.add(path)
        for name in re.findall(r'^#include "([^"]+)"', (ROOT / path).read_text(), re.M):
            todo.append(os.path.normpath(os.path.join(os.path.dirname(path), name)))
    return found


def operator_benchmarks() -> list[str]:
    """The registry's operators that have a benchmark of their own,
    ``guidekit/benchmark/<name>.py`` (``tools/gpu_records.sh 6`` runs each)."""
    return [op.name for op in registry().OPERATORS if (ROOT / f"{_BENCH}{op.name}.py").is_file()]


def _operator_benchmark(record: str) -> list[str]:
    """What ``<operator>_<gpu>.json``, written by ``python -m guidekit.benchmark.<operator>``,
    measured: the operator's CUDA and Triton kernels and planning, the headers they
    include, its Python, the shared Triton code, the benchmark module and its timing.

    Raises:
        KeyError: the name is no operator's benchmark record.
    """
    for name in operator_benchmarks():
        op, tool = registry().get(name), f"{_BENCH}{name}.py"
        if fnmatch.fnmatchcase(record, f"{name}_*.json"):
            gpu = _gpu_code(op)
            cuda = _includes([f for f in gpu if f.startswith("csrc/")])
            bench = [tool, _BENCH + "timing.py", _BENCH + "results.py"]
            return sorted({*gpu, *cuda, *op.python, *registry().COMMON["triton"], *bench})
    raise KeyError(f"no entry in guidekit.recorded.sources.MEASURED for {record}")


def _lister(root: Path) -> Callable[[str], list[str]]:
    return lambda folder: [p.relative_to(root).as_posix() for p in (root / folder).rglob("*")
                           if p.is_file() and "__pycache__" not in p.parts]  # fmt: skip


def digest(files: dict[str, bytes]) -> dict:
    """The stored form of a record's sources: ``{"sha256": total, "files": {path: hash}}``.

    Args:
        files: relative path -> content.

    Returns:
        Each file's hash of its code (:func:`~guidekit.recorded.equivalence.code`),
        and one hash over the sorted paths and those hashes.
    """
    hashes = {p: hashlib.sha256(code(p, files[p])).hexdigest() for p in sorted(files)}
    total = hashlib.sha256("".join(f"{p}\0{h}\n" for p, h in hashes.items()).encode())
    return {"sha256": total.hexdigest(), "files": hashes}


def current(record: str, root: Path | None = None) -> dict:
    """The stored form (:func:`digest`) of ``record``'s sources as they are under ``root``.

    A listed file that is missing counts as empty, so that it shows as changed.
    """
    root = root or ROOT
    paths = measured(record, _lister(root))
    return digest({p: (root / p).read_bytes() if (root / p).is_file() else b"" for p in paths})


def read_stored(path: Path) -> dict | None:
    """The hashes stored with the record at ``path``; None if it has none."""
    if path.suffix == ".json":
        return json.loads(path.read_text()).get("sources")
    sidecar = path.with_name(path.name + SIDECAR)
    return json.loads(sidecar.read_text()) if sidecar.exists() else None


def write_stored(path: Path, stored: dict) -> None:
    """Stores ``stored`` (:func:`digest`'s form) with the record at ``path``.

    A JSON record gets a ``"sources"`` field, written with the record's own
    indent and final newline so that its diff is that field alone; a text
    record a ``<name>.sources`` file beside it.
    """
    if path.suffix != ".json":
        path.with_name(path.name + SIDECAR).write_text(json.dumps(stored, indent=1) + "\n")
        return
    text = path.read_text()
    data = {**json.loads(text), "sources": stored}
    lines = text.splitlines()
    indent = len(lines[1]) - len(lines[1].lstrip(" ")) if len(lines) > 1 else None
    path.write_text(json.dumps(data, indent=indent) + ("\n" if text.endswith("\n") else ""))


def stale_files(path: Path, root: Path | None = None) -> list[str] | None:
    """The measured files whose code differs from what the record at ``path`` stores.

    Returns:
        The paths changed, or added to or removed from the record's list since
        it was made, sorted (empty: none); None if the record stores no hashes.
    """
    stored = read_stored(path)
    if stored is None:
        return None
    then, now = stored["files"], current(path.name, root or _source_root())["files"]
    return sorted(p for p in then.keys() | now.keys() if then.get(p) != now.get(p))


def stale_note(path: Path, root: Path | None = None, most: int = 6) -> str | None:
    """The sentence a page prints beside a record whose sources changed; None if none did.

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
    """Stores with the record at ``path`` the hashes of its sources as they are; returns them."""
    stored = current(path.name, root or _source_root())
    write_stored(path, stored)
    return stored
