// Registration macros shared by every file that registers opguide operators.
//
// The namespace is a macro so that the same sources can be built twice into
// one process: the installed package registers `opguide`, while the guide's
// JIT steps compile these very files with -DOPGUIDE_NAMESPACE=opguide_jit.
// A namespace may be defined by only one TORCH_LIBRARY per process.
#pragma once

#include <torch/library.h>

#ifndef OPGUIDE_NAMESPACE
#define OPGUIDE_NAMESPACE opguide
#endif

// TORCH_LIBRARY pastes its first argument with ##, which stops the
// preprocessor from expanding a macro passed there; one level of
// indirection expands OPGUIDE_NAMESPACE first.
#define OPGUIDE_TORCH_LIBRARY_(ns, m) TORCH_LIBRARY(ns, m)
#define OPGUIDE_TORCH_LIBRARY_IMPL_(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

// TORCH_LIBRARY(opguide, m) with the namespace taken from OPGUIDE_NAMESPACE.
#define OPGUIDE_LIBRARY(m) OPGUIDE_TORCH_LIBRARY_(OPGUIDE_NAMESPACE, m)
// TORCH_LIBRARY_IMPL(opguide, key, m), likewise.
#define OPGUIDE_LIBRARY_IMPL(key, m) \
  OPGUIDE_TORCH_LIBRARY_IMPL_(OPGUIDE_NAMESPACE, key, m)
