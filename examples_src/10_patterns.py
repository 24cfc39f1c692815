r"""
Step 10: Patterns: in-place, several outputs, optional arguments
================================================================

Real operator libraries need more than ``Tensor -> Tensor``. Between two
blocks of a transformer, the residual stream is updated and normalised in one
go: ``residual += x`` then ``rms_norm(residual)``. Fused, the two make four
passes over the activations instead of five (the norm's read of the updated
residual is saved: the byte count below), and the natural operator writes into one of
its inputs, returns more than one tensor, and takes arguments that may be
``None``. This step builds that operator, ``opguide::fused_add_rms_norm_``,
in C++ (CPU), CUDA and Triton.

In this step you will learn:

* how a schema says that an argument is written (``Tensor(a!)``), that an
  argument may be ``None`` (``Tensor?``, ``ScalarType?``), and that there are
  several outputs (``-> (Tensor, Tensor)``);
* how the C++, CUDA and Triton kernels receive those arguments;
* what a fake kernel must (and must not) do for a mutating operator;
* how :func:`torch.library.opcheck` tests each variant, and how
  ``torch.compile`` turns the mutation into a functional graph and back;
* how fast the Triton and CUDA kernels run on a GPU (recorded).

:doc:`Step 10.2 <10_patterns_2_inplace_and_index_inputs>` goes on with what
eager autograd needs from an operator that writes an input, and with index
inputs: where their checks go.

The schema
----------
.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_schema.cpp
   :language: cpp
   :start-after: // [schema-fused-add-rms-norm]
   :end-before: // [schema-fused-add-rms-norm-end]

Reading it left to right:

* ``Tensor(a!) residual``: the ``!`` says the kernel writes into
  ``residual``; ``a`` names its alias set. No output carries ``(a)``, so no
  output aliases it: the results are new tensors. The trailing ``_`` of the
  name is PyTorch's convention for an in-place operator.
* ``Tensor? weight``: a tensor or ``None``; C++ receives
  ``const std::optional<at::Tensor>&``.
* ``ScalarType? out_dtype=None``: a dtype or ``None``, with a default, so
  Python callers may leave it out; C++ receives
  ``std::optional<at::ScalarType>``.
* ``-> (Tensor, Tensor)``: two outputs, the normalised tensor and ``1/rms`` of
  each row (kept by real models for the backward pass). C++ returns a
  ``std::tuple``.

The contract: ``residual += x`` computed in float32 (float64 for a float64
residual) and rounded once to the residual's dtype (which may be float32
under float16/bfloat16 activations);
then that stored value is normalised, scaled by ``weight`` if given, and
written in ``out_dtype`` (default: the dtype of ``x``).

The CPU kernel
--------------
The row loop stores the updated residual and accumulates its squares in the
same pass; the second pass finds the row in cache:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cpu.cpp
   :language: cpp
   :start-after: // [cpu-fused-kernel]
   :end-before: // [cpu-fused-kernel-end]

The host function is where the schema's types arrive: the mutable argument as
``at::Tensor&``, the optionals as ``std::optional``. Three dtypes (of ``x``,
the residual and the output) are dispatched, and a strided residual is
updated through a dense copy that is written back, so the caller always sees
the update in the tensor they passed:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cpu.cpp
   :language: cpp
   :start-after: // [cpu-fused-host]
   :end-before: // [cpu-fused-host-end]

The checks, shared with CUDA, name the argument and what was expected:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_checks.cpp
   :language: cpp
   :start-after: // [fused-checks]
   :end-before: // [fused-checks-end]

The CUDA kernel
---------------
The device code lives in a torch-free header
(``csrc/fused_add_rms_norm/fused_add_rms_norm.cuh``) that compiles alone with
``nvcc`` and, after hipify, with ``hipcc``. A row gets one thread per 16-byte
vector (up to 1024 threads; short rows share a block). Rows that are not whole
16-byte vectors take 8- or 4-byte accesses when ``x``, the residual and the
output share a dtype, and single elements otherwise (:doc:`step 11
<11_performance>`, "Odd row lengths"; at the one row length where that step
times this kernel with 4-byte accesses, it is slower with them than with
single elements). Each thread keeps its vector of ``h = x + residual`` and of
the weight in registers, so the second pass writes the output without reading
memory. Rows too long for the registers loop over the
row in both passes, and the second pass re-reads the residual elements the
thread itself wrote in the first. :doc:`Step 11.4 <11_performance_4_tuning>`
measures the fused kernel's register cap; the reason the kernel's comment
gives for two blocks per SM (with one, the memory system idles between rows)
is not timed: no record runs the kernel at one block per SM. Rows longer
still (more than 4096 vectors, 32768 bfloat16 elements) go to a kernel that
splits each row over a thread-block cluster on Hopper and later GPUs
(``csrc/fused_add_rms_norm/fused_add_rms_norm_cluster.cuh``; :doc:`step 11.3
<11_performance_3_long_rows>`), which the planner
(``csrc/fused_add_rms_norm/fused_add_rms_norm_planner.cuh``) chooses when the
GPU says such clusters fit:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
   :language: cpp
   :start-after: // [kernel]
   :end-before: // [kernel-end]

The host wrapper hands the pointers to the planner, which picks the kernel
and the vector width from the row length, the strides and every pointer's
alignment, and launches on PyTorch's current stream:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_cuda.cu
   :language: cpp
   :start-after: // [cuda-launch]
   :end-before: // [cuda-launch-end]

The Triton kernel
-----------------
The whole row stays in registers, so the updated residual is stored once and
normalised without being read back. The optional weight becomes a
``tl.constexpr`` flag: each value compiles its own kernel, with no branch at
run time:

.. literalinclude:: /../opguide/triton/fused.py
   :language: python
   :caption: opguide/triton/fused.py

In Python the schema is inferred from the annotations: ``mutates_args``
produces the write annotation (``Tensor(a1!) residual`` in the inferred
schema printed below: the same ``!``, with an alias set named ``a1``),
``Optional[...]`` the ``?``:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: fused_add_rms_norm_triton_

Its body is the launch function, which takes the planner's choice of kernel
(``launch.fused_config``: the one above for rows of up to 32 KiB, a split or
chunked kernel for longer ones):

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: fused_add_rms_norm

This kernel is not autotuned. The autotuner times each config by running the
kernel several times, and each run would add ``x`` to the residual again
(:func:`triton.autotune` has ``restore_value`` for this, at the cost of a copy
per trial). A block size derived from ``N`` does the job here.

The fake kernel
---------------
The fake kernel describes the outputs: shapes, dtypes, devices. It does not
write to ``residual``: the ``(a!)`` already tells the compiler which input
changes, and how (in place, same shape and dtype). The compiler is not the
only reader of that fact: eager autograd needs it too, and learns it another
way (:doc:`step 10.2 <10_patterns_2_inplace_and_index_inputs>`):

.. literalinclude:: /../opguide/fused_add_rms_norm.py
   :language: python
   :start-after: # [fake]
   :end-before: # [fake-end]

The wrapper that users call, :func:`opguide.fused_add_rms_norm_`, checks the
arguments and picks the backend like :func:`opguide.rms_norm`.
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
# One call updates the caller's residual, in its own storage, and returns two
# new tensors:
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
# The reference computes the same contract without touching its inputs and
# returns what the residual should hold afterwards. Random data, every
# backend and device available here (the output lists them), with and without
# weight, a float32 residual under
# bfloat16 activations, and a float32 output for float16 inputs. The updated
# residual must match *exactly* (one rounding, the same everywhere).
# The tolerance of one rounding to each dtype (opguide's tests use the same table).
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
# The optional arguments change what the kernels do, so
# :func:`torch.library.opcheck` checks four variants (weight, no weight,
# ``out_dtype``, float32 residual), each with its four tests: schema (does the
# kernel write nothing that the schema leaves unmarked?), autograd registration,
# fake kernel, and tracing. It checks the C++ operator on CPU tensors, both
# operators on CUDA tensors where there is a GPU, and the Triton operator on
# CPU tensors where Triton's interpreter runs (as on a build without a GPU):
# only there does the Triton operator take CPU tensors. The output names each
# operator and device checked.
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
# Compiler passes want functional graphs. Exporting a small block shows what
# functionalization does with ``(a!)``: the call becomes
# ``auto_functionalized_v2``, which returns the new value of ``residual`` as an
# extra output, and the graph signature records that this output must be
# copied back into the input ``residual``:


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
# ``torch.compile`` does the same, and Inductor turns the functional form back
# into an in-place call when that is safe (its `reinplacing pass
# <https://github.com/pytorch/pytorch/blob/main/torch/_inductor/fx_passes/reinplace.py>`__).
# What matters to the caller: after a
# compiled call, the residual they passed holds the update, and code that reads
# it after the operator sees the new value. Two calls in a row, compiled and
# eager side by side, for the operators that the opcheck cell checked on CPU:
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
# The recorded sweep of :doc:`step 9 <09_triton_kernel>` times this operator
# too (the ``fused`` pass), read from ``docs/recorded/``: the Triton kernel and
# the CUDA kernel in % of a copy of the same bytes, both 16-bit types, at row
# lengths from short to long with the same bytes in all. The dotted line is
# the longest row that one Triton program holds in a 16-bit type; longer rows
# are split over programs (:doc:`step 9.2 <09_triton_kernel_2_long_rows>`).
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


record = recorded("sweep_opguide_h100.json")
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
# The same operator three times makes the comparison of
# :doc:`step 9 <09_triton_kernel>` concrete:
#
# * **Effort**: the Triton kernel is the shortest of the three kernels shown
#   above (their lines of code are counted below), the dtype combinations
#   come for free (the kernel is compiled per dtype on first use), and a
#   masked load replaces the vector/scalar split. The C++ and CUDA versions
#   spell out the dispatch over three dtypes, the alignment check and the
#   block reduction.
# * **Portability**: the Triton kernel compiles for AMD GPUs through Triton's
#   ROCm backend as it is (``tests/test_triton_targets.py`` compiles it for
#   AMD targets, as :doc:`step 9.2 <09_triton_kernel_2_long_rows>` does one
#   kernel; it has not run on an AMD GPU for this guide).
#   The CUDA kernel needs hipify plus the shim in
#   ``csrc/common/platform.cuh`` (wavefront width, shuffles without a lane mask).
# * **Limits**: a Triton program holds a row up to the lengths printed below
#   (``opguide/triton/launch.py`` decides). Longer rows are split over several
#   programs, one segment each, and rows of more segments than the GPU has SMs
#   take the chunked kernels, which read each row twice (:doc:`step 9.2
#   <09_triton_kernel_2_long_rows>`); the C++ and CUDA kernels take any row
#   length. Float64 is C++/CUDA only.
# * **Speed**: the recorded sweep above, on one GPU; on CPU the Triton route is
#   the interpreter, a correctness tool.


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
# The fused operator on each route, as a manifest: the files to copy, each to
# the same path, and those to write, cut from this repository's own.
# ``tests/test_manifests.py`` checks that each list names every file its files
# include or import; with ``OPGUIDE_MANIFESTS_FULL=1`` it also builds each
# fused route alone in an empty folder and checks it against the operator's
# reference (by default the suite builds the RMSNorm routes only). The
# C++/CUDA route
# (``manifests/cpp_fused_add_rms_norm.txt``):

from guidekit import manifests  # noqa: E402

print(manifests.shown("cpp_fused_add_rms_norm"))

# %%
# The Triton route (``manifests/triton_fused_add_rms_norm.txt``):

print(manifests.shown("triton_fused_add_rms_norm"))

# %%
# The files of this step, whole
# -----------------------------
# The page above showed parts of these files; here each one is whole, as it
# is compiled and run.
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
