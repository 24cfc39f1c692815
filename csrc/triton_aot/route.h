// The names of the kernels one call of the Triton route compiled ahead of
// time launches: opguide/triton/aot.py's key(), byte for byte,
// "kernel|target|dtype|NAME=v,...|spec|wN", formed from the plans of plan.h.
// triton_aot_cuda.cu looks them up in the build's table; checks.cpp
// exposes them in every build, so that tests/test_triton_aot.py compares them
// with the keys aot.py compiles, on the CPU. Plain C++; torch- and CUDA-free.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "plan.h"

namespace opguide::triton_aot {

// Why a call takes another route: `kind` names the reason for the warning that
// is given once per kind (a short stable word: "target", "artifact", "rows",
// ...), `message` says it in a sentence, with the values of this call.
struct Fallback {
  const char* kind;
  std::string message;
};

// What the plans and the keys read of a GPU.
struct Device {
  std::string target;      // "sm_90"; on AMD the gcnArchName before ':'
  int64_t sm_count = 0;    // multiProcessorCount: the backward's programs
  int64_t smem_optin = 0;  // sharedMemPerBlockOptin: the backward's STAGES (0: unknown)
  bool gdc = false;        // GDC=1, and launched with programmatic dependent launch
};

// The key's word for a dtype the kernels take, or nullptr, for torch's
// ScalarType (c10::ScalarType, also named torch::headeronly::ScalarType, as
// the stable library spells it): a template, so that this header includes
// no torch header.
template <class ScalarType>
const char* dtype_word(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return "fp32";
    case ScalarType::Half:
      return "fp16";
    case ScalarType::BFloat16:
      return "bf16";
    default:
      return nullptr;
  }
}

// How Triton specialises N: the constexpr 1, a multiple of 16, or neither.
inline const char* spec(int64_t n) { return n == 1 ? "1" : n % 16 == 0 ? "D" : "N"; }

// key(): the constexprs in the kernel's parameter order, booleans as 0/1.
inline std::string make_key(
    const char* kernel, const Device& d, const char* dtype,
    std::initializer_list<std::pair<const char*, int64_t>> constexprs, int64_t cols,
    int64_t num_warps) {
  std::string s;
  s.reserve(96);
  s.append(kernel).append("|").append(d.target).append("|").append(dtype);
  const char* sep = "|";
  for (const auto& [name, value] : constexprs) {
    s.append(sep).append(name).append("=").append(std::to_string(value));
    sep = ",";
  }
  s.append("|").append(spec(cols)).append("|w").append(std::to_string(num_warps));
  return s;
}

// _rms_norm_forward_kernel's key for the plan `c` (STORE_INV: the training forward).
inline std::string forward_key(const Device& d, const char* dtype, const Registers& c,
                               bool store_inv, int64_t cols) {
  return make_key("rms_norm_forward", d, dtype,
                  {{"BLOCK_N", c.block_n},
                   {"ROWS", c.rows},
                   {"STORE_INV", store_inv},
                   {"GDC", d.gdc},
                   {"ALIGN", align(cols)}},
                  cols, c.num_warps);
}

// _rms_norm_backward_kernel's key for the plan `c`.
inline std::string backward_key(const Device& d, const char* dtype, const Registers& c,
                                int64_t cols) {
  return make_key("rms_norm_backward", d, dtype,
                  {{"BLOCK_N", c.block_n},
                   {"ROWS", c.rows},
                   {"STAGES", c.stages},
                   {"GDC", d.gdc},
                   {"ALIGN", align(cols)}},
                  cols, c.num_warps);
}

// Whether the backward adds its programs' partial rows with the sum kernel.
// The JIT route lets a single program write grad_weight itself, through a
// grad_weight_partial pointer of the weight's dtype. The artifacts are
// compiled with float32 partial sums (opguide/triton/aot.py), so a 16-bit
// grad_weight of one program goes through the sum kernel too: the sum of one
// float32 row is that row, rounded once, as the JIT route rounds it.
inline bool backward_sums(const Registers& c, bool float32) {
  return c.programs > 1 || !float32;
}

// _grad_weight_sum_kernel's key (launch.GRAD_WEIGHT_SUM), for rows of `cols`.
inline std::string sum_key(const Device& d, const char* dtype, int64_t cols) {
  const GradWeightSum sum;
  return make_key("grad_weight_sum", d, dtype,
                  {{"BLOCK_P", sum.block_p},
                   {"BLOCK_N", sum.block_n},
                   {"GDC", d.gdc},
                   {"ALIGN", align(cols)}},
                  cols, sum.num_warps);
}

}  // namespace opguide::triton_aot
