// The Triton RMSNorm kernels compiled ahead of time, launched from C++: the
// CUDA kernels (ROCm's after hipify) of the operators of
// triton_aot_schema.cpp. Each call plans as the JIT route does (plan.h, the
// port of opguide/triton/launch.py's Registers plans), names the kernels
// that plan needs by the keys of opguide/triton/aot.py (route.h), and
// launches them from the build's table on the current stream
// (triton_aot_launch.cu). A call that no artifact fits (another GPU, a row
// longer than the Registers plans hold, a misaligned pointer, 2**31 rows or
// more, a dtype the kernels do not take) goes to the JIT route's operator,
// after a warning that names why (triton_aot_fallback.cpp).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../rms_norm/rms_norm.h"
#include "plan.h"
#include "route.h"
#include "triton_aot.h"
#include "triton_aot_launch.h"

namespace opguide::triton_aot {
namespace {

// ---------------------------------------------------------------------------
// Plans: the kernels one call launches, or why none fits. The launches below
// and the check operator at the end of this file share them.

struct BackwardPlan {
  Registers cfg{};
  std::string key, sum_key;  // sum_key empty: grad_weight written by the one program
  int64_t artifact = -1, sum_artifact = -1;
};

// Where every direction needs the JIT route before it plans: before_plan of
// triton_aot_launch.h for x's dtype.
bool needs_jit(at::ScalarType dtype, int64_t rows, Fallback* why) {
  return before_plan(dtype_word(dtype), dtype_name(dtype), rows, why);
}

bool plan_backward(at::ScalarType dtype, int64_t itemsize, int64_t rows, int64_t cols,
                   const DeviceInfo& d, BackwardPlan* plan, Fallback* why) {
  if (!backward_registers(rows, cols, itemsize, d.sm_count, d.smem_optin, &plan->cfg)) {
    *why = {"long", "rows of " + std::to_string(cols) +
                        " elements are longer than the " +
                        std::to_string(kMaxRegisterRowBackward) +
                        " that the backward compiled ahead of time keeps in registers"};
    return false;
  }
  plan->key = backward_key(d, dtype_word(dtype), plan->cfg, cols);
  if (backward_sums(plan->cfg, dtype == at::kFloat)) {
    plan->sum_key = sum_key(d, dtype_word(dtype), cols);
  }
  plan->artifact = find(plan->key, d, why);
  if (plan->artifact < 0) return false;
  plan->sum_artifact = plan->sum_key.empty() ? -1 : find(plan->sum_key, d, why);
  return plan->sum_key.empty() || plan->sum_artifact >= 0;
}

// ---------------------------------------------------------------------------
// Forward.

// y, and inv_rms when `store_inv`; false, with `why`, where no artifact fits.
// The JIT route's rms_norm_forward (opguide/triton/ops.py), step by step.
bool forward_aot(const at::Tensor& x, const at::Tensor& weight, double eps,
                 bool store_inv, at::Tensor* y_out, at::Tensor* inv_out,
                 Fallback* why) {
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if (needs_jit(x.scalar_type(), rows, why)) return false;
  const c10::cuda::CUDAGuard device_guard(x.device());
  const auto outputs = [&] {
    *y_out =
        at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    if (store_inv) {
      *inv_out =
          at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
    }
  };
  if (rows == 0) {
    outputs();
    // Rows of length 0: the mean of no squares is 0/0, as the C++ kernels compute.
    if (store_inv) inv_out->fill_(std::numeric_limits<double>::quiet_NaN());
    return true;
  }
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  if (misaligned({{"x", xc.const_data_ptr()}, {"weight", wc.const_data_ptr()}}, why)) {
    return false;
  }
  const int device = static_cast<int>(x.get_device());
  ForwardPlan plan;
  if (!plan_forward(dtype_word(x.scalar_type()), x.element_size(), rows, cols, store_inv,
                    device_info(device), &plan, why)) {
    return false;
  }
  outputs();
  launch_forward(
      plan, device, xc.const_data_ptr(), wc.const_data_ptr(), y_out->mutable_data_ptr(),
      store_inv ? inv_out->mutable_data_ptr() : nullptr, rows, cols, eps,
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
  return true;
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  TORCH_CHECK(x.is_cuda(), "rms_norm_triton_aot: x must be a CUDA tensor, got ",
              x.device().str());
  at::Tensor y, unused;
  Fallback why;
  if (forward_aot(x, weight, eps, /*store_inv=*/false, &y, &unused, &why)) return y;
  return jit_rms_norm(why, x, weight, eps);
}

Pair rms_norm_forward_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  TORCH_CHECK(x.is_cuda(), "rms_norm_forward_triton_aot: x must be a CUDA tensor, got ",
              x.device().str());
  at::Tensor y, inv_rms;
  Fallback why;
  if (forward_aot(x, weight, eps, /*store_inv=*/true, &y, &inv_rms, &why))
    return {y, inv_rms};
  return jit_rms_norm_forward(why, x, weight, eps);
}

// ---------------------------------------------------------------------------
// Backward.

// (grad_x, grad_weight); false, with `why`, where no artifact fits. The JIT
// route's rms_norm_backward (opguide/triton/ops.py), step by step.
bool backward_aot(const at::Tensor& grad_y, const at::Tensor& x,
                  const at::Tensor& weight, const at::Tensor& inv_rms, Pair* out,
                  Fallback* why) {
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if (needs_jit(x.scalar_type(), rows, why)) return false;
  const c10::cuda::CUDAGuard device_guard(x.device());
  const auto like_x = [&] {
    return at::empty(x.sizes(),
                     x.options().memory_format(at::MemoryFormat::Contiguous));
  };
  if (rows == 0) {
    // No rows: grad_weight is a sum over nothing.
    *out = {like_x(), at::zeros_like(weight)};
    return true;
  }
  const at::Tensor xc = x.contiguous();
  const at::Tensor gc = grad_y.contiguous();
  const at::Tensor rc = inv_rms.contiguous();
  const at::Tensor wc = weight.contiguous();
  if (misaligned({{"grad_y", gc.const_data_ptr()},
                  {"x", xc.const_data_ptr()},
                  {"weight", wc.const_data_ptr()},
                  {"inv_rms", rc.const_data_ptr()}},
                 why)) {
    return false;
  }
  const int device = static_cast<int>(x.get_device());
  BackwardPlan plan;
  if (!plan_backward(x.scalar_type(), x.element_size(), rows, cols, device_info(device),
                     &plan, why)) {
    return false;
  }
  const bool summed = plan.sum_artifact >= 0;
  at::Tensor grad_x = like_x();
  at::Tensor grad_weight = at::empty({cols}, weight.options());
  // grad_weight is a sum over rows: each program writes its own row of
  // float32 partial sums, and the sum kernel adds them.
  at::Tensor partial =
      summed ? at::empty({plan.cfg.programs, cols}, x.options().dtype(at::kFloat))
             : grad_weight;
  void* const stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  void* global_scratch = nullptr;
  void* profile_scratch = nullptr;
  int32_t n = static_cast<int32_t>(cols);
  // _rms_norm_backward_kernel(grad_y_ptr, x_ptr, w_ptr, inv_rms_ptr, grad_x_ptr,
  //                           grad_weight_partial_ptr, M, N)
  void* g_ptr = const_cast<void*>(gc.const_data_ptr());
  void* x_ptr = const_cast<void*>(xc.const_data_ptr());
  void* w_ptr = const_cast<void*>(wc.const_data_ptr());
  void* r_ptr = const_cast<void*>(rc.const_data_ptr());
  void* gx_ptr = grad_x.mutable_data_ptr();
  void* partial_ptr = partial.mutable_data_ptr();
  int32_t m = static_cast<int32_t>(rows);
  void* with_n[] = {&g_ptr,       &x_ptr, &w_ptr, &r_ptr,          &gx_ptr,
                    &partial_ptr, &m,     &n,     &global_scratch, &profile_scratch};
  void* without_n[] = {&g_ptr,       &x_ptr, &w_ptr,          &r_ptr,          &gx_ptr,
                       &partial_ptr, &m,     &global_scratch, &profile_scratch};
  launch(plan.artifact, device, plan.cfg.programs, cols == 1 ? without_n : with_n,
         stream);
  if (summed) {
    // _grad_weight_sum_kernel(partial_ptr, grad_weight_ptr, P, N): the
    // programs' rows added in a fixed order.
    void* gw_ptr = grad_weight.mutable_data_ptr();
    int32_t p = static_cast<int32_t>(plan.cfg.programs);
    void* sum_with_n[] = {&partial_ptr, &gw_ptr,         &p,
                          &n,           &global_scratch, &profile_scratch};
    void* sum_without_n[] = {&partial_ptr, &gw_ptr, &p, &global_scratch,
                             &profile_scratch};
    launch(plan.sum_artifact, device, cdiv(cols, GradWeightSum().block_n),
           cols == 1 ? sum_without_n : sum_with_n, stream);
  }
  *out = {grad_x, grad_weight};
  return true;
}

Pair rms_norm_backward_cuda(const at::Tensor& grad_y, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& inv_rms) {
  check_rms_norm_backward_args(grad_y, x, weight, inv_rms);
  TORCH_CHECK(x.is_cuda(),
              "rms_norm_backward_triton_aot: x must be a CUDA tensor, got ",
              x.device().str());
  Pair out;
  Fallback why;
  if (backward_aot(grad_y, x, weight, inv_rms, &out, &why)) return out;
  return jit_rms_norm_backward(why, grad_y, x, weight, inv_rms);
}

// ---------------------------------------------------------------------------
// For tests: what the route sees on x's GPU, and the kernels a call on x
// would launch, without launching them, so that tests/test_triton_aot.py can
// compare both with the JIT route's device properties, plans and keys
// (opguide/triton/aot.py's key()).

// [target, sm_count, smem_optin, gdc (0/1), the targets of the table ("" for none)]
std::vector<std::string> triton_aot_device(const at::Tensor& x) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const DeviceInfo& d = device_info(static_cast<int>(x.get_device()));
  return {d.target, std::to_string(d.sm_count), std::to_string(d.smem_optin),
          std::to_string(d.gdc ? 1 : 0), table_targets()};
}

// The keys of the kernels `direction` ("forward", "inference" or "backward")
// launches for x, and "found" or "missing" after each; or ["fallback", the
// reason] where the plan alone sends the call to the JIT route. Alignment is
// not looked at.
std::vector<std::string> triton_aot_route(const std::string& direction,
                                          const at::Tensor& x) {
  TORCH_CHECK_VALUE(
      direction == "forward" || direction == "inference" || direction == "backward",
      "triton_aot_route: direction must be \"forward\", \"inference\" or "
      "\"backward\", got \"",
      direction, "\"");
  const c10::cuda::CUDAGuard device_guard(x.device());
  TORCH_CHECK_VALUE(x.dim() >= 1,
                    "triton_aot_route: x must have at least one dimension");
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const DeviceInfo& d = device_info(static_cast<int>(x.get_device()));
  Fallback why;
  if (needs_jit(x.scalar_type(), rows, &why)) return {"fallback", why.message};
  std::vector<std::string> out;
  const auto add = [&](const std::string& key) {
    out.push_back(key);
    Fallback unused;
    out.push_back(find(key, d, &unused) >= 0 ? "found" : "missing");
  };
  if (direction == "backward") {
    BackwardPlan plan;
    plan_backward(x.scalar_type(), x.element_size(), rows, cols, d, &plan, &why);
    if (plan.key.empty()) return {"fallback", why.message};
    add(plan.key);
    if (!plan.sum_key.empty()) add(plan.sum_key);
  } else {
    ForwardPlan plan;
    plan_forward(dtype_word(x.scalar_type()), x.element_size(), rows, cols,
                 direction == "forward", d, &plan, &why);
    if (plan.key.empty()) return {"fallback", why.message};
    add(plan.key);
  }
  return out;
}

}  // namespace
}  // namespace opguide::triton_aot

TORCH_LIBRARY_IMPL(opguide, CUDA, m) {
  m.impl("rms_norm_triton_aot", &opguide::triton_aot::rms_norm_cuda);
  m.impl("rms_norm_forward_triton_aot", &opguide::triton_aot::rms_norm_forward_cuda);
  m.impl("rms_norm_backward_triton_aot", &opguide::triton_aot::rms_norm_backward_cuda);
}

// Its own namespace, as checks.cpp's: not operators a model calls.
TORCH_LIBRARY_FRAGMENT(opguide_checks, m) {
  m.def("triton_aot_device(Tensor x) -> str[]");
  m.def("triton_aot_route(str direction, Tensor x) -> str[]");
}

TORCH_LIBRARY_IMPL(opguide_checks, CUDA, m) {
  m.impl("triton_aot_device", &opguide::triton_aot::triton_aot_device);
  m.impl("triton_aot_route", &opguide::triton_aot::triton_aot_route);
}
