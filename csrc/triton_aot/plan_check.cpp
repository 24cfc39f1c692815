// The C++ Registers planner of the Triton kernels compiled ahead of time
// (plan.h) and its align, callable from Python in every build, CPU-only ones
// included, so that tests/test_triton_aot_plan.py can compare them with the
// JIT route's (opguide/triton/launch.py) for any device it describes.
//
// Its own namespace, not opguide's: each operator of opguide has a fake kernel
// and a case in tests/test_fake_kernels.py, and this one takes no tensor and
// computes nothing a model calls.
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan.h"

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

}  // namespace

TORCH_LIBRARY_FRAGMENT(opguide_checks, m) {
  m.def(
      "triton_aot_plan(str op, int rows, int cols, int itemsize, int sm_count,"
      " int smem_optin) -> int[]",
      &triton_aot_plan);
  m.def("triton_aot_align(int n) -> int", &triton_aot_align);
}
