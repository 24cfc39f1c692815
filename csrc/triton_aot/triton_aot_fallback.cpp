// The calls that no kernel compiled ahead of time fits go to the JIT route's
// operators (opguide/triton/ops.py, registered by `import opguide.triton`),
// through the dispatcher, after a warning that names the reason. CPU tensors
// take that route too: Triton runs them in its interpreter (TRITON_INTERPRET=1),
// so the operators, their autograd and their Meta kernels run on any machine.
// Compiled in every build.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "triton_aot.h"

namespace opguide::triton_aot {
namespace {

// Once per operator and kind of reason: a model that calls one shape again
// and again is told once, and a second reason is still told.
void warn_fallback(const char* op, const char* jit_op, const Fallback& why) {
  static std::mutex mutex;
  static std::unordered_set<std::string> warned;
  bool first = false;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    first = warned.insert(std::string(op) + "/" + why.kind).second;
  }
  if (first || c10::WarningUtils::get_warnAlways()) {
    TORCH_WARN("opguide::", op, ": ", why.message,
               ": the JIT Triton route runs (opguide::", jit_op, ")");
  }
}

}  // namespace

// The JIT route's operator, looked up at each fallback (not once): it exists
// only after `import opguide.triton`, which may come after the first call.
c10::OperatorHandle jit_operator(const char* op, const char* jit_op, const Fallback& why) {
  const std::optional<c10::OperatorHandle> handle =
      c10::Dispatcher::singleton().findSchema({std::string("opguide::") + jit_op, ""});
  TORCH_CHECK(
      handle.has_value(), "opguide::", op, ": ", why.message,
      ", so this call needs the JIT Triton route (opguide::", jit_op,
      "), which is not registered in this process: `import opguide.triton` registers "
      "it (it needs the triton package)");
  warn_fallback(op, jit_op, why);
  return *handle;
}

at::Tensor jit_rms_norm(const Fallback& why, const at::Tensor& x,
                        const at::Tensor& weight, double eps) {
  return jit_operator("rms_norm_triton_aot", "rms_norm_triton", why)
      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>()
      .call(x, weight, eps);
}

Pair jit_rms_norm_forward(const Fallback& why, const at::Tensor& x,
                          const at::Tensor& weight, double eps) {
  return jit_operator("rms_norm_forward_triton_aot", "rms_norm_forward_triton", why)
      .typed<Pair(const at::Tensor&, const at::Tensor&, double)>()
      .call(x, weight, eps);
}

Pair jit_rms_norm_backward(const Fallback& why, const at::Tensor& grad_y,
                           const at::Tensor& x, const at::Tensor& weight,
                           const at::Tensor& inv_rms) {
  return jit_operator("rms_norm_backward_triton_aot", "rms_norm_backward_triton", why)
      .typed<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                  const at::Tensor&)>()
      .call(grad_y, x, weight, inv_rms);
}

namespace {

const Fallback kOnCpu{"cpu",
                      "x is on cpu, and the kernels compiled ahead of time run on GPUs "
                      "(Triton's interpreter runs CPU tensors)"};

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return jit_rms_norm(kOnCpu, x, weight, eps);
}

Pair rms_norm_forward_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return jit_rms_norm_forward(kOnCpu, x, weight, eps);
}

Pair rms_norm_backward_cpu(const at::Tensor& grad_y, const at::Tensor& x,
                           const at::Tensor& weight, const at::Tensor& inv_rms) {
  return jit_rms_norm_backward(kOnCpu, grad_y, x, weight, inv_rms);
}

}  // namespace
}  // namespace opguide::triton_aot

TORCH_LIBRARY_IMPL(opguide, CPU, m) {
  m.impl("rms_norm_triton_aot", &opguide::triton_aot::rms_norm_cpu);
  m.impl("rms_norm_forward_triton_aot", &opguide::triton_aot::rms_norm_forward_cpu);
  m.impl("rms_norm_backward_triton_aot", &opguide::triton_aot::rms_norm_backward_cpu);
}
