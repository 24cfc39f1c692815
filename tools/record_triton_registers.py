"""Records the registers and spills of opguide's Triton kernels, as Triton compiled them.

On a machine with a CUDA GPU::

    python tools/record_triton_registers.py --out docs/recorded/triton_registers_h100.json

runs the forward and the backward (bfloat16, M x N = 2^26 elements) at each
row length that the register kernels take, then reads every compiled kernel's
register count and spill bytes from Triton's cache of compiled kernels.
Step 11 reads the file to say where a kernel ran out of registers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton

import opguide
from opguide.triton.backward import _rms_norm_bwd_kernel
from opguide.triton.forward import _rms_norm_fwd_kernel

NS = (4096, 8192, 16384)


def compiled(kernel) -> list:
    """Every compiled version of a Triton kernel, in the order Triton made them."""
    found = []
    for caches in kernel.device_caches.values():
        for binary in caches[0].values():
            binary._init_handles()
            found.append(binary)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    rows = []
    for n in NS:
        seen = {k: len(compiled(k)) for k in (_rms_norm_fwd_kernel, _rms_norm_bwd_kernel)}
        x = torch.randn(2**26 // n, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        opguide.rms_norm(x, w, backend="triton").backward(torch.randn_like(x))
        torch.cuda.synchronize()
        for kernel, before in seen.items():
            for binary in compiled(kernel)[before:]:
                rows.append(
                    {
                        "kernel": kernel.fn.__name__,
                        "n": n,
                        "num_warps": binary.metadata.num_warps,
                        "registers": binary.n_regs,
                        "spill_bytes": binary.n_spills,
                    }
                )
                print(rows[-1])
    record = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "command": "python tools/record_triton_registers.py --out " + Path(args.out).name,
        "kernels": rows,
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
