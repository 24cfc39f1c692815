r"""
Step 10: Patterns: in-place, several outputs, optional and index arguments
==========================================================================

Real operator libraries need more than ``Tensor -> Tensor``. Between two
blocks of a transformer, the residual stream is updated and normalised in one
go: ``residual += x`` then ``rms_norm(residual)``. Fusing the two saves a full
read and write of the activations, and the natural operator writes into one of
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
* where the checks of an index input go: metadata in the wrapper and the
  fake kernel, values (an index out of range) in the kernel, and a fake
  kernel for an output whose size depends on the data;
* what eager autograd needs from an operator that writes an input (the
  version counter, the ``ADInplaceOrView`` and ``Autograd`` kernels), what
  ``custom_op`` does for you, and the test that checks it, since ``opcheck``
  does not.

The schema
----------
.. literalinclude:: /../csrc/opguide.cpp
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

The contract: ``residual += x`` computed in float32 and rounded once to the
residual's dtype (which may be float32 under float16/bfloat16 activations);
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
The device code lives in a torch-free header (``csrc/fused_add_rms_norm/fused_add_rms_norm.cuh``)
that compiles alone with ``nvcc`` and, after hipify, with ``hipcc``. A row
gets one thread per 16-byte vector (up to 1024 threads; short rows share a
block). Rows that are not whole 16-byte vectors take 8- or 4-byte accesses
when ``x``, the residual and the output share a dtype, and single elements
otherwise (:doc:`step 11 <11_performance>`, "Odd row lengths"). Each thread
keeps its vector of ``h = x + residual`` and of the weight in registers, so
the second pass writes the output without reading memory.
Rows too long for the registers loop over the row in both passes, and the
second pass re-reads the residual elements the thread itself wrote in the
first. :doc:`Step 11 <11_performance>` ("Lessons") measures the choices.
Rows longer still (more than 4096 vectors, 32768 bfloat16 elements) go to a
kernel that splits each row over a thread-block cluster on Hopper and later
GPUs (``csrc/fused_add_rms_norm/fused_add_rms_norm_cluster.cuh``; step 11, "Long
rows"), which the host wrapper below tries first:

.. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
   :language: cpp
   :start-after: // [kernel]
   :end-before: // [kernel-end]

The host wrapper picks the vector width, checks alignment, and launches on
PyTorch's current stream:

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
(``launch.fused_config``: the one above for rows of up to 64 KiB, a split or
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
way (below, "In place, and autograd"):

.. literalinclude:: /../opguide/fused_add_rms_norm.py
   :language: python
   :start-after: # [fake]
   :end-before: # [fake-end]

The wrapper that users call, :func:`opguide.fused_add_rms_norm_`, checks the
arguments and picks the backend like :func:`opguide.rms_norm`.
"""

# %%
# The operator in use
# -------------------
import textwrap
import warnings

import torch

import opguide
from opguide import fused_add_rms_norm_reference
from opguide import triton as triton_ops

# sphinx_gallery_thumbnail_path = "_thumbnails/10.png"
print(torch.ops.opguide.fused_add_rms_norm_.default._schema)
print(torch.ops.opguide.fused_add_rms_norm_triton_.default._schema)

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
print("out", tuple(out.shape), out.dtype, "| inv_rms", tuple(inv_rms.shape), inv_rms.dtype)

# %%
# Checking every backend against the reference
# --------------------------------------------
# The reference computes the same contract without touching its inputs and
# returns what the residual should hold afterwards. Random data, every
# backend and device available here (the output lists them), with and without
# weight, a float32 residual under
# bfloat16 activations, and a float32 output for float16 inputs. The updated
# residual must match *exactly* (one rounding, the same everywhere), except
# that Triton's interpreter rounds float32 to bfloat16 by truncation (a GPU
# rounds to nearest), which can leave it one unit in the last place away.
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
        truncated = backend == "triton" and device == "cpu" and res_dtype == torch.bfloat16
        exact = dict(atol=0, rtol=2**-7 if truncated else 0)
        torch.testing.assert_close(residual, ref_residual, **exact)
        torch.testing.assert_close(out, ref_out, **TOL[out.dtype])
        torch.testing.assert_close(inv_rms, ref_inv, **TOL[torch.float32])
        err = (out.float() - ref_out.float()).abs().max().item()
        print(
            f"{device:4} {backend:6} x={str(x_dtype)[6:]:8} residual={str(res_dtype)[6:]:8} "
            f"weight={'yes' if has_weight else 'None':4} out={str(out.dtype)[6:]:8} "
            f"max |out error| = {err:.1e}"
        )
if not torch.cuda.is_available():
    print("CUDA kernel skipped: no GPU visible (the test suite runs it on a GPU machine)")

# %%
# opcheck, for each variant
# -------------------------
# The optional arguments change what the kernels do, so each combination is
# checked: schema (does the kernel really write ``residual`` and nothing
# else?), fake kernel, and tracing.
variants = {
    "weight": (torch.randn(4, 24), torch.randn(4, 24), torch.randn(24), 1e-6, None),
    "no weight": (torch.randn(4, 24), torch.randn(4, 24), None, 1e-6, None),
    "out_dtype": (torch.randn(4, 24), torch.randn(4, 24), torch.randn(24), 1e-6, torch.bfloat16),
    "float32 residual": (
        torch.randn(4, 24).half(),
        torch.randn(4, 24),
        torch.randn(24).half(),
        1e-6,
        None,
    ),
}
ops = {"cpp": torch.ops.opguide.fused_add_rms_norm_.default}
if triton_ops.INTERPRET:
    ops["triton"] = torch.ops.opguide.fused_add_rms_norm_triton_.default
for backend, op in ops.items():
    for name, args in variants.items():
        args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        result = torch.library.opcheck(op, args)
        print(f"{backend:6} {name:17}", "ok" if set(result.values()) == {"SUCCESS"} else result)

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
        out, _ = opguide.fused_add_rms_norm_(x, residual, weight)
        return out


example = (torch.randn(2, 8), torch.randn(2, 8), torch.randn(8))
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # raised inside torch.export
    exported = torch.export.export(Block(), example).run_decompositions({})
print(exported.graph_module.code.strip())
print(exported.graph_signature)

# %%
# ``torch.compile`` does the same, and Inductor turns the functional form back
# into an in-place call when that is safe. What matters to the caller: after a
# compiled call, the residual they passed holds the update, and code that reads
# it after the operator sees the new value. Two calls in a row, compiled and
# eager side by side:
torch._dynamo.reset()


def block_boundary(x, residual, weight, backend):
    out, _ = opguide.fused_add_rms_norm_(x, residual, weight, backend=backend)
    return out * 2, residual + 0  # reads the residual after the update


for backend in ops:
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
# In place, and autograd
# ----------------------
# ``(a!)`` tells ``torch.compile`` which input a kernel writes. Eager autograd
# learns it another way: every tensor carries a *version counter*, which each
# in-place write increments; a tensor that autograd saves for a backward
# remembers the version it saw, and ``backward()`` refuses to use it if the
# version moved. A ``TORCH_LIBRARY`` kernel writes through a raw pointer, so the
# dispatcher's call of the CPU or CUDA kernel increments nothing. Below, the
# operator is entered under the guard that skips its version-counter kernel
# (``torch._C._AutoDispatchBelowADInplaceOrView``, a private switch used here
# only to show the operator without that kernel). Autograd saves ``residual``
# to differentiate ``residual * a``; the operator then overwrites it:
def gradient_after_overwrite(skip_version_kernel: bool) -> torch.Tensor:
    torch.manual_seed(0)
    a = torch.randn(4, 64, requires_grad=True)
    residual = torch.randn(4, 64)
    before = residual.clone()
    saved = residual * a  # d(saved)/da = residual, as it is now
    op = torch.ops.opguide.fused_add_rms_norm_.default
    if skip_version_kernel:
        with torch._C._AutoDispatchBelowADInplaceOrView():
            op(torch.randn(4, 64), residual, None, 1e-6, None)
    else:
        op(torch.randn(4, 64), residual, None, 1e-6, None)
    print("residual version:", residual._version)
    saved.sum().backward()
    return a.grad, before, residual


grad, before, after = gradient_after_overwrite(skip_version_kernel=True)
print("a.grad equals the residual autograd saved:   ", torch.equal(grad, before))
print("a.grad equals the overwritten residual:      ", torch.equal(grad, after))
assert torch.equal(grad, after) and not torch.equal(grad, before)

# %%
# No error, and a gradient computed from values that are no longer the ones
# the forward used. With the operator's version-counter kernel, the same code
# stops at ``backward()``:
try:
    gradient_after_overwrite(skip_version_kernel=False)
    raise AssertionError("backward ran through an overwritten tensor")
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", 88))

# %%
# The two kernels that keep the contract are C++, registered once for every
# device. A call enters the dispatcher at the highest key its tensors carry:
# ``Autograd``, then ``ADInplaceOrView``, then ``CPU`` or ``CUDA``. The
# ``ADInplaceOrView`` kernel calls on below its own key and then increments the
# version of what was written (PyTorch's own in-place operators have the same
# kernel, generated). The ``Autograd`` kernel decides what an input that
# requires grad gets: this operator has no backward, so with grad mode on it is
# refused before anything is written, and the message names the differentiable
# way to compute the same thing. A leaf that requires grad is refused in
# PyTorch's own words. Under :func:`torch.no_grad` (an optimizer's update) every
# input is accepted, as ``add_`` accepts it:
#
# .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_autograd.cpp
#    :language: cpp
#    :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_autograd.cpp
for name in ("x", "residual"):
    args = dict(x=torch.randn(2, 8), residual=torch.randn(2, 8), weight=torch.ones(8))
    args[name].requires_grad_()
    try:
        opguide.fused_add_rms_norm_(**args)
        raise AssertionError(f"{name} requires grad and was accepted")
    except RuntimeError as error:
        print(textwrap.fill(f"{name} requires grad -> RuntimeError: {error}", 88))
    with torch.no_grad():
        opguide.fused_add_rms_norm_(**args)
    print(f"{name} requires grad, under torch.no_grad(): accepted")


# %%
# What ``custom_op`` does for you
# -------------------------------
# A Python :func:`torch.library.custom_op` with ``mutates_args`` registers the
# ``ADInplaceOrView`` kernel itself: the Triton operator's ``residual`` gets a
# new version with no code of ours. Two things it does not do.
# :func:`torch.library.register_autograd` refuses an operator that mutates, and
# the body cannot refuse inputs in its place: it runs below autograd, with grad
# mode off whether or not the caller trained, and under ``torch.compile`` it
# receives the compiled graph's tensors, which require no grad. A probe that
# prints what the body sees:
@torch.library.custom_op("opguide_demo::add_", mutates_args=("y",))
def add_(x: torch.Tensor, y: torch.Tensor) -> None:
    print(f"    body sees: grad mode {torch.is_grad_enabled()}, x.requires_grad {x.requires_grad}")
    y.add_(x)


@add_.register_fake
def _(x, y):
    return None


def add_then_double(x, y):
    add_(x, y)
    return y * 2


if "triton" in ops:
    residual = torch.randn(2, 8)
    ops["triton"](torch.randn(2, 8), residual, None, 1e-6, None)
    print("the Triton operator, called directly: residual version", residual._version)
x, y = torch.randn(3, requires_grad=True), torch.randn(3)
print("eager call, grad mode on:")
add_(x, y)
print("eager call under torch.no_grad():")
with torch.no_grad():
    add_(x, y)
print("compiled call:")
torch.compile(add_then_double, fullgraph=True)(x.detach(), y)
try:
    torch.library.register_autograd("opguide_demo::add_", lambda ctx, grad: (grad, grad))
except RuntimeError as error:
    print(textwrap.fill("register_autograd: " + str(error).split(" with schema")[0], 88))

# %%
# So the Triton operator's refusal lives in :func:`opguide.fused_add_rms_norm_`,
# the function users call, where grad mode and ``requires_grad`` are those of
# the caller (``torch.compile`` traces that check as well):
#
# .. literalinclude:: /../opguide/fused_add_rms_norm.py
#    :language: python
#    :start-after: # [refuse-grad]
#    :end-before: # [refuse-grad-end]
#
# ``opcheck`` does not catch any of this
# --------------------------------------
# :func:`torch.library.opcheck` checks the schema, the fake kernel and the
# tracing, not the version counter. An operator defined with ``(a!)`` and a
# kernel that writes its input, and nothing else, passes every one of its tests:
demo = torch.library.Library("opguide_demo", "FRAGMENT")
demo.define("add_one_(Tensor(a!) x) -> ()")


def add_one_kernel(x: torch.Tensor) -> None:
    # .data has a version counter of its own: the write reaches x's memory
    # and leaves x's counter alone, as a C++ kernel's raw pointer does.
    x.data.add_(1)


demo.impl("add_one_", add_one_kernel, "CPU")
t = torch.randn(8)
result = torch.library.opcheck(torch.ops.opguide_demo.add_one_.default, (t,))
print(textwrap.fill("opcheck: " + ", ".join(f"{k} {v}" for k, v in result.items()), 88))
before = t.clone()
torch.ops.opguide_demo.add_one_.default(t)
print("written:", not torch.equal(t, before), "| version after the write:", t._version)

# %%
# The test that does is ``tests/test_inplace_contract.py`` (shown whole at the
# end of this page). It finds every operator of the ``opguide`` namespace whose
# schema writes an argument, so a new one without a case fails; for each, on
# every backend and device, it checks the version bump, the saved-tensor error
# above, the refusal of each input that requires grad, and that a
# ``torch.no_grad()`` call is accepted. Its last test runs those checks on the
# ``add_one_`` operator above and expects each to fail.

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
        print(f"{type(err).__name__}: {err}")

# %%
# Index inputs and value checks
# -----------------------------
# An operator that takes an index tensor gets two kinds of input to check:
# its metadata (dtype, shape, device), which a tracer and a fake kernel see,
# and its values (is each index in range?), which only the kernel sees. A
# small demo library shows where each check goes. It is built on its own from
# ``csrc/index_inputs/gather_rows.cpp`` (not part of ``opguide._C``) and
# defines two operators in the namespace ``opguide_index``:
# ``gather_rows(table, index)`` returns ``table[index]``, the rows of a 2-D
# ``table`` picked by an int64 ``index`` of any shape (what an embedding
# lookup does), and ``unique_indices(index)`` returns the distinct values of
# an index, sorted.
#
# .. dropdown:: csrc/index_inputs/gather_rows.cpp
#
#    .. literalinclude:: /../csrc/index_inputs/gather_rows.cpp
#       :language: cpp
#       :caption: csrc/index_inputs/gather_rows.cpp
import subprocess
import sys
import time

from torch.utils.cpp_extension import load

from guidekit.compile_checks import source_root

ROOT = source_root()  # the opguide source tree, wherever this script runs from
index_build = ROOT / "build" / "jit" / "opguide_index"
index_build.mkdir(parents=True, exist_ok=True)
start = time.perf_counter()
load(
    name="opguide_index",
    sources=[str(ROOT / "csrc" / "index_inputs" / "gather_rows.cpp")],
    extra_cflags=["-O2"],
    build_directory=str(index_build),
    is_python_module=False,
)
print(f"built and loaded opguide_index in {time.perf_counter() - start:.1f} s")
index_ops = torch.ops.opguide_index

# Some builds of torch end the process with a signal, not an error, when an
# extension built by cpp_extension.load throws a C++ exception. A child
# process throws once first; where it dies, the cells below that raise from
# the kernel say so and skip.
throw_once = (
    f"import torch; torch.ops.load_library({str(next(index_build.glob('opguide_index*.so')))!r}); "
    "torch.ops.opguide_index.gather_rows(torch.zeros(1, 1), torch.tensor([1]))"
)
child = subprocess.run([sys.executable, "-c", throw_once], capture_output=True, text=True)
KERNEL_ERRORS = child.returncode == 1 and "IndexError" in child.stderr
SKIP_KERNEL_ERRORS = (
    f"skipped: a C++ exception from this library ends a process here with code "
    f"{child.returncode}, not with an IndexError"
)
print("a kernel's C++ exception reaches Python here:", KERNEL_ERRORS)
print(index_ops.gather_rows.default._schema)
print(index_ops.unique_indices.default._schema)

# %%
# The kernel checks every index value with ``TORCH_CHECK_INDEX``, which
# Python sees as :class:`IndexError`; the message names the value, where it
# is in the index, and the valid range:
table = torch.arange(15.0).reshape(5, 3)
index = torch.tensor([[0, 4], [2, 2]])
rows = index_ops.gather_rows(table, index)
assert torch.equal(rows, table[index])
print("gather_rows(table, index) == table[index], shape", tuple(rows.shape))
for bad_index in (torch.tensor([1, 5]), torch.tensor([[0, 1], [-1, 2]])):
    if not KERNEL_ERRORS:
        print(SKIP_KERNEL_ERRORS)
        break
    try:
        index_ops.gather_rows(table, bad_index)
    except IndexError as err:
        print("IndexError:", err)


# %%
# The metadata checks go in one Python function that the wrapper users call
# and the fake kernel both run. Under ``torch.compile`` they run once, while
# tracing, on fake tensors whose dtype, shape and device are known; the
# compiled graph holds no check. The kernel repeats them in C++ for callers
# that use ``torch.ops`` directly.
def check_gather_rows_args(table: torch.Tensor, index: torch.Tensor) -> None:
    """Checks what is known without reading values: dtype, dimensions, device.

    Raises:
        TypeError: if ``index`` is not int64.
        ValueError: if ``table`` is not 2-D, or the two are on different devices.
    """
    if table.dim() != 2:
        raise ValueError(f"gather_rows: table must be 2-D (rows, columns), got {table.dim()}-D")
    if index.dtype != torch.int64:
        raise TypeError(f"gather_rows: index must be int64, got {index.dtype}")
    if index.device != table.device:
        raise ValueError(
            f"gather_rows: index must be on {table.device} like table, got {index.device}"
        )


@torch.library.register_fake("opguide_index::gather_rows")
def _(table, index):
    check_gather_rows_args(table, index)
    return table.new_empty((*index.shape, table.shape[1]))


def gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]``: the rows of a 2-D ``table`` picked by an int64 ``index``.

    Raises:
        TypeError, ValueError: from :func:`check_gather_rows_args`.
        IndexError: from the kernel, for an index value outside ``[0, table.shape[0])``.
    """
    check_gather_rows_args(table, index)
    return index_ops.gather_rows(table, index)


for args in [(table, index.int()), (table.flatten(), index), (table, index.to("meta"))]:
    try:
        gather_rows(*args)
    except (TypeError, ValueError) as err:
        print(f"{type(err).__name__}: {err}")
try:
    if not KERNEL_ERRORS:
        raise TypeError(SKIP_KERNEL_ERRORS)
    index_ops.gather_rows(table, index.int())
except TypeError as err:
    print(f"the kernel, called directly: TypeError: {err}")


def graphs_of(fn, *args, fullgraph: bool = True, capture: bool = False) -> list[list[str]]:
    """The operators of each graph ``torch.compile`` makes of ``fn(*args)``.

    ``capture`` sets Dynamo's ``capture_dynamic_output_shape_ops`` for the compile.
    """
    graphs = []

    def record(graph_module, example_inputs):
        nodes = [n for n in graph_module.graph.nodes if n.op in ("call_function", "call_method")]
        graphs.append([str(getattr(n.target, "__name__", n.target)) for n in nodes])
        return graph_module.forward

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=capture):
        torch.compile(fn, fullgraph=fullgraph, backend=record)(*args)
    return graphs


gather_rows_graphs = graphs_of(gather_rows, table, index)
print("graphs of gather_rows, compiled:", gather_rows_graphs)
assert gather_rows_graphs == [["gather_rows"]]


# %%
# A value check in Python, compiled
# ---------------------------------
# A check of the values in the wrapper works in eager mode. The version below
# raises an :class:`IndexError` of its own before calling the kernel:
def check_index_values(table: torch.Tensor, index: torch.Tensor) -> None:
    """Raises IndexError if a value of ``index`` is outside ``[0, table.shape[0])``."""
    if ((index < 0) | (index >= table.shape[0])).any():  # reads the values
        raise IndexError(f"gather_rows: index values must be in [0, {table.shape[0]})")


def gather_rows_checked_in_python(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """:func:`gather_rows` with the index values checked in Python (the pattern to avoid)."""
    check_gather_rows_args(table, index)
    check_index_values(table, index)
    return index_ops.gather_rows(table, index)


try:
    gather_rows_checked_in_python(table, torch.tensor([1, 5]))
except IndexError as err:
    print("eager, check in Python: IndexError:", err)

# %%
# Under ``torch.compile(fullgraph=True)`` the ``if`` needs a value that exists
# only when the graph runs, so tracing fails. The wrapper that leaves the
# value check to the kernel compiles, and its compiled form raises the
# kernel's :class:`IndexError` at run time:
compile_results = {}
for fn in (gather_rows_checked_in_python, gather_rows):
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)
    try:
        good = compiled(table, index)
        assert torch.equal(good, table[index])
        if not KERNEL_ERRORS:
            print(f"{fn.__name__}: compiled and ran; the out-of-range call {SKIP_KERNEL_ERRORS}")
            continue
        compiled(table, torch.tensor([[0, 1], [2, 7]]))
    except Exception as err:
        compile_results[fn.__name__] = type(err)
        name = f"{type(err).__module__}.{type(err).__name__}"
        print(f"{fn.__name__}: {name}: {str(err).splitlines()[0]}")
assert compile_results.get("gather_rows", IndexError) is IndexError
assert compile_results["gather_rows_checked_in_python"] is not IndexError
# %%
# Without ``fullgraph=True``, Dynamo splits the function at the ``if`` (a
# graph break): every call runs the comparison in one graph, reads the result
# on the host, and enters a second graph for the kernel:
python_check_graphs = graphs_of(gather_rows_checked_in_python, table, index, fullgraph=False)
print("graphs:", python_check_graphs)
assert len(python_check_graphs) == 2

# %%
# A value check in Python, on a GPU
# ---------------------------------
# Reading ``bool(tensor)`` (or ``.item()``) of a CUDA tensor copies the value
# to the host, so the host waits for every kernel queued before it. The
# demo library has no CUDA kernel, so the timing below uses
# :func:`torch.nn.functional.embedding`, the same gather, which checks its
# indices on the device. ``torch.cuda.set_sync_debug_mode("error")`` turns
# such a wait into an error, which finds them in a program (the mode is a
# prototype and does not detect every synchronizing operation).
if torch.cuda.is_available():
    gpu_table = torch.randn(100_000, 256, device="cuda")
    gpu_index = torch.randint(0, 100_000, (4096,), device="cuda")

    def embedding_checked_in_python(table, index):
        check_index_values(table, index)
        return torch.nn.functional.embedding(index, table)

    def embedding_unchecked(table, index):
        return torch.nn.functional.embedding(index, table)

    def microseconds_per_call(fn, calls=500):
        """Host time per call of ``fn``, with the GPU's queue drained before and after."""
        for _ in range(20):
            fn(gpu_table, gpu_index)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(gpu_table, gpu_index)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / calls * 1e6

    print(torch.cuda.get_device_name(), "| table 100000 x 256 float32, 4096 indices")
    unchecked_us = microseconds_per_call(embedding_unchecked)
    checked_us = microseconds_per_call(embedding_checked_in_python)
    print(f"without the Python check: {unchecked_us:.1f} us per call")
    ratio = checked_us / unchecked_us
    print(f"with the Python check:    {checked_us:.1f} us per call ({ratio:.2f}x)")

    # The mode warns that it is a prototype that does not detect every synchronizing call.
    warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype")
    torch.cuda.set_sync_debug_mode("error")
    try:
        embedding_unchecked(gpu_table, gpu_index)
        print("sync debug mode 'error', without the check: no error")
        try:
            embedding_checked_in_python(gpu_table, gpu_index)
        except RuntimeError as err:
            first_line = str(err).splitlines()[0]
            print("sync debug mode 'error', with the check: RuntimeError:", first_line)
    finally:
        torch.cuda.set_sync_debug_mode("default")
else:
    print(
        "skipped: no CUDA device here (torch.cuda.is_available() is False). The cost is the"
        " host waiting for the GPU's queue, and the values of a CPU tensor are already in"
        " host memory: nothing waits, so there is nothing to time or to flag."
    )


# %%
# An output whose size depends on the values
# ------------------------------------------
# ``unique_indices`` returns as many values as the index holds distinct ones.
# Its fake kernel cannot know that number: it asks
# :func:`torch.library.get_ctx` for a new symbolic size, an unbacked
# ``SymInt`` (``u0``) whose value is known only when the graph runs. Later
# operators get it as a shape like any other, here ``gather_rows``:
@torch.library.register_fake("opguide_index::unique_indices")
def _(index):
    if index.dtype != torch.int64:
        raise TypeError(f"unique_indices: index must be int64, got {index.dtype}")
    count = torch.library.get_ctx().new_dynamic_size()  # min=0, no max: any count
    return index.new_empty((count,))


def rows_used(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The rows of ``table`` that ``index`` refers to, once each, in row order."""
    return gather_rows(table, index_ops.unique_indices(index))


def graph_shapes(graph_module: torch.fx.GraphModule, example_inputs) -> object:
    """A torch.compile backend that prints each operator's output shape and runs the graph."""
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and "opguide_index" in str(node.target):
            print(f"{node.target}: shape {tuple(node.meta['example_value'].shape)}")
    return graph_module.forward


index = torch.tensor([[0, 4], [2, 4], [4, 0]])
expected = table[torch.unique(index)]
torch._dynamo.reset()
traced = torch.compile(rows_used, fullgraph=True, backend=graph_shapes)(table, index)
torch._dynamo.reset()
compiled = torch.compile(rows_used, fullgraph=True)(table, index)
assert torch.equal(traced, expected) and torch.equal(compiled, expected)
print("compiled == eager == table[torch.unique(index)], shape", tuple(expected.shape))


# %%
# The compile above has ``fullgraph=True``, which lets Dynamo trace operators
# whose output shape depends on the data. Without it, that takes the
# configuration flag ``capture_dynamic_output_shape_ops``; with the flag off,
# the graph breaks at ``unique_indices``, which then runs eagerly. The
# operators in each graph, for each setting (``sym_size``, ``ge`` and
# ``_assert_scalar`` check at run time that ``u0 >= 0``, the fake kernel's
# ``min``):
capture_default = torch._dynamo.config.capture_dynamic_output_shape_ops
print("capture_dynamic_output_shape_ops, by default:", capture_default)
for fullgraph, capture in [(True, False), (False, False), (False, True)]:
    graphs = graphs_of(rows_used, table, index, fullgraph=fullgraph, capture=capture)
    print(f"fullgraph={fullgraph!s:5} capture_dynamic_output_shape_ops={capture!s:5} -> {graphs}")
    one_graph = len(graphs) == 1 and "unique_indices" in graphs[0]
    assert one_graph == (fullgraph or capture), graphs


# %%
# Trade-offs, again
# -----------------
# The same operator three times makes the comparison of :doc:`step 9 <09_triton_kernel>` concrete:
#
# * **Effort**: the Triton kernel is about twenty lines, the dtype combinations
#   come for free (the kernel is compiled per dtype on first use), and a
#   masked load replaces the vector/scalar split. The C++ and CUDA versions
#   spell out the dispatch over three dtypes, the alignment check and the
#   block reduction.
# * **Portability**: the Triton kernel runs on AMD GPUs through Triton's ROCm
#   backend as it is. The CUDA kernel needs hipify plus the shim in
#   ``csrc/common/platform.cuh`` (wavefront width, shuffles without a lane mask).
# * **Limits**: forward rows longer than 16384 elements (backward rows longer
#   than 8192) are split over several Triton programs, one segment each, and
#   rows of more segments than the GPU has SMs take the chunked kernels,
#   which read each row twice (``opguide/triton/launch.py`` decides); the C++
#   and CUDA kernels take any row length. Float64 is C++/CUDA only.
# * **Speed**: measured on a GPU by the performance chapter; on CPU the Triton
#   route is the interpreter, a correctness tool.

# %%
# The files of this step, whole
# -----------------------------
# The page above showed parts of these files; here each one is whole, as it
# is compiled and run.
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
#
# .. dropdown:: tests/test_inplace_contract.py
#
#    .. literalinclude:: /../tests/test_inplace_contract.py
#       :language: python
#       :caption: tests/test_inplace_contract.py
