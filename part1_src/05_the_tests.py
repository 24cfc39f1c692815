r"""
5. The tests
============

:doc:`Page 4 <04_the_python_side>` checked the operator by hand. This page
shows the project's tests, which check the same and more on every run, and
runs them.

On this page you will:

* compare every kernel with a reference in plain PyTorch, for every dtype
  and for awkward shapes;
* test the registration with :func:`torch.library.opcheck`, the gradients
  with :func:`torch.autograd.gradcheck`, and the operator under
  ``torch.compile`` and ``torch.export``;
* check that bad inputs raise errors that say what is wrong.

The test file
-------------

.. literalinclude:: /../first_operator/tests/test_first_op.py
   :language: python
   :caption: first_operator/tests/test_first_op.py

What each test catches:

``test_matches_reference``
    A wrong formula, a dtype summed in too little precision, a row length
    that is not a multiple of the block (``4097``), a single row or column,
    an input with no rows. ``reference`` is the formula of page 1, summed in
    float32 as the kernels are, so the tolerances ``TOL`` need only allow
    for the order of the sums.
``test_strided_input``
    A kernel that reads its input as dense rows without making it so.
``test_opcheck``
    A schema that does not say what the kernel writes, a fake kernel whose
    output differs from the real one in shape, dtype or strides, an autograd
    registration that does not work through the dispatcher. With
    ``requires_grad=True`` inputs, opcheck also runs the backward.
``test_gradcheck``
    A wrong backward formula: opcheck runs the backward but does not check
    its values; gradcheck compares them with finite differences, in float64.
``test_compile_fullgraph``
    A graph break, or a fake kernel that ``torch.compile`` cannot use.
``test_export_records_the_operator``
    That an exported program holds ``first_op.rms_norm`` itself.
``test_bad_inputs_raise``
    A check that is missing or raises the wrong type of error.

Every test but the last two runs on the CPU and, where a GPU is visible,
on CUDA; the CUDA cases are skipped elsewhere, with the reason in pytest's
summary. On a GPU, the CUDA cases fail if the library was built without its
CUDA kernel.
"""

# %%
# Running them
# ------------
# As the project's README says, from the project folder. The cell runs pytest
# there with ``-v``, which names every case, and counts the cases of each
# test:
import collections
import re
import subprocess
import sys
from pathlib import Path

import first_op
import torch

PROJECT = Path(first_op.__file__).resolve().parents[1]  # first_operator/
print("$ python -m pytest -v")
done = subprocess.run(
    [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider"],
    cwd=PROJECT,
    capture_output=True,
    text=True,
)
results = collections.defaultdict(collections.Counter)
OUTCOME = re.compile(r"::(\w+)(?:\[[^\]]*\])? (PASSED|FAILED|SKIPPED|ERROR)")
for test, outcome in OUTCOME.findall(done.stdout):
    results[test][outcome.lower()] += 1
for test, counts in results.items():
    cases = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    print(f"  {test:34} {cases}")
summary = done.stdout.strip().splitlines()[-1].strip("= ")
print(summary)
assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
gpu = torch.cuda.is_available()
print("CUDA cases:", "run" if gpu else "skipped, no GPU visible here")

# %%
# A broken kernel fails them
# --------------------------
# Tests are worth what they catch. The cell runs them again in a process
# whose CPU kernel normalises over the wrong dimension (``dim=0``, a slip
# that is easy to make): the script registers a Python kernel for the
# ``CPU`` key over the C++ one, for that process only, then runs the value
# tests:
BROKEN = """
import sys

import pytest
import torch

import first_op


def rms_norm_wrong_dim(x, weight, eps):
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    y = xf * torch.rsqrt(xf.pow(2).mean(0, keepdim=True) + eps) * weight.to(acc)
    return y.to(x.dtype)


library = torch.library.Library("first_op", "IMPL")
library.impl("rms_norm", rms_norm_wrong_dim, "CPU")
sys.exit(pytest.main(["-q", "--tb=no", "-p", "no:cacheprovider", "-k", "reference"]))
"""
command = [sys.executable, "-c", BROKEN]
broken = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True)
failed = [line for line in broken.stdout.splitlines() if line.startswith("FAILED")]
for line in failed[:3]:
    print(line.split(" - ")[0].replace("tests/test_first_op.py::", ""))
print(broken.stdout.strip().splitlines()[-1].strip("= "))
assert broken.returncode == 1 and failed, broken.stdout[-3000:] + broken.stderr[-3000:]
