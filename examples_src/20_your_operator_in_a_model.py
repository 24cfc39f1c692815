r"""
Step 20: Your operator in a real model
======================================

Does the model get faster? This step puts the operator into a Hugging Face
Llama without editing the model's code, and times a training step and an
inference forward, eager and compiled, against the model's own norm and
``F.rms_norm``. It shows:

* the ``kernels`` package: a local layer repository and ``kernels.kernelize``,
  with the modes a layer declares decided from measurements;
* timing a model step so a comparison means something;
* the operator's rows in the profiler, and what ``torch.compile`` does around
  an operator it cannot see into;
* an Inductor pattern pass that puts :doc:`step 10 <10_patterns>`'s fused
  operator into the compiled graph;
* what Inductor needs of a Triton kernel to fuse what follows it;
* an AOTInductor package calling the operator through a C shim;
* :func:`opguide.silu_and_mul` in the MLPs.

The model is small and runs live on the CPU; ``tools/record_model_step.py``
records the same comparison on a GPU, which the last section reads.
"""

# %%
# A small Llama
# -------------
# A Llama from a configuration, random weights, nothing downloaded; one
# decoder layer holds every place a norm sits:
import contextlib
import copy
import functools
import json
import re
import textwrap
import time
import warnings

import matplotlib.pyplot as plt
import torch
from torch._inductor.utils import run_and_get_code

from guidekit import model_record, model_step
from guidekit.compile_checks import source_root
from opguide.experimental import inductor_fusion

CONFIG = model_step.SMALL_CONFIG  # the GPU record's tool runs it with --small
BATCH, SEQ, ROUNDS = model_step.SMALL_BATCH, model_step.SMALL_SEQ, 15
print("config:", ", ".join(f"{k}={v}" for k, v in CONFIG.items()))
# One thread: the machine's other jobs then disturb the timings less.
torch.set_num_threads(1)
base = model_step.llama(CONFIG, torch.float32, "cpu")
ids = model_step.token_ids(CONFIG, BATCH, SEQ, "cpu")
print(f"{sum(p.numel() for p in base.parameters()) / 1e6:.2f} M parameters, float32")
print(f"tokens per step: {BATCH} x {SEQ}")

# %%
# Swapping the norm the way Hugging Face users do
# -----------------------------------------------
# transformers marks ``LlamaRMSNorm`` with
# ``use_kernel_forward_from_hub("RMSNorm")``; ``kernels.kernelize(model,
# mode=...)`` gives every marked module the ``forward`` of a layer from a
# kernel repository, weights and code untouched. opguide's ``layers.py``:
#
# .. literalinclude:: /../guidekit/kernel_layers.py
#    :language: python
#    :caption: guidekit/kernel_layers.py
#
# A layer declares ``has_backward`` (``Mode.TRAINING``) and
# ``can_torch_compile``; in other modes ``kernelize`` keeps the model's own
# ``forward`` (eager inference has no flag: a mapped layer always runs).
# opguide's flags come from the GPU record the last section reads: set where
# the layer is faster beyond the spread:
#
# .. literalinclude:: /../guidekit/model_swap.py
#    :language: python
#    :pyobject: measured_support
#
# The repository is a folder ``kernels.LocalLayerRepository`` loads:
#
# .. literalinclude:: /../guidekit/model_swap.py
#    :language: python
#    :pyobject: layer_repository
#
# .. literalinclude:: /../guidekit/model_swap.py
#    :language: python
#    :pyobject: marked_norm
#
# .. literalinclude:: /../guidekit/model_swap.py
#    :language: python
#    :pyobject: kernelized
#
# What the record decides:
import shutil
import tempfile
from pathlib import Path

from kernels import Mode

from guidekit import model_swap
from guidekit.recorded.pages import say, say_stale

RECORDED = sorted((source_root() / "docs" / "recorded").glob("model_step_*.json"))
decided_from = json.loads(RECORDED[0].read_text()) if RECORDED else None
support = model_swap.measured_support(decided_from)
if RECORDED:
    print(f"decided from {RECORDED[0].name} ({decided_from['device']})")
    say_stale(RECORDED[0].name)  # when the sources it measured have changed since
else:
    print("No GPU record is present: no layer declares a flag.")
for layer, declared in support.items():
    for flag in model_swap.FLAGS:
        said = f"{layer}.{flag} = {declared[flag]}: {declared['why'][flag]}"
        print(textwrap.fill(said, 80, subsequent_indent="    "))
SCRATCH = Path(tempfile.mkdtemp(prefix="opguide-step20-"))  # removed at the page's end
folder = Path(tempfile.mkdtemp(dir=SCRATCH))
measured = model_swap.layer_repository(folder, support)

# %%
# In each mode: which ``forward`` the norms run, and the calls of opguide's
# operators a training step makes (:class:`guidekit.model_swap.OpguideCalls`):
MODES = {
    "TRAINING": Mode.TRAINING,
    "INFERENCE": Mode.INFERENCE,
    "TRAINING | TORCH_COMPILE": Mode.TRAINING | Mode.TORCH_COMPILE,
    "INFERENCE | TORCH_COMPILE": Mode.INFERENCE | Mode.TORCH_COMPILE,
}
want = model_step.training_step(copy.deepcopy(base), ids)
runs_opguide = {}
for mode_name, mode in MODES.items():
    model = model_swap.kernelized(copy.deepcopy(base), measured, "OpguideRMSNorm", mode)
    with model_swap.OpguideCalls() as counted:
        loss = model_step.training_step(model, ids)
    torch.testing.assert_close(loss, want, atol=1e-5, rtol=1e-5)
    forwards = ", ".join(f"{n} x {f}" for f, n in model_swap.norm_forwards(model).items())
    runs_opguide[mode_name] = counted.total > 0
    print(f"{mode_name:26} norms: {forwards}; opguide calls: {counted.total}")
ours = [name for name, used in runs_opguide.items() if used]
own_code = [name for name, used in runs_opguide.items() if not used]
print(
    textwrap.fill(
        f"opguide's operator runs in {', '.join(ours) or 'no mode'}; the model's own "
        f"code in {', '.join(own_code) or 'no mode'}.",
        80,
    )
)

# %%
# To measure every norm in every mode, a repository declaring every flag
# (``model_swap.EVERY_MODE``), ``F.rms_norm`` among its layers; three copies
# of the model, with the same logits:
everywhere = model_swap.layer_repository(folder, model_swap.EVERY_MODE)
EVERY = Mode.TRAINING | Mode.TORCH_COMPILE  # with every flag, the layer in any mode
NORMS = {
    "model's own": None,
    "F.rms_norm": "TorchRMSNorm",
    "opguide.rms_norm": "OpguideRMSNorm",
}
models = {}
for name, layer in NORMS.items():
    models[name] = copy.deepcopy(base)
    if layer is not None:
        model_swap.kernelized(models[name], everywhere, layer, EVERY)
        print(f"{name}: norms run {dict(model_swap.norm_forwards(models[name]))}")
logits = {name: model_step.inference_forward(m, ids) for name, m in models.items()}
for name, value in logits.items():
    gap = (value - logits["model's own"]).abs().max().item()
    print(f"{name:17} largest difference from the model's own logits: {gap:.1e}")
    torch.testing.assert_close(value, logits["model's own"], atol=1e-4, rtol=1e-4)

# %%
# Timing a step
# -------------
# Eager and compiled, a training step and an inference forward:
#
# .. literalinclude:: /../guidekit/model_step.py
#    :language: python
#    :pyobject: training_step
#
# .. literalinclude:: /../guidekit/model_step.py
#    :language: python
#    :pyobject: inference_forward
#
# The first compiled call is timed apart. The variants take turns, round
# after round, so a slow moment of a shared CPU falls on all; each result is
# a median with its quartiles:
STEPS = {
    "training step": model_step.training_step,
    "inference forward": model_step.inference_forward,
}
# Dynamo compiles the model's forward once per variant and step (8 here),
# and by default sends a function back to eager once it holds 8 compiled
# versions; a higher limit keeps any extra recompile from doing that.
torch._dynamo.config.recompile_limit = 16
compiled = {name: torch.compile(m) for name, m in models.items()}
generated = {}
for name, model in compiled.items():
    for step_name, step in STEPS.items():
        start = time.perf_counter()
        _, code = run_and_get_code(step, model, ids)
        seconds = time.perf_counter() - start
        generated[name, step_name] = "\n".join(code)
        print(f"compiled, {name}: first {step_name} (it compiles) {seconds:.1f} s")

calls = {}
for mode, family in (("eager", models), ("compiled", compiled)):
    for step_name, step in STEPS.items():
        for name, model in family.items():
            calls[mode, step_name, name] = functools.partial(step, model, ids)
times = model_step.time_interleaved(calls, ROUNDS)
stats = {key: model_step.summary(value) for key, value in times.items()}

print(f"milliseconds per call, median (quartiles) of {ROUNDS} interleaved rounds")
for mode in ("eager", "compiled"):
    for step_name in STEPS:
        cells = []
        for name in NORMS:
            s = stats[mode, step_name, name]
            cells.append(f"{name} {s['median']:.2f} ({s['q1']:.2f}-{s['q3']:.2f})")
        print(f"{mode:8} {step_name:17} " + ";  ".join(cells))


# %%
# Computed from them: the fastest norm of each row where its lead beats the
# spread:
def verdict(mode: str, step_name: str, names) -> str:
    ranked = sorted(names, key=lambda n: stats[mode, step_name, n]["median"])
    best, runner_up = ranked[0], ranked[1]
    b, r = stats[mode, step_name, best], stats[mode, step_name, runner_up]
    lead = (r["median"] - b["median"]) / r["median"] * 100
    if b["q3"] < r["q1"]:
        return (
            f"{mode} {step_name}: {best} is fastest here, {lead:.1f}% ahead of "
            f"{runner_up}; their quartiles do not overlap."
        )
    return (
        f"{mode} {step_name}: no measurable difference between the two fastest, {best} "
        f"and {runner_up} ({b['median']:.2f} and {r['median']:.2f} ms by the medians); "
        "their quartiles overlap."
    )


for mode in ("eager", "compiled"):
    for step_name in STEPS:
        say(verdict(mode, step_name, NORMS))

fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
for ax, step_name in zip(axes, STEPS, strict=True):
    for i, name in enumerate(NORMS):
        xs = [j + (i - 1) * 0.27 for j in range(2)]
        rows = [stats[mode, step_name, name] for mode in ("eager", "compiled")]
        med = [s["median"] for s in rows]
        below = [s["median"] - s["q1"] for s in rows]
        above = [s["q3"] - s["median"] for s in rows]
        err = [below, above]
        ax.bar(xs, med, width=0.27, yerr=err, capsize=3, label=name)
    ax.set_xticks(range(2), ["eager", "torch.compile"])
    ax.set_title(f"{step_name} (CPU, float32)")
    ax.set_ylabel("ms per call, median and quartiles")
axes[0].legend(fontsize=8)
fig.tight_layout()

# %%
# CPU times of a small float32 model say nothing about which wins on a GPU.
#
# Where the time goes
# -------------------
# The profiler's table for one CPU training step, trimmed to the norm's rows:
# ATen's ``pow``, ``mean``, ``rsqrt`` for the model's norm; ``opguide::rms_norm``,
# ``rms_norm_forward`` and ``rms_norm_backward`` for opguide's:
NORM_ROW = re.compile(r"rms_norm|rsqrt|pow|mean", re.IGNORECASE)


def norm_rows(model) -> list[tuple[str, int, float]]:
    model_step.training_step(model, ids)
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with warnings.catch_warnings():
        # Some torch releases warn that the profiler keeps one cycle's events;
        # this profile is one cycle.
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with torch.profiler.profile(activities=cpu) as prof:
            model_step.training_step(model, ids)
    rows = [
        (e.key, e.count, e.self_cpu_time_total / 1e3)
        for e in prof.key_averages()
        if NORM_ROW.search(e.key)
    ]
    return sorted(rows, key=lambda row: -row[2])


profiled = {}
for mode, family in (("eager", models), ("compiled", compiled)):
    for name in ("model's own", "opguide.rms_norm"):
        profiled[mode, name] = norm_rows(family[name])
        print(f"\n{mode}, {name}: calls, self CPU ms")
        for key, count, ms in profiled[mode, name]:
            print(f"  {key[:60]:60} {count:3d} {ms:7.3f}")
        if not profiled[mode, name]:
            print("  (no row of the norm)")

# %%
# Inductor's CPU kernels have no rows of their own
# (``cpp.enable_kernel_profile`` gives them one); the generated code names
# them after what each fuses.
#
# What Inductor does with each norm
# ---------------------------------
# Inductor generates kernels for the model's own norm and may fuse the
# residual add into them; ``opguide.rms_norm`` is opaque to it. The sum and
# norm of one block, compiled with each norm (a kernel is named after the
# nodes it serves, so an add feeding the operator may carry its name):
KERNEL = re.compile(r"^(cpp_fused_\w+) = async_compile", re.MULTILINE)
OPGUIDE_CALL = re.compile(r"torch\.ops\.opguide\.(\w+)\.default\(")
norm_module = base.model.norm
hidden, residual = torch.randn(2, BATCH * SEQ, CONFIG["hidden_size"])
pieces = {}
for name, layer in NORMS.items():
    norm = copy.deepcopy(norm_module)
    if layer is not None:
        model_swap.kernelized(norm, everywhere, layer, EVERY)

    def add_then_norm(hidden, residual, norm=norm):
        return norm(residual + hidden)

    with torch.no_grad():
        _, code = run_and_get_code(torch.compile(add_then_norm), hidden, residual)
    code = "\n".join(code)
    pieces[name] = KERNEL.findall(code), OPGUIDE_CALL.findall(code)
    kernels, calls_made = pieces[name]
    print(f"{name}: generated kernels {kernels}, opguide operators {calls_made}")
own_kernels = pieces["model's own"][0]
op_kernels, op_calls = pieces["opguide.rms_norm"]
if len(own_kernels) != 1:
    print("Here Inductor did not put the add and the model's own norm in one kernel.")
elif not op_calls:
    print("Here the compiled code holds no call of opguide's operator.")
else:
    print(
        "The model's own norm: one generated kernel does the add and the norm. "
        f"opguide.rms_norm: {len(op_kernels)} generated kernel(s) for the add, then "
        "the operator, which reads the sum back from memory."
    )

# %%
# The fused operator, through a pattern pass
# ------------------------------------------
# A model that writes ``residual + hidden_states`` never calls
# :func:`opguide.fused_add_rms_norm_`. The opt-in
# ``opguide.experimental.inductor_fusion`` (private Inductor APIs) adds a
# pattern pass that finds the sum and its norm, in each traced form, and puts
# the fused operator in their place, in its functional form, which Inductor
# runs in place:
#
# .. literalinclude:: /../opguide/experimental/inductor_fusion.py
#    :language: python
#    :start-after: [search-llama]
#    :end-before: [search-llama-end]
#
# .. literalinclude:: /../opguide/experimental/inductor_fusion.py
#    :language: python
#    :start-after: [replace]
#    :end-before: [replace-end]
#
# .. dropdown:: opguide/experimental/inductor_fusion.py, the whole file
#
#    .. literalinclude:: /../opguide/experimental/inductor_fusion.py
#       :language: python
#       :caption: opguide/experimental/inductor_fusion.py
#
# It runs on the forward graph after AOTAutograd split off the backward, so
# training works without a backward of the fused operator; where both
# operands of the add are still needed, it leaves the place alone. On for the
# unmodified model, through ``torch.compile``'s options:
options = inductor_fusion.compile_options()
fused = torch.compile(models["model's own"], options=options)
sums = 2 * CONFIG["num_hidden_layers"]  # every norm but the first follows an add
FUSED_CALL = "torch.ops.opguide.fused_add_rms_norm_.default("
fused_calls = {}
for step_name, step in STEPS.items():
    want = step(models["model's own"], ids)
    got, code = run_and_get_code(step, fused, ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    fused_calls[step_name] = "\n".join(code).count(FUSED_CALL)
    print(
        f"{step_name}: calls of the fused operator in the compiled graph: "
        f"{fused_calls[step_name]}, for {sums} norms that follow an add"
    )
    if fused_calls[step_name] < sums:
        print(
            f"  {sums - fused_calls[step_name]} left as Inductor compiled them: the "
            "pass replaces only sums that the fused operator can write in place"
        )

pass_calls = {}
for step_name, step in STEPS.items():
    pass_calls[step_name, "compiled"] = calls["compiled", step_name, "model's own"]
    pass_calls[step_name, "compiled + pass"] = functools.partial(step, fused, ids)
pass_stats = {
    key: model_step.summary(value)
    for key, value in model_step.time_interleaved(pass_calls, ROUNDS).items()
}
for step_name in STEPS:
    a, b = pass_stats[step_name, "compiled"], pass_stats[step_name, "compiled + pass"]
    change = (b["median"] - a["median"]) / a["median"] * 100
    overlap = not (b["q3"] < a["q1"] or a["q3"] < b["q1"])
    print(
        f"{step_name}: compiled {a['median']:.2f} ms, "
        f"with the pass {b['median']:.2f} ms "
        f"({change:+.1f}%); "
        + ("within the spread of this run" if overlap else "outside the spread")
    )
    in_us = {
        label: {k: v * 1e3 for k, v in pass_stats[step_name, label].items()}
        for label in ("compiled", "compiled + pass")
    }
    _ = model_step.plot_per_call(in_us, f"{step_name}: compiled, without and with the pass")

# %%
# On the CPU the fused operator competes with a kernel Inductor also fused;
# whether one pass wins is a question for the GPU.
#
# Fusing what follows a Triton operator
# -------------------------------------
# ``torch.compile`` traces into a :func:`torch.library.triton_op` and launches
# its kernels (:doc:`step 9 <09_triton_kernel>`). With the private option
# ``torch._inductor.config.epilogue_fusion_user_defined_triton_kernel`` on,
# Inductor also puts a pointwise operation after it into the kernel's store
# (``UserDefinedTritonKernel.can_fuse_epilogue`` in `torch/_inductor/ir.py
# <https://github.com/pytorch/pytorch/blob/v2.13.0/torch/_inductor/ir.py>`_),
# given one output written by the kernel's only ``tl.store``, never read,
# allocated empty in the operator, and an operation that reads that output
# alone. opguide's Triton forward stores twice; the experimental
# ``opguide.experimental.triton_epilogue`` has an inference forward with one
# store:
#
# .. literalinclude:: /../opguide/experimental/triton_epilogue.py
#    :language: python
#    :start-after: [kernel]
#    :end-before: [kernel-end]
#
# .. dropdown:: opguide/experimental/triton_epilogue.py, the whole file
#
#    .. literalinclude:: /../opguide/experimental/triton_epilogue.py
#       :language: python
#       :caption: opguide/experimental/triton_epilogue.py
#
# It fuses what follows, not what precedes (the residual add still needs the
# pass above). A scale after the norm, the option off and on (on a GPU):
GPU = "cuda" if torch.cuda.is_available() else "cpu"
skipped = None
try:
    from opguide.experimental import triton_epilogue

    skipped = triton_epilogue.why_not(GPU)
except ImportError as err:  # no triton
    skipped = f"opguide.experimental.triton_epilogue does not import: {err}"
if skipped:
    print(textwrap.fill(f"Skipped: {skipped}.", 80))
else:
    rows_, hidden_ = 8192, 4096
    x = torch.randn(rows_, hidden_, device=GPU, dtype=torch.bfloat16)
    w = torch.randn(hidden_, device=GPU, dtype=torch.bfloat16)

    def norm_then_scale(x, w):
        return triton_epilogue.rms_norm_y(x, w, 1e-6) * 0.5

    def norm_then_scale_fused(x, w):  # its own code object: its own compile
        return triton_epilogue.rms_norm_y(x, w, 1e-6) * 0.5

    want = norm_then_scale(x, w)
    options = {"option off": (norm_then_scale, contextlib.nullcontext())}
    options["option on"] = (norm_then_scale_fused, triton_epilogue.enabled())
    epilogue_calls = {}
    for name, (fn, context) in options.items():
        with context:
            fn = torch.compile(fn)
            got, code = run_and_get_code(fn, x, w)
        torch.testing.assert_close(got, want)
        inductors, users = triton_epilogue.kernels("\n".join(code))
        print(f"{name}: your kernel {users}, Inductor's kernels {inductors}")
        epilogue_calls[name] = functools.partial(fn, x, w)
    e = model_step.time_per_call(epilogue_calls, ROUNDS, sync=torch.cuda.synchronize)
    for name, st in e.items():
        print(f"{name}: {st['median']:.1f} us per call ({st['q1']:.1f}-{st['q3']:.1f})")
    print(textwrap.fill(model_step.versus(e, "option on", "option off"), 80))
    model_step.plot_per_call(e, f"norm then scale, {rows_} x {hidden_} bfloat16")

# %%
# Shipping the model: AOTInductor and a C shim
# --------------------------------------------
# An AOTInductor package (:doc:`16_across_pytorch`) calls a non-ATen operator
# through the proxy executor: each call boxes the arguments and makes a boxed
# dispatcher call (``OSSOpKernelOperator`` in `oss_proxy_executor.h
# <https://github.com/pytorch/pytorch/blob/main/torch/csrc/inductor/aoti_torch/oss_proxy_executor.h>`__).
# The private options ``aot_inductor.custom_ops_to_c_shims`` and
# ``custom_op_libs`` replace that with a call to a C function,
# ``aoti_torch_<device>_<operator>``, which takes handles, returns an error
# code, and calls the operator through the dispatcher unboxed:
#
# .. literalinclude:: /../opguide/experimental/aoti_shim.cpp
#    :language: cpp
#    :caption: opguide/experimental/aoti_shim.cpp
#
# .. dropdown:: opguide/experimental/aoti_shim.py, the whole file
#
#    .. literalinclude:: /../opguide/experimental/aoti_shim.py
#       :language: python
#       :caption: opguide/experimental/aoti_shim.py
#
# Four linear layers, each followed by the norm with opguide's forward,
# compiled both ways, their calls counted in the generated code, then timed
# in turns:
from opguide.experimental import aoti_shim

hidden_size = CONFIG["hidden_size"]
norm_cpp = copy.deepcopy(base.model.norm)
model_swap.kernelized(norm_cpp, everywhere, "OpguideRMSNorm", Mode.INFERENCE)
layers = [
    module
    for _ in range(4)
    for module in (torch.nn.Linear(hidden_size, hidden_size), copy.deepcopy(norm_cpp))
]
stack = torch.nn.Sequential(*layers).eval()
tokens = torch.randn(4, hidden_size)
folder = Path(tempfile.mkdtemp(dir=SCRATCH))
# torch's own pytree code warns, while packages are made and loaded, about a
# deprecation inside torch; nothing here calls it.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
exported = torch.export.export(stack, (tokens,))
shim_library = aoti_shim.build(folder / "shim")
packages = {
    "proxy executor": aoti_shim.compile_package(exported, folder / "proxy.pt2", None),
    "C shim": aoti_shim.compile_package(exported, folder / "shim.pt2", shim_library),
}
for name, path in packages.items():
    print(f"{name} package, calls in its generated C++: {aoti_shim.calls(path)}")
# Step 16's GPU record shows a fresh process of torch 2.11 crashing as it
# loads a CUDA package, one of a plain Linear too; this page does not try its
# CPU packages on a torch older than 2.13.
LOADS = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)
if not LOADS:
    print(
        f"Not loaded or timed: torch {torch.__version__} is older than 2.13, the first "
        "this page loads AOTInductor packages on (step 16's record shows torch 2.11 "
        "crashing as a fresh process loads a CUDA package; this page does not try "
        "older ones)."
    )
else:
    with torch.no_grad():
        want = stack(tokens)
    aoti_calls = {}
    for name, path in packages.items():
        package = torch._inductor.aoti_load_package(path)
        torch.testing.assert_close(package(tokens), want)
        aoti_calls[name] = functools.partial(package, tokens)
    a = model_step.time_per_call(aoti_calls, rounds=3 * ROUNDS, reps=200)
    for name, st in a.items():
        print(f"{name}: {st['median']:.1f} us per call ({st['q1']:.1f}-{st['q3']:.1f})")
    shim, proxy = a["C shim"], a["proxy executor"]
    change, overlap = model_step.compare(shim, proxy)
    ranges = (
        f"C shim {shim['q1']:.1f}-{shim['q3']:.1f} us, "
        f"proxy executor {proxy['q1']:.1f}-{proxy['q3']:.1f} us"
    )
    if overlap:
        said = (
            "The direct call makes no measurable difference in this run: the middle "
            f"halves of the per-call times overlap ({ranges}; medians {change:+.1f}%)."
        )
    else:
        gap = abs(shim["median"] - proxy["median"])
        said = (
            f"The direct call takes {gap:.1f} us {'less' if change < 0 else 'more'} per "
            f"call than the proxy executor in this run ({change:+.1f}%), and the middle "
            f"halves of the per-call times do not overlap ({ranges})."
        )
    print(textwrap.fill(said, 80))
    title = f"AOTInductor package, 4 norms, CPU, {tokens.shape[0]} rows"
    _ = model_step.plot_per_call(a, title)

# %%
# A second operator in the MLPs: ``silu_and_mul``
# -----------------------------------------------
# This layer makes a Llama MLP's two projections with one matmul and hands
# the result to :func:`opguide.silu_and_mul` (:doc:`step 21
# <21_a_second_operator>`):
#
# .. literalinclude:: /../guidekit/kernel_layers_silu_and_mul.py
#    :language: python
#    :caption: guidekit/kernel_layers_silu_and_mul.py
#
# Where transformers leaves ``LlamaMLP`` unmarked (the cell says),
# ``replace_kernel_forward_from_hub`` marks it, and only the MLPs are swapped:
#
# .. literalinclude:: /../guidekit/model_swap_silu_and_mul.py
#    :language: python
#    :pyobject: marked_mlp
#
# .. literalinclude:: /../guidekit/model_swap_silu_and_mul.py
#    :language: python
#    :pyobject: kernelized
#
# For this check the layer declares both modes, so that every mode runs it;
# which modes a shipped layer declares follows from its timings, as for the
# norms (the cells below time it). Loss, gradients and logits against the
# model left alone:
from collections import Counter

from transformers.models.llama.modeling_llama import LlamaMLP

from guidekit import model_swap_silu_and_mul as mlp_swap

marked_by = getattr(LlamaMLP, "kernel_layer_name", None)
print(f"LlamaMLP marked by transformers: {marked_by or 'no'}; marked as {mlp_swap.marked_mlp()!r}")
mlp_repository = mlp_swap.layer_repository(Path(tempfile.mkdtemp(dir=SCRATCH)), True, True)
own_mlp = models["model's own"]
swapped_mlp = mlp_swap.kernelized(copy.deepcopy(base), mlp_repository, EVERY)
print(f"MLPs run {dict(mlp_swap.mlp_forwards(swapped_mlp))}")
want = model_step.training_step(own_mlp, ids)
with model_swap.OpguideCalls() as counted:
    loss = model_step.training_step(swapped_mlp, ids)
print(f"opguide calls in a training step: {dict(counted.counts)}")
own_grads = dict(own_mlp.named_parameters())
grad_gap = max(
    (p.grad - own_grads[name].grad).abs().max().item() for name, p in swapped_mlp.named_parameters()
)
own_logits = model_step.inference_forward(own_mlp, ids)
logits_gap = (model_step.inference_forward(swapped_mlp, ids) - own_logits).abs().max().item()
print(
    f"largest difference from the model's own: loss {(loss - want).abs().item():.1e}, "
    f"gradients {grad_gap:.1e}, logits {logits_gap:.1e}"
)
torch.testing.assert_close(loss, want, atol=1e-5, rtol=1e-5)
assert grad_gap < 1e-4 and logits_gap < 1e-4

# %%
# Timed as the norms were (the layer joins the two weights at each call);
# compiled, the generated code shows the operator's calls:
compiled_mlp = torch.compile(swapped_mlp)
SILU_CALL = re.compile(r"torch\.ops\.opguide\.(silu_and_mul\w*)\.default\(")
for step_name, step in STEPS.items():
    got, code = run_and_get_code(step, compiled_mlp, ids)
    torch.testing.assert_close(got, step(own_mlp, ids), atol=1e-4, rtol=1e-4)
    made = Counter(SILU_CALL.findall("\n".join(code)))
    print(f"compiled {step_name}: calls in the generated code {dict(made)}")
    assert made["silu_and_mul"] == CONFIG["num_hidden_layers"]
MLP_NAMES = ("model's own MLP", "silu_and_mul MLP")
mlp_calls = {}
for mode, family in (
    ("eager", (own_mlp, swapped_mlp)),
    ("compiled", (compiled["model's own"], compiled_mlp)),
):
    for step_name, step in STEPS.items():
        for name, model in zip(MLP_NAMES, family, strict=True):
            mlp_calls[mode, step_name, name] = functools.partial(step, model, ids)
mlp_stats = {
    key: model_step.summary(value)
    for key, value in model_step.time_interleaved(mlp_calls, ROUNDS).items()
}
print(f"milliseconds per call, median (quartiles) of {ROUNDS} interleaved rounds")
for mode in ("eager", "compiled"):
    for step_name in STEPS:
        pair = {name: mlp_stats[mode, step_name, name] for name in MLP_NAMES}
        cells = [f"{n} {s['median']:.2f} ({s['q1']:.2f}-{s['q3']:.2f})" for n, s in pair.items()]
        print(f"{mode:8} {step_name:17} " + ";  ".join(cells))
        said = model_step.versus(pair, "silu_and_mul MLP", "model's own MLP")
        say(f"{mode} {step_name}: {said}")

# %%
# On a GPU
# --------
# ``tools/record_model_step.py`` runs the comparison on a GPU with a larger
# Llama (its size first): both opguide backends, Liger and Quack where they
# import, the pass, and the model kernelized in each mode, with the layers'
# flags taken from a GPU record (the output says whether this record's own
# numbers agree). Read here: a table, the fastest of each group where the
# record tells it from the next, and each variant's median over the model's
# own norm's:
if not RECORDED:
    print(
        "No GPU record is present (docs/recorded/model_step_<gpu>.json): this page "
        "shows no GPU result. `python tools/record_model_step.py` on a GPU writes one."
    )
for path in RECORDED:
    record = json.loads(path.read_text())
    config = record["config"]
    about = (
        f"{path.name}: recorded on {record['device']}, {record['date']}; torch "
        f"{record['torch']}, CUDA {record['cuda']}, triton {record['triton']}; a Llama of "
        f"hidden size {config['hidden_size']} with {config['num_hidden_layers']} layers; "
        f"{record['dtype']}, batch {record['batch']} x {record['seq']} tokens"
    )
    print(textwrap.fill(about, 80))
    say_stale(path.name)
    print("\n".join(model_record.record_table(record)))
    after_add = 2 * config["num_hidden_layers"]  # every norm but the first layer's input norm
    for entry in record["fused_calls"]:
        if entry["count"]:
            print(
                f"{entry['variant']}, {entry['step']}: {entry['count']} fused calls "
                f"({after_add} norms follow an add)"
            )
    for sentence in model_record.record_winners(record):
        print(textwrap.fill(sentence, 80))
    for sentence in model_record.record_findings(record):
        print("\n" + textwrap.fill(sentence, 80))
    model_record.plot_record(record)
shutil.rmtree(SCRATCH)

# %%
# Measure the model, compiled as well as eager; declare only the modes a
# layer is measured faster in; where an opaque operator loses a fusion, fuse
# it yourself and measure whether it pays. The Triton epilogue and the C
# shim need private options: time them before you take them on.
