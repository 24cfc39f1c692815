// The error check of the files that two libraries compile: TORCH_CHECK (c10)
// in opguide's, STD_TORCH_CHECK (torch/headeronly) in the stable-ABI
// library's, which calls no C++ function of libtorch (stable/setup.py
// defines OPGUIDE_STABLE_ABI). Both raise a RuntimeError in Python.
#pragma once

#if defined(OPGUIDE_STABLE_ABI)
#include <torch/headeronly/util/Exception.h>
#define OPGUIDE_AOT_CHECK STD_TORCH_CHECK
#else
#include <c10/util/Exception.h>
#define OPGUIDE_AOT_CHECK TORCH_CHECK
#endif
