"""What nvcc made of a torch-free CUDA kernel: its registers, stack and SASS.

:func:`kernel_machine_code` compiles device code to a cubin with ``nvcc
-cubin`` and reads each kernel back with ``cuobjdump`` (``-res-usage`` for
registers and stack, ``-sass`` for the instructions), so that tests can check
what the compiler made of a kernel: no spill, the vector loads a kernel was
written for. :mod:`guidekit.compile_checks` imports these names too.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from guidekit.compilers import find_cuobjdump, find_nvcc

__all__ = ["KernelCode", "kernel_machine_code"]


@dataclasses.dataclass
class KernelCode:
    """One kernel of a cubin, as cuobjdump reports it.

    Attributes:
        name: the mangled name.
        registers: registers per thread.
        stack: bytes of stack per thread (spilled registers live there).
        instructions: the SASS instructions in program order, without their
            addresses and encodings (``"@P0 LDG.E.128.CONSTANT R4, desc[UR8][R8.64]"``).
    """

    name: str
    registers: int
    stack: int
    instructions: list[str]


def kernel_machine_code(
    source_text: str,
    *,
    include_dirs: Sequence[str | os.PathLike] = (),
    arch: str = "sm_90",
    extra_flags: Sequence[str] = (),
) -> dict[str, KernelCode]:
    """Compiles torch-free CUDA code to a cubin and reads back its kernels.

    Args:
        source_text: the ``.cu`` file's text; it must make nvcc emit the
            kernels of interest (for templates: take their addresses).
        include_dirs: folders for ``-I``.
        arch: the real architecture to compile for, e.g. ``"sm_90"``.
        extra_flags: more nvcc flags (``-D...``).

    Returns:
        Mangled kernel name to :class:`KernelCode`.

    Raises:
        FileNotFoundError: when nvcc or cuobjdump is missing.
        RuntimeError: when a compile or cuobjdump fails (with its output).
    """
    nvcc, cuobjdump = find_nvcc(), find_cuobjdump()
    if nvcc is None or cuobjdump is None:
        missing = "nvcc" if nvcc is None else "cuobjdump"
        raise FileNotFoundError(f"{missing} not found (set CUDA_HOME or PATH)")
    with tempfile.TemporaryDirectory() as tmp:
        source, cubin = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.cubin"
        source.write_text(source_text)
        command = [nvcc, "-cubin", str(source), "-o", str(cubin), f"-arch={arch}", "-O3"]
        command += ["-std=c++17", *("-I" + str(d) for d in include_dirs), *extra_flags]
        outputs = []
        dumps = [[cuobjdump, what, str(cubin)] for what in ("-res-usage", "-sass")]
        for cmd in (command, *dumps):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
            outputs.append(proc.stdout)
    kernels: dict[str, KernelCode] = {}
    name = None
    for line in outputs[1].splitlines():  # "Function NAME:" then "REG:57 STACK:0 ..."
        line = line.strip()
        if line.startswith("Function "):
            name = line[len("Function ") :].rstrip(":")
        elif name is not None and line.startswith("REG:"):
            fields = dict(f.split(":", 1) for f in line.split())
            kernels[name] = KernelCode(name, int(fields["REG"]), int(fields["STACK"]), [])
            name = None
    current = None
    for line in outputs[2].splitlines():  # "Function : NAME", then "/*0240*/  INSTR ;  /* enc */"
        stripped = line.strip()
        if stripped.startswith("Function : "):
            current = kernels.get(stripped[len("Function : ") :])
        elif current is not None and stripped.startswith("/*") and ";" in stripped:
            instruction = stripped.split("*/", 1)[1].split(";", 1)[0].strip()
            if instruction:
                current.instructions.append(instruction)
    return kernels
