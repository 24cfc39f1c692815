r"""
Step 16: The operator across PyTorch
====================================

Part I's operator passes ``opcheck`` and ``torch.compile``. In a user's hands
it also meets the rest of PyTorch, and each section below runs one meeting:

* ``torch.export`` and an AOTInductor package loaded without ``opguide``'s
  Python (the output says whether it ran), and why a Python-only
  ``custom_op`` cannot be;
* a ``vmap`` rule, and where ``torch.func`` stops;
* ``torch.autocast``;
* the ``out`` tag, and why the fused op's mutation fits neither ``inplace``
  nor ``out``;
* CUDA graphs, by hand and with ``mode="reduce-overhead"``, and
  ``cudagraph_unsafe``;
* ``FlopCounterMode`` and the least bytes a call moves.

Without a CUDA GPU the GPU sections show a recorded GPU run, with its device
and date.
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
# :func:`torch.export.export` traces the model into ATen and ``opguide``
# operators, the fake kernels giving the shapes; the schema's ``Tensor(a!)``
# tells it what the fused op writes:
torch.manual_seed(0)
model = Block(64).eval().requires_grad_(False)  # inference: the rms_norm op
x, residual = torch.randn(8, 64), torch.randn(8, 64)
exported = torch.export.export(model, (x, residual))
print(exported.graph_module.code.strip())


# %%
# :func:`torch._inductor.aoti_compile_and_package` compiles it into a ``.pt2``
# package: generated code for the ATen parts, calls by name for ``opguide``'s:
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
# A fresh Python process gets the package and ``opguide/_C.abi3.so``, which
# registers the operators and their kernels, and nothing of ``opguide``'s
# Python. The line below says how it went: the outputs against eager mode, or
# the failure.
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
# A Python-only ``custom_op`` exists only where its Python ran, so the
# package fails to load without it:
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
# For a Python-free runtime, define the operator in C++ and ship the library
# with the package; or write the kernel with :func:`torch.library.triton_op`,
# which Inductor compiles into the package itself (its documentation).
#
# vmap
# ----
# Without a rule, :func:`torch.vmap` runs an operator one example at a time,
# warning of "a performance drop" (`BatchedFallback.cpp
# <https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/functorch/BatchedFallback.cpp>`__).
# ``torch.library.register_vmap`` gives the rule; for ``rms_norm`` with a
# shared weight the batch is more rows:
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
# ``torch.func``'s transforms (``grad``, ``vjp``) need formulas they can
# transform. The cell asks for per-example gradients, ``vmap(grad)``, through
# the library's C++ formula (:doc:`step 8 <08_autograd>`) and a
# ``register_autograd`` one, against ``F.rms_norm``'s; where neither works, a
# ``torch.autograd.Function`` with ``setup_context`` and a ``vmap`` method does:
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
# Under :class:`torch.autocast` a norm often gets a bfloat16 activation and a
# float32 weight, a pair the kernels refuse. ``layer_norm`` runs in float32 in
# a CUDA autocast region and keeps the input's dtype on CPU (the table below
# is CPU's; CUDA's is in the GPU section); ``opguide`` registers float32 on
# both:
#
# .. literalinclude:: /../opguide/ops.py
#    :language: python
#    :start-after: [autocast-rms-norm]
#    :end-before: [autocast-rms-norm-end]
#    :caption: opguide/ops.py (autocast)
#
# The fused op is left out: ``register_autocast`` "casts incoming
# floating-point Tensors to the target dtype" (its documentation), and a cast
# ``residual`` is a new tensor, so the kernel would write the copy and the
# caller's ``residual`` would keep its old values. It runs with the dtypes it
# is given.
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
# In PyTorch's `tags.yaml
# <https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/tags.yaml>`__,
# ``inplace`` ops write their first argument and return it (``x.add_(y)``);
# ``out`` ops write keyword-only buffers they never read and return them
# (``torch.add(x, y, out=z)``). Given a functional op's ``out``-tagged
# overload, Inductor calls it on a buffer of its own memory plan. The fused op
# fits neither: it reads ``residual`` before writing it, and ``residual`` is
# neither its first argument nor its return. ``Tensor(a!) residual`` says what
# it does, which is all export and Inductor need. Where the torch has
# ``torch.Tag.out``, a pair defined here (``demo::twice`` and
# ``demo::twice.out``) shows Inductor's call:
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
# ``opguide`` has no ``out`` overload: AOTInductor turns that call into an
# ATen C shim function named after the operator, which torch has only for its
# own operators (:doc:`step 20 <20_your_operator_in_a_model>` supplies one
# through ``custom_ops_to_c_shims``). Without one, the package:
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
# An operator is safe to capture in a CUDA graph when it launches on the
# current stream, allocates through PyTorch, and never waits on the GPU from
# the CPU. One that cannot carries ``torch.Tag.cudagraph_unsafe``, and
# Inductor replays the graph around it (``tags.yaml``; Inductor's
# ``graph_partition``). The cell's last line says how the AOTInductor package
# above did on the GPU:
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
# :class:`~torch.utils.flop_counter.FlopCounterMode` counts an operator of
# your own once ``register_flop_formula`` gives it a formula of the shapes.
# The library's, with the least bytes each operator moves:
#
# .. literalinclude:: /../opguide/flops.py
#    :language: python
#    :caption: opguide/flops.py
#
# A training step takes the fused op's differentiable form; operators
# without a formula (add, square, mean) go uncounted:
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
# A call takes at least its bytes over the bandwidth and its FLOPs over the
# FLOP rate (the roofline); bytes over measured time give the bandwidth
# reached. These 32 MiB can sit in an H100's 50 MB L2 (`Hopper tuning guide
# <https://docs.nvidia.com/cuda/hopper-tuning-guide/index.html>`__), so there
# the figure may be the cache's:
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
# * Python-free deployment: the op in C++, the library shipped; the fake
#   kernel stays in Python.
# * ``register_vmap`` for ops users batch; ``register_autocast`` except for
#   ops that mutate.
# * ``Tensor(a!)`` on what the op writes; an ``out`` overload only off
#   AOTInductor's path.
# * Current stream, PyTorch's allocator, no synchronisation: CUDA graphs work.
# * A FLOP formula and the least bytes: the roofline.
