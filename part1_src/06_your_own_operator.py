r"""
6. Your own operator
====================

Pages 1 to 5 built one operator. For an operator of your own, the guide
has a project template: one command writes a project like ``first_operator/``
around a formula you then replace, with its build, its tests and its CI.

On this page you will:

* render the template for a row-wise operator on the C++ and CUDA route;
* see which page of Part I explains each file it writes;
* know where to go next.

The command
-----------
The template is ``template/`` in the guide's source, rendered with `copier
<https://copier.readthedocs.io>`__. ``copier copy`` alone asks its questions
one by one; ``--data`` answers them on the command line:

.. code-block:: bash

   pip install copier
   copier copy --defaults --data package=my_ops --data op_name=my_norm \
       --data route=cpp --data kind=rowwise path/to/opguide/template my_ops

``route`` chooses how the kernels are written: ``cpp`` (a C++ CPU kernel and a
CUDA kernel, as here, and a Triton kernel beside them, which
``--data triton=false`` leaves out), ``triton`` (a Triton
kernel) or ``python`` (a body of PyTorch operations, as on page 1). ``kind``
chooses the formula to start from: ``elementwise``, ``rowwise`` (RMSNorm's
shape: one result per row element, from a reduction over the row),
``indexed``, ``scatter`` or ``grouped`` (an output whose size depends on the
data).
:doc:`Step 18 </auto_examples/18_your_own_operator>` lists every question.
"""

# %%
# Rendering it
# ------------
# The cell runs that command in a temporary folder, with the template of the
# guide's source that holds ``first_operator/``, and lists what it wrote:
import subprocess
import sys
import tempfile
from pathlib import Path

import first_op

GUIDE = Path(first_op.__file__).resolve().parents[2]  # the folder of first_operator/
TEMPLATE = GUIDE / "template"
ANSWERS = ["package=my_ops", "op_name=my_norm", "route=cpp", "kind=rowwise"]
copier = [sys.executable, "-m", "copier"]


def line_counts(root: Path) -> dict[str, int]:
    """Each file of a project and its lines, less what builds and runs leave behind."""
    left = {"__pycache__", ".pytest_cache", "build", "dist"}
    counts = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix == ".so" or ".copier-answers" in path.name:
            continue
        if left & set(path.parts) or any(p.endswith(".egg-info") for p in path.parts):
            continue
        counts[path.relative_to(root).as_posix()] = len(path.read_text().splitlines())
    return counts


found = subprocess.run([*copier, "--version"], capture_output=True).returncode == 0
if not TEMPLATE.is_dir() or not found:
    print("SKIPPED: this needs copier (pip install copier) and the guide's")
    print(f"template/ beside first_operator/ (looked in {GUIDE})")
else:
    data = [arg for answer in ANSWERS for arg in ("--data", answer)]
    command = [*copier, "copy", "--quiet", "--defaults", *data, str(TEMPLATE), "my_ops"]
    with tempfile.TemporaryDirectory(prefix="my-ops-") as work:
        done = subprocess.run(command, cwd=work, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        project = line_counts(Path(work) / "my_ops")
        for path, lines in project.items():
            print(f"  {path:38} {lines:4} lines")
        first = line_counts(GUIDE / "first_operator")
        for name, counts in (("my_ops", project), ("first_operator", first)):
            print(f"{name}: {len(counts)} files, {sum(counts.values())} lines")

# %%
# The files, and where Part I explains them:
#
# .. list-table::
#    :header-rows: 1
#    :widths: 45 55
#
#    * - file
#      - explained on
#    * - ``src/my_ops/reference.py``
#      - the formula in plain PyTorch, as on :doc:`page 1
#        <01_the_operator_in_python>`: every test compares with it
#    * - ``csrc/my_ops.cpp``
#      - the schema (:doc:`page 4 <04_the_python_side>`)
#    * - ``csrc/my_norm_cpu.cpp``, ``csrc/my_norm.h``
#      - the CPU kernels and the checks (:doc:`page 2
#        <02_a_cpu_and_a_cuda_kernel>`)
#    * - ``csrc/my_norm.cuh``, ``csrc/my_norm_cuda.cu``
#      - the CUDA kernels (:doc:`page 2 <02_a_cpu_and_a_cuda_kernel>`)
#    * - ``src/my_ops/ops.py``, ``src/my_ops/__init__.py``
#      - the fake kernels, the backward, the loading (:doc:`page 4
#        <04_the_python_side>`)
#    * - ``setup.py``, ``pyproject.toml``
#      - the build (:doc:`page 3 <03_the_build>`)
#    * - ``tests/``, ``src/my_ops/_checks.py``
#      - the tests (:doc:`page 5 <05_the_tests>`), and the checks of the
#        arguments in Python
#    * - ``src/my_ops/triton_my_norm.py``
#      - the same operator in Triton (Part II, :doc:`step 9
#        </auto_examples/09_triton_kernel>`)
#    * - ``tools/``, ``.github/workflows/ci.yml``
#      - the ``nvcc`` check of page 2 as a script, and CI (:doc:`step 19
#        </auto_examples/19_ship_your_operator>`)
#
# The template goes further than ``first_operator/`` where a real project
# needs it: the backward is a C++ and a CUDA kernel of its own, ``setup.py``
# explains why it builds without CUDA, the Python entry point checks its
# arguments, the tests cover more cases, and a CI workflow runs them. Its
# README gives the same two commands as ``first_operator/``'s:
# ``pip install --no-build-isolation -e ".[test]"``, then
# ``python -m pytest``. The last two lines above compare the two projects'
# sizes: start from ``first_operator/`` to learn, from the template to ship.
# :doc:`Step 18 </auto_examples/18_your_own_operator>` runs them on a rendered
# project.

# %%
# Where to go next
# ----------------
# With Part I done, you have a correct operator. Part II,
# :doc:`/auto_examples/index`, starts from it: it makes the kernels fast and
# measures them, writes the
# kernel in Triton, explains the dispatcher, ships one wheel for several
# torch releases, and runs the operator in a real model.
