r"""
Step 9: A Triton kernel as an operator
======================================

The C++ and CUDA kernels of the earlier steps are one way to give
``opguide.rms_norm`` a fast body. `Triton <https://triton-lang.org>`_ is
another: GPU kernels written in Python, over blocks of elements rather than
single threads, compiled at run time. This step writes RMSNorm (forward and
backward) in Triton, registers it so that ``torch.compile`` traces it like
any other operator, and lets users pick it with one keyword.

In this step you will learn:

* how to write a row-wise reduction kernel in Triton, and how its launch
  knobs are chosen;
* the two ways to register a Triton kernel: :func:`torch.library.custom_op`
  (opaque to the compiler) and :func:`torch.library.triton_op` with
  :func:`torch.library.wrap_triton` (transparent to Inductor), and the
  cheaper ``Library.define`` and ``impl`` that opguide uses;
* how users choose a backend: ``opguide.rms_norm(x, w, backend="triton")``;
* how to write the backward, with a two-stage reduction for ``grad_weight``;
* how the same kernels run on a machine without a GPU, in Triton's
  interpreter, and how fast they run on one (recorded).

Rows too long for one program are split over several:
:doc:`step 9.2 <09_triton_kernel_2_long_rows>` takes them. The code shown is
in ``opguide/triton/``: kernels by family (``forward.py``, ``backward.py``),
their knobs (``launch.py``), the operators (``ops.py``, ``autograd.py``).

The forward kernel
------------------
One program handles ``ROWS`` whole rows, loaded at once as a
``(ROWS, BLOCK_N)`` block: ``BLOCK_N`` is the row length rounded up to a power
of two, the mask (``cols < N``, ``rows < M``) covers the padding and the last
rows, and ``x`` is read from memory once. The sum of squares is a
``tl.sum`` along the rows (in float32):

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _rms_norm_forward_kernel

Its first lines, shared with the other kernels, are ``@triton.jit`` helpers,
which Triton inlines before it optimises (the first pass of `make_ttir
<https://github.com/triton-lang/triton/blob/main/third_party/nvidia/backend/compiler.py>`__):

.. literalinclude:: /../opguide/triton/prologue.py
   :language: python
   :caption: opguide/triton/prologue.py

``ROWS`` and ``num_warps`` are the fields of a frozen dataclass, which one
function per operator fills in: the forward's from the row length (and the
SM count for very long rows), the backward's also from the number of rows,
the dtype and shared memory. The rules come from ``tools/sweep_triton.py``:
for the forward, 2048 elements per program (one row, where longer) and 16 per
thread, 32 for rows longer than 4096 (in the interpreter, one row and one
warp a program). A tool that times another
configuration passes it as ``forced=``:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: Registers

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: forward_config

Why a rule and not :func:`triton.autotune`: the autotuner picks a kernel's
parameters only. The backward's number of programs also sizes a buffer
allocated before the launch and decides whether a second kernel runs
(below); a rule decides all of it, from a sweep made once.

custom_op or triton_op?
-----------------------
Both make the kernel an operator of the dispatcher with a schema, so
``torch.compile`` records a call to it instead of breaking the graph. They
differ in what the compiler can see:

* :func:`torch.library.custom_op`: the body is opaque. Inductor calls the
  Python function as it is, at run time. It works with any body (here, a
  kernel run by the interpreter), and it needs a fake kernel
  (``register_fake``) to describe its outputs.
* :func:`torch.library.triton_op`: the body is traced. Each launch wrapped in
  :func:`torch.library.wrap_triton` becomes a node of the graph, which
  Inductor compiles into its own code; its documentation says it "makes the
  implementation visible to these subsystems [``torch.compile`` and
  ``torch.export``], allowing them to optimize the triton kernel(s)". Its
  checks need compiled Triton kernels (a cell below tries them here).

Both wrap every eager call in Python layers of their own, which
:doc:`step 11.2 <11_performance_2_eager>` measures (``triton_op``'s on a
GPU). ``opguide`` takes a third
way, the one under both: ``torch.library.Library``'s ``define`` (the schema
inferred from the function, as ``custom_op`` infers it) and ``impl``, with a
body that launches the kernels directly. Under ``torch.compile`` each operator
is one opaque call (``compiled="kernel"``, the default; ``compiled="native"``
gives Inductor the plain-PyTorch form instead, see
:mod:`opguide.backends`). The same code serves the GPU and the interpreter:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :start-after: # [register-choice]
   :end-before: # [register-choice-end]

The forward operators, ``rms_norm_triton`` for inference and
``rms_norm_forward_triton`` for training (it also returns ``inv_rms``), are thin:
each calls a launch function, which takes the planner's configuration (or a
``forced=`` one) and launches the kernel it names:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_forward

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_triton

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_forward_triton

Every launch runs under a device guard. Triton launches on the *current*
GPU and requires every pointer argument to live there, so, as the CUDA
wrappers of :doc:`step 3 <03_cuda_kernel>` make the input's GPU current, the
Triton operators do (a section below shows what happens without it):

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: on_device_of

The operators register fake kernels, which ``torch.compile``, ``opcheck`` and
DTensor's shape propagation run instead of the body:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :start-after: # [fake-kernels]
   :end-before: # [fake-kernels-end]

Choosing the backend
--------------------
:func:`opguide.rms_norm` takes ``backend="auto" | "cpp" | "triton"``. A
keyword argument, rather than a global switch or a context manager, keeps the
choice visible at each call site, and ``torch.compile`` sees it as a constant.
``"auto"`` takes the compiled C++/CUDA kernel when the library has one for the
input's device, otherwise Triton:

.. literalinclude:: /../opguide/backends.py
   :language: python
   :pyobject: resolve_backend

Running without a GPU
---------------------
Triton compiles for GPUs. Its interpreter (``TRITON_INTERPRET=1``) runs the
same kernels with NumPy on CPU tensors, which is how this page and the test
suite check them on machines without one. Triton reads the variable when
``@triton.jit`` runs, for every kernel of the process, so it is the
program's choice, made before anything imports ``triton`` (this page's first
cell makes it; the test suite and the site set it for their processes).
``opguide`` only reads it: without it and without a GPU, the Triton
operators refuse CPU tensors and name the variable:

.. literalinclude:: /../opguide/triton/interpreter.py
   :language: python
   :caption: opguide/triton/interpreter.py
"""

# %%
# This page's first cell makes that choice:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# %%
# Which registration is in use here
# ---------------------------------
# ``register_op`` keeps one Python layer: the forward operators'
# ``register_autograd`` formula, a Python ``Autograd`` kernel run on every
# call (:doc:`step 8 <08_autograd>`; :doc:`step 11.2
# <11_performance_2_eager>` measures it).
import os
import time

import torch

import opguide
from guidekit.recorded.pages import lines_figure, ranges, recorded, say, select, show, versus
from opguide import rms_norm_reference
from opguide import triton as triton_ops

# sphinx_gallery_thumbnail_path = "_thumbnails/09.png"
# sphinx_gallery_parallel = False  # it times kernels on the CPU: runs alone
print("GPU visible:", torch.cuda.is_available())
print("TRITON_INTERPRET =", os.environ.get("TRITON_INTERPRET"))
register_op = triton_ops.ops.register_op
print("registered with:", register_op.__module__ + "." + register_op.__name__)
print(torch.ops.opguide.rms_norm_triton.default._schema)
print(torch.ops.opguide.rms_norm_forward_triton.default._schema)

device = "cuda" if torch.cuda.is_available() and not triton_ops.INTERPRET else "cpu"

# %%
# Checking the forward against the reference
# ------------------------------------------
# Random inputs, three dtypes, row lengths that are and are not powers of
# two (the mask covers the padding of the block). The Triton kernels take
# these three only: float64 needs ``backend="cpp"``.
# The tolerance of one rounding to each dtype (opguide's tests use the same table).
from opguide.testing import TOLERANCES as TOL  # noqa: E402

torch.manual_seed(0)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for shape in [(4, 7), (3, 1024), (2, 1500)]:
        x = torch.randn(shape, device=device).to(dtype)
        w = torch.randn(shape[-1], device=device).to(dtype)
        y = opguide.rms_norm(x, w, eps=1e-6, backend="triton")
        ref = rms_norm_reference(x, w, 1e-6)
        torch.testing.assert_close(y, ref, **TOL[dtype])
        err = (y.float() - ref.float()).abs().max().item()
        print(f"{str(dtype):15} {str(shape):10} max |error| = {err:.2e}")

# %%
# The backward kernel
# -------------------
# With ``x_hat = x * inv_rms`` and ``g = grad_y * weight``, the gradients are
# ``grad_x = inv_rms * (g - x_hat * mean(g * x_hat))`` per row, and
# ``grad_weight = sum over rows of grad_y * x_hat``. The second is a reduction *across*
# rows: each program sums the rows it owns into its own row of a small float32
# buffer, and a second kernel (``_grad_weight_sum_kernel``) adds up that buffer's rows
# in a fixed order and writes ``grad_weight`` in its dtype. No two programs write
# the same address, so no atomics are needed, and the result is the same on
# every run. A single row gets one program (programs never outnumber rows),
# which writes ``grad_weight`` itself; the second kernel is not launched.
# ``inv_rms`` comes from the forward.
#
# The programs, as many as fit on the GPU at once, loop over their rows with
# ``tl.range``, whose ``num_stages`` lets Triton load the next rows while it
# computes the current ones (``STAGES``). Short
# rows come ``ROWS`` at a time, so that each step of the loop has a few
# thousand elements to work on. The ``GDC`` flag turns on programmatic
# dependent launch (``pdl_prologue`` above;
# :doc:`step 11.4 <11_performance_4_tuning>` measures it for the CUDA kernels):
#
# .. literalinclude:: /../opguide/triton/backward.py
#    :language: python
#    :pyobject: _rms_norm_backward_kernel
#
# .. literalinclude:: /../opguide/triton/backward.py
#    :language: python
#    :pyobject: _grad_weight_sum_kernel
#
# ``launch.backward_config`` chooses the programs, ``ROWS`` and ``STAGES``
# (shown whole at the end of the page). The backward operator returns two
# tensors and takes the same arguments as the C++ one of :doc:`step 8
# <08_autograd>`, so either backend's backward serves either forward;
# :func:`torch.library.register_autograd` connects it to the
# forward, and ``rms_norm`` is what ``opguide.rms_norm(..., backend="triton")``
# runs:
#
# .. literalinclude:: /../opguide/triton/ops.py
#    :language: python
#    :pyobject: rms_norm_backward_triton
#
# .. literalinclude:: /../opguide/triton/autograd.py
#    :language: python
#    :caption: opguide/triton/autograd.py
#
# .. dropdown:: opguide/triton/__init__.py, the package, whose ``rms_norm`` picks the operator
#
#    .. literalinclude:: /../opguide/triton/__init__.py
#       :language: python
#       :caption: opguide/triton/__init__.py
#
# The gradients of the Triton operator against those that autograd computes
# through the reference (float32, so the comparison is tight):
schema = str(torch.ops.opguide.rms_norm_backward_triton.default._schema)
say(schema)
x = torch.randn(37, 96, device=device, requires_grad=True)
w = torch.randn(96, device=device, requires_grad=True)
grad = torch.randn(37, 96, device=device)
opguide.rms_norm(x, w, backend="triton").backward(grad)
grad_x, grad_weight = x.grad.clone(), w.grad.clone()
x.grad = w.grad = None
rms_norm_reference(x, w).backward(grad)
torch.testing.assert_close(grad_x, x.grad, atol=1e-4, rtol=1e-4)
torch.testing.assert_close(grad_weight, w.grad, atol=1e-4, rtol=1e-4)
print("max |grad_x - reference| =", (grad_x - x.grad).abs().max().item())
print("max |grad_weight - reference| =", (grad_weight - w.grad).abs().max().item())

# %%
# opcheck and torch.compile
# -------------------------
# :func:`torch.library.opcheck` tests the schema, the fake kernel, the
# autograd registration and tracing, for the forward (with inputs that require
# grad) and for the backward:
x = torch.randn(5, 24, device=device, requires_grad=True)
w = torch.randn(24, device=device, requires_grad=True)
g = torch.randn(5, 24, device=device)
_, inv_rms = torch.ops.opguide.rms_norm_forward_triton.default(x.detach(), w.detach(), 1e-6)
checks = {
    "rms_norm_triton": (x, w, 1e-6),
    "rms_norm_forward_triton": (x, w, 1e-6),
    "rms_norm_backward_triton": (g, x.detach(), w.detach(), inv_rms),
}
for name, args in checks.items():
    result = torch.library.opcheck(getattr(torch.ops.opguide, name).default, args)
    line = ", ".join(f"{test.removeprefix('test_')} {v}" for test, v in result.items())
    say(f"{name}: {line}")

# %%
# ``torch.compile(fullgraph=True)`` raises at the first graph break, so a
# result means there was none. The backward runs through the compiled graph
# too:
torch._dynamo.reset()


def norm_then_scale(x, w):
    # The Triton operator itself in the graph (compiled="kernel", the default).
    return opguide.rms_norm(x, w, backend="triton") * 2


compiled = torch.compile(norm_then_scale, fullgraph=True)
start = time.perf_counter()
y = compiled(x, w)
print(f"compiled and ran in {time.perf_counter() - start:.1f} s")
x_ref, w_ref = x.detach().requires_grad_(), w.detach().requires_grad_()
y_ref = rms_norm_reference(x_ref, w_ref) * 2
torch.testing.assert_close(y, y_ref)
x.grad = w.grad = None  # opcheck's calls above may have left gradients
y.sum().backward()
y_ref.sum().backward()
torch.testing.assert_close(x.grad, x_ref.grad)
torch.testing.assert_close(w.grad, w_ref.grad)
print("compiled forward and backward match the reference (y, grad_x, grad_weight)")
print("grad_weight[:4] =", w.grad[:4])

# %%
# What Inductor receives
# ----------------------
# A backend that records the graph AOTAutograd hands to Inductor shows what
# an operator defined with ``Library.define`` (or ``custom_op``) becomes: one
# call. A ``triton_op`` arrives as the kernel launch
# itself (`triton_kernel_wrap.py
# <https://github.com/pytorch/pytorch/blob/main/torch/_higher_order_ops/triton_kernel_wrap.py>`__).
from functorch.compile import make_boxed_func  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

seen = []


def record_graph(gm, example_inputs):
    seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
    return make_boxed_func(gm.forward)


torch._dynamo.reset()
with torch.no_grad():
    torch.compile(norm_then_scale, backend=aot_autograd(fw_compiler=record_graph))(x, w)
print("the graph Inductor would receive:", ", ".join(seen))
launches = [op for op in seen if "triton_kernel_wrapper" in op]
print(
    f"{len(launches)} kernel launch(es) in the graph: Inductor launches the kernel"
    if launches
    else "no kernel launch in the graph: Inductor calls the operator, an opaque box"
)

# %%
# A ``triton_op`` checked as step 7 checks an operator. Under Triton's
# interpreter its ``test_faketensor`` fails, so a build without a GPU shows
# only that failure; on a GPU it passes, and the next cell's graph holds the
# kernel launch (a ``triton_kernel_wrapper_functional`` node):
import logging  # noqa: E402
import warnings  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def double_kernel(
    x_ptr,  # [n] input
    y_ptr,  # [n] output
    n,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@torch.library.triton_op("opguide_demo::double", mutates_args=())
def double(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(t)
    grid = (triton.cdiv(t.numel(), 64),)
    torch.library.wrap_triton(double_kernel)[grid](t, out, t.numel(), BLOCK=64)
    return out


mode = "the interpreter" if triton_ops.INTERPRET else "compiled kernels"
fake_log = logging.getLogger("torch._subclasses.fake_tensor")  # logs the failure's stack
level = fake_log.level
fake_log.setLevel(logging.CRITICAL)
checked = False
try:
    with warnings.catch_warnings():  # the interpreter reads a fake tensor's pointer
        warnings.simplefilter("ignore")
        torch.library.opcheck(double, (torch.randn(100, device=device),))
    checked = True
    print(f"triton_op with {mode}: opcheck passed, so this build can show the path")
except Exception as err:  # noqa: BLE001  (the page prints what failed)
    first = str(err).splitlines()[0].replace(" (scroll up for stack trace)", "")
    print(f"triton_op with {mode}: opcheck failed, so this build cannot show the path:")
    say(first)
finally:
    fake_log.setLevel(level)

# %%
# Where it passes, the graph of ``double(t) + 1``, recorded as above:
if checked:
    seen.clear()
    torch._dynamo.reset()
    with torch.no_grad():
        compiled_double = torch.compile(
            lambda t: double(t) + 1, backend=aot_autograd(fw_compiler=record_graph)
        )
        compiled_double(torch.randn(100, device=device))
    print("the graph Inductor would receive:", ", ".join(seen))
    print(
        "the kernel launch is a node of the graph: Inductor launches it from its own code"
        if any("triton_kernel_wrapper" in op for op in seen)
        else "Surprising: no kernel launch in the graph, as if the triton_op were opaque"
    )
else:
    print("not shown: the triton_op did not pass its checks here (above)")

# %%
# The device guard at work
# ------------------------
# ``tests/test_two_gpus.py`` calls every operator, with each backend, on
# ``cuda:1`` while ``cuda:0`` is current: what a second pipeline stage or a
# model moved with ``.to("cuda:1")`` does. With two GPUs here it runs live;
# otherwise the page shows a run recorded on a two-GPU machine. A recorded run
# with the guard removed follows either way (``tools/record_two_gpus.py``):
import json
import subprocess
import sys

from guidekit.compile_checks import source_root
from guidekit.recorded.pages import say_stale

ROOT = source_root()  # the opguide source tree, wherever this script runs from
record = json.loads((ROOT / "docs" / "recorded" / "two_gpus.json").read_text())
machine = f"{record['gpus']} x {record['device']}, torch {record['torch']}"
say_stale("two_gpus.json")
if torch.cuda.device_count() >= 2:
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*pytest, "tests/test_two_gpus.py"], cwd=ROOT, capture_output=True, text=True
    )
    command = "python -m pytest -q tests/test_two_gpus.py"
    gpus = torch.cuda.device_count()
    print(f"{gpus} GPUs here. Run live, with the guard: $ {command}")
    print("   ", run.stdout.strip().splitlines()[-1])
    print(f"Recorded on {machine}, {record['date']}:")
    labels = ["without_guard"]  # the run made live above is the one with the guard
else:
    gpus = torch.cuda.device_count()
    print(f"{gpus} GPU(s) here. Recorded on {machine}, {record['date']}:")
    labels = ["with_guard", "without_guard"]
for label in labels:
    recorded_run = record[label]
    print(f"{label.replace('_', ' ')}: $ {recorded_run['command']}")
    print(f"    {recorded_run['summary']}")
    for test in recorded_run["failed"]:
        print("   ", test.removeprefix("tests/test_two_gpus.py::"))
    if recorded_run["first_error"]:
        print("   ", recorded_run["first_error"])
failed = record["without_guard"]["failed"]
print(
    f"without the guard (recorded): {len(failed)} failed, all Triton: "
    f"{all('triton' in t for t in failed)}; compiled among them: "
    f"{any('compiled' in t for t in failed)}"
)

# %%
# Without the guard, the eager Triton calls on the second GPU fail inside
# Triton's launcher, and so does the CUDA graph captured there; the C++/CUDA
# operators (their own ``CUDAGuard``) pass either way. In the recorded runs
# the compiled test traced the plain-PyTorch form (``compiled="native"`` was
# the default of the sources they measured): on the other GPU it ran
# Inductor's code for it, not this page's Triton kernels.

# %%
# How fast, on a GPU (recorded)
# -----------------------------
# ``python -m guidekit.benchmark --sweep`` times each kernel at ten row
# lengths with the same bytes in all (``M * N`` fixed: 2**26 elements here,
# four times step 3's table, so the two differ), next to a copy of those
# bytes. The recorded sweep, read from ``docs/recorded/``: the Triton
# kernels of this page and the CUDA kernels of :doc:`step 3 <03_cuda_kernel>`
# in % of the copy, both 16-bit types. The dotted line is the longest row one
# Triton program holds; longer rows are split (:doc:`step 9.2
# <09_triton_kernel_2_long_rows>`).
sweep_record = recorded("sweep_opguide_h100.json")
say(f"Triton {sweep_record['triton']}, CUDA {sweep_record['cuda']}")
LIMITS = {
    "forward": triton_ops.launch.MAX_REGISTER_ROW,
    "backward": triton_ops.launch.MAX_REGISTER_ROW_BACKWARD,
}
ROUTES = ("opguide triton", "opguide")  # Triton, and the CUDA kernels
rows = select(sweep_record["sweep"]["rows"], impl=ROUTES, **{"pass": tuple(LIMITS)})
title = f"Recorded on {sweep_record['device']}"
fig = lines_figure(rows, title, series=("impl", "dtype"), marks={"limit": LIMITS})
# The rows this page's register kernels take: N up to each pass's limit.
short = [r for r in rows if r["n"] <= LIMITS[r["pass"]]]
show(ranges(short, ("pass", "dtype", "impl")))
faster = sorted({r["impl"] for r in short if r["vs_copy"] > 1})
if faster:
    say(
        f"above 100% ({', '.join(faster)}): faster than torch's copy_ of the same bytes, "
        "which is no ceiling (step 11)"
    )
# Each point is the median of one run's batches, with no spread recorded, so
# a gap under 1 point of the copy counts as a tie.
for pass_name, limit in LIMITS.items():
    say(f"{pass_name}, N <= {limit}: " + versus(select(short, **{"pass": pass_name}), *ROUTES))

# %%
# Trade-offs: Triton or CUDA C++?
# -------------------------------
# **Effort.** The Triton kernels take fewer lines than the CUDA ones, with no
# build step: indexing is by blocks, and masks replace the bounds checks and
# the vectorised and scalar paths of the CUDA kernel. Lines of each route's
# kernels and host code (no blank lines, comments or docstrings):
import ast  # noqa: E402


def code_lines(path):
    text = path.read_text().splitlines()
    skip = set()  # the lines of Python docstrings
    if path.suffix == ".py":
        for node in ast.walk(ast.parse("\n".join(text))):
            body = getattr(node, "body", None)
            first = body[0] if isinstance(body, list) and body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    skip.update(range(first.lineno, first.end_lineno + 1))
    code = [line.strip() for i, line in enumerate(text, 1) if line.strip() and i not in skip]
    return sum(1 for line in code if not line.startswith(("#", "//")))


triton_dir = ROOT / "opguide" / "triton"
counts = [
    ("Triton forward kernels, opguide/triton/forward.py", triton_dir / "forward.py"),
    ("Triton backward kernels, opguide/triton/backward.py", triton_dir / "backward.py"),
    ("their launch rules, opguide/triton/launch.py", triton_dir / "launch.py"),
    ("their wrappers, opguide/triton/ops.py", triton_dir / "ops.py"),
    ("CUDA forward kernel, csrc/rms_norm/rms_norm_forward.cuh", None),
    ("CUDA backward kernels, csrc/rms_norm/rms_norm_backward.cuh", None),
    ("their launch rules, csrc/rms_norm/rms_norm_forward_planner.cuh", None),
    ("their launch rules, csrc/rms_norm/rms_norm_backward_planner.cuh", None),
    ("their wrappers, csrc/rms_norm/rms_norm_cuda.cu", None),
]
counts = [(label, path or ROOT / label.split(", ")[1]) for label, path in counts]
width = max(len(label) for label, _ in counts)
for label, path in counts:
    if path.exists():
        print(f"{label:{width}} {code_lines(path):4} lines")
kernels = {route: sum(code_lines(p) for label, p in counts if label.startswith(route))
           for route in ("Triton", "CUDA")}  # fmt: skip
print(
    f"kernels: Triton {kernels['Triton']} lines against CUDA's {kernels['CUDA']}"
    + ("" if kernels["Triton"] < kernels["CUDA"] else " (Surprising: Triton's are not fewer)")
)

# %%
# **Portability to ROCm.** Triton has an AMD backend: the same kernels compile
# for AMD GPUs with a ROCm build of PyTorch (a wavefront is 64 lanes on CDNA
# GPUs: the launch rules may deserve a second look). :doc:`Step 9.2
# <09_triton_kernel_2_long_rows>` compiles one of them for AMD targets without
# a GPU, ``tests/test_triton_targets.py`` every one; none has run on an AMD
# GPU here. CUDA C++ reaches ROCm through hipify plus the shims of
# ``csrc/common/device.cuh`` (warp width, shuffles), each architecture
# compiled ahead of time.
#
# **Speed.** Hand-written CUDA gives more control (vector widths, shared
# memory, launch bounds, persistent kernels); Triton gets much of it from its
# compiler and a few launch parameters. The recorded sweep above compares the
# two on one GPU; :doc:`step 11 <11_performance>` compares them with other
# libraries. This cell times the C++ kernel on the CPU (torch's threads, and
# one), the interpreter where it runs, and on a GPU both routes' eager calls.
# A cause, where printed, is likely, not measured.
import statistics  # noqa: E402


def median_ms(fn, repeat=5):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def one_thread_ms(fn):
    """median_ms of ``fn`` with torch on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return median_ms(fn)
    finally:
        torch.set_num_threads(threads)


x = torch.randn(64, 1024)
w = torch.randn(1024)
threads = torch.get_num_threads()
cpp_ms = median_ms(lambda: opguide.rms_norm(x, w, backend="cpp"))
one_ms = one_thread_ms(lambda: opguide.rms_norm(x, w, backend="cpp"))
print(f"C++ kernel, CPU, (64, 1024) float32:   {cpp_ms:8.3f} ms ({threads} threads)")
print(f"C++ kernel, CPU, the same on one thread: {one_ms:8.3f} ms")
if cpp_ms > 5 * one_ms:
    # Is the slowdown the machine's? A control that spreads over every thread:
    # torch.exp on four times ATen's grain size (32768 elements) per thread.
    z = torch.randn(threads * 2**15 * 4)
    ctl_ms = median_ms(lambda: torch.exp(z))
    ctl_one_ms = one_thread_ms(lambda: torch.exp(z))
    mine, ctl = cpp_ms / one_ms, ctl_ms / ctl_one_ms
    print(
        f"Surprising: on one thread the same call takes {one_ms:.3f} ms, {mine:.0f}x less.\n"
        f"torch.exp on {z.numel()} elements takes {ctl_ms:.3f} ms on {threads} threads and "
        f"{ctl_one_ms:.3f} ms on one: {ctl:.1f}x the time on all threads."
    )
    if ctl > 1:
        print(
            "torch.exp slows down on all threads too, so the machine's cores are likely busy:\n"
            "OpenMP threads spin while they wait for work, and when something else keeps the\n"
            "cores busy (torch.compile can leave compile worker processes running), each\n"
            "parallel region waits for a thread that lost its core."
        )
    else:
        print(
            "torch.exp gains from the threads, while this kernel loses; this page does not\n"
            "measure why."
        )
if triton_ops.INTERPRET:
    interp_ms = median_ms(lambda: opguide.rms_norm(x, w, backend="triton"))
    # Against the C++ kernel's faster time: a slowed multi-thread run (above)
    # would shrink the ratio.
    base, where = min((cpp_ms, f"{threads} threads"), (one_ms, "1 thread"))
    times = f"{interp_ms:8.3f} ms ({interp_ms / base:.0f}x the C++ kernel on {where})"
    print(f"Triton interpreter, same input:        {times}")
else:
    print("Triton interpreter: not timed (TRITON_INTERPRET is off: Triton compiles)")
if device == "cuda":
    # One eager call each, launch included, waited for: what a caller pays per
    # call at this small shape, not the kernels' bandwidth (the sweep above).
    xg, wg = x.to(device, torch.bfloat16), w.to(device, torch.bfloat16)
    for backend, label in [("cpp", "CUDA kernel"), ("triton", "Triton kernel")]:

        def call(backend=backend):
            opguide.rms_norm(xg, wg, backend=backend)
            torch.cuda.synchronize()

        gpu_ms = median_ms(call, repeat=51)
        print(f"{label}, GPU, (64, 1024) bfloat16:     {gpu_ms * 1e3:8.1f} us per call, synced")
else:
    print("CUDA and Triton kernels, GPU: not timed (this build runs the kernels on the CPU)")

# %%
# The files to take into your own project
# ---------------------------------------
# To use these kernels in a project of your own, copy the files that
# ``manifests/triton_rms_norm.txt`` lists, each to the same path; no build
# step, and no compiled library. ``tests/test_manifests.py`` copies exactly
# these files into an empty folder, installs Triton beside torch in a virtual
# environment of their own, and checks the result against the formula. The
# list, with each file's lines:

from guidekit import manifests  # noqa: E402

print(manifests.shown("triton_rms_norm"))

# %%
# The files of this step, whole
# -----------------------------
# Each file that the page above showed in parts:
#
# .. dropdown:: opguide/triton/__init__.py
#
#    .. literalinclude:: /../opguide/triton/__init__.py
#       :language: python
#       :caption: opguide/triton/__init__.py
#
# .. dropdown:: opguide/triton/forward.py
#
#    .. literalinclude:: /../opguide/triton/forward.py
#       :language: python
#       :caption: opguide/triton/forward.py
#
# .. dropdown:: opguide/triton/backward.py
#
#    .. literalinclude:: /../opguide/triton/backward.py
#       :language: python
#       :caption: opguide/triton/backward.py
#
# .. dropdown:: opguide/triton/launch.py
#
#    .. literalinclude:: /../opguide/triton/launch.py
#       :language: python
#       :caption: opguide/triton/launch.py
#
# .. dropdown:: opguide/triton/ops.py
#
#    .. literalinclude:: /../opguide/triton/ops.py
#       :language: python
#       :caption: opguide/triton/ops.py
#
# .. dropdown:: opguide/backends.py
#
#    .. literalinclude:: /../opguide/backends.py
#       :language: python
#       :caption: opguide/backends.py
