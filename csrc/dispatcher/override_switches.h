// Switches shared by the libraries that override ATen operators
// (hostdev_backend.cpp, cpu_override.cpp). Each is read once: the disable
// switches when the library is loaded, because that is when
// TORCH_LIBRARY_IMPL blocks run; the log switch at the first call of an
// overriding kernel (log_overrides() below).
//
//   OPGUIDE_DISABLE_OVERRIDE_<name>=1  do not register the override of
//                                      aten::<name> (name without overload,
//                                      e.g. neg, add, fill_)
//   OPGUIDE_LOG_OVERRIDES=1            print one line on stderr per call of
//                                      an overriding kernel
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace opguide_dispatch {

inline bool env_is_one(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// [log-switch]
inline bool log_overrides() {
  // A function-local static: getenv runs once, not on every call.
  static const bool enabled = env_is_one("OPGUIDE_LOG_OVERRIDES");
  return enabled;
}

// One line per call, written with a single fprintf so that lines from
// several threads do not interleave.
inline void log_call(const char* op, const char* key, const at::Tensor& self) {
  if (!log_overrides()) return;
  if (!self.defined()) {  // factory functions have no input tensor
    std::fprintf(stderr, "[opguide override] %s on %s\n", op, key);
    std::fflush(stderr);
    return;
  }
  std::string shape = "(";
  for (int64_t d = 0; d < self.dim(); ++d) {
    shape += std::to_string(self.size(d)) + (d + 1 < self.dim() ? ", " : "");
  }
  shape += self.dim() == 1 ? ",)" : ")";
  const std::string dtype(c10::getDtypeNames(self.scalar_type()).first);
  std::fprintf(stderr, "[opguide override] %s on %s: %s %s\n", op, key, dtype.c_str(),
               shape.c_str());
  std::fflush(stderr);
}
// [log-switch-end]

// [disable-switch]
// Registers `kernel` for the ATen operator `name` ("neg", "add.Tensor") on
// the library's dispatch key, unless OPGUIDE_DISABLE_OVERRIDE_<base>=1,
// where <base> is the name without its overload ("add" for "add.Tensor").
// Skipping the m.impl call is all it takes: the dispatcher then keeps the
// kernel it had before (ATen's own, for the CPU key).
template <typename Kernel>
void impl_unless_disabled(torch::Library& m, const char* name, Kernel kernel) {
  const std::string full(name);
  const std::string base = full.substr(0, full.find('.'));
  if (env_is_one("OPGUIDE_DISABLE_OVERRIDE_" + base)) {
    std::fprintf(stderr,
                 "[opguide override] aten::%s not overridden "
                 "(OPGUIDE_DISABLE_OVERRIDE_%s=1)\n",
                 name, base.c_str());
    return;
  }
  m.impl(name, kernel);
}
// [disable-switch-end]

}  // namespace opguide_dispatch
