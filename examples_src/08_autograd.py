r"""
Step 8: Autograd
================

Part I registers RMSNorm's backward from Python with
:func:`torch.library.register_autograd`. This step adds:

* the derivation, and a forward (``rms_norm_forward``) that returns what the
  backward needs, so nothing as large as ``y`` is saved;
* the same formula in C++ (``torch::autograd::Function``), as the library
  registers it, and what each way costs per call;
* the backward's CPU kernel, whose ``grad_weight`` has the same bits on any
  number of threads;
* the forward and backward graphs of ``torch.compile``, and when
  ``torch.autograd.Function`` is the better tool.

The formula
-----------
Take one row ``x`` of length ``N`` with weight ``w``, the incoming gradient
``g = dL/dy``, and the row's inverse RMS ``r``::

    r         = 1 / sqrt(sum_k(x_k**2) / N + eps)
    y_j       = x_j * r * w_j

    dL/dw_j   = sum over rows of  g_j * x_j * r
    dL/dx_j   = r * g_j * w_j  -  x_j * r**3 / N * sum_k(g_k * w_k * x_k)

The second term comes from ``r`` depending on every ``x_k``. The backward
needs ``x``, ``w``, ``g`` and ``r``, not ``y``; the forward computes ``r``
anyway, so it returns it: one float per row.

The schemas
-----------
Beside ``opguide::rms_norm``, a training pair: a forward that also returns
``inv_rms`` (``r``) and the backward that takes it:

.. literalinclude:: /../csrc/rms_norm/rms_norm_schema.cpp
   :language: cpp
   :start-after: // [schema-rms-norm-training]
   :end-before: // [schema-rms-norm-training-end]
"""

# %%
# The formula in Python
# ---------------------
# As in Part I, on the training pair: ``inv_rms`` is marked
# non-differentiable, and the backward calls the C++ backward operator.
import statistics
import time
import warnings

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.autograd.gradcheck import GradcheckError

import opguide
from guidekit.recorded.pages import bars_figure
from opguide import rms_norm_backward_reference

# sphinx_gallery_thumbnail_path = "_thumbnails/08.png"
# sphinx_gallery_parallel = False  # it times kernels on the CPU: runs alone


def setup_context(ctx, inputs, output):
    x, weight, _eps = inputs
    _y, inv_rms = output
    ctx.save_for_backward(x, weight, inv_rms)
    ctx.mark_non_differentiable(inv_rms)


def backward(ctx, grad_y, _grad_inv_rms):
    x, weight, inv_rms = ctx.saved_tensors
    backward_op = torch.ops.opguide.rms_norm_backward
    grad_x, grad_weight = backward_op(grad_y, x, weight, inv_rms)
    return (
        grad_x if ctx.needs_input_grad[0] else None,
        grad_weight if ctx.needs_input_grad[1] else None,
        None,
    )


# %%
# The library's formula is C++ (next section); the page puts the Python one
# in its place for a while, in a :class:`torch.library.Library` of its own,
# checks it with ``gradcheck`` (float64) and against
# ``opguide.rms_norm_backward_reference`` (autograd through the reference):
forward = torch.ops.opguide.rms_norm_forward.default


def register_python_formula() -> torch.library.Library:
    """Registers the Python formula on ``opguide::rms_norm_forward``.

    Returns:
        The library that holds it; its ``_destroy()`` removes it.
    """
    lib = torch.library.Library("opguide", "FRAGMENT")
    with warnings.catch_warnings():
        # "Overriding a previously registered kernel": intended here.
        warnings.simplefilter("ignore")
        torch.library.register_autograd(
            "opguide::rms_norm_forward", backward, setup_context=setup_context, lib=lib
        )
    return lib


torch.manual_seed(0)
python_autograd = register_python_formula()
x64 = torch.randn(4, 3, 9, dtype=torch.float64, requires_grad=True)
w64 = torch.randn(9, dtype=torch.float64, requires_grad=True)
print(
    "gradcheck, Python formula:",
    torch.autograd.gradcheck(lambda a, b: forward(a, b, 1e-6)[0], (x64, w64)),
)
# The inputs, kept for the C++ formula below (the same tensors, fresh leaves):
inputs = {
    dtype: (torch.randn(64, 1000, dtype=dtype), torch.randn(1000, dtype=dtype))
    for dtype in (torch.float32, torch.bfloat16)
}
grad_ys = {dtype: torch.randn_like(x) for dtype, (x, _) in inputs.items()}
python_grads = {}
for dtype, (x0, w0) in inputs.items():
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    y, _ = forward(x, w, 1e-6)
    y.backward(grad_ys[dtype])
    python_grads[dtype] = (x.grad, w.grad)
    ref_x, ref_w = rms_norm_backward_reference(grad_ys[dtype], x, w)
    err_x = (x.grad.float() - ref_x.float()).abs().max().item()
    err_w = (w.grad.float() - ref_w.float()).abs().max().item()
    print(f"{str(dtype):15} max |error| grad_x {err_x:.1e}  grad_weight {err_w:.1e}")
python_autograd._destroy()

# %%
# ``gradcheck`` catches a backward that drops the second term of ``grad_x``:


@torch.library.custom_op("opguide_step8::rms_norm_wrong_grad", mutates_args=())
def rms_norm_wrong_grad(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.opguide.rms_norm(x, weight, 1e-6)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _wrong_backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    # grad_x misses its second term, -r^3/N x sum(...):
    return grad_y * weight * r, (grad_y * x * r).sum(0)


rms_norm_wrong_grad.register_autograd(_wrong_backward, setup_context=_setup)
x2 = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
w2 = torch.randn(5, dtype=torch.float64, requires_grad=True)
try:
    torch.autograd.gradcheck(rms_norm_wrong_grad, (x2, w2))
except GradcheckError as err:
    # The first line of the message; the Jacobians it prints next are long.
    print("GradcheckError:", str(err).splitlines()[0].rstrip(","))
else:
    raise AssertionError("gradcheck should reject the wrong formula")

# %%
# The formula in C++
# ------------------
# The formula is the operator's kernel for the ``Autograd`` key, which every
# device shares; the library writes it with ``torch::autograd::Function``.
# ``forward``'s call to ``rms_norm_forward`` reaches that ``Autograd`` kernel
# again, which, needing no gradient, goes below autograd
# (``at::AutoDispatchBelowADInplaceOrView``) instead of recursing. An
# undefined tensor from ``backward`` means "no gradient":
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_autograd.cpp
#    :language: cpp
#    :caption: csrc/rms_norm/rms_norm_autograd.cpp
#
# ``opguide::rms_norm`` has the same formula: without gradients it runs the
# inference kernel; with them the training forward, under ``RmsNormWithGrad``,
# which returns ``y`` alone. Every backend (the CUDA one too) keeps one
# contract:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm.h
#    :language: cpp
#    :caption: csrc/rms_norm/rms_norm.h, the contract
#    :start-after: // [backward-contract]
#    :end-before: inline at::ScalarType rms_norm_acc_type
#
# The forward kernel of :doc:`step 2 <02_cpp_cpu_kernel>` stores ``inv_rms``
# where its pointer is not null; both forward operators share its host code:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_cpu.cpp
#    :language: cpp
#    :caption: csrc/rms_norm/rms_norm_cpu.cpp, the host functions
#    :start-at: at::Tensor rms_norm_cpu(const at::Tensor& x
#    :end-before: // [cpu-host-end]
#
# The C++ formula on the same inputs, against the reference and the Python
# formula, and the same ``gradcheck``:
apart = []
for dtype, (x0, w0) in inputs.items():
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    opguide.rms_norm(x, w).backward(grad_ys[dtype])
    ref_x, ref_w = rms_norm_backward_reference(grad_ys[dtype], x, w)
    err_x = (x.grad.float() - ref_x.float()).abs().max().item()
    err_w = (w.grad.float() - ref_w.float()).abs().max().item()
    print(f"{str(dtype):15} max |error| grad_x {err_x:.1e}  grad_weight {err_w:.1e}")
    py_x, py_w = python_grads[dtype]
    apart.append(max((x.grad.float() - py_x.float()).abs().max().item(),
                     (w.grad.float() - py_w.float()).abs().max().item()))  # fmt: skip
    print(f"{'':15} max |Python - C++| of the gradients {apart[-1]:.1e}")
print(
    "The two formulas give the same gradients, bit for bit."
    if max(apart) == 0
    else f"The two formulas' gradients differ by at most {max(apart):.1e}."
)
print(
    "gradcheck opguide.rms_norm:",
    torch.autograd.gradcheck(opguide.rms_norm, (x64, w64)),
)
print(
    "gradcheck torch.ops.opguide.rms_norm:",
    torch.autograd.gradcheck(
        lambda a, b: torch.ops.opguide.rms_norm(a, b, 1e-6),
        (x64, w64),
    ),
)

# %%
# What is saved for backward
# --------------------------
# :func:`torch.autograd.graph.saved_tensors_hooks` sees every tensor autograd
# keeps:
saved = []


def pack(t):
    saved.append(t)
    return t


x = torch.randn(4, 3, 512, dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(512, dtype=torch.bfloat16, requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    y = opguide.rms_norm(x, w)
for t in saved:
    shape = str(tuple(t.shape))
    print(f"saved {shape:14} {t.dtype}  is x: {t is x}  is weight: {t is w}")
print(f"saved bytes beyond the inputs: {saved[-1].nbytes} (y has {y.nbytes})")

# %%
# The backward kernel
# -------------------
# Per row: one reduction (``dot``), then one loop that writes ``grad_x`` and
# adds the row's terms of ``grad_weight``:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_cpu.cpp
#    :language: cpp
#    :start-after: // [cpu-backward-kernel]
#    :end-before: // [cpu-backward-kernel-end]
#
# ``grad_weight`` sums over rows split among threads. Instead of atomics,
# whose order changes the bits, each fixed-size chunk of rows (its size set
# by the shape alone) owns a row of partial sums, added in order at the end:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_cpu.cpp
#    :language: cpp
#    :start-after: // [cpu-backward-host]
#    :end-before: // [cpu-backward-host-end]
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_cpu.cpp
#    :language: cpp
#    :start-after: // [cpu-backward-register]
#    :end-before: // [cpu-backward-register-end]

# %%
# How fast is the backward?
# -------------------------
# On the CPU, one (2048, 4096) float32 input, the two interleaved: the C++
# backward against autograd's backward of step 1's Python operations.


def median_ms(fn, repeat=9):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


x = torch.randn(2048, 4096)
w = torch.randn(4096)
grad_y = torch.randn_like(x)
_, inv_rms = torch.ops.opguide.rms_norm_forward(x, w, 1e-6)
xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
y_ref = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * wr
backwards = {
    "opguide::rms_norm_backward": lambda: torch.ops.opguide.rms_norm_backward(
        grad_y, x, w, inv_rms
    ),
    "autograd of the Python ops": lambda: torch.autograd.grad(
        y_ref, (xr, wr), grad_y, retain_graph=True
    ),
}
times = {name: [] for name in backwards}
for _ in range(3):  # the two interleaved, so that a slow spell of the machine hits both
    for name, fn in backwards.items():
        times[name].append(median_ms(fn, repeat=3))
for name, runs in times.items():
    spread = f"(runs {min(runs):.2f}-{max(runs):.2f})"
    print(f"{name:28} {statistics.median(runs):7.2f} ms {spread}")
kernel_runs, python_runs = times.values()
kernel, python_ops = statistics.median(kernel_runs), statistics.median(python_runs)
if max(kernel_runs) < min(python_runs):
    verdict = "faster in every run"
elif min(kernel_runs) > max(python_runs):
    verdict = "slower in every run"
else:
    verdict = "the runs overlap: no clear difference"
print(
    f"The C++ backward takes {kernel / python_ops:.2f}x the time of autograd's\n"
    f"backward of the Python ops here, median of 3 runs ({verdict})."
)


# %%
# ``torch.compile``: forward and backward
# ---------------------------------------
# AOTAutograd derives the backward graph from the operator's formula; a
# backend that records the two graphs shows what each holds:
graphs = {}


def recorder(kind):
    def compiler(gm, example_inputs):
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        graphs[kind] = [str(n.target) for n in calls]
        return make_boxed_func(gm.forward)

    return compiler


def loss_fn(x, w):
    # The operator itself in the graph (compiled="kernel", the default; see
    # opguide.backends).
    return (opguide.rms_norm(x, w) * 2.0).sum()


x = torch.randn(8, 64, requires_grad=True)
w = torch.randn(64, requires_grad=True)
backend = aot_autograd(
    fw_compiler=recorder("forward"),
    bw_compiler=recorder("backward"),
)
torch._dynamo.reset()
torch.compile(loss_fn, backend=backend, fullgraph=True)(x, w).backward()
for kind, ops in graphs.items():
    print(f"{kind:8} graph: {', '.join(op for op in ops if 'getitem' not in op)}")
assert "opguide.rms_norm_backward.default" in graphs["backward"]

# %%
# With Inductor and dynamic shapes, against the reference:
torch._dynamo.reset()
compiled = torch.compile(loss_fn, fullgraph=True, dynamic=True)
start = time.perf_counter()
for shape in [(8, 64), (33, 200)]:
    x = torch.randn(shape, requires_grad=True)
    w = torch.randn(shape[-1], requires_grad=True)
    compiled(x, w).backward()
    ref_x, ref_w = rms_norm_backward_reference(torch.full(shape, 2.0), x, w)
    torch.testing.assert_close((x.grad, w.grad), (ref_x, ref_w))
    print(f"compiled {shape}: gradients match the reference")
print(f"(compile and run: {time.perf_counter() - start:.1f} s)")

# %%
# Python or C++: the cost per call
# --------------------------------
# Each formula in force in turn, three times each: one call at a decode
# shape, (1, 4096), best of five runs of 2000 calls, without gradients and
# with a backward.


def per_call_us(fn, calls=2000):
    for _ in range(100):
        fn()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return min(runs)


x = torch.randn(1, 4096)
w = torch.randn(4096)
xg, wg, g = x.clone().requires_grad_(), w.clone().requires_grad_(), torch.randn(1, 4096)


def costs():
    no_grad = per_call_us(lambda: forward(x, w, 1e-6))
    train = per_call_us(lambda: torch.autograd.grad(forward(xg, wg, 1e-6)[0], (xg, wg), g))
    return no_grad, train


runs = {"C++ (the library)": [], "Python (register_autograd)": []}
for _ in range(3):  # the two in turn, so that a slow spell of the machine hits both
    runs["C++ (the library)"].append(costs())
    python_autograd = register_python_formula()
    runs["Python (register_autograd)"].append(costs())
    python_autograd._destroy()
cost = {
    name: tuple(statistics.median(r[i] for r in found) for i in range(2))
    for name, found in runs.items()
}
print(f"{'autograd kernel':28} {'no grad':>9} {'forward+backward':>9}   (us a call, median)")
print("(no grad: inputs that do not require grad, called in grad mode)")
for name, (no_grad, train) in cost.items():
    print(f"{name:28} {no_grad:9.1f} {train:9.1f}")
print(f"({torch.get_num_threads()} threads, {x.device})")
for i, what in enumerate(("without gradients", "with a backward")):
    cpp_runs = [r[i] for r in runs["C++ (the library)"]]
    py_runs = [r[i] for r in runs["Python (register_autograd)"]]
    cpp_mid, py_mid = statistics.median(cpp_runs), statistics.median(py_runs)
    spans = f"C++ {min(cpp_runs):.2f}-{max(cpp_runs):.2f} us, "
    spans += f"Python {min(py_runs):.2f}-{max(py_runs):.2f} us"
    if max(cpp_runs) >= min(py_runs) and max(py_runs) >= min(cpp_runs):
        print(f"{what}: no measurable difference (the three runs overlap: {spans})")
    else:
        more = "more" if py_mid > cpp_mid else "less"
        print(
            f"{what}: the Python kernel costs {abs(py_mid - cpp_mid):.1f} us a call {more} "
            f"({(py_mid - cpp_mid) / cpp_mid:+.0%} of the C++ call; {spans})"
        )
# Both timings of this page, the median as a bar and each run as a dot:
_ = bars_figure(
    {
        "backward, (2048, 4096) float32: ms a call, 3 runs": times,
        **{
            f"one call at (1, 4096), {what}: us, 3 runs": {
                name: [r[i] for r in found] for name, found in runs.items()
            }
            for i, what in enumerate(("no grad", "forward+backward"))
        },
    },
    f"Autograd on the CPU, {torch.get_num_threads()} threads (measured live)",
)

# %%
# The ``Autograd`` kernel runs on every call, gradients or not; only
# ``inference_mode`` skips it (`Inference Mode
# <https://docs.pytorch.org/docs/stable/notes/autograd.html#inference-mode>`__).
# The last lines above say what the Python one costs here. Pick Python first;
# C++ where the call must be cheap, or where a program without Python needs
# gradients.

# %%
# ``register_autograd`` or ``torch.autograd.Function``?
# ------------------------------------------------------
# The same pair wired with a :class:`torch.autograd.Function`:


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, inv_rms = torch.ops.opguide.rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, inv_rms)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, inv_rms = ctx.saved_tensors
        backward_op = torch.ops.opguide.rms_norm_backward
        grad_x, grad_weight = backward_op(grad_y, x, weight, inv_rms)
        return grad_x, grad_weight, None


x = torch.randn(16, 128, requires_grad=True)
w = torch.randn(128, requires_grad=True)
g1 = torch.autograd.grad(RMSNormFunction.apply(x, w, 1e-6).sum(), (x, w))
g2 = torch.autograd.grad(opguide.rms_norm(x, w).sum(), (x, w))
print("autograd.Function gives the same gradients:", all(map(torch.equal, g1, g2)))

# %%
# Dynamo traces both with ``fullgraph=True``:
python_autograd = register_python_formula()
wirings = {
    "register_autograd": lambda a, b: forward(a, b, 1e-6)[0],
    "torch.autograd.Function": lambda a, b: RMSNormFunction.apply(a, b, 1e-6),
}
for name, f in wirings.items():
    torch._dynamo.reset()
    out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), (x, w)), g2)
    print(f"{name:24} compiles with fullgraph=True; gradients match eager mode")
python_autograd._destroy()
torch._dynamo.reset()

# %%
# ``register_autograd`` attaches the formula to the **operator**: every
# caller gets it, from Python, C++ or an exported program, and ``opcheck``
# tests it. ``torch.autograd.Function`` attaches it to a **Python function**:
# only callers of ``RMSNormFunction.apply`` get it, which suits a model-local
# trick that need not be an operator. Double backward is not supported:
# ``rms_norm_backward`` has no formula of its own.
#
# When you change a backward
# --------------------------
# ``torch.compile`` keeps compiled graphs on disk (the FX graph and
# AOTAutograd caches, under ``/tmp/torchinductor_$USER`` by default) and keys
# them on the graph it traced, in which your operator is a name. What the
# operator's autograd kernel calls is not in the key, as for PyTorch's own
# operators (`pytorch#144344
# <https://github.com/pytorch/pytorch/issues/144344>`__). After you change a
# backward, or rename an operator it calls, a process can load a graph compiled
# from the old build: it computes the old gradients, or fails with "no
# attribute" on the old name. Clear the cache folder after such a rebuild, or
# give each build its own with ``TORCHINDUCTOR_CACHE_DIR``.
#
# What's next
# -----------
# The CUDA kernels of the pair are in ``csrc/rms_norm/rms_norm_cuda.cu``
# (:doc:`step 3 <03_cuda_kernel>`); :doc:`step 9 <09_triton_kernel>` writes
# them in Triton.

# %%
# The files of this step, whole
# -----------------------------
# The file this page showed in parts:
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward_cpu.cpp
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_cpu.cpp
#       :language: cpp
#       :caption: csrc/rms_norm/rms_norm_backward_cpu.cpp
