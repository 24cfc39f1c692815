"""Whether the Triton kernels run in Triton's interpreter, as the reader chose.

Triton compiles kernels for GPUs. Without one, its interpreter runs the same
kernels on CPU tensors (with NumPy, slowly). ``TRITON_INTERPRET=1`` in the
environment selects it for every Triton kernel of the process, and Triton
reads it when ``@triton.jit`` runs, including on ``triton.language``'s own
helpers when ``triton`` is first imported. So it is the reader's switch, set
before Python starts (``TRITON_INTERPRET=1 python script.py``) or in a
script's first lines, before anything imports ``triton``; opguide only reads
it. Without a GPU and without the interpreter, the Triton operators are
defined but refuse CPU tensors, naming the variable.
"""

import os

import triton
import triton.language as tl


def _interpreter_selected() -> bool:
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:  # Triton 3.4 and later: the knob that @triton.jit reads
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


#: Whether opguide's kernels run in Triton's interpreter in this process.
INTERPRET = _interpreter_selected()

if INTERPRET and type(tl.zeros).__name__ == "JITFunction":
    # triton.language was imported before TRITON_INTERPRET=1 was set: its own
    # helpers are compiled-mode functions, which the interpreter cannot call.
    raise ImportError(
        "opguide: triton was imported before TRITON_INTERPRET=1 was set, so Triton's "
        "interpreter cannot run; set TRITON_INTERPRET=1 in the environment before "
        "anything imports triton"
    )

#: What to do to run the Triton kernels on CPU tensors, for error messages.
HOW_TO_INTERPRET = (
    "set TRITON_INTERPRET=1 in the environment before triton is imported "
    "(for example `TRITON_INTERPRET=1 python script.py`)"
)
