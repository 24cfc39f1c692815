"""Records what reporting a bad index costs a writing operator per call, on a CUDA GPU.

The operator is the template's ``store_kv`` (``--data kind=scatter``): the rows
of ``k`` and ``v`` written into two caches at the rows ``slot`` names.
``tools/bad_index.cu`` holds its kernel with five ways to handle a slot past
the caches (skip, flag_read, flag_later, pre_pass, trap; the file says what
each does). This tool compiles it with nvcc into a shared library, then:

* times one call per strategy, as the wall time of a loop of calls between
  two synchronizations (what a caller that launches call after call sees),
  the strategies interleaved round by round, at decode and prefill shapes,
  with torch's ``index_copy_`` on both caches beside them;
* calls each strategy once with one bad slot among good ones and records what
  the host learned and what was written; the trap in a child process, since
  it ends the process's CUDA context.

Usage, on a GPU machine::

    python tools/record_bad_index.py --out docs/recorded/bad_index_<gpu>.json
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tools" / "bad_index.cu"
STRATEGIES = ("skip", "flag_read", "flag_later", "pre_pass", "trap")
TORCH_ROW = "index_copy_ (torch)"
ROW_SIZE = 8 * 128  # 8 key/value heads of 128 values: one token's row
NUM_SLOTS = 65536
TOKENS = (1, 64, 4096)  # one sequence decoding, a batch decoding, a prefill


def build(out_dir: Path) -> Path:
    """Compiles tools/bad_index.cu for the visible GPU; returns the shared library."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    library = out_dir / f"bad_index_sm{major}{minor}.so"
    command = ["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC"]
    command += [f"-arch=sm_{major}{minor}", str(SOURCE), "-o", str(library)]
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(command, check=True)
    return library


def load(library: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library))
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.bad_index_store.argtypes = [ctypes.c_int, p, p, p, p, p, i64, i64, i64, p, p,
                                    ctypes.POINTER(i64)]  # fmt: skip
    lib.bad_index_store.restype = ctypes.c_int
    lib.bad_index_reset_flag.argtypes = [p, p]
    lib.bad_index_read_flag.argtypes = [p, p, ctypes.POINTER(i64)]
    lib.bad_index_error_string.restype = ctypes.c_char_p
    return lib


class Store:
    """``bad_index_store`` for one set of tensors: ``store(strategy)`` makes one call."""

    def __init__(self, lib: ctypes.CDLL, k, v, k_cache, v_cache, slot, flag):
        import torch

        self.lib, self.flag = lib, flag
        self.tensors = (k, v, k_cache, v_cache, slot, flag)  # kept alive
        self.args = [t.data_ptr() for t in (k, v, k_cache, v_cache, slot)]
        self.sizes = [k.shape[0], ROW_SIZE, k_cache.shape[0]]
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.found = ctypes.c_int64(-1)

    def __call__(self, strategy: str) -> int:
        """One call; the first bad token the call reported (or -1)."""
        err = self.lib.bad_index_store(
            STRATEGIES.index(strategy), *self.args, *self.sizes, self.flag.data_ptr(),
            self.stream, ctypes.byref(self.found),
        )  # fmt: skip
        if err:
            raise RuntimeError(f"{strategy}: {self.lib.bad_index_error_string(err).decode()}")
        return self.found.value

    def reset_flag(self) -> None:
        self.lib.bad_index_reset_flag(self.flag.data_ptr(), self.stream)

    def read_flag(self) -> int:
        found = ctypes.c_int64(-1)
        self.lib.bad_index_read_flag(self.flag.data_ptr(), self.stream, ctypes.byref(found))
        return found.value


def make_inputs(tokens: int, seed: int = 0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.randn(tokens, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(tokens, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k_cache = torch.zeros(NUM_SLOTS, 8, 128, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    slot = torch.randperm(NUM_SLOTS, device="cuda", generator=g)[:tokens].contiguous()
    flag = torch.empty(1, dtype=torch.int64, device="cuda")
    return k, v, k_cache, v_cache, slot, flag


def time_calls(tokens: int, lib: ctypes.CDLL, rounds: int) -> dict:
    """Microseconds per call of each strategy and of index_copy_: median and quartiles."""
    import torch

    k, v, k_cache, v_cache, slot, flag = make_inputs(tokens)
    store = Store(lib, k, v, k_cache, v_cache, slot, flag)
    store.reset_flag()

    def torch_call():
        k_cache.index_copy_(0, slot, k)
        v_cache.index_copy_(0, slot, v)

    calls = {name: (lambda s=name: store(s)) for name in STRATEGIES}
    calls[TORCH_ROW] = torch_call
    names = list(calls)
    per_loop = 200 if tokens <= 64 else 50
    for call in calls.values():  # warm up: the first launch of each kernel loads it
        for _ in range(10):
            call()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # each goes first in turn
        for name in order:
            call = calls[name]
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(per_loop):
                call()
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / per_loop * 1e6)
    assert store.read_flag() == -1, "flag_later flagged a good slot"
    result = {}
    for name, values in samples.items():
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
        result[name] = {"median_us": median, "q1_us": q1, "q3_us": q3, "samples_us": values}
    return {"tokens": tokens, "row_size": ROW_SIZE, "num_slots": NUM_SLOTS,
            "calls_per_sample": per_loop, "us_per_call": result}  # fmt: skip


def bad_slot_outcomes(library: Path) -> dict:
    """Each strategy but trap, once, with token 5 of 16 given slot NUM_SLOTS."""
    import torch

    lib = load(library)
    outcomes = {}
    for name in STRATEGIES[:-1]:
        k, v, k_cache, v_cache, slot, flag = make_inputs(16, seed=1)
        slot[5] = NUM_SLOTS
        store = Store(lib, k, v, k_cache, v_cache, slot, flag)
        store.reset_flag()
        reported = store(name)
        torch.cuda.synchronize()
        good = [t for t in range(16) if t != 5]
        written = sum(bool(torch.equal(k_cache[slot[t]], k[t])) for t in good)
        later = store.read_flag() if name == "flag_later" else None
        outcomes[name] = {
            "reported_during_call": reported,
            "read_from_flag_later": later,
            "good_tokens_written": written,
            "good_tokens": len(good),
        }
    outcomes["trap"] = trap_outcome(library)
    return outcomes


def trap_probe(library: str) -> None:
    """In a child process: the trap strategy with one bad slot, then what CUDA says."""
    import torch

    lib = load(Path(library))
    k, v, k_cache, v_cache, slot, flag = make_inputs(16, seed=1)
    slot[5] = NUM_SLOTS
    torch.cuda.synchronize()
    store = Store(lib, k, v, k_cache, v_cache, slot, flag)
    report = {}
    try:
        store("trap")
        report["launch"] = "returned"
    except RuntimeError as e:
        report["launch"] = f"raised: {e}"
    for step in ("synchronize", "a later allocation"):
        try:
            if step == "synchronize":
                torch.cuda.synchronize()
            else:
                torch.ones(1, device="cuda").sum().item()
            report[step] = "returned"
        except RuntimeError as e:
            report[step] = "raised: " + str(e).strip().splitlines()[0]
    print(json.dumps(report))


def trap_outcome(library: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--trap-probe", str(library)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"output": (proc.stdout + proc.stderr)[-800:]}
    report["exit_code"] = proc.returncode
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the JSON record to write")
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds (default 21)")
    parser.add_argument("--trap-probe", metavar="LIBRARY", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trap_probe:
        trap_probe(args.trap_probe)
        return 0
    if not args.out:
        parser.error("--out is required")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("record_bad_index.py: no CUDA GPU visible to torch")
    library = build(ROOT / "build" / "bad_index")
    lib = load(library)
    shapes = []
    for tokens in TOKENS:
        print(f"timing {tokens} token(s), {args.rounds} rounds ...", flush=True)
        shapes.append(time_calls(tokens, lib, args.rounds))
        for name, t in shapes[-1]["us_per_call"].items():
            print(f"  {name:20} {t['median_us']:8.2f} us [{t['q1_us']:.2f} to {t['q3_us']:.2f}]")
    print("one bad slot, each strategy ...", flush=True)
    outcomes = bad_slot_outcomes(library)
    for name, outcome in outcomes.items():
        print(f"  {name:11} {outcome}")
    record = {
        "format": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "command": f"python tools/record_bad_index.py --out {Path(args.out).name}",
        "rounds": args.rounds,
        "dtype": "bf16",
        "shapes": shapes,
        "bad_slot": outcomes,
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
