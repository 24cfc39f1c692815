// silu_and_mul's Triton kernels compiled ahead of time: the operators, their
// Meta kernels, their autograd and their CPU kernels, compiled in every build.
// The signatures are those of the JIT route's operators
// (opguide/_silu_and_mul/triton/ops.py): silu_and_mul_triton_aot is
// silu_and_mul_triton, launched from C++ (silu_and_mul_triton_aot_cuda.cu)
// with C++ autograd. CPU tensors, and every CUDA call that no compiled kernel
// fits, go to the JIT route's operators (triton_aot_fallback.cpp's
// jit_operator), whose interpreter runs the CPU ones.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SymBool.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

#include "../common/messages.h"
#include "../silu_and_mul/silu_and_mul.h"
#include "silu_and_mul_triton_aot.h"

TORCH_LIBRARY_FRAGMENT(opguide, m) {
  // y = silu(x[..., :d]) * x[..., d:] for x of shape (..., 2*d); differentiable
  // (its backward is silu_and_mul_backward_triton_aot).
  m.def("silu_and_mul_triton_aot(Tensor x) -> Tensor");
  // grad_x (shape of x) from grad_y (shape of y) and the forward's input x.
  m.def("silu_and_mul_backward_triton_aot(Tensor grad_y, Tensor x) -> Tensor");
}

namespace opguide::triton_aot {

at::Tensor jit_silu_and_mul(const Fallback& why, const at::Tensor& x) {
  return jit_operator("silu_and_mul_triton_aot", "silu_and_mul_triton", why)
      .typed<at::Tensor(const at::Tensor&)>()
      .call(x);
}

at::Tensor jit_silu_and_mul_backward(const Fallback& why, const at::Tensor& grad_y,
                                     const at::Tensor& x) {
  return jit_operator("silu_and_mul_backward_triton_aot", "silu_and_mul_backward_triton",
                      why)
      .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>()
      .call(grad_y, x);
}

namespace {

// ---------------------------------------------------------------------------
// Meta kernels: the outputs' shapes without running anything, for
// torch.compile, torch.export and opcheck. Where the sizes are symbols
// (dynamic shapes) the checks compare them as symbols, which records a guard.

void check_args(const at::Tensor& x) {
  if (!symbolic(x)) {
    check_silu_and_mul_args(x);
    return;
  }
  const at::ScalarType t = x.scalar_type();
  TORCH_CHECK_TYPE(
      t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble,
      "silu_and_mul: x must be a floating-point tensor (float32, float16, bfloat16 or "
      "float64), got ",
      dtype_name(t));
  TORCH_CHECK_VALUE(x.dim() >= 1,
                    "silu_and_mul: x must have at least one dimension, (..., 2*d), "
                    "got a 0-d tensor");
  TORCH_SYM_CHECK((x.sym_size(-1) % 2).sym_eq(0),
                  "silu_and_mul: the last dimension of x must be even (x is (..., 2*d), "
                  "the gate then the up projection), got shape ",
                  x.sym_sizes());
}

std::vector<c10::SymInt> y_shape(const at::Tensor& x) {
  std::vector<c10::SymInt> shape(x.sym_sizes().begin(), x.sym_sizes().end());
  shape.back() = shape.back() / 2;
  return shape;
}

at::Tensor silu_and_mul_meta(const at::Tensor& x) {
  check_args(x);
  return at::empty_symint(y_shape(x), x.options());
}

at::Tensor silu_and_mul_backward_meta(const at::Tensor& grad_y, const at::Tensor& x) {
  if (!symbolic(grad_y) && !symbolic(x)) {
    check_silu_and_mul_backward_args(grad_y, x);
  } else {
    check_args(x);
    const std::vector<c10::SymInt> shape = y_shape(x);
    TORCH_CHECK_VALUE(grad_y.dim() == x.dim(),
                      "silu_and_mul_backward: grad_y must have the shape of y "
                      "(x.shape[:-1] + (d,)), got ",
                      grad_y.dim(), " dimensions for x's ", x.dim());
    for (int64_t d = 0; d < x.dim(); ++d) {
      TORCH_SYM_CHECK(grad_y.sym_size(d).sym_eq(shape[d]),
                      "silu_and_mul_backward: grad_y must have the shape of y "
                      "(x.shape[:-1] + (d,)), got ",
                      grad_y.sym_sizes());
    }
    TORCH_CHECK_TYPE(grad_y.scalar_type() == x.scalar_type(),
                     "silu_and_mul_backward: grad_y must have the dtype of x (",
                     dtype_name(x.scalar_type()), "), got ",
                     dtype_name(grad_y.scalar_type()));
  }
  return at::empty_symint(x.sym_sizes(),
                          x.options().memory_format(at::MemoryFormat::Contiguous));
}

// ---------------------------------------------------------------------------
// Autograd: one kernel at the Autograd key, on torch::autograd::Function, so
// that no call re-enters Python. The forward saves x; the backward operator
// takes it with grad_y.

at::Tensor call_forward(const at::Tensor& x) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("opguide::silu_and_mul_triton_aot", "")
                             .typed<at::Tensor(const at::Tensor&)>();
  return op.call(x);
}

at::Tensor call_backward(const at::Tensor& grad_y, const at::Tensor& x) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("opguide::silu_and_mul_backward_triton_aot", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(grad_y, x);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SiluAndMulFunction : torch::autograd::Function<SiluAndMulFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return call_forward(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor()};
    return {call_backward(grads[0], ctx->get_saved_variables()[0])};
  }
};

at::Tensor silu_and_mul_autograd(const at::Tensor& x) {
  if (!(at::GradMode::is_enabled() && x.requires_grad())) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_forward(x);
  }
  TORCH_CHECK(!x._fw_grad(/*level=*/0).defined(),
              "silu_and_mul_triton_aot: forward-mode automatic differentiation is not "
              "supported");
  return SiluAndMulFunction::apply(x);
}

// ---------------------------------------------------------------------------
// For tests, in every build: the key a call of `kernel` on rows of `cols`
// elements of y of `dtype` ("fp32", "fp16" or "bf16") looks up on a GPU named
// `target` that takes GDC or not, which tests/test_triton_aot_silu_and_mul.py
// checks the build compiles.

std::string triton_aot_silu_and_mul_key(const std::string& kernel, int64_t cols,
                                        const std::string& dtype, const std::string& target,
                                        bool gdc) {
  TORCH_CHECK_VALUE(kernel == "silu_and_mul_forward" || kernel == "silu_and_mul_backward",
                    "triton_aot_silu_and_mul_key: kernel must be \"silu_and_mul_forward\" "
                    "or \"silu_and_mul_backward\", got \"",
                    kernel, "\"");
  TORCH_CHECK_VALUE(dtype == "fp32" || dtype == "fp16" || dtype == "bf16",
                    "triton_aot_silu_and_mul_key: dtype must be \"fp32\", \"fp16\" or "
                    "\"bf16\", got \"",
                    dtype, "\"");
  Device d;
  d.target = target;
  d.gdc = gdc;
  return silu_and_mul_key(kernel.c_str(), d, dtype.c_str(), cols);
}

// ---------------------------------------------------------------------------
// CPU tensors: the JIT route, in Triton's interpreter.

const Fallback kOnCpu{"cpu",
                      "x is on cpu, and the kernels compiled ahead of time run on GPUs "
                      "(Triton's interpreter runs CPU tensors)"};

at::Tensor silu_and_mul_cpu(const at::Tensor& x) { return jit_silu_and_mul(kOnCpu, x); }

at::Tensor silu_and_mul_backward_cpu(const at::Tensor& grad_y, const at::Tensor& x) {
  return jit_silu_and_mul_backward(kOnCpu, grad_y, x);
}

}  // namespace
}  // namespace opguide::triton_aot

TORCH_LIBRARY_IMPL(opguide, Meta, m) {
  m.impl("silu_and_mul_triton_aot", &opguide::triton_aot::silu_and_mul_meta);
  m.impl("silu_and_mul_backward_triton_aot",
         &opguide::triton_aot::silu_and_mul_backward_meta);
}

TORCH_LIBRARY_IMPL(opguide, Autograd, m) {
  m.impl("silu_and_mul_triton_aot", &opguide::triton_aot::silu_and_mul_autograd);
  // No derivative of the backward: a double backward through it is an error
  // naming it, not zero gradients.
  m.impl("silu_and_mul_backward_triton_aot",
         torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(opguide, CPU, m) {
  m.impl("silu_and_mul_triton_aot", &opguide::triton_aot::silu_and_mul_cpu);
  m.impl("silu_and_mul_backward_triton_aot",
         &opguide::triton_aot::silu_and_mul_backward_cpu);
}

// Its own namespace, as checks.cpp's: not an operator a model calls.
TORCH_LIBRARY_FRAGMENT(opguide_checks, m) {
  m.def(
      "triton_aot_silu_and_mul_key(str kernel, int cols, str dtype, str target, bool gdc)"
      " -> str",
      &opguide::triton_aot::triton_aot_silu_and_mul_key);
}
