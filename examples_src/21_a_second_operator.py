r"""
Step 21: A second operator
==========================

The steps before this one followed one operator, RMSNorm. This step adds a
second, ``silu_and_mul``: the gated activation of Llama-style MLPs. For ``x``
of shape ``(..., 2*d)`` (the gate and up projections side by side, as one
matmul computes them) it returns ``y = silu(x[..., :d]) * x[..., d:]``, of
shape ``(..., d)``. It is elementwise, so the kernels are short and the page
is about what an operator needs around them.

In this step you will learn:

* what a new operator takes: one registry entry, its own folders and its
  tests, and no edit to a shared file;
* the pieces, whole: the schema, the CUDA and Triton kernels, the wrapper,
  the fake kernels and the autograd, vmap, autocast and FLOP rules;
* how the checks of the earlier steps apply unchanged: the reference,
  ``opcheck``, ``gradcheck``, ``torch.compile``, ``torch.export`` and
  Triton's interpreter;
* how fast it runs on a GPU against a copy of the same bytes (recorded).

What an operator takes
----------------------
``opguide/registry.py`` is the list of the library's operators. The entry of
``silu_and_mul`` names its compiled operators and their Triton twins, its
routes, and the files of each kernel family and of each route's planning:

.. literalinclude:: /../opguide/registry.py
   :language: python
   :start-after: # [registry-silu-and-mul]
   :end-before: # [registry-silu-and-mul-end]
   :dedent: 4
   :prepend: Operator(
   :append: ),

The rest is the operator's own: ``csrc/silu_and_mul/`` (schema, CPU and CUDA
kernels, the CUDA configuration), ``opguide/_silu_and_mul/`` (wrapper, fake
kernels, rules, reference, Triton kernels), ``tests/test_silu_and_mul*.py``,
``manifests/*_silu_and_mul.txt`` and its benchmark. Nothing shared is edited,
because everything that enumerates operators reads the registry:
``setup.py`` compiles each entry's ``csrc`` folder (:doc:`step 6
<06_the_build>`), ``opguide/__init__.py`` exports each entry's ``public``
names, :mod:`opguide.backends` finds the devices each compiled operator has
kernels for, ``guidekit/manifests.py`` cuts each route's files from the
entry, and ``guidekit/recorded/sources.py`` hashes the kernel and planning
files a record measured. The first cell reads these back.

The schema
----------
A fragment of the ``opguide`` namespace (:doc:`step 13
<13_namespaces_and_fragments>`) in the operator's folder: two schemas, the
forward and the backward that its autograd formula calls.

.. literalinclude:: /../csrc/silu_and_mul/silu_and_mul_schema.cpp
   :language: cpp
   :caption: csrc/silu_and_mul/silu_and_mul_schema.cpp

The CUDA kernels
----------------
The device code is a torch-free header, as in :doc:`step 3
<03_cuda_kernel>`. Each thread moves 16 bytes per access (eight bfloat16
elements); the planner in ``silu_and_mul_config.h`` falls back to single
elements when a pointer is not 16-byte aligned or ``d`` is not a whole number
of vectors. A thread issues all its loads (two vectors of each half in the
forward) before it computes anything, so that enough bytes are in flight to
keep HBM busy: the kernel waits on memory, not arithmetic, so it can afford
the accurate ``expf``. The grid is at most four blocks per SM, whose rows of
threads walk the tensor's rows with a grid stride, however many there are.
Every index is 64-bit: ``row * 2 * cols`` passes ``2**31`` in large tensors,
where 32-bit offsets would wrap.

.. dropdown:: csrc/silu_and_mul/silu_and_mul.cuh (the kernels and their launch)

   .. literalinclude:: /../csrc/silu_and_mul/silu_and_mul.cuh
      :language: cuda
      :caption: csrc/silu_and_mul/silu_and_mul.cuh

.. dropdown:: csrc/silu_and_mul/silu_and_mul_config.h (every constant and its reason, the planner)

   .. literalinclude:: /../csrc/silu_and_mul/silu_and_mul_config.h
      :language: cpp
      :caption: csrc/silu_and_mul/silu_and_mul_config.h

.. dropdown:: csrc/silu_and_mul/silu_and_mul_cuda.cu (the torch wrappers: check, plan, launch)

   .. literalinclude:: /../csrc/silu_and_mul/silu_and_mul_cuda.cu
      :language: cuda
      :caption: csrc/silu_and_mul/silu_and_mul_cuda.cu

The Triton kernels
------------------
One program per tile of ``ROWS`` rows by ``BLOCK_N`` columns of ``y``, the
same formulas in float32, and ``int64`` row offsets for the same reason as in
CUDA. ``opguide/_silu_and_mul/triton/ops.py`` chooses the tile and registers
the two operators as :doc:`step 9 <09_triton_kernel>` registers RMSNorm's.

.. literalinclude:: /../opguide/_silu_and_mul/triton/kernels.py
   :language: python
   :caption: opguide/_silu_and_mul/triton/kernels.py

The Python side
---------------
``ops.py`` holds the public function, the fake kernels and the
registrations. Its ``compiled`` argument decides what ``torch.compile`` sees:
by default (``compiled="kernel"``) the operator itself; with
``compiled="native"``, the plain-PyTorch reference, which Inductor can fuse
with its neighbours.

.. literalinclude:: /../opguide/_silu_and_mul/ops.py
   :language: python
   :caption: opguide/_silu_and_mul/ops.py

``rules.py`` holds what both routes share: autograd saves ``x`` alone (the
backward recomputes the sigmoid), vmap moves the batch to the front and
makes it more rows, autocast runs the operator in float32, and the FLOP
formulas count 5 and 10 per output element.

.. dropdown:: opguide/_silu_and_mul/rules.py

   .. literalinclude:: /../opguide/_silu_and_mul/rules.py
      :language: python
      :caption: opguide/_silu_and_mul/rules.py
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
# What reads the entry
# --------------------
# Each consumer named above, asked about ``silu_and_mul``:
import json

import matplotlib.pyplot as plt

import opguide
from guidekit.compile_checks import source_root
from guidekit.recorded import recorded_dir, sources
from guidekit.recorded.pages import COLORS, say
from opguide import backends, registry

ROOT = source_root()
torch.manual_seed(0)
entry = registry.get("silu_and_mul")
found = {
    "setup.py compiles": [op.csrc for op in registry.OPERATORS],
    "import opguide exports": [n for n in entry.public if n in opguide.__all__],
    **{f"kernels of {name}": sorted(backends.compiled_device_types(name)) for name in entry.ops},
    "Triton twins": list(entry.triton_ops) if backends.triton_ready() else "not defined here",
    "manifests": [f"manifests/{m}.txt" for m in entry.manifests()],
    "tests": sorted(p.name for p in (ROOT / "tests").glob("test_silu_and_mul*")),
}
for label, value in found.items():
    say(f"{label}: {', '.join(value) if isinstance(value, list) else value}")

# %%
# The operator against its reference
# -----------------------------------
# :func:`opguide.silu_and_mul_reference` is plain PyTorch, computed in float32
# (float64 for float64) and rounded once, the kernels' contract. The C++
# kernels on CPU tensors, and the CUDA kernels where a GPU is visible. In
# float16 and bfloat16 the two may differ by one rounding step, where their
# float32 values fall on either side of a rounding boundary:
devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
for device in devices:
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        x = torch.randn(64, 2 * 1000, dtype=dtype, device=device)
        y = opguide.silu_and_mul(x, backend="cpp")
        expected = opguide.silu_and_mul_reference(x)
        torch.testing.assert_close(y, expected)
        worst = (y.double() - expected.double()).abs().max().item()
        print(f"{device:4} {str(dtype)[6:]:8} {tuple(y.shape)}: max |y - reference| = {worst:.3g}")
if not torch.cuda.is_available():
    print("CUDA kernels skipped: no GPU visible (the record below timed them on one)")

# %%
# opcheck and gradcheck
# ---------------------
# :func:`torch.library.opcheck` tests each operator's schema, fake kernel,
# autograd registration (with an input that requires grad) and tracing. It
# does not check that the gradient is right: :func:`torch.autograd.gradcheck`
# compares the backward operator with finite differences, in float64.
OPS = torch.ops.opguide
x = torch.randn(3, 2 * 9)
grad_y = torch.randn(3, 9)
checks = {
    "silu_and_mul": (OPS.silu_and_mul.default, (x,)),
    "silu_and_mul, x requires grad": (OPS.silu_and_mul.default, (x.clone().requires_grad_(),)),
    "silu_and_mul_backward": (OPS.silu_and_mul_backward.default, (grad_y, x)),
}
for name, (op, args) in checks.items():
    result = torch.library.opcheck(op, args)
    print(f"opcheck {name:30}", "ok" if set(result.values()) == {"SUCCESS"} else result)
x64 = torch.randn(4, 2 * 6, dtype=torch.float64, requires_grad=True)
print("gradcheck, float64:", torch.autograd.gradcheck(opguide.silu_and_mul, (x64,)))

# %%
# torch.compile and torch.export
# ------------------------------
# With ``fullgraph=True`` a graph break is an error, so a compiled function
# that runs proves the call traced whole. A backend that keeps the graph
# Dynamo hands it shows what each ``compiled`` choice puts there: the
# operator, or the reference's PyTorch calls for Inductor to fuse.


def graph_targets(compiled: str) -> list[str]:
    """The operations in the graph that torch.compile traces for ``compiled``."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    fn = torch.compile(lambda t: opguide.silu_and_mul(t, compiled=compiled), backend=keep)
    fn(torch.randn(4, 2 * 8))
    nodes = [n for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    # An operator prints as its qualified name; a Python function by its own.
    return [str(n.target) if hasattr(n.target, "_schema") else n.target.__name__ for n in nodes]


for compiled in ("kernel", "native"):
    print(f"compiled={compiled!r}: {graph_targets(compiled)}")

# With Inductor, forward and backward, against the reference:
fn = torch.compile(lambda t: opguide.silu_and_mul(t, compiled="kernel"), fullgraph=True)
x = torch.randn(8, 2 * 32, requires_grad=True)
y = fn(x)
(grad_x,) = torch.autograd.grad(y, x, torch.ones_like(y))
expected = opguide.silu_and_mul_reference(x)  # plain PyTorch: autograd differentiates it
torch.testing.assert_close(y, expected)
torch.testing.assert_close(grad_x, torch.autograd.grad(expected, x, torch.ones_like(y))[0])
print("torch.compile(fullgraph=True), Inductor: forward and backward match the reference")

# %%
# An exported program keeps the operator, so a program without Python (an
# AOTInductor package, :doc:`step 16 <16_across_pytorch>`) calls the same
# kernels:


class GatedActivation(torch.nn.Module):
    def forward(self, x):
        return opguide.silu_and_mul(x)  # compiled="kernel", the default


program = torch.export.export(GatedActivation(), (torch.randn(4, 2 * 8),))
print(program.graph_module.code.strip())
assert OPS.silu_and_mul.default in {n.target for n in program.graph.nodes}

# %%
# The Triton kernels
# ------------------
# ``backend="triton"`` runs the Triton twins. On CPU tensors they run in
# Triton's interpreter, which checks the kernels' arithmetic and masks, not
# their speed; on a GPU they run compiled.
from opguide import triton as triton_ops  # noqa: E402

if not backends.triton_ready():
    print("Triton kernels skipped: the Triton operators are not defined in this process")
    on = None
elif triton_ops.INTERPRET:
    on = "cpu"
elif torch.cuda.is_available():
    on = "cuda"
else:
    on = None
    print(
        "Triton kernels skipped: no GPU visible and Triton's interpreter is off\n"
        "(run with TRITON_INTERPRET=1 to run them on CPU tensors)"
    )
if on is not None:
    print("Triton kernels on", "CPU tensors, in the interpreter" if on == "cpu" else "the GPU")
    for dtype in (torch.float32, torch.bfloat16):
        # An odd d: the last tile of each row is partly masked.
        x = torch.randn(5, 2 * 37, dtype=dtype, device=on)
        grad_y = torch.randn(5, 37, dtype=dtype, device=on)
        y = opguide.silu_and_mul(x, backend="triton")
        torch.testing.assert_close(y, opguide.silu_and_mul_reference(x))
        # The gradient through autograd, whose backward is the Triton backward operator.
        xg = x.clone().requires_grad_()
        (grad_x,) = torch.autograd.grad(opguide.silu_and_mul(xg, backend="triton"), xg, grad_y)
        # The reference's gradient, by autograd in float32, rounded once.
        xf = x.float().requires_grad_()
        expected = torch.autograd.grad(opguide.silu_and_mul_reference(xf), xf, grad_y.float())[0]
        torch.testing.assert_close(grad_x, expected.to(dtype))
        print(f"  {str(dtype)[6:]:8} forward and backward match the reference")
    x = torch.randn(3, 2 * 9, device=on)
    for op, args in (
        (OPS.silu_and_mul_triton.default, (x.clone().requires_grad_(),)),
        (OPS.silu_and_mul_backward_triton.default, (torch.randn(3, 9, device=on), x)),
    ):
        result = torch.library.opcheck(op, args)
        print(f"  opcheck {op.name():36}", "ok" if set(result.values()) == {"SUCCESS"} else result)

# %%
# How fast on a GPU (recorded)
# ----------------------------
# ``guidekit/benchmark/silu_and_mul.py`` times the forward, and the forward
# with its backward through autograd, of opguide's CUDA and Triton kernels,
# ``torch.compile`` of the reference, and Liger-Kernel's
# ``LigerSiLUMulFunction`` (given the two halves as separate contiguous
# tensors, as a model that uses it holds them). Each is shown as a percentage
# of the bandwidth of a copy (``copy_``) of as many bytes. This page reads a
# record from one GPU; it measures nothing.
path = recorded_dir() / "silu_and_mul_h200.json"
record = json.loads(path.read_text())
say(
    f"{path.name}: recorded on {record['device']}, {record['date'][:10]}; "
    f"torch {record['torch']}, CUDA {record['cuda']}, Triton {record['triton']}"
)
say(f"command: {record['command']}")
stale = sources.stale_note(path)
if stale:
    say(stale)
for name, why in record["missing"].items():
    say(f"not measured: {name}: {why}")

# One row of the record per shape, dtype, pass and implementation, as the
# benchmark's format_table reads them.
rows = [r for r in record["results"] if r["impl"] != "copy"]
impls = list(dict.fromkeys(r["impl"] for r in rows))
passes = list(dict.fromkeys(r["pass"] for r in rows))
cases = list(dict.fromkeys((r["rows"], r["d"], r["dtype"]) for r in rows))
pct = {(r["impl"], r["pass"], r["rows"], r["d"], r["dtype"]): r["pct_of_copy"] for r in rows}


def shape(case: tuple) -> str:
    """``rows x d dtype`` of a case."""
    return f"{case[0]}x{case[1]} {case[2]}"


for pass_name in passes:
    print(f"\n{pass_name}, % of the copy")
    print(f"{'rows x d, dtype':20}" + "".join(f"{n:>15}" for n in impls))
    for case in cases:
        print(f"{shape(case):20}" + "".join(f"{pct[(n, pass_name, *case)]:>14.1f}%" for n in impls))

# %%
# One bar per implementation for each shape and dtype; the dashed line is
# the copy.
colors = {
    "opguide cuda": COLORS["opguide"],
    "opguide triton": COLORS["opguide triton"],
    "liger": COLORS["liger"],
}
fig, axes = plt.subplots(1, len(passes), figsize=(11, 4.4), sharey=True, layout="constrained")
width = 0.8 / len(impls)
for ax, pass_name in zip(axes, passes, strict=True):
    for i, impl in enumerate(impls):
        xs = [c + (i - (len(impls) - 1) / 2) * width for c in range(len(cases))]
        heights = [pct[(impl, pass_name, *case)] for case in cases]
        ax.bar(xs, heights, width, label=impl, color=colors.get(impl, f"C{3 + i}"))
    ax.axhline(100, color="grey", linestyle="--", label="copy")
    ax.set_xticks(range(len(cases)), [f"{m}x{d}\n{dt}" for m, d, dt in cases], fontsize=8)
    ax.set(title=pass_name, xlabel="rows x d, dtype")
    ax.grid(axis="y", alpha=0.3)
axes[0].set_ylabel("% of a copy of the same bytes")
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, loc="outside lower center", ncols=len(impls) + 1, fontsize=8)
fig.suptitle(f"silu_and_mul, recorded on {record['device']} ({record['date'][:10]})", fontsize=10)
plt.show()

# %%
# What the record says, computed from its rows: the range of each of
# opguide's kernels, which implementation leads each shape and by how much
# over the next, and where one falls far below the copy.
FAR_BELOW = 80.0  # % of the copy: far enough below to name the shapes
for pass_name in passes:
    for impl in ("opguide cuda", "opguide triton"):
        got = [pct[(impl, pass_name, *case)] for case in cases if (impl, pass_name, *case) in pct]
        if got:
            say(f"{pass_name}: {impl} reaches {min(got):.1f}% to {max(got):.1f}% of the copy.")
    leads: dict[str, list[float]] = {}
    for case in cases:
        ranked = sorted(((pct[(n, pass_name, *case)], n) for n in impls), reverse=True)
        leads.setdefault(ranked[0][1], []).append(ranked[0][0] - ranked[1][0])
    for impl, margins in leads.items():
        say(
            f"{pass_name}: {impl} leads at {len(margins)} of {len(cases)} shapes, by "
            f"{min(margins):.1f} to {max(margins):.1f} points over the next."
        )
    if "opguide cuda" not in leads:
        gaps = [
            max(pct[(n, pass_name, *case)] for n in impls) - pct[("opguide cuda", pass_name, *case)]
            for case in cases
        ]
        say(
            f"{pass_name}: opguide cuda trails the leader by "
            f"{min(gaps):.1f} to {max(gaps):.1f} points."
        )
    for impl in (n for n in impls if n != "torch.compile"):  # the next cell takes it
        low = [case for case in cases if pct[(impl, pass_name, *case)] < FAR_BELOW]
        if low:
            worst = min(low, key=lambda case: pct[(impl, pass_name, *case)])
            say(
                f"{pass_name}: {impl} is below {FAR_BELOW:.0f}% of the copy at {len(low)} of "
                f"{len(cases)} shapes, down to {pct[(impl, pass_name, *worst)]:.1f}% at "
                f"{shape(worst)}."
            )
top = max(pct, key=pct.get)
if pct[top] > 100:
    say(
        f"Above 100% is faster than the copy (at most {pct[top]:.1f}%: {top[0]}, {top[1]}, "
        f"{shape(top[2:])}): copy_ is a yardstick, not a ceiling."
    )

# %%
# ``torch.compile`` of the reference is what ``compiled="native"`` hands
# Inductor. From the record, its best and worst shape in each pass:
for pass_name in passes:
    timed = [case for case in cases if ("torch.compile", pass_name, *case) in pct]
    if not timed:
        continue
    best = max(timed, key=lambda case: pct[("torch.compile", pass_name, *case)])
    worst = min(timed, key=lambda case: pct[("torch.compile", pass_name, *case)])
    high, low = pct[("torch.compile", pass_name, *best)], pct[("torch.compile", pass_name, *worst)]
    if low < FAR_BELOW:
        ours = ", ".join(
            f"{n} {pct[(n, pass_name, *worst)]:.1f}%" for n in ("opguide cuda", "opguide triton")
        )
        say(
            f"{pass_name}: torch.compile reaches {high:.1f}% of the copy at {shape(best)} but "
            f"only {low:.1f}% at {shape(worst)} (there: {ours}). The record times the calls; "
            "it does not say why."
        )
    else:
        say(f"{pass_name}: torch.compile reaches {low:.1f}% to {high:.1f}% of the copy.")

# %%
# Before you take the compiled default into a model, time your model's
# shapes with the benchmark above: ``python -m guidekit.benchmark.silu_and_mul``.
#
# What's next
# -----------
# :doc:`Step 18 <18_your_own_operator>` renders the same activation, with
# the gate as a second input (``silu_mul``), as a project of your own from
# the template; :doc:`step 19 <19_ship_your_operator>` ships it as wheels;
# :doc:`step 20 <20_your_operator_in_a_model>` puts an operator into a real
# model and times the model, not only the kernel. :doc:`Step 11
# <11_performance>` explains the copy that the record measures against.

# %%
# The files of this step, whole
# -----------------------------
# The page above showed the ``silu_and_mul`` entry of this file; here it is
# whole, with the other operators' entries.
#
# .. dropdown:: opguide/registry.py
#
#    .. literalinclude:: /../opguide/registry.py
#       :language: python
#       :caption: opguide/registry.py
