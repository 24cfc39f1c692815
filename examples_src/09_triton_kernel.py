r"""
Step 9: A Triton kernel as an operator
======================================

Part I gives the operator a C++ and a CUDA body behind one schema. This step
adds a third in `Triton <https://triton-lang.org>`_, GPU kernels written in
Python over blocks of elements, which a user picks with
``opguide.rms_norm(x, w, backend="triton")``.

In this step you will learn:

* a row-wise reduction in Triton, forward and backward, and its launch knobs;
* three registrations: :func:`torch.library.custom_op`,
  :func:`torch.library.triton_op`, and the dispatcher-level
  ``Library.define``/``impl`` that opguide uses;
* how the kernels run without a GPU, and how fast on one (recorded).

The code is in ``opguide/triton/``; :doc:`step 9.2
<09_triton_kernel_2_long_rows>` takes rows too long for one program.

The forward kernel
------------------
One program handles ``ROWS`` whole rows as one ``(ROWS, BLOCK_N)`` block:
``BLOCK_N`` is the row length rounded up to a power of two, a mask covers the
padding and the last rows, and ``x`` is read once. The sum of squares is a
``tl.sum`` in float32:

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _rms_norm_forward_kernel

Its first lines are ``@triton.jit`` helpers shared by every kernel, inlined
by Triton (`make_ttir
<https://github.com/triton-lang/triton/blob/main/third_party/nvidia/backend/compiler.py>`__):

.. literalinclude:: /../opguide/triton/prologue.py
   :language: python
   :caption: opguide/triton/prologue.py

``ROWS`` and ``num_warps`` are fields of a frozen dataclass that one function
per operator fills in, by rules measured with ``tools/sweep_triton.py``; a
tool passes another as ``forced=``:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: Registers

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: forward_config

Not :func:`triton.autotune`, which picks a kernel's parameters only: the
backward's number of programs also sizes a buffer allocated before the launch
and decides whether a second kernel runs.

custom_op, triton_op, or the dispatcher
---------------------------------------
Part I registers with :func:`torch.library.custom_op`, the entry that
`torch.library's documentation <https://docs.pytorch.org/docs/stable/library.html>`__
recommends; a Triton body needs nothing more. It and
:func:`torch.library.triton_op` both give ``torch.compile`` an operator to
record instead of a graph break, and differ in what the compiler sees:

* ``custom_op``: the body is opaque, described by its fake kernel; any body
  works, the interpreter's too.
* ``triton_op``: the body is traced. Each launch wrapped in
  :func:`torch.library.wrap_triton` becomes a graph node that Inductor
  compiles into its own code. Its checks need compiled kernels (a cell below
  tries them).

Both add Python layers to every eager call. opguide's Triton operators use the
registration beneath both, ``torch.library.Library``'s ``define`` (the schema
inferred as ``custom_op`` infers it) and ``impl``, with a body that launches
the kernels. :doc:`Step 11.2 <11_performance_2_eager>` times all three as it
runs (and ``triton_op`` launching a kernel, on a GPU) and weighs what this
saves against what it asks of you. Under ``torch.compile`` each operator is
one opaque call (``compiled="native"`` offers Inductor the plain-PyTorch
form, see :mod:`opguide.backends`):

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :start-after: # [register-choice]
   :end-before: # [register-choice-end]

The forward operators, ``rms_norm_triton`` and ``rms_norm_forward_triton``
(which also returns ``inv_rms`` for training), call a launch function:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_forward

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_triton

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_forward_triton

Triton launches on the *current* GPU, so the operators make the input's GPU
current, as :doc:`step 3 <03_cuda_kernel>`'s wrappers do (a section below
shows what happens without it):

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: on_device_of

Their fake kernels, which ``torch.compile``, ``opcheck`` and DTensor's shape
propagation run instead of the body:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :start-after: # [fake-kernels]
   :end-before: # [fake-kernels-end]

Choosing the backend
--------------------
:func:`opguide.rms_norm` takes ``backend="auto" | "cpp" | "triton"``, a
keyword visible at each call site and a constant for ``torch.compile``.
``"auto"`` takes the compiled kernel where there is one for the input's
device, else Triton:

.. literalinclude:: /../opguide/backends.py
   :language: python
   :pyobject: resolve_backend

Running without a GPU
---------------------
Triton's interpreter (``TRITON_INTERPRET=1``) runs the same kernels with
NumPy on CPU tensors. Triton reads the variable for every kernel of the
process, so the program sets it before importing ``triton``; ``opguide`` only
reads it, and without it and a GPU refuses CPU tensors, naming the variable:

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
# One Python layer remains: the forward operators' ``register_autograd``
# formula, run on every call (:doc:`step 8 <08_autograd>`; step 11.2 times it).
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
# Three dtypes (the Triton kernels take no float64), row lengths that are and
# are not powers of two, within one rounding of each dtype:
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
# With ``x_hat = x * inv_rms`` and ``g = grad_y * weight``,
# ``grad_x = inv_rms * (g - x_hat * mean(g * x_hat))`` per row and
# ``grad_weight = sum over rows of grad_y * x_hat``. For the second, each
# program sums its rows into its own row of a float32 buffer, and
# ``_grad_weight_sum_kernel`` adds the buffer's rows in a fixed order: no
# atomics, the same bits on every run.
#
# The programs, as many as fit on the GPU, loop over their rows with
# ``tl.range``, whose ``num_stages`` (``STAGES``) loads the next rows during
# the current ones. ``GDC`` turns on programmatic dependent launch
# (:doc:`step 11.4 <11_performance_4_tuning>`):
#
# .. literalinclude:: /../opguide/triton/backward.py
#    :language: python
#    :pyobject: _rms_norm_backward_kernel
#
# .. literalinclude:: /../opguide/triton/backward.py
#    :language: python
#    :pyobject: _grad_weight_sum_kernel
#
# ``launch.backward_config`` (end of the page) chooses the programs, ``ROWS``
# and ``STAGES``. The backward operator takes :doc:`step 8 <08_autograd>`'s
# arguments, so either backend's backward serves either forward:
#
# .. literalinclude:: /../opguide/triton/ops.py
#    :language: python
#    :pyobject: rms_norm_backward_triton
#
# .. literalinclude:: /../opguide/triton/autograd.py
#    :language: python
#    :caption: opguide/triton/autograd.py
#
# Its gradients against autograd's through the reference, in float32:
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
# :func:`torch.library.opcheck` tests the schema, fake kernel, autograd
# registration and tracing of each operator:
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
# ``torch.compile(fullgraph=True)`` raises at a graph break; forward and
# backward through the compiled graph:
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
# A backend that records the graph AOTAutograd hands to Inductor: an operator
# defined with ``Library.define`` (or ``custom_op``) is one call; a
# ``triton_op`` arrives as the kernel launch itself (`triton_kernel_wrap.py
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
# A ``triton_op`` through ``opcheck``. Under the interpreter its
# ``test_faketensor`` fails (the interpreter reads the data of the fake
# tensors it is handed); with compiled kernels on a GPU it is meant to pass,
# and where it does, the next cell's graph holds the kernel launch (a
# ``triton_kernel_wrapper_functional`` node). The output says which happened:
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
# ``cuda:1`` while ``cuda:0`` is current, as a second pipeline stage does. It
# runs live where there are two GPUs; the runs recorded by
# ``tools/record_two_gpus.py``, with the guard and without, follow:
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
# The C++/CUDA operators have their own ``CUDAGuard``. The recorded runs'
# compiled test traced the plain-PyTorch form (``compiled="native"``), so it
# ran Inductor's code there, not these kernels.

# %%
# How fast, on a GPU (recorded)
# -----------------------------
# The recorded sweep (``python -m guidekit.benchmark --sweep``, ``M * N``
# fixed): these Triton kernels and :doc:`step 3 <03_cuda_kernel>`'s CUDA
# kernels in % of a copy of the same bytes. The dotted line is the longest
# row one Triton program holds:
sweep_record = recorded("sweep_opguide_<gpu>.json")
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
# **Effort.** No build step; indexing by blocks, and masks in place of the
# CUDA kernels' bounds checks and vector and scalar paths. Lines of code of
# each route (no blank lines, comments or docstrings):
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
# **Portability to ROCm.** Triton's AMD backend compiles the same kernels
# (:doc:`step 9.2 <09_triton_kernel_2_long_rows>` for AMD targets, without a
# GPU); none has run on an AMD GPU here. CUDA C++ reaches ROCm through hipify plus the shims of
# ``csrc/common/device.cuh`` (warp width, shuffles), each architecture
# compiled ahead of time.
#
# **Speed.** CUDA gives more control (vector widths, shared memory,
# persistent kernels); Triton leaves much to its compiler. The sweep above
# compares them. This cell times the C++ kernel on the CPU (all threads, and
# one), the interpreter, and both routes' eager calls on a GPU:
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
# The files ``manifests/triton_rms_norm.txt`` lists, each to the same path; no
# build step. ``tests/test_manifests.py`` copies exactly these into an empty
# project with torch and Triton and checks the result against the formula:

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
