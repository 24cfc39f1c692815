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
# microseconds per call at every shape. ``torch.ops`` is the bare operator
# ``torch.ops.opguide.rms_norm``; ``opguide`` is the Python wrapper
# :func:`opguide.rms_norm`, which hands plain tensors straight to the
# operator and its C++ checks; ``triton exp`` is the
# Triton backend's opt-in direct launch (below). Training calls the norm and
# then ``backward``. The ``parts`` table times pieces of such a call: the
# forward and backward operators without autograd (``ops``; ``F ops`` are
# the ATen operators under ``F.rms_norm``), ``opguide::rms_norm_fwd`` under
# its ``torch::autograd::Function`` of two outputs (``Function``), and
# autograd around a Python Function that launches nothing (``empty Fn``):
from guidekit.recorded import eager, plots, sweeps
from guidekit.recorded.pages import recorded, say, show

eager_file = recorded("eager_bf16_h100.json")
EAGER = eager_file["eager"]["rows"]
EAGER_FP16 = recorded("eager_fp16_h100.json")["eager"]["rows"]
show(eager.tables(EAGER))

# %%
# Does the GPU or the host set these times? If the GPU did, 1024 rows would
# take far longer than one. ``F.rms_norm`` at both, and a training call
# against its kernels' GPU time in the sweep of :doc:`11_performance`:
sweep = recorded("sweep_h100.json")["sweep"]
AT = sweeps.at(r for r in sweep["rows"] if r["dtype"] == "bf16")
show(eager.batch_lines(EAGER, AT))

# %%
# Each implementation's calls, the median over the shapes and the range as
# a whisker (log scale):
title = f"Eager calls, bfloat16: {eager_file['device']} (recorded)"
_ = plots.eager_figure(EAGER, title)

# %%
# The targets: opguide's calls at most as slow as ``F.rms_norm``'s, and the
# Triton backend's direct launch at most twice; the ranges, in both 16-bit
# types:
show(eager.target_lines({"bf16": EAGER, "fp16": EAGER_FP16}))

# %%
# The Triton backend's default path goes through its custom operators and a
# plain Triton launch (``kernel[grid](...)``), as Liger's kernels do; against
# ``F.rms_norm`` and Liger:
show(eager.plain_launch_lines({"bf16": EAGER, "fp16": EAGER_FP16}))

# %%
# A plain Triton launch binds its arguments in Python on every call; a C++
# operator's launch does that in C++. The checked wrapper (``opguide``) against
# the bare operator (``torch.ops.opguide.rms_norm.default``), shape by shape:
say(eager.wrapper_line(EAGER))

# %%
# Where a training call goes
# --------------------------
# A training call's time, split: the operators alone, and the rest
# (autograd's graph and its backward pass), medians over the shapes. Each
# median is taken on its own, so a line's parts need not add up to its total:
show(eager.training_parts(EAGER)[1])
show(eager.node_lines(EAGER))

# %%
# Under every training call sits autograd itself: the graph it records, the
# backward pass on its own thread for each GPU, and the gradients it
# accumulates. A Python ``autograd.Function`` that launches nothing measures
# what autograd costs around an operator written that way, in Python. Each
# training call against it; then opguide's call less its operators, whose
# Function is a C++ one:
show(eager.floor_lines(EAGER))

# %%
# Every layer of a call counts when the host sets the time. What the
# library does about each:
#
# * **Autograd in C++.** The formula is a C++ kernel at the ``Autograd`` key
#   (:doc:`step 8 <08_autograd>`): registered from Python it would re-enter
#   the interpreter on every call. Its ``torch::autograd::Function`` returns
#   y alone and keeps ``inv_rms`` as a saved tensor, where
#   ``opguide::rms_norm_fwd``'s returns both; autograd wraps every output.
#   The line "A Function of one output (y) against one of two" in the
#   output above gives one run's estimate of what that saves:
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
#   The ``triton exp`` rows above measure it.
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
import statistics  # noqa: E402
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
    _ = plots.timings_figure(
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
