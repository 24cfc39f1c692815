r"""
Step 12: Overriding an ATen operator for one dispatch key
=========================================================

Part I registers kernels for an operator of its own. A backend author
registers kernels for ATen's operators (``aten::neg``, ``aten::add``) under
their own dispatch key, and the same mechanism can replace ATen's kernel for
``CPU``. This step shows:

* an ATen operator's exact schema and C++ signature;
* a tiny backend on ``PrivateUse1``: allocator, device guard, and kernels for
  ``empty``, ``copy``, ``fill_``, ``neg`` and ``add``;
* an override of ATen's ``CPU`` kernel, PyTorch's warning, and calling ATen's
  kernel from it without recursion;
* switches that turn one override off, or log every call.

The files in ``csrc/dispatcher/`` are demo libraries this page compiles, not
part of ``opguide._C``.
"""

# %%
# Finding the exact schema
# ------------------------
# A kernel must match the overload's schema exactly:
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
# ``x + y`` is ``add.Tensor``; ``add.Scalar`` is another operator to the
# dispatcher. ATen's per-backend headers spell out each C++ signature:
header = Path(include_paths()[0]) / "ATen" / "ops" / "add_cpu_dispatch.h"
print(header.relative_to(Path(torch.__file__).parent))
print(next(line for line in header.read_text().splitlines() if " add(" in line))

# %%
# The dispatch table (a private debugging aid) says which kernel runs for each
# key; ``PrivateUse1``'s default forwards to ``aten::neg.out``, which has no
# kernel there:
table = torch._C._dispatch_dump_table("aten::neg").splitlines()
for key in ("CPU:", "PrivateUse1:"):
    print(next((line for line in table if line.startswith(key)), f"{key} (no kernel)"))

# %%
# A backend on PrivateUse1
# ------------------------
# ``PrivateUse1`` is the key PyTorch reserves for out-of-tree devices.
# *hostdev* keeps its "device memory" on the host, with the parts a real
# backend needs. An allocator:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [allocator]
#    :end-before: // [allocator-end]
#
# A device guard:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [guard]
#    :end-before: // [guard-end]
#
# The factory kernels, where every tensor on the device is born:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [empty]
#    :end-before: // [empty-end]
#
# ``Tensor.copy_`` calls ``aten::_copy_from`` when one side is a
# ``PrivateUse1`` tensor, so one kernel serves every copy:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [copy]
#    :end-before: // [copy-end]
#
# The compute kernels, each launch checked as a CUDA launch is:
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
# The pretend runtime reports a failed launch through a status:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [runtime]
#    :end-before: // [runtime-end]
#
# The registrations, one line per ATen operator:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_backend.cpp
#    :language: cpp
#    :start-after: // [register]
#    :end-before: // [register-end]
#
# ``impl_unless_disabled`` is ``m.impl`` with an off switch (below).
#
# Building and naming the device
# ------------------------------
# A process renames ``PrivateUse1`` once, and parts of PyTorch then ask the
# device questions (:func:`torch.manual_seed` seeds it too: ``_seed_custom_device``
# in `torch/random.py
# <https://github.com/pytorch/pytorch/blob/main/torch/random.py>`__), so the
# backend runs in child processes:
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
# :func:`torch.utils.rename_privateuse1_backend` makes ``"hostdev"`` a device
# string; :func:`torch.utils.generate_methods_for_privateuse1_backend` adds
# ``Tensor.hostdev()``:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: register_hostdev
#
# A small program on the new device
# ---------------------------------
# Add, negate, copy back, against the CPU in several dtypes:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: small_program
DEMO = str(DISPATCHER_SRC / "hostdev_demo.py")
child = run_child(DEMO, hostdev_lib, "program")
assert child.returncode == 0, child.stderr
print(child.stdout)

# %%
# ``OPGUIDE_LOG_OVERRIDES=1`` makes every kernel print a line on stderr:
#
# .. literalinclude:: /../csrc/dispatcher/override_switches.h
#    :language: cpp
#    :start-after: // [log-switch]
#    :end-before: // [log-switch-end]
#
# A one-line program with it set:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: tiny
child = run_child(DEMO, hostdev_lib, "tiny", OPGUIDE_LOG_OVERRIDES="1")
assert child.returncode == 0, child.stderr
print("stdout:", child.stdout.strip())
print(child.stderr)

# %%
# What the backend does not implement
# -----------------------------------
# Any other operator fails with the dispatcher's message (``sub`` names
# ``sub.out``, where its default forwards); our kernels name the argument
# they reject:
#
# .. literalinclude:: /../csrc/dispatcher/hostdev_demo.py
#    :pyobject: errors
child = run_child(DEMO, hostdev_lib, "errors")
assert child.returncode == 0, child.stderr
print(child.stdout)

# %%
# Overriding ATen's CPU kernel
# ----------------------------
# ``TORCH_LIBRARY_IMPL(aten, CPU, m)`` replaces ATen's kernel for every CPU
# tensor in the process. Each override here logs and runs ATen's kernel:
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
# A child process runs ``neg`` three times and ``add`` once:
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
# The table points at our file. PyTorch's warning, once per process for the
# first override, names the operator, the key and the new kernel; its
# "previous kernel" is the registration that first gave the operator its C++
# signature, under any key (`OperatorEntry.cpp
# <https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/dispatch/OperatorEntry.cpp>`__),
# not necessarily the CPU kernel replaced, as the last line says. Paths like
# ``/__w/pytorch/...`` are PyTorch's build machines'. Then one log line per
# call.
#
# Turning one override off
# ------------------------
# ``OPGUIDE_DISABLE_OVERRIDE_neg=1`` skips the ``neg`` override at load:
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
# ``neg`` is ATen's again; ``add`` is still overridden.
#
# Calling the operator you override
# ---------------------------------
# The obvious call is wrong:
#
# .. literalinclude:: /../csrc/dispatcher/cpu_override.cpp
#    :language: cpp
#    :start-after: // [wrong]
#    :end-before: // [wrong-end]
#
# ``at::neg`` dispatches to the CPU entry, the override itself; redispatch
# does not help, since the override *is* the CPU entry. Call ATen's kernel
# directly: ``at::cpu::neg`` from ``<ATen/ops/neg_cpu_dispatch.h>``.
# ``OPGUIDE_OVERRIDE_NAIVE_NEG=1`` registers the wrong version, with a guard
# that turns the recursion into an error:
child = run_child(CPU_OVERRIDE_CHILD, OPGUIDE_OVERRIDE_NAIVE_NEG="1")
print("exit status:", child.returncode)
print(child.stderr.strip().splitlines()[-1])

# %%
# The files of this step, whole
# -----------------------------
# The files this page showed in parts:
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
