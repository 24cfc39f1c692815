r"""
Step 13: Namespaces, fragments and loading libraries
====================================================

A namespace belongs to the one library that defines it with
``TORCH_LIBRARY``. Two compiled libraries, or one library loaded twice,
break that rule; this step breaks it on purpose, shows why the error ends
the process instead of raising, and fixes it two ways: distinct namespaces,
or ``TORCH_LIBRARY_FRAGMENT``.

Two small libraries
-------------------
Two demo libraries of one matmul each; the namespace and the kind of
definition block are chosen at compile time:

.. literalinclude:: /../csrc/dispatcher/matmul_library.h
   :language: cpp
   :start-after: // [define-macro]
   :end-before: // [define-macro-end]

The first library defines ``matmul_naive``:

.. literalinclude:: /../csrc/dispatcher/matmul_naive.cpp
   :language: cpp
   :start-after: // [register]
   :end-before: // [register-end]

and the second ``matmul_tiled``, which computes the product in 64 x 64 tiles:

.. literalinclude:: /../csrc/dispatcher/matmul_tiled.cpp
   :language: cpp
   :start-after: namespace opguide_mm {
   :end-before: // [register-end]
"""

# %%
# Building and loading the first library
# --------------------------------------
# :func:`torch.ops.load_library` opens the library with ``dlopen``, which
# runs its static initialisers, its ``TORCH_LIBRARY`` blocks among them:
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

# sphinx-gallery runs this script from examples_src/; so does the test suite.
from guidekit.buildinfo import (
    format_build_config,
    load_line,
    registered_operators,
    without_compiler_folder,
)
from guidekit.compile_checks import source_root, without_machine_paths

# sphinx_gallery_thumbnail_path = "_thumbnails/13.png"
ROOT = source_root()  # the opguide source tree, wherever this script runs from
SRC = ROOT / "csrc" / "dispatcher"


def build(name: str, source: str, *defines: str) -> str:
    """Compiles one matmul library into build/jit/<name>/ and loads it."""
    build_dir = ROOT / "build" / "jit" / name
    build_dir.mkdir(parents=True, exist_ok=True)
    return load(
        name=name,
        sources=[str(SRC / source)],
        extra_include_paths=[str(SRC)],
        extra_cflags=["-O2", *defines],
        build_directory=str(build_dir),
        is_python_module=False,
    )


start = time.time()
naive_lib = build("opguide_mm_naive", "matmul_naive.cpp")
print(load_line(naive_lib, since=start))
print("loaded:", naive_lib in torch.ops.loaded_libraries)
print("operators in opguide_mm:", registered_operators("opguide_mm"))

a, b = torch.randn(100, 70, dtype=torch.float64), torch.randn(70, 90, dtype=torch.float64)
torch.testing.assert_close(torch.ops.opguide_mm.matmul_naive(a, b), a @ b)
print("matmul_naive == a @ b")

# %%
# Two libraries, one namespace
# ----------------------------
# The second library, same namespace, its own ``TORCH_LIBRARY``, loaded after
# the first in a child process. The error is thrown in a static initialiser
# inside ``dlopen``, where no caller can catch it, so the process aborts:
same_ns_dir = ROOT / "build" / "jit" / "opguide_mm_tiled_same_ns"
same_ns_dir.mkdir(parents=True, exist_ok=True)
child_code = f"""
    import torch
    from torch.utils.cpp_extension import load
    load(name="opguide_mm_tiled_same_ns",
         sources=[{str(SRC / "matmul_tiled.cpp")!r}], extra_include_paths=[{str(SRC)!r}],
         extra_cflags=["-O2"], build_directory={str(same_ns_dir)!r},
         is_python_module=False)
    print("matmul_tiled alone: loaded, registers", torch.ops.opguide_mm.matmul_tiled, flush=True)
    torch.ops.load_library({naive_lib!r})
    print("not reached")
"""


def run_child(code: str) -> tuple[subprocess.CompletedProcess, str]:
    """Runs ``code`` in a child Python; prints its output, exit status and error message.

    Returns the finished process and the message's text after its first line.
    """
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600
    )
    print(child.stdout)
    print("exit status:", child.returncode, "(-6 is SIGABRT)" if child.returncode == -6 else "")
    # The message, without the C++ stack trace that follows it.
    stderr = without_machine_paths(child.stderr)  # <repo>, <venv> for the folders it ran in
    message = stderr[: stderr.find("Exception raised from")].strip()
    first_line, _, what = message.partition("\n")
    print(first_line)
    print(textwrap.fill(what.strip(), width=100, break_long_words=False, break_on_hyphens=False))
    return child, what


child, what = run_child(child_code)

# %%
# The error names the namespace, both sources, and the two ways out. One
# library under two file names (an installed package and a JIT build of the
# same sources) is two libraries too:
copy_dir = ROOT / "build" / "jit" / "opguide_mm_naive_copy"
copy_dir.mkdir(parents=True, exist_ok=True)
naive_copy = copy_dir / "opguide_mm_naive_copy.so"
naive_copy.write_bytes(Path(naive_lib).read_bytes())
twice_code = f"""
    import torch
    torch.ops.load_library({naive_lib!r})
    print("first file: loaded", flush=True)
    torch.ops.load_library({str(naive_copy)!r})
    print("second file: loaded", flush=True)
"""
twice, what = run_child(twice_code)
assert twice.returncode != 0 and what.count("matmul_naive.cpp:") == 2, twice.stderr[-3000:]

# %%
# Hence steps :doc:`2 <02_cpp_cpu_kernel>` and :doc:`3 <03_cuda_kernel>` build
# their JIT files under a namespace of their own, ``opguide_minimal``.
#
# Fix 1: distinct namespaces
# --------------------------
tiled_lib = build("opguide_mm_tiled", "matmul_tiled.cpp", "-DMATMUL_NAMESPACE=opguide_mm_tiled")
print("operators in opguide_mm_tiled:", registered_operators("opguide_mm_tiled"))
torch.testing.assert_close(torch.ops.opguide_mm_tiled.matmul_tiled(a, b), a @ b)
print("opguide_mm_tiled::matmul_tiled == a @ b")

# %%
# Fix 2: TORCH_LIBRARY_FRAGMENT
# -----------------------------
# Fragments share a namespace across files and libraries; each operator's
# name must stay unique:
fragment_lib = build("opguide_mm_tiled_fragment", "matmul_tiled.cpp", "-DMATMUL_FRAGMENT")
print("operators in opguide_mm:", registered_operators("opguide_mm"))
for op in (torch.ops.opguide_mm.matmul_naive, torch.ops.opguide_mm.matmul_tiled):
    torch.testing.assert_close(op(a, b), a @ b)
    print(f"{op._qualified_op_name} == a @ b (float64, 100x70 @ 70x90)")

# %%
# Checking the arguments is still each kernel's job:
try:
    torch.ops.opguide_mm.matmul_tiled(a, b.t())
except RuntimeError as err:
    print("RuntimeError:", err)

# %%
# Printing the build settings
# ---------------------------
# When a build or a load misbehaves, ask what the build saw and what this
# process loaded (:doc:`step 6 <06_the_build>`'s ``guidekit.buildinfo``):
#
# .. literalinclude:: /../guidekit/buildinfo.py
#    :pyobject: build_config
config = without_machine_paths(format_build_config())
# <repo>, <venv>, <tmp> for this machine's folders, and <bin> for its compiler's:
print(without_compiler_folder(config))
others = [
    without_machine_paths(lib)
    for lib in sorted(torch.ops.loaded_libraries)
    if "opguide_mm" not in lib and not Path(lib).is_relative_to(ROOT / "opguide")
]
if others:
    # A process may run several pages: one run earlier in it may have loaded a
    # library too.
    print(f"loaded by other code in this process, not by this page: {', '.join(others)}")

# %%
# This page's builds are under ``build/jit/``; deleting one forces a rebuild:
print("this page's builds:", sorted(p.name for p in (ROOT / "build" / "jit").glob("opguide_mm*")))
cache = os.environ.get("TORCH_EXTENSIONS_DIR", "(not set)")
print("TORCH_EXTENSIONS_DIR =", without_machine_paths(cache))

# %%
# The files of this step, whole
# -----------------------------
# The files this page showed in parts:
#
# .. dropdown:: csrc/dispatcher/matmul_library.h
#
#    .. literalinclude:: /../csrc/dispatcher/matmul_library.h
#       :language: cpp
#       :caption: csrc/dispatcher/matmul_library.h
#
# .. dropdown:: csrc/dispatcher/matmul_naive.cpp
#
#    .. literalinclude:: /../csrc/dispatcher/matmul_naive.cpp
#       :language: cpp
#       :caption: csrc/dispatcher/matmul_naive.cpp
#
# .. dropdown:: csrc/dispatcher/matmul_tiled.cpp
#
#    .. literalinclude:: /../csrc/dispatcher/matmul_tiled.cpp
#       :language: cpp
#       :caption: csrc/dispatcher/matmul_tiled.cpp
