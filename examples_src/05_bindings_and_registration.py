r"""
Step 5: Bindings and registration
=================================

Part I registers one schema with ``TORCH_LIBRARY`` and finds its Python side
through ``set_python_module``. This step adds:

* schema strings beyond one tensor in, one out: mutation (``Tensor(a!)``),
  lists, optionals, defaults, several returns;
* the same C++ function bound with pybind11 and registered with
  ``TORCH_LIBRARY``, and what ``torch.compile(fullgraph=True)`` says of each;
* the messages an operator without a fake kernel gets;
* how opguide loads its library and where its fake kernels live;
* how to look up an ATen operator's schema.

opguide's schemas
-----------------
``TORCH_LIBRARY`` claims a namespace once, in one file of the library:

.. literalinclude:: /../csrc/opguide.cpp
   :language: cpp
   :caption: csrc/opguide.cpp

Each operator's folder adds its schemas with ``TORCH_LIBRARY_FRAGMENT``, so a
new operator is a new folder (listed in ``opguide/registry.py``). RMSNorm's
adds a training pair (:doc:`step 8 <08_autograd>`):

.. literalinclude:: /../csrc/rms_norm/rms_norm_schema.cpp
   :language: cpp
   :caption: csrc/rms_norm/rms_norm_schema.cpp

The types of a schema are few: ``Tensor``, ``int`` (C++ ``int64_t``),
``SymInt`` (a size that may be symbolic under ``torch.compile``), ``float``
(C++ ``double``), ``bool``, ``str``, ``Scalar``, ``ScalarType``, ``Device``,
lists (``int[]``, ``Tensor[]``) and optionals (``Tensor?``). ``Tensor(a!) x``
means x is written and anything annotated ``(a)`` aliases it; a plain
``Tensor`` return is a new tensor. Functionalization rewrites graphs by these
annotations, and :func:`torch.library.opcheck` checks the kernel keeps them.
"""

# %%
# A small library of example schemas
# ----------------------------------
# One operator per kind of schema, and ``rms_norm_composite`` (built from ATen
# calls) both registered as an operator and bound with pybind11: ``load_inline``
# adds a ``PYBIND11_MODULE`` for the functions named in ``functions=[...]``.
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
# Each parsed schema knows its types, defaults and what it writes:
ops = torch.ops.opguide_step5
for name in ["rms_norm", "scale_", "weighted_sum", "row_min_max"]:
    schema = getattr(ops, name).default._schema
    written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    print(f"{str(schema):75} mutable={schema.is_mutable} writes={written}")

# %%
# ``Tensor[]`` takes a list, ``Tensor?`` ``None`` or nothing, and two returns
# come back as a tuple; each result checked against plain PyTorch:
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
# The pybind11 binding ``ext.rms_norm_composite`` and the operator
# ``torch.ops.opguide_step5.rms_norm`` agree in eager mode:
x, w = torch.randn(8, 64), torch.randn(64)
torch.testing.assert_close(ext.rms_norm_composite(x, w, 1e-6), ops.rms_norm(x, w, 1e-6))
print("eager: pybind11 binding == dispatcher operator")

# %%
# Under ``torch.compile`` they differ: a pybind11 function has no schema, so
# Dynamo breaks the graph there, an error under ``fullgraph=True``:


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
# Without ``fullgraph=True`` it runs in pieces:
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the same warning as above
    explanation = torch._dynamo.explain(with_pybind)(x, w)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
print("reason:", explanation.break_reasons[0].reason.strip().splitlines()[0][:200])
assert explanation.graph_break_count >= 1

# %%
# What an operator without a fake kernel does
# -------------------------------------------
# The operator has a schema, but only a ``CPU`` kernel and no fake kernel, so
# tracing on fake tensors stops with an error that names it:


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
# ``opcheck``'s ``test_faketensor`` reports the same gap; the end of the
# exception chain says what is missing:
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
# These are the two messages a test suite shows for a missing
# ``register_fake``; registering one fixes both:


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
# The other three need none: registered for ``CompositeExplicitAutograd``
# and calling only ATen, they run on ``meta`` tensors as they are. A kernel
# that reads data pointers, like opguide's, needs a fake kernel:
meta = torch.empty(4, 8, device="meta")
low, high = torch.ops.opguide_step5.row_min_max(meta)
total = torch.ops.opguide_step5.weighted_sum([meta, meta], [0.5, 0.5])
scaled = torch.ops.opguide_step5.scale_(meta, 2.0)
print(
    f"row_min_max -> {tuple(low.shape)}, {tuple(high.shape)}; weighted_sum -> "
    f"{tuple(total.shape)}; scale_ -> {tuple(scaled.shape)}, all on {scaled.device}"
)

# %%
# An operator can also be saved by ``torch.export`` and get autograd, vmap
# and per-device kernels (PyTorch's `custom operators landing page
# <https://pytorch.org/tutorials/advanced/custom_ops_landing_page.html>`__;
# steps :doc:`8 <08_autograd>` and :doc:`16 <16_across_pytorch>`); a pybind11
# function gets none of these.
#
# Where opguide's fake kernels live
# ---------------------------------
# In ``opguide/ops.py``, beside the wrappers whose checks they share (a C++
# ``Meta`` kernel is the alternative):
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
# ``inv_rms`` is one float32 value per row (float64 for float64 inputs), so
# its fake kernel spells out shape and dtype.
#
# Loading the library: ``torch.ops.load_library``, not ``import``
# -----------------------------------------------------------------
# ``ext`` is a Python extension module (it defines ``PyInit_<name>``).
# opguide's ``_C`` holds only ``TORCH_LIBRARY`` registrations, so it is loaded
# with :func:`torch.ops.load_library`, and importing it fails:
import opguide  # noqa: E402

print(f"pybind11 module {ext.__name__}:", Path(ext.__file__).name)
print("opguide library:", Path(opguide._library.library_path()).name)
try:
    importlib.import_module("opguide._C")
except ImportError as err:
    print("import opguide._C ->", type(err).__name__ + ":", err)

# %%
# Calling no CPython function lets ``_C`` use Python's stable ABI (``abi3``),
# one binary for every Python from 3.10 on (:doc:`step 6 <06_the_build>`). The
# package loads it on import, once:
#
# .. literalinclude:: /../opguide/_library.py
#    :language: python
#    :pyobject: load
#
# and ``opguide/__init__.py`` exports the wrappers and references; importing
# ``opguide.ops`` registers the fake kernels and the vmap and autocast rules:
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
# ATen's operators are the best examples of schema style; the private
# ``torch._C._jit_get_all_schemas()`` lists them all:
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
# ATen's ``_fused_rms_norm`` returns the output and ``rstd``, as opguide's
# ``rms_norm_forward`` does (:doc:`step 8 <08_autograd>`). Next,
# :doc:`step 6 <06_the_build>`: the build of ``opguide/_C.abi3.so``.

# %%
# The files of this step, whole
# -----------------------------
# The files this page showed in parts:
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
