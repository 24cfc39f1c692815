"""Another kernel holds all but a few SMs while an opguide operator runs: two probes.

``python tests/shared_gpu_probe.py [--free 2] [--timeout 4] [--routes cpp,triton]
[--json FILE]`` runs every case (operator, direction, backend, row length) on
an NVIDIA GPU and prints a line per case and probe:

* **progress**: a *holding kernel* on another stream keeps all but ``--free``
  SMs busy until it is released; the case is queued on a stream of its own,
  and it must return to the host at once and finish on the free SMs before
  the release, ``--timeout`` seconds later.
* **dependent**: the holding kernel waits for a flag that the case's stream
  sets after the case. A call that needs the held SMs, or that waits on the
  host for the GPU, would never finish; a timer releases the holding kernel
  after ``--timeout`` seconds, and the case fails.

Each result must equal the same call's result on an idle GPU, bit for bit.
The holding kernel is a Triton kernel of 1024 threads whose values fill an
SM's register file, one program per held SM; the probe checks that other
work then runs only on the free SMs (``%smid``) before it trusts the numbers.
``tests/test_shared_gpu.py`` runs this script once per route, with the
route's setting for a shared GPU. Every operator of the registry is called
as its ``tests/calls_<name>.py`` says.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import threading
import time

import torch
import triton
import triton.language as tl
from op_calls import calls_for

from opguide.registry import OPERATORS

# Values each holding thread keeps in registers through its wait: 64 float32
# on 1024 threads are the 65536 registers of an SM (sm_80 to sm_100), so no
# other program fits beside it.
HOLD_WARPS = 32
HOLD_BLOCK = HOLD_WARPS * 32 * 64


@triton.jit
def _sm_id(like):
    return tl.inline_asm_elementwise(
        "mov.u32 $0, %smid;", "=r,r", [like], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _hold_kernel(
    flag_ptr,  # [1] int32: 1 releases
    sm_ptr,  # [programs] int32: the SM of each program
    keep_ptr,  # [programs * BLOCK] float32: the values held in registers
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    kept = tl.load(keep_ptr + pid * BLOCK + offs)
    one = tl.arange(0, 1)
    tl.store(sm_ptr + pid + one, _sm_id(pid + one))
    # A read of the flag a microsecond, so that the waiting programs leave the
    # memory system to the work on the free SMs.
    while tl.load(flag_ptr, volatile=True) == 0:
        tl.inline_asm_elementwise(
            "nanosleep.u32 1000;", "=r,r", [one], dtype=tl.int32, is_pure=False, pack=1
        )
    tl.store(keep_ptr + pid * BLOCK + offs, kept + 1.0)


@triton.jit
def _where_kernel(
    sm_ptr,  # [programs] int32: the SM of each program
):
    pid = tl.program_id(0)
    one = tl.arange(0, 1)
    tl.store(sm_ptr + pid + one, _sm_id(pid + one))


class Holder:
    """All but ``free`` SMs of the current GPU, held by one kernel until released.

    The kernel waits for a flag on the GPU. The host releases it by a copy
    into the flag on a stream of its own, which the copy engine runs beside
    the kernel; a stream releases it by the same copy queued after its work.
    """

    def __init__(self, free: int):
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.programs = self.sms - free
        self.flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.held = torch.full((self.programs,), -1, dtype=torch.int32, device="cuda")
        self.keep = torch.zeros(self.programs * HOLD_BLOCK, device="cuda")
        self.one = torch.ones(1, dtype=torch.int32).pin_memory()
        self.stream = torch.cuda.Stream()
        self.side = torch.cuda.Stream()
        self.lock = threading.Lock()

    def hold(self) -> None:
        """Launches the holding kernel; its programs start within microseconds."""
        torch.cuda.synchronize()
        self.flag.zero_()
        torch.cuda.synchronize()
        with torch.cuda.stream(self.stream):
            _hold_kernel[(self.programs,)](
                self.flag, self.held, self.keep, BLOCK=HOLD_BLOCK, num_warps=HOLD_WARPS
            )
        time.sleep(0.2)

    def release(self) -> None:
        """Sets the flag by a copy on a stream of its own: no SM needed."""
        with self.lock, torch.cuda.stream(self.side):
            self.flag.copy_(self.one, non_blocking=True)

    def release_after(self, stream: torch.cuda.Stream) -> None:
        """Queues the release on ``stream``: the holder waits for that stream's work."""
        with torch.cuda.stream(stream):
            self.flag.copy_(self.one, non_blocking=True)

    def check_free(self) -> tuple[int, list[int]]:
        """(distinct held SMs, the SMs other work runs on while they are held)."""
        where = torch.full((8 * self.sms,), -1, dtype=torch.int32, device="cuda")
        # A kernel's first launch loads its module, which waits for the GPU:
        # launched first while nothing is held.
        _where_kernel[(1,)](where)
        torch.cuda.synchronize()
        self.hold()
        work = torch.cuda.Stream()
        with torch.cuda.stream(work):
            _where_kernel[(where.numel(),)](where)
            done = torch.cuda.Event()
            done.record(work)
        deadline = time.monotonic() + 10
        while not done.query() and time.monotonic() < deadline:
            time.sleep(0.001)
        self.release()
        torch.cuda.synchronize()
        held = set(self.held.tolist())
        return len(held - {-1}), sorted(set(where.tolist()))


def make_case(op: str, direction: str, backend: str, n: int):
    """A function that queues one call on the current stream and returns its results.

    The operator is called as ``tests/calls_<op>.py`` says, on 8 rows of ``n``
    bfloat16 elements.
    """
    calls = calls_for(op)
    gen = torch.Generator(device="cuda").manual_seed(n)
    inputs = calls.inputs((8, n), torch.bfloat16, gen)
    kwargs = {"backend": backend}
    return lambda: tuple(calls.call(inputs, kwargs, direction == "training").values())


def cases(routes):
    """(operator, direction, backend, row length) of every case: every operator of the registry."""
    out = []
    for backend in routes:
        for op in OPERATORS:
            if backend not in op.routes:
                continue
            directions = ("forward", "training") if calls_for(op.name).backward else ("forward",)
            for n in (4096, 32768, 262144, 524288, 1 << 20):
                out += [(op.name, direction, backend, n) for direction in directions]
    return out


def probe(holder: Holder, call, work, dependent: bool, timeout: float) -> dict:
    """Runs ``call`` beside the holding kernel: seconds to return and to finish, who released."""
    holder.hold()
    released = threading.Event()

    def on_timer():
        released.set()
        holder.release()

    timer = threading.Timer(timeout, on_timer)
    timer.start()
    # A call that does not come back dumps the Python stacks, so the log
    # says where the host waits.
    faulthandler.dump_traceback_later(timeout / 2)
    start = time.monotonic()
    with torch.cuda.stream(work):
        results = call()
        if dependent:
            holder.release_after(work)
        done = torch.cuda.Event()
        done.record(work)
    returned = time.monotonic() - start
    faulthandler.cancel_dump_traceback_later()
    while not done.query() and time.monotonic() - start < timeout + 60:
        time.sleep(0.0005)
    finished = time.monotonic() - start if done.query() else float("inf")
    timer.cancel()
    by_timer = released.is_set()
    holder.release()
    torch.cuda.synchronize()
    return {
        "returned_s": round(returned, 4),
        "finished_s": round(finished, 4),
        "released_by_timer": by_timer,
        "results": results,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--free", type=int, default=2, help="SMs left free (default 2)")
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds per probe")
    parser.add_argument("--routes", default="cpp,triton")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    # A check that stops making progress prints every thread's stack.
    faulthandler.dump_traceback_later(30, repeat=True)
    holder = Holder(args.free)
    print("holding kernel: checking where other work runs", flush=True)
    held, others = holder.check_free()
    faulthandler.cancel_dump_traceback_later()
    print(f"{torch.cuda.get_device_name()}: {holder.sms} SMs; holding kernel on {held} SMs; "
          f"other work ran on SMs {others}", flush=True)  # fmt: skip
    rows = []
    work = torch.cuda.Stream()
    trusted = held == holder.programs and len(others) <= args.free
    if not trusted:
        print("the holding kernel did not hold its SMs alone: probes not run", flush=True)
    for op, direction, backend, n in cases(args.routes.split(",")) if trusted else []:
        call = make_case(op, direction, backend, n)
        # The first calls compile and load the kernels (loading a module waits
        # for the GPU) and fill the allocator's cache for the work stream; the
        # last gives the idle GPU's results.
        with torch.cuda.stream(work):
            call()
            want = call()
        torch.cuda.synchronize()
        want = [w.clone() for w in want]
        for kind in ("progress", "dependent"):
            got = probe(holder, call, work, kind == "dependent", args.timeout)
            same = all(torch.equal(a, b) for a, b in zip(got.pop("results"), want, strict=True))
            if kind == "progress":
                ok = not got["released_by_timer"] and got["finished_s"] < args.timeout
            else:
                ok = not got["released_by_timer"]
            row = {"op": op, "direction": direction, "backend": backend, "n": n, "probe": kind,
                   **got, "equal": same, "ok": bool(ok and same)}  # fmt: skip
            rows.append(row)
            print(
                f"{'ok  ' if row['ok'] else 'FAIL'} {kind:9} {backend:6} {op:20} {direction:8} "
                f"N={n:<8} returned {got['returned_s']:.3f} s finished {got['finished_s']:.3f} s"
                f"{' released by timer' if got['released_by_timer'] else ''}"
                f"{'' if same else ' RESULTS DIFFER'}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            summary = {"device": torch.cuda.get_device_name(), "sms": holder.sms,
                       "free": args.free, "timeout_s": args.timeout, "held_sms": held,
                       "other_work_sms": others, "trusted": trusted}  # fmt: skip
            versions = {"torch": torch.__version__, "triton": triton.__version__}
            settings = ("OPGUIDE_TRITON_SPLIT", "OPGUIDE_CLUSTERS", "OPGUIDE_PDL")
            versions["settings"] = {k: os.environ[k] for k in settings if k in os.environ}
            json.dump({**summary, **versions, "rows": rows}, f, indent=1)
    failed = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)} of {len(rows)} probes ok", flush=True)
    return 0 if trusted and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
