// The autograd formula of opguide::rms_norm and opguide::rms_norm_fwd, in C++.
//
// Step 8 registers the same formula from Python with
// torch.library.register_autograd; this file is what the library ships. It
// is one dispatcher kernel per operator, at the Autograd key, which every
// device shares. The formula is the same; what changes is the cost of a call:
// a Python autograd kernel re-enters the interpreter on every call, with or
// without gradients, and a C++ one does not (step 11, "The eager call").
//
// Two ways to build the graph, one per operator: rms_norm_fwd uses
// torch::autograd::Function, the documented C++ API; rms_norm, the operator
// opguide.rms_norm calls, builds its graph node by hand, as PyTorch's own
// operators do, which costs less per call (step 11, "The eager call").
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <mutex>
#include <tuple>
#include <type_traits>

namespace opguide {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Pair = std::tuple<at::Tensor, at::Tensor>;

// The operators below autograd, looked up once. Calling through the
// dispatcher (not a kernel function directly) keeps every other layer:
// the device's kernel, the fake kernel under torch.compile, DTensor's rules.
Pair call_fwd(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("opguide::rms_norm_fwd", "")
                             .typed<Pair(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

at::Tensor call_inference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("opguide::rms_norm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

Pair call_backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& weight,
                   const at::Tensor& inv_rms) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::rms_norm_backward", "")
          .typed<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      const at::Tensor&)>();
  return op.call(grad_y, x, weight, inv_rms);
}

// [autograd-function]
// forward runs below autograd (Function::apply sees to it) and saves what
// backward needs: x and weight (by reference, not copied) and one float per
// row. backward returns one gradient per input of forward: x, weight, eps.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const at::Tensor& weight, double eps) {
    auto [y, inv_rms] = call_fwd(x, weight, eps);
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
// [autograd-function-end]

// [autograd-node]
// The node of opguide::rms_norm, written by hand. Function::apply above does
// the same work and more for any Function: it keeps a context object, records
// each input's shape and each output's metadata, and wraps every output (two
// here). This node keeps three saved tensors and has one output, y.
struct RmsNormBackward : torch::autograd::Node {
  // A SavedVariable is what save_for_backward makes: it checks on unpack
  // that no in-place operation changed the tensor, and it runs the
  // saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks).
  torch::autograd::SavedVariable x, weight, inv_rms;

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);  // release_variables may run at once
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    auto [grad_x, grad_weight] =
        call_backward(grads[0], x.unpack(), weight.unpack(), inv_rms.unpack());
    // The next edges are x and weight: an input that needs no gradient gets none.
    return {should_compute_output(0) ? grad_x : at::Tensor(),
            should_compute_output(1) ? grad_weight : at::Tensor()};
  }

  // Called after backward unless retain_graph=True: frees what was saved.
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    x.reset_data();
    weight.reset_data();
    inv_rms.reset_data();
  }

  std::string name() const override { return "RmsNormBackward"; }
};

// Nodes are owned by std::shared_ptr up to torch 2.12 and by
// c10::intrusive_ptr from torch 2.13; this builds one either way.
template <typename Node = torch::autograd::Node>
auto make_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, Node>) {
    return c10::make_intrusive<RmsNormBackward>();
  } else {
    return std::make_shared<RmsNormBackward>();
  }
}

// The training call of opguide::rms_norm: y, with a node that leads back to x
// and weight. What Function::apply does, for this operator only.
at::Tensor rms_norm_with_node(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(!x._fw_grad(/*level=*/0).defined() && !weight._fw_grad(/*level=*/0).defined(),
              "rms_norm: forward-mode automatic differentiation is not supported");
  auto node = make_node();
  node->set_next_edges(torch::autograd::collect_next_edges(x, weight));
  at::Tensor y, inv_rms;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    std::tie(y, inv_rms) = call_fwd(x, weight, eps);
  }
  node->x = torch::autograd::SavedVariable(x, /*is_output=*/false);
  node->weight = torch::autograd::SavedVariable(weight, /*is_output=*/false);
  node->inv_rms = torch::autograd::SavedVariable(inv_rms, /*is_output=*/false);
  torch::autograd::set_history(y, node);  // y's gradient flows into the node
  return y;
}
// [autograd-node-end]

bool needs_grad(const at::Tensor& x, const at::Tensor& weight) {
  return at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
}

// [autograd-kernels]
// opguide::rms_norm_fwd: the training forward, (y, inv_rms).
Pair rms_norm_fwd_autograd(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!needs_grad(x, weight)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_fwd(x, weight, eps);
  }
  variable_list out = RmsNormFunction::apply(x, weight, eps);
  return {out[0], out[1]};
}

// opguide::rms_norm: without gradients, the inference kernel (no inv_rms is
// written); with them, the training forward, so that backward reuses inv_rms.
at::Tensor rms_norm_autograd(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!needs_grad(x, weight)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_inference(x, weight, eps);
  }
  return rms_norm_with_node(x, weight, eps);
}
// [autograd-kernels-end]

}  // namespace
}  // namespace opguide

// [autograd-registration]
TORCH_LIBRARY_IMPL(opguide, Autograd, m) {
  m.impl("rms_norm", &opguide::rms_norm_autograd);
  m.impl("rms_norm_fwd", &opguide::rms_norm_fwd_autograd);
}
// [autograd-registration-end]
