// A C shim for opguide::rms_norm, for AOTInductor (opguide/experimental/aoti_shim.py).
//
// AOTInductor's generated code calls an operator that is not ATen's through
// its proxy executor: the arguments boxed into a stack, the operator called
// boxed through the dispatcher. With these functions declared in
// torch._inductor.config.aot_inductor.custom_ops_to_c_shims, it calls them
// instead, directly. Each name follows Inductor's rule,
// aoti_torch_<device>_<operator name>; the arguments follow the C shim ABI:
// a tensor is an AtenTensorHandle, a float a double, and each output is
// written through a pointer. No C++ exception may cross the C boundary:
// AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE turns one into an error code.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

namespace {

using torch::aot_inductor::new_tensor_handle;
using torch::aot_inductor::tensor_handle_to_tensor_pointer;

// A typed call through the dispatcher: it reaches the kernel of the tensors'
// device, found once, with no boxing of the arguments.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("opguide::rms_norm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

}  // namespace

extern "C" {

AOTITorchError aoti_torch_cpu_rms_norm(AtenTensorHandle x,  // [..., hidden_size]
                                       AtenTensorHandle weight,  // [hidden_size]
                                       double eps,
                                       AtenTensorHandle* ret0) {  // [..., hidden_size]
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor y = rms_norm(*tensor_handle_to_tensor_pointer(x),
                            *tensor_handle_to_tensor_pointer(weight), eps);
    *ret0 = new_tensor_handle(std::move(y));
  });
}

AOTITorchError aoti_torch_cuda_rms_norm(AtenTensorHandle x,  // [..., hidden_size]
                                        AtenTensorHandle weight,  // [hidden_size]
                                        double eps,
                                        AtenTensorHandle* ret0) {  // [..., hidden_size]
  return aoti_torch_cpu_rms_norm(x, weight, eps, ret0);
}

}  // extern "C"
