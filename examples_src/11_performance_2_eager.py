r"""
Step 11.2: What an eager call costs
===================================

:doc:`11_performance` times the kernels on the GPU. A user who calls
``opguide.rms_norm`` in eager mode waits for something else: Python, the
dispatcher, autograd and the launches, before the kernel starts. This page
answers one question: what does a call cost as a user makes it, and where
does that time go?

In this step you will learn:

* how eager time differs from GPU time, and when the host sets it;
* what each layer of a call (wrapper, operator, autograd) costs;
* what the library does to keep each layer cheap.

The numbers are **recorded** on a GPU by ``python -m guidekit.benchmark
--eager`` into ``docs/recorded/``; the page prints each file's device and
date. Previous page: :doc:`11_performance`; next:
:doc:`11_performance_3_long_rows`.
"""

# %%
# Eager time
# ----------
# **Eager time** is the wall clock of calls made as a user makes them, back to
# back, then one synchronisation. The same operators, bfloat16, in
# microseconds per call at every shape. ``torch.ops`` is the bare operator
# ``torch.ops.opguide.rms_norm``; ``opguide`` is the Python wrapper
# :func:`opguide.rms_norm` with its argument checks; ``triton exp`` is the
# Triton backend's opt-in direct launch (below). Training calls the norm and
# then ``backward``. The ``parts`` table times pieces of such a call: the
# forward and backward operators without autograd (``ops``; ``F ops`` are
# the ATen operators under ``F.rms_norm``), ``opguide::rms_norm_fwd`` under
# its ``torch::autograd::Function`` of two outputs (``Function``), and
# autograd around a Python Function that launches nothing (``empty Fn``):
from guidekit.recorded import eager, plots, sweeps
from guidekit.recorded.pages import recorded, say, show

eager_file = recorded("eager_bf16_h100.json")
EAGER = eager_file["eager"]["rows"]
EAGER_FP16 = recorded("eager_fp16_h100.json")["eager"]["rows"]
show(eager.tables(EAGER))

# %%
# Does the GPU or the host set these times? If the GPU did, 1024 rows would
# take far longer than one. ``F.rms_norm`` at both, and a training call
# against its kernels' GPU time in the sweep of :doc:`11_performance`:
sweep = recorded("sweep_h100.json")["sweep"]
AT = sweeps.at(r for r in sweep["rows"] if r["dtype"] == "bf16")
show(eager.batch_lines(EAGER, AT))

# %%
# Each implementation's calls, the median over the shapes and the range as
# a whisker (log scale):
title = f"Eager calls, bfloat16: {eager_file['device']} (recorded)"
_ = plots.eager_figure(EAGER, title)

# %%
# The targets: opguide's calls at most as slow as ``F.rms_norm``'s, and the
# Triton backend's direct launch at most twice; the ranges, in both 16-bit
# types:
show(eager.target_lines({"bf16": EAGER, "fp16": EAGER_FP16}))

# %%
# The Triton backend's default path goes through its custom operators and a
# plain Triton launch (``kernel[grid](...)``), as Liger's kernels do; against
# ``F.rms_norm`` and Liger:
show(eager.plain_launch_lines({"bf16": EAGER, "fp16": EAGER_FP16}))

# %%
# A plain Triton launch binds its arguments in Python on every call; a C++
# operator's launch does that in C++. The checked wrapper (``opguide``) against
# the bare operator (``torch.ops.opguide.rms_norm.default``), shape by shape:
say(eager.wrapper_line(EAGER))

# %%
# Where a training call goes
# --------------------------
# A training call's time, split: the operators alone, and the rest
# (autograd's graph and its backward pass), medians over the shapes:
show(eager.training_parts(EAGER)[1])
show(eager.node_lines(EAGER))

# %%
# Every layer of a call counts when the host sets the time. What the
# library does about each:
#
# * **Autograd in C++.** The formula is a C++ kernel at the ``Autograd`` key
#   (:doc:`step 8 <08_autograd>`): registered from Python it would re-enter
#   the interpreter on every call. Its ``torch::autograd::Function`` returns
#   y alone and keeps ``inv_rms`` as a saved tensor, where
#   ``opguide::rms_norm_fwd``'s returns both; autograd wraps every output.
#   The output's last line measures that:
#
#   .. literalinclude:: /../csrc/rms_norm/rms_norm_autograd.cpp
#      :language: cpp
#      :start-after: // [autograd-rms-norm]
#      :end-before: // [autograd-rms-norm-end]
#
# * **Checks once, in C++.** For plain tensors the wrapper calls the operator
#   at once; the operator's C++ checks raise the same errors as the Python
#   ones, which run only for the other calls.
# * **Triton without the dispatcher (experimental, opt-in).**
#   ``opguide.experimental.triton_eager`` (off by default: it uses private
#   torch and Triton APIs, which its docstring lists) makes a plain eager call
#   of the Triton backend launch the kernels compiled on its first call
#   directly, with pointers as ints and no launch metadata unless a profiler
#   hook wants it (``torch.compile``, export, ``vmap``, DTensor and long rows
#   take the operators). Training calls ``Function``'s C++ ``apply`` itself.
#   The ``triton exp`` rows above measure it.
#
# ``python -m guidekit.benchmark --eager`` records these tables on your GPU.
#
# Next: :doc:`11_performance_3_long_rows`, rows too long for one block.
