r"""
Step 11: Performance against the memory floor
=============================================

Part I's operator is correct; this step asks how fast it can be. RMSNorm
reads each element once and writes it once, so it is memory-bound: the bytes
it moves are its floor, and a copy of the same bytes is the yardstick. How
close do opguide's kernels come to that copy, and to other libraries, at every
row length?

In this step you will learn:

* how to compute the floor of a memory-bound operator, and time a GPU kernel
  so that the number means something;
* how to read a sweep over the row length against other libraries;
* what rows that are not whole 16-byte vectors cost.

Then: :doc:`11_performance_2_eager` (what a call costs),
:doc:`11_performance_3_long_rows` (rows too long for one block),
:doc:`11_performance_4_tuning` (tuning changes). The GPU numbers are
**recorded** in ``docs/recorded/``; each page prints every file's device and
date and computes what it states from them.
"""

# %%
# Without a GPU, the Triton kernels run in Triton's interpreter, selected
# before anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# The floor
# ---------
# The forward does a few operations per element and moves four bytes of it
# in bfloat16; a GPU computes far more per byte than that, so the bytes set
# the time. The bytes each pass cannot avoid moving:

# sphinx_gallery_parallel = False  # it times kernels on the CPU: runs alone
from guidekit import benchmark
from guidekit.recorded import listed
from guidekit.recorded.pages import (
    bars_figure,
    fixed_changes,
    lines_figure,
    one_gpu,
    recorded,
    say,
    select,
    show,
    table,
)

for pass_name in benchmark.GPU_PASSES:
    say(f"{pass_name:9} {benchmark.BYTES_MODEL[pass_name]}")
say("training  the forward's bytes plus the backward's")

# %%
# .. literalinclude:: /../guidekit/benchmark/passes.py
#    :pyobject: bytes_moved
#
# The yardstick is no data sheet's bandwidth but ``copy (same bytes)``, a
# ``copy_`` of the pass's bytes timed in the same run: each implementation is
# the copy's time over its own (above 100%: faster than ``copy_``). The last
# line says how much the copy's own speed moves with N:
sweep_file = recorded("sweep_<gpu>.json")
sweep = sweep_file["sweep"]
say(f"1 GiB copy: {sweep_file['copy_bandwidth_GBps']:.0f} GB/s")
copies = select(sweep["rows"], impl=benchmark.SAME_SIZE_COPY, dtype="bf16")
spread = max(
    max(r["GBps"] for r in found) / min(r["GBps"] for r in found) - 1
    for found in (select(copies, **{"pass": p}) for p in benchmark.SWEEP_PASSES)
)
say(
    f"The same-size copy's speed differs by up to {100 * spread:.1f}% between the row lengths "
    "of one pass: percentages at different N are that much off one scale."
)

# %%
# How to time
# -----------
# A timer around one call measures the launch. The benchmark records CUDA
# events around a batch of calls queued behind a short GPU spin
# (``torch.cuda._sleep``), so they run back to back: **GPU time**. Before each
# batch it reads a buffer three times L2's size, and the calls rotate through
# at least three input sets; implementations take turns, the median counts:
#
# .. literalinclude:: /../guidekit/benchmark/timing.py
#    :pyobject: _timed_batch
#
# Does cleaning L2 matter? Recorded runs without the clean (``--keep-l2``)
# and with it, in % of the 1 GiB copy:
kept, cleaned = recorded("l2_keep_<gpu>.json"), recorded("l2_clean_<gpu>.json")
impls = ["opguide", "opguide triton", "compile(reference)", "F.rms_norm"]
l2 = fixed_changes(kept, cleaned, "forward", impls)
show(table(l2, ("impl", "shape"), "pass", lambda r: f"{r['before']:.1%} -> {r['after']:.1%}"))
say(
    f"Moved by more than a point: {listed(sorted({c['impl'] for c in l2 if abs(c['points']) > 1}))}"
)
say(f"The largest change: {max((c['points'] for c in l2), key=abs):+.1f} points")

# %%
# Why three input sets? ``x`` alone is larger than L2 (size below), yet a
# call that reads the set the previous call read may find part of it there.
# The bfloat16 forward recorded with one set (``--min-sets 1``), in points
# gained against three:
one_set = recorded("sweep_one_input_set_<gpu>.json")["sweep"]
THREE = {
    (r["impl"], r["n"]): r["vs_copy"]
    for r in sweep["rows"]
    if (r["dtype"], r["pass"]) == ("bf16", "forward")
}
gains = [
    {**r, "points": 100 * (r["vs_copy"] - THREE[(r["impl"], r["n"])])}
    for r in one_set["rows"]
    if r["impl"] != benchmark.SAME_SIZE_COPY
]
say(f"x in bfloat16: {sweep['elements'] * 2 / 2**20:.0f} MiB per input set")
show(table(gains, ("impl",), "n", lambda r: f"{r['points']:+.1f}"))
top = max(gains, key=lambda r: r["points"])
say(f"The most one set gains: {top['points']:.1f} points, {top['impl']} at N = {top['n']}")

# %%
# Every row length
# ----------------
# The sweep keeps ``M * N`` fixed, so every point moves the same bytes. Four
# passes: forward; backward (``grad_x`` and ``grad_weight``); training
# (forward, then backward through autograd); the fused residual add +
# RMSNorm. Beside opguide's CUDA and Triton kernels: ``F.rms_norm``,
# ``torch.compile`` of the reference, Liger-Kernel (Triton), Quack (CuTe DSL)
# and vLLM's fused kernel where it imports; a peer that did not is named:
say(f"{sweep['dtypes']}, M * N = {sweep['elements']} elements")
say(f"N = {sweep['ns']}")
say(f"Triton {sweep_file['triton']}, CUDA {sweep_file['cuda']}")
for name, why in sweep["peers_missing"].items():
    say(f"did not import when recorded: {name} ({why})")

# %%
# The targets, for both of opguide's kernels: 90% of the copy in the forward
# and fused passes, 85% in the backward and training; and the CUDA kernel at
# least as fast as the fastest peer. Each pass in bfloat16 (float16 dashed
# for opguide's kernels), with its target:
TARGETS = {"forward": 0.90, "backward": 0.85, "training": 0.85, "fused": 0.90}
OURS = ("opguide", "opguide triton")
PEERS = (
    "liger",
    "quack",
    "F.rms_norm",
    "compile(reference)",
    "liger (fused)",
    "quack (residual)",
    "compile(residual += x; F.rms_norm)",
    "compile(unfused reference)",
)
ROWS = select(sweep["rows"], impl=OURS + PEERS, dtype="bf16")
title = f"RMSNorm, GPU time: {sweep_file['device']} (recorded)"
marks = {"target": {p: 100 * t for p, t in TARGETS.items()}}
shown = ROWS + select(sweep["rows"], impl=OURS, dtype="fp16")
_ = lines_figure(shown, title, series=("impl", "dtype"), marks=marks)

# %%
# Every bfloat16 point, then the misses and the CUDA kernel against the
# fastest peer, both 16-bit types. A gap no larger than the most a second run
# (the sweep of opguide's kernels alone) moved a point of the CUDA kernel is a tie.
fastest = {}  # (pass, N) -> the fastest peer's row, named in its cell
for r in select(ROWS, impl=PEERS):
    if r["vs_copy"] > fastest.get((r["pass"], r["n"]), {"vs_copy": 0})["vs_copy"]:
        peer = r["impl"].split("(")[0].strip()  # its library: "compile", "quack", ...
        fastest[(r["pass"], r["n"])] = {**r, "impl": "fastest peer", "peer": peer}
cells = select(ROWS, impl=OURS) + list(fastest.values())
show(table(cells, ("pass", "n"), "impl", lambda r: f"{r.get('peer', '')} {r['vs_copy']:.1%}"))
misses = {}  # (impl, pass, dtype) -> the row lengths where it misses the target
for r in select(sweep["rows"], impl=OURS):
    if r["vs_copy"] < TARGETS[r["pass"]]:
        misses.setdefault((r["impl"], r["pass"], r["dtype"]), []).append(r["n"])
for (impl, pass_name, dtype), ns in misses.items():
    say(f"missed: {impl} {pass_name} {dtype} at N = {listed(ns)}")
if not misses:
    say("missed: none")
FIRST = {(r["impl"], r["pass"], r["dtype"], r["n"]): r["vs_copy"] for r in sweep["rows"]}
RERUN = [
    {**r, "points": 100 * (r["vs_copy"] - FIRST[k])}
    for r in recorded("sweep_opguide_<gpu>.json")["sweep"]["rows"]
    if r["impl"] in OURS and (k := (r["impl"], r["pass"], r["dtype"], r["n"])) in FIRST
]
tie = max(abs(r["points"]) for r in select(RERUN, impl="opguide"))
lead = {}  # (pass, dtype, N) -> the CUDA kernel's % of the copy less the fastest peer's
for r in select(sweep["rows"], impl=PEERS):
    key = (r["pass"], r["dtype"], r["n"])
    lead[key] = min(lead.get(key, 100.0), 100 * (FIRST[("opguide", *key)] - r["vs_copy"]))
slower = [" ".join(map(str, k)) for k, v in lead.items() if v < -tie]
say(
    f"The CUDA kernel against the fastest peer, a tie within {tie:.2f} points: faster at "
    f"{sum(v > tie for v in lead.values())}, a tie at {sum(abs(v) <= tie for v in lead.values())}"
    f", slower at {len(slower)} of {len(lead)} points: {listed(slower)}"
)
why_not: dict[str, list[str]] = {}  # each reason once, with the points it stopped
for s in sweep["skipped"]:
    why_not.setdefault(s["reason"], []).append(f"{s['pass']} {s['impl']} {s['dtype']} N={s['n']}")
for reason, where in why_not.items():
    say(f"could not run ({len(where)}): {listed(where)}")
    say(f"  {reason}")

# %%
# The lines above are the conclusion: each missed target and each point
# where a peer is faster (long rows: :doc:`11_performance_3_long_rows`). How
# much of this is the run? The second run against the first, in points:
for impl, pass_name in dict.fromkeys((r["impl"], r["pass"]) for r in RERUN):
    moved = [r["points"] for r in select(RERUN, impl=impl, **{"pass": pass_name})]
    say(f"{impl:15} {pass_name:9} {min(moved):+5.1f} to {max(moved):+5.1f} points")

# %%
# Odd row lengths
# ---------------
# A row of 12300 bfloat16 elements (24600 bytes) is no whole number of 16-byte
# vectors, and a slice may start anywhere. The CUDA kernels then take the
# widest access the row length, stride and pointers allow, more of them a
# thread the narrower they are. The backward's narrow kernels hold shorter
# rows (``narrow_backward_plan`` in
# ``csrc/rms_norm/rms_norm_backward_planner.cuh``); a longer odd row's
# backward takes the chunked kernel, which reads the row twice:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_forward_planner.cuh
#    :language: cuda
#    :start-after: // [vector-width]
#    :end-before: // [vector-width-end]
#
# Triton vectorises only what it can prove, and it proves that ``N`` is a
# multiple of 16 by specialising on it:
#
# .. literalinclude:: /../opguide/triton/launch.py
#    :language: python
#    :pyobject: align
#
# Recorded runs as built and with 16-byte accesses only (a row of no whole
# number of vectors then goes one element at a time), bfloat16, % of the copy
# (``-``: not recorded; ``F.rms_norm`` has no fused kernel):
#
# .. dropdown:: tools/variants/odd_rows_16_byte_only.patch (16-byte accesses or one element)
#
#    .. literalinclude:: /../tools/variants/odd_rows_16_byte_only.patch
#       :language: diff
#       :caption: tools/variants/odd_rows_16_byte_only.patch
odd_file = recorded("sweep_odd_rows_<gpu>.json")
wide_file = recorded("sweep_odd_rows_16_byte_only_<gpu>.json")
ODD = select(
    odd_file["sweep"]["rows"], dtype="bf16", impl=("opguide", "opguide triton", "F.rms_norm")
)
# Two records are compared only when one kind of GPU made both.
WIDE = []
if one_gpu(odd_file, wide_file):
    WIDE = [
        {**r, "impl": "CUDA, 16-byte only"}
        for r in select(wide_file["sweep"]["rows"], dtype="bf16", impl="opguide")
    ]
show(table(ODD + WIDE, ("pass", "n"), "impl", lambda r: f"{r['vs_copy']:.0%}"))
title = f"Odd row lengths, bfloat16: {odd_file['device']} (recorded)"
_ = lines_figure(ODD + WIDE, title)
wide_at = {(r["pass"], r["n"]): r["vs_copy"] for r in WIDE}
trail = [
    f"{r['pass']} {r['n']}"
    for r in select(ODD, impl="opguide")
    if r["vs_copy"] < wide_at.get((r["pass"], r["n"]), 0) - 0.02
]
if WIDE:
    say(
        f"Where the CUDA kernels as built trail the 16-byte-only build by more than 2 "
        f"points: {listed(trail)}"
    )

# %%
# Where a point as built trails its 16-byte-only build (named above, when both
# runs come from one GPU), the
# planner's narrower access is a measured loss at that length; these runs do
# not time its cause.
#
# On the CPU
# ----------
# The C++ CPU kernel on a float32 (4096, 4096) tensor, measured live, next to
# ``copy_`` into an existing tensor (the floor, unless a row beats it) and
# ``clone``, whose new memory comes from PyTorch's allocator as the
# operator's output does. ``opguide into existing y`` times the loop alone.
# The implementations take turns; medians count:
cpu = benchmark.run_cpu_kernel()
for r in cpu["rows"]:
    say(
        f"  {r['impl']:28} {r['seconds'] * 1e3:7.2f} ms {r['GBps']:6.1f} GB/s "
        f"{r['vs_copy']:5.2f}x copy_"
    )
mine = next(r["vs_copy"] for r in cpu["rows"] if r["impl"] == "opguide (C++ kernel)")
verdict = "met" if mine <= cpu["target_vs_copy"] else "missed"
say(
    f"On {cpu['threads']} thread(s) the operator takes {mine:.2f}x copy_'s time: the target "
    f"of at most {cpu['target_vs_copy']}x is {verdict}."
)
faster = [
    r["impl"]
    for r in cpu["rows"]
    if not r["impl"].startswith("copy_") and round(r["vs_copy"], 2) < 1
]
say(
    f"Faster than copy_ with at least its bytes to move: {listed(faster)}"
    + (" (so here copy_ does not run at the memory's bandwidth)." if faster else ".")
)
ms = {r["impl"]: 1e3 * r["seconds"] for r in cpu["rows"]}
alone = ms.get("opguide into existing y")
say(
    f"The operator takes {ms['opguide (C++ kernel)'] / ms['clone (copy + new memory)']:.2f}x the "
    "time of clone (step 2 prints this ratio at its own shape)"
    + (
        f"; its loop alone takes {alone:.2f} ms, so its new output costs it "
        f"{ms['opguide (C++ kernel)'] - alone:.2f} ms."
        if alone
        else "."
    )
)
_ = bars_figure(
    {
        f"float32 {tuple(cpu['shape'])}: ms a call, median of {cpu['rounds']} rounds": {
            r["impl"]: [1e3 * r["seconds"]] for r in cpu["rows"]
        }
    },
    f"The C++ CPU kernel, {cpu['threads']} thread(s) (measured live)",
)

# %%
# Run it yourself
# ---------------
# ``python -m guidekit.benchmark --sweep`` writes a sweep like the one above
# (``--eager``, ``--cpu-only``, ``--out`` to save JSON). On a CUDA GPU this
# page times the forward at two row lengths live, beside the sweep's number
# (another run, perhaps another GPU: they need not agree):
op = torch.ops.opguide.rms_norm.default
if torch.cuda.is_available() and op.has_kernel_for_dispatch_key(torch.DispatchKey.CUDA):
    only = ("opguide", benchmark.SAME_SIZE_COPY)
    live = benchmark.run_sweep(
        torch.device("cuda"),
        ns=(4096, 65536),
        elements=sweep["elements"],
        passes=("forward",),
        only=only,
    )
    for r in select(live["rows"], impl="opguide"):
        say(
            f"LIVE {torch.cuda.get_device_name()}: N = {r['n']}: {r['vs_copy']:.1%} of the copy "
            f"(recorded: {FIRST[('opguide', 'forward', 'bf16', r['n'])]:.1%})"
        )
else:
    say(
        "SKIPPED: no CUDA GPU with opguide's CUDA kernels here; the GPU numbers are the "
        "recorded ones."
    )

# %%
# Next: :doc:`11_performance_2_eager`, what a call costs when the host sets
# the time.
