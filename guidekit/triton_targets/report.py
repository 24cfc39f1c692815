"""The check's results as a table and a summary line, and the command line."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence

from .checking import _check_here, _child_env, check
from .targets import TARGETS, Usage


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
