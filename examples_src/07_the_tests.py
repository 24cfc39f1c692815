r"""
Step 7: The tests
=================

Part I tests its operator against a reference, with ``opcheck`` and
``gradcheck``. The library's test module adds layouts and corner cases,
compilation with dynamic shapes and no recompiles, deterministic gradients,
error messages, and property-based tests
(`hypothesis <https://hypothesis.readthedocs.io>`_). This page shows the
module whole, says what each group guards against, and runs it.

The test module
---------------
.. literalinclude:: /../tests/test_rms_norm.py
   :language: python
   :caption: tests/test_rms_norm.py

What each group guards against:

``test_matches_reference`` and ``test_matches_torch_rms_norm``
    Wrong results: every dtype, and row lengths that run both the vector loop
    and its tail. A bfloat16 ``rtol=1.6e-2`` is 2 to 4 units in the last
    place of its 8 significant bits; float32's and float64's leave room for
    sums in another order. Inputs are random: zeros or ones hide wrong
    indexing.

``test_batched_and_non_contiguous``, ``test_empty``, ``test_eps_is_used``
    Strided and transposed inputs, empty dimensions, ``eps`` reaching the
    kernel.

``test_opcheck`` and ``test_opcheck_training_ops``
    A fake kernel that disagrees, a schema that hides a mutation or an alias,
    an autograd registration that fails through the dispatcher.

``test_compile_fullgraph`` and ``test_compile_dynamic_forward_backward_no_recompiles``
    No graph break, forward and backward traced, and with ``dynamic=True``
    one graph for every shape (``error_on_recompile``, and Dynamo's
    ``unique_graphs`` reads 1).

``test_backward_matches_reference`` and ``test_gradcheck``
    Wrong gradients, against the reference in every dtype and against finite
    differences in float64.

``test_backward_is_deterministic``
    ``grad_weight`` must not depend on the number of threads.

``test_bad_input_*``, ``test_negative_eps``, ``test_not_a_tensor``
    Each wrong argument raises an error that names it, through the wrapper
    and through ``torch.ops`` alike; each message is matched.

Property-based tests
--------------------
Hypothesis draws what a hand-written list misses: empty dimensions, row
lengths from 1 to 70, strided and transposed inputs, non-contiguous
gradients; derandomized, so it fails the same way each time, and shrinks a
failure to a small case:

.. literalinclude:: /../tests/test_rms_norm_properties.py
   :language: python
   :caption: tests/test_rms_norm_properties.py
"""

# %%
# Running the tests
# -----------------
# The two modules on their own, with ``pytest -q`` from the repository root:
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
# :doc:`Step 8 <08_autograd>` builds the backward kernel these gradient
# tests check.
