r"""
Step 10.2: The in-place contract, and index inputs
==================================================

Two things that an operator's schema does not settle alone. An operator that
writes an input, like ``opguide::fused_add_rms_norm_`` of :doc:`step 10
<10_patterns>`, must also tell eager autograd that it did. And an operator
that takes an index must check values that only its kernel sees.

In this step you will learn:

* what eager autograd needs from an operator that writes an input (the
  version counter, the ``ADInplaceOrView`` and ``Autograd`` kernels), what
  ``custom_op`` does for you, and the test that checks it, since ``opcheck``
  does not;
* where the checks of an index input go: metadata in the wrapper and the
  fake kernel, values (an index out of range) in the kernel;
* what a value check in Python costs: a failed ``fullgraph=True`` compile
  and a graph break, both shown, and on a GPU a wait for the device,
  described (and timed only where the page runs on a GPU);
* how to write a fake kernel for an output whose size depends on the data.
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
import textwrap
import warnings

import torch

import opguide
from opguide import triton as triton_ops

# sphinx_gallery_thumbnail_path = "_thumbnails/10.2.png"
# The operators that write an input: the C++ one, and the Triton one where
# its kernels run in this process's interpreter.
ops = {"cpp": torch.ops.opguide.fused_add_rms_norm_.default}
if triton_ops.INTERPRET:
    ops["triton"] = torch.ops.opguide.fused_add_rms_norm_triton_.default


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
# .. dropdown:: csrc/fused_add_rms_norm/fused_add_rms_norm_autograd.cpp
#
#    .. literalinclude:: /../csrc/fused_add_rms_norm/fused_add_rms_norm_autograd.cpp
#       :language: cpp
#       :caption: csrc/fused_add_rms_norm/fused_add_rms_norm_autograd.cpp
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
# ``ADInplaceOrView`` kernel itself: each written argument gets a new version
# with no code of the operator's. (opguide's Triton operator is registered
# with ``Library.define`` and ``impl`` instead, and bumps ``residual`` itself
# with ``torch.autograd.graph.increment_version``.) Two things ``custom_op``
# does not do.
# :func:`torch.library.register_autograd` refuses an operator that mutates, and
# the body is a poor place to refuse inputs in its stead: it runs below
# autograd. A probe prints what the body sees in three calls with the same
# ``x``, which requires grad: an eager call with grad mode on (training), one
# under ``torch.no_grad()``, and a compiled one:
body_saw = []


@torch.library.custom_op("opguide_demo::add_", mutates_args=("y",))
def add_(x: torch.Tensor, y: torch.Tensor) -> None:
    grad_mode = torch.is_grad_enabled()
    body_saw.append((grad_mode, x.requires_grad))
    print(f"    body sees: grad mode {grad_mode}, x.requires_grad {x.requires_grad}")
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
torch.compile(add_then_double, fullgraph=True)(x, y)
training, no_grad_call = body_saw[0], body_saw[1]
if training == no_grad_call:
    same = (
        f"The training call and the no_grad one look the same to the body (grad mode "
        f"{training[0]}, x.requires_grad {training[1]}): it cannot tell them apart."
    )
    print(textwrap.fill(same, 88))
else:
    print("The body sees the training call and the no_grad one differently.")
modes = sorted({mode for mode, _ in body_saw})
print(f"grad mode inside the body, over all {len(body_saw)} calls: {modes}")
try:
    torch.library.register_autograd("opguide_demo::add_", lambda ctx, g: (g, g))
except RuntimeError as error:
    refusal = str(error).split(" with schema")[0]
    print(textwrap.fill(f"register_autograd: {refusal}", 88))

# %%
# The Triton operator's refusal lives in :func:`opguide.fused_add_rms_norm_`,
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
# ``torch.no_grad()`` call is accepted. Its last test runs three of those
# checks (all but the ``torch.no_grad()`` one) on the ``add_one_`` operator
# above and expects each to fail.

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

from guidekit import model_step
from guidekit.buildinfo import load_line
from guidekit.compile_checks import source_root

ROOT = source_root()  # the opguide source tree, wherever this script runs from
index_build = ROOT / "build" / "jit" / "opguide_index"
index_build.mkdir(parents=True, exist_ok=True)
start = time.time()
index_library = load(
    name="opguide_index",
    sources=[str(ROOT / "csrc" / "index_inputs" / "gather_rows.cpp")],
    extra_cflags=["-O2"],
    build_directory=str(index_build),
    is_python_module=False,
)
print(load_line(index_library, since=start))
index_ops = torch.ops.opguide_index

# On some machines a C++ exception thrown from this library, built by
# cpp_extension.load, ends the process with a signal instead of reaching
# Python, while opguide's own library's exceptions (built by setup.py) reach
# it on the same machine. This page does not look for the difference between
# the two builds that causes it; it tests for the symptom instead. A child
# process throws once first; where it does not end with an IndexError, the
# cells below that raise from the kernel skip, and say so with the child's
# return code (a negative code is the signal that ended it).
throw_once = (
    "import torch; "
    f"torch.ops.load_library({str(next(index_build.glob('opguide_index*.so')))!r}); "
    "torch.ops.opguide_index.gather_rows(torch.zeros(1, 1), torch.tensor([1]))"
)
child = subprocess.run(
    [sys.executable, "-c", throw_once],
    capture_output=True,
    text=True,
)
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
# Python sees as :class:`IndexError` where this library's C++ exceptions
# reach Python (the line "a kernel's C++ exception reaches Python here"
# above says whether they do; where they do not, the cells that raise one
# skip); the message names the value, where it is
# in the index, and the valid range:
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
        print(textwrap.fill(f"IndexError: {err}", 88, subsequent_indent="    "))


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
        got = f"got {table.dim()}-D"
        raise ValueError(f"gather_rows: table must be 2-D (rows, columns), {got}")
    if index.dtype != torch.int64:
        raise TypeError(f"gather_rows: index must be int64, got {index.dtype}")
    if index.device != table.device:
        where = f"on {table.device} like table, got {index.device}"
        raise ValueError(f"gather_rows: index must be {where}")


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
        print(textwrap.fill(f"{type(err).__name__}: {err}", 88, subsequent_indent=" "))
if not KERNEL_ERRORS:
    print(f"the kernel, called directly: {SKIP_KERNEL_ERRORS}")
else:
    try:
        index_ops.gather_rows(table, index.int())
    except TypeError as err:
        print(f"the kernel, called directly: TypeError: {err}")


def graphs_of(
    fn,
    *args,
    fullgraph: bool = True,
    capture: bool = False,
) -> list[list[str]]:
    """The operators of each graph ``torch.compile`` makes of ``fn(*args)``.

    ``capture`` sets Dynamo's ``capture_dynamic_output_shape_ops`` for the compile.
    """
    graphs = []

    def record(graph_module, example_inputs):
        calls = ("call_function", "call_method")
        nodes = [n for n in graph_module.graph.nodes if n.op in calls]
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


def gather_rows_checked_in_python(
    table: torch.Tensor,
    index: torch.Tensor,
) -> torch.Tensor:
    """:func:`gather_rows`, index values checked in Python (the pattern to avoid)."""
    check_gather_rows_args(table, index)
    check_index_values(table, index)
    return index_ops.gather_rows(table, index)


try:
    gather_rows_checked_in_python(table, torch.tensor([1, 5]))
except IndexError as err:
    message = f"eager, check in Python: IndexError: {err}"
    print(textwrap.fill(message, 88, subsequent_indent="    "))

# %%
# Under ``torch.compile(fullgraph=True)`` the ``if`` needs a value that exists
# only when the graph runs, so tracing fails. The wrapper that leaves the
# value check to the kernel compiles, and its compiled form raises the
# kernel's :class:`IndexError` at run time (where the line "a kernel's C++
# exception reaches Python here" above says True):
compile_results = {}
for fn in (gather_rows_checked_in_python, gather_rows):
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)
    try:
        good = compiled(table, index)
        assert torch.equal(good, table[index])
        if not KERNEL_ERRORS:
            skip = SKIP_KERNEL_ERRORS
            print(f"{fn.__name__}: compiled and ran; the out-of-range call {skip}")
            continue
        compiled(table, torch.tensor([[0, 1], [2, 7]]))
    except Exception as err:
        compile_results[fn.__name__] = type(err)
        name = f"{type(err).__module__}.{type(err).__name__}"
        first = str(err).splitlines()[0]
        message = f"{fn.__name__}: {name}: {first}"
        print(textwrap.fill(message, 88, subsequent_indent="    "))
assert compile_results.get("gather_rows", IndexError) is IndexError
assert compile_results["gather_rows_checked_in_python"] is not IndexError
# %%
# Without ``fullgraph=True``, Dynamo splits the function at the ``if`` (a
# graph break): every call runs the comparison in one graph, reads the result
# on the host, and enters a second graph for the kernel:
python_check_graphs = graphs_of(
    gather_rows_checked_in_python,
    table,
    index,
    fullgraph=False,
)
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

    print(torch.cuda.get_device_name(), "| table 100000 x 256 float32, 4096 indices")
    # 15 rounds in turns, each 100 calls between two synchronizations.
    check_us = model_step.time_per_call(
        {
            "without the Python check": lambda: embedding_unchecked(gpu_table, gpu_index),
            "with the Python check": lambda: embedding_checked_in_python(gpu_table, gpu_index),
        },
        rounds=15,
        sync=torch.cuda.synchronize,
        reps=100,
    )
    for name, s in check_us.items():
        middle = f"middle half {s['q1']:.1f} to {s['q3']:.1f}"
        print(f"{name + ':':25} {s['median']:.1f} us per call, {middle}")
    print(
        textwrap.fill(
            model_step.versus(check_us, "with the Python check", "without the Python check"), 88
        )
    )
    _ = model_step.plot_per_call(check_us, "A value check in Python on GPU tensors (measured live)")

    # The mode warns that it is a prototype that misses some synchronizing calls.
    prototype = "Synchronization debug mode is a prototype"
    warnings.filterwarnings("ignore", message=prototype)
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
        "skipped: no CUDA device here (torch.cuda.is_available() is False), and no"
        "\nGPU run of this cell is recorded: its cost is not measured on this page."
        "\nThe values of a CPU tensor are in host memory: nothing waits, so there is"
        "\nnothing to time or to flag here."
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
    """A torch.compile backend: prints each operator's output shape, runs the graph."""
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
    flag = f"capture_dynamic_output_shape_ops={capture!s:5}"
    setting = f"fullgraph={fullgraph!s:5} {flag}"
    print(setting, "->")
    indent = "    "
    lines = textwrap.wrap(str(graphs), 84)
    print("\n".join(indent + line for line in lines))
    one_graph = len(graphs) == 1 and "unique_indices" in graphs[0]
    assert one_graph == (fullgraph or capture), graphs


# %%
# The files of this step, whole
# -----------------------------
# The test that checks the in-place contract of every operator that writes an
# input, whole, as it is run:
#
# .. dropdown:: tests/test_inplace_contract.py
#
#    .. literalinclude:: /../tests/test_inplace_contract.py
#       :language: python
#       :caption: tests/test_inplace_contract.py
