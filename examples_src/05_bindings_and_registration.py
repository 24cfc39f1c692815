r"""
Step 5: Bindings and registration
=================================

Steps :doc:`1 <01_first_operator>` and :doc:`2 <02_cpp_cpu_kernel>` registered
``rms_norm`` with the PyTorch dispatcher. This step looks at that registration
on its own: how schema strings are written, why the library registers operators
with ``TORCH_LIBRARY`` instead of binding functions with pybind11, how the
compiled library is loaded, and where the pieces registered from Python (fake
kernels) live.

In this step you will learn:

* how to read and write schema strings: mutation (``Tensor(a!)``), optional
  and list arguments, defaults and multiple returns;
* why ``TORCH_LIBRARY`` rather than ``PYBIND11_MODULE``: the same C++ function
  bound both ways, and what ``torch.compile(fullgraph=True)`` says about each;
* what happens when an operator has no fake kernel, and where opguide keeps
  its fake kernels;
* how the library is loaded (:func:`torch.ops.load_library`, not ``import``)
  and what ``opguide/__init__.py`` exports;
* how to look up the schema of an existing ATen operator.

opguide's schemas
-----------------
``TORCH_LIBRARY`` claims a namespace once, in one file of the library:

.. literalinclude:: /../csrc/opguide.cpp
   :language: cpp
   :caption: csrc/opguide.cpp

Each operator's folder adds its schemas to that namespace with
``TORCH_LIBRARY_FRAGMENT``, so a new operator is a new folder and no shared
file changes (``opguide/registry.py`` lists the folders that ``setup.py``
compiles). Besides ``rms_norm``, RMSNorm's folder defines a training pair
(:doc:`step 8 <08_autograd>` explains it): ``rms_norm_fwd`` returns two
tensors, and ``rms_norm_backward`` takes four.
``fused_add_rms_norm_`` (:doc:`step 10 <10_patterns>`) writes one of its
inputs (``Tensor(a!)``).

.. literalinclude:: /../csrc/rms_norm/rms_norm_schema.cpp
   :language: cpp
   :caption: csrc/rms_norm/rms_norm_schema.cpp

A schema string is ``name(arguments) -> returns``. The types are few:
``Tensor``, ``int`` (C++ ``int64_t``), ``SymInt`` (a size that may be
symbolic under ``torch.compile``; C++ ``c10::SymInt``), ``float`` (C++
``double``), ``bool``, ``str``, ``Scalar``, ``ScalarType``, ``Device``, lists
of these (``int[]``, ``SymInt[]``, ``Tensor[]``), and optionals (``Tensor?``,
``int[]?``). Arguments may have defaults (``float eps=1e-6``); several
returns are written as a tuple.

Annotations say what an operator does to memory. ``Tensor(a!) x`` means "x
is written to, and anything else annotated ``(a)`` aliases it"; an in-place
op returns its input as ``Tensor(a!)``. A plain ``Tensor`` return promises a
new tensor that aliases no input. The annotations are a contract: the
functionalization pass of ``torch.compile`` rewrites graphs based on them,
and :func:`torch.library.opcheck` checks that the kernel honours them.
"""

# %%
# A small library of example schemas
# ----------------------------------
# The C++ below defines a namespace ``opguide_step5`` with one operator per
# kind of schema. It also defines the same RMSNorm function,
# ``rms_norm_composite`` (built from ATen calls, so it stays short), which
# is registered as an operator *and* exposed through pybind11, to compare
# the two in the next section.
#
# :func:`torch.utils.cpp_extension.load_inline` compiles the string. Passing
# ``functions=[...]`` makes it add a ``PYBIND11_MODULE`` that binds those
# functions, and import the result as a Python module; the ``TORCH_LIBRARY``
# blocks register their operators when the library is loaded, whichever way.
import importlib
import re
import time
import warnings
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

from guidekit.compile_checks import source_root  # noqa: E402

# sphinx_gallery_thumbnail_path = "_thumbnails/05.png"
ROOT = source_root()  # the opguide source tree, wherever this script runs from

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <torch/library.h>

// One C++ function, bound two ways below.
at::Tensor rms_norm_composite(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor inv_rms = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (xf * inv_rms * weight.to(at::kFloat)).to(x.scalar_type());
}

// In place: writes x and returns it.
at::Tensor& scale_(at::Tensor& x, double alpha) { return x.mul_(alpha); }

// A list argument, a list of floats, and an optional tensor with a default.
at::Tensor weighted_sum(at::TensorList xs, at::ArrayRef<double> weights,
                        const std::optional<at::Tensor>& bias) {
  TORCH_CHECK_VALUE(!xs.empty() && xs.size() == weights.size(),
                    "weighted_sum: xs and weights must have the same non-zero length, got ",
                    xs.size(), " and ", weights.size());
  at::Tensor out = xs[0] * weights[0];
  for (size_t i = 1; i < xs.size(); ++i) out = out + xs[i] * weights[i];
  return bias.has_value() ? out + *bias : out;
}

// Two returns.
std::tuple<at::Tensor, at::Tensor> row_min_max(const at::Tensor& x) {
  return at::aminmax(x, /*dim=*/-1);
}

TORCH_LIBRARY(opguide_step5, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("scale_(Tensor(a!) x, float alpha) -> Tensor(a!)");
  m.def("weighted_sum(Tensor[] xs, float[] weights, Tensor? bias=None) -> Tensor");
  m.def("row_min_max(Tensor x) -> (Tensor min, Tensor max)");
}

// rms_norm gets a CPU kernel, as opguide's kernels do.
TORCH_LIBRARY_IMPL(opguide_step5, CPU, m) { m.impl("rms_norm", &rms_norm_composite); }

// CompositeExplicitAutograd: one kernel for every backend (these only call ATen).
TORCH_LIBRARY_IMPL(opguide_step5, CompositeExplicitAutograd, m) {
  m.impl("scale_", &scale_);
  m.impl("weighted_sum", &weighted_sum);
  m.impl("row_min_max", &row_min_max);
}
"""

build_dir = ROOT / "build" / "jit" / "step5_bindings"
build_dir.mkdir(parents=True, exist_ok=True)
start = time.perf_counter()
ext = load_inline(
    name="opguide_step5_bindings",
    cpp_sources=CPP_SOURCE,
    functions=["rms_norm_composite"],  # the pybind11 binding
    build_directory=str(build_dir),
    extra_cflags=["-O2"],
    verbose=False,
)
print(f"built and imported {ext.__name__} in {time.perf_counter() - start:.1f} s")

# %%
# Each operator now has a parsed schema. Its arguments carry their types,
# defaults and alias annotations, and the schema knows whether it mutates:
ops = torch.ops.opguide_step5
for name in ["rms_norm", "scale_", "weighted_sum", "row_min_max"]:
    schema = getattr(ops, name).default._schema
    written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    print(f"{str(schema):75} mutable={schema.is_mutable} writes={written}")

# %%
# In Python, ``Tensor[]`` takes a list, ``Tensor?`` takes ``None`` (or is left
# out, since it has a default), and two returns come back as a tuple.
# Each result is checked against plain PyTorch on random data:
torch.manual_seed(0)
a, b = torch.randn(3, 5), torch.randn(3, 5)
bias = torch.randn(5)
torch.testing.assert_close(ops.weighted_sum([a, b], [0.5, 2.0]), 0.5 * a + 2.0 * b)
torch.testing.assert_close(ops.weighted_sum([a, b], [0.5, 2.0], bias), 0.5 * a + 2.0 * b + bias)
lo, hi = ops.row_min_max(a)
torch.testing.assert_close((lo, hi), (a.amin(-1), a.amax(-1)))
c = a.clone()
returned = ops.scale_(c, 3.0)
torch.testing.assert_close(c, 3.0 * a)
print("scale_ wrote its input and returned it:", returned.data_ptr() == c.data_ptr())
print("weighted_sum, row_min_max: match PyTorch")

# %%
# Why ``TORCH_LIBRARY`` and not ``PYBIND11_MODULE``
# -------------------------------------------------
# The same function is now reachable two ways: ``ext.rms_norm_composite`` (a
# pybind11 binding: a Python callable that wraps a C++ function) and
# ``torch.ops.opguide_step5.rms_norm`` (an operator in the dispatcher). In
# eager mode they give the same result:
x, w = torch.randn(8, 64), torch.randn(64)
torch.testing.assert_close(ext.rms_norm_composite(x, w, 1e-6), ops.rms_norm(x, w, 1e-6))
print("eager: pybind11 binding == dispatcher operator")

# %%
# ``torch.compile`` is where they differ. Dynamo cannot look inside a pybind11
# function: it is an opaque Python builtin with no schema, so Dynamo does not
# know what it returns or whether it mutates its inputs. It has to stop the
# graph there, run the function in Python, and start a new graph after it.
# With ``fullgraph=True`` that graph break is an error:


def with_pybind(x, w):
    h = x * 2.0
    return ext.rms_norm_composite(h, w, 1e-6) + 1.0


torch._dynamo.reset()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        torch.compile(with_pybind, fullgraph=True)(x, w)
    except Exception as err:  # torch._dynamo.exc.Unsupported
        print(type(err).__name__ + ":", str(err).strip().splitlines()[0][:200])
    else:
        raise AssertionError("a pybind11 call should break the graph")
# Dynamo also explains, in a warning, what it met and what to do instead. The warning
# names the binding by a pybind11-internal name; the print shows module and function:
readable = f"{ext.__name__}.{ext.rms_norm_composite.__name__}"
for warning in caught:
    first, *rest = str(warning.message).splitlines()
    print(re.sub(r"`[^`]*`", f"`{readable}`", first.split(" This function")[0], count=1))
    print("\n".join(line for line in rest if line.startswith("If it is a third-party")))

# %%
# Without ``fullgraph=True`` the function still runs, in pieces;
# :func:`torch._dynamo.explain` counts them:
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the same warning as above
    explanation = torch._dynamo.explain(with_pybind)(x, w)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
print("reason:", explanation.break_reasons[0].reason.strip().splitlines()[0][:200])
assert explanation.graph_break_count >= 1

# %%
# What an operator without a fake kernel does
# -------------------------------------------
# The dispatcher operator has a schema, so Dynamo can put it in the graph.
# But while tracing, ``torch.compile`` runs every operator on *fake* tensors
# (shapes and dtypes, no data) to learn what it returns, and this operator
# has a kernel for the ``CPU`` key only: fake tensors never reach it, and it
# has no fake (Meta) kernel. Tracing stops with an error that names the
# operator:


def with_op(x, w):
    h = x * 2.0
    return torch.ops.opguide_step5.rms_norm(h, w, 1e-6) + 1.0


torch._dynamo.reset()
try:
    torch.compile(with_op, fullgraph=True)(x, w)
except Exception as err:  # torch._dynamo.exc.Unsupported
    lines = str(err).strip().splitlines()
    print(type(err).__name__ + ":", lines[0])
    print(next(line.strip() for line in lines if "unsupported operator" in line))
else:
    raise AssertionError("compiling an operator without a fake kernel should fail")

# %%
# :func:`torch.library.opcheck` reports the same gap from a test, in its
# ``test_faketensor`` check; at the end of the exception chain (pytest prints
# the whole chain, which opcheck's "scroll up for stack trace" refers to) the
# dispatcher says what is missing:
try:
    torch.library.opcheck(ops.rms_norm.default, (x, w, 1e-6))
except Exception as err:  # OpCheckError
    print(type(err).__name__ + ":", err)
    # The exception chain ends at the dispatcher's own explanation:
    root = err
    while root.__cause__ is not None or root.__context__ is not None:
        root = root.__cause__ if root.__cause__ is not None else root.__context__
    print(type(root).__name__ + ":", str(root).split(" You may have")[0])
else:
    raise AssertionError("opcheck should report the missing fake kernel")

# %%
# If you remove a ``register_fake`` from ``opguide/ops.py``, these are the
# two messages the test suite shows (from its ``torch.compile`` test and its
# ``opcheck`` test). Registering a fake kernel fixes both. It returns empty
# tensors with the shape, dtype, device and strides of the real outputs:


@torch.library.register_fake("opguide_step5::rms_norm")
def _(x, weight, eps):
    return x.new_empty(x.shape)


torch._dynamo.reset()
compiled = torch.compile(with_op, fullgraph=True)
torch.testing.assert_close(compiled(x, w), with_op(x, w))
explanation = torch._dynamo.explain(with_op)(x, w)
print(
    f"with a fake kernel: graphs: {explanation.graph_count}, "
    f"graph breaks: {explanation.graph_break_count}"
)

# %%
# The other three operators of the example needed no fake kernel: their
# kernels are registered for ``CompositeExplicitAutograd``, which serves every
# backend including ``Meta``, and since they only call ATen operators they
# run on fake tensors as they are. A kernel that reads data pointers, like
# opguide's, cannot; it needs a fake kernel. On ``meta`` tensors, which have
# shapes and no data:
meta = torch.empty(4, 8, device="meta")
low, high = torch.ops.opguide_step5.row_min_max(meta)
total = torch.ops.opguide_step5.weighted_sum([meta, meta], [0.5, 0.5])
scaled = torch.ops.opguide_step5.scale_(meta, 2.0)
print(
    f"row_min_max -> {tuple(low.shape)}, {tuple(high.shape)}; weighted_sum -> "
    f"{tuple(total.shape)}; scale_ -> {tuple(scaled.shape)}, all on {scaled.device}"
)

# %%
# A dispatcher operator brings more than ``torch.compile`` support: it can be
# called from C++ and from TorchScript, ``torch.export`` can save it by name,
# it can get autograd, vmap and per-device kernels, and
# :func:`torch.library.opcheck` can test all of that (PyTorch's `custom
# operators landing page
# <https://pytorch.org/tutorials/advanced/custom_ops_landing_page.html>`__
# lists them; :doc:`step 8 <08_autograd>` shows autograd and :doc:`step 16
# <16_across_pytorch>` export and vmap). None of this is available to a
# pybind11 function.
#
# Where opguide's fake kernels live
# ---------------------------------
# A fake kernel describes outputs; it is Python, registered by the
# operator's qualified name. (A C++ alternative is a kernel for the ``Meta``
# dispatch key, ``TORCH_LIBRARY_IMPL(opguide, Meta, m)``; Python is shorter
# and can use the same argument checks as the public wrapper.) opguide keeps
# them in ``opguide/ops.py``, next to the wrappers, so that importing
# ``opguide`` installs them together with the library:
#
# .. literalinclude:: /../opguide/ops.py
#    :language: python
#    :start-after: # [fake-rms-norm]
#    :end-before: # [fake-rms-norm-end]
#
# .. literalinclude:: /../opguide/ops.py
#    :language: python
#    :start-after: # [fake-rms-norm-training]
#    :end-before: # [fake-rms-norm-training-end]
#
# ``rms_norm_fwd``'s second output, ``inv_rms``, has a different shape and
# dtype from its input, so its fake kernel spells both out: one float32 value
# per row (float64 for float64 inputs). If that ever disagreed with the C++
# kernel, ``opcheck``'s ``test_faketensor`` would fail.
#
# Loading the library: ``torch.ops.load_library``, not ``import``
# -----------------------------------------------------------------
# ``ext`` above is a Python extension module: the file defines
# ``PyInit_<name>``, and ``import`` calls it. opguide's ``_C`` library defines
# no Python module at all, only static ``TORCH_LIBRARY`` registrations, so it
# is loaded with :func:`torch.ops.load_library` (``dlopen`` plus
# bookkeeping), and importing it fails:
import opguide  # noqa: E402

print(f"pybind11 module {ext.__name__}:", Path(ext.__file__).name)
print("opguide library:", Path(opguide._library.library_path()).name)
try:
    importlib.import_module("opguide._C")
except ImportError as err:
    print("import opguide._C ->", type(err).__name__ + ":", err)

# %%
# Calling no CPython function at all (and not linking ``libtorch_python``) is
# what lets ``_C`` use Python's stable ABI (``abi3``): one binary for every
# Python from 3.10 on (:doc:`step 6 <06_the_build>` builds that wheel). The
# package loads it on import, once:
#
# .. literalinclude:: /../opguide/_library.py
#    :language: python
#    :pyobject: load
#
# and ``opguide/__init__.py`` then exports the checked wrappers and the
# references. The fake kernels and the vmap and autocast rules are registered
# as a side effect of importing ``opguide.ops``; the autograd kernels are C++
# and come with the library (:doc:`step 8 <08_autograd>`):
#
# .. literalinclude:: /../opguide/__init__.py
#    :language: python
#    :start-at: from __future__ import annotations
package = Path(opguide.__file__).parent
# torch.ops.loaded_libraries names every library this process loaded; the
# gallery may run other steps' pages in the same process, so keep opguide's.
ours = [p for p in torch.ops.loaded_libraries if Path(p).parent == package]
print("opguide's loaded libraries:", [Path(p).name for p in ours])
print("opguide exports:", opguide.__all__)

# %%
# Finding the schema of an existing operator
# ------------------------------------------
# ATen's own operators are the best examples of schema style. Each overload
# has a ``_schema``; the full list comes from
# ``torch._C._jit_get_all_schemas()`` (a private function, but the quickest
# search):
for overload in [
    torch.ops.aten.add_.Tensor,  # in place
    torch.ops.aten.native_layer_norm.default,  # optional tensors, three returns
    torch.ops.aten.cat.default,  # a list, with a default dim
]:
    print(overload._schema)

schemas = torch._C._jit_get_all_schemas()  # every library this process loaded
matches = [str(s) for s in schemas if s.name.startswith("aten::") and "rms_norm" in s.name]
print(f"\n{len(matches)} ATen schemas mention rms_norm, e.g.:")
for line in sorted(matches)[:4]:
    print(" ", line)

# %%
# ATen's private ``_fused_rms_norm`` returns the output *and* ``rstd`` (the
# inverse RMS), and its backward takes ``rstd`` back along with a
# ``bool[2] output_mask`` that skips unneeded gradients. opguide's training
# pair, ``rms_norm_fwd`` and ``rms_norm_backward``, follows the same idea
# (without the mask); :doc:`step 8 <08_autograd>` builds it.
#
# What's next
# -----------
# :doc:`Step 6 <06_the_build>` looks at the build that turns ``csrc/`` into ``opguide/_C.abi3.so``:
# ``setup.py``, the switches it reads, the abi3 wheel, and JIT builds.

# %%
# The files of this step, whole
# -----------------------------
# The page above showed parts of these files; here each one is whole, as it
# is compiled and run.
#
# .. dropdown:: opguide/__init__.py
#
#    .. literalinclude:: /../opguide/__init__.py
#       :language: python
#       :caption: opguide/__init__.py
#
# .. dropdown:: opguide/_library.py
#
#    .. literalinclude:: /../opguide/_library.py
#       :language: python
#       :caption: opguide/_library.py
#
# .. dropdown:: opguide/ops.py
#
#    .. literalinclude:: /../opguide/ops.py
#       :language: python
#       :caption: opguide/ops.py
