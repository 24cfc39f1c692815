r"""
Step 10.4: Outputs sized by the data
====================================

Some operators know their output's size only once they have read their
inputs' values. The dispatch of a mixture of experts is one: it keeps the
tokens routed to the experts of this GPU and groups them by expert. The
template's ``grouped`` kind writes such an operator, and this step builds it
and covers:

* the fake kernel: a new symbolic size, with its bounds;
* integer ids of either width, and one rule for every value;
* a stable order within each group;
* the CUDA pattern: count, read the count on the host, allocate, fill;
* what that read costs, and a form of fixed size for CUDA graphs;
* ``torch.compile(fullgraph=True)`` and ``torch.export`` with a size that
  changes from call to call.

The operator
------------
``group_rows(x, ids, num_groups)`` keeps the rows of ``x`` whose id is in
``[0, num_groups)``, group 0's first, each group's rows in their order in
``x``, and returns three tensors: the rows, the count of each group, and the
row of ``x`` each output row comes from (its backward needs it). The template
writes it on the C++ route (CPU and CUDA kernels) and on the Python route (a
body of PyTorch operations, no compiler). This page renders both, runs the
Python one, and shows the C++ route's CUDA files:
"""

import subprocess
import sys
from pathlib import Path

import torch

from guidekit.compile_checks import source_root

ROOT = source_root()  # the opguide source tree: it holds template/
WORK = ROOT / "build" / "outputs_sized_by_the_data"
WORK.mkdir(parents=True, exist_ok=True)


def render(folder: str, *answers: str) -> Path:
    """Renders the template as a reader would (copier copy), afresh; returns the project."""
    data = [part for answer in answers for part in ("--data", answer)]
    command = [sys.executable, "-m", "copier", "copy", "--quiet", "--defaults", "--overwrite"]
    print("$ copier copy --defaults", " ".join(data), "path/to/opguide/template", folder)
    done = subprocess.run(
        [*command, *data, str(ROOT / "template"), folder], cwd=WORK, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    return WORK / folder


python_route = render("groups_py", "package=groups", "kind=grouped", "route=python")
cpp_route = render("groups_cpp", "package=groups", "kind=grouped", "route=cpp")
for project in (python_route, cpp_route):
    files = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
    print(f"{project.name}: " + ", ".join(f for f in files if not f.startswith(".")))

# %%
# The fake kernel and a size no one knows yet
# -------------------------------------------
# ``torch.compile`` and ``torch.export`` run the fake kernel, which sees
# shapes and no values. For the rows it cannot count, it asks
# :func:`torch.library.get_ctx` for a new *unbacked* size (``u0``: a symbol
# with no value behind it until the graph runs) and states its bounds:
# ``new_dynamic_size`` takes bounds known before tracing, and
# ``torch._check`` the one that is itself symbolic (the rows of ``x``). The
# two integer outputs follow; ``counts`` has a size known from the
# arguments. The module, whole (the Python route's; the C++ route's holds the
# same fake kernels and autograd formula around ``torch.ops.groups``):
#
# .. literalinclude:: /../build/outputs_sized_by_the_data/groups_py/src/groups/ops.py
#    :language: python
#    :caption: src/groups/ops.py
#
# What the fake kernel says, under a ``ShapeEnv`` (which holds the symbols),
# beside what the operator returns:
sys.path.insert(0, str(python_route / "src"))
import groups  # noqa: E402  (the rendered project, put on the path above)
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

x = torch.arange(16.0).reshape(8, 2)
ids = torch.tensor([1, 0, 2, 1, -1, 2, 1, 7], dtype=torch.int32)
with FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True) as mode:
    fake = groups.group_rows(mode.from_tensor(x), mode.from_tensor(ids), 3)
real = groups.group_rows(x, ids, 3)
for name, f, r in zip(("out", "counts", "source"), fake, real, strict=True):
    print(f"{name:6}  fake {str(tuple(f.shape)):9} real {str(tuple(r.shape)):7} {r.dtype}")

# %%
# Ids of either width, and one rule for every value
# -------------------------------------------------
# ``ids`` may be int32 or int64; the C++ kernels take both with
# ``AT_DISPATCH_INDEX_TYPES``, which names the type ``index_t`` inside its
# lambda. No value is an error: an id outside ``[0, num_groups)`` drops its
# row, on every device and in a release build too (a plain ``assert()``
# vanishes under ``-DNDEBUG``, and a device assert that fires leaves the CUDA
# context unusable). Rows 4 (id -1) and 7 (id 7) are dropped, and group 1
# keeps its rows in order:
out, counts, source = real
print("ids    ", ids.tolist())
print("source ", source.tolist(), " counts", counts.tolist())
print("out[:, 0]", out[:, 0].tolist())
wide = groups.group_rows(x, ids.long(), 3)
same = all(torch.equal(a, b) for a, b in zip(wide, real, strict=True))
print("int64 ids give the same outputs:", same)

# %%
# Compiled, with a row count that changes
# ---------------------------------------
# ``fullgraph=True`` refuses any graph break: the operator traces whole, and
# its ``u0`` flows into the operations after it. A counting backend shows
# how many graphs three calls make, on the same 8 rows, each keeping another
# number of them:
graphs = []


def counting_backend(graph_module, example_inputs):
    graphs.append(graph_module)
    return graph_module.forward


def weighted_sums(x, ids):
    out, counts, source = groups.group_rows(x, ids, 3)
    return (out * (source + 1).unsqueeze(1).to(out.dtype)).sum(0), counts


compiled = torch.compile(weighted_sums, fullgraph=True, backend=counting_backend)
for call, dropped in enumerate([1, 3, 6]):  # the first `dropped` rows get id -1
    ids_now = torch.where(torch.arange(8) < dropped, -1, torch.arange(8) % 3)
    got, got_counts = compiled(x, ids_now)
    want, _ = weighted_sums(x, ids_now)
    kept = int(got_counts.sum())
    print(f"call {call}: {kept} rows kept, compiled == eager: {torch.allclose(got, want)}")
print("graphs compiled for the three calls:", len(graphs))

# %%
# ``torch.export`` records the operator itself, with ``x``'s rows as a
# symbol of their own; ``u0``'s bounds become checks that run with the
# program (``_assert_scalar``). The exported program runs on inputs of
# another size that drop other rows:
tokens = torch.export.Dim("tokens")


class Dispatch(torch.nn.Module):
    def forward(self, x, ids):
        return groups.group_rows(x, ids, 3)


program = torch.export.export(Dispatch(), (x, ids), dynamic_shapes=({0: tokens}, {0: tokens}))
for node in program.graph.nodes:
    target = str(node.target)
    if node.op == "call_function" and ("group_rows" in target or "assert" in target):
        print(node.format_node())
print("range constraints:", program.range_constraints)
x12 = torch.randn(12, 2)
ids12 = torch.tensor([0, -1, 2, 1, 5, 0, 2, 2, -3, 1, 0, 2], dtype=torch.int32)
exported = program.module()(x12, ids12)
print("exported, 12 rows in:", [tuple(t.shape) for t in exported])
same = all(
    torch.equal(a, b) for a, b in zip(exported, groups.group_rows(x12, ids12, 3), strict=True)
)
print("equal to the eager call:", same)

# %%
# The CUDA pattern: count, read, allocate, fill
# ---------------------------------------------
# A CUDA kernel cannot allocate its output, and PyTorch's allocator takes a
# size on the host. So the C++ route's CUDA operator runs in three steps on
# PyTorch's stream: a kernel counts the rows of each group and their total;
# the host copies the total (8 bytes) and waits for it; then it allocates the
# outputs and launches the kernels that place and copy the rows.
#
# The stable order comes from the placing kernel: one block per group walks
# ``ids`` in order, a tile of 256 rows at a time, and a row's place in its
# tile is the number of rows of its group before it (``__ballot_sync`` and
# ``__popc`` within a warp, then the warps before it). That reads ``ids``
# once per group, so its work grows with groups times rows; a stable radix
# sort of (id, row) pairs reads them once in all, whatever the groups.
#
# .. literalinclude:: /../build/outputs_sized_by_the_data/groups_cpp/csrc/group_rows.cuh
#    :language: cuda
#    :caption: csrc/group_rows.cuh
#
# .. literalinclude:: /../build/outputs_sized_by_the_data/groups_cpp/csrc/group_rows_cuda.cu
#    :language: cuda
#    :caption: csrc/group_rows_cuda.cu
#
# The CPU kernel takes the same three steps, counting and placing on one
# thread and copying on many. The C++ route's files:
print("csrc/:", ", ".join(p.name for p in sorted((cpp_route / "csrc").iterdir())))

# %%
# On a GPU, the template's record of its C++ projects holds this one's run:
# its tests, the CUDA items among them, and those again under
# ``compute-sanitizer --tool memcheck`` (a release build, with no ``assert``
# left to catch a write out of bounds):
import json  # noqa: E402

from guidekit.recorded import recorded_dir  # noqa: E402
from guidekit.recorded.pages import say_stale  # noqa: E402

for path in sorted(recorded_dir().glob("template_classic_cuda_*.json")):
    say_stale(path.name)
    run = json.loads(path.read_text())
    for project in run["projects"]:
        if project["project"].endswith("_grouped"):
            checked = project.get("memcheck", {})
            print(f"{run['run_with']['device']}, torch {run['run_with']['torch']}, {run['date']}")
            print(f"{project['project']}: {project['summary']}")
            print(f"  CUDA items: {project['cuda_items']}")
            print(f"  memcheck: {checked.get('tests', 'not run')}, {checked.get('errors', '')}")

# %%
# What the read costs, and the fixed-size form
# --------------------------------------------
# The host's read is a wait: the call returns only once the GPU has run
# everything queued before it on the current stream, so the CPU cannot run
# ahead and queue the next kernels while the GPU works. Under CUDA graph
# capture no wait is allowed at all, and the operator refuses the capture with an error that
# says so (the project's test ``test_cuda_graph_capture_is_refused_clearly``
# checks it on a GPU).
#
# Where the wait matters, the choice is an output of fixed size: all
# ``num_tokens`` rows, the kept ones first, and the counts. Nothing is read
# on the host, a CUDA graph can hold it, and ``torch.compile`` sees static
# shapes; the price is memory for every row, and the code after it must
# respect ``counts``. In PyTorch operations, without one host read
# (``torch.bincount`` would read its input's maximum on the host;
# ``scatter_add_`` does not):


def group_rows_padded(x, ids, num_groups):
    """``group_rows`` with all rows: the kept ones first, as ``group_rows`` orders them."""
    ids = ids.long()
    dropped = (ids < 0) | (ids >= num_groups)
    key = torch.where(dropped, num_groups, ids)  # dropped rows sort last
    source = torch.sort(key, stable=True).indices
    counts = torch.zeros(num_groups + 1, dtype=torch.int64, device=x.device)
    counts.scatter_add_(0, key, torch.ones_like(key))
    return x[source], counts[:num_groups], source


padded, padded_counts, _ = group_rows_padded(x, ids, 3)
kept = int(counts.sum())
same_rows = torch.equal(padded[:kept], out)
same_counts = torch.equal(padded_counts, counts)
print(f"padded: {tuple(padded.shape)}; its first {kept} rows == group_rows's: {same_rows}")
print(f"counts equal: {same_counts}")
