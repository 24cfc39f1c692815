// Overrides ATen's own CPU kernels of aten::neg and aten::add.Tensor.
//
// Loading this library replaces, for the whole process, what every CPU
// tensor does on `-x` and `x + y`; PyTorch warns when it happens. The
// overrides here only log the call and then run ATen's kernel, which is
// the shape of most real overrides (instrumenting, or a faster kernel for
// some inputs with ATen's as the fallback).
//
// Not part of opguide._C: gallery step 12 and tests/test_dispatcher.py
// compile it on its own and load it in a child process only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/neg_cpu_dispatch.h>
#include <torch/library.h>

#include <cstdlib>

#include "override_switches.h"

namespace cpu_override {

// [right]
// Calling ATen's CPU kernel from the override. at::cpu::neg is the function
// ATen registered for the CPU key, called directly: no dispatcher, so no way
// back into this override.
at::Tensor neg(const at::Tensor& self) {
  opguide_dispatch::log_call("aten::neg", "CPU", self);
  return at::cpu::neg(self);
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  opguide_dispatch::log_call("aten::add.Tensor", "CPU", self);
  return at::cpu::add(self, other, alpha);
}
// [right-end]

// [wrong]
// The mistake: at::neg goes through the dispatcher, which picks the CPU
// kernel of aten::neg -- this function. Without the guard it recurses until
// the stack overflows and the process dies with a segfault; redispatching to
// the CPU key (op.redispatch(DispatchKeySet(CPU), ...)) lands in the same place.
// The guard turns the re-entry into an error that says what happened.
thread_local int neg_depth = 0;

at::Tensor neg_calls_at_neg(const at::Tensor& self) {
  TORCH_CHECK(neg_depth == 0,
              "cpu_override: the CPU kernel of aten::neg re-entered itself: it called "
              "at::neg, and the dispatcher sent that call back to this override. Call "
              "ATen's kernel directly with at::cpu::neg instead.");
  ++neg_depth;
  struct Restore {
    ~Restore() { --neg_depth; }
  } restore;
  opguide_dispatch::log_call("aten::neg", "CPU", self);
  return at::neg(self);
}
// [wrong-end]

}  // namespace cpu_override

// [register]
TORCH_LIBRARY_IMPL(aten, CPU, m) {
  // OPGUIDE_OVERRIDE_NAIVE_NEG=1 registers the recursive version, to show
  // the mistake on the page and in the tests.
  const bool naive = opguide_dispatch::env_is_one("OPGUIDE_OVERRIDE_NAIVE_NEG");
  opguide_dispatch::impl_unless_disabled(
      m, "neg", naive ? &cpu_override::neg_calls_at_neg : &cpu_override::neg);
  opguide_dispatch::impl_unless_disabled(m, "add.Tensor", &cpu_override::add);
}
// [register-end]
