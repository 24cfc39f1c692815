// RMSNorm's Triton kernels compiled ahead of time, in the stable-ABI library:
// opguide's Triton forward (opguide/triton/forward.py), compiled by setup.py
// for the build's GPUs without a GPU, embedded in this library, and launched
// from C++ by the launcher opguide's own operators use
// (csrc/triton_aot/triton_aot_launch.cu, compiled here too). A call plans as
// opguide's Triton route does, finds its kernel by key and launches it on
// PyTorch's current stream: no Triton and no Python at run time, and, as for
// the rest of this library, only the stable ABI of torch.
//
// Where no kernel compiled ahead of time fits (another GPU, rows longer than
// 16384 elements, float64, a view at an offset, a CPU tensor), this library's
// own kernel runs, after a warning that says why (once per reason).
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // current stream, warnings
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "rms_norm.h"
#include "triton_aot/triton_aot_launch.h"  // opguide's csrc/

namespace opguide_stable {
namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
namespace aot = opguide::triton_aot;

// Says once per kind of reason which kernel runs instead, through torch's
// warning handler (which prints it on stderr for an operator called through
// torch.ops, as for opguide's own C++ warnings).
void warn_fallback(const aot::Fallback& why, const char* instead) {
  static std::mutex mutex;
  static std::set<std::string> told;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!told.insert(why.kind).second) return;
  }
  const std::string message = "opguide_stable::rms_norm_triton_aot: " + why.message +
                              ": " + instead + " runs (opguide_stable::rms_norm)";
  aoti_torch_warn(__func__, __FILE__, static_cast<uint32_t>(__LINE__), message.c_str());
}

// y from the Triton kernel compiled ahead of time; nothing, with why, where
// none fits.
std::optional<Tensor> forward_aot(const Tensor& x, const Tensor& weight, double eps,
                                  aot::Fallback* why) {
  const int64_t n = x.size(-1);
  const int64_t m = n == 0 ? 0 : x.numel() / n;
  // check_arguments let float32, float16, bfloat16 and float64 through: the
  // kernels take the first three.
  const char* word = aot::dtype_word(x.scalar_type());
  if (aot::before_plan(word, "float64", m, why)) return std::nullopt;
  const Tensor xc = torch::stable::contiguous(x);
  const Tensor wc = torch::stable::contiguous(weight);
  if (m == 0) return torch::stable::empty_like(xc);
  if (aot::misaligned({{"x", xc.const_data_ptr()}, {"weight", wc.const_data_ptr()}}, why)) {
    return std::nullopt;
  }
  const int device = static_cast<int>(x.get_device_index());
  aot::ForwardPlan plan;
  if (!aot::plan_forward(word, static_cast<int64_t>(x.element_size()), m, n,
                         /*store_inv=*/false, aot::device_info(device), &plan, why)) {
    return std::nullopt;
  }
  Tensor y = torch::stable::empty_like(xc);
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
  aot::launch_forward(plan, device, xc.const_data_ptr(), wc.const_data_ptr(),
                      y.mutable_data_ptr(), nullptr, m, n, eps, stream);
  return y;
}

Tensor rms_norm_triton_aot_cuda(const Tensor& x, const Tensor& weight, double eps) {
  check_arguments(x, weight);
  STD_TORCH_CHECK(x.is_cuda() && weight.is_cuda() &&
                      weight.get_device_index() == x.get_device_index(),
                  "rms_norm: x and weight must be on one CUDA device");
  // Plan, allocate and launch on x's GPU, whichever GPU is current.
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  aot::Fallback why;
  if (std::optional<Tensor> y = forward_aot(x, weight, eps, &why)) return *y;
  warn_fallback(why, "the CUDA kernel");
  return rms_norm_cuda(x, weight, eps);
}

Tensor rms_norm_triton_aot_cpu(const Tensor& x, const Tensor& weight, double eps) {
  warn_fallback({"cpu", "x is on cpu, and the kernels compiled ahead of time run on GPUs"},
                "the CPU kernel");
  return rms_norm_cpu(x, weight, eps);
}

}  // namespace
}  // namespace opguide_stable

// Defined only in a build that compiled Triton kernels ahead of time
// (setup.py adds this file then): the operator's presence says so.
STABLE_TORCH_LIBRARY_FRAGMENT(opguide_stable, m) {
  m.def("rms_norm_triton_aot(Tensor x, Tensor weight, float eps) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(opguide_stable, CUDA, m) {
  m.impl("rms_norm_triton_aot", TORCH_BOX(&opguide_stable::rms_norm_triton_aot_cuda));
}

STABLE_TORCH_LIBRARY_IMPL(opguide_stable, CPU, m) {
  m.impl("rms_norm_triton_aot", TORCH_BOX(&opguide_stable::rms_norm_triton_aot_cpu));
}
