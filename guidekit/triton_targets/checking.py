"""The check (every launch compiled for every target, in this process or a child), its table and
summary, and the command line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .compiling import _MEASURED, _cache_dir, _compile, _judge, _prepare
from .launches import library_launches, representative
from .targets import FULL_ENV, TARGETS, Launch, Usage


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
    row_lengths: Sequence[int] | None = None,
    dtypes: Sequence[str] | None = None,
) -> list[Usage]:
    """Compiles the library's kernels (or ``launches``) for ``targets`` and checks each.

    Args:
        targets: names from :data:`TARGETS`.
        full: every configuration (True) or :func:`representative` ones (False);
            None reads ``OPGUIDE_TRITON_TARGETS_FULL``.
        kernels: only these kernels of the library (names), if given.
        launches: these launches instead of the library's, each compiled for every target.
        jobs: compiles at once (default: the CPU count).
        row_lengths, dtypes: the library's launches for these row lengths and dtypes
            of x only (default: :data:`ROW_LENGTHS`, every dtype it takes).

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
        "row_lengths": list(row_lengths) if row_lengths else None,
        "dtypes": list(dtypes) if dtypes else None,
    }
    # opguide selects the interpreter on a machine without a GPU unless
    # TRITON_INTERPRET already has a value.
    if os.environ.get("TRITON_INTERPRET") != "0":
        child = [sys.executable, "-m", "guidekit.triton_targets", "--request", json.dumps(request)]
        done = subprocess.run(child, capture_output=True, text=True, env=_child_env())
        if done.returncode != 0:
            raise RuntimeError(
                f"guidekit.triton_targets child failed ({done.returncode}):\n{done.stderr[-4000:]}"
            )
        return [Usage(**u) for u in json.loads(done.stdout.splitlines()[-1])]
    return _check_here(request)


def _check_here(request: dict) -> list[Usage]:
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    todo: list[tuple[Launch, str]] = []
    for name in request["targets"]:
        target = TARGETS[name]
        if request["launches"]:
            chosen = [
                Launch(d["module"], d["kernel"], tuple(d["args"]), tuple(map(tuple, d["options"])))
                for d in request["launches"]
            ]
        else:
            only = {k: request[k] for k in ("row_lengths", "dtypes") if request.get(k)}
            chosen = library_launches(target, **only)
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
            results[-1] = dataclasses.replace(usage, **cache[key], cached=True)
            _judge(results[-1], TARGETS[name])
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
                cache[key] = {k: v for k, v in dataclasses.asdict(usage).items() if k in _MEASURED}
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
    return [(key, _compile(launch, TARGETS[name], inputs)) for key, launch, name, inputs in chunk]


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
    lines = [
        f"{'kernel':32} {'target':8} {'regs':>7} {'sgpr':>4} {'spill':>5} {'shared':>7} "
        f"{'budget':>11}  {'status':11} config"
    ]
    for u in results:
        regs = "-" if u.regs is None else f"{u.regs}+{u.agprs}" if u.agprs else f"{u.regs}"
        sgpr = "" if u.sgprs is None else str(u.sgprs)
        budget = f"{u.reg_budget}r/{u.smem_budget // 1024}K"
        config = f"{u.dtypes} {u.config}"
        if len(config) > width:
            config = config[: width - 3] + "..."
        status = u.status if u.ok else f"{u.status}: {u.reason}"
        spills = u.spills + u.sgpr_spills
        lines.append(f"{u.kernel:32} {u.target:8} {regs:>7} {sgpr:>4} {spills:>5} {u.shared:>7} "
                     f"{budget:>11}  {status:11} {config}")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m guidekit.triton_targets``: the table and the summary; 1 if any compile fails."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m guidekit.triton_targets", description=sys.modules[__package__].__doc__
    )
    parser.add_argument("--target", action="append", choices=list(TARGETS), help="repeatable")
    parser.add_argument("--kernel", action="append", help="a kernel name; repeatable")
    parser.add_argument("--full", action="store_true", default=None, help="every configuration")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--quiet", action="store_true", help="failures and the summary only")
    parser.add_argument("--request", help=argparse.SUPPRESS)  # check()'s child process
    args = parser.parse_args(argv)
    if "triton" not in sys.modules:  # nothing compiled for the interpreter yet: compile here
        os.environ.update(_child_env())  # the environment check() gives a child
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
