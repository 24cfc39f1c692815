// The in-place operators' contract with autograd, for every device.
//
// A schema's Tensor(a!) tells torch.compile which argument a kernel writes.
// It does not tell eager autograd: the dispatcher calls the CPU or CUDA kernel
// and nothing else happens. Two more kernels per operator keep autograd
// honest, and both are registered once here for all devices:
//
// * ADInplaceOrView: bumps the version counter of each tensor the operator
//   writes. A tensor that autograd saved for a backward remembers its version;
//   backward() compares, and raises "modified by an inplace operation" instead
//   of computing a gradient from the overwritten values.
// * Autograd: these operators have no backward, so with grad mode on an input
//   that requires grad is refused at the call, naming a differentiable way to
//   get the same result. A leaf that requires grad is refused with PyTorch's
//   own wording. Under torch.no_grad() (an optimizer's update) every input is
//   accepted, as PyTorch's in-place operators accept them.
//
// A dispatcher call enters at the highest key its tensors carry: Autograd,
// then ADInplaceOrView, then the device's kernel. Each kernel here does its
// part and hands the call on with a guard that skips its own key.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

namespace opguide {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;

// The operator itself, through the dispatcher: called below a guard, the call
// goes on to the next key (ADInplaceOrView, then CPU or CUDA).
Pair call_fused(const at::Tensor& x, at::Tensor& residual,
                const std::optional<at::Tensor>& weight, double eps,
                std::optional<at::ScalarType> out_dtype) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::fused_add_rms_norm_", "")
          .typed<Pair(const at::Tensor&, at::Tensor&, const std::optional<at::Tensor>&,
                      double, std::optional<at::ScalarType>)>();
  return op.call(x, residual, weight, eps, out_dtype);
}

// Raises when grad mode is on and `t` requires grad. `op` names the operator,
// `written` says whether the operator writes `t`, `instead` is the
// differentiable form to use.
void refuse_grad(const char* op, const char* name, const at::Tensor& t, bool written,
                 const char* instead) {
  if (!at::GradMode::is_enabled() || !t.defined() || !t.requires_grad()) return;
  if (written && t.is_leaf()) {
    TORCH_CHECK(false, op, ": ", name,
                " is a leaf tensor that requires grad: a leaf Variable that "
                "requires grad is being used in an in-place operation. Write it "
                "under torch.no_grad(), or use ",
                instead);
  }
  TORCH_CHECK(false, op, ": ", name, " requires grad, and ", op,
              " has no backward (it writes its input in place). Call it under "
              "torch.no_grad(), or use the differentiable ",
              instead);
}

Pair fused_add_rms_norm_autograd(const at::Tensor& x, at::Tensor& residual,
                                 const std::optional<at::Tensor>& weight, double eps,
                                 std::optional<at::ScalarType> out_dtype) {
  const char* op = "fused_add_rms_norm_";
  const char* instead = "out = opguide.rms_norm(residual + x, weight, eps)";
  refuse_grad(op, "residual", residual, /*written=*/true, instead);
  refuse_grad(op, "x", x, /*written=*/false, instead);
  if (weight.has_value()) {
    refuse_grad(op, "weight", *weight, /*written=*/false, instead);
  }
  // No input needs a gradient: the outputs need no graph node either.
  at::AutoDispatchBelowAutograd guard;
  return call_fused(x, residual, weight, eps, out_dtype);
}

Pair fused_add_rms_norm_inplace_or_view(const at::Tensor& x, at::Tensor& residual,
                                        const std::optional<at::Tensor>& weight,
                                        double eps,
                                        std::optional<at::ScalarType> out_dtype) {
  Pair result;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    result = call_fused(x, residual, weight, eps, out_dtype);
  }
  // After the write: what was saved before this call is now out of date.
  torch::autograd::increment_version(residual);
  return result;
}

}  // namespace
}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, Autograd, m) {
  m.impl("fused_add_rms_norm_", &opguide::fused_add_rms_norm_autograd);
}

TORCH_LIBRARY_IMPL(opguide, ADInplaceOrView, m) {
  m.impl("fused_add_rms_norm_", &opguide::fused_add_rms_norm_inplace_or_view);
}
