r"""
Step 11.2: What an eager call costs
===================================

:doc:`11_performance` times the kernels on the GPU. A user who calls
``opguide.rms_norm`` in eager mode waits for something else: Python, the
dispatcher, autograd and the launches, before the kernel starts. This page
answers one question: what does a call cost as a user makes it, and where
does that time go?

In this step you will learn:

* how eager time differs from GPU time, and when the host sets it;
* what each layer of a call (wrapper, operator, autograd) costs;
* what the library does to keep each layer cheap;
* what each registration layer costs, measured as this page runs, and which
  to choose.

The numbers are **recorded** on a GPU by ``python -m guidekit.benchmark
--eager`` into ``docs/recorded/``; the page prints each file's device and
date. Previous page: :doc:`11_performance`; next:
:doc:`11_performance_3_long_rows`.
"""

# %%
# Without a GPU, this page's Triton kernels run in Triton's interpreter. A
# program selects it before anything imports ``triton`` (opguide only reads
# the choice, in :mod:`opguide.triton.interpreter`):
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# Eager time
# ----------
# **Eager time** is the wall clock of calls made as a user makes them, back to
# back, then one synchronisation. The same operators, bfloat16, in
# microseconds per call: the median over eight shapes (1 to 1024 rows of
# 4096 or 8192), their range, and the range of the ratio to ``F.rms_norm``'s
# call at the same shape. ``torch.ops.opguide.rms_norm`` is the bare operator;
# ``opguide`` is the Python wrapper :func:`opguide.rms_norm`, which hands
# plain tensors straight to the operator and its C++ checks; ``experimental
# eager`` is the Triton backend's opt-in direct launch (below). Training
# calls the norm and then ``backward``. Some training rows time pieces of
# such a call: the forward and backward operators without autograd (``ops``,
# ``launches``; ``F.rms_norm ops`` are the ATen operators under
# ``F.rms_norm``), ``opguide::rms_norm_forward`` under its
# ``torch::autograd::Function`` of two outputs (``autograd::Function``), and
# autograd around a Python Function that launches nothing:
import statistics

from guidekit.benchmark.eager import EAGER_KERNELS, EMPTY_FUNCTION, FUNCTION_NODE
from guidekit.benchmark.eager import TRITON_EXPERIMENTAL as EXPERIMENTAL
from guidekit.recorded.pages import bars_figure, recorded, say, select

eager_file = recorded("eager_bf16_h200.json")
EAGER = eager_file["eager"]["rows"]
EAGER_FP16 = recorded("eager_fp16_h200.json")["eager"]["rows"]


def us(impl: str, mode: str, rows=EAGER) -> dict:
    """{(M, N): microseconds per call} of one implementation's calls."""
    return {(r["m"], r["n"]): 1e6 * r["seconds"] for r in select(rows, impl=impl, mode=mode)}


for mode in ("forward", "training"):
    for impl in dict.fromkeys(r["impl"] for r in select(EAGER, mode=mode)):
        t = us(impl, mode).values()
        ratio = [r["vs_F.rms_norm"] for r in select(EAGER, impl=impl, mode=mode)]
        say(
            f"{mode:8} {impl:43} {statistics.median(t):6.1f} us ({min(t):.1f}-{max(t):.1f}), "
            f"{min(ratio):.2f}-{max(ratio):.2f}x F"
        )
_ = bars_figure(
    {
        f"{mode}, us per call at each shape": {
            i: list(us(i, mode).values())
            for i in dict.fromkeys(r["impl"] for r in select(EAGER, mode=mode))
        }
        for mode in ("forward", "training")
    },
    f"Eager calls, bfloat16: {eager_file['device']} (recorded)",
)

# %%
# Does the GPU or the host set these times? If the GPU did, 1024 rows would
# take far longer than one. The targets: opguide's calls at most as slow as
# ``F.rms_norm``'s, and the Triton backend's direct launch at most twice, in
# both 16-bit types; then the checked wrapper against the bare operator,
# shape by shape:
forward = us("F.rms_norm", "forward")
growth = max(forward[(1024, n)] / forward[(1, n)] for n in (4096, 8192))
say(f"F.rms_norm forward, 1024 rows against 1: at most {growth:.2f}x the time for 1024x the work")
for dtype, rows in (("bf16", EAGER), ("fp16", EAGER_FP16)):
    for impl, target in (("opguide", 1.0), (EXPERIMENTAL, 2.0)):
        for mode in ("forward", "training"):
            ratio = [r["vs_F.rms_norm"] for r in select(rows, impl=impl, mode=mode)]
            verdict = (
                "met"
                if max(ratio) <= target
                else f"missed at {sum(g > target for g in ratio)} shapes"
            )
            say(
                f"{dtype} {impl} {mode}: at most {max(ratio):.2f}x F.rms_norm "
                f"(target {target:.0f}x): {verdict}"
            )
bare, wrapper = us("torch.ops.opguide.rms_norm", "forward"), us("opguide", "forward")
extra = sorted(wrapper[k] - t for k, t in bare.items())
say(
    f"The checked wrapper against the bare operator: {extra[0]:+.1f} to {extra[-1]:+.1f} us, "
    f"median {statistics.median(extra):+.1f} us, slower at {sum(e > 0 for e in extra)} of "
    f"{len(extra)} shapes"
)

# %%
# Where a training call goes
# --------------------------
# A training call's time, split: the operators alone, and the rest
# (autograd's graph and its backward pass), medians over the shapes, each
# taken on its own (so the parts need not add up to the total); then
# ``rms_norm``'s Function (one output) against ``rms_norm_forward``'s (two), and
# the Python Function that launches nothing, the cost of autograd around an
# operator written in Python:
for impl, only in EAGER_KERNELS.items():
    full, ops = us(impl, "training"), us(only, "training")
    if ops:
        rest = statistics.median(full[k] - ops[k] for k in ops)
        say(
            f"{impl:34} training {statistics.median(full.values()):4.0f} us; the operators "
            f"{statistics.median(ops.values()):4.0f}, the rest {rest:4.0f}"
        )
node, two = us("opguide", "training"), us(FUNCTION_NODE, "training")
saved = [two[k] - node[k] for k in node]
say(
    f"A Function of one output (y) against one of two (y, inv_rms) saves "
    f"{statistics.median(saved):+.1f} us per training call (median), faster at "
    f"{sum(d > 0 for d in saved)} of {len(saved)} shapes"
)
empty = us(EMPTY_FUNCTION, "training")
ops = us(EAGER_KERNELS["opguide"], "training")
below = sum(node[k] - ops[k] < empty[k] for k in empty)
say(
    f"The empty Python Function: {statistics.median(empty.values()):.0f} us per training call "
    f"(median); opguide's call less its operators costs less than it at {below} of "
    f"{len(empty)} shapes"
)

# %%
# Every layer of a call counts when the host sets the time. What the
# library does about each:
#
# * **Autograd in C++.** The formula is a C++ kernel at the ``Autograd`` key
#   (:doc:`step 8 <08_autograd>`): registered from Python it would re-enter
#   the interpreter on every call. Its ``torch::autograd::Function`` returns
#   y alone and keeps ``inv_rms`` as a saved tensor, where
#   ``opguide::rms_norm_forward``'s returns both; autograd wraps every output.
#   The line "A Function of one output (y) against one of two" above
#   gives one run's estimate of what that saves:
#
#   .. literalinclude:: /../csrc/rms_norm/rms_norm_autograd.cpp
#      :language: cpp
#      :start-after: // [autograd-rms-norm]
#      :end-before: // [autograd-rms-norm-end]
#
# * **Checks once, in C++.** For plain tensors the wrapper calls the operator
#   at once; the operator's C++ checks raise the same errors as the Python
#   ones, which run only for the other calls.
# * **Triton without the dispatcher (experimental, opt-in).**
#   ``opguide.experimental.triton_eager`` (off by default: it uses private
#   torch and Triton APIs, which its docstring lists) makes a plain eager call
#   of the Triton backend launch the kernels compiled on its first call
#   directly, with pointers as ints and no launch metadata unless a profiler
#   hook wants it (``torch.compile``, export, ``vmap``, DTensor and long rows
#   take the operators). Training calls ``Function``'s C++ ``apply`` itself.
#   The ``experimental eager`` rows above measure it.
#
# ``python -m guidekit.benchmark --eager`` records these tables on your GPU.

# %%
# Each layer's cost, measured as the page runs
# --------------------------------------------
# The tables above were recorded on a GPU. The registration layers cost host
# time only, so this page measures them itself, on whatever CPU runs it.
# Five ways to reach the same body, a function that allocates its output
# and returns it (no kernel, so only the layer is timed): a direct Python
# call; an operator defined with ``torch.library.Library``'s ``define`` (its
# schema from :func:`torch.library.infer_schema`) and ``impl``; the same with a
# backward from :func:`torch.library.register_autograd`; and
# :func:`torch.library.custom_op`, without and with that backward. Each round
# times every layer once, in turn, so that a busy moment of a shared machine
# touches them all; the page reports the median over 15 rounds and the
# quartiles in brackets.
import time  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402


def body(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x)


def fake(x, weight, eps):
    return torch.empty_like(x)


def backward(ctx, grad):
    return grad, None, None


def no_context(ctx, inputs, output):
    pass


layers_lib = torch.library.Library("opguide_layers", "DEF")
schema = torch.library.infer_schema(body, mutates_args=())
for name in ("defined", "defined_autograd"):
    layers_lib.define(name + schema)
    layers_lib.impl(name, body, "CompositeExplicitAutograd")
    torch.library.register_fake(f"opguide_layers::{name}", fake, lib=layers_lib)
torch.library.register_autograd(
    "opguide_layers::defined_autograd", backward, setup_context=no_context, lib=layers_lib
)
plain_op = torch.library.custom_op("opguide_layers::custom", mutates_args=())(body)
plain_op.register_fake(fake)
grad_op = torch.library.custom_op("opguide_layers::custom_autograd", mutates_args=())(body)
grad_op.register_fake(fake)
grad_op.register_autograd(backward, setup_context=no_context)

LAYERS = {
    "direct call": body,
    "define/impl": torch.ops.opguide_layers.defined.default,
    "define/impl + register_autograd": torch.ops.opguide_layers.defined_autograd.default,
    "custom_op": plain_op,
    "custom_op + register_autograd": grad_op,
}


def per_call_us(fns: dict, args: tuple, rounds: int = 15, calls: int = 2000) -> dict:
    """Microseconds per call of each function: one value per round, rounds interleaved."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm up
        for _ in range(200):
            fn(*args)
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    return times


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return q1, median, q3


x_small, w_small = torch.randn(1, 4096), torch.randn(4096)
layer_us = per_call_us(LAYERS, (x_small, w_small, 1e-6))
for name, values in layer_us.items():
    q1, median, q3 = quartiles(values)
    print(f"{name:32} {median:6.2f} us per call [{q1:.2f}-{q3:.2f}]")

# %%
# The same as a plot: the median of each layer, the quartiles as a whisker.
fig, ax = plt.subplots(figsize=(7, 2.8))
names = list(layer_us)
stats = [quartiles(layer_us[n]) for n in names]
ax.barh(names, [m for _, m, _ in stats], color="#4c72b0")
ax.errorbar(
    [m for _, m, _ in stats],
    names,
    xerr=[[m - q1 for q1, m, _ in stats], [q3 - m for _, m, q3 in stats]],
    fmt="none",
    color="black",
    capsize=3,
)
ax.invert_yaxis()
ax.set_xlabel("microseconds per call (CPU)")
ax.set_title("One call through each registration layer, same body")
fig.tight_layout()

# %%
# What the numbers say, layer by layer. Two layers differ measurably only
# where their quartile ranges do not overlap:


def compare_layers(a: str, b: str) -> str:
    """A sentence: what layer ``b`` costs against layer ``a``, from the measurements."""
    qa, qb = quartiles(layer_us[a]), quartiles(layer_us[b])
    if qb[0] > qa[2] or qa[0] > qb[2]:
        diff = qb[1] - qa[1]
        more = "more" if diff > 0 else "less"
        return f"{b} costs {abs(diff):.1f} us a call {more} than {a}."
    return f"{b} and {a}: no measurable difference here (their quartiles overlap)."


for a, b in (
    ("direct call", "define/impl"),
    ("define/impl", "define/impl + register_autograd"),
    ("define/impl + register_autograd", "custom_op + register_autograd"),
    ("define/impl", "custom_op"),
):
    say(compare_layers(a, b))

# %%
# Which to choose. An operator is what ``torch.compile``, ``vmap``, dispatch
# modes such as :class:`torch.utils.flop_counter.FlopCounterMode` and DTensor
# see, so a library's kernels stay operators; the question is which layers
# a call pays for.
med = {name: quartiles(values)[1] for name, values in layer_us.items()}
q = {name: quartiles(values) for name, values in layer_us.items()}
custom_costs_more = q["custom_op + register_autograd"][0] > q["define/impl + register_autograd"][2]
if custom_costs_more:
    say(
        "Here custom_op costs more than define/impl with the same backward "
        f"({med['custom_op + register_autograd']:.1f} against "
        f"{med['define/impl + register_autograd']:.1f} us): for an operator "
        "called once per layer of a model, define it with Library.define and "
        "impl, the schema from infer_schema, a fake kernel from register_fake "
        "and the backward from register_autograd. That is what "
        "opguide.triton.ops.register_op does for the Triton operators."
    )
else:
    say(
        "Here custom_op costs no measurably more than define/impl with the "
        "same backward: either serves, and custom_op's single decorator is the "
        "simpler. opguide.triton.ops.register_op uses define/impl, for the "
        "machines where the difference shows."
    )
say(
    f"A direct call costs {med['direct call']:.1f} us against "
    f"{med['define/impl']:.1f} us for the cheapest operator; what a real call "
    "adds beyond its layers is its body's own Python (argument checks, "
    "planning, the launch)."
)

# %%
# opguide's Triton operators are defined by this decorator; their body
# launches the kernels as a plain Triton launch, with the launch plan
# (configuration and grid) cached per shape, dtype and device:
#
# .. literalinclude:: /../opguide/triton/ops.py
#    :language: python
#    :pyobject: register_op
#
# .. literalinclude:: /../opguide/triton/plans.py
#    :language: python
#    :pyobject: plan
#
# .. dropdown:: opguide/triton/plans.py, the whole file
#
#    .. literalinclude:: /../opguide/triton/plans.py
#       :language: python
#       :caption: opguide/triton/plans.py
#
# On a GPU the page also times :func:`torch.library.triton_op` against a
# direct launch of one small Triton kernel (``wrap_triton`` outside a traced
# graph and outside a ``triton_op`` takes a higher-order operator on every
# call: ``TraceableTritonKernelWrapper.__call__`` in `triton_kernel_wrap.py
# <https://github.com/pytorch/pytorch/blob/main/torch/_higher_order_ops/triton_kernel_wrap.py>`__):
from opguide import triton as triton_ops  # noqa: E402

if torch.cuda.is_available() and not triton_ops.INTERPRET:
    import triton  # noqa: E402
    import triton.language as tl  # noqa: E402

    @triton.jit
    def copy_kernel(
        x_ptr,  # [n] input
        y_ptr,  # [n] output
        n,
        BLOCK: tl.constexpr,
    ):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)

    def direct_launch(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y

    def wrapped_launch(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        torch.library.wrap_triton(copy_kernel)[(triton.cdiv(x.numel(), 1024),)](
            x, y, x.numel(), BLOCK=1024
        )
        return y

    @torch.library.triton_op("opguide_layers::copy", mutates_args=())
    def copy_op(x: torch.Tensor) -> torch.Tensor:
        return wrapped_launch(x)

    x_gpu = torch.randn(4096, device="cuda")
    launch_us = per_call_us(
        {
            "direct launch": direct_launch,
            "triton_op": copy_op,
            "wrap_triton, eager": wrapped_launch,
        },
        (x_gpu,),
        calls=500,
    )
    torch.cuda.synchronize()
    for name, values in launch_us.items():
        q1, median, q3 = quartiles(values)
        print(f"{name:20} {median:6.2f} us per call [{q1:.2f}-{q3:.2f}]")
    _ = bars_figure(
        {"us a call, each of 15 rounds": launch_us},
        f"Launching a Triton kernel on {torch.cuda.get_device_name()} (measured live)",
    )
    for a, b in (("direct launch", "triton_op"), ("direct launch", "wrap_triton, eager")):
        qa, qb = quartiles(launch_us[a]), quartiles(launch_us[b])
        if qb[0] > qa[2]:
            say(f"{b} costs {qb[1] - qa[1]:.1f} us a call more than a {a}.")
        else:
            say(f"{b} and a {a}: no measurable difference here.")
else:
    print("No GPU (or Triton's interpreter is on): triton_op against a direct launch")
    print("is not measured.")

# %%
# Next: :doc:`11_performance_3_long_rows`, rows too long for one block.
