"""Times the Triton kernels under two sets of launch rules, interleaved, on one GPU.

The library's planners (``opguide/triton/launch.py``) against those of another
copy of that file, given on the command line: for each operator, shape and
dtype both configurations are passed as ``forced=`` to the same launch
functions of :mod:`opguide.triton.ops`, checked against each other, and timed
round robin (``guidekit.benchmark.time_round_robin``: batches queued behind
a spin, L2 cleaned before each batch, inputs rotated through more memory than
L2 holds), as a percentage of a same-size device-to-device copy. Where both
rules give the same configuration it is timed once. Needs a CUDA GPU.

    python3 tools/compare_triton_plans.py OTHER_LAUNCH_PY [--ops forward backward fused]

Bytes: forward reads x and writes y and inv_rms (2 M N s + 4 M); backward
reads x, grad_y and inv_rms and writes grad_x (3 M N s + 4 M); fused reads x
and residual and writes residual, y and inv_rms (4 M N s + 4 M). grad_weight's
partial sums are not counted (the same for both rules at a given grid).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys

import torch

from guidekit.benchmark.timing import _rotation, copy_bandwidth, time_round_robin
from opguide.triton import launch
from opguide.triton import ops as triton_ops

# Rows in registers and split rows, of each pass (1024x65536: split everywhere).
SHAPES = [
    (1, 4096), (1024, 4096), (8192, 4096), (4096, 8192), (65536, 1024), (16384, 16384),
    (1024, 65536),
]  # fmt: skip
DTYPES = (torch.bfloat16, torch.float32)
PLANNERS = {"forward": "forward_config", "backward": "backward_config", "fused": "fused_config"}
EPS = 1e-6


def load_rules(path: str):
    """The launch module at ``path``, imported as a sibling of opguide.triton.launch."""
    spec = importlib.util.spec_from_file_location("opguide.triton._compared_launch", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # its relative imports resolve in opguide.triton
    return module


def as_library_config(config):
    """The same knobs as an instance of the library's own class (the launch code checks types)."""
    return getattr(launch, type(config).__name__)(**dataclasses.asdict(config))


def describe(config) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(config).items())
    return f"{type(config).__name__}({fields})"


def case(op: str, m: int, n: int, dtype: torch.dtype, device: torch.device):
    """(bytes moved, arg sets, fn(forced, *args)) of one operator at one shape."""
    s = torch.tensor([], dtype=dtype).element_size()
    w = torch.randn(n, device=device, dtype=dtype)
    if op == "forward":
        per_set = 2 * m * n * s + 4 * m
        nbytes = per_set

        def make():
            x = torch.randn(m, n, device=device, dtype=dtype)
            return (x, torch.empty(m, device=device, dtype=torch.float32))

        def fn(forced, x, inv):
            return triton_ops.rms_norm_forward(x, w, EPS, inv, forced=forced)

    elif op == "backward":
        per_set = 3 * m * n * s + 4 * m
        nbytes = per_set

        def make():
            x = torch.randn(m, n, device=device, dtype=dtype)
            inv = torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
            return (x, torch.randn_like(x), inv)

        def fn(forced, x, grad_y, inv):
            return triton_ops.rms_norm_backward(grad_y, x, w, inv, forced=forced)

    else:
        per_set = 4 * m * n * s + 4 * m
        nbytes = per_set

        def make():
            x = torch.randn(m, n, device=device, dtype=dtype)
            return (x, torch.randn_like(x))

        def fn(forced, x, res):
            return triton_ops.fused_add_rms_norm(x, res, w, EPS, forced=forced)

    sets = [make() for _ in range(_rotation(per_set, device))]
    return nbytes, sets, fn


def check_same(op, fn, sets, a, b, dtype) -> str:
    """Both configurations' results on one fresh input set, compared."""
    fresh = [t.clone() for t in sets[0]]
    twin = [t.clone() for t in sets[0]]
    got_a, got_b = fn(a, *fresh), fn(b, *twin)
    if isinstance(got_a, torch.Tensor):  # the forward returns y alone
        got_a, got_b = (got_a,), (got_b,)
    tol = 2e-2 if dtype != torch.float32 else 1e-3  # grad_weight: sums in another order
    try:
        for u, v in zip(got_a, got_b, strict=True):
            torch.testing.assert_close(u.float(), v.float(), rtol=tol, atol=tol)
        if op == "fused":  # the residual, updated in place
            torch.testing.assert_close(fresh[1].float(), twin[1].float(), rtol=tol, atol=tol)
    except AssertionError as error:
        return "DIFFERENT RESULTS: " + str(error).splitlines()[0]
    return "results agree"


def compare(op, m, n, dtype, device, mine, theirs, copy):
    """Times one case under both configurations and prints it; (points gained, case) or None."""
    nbytes, sets, fn = case(op, m, n, dtype, device)
    head = f"{op:8} {str(dtype).removeprefix('torch.'):8} {m:6d}x{n:<6d}"
    fns = {"library": (lambda *a: fn(mine, *a), sets)}
    if theirs != mine:
        fns["other"] = (lambda *a: fn(theirs, *a), sets)
    seconds = time_round_robin(fns, device=device, batches=15, calls_per_batch=10, warmup=2)
    pct = {k: 100 * nbytes / s / copy for k, s in seconds.items()}
    if theirs == mine:
        print(f"{head} same plan {describe(mine)}: {pct['library']:5.1f}%", flush=True)
        return None
    agree = check_same(op, fn, sets, mine, theirs, dtype)
    gain = pct["library"] - pct["other"]
    print(f"{head} library {pct['library']:5.1f}% {describe(mine)}\n"
          f"{'':24} other   {pct['other']:5.1f}% {describe(theirs)}\n"
          f"{'':24} library - other: {gain:+5.1f} points; {agree}", flush=True)  # fmt: skip
    return gain, head.strip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", help="another copy of opguide/triton/launch.py")
    parser.add_argument("--ops", nargs="+", choices=list(PLANNERS), default=list(PLANNERS))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("compare_triton_plans: needs a CUDA GPU")
        return 2
    other = load_rules(args.other)
    device = torch.device("cuda")
    copy = copy_bandwidth(device)
    print(f"{torch.cuda.get_device_name()}: copy {copy / 1e9:.0f} GB/s; "
          f"'library' = opguide/triton/launch.py, 'other' = {args.other}", flush=True)  # fmt: skip
    drops = []
    for op in args.ops:
        for dtype in DTYPES:
            for m, n in SHAPES:
                mine = getattr(launch, PLANNERS[op])(m, n, dtype, device)
                theirs = as_library_config(getattr(other, PLANNERS[op])(m, n, dtype, device))
                gain = compare(op, m, n, dtype, device, mine, theirs, copy)
                if gain is not None:
                    drops.append(gain)
                torch.cuda.empty_cache()
    if drops:
        worst, where = min(drops)
        mean = sum(g for g, _ in drops) / len(drops)
        print(f"{len(drops)} cases differ; library - other: worst {worst:+.1f} points "
              f"({where}), mean {mean:+.1f}")  # fmt: skip
    else:
        print("both rules give the same configuration in every case")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
