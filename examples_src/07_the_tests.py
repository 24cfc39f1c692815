r"""
Step 7: The tests
=================

An operator is finished when its tests say so. This page shows opguide's
test module for ``rms_norm`` whole, explains what each group of tests
guards against, and runs it.

In this step you will learn:

* how to compare a kernel with a reference over a matrix of shapes and
  dtypes, with tolerances that fit each dtype;
* what :func:`torch.library.opcheck` tests, and why it is the first test to
  write for a custom operator;
* how to check gradients with :func:`torch.autograd.gradcheck` in float64;
* how to test that ``torch.compile(fullgraph=True)`` traces forward and
  backward with dynamic shapes and compiles only once;
* how to test error messages and empty tensors;
* how property-based tests (`hypothesis <https://hypothesis.readthedocs.io>`_)
  search shapes and strides that a hand-written list would miss.

The test module
---------------
.. literalinclude:: /../tests/test_rms_norm.py
   :language: python
   :caption: tests/test_rms_norm.py

What each group guards against:

``test_matches_reference`` and ``test_matches_torch_rms_norm``
    Wrong results. Every dtype the kernel dispatches on, and row lengths
    below, at and off the kernel's 16-lane width, so that both the vector
    loop and its tail run. Tolerances allow for one rounding to the output
    dtype: a bfloat16 result carries 8 significant bits, so ``rtol=1.6e-2`` is
    2 to 4 units in the last place (float16's ``2e-3``, with 11 bits, the
    same). float32 (``1e-5``, about 80 to 170 units in the last place) and
    float64 (``1e-12``) leave room for sums over the row taken in another
    order than the reference's.
    Inputs are random, never zeros or ones, which would hide wrong indexing.

``test_batched_and_non_contiguous``, ``test_empty``, ``test_eps_is_used``
    Layouts and corner cases: transposed and strided inputs, empty
    dimensions (which must not crash or touch memory), and ``eps`` reaching
    the kernel.

``test_opcheck`` and ``test_opcheck_training_ops``
    Registration mistakes: a fake kernel whose output differs from the real
    one, a schema that hides a mutation or an alias, an autograd
    registration that does not work through the dispatcher. With inputs that
    require grad, opcheck also exercises the autograd kernel.

``test_compile_fullgraph`` and ``test_compile_dynamic_forward_backward_no_recompiles``
    ``torch.compile`` support: no graph break (``fullgraph=True``), forward
    and backward traced, and with ``dynamic=True`` one graph serving every
    shape. ``error_on_recompile`` turns a recompilation into an error, and
    Dynamo's ``unique_graphs`` counter must read 1. Both trace the operator
    itself, ``compiled="kernel"`` being the default (see :mod:`opguide.backends`).
    Removing a fake kernel from ``opguide/ops.py`` makes these fail with the
    messages shown in :doc:`step 5 <05_bindings_and_registration>`.

``test_backward_matches_reference`` and ``test_gradcheck``
    Wrong gradients. The first compares with autograd through the reference,
    in every dtype; the second uses :func:`torch.autograd.gradcheck`, which
    compares the backward with finite differences. Finite differences need
    float64: in float32 their rounding error would swamp the comparison.
    Both fail if the backward formula is broken (try removing one factor of
    ``r`` in ``csrc/rms_norm/rms_norm_backward_cpu.cpp``).

``test_backward_is_deterministic``
    ``grad_weight`` sums over all rows; the kernel sums in a fixed order,
    so the result must not depend on the number of threads.

``test_bad_input_*``, ``test_negative_eps``, ``test_not_a_tensor``
    Every wrong argument raises an error that names it and says what was
    expected, whether the call goes through ``opguide.rms_norm`` or straight
    to ``torch.ops.opguide.rms_norm``. The wrapper hands plain tensors to the
    C++ operator unchecked, so most messages come from the C++ checks; the
    Python checks give the same messages for what reaches them (a list in
    place of a tensor, a weight on the ``meta`` device, which dispatches to
    the fake kernel). Each message is matched, so a changed or misleading
    message fails the test.

Property-based tests
--------------------
The hand-written shapes above are chosen to hit known edges. Hypothesis
draws many more: batch shapes with empty dimensions, row lengths from 1 to
70, strided last dimensions, transposed batch dimensions, non-contiguous
incoming gradients. The example count is bounded and the search
derandomized, so the module runs in seconds and fails the same way each time.
When a property fails, hypothesis shrinks the input to a small failing case
and prints it.

.. literalinclude:: /../tests/test_rms_norm_properties.py
   :language: python
   :caption: tests/test_rms_norm_properties.py
"""

# %%
# Running the tests
# -----------------
# The suite's own command (``nox -s tests``) runs these modules with every
# other test. Here they run on their own, with ``pytest -q`` in a separate
# process, from the repository root so that ``pyproject.toml`` and
# ``conftest.py`` configure pytest:
import subprocess
import sys
import time
from pathlib import Path

from guidekit.compile_checks import source_root  # noqa: E402

# sphinx_gallery_thumbnail_path = "_thumbnails/07.png"
ROOT = source_root()  # the opguide source tree, wherever this script runs from
TEST_MODULES = ["tests/test_rms_norm.py", "tests/test_rms_norm_properties.py"]

start = time.perf_counter()
proc = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_MODULES],
    cwd=ROOT,
    capture_output=True,
    text=True,
)
lines = proc.stdout.strip().splitlines()
# The progress dots, then pytest's summary line.
print("\n".join(line for line in lines if line.startswith(".") or " passed" in line))
print(f"(exit status {proc.returncode}, {time.perf_counter() - start:.0f} s)")
if proc.returncode != 0:
    print(proc.stdout[-6000:], proc.stderr[-2000:])
    raise RuntimeError("the operator's tests failed")

# %%
# How many of each kind ran:
collected = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"]
    + TEST_MODULES,
    cwd=ROOT,
    capture_output=True,
    text=True,
).stdout.splitlines()
counts: dict[str, int] = {}
for item in collected:
    if "::" in item:
        path, name = item.split("::")[:2]
        key = f"{Path(path).name}::{name.split('[')[0]}"
        counts[key] = counts.get(key, 0) + 1
for key, count in counts.items():
    print(f"{count:4d}  {key}")

# %%
# What's next
# -----------
# :doc:`Step 8 <08_autograd>` builds the backward kernel and the autograd registration that the
# gradient tests above check.
