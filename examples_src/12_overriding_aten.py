r"""
Step 12: Overriding an ATen operator for one dispatch key
=========================================================

So far every kernel belonged to an operator of our own. A backend author does
the opposite: they write kernels for operators that already exist
(``aten::neg``, ``aten::add``) and register them for their own dispatch key.
The same mechanism can replace ATen's kernel for a key that already has one,
such as ``CPU``.

In this step you will learn:

* how to find the exact schema of an ATen operator, and the C++ signature that
  goes with it;
* how to build a tiny out-of-tree backend on the ``PrivateUse1`` key: an
  allocator, a device guard, and kernels for ``empty``, ``copy``, ``fill_``,
  ``neg`` and ``add``, registered with ``TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)``
  and given a device name with :func:`torch.utils.rename_privateuse1_backend`;
* how to override ATen's own ``CPU`` kernel, the warning PyTorch prints, and
  how to call ATen's kernel from the override without infinite recursion;
* two switches worth building into any override: an environment variable that
  turns one override off at load time, and one that logs every call.

The C++ files are in ``csrc/dispatcher/``. They are separate demo libraries,
compiled by this page, not part of ``opguide._C``.
"""

# %%
# Finding the exact schema
# ------------------------
# A kernel must match the operator's schema exactly: the overload, every
# argument and its type. Python shows the schema of every overload:
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import include_paths

# sphinx_gallery_thumbnail_path = "_thumbnails/12.png"
print(torch.ops.aten.neg.default._schema)
print("overloads of aten::add:", torch.ops.aten.add.overloads())
print(torch.ops.aten.add.Tensor._schema)

# %%
# ``x + y`` on two tensors is ``add.Tensor``; ``add.Scalar`` and ``add.out``
# are other operators as far as the dispatcher is concerned. The C++ type of
# a kernel follows from the schema (``Tensor`` is ``const at::Tensor&``,
# ``Scalar`` is ``const at::Scalar&``, ``SymInt[]`` may be taken as
# ``at::IntArrayRef``, ``T?`` is ``std::optional<T>``). ATen's own
# per-backend headers spell it out; here is ATen's CPU kernel of ``add.Tensor``:
header = Path(include_paths()[0]) / "ATen" / "ops" / "add_cpu_dispatch.h"
print(header.relative_to(Path(torch.__file__).parent))
print(next(line for line in header.read_text().splitlines() if " add(" in line))

# %%
# Which kernel does the dispatcher run for each key? The dispatch table
# answers (a debugging aid, private API). For ``aten::neg`` the CPU entry is
# ATen's generated registration. ``PrivateUse1`` only has a generic default
# kernel, which forwards to ``aten::neg.out``, and that has no ``PrivateUse1``
# kernel at all, so ``-x`` on a new device would fail:
table = torch._C._dispatch_dump_table("aten::neg").splitlines()
for key in ("CPU:", "PrivateUse1:"):
    print(next((line for line in table if line.startswith(key)), f"{key} (no kernel)"))

# %%
# A backend on PrivateUse1
# ------------------------
# ``PrivateUse1`` is the dispatch key PyTorch reserves for out-of-tree devices.
# The backend below, *hostdev*, keeps its "device memory" on the host so that
# it runs anywhere, but it has the parts a real accelerator backend needs.
#
# An allocator, which stamps the device into every allocation:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [allocator]
#    :end-before: // [allocator-end]
#
# A device guard, which PyTorch uses to query and switch the current device:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [guard]
#    :end-before: // [guard-end]
#
# Factory kernels. Every tensor on the device is born in one of these two;
# ``at::detail::empty_generic`` does the bookkeeping with our allocator:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [empty]
#    :end-before: // [empty-end]
#
# Copies. ``Tensor.copy_`` is implemented once in ATen for all devices and
# calls ``aten::_copy_from`` when one side is a ``PrivateUse1`` tensor, so this
# one kernel serves ``.to("hostdev")``, ``.cpu()`` and device-to-device copies:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [copy]
#    :end-before: // [copy-end]
#
# The compute kernels. A kernel is "launched" and the launch is checked right
# after, the way a CUDA kernel is followed by ``C10_CUDA_KERNEL_LAUNCH_CHECK()``;
# ``AT_DISPATCH_ALL_TYPES_AND2`` instantiates the body once per dtype:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [neg]
#    :end-before: // [neg-end]
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [add]
#    :end-before: // [add-end]
#
# The launch check comes from this small pretend runtime, which, like a GPU
# runtime, reports a failed launch through a status instead of an exception:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [runtime]
#    :end-before: // [runtime-end]
#
# Finally the registrations, one line per ATen operator:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [register]
#    :end-before: // [register-end]
#
# ``impl_unless_disabled`` is ``m.impl`` with an off switch, shown further down.
#
# Building and naming the device
# ------------------------------
# Naming the backend changes the whole process: a process can rename
# ``PrivateUse1`` only once, and afterwards parts of PyTorch start asking the
# new device questions. :func:`torch.manual_seed`, for example, then also
# seeds it through ``torch.hostdev.manual_seed_all``, and warns when the
# device's module has no such function (``_seed_custom_device`` in
# `torch/random.py
# <https://github.com/pytorch/pytorch/blob/main/torch/random.py>`__).
# This page shares its process with the other steps, so the
# backend is built, loaded and used in child processes, and the page prints
# what they print.
from guidekit.buildinfo import load_line  # noqa: E402
from guidekit.compile_checks import source_root, without_machine_paths  # noqa: E402

ROOT = source_root()  # the opguide source tree, wherever this script runs from
DISPATCHER_SRC = ROOT / "csrc" / "dispatcher"


def run_child(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Runs Python `code` (or a file, when `code` ends in .py) in a fresh process.

    Its output comes back with the folders it ran in written as ``<repo>``,
    ``<venv>`` and ``<tmp>``, and PyTorch's log lines without their date and
    time (``[W1127 16:31:54.750984 File.cpp:208]`` becomes ``[W File.cpp:208]``).
    """
    command = [code] if code.endswith(".py") else ["-c", textwrap.dedent(code)]
    child = subprocess.run(
        [sys.executable, *command, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    child.stdout = without_machine_paths(child.stdout)
    child.stderr = re.sub(
        r"^\[([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+(?: \d+)? ",
        r"[\1 ",
        without_machine_paths(child.stderr),
        flags=re.M,
    )
    return child


def build_in_child(name: str, source: str) -> str:
    """Compiles csrc/dispatcher/<source> into build/jit/<name>/; returns the library path.

    load() also loads the library, which is why it runs in a child process.
    """
    build_dir = ROOT / "build" / "jit" / name
    build_dir.mkdir(parents=True, exist_ok=True)
    child = run_child(f"""
        from torch.utils.cpp_extension import load
        print(load(name={name!r}, sources=[{str(DISPATCHER_SRC / source)!r}],
                   extra_include_paths=[{str(DISPATCHER_SRC)!r}], extra_cflags=["-O2"],
                   build_directory={str(build_dir)!r}, is_python_module=False))
    """)
    assert child.returncode == 0, child.stderr
    return str(build_dir / f"{name}.so")  # the file load() built and printed


start = time.time()
hostdev_lib = build_in_child("opguide_hostdev", "hostdev_backend.cpp")
print(load_line(hostdev_lib, since=start, loaded=False))

# %%
# The Python side of a backend gives the key a name: after
# :func:`torch.utils.rename_privateuse1_backend`, ``"hostdev"`` is a device
# string. PyTorch also looks for a module ``torch.hostdev``, and
# :func:`torch.utils.generate_methods_for_privateuse1_backend` adds
# ``Tensor.hostdev()`` and ``Tensor.is_hostdev``. From
# ``csrc/dispatcher/hostdev_demo.py``, the program the child processes run:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: register_hostdev
#
# A small program on the new device
# ---------------------------------
# Create tensors on the device, add, negate, copy back, and compare with the
# same program on the CPU (random inputs, several dtypes):
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: small_program
DEMO = str(DISPATCHER_SRC / "hostdev_demo.py")
child = run_child(DEMO, hostdev_lib, "program")
assert child.returncode == 0, child.stderr
print(child.stdout)

# %%
# Which kernels did that run? ``OPGUIDE_LOG_OVERRIDES=1`` makes every kernel of
# these libraries print one line on stderr:
#
# .. literalinclude:: /../csrc/dispatcher/override_switches.h
#    :language: cpp
#    :start-after: // [log-switch]
#    :end-before: // [log-switch-end]
#
# The variable is read once, at the first call of an overriding kernel. A
# one-line program, run with it set:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: tiny
child = run_child(DEMO, hostdev_lib, "tiny", OPGUIDE_LOG_OVERRIDES="1")
assert child.returncode == 0, child.stderr
print("stdout:", child.stdout.strip())
print(child.stderr)

# %%
# ``x.to("hostdev")`` is ``empty_strided`` then ``_copy_from``; ``+`` is
# ``add.Tensor``, which allocates its output through ``empty.memory_format``;
# unary minus is ``neg``; ``.cpu()`` allocates on the CPU (ATen's kernel, not
# logged) and copies with ``_copy_from``.
#
# What the backend does not implement
# -----------------------------------
# Any other operator fails with the dispatcher's own message, which names the
# operator and the backend (the first sentence is printed here). ``sub`` has
# the same generic default kernel as ``neg``, so the error names ``sub.out``,
# the operator it forwards to. Our kernels reject what they cannot do, naming
# the argument:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: errors
child = run_child(DEMO, hostdev_lib, "errors")
assert child.returncode == 0, child.stderr
print(child.stdout)

# %%
# Overriding ATen's CPU kernel
# ----------------------------
# The same ``TORCH_LIBRARY_IMPL`` with the ``CPU`` key replaces ATen's kernel
# for every CPU tensor in the process. This library does it for ``neg`` and
# ``add.Tensor``; each override logs the call and runs ATen's kernel:
#
# .. literalinclude:: /../csrc/dispatcher/cpu_override.cpp
#    :language: cpp
#    :start-after: // [right]
#    :end-before: // [right-end]
#
# .. literalinclude:: /../csrc/dispatcher/cpu_override.cpp
#    :language: cpp
#    :start-after: // [register]
#    :end-before: // [register-end]
#
# The change is process-wide, so again a child process loads the library, runs
# ``neg`` three times and ``add`` once, and reports which kernel the dispatch
# table holds for CPU:
cpu_override_lib = build_in_child("opguide_cpu_override", "cpu_override.cpp")
CPU_OVERRIDE_CHILD = f"""
    import torch
    torch.ops.load_library({cpu_override_lib!r})
    cpu = [l for l in torch._C._dispatch_dump_table("aten::neg").splitlines()
           if l.startswith("CPU:")]
    print("dispatch table for aten::neg,", cpu[0])
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for _ in range(3):
        z = -x
    print("neg equals x * -1:", torch.equal(z, x * -1))
    print("add matches:", torch.equal(x + y, torch.stack([x, y]).sum(0)))
"""
child = run_child(CPU_OVERRIDE_CHILD, OPGUIDE_LOG_OVERRIDES="1")
assert child.returncode == 0, child.stderr
print(child.stdout)
print(child.stderr)
previous = re.search(r"previous kernel: registered at \S*?([^/\s]+):\d+", child.stderr)
if previous:
    kind = "" if previous[1].startswith("RegisterCPU") else ", not a file of ATen's CPU kernels"
    print(f"the warning's previous kernel is in {previous[1]}{kind}")
else:
    print("the warning names no previous kernel's file here")

# %%
# The stdout shows the dispatch table pointing at our file. The stderr starts
# with PyTorch's warning, printed while the library's registrations run: it
# names the operator, the key and the new kernel's file and line, once per
# process, for the first override only. Its "previous kernel" line names the
# registration that first gave the operator its C++ signature, under any key
# (``OperatorEntry::registerKernel`` in `OperatorEntry.cpp
# <https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/dispatch/OperatorEntry.cpp>`__
# prints that), which need not be the CPU kernel the table held: the last line
# above names that file, and says so where it is not one of ATen's CPU
# kernels. The table
# dumped before the load is the record of what was replaced. Paths such as
# ``/__w/pytorch/...`` or ``/pytorch/...`` in these lines (they differ between
# torch builds) are where PyTorch's own build machines compiled torch. The log lines
# follow, one per call: three ``neg`` and one ``add`` (the checks use ``mul``,
# ``stack`` and ``sum``, which are not overridden).
#
# Turning one override off
# ------------------------
# ``OPGUIDE_DISABLE_OVERRIDE_neg=1`` skips the registration of the ``neg``
# override when the library loads, so the dispatcher keeps ATen's kernel:
#
# .. literalinclude:: /../csrc/dispatcher/override_switches.h
#    :language: cpp
#    :start-after: // [disable-switch]
#    :end-before: // [disable-switch-end]
child = run_child(CPU_OVERRIDE_CHILD, OPGUIDE_LOG_OVERRIDES="1", OPGUIDE_DISABLE_OVERRIDE_neg="1")
assert child.returncode == 0, child.stderr
print(child.stdout)
print(child.stderr)

# %%
# The CPU entry of ``aten::neg`` is ATen's ``RegisterCPU`` again, no ``neg``
# call is logged, and ``add`` is still overridden. (This time the warning
# names ``add``: it is the first override in this process.)
#
# Calling the operator you override
# ---------------------------------
# An override usually wants ATen's result. The obvious call is wrong:
#
# .. literalinclude:: /../csrc/dispatcher/cpu_override.cpp
#    :language: cpp
#    :start-after: // [wrong]
#    :end-before: // [wrong-end]
#
# ``at::neg`` enters the dispatcher, the dispatcher looks up the CPU kernel,
# and that is the override itself. Redispatching with a smaller key set does
# not help either, because the override *is* the CPU entry; redispatch is the
# tool for a kernel that sits above the backend (an autograd or tracing layer)
# and wants the next key down. The right call is ATen's CPU kernel itself,
# ``at::cpu::neg`` from ``<ATen/ops/neg_cpu_dispatch.h>``, which does not go
# through the dispatcher. ``OPGUIDE_OVERRIDE_NAIVE_NEG=1`` registers the wrong
# version (with a guard that turns the endless recursion into an error):
child = run_child(CPU_OVERRIDE_CHILD, OPGUIDE_OVERRIDE_NAIVE_NEG="1")
print("exit status:", child.returncode)
print(child.stderr.strip().splitlines()[-1])

# %%
# The files of this step, whole
# -----------------------------
# The page above showed parts of these files; here each one is whole, as it
# is compiled and run.
#
# .. dropdown:: csrc/dispatcher/override_switches.h
#
#    .. literalinclude:: /../csrc/dispatcher/override_switches.h
#       :language: cpp
#       :caption: csrc/dispatcher/override_switches.h
#
# .. dropdown:: csrc/dispatcher/cpu_override.cpp
#
#    .. literalinclude:: /../csrc/dispatcher/cpu_override.cpp
#       :language: cpp
#       :caption: csrc/dispatcher/cpu_override.cpp
#
# .. dropdown:: csrc/dispatcher/hostdev_backend.cpp
#
#    .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#       :language: cpp
#       :caption: csrc/dispatcher/hostdev_backend.cpp
#
# .. dropdown:: csrc/dispatcher/hostdev_demo.py
#
#    .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#       :language: python
#       :caption: csrc/dispatcher/hostdev_demo.py
