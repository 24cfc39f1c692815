"""Per-call time of the template's Triton operators: kernels compiled ahead of time against the JIT.

    python tools/bench_template_aot.py build/template_aot_bench --render   # where copier is
    python tools/bench_template_aot.py build/template_aot_bench --rounds 21  # on the GPU machine

``--render`` renders the Triton route's elementwise and rowwise projects with
``triton_aot`` (``guidekit.template_variants``). Then it builds each into a folder of
its own for this GPU (``pip install --no-build-isolation --no-deps --target``,
``TORCH_CUDA_ARCH_LIST`` of the visible GPU: the kernels compiled by the
Triton installed here), then times each operator's eager call, forward and
forward+backward, in bf16, three ways in one interleaved run:

* ``aot``: the project's ``_aot.launch`` through the compiled kernels;
* ``jit``: the same calls with ``_aot.ENABLED = False`` (Triton's JIT launcher);
* ``torch``: PyTorch's own operator for the same formula (``F.rms_norm``,
  ``F.silu(x) * gate``), as a reference.

A round times ``--calls`` calls of each, in an order that rotates from round to
round, and waits for the GPU once at the end; the table gives µs per call,
median (quartiles) over the rounds.

Then the first call: ``--cold`` new processes per way, alternating, each
with an empty Triton cache (``TRITON_CACHE_DIR``), time one forward+backward
of each operator after the import: the compiled kernels are loaded, or
Triton's JIT compiles them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guidekit import template_variants as tv  # noqa: E402

KINDS = {"rowwise": "scaled_norm", "elementwise": "silu_mul"}
SHAPES = [(1, 4096), (8192, 4096)]


def render(out: Path) -> None:
    """Renders the projects into ``out`` (needs copier; the GPU machine may not have it)."""
    for kind in KINDS:
        package = f"bench_aot_{kind}"
        answers = tv.answers("triton", "classic", kind, False, package, triton_aot=True)
        if (out / package).exists():
            shutil.rmtree(out / package)
        tv.render(out / package, **answers)
        print(f"{package}: rendered into {out}", flush=True)


def build(out: Path) -> Path:
    """Builds the projects of ``out`` into ``out/site`` for this GPU; returns that folder."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=f"{major}.{minor}")
    site = out / "site"
    if site.exists():
        shutil.rmtree(site)
    for kind in KINDS:
        package = f"bench_aot_{kind}"
        project = out / package
        if not project.exists():
            raise SystemExit(f"{project} is missing: run with --render first (where copier is)")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
             "--target", str(site), "."],
            cwd=project, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(
                f"{package} did not build:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
        print(f"{package}: built for sm_{major}{minor}", flush=True)
    return site


def ways(kind: str, fn, aot, rows: int, cols: int, backward: bool) -> dict:
    """The three ways of one call, on inputs of their own: {way: a function that makes the call}."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, grad=False):
        t = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        return t.requires_grad_(grad)

    x, other, w, g = (
        randn(rows, cols, grad=True),
        randn(rows, cols, grad=True),
        randn(cols),
        randn(rows, cols),
    )
    w.requires_grad_(True)
    if kind == "rowwise":
        ours, theirs = (lambda: fn(x, w, 1e-6)), (lambda: F.rms_norm(x, (cols,), w, 1e-6))
    else:
        ours, theirs = (lambda: fn(x, other)), (lambda: F.silu(x) * other)

    def way(call, enabled):
        def run():
            if enabled is not None:
                aot.ENABLED = enabled
            with torch.set_grad_enabled(backward):
                y = call()
                if backward:
                    y.backward(g)

        return run

    return {"aot": way(ours, True), "jit": way(ours, False), "torch": way(theirs, None)}


def cases(site: Path):
    """(name, {way: call}) for each operator, shape and direction."""
    import importlib

    sys.path.insert(0, str(site))
    out = []
    for kind, op in KINDS.items():
        package = importlib.import_module(f"bench_aot_{kind}")
        aot = importlib.import_module(f"bench_aot_{kind}._aot")
        for rows, cols in SHAPES:
            for backward in (False, True):
                name = f"{op} {rows}x{cols} {'fwd+bwd' if backward else 'fwd'}"
                out.append((name, ways(kind, getattr(package, op), aot, rows, cols, backward)))
    return out


FIRST_CALL = """
import sys, time, torch
import {package}
x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
other = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
if "{kind}" == "elementwise":
    other = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
args = (x, other, 1e-6) if "{kind}" == "rowwise" else (x, other)
torch.cuda.synchronize()
start = time.perf_counter()
{package}.{op}(*args).sum().backward()
torch.cuda.synchronize()
print(time.perf_counter() - start)
"""


def first_calls(site: Path, repeats: int) -> dict:
    """{operator: {way: [seconds of the first forward+backward in a new process]}}."""
    import tempfile

    out = {}
    for kind, op in KINDS.items():
        package = f"bench_aot_{kind}"
        times = {"aot": [], "jit": []}
        for _ in range(repeats):
            for way in times:
                with tempfile.TemporaryDirectory() as cache:
                    env = dict(os.environ, PYTHONPATH=str(site), TRITON_CACHE_DIR=cache)
                    env[f"{package.upper()}_TRITON_AOT"] = "1" if way == "aot" else "0"
                    code = FIRST_CALL.format(package=package, kind=kind, op=op)
                    proc = subprocess.run([sys.executable, "-c", code], env=env,
                                          capture_output=True, text=True)  # fmt: skip
                    if proc.returncode != 0:
                        raise SystemExit(f"{package} first call ({way}):\n{proc.stderr[-3000:]}")
                    times[way].append(float(proc.stdout.split()[-1]))
        out[op] = times
    return out


def time_calls(run, calls: int) -> float:
    """µs per call of ``calls`` calls of ``run``, the GPU waited for once at the end."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return q1, median, q3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="where the projects are rendered and built")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=200, help="calls per way and round")
    parser.add_argument("--out", type=Path, help="a JSON file of the results")
    parser.add_argument("--render", action="store_true", help="render the projects, then stop")
    parser.add_argument("--cold", type=int, default=5, help="new processes per way (first call)")
    args = parser.parse_args()
    if args.render:
        render(args.dir.resolve())
        return 0
    import torch
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("bench_template_aot.py: no CUDA GPU visible to torch")
    site = build(args.dir.resolve())
    results = {}
    for name, calls in cases(site):
        for run in calls.values():  # compile (the JIT), load (the AOT), warm up
            for _ in range(20):
                run()
        order = list(calls)
        times = {w: [] for w in calls}
        for r in range(args.rounds):
            for w in order[r % len(order) :] + order[: r % len(order)]:
                times[w].append(time_calls(calls[w], args.calls))
        results[name] = {w: quartiles(t) for w, t in times.items()}
        row = "  ".join(f"{w} {m:7.1f} ({a:.1f}-{b:.1f})" for w, (a, m, b) in results[name].items())
        print(f"{name:32} {row}", flush=True)
    print("\nµs per eager call, median (quartiles), bf16;", torch.cuda.get_device_name(),
          f"torch {torch.__version__}, triton {triton.__version__}")  # fmt: skip
    print(f"{'call':32} {'aot':>8} {'jit':>8} {'torch':>8}  aot/jit")
    for name, r in results.items():
        ratio = r["aot"][1] / r["jit"][1]
        overlap = r["aot"][2] >= r["jit"][0] and r["jit"][2] >= r["aot"][0]
        note = "  (quartiles overlap)" if overlap else ""
        print(f"{name:32} {r['aot'][1]:8.1f} {r['jit'][1]:8.1f} {r['torch'][1]:8.1f}  "
              f"{ratio:.2f}x{note}")  # fmt: skip
    first = first_calls(site, args.cold) if args.cold else {}
    if first:
        print(f"\nThe first forward+backward in a new process, empty Triton cache, ms, median of "
              f"{args.cold}:")  # fmt: skip
    for op, times in first.items():
        aot, jit = (statistics.median(times[w]) * 1e3 for w in ("aot", "jit"))
        print(f"{op:32} aot {aot:8.1f}  jit {jit:8.1f}  ({jit / aot:.0f}x)")
    if args.out:
        import datetime

        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        command = f"python tools/bench_template_aot.py DIR --rounds {args.rounds} --calls "
        command += f"{args.calls} --cold {args.cold} --out {args.out.name}"
        args.out.write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "date": now, "command": command,
            "rounds": args.rounds, "calls": args.calls, "cold": args.cold,
            "results": results, "first_call_seconds": first,
        }, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
