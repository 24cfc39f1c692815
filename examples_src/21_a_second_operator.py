r"""
Step 21: A second operator
==========================

A second operator in the library, ``silu_and_mul``, the gated activation of
Llama MLPs: for ``x`` of shape ``(..., 2*d)`` (gate and up projections side
by side) it returns ``silu(x[..., :d]) * x[..., d:]``. Its kernels are short,
so the page is about what an operator needs around them: one entry in the
registry (``opguide/registry.py``), its own folders and tests, and no other
edit to a shared file; the schema, kernels and
rules whole; the earlier steps' checks applied unchanged; its recorded speed
on a GPU.

What an operator takes
----------------------
``silu_and_mul``'s entry in ``opguide/registry.py`` names its operators and
their Triton twins, its routes, and its kernel and planning files:

.. literalinclude:: /../opguide/registry.py
   :language: python
   :start-after: # [registry-silu-and-mul]
   :end-before: # [registry-silu-and-mul-end]
   :dedent: 4
   :prepend: Operator(
   :append: ),

The rest is its own: ``csrc/silu_and_mul/``, ``opguide/_silu_and_mul/``, its
tests, manifests and benchmark. Everything that enumerates operators reads
the registry (``setup.py``, ``opguide/__init__.py``, :mod:`opguide.backends`,
the manifests, the records' hashes), as the first cell shows.

The schema
----------
A fragment of the ``opguide`` namespace (:doc:`step 13
<13_namespaces_and_fragments>`): the forward, and the backward its autograd
formula calls.

.. literalinclude:: /../csrc/silu_and_mul/silu_and_mul_schema.cpp
   :language: cpp
   :caption: csrc/silu_and_mul/silu_and_mul_schema.cpp

The CUDA kernels
----------------
A torch-free header, as in :doc:`step 3 <03_cuda_kernel>`: 16-byte accesses,
or single elements where a pointer or ``d`` does not allow them (the planner
in ``silu_and_mul_config.h``, each constant with its reason); each thread
issues all its loads before it computes; a grid stride over the rows; 64-bit
indices, since ``row * 2 * cols`` passes ``2**31`` in large tensors.

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
One program per tile of ``ROWS`` x ``BLOCK_N`` of ``y``, in float32, with
``int64`` row offsets; registered as :doc:`step 9 <09_triton_kernel>`
registers RMSNorm's.

.. literalinclude:: /../opguide/_silu_and_mul/triton/kernels.py
   :language: python
   :caption: opguide/_silu_and_mul/triton/kernels.py

The Python side
---------------
The public function, the fake kernels and the registrations. ``compiled``
decides what ``torch.compile`` sees: the operator (``"kernel"``, the default)
or the plain-PyTorch reference, which Inductor can fuse (``"native"``).

.. literalinclude:: /../opguide/_silu_and_mul/ops.py
   :language: python
   :caption: opguide/_silu_and_mul/ops.py

``rules.py``, shared by both routes: autograd saves ``x`` alone (the backward
recomputes the sigmoid), vmap makes the batch more rows, autocast runs in
float32, and FLOP formulas.

.. dropdown:: opguide/_silu_and_mul/rules.py

   .. literalinclude:: /../opguide/_silu_and_mul/rules.py
      :language: python
      :caption: opguide/_silu_and_mul/rules.py
"""

# %%
# Without a GPU the Triton kernels run in Triton's interpreter, chosen
# before anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# %%
# What reads the entry
# --------------------
# Each consumer, asked about ``silu_and_mul``:
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
# The reference computes in float32 (float64 for float64) and rounds once;
# in 16-bit types a kernel may differ from it by one rounding step. The C++
# kernels, and the CUDA ones where a GPU is visible:
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
# ``opcheck`` does not check that the gradient is right;
# :func:`torch.autograd.gradcheck` does, in float64:
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
# What each ``compiled`` choice puts in the graph, under ``fullgraph=True``:


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
# An exported program keeps the operator (:doc:`step 16
# <16_across_pytorch>`):


class GatedActivation(torch.nn.Module):
    def forward(self, x):
        return opguide.silu_and_mul(x)  # compiled="kernel", the default


program = torch.export.export(GatedActivation(), (torch.randn(4, 2 * 8),))
print(program.graph_module.code.strip())
assert OPS.silu_and_mul.default in {n.target for n in program.graph.nodes}

# %%
# The Triton kernels
# ------------------
# ``backend="triton"``: in the interpreter on CPU tensors (arithmetic and
# masks, not speed), compiled on a GPU:
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
# ``guidekit/benchmark/silu_and_mul.py`` times the forward, and forward with
# backward, of opguide's CUDA and Triton kernels, ``torch.compile`` of the
# reference, and Liger-Kernel's ``LigerSiLUMulFunction`` (given the halves as
# separate tensors), each in % of a ``copy_`` of as many bytes. A record from
# one GPU:
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
# The dashed line is the copy:
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
# Computed from its rows: each kernel's range, the leader of each shape, and
# where one falls far below the copy:
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
# ``compiled="native"``'s best and worst shape in each pass:
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
# Time your model's shapes before choosing: ``python -m
# guidekit.benchmark.silu_and_mul``. :doc:`Step 20
# <20_your_operator_in_a_model>` puts this operator into a model.

# %%
# The files of this step, whole
# -----------------------------
#
# .. dropdown:: opguide/registry.py
#
#    .. literalinclude:: /../opguide/registry.py
#       :language: python
#       :caption: opguide/registry.py
