// The autograd formula of opguide::rms_norm and opguide::rms_norm_forward, in C++:
// one dispatcher kernel per operator at the Autograd key, which every device
// shares. A C++ autograd kernel does not re-enter the Python interpreter;
// one registered with torch.library.register_autograd does, on every call,
// with or without gradients (step 8 of the guide times both).
// Both operators build their graph with torch::autograd::Function, the
// public C++ API.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <tuple>

namespace opguide {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Pair = std::tuple<at::Tensor, at::Tensor>;

// The operators below autograd, looked up once. Calling through the
// dispatcher (not a kernel function directly) keeps every other layer:
// the device's kernel, the fake kernel under torch.compile, DTensor's rules.
Pair call_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::rms_norm_forward", "")
          .typed<Pair(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

at::Tensor call_inference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::rms_norm", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

Pair call_backward(const at::Tensor& grad_y, const at::Tensor& x,
                   const at::Tensor& weight, const at::Tensor& inv_rms) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("opguide::rms_norm_backward", "")
                             .typed<Pair(const at::Tensor&, const at::Tensor&,
                                         const at::Tensor&, const at::Tensor&)>();
  return op.call(grad_y, x, weight, inv_rms);
}

// forward runs with grad mode off (Function::apply turns it off): its call
// to opguide::rms_norm_forward passes through the Autograd kernel below again,
// which, needing no gradient, goes below autograd. forward saves what
// backward needs: x and weight (by reference, not copied) and one float per
// row. backward returns one gradient per input of forward: x, weight, eps.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const at::Tensor& weight, double eps) {
    auto [y, inv_rms] = call_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, inv_rms});
    ctx->mark_non_differentiable({inv_rms});
    // No gradient ever flows into inv_rms: do not have autograd allocate and
    // fill a tensor of zeros for it on every backward.
    ctx->set_materialize_grads(false);
    return {y, inv_rms};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const variable_list saved = ctx->get_saved_variables();
    auto [grad_x, grad_weight] = call_backward(grads[0], saved[0], saved[1], saved[2]);
    return {ctx->needs_input_grad(0) ? grad_x : at::Tensor(),
            ctx->needs_input_grad(1) ? grad_weight : at::Tensor(), at::Tensor()};
  }
};

// [autograd-rms-norm]
// opguide::rms_norm with gradients: the training forward, so that backward
// reuses inv_rms. Only y is returned; inv_rms stays saved for backward.
struct RmsNormWithGrad : torch::autograd::Function<RmsNormWithGrad> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, double eps) {
    auto [y, inv_rms] = call_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, inv_rms});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const variable_list saved = ctx->get_saved_variables();
    auto [grad_x, grad_weight] = call_backward(grads[0], saved[0], saved[1], saved[2]);
    return {ctx->needs_input_grad(0) ? grad_x : at::Tensor(),
            ctx->needs_input_grad(1) ? grad_weight : at::Tensor(), at::Tensor()};
  }
};
// [autograd-rms-norm-end]

bool needs_grad(const at::Tensor& x, const at::Tensor& weight) {
  return at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
}

// opguide::rms_norm_forward: the training forward, (y, inv_rms).
Pair rms_norm_forward_autograd(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!needs_grad(x, weight)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_forward(x, weight, eps);
  }
  variable_list out = RmsNormFunction::apply(x, weight, eps);
  return {out[0], out[1]};
}

// opguide::rms_norm: without gradients, the inference kernel (no inv_rms is
// written); with them, the training forward, so that backward reuses inv_rms.
at::Tensor rms_norm_autograd(const at::Tensor& x, const at::Tensor& weight,
                             double eps) {
  if (!needs_grad(x, weight)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_inference(x, weight, eps);
  }
  TORCH_CHECK(
      !x._fw_grad(/*level=*/0).defined() && !weight._fw_grad(/*level=*/0).defined(),
      "rms_norm: forward-mode automatic differentiation is not supported");
  return RmsNormWithGrad::apply(x, weight, eps);
}

}  // namespace
}  // namespace opguide

TORCH_LIBRARY_IMPL(opguide, Autograd, m) {
  m.impl("rms_norm", &opguide::rms_norm_autograd);
  m.impl("rms_norm_forward", &opguide::rms_norm_forward_autograd);
  // The backward operator has no derivative of its own. Without a kernel here
  // a double backward (torch.autograd.grad(..., create_graph=True), then a
  // second backward) would pass through it with a warning and zero gradients;
  // this kernel makes that second backward an error that names the operator.
  m.impl("rms_norm_backward", torch::autograd::autogradNotImplementedFallback());
}
