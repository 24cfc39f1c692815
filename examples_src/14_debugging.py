r"""
Step 14: Debugging operators
============================

A tool for each way an operator goes wrong, from a file and a line:

* ``TORCH_SHOW_CPP_STACKTRACES=1``: which C++ function raised an error;
* an :func:`torch.library.opcheck` failure, for a wrong fake kernel and an
  undeclared mutation;
* :func:`torch._dynamo.explain`: graph breaks and why;
* on a GPU: ``CUDA_LAUNCH_BLOCKING=1``, ``compute-sanitizer`` and Nsight
  Compute (``ncu``).

The CPU demonstrations run while this page is built; the GPU ones crash on
purpose, so their outputs are a recording by ``tools/record_gpu_debug.py``,
labelled as such.
"""

# %%
# Where did that error come from?
# -------------------------------
# With ``TORCH_SHOW_CPP_STACKTRACES=1`` an error carries the C++ stack where
# it was raised. PyTorch reads the variable once (`cpp_stacktraces.cpp
# <https://github.com/pytorch/pytorch/blob/main/torch/csrc/utils/cpp_stacktraces.cpp>`__),
# so a child process runs the call without it, then with it:
import collections
import json
import re
import subprocess
import sys
import textwrap

import torch

import opguide
from guidekit.compile_checks import source_root, without_machine_paths  # noqa: E402
from guidekit.recorded import recorded_dir, resolve  # noqa: E402
from guidekit.recorded.pages import say_stale  # noqa: E402

# sphinx_gallery_thumbnail_path = "_thumbnails/14.png"
ROOT = source_root()  # the opguide source tree, wherever this script runs from
FAILING_CALL = """
    import torch, opguide
    x, w = torch.ones(2, 8, dtype=torch.int32), torch.ones(8)
    try:
        torch.ops.opguide.rms_norm(x, w, 1e-6)
    except TypeError as err:
        print(err)
"""


def run_child(code: str, **env: str) -> str:
    """Runs `code` in a fresh Python with extra environment variables.

    Returns its stdout, with this machine's folders written as ``<repo>``,
    ``<venv>`` and ``<tmp>``.
    """
    import os

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return without_machine_paths(proc.stdout)


print(run_child(FAILING_CALL))

# %%
# With it, the file and line of the check, and the stack; our own frames:
message = run_child(FAILING_CALL, TORCH_SHOW_CPP_STACKTRACES="1")
lines = message.splitlines()
frames = [line for line in lines if line.startswith("#")]
print("\n".join(lines[:2]))
print(f"... {len(frames)} frames, of which ours:")
for line in frames:
    if "opguide::" in line:
        print(textwrap.shorten(line, width=150, placeholder=" ..."))

# %%
# ``addr2line`` symbolises it (`unwind.cpp
# <https://github.com/pytorch/pytorch/blob/main/torch/csrc/profiler/unwind/unwind.cpp>`__),
# best on a library built with ``-g`` (``DEBUG=1``).
#
# Reading an opcheck failure
# --------------------------
# The first lines say which check failed and why. A fake kernel that
# disagrees with the real one about the shape:


@torch.library.custom_op("opguide_debug::row_sums", mutates_args=())
def row_sums(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


@row_sums.register_fake
def _(x):
    return x.new_empty(x.shape)  # BUG: the last dimension is summed away


def first_lines(err: BaseException, n: int = 4) -> str:
    """The first n lines of an error, wrapped for the page."""
    text = "\n".join(f"{type(err).__name__}: {err}".splitlines()[:n])
    return textwrap.fill(text, width=100, break_long_words=False)


try:
    torch.library.opcheck(row_sums, (torch.randn(4, 8),))
except Exception as err:  # opcheck raises OpCheckError
    print(first_lines(err))

# %%
# ``test_faketensor`` failed on the shapes; the fix is
# ``x.new_empty(x.shape[:-1])``. An operator that writes its input without
# saying so (``mutates_args=()``; no ``Tensor(a!)`` in C++):


@torch.library.custom_op("opguide_debug::scale_", mutates_args=())
def scale_(x: torch.Tensor, s: float) -> torch.Tensor:
    x.mul_(s)  # BUG: mutates x, but mutates_args=() declares no mutation
    return x.clone()


try:
    torch.library.opcheck(scale_, (torch.randn(4, 8), 2.0))
except Exception as err:
    print(first_lines(err))

# %%
# ``test_schema`` failed: the schema promised ``x`` is only read. Declare the
# write (``mutates_args={"x"}``); with both fixes opcheck passes:


@torch.library.custom_op("opguide_debug::row_sums_fixed", mutates_args=())
def row_sums_fixed(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


@row_sums_fixed.register_fake
def _(x):
    return x.new_empty(x.shape[:-1])


@torch.library.custom_op("opguide_debug::scale_fixed_", mutates_args={"x"})
def scale_fixed_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


print(torch.library.opcheck(row_sums_fixed, (torch.randn(4, 8),)))
print(torch.library.opcheck(scale_fixed_, (torch.randn(4, 8), 2.0)))

# %%
# Finding graph breaks
# --------------------
# Code ``torch.compile`` cannot capture ends one graph and starts another
# (a *graph break*); :func:`torch._dynamo.explain` lists each with its reason
# and line:
import torch._dynamo  # noqa: E402


def normalise_then_gate(x, w):
    # The operator itself in the graph (compiled="kernel", the default; see
    # opguide.backends).
    y = opguide.rms_norm(x, w)
    if y.mean() > 0:  # a Python branch on a tensor's value
        y = y * 2
    return y + 1


x, w = torch.randn(8, 64), torch.randn(64)
explanation = torch._dynamo.explain(normalise_then_gate)(x, w)
print("graphs:", explanation.graph_count, " graph breaks:", explanation.graph_break_count)
for reason in explanation.break_reasons:
    where = reason.user_stack[-1] if reason.user_stack else None
    print("reason:", textwrap.shorten(reason.reason, 200, placeholder=" ..."))
    if where is not None:
        print(f"  at line {where.lineno}: {where.line}")

# %%
# The branch needs a value known only when the graph runs; as tensor code it
# keeps one graph:


def normalise_then_gate_fixed(x, w):
    y = opguide.rms_norm(x, w)
    return torch.where(y.mean() > 0, y * 2, y) + 1


explanation = torch._dynamo.explain(normalise_then_gate_fixed)(x, w)
print("graphs:", explanation.graph_count, " graph breaks:", explanation.graph_break_count)
nodes = explanation.graphs[0].graph.nodes
calls = [getattr(n.target, "__name__", str(n.target)) for n in nodes if n.op.startswith("call")]
# getattr: the wrapper reading x.is_cpu, traced with the rest
calls = [name for name in calls if name != "getattr"]
print("calls in the graph:", calls)
assert explanation.graph_count == 1 and "rms_norm.default" in calls, calls
torch.testing.assert_close(normalise_then_gate_fixed(x, w), normalise_then_gate(x, w))

# %%
# GPU tools
# ---------
# The programs below ran under their tools in ``tools/record_gpu_debug.py``;
# its recording follows.
#
# **CUDA_LAUNCH_BLOCKING=1.** A launch returns before the kernel runs, so a
# later call reports the failure and the traceback points at the wrong line;
# with the variable set, every launch waits and the failing one raises:
#
# .. literalinclude:: /../tools/gpu_debug/async_error.py
#    :language: python
#    :start-after: import torch
#
# ``compute-sanitizer --tool memcheck`` reports out-of-bounds accesses with
# kernel, thread and source line (compile with ``-lineinfo``). This kernel
# forgets its bounds check; ``x[i] *= s`` reads first, so memcheck reports a
# read:
#
# .. literalinclude:: /../tools/gpu_debug/oob_write.cu
#    :language: cuda
#    :start-after: // [kernel]
#    :end-before: // [kernel-end]
#
# ``--tool racecheck`` finds shared-memory races, such as a missing
# ``__syncthreads()``:
#
# .. literalinclude:: /../tools/gpu_debug/shared_race.cu
#    :language: cuda
#    :start-after: // [kernel]
#    :end-before: // [kernel-end]
#
# **Nsight Compute** (``ncu``) profiles one kernel against the GPU's peaks
# ("Speed Of Light"), occupancy and caches. A memory-bound kernel:
#
# .. literalinclude:: /../tools/gpu_debug/saxpy.cu
#    :language: cuda
#    :start-after: // [kernel]
#    :end-before: // [kernel-end]
#
# On a PyTorch program: ``compute-sanitizer python script.py``, or ``ncu
# --kernel-name <name> --launch-count 1 python script.py``.
#
# The recording
# -------------
# ``python3 tools/record_gpu_debug.py --out docs/recorded`` on an NVIDIA GPU:
RECORDING = ROOT / "docs" / "recorded" / "gpu_debug.json"


def shown(output: str, keep: int = 1) -> str:
    """A tool's output as the page shows it: its first ``keep`` reports whole.

    compute-sanitizer prints one report per faulting thread, each ended by a
    line of ``=========``; the others are counted by their first words, not
    repeated.
    """
    lines = output.rstrip().splitlines()
    ends = [i for i, line in enumerate(lines) if line.rstrip() == "========="]
    if len(ends) <= keep:
        return "\n".join(lines)
    hidden = lines[ends[keep - 1] + 1 : ends[-1] + 1]
    firsts = [lines[end + 1] for end in ends[keep - 1 : -1]]  # each hidden report's first line
    kinds = collections.Counter(" ".join(line.strip("= ").split()[:3]) for line in firsts)
    counted = ", ".join(f"{n} '{kind}'" for kind, n in kinds.items())
    more = [f"... {len(ends) - keep} more reports in the recording ({counted}) ..."]
    if any("output shortened" in line for line in hidden):
        more.append(
            "... (the recorder shortened this output: the summary below counts errors it left out)"
        )
    return "\n".join(lines[: ends[keep - 1] + 1] + more + lines[ends[-1] + 1 :])


if RECORDING.is_file():
    record = json.loads(RECORDING.read_text())
    # nvcc --version's last line, "Build cuda_13.0.r13.0/compiler...", names the release.
    release = re.search(r"cuda_(\d+\.\d+)", record["nvcc"])
    nvcc = f"nvcc {release[1]}" if release else record["nvcc"]
    # The recorder writes torch's version and its CUDA release: "2.11.0+cu130 13.0".
    version, _, cuda = record["torch"].partition(" ")
    torch_version = f"{version} (CUDA {cuda})" if cuda else version
    print(
        f"RECORDED on {record['device']} on {record['date']} (not run while this page was "
        f"built). Driver {record['driver']}; torch {torch_version}; {nvcc}."
    )
    say_stale(RECORDING.name)
    for run in record["runs"]:
        print(f"\n$ {run['command']}    # exit status {run['returncode']}")
        print(shown(run["output"]))
else:
    print(
        f"No recording is present yet: {RECORDING.relative_to(ROOT)} does not exist, so\n"
        "there are no GPU outputs to show. Run tools/record_gpu_debug.py on a GPU machine."
    )

# %%
# Read from the recording: where each traceback points, and memcheck's first
# report:
if RECORDING.is_file():
    program = (ROOT / "tools" / "gpu_debug" / "async_error.py").read_text().splitlines()
    for run in record["runs"]:
        if "async_error.py" in run["command"]:
            where = re.findall(r'async_error\.py", line (\d+)', run["output"])
            if where:
                line = int(where[-1])
                print(f"{run['command']}\n  raised at line {line}: {program[line - 1].strip()}")
                if "BLOCKING" not in run["command"] and ".item()" not in program[line - 1]:
                    print("  a launch after the failing one reported it, before .item() waited")
        elif "memcheck" in run["command"]:
            first = re.search(r"Invalid __global__ (\w+) of size (\d+)", run["output"])
            if first:
                print(f"{run['command']}\n  first report: a {first[1]} of {first[2]} bytes")

# %%
# The library's own kernels under the sanitizer
# ---------------------------------------------
# ``tools/sanitize_kernels.py`` runs opguide's CUDA and Triton kernels, each
# checked against the reference, here the long-row kernels whose blocks wait
# for each other and rows of narrow accesses, under both tools (recorded):
SANITIZED = recorded_dir() / resolve("sanitizer_<gpu>.txt")
summaries = []
say_stale(SANITIZED.name)
for line in SANITIZED.read_text().splitlines():
    if line.startswith("#") or "SUMMARY" in line or "ran and matched" in line:
        print(line.lstrip("# "))
    if "SUMMARY" in line:
        summaries.append(line)
clean = all(re.search(r"\b0 (errors|hazards)\b", line) for line in summaries)
print(
    "Both tools report nothing, in each run."
    if clean and len(summaries) == 4
    else f"Surprising: the sanitizer reported something, or did not finish: {summaries}"
)

# %%
# The files of this step, whole
# -----------------------------
# Numbered as the sanitizer's reports number them:
#
# .. dropdown:: tools/gpu_debug/saxpy.cu
#
#    .. literalinclude:: /../tools/gpu_debug/saxpy.cu
#       :language: cuda
#       :caption: tools/gpu_debug/saxpy.cu
#       :linenos:
#
# .. dropdown:: tools/gpu_debug/oob_write.cu
#
#    .. literalinclude:: /../tools/gpu_debug/oob_write.cu
#       :language: cuda
#       :caption: tools/gpu_debug/oob_write.cu
#       :linenos:
#
# .. dropdown:: tools/gpu_debug/shared_race.cu
#
#    .. literalinclude:: /../tools/gpu_debug/shared_race.cu
#       :language: cuda
#       :caption: tools/gpu_debug/shared_race.cu
#       :linenos:
#
# .. dropdown:: tools/gpu_debug/async_error.py
#
#    .. literalinclude:: /../tools/gpu_debug/async_error.py
#       :language: python
#       :caption: tools/gpu_debug/async_error.py
#       :linenos:
