// The autograd formula of opguide::rms_norm_triton_aot and
// opguide::rms_norm_forward_triton_aot, in C++, as csrc/rms_norm/rms_norm_autograd.cpp
// gives the CUDA route's: one kernel per operator at the Autograd key, built
// on torch::autograd::Function, so that no call re-enters Python. With
// gradients, the training forward saves x, weight and inv_rms and the
// backward operator uses them; without, the inference forward runs (its
// kernels compiled with STORE_INV=0: no inv_rms is written).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <tuple>

#include "triton_aot.h"

namespace opguide::triton_aot {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The operators below autograd, looked up once, called through the
// dispatcher so that the device's kernel (or the Meta kernel under a tracer)
// runs.
Pair call_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::rms_norm_forward_triton_aot", "")
          .typed<Pair(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

at::Tensor call_inference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::rms_norm_triton_aot", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

Pair call_backward(const at::Tensor& grad_y, const at::Tensor& x,
                   const at::Tensor& weight, const at::Tensor& inv_rms) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::rms_norm_backward_triton_aot", "")
          .typed<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      const at::Tensor&)>();
  return op.call(grad_y, x, weight, inv_rms);
}

// The gradients of forward's inputs (x, weight, eps) from the saved tensors.
variable_list backward_from_saved(AutogradContext* ctx, const at::Tensor& grad_y) {
  if (!grad_y.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
  const variable_list saved = ctx->get_saved_variables();
  auto [grad_x, grad_weight] = call_backward(grad_y, saved[0], saved[1], saved[2]);
  return {ctx->needs_input_grad(0) ? grad_x : at::Tensor(),
          ctx->needs_input_grad(1) ? grad_weight : at::Tensor(), at::Tensor()};
}

// forward runs with grad mode off (Function::apply turns it off): its call
// to the training forward passes through the Autograd kernel below again,
// which, needing no gradient, goes below autograd.
struct RmsNormForwardFunction : torch::autograd::Function<RmsNormForwardFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const at::Tensor& weight, double eps) {
    auto [y, inv_rms] = call_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, inv_rms});
    ctx->mark_non_differentiable({inv_rms});
    // No gradient flows into inv_rms: no tensor of zeros for it on every backward.
    ctx->set_materialize_grads(false);
    return {y, inv_rms};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return backward_from_saved(ctx, grads[0]);
  }
};

// rms_norm_triton_aot with gradients: the training forward, so that backward
// reuses inv_rms; only y is returned.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, double eps) {
    auto [y, inv_rms] = call_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, inv_rms});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return backward_from_saved(ctx, grads[0]);
  }
};

bool needs_grad(const at::Tensor& x, const at::Tensor& weight) {
  return at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
}

void check_no_forward_ad(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(
      !x._fw_grad(/*level=*/0).defined() && !weight._fw_grad(/*level=*/0).defined(),
      "rms_norm_triton_aot: forward-mode automatic differentiation is not supported");
}

Pair rms_norm_forward_autograd(const at::Tensor& x, const at::Tensor& weight,
                               double eps) {
  if (!needs_grad(x, weight)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_forward(x, weight, eps);
  }
  check_no_forward_ad(x, weight);
  variable_list out = RmsNormForwardFunction::apply(x, weight, eps);
  return {out[0], out[1]};
}

at::Tensor rms_norm_autograd(const at::Tensor& x, const at::Tensor& weight,
                             double eps) {
  if (!needs_grad(x, weight)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_inference(x, weight, eps);
  }
  check_no_forward_ad(x, weight);
  return RmsNormFunction::apply(x, weight, eps);
}

}  // namespace
}  // namespace opguide::triton_aot

TORCH_LIBRARY_IMPL(opguide, Autograd, m) {
  m.impl("rms_norm_triton_aot", &opguide::triton_aot::rms_norm_autograd);
  m.impl("rms_norm_forward_triton_aot",
         &opguide::triton_aot::rms_norm_forward_autograd);
  // No derivative of the backward: a double backward through it is an error
  // naming it, not zero gradients (as rms_norm_backward's, rms_norm_autograd.cpp).
  m.impl("rms_norm_backward_triton_aot",
         torch::autograd::autogradNotImplementedFallback());
}
