"""Sweeps the launch configurations of the Triton RMSNorm kernels on one GPU, and
variants of the split kernels, against a large device-to-device copy. Needs a CUDA
GPU, triton and opguide built with its CUDA kernels (pip install
--no-build-isolation -e . with USE_CUDA=1).

    python3 tools/sweep_triton.py [forward] [backward] [fused] [grad-weight-sum] [split]
                                  [split-fenced]

forward, backward and fused time opguide's own kernels (opguide.triton.ops's
launch functions) with each forced= configuration of their register kernels
(rows and warps a program; for the backward also programs per SM and
software-pipeline stages), next to PyTorch's; grad-weight-sum times the whole
backward with each shape of the kernel that adds up grad_weight's partial rows
(grad_weight_sum=). The library's planners (opguide/triton/launch.py) take
their numbers from these. PDL is as OPGUIDE_PDL says (on by default on Hopper
and later).

split times opguide's forward and backward on rows split over programs
(opguide/triton/split.py) at each (SEG, num_warps, programs per SM), passed
as forced= configurations, and, as the "before", copies of the kernels that
wait for each row's total before they load the next row (forward: one program
per segment of each row), and of the backward that loaded one row ahead
instead of two ("one row late").
split-fenced runs the same variants with every split kernel counting its part
in behind a release fence (a float part, then an atomic count) instead of the
slots: "row at a time" at each (SEG, num_warps) and "one row late" at each
(SEG, num_warps, programs per SM).

Times come from guidekit.benchmark.time_per_call: medians of batches queued
behind a spin kernel, so the host's launch latency is not counted.
Bytes: forward reads x and writes y (2 M N s); backward reads x and grad_y and
writes grad_x (3 M N s); fused reads x and residual, writes residual and y (4 M N s).
"""

import functools
import sys

import torch
import triton
import triton.language as tl

from guidekit.benchmark import copy_bandwidth, time_per_call
from opguide.reference import rms_norm_backward_reference
from opguide.triton import launch
from opguide.triton import ops as triton_ops
from opguide.triton.backward import _grad_weight_sum_kernel as grad_weight_sum_kernel

# The Triton helpers the split variants below share with the library's kernels.
from opguide.triton.split import _count_in, _segment, _wait_total

GRAD_WEIGHT_SUM_BLOCK_P, GRAD_WEIGHT_SUM_BLOCK_N, GRAD_WEIGHT_SUM_WARPS = (
    launch.GRAD_WEIGHT_SUM.block_p, launch.GRAD_WEIGHT_SUM.block_n, launch.GRAD_WEIGHT_SUM.num_warps
)  # fmt: skip

SHAPES = [(32768, 4096), (8192, 4096), (4096, 8192), (65536, 1024)]
HEADINGS = {
    "grad-weight-sum": "grad-weight-sum: each (BLOCK_P, BLOCK_N, num_warps) of the last sum"
}
DTYPE = torch.bfloat16
EPS = 1e-6
BATCHES = 11
CALLS = 20


def time_us(fn, arg_sets) -> float:
    """Median microseconds per call over BATCHES batches of CALLS calls (NaN on failure)."""
    try:
        seconds = time_per_call(
            fn, arg_sets, device=torch.device("cuda"), batches=BATCHES, calls_per_batch=CALLS,
            warmup=2,
        )  # fmt: skip
        return seconds * 1e6
    except Exception as error:  # a variant this Triton cannot compile or launch
        print(f"  failed: {type(error).__name__}: {str(error)[:300]}", flush=True)
        return float("nan")


def best(results, match):
    """The fastest (us, label) of the results whose label satisfies ``match``."""
    return min(r for r in results if r[0] == r[0] and match(r[1]))  # r[0] == r[0]: not NaN


def reference(x, w, eps=EPS):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def arg_sets_for(m, n, tensors):
    """Enough sets of fresh buffers that one round of them is larger than L2."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    per_set = tensors * m * n * 2
    count = max(2, -(-3 * l2 // per_set))
    return count


def report(m, n, label, us, nbytes, copy, best="", extra=""):
    pct = 100 * nbytes / us / 1e3 / copy
    print(f"  {best}{m:6d}x{n:<5d} {label:44s} {us:7.1f} us {pct:5.1f}%{extra}", flush=True)


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=DTYPE)


def _check(label, got, want, tol):
    """Whether got is within tol of want, relative to want's largest element."""
    err = (got.float() - want.float()).abs().max().item() / want.float().abs().max().item()
    if not err <= tol:  # NaN fails too
        print(f"  WRONG {label}: relative error {err:.3g}", flush=True)
    return err <= tol


# ------------------------------------------------------- the launch configurations


def sweep_launches(m, n, nbytes, copy, sets, launches, want, baselines=None):
    """Times each ``(label, call)`` of ``launches`` on ``sets`` and reports it, then the
    fastest; ``baselines`` ({label: call}) are timed and reported first. A launch is
    timed only if its outputs on a copy of the first set match ``want`` (a tuple,
    compared with the first outputs) within 2%."""
    first = [t.clone() for t in sets[0]]  # as it is before calls update it (fused)
    for label, call in (baselines or {}).items():
        report(m, n, label, time_us(call, sets), nbytes, copy)
    results = []
    for label, call in launches:
        try:
            got = call(*(t.clone() for t in first))
            got = got if isinstance(got, tuple) else (got,)
            right = all([_check(label, g, w, 0.02) for g, w in zip(got, want, strict=False)])
        except Exception as error:  # a configuration this Triton cannot compile or launch
            print(f"  failed: {label}: {type(error).__name__}: {str(error)[:300]}", flush=True)
            continue
        if right:
            us = time_us(call, sets)
            results.append((us, label))
            report(m, n, label, us, nbytes, copy)
    if results:
        us, label = best(results, lambda label: True)
        report(m, n, label, us, nbytes, copy, "best ")


def row_configs(block):
    """(ROWS, num_warps) pairs to try for rows of ``block`` columns: 4 to 64 elements per thread."""
    return [(rows, warps) for rows in (1, 2, 4) for warps in (2, 4, 8, 16)
            if 4 <= block * rows // (32 * warps) <= 64]  # fmt: skip


def registers(block):
    """(label, forced configuration) of the register kernel at each of ``row_configs``."""
    return [(f"rows {rows} warps {warps}", launch.Registers(block, rows, warps))
            for rows, warps in row_configs(block)]  # fmt: skip


def forward_shape(m, n, copy):
    sets = [(randn(m, n),) for _ in range(arg_sets_for(m, n, 2))]
    w = randn(n)
    compiled = torch.compile(reference, dynamic=False)
    baselines = {
        "compile(reference)": lambda x: compiled(x, w),
        "F.rms_norm": lambda x: torch.nn.functional.rms_norm(x, (n,), w, EPS),
    }
    launches = [
        (label, lambda x, forced=forced: triton_ops.rms_norm_forward(x, w, EPS, forced=forced))
        for label, forced in registers(triton.next_power_of_2(n))
    ]
    want = (reference(sets[0][0], w),)
    sweep_launches(m, n, 2 * m * n * 2, copy, sets, launches, want, baselines)


def fused_shape(m, n, copy):
    sets = [(randn(m, n), randn(m, n)) for _ in range(arg_sets_for(m, n, 3))]
    w = randn(n)

    def unfused(x, residual):
        h = residual + x
        residual.copy_(h)
        return reference(h, w)

    def fused(x, residual, forced):
        return triton_ops.fused_add_rms_norm(x, residual, w, EPS, forced=forced)[0]

    launches = [
        (label, lambda x, r, forced=forced: fused(x, r, forced))
        for label, forced in registers(triton.next_power_of_2(n))
    ]
    want = (unfused(*(t.clone() for t in sets[0])),)
    baselines = {"compile(unfused reference)": torch.compile(unfused, dynamic=False)}
    sweep_launches(m, n, 4 * m * n * 2, copy, sets, launches, want, baselines)


def backward_sets(m, n):
    """Sets of (x, grad_y, inv_rms) for the backward, as the training forward saves inv_rms."""
    sets = []
    for _ in range(arg_sets_for(m, n, 3)):
        x = randn(m, n)
        sets.append((x, randn(m, n), torch.rsqrt(x.float().pow(2).mean(-1) + EPS)))
    return sets


def backward_configs(m, n, grad_weight_sums):
    """(label, keyword arguments of ``rms_norm_backward``) of each configuration to time."""
    if grad_weight_sums:
        return [
            (
                f"block_p {p} block_n {b} warps {w}",
                {"grad_weight_sum": launch.GradWeightSum(p, b, w)},
            )
            for p in (32, 64, 128)
            for b in (32, 64, 128)
            for w in (2, 4, 8)
        ]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block = triton.next_power_of_2(n)
    rows = max(1, 4096 // block)  # 4096 elements a loop step; STAGES rows loaded ahead
    return [
        (
            f"programs {per_sm}xSM stages {stages} warps {warps}",
            {"forced": launch.Registers(block, rows, warps, min(per_sm * sms, m), stages)},
        )
        for per_sm in (1, 2)
        for stages in (1, 2, 3)
        for warps in (4, 8, 16)
    ]


def backward_shape(m, n, copy, grad_weight_sums=False):
    sets = backward_sets(m, n)
    w = randn(n)

    def backward(x, grad_y, inv, kw):
        return triton_ops.rms_norm_backward(grad_y, x, w, inv, **kw)

    launches = [
        (label, lambda x, grad_y, inv, kw=kw: backward(x, grad_y, inv, kw))
        for label, kw in backward_configs(m, n, grad_weight_sums)
    ]
    want = rms_norm_backward_reference(sets[0][1], sets[0][0], w, EPS)
    sweep_launches(m, n, 3 * m * n * 2, copy, sets, launches, want)


# ------------------------------------------------------------------ split


@triton.jit
def count_in_fenced(
    partial_ptr,  # [M * S] float32, one part of the sum of squares per segment of each row
    count_ptr,  # [M] int32, the parts counted in so far, per row
    row, s, part, S,
):  # fmt: skip
    # The before of the slots (opguide/triton/split.py): the part in a float buffer, then
    # a count, with a release fence between them (it waits for every store
    # this thread has in flight).
    tl.store(partial_ptr + row * S + s, part)
    tl.debug_barrier()
    tl.atomic_add(count_ptr + row, 1, sem="release", scope="gpu")


@triton.jit
def wait_total_fenced(
    partial_ptr,  # [M * S] float32, one part of the sum of squares per segment of each row
    count_ptr,  # [M] int32, the parts counted in so far, per row
    row, S, SP: tl.constexpr,
):  # fmt: skip
    while tl.atomic_add(count_ptr + row, 0, sem="acquire", scope="gpu") < S:
        pass
    tl.debug_barrier()
    k = tl.arange(0, SP)
    parts = tl.load(partial_ptr + row * S + k, mask=k < S, other=0.0, volatile=True)
    return tl.sum(parts, axis=0)


@triton.jit
def count_in_either(
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    partial_ptr,  # [M * S] float32, FENCED: one part per segment of each row
    count_ptr,  # [M] int32, FENCED: the parts counted in so far, per row
    row, s, part, S, FENCED: tl.constexpr,
):  # fmt: skip
    # Counts a part in through the slots, or (FENCED) through the fenced count.
    if FENCED:
        count_in_fenced(partial_ptr, count_ptr, row, s, part, S)
    else:
        _count_in(slots_ptr, row, s, part, S)


@triton.jit
def wait_total_either(
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    partial_ptr,  # [M * S] float32, FENCED: one part per segment of each row
    count_ptr,  # [M] int32, FENCED: the parts counted in so far, per row
    row, S, SP: tl.constexpr, FENCED: tl.constexpr,
):  # fmt: skip
    if FENCED:
        total = wait_total_fenced(partial_ptr, count_ptr, row, S, SP)
    else:
        total = _wait_total(slots_ptr, row, S, SP)
    return total


@triton.jit
def forward_split_fenced(
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    y_ptr,  # [M, N] output, x's dtype
    partial_ptr,  # [M * S] float32, one part of the sum of squares per segment of each row
    count_ptr,  # [M] int32, the parts counted in so far, per row
    N, eps, S, SEG: tl.constexpr, SP: tl.constexpr,
):  # fmt: skip
    # The library's split forward with the fenced count instead of the slots.
    row, s, cols, mask = _segment(S, N, SEG)
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    count_in_fenced(partial_ptr, count_ptr, row, s, tl.sum(x * x, axis=0), S)
    total = wait_total_fenced(partial_ptr, count_ptr, row, S, SP)
    inv_rms = tl.rsqrt(total / N + eps).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def forward_split_one_row_late(
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    y_ptr,  # [M, N] output, x's dtype
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    partial_ptr,  # [M * S] float32, FENCED: one part per segment of each row
    count_ptr,  # [M] int32, FENCED: the parts counted in so far, per row
    M, N, eps, S, SEG: tl.constexpr, SP: tl.constexpr, FENCED: tl.constexpr,
):  # fmt: skip
    # The backward's way, tried on the forward: program (g, s) of G * S takes
    # segment s of the rows g, g + G, ... and counts in the next row's part
    # before it waits for this row's total.
    G = tl.num_programs(0) // S
    g, s, cols, mask = _segment(S, N, SEG)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + g * N + cols, mask=mask, other=0.0)
    xf = x.to(tl.float32)
    count_in_either(slots_ptr, partial_ptr, count_ptr, g, s, tl.sum(xf * xf, axis=0), S, FENCED)
    for row in range(g, M, G):
        ahead = row + G
        x_next = tl.load(x_ptr + ahead * N + cols, mask=mask & (ahead + 0 * cols < M), other=0.0)
        if ahead < M:
            xf = x_next.to(tl.float32)
            count_in_either(
                slots_ptr, partial_ptr, count_ptr, ahead, s, tl.sum(xf * xf, axis=0), S, FENCED
            )
        total = wait_total_either(slots_ptr, partial_ptr, count_ptr, row, S, SP, FENCED)
        inv_rms = tl.rsqrt(total / N + eps).to(tl.float32)
        y = x.to(tl.float32) * inv_rms * w
        tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
        x = x_next


@triton.jit
def backward_split_row_at_a_time(
    grad_y_ptr,  # [M, N] gradient of y, x's dtype
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    grad_x_ptr,  # [M, N] gradient of x, x's dtype
    grad_weight_partial_ptr,  # [G, N] float32, one row of partial sums per row group
    partial_ptr,  # [M * S] float32, one part of sum(grad_y * w * x_hat) per segment of each row
    count_ptr,  # [M] int32, the parts counted in so far, per row
    M, N, S, SEG: tl.constexpr, SP: tl.constexpr,
):  # fmt: skip
    # The before: loads the next row, then waits for this row's total.
    G = tl.num_programs(0) // S
    g, s, cols, mask = _segment(S, N, SEG)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    grad_weight = tl.zeros([SEG], dtype=tl.float32)
    x_next = tl.load(x_ptr + g * N + cols, mask=mask, other=0.0)
    grad_y_next = tl.load(grad_y_ptr + g * N + cols, mask=mask, other=0.0)
    for row in range(g, M, G):
        x = x_next.to(tl.float32)
        grad_y = grad_y_next.to(tl.float32)
        inv_rms = tl.load(inv_rms_ptr + row)
        x_hat = x * inv_rms
        gw = grad_y * w
        part = tl.sum(gw * x_hat, axis=0)
        ahead = tl.minimum(row + G, M - 1)
        x_next = tl.load(x_ptr + ahead * N + cols, mask=mask, other=0.0)
        grad_y_next = tl.load(grad_y_ptr + ahead * N + cols, mask=mask, other=0.0)
        count_in_fenced(partial_ptr, count_ptr, row, s, part, S)
        total = wait_total_fenced(partial_ptr, count_ptr, row, S, SP)
        grad_x = inv_rms * (gw - x_hat * (total / N))
        tl.store(grad_x_ptr + row * N + cols, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)
        grad_weight += grad_y * x_hat
    tl.store(grad_weight_partial_ptr + g * N + cols, grad_weight, mask=mask)


@triton.jit
def backward_split_one_row_late(
    grad_y_ptr,  # [M, N] gradient of y, x's dtype
    x_ptr,  # [M, N] input, x's dtype
    w_ptr,  # [N] weight, x's dtype
    inv_rms_ptr,  # [M] float32, one per row
    grad_x_ptr,  # [M, N] gradient of x, x's dtype
    grad_weight_partial_ptr,  # [G, N] float32, one row of partial sums per row group
    slots_ptr,  # [M * S] int64, one slot per segment of each row
    partial_ptr,  # [M * S] float32, FENCED: one part per segment of each row
    count_ptr,  # [M] int32, FENCED: the parts counted in so far, per row
    M, N, S, SEG: tl.constexpr, SP: tl.constexpr, FENCED: tl.constexpr,
):  # fmt: skip
    # The library's split backward as it was before it loaded two rows ahead:
    # it loads the next row, counts in its part, then waits for this row's
    # total; the loads it waits on are the ones it has just issued.
    G = tl.num_programs(0) // S
    g, s, cols, mask = _segment(S, N, SEG)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    grad_weight = tl.zeros([SEG], dtype=tl.float32)
    x = tl.load(x_ptr + g * N + cols, mask=mask, other=0.0)
    grad_y = tl.load(grad_y_ptr + g * N + cols, mask=mask, other=0.0)
    inv_rms = tl.load(inv_rms_ptr + g)
    part = tl.sum(grad_y.to(tl.float32) * w * x.to(tl.float32), axis=0) * inv_rms
    count_in_either(slots_ptr, partial_ptr, count_ptr, g, s, part, S, FENCED)
    for row in range(g, M, G):
        ahead = row + G
        next_mask = mask & (ahead + 0 * cols < M)
        x_next = tl.load(x_ptr + ahead * N + cols, mask=next_mask, other=0.0)
        grad_y_next = tl.load(grad_y_ptr + ahead * N + cols, mask=next_mask, other=0.0)
        inv_next = tl.load(inv_rms_ptr + tl.minimum(ahead, M - 1))
        if ahead < M:
            part = tl.sum(grad_y_next.to(tl.float32) * w * x_next.to(tl.float32), axis=0) * inv_next
            count_in_either(slots_ptr, partial_ptr, count_ptr, ahead, s, part, S, FENCED)
        total = wait_total_either(slots_ptr, partial_ptr, count_ptr, row, S, SP, FENCED)
        x_hat = x.to(tl.float32) * inv_rms
        gw = grad_y.to(tl.float32) * w
        grad_x = inv_rms * (gw - x_hat * (total / N))
        tl.store(grad_x_ptr + row * N + cols, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)
        grad_weight += grad_y.to(tl.float32) * x_hat
        x, grad_y, inv_rms = x_next, grad_y_next, inv_next
    tl.store(grad_weight_partial_ptr + g * N + cols, grad_weight, mask=mask)


SPLIT_NS = (16384, 32768, 65536, 131072)


def split_configs():
    """(SEG, num_warps, programs per SM): 8 to 64 elements per thread."""
    return sorted((seg, warps, per_sm) for seg in (1024, 2048, 4096, 8192, 16384)
                  for warps in (2, 4, 8, 16) for per_sm in (1, 2, 4, 8, 16)
                  if 8 <= seg // (32 * warps) <= 64 and seg * per_sm <= 32768)  # fmt: skip


def sweep_split(copy, fenced=False):
    print("split", flush=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n in SPLIT_NS:
        m = 2**26 // n
        w = randn(n)
        if n > launch.MAX_REGISTER_ROW:
            split_forward(m, n, w, EPS, sms, copy, fenced)
        split_backward(m, n, w, EPS, sms, copy, fenced)


def counters(x, m, s, fenced):
    """(slots, partial, count): what a split kernel counts its parts in, the others a stub."""
    if fenced:
        partial = torch.empty(m * s, device="cuda", dtype=torch.float32)
        count = torch.zeros(m, device="cuda", dtype=torch.int32)
        return torch.empty(1, device="cuda", dtype=torch.int64), partial, count
    stub = torch.empty(1, device="cuda", dtype=torch.int32)
    return launch.row_slots(x, m, s), stub.float(), stub


def split_forward(m, n, w, eps, sms, copy, fenced=False):
    sets = [(randn(m, n),) for _ in range(arg_sets_for(m, n, 2))]
    nbytes = 2 * m * n * 2
    want = reference(sets[0][0], w, eps)
    results = []
    seg, warps, per_sm = 4096, 8, 4  # the best of this variant on an H100
    s = triton.cdiv(n, seg)
    groups = max(1, min(m, per_sm * sms // s))

    def late(x):
        y = torch.empty_like(x)
        forward_split_one_row_late[(groups * s,)](
            x, w, y, *counters(x, m, s, fenced), m, n, eps, s, SEG=seg,
            SP=triton.next_power_of_2(s), FENCED=fenced, num_warps=warps,
        )  # fmt: skip
        return y

    def each_row_fenced(x, seg=16384, warps=8):
        y = torch.empty_like(x)
        s = triton.cdiv(n, seg)
        partial = torch.empty(m * s, device="cuda", dtype=torch.float32)
        count = torch.zeros(m, device="cuda", dtype=torch.int32)
        forward_split_fenced[(m * s,)](
            x, w, y, partial, count, n, eps, s, SEG=seg, SP=triton.next_power_of_2(s),
            num_warps=warps,
        )  # fmt: skip
        return y

    def timed(label, fn):
        # Times fn and reports it where its output on the first set is right.
        if _check(label, fn(sets[0][0]), want, 0.02):
            us = time_us(fn, sets)
            results.append((us, label))
            report(m, n, "forward " + label, us, nbytes, copy)

    if not fenced:
        timed("fenced row at a time SEG 16384 warps 8", each_row_fenced)
    timed(f"one row late SEG {seg} warps {warps} per SM {per_sm}", late)
    for config in {c[:2] for c in split_configs() if c[0] >= 4096}:
        if triton.cdiv(n, config[0]) > sms or config[0] >= n:
            continue
        label = "row at a time SEG {} warps {}".format(*config)

        forced = launch.Split(*config)

        def run(x, forced=forced):
            return triton_ops.rms_norm_forward(x, w, eps, None, forced=forced)

        if fenced:  # the same launch, every row's parts counted in behind a fence

            def run(x, config=config):
                return each_row_fenced(x, *config)

        timed(label, run)
    for prefix in ("row at a time", "one row late") if fenced else ("fenced", "row at a time",
                                                                     "one row late"):  # fmt: skip
        us, label = best(results, lambda label, prefix=prefix: label.startswith(prefix))
        report(m, n, "forward " + label, us, nbytes, copy, "best ")


def split_backward(m, n, w, eps, sms, copy, fenced=False):
    sets = backward_sets(m, n)  # inv_rms with EPS, the eps sweep_split passes
    nbytes = 3 * m * n * 2
    x0, grad_y0, inv0 = sets[0]
    want_grad_x, want_grad_weight = rms_norm_backward_reference(grad_y0, x0, w, eps)
    results = []
    seg, warps = 4096, 8
    s = triton.cdiv(n, seg)
    groups = max(1, min(m, 2 * sms // s))

    def grad_weight_sum(grad_weight_partial, grad_weight, groups):
        # The library's second stage: grad_weight from the groups' partial rows.
        grad_weight_sum_kernel[(triton.cdiv(n, GRAD_WEIGHT_SUM_BLOCK_N),)](
            grad_weight_partial, grad_weight, groups, n, BLOCK_P=GRAD_WEIGHT_SUM_BLOCK_P,
            BLOCK_N=GRAD_WEIGHT_SUM_BLOCK_N,
            GDC=False, ALIGN=launch.align(n), num_warps=GRAD_WEIGHT_SUM_WARPS,
        )  # fmt: skip

    def before(x, grad_y, inv):
        grad_x = torch.empty_like(x)
        grad_weight = torch.empty_like(w)
        grad_weight_partial = torch.empty(groups, n, device="cuda", dtype=torch.float32)
        partial = torch.empty(m * s, device="cuda", dtype=torch.float32)
        count = torch.zeros(m, device="cuda", dtype=torch.int32)
        backward_split_row_at_a_time[(groups * s,)](
            grad_y, x, w, inv, grad_x, grad_weight_partial, partial, count, m, n, s, SEG=seg,
            SP=triton.next_power_of_2(s), num_warps=warps,
        )  # fmt: skip
        grad_weight_sum(grad_weight_partial, grad_weight, groups)
        return grad_x, grad_weight

    def checked(label, fn):
        grad_x, grad_weight = fn(x0, grad_y0, inv0)
        return _check(label, grad_x, want_grad_x, 0.02) and _check(
            label, grad_weight, want_grad_weight, 0.02
        )

    label = f"row at a time SEG {seg} warps {warps} per SM 2"
    label = label if fenced else "fenced " + label
    if checked(label, before):
        us = time_us(before, sets)
        results.append((us, label))
        report(m, n, "backward " + label, us, nbytes, copy)

    def one_row_late(config):
        seg, warps, per_sm = config
        s = triton.cdiv(n, seg)
        groups = max(1, min(m, per_sm * sms // s))

        def run(x, grad_y, inv):
            grad_x = torch.empty_like(x)
            grad_weight = torch.empty_like(w)
            grad_weight_partial = torch.empty(groups, n, device="cuda", dtype=torch.float32)
            backward_split_one_row_late[(groups * s,)](
                grad_y, x, w, inv, grad_x, grad_weight_partial, *counters(x, m, s, fenced), m,
                n, s, SEG=seg, SP=triton.next_power_of_2(s), FENCED=fenced, num_warps=warps,
            )  # fmt: skip
            grad_weight_sum(grad_weight_partial, grad_weight, groups)
            return grad_x, grad_weight

        return run

    def library(config):
        def run(x, grad_y, inv):
            return triton_ops.rms_norm_backward(grad_y, x, w, inv, forced=launch.Split(*config))

        return run

    for config in split_configs():
        if triton.cdiv(n, config[0]) > sms or config[0] >= n:
            continue
        variants = (("one row late", one_row_late), ("two rows ahead", library))
        for variant, make in variants[:1] if fenced else variants:
            label = "{} SEG {} warps {} per SM {}".format(variant, *config)
            run = make(config)
            if checked(label, run):
                us = time_us(run, sets)
                results.append((us, label))
                report(m, n, "backward " + label, us, nbytes, copy)
    prefixes = ("row at a time", "one row late")
    for prefix in prefixes if fenced else ("fenced", "one row late", "two rows ahead"):
        us, label = best(results, lambda label, prefix=prefix: label.startswith(prefix))
        report(m, n, "backward " + label, us, nbytes, copy, "best ")


def main(argv):
    passes = argv or ["forward", "backward", "fused"]
    torch.manual_seed(0)
    copy = copy_bandwidth(torch.device("cuda")) / 1e9
    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    print(f"{torch.cuda.get_device_name()}, {versions}, copy {copy:.0f} GB/s, {DTYPE}", flush=True)
    # grad-weight-sum: the backward at each shape of the kernel that adds up grad_weight.
    by_shape = {"forward": forward_shape, "backward": backward_shape, "fused": fused_shape}
    by_shape["grad-weight-sum"] = functools.partial(backward_shape, grad_weight_sums=True)
    for name in passes:
        if name in ("split", "split-fenced"):
            sweep_split(copy, fenced=name == "split-fenced")
            continue
        sweep = by_shape[name]
        print(HEADINGS.get(name, name), flush=True)
        for m, n in SHAPES:
            sweep(m, n, copy)


if __name__ == "__main__":
    main(sys.argv[1:])
