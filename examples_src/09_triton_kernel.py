r"""
Step 9: A Triton kernel as an operator
======================================

The C++ and CUDA kernels of the earlier steps are one way to give
``opguide.rms_norm`` a fast body. `Triton <https://triton-lang.org>`_ is
another: GPU kernels written in Python, over blocks of elements rather than
single threads, compiled at run time. This step writes RMSNorm (forward and
backward) in Triton and registers it so that ``torch.compile`` traces it like
any other operator.

In this step you will learn:

* how to write a row-wise reduction kernel in Triton, and its backward with a
  two-stage reduction for ``dweight``;
* how to choose ``ROWS``, ``num_warps`` and pipeline stages: with
  :func:`triton.autotune`, keyed on the row length, and, where the best
  choice depends on more than the key, with rules taken from a sweep;
* the two ways to register a Triton kernel: :func:`torch.library.custom_op`
  (opaque to the compiler) and :func:`torch.library.triton_op` with
  :func:`torch.library.wrap_triton` (transparent to Inductor), and when each
  is right;
* how the same kernels run on a machine without a GPU, in Triton's
  interpreter;
* how users choose a backend: ``opguide.rms_norm(x, w, backend="triton")``.

All the code shown is in the package ``opguide/triton/``, one module per
role: ``interpreter.py`` (the interpreter on machines without a GPU),
``prologue.py`` (the first lines of every kernel), the kernels by family
(``forward.py``, ``backward.py``, ``split.py``, ``fused.py``), ``launch.py``
(each kernel's knobs, chosen by one planner per operator), ``ops.py`` (the
operators) and ``autograd.py``.

Running without a GPU
---------------------
Triton compiles for GPUs. Its interpreter (``TRITON_INTERPRET=1``) runs the
same kernels with NumPy on CPU tensors, which is how this page and the test
suite check them on machines without one. Triton reads the variable when
``@triton.jit`` runs, so it must be set before ``triton`` is imported; every
module of the package imports this one first:

.. literalinclude:: /../opguide/triton/interpreter.py
   :language: python
   :caption: opguide/triton/interpreter.py

The test suite (``conftest.py``) and the site (``docs/conf.py``) set it too, as
early as possible, because ``torch.compile`` may import ``triton`` before
``opguide`` does.

The forward kernel
------------------
One program handles ``ROWS`` whole rows, loaded at once as a
``(ROWS, BLOCK_N)`` block: ``BLOCK_N`` is the row length rounded up to a power
of two, the mask (``cols < N``, ``rows < M``) covers the padding and the last
rows, and ``x`` is read from memory once. The sum of squares is a
``tl.sum`` along the rows (in float32):

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _rms_norm_fwd_kernel

Its first lines, shared with the other kernels, are ``@triton.jit`` helpers.
Triton inlines a helper before it optimises, so it compiles to the same
machine code as its lines written in place:

.. literalinclude:: /../opguide/triton/prologue.py
   :language: python
   :caption: opguide/triton/prologue.py

``ROWS`` and ``num_warps`` (and, for the backward below, the number of
programs and of pipeline stages) are the fields of a frozen dataclass, which
one function per operator fills in from the number of rows, the row length,
the dtype and the device. The rules were found with ``tools/sweep_triton.py``,
which times every config on a GPU: about 2048 elements per program and 16 per
thread for the forward. Under the interpreter they give one program per row
and one warp. A tool that times another configuration passes it as
``forced=``; nothing in the module is overwritten:

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: Registers

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: forward_config

Why a rule and not :func:`triton.autotune`: on the first call for a new
value of its ``key`` (here the row length ``N``), the autotuner times every
config and keeps the fastest. That is the right tool when the best config
depends on the key alone. Here it also depends on the number of rows, and an
autotuner keyed on ``N`` keeps whatever suited the first ``M`` it saw.

A row longer than 16384 elements does not fit in one program's registers.
Such a row is split over ``S`` programs, each holding ``SEG`` columns of it,
which meet through global memory: each writes its part of the row's sum
into a slot of its own, marked as written in the same 64-bit store, and
waits until all the row's slots are marked. Then each adds all the parts in
the same order, so every segment uses the same total, the same on every run. This is
what a thread-block cluster does for the CUDA kernels (:doc:`step 11
<11_performance>`, "Long rows"), without the cluster's guarantee that the
programs run at the same time; the comment says why the wait still ends.
The forward and fused kernels run one program per segment, the backward
one per segment of a group of rows (more on it below):

.. literalinclude:: /../opguide/triton/split.py
   :language: python
   :caption: opguide/triton/split.py

A row of more segments than the GPU has multiprocessors (over two million
elements on an H100) is not split: one program walks it in chunks of
``BLOCK_N``, twice, once for the sum of squares and once to write the
output. That kernel uses the autotuner, with a single config under the
interpreter, where timing means nothing and costs a lot:

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _long_row_configs

.. literalinclude:: /../opguide/triton/forward.py
   :language: python
   :pyobject: _rms_norm_fwd_long_kernel

The backward kernels
--------------------
With ``x_hat = x * inv_rms`` and ``g = dy * weight``, the gradients are
``dx = inv_rms * (g - x_hat * mean(g * x_hat))`` per row, and
``dweight = sum over rows of dy * x_hat``. The second is a reduction *across*
rows: each program sums the rows it owns into its own row of a small float32
buffer, and a second kernel (``_dw_sum_kernel``) adds up that buffer's rows
in a fixed order and writes ``dweight`` in its dtype. No two programs write
the same address, so no atomics are needed, and the result is the same on
every run. ``inv_rms`` comes from the forward, which saved it
(``opguide::rms_norm_fwd_triton`` returns it next to ``y``): the Triton
backward takes the same arguments as the C++ one of :doc:`step 8
<08_autograd>`, so either backend's backward serves either forward.

There are only as many programs as fit on the GPU at once, each looping over
its rows with ``tl.range``, whose ``num_stages`` argument lets Triton
load the next rows while it computes the current ones (``STAGES``, three
where they fit in shared memory). Short rows come ``ROWS`` at a time, so that
each step of the loop has a few thousand elements to work on. The ``GDC``
flag turns on programmatic dependent launch (``pdl_prologue`` above and
``launch.pdl_options``; :doc:`step 11 <11_performance>`, "Lessons", measures
it for the CUDA kernels).

The register kernel holds ``x``, ``dy``, the weight and its share of
``dweight`` for a whole row; past ``MAX_REGISTER_ROW_BACKWARD`` (8192
elements) that no longer fits and Triton spills to memory. Longer rows take
``_rms_norm_bwd_split_kernel`` of the split kernels above: program ``(g, s)``
takes segment ``s`` of the rows ``g``, ``g + G``, ``g + 2G``, ..., adds its
segment of ``dweight`` over them into row ``g`` of the buffer, and waits one
row late: it writes its part of the next row's sum before it waits for this
row's total, and it has already started the loads of the row after that.
``_dw_sum_kernel`` sums the buffer as above. Rows of more segments than
multiprocessors take two chunked kernels: one program per row walks it
twice, for the row's sum and for ``dx``, and ``dweight`` is summed over
strips of columns. The whole file:

.. literalinclude:: /../opguide/triton/backward.py
   :language: python
   :caption: opguide/triton/backward.py

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
  :func:`torch.library.wrap_triton` becomes a node of the graph, and Inductor
  launches the compiled kernel from its own generated code: no Python
  dispatch per call, and the launch takes part in CUDA graphs and in
  Inductor's autotuning. The body itself serves as the fake kernel. It needs
  real, compiled Triton kernels; with the interpreter ``opcheck`` fails.

So ``opguide`` picks one per process: ``triton_op`` when a GPU is there,
``custom_op`` under the interpreter. The kernels and the operator bodies are
the same code:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :start-after: # [register-choice]
   :end-before: # [register-choice-end]

Every launch runs under a device guard. Triton launches on the *current*
GPU and requires every pointer argument to live there, so, as the CUDA
wrappers of :doc:`step 3 <03_cuda_kernel>` make the input's GPU current, the
Triton operators do (the last section of this page shows what happens
without it):

.. literalinclude:: /../opguide/triton/launch.py
   :language: python
   :pyobject: on_device_of

The forward operators (``rms_norm_triton`` for inference,
``rms_norm_fwd_triton`` for training, which also returns ``inv_rms``), and
the backward one, which returns two tensors, are thin: each calls a launch
function, which takes the planner's configuration (or a ``forced=`` one) and
launches the kernel it names:

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_forward

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_triton

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_fwd_triton

.. literalinclude:: /../opguide/triton/ops.py
   :language: python
   :pyobject: rms_norm_backward_triton

:meth:`~torch.library.CustomOpDef.register_autograd` connects them, and
``rms_norm`` is what ``opguide.rms_norm(..., backend="triton")`` runs:

.. literalinclude:: /../opguide/triton/autograd.py
   :language: python
   :caption: opguide/triton/autograd.py

Under the interpreter the ``custom_op`` versions also need fake kernels:

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
"""

# %%
# Which registration is in use here
# ---------------------------------
import os
import time

import torch

import opguide
from opguide import rms_norm_reference
from opguide import triton as triton_ops

# sphinx_gallery_thumbnail_path = "_thumbnails/09.png"
# sphinx_gallery_parallel = False  # it times kernels on the CPU: runs alone
print("GPU visible:", torch.cuda.is_available())
print("TRITON_INTERPRET =", os.environ.get("TRITON_INTERPRET"))
register_op = triton_ops.ops.register_op
print("registered with:", register_op.__module__ + "." + register_op.__name__)
print(torch.ops.opguide.rms_norm_triton.default._schema)
print(torch.ops.opguide.rms_norm_fwd_triton.default._schema)
print(torch.ops.opguide.rms_norm_backward_triton.default._schema)

device = "cuda" if torch.cuda.is_available() and not triton_ops.INTERPRET else "cpu"

# %%
# Checking the forward against the reference
# ------------------------------------------
# Random inputs, three dtypes, row lengths that are and are not powers of
# two (the mask covers the padding of the block).
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
# And the backward
# ----------------
# The gradients of the Triton operator against those that autograd computes
# through the reference (float32, so the comparison is tight):
x = torch.randn(37, 96, device=device, requires_grad=True)
w = torch.randn(96, device=device, requires_grad=True)
grad = torch.randn(37, 96, device=device)
opguide.rms_norm(x, w, backend="triton").backward(grad)
dx, dw = x.grad.clone(), w.grad.clone()
x.grad = w.grad = None
rms_norm_reference(x, w).backward(grad)
torch.testing.assert_close(dx, x.grad, atol=1e-4, rtol=1e-4)
torch.testing.assert_close(dw, w.grad, atol=1e-4, rtol=1e-4)
print("max |dx - reference| =", (dx - x.grad).abs().max().item())
print("max |dweight - reference| =", (dw - w.grad).abs().max().item())

# %%
# opcheck and torch.compile
# -------------------------
# :func:`torch.library.opcheck` tests the schema, the fake kernel, the
# autograd registration and tracing, for the forward (with inputs that require
# grad) and for the backward:
x = torch.randn(5, 24, device=device, requires_grad=True)
w = torch.randn(24, device=device, requires_grad=True)
print(torch.library.opcheck(torch.ops.opguide.rms_norm_triton.default, (x, w, 1e-6)))
print(torch.library.opcheck(torch.ops.opguide.rms_norm_fwd_triton.default, (x, w, 1e-6)))
g = torch.randn(5, 24, device=device)
_, inv_rms = torch.ops.opguide.rms_norm_fwd_triton.default(x.detach(), w.detach(), 1e-6)
args = (g, x.detach(), w.detach(), inv_rms)
print(torch.library.opcheck(torch.ops.opguide.rms_norm_backward_triton.default, args))

# %%
# ``torch.compile(fullgraph=True)`` raises at the first graph break, so a
# result means there was none. The backward runs through the compiled graph
# too:
torch._dynamo.reset()


def norm_then_scale(x, w):
    return opguide.rms_norm(x, w, backend="triton") * 2


compiled = torch.compile(norm_then_scale, fullgraph=True)
start = time.perf_counter()
y = compiled(x, w)
print(f"compiled and ran in {time.perf_counter() - start:.1f} s")
torch.testing.assert_close(y, rms_norm_reference(x, w) * 2)
y.sum().backward()
print("compiled forward and backward match the reference; dweight[:4] =", w.grad[:4])

# %%
# What Inductor sees (GPU only)
# -----------------------------
# With ``triton_op``, Inductor's generated code compiles ``_rms_norm_fwd_kernel``
# (``async_compile.triton``) and launches it itself (``.run``). With
# ``custom_op`` it would only call the operator. The two lines of the generated
# code that show it:
if device == "cuda":
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    xc = torch.randn(32, 1024, device="cuda", dtype=torch.float16)
    wc = torch.randn(1024, device="cuda", dtype=torch.float16)
    _, code = run_and_get_code(torch.compile(norm_then_scale, fullgraph=True), xc, wc)
    lines = [
        line.strip()
        for line in "\n".join(code).splitlines()
        if "_rms_norm_fwd_kernel" in line and ("async_compile.triton(" in line or ".run(" in line)
    ]
    print("\n".join(lines[:4]))
else:
    print(
        "skipped: no GPU here, so the operator is a custom_op running in Triton's "
        "interpreter; Inductor treats it as an opaque call."
    )

# %%
# The device guard at work
# ------------------------
# ``tests/test_two_gpus.py`` calls every operator, with each backend, on
# ``cuda:1`` while ``cuda:0`` is current: what a second pipeline stage or a
# model moved with ``.to("cuda:1")`` does. With two GPUs here it runs live,
# followed by a run recorded with the guard removed; otherwise the page shows
# two runs recorded on a two-GPU machine, one as the code is and one with the
# guard removed (``tools/record_two_gpus.py``):
import json
import subprocess
import sys

from guidekit.compile_checks import source_root

ROOT = source_root()  # the opguide source tree, wherever this script runs from
record = json.loads((ROOT / "docs" / "recorded" / "two_gpus.json").read_text())
machine = f"{record['gpus']} x {record['device']}, torch {record['torch']}"
if torch.cuda.device_count() >= 2:
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*pytest, "tests/test_two_gpus.py"], cwd=ROOT, capture_output=True, text=True
    )
    command = "python -m pytest -q tests/test_two_gpus.py"
    print(f"{torch.cuda.device_count()} GPUs here. Run live, with the guard: $ {command}")
    print("   ", run.stdout.strip().splitlines()[-1])
    print(f"Recorded on {machine}, {record['date']}:")
    labels = ["without_guard"]  # the run made live above is the one with the guard
else:
    print(f"{torch.cuda.device_count()} GPU(s) here. Recorded on {machine}, {record['date']}:")
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
# In the recorded run without the guard, the failures are the eager Triton
# calls on the second GPU, inside Triton's launcher, and the CUDA graph
# captured there; the C++/CUDA operators (their own ``CUDAGuard``) and the
# compiled Triton path (Inductor sets the device in the code it generates)
# pass either way.

# %%
# Trade-offs: Triton or CUDA C++?
# -------------------------------
# **Effort.** The Triton kernels are a few dozen lines of Python each, with no
# build step: indexing is by blocks, and masks replace the bounds checks and
# the vectorised and scalar paths of the CUDA kernel. The line counts of the
# two routes, from the files themselves (code lines only; the CUDA files are
# counted whole):


def code_lines(path, start=None, end=None):
    text = path.read_text().splitlines()
    if start is not None:
        text = text[text.index(start) + 1 : text.index(end)]
    return sum(1 for line in text if line.strip() and not line.strip().startswith(("#", "//")))


triton_dir = ROOT / "opguide" / "triton"
counts = [
    ("Triton forward kernels, opguide/triton/forward.py", code_lines(triton_dir / "forward.py")),
    ("Triton backward kernels, opguide/triton/backward.py", code_lines(triton_dir / "backward.py")),
]
for name, what in [
    ("rms_norm/rms_norm_forward.cuh", "CUDA forward kernel"),
    ("rms_norm/rms_norm_backward.cuh", "CUDA backward kernels"),
    ("rms_norm/rms_norm_cuda.cu", "forward and backward wrappers"),
]:
    if (ROOT / "csrc" / name).exists():
        counts.append((f"{what}, csrc/{name}", code_lines(ROOT / "csrc" / name)))
width = max(len(label) for label, _ in counts)
for label, lines_of_code in counts:
    print(f"{label:{width}} {lines_of_code:4} lines")

# %%
# **Portability to ROCm.** Triton has an AMD backend: the same Python kernels
# compile for AMD GPUs with a ROCm build of PyTorch, with no source change
# (only the launch rules may deserve a second look, since a wavefront is
# 64 lanes on CDNA GPUs). CUDA C++ reaches ROCm through hipify plus the small
# shims that ``csrc/common/platform.cuh`` carries for every CUDA kernel (warp
# width, shuffles), and each architecture is compiled ahead of time.
#
# **Speed.** Hand-written CUDA gives more control (vector widths, shared
# memory, launch bounds, persistent kernels); Triton gets much of it from its
# compiler and a few launch parameters. How close the two come depends on the
# GPU and the shape, so the cell below measures them where a GPU is present,
# and :doc:`step 11 <11_performance>` over every row length. The interpreter
# is a correctness tool, not a fast path: where it runs, the cell times it
# next to the C++ kernel.
import statistics  # noqa: E402


def median_ms(fn, repeat=5):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


x = torch.randn(64, 1024)
w = torch.randn(1024)
cpp_ms = median_ms(lambda: opguide.rms_norm(x, w, backend="cpp"))
threads = torch.get_num_threads()
torch.set_num_threads(1)
one_ms = median_ms(lambda: opguide.rms_norm(x, w, backend="cpp"))
torch.set_num_threads(threads)
print(f"C++ kernel, CPU, (64, 1024) float32:   {cpp_ms:8.3f} ms ({threads} threads)")
if cpp_ms > 5 * one_ms:
    # torch's own CPU operators slow down the same way: the cause is the
    # machine, not the kernel.
    ref_ms = median_ms(lambda: torch.nn.functional.rms_norm(x, (1024,), w))
    print(
        f"Surprising: on one thread the same call takes {one_ms:.3f} ms, and F.rms_norm "
        f"{ref_ms:.3f} ms on {threads}. OpenMP threads spin while they wait for work; when "
        "something else keeps the cores busy (torch.compile can leave compile worker "
        "processes running), each parallel region waits for a thread that lost its core. "
        "OMP_WAIT_POLICY=PASSIVE or fewer threads (torch.set_num_threads) avoid it."
    )
if triton_ops.INTERPRET:
    interp_ms = median_ms(lambda: opguide.rms_norm(x, w, backend="triton"))
    print(f"Triton interpreter, same input:        {interp_ms:8.3f} ms ({interp_ms / cpp_ms:.0f}x)")
else:
    print(
        "Triton interpreter: not timed (TRITON_INTERPRET is off here: Triton compiles for the GPU)"
    )


def cuda_ms(fn, repeat=50):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


if device == "cuda":
    xc = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    wc = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    moved = 2 * xc.numel() * xc.element_size()  # read x, write y
    gpu_ms = {}
    for backend in ("cpp", "triton"):
        ms = gpu_ms[backend] = cuda_ms(lambda b=backend: opguide.rms_norm(xc, wc, backend=b))
        print(
            f"{backend:7} (4096, 4096) bfloat16 on {torch.cuda.get_device_name()}: "
            f"{ms:.3f} ms, {moved / ms / 1e6:.0f} GB/s"
        )
    print(f"Triton's time is {gpu_ms['triton'] / gpu_ms['cpp']:.2f}x the C++ kernel's here")
else:
    print("GPU timing skipped: no GPU visible (the performance chapter measures on one)")

# %%
# Compiled for seven GPUs, run on none of them
# ---------------------------------------------
# Triton compiles for any GPU it is told about, not only the one present:
# ``triton.compile`` with a ``GPUTarget`` goes down to AMD's ``hsaco`` or
# NVIDIA's ``cubin`` on a machine with no GPU at all.
# ``guidekit/triton_targets.py`` does so for every launch configuration the
# library's launch code chooses (it calls the operators on fake CUDA tensors
# and records their launches), and reads registers, spills and shared memory
# from the machine code. Here, the forward kernel, at the extremes of its
# configurations, on each target:
from guidekit import triton_targets  # noqa: E402

results = triton_targets.check(kernels=["_rms_norm_fwd_kernel"])
print(f"{'target':8} {'x':8} {'launch':44} {'regs':>4} {'spill':>5} {'shared':>6} {'budget':>9}")
for u in results:
    launch = " ".join(
        w for w in u.config.split() if w.startswith(("BLOCK_N", "ROWS", "num_w", "GDC"))
    )
    print(
        f"{u.target:8} {u.dtypes:8} {launch:44} {u.regs:>4} {u.spills + u.sgpr_spills:>5} "
        f"{u.shared:>6} {u.reg_budget:>4}r/{u.smem_budget // 1024}K  {u.status}"
    )
print(triton_targets.summary(results))
for name, target in triton_targets.TARGETS.items():
    mine = [u for u in results if u.target == name]
    fit, refused = sum(u.ok for u in mine), sum(u.status == "error" for u in mine)
    print(f"{name:8} ({target.gpu}): {fit} of {len(mine)} fit without spilling, {refused} refused")
print("GPU on this machine:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")

# %%
# What this shows: the kernel compiles for these GPUs, and each compile
# marked ``ok`` fits the GPU's registers and shared memory without
# spilling (the ``budget`` column: registers per thread for that many
# warps, and shared memory per block). A line marked ``error`` is a launch
# the library would make there that Triton refuses. What it does not show:
# none of these kernels ran on those GPUs, so it says nothing about their
# results or speed there; correctness on AMD GPUs is not tested by this.
# ``tests/test_triton_targets.py`` runs the same check for every kernel and
# fails on any spill outside a short list of known ones, each with its reason
# (``KNOWN_SPILLS``); ``OPGUIDE_TRITON_TARGETS_FULL=1`` takes every
# configuration, not only the extremes.

# %%
# The files of this step, whole
# -----------------------------
# The page above showed parts of these files; here each one is whole, as it
# is compiled and run.
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
