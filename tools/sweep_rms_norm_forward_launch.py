"""Times variants of the one-block CUDA forward next to the library and its peers.

Builds ``tools/sweep_rms_norm_forward_launch.cu`` (the library's forward
kernel with switches, see that file) with nvcc, loads it with ctypes and, at each row
length N with M * N = 2**26 elements, times every variant in one round robin
with opguide's CUDA and Triton forwards, Liger, Quack (when they import) and a
copy of the same bytes: the benchmark's own timing
(``guidekit.benchmark.fixed_shapes._time_impls``: L2 cleaned, inputs rotated, batches
queued behind a GPU spin). Prints the fastest variants at each N and writes
every row as JSON.

    python3 tools/sweep_rms_norm_forward_launch.py --dtypes bf16 fp16 --out /tmp/launch.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from guidekit import benchmark  # noqa: E402
from guidekit.benchmark import fixed_shapes, passes, sweep, timing  # noqa: E402

FLAGS = {0: "library", 1: "plain loads", 2: "weight late", 4: "fast 1/rms", 7: "all three"}


class Variants:
    """The compiled variants: ``forward`` launches one, ``registers`` reads its kernel's."""

    def __init__(self, build_dir: Path):
        build_dir.mkdir(parents=True, exist_ok=True)
        lib = build_dir / "sweep_rms_norm_forward_launch.so"
        source = ROOT / "tools" / "sweep_rms_norm_forward_launch.cu"
        subprocess.run(
            ["nvcc", "-O3", "-std=c++17", "-arch=sm_90", f"-I{ROOT / 'csrc'}", "-shared",
             "-Xcompiler", "-fPIC", str(source), "-o", str(lib)],
            check=True,
        )  # fmt: skip
        self.lib = ctypes.CDLL(str(lib))
        i64, c_int, ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
        self.lib.forward_variant_launch.argtypes = [
            c_int, ptr, ptr, ptr, i64, i64, ctypes.c_float, c_int, c_int, c_int, c_int, ptr
        ]  # fmt: skip
        self.lib.forward_variant_registers.argtypes = [c_int, c_int, c_int]
        self.lib.forward_variant_threads.argtypes = [c_int, i64, c_int]

    def forward(self, x, w, eps, regs, per_row, rpb, flags):
        y = torch.empty_like(x)
        err = self.lib.forward_variant_launch(
            0 if x.dtype == torch.bfloat16 else 1, x.data_ptr(), w.data_ptr(), y.data_ptr(),
            x.shape[0], x.shape[1], eps, regs, per_row, rpb, flags,
            torch.cuda.current_stream().cuda_stream,
        )  # fmt: skip
        if err != 0:
            raise RuntimeError(f"variant regs {regs} flags {flags}: launch error {err}")
        return y

    def registers(self, bf16: bool, regs: int, flags: int) -> int:
        return self.lib.forward_variant_registers(0 if bf16 else 1, regs, flags)

    def threads(self, bf16: bool, n: int, regs: int) -> int:
        """Threads per row from the library's planner, or -1 (the row needs the long-row kernel)."""
        return self.lib.forward_variant_threads(0 if bf16 else 1, n, regs)


def variants(ext, n: int, dtype: torch.dtype) -> dict:
    found = {}
    for regs in (1, 2, 4):
        per_row = ext.threads(dtype == torch.bfloat16, n, regs)
        if per_row < 0:
            continue
        for rpb in (1, 2, 4, 8):
            if per_row * rpb > 1024 or per_row * rpb < 64:
                continue
            for flags in FLAGS:
                name = f"v regs {regs} thr {per_row} rows {rpb} {FLAGS[flags]}"

                def fn(x, w, regs=regs, per_row=per_row, rpb=rpb, flags=flags):
                    return ext.forward(x, w, benchmark.EPS, regs, per_row, rpb, flags)

                found[name] = fn
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["bf16"])
    parser.add_argument("--ns", nargs="+", type=int, default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build" / "tools")
    args = parser.parse_args()
    device = torch.device("cuda")
    t0 = time.time()
    ext = Variants(args.build_dir)
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    impls = {}
    try:
        import opguide

        impls["opguide"] = lambda x, w: opguide.rms_norm(x, w, benchmark.EPS, backend="cpp")
        impls["opguide triton"] = lambda x, w: opguide.rms_norm(
            x, w, benchmark.EPS, backend="triton"
        )
    except Exception as err:  # not built here: the variants still run
        print(f"opguide not timed: {err}")
    peers, missing = benchmark.peer_implementations("forward")
    impls.update(peers)
    for name, why in missing.items():
        print(f"{name} not timed: {why}")
    out_rows = []
    for dtype_name in args.dtypes:
        dtype = benchmark.DTYPES[dtype_name]
        s = passes._element_size(dtype)
        for n in args.ns:
            m = benchmark.SWEEP_ELEMENTS // n
            mine = variants(ext, n, dtype)
            x = torch.randn(m, n, device=device, dtype=dtype)
            w = torch.randn(n, device=device, dtype=dtype)
            want = torch.nn.functional.rms_norm(x.float(), (n,), w.float(), benchmark.EPS)
            for name, fn in mine.items():  # every variant computes the same thing
                err = (fn(x, w).float() - want).abs().max().item()
                if err > 0.1:
                    raise SystemExit(f"{name} at {m}x{n}: max error {err}")
            del x, w, want
            moved = benchmark.bytes_moved("forward", m, n, s)
            count = timing._rotation(moved, device)
            rows, skips = [], []
            fixed_shapes._time_impls(
                "forward", {**impls, **mine},
                lambda m=m, n=n, dtype=dtype, count=count: sweep._sweep_sets(
                    "forward", m, n, dtype, device, count),
                m=m, n=n, dtype_name=dtype_name, moved=moved, device=device, prepared=False,
                rows=rows, skips=skips, copy_sets=count,
            )  # fmt: skip
            copy = next(r for r in rows if r.impl == benchmark.SAME_SIZE_COPY)
            got = sorted(((copy.seconds / r.seconds, r.impl) for r in rows), reverse=True)
            print(f"\n{dtype_name} {m}x{n}")
            named = {"opguide", "opguide triton", "liger", "quack"}
            for rank, (frac, impl) in enumerate(got):
                if rank < 8 or impl in named:
                    print(f"  {100 * frac:6.1f}%  {impl}")
            for s_ in skips:
                print(f"  skipped {s_.impl}: {s_.reason}")
            for frac, impl in got:
                out_rows.append({"dtype": dtype_name, "m": m, "n": n, "impl": impl,
                                 "vs_copy": frac})  # fmt: skip
            torch.cuda.empty_cache()
    regs = {f"{'bf16' if b else 'fp16'} regs {r} {FLAGS[f]}": ext.registers(b, r, f)
            for b in (True, False) for r in (1, 2, 4) for f in FLAGS}  # fmt: skip
    print("\nregisters:", json.dumps(regs))
    if args.out:
        command = ["python3", "tools/sweep_rms_norm_forward_launch.py", *sys.argv[1:]]
        result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "command": " ".join(command), "rows": out_rows, "registers": regs}  # fmt: skip
        args.out.write_text(json.dumps(result, indent=1))
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
