r"""
Step 8: Autograd
================

The steps so far built and called the forward; the backward that steps 6
and 7 already ran comes from this step. It starts with the shortest way: the
formula in Python, registered
with :func:`torch.library.register_autograd`. Then the same formula in C++,
with ``torch::autograd::Function``, which is how the library registers it, and
the C++ CPU kernel of the backward, an operator of its own,
``opguide::rms_norm_backward``.

In this step you will learn:

* how to derive the backward of RMSNorm, and what it needs from the forward;
* how to register the formula from Python (``register_autograd`` and a
  ``setup_context``), and how to check it with ``gradcheck``;
* how to register it in C++ (``torch::autograd::Function`` at the
  ``Autograd`` dispatch key), and what each way costs per call;
* how to change the forward so that it returns what the backward needs
  (``rms_norm_fwd``), and save only that, not a copy of the output;
* how to write the backward kernel: one read of each row from memory (two
  loops, the second finding the row in cache), float32 accumulation,
  and a ``grad_weight`` reduction that gives the same bits on any number of
  threads;
* how ``torch.compile`` traces forward and backward into one graph each;
* when ``torch.autograd.Function`` is the better tool.

The formula
-----------
Take one row ``x`` of length ``N`` with weight ``w``, the incoming gradient
``g = dL/dy``, and the row's inverse RMS ``r``::

    r         = 1 / sqrt(sum_k(x_k**2) / N + eps)
    y_j       = x_j * r * w_j

    dL/dw_j   = sum over rows of  g_j * x_j * r
    dL/dx_j   = r * g_j * w_j  -  x_j * r**3 / N * sum_k(g_k * w_k * x_k)

The second term of ``dL/dx`` comes from ``r`` depending on every ``x_k``
(``dr/dx_j = -r**3 * x_j / N``).

Backward needs ``x``, ``w``, ``g``, and one number per row, ``r``. It does
not need ``y``. The forward kernel computes ``r`` anyway, so the cheapest
design is to have the forward return it: one float per row, instead of
recomputing it (another pass over ``x``) or saving ``y`` (as large as
``x``).

The schemas
-----------
``opguide::rms_norm`` keeps its schema: inference code and earlier steps use
it. A training pair sits beside it: a forward that also returns ``inv_rms``
(``r`` above, one float32 per row) and the backward, which takes it:

.. literalinclude:: /../csrc/rms_norm/rms_norm_schema.cpp
   :language: cpp
   :start-after: // [schema-rms-norm-training]
   :end-before: // [schema-rms-norm-training-end]
"""

# %%
# The formula in Python
# ---------------------
# :func:`torch.library.register_autograd` attaches a backward to an operator
# from Python: ``setup_context`` runs after the forward and decides what to
# keep; ``backward`` receives one gradient per output and returns one per
# input, ``None`` where there is none. ``x`` and ``weight`` are inputs, so
# saving them keeps a reference, not a copy. ``inv_rms`` is marked
# non-differentiable: it is a by-product for the backward, and no gradient
# flows back through it. The backward calls the C++ backward operator (its
# kernel is further down); the project template of
# :doc:`step 18 <18_your_own_operator>` registers its operator this way.
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
# The library registers this formula in C++ (next section). To see the Python
# one at work, the page registers it on ``opguide::rms_norm_fwd`` in a
# :class:`torch.library.Library` of its own, in place of the C++ one, and
# removes it at the end of this section, which puts the C++ one back in force.
# :func:`torch.autograd.gradcheck` compares the backward with finite
# differences of the forward, element by element; it needs float64 inputs.
# ``opguide.rms_norm_backward_reference`` differentiates the reference
# forward with PyTorch's autograd, so it does not share the hand-derived
# formula it checks:
fwd = torch.ops.opguide.rms_norm_fwd.default


def register_python_formula() -> torch.library.Library:
    """Registers the Python formula on ``opguide::rms_norm_fwd``.

    Returns:
        The library that holds it; its ``_destroy()`` removes it.
    """
    lib = torch.library.Library("opguide", "FRAGMENT")
    with warnings.catch_warnings():
        # "Overriding a previously registered kernel": intended here.
        warnings.simplefilter("ignore")
        torch.library.register_autograd(
            "opguide::rms_norm_fwd", backward, setup_context=setup_context, lib=lib
        )
    return lib


torch.manual_seed(0)
python_autograd = register_python_formula()
x64 = torch.randn(4, 3, 9, dtype=torch.float64, requires_grad=True)
w64 = torch.randn(9, dtype=torch.float64, requires_grad=True)
print(
    "gradcheck, Python formula:",
    torch.autograd.gradcheck(lambda a, b: fwd(a, b, 1e-6)[0], (x64, w64)),
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
    y, _ = fwd(x, w, 1e-6)
    y.backward(grad_ys[dtype])
    python_grads[dtype] = (x.grad, w.grad)
    ref_x, ref_w = rms_norm_backward_reference(grad_ys[dtype], x, w)
    err_x = (x.grad.float() - ref_x.float()).abs().max().item()
    err_w = (w.grad.float() - ref_w.float()).abs().max().item()
    print(f"{str(dtype):15} max |error| grad_x {err_x:.1e}  grad_weight {err_w:.1e}")
python_autograd._destroy()

# %%
# ``gradcheck`` catches a wrong formula. Here is an operator whose backward
# drops the second term of ``grad_x`` (a plausible slip: forgetting that ``r``
# depends on ``x``):


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
# Autograd attaches to the operator, by name, as its kernel for the
# ``Autograd`` dispatch key, which every device shares. The library registers
# it in C++, with ``torch::autograd::Function``, the public C++ API: the same
# ``forward`` and ``backward`` as the Python pair above. ``Function::apply``
# turns grad mode off around ``forward`` and does not leave the ``Autograd``
# key: ``forward``'s call to
# ``opguide::rms_norm_fwd`` reaches that operator's ``Autograd`` kernel again,
# which, seeing that no gradient is needed (``needs_grad``), goes below
# autograd with ``at::AutoDispatchBelowADInplaceOrView``; without that check
# the call would recurse. ``forward`` saves what ``backward`` needs.
# ``backward`` returns one gradient per input of ``forward``; an undefined
# tensor means "no gradient" (for ``eps``, and for an input that does not
# require one):
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_autograd.cpp
#    :language: cpp
#    :caption: csrc/rms_norm/rms_norm_autograd.cpp
#
# ``opguide::rms_norm``, the operator the public wrapper calls, has the same
# formula: without gradients it runs the inference kernel, which writes no
# ``inv_rms``; with them, the training forward, under ``RmsNormWithGrad``,
# which returns ``y`` alone and keeps ``inv_rms`` saved. A caller of
# ``torch.ops.opguide.rms_norm`` from Python or C++ gets the same backward as
# ``opguide.rms_norm``. The file builds with the others (``setup.py`` compiles
# every ``.cpp`` of ``csrc/rms_norm/``).
#
# Every backend implements the same contract, written down next to the shared
# argument checks (the CUDA file of :doc:`step 3 <03_cuda_kernel>`,
# ``csrc/rms_norm/rms_norm_cuda.cu``, registers kernels for these same two
# operators with ``TORCH_LIBRARY_IMPL(opguide, CUDA, m)``):
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm.h
#    :language: cpp
#    :caption: csrc/rms_norm/rms_norm.h, the contract
#    :start-after: // [backward-contract]
#    :end-before: inline at::ScalarType rms_norm_acc_type
#
# The forward kernel of :doc:`step 2 <02_cpp_cpu_kernel>` stores ``inv_rms``
# for the row when asked to (its ``inv_rms`` pointer is null for the inference
# op). The host functions of both forward operators share one implementation:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_cpu.cpp
#    :language: cpp
#    :caption: csrc/rms_norm/rms_norm_cpu.cpp, the host functions
#    :start-at: at::Tensor rms_norm_cpu(const at::Tensor& x
#    :end-before: // [cpu-host-end]
#
# The C++ formula on the same inputs as the Python one above: its error
# against the reference, how far its gradients are from the Python formula's,
# and the same ``gradcheck``:
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
# :func:`torch.autograd.graph.saved_tensors_hooks` sees every tensor that
# autograd keeps. For a forward through ``opguide.rms_norm``: ``x``,
# ``weight`` and a float32 ``inv_rms`` with one value per row; not ``y``:
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
# adds this row's terms of ``grad_weight``; the second loop finds the row in
# cache. As in the forward, sixteen partial sums keep the reduction
# vectorisable:
#
# .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_cpu.cpp
#    :language: cpp
#    :start-after: // [cpu-backward-kernel]
#    :end-before: // [cpu-backward-kernel-end]
#
# ``grad_weight`` is a sum over all rows, and the rows are split over threads.
# Letting threads add into one shared buffer would need atomics, and the result
# would change from run to run with the order of the additions. Instead each
# fixed-size chunk of rows owns a row of partial sums; the chunk size depends
# only on the shape, and the chunks are added in order at the end. The result
# is the same for any number of threads:
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
# A first measurement, on the CPU, on one (2048, 4096) float32 input, median of
# several runs, the two interleaved: the C++ backward operator against the
# backward that autograd builds for the six-operator Python version of
# :doc:`step 1 <01_first_operator>`.


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
_, inv_rms = torch.ops.opguide.rms_norm_fwd(x, w, 1e-6)
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
# With ``fullgraph=True`` a graph break is an error, so a training step that
# compiles proves that Dynamo traced the forward and AOTAutograd derived the
# backward graph from the operator's autograd formula, using the fake kernels
# for shapes. A backend that only records the two graphs shows what ended up in
# each:
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
# The same with the default backend (Inductor), and dynamic shapes. The
# gradients match those of autograd through the reference:
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
# The same operator and kernels, with each formula in force in turn (the
# Python one registered again, as above, and removed after), three times
# each. Timed: one call at a decode shape, (1, 4096), best of five runs of
# 2000 calls, without gradients and with a backward.


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
    no_grad = per_call_us(lambda: fwd(x, w, 1e-6))
    train = per_call_us(lambda: torch.autograd.grad(fwd(xg, wg, 1e-6)[0], (xg, wg), g))
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
print(f"{'autograd kernel':28} {'no grad':>9} {'fwd+bwd':>9}   (us a call, median)")
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
            for i, what in enumerate(("no grad", "fwd+bwd"))
        },
    },
    f"Autograd on the CPU, {torch.get_num_threads()} threads (measured live)",
)

# %%
# The Python kernel runs on every call, with gradients or without: it is the
# ``Autograd`` kernel, and the dispatcher reaches it before the device's
# kernel whether or not an input requires grad (the "no grad" column); only
# ``inference_mode`` skips it (`Inference Mode
# <https://docs.pytorch.org/docs/stable/notes/autograd.html#inference-mode>`__).
# At large sizes the kernels' time hides this; at decode sizes it can be a
# visible share of the call (the last lines above
# measure it here). Pick Python for a first version and for an
# operator called on large tensors; pick C++ when the call itself must be
# cheap, or when a program with no Python interpreter calls the operator and
# needs gradients.

# %%
# ``register_autograd`` or ``torch.autograd.Function``?
# ------------------------------------------------------
# The same forward and backward can be wired with a
# :class:`torch.autograd.Function`:


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, inv_rms = torch.ops.opguide.rms_norm_fwd(x, weight, eps)
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
# Dynamo traces both: each compiles with ``fullgraph=True`` (no graph break)
# and gives the gradients of eager mode. The ``register_autograd`` one is the
# Python formula of the first section, registered again on
# ``opguide::rms_norm_fwd`` and removed after:
python_autograd = register_python_formula()
wirings = {
    "register_autograd": lambda a, b: fwd(a, b, 1e-6)[0],
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
# The difference is where the formula lives:
#
# * ``register_autograd`` attaches it to the **operator**, in the dispatcher.
#   Every caller gets it: ``torch.ops.opguide.rms_norm_fwd`` from Python or
#   C++, a ``torch.export``-ed program, and :func:`torch.library.opcheck`,
#   which tests it (``test_autograd_registration``). Use it for an operator
#   that others call: a library like opguide.
# * ``torch.autograd.Function`` attaches it to a **Python function**. Only
#   code that calls ``RMSNormFunction.apply`` gets this formula; an operator
#   with no formula registered of its own, called directly, gets none (opguide's
#   operators have their C++ one). Its ``forward`` may run any Python and any
#   number of operators, so it is the right tool for a model-local trick
#   (a custom gradient for a few existing operators, gradient clipping inside
#   a layer) that does not need to be an operator at all.
#
# Double backward (gradients of gradients) is not supported here:
# ``rms_norm_backward`` has no autograd formula of its own. It would need
# another registration on ``rms_norm_backward``, in the same way.
#
# What's next
# -----------
# The GPU kernels for ``rms_norm_fwd`` and ``rms_norm_backward`` are in
# ``csrc/rms_norm/rms_norm_cuda.cu`` (shown whole in :doc:`step 3 <03_cuda_kernel>`),
# registered against the same schemas and contract. The tests of
# :doc:`step 7 <07_the_tests>` run on the CPU; ``tests/test_rms_norm_cuda.py``
# checks the CUDA kernels, forward and backward, against the same references
# on a GPU. :doc:`Step 9 <09_triton_kernel>` writes the forward and the
# backward in Triton and registers them as another backend.

# %%
# The files of this step, whole
# -----------------------------
# The page above showed parts of these files; here each one is whole, as it
# is compiled and run.
#
# .. dropdown:: csrc/rms_norm/rms_norm_backward_cpu.cpp
#
#    .. literalinclude:: /../csrc/rms_norm/rms_norm_backward_cpu.cpp
#       :language: cpp
#       :caption: csrc/rms_norm/rms_norm_backward_cpu.cpp
