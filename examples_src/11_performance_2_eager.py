r"""
Step 11.2: What an eager call costs
===================================

Part I defines its operator with ``custom_op`` (page 1), then with
``TORCH_LIBRARY`` and, on the Python side, ``register_fake`` and
``register_autograd`` (page 4). A user who calls it eagerly waits
for Python, the dispatcher, autograd and the launches before the kernel
starts. What does a call cost, where does the time go, and what does each
registration add?

In this step you will learn:

* how eager time differs from GPU time, and when the host sets it;
* what each layer of a call (wrapper, operator, autograd) costs, and what
  the library does to keep it cheap;
* what ``custom_op``, ``triton_op`` and the dispatcher-level
  ``Library.define``/``impl`` cost, measured as this page runs, and which to
  choose.

The eager tables are **recorded** on a GPU by ``python -m guidekit.benchmark
--eager``; the page prints each file's device and date.
"""

# %%
# Without a GPU, the Triton kernels run in Triton's interpreter, selected
# before anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# Eager time
# ----------
# **Eager time**: the wall clock of calls made back to back, then one
# synchronisation. bfloat16, microseconds per call: the median over eight
# shapes (1 to 1024 rows of 4096 or 8192), their range, and the range of the
# ratio to ``F.rms_norm``. ``torch.ops.opguide.rms_norm`` is the bare
# operator, ``opguide`` the wrapper :func:`opguide.rms_norm`, ``experimental
# eager`` the Triton backend's opt-in direct launch (below). Training rows
# also time pieces: the operators without autograd (``ops``, ``launches``;
# ``F.rms_norm ops`` are ATen's), ``opguide::rms_norm_forward`` under its
# two-output ``torch::autograd::Function``, and autograd around a Python
# Function that launches nothing:
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
# If the GPU set these times, 1024 rows would take far longer than one. The
# targets: opguide's calls at most as slow as ``F.rms_norm``'s, the Triton
# direct launch at most twice, in both 16-bit types; then the wrapper against
# the bare operator:
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
# A training call split, medians over the shapes, each part timed on its own
# (they need not add up): the operators and the rest (autograd's graph and
# backward pass); ``rms_norm``'s Function (one output) against
# ``rms_norm_forward``'s (two); the Python Function that launches nothing:
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
    f"rms_norm's C++ Function (returns y) against rms_norm_forward's (returns y and "
    f"inv_rms), the same kernels: {statistics.median(saved):+.1f} us per training call "
    f"(median), faster at "
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
# What the library does about each layer:
#
# * **Autograd in C++.** The formula is a C++ kernel at the ``Autograd`` key
#   (:doc:`step 8 <08_autograd>`), so no call re-enters Python. Its
#   ``torch::autograd::Function`` returns y alone and saves ``inv_rms``, where
#   ``opguide::rms_norm_forward``'s returns both (the line above compares the
#   two; they are two operators as well, so it does not isolate what one
#   more output costs):
#
#   .. literalinclude:: /../csrc/rms_norm/rms_norm_autograd.cpp
#      :language: cpp
#      :start-after: // [autograd-rms-norm]
#      :end-before: // [autograd-rms-norm-end]
#
# * **Checks once, in C++.** The wrapper hands plain tensors to the operator,
#   whose C++ checks raise the same errors as the Python ones.
# * **Triton without the dispatcher (experimental, opt-in).**
#   ``opguide.experimental.triton_eager`` (it uses private torch and Triton
#   APIs, listed in its docstring) launches the kernels compiled on the first
#   call directly, with pointers as ints; ``torch.compile``, export, ``vmap``,
#   DTensor and long rows take the operators. The ``experimental eager`` rows
#   measure it.

# %%
# Each layer's cost, measured as the page runs
# --------------------------------------------
# Registration layers cost host time only, so this page times them itself,
# on the CPU that runs it. Six ways to reach one body that allocates its
# output and launches nothing: a direct call; ``torch.library.Library``'s
# ``define`` (schema from :func:`torch.library.infer_schema`) and ``impl``;
# the same with :func:`torch.library.register_autograd`;
# :func:`torch.library.custom_op` without and with that backward; and
# :func:`torch.library.triton_op`, a ``custom_op`` underneath
# (``torch/_library/triton.py``) that takes any body. Rounds interleave the
# layers; the median of 15 rounds, quartiles in brackets:
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
traced_op = torch.library.triton_op("opguide_layers::traced", mutates_args=())(body)

LAYERS = {
    "direct call": body,
    "define/impl": torch.ops.opguide_layers.defined.default,
    "define/impl + register_autograd": torch.ops.opguide_layers.defined_autograd.default,
    "custom_op": plain_op,
    "custom_op + register_autograd": grad_op,
    "triton_op": traced_op,
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
# Two layers differ measurably only where their quartiles do not overlap:


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
    ("custom_op", "triton_op"),
):
    say(compare_layers(a, b))

# %%
# Which to choose
# ---------------
# Start with ``custom_op``, or ``triton_op`` for a Triton body whose launches
# Inductor should see: `torch.library's documentation
# <https://docs.pytorch.org/docs/stable/library.html>`__ recommends them over
# the low-level ``Library``, and one decorator gives the schema and the
# methods of ``CustomOpDef`` (``register_kernel``, ``register_vmap``,
# ``register_autocast``, ``set_kernel_enabled``). ``Library.define``/``impl``
# is the measured fast path that opguide's Triton operators take
# (``register_op`` below). What it buys, from the lines above:
med = {name: quartiles(values)[1] for name, values in layer_us.items()}
q = {name: quartiles(values) for name, values in layer_us.items()}
FAST, CUSTOM = "define/impl + register_autograd", "custom_op + register_autograd"
saved = med[CUSTOM] - med[FAST]
if q[CUSTOM][0] > q[FAST][2]:
    say(
        f"define/impl saves {saved:.1f} us a call against custom_op with the same backward, "
        f"{saved / med[CUSTOM]:.0%} of custom_op's {med[CUSTOM]:.1f} us."
    )
else:
    say(
        "define/impl saves nothing measurable here against custom_op with the same backward: "
        "on this machine, custom_op's single decorator is the better choice."
    )
say(
    f"A direct call costs {med['direct call']:.1f} us against {med['define/impl']:.1f} us for "
    "the cheapest operator; a real call adds its body's own Python (checks, planning, launch)."
)

# %%
# What it costs: the code that ``custom_op`` writes for you. The operator
# lives in a ``Library`` object kept alive by the module; the fake kernel and
# the backward are registered by name on it; a body that writes an input
# bumps its version counter itself (``custom_op`` does so for
# ``mutates_args``); and of ``CustomOpDef``'s methods, ``set_kernel_enabled``
# has no counterpart, while ``torch.library.register_kernel``,
# ``register_vmap`` and ``register_autocast`` take the operator's name.
# Under ``torch.compile`` it is one opaque call, as a ``custom_op`` is.

# %%
# opguide's Triton operators are defined by this decorator; their body
# launches the kernels with the launch plan cached per shape, dtype and
# device:
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
# On a GPU the page also times a ``triton_op`` that launches a small kernel
# against a direct launch (``wrap_triton`` outside a ``triton_op`` takes a
# higher-order operator on every call: ``TraceableTritonKernelWrapper`` in
# `triton_kernel_wrap.py
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
    print("No GPU (or Triton's interpreter is on): a triton_op's kernel launch against a")
    print("direct launch is not measured; its registration layer is, above.")

# %%
# Next: :doc:`11_performance_3_long_rows`, rows too long for one block.
