r"""
Step 9.3: Ship a Triton kernel like a CUDA kernel
=================================================

:doc:`Step 9 <09_triton_kernel>`'s operators compile their Triton kernels
the first time a launch needs them, on the machine that runs them (just in
time: the JIT route), launch them through Triton's Python launcher, and
differentiate through a Python autograd formula. This step compiles the same
kernels when the library is built, for GPUs named at build time, and launches
them from C++, as Part I's CUDA kernels are launched.

In this step you will learn:

* what a call of the JIT route costs beside the CUDA route (recorded);
* how Triton compiles a kernel for a GPU that is not there, and how a build
  embeds what it compiled;
* how C++ finds a compiled kernel by a key and launches it, behind operators
  with the JIT operators' signatures and a C++ autograd formula;
* where the route does not apply, and what runs there;
* how to do it for your own kernel.

What the ahead-of-time route changes
------------------------------------
* **Compiled at build time, for named targets.** ``setup.py`` asks the
  library's own planners for every launch the C++ side can make on each
  target (``sm_90``, ``gfx942``, ...) and compiles each with Triton's public
  API, :func:`triton.compile` of a ``triton.compiler.ASTSource`` for a
  ``triton.backends.compiler.GPUTarget``. No GPU is needed.
* **Embedded in the extension.** The images (a ``cubin`` on NVIDIA, a
  ``hsaco`` on AMD) go into ``opguide/_C*.so`` as a table of
  ``csrc/triton_aot/artifacts.h``'s ``Artifact``, one per launch, named by a
  key.
* **Launched from C++.** Three operators with the signatures of step 9's:
  ``torch.ops.opguide.rms_norm_triton_aot``, ``rms_norm_forward_triton_aot``
  and ``rms_norm_backward_triton_aot``. Each call plans as the JIT route
  does, forms the keys of the kernels that plan needs, and launches them
  through the CUDA runtime's library API: no Python runs in a call that a
  compiled kernel fits.
* **The same plans.** ``csrc/triton_aot/plan.h`` ports the Registers plans
  of ``opguide/triton/launch.py`` (those that keep a whole row in registers,
  :doc:`step 9.2 <09_triton_kernel_2_long_rows>`), which stay the source of truth;
  ``tests/test_triton_aot_plan.py`` compares the two over every row length
  the plans cover.
* **C++ autograd**, as the CUDA route's (``triton_aot_autograd.cpp``).

:func:`opguide.rms_norm` with ``backend="triton"`` calls step 9's JIT
operators. The operators of this step are called directly, as
``torch.ops.opguide.rms_norm_triton_aot(x, weight, eps)``. The launcher
takes pointers and a stream, and needs from torch only an error-check macro
(``csrc/triton_aot/check.h``), so the stable-ABI wheel of :doc:`step 15
<15_one_wheel_for_every_torch>` ships the same forward.
"""

# %%
# Without a GPU, the JIT route runs in Triton's interpreter, chosen before
# anything imports ``triton``:
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# %%
# Why: the cost of a call (recorded)
# ----------------------------------
# ``tools/bench_per_call.py`` times eager calls, many in a row then one
# synchronisation, in rounds that take the routes in turn; the median and
# quartiles are over rounds. The JIT route against the CUDA route, per call:
import statistics

import opguide
import opguide.triton  # noqa: F401  (registers the JIT operators the fallback calls)
from guidekit.recorded.pages import recorded, say, select, show, table

record = recorded("triton_aot_<gpu>.json")
say(f"Triton {record['triton']}, {record['eager']['dtype']}; {record['command']}")
PER_CALL = record["per_call"]
CUDA, JIT, AOT = "opguide", "opguide triton", "opguide triton aot"
EMPTY, FLOOR = "empty Python Function", "x * w (autograd)"
SHAPES = list(dict.fromkeys((r["m"], r["n"]) for r in PER_CALL))
MODES = {"forward": "forward", "training": "forward+backward"}


def timing(mode: str, impl: str, shape: tuple[int, int]) -> dict:
    """The record's row of one route at one shape, in microseconds."""
    (row,) = select(PER_CALL, mode=mode, impl=impl, m=shape[0], n=shape[1])
    return {k: 1e6 * row[k] for k in ("median", "q1", "q3")}


def ratio(mode: str, ours: str, theirs: str, shape: tuple[int, int]) -> float:
    """``ours``' median time over ``theirs``'."""
    return timing(mode, ours, shape)["median"] / timing(mode, theirs, shape)["median"]


def overlap(a: dict, b: dict) -> bool:
    """Whether two timings' quartile ranges overlap: no measurable difference."""
    return not (a["q3"] < b["q1"] or b["q3"] < a["q1"])


def relation(a: dict, b: dict, theirs: str) -> str:
    """``a`` against ``b`` in words, from their quartiles; ``theirs`` names ``b``'s."""
    if overlap(a, b):
        return "no measurable difference"
    return f"quartiles {'below' if a['q3'] < b['q1'] else 'above'} {theirs}"


for mode, words in MODES.items():
    ratios = [ratio(mode, JIT, CUDA, s) for s in SHAPES]
    medians = ", ".join(
        f"{m}x{n} {timing(mode, JIT, (m, n))['median']:.0f} vs "
        f"{timing(mode, CUDA, (m, n))['median']:.0f} us"
        for m, n in SHAPES
    )
    say(
        f"{words}: the JIT route takes {min(ratios):.1f}x to {max(ratios):.1f}x the CUDA "
        f"route's time per call ({medians})"
    )

# %%
# Both routes run Triton kernels compiled from the same source; their GPU
# time is compared at the end of this page. The JIT route's call passes through Triton's
# Python launcher, and its forward+backward through a Python autograd
# formula; :doc:`step 11.2 <11_performance_2_eager>` times these layers.

# %%
# Compiling for a GPU that is not there
# -------------------------------------
# A launch is one kernel with its constexprs fixed (``BLOCK_N``, ``ROWS``,
# ...), its warps, and the way Triton specialises the row length N. The
# build asks :mod:`opguide.triton.launch`'s planners for them as they answer
# on a GPU of the target's kind: :func:`opguide.triton.aot_launches.device_model` makes
# ``torch.cuda`` report that GPU's compute capability and shared memory. Each
# launch has a key, a string the C++ side can form from its own plan:
import torch  # noqa: E402

from opguide.triton import aot  # noqa: E402

CUDA0 = torch.device("cuda", 0)
with aot.device_model("sm_90") as planner:
    plan = planner.forward_config(1, 4096, torch.bfloat16, CUDA0)
    pdl = planner.pdl_options(torch.empty(1, device="meta"))
say(f"sm_90, 1 row of 4096 bfloat16: {plan}")
print("programmatic dependent launch:", pdl)
constexprs = {"BLOCK_N": plan.block_n, "ROWS": plan.rows, "STORE_INV": True}
constexprs |= {"GDC": pdl["GDC"], "ALIGN": planner.align(4096)}
key = aot.key("rms_norm_forward", "sm_90", torch.bfloat16, constexprs, 4096, plan.num_warps)
print("key:", key)
FIELDS = ("kernel", "target", "dtype of x", "constexprs", "spec of N", "warps")
for field, value in zip(FIELDS, key.split("|"), strict=True):
    print(f"    {field:11} {value}")
print(
    f"spec of N: {aot.spec(1)!r} for N = 1 (a constant), {aot.spec(4096)!r} for a multiple "
    f"of 16, {aot.spec(4100)!r} otherwise"
)

# %%
# :func:`opguide.triton.aot_launches.launches` does this for every row length the
# Registers plans cover, every dtype, and both the inference forward
# (``STORE_INV=0``) and the training forward. At one row length:
for target_name in ("sm_90", "gfx942"):
    found = aot.launches(target_name, cols=[4096], dtypes=["bfloat16"])
    print(f"{target_name}: {len(found)} launches for N = 4096, bfloat16")
    for la in found:
        print("   ", la.key)

# %%
# ``GDC`` differs between the two. A kernel compiled with ``GDC=1`` waits
# for the previous kernel's results itself, so it may be launched with
# programmatic dependent launch (:doc:`step 11.4 <11_performance_4_tuning>`),
# which exists on NVIDIA GPUs of compute capability 9.0 and later.
#
# .. literalinclude:: /../opguide/triton/aot_launches.py
#    :language: python
#    :pyobject: launches
#
# Each launch is compiled for its target with :func:`triton.compile`. Its
# signature is the one Triton's JIT binds for the same launch on 16-byte
# aligned tensors (on AMD less one hint, which the docstring names), so the
# kernel compiled is the JIT route's:
#
# .. literalinclude:: /../opguide/triton/aot_compile.py
#    :language: python
#    :pyobject: compile_inputs
#
# .. literalinclude:: /../opguide/triton/aot_compile.py
#    :language: python
#    :pyobject: _compile_one
#
# The images are compiled without line tables, which serve profilers'
# source views and change no instruction:
#
# .. literalinclude:: /../opguide/triton/aot_compile.py
#    :language: python
#    :pyobject: _no_line_info
#
# .. dropdown:: opguide/triton/aot_launches.py (what to compile, and each launch's key)
#
#    .. literalinclude:: /../opguide/triton/aot_launches.py
#       :language: python
#       :caption: opguide/triton/aot_launches.py
#
# .. dropdown:: opguide/triton/aot_compile.py (the compile, on a process pool, into a cache)
#
#    .. literalinclude:: /../opguide/triton/aot_compile.py
#       :language: python
#       :caption: opguide/triton/aot_compile.py
#
# .. dropdown:: opguide/triton/aot.py (the images, the manifest, the table's C++; the command)
#
#    .. literalinclude:: /../opguide/triton/aot.py
#       :language: python
#       :caption: opguide/triton/aot.py

# %%
# Compiled here, on the CPU
# -------------------------
# The command the build runs, restricted to the forward kernel at N = 4096
# in bfloat16, for one NVIDIA and one AMD target. It runs in a process of its
# own: compiling needs Triton's compiler, which this page's process has
# swapped for the interpreter when it has no GPU.
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

out = Path(tempfile.mkdtemp(prefix="triton_aot_"))
arguments = ["--targets", "sm_90,gfx942", "--out", str(out), "--only", "rms_norm_forward"]
arguments += ["--cols", "4096", "--dtypes", "bfloat16", "--jobs", "1"]
compile_env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
done = subprocess.run(
    [sys.executable, "-m", "opguide.triton.aot", *arguments],
    env=compile_env,
    capture_output=True,
    text=True,
)
if done.returncode != 0:
    raise RuntimeError(f"python -m opguide.triton.aot failed:\n{done.stderr[-4000:]}")
say("$ python -m opguide.triton.aot " + " ".join(arguments).replace(str(out), "OUT"))
show(done.stdout.replace(str(out), "OUT").splitlines())
manifest = json.loads((out / "manifest.json").read_text())
generated = (out / "triton_aot_artifacts.cpp").read_text().replace(str(out), "OUT")
files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
shutil.rmtree(out)
say("OUT holds " + ", ".join(f for f in files if not f.startswith("cache/")) + ", and cache/")
# The images belong to the Triton release that compiled them: the one
# installed where the build runs.
built_with = f"the images above were compiled by Triton {manifest['triton']}"
if manifest["triton"] == record["triton"]:
    say(f"{built_with}, the release of the recorded GPU build")
else:
    say(f"{built_with}, the recorded GPU build's by Triton {record['triton']}, installed there")

# %%
# What came out, per artifact: the kernel's symbol in the image, its warps
# x threads per warp (the launch's block; AMD's CDNA GPUs run 64 threads a
# warp), the dynamic shared memory Triton asks for, whether it is launched
# with programmatic dependent launch, and the image's size:
for entry in manifest["artifacts"]:
    print(entry["key"])
    print(
        f"    {entry['function']}: {entry['num_warps']} warps x {entry['threads_per_warp']}, "
        f"{entry['shared']} B shared, PDL {entry['launch_pdl']}, {entry['size']:,} B image"
    )
print("the key of the cell above is among them:", key in {e["key"] for e in manifest["artifacts"]})
done_line = manifest["compile"]
print(
    f"compiled {done_line['compiled']} of {done_line['launches']} launches in "
    f"{done_line['seconds']:.1f} s on {done_line['jobs']} process(es), Triton "
    f"{manifest['triton']}"
)

# %%
# The table the extension compiles: each target's images in one blob that
# the assembler includes (``.incbin``: the C++ compiler never parses the
# bytes), then one ``Artifact`` per launch. The generated file's shape, its
# rows folded here to fit the page:
lines = generated.splitlines()
start = lines.index(next(line for line in lines if line.startswith("asm(")))
for line in lines[start : start + 8]:
    print(line)
print("... (the same for gfx942)")
table_start = lines.index("static const Artifact kArtifacts[] = {")
print(lines[table_start])
for line in lines[table_start + 1 : table_start + 3]:
    key_text, rest = line.split(", ", 1)
    print(key_text + ",")
    print(textwrap.fill(rest, 88, initial_indent=" " * 5, subsequent_indent=" " * 5))
print("    ...")
print("\n".join(lines[lines.index("};") : lines.index("};") + 4]))

# %%
# The C++ side asks for the same keys
# -----------------------------------
# ``csrc/triton_aot/route.h`` forms a call's keys from ``plan.h``'s plans.
# ``torch.ops.opguide_checks.triton_aot_keys`` runs it in every build, CPU
# builds too (``opguide_checks`` is a namespace of operators that exist for
# tests and pages, not for models). At the recorded shapes, for each direction and for both
# targets, with the device model the build used:
asked_here = set()
for target_name in ("sm_90", "gfx942"):
    with aot.device_model(target_name) as planner:
        props = torch.cuda.get_device_properties(0)
        options = planner.pdl_options(torch.empty(1, device="meta"))
    gdc = bool(options.get("GDC")) and bool(options.get("launch_pdl"))
    cxx = set()
    for m, n in SHAPES:
        for direction in ("forward", "inference", "backward"):
            cxx.update(
                torch.ops.opguide_checks.triton_aot_keys(
                    direction,
                    m,
                    n,
                    "bf16",
                    target_name,
                    props.multi_processor_count,
                    props.shared_memory_per_block_optin,
                    gdc,
                )
            )
    planned = {la.key for la in aot.launches(target_name, [n for _, n in SHAPES], ["bfloat16"])}
    print(
        f"{target_name}: C++ asks for {len(cxx)} kernels at these shapes; "
        f"opguide.triton.aot compiles {len(cxx & planned)} of them"
    )
    asked_here.update(
        torch.ops.opguide_checks.triton_aot_keys(
            "inference",
            1,
            4096,
            "bf16",
            target_name,
            props.multi_processor_count,
            props.shared_memory_per_block_optin,
            gdc,
        )
    )
built = {e["key"] for e in manifest["artifacts"]}
print(
    f"the 1x4096 inference forward on both targets: {len(asked_here & built)} of "
    f"{len(asked_here)} keys in the table compiled above"
)

# %%
# ``tests/test_triton_aot.py`` runs this check for several device models,
# every dtype and a few hundred row lengths, and
# ``tests/test_triton_aot_build.py`` compares the compiled signatures with
# what Triton's own binder makes of the library's launches.
#
# The C++ route
# -------------
# The key, in C++:
#
# .. literalinclude:: /../csrc/triton_aot/route.h
#    :language: cpp
#    :caption: csrc/triton_aot/route.h
#
# The table's entry, which the generated file above fills in:
#
# .. literalinclude:: /../csrc/triton_aot/artifacts.h
#    :language: cpp
#    :caption: csrc/triton_aot/artifacts.h
#
# ``triton_aot_launch.cu`` indexes the table by key, loads each image once
# per process (``cudaLibraryLoadData``, which takes a ``cubin`` that no nvcc
# of the build compiled; HIP's ``hipModuleLoadData`` on AMD), raises the
# shared-memory limit where a kernel asks for more than 48 KiB, and launches
# as Triton's own launcher does: the kernel's non-constexpr arguments in
# order, then two scratch pointers, ``threads_per_warp * num_warps`` threads
# a program, ``cudaLaunchKernelExC`` with programmatic stream serialisation
# where the kernel was compiled with ``GDC``. ``triton_aot_cuda.cu`` holds
# the operators: check, plan, look up, allocate, launch on the current
# stream.
#
# .. dropdown:: csrc/triton_aot/triton_aot_launch.cu (loads and launches the table's kernels)
#
#    .. literalinclude:: /../csrc/triton_aot/triton_aot_launch.cu
#       :language: cuda
#       :caption: csrc/triton_aot/triton_aot_launch.cu
#
# .. dropdown:: csrc/triton_aot/triton_aot_cuda.cu (the operators' CUDA kernels)
#
#    .. literalinclude:: /../csrc/triton_aot/triton_aot_cuda.cu
#       :language: cuda
#       :caption: csrc/triton_aot/triton_aot_cuda.cu
#
# .. dropdown:: csrc/triton_aot/plan.h (launch.py's Registers plans, in C++)
#
#    .. literalinclude:: /../csrc/triton_aot/plan.h
#       :language: cpp
#       :caption: csrc/triton_aot/plan.h
#
# .. dropdown:: csrc/triton_aot/triton_aot_autograd.cpp (the autograd formula, in C++)
#
#    .. literalinclude:: /../csrc/triton_aot/triton_aot_autograd.cpp
#       :language: cpp
#       :caption: csrc/triton_aot/triton_aot_autograd.cpp
#
# .. dropdown:: csrc/triton_aot/triton_aot_schema.cpp (the schemas and Meta kernels)
#
#    .. literalinclude:: /../csrc/triton_aot/triton_aot_schema.cpp
#       :language: cpp
#       :caption: csrc/triton_aot/triton_aot_schema.cpp
#
# .. dropdown:: csrc/triton_aot/triton_aot_fallback.cpp (the calls no artifact fits)
#
#    .. literalinclude:: /../csrc/triton_aot/triton_aot_fallback.cpp
#       :language: cpp
#       :caption: csrc/triton_aot/triton_aot_fallback.cpp
#
# .. dropdown:: csrc/triton_aot/triton_aot.h and triton_aot_launch.h (what the files share)
#
#    .. literalinclude:: /../csrc/triton_aot/triton_aot.h
#       :language: cpp
#       :caption: csrc/triton_aot/triton_aot.h
#
#    .. literalinclude:: /../csrc/triton_aot/triton_aot_launch.h
#       :language: cpp
#       :caption: csrc/triton_aot/triton_aot_launch.h
#
# The build: ``setup.py`` compiles the launches for the targets that
# ``aot_build.targets`` gives (``OPGUIDE_TRITON_AOT``, else
# ``TORCH_CUDA_ARCH_LIST`` or ``PYTORCH_ROCM_ARCH``, else the visible GPUs)
# and adds the generated file to the extension's sources, in CUDA and ROCm builds:
#
# .. literalinclude:: /../opguide/triton/aot_build.py
#    :language: python
#    :pyobject: targets
#
# .. literalinclude:: /../setup.py
#    :language: python
#    :pyobject: _visible_targets
#
# .. literalinclude:: /../setup.py
#    :language: python
#    :pyobject: triton_aot
#
# The compile runs before the extension it feeds exists, and ``import
# opguide`` loads that extension, so a child process imports the module
# through stand-in packages that only name the source folders. The
# stable-ABI wheel's ``setup.py`` runs the same function
# (:doc:`step 15 <15_one_wheel_for_every_torch>`):
#
# .. literalinclude:: /../opguide/triton/aot_build.py
#    :language: python
#    :pyobject: compile_table
#
# .. dropdown:: opguide/triton/aot_build.py (the compile for a build: targets, stand-ins, child)
#
#    .. literalinclude:: /../opguide/triton/aot_build.py
#       :language: python
#       :caption: opguide/triton/aot_build.py
#
# .. literalinclude:: /../setup.py
#    :language: python
#    :pyobject: BuildInTree.build_extensions

# %%
# Where it does not apply
# -----------------------
# Every call that no compiled kernel fits goes to the JIT route's operator,
# with a warning that names the reason, once per operator and kind of
# reason (every time under ``torch.set_warn_always(True)``). From
# ``triton_aot_cuda.cu``, ``triton_aot_launch.cu`` and
# ``triton_aot_fallback.cpp``:
#
# * rows longer than the Registers plans hold: more than
#   ``launch.MAX_REGISTER_ROW`` elements in the forward,
#   ``launch.MAX_REGISTER_ROW_BACKWARD`` in the backward (the JIT route's
#   split and chunked kernels of :doc:`step 9.2
#   <09_triton_kernel_2_long_rows>` take them);
# * a GPU the build compiled nothing for, and a build that named no target;
# * a tensor that does not start on a 16-byte boundary (a view at an
#   offset): the kernels were compiled for aligned pointers, as Triton's JIT
#   specialises them;
# * ``OPGUIDE_PDL=0`` on a GPU of compute capability 9.0 or later: it asks
#   for kernels without ``GDC``, which the build does not compile;
# * float64 inputs, 2**31 rows or more, and a CUDA runtime older than 12.4,
#   whose library API the launch needs;
# * CPU tensors: the JIT route runs them in Triton's interpreter;
# * ``OPGUIDE_TRITON_AOT_TABLE=0``, which leaves the table empty, for
#   comparisons.
#
# silu_and_mul's kernels share the table: its registry entry names an
# ``aot_module``, which gives the build its kernels and launches, and
# ``torch.ops.opguide.silu_and_mul_triton_aot`` launches them. The fused
# residual-add + RMSNorm of :doc:`step 10 <10_patterns>` has no
# ahead-of-time operator.
#
# .. dropdown:: opguide/_silu_and_mul/triton/aot.py (an operator's kernels for the build)
#
#    .. literalinclude:: /../opguide/_silu_and_mul/triton/aot.py
#       :language: python
#       :caption: opguide/_silu_and_mul/triton/aot.py
#
# On this machine
# ---------------
# The messages are C++ warnings, in Python's :mod:`warnings` or on stderr:
# this cell collects both. Without a
# GPU, the operators run on CPU tensors; with one, on a tensor at the start of
# its allocation and on a view 2 bytes in:
import contextlib  # noqa: E402
import re  # noqa: E402
import warnings  # noqa: E402

from opguide import rms_norm_reference  # noqa: E402
from opguide.testing import TOLERANCES as TOL  # noqa: E402
from opguide.testing import assert_grads_close, reference_grads  # noqa: E402
from opguide.triton import launch  # noqa: E402

print("MAX_REGISTER_ROW =", launch.MAX_REGISTER_ROW)
print("MAX_REGISTER_ROW_BACKWARD =", launch.MAX_REGISTER_ROW_BACKWARD)
MESSAGE = re.compile(r"opguide::\w+: .*?: the JIT Triton route runs \(opguide::\w+\)")


@contextlib.contextmanager
def route_messages(into: list):
    """Collects the route's messages given inside, from Python's warnings and from fd 2."""
    with tempfile.TemporaryFile(mode="w+") as err, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        text = err.read() + "\n".join(str(w.message) for w in seen)
    into += MESSAGE.findall(text)


def training_step(x, w, grad):
    """y and the gradients of one forward+backward of the ahead-of-time operator."""
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = torch.ops.opguide.rms_norm_triton_aot(x, w, 1e-6)
    y.backward(grad)
    return y, x.grad, w.grad


aot_cuda = torch._C._dispatch_has_kernel_for_dispatch_key("opguide::rms_norm_triton_aot", "CUDA")
# Rows of 4096 on a GPU; short rows on the CPU, where the interpreter runs
# each program in Python.
if torch.cuda.is_available() and aot_cuda:
    device, cols = torch.device("cuda"), 4096
    cases = {"x at the start of its allocation": 0, "x 2 bytes in (a view at an offset)": 1}
elif not torch.cuda.is_available():
    device, cols = torch.device("cpu"), 64
    cases = {"CPU tensors": 0}
else:
    device, cols, cases = None, 0, {}
    print("not run: this build of opguide has no CUDA kernels (a CPU build)")
torch.manual_seed(0)
for name, offset in cases.items():
    base = torch.randn(2 * cols + offset, device=device, dtype=torch.bfloat16)
    x = base[offset:].view(2, cols)
    w = torch.randn(cols, device=device, dtype=torch.bfloat16)
    grad = torch.randn_like(x)
    messages: list[str] = []
    with route_messages(messages):
        torch.set_warn_always(True)  # the first call of each kind says why, wherever it runs
        try:
            y, grad_x, grad_weight = training_step(x, w, grad)
        finally:
            torch.set_warn_always(False)
    torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6), **TOL[torch.bfloat16])
    assert_grads_close((grad_x, grad_weight), reference_grads(x, w, grad))
    print(f"{name}, 2x{cols}: y, grad_x and grad_weight match the reference; messages:")
    if messages:
        show(f"    {m}" for m in messages)
    else:
        print("    none: the kernels compiled ahead of time ran")
    again: list[str] = []
    with route_messages(again):
        training_step(x, w, grad)
    print(f"    the same call again: {len(again)} message(s)")

# %%
# What it buys, on a GPU (recorded)
# ---------------------------------
# Per call, in microseconds, median and quartiles over the record's rounds,
# for the three routes and two floors of a forward+backward call (what the
# simplest operators cost, not a limit): ``empty Function``, autograd around a Python
# ``Function`` that launches nothing, and ``x * w``, an elementwise product
# and its backward through autograd, the cost of about the simplest training
# operator of two inputs:
LABELS = {
    CUDA: "CUDA",
    JIT: "Triton JIT",
    AOT: "Triton AOT",
    EMPTY: "empty Function",
    FLOOR: "x * w",
}
for mode, words in MODES.items():
    digits = 1 if mode == "forward" else 0
    rows = [
        {
            "shape": f"{r['m']}x{r['n']}",
            "impl": LABELS[r["impl"]],
            "text": f"{1e6 * r['median']:.{digits}f} ({1e6 * r['q1']:.{digits}f}-"
            f"{1e6 * r['q3']:.{digits}f})",
        }
        for r in select(PER_CALL, mode=mode, impl=tuple(LABELS))
    ]
    print(f"{words}, us per call:")
    show(table(rows, ("shape",), "impl", cell=lambda r: r["text"]))

# %%
# The route against the CUDA route and the floors, held to two bounds: its
# forward at one row within 1.3x of the CUDA route's time, its
# forward+backward within 1.15x of the ``x * w`` floor. Each sentence is
# computed from the rows above ("no measurable difference" where the
# quartiles overlap):
first = SHAPES[0]
a, c = timing("forward", AOT, first), timing("forward", CUDA, first)
within = "within" if a["median"] <= 1.3 * c["median"] else "not within"
say(
    f"forward at {first[0]}x{first[1]}: the AOT route takes {a['median'] / c['median']:.2f}x "
    f"the CUDA route's time, {within} 1.3x"
    + ("; no measurable difference" if overlap(a, c) else "")
)
for floor in (FLOOR, EMPTY):
    for shape in SHAPES:
        a, f = timing("training", AOT, shape), timing("training", floor, shape)
        r = a["median"] / f["median"]
        bound = f", {'within' if r <= 1.15 else 'not within'} 1.15x" if floor == FLOOR else ""
        say(
            f"forward+backward at {shape[0]}x{shape[1]}: {r:.2f}x the {LABELS[floor]} floor"
            f"{bound}; " + relation(a, f, "the floor's")
        )
for mode, words in MODES.items():
    same = [s for s in SHAPES if overlap(timing(mode, AOT, s), timing(mode, CUDA, s))]
    apart = [
        f"{m}x{n}: " + relation(timing(mode, AOT, (m, n)), timing(mode, CUDA, (m, n)), "its")
        for m, n in SHAPES
        if (m, n) not in same
    ]
    say(
        f"{words}, AOT against the CUDA route: no measurable difference at {len(same)} of "
        f"{len(SHAPES)} shapes" + (f" ({'; '.join(apart)})" if apart else "")
    )
above = [
    s for s in SHAPES if timing("training", FLOOR, s)["q1"] > timing("training", CUDA, s)["q3"]
]
if above:
    say(
        "the x * w floor takes longer than the CUDA route at "
        + ", ".join(f"{m}x{n}" for m, n in above)
        + ": it launches kernels of its own (a product, and a sum over the rows for w's "
        "gradient), whose GPU time grows with the shape"
    )

# %%
# A figure of the same rows:
import matplotlib.pyplot as plt  # noqa: E402

fig, axes = plt.subplots(1, 2, figsize=(11, 5), layout="constrained")
fig.set_facecolor("white")
COLORS = {CUDA: "C0", JIT: "C1", AOT: "C3", EMPTY: "0.75", FLOOR: "0.45"}
for ax, (mode, words) in zip(axes, MODES.items(), strict=True):
    impls = [i for i in LABELS if select(PER_CALL, mode=mode, impl=i)]
    height = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        spots = [i + k * height for i in range(len(SHAPES))]
        t = [timing(mode, impl, s) for s in SHAPES]
        mid = [v["median"] for v in t]
        err = [[v["median"] - v["q1"] for v in t], [v["q3"] - v["median"] for v in t]]
        ax.barh(spots, mid, height, xerr=err, capsize=2, color=COLORS[impl], label=LABELS[impl])
    ax.set_yticks(
        [i + 0.4 - height / 2 for i in range(len(SHAPES))], [f"{m}x{n}" for m, n in SHAPES]
    )
    ax.invert_yaxis()
    ax.set(title=words, xlabel="us per call (median, quartiles)")
    ax.grid(axis="x", alpha=0.3)
handles, names = axes[-1].get_legend_handles_labels()  # the right panel has every series
fig.legend(handles, names, loc="outside lower center", ncols=len(names), fontsize=8)
fig.suptitle(f"Recorded on {record['device']}, {record['eager']['dtype']}", fontsize=10)
plt.show()

# %%
# GPU time
# --------
# The kernels themselves, timed on the GPU back to back beside a copy of the
# same bytes, at the shapes whose tensors outgrow the L2 cache (the
# operators called without autograd). The compiled images are the JIT
# route's, so their times should agree:
GPU_TIME = record["gpu_time"]
gaps = []
for mode, words in MODES.items():
    for m, n in SHAPES:
        found = {r["impl"]: r for r in select(GPU_TIME, mode=mode, m=m, n=n)}
        if AOT not in found:
            continue
        us = {k: 1e6 * r["seconds"] for k, r in found.items()}
        pct = {k: r["pct_of_copy"] for k, r in found.items()}
        gaps.append(pct[AOT] - pct[JIT])
        print(
            f"{words:16} {f'{m}x{n}':10} copy {us['copy (same bytes)']:5.1f} us; AOT "
            f"{pct[AOT]:5.1f}%, JIT {pct[JIT]:5.1f}%, CUDA {pct[CUDA]:5.1f}%"
        )
close = sum(abs(g) < 1 for g in gaps)
say(
    f"AOT against JIT: within a point of the copy at {close} of {len(gaps)}; the largest gap "
    f"is {max(gaps, key=abs):+.2f} points"
)

# %%
# What the build costs (recorded)
# -------------------------------
# The manifest of the build that the record measured: how many launches it
# compiled, on how many processes and in how long, and how large the images
# that the extension embeds are. Each target named adds its own images:
shipped = record["artifacts"]
stats = shipped["compile"]
cached = stats["launches"] - stats["compiled"]
say(
    f"targets {', '.join(shipped['targets'])}, Triton {shipped['triton']}: {stats['launches']} "
    f"launches, {stats['compiled']} compiled and {cached} taken from the cache, in "
    f"{stats['seconds']:.1f} s on {stats['jobs']} processes"
)
for target_name in shipped["targets"]:
    mine = select(shipped["artifacts"], target=target_name)
    total = sum(e["size"] for e in mine)
    say(f"{target_name}: {len(mine)} images, {total:,} bytes ({total / 2**20:.1f} MiB) in all")
    for kernel in aot.KERNELS:
        of = [e for e in mine if e["key"].startswith(kernel + "|")]
        sizes = [e["size"] for e in of]
        say(
            f"    {kernel:17} {len(of):3} images of {min(sizes):,} to {max(sizes):,} bytes "
            f"(median {statistics.median(sizes):,.0f}); shared memory up to "
            f"{max(e['shared'] for e in of):,} bytes"
        )

# %%
# For a kernel of your own
# ------------------------
# Another Triton kernel takes five pieces, this step's files one each; the
# template's ``triton_aot`` projects (:doc:`step 18 <18_your_own_operator>`)
# hold a generic form:
#
# 1. **Enumerate the launches** your planner can make on each target: call
#    it on a model of the target's device (``aot_launches.device_model``)
#    for every problem size it distinguishes, and give each launch a key
#    that C++ can form from the same plan (``aot_launches.key``).
# 2. **Compile** each with ``triton.compile(ASTSource(fn, signature,
#    constexprs, attrs), target=GPUTarget(backend, arch, warp_size),
#    options=...)``, the signature being what Triton's JIT binds for the
#    launch (``aot_compile.compile_inputs``); keep ``compiled.asm["cubin"]``
#    or ``["hsaco"]`` and the metadata (``name``, ``num_warps``, ``shared``).
# 3. **Embed** the images in the extension: a generated C++ table and
#    ``.incbin`` (``aot.write_outputs``), from the build's hook
#    (``setup.py``'s ``triton_aot``).
# 4. **Plan in C++** as your Python planner does (``plan.h``), with a test
#    that compares the two, and form the keys (``route.h``).
# 5. **Launch** through the CUDA runtime's library API
#    (``cudaLibraryLoadData``, ``cudaLibraryGetKernel``,
#    ``cudaLaunchKernelExC``) or HIP's modules, with the arguments in
#    Triton's order (``triton_aot_launch.cu``), and send every other call
#    to the JIT route (``triton_aot_fallback.cpp``).
#
# Two settings of the README's table control the route:
from guidekit.compile_checks import source_root  # noqa: E402

for line in (source_root() / "README.md").read_text().splitlines():
    if line.startswith("| `OPGUIDE_TRITON_AOT"):
        name, text = (cell.strip() for cell in line.strip().strip("|").split("|", 1))
        say(f"{name.replace('`', '')}: {text.replace('`', '')}")

# %%
# What's next
# -----------
# :doc:`Step 10 <10_patterns>` writes an operator that updates one of its
# inputs and returns two tensors, in C++, CUDA and Triton.
