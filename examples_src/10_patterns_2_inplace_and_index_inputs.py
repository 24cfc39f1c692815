r"""
Step 10.2: The in-place contract, and index inputs
==================================================

Two things a schema does not settle alone:

* an operator that writes an input, like :doc:`step 10 <10_patterns>`'s, must
  tell eager autograd (the version counter, the ``ADInplaceOrView`` and
  ``Autograd`` kernels); what ``custom_op`` does for you, and the test that
  checks it, since ``opcheck`` does not;
* an operator that takes an index checks its metadata in the wrapper and the
  fake kernel, and its values in the kernel: a value check in Python breaks
  ``fullgraph=True`` and, on a GPU, makes the host wait;
* a fake kernel for an output whose size depends on the data.
"""

# %%
# Without a GPU the Triton kernels run in Triton's interpreter, chosen
# before anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# In place, and autograd
# ----------------------
# Eager autograd learns of a write from the tensor's *version counter*: a
# saved tensor remembers its version, and ``backward()`` refuses it if the
# version moved. A kernel that writes through a raw pointer bumps nothing.
# Below, the operator runs without its version-counter kernel (the private
# guard ``torch._C._AutoDispatchBelowADInplaceOrView``) and overwrites a
# ``residual`` that autograd saved:
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
# No error, and a wrong gradient. With the version-counter kernel,
# ``backward()`` stops:
try:
    gradient_after_overwrite(skip_version_kernel=False)
    raise AssertionError("backward ran through an overwritten tensor")
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", 88))

# %%
# Two C++ kernels keep the contract for every device. The
# ``ADInplaceOrView`` kernel calls the device kernel, then bumps the version
# of what was written, as PyTorch's in-place operators do. The ``Autograd``
# kernel refuses an input that requires grad, since the operator has no
# backward, and names the differentiable way; under :func:`torch.no_grad` it
# accepts every input, as ``add_`` does:
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
# A :func:`torch.library.custom_op` with ``mutates_args`` registers the
# ``ADInplaceOrView`` kernel itself (opguide's Triton operator, registered
# with ``Library.define``, bumps ``residual`` with
# ``torch.autograd.graph.increment_version``). But ``register_autograd``
# refuses a mutating operator, and the body, which runs below autograd, cannot
# refuse inputs in its stead. What the body sees of an ``x`` that requires
# grad, in training, under ``torch.no_grad()`` and compiled:
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
# So the Triton operator's refusal lives in the wrapper users call, where
# grad mode is the caller's:
#
# .. literalinclude:: /../opguide/fused_add_rms_norm.py
#    :language: python
#    :start-after: # [refuse-grad]
#    :end-before: # [refuse-grad-end]
#
# ``opcheck`` does not catch any of this
# --------------------------------------
# ``opcheck`` does not check the version counter: an operator with ``(a!)``
# and a kernel that writes its input, and nothing else, passes:
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
# ``tests/test_inplace_contract.py`` (whole at the end) does, for every
# operator whose schema writes an argument, on every backend and device: the
# version bump, the saved-tensor error, the refusals, the ``no_grad`` call;
# and it expects its checks to fail on ``add_one_`` above.

# %%
# Index inputs and value checks
# -----------------------------
# An index has metadata (dtype, shape, device), which a tracer sees, and
# values, which only the kernel sees. A demo library, built on its own,
# defines ``gather_rows(table, index)`` (``table[index]``, an embedding
# lookup) and ``unique_indices(index)`` (the distinct values, sorted):
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
# The kernel checks each value with ``TORCH_CHECK_INDEX``, an
# :class:`IndexError` in Python that names the value, its place and the range
# (where the line above says such exceptions reach Python; else these skip):
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
# The metadata checks: one function that the wrapper and the fake kernel
# run, once while tracing, so the compiled graph holds none. The kernel
# repeats them for callers of ``torch.ops``.
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
# A value check in the wrapper works in eager mode:
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
# Under ``fullgraph=True`` its ``if`` needs a value that exists only when the
# graph runs, so tracing fails; the wrapper that leaves values to the kernel
# compiles, and raises the kernel's :class:`IndexError` at run time:
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
# Without ``fullgraph=True`` the ``if`` is a graph break: two graphs, and the
# host reads the comparison between them:
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
# ``bool()`` of a CUDA tensor makes the host wait for every kernel queued
# before it. Timed with :func:`torch.nn.functional.embedding`, the same
# gather, which checks indices on the device;
# ``torch.cuda.set_sync_debug_mode("error")`` turns such waits into errors (a
# prototype that misses some).
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
# ``unique_indices``'s fake kernel cannot know its output's length: it asks
# :func:`torch.library.get_ctx` for an unbacked ``SymInt`` (``u0``), a shape
# known only when the graph runs, which ``gather_rows`` then takes:
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
# Without ``fullgraph=True`` it takes ``capture_dynamic_output_shape_ops``,
# or the graph breaks at ``unique_indices``. The graphs of each setting
# (``_assert_scalar`` checks ``u0 >= 0`` at run time):
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
#
# .. dropdown:: tests/test_inplace_contract.py
#
#    .. literalinclude:: /../tests/test_inplace_contract.py
#       :language: python
#       :caption: tests/test_inplace_contract.py
