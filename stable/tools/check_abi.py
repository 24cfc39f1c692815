"""Lists what a compiled library takes from libtorch's C++ API; none is allowed.

A library on the stable ABI reaches torch only through the C shim (plain C
names such as ``aoti_torch_get_dim`` or ``torch_call_dispatcher``). Any
mangled ``at::``, ``c10::`` or ``torch::`` function it needs from libtorch
ties the build to one torch release: the classic symptom is ``undefined
symbol: _ZN3c10...`` after a torch upgrade. Usage::

    python tools/check_abi.py opguide_stable/_C.abi3.so

prints the symbols the library imports from torch and exits with 1 when any
of them is C++. Needs ``nm`` (binutils) and ``c++filt``.
"""

from __future__ import annotations

import re
import subprocess
import sys

# Demangled names from torch's C++ namespaces.
CPP_API = re.compile(r"^(at|c10|torch|caffe2)::|[ (<,](at|c10|torch)::")
# The stable C shim's own names.
C_SHIM = re.compile(r"^(aoti_torch_|torch_)")


def undefined_symbols(library: str) -> list[str]:
    """Every symbol the library needs from elsewhere, demangled."""
    out = subprocess.run(
        ["nm", "-D", "--undefined-only", "--demangle", library],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split(maxsplit=1)[1] for line in out.splitlines() if line.strip()]


def torch_cpp_symbols(library: str) -> list[str]:
    """The imported symbols from libtorch's C++ API (must be empty)."""
    return [s for s in undefined_symbols(library) if CPP_API.search(s.split("@")[0])]


def c_shim_symbols(library: str) -> list[str]:
    """The imported symbols from the stable C shim."""
    return [s for s in undefined_symbols(library) if C_SHIM.match(s)]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    shim, cpp = c_shim_symbols(argv[0]), torch_cpp_symbols(argv[0])
    print(f"{argv[0]}: {len(shim)} symbols from torch's C shim, {len(cpp)} from its C++ API")
    for name in cpp:
        print(f"  C++ API: {name}")
    return 1 if cpp else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
