r"""
Step 10: Patterns: in-place, several outputs, optional arguments
================================================================

Part I's operator takes tensors and returns one. Between two transformer
blocks, ``residual += x`` then ``rms_norm(residual)`` fused into one operator
saves the norm's read of the updated residual (the byte count below), and that
operator writes an input, returns two tensors, and takes arguments that may be
``None``. This step builds ``opguide::fused_add_rms_norm_`` in C++, CUDA and
Triton: its schema, how each kernel receives those arguments, its fake
kernel, ``opcheck`` of each variant, how ``torch.compile`` handles the
mutation, and its recorded speed on a GPU. :doc:`Step 10.2
<10_patterns_2_inplace_and_index_inputs>` goes on with eager autograd and
index inputs.

The schema
----------
.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_schema.cpp
   :language: cpp
   :start-after: // [schema-fused-add-rms-norm]
   :end-before: // [schema-fused-add-rms-norm-end]

* ``Tensor(a!) residual``: the kernel writes ``residual``; no output carries
  ``(a)``, so the results are new tensors. The trailing ``_`` marks an
  in-place operator.
* ``Tensor? weight`` and ``ScalarType? out_dtype=None``: C++ receives
  ``std::optional``.
* ``-> (Tensor, Tensor)``: the output and each row's ``1/rms``; C++ returns a
  ``std::tuple``.

The contract: ``residual += x`` in float32 (float64 for float64), rounded once
to the residual's dtype; that stored value normalised, scaled by ``weight``
if given, and written in ``out_dtype`` (default: ``x``'s dtype).

The CPU kernel
--------------
The row loop stores the updated residual and sums its squares in one pass:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cpu.cpp
   :language: cpp
   :start-after: // [cpu-fused-kernel]
   :end-before: // [cpu-fused-kernel-end]

The host function receives the mutable argument as ``at::Tensor&``,
dispatches three dtypes, and updates a strided residual through a dense copy
written back:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cpu.cpp
   :language: cpp
   :start-after: // [cpu-fused-host]
   :end-before: // [cpu-fused-host-end]

The checks, shared with CUDA:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_checks.cpp
   :language: cpp
   :start-after: // [fused-checks]
   :end-before: // [fused-checks-end]

The CUDA kernel
---------------
The device code is a torch-free header. A row gets one thread per 16-byte
vector (up to 1024; short rows share a block); rows that are not whole
vectors take narrower accesses (:doc:`step 11 <11_performance>`, "Odd row
lengths"). Each thread keeps its part of ``h = x + residual`` and of the
weight in registers, so the second pass reads no memory; longer rows loop in
both passes, and rows of more than 4096 vectors go to a thread-block cluster
on Hopper and later (:doc:`step 11.3 <11_performance_3_long_rows>`), where
the planner finds that clusters fit. :doc:`Step 11.4
<11_performance_4_tuning>` measures its register cap. The kernel:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
   :language: cpp
   :start-after: // [kernel]
   :end-before: // [kernel-end]

The planner picks kernel and vector width from the row length, strides and
alignments; the launch uses PyTorch's current stream:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cuda.cu
   :language: cpp
   :start-after: // [cuda-launch]
   :end-before: // [cuda-launch-end]

The Triton kernel
-----------------
The row stays in registers; the optional weight becomes a ``tl.constexpr``
flag, so each value compiles its own kernel:

.. literalinclude:: /../opguide/triton/fused.py
   :language: python
   :caption: opguide/triton/fused.py

``mutates_args`` gives the write annotation (``Tensor(a1!) residual`` in the
schema printed below), ``Optional[...]`` the ``?``:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: fused_add_rms_norm_triton_

Its body launches the kernel that ``launch.fused_config`` plans:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: fused_add_rms_norm

It is not autotuned: each timed run would add ``x`` to the residual again
(``restore_value`` of :func:`triton.autotune` costs a copy per trial).

The fake kernel
---------------
It describes the outputs and does not write ``residual``: the ``(a!)``
already says which input changes:

.. literalinclude:: /../opguide/fused_add_rms_norm.py
   :language: python
   :start-after: # [fake]
   :end-before: # [fake-end]

The wrapper :func:`opguide.fused_add_rms_norm_` checks the arguments and
picks the backend.
"""

# %%
# Without a GPU the Triton kernels run in Triton's interpreter, chosen
# before anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# The operator in use
# -------------------
import textwrap
import warnings

import torch

import opguide
from guidekit.recorded.pages import lines_figure, ranges, recorded, say, select, show, versus
from opguide import fused_add_rms_norm_reference
from opguide import triton as triton_ops

# sphinx_gallery_thumbnail_path = "_thumbnails/10.png"
for op in (
    torch.ops.opguide.fused_add_rms_norm_,
    torch.ops.opguide.fused_add_rms_norm_triton_,
):
    print(textwrap.fill(str(op.default._schema), 88, subsequent_indent="    "))

# %%
# One call updates the residual in its storage and returns two new tensors:
torch.manual_seed(0)
x = torch.randn(4, 64)
residual = torch.randn(4, 64)
weight = torch.randn(64)
before = residual.clone()
storage = residual.data_ptr()

out, inv_rms = opguide.fused_add_rms_norm_(x, residual, weight)
print("same storage:", residual.data_ptr() == storage)
print("residual == before + x:", torch.equal(residual, before + x))
print("out", tuple(out.shape), out.dtype)
print("inv_rms", tuple(inv_rms.shape), inv_rms.dtype)

# %%
# Checking every backend against the reference
# --------------------------------------------
# Every backend and device here, with and without weight, a float32
# residual under bfloat16, a float32 output for float16; the updated residual
# must match the reference *exactly*:
from opguide.testing import TOLERANCES as TOL  # noqa: E402

CASES = [  # x dtype, residual dtype, weight?, out_dtype
    (torch.float32, torch.float32, True, None),
    (torch.float16, torch.float16, False, None),
    (torch.bfloat16, torch.float32, True, None),
    (torch.float16, torch.float16, True, torch.float32),
]
devices = [("cpu", "cpp")]
if triton_ops.INTERPRET:
    devices.append(("cpu", "triton"))
if torch.cuda.is_available():
    devices.append(("cuda", "cpp"))
    if not triton_ops.INTERPRET:
        devices.append(("cuda", "triton"))

for device, backend in devices:
    for x_dtype, res_dtype, has_weight, out_dtype in CASES:
        x = torch.randn(3, 200, device=device).to(x_dtype)
        residual = torch.randn(3, 200, device=device).to(res_dtype)
        weight = torch.randn(200, device=device).to(x_dtype) if has_weight else None
        before = residual.clone()
        out, inv_rms = opguide.fused_add_rms_norm_(
            x, residual, weight, out_dtype=out_dtype, backend=backend
        )
        ref_out, ref_inv, ref_residual = fused_add_rms_norm_reference(
            x, before, weight, 1e-6, out_dtype
        )
        torch.testing.assert_close(residual, ref_residual, atol=0, rtol=0)
        torch.testing.assert_close(out, ref_out, **TOL[out.dtype])
        torch.testing.assert_close(inv_rms, ref_inv, **TOL[torch.float32])
        err = (out.float() - ref_out.float()).abs().max().item()
        print(
            f"{device:4} {backend:6} x={str(x_dtype)[6:]:8} "
            f"residual={str(res_dtype)[6:]:8} "
            f"weight={'yes' if has_weight else 'None':4} out={str(out.dtype)[6:]:8} "
            f"|error| {err:.1e}"
        )
if not torch.cuda.is_available():
    print(
        "CUDA and Triton GPU kernels skipped: no GPU visible\n"
        "(the test suite runs them where a GPU is visible; building.html shows a recorded\n"
        "GPU run of the suite, and the sweep below times them)"
    )

# %%
# opcheck, for each variant
# -------------------------
# Four variants, each operator and device available here (the Triton
# operator takes CPU tensors only in the interpreter):
variants = {
    "weight": (torch.randn(4, 24), torch.randn(4, 24), torch.randn(24), 1e-6, None),
    "no weight": (torch.randn(4, 24), torch.randn(4, 24), None, 1e-6, None),
    "out_dtype": (
        torch.randn(4, 24),
        torch.randn(4, 24),
        torch.randn(24),
        1e-6,
        torch.bfloat16,
    ),
    "float32 residual": (
        torch.randn(4, 24).half(),
        torch.randn(4, 24),
        torch.randn(24).half(),
        1e-6,
        None,
    ),
}
cpp_op = torch.ops.opguide.fused_add_rms_norm_.default
checks = [("cpp", cpp_op, "cpu")]
if triton_ops.INTERPRET:
    checks.append(("triton", torch.ops.opguide.fused_add_rms_norm_triton_.default, "cpu"))
elif torch.cuda.is_available():
    checks.append(("cpp", cpp_op, "cuda"))
    checks.append(("triton", torch.ops.opguide.fused_add_rms_norm_triton_.default, "cuda"))
for backend, op, on in checks:
    for name, args in variants.items():
        args = tuple(a.to(on, copy=True) if isinstance(a, torch.Tensor) else a for a in args)
        result = torch.library.opcheck(op, args)
        print(
            f"{backend:6} {on:4} {name:17}",
            "ok" if set(result.values()) == {"SUCCESS"} else result,
        )

# %%
# How torch.compile handles the mutation
# --------------------------------------
# Functionalization turns the call into ``auto_functionalized_v2``, which
# returns the new ``residual`` as an extra output; the graph signature says it
# is copied back into the input:


class Block(torch.nn.Module):
    def forward(self, x, residual, weight):
        # The operator itself in the graph (compiled="kernel", the default; see
        # opguide.backends).
        out, _ = opguide.fused_add_rms_norm_(x, residual, weight)
        return out


example = (torch.randn(2, 8), torch.randn(2, 8), torch.randn(8))
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # raised inside torch.export
    exported = torch.export.export(Block(), example).run_decompositions({})
for line in exported.graph_module.code.strip().splitlines():  # long lines wrapped
    indent = " " * (len(line) - len(line.lstrip()))
    wrapped = textwrap.wrap(line, 88, subsequent_indent=indent + "    ", break_long_words=False,
                            break_on_hyphens=False)  # fmt: skip
    print("\n".join(wrapped))  # between tokens only: no name is cut in two
print(exported.graph_signature)

# %%
# Inductor turns it back into an in-place call where safe (its `reinplacing
# pass
# <https://github.com/pytorch/pytorch/blob/main/torch/_inductor/fx_passes/reinplace.py>`__).
# After two compiled calls the caller's residual holds both updates:
torch._dynamo.reset()


def block_boundary(x, residual, weight, backend):
    out, _ = opguide.fused_add_rms_norm_(x, residual, weight, backend=backend)
    return out * 2, residual + 0  # reads the residual after the update


for backend in dict.fromkeys(b for b, _, on in checks if on == "cpu"):  # on CPU tensors
    compiled = torch.compile(block_boundary, fullgraph=True)
    x = torch.randn(8, 128)
    weight = torch.randn(128)
    r_compiled = torch.randn(8, 128)
    r_eager = r_compiled.clone()
    start = r_compiled.clone()
    for _ in range(2):
        got = compiled(x, r_compiled, weight, backend)
        expected = block_boundary(x, r_eager, weight, backend)
        torch.testing.assert_close(got, expected)
    torch.testing.assert_close(r_compiled, start + 2 * x)
    print(f"{backend:6} compiled: residual updated twice in place, outputs match eager")


# %%
# Errors name the argument
# ------------------------
for bad in [
    dict(x=torch.randn(2, 4), residual=torch.randn(2, 5)),
    dict(x=torch.randn(2, 4).bfloat16(), residual=torch.randn(2, 4).half()),
    dict(x=torch.randn(2, 4), residual=torch.randn(1, 4).expand(2, 4)),
    dict(x=torch.randn(2, 4), residual=torch.randn(2, 4), out_dtype=torch.int32),
]:
    try:
        opguide.fused_add_rms_norm_(**bad)
    except (TypeError, ValueError, RuntimeError) as err:
        print(textwrap.fill(f"{type(err).__name__}: {err}", 88, subsequent_indent=" "))

# %%
# How fast, on a GPU (recorded)
# -----------------------------
# Step 9's recorded sweep (the ``fused`` pass): Triton and CUDA in % of a copy
# of the same bytes. The dotted line is the longest row one Triton program
# holds in a 16-bit type (:doc:`step 9.2 <09_triton_kernel_2_long_rows>`):
import inspect  # noqa: E402
from pathlib import Path  # noqa: E402

from guidekit.compile_checks import source_root  # noqa: E402
from opguide.triton import fused as triton_fused  # noqa: E402
from opguide.triton import launch  # noqa: E402
from opguide.triton.launch import Registers  # noqa: E402


def longest_register_row(planner, dtype: torch.dtype) -> int:
    """The longest power-of-two row ``planner`` keeps in one program's registers."""
    cpu = torch.device("cpu")
    fits = [2**k for k in range(4, 20)]
    return max(n for n in fits if isinstance(planner(1, n, dtype, cpu), Registers))


record = recorded("sweep_opguide_<gpu>.json")
say(f"Triton {record['triton']}, CUDA {record['cuda']}")
say("bytes per call: " + record["bytes_model"]["fused"])
fused_limit = longest_register_row(launch.fused_config, torch.bfloat16)
ROUTES = ("opguide triton", "opguide")  # Triton, and the CUDA kernel
rows = select(record["sweep"]["rows"], impl=ROUTES, **{"pass": "fused"})
title = f"Recorded on {record['device']}"
fig = lines_figure(rows, title, series=("impl", "dtype"), marks={"limit": {"fused": fused_limit}})
show(ranges(rows, ("pass", "dtype", "impl")))
# One timing per point: a gap under 1 point of the copy is a tie.
say(versus(rows, *ROUTES))

# %%
# Trade-offs, again
# -----------------
# * **Effort**: the Triton kernel is the shortest (counted below); dtypes
#   come free and a masked load replaces the vector/scalar split.
# * **Portability**: the Triton kernel compiles for AMD targets as it is
#   (``tests/test_triton_targets.py``; no AMD GPU ran it); the CUDA kernel
#   needs hipify and its HIP shim (:doc:`step 4 <04_hip_port>`).
# * **Limits**: one Triton program holds a row up to the lengths printed
#   below; longer rows are split (:doc:`step 9.2
#   <09_triton_kernel_2_long_rows>`). Float64 is C++/CUDA only.
# * **Speed**: the recorded sweep above; on CPU, Triton is the interpreter.


def code_lines(text: str, comment: str) -> int:
    """Lines that hold code: not blank, not only a comment."""
    return sum(
        1 for line in text.splitlines() if line.strip() and not line.strip().startswith(comment)
    )


def between(path: Path, start: str, end: str) -> str:
    """The text of ``path`` between two marker lines, as the page shows it."""
    text = path.read_text()
    return text[text.index(start) + len(start) : text.index(end)]


FUSED_SRC = source_root() / "csrc" / "fused_add_rms_norm"
cpu_file, cuda_file = FUSED_SRC / "fused_add_rms_norm_cpu.cpp", FUSED_SRC / "fused_add_rms_norm.cuh"
kernel_lines = {
    "Triton": code_lines(inspect.getsource(triton_fused._fused_add_rms_norm_kernel.fn), "#"),
    "CUDA (one block)": code_lines(between(cuda_file, "// [kernel]", "// [kernel-end]"), "//"),
    "C++ CPU": code_lines(
        between(cpu_file, "// [cpu-fused-kernel]", "// [cpu-fused-kernel-end]"), "//"
    ),
}
print("Lines of code (blank lines and comments left out):")
for name, count in kernel_lines.items():
    print(f"  {name:18} {count:4}")
shortest = min(kernel_lines, key=kernel_lines.get)
assert shortest.startswith("Triton"), kernel_lines  # the Effort point above says so
print("Longest row in one Triton program's registers (elements):")
print(f"  rms_norm forward:     {launch.MAX_REGISTER_ROW}")
print(f"  rms_norm backward:    {launch.MAX_REGISTER_ROW_BACKWARD}")
for dtype in (torch.float32, torch.bfloat16):
    limit = longest_register_row(launch.fused_config, dtype)
    print(f"  fused_add_rms_norm_:  {limit} in {str(dtype)[6:]}")

# %%
# The files to take into your own project
# ---------------------------------------
# The files to copy and to write, per route. ``tests/test_manifests.py``
# checks each list is complete, and with ``OPGUIDE_MANIFESTS_FULL=1`` builds
# each route alone. The C++/CUDA route:

from guidekit import manifests  # noqa: E402

print(manifests.shown("cpp_fused_add_rms_norm"))

# %%
# The Triton route:

print(manifests.shown("triton_fused_add_rms_norm"))

# %%
# The files of this step, whole
# -----------------------------
# The files this page showed in parts:
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_schema.cpp
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_schema.cpp
#       :language: cpp
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_schema.cpp
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm.h
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm.h
#       :language: cpp
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm.h
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_checks.cpp
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_checks.cpp
#       :language: cpp
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_checks.cpp
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_cpu.cpp
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cpu.cpp
#       :language: cpp
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_cpu.cpp
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
#       :language: cuda
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_config.h
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_config.h
#       :language: cuda
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_config.h
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_planner.cuh
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_planner.cuh
#       :language: cuda
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_planner.cuh
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_launch.cuh
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_launch.cuh
#       :language: cuda
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_launch.cuh
#
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_cuda.cu
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cuda.cu
#       :language: cuda
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_cuda.cu
#
# .. dropdown:: opguide/fused_add_rms_norm.py
#
#    .. literalinclude:: /../opguide/fused_add_rms_norm.py
#       :language: python
#       :caption: opguide/fused_add_rms_norm.py
