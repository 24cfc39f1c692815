// silu_and_mul's Triton kernels compiled ahead of time, launched from C++: the
// CUDA kernels (ROCm's after hipify) of the operators of
// silu_and_mul_triton_aot.cpp. A call takes the JIT route's tile, names its
// kernel by the key of opguide/triton/aot.py (silu_and_mul_triton_aot.h),
// and launches it from the build's table on the current stream
// (triton_aot_launch.cu). A call that no artifact fits (another GPU, a
// misaligned pointer, 2**31 rows or more, rows of y past 2**30 elements,
// float64) goes to the JIT route's operator, after a warning that names why.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../common/messages.h"
#include "../silu_and_mul/silu_and_mul.h"
#include "silu_and_mul_triton_aot.h"
#include "triton_aot_launch.h"

namespace opguide::triton_aot {
namespace {

// The rows of y and their length d, for x of shape (..., 2*d).
struct Rows {
  int64_t rows, cols;
};

Rows rows_of_y(const at::Tensor& x) {
  const int64_t cols = x.size(-1) / 2;
  return {cols == 0 ? 0 : x.numel() / x.size(-1), cols};
}

// Where a call on x needs the JIT route before it looks for a kernel: a dtype
// the kernels do not take, 2**31 rows or more, a runtime without the library
// API, and rows of y too long for a 32-bit N or a grid of 65535 programs across.
bool needs_jit(const at::Tensor& x, int64_t rows, int64_t cols, Fallback* why) {
  const at::ScalarType dtype = x.scalar_type();
  if (before_plan(dtype_word(dtype), dtype_name(dtype), rows, why)) return true;
  if (cols > std::numeric_limits<int32_t>::max() / 2 ||
      cdiv(cols, silu_and_mul_tile(cols).block_n) > 65535) {
    *why = {"long", "rows of y of " + std::to_string(cols) +
                        " elements are longer than the kernels compiled ahead of time take"};
    return true;
  }
  return false;
}

// The index of `kernel`'s artifact for rows of `cols` elements of y, and its
// key; -1, with why, where the table does not hold it.
int64_t find_kernel(const char* kernel, const at::Tensor& x, int64_t cols,
                    const DeviceInfo& d, std::string* key, Fallback* why) {
  *key = silu_and_mul_key(kernel, d, dtype_word(x.scalar_type()), cols);
  return find(*key, d, why);
}

// Launches artifact `index` on rows of y of `cols` elements: the grid of the
// JIT route, (cdiv(rows, ROWS), cdiv(cols, BLOCK_N)). `pointers` are the
// kernel's pointer arguments in order; M and N follow (N only where it is not
// the constexpr 1), then Triton's two scratch pointers, null.
void launch_tiles(int64_t index, int device, std::vector<void*> pointers, int64_t rows,
                  int64_t cols) {
  const SiluTile tile = silu_and_mul_tile(cols);
  int32_t m = static_cast<int32_t>(rows);
  int32_t n = static_cast<int32_t>(cols);
  void* global_scratch = nullptr;
  void* profile_scratch = nullptr;
  std::vector<void*> args;
  for (void*& p : pointers) args.push_back(&p);
  args.push_back(&m);
  if (cols != 1) args.push_back(&n);
  args.push_back(&global_scratch);
  args.push_back(&profile_scratch);
  launch(index, device, cdiv(rows, tile.rows), args.data(),
         c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream(),
         cdiv(cols, tile.block_n));
}

// In the order of rms_norm_triton_aot's (triton_aot_cuda.cu): the checks that
// need no plan, then empty outputs, then alignment and the table.
at::Tensor silu_and_mul_cuda(const at::Tensor& x) {
  check_silu_and_mul_args(x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int device = static_cast<int>(x.get_device());
  const auto [rows, cols] = rows_of_y(x);
  Fallback why;
  if (needs_jit(x, rows, cols, &why)) return jit_silu_and_mul(why, x);
  if (rows == 0) return silu_and_mul_empty_output(x);
  const at::Tensor xc = x.contiguous();
  if (misaligned({{"x", xc.const_data_ptr()}}, &why)) return jit_silu_and_mul(why, x);
  std::string key;
  const int64_t index =
      find_kernel("silu_and_mul_forward", x, cols, device_info(device), &key, &why);
  if (index < 0) return jit_silu_and_mul(why, x);
  at::Tensor y = silu_and_mul_empty_output(xc);
  launch_tiles(index, device,
               {const_cast<void*>(xc.const_data_ptr()), y.mutable_data_ptr()}, rows, cols);
  return y;
}

at::Tensor silu_and_mul_backward_cuda(const at::Tensor& grad_y, const at::Tensor& x) {
  check_silu_and_mul_backward_args(grad_y, x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int device = static_cast<int>(x.get_device());
  const auto [rows, cols] = rows_of_y(x);
  Fallback why;
  if (needs_jit(x, rows, cols, &why)) return jit_silu_and_mul_backward(why, grad_y, x);
  if (rows == 0) return at::empty_like(x, at::MemoryFormat::Contiguous);
  const at::Tensor xc = x.contiguous();
  const at::Tensor gc = grad_y.contiguous();
  if (misaligned({{"grad_y", gc.const_data_ptr()}, {"x", xc.const_data_ptr()}}, &why)) {
    return jit_silu_and_mul_backward(why, grad_y, x);
  }
  std::string key;
  const int64_t index =
      find_kernel("silu_and_mul_backward", x, cols, device_info(device), &key, &why);
  if (index < 0) return jit_silu_and_mul_backward(why, grad_y, x);
  at::Tensor grad_x = at::empty_like(xc, at::MemoryFormat::Contiguous);
  launch_tiles(index, device,
               {const_cast<void*>(gc.const_data_ptr()),
                const_cast<void*>(xc.const_data_ptr()), grad_x.mutable_data_ptr()},
               rows, cols);
  return grad_x;
}

// For tests: the key of the kernel `direction` ("forward" or "backward")
// launches for x, then "found" or "missing"; or ["fallback", the reason].
// Alignment is not looked at.
std::vector<std::string> triton_aot_silu_and_mul_route(const std::string& direction,
                                                       const at::Tensor& x) {
  TORCH_CHECK_VALUE(direction == "forward" || direction == "backward",
                    "triton_aot_silu_and_mul_route: direction must be \"forward\" or "
                    "\"backward\", got \"",
                    direction, "\"");
  check_silu_and_mul_args(x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const DeviceInfo& d = device_info(static_cast<int>(x.get_device()));
  const auto [rows, cols] = rows_of_y(x);
  Fallback why;
  if (needs_jit(x, rows, cols, &why)) return {"fallback", why.message};
  std::string key;
  const std::string kernel = "silu_and_mul_" + direction;
  const int64_t index = find_kernel(kernel.c_str(), x, cols, d, &key, &why);
  return {key, index >= 0 ? "found" : "missing"};
}

}  // namespace
}  // namespace opguide::triton_aot

TORCH_LIBRARY_IMPL(opguide, CUDA, m) {
  m.impl("silu_and_mul_triton_aot", &opguide::triton_aot::silu_and_mul_cuda);
  m.impl("silu_and_mul_backward_triton_aot",
         &opguide::triton_aot::silu_and_mul_backward_cuda);
}

TORCH_LIBRARY_FRAGMENT(opguide_checks, m) {
  m.def("triton_aot_silu_and_mul_route(str direction, Tensor x) -> str[]");
}

TORCH_LIBRARY_IMPL(opguide_checks, CUDA, m) {
  m.impl("triton_aot_silu_and_mul_route",
         &opguide::triton_aot::triton_aot_silu_and_mul_route);
}
