"""Builds first_op._C against the installed torch (pip install --no-build-isolation)."""

import glob
import sys

import torch
from setuptools import setup
from torch.utils.cpp_extension import (
    CUDA_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
)

# The CUDA kernel needs a CUDA build of torch and a CUDA toolkit (nvcc,
# CUDA_HOME), not a GPU; without them the library holds the CPU kernel alone.
use_cuda = torch.version.cuda is not None and CUDA_HOME is not None
Extension = CUDAExtension if use_cuda else CppExtension
sources = sorted(glob.glob("csrc/*.cpp") + (glob.glob("csrc/*.cu") if use_cuda else []))
# at::parallel_for uses several threads only in code built with OpenMP, which
# Apple's clang lacks (there the CPU kernel runs on one thread).
openmp = [] if sys.platform == "darwin" else ["-fopenmp"]

setup(
    packages=["first_op"],
    ext_modules=[
        Extension(
            "first_op._C",
            sources,
            extra_compile_args={"cxx": ["-O3", *openmp], "nvcc": ["-O3"]},
            extra_link_args=openmp,
            # No Python C API is called (TORCH_LIBRARY registers the operator), so
            # one build serves every CPython from 3.10 on; the macro enforces it.
            py_limited_api=True,
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
