// The keys of the kernels one call of the route compiled ahead of time
// launches (route.h), callable from Python in every build, CPU-only ones
// included, so that tests/test_triton_aot.py can check that the build
// (opguide/triton/aot.py) compiles every kernel the C++ side asks for, on a
// device it describes. In opguide_checks, as plan_check.cpp's: not an
// operator a model calls.
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan.h"
#include "route.h"

namespace {

// The keys a call of `direction` ("forward", "inference" or "backward") on
// `rows` rows of `cols` elements of `dtype` ("fp32", "fp16" or "bf16") looks
// up on a GPU named `target` of sm_count SMs, smem_optin bytes of opt-in
// shared memory per block and PDL (gdc) or not; empty where the plan is not
// Registers (the JIT route's split and chunked kernels).
std::vector<std::string> triton_aot_keys(const std::string& direction, int64_t rows,
                                         int64_t cols, const std::string& dtype,
                                         const std::string& target, int64_t sm_count,
                                         int64_t smem_optin, bool gdc) {
  using namespace opguide::triton_aot;
  TORCH_CHECK_VALUE(
      dtype == "fp32" || dtype == "fp16" || dtype == "bf16",
      "triton_aot_keys: dtype must be \"fp32\", \"fp16\" or \"bf16\", got \"", dtype,
      "\"");
  const int64_t itemsize = dtype == "fp32" ? 4 : 2;
  const Device d{target, sm_count, smem_optin, gdc};
  Registers plan{};
  if (direction == "forward" || direction == "inference") {
    if (!forward_registers(rows, cols, itemsize, &plan)) return {};
    return {forward_key(d, dtype.c_str(), plan, direction == "forward", cols)};
  }
  TORCH_CHECK_VALUE(direction == "backward",
                    "triton_aot_keys: direction must be \"forward\", \"inference\" or "
                    "\"backward\", got \"",
                    direction, "\"");
  if (!backward_registers(rows, cols, itemsize, sm_count, smem_optin, &plan)) return {};
  std::vector<std::string> keys{backward_key(d, dtype.c_str(), plan, cols)};
  if (backward_sums(plan, dtype == "fp32"))
    keys.push_back(sum_key(d, dtype.c_str(), cols));
  return keys;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opguide_checks, m) {
  m.def(
      "triton_aot_keys(str direction, int rows, int cols, str dtype, str target, int "
      "sm_count,"
      " int smem_optin, bool gdc) -> str[]",
      &triton_aot_keys);
}
