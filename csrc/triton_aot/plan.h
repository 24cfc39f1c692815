// The Triton RMSNorm kernels' Registers plans in C++, for the kernels compiled
// ahead of time and launched from C++: the same choices as the JIT route's
// planners in opguide/triton/launch.py (forward_config, backward_config,
// align, GRAD_WEIGHT_SUM), which stay the source of truth and give each
// number its reason. Only the branch a CUDA device takes: the interpreter's
// plans are launched from Python. Where launch.py returns Split or Chunked
// these return false, and the call takes the JIT route.
// tests/test_triton_aot_plan.py compares both planners through
// opguide_checks::triton_aot_plan (checks.cpp). Plain C++; torch- and
// CUDA-free.
#pragma once

#include <algorithm>
#include <cstdint>

namespace opguide::triton_aot {

// launch.cdiv: ceil(a / b), rounding as Python's -(-a // b) for every sign.
constexpr int64_t cdiv(int64_t a, int64_t b) {
  return a / b + ((a % b != 0) && ((a < 0) == (b < 0)) ? 1 : 0);
}

// launch.next_power_of_2: the smallest power of two >= n (1 for n <= 1), for
// n <= 2**62.
constexpr int64_t next_power_of_2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// launch.align: ALIGN of the kernels, the largest of 1, 2, 4, 8 and 16 that
// divides n (16 for 0). Each kernel rewrites N as a multiple of ALIGN so that
// Triton sees rows start on 16-byte boundaries when they do, and loads whole
// vectors. Computed on the unsigned bits, as Python's n & -n is for any int.
constexpr int64_t align(int64_t n) {
  const uint64_t bits = static_cast<uint64_t>(n);
  const uint64_t lowest = bits & (~bits + 1);
  return lowest == 0 ? 16 : static_cast<int64_t>(std::min<uint64_t>(lowest, 16));
}

// launch.MAX_REGISTER_ROW and MAX_REGISTER_ROW_BACKWARD: the longest rows
// (elements) the forward and the backward keep in registers.
constexpr int64_t kMaxRegisterRow = 16384, kMaxRegisterRowBackward = 8192;

// launch.Registers: whole rows in registers, `rows` rows of `block_n` columns
// a program (a loop step for the backward). programs is the backward's grid
// (0 for the forward, whose grid is cdiv(rows, plan.rows)); stages the
// backward's rows loaded ahead.
struct Registers {
  int64_t block_n, rows, num_warps, programs, stages;
};

// launch.GRAD_WEIGHT_SUM: the second stage of the backward's grad_weight, over
// the programs' float32 partial sums, block_p partial rows by block_n columns
// a step; its grid is cdiv(cols, block_n).
struct GradWeightSum {
  int64_t block_p = 128, block_n = 32, num_warps = 2;
};

// launch.forward_config's Registers branch on a CUDA device: 2048 elements a
// program (one row, where longer) and 16 a thread, 32 for rows longer than
// 4096. rows and itemsize do not change the plan. False for rows longer than
// kMaxRegisterRow (launch.py splits or chunks them).
inline bool forward_registers(int64_t rows, int64_t cols, int64_t itemsize,
                              Registers* out) {
  (void)rows;
  (void)itemsize;
  if (cols > kMaxRegisterRow) return false;
  const int64_t block = next_power_of_2(cols);
  const int64_t per_program = std::max<int64_t>(1, 2048 / block);
  const int64_t elements = per_program * block;
  const int64_t warps = std::min<int64_t>(std::max<int64_t>(elements / 512, 1),
                                          elements <= 8192 ? 8 : 16);
  *out = Registers{block, per_program, warps, 0, 1};
  return true;
}

// launch.backward_config's Registers branch on a CUDA device of sm_count SMs
// and smem_optin bytes of opt-in shared memory per block (0 when the device
// does not say: 96 KiB, as launch.py's getattr fallback). Loop steps of 4096
// elements (2048 of float32) in at most 64 rows; three stages of x and grad_y
// in shared memory when they fit 8 KiB under the budget, else fewer; two
// programs per SM for steps of up to 4096 elements, one for larger; 4 warps
// below 4096 elements a step, 8 from 4096. False for rows longer than
// kMaxRegisterRowBackward (launch.py splits or chunks them).
inline bool backward_registers(int64_t rows, int64_t cols, int64_t itemsize,
                               int64_t sm_count, int64_t smem_optin, Registers* out) {
  if (cols > kMaxRegisterRowBackward) return false;
  const int64_t block = next_power_of_2(cols);
  const int64_t elements = itemsize <= 2 ? 4096 : 2048;
  const int64_t per_step =
      std::max<int64_t>(1, std::min<int64_t>(elements / block, 64));
  const int64_t step = per_step * block;
  const int64_t budget = smem_optin != 0 ? smem_optin : 96 * 1024;
  int64_t stages = 3;
  while (stages > 1 && stages * 2 * step * itemsize > budget - 8 * 1024) --stages;
  const int64_t programs = sm_count * (step <= 4096 ? 2 : 1);
  const int64_t warps = step < 4096 ? 4 : 8;
  *out = Registers{block, per_step, warps,
                   std::max<int64_t>(1, std::min(programs, rows)), stages};
  return true;
}

}  // namespace opguide::triton_aot
