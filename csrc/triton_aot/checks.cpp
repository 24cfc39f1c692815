// The C++ side of the Triton kernels compiled ahead of time, callable from
// Python in every build, CPU-only ones included: the Registers planner and its
// align (plan.h), which tests/test_triton_aot_plan.py compares with the JIT
// route's (opguide/triton/launch.py), and the keys of the kernels one call
// launches (route.h), which tests/test_triton_aot.py checks the build
// (opguide/triton/aot.py) compiles, for any device they describe.
//
// Their own namespace, not opguide's: each operator of opguide has a fake
// kernel and a case in tests/test_fake_kernels.py, and these take no tensor
// and compute nothing a model calls.
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan.h"
#include "route.h"

namespace {

// [block_n, rows, num_warps, programs, stages] of the Registers plan of `op`
// ("forward" or "backward") for rows of `itemsize`-byte elements on a GPU of
// sm_count SMs and smem_optin bytes of opt-in shared memory per block (0:
// unknown); empty where launch.py returns Split or Chunked.
std::vector<int64_t> triton_aot_plan(const std::string& op, int64_t rows, int64_t cols,
                                     int64_t itemsize, int64_t sm_count,
                                     int64_t smem_optin) {
  using opguide::triton_aot::Registers;
  Registers plan{};
  bool registers = false;
  if (op == "forward") {
    registers = opguide::triton_aot::forward_registers(rows, cols, itemsize, &plan);
  } else if (op == "backward") {
    registers = opguide::triton_aot::backward_registers(rows, cols, itemsize, sm_count,
                                                        smem_optin, &plan);
  } else {
    TORCH_CHECK_VALUE(false,
                      "triton_aot_plan: op must be \"forward\" or \"backward\", got \"",
                      op, "\"");
  }
  if (!registers) return {};
  return {plan.block_n, plan.rows, plan.num_warps, plan.programs, plan.stages};
}

// ALIGN of the kernels for a row length n: part of each artifact's key.
int64_t triton_aot_align(int64_t n) { return opguide::triton_aot::align(n); }

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
      "triton_aot_plan(str op, int rows, int cols, int itemsize, int sm_count,"
      " int smem_optin) -> int[]",
      &triton_aot_plan);
  m.def("triton_aot_align(int n) -> int", &triton_aot_align);
  m.def(
      "triton_aot_keys(str direction, int rows, int cols, str dtype, str target, int "
      "sm_count,"
      " int smem_optin, bool gdc) -> str[]",
      &triton_aot_keys);
}
