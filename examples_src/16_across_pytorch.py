r"""
Step 16: The operator across PyTorch
====================================

An operator that passes ``opcheck`` and ``torch.compile`` still meets more of
PyTorch in a user's hands: a model exported and compiled ahead of time for a
server with no Python, ``torch.vmap``, mixed precision, ``out=`` buffers and
CUDA graphs. Each needs something registered, or a contract kept, and each
section below runs it.

In this step you will learn:

* how a model that calls the operator goes through ``torch.export`` and
  AOTInductor into a package meant to run without Python's ``opguide`` (the
  cells say whether it ran here, and the last line of the GPU section how
  it did on a GPU),
  and why a Python-only ``custom_op`` cannot;
* how to give an operator a ``vmap`` rule, and where ``torch.func`` stops;
* what the operator does under ``torch.autocast``, and how that is registered;
* the ``out`` tag, which lets Inductor hand the kernel a buffer of its own
  memory plan; why the fused op's mutation fits neither ``inplace`` nor
  ``out``;
* capturing the operators in a CUDA graph, by hand and with
  ``torch.compile(mode="reduce-overhead")``, and what ``cudagraph_unsafe``
  is for;
* how ``FlopCounterMode`` counts the operator's FLOPs, and the bytes it must
  move at the least.

On a machine with a CUDA GPU the GPU sections run live; without one they show
the output recorded on a GPU, with its device and date.
"""

# %%
# A small model
# -------------
# Two norms around a linear layer: ``opguide.rms_norm`` and the fused
# residual-add norm of :doc:`step 10 <10_patterns>`, which updates
# ``residual`` in place.
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

import opguide
from guidekit import compile_checks
from guidekit.recorded import pages, sources
from opguide import _library

# sphinx_gallery_thumbnail_path = "_thumbnails/16.png"
# torch.export warns about its own internals (pytree specs) on some releases.
warnings.filterwarnings("ignore", category=FutureWarning)
ROOT = compile_checks.source_root()
OUT = ROOT / "build" / "across_pytorch"
OUT.mkdir(parents=True, exist_ok=True)
HAVE_GPU = torch.cuda.is_available()
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name() if HAVE_GPU else 'none'}")


class Block(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.proj = torch.nn.Linear(n, n)
        self.w1 = torch.nn.Parameter(torch.rand(n) + 0.5)
        self.w2 = torch.nn.Parameter(torch.rand(n) + 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        # A traced call (export too) keeps opguide's operators in the graph
        # (compiled="kernel", the default).
        h = opguide.rms_norm(x, self.w1)
        residual = residual.clone()  # the fused op updates it in place
        out, _ = opguide.fused_add_rms_norm_(self.proj(h), residual, self.w2)
        return out, residual


# %%
# torch.export and AOTInductor
# ----------------------------
# :func:`torch.export.export` traces the model into a graph of ATen and
# ``opguide`` operators; the fake kernels of :doc:`step 5 <05_bindings_and_registration>`
# give it the shapes. The mutation of ``residual`` shows as a plain call of
# the mutating op: the schema's ``Tensor(a!)`` tells export what it writes.
torch.manual_seed(0)
model = Block(64).eval().requires_grad_(False)  # inference: the rms_norm op
x, residual = torch.randn(8, 64), torch.randn(8, 64)
exported = torch.export.export(model, (x, residual))
print(exported.graph_module.code.strip())


# %%
# :func:`torch._inductor.aoti_compile_and_package` compiles the graph into a
# ``.pt2`` package: C++ (and, on a GPU, Triton kernels compiled to cubins) for
# the ATen parts, and calls by name for the ``opguide`` operators.
def package(device: str) -> tuple[Path, Path]:
    m = Block(64).to(device).eval().requires_grad_(False)
    m.load_state_dict(model.state_dict())
    args = (x.to(device), residual.to(device))
    ep = torch.export.export(m, args)
    path = OUT / f"block_{device}.pt2"
    start = time.perf_counter()
    torch._inductor.aoti_compile_and_package(ep, package_path=str(path))
    print(
        f"{device}: compiled {path.name} ({path.stat().st_size / 1e3:.0f} kB) "
        f"in {time.perf_counter() - start:.0f} s"
    )
    io = OUT / f"io_{device}.pt"
    expected = m(*args)
    torch.save({"args": args, "expected": expected}, io)
    return path, io


cpu_package, cpu_io = package("cpu")

# %%
# A fresh Python process is given the package and the compiled operator
# library, ``opguide/_C.abi3.so`` (what registers ``opguide::rms_norm`` and
# its kernels), and nothing of ``opguide``'s Python code; a C++ program would
# link the same library next to libtorch's AOTInductor runtime. The line below
# says how it went: the outputs compared with eager mode, or the failure.
RUNNER = """
import sys, torch
torch.ops.load_library(sys.argv[1])
runner = torch._inductor.aoti_load_package(sys.argv[2])
io = torch.load(sys.argv[3])
got = runner(*io["args"])
for g, e in zip(got, io["expected"]):
    torch.testing.assert_close(g, e)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opguide")
name = sys.argv[2].rsplit('/', 1)[-1]
print(f"ran {name}: outputs match eager; opguide modules imported: {loaded}")
"""


TORCH_2_13 = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)


def plain_package_loads(device: str) -> bool:
    """Whether a fresh process loads and runs a package of a plain nn.Linear."""
    path = OUT / f"linear_{device}.pt2"
    linear = torch.nn.Linear(8, 8).to(device)
    ep = torch.export.export(linear, (torch.randn(2, 8, device=device),))
    torch._inductor.aoti_compile_and_package(ep, package_path=str(path))
    load = f"torch._inductor.aoti_load_package({str(path)!r})"
    code = f"import torch; {load}(torch.randn(2, 8, device={device!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def run_fresh(pt2: Path, io: Path, device: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, _library.library_path(), str(pt2), str(io)],
        capture_output=True,
        text=True,
        cwd=OUT,
    )
    if result.returncode != 0 and not TORCH_2_13:
        # On the GPU machine of this page's record (torch 2.11) a fresh
        # process crashed loading the package. The control below says whether
        # a plain Linear's package crashes there too, that is, whether the
        # crash is this operator's or that torch's and machine's.
        plain = plain_package_loads(device)
        return (
            f"the fresh process FAILED with exit code {result.returncode} on torch "
            f"{torch.__version__}; a package of a plain torch.nn.Linear "
            + (
                "loads and runs there"
                if plain
                else "crashes there too: this torch, on this machine, "
                "cannot load AOTInductor packages in a fresh process"
            )
        )
    assert result.returncode == 0, (
        f"exit code {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout.strip()


print(run_fresh(cpu_package, cpu_io, "cpu"))

# %%
# A Python-only ``custom_op`` is registered by running Python: the package
# names it, and a process without that Python has no such operator. The
# failure comes when the package is loaded:
PY_OP = """
import torch
@torch.library.custom_op("pydemo::scale", mutates_args=())
def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s
@scale.register_fake
def _(x, s):
    return torch.empty_like(x)
class M(torch.nn.Module):
    def forward(self, x):
        return scale(x, 2.0) + 1
ep = torch.export.export(M(), (torch.randn(4, 8),))
torch._inductor.aoti_compile_and_package(ep, package_path="pydemo.pt2")
"""
LOAD = "import torch; torch._inductor.aoti_load_package('pydemo.pt2')"
env = dict(os.environ, PYTHONWARNINGS="ignore")
subprocess.run([sys.executable, "-c", PY_OP], cwd=OUT, check=True, capture_output=True, env=env)
failed = subprocess.run([sys.executable, "-c", LOAD], cwd=OUT, capture_output=True, text=True)
print("loading the package of a Python-only custom_op in a fresh process:")
# The last line of the error, up to the end of its first sentence.
message = failed.stderr.strip().splitlines()[-1]
print("  " + message.split(". ")[0].rstrip(".") + ".")
assert failed.returncode != 0

# %%
# To serve a Python-free runtime, define the operator in C++ (``TORCH_LIBRARY``,
# as this guide's library does) and ship the compiled library with the
# package. A Triton kernel written with ``torch.library.triton_op`` is meant
# to be the other way: Inductor compiles the kernel into the package itself
# (:func:`torch.library.triton_op`'s documentation). Whether the package of
# this page's block loaded on a GPU is the last line of the GPU cell below.
#
# vmap
# ----
# :func:`torch.vmap` runs a function written for one example over a batch.
# An operator without a rule still runs under it, one example at a time,
# through functorch's fallback loop, which warns of "a performance drop"
# (`BatchedFallback.cpp
# <https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/functorch/BatchedFallback.cpp>`__);
# ``torch.library.register_vmap`` gives the rule. For ``rms_norm`` the batch
# is just more rows, so one call serves it when the weight is shared:
#
# .. literalinclude:: /../opguide/ops.py
#    :language: python
#    :start-after: [vmap-rms-norm]
#    :end-before: [vmap-rms-norm-end]
#    :caption: opguide/ops.py (the vmap rules)
torch.manual_seed(0)
xs = torch.randn(5, 3, 64)  # 5 examples of shape (3, 64)
w = torch.rand(64) + 0.5
ws = torch.rand(5, 64) + 0.5  # one weight per example
loop = torch.stack([opguide.rms_norm(xs[i], w) for i in range(5)])
torch.testing.assert_close(torch.vmap(lambda a: opguide.rms_norm(a, w))(xs), loop)
loop_w = torch.stack([opguide.rms_norm(xs[i], ws[i]) for i in range(5)])
torch.testing.assert_close(torch.vmap(opguide.rms_norm)(xs, ws), loop_w)
print("vmap over x, and over x and weight: equal to a loop over the batch")

# %%
# Training through ``vmap`` works as usual (the backward runs on the whole
# batch outside the transform). The function transforms of ``torch.func``
# (``grad``, ``vjp``, ``jacrev``) need every autograd formula they meet to be
# one they can transform. The cell below tries two: a C++
# ``torch::autograd::Function``, which the library registers
# (:doc:`step 8 <08_autograd>`), and the Python one that ``register_autograd``
# builds; its output says whether this torch transforms each. Where neither
# works, a per-example gradient needs a
# ``torch.autograd.Function`` of your own, with ``setup_context`` and a
# ``vmap`` method. The cell asks this torch for per-example gradients,
# ``vmap(grad)``, and checks them against ``F.rms_norm``'s where it gives them:
wr = w.clone().requires_grad_()
torch.vmap(lambda a: opguide.rms_norm(a, wr))(xs).square().sum().backward()
via_vmap = wr.grad.clone()
wr.grad = None
sum(opguide.rms_norm(xs[i], wr).square().sum() for i in range(5)).backward()
torch.testing.assert_close(via_vmap, wr.grad)
print("backward through vmap: the weight's gradient equals the loop's")


def loss(a, norm):
    return norm(a).square().sum()


def ours(a):
    return opguide.rms_norm(a, w)


def torchs(a):
    return torch.nn.functional.rms_norm(a, (64,), w, 1e-6)


try:
    per_example = torch.vmap(torch.func.grad(lambda a: loss(a, ours)))(xs)
except RuntimeError as error:
    print("vmap(torch.func.grad):", str(error).split(". For more")[0] + ".")
    print("so a per-example gradient through opguide.rms_norm needs a Function of your own")
else:
    expected = torch.vmap(torch.func.grad(lambda a: loss(a, torchs)))(xs)
    torch.testing.assert_close(per_example, expected)
    print("vmap(torch.func.grad): worked, equal to F.rms_norm's per-example gradients")

# The same question for a formula registered from Python: an operator whose
# backward comes from ``register_autograd``.
transforms_lib = torch.library.Library("opguide_transforms", "DEF")
transforms_lib.define("scale(Tensor x) -> Tensor")
transforms_lib.impl("scale", lambda a: a * 3, "CompositeExplicitAutograd")
torch.library.register_autograd(
    "opguide_transforms::scale", lambda ctx, grad: grad * 3, lib=transforms_lib
)
try:
    torch.func.grad(lambda a: torch.ops.opguide_transforms.scale(a).sum())(xs[0])
    print("torch.func.grad through a register_autograd formula: worked")
except RuntimeError as error:
    pages.say(f"torch.func.grad, register_autograd: {str(error).split('. For more')[0]}.")


# %%
# Autocast
# --------
# In a :class:`torch.autocast` region matmuls run in bfloat16 or float16 and
# the values that reach a norm are often a bfloat16 activation and a float32
# weight, a pair the kernels (and their checks) refuse. PyTorch's own
# ``layer_norm`` runs in float32 in a CUDA autocast region and keeps the
# input's dtype on CPU (the table below is CPU's; the CUDA rows are in the GPU
# section at the end of the page); ``opguide`` registers the float32 policy on
# CPU and CUDA alike:
#
# .. literalinclude:: /../opguide/ops.py
#    :language: python
#    :start-after: [autocast-rms-norm]
#    :end-before: [autocast-rms-norm-end]
#    :caption: opguide/ops.py (autocast)
#
# The fused op is left out: it writes into ``residual``, and a cast would hand
# the kernel a copy, so the update would be lost. It runs with the dtypes it
# is given (``out_dtype`` chooses the output's).
def autocast_table(device: str) -> list[str]:
    lines = []
    w32 = torch.rand(64, device=device) + 0.5
    for x_dtype in (torch.bfloat16, torch.float16, torch.float32):
        xa = torch.randn(4, 64, device=device, dtype=x_dtype)
        with torch.autocast(device, dtype=torch.bfloat16):
            y = opguide.rms_norm(xa, w32)
            yt = torch.nn.functional.layer_norm(xa, (64,), w32)
        short = str(x_dtype).removeprefix("torch.")
        lines.append(
            f"{device:4} x {short:8} -> opguide.rms_norm {str(y.dtype)[6:]:8} "
            f"F.layer_norm {str(yt.dtype)[6:]}"
        )
    return lines


print("torch.autocast(dtype=torch.bfloat16), weight float32:")
print("\n".join(autocast_table("cpu")))

# %%
# Mutation contracts: the ``out`` and ``inplace`` tags
# ----------------------------------------------------
# Two tags of PyTorch's `tags.yaml
# <https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/tags.yaml>`__
# describe how a custom operator writes. ``inplace``: the op writes
# its first positional argument and returns it (``x.add_(y)``). ``out``:
# the op writes keyword-only ``Tensor(a!)`` buffers that it never reads, and
# returns exactly them (``torch.add(x, y, out=z)``). When a functional op has
# an ``out``-tagged overload with the same other arguments, Inductor calls
# that overload on a buffer from its own memory plan, which it can reuse,
# instead of letting the kernel allocate.
#
# The fused op fits neither tag. It reads ``residual`` before writing it, so
# ``residual`` is no ``out`` buffer; and it is not its first argument, nor what
# it returns, so it is no ``inplace`` op. Its schema says exactly what it
# does, ``Tensor(a!) residual``, and that is what export, functionalization
# and Inductor need: above, export kept the call, and where the fresh process
# ran AOTInductor's package (the output above says whether it did), its
# updated ``residual`` was checked against eager mode's.
# ``rms_norm`` could have an ``out`` overload; ``opguide`` has none, for the
# reason given below.
#
# On a torch that has the tag (``torch.Tag.out``), a small operator pair
# defined here (``demo::twice`` and its tagged ``demo::twice.out``) shows it at
# work: the cell prints the call of ``demo.twice`` in Inductor's code, the
# ``out`` overload where Inductor uses it.
from torch._inductor.utils import run_and_get_code

HAVE_OUT_TAG = hasattr(torch.Tag, "out")
if HAVE_OUT_TAG:
    demo = torch.library.Library("demo", "DEF")
    demo.define("twice(Tensor x) -> Tensor")
    demo.define("twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", tags=(torch.Tag.out,))
    demo.impl("twice", lambda t: t * 2, "CompositeExplicitAutograd")
    demo.impl("twice.out", lambda t, *, out: out.copy_(t * 2), "CompositeExplicitAutograd")
    torch.library.register_fake("demo::twice", lambda t: torch.empty_like(t), lib=demo)
    torch.library.register_fake("demo::twice.out", lambda t, *, out: out, lib=demo)
    compiled = torch.compile(lambda a: torch.ops.demo.twice(a + 1) - 1)
    _, (code, *_) = run_and_get_code(compiled, x)
    lines = [line.strip() for line in code.splitlines()]
    calls = [line for line in lines if "demo.twice" in line and "#" not in line]
    print("Inductor calls:", calls[0] if calls else "(no call of demo.twice found)")
else:
    print(f"torch {torch.__version__} has no torch.Tag.out: this part needs torch 2.13 or later")


# %%
# And the reason ``opguide`` does without one: AOTInductor's C++ wrapper
# turns that ``out`` call into a call of an ATen C shim function named after
# the operator, which torch provides only for ATen's own operators, and this
# cell supplies none (:doc:`step 20 <20_your_operator_in_a_model>` supplies
# one for a functional operator through ``custom_ops_to_c_shims``), so the
# package fails to compile. On a torch that has the tag, the cell tries it and prints
# what happened:
class Twice(torch.nn.Module):
    def forward(self, a):
        return torch.ops.demo.twice(a + 1) - 1


if HAVE_OUT_TAG:
    try:
        torch._inductor.aoti_compile_and_package(
            torch.export.export(Twice(), (x,)), package_path=str(OUT / "twice.pt2")
        )
        print("AOTInductor compiled the tagged pair")
    except Exception as error:  # torch._inductor.exc.InductorError
        lines = [line for line in str(error).splitlines() if "error:" in line]
        first = lines[0].split("error: ", 1)[1] if lines else str(error).splitlines()[0]
        pages.say(f"AOTInductor: {first}")
else:
    print(f"skipped: torch {torch.__version__} has no torch.Tag.out, so there is no tagged pair")

# %%
# CUDA graphs
# -----------
# A CUDA graph records a sequence of kernel launches once and replays it with
# one launch. An operator is safe to capture when it launches on PyTorch's
# current stream (the capture stream), allocates through PyTorch's allocator,
# and never waits on the GPU from the CPU (no ``.item()``, no
# ``cudaDeviceSynchronize``, no host-side decision on device data). The C++
# wrappers follow the first two rules by construction
# (:doc:`step 3 <03_cuda_kernel>`), and no opguide operator synchronises. An
# operator that cannot follow them carries the ``cudagraph_unsafe`` tag
# (``torch.Tag.cudagraph_unsafe``): Inductor then splits the graph around it
# and replays the rest, as the tag's description in ``tags.yaml`` says (the
# split is Inductor's graph partition, ``torch._inductor.config.graph_partition``).
#
# The cell runs these on a GPU, or shows a recorded GPU run when there is none
# here; its last line says how the AOTInductor package of the block above did
# when loaded in a fresh process on the GPU.
RECORD = ROOT / "docs" / "recorded" / "across_pytorch_gpu.json"


def gpu_section() -> dict:
    """The GPU parts of this page: AOTInductor, autocast and CUDA graphs on CUDA."""
    with warnings.catch_warnings():
        # Inductor suggests TF32 for the float32 linear layer; the page keeps
        # float32 matmuls as they are, so the outputs compare with eager mode's.
        warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")
        return _gpu_section()


def _gpu_section() -> dict:
    lines = []
    pt2, io = package("cuda")
    lines.append(run_fresh(pt2, io, "cuda"))
    lines += autocast_table("cuda")
    # Capture by hand: static inputs, one capture, replay after new data.
    xg = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    rg = torch.randn_like(xg)
    wg = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as capture requires
        for _ in range(2):
            opguide.rms_norm(xg, wg)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    res_static = rg.clone()
    with torch.cuda.graph(graph):
        y_static = opguide.rms_norm(xg, wg)
        out_static, _ = opguide.fused_add_rms_norm_(y_static, res_static, wg)
    xg.copy_(torch.randn_like(xg))
    res_static.copy_(rg)
    graph.replay()
    torch.cuda.synchronize()
    y_ref = opguide.rms_norm(xg, wg)
    res_ref = rg.clone()
    out_ref, _ = opguide.fused_add_rms_norm_(y_ref, res_ref, wg)
    torch.testing.assert_close(out_static, out_ref)
    torch.testing.assert_close(res_static, res_ref)
    lines.append(
        "torch.cuda.graph: rms_norm + fused op captured; replay after new input "
        "matches eager (output and residual)"
    )
    # torch.compile(mode="reduce-overhead"): Inductor's CUDA graph trees.
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    block = Block(4096).cuda().to(torch.bfloat16).requires_grad_(False)
    step = torch.compile(block, mode="reduce-overhead")
    for _ in range(3):
        got = step(xg, rg)
    torch.testing.assert_close(got[0], block(xg, rg)[0], atol=2e-2, rtol=2e-2)
    skips = dict(counters["inductor"]).get("cudagraph_skips", 0)
    lines.append(
        f"torch.compile(mode='reduce-overhead'): outputs match eager; CUDA graphs skipped: {skips}"
    )
    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "lines": lines,
    }


def aoti_verdict(lines: list[str], where: str) -> str:
    """One sentence on the AOTInductor line of a GPU run (its first line)."""
    first = lines[0] if lines else ""
    if first.startswith("ran "):
        return f"AOTInductor {where}: the package ran in a fresh process and matched eager mode."
    if "FAILED" in first:
        plain = "crashes there too" in first
        code = re.search(r"exit code (-?\d+)", first)
        return (
            f"AOTInductor {where}: the package did NOT run; the fresh process failed"
            + (f" (exit code {code[1]})" if code else "")
            + (
                ", and so did a package of a plain nn.Linear, so that torch could not "
                "load any AOTInductor package there"
                if plain
                else ", while a plain nn.Linear package ran there"
            )
            + ". The lines above (autocast, CUDA graphs) ran."
        )
    return f"AOTInductor {where}: no result in this run."


if HAVE_GPU:
    result = gpu_section()
    print("\n".join(result["lines"][1:]))
    print(aoti_verdict(result["lines"], "on this GPU"))
    if os.environ.get("OPGUIDE_RECORD_GPU") == "1":
        RECORD.write_text(json.dumps(result, indent=2) + "\n")
        sources.stamp(RECORD)  # the hash of the sources it ran
        print(f"recorded to docs/recorded/{RECORD.name}")
elif RECORD.exists():
    recorded = json.loads(RECORD.read_text())
    print(
        f"No GPU here. Recorded on {recorded['device']} with torch {recorded['torch']}, "
        f"{recorded['date']}:"
    )
    pages.say_stale(RECORD.name)
    print("\n".join(recorded["lines"][1:]))
    print(aoti_verdict(recorded["lines"], f"in the recorded run ({recorded['device']})"))
else:
    print(
        "SKIPPED: no GPU here, and no recorded GPU run of this section "
        f"(docs/recorded/{RECORD.name}). tests/test_across_pytorch.py holds the same "
        "checks for a GPU machine."
    )

# %%
# Counting FLOPs and bytes
# ------------------------
# :class:`~torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of the
# operators it has a formula for, and an operator of your own has none until
# you register one with ``register_flop_formula``: a function of the shapes of
# the operator's arguments and outputs. The library registers one for each of
# its operators, and gives the bytes each must read and write at the least:
#
# .. literalinclude:: /../opguide/flops.py
#    :language: python
#    :caption: opguide/flops.py
#
# The fused op has no backward, so a training step takes its differentiable
# form. The table counts its forward and backward, by module; operators without
# a formula (the add, the square, the mean) are not counted:
from torch.utils.benchmark import Timer
from torch.utils.flop_counter import FlopCounterMode


class TrainingBlock(Block):
    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = opguide.rms_norm(x, self.w1)
        return opguide.rms_norm(residual + self.proj(h), self.w2)


block = TrainingBlock(64)
block.load_state_dict(model.state_dict())
with FlopCounterMode(display=False) as counter:
    block(x, residual).square().mean().backward()
print(counter.get_table())

# %%
# A call takes at least its bytes over the device's bandwidth, and at least
# its FLOPs over the device's FLOP rate; its FLOPs per byte, set against the
# device's FLOP rate over its bandwidth, says which is larger (the roofline).
# The bytes over a call's measured time give the bandwidth the
# kernel reached. The tensors below (32 MiB read and written) can fit in a
# large GPU's L2 (an H100's is 50 MB, by the `Hopper tuning guide
# <https://docs.nvidia.com/cuda/hopper-tuning-guide/index.html>`__), so on
# such a GPU calls repeated on them may read from the cache, and the figure
# is then not the memory's bandwidth:
device = "cuda" if HAVE_GPU else "cpu"
xb = torch.randn(4096, 1024, device=device)
wb = torch.rand(1024, device=device) + 0.5
with FlopCounterMode(display=False) as counter:
    opguide.rms_norm(xb, wb)
flop = counter.get_total_flops()
read, written = opguide.flops.min_bytes(torch.ops.opguide.rms_norm, xb, wb, 1e-6)
timer = Timer("opguide.rms_norm(xb, wb)", globals=globals())
seconds = timer.blocked_autorange(min_run_time=0.3).median
moved = read + written
print(
    f"opguide.rms_norm on {tuple(xb.shape)} {str(xb.dtype)[6:]}, {device}: "
    f"{flop / 1e6:.1f} MFLOP, {read / 1e6:.1f} MB read and {written / 1e6:.1f} MB "
    f"written at the least: {flop / moved:.2f} FLOP per byte"
)
print(
    f"one call: {seconds * 1e3:.2f} ms, {moved / seconds / 1e9:.1f} GB/s, "
    f"{flop / seconds / 1e9:.1f} GFLOP/s"
)

# %%
# What to take to your own operator
# ---------------------------------
# * For a Python-free deployment, define the op in C++ and ship the library;
#   keep the fake kernel in Python for export and compile.
# * ``register_vmap`` for any op a user may batch; ``register_autocast`` with
#   the dtype your kernel wants under mixed precision, and none for an op that
#   mutates its inputs.
# * ``Tensor(a!)`` on anything the op writes; an ``out``-tagged overload only
#   if the op need not go through AOTInductor (the section on the ``out`` and
#   ``inplace`` tags above shows why).
# * Launch on the current stream, allocate with PyTorch, never synchronise:
#   then CUDA graphs, by hand or through ``reduce-overhead``, just work.
# * Register a FLOP formula for each operator that computes, and write down
#   the bytes it must move: the two give its roofline.
