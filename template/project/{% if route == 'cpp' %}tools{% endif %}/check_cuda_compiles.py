"""Compiles the CUDA sources with ``nvcc -c``, on any machine with nvcc: no GPU needed.

    python tools/check_cuda_compiles.py            # every csrc/*.cu, for sm_90
    python tools/check_cuda_compiles.py --arch sm_80

Each file is compiled as setup.py's build would compile it (torch's include
folders, its nvcc flags, C++20, position-independent code, torch's C++ ABI),
and the object file is thrown away. The command is
printed whole, so it can be copied. Two flags make it work with torch's CPU
wheel, which ships the CUDA headers of c10 but not every file a CUDA build has:

* ``-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE``: c10/cuda/CUDAMacros.h would include
  ``c10/cuda/impl/cuda_cmake_macros.h``, which only CUDA builds of torch have;
* the wrapper includes ``c10/cuda`` headers rather than ``ATen/cuda/CUDAContext.h``,
  whose cuBLAS and cuSPARSE headers the CPU wheel lacks.

Exit status: 0 when every file compiles (or nvcc is missing: it says so),
1 when one does not.
"""

import argparse
import glob
import os
import shlex
import shutil
import subprocess
import sys

import torch
from torch.utils.cpp_extension import COMMON_NVCC_FLAGS, include_paths


def nvcc_command(nvcc: str, source: str, arch: str) -> list[str]:
    """The nvcc command line that compiles ``source`` and discards the object."""
    return [
        nvcc,
        "-c",
        source,
        "-o",
        os.devnull,
        f"-arch={arch}",
        "-std=c++20",
        "-Xcompiler",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE",
        *COMMON_NVCC_FLAGS,
        "-Icsrc",
        *("-I" + path for path in include_paths()),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90", help="GPU architecture (default sm_90)")
    parser.add_argument("sources", nargs="*", help="files to compile (default csrc/*.cu)")
    args = parser.parse_args()
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc")
    if nvcc is None and os.environ.get("CUDA_HOME"):
        nvcc = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
    if nvcc is None or not os.path.isfile(nvcc):
        print("SKIPPED: nvcc not found (put it on PATH or set CUDA_HOME)")
        return 0
    failed = 0
    for source in args.sources or sorted(glob.glob("csrc/*.cu")):
        command = nvcc_command(nvcc, source, args.arch)
        # Printed as typed: "nvcc" when it is the one on PATH.
        typed = ["nvcc" if nvcc == shutil.which("nvcc") else nvcc, *command[1:]]
        print("$", shlex.join(typed), flush=True)
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            failed += 1
            print(proc.stdout + proc.stderr)
        print(f"{source}: {'compiled' if proc.returncode == 0 else 'FAILED'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
