"""Records step 3's minimal CUDA kernel on a GPU, beside a copy of the same bytes.

On a machine with a CUDA GPU, from the repository root (opguide installed)::

    python tools/record_minimal_cuda.py

builds the minimal kernel of step 3 as that page builds it
(:func:`torch.utils.cpp_extension.load` of ``csrc/minimal/rms_norm_minimal.cpp``,
then ``csrc/minimal/rms_norm_minimal_cuda.cu``, ``-O3``), checks it against
the reference, and times four things on the same inputs:

* ``y.copy_(x)`` into a tensor that exists: the bytes of one RMSNorm (read
  ``x``, write ``y``) and no arithmetic, the reference a norm's time is
  compared with (a reference, not a bound: a kernel can beat ``copy_``);
* the minimal kernel, ``torch.ops.opguide_minimal.rms_norm``;
* ``torch.nn.functional.rms_norm``;
* ``opguide.rms_norm(..., backend="cpp")``, the library's CUDA kernel;

for float32 and bfloat16, at rows x N = 2**24 elements with N = 1024, 4096
and 16384. Each round times every candidate in turn (the first one changes
from round to round); a candidate's sample is one pass over several input
sets, between two CUDA events, as many sets as make four times the L2 cache,
so that no call finds its input in L2. A result is the median and quartiles
of the rounds' time per call. It writes ``docs/recorded/minimal_cuda_<gpu>.json``
(``<gpu>`` from the device's name, e.g. ``h100``) with the device, the torch
and CUDA versions, the date, the command and the numbers. Step 3 reads it
with :func:`read_record`.

``--device cpu --out FILE`` runs the same code on the CPU (the C++ minimal
kernel, small inputs, a wall clock), to check the tool without a GPU; it
never writes into ``docs/recorded/`` on its own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # guidekit and opguide from the checkout this tool lives in

from guidekit.recorded import short_gpu_name, tool_command  # noqa: E402

SOURCES = ROOT / "csrc" / "minimal"
COPY, MINIMAL, TORCH, LIBRARY = (
    "y.copy_(x)",
    "minimal kernel",
    "F.rms_norm",
    "opguide.rms_norm (cpp)",
)
CANDIDATES = (COPY, MINIMAL, TORCH, LIBRARY)
ROW_LENGTHS = (1024, 4096, 16384)
DTYPES = ("float32", "bfloat16")
SPIN_CYCLES = 200_000  # about 0.1 ms at an H100's 1.98 GHz, longer than queueing four calls
RECORD_KEYS = ("device", "torch", "cuda", "date", "command", "method", "results")


def build_minimal(device: str) -> None:
    """Builds and loads step 3's minimal libraries: the CPU one, and on CUDA the CUDA one.

    The sources and flags are step 3's; the build folders are this tool's own
    (``build/jit/record_minimal_cuda/``), so that it never rebuilds a page's.
    """
    from torch.utils.cpp_extension import load

    names = {"rms_norm_minimal_cpu": "rms_norm_minimal.cpp"}
    if device == "cuda":
        names["rms_norm_minimal_cuda"] = "rms_norm_minimal_cuda.cu"
    for name, source in names.items():
        build_dir = ROOT / "build" / "jit" / "record_minimal_cuda" / name
        build_dir.mkdir(parents=True, exist_ok=True)
        load(
            name=name,
            sources=[str(SOURCES / source)],
            extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3"],
            build_directory=str(build_dir),
            is_python_module=False,
        )


def candidates(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> dict:
    """``{name: function of no arguments}`` for one input set."""
    import opguide

    n = x.shape[-1]
    return {
        COPY: lambda: y.copy_(x),
        MINIMAL: lambda: torch.ops.opguide_minimal.rms_norm(x, w, 1e-6),
        TORCH: lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-6),
        LIBRARY: lambda: opguide.rms_norm(x, w, 1e-6, backend="cpp"),
    }


def input_sets(numel: int, n: int, dtype: torch.dtype, device: str) -> list[dict]:
    """As many input sets as make four times the L2 cache (at least two) on a GPU."""
    per_set = 2 * numel * torch.empty((), dtype=dtype).element_size()  # read x, write y
    count = 2
    if device == "cuda":
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        count = max(2, math.ceil(4 * l2 / per_set))
    sets = []
    for _ in range(count):
        x = torch.randn(numel // n, n, dtype=dtype, device=device)
        w = torch.rand(n, dtype=dtype, device=device) + 0.5
        sets.append(candidates(x, w, torch.empty_like(x)))
    return sets


def check(numel: int, n: int, dtype: torch.dtype, device: str) -> None:
    """The minimal kernel and the library's agree with the reference on one input."""
    from opguide.reference import rms_norm_reference
    from opguide.testing import TOLERANCES

    x = torch.randn(numel // n, n, dtype=dtype, device=device)
    w = torch.rand(n, dtype=dtype, device=device) + 0.5
    fns = candidates(x, w, torch.empty_like(x))
    ref = rms_norm_reference(x, w, 1e-6)
    for name in (MINIMAL, LIBRARY):
        torch.testing.assert_close(fns[name](), ref, **TOLERANCES[dtype])


def time_rounds(sets: list[dict], rounds: int, device: str) -> dict[str, list[float]]:
    """Milliseconds per call, one sample per round and candidate.

    Each round times every candidate in turn, starting one further along each
    round; a sample is one call on each input set, divided by the number of sets.
    On CUDA the calls are queued behind ``torch.cuda._sleep`` (a spin kernel),
    so the events time the GPU's work and not the CPU's launches.
    """
    samples: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    for fns in sets:  # warm-up: first calls, caches, allocator
        for fn in fns.values():
            fn()
    for r in range(rounds):
        order = CANDIDATES[r % len(CANDIDATES) :] + CANDIDATES[: r % len(CANDIDATES)]
        for name in order:
            if device == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                # A spin of about 0.1 ms keeps the GPU busy while the calls are
                # queued, so no launch gap falls between the two events.
                torch.cuda._sleep(SPIN_CYCLES)
                start.record()
                for fns in sets:
                    fns[name]()
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                for fns in sets:
                    fns[name]()
                ms = (time.perf_counter() - t0) * 1e3
            samples[name].append(ms / len(sets))
    return samples


def summary(values: list[float]) -> dict[str, float]:
    """Median and quartiles of ``values`` (milliseconds)."""
    q1, median, q3 = statistics.quantiles(values, n=4)
    return {"median": round(median, 6), "q1": round(q1, 6), "q3": round(q3, 6)}


def record(device: str, numel: int, rounds: int, command: str) -> dict:
    """Builds, checks and times every case; returns the record (see the module's docstring)."""
    build_minimal(device)
    results = []
    print(header())
    for dtype_name in DTYPES:
        dtype = getattr(torch, dtype_name)
        for n in ROW_LENGTHS:
            check(min(numel, 64 * n), n, dtype, device)
            sets = input_sets(numel, n, dtype, device)
            samples = time_rounds(sets, rounds, device)
            results.append(
                {
                    "dtype": dtype_name,
                    "rows": numel // n,
                    "n": n,
                    "input_sets": len(sets),
                    "ms": {name: summary(v) for name, v in samples.items()},
                }
            )
            del sets
            print(line(results[-1]), flush=True)
    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        name = f"CPU ({torch.get_num_threads()} threads)"
    return {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "method": (
            "CUDA events around one call on each input set (the sets make four times the "
            "L2 cache), queued behind a spin kernel; the candidates take turns each round; "
            "median and quartiles of rounds"
            if device == "cuda"
            else "wall clock around one call on each input set; the candidates take turns "
            "each round; median and quartiles of rounds"
        ),
        "rounds": rounds,
        "results": results,
    }


def fractions(result: dict) -> dict[str, tuple[float, float, float]]:
    """Each candidate's speed as a fraction of the copy's: ``{name: (median, low, high)}``.

    The fraction is the copy's median time over the candidate's time (1.0: as
    fast as copying the same bytes); low and high use the candidate's third
    and first quartile.
    """
    copy = result["ms"][COPY]["median"]
    return {
        name: (copy / ms["median"], copy / ms["q3"], copy / ms["q1"])
        for name, ms in result["ms"].items()
        if name != COPY
    }


SHORT = {MINIMAL: "minimal", TORCH: "F.rms_norm", LIBRARY: "opguide"}


def header() -> str:
    """The column heads of :func:`line`."""
    heads = "".join(f"{SHORT[name]:>11}" for name in SHORT)
    return f"{'dtype':8} {'rows x N':>13} {'copy us':>8}{heads}"


def line(result: dict) -> str:
    """One result: its case, the copy's time, and each candidate's speed over the copy's."""
    case = f"{result['rows']} x {result['n']}"
    copy = result["ms"][COPY]["median"] * 1e3
    cells = "".join(f"{f[0]:>11.2f}" for f in fractions(result).values())
    return f"{result['dtype']:8} {case:>13} {copy:8.1f}{cells}"


def read_record(path: Path | str) -> dict:
    """Reads a record this tool wrote, checking that it holds what step 3 shows.

    Args:
        path: a ``minimal_cuda_<gpu>.json`` file.

    Returns:
        The record: ``device``, ``torch``, ``cuda``, ``date``, ``command``,
        ``method``, ``rounds`` and ``results`` (one dict per dtype and row
        length, with ``ms[name]`` = median, ``q1`` and ``q3`` per call).

    Raises:
        ValueError: a key is missing, or a result lacks a candidate.
    """
    data = json.loads(Path(path).read_text())
    missing = [key for key in RECORD_KEYS if key not in data]
    if missing:
        raise ValueError(f"{path}: the record has no {', '.join(missing)}")
    for result in data["results"]:
        absent = [name for name in CANDIDATES if name not in result.get("ms", {})]
        if absent or not {"dtype", "rows", "n"} <= result.keys():
            raise ValueError(f"{path}: a result lacks {absent or 'its case'}: {result}")
    return data


def plot(data: dict, ax) -> None:
    """Bars of each candidate's speed as a fraction of the copy's, per case, on ``ax``."""
    names = [name for name in CANDIDATES if name != COPY]
    cases = data["results"]
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        f = [fractions(result)[name] for result in cases]
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(cases))]
        err = [[m - lo for m, lo, _ in f], [hi - m for m, _, hi in f]]
        ax.bar(xs, [m for m, _, _ in f], width=width, yerr=err, capsize=2, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    labels = [f"{r['dtype']}\nN={r['n']}" for r in cases]
    ax.set_xticks(range(len(cases)), labels)
    ax.set_ylabel("speed / copy's speed")
    ax.set_title(f"{data['device']}, recorded {data['date'][:10]}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, help="the file to write (default: docs/recorded/)")
    parser.add_argument("--numel", type=int, help="elements per input (2**24 on CUDA)")
    parser.add_argument("--rounds", type=int, help="rounds (100 on CUDA)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA GPU here; --device cpu --out FILE checks the tool on the CPU")
    if args.device == "cpu" and args.out is None:
        parser.error("--device cpu needs --out FILE: a CPU run is no GPU record")
    numel = args.numel or (2**24 if args.device == "cuda" else 2**16)
    rounds = args.rounds or (100 if args.device == "cuda" else 5)
    given = sys.argv[1:] if argv is None else argv
    command = tool_command("tools/record_minimal_cuda.py", given)
    data = record(args.device, numel, rounds, command)
    out = args.out
    if out is None:
        gpu = short_gpu_name(data["device"])
        out = ROOT / "docs" / "recorded" / f"minimal_cuda_{gpu}.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
