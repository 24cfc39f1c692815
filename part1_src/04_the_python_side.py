r"""
4. The schema and its Python side
=================================

The compiled library of :doc:`page 3 <03_the_build>` holds the schema and the
kernels. The fake kernel and the backward of :doc:`page 1
<01_the_operator_in_python>` stay in Python, where they are short. This page
shows how the two halves find each other.

On this page you will:

* read the schema in ``TORCH_LIBRARY`` and the ``set_python_module`` call
  that names the Python module of the operator;
* read the package: it loads the library, then registers the fake kernel
  and the backward for the C++ operator;
* see what a process that loads the library alone is told;
* export a module that calls the operator.

The schema, in C++
------------------
The block at the end of ``rms_norm.cpp`` (shown whole on :doc:`page 2
<02_a_cpu_and_a_cuda_kernel>`):

.. literalinclude:: /../first_operator/csrc/rms_norm.cpp
   :language: cpp
   :start-at: TORCH_LIBRARY(first_op, m)
   :end-at: }

``m.def`` gives the schema: the same one ``custom_op`` inferred from the
annotations on page 1. ``Tensor`` arguments without an alias annotation
(such as ``Tensor(a!)``) promise that the operator writes none of them, and
``float`` is a Python float, a C++ ``double``. A namespace is defined by one
``TORCH_LIBRARY`` block in the whole process; other files add kernels with
``TORCH_LIBRARY_IMPL``, and schemas with ``TORCH_LIBRARY_FRAGMENT``
(:doc:`step 13 </auto_examples/13_namespaces_and_fragments>`).

``m.set_python_module("first_op.ops")`` applies to every operator defined
after it in the block. It records that their Python side lives in the module
``first_op.ops``, for two uses: when a program traces the operator and finds
no fake kernel, PyTorch's error names that module; and a fake kernel
registered from any other module raises on its first use, naming both.

The package
-----------
``__init__.py`` loads the library with :func:`torch.ops.load_library`, which
runs its ``TORCH_LIBRARY`` blocks, then imports ``ops.py``:

.. literalinclude:: /../first_operator/first_op/__init__.py
   :language: python
   :caption: first_operator/first_op/__init__.py

``ops.py`` holds the function users call, with its docstring, and registers
the fake kernel and the backward for ``first_op::rms_norm`` by its name. They
are page 1's, with :func:`torch.library.register_fake` and
:func:`torch.library.register_autograd` called with the operator's name,
since this operator was not made by ``custom_op``:

.. literalinclude:: /../first_operator/first_op/ops.py
   :language: python
   :caption: first_operator/first_op/ops.py

``import first_op`` thus gives the whole operator. A process that loads the
library another way (a program that calls ``torch.ops.load_library`` itself,
or a C++ program) gets the schema and the kernels, and no fake kernel.
"""

# %%
# The library alone
# -----------------
# The cell runs a second Python process that loads the compiled library and
# does not import ``first_op``. The kernels work; a call on tensors without
# data (``device="meta"``, what tracing uses) fails with an error that names
# the module to import, and so does ``torch.compile``. Then the process
# registers a fake kernel from its own ``__main__`` module, and PyTorch
# refuses it, naming both modules:
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import first_op
import torch

ONLY_THE_LIBRARY = """
import importlib.util
from pathlib import Path

import torch

# Find the package's folder without importing it, and load the library alone.
package = Path(importlib.util.find_spec("first_op").origin).parent
torch.ops.load_library(next(package.glob("_C.*")))
x, weight = torch.randn(4, 8), torch.randn(8)
print("on the CPU:", torch.ops.first_op.rms_norm(x, weight, 1e-6).shape)
try:
    torch.ops.first_op.rms_norm(x.to("meta"), weight.to("meta"), 1e-6)
except NotImplementedError as error:
    print("meta tensors:", error)
try:
    torch.compile(torch.ops.first_op.rms_norm, fullgraph=True)(x, weight, 1e-6)
except Exception as error:
    hints = [line for line in str(error).splitlines() if "first_op.ops" in line]
    print("torch.compile:", hints[0].split(", otherwise")[0].strip())


@torch.library.register_fake("first_op::rms_norm")
def _(x, weight, eps):
    return torch.empty_like(x)


try:
    torch.ops.first_op.rms_norm(x.to("meta"), weight.to("meta"), 1e-6)
except RuntimeError as error:
    print("a fake kernel in __main__:", error)
"""
with tempfile.TemporaryDirectory() as folder:
    script = Path(folder) / "only_the_library.py"
    script.write_text(ONLY_THE_LIBRARY)
    done = subprocess.run([sys.executable, script], capture_output=True, text=True)
PROJECT = Path(first_op.__file__).resolve().parents[1]  # first_operator/
# Paths from the folder that holds the project, as a reader's would read.
output = done.stdout.replace(f"{PROJECT.parent}/", "")
for line in output.splitlines():
    print(textwrap.fill(line, 80, subsequent_indent="    "))
said = ("meta tensors:", "torch.compile:", "a fake kernel in __main__:")
assert all(f"\n{what}" in output for what in said), output + done.stderr

# %%
# In this process ``first_op`` is imported, so a call on meta tensors runs
# the fake kernel of ``ops.py``:
x = torch.randn(4, 8)
weight = torch.randn(8)
print(first_op.rms_norm(x.to("meta"), weight.to("meta")))

# %%
# Export
# ------
# A module that calls the operator exports with it as one node, by its name.
# The exported program runs the C++ and CUDA kernels wherever it is loaded
# with ``first_op``:


class Norm(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))

    def forward(self, x):
        return first_op.rms_norm(x, self.weight)


program = torch.export.export(Norm(8), (x,))
for node in program.graph.nodes:
    print(f"{node.op:14} {node.target}")
assert any(n.target == torch.ops.first_op.rms_norm.default for n in program.graph.nodes)
torch.testing.assert_close(program.module()(x), Norm(8)(x))
print("the exported program gives the module's values")

# %%
# Gradients
# ---------
# The backward registered in ``ops.py`` runs for the C++ operator, and gives
# PyTorch's own gradients:
xg, wg = x.clone().requires_grad_(), weight.clone().requires_grad_()
first_op.rms_norm(xg, wg).sum().backward()
xe, we = x.clone().requires_grad_(), weight.clone().requires_grad_()
torch.nn.functional.rms_norm(xe, (8,), we, eps=1e-6).sum().backward()
torch.testing.assert_close((xg.grad, wg.grad), (xe.grad, we.grad))
print("grad_x and grad_weight match F.rms_norm's")

# %%
# The next page turns these checks, and more, into the project's tests.
